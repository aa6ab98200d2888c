"""Every route through the kernels, one case each: a call that
fastnorm.explain must say takes a given pattern and schedule (slices with
rows, lanes, whole, turns or split; images with images or channels;
columns with tiles), for the forward calls and the gradients, and the
flags that change the code taken (float32_pass, rows_pass, streams,
descending, in_cache, threads 1 or 2, fast_path).  Each case asserts that

1. the route is taken (explain gives it),
2. the result is right (the float64 reference of reference.py), and
3. the bits are those of the same call on the other thread count (1 or 2,
   which for a split slice is another schedule) and, where a case names
   one, of a partner call that takes another route (the general path, an
   out= written another way, y with its statistics).

The edges of each route (lengths, alignments, bounds, values float32 cannot
hold) are in test_routes_slices.py, test_routes_images.py,
test_routes_columns.py, test_routes_gradients.py and test_routes_output.py.
"""
import contextlib
import zlib
from dataclasses import dataclass, field

import numpy as np
import pytest

import fastnorm
from reference import (OUT_TOL, assert_bitwise, assert_close, expand_param, ref_group_norm,
                       ref_group_norm_grads, ref_layer_norm, ref_mean_var, ref_norm_grads,
                       ref_rms_norm, ref_weight_norm, tiny)
import fastpath
from routes import assert_route

F16, F32, F64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)
GRAD_TOL = {F64: 1e-12, F32: 1e-5, F16: 4e-3}


def _rng(name):
    return np.random.default_rng(zlib.crc32(name.encode()))


def _x(name, shape, dtype, offset=3.0):
    rng = _rng(name)
    return (offset + rng.standard_normal(shape) * rng.uniform(0.5, 2.0)).astype(dtype)


def _y_tol(ref, dtype):
    return 4 * OUT_TOL[np.dtype(dtype)] * (1.0 + np.abs(ref))


@dataclass
class Call:
    """A call and what its results must be: want holds (expected, allowed)
    for the first len(want) results (the rest are not compared)."""
    func: object
    args: tuple
    kw: dict
    want: list = field(default_factory=list)
    general: bool = False   # on the general path (a fast path call's partner)

    def _path(self):
        return fastpath.general_path() if self.general else contextlib.nullcontext()

    def run(self):
        with self._path():
            res = self.func(*self.args, **self.kw)
        return list(res) if isinstance(res, tuple) else [res]

    def explain(self):
        with self._path():
            return fastnorm.explain(self.func, *self.args, **self.kw)


# --------------------------------------------------------------------------
# forward calls and their references

def layer(name, shape, dtype, axis=-1, params=True, **kw):
    x = _x(name, shape, dtype)
    axes = tuple(np.atleast_1d(axis) % x.ndim)
    along = tuple(x.shape[i] for i in axes)
    rng = _rng(name + " params")
    g = rng.uniform(0.5, 2.0, along) if params else None
    b = rng.standard_normal(along) if params else None
    gk, bk = expand_param(g, x.shape, axes), expand_param(b, x.shape, axes)
    ref = ref_layer_norm(x, axes, gk, bk)[0]
    return Call(fastnorm.layer_norm, (x, g, b), dict(axis=axis, **kw), [(ref, _y_tol(ref, dtype))])


def rms(name, shape, dtype, axis=-1, **kw):
    x = _x(name, shape, dtype)
    axes = tuple(np.atleast_1d(axis) % x.ndim)
    g = _rng(name + " params").uniform(0.5, 2.0, tuple(x.shape[i] for i in axes))
    ref = ref_rms_norm(x, axes, expand_param(g, x.shape, axes))[0]
    return Call(fastnorm.rms_norm, (x, g), dict(axis=axis, **kw), [(ref, _y_tol(ref, dtype))])


def mean_var(name, shape, dtype, axis):
    x = _x(name, shape, dtype)
    axes = tuple(np.atleast_1d(axis) % x.ndim)
    mean, var, spread = ref_mean_var(x, axes)
    shape = np.mean(x, axis=axis).shape
    tol = OUT_TOL[np.dtype(dtype)] * 4
    return Call(fastnorm.mean_var, (x,), dict(axis=axis),
                [(mean.reshape(shape), (tol * (np.abs(mean) + spread)).reshape(shape)),
                 (var.reshape(shape), (tol * (var + spread**2)).reshape(shape))])


