"""batch_norm's update of its running statistics (PyTorch's convention),
for the NumPy and the Dask paths alike."""
import numpy as np

from . import _simd


def update_running(rm, rv, mean, var, momentum, n):
    """In place: rm = (1 - momentum) rm + momentum mean and rv = (1 -
    momentum) rv + momentum var n / (n - 1).  rm and rv are the caller's
    buffers (any float dtype, in keepdims layout or of the kept shape),
    mean and var float64 statistics of as many values.

    In float64 whatever the buffers' dtype: a Python float times a float32
    array is float32 arithmetic, and r_mean * (1 - momentum) cancelling
    against momentum * mean would keep float32's error of the larger term.
    Contiguous float32 and float64 buffers go through one C loop with the
    same roundings (kernels.update_running); others through NumPy.  n may
    be an array of per-feature counts (where=): features with none keep
    their running statistics."""
    keep = True
    if np.ndim(n) == 0:
        unbias = n / (n - 1)
        if _simd.kernels.update_running(rm, rv, mean, var, momentum, unbias):
            return
    else:
        keep = n > 0
        with np.errstate(divide="ignore", invalid="ignore"):
            unbias = n / (n - 1)
    old_mean = np.asarray(rm, dtype=np.float64)
    old_var = np.asarray(rv, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        np.copyto(rm, (1.0 - momentum) * old_mean + momentum * mean, casting="unsafe",
                  where=keep)
        np.copyto(rv, (1.0 - momentum) * old_var + momentum * var * unbias, casting="unsafe",
                  where=keep)


def running_rstd(var, eps):
    """1 / sqrt(var + eps) of float64 running variances, C-contiguous, as
    eval-mode batch_norm normalizes with (the coefficients' own rstd; a
    negative variance gives NaN, without a warning)."""
    return _simd.kernels.rstd(var, eps)
