"""Gradients: dx, dgamma and dbeta of the normalizers, from the statistics
the forward returned (``return_stats=True``).

Each is one kernel call: per slice, the sums ``A = sum(dy * gamma)`` and
``B = sum(dy * gamma * xhat)`` in one pass over (dy, x), then dx in a second
pass while the slice is in cache; ``dgamma = sum(dy * xhat)`` and ``dbeta =
sum(dy)`` are summed in the first pass into per-block buffers (no temporary
the size of the input).
"""

import numpy as np

from . import _explain, _simd
from ._args import (FLOAT_DTYPES, as_input, axes_tuple, batch_axes, check_out,
                    check_param_shape, keepdims_shape, split_out)
from ._call import backward, kernel_operand
from ._family import Groups
from ._lazy import any_dask, via_dask
from ._where import Input, as_where, keeps_subclass

_CENTER = _simd.kernels.GRAD_MODES["center"]
_RMS = _simd.kernels.GRAD_MODES["rms"]


def _pair(dy, x):
    """dy and x as arrays of one float dtype (the wider of the two; one
    converted copy when they differ) and the same shape."""
    x, dy = as_input(x), as_input(dy, "dy")
    if dy.shape != x.shape:
        raise ValueError(f"dy has shape {dy.shape}; expected x's shape {x.shape}")
    dt = np.promote_types(x.dtype, dy.dtype)
    if dt not in FLOAT_DTYPES:
        dt = np.dtype(np.float64)
    for a, name in ((dy, "dy"), (x, "x")):
        if a.dtype != dt:
            _explain.copied(f"{name}: {a.dtype} converted to {dt}")
    return dy.astype(dt, copy=False), x.astype(dt, copy=False)


class _GradSelection:
    """A gradient's selection: where= and the masks of a masked x or dy."""

    def __init__(self, inp):
        self.inp = inp
        self.where = None

    def grad_args(self, x):
        self.where = as_where(self.inp.where, x.shape)
        return {} if self.where is None else {"where": self.where}

    def grad_dx(self, dx, given):
        if given is not None or not self.inp.masked:
            return dx if given is not None else self.inp.wrap(dx)
        return self.inp.wrap(dx, None if self.where is None
                             else np.logical_not(self.where.view(np.bool_)))


def _selected(dy, x, where):
    """dy and x as _pair makes them, and the selection: where= combined with
    the unmasked values of a masked x and dy."""
    inp = Input(x, where)
    dyi = Input(dy, inp.where, "dy")
    inp.where = dyi.where
    inp.masked = inp.masked or dyi.masked
    dy, x = _pair(dyi.data, inp.data)
    return dy, x, _GradSelection(inp)


def _stat(value, name, x_shape, axes):
    """A statistic from the forward: keepdims layout, or the kept shape."""
    a = np.asarray(value)
    if a.dtype.kind not in "fiu":
        raise TypeError(f"{name} has dtype {a.dtype}; it must hold real numbers")
    keep = keepdims_shape(x_shape, axes)
    kept = tuple(s for i, s in enumerate(x_shape) if i not in axes)
    if a.shape == kept:
        a = a.reshape(keep)
    if a.shape != keep:
        raise ValueError(f"{name} has shape {a.shape}; expected {keep} (as the forward "
                         f"returned it) or {kept}")
    return kernel_operand(a)


def _gamma(gamma, name, x_shape, along):
    """gamma as C-contiguous float64 in keepdims layout (ones when None), the
    shape and dtype its gradients are returned in, and their keepdims shape."""
    keep = tuple(x_shape[i] if i in along else 1 for i in range(len(x_shape)))
    named = tuple(x_shape[i] for i in along)
    if gamma is None:
        return np.ones(keep), named, None
    a = np.asarray(gamma)
    if a.dtype.kind not in "fiub":
        raise TypeError(f"{name} has dtype {a.dtype}; it must hold real numbers")
    check_param_shape(a.shape, name, x_shape, along)
    if a.shape == named:
        g = a.reshape(keep)
    else:
        g = np.broadcast_to(a, keep)  # gradients are summed back in _param_grad
    return kernel_operand(g), a.shape, (a.dtype if a.dtype.kind == "f" else None)


