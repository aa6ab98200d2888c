"""The quick batch_norm call: every axis but 1 (axis None, or 0 of a
matrix), y alone.

``fastnorm._quick.batch_norm_call`` makes the general path's kernel call
and running update after the checks that this common case needs.  It must
give the same bits as the general path (reached here with the reduced axes
as a tuple, which the quick path never takes), the same updated running
statistics, values that match a plain float64 reference, and leave every
other call to the general path (None), so that its conversions and errors
apply.
"""
import numpy as np
import pytest
from hypothesis import given, strategies as st

import fastnorm
import fastpath as _quick
from reference import (OUT_TOL, assert_bitwise, assert_close, fingerprint, ref_layer_norm,
                       ref_running_update)

FLOATS = [np.float16, np.float32, np.float64]


def _laid_out(a, layout):
    if layout == "F":
        return np.asfortranarray(a)
    if layout == "reversed":
        return a[..., ::-1].copy()[..., ::-1]
    if layout == "every other":
        return np.repeat(a, 2, axis=-1)[..., ::2]
    return a


@st.composite
def quick_batch_norms(draw):
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
    x = _laid_out(x.astype(dtype), draw(st.sampled_from(["C", "F", "reversed", "every other"])))
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


@given(quick_batch_norms())
def test_quick_batch_norm_is_the_general_path(call):
    x, gamma, beta = call["x"], call["gamma"], call["beta"]
    before = [None if a is None else fingerprint(a) for a in (x, gamma, beta)]
    quick_running, general_running = _copies(call["running"]), _copies(call["running"])
    out = np.full_like(x, 7) if call["out"] else None
    y = _quick.batch_norm_call(x, gamma, beta, *quick_running, call["training"],
                               call["momentum"], call["eps"], call["axis"], out)
    assert y is not None, "the quick path refused a call it is meant for"
    assert out is None or y is out
    assert y.dtype == x.dtype and y.shape == x.shape
    axes = (0,) + tuple(range(2, x.ndim))
    general = fastnorm.batch_norm(x, gamma, beta, *general_running, training=call["training"],
                                  momentum=call["momentum"], eps=call["eps"], axis=axes)
    assert_bitwise(y, general, "quick y against the general path")
    for r_quick, r_general in zip(quick_running, general_running):
        if r_quick is not None:
            assert_bitwise(r_quick, r_general, "running statistics")
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
            for got, w in zip(quick_running, want):
                assert_close(got, w, 4 * OUT_TOL[got.dtype] * (1 + np.abs(w)), "running")
    else:
        rm, rv = (r.astype(np.float64).reshape(keep) for r in call["running"])
        ref = (x.astype(np.float64) - rm) / np.sqrt(rv + call["eps"])
        ref = ref if g is None else ref * g
        ref = ref if b is None else ref + b
    assert_close(y, ref, 4 * tol * (1 + np.abs(ref)), "y")


def test_quick_batch_norm_with_threads():
    # Large enough for the kernels' team: the same bits with 1 and 2 threads.
    rng = np.random.default_rng(4)
    x = rng.standard_normal((8, 16, 32, 32)).astype(np.float32)
    gamma, beta = rng.uniform(0.5, 2, 16).astype(np.float32), rng.standard_normal(16)
    results = []
    try:
        for threads in (1, 2):
            fastnorm.set_num_threads(threads)
            running = (np.zeros(16, np.float32), np.ones(16, np.float32))
            y = _quick.batch_norm_call(x, gamma, beta, *running, True, 0.1, 1e-5, None, None)
            assert y is not None
            results.append((y, *running))
    finally:
        fastnorm.set_num_threads(None)
    for a, b in zip(*results):
        assert_bitwise(a, b, "1 thread against 2")


X = np.random.default_rng(7).standard_normal((6, 4, 3)).astype(np.float32)
G = np.linspace(0.5, 1.5, 4).astype(np.float32)
RM, RV = np.zeros(4, np.float32), np.ones(4, np.float32)


def _in_place():
    x = X.copy()
    return dict(x=x, out=x)


