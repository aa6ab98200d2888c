# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# The statistics core: Welford updates within a block, Chan et al.'s merge
# across blocks, lanes and threads.  Everything accumulates in float64.
#
# float64 data is shifted by a pivot, one value of its slice (the first
# finite one): the mean of the shifted values is then about one standard
# deviation in size, so neither the accumulation nor the final `x - mean`
# loses the digits that a large common offset (1e12 + noise) would take.
# float16/float32 data needs no pivot: float64 carries 29 more bits than the
# data has, more than any offset a float32 can hold costs (the pivot is 0).
#
# A contiguous run is split over FN_NV * FN_W lanes, each lane a Welford
# accumulator over every (FN_NV*FN_W)-th element; the lanes share one
# reciprocal count per step, so the update is two subtractions and two FMAs
# per vector and no division.  Lanes are then merged with Chan's formula.
#
# float16/float32 blocks take shifted sums instead, which cost a subtraction,
# an addition and an FMA per vector: with c the block's first value, S1 =
# sum(x - c), S2 = sum((x - c)**2), and m2 = S2 - S1**2 / n.  That difference
# cancels at most log2(n + 1) bits: (c - mean)**2 <= m2, c being one of the
# values, so S2 = m2 + n (c - mean)**2 <= (n + 1) m2.  A block of 4096
# values keeps 40 of float64's 53 bits, where float32 results need 24 (an
# offset of 1e6 or 1e30 changes nothing: c carries it).  float32 data cannot
# overflow the sums, and a sum waits for one addition where a Welford
# update waits for four dependent operations.

from simd cimport *
from libc.stdint cimport uint64_t
from libc.string cimport memcpy
from plan cimport (AHEAD_ROWS, FN_NV, FN_NVC, MASK_PIECE, MASK_PIECE_F64, MASK_RUN_MIN,
                   NUMBERS_PIECE, ROW_ACCS, SIDE_ROW_VECTORS, STATS_AHEAD)
from fetch cimport Ahead, ahead_lines, ahead_piece, ahead_steps, fetch_lines

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


cdef inline void chan(double na, double* mean, double* m2, double nb, double mean_b,
                      double m2_b) noexcept nogil:
    """Chan, Golub & LeVeque's pairwise update: the moments of na values
    (mean, m2) and of nb more (mean_b, m2_b) as the moments of all, into
    mean and m2.  The only merge of moments in fastnorm: blocks, lanes of
    unequal counts, threads, row blocks of columns, Dask chunks."""
    cdef double d = mean_b - mean[0], f = nb / (na + nb)
    mean[0] = mean[0] + d * f
    m2[0] = m2[0] + m2_b + d * d * na * f


cdef inline void moments_merge(Moments* a, const Moments* b) noexcept nogil:
    """Fold b into a (chan); an empty part is skipped (its mean is undefined)."""
    if b.n == 0.0:
        return
    if a.n == 0.0:
        a[0] = b[0]
        return
    chan(a.n, &a.mean, &a.m2, b.n, b.mean, b.m2)
    a.n = a.n + b.n


cdef inline Moments merge_equal(const double* mean, const double* m2, Py_ssize_t k,
                                double n) noexcept nogil:
    """k parts of n values each (mean[i], m2[i]) as one: the mean of the
    means, and the parts' M2 plus the spread of their means (chan's formula
    with equal weights, the parts side by side)."""
    cdef Moments out
    cdef double s = 0.0, q = 0.0, dev = 0.0, d
    cdef Py_ssize_t i
    for i in range(k):
        s = s + mean[i]
        q = q + m2[i]
    out.n = n * <double>k
    out.mean = s / <double>k
    for i in range(k):
        d = mean[i] - out.mean
        dev = dev + d * d
    out.m2 = q + n * dev
    return out


cdef inline void welford_step(fn_vd y, fn_vd r, fn_vd* mean, fn_vd* m2) noexcept nogil:
    """One Welford update of a vector of accumulators; r = 1 / (values so
    far, this one included)."""
    cdef fn_vd d = fn_sub(y, mean[0])
    mean[0] = fn_fma(d, r, mean[0])
    m2[0] = fn_fma(d, fn_sub(y, mean[0]), m2[0])


cdef inline fn_vd shifted(fn_vd v, fn_vd pivot, in_t* kind) noexcept nogil:
    """v - pivot for float64 data; float16/float32 data is not shifted."""
    if in_t is double:
        return fn_sub(v, pivot)
    return v


# A run's bulk sums, FN_NV * FN_W lanes, between the steps that add to
# them (lanes_steps): float64 Welford lanes (means, M2), float16/float32
# shifted sums (S1, S2), or for rms_norm sums of squares (in a).
cdef struct Lanes:
    fn_vd a[FN_NV]
    fn_vd b[FN_NV]
    double shift           # float16/float32: the run's first value
    Py_ssize_t fetching    # the steps that fetch STATS_AHEAD bytes on


