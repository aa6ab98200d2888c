"""Fuzzing every public entry point with hostile arguments.

Each example draws one function and a call to it: shapes (0-d, size 0, size
1, up to 4 dimensions, now and then up to 64 or one large enough for the
threaded paths), every array argument in a hostile layout (hostile.py:
negative, zero, overlapping and misaligned strides, non-native byte order,
read-only),
integer and bool inputs, Python lists, every kind of out= (fresh, strided,
misaligned, non-native, overlapping itself, aliasing an input partially, in
place), and at most one fault: a bad dtype, a non-array, an axis out of
range, repeated or not an integer, a parameter of the wrong shape or dtype,
a bad out=, eps, dtype= or function-specific argument, an output too large
to allocate.

The outcome is either the documented exception for that fault (the exact
type, never "any exception"), or results equal to the float64 reference of
reference.py within the tolerances the other tests use.  Either way every
byte of every input buffer is compared before and after: only out= arrays
and in-place running statistics may change, and a rejected call changes
nothing.

The normal run tries 200 examples per function (derandomized, as the
other hypothesis tests in CI); the long run is one command (README,
"Testing"):

    FASTNORM_FUZZ_EXAMPLES=20000 pytest tests/test_fuzz.py

which also turns derandomization off, so each long run explores new cases.
"""
import math
import os
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.exceptions import AxisError

import fastnorm
from hostile import (BAD_DTYPES, FLOAT_DTYPES, INT_DTYPES, Arena, assert_close_through,
                     make_dtype)
from reference import (F16, F32, F64, OUT_TOL, assert_close,
                       expand_param, keep_shape, moments, out_dtype, ref_group_norm,
                       ref_group_norm_grads, ref_layer_norm, ref_norm_grads, ref_rms_norm,
                       ref_running_update, ref_weight_norm, stat_dtype, tiny,
                       tolerances)
from strategies import make_values

# The most dimensions an array may have in this NumPy.
MAX_NDIM = 64 if int(np.__version__.split(".")[0]) >= 2 else 32

FUZZ_EXAMPLES = int(os.environ.get("FASTNORM_FUZZ_EXAMPLES", "0"))
FUZZ = settings(max_examples=FUZZ_EXAMPLES or 200,
                **({"derandomize": False} if FUZZ_EXAMPLES else {}))

FORWARD = ["mean_var", "layer_norm", "rms_norm", "batch_norm", "group_norm", "instance_norm",
           "weight_norm", "weight_standardize"]
BACKWARD = ["layer_norm_backward", "rms_norm_backward", "batch_norm_backward",
            "group_norm_backward"]

# Faults every function can have, and the exception each must raise.
COMMON_FAULTS = {
    "x_dtype": TypeError,          # complex, object, strings, datetimes, structured, ...
    "x_object": TypeError,         # None, a str, a dict, a list holding None
    "x_ragged": ValueError,        # NumPy cannot make an array of it
    "out_shape": ValueError,
    "out_dtype": TypeError,
    "out_readonly": ValueError,
    "out_type": TypeError,         # a list
    "huge": MemoryError,           # a broadcast input whose output cannot exist
}
AXIS_FAULTS = {"axis_range": AxisError, "axis_dup": ValueError, "axis_type": TypeError}
PARAM_FAULTS = {"param_shape": ValueError, "param_dtype": TypeError}
EPS_FAULTS = {"eps_value": ValueError, "eps_type": TypeError}
DTYPE_FAULTS = {"dtype_arg": TypeError}
GROUP_FAULTS = {"groups_divide": ValueError, "groups_type": TypeError,
                "channel_zero": ValueError, "channel_range": AxisError, "x_1d": ValueError}
GRAD_FAULTS = {"dy_shape": ValueError, "stat_shape": ValueError, "stat_dtype": TypeError}

FAULTS = {
    "mean_var": {**COMMON_FAULTS, **AXIS_FAULTS, **DTYPE_FAULTS,
                 "ddof_type": TypeError, "out_bare": TypeError},
    "layer_norm": {**COMMON_FAULTS, **AXIS_FAULTS, **PARAM_FAULTS, **EPS_FAULTS, **DTYPE_FAULTS},
    "rms_norm": {**COMMON_FAULTS, **AXIS_FAULTS, **PARAM_FAULTS, **EPS_FAULTS, **DTYPE_FAULTS},
    "batch_norm": {**COMMON_FAULTS, **AXIS_FAULTS, **PARAM_FAULTS, **EPS_FAULTS,
                   **DTYPE_FAULTS, "one_per_feature": ValueError, "eval_no_running": ValueError,
                   "running_half": ValueError, "running_readonly": ValueError,
                   "running_list": TypeError, "running_int": TypeError,
                   "momentum_value": ValueError, "momentum_type": TypeError,
                   "running_is_out": ValueError, "x_1d_axis_none": ValueError},
    "group_norm": {**COMMON_FAULTS, **PARAM_FAULTS, **EPS_FAULTS, **DTYPE_FAULTS,
                   **GROUP_FAULTS},
    "instance_norm": {**COMMON_FAULTS, **PARAM_FAULTS, **EPS_FAULTS, **DTYPE_FAULTS,
                      "channel_range": AxisError, "x_1d": ValueError},
    "weight_norm": {k: v for k, v in {**COMMON_FAULTS, **AXIS_FAULTS, **PARAM_FAULTS}.items()
                    if not k.startswith("out_")},
    "weight_standardize": {k: v for k, v in {**COMMON_FAULTS, **AXIS_FAULTS,
                                             **EPS_FAULTS}.items() if not k.startswith("out_")},
    "layer_norm_backward": {**COMMON_FAULTS, **AXIS_FAULTS, **PARAM_FAULTS, **GRAD_FAULTS},
    "rms_norm_backward": {**COMMON_FAULTS, **AXIS_FAULTS, **PARAM_FAULTS, **GRAD_FAULTS},
    "batch_norm_backward": {**COMMON_FAULTS, **AXIS_FAULTS, **PARAM_FAULTS, **GRAD_FAULTS},
    "group_norm_backward": {**COMMON_FAULTS, **PARAM_FAULTS, **GRAD_FAULTS, **GROUP_FAULTS},
}

SIDES = [0, 1, 1, 2, 3, 4, 5, 8, 17, 33]
# Now and then a shape large enough for several threads and long slices.
BIG_SHAPES = [(4, 20000), (70000,), (25000, 3), (2, 3, 12000)]
INPUT_DTYPES = list(FLOAT_DTYPES) * 4 + list(INT_DTYPES)
PARAM_DTYPES = ["float64", "float64", "float32", "float16", "int32", "bool"]
NOT_ARRAYS = [None, "abc", {}, object(), b"ab", [1.0, None], ["1", 2.0]]
BAD_AXES = [1.0, "0", (1.5, 0), [0.0], np.float64(1), (None,)]


