"""The public functions on Dask arrays: the same call, a lazy result.

Imported only when a call has a Dask array among its arguments.  Arguments
are checked at once, with the NumPy path's rules and messages; results are
Dask arrays of the shapes and dtypes the NumPy path returns.  The work is
the kernels' own, one chunk per task:

- statistics: each chunk's Welford state from the kernels, merged across
  chunks with Chan's formula in Dask's tree reduction (``split_every`` from
  Dask's configuration), so the reduced axes may be chunked in any way;
- normalization: each chunk through the kernels' "given statistics" pass
  with the merged statistics; or, when a chunk holds whole slices (one chunk
  along every reduced axis) and no statistics are returned, the plain NumPy
  call on each chunk, which reads it once.

``out=`` is not supported (the results are new Dask arrays).  batch_norm in
training with running statistics computes the batch statistics at once and
updates the running statistics before returning (see ``batch_norm``).
"""
import math
import warnings

import dask
import dask.array as da
import numpy as np

from .. import _api, _family, _simd
from . import tasks
from .._args import (axes_tuple, batch_axes, check_disjoint, check_eps, check_training,
                     nan_policy_of, result_dtypes, running_stat, warn_empty)
from .args import aligned, lazy_input, lazy_where, no_out
from .graph import (channel_param, given_normalize, lazy_param, merged_states, meta,
                    normalized, per_chunk, rstd_of, selected_count, slice_stats, stat_out,
                    variance, whole_slices)
from .grad import (batch_norm_backward, group_norm_backward,  # noqa: F401
                   layer_norm_backward, rms_norm_backward)
from .._family import Groups
from .._missing import one_number_kept
from .._running import update_running


# --------------------------------------------------------------------------
# mean_var, layer_norm, rms_norm, batch_norm

def _policy(x, nan_policy):
    """x as the call reads it under nan_policy (checked for NaN chunk by
    chunk when computed, with "raise"), and whether NaN is omitted."""
    policy = nan_policy_of(nan_policy)
    if policy == "raise":
        x = x.map_blocks(tasks.numbers_only, dtype=x.dtype)
    return x, policy == "omit"


def mean_var(x, axis, ddof, keepdims, dtype, out, where=None, nan_policy="propagate"):
    x = lazy_input(x)
    axes = axes_tuple(axis, x.ndim)
    res_dtype, _ = result_dtypes(x.dtype, dtype)
    no_out(out)
    where = lazy_where(where, x)
    x, omit = _policy(x, nan_policy)
    states = merged_states(x, axes, "center", where, omit)
    mean = states.map_blocks(tasks.centre, dtype=np.float64)
    if omit:
        n = states["n"]     # each slice's count of numbers, known when computed
    elif where is None:
        n = math.prod(x.shape[i] for i in axes)
        if n - ddof <= 0 and x.size > 0:
            warnings.warn("Degrees of freedom <= 0 for slice", RuntimeWarning, stacklevel=3)
    else:
        # Each slice's own count; empty slices are not warned of (that
        # would take computing the mask now).
        n = selected_count(where, x, axes)
    results = mean, variance(states, n, ddof)
    results = tuple(r.map_blocks(_simd.kernels.result, res_dtype, dtype=res_dtype)
                    for r in results)
    if not keepdims:
        results = tuple(r.squeeze(axis=axes) for r in results)
    return results


def layer_norm(x, gamma, beta, axis, eps, out, dtype, return_stats, where=None,
               nan_policy="propagate"):
    x = lazy_input(x)
    axes = axes_tuple(axis, x.ndim)
    eps = check_eps(eps)
    gamma = lazy_param(gamma, "gamma", x, axes)
    beta = lazy_param(beta, "beta", x, axes)
    no_out(out)
    where = lazy_where(where, x)
    x, omit = _policy(x, nan_policy)
    y, (mean, _, rstd) = normalized(
        x, axes, "center", eps=eps, gamma=gamma, beta=beta, dtype=dtype,
        want_stats=return_stats, where=where, omit=omit, whole_chunks=lambda dt: per_chunk(
            _api.layer_norm, x, {"gamma": gamma, "beta": beta, "where": where}, dt,
            axis=axes, eps=eps, dtype=dt, nan_policy=nan_policy))
    if not return_stats:
        return y
    return y, stat_out(mean, x.dtype, dtype), stat_out(rstd, x.dtype, dtype)


