"""The axes a call takes (NumPy integers, many dimensions) and the dtypes it
gives: NumPy's rules for mean_var (scalars, keepdims, dtype=, integers,
bool, byte-swapped and array-like input), float16/float32/float64 results
and float32/float64 statistics for the normalizers, and the gradients'
dtypes."""
import numpy as np
import pytest

import fastnorm
from reference import (F64, OUT_TOL, assert_bitwise, assert_close, ref_layer_norm,
                       ref_mean_var, ref_norm_grads)

F32 = np.dtype(np.float32)
X = np.arange(24.0).reshape(2, 3, 4)


def test_numpy_integer_axes_are_accepted(fn):
    a = fn(X, axis=(np.int64(0), np.int32(2)))
    b = fn(X, axis=(0, 2))
    np.testing.assert_array_equal(a[0] if isinstance(a, tuple) else a,
                                  b[0] if isinstance(b, tuple) else b)


def _data(shape, dtype=np.float32, seed=0, offset=3.0):
    rng = np.random.default_rng(seed)
    return (offset + rng.standard_normal(shape)).astype(dtype)


@pytest.mark.parametrize("axes", [(0, 3, 5, 9), (9,), (1, 2, 3, 4, 5, 6, 7, 8), ()])
def test_many_dimensions(axes):
    x = _data((2, 3) * 5, np.float64)
    m, v = fastnorm.mean_var(x, axis=axes)
    rm, rv, _ = ref_mean_var(x, axes)
    assert_close(m, rm.reshape(m.shape), 1e-13)
    assert_close(v, rv.reshape(v.shape), 1e-13)
    y = fastnorm.layer_norm(x, axis=axes)
    assert_close(y, ref_layer_norm(x, axes)[0], 1e-12)


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int16", "bool"])
def test_scalar_results_are_numpy_scalars(dtype):
    # np.mean returns a NumPy scalar (not a 0-d array) for a full reduction.
    x = (np.arange(10) % 3).astype(dtype)
    m, v = fastnorm.mean_var(x)
    assert type(m) is type(np.mean(x)) and type(v) is type(np.var(x))
    assert np.isclose(m, np.mean(x.astype(np.float64)), rtol=1e-3)
    assert np.isclose(v, np.var(x.astype(np.float64)), rtol=1e-3)


def test_keepdims_and_dtype_like_numpy():
    x = np.random.default_rng(1).standard_normal((3, 4, 5)).astype(np.float32)
    for axis in [None, 0, -1, (0, 2), (2, 0), ()]:
        for dtype in [None, np.float64, np.float16]:
            m, v = fastnorm.mean_var(x, axis=axis, keepdims=True, dtype=dtype)
            em = np.mean(x, axis=axis, keepdims=True, dtype=dtype)
            assert m.shape == em.shape and m.dtype == em.dtype
            assert v.shape == em.shape and v.dtype == em.dtype


def test_integer_input_is_exact_for_small_ints():
    x = np.arange(-50, 51, dtype=np.int64).reshape(1, -1)
    m, v = fastnorm.mean_var(x, axis=1)
    assert m.dtype == np.float64
    assert m[0] == 0.0 and v[0] == np.var(np.arange(-50, 51, dtype=np.float64))


def test_array_like_input():
    m, v = fastnorm.mean_var([[1, 2, 3], [4, 5, 7]], axis=1)
    np.testing.assert_allclose(m, [2.0, 16 / 3], rtol=1e-15)
    np.testing.assert_allclose(v, [2 / 3, np.var([4, 5, 7])], rtol=1e-15)


def test_byte_swapped_input():
    x = np.random.default_rng(4).standard_normal((4, 9))
    m, v = fastnorm.mean_var(x.astype(">f8"), axis=1)
    assert_close(m, x.mean(axis=1), 1e-14, "mean")
    assert_close(v, x.var(axis=1), 1e-14, "var")


@pytest.mark.parametrize("x_dtype,dtype,expect", [
    ("float16", None, "float16"), ("float32", None, "float32"), ("int32", None, "float64"),
    ("bool", None, "float64"), ("float64", "float16", "float16"), ("float16", "float64", "float64"),
    ("uint8", "float32", "float32"),
])
def test_layer_norm_output_dtype(x_dtype, dtype, expect):
    x = (np.arange(24) % 5).reshape(4, 6).astype(x_dtype)
    y, mean, rstd = fastnorm.layer_norm(x, dtype=dtype, return_stats=True)
    assert y.dtype == np.dtype(expect)
    sdt = np.float64 if expect == "float64" else np.float32
    assert mean.dtype == sdt and rstd.dtype == sdt
    xd = x.astype(np.float64)
    ref = (xd - xd.mean(axis=1, keepdims=True)) / np.sqrt(xd.var(axis=1, keepdims=True) + 1e-5)
    assert_close(y, ref, 5e-3 if expect == "float16" else 1e-5)


@pytest.mark.parametrize("x_dt, dy_dt, dx_dt", [
    ("float64", "float64", "float64"), ("float32", "float32", "float32"),
    ("float16", "float16", "float16"), ("float32", "float64", "float64"),
    ("float64", "float32", "float64"), ("float16", "float32", "float32"),
    ("int32", "float32", "float64"), (">f8", "float64", "float64")])
def test_gradient_dtypes(x_dt, dy_dt, dx_dt):
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((6, 9)) * 3).astype(x_dt)
    dy = rng.standard_normal((6, 9)).astype(dy_dt)
    _, m, r = fastnorm.layer_norm(x, return_stats=True)
    dx, dg, db = fastnorm.layer_norm_backward(dy, x, m, r)
    assert dx.dtype == np.dtype(dx_dt)
    acc = F64 if np.dtype(dx_dt) == F64 else F32
    assert dg.dtype == db.dtype == acc, (dg.dtype, db.dtype, acc)
    # A float32 gamma gives float32 parameter gradients whatever x is.
    dx2, dg2, db2 = fastnorm.layer_norm_backward(dy, x, m, r, np.ones(9, np.float32))
    assert dg2.dtype == db2.dtype == F32
    assert_bitwise(dx2, dx)
    ref = ref_norm_grads(dy, x, (1,), (1,))
    # The forward's statistics are float32 for float16/float32 x.
    tol = max(OUT_TOL[np.dtype(dx_dt).newbyteorder("=")], 1e-6 if x.dtype.itemsize < 8 else 0) * 2
    assert_close(dx, ref["dx"], tol * ref["dx_scale"], "dx")
    assert_close(dg, ref["dgamma"].ravel(), 1e-6 * ref["dgamma_scale"].ravel(), "dgamma")