def _outs(out, n, x, shape, dtype):
    """out= of a backward: dx alone or a tuple (dx, dgamma[, dbeta]); every
    array checked before anything is written."""
    outs = split_out(out, n)
    if outs[0] is not None:
        check_out(outs[0], "out", x.shape, x.dtype)
    for i, o in enumerate(outs[1:], start=1):
        if o is not None:
            check_out(o, f"out[{i}]", shape, dtype)
    return outs


def _deliver(grad, out):
    if out is None:
        return grad
    np.copyto(out, grad)
    return out


def _param_dtype(gamma_dtype, x_dtype):
    """Parameter gradients come in gamma's float dtype (native byte order,
    as NumPy's results are); with no (float) gamma, float32 for
    float16/float32 inputs and float64 for float64."""
    if gamma_dtype is not None:
        return np.dtype(gamma_dtype).newbyteorder("=")
    return np.dtype(np.float64 if x_dtype == np.float64 else np.float32)


def _param_grad(g, shape, dtype, out):
    """A float64 parameter gradient (keepdims layout) in the parameter's
    shape and dtype, into out when given.  A gamma that was broadcast along
    some of its axes (size 1 there) gets the sum over them."""
    if len(shape) == g.ndim and shape != g.shape:
        g = g.sum(axis=tuple(i for i, n in enumerate(shape) if n == 1 and g.shape[i] != 1),
                  keepdims=True)
    return _deliver(g.reshape(shape).astype(dtype, copy=False), out)


def layer_norm_backward(dy, x, mean, rstd, gamma=None, *, axis=-1, out=None, where=None):
    """Gradients of ``layer_norm``.

    Parameters
    ----------
    dy : array_like
        Gradient of the loss with respect to the output, of x's shape.
    x : array_like
        The forward's input.
    mean, rstd : array_like
        The statistics ``layer_norm(..., return_stats=True)`` returned
        (keepdims layout; the kept shape also works).  For float16/float32
        input they are float32: for data whose mean is large against its
        spread (``1e4 + 1e-2 * noise``) that rounding limits the gradient's
        accuracy; a forward with ``dtype=np.float64`` returns float64 ones.
    gamma : array_like, optional
        The forward's gain (None: ones).
    axis : int or tuple of ints, optional
        The forward's normalized axes.
    out : ndarray or tuple, optional
        Arrays for the results: dx alone, or ``(dx, dgamma, dbeta)`` (entries
        may be None), of the results' shapes and dtypes; ``out=dy`` or
        ``out=x`` works in place.  Not with Dask arrays (TypeError).
    where : array_like of bool, optional
        The forward's ``where=``: n, the sums and the parameter gradients
        are over the selected values; dx is written at the selected
        positions alone (elsewhere ``out=`` keeps its values, a fresh dx
        holds 0: x there took no part in the forward).  A masked x (or dy)
        selects its unmasked values, and dx comes back masked elsewhere.

    Returns
    -------
    dx, dgamma, dbeta : ndarray
        dx in x's dtype (the wider of x's and dy's); dgamma and dbeta in
        gamma's shape and float dtype (the normalized shape, float32 or
        float64, when gamma is None), returned even when gamma is None.

    Examples
    --------
    >>> import numpy as np, fastnorm
    >>> x = np.array([[1.0, 2.0, 4.0]])
    >>> y, mean, rstd = fastnorm.layer_norm(x, eps=0.0, return_stats=True)
    >>> dx, dgamma, dbeta = fastnorm.layer_norm_backward(np.ones_like(x), x, mean, rstd)
    >>> bool(np.abs(dx).max() < 1e-15), dbeta
    (True, array([1., 1., 1.]))
    """
    if where is None:
        fast = _simd.kernels.fast_norm_backward(_CENTER, dy, x, mean, rstd, gamma, axis, out, 3)
        if fast is not None:
            return fast
    if any_dask(dy, x, mean, rstd, gamma, where):
        return via_dask(layer_norm_backward, locals())
    dy, x, sel = _selected(dy, x, where)
    axes = axes_tuple(axis, x.ndim)
    g, shape, gdt = _gamma(gamma, "gamma", x.shape, axes)
    pdt = _param_dtype(gdt, x.dtype)
    outs = _outs(out, 3, x, shape, pdt)
    dx, dg, db = backward(dy, x, axes, _stat(mean, "mean", x.shape, axes),
                          _stat(rstd, "rstd", x.shape, axes), g, "center", outs[0],
                          **sel.grad_args(x))
    return (sel.grad_dx(dx, outs[0]), _param_grad(dg, shape, pdt, outs[1]),
            _param_grad(db, shape, pdt, outs[2]))


