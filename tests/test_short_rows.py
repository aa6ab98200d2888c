"""Short rows: slices that are one contiguous run of 8 values up to 1 KiB.

Their statistics are taken a batch of rows at a time (one vector lane per
row; float64 by the corrected two-pass formula, float16/float32 by sums
shifted by each row's first value, in one look), and rows that follow each
other in x and y are normalized as one run whose vectors may cross from one
row into the next.  Without statistics to return, a batch's coefficients
are made in vectors; batches that cannot (non-finite rows, float32 cannot
hold a row's coefficients) fall back to the row-by-row way.  These cases
hit that way: row lengths that do and do not fill whole vectors, row counts
that leave a partial batch and several work items, gamma and beta along
the row or one for all, outputs that are not where the rows end (which keep
the row-by-row output), and rows whose sums overflow or meet inf/NaN
(redone Welford's way).  Every value is compared with the plain float64
reference on the same input.
"""
import numpy as np
import pytest
from hypothesis import given, strategies as st

import fastnorm
from fastnorm import _simd
from reference import OUT_TOL, assert_close, ref_layer_norm, ref_mean_var, ref_rms_norm
from strategies import row_problem

EPS = 1e-5


def _tol(y_ref, dtype, spread=1.0):
    return OUT_TOL[np.dtype(dtype)] * (1.0 + np.abs(y_ref)) * spread


def _check_layer_norm(x, gamma, beta, y):
    ref = ref_layer_norm(x, (1,), gamma, beta, eps=EPS)[0]
    assert_close(y, ref, _tol(ref, x.dtype, 4.0), "y")


@st.composite
def short_row_problems(draw):
    dtype = draw(st.sampled_from([np.float32, np.float64, np.float16]))
    limit = 1024 // np.dtype(dtype).itemsize
    n = draw(st.integers(8, limit + 8))           # a few past the limit too
    rows = draw(st.integers(1, 600))
    offset = draw(st.sampled_from([0.0, 3.0, 1e6 if dtype != np.float16 else 100.0]))
    params = draw(st.sampled_from(["none", "along", "one"]))
    seed = draw(st.integers(0, 2**32 - 1))
    return dtype, n, rows, offset, params, seed


@given(short_row_problems())
def test_short_rows_layer_norm(problem):
    x, gamma, beta = row_problem(*problem)
    y, mean, rstd = fastnorm.layer_norm(x, gamma, beta, eps=EPS, return_stats=True)
    ref, rmean, rrstd, _, _ = ref_layer_norm(x, (1,), gamma, beta, eps=EPS)
    assert_close(y, ref, _tol(ref, x.dtype, 4.0), "y")
    # Without statistics (coefficients a batch at a time): the same bits.
    np.testing.assert_array_equal(fastnorm.layer_norm(x, gamma, beta, eps=EPS), y)
    if x.dtype == np.float64:
        assert_close(mean, rmean, 1e-12 * (1 + np.abs(rmean)), "mean")
    else:   # float32 statistics: within an ulp or two of the exact mean
        assert_close(mean, rmean, 2.0 * np.spacing(np.abs(rmean).astype(np.float32)), "mean")
    assert_close(rstd, rrstd, 1e-5 * rrstd if x.dtype != np.float64 else 1e-11 * rrstd, "rstd")


@given(short_row_problems())
def test_short_rows_rms_norm_and_mean_var(problem):
    x, gamma, _ = row_problem(*problem)
    y = fastnorm.rms_norm(x, gamma, eps=EPS)
    ref, _ = ref_rms_norm(x, (1,), gamma, eps=EPS)
    assert_close(y, ref, _tol(ref, x.dtype, 4.0), "rms_norm y")
    mean, var = fastnorm.mean_var(x, axis=1, dtype=np.float64)
    rmean, rvar, _ = ref_mean_var(x, (1,))
    tol = 1e-12 if x.dtype == np.float64 else 1e-9
    assert_close(mean, rmean[:, 0], tol * (1 + np.abs(rmean[:, 0])), "mean")
    # Relative to the variance itself: the looks (float16/float32: one, about
    # each row's first value) keep it exact whatever the offset (1e6 included).
    assert_close(var, rvar[:, 0], tol * rvar[:, 0], "var")