def batch(name, shape, dtype, axis=None, training=True, **kw):
    x = _x(name, shape, dtype)
    axes = tuple(i for i in range(x.ndim) if i != 1) if axis is None else axis
    kept = tuple(i for i in range(x.ndim) if i not in axes)
    named = tuple(x.shape[i] for i in kept)
    rng = _rng(name + " params")
    g, b = rng.uniform(0.5, 2.0, named), rng.standard_normal(named)
    rm, rv = 3.0 + rng.standard_normal(named), rng.uniform(0.5, 2.0, named)
    gk, bk = expand_param(g, x.shape, kept), expand_param(b, x.shape, kept)
    if training:
        ref = ref_layer_norm(x, axes, gk, bk)[0]
    else:
        rmk, rvk = expand_param(rm, x.shape, kept), expand_param(rv, x.shape, kept)
        ref = (x.astype(np.float64) - rmk) / np.sqrt(rvk + 1e-5) * gk + bk
    # (the running statistics are copies: training updates them)
    args = (x, g, b) if training else (x, g, b, rm.copy(), rv.copy())
    return Call(fastnorm.batch_norm, args, dict(axis=axis, training=training, **kw),
                [(ref, _y_tol(ref, dtype))])


def group(name, shape, dtype, groups):
    x = _x(name, shape, dtype)
    rng = _rng(name + " params")
    g, b = rng.uniform(0.5, 2.0, shape[1]), rng.standard_normal(shape[1])
    ref = ref_group_norm(x, groups, 1, g, b)[0]
    return Call(fastnorm.group_norm, (x, groups, g, b), {}, [(ref, _y_tol(ref, dtype))])


def instance(name, shape, dtype):
    c = group(name, shape, dtype, shape[1])
    return Call(fastnorm.instance_norm, (c.args[0], *c.args[2:]), {}, c.want)


def weight_norm(name, shape, dtype):
    v = _x(name, shape, dtype)
    axes = tuple(range(1, v.ndim))
    ref = ref_weight_norm(v, axes)[0]
    return Call(fastnorm.weight_norm, (v,), {}, [(ref, _y_tol(ref, dtype))])


def weight_standardize(name, shape, dtype):
    w = _x(name, shape, dtype)
    ref = ref_layer_norm(w, tuple(range(1, w.ndim)))[0]
    return Call(fastnorm.weight_standardize, (w,), {}, [(ref, _y_tol(ref, dtype))])


# --------------------------------------------------------------------------
# gradients and their references (the closed form in float64)

def _grad_want(ref, dx_dtype, param_shape):
    tol = GRAD_TOL[np.dtype(dx_dtype)]
    ptol = 1e-12 if np.dtype(dx_dtype) == F64 else 1e-5
    want = [(ref["dx"], tol * ref["dx_scale"] + tiny(dx_dtype))]
    for k in ("dgamma", "dbeta"):
        want.append((ref[k].reshape(param_shape),
                     ptol * ref[k + "_scale"].reshape(param_shape) + 1e-300))
    return want


def grad(name, kind, shape, dtype, axis=-1, **kw):
    """layer_norm_backward ('layer'), rms_norm_backward ('rms') or
    batch_norm_backward ('batch', 'batch_eval') on the forward's statistics."""
    x = _x(name, shape, dtype)
    dy = _rng(name + " dy").standard_normal(shape).astype(dtype)
    batch_kind = kind.startswith("batch")
    axes = tuple(np.atleast_1d(axis) % x.ndim)
    along = tuple(i for i in range(x.ndim) if i not in axes) if batch_kind else axes
    named = tuple(shape[i] for i in along)
    g = _rng(name + " params").uniform(0.5, 2.0, named)
    gk = expand_param(g, shape, along)
    if kind == "layer":
        _, mean, rstd = fastnorm.layer_norm(x, g, axis=axis, return_stats=True)
        call = Call(fastnorm.layer_norm_backward, (dy, x, mean, rstd, g), dict(axis=axis, **kw))
        ref = ref_norm_grads(dy, x, axes, along, gk, "center")
    elif kind == "rms":
        _, rstd = fastnorm.rms_norm(x, g, axis=axis, return_stats=True)
        call = Call(fastnorm.rms_norm_backward, (dy, x, rstd, g), dict(axis=axis, **kw))
        ref = ref_norm_grads(dy, x, axes, along, gk, "rms")
    else:
        training = kind == "batch"
        mean = x.astype(np.float64).mean(axis=axes, keepdims=True)
        rstd = 1 / np.sqrt(x.astype(np.float64).var(axis=axes, keepdims=True) + 1e-5)
        call = Call(fastnorm.batch_norm_backward, (dy, x, mean, rstd, g),
                    dict(axis=axis, training=training, **kw))
        ref = ref_norm_grads(dy, x, axes, along, gk, "center" if training else "scale",
                             stats=(mean, rstd))
    call.want = _grad_want(ref, dtype, named)[:2 if kind == "rms" else 3]
    return call


