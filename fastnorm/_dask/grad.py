"""The gradients on Dask arrays.

With xhat = (x - mean) * rstd and gd = dy * gamma, per slice
``dx = rstd * (gd - A/n - xhat * B/n)`` where ``A = sum(gd)`` and
``B = sum(gd * xhat)`` (RMS: no centring and A = 0; batch norm in eval:
``dx = rstd * gd``), and ``dgamma = sum(dy * xhat)``, ``dbeta = sum(dy)``
over the values that read each entry of gamma.  A and B, dgamma and dbeta
are sums over chunks: a task reads one chunk of dy and x and returns its
part of them (the kernels' first pass alone, float64), and the parts are
added in Dask's tree reduction, so the reduced axes may be chunked; then a
task per chunk computes dx from the totals (the kernels' second pass
alone).  Nothing the size of x is held between tasks.  When every chunk
holds whole slices, each chunk's gradient is the NumPy call on it.
"""
import functools
import math

import dask.array as da
import numpy as np

from .. import _grad
from . import tasks
from .._args import axes_tuple, batch_axes, keepdims_shape, param_grad_dtype
from .args import aligned, conformed, lazy_array, lazy_input, lazy_where, no_out, stand_in
from .graph import channel_param, chunkwise, per_chunk, selected_count, whole_slices
from .._family import Groups


def _pair(dy, x):
    """dy and x as Dask arrays of one float dtype (the wider of the two) and
    the same chunks (x's)."""
    x, dy = lazy_input(x), lazy_input(dy, "dy")
    if dy.shape != x.shape:
        raise ValueError(f"dy has shape {dy.shape}; expected x's shape {x.shape}")
    dt = np.promote_types(x.dtype, dy.dtype)
    # dy is read chunk by chunk alongside x: in x's chunks.
    return dy.astype(dt).rechunk(x.chunks), x.astype(dt)


def _stat(value, name, x, axes):
    return lazy_array(value, lambda a: _grad._stat(a, name, x.shape, axes), x)


def _gamma(gamma, x, along):
    """gamma (ones when None) as float64 in keepdims layout, aligned with x;
    the shape and dtype its gradients are returned in."""
    g, shape, gdt = _grad._gamma(stand_in(gamma), "gamma", x.shape, along)
    return aligned(conformed(gamma, g), x), shape, param_grad_dtype(gdt, x.dtype)


def _count(x, axes, where=None):
    """Values per slice: a number, or with where each slice's selected ones."""
    if where is None:
        return math.prod(x.shape[i] for i in axes)
    return selected_count(where, x, axes)


def gradients(dy, x, mean, rstd, g, mode, axes, n, per_slice=None, numpy_func=None,
              where=None, **kwargs):
    """dx (x's dtype) and the float64 sums dgamma, dbeta in g's keepdims
    layout, for statistics over `axes` (n values per slice; mean None for
    RMS), from the kernels' two passes chunk by chunk.  per_slice turns
    per-chunk-axes sums into each slice's (group norm adds up channels);
    numpy_func(dy, x=, mean=, rstd=, gamma=, axis=axes, **kwargs) gives dx
    of chunks that hold whole slices.  where (aligned with x): over the
    selected values, n each slice's count of them."""
    shared = tuple(i for i, s in enumerate(g.shape) if s == 1)  # gamma broadcast along them
    sums = chunkwise(functools.partial(tasks.param_sums_block, axes=axes, mode=mode), dy,
                     (x, mean, rstd, g, where), tasks.PARAM_SUMS, "param-sums", summed=shared)
    dgamma, dbeta = (sums[f].sum(axis=shared, keepdims=True) for f in ("dgamma", "dbeta"))
    if numpy_func is not None and whole_slices(x, axes):
        stats = {"rstd": rstd} if mean is None else {"mean": mean, "rstd": rstd}
        dx = per_chunk(numpy_func, dy, dict(x=x, **stats, gamma=g, where=where), x.dtype,
                       index=0, axis=axes, **kwargs)
        return dx, dgamma, dbeta
    a = b = None
    if mode != "scale":
        parts = chunkwise(functools.partial(tasks.slice_sums_block, axes=axes, mode=mode), dy,
                          (x, mean, rstd, g, where), tasks.SLICE_SUMS, "slice-sums",
                          summed=axes)
        a, b = (parts[f].sum(axis=axes, keepdims=True) for f in ("a", "b"))
        if per_slice is not None:
            a, b = per_slice(a), per_slice(b)
        a = a if mode == "center" else None
    if where is None:
        dx = chunkwise(functools.partial(tasks.dx_block, axes=axes, mode=mode, n=n,
                                         out_dtype=x.dtype), dy,
                       (x, mean, rstd, g, aligned(a, x), aligned(b, x)), x.dtype, "dx")
    else:
        dx = chunkwise(functools.partial(tasks.dx_block_where, axes=axes, mode=mode,
                                         out_dtype=x.dtype), dy,
                       (x, mean, rstd, g, aligned(a, x), aligned(b, x), aligned(n, x), where),
                       x.dtype, "dx")
    return dx, dgamma, dbeta


