"""The fast path for small calls: layer_norm, rms_norm, mean_var and the
gradients of layer_norm and rms_norm over any axes, batch_norm over every
axis but 1 and its gradients over any axes, group_norm and instance_norm
of C-contiguous x: y, and with return_stats (no out=) the statistics too.

The fast path's entries (fastnorm._simd.kernels.fast_norm, fast_mean_var,
fast_norm_backward, fast_batch_norm; tests/fastpath.py calls them with the
general path's defaults) make the kernel call after the few checks the
common case needs, and return None for anything else.  They must give the
general path's bits (reached with the entry replaced by one that returns
None: tests/fastpath.py's general_path), values
that match the plain float64 references, the same running statistics, and
leave every other call to the general path, whose conversions and errors
then apply.  fastnorm.explain says which calls take it: ``fast_path`` is
True for them and False for the others.
"""
import warnings

import numpy as np
import pytest
from hypothesis import given, strategies as st

import fastnorm
from fastnorm import _simd
import fastpath
from reference import (OUT_TOL, assert_bitwise, assert_close, fingerprint, ref_group_norm,
                       ref_group_norm_grads, ref_layer_norm, ref_mean_var, ref_norm_grads,
                       ref_rms_norm, ref_running_update, tiny)
from routes import assert_route

TAKEN = {"fast_path": True}
LEFT = {"fast_path": False}


# --------------------------------------------------------------------------
# layer_norm, rms_norm and mean_var

FLOATS = [np.float16, np.float32, np.float64]


@st.composite
def fast_calls(draw):
    """x of 1 to 4 dimensions in any layout, gain and bias of any float
    dtype or none, an eps."""
    ndim = draw(st.integers(1, 4))
    shape = tuple(draw(st.lists(st.integers(1, 6), min_size=ndim - 1, max_size=ndim - 1)))
    shape += (draw(st.integers(1, 300)),)
    dtype = draw(st.sampled_from(FLOATS))
    layout = draw(st.sampled_from(["C", "F", "reversed", "every other"]))
    offset = draw(st.sampled_from([0.0, 3.0, 1e3]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    base = rng.standard_normal(shape) * rng.uniform(0.1, 10) + offset
    if layout == "F":
        x = np.asfortranarray(base.astype(dtype))
    elif layout == "reversed":
        x = base.astype(dtype)[..., ::-1]
    elif layout == "every other":
        x = np.repeat(base.astype(dtype), 2, axis=-1)[..., ::2]
    else:
        x = base.astype(dtype)
    n = shape[-1]
    params = []
    for role in ("gamma", "beta"):
        p_dtype = draw(st.sampled_from([None] + FLOATS))
        p_layout = draw(st.sampled_from(["C", "reversed", "every other", "misaligned"]))
        values = rng.uniform(0.5, 2.0, n) if role == "gamma" else rng.standard_normal(n)
        params.append(None if p_dtype is None else _laid_out(values.astype(p_dtype), p_layout))
    eps = draw(st.sampled_from([1e-5, 0.0, 0.5]))
    axis = draw(st.sampled_from([-1, ndim - 1]))
    return x, axis, params[0], params[1], eps


def _laid_out(p, layout):
    """A 1-d array with p's values: contiguous, reversed, every other element
    of a longer one, or one byte off alignment."""
    if layout == "reversed":
        return p[::-1].copy()[::-1]
    if layout == "every other":
        return np.repeat(p, 2)[::2]
    if layout == "misaligned":
        raw = np.zeros(p.nbytes + 1, np.uint8)
        q = raw[1:].view(p.dtype)
        q[...] = p
        return q
    return p


def _last_axis(n, ndim):
    return tuple(a == ndim - 1 for a in range(ndim)), (n,) * ndim


def test_param_named_widens_float16_32_and_64(simd_level):
    # The widening of gain and bias of the named shape (both paths'),
    # against NumPy's: a new C-contiguous float64 array in keepdims layout.
    rng = np.random.default_rng(11)
    for dtype in (np.float16, np.float32, np.float64):
        for n, ndim in ((1, 1), (7, 2), (768, 4)):
            p = (rng.standard_normal(n) * 100).astype(dtype)
            for layout in ("C", "reversed", "every other"):
                q = _laid_out(p, layout)
                w = _simd.kernels.param_named(q, *_last_axis(n, ndim))
                assert w.shape == (1,) * (ndim - 1) + (n,), w.shape
                assert w.dtype == np.float64 and w.flags.c_contiguous
                assert not np.shares_memory(w, q)
                assert_bitwise(w.ravel(), q.astype(np.float64), f"{dtype.__name__} {layout}")
    # Other arrays are not its: False (the general path converts or refuses them).
    for other in (np.ones((2, 3), np.float32), np.ones(3, ">f4"), np.ones(3, int),
                  np.ones(4, np.float32)):
        assert _simd.kernels.param_named(other, *_last_axis(3, 2)) is False
    with pytest.raises(ValueError):
        _simd.kernels.param_named(np.ones(3, np.float32), *_last_axis(3, 65))
    with pytest.raises(ValueError):
        _simd.kernels.param_named(np.ones(3, np.float32), (True,), (3, 3))


def _ref_gamma(p):
    return None if p is None else p.astype(np.float64)


@given(fast_calls())
def test_fast_layer_norm_is_the_general_path(call):
    x, axis, gamma, beta, eps = call
    before = [fingerprint(a) for a in (x, gamma, beta)]
    assert_route(TAKEN, fastnorm.layer_norm, x, gamma, beta, axis=axis, eps=eps)
    assert_route(TAKEN, fastnorm.layer_norm, x, gamma, beta, axis=(x.ndim - 1,), eps=eps)
    y = fastpath.norm_call(x, axis, "center", eps, gamma, beta)
    assert y is not None, "the fast path refused a call it is meant for"
    assert y.dtype == x.dtype and y.shape == x.shape
    general = fastpath.general(fastnorm.layer_norm, x, gamma, beta, axis=axis, eps=eps)
    assert_bitwise(y, general, "fast y against the general path")
    assert_bitwise(fastnorm.layer_norm(x, gamma, beta, axis=axis, eps=eps), y, "layer_norm")
    ref = ref_layer_norm(x, (x.ndim - 1,), _ref_gamma(gamma), _ref_gamma(beta), eps=eps)[0]
    assert_close(y, ref, OUT_TOL[x.dtype] * (1.0 + np.abs(ref)) * 4, "y")
    assert [fingerprint(a) for a in (x, gamma, beta)] == before, "an input changed"


@given(fast_calls())
def test_fast_rms_norm_is_the_general_path(call):
    x, axis, gamma, _, eps = call
    before = [fingerprint(a) for a in (x, gamma)]
    assert_route(TAKEN, fastnorm.rms_norm, x, gamma, axis=axis, eps=eps)
    assert_route(TAKEN, fastnorm.rms_norm, x, gamma, axis=(x.ndim - 1,), eps=eps)
    y = fastpath.norm_call(x, axis, "rms", eps, gamma, None)
    assert y is not None, "the fast path refused a call it is meant for"
    general = fastpath.general(fastnorm.rms_norm, x, gamma, axis=axis, eps=eps)
    assert_bitwise(y, general, "fast y against the general path")
    assert_bitwise(fastnorm.rms_norm(x, gamma, axis=axis, eps=eps), y, "rms_norm")
    ref = ref_rms_norm(x, (x.ndim - 1,), _ref_gamma(gamma), eps=eps)[0]
    assert_close(y, ref, OUT_TOL[x.dtype] * (1.0 + np.abs(ref)) * 4, "y")
    assert [fingerprint(a) for a in (x, gamma)] == before, "an input changed"


def test_fast_path_on_every_simd_level(simd_level):
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((32, 768)) + 50).astype(np.float32)
    gamma, beta = rng.uniform(0.5, 2, 768).astype(np.float32), rng.standard_normal(768)
    y = fastpath.norm_call(x, -1, "center", 1e-5, gamma, beta)
    assert_bitwise(y, fastpath.general(fastnorm.layer_norm, x, gamma, beta), "y")
    ref = ref_layer_norm(x, (1,), gamma.astype(np.float64), beta)[0]
    assert_close(y, ref, 1e-5 * (1.0 + np.abs(ref)) * 4, "y")


@pytest.mark.parametrize("threads", [1, 2])
def test_fast_path_large_enough_for_threads(threads):
    # At or above the kernels' parallel size the fast path asks for the
    # team; results do not depend on it.
    rows = _simd.kernels.tuning()["parallel_min"] // 256 + 3
    x = np.random.default_rng(6).standard_normal((rows, 256)).astype(np.float32) + 7
    fastnorm.set_num_threads(threads)
    y = fastpath.norm_call(x, -1, "center", 1e-5, None, None)
    fastnorm.set_num_threads(1)
    assert_bitwise(y, fastpath.general(fastnorm.layer_norm, x), "y")
    assert_close(y, ref_layer_norm(x, (1,))[0], 4e-5, "y")


X = np.random.default_rng(7).standard_normal((4, 10)).astype(np.float32)


G = np.linspace(0.5, 1.5, 10)


# X's values one byte past an aligned address.
MISALIGNED = np.frombuffer(b"\0" + X.tobytes(), np.float32, count=X.size, offset=1).reshape(4, 10)


# Calls the fast path must leave to the general path: (what, x, axis, eps,
# gamma, beta).  Each is then run through layer_norm and rms_norm.
GENERAL = [
    ("a list for x", X.tolist(), -1, 1e-5, None, None),
    ("integer x", np.arange(40).reshape(4, 10), -1, 1e-5, None, None),
    ("a 0-d x", np.float64(3.0), -1, 1e-5, None, None),
    ("an empty x", np.zeros((4, 0), np.float32), -1, 1e-5, None, None),
    ("an ndarray subclass", np.ma.masked_array(X), -1, 1e-5, None, None),
    ("byte-swapped x", X.astype(">f4"), -1, 1e-5, None, None),
    ("misaligned x", MISALIGNED, -1, 1e-5, None, None),
    ("a list gamma", X, -1, 1e-5, G.tolist(), None),
    ("an integer gamma", X, -1, 1e-5, np.arange(1, 11), None),
    ("a keepdims gamma", X, -1, 1e-5, G.reshape(1, 10), None),
    ("a keepdims gamma over axis 0", X, 0, 1e-5, np.ones((4, 1)), None),
    ("a gamma of shape (1, 1)", X, -1, 1e-5, np.full((1, 1), 2.0), None),
]


# ...and calls that break a rule: the same error on either path.
ERRORS = [
    ("a negative eps", X, -1, -1.0, None, None, ValueError),
    ("a NaN eps", X, -1, float("nan"), None, None, ValueError),
    ("an infinite eps", X, -1, float("inf"), None, None, ValueError),
    ("gamma of the wrong size", X, -1, 1e-5, np.ones(9), None, ValueError),
    ("beta of the wrong size", X, -1, 1e-5, None, np.ones(11, np.float32), ValueError),
    ("a gamma per slice", X, -1, 1e-5, np.ones((4, 1)), None, ValueError),
    ("a complex gamma", X, -1, 1e-5, np.ones(10, complex), None, TypeError),
    ("the last axis's gamma over axis 0", X, 0, 1e-5, G, None, ValueError),
    ("gamma of the axes' sizes reversed", X, (0, 1), 1e-5, np.ones((10, 4)), None,
     ValueError),
    ("an axis out of range", X, 2, 1e-5, None, None, np.exceptions.AxisError),
    ("a string x", np.array(["a", "b"]), -1, 1e-5, None, None, TypeError),
]


@pytest.mark.parametrize("what, x, axis, eps, gamma, beta", GENERAL, ids=[c[0] for c in GENERAL])
def test_other_calls_take_the_general_path(what, x, axis, eps, gamma, beta):
    assert fastpath.norm_call(x, axis, "center", eps, gamma, beta) is None
    assert fastpath.norm_call(x, axis, "rms", eps, gamma, None) is None
    xa = np.asarray(x, dtype=np.float64) if np.asarray(x).dtype.kind in "iu" else np.asarray(x)
    if xa.ndim:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)      # an empty x warns
            assert_route(LEFT, fastnorm.layer_norm, x, gamma, beta, axis=axis, eps=eps)
            assert_route(LEFT, fastnorm.rms_norm, x, gamma, axis=axis, eps=eps)
    if xa.size == 0:
        with pytest.warns(RuntimeWarning):
            y = fastnorm.layer_norm(x, gamma, beta, axis=axis, eps=eps)
        assert y.shape == xa.shape
        return
    if xa.ndim == 0:
        with pytest.raises(np.exceptions.AxisError):
            fastnorm.layer_norm(x, gamma, beta, axis=axis, eps=eps)
        return
    axes = tuple(range(xa.ndim)) if axis is None else np.atleast_1d(axis) % xa.ndim
    axes = tuple(int(a) for a in axes)
    g = None if gamma is None else np.asarray(gamma, dtype=np.float64)
    if g is not None and g.ndim == 1:
        g = g.reshape(tuple(xa.shape[a] if a in axes else 1 for a in range(xa.ndim)))
    y = fastnorm.layer_norm(x, gamma, beta, axis=axis, eps=eps)
    ref = ref_layer_norm(xa, axes, g, None, eps=float(eps))[0]
    assert_close(y, ref, OUT_TOL[np.dtype(y.dtype)] * (1.0 + np.abs(ref)) * 4, "layer_norm")
    y = fastnorm.rms_norm(x, gamma, axis=axis, eps=eps)
    ref = ref_rms_norm(xa, axes, g, eps=float(eps))[0]
    assert_close(y, ref, OUT_TOL[np.dtype(y.dtype)] * (1.0 + np.abs(ref)) * 4, "rms_norm")