def group_grad(name, shape, dtype, groups):
    x = _x(name, shape, dtype)
    dy = _rng(name + " dy").standard_normal(shape).astype(dtype)
    g = _rng(name + " params").uniform(0.5, 2.0, shape[1])
    _, mean, rstd = fastnorm.group_norm(x, groups, g, return_stats=True)
    ref = ref_group_norm_grads(dy, x, groups, 1, g)
    return Call(fastnorm.group_norm_backward, (dy, x, mean, rstd, groups, g), {},
                _grad_want(ref, dtype, (shape[1],)))


# --------------------------------------------------------------------------
# the table

def _out_like(call):
    """The call again, into a fresh out= array of its first result."""
    x = call.args[1] if call.func.__name__.endswith("_backward") else call.args[0]
    out = np.empty_like(x)
    out = (out, None, None) if call.func.__name__.endswith("_backward") else out
    return Call(call.func, call.args, dict(call.kw, out=out), call.want)


def _with(call, **kw):
    return Call(call.func, call.args, dict(call.kw, **kw), call.want)


def _general(call):
    return Call(call.func, call.args, call.kw, call.want, general=True)


def _stats_too(call):
    # (on the general path: y alone takes the fast path, whose statistics
    # test_fast_call.py holds to the general path's)
    return Call(call.func, call.args, dict(call.kw, return_stats=True), call.want, general=True)


def _strided_rms():
    """rms_norm of rows of 20 values, every other one of 40."""
    c = rms("lanes strided", (203, 20), F32)
    wide = np.zeros((203, 40), F32)
    wide[:, ::2] = c.args[0]
    return Call(c.func, (wide[:, ::2], *c.args[1:]), c.kw, c.want)


SLICES, IMAGES, COLUMNS = "slices", "images", "columns"


@dataclass
class Route:
    name: str
    expect: dict
    threads: int
    build: object          # () -> Call
    partner: object = None  # Call -> Call whose results have the same bits


def R(pattern, schedule, **flags):
    return dict(pattern=pattern, schedule=schedule, **flags)


