"""group_norm, instance_norm, weight_norm and weight_standardize against
plain float64 references, and the identities that tie them to the core:
one group is layer norm over every axis but 0, C groups are instance norm,
channels-first and channels-last agree, weight norm gives rows of norm |g|,
standardized weights have mean 0 and variance var / (var + eps)."""
import numpy as np
import pytest
from hypothesis import given
from numpy.exceptions import AxisError

import fastnorm
from reference import (ACC_TOL, OUT_TOL, acc_dtype_of, assert_close, expand_param,
                       fingerprint, group_param, group_view_shape, norm_axes, out_dtype,
                       ref_layer_norm, ref_weight_norm, stat_dtype, tiny)
from strategies import arrange, build_param, group_specs, make_values, weight_specs


def _tolerances(x_dtype, res_dt):
    tout = OUT_TOL[np.dtype(res_dt)]
    return tout, max(ACC_TOL[acc_dtype_of(x_dtype)], tout)


def _build(spec, axes, rng):
    small = out_dtype(np.dtype(spec["dtype"])) == np.float16
    v = make_values(rng, spec["shape"], spec["dtype"], spec["values"], axes, small)
    return arrange(v, spec["layout"], rng)


# --------------------------------------------------------------------------
# group and instance norm

def check_group_norm(spec, instance=False):
    rng = np.random.default_rng(spec["seed"])
    shape, eps = spec["shape"], spec["eps"]
    nd = len(shape)
    ch = spec["channel_axis"] % nd
    groups = shape[ch] if instance else spec["num_groups"]
    x = _build(spec, tuple(range(1, nd)), rng)
    gamma = build_param(spec["gamma"], shape, (ch,), rng, "gamma")
    beta = build_param(spec["beta"], shape, (ch,), rng, "beta")
    fps = [fingerprint(a) if isinstance(a, np.ndarray) else None for a in (x, gamma, beta)]
    kw = dict(channel_axis=spec["channel_axis"], eps=eps, return_stats=spec["return_stats"])
    if instance:
        res = fastnorm.instance_norm(x, gamma, beta, **kw)
    else:
        res = fastnorm.group_norm(x, groups, gamma, beta, **kw)
    assert [fingerprint(a) if isinstance(a, np.ndarray) else None
            for a in (x, gamma, beta)] == fps, "group_norm modified an input"

    res_dt = out_dtype(x.dtype)
    sdt = stat_dtype(res_dt)
    sshape = tuple(shape[0] if i == 0 else (groups if i == ch else 1) for i in range(nd))
    y, stats = (res[0], res[1:]) if spec["return_stats"] else (res, ())
    assert isinstance(y, np.ndarray) and y.shape == shape and y.dtype == res_dt, \
        (type(y), y.shape, y.dtype)
    for s in stats:
        assert s.shape == sshape and s.dtype == sdt, (s.shape, s.dtype, sshape, sdt)

    # The reference: layer norm of the split view (..., G, C/G, ...) over
    # every axis but 0 and the group axis.
    vshape = group_view_shape(shape, groups, ch)
    axes = tuple(i for i in range(1, len(vshape)) if i != ch)
    g = group_param(gamma, shape, groups, ch)
    b = group_param(beta, shape, groups, ch)
    yr, mr, rr, xhat, spread = ref_layer_norm(np.asarray(x).reshape(vshape), axes, g, b, eps)
    tout, tacc = _tolerances(x.dtype, res_dt)
    gabs = 1.0 if g is None else np.abs(g)
    babs = 0.0 if b is None else np.abs(b)
    allowed = tout * (gabs * np.abs(xhat) + babs) + tacc * gabs * rr * spread + tiny(res_dt)
    assert_close(y.reshape(vshape), yr, allowed, "y")
    if stats:
        st_tol = OUT_TOL[sdt]
        assert_close(stats[0], mr.reshape(sshape),
                     (st_tol * np.abs(mr) + tacc * spread + tiny(sdt)).reshape(sshape), "mean")
        assert_close(stats[1], rr.reshape(sshape),
                     (rr * (st_tol + tacc * spread**2 * rr**2) + tiny(sdt)).reshape(sshape), "rstd")


@given(group_specs())
def test_group_norm_matches_reference(spec):
    check_group_norm(spec)


