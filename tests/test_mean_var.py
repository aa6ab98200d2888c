"""mean_var against np.mean and np.var (and the float64 reference) over
drawn shapes, axes, layouts, dtypes, ddof, keepdims and out= (checks.py)."""
import warnings

import dask.array as da
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



def _plain_variances(x, where, ddof):
    """M2 / max(k - ddof, 0) of each row's k selected values, in plain
    float64 (inf, or NaN for a zero or NaN M2, without degrees of freedom)."""
    out = []
    for row, sel in zip(x, where):
        v = [float(a) for a in row[sel]]
        m2 = sum((a - sum(v) / len(v)) ** 2 for a in v) if v else float("nan")
        dof = max(len(v) - ddof, 0)
        out.append(m2 / dof if dof else (float("inf") if m2 > 0 else float("nan")))
    return np.array(out)


@pytest.mark.parametrize("ddof", [0, 1, 2.5, 6, 7])
def test_each_slice_divides_by_its_own_degrees_of_freedom(ddof):
    # Rows selecting 0 .. 7 values, on the local path and on Dask alike.
    x = np.random.default_rng(5).standard_normal((8, 7))
    x[4, :] = 1.0                                   # M2 = 0
    where = np.arange(7) < np.arange(8)[:, None]
    expect = _plain_variances(x, where, ddof)
    full = _plain_variances(x, np.ones_like(where), ddof)
    d = da.from_array(x, chunks=(3, 2))
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        cases = [(fastnorm.mean_var(x, axis=1, ddof=ddof, where=where)[1], expect),
                 (fastnorm.mean_var(d, axis=1, ddof=ddof, where=where)[1].compute(), expect),
                 (fastnorm.mean_var(x, axis=1, ddof=ddof)[1], full),
                 (fastnorm.mean_var(d, axis=1, ddof=ddof)[1].compute(), full)]
    for got, want in cases:
        np.testing.assert_allclose(got, want, rtol=1e-13, atol=0)
