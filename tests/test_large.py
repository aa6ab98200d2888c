"""More than 2**31 elements: indexing is 64-bit throughout.

One float16 array of 2**31 + 7 values (4 GiB), a period-1021 pattern, so
that the expected statistics of any slice are exact float64 sums over one
period and a remainder (small pieces, plain NumPy; nothing here calls
fastnorm for an expected value).  A single slice longer than 2**31 values,
a reversed view whose first element lies 4 GiB past its base, a column
pattern whose rows reach 4 GiB into the buffer, each with element and byte
offsets past 2**31.  Peak memory about 4.5 GiB.

Slow (about half a minute here) and opt-in: ``pytest -m slow tests/test_large.py``
(or with CI or FASTNORM_LARGE set, as .ci/run does).
"""
import math
import os

import numpy as np
import pytest

import fastnorm

N = 2**31 + 7
PERIOD = 1021          # odd: every column of a 2-column view sees all of it
GIB = 2**30

pytestmark = pytest.mark.slow


def _available_bytes():
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


@pytest.fixture(autouse=True)
def _opt_in(request):
    asked = (request.config.getoption("markexpr") == "slow" or os.environ.get("CI")
             or os.environ.get("FASTNORM_LARGE"))
    if not asked:
        pytest.skip("4 GiB arrays: run with `pytest -m slow` (or CI / FASTNORM_LARGE set)")
    avail = _available_bytes()
    if avail is not None and avail < 6 * GIB:
        pytest.skip(f"needs about 6 GiB of free memory, {avail / GIB:.1f} GiB available")


PATTERN = (3.0 + 2.0 * np.random.default_rng(0).standard_normal(PERIOD)).astype(np.float16)


@pytest.fixture
def x():
    """A fresh 4 GiB float16 array: PATTERN repeated to N values (by
    doubling copies, a few memcpy passes)."""
    a = np.empty(N, dtype=np.float16)
    a[:PERIOD] = PATTERN
    done = PERIOD
    while done < N:
        step = min(done, N - done)
        a[done:done + step] = a[:step]
        done += step
    yield a
    del a


def periodic_stats(seq, m):
    """(mean, biased variance) of seq repeated to m values, from float64
    sums over one period and the remainder."""
    s = np.asarray(seq, dtype=np.float64)
    q, r = divmod(m, s.size)
    total = q * math.fsum(s) + math.fsum(s[:r])
    mean = total / m
    d2 = (s - mean) ** 2
    m2 = q * math.fsum(d2) + math.fsum(d2[:r])
    return mean, m2 / m


# Indices on both sides of 2**31 (and of 2**32 bytes).
PROBES = [0, 1, PERIOD + 3, 2**31 - 1, 2**31, N - 1]


@pytest.mark.parametrize("threads", [1, 2])
def test_mean_var_of_one_slice_of_more_than_2_31_values(x, threads):
    fastnorm.set_num_threads(threads)
    mean, var = fastnorm.mean_var(x, dtype=np.float64)
    em, ev = periodic_stats(PATTERN, N)
    np.testing.assert_allclose(mean, em, rtol=1e-10)
    np.testing.assert_allclose(var, ev, rtol=1e-9)


def test_mean_var_of_a_reversed_view_and_a_strided_one(x):
    # x[::-1] starts 4 GiB past the start of its buffer; x[::3] steps over it.
    em, ev = periodic_stats(PATTERN, N)
    mean, var = fastnorm.mean_var(x[::-1], dtype=np.float64)
    np.testing.assert_allclose([mean, var], [em, ev], rtol=1e-9)
    m3 = len(range(0, N, 3))
    em3, ev3 = periodic_stats(PATTERN[np.arange(PERIOD) * 3 % PERIOD], m3)
    mean, var = fastnorm.mean_var(x[::3], dtype=np.float64)
    np.testing.assert_allclose([mean, var], [em3, ev3], rtol=1e-9)


def test_layer_norm_into_out_over_more_than_2_31_values(x):
    # In place (out=x): one slice of N values, the output written at every
    # index past 2**31.  float16 output; the statistics come back float32.
    em, ev = periodic_stats(PATTERN, N)
    before = x[PROBES].astype(np.float64)
    y, mean, rstd = fastnorm.layer_norm(x, axis=0, out=x, return_stats=True, eps=0.0)
    assert y is x
    np.testing.assert_allclose(mean, [em], rtol=1e-6)
    np.testing.assert_allclose(rstd, [1 / math.sqrt(ev)], rtol=1e-6)
    expected = (before - em) / math.sqrt(ev)
    np.testing.assert_allclose(y[PROBES].astype(np.float64), expected, rtol=5e-3, atol=2e-3)
    # The last whole periods of the output equal the first (no index wrapped).
    start = (N - 3 * PERIOD) // PERIOD * PERIOD
    tail = y[start:start + 3 * PERIOD]
    np.testing.assert_array_equal(tail.reshape(3, PERIOD), np.tile(y[:PERIOD], (3, 1)))


def test_batch_norm_over_the_rows_of_a_column_view(x):
    # (2**21, 1024) over axis 0: the column pattern, the last row 4 GiB into
    # the buffer; in place through the view.
    c = 1024
    m = N // c
    v = x[:m * c].reshape(m, c)
    stats = [periodic_stats(PATTERN[(c * np.arange(PERIOD) + j) % PERIOD], m) for j in range(c)]
    rows = [0, 1, m // 2, m - 1]
    before = v[rows].astype(np.float64)
    last_row = v[m - 1].__array_interface__["data"][0] - x.__array_interface__["data"][0]
    assert last_row > 2**32 - 4096
    y, mean, rstd = fastnorm.batch_norm(v, axis=0, eps=0.0, out=v, return_stats=True)
    assert y is v
    np.testing.assert_allclose(mean.ravel(), [s[0] for s in stats], rtol=1e-6)
    np.testing.assert_allclose(rstd.ravel(), [1 / math.sqrt(s[1]) for s in stats], rtol=1e-6)
    expected = (before - [s[0] for s in stats]) / np.sqrt([s[1] for s in stats])
    np.testing.assert_allclose(y[rows].astype(np.float64), expected, rtol=5e-3, atol=2e-3)