@pytest.mark.parametrize("what, x, axis, eps, gamma, beta, error", ERRORS,
                         ids=[c[0] for c in ERRORS])
def test_bad_calls_raise_alike_on_either_path(what, x, axis, eps, gamma, beta, error):
    assert isinstance(fastpath.same_error(fastnorm.layer_norm, x, gamma, beta, axis=axis,
                                          eps=eps), error)
    with pytest.raises(error):
        fastnorm.explain(fastnorm.layer_norm, x, gamma, beta, axis=axis, eps=eps)
    if beta is None:
        with pytest.raises(error):
            fastnorm.rms_norm(x, gamma, axis=axis, eps=eps)


@given(fast_calls())
def test_fast_path_into_out(call):
    # out= of x's shape and dtype, C-contiguous and apart from x: written
    # directly, the same bits as the general path into such an out (the
    # layout of y takes part in the plan: a fresh y of an F-order x is F
    # order); in place (out=x) too.
    x, axis, gamma, beta, eps = call
    before = [fingerprint(a) for a in (x, gamma, beta)]
    general = np.empty(x.shape, x.dtype)
    fastpath.general(fastnorm.layer_norm, x, gamma, beta, axis=axis, eps=eps, out=general)
    out = np.full(x.shape, np.nan, x.dtype)
    assert fastpath.norm_call(x, axis, "center", eps, gamma, beta, out) is out
    assert_bitwise(out, general, "fast out= against the general path")
    assert [fingerprint(a) for a in (x, gamma, beta)] == before, "an input changed"
    inplace = np.array(x, order="C")
    expected = fastpath.general(fastnorm.rms_norm, inplace, gamma, axis=axis, eps=eps)
    assert fastpath.norm_call(inplace, axis, "rms", eps, gamma, None, inplace) is inplace
    assert_bitwise(inplace, expected, "out=x")


@given(fast_calls(), st.sampled_from([0, 1]), st.booleans())
def test_fast_mean_var_is_the_general_path(call, ddof, keepdims):
    x, axis, _, _, _ = call
    if x.shape[-1] <= ddof:
        x = np.concatenate([x, x], axis=-1)
    before = fingerprint(x)
    assert_route(TAKEN, fastnorm.mean_var, x, axis=axis, ddof=ddof, keepdims=keepdims)
    assert_route(TAKEN, fastnorm.mean_var, x, axis=(x.ndim - 1,), ddof=ddof, keepdims=keepdims)
    fast = fastpath.mean_var_call(x, axis, ddof, keepdims)
    assert fast is not None, "the fast path refused a call it is meant for"
    general = fastpath.general(fastnorm.mean_var, x, axis=axis, ddof=ddof, keepdims=keepdims)
    for q, g, what in zip(fast, general, ("mean", "var")):
        assert type(q) is type(g), what
        assert_bitwise(q, g, f"fast {what} against the general path")
    rmean, rvar, _ = ref_mean_var(x, (x.ndim - 1,), ddof=ddof)
    if not keepdims:
        rmean, rvar = rmean[..., 0], rvar[..., 0]
    tol = OUT_TOL[x.dtype] * 4
    assert_close(fast[0], rmean, tol * (1.0 + np.abs(rmean)), "mean")
    assert_close(fast[1], rvar, tol * np.abs(rvar) + 1e-30, "var")
    assert fingerprint(x) == before, "x changed"


@given(fast_calls(), st.sampled_from([0, 1]), st.booleans())
def test_fast_mean_var_into_out_is_the_general_path(call, ddof, keepdims):
    # A small call into out= costs no more than an allocating one: the
    # fast path writes float32/float64 results straight into the arrays.
    x, axis, _, _, _ = call
    if x.shape[-1] <= ddof:
        x = np.concatenate([x, x], axis=-1)
    shape = x.shape[:-1] + ((1,) if keepdims else ())
    out = (np.full(shape, 7, x.dtype), np.full(shape, 7, x.dtype))
    route = TAKEN if x.dtype != np.float16 else LEFT
    assert_route(route, fastnorm.mean_var, x, axis=axis, ddof=ddof, keepdims=keepdims, out=out)
    got = fastnorm.mean_var(x, axis=axis, ddof=ddof, keepdims=keepdims, out=out)
    assert got[0] is out[0] and got[1] is out[1]
    general = fastpath.general(fastnorm.mean_var, x, axis=axis, ddof=ddof, keepdims=keepdims)
    for o, g, what in zip(out, general, ("mean", "var")):
        assert_bitwise(o, np.asarray(g), f"fast {what} into out= against the general path")
    strided = tuple(np.full(shape + (2,), 7, x.dtype)[..., 0] for _ in range(2))
    if strided[0].size > 1:          # (one element: contiguous whatever its stride)
        assert_route(LEFT, fastnorm.mean_var, x, axis=axis, ddof=ddof, keepdims=keepdims,
                     out=strided)


@st.composite
def any_axes(draw, ndim):
    """None, or a non-empty set of axes as an int (one axis) or a tuple, in
    any order and sign."""
    if draw(st.booleans()):
        return None
    axes = draw(st.lists(st.integers(0, ndim - 1), min_size=1, max_size=ndim, unique=True))
    axes = [a - ndim if draw(st.booleans()) else a for a in axes]
    if len(axes) == 1 and draw(st.booleans()):
        return axes[0]
    return tuple(axes)


@given(fast_calls(), st.data())
def test_fast_norms_over_any_axes_are_the_general_path(call, data):
    # layer_norm over the last two axes (tokens and features), over axis 0
    # or over every axis is as common a call as over the last one: every
    # set of axes in every spelling, with gain and bias of the normalized
    # shape in any strides, allocating, into out= and in place.
    x, _, _, _, eps = call
    axis = data.draw(any_axes(x.ndim))
    axes = tuple(range(x.ndim)) if axis is None else tuple(
        sorted(a % x.ndim for a in (axis if isinstance(axis, tuple) else (axis,))))
    named = tuple(x.shape[a] for a in axes)
    keep = tuple(x.shape[a] if a in axes else 1 for a in range(x.ndim))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    params = []
    for role in ("gamma", "beta"):
        p_dtype = data.draw(st.sampled_from([None] + FLOATS))
        layout = data.draw(st.sampled_from(["C", "F", "reversed", "every other", "misaligned"]))
        values = rng.uniform(0.5, 2.0, named) if role == "gamma" else rng.standard_normal(named)
        params.append(None if p_dtype is None else _grad_laid_out(values.astype(p_dtype), layout))
    gamma, beta = params
    before = [fingerprint(a) for a in (x, gamma, beta)]
    g, b = (None if p is None else p.astype(np.float64).reshape(keep) for p in (gamma, beta))
    tol = OUT_TOL[x.dtype] * 4
    for func, mode, args, ref in (
            (fastnorm.layer_norm, "center", (gamma, beta), ref_layer_norm(x, axes, g, b, eps)[0]),
            (fastnorm.rms_norm, "rms", (gamma,), ref_rms_norm(x, axes, g, eps)[0])):
        beta_arg = beta if mode == "center" else None
        assert_route(TAKEN, func, x, *args, axis=axis, eps=eps)
        y = fastpath.norm_call(x, axis, mode, eps, gamma, beta_arg)
        assert y is not None, "the fast path refused a call it is meant for"
        assert_bitwise(y, fastpath.general(func, x, *args, axis=axis, eps=eps),
                       f"{mode}: fast y against the general path")
        assert_close(y, ref, tol * (1.0 + np.abs(ref)), f"{mode}: y")
        general = np.empty(x.shape, x.dtype)
        fastpath.general(func, x, *args, axis=axis, eps=eps, out=general)
        out = np.full(x.shape, np.nan, x.dtype)
        assert fastpath.norm_call(x, axis, mode, eps, gamma, beta_arg, out) is out
        assert_bitwise(out, general, f"{mode}: fast out= against the general path")
        # (x's memory order is the order of the sums: the general path on
        # the same C-order copy)
        inplace = np.array(x, order="C")
        expected = fastpath.general(func, inplace, *args, axis=axis, eps=eps)
        assert fastpath.norm_call(inplace, axis, mode, eps, gamma, beta_arg, inplace) is inplace
        assert_bitwise(inplace, expected, f"{mode}: out=x against the general path")
    assert [fingerprint(a) for a in (x, gamma, beta)] == before, "an input changed"


