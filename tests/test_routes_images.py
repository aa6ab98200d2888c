"""The images pattern: channels of NCHW images, slices whose runs interleave.

Batch norm over (N, C, H, W) reduces every channel over N runs of H * W
values, and run n of channel c + 1 starts where run n of channel c ends.

images    float32 and float64 calls with runs of 16 values up to 8 KiB go
          image by image: the moments of every channel over blocks of
          images (short runs a vector of channels at a time), folded block
          after block, then each image's runs normalized as one run with
          per-channel coefficients (float32 through the float32 pass).
          Gradients of batch norm over the same layouts too (any dtype, from
          16 values a run): pass 1 sums each image's runs into blocks of
          images, pass 2 writes dx image by image.
channels  runs of at most `channels_inner_max` values, x one C block: the
          per-channel statistics are taken over the columns of the (N, C *
          inner) matrix and merged per channel (float16/float32 statistics,
          or any dtype with the statistics given), the output image by image
          or as columns; gradients below `images_inner_min` values a run.

These cases hit each way and its edges (run lengths that do and do not
fill vectors, more images than blocks, a misaligned or streamed output,
channels with inf/NaN, coefficients float32 cannot hold, outputs that are
not laid out like x, layouts the channels way does not take), check the way
with fastnorm.explain, and compare every value with a plain float64
reference (or with x in a layout that takes another way).
"""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fastnorm
from fastnorm import _simd
from checks import check_batch_norm
from reference import (OUT_TOL, assert_bitwise, assert_close, moments, ref_layer_norm,
                       ref_mean_var, ref_norm_grads, ref_rms_norm, ref_running_update, tiny)
from routes import assert_route, schedule
from strategies import OUT_MODES, PARAM_KINDS, STATS_OUT, VALUE_KINDS

EPS = 1e-5
AXES = (0, 2, 3)
F32 = np.float32
LD = np.longdouble
K = _simd.kernels
IMAGES = {"pattern": "images", "schedule": "images"}
WHOLE = {"pattern": "slices", "schedule": "whole"}


# --------------------------------------------------------------------------
# image by image

def _params(rng, c, kind):
    if kind == "none":
        return None, None
    return rng.uniform(0.5, 2.0, c), rng.standard_normal(c)


def _keep(p):
    return None if p is None else p.reshape(1, -1, 1, 1)


def _reference(x, gamma, beta):
    return ref_layer_norm(x, AXES, _keep(gamma), _keep(beta), eps=EPS)


def _check_y(y, ref, dtype=np.float32, spread=4.0):
    assert_close(y, ref, OUT_TOL[np.dtype(dtype)] * (1.0 + np.abs(ref)) * spread, "y")


@st.composite
def image_problems(draw):
    n = draw(st.integers(2, 40))
    c = draw(st.integers(1, 70))
    h = draw(st.integers(1, 12))
    w = draw(st.integers(2, 60))
    offset = draw(st.sampled_from([0.0, 3.0, 1e6]))
    params = draw(st.sampled_from(["none", "channel"]))
    dtype = draw(st.sampled_from([np.float32, np.float32, np.float64, np.float16]))
    seed = draw(st.integers(0, 2**32 - 1))
    return n, c, h, w, offset, params, dtype, seed


