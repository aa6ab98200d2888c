"""Hypothesis strategies and the builders that turn a drawn spec into arrays.

A spec is a dict of small values (shape, dtype, layout, seed, ...); the
arrays are built from it with a seeded NumPy generator, so a failing example
prints a short, reproducible spec instead of a wall of numbers.
"""
import math

import numpy as np
from hypothesis import strategies as st

from reference import F16, F32, F64, out_dtype

INPUT_DTYPES = ["float16", "float32", "float64", ">f4", "int8", "int32", "int64",
                "uint8", "bool"]
REQ_DTYPES = [None, None, None, "float16", "float32", "float64"]
LAYOUTS = ["C", "F", "transposed", "strided", "negative", "broadcast", "mixed"]
VALUE_KINDS = ["normal", "normal", "ints", "const_slices", "offset"]

# Sides include 0 and 1 and the neighbours of the SIMD lane counts (16, 32,
# 64 Welford lanes; 2, 4, 8 doubles per vector), kept small in high ranks.
_SIDES = {
    0: [1],
    1: [0, 1, 2, 3, 5, 7, 8, 9, 15, 16, 17, 31, 33, 63, 64, 65, 129, 300],
    2: [0, 1, 1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 33, 64, 65, 130],
    3: [0, 1, 1, 2, 3, 4, 5, 7, 9, 17],
    4: [0, 1, 1, 2, 3, 4, 5],
}


@st.composite
def shapes(draw, min_dims=0, max_dims=4):
    nd = draw(st.integers(min_dims, max_dims))
    return tuple(draw(st.sampled_from(_SIDES[nd])) for _ in range(nd))


@st.composite
def axis_args(draw, ndim, allow_none=True, min_axes=0):
    """An axis argument as a user writes it: None, an int (maybe negative)
    or a tuple in any order with negatives mixed in."""
    kinds = (["none"] if allow_none else []) + (["int"] if ndim and min_axes <= 1 else [])
    kinds += ["tuple"] if ndim >= min_axes else []
    kind = draw(st.sampled_from(kinds))
    if kind == "none":
        return None
    if kind == "int":
        a = draw(st.integers(0, ndim - 1))
        return a - ndim if draw(st.booleans()) else a
    if ndim == 0:
        return ()
    picked = draw(st.lists(st.integers(0, ndim - 1), unique=True,
                           min_size=min_axes, max_size=ndim))
    return tuple(a - ndim if draw(st.booleans()) else a for a in picked)


@st.composite
def common_spec(draw, min_dims=0, max_dims=4):
    return dict(
        shape=draw(shapes(min_dims, max_dims)),
        dtype=draw(st.sampled_from(INPUT_DTYPES)),
        layout=draw(st.sampled_from(LAYOUTS)),
        values=draw(st.sampled_from(VALUE_KINDS)),
        seed=draw(st.integers(0, 2**32 - 1)),
        req_dtype=draw(st.sampled_from(REQ_DTYPES)),
    )


@st.composite
def mean_var_specs(draw):
    s = draw(common_spec())
    s["axis"] = draw(axis_args(len(s["shape"])))
    s["ddof"] = draw(st.sampled_from([0, 0, 1, 2]))
    s["keepdims"] = draw(st.booleans())
    s["out_mode"] = draw(st.sampled_from(["none", "none", "fresh", "strided",
                                          "wrong_shape", "wrong_dtype", "readonly"]))
    return s


OUT_MODES = ["none", "none", "fresh", "strided", "inplace", "inplace", "wrong_shape",
             "wrong_dtype", "readonly", "list"]
STATS_OUT = ["none", "bare", "single", "all", "mean_only", "rstd_only", "stats_only",
             "stats_wrong_shape"]
PARAM_KINDS = [None, None, "named", "named_f32", "list", "keepdims", "keepdims_partial",
               "keepdims_flipped"]


@st.composite
def normalizer_spec(draw, kind):
    if kind == "batch":
        s = draw(common_spec(min_dims=1))
        nd = len(s["shape"])
        s["axis"] = draw(st.one_of(st.none(), axis_args(nd, allow_none=False)))
        s["training"] = draw(st.booleans())
        s["running"] = draw(st.sampled_from([None, "named_f64", "named_f32", "keepdims_f64",
                                             "keepdims_f32", "keepdims_flipped"]))
        s["momentum"] = draw(st.sampled_from([0.1, 0.1, 0.0, 0.5, 1.0]))
    else:
        s = draw(common_spec())
        s["axis"] = draw(axis_args(len(s["shape"])))
    s["eps"] = draw(st.sampled_from([1e-5, 1e-5, 1e-3, 0.25, 0.0]))
    s["gamma"] = draw(st.sampled_from(PARAM_KINDS))
    s["beta"] = None if kind == "rms" else draw(st.sampled_from(PARAM_KINDS))
    s["return_stats"] = draw(st.booleans())
    s["out_mode"] = draw(st.sampled_from(OUT_MODES))
    s["stats_out"] = draw(st.sampled_from(STATS_OUT)) if s["return_stats"] else "none"
    return s