# --------------------------------------------------------------------------
# drawing a call

def _one_longer(shape):
    """A wrong shape as small as the right one: the last side one longer
    (not every side: with 64 dimensions that would be 2**64 values)."""
    return tuple(shape[:-1]) + (shape[-1] + 1,) if shape else (1,)


class Example:
    """The drawn arguments of one call, the arrays they live in, and what
    the call must give."""

    def __init__(self, func, data):
        self.func, self.data = func, data
        seed = data.draw(st.integers(0, 2**32 - 1), label="seed")
        self.rng = np.random.default_rng(seed)
        self.arena = Arena(self.rng)
        faults = ["none"] * len(FAULTS[func]) + sorted(FAULTS[func])
        self.fault = self.draw(faults, "fault")
        self.writes = []        # arrays the call may write (out=, running statistics)
        self.room = 64          # spare bytes after each array, for an aliasing out=

    def draw(self, options, label):
        return self.data.draw(st.sampled_from(options), label=label)

    def flag(self, label, p=0.3):
        return self.data.draw(st.sampled_from([True] + [False] * round(1 / p - 1)), label=label)

    # shapes and axes ------------------------------------------------------

    def shape(self, min_nd=0, max_nd=4):
        if self.fault == "axis_dup":
            min_nd = max(min_nd, 1)    # repeating an axis needs one
        shape = None
        if self.flag("big shape", 0.06):
            big = [s for s in BIG_SHAPES if min_nd <= len(s) <= max_nd]
            if big:
                shape = self.draw(big, "shape")
        elif max_nd >= 4 and self.flag("many dimensions", 0.05):
            # Up to NumPy's most (64; NumPy 1.x: 32), a few longer than 1.
            nd = self.draw([n for n in (5, 8, 16, 32, 64) if n <= MAX_NDIM], "ndim")
            sides = [1] * nd
            for _ in range(self.data.draw(st.integers(0, 4), label="sides above 1")):
                sides[self.data.draw(st.integers(0, nd - 1), label="axis")] = \
                    self.draw([0, 2, 3, 5], "side")
            shape = tuple(sides)
        if shape is None:
            nd = self.data.draw(st.integers(min_nd, max_nd), label="ndim")
            sides = SIDES if nd <= 2 else SIDES[:-2]
            shape = tuple(self.data.draw(st.sampled_from(sides), label=f"side {i}")
                          for i in range(nd))
        self.sized(shape)
        return shape

    def sized(self, shape):
        """Leave room for an out= of this shape next to every array."""
        self.room = max(self.room, 8 * math.prod(shape) + 64)

    def axis(self, nd, allow_none=True, default=None):
        """A valid axis argument, or the drawn axis fault."""
        if self.fault == "axis_range":
            return self.draw([nd, -nd - 1, (0, nd), (nd + 3,)], "axis")
        if self.fault == "axis_dup" and nd:
            return self.draw([(0, 0), (0, -nd), (nd - 1, 0, -1)], "axis")
        if self.fault == "axis_type":
            return self.draw(BAD_AXES, "axis")
        kinds = (["none"] if allow_none else []) + (["int", "tuple", "list"] if nd else ["tuple"])
        kind = self.draw(kinds, "axis kind")
        if kind == "none":
            return default
        if nd == 0:
            return ()
        if kind == "int":
            a = self.data.draw(st.integers(-nd, nd - 1), label="axis")
            return self.draw([a, np.int64(a), np.array(a)], "axis type")
        picked = self.data.draw(st.lists(st.integers(0, nd - 1), unique=True, max_size=nd),
                                label="axes")
        axes = tuple(a - nd if self.flag("negative axis", 0.5) else a for a in picked)
        return list(axes) if kind == "list" else axes

    # arrays ---------------------------------------------------------------

    def hostile(self, values, dtype, label, *, writable=False, layouts=None):
        """values placed in a drawn hostile layout of dtype (byte order,
        alignment and writability drawn too)."""
        layouts = layouts or (["C", "F", "permuted", "reversed"] if writable else
                              ["C", "F", "permuted", "reversed", "broadcast", "overlapping"])
        layout = self.draw(layouts, f"{label} layout")
        swap = self.flag(f"{label} byte-swapped", 0.25)
        misalign = self.flag(f"{label} misaligned", 0.25)
        odd = misalign and layout == "permuted" and self.flag(f"{label} odd strides", 0.5)
        readonly = not writable and self.flag(f"{label} read-only", 0.3)
        return self.arena.place(values, make_dtype(dtype, swap), layout, misalign=misalign,
                                odd=odd, readonly=readonly, room=self.room)

    def input_array(self, shape, axes, label="x", dtypes=INPUT_DTYPES):
        """The data argument: an array in a hostile layout, a Python list,
        or the drawn dtype / non-array fault."""
        if self.fault == "x_dtype" and label == "x":
            bad = self.draw(list(BAD_DTYPES), "bad dtype")
            return self.hostile(np.zeros(shape), bad, label)
        if self.fault == "x_object" and label == "x":
            return self.draw(NOT_ARRAYS, "not an array")
        if self.fault == "x_ragged" and label == "x":
            return [[1.0, 2.0], [3.0]]
        dtype = self.draw(dtypes, f"{label} dtype")
        kind = self.draw(["normal", "normal", "ints", "const_slices", "offset"], f"{label} values")
        values = make_values(self.rng, shape, dtype, kind, axes, small=dtype == "float16")
        if (self.flag(f"{label} as a list", 0.08) and len(shape) and 0 not in shape
                and math.prod(shape) < 5000):
            return values.astype(np.float64).tolist()
        return self.hostile(values, dtype, label)

    def param(self, shape, along, label, role="gamma", allow_none=True, partial=True):
        """gamma/beta-like: None, the named shape, keepdims layout (maybe
        size 1 along some of its axes) or a list, in a drawn dtype/layout;
        or the drawn parameter fault."""
        named = tuple(shape[i] for i in along)
        keep = tuple(shape[i] if i in along else 1 for i in range(len(shape)))
        # partial: keepdims with size 1 along some of the parameter's own
        # axes (group and instance norm take (C,) or C on the channel axis).
        if self.fault == "param_shape" and label == "gamma":
            bad = self.draw(["extra", "short", "longer"], "bad gamma shape")
            longer = named[:-1] + (named[-1] + 2,) if named else (2,)
            wrong = {"extra": named + (2,) if len(named) < 64 else longer,
                     "short": named[:-1] if named else (3,), "longer": longer}[bad]
            return np.ones(wrong)
        if self.fault == "param_dtype" and label == "gamma":
            bad = self.draw(["complex128", "object", "U3"], "bad gamma dtype")
            return np.ones(named, dtype=bad) if bad != "U3" else np.full(named, "a")
        kinds = (["none", "none"] if allow_none else []) + ["named", "named", "keepdims",
                                                             "list"]
        kinds += ["keepdims_partial"] if partial else []
        kind = self.draw(kinds, f"{label} kind")
        if kind == "none":
            return None
        if kind == "list" and 0 in named and len(named) > 1:
            kind = "named"   # nested empty lists lose the shape
        if role == "gamma":
            vals = self.rng.uniform(0.5, 2.0, named) * self.rng.choice([-1.0, 1.0], named)
        elif role == "var":
            vals = self.rng.uniform(0.5, 2.0, named)
        else:
            vals = self.rng.standard_normal(named)
        if kind == "list":
            return vals.tolist() if named else float(vals)
        if kind != "named":
            vals = vals.reshape(keep)
            if kind == "keepdims_partial":
                cut = tuple(slice(0, 1) if (i in along and self.flag(f"{label} cut {i}", 0.5))
                            else slice(None) for i in range(len(shape)))
                vals = vals[cut]
        dtype = self.draw(PARAM_DTYPES, f"{label} dtype")
        if dtype == "bool":
            vals = vals > 0
        return self.hostile(vals, dtype, label)

    def out_array(self, shape, dtype, label, alias_of=(), inplace=None):
        """An out= array of this shape and dtype in a drawn form, or the
        drawn out= fault (for the first out only)."""
        first = label in ("out", "out[0]")
        if first and self.fault == "out_shape":
            return np.zeros(_one_longer(shape), dtype)
        if first and self.fault == "out_dtype":
            return np.zeros(shape, F32 if np.dtype(dtype) != F32 else F64)
        if first and self.fault == "out_readonly":
            o = np.zeros(shape, dtype)
            o.flags.writeable = False
            return o
        if first and self.fault == "out_type":
            return np.zeros(shape).tolist()
        forms = ["fresh", "hostile", "hostile", "overlapping"]
        # Only the first output aliases an input: two outputs that share
        # memory have no defined result.
        aliases = [a for a in alias_of if first and isinstance(a, np.ndarray)
                   and self.arena.raw_of(a) is not None]
        if aliases:
            forms += ["alias", "alias"]
        if inplace is not None:
            forms += ["inplace", "inplace"]
        form = self.draw(forms, f"{label} form")
        o = None
        if form == "inplace":
            o = inplace
        elif form == "alias":
            of = aliases[int(self.rng.integers(len(aliases)))]
            o = self.arena.alias(of, shape, dtype, self.draw(["C", "reversed", "permuted"],
                                                             f"{label} layout"),
                                 misalign=self.flag(f"{label} misaligned", 0.3))
        elif form == "overlapping":
            o = self.arena.place(np.zeros(shape), dtype,
                                 self.draw(["overlapping", "broadcast"], f"{label} layout"))
        elif form == "hostile":
            o = self.hostile(np.zeros(shape), np.dtype(dtype).name, label, writable=True)
        if o is None:  # "fresh", or an alias that did not fit
            o = self.arena.place(np.full(shape, 7.0), dtype)
        self.writes.append(o)
        return o

    def inplace_candidate(self, x, dtype):
        """x itself when out=x is a valid in-place call."""
        if (isinstance(x, np.ndarray) and x.flags.writeable and x.dtype.kind == "f"
                and x.dtype.newbyteorder("=") == np.dtype(dtype)):
            return x
        return None

    def eps(self):
        if self.fault == "eps_value":
            return self.draw([-1e-5, float("nan"), float("inf")], "eps")
        if self.fault == "eps_type":
            return self.draw(["a", None, [1e-5, 1e-5]], "eps")
        return self.draw([1e-5, 1e-3, 0.25, 0.0, 1], "eps")

    def req_dtype(self):
        if self.fault == "dtype_arg":
            return self.draw([np.int32, np.complex128, "U3", "not-a-dtype", object], "dtype")
        return self.draw([None, None, None, "float16", "float32", np.float64], "dtype")

    def huge(self, shape):
        """A float32 input of this (impossible to copy) shape, all zero strides."""
        return np.broadcast_to(np.float32(1.5), shape)