def rms_norm_backward(dy, x, rstd, gamma=None, *, axis=-1, out=None, where=None):
    """Gradients of ``rms_norm``: ``(dx, dgamma)``.

    ``rstd`` is what ``rms_norm(..., return_stats=True)`` returned; the rest
    (``where=`` included) as in ``layer_norm_backward`` (``out`` a tuple
    ``(dx, dgamma)``).

    Examples
    --------
    >>> import numpy as np, fastnorm
    >>> x = np.array([[3.0, 4.0]])
    >>> y, rstd = fastnorm.rms_norm(x, eps=0.0, return_stats=True)
    >>> dx, dgamma = fastnorm.rms_norm_backward(np.array([[1.0, 0.0]]), x, rstd)
    >>> dx.round(4), dgamma.round(4)
    (array([[ 0.181 , -0.1358]]), array([0.8485, 0.    ]))
    """
    if where is None:
        fast = _simd.kernels.fast_norm_backward(_RMS, dy, x, None, rstd, gamma, axis, out, 2)
        if fast is not None:
            return fast
    if any_dask(dy, x, rstd, gamma, where):
        return via_dask(rms_norm_backward, locals())
    dy, x, sel = _selected(dy, x, where)
    axes = axes_tuple(axis, x.ndim)
    g, shape, gdt = _gamma(gamma, "gamma", x.shape, axes)
    pdt = _param_dtype(gdt, x.dtype)
    outs = _outs(out, 2, x, shape, pdt)
    r = _stat(rstd, "rstd", x.shape, axes)
    dx, dg, _ = backward(dy, x, axes, np.zeros_like(r), r, g, "rms", outs[0],
                         **sel.grad_args(x))
    return sel.grad_dx(dx, outs[0]), _param_grad(dg, shape, pdt, outs[1])


def batch_norm_backward(dy, x, mean, rstd, gamma=None, *, axis=None, training=True,
                        out=None, where=None):
    """Gradients of ``batch_norm``: ``(dx, dgamma, dbeta)``.

    With ``training=True`` the gradient flows through the batch statistics;
    with ``training=False`` (statistics were the running ones, constants)
    ``dx = dy * gamma * rstd``.  ``mean`` and ``rstd`` are what
    ``batch_norm(..., return_stats=True)`` returned; ``axis`` as in
    ``batch_norm`` (default every axis but 1); ``out`` and ``where`` as in
    ``layer_norm_backward`` (``where``: the forward's; n is each feature's
    number of selected values).

    Examples
    --------
    >>> import numpy as np, fastnorm
    >>> x = np.array([[1.0, 10.0], [3.0, 30.0]])
    >>> y, mean, rstd = fastnorm.batch_norm(x, axis=0, eps=0.0, return_stats=True)
    >>> dx, dgamma, dbeta = fastnorm.batch_norm_backward(y, x, mean, rstd, axis=0)
    >>> dgamma, dbeta
    (array([2., 2.]), array([0., 0.]))
    """
    if any_dask(dy, x, mean, rstd, gamma, where):
        return via_dask(batch_norm_backward, locals())
    dy, x, sel = _selected(dy, x, where)
    axes = batch_axes(axis, x.ndim, "batch_norm_backward")
    kept = tuple(i for i in range(x.ndim) if i not in axes)
    g, shape, gdt = _gamma(gamma, "gamma", x.shape, kept)
    pdt = _param_dtype(gdt, x.dtype)
    outs = _outs(out, 3, x, shape, pdt)
    dx, dg, db = backward(dy, x, axes, _stat(mean, "mean", x.shape, axes),
                          _stat(rstd, "rstd", x.shape, axes), g,
                          "center" if training else "scale", outs[0], **sel.grad_args(x))
    return (sel.grad_dx(dx, outs[0]), _param_grad(dg, shape, pdt, outs[1]),
            _param_grad(db, shape, pdt, outs[2]))


