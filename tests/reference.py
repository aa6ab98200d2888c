"""Plain NumPy reference implementations and tolerance checks.

Nothing here calls fastnorm: expected values come from a two-pass float64
(or long double) computation on the very same input values.  Each slice is
shifted by its first value before the two passes, which is exact for
constant slices and keeps the reference accurate for data with a large
offset.
"""
import math

import numpy as np

F16, F32, F64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)

# Relative tolerance of a result written in this dtype.
OUT_TOL = {F16: 5e-3, F32: 1e-5, F64: 1e-12}
# Relative tolerance (to the slice's spread) of the statistics accumulated
# for an input of this dtype: the contract lets float16 accumulate in float32.
ACC_TOL = {F16: 1e-6, F32: 1e-6, F64: 1e-12}


# --------------------------------------------------------------------------
# axes, shapes, dtypes

def norm_axes(axis, ndim):
    """axis (None, int or tuple, negatives allowed) as a sorted tuple."""
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, (int, np.integer)):
        axis = (axis,)
    return tuple(sorted(a % ndim for a in axis))


def keep_shape(shape, axes):
    """Shape of the per-slice statistics (reduced axes of size 1)."""
    return tuple(1 if i in axes else s for i, s in enumerate(shape))


def kept_axes(ndim, axes):
    return tuple(i for i in range(ndim) if i not in axes)


def native(dtype):
    dt = np.dtype(dtype)
    return dt.newbyteorder("=") if dt.kind == "f" else dt


def out_dtype(x_dtype, dtype=None):
    """The documented output dtype: dtype= if given, else x's float dtype,
    else float64 (integers, bool)."""
    if dtype is not None:
        return np.dtype(dtype)
    dt = native(x_dtype)
    return dt if dt.kind == "f" else F64


def stat_dtype(res_dtype):
    """Statistics are float32 for float16/float32 results, else float64."""
    return F64 if np.dtype(res_dtype) == F64 else F32


def acc_dtype_of(x_dtype):
    dt = native(x_dtype)
    return dt if dt in (F16, F32) else F64


def expand_param(p, x_shape, along):
    """A parameter given in the named shape or keepdims layout, as a
    float64 array with x.ndim dims (keepdims layout)."""
    if p is None:
        return None
    a = np.asarray(p, dtype=np.float64)
    if a.ndim != len(x_shape):
        assert a.shape == tuple(x_shape[i] for i in along), (a.shape, x_shape, along)
        a = a.reshape(tuple(x_shape[i] if i in along else 1 for i in range(len(x_shape))))
    return a


# --------------------------------------------------------------------------
# statistics

def moments(x, axes, acc=np.float64):
    """Per-slice (n, mean, m2, centered x, spread) in keepdims layout.

    m2 is the sum of squared deviations; spread = max - min of the slice (0
    for empty slices).  Slices holding a NaN or inf get NaN mean and m2.
    """
    xd = np.asarray(x).astype(acc)
    n = math.prod(xd.shape[a] for a in axes)
    kshape = keep_shape(xd.shape, axes)
    if n == 0:
        nan = np.full(kshape, np.nan, dtype=acc)
        return 0, nan, nan.copy(), xd.copy(), np.zeros(kshape, dtype=acc)
    first = tuple(slice(0, 1) if i in axes else slice(None) for i in range(xd.ndim))
    with np.errstate(invalid="ignore", over="ignore"):
        pivot = xd[first]
        pivot = np.where(np.isfinite(pivot), pivot, 0)
        d = xd - pivot
        md = d.sum(axis=axes, keepdims=True) / n
        md = md + (d - md).sum(axis=axes, keepdims=True) / n
        c = d - md
        m2 = (c * c).sum(axis=axes, keepdims=True)
        mean = pivot + md
        bad = ~np.isfinite(xd).all(axis=axes, keepdims=True)
        mean = np.where(bad, np.nan, mean)
        m2 = np.where(bad, np.nan, m2)
        spread = xd.max(axis=axes, keepdims=True) - xd.min(axis=axes, keepdims=True)
        spread = np.where(bad, 0, spread)
    return n, mean, m2, c, spread


def ref_mean_var(x, axes, ddof=0, acc=np.float64):
    """(mean, var, spread) in keepdims layout, float64 (or acc)."""
    n, mean, m2, _, spread = moments(x, axes, acc)
    with np.errstate(divide="ignore", invalid="ignore"):
        var = m2 / max(n - ddof, 0) if n > 0 else m2
    return mean, var, spread