# --------------------------------------------------------------------------
# checking the outcome

def _norm_allowed(res_dt, x_dtype, g, b, xhat, rstd, spread):
    tout, tacc = tolerances(x_dtype, res_dt)
    gabs = 1.0 if g is None else np.abs(g)
    babs = 0.0 if b is None else np.abs(b)
    with np.errstate(invalid="ignore", over="ignore"):
        return tout * (gabs * np.abs(xhat) + babs) + tacc * gabs * rstd * spread + tiny(res_dt)


def _f64(a):
    return None if a is None else np.array(a, dtype=np.float64)


def _dtype_of(x):
    return np.asarray(x).dtype if not isinstance(x, np.ndarray) else x.dtype


def _result_dtype(ex, x, dtype):
    """The output dtype of a call on x with dtype= (float64 where the drawn
    fault leaves none: the call is rejected before it matters)."""
    if ex.fault in ("x_dtype", "x_object", "x_ragged", "dtype_arg"):
        return F64
    return out_dtype(_dtype_of(x), dtype)


def _check_array(got, expected, allowed, dtype, shape, what, out=None):
    assert isinstance(got, np.ndarray), f"{what}: {type(got)} is not an ndarray"
    if out is not None:
        assert got is out, f"{what}: the out array must be returned"
    assert got.dtype.newbyteorder("=") == np.dtype(dtype), f"{what}: dtype {got.dtype} != {dtype}"
    assert got.shape == tuple(shape), f"{what}: shape {got.shape} != {shape}"
    with np.errstate(invalid="ignore", over="ignore"):
        # A result beyond the dtype's range is an infinity there.
        expected = np.asarray(expected, dtype=np.float64)
        rounded = expected.astype(np.dtype(dtype))
        expected = np.where(np.isinf(rounded) & np.isfinite(expected), rounded, expected)
        assert_close_through(got, expected, allowed, what, assert_close)