@given(group_specs())
def test_instance_norm_matches_reference(spec):
    check_group_norm(spec, instance=True)


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_one_group_is_layer_norm(layout, dtype):
    rng = np.random.default_rng(2)
    x = (3 + 2 * rng.standard_normal((5, 6, 7, 4))).astype(dtype)
    ch = 1 if layout == "nchw" else -1
    if layout == "nhwc":
        x = x.transpose(0, 2, 3, 1)
    c = x.shape[ch]
    gamma, beta = rng.uniform(0.5, 2, c), rng.standard_normal(c)
    keep = [1] * 4
    keep[ch] = c
    tol = 1e-13 if dtype == np.float64 else 2e-5
    y, m, r = fastnorm.group_norm(x, 1, channel_axis=ch, return_stats=True)
    yl, ml, rl = fastnorm.layer_norm(x, axis=(1, 2, 3), return_stats=True)
    assert m.shape == ml.shape == (5, 1, 1, 1)
    assert_close(y, yl, tol, "y")
    assert_close(m, ml, tol * 10, "mean")
    assert_close(r, rl, tol * np.abs(rl), "rstd")
    # With per-channel gain and bias: layer norm's parameters broadcast in
    # keepdims layout along the channel axis only.
    y = fastnorm.group_norm(x, 1, gamma, beta, channel_axis=ch)
    yl = fastnorm.layer_norm(x, gamma.reshape(keep), beta.reshape(keep), axis=(1, 2, 3))
    assert_close(y, yl, tol * 4, "y with gamma, beta")


@pytest.mark.parametrize("ch", [1, 2, -1])
def test_channels_per_group_one_is_instance_norm(ch):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 4, 5, 6)) * 5 - 2
    c = x.shape[ch]
    gamma, beta = rng.uniform(0.5, 2, c), rng.standard_normal(c)
    y, m, r = fastnorm.group_norm(x, c, gamma, beta, channel_axis=ch, return_stats=True)
    yi, mi, ri = fastnorm.instance_norm(x, gamma, beta, channel_axis=ch, return_stats=True)
    for a, b in ((y, yi), (m, mi), (r, ri)):
        assert a.shape == b.shape
        assert_close(a, b, 0)
    # Instance norm is layer norm over the axes that are neither 0 nor the channels.
    chn = ch % 4
    spatial = tuple(i for i in (1, 2, 3) if i != chn)
    keep = [1] * 4
    keep[chn] = c
    yl = fastnorm.layer_norm(x, axis=spatial) * gamma.reshape(keep) + beta.reshape(keep)
    assert_close(yi, yl, 1e-13, "instance vs layer norm")
    assert mi.shape == tuple(3 if i == 0 else (c if i == chn else 1) for i in range(4))


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16])
@pytest.mark.parametrize("groups", [1, 2, 4, 8])
def test_nchw_and_nhwc_agree(dtype, groups):
    rng = np.random.default_rng(groups)
    nchw = rng.standard_normal((3, 8, 5, 7)).astype(dtype)
    gamma, beta = rng.uniform(0.5, 2, 8), rng.standard_normal(8)
    y, m, r = fastnorm.group_norm(nchw, groups, gamma, beta, return_stats=True)
    tol = {np.float64: 1e-13, np.float32: 2e-6, np.float16: 2e-3}[dtype]
    # The same memory seen channels-last, and a channels-last copy.
    for nhwc in (nchw.transpose(0, 2, 3, 1), np.ascontiguousarray(nchw.transpose(0, 2, 3, 1))):
        y2, m2, r2 = fastnorm.group_norm(nhwc, groups, gamma, beta, channel_axis=-1,
                                         return_stats=True)
        assert y2.shape == nhwc.shape and m2.shape == (3, 1, 1, groups)
        assert_close(y2.transpose(0, 3, 1, 2), y, tol * (1 + np.abs(y.astype(np.float64))), "y")
        assert_close(m2.transpose(0, 3, 1, 2), m, 1e-6 if dtype != np.float64 else 1e-14, "mean")
        assert_close(r2.transpose(0, 3, 1, 2), r, 1e-6 * np.abs(r.astype(np.float64)), "rstd")


def test_group_norm_out_and_dtype():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((4, 6, 3))
    ref = fastnorm.group_norm(x, 3)
    out = np.empty((4, 6, 3))
    assert fastnorm.group_norm(x, 3, out=out) is out
    assert_close(out, ref, 0)
    y32 = fastnorm.group_norm(x, 3, dtype=np.float32)
    assert y32.dtype == np.float32
    assert_close(y32, ref, 1e-6 * (1 + np.abs(ref)))
    xc = x.copy()
    assert fastnorm.group_norm(xc, 3, out=xc) is xc
    assert_close(xc, ref, 0)
    # Statistics in out arrays.
    outs = (np.empty_like(x), np.empty((4, 3, 1)), np.empty((4, 3, 1)))
    res = fastnorm.group_norm(x, 3, out=outs, return_stats=True)
    assert all(a is b for a, b in zip(res, outs))


