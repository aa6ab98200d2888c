"""Arguments of a call on Dask arrays.

They get the NumPy path's own checks, with its messages: the checks run on
stand-ins that have a Dask array's shape and dtype but hold one value
(nothing is computed).  Then every array is laid out for blockwise calls:
float64 in keepdims layout, chunked like x along the axes it shares with x.
"""
import numpy as np
import dask.array as da

from .._args import as_input
from .._where import as_where


def stand_in(a):
    """What a NumPy-path check sees of a Dask array: its shape and dtype
    (one value, seen through zero strides).  Anything else is passed on."""
    if isinstance(a, da.Array):
        return np.broadcast_to(np.zeros((), a.dtype), a.shape)
    return a


def lazy_input(x, name="x"):
    """x as a Dask array of the dtype the kernels read (as_input's rules:
    integers and bool become float64, other non-float dtypes raise)."""
    if not isinstance(x, da.Array):
        x = da.asarray(as_input(x, name))
    dt = as_input(np.empty(0, x.dtype), name).dtype
    return x if dt == x.dtype else x.astype(dt)


def no_out(out):
    if out is not None:
        raise TypeError("out= is not supported with Dask arrays: the results are new "
                        "lazy Dask arrays (write them with dask.array.store, or compute "
                        "them into NumPy arrays)")


def aligned(a, x):
    """An array of x.ndim dimensions, each of x's size or 1, as a Dask array
    chunked like x where it has x's size, so that a blockwise call sees the
    piece that goes with each chunk of x (and no chunk of x is moved)."""
    if a is None:
        return None
    chunks = tuple(c if n == s else (n,) for n, s, c in zip(a.shape, x.shape, x.chunks))
    if isinstance(a, da.Array):
        return a if a.chunks == chunks else a.rechunk(chunks)
    return da.from_array(np.asarray(a), chunks=chunks)


def conformed(value, checked):
    """A Dask array laid out as `checked`, the NumPy-path check's result for
    its stand-in: reshaped (named shape to keepdims layout) or broadcast
    (size-1 axes), in checked's dtype.  Other values are `checked` itself."""
    if not isinstance(value, da.Array):
        return checked
    a = value.astype(checked.dtype)
    if a.shape == checked.shape:
        return a
    if a.ndim != checked.ndim:
        return a.reshape(checked.shape)
    return da.broadcast_to(a, checked.shape)


def lazy_array(value, check, x):
    """`value` (NumPy, Dask or None) checked by `check` (a NumPy-path function
    of the array alone) and laid out for blockwise calls on x."""
    if value is None:
        return None
    return aligned(conformed(value, check(stand_in(value))), x)


def lazy_where(where, x):
    """where= (NumPy or Dask) checked by the NumPy path's rules and laid out
    for blockwise calls on x (x.ndim dimensions, each x's size or 1), or
    None where it selects everything."""
    if where is None or where is True:
        return None
    as_where(stand_in(where), x.shape)
    w = where if isinstance(where, da.Array) else np.asarray(where)
    return aligned(w.reshape((1,) * (x.ndim - w.ndim) + w.shape), x)

