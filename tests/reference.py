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


def tolerances(x_dtype, res_dt):
    """(output, accumulation) relative tolerances for x_dtype results of res_dt."""
    tout = OUT_TOL[np.dtype(res_dt)]
    return tout, max(ACC_TOL[acc_dtype_of(x_dtype)], tout)


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


def slices_of(a, axes):
    """a's values as (slices, values of a slice), the kept axes first."""
    kept = kept_axes(a.ndim, axes)
    moved = np.moveaxis(a, kept + tuple(axes), tuple(range(a.ndim)))
    n_kept = int(np.prod([a.shape[i] for i in kept]))
    return moved.reshape(n_kept, int(np.prod([a.shape[i] for i in axes])))


def masked_moments(x, axes, where):
    """Per slice over its selected values, keepdims layout, float64: count,
    mean, m2 and spread (max - min); an empty slice has NaN mean and m2."""
    xs = slices_of(np.asarray(x, dtype=np.float64), axes)
    ws = slices_of(np.broadcast_to(where, x.shape), axes)
    stats = np.zeros((4, xs.shape[0]))
    for i, (v, w) in enumerate(zip(xs, ws)):
        v = v[w]
        if v.size == 0:
            stats[:, i] = (0, np.nan, np.nan, 0)
            continue
        d = v - v[0]                       # shifted by a value: exact for constants
        md = d.mean()
        md += (d - md).mean()
        stats[:, i] = (v.size, v[0] + md, ((d - md) ** 2).sum(), v.max() - v.min())
    return tuple(s.reshape(keep_shape(x.shape, axes)) for s in stats)


def selected_mean_var(mean, var, x, axes, counts, ddof, like):
    """Check mean_var's results over the values `counts` selects against
    masked_moments: the shapes of `like` (NumPy's mean for the same call),
    the result dtype, and the values within the tolerances of x's dtype.
    Returns the reference variance (NaN or inf where NumPy's is)."""
    n, want_m, m2, spread = (a.reshape(np.shape(like)) for a in masked_moments(x, axes, counts))
    with np.errstate(invalid="ignore", divide="ignore"):
        want_v = m2 / np.maximum(n - ddof, 0)
    res = out_dtype(x.dtype)
    assert np.shape(mean) == np.shape(like) and np.asarray(mean).dtype == res
    assert np.array_equal(np.isnan(mean), np.isnan(want_m))
    tout, tacc = tolerances(x.dtype, res)
    with np.errstate(invalid="ignore", over="ignore"):
        assert_close(mean, want_m, tout * np.abs(want_m) + tacc * spread + tiny(res), "mean")
        assert_close(var, want_v, tout * np.abs(want_v) + tacc * spread**2 * n + tiny(res),
                     "var")
    return want_v


def selected_norm(x, axes, where, kind, g, b, eps):
    """A normalization over the values `where` selects ("layer", "rms" or
    "batch"): (y, mean, rstd, xhat, spread), float64, from masked_moments."""
    n, mean, m2, spread = masked_moments(x, axes, where)
    xd = x.astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        if kind == "rms":
            ms = m2 / n + mean**2
            rstd = 1 / np.sqrt(ms + eps)
            xhat = xd * rstd
        else:
            rstd = 1 / np.sqrt(m2 / n + eps)
            xhat = (xd - mean) * rstd
    y = xhat * (1.0 if g is None else g) + (0.0 if b is None else b)
    return y, mean, rstd, xhat, spread


def ref_mean_var(x, axes, ddof=0, acc=np.float64):
    """(mean, var, spread) in keepdims layout, float64 (or acc)."""
    n, mean, m2, _, spread = moments(x, axes, acc)
    with np.errstate(divide="ignore", invalid="ignore"):
        var = m2 / max(n - ddof, 0) if n > 0 else m2
    return mean, var, spread


def ref_row_variances(x, where, ddof):
    """M2 / max(k - ddof, 0) of each row's k selected values, in plain
    Python floats (inf, or NaN for a zero or NaN M2, without degrees of
    freedom; NaN for a row with nothing selected)."""
    out = []
    for row, sel in zip(x, where):
        v = [float(a) for a in row[sel]]
        m2 = sum((a - sum(v) / len(v)) ** 2 for a in v) if v else float("nan")
        dof = max(len(v) - ddof, 0)
        out.append(m2 / dof if dof else (float("inf") if m2 > 0 else float("nan")))
    return np.array(out)


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