def test_group_norm_docstring_examples():
    x = np.arange(16.0).reshape(1, 4, 2, 2)
    y = fastnorm.group_norm(x, 2, eps=0.0)
    first = np.arange(8.0)
    assert_close(y[0, :2].ravel(), (first - first.mean()) / first.std(), 1e-15)
    x = np.array([[[1.0, 3.0], [10.0, 30.0]]])
    assert_close(fastnorm.instance_norm(x, eps=0.0), [[[-1, 1], [-1, 1]]], 1e-15)


def test_group_norm_errors():
    x = np.zeros((2, 6, 3))
    cases = [
        (ValueError, lambda: fastnorm.group_norm(x, 4)),              # 6 % 4
        (ValueError, lambda: fastnorm.group_norm(x, 0)),
        (ValueError, lambda: fastnorm.group_norm(x, -3)),
        (ValueError, lambda: fastnorm.group_norm(x, 12)),
        (TypeError, lambda: fastnorm.group_norm(x, 2.0)),
        (ValueError, lambda: fastnorm.group_norm(x, 2, channel_axis=0)),
        (ValueError, lambda: fastnorm.group_norm(x, 2, channel_axis=-3)),
        (AxisError, lambda: fastnorm.group_norm(x, 2, channel_axis=3)),
        (AxisError, lambda: fastnorm.group_norm(x, 2, channel_axis=-4)),
        (ValueError, lambda: fastnorm.group_norm(np.zeros(6), 2)),
        (ValueError, lambda: fastnorm.group_norm(x, 3, np.ones(5))),
        (ValueError, lambda: fastnorm.group_norm(x, 3, np.ones(3))),
        (ValueError, lambda: fastnorm.group_norm(x, 3, None, np.ones((6, 3)))),
        (ValueError, lambda: fastnorm.group_norm(x, 3, np.ones((1, 1, 6)))),
        (ValueError, lambda: fastnorm.group_norm(x, 3, np.ones((6, 1)))),
        (TypeError, lambda: fastnorm.group_norm(x, 3, np.ones(6, complex))),
        (TypeError, lambda: fastnorm.group_norm(x.astype(complex), 3)),
        (ValueError, lambda: fastnorm.group_norm(x, 3, out=np.empty((2, 6, 4)))),
        (TypeError, lambda: fastnorm.group_norm(x, 3, out=np.empty((2, 6, 3), np.float32))),
        (ValueError, lambda: fastnorm.instance_norm(np.zeros(5))),
        (ValueError, lambda: fastnorm.instance_norm(x, channel_axis=0)),
        (AxisError, lambda: fastnorm.instance_norm(x, channel_axis=5)),
        (ValueError, lambda: fastnorm.instance_norm(x, np.ones(3))),
    ]
    for exc, call in cases:
        with pytest.raises(exc):
            call()


# --------------------------------------------------------------------------
# weight normalization and standardization

def _weight_axes(axis, nd):
    return tuple(range(1, nd)) if axis is None else norm_axes(axis, nd)


@given(weight_specs())
def test_weight_norm_matches_reference(spec):
    rng = np.random.default_rng(spec["seed"])
    nd = len(spec["shape"])
    axes = _weight_axes(spec["axis"], nd)
    kept = tuple(i for i in range(nd) if i not in axes)
    v = _build(spec, axes, rng)
    g = build_param(spec["g"], v.shape, kept, rng, "gamma")
    fps = (fingerprint(v), fingerprint(g) if g is not None else None)
    w, norm = fastnorm.weight_norm(v, g, axis=spec["axis"], return_norm=True)
    assert (fingerprint(v), fingerprint(g) if g is not None else None) == fps
    res_dt = out_dtype(v.dtype)
    sdt = stat_dtype(res_dt)
    assert w.shape == v.shape and w.dtype == res_dt, (w.shape, w.dtype)
    kshape = tuple(1 if i in axes else s for i, s in enumerate(v.shape))
    assert norm.shape == kshape and norm.dtype == sdt, (norm.shape, norm.dtype)
    gk = expand_param(g, v.shape, kept)
    wr, nr = ref_weight_norm(v, axes, gk)
    tout, tacc = _tolerances(v.dtype, res_dt)
    gabs = 1.0 if gk is None else np.abs(gk)
    with np.errstate(invalid="ignore"):
        assert_close(w, wr, (tout + tacc) * gabs * np.abs(wr / (1 if gk is None else gk))
                     + tiny(res_dt), "w")
    assert_close(norm, nr, (OUT_TOL[sdt] + tacc) * nr + tiny(sdt), "norm")
    # The other entry point agrees.
    assert_close(fastnorm.weight_norm(v, g, axis=spec["axis"]), w, 0)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("shape, axis", [((16, 9), None), ((8, 4, 3, 3), None),
                                         ((8, 4, 3, 3), (1, 2)), ((5, 7), 0),
                                         ((6, 5, 4), (0, 2))])
