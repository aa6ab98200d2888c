# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: initializedcheck=False, nonecheck=False, freethreading_compatible=True
#
# The kernels, compiled once per instruction-set level as
# fastnorm._kernels_<level>: the forward schedules (forward.pxi), the
# gradients (backward.pxi) and their entry points, on the planner
# (plan.pxd), the statistics core (moments.pxd) and the vector primitives
# (simd.h).

from cython.parallel cimport parallel, prange
from libc.string cimport memcpy, memset
from libc.math cimport sqrt, fabs, isfinite, NAN
from libc.float cimport DBL_MAX
cimport numpy as cnp
import numpy as np

from scratch cimport FN_KEEP_MIN, fn_calloc, fn_free, fn_malloc
from simd cimport *
from plan cimport *
from moments cimport *
from fetch cimport *
from coefs cimport *

cnp.import_array()

include "forward.pxi"
include "backward.pxi"
include "params.pxi"
include "rules.pxi"
include "fastcall.pxi"

MODES = {"stats": MODE_STATS, "center": MODE_CENTER, "rms": MODE_RMS, "given": MODE_GIVEN}
GRAD_MODES = {"center": GRAD_CENTER, "rms": GRAD_RMS, "scale": GRAD_SCALE}
# The COLUMNS pattern's columns per tile and its output's rows per group
# (tests aim at these; the machine's values are in tuning()).
column_tile = COL_TILE
out_rows = OUT_ROWS
# COLUMNS calls of more groups (tiles of one outer slice) go in passes.
pass_groups = MAX_PASS_GROUPS
grad_column_tile = GRAD_COL_TILE
grad_pass_groups = GRAD_PASS_GROUPS
# Runs of a few values as columns (the images' channels schedule): at most
# this many values a run, this many bytes of x a column, the per-column
# arrays within this much (or an eighth of x); the image order from this
# many values a run on.
channels_inner_max = INNER_MAX
channels_min_column_bytes = MIN_COLUMN_BYTES
channels_column_arrays_max = COLUMN_ARRAYS_MAX
images_inner_min = IMAGES_INNER_MIN

# fn_tuning's fields by name, in the order of the struct (Cython turns the
# struct into a dict and back).
TUNING_FIELDS = tuple(<dict>fn_tuning)
# Tuning values that are yes (1) or no (0); the others are positive.
TUNING_FLAGS = ("prefetch_fills_l1",)


def set_tuning(dict values):
    """Set the values derived from the machine (fastnorm._machine.derive):
    every field of TUNING_FIELDS, each a positive int (TUNING_FLAGS: 0 or 1).  Not thread-safe:
    called as the module is imported, and by tests between calls."""
    global fn_tuning
    cdef fn_tuning_t t
    missing = [k for k in TUNING_FIELDS if k not in values]
    if missing:
        raise ValueError(f"tuning values missing: {', '.join(missing)}")
    for k in TUNING_FIELDS:
        if k in TUNING_FLAGS:
            if values[k] not in (0, 1):
                raise ValueError(f"tuning value {k} is 0 or 1, not {values[k]}")
        elif values[k] <= 0:
            raise ValueError(f"tuning value {k} must be positive, not {values[k]}")
    t = values
    fn_tuning = t


def tuning():
    """The values in force (as set_tuning left them), by name."""
    return <dict>fn_tuning


# No call runs before the machine's values are in: set them now.
from fastnorm._machine import TUNING as _machine_tuning
set_tuning(_machine_tuning)
del _machine_tuning

PATTERNS = ("slices", "images", "columns")
WAYS = ("rows", "lanes", "whole", "split", "images", "channels", "tiles", "turns")