ROUTES = [
    # slices, forward
    Route("rows, float32 pass over the rows as one run, in cache, fast path",
          R(SLICES, "rows", float32_pass=True, rows_pass=True, in_cache=True, fast_path=True,
            streams=False, threads=1),
          1, lambda: layer("rows f32", (300, 64), F32), _general),
    Route("rows, y alone against y with its statistics",
          R(SLICES, "rows", float32_pass=True, rows_pass=True),
          1, lambda: layer("rows f32 stats", (300, 64), F32, params=False), _stats_too),
    Route("rows out of cache, float64, two threads",
          R(SLICES, "rows", float32_pass=False, rows_pass=True, in_cache=False, threads=2),
          2, lambda: layer("rows f64", (6000, 100), F64)),
    Route("rows, y's rows apart: no pass over the rows as one run",
          R(SLICES, "rows", rows_pass=False),
          1, lambda: _with(layer("rows apart", (700, 48), F32),
                           out=np.full((700, 50), 7.0, F32)[:, 1:49])),
    Route("rows of mean_var, two threads",
          R(SLICES, "rows", in_cache=False, threads=2),
          2, lambda: mean_var("mean_var rows", (6000, 100), F64, -1)),
    Route("lanes: rows shorter than 8 values", R(SLICES, "lanes", fast_path=True),
          1, lambda: layer("lanes", (203, 5), F64)),
    Route("lanes: strided rows", R(SLICES, "lanes"),
          1, _strided_rms),
    Route("whole: long rows, float32 pass", R(SLICES, "whole", float32_pass=True, threads=1),
          1, lambda: layer("whole", (40, 20000), F32)),
    Route("whole: rms_norm rows past what its rows take",
          R(SLICES, "whole", in_cache=True), 1, lambda: rms("rms whole", (9, 1000), F64)),
    Route("split: two long slices on two threads",
          R(SLICES, "split", float32_pass=True, threads=2),
          2, lambda: layer("split", (2, 70001), F32)),
    Route("whole: NCHW maps longer than the image pass",
          R(SLICES, "whole", float32_pass=True),
          1, lambda: batch("long maps", (3, 5, 64, 64), F32)),
    # A gain per channel: each slice is still one block of x, whose
    # statistics go as one row; its runs take the gain.
    Route("rows: group_norm, a gain per channel within each group", R(SLICES, "rows"),
          1, lambda: group("group", (4, 16, 10, 10), F64, 4)),
    Route("whole: group_norm, slices of many channels with a gain each",
          R(SLICES, "whole", float32_pass=True),
          1, lambda: group("group whole", (2, 128, 14, 14), F32, 4)),
    Route("split: group_norm, two long slices with a gain per channel on two threads",
          R(SLICES, "split", float32_pass=True, threads=2),
          2, lambda: group("group split", (1, 64, 48, 48), F32, 2)),
    Route("rows: instance_norm", R(SLICES, "rows", float32_pass=True),
          2, lambda: instance("instance", (128, 40, 4, 4), F32)),
    Route("rows: weight_norm", R(SLICES, "rows", fast_path=False),
          1, lambda: weight_norm("wn", (64, 3, 3, 3), F64)),
    Route("rows: weight_standardize", R(SLICES, "rows", float32_pass=True),
          1, lambda: weight_standardize("ws", (64, 3, 3, 3), F32)),
    Route("turns: rows from memory into an existing out= of 9 MiB, streamed",
          R(SLICES, "turns", streams=True, descending=False, float32_pass=True),
          2, lambda: _out_like(layer("streamed", (2304, 1025), F32, params=False)),
          lambda c: Call(c.func, c.args, {k: v for k, v in c.kw.items() if k != "out"},
                         c.want)),
    Route("descending: a fresh output of NCHW maps, from the last slice down",
          R(SLICES, "whole", streams=True, descending=True),
          2, lambda: batch("descending", (56, 12, 56, 56), F32), _out_like),
    # images
    Route("images: training float32", R(IMAGES, "images", float32_pass=True, fast_path=True),
          1, lambda: batch("images f32", (37, 6, 14, 14), F32)),
    Route("images: eval float64, two threads", R(IMAGES, "images", float32_pass=False, threads=2),
          2, lambda: batch("images f64", (37, 24, 14, 14), F64, training=False)),
    Route("images: layer_norm over (0, 2)", R(IMAGES, "images", fast_path=True),
          1, lambda: layer("images layer", (6, 13, 40), F32, axis=(0, 2), params=False)),
    Route("channels: training float32", R(IMAGES, "channels"),
          1, lambda: batch("channels", (64, 32, 4, 4), F32)),
    Route("channels: two threads", R(IMAGES, "channels", threads=2),
          2, lambda: batch("channels threads", (128, 64, 7, 7), F32)),
    Route("channels: eval float64, statistics given", R(IMAGES, "channels"),
          1, lambda: batch("channels eval", (64, 8, 3, 3), F64, training=False)),
    Route("channels: mean_var of float16", R(IMAGES, "channels"),
          1, lambda: mean_var("channels mean_var", (80, 6, 5, 5), F16, (0, 2, 3))),
    # columns
    Route("tiles: batch_norm over (N, C), float64", R(COLUMNS, "tiles", float32_pass=False),
          1, lambda: batch("tiles f64", (300, 70), F64, axis=(0,))),
    Route("tiles: float32 pass", R(COLUMNS, "tiles", float32_pass=True),
          1, lambda: batch("tiles f32", (300, 70), F32, axis=(0,))),
    Route("tiles: layer_norm over axis 0, two tiles, two threads",
          R(COLUMNS, "tiles", float32_pass=True, threads=2),
          2, lambda: layer("tiles wide", (130, 2100), F32, axis=0)),
    Route("tiles: mean_var over NHWC", R(COLUMNS, "tiles", threads=2),
          2, lambda: mean_var("tiles nhwc", (8, 16, 16, 40), F32, (0, 1, 2))),
    # gradients
    Route("gradient rows, fast path", R(SLICES, "rows", fast_path=True),
          1, lambda: grad("grad rows", "layer", (300, 64), F32), _general),
    Route("gradient rows, two threads", R(SLICES, "rows", threads=2),
          2, lambda: grad("grad rows threads", "layer", (4096, 64), F32)),
    Route("gradient rows of rms_norm", R(SLICES, "rows"),
          1, lambda: grad("grad rms", "rms", (50, 300), F64)),
    Route("gradient whole: NCHW maps longer than the image pass", R(SLICES, "whole"),
          1, lambda: grad("grad whole", "batch", (3, 5, 64, 64), F32, axis=(0, 2, 3))),
    Route("gradient whole: group_norm", R(SLICES, "whole", fast_path=True),
          1, lambda: group_grad("grad group", (4, 16, 10, 10), F64, 4)),
    Route("gradient images", R(IMAGES, "images", fast_path=True),
          1, lambda: grad("grad images", "batch", (37, 6, 14, 14), F32, axis=(0, 2, 3))),
    Route("gradient images, eval float64", R(IMAGES, "images"),
          1, lambda: grad("grad images eval", "batch_eval", (37, 6, 14, 14), F64,
                          axis=(0, 2, 3))),
    Route("gradient channels", R(IMAGES, "channels"),
          1, lambda: grad("grad channels", "batch", (64, 32, 3, 3), F32, axis=(0, 2, 3))),
    Route("gradient channels, two threads", R(IMAGES, "channels", threads=2),
          2, lambda: grad("grad channels threads", "batch", (96, 48, 3, 5), F32, axis=(0, 2, 3))),
    Route("gradient tiles", R(COLUMNS, "tiles"),
          1, lambda: grad("grad tiles", "batch", (300, 70), F64, axis=(0,))),
    Route("gradient tiles, two threads", R(COLUMNS, "tiles", threads=2),
          2, lambda: grad("grad tiles threads", "batch", (1000, 70), F64, axis=(0,))),
    Route("gradient streams: an existing dx= of 8 MiB", R(SLICES, "rows", streams=True),
          2, lambda: _out_like(grad("grad streamed", "layer", (1100, 1001), F64)),
          lambda c: Call(c.func, c.args, {k: v for k, v in c.kw.items() if k != "out"})),
]


