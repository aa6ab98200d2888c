# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# Statistics into coefficients: the one place that turns a slice's moments
# (or the statistics a caller gives) into what the output pass applies.
#
# A slice is normalized as y = (x - mean) * scale * g + b.  Its mean is kept
# in two parts, pivot + shift (the pivot one of its values: see moments.pxd),
# until the output pass needs it in its compute type (apply.h):
#     m  = the mean rounded to the compute type,
#     k2 = scale, times the gain where the gain is folded in,
#     k0 = -(rest of that rounding) * k2, plus the folded bias,
# so that x - m is exact near the mean whatever its size (Sterbenz) and
# out = (x - m) * k2 + k0.  A gradient's dx alike (dy * k1 + ...), from the
# slice's sums.  float32 coefficients are refused (false) where float32
# cannot hold them with room to spare; the double pass takes the slice then.

from libc.math cimport sqrt, fabs, NAN, INFINITY

from simd cimport *
from moments cimport Moments
from plan cimport *

# The room a coefficient keeps in its compute type: below TOP, a product
# with data cannot overflow; above TINY (or zero), a scale does not flush.
cdef extern from *:
    """
    #define FN_F32_TOP 1e30
    #define FN_F32_TINY 1e-30
    #define FN_F64_TOP 1e300
    #define FN_F64_TINY 1e-300
    """
    const double FN_F32_TOP
    const double FN_F32_TINY
    const double FN_F64_TOP
    const double FN_F64_TINY


cdef struct Coef:
    # How one slice (or column) is normalized: y = (x - (pivot + shift)) * scale
    double pivot
    double shift
    double scale


ctypedef fused ct:
    # The compute types of the output pass.
    float
    double


cdef inline double rstd_of(double var, double mean, int mode, double eps) noexcept nogil:
    """The scale of a slice with this variance and mean: 1 / sqrt(var + eps),
    or for MODE_RMS 1 / sqrt(mean(x**2) + eps) (mean(x**2) = var + mean**2,
    a sum of non-negatives)."""
    if mode == MODE_CENTER:
        return 1.0 / sqrt(var + eps)
    if mode == MODE_RMS:
        return 1.0 / sqrt((var + mean * mean) + eps)
    return 1.0


cdef inline fn_vd rstd_lanes(fn_vd spread, double eps) noexcept nogil:
    """rstd_of's 1 / sqrt(spread + eps) of a vector of variances (or means
    of squares), lane by lane."""
    return fn_div(fn_set1(1.0), fn_sqrt(fn_add(spread, fn_set1(eps))))


cdef inline void rstds(double* v, Py_ssize_t n, double eps) noexcept nogil:
    """rstd_of's 1 / sqrt(v + eps) of n variances (or means of squares) in
    place, a vector at a time: running variances in eval, and the Dask
    path's merged statistics (the same correctly rounded operations as
    NumPy's and rstd_of's, lane by lane)."""
    cdef Py_ssize_t i = 0
    while i + FN_W <= n:
        fn_store_f64(v + i, rstd_lanes(fn_load_f64(v + i), eps))
        i = i + FN_W
    while i < n:
        v[i] = rstd_of(v[i], 0.0, MODE_CENTER, eps)
        i = i + 1


cdef inline double stats_mean(double mean, double m2) noexcept nogil:
    """The mean a slice's statistics give, with this M2 (or variance): NaN
    where M2 is NaN (an inf that is a slice's last update leaves its mean
    inf; the variance is NaN either way, and so is the mean then: where the
    inf falls must not matter)."""
    return NAN if m2 != m2 else mean


cdef inline void variances(double* q, const double* n, Py_ssize_t n_step, double ddof,
                           Py_ssize_t count) noexcept nogil:
    """mean_var's variance M2 / max(n - ddof, 0) of count slices' M2 in
    place, n[i * n_step] the count of slice i (n_step 0: one count for all,
    a vector at a time); the same correctly rounded division as NumPy's.  A
    slice without degrees of freedom gets inf or NaN."""
    cdef Py_ssize_t i = 0
    cdef fn_vd d
    if n_step == 0:
        d = fn_set1(max(n[0] - ddof, 0.0))
        while i + FN_W <= count:
            fn_store_f64(q + i, fn_div(fn_load_f64(q + i), d))
            i = i + FN_W
    while i < count:
        q[i] = q[i] / max(n[i * n_step] - ddof, 0.0)
        i = i + 1


