import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import fastnorm
from checks import check_rms_norm
from reference import assert_close, ref_rms_norm
from strategies import normalizer_spec


@given(normalizer_spec("rms"))
def test_rms_norm_matches_reference(spec):
    check_rms_norm(spec)


def test_docstring_example():
    y = fastnorm.rms_norm(np.array([3.0, 4.0]), eps=0.0)
    r = np.sqrt(12.5)
    assert_close(y, [3 / r, 4 / r], 1e-15)


@given(st.integers(0, 2**32 - 1), st.sampled_from([-1, 0, (0, 2), None]))
def test_invariant_to_positive_scaling(seed, axis):
    # Zhang & Sennrich: RMSNorm is invariant to re-scaling its input (eps = 0),
    # but not to shifts.
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((4, 5, 6))
    axes = tuple(range(3)) if axis is None else np.atleast_1d(axis) % 3
    kshape = tuple(1 if i in axes else s for i, s in enumerate(x.shape))
    a = rng.uniform(0.01, 100.0, size=kshape)
    y0 = fastnorm.rms_norm(x, axis=axis, eps=0.0)
    assert_close(fastnorm.rms_norm(a * x, axis=axis, eps=0.0), y0, 1e-13, "RMS(a x)")
    assert_close(fastnorm.rms_norm(-a * x, axis=axis, eps=0.0), -y0, 1e-13, "RMS(-a x)")


def test_output_has_unit_rms():
    x = np.random.default_rng(1).standard_normal((6, 257)) * 5 + 2
    y = fastnorm.rms_norm(x, eps=0.0)
    assert_close(np.sqrt((y**2).mean(axis=1)), 1.0, 1e-14)


def test_not_centered():
    # An offset is kept, unlike layer norm.
    x = np.full((2, 8), 3.0)
    y, rstd = fastnorm.rms_norm(x, eps=0.0, return_stats=True)
    assert_close(y, 1.0, 1e-15)
    assert_close(rstd, 1 / 3, 1e-16)
    assert rstd.shape == (2, 1)


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_return_stats_dtype_and_gamma_forms(dtype):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 4, 5)).astype(dtype)
    g = rng.uniform(0.5, 2, size=(4,))
    y1, r1 = fastnorm.rms_norm(x, g, axis=1, return_stats=True)
    y2, r2 = fastnorm.rms_norm(x, g.reshape(1, 4, 1), axis=1, return_stats=True)
    assert r1.dtype == (np.float64 if dtype == "float64" else np.float32)
    assert r1.shape == (3, 1, 5)
    yr, rr = ref_rms_norm(x, (1,), g.reshape(1, 4, 1))
    tol = {"float16": 5e-3, "float32": 1e-5, "float64": 1e-12}[dtype]
    for y, r in ((y1, r1), (y2, r2)):
        assert y.dtype == np.dtype(dtype)
        assert_close(y, yr, tol * np.abs(yr) + 1e-7)
        assert_close(r, rr, 1e-6 * rr)


def test_out_tuple_with_rstd():
    x = np.random.default_rng(3).standard_normal((4, 10))
    y_out, r_out = np.empty_like(x), np.empty((4, 1))
    y, r = fastnorm.rms_norm(x, out=(y_out, r_out), return_stats=True)
    assert y is y_out and r is r_out
    yr, rr = ref_rms_norm(x, (1,))
    assert_close(y, yr, 1e-14)
    assert_close(r, rr, 1e-14)
