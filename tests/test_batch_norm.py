"""batch_norm: results against the float64 references over drawn shapes,
axes, layouts, dtypes, parameters, running statistics and out=
(checks.py), its invariance to an affine map of each feature, training and
eval, and the update of the running statistics: PyTorch's, with the
unbiased variance, the C loop over contiguous float32/float64 buffers
rounding exactly as the NumPy expressions that take every other buffer."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fastnorm
from fastnorm import _simd
from fastnorm._running import update_running
from checks import check_batch_norm
from reference import assert_close, ref_layer_norm
from strategies import normalizer_spec


@given(normalizer_spec("batch"))
def test_batch_norm_matches_reference(spec):
    check_batch_norm(spec)


def test_docstring_example():
    x = np.array([[1.0, 10.0], [3.0, 30.0]])
    rm, rv = np.zeros(2), np.ones(2)
    y = fastnorm.batch_norm(x, running_mean=rm, running_var=rv, axis=0, eps=0.0)
    np.testing.assert_array_equal(y, [[-1.0, -1.0], [1.0, 1.0]])
    assert_close(rm, [0.2, 2.0], 1e-15)
    assert_close(rv, [1.1, 20.9], 1e-14)


def test_default_axis_is_all_but_channel():
    x = np.random.default_rng(0).standard_normal((4, 3, 5, 6))
    y, mean, rstd = fastnorm.batch_norm(x, return_stats=True)
    assert mean.shape == (1, 3, 1, 1) and rstd.shape == (1, 3, 1, 1)
    yr, mr, rr, _, _ = ref_layer_norm(x, (0, 2, 3))
    assert_close(y, yr, 1e-13)
    assert_close(mean, mr, 1e-15)
    assert_close(rstd, rr, 1e-14)


def test_channels_last():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 5, 6, 3))
    g, b = rng.standard_normal(3), rng.standard_normal(3)
    y = fastnorm.batch_norm(x, g, b, axis=(0, 1, 2))
    yr = ref_layer_norm(x, (0, 1, 2), g, b)[0]
    assert_close(y, yr, 1e-13)


@given(st.integers(0, 2**32 - 1), st.sampled_from([None, (0, 1, 2), 0]))
def test_invariant_to_per_feature_affine_maps(seed, axis):
    # Ioffe & Szegedy: the normalized activation does not change when a
    # feature is scaled by a > 0 and shifted (eps = 0).
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((6, 4, 5) if axis != 0 else (30, 7))
    axes = (0, 2) if axis is None else np.atleast_1d(axis)
    kshape = tuple(1 if i in axes else s for i, s in enumerate(x.shape))
    a = rng.uniform(0.1, 10.0, size=kshape)
    b = rng.uniform(-100, 100, size=kshape)
    y0 = fastnorm.batch_norm(x, axis=axis, eps=0.0)
    assert_close(fastnorm.batch_norm(a * x + b, axis=axis, eps=0.0), y0, 1e-9, "BN(a x + b)")


def _hand_running(batches, axes, momentum, rm, rv, store_dtype):
    """The documented update, step by step, rounding to the stored dtype."""
    rm = np.asarray(rm, np.float64).copy()
    rv = np.asarray(rv, np.float64).copy()
    for xb in batches:
        xd = xb.astype(np.float64)
        n = np.prod([xb.shape[a] for a in axes])
        mean = xd.mean(axis=axes)
        var = ((xd - xd.mean(axis=axes, keepdims=True)) ** 2).mean(axis=axes)
        rm = ((1 - momentum) * rm + momentum * mean).astype(store_dtype).astype(np.float64)
        rv = ((1 - momentum) * rv + momentum * var * n / (n - 1)).astype(store_dtype).astype(np.float64)
    return rm, rv


@pytest.mark.parametrize("store", ["float64", "float32"])
@pytest.mark.parametrize("momentum", [0.1, 0.3, 1.0])
def test_running_statistics_over_several_steps(store, momentum):
    rng = np.random.default_rng(2)
    batches = [rng.standard_normal((8, 3, 4)) * (k + 1) + k for k in range(5)]
    rm = np.zeros(3, dtype=store)
    rv = np.ones(3, dtype=store)
    rm_obj, rv_obj = rm, rv
    for xb in batches:
        fastnorm.batch_norm(xb, running_mean=rm, running_var=rv, momentum=momentum)
    assert rm is rm_obj and rv is rv_obj and rm.dtype == np.dtype(store)
    em, ev = _hand_running(batches, (0, 2), momentum, np.zeros(3), np.ones(3), store)
    tol = 1e-12 if store == "float64" else 4e-7
    assert_close(rm, em, tol * (1 + np.abs(em)), "running_mean")
    assert_close(rv, ev, tol * (1 + np.abs(ev)), "running_var")


def test_running_statistics_unbiased_factor():
    # n = 2 values per channel: the variance enters the running value * 2.
    x = np.array([[0.0, 10.0], [2.0, 30.0]])
    rm, rv = np.zeros(2), np.zeros(2)
    fastnorm.batch_norm(x, running_mean=rm, running_var=rv, momentum=1.0, axis=0)
    np.testing.assert_allclose(rm, [1.0, 20.0], rtol=1e-15)
    np.testing.assert_allclose(rv, [2.0, 200.0], rtol=1e-15)


@pytest.mark.parametrize("store", ["float64", "float32"])
def test_running_statistics_in_keepdims_layout(store):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((5, 4, 3, 2))
    rm = np.zeros((1, 4, 1, 1), dtype=store)
    rv = np.ones((1, 4, 1, 1), dtype=store)
    fastnorm.batch_norm(x, running_mean=rm, running_var=rv, momentum=0.25)
    em, ev = _hand_running([x], (0, 2, 3), 0.25, np.zeros(4), np.ones(4), store)
    tol = 1e-12 if store == "float64" else 4e-7
    assert rm.shape == (1, 4, 1, 1)
    assert_close(rm.ravel(), em, tol * (1 + np.abs(em)))
    assert_close(rv.ravel(), ev, tol * (1 + np.abs(ev)))


def test_running_statistics_as_strided_views_are_updated_in_place():
    # A view into a bigger buffer (e.g. a slice of a parameter store).
    rng = np.random.default_rng(4)
    x = rng.standard_normal((16, 3))
    store = np.zeros(12)
    rm, rv = store[0:6:2], store[7:10]
    rv[...] = 1.0
    fastnorm.batch_norm(x, running_mean=rm, running_var=rv, axis=0, momentum=0.5)
    em, ev = _hand_running([x], (0,), 0.5, np.zeros(3), np.ones(3), np.float64)
    assert_close(store[0:6:2], em, 1e-14)
    assert_close(store[7:10], ev, 1e-14)
    assert np.all(store[[1, 3, 5, 6, 10, 11]] == 0.0)


def test_eval_uses_running_statistics_and_leaves_them_alone():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((6, 3, 4))
    rm, rv = rng.standard_normal(3), rng.uniform(0.5, 2, size=3)
    g, b = rng.standard_normal(3), rng.standard_normal(3)
    rm0, rv0 = rm.copy(), rv.copy()
    y, mean, rstd = fastnorm.batch_norm(x, g, b, rm, rv, training=False, eps=1e-3,
                                        return_stats=True)
    np.testing.assert_array_equal(rm, rm0)
    np.testing.assert_array_equal(rv, rv0)
    r = 1 / np.sqrt(rv0 + 1e-3)
    expected = (x - rm0[:, None]) * r[:, None] * g[:, None] + b[:, None]
    assert_close(y, expected, 1e-13)
    assert mean.shape == (1, 3, 1) and rstd.shape == (1, 3, 1)
    assert_close(mean.ravel(), rm0, 0.0, "mean is running_mean")
    assert_close(rstd.ravel(), r, 1e-15, "rstd")


def test_eval_works_with_one_value_per_channel():
    # n == 1 is only a problem for batch statistics.
    x = np.array([[1.0, 2.0, 3.0]])
    y = fastnorm.batch_norm(x, running_mean=np.zeros(3), running_var=np.full(3, 4.0),
                            training=False, eps=0.0)
    assert_close(y, x / 2, 1e-16)


def test_training_returns_batch_statistics():
    rng = np.random.default_rng(6)
    x = rng.standard_normal((7, 2, 3)).astype(np.float32)
    rm, rv = np.zeros(2, np.float32), np.ones(2, np.float32)
    y, mean, rstd = fastnorm.batch_norm(x, None, None, rm, rv, return_stats=True)
    xd = x.astype(np.float64)
    assert mean.dtype == np.float32 and mean.shape == (1, 2, 1)
    assert_close(mean, xd.mean(axis=(0, 2), keepdims=True), 1e-7)
    assert_close(rstd, 1 / np.sqrt(xd.var(axis=(0, 2), keepdims=True) + 1e-5), 1e-6)


@pytest.mark.parametrize("shape,axis", [((1, 3), None), ((1, 3, 1), None), ((5, 1), 1),
                                         ((1, 4), 0)])
def test_training_with_one_value_per_channel_raises(shape, axis):
    with pytest.raises(ValueError):
        fastnorm.batch_norm(np.ones(shape), axis=axis)


def test_eval_without_running_statistics_raises():
    with pytest.raises(ValueError):
        fastnorm.batch_norm(np.ones((4, 3)), training=False)


@pytest.mark.parametrize("which", ["mean", "var"])
def test_running_statistics_go_together(which):
    kw = {"running_mean": np.zeros(3)} if which == "mean" else {"running_var": np.ones(3)}
    for training in (True, False):
        with pytest.raises(ValueError):
            fastnorm.batch_norm(np.ones((4, 3)) * np.arange(4)[:, None], training=training, **kw)


@pytest.mark.parametrize("which", ["mean", "var"])
def test_read_only_running_statistics_raise(which):
    rm, rv = np.zeros(3), np.ones(3)
    (rm if which == "mean" else rv).flags.writeable = False
    x = np.arange(12.0).reshape(4, 3)
    with pytest.raises(ValueError):
        fastnorm.batch_norm(x, running_mean=rm, running_var=rv, axis=0)
    # Nothing was half-updated.
    np.testing.assert_array_equal(rm, 0.0)
    np.testing.assert_array_equal(rv, 1.0)


def test_one_dimensional_input_needs_an_axis():
    with pytest.raises(ValueError):
        fastnorm.batch_norm(np.arange(5.0))
    y = fastnorm.batch_norm(np.arange(5.0), axis=0, eps=0.0)
    assert_close(y, (np.arange(5.0) - 2) / np.sqrt(2), 1e-15)


# --------------------------------------------------------------------------
# the running statistics' update

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


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_c_loop_rounds_as_numpy_on_every_simd_level(simd_level, dtype):
    # Sizes around each level's vector width: the vector loop and its tail.
    rng = np.random.default_rng(5)
    for size in range(1, 20):
        rm = (1e3 + rng.standard_normal(size)).astype(dtype)
        rv = rng.uniform(0.1, 10.0, size).astype(dtype)
        mean = 1e3 + rng.standard_normal(size) * 1e-3
        var = rng.uniform(0.0, 10.0, size)
        want_m, want_v = _numpy_update(rm, rv, mean, var, 0.1, 11)
        assert _simd.kernels.update_running(rm, rv, mean, var, 0.1, 11 / 10)
        np.testing.assert_array_equal(rm, want_m, err_msg=f"size {size}")
        np.testing.assert_array_equal(rv, want_v, err_msg=f"size {size}")


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