cdef int forward_setup(Layout* L, Route* R, cnp.ndarray x, y, gamma, beta, s0, s1, s2,
                       tuple reduced, int mode, int nthreads, bint fresh, where=None,
                       count=None, int omit=0, bint cold=False) except -1:
    """The layout and the route of a forward call (see forward)."""
    cdef bint has_y = y is not None
    cdef int xt = type_code(x), yt = xt
    cdef Py_ssize_t y_bytes = 0
    cdef bint y_contiguous = False
    if (s0 is None or s1 is None) and (s0 is not s1 or s2 is not None or not has_y
                                       or mode == MODE_GIVEN or mode == MODE_STATS):
        raise ValueError("fastnorm: statistics arrays are needed here")
    if where is not None and (cnp.PyArray_ITEMSIZE(<cnp.ndarray>where) != 1
                              or (<cnp.ndarray>where).ndim != x.ndim
                              or s0 is None or count is None):
        raise ValueError("fastnorm: a mask is one byte an element, of x's dimensions, "
                         "with statistics arrays and a count")
    if omit and (where is None or mode == MODE_GIVEN):
        raise ValueError("fastnorm: NaN is omitted from statistics taken here, with a mask")
    if has_y:
        yt = type_code(y)
        y_bytes = cnp.PyArray_NBYTES(<cnp.ndarray>y)
        y_contiguous = cnp.PyArray_IS_C_CONTIGUOUS(y) or cnp.PyArray_IS_F_CONTIGUOUS(y)
    make_layout(L, x, (y, gamma, beta, s0, s1, s2), reduced, count, where)
    L.omit = omit
    # Absent parameters read as a broadcast 1 (gamma) and 0 (beta).
    if gamma is None:
        L.base[OP_G] = <char*>&fn_one
    if beta is None:
        L.base[OP_B] = <char*>&fn_zero_value
    route_forward(R, L, mode, has_y, xt, yt, nthreads, fresh, y_contiguous,
                  cnp.PyArray_NBYTES(x), y_bytes, cold)
    return 0


cdef int start_call(const Route* R, cnp.ndarray x, out) except -1:
    """Before a call's kernel: this thread's schedule for its parallel
    loops, and a fresh output written channel by channel faulted in by the
    threads, each its own pages (see fn_fault_in)."""
    cdef char* data
    cdef Py_ssize_t nbytes
    # (For one thread the schedule decides nothing; setting it is an OpenMP
    # call that takes a lock.)
    if R.threads > 1:
        schedule_for(cnp.PyArray_NBYTES(x), R.guided)
    if R.fault_in:
        data = <char*>cnp.PyArray_DATA(<cnp.ndarray>out)
        nbytes = cnp.PyArray_NBYTES(<cnp.ndarray>out)
        with nogil:
            fn_fault_in(data, nbytes, R.threads)
    return 0


cdef inline bint hands_over_gil(cnp.ndarray x) noexcept:
    """Whether a call on x lets other Python threads run while it works: a
    small one is over before they would get the GIL (GIL_BYTES)."""
    return cnp.PyArray_NBYTES(x) >= GIL_BYTES


cdef int forward_typed(const Layout* L, const Route* R, int mode, double eps, bint has_y,
                       int in_code, int out_code) noexcept nogil:
    """forward_in for x's type (type_code)."""
    if in_code == 0:
        return forward_in(L, R, mode, eps, has_y, out_code, <half_t*>NULL)
    if in_code == 1:
        return forward_in(L, R, mode, eps, has_y, out_code, <float*>NULL)
    return forward_in(L, R, mode, eps, has_y, out_code, <double*>NULL)


cdef int run_forward(cnp.ndarray x, y, gamma, beta, s0, s1, s2, tuple reduced, int mode,
                     double eps, int nthreads, bint fresh, where=None, count=None,
                     int omit=0, bint cold=False) except -1:
    cdef Layout L
    cdef Route R
    cdef int rc, in_code = type_code(x), out_code = in_code
    cdef bint has_y = y is not None
    forward_setup(&L, &R, x, y, gamma, beta, s0, s1, s2, reduced, mode, nthreads, fresh,
                  where, count, omit, cold)
    if has_y:
        out_code = type_code(y)
    start_call(&R, x, y)
    if hands_over_gil(x):
        with nogil:
            rc = forward_typed(&L, &R, mode, eps, has_y, in_code, out_code)
    else:
        rc = forward_typed(&L, &R, mode, eps, has_y, in_code, out_code)
    if rc != 0:
        raise MemoryError("fastnorm: could not allocate scratch memory")
    return 0


