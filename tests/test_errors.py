"""The documented exceptions, their exact types and what their messages
name, for every function: dtypes, axes, parameters of the wrong shape,
function-specific arguments (groups, channel axes, momentum, eps), and the
gradients' statistics; a rejected call changes nothing, and no call
changes its inputs.  (Rejected out= arrays: test_out.py.)"""
import numpy as np
import pytest
from numpy.exceptions import AxisError

import fastnorm
from reference import fingerprint

X = np.arange(24.0).reshape(2, 3, 4)


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


@pytest.mark.parametrize("axis", [3, -4, (0, 3), (-4,), (1, 5), 10**30, (0, -10**30)])
def test_axis_out_of_range(fn, axis):
    with pytest.raises(AxisError):
        fn(X, axis=axis)


@pytest.mark.parametrize("axis", [(0, 0), (1, -2), (2, -1, 0)])
def test_repeated_axis(fn, axis):
    with pytest.raises(ValueError):
        fn(X, axis=axis)


@pytest.mark.parametrize("axis", [1.0, "0", (0, 1.5), [0.0], np.float64(1), True, (0, True)])
def test_non_integer_axis(fn, axis):
    # bool is an int to Python, not to NumPy (np.mean(x, axis=True) raises)
    with pytest.raises(TypeError):
        fn(X, axis=axis)


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


@pytest.mark.parametrize("momentum", ["a", None, [0.1]])
def test_bad_momentum(momentum):
    x = np.random.default_rng(4).standard_normal((6, 3))
    with pytest.raises((TypeError, ValueError)):
        fastnorm.batch_norm(x, running_mean=np.zeros(3), running_var=np.ones(3), axis=0,
                            momentum=momentum)


# --------------------------------------------------------------------------
# group and instance norm, weight norm and standardization

def test_group_norm_errors():
    x = np.zeros((2, 6, 3))
    cases = [
        (ValueError, lambda: fastnorm.group_norm(x, 4)),              # 6 % 4
        (ValueError, lambda: fastnorm.group_norm(x, 0)),
        (ValueError, lambda: fastnorm.group_norm(x, -3)),
        (ValueError, lambda: fastnorm.group_norm(x, 12)),
        (TypeError, lambda: fastnorm.group_norm(x, 2.0)),
        (ValueError, lambda: fastnorm.group_norm(x, 2, channel_axis=0)),
        (ValueError, lambda: fastnorm.group_norm(x, 2, channel_axis=-3)),
        (AxisError, lambda: fastnorm.group_norm(x, 2, channel_axis=3)),
        (AxisError, lambda: fastnorm.group_norm(x, 2, channel_axis=-4)),
        (ValueError, lambda: fastnorm.group_norm(np.zeros(6), 2)),
        (ValueError, lambda: fastnorm.group_norm(x, 3, np.ones(5))),
        (ValueError, lambda: fastnorm.group_norm(x, 3, np.ones(3))),
        (ValueError, lambda: fastnorm.group_norm(x, 3, None, np.ones((6, 3)))),
        (ValueError, lambda: fastnorm.group_norm(x, 3, np.ones((1, 1, 6)))),
        (ValueError, lambda: fastnorm.group_norm(x, 3, np.ones((6, 1)))),
        (TypeError, lambda: fastnorm.group_norm(x, 3, np.ones(6, complex))),
        (TypeError, lambda: fastnorm.group_norm(x.astype(complex), 3)),
        (ValueError, lambda: fastnorm.group_norm(x, 3, out=np.empty((2, 6, 4)))),
        (TypeError, lambda: fastnorm.group_norm(x, 3, out=np.empty((2, 6, 3), np.float32))),
        (ValueError, lambda: fastnorm.instance_norm(np.zeros(5))),
        (ValueError, lambda: fastnorm.instance_norm(x, channel_axis=0)),
        (AxisError, lambda: fastnorm.instance_norm(x, channel_axis=5)),
        (ValueError, lambda: fastnorm.instance_norm(x, np.ones(3))),
    ]
    for exc, call in cases:
        with pytest.raises(exc):
            call()


def test_weight_errors():
    v = np.ones((4, 3, 2))
    cases = [
        (ValueError, lambda: fastnorm.weight_norm(v, np.ones(3))),
        (ValueError, lambda: fastnorm.weight_norm(v, np.ones((4, 3)))),
        (ValueError, lambda: fastnorm.weight_norm(v, np.ones(4), axis=(0, 1))),
        (AxisError, lambda: fastnorm.weight_norm(v, axis=3)),
        (ValueError, lambda: fastnorm.weight_norm(v, axis=(1, -2))),
        (TypeError, lambda: fastnorm.weight_norm(v.astype(complex))),
        (TypeError, lambda: fastnorm.weight_norm(v, np.ones(4, complex))),
        (AxisError, lambda: fastnorm.weight_standardize(v, axis=-4)),
        (ValueError, lambda: fastnorm.weight_standardize(v, axis=(2, 2))),
        (ValueError, lambda: fastnorm.weight_standardize(v, eps=-1.0)),
        (TypeError, lambda: fastnorm.weight_standardize(v.astype(object))),
    ]
    for exc, call in cases:
        with pytest.raises(exc):
            call()
    # The message names weight_norm's own argument.
    with pytest.raises(ValueError, match=r"for v of shape \(4, 3, 2\)"):
        fastnorm.weight_norm(v, np.ones(3))


# --------------------------------------------------------------------------
# gradients

def _unchanged(arrays, before, what):
    after = [fingerprint(a) if isinstance(a, np.ndarray) else None for a in arrays]
    assert after == before, f"{what} modified one of its inputs"


def _fingerprints(*arrays):
    return [fingerprint(a) if isinstance(a, np.ndarray) else None for a in arrays]


