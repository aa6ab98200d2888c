"""The documented exceptions, and that a rejected call changes nothing."""
import numpy as np
import pytest
from numpy.exceptions import AxisError

import fastnorm

X = np.arange(24.0).reshape(2, 3, 4)


def _calls():
    """Each public function, called on x with extra keyword arguments."""
    return {
        "mean_var": lambda x, **kw: fastnorm.mean_var(x, **kw),
        "layer_norm": lambda x, **kw: fastnorm.layer_norm(x, **kw),
        "rms_norm": lambda x, **kw: fastnorm.rms_norm(x, **kw),
        "batch_norm": lambda x, **kw: fastnorm.batch_norm(x, **kw),
    }


FUNCS = list(_calls().items())
FUNC_IDS = [f[0] for f in FUNCS]


@pytest.fixture(params=FUNCS, ids=FUNC_IDS)
def fn(request):
    return request.param[1]


BAD_DTYPES = [
    np.array([[1 + 2j, 3j]]),
    np.array([[1.0, 2.0]], dtype=np.complex64),
    np.array([[1, "a"]], dtype=object),
    np.array([["ab", "cd"]]),
    np.array([[b"ab", b"cd"]]),
    np.array([["2020-01-01", "2021-01-01"]], dtype="datetime64[D]"),
    np.array([[1, 2]], dtype="timedelta64[s]"),
    np.array([[1.0, 2.0]], dtype=np.longdouble),
]


@pytest.mark.parametrize("x", BAD_DTYPES, ids=[str(a.dtype) for a in BAD_DTYPES])
def test_unsupported_input_dtype_is_a_type_error_naming_it(fn, x):
    with pytest.raises(TypeError) as info:
        fn(x, axis=1)
    msg = str(info.value)
    assert str(x.dtype) in msg or x.dtype.name in msg, msg


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.bool_, np.complex128, np.longdouble,
                                   "object", "U3", "not-a-dtype"])
def test_unsupported_dtype_argument(fn, dtype):
    with pytest.raises(TypeError):
        fn(X, axis=0, dtype=dtype)


@pytest.mark.parametrize("axis", [3, -4, (0, 3), (-4,), (1, 5)])
def test_axis_out_of_range(fn, axis):
    with pytest.raises(AxisError):
        fn(X, axis=axis)


@pytest.mark.parametrize("axis", [(0, 0), (1, -2), (2, -1, 0)])
def test_repeated_axis(fn, axis):
    with pytest.raises(ValueError):
        fn(X, axis=axis)


@pytest.mark.parametrize("axis", [1.0, "0", (0, 1.5), [0.0], np.float64(1)])
def test_non_integer_axis(fn, axis):
    with pytest.raises(TypeError):
        fn(X, axis=axis)


def test_numpy_integer_axes_are_accepted(fn):
    a = fn(X, axis=(np.int64(0), np.int32(2)))
    b = fn(X, axis=(0, 2))
    np.testing.assert_array_equal(a[0] if isinstance(a, tuple) else a,
                                  b[0] if isinstance(b, tuple) else b)


# --------------------------------------------------------------------------
# parameter shapes

@pytest.mark.parametrize("func", ["layer_norm", "rms_norm"])
@pytest.mark.parametrize("shape", [(3,), (4, 3), (2, 3, 4), (1, 4, 3), (3, 4, 1), (12,), ()])
def test_layer_params_of_the_wrong_shape(func, shape):
    # normalized shape (3, 4) for axis=(1, 2); keepdims layout (1, 3, 4)
    f = getattr(fastnorm, func)
    with pytest.raises(ValueError) as info:
        f(X, np.ones(shape), axis=(1, 2))
    assert "(3, 4)" in str(info.value), str(info.value)


@pytest.mark.parametrize("shape", [(3, 4), (1, 3, 4), (1, 1, 4), (1, 3, 1), (1, 1, 1)])
def test_layer_params_of_accepted_shapes(shape):
    y = fastnorm.layer_norm(X, np.ones(shape), np.zeros(shape), axis=(1, 2))
    assert y.shape == X.shape


@pytest.mark.parametrize("name", ["gamma", "beta", "running_mean", "running_var"])
@pytest.mark.parametrize("shape", [(4,), (2,), (1, 3), (3, 1), (2, 3, 1), (3, 3)])
def test_batch_params_of_the_wrong_shape(name, shape):
    x = np.random.default_rng(0).standard_normal((2, 3, 4))
    kw = {"running_mean": np.zeros(3), "running_var": np.ones(3)}
    kw[name] = np.ones(shape)
    with pytest.raises(ValueError) as info:
        fastnorm.batch_norm(x, **kw)
    assert "(3,)" in str(info.value), str(info.value)


@pytest.mark.parametrize("value", [[0.0, 0.0, 0.0], np.zeros(3, dtype=np.int64),
                                   np.zeros(3, dtype=np.complex128)])
def test_running_stats_must_be_float_arrays(value):
    x = np.random.default_rng(1).standard_normal((5, 3))
    with pytest.raises((TypeError, ValueError)):
        fastnorm.batch_norm(x, running_mean=value, running_var=np.ones(3), axis=0)


def test_complex_gamma_is_rejected():
    with pytest.raises(TypeError):
        fastnorm.layer_norm(X, np.ones(4, dtype=complex))


# --------------------------------------------------------------------------
# out=

