"""The commonest calls, recognized in a few checks.

layer_norm and rms_norm of a float array over its last axis, returning y
alone (in a fresh array or an ``out=`` array of x's kind), with float
vectors (or nothing) for gain and bias, is most of what a model does with
them, often on small arrays.  The general path (``_args`` and ``_run``)
spends microseconds on what this call cannot need: Dask, axis tuples,
``out=`` and dtype rules, the columns view, the statistics arrays.  Here
the same kernel call is made after only the checks that this one case
needs; anything else returns None and takes the general path, which also
raises the errors.  (mean_var over the last axis alike, see
mean_var_last_axis, and the gradients of layer_norm and rms_norm, see
rows_backward.)  layer_norm of (32, 768) float32 with float32 gain and
bias: 15.2 -> 12.2 us a call, 11.1 -> 9.6 with gain and bias widened to
float64 in C (the kernel alone 7.6 us); into out= (before, the general
path) 15.3 -> 9.5 us.  Calls below the kernels' parallel size without
out= have these checks made in C (kernels.quick_rows): 5.8 -> 4.4 us on
an AMD EPYC; on a Xeon, the whole comparison's small call, 9.7 -> 7.4 us.
"""
import math

import numpy as np

from . import _dispatch
from ._args import float64_param
from ._config import team_size
from ._run import kernel_stats
from ._running import running_rstd, update_running

_FLOATS = frozenset((np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)))
_F64 = np.dtype(np.float64)
_F32 = np.dtype(np.float32)
_LARGEST = float(np.finfo(np.float64).max)
# reduced mask (the kernel's per-axis flags) by number of dimensions
_LAST_AXIS = {n: (False,) * (n - 1) + (True,) for n in range(1, 65)}
_MODES = {mode: _dispatch.kernels.MODES[mode] for mode in ("center", "rms")}


def last_axis(x, axis, mode, eps, gamma, beta, out=None):
    """y for a call of `mode` ('center' or 'rms') over the last axis, or
    None when an argument needs the general path.

    Taken when: x is an aligned float16/32/64 ndarray with values; axis is
    the int -1 or x.ndim - 1; eps a float in [0, inf); gamma and beta each
    None or a float16/32/64 ndarray of shape (x.shape[-1],); out None or a
    writable, aligned, C-contiguous ndarray of x's shape and dtype that is
    x itself or shares no memory with x, gamma or beta.  The caller has
    checked dtype=None and no statistics wanted.
    """
    if out is None:
        # Calls below the kernels' parallel size: these checks in C.
        y = _dispatch.kernels.quick_rows(x, axis, gamma, beta, eps, _MODES[mode])
        if y is not None:
            return y
    if type(x) is not np.ndarray or type(axis) is not int or type(eps) is not float:
        return None
    ndim = x.ndim
    if not (ndim and (axis == -1 or axis == ndim - 1) and x.size
            and x.dtype in _FLOATS and x.flags.aligned and 0.0 <= eps <= _LARGEST):
        return None
    if out is not None and not _own_output(out, x, gamma, beta):
        return None
    shape = (1,) * (ndim - 1) + x.shape[-1:]
    gamma = _vector(gamma, shape)
    beta = _vector(beta, shape)
    if gamma is False or beta is False:
        return None
    y = np.empty_like(x) if out is None else out
    k = _dispatch.kernels
    # Below the kernels' parallel size they run on one thread anyway, and
    # asking OpenMP for the team size costs a third of a microsecond.
    threads = team_size() if x.size >= k.parallel_min else 1
    k.normalize(x, y, gamma, beta, None, None, None, _LAST_AXIS[ndim], k.MODES[mode], eps,
                threads, out is None)
    return y


def _own_output(out, x, gamma, beta):
    """Whether out= can be written directly: of x's kind, and either x
    itself (in place: each slice is read before it is written) or apart from
    x, and from float64 parameters (read where they are; the others are
    converted first)."""
    if out is x:
        return x.flags.writeable and x.flags.c_contiguous
    if not (type(out) is np.ndarray and out.dtype is x.dtype and out.shape == x.shape):
        return False
    flags = out.flags
    if not (flags.writeable and flags.aligned and flags.c_contiguous):
        return False
    if np.may_share_memory(x, out):
        return False
    for p in (gamma, beta):
        if type(p) is np.ndarray and p.dtype == _F64 and np.may_share_memory(p, out):
            return False
    return True


def _vector(p, shape):
    """A parameter as the kernel takes it (float64, keepdims layout), None
    for none, False when it is not a float vector of the normalized size."""
    if p is None:
        return None
    if type(p) is not np.ndarray or p.shape != shape[-1:] or p.dtype not in _FLOATS:
        return False
    if p.dtype == _F64 or not p.flags.aligned:
        return float64_param(p, shape)
    return _dispatch.kernels.row_f64(p, len(shape))    # float16/float32, widened in C