# --------------------------------------------------------------------------
# builders

def _sentinel(dtype):
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return True
    return 99 if dt.kind in "iu" else 1234.0


def placed(values, rng, perm=None, flips=(), steps=None, fill=None):
    """values copied into a view with the given axis order of the storage,
    flipped axes and steps, inside a buffer holding `fill` elsewhere.
    Returns (view, buffer, mask of the buffer that the view covers)."""
    v = np.asarray(values)
    nd = v.ndim
    perm = list(range(nd)) if perm is None else list(perm)
    steps = [1] * nd if steps is None else list(steps)
    fill = _sentinel(v.dtype) if fill is None else fill
    storage = [v.shape[perm[k]] * steps[k] for k in range(nd)]
    buf = np.full(storage, fill, dtype=v.dtype)
    mask = np.zeros(storage, dtype=bool)

    def view_of(b):
        w = b[tuple(slice(0, storage[k], steps[k]) for k in range(nd))] if nd else b[...]
        w = w.transpose(np.argsort(perm)) if nd else w
        return np.flip(w, tuple(flips)) if flips else w

    view = view_of(buf)
    view[...] = v
    view_of(mask)[...] = True
    return view, buf, mask


def arrange(values, layout, rng):
    """The same values (except for 'broadcast') in a chosen memory layout."""
    v = np.asarray(values)
    nd = v.ndim
    if nd == 0 or layout == "C":
        return v.copy()
    if layout == "F":
        return np.asfortranarray(v)
    if layout == "broadcast":
        bcast = [i for i in range(nd) if rng.random() < 0.5] or [int(rng.integers(nd))]
        small = v[tuple(slice(0, 1) if i in bcast else slice(None) for i in range(nd))]
        return np.broadcast_to(small, v.shape)
    perm, flips, steps = None, (), None
    if layout in ("transposed", "mixed"):
        perm = rng.permutation(nd)
    if layout in ("negative", "mixed"):
        flips = tuple(i for i in range(nd) if rng.random() < 0.6) or (int(rng.integers(nd)),)
    if layout in ("strided", "mixed"):
        steps = rng.integers(1, 4, size=nd)
    return placed(v, rng, perm, flips, steps)[0]


def make_values(rng, shape, dtype, kind, axes, small=False):
    """Raw values of a dtype; small keeps float16 results finite."""
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return rng.random(shape) < 0.5
    if dt.kind == "u":
        return rng.integers(0, 100, size=shape).astype(dt)
    if dt.kind == "i":
        return rng.integers(-50, 50, size=shape).astype(dt)
    if kind == "ints":
        v = rng.integers(-4, 5, size=shape).astype(np.float64)
    else:
        if small or dt == F16:
            offset = rng.choice([0.0, 3.0, -20.0])
            scale = rng.choice([1.0, 1e-2, 20.0])
        elif kind == "offset":
            offset = rng.choice([1e3, -1e4, 1e6])
            scale = rng.choice([1.0, 1e-3, 30.0])
        else:
            offset = rng.choice([0.0, 10.0, -1e3])
            scale = rng.choice([1.0, 1e-3, 100.0])
        v = offset + scale * rng.standard_normal(shape)
    if kind == "const_slices" and v.size:
        # Some slices constant: they must give exactly beta (rstd = 1/sqrt(eps)).
        first = v[tuple(slice(0, 1) if i in axes else slice(None) for i in range(v.ndim))]
        pick = rng.random(first.shape) < 0.5
        v = np.where(pick, first, v)
    return v.astype(dt)


def build_x(spec, axes, rng):
    small = out_dtype(np.dtype(spec["dtype"]), spec.get("req_dtype")) == F16
    v = make_values(rng, spec["shape"], spec["dtype"], spec["values"], axes, small)
    return arrange(v, spec["layout"], rng)


