"""Argument handling shared by every public function: the conversions of
array_likes, parameter shapes, ``where=`` and the errors that name what is
wrong.  The rules the small calls' path applies too (dtype admission, axes,
eps, momentum, groups, ``out=``, where a result is written) are the
kernels' own (src/rules.pxi), used here."""
import functools
import math
import os
import sys
import warnings

import numpy as np

from . import _simd

# The rules (the same in every kernel module).
_rules = _simd.kernels
behaved = _rules.behaved
result_dtypes, param_grad_dtype = _rules.result_dtypes, _rules.param_grad_dtype
axes_tuple, batch_axes = _rules.axes_tuple, _rules.batch_axes
check_eps, check_out = _rules.check_eps, _rules.check_out

_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep
from ._explain import copied

FLOAT_DTYPES = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))
_F64 = np.dtype(np.float64)

# Shape and axis bookkeeping depends only on (shape, axis); a training loop
# asks the same questions every step, so the answers are kept.
_cached = functools.lru_cache(maxsize=512)


def as_input(x, name="x"):
    """x as an ndarray the kernels can read without copying when possible.

    float16/32/64 arrays are used as they are (any strides).  Integer and
    bool arrays are converted to float64, as ``np.mean`` does; that, and
    non-native byte order or misaligned data, costs one copy.  Other dtypes
    raise TypeError.
    """
    if behaved(x):
        return x  # the common case, decided without the checks below
    refuse_lossy(x, name)
    a = np.asarray(x)
    dt = a.dtype
    if dt.kind in "iub":
        copied(f"{name}: {dt} converted to float64")
        return a.astype(np.float64)
    if dt.kind != "f":
        raise TypeError(f"{name} has dtype {dt}; fastnorm needs real numbers "
                        "(float16, float32, float64, integers or bool)")
    if dt.newbyteorder("=") not in FLOAT_DTYPES:
        raise TypeError(f"{name} has dtype {dt}; fastnorm computes in float16, "
                        "float32 or float64 (convert it first)")
    if not dt.isnative or not a.flags.aligned:
        copied(f"{name}: copied to aligned native {dt.newbyteorder('=')}")
        a = np.array(a, dtype=dt.newbyteorder("="), order="K")
    elif not isinstance(x, np.ndarray):
        copied(f"{name}: {type(x).__name__} converted to an ndarray")
    return a


def as_where(where, shape):
    """where= as the kernels read it: None when it selects everything (None
    or True), else a boolean array broadcast to `shape` (no copy), viewed
    as bytes.  Non-boolean masks are refused as NumPy refuses them."""
    if where is None or where is True:
        return None
    w = np.asarray(where)
    if w.dtype != np.bool_:
        raise TypeError(f"where must be a boolean array_like, got dtype {w.dtype} "
                        "(NumPy's where= takes booleans only)")
    if w.ndim > len(shape):
        raise ValueError(f"where of shape {w.shape} has more dimensions than x {shape}")
    try:
        w = np.broadcast_to(w, shape)
    except ValueError:
        raise ValueError(f"where of shape {w.shape} does not broadcast to x's shape "
                         f"{shape}") from None
    return w.view(np.uint8)


NAN_POLICIES = ("propagate", "omit", "raise")


def nan_policy_of(policy):
    """nan_policy= as SciPy spells it, or ValueError naming what it takes."""
    if isinstance(policy, str) and policy in NAN_POLICIES:
        return policy
    raise ValueError(f"nan_policy must be one of 'propagate', 'omit' or 'raise', "
                     f"got {policy!r}")


def refuse_lossy(x, name):
    """TypeError for an input that np.asarray would strip of its meaning: a
    masked array with masked values (where= functions take those apart
    first), an ndarray subclass that takes over NumPy's ufuncs or functions
    (units), or a duck array that implements NumPy's functions itself
    (__array_function__: units, labelled axes, device memory).  Array-likes
    that only convert (lists, pandas' containers) are converted."""
    if isinstance(x, np.ma.MaskedArray):
        if np.ma.getmask(x) is not np.ma.nomask and np.ma.getmask(x).any():
            raise TypeError(f"{name} is a masked array with masked values; this function "
                            "does not take masks (fill them, or compress the data, first)")
        return
    t = type(x)
    if t is np.ndarray:
        return
    if isinstance(x, np.ndarray):
        own = (t.__array_function__ is not np.ndarray.__array_function__
               or t.__array_ufunc__ is not np.ndarray.__array_ufunc__)
    else:
        own = hasattr(t, "__array_function__")
    if own:
        raise TypeError(f"{name}: {t.__module__}.{t.__qualname__} defines its own NumPy "
                        "semantics (a unit, a mask, coordinates or device memory) that "
                        "converting it would drop; convert it yourself (np.asarray) if "
                        "that is what you want")


