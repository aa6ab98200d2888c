"""Rows in cache: calls whose x is small enough to sit in L2/L3 (at most
4 MiB; float64 1 MiB) take rows longer than the short ones (up to 16 KiB;
float64 4 KiB) the short-rows way: statistics FN_W rows at a time, each
row summed into several vectors (one chain of additions per row would
pace it), and the output as one run whose coefficients are held along each
row.  Larger calls take each row its own way (fetching ahead).

These cases hit that way on both sides of its bounds (row length, total
size), with row lengths that do and do not fill whole vectors, outputs
that start off a vector boundary, gain and bias along the row or one for
all, and offsets that a float32 sum would lose (non-finite rows: in
test_short_rows.py).  Every value is compared with the plain float64
reference on the same input.
"""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import fastnorm
from fastnorm import _simd
from reference import OUT_TOL, assert_close, ref_layer_norm, ref_mean_var
from strategies import row_problem

EPS = 1e-5
# The bounds the kernels use (x's bytes, a row's bytes), by itemsize.
CACHED = _simd.kernels.cached_rows


def _tol(y_ref, dtype):
    return 4.0 * OUT_TOL[np.dtype(dtype)] * (1.0 + np.abs(y_ref))


def _check(x, gamma, beta, y, mean=None, rstd=None):
    ref, rmean, rrstd, _, _ = ref_layer_norm(x, (1,), gamma, beta, eps=EPS)
    assert_close(y, ref, _tol(ref, x.dtype), "y")
    if mean is None:
        return
    if x.dtype == np.float64:
        assert_close(mean, rmean, 1e-12 * (1 + np.abs(rmean)), "mean")
        assert_close(rstd, rrstd, 1e-11 * rrstd, "rstd")
    else:   # float32 statistics: within an ulp or two of the exact mean
        assert_close(mean, rmean, 2.0 * np.spacing(np.abs(rmean).astype(np.float32)), "mean")
        assert_close(rstd, rrstd, 1e-5 * rrstd, "rstd")


@st.composite
def cached_row_problems(draw):
    dtype = np.dtype(draw(st.sampled_from([np.float32, np.float64, np.float16])))
    total, row = CACHED[dtype.itemsize]
    longest = row // dtype.itemsize
    n = draw(st.one_of(st.integers(65, longest + 16),      # a few past the bound too
                       st.sampled_from([128, 129, longest - 1, longest, longest + 1])))
    rows = draw(st.integers(1, max(1, min(300, total // (n * dtype.itemsize)))))
    offset = draw(st.sampled_from([0.0, 3.0, 1e6 if dtype != np.float16 else 100.0]))
    params = draw(st.sampled_from(["none", "along", "one"]))
    seed = draw(st.integers(0, 2**32 - 1))
    return dtype, n, rows, offset, params, seed


@settings(deadline=None)
@given(cached_row_problems())
def test_cached_rows_layer_norm(problem):
    x, gamma, beta = row_problem(*problem, spread=True)
    y, mean, rstd = fastnorm.layer_norm(x, gamma, beta, eps=EPS, return_stats=True)
    _check(x, gamma, beta, y, mean, rstd)
    # Without statistics (coefficients a group of rows at a time): the same bits.
    np.testing.assert_array_equal(fastnorm.layer_norm(x, gamma, beta, eps=EPS), y)


@settings(deadline=None)
@given(cached_row_problems())
def test_cached_rows_mean_var(problem):
    x, _, _ = row_problem(*problem, spread=True)
    mean, var = fastnorm.mean_var(x, axis=1, dtype=np.float64)
    rmean, rvar, _ = ref_mean_var(x, (1,))
    tol = 1e-12 if x.dtype == np.float64 else 1e-9
    assert_close(mean, rmean[:, 0], tol * (1 + np.abs(rmean[:, 0])), "mean")
    # Relative to the variance itself: exact whatever the offset.
    assert_close(var, rvar[:, 0], tol * rvar[:, 0], "var")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cached_rows_on_both_sides_of_the_size_bound(dtype):
    # Rows of the longest cached length: as many as fill the bound (the
    # grouped way), and one more (each row its own way); both right, and
    # a row gets its values either way.
    total, row = CACHED[np.dtype(dtype).itemsize]
    n = row // np.dtype(dtype).itemsize
    rows = total // row
    rng = np.random.default_rng(11)
    x = (1e3 + rng.standard_normal((rows + 1, n))).astype(dtype)
    gamma, beta = rng.uniform(0.5, 2.0, n), rng.standard_normal(n)
    inside = fastnorm.layer_norm(x[:rows], gamma, beta, eps=EPS)
    outside = fastnorm.layer_norm(x, gamma, beta, eps=EPS)
    _check(x[:rows], gamma, beta, inside)
    _check(x, gamma, beta, outside)


@pytest.mark.parametrize("n", [64, 127, 128, 129, 768, 1000, 4095])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cached_rows_every_level_and_thread_count(simd_level, n, dtype):
    # 203 rows: several work items and a partial group of rows; the same
    # bits on one thread and two.
    while n * np.dtype(dtype).itemsize > CACHED[np.dtype(dtype).itemsize][1]:
        n //= 2
    rng = np.random.default_rng(n)
    x = (1e3 + rng.standard_normal((203, n))).astype(dtype)
    gamma, beta = rng.uniform(0.5, 2.0, n), rng.standard_normal(n)
    outs = []
    for threads in (1, 2):
        fastnorm.set_num_threads(threads)
        outs.append(fastnorm.layer_norm(x, gamma, beta, eps=EPS, return_stats=True))
    _check(x, gamma, beta, *outs[0])
    for a, b in zip(*outs):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("shift", [1, 3, 7])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cached_rows_output_off_a_vector_boundary(dtype, shift):
    # y starts `shift` values past an aligned address: each row's held
    # vectors end short of the row, and a vector crosses into the next row.
    rng = np.random.default_rng(shift)
    x = (5 + rng.standard_normal((40, 300))).astype(dtype)
    gamma, beta = rng.uniform(0.5, 2.0, 300), rng.standard_normal(300)
    flat = np.full(40 * 300 + 64, 7.0, dtype)
    start = (-flat.ctypes.data // flat.itemsize) % 16 + shift
    y = flat[start:start + 40 * 300].reshape(40, 300)
    fastnorm.layer_norm(x, gamma, beta, eps=EPS, out=y)
    _check(x, gamma, beta, y)
    assert (flat[:start] == 7).all() and (flat[start + 40 * 300:] == 7).all()


def test_cached_rows_float32_offset_keeps_its_digits():
    # The accuracy bar: float32 rows at an offset of 1e6, error at most 1e-5.
    rng = np.random.default_rng(8)
    x = (1e6 + rng.standard_normal((64, 3000))).astype(np.float32)
    y = fastnorm.layer_norm(x, eps=0.0)
    ref = ref_layer_norm(x, (1,), eps=0.0)[0]
    assert np.abs(y - ref).max() <= 1e-5 * (1 + np.abs(ref).max())

