"""The quick call: layer_norm and rms_norm over the last axis, y alone.

``fastnorm._quick.last_axis`` makes the kernel call of the commonest call
after a few checks, skipping the general argument layer.  It must give the
same bits as the general path (reached here with ``axis=(ndim - 1,)``, a
tuple, which the quick path never takes), values that match the plain
float64 reference, and hand every other call to the general path: None,
whatever the argument that disqualifies it, so that the general path's
conversions and errors apply.
"""
import numpy as np
import pytest
from hypothesis import given, strategies as st

import fastnorm
from fastnorm import _simd
import fastpath as _quick
from reference import (OUT_TOL, assert_bitwise, assert_close, fingerprint, ref_layer_norm,
                       ref_mean_var, ref_rms_norm)

FLOATS = [np.float16, np.float32, np.float64]


@st.composite
def quick_calls(draw):
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


def test_row_f64_widens_float16_and_float32(simd_level):
    # The quick path's widening of gain and bias, against NumPy's.
    rng = np.random.default_rng(11)
    for dtype in (np.float16, np.float32):
        for n, ndim in ((1, 1), (7, 2), (768, 4)):
            p = (rng.standard_normal(n) * 100).astype(dtype)
            for layout in ("C", "reversed", "every other"):
                q = _laid_out(p, layout)
                w = _simd.kernels.row_f64(q, ndim)
                assert w.shape == (1,) * (ndim - 1) + (n,), w.shape
                assert w.dtype == np.float64 and w.flags.c_contiguous
                assert_bitwise(w.ravel(), q.astype(np.float64), f"{dtype.__name__} {layout}")
    for bad, ndim in ((np.ones(3), 1), (np.ones((2, 3), np.float32), 2),
                      (np.ones(3, np.float32), 0), (np.ones(3, np.float32), 65)):
        with pytest.raises(ValueError):
            _simd.kernels.row_f64(bad, ndim)


def _ref_gamma(p):
    return None if p is None else p.astype(np.float64)


@given(quick_calls())
def test_quick_layer_norm_is_the_general_path(call):
    x, axis, gamma, beta, eps = call
    before = [fingerprint(a) for a in (x, gamma, beta)]
    y = _quick.last_axis(x, axis, "center", eps, gamma, beta)
    assert y is not None, "the quick path refused a call it is meant for"
    assert y.dtype == x.dtype and y.shape == x.shape
    general = fastnorm.layer_norm(x, gamma, beta, axis=(x.ndim - 1,), eps=eps)
    assert_bitwise(y, general, "quick y against the general path")
    assert_bitwise(fastnorm.layer_norm(x, gamma, beta, axis=axis, eps=eps), y, "layer_norm")
    ref = ref_layer_norm(x, (x.ndim - 1,), _ref_gamma(gamma), _ref_gamma(beta), eps=eps)[0]
    assert_close(y, ref, OUT_TOL[x.dtype] * (1.0 + np.abs(ref)) * 4, "y")
    assert [fingerprint(a) for a in (x, gamma, beta)] == before, "an input changed"


@given(quick_calls())
def test_quick_rms_norm_is_the_general_path(call):
    x, axis, gamma, _, eps = call
    before = [fingerprint(a) for a in (x, gamma)]
    y = _quick.last_axis(x, axis, "rms", eps, gamma, None)
    assert y is not None, "the quick path refused a call it is meant for"
    general = fastnorm.rms_norm(x, gamma, axis=(x.ndim - 1,), eps=eps)
    assert_bitwise(y, general, "quick y against the general path")
    assert_bitwise(fastnorm.rms_norm(x, gamma, axis=axis, eps=eps), y, "rms_norm")
    ref = ref_rms_norm(x, (x.ndim - 1,), _ref_gamma(gamma), eps=eps)[0]
    assert_close(y, ref, OUT_TOL[x.dtype] * (1.0 + np.abs(ref)) * 4, "y")
    assert [fingerprint(a) for a in (x, gamma)] == before, "an input changed"


def test_quick_path_on_every_simd_level(simd_level):
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((32, 768)) + 50).astype(np.float32)
    gamma, beta = rng.uniform(0.5, 2, 768).astype(np.float32), rng.standard_normal(768)
    y = _quick.last_axis(x, -1, "center", 1e-5, gamma, beta)
    assert_bitwise(y, fastnorm.layer_norm(x, gamma, beta, axis=(1,)), "y")
    ref = ref_layer_norm(x, (1,), gamma.astype(np.float64), beta)[0]
    assert_close(y, ref, 1e-5 * (1.0 + np.abs(ref)) * 4, "y")