@given(image_problems())
@settings(max_examples=60, deadline=None)
def test_images_batch_norm_training_and_eval(problem):
    n, c, h, w, offset, params, dtype, seed = problem
    rng = np.random.default_rng(seed)
    if dtype == np.float16:
        offset = min(offset, 100.0)
    x = (offset + rng.standard_normal((n, c, h, w))).astype(dtype)
    gamma, beta = _params(rng, c, params)
    y, mean, rstd = fastnorm.batch_norm(x, gamma, beta, eps=EPS, return_stats=True)
    ref, rmean, rrstd, _, _ = _reference(x, gamma, beta)
    _check_y(y, ref, dtype)
    if dtype == np.float32:   # float64 statistics of float32 data: near exact
        assert_close(mean, rmean, 2.0 * np.spacing(np.abs(rmean).astype(np.float32)), "mean")
        assert_close(rstd, rrstd, 1e-6 * rrstd, "rstd")
    # eval: the running statistics given, no moments taken
    rm = rng.standard_normal(c) + offset
    rv = rng.uniform(0.5, 2.0, c)
    y = fastnorm.batch_norm(x, gamma, beta, rm, rv, training=False, eps=EPS)
    ref = (x.astype(np.float64) - _keep(rm)) / np.sqrt(_keep(rv) + EPS)
    if gamma is not None:
        ref = ref * _keep(gamma) + _keep(beta)
    _check_y(y, ref, dtype, spread=4.0 * (1.0 + offset * 1e-6 * (dtype == np.float32)))


# The way of training batch_norm on (37, 6, h, w), by (h, w) and dtype:
# float32 runs of up to 100 values take their statistics as columns, runs
# of 16 values to 8 KiB (float64 up to 1024 values) go image by image.
EVERY_LEVEL = {
    (4, 4): {"float32": "images/channels", "float64": "images/images"},
    (4, 5): {"float32": "images/channels", "float64": "images/images"},
    (5, 5): {"float32": "images/channels", "float64": "images/images"},
    (7, 7): {"float32": "images/channels", "float64": "images/images"},
    (1, 33): {"float32": "images/channels", "float64": "images/images"},
    (14, 14): {"float32": "images/images", "float64": "images/images"},
    (28, 28): {"float32": "images/images", "float64": "images/images"},
    (45, 45): {"float32": "images/images", "float64": "slices/whole"},
    (46, 46): {"float32": "slices/whole", "float64": "slices/whole"},
}

@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("hw", list(EVERY_LEVEL))
def test_images_every_level_and_thread_count(simd_level, hw, dtype):
    # 16, 20 (columns statistics, output image by image), 25 (the same,
    # not a whole vector), 49, 33, 196, 784, 2025 values per run (8100
    # bytes: image by image) and 2116 (8464 bytes: slice by slice); 37
    # images (more than the 32 blocks: two to a block).
    rng = np.random.default_rng(hw[0] * 100 + hw[1])
    # (float64: runs up to 1024 values image by image.)
    x = (1e3 + rng.standard_normal((37, 6, *hw))).astype(dtype)
    gamma, beta = _params(rng, 6, "channel")
    assert schedule(fastnorm.batch_norm, x, gamma, beta, eps=EPS, return_stats=True) \
        == EVERY_LEVEL[hw][np.dtype(dtype).name]
    outs = []
    for threads in (1, 2):
        fastnorm.set_num_threads(threads)
        outs.append(fastnorm.batch_norm(x, gamma, beta, eps=EPS, return_stats=True))
    _check_y(outs[0][0], _reference(x, gamma, beta)[0], dtype)
    for a, b in zip(outs[0], outs[1]):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("start", [0, 1, 3])
