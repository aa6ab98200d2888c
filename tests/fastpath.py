"""The fast path's entries (src/fastcall.pxi) with the general path's
argument defaults, for the tests that hold it against the general path."""
from fastnorm import _simd


def last_axis(x, axis, mode, eps, gamma, beta, out=None):
    k = _simd.kernels
    return k.fast_norm(k.MODES[mode], x, gamma, beta, axis, eps, out, None, False)


def mean_var_last_axis(x, axis, ddof, keepdims):
    return _simd.kernels.fast_mean_var(x, axis, ddof, keepdims, None, None)


def rows_backward(dy, x, mean, rstd, gamma, axis, mode, out, n_out):
    k = _simd.kernels
    return k.fast_norm_backward(k.GRAD_MODES[mode], dy, x, mean, rstd, gamma, axis, out, n_out)


def batch_norm_call(x, gamma, beta, running_mean, running_var, training, momentum, eps, axis,
                    out):
    return _simd.kernels.fast_batch_norm(x, gamma, beta, running_mean, running_var,
                                             training, momentum, eps, axis, out, None, False)