def fresh_output(shape, dtype, bint fortran_order, cnp.ndarray where, int nthreads):
    """A new output of a masked call (where: as_where's bytes, broadcast to
    shape) holding 0 wherever where selects nothing, which the kernels
    leave alone.  Where the mask is constant along the output's rows (its
    innermost axis: padded sequences, rows left out), the rows it leaves
    out are zeroed alone, once; else the allocator's zeroed pages
    (np.zeros) hold the zeros, a pass over every value where the pages
    are reused."""
    fn_clean_upper()
    cdef cnp.ndarray y, m
    cdef Py_ssize_t rows, r, rest, off, n, row_bytes
    cdef Py_ssize_t dims[MAX_DIMS]
    cdef Py_ssize_t steps[MAX_DIMS]
    cdef int a, nd = len(shape)
    cdef char* yp
    cdef const char* mp
    order = "F" if fortran_order else "C"
    if nd == 0 or nd > MAX_DIMS:
        return np.zeros(shape, dtype, order=order)
    m = where.T if fortran_order else where
    n = shape[0] if fortran_order else shape[nd - 1]
    if n <= 1 or cnp.PyArray_STRIDE(m, nd - 1) != 0 or cnp.PyArray_SIZE(m) == 0:
        return np.zeros(shape, dtype, order=order)
    y = np.empty(shape, dtype, order=order)
    row_bytes = n * cnp.PyArray_ITEMSIZE(y)
    rows = cnp.PyArray_SIZE(y) // n
    for a in range(nd - 1):
        dims[a] = cnp.PyArray_DIM(m, a)
        steps[a] = cnp.PyArray_STRIDE(m, a)
    yp = <char*>cnp.PyArray_DATA(y)
    mp = <const char*>cnp.PyArray_DATA(m)
    with nogil, parallel(num_threads=nthreads if rows * n >= PARALLEL_MIN else 1):
        for r in prange(rows, schedule="static"):
            rest = r
            off = 0
            for a in range(nd - 2, -1, -1):
                off = off + (rest % dims[a]) * steps[a]
                rest = rest // dims[a]
            if mp[off] == 0:
                memset(yp + r * row_bytes, 0, row_bytes)
    return y


def forward(cnp.ndarray x, y, gamma, beta, s0, s1, s2, tuple reduced, int mode, double eps,
            int nthreads, bint fresh=False, where=None, count=None, int omit=0,
            bint cold=False):
    """One forward call: x (float16/32/64, aligned, native byte order); y an
    output of x's shape or None; gamma, beta float64 arrays of x.ndim
    dimensions (each x's size or 1) or None; s0, s1 float64 statistics in
    keepdims layout (outputs, or inputs for mode 'given'), both None when
    the caller wants y alone (modes 'center' and 'rms'), and s2 a third one
    for the variance (mode 'center') or None; reduced a tuple of bools, one
    per axis of x; fresh: y was just allocated (its pages not yet touched).
    where: the values it selects alone (bytes, nonzero: selected; x.ndim
    dimensions, each x's size or 1), count then a float64 statistics array
    for each slice's number of them; y is written there alone.  omit (with
    where, not mode 'given'): a value counts in the statistics where
    selected and not NaN (1; 2: the slices selected are known to hold a
    NaN, and their fast sums are not tried first).  cold: x is read from
    memory whatever its size (Route.cold).  Nothing is copied."""
    fn_clean_upper()
    run_forward(x, y, gamma, beta, s0, s1, s2, reduced, mode, eps, nthreads, fresh, where,
                count, omit, cold)


