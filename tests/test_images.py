"""Channels of NCHW images: slices whose runs interleave.

Batch norm over (N, C, H, W) reduces every channel over N runs of H * W
values, and run n of channel c + 1 starts where run n of channel c ends.
float32 and float64 calls with runs of 16 values up to 8 KiB go image by
image: the moments of every channel over blocks of images (short runs a
vector of channels at a time), folded block after block, then each image's
runs normalized as one run with per-channel coefficients.  float32 runs of
up to 100 values take their statistics as columns, their output image by
image.  These
cases hit that way and its edges (run lengths that do and do not fill
vectors, more images than blocks, a misaligned or streamed output, channels
with inf/NaN, coefficients float32 cannot hold, outputs that are not laid
out like x), and compare every value with a plain float64 reference.

Gradients of batch norm over the same layouts go image by image too (any
dtype, from 16 values per run; fewer take the columns): pass 1 sums each
image's runs into blocks of images, pass 2 writes dx image by image.
"""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import fastnorm
from fastnorm import _simd
from reference import (OUT_TOL, assert_close, ref_layer_norm, ref_norm_grads, ref_rms_norm,
                       tiny)

EPS = 1e-5
AXES = (0, 2, 3)


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


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("hw", [(4, 4), (4, 5), (5, 5), (7, 7), (1, 33), (14, 14), (28, 28),
                                (45, 45), (46, 46)])
def test_images_every_level_and_thread_count(simd_level, hw, dtype):
    # 16, 20 (columns statistics, output image by image), 25 (the same,
    # not a whole vector), 49, 33, 196, 784, 2025 values per run (8100
    # bytes: image by image) and 2116 (8464 bytes: slice by slice); 37
    # images (more than the 32 blocks: two to a block).
    rng = np.random.default_rng(hw[0] * 100 + hw[1])
    # (float64: runs up to 1024 values image by image.)
    x = (1e3 + rng.standard_normal((37, 6, *hw))).astype(dtype)
    gamma, beta = _params(rng, 6, "channel")
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
    fastnorm.batch_norm(x, gamma, beta, eps=EPS, out=y)
    _check_y(y, _reference(x, gamma, beta)[0], dtype)
    assert (flat[:start] == 7).all() and flat[-1] == 7


def test_images_float64_far_from_zero_stays_exact():
    # float64 at 1e8 with a spread of 1e-3: the output's m is the mean
    # rounded, its remainder folded into the offset, so x - m is exact;
    # (x - m) without the remainder would be off by ulp(1e8) / 1e-3.
    rng = np.random.default_rng(15)
    x = 1e8 + 1e-3 * rng.standard_normal((16, 12, 6, 6))
    gamma, beta = _params(rng, 12, "channel")
    _check_y(fastnorm.batch_norm(x, gamma, beta, eps=0.0), ref_layer_norm(
        x, AXES, _keep(gamma), _keep(beta), eps=0.0)[0], np.float64)
    rm = x.mean(axis=AXES) + 1e-4
    rv = x.var(axis=AXES)
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
    _check_y(fastnorm.rms_norm(x, axis=(0, 2), eps=EPS), ref_rms_norm(x, (0, 2), eps=EPS)[0])
    _check_y(fastnorm.layer_norm(x, axis=(0, 2), eps=EPS),
             ref_layer_norm(x, (0, 2), eps=EPS)[0])
    gamma, beta = rng.uniform(0.5, 2.0, (6, 1, 40)), rng.standard_normal((6, 1, 40))
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
    y1 = fastnorm.batch_norm(x.astype(np.float32), eps=0.0)
    y2 = fastnorm.batch_norm((a * x + b).astype(np.float32), eps=0.0)
    assert_close(y2, y1, 1e-4 * (1 + np.abs(y1)), "invariance")


# --------------------------------------------------------------------------
# gradients

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
    got = fastnorm.batch_norm_backward(dy, x, mean, rstd, gamma, out=(dx, None, None))
    assert got[0] is dx
    _check_grads(x, dy, gamma, mean, rstd, True, got)
    assert (flat[:start] == 7).all() and flat[-1] == 7


def test_images_backward_nonfinite_channel_leaves_the_others_alone():
    rng = np.random.default_rng(14)
    x, dy, gamma, mean, rstd = _grad_inputs(rng, (6, 9, 5, 5), np.float32, 0.0, "channel")
    dy[4, 2, 3, 3] = np.nan
    dx, dg, db = fastnorm.batch_norm_backward(dy, x, mean, rstd, gamma)
    assert np.isnan(dx[:, 2]).all() and np.isnan(dg[2]) and np.isnan(db[2])
    good = np.arange(9) != 2
    _check_grads(x[:, good], dy[:, good], gamma[good], mean[:, good], rstd[:, good], True,
                 (dx[:, good], dg[good], db[good]))
