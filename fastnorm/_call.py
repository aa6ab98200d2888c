"""The kernels' calls, shared by every public function and the Dask path:
forward (statistics and output) and backward (gradients, whole or one pass
of two), with their outputs checked before anything is written, inputs that
share memory with an output read from copies, and results delivered in the
dtype and arrays the caller asked for.  A call being explained
(fastnorm.explain) stops here with its route."""
import math

import numpy as np

from . import _simd, _explain
from ._args import (as_input, as_where, check_out, detach, keepdims_shape, reduced_mask,
                    result_dtypes, split_out, warn_empty, writable_target)
from ._config import team_size


def forward(x, axes, mode, *, eps=0.0, gamma=None, beta=None, y=None,
                 given=None, want_var=False, want_stats=True, fresh=False,
                 where=None, count=None, check_count=None, omit=0, warn=True, cold=False):
    """Run the kernel once; return its per-slice float64 statistics in
    keepdims layout: (mean, m2) for 'stats', (mean, rstd[, var]) for
    'center', (mean of squares, rstd) for 'rms', the given pair for 'given'.
    want_stats=False (with y, modes 'center' and 'rms'): the caller keeps y
    alone, and the statistics may come back as None.  fresh: y was just
    allocated (the kernels write fresh pages in the order they fault
    cheapest).  where: the selection (as_where's bytes), with count, a
    float64 array in keepdims layout for each slice's number of selected
    values; y is written at the selected positions alone, and check_count
    (when given) is called with count before the call warns of an empty
    selection.  omit (with where, not mode 'given'): values that are NaN
    are left out of the statistics and the count, as if not selected (2:
    the selected slices are known to hold a NaN or an inf).  warn
    False: no warning of an empty selection (a part of the slices, such as
    a Dask chunk's, may select nothing).  cold: x is read from memory
    whatever its size (a stream's chunk): fetched ahead, never taken as
    in the caches."""
    shape = keepdims_shape(x.shape, axes)
    if given is not None:
        s0, s1 = given
    elif want_stats or want_var or x.size == 0 or where is not None:
        s0, s1 = np.empty(shape), np.empty(shape)
    else:
        # Not even allocated: one statistic per slice is an eighth of x's
        # bytes for rows of 32 float32 values, and fresh pages fault.
        s0 = s1 = None
    s2 = np.empty(shape) if want_var else None
    if x.size == 0:
        # Nothing to read; a slice with no values has undefined statistics.
        if count is not None:
            count.fill(0.0)
        if given is None and math.prod(shape) > 0:
            warn_empty()
            for s in (s0, s1, s2):
                if s is not None:
                    s.fill(np.nan)
        return s0, s1, s2
    k = _simd.kernels
    mask, m, threads = reduced_mask(axes, x.ndim), k.MODES[mode], team_size()
    if _explain.explaining and _explain.active():
        _explain.kernel(k.explain_forward(x, y, gamma, beta, s0, s1, s2, mask, m, threads, fresh,
                                          where, count, omit, cold))
    k.forward(x, y, gamma, beta, s0, s1, s2, mask, m, eps, threads, fresh, where, count, omit,
              cold)
    if check_count is not None:
        check_count(count)
    if warn and where is not None and given is None and (count == 0).any():
        warn_empty()
    return s0, s1, s2


def fortran(x):
    """Whether x is laid out in Fortran order and not C order."""
    return x.flags.f_contiguous and not x.flags.c_contiguous


def deliver(stat, dtype, out, name):
    """A float64 statistic as the caller asked for it: in dtype, into out
    when given (the kernels' result rule)."""
    if out is not None:
        check_out(out, name, stat.shape, dtype)
    return _simd.kernels.result(stat, dtype, out)


def normalize(x, axes, mode, *, eps, gamma, beta, out, dtype, n_stats,
              given=None, want_var=False, want_stats=True, where=None, count=None,
              check_count=None, omit=0):
    """Shared body of the normalizers: y plus the statistics in the dtype
    the caller gets them in (n_stats of them are delivered through out;
    want_stats=False: y alone is used, the statistics may be None).
    where, count, check_count, omit: as forward's; a fresh y holds 0
    outside the selection, an out= its old values."""
    out_dtype, stat_dtype = result_dtypes(x.dtype, dtype)
    outs = split_out(out, 1 + n_stats)
    # Every out= is checked before anything is written.
    if outs[0] is not None:
        check_out(outs[0], "out", x.shape, out_dtype)
    for i, o in enumerate(outs[1:], start=1):
        if o is not None:
            check_out(o, f"out[{i}]", keepdims_shape(x.shape, axes), stat_dtype)
    if where is not None and outs[0] is None:
        y, final = _simd.kernels.fresh_output(x.shape, out_dtype, fortran(x), where,
                                              team_size()), None
    else:
        y, final = writable_target(outs[0], x, out_dtype)
    # Inputs that share memory with y (running statistics in eval mode
    # included) are read from copies: y is written while they are read.  A
    # fresh y shares memory with nothing.
    if outs[0] is not None:
        gamma, beta = detach(gamma, y), detach(beta, y)
        if given is not None:
            given = tuple(detach(s, y) for s in given)
    stats = forward(x, axes, mode, eps=eps, gamma=gamma, beta=beta, y=y, given=given,
                    want_var=want_var, want_stats=want_stats, fresh=y is not outs[0],
                    where=where, count=count, check_count=check_count, omit=omit)
    if final is not None:
        np.copyto(final, y, where=True if where is None else where.view(np.bool_))
        y = final
    return y, stats, stat_dtype, outs[1:]