cdef inline void lanes_begin(Lanes* t, const char* x, Py_ssize_t stride, Py_ssize_t n,
                             const char* ahead_end, in_t* kind) noexcept nogil:
    """Empty sums for the run of n values at x; contiguous x fetches ahead
    up to ahead_end (see ahead_steps)."""
    cdef Py_ssize_t lanes = FN_NV * FN_W
    cdef int v
    for v in range(FN_NV):
        t.a[v] = fn_zero()
        t.b[v] = fn_zero()
    t.shift = 0.0 if in_t is double else sload(x, kind)
    t.fetching = ahead_steps(x, stride, n // lanes, lanes * sizeof(in_t), ahead_end, kind)


cdef inline void lanes_steps(Lanes* t, const char* x, Py_ssize_t stride, Py_ssize_t j0,
                             Py_ssize_t j1, double pivot, bint squares,
                             in_t* kind) noexcept nogil:
    """Steps j0 .. j1 of the run at x (FN_NV * FN_W values a step) into t:
    float64 Welford updates of x - pivot; float16/float32 shifted sums (see
    the top of this file); with `squares`, sums of x**2.  A run summed in
    several calls gets the bits of one call: the same operations in the
    same order.

    The sums are copied into locals for the loop, so that they stay in
    registers (through t they would be stored at every step)."""
    cdef fn_vd mean[FN_NV]
    cdef fn_vd m2[FN_NV]
    cdef fn_vd piv = fn_set1(pivot), r, d
    cdef Py_ssize_t j, lanes = FN_NV * FN_W, step_bytes = lanes * sizeof(in_t)
    cdef Py_ssize_t fetching = t.fetching
    cdef int v
    for v in range(FN_NV):
        mean[v] = t.a[v]
        m2[v] = t.b[v]
    if squares:
        for j in range(j0, j1):
            if j < fetching:
                fetch_lines(x + j * step_bytes + STATS_AHEAD, step_bytes)
            for v in range(FN_NV):
                d = vload(x + (j * lanes + v * FN_W) * stride, stride, kind)
                mean[v] = fn_fma(d, d, mean[v])
    elif in_t is not double:
        # Shifted sums: mean[v] holds the lanes' S1, m2[v] their S2.
        r = fn_set1(t.shift)
        for j in range(j0, j1):
            if j < fetching:
                fetch_lines(x + j * step_bytes + STATS_AHEAD, step_bytes)
            for v in range(FN_NV):
                d = fn_sub(vload(x + (j * lanes + v * FN_W) * stride, stride, kind), r)
                mean[v] = fn_add(mean[v], d)
                m2[v] = fn_fma(d, d, m2[v])
    else:
        for j in range(j0, j1):
            if j < fetching:
                fetch_lines(x + j * step_bytes + STATS_AHEAD, step_bytes)
            r = fn_set1(1.0 / <double>(j + 1))
            for v in range(FN_NV):
                welford_step(shifted(vload(x + (j * lanes + v * FN_W) * stride, stride, kind),
                                     piv, kind), r, &mean[v], &m2[v])
    for v in range(FN_NV):
        t.a[v] = mean[v]
        t.b[v] = m2[v]


cdef inline Moments lanes_merge(const Lanes* t, Py_ssize_t steps, in_t* kind) noexcept nogil:
    """The moments of steps * FN_NV * FN_W values from their lanes' sums
    (float64 Welford lanes, float16/float32 shifted sums)."""
    cdef fn_vd acc = t.a[0], q = t.b[0], d, dev
    cdef Py_ssize_t lanes = FN_NV * FN_W
    cdef int v
    cdef Moments out
    cdef double s1
    for v in range(1, FN_NV):
        acc = fn_add(acc, t.a[v])
        q = fn_add(q, t.b[v])
    out.n = <double>(steps * lanes)
    if in_t is not double:
        s1 = fn_hsum(acc)
        out.mean = t.shift + s1 / out.n      # the pivot of float16/float32 is 0
        out.m2 = fn_hsum(q) - s1 * (s1 / out.n)
        if out.m2 < 0.0:         # rounding of a (near) constant block; NaN stays
            out.m2 = 0.0
        return out
    # Merge lanes of equal count: the mean of the means, and the lanes' M2
    # plus the spread of their means (Chan's formula with equal weights).
    out.mean = fn_hsum(acc) / lanes
    dev = fn_zero()
    for v in range(FN_NV):
        d = fn_sub(t.a[v], fn_set1(out.mean))
        dev = fn_fma(d, d, dev)
    out.m2 = fn_hsum(q) + <double>steps * fn_hsum(dev)
    return out


cdef inline Moments lanes_one(const char* x, Py_ssize_t stride, Py_ssize_t steps,
                              double pivot, in_t* kind) noexcept nogil:
    """The same with one vector of FN_W lanes (for what the bulk leaves)."""
    cdef fn_vd mean = fn_zero(), m2 = fn_zero(), piv = fn_set1(pivot), d
    cdef Py_ssize_t j
    cdef Moments out
    for j in range(steps):
        welford_step(shifted(vload(x + j * FN_W * stride, stride, kind), piv, kind),
                     fn_set1(1.0 / <double>(j + 1)), &mean, &m2)
    out.n = <double>(steps * FN_W)
    out.mean = fn_hsum(mean) / FN_W
    d = fn_sub(mean, fn_set1(out.mean))
    out.m2 = fn_hsum(m2) + <double>steps * fn_hsum(fn_mul(d, d))
    return out


cdef inline Moments scalar_moments(const char* x, Py_ssize_t stride, Py_ssize_t n,
                                   double pivot, in_t* kind) noexcept nogil:
    """Moments of n values of x - pivot, one Welford update per value."""
    cdef Moments out = moments_empty()
    cdef Py_ssize_t i
    cdef double y, d
    for i in range(n):
        y = sload(x + i * stride, kind) - pivot
        out.n = out.n + 1.0
        d = y - out.mean
        out.mean = out.mean + d / out.n
        out.m2 = out.m2 + d * (y - out.mean)
    return out


cdef inline Moments nonfinite_moments(const char* x, Py_ssize_t stride, Py_ssize_t n,
                                      double pivot, in_t* kind) noexcept nogil:
    """scalar_moments of a run whose fast sums are not finite (inf, NaN,
    sums beyond float64).  A run whose first value that is not finite is a
    NaN gets that NaN, found without the updates: Welford's mean and M2
    take the first NaN they meet and keep it."""
    cdef Py_ssize_t i
    cdef double v
    cdef Moments out
    for i in range(n):
        v = sload(x + i * stride, kind)
        if v - v != 0.0:
            if v != v:
                out.n = <double>n
                out.mean = v
                out.m2 = v
                return out
            break
    return scalar_moments(x, stride, n, pivot, kind)


cdef inline Moments run_end(const Lanes* t, const char* x, Py_ssize_t stride, Py_ssize_t n,
                            double pivot, bint squares, in_t* kind) noexcept nogil:
    """The moments of the run of n values at x whose bulk steps are in t:
    the bulk, then one vector of lanes for what is left, then scalar
    Welford for the last < FN_W values, each merged with Chan's formula.
    With `squares` (rms_norm), moments about 0: (n, 0, sum(x**2)), which is
    what finish needs (mean(x**2) = m2 / n, the pivot 0) and what Chan's
    merge keeps (it preserves m2 + n * mean**2)."""
    cdef Moments acc = moments_empty(), part
    cdef Py_ssize_t lanes = FN_NV * FN_W, i, steps = n // lanes
    cdef fn_vd v, q
    cdef double tail = 0.0, y
    cdef int k
    if squares:
        q = t.a[0]
        i = steps * lanes
        while i + FN_W <= n:
            v = vload(x + i * stride, stride, kind)
            q = fn_fma(v, v, q)
            i = i + FN_W
        while i < n:
            y = sload(x + i * stride, kind)
            tail = tail + y * y
            i = i + 1
        for k in range(1, FN_NV):
            q = fn_add(q, t.a[k])
        acc.n = <double>n
        acc.mean = 0.0
        acc.m2 = fn_hsum(q) + tail
        if acc.m2 - acc.m2 != 0.0:
            # inf or NaN among the values (or squares beyond float64):
            # Welford's way, so that non-finite data gives what it gives
            # elsewhere
            return nonfinite_moments(x, stride, n, 0.0, kind)
        return acc
    if steps > 0:
        acc = lanes_merge(t, steps, kind)
    i = steps * lanes
    steps = (n - i) // FN_W
    if steps > 0:
        part = lanes_one(x + i * stride, stride, steps, pivot, kind)
        moments_merge(&acc, &part)
        i = i + steps * FN_W
    if i < n:
        part = scalar_moments(x + i * stride, stride, n - i, pivot, kind)
        moments_merge(&acc, &part)
    return acc


cdef inline Moments run_moments(const char* x, Py_ssize_t stride, Py_ssize_t n,
                                double pivot, const char* ahead_end, bint squares,
                                in_t* kind) noexcept nogil:
    """Moments of n values of x - pivot, `stride` bytes apart, in one call
    (contiguous ones fetching ahead up to ahead_end); with `squares`, sums
    of squares about 0 for rms_norm, one FMA a vector where Welford's
    updates cost four (a sum of squares has no cancellation to guard
    against)."""
    cdef Lanes t
    lanes_begin(&t, x, stride, n, ahead_end, kind)
    if stride == sizeof(in_t):
        # The stride as a constant: a step's vectors are then addressed from
        # one pointer, not from a base a vector kept on the stack.
        lanes_steps(&t, x, sizeof(in_t), 0, n // (FN_NV * FN_W), pivot, squares, kind)
    else:
        lanes_steps(&t, x, stride, 0, n // (FN_NV * FN_W), pivot, squares, kind)
    return run_end(&t, x, stride, n, pivot, squares, kind)


# ---------------------------------------------------------------------------
# The selected values of a run (where=): x beside its mask's bytes, read a
# piece at a time (fn_mask_kind).  A stretch of whole pieces selected is an
# ordinary run (run_moments), a piece with nothing selected is skipped, and
# in the others each lane adds its value where its byte is set (+0.0
# elsewhere, whatever x holds there): shifted sums about the piece's first
# selected value, one merge a piece.

cdef inline int next_piece(const unsigned char* m, Py_ssize_t n, Py_ssize_t piece, Py_ssize_t j,
                           Py_ssize_t* e) noexcept nogil:
    """The mask's n bytes at m read from j on, a piece at a time: the kind of
    what starts at j (fn_mask_kind's) and its end in e: a stretch of set
    bytes (whole pieces, and the set head of the piece after them), a run
    of MASK_RUN_MIN bytes or more that a mixed piece starts with (1 set,
    0 unset), or one piece."""
    cdef int k = fn_mask_kind(m + j, min(piece, n - j))
    cdef Py_ssize_t run
    cdef uint64_t w
    e[0] = j + min(piece, n - j)
    if k == 1:
        while e[0] < n and fn_mask_kind(m + e[0], min(piece, n - e[0])) == 1:
            e[0] = e[0] + min(piece, n - e[0])
        e[0] = e[0] + fn_mask_lead(m + e[0], min(piece, n - e[0]), True)
    elif k == 2 and e[0] - j >= MASK_RUN_MIN:
        # (a first word of mixed bytes starts no run: no count)
        memcpy(&w, m + j, 8)
        if w == 0 or not fn_zero_byte(w):
            run = fn_mask_lead(m + j, e[0] - j, m[j] != 0)
            if run >= MASK_RUN_MIN:
                e[0] = j + run
                k = 1 if m[j] else 0
    return k


cdef inline Py_ssize_t next_stretch(const unsigned char* m, Py_ssize_t sm, Py_ssize_t n,
                                    Py_ssize_t j, Py_ssize_t* e) noexcept nogil:
    """Among n mask bytes sm apart, the first set at or after j (n if none),
    and in e the end of the stretch of set bytes it starts; contiguous
    bytes are passed over a vector at a time (fn_mask_lead)."""
    if sm == 1:
        j = j + fn_mask_lead(m + j, n - j, False)
        e[0] = j + fn_mask_lead(m + j, n - j, True)
        return j
    while j < n and not m[j * sm]:
        j = j + 1
    e[0] = j
    while e[0] < n and m[e[0] * sm]:
        e[0] = e[0] + 1
    return j


cdef inline int next_part(const unsigned char* m, Py_ssize_t sm, Py_ssize_t n, bint pieces,
                          Py_ssize_t* j, Py_ssize_t* e) noexcept nogil:
    """The next part of a run to take from j[0] on, [j[0], e[0]): 1, a
    stretch of selected values; 2, a piece of mixed ones (with `pieces`,
    contiguous data read a piece of the mask at a time: next_piece; else
    stretch by stretch); 0, none left.  No mask (m NULL), or one constant
    along the run (sm 0): the whole run once, or (its byte 0) nothing."""
    cdef int k
    if m == NULL or sm == 0:
        if j[0] >= n or (m != NULL and not m[0]):
            return 0
        e[0] = n
        return 1
    if not pieces:
        j[0] = next_stretch(m, sm, n, j[0], e)
        return 1 if j[0] < n else 0
    while j[0] < n:
        k = next_piece(m, n, MASK_PIECE, j[0], e)
        if k != 0:
            return k
        j[0] = e[0]
    return 0


cdef inline bint moments_finite(const Moments* m) noexcept nogil:
    return m.mean - m.mean == 0.0 and m.m2 - m.m2 == 0.0


cdef inline Moments numbers_moments(const char* x, Py_ssize_t stride, Py_ssize_t n,
                                    double pivot, bint squares, in_t* kind) noexcept nogil:
    """scalar_moments over the values that are numbers (NaN left out;
    with `squares`, about 0): a selected run of a call that omits NaN,
    whose sums came out not finite, value by value."""
    cdef Moments out = moments_empty()
    cdef Py_ssize_t i
    cdef double y, d
    for i in range(n):
        y = sload(x + i * stride, kind)
        if y != y:
            continue
        out.n = out.n + 1.0
        if squares:
            # (y - y: NaN for an inf, which makes its slice NaN, as it does
            # where nothing is omitted)
            out.m2 = out.m2 + y * y + (y - y)
            continue
        y = y - pivot
        d = y - out.mean
        out.mean = out.mean + d / out.n
        out.m2 = out.m2 + d * (y - out.mean)
    return out


cdef inline Moments selected_runs(const char* x, Py_ssize_t sx, const unsigned char* m,
                                  Py_ssize_t sm, Py_ssize_t n, double pivot, bint squares,
                                  bint omit, in_t* kind) noexcept nogil:
    """The moments of the selected values among n of x (sx bytes apart, their
    mask bytes sm apart; m NULL: all of them), each stretch of them an
    ordinary run, merged in order: strided data, and pieces whose shifted
    sums are not finite.  With `omit`, a stretch that is not finite is
    taken again without its NaN (numbers_moments)."""
    cdef Moments acc = moments_empty(), part
    cdef Py_ssize_t e = n, j = 0 if m == NULL else next_stretch(m, sm, n, 0, &e)
    while j < n:
        part = run_moments(x + j * sx, sx, e - j, pivot, NULL, squares, kind)
        if omit and not moments_finite(&part):
            part = numbers_moments(x + j * sx, sx, e - j, pivot, squares, kind)
        moments_merge(&acc, &part)
        if m == NULL:
            break
        j = next_stretch(m, sm, n, e, &e)
    return acc


cdef inline bint counts(const char* x, const unsigned char* m, bint omit,
                        in_t* kind) noexcept nogil:
    """Whether the value at x counts: its byte m set (m NULL: selected),
    and with `omit` a number."""
    cdef double v
    if m != NULL and not m[0]:
        return False
    if omit:
        v = sload(x, kind)
        return v == v
    return True


cdef inline void lane_sums(const char* x, const unsigned char* m, fn_vd piv, fn_vd c,
                           bint omit, fn_vd* s, fn_vd* q, fn_vd* k, in_t* kind) noexcept nogil:
    """One vector of selected_lanes: d = (x - pivot) - c where the lane
    counts (m's byte set, m NULL: every lane; with omit, x a number), +0.0
    elsewhere, into the sums s, q (of d * d) and the counts k (fn_count's)."""
    cdef fn_vd v = vload(x, sizeof(in_t), kind)
    cdef fn_vd sel = fn_lane_mask(0, FN_W) if m == NULL else fn_bytes_mask(m)
    cdef fn_vd d
    if omit:
        sel = fn_masked(sel, fn_numbers(v))
    d = fn_masked(fn_sub(shifted(v, piv, kind), c), sel)
    s[0] = fn_add(s[0], d)
    q[0] = fn_fma(d, d, q[0])
    k[0] = fn_count(k[0], sel)


cdef inline Moments selected_lanes(const char* x, const unsigned char* m, Py_ssize_t n,
                                   double pivot, bint squares, bint omit,
                                   in_t* kind) noexcept nogil:
    """The moments of the selected values among n contiguous ones: sums of
    d = (x - pivot) - c and d * d, c the first selected value (0 with
    `squares`: sums of x**2), lane by lane where the mask's bytes are set
    (m NULL: every lane) and, with `omit`, x holds a number.  They cancel
    at most log2(n + 1) bits (the top of this file); sums that are not
    finite are redone run by run (selected_runs)."""
    cdef fn_vd s = fn_zero(), q = fn_zero(), k = fn_zero()
    cdef fn_vd s_b = fn_zero(), q_b = fn_zero(), k_b = fn_zero()
    cdef fn_vd piv = fn_set1(pivot), cv
    cdef Py_ssize_t w = sizeof(in_t), j = 0, body = n - n % FN_W
    cdef double c = 0.0, ts = 0.0, tq = 0.0, tk = 0.0, dv, s1, s2, cnt
    cdef double kl[8]                   # (FN_W, at most 8)
    cdef Moments out
    if not squares:
        while j < n and not counts(x + j * w, NULL if m == NULL else m + j, omit, kind):
            j = j + 1
        if j == n:
            return moments_empty()
        c = sload(x + j * w, kind) - pivot
    cv = fn_set1(c)
    # Two vectors a step into two sets of sums: one set waits on its
    # additions' latency every vector.
    j = 0
    while j + 2 * FN_W <= body:
        lane_sums(x + j * w, NULL if m == NULL else m + j, piv, cv, omit, &s, &q, &k, kind)
        lane_sums(x + (j + FN_W) * w, NULL if m == NULL else m + j + FN_W, piv, cv, omit,
                  &s_b, &q_b, &k_b, kind)
        j = j + 2 * FN_W
    if j < body:
        lane_sums(x + j * w, NULL if m == NULL else m + j, piv, cv, omit, &s, &q, &k, kind)
        j = j + FN_W
    s = fn_add(s, s_b)
    q = fn_add(q, q_b)
    k = fn_count_add(k, k_b)
    while j < n:
        if counts(x + j * w, NULL if m == NULL else m + j, omit, kind):
            dv = (sload(x + j * w, kind) - pivot) - c
            ts = ts + dv
            tq = tq + dv * dv
            tk = tk + 1.0
        j = j + 1
    s1 = fn_hsum(s) + ts
    s2 = fn_hsum(q) + tq
    fn_store_counts(kl, k)
    cnt = tk
    for j in range(FN_W):
        cnt = cnt + kl[j]
    if s2 - s2 != 0.0 or s1 - s1 != 0.0:
        return selected_runs(x, w, m, 1, n, pivot, squares, omit, kind)
    out.n = cnt
    if cnt == 0.0:
        return moments_empty()
    if squares:
        out.mean = 0.0
        out.m2 = s2
    else:
        out.mean = c + s1 / cnt
        out.m2 = max(s2 - s1 * s1 / cnt, 0.0)
    return out


cdef inline Moments numbers_run(const char* x, Py_ssize_t sx, Py_ssize_t n, double pivot,
                                bint squares, in_t* kind) noexcept nogil:
    """The moments of a selected run without its NaN (a call that omits
    them, whose run came out not finite): contiguous data a piece of lanes
    at a time (selected_lanes), merged in order; strided value by value."""
    cdef Moments acc = moments_empty(), part
    cdef Py_ssize_t piece = MASK_PIECE_F64 if in_t is double else NUMBERS_PIECE, j = 0
    if sx != sizeof(in_t):
        return numbers_moments(x, sx, n, pivot, squares, kind)
    while j < n:
        part = selected_lanes(x + j * sx, NULL, min(piece, n - j), pivot, squares, True, kind)
        moments_merge(&acc, &part)
        j = j + piece
    return acc


cdef inline Moments selected_moments(const char* x, Py_ssize_t sx, const unsigned char* m,
                                     Py_ssize_t sm, Py_ssize_t n, double pivot,
                                     const char* ahead_end, bint squares, int omit,
                                     in_t* kind) noexcept nogil:
    """run_moments over the values of the run that its mask selects (m:
    the mask's byte of x's first value, sm its stride; 0: the whole run
    selected or not), in pieces merged in order: the result depends on the
    data and the mask alone.  Stretches of selected values fetch ahead up
    to ahead_end, as run_moments.  With `omit`, NaN values are left out:
    a stretch whose moments are not finite is taken again without them
    (numbers_run); a data set without NaN costs nothing more.  omit 2: the
    runs are known to hold a NaN, and go to numbers_run at once."""
    cdef Moments acc = moments_empty(), part
    cdef Py_ssize_t w = sizeof(in_t), j = 0, e
    cdef Py_ssize_t piece = MASK_PIECE_F64 if in_t is double else MASK_PIECE
    cdef int k
    if sm == 0:
        if m[0] and omit == 2:
            return numbers_run(x, sx, n, pivot, squares, kind)
        if m[0]:
            acc = run_moments(x, sx, n, pivot, ahead_end, squares, kind)
            if omit and not moments_finite(&acc):
                acc = numbers_run(x, sx, n, pivot, squares, kind)
        return acc
    if sx != w or sm != 1:
        return selected_runs(x, sx, m, sm, n, pivot, squares, omit, kind)
    while j < n:
        k = next_piece(m, n, piece, j, &e)
        if k == 1 and omit == 2:
            part = numbers_run(x + j * w, w, e - j, pivot, squares, kind)
            moments_merge(&acc, &part)
        elif k == 1:
            part = run_moments(x + j * w, w, e - j, pivot, ahead_end, squares, kind)
            if omit and not moments_finite(&part):
                part = numbers_run(x + j * w, w, e - j, pivot, squares, kind)
            moments_merge(&acc, &part)
        elif k == 2:
            part = selected_lanes(x + j * w, m + j, e - j, pivot, squares, omit, kind)
            moments_merge(&acc, &part)
        j = e
    return acc


cdef inline void run_deviations(const char* x, Py_ssize_t body, fn_vd piv, fn_vd mu,
                                fn_vd* a, fn_vd* q, const char* ahead_end,
                                in_t* kind) noexcept nogil:
    """rows_moments' second look along one long run: the sums of
    d = (x - pivot) - mean and of d * d over its first `body` values (a
    multiple of FN_W, more than ROW_ACCS * FN_W), into ROW_ACCS vectors
    each and then into a and q in order.  Rows side by side load a line of
    each of FN_W rows a few vectors at a time; a long row reads its own
    lines in order, which the hardware prefetchers follow better, and each
    step fetches what lies STATS_AHEAD bytes on, up to ahead_end (NULL:
    nothing)."""
    cdef fn_vd a4[ROW_ACCS]
    cdef fn_vd q4[ROW_ACCS]
    cdef fn_vd d, one = fn_one_for_fma()
    cdef Py_ssize_t w = sizeof(in_t), j, step = ROW_ACCS * FN_W * sizeof(in_t)
    cdef Py_ssize_t fetching = ahead_steps(x, w, body // (ROW_ACCS * FN_W), step, ahead_end,
                                           kind)
    cdef int v
    if fetching > 0:
        fetch_lines(x + STATS_AHEAD, step)
    # From the first vectors on (0 + d): zeroing them first costs a string store.
    for v in range(ROW_ACCS):
        d = fn_sub(shifted(vload(x + v * FN_W * w, w, kind), piv, kind), mu)
        a4[v] = fn_fma(d, one, fn_zero())
        q4[v] = fn_fma(d, d, fn_zero())
    j = ROW_ACCS * FN_W
    while j + ROW_ACCS * FN_W <= body:
        if j < fetching * ROW_ACCS * FN_W:
            fetch_lines(x + j * w + STATS_AHEAD, step)
        for v in range(ROW_ACCS):
            d = fn_sub(shifted(vload(x + (j + v * FN_W) * w, w, kind), piv, kind), mu)
            a4[v] = fn_fma(d, one, a4[v])
            q4[v] = fn_fma(d, d, q4[v])
        j = j + ROW_ACCS * FN_W
    a[0] = fn_zero()
    q[0] = fn_zero()
    for v in range(ROW_ACCS):
        a[0] = fn_add(a[0], a4[v])
        q[0] = fn_add(q[0], q4[v])
    while j < body:
        d = fn_sub(shifted(vload(x + j * w, w, kind), piv, kind), mu)
        a[0] = fn_add(a[0], d)
        q[0] = fn_fma(d, d, q[0])
        j = j + FN_W


cdef inline bint rows_read_singly(Py_ssize_t n) noexcept nogil:
    """Whether rows_moments reads runs of n values one at a time
    (run_deviations) rather than side by side."""
    return n - n % FN_W > SIDE_ROW_VECTORS * FN_W


cdef inline void rows_moments(const char** rows, int lanes, Py_ssize_t n,
                              const double* pivot, double* mean, double* m2,
                              const char* ahead_end, in_t* kind) noexcept nogil:
    """Moments of FN_W short contiguous runs at once: rows[l], n values of
    x - pivot[l] each, into mean[l] and m2[l], for the first `lanes` of
    them; the others are stand-ins (rows[0] again, read but not kept:
    given lane 0's results).  Long runs fetch ahead up to ahead_end
    (run_deviations).

    A run this short stays in L1 between two looks at it: its mean first,
    then the squared deviations from it, corrected by their sum (the
    corrected two-pass formula: as exact as Welford's, with no chain of
    updates).  Each look sums the FN_W runs side by side, a vector of each
    run a step into that run's own vector: the FN_W chains hide each
    other's latency, where one run at a time waited on its own chain (or
    on the sum of several at its end, which cost short rows more than
    their values).  The FN_W vectors are then summed across their lanes
    together (fn_hsum_rows).  A run with inf, NaN or overflowing sums gets
    a non-finite mean or m2: the caller redoes it Welford's way
    (scalar_moments).

    float16/float32 runs take one look instead: shifted sums about each
    run's first value (see the top of this file; the runs that come here
    are at most 16 KiB, 8192 float16 values, and lose at most 13 of
    float64's 53 bits to the difference)."""
    cdef fn_vd acc[8]
    cdef fn_vd sq[8]
    cdef fn_vd piv[8]
    cdef fn_vd mu[8]
    cdef double tail[8]
    cdef double tail_sq[8]
    cdef fn_vd d, t, e, q, one = fn_one_for_fma()
    cdef Py_ssize_t w = sizeof(in_t), body = n - n % FN_W, j
    cdef double inv_n = 1.0 / <double>n, dv
    cdef int l
    for l in range(FN_W):
        piv[l] = fn_set1(pivot[l])
    if in_t is not double:
        # One look: the deviations from each run's first value (the pivots
        # of float16/float32 data are 0), mean = first + their sum / n.
        for l in range(FN_W):
            mean[l] = sload(rows[l], kind)
        t = fn_load_f64(mean)
    else:
        # Each sum starts from its first vector (0 + d, as a loop from zero
        # would give): zeroing the sums first cost a string store a group.
        for l in range(FN_W):
            acc[l] = fn_zero() if body == 0 else fn_fma(
                shifted(vload(rows[l], w, kind), piv[l], kind), one, fn_zero())
        j = FN_W
        while j < body:
            for l in range(FN_W):
                # + on the FMA pipes (fn_one_for_fma), the same bits
                acc[l] = fn_fma(shifted(vload(rows[l] + j * w, w, kind), piv[l], kind), one,
                                acc[l])
            j = j + FN_W
        for l in range(FN_W):
            tail[l] = 0.0
            for j in range(body, n):
                tail[l] = tail[l] + (sload(rows[l] + j * w, kind) - pivot[l])
        t = fn_mul(fn_add(fn_hsum_rows(acc), fn_load_f64(tail)), fn_set1(inv_n))
        fn_store_f64(mean, t)
    for l in range(FN_W):
        mu[l] = fn_set1(mean[l])
    if rows_read_singly(n):
        for l in range(FN_W):
            run_deviations(rows[l], body, piv[l], mu[l], &acc[l], &sq[l], ahead_end, kind)
    else:
        for l in range(FN_W):
            if body == 0:
                acc[l] = fn_zero()
                sq[l] = fn_zero()
            else:
                d = fn_sub(shifted(vload(rows[l], w, kind), piv[l], kind), mu[l])
                acc[l] = fn_fma(d, one, fn_zero())
                sq[l] = fn_fma(d, d, fn_zero())
        j = FN_W
        while j < body:
            for l in range(FN_W):
                d = fn_sub(shifted(vload(rows[l] + j * w, w, kind), piv[l], kind), mu[l])
                acc[l] = fn_fma(d, one, acc[l])
                sq[l] = fn_fma(d, d, sq[l])
            j = j + FN_W
    for l in range(FN_W):
        tail[l] = 0.0
        tail_sq[l] = 0.0
        for j in range(body, n):
            dv = (sload(rows[l] + j * w, kind) - pivot[l]) - mean[l]
            tail[l] = tail[l] + dv
            tail_sq[l] = tail_sq[l] + dv * dv
    # e = sum of deviations: for float64 zero but for the rounding of the
    # mean; for float16/float32 the shifted sum S1.
    e = fn_add(fn_hsum_rows(acc), fn_load_f64(tail))
    q = fn_add(fn_hsum_rows(sq), fn_load_f64(tail_sq))
    fn_store_f64(mean, fn_fma(e, fn_set1(inv_n), t))
    fn_store_f64(m2, fn_sub(q, fn_mul(fn_mul(e, e), fn_set1(inv_n))))
    for l in range(lanes, FN_W):
        mean[l] = mean[0]
        m2[l] = m2[0]


# ---------------------------------------------------------------------------
# Columns: the Welford update vectorized across contiguous columns, one row
# at a time, in strips of FN_NVC vectors whose accumulators stay in
# registers while they sweep down the rows (float16/float32 columns: shifted
# sums about each column's first value instead, folded into moments every
# SUM_ROWS rows at most).

cdef inline void strip_welford(const char* x, Py_ssize_t rs, Py_ssize_t nrows,
                               Py_ssize_t k0, const double* pivot, double* mean, double* m2,
                               Ahead* ahead, in_t* ki) noexcept nogil:
    """Welford over nrows rows (rs bytes apart) of FN_NVC vectors of
    contiguous columns, continuing from k0 rows already in mean/m2.  The accumulators live in
    registers for the whole sweep, so each value costs its load and four
    vector operations.  The strip prefetches its share of the next sweep
    in pieces, one before each AHEAD_ROWS rows (ahead_piece).

    float16/float32 columns take shifted sums instead (see the top of this
    file), about `pivot`, their centres: mean/m2 hold the sums of
    x - centre and of its squares until fold_sums.  A Welford update waits
    for the last one (four dependent operations a row); a sum waits for one
    addition."""
    cdef fn_vd mu[FN_NVC]
    cdef fn_vd q[FN_NVC]
    cdef fn_vd mu2[FN_NVC]
    cdef fn_vd q2[FN_NVC]
    cdef fn_vd piv[FN_NVC]
    cdef fn_vd r, d, e, one = fn_one_for_fma()
    cdef const char* row
    cdef Py_ssize_t k, g, g_end, w = FN_W * <Py_ssize_t>sizeof(in_t)
    cdef Ahead a = ahead[0]       # a local: its fields stay in registers
    cdef Py_ssize_t piece = ahead_piece(&a, nrows)
    # An idle cursor (from cache, or rows that fetch only heads): the rows
    # in one piece, with nothing among them.
    cdef Py_ssize_t step = AHEAD_ROWS if a.rows > 0 else nrows
    cdef int v
    for v in range(FN_NVC):
        mu[v] = fn_load_f64(mean + v * FN_W)
        q[v] = fn_load_f64(m2 + v * FN_W)
        piv[v] = fn_load_f64(pivot + v * FN_W)
    if in_t is not double:
        # Two rows a step into two sets of sums: one set would wait on the
        # FMA's latency every row.  (Pieces of AHEAD_ROWS, an even count,
        # or all the rows: the pairs stay.)
        for v in range(FN_NVC):
            mu2[v] = fn_zero()
            q2[v] = fn_zero()
        g = 0
        while g < nrows - 1:
            ahead_lines(&a, piece)
            g_end = min(g + step, nrows - 1)
            for k in range(g, g_end, 2):
                row = x + k * rs
                for v in range(FN_NVC):
                    d = fn_sub(vload(row + v * w, sizeof(in_t), ki), piv[v])
                    e = fn_sub(vload(row + rs + v * w, sizeof(in_t), ki), piv[v])
                    # + d on the FMA pipes (fn_one_for_fma), as in
                    # rows_moments (design.md, "Pipes and loop layout")
                    mu[v] = fn_fma(d, one, mu[v])
                    q[v] = fn_fma(d, d, q[v])
                    mu2[v] = fn_fma(e, one, mu2[v])
                    q2[v] = fn_fma(e, e, q2[v])
            g = g_end
        if nrows % 2:
            row = x + (nrows - 1) * rs
            for v in range(FN_NVC):
                d = fn_sub(vload(row + v * w, sizeof(in_t), ki), piv[v])
                mu[v] = fn_add(mu[v], d)
                q[v] = fn_fma(d, d, q[v])
        for v in range(FN_NVC):
            fn_store_f64(mean + v * FN_W, fn_add(mu[v], mu2[v]))
            fn_store_f64(m2 + v * FN_W, fn_add(q[v], q2[v]))
        ahead[0] = a
        return
    g = 0
    while g < nrows:
        ahead_lines(&a, piece)
        g_end = min(g + step, nrows)
        for k in range(g, g_end):
            row = x + k * rs
            r = fn_set1(1.0 / <double>(k0 + k + 1))
            for v in range(FN_NVC):
                welford_step(shifted(vload(row + v * FN_W * <Py_ssize_t>sizeof(in_t),
                                           sizeof(in_t), ki), piv[v], ki), r,
                             &mu[v], &q[v])
        g = g_end
    for v in range(FN_NVC):
        fn_store_f64(mean + v * FN_W, mu[v])
        fn_store_f64(m2 + v * FN_W, q[v])
    ahead[0] = a
    # (Contiguous columns only, no stride among the arguments: out of line,
    # a stride kept a pointer per vector and pushed the counter to memory.
    # Strided columns go through edge_welford.)


cdef inline void edge_welford(const char* x, Py_ssize_t rs, Py_ssize_t sx, Py_ssize_t nrows,
                              Py_ssize_t k0, Py_ssize_t v0, Py_ssize_t lo, Py_ssize_t hi,
                              const double* pivot, double* mean, double* m2,
                              in_t* ki) noexcept nogil:
    """strip_welford for the columns lo .. hi of a sweep that no strip
    covers (fewer than a strip): up to FN_NVC vectors of columns from
    column v0 <= lo on, each lane outside lo .. hi left as it was.  The
    vectors' columns are the tile's (x[v0] up to x[v0 + vectors * FN_W]),
    so every load reads the tile's own bytes; one sweep for them all keeps
    their update chains side by side, as in a strip."""
    cdef fn_vd mu[FN_NVC]
    cdef fn_vd q[FN_NVC]
    cdef fn_vd mu2[FN_NVC]
    cdef fn_vd q2[FN_NVC]
    cdef fn_vd piv[FN_NVC]
    cdef fn_vd keep[FN_NVC]
    cdef fn_vd r, d, old_mu, old_q
    cdef Py_ssize_t col[FN_NVC]
    cdef const char* row
    cdef Py_ssize_t k
    cdef int v, nv = <int>((hi - v0 + FN_W - 1) // FN_W)
    for v in range(FN_NVC):
        # Vectors past the last: a copy of the first, masked out, not stored.
        col[v] = v0 + v * FN_W if v < nv else v0
        keep[v] = fn_lane_mask(lo - col[v], hi - col[v]) if v < nv else fn_lane_mask(0, 0)
        mu[v] = fn_load_f64(mean + col[v])
        q[v] = fn_load_f64(m2 + col[v])
        piv[v] = fn_load_f64(pivot + col[v])
    if in_t is not double:
        # Shifted sums in strip_welford's order (even rows onto the sums so
        # far, odd rows into sums of their own, added at the end), so that a
        # column's bits do not depend on which of the two sums it: a lane
        # masked out adds +0.0 to both.
        for v in range(FN_NVC):
            mu2[v] = fn_zero()
            q2[v] = fn_zero()
        for k in range(nrows):
            row = x + k * rs
            for v in range(FN_NVC):
                d = fn_masked(fn_sub(vload(row + col[v] * sx, sx, ki), piv[v]), keep[v])
                if k % 2 == 0:
                    mu[v] = fn_add(mu[v], d)
                    q[v] = fn_fma(d, d, q[v])
                else:
                    mu2[v] = fn_add(mu2[v], d)
                    q2[v] = fn_fma(d, d, q2[v])
        for v in range(FN_NVC):
            if v < nv:
                fn_store_f64(mean + col[v], fn_add(mu[v], mu2[v]))
                fn_store_f64(m2 + col[v], fn_add(q[v], q2[v]))
        return
    for k in range(nrows):
        row = x + k * rs
        r = fn_set1(1.0 / <double>(k0 + k + 1))
        for v in range(FN_NVC):
            old_mu = mu[v]
            old_q = q[v]
            welford_step(shifted(vload(row + col[v] * sx, sx, ki), piv[v], ki), r,
                         &mu[v], &q[v])
            mu[v] = fn_select(keep[v], mu[v], old_mu)
            q[v] = fn_select(keep[v], q[v], old_q)
    for v in range(FN_NVC):
        if v < nv:
            fn_store_f64(mean + col[v], mu[v])
            fn_store_f64(m2 + col[v], q[v])


cdef inline Py_ssize_t line_head(const char* x, Py_ssize_t rs, Py_ssize_t sx, Py_ssize_t width,
                                 in_t* ki) noexcept nogil:
    """Columns before the first that starts a cache line in every row (0
    when rows differ in that, the tile is too narrow to gain, or a strip
    is no wider than a line): strips from there read whole lines.  A
    strip a line off reads one more line per row, which the next strip
    reads again (NumPy's large arrays start 16 bytes past a line).
    Strips of a line or less (AVX2, SSE2) lose more to the head's and
    tail's masked sweeps than to the straddles (docs/design.md)."""
    cdef Py_ssize_t off = <Py_ssize_t>(<size_t>x % 64), head
    if FN_NVC * FN_W * sizeof(in_t) <= 64:
        return 0
    if sx != sizeof(in_t) or rs % 64 != 0 or off == 0 or off % sizeof(in_t) != 0:
        return 0
    head = (64 - off) // <Py_ssize_t>sizeof(in_t)
    if width - head < 2 * FN_NVC * FN_W:
        return 0
    return head


cdef inline void fold_sums(Py_ssize_t width, const double* centre, Py_ssize_t nb,
                           Py_ssize_t na, double* s1, double* s2, double* mean,
                           double* m2) noexcept nogil:
    """nb rows of float16/float32 columns, given as shifted sums (s1 of x -
    centre, s2 of its squares), as moments: mean = centre + S1 / n, M2 = S2 -
    S1**2 / n (negative only by rounding, NaN kept), merged into the moments
    of the na rows before them (chan) or, with na = 0, written as they are
    (s1 and s2 may then be mean and m2 themselves).  Separate sums are
    zeroed for the next rows."""
    cdef Py_ssize_t c
    cdef double n = <double>nb, a, q
    for c in range(width):
        a = s1[c] / n
        q = s2[c] - s1[c] * a
        if q < 0.0:
            q = 0.0
        a = centre[c] + a
        if na == 0:
            mean[c] = a
            m2[c] = q
        else:
            chan(<double>na, &mean[c], &m2[c], n, a, q)
        if s1 != mean:
            s1[c] = 0.0
            s2[c] = 0.0


cdef inline double pick_pivot(double first, in_t* kind) noexcept nogil:
    """The pivot of a slice whose first value is `first`: that value for
    float64 data unless it is inf/nan (then 0, so that a non-finite value
    propagates as arithmetic says instead of poisoning every shifted value),
    0 for float16/float32 data."""
    if in_t is double:
        if first - first == 0.0:
            return first
    return 0.0