def run(ex, call, expect, check):
    """Call; the drawn fault's exception or a result that check accepts;
    and no byte of an input changed."""
    ex.arena.snapshot()
    with warnings.catch_warnings():
        # Empty reductions and ddof >= n warn as NumPy does; other tests check that.
        warnings.simplefilter("ignore", RuntimeWarning)
        if expect is not None:
            with pytest.raises(expect):
                call()
            ex.arena.assert_unchanged(f"{ex.func} (rejected: {ex.fault})")
            return
        result = call()
    for w in ex.writes:
        ex.arena.may_write(w)
    ex.arena.assert_unchanged(ex.func)
    check(result)


# --------------------------------------------------------------------------
# the functions

def fuzz_mean_var(ex):
    if ex.fault == "huge":
        x, axis = ex.huge((2**40, 2)), -1
        return lambda: fastnorm.mean_var(x, axis=axis), MemoryError, None
    shape = ex.shape()
    nd = len(shape)
    axis = ex.axis(nd)
    valid_axes = ex.fault not in AXIS_FAULTS
    axes = tuple(sorted(a % nd for a in np.atleast_1d(axis).tolist())) if (
        axis is not None and valid_axes) else tuple(range(nd))
    x = ex.input_array(shape, axes)
    ddof = "a" if ex.fault == "ddof_type" else ex.draw([0, 1, 2], "ddof")
    keepdims = ex.flag("keepdims", 0.5)
    dtype = ex.req_dtype()
    expect = FAULTS["mean_var"].get(ex.fault)
    if expect is not None and ex.fault not in ("out_shape", "out_dtype", "out_readonly",
                                               "out_type", "out_bare"):
        return (lambda: fastnorm.mean_var(x, axis=axis, ddof=ddof, keepdims=keepdims,
                                          dtype=dtype)), expect, None
    res_dt = out_dtype(_dtype_of(x), dtype)
    rshape = keep_shape(shape, axes) if keepdims else tuple(
        s for i, s in enumerate(shape) if i not in axes)
    out = None
    if ex.fault == "out_bare":
        out = np.empty(rshape, res_dt)
    elif ex.fault.startswith("out_") or ex.flag("out", 0.5):
        out = tuple(ex.out_array(rshape, res_dt, f"out[{k}]", alias_of=(x,))
                    if k == 0 or ex.flag(f"out[{k}] given", 0.7) else None for k in range(2))
    xv = _f64(x)

    def check(res):
        assert isinstance(res, tuple) and len(res) == 2
        n = math.prod(shape[a] for a in axes)
        _, mean, m2, _, spread = moments(xv, axes)
        with np.errstate(divide="ignore", invalid="ignore"):
            var = m2 / max(n - ddof, 0) if n > 0 else m2
        tout, tacc = tolerances(_dtype_of(x), res_dt)
        scale = n / max(n - ddof, 1)
        for k, (got, exp, extra) in enumerate(((res[0], mean, spread),
                                               (res[1], var, spread**2 * scale))):
            exp = np.reshape(exp, rshape)
            allowed = tout * np.abs(exp) + tacc * np.reshape(extra, rshape) + tiny(res_dt)
            if out is None and not rshape:
                assert isinstance(got, np.generic), f"a full reduction gives a scalar, {type(got)}"
                got = np.asarray(got)
            _check_array(got, exp, allowed, res_dt, rshape, ("mean", "var")[k],
                         None if out is None else out[k])

    return (lambda: fastnorm.mean_var(x, axis=axis, ddof=ddof, keepdims=keepdims, dtype=dtype,
                                      out=out)), FAULTS["mean_var"].get(ex.fault), check


def _stats_outs(ex, n_stats, sshape, sdt):
    return [ex.out_array(sshape, sdt, f"out[{k + 1}]") if ex.flag(f"out[{k + 1}] given", 0.4)
            else None for k in range(n_stats)]


def _out_argument(ex, x, shape, res_dt, n_stats, sshape, sdt, alias_of, return_stats):
    """out= of a normalizer: None, an array, or a tuple with statistics outs."""
    if not (ex.fault.startswith("out_") or ex.flag("out", 0.5)):
        return None, None, [None] * n_stats
    y_out = ex.out_array(shape, res_dt, "out", alias_of=alias_of,
                         inplace=ex.inplace_candidate(x, res_dt))
    if not return_stats:
        return y_out, y_out, [None] * n_stats
    stats = _stats_outs(ex, n_stats, sshape, sdt)
    return (y_out, *stats), y_out, stats


def fuzz_normalizer(ex):
    """layer_norm and rms_norm."""
    func = ex.func
    if ex.fault == "huge":
        x = ex.huge((2**20, 2**21))
        return lambda: getattr(fastnorm, func)(x), MemoryError, None
    shape = ex.shape()
    nd = len(shape)
    axis = ex.axis(nd, default=None) if nd or ex.fault in AXIS_FAULTS else None
    if ex.fault in AXIS_FAULTS:
        x = ex.input_array(shape, ())
        return (lambda: getattr(fastnorm, func)(x, axis=axis)), FAULTS[func][ex.fault], None
    if nd == 0:
        axis = None  # the default axis=-1 needs a dimension
    axes = tuple(range(nd)) if axis is None else tuple(
        sorted(a % nd for a in np.atleast_1d(axis).tolist()))
    x = ex.input_array(shape, axes)
    gamma = ex.param(shape, axes, "gamma")
    beta = ex.param(shape, axes, "beta", role="beta") if func == "layer_norm" else None
    eps, dtype = ex.eps(), ex.req_dtype()
    return_stats = ex.flag("return_stats", 0.5)
    n_stats = 2 if func == "layer_norm" else 1
    expect = FAULTS[func].get(ex.fault)
    res_dt = _result_dtype(ex, x, dtype)
    sdt = stat_dtype(res_dt)
    sshape = keep_shape(shape, axes)
    out, y_out, stats_out = (None, None, [None] * n_stats)
    if expect is None or ex.fault.startswith("out_"):
        out, y_out, stats_out = _out_argument(ex, x, shape, res_dt, n_stats, sshape, sdt,
                                              (x, gamma, beta), return_stats)
    kw = dict(axis=axis, eps=eps, out=out, dtype=dtype, return_stats=return_stats)
    if func == "layer_norm":
        def call():
            return fastnorm.layer_norm(x, gamma, beta, **kw)
    else:
        def call():
            return fastnorm.rms_norm(x, gamma, **kw)
    if expect is not None:
        return call, expect, None
    xv, g, b = _f64(x), expand_param(_f64(gamma), shape, axes), expand_param(_f64(beta), shape,
                                                                               axes)

    def check(res):
        y, stats = (res[0], res[1:]) if return_stats else (res, ())
        assert len(stats) == (n_stats if return_stats else 0)
        tout, tacc = tolerances(_dtype_of(x), res_dt)
        st_tol = OUT_TOL[sdt]
        with np.errstate(invalid="ignore", over="ignore"):
            if func == "layer_norm":
                yr, mr, rr, xhat, spread = ref_layer_norm(xv, axes, g, b, eps)
                _check_array(y, yr, _norm_allowed(res_dt, _dtype_of(x), g, b, xhat, rr, spread),
                             res_dt, shape, "y", y_out)
                if stats:
                    _check_array(stats[0], mr, st_tol * np.abs(mr) + tacc * spread + tiny(sdt),
                                 sdt, sshape, "mean", stats_out[0])
                    _check_array(stats[1], rr, rr * (st_tol + tacc * spread**2 * rr**2)
                                 + tiny(sdt), sdt, sshape, "rstd", stats_out[1])
            else:
                yr, rr = ref_rms_norm(xv, axes, g, eps)
                gabs = 1.0 if g is None else np.abs(g)
                _check_array(y, yr, (tout + tacc) * gabs * np.abs(xv) * rr + tiny(res_dt),
                             res_dt, shape, "y", y_out)
                if stats:
                    _check_array(stats[0], rr, rr * (st_tol + tacc) + tiny(sdt), sdt, sshape,
                                 "rstd", stats_out[0])

    return call, None, check