def mean_var_last_axis(x, axis, ddof, keepdims):
    """(mean, var) over the last axis, or None when an argument needs the
    general path.

    Taken when: x is an aligned float16/32/64 ndarray of native byte order
    with values; axis is the int -1 or x.ndim - 1; ddof an int below the
    axis' length (no warning to give); keepdims a bool.  The caller has
    checked out=None and dtype=None.  The checks, the kernel call and the
    results are made in C (kernels.quick_mean_var; against the general
    path, mean_var of (32, 768) float32 took 16.3 -> 11.0 us a call in
    Python on a busy machine, and the C function took it on to 3.5).
    """
    k = _dispatch.kernels
    threads = 1
    if type(x) is np.ndarray and x.size >= k.parallel_min:
        threads = team_size()
    return k.quick_mean_var(x, axis, ddof, keepdims, threads)


def rows_backward(dy, x, mean, rstd, gamma, axis, mode, out, n_out):
    """(dx, dgamma, dbeta) of layer_norm_backward ('center'; n_out 3) or
    (dx, dgamma) of rms_norm_backward ('rms', mean None; n_out 2) over the
    last axis, or None when an argument needs the general path (``_grad``).

    Taken when: dy and x are aligned float16/32/64 ndarrays of one dtype and
    shape with values; axis is the int -1 or x.ndim - 1; mean and rstd are
    float ndarrays of the keepdims or the kept shape; gamma is None or a
    float ndarray of shape (x.shape[-1],); out is None or a tuple of n_out
    entries, each None or an ndarray: dx writable, aligned, contiguous, of
    x's dtype and shape and apart from every input; the parameter gradients
    writable and of their exact shape and dtype.  Then the checks,
    conversions and result arrays of the general path come down to what
    this case needs.
    layer_norm_backward, float32 with gamma, general -> quick path in one
    process, us a call: (8, 1024) 24.6 -> 13.4 (the kernel alone 6.4), into
    out= arrays 29.9 -> 15.7; (256, 1024) into out=, two threads 109 -> 91.
    """
    if not (type(x) is np.ndarray and type(dy) is np.ndarray and type(axis) is int):
        return None
    ndim = x.ndim
    dt = x.dtype
    if not (ndim and (axis == -1 or axis == ndim - 1) and dy.dtype is dt and dt in _FLOATS
            and dy.shape == x.shape and x.size and x.flags.aligned and dy.flags.aligned):
        return None
    n = x.shape[-1]
    keep = x.shape[:-1] + (1,)
    stats = [_stat_f64(rstd, keep)]
    if mode == "center":
        stats.insert(0, _stat_f64(mean, keep))
    if any(s is None for s in stats):
        return None
    g_keep = (1,) * (ndim - 1) + (n,)
    if gamma is None:
        g, pdt = np.ones(g_keep), (_F64 if dt == _F64 else _F32)
    else:
        g = _vector(gamma, g_keep)
        if g is None or g is False:
            return None
        pdt = gamma.dtype
    outs = (None,) * n_out if out is None else out
    if type(outs) is not tuple or len(outs) != n_out:
        return None
    dx = outs[0]
    fresh = dx is None
    if fresh:
        dx = np.empty_like(x)
    elif not _own_gradient(dx, (dy, x, g, *stats)):
        return None
    for o in outs[1:]:
        if o is not None and not (type(o) is np.ndarray and o.dtype == pdt
                                  and o.shape == (n,) and o.flags.writeable):
            return None
    dg, db = np.empty(g_keep), np.empty(g_keep)
    m = stats[0] if mode == "center" else np.zeros(keep)
    b = _dispatch.backward
    threads = team_size() if x.size >= _dispatch.kernels.parallel_min else 1
    b.backward(dy, x, dx, g, m, stats[-1], dg, db, _LAST_AXIS[ndim], b.GRAD_MODES[mode], threads,
               1, fresh)
    grads = [dx]
    for grad, o in zip((dg, db)[:n_out - 1], outs[1:]):
        if o is None:
            grads.append(grad.reshape(n).astype(pdt, copy=False))
        else:
            np.copyto(o, grad.reshape(n))
            grads.append(o)
    return tuple(grads)


def _stat_f64(a, keep):
    """A statistic from the forward as the gradient kernels read it
    (C-contiguous float64 in keepdims layout), or None."""
    if type(a) is not np.ndarray or a.dtype not in _FLOATS:
        return None
    if a.shape != keep:
        if a.shape != keep[:-1]:
            return None
        a = a.reshape(keep)
    if a.dtype == _F64 and a.flags.c_contiguous and a.flags.aligned:
        return a
    return a.astype(_F64, order="C")