def rms_norm(x, gamma, axis, eps, out, dtype, return_stats, where=None,
             nan_policy="propagate"):
    x = lazy_input(x)
    axes = axes_tuple(axis, x.ndim)
    eps = check_eps(eps)
    gamma = lazy_param(gamma, "gamma", x, axes)
    no_out(out)
    where = lazy_where(where, x)
    x, omit = _policy(x, nan_policy)
    y, (_, _, rstd) = normalized(
        x, axes, "rms", eps=eps, gamma=gamma, beta=None, dtype=dtype,
        want_stats=return_stats, where=where, omit=omit, whole_chunks=lambda dt: per_chunk(
            _api.rms_norm, x, {"gamma": gamma, "where": where}, dt, axis=axes, eps=eps,
            dtype=dt, nan_policy=nan_policy))
    if not return_stats:
        return y
    return y, stat_out(rstd, x.dtype, dtype)


def _running_update(running_mean, running_var, x, kept, momentum, n, mean, var):
    """PyTorch's update of the running statistics, in place, from the batch
    statistics (NumPy arrays by now)."""
    rm = running_stat(running_mean, "running_mean", x.shape, kept)
    rv = running_stat(running_var, "running_var", x.shape, kept)
    update_running(rm, rv, mean, var, momentum, n)


def batch_norm(x, gamma, beta, running_mean, running_var, training, momentum, eps, axis,
               out, dtype, return_stats, where=None, nan_policy="propagate"):
    """Batch norm on a Dask array.  In training with running statistics (NumPy
    arrays, updated in place) the batch statistics are computed at once, on
    the active scheduler, one pass over x; the running statistics are
    updated before the call returns, as on the NumPy path, and y is a lazy
    array normalized with those statistics (computing it reads x once more,
    never recomputing them).  A lazy update could not work on a cluster:
    the tasks run in other processes, which cannot write the caller's
    arrays.  Without running statistics, and in eval, nothing is computed.
    With where=, the counts of selected values are computed with the batch
    statistics when running statistics are given (a feature with one
    selected value raises then); without them nothing is checked now."""
    x = lazy_input(x)
    axes = batch_axes(axis, x.ndim)
    kept = tuple(i for i in range(x.ndim) if i not in axes)
    eps = check_eps(eps)
    gamma = lazy_param(gamma, "gamma", x, kept)
    beta = lazy_param(beta, "beta", x, kept)
    if (running_mean is None) != (running_var is None):
        raise ValueError("running_mean and running_var go together: give both or neither")
    out_dtype, _ = result_dtypes(x.dtype, dtype)
    where = lazy_where(where, x)
    x, omit = _policy(x, nan_policy)
    if not training:
        if running_mean is None:
            raise ValueError("batch_norm with training=False needs running_mean and running_var")
        mean = lazy_param(running_mean, "running_mean", x, kept)
        var = lazy_param(running_var, "running_var", x, kept)
        no_out(out)
        rstd = rstd_of(var, eps)
        y = given_normalize(x, axes, mean, rstd, gamma, beta, out_dtype, where)
    else:
        n, momentum = check_training(x.shape, axes, momentum, where)
        if running_mean is not None:
            for r, name in ((running_mean, "running_mean"), (running_var, "running_var")):
                running_stat(r, name, x.shape, kept)
            check_disjoint([("running_mean", running_mean), ("running_var", running_var)])
        no_out(out)
        if running_mean is None:
            y, (mean, _, rstd) = normalized(
                x, axes, "center", eps=eps, gamma=gamma, beta=beta, dtype=dtype,
                want_stats=return_stats, where=where, omit=omit,
                whole_chunks=lambda dt: per_chunk(
                    _api.batch_norm, x, {"gamma": gamma, "beta": beta, "where": where}, dt,
                    axis=axes, eps=eps, dtype=dt, nan_policy=nan_policy))
        else:
            if omit:
                states = merged_states(x, axes, "center", where, omit=True)
                mean, var, n = dask.compute(states.map_blocks(tasks.centre, dtype=np.float64),
                                            variance(states, states["n"]), states["n"])
                rstd = _simd.kernels.rstd(var, eps)
                if (n == 0).any():
                    warn_empty()     # a feature with no number: known now
                n = one_number_kept(n)
            elif where is None:
                mean, var, rstd = dask.compute(*slice_stats(x, axes, "center", eps))
            else:
                mean, var, rstd, n = dask.compute(*slice_stats(x, axes, "center", eps, where),
                                                  selected_count(where, x, axes))
                if (n == 1).any():
                    raise ValueError("batch_norm training needs more than one selected "
                                     "value per feature; where= selects one value of some "
                                     "feature")
            if not omit and np.ndim(n) and (n == 0).any():
                warn_empty()     # a feature with nothing selected: known now
            _running_update(running_mean, running_var, x, kept, momentum, n, mean, var)
            mean, rstd = aligned(mean, x), aligned(rstd, x)
            y = given_normalize(x, axes, mean, rstd, gamma, beta, out_dtype, where)
    if not return_stats:
        return y
    return y, stat_out(mean, x.dtype, dtype), stat_out(rstd, x.dtype, dtype)