def mean_rounding(mean, rstd, g=None):
    """What a normalized output carries of its float64 mean's rounding: any
    float64 mean is off by eps |mean|, times rstd (and the gain) in y.
    Data at an offset far above its spread (-1000 + 1e-3 noise, eps
    above the variance) are outside tolerances without it."""
    gabs = 1.0 if g is None else np.abs(g)
    with np.errstate(invalid="ignore", over="ignore"):
        return 4 * np.finfo(np.float64).eps * gabs * np.abs(np.nan_to_num(mean)) * rstd


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


# --------------------------------------------------------------------------
# the rest of the family: group/instance norm, weight norm and standardization

def group_view_shape(shape, num_groups, channel_axis):
    """x's shape with the channel axis split into (groups, channels per group)."""
    ch = channel_axis % len(shape)
    return tuple(shape[:ch]) + (num_groups, shape[ch] // num_groups) + tuple(shape[ch + 1:])


def group_param(p, shape, num_groups, channel_axis):
    """A per-channel parameter ((C,) or keepdims) in the split view's keepdims layout."""
    if p is None:
        return None
    ch = channel_axis % len(shape)
    vshape = group_view_shape(shape, num_groups, ch)
    keep = [1] * len(vshape)
    keep[ch], keep[ch + 1] = vshape[ch], vshape[ch + 1]
    a = np.asarray(p, dtype=np.float64)
    if a.ndim == len(shape):
        # keepdims layout: C values along the channel axis, or one for all
        a = np.broadcast_to(a, tuple(shape[ch] if i == ch else 1 for i in range(len(shape))))
    return a.reshape(keep)


def ref_group_norm(x, num_groups, channel_axis=1, gamma=None, beta=None, eps=1e-5):
    """Group norm in float64: layer norm of the split view over every axis but
    0 and the group axis.  Returns (y, mean, rstd), the statistics in x's
    shape with the channel axis holding the groups and the others (but 0) 1."""
    xd = np.asarray(x, dtype=np.float64)
    ch = channel_axis % xd.ndim
    v = xd.reshape(group_view_shape(xd.shape, num_groups, ch))
    axes = tuple(i for i in range(1, v.ndim) if i != ch)
    g = group_param(gamma, xd.shape, num_groups, ch)
    b = group_param(beta, xd.shape, num_groups, ch)
    y, mean, rstd, _, _ = ref_layer_norm(v, axes, g, b, eps)
    sshape = tuple(xd.shape[0] if i == 0 else (num_groups if i == ch else 1)
                   for i in range(xd.ndim))
    return y.reshape(xd.shape), mean.reshape(sshape), rstd.reshape(sshape)


def ref_weight_norm(v, axes, g=None):
    """(w, norm): w = g * v / ||v|| over axes, norm in keepdims layout."""
    vd = np.asarray(v, dtype=np.float64)
    norm = np.sqrt((vd * vd).sum(axis=axes, keepdims=True))
    with np.errstate(invalid="ignore", divide="ignore"):
        w = vd / norm
    return (w if g is None else w * g), norm


# --------------------------------------------------------------------------
# gradients

def ref_norm_grads(dy, x, axes, along, gamma=None, mode="center", eps=1e-5, stats=None):
    """Closed-form float64 gradients of y = xhat * gamma + beta, xhat = (x -
    mean) * rstd per slice over `axes`:

      center  dx = r * (gd - mean(gd) - xhat * mean(gd * xhat))   (layer,
              batch in training, group norm on the split view)
      rms     dx = r * (gd - xhat * mean(gd * xhat)), mean = 0
      scale   dx = r * gd, with the given (mean, rstd) (batch norm in eval)

    with gd = dy * gamma and the means over each slice, the statistics
    recomputed here or, where passed, the given (mean, rstd) as the forward
    rounded them (always in scale mode); dgamma = sum(dy * xhat) and dbeta
    = sum(dy) over every axis that gamma does not vary along.
    gamma is in keepdims layout (None: ones).  Returns a dict with dx, dgamma
    and dbeta (keepdims layout of the parameter), and for each the sum of the
    magnitudes of its terms ('dx_scale', ...) to scale tolerances."""
    xd = np.asarray(x, dtype=np.float64)
    dyd = np.asarray(dy, dtype=np.float64)
    n = math.prod(xd.shape[a] for a in axes)
    if mode == "scale" or stats is not None:
        mean, rstd = (np.asarray(s, dtype=np.float64) for s in stats)
    elif mode == "rms":
        mean = np.zeros(keep_shape(xd.shape, axes))
        rstd = 1 / np.sqrt((xd * xd).sum(axis=axes, keepdims=True) / n + eps)
    else:
        _, mean, m2, _, _ = moments(xd, axes)
        rstd = 1 / np.sqrt(m2 / n + eps)
    g = np.ones(()) if gamma is None else np.asarray(gamma, dtype=np.float64)
    xhat = (xd - mean) * rstd
    gd = dyd * g
    mean_gd = gd.sum(axis=axes, keepdims=True) / n
    mean_gdx = (gd * xhat).sum(axis=axes, keepdims=True) / n
    abs_gd = np.abs(gd).sum(axis=axes, keepdims=True) / n
    abs_gdx = np.abs(gd * xhat).sum(axis=axes, keepdims=True) / n
    if mode == "center":
        dx = rstd * (gd - mean_gd - xhat * mean_gdx)
        dx_scale = rstd * (np.abs(gd) + abs_gd + np.abs(xhat) * abs_gdx)
    elif mode == "rms":
        dx = rstd * (gd - xhat * mean_gdx)
        dx_scale = rstd * (np.abs(gd) + np.abs(xhat) * abs_gdx)
    else:
        dx = rstd * gd
        dx_scale = np.abs(dx)
    # A keepdims gamma of size 1 along some of its own axes broadcasts there:
    # its gradient sums over them too.
    psum = tuple(i for i in range(xd.ndim)
                 if i not in along or (gamma is not None and g.ndim and g.shape[i] == 1))
    return dict(
        dx=dx, dx_scale=dx_scale,
        dgamma=(dyd * xhat).sum(axis=psum, keepdims=True),
        dgamma_scale=np.abs(dyd * xhat).sum(axis=psum, keepdims=True),
        dbeta=dyd.sum(axis=psum, keepdims=True),
        dbeta_scale=np.abs(dyd).sum(axis=psum, keepdims=True),
        xhat=xhat, rstd=rstd)


def ref_group_norm_grads(dy, x, num_groups, channel_axis=1, gamma=None, eps=1e-5,
                         stats=None):
    """ref_norm_grads for group norm: on the split view, then dx in x's shape
    and dgamma/dbeta (and their scales) of shape (C,); stats: None, or the
    forward's (mean, rstd) as it returned them."""
    xd = np.asarray(x, dtype=np.float64)
    ch = channel_axis % xd.ndim
    vshape = group_view_shape(xd.shape, num_groups, ch)
    axes = tuple(i for i in range(1, len(vshape)) if i != ch)
    if stats is not None:
        stats = tuple(np.asarray(s, np.float64).reshape(keep_shape(vshape, axes))
                      for s in stats)
    r = ref_norm_grads(np.asarray(dy, dtype=np.float64).reshape(vshape), xd.reshape(vshape),
                       axes, (ch, ch + 1), group_param(gamma, xd.shape, num_groups, ch),
                       eps=eps, stats=stats)
    c = (xd.shape[ch],)
    out = {k: r[k].reshape(c) for k in ("dgamma", "dgamma_scale", "dbeta", "dbeta_scale")}
    if gamma is not None and np.ndim(gamma) == xd.ndim and np.shape(gamma)[ch] == 1:
        # one gain for every channel: its gradient is the channels' sum
        out = {k: np.sum(v, keepdims=True) for k, v in out.items()}
    out.update(dx=r["dx"].reshape(xd.shape), dx_scale=r["dx_scale"].reshape(xd.shape))
    return out


def central_difference(f, a, h):
    """d f / d a by central differences (f: float64 array -> float), each
    element of a moved by +-h (h broadcasts against a)."""
    a = np.array(a, dtype=np.float64)
    h = np.broadcast_to(np.asarray(h, dtype=np.float64), a.shape)
    grad = np.empty_like(a)
    for i in np.ndindex(a.shape):
        keep = a[i]
        a[i] = keep + h[i]
        up, step_up = f(a), a[i] - keep   # the step as represented
        a[i] = keep - h[i]
        down, step_down = f(a), keep - a[i]
        a[i] = keep
        grad[i] = (up - down) / (step_up + step_down)
    return grad
