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
                    check_param_shape, keepdims_shape, param_grad_dtype, split_out)
from ._call import backward, kernel_operand
from ._family import Groups
from ._lazy import any_dask, via_dask
from ._where import Input, as_where, keeps_subclass

_CENTER = _simd.kernels.GRAD_MODES["center"]
_RMS = _simd.kernels.GRAD_MODES["rms"]
_SCALE = _simd.kernels.GRAD_MODES["scale"]


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
    """A statistic from the forward (the kernels' stat_operand): keepdims
    layout, or the kept shape."""
    return _simd.kernels.stat_operand_of(
        value, name, keepdims_shape(x_shape, axes),
        tuple(s for i, s in enumerate(x_shape) if i not in axes))


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


def _param_grad(g, shape, dtype, out):
    """A float64 parameter gradient (keepdims layout) in the parameter's
    shape and dtype, into out when given.  A gamma that was broadcast along
    some of its axes (size 1 there) gets the sum over them."""
    if len(shape) == g.ndim and shape != g.shape:
        g = g.sum(axis=tuple(i for i, n in enumerate(shape) if n == 1 and g.shape[i] != 1),
                  keepdims=True)
    g = g.reshape(shape)
    if not isinstance(g, np.ndarray):       # lazy (Dask): the rule block by block
        return g.map_blocks(_simd.kernels.result, dtype, dtype=dtype)
    return _simd.kernels.result(g, dtype, out)


def layer_norm_backward(dy, x, mean, rstd, gamma=None, *, axis=-1, out=None, where=None):
    """Gradients of ``layer_norm``.

    Given dy, the gradient of the loss with respect to the forward's output,
    the gradients with respect to x, gamma and beta, from the statistics the
    forward returned (none is recomputed): per slice, one pass over dy and x
    for its sums, and a second for dx while the slice is in cache.

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
        The forward's normalized axes (default -1; ``None`` means all).
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
    dx : ndarray
        Of x's shape, in x's dtype (the wider of x's and dy's: NumPy's
        promotion of the two, float64 where that is not float16, float32 or
        float64); ``out`` itself when given.
    dgamma, dbeta : ndarray
        In gamma's shape (the normalized shape when gamma is None) and, for
        a float gamma, its dtype (else float32 for a float16/float32 dx,
        float64 for float64); returned even when gamma is None.

    Raises
    ------
    ValueError
        dy not of x's shape, mean, rstd or gamma of the wrong shape, a
        repeated axis, ``out`` of the wrong shape (or tuple length) or
        read-only, or a ``where`` that does not broadcast to x.
    TypeError
        dy, x, mean, rstd or gamma not of real numbers, an axis that is not
        an integer, ``out`` not an ndarray of the result's dtype, a
        ``where`` that is not boolean, or an array type that converting to
        an ndarray would strip of its meaning.
    numpy.exceptions.AxisError
        An axis out of range (a ValueError too).

    See Also
    --------
    layer_norm : The forward, whose ``return_stats=True`` gives mean and rstd.
    rms_norm_backward : The gradients of ``rms_norm``.
    batch_norm_backward : The gradients of ``batch_norm``.

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
    pdt = param_grad_dtype(gdt, x.dtype)
    m, r = _stat(mean, "mean", x.shape, axes), _stat(rstd, "rstd", x.shape, axes)
    outs = _outs(out, 3, x, shape, pdt)
    dx, dg, db = backward(dy, x, axes, m, r, g, "center", outs[0], **sel.grad_args(x))
    return (sel.grad_dx(dx, outs[0]), _param_grad(dg, shape, pdt, outs[1]),
            _param_grad(db, shape, pdt, outs[2]))


def rms_norm_backward(dy, x, rstd, gamma=None, *, axis=-1, out=None, where=None):
    """Gradients of ``rms_norm``: ``(dx, dgamma)``.

    As ``layer_norm_backward``, without the centring and the bias: from the
    ``rstd`` the forward returned, one pass over dy and x for each slice's
    sum, a second for dx.

    Parameters
    ----------
    dy : array_like
        Gradient of the loss with respect to the output, of x's shape.
    x : array_like
        The forward's input.
    rstd : array_like
        What ``rms_norm(..., return_stats=True)`` returned (keepdims layout;
        the kept shape also works); float32 for float16/float32 input, with
        the rounding ``layer_norm_backward`` describes.
    gamma : array_like, optional
        The forward's gain (None: ones).
    axis : int or tuple of ints, optional
        The forward's normalized axes (default -1; ``None`` means all).
    out : ndarray or tuple, optional
        Arrays for the results: dx alone, or ``(dx, dgamma)`` (entries may be
        None), of the results' shapes and dtypes; ``out=dy`` or ``out=x``
        works in place.  Not with Dask arrays (TypeError).
    where : array_like of bool, optional
        The forward's ``where=``, as in ``layer_norm_backward``: n, the sums
        and dgamma over the selected values, dx written there alone; a
        masked x (or dy) selects its unmasked values.

    Returns
    -------
    dx : ndarray
        Of x's shape, in x's dtype (the wider of x's and dy's, as in
        ``layer_norm_backward``); ``out`` itself when given.
    dgamma : ndarray
        In gamma's shape (the normalized shape when gamma is None) and, for
        a float gamma, its dtype (else float32 for a float16/float32 dx,
        float64 for float64).

    Raises
    ------
    ValueError
        dy not of x's shape, rstd or gamma of the wrong shape, a repeated
        axis, ``out`` of the wrong shape (or tuple length) or read-only, or a
        ``where`` that does not broadcast to x.
    TypeError
        dy, x, rstd or gamma not of real numbers, an axis that is not an
        integer, ``out`` not an ndarray of the result's dtype, a ``where``
        that is not boolean, or an array type that converting to an ndarray
        would strip of its meaning.
    numpy.exceptions.AxisError
        An axis out of range (a ValueError too).

    See Also
    --------
    rms_norm : The forward, whose ``return_stats=True`` gives rstd.
    layer_norm_backward : The gradients of ``layer_norm``.

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
    pdt = param_grad_dtype(gdt, x.dtype)
    r = _stat(rstd, "rstd", x.shape, axes)
    outs = _outs(out, 2, x, shape, pdt)
    dx, dg, _ = backward(dy, x, axes, np.zeros_like(r), r, g, "rms", outs[0],
                         **sel.grad_args(x))
    return sel.grad_dx(dx, outs[0]), _param_grad(dg, shape, pdt, outs[1])


