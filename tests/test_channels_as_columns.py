"""Batch norm over (N, C, *short spatial axes*): the per-channel statistics
are taken over the columns of the (N, C * inner) matrix and merged per
channel (the "channels" schedule of the images pattern).

Every test first checks that the call takes that way (fastnorm.explain; or,
where it must not, that it does not), then compares with float64 references
written out in tests/reference.py, or with x in a layout the channels way
does not take (not one C block).
"""
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import fastnorm
from fastnorm import _simd
from checks import check_batch_norm
from reference import (assert_bitwise, assert_close, moments, ref_layer_norm, ref_mean_var,
                       ref_norm_grads, ref_running_update, tiny)
from strategies import OUT_MODES, PARAM_KINDS, STATS_OUT, VALUE_KINDS

LD = np.longdouble


K = _simd.kernels


def _taken(shape, dtype, axes, mode="center", gamma=None, out=None):
    """Whether a C-contiguous x of this shape takes the columns way."""
    x = np.ones(shape, dtype)
    axes = tuple(sorted(axes))
    if mode == "stats":
        route = fastnorm.explain(fastnorm.mean_var, x, axis=axes)
    elif mode == "given":
        kept = tuple(s for i, s in enumerate(shape) if i not in axes)
        route = fastnorm.explain(fastnorm.batch_norm, x, None, None, np.zeros(kept),
                                 np.ones(kept), training=False, axis=axes)
    else:
        route = fastnorm.explain(fastnorm.layer_norm, x, gamma, axis=axes, out=out)
    return route["schedule"] == "channels"


def _grad_taken(dy, x, mean, rstd, gamma, training=True):
    return fastnorm.explain(fastnorm.batch_norm_backward, dy, x, mean, rstd, gamma,
                            training=training)["schedule"] == "channels"


def own_way(a):
    """a's values in a layout the channels way does not take (each row a
    value longer than its values): the kernels' own way."""
    pad = np.empty(a.shape[:-1] + (a.shape[-1] + 1,), a.dtype)
    pad[..., :-1] = a
    return pad[..., :-1]


@st.composite
def short_inner_specs(draw, dtypes=("float16", "float32"), training=(True, False)):
    """check_batch_norm's spec for (N, C, inner...) with N rows enough and
    inner values few enough for the columns way (when x is C-ordered)."""
    dtype = draw(st.sampled_from(dtypes))
    min_rows = K.channels_min_column_bytes // np.dtype(dtype).itemsize
    inner = draw(st.lists(st.integers(1, 10), min_size=1, max_size=2)
                 .filter(lambda s: 1 < math.prod(s) <= K.channels_inner_max))
    shape = (draw(st.integers(min_rows, min_rows + 40)), draw(st.integers(2, 9)), *inner)
    s = dict(shape=shape, dtype=dtype, layout="C", values=draw(st.sampled_from(VALUE_KINDS)),
             seed=draw(st.integers(0, 2**32 - 1)),
             req_dtype=draw(st.sampled_from([None, None, "float32", "float64"])))
    s["axis"] = draw(st.sampled_from([None, tuple(i for i in range(len(shape)) if i != 1)]))
    s["training"] = draw(st.sampled_from(training))
    s["running"] = draw(st.sampled_from([None, "named_f64", "named_f32", "keepdims_f32"]
                                        if s["training"] else
                                        ["named_f64", "named_f32", "keepdims_f32"]))
    s["momentum"] = draw(st.sampled_from([0.1, 0.5]))
    s["eps"] = draw(st.sampled_from([1e-5, 1e-3, 0.0]))
    s["gamma"] = draw(st.sampled_from(PARAM_KINDS))
    s["beta"] = draw(st.sampled_from(PARAM_KINDS))
    s["return_stats"] = draw(st.booleans())
    s["out_mode"] = draw(st.sampled_from(OUT_MODES))
    s["stats_out"] = draw(st.sampled_from(STATS_OUT)) if s["return_stats"] else "none"
    return s


@given(short_inner_specs())
def test_batch_norm_short_inner_matches_reference(spec):
    axes = tuple(i for i in range(len(spec["shape"])) if i != 1)
    assert _taken(spec["shape"], spec["dtype"], axes)
    check_batch_norm(spec)


@given(short_inner_specs(dtypes=("float64",), training=(False,)))
def test_batch_norm_eval_short_inner_float64(spec):
    # With the running statistics given nothing is merged: float64 takes
    # the columns too (its training statistics do not, see below), up to
    # the run length from which the kernels write image by image.
    axes = tuple(i for i in range(len(spec["shape"])) if i != 1)
    inner = math.prod(spec["shape"][2:])
    assert _taken(spec["shape"], spec["dtype"], axes, mode="given") == (inner < K.images_inner_min)
    assert not _taken(spec["shape"], spec["dtype"], axes)
    check_batch_norm(spec)