@_cached
def reduced_mask(axes, ndim):
    return tuple(i in axes for i in range(ndim))


@_cached
def keepdims_shape(shape, axes):
    """shape with the reduced axes set to 1 (the statistics' layout)."""
    return tuple(1 if i in axes else s for i, s in enumerate(shape))


@_cached
def _param_shapes(x_shape, along):
    """(named shape, keepdims layout) of a parameter that varies along `along`."""
    named = tuple(x_shape[i] for i in along)
    keep = tuple(x_shape[i] if i in along else 1 for i in range(len(x_shape)))
    return named, keep


def check_training(x_shape, axes, momentum, where=None, counted=False):
    """batch_norm training's checks: (n, momentum), n the number of values
    per feature (not one; none is an empty batch), momentum a finite float.
    With a where= mask (as_where's bytes), no feature may have exactly one
    selected value (selected_values); a feature with none selected is an
    empty reduction, whatever the batch's size.  counted: the caller checks
    the counts the kernel gives instead, before anything it wrote is seen
    (the mask's own count is a serial pass).  A lazy (Dask) mask's counts
    are checked where they are computed."""
    n = math.prod(x_shape[i] for i in axes)
    if where is None:
        _rules.check_training_values(n, x_shape, axes)
    elif isinstance(where, np.ndarray) and n > 0 and not counted:
        # Counted over the mask's own values: a broadcast (N, T, 1) mask is
        # N * T bytes, not x's size; an axis it repeats multiplies the count.
        w = where.view(np.bool_)
        own = tuple(slice(0, 1) if w.strides[i] == 0 else slice(None) for i in range(w.ndim))
        repeats = math.prod(w.shape[i] for i in axes if w.strides[i] == 0)
        # (count_nonzero sums in intp: int32 sums run twice as fast)
        counts = np.add.reduce(w[own], axis=axes,
                               dtype=np.int32 if n < 2**31 else np.intp) * repeats
        selected_values(counts)
    return n, _rules.check_momentum(momentum)


def selected_values(counts):
    """batch_norm training with where=: no feature's count of selected
    values may be one."""
    if np.any(counts == 1):
        raise ValueError("batch_norm training needs more than one selected value per "
                         "feature; where= selects one value of some feature")


def param(value, name, x_shape, along, x_name="x"):
    """A parameter (gamma, beta, running statistics) as float64 in keepdims
    layout: x.ndim dimensions, x's size along the axes in `along`, 1 elsewhere.

    Accepted: exactly the named shape (x's sizes along `along`, in order) or
    x.ndim dimensions that broadcast to x and vary only along `along`.
    """
    if value is None:
        return None
    named, keep = _param_shapes(tuple(x_shape), tuple(along))
    if type(value) is np.ndarray and value.shape == named:
        # The common case, a float array of the named shape: the small
        # calls' conversion (False for any other array).
        p = _rules.param_named(value, reduced_mask(tuple(along), len(x_shape)), tuple(x_shape))
        if p is not False:
            return p
    a = np.asarray(value)
    if a.dtype.kind not in "fiub":
        raise TypeError(f"{name} has dtype {a.dtype}; it must hold real numbers")
    check_param_shape(a.shape, name, x_shape, along, x_name)
    return float64_param(a, keep if a.shape == named else a.shape)


def check_param_shape(shape, name, x_shape, along, x_name="x"):
    """ValueError unless `shape` is a parameter's (see param)."""
    named, keep = _param_shapes(tuple(x_shape), tuple(along))
    if shape == named or (len(shape) == len(x_shape) and all(
            s == 1 or (i in along and s == x_shape[i]) for i, s in enumerate(shape))):
        return
    raise ValueError(f"{name} has shape {shape}; expected {named} or "
                     f"{keep} (keepdims layout) for {x_name} of shape {tuple(x_shape)}")


