"""The rest of the family: group and instance norm, weight normalization and
weight standardization.  Each is a choice of reduced axes (and a view that
splits the channel axis into groups) on the same kernels as the core."""
import math

import numpy as np

from . import _simd
from ._args import (as_input, axes_tuple, check_eps, check_out, keepdims_shape, param,
                    result_dtypes, split_out)
from ._call import deliver, normalize
from ._where import keeps_subclass
from ._lazy import any_dask, via_dask


# --------------------------------------------------------------------------
# group and instance norm

class Groups:
    """x seen with its channel axis split into (groups, channels per group):
    a view, whatever x's strides.  Statistics are per (sample, group), over
    the channels of the group and every axis but 0."""

    def __init__(self, x, num_groups, channel_axis):
        # The split view's shape: (..., groups, channels per group, ...);
        # statistics as returned: x's shape with the channel axis holding
        # the groups and every other axis but 0 of size 1.
        ch, g, self.view_shape, self.stat_shape = _simd.kernels.groups_view(
            x.shape, num_groups, channel_axis)
        self.x_shape, self.axis, self.groups, self.channels = x.shape, ch, g, x.shape[ch]
        self.reduced = tuple(i for i in range(1, x.ndim + 1) if i != ch)

    def split(self, a):
        """An array of x's shape, as a view with the channel axis split."""
        v = a.reshape(self.view_shape)
        assert v.base is not None or v is a  # splitting one axis never copies
        return v

    def channel_vector(self, value, name):
        """gamma/beta as an array of shape (C,): given so, or with x.ndim
        dimensions that broadcast to x along the channel axis alone (keepdims
        layout: (1, C, 1, 1), or (1, 1, 1, 1) for one value for every
        channel, as layer_norm and batch_norm take it)."""
        a = np.asarray(value)
        keep = tuple(self.channels if i == self.axis else 1 for i in range(len(self.x_shape)))
        if (a.ndim == len(self.x_shape) and a.shape[self.axis] in (1, self.channels)
                and all(n == 1 for i, n in enumerate(a.shape) if i != self.axis)):
            a = np.ascontiguousarray(np.broadcast_to(a.reshape(a.shape[self.axis]),
                                                     (self.channels,)))
        if a.shape != (self.channels,):
            raise ValueError(f"{name} has shape {a.shape}; expected ({self.channels},) "
                             f"or {keep} (keepdims layout) for x of shape {self.x_shape}")
        return a

    def channel_param(self, value, name):
        """gamma/beta (see channel_vector) as float64 in the split view's
        keepdims layout."""
        if value is None:
            return None
        a = self.channel_vector(value, name)
        shape = [1] * len(self.view_shape)
        shape[self.axis], shape[self.axis + 1] = self.groups, self.channels // self.groups
        return param(a.reshape(shape), name, self.view_shape, (self.axis, self.axis + 1))

    def stats_out(self, stat):
        """A statistic of the split view (keepdims layout) in stat_shape."""
        return stat.reshape(self.stat_shape)


