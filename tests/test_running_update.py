"""batch_norm's update of its running statistics: the C loop that takes
contiguous float32/float64 buffers rounds exactly as the NumPy expressions
that take every other buffer (each product rounded before its sum, in
float64, stored in the buffer's dtype), and both give the plain float64
reference."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import fastnorm
from fastnorm import _simd
from fastnorm._running import update_running


def _numpy_update(rm, rv, mean, var, momentum, n):
    """The update as NumPy evaluates it, into copies of the buffers."""
    rm, rv = rm.copy(), rv.copy()
    old_mean, old_var = rm.astype(np.float64), rv.astype(np.float64)
    np.copyto(rm, (1.0 - momentum) * old_mean + momentum * mean, casting="unsafe")
    np.copyto(rv, (1.0 - momentum) * old_var + momentum * var * (n / (n - 1)),
              casting="unsafe")
    return rm, rv


values = st.floats(-1e6, 1e6, allow_nan=False, width=64)


@settings(max_examples=200, deadline=None)
@given(dtype=st.sampled_from([np.float32, np.float64]),
       size=st.integers(1, 40),
       seed=st.integers(0, 2**32 - 1),
       offset=values,
       momentum=st.floats(0.0, 1.0),
       n=st.integers(2, 10**6))
def test_the_c_loop_rounds_as_numpy(dtype, size, seed, offset, momentum, n):
    rng = np.random.default_rng(seed)
    rm = (offset + rng.standard_normal(size)).astype(dtype)
    rv = rng.uniform(0.1, 10.0, size).astype(dtype)
    mean = offset + rng.standard_normal(size) * 1e-3   # cancels against (1 - m) rm
    var = rng.uniform(0.0, 10.0, size)
    want_m, want_v = _numpy_update(rm, rv, mean, var, momentum, n)
    assert _simd.kernels.update_running(rm, rv, mean, var, momentum, n / (n - 1))
    np.testing.assert_array_equal(rm, want_m)
    np.testing.assert_array_equal(rv, want_v)


def _every_other(a):
    return np.repeat(a, 2)[::2]


def _buffers(layout):
    """Running buffers and statistics of one layout, made afresh each call
    (the same values every time)."""
    rng = np.random.default_rng(3)
    rm64, rv64 = rng.standard_normal(12) + 50.0, rng.uniform(0.5, 2, 12)
    mean, var = rng.standard_normal(12) + 50.0, rng.uniform(0.5, 2, 12)
    dtype = np.float16 if layout == "float16" else np.float32
    rm, rv = rm64.astype(dtype), rv64.astype(dtype)
    if layout == "every other":
        rm, rv = _every_other(rm), _every_other(rv)
    elif layout == "swapped bytes":
        rm = rm.astype(rm.dtype.newbyteorder(">"))
        rv = rv.astype(rv.dtype.newbyteorder(">"))
    elif layout == "strided stats":
        mean, var = _every_other(mean), _every_other(var)
    elif layout == "swapped stats":
        mean, var = mean.astype(">f8"), var.astype(">f8")
    elif layout == "keepdims":
        rm, rv = rm.reshape(1, 12, 1), rv.reshape(1, 12, 1)
        mean, var = mean.reshape(1, 12, 1), var.reshape(1, 12, 1)
    return rm64, rm, rv, mean, var


@pytest.mark.parametrize("layout", ["float16", "every other", "swapped bytes",
                                    "strided stats", "swapped stats", "keepdims"])
def test_other_buffers_take_numpys_way_to_the_same_values(layout):
    rm64, rm, rv, mean, var = _buffers(layout)
    want_m, want_v = _numpy_update(rm, rv, mean, var, 0.25, 7)
    _, c_rm, c_rv, c_mean, c_var = _buffers(layout)
    taken = _simd.kernels.update_running(c_rm, c_rv, c_mean, c_var, 0.25, 7 / 6)
    assert taken == (layout == "keepdims")   # the C loop takes contiguous ones only
    update_running(rm, rv, mean, var, 0.25, 7)
    np.testing.assert_array_equal(rm, want_m)
    np.testing.assert_array_equal(rv, want_v)
    # ... and both are the update in plain float64
    ref_m = 0.75 * rm64 + 0.25 * mean.ravel()
    tol = 1e-2 if layout == "float16" else 1e-5
    np.testing.assert_allclose(np.asarray(rm, np.float64).ravel(), ref_m, rtol=tol)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_batch_norm_running_statistics_against_float64(dtype):
    """Through the public call: PyTorch's update from the batch's float64
    mean and unbiased variance, written plainly here."""
    rng = np.random.default_rng(5)
    x = (1e3 + rng.standard_normal((64, 6, 5, 5))).astype(dtype)
    rm = rng.standard_normal(6).astype(dtype) + 1e3
    rv = rng.uniform(0.5, 2, 6).astype(dtype)
    rm0, rv0 = rm.astype(np.float64), rv.astype(np.float64)
    fastnorm.batch_norm(x, running_mean=rm, running_var=rv, momentum=0.2)
    x64 = x.astype(np.float64)
    n = 64 * 5 * 5
    mean = x64.mean(axis=(0, 2, 3))
    var = x64.var(axis=(0, 2, 3)) * n / (n - 1)
    tol = 1e-6 if dtype == np.float32 else 1e-13
    np.testing.assert_allclose(rm, 0.8 * rm0 + 0.2 * mean, rtol=tol)
    np.testing.assert_allclose(rv, 0.8 * rv0 + 0.2 * var, rtol=tol * 10)


def test_dask_path_refuses_one_buffer_for_both():
    """As the NumPy path does: the running mean and variance in one buffer
    would make the update depend on the order of the writes."""
    da = pytest.importorskip("dask.array")
    buf = np.zeros(3)
    x = da.from_array(np.random.default_rng(0).standard_normal((8, 3)), chunks=4)
    for arg in (x, x.compute()):
        with pytest.raises(ValueError, match="share memory"):
            fastnorm.batch_norm(arg, running_mean=buf, running_var=buf, axis=0)
