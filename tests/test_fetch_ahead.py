"""The kernels fetch a few KiB ahead of what they read: the statistics
loops over contiguous data (STATS_AHEAD in src/_moments.pxd) across rows
when x's rows follow each other and are taken upwards (short rows, a group
of rows at a time, whichever way y goes), across the runs of
an image in the image-by-image pass, else within the run; the float32
output of a slice of several runs (FN_AHEAD_F32 in src/fastnorm_simd.h)
into the next run.  Fetching changes no value, so these tests check the
values of every way in against the float64 reference, with x placed so
that its last byte is the last readable byte of its memory (a page the
process may not touch follows it): a read past what the call reads next
would crash the test.
"""
import ctypes
import mmap

import numpy as np
import pytest

import fastnorm
from fastnorm import _simd
from reference import assert_close, ref_layer_norm, ref_mean_var, ref_rms_norm

PAGE = mmap.PAGESIZE
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)


def at_the_end_of_memory(values):
    """A copy of `values` (C order) whose last byte is followed by a page
    that cannot be read (the mapping lives as long as the array: it is the
    array's base)."""
    nbytes = values.nbytes
    span = -(-nbytes // PAGE) * PAGE
    buf = mmap.mmap(-1, span + PAGE)
    base = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    if _libc.mprotect(base + span, PAGE, 0) != 0:       # PROT_NONE
        pytest.skip(f"mprotect failed (errno {ctypes.get_errno()})")
    out = np.frombuffer(buf, dtype=values.dtype, count=values.size,
                        offset=span - nbytes).reshape(values.shape)
    out[...] = values
    return out


def data(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    return (1e3 + rng.standard_normal(shape) * 3).astype(dtype)


def tol(dtype):
    return {np.float16: 4e-3, np.float32: 2e-6, np.float64: 1e-12}[dtype]


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("n", [1, 63, 64, 65, 1000, 2048, 4096 + 17, 3 * 4096])
@pytest.mark.parametrize("threads", [1, 2])
def test_contiguous_rows_fetch_ahead_across_rows(dtype, n, threads):
    # Enough rows for more than the distance fetched.
    x = at_the_end_of_memory(data((max(37, 20000 // n), n), dtype))
    fastnorm.set_num_threads(threads)
    try:
        mean, var = fastnorm.mean_var(x, axis=-1, keepdims=True)
        y = np.empty_like(x)
        fastnorm.layer_norm(x, axis=-1, out=y)
        fresh = fastnorm.layer_norm(x, axis=-1)
        rms = fastnorm.rms_norm(x, axis=-1)
    finally:
        fastnorm.set_num_threads(None)
    ref_mean, ref_var, _ = ref_mean_var(x, (1,))
    assert_close(mean, ref_mean, tol(dtype) * (1 + np.abs(ref_mean)), "mean")
    assert_close(var, ref_var, 4 * tol(dtype) * ref_var + 1e-30, "var")
    ref_y = ref_layer_norm(x, (1,))[0]
    assert_close(y, ref_y, 8 * tol(dtype) * (1 + np.abs(ref_y)), "layer_norm out=")
    assert_close(fresh, ref_y, 8 * tol(dtype) * (1 + np.abs(ref_y)), "layer_norm fresh")
    ref_r = ref_rms_norm(x, (1,))[0]
    assert_close(rms, ref_r, 8 * tol(dtype) * (1 + np.abs(ref_r)), "rms_norm")


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("n", [8, 33, 100, 255])
def test_short_rows_out_of_cache_fetch_ahead_of_each_group(dtype, n):
    # Short rows fetch ahead only in calls too large for the cache (x over
    # 4 MiB; float64 1 MiB): just over that here, ending at the last
    # readable byte.
    bound = _simd.kernels.cached_rows[np.dtype(dtype).itemsize][0]
    x = at_the_end_of_memory(data((bound // (n * np.dtype(dtype).itemsize) + 37, n), dtype))
    y = np.empty_like(x)
    fastnorm.layer_norm(x, axis=-1, out=y)
    fresh = fastnorm.layer_norm(x, axis=-1)
    rms = fastnorm.rms_norm(x, axis=-1)
    mean, var = fastnorm.mean_var(x, axis=-1, keepdims=True)
    ref_y = ref_layer_norm(x, (1,))[0]
    assert_close(y, ref_y, 8 * tol(dtype) * (1 + np.abs(ref_y)), "layer_norm out=")
    assert_close(fresh, ref_y, 8 * tol(dtype) * (1 + np.abs(ref_y)), "layer_norm fresh")
    ref_r = ref_rms_norm(x, (1,))[0]
    assert_close(rms, ref_r, 8 * tol(dtype) * (1 + np.abs(ref_r)), "rms_norm")
    ref_mean, ref_var, _ = ref_mean_var(x, (1,))
    assert_close(var, ref_var, 4 * tol(dtype) * ref_var + 1e-30, "var")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", ["rows apart", "reversed rows", "last axes", "long runs",
                                  "image by image", "short runs image by image"])
def test_other_layouts_fetch_within_what_comes_next(dtype, case):
    if case == "rows apart":          # each row a run of its own, then a gap
        x = at_the_end_of_memory(data((40, 3000), dtype))[:, :2990]
        axes = (1,)
    elif case == "reversed rows":     # rows taken downwards
        x = at_the_end_of_memory(data((40, 3000), dtype))[::-1]
        axes = (1,)
    elif case == "last axes":         # (196, 768) slices, each one run
        x = at_the_end_of_memory(data((6, 49, 768), dtype))
        axes = (1, 2)
    elif case == "long runs":         # NCHW maps too long for the image pass
        x = at_the_end_of_memory(data((3, 5, 64, 64), dtype))
        axes = (0, 2, 3)
    elif case == "image by image":    # NCHW maps of 1-8 KiB: the image pass
        x = at_the_end_of_memory(data((4, 6, 30, 30), dtype))
        axes = (0, 2, 3)
    else:                             # maps of at most 1 KiB, 8 at a time
        x = at_the_end_of_memory(data((5, 43, 7, 7), dtype))
        axes = (0, 2, 3)
    mean, var = fastnorm.mean_var(x, axis=axes, keepdims=True)
    y = fastnorm.layer_norm(x, axis=axes)
    ref_mean, ref_var, _ = ref_mean_var(x, axes)
    assert_close(mean, ref_mean, tol(dtype) * (1 + np.abs(ref_mean)), "mean")
    assert_close(var, ref_var, 4 * tol(dtype) * ref_var, "var")
    ref_y = ref_layer_norm(x, axes)[0]
    assert_close(y, ref_y, 8 * tol(dtype) * (1 + np.abs(ref_y)), "layer_norm")


@pytest.mark.parametrize("fresh", [False, True], ids=["out", "fresh"])
@pytest.mark.parametrize("maps", [(64, 64), (45, 57), "cropped", "cropped 6 KiB"])
def test_eval_maps_fetch_into_the_next_run(maps, fresh):
    # float32 maps that do not go image by image (too long, or rows of a
    # map apart): each run fetches ahead into the run after it, the last run
    # of a channel into the next channel's first, the last channel's last
    # run nothing, and never further than the next run's end.
    if maps == "cropped":
        x = at_the_end_of_memory(data((3, 5, 30, 31), np.float32))[..., :30]
    elif maps == "cropped 6 KiB":     # runs shorter than the distance fetched
        x = at_the_end_of_memory(data((3, 5, 2, 1501), np.float32))[..., :1500]
    else:
        x = at_the_end_of_memory(data((3, 5) + maps, np.float32))
    rng = np.random.default_rng(2)
    mean = rng.uniform(990.0, 1010.0, 5)
    var = rng.uniform(1.0, 20.0, 5)
    y = None if fresh else np.empty_like(x)
    y = fastnorm.batch_norm(x, running_mean=mean.copy(), running_var=var.copy(),
                            training=False, out=y)
    ref = (x.astype(np.float64) - mean[:, None, None]) / np.sqrt(var[:, None, None] + 1e-5)
    assert_close(y, ref, 8 * tol(np.float32) * (1 + np.abs(ref)), "batch_norm eval")
