"""Outputs the call allocates itself are written in the order and with the
stores that fresh pages cost least.

An output of at least 8 MiB is streamed when it exists already.  A fresh
one written in address order (rows, the COLUMNS pattern's blocks of rows)
takes ordinary stores upwards; one written run by run across its pages
(the maps of an NCHW channel, image after image) is streamed from its last
slice down, each run from its last value to its first, prefetching the run
written next.  The values must not depend on it: y of an allocating call is
compared bit for bit with y written into an existing array (streamed
upwards), and with the plain float64 reference, for every dtype, runs whose
ends fall anywhere in a vector (the scalar head and tail of each run), gain
and bias or none, one and two threads.

fastnorm.explain says which: ``streams`` (written around the caches) and
``descending`` (from the last slice down).
"""
import contextlib

import numpy as np
import pytest

import fastnorm
from fastnorm import _simd
from reference import (OUT_TOL, assert_bitwise, assert_close, ref_layer_norm, ref_norm_grads,
                       ref_rms_norm)
import fastpath
from routes import assert_route

# Rows of n values, enough of them for an output that streams.
STREAM_BYTES = _simd.kernels.tuning()["stream_min_bytes"]
UPWARDS = {"streams": False, "descending": False}
STREAMED = {"streams": True, "descending": False}
DOWNWARDS = {"streams": True, "descending": True}


def _x(n, dtype, seed):
    rows = STREAM_BYTES // (n * np.dtype(dtype).itemsize) + 3
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((rows, n)) * 2 + 5).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("n", [1024, 1001, 4099])
@pytest.mark.parametrize("threads", [1, 2])
def test_fresh_layer_norm_is_written_like_out(dtype, n, threads):
    x = _x(n, dtype, n)
    rng = np.random.default_rng(1)
    gamma, beta = rng.uniform(0.5, 2.0, n), rng.standard_normal(n)
    fastnorm.set_num_threads(threads)
    assert_route(UPWARDS, fastnorm.layer_norm, x, gamma, beta)
    assert_route(STREAMED, fastnorm.layer_norm, x, gamma, beta, out=np.empty_like(x))
    fresh = fastnorm.layer_norm(x, gamma, beta)
    into = np.full_like(x, np.nan)
    fastnorm.layer_norm(x, gamma, beta, out=into)
    fastnorm.set_num_threads(None)
    assert_bitwise(fresh, into, "allocating against out=")
    rows = slice(None, None, 97)          # every 97th row against the reference
    ref = ref_layer_norm(x[rows], (1,), gamma, beta)[0]
    assert_close(fresh[rows], ref, OUT_TOL[np.dtype(dtype)] * (1 + np.abs(ref)) * 4, "y")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [1024, 1003])
def test_fresh_rms_norm_is_written_like_out(dtype, n):
    x = _x(n, dtype, n + 1)
    gamma = np.random.default_rng(2).uniform(0.5, 2.0, n)
    assert_route(UPWARDS, fastnorm.rms_norm, x, gamma)
    assert_route(STREAMED, fastnorm.rms_norm, x, gamma, out=np.empty_like(x))
    fresh = fastnorm.rms_norm(x, gamma)
    into = np.full_like(x, np.nan)
    fastnorm.rms_norm(x, gamma, out=into)
    assert_bitwise(fresh, into, "allocating against out=")
    ref = ref_rms_norm(x[::89], (1,), gamma)[0]
    assert_close(fresh[::89], ref, OUT_TOL[np.dtype(dtype)] * (1 + np.abs(ref)) * 4, "y")