# Calls the quick path must leave to the general path: changes to (X, G,
# beta None, RM, RV, training, momentum 0.1, eps 1e-5, axis None, out None).
GENERAL = [
    ("a list for x", lambda: dict(x=X.tolist())),
    ("integer x", lambda: dict(x=np.arange(72).reshape(6, 4, 3))),
    ("byte-swapped x", lambda: dict(x=X.astype(">f4"))),
    ("a tuple axis", lambda: dict(axis=(0, 2))),
    ("channels last", lambda: dict(axis=(0, 1), gamma=np.ones(3), rm=None, rv=None)),
    ("axis 0 of three dimensions", lambda: dict(axis=0, gamma=None, rm=None, rv=None)),
    ("a keepdims gamma", lambda: dict(gamma=G.reshape(1, 4, 1))),
    ("a list gamma", lambda: dict(gamma=G.tolist())),
    ("byte-swapped running statistics", lambda: dict(rm=RM.astype(">f4"), rv=RV.astype(">f4"))),
    ("keepdims running statistics", lambda: dict(rm=RM.reshape(1, 4, 1),
                                                 rv=RV.reshape(1, 4, 1))),
    ("an integer momentum", lambda: dict(momentum=0)),
    ("an integer eps", lambda: dict(eps=0)),
    ("out=x (in place)", _in_place),
    ("a NumPy bool training", lambda: dict(training=np.bool_(True))),
    ("an out= whose elements share addresses", lambda: dict(out=_self_overlapping())),
]

ERRORS = [
    ("x of one dimension", lambda: dict(x=X[:, 0, 0], gamma=None, rm=None, rv=None), ValueError),
    ("one value per channel", lambda: dict(x=X[:1, :, :1]), ValueError),
    ("eval without running statistics", lambda: dict(training=False, rm=None, rv=None),
     ValueError),
    ("one running buffer for both", lambda: dict(rv="rm"), ValueError),
    ("running_mean alone", lambda: dict(rv=None), ValueError),
    ("gamma of the wrong size", lambda: dict(gamma=G[:3]), ValueError),
    ("a read-only running_var", lambda: dict(rv=_read_only(RV.copy())), ValueError),
    ("a negative eps", lambda: dict(eps=-1.0), ValueError),
    ("out of another dtype", lambda: dict(out=np.empty(X.shape, np.float64)), TypeError),
    ("a NaN momentum", lambda: dict(momentum=float("nan")), ValueError),
]


def _self_overlapping():
    """A writable view of X's shape in which the batch entries overlap."""
    base = np.zeros(24, np.float32)
    return np.lib.stride_tricks.as_strided(base, X.shape, (8, 12, 4))


def _read_only(a):
    a.flags.writeable = False
    return a


def _arguments(change):
    a = dict(x=X, gamma=G, beta=None, rm=RM.copy(), rv=RV.copy(), training=True,
             momentum=0.1, eps=1e-5, axis=None, out=None)
    a.update(change())
    if isinstance(a["rv"], str):
        a["rv"] = a["rm"]
    return a


def _quick_refuses(a):
    return _quick.batch_norm_call(a["x"], a["gamma"], a["beta"], a["rm"], a["rv"],
                                  a["training"], a["momentum"], a["eps"], a["axis"],
                                  a["out"]) is None


def _call(a):
    return fastnorm.batch_norm(a["x"], a["gamma"], a["beta"], a["rm"], a["rv"],
                               training=a["training"], momentum=a["momentum"], eps=a["eps"],
                               axis=a["axis"], out=a["out"])


@pytest.mark.parametrize("what, change", GENERAL, ids=[c[0] for c in GENERAL])
def test_other_batch_norm_calls_take_the_general_path(what, change, monkeypatch):
    assert _quick_refuses(_arguments(change))
    got = _arguments(change)
    y = _call(got)
    # The same call with the quick path out of the way: the same results.
    monkeypatch.setattr(fastnorm._simd.kernels, "fast_batch_norm", lambda *args: None)
    want = _arguments(change)
    assert_bitwise(y, _call(want), "y")
    for name in ("rm", "rv"):
        if got[name] is not None:
            assert_bitwise(got[name], want[name], name)


@pytest.mark.parametrize("what, change, exc", ERRORS, ids=[c[0] for c in ERRORS])
def test_refused_batch_norm_calls_raise_as_the_general_path(what, change, exc):
    a = _arguments(change)
    assert _quick_refuses(a)
    with pytest.raises(exc):
        _call(a)


def test_dask_batch_norm_takes_the_dask_path():
    da = pytest.importorskip("dask.array")
    x = da.from_array(X, chunks=(3, 4, 3))
    assert _quick.batch_norm_call(x, G, None, None, None, True, 0.1, 1e-5, None, None) is None
    y = fastnorm.batch_norm(x, G)
    assert isinstance(y, da.Array)
    ref = ref_layer_norm(X, (0, 2), G.astype(np.float64).reshape(1, 4, 1))[0]
    assert_close(np.asarray(y), ref, 4e-5 * (1 + np.abs(ref)), "y")