def _running(ex, shape, kept, training, writable=True):
    """(running_mean, running_var), writable float arrays in drawn layouts."""
    named = tuple(shape[i] for i in kept)
    keep = tuple(shape[i] if i in kept else 1 for i in range(len(shape)))
    form = ex.draw(["named", "keepdims"], "running form")
    rm = ex.rng.standard_normal(named)
    rv = ex.rng.uniform(0.5, 2.0, named)
    if form == "keepdims":
        rm, rv = rm.reshape(keep), rv.reshape(keep)
    dtype = ex.draw(["float64", "float32", "float16"], "running dtype")
    rm = ex.hostile(rm, dtype, "running_mean", writable=writable)
    rv = ex.hostile(rv, dtype, "running_var", writable=writable)
    if training:
        ex.writes += [rm, rv]
    return rm, rv


# Faults of batch norm's training mode (eval has no batch statistics and
# treats the running statistics as plain inputs).
TRAINING_FAULTS = ("one_per_feature", "running_readonly", "running_list", "running_int",
                   "momentum_value", "momentum_type", "running_is_out")


def fuzz_batch_norm(ex):
    if ex.fault == "huge":
        x = ex.huge((2**20, 3, 2**20))
        return lambda: fastnorm.batch_norm(x), MemoryError, None
    fault = ex.fault
    shape = ex.shape(min_nd=1, max_nd=1 if fault == "x_1d_axis_none" else 4)
    nd = len(shape)
    if fault in AXIS_FAULTS:
        axis = ex.axis(nd)
        x = ex.input_array(shape, ())
        return (lambda: fastnorm.batch_norm(x, axis=axis)), FAULTS["batch_norm"][fault], None
    if fault in TRAINING_FAULTS:
        # Over axis 0 of (n, ...): one value per feature for that fault, else n >= 2.
        shape = (1 if fault == "one_per_feature" else max(2, shape[0]),) + shape[1:]
        axis = 0
    elif fault == "x_1d_axis_none":
        axis = None
    else:
        axis = ex.axis(nd, allow_none=nd >= 2, default=None)
        if axis is None and nd < 2:
            axis = 0
    axes = (tuple(i for i in range(nd) if i != 1) if axis is None and nd >= 2
            else (0,) if axis is None
            else tuple(sorted(a % nd for a in np.atleast_1d(axis).tolist())))
    kept = tuple(i for i in range(nd) if i not in axes)
    n = math.prod(shape[i] for i in axes)
    training = fault in TRAINING_FAULTS or (fault != "eval_no_running" and n > 1
                                            and ex.flag("training", 0.6))
    x = ex.input_array(shape, axes)
    gamma = ex.param(shape, kept, "gamma")
    beta = ex.param(shape, kept, "beta", role="beta")
    eps, dtype = ex.eps(), ex.req_dtype()
    momentum = ex.draw([0.1, 0.0, 0.5, 1.0], "momentum")
    if fault == "momentum_value":
        momentum = ex.draw([float("nan"), float("inf")], "momentum")
    elif fault == "momentum_type":
        momentum = ex.draw(["a", None, [0.1]], "momentum")
    want_running = not training or fault.startswith("running") or ex.flag("running", 0.6)
    rm = rv = None
    if fault != "eval_no_running" and want_running:
        rm, rv = _running(ex, shape, kept, training)
        if fault == "running_half":
            rv = None
        elif fault == "running_readonly":
            rv.flags.writeable = False
        elif fault == "running_list":
            rm = np.asarray(rm).tolist()
        elif fault == "running_int":
            rm = np.zeros(np.shape(rm), dtype=np.int64)
    return_stats = ex.flag("return_stats", 0.5)
    expect = FAULTS["batch_norm"].get(fault)
    res_dt = _result_dtype(ex, x, dtype)
    sdt = stat_dtype(res_dt)
    sshape = keep_shape(shape, axes)
    out, y_out, stats_out = None, None, [None, None]
    if fault == "running_is_out":
        # An output that is also an in-place running statistic.
        y_out = ex.arena.alias(rm, shape, res_dt)
        out = y_out
    elif expect is None or fault.startswith("out_"):
        out, y_out, stats_out = _out_argument(ex, x, shape, res_dt, 2, sshape, sdt,
                                              (x, gamma, beta, rm, rv) if not training
                                              else (x, gamma, beta), return_stats)
    kw = dict(training=training, momentum=momentum, eps=eps, axis=axis, dtype=dtype,
              out=out, return_stats=return_stats)

    def call():
        return fastnorm.batch_norm(x, gamma, beta, rm, rv, **kw)

    if expect is not None:
        if fault == "running_is_out" and (y_out is None or not np.shares_memory(y_out, rm)):
            expect = None   # no room for the alias, or nothing shared: an ordinary call
            if y_out is not None:
                ex.writes.append(y_out)
        else:
            return call, expect, None
    xv = _f64(x)
    g, b = expand_param(_f64(gamma), shape, kept), expand_param(_f64(beta), shape, kept)
    rmv = None if rm is None else expand_param(_f64(rm), shape, kept)
    rvv = None if rv is None else expand_param(_f64(rv), shape, kept)

    def check(res):
        y, stats = (res[0], res[1:]) if return_stats else (res, ())
        tout, tacc = tolerances(_dtype_of(x), res_dt)
        st_tol = OUT_TOL[sdt]
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            if training:
                yr, mr, rr, xhat, spread = ref_layer_norm(xv, axes, g, b, eps)
                allowed = _norm_allowed(res_dt, _dtype_of(x), g, b, xhat, rr, spread)
            else:
                mr, rr = rmv, 1 / np.sqrt(rvv + eps)
                xhat = (xv - mr) * rr
                yr = xhat * (1.0 if g is None else g) + (0.0 if b is None else b)
                spread = np.zeros(sshape)
                gabs = 1.0 if g is None else np.abs(g)
                allowed = (_norm_allowed(res_dt, _dtype_of(x), g, b, xhat, rr, 0.0)
                           + tacc * gabs * rr * (np.abs(xv) + np.abs(mr)))
            _check_array(y, yr, allowed, res_dt, shape, "y", y_out)
            if stats:
                _check_array(stats[0], mr, st_tol * np.abs(mr) + tacc * spread + tiny(sdt),
                             sdt, sshape, "mean", stats_out[0])
                _check_array(stats[1], rr, rr * (st_tol + tacc * spread**2 * rr**2) + tiny(sdt),
                             sdt, sshape, "rstd", stats_out[1])
            if training and rm is not None:
                _, _, m2, _, _ = moments(xv, axes)
                new_m, new_v = ref_running_update(rmv, rvv, mr, m2 / n, n, momentum)
                rdt = rm.dtype.newbyteorder("=")
                rtol = OUT_TOL[rdt]
                # (float16 running statistics overflow to inf past 65504.)
                new_m, new_v = (np.where(np.isinf(a.astype(rdt)), a.astype(rdt), a)
                                for a in (new_m, new_v))
                assert_close(expand_param(_f64(rm), shape, kept), new_m,
                             rtol * np.abs(new_m) + momentum * tacc * spread + tiny(rdt),
                             "running_mean")
                assert_close(expand_param(_f64(rv), shape, kept), new_v,
                             rtol * np.abs(new_v) + momentum * tacc * spread**2 * n / (n - 1)
                             + tiny(rdt), "running_var")

    return call, None, check