@keeps_subclass
def group_norm(x, num_groups, gamma=None, beta=None, *, channel_axis=1, eps=1e-5,
               out=None, dtype=None, return_stats=False):
    """Group normalization (Wu & He): statistics per sample and group of channels.

    The channels are split into ``num_groups`` groups of consecutive
    channels; each sample's groups are normalized with the mean and biased
    variance over the channels of the group and every other axis but 0,
    and the per-channel gain and bias are applied in the same pass.

    Parameters
    ----------
    x : array_like
        Input of shape ``(N, C, *)`` (or channels anywhere: ``channel_axis``).
        Read in place in any layout; NCHW and NHWC alike need no copy
        (integers and bool are converted to float64).
    num_groups : int
        Number of groups; must divide C.
    gamma, beta : array_like, optional
        Per-channel gain and bias of shape ``(C,)``, or in keepdims layout
        (x.ndim dimensions, ``(1, C, 1, 1)``, or ``(1, 1, 1, 1)`` for one
        value for every channel, as the other normalizations take it).
        Default: 1 and 0.
    channel_axis : int, optional
        The channel axis (default 1; -1 for channels-last).  Not 0, which is
        the batch axis.
    eps : float, optional
        Added to the variance.  Finite and >= 0.
    out : ndarray or tuple, optional
        Output of x's shape and the result dtype; with ``return_stats`` a
        tuple ``(y, mean, rstd)``.  Not with Dask arrays (TypeError).
    dtype : dtype, optional
        Output dtype (float16, float32 or float64); default x's float dtype.
    return_stats : bool, optional
        Also return ``mean`` and ``rstd``.

    Returns
    -------
    y : ndarray
        The normalized x, of x's shape and the result dtype (``out``
        itself when given); an ndarray subclass other than a masked array
        comes back through its ``__array_wrap__``.
    mean, rstd : ndarray
        With ``return_stats=True`` alone: x's shape with the channel axis
        holding the groups and every other axis but 0 of size 1 (``(N, G, 1,
        1)`` for NCHW); float32 for float16/float32 results, float64 for
        float64.  ``group_norm_backward`` takes them as they are.

    Raises
    ------
    ValueError
        ``C % num_groups != 0`` or ``num_groups < 1``, gamma/beta of the
        wrong shape, x with fewer than 2 dimensions, ``channel_axis=0``,
        ``eps`` negative or not finite, or ``out`` of the wrong shape or
        read-only.
    TypeError
        ``num_groups`` or ``channel_axis`` not an integer, x, gamma or beta
        not of real numbers (or x a masked array with masked values),
        ``dtype`` not float16, float32 or float64, ``eps`` not a number, or
        ``out`` not an ndarray of the result dtype.
    numpy.exceptions.AxisError
        ``channel_axis`` out of range (a ValueError too).

    Warns
    -----
    RuntimeWarning
        Groups with no values (x with an empty axis other than 0 and the
        channel axis): NaN statistics there.

    See Also
    --------
    group_norm_backward : The gradients, from the statistics returned here.
    instance_norm : One channel per group.
    layer_norm : Any axes; one group is layer_norm over every axis but 0.
    batch_norm : Statistics per channel over the batch.

    Examples
    --------
    >>> import numpy as np, fastnorm
    >>> x = np.arange(16.0).reshape(1, 4, 2, 2)
    >>> y = fastnorm.group_norm(x, 2, eps=0.0)
    >>> y[0, :2].round(3).ravel()
    array([-1.528, -1.091, -0.655, -0.218,  0.218,  0.655,  1.091,  1.528])
    """
    fast = _simd.kernels.fast_group_norm(x, num_groups, gamma, beta, channel_axis, eps, out,
                                         dtype, return_stats)
    if fast is not None:
        return fast
    if any_dask(x, gamma, beta):
        return via_dask(group_norm, locals())
    x = as_input(x)
    grp = Groups(x, num_groups, channel_axis)
    eps = check_eps(eps)
    gamma = grp.channel_param(gamma, "gamma")
    beta = grp.channel_param(beta, "beta")
    outs = split_out(out, 3 if return_stats else 1)
    y_out = outs[0]
    # Every out= is checked before anything is written.
    if y_out is not None:
        check_out(y_out, "out", x.shape, np.result_type(y_out))  # shape first
        y_out = grp.split(y_out)
    sdt = result_dtypes(x.dtype, dtype)[1]
    for i, o in enumerate(outs[1:], start=1):
        if o is not None:
            check_out(o, f"out[{i}]", grp.stat_shape, sdt)
    y, (mean, rstd, _), sdt, _ = normalize(
        grp.split(x), grp.reduced, "center", eps=eps, gamma=gamma, beta=beta, out=y_out,
        dtype=dtype, n_stats=0, want_stats=return_stats)
    y = y.reshape(x.shape) if y_out is None else outs[0]
    if not return_stats:
        return y
    return (y, deliver(grp.stats_out(mean), sdt, outs[1], "out[1]"),
            deliver(grp.stats_out(rstd), sdt, outs[2], "out[2]"))