def test_images_misaligned_and_streamed_output(start, dtype):
    # Over 8 MiB of output is written with non-temporal stores from the
    # first vector-aligned address, image after image.
    rng = np.random.default_rng(start)
    shape = (12, 40, 40 if dtype == np.float64 else 80, 71) if start else (3, 5, 9, 19)
    x = (2 + rng.standard_normal(shape)).astype(dtype)
    gamma, beta = _params(rng, shape[1], "channel")
    flat = np.full(x.size + start + 1, 7.0, dtype)
    y = flat[start:start + x.size].reshape(shape)
    # (maps of 80 x 71 float32 values or 40 x 71 float64 ones are longer
    # than the image pass takes: they go slice by slice)
    assert_route(IMAGES if not start else dict(WHOLE, streams=True), fastnorm.batch_norm, x,
                 gamma, beta, eps=EPS, out=y)
    fastnorm.batch_norm(x, gamma, beta, eps=EPS, out=y)
    _check_y(y, _reference(x, gamma, beta)[0], dtype)
    assert (flat[:start] == 7).all() and flat[-1] == 7


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_images_misaligned_and_streamed_output_image_by_image(dtype):
    # Maps of 32 x 32 values go image by image; over 8 MiB of them from an
    # odd start are streamed.
    rng = np.random.default_rng(16)
    shape = (52 if dtype == np.float32 else 26, 40, 32, 32)
    x = (2 + rng.standard_normal(shape)).astype(dtype)
    gamma, beta = _params(rng, shape[1], "channel")
    flat = np.full(x.size + 2, 7.0, dtype)
    y = flat[1:1 + x.size].reshape(shape)
    assert_route(dict(IMAGES, streams=True), fastnorm.batch_norm, x, gamma, beta, eps=EPS, out=y)
    fastnorm.batch_norm(x, gamma, beta, eps=EPS, out=y)
    _check_y(y, _reference(x, gamma, beta)[0], dtype)
    assert flat[0] == 7 and flat[-1] == 7

def test_images_float64_far_from_zero_stays_exact():
    # float64 at 1e8 with a spread of 1e-3: the output's m is the mean
    # rounded, its remainder folded into the offset, so x - m is exact;
    # (x - m) without the remainder would be off by ulp(1e8) / 1e-3.
    rng = np.random.default_rng(15)
    x = 1e8 + 1e-3 * rng.standard_normal((16, 12, 6, 6))
    gamma, beta = _params(rng, 12, "channel")
    assert_route(IMAGES, fastnorm.batch_norm, x, gamma, beta, eps=0.0)
    _check_y(fastnorm.batch_norm(x, gamma, beta, eps=0.0), ref_layer_norm(
        x, AXES, _keep(gamma), _keep(beta), eps=0.0)[0], np.float64)
    rm = x.mean(axis=AXES) + 1e-4
    rv = x.var(axis=AXES)
    assert_route(IMAGES, fastnorm.batch_norm, x, gamma, beta, rm, rv, training=False, eps=0.0)
    y = fastnorm.batch_norm(x, gamma, beta, rm, rv, training=False, eps=0.0)
    ref = (x - _keep(rm)) / np.sqrt(_keep(rv)) * _keep(gamma) + _keep(beta)
    _check_y(y, ref, np.float64)


def test_images_output_not_laid_out_like_x():
    # A strided out= (the runs of y do not interleave): the slice-by-slice
    # way, the same values.
    rng = np.random.default_rng(7)
    x = rng.standard_normal((9, 11, 6, 6)).astype(np.float32)
    gamma, beta = _params(rng, 11, "channel")
    wide = np.full((9, 11, 6, 8), 5.0, np.float32)
    assert_route(IMAGES, fastnorm.batch_norm, x, gamma, beta, eps=EPS)
    assert_route(WHOLE, fastnorm.batch_norm, x, gamma, beta, eps=EPS, out=wide[..., 1:7])
    fastnorm.batch_norm(x, gamma, beta, eps=EPS, out=wide[..., 1:7])
    _check_y(wide[..., 1:7], _reference(x, gamma, beta)[0])
    assert (wide[..., 0] == 5).all() and (wide[..., 7] == 5).all()


def test_images_nonfinite_channels_leave_the_others_alone():
    rng = np.random.default_rng(8)
    x = rng.standard_normal((5, 20, 7, 7)).astype(np.float32)
    x[2, 3, 1, 1] = np.nan
    x[4, 9, 6, 6] = np.inf
    x[0, 10, 0, 0], x[3, 10, 2, 2] = np.inf, -np.inf
    bad = np.zeros(20, bool)
    bad[[3, 9, 10]] = True
    assert_route(IMAGES, fastnorm.batch_norm, x, eps=EPS, return_stats=True)
    y, mean, rstd = fastnorm.batch_norm(x, eps=EPS, return_stats=True)
    assert np.isnan(mean[0, bad]).all()
    assert np.isnan(y[:, bad]).any(axis=(0, 2, 3)).all()
    good = ~bad
    _check_y(y[:, good], _reference(x[:, good], None, None)[0])