@given(fast_calls(), st.data(), st.sampled_from([0, 1]), st.booleans())
def test_fast_mean_var_over_any_axes_is_the_general_path(call, data, ddof, keepdims):
    # mean_var over axis 0 (standardizing columns) is as common a small
    # call as over the last axis: the fast path takes every spelling of
    # every set of axes.
    x = call[0]
    axis = data.draw(any_axes(x.ndim))
    axes = tuple(range(x.ndim)) if axis is None else tuple(
        sorted(a % x.ndim for a in (axis if isinstance(axis, tuple) else (axis,))))
    if np.prod([x.shape[a] for a in axes]) <= ddof:
        x = np.concatenate([x, x], axis=axes[0])
    before = fingerprint(x)
    assert_route(TAKEN, fastnorm.mean_var, x, axis=axis, ddof=ddof, keepdims=keepdims)
    fast = fastpath.mean_var_call(x, axis, ddof, keepdims)
    assert fast is not None, "the fast path refused a call it is meant for"
    general = fastpath.general(fastnorm.mean_var, x, axis=axis, ddof=ddof, keepdims=keepdims)
    for q, g, what in zip(fast, general, ("mean", "var")):
        assert type(q) is type(g) and np.shape(q) == np.shape(g), what
        assert_bitwise(q, g, f"fast {what} against the general path")
    rmean, rvar, _ = ref_mean_var(x, axes, ddof=ddof)
    shape = np.shape(fast[0])
    tol = OUT_TOL[x.dtype] * 4
    assert_close(fast[0], rmean.reshape(shape), tol * (1.0 + np.abs(rmean.reshape(shape))),
                 "mean")
    assert_close(fast[1], rvar.reshape(shape), tol * np.abs(rvar.reshape(shape)) + 1e-30,
                 "var")
    if x.dtype != np.float16:
        out = (np.full(shape, 7, x.dtype), np.full(shape, 7, x.dtype))
        assert_route(TAKEN, fastnorm.mean_var, x, axis=axis, ddof=ddof, keepdims=keepdims,
                     out=out)
        got = fastnorm.mean_var(x, axis=axis, ddof=ddof, keepdims=keepdims, out=out)
        assert got[0] is out[0] and got[1] is out[1]
        for o, g, what in zip(out, general, ("mean", "var")):
            assert_bitwise(o, np.asarray(g), f"fast {what} into out= against the general path")
    assert fingerprint(x) == before, "x changed"


@pytest.mark.parametrize("axis, error", [
    (2, np.exceptions.AxisError),
    ((0, -2), ValueError),
    (1.0, TypeError),
    ((0, True), TypeError),
    (10**30, np.exceptions.AxisError),
], ids=["out of range", "repeated", "a float", "a bool in a tuple", "a huge int"])
def test_bad_axes_raise_alike_on_either_path(axis, error):
    for func in (fastnorm.mean_var, fastnorm.layer_norm, fastnorm.rms_norm):
        assert isinstance(fastpath.same_error(func, X, axis=axis), error), func
    assert isinstance(fastpath.same_error(fastnorm.batch_norm, X, axis=axis), error)


