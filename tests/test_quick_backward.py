"""The quick gradient call: layer_norm_backward and rms_norm_backward over
the last axis.

``fastnorm._quick.rows_backward`` makes the gradient kernel's call after
the checks that this common case needs.  It must give the same bits as the
general path (reached with ``axis=(ndim - 1,)``, a tuple, which the quick
path never takes), values that match the closed-form float64 gradients, and
hand every other call to the general path (None), so that its conversions
and errors apply.
"""
import numpy as np
import pytest
from hypothesis import given, strategies as st

import fastnorm
import fastpath as _quick
from reference import (OUT_TOL, assert_bitwise, assert_close, fingerprint, ref_norm_grads,
                       tiny)

FLOATS = [np.float16, np.float32, np.float64]
F64 = np.dtype(np.float64)
DX_TOL = {np.dtype(np.float16): 4e-3, np.dtype(np.float32): 1e-5, F64: 1e-12}


def _laid_out(a, layout):
    """a's values: contiguous, reversed along the last axis, every other
    element of a longer array, or (1-d) one byte off alignment."""
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
def quick_gradients(draw):
    """A gradient call over the last axis: x and dy of 1 to 3 dimensions in
    any layout, the forward's statistics in its or another float dtype and
    in keepdims or kept shape, gamma of any float dtype or none, out=
    arrays or not."""
    ndim = draw(st.integers(1, 3))
    shape = tuple(draw(st.lists(st.integers(1, 5), min_size=ndim - 1, max_size=ndim - 1)))
    shape += (draw(st.integers(1, 300)),)
    dtype = np.dtype(draw(st.sampled_from(FLOATS)))
    mode = draw(st.sampled_from(["center", "rms"]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    x = (rng.standard_normal(shape) * rng.uniform(0.1, 10) + draw(st.sampled_from([0.0, 3.0])))
    x = _laid_out(x.astype(dtype), draw(st.sampled_from(["C", "F", "reversed", "every other"])))
    dy = _laid_out(rng.standard_normal(shape).astype(dtype),
                   draw(st.sampled_from(["C", "F", "reversed", "every other"])))
    g_dtype = draw(st.sampled_from([None] + FLOATS))
    gamma = None
    if g_dtype is not None:
        gamma = _laid_out(rng.uniform(0.5, 2.0, shape[-1]).astype(g_dtype),
                          draw(st.sampled_from(["C", "reversed", "every other", "misaligned"])))
    forward = fastnorm.layer_norm if mode == "center" else fastnorm.rms_norm
    stats = forward(x, return_stats=True)[1:]
    if draw(st.booleans()):
        stats = tuple(s.reshape(shape[:-1]) for s in stats)       # the kept shape
    if draw(st.booleans()):
        stats = tuple(s.astype(np.float64) for s in stats)
    n_out = 3 if mode == "center" else 2
    out = draw(st.sampled_from([None, "all", "dx", "grads"]))
    axis = draw(st.sampled_from([-1, ndim - 1]))
    return dict(dy=dy, x=x, stats=stats, gamma=gamma, mode=mode, n_out=n_out, out=out,
                axis=axis)


def _outs(call):
    """Fresh out= arrays for the call's choice (None: no out=)."""
    if call["out"] is None:
        return None
    x, gamma, n_out = call["x"], call["gamma"], call["n_out"]
    pdt = gamma.dtype if gamma is not None else (F64 if x.dtype == F64 else np.float32)
    dx = np.full_like(x, 7) if call["out"] in ("all", "dx") else None
    grads = [np.full(x.shape[-1], 7, pdt) if call["out"] in ("all", "grads") else None
             for _ in range(n_out - 1)]
    return (dx, *grads)


def _public(call, axis, out):
    if call["mode"] == "center":
        mean, rstd = call["stats"]
        return fastnorm.layer_norm_backward(call["dy"], call["x"], mean, rstd, call["gamma"],
                                            axis=axis, out=out)
    return fastnorm.rms_norm_backward(call["dy"], call["x"], call["stats"][0], call["gamma"],
                                      axis=axis, out=out)


def _quick_call(call, out):
    mean, rstd = call["stats"] if call["mode"] == "center" else (None, call["stats"][0])
    return _quick.rows_backward(call["dy"], call["x"], mean, rstd, call["gamma"],
                                call["axis"], call["mode"], out, call["n_out"])


@given(quick_gradients())
def test_quick_gradients_are_the_general_path(call):
    inputs = (call["dy"], call["x"], *call["stats"], call["gamma"])
    before = [None if a is None else fingerprint(a) for a in inputs]
    out = _outs(call)
    got = _quick_call(call, out)
    assert got is not None, "the quick path refused a call it is meant for"
    assert len(got) == call["n_out"]
    if out is not None:
        for o, g in zip(out, got):
            assert o is None or g is o, "an out= array was not the one returned"
    general = _public(call, (call["x"].ndim - 1,), _outs(call))
    for name, a, b in zip(("dx", "dgamma", "dbeta"), got, general):
        assert a.dtype == b.dtype and a.shape == b.shape, name
        assert_bitwise(a, b, f"quick {name} against the general path")
    for name, a, b in zip(("dx", "dgamma", "dbeta"), _public(call, call["axis"], None), got):
        assert_bitwise(a, b, f"public {name}")
    after = [None if a is None else fingerprint(a) for a in inputs]
    assert after == before, "an input changed"

    # Against the closed form in float64 (statistics recomputed there; the
    # forward's float32 ones are within the tolerance of float32 results).
    x, dt = call["x"], call["x"].dtype
    g = None
    if call["gamma"] is not None:          # keepdims layout
        g = call["gamma"].astype(np.float64).reshape((1,) * (x.ndim - 1) + (-1,))
    ref = ref_norm_grads(call["dy"], x, (x.ndim - 1,), (x.ndim - 1,), g, call["mode"])
    assert_close(got[0], ref["dx"], DX_TOL[dt] * ref["dx_scale"] + tiny(dt), "dx")
    ptol = 1e-12 if dt == F64 else 1e-5
    names = ("dgamma", "dbeta")[:call["n_out"] - 1]
    for name, grad in zip(names, got[1:]):
        want = ref[name].reshape(-1)
        allowed = (max(ptol, OUT_TOL[grad.dtype]) * ref[name + "_scale"].reshape(-1)
                   + tiny(grad.dtype))
        assert_close(grad, want, allowed, name)


def test_quick_gradients_with_threads():
    # Large enough for the kernels' team: the same bits with 1 and 2 threads.
    from fastnorm import _simd
    rows = _simd.kernels.parallel_min // 256 + 3
    rng = np.random.default_rng(3)
    x = rng.standard_normal((rows, 256)).astype(np.float32)
    dy = rng.standard_normal((rows, 256)).astype(np.float32)
    gamma = rng.uniform(0.5, 2, 256).astype(np.float32)
    _, mean, rstd = fastnorm.layer_norm(x, gamma, return_stats=True)
    results = []
    try:
        for threads in (1, 2):
            fastnorm.set_num_threads(threads)
            got = _quick.rows_backward(dy, x, mean, rstd, gamma, -1, "center", None, 3)
            assert got is not None
            results.append(got)
    finally:
        fastnorm.set_num_threads(None)
    for a, b in zip(*results):
        assert_bitwise(a, b, "1 thread against 2")
    general = fastnorm.layer_norm_backward(dy, x, mean, rstd, gamma, axis=(1,))
    for a, b in zip(results[0], general):
        assert_bitwise(a, b, "quick against general")


X = np.random.default_rng(7).standard_normal((4, 10)).astype(np.float32)
DY = np.random.default_rng(8).standard_normal((4, 10)).astype(np.float32)
_, MEAN, RSTD = fastnorm.layer_norm(X, return_stats=True)
_, MEAN0, RSTD0 = fastnorm.layer_norm(X, axis=0, return_stats=True)
G = np.linspace(0.5, 1.5, 10).astype(np.float32)

# Calls the quick path must leave to the general path: (what, the call's
# arguments other than X, DY, MEAN, RSTD, G, axis -1 and no out=).  Built
# anew for each call, since some write into their inputs.
GENERAL = [
    ("a list for x", lambda: dict(x=X.tolist())),
    ("float64 dy with float32 x", lambda: dict(dy=DY.astype(np.float64))),
    ("integer x and dy", lambda: dict(x=np.arange(40).reshape(4, 10),
                                      dy=np.ones((4, 10), int))),
    ("an empty x", lambda: dict(x=np.zeros((4, 0), np.float32), dy=np.zeros((4, 0), np.float32),
                                mean=np.zeros((4, 1)), rstd=np.ones((4, 1)), gamma=None)),
    ("byte-swapped x", lambda: dict(x=X.astype(">f4"))),
    ("another axis", lambda: dict(axis=0, mean=MEAN0, rstd=RSTD0, gamma=None)),
    ("a tuple axis", lambda: dict(axis=(1,))),
    ("a NumPy integer axis", lambda: dict(axis=np.int64(-1))),
    ("a list mean", lambda: dict(mean=MEAN.tolist())),
    ("integer statistics", lambda: dict(mean=np.zeros((4, 1), int), rstd=np.ones((4, 1), int))),
    ("a keepdims gamma", lambda: dict(gamma=G.reshape(1, 10))),
    ("a list gamma", lambda: dict(gamma=G.tolist())),
    ("an integer gamma", lambda: dict(gamma=np.arange(1, 11))),
    ("out=dy (in place)", lambda: _in_place("dy")),
    ("dx= a view of x", lambda: _in_place("x")),
    ("out= a bare array", lambda: dict(out=np.empty_like(X))),
    ("a dx= whose elements share addresses", lambda: dict(out=(_self_overlapping(), None, None))),
]

# ...and calls the general path refuses: the same error either way.
ERRORS = [
    ("dy of another shape", lambda: dict(dy=DY[:, :9]), ValueError),
    ("mean of the wrong shape", lambda: dict(mean=MEAN[:3]), ValueError),
    ("gamma of the wrong size", lambda: dict(gamma=G[:9]), ValueError),
    ("a complex gamma", lambda: dict(gamma=G.astype(complex)), TypeError),
    ("complex statistics", lambda: dict(rstd=RSTD.astype(complex)), TypeError),
    ("an out= tuple of two", lambda: dict(out=(np.empty_like(X), np.empty(10, np.float32))),
     ValueError),
    ("dgamma= of another dtype", lambda: dict(out=(None, np.empty(10), None)), TypeError),
    ("a read-only dx=", lambda: dict(out=(_read_only(np.empty_like(X)), None, None)), ValueError),
    ("an axis out of range", lambda: dict(axis=2), np.exceptions.AxisError),
]


def _in_place(which):
    x, dy = X.copy(), DY.copy()
    target = dy if which == "dy" else x[:, :]
    return dict(x=x, dy=dy, out=(target, None, None))


def _self_overlapping():
    """A writable (4, 10) float32 view in which rows overlap."""
    base = np.zeros(16, np.float32)
    return np.lib.stride_tricks.as_strided(base, (4, 10), (8, 4))


def _read_only(a):
    a.flags.writeable = False
    return a


def _arguments(change):
    a = dict(x=X, dy=DY, mean=MEAN, rstd=RSTD, gamma=G, axis=-1, out=None)
    a.update(change())
    return a


def _call(a):
    return fastnorm.layer_norm_backward(a["dy"], a["x"], a["mean"], a["rstd"], a["gamma"],
                                        axis=a["axis"], out=a["out"])


def _refused(a, changed, rms=True):
    """Whether the quick path leaves the call to the general path, as
    layer_norm_backward's and (with rms, unless only the mean, which it
    does not take, is what changed) as rms_norm_backward's."""
    out = a["out"]
    rms_out = out[:2] if isinstance(out, tuple) and len(out) == 3 else out
    refused = _quick.rows_backward(a["dy"], a["x"], a["mean"], a["rstd"], a["gamma"],
                                   a["axis"], "center", out, 3) is None
    if rms and set(changed) != {"mean"}:
        refused = refused and _quick.rows_backward(a["dy"], a["x"], None, a["rstd"], a["gamma"],
                                                   a["axis"], "rms", rms_out, 2) is None
    return refused


@pytest.mark.parametrize("what, change", GENERAL, ids=[c[0] for c in GENERAL])
def test_other_gradient_calls_take_the_general_path(what, change, monkeypatch):
    assert _refused(_arguments(change), change())
    got = _call(_arguments(change))
    # The same call with the quick path out of the way: the same results.
    monkeypatch.setattr(fastnorm._simd.kernels, "fast_norm_backward", lambda *args: None)
    want = _call(_arguments(change))
    for name, a, b in zip(("dx", "dgamma", "dbeta"), got, want):
        assert_bitwise(np.asarray(a), np.asarray(b), name)


def test_dask_gradients_take_the_dask_path():
    da = pytest.importorskip("dask.array")
    x = da.from_array(X, chunks=(2, 10))
    assert _quick.rows_backward(DY, x, MEAN, RSTD, G, -1, "center", None, 3) is None
    got = fastnorm.layer_norm_backward(DY, x, MEAN, RSTD, G)
    assert all(isinstance(g, da.Array) for g in got)
    ref = ref_norm_grads(DY, X, (1,), (1,), G.astype(np.float64).reshape(1, 10))
    assert_close(np.asarray(got[0]), ref["dx"], 1e-5 * ref["dx_scale"] + 1e-30, "dx")


@pytest.mark.parametrize("what, change, exc", ERRORS, ids=[c[0] for c in ERRORS])
def test_refused_gradient_calls_raise_as_the_general_path(what, change, exc):
    a = _arguments(change)
    assert _refused(a, change(), rms=False)
    with pytest.raises(exc):
        _call(a)
