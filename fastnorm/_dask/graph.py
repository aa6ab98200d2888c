"""Pieces of the graphs that run fastnorm on Dask arrays: statistics merged
across chunks in Dask's tree reduction, and per-chunk kernel calls laid out
with ``blockwise`` so that no chunk of x moves."""
import functools
import math
import uuid

import dask.array as da
import numpy as np

from . import tasks
from .. import _simd
from .._args import param, result_dtypes, warn_empty
from .args import aligned, lazy_array

_F64 = np.dtype(np.float64)


def meta(ndim, dtype):
    return np.empty((0,) * ndim, dtype)


def unique_name(what):
    """A layer name of its own: the same key in two graphs that Dask
    optimizes differently (fusing x's chunks into a layer in one and not
    in the other) would be one key with two task specs, which the
    distributed scheduler warns of and can deadlock on.  A layer is shared
    within the call that built it (y and its statistics), never across
    calls."""
    return f"fastnorm-{what}-{uuid.uuid4().hex}"


def whole_slices(x, axes):
    """Whether each chunk of x holds whole slices: one chunk along every
    reduced axis."""
    return all(x.numblocks[i] == 1 for i in axes)


def merged_states(x, axes, mode, where=None, omit=False):
    """Per slice of x over `axes`, the chunks' statistics merged in Dask's
    tree reduction: a MOMENTS (mode 'center') or SQUARES (mode 'rms') array
    in keepdims layout.  where (aligned with x, or None): over the selected
    values, each chunk's state with its own counts.  omit (mode 'center'):
    over the values that are numbers, a STATE array (with the counts)."""
    n = math.prod(x.shape[i] for i in axes)
    if n == 0 and math.prod(x.shape[i] for i in range(x.ndim) if i not in axes) > 0:
        warn_empty()  # now, as the NumPy path does, not when it is computed
    moments = mode == "center"
    dt = tasks.MOMENTS if moments else tasks.SQUARES
    chunk = tasks.chunk_moments if moments else tasks.chunk_squares
    if where is not None or omit:
        ind = tuple(range(x.ndim))
        operands = (x, ind) + (() if where is None else (where, ind))
        x = da.blockwise(functools.partial(tasks.chunk_state_where, axes=axes,
                                           mode="stats" if moments else "rms", omit=omit),
                         ind, *operands, dtype=tasks.STATE,
                         adjust_chunks=dict.fromkeys(axes, 1), meta=meta(x.ndim, tasks.STATE),
                         name=unique_name(mode + "-states"))
        chunk = functools.partial(tasks.state_parts, moments=moments, counts=omit)
    if omit:
        dt = tasks.STATE
    return da.reduction(
        x, chunk, functools.partial(tasks.aggregate_states, counts=omit),
        combine=tasks.combine_states, axis=axes, keepdims=True, dtype=dt,
        concatenate=False, meta=meta(x.ndim, dt), name=unique_name(mode + "-stats"))


def selected_count(where, x, axes):
    """Per slice, the number of values where= selects (float64, keepdims)."""
    return da.broadcast_to(where, x.shape, chunks=x.chunks).sum(axis=axes, keepdims=True,
                                                                dtype=np.float64)


def variance(states, n, ddof=0):
    """mean_var's variance of merged MOMENTS, n one count for all or each
    slice's (a Dask array aligned with states)."""
    return da.map_blocks(tasks.variance, states["m2"], n, ddof, dtype=_F64)


def rstd_of(spread, eps):
    return spread.map_blocks(tasks.inverse_std, eps, dtype=_F64)


def chunkwise(func, x, arrays, dtype, name, summed=()):
    """func(chunk of x, *pieces of arrays) for every chunk of x; the arrays
    are aligned with x (keepdims layout) or None.  func sums over the axes
    `summed`: its result has size 1 along them."""
    ind = tuple(range(x.ndim))
    args = [x, ind]
    for a in arrays:
        args += [a, None if a is None else ind]
    return da.blockwise(func, ind, *args, dtype=dtype, meta=meta(x.ndim, dtype),
                        adjust_chunks=dict.fromkeys(summed, 1),
                        name=unique_name(name))