@pytest.mark.parametrize("what, kwargs", [
    ("a float ddof", dict(axis=-1, ddof=1.0)),
    ("ddof of the whole row", dict(axis=-1, ddof=10)),
    ("a negative ddof", dict(axis=-1, ddof=-1)),
    ("an integer keepdims", dict(axis=-1, keepdims=1)),
], ids=lambda v: v if isinstance(v, str) else "")
def test_fast_mean_var_leaves_other_calls_to_the_general_path(what, kwargs):
    args = dict(axis=None, ddof=0, keepdims=False) | kwargs
    assert fastpath.mean_var_call(X, args["axis"], args["ddof"], args["keepdims"]) is None
    axes = tuple(range(X.ndim)) if args["axis"] is None else (args["axis"] % X.ndim,)
    rmean, rvar, _ = ref_mean_var(X, axes, ddof=int(args["ddof"]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)          # ddof of the whole row
        assert_route(LEFT, fastnorm.mean_var, X, **kwargs)
    if args["ddof"] >= 10:
        with pytest.warns(RuntimeWarning):
            mean, var = fastnorm.mean_var(X, **kwargs)
        assert np.isinf(var).all()
    else:
        mean, var = fastnorm.mean_var(X, **kwargs)
        shape = rmean.shape if args["keepdims"] else np.squeeze(rmean, axes).shape
        assert_close(var, rvar.reshape(shape), 1e-5 * rvar.reshape(shape), what)
    assert_close(mean, rmean.reshape(np.shape(mean)), 1e-5 * (1 + np.abs(rmean)).reshape(
        np.shape(mean)), what)


class _Sub(np.ndarray):
    pass


@pytest.mark.parametrize("what, x, ddof", [
    ("byte-swapped x", X.astype(X.dtype.newbyteorder()), 0),
    ("misaligned x", MISALIGNED, 0),
    ("a list", X.tolist(), 0),
    ("integers", np.arange(40).reshape(4, 10), 0),
    ("an ndarray subclass", X.view(_Sub), 0),
    ("0-d x", np.float32(3.0) * np.ones(()), 0),
    ("no values", np.ones((0, 10), np.float32), 0),
    ("a bool ddof", X, True),
    ("a NumPy integer ddof", X, np.int64(1)),
    ("a ddof beyond any index", X, 2**70),
], ids=lambda v: v if isinstance(v, str) else "")
def test_fast_mean_var_leaves_other_inputs_to_the_general_path(what, x, ddof):
    assert fastpath.mean_var_call(x, -1, ddof, False) is None, what


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("keepdims", [False, True])
def test_fast_mean_var_large_enough_for_threads(threads, dtype, keepdims):
    # At or above the kernels' parallel size the fast path asks for the
    # team; results do not depend on it.
    rows = _simd.kernels.tuning()["parallel_min"] // 256 + 3
    x = (np.random.default_rng(8).standard_normal((rows, 256)) * 3 + 1e3).astype(dtype)
    fastnorm.set_num_threads(threads)
    try:
        fast = fastpath.mean_var_call(x, -1, 1, keepdims)
    finally:
        fastnorm.set_num_threads(None)
    general = fastpath.general(fastnorm.mean_var, x, axis=-1, ddof=1, keepdims=keepdims)
    for q, g, name in zip(fast, general, ("mean", "var")):
        assert q.dtype == x.dtype and q.shape == g.shape, name
        assert_bitwise(q, g, name)
    rmean, rvar, _ = ref_mean_var(x, (1,), ddof=1)
    if not keepdims:
        rmean, rvar = rmean[:, 0], rvar[:, 0]
    tol = OUT_TOL[x.dtype] * 4
    assert_close(fast[0], rmean, tol * (1.0 + np.abs(rmean)), "mean")
    assert_close(fast[1], rvar, tol * np.abs(rvar), "var")


def _overlapping_out():
    """out= arrays written through a temporary, which the fast path leaves
    to the general path, with the x and gamma each goes with: (what, x,
    gamma, out)."""
    rng = np.random.default_rng(9)
    buf = rng.standard_normal(70)
    shifted = buf[:60].reshape(6, 10), buf[10:].reshape(6, 10)   # x one row on
    x = rng.standard_normal((6, 10))
    return [
        ("out overlapping x", shifted[0], None, shifted[1]),
        ("a byte-swapped out", x, None, np.empty((6, 10), ">f8")),
        ("an out whose elements share addresses", x, None,
         np.lib.stride_tricks.as_strided(np.zeros(16), (6, 10), (8, 8))),
    ]


@pytest.mark.parametrize("what, out", [
    ("an out of another dtype", np.empty((6, 10), np.float32)),
    ("a read-only out", np.frombuffer(bytes(480)).reshape(6, 10)),
    ("an out of another shape", np.empty((6, 11))),
    ("a list out", [0.0] * 60),
], ids=lambda v: v if isinstance(v, str) else "")
def test_bad_outs_raise_alike_on_either_path(what, out):
    x = np.random.default_rng(9).standard_normal((6, 10))
    for func in (fastnorm.layer_norm, fastnorm.rms_norm, fastnorm.batch_norm):
        fastpath.same_error(func, x, out=out, **({"axis": 0} if func is fastnorm.batch_norm
                                                 else {}))
    fastpath.same_error(fastnorm.layer_norm_backward, x, x, np.zeros((6, 1)), np.ones((6, 1)),
                        out=out)


@pytest.mark.parametrize("what, x, out", [
    ("a Fortran-order out", np.ones((6, 10)), np.asfortranarray(np.empty((6, 10)))),
    ("out=x", np.arange(60.0).reshape(6, 10), "x"),
    ("out= a view of x in x's layout", np.arange(60.0).reshape(6, 10), "view"),
    ("a strided out", np.ones((6, 10)), np.empty((6, 20))[:, ::2]),
], ids=lambda v: v if isinstance(v, str) else "")
def test_outs_written_directly_take_the_fast_path(what, x, out):
    # Where the result goes into out= itself (writes_directly), the small
    # calls' path takes it, with the general path's bits.
    x = x * np.linspace(0.5, 2, 10)
    want = fastpath.general(fastnorm.layer_norm, x.copy())
    o = {"x": x, "view": x[:, :]}[out] if isinstance(out, str) else out
    assert_route(TAKEN, fastnorm.layer_norm, x, out=o)
    assert fastnorm.layer_norm(x, out=o) is o
    assert_bitwise(o, want, what)


def test_fast_path_out_holding_gamma():
    # gamma is widened into an array of its own before y is written, so an
    # out= over gamma's memory takes the fast path, with the general
    # path's bits.
    rng = np.random.default_rng(9)
    x = rng.standard_normal((6, 10))
    for part in (slice(0, 10), slice(55, 65)):
        shared = rng.uniform(0.5, 2.0, 70)
        gamma = shared[part]
        want = fastpath.general(fastnorm.layer_norm, x, gamma.copy())
        out = shared[:60].reshape(6, 10)
        assert_route(TAKEN, fastnorm.layer_norm, x, gamma, out=out)
        assert fastpath.norm_call(x, -1, "center", 1e-5, gamma, None, out) is out
        assert_bitwise(out, want, f"out over gamma[{part}]")


@pytest.mark.parametrize("what, x, gamma, out", _overlapping_out(),
                         ids=[c[0] for c in _overlapping_out()])
def test_fast_path_leaves_other_outs_to_the_general_path(what, x, gamma, out):
    assert fastpath.norm_call(x, -1, "center", 1e-5, gamma, None, out) is None
    g = None if gamma is None else gamma.copy()
    ref = ref_layer_norm(x.copy(), (1,), g, None)[0]
    assert_route(LEFT, fastnorm.layer_norm, x, gamma, out=out)
    if what == "an out whose elements share addresses":
        return      # (written in some order: nothing to compare)
    assert fastnorm.layer_norm(x, gamma, out=out) is out
    assert_close(out, ref, 1e-12 * (1.0 + np.abs(ref)), what)


def test_fast_path_leaves_dtype_and_statistics_into_out_to_the_general_path():
    # layer_norm and rms_norm ask the fast path for y in x's dtype, with
    # return_stats its statistics too, but not into out= arrays: these calls
    # must still do what they say.
    y = np.full_like(X, np.nan)
    assert fastnorm.layer_norm(X, out=y) is y
    assert_close(y, ref_layer_norm(X, (1,))[0], 4e-5, "out=")
    assert fastnorm.layer_norm(X, dtype=np.float64).dtype == np.float64
    assert_route(LEFT, fastnorm.layer_norm, X, dtype=np.float64)
    y, mean, rstd = fastnorm.layer_norm(X, return_stats=True)
    assert mean.shape == (4, 1) and rstd.shape == (4, 1)
    assert_route(TAKEN, fastnorm.layer_norm, X, return_stats=True)
    y, rstd = fastnorm.rms_norm(X, return_stats=True)
    assert rstd.shape == (4, 1)
    outs = (np.empty_like(X), np.empty((4, 1), np.float32), None)
    assert_route(LEFT, fastnorm.layer_norm, X, return_stats=True, out=outs)
    got = fastnorm.layer_norm(X, return_stats=True, out=outs)
    assert got[0] is outs[0] and got[1] is outs[1]
    assert_bitwise(got[1], mean, "mean into out=")
    assert_route(LEFT, fastnorm.rms_norm, X, return_stats=1)    # not a bool: the general path


@given(fast_calls())
def test_fast_statistics_are_the_general_paths(call):
    # With return_stats the fast path gives y and the statistics, in their
    # dtype (float32 for float16 and float32 x) and keepdims shape, bit for
    # bit as the general path does.
    x, axis, gamma, beta, eps = call
    for func, args in ((fastnorm.layer_norm, (x, gamma, beta)), (fastnorm.rms_norm, (x, gamma))):
        assert_route(TAKEN, func, *args, axis=axis, eps=eps, return_stats=True)
        got = func(*args, axis=axis, eps=eps, return_stats=True)
        want = fastpath.general(func, *args, axis=axis, eps=eps, return_stats=True)
        assert len(got) == len(want) == (3 if func is fastnorm.layer_norm else 2)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and g.shape == w.shape
            assert_bitwise(g, w, func.__name__)
        rstd = got[-1].astype(np.float64)
        xd = x.astype(np.float64)
        if func is fastnorm.layer_norm:
            var = xd.var(axis=-1, keepdims=True)
            assert_close(got[1], xd.mean(axis=-1, keepdims=True),
                         1e-6 * (1 + np.abs(xd).max(axis=-1, keepdims=True)), "mean")
        else:
            var = (xd * xd).mean(axis=-1, keepdims=True)
        with np.errstate(divide="ignore"):      # a constant slice with eps 0: inf
            want_rstd = 1 / np.sqrt(var + eps)
        assert_close(rstd, want_rstd, 1e-5 * want_rstd, "rstd")


def _with_warnings(func, *args, **kwargs):
    """func's result and the messages of the warnings it gave."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = func(*args, **kwargs)
    return result, [str(w.message) for w in caught]


_CONSTANT = np.ones((3, 8), np.float32)
_BIG_DY = np.full((4, 8), 3e38, np.float32)
_SOME_X = np.random.default_rng(4).standard_normal((4, 8)).astype(np.float32)
_, _SOME_MEAN, _SOME_RSTD = fastnorm.layer_norm(_SOME_X, return_stats=True)
# +-3e38 in a checkerboard: rows and columns of variance 9e76.
_WIDE = np.where(np.add.outer(np.arange(8), np.arange(8)) % 2, -3e38, 3e38).astype(np.float32)

# Calls whose float32 results overflow where the float64 ones are finite:
# rstd of a constant slice (of zeros for rms_norm) with eps 1e-80 (1e40),
# the gradient of beta summed over rows of 3e38, the variance of values
# +-3e38.  (name, call, its arguments with out= arrays).
_OVERFLOWS = [
    ("mean_var over rows", fastnorm.mean_var, lambda: dict(x=_WIDE, axis=1)),
    ("mean_var over columns", fastnorm.mean_var, lambda: dict(x=_WIDE, axis=0)),
    ("mean_var into out=", fastnorm.mean_var,
     lambda: dict(x=_WIDE, axis=0, out=(np.zeros(8, np.float32), np.zeros(8, np.float32)))),
    ("layer_norm statistics", fastnorm.layer_norm,
     lambda: dict(x=_CONSTANT, eps=1e-80, return_stats=True)),
    ("rms_norm statistics", fastnorm.rms_norm,
     lambda: dict(x=_CONSTANT - 1, eps=1e-80, return_stats=True)),
    ("batch_norm statistics", fastnorm.batch_norm,
     lambda: dict(x=_CONSTANT, eps=1e-80, return_stats=True)),
    ("layer_norm_backward", fastnorm.layer_norm_backward,
     lambda: dict(dy=_BIG_DY, x=_SOME_X, mean=_SOME_MEAN, rstd=_SOME_RSTD,
                  gamma=np.ones(8, np.float32))),
    ("layer_norm_backward without gamma", fastnorm.layer_norm_backward,
     lambda: dict(dy=_BIG_DY, x=_SOME_X, mean=_SOME_MEAN, rstd=_SOME_RSTD)),
    ("layer_norm_backward into out=", fastnorm.layer_norm_backward,
     lambda: dict(dy=_BIG_DY, x=_SOME_X, mean=_SOME_MEAN, rstd=_SOME_RSTD,
                  gamma=np.ones(8, np.float32),
                  out=(None, np.zeros(8, np.float32), np.zeros(16, np.float32)[::2]))),
]


@pytest.mark.parametrize("what, func, arguments", _OVERFLOWS, ids=[c[0] for c in _OVERFLOWS])
def test_fast_path_warns_as_the_general_path_where_float32_overflows(what, func, arguments):
    assert fastnorm.explain(func, **arguments())["fast_path"]
    got, said = _with_warnings(func, **arguments())
    want, general_said = _with_warnings(fastpath.general, func, **arguments())
    assert said == general_said
    assert any("overflow" in m for m in said), "the float32 result overflowed unannounced"
    assert any(np.isinf(g).any() for g in got)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        assert_bitwise(g, w, what)


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("dtype", FLOATS)
def test_fast_rows_in_c_keep_x_layout_and_bound(order, dtype):
    # The fast path writes y in x's memory order, as np.empty_like would,
    # on either side of the kernels' parallel size, and into out=.
    k = _simd.kernels
    rng = np.random.default_rng(9)
    x = np.asarray(rng.standard_normal((6, 50)) + 3, dtype=dtype, order=order)
    g = rng.uniform(0.5, 2, 50).astype(dtype)[::-1]
    y = fastpath.norm_call(x, -1, "center", 1e-5, g, None)
    assert y is not None and y.strides == np.empty_like(x).strides
    assert_bitwise(y, fastpath.general(fastnorm.layer_norm, x, g), "fast path")
    big = np.ones((k.tuning()["parallel_min"] // 64, 64), dtype)
    for a in (big, big[:-1]):
        got = fastpath.norm_call(a, -1, "rms", 1e-5, None, None)
        assert got is not None
        assert_bitwise(got, fastpath.general(fastnorm.rms_norm, a), "fast path, either side")
    if order == "C":
        out = np.empty_like(x)
        assert fastpath.norm_call(x, -1, "center", 1e-5, g, None, out) is out
        assert_bitwise(out, y, "into out=")


# --------------------------------------------------------------------------
# their gradients

F64 = np.dtype(np.float64)


DX_TOL = {np.dtype(np.float16): 4e-3, np.dtype(np.float32): 1e-5, F64: 1e-12}


def _grad_laid_out(a, layout):
    """a's values: contiguous, reversed along the last axis, every other
    element of a longer array, Fortran order or one byte off alignment."""
    if layout == "reversed":
        return a[..., ::-1].copy()[..., ::-1]
    if layout == "every other":
        return np.repeat(a, 2, axis=-1)[..., ::2]
    if layout == "F":
        return np.asfortranarray(a)
    if layout == "misaligned":
        raw = np.zeros(a.nbytes + 1, np.uint8)
        b = raw[1:].view(a.dtype).reshape(a.shape)
        b[...] = a
        return b
    return a


@st.composite
def fast_gradients(draw):
    """A gradient call: x and dy of 1 to 3 dimensions in any layout, any
    axes (mostly the last, in its spellings), the forward's statistics in
    its or another float dtype and in keepdims or kept shape, gamma of the
    normalized shape and any float dtype or none, out= arrays or not."""
    ndim = draw(st.integers(1, 3))
    shape = tuple(draw(st.lists(st.integers(1, 5), min_size=ndim - 1, max_size=ndim - 1)))
    shape += (draw(st.integers(1, 300)),)
    dtype = np.dtype(draw(st.sampled_from(FLOATS)))
    mode = draw(st.sampled_from(["center", "rms"]))
    axis = draw(st.one_of(st.sampled_from([-1, ndim - 1]), any_axes(ndim)))
    axes = _sorted_axes(axis, ndim)
    named = tuple(shape[a] for a in axes)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    x = (rng.standard_normal(shape) * rng.uniform(0.1, 10) + draw(st.sampled_from([0.0, 3.0])))
    x = _grad_laid_out(x.astype(dtype),
                       draw(st.sampled_from(["C", "F", "reversed", "every other"])))
    dy = _grad_laid_out(rng.standard_normal(shape).astype(dtype),
                        draw(st.sampled_from(["C", "F", "reversed", "every other"])))
    g_dtype = draw(st.sampled_from([None] + FLOATS))
    gamma = None
    if g_dtype is not None:
        gamma = _grad_laid_out(rng.uniform(0.5, 2.0, named).astype(g_dtype),
                               draw(st.sampled_from(["C", "reversed", "every other",
                                                     "misaligned"])))
    forward = fastnorm.layer_norm if mode == "center" else fastnorm.rms_norm
    stats = forward(x, axis=axis, return_stats=True)[1:]
    if draw(st.booleans()):                                       # the kept shape
        stats = tuple(s.reshape([n for a, n in enumerate(shape) if a not in axes])
                      for s in stats)
    if draw(st.booleans()):
        stats = tuple(s.astype(np.float64) for s in stats)
    n_out = 3 if mode == "center" else 2
    out = draw(st.sampled_from([None, "all", "dx", "grads", "strided grads"]))
    return dict(dy=dy, x=x, stats=stats, gamma=gamma, mode=mode, n_out=n_out, out=out,
                axis=axis, axes=axes, named=named)


def _sorted_axes(axis, ndim):
    """axis as the sorted tuple of non-negative axes it names."""
    if axis is None:
        return tuple(range(ndim))
    return tuple(sorted(a % ndim for a in (axis if isinstance(axis, tuple) else (axis,))))


def _outs(call):
    """Fresh out= arrays for the call's choice (None: no out=)."""
    if call["out"] is None:
        return None
    x, gamma, n_out, named = call["x"], call["gamma"], call["n_out"], call["named"]
    pdt = gamma.dtype if gamma is not None else (F64 if x.dtype == F64 else np.float32)
    dx = np.full_like(x, 7) if call["out"] in ("all", "dx") else None
    grads = [np.full(named, 7, pdt) if call["out"] in ("all", "grads")
             else np.full(named[:-1] + (2 * named[-1],), 7, pdt)[..., ::-2]
             if call["out"] == "strided grads" else None
             for _ in range(n_out - 1)]
    return (dx, *grads)


def _public(call, axis, out):
    if call["mode"] == "center":
        mean, rstd = call["stats"]
        return fastnorm.layer_norm_backward(call["dy"], call["x"], mean, rstd, call["gamma"],
                                            axis=axis, out=out)
    return fastnorm.rms_norm_backward(call["dy"], call["x"], call["stats"][0], call["gamma"],
                                      axis=axis, out=out)


def _fast_call(call, out):
    mean, rstd = call["stats"] if call["mode"] == "center" else (None, call["stats"][0])
    return fastpath.norm_backward_call(call["dy"], call["x"], mean, rstd, call["gamma"],
                                       call["axis"], call["mode"], out, call["n_out"])


@given(fast_gradients())
def test_fast_gradients_are_the_general_path(call):
    inputs = (call["dy"], call["x"], *call["stats"], call["gamma"])
    before = [None if a is None else fingerprint(a) for a in inputs]
    out = _outs(call)
    assert _public_route(call, call["axis"], out)["fast_path"]
    assert _public_route(call, call["axes"], out)["fast_path"]
    got = _fast_call(call, out)
    assert got is not None, "the fast path refused a call it is meant for"
    assert len(got) == call["n_out"]
    if out is not None:
        for o, g in zip(out, got):
            assert o is None or g is o, "an out= array was not the one returned"
    with fastpath.general_path():
        general = _public(call, call["axis"], _outs(call))
    for name, a, b in zip(("dx", "dgamma", "dbeta"), got, general):
        assert a.dtype == b.dtype and a.shape == b.shape, name
        assert_bitwise(a, b, f"fast {name} against the general path")
    for name, a, b in zip(("dx", "dgamma", "dbeta"), _public(call, call["axis"], None), got):
        assert_bitwise(a, b, f"public {name}")
    after = [None if a is None else fingerprint(a) for a in inputs]
    assert after == before, "an input changed"

    _assert_grads_near_reference(got, call["dy"], call["x"], call["axes"], call["axes"],
                                 call["gamma"], call["mode"], call["stats"])


def _assert_grads_near_reference(got, dy, x, axes, along, gamma, mode, stats):
    """got, (dx, dgamma[, dbeta]), against the closed form in float64 (the
    statistics recomputed there, but in mode scale: the given ones)."""
    dt = x.dtype
    g = None
    if gamma is not None:          # keepdims layout
        g = gamma.astype(np.float64).reshape(
            [n if a in along else 1 for a, n in enumerate(x.shape)])
    ref = ref_norm_grads(dy, x, axes, along, g, mode, stats=stats if mode == "scale" else None)
    assert_close(got[0], ref["dx"], DX_TOL[dt] * ref["dx_scale"] + tiny(dt), "dx")
    ptol = 1e-12 if dt == F64 else 1e-5
    # The forward's float32 mean (float16/float32 x) is off by up to half an
    # ulp, a float64 one by a few: every xhat by that times rstd, which
    # dgamma = sum(dy xhat) carries against dy (a value near the mean has an
    # xhat of about that size; with every axis normalized, dgamma is one
    # such product).
    slack = {"dgamma": 0.0, "dbeta": 0.0}
    if mode == "center":
        mean, rstd = (np.asarray(s, np.float64) for s in stats)
        ulps = np.spacing(np.abs(mean).astype(np.float32)) if dt != F64 else 4 * np.spacing(
            np.abs(mean))
        shift = float(np.max(ulps * rstd, initial=0.0))
        slack["dgamma"] = shift * ref["dbeta_scale"].reshape(-1)
    named = tuple(x.shape[a] for a in along)
    for name, grad in zip(("dgamma", "dbeta"), got[1:]):
        want = ref[name].reshape(-1)
        allowed = (max(ptol, OUT_TOL[grad.dtype]) * ref[name + "_scale"].reshape(-1)
                   + slack[name] + tiny(grad.dtype))
        assert grad.shape == named, name
        assert_close(grad.reshape(-1), want, allowed, name)


def test_fast_gradients_with_threads():
    # Large enough for the kernels' team: the same bits with 1 and 2 threads.
    from fastnorm import _simd
    rows = _simd.kernels.tuning()["parallel_min"] // 256 + 3
    rng = np.random.default_rng(3)
    x = rng.standard_normal((rows, 256)).astype(np.float32)
    dy = rng.standard_normal((rows, 256)).astype(np.float32)
    gamma = rng.uniform(0.5, 2, 256).astype(np.float32)
    _, mean, rstd = fastnorm.layer_norm(x, gamma, return_stats=True)
    results = []
    try:
        for threads in (1, 2):
            fastnorm.set_num_threads(threads)
            got = fastpath.norm_backward_call(dy, x, mean, rstd, gamma, -1, "center", None, 3)
            assert got is not None
            results.append(got)
    finally:
        fastnorm.set_num_threads(None)
    for a, b in zip(*results):
        assert_bitwise(a, b, "1 thread against 2")
    general = fastpath.general(fastnorm.layer_norm_backward, dy, x, mean, rstd, gamma)
    for a, b in zip(results[0], general):
        assert_bitwise(a, b, "fast against general")


GRAD_X = np.random.default_rng(7).standard_normal((4, 10)).astype(np.float32)


GRAD_DY = np.random.default_rng(8).standard_normal((4, 10)).astype(np.float32)


_, GRAD_MEAN, GRAD_RSTD = fastnorm.layer_norm(GRAD_X, return_stats=True)
_, GRAD_MEAN0, GRAD_RSTD0 = fastnorm.layer_norm(GRAD_X, axis=0, return_stats=True)

GRAD_G = np.linspace(0.5, 1.5, 10).astype(np.float32)


# Calls the fast path must leave to the general path: (what, the call's
# arguments other than GRAD_X, GRAD_DY, GRAD_MEAN, GRAD_RSTD, GRAD_G, axis -1 and no out=).  Built
# anew for each call, since some write into their inputs.
GRAD_GENERAL = [
    ("a list for x", lambda: dict(x=GRAD_X.tolist())),
    ("float64 dy with float32 x", lambda: dict(dy=GRAD_DY.astype(np.float64))),
    ("integer x and dy", lambda: dict(x=np.arange(40).reshape(4, 10),
                                      dy=np.ones((4, 10), int))),
    ("an empty x", lambda: dict(x=np.zeros((4, 0), np.float32), dy=np.zeros((4, 0), np.float32),
                                mean=np.zeros((4, 1)), rstd=np.ones((4, 1)), gamma=None)),
    ("byte-swapped x", lambda: dict(x=GRAD_X.astype(">f4"))),
    ("a keepdims gamma over axis 0",
     lambda: dict(axis=0, mean=GRAD_MEAN0, rstd=GRAD_RSTD0, gamma=np.ones((4, 1), np.float32))),
    ("a keepdims gamma", lambda: dict(gamma=GRAD_G.reshape(1, 10))),
    ("a list gamma", lambda: dict(gamma=GRAD_G.tolist())),
    ("an integer gamma", lambda: dict(gamma=np.arange(1, 11))),
    ("out=dy (in place)", lambda: _grad_in_place("dy")),
    ("dx= a view of x", lambda: _grad_in_place("x")),
    ("out= a bare array", lambda: dict(out=np.empty_like(GRAD_X))),
    ("a byte-swapped dgamma=", lambda: dict(out=(None, np.empty(10, ">f4"), None))),
    ("a dx= whose elements share addresses",
     lambda: dict(out=(_grad_self_overlapping(), None, None))),
]


# ...and calls that break a rule: the same error on either path.
GRAD_ERRORS = [
    ("dy of another shape", lambda: dict(dy=GRAD_DY[:, :9]), ValueError),
    ("mean of the wrong shape", lambda: dict(mean=GRAD_MEAN[:3]), ValueError),
    ("gamma of the wrong size", lambda: dict(gamma=GRAD_G[:9]), ValueError),
    ("a complex gamma", lambda: dict(gamma=GRAD_G.astype(complex)), TypeError),
    ("complex statistics", lambda: dict(rstd=GRAD_RSTD.astype(complex)), TypeError),
    ("an out= tuple of two", lambda: dict(out=(np.empty_like(GRAD_X), np.empty(10, np.float32))),
     ValueError),
    ("dgamma= of another dtype", lambda: dict(out=(None, np.empty(10), None)), TypeError),
    ("a read-only dx=", lambda: dict(out=(_read_only(np.empty_like(GRAD_X)), None, None)),
     ValueError),
    ("an axis out of range", lambda: dict(axis=2), np.exceptions.AxisError),
    ("the last axis's gamma over axis 0",
     lambda: dict(axis=0, mean=GRAD_MEAN0, rstd=GRAD_RSTD0), ValueError),
    ("the last axis's statistics over axis 0", lambda: dict(axis=0, gamma=None), ValueError),
]


def _grad_in_place(which):
    x, dy = GRAD_X.copy(), GRAD_DY.copy()
    target = dy if which == "dy" else x[:, :]
    return dict(x=x, dy=dy, out=(target, None, None))


def _grad_self_overlapping():
    """A writable (4, 10) float32 view in which rows overlap."""
    base = np.zeros(16, np.float32)
    return np.lib.stride_tricks.as_strided(base, (4, 10), (8, 4))


def _grad_arguments(change):
    a = dict(x=GRAD_X, dy=GRAD_DY, mean=GRAD_MEAN, rstd=GRAD_RSTD, gamma=GRAD_G, axis=-1, out=None)
    a.update(change())
    return a


def _grad_call(a, explain=False):
    """layer_norm_backward with a's arguments (explain: its route)."""
    args = (a["dy"], a["x"], a["mean"], a["rstd"], a["gamma"])
    if explain:
        return fastnorm.explain(fastnorm.layer_norm_backward, *args, axis=a["axis"], out=a["out"])
    return fastnorm.layer_norm_backward(*args, axis=a["axis"], out=a["out"])

def _grad_refused(a, changed, rms=True):
    """Whether the fast path leaves the call to the general path, as
    layer_norm_backward's and (with rms, unless only the mean, which it
    does not take, is what changed) as rms_norm_backward's."""
    out = a["out"]
    rms_out = out[:2] if isinstance(out, tuple) and len(out) == 3 else out
    refused = fastpath.norm_backward_call(a["dy"], a["x"], a["mean"], a["rstd"], a["gamma"],
                                          a["axis"], "center", out, 3) is None
    if rms and set(changed) != {"mean"}:
        refused = refused and fastpath.norm_backward_call(
            a["dy"], a["x"], None, a["rstd"], a["gamma"], a["axis"], "rms", rms_out, 2) is None
    return refused


@pytest.mark.parametrize("what, change", GRAD_GENERAL, ids=[c[0] for c in GRAD_GENERAL])
def test_other_gradient_calls_take_the_general_path(what, change, monkeypatch):
    assert _grad_refused(_grad_arguments(change), change())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)      # an empty x warns
        assert not _grad_call(_grad_arguments(change), explain=True)["fast_path"]
    got = _grad_call(_grad_arguments(change))
    # The same call with the fast path out of the way: the same results.
    monkeypatch.setattr(fastnorm._simd.kernels, "fast_norm_backward", lambda *args: None)
    want = _grad_call(_grad_arguments(change))
    for name, a, b in zip(("dx", "dgamma", "dbeta"), got, want):
        assert_bitwise(np.asarray(a), np.asarray(b), name)


