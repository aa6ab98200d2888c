"""Gradients: layer_norm_backward, rms_norm_backward, batch_norm_backward and
group_norm_backward.

Two independent checks, neither calling fastnorm for expected values:

- central finite differences of sum(dy * forward(x)), with the plain float64
  reference forward, on small drawn shapes, axes and layouts, with respect
  to x, gamma and beta;
- the closed-form gradients written out in float64 (reference.py) on fixed
  shapes large enough for both kernel patterns, blocks of slices longer than
  4096 values and tiles of more than 1024 columns, in float64, float32 and
  float16, on every SIMD level.

(Thread counts: test_threads.py; the routes' edges: test_routes_*.py;
errors: test_errors.py; dtypes: test_axes_and_dtypes.py.)
"""
import functools
import zlib

import numpy as np
import pytest
from hypothesis import given

import fastnorm
from reference import (assert_bitwise, assert_close, central_difference,
                       expand_param, fingerprint, keep_shape, norm_axes,
                       ref_group_norm, ref_group_norm_grads, ref_layer_norm, ref_norm_grads,
                       ref_rms_norm, tiny)
from strategies import arrange, build_param, build_running, grad_specs

F16, F32, F64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)


def _unchanged(arrays, before, what):
    after = [fingerprint(a) if isinstance(a, np.ndarray) else None for a in arrays]
    assert after == before, f"{what} modified one of its inputs"


def _fingerprints(*arrays):
    return [fingerprint(a) if isinstance(a, np.ndarray) else None for a in arrays]


def _param_dtype(gamma, x_dtype):
    """The documented dtype of dgamma/dbeta."""
    if gamma is not None and np.asarray(gamma).dtype.kind == "f":
        return np.asarray(gamma).dtype
    return F64 if x_dtype == F64 else F32


# --------------------------------------------------------------------------
# finite differences on small drawn problems

def _batch_axes(axis, nd):
    return tuple(i for i in range(nd) if i != 1) if axis is None else norm_axes(axis, nd)