@keeps_subclass
def instance_norm(x, gamma=None, beta=None, *, channel_axis=1, eps=1e-5, out=None,
                  dtype=None, return_stats=False):
    """Instance normalization: statistics per sample and per channel.

    Each sample's channels are normalized with the mean and biased variance
    over every other axis but 0: ``group_norm`` with one channel per group.

    Parameters
    ----------
    x : array_like
        Input of shape ``(N, C, *)`` (or channels anywhere: ``channel_axis``),
        read in place in any layout (integers and bool are converted to
        float64).
    gamma, beta : array_like, optional
        Per-channel gain and bias of shape ``(C,)`` or in keepdims layout,
        as ``group_norm`` takes them.  Default: 1 and 0.
    channel_axis : int, optional
        The channel axis (default 1; -1 for channels-last).  Not 0, which is
        the batch axis.
    eps : float, optional
        Added to the variance.  Finite and >= 0.
    out : ndarray or tuple, optional
        Output of x's shape and the result dtype; with ``return_stats`` a
        tuple ``(y, mean, rstd)``.  Not with Dask arrays (TypeError).
    dtype : dtype, optional
        Output dtype (float16, float32 or float64); default x's float dtype.
    return_stats : bool, optional
        Also return ``mean`` and ``rstd``.

    Returns
    -------
    y : ndarray
        The normalized x, of x's shape and the result dtype (``out``
        itself when given); an ndarray subclass other than a masked array
        comes back through its ``__array_wrap__``.
    mean, rstd : ndarray
        With ``return_stats=True`` alone: x's shape with every axis but 0
        and the channel axis of size 1 (``(N, C, 1, 1)`` for NCHW), which
        broadcasts against x; float32 for float16/float32 results, float64
        for float64.  ``group_norm_backward`` with ``num_groups=C`` takes
        them as they are.

    Raises
    ------
    ValueError
        x with fewer than 2 dimensions, ``channel_axis=0``, gamma/beta of the
        wrong shape, ``eps`` negative or not finite, or ``out`` of the wrong
        shape or read-only.
    TypeError
        ``channel_axis`` not an integer, x, gamma or beta not of real numbers
        (or x a masked array with masked values), ``dtype`` not float16,
        float32 or float64, ``eps`` not a number, or ``out`` not an ndarray
        of the result dtype.
    numpy.exceptions.AxisError
        ``channel_axis`` out of range (a ValueError too).

    Warns
    -----
    RuntimeWarning
        Channels with no values (x with an empty axis other than 0 and the
        channel axis): NaN statistics there.

    See Also
    --------
    group_norm : Statistics per group of channels; the parameters are its own.
    group_norm_backward : The gradients, with ``num_groups`` the number of channels.
    layer_norm : Statistics over any axes.

    Examples
    --------
    >>> import numpy as np, fastnorm
    >>> x = np.array([[[1.0, 3.0], [10.0, 30.0]]])    # (N=1, C=2, L=2)
    >>> fastnorm.instance_norm(x, eps=0.0)
    array([[[-1.,  1.],
            [-1.,  1.]]])
    >>> y, mean, rstd = fastnorm.instance_norm(x, eps=0.0, return_stats=True)
    >>> dx, dgamma, dbeta = fastnorm.group_norm_backward(np.ones_like(x), x, mean, rstd, 2)
    >>> dbeta
    array([2., 2.])
    """
    if (type(x) is np.ndarray and type(channel_axis) is int
            and -x.ndim <= channel_axis < x.ndim):
        fast = _simd.kernels.fast_group_norm(x, x.shape[channel_axis], gamma, beta, channel_axis,
                                             eps, out, dtype, return_stats)
        if fast is not None:
            return fast
    if any_dask(x, gamma, beta):
        return via_dask(instance_norm, locals())
    x = as_input(x)
    ch = _simd.kernels.channel_axis(x.ndim, channel_axis)
    return group_norm(x, x.shape[ch], gamma, beta, channel_axis=channel_axis, eps=eps,
                      out=out, dtype=dtype, return_stats=return_stats)


# --------------------------------------------------------------------------
# weight normalization and standardization

def _all_but_first(axis, ndim):
    return tuple(range(1, ndim)) if axis is None else axes_tuple(axis, ndim)