def _group_shape(ex, min_nd=2):
    """(shape, channel axis as the caller writes it, its index, num_groups)."""
    nd = ex.data.draw(st.integers(min_nd, 4), label="ndim")
    shape = [ex.draw([1, 2, 3, 5] if nd == 4 else [1, 2, 3, 5, 8, 17], f"side {i}")
             for i in range(nd)]
    ch = ex.data.draw(st.integers(1, nd - 1), label="channel axis")
    shape[ch] = ex.draw([1, 2, 4, 6, 12], "channels")
    ex.sized(shape)
    c = shape[ch]
    groups = ex.draw([g for g in range(1, c + 1) if c % g == 0], "num_groups")
    return tuple(shape), (ch - nd if ex.flag("negative channel axis", 0.5) else ch), ch, groups


def _group_faults(ex, shape, ch_arg, groups):
    """Apply the drawn group fault: (x shape, channel_axis, num_groups)."""
    nd, fault = len(shape), ex.fault
    c = shape[ch_arg % nd]
    if fault == "groups_divide":
        groups = ex.draw([0, -1, c + 1] + ([c - 1] if c > 2 else []), "bad num_groups")
    elif fault == "groups_type":
        groups = ex.draw([float(groups), str(groups), None], "bad num_groups")
    elif fault == "channel_zero":
        ch_arg = ex.draw([0, -nd], "channel_axis")
    elif fault == "channel_range":
        ch_arg = ex.draw([nd, -nd - 1], "channel_axis")
    elif fault == "x_1d":
        shape = shape[:1]
    return shape, ch_arg, groups


