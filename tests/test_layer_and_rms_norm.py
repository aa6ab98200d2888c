"""layer_norm and rms_norm: results against the float64 references over drawn
shapes, axes, layouts, dtypes, parameters and out= (checks.py), and the
properties the papers state: layer norm is invariant to an affine map of
each sample, RMS norm to a positive scaling of it, and their outputs have
mean 0 and variance 1, or unit root mean square."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import fastnorm
from checks import check_layer_norm, check_rms_norm
from reference import assert_close, ref_layer_norm, ref_rms_norm
from strategies import normalizer_spec


@given(normalizer_spec("layer"))
def test_layer_norm_matches_reference(spec):
    check_layer_norm(spec)


@given(normalizer_spec("rms"))
def test_rms_norm_matches_reference(spec):
    check_rms_norm(spec)


def test_layer_norm_docstring_example():
    x = np.array([[1.0, 2.0, 3.0], [10.0, 10.0, 40.0]])
    y = fastnorm.layer_norm(x, eps=0.0)
    s = np.sqrt(1.5)
    assert_close(y, [[-s, 0, s], [-1 / np.sqrt(2), -1 / np.sqrt(2), np.sqrt(2)]], 1e-15)


def test_rms_norm_docstring_example():
    y = fastnorm.rms_norm(np.array([3.0, 4.0]), eps=0.0)
    r = np.sqrt(12.5)
    assert_close(y, [3 / r, 4 / r], 1e-15)


def test_gamma_beta_affine():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 6, 5))
    g, b = rng.standard_normal((6, 5)), rng.standard_normal((6, 5))
    y = fastnorm.layer_norm(x, g, b, axis=(1, 2))
    ref = ref_layer_norm(x, (1, 2), g[None], b[None])[0]
    assert_close(y, ref, 1e-13)
    # Keepdims layout gives the same result.
    y2 = fastnorm.layer_norm(x, g[None], b[None], axis=(-2, -1))
    assert_close(y2, y, 1e-15)


@given(st.integers(0, 2**32 - 1), st.sampled_from([(0,), (1,), (0, 1), (1, 2), (0, 2)]))
def test_invariant_to_per_sample_affine_maps(seed, axes):
    # Ba et al.: LN(a*x + b) == LN(x) for a > 0 per sample (eps = 0).
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((5, 6, 7))
    kshape = tuple(1 if i in axes else s for i, s in enumerate(x.shape))
    a = rng.uniform(0.1, 10.0, size=kshape)
    b = rng.uniform(-100.0, 100.0, size=kshape)
    y0 = fastnorm.layer_norm(x, axis=axes, eps=0.0)
    y1 = fastnorm.layer_norm(a * x + b, axis=axes, eps=0.0)
    assert_close(y1, y0, 1e-9, "LN(a x + b)")
    # A negative scale flips the sign.
    y2 = fastnorm.layer_norm(-a * x + b, axis=axes, eps=0.0)
    assert_close(y2, -y0, 1e-9, "LN(-a x + b)")


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


def test_output_is_standardized():
    x = np.random.default_rng(5).standard_normal((8, 300)) * 7 + 3
    y = fastnorm.layer_norm(x, eps=0.0)
    assert_close(y.mean(axis=1), 0.0, 1e-14, "mean of y")
    assert_close(y.var(axis=1), 1.0, 1e-13, "var of y")


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


def test_layer_norm_return_stats_values():
    x = np.random.default_rng(6).standard_normal((3, 4, 5)).astype(np.float32)
    y, mean, rstd = fastnorm.layer_norm(x, axis=(0, 2), eps=1e-3, return_stats=True)
    xd = x.astype(np.float64)
    assert mean.shape == (1, 4, 1) and rstd.shape == (1, 4, 1)
    assert mean.dtype == np.float32 and rstd.dtype == np.float32
    assert_close(mean, xd.mean(axis=(0, 2), keepdims=True), 1e-7)
    assert_close(rstd, 1 / np.sqrt(xd.var(axis=(0, 2), keepdims=True) + 1e-3), 1e-6)
    # The statistics broadcast against x and reproduce y.
    assert_close(y, (xd - mean) * rstd, 1e-5)


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_rms_norm_return_stats_dtype_and_gamma_forms(dtype):
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
