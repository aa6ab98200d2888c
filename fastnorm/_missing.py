"""Missing values (nan_policy=): each slice's statistics over its values
that are numbers, and the check of nan_policy="raise"."""
import math

import numpy as np

from . import _simd
from ._args import as_where, keepdims_shape
from ._call import forward, normalize


def refuse_nan(x, name="x"):
    """ValueError when x holds a NaN (nan_policy="raise"), before anything
    is written.  np.max carries a NaN through: one pass, no temporary."""
    if x.size and np.isnan(np.max(x)):
        raise ValueError(f"{name} holds NaN (nan_policy='raise')")


def omitted_stats(x, axes, where=None, warn=True):
    """Each slice's (mean, m2, count) over its values that are numbers and,
    with where (as_where's bytes), selected: float64 in keepdims layout.
    Without where, one unmasked call first: data without NaN costs nothing
    more, and only the slices whose statistics come out not finite (a NaN,
    or an inf, which stays) are taken again, NaN left out, in the kernels'
    masked pass (no mask of x's size: theirs is one byte a slice).  A slice
    with no number gets NaN statistics and count 0 (warned of, as
    np.nanmean warns, unless warn is False: a Dask chunk's slices)."""
    shape = keepdims_shape(x.shape, axes)
    if where is None:
        mean, m2, _ = forward(x, axes, "stats")
        count = np.full(shape, float(math.prod(x.shape[i] for i in axes)))
        if x.size == 0:
            return mean, m2, count
        redo = ~(np.isfinite(mean) & np.isfinite(m2))
        if not redo.any():
            return mean, m2, count
        where = as_where(redo, x.shape)
    else:
        redo = None
    part = np.empty(shape)
    m, q, _ = forward(x, axes, "stats", where=where, count=part, omit=True, warn=warn)
    if redo is None:
        return m, q, part
    np.copyto(mean, m, where=redo)
    np.copyto(m2, q, where=redo)
    np.copyto(count, part, where=redo)
    return mean, m2, count


def omitted_normalize(x, axes, mode, *, eps, gamma, beta, out, dtype, n_stats, sel,
                      check_count=None):
    """normalize() with nan_policy="omit": the statistics of each slice over
    its numbers (omitted_stats, over sel's selection), then y through the
    kernels' given-statistics pass, NaN where x is NaN.  check_count (when
    given) sees the counts before anything is written.  Returns y, (mean,
    rstd, biased variance, count), the statistics' dtype and the out=
    arrays left for them, as normalize()."""
    mean, m2, count = omitted_stats(x, axes, sel.where)
    if check_count is not None:
        check_count(count)
    var = _simd.kernels.variance(m2, count)
    if mode == "rms":
        # The mean of squares, from the moments about the mean.
        with np.errstate(invalid="ignore", over="ignore"):
            spread = var + mean * mean
        mean = np.zeros_like(spread)
    else:
        spread = var
    rstd = _simd.kernels.rstd(spread, eps)
    if sel.count is not None:
        sel.count[...] = count      # what masked results count as empty
    y, _, sdt, outs = normalize(x, axes, "given", eps=eps, gamma=gamma, beta=beta, out=out,
                                dtype=dtype, n_stats=n_stats, given=(mean, rstd),
                                where=sel.where, count=None if sel.where is None else
                                np.empty(count.shape))
    return y, (mean, rstd, var, count), sdt, outs