def batch_norm_backward(dy, x, mean, rstd, gamma=None, *, axis=None, training=True,
                        out=None, where=None):
    """Gradients of ``batch_norm``: ``(dx, dgamma, dbeta)``.

    With ``training=True`` the gradient flows through the batch statistics;
    with ``training=False`` (statistics were the running ones, constants)
    ``dx = dy * gamma * rstd``.  Both use the ``mean`` and ``rstd`` the
    forward returned, in the passes of ``layer_norm_backward``.

    Parameters
    ----------
    dy : array_like
        Gradient of the loss with respect to the output, of x's shape.
    x : array_like
        The forward's input.
    mean, rstd : array_like
        What ``batch_norm(..., return_stats=True)`` returned (keepdims
        layout; the kept shape also works).
    gamma : array_like, optional
        The forward's per-feature gain (None: ones).
    axis : int or tuple of ints, optional
        The forward's reduced axes, as in ``batch_norm`` (default every axis
        but 1).
    training : bool, optional
        Whether the forward used the batch statistics (default) or the
        running ones.
    out : ndarray or tuple, optional
        Arrays for the results: dx alone, or ``(dx, dgamma, dbeta)`` (entries
        may be None), of the results' shapes and dtypes; ``out=dy`` or
        ``out=x`` works in place.  Not with Dask arrays (TypeError).
    where : array_like of bool, optional
        The forward's ``where=``, as in ``layer_norm_backward``: n is each
        feature's number of selected values, dx is written there alone; a
        masked x (or dy) selects its unmasked values.

    Returns
    -------
    dx : ndarray
        Of x's shape, in x's dtype (the wider of x's and dy's, as in
        ``layer_norm_backward``); ``out`` itself when given.
    dgamma, dbeta : ndarray
        In gamma's shape (the kept shape, ``(C,)`` by default, when gamma is
        None) and, for a float gamma, its dtype (else float32 for a
        float16/float32 dx, float64 for float64).

    Raises
    ------
    ValueError
        dy not of x's shape, mean, rstd or gamma of the wrong shape, x of
        fewer than 2 dimensions with ``axis=None``, a repeated axis, ``out``
        of the wrong shape (or tuple length) or read-only, or a ``where``
        that does not broadcast to x.
    TypeError
        dy, x, mean, rstd or gamma not of real numbers, an axis that is not
        an integer, ``out`` not an ndarray of the result's dtype, a
        ``where`` that is not boolean, or an array type that converting to
        an ndarray would strip of its meaning.
    numpy.exceptions.AxisError
        An axis out of range (a ValueError too).

    See Also
    --------
    batch_norm : The forward, whose ``return_stats=True`` gives mean and rstd.
    layer_norm_backward : The gradients of ``layer_norm``.

    Examples
    --------
    >>> import numpy as np, fastnorm
    >>> x = np.array([[1.0, 10.0], [3.0, 30.0]])
    >>> y, mean, rstd = fastnorm.batch_norm(x, axis=0, eps=0.0, return_stats=True)
    >>> dx, dgamma, dbeta = fastnorm.batch_norm_backward(y, x, mean, rstd, axis=0)
    >>> dgamma, dbeta
    (array([2., 2.]), array([0., 0.]))
    """
    if where is None and type(training) is bool:
        fast = _simd.kernels.fast_norm_backward(_CENTER if training else _SCALE, dy, x, mean,
                                                rstd, gamma, axis, out, 3, True)
        if fast is not None:
            return fast
    if any_dask(dy, x, mean, rstd, gamma, where):
        return via_dask(batch_norm_backward, locals())
    dy, x, sel = _selected(dy, x, where)
    axes = batch_axes(axis, x.ndim, "batch_norm_backward")
    kept = tuple(i for i in range(x.ndim) if i not in axes)
    g, shape, gdt = _gamma(gamma, "gamma", x.shape, kept)
    pdt = param_grad_dtype(gdt, x.dtype)
    m, r = _stat(mean, "mean", x.shape, axes), _stat(rstd, "rstd", x.shape, axes)
    outs = _outs(out, 3, x, shape, pdt)
    dx, dg, db = backward(dy, x, axes, m, r, g, "center" if training else "scale", outs[0],
                          **sel.grad_args(x))
    return (sel.grad_dx(dx, outs[0]), _param_grad(dg, shape, pdt, outs[1]),
            _param_grad(db, shape, pdt, outs[2]))