@pytest.mark.parametrize("shape", [(64, 32, 4, 4), (40, 16, 7, 7), (256, 8, 2)])
@pytest.mark.parametrize("offset", [0.0, 1e6])
def test_batch_norm_short_inner_float32_accuracy(shape, offset):
    # The bar of tests/test_accuracy.py: float32 at a large common offset.
    rng = np.random.default_rng(1)
    x = (offset + rng.standard_normal(shape)).astype(np.float32)
    axes = (0,) + tuple(range(2, len(shape)))
    assert _taken(shape, np.float32, axes)
    rm, rv = np.zeros(shape[1], np.float32), np.ones(shape[1], np.float32)
    y, mean, rstd = fastnorm.batch_norm(x, None, None, rm, rv, return_stats=True)
    yr, mr, rr, _, _ = ref_layer_norm(x, axes, acc=LD)
    err = float(np.max(np.abs(y.astype(LD) - yr)))
    assert err <= (1e-6 if offset == 0 else 1e-5), f"max |y - ref| = {err:.3g}"
    assert_close(mean, mr, np.spacing(np.abs(mr.astype(np.float32))), "mean")
    assert_close(rstd, rr, 1e-6 * rr, "rstd")
    n = x.size // shape[1]
    _, _, m2, _, _ = moments(x, axes)
    new_m, new_v = ref_running_update(np.zeros(shape[1]), np.ones(shape[1]), mr.ravel(),
                                      m2.ravel() / n, n, 0.1)
    assert_close(rm, new_m, 1e-6 * (np.abs(new_m) + 1), "running_mean")
    assert_close(rv, new_v, 1e-6 * new_v, "running_var")


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_mean_var_short_inner(dtype):
    # Statistics only: one channel holds a NaN, one an inf (mean and
    # variance NaN there, as the kernels give), the others are exact.
    rng = np.random.default_rng(2)
    x = (3.0 + rng.standard_normal((80, 6, 5, 5))).astype(dtype)
    x[7, 2, 1, 3] = np.nan
    x[70, 4, 4, 4] = np.inf
    assert _taken(x.shape, dtype, (0, 2, 3), "stats")
    mean, var = fastnorm.mean_var(x, axis=(0, 2, 3), dtype=np.float64)
    rm, rv, spread = ref_mean_var(x, (0, 2, 3))
    assert_close(mean, rm.ravel(), 1e-13 * (np.abs(rm) + spread).ravel(), "mean")
    assert_close(var, rv.ravel(), 1e-12 * (spread * spread).ravel(), "var")
    assert np.isnan(mean[[2, 4]]).all() and np.isnan(var[[2, 4]]).all()


@pytest.mark.parametrize("training", [True, False])
def test_short_inner_nonfinite_like_the_kernels(training):
    # NaN and inf in some channels: the same NaNs, and the same values
    # elsewhere, as the kernels' own way.
    rng = np.random.default_rng(3)
    x = rng.standard_normal((64, 10, 3, 3)).astype(np.float32)
    x[5, 1, 0, 0] = np.nan
    x[9, 3, 2, 1] = np.inf
    x[9, 6, 2, 1], x[10, 6, 0, 0] = np.inf, -np.inf
    g, b = rng.uniform(0.5, 2.0, 10), rng.standard_normal(10)
    rm, rv = rng.standard_normal(10), rng.uniform(0.5, 2.0, 10)
    rm[8] = np.nan
    run = (lambda x: fastnorm.batch_norm(x, g, b, training=training, return_stats=True)) \
        if training else (lambda x: fastnorm.batch_norm(x, g, b, rm, rv, training=False,
                                                         return_stats=True))
    assert _taken(x.shape, np.float32, (0, 2, 3))
    ours = run(x)
    assert fastnorm.explain(fastnorm.batch_norm, own_way(x))["schedule"] != "channels"
    theirs = run(own_way(x))
    for a, b_, what in zip(ours, theirs, ("y", "mean", "rstd")):
        assert_close(a, b_, 1e-5 * (np.abs(b_.astype(np.float64)) + 1), what)