@keeps_subclass
def weight_norm(v, g=None, *, axis=None, return_norm=False):
    """Weight normalization (Salimans & Kingma): ``w = g * v / ||v||``.

    One Euclidean norm per output unit, over ``axis``; each unit's direction
    is rescaled to the norm ``g``.  It runs on the RMS normalization kernel
    with eps 0 and gain ``g / sqrt(n)``, n the number of values in each
    norm.

    Parameters
    ----------
    v : array_like
        The direction, e.g. ``(out_features, in_features)`` or
        ``(out_channels, in_channels, kh, kw)`` (integers and bool are
        converted to float64).
    g : array_like, optional
        The norm each output unit gets, of the kept shape (``(out,)`` by
        default) or keepdims layout.  Default 1 (unit-norm rows).
    axis : int or tuple of ints, optional
        Axes of the norm; default every axis but 0 (one norm per output
        unit; for a 1-D v, one per value: pass ``axis=0`` for the norm of
        the whole vector).
    return_norm : bool, optional
        Also return ``||v||``.

    Returns
    -------
    w : ndarray
        Of v's shape and float dtype (float64 for integers and bool); an
        ndarray subclass other than a masked array comes back through its
        ``__array_wrap__``.  A zero direction gives NaN, as ``v / ||v||``
        does.
    norm : ndarray
        With ``return_norm=True`` alone: ``||v||`` in keepdims layout
        (float32 for float16/float32, float64 for float64); 0 for an empty
        direction.

    Raises
    ------
    TypeError
        v or g not of real numbers (or v a masked array with masked values),
        or an axis that is not an integer.
    ValueError
        g of the wrong shape, or a repeated axis.
    numpy.exceptions.AxisError
        An axis out of range (a ValueError too).

    See Also
    --------
    weight_standardize : Zero mean and unit variance per output unit instead.
    rms_norm : The kernel this runs on: ``||v|| / sqrt(n)`` is the root mean square.
    numpy.linalg.norm : The norms alone.

    Examples
    --------
    >>> import numpy as np, fastnorm
    >>> fastnorm.weight_norm(np.array([[3.0, 4.0], [0.0, 2.0]]), g=np.array([10.0, 1.0]))
    array([[6., 8.],
           [0., 1.]])
    >>> w, norm = fastnorm.weight_norm(np.array([3.0, 4.0]), axis=0, return_norm=True)
    >>> w, norm
    (array([0.6, 0.8]), array([5.]))
    """
    if any_dask(v, g):
        return via_dask(weight_norm, locals())
    v = as_input(v, "v")
    axes = _all_but_first(axis, v.ndim)
    kept = tuple(i for i in range(v.ndim) if i not in axes)
    n = math.prod(v.shape[i] for i in axes)
    gain = param(g, "g", v.shape, kept, x_name="v")
    if n == 0:
        # Empty directions: nothing to normalize, and the norm of an empty
        # vector is 0 (as np.linalg.norm says).
        w_dtype, sdt = result_dtypes(v.dtype, None)
        w = np.empty(v.shape, dtype=w_dtype)
        return (w, np.zeros(keepdims_shape(v.shape, axes), dtype=sdt)) if return_norm else w
    # rms_norm with eps 0 gives v / sqrt(mean(v**2)) = v * sqrt(n) / ||v||.
    # (An array even for 0-d v, where arithmetic on gain gives a NumPy scalar.)
    scale = np.full((1,) * v.ndim, 1.0 / math.sqrt(n)) if gain is None else gain / math.sqrt(n)
    scale = np.asarray(scale)
    w, (mean_sq, _, _), sdt, _ = normalize(v, axes, "rms", eps=0.0, gamma=scale, beta=None,
                                           out=None, dtype=None, n_stats=0)
    if not return_norm:
        return w
    return w, np.asarray(np.sqrt(mean_sq * n), dtype=sdt)


@keeps_subclass
def weight_standardize(w, *, axis=None, eps=1e-5):
    """Weight standardization (Qiao et al.): ``(w - mean) / sqrt(var + eps)``.

    The mean and biased variance are taken over ``axis``, by default every
    axis but 0: one standardization per output channel of a convolution
    kernel ``(out, in, kh, kw)``, as ``layer_norm`` over those axes without
    gain and bias.

    Parameters
    ----------
    w : array_like
        The weights, e.g. ``(out_channels, in_channels, kh, kw)`` (integers
        and bool are converted to float64).
    axis : int or tuple of ints, optional
        Axes of each standardization; default every axis but 0 (for a 1-D
        w, each value alone, which gives 0: pass ``axis=0`` to standardize
        the whole vector).
    eps : float, optional
        Added to the variance (default 1e-5).  Finite and >= 0.

    Returns
    -------
    ndarray
        The standardized w, of w's shape and float dtype (float64 for
        integers and bool); an ndarray subclass other than a masked array
        comes back through its ``__array_wrap__``.  A constant slice gives 0
        (with ``eps > 0``; with 0 it is 0/0, NaN).

    Raises
    ------
    TypeError
        w not of real numbers (or a masked array with masked values), an
        axis that is not an integer, or ``eps`` not a number.
    ValueError
        ``eps`` negative or not finite, or a repeated axis.
    numpy.exceptions.AxisError
        An axis out of range (a ValueError too).

    Warns
    -----
    RuntimeWarning
        w with an empty axis among ``axis`` (an empty reduction, as
        ``np.mean`` warns).

    See Also
    --------
    weight_norm : Rescale each output unit's weights to a given norm instead.
    layer_norm : The same statistics over any axes, with gain, bias and gradients.

    Examples
    --------
    >>> import numpy as np, fastnorm
    >>> fastnorm.weight_standardize(np.array([[1.0, 3.0], [2.0, 6.0]]), eps=0.0)
    array([[-1.,  1.],
           [-1.,  1.]])
    """
    if any_dask(w):
        return via_dask(weight_standardize, locals())
    w = as_input(w, "w")
    axes = _all_but_first(axis, w.ndim)
    y, _, _, _ = normalize(w, axes, "center", eps=check_eps(eps), gamma=None, beta=None,
                           out=None, dtype=None, n_stats=0, want_stats=False)
    return y