def test_dask_gradients_take_the_dask_path():
    da = pytest.importorskip("dask.array")
    x = da.from_array(GRAD_X, chunks=(2, 10))
    assert fastpath.norm_backward_call(GRAD_DY, x, GRAD_MEAN, GRAD_RSTD, GRAD_G, -1, "center",
                                       None, 3) is None
    got = fastnorm.layer_norm_backward(GRAD_DY, x, GRAD_MEAN, GRAD_RSTD, GRAD_G)
    assert all(isinstance(g, da.Array) for g in got)
    ref = ref_norm_grads(GRAD_DY, GRAD_X, (1,), (1,), GRAD_G.astype(np.float64).reshape(1, 10))
    assert_close(np.asarray(got[0]), ref["dx"], 1e-5 * ref["dx_scale"] + 1e-30, "dx")


@pytest.mark.parametrize("what, change, exc", GRAD_ERRORS, ids=[c[0] for c in GRAD_ERRORS])
def test_bad_gradient_calls_raise_alike_on_either_path(what, change, exc):
    assert isinstance(fastpath.same_error(_grad_call, _grad_arguments(change)), exc)


def _public_route(call, axis, out):
    """explain's dict for _public's call."""
    if call["mode"] == "center":
        mean, rstd = call["stats"]
        return fastnorm.explain(fastnorm.layer_norm_backward, call["dy"], call["x"], mean, rstd,
                                call["gamma"], axis=axis, out=out)
    return fastnorm.explain(fastnorm.rms_norm_backward, call["dy"], call["x"], call["stats"][0],
                            call["gamma"], axis=axis, out=out)

# --------------------------------------------------------------------------
# batch_norm over every axis but 1

def _bn_laid_out(a, layout):
    if layout == "F":
        return np.asfortranarray(a)
    if layout == "reversed":
        return a[..., ::-1].copy()[..., ::-1]
    if layout == "every other":
        return np.repeat(a, 2, axis=-1)[..., ::2]
    return a