cdef inline Coef record(Moments m, double pivot, int mode, const Layout* L, Py_ssize_t off,
                        double scale) noexcept nogil:
    """Write a slice's statistics to the stat arrays at byte offset off
    (unless the caller wants none: no arrays) and return the coefficients
    that normalize it; scale is rstd_of's."""
    return record_var(m, pivot, mode, L, off, scale, m.m2 / m.n)


cdef inline Coef record_var(Moments m, double pivot, int mode, const Layout* L,
                            Py_ssize_t off, double scale, double var) noexcept nogil:
    """record, with the variance m.m2 / m.n the caller took (in a vector of
    columns: the same division, lane by lane)."""
    cdef Coef c
    cdef double mean = pivot + m.mean
    c.pivot = pivot
    c.shift = m.mean
    c.scale = scale
    if L.stat[0] == NULL:
        if mode == MODE_RMS:
            c.pivot = 0.0
            c.shift = 0.0
        return c
    if mode == MODE_STATS:
        (<double*>(L.stat[0] + off))[0] = stats_mean(mean, m.m2)
        (<double*>(L.stat[1] + off))[0] = m.m2
    elif mode == MODE_CENTER:
        (<double*>(L.stat[0] + off))[0] = stats_mean(mean, var)
        (<double*>(L.stat[1] + off))[0] = scale
        if L.stat[2] != NULL:
            (<double*>(L.stat[2] + off))[0] = var
    else:  # MODE_RMS: no centring
        c.pivot = 0.0
        c.shift = 0.0
        (<double*>(L.stat[0] + off))[0] = var + mean * mean
        (<double*>(L.stat[1] + off))[0] = scale
    return c


cdef inline bint lanes_record_center(fn_vd mean, fn_vd var, fn_vd scale, const Layout* L,
                                     Py_ssize_t off, Py_ssize_t step) noexcept nogil:
    """record_var's statistics (MODE_CENTER) of FN_W slices at once (mean
    pivot + shift, variance and scale in their lanes), written step bytes
    apart from off; false (nothing written) unless they follow each other
    and every variance is finite, where record_var takes the slices one by
    one."""
    if L.stat[0] == NULL:
        return True
    if step != sizeof(double) or not fn_all_between(var, -INFINITY, INFINITY):
        return False
    fn_store_f64(<double*>(L.stat[0] + off), mean)
    fn_store_f64(<double*>(L.stat[1] + off), scale)
    if L.stat[2] != NULL:
        fn_store_f64(<double*>(L.stat[2] + off), var)
    return True


cdef inline bint lanes_record_stats(fn_vd mean, fn_vd m2, const Layout* L, Py_ssize_t off,
                                    Py_ssize_t step) noexcept nogil:
    """record_var's statistics (MODE_STATS) of FN_W slices at once, mean
    (pivot + shift) and M2 in their lanes, written step bytes apart from
    off; false (nothing written) unless they follow each other and every
    M2 is finite, where record_var takes the slices one by one."""
    if L.stat[0] == NULL:
        return True
    if step != sizeof(double) or not fn_all_between(m2, -INFINITY, INFINITY):
        return False
    fn_store_f64(<double*>(L.stat[0] + off), mean)
    fn_store_f64(<double*>(L.stat[1] + off), m2)
    return True


cdef inline void lanes_record_rms(fn_vd ms, fn_vd scale, const Layout* L, Py_ssize_t off,
                                  Py_ssize_t step) noexcept nogil:
    """record_var's statistics (MODE_RMS) of FN_W slices at once: each
    one's mean of squares and scale, written step bytes apart from off."""
    cdef double a[8]
    cdef double b[8]
    cdef int l
    if L.stat[0] == NULL:
        return
    if step == sizeof(double):
        fn_store_f64(<double*>(L.stat[0] + off), ms)
        fn_store_f64(<double*>(L.stat[1] + off), scale)
        return
    fn_store_f64(a, ms)
    fn_store_f64(b, scale)
    for l in range(FN_W):
        (<double*>(L.stat[0] + off + l * step))[0] = a[l]
        (<double*>(L.stat[1] + off + l * step))[0] = b[l]