def _own_gradient(dx, inputs):
    """Whether dx= can be written directly: of x's kind (checked against
    inputs[1]), contiguous and apart from every input."""
    x = inputs[1]
    if not (type(dx) is np.ndarray and dx.dtype is x.dtype and dx.shape == x.shape):
        return False
    flags = dx.flags
    # (contiguous: no two of its elements share an address)
    if not (flags.writeable and flags.aligned and (flags.c_contiguous or flags.f_contiguous)):
        return False
    return not any(np.may_share_memory(dx, a) for a in inputs)


def batch_norm_call(x, gamma, beta, running_mean, running_var, training, momentum, eps, axis,
                    out):
    """y of batch_norm over every axis but 1 (axis None, or 0 of a matrix),
    or None when an argument needs the general path (``_api.batch_norm``).

    Taken when: x is an aligned float16/32/64 ndarray with values, of at
    least two dimensions; training is a bool; eps a float in [0, inf) and,
    in training, momentum a finite float and more than one value per
    channel; gamma, beta, running_mean and running_var each None (the
    running pair both or neither, and required in eval) or a float ndarray
    of shape (C,), the running statistics writable and apart from each
    other; out None or a writable, aligned, contiguous ndarray of x's shape
    and dtype apart from every other argument.  The caller has checked dtype=None and
    return_stats=False.  The kernel's call and the running update are the
    general path's, after its checks cut to this case.  float32 with gain,
    bias and running statistics, into out=, general -> quick path in one
    process, us a call: training (8, 128) 16.9 -> 10.7, (2048, 128) 110 ->
    99 (one thread) and 61.9 -> 55.3 (two), (32, 64, 8, 8) 132 -> 112; eval
    (8, 128) 15.9 -> 12.7.
    """
    if type(x) is not np.ndarray or type(eps) is not float or type(training) is not bool:
        return None
    ndim = x.ndim
    if not (ndim >= 2 and x.size and x.dtype in _FLOATS and x.flags.aligned
            and 0.0 <= eps <= _LARGEST):
        return None
    if axis is not None and not (type(axis) is int and ndim == 2 and axis in (0, -2)):
        return None
    channels = x.shape[1]
    n = x.size // channels
    if training and not (type(momentum) is float and math.isfinite(momentum) and n > 1):
        return None
    keep = _CHANNELS.get((channels, ndim)) or _channels_shape(channels, ndim)
    gamma, beta = _channel_param(gamma, keep), _channel_param(beta, keep)
    if gamma is False or beta is False:
        return None
    rm, rv = running_mean, running_var
    if rm is None and rv is None:
        if not training:
            return None
    elif not (_running_buffer(rm, channels) and _running_buffer(rv, channels)
              and not np.may_share_memory(rm, rv)):
        return None
    if out is None:
        y = np.empty_like(x)
    elif not (type(out) is np.ndarray and out.dtype is x.dtype and out.shape == x.shape
              and out.flags.writeable and out.flags.aligned
              and (out.flags.c_contiguous or out.flags.f_contiguous)
              and not any(a is not None and np.may_share_memory(out, a)
                          for a in (x, gamma, beta, rm, rv))):
        return None
    else:
        y = out
    axes = _BATCH_AXES[ndim]
    if training:
        mean, _, var = kernel_stats(x, axes, "center", eps=eps, gamma=gamma, beta=beta, y=y,
                                    want_var=rm is not None, fresh=out is None)
        if rm is not None:
            update_running(rm.reshape(keep), rv.reshape(keep), mean, var, momentum, n)
    else:
        mean = np.array(rm.reshape(keep), dtype=_F64, order="C")
        var = float64_param(rv, keep)
        rstd = running_rstd(var, eps)
        kernel_stats(x, axes, "given", eps=eps, gamma=gamma, beta=beta, y=y,
                     given=(mean, rstd), fresh=out is None)
    return y


# batch_norm's reduced axes (every axis but 1) by number of dimensions, and
# the channels' keepdims shape by (channels, dimensions)
_BATCH_AXES = {n: (0,) + tuple(range(2, n)) for n in range(2, 65)}
_CHANNELS = {}


def _channels_shape(channels, ndim):
    shape = (1, channels) + (1,) * (ndim - 2)
    if len(_CHANNELS) < 256:
        _CHANNELS[channels, ndim] = shape
    return shape


def _channel_param(p, keep):
    """A per-channel gain or bias as the kernels take it (float64, keepdims
    layout), None for none, False unless a float ndarray of shape (C,)."""
    if p is None:
        return None
    if type(p) is not np.ndarray or p.shape != keep[1:2] or p.dtype not in _FLOATS:
        return False
    return float64_param(p, keep)


def _running_buffer(r, channels):
    """Whether r is a running statistic the quick path can update (or read)
    in place: a writable float ndarray of shape (C,)."""
    return (type(r) is np.ndarray and r.shape == (channels,) and r.dtype in _FLOATS
            and r.flags.writeable)