@st.composite
def fast_batch_norms(draw):
    """x of 2 to 4 dimensions in any layout, per-channel gain, bias and
    running statistics of any float dtype or none, training or eval, out=
    or not."""
    ndim = draw(st.integers(2, 4))
    shape = tuple(draw(st.lists(st.integers(1, 6), min_size=ndim, max_size=ndim)))
    training = draw(st.booleans())
    if training and np.prod(shape) // shape[1] < 2:
        shape = (2,) + shape[1:]
    dtype = np.dtype(draw(st.sampled_from(FLOATS)))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    x = rng.standard_normal(shape) * rng.uniform(0.1, 10) + draw(st.sampled_from([0.0, 5.0]))
    x = _bn_laid_out(x.astype(dtype), draw(st.sampled_from(["C", "F", "reversed", "every other"])))
    c = shape[1]
    params = [None if (d := draw(st.sampled_from([None] + FLOATS))) is None
              else (rng.uniform(0.5, 2.0, c) if role == "gamma" else rng.standard_normal(c))
              .astype(d) for role in ("gamma", "beta")]
    r_dtype = draw(st.sampled_from(([None] if training else []) + FLOATS))
    running = (None, None)
    if r_dtype is not None:
        running = (rng.standard_normal(c).astype(r_dtype),
                   rng.uniform(0.5, 2.0, c).astype(r_dtype))
    axis = None if ndim > 2 else draw(st.sampled_from([None, 0, -2]))
    return dict(x=x, gamma=params[0], beta=params[1], running=running, training=training,
                momentum=draw(st.sampled_from([0.1, 0.0, 1.0])),
                eps=draw(st.sampled_from([1e-5, 0.0, 0.5])), axis=axis,
                out=draw(st.booleans()))


def _copies(running):
    return tuple(None if r is None else r.copy() for r in running)


@given(fast_batch_norms())
def test_fast_batch_norm_is_the_general_path(call):
    x, gamma, beta = call["x"], call["gamma"], call["beta"]
    before = [None if a is None else fingerprint(a) for a in (x, gamma, beta)]
    fast_running, general_running = _copies(call["running"]), _copies(call["running"])
    out = np.full_like(x, 7) if call["out"] else None
    axes = (0,) + tuple(range(2, x.ndim))
    kw = dict(training=call["training"], momentum=call["momentum"], eps=call["eps"])
    assert_route(TAKEN, fastnorm.batch_norm, x, gamma, beta, *fast_running, axis=call["axis"],
                 out=out, **kw)
    assert_route(TAKEN, fastnorm.batch_norm, x, gamma, beta, *fast_running, axis=axes, **kw)
    y = fastpath.batch_norm_call(x, gamma, beta, *fast_running, call["training"],
                               call["momentum"], call["eps"], call["axis"], out)
    assert y is not None, "the fast path refused a call it is meant for"
    assert out is None or y is out
    assert y.dtype == x.dtype and y.shape == x.shape
    axes = (0,) + tuple(range(2, x.ndim))
    general = fastpath.general(fastnorm.batch_norm, x, gamma, beta, *general_running,
                               axis=axes, **kw)
    assert_bitwise(y, general, "fast y against the general path")
    for r_fast, r_general in zip(fast_running, general_running):
        if r_fast is not None:
            assert_bitwise(r_fast, r_general, "running statistics")
    assert [None if a is None else fingerprint(a) for a in (x, gamma, beta)] == before

    # Against float64: batch statistics (training) or the running ones.
    keep = tuple(x.shape[1] if i == 1 else 1 for i in range(x.ndim))
    g = None if gamma is None else gamma.astype(np.float64).reshape(keep)
    b = None if beta is None else beta.astype(np.float64).reshape(keep)
    tol = OUT_TOL[x.dtype]
    if call["training"]:
        ref, mean, _, _, _ = ref_layer_norm(x, axes, g, b, eps=call["eps"])
        if call["running"][0] is not None:
            xd = x.astype(np.float64)
            n = x.size // x.shape[1]
            var = ((xd - mean) ** 2).sum(axis=axes) / n
            want = ref_running_update(*call["running"], mean.ravel(), var, n, call["momentum"])
            for got, w in zip(fast_running, want):
                assert_close(got, w, 4 * OUT_TOL[got.dtype] * (1 + np.abs(w)), "running")
    else:
        rm, rv = (r.astype(np.float64).reshape(keep) for r in call["running"])
        ref = (x.astype(np.float64) - rm) / np.sqrt(rv + call["eps"])
        ref = ref if g is None else ref * g
        ref = ref if b is None else ref + b
    assert_close(y, ref, 4 * tol * (1 + np.abs(ref)), "y")


def test_fast_batch_norm_with_threads():
    # Large enough for the kernels' team: the same bits with 1 and 2 threads.
    rng = np.random.default_rng(4)
    x = rng.standard_normal((8, 16, 32, 32)).astype(np.float32)
    gamma, beta = rng.uniform(0.5, 2, 16).astype(np.float32), rng.standard_normal(16)
    results = []
    try:
        for threads in (1, 2):
            fastnorm.set_num_threads(threads)
            running = (np.zeros(16, np.float32), np.ones(16, np.float32))
            y = fastpath.batch_norm_call(x, gamma, beta, *running, True, 0.1, 1e-5, None, None)
            assert y is not None
            results.append((y, *running))
    finally:
        fastnorm.set_num_threads(None)
    for a, b in zip(*results):
        assert_bitwise(a, b, "1 thread against 2")


BN_X = np.random.default_rng(7).standard_normal((6, 4, 3)).astype(np.float32)


BN_G = np.linspace(0.5, 1.5, 4).astype(np.float32)


BN_RM, BN_RV = np.zeros(4, np.float32), np.ones(4, np.float32)

def _bn_in_place():
    x = BN_X.copy()
    return dict(x=x, out=x)


# Calls the fast path must leave to the general path: changes to (BN_X, BN_G,
# beta None, BN_RM, BN_RV, training, momentum 0.1, eps 1e-5, axis None, out None).
BN_GENERAL = [
    ("a list for x", lambda: dict(x=BN_X.tolist())),
    ("integer x", lambda: dict(x=np.arange(72).reshape(6, 4, 3))),
    ("byte-swapped x", lambda: dict(x=BN_X.astype(">f4"))),
    ("channels last", lambda: dict(axis=(0, 1), gamma=np.ones(3), rm=None, rv=None)),
    ("axis 0 of three dimensions", lambda: dict(axis=0, gamma=None, rm=None, rv=None)),
    ("a keepdims gamma", lambda: dict(gamma=BN_G.reshape(1, 4, 1))),
    ("a list gamma", lambda: dict(gamma=BN_G.tolist())),
    ("byte-swapped running statistics",
     lambda: dict(rm=BN_RM.astype(">f4"), rv=BN_RV.astype(">f4"))),
    ("keepdims running statistics", lambda: dict(rm=BN_RM.reshape(1, 4, 1),
                                                 rv=BN_RV.reshape(1, 4, 1))),
    ("a NumPy bool training", lambda: dict(training=np.bool_(True))),
    ("an out= whose elements share addresses", lambda: dict(out=_bn_self_overlapping())),
]


BN_ERRORS = [
    ("x of one dimension", lambda: dict(x=BN_X[:, 0, 0], gamma=None, rm=None, rv=None),
     ValueError),
    ("one value per channel", lambda: dict(x=BN_X[:1, :, :1]), ValueError),
    ("eval without running statistics", lambda: dict(training=False, rm=None, rv=None),
     ValueError),
    ("one running buffer for both", lambda: dict(rv="rm"), ValueError),
    ("running_mean alone", lambda: dict(rv=None), ValueError),
    ("gamma of the wrong size", lambda: dict(gamma=BN_G[:3]), ValueError),
    ("a read-only running_var", lambda: dict(rv=_read_only(BN_RV.copy())), ValueError),
    ("a negative eps", lambda: dict(eps=-1.0), ValueError),
    ("out of another dtype", lambda: dict(out=np.empty(BN_X.shape, np.float64)), TypeError),
    ("a NaN momentum", lambda: dict(momentum=float("nan")), ValueError),
]


def _bn_self_overlapping():
    """A writable view of BN_X's shape in which the batch entries overlap."""
    base = np.zeros(24, np.float32)
    return np.lib.stride_tricks.as_strided(base, BN_X.shape, (8, 12, 4))


def _read_only(a):
    a.flags.writeable = False
    return a


def _bn_arguments(change):
    a = dict(x=BN_X, gamma=BN_G, beta=None, rm=BN_RM.copy(), rv=BN_RV.copy(), training=True,
             momentum=0.1, eps=1e-5, axis=None, out=None)
    a.update(change())
    if isinstance(a["rv"], str):
        a["rv"] = a["rm"]
    return a


def _fast_refuses(a):
    return fastpath.batch_norm_call(a["x"], a["gamma"], a["beta"], a["rm"], a["rv"],
                                  a["training"], a["momentum"], a["eps"], a["axis"],
                                  a["out"]) is None


def _bn_call(a, explain=False):
    """batch_norm with a's arguments (explain: its route)."""
    return (fastnorm.explain if explain else lambda f, *args, **kw: f(*args, **kw))(
        fastnorm.batch_norm, a["x"], a["gamma"], a["beta"], a["rm"], a["rv"],
        training=a["training"], momentum=a["momentum"], eps=a["eps"], axis=a["axis"], out=a["out"])

@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("mode", ["training", "training, running statistics", "eval"])
def test_fast_batch_norm_statistics_are_the_general_paths(dtype, mode):
    # With return_stats: y, mean and rstd in keepdims layout, and the
    # running statistics updated, bit for bit as the general path does.
    x = BN_X.astype(dtype)
    results = []
    for path in ("fast", "general"):
        rm, rv = (None, None) if mode == "training" else (BN_RM + 0.5, BN_RV * 2)
        args = (x, BN_G, BN_G[::-1].copy(), rm, rv)
        kw = dict(training=mode != "eval", return_stats=True)
        if path == "fast":
            assert_route(TAKEN, fastnorm.batch_norm, *args, **kw)
            got = fastnorm.batch_norm(*args, **kw)
        else:
            got = fastpath.general(fastnorm.batch_norm, *args, **kw)
        results.append((got, rm, rv))
    (got, rm, rv), (want, want_rm, want_rv) = results
    assert len(got) == 3 and got[1].shape == got[2].shape == (1, 4, 1)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        assert_bitwise(g, w, "batch_norm")
    if rm is not None:
        assert_bitwise(rm, want_rm, "running_mean")
        assert_bitwise(rv, want_rv, "running_var")
    if mode != "eval":
        xd = x.astype(np.float64)
        assert_close(got[1], xd.mean(axis=(0, 2), keepdims=True), 1e-6, "mean")


@pytest.mark.parametrize("what, change", BN_GENERAL, ids=[c[0] for c in BN_GENERAL])
def test_other_batch_norm_calls_take_the_general_path(what, change, monkeypatch):
    assert _fast_refuses(_bn_arguments(change))
    _assert_bn_route(change, False, monkeypatch)


def _assert_bn_route(change, fast, monkeypatch):
    """The call takes the fast path or not (fast), with the results of the
    same call with the fast path out of the way."""
    assert _bn_call(_bn_arguments(change), explain=True)["fast_path"] is fast
    got = _bn_arguments(change)
    y = _bn_call(got)
    monkeypatch.setattr(fastnorm._simd.kernels, "fast_batch_norm", lambda *args: None)
    want = _bn_arguments(change)
    assert_bitwise(y, _bn_call(want), "y")
    for name in ("rm", "rv"):
        if got[name] is not None:
            assert_bitwise(got[name], want[name], name)


@pytest.mark.parametrize("what, change, exc", BN_ERRORS, ids=[c[0] for c in BN_ERRORS])
def test_bad_batch_norm_calls_raise_alike_on_either_path(what, change, exc):
    assert isinstance(fastpath.same_error(_bn_call, _bn_arguments(change)), exc)


