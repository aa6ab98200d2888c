# The kernels: two access patterns (SLICES, COLUMNS; see _layout.pxd) times
# four modes, over the one statistics core in _moments.pxd.  This file is
# compiled once per instruction-set level (fastnorm._kernels_<level>).
#
#   MODE_STATS   per-slice mean and M2 only (mean_var)
#   MODE_CENTER  statistics, then y = (x - mean) * rstd * gamma + beta
#   MODE_RMS     statistics, then y = x * rstd * gamma (+ beta), rstd from mean(x**2)
#   MODE_GIVEN   no statistics: mean and rstd are inputs (batch norm eval)
#
# Every result is a function of the data and the layout alone: reductions are
# cut into blocks whose sizes depend on the shape only, and blocks are merged
# in a fixed order, so the thread count never changes a bit of the output.


cdef enum:
    # The short ways of slices_kernel (0: neither).
    SHORT_ROWS = 1
    SHORT_SLICES = 2

cdef enum:
    MODE_STATS = 0
    MODE_CENTER = 1
    MODE_RMS = 2
    MODE_GIVEN = 3

cdef enum:
    # Layout of the COLUMNS scratch (derived from the tile)
    STATE_STRIDE = 2 * (COL_TILE + PAD)     # doubles per item: mean, m2
    COEF_STRIDE = 3 * (COL_TILE + PAD)      # doubles per group: pivot, shift, scale
    # float32 coefficients per group: mean, scale, rest, each with room to
    # continue periodically for a vector (fn_normalize_periodic_f32).
    WRAP = 32
    COEF32_STRIDE = 3 * (COL_TILE + WRAP)

MODES = {"stats": MODE_STATS, "center": MODE_CENTER, "rms": MODE_RMS, "given": MODE_GIVEN}
# Calls of fewer elements run on one thread whatever they are given.
parallel_min = PARALLEL_MIN
# By itemsize: (most bytes of x, most bytes of a row) for which rows in
# cache go the short-rows way (tests aim at both sides of these).
cached_rows = {2: (CACHED_BYTES, CACHED_ROW_BYTES), 4: (CACHED_BYTES, CACHED_ROW_BYTES),
               8: (CACHED_BYTES_F64, CACHED_ROW_BYTES_F64)}
# The COLUMNS pattern's columns per tile, its output's rows per group and
# columns per chunk (float32; float64 coefficients: half), and the most
# bytes of coefficients a run of whole rows takes (tests aim at these).
column_tile = COL_TILE
out_rows = OUT_ROWS
out_chunk = OUT_CHUNK
periodic_bytes = PERIODIC_BYTES
# COLUMNS calls whose x takes more bytes start their strips at a line.
columns_in_cache = CACHED_BYTES
# COLUMNS calls of more groups (tiles of one outer slice) go in passes.
pass_groups = MAX_PASS_GROUPS
# Calls on x of at most this many bytes split their work among the threads
# the same way every time; larger ones share it out as threads come free.
same_split_bytes = SAME_SPLIT_BYTES

cdef struct Coef:
    # How one slice (or column) is normalized:
    #   y = ((x - pivot) - shift) * scale * gamma + beta
    double pivot
    double shift
    double scale


cdef inline double rstd_of(double var, double mean, int mode, double eps) noexcept nogil:
    """The scale of a slice with this variance and mean: 1 / sqrt(var + eps),
    or for MODE_RMS 1 / sqrt(mean(x**2) + eps) (mean(x**2) = var + mean**2,
    a sum of non-negatives)."""
    if mode == MODE_CENTER:
        return 1.0 / sqrt(var + eps)
    if mode == MODE_RMS:
        return 1.0 / sqrt((var + mean * mean) + eps)
    return 1.0


cdef inline Coef record(Moments m, double pivot, int mode, const Layout* L, Py_ssize_t off,
                        double scale) noexcept nogil:
    """Write a slice's statistics to the stat arrays at byte offset off
    (unless the caller wants none: no arrays) and return the coefficients
    that normalize it; scale is rstd_of's."""
    cdef Coef c
    cdef double var = m.m2 / m.n, mean = pivot + m.mean
    c.pivot = pivot
    c.shift = m.mean
    c.scale = scale
    if L.stat[0] == NULL:
        if mode == MODE_RMS:
            c.pivot = 0.0
            c.shift = 0.0
        return c
    if mode == MODE_STATS:
        # An inf that is a slice's last update leaves its mean inf; the
        # variance is NaN either way, and so is the mean then (where the inf
        # falls must not matter).
        if m.m2 != m.m2:
            mean = NAN
        (<double*>(L.stat[0] + off))[0] = mean
        (<double*>(L.stat[1] + off))[0] = m.m2
    elif mode == MODE_CENTER:
        if var != var:
            mean = NAN
        (<double*>(L.stat[0] + off))[0] = mean
        (<double*>(L.stat[1] + off))[0] = scale
        if L.stat[2] != NULL:
            (<double*>(L.stat[2] + off))[0] = var
    else:  # MODE_RMS: no centring
        c.pivot = 0.0
        c.shift = 0.0
        (<double*>(L.stat[0] + off))[0] = var + mean * mean
        (<double*>(L.stat[1] + off))[0] = scale
    return c


cdef inline Coef finish(Moments m, double pivot, int mode, double eps,
                        const Layout* L, Py_ssize_t off) noexcept nogil:
    """Turn a slice's moments into its statistics (written to the stat
    arrays at byte offset off) and the coefficients that normalize it."""
    return record(m, pivot, mode, L, off, rstd_of(m.m2 / m.n, pivot + m.mean, mode, eps))


cdef inline Coef given(const Layout* L, Py_ssize_t off) noexcept nogil:
    """A slice normalized with statistics the caller gives (mean, rstd)."""
    cdef Coef c
    c.pivot = 0.0
    c.shift = (<const double*>(L.stat[0] + off))[0]
    c.scale = (<const double*>(L.stat[1] + off))[0]
    return c