def per_chunk(func, x, arrays, result_dtype, index=None, **kwargs):
    """The NumPy function func on every chunk of x, with the pieces of the
    aligned arrays (a dict by parameter name) as keyword arguments (its
    result number `index` if given): for chunks that hold whole slices."""
    bound = functools.partial(tasks.numpy_block, functools.partial(func, **kwargs),
                              tuple(arrays), index)
    return chunkwise(bound, x, tuple(arrays.values()), result_dtype, func.__name__)


def given_normalize(x, axes, mean, rstd, gamma, beta, dtype, where=None):
    """y from merged statistics (float64, keepdims layout; mean None for
    RMS) through the kernels' given-statistics pass, chunk by chunk (at the
    selected positions alone where where= is given)."""
    func = functools.partial(tasks.normalize_block, axes=axes, out_dtype=dtype)
    return chunkwise(func, x, (aligned(mean, x), aligned(rstd, x), gamma, beta, where), dtype,
                      "normalize")


def slice_stats(x, axes, mode, eps, where=None, omit=False):
    """(mean, spread, rstd) per slice, float64 Dask arrays in keepdims
    layout: spread is the biased variance (mode 'center') or the mean of
    squares (mode 'rms', mean None); over the selected values with where;
    with omit, over the values that are numbers."""
    if omit:
        states = merged_states(x, axes, "center", where, omit=True)
        mean, var = states.map_blocks(tasks.centre, dtype=_F64), variance(states, states["n"])
        if mode == "center":
            return mean, var, rstd_of(var, eps)
        spread = var + mean * mean      # the mean of squares
        return None, spread, rstd_of(spread, eps)
    n = math.prod(x.shape[i] for i in axes) if where is None else selected_count(where, x, axes)
    states = merged_states(x, axes, mode, where)
    if mode == "center":
        mean, spread = states.map_blocks(tasks.centre, dtype=_F64), variance(states, n)
    else:
        mean, spread = None, states["mean"]
    return mean, spread, rstd_of(spread, eps)


def normalized(x, axes, mode, *, eps, gamma, beta, dtype, want_stats, whole_chunks,
               where=None, omit=False):
    """y and the float64 statistics (mean, spread, rstd) of a layer/RMS-style
    normalization over `axes` (over the selected values with where; with
    omit, over the values that are numbers).  When
    no statistics are wanted and every chunk holds whole slices, y is
    whole_chunks(output dtype) instead (the NumPy call on each chunk: one
    pass) and the statistics are None."""
    out_dtype, _ = result_dtypes(x.dtype, dtype)
    if not want_stats and whole_slices(x, axes):
        return whole_chunks(out_dtype), (None, None, None)
    mean, spread, rstd = slice_stats(x, axes, mode, eps, where, omit)
    return (given_normalize(x, axes, mean, rstd, gamma, beta, out_dtype, where),
            (mean, spread, rstd))


def stat_out(stat, x_dtype, dtype):
    """A float64 statistic in the dtype the NumPy path returns it in."""
    dt = result_dtypes(x_dtype, dtype)[1]
    return stat.map_blocks(_simd.kernels.result, dt, dtype=dt)


def lazy_param(value, name, x, along):
    return lazy_array(value, lambda a: param(a, name, x.shape, along), x)


def channel_param(value, name, grp, x):
    """A per-channel parameter of group norm (checked by Groups, grp) as
    float64 in keepdims layout (1, C, 1, ...), aligned with x."""
    keep = tuple(grp.channels if i == grp.axis else 1 for i in range(x.ndim))

    def check(a):
        grp.channel_param(a, name)      # its errors (dtype, shape)
        return np.asarray(grp.channel_vector(a, name), dtype=np.float64).reshape(keep)
    return lazy_array(value, check, x)
