"""Parameters in every form a call accepts: gain and bias in the named shape
or keepdims layout (broadcasting along their own axes), and of float16 or
float32, widened to the float64 the kernels read (kernels.as_float64 and
param_named): arrays of 64 KiB of float64 or more live in the kernels' kept
scratch blocks, smaller ones in NumPy's memory.  Both sides of that bound,
any strides, and the blocks' lifetimes: a block lent to a live array is
never handed to anything else.  (Parameters of the wrong shape:
test_errors.py.)"""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fastnorm
from fastnorm import _simd
from reference import assert_close, ref_layer_norm, ref_rms_norm
from routes import assert_route

X = np.arange(24.0).reshape(2, 3, 4)
KEPT_MIN_VALUES = (64 << 10) // 8     # FN_KEEP_MIN bytes of float64


def _kernels():
    return _simd.kernels


@settings(max_examples=60, deadline=None)
@given(dtype=st.sampled_from([np.float16, np.float32, np.float64]),
       rows=st.integers(1, 40),
       cols=st.sampled_from([1, 7, 203, 204, 205, 512, 4097]),
       view=st.sampled_from(["contiguous", "reversed", "every other column", "transposed"]),
       seed=st.integers(0, 2**16))
def test_as_float64_equals_astype(dtype, rows, cols, view, seed):
    src = np.random.default_rng(seed).standard_normal((rows, 2 * cols)).astype(dtype)
    a = {"contiguous": src[:, :cols], "reversed": src[::-1, ::-1],
         "every other column": src[:, ::2], "transposed": src.T}[view]
    before = a.copy()
    got = _kernels().as_float64(a)
    assert got.dtype == np.float64 and got.shape == a.shape and got.flags.c_contiguous
    assert got.flags.writeable
    np.testing.assert_array_equal(got, a.astype(np.float64))
    np.testing.assert_array_equal(a, before)          # the input is left alone
    assert not np.may_share_memory(got, a)


@pytest.mark.parametrize("n", [KEPT_MIN_VALUES - 1, KEPT_MIN_VALUES, 3 * KEPT_MIN_VALUES])
def test_widened_arrays_own_their_memory_while_alive(n):
    # Each live result keeps its block: later calls (which take and give back
    # scratch blocks of every size) and later widenings never write into it.
    k = _kernels()
    rng = np.random.default_rng(n)
    sources = [rng.standard_normal(n).astype(np.float32) for _ in range(12)]
    live = [(k.as_float64(s), s) for s in sources]
    x = rng.standard_normal((64, n)).astype(np.float32)
    for i in range(6):
        fastnorm.layer_norm(x, sources[i], sources[i + 1])
        fastnorm.mean_var(x, axis=0)
        del live[0]                             # one block goes back...
        live.append((k.as_float64(sources[i]), sources[i]))     # ...and out again
    for arr, src in live:
        np.testing.assert_array_equal(arr, src.astype(np.float64))
    ptrs = [arr.ctypes.data for arr, _ in live]
    assert len(set(ptrs)) == len(ptrs)


def test_param_named_large_row():
    k = _kernels()
    p = np.random.default_rng(3).standard_normal(2 * KEPT_MIN_VALUES).astype(np.float32)
    got = k.param_named(p, (False, False, True), (1, 1, p.size))
    assert got.shape == (1, 1, p.size) and got.dtype == np.float64
    np.testing.assert_array_equal(got.reshape(-1), p.astype(np.float64))


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_layer_norm_over_two_axes_with_large_float_params(dtype):
    # (49, 256) gain and bias: 98 KiB as float64, so widened into kept blocks.
    rng = np.random.default_rng(4)
    x = (5.0 + rng.standard_normal((6, 49, 256))).astype(dtype)
    g = rng.uniform(0.5, 2.0, (49, 256)).astype(dtype)
    b = rng.standard_normal((49, 256)).astype(dtype)
    for _ in range(2):        # the second call reuses the blocks the first gave back
        y = fastnorm.layer_norm(x, g, b, axis=(1, 2))
        ref = ref_layer_norm(x, (1, 2), g, b)[0]
        tol = 5e-3 if dtype == np.float16 else 1e-5
        assert_close(y, ref, tol * (np.abs(ref) + 1.0), f"layer_norm {dtype.__name__}")


def test_fast_path_with_long_float32_rows():
    # The last axis alone, a 1-d float32 gain of 2 * KEPT_MIN_VALUES values:
    # the fast path widens it with param_named into a kept block.
    rng = np.random.default_rng(5)
    n = 2 * KEPT_MIN_VALUES
    x = rng.standard_normal((3, n)).astype(np.float32)
    g = rng.uniform(0.5, 2.0, n).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    assert_route({"fast_path": True}, fastnorm.layer_norm, x, g, b)
    assert_route({"fast_path": True}, fastnorm.rms_norm, x, g)
    y = fastnorm.layer_norm(x, g, b)
    ref = ref_layer_norm(x, (1,), g, b)[0]
    assert_close(y, ref, 1e-5 * (np.abs(ref) + 1.0), "layer_norm")
    y = fastnorm.rms_norm(x, g)
    ref = ref_rms_norm(x, (1,), g)[0]
    assert_close(y, ref, 1e-5 * (np.abs(ref) + 1.0), "rms_norm")


