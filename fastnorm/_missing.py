"""Missing values (nan_policy=): each slice's statistics over its values
that are numbers, and the check of nan_policy="raise"."""
import math

import numpy as np

from . import _explain, _simd
from ._args import as_where, keepdims_shape, reduced_mask, warn_empty
from ._call import forward, normalize


def refuse_nan(x, name="x"):
    """ValueError when x holds a NaN (nan_policy="raise"), before anything
    is written.  np.max carries a NaN through: one pass, no temporary."""
    if x.size and np.isnan(np.max(x)):
        raise ValueError(f"{name} holds NaN (nan_policy='raise')")


def redo_mask(redo, shape):
    """The kernels' mask of the slices taken again (redo: one bool a slice,
    keepdims layout): its bytes broadcast to x's shape, or one byte for
    all where every slice is (constant along every axis: the masked
    routes' cheapest)."""
    if redo.all():
        redo = np.ones((1,) * len(shape), bool)
    return as_where(redo, shape)


# nan_in_most reads the leading 1/PROBE_SHARE of x along its longest axis
# (one of PROBE_SHARE positions at least); x under PROBE_MIN_BYTES is not
# probed: its passes cost less than the probe's call.
PROBE_SHARE = 256
PROBE_MIN_BYTES = 1 << 20