@pytest.mark.parametrize("threads", [1, 2])
def test_quick_path_large_enough_for_threads(threads):
    # At or above the kernels' parallel size the quick path asks for the
    # team; results do not depend on it.
    rows = _simd.kernels.parallel_min // 256 + 3
    x = np.random.default_rng(6).standard_normal((rows, 256)).astype(np.float32) + 7
    fastnorm.set_num_threads(threads)
    y = _quick.last_axis(x, -1, "center", 1e-5, None, None)
    fastnorm.set_num_threads(1)
    assert_bitwise(y, fastnorm.layer_norm(x, axis=(1,)), "y")
    assert_close(y, ref_layer_norm(x, (1,))[0], 4e-5, "y")


X = np.random.default_rng(7).standard_normal((4, 10)).astype(np.float32)
G = np.linspace(0.5, 1.5, 10)
# X's values one byte past an aligned address.
MISALIGNED = np.frombuffer(b"\0" + X.tobytes(), np.float32, count=X.size, offset=1).reshape(4, 10)

# Calls the quick path must leave to the general path: (what, x, axis, eps,
# gamma, beta).  Each is then run through layer_norm and rms_norm.
GENERAL = [
    ("a list for x", X.tolist(), -1, 1e-5, None, None),
    ("integer x", np.arange(40).reshape(4, 10), -1, 1e-5, None, None),
    ("a 0-d x", np.float64(3.0), -1, 1e-5, None, None),
    ("an empty x", np.zeros((4, 0), np.float32), -1, 1e-5, None, None),
    ("an ndarray subclass", np.ma.masked_array(X), -1, 1e-5, None, None),
    ("byte-swapped x", X.astype(">f4"), -1, 1e-5, None, None),
    ("misaligned x", MISALIGNED, -1, 1e-5, None, None),
    ("another axis", X, 0, 1e-5, None, None),
    ("a NumPy integer axis", X, np.int64(-1), 1e-5, None, None),
    ("a tuple axis", X, (1,), 1e-5, None, None),
    ("axis None", X, None, 1e-5, None, None),
    ("an integer eps", X, -1, 0, None, None),
    ("a NumPy float eps", X, -1, np.float64(1e-5), None, None),
    ("a list gamma", X, -1, 1e-5, G.tolist(), None),
    ("an integer gamma", X, -1, 1e-5, np.arange(1, 11), None),
    ("a keepdims gamma", X, -1, 1e-5, G.reshape(1, 10), None),
    ("a gamma of shape (1, 1)", X, -1, 1e-5, np.full((1, 1), 2.0), None),
]

# ...and calls the general path refuses: the same error either way.
ERRORS = [
    ("a negative eps", X, -1, -1.0, None, None, ValueError),
    ("a NaN eps", X, -1, float("nan"), None, None, ValueError),
    ("an infinite eps", X, -1, float("inf"), None, None, ValueError),
    ("gamma of the wrong size", X, -1, 1e-5, np.ones(9), None, ValueError),
    ("beta of the wrong size", X, -1, 1e-5, None, np.ones(11, np.float32), ValueError),
    ("a gamma per slice", X, -1, 1e-5, np.ones((4, 1)), None, ValueError),
    ("a complex gamma", X, -1, 1e-5, np.ones(10, complex), None, TypeError),
    ("an axis out of range", X, 2, 1e-5, None, None, np.exceptions.AxisError),
    ("a string x", np.array(["a", "b"]), -1, 1e-5, None, None, TypeError),
]


@pytest.mark.parametrize("what, x, axis, eps, gamma, beta", GENERAL, ids=[c[0] for c in GENERAL])
def test_other_calls_take_the_general_path(what, x, axis, eps, gamma, beta):
    assert _quick.last_axis(x, axis, "center", eps, gamma, beta) is None
    assert _quick.last_axis(x, axis, "rms", eps, gamma, None) is None
    xa = np.asarray(x, dtype=np.float64) if np.asarray(x).dtype.kind in "iu" else np.asarray(x)
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
def test_bad_calls_get_the_general_errors(what, x, axis, eps, gamma, beta, error):
    assert _quick.last_axis(x, axis, "center", eps, gamma, beta) is None
    with pytest.raises(error):
        fastnorm.layer_norm(x, gamma, beta, axis=axis, eps=eps)
    if beta is None:
        with pytest.raises(error):
            fastnorm.rms_norm(x, gamma, axis=axis, eps=eps)


