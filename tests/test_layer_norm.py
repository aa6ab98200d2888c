import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import fastnorm
from checks import check_layer_norm
from reference import assert_close, ref_layer_norm
from strategies import normalizer_spec


@given(normalizer_spec("layer"))
def test_layer_norm_matches_reference(spec):
    check_layer_norm(spec)


def test_docstring_example():
    x = np.array([[1.0, 2.0, 3.0], [10.0, 10.0, 40.0]])
    y = fastnorm.layer_norm(x, eps=0.0)
    s = np.sqrt(1.5)
    assert_close(y, [[-s, 0, s], [-1 / np.sqrt(2), -1 / np.sqrt(2), np.sqrt(2)]], 1e-15)


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


def test_output_is_standardized():
    x = np.random.default_rng(5).standard_normal((8, 300)) * 7 + 3
    y = fastnorm.layer_norm(x, eps=0.0)
    assert_close(y.mean(axis=1), 0.0, 1e-14, "mean of y")
    assert_close(y.var(axis=1), 1.0, 1e-13, "var of y")


def test_return_stats_values():
    x = np.random.default_rng(6).standard_normal((3, 4, 5)).astype(np.float32)
    y, mean, rstd = fastnorm.layer_norm(x, axis=(0, 2), eps=1e-3, return_stats=True)
    xd = x.astype(np.float64)
    assert mean.shape == (1, 4, 1) and rstd.shape == (1, 4, 1)
    assert mean.dtype == np.float32 and rstd.dtype == np.float32
    assert_close(mean, xd.mean(axis=(0, 2), keepdims=True), 1e-7)
    assert_close(rstd, 1 / np.sqrt(xd.var(axis=(0, 2), keepdims=True) + 1e-3), 1e-6)
    # The statistics broadcast against x and reproduce y.
    assert_close(y, (xd - mean) * rstd, 1e-5)


@pytest.mark.parametrize("x_dtype,dtype,expect", [
    ("float16", None, "float16"), ("float32", None, "float32"), ("int32", None, "float64"),
    ("bool", None, "float64"), ("float64", "float16", "float16"), ("float16", "float64", "float64"),
    ("uint8", "float32", "float32"),
])
def test_output_dtype(x_dtype, dtype, expect):
    x = (np.arange(24) % 5).reshape(4, 6).astype(x_dtype)
    y, mean, rstd = fastnorm.layer_norm(x, dtype=dtype, return_stats=True)
    assert y.dtype == np.dtype(expect)
    sdt = np.float64 if expect == "float64" else np.float32
    assert mean.dtype == sdt and rstd.dtype == sdt
    xd = x.astype(np.float64)
    ref = (xd - xd.mean(axis=1, keepdims=True)) / np.sqrt(xd.var(axis=1, keepdims=True) + 1e-5)
    assert_close(y, ref, 5e-3 if expect == "float16" else 1e-5)


def test_in_place():
    x = np.random.default_rng(7).standard_normal((6, 33)).astype(np.float32)
    ref = ref_layer_norm(x, (1,))[0]
    y = fastnorm.layer_norm(x, out=x)
    assert y is x
    assert_close(x, ref, 1e-5 * np.abs(ref) + 1e-7)


def test_out_overlapping_x_reversed():
    # out shares x's memory in another order: the result must be as if x
    # had been read completely first.
    x = np.random.default_rng(8).standard_normal((5, 20))
    ref = ref_layer_norm(x, (1,))[0]
    fastnorm.layer_norm(x, axis=1, out=x[::-1])
    assert_close(x[::-1], ref, 1e-13)


def test_gamma_sharing_memory_with_out():
    # gamma is a row of x and x is overwritten in place: gamma must be read
    # as it was when the call started.
    x = np.random.default_rng(9).standard_normal((6, 8))
    g = x[2]
    ref = ref_layer_norm(x, (1,), g.copy())[0]
    fastnorm.layer_norm(x, g, out=x)
    assert_close(x, ref, 1e-13)
