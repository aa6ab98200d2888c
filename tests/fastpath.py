"""The fast path's entries (src/fastcall.pxi) with the general path's
argument defaults, for the tests that hold it against the general path."""
import contextlib

from fastnorm import _simd


def norm_call(x, axis, mode, eps, gamma, beta, out=None):
    k = _simd.kernels
    return k.fast_norm(k.MODES[mode], x, gamma, beta, axis, eps, out, None, False)


def mean_var_call(x, axis, ddof, keepdims):
    return _simd.kernels.fast_mean_var(x, axis, ddof, keepdims, None, None)


def norm_backward_call(dy, x, mean, rstd, gamma, axis, mode, out, n_out):
    k = _simd.kernels
    return k.fast_norm_backward(k.GRAD_MODES[mode], dy, x, mean, rstd, gamma, axis, out, n_out)


def batch_norm_call(x, gamma, beta, running_mean, running_var, training, momentum, eps, axis,
                    out):
    return _simd.kernels.fast_batch_norm(x, gamma, beta, running_mean, running_var,
                                             training, momentum, eps, axis, out, None, False)


_ENTRIES = ("fast_norm", "fast_mean_var", "fast_norm_backward", "fast_batch_norm",
            "fast_group_norm", "fast_group_norm_backward")


@contextlib.contextmanager
def general_path():
    """Inside, every public call takes the general path: the fast path's
    entries refuse everything, as they do the calls they are not for."""
    k = _simd.kernels
    saved = {name: getattr(k, name) for name in _ENTRIES}
    try:
        for name in _ENTRIES:
            setattr(k, name, lambda *args: None)
        yield
    finally:
        for name, entry in saved.items():
            setattr(k, name, entry)


def general(func, *args, **kwargs):
    """func(*args, **kwargs) on the general path."""
    with general_path():
        return func(*args, **kwargs)


def same_error(func, *args, **kwargs):
    """The error func(*args, **kwargs) raises: one rule, so the same type
    and message whether the small calls' path or the general path meets
    the argument first."""
    errors = []
    for path in (contextlib.nullcontext(), general_path()):
        with path:
            try:
                func(*args, **kwargs)
            except Exception as e:      # noqa: BLE001 (compared below)
                errors.append(e)
            else:
                errors.append(None)
    fast, general = errors
    assert general is not None, "the call raised nothing"
    assert type(fast) is type(general) and str(fast) == str(general), (fast, general)
    return general