@given(quick_calls())
def test_quick_path_into_out(call):
    # out= of x's shape and dtype, C-contiguous and apart from x: written
    # directly, the same bits as the general path into such an out (the
    # layout of y takes part in the plan: a fresh y of an F-order x is F
    # order); in place (out=x) too.
    x, axis, gamma, beta, eps = call
    before = [fingerprint(a) for a in (x, gamma, beta)]
    general = np.empty(x.shape, x.dtype)
    fastnorm.layer_norm(x, gamma, beta, axis=(x.ndim - 1,), eps=eps, out=general)
    out = np.full(x.shape, np.nan, x.dtype)
    assert _quick.last_axis(x, axis, "center", eps, gamma, beta, out) is out
    assert_bitwise(out, general, "quick out= against the general path")
    assert [fingerprint(a) for a in (x, gamma, beta)] == before, "an input changed"
    inplace = np.array(x, order="C")
    expected = fastnorm.rms_norm(inplace, gamma, axis=(x.ndim - 1,), eps=eps)
    assert _quick.last_axis(inplace, axis, "rms", eps, gamma, None, inplace) is inplace
    assert_bitwise(inplace, expected, "out=x")


@given(quick_calls(), st.sampled_from([0, 1]), st.booleans())
def test_quick_mean_var_is_the_general_path(call, ddof, keepdims):
    x, axis, _, _, _ = call
    if x.shape[-1] <= ddof:
        x = np.concatenate([x, x], axis=-1)
    before = fingerprint(x)
    quick = _quick.mean_var_last_axis(x, axis, ddof, keepdims)
    assert quick is not None, "the quick path refused a call it is meant for"
    general = fastnorm.mean_var(x, axis=(x.ndim - 1,), ddof=ddof, keepdims=keepdims)
    for q, g, what in zip(quick, general, ("mean", "var")):
        assert type(q) is type(g), what
        assert_bitwise(q, g, f"quick {what} against the general path")
    rmean, rvar, _ = ref_mean_var(x, (x.ndim - 1,), ddof=ddof)
    if not keepdims:
        rmean, rvar = rmean[..., 0], rvar[..., 0]
    tol = OUT_TOL[x.dtype] * 4
    assert_close(quick[0], rmean, tol * (1.0 + np.abs(rmean)), "mean")
    assert_close(quick[1], rvar, tol * np.abs(rvar) + 1e-30, "var")
    assert fingerprint(x) == before, "x changed"


@pytest.mark.parametrize("what, kwargs", [
    ("another axis", dict(axis=0)),
    ("axis None", dict(axis=None)),
    ("a float ddof", dict(axis=-1, ddof=1.0)),
    ("ddof of the whole row", dict(axis=-1, ddof=10)),
    ("a negative ddof", dict(axis=-1, ddof=-1)),
    ("an integer keepdims", dict(axis=-1, keepdims=1)),
], ids=lambda v: v if isinstance(v, str) else "")
def test_quick_mean_var_leaves_other_calls_to_the_general_path(what, kwargs):
    args = dict(axis=None, ddof=0, keepdims=False) | kwargs
    assert _quick.mean_var_last_axis(X, args["axis"], args["ddof"], args["keepdims"]) is None
    axes = tuple(range(X.ndim)) if args["axis"] is None else (args["axis"] % X.ndim,)
    rmean, rvar, _ = ref_mean_var(X, axes, ddof=int(args["ddof"]))
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
def test_quick_mean_var_leaves_other_inputs_to_the_general_path(what, x, ddof):
    assert _quick.mean_var_last_axis(x, -1, ddof, False) is None, what


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("keepdims", [False, True])
def test_quick_mean_var_large_enough_for_threads(threads, dtype, keepdims):
    # At or above the kernels' parallel size the quick path asks for the
    # team; results do not depend on it.
    rows = _simd.kernels.parallel_min // 256 + 3
    x = (np.random.default_rng(8).standard_normal((rows, 256)) * 3 + 1e3).astype(dtype)
    fastnorm.set_num_threads(threads)
    try:
        quick = _quick.mean_var_last_axis(x, -1, 1, keepdims)
    finally:
        fastnorm.set_num_threads(None)
    general = fastnorm.mean_var(x, axis=(1,), ddof=1, keepdims=keepdims)
    for q, g, name in zip(quick, general, ("mean", "var")):
        assert q.dtype == x.dtype and q.shape == g.shape, name
        assert_bitwise(q, g, name)
    rmean, rvar, _ = ref_mean_var(x, (1,), ddof=1)
    if not keepdims:
        rmean, rvar = rmean[:, 0], rvar[:, 0]
    tol = OUT_TOL[x.dtype] * 4
    assert_close(quick[0], rmean, tol * (1.0 + np.abs(rmean)), "mean")
    assert_close(quick[1], rvar, tol * np.abs(rvar), "var")