def moments_piece(x, axis, where, nan_policy):
    """Moments.update's piece, a Dask array: its state (count, mean, m2)
    computed now (the chunks' states merged in Dask's tree, one pass), and
    its kept shape."""
    x = lazy_input(x)
    axes = axes_tuple(axis, x.ndim)
    where = lazy_where(where, x)
    x, omit = _policy(x, nan_policy)
    states = merged_states(x, axes, "center", where, omit)
    if omit:
        n = states["n"]
    elif where is None:
        n = da.full(states.shape, float(math.prod(x.shape[i] for i in axes)),
                    chunks=states.chunks)
    else:
        n = selected_count(where, x, axes)
    n, mean, m2 = dask.compute(n, states["mean"], states["m2"])
    return n, mean, m2, tuple(s for i, s in enumerate(x.shape) if i not in axes)


def zscore(a, axis, ddof, nan_policy, out, dtype):
    x = lazy_input(a, "a")
    axes = axes_tuple(axis, x.ndim)
    out_dtype, _ = result_dtypes(x.dtype, dtype)
    no_out(out)
    x, omit = _policy(x, nan_policy)
    states = merged_states(x, axes, "center", None, omit)
    n = states["n"] if omit else math.prod(x.shape[i] for i in axes)
    mean = states.map_blocks(tasks.centre, dtype=np.float64)
    scale = da.map_blocks(tasks.scores_scale, mean, states["m2"], n, ddof, out_dtype,
                          dtype=np.float64)
    return given_normalize(x, axes, mean, scale, None, None, out_dtype)


# --------------------------------------------------------------------------
# group and instance norm, weight normalization and standardization