def test_images_coefficients_float32_cannot_hold():
    # Means near 1e31 and a gain of 1e35 leave the float32 pass: every
    # channel goes the float64 way, still right.
    rng = np.random.default_rng(9)
    x = rng.standard_normal((4, 6, 6, 6)).astype(np.float32)
    x[:, 2] = (1e31 * (1 + 1e-3 * x[:, 2])).astype(np.float32)
    assert_route(dict(IMAGES, float32_pass=True), fastnorm.batch_norm, x, eps=EPS)
    _check_y(fastnorm.batch_norm(x, eps=EPS), _reference(x, None, None)[0])
    x[:, 2] = x[:, 3]
    gamma, beta = rng.uniform(0.5, 2.0, 6), rng.standard_normal(6)
    gamma[4] = 1e35
    ref = _reference(x, gamma, beta)[0]
    assert np.abs(ref[:, 4]).max() > 1e34
    _check_y(fastnorm.batch_norm(x, gamma, beta, eps=EPS), ref)


def test_images_rms_norm_and_layer_norm_over_the_same_axes():
    rng = np.random.default_rng(10)
    # Without gain and bias (image by image), and with them along the
    # normalized axes (they vary from image to image: slice by slice).
    x = (1 + rng.standard_normal((6, 13, 40))).astype(np.float32)
    assert_route(IMAGES, fastnorm.rms_norm, x, axis=(0, 2), eps=EPS)
    assert_route(IMAGES, fastnorm.layer_norm, x, axis=(0, 2), eps=EPS)
    _check_y(fastnorm.rms_norm(x, axis=(0, 2), eps=EPS), ref_rms_norm(x, (0, 2), eps=EPS)[0])
    _check_y(fastnorm.layer_norm(x, axis=(0, 2), eps=EPS),
             ref_layer_norm(x, (0, 2), eps=EPS)[0])
    gamma, beta = rng.uniform(0.5, 2.0, (6, 1, 40)), rng.standard_normal((6, 1, 40))
    assert_route(WHOLE, fastnorm.rms_norm, x, gamma, axis=(0, 2), eps=EPS)
    assert_route(WHOLE, fastnorm.layer_norm, x, gamma, beta, axis=(0, 2), eps=EPS)
    y = fastnorm.rms_norm(x, gamma, axis=(0, 2), eps=EPS)
    _check_y(y, ref_rms_norm(x, (0, 2), gamma, eps=EPS)[0])
    y = fastnorm.layer_norm(x, gamma, beta, axis=(0, 2), eps=EPS)
    _check_y(y, ref_layer_norm(x, (0, 2), gamma, beta, eps=EPS)[0])


def test_images_batch_norm_invariant_to_per_channel_scale():
    # Batch norm is invariant to scaling (and shifting) each feature.
    rng = np.random.default_rng(11)
    x = rng.standard_normal((8, 16, 9, 9))
    a = rng.uniform(0.1, 10.0, (1, 16, 1, 1))
    b = rng.uniform(-100.0, 100.0, (1, 16, 1, 1))
    assert_route(IMAGES, fastnorm.batch_norm, x.astype(np.float32), eps=0.0)
    y1 = fastnorm.batch_norm(x.astype(np.float32), eps=0.0)
    y2 = fastnorm.batch_norm((a * x + b).astype(np.float32), eps=0.0)
    assert_close(y2, y1, 1e-4 * (1 + np.abs(y1)), "invariance")


def _x32(shape, offset=0.0, scale=1.0, seed=0):
    rng = np.random.default_rng(seed)
    return (offset + scale * rng.standard_normal(shape)).astype(F32)


