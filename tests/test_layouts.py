"""Fixed shapes and layouts chosen to cross the kernels' internal boundaries:
the multi-threaded threshold (65536 elements), the 4096-value blocks of a
long slice, the column tiles (2048 columns; 1024 in the gradients) and >= 64-row
blocks of the columns pattern.  Each case states which access pattern it takes
(fastnorm.explain), so both are exercised whatever the hypothesis draws happen
to be.  (out= in other layouts than x: test_out.py.)"""
import numpy as np
import pytest

import fastnorm
from reference import assert_close, keep_shape, ref_layer_norm, ref_mean_var, ref_rms_norm


def _pattern(x, axes):
    """How the kernels see the axes of the statistics of x over axes."""
    return fastnorm.explain(fastnorm.mean_var, x, axis=axes)["pattern"]


def _data(shape, dtype=np.float32, seed=0, offset=3.0):
    rng = np.random.default_rng(seed)
    return (offset + rng.standard_normal(shape)).astype(dtype)


# (name, builder of x, reduced axes, expected pattern)
CASES = [
    ("rows-4x20000", lambda: _data((4, 20000)), (1,), "slices"),
    ("rows-6x12289-split", lambda: _data((6, 12289)), (1,), "slices"),
    ("row-1x70000", lambda: _data((1, 70000)), (1,), "slices"),
    ("vector-70000", lambda: _data((70000,)), (0,), "slices"),
    ("many-short-rows", lambda: _data((10000, 7)), (1,), "slices"),
    ("nchw", lambda: _data((8, 16, 24, 24)), (0, 2, 3), "slices"),
    ("rows-reversed", lambda: _data((6, 12289))[:, ::-1], (1,), "slices"),
    ("rows-stepped", lambda: _data((4, 40000))[:, ::2], (1,), "slices"),
    ("cols-10000x7", lambda: _data((10000, 7)), (0,), "columns"),
    ("cols-100x700", lambda: _data((100, 700)), (0,), "columns"),
    ("cols-130x1100", lambda: _data((130, 1100)), (0,), "columns"),
    ("cols-5000x513", lambda: _data((5000, 513)), (0,), "columns"),
    ("cols-3000x1025", lambda: _data((3000, 1025)), (0,), "columns"),
    ("cols-100x2100", lambda: _data((100, 2100)), (0,), "columns"),
    ("fortran-rows", lambda: np.asfortranarray(_data((1000, 513))), (1,), "columns"),
    ("nhwc", lambda: _data((8, 16, 16, 40)), (0, 1, 2), "columns"),
    ("cols-reversed", lambda: _data((300, 700))[::-1, ::-1], (0,), "columns"),
    ("cols-stepped", lambda: _data((600, 1500))[::3, ::2], (0,), "columns"),
    ("transposed-3d", lambda: _data((40, 30, 60)).transpose(2, 0, 1), (1, 2), "columns"),
    ("broadcast-rows", lambda: np.broadcast_to(_data((1, 9000)), (8, 9000)), (1,), "slices"),
    ("broadcast-cols", lambda: np.broadcast_to(_data((1, 700)), (100, 700)), (0,), "columns"),
    ("broadcast-reduced", lambda: np.broadcast_to(_data((4, 1)), (4, 20000)), (1,), None),
]
IDS = [c[0] for c in CASES]


@pytest.fixture(params=CASES, ids=IDS)
def case(request):
    name, build, axes, pattern = request.param
    x = build()
    if pattern is not None:
        assert _pattern(x, axes) == pattern, f"{name} no longer takes the {pattern} pattern"
    return x, axes


def test_both_patterns_are_reachable():
    x = np.zeros((8, 9))
    assert _pattern(x, (1,)) == "slices"
    assert _pattern(x, (0,)) == "columns"
    assert _pattern(np.asfortranarray(x), (1,)) == "columns"
    assert _pattern(np.asfortranarray(x), (0,)) == "slices"


