"""The gradients on Dask arrays.

With xhat = (x - mean) * rstd and gd = dy * gamma, per slice
``dx = rstd * (gd - A/n - xhat * B/n)`` where ``A = sum(gd)`` and
``B = sum(gd * xhat)`` (RMS: no centring and A = 0; batch norm in eval:
``dx = rstd * gd``), and ``dgamma = sum(dy * xhat)``, ``dbeta = sum(dy)``
over the values that read each entry of gamma.  A and B, dgamma and dbeta
are sums over chunks: NumPy on each chunk, in float64, added in Dask's tree
reduction, so the reduced axes may be chunked.  When every chunk holds whole
slices, dx comes from the kernels on each chunk instead.
"""
import math

import dask.array as da
import numpy as np

from . import _grad
from ._args import axes_tuple, batch_axes, keepdims_shape
from ._dask_args import aligned, conformed, lazy_array, lazy_input, no_out, stand_in
from ._dask_graph import channel_param, per_chunk, whole_slices
from ._family import Groups

_F64 = np.dtype(np.float64)


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
    return aligned(conformed(gamma, g), x), shape, _grad._param_dtype(gdt, x.dtype)


def _slice_sum(axes):
    def total(a):
        return a.sum(axis=axes, keepdims=True)
    return total


def gradients(dy, x, mean, rstd, g, mode, n, slice_sum):
    """dx (x's dtype) and the float64 sums dgamma, dbeta in g's keepdims
    layout.  slice_sum(a) gives each slice's sum of a, broadcast against x;
    n is the number of values per slice; mean is None for RMS."""
    xf, dyf = x.astype(_F64), dy.astype(_F64)
    xhat = xf * rstd if mean is None else (xf - mean) * rstd
    gd = dyf * g
    if mode == "scale":
        dx = gd * rstd
    else:
        inner = gd - xhat * (slice_sum(gd * xhat) / n)
        if mode == "center":
            inner = inner - slice_sum(gd) / n
        dx = rstd * inner
    shared = tuple(i for i, s in enumerate(g.shape) if s == 1)  # gamma broadcast along them
    return (dx.astype(x.dtype), (dyf * xhat).sum(axis=shared, keepdims=True),
            dyf.sum(axis=shared, keepdims=True))


def _backward(numpy_func, dy, x, axes, mean, rstd, g, mode, **kwargs):
    """dx and float64 dgamma, dbeta of a normalization over `axes`: dx from
    the NumPy function on each chunk when the chunks hold whole slices."""
    n = math.prod(x.shape[i] for i in axes)
    dx, dg, db = gradients(dy, x, mean, rstd, g, mode, n, _slice_sum(axes))
    if whole_slices(x, axes):
        stats = {"rstd": rstd} if mean is None else {"mean": mean, "rstd": rstd}
        dx = per_chunk(numpy_func, dy, dict(x=x, **stats, gamma=g), x.dtype, index=0,
                       axis=axes, **kwargs)
    return dx, dg, db


def layer_norm_backward(dy, x, mean, rstd, gamma, axis, out):
    dy, x = _pair(dy, x)
    axes = axes_tuple(axis, x.ndim)
    g, shape, pdt = _gamma(gamma, x, axes)
    mean, rstd = _stat(mean, "mean", x, axes), _stat(rstd, "rstd", x, axes)
    no_out(out)
    dx, dg, db = _backward(_grad.layer_norm_backward, dy, x, axes, mean, rstd, g, "center")
    return dx, _grad._param_grad(dg, shape, pdt, None), _grad._param_grad(db, shape, pdt, None)


def rms_norm_backward(dy, x, rstd, gamma, axis, out):
    dy, x = _pair(dy, x)
    axes = axes_tuple(axis, x.ndim)
    g, shape, pdt = _gamma(gamma, x, axes)
    rstd = _stat(rstd, "rstd", x, axes)
    no_out(out)
    dx, dg, _ = _backward(_grad.rms_norm_backward, dy, x, axes, None, rstd, g, "rms")
    return dx, _grad._param_grad(dg, shape, pdt, None)


def batch_norm_backward(dy, x, mean, rstd, gamma, axis, training, out):
    dy, x = _pair(dy, x)
    axes = batch_axes(axis, x.ndim, "batch_norm_backward")
    kept = tuple(i for i in range(x.ndim) if i not in axes)
    g, shape, pdt = _gamma(gamma, x, kept)
    mean, rstd = _stat(mean, "mean", x, axes), _stat(rstd, "rstd", x, axes)
    no_out(out)
    dx, dg, db = _backward(_grad.batch_norm_backward, dy, x, axes, mean, rstd, g,
                           "center" if training else "scale", training=training)
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
    pdt = _grad._param_dtype(gdt, x.dtype)
    no_out(out)

    def group_sum(a):
        """Per sample and group, the sum of a, repeated for each channel."""
        s = a.sum(axis=axes, keepdims=True).rechunk({ch: -1})
        split = s.shape[:ch] + (grp.groups, per_group) + s.shape[ch + 1:]
        return da.repeat(s.reshape(split).sum(axis=ch + 1), per_group, axis=ch)

    n = per_group * math.prod(x.shape[i] for i in axes)
    dx, dg, db = gradients(dy, x, mean, rstd, aligned(g, x), "center", n, group_sum)
    return dx, _grad._param_grad(dg, shape, pdt, None), _grad._param_grad(db, shape, pdt, None)