@pytest.mark.parametrize("what, change", [
    ("an integer momentum", lambda: dict(momentum=0)),
    ("a NumPy float momentum", lambda: dict(momentum=np.float32(0.25))),
    ("out=x (in place)", _bn_in_place),
    ("a NumPy integer eps", lambda: dict(eps=np.int64(0))),
], ids=lambda v: v if isinstance(v, str) else "")
def test_batch_norm_calls_the_rules_admit_take_the_fast_path(what, change, monkeypatch):
    _assert_bn_route(change, True, monkeypatch)


def test_dask_batch_norm_takes_the_dask_path():
    da = pytest.importorskip("dask.array")
    x = da.from_array(BN_X, chunks=(3, 4, 3))
    assert fastpath.batch_norm_call(x, BN_G, None, None, None, True, 0.1, 1e-5, None, None) is None
    y = fastnorm.batch_norm(x, BN_G)
    assert isinstance(y, da.Array)
    ref = ref_layer_norm(BN_X, (0, 2), BN_G.astype(np.float64).reshape(1, 4, 1))[0]
    assert_close(np.asarray(y), ref, 4e-5 * (1 + np.abs(ref)), "y")


# --------------------------------------------------------------------------
# batch_norm's gradients

@st.composite
def fast_batch_gradients(draw):
    """A batch_norm_backward call: x and dy of 2 to 4 dimensions in any
    layout; axis None (every axis but 1), those axes written out, or any
    axes that leave one; training or eval; the forward's statistics in
    keepdims or kept shape, float32 or float64; gamma of the kept shape and
    any float dtype or none; out= arrays or not."""
    ndim = draw(st.integers(2, 4))
    shape = tuple(draw(st.lists(st.integers(1, 6), min_size=ndim, max_size=ndim)))
    but_1 = tuple(a for a in range(ndim) if a != 1)
    axis = draw(st.one_of(st.none(), st.just(but_1), any_axes(ndim)))
    axes = but_1 if axis is None else _sorted_axes(axis, ndim)
    if len(axes) == ndim:
        axes = but_1 if axis is None else axes[1:]
        axis = None if axis is None else axes
    kept = tuple(a for a in range(ndim) if a not in axes)
    if np.prod([shape[a] for a in axes]) < 2:      # training's forward needs two values
        shape = tuple(2 if a == axes[0] else n for a, n in enumerate(shape))
    dtype = np.dtype(draw(st.sampled_from(FLOATS)))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    layouts = st.sampled_from(["C", "F", "reversed", "every other"])
    x = rng.standard_normal(shape) * rng.uniform(0.1, 10) + draw(st.sampled_from([0.0, 5.0]))
    x = _grad_laid_out(x.astype(dtype), draw(layouts))
    dy = _grad_laid_out(rng.standard_normal(shape).astype(dtype), draw(layouts))
    g_dtype = draw(st.sampled_from([None] + FLOATS))
    gamma = None
    if g_dtype is not None:
        gamma = _grad_laid_out(rng.uniform(0.5, 2.0, [shape[a] for a in kept]).astype(g_dtype),
                               draw(st.sampled_from(["C", "reversed", "misaligned"])))
    stats = fastnorm.batch_norm(x, gamma, axis=axis, return_stats=True)[1:]
    given_stats = stats
    if draw(st.booleans()):                                       # the kept shape
        given_stats = tuple(s.reshape([shape[a] for a in kept]) for s in stats)
    if draw(st.booleans()):
        given_stats = tuple(s.astype(np.float64) for s in given_stats)
    return dict(dy=dy, x=x, stats=stats, given=given_stats, gamma=gamma, axis=axis, axes=axes,
                kept=kept, training=draw(st.booleans()),
                out=draw(st.sampled_from([None, "all", "dx", "grads"])))


def _batch_grad(call, fresh_out=True):
    out = None
    if call["out"] is not None:
        pdt = (call["gamma"].dtype if call["gamma"] is not None
               else F64 if call["x"].dtype == F64 else np.float32)
        named = [call["x"].shape[a] for a in call["kept"]]
        grads = call["out"] in ("all", "grads")
        out = (np.full_like(call["x"], 7) if call["out"] in ("all", "dx") else None,
               np.full(named, 7, pdt) if grads else None,
               np.full(named, 7, pdt) if grads else None)
    return out, fastnorm.batch_norm_backward(call["dy"], call["x"], *call["given"], call["gamma"],
                                             axis=call["axis"], training=call["training"],
                                             out=out)


@given(fast_batch_gradients())
def test_fast_batch_norm_gradients_are_the_general_path(call):
    inputs = (call["dy"], call["x"], *call["given"], call["gamma"])
    before = [None if a is None else fingerprint(a) for a in inputs]
    route = fastnorm.explain(fastnorm.batch_norm_backward, call["dy"], call["x"], *call["given"],
                             call["gamma"], axis=call["axis"], training=call["training"])
    assert route["fast_path"], route
    out, got = _batch_grad(call)
    if out is not None:
        for o, g in zip(out, got):
            assert o is None or g is o, "an out= array was not the one returned"
    with fastpath.general_path():
        _, general = _batch_grad(call)
    for name, a, b in zip(("dx", "dgamma", "dbeta"), got, general):
        assert a.dtype == b.dtype and a.shape == b.shape, name
        assert_bitwise(a, b, f"fast {name} against the general path")
    assert [None if a is None else fingerprint(a) for a in inputs] == before, "an input changed"
    _assert_grads_near_reference(got, call["dy"], call["x"], call["axes"], call["kept"],
                                 call["gamma"], "center" if call["training"] else "scale",
                                 call["stats"])


@pytest.mark.parametrize("what, kwargs", [
    ("training as a NumPy bool", dict(training=np.True_)),
    ("a keepdims gamma", dict(gamma=np.ones((1, 4, 1), np.float32))),
    ("where=", dict(where=np.ones((3, 4, 5), bool))),
])
def test_other_batch_norm_gradients_take_the_general_path(what, kwargs):
    x, dy = (np.random.default_rng(3).standard_normal((3, 4, 5)).astype(np.float32)
             for _ in range(2))
    _, mean, rstd = fastnorm.batch_norm(x, return_stats=True)
    call = dict(dict(gamma=None, training=True), **kwargs)
    gamma = call.pop("gamma")
    assert not fastnorm.explain(fastnorm.batch_norm_backward, dy, x, mean, rstd, gamma,
                                **call)["fast_path"]
    dx, dgamma, dbeta = fastnorm.batch_norm_backward(dy, x, mean, rstd, gamma, **call)
    got = (dx, dgamma.reshape(4), dbeta.reshape(4))     # (gamma's shape: a keepdims one)
    _assert_grads_near_reference(got, dy, x, (0, 2), (1,), None if gamma is None
                                 else gamma.reshape(4), "center", (mean, rstd))


@pytest.mark.parametrize("what, kwargs, exc", [
    ("axis None with a 1-d x", dict(x=np.ones(4, np.float32)), ValueError),
    ("gamma of the normalized shape", dict(gamma=np.ones((3, 5), np.float32)), ValueError),
    ("statistics of the wrong shape", dict(rstd=np.ones((1, 3, 1))), ValueError),
])
def test_bad_batch_norm_gradients_raise_alike_on_either_path(what, kwargs, exc):
    x = np.random.default_rng(4).standard_normal((3, 4, 5)).astype(np.float32)
    _, mean, rstd = fastnorm.batch_norm(x, return_stats=True)
    a = dict(dict(dy=np.ones_like(x), x=x, mean=mean, rstd=rstd, gamma=None), **kwargs)
    if a["x"].ndim == 1:
        a["dy"] = np.ones_like(a["x"])
    assert isinstance(fastpath.same_error(fastnorm.batch_norm_backward, a["dy"], a["x"],
                                          a["mean"], a["rstd"], a["gamma"]), exc)


# --------------------------------------------------------------------------
# group_norm and instance_norm

@st.composite
def fast_group_norms(draw):
    """A C-contiguous x of 2 to 4 dimensions (N, C, ...) or with the
    channels elsewhere, a number of groups that divides C, gain and bias of
    shape (C,) of any float dtype and layout or none, an eps, out= or not,
    the statistics or not."""
    ndim = draw(st.integers(2, 4))
    ch = draw(st.integers(1, ndim - 1))
    groups = draw(st.integers(1, 4))
    shape = [draw(st.integers(1, 5)) for _ in range(ndim)]
    shape[ch] = groups * draw(st.integers(1, 4))
    dtype = np.dtype(draw(st.sampled_from(FLOATS)))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    x = (rng.standard_normal(shape) * rng.uniform(0.1, 10)
         + draw(st.sampled_from([0.0, 5.0]))).astype(dtype)
    c = shape[ch]
    params = []
    for role in ("gamma", "beta"):
        p_dtype = draw(st.sampled_from([None] + FLOATS))
        values = rng.uniform(0.5, 2.0, c) if role == "gamma" else rng.standard_normal(c)
        params.append(None if p_dtype is None else _laid_out(
            values.astype(p_dtype), draw(st.sampled_from(["C", "reversed", "misaligned"]))))
    return dict(x=x, groups=groups, gamma=params[0], beta=params[1],
                channel_axis=draw(st.sampled_from([ch, ch - ndim])),
                eps=draw(st.sampled_from([1e-5, 0.0, 0.5])),
                out=draw(st.sampled_from([None, "out", "in place"])),
                stats=draw(st.booleans()))


def _group_call(call, x=None):
    x = call["x"] if x is None else x
    out = None if call["out"] is None else x if call["out"] == "in place" else np.full_like(x, 7)
    stats = call["stats"] and out is None
    return out, fastnorm.group_norm(x, call["groups"], call["gamma"], call["beta"],
                                    channel_axis=call["channel_axis"], eps=call["eps"], out=out,
                                    return_stats=stats)


@given(fast_group_norms())
def test_fast_group_norm_is_the_general_path(call):
    # GroupNorm between a network's convolutions is a small call as often
    # as not (a few images of small maps); instance_norm is its own groups.
    x = call["x"]
    before = [None if a is None else fingerprint(a) for a in (x, call["gamma"], call["beta"])]
    route = fastnorm.explain(fastnorm.group_norm, x, call["groups"], call["gamma"], call["beta"],
                             channel_axis=call["channel_axis"], eps=call["eps"])
    assert route["fast_path"], route
    if call["out"] == "in place":
        got_x, want_x = x.copy(), x.copy()
        out, got = _group_call(call, got_x)
        with fastpath.general_path():
            _, want = _group_call(call, want_x)
    else:
        out, got = _group_call(call)
        with fastpath.general_path():
            _, want = _group_call(call)
    got, want = (r if isinstance(r, tuple) else (r,) for r in (got, want))
    if out is not None:
        assert got[0] is out, "out= was not the array returned"
    for name, a, b in zip(("y", "mean", "rstd"), got, want):
        assert a.dtype == b.dtype and a.shape == b.shape, name
        assert_bitwise(a, b, f"fast {name} against the general path")
    assert [None if a is None else fingerprint(a)
            for a in (x, call["gamma"], call["beta"])] == before, "an input changed"
    g, b = (None if p is None else p.astype(np.float64) for p in (call["gamma"], call["beta"]))
    ref = ref_group_norm(x, call["groups"], call["channel_axis"], g, b, call["eps"])
    assert_close(got[0], ref[0], OUT_TOL[x.dtype] * 4 * (1.0 + np.abs(ref[0])), "y")