cdef dict route_dict(const Route* R, const Layout* L):
    return {"pattern": PATTERNS[R.pattern], "schedule": WAYS[R.way], "threads": R.threads,
            "streams": bool(R.stream), "descending": bool(R.descend),
            "float32_pass": bool(R.f32), "rows_pass": bool(R.rows_out),
            "in_cache": bool(R.in_cache), "simd": FN_VARIANT_NAME.decode(),
            "slices": L.n_slices, "slice_length": L.slice_len, "columns": None,
            "runs_fetch": None, "next_fetch": None}


def explain_forward(cnp.ndarray x, y, gamma, beta, s0, s1, s2, tuple reduced, int mode,
                    int nthreads, bint fresh=False, where=None, count=None, int omit=0,
                    bint cold=False):
    """The route forward() would take with these arguments, as a dict;
    nothing is run."""
    fn_clean_upper()
    cdef Layout L
    cdef Route R
    cdef dict route
    cdef int xt = type_code(x), yt = xt if y is None else type_code(y)
    forward_setup(&L, &R, x, y, gamma, beta, s0, s1, s2, reduced, mode, nthreads, fresh,
                  where, count, omit, cold)
    route = route_dict(&R, &L)
    route["runs_fetch"] = runs_fetch_of(&L, &R, mode)
    route["next_fetch"] = next_fetch_of(&L, &R, mode, y is not None, code_size(xt))
    if R.way == WAY_TILES:
        if xt == 0:
            route["columns"] = column_plan_in(&L, &R, mode, y is not None, yt, <half_t*>NULL)
        elif xt == 1:
            route["columns"] = column_plan_in(&L, &R, mode, y is not None, yt, <float*>NULL)
        else:
            route["columns"] = column_plan_in(&L, &R, mode, y is not None, yt, <double*>NULL)
    return route


cdef int backward_setup(Layout* L, Route* R, Grad* g, cnp.ndarray dy, cnp.ndarray x, dx,
                        cnp.ndarray gamma, cnp.ndarray mean, cnp.ndarray rstd,
                        cnp.ndarray dgamma, cnp.ndarray dbeta, tuple reduced, int mode,
                        int nthreads, bint fresh, int phase, sa, sb,
                        double n, where=None, sn=None) except -1:
    """The layout, route and gradient record of a backward call (where: as
    forward's; sn: with sa and sb, each slice's count of selected values)."""
    cdef int in_code = type_code(x)
    cdef Py_ssize_t sshift
    if type_code(dy) != in_code:
        raise TypeError("dy and x must have the same dtype")
    if (phase == PHASE_BOTH) != (sa is None) or (phase == PHASE_SUMS) != (dx is None):
        raise ValueError("backward: dx is written unless the sums alone are asked for, "
                         "and sums are given or asked for in one phase alone")
    if where is not None and (cnp.PyArray_ITEMSIZE(<cnp.ndarray>where) != 1
                              or (<cnp.ndarray>where).ndim != x.ndim
                              or (sa is not None and sn is None)):
        raise ValueError("fastnorm: a mask is one byte an element, of x's dimensions, "
                         "and the sums given or asked for come with counts")
    # Slots: x, dx (output), gamma (its strides also address the gradient
    # buffers), dy (the beta slot), statistics.
    make_layout(L, x, (dx, gamma, dy, mean, rstd, None), reduced, None, where)
    for a in (sa, sb, sn):
        if a is not None and not (cnp.PyArray_IS_C_CONTIGUOUS(a) and cnp.PyArray_ISALIGNED(a)
                                  and cnp.PyArray_TYPE(a) == cnp.NPY_DOUBLE
                                  and cnp.PyArray_SIZE(a) == mean.size
                                  and (dx is not None or cnp.PyArray_ISWRITEABLE(a))):
            raise ValueError("backward: slice sums are C-contiguous doubles of the "
                             "statistics' size")
    route_backward(R, L, in_code, nthreads, fresh,
                   dx is not None and (cnp.PyArray_IS_C_CONTIGUOUS(dx)
                                       or cnp.PyArray_IS_F_CONTIGUOUS(dx)),
                   cnp.PyArray_NBYTES(x),
                   0 if dx is None else cnp.PyArray_NBYTES(<cnp.ndarray>dx),
                   phase == PHASE_BOTH)
    g.L = L
    g.R = R
    g.mode = mode
    g.phase = phase
    g.group = 1
    g.inv_n = 1.0 / (n if n > 0 else <double>L.slice_len)
    g.n_param = gamma.size
    g.gamma = <const char*>cnp.PyArray_DATA(gamma)
    g.dgamma = <char*>cnp.PyArray_DATA(dgamma)
    g.dbeta = <char*>cnp.PyArray_DATA(dbeta)
    # make_layout may have walked negative x strides forwards, moving gamma's
    # and the statistics' bases; the partial buffers (gamma's layout) and the
    # sums (the statistics') move the same way.
    g.gshift = L.base[OP_G] - g.gamma
    g.gamma = <const char*>L.base[OP_G]
    g.sa = g.sb = g.sn = NULL
    if sa is not None:
        sshift = L.stat[0] - <char*>cnp.PyArray_DATA(mean)
        g.sa = <char*>cnp.PyArray_DATA(sa) + sshift
        g.sb = <char*>cnp.PyArray_DATA(sb) + sshift
        if sn is not None:
            g.sn = <char*>cnp.PyArray_DATA(sn) + sshift
    return 0