@keeps_subclass
def group_norm_backward(dy, x, mean, rstd, num_groups, gamma=None, *, channel_axis=1,
                        out=None):
    """Gradients of ``group_norm``: ``(dx, dgamma, dbeta)``.

    From the ``mean`` and ``rstd`` the forward returned, per sample and
    group as ``layer_norm_backward`` computes per slice; also the gradients
    of ``instance_norm``, with ``num_groups`` the number of channels.

    Parameters
    ----------
    dy : array_like
        Gradient of the loss with respect to the output, of x's shape.
    x : array_like
        The forward's input.
    mean, rstd : array_like
        What ``group_norm(..., return_stats=True)`` returned, in that shape
        (``(N, G, 1, 1)`` for NCHW).
    num_groups : int
        The forward's number of groups.
    gamma : array_like, optional
        The forward's per-channel gain, ``(C,)`` or keepdims layout (None:
        ones).
    channel_axis : int, optional
        The forward's channel axis (default 1).
    out : ndarray or tuple, optional
        Arrays for the results: dx alone, or ``(dx, dgamma, dbeta)`` (entries
        may be None), of the results' shapes and dtypes; ``out=dy`` or
        ``out=x`` works in place.  Not with Dask arrays (TypeError).

    Returns
    -------
    dx : ndarray
        Of x's shape, in x's dtype (the wider of x's and dy's, as in
        ``layer_norm_backward``); ``out`` itself when given.
    dgamma, dbeta : ndarray
        In gamma's shape (``(C,)`` when gamma is None) and, for a float
        gamma, its dtype (else float32 for a float16/float32 dx, float64 for
        float64).  An ndarray subclass dy or x (other than a masked array)
        gets all three results through its ``__array_wrap__``.

    Raises
    ------
    ValueError
        dy not of x's shape, mean or rstd not of the forward's statistics'
        shape, gamma of the wrong shape, ``C % num_groups != 0`` or
        ``num_groups < 1``, x with fewer than 2 dimensions,
        ``channel_axis=0``, or ``out`` of the wrong shape (or tuple length)
        or read-only.
    TypeError
        ``num_groups`` or ``channel_axis`` not an integer, dy, x, mean, rstd
        or gamma not of real numbers (or dy or x a masked array with masked
        values), or ``out`` not an ndarray of the result's dtype.
    numpy.exceptions.AxisError
        ``channel_axis`` out of range (a ValueError too).

    See Also
    --------
    group_norm : The forward, whose ``return_stats=True`` gives mean and rstd.
    instance_norm : Its gradients too, with one group per channel.
    layer_norm_backward : The gradients of ``layer_norm``.

    Examples
    --------
    >>> import numpy as np, fastnorm
    >>> x = np.arange(8.0).reshape(1, 4, 2)
    >>> y, mean, rstd = fastnorm.group_norm(x, 2, return_stats=True)
    >>> dx, dgamma, dbeta = fastnorm.group_norm_backward(np.ones_like(x), x, mean, rstd, 2)
    >>> dbeta
    array([2., 2., 2., 2.])
    """
    fast = _simd.kernels.fast_group_norm_backward(dy, x, mean, rstd, num_groups, gamma,
                                                  channel_axis, out)
    if fast is not None:
        return fast
    if any_dask(dy, x, mean, rstd, gamma):
        return via_dask(group_norm_backward, locals())
    dy, x = _pair(dy, x)
    grp = Groups(x, num_groups, channel_axis)
    vx, vdy = grp.split(x), grp.split(dy)
    axes = grp.reduced

    def stat(value, name):      # (the kernels' stat_operand, as group_norm returned it)
        return _simd.kernels.stat_operand_of(value, name, grp.stat_shape, grp.stat_shape
                                             ).reshape(keepdims_shape(vx.shape, axes))

    gdt = None
    c = (grp.channels,)
    if gamma is not None:
        a = np.asarray(gamma)
        gdt = a.dtype if a.dtype.kind == "f" else None
        c = a.shape  # (C,) or keepdims layout: the gradients come back alike
    pdt = param_grad_dtype(gdt, x.dtype)
    if gamma is None:
        g = np.ones(keepdims_shape(vx.shape, tuple(i for i in range(vx.ndim)
                                                   if i not in (grp.axis, grp.axis + 1))))
    else:
        g = kernel_operand(grp.channel_param(gamma, "gamma"))
    m, r = stat(mean, "mean"), stat(rstd, "rstd")
    outs = _outs(out, 3, x, c, pdt)
    dx_out = None if outs[0] is None else grp.split(outs[0])
    dx, dg, db = backward(vdy, vx, axes, m, r, g, "center", dx_out)
    dx = dx.reshape(x.shape) if outs[0] is None else outs[0]
    # Per channel in x's keepdims layout, so that a gamma of one value for
    # every channel ((1, 1, 1, 1)) gets their sum.
    per_channel = tuple(grp.channels if i == grp.axis else 1 for i in range(x.ndim))
    dg, db = dg.reshape(per_channel), db.reshape(per_channel)
    return dx, _param_grad(dg, c, pdt, outs[1]), _param_grad(db, c, pdt, outs[2])