@pytest.mark.parametrize("threads", [1, 2, 4])
def test_mean_var(case, threads):
    x, axes = case
    fastnorm.set_num_threads(threads)
    m, v = fastnorm.mean_var(x, axis=axes, keepdims=True, dtype=np.float64)
    rm, rv, spread = ref_mean_var(x, axes)
    assert_close(m, rm, 1e-12 * spread + 1e-15 * np.abs(rm), "mean")
    assert_close(v, rv, 1e-12 * spread**2 + 1e-14 * rv, "var")


@pytest.mark.parametrize("threads", [1, 2])
def test_layer_norm(case, threads):
    x, axes = case
    fastnorm.set_num_threads(threads)
    rng = np.random.default_rng(1)
    g = rng.uniform(0.5, 2, size=keep_shape(x.shape, tuple(i for i in range(x.ndim) if i not in axes)))
    y, mean, rstd = fastnorm.layer_norm(x, g, np.full_like(g, 0.5), axis=axes, return_stats=True)
    yr, mr, rr, xhat, _ = ref_layer_norm(x, axes, g, 0.5)
    assert_close(y, yr, 1e-6 * (np.abs(yr) + 1) * (1 + np.abs(g)), "y")
    assert_close(mean, mr, 1e-6 * (1 + np.abs(mr)), "mean")
    assert_close(rstd, rr, 1e-6 * rr, "rstd")


@pytest.mark.parametrize("threads", [1, 2])
def test_rms_norm(case, threads):
    x, axes = case
    fastnorm.set_num_threads(threads)
    y, rstd = fastnorm.rms_norm(x, axis=axes, return_stats=True)
    yr, rr = ref_rms_norm(x, axes)
    assert_close(y, yr, 1e-6 * (np.abs(yr) + 1e-3), "y")
    assert_close(rstd, rr, 1e-6 * rr, "rstd")


@pytest.mark.parametrize("training", [True, False])
def test_batch_norm(case, training):
    x, axes = case
    kept = tuple(i for i in range(x.ndim) if i not in axes)
    rng = np.random.default_rng(2)
    named = tuple(x.shape[i] for i in kept)
    rm, rv = rng.standard_normal(named), rng.uniform(0.5, 2, size=named)
    g, b = rng.uniform(0.5, 2, size=named), rng.standard_normal(named)
    kshape = keep_shape(x.shape, axes)
    rm0, rv0 = rm.reshape(kshape).copy(), rv.reshape(kshape).copy()
    y, mean, rstd = fastnorm.batch_norm(x, g, b, rm, rv, axis=axes, training=training,
                                        momentum=0.2, return_stats=True)
    gk, bk = g.reshape(kshape), b.reshape(kshape)
    if training:
        yr, mr, rr, _, _ = ref_layer_norm(x, axes, gk, bk)
        n = x.size // max(1, int(np.prod(named)))
        var = 1 / rr**2 - 1e-5
        assert_close(rm.reshape(kshape), 0.8 * rm0 + 0.2 * mr, 1e-6 * (1 + np.abs(rm0)), "running_mean")
        assert_close(rv.reshape(kshape), 0.8 * rv0 + 0.2 * var * n / (n - 1), 1e-6 * (1 + rv0),
                     "running_var")
    else:
        mr, rr = rm0, 1 / np.sqrt(rv0 + 1e-5)
        yr = (x.astype(np.float64) - mr) * rr * gk + bk
    assert_close(y, yr, 1e-6 * (np.abs(yr) + 1) * (1 + np.abs(gk)), "y")
    assert_close(mean, mr, 1e-6 * (1 + np.abs(mr)), "mean")
    assert_close(rstd, rr, 1e-6 * rr, "rstd")


def test_float16_columns_and_rows():
    x = _data((300, 700), np.float16, offset=0.0)
    for axes in [(0,), (1,)]:
        y = fastnorm.layer_norm(x, axis=axes)
        assert y.dtype == np.float16
        yr = ref_layer_norm(x, axes)[0]
        assert_close(y, yr, 5e-3 * np.abs(yr) + 1e-4, "y")