cdef int backward_typed(Grad* g, int in_code, int out_code) noexcept nogil:
    """backward_in for x's type (type_code)."""
    if in_code == 0:
        return backward_in(g, out_code, <half_t*>NULL)
    if in_code == 1:
        return backward_in(g, out_code, <float*>NULL)
    return backward_in(g, out_code, <double*>NULL)


cdef int run_backward(cnp.ndarray dy, cnp.ndarray x, dx, cnp.ndarray gamma, cnp.ndarray mean,
                      cnp.ndarray rstd, cnp.ndarray dgamma, cnp.ndarray dbeta, tuple reduced,
                      int mode, int nthreads, bint fresh, int phase, sa, sb,
                      double n, where=None, sn=None) except -1:
    cdef Layout L
    cdef Route R
    cdef Grad g
    cdef int rc, in_code = type_code(x), out_code = in_code
    backward_setup(&L, &R, &g, dy, x, dx, gamma, mean, rstd, dgamma, dbeta, reduced, mode,
                   nthreads, fresh, phase, sa, sb, n, where, sn)
    if dx is not None:
        out_code = type_code(dx)
    start_call(&R, x, dx)
    if hands_over_gil(x):
        with nogil:
            rc = backward_typed(&g, in_code, out_code)
    else:
        rc = backward_typed(&g, in_code, out_code)
    if rc != 0:
        raise MemoryError("fastnorm: could not allocate scratch memory")
    return 0


def backward(cnp.ndarray dy, cnp.ndarray x, cnp.ndarray dx, cnp.ndarray gamma,
             cnp.ndarray mean, cnp.ndarray rstd, cnp.ndarray dgamma, cnp.ndarray dbeta,
             tuple reduced, int mode, int nthreads, bint fresh=False, sums=None,
             double n=0.0, where=None):
    """One backward call.  dy and x share a float dtype; dx has x's shape;
    gamma, dgamma, dbeta are C-contiguous float64 arrays of one keepdims shape
    (gamma all ones where the forward had none); mean and rstd C-contiguous
    float64 in keepdims layout (mean zeros for RMS).  fresh: dx was just
    allocated (its pages are not yet touched).  sums: (A, B), each slice's
    sums over all its values (backward_sums, added up over the parts of a
    slice) in the statistics' layout, and n its number of values: dx
    alone, from them (dgamma and dbeta come back zero).  where: as
    forward's, the values the gradient is over (dx written there alone);
    with sums, a third array, each slice's count of them, stands for n."""
    fn_clean_upper()
    if sums is None:
        run_backward(dy, x, dx, gamma, mean, rstd, dgamma, dbeta, reduced, mode, nthreads,
                     fresh, PHASE_BOTH, None, None, 0.0, where)
    else:
        run_backward(dy, x, dx, gamma, mean, rstd, dgamma, dbeta, reduced, mode, nthreads,
                     fresh, PHASE_DX, sums[0], sums[1], n, where,
                     sums[2] if where is not None else None)