cdef inline Coef finish(Moments m, double pivot, int mode, double eps,
                        const Layout* L, Py_ssize_t off) noexcept nogil:
    """Turn a slice's moments into its statistics (written to the stat
    arrays at byte offset off, with where= its count of selected values)
    and the coefficients that normalize it.  A slice with nothing selected
    is an empty reduction: NaN statistics."""
    if L.stat[3] != NULL:
        (<double*>(L.stat[3] + off))[0] = m.n
    if m.n == 0.0:
        m.mean = NAN
        m.m2 = NAN
    return record(m, pivot, mode, L, off, rstd_of(m.m2 / m.n, pivot + m.mean, mode, eps))


cdef inline Coef given(const Layout* L, Py_ssize_t off) noexcept nogil:
    """A slice normalized with statistics the caller gives (mean, rstd); with
    where=, none of its values is counted (the statistics are not its own)."""
    cdef Coef c
    if L.stat[3] != NULL:
        (<double*>(L.stat[3] + off))[0] = 0.0
    c.pivot = 0.0
    c.shift = (<const double*>(L.stat[0] + off))[0]
    c.scale = (<const double*>(L.stat[1] + off))[0]
    return c


cdef inline Coef record_lane(double n, double pivot, double mean, double m2, double scale,
                             int mode, double eps, const Layout* L,
                             Py_ssize_t off) noexcept nogil:
    """record for moments whose scale was taken in a vector of FN_W slices
    (finite moments: m2 >= 0 by construction, rounding aside)."""
    cdef Moments m
    m.n = n
    m.mean = mean
    m.m2 = max(m2, 0.0)     # q >= e^2 / n exactly; rounding must not make it negative
    return record(m, pivot, mode, L, off,
                  scale if m.m2 == m2 else rstd_of(0.0, pivot + mean, mode, eps))


cdef inline void affine_d(Coef c, double g, double b, double* m, double* k2,
                          double* k0) noexcept nogil:
    """The double output pass's coefficients of a slice, gain g and bias b
    folded in (1 and 0 when the pass applies them itself)."""
    cdef double t, rest
    m[0] = c.pivot + c.shift
    t = m[0] - c.pivot                    # TwoSum: pivot + shift = m + rest
    rest = (c.pivot - (m[0] - t)) + (c.shift - t)
    k2[0] = c.scale * g
    k0[0] = b - rest * k2[0]


cdef inline bint affine_f(Coef c, double g, double b, float* m, float* k2,
                          float* k0) noexcept nogil:
    """The float output pass's coefficients of a slice (gain and bias as in
    affine_d); false where float32 cannot hold them with room to spare."""
    cdef double mean = c.pivot + c.shift, sc, e
    m[0] = <float>mean
    if not (fabs(mean) < FN_F32_TOP and FN_F32_TINY < c.scale < FN_F32_TOP):
        return False
    sc = c.scale * g
    e = (mean - <double>m[0]) * sc - b
    if not (fabs(sc) < FN_F32_TOP and fabs(e) < FN_F32_TOP):   # a zero gain is fine
        return False
    k2[0] = <float>sc
    k0[0] = -<float>e
    return True


cdef inline bint lanes_plain(const double* mean, const double* m2) noexcept nogil:
    """Whether FN_W slices' moments are finite and their m2 not negative:
    what record takes as it is (others are clamped or redone)."""
    cdef int l
    for l in range(FN_W):
        if not (m2[l] >= 0.0 and m2[l] - m2[l] == 0.0 and mean[l] - mean[l] == 0.0):
            return False
    return True


cdef inline bint lanes_affine_d(const double* piv, const double* mean, const double* m2,
                                const double* scale, int mode, double* m, double* k2,
                                double* k0) noexcept nogil:
    """affine_d (gain 1, bias 0) of FN_W slices at once, the bits each gets
    alone, where lanes_plain holds; false (nothing written) otherwise."""
    cdef fn_vd p, h, mv, t, rest, sc = fn_load_f64(scale)
    if not lanes_plain(mean, m2):
        return False
    if mode == MODE_RMS:
        p = fn_zero()            # rms_norm does not centre
        h = fn_zero()
    else:
        p = fn_load_f64(piv)
        h = fn_load_f64(mean)
    mv = fn_add(p, h)
    t = fn_sub(mv, p)
    rest = fn_add(fn_sub(p, fn_sub(mv, t)), fn_sub(h, t))
    fn_store_f64(m, mv)
    fn_store_f64(k2, sc)
    fn_store_f64(k0, fn_sub(fn_zero(), fn_mul(rest, sc)))
    return True


