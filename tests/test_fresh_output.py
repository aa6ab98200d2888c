"""Outputs the call allocates itself are written last slice first.

A fresh output of at least 8 MiB (streamed) whose slices are single runs
(rows) is written from its last row down, each row from its last value to
its first, prefetching the row before: fresh pages cost less written that
way.  The values must not depend on it: y of an allocating call is compared
bit for bit with y written into an existing array (upwards), and with the
plain float64 reference, for every dtype, rows whose ends fall anywhere in
a vector (the scalar head and tail of each row), gain and bias along the
row or none, one and two threads.
"""
import numpy as np
import pytest

import fastnorm
from fastnorm import _dispatch
from reference import OUT_TOL, assert_bitwise, assert_close, ref_layer_norm, ref_rms_norm

# Rows of n values, enough of them for an output of 8 MiB or more.
STREAM_BYTES = 8 << 20


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
    # one gain per row value: downwards and upwards give the same bits.
    x = _x(1000, np.float32, 7)
    k = _dispatch.kernels
    buf = np.empty(x.size + 16, np.float32)
    start = (-buf.ctypes.data // 4) % 16 + offset
    for gamma in (None, np.linspace(0.5, 1.5, 1000).reshape(1, -1)):
        ys = []
        for fresh in (False, True):
            y = buf[start:start + x.size].reshape(x.shape)
            y.fill(np.nan)
            k.normalize(x, y, gamma, None, None, None, None, (False, True), k.MODES["center"],
                        1e-5, 1, fresh)
            ys.append(y.copy())
        assert_bitwise(ys[1], ys[0], f"fresh against not, y+{offset}")
        assert not np.isnan(ys[1]).any()


def test_fresh_output_of_columns_and_short_rows_unchanged():
    # Other patterns ignore the flag: columns (axis 0) and short rows.
    for x, axis in ((_x(1024, np.float32, 3), 0), (_x(32, np.float32, 4), 1)):
        fresh = fastnorm.layer_norm(x, axis=axis)
        into = np.empty_like(x)
        fastnorm.layer_norm(x, axis=axis, out=into)
        assert_bitwise(fresh, into, f"axis {axis}")