def test_every_route_has_a_case():
    seen = {(r.expect["pattern"], r.expect["schedule"]) for r in ROUTES}
    assert seen == {(SLICES, "rows"), (SLICES, "lanes"), (SLICES, "whole"), (SLICES, "turns"),
                    (SLICES, "split"), (IMAGES, "images"), (IMAGES, "channels"),
                    (COLUMNS, "tiles")}
    for flag in ("float32_pass", "rows_pass", "streams", "descending", "in_cache", "fast_path"):
        assert {r.expect[flag] for r in ROUTES if flag in r.expect} == {True, False}, flag
    assert {r.threads for r in ROUTES} == {1, 2}


@pytest.mark.parametrize("case", ROUTES, ids=[r.name for r in ROUTES])
def test_route(case):
    call = case.build()
    assert call.want, "every case is held against a reference"
    fastnorm.set_num_threads(case.threads)
    assert_route(case.expect, call.func, *call.args, **call.kw)
    got = call.run()
    for k, (want, allowed) in enumerate(call.want):
        assert_close(got[k], want, allowed, f"result {k}")
    # The same bits on the other thread count, and from the partner call.
    fastnorm.set_num_threads(3 - case.threads)
    others = [case.build().run()]
    fastnorm.set_num_threads(case.threads)
    if case.partner is not None:
        partner = case.partner(case.build())
        assert partner.explain() != call.explain(), "the partner takes the same route"
        others.append(partner.run())
    for other in others:
        for k, (a, b) in enumerate(zip(got, other)):
            assert_bitwise(np.asarray(b), np.asarray(a), f"result {k}")