def test_layer_norm_axis_0_2_short_inner():
    # Center mode through layer_norm: taken without gain; with a gain that
    # varies along the reduced axes it is not (and still right).
    rng = np.random.default_rng(4)
    x = (5.0 + rng.standard_normal((48, 20, 12))).astype(np.float32)
    assert _taken(x.shape, np.float32, (0, 2))
    y = fastnorm.layer_norm(x, axis=(0, 2))
    yr = ref_layer_norm(x, (0, 2))[0]
    assert_close(y, yr, 2e-6 * (np.abs(yr) + 1), "layer_norm axis (0, 2)")
    g = rng.uniform(0.5, 2.0, (48, 12))
    assert not _taken(x.shape, np.float32, (0, 2), gamma=g.reshape(48, 1, 12))
    y = fastnorm.layer_norm(x, g, axis=(0, 2))
    yr = ref_layer_norm(x, (0, 2), g.reshape(48, 1, 12))[0]
    assert_close(y, yr, 2e-6 * (np.abs(yr) + 1), "layer_norm axis (0, 2), gain")


@pytest.mark.parametrize("case", ["float64", "few-rows", "long-inner", "strided",
                                  "channels-last", "out-transposed"])
def test_short_inner_other_calls_keep_the_kernels(case):
    rng = np.random.default_rng(5)
    shape, dtype, axes, out = (64, 8, 4, 4), np.float32, (0, 2, 3), None
    if case == "float64":
        dtype = np.float64
    elif case == "few-rows":
        shape = (8, 8, 4, 4)
    elif case == "long-inner":
        shape = (40, 4, 16, 16)
    elif case == "channels-last":
        axes = (0, 1, 2)
    x = (2.0 + rng.standard_normal(shape)).astype(dtype)
    if case == "strided":
        x = (2.0 + rng.standard_normal(shape[:-1] + (8,))).astype(dtype)[..., ::2]
    if case == "out-transposed":
        out = np.empty(shape[::-1], dtype).T
    assert fastnorm.explain(fastnorm.batch_norm, x, axis=axes, out=out)["schedule"] \
        != "channels", case
    y = fastnorm.batch_norm(x, axis=axes, out=out)
    yr = ref_layer_norm(x, axes)[0]
    assert_close(y, yr, (2e-6 if dtype == np.float32 else 1e-13) * (np.abs(yr) + 1), case)