@pytest.mark.parametrize("func", ["layer_norm", "rms_norm", "batch_norm"])
def test_out_errors(func):
    f = getattr(fastnorm, func)
    x = X.copy()
    with pytest.raises(ValueError):
        f(x, out=np.empty((2, 3, 5)))
    with pytest.raises(ValueError):
        f(x, out=np.empty((3, 2, 4)))
    with pytest.raises(TypeError):
        f(x, out=np.empty((2, 3, 4), dtype=np.float32))
    with pytest.raises(TypeError):
        f(x, out=np.empty((2, 3, 4), dtype=np.int64))
    with pytest.raises(TypeError):
        f(x, out=np.empty((2, 3, 4)).tolist())
    ro = np.empty((2, 3, 4))
    ro.flags.writeable = False
    with pytest.raises(ValueError):
        f(x, out=ro)
    np.testing.assert_array_equal(x, X)


def test_out_with_requested_dtype():
    # out must have the dtype that dtype= asks for.
    with pytest.raises(TypeError):
        fastnorm.layer_norm(X, dtype=np.float32, out=np.empty(X.shape))
    y = fastnorm.layer_norm(X, dtype=np.float32, out=np.empty(X.shape, np.float32))
    assert y.dtype == np.float32


def test_in_place_on_a_broadcast_input_is_rejected():
    x = np.broadcast_to(np.arange(4.0), (3, 4))
    with pytest.raises(ValueError):
        fastnorm.layer_norm(x, out=x)


def test_in_place_on_a_dtype_mismatch_is_rejected():
    x = np.arange(12, dtype=np.int64).reshape(3, 4)
    with pytest.raises(TypeError):
        fastnorm.layer_norm(x, out=x)


@pytest.mark.parametrize("func,n_stats", [("layer_norm", 2), ("rms_norm", 1), ("batch_norm", 2)])
def test_bad_statistics_out_is_rejected_before_anything_is_written(func, n_stats):
    # A NumPy user expects a call that raises over its arguments to leave
    # every array as it was, including an in-place out.
    f = getattr(fastnorm, func)
    x = np.random.default_rng(2).standard_normal((5, 4))
    x0 = x.copy()
    stats = [None] * n_stats
    stats[0] = np.empty((7, 7))
    with pytest.raises(ValueError):
        f(x, out=(x, *stats), return_stats=True)
    np.testing.assert_array_equal(x, x0)
    y = np.full_like(x, 5.0)
    stats[0] = np.empty((1, 4) if func == "batch_norm" else (5, 1), dtype=np.float32)
    with pytest.raises(TypeError):
        f(x, out=(y, *stats), return_stats=True)
    np.testing.assert_array_equal(y, 5.0)


def test_bad_running_stats_are_rejected_before_out_is_written():
    x = np.random.default_rng(3).standard_normal((6, 3))
    y = np.full_like(x, 5.0)
    rv = np.ones(3)
    rv.flags.writeable = False
    with pytest.raises(ValueError):
        fastnorm.batch_norm(x, None, None, np.zeros(3), rv, axis=0, out=y)
    np.testing.assert_array_equal(y, 5.0)


def test_out_tuple_of_the_wrong_length():
    with pytest.raises((TypeError, ValueError)):
        fastnorm.layer_norm(X, out=(np.empty(X.shape),) * 4, return_stats=True)


def test_mean_var_out_errors():
    m, v = np.empty(3), np.empty(3)
    with pytest.raises(ValueError):
        fastnorm.mean_var(X, axis=(0, 2), out=(np.empty(4), v))
    with pytest.raises(TypeError):
        fastnorm.mean_var(X, axis=(0, 2), out=(m, np.empty(3, np.float32)))
    with pytest.raises(TypeError):
        fastnorm.mean_var(X, axis=(0, 2), out=([0.0] * 3, v))
    ro = np.empty(3)
    ro.flags.writeable = False
    with pytest.raises(ValueError):
        fastnorm.mean_var(X, axis=(0, 2), out=(m, ro))
    # keepdims changes the shape out must have.
    with pytest.raises(ValueError):
        fastnorm.mean_var(X, axis=(0, 2), keepdims=True, out=(m, v))


@pytest.mark.parametrize("momentum", ["a", None, [0.1]])
def test_bad_momentum(momentum):
    x = np.random.default_rng(4).standard_normal((6, 3))
    with pytest.raises((TypeError, ValueError)):
        fastnorm.batch_norm(x, running_mean=np.zeros(3), running_var=np.ones(3), axis=0,
                            momentum=momentum)


# --------------------------------------------------------------------------
# inputs are never modified

@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, np.int32])
def test_inputs_are_not_modified(dtype):
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((6, 5, 4)) * 10).astype(dtype)
    g, b = rng.standard_normal((5,)), rng.standard_normal((5,))
    x0, g0, b0 = x.copy(), g.copy(), b.copy()
    fastnorm.mean_var(x, axis=(0, 2))
    fastnorm.layer_norm(x, g, b, axis=1)
    fastnorm.rms_norm(x, g, axis=1, return_stats=True)
    rm, rv = np.zeros(5), np.ones(5)
    fastnorm.batch_norm(x, g, b, rm, rv, return_stats=True)
    fastnorm.batch_norm(x, g, b, rm, rv, training=False)
    for a, a0 in ((x, x0), (g, g0), (b, b0)):
        assert a.tobytes() == a0.tobytes()
