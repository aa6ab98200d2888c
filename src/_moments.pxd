# The statistics core: Welford updates within a block, Chan et al.'s merge
# across blocks, lanes and threads.
#
# Every statistic is taken of `x - pivot`, where the pivot is one value of
# the slice (its first finite element).  Shifting by a value of the data makes
# the mean of the shifted values about one standard deviation in size, so
# neither the accumulation nor the final `x - mean` loses the digits that a
# large common offset (1e6 + noise in float32) would otherwise take.
#
# A contiguous run is split over FN_NV * FN_W lanes, each lane a Welford
# accumulator over every (FN_NV*FN_W)-th element; the lanes share one
# reciprocal count per step, so the update is two subtractions and two FMAs
# per vector and no division.  Lanes are then merged with Chan's formula.

from _simd cimport *

cdef struct Moments:
    double n       # number of values
    double mean    # mean of (x - pivot)
    double m2      # sum of squared deviations from the mean


cdef inline Moments moments_empty() noexcept nogil:
    cdef Moments m
    m.n = 0.0
    m.mean = 0.0
    m.m2 = 0.0
    return m


cdef inline void moments_merge(Moments* a, const Moments* b) noexcept nogil:
    """Fold b into a (Chan, Golub & LeVeque's pairwise update)."""
    cdef double n, d, f
    if b.n == 0.0:
        return
    if a.n == 0.0:
        a[0] = b[0]
        return
    n = a.n + b.n
    d = b.mean - a.mean
    f = b.n / n
    a.mean = a.mean + d * f
    a.m2 = a.m2 + b.m2 + d * d * a.n * f
    a.n = n


cdef inline void welford_step(fn_vd y, fn_vd r, fn_vd* mean, fn_vd* m2) noexcept nogil:
    """One Welford update of every lane of (mean, m2) by y; r = 1 / count."""
    cdef fn_vd d = fn_sub(y, mean[0])
    mean[0] = fn_fma(d, r, mean[0])
    m2[0] = fn_fma(d, fn_sub(y, mean[0]), m2[0])


cdef inline Moments lanes_to_moments(const fn_vd* mean, const fn_vd* m2, int nvec,
                                     double steps) noexcept nogil:
    """Merge nvec * FN_W lanes that each saw `steps` values (equal counts, so
    Chan's formula reduces to mean of means plus the spread of the means)."""
    cdef Moments out
    cdef fn_vd acc = mean[0], q = m2[0], dev = fn_zero(), d, mu
    cdef int v
    for v in range(1, nvec):
        acc = fn_add(acc, mean[v])
        q = fn_add(q, m2[v])
    out.n = steps * nvec * FN_W
    out.mean = fn_hsum(acc) / (nvec * FN_W)
    mu = fn_set1(out.mean)
    for v in range(nvec):
        d = fn_sub(mean[v], mu)
        dev = fn_fma(d, d, dev)
    out.m2 = fn_hsum(q) + steps * fn_hsum(dev)
    return out


cdef inline Moments run_moments(const char* x, Py_ssize_t stride, Py_ssize_t n,
                                double pivot, in_t* kind) noexcept nogil:
    """Moments of n values of x - pivot, `stride` bytes apart.

    Three stages, each merged into the result with Chan's formula: FN_NV
    vectors of lanes for the bulk, one vector for what is left, scalar
    Welford for the last < FN_W values.
    """
    cdef Moments acc = moments_empty(), part
    cdef fn_vd mean[FN_NV]
    cdef fn_vd m2[FN_NV]
    cdef fn_vd piv = fn_set1(pivot), r
    cdef Py_ssize_t lanes = FN_NV * FN_W
    cdef Py_ssize_t steps = n // lanes, j, i = 0
    cdef int v
    cdef double y, d
    if steps > 0:
        for v in range(FN_NV):
            mean[v] = fn_zero()
            m2[v] = fn_zero()
        for j in range(steps):
            r = fn_set1(1.0 / <double>(j + 1))
            for v in range(FN_NV):
                welford_step(fn_sub(vload(x + (i + v * FN_W) * stride, stride, kind), piv),
                             r, &mean[v], &m2[v])
            i = i + lanes
        acc = lanes_to_moments(mean, m2, FN_NV, <double>steps)
    steps = (n - i) // FN_W
    if steps > 0:
        mean[0] = fn_zero()
        m2[0] = fn_zero()
        for j in range(steps):
            welford_step(fn_sub(vload(x + i * stride, stride, kind), piv),
                         fn_set1(1.0 / <double>(j + 1)), &mean[0], &m2[0])
            i = i + FN_W
        part = lanes_to_moments(mean, m2, 1, <double>steps)
        moments_merge(&acc, &part)
    if i < n:
        part = moments_empty()
        while i < n:
            y = sload(x + i * stride, kind) - pivot
            part.n = part.n + 1.0
            d = y - part.mean
            part.mean = part.mean + d / part.n
            part.m2 = part.m2 + d * (y - part.mean)
            i = i + 1
        moments_merge(&acc, &part)
    return acc


cdef inline double pick_pivot(double first) noexcept nogil:
    """The slice's first value, unless it is inf/nan (then 0, so that a
    non-finite value propagates as arithmetic says instead of poisoning
    every shifted value)."""
    if first - first == 0.0:
        return first
    return 0.0