def test_per_column_arrays_stay_small():
    # The per-column arrays may take an eighth of x (or COLUMN_ARRAYS_MAX):
    # few rows and many columns keep the kernels' own way.
    rng = np.random.default_rng(9)
    cols = K.channels_column_arrays_max // 48 + 9      # 48 bytes a column, forward
    few = (1.0 + rng.standard_normal((32, cols // 9, 3, 3))).astype(np.float32)
    many = np.ones((1024, cols // 9, 3, 3), np.float32)
    axes = (0, 2, 3)
    assert not _taken(few.shape, np.float32, axes)
    assert _taken(many.shape, np.float32, axes)
    _, mean, rstd = fastnorm.batch_norm(few, return_stats=True)
    assert not _grad_taken(few, few, mean, rstd, None)
    y = fastnorm.batch_norm(few)
    yr = ref_layer_norm(few, axes)[0]
    assert_close(y, yr, 2e-6 * (np.abs(yr) + 1), "kept the kernels' way")


def test_short_inner_threads_give_the_same_bits():
    # Large enough for two threads; the columns kernel splits the rows by
    # shape only, so one thread and two give the same bits.
    rng = np.random.default_rng(6)
    x = rng.standard_normal((128, 64, 7, 7)).astype(np.float32)
    g, b = rng.uniform(0.5, 2.0, 64), rng.standard_normal(64)
    assert _taken(x.shape, np.float32, (0, 2, 3))
    results = []
    for threads in (1, 2):
        fastnorm.set_num_threads(threads)
        try:
            results.append(fastnorm.batch_norm(x, g, b, return_stats=True))
        finally:
            fastnorm.set_num_threads(None)
    for a, b_ in zip(*results):
        assert_bitwise(a, b_, "1 thread against 2")
    yr = ref_layer_norm(x, (0, 2, 3), g.reshape(1, -1, 1, 1), b.reshape(1, -1, 1, 1))[0]
    assert_close(results[0][0], yr, 2e-6 * (np.abs(yr) + 1), "y")


def test_short_inner_in_place():
    rng = np.random.default_rng(7)
    x = (1.0 + rng.standard_normal((50, 12, 5))).astype(np.float32)
    yr = ref_layer_norm(x, (0, 2))[0]
    assert _taken(x.shape, np.float32, (0, 2))
    y = fastnorm.batch_norm(x, out=x)
    assert y is x
    assert_close(x, yr, 2e-6 * (np.abs(yr) + 1), "in place")


# ---------------------------------------------------------------------------
# Gradients: the same matrix view, each channel's columns one group whose
# sums the kernel adds up before dx.

@st.composite
def short_inner_grads(draw):
    dtype = draw(st.sampled_from([np.float16, np.float32, np.float64]))
    min_rows = K.channels_min_column_bytes // np.dtype(dtype).itemsize
    # Gradients take the columns below IMAGES_INNER_MIN values per run (the
    # kernels go image by image from there: test_images.py).
    inner = draw(st.lists(st.integers(1, 10), min_size=1, max_size=2)
                 .filter(lambda s: 1 < math.prod(s) < K.images_inner_min))
    shape = (draw(st.integers(min_rows, min_rows + 40)), draw(st.integers(2, 9)), *inner)
    return dict(shape=shape, dtype=dtype, training=draw(st.booleans()),
                gamma=draw(st.sampled_from([None, "named", "broadcast"])),
                out=draw(st.booleans()), seed=draw(st.integers(0, 2**32 - 1)))


def _grad_problem(spec):
    rng = np.random.default_rng(spec["seed"])
    shape, dtype = spec["shape"], spec["dtype"]
    x = (1.5 + rng.standard_normal(shape)).astype(dtype)
    dy = rng.standard_normal(shape).astype(dtype)
    keep = (1, shape[1]) + (1,) * (len(shape) - 2)
    gamma = {None: None, "named": rng.uniform(0.5, 2.0, shape[1]),
             "broadcast": np.full((1,) * len(shape), 1.7)}[spec["gamma"]]
    _, mean, rstd = fastnorm.batch_norm(x, gamma, return_stats=True)
    return x, dy, gamma, mean, rstd, keep


@given(short_inner_grads())
def test_batch_norm_backward_short_inner_matches_reference(spec):
    x, dy, gamma, mean, rstd, keep = _grad_problem(spec)
    axes = tuple(i for i in range(x.ndim) if i != 1)
    g_keep = None if gamma is None else np.broadcast_to(np.reshape(gamma, (1, -1) + (1,) * (
        x.ndim - 2)) if np.ndim(gamma) == 1 else gamma, keep)
    assert _grad_taken(dy, x, mean, rstd, gamma, spec["training"])
    out = np.full(x.shape, 7.0, x.dtype) if spec["out"] else None
    dx, dg, db = fastnorm.batch_norm_backward(dy, x, mean, rstd, gamma,
                                              training=spec["training"], out=out)
    if out is not None:
        assert dx is out
    mode = "center" if spec["training"] else "scale"
    gk = None if gamma is None else (np.reshape(gamma, keep) if np.ndim(gamma) == 1 else gamma)
    ref = ref_norm_grads(dy, x, axes, (1,), gk, mode, stats=(mean, rstd))
    tol = {np.float64: 1e-12, np.float32: 1e-5, np.float16: 4e-3}[spec["dtype"]]
    assert_close(dx, ref["dx"], tol * ref["dx_scale"] + tiny(spec["dtype"]), "dx")
    shape = (x.shape[1],) if gamma is None or np.ndim(gamma) == 1 else np.shape(gamma)
    assert dg.shape == shape and db.shape == shape
    ptol = 1e-12 if spec["dtype"] == np.float64 else 1e-5
    assert_close(dg, ref["dgamma"].reshape(shape), ptol * ref["dgamma_scale"].reshape(shape),
                 "dgamma")
    assert_close(db, ref["dbeta"].reshape(shape), ptol * ref["dbeta_scale"].reshape(shape),
                 "dbeta")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("threads", [1, 2])
def test_batch_norm_backward_short_inner_like_the_kernels(training, threads, dtype):
    # Large enough for two threads; the same dx (to rounding) and the same
    # parameter sums as the kernels' own way, NaN where they give NaN.
    rng = np.random.default_rng(8)
    x = rng.standard_normal((96, 48, 3, 5)).astype(dtype)
    dy = rng.standard_normal(x.shape).astype(dtype)
    dy[3, 7, 0, 0] = np.nan
    g = rng.uniform(0.5, 2.0, 48)
    _, mean, rstd = fastnorm.batch_norm(x, g, return_stats=True)
    assert _grad_taken(dy, x, mean, rstd, g, training)
    fastnorm.set_num_threads(threads)
    try:
        ours = fastnorm.batch_norm_backward(dy, x, mean, rstd, g, training=training)
        theirs = fastnorm.batch_norm_backward(own_way(dy), own_way(x), mean, rstd, g,
                                              training=training)
    finally:
        fastnorm.set_num_threads(None)
    for a, b_, what in zip(ours, theirs, ("dx", "dgamma", "dbeta")):
        scale = np.abs(b_.astype(np.float64))
        assert_close(a, b_, 1e-5 * (scale + 1), what)
    assert np.isnan(ours[0][:, 7]).all() == training