def fuzz_group_norm(ex):
    func = ex.func
    if ex.fault == "huge":
        x = ex.huge((2**20, 4, 2**20))
        return (lambda: fastnorm.group_norm(x, 2) if func == "group_norm"
                else fastnorm.instance_norm(x)), MemoryError, None
    shape, ch_arg, ch, groups = _group_shape(ex)
    if func == "instance_norm":
        groups = shape[ch]
    shape, ch_arg, groups = _group_faults(ex, shape, ch_arg, groups)
    x = ex.input_array(shape, ())
    expect = FAULTS[func].get(ex.fault)
    if expect is not None and ex.fault in GROUP_FAULTS:
        if func == "group_norm":
            return (lambda: fastnorm.group_norm(x, groups, channel_axis=ch_arg)), expect, None
        return (lambda: fastnorm.instance_norm(x, channel_axis=ch_arg)), expect, None
    nd = len(shape)
    c = shape[ch]
    gamma = ex.param(shape, (ch,), "gamma", partial=False)
    beta = ex.param(shape, (ch,), "beta", role="beta", partial=False)
    eps, dtype = ex.eps(), ex.req_dtype()
    return_stats = ex.flag("return_stats", 0.5)
    res_dt = _result_dtype(ex, x, dtype)
    sdt = stat_dtype(res_dt)
    sshape = tuple(shape[0] if i == 0 else (groups if i == ch else 1) for i in range(nd))
    out, y_out, stats_out = None, None, [None, None]
    if expect is None or ex.fault.startswith("out_"):
        out, y_out, stats_out = _out_argument(ex, x, shape, res_dt, 2, sshape, sdt,
                                              (x, gamma, beta), return_stats)
    kw = dict(channel_axis=ch_arg, eps=eps, out=out, dtype=dtype, return_stats=return_stats)
    if func == "group_norm":
        def call():
            return fastnorm.group_norm(x, groups, gamma, beta, **kw)
    else:
        def call():
            return fastnorm.instance_norm(x, gamma, beta, **kw)
    if expect is not None:
        return call, expect, None
    xv, gv, bv = _f64(x), _f64(gamma), _f64(beta)

    def check(res):
        y, stats = (res[0], res[1:]) if return_stats else (res, ())
        yr, mr, rr = ref_group_norm(xv, groups, ch, gv, bv, eps)
        # Tolerances from the split view's statistics.
        vshape = shape[:ch] + (groups, c // groups) + shape[ch + 1:]
        vaxes = tuple(i for i in range(1, nd + 1) if i != ch)
        _, _, _, xhat, spread = ref_layer_norm(xv.reshape(vshape), vaxes, eps=eps)
        keep = [1] * (nd + 1)
        keep[ch], keep[ch + 1] = groups, c // groups
        g = None if gv is None else gv.reshape(keep)
        b = None if bv is None else bv.reshape(keep)
        rv = rr.reshape(keep_shape(vshape, vaxes))
        allowed = _norm_allowed(res_dt, _dtype_of(x), g, b, xhat, rv, spread.reshape(rv.shape))
        _check_array(y, yr, np.reshape(allowed, shape), res_dt, shape, "y", y_out)
        if stats:
            _, tacc = tolerances(_dtype_of(x), res_dt)
            st_tol = OUT_TOL[sdt]
            sp = spread.reshape(sshape)
            with np.errstate(invalid="ignore", over="ignore"):
                _check_array(stats[0], mr, st_tol * np.abs(mr) + tacc * sp + tiny(sdt),
                             sdt, sshape, "mean", stats_out[0])
                _check_array(stats[1], rr, rr * (st_tol + tacc * sp**2 * rr**2) + tiny(sdt),
                             sdt, sshape, "rstd", stats_out[1])

    return call, None, check


def fuzz_weight(ex):
    func = ex.func
    if ex.fault == "huge":
        v = ex.huge((2**20, 2**21))
        return lambda: getattr(fastnorm, func)(v), MemoryError, None
    shape = ex.shape(min_nd=0 if func == "weight_norm" else 1)
    nd = len(shape)
    axis = ex.axis(nd, default=None)
    if ex.fault in AXIS_FAULTS:
        v = ex.input_array(shape, ())
        return (lambda: getattr(fastnorm, func)(v, axis=axis)), FAULTS[func][ex.fault], None
    axes = tuple(range(1, nd)) if axis is None else tuple(
        sorted(a % nd for a in np.atleast_1d(axis).tolist()))
    kept = tuple(i for i in range(nd) if i not in axes)
    v = ex.input_array(shape, axes)
    expect = FAULTS[func].get(ex.fault)
    if func == "weight_norm":
        g = ex.param(shape, kept, "gamma", role="gamma")
        return_norm = ex.flag("return_norm", 0.5)

        def call():
            return fastnorm.weight_norm(v, g, axis=axis, return_norm=return_norm)
    else:
        eps = ex.eps()

        def call():
            return fastnorm.weight_standardize(v, axis=axis, eps=eps)
    if expect is not None:
        return call, expect, None
    vv = _f64(v)
    res_dt = out_dtype(_dtype_of(v))
    sdt = stat_dtype(res_dt)

    def check(res):
        tout, tacc = tolerances(_dtype_of(v), res_dt)
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            if func == "weight_norm":
                gk = expand_param(_f64(g), shape, kept)
                w, norm = (res if return_norm else (res, None))
                wr, nr = ref_weight_norm(vv, axes, gk)
                gabs = 1.0 if gk is None else np.abs(gk)
                _check_array(w, wr, (tout + tacc) * gabs * np.abs(vv) / nr + tiny(res_dt),
                             res_dt, shape, "w")
                if return_norm:
                    _check_array(norm, nr, (OUT_TOL[sdt] + tacc) * nr + tiny(sdt), sdt,
                                 keep_shape(shape, axes), "norm")
            else:
                yr, _, rr, xhat, spread = ref_layer_norm(vv, axes, eps=eps)
                _check_array(res, yr, _norm_allowed(res_dt, _dtype_of(v), None, None, xhat, rr,
                                                    spread), res_dt, shape, "w_hat")

    return call, None, check


# gradients -----------------------------------------------------------------

GRAD_DTYPES = list(FLOAT_DTYPES) * 3 + ["int16", "bool"]


def _stat_arg(ex, value, kept_shape, label):
    """A statistic as the caller passes it: keepdims layout or the kept
    shape, float64 (maybe byte-swapped, misaligned) or float32 for
    float32 data."""
    if ex.fault == "stat_shape" and label == "rstd":
        shape = np.shape(value)
        return np.ones(shape[:-1] + (shape[-1] + 2,) if shape else (2,))
    if ex.fault == "stat_dtype" and label == "rstd":
        return np.ones(np.shape(value), dtype=np.complex128)
    if kept_shape is not None and ex.flag(f"{label} in the kept shape", 0.3):
        value = np.reshape(value, kept_shape)
    # Not broadcast or overlapping: those would change the values.
    return ex.hostile(value, "float64", label, layouts=["C", "F", "permuted", "reversed"])


def fuzz_backward(ex):
    func = ex.func
    kind = func.split("_")[0]       # layer, rms, batch, group
    if ex.fault == "huge":
        x = ex.huge((2**20, 2**21))
        row = np.broadcast_to(np.float64(1.0), (2**20, 1))   # per-row statistics
        col = np.broadcast_to(np.float64(1.0), (1, 2**21))   # per column: batch norm, axis 0
        calls = {"layer": lambda: fastnorm.layer_norm_backward(x, x, row, row),
                 "rms": lambda: fastnorm.rms_norm_backward(x, x, row),
                 "batch": lambda: fastnorm.batch_norm_backward(x, x, col, col, axis=0),
                 "group": lambda: fastnorm.group_norm_backward(x, x, row, row, 1)}
        return calls[kind], MemoryError, None
    fault = ex.fault
    if kind == "group":
        shape, ch_arg, ch, groups = _group_shape(ex)
        shape, ch_arg, groups = _group_faults(ex, shape, ch_arg, groups)
        if fault in GROUP_FAULTS:
            x = ex.input_array(shape, ())
            stat = np.ones((shape[0],) + (1,) * (len(shape) - 1))
            return (lambda: fastnorm.group_norm_backward(x, x, stat, stat, groups,
                                                         channel_axis=ch_arg)), \
                FAULTS[func][fault], None
        nd = len(shape)
        along = (ch,)
    else:
        shape = ex.shape(min_nd=2 if kind == "batch" else 1)
        nd = len(shape)
        if kind == "batch":
            axis = ex.axis(nd, allow_none=True, default=None)
        else:
            axis = ex.axis(nd, allow_none=False)
        if fault in AXIS_FAULTS:
            x = ex.input_array(shape, ())
            stat = np.ones(shape)
            call = {"layer": lambda: fastnorm.layer_norm_backward(x, x, stat, stat, axis=axis),
                    "rms": lambda: fastnorm.rms_norm_backward(x, x, stat, axis=axis),
                    "batch": lambda: fastnorm.batch_norm_backward(x, x, stat, stat, axis=axis)}
            return call[kind], FAULTS[func][fault], None
        if kind == "batch" and axis is None:
            axes = tuple(i for i in range(nd) if i != 1)
        else:
            axes = tuple(sorted(a % nd for a in np.atleast_1d(axis).tolist()))
        along = axes if kind in ("layer", "rms") else tuple(i for i in range(nd) if i not in axes)
    x = ex.input_array(shape, (), dtypes=GRAD_DTYPES)
    dshape = _one_longer(shape) if fault == "dy_shape" else shape
    dy = ex.input_array(dshape, (), label="dy", dtypes=GRAD_DTYPES)
    expect = FAULTS[func].get(fault)
    if fault in ("x_dtype", "x_object", "x_ragged"):
        xv = np.zeros(shape)
    else:
        xv = _f64(x)
    eps = ex.draw([1e-5, 1e-3, 0.1], "eps")
    training = kind != "batch" or math.prod(shape[i] for i in axes) > 1 and ex.flag(
        "training", 0.7)
    gamma = ex.param(shape, along, "gamma", partial=kind != "group")
    # The statistics the forward would have returned, from the reference.
    with np.errstate(all="ignore"):
        if kind == "group":
            _, mean_r, rstd_r = ref_group_norm(xv, groups, ch, eps=eps)
            kept_shape = None
        elif kind == "rms":
            _, rstd_r = ref_rms_norm(xv, axes, eps=eps)
            mean_r = np.zeros_like(rstd_r)
            kept_shape = tuple(shape[i] for i in range(nd) if i not in axes)
        elif kind == "batch" and not training:
            ks = keep_shape(shape, axes)
            mean_r = ex.rng.standard_normal(ks)
            rstd_r = 1 / np.sqrt(ex.rng.uniform(0.5, 2.0, ks) + eps)
            kept_shape = tuple(shape[i] for i in range(nd) if i not in axes)
        else:
            _, mean_r, rstd_r, _, _ = ref_layer_norm(xv, axes, eps=eps)
            kept_shape = tuple(shape[i] for i in range(nd) if i not in axes)
    mean = _stat_arg(ex, mean_r, kept_shape, "mean")
    rstd = _stat_arg(ex, rstd_r, kept_shape, "rstd")

    dt = None
    if expect is None or fault.startswith("out_"):
        # as fastnorm computes it: integers and bool as float64, then the wider
        dt = np.promote_types(out_dtype(_dtype_of(x)), out_dtype(_dtype_of(dy)))
    named = tuple(shape[i] for i in along)
    pshape = named if gamma is None else np.shape(gamma)
    gdt = None if gamma is None else np.asarray(gamma).dtype
    pdt = gdt.newbyteorder("=") if gdt is not None and gdt.kind == "f" else (
        F64 if dt == F64 else F32)
    out, outs = None, [None, None, None]
    n_out = 2 if kind == "rms" else 3
    if dt is not None and (fault.startswith("out_") or ex.flag("out", 0.5)):
        inplace = ex.inplace_candidate(dy, dt)
        if inplace is None or ex.flag("in place on x", 0.5):
            inplace = ex.inplace_candidate(x, dt) if ex.inplace_candidate(x, dt) is not None \
                else inplace
        outs[0] = ex.out_array(shape, dt, "out", alias_of=(x, dy, gamma, mean, rstd),
                               inplace=inplace)
        if ex.flag("parameter outs", 0.4):
            for k in range(1, n_out):
                if ex.flag(f"out[{k}] given", 0.6):
                    outs[k] = ex.out_array(pshape, pdt, f"out[{k}]")
            out = tuple(outs[:n_out])
        else:
            out = outs[0]

    def call():
        if kind == "layer":
            return fastnorm.layer_norm_backward(dy, x, mean, rstd, gamma, axis=axis, out=out)
        if kind == "rms":
            return fastnorm.rms_norm_backward(dy, x, rstd, gamma, axis=axis, out=out)
        if kind == "batch":
            return fastnorm.batch_norm_backward(dy, x, mean, rstd, gamma, axis=axis,
                                                training=training, out=out)
        return fastnorm.group_norm_backward(dy, x, mean, rstd, groups, gamma,
                                            channel_axis=ch_arg, out=out)
    if expect is not None:
        return call, expect, None
    dyv, gv = _f64(dy), _f64(gamma)

    def check(res):
        with np.errstate(all="ignore"):
            if kind == "group":
                ref = ref_group_norm_grads(dyv, xv, groups, ch, gv, eps)
            else:
                mode = {"layer": "center", "rms": "rms"}.get(
                    kind, "center" if training else "scale")
                stats = (mean_r, rstd_r) if mode == "scale" else None
                ref = ref_norm_grads(dyv, xv, axes, along, expand_param(gv, shape, along), mode,
                                     eps, stats)
        tol = {F64: 1e-12, F32: 1e-5, F16: 4e-3}[dt]
        dx = res[0]
        _check_array(dx, ref["dx"], tol * ref["dx_scale"] + tiny(dt), dt, shape, "dx", outs[0])
        # float64 sums of many terms: 1e-12 plus the rounding of each addition.
        terms = math.prod(shape) / max(1, math.prod(pshape))
        ptol = max(OUT_TOL[pdt], 1e-12 + 2.3e-16 * terms if dt == F64 else 1e-5)
        # float16/float32 data: xhat is x * rstd - mean * rstd (one FMA), off
        # by the rounding of mean * rstd, even where it is exactly 0.
        with np.errstate(all="ignore"):
            xhat_err = 0.0 if dt == F64 else 4e-16 * (
                np.max(np.abs(xv), initial=0.0) * np.nanmax(np.abs(rstd_r), initial=0.0))
        names = ("dgamma", "dbeta")[:n_out - 1]
        assert len(res) == n_out
        for k, name in enumerate(names, start=1):
            exp = np.reshape(ref[name], pshape)
            allowed = ptol * np.reshape(ref[name + "_scale"], pshape) + tiny(pdt)
            if name == "dgamma":
                allowed = allowed + xhat_err * np.reshape(ref["dbeta_scale"], pshape)
            _check_array(res[k], exp, allowed, pdt, pshape, name, outs[k])

    return call, None, check


MAKERS = {
    "mean_var": fuzz_mean_var,
    "layer_norm": fuzz_normalizer,
    "rms_norm": fuzz_normalizer,
    "batch_norm": fuzz_batch_norm,
    "group_norm": fuzz_group_norm,
    "instance_norm": fuzz_group_norm,
    "weight_norm": fuzz_weight,
    "weight_standardize": fuzz_weight,
    **{f: fuzz_backward for f in BACKWARD},
}


@pytest.mark.parametrize("func", FORWARD + BACKWARD)
@FUZZ
@given(data=st.data())
def test_fuzz(func, data):
    ex = Example(func, data)
    fastnorm.set_num_threads(ex.draw([None, 1, 2, 3], "threads"))
    call, expect, check = MAKERS[func](ex)
    run(ex, call, expect, check)
