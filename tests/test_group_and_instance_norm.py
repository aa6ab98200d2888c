"""group_norm and instance_norm against plain float64 references over drawn
shapes, groups, channel axes, dtypes, layouts and parameters, and the
identities that tie them to the core: one group is layer norm over every
axis but 0, C groups are instance norm, channels-first and channels-last
agree."""
import numpy as np
import pytest
from hypothesis import given

import fastnorm
from reference import (OUT_TOL, assert_close, fingerprint, group_param, group_view_shape,
                       out_dtype, ref_group_norm, ref_group_norm_grads, ref_layer_norm,
                       stat_dtype, tiny, tolerances)
from strategies import build_param, build_x, group_specs


def check_group_norm(spec, instance=False):
    rng = np.random.default_rng(spec["seed"])
    shape, eps = spec["shape"], spec["eps"]
    nd = len(shape)
    ch = spec["channel_axis"] % nd
    groups = shape[ch] if instance else spec["num_groups"]
    x = build_x(spec, tuple(range(1, nd)), rng)
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
    tout, tacc = tolerances(x.dtype, res_dt)
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


# Shapes whose groups are rows in cache, whole slices of many channels,
# two long slices that two threads split, and slices of six values (copied
# side by side).
GAIN_SHAPES = [((4, 16, 10, 10), 4), ((2, 128, 14, 14), 4), ((1, 64, 48, 48), 2),
               ((3, 6, 3, 1), 3)]


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16])
@pytest.mark.parametrize("shape, groups", GAIN_SHAPES)
def test_statistics_do_not_depend_on_gain(dtype, shape, groups):
    # A group's channels are one block of a C-contiguous x: its statistics
    # are taken over the block whatever the channels' gains and biases, so
    # they are the call without them, bit for bit.
    rng = np.random.default_rng(5)
    x = (1 + 3 * rng.standard_normal(shape)).astype(dtype)
    c = shape[1]
    gamma, beta = rng.uniform(-2, 2, c).astype(dtype), rng.standard_normal(c).astype(dtype)
    _, m0, r0 = fastnorm.group_norm(x, groups, return_stats=True)
    y, m, r = fastnorm.group_norm(x, groups, gamma, beta, return_stats=True)
    assert_close(m, m0, 0, "mean")
    assert_close(r, r0, 0, "rstd")
    yr = ref_group_norm(x, groups, 1, gamma, beta)[0]
    tol = {np.float64: 1e-13, np.float32: 1e-5, np.float16: 1e-2}[dtype]
    assert_close(y, yr, tol * (1 + np.abs(yr)), "y")


@pytest.mark.parametrize("scale", [1e-36, 1e-20, 1e20])
@pytest.mark.parametrize("shape, groups", GAIN_SHAPES[:2])
def test_spreads_float32_cannot_scale(scale, shape, groups):
    # An rstd of 1e36 (a spread of 1e-36) is past what the float32 output
    # pass takes: those samples' slices are written in float64 arithmetic,
    # the others' not; spreads of 1e-20 and 1e20 stay within it.
    rng = np.random.default_rng(6)
    x = (scale * rng.standard_normal(shape)).astype(np.float32)
    x[1::2] = rng.standard_normal(x[1::2].shape)
    c = shape[1]
    gamma, beta = rng.uniform(0.5, 2, c), rng.standard_normal(c)
    yr = ref_group_norm(x, groups, 1, gamma, beta, eps=1e-5 * scale**2)[0]
    y = fastnorm.group_norm(x, groups, gamma, beta, eps=1e-5 * scale**2)
    assert np.all(np.isfinite(y))
    assert_close(y, yr, 1e-5 * (1 + np.abs(yr)), "y")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("scale", [1e-36, 1.0])
@pytest.mark.parametrize("shape, groups", GAIN_SHAPES)
def test_gradients_with_a_gain_per_channel(dtype, scale, shape, groups):
    # Each channel of a group a run with its own gain: its dx from folded
    # coefficients, or value by value where the compute type cannot hold
    # those (a spread of 1e-36: rstd 1e36); against the closed form with
    # the forward's statistics.
    rng = np.random.default_rng(7)
    x = (scale * rng.standard_normal(shape)).astype(dtype)
    x[1::2] = rng.standard_normal(x[1::2].shape)
    dy = rng.standard_normal(shape).astype(dtype)
    gamma = rng.uniform(0.5, 2, shape[1]).astype(dtype)
    eps = 1e-5 * scale**2
    _, mean, rstd = fastnorm.group_norm(x, groups, gamma, eps=eps, return_stats=True)
    dx, dg, db = fastnorm.group_norm_backward(dy, x, mean, rstd, groups, gamma)
    ref = ref_group_norm_grads(dy, x, groups, 1, gamma.astype(np.float64), eps=eps,
                               stats=(mean, rstd))
    tol = 1e-12 if dtype == np.float64 else 1e-5
    assert_close(dx, ref["dx"], tol * ref["dx_scale"], "dx")
    assert_close(dg, ref["dgamma"], tol * ref["dgamma_scale"] + 1e-300, "dgamma")
    assert_close(db, ref["dbeta"], tol * ref["dbeta_scale"] + 1e-300, "dbeta")


def test_group_norm_docstring_examples():
    x = np.arange(16.0).reshape(1, 4, 2, 2)
    y = fastnorm.group_norm(x, 2, eps=0.0)
    first = np.arange(8.0)
    assert_close(y[0, :2].ravel(), (first - first.mean()) / first.std(), 1e-15)
    x = np.array([[[1.0, 3.0], [10.0, 30.0]]])
    assert_close(fastnorm.instance_norm(x, eps=0.0), [[[-1, 1], [-1, 1]]], 1e-15)