def backward_sums(cnp.ndarray dy, cnp.ndarray x, cnp.ndarray gamma, cnp.ndarray mean,
                  cnp.ndarray rstd, cnp.ndarray sum_a, cnp.ndarray sum_b, cnp.ndarray dgamma,
                  cnp.ndarray dbeta, tuple reduced, int mode, int nthreads, where=None,
                  counts=None):
    """Pass 1 of a backward call alone: each slice's sums A = sum(dy gamma)
    and B = sum(dy gamma xhat) into sum_a and sum_b (C-contiguous float64 in
    the statistics' layout), and the parameter sums into dgamma and dbeta,
    over the values of x (a part of each slice, for the Dask path); with
    where, over those it selects, their number into counts (as sum_a)."""
    fn_clean_upper()
    run_backward(dy, x, None, gamma, mean, rstd, dgamma, dbeta, reduced, mode, nthreads,
                 False, PHASE_SUMS, sum_a, sum_b, 0.0, where, counts)


def explain_backward(cnp.ndarray dy, cnp.ndarray x, cnp.ndarray dx, cnp.ndarray gamma,
                     cnp.ndarray mean, cnp.ndarray rstd, cnp.ndarray dgamma,
                     cnp.ndarray dbeta, tuple reduced, int mode, int nthreads,
                     bint fresh=False, where=None):
    """The route backward() would take, as a dict; nothing is run."""
    fn_clean_upper()
    cdef Layout L
    cdef Route R
    cdef Grad g
    backward_setup(&L, &R, &g, dy, x, dx, gamma, mean, rstd, dgamma, dbeta, reduced, mode,
                   nthreads, fresh, PHASE_BOTH, None, None, 0.0, where)
    return route_dict(&R, &L)


def rstd(spread, double eps):
    """1 / sqrt(spread + eps) (coefs.pxd's rstds) of float64 variances or
    means of squares, as a new C-contiguous float64 array of their shape
    (a negative or NaN spread gives NaN, without a warning)."""
    fn_clean_upper()
    cdef cnp.ndarray out = np.array(spread, dtype=np.float64, order="C", copy=True)
    cdef double* v = <double*>cnp.PyArray_DATA(out)
    cdef Py_ssize_t n = cnp.PyArray_SIZE(out)
    with nogil:
        rstds(v, n, eps)
    return out


def means_of(mean, m2):
    """mean_var's means (coefs.pxd's stats_mean) of float64 moments merged
    outside the kernels, as a new C-contiguous float64 array: NaN where
    M2 is NaN."""
    fn_clean_upper()
    cdef cnp.ndarray out = np.array(mean, dtype=np.float64, order="C", copy=True)
    cdef cnp.ndarray q = np.ascontiguousarray(m2, dtype=np.float64)
    cdef double* mp = <double*>cnp.PyArray_DATA(out)
    cdef const double* qp = <const double*>cnp.PyArray_DATA(q)
    cdef Py_ssize_t i, size = cnp.PyArray_SIZE(out)
    if cnp.PyArray_SIZE(q) != size:
        raise ValueError("means_of: mean and m2 differ in size")
    for i in range(size):
        mp[i] = stats_mean(mp[i], qp[i])
    return out