def _stats(kind, x, **kw):
    if kind == "rms":
        return fastnorm.rms_norm(x, return_stats=True, **kw)[1:]
    return getattr(fastnorm, f"{kind}_norm")(x, return_stats=True, **kw)[1:]


def test_gradient_errors():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 6, 3))
    dy = rng.standard_normal((4, 6, 3))
    m, r = _stats("layer", x)
    (rr,) = _stats("rms", x)
    bm, br = _stats("batch", x)
    gm, gr = fastnorm.group_norm(x, 3, return_stats=True)[1:]
    cases = [
        # dy of another shape
        (ValueError, lambda: fastnorm.layer_norm_backward(dy[:, :5], x, m, r)),
        (ValueError, lambda: fastnorm.rms_norm_backward(dy.T, x, rr)),
        (ValueError, lambda: fastnorm.batch_norm_backward(dy[None], x, bm, br)),
        (ValueError, lambda: fastnorm.group_norm_backward(dy[:3], x, gm, gr, 3)),
        # statistics of the wrong shape
        (ValueError, lambda: fastnorm.layer_norm_backward(dy, x, m[:, :5], r)),
        (ValueError, lambda: fastnorm.layer_norm_backward(dy, x, m, r[:3])),
        (ValueError, lambda: fastnorm.layer_norm_backward(dy, x, m, r, axis=0)),
        (ValueError, lambda: fastnorm.rms_norm_backward(dy, x, rr[..., None])),
        (ValueError, lambda: fastnorm.batch_norm_backward(dy, x, m, r)),
        (ValueError, lambda: fastnorm.group_norm_backward(dy, x, gm, gr, 2)),
        (ValueError, lambda: fastnorm.group_norm_backward(dy, x, gm.reshape(4, 3), gr, 3)),
        (ValueError, lambda: fastnorm.group_norm_backward(dy, x, gm, gr[:, :, 0], 3)),
        # gamma of the wrong shape
        (ValueError, lambda: fastnorm.layer_norm_backward(dy, x, m, r, np.ones(4))),
        (ValueError, lambda: fastnorm.layer_norm_backward(dy, x, m, r, np.ones((6, 3)))),
        (ValueError, lambda: fastnorm.rms_norm_backward(dy, x, rr, np.ones((1, 3)))),
        (ValueError, lambda: fastnorm.batch_norm_backward(dy, x, bm, br, np.ones(3))),
        (ValueError, lambda: fastnorm.group_norm_backward(dy, x, gm, gr, 3, np.ones(3))),
        # groups and axes
        (ValueError, lambda: fastnorm.group_norm_backward(dy, x, gm, gr, 4)),
        (ValueError, lambda: fastnorm.group_norm_backward(dy, x, gm, gr, 3, channel_axis=0)),
        (AxisError, lambda: fastnorm.group_norm_backward(dy, x, gm, gr, 3, channel_axis=3)),
        (AxisError, lambda: fastnorm.layer_norm_backward(dy, x, m, r, axis=3)),
        (ValueError, lambda: fastnorm.layer_norm_backward(dy, x, m, r, axis=(-1, 2))),
        (AxisError, lambda: fastnorm.batch_norm_backward(dy, x, bm, br, axis=(0, 5))),
        (ValueError, lambda: fastnorm.batch_norm_backward(dy[0, 0], x[0, 0], bm.ravel()[:1],
                                                          br.ravel()[:1])),
        # dtypes
        (TypeError, lambda: fastnorm.layer_norm_backward(dy.astype(complex), x, m, r)),
        (TypeError, lambda: fastnorm.layer_norm_backward(dy, x.astype(object), m, r)),
        (TypeError, lambda: fastnorm.layer_norm_backward(dy, x, m.astype(complex), r)),
        (TypeError, lambda: fastnorm.layer_norm_backward(dy, x, m, r, np.ones(3, complex))),
    ]
    for exc, call in cases:
        fps = _fingerprints(x, dy, m, r)
        with pytest.raises(exc):
            call()
        _unchanged((x, dy, m, r), fps, "a rejected call")


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


def test_kernel_entries_refuse_operands_that_do_not_fit_x():
    # The public functions shape every operand to x's dimensions before a
    # kernel runs; the kernels check it too rather than read strides past
    # a shorter shape (fastnorm._call.backward_sums is the Dask path's).
    from fastnorm import _call, _simd
    rng = np.random.default_rng(0)
    x, dy = rng.standard_normal((2, 64, 16)), rng.standard_normal((2, 64, 16))
    mean, rstd = x.mean(-1, keepdims=True), 1 / x.std(-1, keepdims=True)
    gamma = np.ones((1, 1, 16))
    a, b, dg, db = _call.backward_sums(dy, x, (2,), mean, rstd, gamma, "center")
    np.testing.assert_allclose(db[0, 0], dy.sum((0, 1)), rtol=1e-12)
    for bad in (np.ones(16), np.ones((1, 16)), np.ones((1, 1, 8))):
        with pytest.raises(ValueError, match="fastnorm kernels: an operand"):
            _call.backward_sums(dy, x, (2,), mean, rstd, bad, "center")
    with pytest.raises(ValueError, match="an operand"):
        _call.forward(x, (2,), "center", gamma=np.ones(16))
    with pytest.raises(ValueError, match="statistics arrays of different layouts"):
        _call.backward_sums(dy, x, (2,), mean, rstd[:, :1], gamma, "center")
    k = _simd.kernels
    with pytest.raises(ValueError, match="statistics arrays"):
        k.forward(x, None, None, None, None, np.empty((2, 64, 1)), None, (False, False, True),
                  k.MODES["center"], 1e-5, 1)