def _bar(y_ref, rel=2e-6):
    """float32 rounding of y plus that of xhat: a few ulps of |y| + |beta|."""
    return rel * (np.abs(y_ref) + 1.0)


def test_batch_norm_eval_nchw_float32_pass():
    # Runs of H*W values with one gamma, beta, mean and rstd each.
    x = _x32((4, 6, 9, 11), 1.5)
    rng = np.random.default_rng(5)
    g, b = rng.uniform(0.5, 2.0, 6), rng.standard_normal(6)
    rm, rv = rng.standard_normal(6), rng.uniform(0.5, 2.0, 6)
    assert_route(dict(IMAGES, float32_pass=True), fastnorm.batch_norm, x, g, b, rm, rv,
                 training=False)
    y = fastnorm.batch_norm(x, g, b, rm, rv, training=False)
    k = (1, 6, 1, 1)
    ref = ((x.astype(np.float64) - rm.reshape(k)) / np.sqrt(rv.reshape(k) + 1e-5)
           * g.reshape(k) + b.reshape(k))
    assert_close(y, ref, _bar(ref), "batch_norm eval")


# --------------------------------------------------------------------------
# image by image: gradients

GRAD_TOL = {np.dtype(np.float64): 1e-12, np.dtype(np.float32): 1e-5,
            np.dtype(np.float16): 4e-3}


def _check_grads(x, dy, gamma, mean, rstd, training, got):
    dx, dg, db = got
    keep = (1, x.shape[1], 1, 1)
    gk = None if gamma is None else gamma.reshape(keep)
    ref = ref_norm_grads(dy, x, AXES, (1,), gk, "center" if training else "scale",
                         stats=(mean, rstd))
    tol = GRAD_TOL[x.dtype]
    assert_close(dx, ref["dx"], tol * ref["dx_scale"] + tiny(x.dtype), "dx")
    ptol = 1e-12 if x.dtype == np.float64 else 1e-5
    assert_close(dg, ref["dgamma"].reshape(-1), ptol * ref["dgamma_scale"].reshape(-1), "dgamma")
    assert_close(db, ref["dbeta"].reshape(-1), ptol * ref["dbeta_scale"].reshape(-1), "dbeta")


def _grad_inputs(rng, shape, dtype, offset, params):
    x = (offset + rng.standard_normal(shape)).astype(dtype)
    dy = rng.standard_normal(shape).astype(dtype)
    gamma = None if params == "none" else rng.uniform(0.5, 2.0, shape[1])
    # float64 statistics (the forward's float32 ones round the mean: at 1e6
    # by up to 1/32, which the gradient then rightly follows).
    _, mean, rstd, _, _ = ref_layer_norm(x, AXES, eps=EPS)
    return x, dy, gamma, mean, rstd


@given(image_problems(), st.booleans())
@settings(max_examples=60, deadline=None)
def test_images_batch_norm_backward(problem, training):
    n, c, h, w, offset, params, dtype, seed = problem
    rng = np.random.default_rng(seed)
    if dtype == np.float16:
        offset = min(offset, 100.0)
    x, dy, gamma, mean, rstd = _grad_inputs(rng, (n, c, h, w), dtype, offset, params)
    if h * w >= _simd.kernels.images_inner_min:
        route = fastnorm.explain(fastnorm.batch_norm_backward, dy, x, mean, rstd, gamma,
                                 training=training)
        assert route["schedule"] != "channels"
    got = fastnorm.batch_norm_backward(dy, x, mean, rstd, gamma, training=training)
    _check_grads(x, dy, gamma, mean, rstd, training, got)


