"""What a call computes over and what its results come back as: where=,
masked arrays, ndarray subclasses, and the array-likes refused because
converting them would drop what they carry."""
import functools

import numpy as np

from ._args import as_where, keepdims_shape, refuse_lossy
from ._call import deliver

__all__ = ["Input", "Selection", "as_where", "keeps_subclass", "wrap_like"]


class Input:
    """An input's data, its selection and how results go back.

    data: what the kernels read (a masked array's data, else x as given);
    where: the bytes mask of selected values or None (where= combined with
    a masked array's unmasked values); masked: results go back as masked
    arrays; like: the subclass instance whose __array_wrap__ results go
    through (None: plain ndarrays)."""

    __slots__ = ("data", "where", "masked", "like")

    def __init__(self, x, where, name="x"):
        if not isinstance(x, np.ma.MaskedArray):
            refuse_lossy(x, name)
        self.masked = isinstance(x, np.ma.MaskedArray)
        self.like = None
        if self.masked:
            mask = np.ma.getmask(x)
            self.data = np.ma.getdata(x)
            if mask is not np.ma.nomask and mask.any():
                keep = np.logical_not(mask)
                w = as_where(where, keep.shape)
                if w is not None:
                    keep &= w.view(np.bool_)
                where = keep
        else:
            self.data = x
            if isinstance(x, np.ndarray) and type(x) is not np.ndarray:
                self.like = x
        self.where = where

    def wrap(self, result, mask=None):
        """result as the caller gets it: masked where `mask` is true (masked
        inputs; a 0-d result as np.ma gives it, a scalar or np.ma.masked),
        through the subclass's __array_wrap__, or as it is."""
        if self.masked:
            if np.ndim(result) == 0:
                return np.ma.masked if mask is not None and bool(mask) else result
            return np.ma.MaskedArray(result, mask=np.ma.nomask if mask is None else mask)
        return wrap_like(self.like, result)


def wrap_like(like, result):
    """result (an ndarray or a NumPy scalar) as NumPy's reductions return
    it for an input of like's subclass (its __array_wrap__), or unchanged."""
    if like is None or not isinstance(result, (np.ndarray, np.generic)):
        return result
    scalar = not isinstance(result, np.ndarray)
    arr = np.asarray(result)
    try:
        return like.__array_wrap__(arr, None, scalar)
    except TypeError:          # NumPy < 2: (array, context)
        return like.__array_wrap__(arr, None)


class Selection:
    """An Input's selection for one call on x (its kernel array) over axes:
    the kernels' where= and count arguments, and the results as the caller
    gets them."""

    __slots__ = ("inp", "where", "count")

    def __init__(self, inp, x, axes):
        self.inp = inp
        self.where = as_where(inp.where, x.shape)
        self.count = None if self.where is None else np.empty(keepdims_shape(x.shape, axes))

    def kernel_args(self):
        return {} if self.where is None else {"where": self.where, "count": self.count}

    def results(self, y, out, stats, dtype, outs):
        """y, or (y, *stats) with the statistics delivered in dtype (through
        outs where given); masked inputs get masked results (y where x is
        masked or not selected, statistics where a slice has no value),
        subclasses theirs, arrays given as out= come back as they are."""
        given_y = out if not isinstance(out, tuple) else out[0]
        want = bool(stats)
        stats = [deliver(s, dtype, o, f"out[{i}]")
                 for i, (s, o) in enumerate(zip(stats or (), outs), start=1)]
        if self.inp.masked:
            empty = None if self.count is None else self.count == 0
            if given_y is None:
                y = self.inp.wrap(y, None if self.where is None
                                  else np.logical_not(self.where.view(np.bool_)))
            stats = [s if o is not None else self.inp.wrap(s, empty)
                     for s, o in zip(stats, outs)]
        elif self.inp.like is not None:
            if given_y is None:
                y = self.inp.wrap(y)
            stats = [s if o is not None else self.inp.wrap(s) for s, o in zip(stats, outs)]
        return (y, *stats) if want else y


def _subclass_among(arrays):
    for a in arrays:
        if (type(a) is not np.ndarray and isinstance(a, np.ndarray)
                and not isinstance(a, np.ma.MaskedArray)):
            return a
    return None


def keeps_subclass(func):
    """func's array results (other than the arrays given as out=) come back
    through the __array_wrap__ of the ndarray subclass of its first or
    second argument (a gradient's dy or x), as NumPy's functions return
    them; plain ndarrays cost two type tests."""
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        result = func(*args, **kwargs)
        like = _subclass_among(args[:2])
        if like is None:
            return result
        given = kwargs.get("out")
        given = given if isinstance(given, tuple) else (given,)

        def wrap(r):
            return r if any(r is o for o in given) else wrap_like(like, r)
        return tuple(wrap(r) for r in result) if isinstance(result, tuple) else wrap(result)
    return wrapper