def nan_in_most(x, axes):
    """Whether most slices of x hold a NaN (most of a propagate pass would
    be taken again), judged by the propagate statistics of x's leading
    1/PROBE_SHARE along its longest axis: whole slices where that axis is
    kept, each slice's head where it is reduced (a head with a NaN is a
    slice with one).  One slice, or a small x: not probed (False)."""
    if len(axes) == x.ndim or x.nbytes < PROBE_MIN_BYTES:
        return False
    a = max(range(x.ndim), key=lambda i: x.shape[i])
    if x.shape[a] < PROBE_SHARE:
        return False
    head = x[(slice(None),) * a + (slice(0, x.shape[a] // PROBE_SHARE),)]
    with _explain.unexplained():
        mean, m2, _ = forward(head, axes, "stats")
    return 2 * np.count_nonzero(np.isnan(mean) | np.isnan(m2)) >= mean.size


def omitted_stats(x, axes, where=None, warn=True, cold=False, nan_most=None):
    """Each slice's (mean, m2, count) over its values that are numbers and,
    with where (as_where's bytes), selected: float64 in keepdims layout.
    Without where, one unmasked call first: data without NaN costs nothing
    more, and only the slices whose statistics come out not finite (a NaN,
    or an inf, which stays) are taken again, NaN left out, in the kernels'
    masked pass (no mask of x's size: theirs is one byte a slice).  Where
    most slices hold a NaN (nan_most; None: nan_in_most's probe), the
    masked pass alone, over every slice.  A slice with no number gets NaN
    statistics and count 0 (warned of, as np.nanmean warns, unless warn is
    False: a Dask chunk's slices).  cold: forward's (the first pass)."""
    shape = keepdims_shape(x.shape, axes)
    if where is None and (nan_in_most(x, axes) if nan_most is None else nan_most):
        part = np.empty(shape)
        m, q, _ = forward(x, axes, "stats", where=redo_mask(np.ones(shape, bool), x.shape),
                          count=part, omit=2, warn=warn, cold=cold)
        return m, q, part
    if where is None:
        mean, m2, _ = forward(x, axes, "stats", cold=cold)
        count = np.full(shape, float(math.prod(x.shape[i] for i in axes)))
        if x.size == 0:
            return mean, m2, count
        redo = ~(np.isfinite(mean) & np.isfinite(m2))
        if not redo.any():
            return mean, m2, count
        where = redo_mask(redo, x.shape)
    else:
        redo = None
    part = np.empty(shape)
    # (the slices taken again hold a NaN or an inf: omit 2 skips their
    # fast sums)
    m, q, _ = forward(x, axes, "stats", where=where, count=part,
                      omit=1 if redo is None else 2, warn=warn and redo is None,
                      cold=cold and redo is None)
    if redo is None:
        return m, q, part
    if warn and (part[redo] == 0).any():
        warn_empty()    # (the slices left out of the mask are not empty)
    np.copyto(mean, m, where=redo)
    np.copyto(m2, q, where=redo)
    np.copyto(count, part, where=redo)
    return mean, m2, count


def policy_normalize(policy, x, axes, mode, *, sel, eps, gamma, beta, out, dtype, n_stats,
                     want_stats=True, want_var=False, check_count=None):
    """normalize() under a nan_policy (nan_policy_of's), over sel's
    selection: y, the float64 statistics (mode 'center': mean, rstd, var;
    'rms': rstd second, the others not for users), their dtype, the out=
    arrays left for them, and each slice's count under "omit" (else None).
    want_stats, want_var and check_count as normalize's ("omit" computes
    the statistics and counts whatever they say)."""
    if policy == "raise":
        refuse_nan(x)
    if policy == "omit":
        y, (mean, rstd, var, count), sdt, outs = omitted_normalize(
            x, axes, mode, eps=eps, gamma=gamma, beta=beta, out=out, dtype=dtype,
            n_stats=n_stats, sel=sel)
        return y, (mean, rstd, var), sdt, outs, count
    y, stats, sdt, outs = normalize(x, axes, mode, eps=eps, gamma=gamma, beta=beta, out=out,
                                    dtype=dtype, n_stats=n_stats, want_stats=want_stats,
                                    want_var=want_var, check_count=check_count,
                                    **sel.kernel_args())
    return y, stats, sdt, outs, None


def omitted_normalize(x, axes, mode, *, eps, gamma, beta, out, dtype, n_stats, sel):
    """normalize() with nan_policy="omit": y NaN where x is NaN, each slice
    normalized with the statistics of its numbers (over sel's selection).
    Returns y, (mean, rstd, biased variance, count), the statistics' dtype
    and the out= arrays left for them, as normalize() (RMS: the first
    statistic is not its mean; only rstd is returned to users).

    Slices of runs (not columns) with where=, or where most slices hold a
    NaN (nan_in_most), take one masked pass that leaves NaN out of each
    slice's statistics, then writes its output (where= or a mask of one
    byte a slice).  Otherwise, without where=, and where y may be written
    before the statistics are known (a fresh y, or an out= that shares no
    memory with x), the call is the "propagate" one: data without NaN
    costs that one pass, and only the slices whose statistics come out NaN
    are taken again (their statistics without NaN, then their output).
    Else the statistics come first (omitted_stats), then y in the kernels'
    given-statistics pass."""
    y_out = out[0] if isinstance(out, tuple) else out
    most = sel.where is None and nan_in_most(x, axes)
    if ((most or sel.where is not None) and x.size > 0
            and _simd.kernels.layout_pattern(x, reduced_mask(axes, x.ndim)) == "slices"):
        y, stats, sdt, outs = _masked_pass(x, axes, mode, eps=eps, gamma=gamma, beta=beta,
                                           out=out, dtype=dtype, n_stats=n_stats,
                                           where=sel.where)
        if sel.count is not None:
            sel.count[...] = stats[3]       # what masked results count as empty
        return y, stats, sdt, outs
    if (sel.where is None and x.size > 0 and not most
            and (y_out is None or not np.may_share_memory(y_out, x))):
        return _redo_nan_slices(x, axes, mode, eps=eps, gamma=gamma, beta=beta, out=out,
                                dtype=dtype, n_stats=n_stats)
    mean, m2, count = omitted_stats(x, axes, sel.where, nan_most=most)
    var, given = _given_of(mode, mean, m2, count, eps)
    if sel.count is not None:
        sel.count[...] = count      # what masked results count as empty
    y, _, sdt, outs = normalize(x, axes, "given", eps=eps, gamma=gamma, beta=beta, out=out,
                                dtype=dtype, n_stats=n_stats, given=given,
                                where=sel.where, count=None if sel.where is None else
                                np.empty(count.shape))
    return y, (given[0], given[1], var, count), sdt, outs


def _masked_pass(x, axes, mode, *, eps, gamma, beta, out, dtype, n_stats, where):
    """omitted_normalize's one masked pass (slices of runs: each slice's
    statistics, NaN left out, then its output): over where (as_where's
    bytes), or every slice (a mask of one byte a slice, the slices taken as
    holding a NaN)."""
    shape = keepdims_shape(x.shape, axes)
    count = np.empty(shape)
    y, (s0, s1, s2), sdt, outs = normalize(
        x, axes, mode, eps=eps, gamma=gamma, beta=beta, out=out, dtype=dtype, n_stats=n_stats,
        want_var=mode == "center", count=count, omit=1 if where is not None else 2,
        where=redo_mask(np.ones(shape, bool), x.shape) if where is None else where)
    # (centre: mean, rstd, var; RMS: mean of squares, rstd)
    return y, (s0 if mode == "center" else None, s1, s2, count), sdt, outs


def _given_of(mode, mean, m2, count, eps):
    """The biased variance and the (mean, rstd) pair of the given-statistics
    pass from moments: RMS's mean of squares is var + mean**2, centred on 0."""
    var = _simd.kernels.variance(m2, count)
    if mode == "rms":
        with np.errstate(invalid="ignore", over="ignore"):
            spread = var + mean * mean
        return var, (np.zeros_like(spread), _simd.kernels.rstd(spread, eps))
    return var, (mean, _simd.kernels.rstd(var, eps))


def _redo_nan_slices(x, axes, mode, *, eps, gamma, beta, out, dtype, n_stats):
    """omitted_normalize's one pass: the propagate call, then the slices
    whose statistics are NaN again, NaN left out (a mask of one byte a
    slice: no temporary of x's size)."""
    y, (s0, s1, s2), sdt, outs = normalize(x, axes, mode, eps=eps, gamma=gamma, beta=beta,
                                           out=out, dtype=dtype, n_stats=n_stats,
                                           want_var=mode == "center")
    shape = keepdims_shape(x.shape, axes)
    count = np.full(shape, float(math.prod(x.shape[i] for i in axes)))
    # (centre: mean, rstd, var; RMS: mean of squares, rstd)
    redo = np.isnan(s0) | (np.isnan(s2) if mode == "center" else False)
    if not redo.any():
        return y, (s0 if mode == "center" else None, s1, s2, count), sdt, outs
    where, m, q, part = nan_slices_again(x, axes, redo)
    np.copyto(count, part, where=redo)
    if (part[redo] == 0).any():
        warn_empty()
    var, (mean, rstd) = _given_of(mode, m, q, part, eps)
    if mode == "center":
        np.copyto(s0, mean, where=redo)
        np.copyto(s2, var, where=redo)
    else:
        s2 = None
    np.copyto(s1, rstd, where=redo)
    write_slices_again(x, axes, y, redo, where, (mean, rstd), dtype, eps, gamma, beta)
    return y, (s0 if mode == "center" else None, s1, s2, count), sdt, outs


def nan_slices_again(x, axes, redo):
    """The slices redo marks (one bool a slice, keepdims layout; they hold
    a NaN or an inf) taken again, NaN left out, in the kernels' masked
    pass: (their mask, mean, m2, count), float64 in keepdims layout; no
    warning of slices with no number (the caller's to give)."""
    where, count = redo_mask(redo, x.shape), np.empty(redo.shape)
    mean, m2, _ = forward(x, axes, "stats", where=where, count=count, omit=2, warn=False)
    return where, mean, m2, count


def write_slices_again(x, axes, y, redo, where, given, dtype, eps=0.0, gamma=None, beta=None):
    """y at the slices redo marks (where: nan_slices_again's mask) written
    again in the given-statistics pass; every slice: the pass unmasked, as
    an unmasked call writes."""
    every = redo.all()
    normalize(x, axes, "given", eps=eps, gamma=gamma, beta=beta, out=y, dtype=dtype,
              n_stats=0, given=given, where=None if every else where,
              count=None if every else np.empty(redo.shape))


def one_number_kept(count):
    """batch_norm's counts for its running statistics under "omit": a
    feature with one number counts as none (its running statistics kept:
    one value has no unbiased variance)."""
    return np.where(count == 1, 0.0, count)