def _in_layout(p, layout):
    """p's values in a strided layout: reversed, or every other value."""
    if layout == "reversed":
        return p[::-1].copy()[::-1]
    spread = np.zeros(2 * p.size, p.dtype)
    spread[::2] = p
    return spread[::2]


@settings(max_examples=80, deadline=None)
@given(x_dtype=st.sampled_from([np.float16, np.float32, np.float64]),
       p_dtype=st.sampled_from([np.float16, np.float32, np.float64]),
       shape=st.sampled_from([(2,), (1, 2), (5, 3), (64, 33), (9, 768), (3, 4, 17)]),
       layout=st.sampled_from(["reversed", "every other value"]),
       with_beta=st.booleans(), seed=st.integers(0, 2**16))
def test_parameter_layout_leaves_the_bits_alone(x_dtype, p_dtype, shape, layout, with_beta,
                                                seed):
    # The same gain and bias values in any layout give the same bits: the
    # float32 pass reads them as contiguous tables, so strided float64 ones
    # are copied rather than read where they are (a reversed float64 gain
    # once sent a float32 call down the float64 pass, one value apart).
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * 3 + 1).astype(x_dtype)
    n = shape[-1]
    gamma = rng.uniform(0.5, 2.0, n).astype(p_dtype)
    beta = rng.standard_normal(n).astype(p_dtype) if with_beta else None
    g2 = _in_layout(gamma, layout)
    b2 = None if beta is None else _in_layout(beta, layout)
    keep = (1,) * (x.ndim - 1) + (n,)
    for axis in (-1, (x.ndim - 1,)):          # the fast path and the general one
        y = fastnorm.layer_norm(x, gamma, beta, axis=axis)
        y2 = fastnorm.layer_norm(x, g2, b2, axis=axis)
        np.testing.assert_array_equal(y2.view(np.uint8), y.view(np.uint8))
        # ...and in keepdims layout, strided as well
        y3 = fastnorm.layer_norm(x, g2.reshape(keep), None if b2 is None else b2.reshape(keep),
                                 axis=axis)
        np.testing.assert_array_equal(y3.view(np.uint8), y.view(np.uint8))
        r = fastnorm.rms_norm(x, gamma, axis=axis)
        r2 = fastnorm.rms_norm(x, g2, axis=axis)
        np.testing.assert_array_equal(r2.view(np.uint8), r.view(np.uint8))
    ref = ref_layer_norm(x, (x.ndim - 1,), gamma.astype(np.float64),
                         None if beta is None else beta.astype(np.float64))[0]
    tol = {np.float16: 4e-3, np.float32: 2e-6, np.float64: 1e-12}[x_dtype]
    assert_close(y, ref, tol * (1.0 + np.abs(ref)) * 4, "y")


@pytest.mark.parametrize("x_dtype", [np.float32, np.float64])
@pytest.mark.parametrize("layout", ["reversed", "every other value"])
@pytest.mark.parametrize("keepdims", [False, True])
def test_channel_parameter_layout_leaves_the_bits_alone(x_dtype, layout, keepdims):
    # Per-channel gains and biases (group_norm, batch_norm) too, in their
    # named shape or keepdims layout.
    rng = np.random.default_rng(13)
    x = (rng.standard_normal((3, 6, 5)) * 3 + 1).astype(x_dtype)
    gamma, beta = rng.uniform(0.5, 2.0, 6), rng.standard_normal(6)
    g2, b2 = (_in_layout(p, layout) for p in (gamma, beta))
    if keepdims:
        g2, b2 = g2.reshape(1, 6, 1), b2.reshape(1, 6, 1)
    for func in (lambda g, b: fastnorm.group_norm(x, 2, g, b),
                 lambda g, b: fastnorm.instance_norm(x, g, b),
                 lambda g, b: fastnorm.batch_norm(x, g, b)):
        y, y2 = func(gamma, beta), func(g2, b2)
        np.testing.assert_array_equal(y2.view(np.uint8), y.view(np.uint8))


@pytest.mark.parametrize("shape", [(3, 4), (1, 3, 4), (1, 1, 4), (1, 3, 1), (1, 1, 1)])
def test_layer_params_of_accepted_shapes(shape):
    y = fastnorm.layer_norm(X, np.ones(shape), np.zeros(shape), axis=(1, 2))
    assert y.shape == X.shape