def group_norm(x, num_groups, gamma, beta, channel_axis, eps, out, dtype, return_stats):
    x = lazy_input(x)
    grp = Groups(x, num_groups, channel_axis)
    eps = check_eps(eps)
    gamma = channel_param(gamma, "gamma", grp, x)
    beta = channel_param(beta, "beta", grp, x)
    no_out(out)
    ch, per_group = grp.axis, grp.channels // grp.groups
    # Statistics per sample and channel over these axes, then per group.
    axes = tuple(i for i in range(1, x.ndim) if i != ch)
    out_dtype, _ = result_dtypes(x.dtype, dtype)
    if per_group == 1:
        # One channel per group: statistics per sample and channel, whatever
        # the chunks of the channel axis.
        y, (mean, _, rstd) = normalized(
            x, axes, "center", eps=eps, gamma=gamma, beta=beta, dtype=dtype,
            want_stats=return_stats, whole_chunks=lambda dt: per_chunk(
                _family.instance_norm, x, {"gamma": gamma, "beta": beta}, dt,
                channel_axis=ch, eps=eps, dtype=dt))
    elif not return_stats and whole_slices(x, axes + (ch,)):
        y = per_chunk(_family.group_norm, x, {"gamma": gamma, "beta": beta}, out_dtype,
                      num_groups=grp.groups, eps=eps, dtype=out_dtype, channel_axis=ch)
    else:
        mean, rstd = group_stats(x, axes, grp, eps)
        y = given_normalize(x, axes, da.repeat(mean, per_group, axis=ch),
                            da.repeat(rstd, per_group, axis=ch), gamma, beta, out_dtype)
    if not return_stats:
        return y
    return y, stat_out(mean, x.dtype, dtype), stat_out(rstd, x.dtype, dtype)


def group_stats(x, axes, grp, eps):
    """Per sample and group: mean and rstd, float64 of grp.stat_shape.  The
    channels' merged states are merged again within each group."""
    ch = grp.axis
    per_channel = math.prod(x.shape[i] for i in axes)
    # The channel axis in one chunk (these are statistics, not x).
    states = merged_states(x, axes, "center").rechunk({ch: -1})
    chunks = tuple((grp.groups,) if i == ch else c for i, c in enumerate(states.chunks))
    groups = states.map_blocks(tasks.merge_groups, grp.groups, ch, per_channel, chunks=chunks,
                               dtype=tasks.MOMENTS, meta=meta(x.ndim, tasks.MOMENTS))
    spread = variance(groups, per_channel * (grp.channels // grp.groups))
    return groups.map_blocks(tasks.centre, dtype=np.float64), rstd_of(spread, eps)


def instance_norm(x, gamma, beta, channel_axis, eps, out, dtype, return_stats):
    x = lazy_input(x)
    channels = x.shape[Groups(x, 1, channel_axis).axis]  # Groups checks channel_axis
    return group_norm(x, channels, gamma, beta, channel_axis, eps, out, dtype, return_stats)


def weight_norm(v, g, axis, return_norm):
    v = lazy_input(v, "v")
    axes = _family._all_but_first(axis, v.ndim)
    kept = tuple(i for i in range(v.ndim) if i not in axes)
    n = math.prod(v.shape[i] for i in axes)
    gain = lazy_param(g, "g", v, kept)
    # As on the NumPy path: rms_norm with eps 0 and gain g / sqrt(n).
    scale = (aligned(np.full((1,) * v.ndim, 1.0 / math.sqrt(n)), v) if gain is None
             else gain / math.sqrt(n))
    w, (_, mean_sq, _) = normalized(
        v, axes, "rms", eps=0.0, gamma=scale, beta=None, dtype=None,
        want_stats=return_norm, whole_chunks=lambda dt: per_chunk(
            _family.weight_norm, v, {"g": gain}, dt, axis=axes))
    if not return_norm:
        return w
    return w, stat_out(da.sqrt(mean_sq * n), v.dtype, None)


def weight_standardize(w, axis, eps):
    w = lazy_input(w, "w")
    axes = _family._all_but_first(axis, w.ndim)
    eps = check_eps(eps)
    y, _ = normalized(
        w, axes, "center", eps=eps, gamma=None, beta=None, dtype=None, want_stats=False,
        whole_chunks=lambda dt: per_chunk(_family.weight_standardize, w, {}, dt, axis=axes,
                                          eps=eps))
    return y