def test_instance_norm_takes_the_fast_path():
    x = np.random.default_rng(8).standard_normal((2, 6, 5, 5)).astype(np.float32)
    g = np.linspace(0.5, 1.5, 6).astype(np.float32)
    assert fastnorm.explain(fastnorm.instance_norm, x, g)["fast_path"]
    assert_bitwise(fastnorm.instance_norm(x, g), fastpath.general(fastnorm.instance_norm, x, g),
                   "instance_norm")


@pytest.mark.parametrize("what, change", [
    ("a Fortran-order x", lambda a: dict(a, x=np.asfortranarray(a["x"]))),
    ("a keepdims gamma", lambda a: dict(a, gamma=np.ones((1, 4, 1), np.float32))),
    ("dtype=", lambda a: dict(a, dtype=np.float64)),
    ("statistics into out=", lambda a: dict(a, out=(None, None, None), return_stats=True)),
])
def test_other_group_norms_take_the_general_path(what, change):
    x = np.random.default_rng(9).standard_normal((3, 4, 5)).astype(np.float32)
    a = change(dict(x=x, groups=2, gamma=None))
    kwargs = {k: v for k, v in a.items() if k not in ("x", "groups", "gamma")}
    assert not fastnorm.explain(fastnorm.group_norm, a["x"], a["groups"], a["gamma"],
                                **kwargs)["fast_path"]
    got = fastnorm.group_norm(a["x"], a["groups"], a["gamma"], **kwargs)
    ref = ref_group_norm(np.asarray(a["x"]), 2)[0]
    assert_close(got[0] if isinstance(got, tuple) else got, ref, 4e-5 * (1 + np.abs(ref)), "y")


@pytest.mark.parametrize("what, kwargs, exc", [
    ("groups that do not divide C", dict(num_groups=3), ValueError),
    ("channel_axis 0", dict(channel_axis=0), ValueError),
    ("a channel_axis out of range", dict(channel_axis=3), np.exceptions.AxisError),
    ("gamma of the wrong size", dict(gamma=np.ones(3, np.float32)), ValueError),
    ("a negative eps", dict(eps=-1.0), ValueError),
])
def test_bad_group_norms_raise_alike_on_either_path(what, kwargs, exc):
    x = np.random.default_rng(10).standard_normal((3, 4, 5)).astype(np.float32)
    assert isinstance(fastpath.same_error(fastnorm.group_norm, x,
                                          **dict(dict(num_groups=2), **kwargs)), exc)
    if "num_groups" not in kwargs:
        assert isinstance(fastpath.same_error(fastnorm.instance_norm, x, **kwargs), exc)


@st.composite
def fast_group_gradients(draw):
    """A group_norm gradient: fast_group_norms' x, groups and gamma, dy of
    x's dtype, the forward's statistics as returned or in float64, out=
    arrays or not."""
    call = draw(fast_group_norms())
    x = call["x"]
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    dy = rng.standard_normal(x.shape).astype(x.dtype)
    stats = fastnorm.group_norm(x, call["groups"], channel_axis=call["channel_axis"],
                                return_stats=True)[1:]
    if draw(st.booleans()):
        stats = tuple(s.astype(np.float64) for s in stats)
    return dict(call, dy=dy, stats=stats,
                out=draw(st.sampled_from([None, "all", "dx", "grads", "strided grads"])))


def _group_grad_outs(call):
    if call["out"] is None:
        return None
    x, gamma = call["x"], call["gamma"]
    c = x.shape[call["channel_axis"]]
    pdt = gamma.dtype if gamma is not None else (F64 if x.dtype == F64 else np.float32)
    dx = np.full_like(x, 7) if call["out"] in ("all", "dx") else None
    grads = [np.full(c, 7, pdt) if call["out"] in ("all", "grads")
             else np.full(2 * c, 7, pdt)[::-2] if call["out"] == "strided grads" else None
             for _ in range(2)]
    return (dx, *grads)


def _group_grad_call(call, out):
    return fastnorm.group_norm_backward(call["dy"], call["x"], *call["stats"], call["groups"],
                                        call["gamma"], channel_axis=call["channel_axis"],
                                        out=out)


@given(fast_group_gradients())
def test_fast_group_norm_backward_is_the_general_path(call):
    # group_norm's gradients in training: a small call as often as the
    # forward.
    x, dy, gamma = call["x"], call["dy"], call["gamma"]
    inputs = (dy, x, *call["stats"], gamma)
    before = [None if a is None else fingerprint(a) for a in inputs]
    out = _group_grad_outs(call)
    route = fastnorm.explain(fastnorm.group_norm_backward, dy, x, *call["stats"],
                             call["groups"], gamma, channel_axis=call["channel_axis"], out=out)
    assert route["fast_path"], route
    got = _group_grad_call(call, out)
    if out is not None:
        for o, g in zip(out, got):
            assert o is None or g is o, "an out= array was not the one returned"
    with fastpath.general_path():
        general = _group_grad_call(call, _group_grad_outs(call))
    for name, a, b in zip(("dx", "dgamma", "dbeta"), got, general):
        assert a.dtype == b.dtype and a.shape == b.shape, name
        assert_bitwise(a, b, f"fast {name} against the general path")
    assert [None if a is None else fingerprint(a) for a in inputs] == before, "an input changed"
    g = None if gamma is None else gamma.astype(np.float64)
    # The closed form with the forward's statistics as it rounded them, as
    # the kernel takes them.
    ref = ref_group_norm_grads(dy, x, call["groups"], call["channel_axis"], g,
                               stats=call["stats"])
    dt = x.dtype
    assert_close(got[0], ref["dx"], DX_TOL[dt] * ref["dx_scale"] + tiny(dt), "dx")
    for name, grad in zip(("dgamma", "dbeta"), got[1:]):
        allowed = (max(1e-12 if dt == F64 else 1e-5, OUT_TOL[grad.dtype]) * ref[name + "_scale"]
                   + tiny(grad.dtype))
        assert_close(grad, ref[name], allowed, name)


@pytest.mark.parametrize("what, change", [
    ("a Fortran-order dy", lambda a: dict(a, dy=np.asfortranarray(a["dy"]))),
    ("dy of another dtype", lambda a: dict(a, dy=a["dy"].astype(np.float64))),
    ("a keepdims gamma", lambda a: dict(a, gamma=np.ones((1, 4, 1), np.float32))),
    ("dx alone into out=", lambda a: dict(a, out=np.empty_like(a["x"]))),
    ("a Fortran-order dx into out=", lambda a: dict(
        a, out=(np.asfortranarray(np.empty_like(a["x"])), None, None))),
])
def test_other_group_norm_gradients_take_the_general_path(what, change):
    rng = np.random.default_rng(11)
    x = rng.standard_normal((3, 4, 5)).astype(np.float32)
    _, m, r = fastnorm.group_norm(x, 2, return_stats=True)
    a = change(dict(dy=rng.standard_normal(x.shape).astype(np.float32), x=x, mean=m, rstd=r,
                    gamma=None, out=None))
    args = (a["dy"], a["x"], a["mean"], a["rstd"], 2, a["gamma"])
    assert not fastnorm.explain(fastnorm.group_norm_backward, *args, out=a["out"])["fast_path"]
    got = fastnorm.group_norm_backward(*args, out=a["out"])
    ref = ref_group_norm_grads(np.asarray(a["dy"], np.float64), x, 2)
    assert_close(got[0], ref["dx"], 1e-5 * ref["dx_scale"], "dx")


@pytest.mark.parametrize("what, kwargs, exc", [
    ("groups that do not divide C", dict(num_groups=3), ValueError),
    ("channel_axis 0", dict(channel_axis=0), ValueError),
    ("statistics of another shape", dict(rstd=np.ones((3, 4, 1))), ValueError),
    ("gamma of the wrong size", dict(gamma=np.ones(3, np.float32)), ValueError),
])
def test_bad_group_norm_gradients_raise_alike_on_either_path(what, kwargs, exc):
    rng = np.random.default_rng(12)
    x = rng.standard_normal((3, 4, 5)).astype(np.float32)
    _, m, r = fastnorm.group_norm(x, 2, return_stats=True)
    a = dict(dict(dy=x.copy(), x=x, mean=m, rstd=r, num_groups=2, gamma=None), **kwargs)
    assert isinstance(fastpath.same_error(fastnorm.group_norm_backward, **a), exc)


# Spellings of one call: each takes the fast path and gives its bits.
SPELLINGS = [
    ("layer_norm", lambda f: f(X), [
        lambda f: f(X, axis=-1), lambda f: f(X, axis=1), lambda f: f(X, axis=(1,)),
        lambda f: f(X, axis=(-1,)), lambda f: f(X, eps=1e-5), lambda f: f(X, None, None),
        lambda f: f(X, out=np.empty_like(X)), lambda f: f(X, axis=np.int64(-1)),
        lambda f: f(X, axis=[1]), lambda f: f(X, eps=np.float64(1e-5))]),
    ("layer_norm over every axis", lambda f: f(X, axis=(0, 1)), [
        lambda f: f(X, axis=None), lambda f: f(X, axis=[1, 0]),
        lambda f: f(X, axis=(0, np.int64(1)))]),
    ("rms_norm", lambda f: f(X, eps=0.0), [
        lambda f: f(X, axis=(1,), eps=0), lambda f: f(X, eps=0, axis=-1)]),
    ("mean_var", lambda f: f(X, -1), [
        lambda f: f(X, axis=1), lambda f: f(X, (1,)), lambda f: f(X, axis=(-1,), ddof=0)]),
    ("batch_norm", lambda f: f(BN_X, BN_G, training=True), [
        lambda f: f(BN_X, BN_G, axis=(0, 2)), lambda f: f(BN_X, BN_G, axis=(2, 0)),
        lambda f: f(BN_X, BN_G, axis=(-1, -3), eps=1e-5)]),
    ("layer_norm_backward", lambda f: f(GRAD_DY, GRAD_X, GRAD_MEAN, GRAD_RSTD, GRAD_G), [
        lambda f: f(GRAD_DY, GRAD_X, GRAD_MEAN, GRAD_RSTD, GRAD_G, axis=(1,)),
        lambda f: f(GRAD_DY, GRAD_X, GRAD_MEAN, GRAD_RSTD, GRAD_G, axis=1),
        lambda f: f(GRAD_DY, GRAD_X, GRAD_MEAN, GRAD_RSTD, GRAD_G, axis=np.int64(-1)),
        lambda f: f(GRAD_DY, GRAD_X, GRAD_MEAN.tolist(), GRAD_RSTD, GRAD_G),
        lambda f: f(GRAD_DY, GRAD_X, GRAD_MEAN.ravel(), GRAD_RSTD.astype(np.float64), GRAD_G)]),
    ("group_norm", lambda f: f(BN_X, 2), [
        lambda f: f(BN_X, np.int64(2)), lambda f: f(BN_X, 2, channel_axis=np.int64(1)),
        lambda f: f(BN_X, 2, channel_axis=-2), lambda f: f(BN_X, 2, eps=np.float32(1e-5))]),
]


@pytest.mark.parametrize("name, plain, spellings", SPELLINGS, ids=[s[0] for s in SPELLINGS])
def test_every_spelling_of_a_call_takes_the_fast_path(name, plain, spellings):
    func = getattr(fastnorm, name.split()[0])
    want = fastpath.general(plain, func)
    for spelling in spellings:
        route = spelling(lambda *args, **kwargs: fastnorm.explain(func, *args, **kwargs))
        assert route["fast_path"], route
        got = spelling(func)
        for g, w in zip(*(r if isinstance(r, tuple) else (r,) for r in (got, want))):
            assert_bitwise(g, w, name)