def variance(m2, n, double ddof=0.0, bint overwrite=False):
    """mean_var's variances M2 / max(n - ddof, 0) (coefs.pxd's variances)
    of float64 M2, n one count for all or each slice's (an array of m2's
    size): a new C-contiguous float64 array, or m2 itself, divided in
    place, with overwrite (then m2 must be such an array).  No warning
    where n - ddof <= 0 (inf or NaN there)."""
    fn_clean_upper()
    cdef cnp.ndarray q, counts
    cdef double one
    cdef Py_ssize_t size
    if overwrite:
        if not (type(m2) is cnp.ndarray and m2.dtype == np.float64
                and cnp.PyArray_ISCARRAY(<cnp.ndarray>m2)):
            raise ValueError("variance: overwrite needs a C-contiguous float64 m2")
        q = <cnp.ndarray>m2
    else:
        q = np.array(m2, dtype=np.float64, order="C", copy=True)
    size = cnp.PyArray_SIZE(q)
    if np.ndim(n) == 0:
        one = n
        with nogil:
            variances(<double*>cnp.PyArray_DATA(q), &one, 0, ddof, size)
        return q
    counts = np.ascontiguousarray(n, dtype=np.float64)
    if cnp.PyArray_SIZE(counts) != size:
        raise ValueError("variance: n and m2 differ in size")
    with nogil:
        variances(<double*>cnp.PyArray_DATA(q), <const double*>cnp.PyArray_DATA(counts), 1,
                  ddof, size)
    return q


def merge_moments(cnp.ndarray n_a, cnp.ndarray mean_a, m2_a, cnp.ndarray n_b,
                  cnp.ndarray mean_b, m2_b):
    """Fold the moments of part b of some slices into those of part a, slice
    by slice, in place (chan; an empty part is skipped): counts, means and
    M2 as C-contiguous float64 arrays of one size (m2_a and m2_b both None
    for means alone, such as means of squares)."""
    fn_clean_upper()
    cdef Py_ssize_t i, size = cnp.PyArray_SIZE(n_a)
    cdef double* na
    cdef double* ma
    cdef double* qa = NULL
    cdef const double* nb
    cdef const double* mb
    cdef const double* qb = NULL
    cdef double unused = 0.0
    for a in (n_a, mean_a, n_b, mean_b) + ((m2_a, m2_b) if m2_a is not None else ()):
        if not (cnp.PyArray_TYPE(a) == cnp.NPY_DOUBLE and cnp.PyArray_ISCARRAY(a)
                and cnp.PyArray_SIZE(a) == size):
            raise ValueError("merge_moments takes C-contiguous float64 arrays of one size")
    na = <double*>cnp.PyArray_DATA(n_a)
    ma = <double*>cnp.PyArray_DATA(mean_a)
    nb = <const double*>cnp.PyArray_DATA(n_b)
    mb = <const double*>cnp.PyArray_DATA(mean_b)
    if m2_a is not None:
        qa = <double*>cnp.PyArray_DATA(<cnp.ndarray>m2_a)
        qb = <const double*>cnp.PyArray_DATA(<cnp.ndarray>m2_b)
    with nogil:
        for i in range(size):
            if nb[i] == 0.0:
                continue
            if na[i] == 0.0:
                ma[i] = mb[i]
                if qa != NULL:
                    qa[i] = qb[i]
            elif qa != NULL:
                chan(na[i], &ma[i], &qa[i], nb[i], mb[i], qb[i])
            else:
                chan(na[i], &ma[i], &unused, nb[i], mb[i], 0.0)
            na[i] = na[i] + nb[i]


cdef inline cnp.ndarray c_doubles(a):
    """a as a C-contiguous float64 array, itself when it is one (0-d stays
    0-d)."""
    if (type(a) is cnp.ndarray and cnp.PyArray_TYPE(<cnp.ndarray>a) == cnp.NPY_DOUBLE
            and cnp.PyArray_ISCARRAY(<cnp.ndarray>a)):
        return <cnp.ndarray>a
    return np.require(a, np.float64, "C")


