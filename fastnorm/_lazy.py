"""Which implementation a call takes.

NumPy inputs stay on the kernels of this package.  A call with a Dask
array among its arguments goes to ``fastnorm._dask``, which builds a
lazy graph of the same kernels; Dask is imported then and only then, so a
NumPy user never pays for it (Dask is an optional extra).
"""
from numpy import ndarray


def any_dask(*args):
    """Whether any argument is a Dask array.

    Every public function asks this first, so it must cost next to nothing:
    ndarrays and None are recognized by identity, and only the remaining
    types have their defining module looked at.
    """
    for a in args:
        if a is None:
            continue
        t = type(a)
        if t is not ndarray and t.__module__.startswith("dask.array"):
            return True
    return False


def via_dask(func, arguments):
    """Run the Dask version of public function `func` with `arguments`, the
    call's arguments by name (the function's ``locals()``: names that are
    not parameters of `func` are left out)."""
    from ._dask import api as _dask
    code = getattr(func, "__wrapped__", func).__code__     # past keeps_subclass
    names = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
    return getattr(_dask, func.__name__)(**{k: arguments[k] for k in names})
