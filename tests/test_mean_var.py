"""mean_var against np.mean and np.var (and the float64 reference) over
drawn shapes, axes, layouts, dtypes, ddof, keepdims and out= (checks.py)."""
import warnings

import numpy as np
import pytest
from hypothesis import given

import fastnorm
from checks import check_mean_var
from reference import assert_close, ref_row_variances
from strategies import mean_var_specs


@given(mean_var_specs())
def test_mean_var_matches_numpy(spec):
    check_mean_var(spec)


def test_mean_var_docstring_example():
    x = np.arange(12.0).reshape(3, 4)
    m, v = fastnorm.mean_var(x, axis=1)
    np.testing.assert_array_equal(m, [1.5, 5.5, 9.5])
    np.testing.assert_array_equal(v, [1.25, 1.25, 1.25])


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


# Rows selecting 0 .. 7 values; the fourth row constant (M2 = 0).
DOF_X = np.random.default_rng(5).standard_normal((8, 7))
DOF_X[4, :] = 1.0
DOF_WHERE = np.arange(7) < np.arange(8)[:, None]


@pytest.mark.parametrize("ddof", [0, 1, 2.5, 6, 7])
def test_each_slice_divides_by_its_own_degrees_of_freedom(ddof):
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        masked = fastnorm.mean_var(DOF_X, axis=1, ddof=ddof, where=DOF_WHERE)[1]
        whole = fastnorm.mean_var(DOF_X, axis=1, ddof=ddof)[1]
    np.testing.assert_allclose(masked, ref_row_variances(DOF_X, DOF_WHERE, ddof), rtol=1e-13)
    np.testing.assert_allclose(whole, ref_row_variances(DOF_X, DOF_WHERE | True, ddof),
                               rtol=1e-13)