def fold_moments(cnp.ndarray n_a, cnp.ndarray shift_a, cnp.ndarray mean_a, cnp.ndarray m2_a,
                 n_b, mean_b, m2_b, shift_b=None):
    """Moments' merge, in place: each slice's count, mean relative to its
    shift and M2 (a: C-contiguous float64 arrays of one size) take part b:
    counts n_b (one for all, or an array), means relative to shift_b or,
    without it, absolute, and M2 (chan; an empty part is skipped).  A slice
    with no count yet takes b's shift (an absolute mean: itself where
    finite, else 0); b's means move to a's shifts, one rounding each."""
    fn_clean_upper()
    cdef Py_ssize_t i, size = cnp.PyArray_SIZE(n_a)
    cdef cnp.ndarray counts = None, sb = None, mb_a = c_doubles(mean_b), qb_a = c_doubles(m2_b)
    cdef double one = 0.0, nb, rel, first
    cdef double* na
    cdef double* ha
    cdef double* ma
    cdef double* qa
    cdef const double* pn = NULL
    cdef const double* mb
    cdef const double* qb
    cdef const double* hb = NULL
    cdef cnp.ndarray a
    if isinstance(n_b, cnp.ndarray) and (<cnp.ndarray>n_b).ndim > 0:
        counts = c_doubles(n_b)
        pn = <const double*>cnp.PyArray_DATA(counts)
    else:
        one = n_b
    if shift_b is not None:
        sb = c_doubles(shift_b)
        hb = <const double*>cnp.PyArray_DATA(sb)
    for a in (n_a, shift_a, mean_a, m2_a, mb_a, qb_a, counts, sb):
        if a is not None and not (cnp.PyArray_TYPE(a) == cnp.NPY_DOUBLE
                                  and cnp.PyArray_ISCARRAY(a) and cnp.PyArray_SIZE(a) == size):
            raise ValueError("fold_moments takes C-contiguous float64 arrays of one size")
    na = <double*>cnp.PyArray_DATA(n_a)
    ha = <double*>cnp.PyArray_DATA(shift_a)
    ma = <double*>cnp.PyArray_DATA(mean_a)
    qa = <double*>cnp.PyArray_DATA(m2_a)
    mb = <const double*>cnp.PyArray_DATA(mb_a)
    qb = <const double*>cnp.PyArray_DATA(qb_a)
    with nogil:
        for i in range(size):
            nb = pn[i] if pn != NULL else one
            if nb == 0.0:
                continue
            if na[i] == 0.0:
                if hb != NULL:
                    ha[i] = hb[i]
                    ma[i] = mb[i]
                else:
                    first = mb[i]
                    ha[i] = first if first - first == 0.0 else 0.0
                    ma[i] = first - ha[i]
                qa[i] = qb[i]
            else:
                rel = ((hb[i] if hb != NULL else 0.0) - ha[i]) + mb[i]
                chan(na[i], &ma[i], &qa[i], nb, rel, qb[i])
            na[i] = na[i] + nb


def layout_pattern(cnp.ndarray x, tuple reduced):
    """'columns' or 'slices': the innermost axis kept or reduced."""
    cdef Layout L
    make_layout(&L, x, (None, None, None, None, None, None), reduced)
    return "columns" if L.columns else "slices"



def cpu_features():
    """Instruction-set levels this CPU (and OS) supports."""
    return {"x86-64-v3": bool(fn_cpu_has_x86_64_v3()),
            "x86-64-v4": bool(fn_cpu_has_x86_64_v4())}


def build_info():
    return {
        "variant": FN_VARIANT_NAME.decode(),
        "compiler": FN_COMPILER.decode(),
        "openmp": bool(FN_OPENMP),
        "vector_bits": FN_W * 64,
        "welford_lanes": FN_W * FN_NV,
    }


def max_threads():
    """OpenMP's current default team size (honours OMP_NUM_THREADS and
    threadpoolctl's limits)."""
    return omp_get_max_threads()