cdef inline void normalize_vector(const char* xp, char* yp, const Param* g, const Param* b,
                                  Py_ssize_t n, Coef c, bint stream, const char* ahead,
                                  bint down, in_t* ki, out_t* ko) noexcept nogil:
    """y = ((x - pivot) - shift) * scale * g + b along n contiguous values;
    with `stream`, aligned vectors of y bypass the cache.  `ahead` (or NULL)
    is the next run of x: prefetched as this one is written, so that reading
    it overlaps the writes.  `down`: from the last value to the first (a
    fresh y, see fn_normalize_f32; `ahead` is then the run before)."""
    cdef const in_t* x = <const in_t*>xp
    cdef out_t* y = <out_t*>yp
    cdef const double* gp = g.p      # locals: see normalize_columns
    cdef const double* bp = b.p
    cdef Py_ssize_t ginc = g.inc, binc = b.inc
    cdef Py_ssize_t i, head = 0, body
    if stream:
        # Values up to the first vector-aligned address of y go the scalar way.
        head = (<size_t>y // sizeof(out_t)) % FN_W
        head = min(n, 0 if head == 0 else FN_W - head)
    body = head + (n - head) // FN_W * FN_W
    if down:
        for i in range(n - 1, body - 1, -1):
            normalize_one(x, y, gp, ginc, bp, binc, i, c, ki, ko)
    else:
        for i in range(head):
            normalize_one(x, y, gp, ginc, bp, binc, i, c, ki, ko)
    # One loop per kind of gain and bias (along the run, or one value
    # each), so that neither costs an index computation per vector.
    if ginc == 1 and binc == 1:
        normalize_loop(x, y, gp, 1, bp, 1, head, body, c, stream, ahead, down, ki, ko)
    elif ginc == 0 and binc == 0:
        normalize_loop(x, y, gp, 0, bp, 0, head, body, c, stream, ahead, down, ki, ko)
    else:
        normalize_loop(x, y, gp, ginc, bp, binc, head, body, c, stream, ahead, down, ki, ko)
    if down:
        for i in range(head - 1, -1, -1):
            normalize_one(x, y, gp, ginc, bp, binc, i, c, ki, ko)
    else:
        for i in range(body, n):
            normalize_one(x, y, gp, ginc, bp, binc, i, c, ki, ko)


cdef inline void normalize_one(const in_t* x, out_t* y, const double* gp, Py_ssize_t ginc,
                               const double* bp, Py_ssize_t binc, Py_ssize_t i, Coef c,
                               in_t* ki, out_t* ko) noexcept nogil:
    sstore(<char*>(y + i), ((sload(<const char*>(x + i), ki) - c.pivot) - c.shift) * c.scale
           * gp[i * ginc] + bp[i * binc], ko)


cdef inline void normalize_loop(const in_t* x, out_t* y, const double* gp, Py_ssize_t ginc,
                                const double* bp, Py_ssize_t binc, Py_ssize_t lo,
                                Py_ssize_t hi, Coef c, bint stream, const char* ahead,
                                bint down, in_t* ki, out_t* ko) noexcept nogil:
    """The vector body of normalize_vector, values lo to hi (whole vectors),
    upwards or `down` (a loop each, with a constant step).  Inlined with
    constant ginc and binc, it indexes the parameters directly.  The
    prefetch of `ahead`, once a cache line, into L2 (on a Xeon with 2 MiB
    of L2 a core the forward kernels' fetches ahead into L1 held up reads
    from memory; see _sweep.pxd): upwards lines that start a vector,
    downwards a line of each vector's span (a whole row ahead)."""
    cdef Py_ssize_t i
    if down:
        i = hi - FN_W
        while i >= lo:
            if ahead != NULL and i % (64 // sizeof(in_t)) < FN_W:
                fn_prefetch_l2(ahead + i * sizeof(in_t))
            normalize_at(x, y, gp, ginc, bp, binc, i, c, stream, ki, ko)
            i = i - FN_W
        return
    i = lo
    while i < hi:
        if ahead != NULL and i % (64 // sizeof(in_t)) == 0:
            fn_prefetch_l2(ahead + i * sizeof(in_t))
        normalize_at(x, y, gp, ginc, bp, binc, i, c, stream, ki, ko)
        i = i + FN_W


cdef inline void normalize_at(const in_t* x, out_t* y, const double* gp, Py_ssize_t ginc,
                              const double* bp, Py_ssize_t binc, Py_ssize_t i, Coef c,
                              bint stream, in_t* ki, out_t* ko) noexcept nogil:
    """One vector of normalize_loop, values i to i + FN_W."""
    cdef fn_vd t
    if in_t is double:
        t = fn_mul(fn_sub(fn_sub(vload(<const char*>(x + i), sizeof(in_t), ki),
                                 fn_set1(c.pivot)), fn_set1(c.shift)), fn_set1(c.scale))
    else:
        # float16/float32 data: xhat = x * scale - (pivot + shift) * scale,
        # one FMA; the cancellation it has at a large mean costs bits of
        # float64's 53 that the data (24 at most) never had.
        t = fn_fma(vload(<const char*>(x + i), sizeof(in_t), ki), fn_set1(c.scale),
                   fn_set1(-(c.pivot + c.shift) * c.scale))
    t = fn_fma(t, fn_load_f64(gp + i * ginc), fn_load_f64(bp + i * binc))
    if stream:
        vstream(y + i, t)
    else:
        vstore(<char*>(y + i), sizeof(out_t), t, ko)


cdef inline void normalize_scalar(const char* xp, Py_ssize_t sx, char* yp, Py_ssize_t sy,
                                  const char* gp, Py_ssize_t sg, const char* bp, Py_ssize_t sb,
                                  Py_ssize_t n, Coef c, in_t* ki, out_t* ko) noexcept nogil:
    """The same for any strides, one value at a time."""
    cdef Py_ssize_t i
    for i in range(n):
        sstore(yp + i * sy, ((sload(xp + i * sx, ki) - c.pivot) - c.shift) * c.scale
               * (<const double*>(gp + i * sg))[0] + (<const double*>(bp + i * sb))[0], ko)


cdef inline void normalize_run(const char* xp, Py_ssize_t sx, char* yp, Py_ssize_t sy,
                               const char* gp, Py_ssize_t sg, const char* bp, Py_ssize_t sb,
                               Py_ssize_t n, Coef c, bint stream, const char* ahead,
                               bint down, in_t* ki, out_t* ko) noexcept nogil:
    cdef Param g, b
    if (sx == sizeof(in_t) and sy == sizeof(out_t)
            and param_init(&g, gp, sg) and param_init(&b, bp, sb)):
        if stream:
            normalize_vector(xp, yp, &g, &b, n, c, True, ahead, down, ki, ko)
        else:
            normalize_vector(xp, yp, &g, &b, n, c, False, ahead, down, ki, ko)
    else:
        normalize_scalar(xp, sx, yp, sy, gp, sg, bp, sb, n, c, ki, ko)


# ---------------------------------------------------------------------------
# SLICES: the innermost axis is reduced.  A slice is n_runs runs (the outer
# reduced axes) of run_len values (the inner one), each cut into CHUNK blocks.

cdef struct SlicePlan:
    const Layout* L
    int mode
    double eps
    bint has_y
    Py_ssize_t n_runs
    Py_ssize_t run_len
    bint short_runs           # several short contiguous runs per slice:
                              # moments FN_W runs at a time
    Py_ssize_t n_chunks       # blocks per run
    Moments* blocks           # items mode: one per (slice, run, block)
    Coef* coefs               # items mode: one per slice
    bint f32                  # float32 data and output, contiguous runs:
                              # the normalization pass runs in float32
    float* g32                # gamma and beta as float along the run (one
    float* b32                # run per slice, shared), or NULL: one per run
    bint rows_f32             # the float32 pass may take rows of one run
                              # that follow each other as one run (short_rows)
    bint rows_f64             # the same for float64 data and output...
    double* g64               # ...with gamma and beta as tables along the
    double* b64               # run (param_table's layout)
    Py_ssize_t row_max        # the longest rows (bytes) of the short_rows way
    Py_ssize_t batch          # slices per work item of the short ways
    const char* rows_end      # slices one contiguous block of x: its end
    const char* x_end         # slices one contiguous block of x read upwards,
                              # slice after slice: its end (the statistics
                              # fetch ahead across slices); else NULL


cdef inline const char* run_start(const SlicePlan* p, const Odometer* s, const Odometer* r, int k) noexcept nogil:
    return p.L.base[k] + s.off[k] + r.off[k]


cdef inline double slice_pivot(const SlicePlan* p, const Odometer* s, in_t* ki) noexcept nogil:
    if p.mode == MODE_RMS:
        return 0.0               # block_moments sums squares of x itself
    return pick_pivot(sload(p.L.base[OP_X] + s.off[OP_X], ki), ki)


cdef inline Moments block_moments(const SlicePlan* p, const Odometer* s, const Odometer* r,
                                  Py_ssize_t b, double pivot, const char* ahead_end,
                                  in_t* ki) noexcept nogil:
    """The moments of block b of run r of slice s; contiguous data fetches
    ahead up to ahead_end (NULL: to the end of the run)."""
    cdef const Axis* inner = &p.L.red[p.L.n_red - 1]
    cdef Py_ssize_t start = b * CHUNK
    cdef Py_ssize_t n = min(<Py_ssize_t>CHUNK, p.run_len - start)
    cdef const char* run = run_start(p, s, r, OP_X)
    if ahead_end == NULL:
        ahead_end = run + p.run_len * inner.stride[OP_X]
    if p.mode == MODE_RMS:
        return square_sums(run + start * inner.stride[OP_X], inner.stride[OP_X], n,
                           ahead_end, ki)
    return run_moments(run + start * inner.stride[OP_X], inner.stride[OP_X], n, pivot,
                       ahead_end, ki)


cdef inline bint normalize_f32(const SlicePlan* p, const Odometer* s, const Odometer* r,
                               Py_ssize_t start, Py_ssize_t n, Coef c, bint down,
                               const char* ahead) noexcept nogil:
    """normalize_block in float32 arithmetic (fn_normalize_f32); false, with
    nothing written, for a slice whose mean or scale float32 cannot hold
    with room to spare (then the float64 path takes it)."""
    cdef double mean = c.pivot + c.shift
    cdef float m = <float>mean, gv, bv
    cdef float sc = <float>c.scale, e = <float>((mean - <double>m) * c.scale)
    cdef const float* g = p.g32 + start if p.g32 != NULL else &gv
    cdef const float* b = p.b32 + start if p.b32 != NULL else &bv
    cdef const float* x = <const float*>run_start(p, s, r, OP_X) + start
    cdef float* y = <float*>run_start(p, s, r, OP_Y) + start
    if not (fabs(mean) < 1e30 and 1e-30 < c.scale < 1e30):
        return False
    if p.g32 == NULL:
        gv = <float>(<const double*>run_start(p, s, r, OP_G))[0]
    if p.b32 == NULL:
        bv = <float>(<const double*>run_start(p, s, r, OP_B))[0]
    # Constant increments, so that each call is inlined with its own loop.
    if p.g32 != NULL and p.b32 != NULL:
        fn_normalize_f32(x, y, g, 1, b, 1, n, m, sc, e, p.L.stream, down, ahead)
    elif p.g32 == NULL and p.b32 == NULL:
        fn_normalize_f32(x, y, g, 0, b, 0, n, m, sc, e, p.L.stream, down, ahead)
    else:
        fn_normalize_f32(x, y, g, p.g32 != NULL, b, p.b32 != NULL, n, m, sc, e, p.L.stream,
                         down, ahead)
    return True


cdef inline void normalize_block(const SlicePlan* p, const Odometer* s, const Odometer* r,
                                 Py_ssize_t start, Py_ssize_t n, Coef c, const char* ahead,
                                 bint down, in_t* ki, out_t* ko) noexcept nogil:
    """Values start to start + n of run r of slice s; `ahead` (or NULL) is
    prefetched as they are written, `down` writes them last first."""
    cdef const Axis* inner = &p.L.red[p.L.n_red - 1]
    if in_t is float and out_t is float:
        # Upwards, single runs (rows, read once already by their statistics)
        # go without; a slice of several runs (the maps of an NCHW channel)
        # fetches FN_AHEAD_F32 values ahead, into the next run (`ahead`):
        # batch_norm eval over (64, 64, 56, 56), one thread, time / a copy,
        # float32 1.17 -> 0.70 and 1.13 -> 0.73.
        if p.f32 and normalize_f32(p, s, r, start, n, c, down,
                                   ahead if down or p.n_runs > 1 else NULL):
            return
    normalize_run(run_start(p, s, r, OP_X) + start * inner.stride[OP_X], inner.stride[OP_X],
                  <char*>run_start(p, s, r, OP_Y) + start * inner.stride[OP_Y], inner.stride[OP_Y],
                  run_start(p, s, r, OP_G) + start * inner.stride[OP_G], inner.stride[OP_G],
                  run_start(p, s, r, OP_B) + start * inner.stride[OP_B], inner.stride[OP_B],
                  n, c, p.L.stream, ahead, down, ki, ko)


ctypedef fused table_t:
    float
    double


cdef inline table_t* param_table(const Layout* L, int k, Py_ssize_t n,
                                 table_t* kind) noexcept nogil:
    """n values of parameter k along the run (inner stride one float64, or 0
    for one value) as table_t, continued periodically for WRAP more
    (table[n + j] = table[j mod n], for fn_normalize_rows_*); NULL if out of
    memory."""
    cdef Py_ssize_t i, j = 0, step = L.red[L.n_red - 1].stride[k] // sizeof(double)
    cdef const double* src = <const double*>L.base[k]
    cdef table_t* out = <table_t*>fn_malloc((n + WRAP) * sizeof(table_t))
    if out == NULL:
        return NULL
    if step == 1:
        for i in range(n):      # a loop of its own, which vectorizes
            out[i] = <table_t>src[i]
    else:
        for i in range(n):
            out[i] = <table_t>src[i * step]
    for i in range(WRAP):       # (counted round, not i % n: a division each)
        out[n + i] = out[j]
        j = j + 1
        if j == n:
            j = 0
    return out


cdef inline bint same_for_all(const Layout* L, int k) noexcept nogil:
    """Whether operand k is the same for every slice."""
    cdef int j
    for j in range(L.n_kept):
        if L.kept[j].stride[k] != 0:
            return False
    return True


cdef inline float* float_param(const Layout* L, int k, Py_ssize_t n, bint* ok) noexcept nogil:
    """Parameter k as n floats along the run, when it varies along the run
    and is the same for every slice; NULL when it is one value per run (or
    cannot be used: then *ok turns false, or on a failed allocation)."""
    cdef const Axis* inner = &L.red[L.n_red - 1]
    cdef float* out
    if inner.stride[k] == 0:
        return NULL
    if inner.stride[k] != sizeof(double) or L.n_red != 1 or not same_for_all(L, k):
        ok[0] = False
        return NULL
    out = param_table(L, k, n, <float*>NULL)
    if out == NULL:
        ok[0] = False
    return out


cdef void plan_f32(SlicePlan* p) noexcept nogil:
    """Whether (and with which parameter tables) the float32 pass applies:
    x and y contiguous along the run, gamma and beta usable as floats; and
    whether short rows may take it as one run (p.rows_f32: one kept axis
    whose rows follow each other in x and y, gamma and beta the same for
    every row)."""
    cdef const Layout* L = p.L
    cdef const Axis* inner = &L.red[L.n_red - 1]
    cdef Py_ssize_t row_bytes = p.run_len * sizeof(float)
    cdef bint ok = (p.has_y and inner.stride[OP_X] == sizeof(float)
                    and inner.stride[OP_Y] == sizeof(float))
    p.g32 = NULL
    p.b32 = NULL
    p.rows_f32 = False
    if ok:
        p.g32 = float_param(L, OP_G, p.run_len, &ok)
    if ok:
        p.b32 = float_param(L, OP_B, p.run_len, &ok)
    p.f32 = ok
    if not (ok and L.n_kept == 1 and L.n_red == 1 and FN_WF <= 2 * p.run_len
            and row_bytes <= p.row_max
            and L.kept[0].stride[OP_X] == row_bytes and L.kept[0].stride[OP_Y] == row_bytes
            and same_for_all(L, OP_G) and same_for_all(L, OP_B)):
        return
    # One value for every row: a table of it, so that one pass serves.
    if p.g32 == NULL:
        p.g32 = param_table(L, OP_G, p.run_len, <float*>NULL)
    if p.b32 == NULL:
        p.b32 = param_table(L, OP_B, p.run_len, <float*>NULL)
    p.rows_f32 = p.g32 != NULL and p.b32 != NULL


cdef void plan_f64(SlicePlan* p) noexcept nogil:
    """Whether short float64 rows may be normalized as one run (p.rows_f64;
    the same conditions as p.rows_f32) and the tables that takes."""
    cdef const Layout* L = p.L
    cdef const Axis* inner = &L.red[L.n_red - 1]
    cdef Py_ssize_t row_bytes = p.run_len * sizeof(double)
    p.rows_f64 = False
    if not (p.has_y and inner.stride[OP_X] == sizeof(double)
            and inner.stride[OP_Y] == sizeof(double)
            and inner.stride[OP_G] in (0, sizeof(double))
            and inner.stride[OP_B] in (0, sizeof(double))
            and L.n_kept == 1 and L.n_red == 1 and FN_W <= p.run_len
            and row_bytes <= p.row_max
            and L.kept[0].stride[OP_X] == row_bytes and L.kept[0].stride[OP_Y] == row_bytes
            and same_for_all(L, OP_G) and same_for_all(L, OP_B)):
        return
    p.g64 = param_table(L, OP_G, p.run_len, <double*>NULL)
    p.b64 = param_table(L, OP_B, p.run_len, <double*>NULL)
    p.rows_f64 = p.g64 != NULL and p.b64 != NULL


cdef inline void free_plan_f32(SlicePlan* p) noexcept nogil:
    fn_free(p.g32)
    fn_free(p.b32)
    fn_free(p.g64)
    fn_free(p.b64)


cdef inline void prefetch_slice(const SlicePlan* p, Py_ssize_t si) noexcept nogil:
    """Start loading the head of slice si, so that its reads overlap the
    writes of the slice being normalized (up to PREFETCH_BYTES of it)."""
    cdef Odometer s
    cdef const Axis* inner = &p.L.red[p.L.n_red - 1]
    cdef Py_ssize_t nbytes = min(<Py_ssize_t>PREFETCH_BYTES, p.run_len * inner.stride[OP_X]), off
    odo_init(&s, p.L.kept, p.L.n_kept, si)
    for off in range(0, nbytes, 64):
        fn_prefetch_l2(p.L.base[OP_X] + s.off[OP_X] + off)


cdef inline void prefetch_run(const SlicePlan* p, const Odometer* s, const Odometer* r,
                              Py_ssize_t nbytes) noexcept nogil:
    """Start loading the first nbytes of run r of slice s into L2 (a
    slice ahead is too far for L1)."""
    cdef const char* x = run_start(p, s, r, OP_X)
    cdef Py_ssize_t off
    for off in range(0, nbytes, 64):
        fn_prefetch_l2(x + off)


cdef inline Py_ssize_t run_ahead_bytes(const SlicePlan* p, Py_ssize_t si) noexcept nogil:
    """How much of each run of slice si + 1 slice si prefetches (see
    RUN_AHEAD_BYTES): 0 for single runs, runs over IMAGE_RUN_BYTES and the
    last slice."""
    cdef Py_ssize_t run_bytes = p.run_len * p.L.red[p.L.n_red - 1].stride[OP_X]
    if p.n_runs <= 1 or si + 1 >= p.L.n_slices or run_bytes > IMAGE_RUN_BYTES:
        return 0
    return min(<Py_ssize_t>RUN_AHEAD_BYTES, run_bytes)


cdef inline void merge_run(Moments* acc, const char* x, Py_ssize_t n, double mean,
                           double m2, double pivot, in_t* ki) noexcept nogil:
    """Fold a run's moments from rows_moments into acc; a run whose moments
    are not finite (inf, NaN, overflow) is redone Welford's way, as a long
    run would be."""
    cdef Moments m
    m.n = <double>n
    m.mean = mean
    m.m2 = m2
    if mean - mean == 0.0 and m2 - m2 == 0.0:
        m.m2 = max(m2, 0.0)
    else:
        m = scalar_moments(x, sizeof(in_t), n, pivot, ki)
    moments_merge(acc, &m)


cdef Moments short_runs_moments(const SlicePlan* p, const Odometer* s, double pivot,
                                const Odometer* s_next, Py_ssize_t run_ahead,
                                in_t* ki) noexcept nogil:
    """The moments of a slice of several short contiguous runs (channels of
    small NCHW images), FN_W runs at a time (rows_moments), folded in run
    order; each run also prefetches run_ahead bytes of the same run of
    slice s_next.  Run by run, the Welford lanes, their merge and a scalar
    tail cost more than the run's values."""
    cdef const Layout* L = p.L
    cdef Odometer r, r_next
    cdef const char* rows[8]
    cdef double piv[8]
    cdef double mean[8]
    cdef double m2[8]
    cdef Moments acc = moments_empty()
    cdef Py_ssize_t ri = 0
    cdef int l, lanes
    for l in range(FN_W):
        piv[l] = pivot
    odo_init(&r, L.red, L.n_red - 1, 0)
    odo_init(&r_next, L.red, L.n_red - 1, 0)
    while ri < p.n_runs:
        lanes = <int>min(<Py_ssize_t>FN_W, p.n_runs - ri)
        for l in range(FN_W):
            if l < lanes:
                rows[l] = run_start(p, s, &r, OP_X)
                odo_next(&r, L.red, L.n_red - 1)
                if run_ahead > 0:
                    prefetch_run(p, s_next, &r_next, run_ahead)
                    odo_next(&r_next, L.red, L.n_red - 1)
            else:
                rows[l] = rows[0]        # a stand-in, its results unused
        rows_moments(rows, p.run_len, piv, mean, m2, ki)
        for l in range(lanes):
            merge_run(&acc, rows[l], p.run_len, mean[l], m2[l], pivot, ki)
        ri = ri + lanes
    return acc


cdef Coef slice_coef(const SlicePlan* p, Py_ssize_t si, const Odometer* s,
                     in_t* ki) noexcept nogil:
    """The statistics of slice si (recorded) and the coefficients that
    normalize it.  Slices of several runs: the runs lie apart in memory
    (channels of NCHW images), too many streams for the hardware
    prefetchers, so each run of this slice fetches the same run of the next
    one."""
    cdef const Layout* L = p.L
    cdef Odometer r, s_next
    cdef Moments acc = moments_empty(), m
    cdef Py_ssize_t ri, b, run_ahead = 0
    cdef double pivot
    if p.mode == MODE_GIVEN:
        return given(L, s.off[OP_S])
    run_ahead = run_ahead_bytes(p, si)
    if run_ahead > 0:
        odo_init(&s_next, L.kept, L.n_kept, si + 1)
    pivot = slice_pivot(p, s, ki)
    if p.short_runs:
        acc = short_runs_moments(p, s, pivot, &s_next, run_ahead, ki)
    else:
        odo_init(&r, L.red, L.n_red - 1, 0)
        for ri in range(p.n_runs):
            if run_ahead > 0:
                prefetch_run(p, &s_next, &r, run_ahead)
            for b in range(p.n_chunks):
                m = block_moments(p, s, &r, b, pivot, p.x_end, ki)
                moments_merge(&acc, &m)
            odo_next(&r, L.red, L.n_red - 1)
    return finish(acc, pivot, p.mode, p.eps, L, s.off[OP_S])


cdef void slice_whole(const SlicePlan* p, Py_ssize_t si, in_t* ki, out_t* ko) noexcept nogil:
    """Statistics and normalization of slice si by one thread (the slice is
    still in cache for the second pass when it fits).  Into a fresh y
    (L.descend: slices of several runs, see stream_output) slices go last
    first, and so are written, run after run from the last (batch_norm eval
    over (64, 64, 56, 56) allocating, one thread, time / np.copy, when
    that came in: float32 1.73 -> 1.40, float64 1.54 -> 1.36): what comes
    next is then the run before.  Upwards, each run of 4 KiB or
    more of a slice of several is handed the next run (the last, the next
    slice's first) to fetch as it is written: float32 8 KiB ahead of the
    reads, float64 the whole run (see normalize_block, normalize_loop)."""
    cdef const Layout* L = p.L
    cdef Odometer s, r, s_next, r_next
    cdef Coef c
    cdef Py_ssize_t ri, run_ahead = 0, nxt
    cdef const char* ahead = NULL
    cdef bint down = L.descend, hand_on
    odo_init(&s, L.kept, L.n_kept, si)
    c = slice_coef(p, si, &s, ki)
    if not p.has_y:
        return
    nxt = si - 1 if down else si + 1
    if 0 <= nxt < L.n_slices:
        odo_init(&s_next, L.kept, L.n_kept, nxt)
        if p.n_runs > 1:
            # With the statistics given, this is the slice's one look.
            if p.mode == MODE_GIVEN:
                run_ahead = run_ahead_bytes(p, si)
        elif L.red[L.n_red - 1].stride[OP_X] == sizeof(in_t):
            ahead = L.base[OP_X] + s_next.off[OP_X]
        else:
            prefetch_slice(p, nxt)
    if down and p.n_runs > 1:
        # Runs last first too (the maps of an NCHW channel, image after image).
        for ri in range(p.n_runs - 1, -1, -1):
            odo_init(&r, L.red, L.n_red - 1, ri)
            if run_ahead > 0:
                prefetch_run(p, &s_next, &r, run_ahead)
            ahead = NULL
            if ri > 0 and L.red[L.n_red - 1].stride[OP_X] == sizeof(in_t):
                # the run written next, fetched as this one is written
                odo_init(&r_next, L.red, L.n_red - 1, ri - 1)
                ahead = L.base[OP_X] + s.off[OP_X] + r_next.off[OP_X]
            normalize_block(p, &s, &r, 0, p.run_len, c, ahead, True, ki, ko)
        return
    # Runs of 4 KiB and more hand the next run on (shorter ones would fetch
    # nothing of it, and the odometer costs a cropped map of 30 float32
    # values a tenth of its time).
    hand_on = p.n_runs > 1 and p.run_len * <Py_ssize_t>sizeof(in_t) >= 4096
    if hand_on and ahead == NULL and 0 <= nxt < L.n_slices:
        ahead = L.base[OP_X] + s_next.off[OP_X]      # the next slice's first run
    odo_init(&r, L.red, L.n_red - 1, 0)
    if hand_on:
        odo_init(&r_next, L.red, L.n_red - 1, 1)     # the run after r
    for ri in range(p.n_runs):
        if run_ahead > 0:
            prefetch_run(p, &s_next, &r, run_ahead)
        if hand_on and ri + 1 < p.n_runs:
            normalize_block(p, &s, &r, 0, p.run_len, c, run_start(p, &s, &r_next, OP_X),
                            down, ki, ko)
            odo_next(&r_next, L.red, L.n_red - 1)
        else:
            normalize_block(p, &s, &r, 0, p.run_len, c, ahead, down, ki, ko)
        odo_next(&r, L.red, L.n_red - 1)


cdef bint interleaved(const SlicePlan* p, in_t* ki, out_t* ko) noexcept nogil:
    """Whether the output may go image by image: float32 (the float32 pass)
    or float64 in and out, one kept axis whose slices' runs interleave (run
    r of slice si + 1 starts where run r of slice si ends, in x and in y:
    the channels of NCHW images), gamma and beta one value per slice."""
    cdef const Layout* L = p.L
    cdef const Axis* inner = &L.red[L.n_red - 1]
    cdef Py_ssize_t row_bytes = p.run_len * sizeof(in_t)
    cdef int a
    if in_t is float and out_t is float:
        if not (p.f32 and p.run_len >= FN_WF and p.g32 == NULL and p.b32 == NULL):
            return False
    elif in_t is double and out_t is double:
        if not (p.has_y and p.run_len >= FN_W and inner.stride[OP_X] == sizeof(double)
                and inner.stride[OP_Y] == sizeof(double)):
            return False
    else:
        return False
    if not (L.n_kept == 1 and p.n_runs > 1 and row_bytes <= IMAGE_RUN_BYTES
            and L.kept[0].stride[OP_X] == row_bytes and L.kept[0].stride[OP_Y] == row_bytes):
        return False
    for a in range(L.n_red):
        if L.red[a].stride[OP_G] != 0 or L.red[a].stride[OP_B] != 0:
            return False
    return True


cdef void interleaved_block_stats(const SlicePlan* p, Py_ssize_t blk, Py_ssize_t per_block,
                                  const double* pivots, Moments* acc,
                                  in_t* ki) noexcept nogil:
    """The moments of every slice over the images blk * per_block .. (a
    block of run indices), in acc[slice]: memory in address order, each
    image's runs FN_W at a time where they are short (rows_moments), else
    run by run."""
    cdef const Layout* L = p.L
    cdef Odometer r, s
    cdef Py_ssize_t r0 = blk * per_block, r1 = min(r0 + per_block, p.n_runs)
    cdef Py_ssize_t n = p.run_len, row_bytes = n * sizeof(in_t), ri, si, b
    cdef const char* rows[8]
    cdef double piv[8]
    cdef double mean[8]
    cdef double m2[8]
    cdef const char* x
    cdef Moments m
    cdef int l, lanes
    for si in range(L.n_slices):
        acc[si] = moments_empty()
    odo_init(&r, L.red, L.n_red - 1, r0)
    for ri in range(r0, r1):
        x = L.base[OP_X] + r.off[OP_X]
        if p.short_runs:
            si = 0
            while si < L.n_slices:
                lanes = <int>min(<Py_ssize_t>FN_W, L.n_slices - si)
                for l in range(FN_W):
                    rows[l] = x + (si + min(l, lanes - 1)) * row_bytes
                    piv[l] = pivots[si + min(l, lanes - 1)]
                # (batch_norm over (256, 512, 7, 7), one thread, time / a
                # copy: float64 2.07 -> 1.79, float32 2.52 -> 2.45)
                fetch_ahead_of(rows[0], lanes * row_bytes, x + L.n_slices * row_bytes)
                rows_moments(rows, n, piv, mean, m2, ki)
                for l in range(lanes):
                    merge_run(&acc[si + l], rows[l], n, mean[l], m2[l], piv[l], ki)
                si = si + lanes
        else:
            odo_init(&s, L.kept, L.n_kept, 0)
            for si in range(L.n_slices):
                for b in range(p.n_chunks):
                    # an image's runs follow each other
                    m = block_moments(p, &s, &r, b, pivots[si], x + L.n_slices * row_bytes, ki)
                    moments_merge(&acc[si], &m)
                odo_next(&s, L.kept, L.n_kept)
        odo_next(&r, L.red, L.n_red - 1)


cdef void interleaved_finish(const SlicePlan* p, Py_ssize_t si, Py_ssize_t n_blocks,
                             const double* pivots, const Moments* blocks,
                             Coef* coefs) noexcept nogil:
    """Slice si's moments over the blocks, folded in order, finished."""
    cdef Odometer s
    cdef Moments acc = blocks[si]
    cdef Py_ssize_t blk
    for blk in range(1, n_blocks):
        moments_merge(&acc, &blocks[blk * p.L.n_slices + si])
    odo_init(&s, p.L.kept, p.L.n_kept, si)
    coefs[si] = finish(acc, pivots[si], p.mode, p.eps, p.L, s.off[OP_S])


cdef int interleaved_coefs(const SlicePlan* p, int nthreads, Coef* coefs,
                           in_t* ki) noexcept nogil:
    """Every slice's coefficients, the statistics taken image-block by
    image-block (the blocks fixed by the shape alone, so that the thread
    count changes no bit)."""
    cdef const Layout* L = p.L
    cdef Py_ssize_t n = L.n_slices, si, i
    cdef Py_ssize_t fit = IMAGE_STATE_BYTES // (n * <Py_ssize_t>sizeof(Moments))
    cdef Py_ssize_t n_blocks = max(<Py_ssize_t>1,
                                   min(p.n_runs, min(<Py_ssize_t>IMAGE_BLOCKS, fit)))
    cdef Py_ssize_t per_block = (p.n_runs + n_blocks - 1) // n_blocks
    cdef Odometer s
    cdef double* pivots
    cdef Moments* blocks
    odo_init(&s, L.kept, L.n_kept, 0)
    if p.mode == MODE_GIVEN:
        for si in range(n):
            coefs[si] = given(L, s.off[OP_S])
            odo_next(&s, L.kept, L.n_kept)
        return 0
    n_blocks = (p.n_runs + per_block - 1) // per_block
    pivots = <double*>fn_malloc(n * sizeof(double))
    blocks = <Moments*>fn_malloc(n_blocks * n * sizeof(Moments))
    if pivots == NULL or blocks == NULL:
        fn_free(pivots)
        fn_free(blocks)
        return -1
    for si in range(n):
        pivots[si] = slice_pivot(p, &s, ki)
        odo_next(&s, L.kept, L.n_kept)
    if nthreads > 1:
        for i in prange(n_blocks, num_threads=nthreads, schedule="runtime"):
            interleaved_block_stats(p, i, per_block, pivots, blocks + i * n, ki)
        for i in prange(n, num_threads=nthreads, schedule="static"):
            interleaved_finish(p, i, n_blocks, pivots, blocks, coefs)
    else:
        for i in range(n_blocks):
            interleaved_block_stats(p, i, per_block, pivots, blocks + i * n, ki)
        for i in range(n):
            interleaved_finish(p, i, n_blocks, pivots, blocks, coefs)
    fn_free(pivots)
    fn_free(blocks)
    return 0


cdef bint fold_f32(const SlicePlan* p, const Coef* coefs, float* m32, float* s32,
                   float* e32) noexcept nogil:
    """Every slice's float32 coefficients with its gain and bias folded in:
    y = (x - m) * s - e; false where float32 cannot hold one."""
    cdef const Layout* L = p.L
    cdef Odometer s
    cdef Py_ssize_t si
    cdef double g, b, sc, e
    odo_init(&s, L.kept, L.n_kept, 0)
    for si in range(L.n_slices):
        if not coef_f32(coefs[si], &m32[si], &s32[si], &e32[si]):
            return False
        g = (<const double*>(L.base[OP_G] + s.off[OP_G]))[0]
        b = (<const double*>(L.base[OP_B] + s.off[OP_B]))[0]
        sc = coefs[si].scale * g
        e = (coefs[si].pivot + coefs[si].shift - <double>m32[si]) * sc - b
        if not (fabs(sc) < 1e30 and fabs(e) < 1e30):   # a zero gain is fine
            return False
        s32[si] = <float>sc
        e32[si] = <float>e
        odo_next(&s, L.kept, L.n_kept)
    return True


cdef void interleaved_image(const SlicePlan* p, Py_ssize_t ri, const float* m32,
                            const float* s32, const float* e32, const float* ones,
                            const float* zeros) noexcept nogil:
    """The output of run index ri (an image): every slice's run, one after
    the other, as one run of rows with per-row coefficients."""
    cdef Odometer r
    odo_init(&r, p.L.red, p.L.n_red - 1, ri)
    fn_normalize_rows_f32(<const float*>(p.L.base[OP_X] + r.off[OP_X]),
                          <float*>(p.L.base[OP_Y] + r.off[OP_Y]), p.L.n_slices, p.run_len,
                          ones, zeros, m32, s32, e32, p.L.stream)


cdef void fold_f64(const SlicePlan* p, const Coef* coefs, double* m, double* k2,
                   double* k0) noexcept nogil:
    """Every slice's float64 coefficients with its gain and bias folded in:
    y = (x - m) * k2 + k0 (fn_affine_rows_f64).  m is pivot + shift (the
    mean) rounded, and the rounding's remainder goes into k0, so that x - m
    is exact near the mean whatever the offset (with the statistics given
    the pivot is 0 and the shift the whole mean)."""
    cdef const Layout* L = p.L
    cdef Odometer s
    cdef Py_ssize_t si
    cdef double g, piv, sh, t, rem
    odo_init(&s, L.kept, L.n_kept, 0)
    for si in range(L.n_slices):
        g = (<const double*>(L.base[OP_G] + s.off[OP_G]))[0]
        piv = coefs[si].pivot
        sh = coefs[si].shift
        m[si] = piv + sh
        t = m[si] - piv                           # TwoSum: piv + sh = m + rem
        rem = (piv - (m[si] - t)) + (sh - t)
        k2[si] = coefs[si].scale * g
        k0[si] = (<const double*>(L.base[OP_B] + s.off[OP_B]))[0] - rem * k2[si]
        odo_next(&s, L.kept, L.n_kept)


cdef void interleaved_image_f64(const SlicePlan* p, Py_ssize_t ri,
                                const double* k) noexcept nogil:
    """interleaved_image in float64: k holds m, k2, k0, n_slices + 1 each."""
    cdef Odometer r
    cdef Py_ssize_t n = p.L.n_slices + 1
    odo_init(&r, p.L.red, p.L.n_red - 1, ri)
    fn_affine_rows_f64(<const double*>(p.L.base[OP_X] + r.off[OP_X]), NULL,
                       <double*>(p.L.base[OP_Y] + r.off[OP_Y]), p.L.n_slices, p.run_len,
                       k, NULL, k + n, k + 2 * n, p.L.stream)


cdef void slice_output(const SlicePlan* p, Py_ssize_t si, Coef c, in_t* ki,
                       out_t* ko) noexcept nogil:
    cdef Odometer s, r
    cdef Py_ssize_t ri
    odo_init(&s, p.L.kept, p.L.n_kept, si)
    odo_init(&r, p.L.red, p.L.n_red - 1, 0)
    for ri in range(p.n_runs):
        normalize_block(p, &s, &r, 0, p.run_len, c, NULL, False, ki, ko)
        odo_next(&r, p.L.red, p.L.n_red - 1)


cdef int images_f64(const SlicePlan* p, int nthreads, const Coef* coefs) noexcept nogil:
    """The float64 output image by image (fn_affine_rows_f64)."""
    cdef Py_ssize_t n = p.L.n_slices + 1, i
    cdef double* k = <double*>fn_calloc(3 * n, sizeof(double))
    if k == NULL:
        return -1
    fold_f64(p, coefs, k, k + n, k + 2 * n)
    with parallel(num_threads=nthreads):
        for i in prange(p.n_runs, schedule="runtime"):
            interleaved_image_f64(p, i, k)
        fn_sfence()
    fn_free(k)
    return 0


cdef int images_f32(const SlicePlan* p, int nthreads, const Coef* coefs, in_t* ki,
                    out_t* ko) noexcept nogil:
    """The float32 output image by image (fn_normalize_rows_f32, gain and
    bias folded into the coefficients, tables of ones and zeros along the
    run); slice by slice where float32 cannot hold a slice's coefficients."""
    cdef Py_ssize_t n = p.L.n_slices, i
    cdef float* m32 = <float*>fn_malloc(3 * n * sizeof(float))
    cdef float* ones = <float*>fn_malloc(2 * (p.run_len + WRAP) * sizeof(float))
    cdef float* zeros
    cdef bint ok
    if m32 == NULL or ones == NULL:
        fn_free(m32)
        fn_free(ones)
        return -1
    zeros = ones + p.run_len + WRAP
    for i in range(p.run_len + WRAP):
        ones[i] = 1.0
        zeros[i] = 0.0
    ok = fold_f32(p, coefs, m32, m32 + n, m32 + 2 * n)
    with parallel(num_threads=nthreads):
        if ok:
            for i in prange(p.n_runs, schedule="runtime"):
                interleaved_image(p, i, m32, m32 + n, m32 + 2 * n, ones, zeros)
        else:
            for i in prange(n, schedule="runtime"):
                slice_output(p, i, coefs[i], ki, ko)
        fn_sfence()
    fn_free(m32)
    fn_free(ones)
    return 0


cdef int interleaved_kernel(const SlicePlan* p, int nthreads, in_t* ki,
                            out_t* ko) noexcept nogil:
    """Slices that interleave (see interleaved): the statistics image block
    by image block, then the output image by image, each image's runs as one
    run, read and written in address order.  Slice by slice, every image
    was a stream of its own, read twice: batch norm over (64, 512, 14, 14)
    took 3.1x a copy of its bytes with the statistics given."""
    cdef Coef* coefs = <Coef*>fn_malloc(p.L.n_slices * sizeof(Coef))
    cdef int rc = -1
    if coefs != NULL and interleaved_coefs(p, nthreads, coefs, ki) == 0:
        if in_t is double and out_t is double:
            rc = images_f64(p, nthreads, coefs)
        else:
            rc = images_f32(p, nthreads, coefs, ki, ko)
    fn_free(coefs)
    return rc


cdef void short_slices(const SlicePlan* p, Py_ssize_t first, Py_ssize_t count, in_t* ki,
                       out_t* ko) noexcept nogil:
    """Slices first .. first + count, each one short run, FN_W at a time: the
    runs are copied side by side (value j of every slice in one vector), so
    one vector Welford update serves FN_W slices; then each slice is
    finished and normalized.  A slice's own way (lanes along the slice,
    merged) costs more per slice than its few values do: about 100 ns per
    slice of 8 values."""
    cdef const Layout* L = p.L
    cdef const Axis* inner = &L.red[L.n_red - 1]
    cdef Py_ssize_t n = p.run_len, sx = inner.stride[OP_X], i = first, j
    cdef double buf[SHORT_SLICE_MAX * FN_W]
    cdef double piv[FN_W]
    cdef double lane_mean[FN_W]
    cdef double lane_m2[FN_W]
    cdef Odometer at[FN_W]
    cdef Odometer s, r
    cdef fn_vd mean, m2
    cdef Moments m
    cdef Coef c
    cdef const char* xp
    cdef int l, lanes, k
    odo_init(&s, L.kept, L.n_kept, first)
    odo_init(&r, L.red, L.n_red - 1, 0)
    while i < first + count:
        lanes = <int>min(<Py_ssize_t>FN_W, first + count - i)
        for l in range(FN_W):
            if l < lanes:
                # Only the offsets: normalize_block and finish read no more
                # (the whole odometer, indices included, is ten times larger).
                for k in range(N_OPS):
                    at[l].off[k] = s.off[k]
                xp = L.base[OP_X] + s.off[OP_X]
                piv[l] = pick_pivot(sload(xp, ki), ki)
                for j in range(n):
                    buf[j * FN_W + l] = sload(xp + j * sx, ki) - piv[l]
                odo_next(&s, L.kept, L.n_kept)
            else:
                piv[l] = 0.0
                for j in range(n):
                    buf[j * FN_W + l] = 0.0
        mean = fn_zero()
        m2 = fn_zero()
        for j in range(n):
            welford_step(fn_load_f64(buf + j * FN_W), fn_set1(1.0 / <double>(j + 1)),
                         &mean, &m2)
        fn_store_f64(lane_mean, mean)
        fn_store_f64(lane_m2, m2)
        m.n = <double>n
        for l in range(lanes):
            m.mean = lane_mean[l]
            m.m2 = lane_m2[l]
            c = finish(m, piv[l], p.mode, p.eps, L, at[l].off[OP_S])
            if p.has_y:
                normalize_block(p, &at[l], &r, 0, n, c, NULL, False, ki, ko)
        i = i + lanes


cdef inline bint coef_f32(Coef c, float* m, float* s, float* e) noexcept nogil:
    """A slice's coefficients for the float32 pass (see normalize_f32); false
    where float32 cannot hold them with room to spare."""
    cdef double mean = c.pivot + c.shift
    m[0] = <float>mean
    s[0] = <float>c.scale
    e[0] = <float>((mean - <double>m[0]) * c.scale)
    return fabs(mean) < 1e30 and 1e-30 < c.scale < 1e30


cdef inline bint lanes_plain(const double* mean, const double* m2) noexcept nogil:
    """Whether FN_W slices' moments are finite and their m2 not negative:
    what record takes as it is (others are clamped or redone)."""
    cdef int l
    for l in range(FN_W):
        if not (m2[l] >= 0.0 and m2[l] - m2[l] == 0.0 and mean[l] - mean[l] == 0.0):
            return False
    return True


cdef inline bint lanes_coef_f64(const double* piv, const double* mean, const double* m2,
                                const double* scale, int mode, double* p64, double* h64,
                                double* s64) noexcept nogil:
    """The coefficients of FN_W slices at once, as record gives each, where
    lanes_plain holds; false (nothing written) otherwise."""
    if not lanes_plain(mean, m2):
        return False
    if mode == MODE_RMS:
        fn_store_f64(p64, fn_zero())           # rms_norm does not centre
        fn_store_f64(h64, fn_zero())
    else:
        fn_store_f64(p64, fn_load_f64(piv))
        fn_store_f64(h64, fn_load_f64(mean))
    fn_store_f64(s64, fn_load_f64(scale))
    return True


cdef inline bint lanes_coef_f32(const double* piv, const double* mean, const double* m2,
                                const double* scale, int mode, float* m32, float* s32,
                                float* e32) noexcept nogil:
    """The float32 coefficients of FN_W slices at once, the bits that
    record and coef_f32 give each, where lanes_plain holds and float32
    holds every slice's coefficients; false (nothing usable) otherwise."""
    cdef fn_vd mv, sc = fn_load_f64(scale)
    cdef int l
    if not lanes_plain(mean, m2):
        return False
    for l in range(FN_W):
        if not (fabs(piv[l] + mean[l]) < 1e30 and 1e-30 < scale[l] < 1e30):
            return False
    if mode == MODE_RMS:
        mv = fn_zero()           # rms_norm does not centre
    else:
        mv = fn_add(fn_load_f64(piv), fn_load_f64(mean))
    fn_store_f32(m32, mv)
    fn_store_f32(s32, sc)
    fn_store_f32(e32, fn_mul(fn_sub(mv, fn_load_f32(m32)), sc))
    return True


cdef void short_rows(const SlicePlan* p, Py_ssize_t first, Py_ssize_t count, in_t* ki,
                     out_t* ko) noexcept nogil:
    """Slices first .. first + count (p.batch at most), each one short
    contiguous run.  Statistics FN_W slices at a time: their moments
    (rows_moments), scales and, with no statistics to write, coefficients
    (lanes_coef_f32/_f64) in vectors, one lane per slice.  Output: rows
    that follow each other in memory (p.rows_f32) in one float32 pass over
    the whole item, which is still in L2 (fn_normalize_rows_f32); others
    slice by slice.  Done slice by slice, a run of 32 floats cost four to
    five times its copy: two reductions across a vector, a division and a
    square root in a chain, a call and a misaligned head and tail."""
    cdef const Layout* L = p.L
    cdef Py_ssize_t n = p.run_len, i = 0, j
    cdef const char* rows[8]
    cdef double piv[8]
    cdef double mean[8]
    cdef double m2[8]
    cdef double scale[8]
    cdef Coef coefs[SHORT_BATCH]
    cdef float m32[SHORT_BATCH]
    cdef float s32[SHORT_BATCH]
    cdef float e32[SHORT_BATCH]
    cdef double p64[SHORT_BATCH]
    cdef double h64[SHORT_BATCH]
    cdef double s64[SHORT_BATCH]
    cdef Py_ssize_t off_s[8]
    cdef Odometer s, r
    cdef fn_vd var, mv, den
    cdef Moments m
    cdef bint whole = p.rows_f32 or p.rows_f64
    cdef bint quick = (whole and L.stat[0] == NULL
                       and (p.mode == MODE_CENTER or p.mode == MODE_RMS))
    cdef bint done
    cdef Py_ssize_t n_whole = count   # rows with float32 coefficients (rows_f32)
    cdef const char* x0
    cdef char* y0
    cdef int l, lanes, k
    odo_init(&s, L.kept, L.n_kept, first)
    odo_init(&r, L.red, L.n_red - 1, 0)
    x0 = L.base[OP_X] + s.off[OP_X]
    y0 = L.base[OP_Y] + s.off[OP_Y]
    while i < count:
        lanes = <int>min(<Py_ssize_t>FN_W, count - i)
        for l in range(FN_W):
            if l < lanes:
                rows[l] = L.base[OP_X] + s.off[OP_X]
                off_s[l] = s.off[OP_S]
                piv[l] = pick_pivot(sload(rows[l], ki), ki)
                odo_next(&s, L.kept, L.n_kept)
            else:
                rows[l] = rows[0]        # a stand-in, its results unused
                piv[l] = piv[0]
        if p.rows_end != NULL:
            # the rows STATS_AHEAD bytes on (those that follow in memory
            # are read next)
            fetch_ahead_of(rows[0], lanes * n * <Py_ssize_t>sizeof(in_t), p.rows_end)
        if p.mode != MODE_GIVEN:
            rows_moments(rows, n, piv, mean, m2, ki)
            if p.mode != MODE_STATS:
                var = fn_div(fn_load_f64(m2), fn_set1(<double>n))
                if p.mode == MODE_RMS:
                    mv = fn_add(fn_load_f64(piv), fn_load_f64(mean))
                    den = fn_add(fn_fma(mv, mv, var), fn_set1(p.eps))
                else:
                    den = fn_add(var, fn_set1(p.eps))
                fn_store_f64(scale, fn_div(fn_set1(1.0), fn_sqrt(den)))
            else:
                fn_store_f64(scale, fn_set1(1.0))
            # No statistics to write and the whole item in one pass: the
            # coefficients of the FN_W slices in vectors (slice by slice they
            # cost rows of 32 floats a fifth of their time).
            if quick and whole:
                if p.rows_f32:
                    done = lanes_coef_f32(piv, mean, m2, scale, p.mode,
                                          &m32[i], &s32[i], &e32[i])
                else:
                    done = lanes_coef_f64(piv, mean, m2, scale, p.mode,
                                          &p64[i], &h64[i], &s64[i])
                if done:
                    i = i + lanes
                    continue
        for l in range(lanes):
            j = i + l
            if p.mode == MODE_GIVEN:
                coefs[j] = given(L, off_s[l])
            else:
                m.n = <double>n
                m.mean = mean[l]
                m.m2 = m2[l]
                if m.mean - m.mean == 0.0 and m.m2 - m.m2 == 0.0:
                    # q >= e^2 / n exactly; rounding must not make it negative.
                    m.m2 = max(m.m2, 0.0)
                    coefs[j] = record(m, piv[l], p.mode, L, off_s[l],
                                      scale[l] if m.m2 == m2[l]
                                      else rstd_of(0.0, piv[l] + m.mean, p.mode, p.eps))
                else:
                    # inf, NaN or overflow: Welford's way, as for a long run
                    m = scalar_moments(rows[l], sizeof(in_t), n, piv[l], ki)
                    coefs[j] = finish(m, piv[l], p.mode, p.eps, L, off_s[l])
            if p.rows_f32 and whole:
                whole = coef_f32(coefs[j], &m32[j], &s32[j], &e32[j])
                if not whole:
                    # Rows before this one have their float32 coefficients
                    # (some of them only those); this one and the rest go
                    # row by row.
                    n_whole = j
            elif p.rows_f64:
                p64[j] = coefs[j].pivot
                h64[j] = coefs[j].shift
                s64[j] = coefs[j].scale
        i = i + lanes
    if not p.has_y:
        return
    if in_t is float and out_t is float:
        if p.rows_f32 and n_whole > 0:
            fn_normalize_rows_f32(<const float*>x0, <float*>y0, n_whole, n, p.g32, p.b32,
                                  m32, s32, e32, L.stream)
            if whole:
                return
    if in_t is double and out_t is double:
        if whole:
            fn_normalize_rows_f64(<const double*>x0, <double*>y0, count, n, p.g64, p.b64,
                                  p64, h64, s64, L.stream)
            return
    if not p.rows_f32:
        n_whole = 0
    odo_init(&s, L.kept, L.n_kept, first + n_whole)
    for j in range(n_whole, count):
        normalize_block(p, &s, &r, 0, n, coefs[j], NULL, False, ki, ko)
        odo_next(&s, L.kept, L.n_kept)


cdef void slice_item_stats(const SlicePlan* p, Py_ssize_t item, in_t* ki) noexcept nogil:
    """Items mode, pass 1: the moments of one (slice, run, block)."""
    cdef Odometer s, r
    cdef Py_ssize_t per_slice = p.n_runs * p.n_chunks
    cdef Py_ssize_t si = item // per_slice, rest = item % per_slice
    odo_init(&s, p.L.kept, p.L.n_kept, si)
    odo_init(&r, p.L.red, p.L.n_red - 1, rest // p.n_chunks)
    p.blocks[item] = block_moments(p, &s, &r, rest % p.n_chunks, p.coefs[si].pivot, NULL, ki)


cdef void slice_item_normalize(const SlicePlan* p, Py_ssize_t item, in_t* ki, out_t* ko) noexcept nogil:
    """Items mode, pass 2: normalize one (slice, run, block)."""
    cdef Odometer s, r
    cdef Py_ssize_t per_slice = p.n_runs * p.n_chunks
    cdef Py_ssize_t si = item // per_slice, rest = item % per_slice
    cdef Py_ssize_t start = (rest % p.n_chunks) * CHUNK
    odo_init(&s, p.L.kept, p.L.n_kept, si)
    odo_init(&r, p.L.red, p.L.n_red - 1, rest // p.n_chunks)
    normalize_block(p, &s, &r, start, min(<Py_ssize_t>CHUNK, p.run_len - start),
                    p.coefs[si], NULL, False, ki, ko)
    fn_sfence()


cdef inline void short_item(const SlicePlan* p, int way, Py_ssize_t i, in_t* ki,
                            out_t* ko) noexcept nogil:
    """Work item i of a short way: p.batch slices from i * p.batch."""
    cdef Py_ssize_t first = i * p.batch
    cdef Py_ssize_t count = min(p.batch, p.L.n_slices - first)
    if way == SHORT_ROWS:
        short_rows(p, first, count, ki, ko)
    else:
        short_slices(p, first, count, ki, ko)


cdef const char* contiguous_end(const Layout* L, Py_ssize_t n_runs, in_t* ki) noexcept nogil:
    """The end of x when its slices are single runs that follow each other
    in memory (C-ordered rows), else NULL."""
    cdef Py_ssize_t extent
    cdef int a
    if n_runs != 1 or L.red[L.n_red - 1].stride[OP_X] != sizeof(in_t):
        return NULL
    extent = L.red[L.n_red - 1].size * <Py_ssize_t>sizeof(in_t)
    for a in range(L.n_kept - 1, -1, -1):
        if L.kept[a].stride[OP_X] != extent:
            return NULL
        extent = extent * L.kept[a].size
    return L.base[OP_X] + extent


cdef int slices_kernel(const Layout* L, int mode, double eps, bint has_y, int nthreads,
                       in_t* ki, out_t* ko) noexcept nogil:
    cdef SlicePlan p
    cdef int short_way = 0
    cdef Py_ssize_t cached_bytes, cached_row
    cdef bint down
    cdef Py_ssize_t i, n_items, si, per_slice
    cdef Odometer s
    cdef Moments acc
    cdef int a
    p.L = L
    p.mode = mode
    p.eps = eps
    p.has_y = has_y
    p.run_len = L.red[L.n_red - 1].size
    p.n_runs = 1
    for a in range(L.n_red - 1):
        p.n_runs *= L.red[a].size
    p.n_chunks = (p.run_len + CHUNK - 1) // CHUNK
    p.short_runs = (p.n_runs > 1 and mode != MODE_GIVEN and p.run_len >= SHORT_RUN_MIN
                    and p.run_len * sizeof(in_t) <= SHORT_ROW_BYTES
                    and L.red[L.n_red - 1].stride[OP_X] == sizeof(in_t))
    p.blocks = NULL
    p.coefs = NULL
    p.f32 = False
    p.g32 = NULL
    p.b32 = NULL
    p.rows_f32 = False
    p.rows_f64 = False
    p.g64 = NULL
    p.b64 = NULL
    # (Into a fresh y slices go last first: their statistics fetch within
    # the slice.  The short ways go upwards whatever y is.)
    p.rows_end = contiguous_end(L, p.n_runs, ki)
    p.x_end = NULL if L.descend else p.rows_end
    p.row_max = SHORT_ROW_BYTES
    p.batch = SHORT_BATCH
    cached_bytes, cached_row = CACHED_BYTES, CACHED_ROW_BYTES
    if in_t is double:
        cached_bytes, cached_row = CACHED_BYTES_F64, CACHED_ROW_BYTES_F64
    if p.n_runs == 1 and L.n_slices * p.run_len * <Py_ssize_t>sizeof(in_t) <= cached_bytes:
        # Nothing for the short ways to fetch ahead in cache: the requests
        # cost layer_norm of (32, 768) float32 with gain and bias 7.23
        # against 6.67 us, (256, 1024) 51.6 against 45.8, mean_var (256,
        # 1024) 29.9 against 23.1.
        p.rows_end = NULL
        if mode != MODE_RMS:
            p.row_max = cached_row
            # whole groups of FN_W rows (a group of fewer costs as much)
            p.batch = (CACHED_BATCH_BYTES // (p.run_len * <Py_ssize_t>sizeof(in_t))
                       // FN_W * FN_W)
            p.batch = min(<Py_ssize_t>SHORT_BATCH, max(<Py_ssize_t>FN_W, p.batch))
    if in_t is float and out_t is float:
        plan_f32(&p)
    if in_t is double and out_t is double:
        plan_f64(&p)

    if interleaved(&p, ki, ko):
        i = interleaved_kernel(&p, nthreads, ki, ko)
        free_plan_f32(&p)
        return <int>i

    # Short slices take a way of their own whatever the thread count (so
    # that the thread count never changes a bit).
    if (p.n_runs == 1 and p.run_len >= SHORT_ROW_MIN
            and p.run_len * <Py_ssize_t>sizeof(in_t) <= p.row_max
            and L.red[L.n_red - 1].stride[OP_X] == sizeof(in_t)):
        short_way = SHORT_ROWS
    elif p.n_runs == 1 and p.run_len <= SHORT_SLICE_MAX and mode != MODE_GIVEN:
        short_way = SHORT_SLICES
    # Into a fresh y, slices go last first (slice_whole).
    down = L.descend
    if short_way != 0 or p.short_runs or nthreads <= 1 or L.n_slices >= 2 * nthreads:
        # Short slices, or enough for every thread: each takes whole slices.
        # A thread orders its streamed stores once, after its last slice (a
        # fence per slice cost rows of 64 values a third of their time).
        if short_way != 0:
            n_items = (L.n_slices + p.batch - 1) // p.batch
            if nthreads > 1:
                with parallel(num_threads=nthreads):
                    for i in prange(n_items, schedule="runtime"):
                        short_item(&p, short_way, i, ki, ko)
                    fn_sfence()
            else:
                for i in range(n_items):
                    short_item(&p, short_way, i, ki, ko)
                fn_sfence()
        elif nthreads > 1:
            with parallel(num_threads=nthreads):
                for i in prange(L.n_slices, schedule="runtime"):
                    slice_whole(&p, L.n_slices - 1 - i if down else i, ki, ko)
                fn_sfence()
        else:
            for i in range(L.n_slices):
                slice_whole(&p, L.n_slices - 1 - i if down else i, ki, ko)
            fn_sfence()
        free_plan_f32(&p)
        return 0

    # A few long slices: split them into (run, block) items.  The items of a
    # slice are folded in the same order as slice_whole folds them, so both
    # ways give the same bits.
    per_slice = p.n_runs * p.n_chunks
    n_items = L.n_slices * per_slice
    p.coefs = <Coef*>fn_malloc(L.n_slices * sizeof(Coef))
    if p.coefs == NULL:
        free_plan_f32(&p)
        return -1
    if mode != MODE_GIVEN:
        p.blocks = <Moments*>fn_malloc(n_items * sizeof(Moments))
        if p.blocks == NULL:
            fn_free(p.coefs)
            free_plan_f32(&p)
            return -1
        for si in range(L.n_slices):
            odo_init(&s, L.kept, L.n_kept, si)
            p.coefs[si].pivot = slice_pivot(&p, &s, ki)
        for i in prange(n_items, num_threads=nthreads, schedule="runtime"):
            slice_item_stats(&p, i, ki)
    for si in range(L.n_slices):
        odo_init(&s, L.kept, L.n_kept, si)
        if mode == MODE_GIVEN:
            p.coefs[si] = given(L, s.off[OP_S])
            continue
        acc = moments_empty()
        for i in range(si * per_slice, (si + 1) * per_slice):
            moments_merge(&acc, &p.blocks[i])
        p.coefs[si] = finish(acc, p.coefs[si].pivot, mode, eps, L, s.off[OP_S])
    if has_y:
        for i in prange(n_items, num_threads=nthreads, schedule="runtime"):
            slice_item_normalize(&p, i, ki, ko)
    fn_free(p.blocks)
    fn_free(p.coefs)
    free_plan_f32(&p)
    return 0


# ---------------------------------------------------------------------------
# COLUMNS: the innermost axis is kept.  Columns are cut into tiles of
# COL_TILE, the rows (all reduced axes) into blocks.  A statistics item (tile,
# block) runs a Welford update per column, vectorized across the columns, in
# strips whose accumulators stay in registers while they sweep down the rows.
# The output items are blocks of whole rows, written tile after tile, so that
# memory is read and written in address order (in float32, groups of a few
# rows, chunk of columns after chunk).

cdef struct ColumnPlan:
    const Layout* L
    int mode
    double eps
    Py_ssize_t n_cols         # length of the vectorized kept axis
    Py_ssize_t n_outer        # product of the other kept axes
    Py_ssize_t n_tiles
    Py_ssize_t n_groups       # n_outer * n_tiles
    Py_ssize_t n_rows         # product of the reduced axes
    Py_ssize_t rows_per_block # statistics items: a tile's rows in blocks
    Py_ssize_t n_blocks
    Py_ssize_t finish_pieces  # pieces of FINISH_COLS columns per tile (column_finish)
    Py_ssize_t rows_per_sweep # rows of a tile that column_rows_stats keeps in L2
    Py_ssize_t rows_per_out   # output items: whole rows of an outer index
    Py_ssize_t n_out_blocks   #   in blocks, every tile of a row in turn
    bint prefetch             # rows are apart in memory: prefetch them
    bint line_start           # x is larger than the caches: strips start
                              # at a line where they can (line_head)
    double* state             # per item: mean, m2 (STATE_STRIDE doubles; twice
                              # that for float16/float32 blocks of more than
                              # SUM_ROWS rows: the segments' moments so far)
    Py_ssize_t state_stride   # doubles per item
    double* coef              # per group: pivot, shift, scale (COEF_STRIDE doubles)
    bint f32                  # float32 data and output, columns contiguous:
                              # the normalization pass runs in float32...
    bint fold                 # ...with gain and bias folded into the column
                              # coefficients (they are the same for every row)
    float* coef32             # per group: mean, scale, rest in float32
                              # (COEF32_STRIDE floats; see column_coef32)...
    char* ok32                # ...and whether float32 holds them
    bint periodic             # f32 and fold, one tile, rows that follow each
                              # other: a block of rows is one run...
    double* per               # ...and for other types (one outer index):
                              # pivot, shift, scale * gain, bias per column,
                              # each continued periodically for a vector


cdef struct Tile:
    Odometer outer            # offsets of the outer kept index
    Py_ssize_t group          # outer index * n_tiles + tile
    Py_ssize_t c0             # first column
    Py_ssize_t width          # columns in this tile
    double* pivot
    double* shift
    double* scale


cdef inline void tile_move(const ColumnPlan* p, Tile* t, Py_ssize_t j) noexcept nogil:
    """t, a tile of some outer index, made that index's tile j."""
    cdef double* base
    t.group = t.group - t.group % p.n_tiles + j
    base = p.coef + t.group * COEF_STRIDE
    t.c0 = j * COL_TILE
    t.width = min(<Py_ssize_t>COL_TILE, p.n_cols - t.c0)
    t.pivot = base
    t.shift = base + COL_TILE + PAD
    t.scale = base + 2 * (COL_TILE + PAD)


cdef inline void tile_of(const ColumnPlan* p, Py_ssize_t group, Tile* t) noexcept nogil:
    odo_init(&t.outer, p.L.kept, p.L.n_kept - 1, group // p.n_tiles)
    t.group = group
    tile_move(p, t, group % p.n_tiles)


cdef inline const char* col_ptr(const ColumnPlan* p, const Tile* t, const Odometer* row,
                                int k) noexcept nogil:
    cdef const Axis* vec = &p.L.kept[p.L.n_kept - 1]
    return p.L.base[k] + t.outer.off[k] + row.off[k] + t.c0 * vec.stride[k]


cdef void column_pivots(const ColumnPlan* p, Py_ssize_t group, in_t* ki) noexcept nogil:
    """Each column's pivot (float64; 0 for float16/float32) and, for
    float16/float32, the centre of its shifted sums (strip_welford): the
    column's first value (0 if not finite), kept in t.shift until
    column_finish writes the shifts there."""
    cdef Tile t
    cdef Odometer row
    cdef Py_ssize_t c, sx = p.L.kept[p.L.n_kept - 1].stride[OP_X]
    cdef const char* xp
    cdef double first
    tile_of(p, group, &t)
    odo_init(&row, p.L.red, p.L.n_red, 0)
    xp = col_ptr(p, &t, &row, OP_X)
    for c in range(t.width):
        first = sload(xp + c * sx, ki)
        t.pivot[c] = pick_pivot(first, ki)
        if in_t is not double:
            t.shift[c] = first if first - first == 0.0 else 0.0


cdef inline void strip_welford(const char* x, Py_ssize_t rs, Py_ssize_t nrows,
                               Py_ssize_t k0, const double* pivot, double* mean, double* m2,
                               Ahead* ahead, in_t* ki) noexcept nogil:
    """Welford over nrows rows (rs bytes apart) of FN_NVC vectors of
    contiguous columns, continuing from k0 rows already in mean/m2.  The accumulators live in
    registers for the whole sweep, so each value costs its load and four
    vector operations.  Each row also moves the prefetch cursor on.

    float16/float32 columns take shifted sums instead (see the top of
    _moments.pxd), about `pivot`, their centres: mean/m2 hold the sums of
    x - centre and of its squares until fold_sums.  A Welford update waits
    for the last one (four dependent operations a row); a sum waits for one
    addition."""
    cdef fn_vd mu[FN_NVC]
    cdef fn_vd q[FN_NVC]
    cdef fn_vd piv[FN_NVC]
    cdef fn_vd r, d
    cdef const char* row
    cdef Py_ssize_t k
    cdef Ahead a = ahead[0]       # a local: its fields stay in registers
    cdef int v
    for v in range(FN_NVC):
        mu[v] = fn_load_f64(mean + v * FN_W)
        q[v] = fn_load_f64(m2 + v * FN_W)
        piv[v] = fn_load_f64(pivot + v * FN_W)
    for k in range(nrows):
        row = x + k * rs
        ahead_step(&a)
        if in_t is not double:
            for v in range(FN_NVC):
                d = fn_sub(vload(row + v * FN_W * <Py_ssize_t>sizeof(in_t), sizeof(in_t), ki), piv[v])
                mu[v] = fn_add(mu[v], d)
                q[v] = fn_fma(d, d, q[v])
            continue
        r = fn_set1(1.0 / <double>(k0 + k + 1))
        for v in range(FN_NVC):
            welford_step(shifted(vload(row + v * FN_W * <Py_ssize_t>sizeof(in_t), sizeof(in_t), ki),
                                     piv[v], ki), r,
                         &mu[v], &q[v])
    for v in range(FN_NVC):
        fn_store_f64(mean + v * FN_W, mu[v])
        fn_store_f64(m2 + v * FN_W, q[v])
    ahead[0] = a
    # (Contiguous columns only, and no stride among the arguments: the
    # compiler may leave this out of line, and then a stride kept a pointer
    # per vector and pushed the loop's counter to memory: mean_var over
    # axis 0 of (1024, 1000) float32 took 1.97 against 1.55x a copy.
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
    for k in range(nrows):
        row = x + k * rs
        if in_t is not double:
            # Shifted sums: a lane masked out adds +0.0 to both.
            for v in range(FN_NVC):
                d = fn_masked(fn_sub(vload(row + col[v] * sx, sx, ki), piv[v]), keep[v])
                mu[v] = fn_add(mu[v], d)
                q[v] = fn_fma(d, d, q[v])
            continue
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
    when rows differ in that or the tile is too narrow to gain): strips
    from there read whole lines.  A strip a line off reads one more line
    per row, which the next strip reads again (numpy's large arrays start
    16 bytes past a line: mean_var over axis 0 of (8192, 1024) float32
    read that way ran at 1.9 against 1.3 ms aligned in a C model)."""
    cdef Py_ssize_t off = <Py_ssize_t>(<size_t>x % 64), head
    if sx != sizeof(in_t) or rs % 64 != 0 or off == 0 or off % sizeof(in_t) != 0:
        return 0
    head = (64 - off) // <Py_ssize_t>sizeof(in_t)
    if width - head < 2 * FN_NVC * FN_W:
        return 0
    return head


cdef void column_rows_stats(const ColumnPlan* p, const Tile* t, const char* x, Py_ssize_t rs,
                            Py_ssize_t nrows, Py_ssize_t k0, Py_ssize_t next_rows,
                            double* mean, double* m2, in_t* ki) noexcept nogil:
    """Rows k0 .. k0 + nrows of an item, rs bytes apart from x on: the
    columns before the first whole cache line (line_head), then strips of
    FN_NVC vectors of columns, one sweep down the rows each, then the
    columns left (edge_welford; scalar ones in tiles narrower than a
    vector).  The rows are few enough to stay in L2 between the strips,
    so only the first strip reads memory, and that read was prefetched by
    the sweep before, as this one prefetches the next_rows rows after its
    own."""
    cdef Py_ssize_t sx = p.L.kept[p.L.n_kept - 1].stride[OP_X], k, nv
    cdef Py_ssize_t strip = FN_NVC * FN_W
    cdef Py_ssize_t head = line_head(x, rs, sx, t.width, ki) if p.line_start else 0, c = 0
    cdef Ahead ahead
    cdef double y, d, rk
    # float16/float32: sums about each column's centre (strip_welford).
    cdef const double* pivot = t.shift if in_t is not double else t.pivot
    ahead_init(&ahead, x + nrows * rs, t.width * sx, rs,
               next_rows if sx == sizeof(in_t) and nrows >= next_rows else 0,
               head // strip + (t.width - head) // strip)
    # The head: whole strips (a line may hold several), then what is left.
    while c + strip <= head:
        strip_welford(x + c * sx, rs, nrows, k0, pivot + c, mean + c, m2 + c, &ahead, ki)
        c = c + strip
    if c < head:
        edge_welford(x, rs, sizeof(in_t), nrows, k0, c, c, head, pivot, mean, m2, ki)
        c = head
    while c + strip <= t.width:
        if sx == sizeof(in_t):
            strip_welford(x + c * sx, rs, nrows, k0, pivot + c, mean + c, m2 + c, &ahead, ki)
        else:
            # Strided columns: a strip's vectors, none masked.
            edge_welford(x, rs, sx, nrows, k0, c, c, c + strip, pivot, mean, m2, ki)
        c = c + strip
    if c == t.width:
        return
    # The rest: vectors that end with the tile's last column.
    nv = (t.width - c + FN_W - 1) // FN_W
    if t.width >= nv * FN_W:
        if sx == sizeof(in_t):
            edge_welford(x, rs, sizeof(in_t), nrows, k0, t.width - nv * FN_W, c, t.width,
                         pivot, mean, m2, ki)
        else:
            edge_welford(x, rs, sx, nrows, k0, t.width - nv * FN_W, c, t.width,
                         pivot, mean, m2, ki)
        return
    while c < t.width:
        for k in range(nrows):
            y = sload(x + k * rs + c * sx, ki) - pivot[c]
            if in_t is not double:
                mean[c] = mean[c] + y
                m2[c] = m2[c] + y * y
                continue
            rk = 1.0 / <double>(k0 + k + 1)
            d = y - mean[c]
            mean[c] = mean[c] + d * rk
            m2[c] = m2[c] + d * (y - mean[c])
        c = c + 1


cdef inline void fold_sums(const Tile* t, Py_ssize_t nb, Py_ssize_t na, double* s1,
                           double* s2, double* mean, double* m2) noexcept nogil:
    """nb rows of float16/float32 columns, given as shifted sums (s1 of x -
    centre, s2 of its squares; t.shift holds the centres), as moments:
    mean = centre + S1 / n, M2 = S2 - S1**2 / n (negative only by rounding,
    NaN kept), folded into the moments of the na rows before them (Chan's
    formula) or, with na = 0, written as they are (s1 and s2 may then be
    mean and m2 themselves).  Separate sums are zeroed for the next rows."""
    cdef Py_ssize_t c
    cdef double n = <double>nb, f = <double>nb / <double>(na + nb), w = <double>na * f
    cdef double a, q, d
    for c in range(t.width):
        a = s1[c] / n
        q = s2[c] - s1[c] * a
        if q < 0.0:
            q = 0.0
        a = t.shift[c] + a
        if na == 0:
            mean[c] = a
            m2[c] = q
        else:
            d = a - mean[c]
            mean[c] = mean[c] + d * f
            m2[c] = m2[c] + q + d * d * w
        if s1 != mean:
            s1[c] = 0.0
            s2[c] = 0.0


cdef void column_block_stats(const ColumnPlan* p, Py_ssize_t item, in_t* ki) noexcept nogil:
    """The mean and M2 of the rows of one block, for every column of one
    tile (Welford; float16/float32: shifted sums, folded into the moments
    every SUM_ROWS rows at most), in pieces of at most p.rows_per_sweep
    rows (see column_rows_stats).  With one reduced axis the rows are
    equally spaced and each piece prefetches the next; otherwise each row
    is its own piece."""
    cdef Tile t
    cdef Odometer row, ahead_row
    cdef Py_ssize_t group = item // p.n_blocks, blk = item % p.n_blocks
    cdef Py_ssize_t r0 = blk * p.rows_per_block
    cdef Py_ssize_t nr = min(p.rows_per_block, p.n_rows - r0), k, n, c, ahead
    cdef Py_ssize_t rs = p.L.red[p.L.n_red - 1].stride[OP_X]
    cdef double* mean = p.state + item * p.state_stride
    cdef double* m2 = mean + COL_TILE + PAD
    # float16/float32 blocks of more than SUM_ROWS rows: the moments of the
    # segments of sums done so far.
    cdef double* run_mean = mean + STATE_STRIDE
    cdef double* run_m2 = run_mean + COL_TILE + PAD
    cdef Py_ssize_t done = 0
    cdef const char* xp
    tile_of(p, group, &t)
    for c in range(t.width):
        mean[c] = 0.0
        m2[c] = 0.0
    odo_init(&row, p.L.red, p.L.n_red, r0)
    xp = col_ptr(p, &t, &row, OP_X)
    if p.L.n_red == 1:
        k = 0
        while k < nr:
            n = min(p.rows_per_sweep, nr - k)
            if in_t is not double:
                if k - done + n > SUM_ROWS:
                    fold_sums(&t, k - done, done, mean, m2, run_mean, run_m2)
                    done = k
            # The next piece: within this block, or the start of the next one.
            ahead = min(p.rows_per_sweep, p.n_rows - (r0 + k + n))
            column_rows_stats(p, &t, xp + k * rs, rs, n, k, ahead, mean, m2, ki)
            k = k + n
    else:
        odo_init(&ahead_row, p.L.red, p.L.n_red, min(r0 + PREFETCH_ROWS, p.n_rows - 1))
        for k in range(nr):
            if in_t is not double:
                if k - done == SUM_ROWS:
                    fold_sums(&t, k - done, done, mean, m2, run_mean, run_m2)
                    done = k
            if p.prefetch:
                fetch_lines(col_ptr(p, &t, &ahead_row, OP_X),
                                 t.width * p.L.kept[p.L.n_kept - 1].stride[OP_X])
                odo_next(&ahead_row, p.L.red, p.L.n_red)
            column_rows_stats(p, &t, col_ptr(p, &t, &row, OP_X), 0, 1, k, 0, mean, m2, ki)
            odo_next(&row, p.L.red, p.L.n_red)
    if in_t is not double:
        if done == 0:
            fold_sums(&t, nr, 0, mean, m2, mean, m2)
        else:
            fold_sums(&t, nr - done, done, mean, m2, run_mean, run_m2)
            memcpy(mean, run_mean, t.width * sizeof(double))
            memcpy(m2, run_m2, t.width * sizeof(double))


cdef void column_finish(const ColumnPlan* p, Py_ssize_t item) noexcept nogil:
    """Fold the row blocks of one piece of a tile (FINISH_COLS columns) in
    order, then finish each of its columns; pieces are independent, so a
    tile's are shared by the threads."""
    cdef Py_ssize_t group = item // p.finish_pieces
    cdef Py_ssize_t lo = (item % p.finish_pieces) * FINISH_COLS, hi
    cdef Tile t
    cdef Py_ssize_t c, blk, sS = p.L.kept[p.L.n_kept - 1].stride[OP_S]
    cdef double* first = p.state + group * p.n_blocks * p.state_stride
    cdef double* first_m2 = first + COL_TILE + PAD
    cdef double* mean
    cdef double* m2
    cdef double na, nb, f, d
    cdef Moments m
    cdef Coef co
    cdef Py_ssize_t off
    tile_of(p, group, &t)
    hi = min(t.width, lo + FINISH_COLS)
    off = t.outer.off[OP_S] + t.c0 * sS
    if p.mode == MODE_GIVEN:
        for c in range(lo, hi):
            co = given(p.L, off + c * sS)
            t.pivot[c] = co.pivot
            t.shift[c] = co.shift
            t.scale[c] = co.scale
        return
    na = <double>min(p.rows_per_block, p.n_rows)
    for blk in range(1, p.n_blocks):
        mean = first + blk * p.state_stride
        m2 = mean + COL_TILE + PAD
        nb = <double>min(p.rows_per_block, p.n_rows - blk * p.rows_per_block)
        f = nb / (na + nb)
        for c in range(lo, hi):
            d = mean[c] - first[c]
            first[c] = first[c] + d * f
            first_m2[c] = first_m2[c] + m2[c] + d * d * na * f
        na = na + nb
    m.n = na
    for c in range(lo, hi):
        m.mean = first[c]
        m.m2 = first_m2[c]
        co = finish(m, t.pivot[c], p.mode, p.eps, p.L, off + c * sS)
        t.pivot[c] = co.pivot
        t.shift[c] = co.shift
        t.scale[c] = co.scale


cdef inline void normalize_columns(const char* xp, char* yp, const Param* g, const Param* b,
                                   const Tile* t, Py_ssize_t c0, Py_ssize_t c1, bint stream,
                                   const char* ahead, in_t* ki, out_t* ko) noexcept nogil:
    """Columns c0 .. c1 of one contiguous row of a tile, each column with
    its own coefficients; `ahead` (or NULL): the next piece of x to read,
    fetched a vector's bytes of it per vector."""
    # Locals, not fields: stores to y could alias the fields as far as the
    # compiler knows, and would make it reload them every iteration.
    cdef const in_t* x = <const in_t*>xp
    cdef out_t* y = <out_t*>yp
    cdef const double* pivot = t.pivot
    cdef const double* shift = t.shift
    cdef const double* scale = t.scale
    cdef const double* gp = g.p
    cdef const double* bp = b.p
    cdef Py_ssize_t ginc = g.inc, binc = b.inc
    cdef fn_vd v
    cdef Py_ssize_t c = c0, head = 0
    if stream:
        head = (<size_t>(y + c0) // sizeof(out_t)) % FN_W
        head = c0 + min(c1 - c0, 0 if head == 0 else FN_W - head)
    while c < head:
        column_scalar(x, y, g, b, t, c, ki, ko)
        c = c + 1
    while c + FN_W <= c1:
        if ahead != NULL:
            fn_prefetch_l2(ahead + (c - c0) * sizeof(in_t))
        v = fn_sub(shifted(vload(<const char*>(x + c), sizeof(in_t), ki), fn_load_f64(pivot + c), ki),
                   fn_load_f64(shift + c))
        v = fn_fma(fn_mul(v, fn_load_f64(scale + c)), fn_load_f64(gp + c * ginc),
                   fn_load_f64(bp + c * binc))
        if stream:
            vstream(y + c, v)
        else:
            vstore(<char*>(y + c), sizeof(out_t), v, ko)
        c = c + FN_W
    while c < c1:
        column_scalar(x, y, g, b, t, c, ki, ko)
        c = c + 1


cdef inline void column_scalar(const in_t* x, out_t* y, const Param* g, const Param* b,
                               const Tile* t, Py_ssize_t c, in_t* ki, out_t* ko) noexcept nogil:
    sstore(<char*>(y + c), ((sload(<const char*>(x + c), ki) - t.pivot[c]) - t.shift[c])
           * t.scale[c] * g.p[c * g.inc] + b.p[c * b.inc], ko)


cdef void periodic_coefs(const ColumnPlan* p) noexcept nogil:
    """p.per from the one tile's coefficients and the per-column gain and
    bias (see periodic_run)."""
    cdef const Axis* vec = &p.L.kept[p.L.n_kept - 1]
    cdef Py_ssize_t n = p.n_cols, w = n + FN_W, c
    cdef double* piv = p.per
    cdef double* sh = piv + w
    cdef double* sc = sh + w
    cdef double* bi = sc + w
    for c in range(w):
        piv[c] = p.coef[c % n]
        sh[c] = p.coef[COL_TILE + PAD + c % n]
        sc[c] = (p.coef[2 * (COL_TILE + PAD) + c % n]
                 * (<const double*>(p.L.base[OP_G] + (c % n) * vec.stride[OP_G]))[0])
        bi[c] = (<const double*>(p.L.base[OP_B] + (c % n) * vec.stride[OP_B]))[0]


cdef void periodic_run(const ColumnPlan* p, const char* xp, char* yp, Py_ssize_t total,
                       in_t* ki, out_t* ko) noexcept nogil:
    """Rows of the one tile that follow each other in memory, as one run of
    `total` values from a row's start: column c's coefficients are at [c]
    of p.per's arrays, which continue periodically for a vector, so a vector
    that crosses into the next row loads them in one piece (the float32
    pass does the same in fn_normalize_periodic_f32)."""
    cdef const in_t* x = <const in_t*>xp
    cdef out_t* y = <out_t*>yp
    cdef Py_ssize_t n = p.n_cols, w = n + FN_W, i = 0, c = 0, head = 0
    cdef const double* piv = p.per
    cdef const double* sh = piv + w
    cdef const double* sc = sh + w
    cdef const double* bi = sc + w
    cdef bint stream = p.L.stream
    cdef fn_vd v
    if stream:
        head = (<size_t>y // sizeof(out_t)) % FN_W
        head = min(total, 0 if head == 0 else FN_W - head)
    while i < head:
        periodic_scalar(x, y, i, c, piv, sh, sc, bi, ki, ko)
        i = i + 1
        c = 0 if c + 1 == n else c + 1
    while i + FN_W <= total:
        v = fn_sub(shifted(vload(<const char*>(x + i), sizeof(in_t), ki),
                           fn_load_f64(piv + c), ki), fn_load_f64(sh + c))
        v = fn_fma(v, fn_load_f64(sc + c), fn_load_f64(bi + c))
        if stream:
            vstream(y + i, v)
        else:
            vstore(<char*>(y + i), sizeof(out_t), v, ko)
        i = i + FN_W
        c = c + FN_W
        while c >= n:
            c = c - n
    while i < total:
        periodic_scalar(x, y, i, c, piv, sh, sc, bi, ki, ko)
        i = i + 1
        c = 0 if c + 1 == n else c + 1


cdef inline void periodic_scalar(const in_t* x, out_t* y, Py_ssize_t i, Py_ssize_t c,
                                 const double* piv, const double* sh, const double* sc,
                                 const double* bi, in_t* ki, out_t* ko) noexcept nogil:
    sstore(<char*>(y + i), ((sload(<const char*>(x + i), ki) - piv[c]) - sh[c]) * sc[c] + bi[c],
           ko)


cdef void column_coef32(const ColumnPlan* p, Py_ssize_t group) noexcept nogil:
    """The float32 form of one tile's coefficients (fn_normalize_cols_f32):
    each column's mean rounded to float, its scale, and the rest of the
    rounding times the scale; with gain and bias folded in when p.fold.
    ok32[group] is false if a column's coefficients do not fit float32 with
    room to spare (that tile then takes the float64 pass)."""
    cdef Tile t
    cdef Odometer row
    cdef const Axis* vec = &p.L.kept[p.L.n_kept - 1]
    cdef float* m32 = p.coef32 + group * COEF32_STRIDE
    cdef float* s32 = m32 + COL_TILE + WRAP
    cdef float* e32 = s32 + COL_TILE + WRAP
    cdef const char* gp
    cdef const char* bp
    cdef double mean, sc, e, gc, bc
    cdef Py_ssize_t c
    tile_of(p, group, &t)
    odo_init(&row, p.L.red, p.L.n_red, 0)
    gp = col_ptr(p, &t, &row, OP_G)
    bp = col_ptr(p, &t, &row, OP_B)
    p.ok32[group] = False
    for c in range(t.width):
        mean = t.pivot[c] + t.shift[c]
        sc = t.scale[c]
        if not (fabs(mean) < 1e30 and 1e-30 < sc < 1e30):
            return
        m32[c] = <float>mean
        e = (mean - <double>m32[c]) * sc
        if p.fold:
            gc = (<const double*>(gp + c * vec.stride[OP_G]))[0]
            bc = (<const double*>(bp + c * vec.stride[OP_B]))[0]
            sc = sc * gc
            e = e * gc - bc
            if not (fabs(sc) < 1e30 and fabs(e) < 1e30):  # a zero gain is fine
                return
        s32[c] = <float>sc
        e32[c] = <float>e
    for c in range(t.width, t.width + WRAP):
        m32[c] = m32[c % t.width]
        s32[c] = s32[c % t.width]
        e32[c] = e32[c % t.width]
    p.ok32[group] = True


cdef void plan_columns_f32(ColumnPlan* p, bint has_y) noexcept nogil:
    """Whether the float32 pass applies to this float32 call, and how gain
    and bias enter it: folded when they are the same for every row, per row
    when they are the same for every column, else not at all."""
    cdef const Layout* L = p.L
    cdef const Axis* vec = &L.kept[L.n_kept - 1]
    p.f32 = (has_y and vec.stride[OP_X] == sizeof(float) and vec.stride[OP_Y] == sizeof(float)
             and (p.fold or (vec.stride[OP_G] == 0 and vec.stride[OP_B] == 0)))


cdef inline void column_segment(const ColumnPlan* p, const Tile* t, const Odometer* row,
                                Py_ssize_t group, Py_ssize_t c0, Py_ssize_t c1,
                                const char* ahead, in_t* ki, out_t* ko) noexcept nogil:
    """The output of columns c0 .. c1 of one row of one tile (see
    normalize_columns for `ahead`)."""
    cdef const Axis* vec = &p.L.kept[p.L.n_kept - 1]
    cdef Py_ssize_t sx = vec.stride[OP_X], sy = vec.stride[OP_Y]
    cdef Py_ssize_t sg = vec.stride[OP_G], sb = vec.stride[OP_B], c
    cdef const char* xp = col_ptr(p, t, row, OP_X)
    cdef char* yp = <char*>col_ptr(p, t, row, OP_Y)
    cdef const char* gp = col_ptr(p, t, row, OP_G)
    cdef const char* bp = col_ptr(p, t, row, OP_B)
    cdef const float* m32
    cdef float g = 1.0, b = 0.0
    cdef Param gv, bv
    cdef double ts
    if in_t is float and out_t is float:
        if p.f32 and p.ok32[group]:
            m32 = p.coef32 + group * COEF32_STRIDE
            if not p.fold:
                g = <float>(<const double*>gp)[0]
                b = <float>(<const double*>bp)[0]
            fn_normalize_cols_f32((<const float*>xp) + c0, (<float*>yp) + c0, m32 + c0,
                                  m32 + COL_TILE + WRAP + c0, m32 + 2 * (COL_TILE + WRAP) + c0,
                                  c1 - c0, g, b, p.L.stream, ahead)
            return
    if (sx == sizeof(in_t) and sy == sizeof(out_t)
            and param_init(&gv, gp, sg) and param_init(&bv, bp, sb)):
        if p.L.stream:
            normalize_columns(xp, yp, &gv, &bv, t, c0, c1, True, ahead, ki, ko)
        else:
            normalize_columns(xp, yp, &gv, &bv, t, c0, c1, False, ahead, ki, ko)
        return
    for c in range(c0, c1):
        ts = ((sload(xp + c * sx, ki) - t.pivot[c]) - t.shift[c]) * t.scale[c]
        sstore(yp + c * sy, ts * (<const double*>(gp + c * sg))[0]
               + (<const double*>(bp + c * sb))[0], ko)


cdef void column_rows_chunked(const ColumnPlan* p, Tile* t, Odometer* row, Odometer* ahead,
                              Py_ssize_t nr, Py_ssize_t row_bytes, in_t* ki,
                              out_t* ko) noexcept nogil:
    """The output of nr rows of one outer index from `row` on, in groups of
    OUT_ROWS rows, each group a chunk of columns at a time (OUT_CHUNK for
    the float32 pass, half that with float64 coefficients): the chunk's
    coefficients stay in L1 for the group, where a whole wide row's would
    not."""
    cdef Odometer r
    cdef Py_ssize_t k0 = 0, k, n, j, c0, cw, chunk, group
    cdef const char* xp
    cdef const char* nxt
    # Rows a fixed step apart (one reduced axis) fetch each next piece.
    cdef Py_ssize_t rs = p.L.red[p.L.n_red - 1].stride[OP_X]
    cdef bint fetch = p.L.n_red == 1 and not p.prefetch
    while k0 < nr:
        n = min(<Py_ssize_t>OUT_ROWS, nr - k0)
        if p.prefetch:
            for k in range(n):
                fetch_lines(p.L.base[OP_X] + t.outer.off[OP_X] + ahead.off[OP_X], row_bytes)
                odo_next(ahead, p.L.red, p.L.n_red)
        for j in range(p.n_tiles):
            if p.n_tiles > 1:
                tile_move(p, t, j)
            group = t.group
            chunk = OUT_CHUNK
            if in_t is not float or out_t is not float or not p.f32 or not p.ok32[group]:
                chunk = OUT_CHUNK // 2
            c0 = 0
            while c0 < t.width:
                cw = min(chunk, t.width - c0)
                r = row[0]
                for k in range(n):
                    # The next piece in this order (the same chunk of the
                    # next row, or the next chunk of the group's first row)
                    # is a page or more away: prefetchers would meet it cold.
                    # eval batch_norm over (4096, 4096) float32, one thread,
                    # time / a copy: 1.39 -> 1.06.
                    nxt = NULL
                    if fetch:
                        xp = col_ptr(p, t, &r, OP_X) + c0 * p.L.kept[p.L.n_kept - 1].stride[OP_X]
                        if k + 1 < n:
                            nxt = xp + rs
                        elif c0 + 2 * cw <= t.width:
                            # (A shorter last chunk is not fetched: the
                            # fetch covers cw columns.)
                            nxt = xp - k * rs + cw * p.L.kept[p.L.n_kept - 1].stride[OP_X]
                    column_segment(p, t, &r, group, c0, c0 + cw, nxt, ki, ko)
                    odo_next(&r, p.L.red, p.L.n_red)
                c0 = c0 + cw
        for k in range(n):
            odo_next(row, p.L.red, p.L.n_red)
        k0 = k0 + n


cdef void column_rows_normalize(const ColumnPlan* p, Py_ssize_t item, in_t* ki,
                                out_t* ko) noexcept nogil:
    """The output of a block of rows of one outer index: rows that follow
    each other as one run (periodic coefficients), others a few rows at a
    time, chunk by chunk (column_rows_chunked)."""
    cdef Tile t
    cdef Odometer row, ahead
    cdef Py_ssize_t outer = item // p.n_out_blocks
    cdef Py_ssize_t r0 = (item % p.n_out_blocks) * p.rows_per_out
    cdef Py_ssize_t nr = min(p.rows_per_out, p.n_rows - r0)
    cdef const float* m32
    cdef Py_ssize_t row_bytes = p.n_cols * p.L.kept[p.L.n_kept - 1].stride[OP_X]
    odo_init(&row, p.L.red, p.L.n_red, r0)
    odo_init(&ahead, p.L.red, p.L.n_red, min(r0 + PREFETCH_ROWS, p.n_rows - 1))
    tile_of(p, outer * p.n_tiles, &t)
    if in_t is float and out_t is float:
        if p.periodic and p.ok32[t.group]:
            m32 = p.coef32 + t.group * COEF32_STRIDE
            fn_normalize_periodic_f32(<const float*>col_ptr(p, &t, &row, OP_X),
                                      <float*>col_ptr(p, &t, &row, OP_Y), nr * p.n_cols,
                                      m32, m32 + COL_TILE + WRAP, m32 + 2 * (COL_TILE + WRAP),
                                      p.n_cols, p.L.stream)
            fn_sfence()
            return
    if p.per != NULL:
        periodic_run(p, col_ptr(p, &t, &row, OP_X), <char*>col_ptr(p, &t, &row, OP_Y),
                     nr * p.n_cols, ki, ko)
        fn_sfence()
        return
    column_rows_chunked(p, &t, &row, &ahead, nr, row_bytes, ki, ko)
    fn_sfence()


cdef int columns_kernel(const Layout* L, int mode, double eps, bint has_y, int nthreads,
                        in_t* ki, out_t* ko) noexcept nogil:
    cdef ColumnPlan p
    cdef Py_ssize_t i, n_items, n_out_items, cap, min_rows, n_finish
    cdef bint runs
    p.L = L
    p.mode = mode
    p.eps = eps
    p.n_cols = L.kept[L.n_kept - 1].size
    p.n_outer = L.n_slices // p.n_cols
    p.n_tiles = (p.n_cols + COL_TILE - 1) // COL_TILE
    p.n_groups = p.n_outer * p.n_tiles
    p.n_rows = L.slice_len
    # Row blocks: as many as parallelism needs, as few as memory allows; a
    # function of the shape only.
    cap = max(<Py_ssize_t>1, MAX_COL_ITEMS // p.n_groups)
    min_rows = max(<Py_ssize_t>ROW_BLOCK_MIN,
                   min(COL_BLOCK_BYTES // (min(<Py_ssize_t>COL_TILE, p.n_cols)
                                           * <Py_ssize_t>sizeof(in_t)),
                       p.n_rows // COL_BLOCKS_MIN))
    p.n_blocks = min(cap, max(<Py_ssize_t>1, p.n_rows // min_rows))
    p.rows_per_block = (p.n_rows + p.n_blocks - 1) // p.n_blocks
    p.n_blocks = (p.n_rows + p.rows_per_block - 1) // p.rows_per_block
    p.rows_per_sweep = max(<Py_ssize_t>8,
                           SWEEP_BYTES // (min(<Py_ssize_t>COL_TILE, p.n_cols) * sizeof(in_t)))
    p.state_stride = STATE_STRIDE
    if in_t is not double:
        # Shifted sums go into moments every SUM_ROWS rows at most, whole
        # sweeps at a time (column_block_stats), into two more arrays.
        p.rows_per_sweep = min(p.rows_per_sweep, <Py_ssize_t>SUM_ROWS)
        if p.rows_per_block > SUM_ROWS:
            p.state_stride = 2 * STATE_STRIDE
    n_items = p.n_groups * p.n_blocks
    p.finish_pieces = (min(<Py_ssize_t>COL_TILE, p.n_cols) + FINISH_COLS - 1) // FINISH_COLS
    n_finish = p.n_groups * p.finish_pieces
    p.n_out_blocks = max(<Py_ssize_t>1, min(p.n_rows, MAX_COL_ITEMS // p.n_outer))
    p.rows_per_out = (p.n_rows + p.n_out_blocks - 1) // p.n_out_blocks
    p.n_out_blocks = (p.n_rows + p.rows_per_out - 1) // p.rows_per_out
    n_out_items = p.n_outer * p.n_out_blocks
    # Hardware prefetchers follow rows that follow each other in memory;
    # rows apart need software prefetch (short ones: a long row trains the
    # hardware by itself).
    p.prefetch = (not (L.n_red >= 1 and L.red[L.n_red - 1].stride[OP_X]
                       == p.n_cols * L.kept[L.n_kept - 1].stride[OP_X])
                  and p.n_cols * L.kept[L.n_kept - 1].stride[OP_X] <= PREFETCH_ROW_MAX)
    # From cache a strip reads a line twice at little cost, and the edges'
    # vectors cost their own sweeps: mean_var over axis 0, one thread,
    # (256, 1024) float32 1.89 -> 1.97x a copy, float64 1.33 -> 1.42,
    # against (8192, 1024) 0.83 -> 0.67 and 0.87 -> 0.78.
    p.line_start = (p.n_outer * p.n_rows * p.n_cols * <Py_ssize_t>sizeof(in_t)
                    > CACHED_BYTES)
    p.state = NULL
    p.coef32 = NULL
    p.ok32 = NULL
    p.f32 = False
    p.per = NULL
    p.fold = True
    for i in range(L.n_red):
        if L.red[i].stride[OP_G] != 0 or L.red[i].stride[OP_B] != 0:
            p.fold = False
    # Blocks of rows are single runs when the rows follow each other in
    # memory and every row is normalized alike.
    runs = (has_y and p.fold and p.n_tiles == 1 and L.n_red == 1
            and L.kept[L.n_kept - 1].stride[OP_X] == sizeof(in_t)
            and L.kept[L.n_kept - 1].stride[OP_Y] == sizeof(out_t)
            and L.red[0].stride[OP_X] == p.n_cols * <Py_ssize_t>sizeof(in_t)
            and L.red[0].stride[OP_Y] == p.n_cols * <Py_ssize_t>sizeof(out_t))
    p.periodic = False
    if in_t is float and out_t is float:
        plan_columns_f32(&p, has_y)
        p.periodic = p.f32 and runs
    # The float64 run's coefficients (4 x 8 bytes a column) must stay in L1
    # beside the stream; wider rows go in chunks.  eval batch_norm, float64,
    # one thread, time / a copy, run -> chunks: (16384, 1024) 1.40 -> 1.05,
    # (8192, 2048) 1.45 -> 0.91, but (32768, 512) 0.82 -> 0.94.
    if (runs and not p.periodic and p.n_outer == 1
            and p.n_cols * 4 * <Py_ssize_t>sizeof(double) <= PERIODIC_BYTES):
        p.per = <double*>fn_malloc(4 * (p.n_cols + FN_W) * sizeof(double))
        if p.per == NULL:
            return -1
    p.coef = <double*>fn_malloc(p.n_groups * COEF_STRIDE * sizeof(double))
    if p.state == NULL and mode != MODE_GIVEN:
        p.state = <double*>fn_malloc(n_items * p.state_stride * sizeof(double))
    if p.f32:
        p.coef32 = <float*>fn_malloc(p.n_groups * COEF32_STRIDE * sizeof(float))
        p.ok32 = <char*>fn_malloc(p.n_groups)
    if (p.coef == NULL or (mode != MODE_GIVEN and p.state == NULL)
            or (p.f32 and (p.coef32 == NULL or p.ok32 == NULL))):
        fn_free(p.per)
        fn_free(p.coef)
        fn_free(p.state)
        fn_free(p.coef32)
        fn_free(p.ok32)
        return -1
    if nthreads > 1:
        # One team for the statistics, folded and finished (each loop ends
        # on the team's barrier): a team per loop cost small calls its start.
        with parallel(num_threads=nthreads):
            if mode != MODE_GIVEN:
                for i in prange(p.n_groups, schedule="runtime"):
                    column_pivots(&p, i, ki)
                for i in prange(n_items, schedule="runtime"):
                    column_block_stats(&p, i, ki)
            for i in prange(n_finish, schedule="static"):
                column_finish(&p, i)
            if p.f32:
                for i in prange(p.n_groups, schedule="runtime"):
                    column_coef32(&p, i)
        if p.per != NULL:
            periodic_coefs(&p)
        if has_y:
            for i in prange(n_out_items, num_threads=nthreads, schedule="runtime"):
                column_rows_normalize(&p, i, ki, ko)
    else:
        if mode != MODE_GIVEN:
            for i in range(p.n_groups):
                column_pivots(&p, i, ki)
            for i in range(n_items):
                column_block_stats(&p, i, ki)
        for i in range(n_finish):
            column_finish(&p, i)
        if p.f32:
            for i in range(p.n_groups):
                column_coef32(&p, i)
        if p.per != NULL:
            periodic_coefs(&p)
        if has_y:
            for i in range(n_out_items):
                column_rows_normalize(&p, i, ki, ko)
    fn_free(p.state)
    fn_free(p.coef)
    fn_free(p.coef32)
    fn_free(p.ok32)
    fn_free(p.per)
    return 0


cdef int columns_passes(const Layout* L, int mode, double eps, bint has_y, int nthreads,
                        in_t* ki, out_t* ko) noexcept nogil:
    """columns_kernel over pieces of L's kept axes of at most MAX_PASS_GROUPS
    groups each (pass_axis, _layout.pxd; an outer index that is still too
    much goes on alone, split again).  Many short columns had scratch beyond
    any kept block, fresh pages every call: mean_var over axis 0 of
    (2, 3211264) float32 took 75 ms (NumPy: 17), 128 MiB of it."""
    cdef Layout sub             # (6 KiB; a pass's recursion is a few deep)
    cdef Py_ssize_t step, start = 0, size
    cdef int a = pass_axis(L, COL_TILE, MAX_PASS_GROUPS, &step), rc = 0
    if a < 0:
        return columns_kernel(L, mode, eps, has_y, nthreads, ki, ko)
    while start < L.kept[a].size and rc == 0:
        size = piece_size(L, a, start, step, COL_TILE)
        layout_piece(L, &sub, a, start, size)
        if a == L.n_kept - 1:       # at most MAX_PASS_GROUPS + n_outer groups
            rc = columns_kernel(&sub, mode, eps, has_y, nthreads, ki, ko)
        else:
            rc = columns_passes(&sub, mode, eps, has_y, nthreads, ki, ko)
        start += size
    return rc


# ---------------------------------------------------------------------------
# Dispatch on the element types, then on the pattern.

cdef int execute(const Layout* L, int mode, double eps, bint has_y, int nthreads,
                 in_t* ki, out_t* ko) noexcept nogil:
    if L.columns:
        return columns_passes(L, mode, eps, has_y, nthreads, ki, ko)
    return slices_kernel(L, mode, eps, has_y, nthreads, ki, ko)


cdef int execute_in(const Layout* L, int mode, double eps, bint has_y, int nthreads,
                    int out_code, in_t* ki) noexcept nogil:
    if out_code == 0:
        return execute(L, mode, eps, has_y, nthreads, ki, <half_t*>NULL)
    if out_code == 1:
        return execute(L, mode, eps, has_y, nthreads, ki, <float*>NULL)
    return execute(L, mode, eps, has_y, nthreads, ki, <double*>NULL)


def normalize(cnp.ndarray x, y, gamma, beta, cnp.ndarray s0, cnp.ndarray s1, s2,
              tuple reduced, int mode, double eps, int nthreads, bint fresh=False):
    """Run one call (run_call)."""
    run_call(x, y, gamma, beta, s0, s1, s2, reduced, mode, eps, nthreads, fresh)


cdef int run_call(cnp.ndarray x, y, gamma, beta, cnp.ndarray s0, cnp.ndarray s1, s2,
                  tuple reduced, int mode, double eps, int nthreads, bint fresh) except -1:
    """Run one call: x (float16/32/64, aligned, native byte order); y an
    output of x's shape or None; gamma, beta float64 arrays of x.ndim
    dimensions (each x's size or 1) or None; s0, s1 float64 statistics in
    keepdims layout (outputs, or inputs for mode 'given'), both None when
    the caller wants y alone (modes 'center' and 'rms': large arrays written
    for nothing, and fresh pages cost their faults), and s2 a third one for
    the variance (mode 'center') or None; reduced a tuple of bools, one per
    axis of x; fresh: y was just allocated (its pages are not yet
    touched).  Nothing is copied."""
    cdef Layout L
    cdef int rc, in_code = type_code(x), out_code = in_code
    cdef bint has_y = y is not None
    cdef double one_zero[2]
    cdef char* y_data
    cdef Py_ssize_t y_bytes
    if (s0 is None or s1 is None) and (s0 is not s1 or s2 is not None or not has_y
                                       or mode == MODE_GIVEN or mode == MODE_STATS):
        raise ValueError("fastnorm: statistics arrays are needed here")
    if has_y:
        out_code = type_code(y)
    make_layout(&L, x, (y, gamma, beta, s0, s1, s2), reduced)
    # Absent parameters read as a broadcast 1 (gamma) and 0 (beta).
    if gamma is None:
        L.base[OP_G] = <char*>&fn_one
    if beta is None:
        L.base[OP_B] = <char*>&fn_zero_value
    if L.n_slices * L.slice_len < PARALLEL_MIN:
        nthreads = 1
    # Outputs far larger than the caches are written around them, fresh
    # ones (slices of several runs) from their last slice down (see
    # stream_output, fn_normalize_f32).
    L.stream = has_y and stream_output(&L, y.nbytes, STREAM_MIN_BYTES, fresh)
    L.descend = L.stream and fresh
    schedule_for(x.nbytes, True)
    if (L.descend and nthreads > 1
            and (cnp.PyArray_IS_C_CONTIGUOUS(y) or cnp.PyArray_IS_F_CONTIGUOUS(y))):
        # (written channel by channel: each thread faults its own pages in)
        y_data = <char*>cnp.PyArray_DATA(y)
        y_bytes = y.nbytes
        with nogil:
            fn_fault_in(y_data, y_bytes, nthreads)
    with nogil:
        if in_code == 0:
            rc = execute_in(&L, mode, eps, has_y, nthreads, out_code, <half_t*>NULL)
        elif in_code == 1:
            rc = execute_in(&L, mode, eps, has_y, nthreads, out_code, <float*>NULL)
        else:
            rc = execute_in(&L, mode, eps, has_y, nthreads, out_code, <double*>NULL)
    if rc != 0:
        raise MemoryError("fastnorm: could not allocate scratch memory")
    return 0


cdef void widen(const char* p, Py_ssize_t stride, Py_ssize_t n, double* out,
                in_t* kind) noexcept nogil:
    cdef Py_ssize_t i
    cdef const in_t* c = <const in_t*>p
    if in_t is not half_t and stride == sizeof(in_t):
        # a loop of its own, which vectorizes (strided, the gain and bias of
        # layer_norm (32, 768) float32 cost the whole call 0.6 us)
        for i in range(n):
            out[i] = c[i]
        return
    for i in range(n):
        out[i] = sload(p + i * stride, kind)


cdef inline void running_loop(table_t* rm, table_t* rv, const double* mean,
                              const double* var, Py_ssize_t n, double momentum,
                              double unbias) noexcept nogil:
    """update_running's arithmetic over n values of buffers of one type."""
    cdef Py_ssize_t i
    cdef double keep = 1.0 - momentum
    for i in range(n):
        rm[i] = <table_t>fn_sum_rounded(keep * <double>rm[i], momentum * mean[i])
        rv[i] = <table_t>fn_sum_rounded(keep * <double>rv[i], momentum * var[i] * unbias)


def update_running(cnp.ndarray rm, cnp.ndarray rv, cnp.ndarray mean, cnp.ndarray var,
                   double momentum, double unbias):
    """batch_norm's running statistics, updated in place as
    fastnorm/_running.py's NumPy expressions do it, rounding for rounding:
    rm = (1 - momentum) rm + momentum mean, rv = (1 - momentum) rv +
    (momentum var) unbias, in float64, then stored in the buffers' dtype.
    Done (True) when rm and rv are aligned, writable, C-contiguous arrays of
    one native dtype, float32 or float64, and mean and var C-contiguous
    native float64 arrays of as many values; else False, with nothing
    written.  Eight NumPy operations on a few hundred values cost 5 us a
    call."""
    cdef Py_ssize_t n = cnp.PyArray_SIZE(rm)
    cdef int t = cnp.PyArray_TYPE(rm)
    cdef const double* m = <const double*>cnp.PyArray_DATA(mean)
    cdef const double* v = <const double*>cnp.PyArray_DATA(var)
    cdef cnp.ndarray a
    if t != cnp.NPY_FLOAT and t != cnp.NPY_DOUBLE:
        return False
    for a in (rm, rv):
        if not (cnp.PyArray_TYPE(a) == t and a.dtype.isnative
                and cnp.PyArray_ISCARRAY(a) and cnp.PyArray_SIZE(a) == n):
            return False
    for a in (mean, var):
        if not (cnp.PyArray_TYPE(a) == cnp.NPY_DOUBLE and a.dtype.isnative
                and cnp.PyArray_ISCARRAY_RO(a) and cnp.PyArray_SIZE(a) == n):
            return False
    if t == cnp.NPY_FLOAT:
        running_loop(<float*>cnp.PyArray_DATA(rm), <float*>cnp.PyArray_DATA(rv), m, v, n,
                     momentum, unbias)
    else:
        running_loop(<double*>cnp.PyArray_DATA(rm), <double*>cnp.PyArray_DATA(rv), m, v, n,
                     momentum, unbias)
    return True


def row_f64(cnp.ndarray p, int ndim):
    """p, an aligned 1-d float16/float32 array of native byte order, as a
    new float64 array of shape (1, ..., 1, p.size) with ndim dimensions:
    what the kernels take for the gain or bias of the last axis of an
    ndim-dimensional x.  NumPy's astype and reshape cost the small call
    (32, 768) a microsecond each for gain and bias; this a third."""
    cdef cnp.npy_intp dims[MAX_DIMS]
    cdef int code = type_code(p), a
    cdef cnp.ndarray out
    if p.ndim != 1 or code == 2 or not 1 <= ndim <= MAX_DIMS:
        raise ValueError("row_f64 takes a 1-d float16 or float32 array and 1 to 64 dimensions")
    for a in range(ndim):
        dims[a] = 1
    dims[ndim - 1] = p.shape[0]
    out = empty_f64(ndim, dims)
    if code == 0:
        widen(<const char*>cnp.PyArray_DATA(p), p.strides[0], p.shape[0],
              <double*>cnp.PyArray_DATA(out), <half_t*>NULL)
    else:
        widen(<const char*>cnp.PyArray_DATA(p), p.strides[0], p.shape[0],
              <double*>cnp.PyArray_DATA(out), <float*>NULL)
    return out


cdef class _KeptBlock:
    """Owner of a scratch block lent to a NumPy array: the block goes back
    (to be kept for the next call, see fastnorm_scratch.h) with the array."""
    cdef void* data

    def __dealloc__(self):
        fn_free(self.data)


def as_float64(cnp.ndarray a):
    """a (any real dtype and strides) as a new C-contiguous float64 array
    of its shape.  Large ones live in the kept scratch blocks: NumPy's
    astype gets fresh pages from the C library for each, and their faults
    cost more than the conversion (layer_norm over the last two axes of
    (64, 196, 768) float32: widening its gain and bias, (196, 768) each, took
    1.3 ms a call, against 2.1-2.7 ms for a copy of x)."""
    cdef cnp.ndarray out = empty_f64(a.ndim, cnp.PyArray_DIMS(a))
    cnp.PyArray_CopyInto(out, a)
    return out


cdef cnp.ndarray empty_f64(int ndim, cnp.npy_intp* dims):
    """A new C-contiguous float64 array, in a kept scratch block when it is
    large enough to be kept (see as_float64)."""
    cdef Py_ssize_t nbytes = sizeof(double), a
    cdef _KeptBlock owner
    cdef cnp.ndarray out
    for a in range(ndim):
        nbytes = nbytes * dims[a]
    if nbytes < <Py_ssize_t>FN_KEEP_MIN:
        return cnp.PyArray_EMPTY(ndim, dims, cnp.NPY_DOUBLE, 0)
    owner = _KeptBlock()
    owner.data = fn_malloc(nbytes)
    if owner.data == NULL:
        raise MemoryError("fastnorm: could not allocate scratch memory")
    out = cnp.PyArray_SimpleNewFromData(ndim, dims, cnp.NPY_DOUBLE, owner.data)
    cnp.set_array_base(out, owner)
    return out


cdef extern from "numpy/arrayobject.h":
    object PyArray_NewLikeArray(cnp.ndarray prototype, int order, void* descr, int subok)

# The quick call's reduced-axis flags (the last axis), by number of dimensions.
cdef tuple LAST_AXIS = tuple(tuple(a == n - 1 for a in range(n)) for n in range(MAX_DIMS + 1))


cdef inline bint behaved_float(object a):
    """Whether a is an ndarray itself (no subclass) of float16/32/64 in
    native byte order, aligned: what the kernels read where it is."""
    cdef int t
    if type(a) is not cnp.ndarray:
        return False
    t = cnp.PyArray_TYPE(<cnp.ndarray>a)
    return ((t == cnp.NPY_FLOAT16 or t == cnp.NPY_FLOAT or t == cnp.NPY_DOUBLE)
            and cnp.PyArray_ISNOTSWAPPED(<cnp.ndarray>a) and cnp.PyArray_ISALIGNED(<cnp.ndarray>a))


cdef object quick_param(object p, cnp.npy_intp n, int ndim):
    """A gain or bias as the kernels take it (a new float64 array of shape
    (1, ..., 1, n)); None for None; False unless p is a 1-d float array of n
    values (any stride)."""
    cdef cnp.npy_intp dims[MAX_DIMS]
    cdef cnp.ndarray a, out
    cdef int i, t
    if p is None:
        return None
    if not behaved_float(p):
        return False
    a = <cnp.ndarray>p
    if cnp.PyArray_NDIM(a) != 1 or cnp.PyArray_DIM(a, 0) != n:
        return False
    for i in range(ndim):
        dims[i] = 1
    dims[ndim - 1] = n
    out = empty_f64(ndim, dims)
    t = cnp.PyArray_TYPE(a)
    if t == cnp.NPY_FLOAT16:
        widen(<const char*>cnp.PyArray_DATA(a), cnp.PyArray_STRIDE(a, 0), n,
              <double*>cnp.PyArray_DATA(out), <half_t*>NULL)
    elif t == cnp.NPY_FLOAT:
        widen(<const char*>cnp.PyArray_DATA(a), cnp.PyArray_STRIDE(a, 0), n,
              <double*>cnp.PyArray_DATA(out), <float*>NULL)
    else:
        widen(<const char*>cnp.PyArray_DATA(a), cnp.PyArray_STRIDE(a, 0), n,
              <double*>cnp.PyArray_DATA(out), <double*>NULL)
    return out


def quick_rows(x, axis, gamma, beta, eps, int mode):
    """layer_norm ('center') or rms_norm ('rms') of x over its last axis
    into a new array of x's layout, or None: fastnorm._quick.last_axis's
    checks made here, for calls of fewer than parallel_min values (one
    thread: larger ones take the checks in Python, which also count the
    threads).  Taken when x is an aligned float16/32/64 ndarray of native
    byte order with values; axis the int -1 or x.ndim - 1; eps a float in
    [0, largest float]; gamma and beta each None or such an array of one
    dimension and x.shape[-1] values.  layer_norm of (32, 768) float32 with
    float32 gain and bias, the whole call: 6.5 -> 5.0 us."""
    cdef cnp.ndarray xa, y
    cdef int ndim
    cdef double e
    cdef cnp.npy_intp n
    if not behaved_float(x) or type(axis) is not int or type(eps) is not float:
        return None
    xa = <cnp.ndarray>x
    ndim = cnp.PyArray_NDIM(xa)
    if ndim == 0 or not 0 < cnp.PyArray_SIZE(xa) < PARALLEL_MIN:
        return None
    if not (axis == -1 or axis == ndim - 1):
        return None
    e = eps
    if not (0.0 <= e <= DBL_MAX):
        return None
    n = cnp.PyArray_DIM(xa, ndim - 1)
    g = quick_param(gamma, n, ndim)
    if g is False:
        return None
    b = quick_param(beta, n, ndim)
    if b is False:
        return None
    y = PyArray_NewLikeArray(xa, cnp.NPY_KEEPORDER, NULL, 0)
    run_call(xa, y, g, b, None, None, None, LAST_AXIS[ndim], mode, e, 1, True)
    return y


def quick_mean_var(x, axis, ddof, keepdims, int nthreads):
    """(mean, var) of x over its last axis as mean_var returns them, or
    None: fastnorm._quick.mean_var_last_axis's checks made here.  Taken
    when x is an aligned float16/32/64 ndarray of native byte order with
    values; axis the int -1 or x.ndim - 1; ddof an int in [0, x.shape[-1]);
    keepdims a bool.  The kernel writes the mean and M2 in float64; the
    division by n - ddof and the conversion to x's dtype follow here, in
    the order and rounding of the general path (numpy's divide and astype;
    float16 goes through numpy's cast, which rounds once).  Against the
    same steps in Python (numpy's empty, divide, reshape and astype), in
    one process, one thread, us a call: (4, 8) float32 3.01 -> 0.74,
    (1000,) float64 3.32 -> 0.93, (32, 768) float32 5.91 -> 3.46, float64
    6.74 -> 4.95, (256, 1024) float32 32.4 -> 29.2."""
    cdef cnp.ndarray xa, mean, m2, mean_out, var_out
    cdef cnp.npy_intp dims[MAX_DIMS]
    cdef int ndim, out_ndim, a, t
    cdef Py_ssize_t i, count
    cdef double div
    cdef double* mp
    cdef double* qp
    cdef float* mo
    cdef float* vo
    if (not behaved_float(x) or type(axis) is not int or type(ddof) is not int
            or type(keepdims) is not bool):
        return None
    xa = <cnp.ndarray>x
    ndim = cnp.PyArray_NDIM(xa)
    if ndim == 0 or cnp.PyArray_SIZE(xa) == 0 or not (axis == -1 or axis == ndim - 1):
        return None
    if not 0 <= ddof < cnp.PyArray_DIM(xa, ndim - 1):
        return None
    for a in range(ndim - 1):
        dims[a] = cnp.PyArray_DIM(xa, a)
    dims[ndim - 1] = 1
    # keepdims' shape and the reduced one lay out the same values: the
    # kernel writes the former, the results may take the latter's dims.
    out_ndim = ndim if keepdims else ndim - 1
    mean = cnp.PyArray_EMPTY(ndim, dims, cnp.NPY_DOUBLE, 0)
    m2 = cnp.PyArray_EMPTY(ndim, dims, cnp.NPY_DOUBLE, 0)
    run_call(xa, None, None, None, mean, m2, None, LAST_AXIS[ndim], MODE_STATS, 0.0,
             nthreads, False)
    count = cnp.PyArray_SIZE(mean)
    div = <double>(cnp.PyArray_DIM(xa, ndim - 1) - <Py_ssize_t>ddof)
    mp = <double*>cnp.PyArray_DATA(mean)
    qp = <double*>cnp.PyArray_DATA(m2)
    for i in range(count):
        qp[i] = qp[i] / div
    t = cnp.PyArray_TYPE(xa)
    if t == cnp.NPY_FLOAT:
        mean_out = cnp.PyArray_EMPTY(out_ndim, dims, cnp.NPY_FLOAT, 0)
        var_out = cnp.PyArray_EMPTY(out_ndim, dims, cnp.NPY_FLOAT, 0)
        mo = <float*>cnp.PyArray_DATA(mean_out)
        vo = <float*>cnp.PyArray_DATA(var_out)
        for i in range(count):
            mo[i] = <float>mp[i]
            vo[i] = <float>qp[i]
    else:
        if not keepdims:
            mean = cnp.PyArray_Reshape(mean, dims_tuple(out_ndim, dims))
            m2 = cnp.PyArray_Reshape(m2, dims_tuple(out_ndim, dims))
        if t == cnp.NPY_DOUBLE:
            mean_out, var_out = mean, m2
        else:
            mean_out = cnp.PyArray_Cast(mean, t)
            var_out = cnp.PyArray_Cast(m2, t)
    if out_ndim == 0:
        return mean_out[()], var_out[()]     # numpy scalars, as np.mean gives
    return mean_out, var_out


cdef tuple dims_tuple(int ndim, const cnp.npy_intp* dims):
    return tuple([dims[a] for a in range(ndim)])


def layout_pattern(cnp.ndarray x, tuple reduced):
    """'columns' or 'slices': the access pattern a call on x would take
    (for tests and benchmarks)."""
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