@pytest.mark.parametrize("hw", [(4, 4), (7, 7), (1, 33), (14, 14), (45, 45), (46, 46)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_images_backward_every_level_and_thread_count(simd_level, hw, dtype):
    # 2025 float32 values per run: 8100 bytes, image by image; 2116: slice
    # by slice (and float64 runs of 1024 values and more: slice by slice).
    rng = np.random.default_rng(hw[0] * 100 + hw[1])
    x, dy, gamma, mean, rstd = _grad_inputs(rng, (37, 6, *hw), dtype, 1e3, "channel")
    run_bytes = hw[0] * hw[1] * np.dtype(dtype).itemsize
    assert_route(IMAGES if run_bytes <= 8192 else WHOLE, fastnorm.batch_norm_backward, dy, x,
                 mean, rstd, gamma)
    outs = []
    for threads in (1, 2):
        fastnorm.set_num_threads(threads)
        outs.append(fastnorm.batch_norm_backward(dy, x, mean, rstd, gamma))
    _check_grads(x, dy, gamma, mean, rstd, True, outs[0])
    for a, b in zip(outs[0], outs[1]):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("start", [0, 1])
def test_images_backward_misaligned_and_streamed(start, dtype):
    # Over 8 MiB of dx (written around the caches) from an odd start.
    rng = np.random.default_rng(12 + start)
    shape = (12, 40, 40 if dtype == np.float64 else 80, 71) if start else (3, 5, 9, 19)
    x, dy, gamma, mean, rstd = _grad_inputs(rng, shape, dtype, 2.0, "channel")
    flat = np.full(x.size + start + 1, 7.0, dtype)
    dx = flat[start:start + x.size].reshape(shape)
    # (maps of 80 x 71 float32 values or 40 x 71 float64 ones are longer
    # than the image pass takes: they go slice by slice)
    assert_route(IMAGES if not start else dict(WHOLE, streams=True),
                 fastnorm.batch_norm_backward, dy, x, mean, rstd, gamma, out=(dx, None, None))
    got = fastnorm.batch_norm_backward(dy, x, mean, rstd, gamma, out=(dx, None, None))
    assert got[0] is dx
    _check_grads(x, dy, gamma, mean, rstd, True, got)
    assert (flat[:start] == 7).all() and flat[-1] == 7


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_images_backward_misaligned_and_streamed_image_by_image(dtype):
    # Maps of 32 x 32 values go image by image; over 8 MiB of dx from an odd
    # start is streamed.
    rng = np.random.default_rng(17)
    shape = (52 if dtype == np.float32 else 26, 40, 32, 32)
    x, dy, gamma, mean, rstd = _grad_inputs(rng, shape, dtype, 2.0, "channel")
    flat = np.full(x.size + 2, 7.0, dtype)
    dx = flat[1:1 + x.size].reshape(shape)
    assert_route(dict(IMAGES, streams=True), fastnorm.batch_norm_backward, dy, x, mean, rstd,
                 gamma, out=(dx, None, None))
    got = fastnorm.batch_norm_backward(dy, x, mean, rstd, gamma, out=(dx, None, None))
    assert got[0] is dx
    _check_grads(x, dy, gamma, mean, rstd, True, got)
    assert flat[0] == 7 and flat[-1] == 7

def test_images_backward_nonfinite_channel_leaves_the_others_alone():
    rng = np.random.default_rng(14)
    x, dy, gamma, mean, rstd = _grad_inputs(rng, (6, 9, 5, 5), np.float32, 0.0, "channel")
    dy[4, 2, 3, 3] = np.nan
    assert_route(IMAGES, fastnorm.batch_norm_backward, dy, x, mean, rstd, gamma)
    dx, dg, db = fastnorm.batch_norm_backward(dy, x, mean, rstd, gamma)
    assert np.isnan(dx[:, 2]).all() and np.isnan(dg[2]) and np.isnan(db[2])
    good = np.arange(9) != 2
    _check_grads(x[:, good], dy[:, good], gamma[good], mean[:, good], rstd[:, good], True,
                 (dx[:, good], dg[good], db[good]))


# --------------------------------------------------------------------------
# channels: runs of a few values as the columns of (N, C * inner)

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
    # kernels go image by image from there, above).
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