def ref_layer_norm(x, axes, gamma=None, beta=None, eps=1e-5, acc=np.float64):
    """Layer norm over axes; gamma/beta already in keepdims layout.
    Returns (y, mean, rstd, xhat, spread)."""
    n, mean, m2, c, spread = moments(x, axes, acc)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        var = m2 / n if n else m2
        rstd = 1 / np.sqrt(var + eps)
        xhat = c * rstd
        bad = np.broadcast_to(np.isnan(mean), xhat.shape)
        xhat = np.where(bad, np.nan, xhat)
        y = xhat if gamma is None else xhat * gamma
        y = y if beta is None else y + beta
    return y, mean, rstd, xhat, spread


def ref_rms_norm(x, axes, gamma=None, eps=1e-5, acc=np.float64):
    """Returns (y, rstd)."""
    xd = np.asarray(x).astype(acc)
    n = math.prod(xd.shape[a] for a in axes)
    kshape = keep_shape(xd.shape, axes)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        if n == 0:
            rstd = np.full(kshape, np.nan, dtype=acc)
        else:
            ms = (xd * xd).sum(axis=axes, keepdims=True) / n
            bad = ~np.isfinite(xd).all(axis=axes, keepdims=True)
            rstd = np.where(bad, np.nan, 1 / np.sqrt(ms + eps))
        y = xd * rstd
        y = np.where(np.broadcast_to(np.isnan(rstd), y.shape), np.nan, y)
        if gamma is not None:
            y = y * gamma
    return y, rstd


def ref_running_update(r_mean, r_var, mean, var_biased, n, momentum):
    """PyTorch's update, in float64: unbiased variance enters r_var."""
    r_mean = np.asarray(r_mean, dtype=np.float64)
    r_var = np.asarray(r_var, dtype=np.float64)
    new_mean = (1 - momentum) * r_mean + momentum * mean
    new_var = (1 - momentum) * r_var + momentum * var_biased * (n / (n - 1))
    return new_mean, new_var


# --------------------------------------------------------------------------
# comparisons

def assert_close(actual, expected, allowed, what="value"):
    """|actual - expected| <= allowed elementwise (NaN where expected is NaN,
    infinities equal), with a message that says where and by how much."""
    actual = np.asarray(actual)
    a = actual.astype(np.float64)
    e = np.broadcast_to(np.asarray(expected, dtype=np.float64), a.shape)
    allowed = np.broadcast_to(np.asarray(allowed, dtype=np.float64), a.shape)
    nan_a, nan_e = np.isnan(a), np.isnan(e)
    if not np.array_equal(nan_a, nan_e):
        idx = np.argwhere(nan_a != nan_e)[0]
        raise AssertionError(
            f"{what}: NaN mismatch at {tuple(idx)}: got {a[tuple(idx)]!r}, "
            f"expected {e[tuple(idx)]!r} ({int((nan_a != nan_e).sum())} mismatches)")
    inf_e = np.isinf(e)
    if not np.array_equal(a[inf_e], e[inf_e]):
        raise AssertionError(f"{what}: infinities differ: got {a[inf_e]}, expected {e[inf_e]}")
    ok = nan_e | inf_e
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.where(ok, 0.0, np.abs(a - e))
    bad = ~(err <= np.where(ok, 0.0, allowed))
    if bad.any():
        ratio = np.where(bad, err / np.maximum(allowed, 1e-300), 0)
        idx = tuple(np.unravel_index(np.argmax(ratio), a.shape))
        raise AssertionError(
            f"{what}: {int(bad.sum())} of {a.size} values out of tolerance; worst at "
            f"{idx}: got {a[idx]!r}, expected {e[idx]!r}, |err|={err[idx]:.3g} > "
            f"allowed {allowed[idx]:.3g} (dtype {actual.dtype})")


def tiny(dtype):
    """Absolute slack for results that round to subnormals."""
    return 2.0 * float(np.finfo(dtype).smallest_subnormal)


def assert_bitwise(a, b, what="result"):
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype, f"{what}: dtype {a.dtype} != {b.dtype}"
    assert a.shape == b.shape, f"{what}: shape {a.shape} != {b.shape}"
    if a.tobytes() != b.tobytes():
        diff = np.argwhere(a.reshape(a.shape) != b.reshape(b.shape))
        raise AssertionError(f"{what}: not bitwise identical "
                             f"({len(diff)} values differ, first at {diff[:1].tolist()})")


def fingerprint(a):
    """Everything about an array that a call must not change."""
    if a is None:
        return None
    a = np.asarray(a)
    return (a.shape, a.dtype.str, a.strides, a.tobytes())