def check_finite_differences(spec, kind):
    rng = np.random.default_rng(spec["seed"])
    shape, eps = spec["shape"], spec["eps"]
    nd = len(shape)
    x = arrange(spec["offset"] + spec["scale"] * rng.standard_normal(shape), spec["layout"], rng)
    dy = arrange(rng.standard_normal(shape), spec["dy_layout"], rng)
    training = spec.get("training", True)

    if kind == "group":
        g_num, ch = spec["num_groups"], spec["channel_axis"] % nd
        along = (ch,)
    elif kind == "batch":
        axes = _batch_axes(spec["axis"], nd)
        along = tuple(i for i in range(nd) if i not in axes)
    else:
        axes = norm_axes(spec["axis"], nd)
        along = axes
    gamma = build_param(spec["gamma"], shape, along, rng, "gamma")
    beta = build_param(spec["beta"], shape, along, rng, "beta")
    named = tuple(shape[i] for i in along)

    # The forward, as a user calls it, gives the statistics.
    if kind == "layer":
        y, mean, rstd = fastnorm.layer_norm(x, gamma, beta, axis=spec["axis"], eps=eps,
                                            return_stats=True)
    elif kind == "rms":
        y, rstd = fastnorm.rms_norm(x, gamma, axis=spec["axis"], eps=eps, return_stats=True)
        mean = None
    elif kind == "batch":
        rm, rv = build_running("named_f64", shape, along, rng) if not training else (None, None)
        y, mean, rstd = fastnorm.batch_norm(x, gamma, beta, rm, rv, training=training,
                                            axis=spec["axis"], eps=eps, return_stats=True)
    else:
        y, mean, rstd = fastnorm.group_norm(x, g_num, gamma, beta, eps=eps, return_stats=True,
                                            channel_axis=spec["channel_axis"])

    # The reference forward in float64, as a function of (x, gamma, beta).
    def forward(xa, ga, ba):
        if kind == "group":
            return ref_group_norm(xa, g_num, ch, ga, ba, eps)[0]
        gk, bk = expand_param(ga, shape, along), expand_param(ba, shape, along)
        if kind == "rms":
            return ref_rms_norm(xa, axes, gk, eps)[0]
        if kind == "batch" and not training:
            yy = (xa - rm.reshape(keep_shape(shape, axes))) / np.sqrt(
                rv.reshape(keep_shape(shape, axes)) + eps)
            yy = yy if gk is None else yy * gk
            return yy if bk is None else yy + bk
        return ref_layer_norm(xa, axes, gk, bk, eps)[0]

    dyd = np.asarray(dy, dtype=np.float64)
    xd = np.asarray(x, dtype=np.float64)
    gd = None if gamma is None else np.array(gamma, dtype=np.float64)
    bd = None if beta is None else np.array(beta, dtype=np.float64)

    def loss(xa=xd, ga=gd, ba=bd):
        return float(np.sum(dyd * forward(xa, ga, ba)))

    # Closed form (for the tolerance scales and a second opinion).
    if kind == "group":
        ref = ref_group_norm_grads(dy, x, g_num, ch, gamma, eps)
        rstd_full = np.broadcast_to(np.repeat(ref_group_norm(x, g_num, ch, eps=eps)[2],
                                              shape[ch] // g_num, axis=ch), shape)
    else:
        mode = {"layer": "center", "rms": "rms", "batch": "center" if training else "scale"}[kind]
        stats = None
        if mode == "scale":
            ks = keep_shape(shape, axes)
            stats = (rm.reshape(ks), 1 / np.sqrt(rv.reshape(ks) + eps))
        ref = ref_norm_grads(dy, x, axes, along, expand_param(gamma, shape, along), mode, eps,
                             stats)
        rstd_full = np.broadcast_to(ref["rstd"], shape)
    # Rounding in the loss (of y, and of x - mean relative to the spread),
    # divided by the step, bounds the finite differences' own error.
    gmax = 1.0 if gamma is None else float(np.max(np.abs(gd), initial=1.0))
    f_abs = float(np.sum(np.abs(dyd) * (np.abs(forward(xd, gd, bd))
                                         + gmax * np.abs(xd) * rstd_full))) + 1.0

    before = _fingerprints(x, dy, mean, rstd, gamma)
    if kind == "layer":
        dx, dgamma, dbeta = fastnorm.layer_norm_backward(dy, x, mean, rstd, gamma,
                                                         axis=spec["axis"])
    elif kind == "rms":
        dx, dgamma = fastnorm.rms_norm_backward(dy, x, rstd, gamma, axis=spec["axis"])
        dbeta = None
    elif kind == "batch":
        dx, dgamma, dbeta = fastnorm.batch_norm_backward(dy, x, mean, rstd, gamma,
                                                         axis=spec["axis"], training=training)
    else:
        dx, dgamma, dbeta = fastnorm.group_norm_backward(dy, x, mean, rstd, g_num, gamma,
                                                         channel_axis=spec["channel_axis"])
    _unchanged((x, dy, mean, rstd, gamma), before, f"{kind}_norm_backward")

    # Shapes and dtypes.
    pshape = named if gamma is None else np.shape(gamma)
    pdt = _param_dtype(gamma, x.dtype)
    assert dx.shape == x.shape and dx.dtype == F64, (dx.shape, dx.dtype)
    for name, p in (("dgamma", dgamma), ("dbeta", dbeta)):
        if p is not None:
            assert p.shape == pshape, f"{name} shape {p.shape} != {pshape}"
            assert p.dtype == pdt, f"{name} dtype {p.dtype} != {pdt}"

    # d/dx: steps of 1e-4 standard deviations (linear in x in eval mode).
    h = 1e-4 / rstd_full if (kind != "batch" or training) else np.full(shape, 1e-3)
    fd = central_difference(lambda a: loss(xa=a), xd, h)
    allowed = 1e-6 * ref["dx_scale"] + 1e-14 * f_abs / h
    assert_close(dx, fd, allowed, "dx vs finite differences")
    assert_close(dx, ref["dx"], 1e-12 * ref["dx_scale"] + 1e-300, "dx vs closed form")

    # d/dgamma and d/dbeta: linear, any step will do.
    hp = 1e-3
    pscale = lambda k: np.reshape(ref[k], pshape)  # noqa: E731
    tol_p = {F64: 1e-12, F32: 1e-6}[pdt]  # float32 when gamma is
    if gamma is not None:
        fd_g = central_difference(lambda a: loss(ga=a), gd, hp)
        assert_close(dgamma, fd_g.reshape(pshape),
                     max(1e-9, tol_p) * pscale("dgamma_scale") + 1e-14 * f_abs / hp,
                     "dgamma vs finite differences")
    assert_close(dgamma, pscale("dgamma"), tol_p * pscale("dgamma_scale") + 1e-300, "dgamma")
    if dbeta is not None:
        if beta is not None:
            fd_b = central_difference(lambda a: loss(ba=a), bd, hp)
            if fd_b.size != dbeta.size:
                # dbeta comes in gamma's shape; a gamma that broadcasts along
                # some of its axes sums beta's gradient over them.
                keep = tuple(shape[i] if i in along else 1 for i in range(nd))
                over = tuple(i for i in range(nd) if pshape[i] == 1 and keep[i] != 1)
                fd_b = fd_b.reshape(keep).sum(axis=over, keepdims=True)
            assert_close(dbeta, fd_b.reshape(pshape),
                         max(1e-9, tol_p) * pscale("dbeta_scale") + 1e-14 * f_abs / hp,
                         "dbeta vs finite differences")
        assert_close(dbeta, pscale("dbeta"), tol_p * pscale("dbeta_scale") + 1e-300, "dbeta")


@given(grad_specs("layer"))
def test_layer_norm_backward_finite_differences(spec):
    check_finite_differences(spec, "layer")


@given(grad_specs("rms"))
def test_rms_norm_backward_finite_differences(spec):
    check_finite_differences(spec, "rms")


@given(grad_specs("batch"))
def test_batch_norm_backward_finite_differences(spec):
    check_finite_differences(spec, "batch")


@given(grad_specs("group"))
def test_group_norm_backward_finite_differences(spec):
    check_finite_differences(spec, "group")


# --------------------------------------------------------------------------
# closed form on fixed shapes that reach every path of the kernels
#
# Each case: x's shape, how its storage is laid out, the reduced axes of
# layer/rms/batch norm, and group norm's (num_groups, channel_axis).

CASES = {
    "rows_axis0": ((300, 70), "C", (0,), (7, 1)),
    "rows_axis1": ((300, 70), "C", (1,), (7, 1)),
    "rows_fortran": ((300, 70), "F", (1,), (10, 1)),
    "long_rows": ((3, 5000), "C", (1,), (5, 1)),          # slices > 4096 values
    "row_groups": ((67, 1030), "C", (1,), (5, 1)),        # rows four at a time, and the rest
    "wide_columns": ((130, 1100), "C", (0,), (11, 1)),    # > 1024 columns
    "nchw": ((4, 16, 10, 10), "C", (0, 2, 3), (4, 1)),
    "nchw_layer": ((4, 16, 10, 10), "C", (1, 2, 3), (16, 1)),
    "nhwc": ((4, 10, 10, 16), "C", (0, 1, 2), (4, -1)),
    "nhwc_instance": ((4, 10, 10, 16), "C", (0, 1, 2), (16, -1)),
    "nhwc_of_nchw": ((4, 10, 10, 16), "nchw_storage", (0, 1, 2), (8, -1)),
    "negative": ((65, 33), "negative", (0,), (3, 1)),
}
FUNCS = ["layer", "rms", "batch", "batch_eval", "group"]
DTYPES = [F64, F32, F16]


def _layout(values, layout, rng):
    if layout == "C":
        return np.ascontiguousarray(values)
    if layout == "F":
        return np.asfortranarray(values)
    if layout == "nchw_storage":  # an NHWC view of NCHW memory
        return np.ascontiguousarray(values.transpose(0, 3, 1, 2)).transpose(0, 2, 3, 1)
    if layout == "negative":
        return np.ascontiguousarray(values[::-1, ::-1])[::-1, ::-1]
    raise ValueError(layout)


@functools.lru_cache(maxsize=None)
def problem(case, func, dtype):
    """Inputs (x, dy in dtype; gamma float64; statistics as the forward gives
    them) and the float64 closed-form reference on the very same values."""
    shape, layout, axes, (groups, ch) = CASES[case]
    rng = np.random.default_rng(zlib.crc32(f"{case} {func}".encode()))
    x = _layout((0.5 + 2 * rng.standard_normal(shape)).astype(dtype), layout, rng)
    dy = _layout(rng.standard_normal(shape).astype(dtype), layout, rng)
    nd = len(shape)
    if func == "group":
        c = shape[ch]
        gamma = rng.uniform(0.5, 2.0, c) * rng.choice([-1.0, 1.0], c)
        _, mean, rstd = fastnorm.group_norm(x, groups, gamma, channel_axis=ch, return_stats=True)
        ref = ref_group_norm_grads(dy, x, groups, ch, gamma)
        return dict(x=x, dy=dy, gamma=gamma, mean=mean, rstd=rstd, ref=ref, axes=None)
    along = axes if func in ("layer", "rms") else tuple(i for i in range(nd) if i not in axes)
    named = tuple(shape[i] for i in along)
    gamma = rng.uniform(0.5, 2.0, named) * rng.choice([-1.0, 1.0], named)
    gk = expand_param(gamma, shape, along)
    stats = None
    if func == "layer":
        _, mean, rstd = fastnorm.layer_norm(x, gamma, axis=axes, return_stats=True)
    elif func == "rms":
        _, rstd = fastnorm.rms_norm(x, gamma, axis=axes, return_stats=True)
        mean = None
    elif func == "batch":
        _, mean, rstd = fastnorm.batch_norm(x, gamma, axis=axes, return_stats=True)
    else:
        rm = rng.standard_normal(named)
        rv = rng.uniform(0.5, 2.0, named)
        _, mean, rstd = fastnorm.batch_norm(x, gamma, None, rm, rv, training=False, axis=axes,
                                            return_stats=True)
        ks = keep_shape(shape, axes)
        stats = (rm.reshape(ks), 1 / np.sqrt(rv.reshape(ks) + 1e-5))
    mode = {"layer": "center", "rms": "rms", "batch": "center", "batch_eval": "scale"}[func]
    ref = ref_norm_grads(dy, x, axes, along, gk, mode, 1e-5, stats)
    for k in ("dgamma", "dgamma_scale", "dbeta", "dbeta_scale"):
        ref[k] = ref[k].reshape(named)
    del ref["xhat"]
    return dict(x=x, dy=dy, gamma=gamma, mean=mean, rstd=rstd, ref=ref, axes=axes)


def backward_call(case, func, p, gamma="given"):
    """(function, arguments...) of the gradient call on problem p, with keywords
    as a trailing dict: what run_backward calls, and explain describes."""
    g = p["gamma"] if gamma == "given" else None
    x, dy, mean, rstd, axes = p["x"], p["dy"], p["mean"], p["rstd"], p["axes"]
    if func == "layer":
        return fastnorm.layer_norm_backward, dy, x, mean, rstd, g, dict(axis=axes)
    if func == "rms":
        return fastnorm.rms_norm_backward, dy, x, rstd, g, dict(axis=axes)
    if func in ("batch", "batch_eval"):
        return (fastnorm.batch_norm_backward, dy, x, mean, rstd, g,
                dict(axis=axes, training=func == "batch"))
    groups, ch = CASES[case][3]
    return fastnorm.group_norm_backward, dy, x, mean, rstd, groups, g, dict(channel_axis=ch)


def schedule(func, *args):
    """'pattern/schedule' of func(*args[:-1], **args[-1])."""
    r = fastnorm.explain(func, *args[:-1], **args[-1])
    return f"{r['pattern']}/{r['schedule']}"


def run_backward(case, func, p, gamma="given"):
    """(dx, dgamma, dbeta) of the call, dbeta None for rms_norm."""
    f, *args = backward_call(case, func, p, gamma)
    res = f(*args[:-1], **args[-1])
    return res if len(res) == 3 else (*res, None)


def check_closed_form(case, func, dtype):
    p = problem(case, func, dtype)
    before = _fingerprints(p["x"], p["dy"], p["mean"], p["rstd"], p["gamma"])
    dx, dg, db = run_backward(case, func, p)
    _unchanged((p["x"], p["dy"], p["mean"], p["rstd"], p["gamma"]), before, func)
    ref = p["ref"]
    assert dx.dtype == dtype and dx.shape == p["x"].shape
    assert dg.dtype == F64 and dg.shape == np.shape(p["gamma"])
    # Output rounding plus float32 statistics (for float16/float32 inputs).
    tol = {F64: 1e-12, F32: 1e-5, F16: 4e-3}[dtype]
    assert_close(dx, ref["dx"], tol * ref["dx_scale"] + tiny(dtype), f"{case} {func} dx")
    ptol = 1e-12 if dtype == F64 else 1e-5
    assert_close(dg, ref["dgamma"], ptol * ref["dgamma_scale"] + 1e-300, f"{case} {func} dgamma")
    if db is not None:
        assert db.dtype == F64 and db.shape == np.shape(p["gamma"])
        assert_close(db, ref["dbeta"], ptol * ref["dbeta_scale"] + 1e-300, f"{case} {func} dbeta")
    return dx, dg, db


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("func", FUNCS)
@pytest.mark.parametrize("case", list(CASES))
def test_closed_form(case, func, dtype):
    check_closed_form(case, func, dtype)


def test_cases_reach_every_gradient_route():
    # The fixed cases take the gradients' routes but the channels one (its
    # short runs: test_routes_images.py), whatever the dtype.
    seen = set()
    for case in CASES:
        for func in FUNCS:
            p = problem(case, func, F32)
            seen.add(schedule(*backward_call(case, func, p)))
    assert seen == {"slices/rows", "slices/whole", "images/images", "columns/tiles"}, seen

@pytest.mark.parametrize("func", FUNCS)
def test_every_simd_level(simd_level, func):
    for case in CASES:
        for dtype in (F64, F32):
            check_closed_form(case, func, dtype)


# --------------------------------------------------------------------------
# parameters and statistics in their accepted forms; dtypes

def _ln_problem(shape=(6, 5, 4), axis=(1, 2), dtype=np.float64, seed=3):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(dtype)
    dy = rng.standard_normal(shape).astype(dtype)
    return rng, x, dy


def test_gamma_none_is_ones_and_keepdims_is_named():
    rng, x, dy = _ln_problem()
    axes = (1, 2)
    _, m, r = fastnorm.layer_norm(x, axis=axes, return_stats=True)
    a = fastnorm.layer_norm_backward(dy, x, m, r, None, axis=axes)
    b = fastnorm.layer_norm_backward(dy, x, m, r, np.ones((5, 4)), axis=axes)
    for u, v, what in zip(a, b, ("dx", "dgamma", "dbeta")):
        assert_bitwise(u, v, f"gamma=None vs ones: {what}")
    g = rng.uniform(0.5, 2, (5, 4))
    named = fastnorm.layer_norm_backward(dy, x, m, r, g, axis=axes)
    keep = fastnorm.layer_norm_backward(dy, x, m, r, g[None], axis=axes)
    assert keep[1].shape == keep[2].shape == (1, 5, 4)
    assert named[1].shape == named[2].shape == (5, 4)
    assert_bitwise(keep[0], named[0], "dx, keepdims gamma")
    assert_bitwise(keep[1], named[1][None], "dgamma, keepdims gamma")
    assert_bitwise(keep[2], named[2][None], "dbeta, keepdims gamma")


def test_gamma_none_batch_rms_group():
    rng, x, dy = _ln_problem((4, 6, 3, 3))
    _, m, r = fastnorm.batch_norm(x, return_stats=True)
    a = fastnorm.batch_norm_backward(dy, x, m, r)
    b = fastnorm.batch_norm_backward(dy, x, m, r, np.ones(6))
    c = fastnorm.batch_norm_backward(dy, x, m, r, np.ones((1, 6, 1, 1)))
    assert a[1].shape == (6,) and c[1].shape == (1, 6, 1, 1)
    for u, v, w in zip(a, b, c):
        assert_bitwise(u, v)
        assert_bitwise(u.reshape(w.shape), w)
    _, r = fastnorm.rms_norm(x, axis=-1, return_stats=True)
    a = fastnorm.rms_norm_backward(dy, x, r)
    b = fastnorm.rms_norm_backward(dy, x, r, np.ones(3))
    assert len(a) == 2 and a[1].shape == (3,)
    for u, v in zip(a, b):
        assert_bitwise(u, v)
    _, m, r = fastnorm.group_norm(x, 3, return_stats=True)
    assert m.shape == r.shape == (4, 3, 1, 1)
    a = fastnorm.group_norm_backward(dy, x, m, r, 3)
    b = fastnorm.group_norm_backward(dy, x, m, r, 3, np.ones(6))
    c = fastnorm.group_norm_backward(dy, x, m, r, 3, np.ones((1, 6, 1, 1)))
    assert a[1].shape == a[2].shape == (6,)
    # Gradients come back in gamma's own shape, whichever form it took.
    assert c[1].shape == c[2].shape == (1, 6, 1, 1)
    for u, v, w in zip(a, b, c):
        assert_bitwise(u, v)
        assert_bitwise(u, w.reshape(u.shape))


def test_broadcasting_gamma_accepted_by_forward_works_in_backward():
    # The forward takes x.ndim-dimensional parameters that broadcast along
    # their own axes (size 1 there); the backward takes the same gamma and
    # returns dgamma in its shape: the sum over the axes it broadcasts along.
    rng, x, dy = _ln_problem()
    g = np.full((1, 1, 4), 1.5)
    _, m, r = fastnorm.layer_norm(x, g, axis=(1, 2), return_stats=True)
    dx, dg, db = fastnorm.layer_norm_backward(dy, x, m, r, g, axis=(1, 2))
    ref = ref_norm_grads(dy, x, (1, 2), (2,), g)
    assert dg.shape == db.shape == (1, 1, 4)
    assert_close(dx, ref["dx"], 1e-12 * ref["dx_scale"])
    assert_close(dg, ref["dgamma"], 1e-12 * ref["dgamma_scale"])
    assert_close(db, ref["dbeta"], 1e-12 * ref["dbeta_scale"])


def test_statistics_in_kept_shape():
    rng, x, dy = _ln_problem((5, 7))
    _, m, r = fastnorm.layer_norm(x, return_stats=True)
    assert m.shape == (5, 1)
    a = fastnorm.layer_norm_backward(dy, x, m, r)
    b = fastnorm.layer_norm_backward(dy, x, m.ravel(), r.ravel())
    for u, v in zip(a, b):
        assert_bitwise(u, v)
    _, r = fastnorm.rms_norm(x, return_stats=True)
    for u, v in zip(fastnorm.rms_norm_backward(dy, x, r),
                    fastnorm.rms_norm_backward(dy, x, r.ravel())):
        assert_bitwise(u, v)
    _, m, r = fastnorm.batch_norm(x, axis=0, return_stats=True)
    assert m.shape == (1, 7)
    a = fastnorm.batch_norm_backward(dy, x, m, r, axis=0)
    b = fastnorm.batch_norm_backward(dy, x, m.ravel(), r.ravel(), axis=0)
    for u, v in zip(a, b):
        assert_bitwise(u, v)


def test_float16_and_float32_agree_with_float64():
    # The same values in three dtypes: lower precisions land within their
    # output rounding of the float64 gradients.
    rng = np.random.default_rng(11)
    x16 = (rng.standard_normal((64, 48)) * 2).astype(np.float16)
    dy16 = rng.standard_normal((64, 48)).astype(np.float16)
    res = {}
    for dt in (np.float16, np.float32, np.float64):
        x, dy = x16.astype(dt), dy16.astype(dt)
        _, m, r = fastnorm.batch_norm(x, axis=0, return_stats=True)
        res[dt] = fastnorm.batch_norm_backward(dy, x, m, r, axis=0)
    scale = ref_norm_grads(dy16, x16, (0,), (1,))
    for dt, tol in ((np.float16, 4e-3), (np.float32, 1e-5)):
        assert_close(res[dt][0], res[np.float64][0], tol * scale["dx_scale"], f"dx {dt}")
        assert_close(res[dt][1], res[np.float64][1], 1e-5 * scale["dgamma_scale"].ravel(),
                     f"dgamma {dt}")


def test_eval_mode_is_scaled_dy():
    rng = np.random.default_rng(4)
    x, dy = rng.standard_normal((8, 3, 5)), rng.standard_normal((8, 3, 5))
    g, rm, rv = rng.uniform(0.5, 2, 3), rng.standard_normal(3), rng.uniform(0.5, 2, 3)
    _, m, r = fastnorm.batch_norm(x, g, None, rm, rv, training=False, return_stats=True)
    dx, dg, db = fastnorm.batch_norm_backward(dy, x, m, r, g, training=False)
    rk = 1 / np.sqrt(rv + 1e-5)
    assert_close(dx, dy * (g * rk)[:, None], 1e-15)
    assert_close(dg, (dy * (x - rm[:, None]) * rk[:, None]).sum(axis=(0, 2)), 1e-13)
    assert_close(db, dy.sum(axis=(0, 2)), 1e-13)


def test_docstring_examples():
    x = np.array([[1.0, 10.0], [3.0, 30.0]])
    y, mean, rstd = fastnorm.batch_norm(x, axis=0, eps=0.0, return_stats=True)
    dx, dgamma, dbeta = fastnorm.batch_norm_backward(y, x, mean, rstd, axis=0)
    assert_close(dgamma, [2.0, 2.0], 1e-15)
    assert_close(dbeta, [0.0, 0.0], 1e-15)
    assert_close(dx, 0.0, 1e-15)   # d/dx sum(y * y) = 0: y is standardized
    x = np.arange(8.0).reshape(1, 4, 2)
    y, mean, rstd = fastnorm.group_norm(x, 2, return_stats=True)
    dx, dgamma, dbeta = fastnorm.group_norm_backward(np.ones_like(x), x, mean, rstd, 2)
    assert_close(dbeta, [2.0] * 4, 0)
    assert_close(dx, 0.0, 1e-15)


# --------------------------------------------------------------------------
# errors