def _overlapping_out():
    """out= arrays the quick path must leave to the general path, with the
    x and gamma each goes with: (what, x, gamma, out)."""
    rng = np.random.default_rng(9)
    x = rng.standard_normal((6, 10))
    buf = rng.standard_normal(70)
    shifted = buf[:60].reshape(6, 10), buf[10:].reshape(6, 10)   # x one row on
    shared = rng.uniform(0.5, 2.0, 70)
    return [
        ("out overlapping x", shifted[0], None, shifted[1]),
        ("a Fortran-order out", x, None, np.asfortranarray(np.empty((6, 10)))),
        ("an out of another dtype", x, None, np.empty((6, 10), np.float32)),
        ("a read-only out", x, None, np.frombuffer(bytes(480)).reshape(6, 10)),
        ("an out of another shape", x, None, np.empty((6, 11))),
        ("a list out", x, None, [0.0] * 60),
    ]


def test_quick_path_out_holding_gamma():
    # gamma is widened into an array of its own before y is written, so an
    # out= over gamma's memory takes the fast path, with the general
    # path's bits.
    rng = np.random.default_rng(9)
    x = rng.standard_normal((6, 10))
    for part in (slice(0, 10), slice(55, 65)):
        shared = rng.uniform(0.5, 2.0, 70)
        gamma = shared[part]
        want = fastnorm.layer_norm(x, gamma.copy(), axis=(1,))
        out = shared[:60].reshape(6, 10)
        assert _quick.last_axis(x, -1, "center", 1e-5, gamma, None, out) is out
        assert_bitwise(out, want, f"out over gamma[{part}]")


@pytest.mark.parametrize("what, x, gamma, out", _overlapping_out(),
                         ids=[c[0] for c in _overlapping_out()])
def test_quick_path_leaves_other_outs_to_the_general_path(what, x, gamma, out):
    assert _quick.last_axis(x, -1, "center", 1e-5, gamma, None, out) is None
    if isinstance(out, np.ndarray) and out.dtype == x.dtype and out.shape == x.shape \
            and out.flags.writeable:
        g = None if gamma is None else gamma.copy()
        ref = ref_layer_norm(x.copy(), (1,), g, None)[0]
        assert fastnorm.layer_norm(x, gamma, out=out) is out
        assert_close(out, ref, 1e-12 * (1.0 + np.abs(ref)), what)
    else:
        with pytest.raises((TypeError, ValueError)):
            fastnorm.layer_norm(x, gamma, out=out)


def test_quick_path_does_not_take_out_dtype_or_stats():
    # layer_norm and rms_norm ask the quick path only for y alone in x's
    # dtype: these calls must still do what they say.
    y = np.full_like(X, np.nan)
    assert fastnorm.layer_norm(X, out=y) is y
    assert_close(y, ref_layer_norm(X, (1,))[0], 4e-5, "out=")
    assert fastnorm.layer_norm(X, dtype=np.float64).dtype == np.float64
    y, mean, rstd = fastnorm.layer_norm(X, return_stats=True)
    assert mean.shape == (4, 1) and rstd.shape == (4, 1)
    y, rstd = fastnorm.rms_norm(X, return_stats=True)
    assert rstd.shape == (4, 1)


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("dtype", FLOATS)
def test_quick_rows_in_c_keep_x_layout_and_bound(order, dtype):
    # The fast path writes y in x's memory order, as np.empty_like would,
    # on either side of the kernels' parallel size, and into out=.
    k = _simd.kernels
    rng = np.random.default_rng(9)
    x = np.asarray(rng.standard_normal((6, 50)) + 3, dtype=dtype, order=order)
    g = rng.uniform(0.5, 2, 50).astype(dtype)[::-1]
    y = _quick.last_axis(x, -1, "center", 1e-5, g, None)
    assert y is not None and y.strides == np.empty_like(x).strides
    assert_bitwise(y, fastnorm.layer_norm(x, g, axis=(1,)), "fast path")
    big = np.ones((k.parallel_min // 64, 64), dtype)
    for a in (big, big[:-1]):
        got = _quick.last_axis(a, -1, "rms", 1e-5, None, None)
        assert got is not None
        assert_bitwise(got, fastnorm.rms_norm(a, axis=(1,)), "fast path, either side")
    if order == "C":
        out = np.empty_like(x)
        assert _quick.last_axis(x, -1, "center", 1e-5, g, None, out) is out
        assert_bitwise(out, y, "into out=")
