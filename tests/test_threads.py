"""Bitwise reproducibility across OpenMP thread counts: every function's
results (statistics and running statistics included) are the bits of one
thread on 2, 3, 4 and 7 threads, whichever way the kernels share the work
(calls on x of at most `same_split_bytes` split it statically, larger ones
take it as threads come free: forward guided, gradients one block at a
time), and under a threadpoolctl limit.  fastnorm.explain confirms each
call runs on the threads asked for.  Nothing here is timed.  (Calls from
many Python threads at once: test_concurrency.py.)"""
import numpy as np
import pytest
from threadpoolctl import threadpool_limits

import fastnorm
from reference import assert_bitwise
from routes import SAME_SPLIT, route, rows_for, rows_x

F32, F64 = np.dtype(np.float32), np.dtype(np.float64)


def _x(shape, dtype=np.float32, seed=0, offset=5.0):
    rng = np.random.default_rng(seed)
    return (offset + rng.standard_normal(shape) * 2).astype(dtype)


# Large enough for the parallel paths: whole slices per thread, few long
# slices split into blocks, column tiles, row blocks (up to 1 MiB of a tile
# each while 16 blocks remain: "columns" and "nhwc" have several), NCHW
# batch norm.
WORKLOADS = {
    "rows": (lambda: _x((64, 1024)), -1),
    "long-rows": (lambda: _x((4, 20000)), -1),
    "one-row": (lambda: _x((70_000,), np.float64), None),
    "columns": (lambda: _x((30000, 40)), 0),
    "column-tiles": (lambda: _x((100, 2100)), 0),
    "nchw": (lambda: _x((8, 16, 32, 32), np.float16), (0, 2, 3)),
    "nhwc": (lambda: _x((16, 48, 32, 24), np.float64), (0, 1, 2)),
}


def _all_results(x, axis):
    """Every function's outputs on x (statistics included)."""
    kept = tuple(i for i in range(x.ndim)
                 if i not in (range(x.ndim) if axis is None else np.atleast_1d(axis) % x.ndim))
    named = tuple(x.shape[i] for i in kept)
    rng = np.random.default_rng(1)
    g, b = rng.uniform(0.5, 2, size=named), rng.standard_normal(named)
    out = list(fastnorm.mean_var(x, axis=axis, ddof=1))
    out += fastnorm.layer_norm(x, axis=axis, return_stats=True)
    out += fastnorm.rms_norm(x, axis=axis, return_stats=True)
    if named:  # batch norm needs kept axes to carry its parameters
        rm, rv = np.zeros(named), np.ones(named)
        out += fastnorm.batch_norm(x, g, b, rm, rv, axis=axis, return_stats=True)
        out += [rm, rv]
        out += fastnorm.batch_norm(x, g, b, rm, rv, axis=axis, training=False, return_stats=True)
    return [np.asarray(a) for a in out]


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_bitwise_identical_for_any_thread_count(name):
    build, axis = WORKLOADS[name]
    x = build()
    fastnorm.set_num_threads(1)
    serial = _all_results(x, axis)
    for n in (2, 3, 4, 7):
        fastnorm.set_num_threads(n)
        assert route(fastnorm.layer_norm, x, axis=axis)["threads"] == n
        for k, (a, b) in enumerate(zip(_all_results(x, axis), serial)):
            assert_bitwise(a, b, f"{name}: result {k} with {n} threads vs 1")


# group_norm with a gain per channel: each group one block of x, its
# statistics one run (whole slices a thread, or two long slices split into
# blocks on more threads than slices), its runs written with their gains;
# and its gradients.
GROUP_CASES = {"whole": ((8, 128, 14, 14), 4), "split": ((1, 64, 48, 48), 2)}


@pytest.mark.parametrize("dtype", [F32, F64], ids=str)
@pytest.mark.parametrize("case", list(GROUP_CASES))
def test_group_norm_bitwise_identical_for_any_thread_count(case, dtype):
    shape, groups = GROUP_CASES[case]
    x = _x(shape, dtype)
    rng = np.random.default_rng(2)
    g, b = rng.uniform(0.5, 2, shape[1]), rng.standard_normal(shape[1])
    dy = rng.standard_normal(shape).astype(dtype)

    def results():
        y, mean, rstd = fastnorm.group_norm(x, groups, g, b, return_stats=True)
        return (y, mean, rstd) + fastnorm.group_norm_backward(dy, x, mean, rstd, groups, g)

    try:
        fastnorm.set_num_threads(1)
        serial = results()
        for n in (2, 3, 4):
            fastnorm.set_num_threads(n)
            assert route(fastnorm.group_norm, x, groups, g, b)["threads"] == n
            for k, (a, c) in enumerate(zip(results(), serial)):
                assert_bitwise(a, c, f"{case}: result {k} with {n} threads vs 1")
    finally:
        fastnorm.set_num_threads(None)


def test_threadpoolctl_limit_gives_the_same_bits():
    x, axis = WORKLOADS["long-rows"][0](), -1
    with threadpool_limits(limits=1, user_api="openmp"):
        assert fastnorm.get_num_threads() == 1
        limited = _all_results(x, axis)
    for a, b in zip(_all_results(x, axis), limited):
        assert_bitwise(a, b)