@keeps_subclass
def group_norm_backward(dy, x, mean, rstd, num_groups, gamma=None, *, channel_axis=1,
                        out=None):
    """Gradients of ``group_norm``: ``(dx, dgamma, dbeta)``, dgamma and dbeta
    of gamma's shape (``(C,)`` when gamma is None).  ``mean`` and ``rstd`` are what
    ``group_norm(..., return_stats=True)`` returned; ``out`` as in
    ``layer_norm_backward``.

    Examples
    --------
    >>> import numpy as np, fastnorm
    >>> x = np.arange(8.0).reshape(1, 4, 2)
    >>> y, mean, rstd = fastnorm.group_norm(x, 2, return_stats=True)
    >>> dx, dgamma, dbeta = fastnorm.group_norm_backward(np.ones_like(x), x, mean, rstd, 2)
    >>> dbeta
    array([2., 2., 2., 2.])
    """
    if any_dask(dy, x, mean, rstd, gamma):
        return via_dask(group_norm_backward, locals())
    dy, x = _pair(dy, x)
    grp = Groups(x, num_groups, channel_axis)
    vx, vdy = grp.split(x), grp.split(dy)
    axes = grp.reduced

    def stat(value, name):
        a = np.asarray(value)
        if a.shape != grp.stat_shape:
            raise ValueError(f"{name} has shape {a.shape}; expected {grp.stat_shape} "
                             "(as group_norm returned it)")
        return _stat(a.reshape(keepdims_shape(vx.shape, axes)), name, vx.shape, axes)

    gdt = None
    c = (grp.channels,)
    if gamma is not None:
        a = np.asarray(gamma)
        gdt = a.dtype if a.dtype.kind == "f" else None
        c = a.shape  # (C,) or keepdims layout: the gradients come back alike
    pdt = _param_dtype(gdt, x.dtype)
    outs = _outs(out, 3, x, c, pdt)
    if gamma is None:
        g = np.ones(keepdims_shape(vx.shape, tuple(i for i in range(vx.ndim)
                                                   if i not in (grp.axis, grp.axis + 1))))
    else:
        g = kernel_operand(grp.channel_param(gamma, "gamma"))
    dx_out = None if outs[0] is None else grp.split(outs[0])
    dx, dg, db = backward(vdy, vx, axes, stat(mean, "mean"), stat(rstd, "rstd"), g, "center",
                      dx_out)
    dx = dx.reshape(x.shape) if outs[0] is None else outs[0]
    # Per channel in x's keepdims layout, so that a gamma of one value for
    # every channel ((1, 1, 1, 1)) gets their sum.
    per_channel = tuple(grp.channels if i == grp.axis else 1 for i in range(x.ndim))
    dg, db = dg.reshape(per_channel), db.reshape(per_channel)
    return dx, _param_grad(dg, c, pdt, outs[1]), _param_grad(db, c, pdt, outs[2])
