"""Both ways the kernels share work among threads: calls on x of at most
`same_split_bytes` split it statically, larger ones take it as threads come
free (forward guided, gradients one block at a time).  Each way gives the
bits of one thread, for every layout, and calls from several threads at once
still give them."""
import threading

import numpy as np
import pytest

import fastnorm
from fastnorm import _simd
from reference import assert_bitwise

SAME_SPLIT = _simd.kernels.same_split_bytes


def _x(rows, cols, dtype, seed=0):
    rng = np.random.default_rng(seed)
    return (3.0 + rng.standard_normal((rows, cols)) * 2).astype(dtype)


def _rows_for(nbytes, cols, dtype):
    """Rows of `cols` values that take just over nbytes."""
    return nbytes // (cols * np.dtype(dtype).itemsize) + 1


# (name, columns, axis): rows (slices), columns (COLUMNS pattern), and an
# NCHW view for batch norm's images.
LAYOUTS = [("rows", 1024, -1), ("columns", 512, 0), ("nchw", 4096, (0, 2, 3))]


def _results(x, axis):
    if axis == (0, 2, 3):
        x = x.reshape(x.shape[0], 4, 32, 32)
    red = tuple(np.atleast_1d(axis) % x.ndim)
    keep = tuple(s if i not in red else 1 for i, s in enumerate(x.shape))
    named = tuple(s for i, s in enumerate(x.shape) if i not in red)
    g = np.linspace(0.5, 2.0, int(np.prod(named))).reshape(named)
    dy = np.cos(np.arange(x.size)).reshape(x.shape).astype(x.dtype)
    out = list(fastnorm.mean_var(x, axis=axis))
    y, mean, rstd = fastnorm.layer_norm(x, axis=axis, return_stats=True)
    out += [y, mean, rstd]
    out += list(fastnorm.layer_norm_backward(dy, x, mean.reshape(keep), rstd.reshape(keep),
                                             axis=axis))
    out += list(fastnorm.batch_norm(x, g, None, axis=red, return_stats=True))
    return [np.asarray(a) for a in out]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("side", ["same split", "taken as threads come free"])
@pytest.mark.parametrize("layout", LAYOUTS, ids=[name for name, _, _ in LAYOUTS])
def test_either_schedule_gives_the_bits_of_one_thread(layout, side, dtype):
    _, cols, axis = layout
    nbytes = SAME_SPLIT // 2 if side == "same split" else SAME_SPLIT
    x = _x(_rows_for(nbytes, cols, dtype), cols, dtype)
    assert (x.nbytes <= SAME_SPLIT) == (side == "same split")
    try:
        fastnorm.set_num_threads(1)
        serial = _results(x, axis)
        for n in (2, 3):
            fastnorm.set_num_threads(n)
            for k, (a, b) in enumerate(zip(_results(x, axis), serial)):
                assert_bitwise(a, b, f"{side}: result {k} with {n} threads vs 1")
    finally:
        fastnorm.set_num_threads(None)
    # ... and those bits are layer_norm's: a float64 reference of the rows case
    if axis == -1:
        ref = x.astype(np.float64)
        ref = (ref - ref.mean(-1, keepdims=True)) / np.sqrt(ref.var(-1, keepdims=True) + 1e-5)
        tol = 1e-5 if dtype == np.float32 else 1e-12
        np.testing.assert_allclose(serial[2], ref, rtol=0, atol=tol)


def test_concurrent_calls_on_either_side_of_the_split():
    """Threads calling on small arrays (static split) and one calling on
    large ones (shared out as threads come free), at once: each sets its own
    schedule, and every result is the one each call gives alone."""
    small = _x(64, 1024, np.float32, seed=1)
    large = _x(_rows_for(SAME_SPLIT, 1024, np.float32), 1024, np.float32, seed=2)
    want = {id(a): fastnorm.layer_norm(a) for a in (small, large)}
    errors = []

    def hammer(a):
        try:
            for _ in range(20):
                assert_bitwise(fastnorm.layer_norm(a), want[id(a)], f"{a.shape}")
        except AssertionError as e:
            errors.append(e)

    threads = [threading.Thread(target=hammer, args=(a,)) for a in (small, large, small)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