@pytest.mark.parametrize("n", [2, 3])
def test_threadpoolctl_limit_caps_set_num_threads(n):
    # set_num_threads is an upper bound; a threadpool_limits block in force
    # caps every call, and leaving it restores the count.
    x = WORKLOADS["long-rows"][0]()
    fastnorm.set_num_threads(n)
    try:
        with threadpool_limits(limits=1, user_api="openmp"):
            assert fastnorm.get_num_threads() == 1
            assert route(fastnorm.layer_norm, x)["threads"] == 1
        assert fastnorm.get_num_threads() == n
        assert route(fastnorm.layer_norm, x)["threads"] == n
    finally:
        fastnorm.set_num_threads(None)


# --------------------------------------------------------------------------
# either way of sharing the work



# (name, columns, axis): rows (slices), columns (COLUMNS pattern), and an
# NCHW view for batch norm's images.
SCHEDULE_LAYOUTS = [("rows", 1024, -1), ("columns", 512, 0), ("nchw", 4096, (0, 2, 3))]


def _schedule_results(x, axis):
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
@pytest.mark.parametrize("layout", SCHEDULE_LAYOUTS, ids=[name for name, _, _ in SCHEDULE_LAYOUTS])
def test_either_schedule_gives_the_bits_of_one_thread(layout, side, dtype):
    _, cols, axis = layout
    nbytes = SAME_SPLIT // 2 if side == "same split" else SAME_SPLIT
    x = rows_x(rows_for(nbytes, cols, dtype), cols, dtype)
    assert (x.nbytes <= SAME_SPLIT) == (side == "same split")
    try:
        fastnorm.set_num_threads(1)
        serial = _schedule_results(x, axis)
        for n in (2, 3):
            fastnorm.set_num_threads(n)
            images = x.reshape(x.shape[0], 4, 32, 32) if axis == (0, 2, 3) else x
            assert route(fastnorm.layer_norm, images, axis=axis)["threads"] == n
            for k, (a, b) in enumerate(zip(_schedule_results(x, axis), serial)):
                assert_bitwise(a, b, f"{side}: result {k} with {n} threads vs 1")
    finally:
        fastnorm.set_num_threads(None)
    # ... and those bits are layer_norm's: a float64 reference of the rows case
    if axis == -1:
        ref = x.astype(np.float64)
        ref = (ref - ref.mean(-1, keepdims=True)) / np.sqrt(ref.var(-1, keepdims=True) + 1e-5)
        tol = 1e-5 if dtype == np.float32 else 1e-12
        np.testing.assert_allclose(serial[2], ref, rtol=0, atol=tol)


# --------------------------------------------------------------------------
# gradients

# Shapes large enough to run on several threads (more than 2**16 values) and
# cut into several blocks: 64 rows at least in a block of rows, 256 KiB of x
# at least in a block of slices (so float32 slices need over 512 KiB).
THREAD_CASES = {
    "rows_axis0": ((1000, 70), (0,), (7, 1)),
    "rows_axis1": ((5000, 70), (1,), (7, 1)),
    "wide_columns": ((130, 1100), (0,), (11, 1)),
    "nchw": ((40, 16, 18, 18), (0, 2, 3), (4, 1)),
    "nhwc": ((16, 18, 18, 16), (0, 1, 2), (16, -1)),
}


@pytest.mark.parametrize("dtype", [F64, F32], ids=str)
@pytest.mark.parametrize("case", list(THREAD_CASES))
def test_gradients_bitwise_identical_for_any_thread_count(case, dtype):
    shape, axes, (groups, ch) = THREAD_CASES[case]
    rng = np.random.default_rng(7)
    x = (1 + rng.standard_normal(shape)).astype(dtype)
    dy = rng.standard_normal(shape).astype(dtype)
    nd = len(shape)
    kept = tuple(i for i in range(nd) if i not in axes)
    g_layer = rng.uniform(0.5, 2, tuple(shape[i] for i in axes))
    g_batch = rng.uniform(0.5, 2, tuple(shape[i] for i in kept))
    g_group = rng.uniform(0.5, 2, shape[ch])
    _, lm, lr = fastnorm.layer_norm(x, g_layer, axis=axes, return_stats=True)
    _, rr = fastnorm.rms_norm(x, g_layer, axis=axes, return_stats=True)
    _, bm, br = fastnorm.batch_norm(x, g_batch, axis=axes, return_stats=True)
    _, gm, gr = fastnorm.group_norm(x, groups, g_group, channel_axis=ch, return_stats=True)

    def all_grads():
        return (fastnorm.layer_norm_backward(dy, x, lm, lr, g_layer, axis=axes)
                + fastnorm.rms_norm_backward(dy, x, rr, g_layer, axis=axes)
                + fastnorm.batch_norm_backward(dy, x, bm, br, g_batch, axis=axes)
                + fastnorm.batch_norm_backward(dy, x, bm, br, g_batch, axis=axes, training=False)
                + fastnorm.group_norm_backward(dy, x, gm, gr, groups, g_group, channel_axis=ch))

    fastnorm.set_num_threads(1)
    one = all_grads()
    for n in (2, 4):
        fastnorm.set_num_threads(n)
        for func, stats, g in ((fastnorm.layer_norm_backward, (lm, lr), g_layer),
                               (fastnorm.batch_norm_backward, (bm, br), g_batch)):
            assert route(func, dy, x, *stats, g, axis=axes)["threads"] == n
        for k, (a, b) in enumerate(zip(one, all_grads())):
            assert_bitwise(b, a, f"{case} result {k} with {n} threads")
    fastnorm.set_num_threads(None)
