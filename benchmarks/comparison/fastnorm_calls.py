"""fastnorm's side of each row: one zero-argument callable per op that
returns the outputs (an array or a tuple), written into arrays allocated
here once unless the row times the allocating call."""
import numpy as np

import fastnorm
from .inputs import EPS, GROUPS, MOMENTUM


def _outs(allocate, *like):
    """Preallocated outputs shaped like the given arrays, or None."""
    if allocate:
        return None
    outs = tuple(np.empty_like(a) for a in like)
    return outs[0] if len(outs) == 1 else outs


def _layer_norm(inp, allocate):
    out = _outs(allocate, inp.x)
    return lambda: fastnorm.layer_norm(inp.x, inp.gamma, inp.beta, axis=inp.axis, eps=EPS,
                                       out=out)


def _rms_norm(inp, allocate):
    out = _outs(allocate, inp.x)
    return lambda: fastnorm.rms_norm(inp.x, inp.gamma, axis=inp.axis, eps=EPS, out=out)


def _batch_norm(inp, allocate):
    out = _outs(allocate, inp.x)
    # Updated in place on every call, as in a training step; fastnorm's own
    # copies, so no other library sees them move.
    running_mean, running_var = inp.running_mean.copy(), inp.running_var.copy()
    return lambda: fastnorm.batch_norm(inp.x, inp.gamma, inp.beta, running_mean, running_var,
                                       training=True, momentum=MOMENTUM, eps=EPS,
                                       axis=inp.axis, out=out)


def _batch_norm_eval(inp, allocate):
    out = _outs(allocate, inp.x)
    return lambda: fastnorm.batch_norm(inp.x, inp.gamma, inp.beta, inp.running_mean,
                                       inp.running_var, training=False, eps=EPS,
                                       axis=inp.axis, out=out)


def _mean_var(inp, allocate):
    kept = np.empty([inp.x.shape[i] for i in inp.kept], inp.dtype)
    out = _outs(allocate, kept, kept)
    return lambda: fastnorm.mean_var(inp.x, inp.axis, out=out)


def _layer_norm_backward(inp, allocate):
    out = _outs(allocate, inp.x, inp.gamma, inp.gamma)
    return lambda: fastnorm.layer_norm_backward(inp.dy, inp.x, inp.mean, inp.rstd, inp.gamma,
                                                axis=inp.axis, out=out)


def _rms_norm_backward(inp, allocate):
    out = _outs(allocate, inp.x, inp.gamma)
    return lambda: fastnorm.rms_norm_backward(inp.dy, inp.x, inp.rstd, inp.gamma,
                                              axis=inp.axis, out=out)


def _batch_norm_backward(inp, allocate):
    out = _outs(allocate, inp.x, inp.gamma, inp.gamma)
    return lambda: fastnorm.batch_norm_backward(inp.dy, inp.x, inp.mean, inp.rstd, inp.gamma,
                                                axis=inp.axis, out=out)


def _group_norm_backward(inp, allocate):
    out = _outs(allocate, inp.x, inp.gamma, inp.gamma)
    return lambda: fastnorm.group_norm_backward(inp.dy, inp.x, inp.mean, inp.rstd, GROUPS,
                                                inp.gamma, channel_axis=inp.axis, out=out)


CALLS = {
    "layer_norm": _layer_norm,
    "rms_norm": _rms_norm,
    "batch_norm": _batch_norm,
    "batch_norm_eval": _batch_norm_eval,
    "mean_var": _mean_var,
    "layer_norm_backward": _layer_norm_backward,
    "rms_norm_backward": _rms_norm_backward,
    "batch_norm_backward": _batch_norm_backward,
    "group_norm_backward": _group_norm_backward,
}


def build(inp, allocate=False):
    """The fastnorm call of inp.op; allocate: without out=."""
    return CALLS[inp.op](inp, allocate)