@pytest.mark.parametrize("n", [8, 9, 15, 16, 17, 32, 100, 255])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_short_rows_every_level_and_thread_count(simd_level, n, dtype):
    # Rows of n values, 2100 of them (nine work items, a partial batch);
    # float32 rows of 8 to 15 values are normalized row by row.
    rng = np.random.default_rng(n)
    x = (1e3 + rng.standard_normal((2100, n))).astype(dtype)
    gamma, beta = rng.uniform(0.5, 2.0, n), rng.standard_normal(n)
    outs = []
    for threads in (1, 2):
        fastnorm.set_num_threads(threads)
        outs.append(fastnorm.layer_norm(x, gamma, beta, eps=EPS))
    _check_layer_norm(x, gamma, beta, outs[0])
    np.testing.assert_array_equal(outs[0], outs[1])


@pytest.mark.parametrize("n", list(range(8, 16)))
@pytest.mark.parametrize("shift", [0, 1, 3, 7])
def test_short_rows_shorter_than_a_vector(n, shift):
    # float32 rows of 8 to 15 values: a 16-lane vector of the output pass
    # may hold parts of three rows, each lane with its own row's
    # coefficients; y starts `shift` floats past an aligned address, so the
    # vectors fall across the rows at every offset.
    rng = np.random.default_rng(n * 10 + shift)
    x = (3 + rng.standard_normal((301, n)) * rng.uniform(0.1, 10.0, (301, 1))).astype(np.float32)
    gamma, beta = rng.uniform(0.5, 2.0, n), rng.standard_normal(n)
    flat = np.empty(301 * n + 32, np.float32)
    start = (-flat.ctypes.data // 4) % 16 + shift
    y = flat[start:start + 301 * n].reshape(301, n)
    fastnorm.layer_norm(x, gamma, beta, eps=EPS, out=y)
    _check_layer_norm(x, gamma, beta, y)
    fastnorm.rms_norm(x, gamma, eps=EPS, out=y)
    ref, _ = ref_rms_norm(x, (1,), gamma, eps=EPS)
    assert_close(y, ref, _tol(ref, np.float32, 4.0), "rms_norm y")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_short_rows_output_apart_from_the_rows(dtype):
    # y not where the rows end (a strided view, a misaligned start): still
    # right, whichever way the output goes.
    rng = np.random.default_rng(1)
    x = (5 + rng.standard_normal((700, 48))).astype(dtype)
    gamma, beta = rng.uniform(0.5, 2.0, 48), rng.standard_normal(48)
    wide = np.full((700, 50), 7.0, dtype)
    fastnorm.layer_norm(x, gamma, beta, eps=EPS, out=wide[:, 1:49])
    _check_layer_norm(x, gamma, beta, wide[:, 1:49])
    assert (wide[:, 0] == 7).all() and (wide[:, 49] == 7).all()
    flat = np.full(700 * 48 + 1, 7.0, dtype)
    y = flat[1:].reshape(700, 48)
    fastnorm.layer_norm(x, gamma, beta, eps=EPS, out=y)
    _check_layer_norm(x, gamma, beta, y)
    assert flat[0] == 7


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_short_rows_streamed_misaligned_output(dtype):
    # Over 8 MiB of output is written with non-temporal stores from the
    # first vector-aligned address; rows of 33 values from an odd start.
    rng = np.random.default_rng(2)
    rows = (9 << 20) // (33 * np.dtype(dtype).itemsize) + 5
    x = (2 + rng.standard_normal((rows, 33))).astype(dtype)
    gamma, beta = rng.uniform(0.5, 2.0, 33), rng.standard_normal(33)
    flat = np.empty(rows * 33 + 3, dtype)
    y = flat[3:].reshape(rows, 33)
    fastnorm.layer_norm(x, gamma, beta, eps=EPS, out=y)
    _check_layer_norm(x, gamma, beta, y)


@pytest.mark.parametrize("n", [40, 400])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_short_rows_nonfinite_rows_leave_the_others_alone(dtype, n):
    # (Rows of 400 values: in cache, they take this way too.)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((37, n)).astype(dtype)
    x[3, 5] = np.nan
    x[8, 0] = np.inf
    x[9, n - 1] = -np.inf
    x[10, 2], x[10, 7] = np.inf, -np.inf
    bad = np.zeros(37, bool)
    bad[[3, 8, 9, 10]] = True
    y, mean, rstd = fastnorm.layer_norm(x, eps=EPS, return_stats=True)
    assert np.isnan(y[bad]).any(axis=1).all()
    assert np.isnan(mean[bad]).all()
    np.testing.assert_array_equal(fastnorm.layer_norm(x, eps=EPS), y)
    good = ~bad
    _check_layer_norm(x[good], None, None, y[good])
    m, v = fastnorm.mean_var(x, axis=1)
    assert np.isnan(m[bad]).all() and np.isnan(v[bad]).all()
    rmean, rvar, _ = ref_mean_var(x[good], (1,))
    assert_close(v[good], rvar[:, 0], 1e-5 * rvar[:, 0], "var")


@pytest.mark.parametrize("mode", ["layer", "rms"])
def test_short_rows_batches_float32_cannot_hold_fall_back(mode):
    # float32 rows of 24 values, batches of 8 (AVX-512) or fewer: a row
    # near 1e31 (its float32 mean cannot carry the rounding remainder) and
    # constant rows with eps=0 (an infinite scale) in the middle of ordinary
    # rows; each batch with one of them goes row by row, the others not.
    rng = np.random.default_rng(7)
    x = rng.standard_normal((40, 24)).astype(np.float32)
    x[5] = (1e31 * (1 + 1e-3 * rng.standard_normal(24))).astype(np.float32)
    x[13] = 2.5
    x[22] = 0.0
    gamma, beta = rng.uniform(0.5, 2.0, 24), rng.standard_normal(24)
    if mode == "layer":
        y = fastnorm.layer_norm(x, gamma, beta, eps=0.0)
        y_stats = fastnorm.layer_norm(x, gamma, beta, eps=0.0, return_stats=True)[0]
        ordinary = np.ones(40, bool)
        ordinary[[13, 22]] = False        # 0 / 0: NaN, as the reference says
        ref = ref_layer_norm(x[ordinary], (1,), gamma, beta, eps=0.0)[0]
        assert_close(y[ordinary], ref, _tol(ref, np.float32, 4.0), "y")
    else:
        y = fastnorm.rms_norm(x, gamma, eps=0.0)
        y_stats = fastnorm.rms_norm(x, gamma, eps=0.0, return_stats=True)[0]
        ordinary = np.ones(40, bool)
        ordinary[22] = False
        ref = ref_rms_norm(x[ordinary], (1,), gamma, eps=0.0)[0]
        assert_close(y[ordinary], ref, _tol(ref, np.float32, 4.0), "y")
    np.testing.assert_array_equal(y, y_stats)


def test_short_rows_sums_that_overflow_are_redone():
    # 32 values near the top of float64's range: their sum overflows, their
    # mean does not.  The batch's two-pass sums give inf; Welford's running
    # mean, which the row is handed back to, stays finite.
    rng = np.random.default_rng(4)
    x = rng.uniform(2e307, 1.7e308, (20, 32))
    x[1] = rng.standard_normal(32)               # an ordinary row in the batch
    mean, _ = fastnorm.mean_var(x, axis=1)
    expected = (x / 32).sum(axis=1)
    assert np.isfinite(mean).all()
    assert_close(mean, expected, 1e-12 * np.abs(expected) + 1e-300, "mean")
    rmean, rvar, _ = ref_mean_var(x[1:2], (1,))
    assert_close(fastnorm.mean_var(x, axis=1)[1][1], rvar[0, 0], 1e-12 * rvar[0, 0], "var")


def test_short_rows_eval_statistics_given():
    # Batch norm over a single image of (C, 16..) maps: one run per channel,
    # statistics given (no moments taken).
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 24, 5, 7))
    rm, rv = rng.standard_normal(24), rng.uniform(0.5, 2.0, 24)
    gamma, beta = rng.uniform(0.5, 2.0, 24), rng.standard_normal(24)
    y = fastnorm.batch_norm(x, gamma, beta, rm, rv, training=False, eps=EPS)
    c = (slice(None), None, None)
    ref = (x - rm[c]) / np.sqrt(rv[c] + EPS) * gamma[c] + beta[c]
    assert_close(y, ref, 1e-12 * (1 + np.abs(ref)), "y")


@pytest.mark.parametrize("shape", [(300, 64), (50, 500)])
def test_short_rows_invariances(shape):
    # Layer norm is invariant to re-scaling and re-centring each row (rows
    # of 500 float64 values: short-rows way because the call is in cache).
    rng = np.random.default_rng(6)
    x = rng.standard_normal(shape)
    a = rng.uniform(0.1, 10.0, (shape[0], 1))
    b = rng.uniform(-100.0, 100.0, (shape[0], 1))
    y1 = fastnorm.layer_norm(x, eps=0.0)
    y2 = fastnorm.layer_norm(a * x + b, eps=0.0)
    assert_close(y2, y1, 1e-11 * (1 + np.abs(y1)), "invariance")
    assert _simd.kernels.layout_pattern(x, (False, True)) == "slices"
