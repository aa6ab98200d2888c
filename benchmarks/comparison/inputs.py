"""The arrays of one row, made from the case and a seed.

Every process that times a row (this one, and the JAX workers, which run in
their own processes) builds the same arrays from the same (case, dtype,
seed) rather than receiving hundreds of MB through a pipe.
"""
from dataclasses import dataclass

import numpy as np

import fastnorm

EPS = 1e-5
MOMENTUM = 0.1     # PyTorch's convention: the weight of the new batch
GROUPS = 8         # group_norm's num_groups (divides every channel count used)


def family(op):
    """The forward an op belongs to: 'layer_norm_backward' -> 'layer_norm'."""
    return op.replace("_backward", "").replace("_eval", "")


@dataclass
class Inputs:
    """x and what the op needs besides.  Parameters have the shape fastnorm
    names for them (normalized shape for layer/rms norm, kept shape for
    batch norm, (C,) for group norm); ``broadcast`` gives them the keepdims
    layout NumPy's broadcasting (and JAX's) needs."""
    op: str
    x: np.ndarray
    axis: object          # as fastnorm takes it (channel_axis for group norm)
    axes: tuple           # the reduced axes, sorted, non-negative
    kept: tuple           # the other axes
    param_axes: tuple     # x's axes the parameters run along
    gamma: np.ndarray = None
    beta: np.ndarray = None
    running_mean: np.ndarray = None
    running_var: np.ndarray = None
    dy: np.ndarray = None     # backward: the incoming gradient
    mean: np.ndarray = None   # backward: the forward's statistics, as fastnorm returned them
    rstd: np.ndarray = None
    seed: int = 0             # what made the arrays (with the case and dtype)

    def broadcast(self, p):
        """p reshaped to x.ndim dimensions, size 1 off its own axes."""
        return p.reshape([s if i in self.param_axes else 1 for i, s in enumerate(self.x.shape)])

    @property
    def dtype(self):
        return self.x.dtype


def reduced_axes(op, axis, ndim):
    """The axes an op reduces over, given fastnorm's axis argument."""
    fam = family(op)
    if fam == "group_norm":
        # Per sample and group of channels: every axis but the batch and
        # channel axes, and the channels of a group, which no axis of x is.
        return tuple(i for i in range(ndim) if i not in (0, axis % ndim))
    if axis is None:         # batch_norm's default: every axis but the channels
        return tuple(i for i in range(ndim) if i != 1)
    axis = axis if isinstance(axis, tuple) else (axis,)
    return tuple(sorted(a % ndim for a in axis))


def make_x(rng, shape, dtype):
    """Normal data with an offset (so centring matters), made in place: no
    temporary of x's size."""
    x = rng.standard_normal(shape, dtype=dtype)
    x *= 2.0
    x += 1.0
    return x


def _param(rng, shape, dtype, base, spread):
    p = rng.standard_normal(shape, dtype=dtype)
    p *= spread
    p += base
    return p


def make_inputs(case, dtype, seed):
    """The Inputs of case in dtype; the same (case, dtype, seed) gives the
    same arrays in any process."""
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    x = make_x(rng, case.shape, dtype)
    fam = family(case.op)
    axes = reduced_axes(case.op, case.axis, x.ndim)
    kept = tuple(i for i in range(x.ndim) if i not in axes)
    if fam in ("layer_norm", "rms_norm"):
        param_axes = axes
    elif fam == "group_norm":
        param_axes = (case.axis % x.ndim,)   # one gain per channel
    else:
        param_axes = kept
    inp = Inputs(case.op, x, case.axis, axes, kept, param_axes, seed=seed)
    pshape = tuple(x.shape[i] for i in param_axes)
    if fam != "mean_var":
        inp.gamma = _param(rng, pshape, dtype, 1.0, 0.1)
    if fam in ("layer_norm", "batch_norm", "group_norm"):
        inp.beta = _param(rng, pshape, dtype, 0.0, 0.1)
    if fam == "batch_norm":
        inp.running_mean = _param(rng, pshape, dtype, 1.0, 0.1)
        inp.running_var = _param(rng, pshape, dtype, 4.0, 0.1)
    if case.op.endswith("_backward"):
        inp.dy = rng.standard_normal(x.shape, dtype=dtype)
        _add_forward_stats(inp)
    return inp


def _add_forward_stats(inp):
    """mean and rstd as the forward returns them for the backward to take."""
    fam = family(inp.op)
    if fam == "layer_norm":
        _, inp.mean, inp.rstd = fastnorm.layer_norm(inp.x, inp.gamma, axis=inp.axis, eps=EPS,
                                                    return_stats=True)
    elif fam == "rms_norm":
        _, inp.rstd = fastnorm.rms_norm(inp.x, inp.gamma, axis=inp.axis, eps=EPS,
                                        return_stats=True)
    elif fam == "batch_norm":
        _, inp.mean, inp.rstd = fastnorm.batch_norm(inp.x, inp.gamma, axis=inp.axis, eps=EPS,
                                                    return_stats=True)
    elif fam == "group_norm":
        _, inp.mean, inp.rstd = fastnorm.group_norm(inp.x, GROUPS, inp.gamma,
                                                    channel_axis=inp.axis, eps=EPS,
                                                    return_stats=True)
    else:
        raise ValueError(f"no backward for {inp.op}")