def test_weight_norm_rows_have_norm_g(dtype, shape, axis):
    rng = np.random.default_rng(8)
    v = (rng.standard_normal(shape) * 3 + 1).astype(dtype)
    axes = _weight_axes(axis, len(shape))
    kept = tuple(i for i in range(len(shape)) if i not in axes)
    tol = 1e-14 if dtype == np.float64 else 1e-6
    w = fastnorm.weight_norm(v, axis=axis)
    assert_close(np.sqrt((w.astype(np.float64) ** 2).sum(axis=axes)), 1.0, tol * 10, "unit norm")
    named = tuple(shape[i] for i in kept)
    g = rng.uniform(0.5, 3, named) * rng.choice([-1.0, 1.0], named)
    w, norm = fastnorm.weight_norm(v, g, axis=axis, return_norm=True)
    norms = np.sqrt((w.astype(np.float64) ** 2).sum(axis=axes))
    assert_close(norms, np.abs(g), tol * 10 * np.abs(g), "norm |g|")
    # w points along v (or against it where g < 0).
    gk = expand_param(g, shape, kept)
    assert_close(w / gk * norm, v, tol * 10 * np.abs(v.astype(np.float64)) + tol, "direction")


def test_weight_norm_zero_direction_is_nan():
    v = np.array([[0.0, 0.0], [3.0, 4.0]])
    w = fastnorm.weight_norm(v)
    assert np.isnan(w[0]).all()
    assert_close(w[1], [0.6, 0.8], 1e-15)
    assert_close(fastnorm.weight_norm(np.array([[3.0, 4.0], [0.0, 2.0]]), g=np.array([10.0, 1.0])),
                 [[6, 8], [0, 1]], 1e-14)


@given(weight_specs())
def test_weight_standardize_matches_reference(spec):
    rng = np.random.default_rng(spec["seed"])
    nd = len(spec["shape"])
    axes = _weight_axes(spec["axis"], nd)
    w = _build(spec, axes, rng)
    fp = fingerprint(w)
    y = fastnorm.weight_standardize(w, axis=spec["axis"], eps=spec["eps"])
    assert fingerprint(w) == fp
    res_dt = out_dtype(w.dtype)
    assert y.shape == w.shape and y.dtype == res_dt
    yr, _, rr, xhat, spread = ref_layer_norm(w, axes, eps=spec["eps"])
    tout, tacc = _tolerances(w.dtype, res_dt)
    assert_close(y, yr, tout * np.abs(xhat) + tacc * rr * spread + tiny(res_dt), "w_hat")


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("shape, axis", [((16, 3, 3, 3), None), ((32, 9), None),
                                         ((4, 6, 5), (0, 2)), ((7, 40), 0)])
@pytest.mark.parametrize("eps", [0.0, 1e-5, 0.1])
def test_weight_standardize_mean_zero_variance(dtype, shape, axis, eps):
    rng = np.random.default_rng(9)
    w = (rng.standard_normal(shape) * rng.uniform(0.05, 2) + 0.3).astype(dtype)
    axes = _weight_axes(axis, len(shape))
    y = fastnorm.weight_standardize(w, axis=axis, eps=eps).astype(np.float64)
    wd = w.astype(np.float64)
    var = wd.var(axis=axes, keepdims=True)
    tol = 1e-13 if dtype == np.float64 else 2e-6
    assert_close(y.mean(axis=axes, keepdims=True), 0.0, tol, "mean")
    # var(w_hat) = var / (var + eps): 1 with eps = 0.
    assert_close(y.var(axis=axes, keepdims=True), var / (var + eps), tol * 4, "variance")


def test_weight_errors():
    v = np.ones((4, 3, 2))
    cases = [
        (ValueError, lambda: fastnorm.weight_norm(v, np.ones(3))),
        (ValueError, lambda: fastnorm.weight_norm(v, np.ones((4, 3)))),
        (ValueError, lambda: fastnorm.weight_norm(v, np.ones(4), axis=(0, 1))),
        (AxisError, lambda: fastnorm.weight_norm(v, axis=3)),
        (ValueError, lambda: fastnorm.weight_norm(v, axis=(1, -2))),
        (TypeError, lambda: fastnorm.weight_norm(v.astype(complex))),
        (TypeError, lambda: fastnorm.weight_norm(v, np.ones(4, complex))),
        (AxisError, lambda: fastnorm.weight_standardize(v, axis=-4)),
        (ValueError, lambda: fastnorm.weight_standardize(v, axis=(2, 2))),
        (ValueError, lambda: fastnorm.weight_standardize(v, eps=-1.0)),
        (TypeError, lambda: fastnorm.weight_standardize(v.astype(object))),
    ]
    for exc, call in cases:
        with pytest.raises(exc):
            call()
