import numpy as np
import pytest
from hypothesis import given

import fastnorm
from checks import check_mean_var
from reference import assert_close
from strategies import mean_var_specs


@given(mean_var_specs())
def test_mean_var_matches_numpy(spec):
    check_mean_var(spec)


def test_docstring_example():
    x = np.arange(12.0).reshape(3, 4)
    m, v = fastnorm.mean_var(x, axis=1)
    np.testing.assert_array_equal(m, [1.5, 5.5, 9.5])
    np.testing.assert_array_equal(v, [1.25, 1.25, 1.25])


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


@pytest.mark.parametrize("ddof", [0, 1, 3])
def test_ddof(ddof):
    x = np.random.default_rng(2).standard_normal((6, 40))
    m, v = fastnorm.mean_var(x, axis=1, ddof=ddof)
    assert_close(v, np.var(x, axis=1, ddof=ddof), 1e-13, "var")
    assert_close(m, np.mean(x, axis=1), 1e-14, "mean")


def test_ddof_at_least_n_behaves_like_numpy():
    # n - ddof <= 0: np.var gives inf (or nan for a zero sum) with a warning.
    x = np.array([[1.0, 2.0], [3.0, 3.0]])
    with pytest.warns(RuntimeWarning):
        _, v = fastnorm.mean_var(x, axis=1, ddof=2)
    with pytest.warns(RuntimeWarning):
        ev = np.var(x, axis=1, ddof=2)
    np.testing.assert_array_equal(v, ev)


def test_out_tuple_is_filled_and_returned():
    x = np.random.default_rng(3).standard_normal((5, 7))
    om, ov = np.empty(5), np.empty(5)
    m, v = fastnorm.mean_var(x, axis=1, out=(om, ov))
    assert m is om and v is ov
    assert_close(om, x.mean(axis=1), 1e-14, "mean")
    assert_close(ov, x.var(axis=1), 1e-14, "var")


def test_out_for_a_full_reduction_is_a_0d_array():
    x = np.arange(7.0)
    om, ov = np.empty(()), np.empty(())
    m, v = fastnorm.mean_var(x, out=(om, ov))
    assert m is om and v is ov
    assert om[()] == 3.0 and ov[()] == 4.0


def test_out_must_be_a_pair():
    x = np.ones((2, 3))
    with pytest.raises((TypeError, ValueError)):
        fastnorm.mean_var(x, axis=1, out=np.empty(2))
    with pytest.raises((TypeError, ValueError)):
        fastnorm.mean_var(x, axis=1, out=(np.empty(2),))


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
