"""The NumPy code a user would write for each op: the same result as the
fastnorm call, in the same order, from whole-array expressions (each
allocating its temporaries, as such code does)."""
import numpy as np

from .inputs import EPS, GROUPS, MOMENTUM


def _layer_norm(inp):
    x, a = inp.x, inp.axes
    g, b = inp.broadcast(inp.gamma), inp.broadcast(inp.beta)

    def code():
        m = x.mean(a, keepdims=True)
        v = x.var(a, keepdims=True)
        return (x - m) / np.sqrt(v + EPS) * g + b
    return code


def _rms_norm(inp):
    x, a, g = inp.x, inp.axes, inp.broadcast(inp.gamma)
    return lambda: x / np.sqrt((x * x).mean(a, keepdims=True) + EPS) * g


def _batch_norm(inp):
    x, a = inp.x, inp.axes
    g, b = inp.broadcast(inp.gamma), inp.broadcast(inp.beta)
    run_m, run_v = inp.broadcast(inp.running_mean.copy()), inp.broadcast(inp.running_var.copy())
    n = x.size // inp.gamma.size

    def code():
        m = x.mean(a, keepdims=True)
        v = x.var(a, keepdims=True)
        run_m[...] = (1 - MOMENTUM) * run_m + MOMENTUM * m
        run_v[...] = (1 - MOMENTUM) * run_v + MOMENTUM * v * (n / (n - 1))
        return (x - m) / np.sqrt(v + EPS) * g + b
    return code


def _batch_norm_eval(inp):
    x = inp.x
    g, b = inp.broadcast(inp.gamma), inp.broadcast(inp.beta)
    m, v = inp.broadcast(inp.running_mean), inp.broadcast(inp.running_var)
    return lambda: (x - m) / np.sqrt(v + EPS) * g + b


def _mean_var(inp):
    x, a = inp.x, inp.axes
    return lambda: (x.mean(a), x.var(a))


def _centred_backward(dy, x, mean, rstd, g, axes, keep, gamma_shape):
    """dx, dgamma, dbeta of (x - mean) * rstd * g + b; the sums in float64,
    as a careful user writes them (float32 sums over 65536 rows are off by
    ~1e-3 themselves)."""
    n = x.size // rstd.size
    xh = (x - mean) * rstd
    gd = dy * g
    a = gd.sum(axes, keepdims=True, dtype=np.float64) / n
    b = (gd * xh).sum(axes, keepdims=True, dtype=np.float64) / n
    return (rstd * (gd - a - xh * b),
            (dy * xh).sum(keep, dtype=np.float64).reshape(gamma_shape),
            dy.sum(keep, dtype=np.float64).reshape(gamma_shape))


def _not_param_axes(inp):
    return tuple(i for i in range(inp.x.ndim) if i not in inp.param_axes)


def _layer_or_batch_backward(inp):
    keep, g = _not_param_axes(inp), inp.broadcast(inp.gamma)
    return lambda: _centred_backward(inp.dy, inp.x, inp.mean, inp.rstd, g, inp.axes, keep,
                                     inp.gamma.shape)


def _rms_norm_backward(inp):
    x, dy, rstd, a = inp.x, inp.dy, inp.rstd, inp.axes
    keep, g = _not_param_axes(inp), inp.broadcast(inp.gamma)
    n = x.size // rstd.size

    def code():
        xh = x * rstd
        gd = dy * g
        c = (gd * xh).sum(a, keepdims=True, dtype=np.float64) / n
        return (rstd * (gd - xh * c),
                (dy * xh).sum(keep, dtype=np.float64).reshape(inp.gamma.shape))
    return code


def _group_norm_backward(inp):
    # The groups as an axis of their own: (N, G, C/G, *spatial), channels on
    # axis 1 (the rows here are NCHW).
    if inp.axis % inp.x.ndim != 1:
        raise NotImplementedError("the NumPy code here takes channels on axis 1")
    n, c = inp.x.shape[:2]
    split = (n, GROUPS, c // GROUPS) + inp.x.shape[2:]
    x, dy = inp.x.reshape(split), inp.dy.reshape(split)
    mean, rstd = (s.reshape((n, GROUPS) + (1,) * (len(split) - 2)) for s in (inp.mean, inp.rstd))
    g = inp.gamma.reshape((1, GROUPS, c // GROUPS) + (1,) * (len(split) - 3))
    axes = tuple(range(2, len(split)))
    keep = (0,) + axes[1:]

    def code():
        dx, dg, db = _centred_backward(dy, x, mean, rstd, g, axes, keep, inp.gamma.shape)
        return dx.reshape(inp.x.shape), dg, db
    return code


CODE = {
    "layer_norm": _layer_norm,
    "rms_norm": _rms_norm,
    "batch_norm": _batch_norm,
    "batch_norm_eval": _batch_norm_eval,
    "mean_var": _mean_var,
    "layer_norm_backward": _layer_or_batch_backward,
    "rms_norm_backward": _rms_norm_backward,
    "batch_norm_backward": _layer_or_batch_backward,
    "group_norm_backward": _group_norm_backward,
}


def build(inp):
    """The NumPy code for inp.op as a zero-argument callable."""
    return CODE[inp.op](inp)