def build_param(kind, x_shape, along, rng, role):
    """gamma/beta/running stats in one of the accepted forms."""
    if kind is None:
        return None
    nd = len(x_shape)
    named = tuple(x_shape[i] for i in along)
    keep = tuple(x_shape[i] if i in along else 1 for i in range(nd))
    if role == "gamma":
        vals = rng.uniform(0.5, 2.0, size=named) * rng.choice([-1.0, 1.0], size=named)
    elif role == "var":
        vals = rng.uniform(0.5, 2.0, size=named)
    else:
        vals = rng.standard_normal(named)
    if kind == "named":
        return np.asarray(vals, dtype=np.float64)
    if kind == "named_f32":
        return np.asarray(vals, dtype=np.float32)
    if kind == "list":
        if np.size(vals) == 0 and np.ndim(vals) > 1:
            return np.asarray(vals)  # nested empty lists lose the shape
        return np.asarray(vals).tolist()
    full = np.asarray(vals, dtype=np.float64).reshape(keep)
    if kind == "keepdims":
        return full
    if kind == "keepdims_partial":
        # Size 1 along some of the parameter's own axes: broadcasts there.
        cut = tuple(slice(0, 1) if (i in along and rng.random() < 0.5) else slice(None)
                    for i in range(nd))
        return np.array(full[cut + (Ellipsis,)], order="C")
    if kind == "keepdims_flipped":
        return np.flip(np.array(np.flip(full), order="C"))
    raise ValueError(kind)


def build_running(kind, x_shape, kept, rng):
    """(running_mean, running_var) writable float arrays, or (None, None)."""
    if kind is None:
        return None, None
    nd = len(x_shape)
    named = tuple(x_shape[i] for i in kept)
    keep = tuple(x_shape[i] if i in kept else 1 for i in range(nd))
    dt = np.float32 if kind.endswith("f32") else np.float64
    rm = rng.standard_normal(named).astype(dt)
    rv = rng.uniform(0.5, 2.0, size=named).astype(dt)
    if kind.startswith("keepdims"):
        rm, rv = rm.reshape(keep), rv.reshape(keep)
    if kind == "keepdims_flipped":
        rm = np.flip(np.array(np.flip(rm), order="C"))
        rv = np.flip(np.array(np.flip(rv), order="C"))
    return rm, rv


def other_float(dtype):
    return F32 if np.dtype(dtype) != F32 else F64


def wrong_shape(shape):
    return (shape[0] + 1,) + tuple(shape[1:]) if shape else (1,)


def n_reduced(shape, axes):
    return math.prod(shape[a] for a in axes)


# --------------------------------------------------------------------------
# gradients and the rest of the family

GRAD_LAYOUTS = ["C", "F", "transposed", "strided", "negative", "mixed"]
GRAD_PARAM_KINDS = [None, "named", "named_f32", "keepdims"]
# Small sides: finite differences move every element one at a time.
_GRAD_SIDES = [1, 2, 3, 4, 5]
_CHANNELS = [1, 2, 3, 4, 6]


def _divisors(c):
    return [g for g in range(1, c + 1) if c % g == 0]


@st.composite
def grad_specs(draw, kind):
    """A small float64 problem for the gradients of `kind` (layer, rms,
    batch, group): shape, axes (or groups and channel axis), layouts of x and
    dy, parameters, eps and values."""
    if kind == "group":
        nd = draw(st.integers(2, 4))
        shape = [draw(st.sampled_from(_GRAD_SIDES[:4])) for _ in range(nd)]
        ch = draw(st.integers(1, nd - 1))
        shape[ch] = draw(st.sampled_from(_CHANNELS))
        s = dict(shape=tuple(shape), num_groups=draw(st.sampled_from(_divisors(shape[ch]))),
                 channel_axis=ch - nd if draw(st.booleans()) else ch)
    else:
        nd = draw(st.integers(2 if kind == "batch" else 1, 4))
        shape = tuple(draw(st.sampled_from(_GRAD_SIDES)) for _ in range(nd))
        s = dict(shape=shape)
        if kind == "batch":
            s["axis"] = draw(st.one_of(st.none(), axis_args(nd, allow_none=False, min_axes=1)))
            # Training needs more than one value per feature.
            red = range(nd) if s["axis"] is None else [a % nd for a in np.atleast_1d(s["axis"])]
            n = math.prod(shape[i] for i in red if s["axis"] is not None or i != 1)
            s["training"] = n > 1 and draw(st.sampled_from([True, True, False]))
        else:
            s["axis"] = draw(axis_args(nd, allow_none=False, min_axes=1))
    s["layout"] = draw(st.sampled_from(GRAD_LAYOUTS))
    s["dy_layout"] = draw(st.sampled_from(GRAD_LAYOUTS + ["broadcast"]))
    s["gamma"] = draw(st.sampled_from(GRAD_PARAM_KINDS + ["keepdims_partial"]))
    s["beta"] = None if kind == "rms" else draw(st.sampled_from([None, "named"]))
    s["eps"] = draw(st.sampled_from([1e-5, 1e-3, 0.1]))
    s["offset"] = draw(st.sampled_from([0.0, 0.0, 5.0, -300.0]))
    s["scale"] = draw(st.sampled_from([1.0, 1.0, 1e-2, 30.0]))
    s["seed"] = draw(st.integers(0, 2**32 - 1))
    return s