def layer_norm_backward(dy, x, mean, rstd, gamma, axis, out, where=None):
    dy, x = _pair(dy, x)
    where = lazy_where(where, x)
    axes = axes_tuple(axis, x.ndim)
    g, shape, pdt = _gamma(gamma, x, axes)
    mean, rstd = _stat(mean, "mean", x, axes), _stat(rstd, "rstd", x, axes)
    no_out(out)
    dx, dg, db = gradients(dy, x, mean, rstd, g, "center", axes, _count(x, axes, where),
                           where=where, numpy_func=_grad.layer_norm_backward)
    return dx, _grad._param_grad(dg, shape, pdt, None), _grad._param_grad(db, shape, pdt, None)


def rms_norm_backward(dy, x, rstd, gamma, axis, out, where=None):
    dy, x = _pair(dy, x)
    where = lazy_where(where, x)
    axes = axes_tuple(axis, x.ndim)
    g, shape, pdt = _gamma(gamma, x, axes)
    rstd = _stat(rstd, "rstd", x, axes)
    no_out(out)
    dx, dg, _ = gradients(dy, x, None, rstd, g, "rms", axes, _count(x, axes, where),
                          where=where, numpy_func=_grad.rms_norm_backward)
    return dx, _grad._param_grad(dg, shape, pdt, None)


def batch_norm_backward(dy, x, mean, rstd, gamma, axis, training, out, where=None):
    dy, x = _pair(dy, x)
    where = lazy_where(where, x)
    axes = batch_axes(axis, x.ndim, "batch_norm_backward")
    kept = tuple(i for i in range(x.ndim) if i not in axes)
    g, shape, pdt = _gamma(gamma, x, kept)
    mean, rstd = _stat(mean, "mean", x, axes), _stat(rstd, "rstd", x, axes)
    no_out(out)
    dx, dg, db = gradients(dy, x, mean, rstd, g, "center" if training else "scale", axes,
                           _count(x, axes, where), where=where, numpy_func=_grad.batch_norm_backward,
                           training=training)
    return dx, _grad._param_grad(dg, shape, pdt, None), _grad._param_grad(db, shape, pdt, None)


def group_norm_backward(dy, x, mean, rstd, num_groups, gamma, channel_axis, out):
    dy, x = _pair(dy, x)
    grp = Groups(x, num_groups, channel_axis)
    ch, per_group = grp.axis, grp.channels // grp.groups
    axes = tuple(i for i in range(1, x.ndim) if i != ch)

    def stat(value, name):
        # Per sample and group as group_norm returned it; per channel here.
        def check(a):
            if a.shape != grp.stat_shape:
                raise ValueError(f"{name} has shape {a.shape}; expected {grp.stat_shape} "
                                 "(as group_norm returned it)")
            return np.asarray(a, dtype=np.float64)
        a = conformed(value, check(stand_in(value)))
        return aligned(da.repeat(da.asarray(a), per_group, axis=ch), x)

    mean, rstd = stat(mean, "mean"), stat(rstd, "rstd")
    if gamma is None:
        shape, gdt, g = (grp.channels,), None, np.ones(keepdims_shape(x.shape, axes + (0,)))
    else:
        gamma = gamma if isinstance(gamma, da.Array) else np.asarray(gamma)
        shape, gdt = gamma.shape, (gamma.dtype if gamma.dtype.kind == "f" else None)
        g = channel_param(gamma, "gamma", grp, x)
    pdt = param_grad_dtype(gdt, x.dtype)
    no_out(out)

    def group_sum(a):
        """Sums per sample and channel as sums per sample and group, repeated
        for each channel of the group."""
        a = a.rechunk({ch: -1})
        split = a.shape[:ch] + (grp.groups, per_group) + a.shape[ch + 1:]
        return da.repeat(a.reshape(split).sum(axis=ch + 1), per_group, axis=ch)

    dx, dg, db = gradients(dy, x, mean, rstd, aligned(g, x), "center", axes,
                           per_group * _count(x, axes), per_slice=group_sum)
    return dx, _grad._param_grad(dg, shape, pdt, None), _grad._param_grad(db, shape, pdt, None)