cdef inline bint lanes_affine_gf(fn_vd mean, fn_vd scale, fn_vd g, fn_vd b, float* m,
                                 float* k2, float* k0) noexcept nogil:
    """affine_f of FN_W slices at once (the mean, pivot + shift, the scale,
    gain and bias of each in its lane), the bits each gets alone; false
    (nothing usable) where one of them cannot have float32 coefficients."""
    cdef fn_vd sc = fn_mul(scale, g), e
    fn_store_f32(m, mean)
    # affine_f's (mean - m) * sc - b, one rounding where FMA is (there the
    # compiler contracts affine_f's too)
    e = fn_fma(fn_sub(mean, fn_load_f32(m)), sc, fn_mul(b, fn_set1(-1.0)))
    if not (fn_all_between(mean, -FN_F32_TOP, FN_F32_TOP)
            and fn_all_between(scale, FN_F32_TINY, FN_F32_TOP)
            and fn_all_between(sc, -FN_F32_TOP, FN_F32_TOP)
            and fn_all_between(e, -FN_F32_TOP, FN_F32_TOP)):
        return False
    fn_store_f32(k2, sc)
    fn_store_f32(k0, fn_mul(e, fn_set1(-1.0)))
    return True


cdef inline bint lanes_affine_f(const double* piv, const double* mean, const double* m2,
                                const double* scale, int mode, float* m, float* k2,
                                float* k0) noexcept nogil:
    """affine_f (gain 1, bias 0) of FN_W slices at once, where lanes_plain
    holds and float32 holds every slice's (lanes_affine_gf); false (nothing
    usable) otherwise."""
    if not lanes_plain(mean, m2):
        return False
    return lanes_affine_gf(fn_zero() if mode == MODE_RMS      # rms_norm does not centre
                           else fn_add(fn_load_f64(piv), fn_load_f64(mean)),
                           fn_load_f64(scale), fn_set1(1.0), fn_zero(), m, k2, k0)


# ---------------------------------------------------------------------------
# Gradients: per slice, with xhat = (x - mean) * r and gd = dy * gamma,
# dx = r * (gd - a - xhat * b), a = A / n and b = B / n of the slice's sums.
# Folded: dx = dy * k1 + (x - m) * k2 + k0 with k1 = gamma r, k2 = -r^2 b,
# k0 = (mean - m) r^2 b - r a (m the mean rounded to the compute type).

cdef inline void grad_ab(int mode, double inv_n, double A, double B, double* a,
                         double* b) noexcept nogil:
    """The a, b of a slice from its sums A, B."""
    a[0] = 0.0
    b[0] = 0.0
    if mode == GRAD_CENTER:
        a[0] = A * inv_n
        b[0] = B * inv_n
    elif mode == GRAD_RMS:
        b[0] = B * inv_n


cdef inline bint holds(double v, ct* kind) noexcept nogil:
    """Whether ct holds v with room to spare: no overflow in a product with
    data, no flush to zero."""
    if ct is float:
        return fabs(v) < FN_F32_TOP and (v == 0.0 or fabs(v) > FN_F32_TINY)
    return fabs(v) < FN_F64_TOP and (v == 0.0 or fabs(v) > FN_F64_TINY)


cdef inline bint grad_affine(double mean, double r, double gr, double a, double b,
                             ct* k) noexcept nogil:
    """k = (m, k1, k2, k0) of the folded dx for a slice of this mean and rstd,
    gr = gamma * r and a, b; false where ct cannot hold them with room to
    spare (NaN and inf included: the unfolded pass takes the slice then)."""
    cdef ct mc = <ct>mean
    cdef double rrb = r * r * b
    cdef double k0 = (mean - <double>mc) * rrb - r * a
    cdef double top = FN_F32_TOP if ct is float else FN_F64_TOP
    if not (fabs(mean) < top and holds(r, k) and holds(gr, k) and holds(rrb, k)
            and fabs(k0) < top):
        return False
    k[0] = mc
    k[1] = <ct>gr
    k[2] = <ct>(-rrb)
    k[3] = <ct>k0
    return True