def backward(dy, x, axes, mean, rstd, gamma, mode, dx_out=None, where=None):
    """The kernel call: dx (into dx_out when given) plus float64 dgamma, dbeta
    in gamma's keepdims layout.  where: the selection (as_where's bytes):
    dx is written there alone (a fresh dx holds 0 elsewhere)."""
    if where is not None and dx_out is None:
        dx, final = _simd.kernels.fresh_output(x.shape, x.dtype, fortran(x), where,
                                               team_size()), None
    else:
        dx, final = writable_target(dx_out, x, x.dtype)
    if final is None and dx_out is not None and (np.may_share_memory(dx, dy)
                                                 and dx is not dy):
        _explain.copied("out: written through a temporary, then copied in")
        dx, final = np.empty_like(x), dx_out  # dx overlaps dy other than exactly
    # Inputs that share memory with dx are read from copies: dx is written
    # while they are read.
    gamma, mean, rstd = (detach(a, dx) for a in (gamma, mean, rstd))
    fresh = dx is not dx_out    # just allocated: its pages not yet touched
    dgamma, dbeta = np.empty_like(gamma), np.empty_like(gamma)
    if x.size == 0:
        # Nothing to differentiate: empty sums (and an empty dx, which is
        # still the caller's out).
        dgamma.fill(0.0)
        dbeta.fill(0.0)
    else:
        k = _simd.kernels
        args = (dy, x, dx, gamma, mean, rstd, dgamma, dbeta, reduced_mask(axes, x.ndim),
                k.GRAD_MODES[mode], team_size(), fresh and where is None)
        if _explain.explaining and _explain.active():
            _explain.kernel(k.explain_backward(*args, where=where))
        k.backward(*args, where=where)
    if final is not None:
        np.copyto(final, dx, where=True if where is None else where.view(np.bool_))
        dx = final
    return dx, dgamma, dbeta


def _pass_operands(dy, x, mean, rstd, gamma):
    x, dy = as_input(x), as_input(dy, "dy")
    rstd, gamma = kernel_operand(rstd), kernel_operand(gamma)
    mean = np.zeros_like(rstd) if mean is None else kernel_operand(mean)
    return dy, x, mean, rstd, gamma


def backward_sums(dy, x, axes, mean, rstd, gamma, mode, where=None):
    """A gradient's first pass alone, over a part of each slice (a Dask
    chunk): (A, B) in the statistics' layout and (dgamma, dbeta) in
    gamma's, float64 (mean None: RMS, no centring); over the selected
    values with where (a bool array of x.ndim dimensions)."""
    dy, x, mean, rstd, gamma = _pass_operands(dy, x, mean, rstd, gamma)
    a, b = np.empty(rstd.shape), np.empty(rstd.shape)
    dg, db = np.empty(gamma.shape), np.empty(gamma.shape)
    k = _simd.kernels
    k.backward_sums(dy, x, gamma, mean, rstd, a, b, dg, db, reduced_mask(axes, x.ndim),
                    k.GRAD_MODES[mode], team_size(),
                    where=None if where is None else as_where(where, x.shape),
                    counts=None if where is None else np.empty(rstd.shape))
    return a, b, dg, db


def backward_dx(dy, x, axes, mean, rstd, gamma, mode, a, b, n, where=None):
    """A gradient's second pass alone: dx in x's dtype from each slice's
    sums A and B over all its n values (None where the mode has none: A
    for RMS, both in eval); with where, n is each slice's count of selected
    values (keepdims layout) and dx is 0 elsewhere."""
    dy, x, mean, rstd, gamma = _pass_operands(dy, x, mean, rstd, gamma)
    a = np.zeros_like(rstd) if a is None else kernel_operand(a)
    b = np.zeros_like(rstd) if b is None else kernel_operand(b)
    k = _simd.kernels
    unused = np.empty(gamma.shape)
    if where is not None:
        dx = np.zeros(x.shape, x.dtype)
        k.backward(dy, x, dx, gamma, mean, rstd, unused, unused.copy(),
                   reduced_mask(axes, x.ndim), k.GRAD_MODES[mode], team_size(), False,
                   sums=(a, b, kernel_operand(np.broadcast_to(n, rstd.shape))),
                   where=as_where(where, x.shape))
        return dx
    dx = np.empty_like(x)
    k.backward(dy, x, dx, gamma, mean, rstd, unused, unused.copy(), reduced_mask(axes, x.ndim),
               k.GRAD_MODES[mode], team_size(), True, sums=(a, b), n=float(n))
    return dx


def kernel_operand(a):
    """a as the kernels read a statistic or gamma: float64, C-contiguous and
    aligned (np.ascontiguousarray keeps a misaligned buffer as it is)."""
    return np.require(a, dtype=np.float64, requirements="CA")
