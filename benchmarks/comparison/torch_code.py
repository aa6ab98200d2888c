"""PyTorch's side of each row: the torch.nn.functional call a PyTorch user
would write, on tensors that share x's memory (``torch.from_numpy``, made
outside the timed region).

PyTorch normalizes trailing dimensions (layer/rms norm) or every dimension
but 1 (batch norm); other layouts are permuted views, as a user would pass
them (PyTorch copies non-contiguous inputs itself where it needs to).
Its functional calls take no ``out=``: every call allocates its output
(``torch.ops.aten.native_layer_norm.out`` into preallocated tensors was
slower than ``F.layer_norm`` when tried, so the functional calls are what is
timed).  Backward calls time ``torch.autograd.grad`` on a graph recorded
once (``retain_graph=True``), i.e. the backward kernels alone, not the
forward.
"""
import numpy as np

from .inputs import EPS, GROUPS, MOMENTUM

def load():
    """The torch module and torch.nn.functional; ImportError when absent."""
    import torch
    import torch.nn.functional as F
    return torch, F


def _permute(t, perm):
    return t if perm == tuple(range(len(perm))) else t.permute(perm)


def _inverse(perm):
    return tuple(int(i) for i in np.argsort(perm))


def _trailing(inp):
    """The permutation that puts the reduced axes last (layer/rms norm)."""
    return inp.kept + inp.axes


def _channels_second(inp):
    """The permutation that puts the one kept axis at position 1 (batch
    norm), or the channel axis (group norm)."""
    if inp.op.startswith("group_norm"):
        c = inp.axis % inp.x.ndim
        rest = tuple(i for i in range(inp.x.ndim) if i not in (0, c))
        return (0, c) + rest
    if len(inp.kept) != 1:
        raise NotImplementedError("batch norm over all but more than one axis")
    return (inp.axes[0],) + inp.kept + inp.axes[1:]


def _params(torch, inp, grad):
    """gamma (and beta where the op has one) as new tensors."""
    out = []
    for a in (inp.gamma, inp.beta):
        if a is not None:
            t = torch.from_numpy(a.copy())
            out.append(t.requires_grad_() if grad else t)
    return tuple(out)


def _forward(F, inp, x, params, training=True):
    """y = the family's forward of x (a tensor in x's layout), in x's layout."""
    fam = inp.op.replace("_backward", "").replace("_eval", "")
    shape = tuple(inp.x.shape[i] for i in inp.axes)
    if fam == "layer_norm":
        perm = _trailing(inp)
        y = F.layer_norm(_permute(x, perm), shape, *params, EPS)
    elif fam == "rms_norm":
        perm = _trailing(inp)
        y = F.rms_norm(_permute(x, perm), shape, *params, EPS)
    elif fam == "group_norm":
        perm = _channels_second(inp)
        y = F.group_norm(_permute(x, perm), GROUPS, *params, EPS)
    elif fam == "batch_norm":  # the gradient's forward: no running statistics
        perm = _channels_second(inp)
        y = F.batch_norm(_permute(x, perm), None, None, *params, training=training, eps=EPS)
    else:
        raise NotImplementedError(fam)
    return _permute(y, _inverse(perm))


def _trailing_norm(torch, F, inp):
    x, params = torch.from_numpy(inp.x), _params(torch, inp, False)
    return lambda: _forward(F, inp, x, params)


def _batch_norm(torch, F, inp, training):
    perm = _channels_second(inp)
    inv = _inverse(perm)
    x = _permute(torch.from_numpy(inp.x), perm)
    g, b = _params(torch, inp, False)
    # Their own copies: updated in place while training, as fastnorm's are.
    run_m = torch.from_numpy(inp.running_mean.copy())
    run_v = torch.from_numpy(inp.running_var.copy())
    return lambda: _permute(F.batch_norm(x, run_m, run_v, g, b, training=training,
                                         momentum=MOMENTUM, eps=EPS), inv)


def _mean_var(torch, F, inp):
    x, dims = torch.from_numpy(inp.x), inp.axes

    def call():
        var, mean = torch.var_mean(x, dims, correction=0)
        return mean, var
    return call


def _backward(torch, F, inp):
    x = torch.from_numpy(inp.x).requires_grad_()
    params = _params(torch, inp, True)
    y = _forward(F, inp, x, params)
    dy, wrt = torch.from_numpy(inp.dy), (x,) + params
    return lambda: torch.autograd.grad(y, wrt, dy, retain_graph=True)


def build(torch, F, inp):
    """The PyTorch call for inp.op: a zero-argument callable returning a
    tensor or a tuple of tensors (NotImplementedError where this module has
    no PyTorch code for the op or layout)."""
    op = inp.op
    if op.endswith("_backward"):
        return _backward(torch, F, inp)
    if op == "batch_norm":
        return _batch_norm(torch, F, inp, True)
    if op == "batch_norm_eval":
        return _batch_norm(torch, F, inp, False)
    if op == "mean_var":
        return _mean_var(torch, F, inp)
    if op in ("layer_norm", "rms_norm"):
        return _trailing_norm(torch, F, inp)
    raise NotImplementedError(op)


def to_numpy(result):
    """Outputs as NumPy arrays (a tuple), for the agreement check."""
    if not isinstance(result, (tuple, list)):
        result = (result,)
    return tuple(t.detach().numpy() for t in result)