@pytest.mark.parametrize("offset", [0, 1, 3], ids=lambda o: f"y+{o}")
def test_fresh_kernel_flag_any_alignment(offset, simd_level):
    # The kernels' own flag, on outputs starting at any float past a vector
    # boundary (each row's scalar head and tail differ), without and with
    # one gain per row value: ordinary stores and streamed ones give the
    # same bits.
    x = _x(1000, np.float32, 7)
    k = _simd.kernels
    buf = np.empty(x.size + 16, np.float32)
    start = (-buf.ctypes.data // 4) % 16 + offset
    for gamma in (None, np.linspace(0.5, 1.5, 1000).reshape(1, -1)):
        ys = []
        for fresh in (False, True):
            y = buf[start:start + x.size].reshape(x.shape)
            y.fill(np.nan)
            k.forward(x, y, gamma, None, None, None, None, (False, True), k.MODES["center"],
                        1e-5, 1, fresh)
            ys.append(y.copy())
        assert_bitwise(ys[1], ys[0], f"fresh against not, y+{offset}")
        assert not np.isnan(ys[1]).any()


@pytest.mark.parametrize("dtype,n", [(np.float32, 8), (np.float32, 24), (np.float32, 32),
                                     (np.float32, 64), (np.float64, 4), (np.float64, 16)])
@pytest.mark.parametrize("gains", [False, True], ids=["plain", "gain+bias"])
def test_short_rows_of_whole_vectors_at_any_alignment(dtype, n, gains):
    # Rows of whole vectors whose output starts at a vector's start go
    # vector by vector; at other starts, streamed, the run takes scalar
    # heads and vectors across row ends. The same bits either way, and
    # fresh (ordinary stores) too.
    x = _x(n, dtype, n)
    rng = np.random.default_rng(3)
    gb = (rng.uniform(0.5, 2.0, n), rng.standard_normal(n)) if gains else (None, None)
    size = np.dtype(dtype).itemsize
    buf = np.empty(x.size + 64, dtype)
    ys = {}
    for offset in (0, 1, 3):
        start = (-buf.ctypes.data // size) % (64 // size) + offset
        y = buf[start:start + x.size].reshape(x.shape)
        y.fill(np.nan)
        assert_route(STREAMED, fastnorm.layer_norm, x, *gb, out=y)
        fastnorm.layer_norm(x, *gb, out=y)
        ys[offset] = y.copy()
    ys["fresh"] = fastnorm.layer_norm(x, *gb)
    for key in (1, 3, "fresh"):
        assert_bitwise(ys[key], ys[0], f"y+{key} against an aligned y")
    ref = ref_layer_norm(x[::101], (1,), *gb)[0]
    assert_close(ys[0][::101], ref, OUT_TOL[np.dtype(dtype)] * (1 + np.abs(ref)) * 4, "y")


@pytest.mark.parametrize("threads", [1, 2])
def test_fresh_output_of_columns_and_short_rows_unchanged(threads):
    # Columns (axis 0: blocks of rows) and short rows.
    fastnorm.set_num_threads(threads)
    try:
        for x, axis in ((_x(1024, np.float32, 3), 0), (_x(1000, np.float64, 5), 0),
                        (_x(32, np.float32, 4), 1)):
            assert_route(UPWARDS, fastnorm.layer_norm, x, axis=axis)
            assert_route(STREAMED, fastnorm.layer_norm, x, axis=axis, out=np.empty_like(x))
            fresh = fastnorm.layer_norm(x, axis=axis)
            into = np.empty_like(x)
            fastnorm.layer_norm(x, axis=axis, out=into)
            assert_bitwise(fresh, into, f"axis {axis}")
            if axis == 0:
                ref = ref_layer_norm(x[:, ::37], (0,))[0]
                assert_close(fresh[:, ::37], ref,
                             OUT_TOL[x.dtype] * (1 + np.abs(ref)) * 4, "y")
    finally:
        fastnorm.set_num_threads(None)


def _images(shape, dtype, layout, seed):
    """NCHW x of at least 8 MiB, its maps contiguous or every other value of
    a wider array."""
    n = STREAM_BYTES // (int(np.prod(shape[1:])) * np.dtype(dtype).itemsize) + 1
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((n,) + shape[1:]) * 3 - 2).astype(dtype)
    if layout == "every other":
        wide = np.zeros(x.shape[:-1] + (2 * x.shape[-1],), dtype)
        wide[..., ::2] = x
        x = wide[..., ::2]
    return x


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("maps", [(56, 56), (45, 57)], ids=["56x56", "45x57"])
@pytest.mark.parametrize("layout", ["contiguous", "every other"])
@pytest.mark.parametrize("threads", [1, 2])
def test_fresh_batch_norm_of_long_maps_is_written_like_out(dtype, maps, layout, threads):
    # Maps longer than the image-by-image pass takes: each channel a slice
    # of one run per image, written image after image from the last.
    x = _images((1, 12) + maps, dtype, layout, maps[1])
    rng = np.random.default_rng(3)
    gamma, beta = rng.uniform(0.5, 2.0, 12), rng.standard_normal(12)
    r_mean, r_var = rng.standard_normal(12), rng.uniform(0.5, 2.0, 12)
    keep = (1, 12, 1, 1)
    fastnorm.set_num_threads(threads)
    try:
        for training in (True, False):
            kw = dict(training=training) if training else dict(
                running_mean=r_mean.copy(), running_var=r_var.copy(), training=False)
            assert_route(DOWNWARDS, fastnorm.batch_norm, x, gamma, beta, **kw)
            assert_route(STREAMED, fastnorm.batch_norm, x, gamma, beta, out=np.empty_like(x), **kw)
            fresh = fastnorm.batch_norm(x, gamma, beta, **kw)
            kw = dict(training=training) if training else dict(
                running_mean=r_mean.copy(), running_var=r_var.copy(), training=False)
            into = np.full_like(x, np.nan)
            fastnorm.batch_norm(x, gamma, beta, out=into, **kw)
            assert_bitwise(fresh, into, f"allocating against out=, training={training}")
            some = x[::5].astype(np.float64)
            if training:
                ref = ref_layer_norm(x.astype(np.float64), (0, 2, 3), gamma.reshape(keep),
                                     beta.reshape(keep))[0][::5]
            else:
                ref = ((some - r_mean.reshape(keep)) / np.sqrt(r_var.reshape(keep) + 1e-5)
                       * gamma.reshape(keep) + beta.reshape(keep))
            assert_close(fresh[::5], ref, OUT_TOL[np.dtype(dtype)] * (1 + np.abs(ref)) * 4, "y")
    finally:
        fastnorm.set_num_threads(None)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("threads", [1, 2])
def test_fresh_gradients_are_written_like_out(dtype, threads):
    # dx of at least 8 MiB, allocated by the call (ordinary stores where it
    # is written in address order) against dx= an existing array
    # (streamed): rows (the fast path and the general one), the columns of
    # (N, C), and NCHW channels (several runs, streamed either way).
    rng = np.random.default_rng(8)
    x = _x(1000, dtype, 9)
    dy = rng.standard_normal(x.shape).astype(dtype)
    gamma = rng.uniform(0.5, 2.0, x.shape[1])
    images = _images((1, 12, 56, 56), dtype, "contiguous", 4)
    dy_images = rng.standard_normal(images.shape).astype(dtype)
    fastnorm.set_num_threads(threads)
    try:
        _, mean, rstd = fastnorm.layer_norm(x, return_stats=True)
        for fast in (True, False):          # the fast path, the general one
            with contextlib.nullcontext() if fast else fastpath.general_path():
                assert_route(dict(UPWARDS, fast_path=fast), fastnorm.layer_norm_backward, dy, x,
                             mean, rstd, gamma)
                assert_route(STREAMED, fastnorm.layer_norm_backward, dy, x, mean, rstd, gamma,
                             out=(np.empty_like(x), None, None))
                fresh = fastnorm.layer_norm_backward(dy, x, mean, rstd, gamma)
                into = np.full_like(x, np.nan)
                fastnorm.layer_norm_backward(dy, x, mean, rstd, gamma, out=(into, None, None))
            assert_bitwise(fresh[0], into, f"rows, fast path {fast}")
        _, mean, rstd = fastnorm.batch_norm(x, axis=0, return_stats=True)
        assert_route(UPWARDS, fastnorm.batch_norm_backward, dy, x, mean, rstd, axis=0)
        assert_route(STREAMED, fastnorm.batch_norm_backward, dy, x, mean, rstd, axis=0,
                     out=(np.empty_like(x), None, None))
        fresh = fastnorm.batch_norm_backward(dy, x, mean, rstd, gamma=None, axis=0)
        into = np.full_like(x, np.nan)
        fastnorm.batch_norm_backward(dy, x, mean, rstd, axis=0, out=(into, None, None))
        assert_bitwise(fresh[0], into, "columns")
        _, mean, rstd = fastnorm.batch_norm(images, return_stats=True)
        assert_route(STREAMED, fastnorm.batch_norm_backward, dy_images, images, mean, rstd)
        assert_route(STREAMED, fastnorm.batch_norm_backward, dy_images, images, mean, rstd,
                     out=(np.empty_like(images), None, None))
        fresh = fastnorm.batch_norm_backward(dy_images, images, mean, rstd)
        into = np.full_like(images, np.nan)
        fastnorm.batch_norm_backward(dy_images, images, mean, rstd, out=(into, None, None))
        assert_bitwise(fresh[0], into, "NCHW channels")
    finally:
        fastnorm.set_num_threads(None)
    # and the values, against the closed form in float64 (a few rows)
    rows = slice(None, None, 101)
    _, mean, rstd = fastnorm.layer_norm(x, return_stats=True)
    got = fastnorm.layer_norm_backward(dy, x, mean, rstd, gamma)[0][rows]
    ref = ref_norm_grads(dy[rows], x[rows], (1,), (1,), gamma.reshape(1, -1))
    tol = 1e-5 if dtype == np.float32 else 1e-12
    assert_close(got, ref["dx"], tol * ref["dx_scale"] + 1e-30, "dx")
