"""Argument handling shared by every public function: one place for the
dtype rules, axis conventions, parameter shapes, ``out=`` checks and the
errors that name what is wrong."""
import functools
import math
import operator
import os
import sys
import warnings

import numpy as np
from numpy.exceptions import AxisError

from . import _simd

_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep
from ._explain import copied

FLOAT_DTYPES = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))
_F64 = np.dtype(np.float64)
_F32 = np.dtype(np.float32)
_NATIVE_FLOATS = frozenset(FLOAT_DTYPES)

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
    if type(x) is np.ndarray and x.dtype in _NATIVE_FLOATS and x.flags.aligned:
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


def result_dtypes(x_dtype, dtype):
    """(output dtype, statistics dtype) for input dtype x_dtype and the
    user's dtype= (None: x's own float dtype, float64 for integers)."""
    if dtype is None:
        out = x_dtype if x_dtype in FLOAT_DTYPES else _F64
    else:
        try:
            out = np.dtype(dtype)
        except TypeError as e:
            raise TypeError(f"dtype={dtype!r} is not a NumPy dtype") from e
        if out not in FLOAT_DTYPES:
            raise TypeError(f"dtype={out} is not supported; use float16, "
                            "float32 or float64")
    return out, (_F64 if out == _F64 else _F32)


def axes_tuple(axis, ndim, *, none_means=None):
    """axis (int, tuple of ints or None) as a sorted tuple of non-negative
    axes.  Out of range raises numpy's AxisError, repeats ValueError, and
    anything that is not an integer TypeError, as NumPy does."""
    if axis is None:
        return tuple(range(ndim)) if none_means is None else none_means
    if type(axis) is int or (type(axis) is tuple and all(type(a) is int for a in axis)):
        return _axes_of(axis, ndim)
    return _axes_of.__wrapped__(axis, ndim)


@_cached
def _axes_of(axis, ndim):
    if isinstance(axis, (tuple, list)):
        items = list(axis)
    else:
        items = [axis]
    out = []
    for ax in items:
        if isinstance(ax, bool):    # an index to operator.index, not to NumPy
            raise TypeError(f"an integer is required for the axis, not bool ({axis!r})")
        i = operator.index(ax)
        if not -ndim <= i < ndim:
            raise AxisError(i, ndim)
        out.append(i % ndim)
    if len(set(out)) != len(out):
        raise ValueError(f"repeated axis in axis={axis!r}")
    return tuple(sorted(out))


def batch_axes(axis, ndim, what="batch_norm"):
    """batch norm's reduced axes: axis=None means every axis but 1, the
    channels of (N, C, ...)."""
    if axis is not None:
        return axes_tuple(axis, ndim)
    if ndim < 2:
        raise ValueError(f"{what} with axis=None expects x of shape (N, C, ...), "
                         f"got {ndim} dimension(s); pass axis= explicitly")
    return tuple(i for i in range(ndim) if i != 1)


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


def check_eps(eps):
    try:
        e = float(eps)
    except (TypeError, ValueError) as err:
        raise TypeError(f"eps must be a real number, got {eps!r}") from err
    if not (math.isfinite(e) and e >= 0.0):
        raise ValueError(f"eps must be finite and >= 0, got {eps!r}")
    return e


def check_training(x_shape, axes, momentum, where=None):
    """batch_norm training's checks: (n, momentum), n the number of values
    per feature (not one; none is an empty batch), momentum a finite float.
    With a where= mask (as_where's bytes), no feature may have exactly one
    selected value; a feature with none selected is an empty reduction,
    whatever the batch's size.  A lazy (Dask) mask's counts are checked
    where they are computed."""
    n = math.prod(x_shape[i] for i in axes)
    if n == 1 and where is None:
        raise ValueError(f"batch_norm training needs more than one value per feature, "
                         f"got n={n} (x.shape={tuple(x_shape)}, reduced axes {axes})")
    if isinstance(where, np.ndarray) and n > 0:
        # Counted over the mask's own values: a broadcast (N, T, 1) mask is
        # N * T bytes, not x's size; an axis it repeats multiplies the count.
        w = where.view(np.bool_)
        own = tuple(slice(0, 1) if w.strides[i] == 0 else slice(None) for i in range(w.ndim))
        repeats = math.prod(w.shape[i] for i in axes if w.strides[i] == 0)
        # (count_nonzero sums in intp: int32 sums run twice as fast)
        counts = np.add.reduce(w[own], axis=axes,
                               dtype=np.int32 if n < 2**31 else np.intp) * repeats
        if np.any(counts == 1):
            raise ValueError("batch_norm training needs more than one selected value per "
                             "feature; where= selects one value of some feature")
    try:
        m = float(momentum)
    except (TypeError, ValueError) as e:
        raise TypeError(f"momentum must be a real number, got {momentum!r}") from e
    if not math.isfinite(m):
        raise ValueError(f"momentum must be finite, got {m}")
    return n, m


def param(value, name, x_shape, along, x_name="x"):
    """A parameter (gamma, beta, running statistics) as float64 in keepdims
    layout: x.ndim dimensions, x's size along the axes in `along`, 1 elsewhere.

    Accepted: exactly the named shape (x's sizes along `along`, in order) or
    x.ndim dimensions that broadcast to x and vary only along `along`.
    """
    if value is None:
        return None
    named, keep = _param_shapes(tuple(x_shape), tuple(along))
    if type(value) is np.ndarray and value.shape == named and value.dtype in _NATIVE_FLOATS:
        # The common case: a float vector of the named shape.
        return float64_param(value, keep)
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


def check_out(out, name, shape, dtype):
    """out= for one result: an ndarray of exactly this shape and dtype, in
    either byte order (a non-native one is written through a temporary)."""
    if not isinstance(out, np.ndarray):
        raise TypeError(f"{name} must be a numpy.ndarray, got {type(out).__name__}")
    if out.shape != tuple(shape):
        raise ValueError(f"{name} has shape {out.shape}; expected {tuple(shape)}")
    if out.dtype.newbyteorder("=") != np.dtype(dtype).newbyteorder("="):
        raise TypeError(f"{name} has dtype {out.dtype}; expected {dtype}")
    if not out.flags.writeable:
        raise ValueError(f"{name} is read-only")
    return out


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


def may_self_overlap(a):
    """Whether two elements of a may share an address (as_strided views,
    writable zero strides).  Conservative: False is certain, True may be a
    layout that interleaves without overlapping.  Each axis, in order of
    stride, must step past the whole extent of the axes inside it."""
    extent = a.itemsize
    for stride, n in sorted((abs(s), n) for s, n in zip(a.strides, a.shape) if n > 1):
        if stride < extent:
            return True
        extent += stride * (n - 1)
    return False


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
    flags = out.flags
    # A contiguous array cannot overlap itself (the common case, decided
    # without walking the strides).
    direct = out.dtype.isnative and flags.aligned and (
        flags.c_contiguous or flags.f_contiguous or not may_self_overlap(out))
    if direct and np.may_share_memory(out, x):
        direct = (out.__array_interface__["data"][0] == x.__array_interface__["data"][0]
                  and out.strides == x.strides and out.dtype.itemsize == x.dtype.itemsize)
    if direct:
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