def float64_param(value, keep):
    """A real ndarray of a parameter's named shape or keepdims layout, in
    keepdims layout (shape `keep`) as aligned C-contiguous float64: a view
    when it already is one.  A strided float64 one is copied too: the
    kernels' float32 pass reads gain and bias as contiguous tables and the
    float64 pass where they are, and the same values must give the same
    bits whatever their layout (float32 x with a reversed float64 gain
    differed in the last bit)."""
    a = value.reshape(keep)
    if a.dtype == _F64 and a.flags.aligned and a.flags.c_contiguous:
        return a
    return _simd.kernels.as_float64(a)  # large ones in kept memory: no page faults


def running_stat(value, name, x_shape, along):
    """A running statistic that batch_norm updates in place: a writable
    float ndarray of the kept shape or keepdims layout."""
    if not isinstance(value, np.ndarray):
        raise TypeError(f"{name} must be a numpy.ndarray (it is updated in place), "
                        f"got {type(value).__name__}")
    if value.dtype not in FLOAT_DTYPES and value.dtype.newbyteorder("=") not in FLOAT_DTYPES:
        raise TypeError(f"{name} has dtype {value.dtype}; it must be a float array")
    if not value.flags.writeable:
        raise ValueError(f"{name} is read-only; batch_norm updates it in place")
    check_param_shape(value.shape, name, x_shape, along)
    named, keep = _param_shapes(tuple(x_shape), tuple(along))
    return value.reshape(keep) if value.shape == named else value


def split_out(out, n_results):
    """out= as a tuple of n_results entries (None where not given).  A bare
    array is the first result; a tuple holds the first result alone or all."""
    if out is None:
        return (None,) * n_results
    if isinstance(out, tuple):
        if len(out) == n_results or len(out) == 1:
            return tuple(out) + (None,) * (n_results - len(out))
        allowed = "one array" if n_results == 1 else f"1 or {n_results} entries"
        raise ValueError(f"out must be an array or a tuple of {allowed}, "
                         f"got a tuple of {len(out)}")
    return (out,) + (None,) * (n_results - 1)


def shares_memory(a, b):
    """Whether arrays a and b have a byte in common: exact where NumPy can
    tell cheaply, else (conservatively) yes."""
    if not np.may_share_memory(a, b):
        return False
    try:
        return np.shares_memory(a, b, max_work=1 << 16)
    except np.exceptions.TooHardError:
        return True


def check_disjoint(arrays):
    """ValueError when two of the named arrays that a call writes share
    memory: the result would depend on the order of the writes."""
    named = [(n, a) for n, a in arrays if isinstance(a, np.ndarray)]
    for i, (name_a, a) in enumerate(named):
        for name_b, b in named[i + 1:]:
            if shares_memory(a, b):
                raise ValueError(f"{name_a} and {name_b} share memory; both are written "
                                 "by this call")


def writable_target(out, x, dtype):
    """The array the kernel writes into and the array the caller gets.

    The kernel writes straight into `out` unless out overlaps x other than
    exactly (in place with the same layout is fine), overlaps itself (two
    indices, one address: the kernel's threads would race and a slice could
    read another's output), or cannot be written directly (non-native byte
    order, misaligned); then it writes into a fresh array that is copied
    into out afterwards, as NumPy copies into such an out.
    """
    if out is None:
        return np.empty_like(x, dtype=dtype), None
    if _rules.direct(out, x):
        return out, None
    copied("out: written through a temporary, then copied in")
    return np.empty_like(x, dtype=dtype.newbyteorder("=")), out


def detach(p, out):
    """A parameter that shares memory with the output is copied first, so
    that writing the output cannot change it mid-call."""
    if p is not None and out is not None and np.may_share_memory(p, out):
        copied("a parameter that shares memory with out: copied first")
        return p.copy()
    return p


def warn_empty(what="Mean of empty slice"):
    # At the user's line, as NumPy's warning is, however deep in fastnorm
    # the call that found the empty slice sits.
    frame, level = sys._getframe(1), 2
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame, level = frame.f_back, level + 1
    warnings.warn(what, RuntimeWarning, stacklevel=level)