FAMILY_DTYPES = ["float64", "float64", "float32", "float16", ">f8", "int16"]


@st.composite
def group_specs(draw):
    """A group/instance norm problem: shape (N, ..., C, ...), groups, channel
    axis, dtype, layout, parameters."""
    nd = draw(st.integers(2, 4))
    shape = [draw(st.sampled_from([1, 2, 3, 5, 8, 17])) for _ in range(nd)]
    ch = draw(st.integers(1, nd - 1))
    shape[ch] = draw(st.sampled_from([1, 2, 4, 6, 12, 32]))
    if nd == 4:  # keep the high-rank cases small
        shape = [min(v, 5) if i != ch else v for i, v in enumerate(shape)]
    return dict(
        shape=tuple(shape),
        channel_axis=ch - nd if draw(st.booleans()) else ch,
        num_groups=draw(st.sampled_from(_divisors(shape[ch]))),
        dtype=draw(st.sampled_from(FAMILY_DTYPES)),
        layout=draw(st.sampled_from(LAYOUTS)),
        values=draw(st.sampled_from(["normal", "normal", "ints", "offset"])),
        gamma=draw(st.sampled_from([None, "named", "named_f32", "keepdims", "list",
                                    "keepdims_partial"])),
        beta=draw(st.sampled_from([None, "named", "keepdims", "keepdims_partial"])),
        eps=draw(st.sampled_from([1e-5, 1e-3, 0.25])),
        return_stats=draw(st.booleans()),
        seed=draw(st.integers(0, 2**32 - 1)),
    )


@st.composite
def weight_specs(draw):
    """A weight tensor (out, in, kh, kw)-like, the axes of its statistics,
    dtype, layout."""
    nd = draw(st.integers(1, 4))
    shape = tuple(draw(st.sampled_from([1, 2, 3, 5, 9, 16, 33])) for _ in range(nd))
    if nd == 4:
        shape = tuple(min(v, 9) for v in shape)
    axis = draw(st.one_of(st.none(), axis_args(nd, allow_none=False, min_axes=1))) \
        if nd > 1 else draw(st.sampled_from([None, 0, -1, (0,)]))
    return dict(
        shape=shape, axis=axis,
        dtype=draw(st.sampled_from(FAMILY_DTYPES)),
        layout=draw(st.sampled_from(LAYOUTS)),
        values=draw(st.sampled_from(["normal", "normal", "ints", "offset"])),
        g=draw(st.sampled_from([None, "named", "keepdims"])),
        eps=draw(st.sampled_from([1e-5, 1e-3, 0.25])),
        seed=draw(st.integers(0, 2**32 - 1)),
    )


def row_problem(dtype, n, rows, offset, params, seed, spread=False):
    """x of (rows, n) values about `offset` (each row scaled by its own
    factor in [0.1, 10) with `spread`), with gamma and beta along the row
    ("along"), one for all ("one", keepdims) or none."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, n))
    if spread:
        x = x * rng.uniform(0.1, 10.0, (rows, 1))
    x = (offset + x).astype(dtype)
    gamma = beta = None
    if params == "along":
        gamma, beta = rng.uniform(0.5, 2.0, n), rng.standard_normal(n)
    elif params == "one":
        gamma, beta = rng.uniform(0.5, 2.0, (1, 1)), rng.standard_normal((1, 1))
    return x, gamma, beta


def normalizer_params(x, axes, kind, params, seed):
    """A normalizer's reduced axes, gamma and beta for x ("layer", "rms" or
    "batch": every axis but 1, None where x has fewer than 2): standard
    normal parameters of the normalized (layer, rms) or kept (batch) axes
    in keepdims layout, or None without params (and beta None for rms)."""
    if kind == "batch":
        if x.ndim < 2:
            return None
        axes = tuple(i for i in range(x.ndim) if i != 1)
    rng = np.random.default_rng(seed)
    along = axes if kind != "batch" else tuple(i for i in range(x.ndim) if i not in axes)
    pshape = tuple(x.shape[i] if i in along else 1 for i in range(x.ndim))
    g = rng.standard_normal(pshape) if params else None
    b = rng.standard_normal(pshape) if params and kind != "rms" else None
    return axes, g, b

