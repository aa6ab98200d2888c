# The forward schedules, one per access pattern (plan.pxd): SLICES, IMAGES
# and COLUMNS, each taking the way its route names.  A schedule takes the
# statistics from the core (moments.pxd), turns them into coefficients in
# coefs.pxd and writes the output with the one output pass (apply.h).
#
# Every result is a function of the data and the layout alone: reductions are
# cut into blocks whose sizes depend on the shape only, and blocks are merged
# in a fixed order, so the thread count never changes a bit of the output.

cdef enum:
    # The COLUMNS scratch, from the tile.
    STATE_STRIDE = 2 * (COL_TILE + PAD)     # doubles per statistics item: mean, m2
    COEF_STRIDE = 3 * (COL_TILE + PAD)      # doubles per group: pivot, shift, scale,
                                            # then the double pass's m, k2, k0
    # float32 coefficients per group (m, k2, k0), each continued periodically
    # for a vector.
    WRAP = 32
    COEF32_STRIDE = 3 * (COL_TILE + WRAP)
    # Runs of R.runs_out a call of the rows pass (their coefficients on the stack).
    RUNS_PIECE = 64


cdef inline int tcode(in_t* kind) noexcept nogil:
    """The element code (apply.h) of in_t: a constant in each specialization."""
    if in_t is half_t:
        return 0
    elif in_t is float:
        return 1
    return 2


cdef inline int ocode(out_t* kind) noexcept nogil:
    if out_t is half_t:
        return 0
    elif out_t is float:
        return 1
    return 2


cdef inline const double* param_at(const char* p) noexcept nogil:
    return <const double*>p


# ---------------------------------------------------------------------------
# SLICES: the innermost axis is reduced.  A slice is n_runs runs (the outer
# reduced axes) of run_len values (the inner one), each cut into CHUNK blocks.

cdef struct SlicePlan:
    const Layout* L
    const Route* R
    int mode
    double eps
    bint has_y
    Py_ssize_t n_runs
    Py_ssize_t run_len
    Py_ssize_t n_chunks       # blocks per run
    Py_ssize_t stat_runs      # the runs the statistics see: n_runs, or with
    Py_ssize_t stat_len       # R.flat one run of the whole slice
    Py_ssize_t stat_chunks    # blocks per statistics run
    Moments* blocks           # WAY_SPLIT: one per (slice, statistics run, block)
    Coef* coefs               # WAY_SPLIT: one per slice
    float* g32                # float32 pass: gamma and beta along the run as
    float* b32                # float tables (R.g_table, R.b_table), or NULL
    double* g64               # float64 rows pass: gamma and beta along the
    double* b64               # run as tables (param_table's layout)
    const char* rows_end      # slices one contiguous block of x: its end
    const char* x_end         # ...read upwards slice after slice: its end (the
                              # statistics fetch ahead across slices); else NULL


cdef inline const char* run_start(const SlicePlan* p, const Odometer* s, const Odometer* r,
                                  int k) noexcept nogil:
    return p.L.base[k] + s.off[k] + r.off[k]


cdef inline void plan_runs(SlicePlan* p, const Layout* L, const Route* R) noexcept nogil:
    """A slice's runs (the outer reduced axes) and their blocks, for the
    output and for the statistics."""
    cdef int a
    p.run_len = L.red[L.n_red - 1].size
    p.n_runs = 1
    for a in range(L.n_red - 1):
        p.n_runs *= L.red[a].size
    p.n_chunks = (p.run_len + CHUNK - 1) // CHUNK
    p.stat_runs = 1 if R.flat else p.n_runs
    p.stat_len = L.slice_len if R.flat else p.run_len
    p.stat_chunks = (p.stat_len + CHUNK - 1) // CHUNK


cdef inline double slice_pivot(const SlicePlan* p, const Odometer* s, in_t* ki) noexcept nogil:
    """The pivot of slice s: from its first value, or with where= its first
    selected one (an unselected value may be anything; omitting NaN, its
    first selected number).  float16/float32 data and RMS take none."""
    cdef const Layout* L = p.L
    cdef const Axis* inner = &L.red[L.n_red - 1]
    cdef Odometer r
    cdef Py_ssize_t ri, j, e, n = p.run_len, sm = inner.stride[OP_M], sx = inner.stride[OP_X]
    cdef const unsigned char* m
    cdef double v
    if p.mode == MODE_RMS or in_t is not double:
        return 0.0               # (pick_pivot's 0 whatever the value)
    if L.base[OP_M] == NULL:
        return pick_pivot(sload(L.base[OP_X] + s.off[OP_X], ki), ki)
    odo_init(&r, L.red, L.n_red - 1, 0)
    for ri in range(p.n_runs):
        m = <const unsigned char*>run_start(p, s, &r, OP_M)
        if sm == 0:
            e = n                                  # (a run's one byte)
            j = 0 if m[0] else n
        else:
            j = next_stretch(m, sm, n, 0, &e)
        while j < n:
            v = sload(run_start(p, s, &r, OP_X) + j * sx, ki)
            if v == v or not L.omit:
                return pick_pivot(v, ki)
            j = j + 1
            if j == e:
                j = n if sm == 0 else next_stretch(m, sm, n, e, &e)
        odo_next(&r, L.red, L.n_red - 1)
    return 0.0


cdef inline const char* stat_block(const SlicePlan* p, const char* run, Py_ssize_t stride,
                                   Py_ssize_t b, Py_ssize_t* n) noexcept nogil:
    """Block b of the statistics run at `run`: its first value, and its
    length into n (CHUNK values; the last block what is left)."""
    n[0] = min(<Py_ssize_t>CHUNK, p.stat_len - b * CHUNK)
    return run + b * CHUNK * stride


cdef inline const char* stat_ahead_end(const SlicePlan* p, const char* run,
                                       Py_ssize_t stride, const char* ahead_end) noexcept nogil:
    """How far the statistics of the run at `run` may fetch: ahead_end, or
    (NULL) the run's end."""
    return ahead_end if ahead_end != NULL else run + p.stat_len * stride


cdef inline Moments block_moments(const SlicePlan* p, const Odometer* s, const Odometer* r,
                                  Py_ssize_t b, double pivot, const char* ahead_end,
                                  in_t* ki) noexcept nogil:
    """The moments of block b of statistics run r of slice s; contiguous
    data fetches ahead up to ahead_end (NULL: to the end of the run)."""
    cdef Py_ssize_t stride = p.L.red[p.L.n_red - 1].stride[OP_X], n
    cdef Py_ssize_t sm = p.L.red[p.L.n_red - 1].stride[OP_M]
    cdef const char* run = run_start(p, s, r, OP_X)
    cdef const char* x = stat_block(p, run, stride, b, &n)
    if p.L.base[OP_M] != NULL:
        return selected_moments(x, stride, <const unsigned char*>run_start(p, s, r, OP_M)
                                + b * CHUNK * sm, sm, n, pivot,
                                stat_ahead_end(p, run, stride, ahead_end), p.mode == MODE_RMS,
                                p.L.omit, ki)
    return run_moments(x, stride, n, pivot, stat_ahead_end(p, run, stride, ahead_end),
                       p.mode == MODE_RMS, ki)


cdef inline bint run_f32(const SlicePlan* p, const Odometer* s, const Odometer* r,
                         Py_ssize_t start, Py_ssize_t n, Coef c, bint down,
                         const char* ahead, const unsigned char* sel) noexcept nogil:
    """Values start .. start + n of run r of slice s in the float32 pass
    (sel: fn_run's); false, with nothing written, where float32 cannot hold
    the slice's coefficients (the double pass takes it then)."""
    cdef float m, k2, k0, gv, bv
    cdef const float* g = p.g32 + start if p.g32 != NULL else &gv
    cdef const float* b = p.b32 + start if p.b32 != NULL else &bv
    cdef const void* x = run_start(p, s, r, OP_X) + start * sizeof(float)
    cdef void* y = <void*>(run_start(p, s, r, OP_Y) + start * sizeof(float))
    cdef bint stream = p.R.stream and sel == NULL
    if not affine_f(c, 1.0, 0.0, &m, &k2, &k0):
        return False
    if p.g32 == NULL:
        gv = <float>param_at(run_start(p, s, r, OP_G))[0]
    if p.b32 == NULL:
        bv = <float>param_at(run_start(p, s, r, OP_B))[0]
    # Upwards, single runs (rows, read once already by their statistics) go
    # without; a slice of several runs fetches AHEAD_F32 values ahead.
    if not down and p.n_runs == 1:
        ahead = NULL
    # Constant increments, so that each call is inlined with its own loop.
    if p.g32 != NULL and p.b32 != NULL:
        fn_run_f(x, 1, y, 1, NULL, n, m, k2, k0, 0.0, g, 1, b, 1, FN_GAIN, stream, down,
                 ahead, NULL, AHEAD_F32, sel)
    elif p.g32 == NULL and p.b32 == NULL:
        fn_run_f(x, 1, y, 1, NULL, n, m, k2, k0, 0.0, g, 0, b, 0, FN_GAIN, stream, down,
                 ahead, NULL, AHEAD_F32, sel)
    else:
        fn_run_f(x, 1, y, 1, NULL, n, m, k2, k0, 0.0, g, p.g32 != NULL, b, p.b32 != NULL,
                 FN_GAIN, stream, down, ahead, NULL, AHEAD_F32, sel)
    return True


cdef inline void out_all(const SlicePlan* p, const Odometer* s, const Odometer* r,
                         Py_ssize_t start, Py_ssize_t n, Coef c, const char* ahead, bint down,
                         const unsigned char* sel, in_t* ki, out_t* ko) noexcept nogil:
    """The output of values start .. start + n of run r of slice s: the
    float32 pass where the route has it, else the double pass (contiguous
    x and y, gain and bias along the run or one value each, then folded),
    else value by value.  `ahead` (or NULL) is fetched as the run is
    written: the next run (a whole run on), or with `down` (the last value
    first) the run before.  sel (NULL, or where= bytes of contiguous x and
    y): the values it selects alone."""
    cdef const Axis* inner = &p.L.red[p.L.n_red - 1]
    cdef Py_ssize_t sx = inner.stride[OP_X], sy = inner.stride[OP_Y]
    cdef Py_ssize_t sg = inner.stride[OP_G], sb = inner.stride[OP_B]
    cdef const char* x = run_start(p, s, r, OP_X) + start * sx
    cdef char* y = <char*>run_start(p, s, r, OP_Y) + start * sy
    cdef const char* g = run_start(p, s, r, OP_G) + start * sg
    cdef const char* b = run_start(p, s, r, OP_B) + start * sb
    cdef double m, k2, k0
    cdef bint stream = p.R.stream and sel == NULL    # sel: y is read as it is written
    cdef Py_ssize_t j
    if in_t is float and out_t is float:
        if p.R.f32 and run_f32(p, s, r, start, n, c, down, ahead, sel):
            return
    if sx == sizeof(in_t) and sy == sizeof(out_t):
        if sg == 0 and sb == 0:
            affine_d(c, param_at(g)[0], param_at(b)[0], &m, &k2, &k0)
            fn_run_d(x, tcode(ki), y, ocode(ko), NULL, n, m, k2, k0, 0.0, NULL, 0, NULL, 0,
                     FN_PLAIN, stream, down, ahead, NULL, n, sel)
            return
        if sg == sizeof(double) and sb == sizeof(double):
            affine_d(c, 1.0, 0.0, &m, &k2, &k0)
            fn_run_d(x, tcode(ki), y, ocode(ko), NULL, n, m, k2, k0, 0.0, param_at(g), 1,
                     param_at(b), 1, FN_GAIN, stream, down, ahead, NULL, n, sel)
            return
        if (sg == 0 or sg == sizeof(double)) and (sb == 0 or sb == sizeof(double)):
            affine_d(c, 1.0, 0.0, &m, &k2, &k0)
            fn_run_d(x, tcode(ki), y, ocode(ko), NULL, n, m, k2, k0, 0.0, param_at(g), sg // 8,
                     param_at(b), sb // 8, FN_GAIN, stream, down, ahead, NULL, n, sel)
            return
    affine_d(c, 1.0, 0.0, &m, &k2, &k0)
    if sel == NULL:
        fn_strided(x, sx, tcode(ki), y, sy, ocode(ko), g, sg, b, sb, n, m, k2, k0)
        return
    for j in range(n):
        if sel[j]:
            fn_strided(x + j * sx, sx, tcode(ki), y + j * sy, sy, ocode(ko), g + j * sg, sg,
                       b + j * sb, sb, 1, m, k2, k0)


cdef inline void out_run(const SlicePlan* p, const Odometer* s, const Odometer* r,
                         Py_ssize_t start, Py_ssize_t n, Coef c, const char* ahead, bint down,
                         in_t* ki, out_t* ko) noexcept nogil:
    """The output of values start .. start + n of run r of slice s (out_all);
    with where=, of those selected: contiguous data a piece of the mask at
    a time (next_piece: whole stretches selected as they are, mixed pieces
    lane by lane), other data each stretch of selected values alone.  A
    streamed stretch's last part line goes as a piece (with its bytes,
    all set): streamed, a part line costs the memory a read and a write."""
    cdef const Axis* inner = &p.L.red[p.L.n_red - 1]
    cdef Py_ssize_t sm = inner.stride[OP_M], j = 0, e, cut
    cdef const unsigned char* m
    cdef bint pieces = (sm == 1 and inner.stride[OP_X] == sizeof(in_t)
                        and inner.stride[OP_Y] == sizeof(out_t))
    cdef int k
    if p.L.base[OP_M] == NULL:
        out_all(p, s, r, start, n, c, ahead, down, NULL, ki, ko)
        return
    m = <const unsigned char*>run_start(p, s, r, OP_M) + start * sm
    k = next_part(m, sm, n, pieces, &j, &e)
    while k != 0:
        cut = e
        if k == 1 and pieces and p.R.stream:
            cut = max(j, e - <Py_ssize_t>((<size_t>(run_start(p, s, r, OP_Y) + (start + e)
                                                   * <Py_ssize_t>sizeof(out_t)) % 64)
                                          // sizeof(out_t)))
        if cut > j:
            out_all(p, s, r, start + j, cut - j, c, NULL, False, NULL if k == 1 else m + j,
                    ki, ko)
        if cut < e:
            out_all(p, s, r, start + cut, e - cut, c, NULL, False, m + cut, ki, ko)
        j = e
        k = next_part(m, sm, n, pieces, &j, &e)


ctypedef fused table_t:
    float
    double


cdef inline table_t* param_table(const Layout* L, int k, Py_ssize_t n,
                                 table_t* kind) noexcept nogil:
    """n values of parameter k along the run (inner stride one float64, or 0
    for one value) as table_t, continued periodically for WRAP more
    (table[n + j] = table[j mod n], for the rows pass); NULL if out of
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


cdef int slice_tables(SlicePlan* p) noexcept nogil:
    """The parameter tables the route's passes read: gamma and beta along
    the run as floats (the float32 pass; with rows written as one run, one
    value for every row too), or as doubles (the float64 rows pass); none
    for the rows pass of a call without either."""
    cdef const Route* R = p.R
    # Neither parameter given: the rows pass applies 1 and 0 without tables.
    cdef bint rows = R.rows_out and not (p.L.base[OP_G] == <char*>&fn_one
                                         and p.L.base[OP_B] == <char*>&fn_zero_value)
    cdef bint rows_f32 = rows and R.f32
    if R.g_table or rows_f32:
        p.g32 = param_table(p.L, OP_G, p.run_len, <float*>NULL)
        if p.g32 == NULL:
            return -1
    if R.b_table or rows_f32:
        p.b32 = param_table(p.L, OP_B, p.run_len, <float*>NULL)
        if p.b32 == NULL:
            return -1
    if rows and not R.f32:
        p.g64 = param_table(p.L, OP_G, p.run_len, <double*>NULL)
        p.b64 = param_table(p.L, OP_B, p.run_len, <double*>NULL)
        if p.g64 == NULL or p.b64 == NULL:
            return -1
    return 0


cdef inline void free_tables(SlicePlan* p) noexcept nogil:
    fn_free(p.g32)
    fn_free(p.b32)
    fn_free(p.g64)
    fn_free(p.b64)


cdef inline void prefetch_slice(const SlicePlan* p, Py_ssize_t si) noexcept nogil:
    """Start loading the head of slice si, so that its reads overlap the
    writes of the slice being normalized (up to PREFETCH_BYTES of it)."""
    cdef Odometer s
    cdef const Axis* inner = &p.L.red[p.L.n_red - 1]
    odo_init(&s, p.L.kept, p.L.n_kept, si)
    fetch_lines(p.L.base[OP_X] + s.off[OP_X],
                min(<Py_ssize_t>PREFETCH_BYTES, p.stat_len * inner.stride[OP_X]))


cdef inline void prefetch_run(const SlicePlan* p, const Odometer* s, const Odometer* r,
                              Py_ssize_t nbytes) noexcept nogil:
    """Start loading the first nbytes of run r of slice s into L2."""
    fetch_lines(run_start(p, s, r, OP_X), nbytes)


cdef enum:
    # What the statistics of a run of a slice of several fetch beyond its
    # own STATS_AHEAD on (runs_fetch)
    RUNS_OWN = 0             # nothing more: the hardware prefetchers follow it
    RUNS_NEXT_SLICE = 1      # the same run of the next slice (run_ahead_bytes)
    RUNS_NEXT_RUN = 2        # the head of the next run of its own slice

RUNS_FETCH_NAMES = ("own", "next slice", "next run")


cdef inline Py_ssize_t run_bytes_of(const SlicePlan* p) noexcept nogil:
    """The bytes a statistics run of x spans."""
    return p.stat_len * p.L.red[p.L.n_red - 1].stride[OP_X]


cdef inline int runs_fetch(const SlicePlan* p) noexcept nogil:
    """What each run of a slice of several fetches as it is read: runs up
    to IMAGE_RUN_BYTES the same run of the next slice (run_ahead_bytes;
    given statistics too), longer ones up to twice STATS_AHEAD (whose own
    statistics fetch little of them) the first RUN_AHEAD_BYTES of the next
    run of their own slice, for their statistics; longer ones nothing
    more."""
    cdef Py_ssize_t run_bytes = run_bytes_of(p)
    if p.stat_runs <= 1:
        return RUNS_OWN
    if run_bytes <= IMAGE_RUN_BYTES:
        return RUNS_NEXT_SLICE
    if run_bytes <= 2 * STATS_AHEAD:
        return RUNS_NEXT_RUN
    return RUNS_OWN


cdef object runs_fetch_of(const Layout* L, const Route* R, int mode):
    """explain's name of runs_fetch for a call on the slices pattern whose
    slices are several runs, else None."""
    cdef SlicePlan p
    p.L = L
    p.R = R
    p.mode = mode
    plan_runs(&p, L, R)
    if R.pattern != SLICES or p.stat_runs <= 1 or mode == MODE_GIVEN:
        return None
    return RUNS_FETCH_NAMES[runs_fetch(&p)]


cdef enum:
    # What the output of a slice of one contiguous run fetches of the next
    # slice (next_fetch)
    NEXT_HEAD = 0            # its first PREFETCH_BYTES, as the output starts
    NEXT_WHOLE = 1           # all of it, a line as each line is written

NEXT_FETCH_NAMES = ("head", "whole")


cdef inline int next_fetch(const SlicePlan* p) noexcept nogil:
    """What the output of a slice of one contiguous run fetches of the next
    slice for its statistics: the whole of it on one thread, through the
    double pass (the float32 pass of a single run fetches nothing as it
    writes), where the slice is at most NEXT_SLICE_BYTES (it and the next
    within half of L2); else its head.  A longer slice's fetched lines
    were pushed out of L2 before the statistics came to them, read twice
    from memory; two threads writing measured faster without them too."""
    if p.R.threads == 1 and not p.R.f32 and run_bytes_of(p) <= NEXT_SLICE_BYTES:
        return NEXT_WHOLE
    return NEXT_HEAD


cdef object next_fetch_of(const Layout* L, const Route* R, int mode, bint has_y,
                          Py_ssize_t isz):
    """explain's name of next_fetch for a call whose slices (WAY_WHOLE)
    are one contiguous run each of isz-byte values and are written, else
    None."""
    cdef SlicePlan p
    p.L = L
    p.R = R
    p.mode = mode
    plan_runs(&p, L, R)
    if (R.pattern != SLICES or R.way != WAY_WHOLE or not has_y
            or R.runs_out or p.n_runs > 1 or L.n_slices < 2
            or L.red[L.n_red - 1].stride[OP_X] != isz):
        return None
    return NEXT_FETCH_NAMES[next_fetch(&p)]


cdef inline Py_ssize_t run_ahead_bytes(const SlicePlan* p, Py_ssize_t si) noexcept nogil:
    """How much of each run of slice si + 1 slice si prefetches: 0 but
    where runs_fetch says the next slice's, and for the last slice."""
    if si + 1 >= p.L.n_slices or runs_fetch(p) != RUNS_NEXT_SLICE:
        return 0
    return min(<Py_ssize_t>RUN_AHEAD_BYTES, run_bytes_of(p))


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
        m = nonfinite_moments(x, sizeof(in_t), n, pivot, ki)
    moments_merge(acc, &m)


cdef Moments short_runs_moments(const SlicePlan* p, const Odometer* s, double pivot,
                                const Odometer* s_next, Py_ssize_t run_ahead,
                                in_t* ki) noexcept nogil:
    """The moments of a slice of several short contiguous runs (channels of
    small NCHW images), FN_W runs at a time (rows_moments), merged in run
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
        rows_moments(rows, lanes, p.run_len, piv, mean, m2, NULL, ki)
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
    one (runs up to IMAGE_RUN_BYTES, run_ahead_bytes), or the next run of
    its own (runs_fetch)."""
    cdef const Layout* L = p.L
    cdef Odometer r, r_next, s_next
    cdef Moments acc = moments_empty(), m
    cdef Py_ssize_t ri, b, run_ahead = 0, hand_on = 0
    cdef double pivot
    if p.mode == MODE_GIVEN:
        return given(L, s.off[OP_S])
    run_ahead = run_ahead_bytes(p, si)
    if run_ahead > 0:
        odo_init(&s_next, L.kept, L.n_kept, si + 1)
    pivot = slice_pivot(p, s, ki)
    if p.R.short_runs:
        acc = short_runs_moments(p, s, pivot, &s_next, run_ahead, ki)
    else:
        if runs_fetch(p) == RUNS_NEXT_RUN:
            hand_on = min(run_bytes_of(p), <Py_ssize_t>RUN_AHEAD_BYTES)
            odo_init(&r_next, L.red, L.n_red - 1, 1)
        odo_init(&r, L.red, L.n_red - 1, 0)
        for ri in range(p.stat_runs):
            if run_ahead > 0:
                prefetch_run(p, &s_next, &r, run_ahead)
            if hand_on > 0 and ri + 1 < p.stat_runs:
                prefetch_run(p, s, &r_next, hand_on)
                odo_next(&r_next, L.red, L.n_red - 1)
            for b in range(p.stat_chunks):
                m = block_moments(p, s, &r, b, pivot, p.x_end, ki)
                moments_merge(&acc, &m)
            odo_next(&r, L.red, L.n_red - 1)
    return finish(acc, pivot, p.mode, p.eps, L, s.off[OP_S])


cdef void slice_runs(const SlicePlan* p, const Odometer* s, Coef c, in_t* ki,
                     out_t* ko) noexcept nogil:
    """The output of slice s, run after run (as rows with R.runs_out)."""
    cdef Odometer r
    cdef Py_ssize_t ri
    if p.R.runs_out:
        runs_rows(p, s, c, ki, ko)
        return
    odo_init(&r, p.L.red, p.L.n_red - 1, 0)
    for ri in range(p.n_runs):
        out_run(p, s, &r, 0, p.run_len, c, NULL, False, ki, ko)
        odo_next(&r, p.L.red, p.L.n_red - 1)


cdef inline void slice_runs_of(const SlicePlan* p, Py_ssize_t si, Coef c, in_t* ki,
                               out_t* ko) noexcept nogil:
    cdef Odometer s
    odo_init(&s, p.L.kept, p.L.n_kept, si)
    slice_runs(p, &s, c, ki, ko)


cdef void runs_rows(const SlicePlan* p, const Odometer* s, Coef c, in_t* ki,
                    out_t* ko) noexcept nogil:
    """R.runs_out: the short runs of slice s (one block of x and of y) as
    the rows of the rows pass, RUNS_PIECE a call, each run's gain and bias
    folded into its coefficients; a piece whose coefficients float32
    cannot hold goes run by run (out_run).  Run by run, each run's call
    costs as much as its few values."""
    cdef const Layout* L = p.L
    cdef Odometer r, r0
    cdef float fm[RUNS_PIECE]
    cdef float fk2[RUNS_PIECE]
    cdef float fk0[RUNS_PIECE]
    cdef double dm[RUNS_PIECE]
    cdef double dk2[RUNS_PIECE]
    cdef double dk0[RUNS_PIECE]
    cdef Py_ssize_t ri = 0, k, cnt, n = p.run_len
    cdef const char* x
    cdef char* y
    cdef double g, b
    cdef bint ok
    odo_init(&r, L.red, L.n_red - 1, 0)
    while ri < p.n_runs:
        cnt = min(<Py_ssize_t>RUNS_PIECE, p.n_runs - ri)
        x = L.base[OP_X] + s.off[OP_X] + ri * n * <Py_ssize_t>sizeof(in_t)
        y = L.base[OP_Y] + s.off[OP_Y] + ri * n * <Py_ssize_t>sizeof(out_t)
        ok = True
        for k in range(cnt):
            g = param_at(run_start(p, s, &r, OP_G))[0]
            b = param_at(run_start(p, s, &r, OP_B))[0]
            if in_t is float and out_t is float:
                ok = ok and affine_f(c, g, b, &fm[k], &fk2[k], &fk0[k])
            else:
                affine_d(c, g, b, &dm[k], &dk2[k], &dk0[k])
            odo_next(&r, L.red, L.n_red - 1)
        if in_t is float and out_t is float:
            if ok:
                fn_rows_f(x, 1, y, 1, NULL, cnt, n, fm, fk2, fk0, NULL, NULL, NULL, FN_PLAIN,
                          p.R.stream)
            else:
                odo_init(&r0, L.red, L.n_red - 1, ri)
                for k in range(cnt):
                    out_all(p, s, &r0, 0, n, c, NULL, False, NULL, ki, ko)
                    odo_next(&r0, L.red, L.n_red - 1)
        elif in_t is double and out_t is double:
            fn_rows_d(x, 2, y, 2, NULL, cnt, n, dm, dk2, dk0, NULL, NULL, NULL, FN_PLAIN,
                      p.R.stream)
        else:
            odo_init(&r0, L.red, L.n_red - 1, ri)
            for k in range(cnt):     # not routed here (R.runs_out: x and y alike)
                out_all(p, s, &r0, 0, n, c, NULL, False, NULL, ki, ko)
                odo_next(&r0, L.red, L.n_red - 1)
        ri = ri + cnt


cdef void slice_whole(const SlicePlan* p, Py_ssize_t si, in_t* ki, out_t* ko) noexcept nogil:
    """WAY_WHOLE: statistics and output of slice si by one thread (the
    slice is still in cache for its second look when it fits).  Into a
    fresh y written from the last slice down (R.descend), its runs go last
    first too, each fetching the run before.  Upwards, runs of
    HAND_ON_BYTES or more fetch the next run (the last, the next slice's
    first) as they are written; single contiguous runs the next slice."""
    cdef const Layout* L = p.L
    cdef Odometer s, r, s_next, r_next
    cdef Coef c
    cdef Py_ssize_t ri, run_ahead = 0, nxt
    cdef const char* ahead = NULL
    cdef bint down = p.R.descend, hand_on
    odo_init(&s, L.kept, L.n_kept, si)
    c = slice_coef(p, si, &s, ki)
    if not p.has_y:
        return
    if p.R.runs_out:
        runs_rows(p, &s, c, ki, ko)
        return
    nxt = si - 1 if down else si + 1
    if 0 <= nxt < L.n_slices:
        odo_init(&s_next, L.kept, L.n_kept, nxt)
        if p.n_runs > 1:
            # With the statistics given, this is the slice's one look.
            if p.mode == MODE_GIVEN:
                run_ahead = run_ahead_bytes(p, si)
        elif L.red[L.n_red - 1].stride[OP_X] == sizeof(in_t) and next_fetch(p) == NEXT_WHOLE:
            ahead = L.base[OP_X] + s_next.off[OP_X]
        else:
            prefetch_slice(p, nxt)
    if down and p.n_runs > 1:
        for ri in range(p.n_runs - 1, -1, -1):
            odo_init(&r, L.red, L.n_red - 1, ri)
            if run_ahead > 0:
                prefetch_run(p, &s_next, &r, run_ahead)
            ahead = NULL
            if ri > 0 and L.red[L.n_red - 1].stride[OP_X] == sizeof(in_t):
                odo_init(&r_next, L.red, L.n_red - 1, ri - 1)
                ahead = L.base[OP_X] + s.off[OP_X] + r_next.off[OP_X]
            out_run(p, &s, &r, 0, p.run_len, c, ahead, True, ki, ko)
        return
    hand_on = p.n_runs > 1 and p.run_len * <Py_ssize_t>sizeof(in_t) >= HAND_ON_BYTES
    if hand_on and ahead == NULL and 0 <= nxt < L.n_slices:
        ahead = L.base[OP_X] + s_next.off[OP_X]      # the next slice's first run
    odo_init(&r, L.red, L.n_red - 1, 0)
    if hand_on:
        odo_init(&r_next, L.red, L.n_red - 1, 1)     # the run after r
    for ri in range(p.n_runs):
        if run_ahead > 0:
            prefetch_run(p, &s_next, &r, run_ahead)
        if hand_on and ri + 1 < p.n_runs:
            out_run(p, &s, &r, 0, p.run_len, c, run_start(p, &s, &r_next, OP_X), down, ki, ko)
            odo_next(&r_next, L.red, L.n_red - 1)
        else:
            out_run(p, &s, &r, 0, p.run_len, c, ahead, down, ki, ko)
        odo_next(&r, L.red, L.n_red - 1)


# The statistics of a single contiguous run taken a piece at a time
# (rows_turns): its finished blocks merged, the sums of the one under way.
cdef struct RowSums:
    Lanes t
    Moments acc
    const char* x
    Py_ssize_t b             # the block under way, CHUNK values each
    Py_ssize_t j             # its steps summed
    double pivot


cdef inline void row_sums_block(RowSums* u, const SlicePlan* p, in_t* ki) noexcept nogil:
    cdef Py_ssize_t n
    cdef const char* x = stat_block(p, u.x, sizeof(in_t), u.b, &n)
    lanes_begin(&u.t, x, sizeof(in_t), n, stat_ahead_end(p, u.x, sizeof(in_t), p.x_end), ki)
    u.j = 0


cdef inline void row_sums_begin(RowSums* u, const SlicePlan* p, const Odometer* s,
                                in_t* ki) noexcept nogil:
    u.x = p.L.base[OP_X] + s.off[OP_X]
    u.pivot = slice_pivot(p, s, ki)
    u.acc = moments_empty()
    u.b = 0
    row_sums_block(u, p, ki)


cdef inline void row_sums_to(RowSums* u, const SlicePlan* p, Py_ssize_t upto,
                             in_t* ki) noexcept nogil:
    """Sum the run's values up to `upto`: whole steps of each block, and a
    block's tail and merge once upto reaches its end.  Block by block,
    step by step, these are block_moments' operations in its order: the
    bits of slice_coef."""
    cdef Py_ssize_t lanes = FN_NV * FN_W, start, n, j1
    cdef const char* x
    cdef bint squares = p.mode == MODE_RMS
    cdef Moments m
    while u.b < p.stat_chunks:
        start = u.b * CHUNK
        x = stat_block(p, u.x, sizeof(in_t), u.b, &n)
        j1 = max(<Py_ssize_t>0, min(n, upto - start)) // lanes
        if j1 > u.j:
            lanes_steps(&u.t, x, sizeof(in_t), u.j, j1, u.pivot, squares, ki)
            u.j = j1
        if upto < start + n:
            return
        m = run_end(&u.t, x, sizeof(in_t), n, u.pivot, squares, ki)
        moments_merge(&u.acc, &m)
        u.b = u.b + 1
        if u.b < p.stat_chunks:
            row_sums_block(u, p, ki)


cdef void rows_turns(const SlicePlan* p, Py_ssize_t first, Py_ssize_t count, in_t* ki,
                     out_t* ko) noexcept nogil:
    """WAY_TURNS: slices first .. first + count, single contiguous runs from
    memory.  Slice k's output goes in pieces of TURN_BYTES, each followed by
    the statistics of as many values of slice k + 1, so that reads and
    writes are in flight together (slice by slice, the statistics read
    with nothing written and the output writes with nothing read).

    The pieces end where y's address (streamed: fn_head) or the run's
    offset is a multiple of 64 bytes, so that every piece after the first
    starts where one call's vectors would: the output has one call's bits,
    and the statistics have slice_coef's."""
    cdef const Layout* L = p.L
    cdef Odometer s, s_next, r
    cdef RowSums u
    cdef Coef c
    cdef Py_ssize_t k, start, end, n = p.run_len, osz = sizeof(out_t)
    cdef Py_ssize_t piece = TURN_BYTES // osz, lead = 0
    cdef bint more
    odo_init(&s, L.kept, L.n_kept, first)
    odo_init(&r, L.red, L.n_red - 1, 0)
    c = slice_coef(p, first, &s, ki)
    for k in range(count):
        more = k + 1 < count
        if more:
            s_next = s
            odo_next(&s_next, L.kept, L.n_kept)
            row_sums_begin(&u, p, &s_next, ki)
        if p.R.stream:
            lead = (64 // osz - (<Py_ssize_t>(<size_t>(L.base[OP_Y] + s.off[OP_Y]) // osz)
                                 % (64 // osz))) % (64 // osz)
        start = 0
        end = min(n, lead + piece)
        while True:
            # (never masked: the planner keeps where= off this way)
            out_all(p, &s, &r, start, end - start, c, NULL, False, NULL, ki, ko)
            if more:
                row_sums_to(&u, p, end, ki)
            if end == n:
                break
            start = end
            end = min(n, end + piece)
        if not more:
            break
        c = finish(u.acc, u.pivot, p.mode, p.eps, L, s_next.off[OP_S])
        s = s_next


cdef void lanes_item(const SlicePlan* p, Py_ssize_t first, Py_ssize_t count, in_t* ki,
                     out_t* ko) noexcept nogil:
    """WAY_LANES: slices first .. first + count, each one short run (or
    block of runs, R.flat), FN_W at a time: the runs are copied side by
    side (value j of every slice in one vector), so one vector Welford
    update serves FN_W slices; then each slice is finished and written.
    A slice's own way (lanes along the slice, merged) costs more per slice
    than its few values do."""
    cdef const Layout* L = p.L
    cdef const Axis* inner = &L.red[L.n_red - 1]
    cdef Py_ssize_t n = p.stat_len, sx = inner.stride[OP_X], i = first, j
    cdef double buf[SHORT_SLICE_MAX * 8]
    cdef double piv[8]
    cdef double lane_mean[8]
    cdef double lane_m2[8]
    cdef Odometer at[8]
    cdef Odometer s
    cdef fn_vd mean, m2
    cdef Moments m
    cdef Coef c
    cdef const char* xp
    cdef int l, lanes, k
    odo_init(&s, L.kept, L.n_kept, first)
    while i < first + count:
        lanes = <int>min(<Py_ssize_t>FN_W, first + count - i)
        for l in range(FN_W):
            if l < lanes:
                # Only the offsets: out_run and finish read no more.
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
                slice_runs(p, &at[l], c, ki, ko)
        i = i + lanes


cdef inline void lanes_scale(int mode, Py_ssize_t n, double eps, const double* piv,
                             const double* mean, const double* m2,
                             double* scale) noexcept nogil:
    """The scales 1 / sqrt(var + eps) of FN_W slices of n values from
    their moments (rms_norm: the mean square's; MODE_STATS: 1)."""
    cdef fn_vd var, mv
    if mode == MODE_STATS:
        fn_store_f64(scale, fn_set1(1.0))
        return
    var = fn_div(fn_load_f64(m2), fn_set1(<double>n))
    if mode == MODE_RMS:
        mv = fn_add(fn_load_f64(piv), fn_load_f64(mean))
        var = fn_fma(mv, mv, var)
    fn_store_f64(scale, rstd_lanes(var, eps))


cdef void rows_item(const SlicePlan* p, Py_ssize_t first, Py_ssize_t count, in_t* ki,
                    out_t* ko) noexcept nogil:
    """WAY_ROWS: slices first .. first + count (R.batch at most), each one
    short contiguous run (or block of runs, R.flat).  Statistics FN_W
    slices (a group) at a time: a group's moments (rows_moments) and
    scales, then the coefficients of the group before it (with no
    statistics to write in vectors, one lane per slice), whose scales'
    division and square root have had the group's reads to finish in.
    Output: with R.rows_out, the rows follow each other and are written in
    one pass over the item, still in L2 (fn_rows_*); others slice by
    slice."""
    cdef const Layout* L = p.L
    cdef const Route* R = p.R
    cdef Py_ssize_t n = p.stat_len, i = 0, ci = 0, j
    # The item's rows, pivots, moments and scales (FN_W lanes past the
    # last, for a vector's stand-ins).
    cdef const char* all_rows[SHORT_BATCH + 8]
    cdef double all_piv[SHORT_BATCH + 8]
    cdef double all_mean[SHORT_BATCH + 8]
    cdef double all_m2[SHORT_BATCH + 8]
    cdef double all_scale[SHORT_BATCH + 8]
    cdef Py_ssize_t all_off[SHORT_BATCH + 8]
    cdef const char** rows
    cdef double* piv
    cdef double* mean
    cdef double* m2
    cdef Py_ssize_t* off_s
    cdef double* scale
    cdef Coef coefs[SHORT_BATCH]
    cdef float f_m[SHORT_BATCH]
    cdef float f_k2[SHORT_BATCH]
    cdef float f_k0[SHORT_BATCH]
    cdef double d_m[SHORT_BATCH]
    cdef double d_k2[SHORT_BATCH]
    cdef double d_k0[SHORT_BATCH]
    cdef Odometer s
    cdef Moments m
    cdef bint rows_f32 = R.rows_out and R.f32, rows_f64 = R.rows_out and not R.f32
    cdef bint quick = (R.rows_out and L.stat[0] == NULL
                       and (p.mode == MODE_CENTER or p.mode == MODE_RMS))
    # Rows with their float32 coefficients (rows_f32); a row that cannot
    # have them ends the float32 pass there, and it and the rest go one by one.
    cdef Py_ssize_t n_f32 = count
    cdef const char* x0
    cdef char* y0
    cdef int l, lanes
    # One kept axis (rows of a matrix): a row's offsets are its index times
    # the strides, without the odometer's carries (which short rows pay
    # every few values).
    cdef bint one_axis = L.n_kept == 1
    # float16/float32 rows that rows_moments reads one at a time (its one
    # look) fetch ahead as they are read.
    cdef bint fetch_as_read = in_t is not double and rows_read_singly(n)
    cdef Py_ssize_t sx = L.kept[0].stride[OP_X] if one_axis else 0
    cdef Py_ssize_t ss = L.kept[0].stride[OP_S] if one_axis else 0
    odo_init(&s, L.kept, L.n_kept, first)
    x0 = L.base[OP_X] + s.off[OP_X]
    y0 = L.base[OP_Y] + s.off[OP_Y]
    while ci < count:
        if i < count:
            lanes = <int>min(<Py_ssize_t>FN_W, count - i)
            rows = &all_rows[i]
            piv = &all_piv[i]
            for l in range(FN_W):
                if l < lanes:
                    if one_axis:
                        rows[l] = x0 + (i + l) * sx
                        all_off[i + l] = s.off[OP_S] + (i + l) * ss
                    else:
                        rows[l] = L.base[OP_X] + s.off[OP_X]
                        all_off[i + l] = s.off[OP_S]
                        odo_next(&s, L.kept, L.n_kept)
                    piv[l] = pick_pivot(sload(rows[l], ki), ki)
                else:
                    rows[l] = rows[0]        # a stand-in, its results unused
                    piv[l] = piv[0]
            if p.rows_end != NULL and not fetch_as_read:
                # the rows STATS_AHEAD bytes on (those that follow in memory
                # are read next)
                fetch_ahead_of(rows[0], lanes * n * <Py_ssize_t>sizeof(in_t), p.rows_end)
            if p.mode != MODE_GIVEN:
                rows_moments(rows, lanes, n, piv, &all_mean[i], &all_m2[i],
                             p.rows_end if fetch_as_read else NULL, ki)
                # as the moments come: the division overlaps the next
                # group's reads (a pass of its own waited on it)
                lanes_scale(p.mode, n, p.eps, piv, &all_mean[i], &all_m2[i], &all_scale[i])
            i = i + lanes
            # the coefficients a group behind the moments
            if i < count and ci + FN_W >= i:
                continue
        lanes = <int>min(<Py_ssize_t>FN_W, count - ci)
        rows = &all_rows[ci]
        piv = &all_piv[ci]
        mean = &all_mean[ci]
        m2 = &all_m2[ci]
        off_s = &all_off[ci]
        scale = &all_scale[ci]
        if p.mode != MODE_GIVEN:
            # No statistics to write and the whole item in one pass: the
            # coefficients of the FN_W slices in vectors.
            if quick and n_f32 == count:
                if rows_f32 and lanes_affine_f(piv, mean, m2, scale, p.mode, &f_m[ci], &f_k2[ci],
                                               &f_k0[ci]):
                    ci = ci + lanes
                    continue
                if rows_f64 and lanes_affine_d(piv, mean, m2, scale, p.mode, &d_m[ci],
                                               &d_k2[ci], &d_k0[ci]):
                    ci = ci + lanes
                    continue
        for l in range(lanes):
            j = ci + l
            if p.mode == MODE_GIVEN:
                coefs[j] = given(L, off_s[l])
            elif mean[l] - mean[l] == 0.0 and m2[l] - m2[l] == 0.0:
                coefs[j] = record_lane(<double>n, piv[l], mean[l], m2[l], scale[l], p.mode,
                                       p.eps, L, off_s[l])
            else:
                # inf, NaN or overflow: Welford's way, as for a long run
                m = nonfinite_moments(rows[l], sizeof(in_t), n, piv[l], ki)
                coefs[j] = finish(m, piv[l], p.mode, p.eps, L, off_s[l])
            if rows_f32 and n_f32 == count:
                if not affine_f(coefs[j], 1.0, 0.0, &f_m[j], &f_k2[j], &f_k0[j]):
                    n_f32 = j
            elif rows_f64:
                affine_d(coefs[j], 1.0, 0.0, &d_m[j], &d_k2[j], &d_k0[j])
        ci = ci + lanes
    if not p.has_y:
        return
    if in_t is float and out_t is float:
        if rows_f32:
            if n_f32 > 0:
                fn_rows_f(x0, 1, y0, 1, NULL, n_f32, n, f_m, f_k2, f_k0, NULL, p.g32, p.b32,
                          FN_GAIN, R.stream)
            if n_f32 == count:
                return
    if in_t is double and out_t is double:
        if rows_f64:
            fn_rows_d(x0, 2, y0, 2, NULL, count, n, d_m, d_k2, d_k0, NULL, p.g64, p.b64,
                      FN_GAIN, R.stream)
            return
    if not rows_f32:
        n_f32 = 0
    odo_init(&s, L.kept, L.n_kept, first + n_f32)
    for j in range(n_f32, count):
        slice_runs(p, &s, coefs[j], ki, ko)
        odo_next(&s, L.kept, L.n_kept)


cdef void split_stats(const SlicePlan* p, Py_ssize_t item, in_t* ki) noexcept nogil:
    """WAY_SPLIT, pass 1: the moments of one (slice, run, block)."""
    cdef Odometer s, r
    cdef Py_ssize_t per_slice = p.stat_runs * p.stat_chunks
    cdef Py_ssize_t si = item // per_slice, rest = item % per_slice
    odo_init(&s, p.L.kept, p.L.n_kept, si)
    odo_init(&r, p.L.red, p.L.n_red - 1, rest // p.stat_chunks)
    p.blocks[item] = block_moments(p, &s, &r, rest % p.stat_chunks, p.coefs[si].pivot, NULL,
                                   ki)


cdef void split_output(const SlicePlan* p, Py_ssize_t item, in_t* ki, out_t* ko) noexcept nogil:
    """WAY_SPLIT, pass 2: the output of one (slice, run, block)."""
    cdef Odometer s, r
    cdef Py_ssize_t per_slice = p.n_runs * p.n_chunks
    cdef Py_ssize_t si = item // per_slice, rest = item % per_slice
    cdef Py_ssize_t start = (rest % p.n_chunks) * CHUNK
    odo_init(&s, p.L.kept, p.L.n_kept, si)
    odo_init(&r, p.L.red, p.L.n_red - 1, rest // p.n_chunks)
    out_run(p, &s, &r, start, min(<Py_ssize_t>CHUNK, p.run_len - start), p.coefs[si], NULL,
            False, ki, ko)
    fn_sfence()


cdef inline void slices_item(const SlicePlan* p, Py_ssize_t i, in_t* ki,
                             out_t* ko) noexcept nogil:
    """Work item i of the ways that take whole slices: R.batch slices from
    i * R.batch (WAY_ROWS, WAY_LANES, WAY_TURNS) or slice i (WAY_WHOLE, in
    descending order into a fresh y written last first)."""
    cdef const Route* R = p.R
    cdef Py_ssize_t first = i * R.batch
    if R.way == WAY_ROWS:
        rows_item(p, first, min(R.batch, p.L.n_slices - first), ki, ko)
    elif R.way == WAY_TURNS:
        rows_turns(p, first, min(R.batch, p.L.n_slices - first), ki, ko)
    elif R.way == WAY_LANES:
        lanes_item(p, first, min(R.batch, p.L.n_slices - first), ki, ko)
    else:
        slice_whole(p, p.L.n_slices - 1 - i if R.descend else i, ki, ko)


cdef const char* contiguous_end(const SlicePlan* p, in_t* ki) noexcept nogil:
    """The end of x when its slices are single runs or blocks (R.flat) that
    follow each other in memory (C-ordered rows), else NULL."""
    cdef const Layout* L = p.L
    cdef Py_ssize_t extent
    cdef int a
    if p.stat_runs != 1 or L.red[L.n_red - 1].stride[OP_X] != sizeof(in_t):
        return NULL
    extent = p.stat_len * <Py_ssize_t>sizeof(in_t)
    for a in range(L.n_kept - 1, -1, -1):
        if L.kept[a].stride[OP_X] != extent:
            return NULL
        extent = extent * L.kept[a].size
    return L.base[OP_X] + extent


cdef int slices_forward(const Layout* L, const Route* R, int mode, double eps, bint has_y,
                        in_t* ki, out_t* ko) noexcept nogil:
    """The SLICES schedule: whole slices per work item (WAY_ROWS, WAY_LANES,
    WAY_WHOLE), or a few long slices split into blocks (WAY_SPLIT), whose
    blocks are merged in the order slice_whole merges them, so both give
    the same bits."""
    cdef SlicePlan p
    cdef int nthreads = R.threads
    cdef Py_ssize_t i, n_items, si, per_slice
    cdef Odometer s
    cdef Moments acc
    p.L = L
    p.R = R
    p.mode = mode
    p.eps = eps
    p.has_y = has_y
    plan_runs(&p, L, R)
    p.blocks = NULL
    p.coefs = NULL
    p.g32 = p.b32 = NULL
    p.g64 = p.b64 = NULL
    # Into a fresh y slices go last first: their statistics fetch within
    # the slice.  Calls in cache fetch nothing ahead.
    p.rows_end = NULL if R.in_cache else contiguous_end(&p, ki)
    p.x_end = NULL if R.descend else p.rows_end
    if has_y and slice_tables(&p) != 0:
        free_tables(&p)
        return -1
    if R.way != WAY_SPLIT:
        # A thread orders its streamed stores once, after its last item.
        if R.way == WAY_ROWS or R.way == WAY_LANES or R.way == WAY_TURNS:
            n_items = (L.n_slices + R.batch - 1) // R.batch
        else:
            n_items = L.n_slices
        if nthreads > 1:
            with parallel(num_threads=nthreads):
                for i in prange(n_items, schedule="runtime"):
                    slices_item(&p, i, ki, ko)
                fn_sfence()
        else:
            for i in range(n_items):
                slices_item(&p, i, ki, ko)
            fn_sfence()
        free_tables(&p)
        return 0
    per_slice = p.stat_runs * p.stat_chunks
    n_items = L.n_slices * per_slice
    p.coefs = <Coef*>fn_malloc(L.n_slices * sizeof(Coef))
    if p.coefs == NULL:
        free_tables(&p)
        return -1
    if mode != MODE_GIVEN:
        p.blocks = <Moments*>fn_malloc(n_items * sizeof(Moments))
        if p.blocks == NULL:
            fn_free(p.coefs)
            free_tables(&p)
            return -1
        for si in range(L.n_slices):
            odo_init(&s, L.kept, L.n_kept, si)
            p.coefs[si].pivot = slice_pivot(&p, &s, ki)
        for i in prange(n_items, num_threads=nthreads, schedule="runtime"):
            split_stats(&p, i, ki)
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
        n_items = L.n_slices * p.n_runs * p.n_chunks
        for i in prange(n_items, num_threads=nthreads, schedule="runtime"):
            split_output(&p, i, ki, ko)
    fn_free(p.blocks)
    fn_free(p.coefs)
    free_tables(&p)
    return 0


# ---------------------------------------------------------------------------
# IMAGES: slices whose runs interleave (run r of slice s + 1 starts where
# run r of slice s ends: the channels of NCHW images).  Slice by slice,
# every image is a stream of its own, read twice; image by image, memory is
# read and written in address order.

cdef void image_block_stats(const SlicePlan* p, Py_ssize_t blk, Py_ssize_t per_block,
                            const double* pivots, Moments* acc, in_t* ki) noexcept nogil:
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
        if p.R.short_runs:
            si = 0
            while si < L.n_slices:
                lanes = <int>min(<Py_ssize_t>FN_W, L.n_slices - si)
                for l in range(FN_W):
                    rows[l] = x + (si + min(l, lanes - 1)) * row_bytes
                    piv[l] = pivots[si + min(l, lanes - 1)]
                fetch_ahead_of(rows[0], lanes * row_bytes, x + L.n_slices * row_bytes)
                rows_moments(rows, lanes, n, piv, mean, m2, NULL, ki)
                for l in range(lanes):
                    merge_run(&acc[si + l], rows[l], n, mean[l], m2[l], piv[l], ki)
                si = si + lanes
        else:
            odo_init(&s, L.kept, L.n_kept, 0)
            for si in range(L.n_slices):
                for b in range(p.stat_chunks):
                    # an image's runs follow each other
                    m = block_moments(p, &s, &r, b, pivots[si], x + L.n_slices * row_bytes, ki)
                    moments_merge(&acc[si], &m)
                odo_next(&s, L.kept, L.n_kept)
        odo_next(&r, L.red, L.n_red - 1)


cdef void image_finish(const SlicePlan* p, Py_ssize_t si, Py_ssize_t n_blocks,
                       const double* pivots, const Moments* blocks, Coef* coefs) noexcept nogil:
    """Slice si's moments over the blocks, merged in order, finished."""
    cdef Odometer s
    cdef Moments acc = blocks[si]
    cdef Py_ssize_t blk
    for blk in range(1, n_blocks):
        moments_merge(&acc, &blocks[blk * p.L.n_slices + si])
    odo_init(&s, p.L.kept, p.L.n_kept, si)
    coefs[si] = finish(acc, pivots[si], p.mode, p.eps, p.L, s.off[OP_S])


cdef int image_coefs(const SlicePlan* p, Coef* coefs, in_t* ki) noexcept nogil:
    """Every slice's coefficients, the statistics taken image block by
    image block (the blocks fixed by the shape alone, so that the thread
    count changes no bit)."""
    cdef const Layout* L = p.L
    cdef int nthreads = p.R.threads
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
            image_block_stats(p, i, per_block, pivots, blocks + i * n, ki)
        for i in prange(n, num_threads=nthreads, schedule="static"):
            image_finish(p, i, n_blocks, pivots, blocks, coefs)
    else:
        for i in range(n_blocks):
            image_block_stats(p, i, per_block, pivots, blocks + i * n, ki)
        for i in range(n):
            image_finish(p, i, n_blocks, pivots, blocks, coefs)
    fn_free(pivots)
    fn_free(blocks)
    return 0


cdef int image_output(const SlicePlan* p, const Coef* coefs, in_t* ki,
                      out_t* ko) noexcept nogil:
    """The output image by image, each image's runs one run of rows (a row
    per slice) with the slice's coefficients, gain and bias folded in;
    float32 slice by slice where float32 cannot hold a slice's."""
    cdef const Layout* L = p.L
    cdef int nthreads = p.R.threads
    cdef Py_ssize_t n = L.n_slices, i, si, stride = L.n_slices + 2
    cdef Odometer s, r
    cdef float* fk = NULL
    cdef double* dk = NULL
    cdef bint ok = True
    cdef double gv, bv
    odo_init(&s, L.kept, L.n_kept, 0)
    if in_t is float and out_t is float:
        fk = <float*>fn_calloc(3 * stride, sizeof(float))
        if fk == NULL:
            return -1
        for si in range(n):
            gv = param_at(L.base[OP_G] + s.off[OP_G])[0]
            bv = param_at(L.base[OP_B] + s.off[OP_B])[0]
            if not affine_f(coefs[si], gv, bv, &fk[si], &fk[stride + si], &fk[2 * stride + si]):
                ok = False
                break
            odo_next(&s, L.kept, L.n_kept)
    elif in_t is double and out_t is double:
        dk = <double*>fn_calloc(3 * stride, sizeof(double))
        if dk == NULL:
            return -1
        for si in range(n):
            gv = param_at(L.base[OP_G] + s.off[OP_G])[0]
            bv = param_at(L.base[OP_B] + s.off[OP_B])[0]
            affine_d(coefs[si], gv, bv, &dk[si], &dk[stride + si], &dk[2 * stride + si])
            odo_next(&s, L.kept, L.n_kept)
    with parallel(num_threads=nthreads):
        if ok:
            for i in prange(p.n_runs, schedule="runtime"):
                image_rows(p, i, fk, dk, stride, ki, ko)
        else:
            for i in prange(n, schedule="runtime"):
                slice_runs_of(p, i, coefs[i], ki, ko)
        fn_sfence()
    fn_free(fk)
    fn_free(dk)
    return 0


cdef inline void image_rows(const SlicePlan* p, Py_ssize_t ri, const float* fk,
                            const double* dk, Py_ssize_t stride, in_t* ki,
                            out_t* ko) noexcept nogil:
    """The output of image ri: every slice's run, one after the other."""
    cdef Odometer r
    odo_init(&r, p.L.red, p.L.n_red - 1, ri)
    if in_t is float and out_t is float:
        fn_rows_f(p.L.base[OP_X] + r.off[OP_X], 1, p.L.base[OP_Y] + r.off[OP_Y], 1, NULL,
                  p.L.n_slices, p.run_len, fk, fk + stride, fk + 2 * stride, NULL, NULL, NULL,
                  FN_PLAIN, p.R.stream)
    elif in_t is double and out_t is double:
        fn_rows_d(p.L.base[OP_X] + r.off[OP_X], 2, p.L.base[OP_Y] + r.off[OP_Y], 2, NULL,
                  p.L.n_slices, p.run_len, dk, dk + stride, dk + 2 * stride, NULL, NULL, NULL,
                  FN_PLAIN, p.R.stream)


cdef int images_forward(const Layout* L, const Route* R, int mode, double eps,
                        in_t* ki, out_t* ko) noexcept nogil:
    """The IMAGES schedule, WAY_IMAGES: the statistics image block by image
    block, then the output image by image."""
    cdef SlicePlan p
    cdef int rc = -1
    cdef Coef* coefs = <Coef*>fn_malloc(L.n_slices * sizeof(Coef))
    p.L = L
    p.R = R
    p.mode = mode
    p.eps = eps
    p.has_y = True
    plan_runs(&p, L, R)
    p.g32 = p.b32 = NULL
    p.g64 = p.b64 = NULL
    p.rows_end = p.x_end = NULL
    if coefs != NULL and image_coefs(&p, coefs, ki) == 0:
        rc = image_output(&p, coefs, ki, ko)
    fn_free(coefs)
    return rc


# ---------------------------------------------------------------------------
# COLUMNS: the innermost axis is kept.  Columns are cut into tiles of
# COL_TILE, the rows (all reduced axes) into blocks.  A statistics item (tile,
# block) runs a Welford update per column, vectorized across the columns, in
# strips whose accumulators stay in registers while they sweep down the rows.
# The output items are blocks of whole rows, written tile after tile, so that
# memory is read and written in address order (groups of a few rows, chunk
# of columns after chunk).

cdef struct ColumnPlan:
    const Layout* L
    const Route* R
    int mode
    double eps
    Py_ssize_t n_cols         # length of the vectorized kept axis
    Py_ssize_t n_outer        # product of the other kept axes
    Py_ssize_t n_tiles
    Py_ssize_t n_groups       # n_outer * n_tiles
    Py_ssize_t n_rows         # product of the reduced axes
    Py_ssize_t rows_per_block # statistics items: a tile's rows in blocks
    Py_ssize_t n_blocks
    int stat_threads          # the team of the statistics: a thread a block at most
    Py_ssize_t finish_pieces  # pieces of FINISH_COLS columns per tile (column_finish)
    bint finish_with_sums     # one block of one sweep: each strip finished as the
                              # next is summed (column_sums_finished)
    Py_ssize_t rows_per_sweep # rows of a tile that column_rows_stats keeps in L2
    Py_ssize_t rows_per_out   # output items: whole rows of an outer index
    Py_ssize_t n_out_blocks   #   in blocks, every tile of a row in turn
    bint prefetch             # rows are apart in memory: prefetch them
    bint from_memory          # x is larger than the caches: strips start
                              # at a line where they can (line_head)...
    bint fetch_heads          # ...and each sweep fetches the next, or (rows
                              # an L1 way apart) the heads of its rows
    double* state             # per item: mean, m2 (STATE_STRIDE doubles; twice
                              # that for float16/float32 blocks of more than
                              # SUM_ROWS rows: the segments' moments so far)
    Py_ssize_t state_stride   # doubles per item
    double* coef              # per group (COEF_STRIDE doubles): pivot, shift,
                              # scale, then the double pass's m, k2, k0
    bint f32                  # float32 data and output, columns contiguous:
                              # the float32 pass...
    bint fold                 # gain and bias the same for every row: folded
                              # into the column coefficients
    float* coef32             # per group: m, k2, k0 in float32 (COEF32_STRIDE)...
    char* ok32                # ...and whether float32 holds them
    bint periodic             # one tile of contiguous rows that follow each
                              # other, folded: a block of rows is one run...
    bint periodic_d           # ...in the double pass too (its coefficients
                              # small enough to stay in L1)
    bint rows_masked          # where= constant along the columns: a byte a
                              # row (of each outer index), rows not selected
                              # skipped...
    bint lanes_masked         # ...or varying along them: lanes selected
    double* block_n           # where=: each statistics item's count of rows
                              # (rows_masked) or of each column's values...
    Py_ssize_t n_stride       # ...n_stride doubles an item


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


cdef inline const char* col_ptr_at(const ColumnPlan* p, const Tile* t, int k) noexcept nogil:
    """Operand k at a tile's first column of the outer index's first row
    (rows then add their odometer offsets)."""
    return p.L.base[k] + t.outer.off[k] + t.c0 * p.L.kept[p.L.n_kept - 1].stride[k]


cdef inline bint row_selected(const ColumnPlan* p, const Tile* t,
                              const Odometer* row) noexcept nogil:
    """Whether a row of a tile takes part (p.rows_masked: its where= byte)."""
    return not p.rows_masked or (p.L.base[OP_M] + t.outer.off[OP_M] + row.off[OP_M])[0] != 0


cdef void column_pivots(const ColumnPlan* p, Py_ssize_t group, in_t* ki) noexcept nogil:
    """Each column's pivot (float64; 0 for float16/float32) and, for
    float16/float32, the centre of its shifted sums: the column's first
    value (0 if not finite), kept in t.shift until column_finish writes
    the shifts there; with rows masked, the first selected row's."""
    cdef Tile t
    cdef Odometer row
    cdef Py_ssize_t c, k, sx = p.L.kept[p.L.n_kept - 1].stride[OP_X]
    cdef const char* xp
    cdef double first
    tile_of(p, group, &t)
    odo_init(&row, p.L.red, p.L.n_red, 0)
    if p.lanes_masked:
        lanes_pivots(p, &t, &row, ki)
        return
    for k in range(p.n_rows - 1):
        if row_selected(p, &t, &row):
            break
        odo_next(&row, p.L.red, p.L.n_red)
    xp = col_ptr(p, &t, &row, OP_X)
    for c in range(t.width):
        first = sload(xp + c * sx, ki)
        t.pivot[c] = pick_pivot(first, ki)
        if in_t is not double:
            t.shift[c] = first if first - first == 0.0 else 0.0


cdef void lanes_pivots(const ColumnPlan* p, const Tile* t, Odometer* row,
                       in_t* ki) noexcept nogil:
    """column_pivots with a mask that varies along the columns (or a call
    that omits NaN): each column's first selected value's (a number's,
    omitting NaN; 0 where none is)."""
    cdef const Axis* vec = &p.L.kept[p.L.n_kept - 1]
    cdef Py_ssize_t sx = vec.stride[OP_X], sm = vec.stride[OP_M], c, k, left = t.width
    cdef const unsigned char* mp
    cdef const char* xp
    cdef char found[COL_TILE]
    cdef double first
    for c in range(t.width):
        found[c] = 0
        t.pivot[c] = 0.0
        t.shift[c] = 0.0
    k = 0
    while left > 0 and k < p.n_rows:
        mp = <const unsigned char*>col_ptr(p, t, row, OP_M)
        xp = col_ptr(p, t, row, OP_X)
        for c in range(t.width):
            if mp[c * sm] and not found[c]:
                first = sload(xp + c * sx, ki)
                if first != first and p.L.omit:
                    continue
                found[c] = 1
                left = left - 1
                t.pivot[c] = pick_pivot(first, ki)
                if in_t is not double:
                    t.shift[c] = first if first - first == 0.0 else 0.0
        odo_next(row, p.L.red, p.L.n_red)
        k = k + 1


cdef inline void lanes_fold(double* s, double* q, double* k, const double* centre,
                            double* mean, double* m2, double* cnt, Py_ssize_t n) noexcept nogil:
    """n columns' shifted sums of some rows (s of x - centre, q of its
    squares, k values) merged into their moments so far (chan; cnt values),
    in column order."""
    cdef Py_ssize_t l
    cdef double a, v
    for l in range(n):
        if k[l] == 0.0:
            continue
        a = s[l] / k[l]
        v = q[l] - s[l] * a
        if v < 0.0:
            v = 0.0
        a = centre[l] + a
        if cnt[l] == 0.0:
            mean[l] = a
            m2[l] = v
        else:
            chan(cnt[l], &mean[l], &m2[l], k[l], a, v)
        cnt[l] = cnt[l] + k[l]


cdef inline void lanes_strip(const ColumnPlan* p, const Tile* t, Py_ssize_t c, int nv,
                             const Py_ssize_t* xo, const Py_ssize_t* mo, Py_ssize_t sm,
                             Py_ssize_t nrows, double* mean, double* m2, double* cnt,
                             in_t* ki) noexcept nogil:
    """lanes_block_stats of nv contiguous vectors of columns from c on, a
    sweep down nrows rows (x's and the mask's bytes at xo and mo; the
    mask's bytes contiguous, or sm 0: one a row) with the sums in
    registers: d = (x - pivot) - centre, centre the column's mean so far
    (its first selected value before any), +0.0 where not selected (or,
    omitting NaN, where x is NaN)."""
    cdef fn_vd s[FN_NVC]
    cdef fn_vd q[FN_NVC]
    cdef fn_vd k[FN_NVC]
    cdef fn_vd piv[FN_NVC]
    cdef fn_vd cen[FN_NVC]
    cdef fn_vd d, on, xv, every = fn_lane_mask(0, FN_W)
    cdef bint omit = p.L.omit
    cdef double cs[FN_NVC * 8]
    cdef double ts[FN_NVC * 8]
    cdef double tq[FN_NVC * 8]
    cdef double tk[FN_NVC * 8]
    cdef const char* xb = col_ptr_at(p, t, OP_X) + c * sizeof(in_t)
    cdef const unsigned char* mb = <const unsigned char*>col_ptr_at(p, t, OP_M) + c * sm
    cdef Py_ssize_t r, l
    cdef int v
    for l in range(nv * FN_W):
        if cnt[c + l] > 0.0:
            cs[l] = mean[c + l]
        elif in_t is double:
            cs[l] = 0.0
        else:
            cs[l] = t.shift[c + l]
    for v in range(nv):
        s[v] = fn_zero()
        q[v] = fn_zero()
        k[v] = fn_zero()
        piv[v] = fn_load_f64(t.pivot + c + v * FN_W)
        cen[v] = fn_load_f64(cs + v * FN_W)
    for r in range(nrows):
        for l in range(nv):
            if sm == 0:
                on = every if mb[mo[r]] else fn_zero()
            else:
                on = fn_bytes_mask(mb + mo[r] + l * FN_W)
            xv = vload(xb + xo[r] + l * FN_W * sizeof(in_t), sizeof(in_t), ki)
            if omit:
                on = fn_masked(on, fn_numbers(xv))
            d = fn_masked(fn_sub(shifted(xv, piv[l], ki), cen[l]), on)
            s[l] = fn_add(s[l], d)
            q[l] = fn_fma(d, d, q[l])
            k[l] = fn_count(k[l], on)
    for v in range(nv):
        fn_store_f64(ts + v * FN_W, s[v])
        fn_store_f64(tq + v * FN_W, q[v])
        fn_store_counts(tk + v * FN_W, k[v])
    lanes_fold(ts, tq, tk, cs, mean + c, m2 + c, cnt + c, nv * FN_W)


cdef void lanes_block_stats(const ColumnPlan* p, const Tile* t, Py_ssize_t r0, Py_ssize_t nr,
                            double* mean, double* m2, double* cnt, in_t* ki) noexcept nogil:
    """column_block_stats of rows r0 .. r0 + nr with a mask that varies
    along the columns: MASK_ROWS rows at a time, each column's selected
    values as shifted sums lane by lane with their counts (lanes_strip;
    strided columns or mask, and the last columns, value by value), merged
    into its moments.  A column's sums are about its mean so far, so they
    cancel about log2(MASK_ROWS + 1) bits at most, as a block's do."""
    cdef const Axis* vec = &p.L.kept[p.L.n_kept - 1]
    cdef Py_ssize_t sx = vec.stride[OP_X], sm = vec.stride[OP_M]
    cdef Py_ssize_t xo[MASK_ROWS]
    cdef Py_ssize_t mo[MASK_ROWS]
    cdef Py_ssize_t done = 0, n, r, c, strip = FN_NVC * FN_W
    cdef Odometer row
    cdef const char* xb = col_ptr_at(p, t, OP_X)
    cdef const unsigned char* mb = <const unsigned char*>col_ptr_at(p, t, OP_M)
    cdef double cen, ss, qq, kk, d
    for c in range(t.width):
        cnt[c] = 0.0
    odo_init(&row, p.L.red, p.L.n_red, r0)
    while done < nr:
        n = min(<Py_ssize_t>MASK_ROWS, nr - done)
        for r in range(n):
            xo[r] = row.off[OP_X]
            mo[r] = row.off[OP_M]
            odo_next(&row, p.L.red, p.L.n_red)
        c = 0
        if sx == sizeof(in_t) and (sm == 1 or sm == 0):
            while c + strip <= t.width:
                lanes_strip(p, t, c, FN_NVC, xo, mo, sm, n, mean, m2, cnt, ki)
                c = c + strip
            while c + FN_W <= t.width:
                lanes_strip(p, t, c, 1, xo, mo, sm, n, mean, m2, cnt, ki)
                c = c + FN_W
        while c < t.width:
            if cnt[c] > 0.0:
                cen = mean[c]
            elif in_t is double:
                cen = 0.0
            else:
                cen = t.shift[c]
            ss = 0.0
            qq = 0.0
            kk = 0.0
            for r in range(n):
                if mb[mo[r] + c * sm]:
                    d = (sload(xb + xo[r] + c * sx, ki) - t.pivot[c]) - cen
                    if d != d and p.L.omit:
                        continue
                    ss = ss + d
                    qq = qq + d * d
                    kk = kk + 1.0
            lanes_fold(&ss, &qq, &kk, &cen, mean + c, m2 + c, cnt + c, 1)
            c = c + 1
        done = done + n


cdef void column_rows_stats(const ColumnPlan* p, const Tile* t, const char* x, Py_ssize_t rs,
                            Py_ssize_t nrows, Py_ssize_t k0, Py_ssize_t next_rows,
                            double* mean, double* m2, in_t* ki) noexcept nogil:
    """Rows k0 .. k0 + nrows of an item, rs bytes apart from x on: the
    columns before the first whole cache line (line_head), then strips of
    FN_NVC vectors of columns, one sweep down the rows each, then the
    columns left (edge_welford; scalar ones in tiles narrower than a
    vector).  The rows are few enough to stay in L2 between the strips,
    so only the first strip reads memory, and (from memory) that read was
    prefetched by the sweep before, as this one prefetches the next_rows
    rows after its own (or their heads, p.fetch_heads)."""
    cdef Py_ssize_t sx = p.L.kept[p.L.n_kept - 1].stride[OP_X], k, nv
    cdef Py_ssize_t strip = FN_NVC * FN_W
    cdef Py_ssize_t head = line_head(x, rs, sx, t.width, ki) if p.from_memory else 0, c = 0
    cdef Ahead ahead
    cdef double y, d, rk, s_even, q_even, s_odd, q_odd
    # float16/float32: sums about each column's centre (strip_welford).
    cdef const double* pivot = t.shift if in_t is not double else t.pivot
    cdef bint ahead_ok = sx == sizeof(in_t) and nrows >= next_rows
    # The heads go once the strips read the last half way of the row, whose
    # L1 sets are not theirs.
    cdef Py_ssize_t heads_at = (max(<Py_ssize_t>0, t.width - L1_WAY_BYTES // 2 // sx)
                                if p.fetch_heads and ahead_ok and next_rows > 0 else -1)
    ahead_init(&ahead, x + nrows * rs, t.width * sx, rs,
               next_rows if p.from_memory and not p.fetch_heads and ahead_ok else 0,
               head // strip + (t.width - head) // strip)
    # The head: whole strips (a line may hold several), then what is left.
    while c + strip <= head:
        strip_welford(x + c * sx, rs, nrows, k0, pivot + c, mean + c, m2 + c, &ahead, ki)
        c = c + strip
    if c < head:
        edge_welford(x, rs, sizeof(in_t), nrows, k0, c, c, head, pivot, mean, m2, ki)
        c = head
    while c + strip <= t.width:
        if heads_at >= 0 and c >= heads_at:
            for k in range(next_rows):
                fetch_lines(x + (nrows + k) * rs, SWEEP_HEAD_BYTES)
            heads_at = -1
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
        if in_t is not double:
            # strip_welford's order: even rows onto the sums, odd rows apart
            s_even = mean[c]
            q_even = m2[c]
            s_odd = 0.0
            q_odd = 0.0
            for k in range(nrows):
                y = sload(x + k * rs + c * sx, ki) - pivot[c]
                if k % 2 == 0:
                    s_even = s_even + y
                    q_even = q_even + y * y
                else:
                    s_odd = s_odd + y
                    q_odd = q_odd + y * y
            mean[c] = s_even + s_odd
            m2[c] = q_even + q_odd
            c = c + 1
            continue
        for k in range(nrows):
            y = sload(x + k * rs + c * sx, ki) - pivot[c]
            rk = 1.0 / <double>(k0 + k + 1)
            d = y - mean[c]
            mean[c] = mean[c] + d * rk
            m2[c] = m2[c] + d * (y - mean[c])
        c = c + 1


cdef void column_sums_finished(const ColumnPlan* p, const Tile* t, const char* xp, Py_ssize_t rs,
                               double* mean, double* m2, in_t* ki) noexcept nogil:
    """A tile whose rows are one block of one sweep (p.finish_with_sums):
    its columns summed a strip at a time, each strip folded and finished
    (column_finish_cols) once the next is summed, so that the divider's
    work overlaps the next strip's sums.  The columns' bits are those of
    the tile summed whole, then finished: each column's arithmetic is its
    own, and the last piece (a strip and the columns left) ends at the
    tile's last column as the tile does."""
    cdef Py_ssize_t sx = p.L.kept[p.L.n_kept - 1].stride[OP_X], strip = FN_NVC * FN_W
    cdef Py_ssize_t lo = 0, hi, prev = -1
    cdef Tile piece = t[0]      # (copied once: a Tile holds an odometer)
    while lo < t.width:
        hi = t.width if t.width - lo < 2 * strip else lo + strip
        piece.c0 = t.c0 + lo
        piece.width = hi - lo
        piece.pivot = t.pivot + lo
        piece.shift = t.shift + lo
        piece.scale = t.scale + lo
        column_rows_stats(p, &piece, xp + lo * sx, rs, p.n_rows, 0, 0, mean + lo, m2 + lo, ki)
        if prev >= 0:
            column_fold_finish(p, t, prev, lo, mean, m2, ki)
        prev = lo
        lo = hi
    column_fold_finish(p, t, prev, t.width, mean, m2, ki)


cdef inline void column_fold_finish(const ColumnPlan* p, const Tile* t, Py_ssize_t lo, Py_ssize_t hi,
                                    double* mean, double* m2, in_t* ki) noexcept nogil:
    """Columns lo .. hi of a one-block tile summed: their shifted sums
    (float16/float32) as moments, then finished."""
    if in_t is not double:
        fold_sums(hi - lo, t.shift + lo, p.n_rows, 0, mean + lo, m2 + lo, mean + lo, m2 + lo)
    column_finish_cols(p, t, lo, hi)


cdef inline void sweep_stats(const ColumnPlan* p, const Tile* t, const char* x, Py_ssize_t rs,
                             Py_ssize_t n, Py_ssize_t* cnt, Py_ssize_t* done, double* mean,
                             double* m2, double* run_mean, double* run_m2,
                             in_t* ki) noexcept nogil:
    """n rows (rs bytes apart from x) onto a block's moments after cnt[0]
    rows, as column_block_stats adds a sweep (float16/float32 sums folded
    every SUM_ROWS rows)."""
    if in_t is not double:
        if cnt[0] - done[0] + n > SUM_ROWS:
            fold_sums(t.width, t.shift, cnt[0] - done[0], done[0], mean, m2, run_mean, run_m2)
            done[0] = cnt[0]
    column_rows_stats(p, t, x, rs, n, cnt[0], 0, mean, m2, ki)
    cnt[0] = cnt[0] + n


cdef Py_ssize_t selected_block_stats(const ColumnPlan* p, const Tile* t, Py_ssize_t r0,
                                     Py_ssize_t nr, double* mean, double* m2, double* run_mean,
                                     double* run_m2, in_t* ki) noexcept nogil:
    """column_block_stats of rows r0 .. r0 + nr with rows masked: the
    selected ones alone, counted as they go; their count.  With one
    reduced axis, stretches of a sweep or more a sweep at a time, shorter
    ones gathered into sweeps first (a sweep of a few rows costs its
    columns' sums a load and a store each), else row by row."""
    cdef Odometer row
    cdef Py_ssize_t rs = p.L.red[p.L.n_red - 1].stride[OP_X], sm = p.L.red[0].stride[OP_M]
    cdef Py_ssize_t sx = p.L.kept[p.L.n_kept - 1].stride[OP_X], wb = t.width * sx
    cdef Py_ssize_t k, e, n, j, cnt = 0, done = 0, fill = 0
    cdef const char* xp
    cdef const unsigned char* m
    cdef char* buf = NULL
    odo_init(&row, p.L.red, p.L.n_red, r0)
    if p.L.n_red == 1:
        xp = col_ptr(p, t, &row, OP_X)
        m = <const unsigned char*>(p.L.base[OP_M] + t.outer.off[OP_M] + row.off[OP_M])
        if sx == sizeof(in_t):
            buf = <char*>fn_malloc(p.rows_per_sweep * wb)    # (NULL: none gathered)
        k = next_stretch(m, sm, nr, 0, &e)
        while k < nr:
            if buf != NULL and e - k < p.rows_per_sweep:
                while k < e:
                    n = min(p.rows_per_sweep - fill, e - k)
                    if rs == wb:
                        memcpy(buf + fill * wb, xp + k * rs, n * wb)
                    else:
                        for j in range(n):
                            memcpy(buf + (fill + j) * wb, xp + (k + j) * rs, wb)
                    fill = fill + n
                    k = k + n
                    if fill == p.rows_per_sweep:
                        sweep_stats(p, t, buf, wb, fill, &cnt, &done, mean, m2, run_mean,
                                    run_m2, ki)
                        fill = 0
            else:
                # (rows gathered before go first: the rows' order kept)
                if fill > 0:
                    sweep_stats(p, t, buf, wb, fill, &cnt, &done, mean, m2, run_mean, run_m2,
                                ki)
                    fill = 0
                while k < e:
                    n = min(p.rows_per_sweep, e - k)
                    sweep_stats(p, t, xp + k * rs, rs, n, &cnt, &done, mean, m2, run_mean,
                                run_m2, ki)
                    k = k + n
            k = next_stretch(m, sm, nr, e, &e)
        if fill > 0:
            sweep_stats(p, t, buf, wb, fill, &cnt, &done, mean, m2, run_mean, run_m2, ki)
        fn_free(buf)
    else:
        for k in range(nr):
            if row_selected(p, t, &row):
                sweep_stats(p, t, col_ptr(p, t, &row, OP_X), 0, 1, &cnt, &done, mean, m2,
                            run_mean, run_m2, ki)
            odo_next(&row, p.L.red, p.L.n_red)
    if in_t is not double:
        if done == 0:
            if cnt > 0:
                fold_sums(t.width, t.shift, cnt, 0, mean, m2, mean, m2)
        else:
            if cnt > done:
                fold_sums(t.width, t.shift, cnt - done, done, mean, m2, run_mean, run_m2)
            memcpy(mean, run_mean, t.width * sizeof(double))
            memcpy(m2, run_m2, t.width * sizeof(double))
    return cnt


cdef void column_block_stats(const ColumnPlan* p, Py_ssize_t item, in_t* ki) noexcept nogil:
    """The mean and M2 of the rows of one block, for every column of one
    tile (Welford; float16/float32: shifted sums, folded into moments every
    SUM_ROWS rows at most), in pieces of at most p.rows_per_sweep rows (see
    column_rows_stats).  With one reduced axis the rows are equally spaced
    and each piece prefetches the next; otherwise each row is its own
    piece."""
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
    if p.lanes_masked:
        lanes_block_stats(p, &t, r0, nr, mean, m2, p.block_n + item * p.n_stride, ki)
        return
    if p.rows_masked:
        p.block_n[item] = <double>selected_block_stats(p, &t, r0, nr, mean, m2, run_mean,
                                                       run_m2, ki)
        return
    odo_init(&row, p.L.red, p.L.n_red, r0)
    xp = col_ptr(p, &t, &row, OP_X)
    if p.finish_with_sums:
        column_sums_finished(p, &t, xp, rs, mean, m2, ki)
        return
    if p.L.n_red == 1:
        k = 0
        while k < nr:
            n = min(p.rows_per_sweep, nr - k)
            if in_t is not double:
                if k - done + n > SUM_ROWS:
                    fold_sums(t.width, t.shift, k - done, done, mean, m2, run_mean, run_m2)
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
                    fold_sums(t.width, t.shift, k - done, done, mean, m2, run_mean, run_m2)
                    done = k
            if p.prefetch:
                fetch_lines(col_ptr(p, &t, &ahead_row, OP_X),
                            t.width * p.L.kept[p.L.n_kept - 1].stride[OP_X])
                odo_next(&ahead_row, p.L.red, p.L.n_red)
            column_rows_stats(p, &t, col_ptr(p, &t, &row, OP_X), 0, 1, k, 0, mean, m2, ki)
            odo_next(&row, p.L.red, p.L.n_red)
    if in_t is not double:
        if done == 0:
            fold_sums(t.width, t.shift, nr, 0, mean, m2, mean, m2)
        else:
            fold_sums(t.width, t.shift, nr - done, done, mean, m2, run_mean, run_m2)
            memcpy(mean, run_mean, t.width * sizeof(double))
            memcpy(m2, run_m2, t.width * sizeof(double))


cdef void merge_by_counts(const ColumnPlan* p, const Tile* t, Py_ssize_t lo,
                      Py_ssize_t hi) noexcept nogil:
    """column_finish_cols's merge with a mask that varies along the
    columns: the blocks merged into the first by each column's counts
    (the first block's counts become the columns')."""
    cdef Py_ssize_t c, blk
    cdef double* first = p.state + t.group * p.n_blocks * p.state_stride
    cdef double* first_m2 = first + COL_TILE + PAD
    cdef double* na = p.block_n + t.group * p.n_blocks * p.n_stride
    cdef double* mean
    cdef double* m2
    cdef double* nb
    for blk in range(1, p.n_blocks):
        mean = first + blk * p.state_stride
        m2 = mean + COL_TILE + PAD
        nb = na + blk * p.n_stride
        for c in range(lo, hi):
            if nb[c] == 0.0:
                continue
            if na[c] == 0.0:
                first[c] = mean[c]
                first_m2[c] = m2[c]
            else:
                chan(na[c], &first[c], &first_m2[c], nb[c], mean[c], m2[c])
            na[c] = na[c] + nb[c]


cdef void column_finish(const ColumnPlan* p, Py_ssize_t item) noexcept nogil:
    """Merge the row blocks of one piece of a tile (FINISH_COLS columns) in
    order, then finish each of its columns; pieces are independent, so a
    tile's are shared by the threads."""
    cdef Py_ssize_t group = item // p.finish_pieces
    cdef Py_ssize_t lo = (item % p.finish_pieces) * FINISH_COLS
    cdef Tile t
    tile_of(p, group, &t)
    column_finish_cols(p, &t, lo, min(t.width, lo + FINISH_COLS))


cdef void column_finish_cols(const ColumnPlan* p, const Tile* t, Py_ssize_t lo,
                             Py_ssize_t hi) noexcept nogil:
    """column_finish of columns lo .. hi of a tile."""
    cdef Py_ssize_t c, blk, sS = p.L.kept[p.L.n_kept - 1].stride[OP_S]
    cdef double* first = p.state + t.group * p.n_blocks * p.state_stride
    cdef double* first_m2 = first + COL_TILE + PAD
    cdef double* mean
    cdef double* m2
    cdef double na, nb
    cdef double var[8]
    cdef double scale[8]
    cdef fn_vd v, sc, mv
    cdef Moments m
    cdef Coef co
    cdef Py_ssize_t off
    cdef int l
    off = t.outer.off[OP_S] + t.c0 * sS
    if p.mode == MODE_GIVEN:
        for c in range(lo, hi):
            co = given(p.L, off + c * sS)
            t.pivot[c] = co.pivot
            t.shift[c] = co.shift
            t.scale[c] = co.scale
        return
    if p.lanes_masked:
        merge_by_counts(p, t, lo, hi)
    na = <double>min(p.rows_per_block, p.n_rows)
    if p.rows_masked:
        na = p.block_n[t.group * p.n_blocks]
    # (lanes_masked: merge_by_counts merged them by each column's counts)
    for blk in range(1, 1 if p.lanes_masked else p.n_blocks):
        mean = first + blk * p.state_stride
        m2 = mean + COL_TILE + PAD
        nb = <double>min(p.rows_per_block, p.n_rows - blk * p.rows_per_block)
        if p.rows_masked:
            nb = p.block_n[t.group * p.n_blocks + blk]
            if nb == 0.0:
                continue
            if na == 0.0:
                memcpy(first + lo, mean + lo, (hi - lo) * sizeof(double))
                memcpy(first_m2 + lo, m2 + lo, (hi - lo) * sizeof(double))
                na = nb
                continue
        for c in range(lo, hi):
            chan(na, &first[c], &first_m2[c], nb, mean[c], m2[c])
        na = na + nb
    m.n = na
    c = lo
    if p.L.base[OP_M] != NULL:
        pass        # finish column by column: the count recorded, none an empty reduction
    elif p.mode == MODE_CENTER:
        # A vector of columns' variances and scales at a time: the same
        # division and square root as finish's (rstd_of), lane by lane.
        while c + FN_W <= hi:
            v = fn_div(fn_load_f64(first_m2 + c), fn_set1(na))
            sc = rstd_lanes(v, p.eps)
            if not lanes_record_center(fn_add(fn_load_f64(t.pivot + c), fn_load_f64(first + c)),
                                       v, sc, p.L, off + c * sS, sS):
                fn_store_f64(var, v)
                fn_store_f64(scale, sc)
                for l in range(FN_W):
                    m.mean = first[c + l]
                    m.m2 = first_m2[c + l]
                    record_var(m, t.pivot[c + l], p.mode, p.L, off + (c + l) * sS, scale[l],
                               var[l])
            # (record_var's coefficients: the pivot as it is, the shift, the scale)
            fn_store_f64(t.shift + c, fn_load_f64(first + c))
            fn_store_f64(t.scale + c, sc)
            c = c + FN_W
    elif p.mode == MODE_STATS:
        # record_var's mean and M2, a vector of columns at a time (no scale).
        while c + FN_W <= hi:
            mv = fn_load_f64(first + c)
            if not lanes_record_stats(fn_add(fn_load_f64(t.pivot + c), mv),
                                      fn_load_f64(first_m2 + c), p.L, off + c * sS, sS):
                break
            fn_store_f64(t.shift + c, mv)
            fn_store_f64(t.scale + c, fn_set1(1.0))
            c = c + FN_W
    elif p.mode == MODE_RMS:
        # rstd_of's mean of squares, var + mean * mean, as a * b + c is
        # written there (contracted alike), and the uncentred coefficients.
        while c + FN_W <= hi:
            v = fn_div(fn_load_f64(first_m2 + c), fn_set1(na))
            mv = fn_add(fn_load_f64(t.pivot + c), fn_load_f64(first + c))
            v = fn_fma(mv, mv, v)
            sc = rstd_lanes(v, p.eps)
            lanes_record_rms(v, sc, p.L, off + c * sS, sS)
            fn_store_f64(t.pivot + c, fn_zero())
            fn_store_f64(t.shift + c, fn_zero())
            fn_store_f64(t.scale + c, sc)
            c = c + FN_W
    while c < hi:
        if p.lanes_masked:
            m.n = p.block_n[t.group * p.n_blocks * p.n_stride + c]
        m.mean = first[c]
        m.m2 = first_m2[c]
        co = finish(m, t.pivot[c], p.mode, p.eps, p.L, off + c * sS)
        t.pivot[c] = co.pivot
        t.shift[c] = co.shift
        t.scale[c] = co.scale
        c = c + 1


cdef inline Coef tile_coef(const ColumnPlan* p, const Tile* t, Py_ssize_t c, const char* gp,
                           const char* bp, double* g, double* b) noexcept nogil:
    """Column c's pivot, shift and scale (column_finish's), and into g and b
    its gain and bias where they are folded in (else left as they are)."""
    cdef const Axis* vec = &p.L.kept[p.L.n_kept - 1]
    cdef Coef co
    co.pivot = t.pivot[c]
    co.shift = t.shift[c]
    co.scale = t.scale[c]
    if p.fold:
        g[0] = param_at(gp + c * vec.stride[OP_G])[0]
        b[0] = param_at(bp + c * vec.stride[OP_B])[0]
    return co


cdef inline fn_vd param_lanes(const char* p, Py_ssize_t stride, Py_ssize_t c) noexcept nogil:
    """A folded gain's or bias's values of columns c .. c + FN_W (float64,
    stride bytes apart) in a vector."""
    cdef double v[8]
    cdef int l
    if stride == sizeof(double):
        return fn_load_f64(param_at(p + c * stride))
    if stride == 0:     # no gain or bias: one value for every column
        return fn_set1(param_at(p)[0])
    for l in range(FN_W):
        v[l] = param_at(p + (c + l) * stride)[0]
    return fn_load_f64(v)


cdef void column_coefs(const ColumnPlan* p, Py_ssize_t group) noexcept nogil:
    """One tile's coefficients for the output pass, from its columns'
    pivot, shift and scale (column_finish): the float32 pass's (ok32[group]
    false where float32 cannot hold one), else the double pass's in their
    place, each continued periodically for a vector.  Gain and bias are
    folded in where they are the same for every row."""
    cdef Tile t
    cdef Odometer row
    cdef float* f_m = NULL
    cdef float* f_k2 = NULL
    cdef float* f_k0 = NULL
    cdef const char* gp
    cdef const char* bp
    cdef double gc = 1.0, bc = 0.0, m, k2, k0
    cdef Py_ssize_t c
    cdef Coef co
    cdef bint ok = p.f32
    cdef const Axis* vec = &p.L.kept[p.L.n_kept - 1]
    cdef fn_vd g = fn_set1(1.0), b = fn_zero()
    if p.f32:
        f_m = p.coef32 + group * COEF32_STRIDE
        f_k2 = f_m + COL_TILE + WRAP
        f_k0 = f_k2 + COL_TILE + WRAP
    tile_of(p, group, &t)
    odo_init(&row, p.L.red, p.L.n_red, 0)
    gp = col_ptr(p, &t, &row, OP_G)
    bp = col_ptr(p, &t, &row, OP_B)
    c = 0
    # A vector of columns at a time while float32 holds them; the columns of
    # a vector that does not hold, and the last ones, one at a time.
    while ok and c + FN_W <= t.width:
        if p.fold:
            g = param_lanes(gp, vec.stride[OP_G], c)
            b = param_lanes(bp, vec.stride[OP_B], c)
        if not lanes_affine_gf(fn_add(fn_load_f64(t.pivot + c), fn_load_f64(t.shift + c)),
                               fn_load_f64(t.scale + c), g, b, &f_m[c], &f_k2[c], &f_k0[c]):
            break
        c = c + FN_W
    while ok and c < t.width:
        co = tile_coef(p, &t, c, gp, bp, &gc, &bc)
        ok = affine_f(co, gc, bc, &f_m[c], &f_k2[c], &f_k0[c])
        c = c + 1
    if p.f32:
        p.ok32[group] = ok
        if ok:
            # The output pass reads these alone: no double coefficients.
            for c in range(t.width, t.width + WRAP):
                f_m[c] = f_m[c % t.width]
                f_k2[c] = f_k2[c % t.width]
                f_k0[c] = f_k0[c % t.width]
            return
    for c in range(t.width):
        co = tile_coef(p, &t, c, gp, bp, &gc, &bc)
        affine_d(co, gc, bc, &m, &k2, &k0)
        t.pivot[c] = m
        t.shift[c] = k2
        t.scale[c] = k0
    for c in range(t.width, t.width + FN_W):
        t.pivot[c] = t.pivot[c - t.width]
        t.shift[c] = t.shift[c - t.width]
        t.scale[c] = t.scale[c - t.width]


cdef inline void column_segment(const ColumnPlan* p, const Tile* t, const Odometer* row,
                                Py_ssize_t group, Py_ssize_t c0, Py_ssize_t c1,
                                const char* ahead, const unsigned char* sel, in_t* ki,
                                out_t* ko) noexcept nogil:
    """The output of columns c0 .. c1 of one row of one tile (ahead: see
    fn_values; sel: NULL, or the row's where= bytes from column 0 on, a
    mask that varies along the columns: y written where they are set)."""
    cdef const Axis* vec = &p.L.kept[p.L.n_kept - 1]
    cdef Py_ssize_t sx = vec.stride[OP_X], sy = vec.stride[OP_Y]
    cdef Py_ssize_t sg = vec.stride[OP_G], sb = vec.stride[OP_B], c
    cdef const char* xp = col_ptr(p, t, row, OP_X)
    cdef char* yp = <char*>col_ptr(p, t, row, OP_Y)
    cdef const char* gp = col_ptr(p, t, row, OP_G)
    cdef const char* bp = col_ptr(p, t, row, OP_B)
    cdef const float* f_m
    cdef double g = 1.0, b = 0.0, v
    cdef int kind = FN_PLAIN if p.fold else FN_GAIN
    cdef Py_ssize_t sm = vec.stride[OP_M]
    cdef const unsigned char* pick = NULL if sel == NULL else sel + c0
    if not p.fold:
        g = param_at(gp)[0]
        b = param_at(bp)[0]
    if in_t is float and out_t is float:
        if p.f32 and p.ok32[group] and sel != NULL and sm != 1:
            # where= bytes apart: the float32 coefficients value by value
            f_m = p.coef32 + group * COEF32_STRIDE
            for c in range(c0, c1):
                if sel[c * sm]:
                    v = ((sload(xp + c * sx, ki) - f_m[c]) * f_m[COL_TILE + WRAP + c]
                         + f_m[2 * (COL_TILE + WRAP) + c])
                    sstore(yp + c * sy, v * g + b, ko)
            return
        if p.f32 and p.ok32[group]:
            f_m = p.coef32 + group * COEF32_STRIDE
            fn_values_f(xp + c0 * sizeof(float), 1, yp + c0 * sizeof(float), 1, NULL,
                        c1 - c0, t.width, f_m + c0, f_m + COL_TILE + WRAP + c0,
                        f_m + 2 * (COL_TILE + WRAP) + c0, NULL, <float>g, <float>b, kind,
                        p.R.stream, ahead, pick)
            return
    if (sx == sizeof(in_t) and sy == sizeof(out_t) and (p.fold or (sg == 0 and sb == 0))
            and (sel == NULL or sm == 1)):
        fn_values_d(xp + c0 * sx, tcode(ki), yp + c0 * sy, ocode(ko), NULL, c1 - c0, t.width,
                    t.pivot + c0, t.shift + c0, t.scale + c0, NULL, g, b, kind, p.R.stream,
                    ahead, pick)
        return
    # Any strides (and a gain and bias that vary along the columns and the
    # rows): value by value.
    for c in range(c0, c1):
        if sel != NULL and not sel[c * sm]:
            continue
        v = (sload(xp + c * sx, ki) - t.pivot[c]) * t.shift[c] + t.scale[c]
        if not p.fold:
            v = v * param_at(gp + c * sg)[0] + param_at(bp + c * sb)[0]
        sstore(yp + c * sy, v, ko)


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
    cdef bint fetch = p.L.n_red == 1 and not p.prefetch, masked = p.rows_masked
    cdef const unsigned char* sel = NULL
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
                    nxt = NULL
                    if fetch:
                        xp = col_ptr(p, t, &r, OP_X) + c0 * p.L.kept[p.L.n_kept - 1].stride[OP_X]
                        if k + 1 < n:
                            nxt = xp + rs
                        elif c0 + 2 * cw <= t.width:
                            # (A shorter last chunk is not fetched: the
                            # fetch covers cw columns.)
                            nxt = xp - k * rs + cw * p.L.kept[p.L.n_kept - 1].stride[OP_X]
                    if p.lanes_masked:
                        sel = <const unsigned char*>col_ptr(p, t, &r, OP_M)
                    if not masked or row_selected(p, t, &r):
                        column_segment(p, t, &r, group, c0, c0 + cw, nxt, sel, ki, ko)
                    odo_next(&r, p.L.red, p.L.n_red)
                c0 = c0 + cw
        for k in range(n):
            odo_next(row, p.L.red, p.L.n_red)
        k0 = k0 + n


cdef inline bint periodic_rows(const ColumnPlan* p, const Tile* t, const Odometer* row,
                               Py_ssize_t a, Py_ssize_t cnt, const unsigned char* sel,
                               in_t* ki, out_t* ko) noexcept nogil:
    """The output of rows a .. a + cnt of a block (from `row` on) as one run
    of periodic coefficients, where the route has them (p.periodic with
    float32 coefficients, or p.periodic_d); false, with nothing written,
    otherwise.  sel: the block's where= bytes (lanes_masked), or NULL."""
    cdef const Axis* rows = &p.L.red[0]
    cdef const char* x = col_ptr(p, t, row, OP_X) + a * rows.stride[OP_X]
    cdef void* y = <void*>(col_ptr(p, t, row, OP_Y) + a * rows.stride[OP_Y])
    cdef const float* f_m
    if sel != NULL:
        sel = sel + a * rows.stride[OP_M]
    if in_t is float and out_t is float:
        if p.periodic and p.ok32[t.group]:
            f_m = p.coef32 + t.group * COEF32_STRIDE
            fn_values_f(x, 1, y, 1, NULL, cnt * p.n_cols, p.n_cols, f_m, f_m + COL_TILE + WRAP,
                        f_m + 2 * (COL_TILE + WRAP), NULL, 1.0, 0.0, FN_PLAIN, p.R.stream, NULL,
                        sel)
            return True
    if p.periodic_d:
        fn_values_d(x, tcode(ki), y, ocode(ko), NULL, cnt * p.n_cols, p.n_cols, t.pivot,
                    t.shift, t.scale, NULL, 1.0, 0.0, FN_PLAIN, p.R.stream, NULL, sel)
        return True
    return False


cdef void column_rows_out(const ColumnPlan* p, Py_ssize_t item, in_t* ki,
                          out_t* ko) noexcept nogil:
    """The output of a block of rows of one outer index: rows that follow
    each other as one run (periodic coefficients; with rows masked, each
    stretch of selected rows), others a few rows at a time, chunk by chunk
    (column_rows_chunked)."""
    cdef Tile t
    cdef Odometer row, ahead
    cdef Py_ssize_t outer = item // p.n_out_blocks
    cdef Py_ssize_t r0 = (item % p.n_out_blocks) * p.rows_per_out
    cdef Py_ssize_t nr = min(p.rows_per_out, p.n_rows - r0)
    cdef Py_ssize_t row_bytes = p.n_cols * p.L.kept[p.L.n_kept - 1].stride[OP_X], j, e
    cdef const unsigned char* sel = NULL
    odo_init(&row, p.L.red, p.L.n_red, r0)
    odo_init(&ahead, p.L.red, p.L.n_red, min(r0 + PREFETCH_ROWS, p.n_rows - 1))
    tile_of(p, outer * p.n_tiles, &t)
    if p.lanes_masked:
        sel = <const unsigned char*>col_ptr(p, &t, &row, OP_M)     # (periodic: rows of bytes)
    if p.rows_masked and (p.periodic or p.periodic_d):
        # (a byte a row, L.red[0].stride[OP_M] apart)
        j = next_stretch(<const unsigned char*>col_ptr(p, &t, &row, OP_M),
                         p.L.red[0].stride[OP_M], nr, 0, &e)
        while j < nr and periodic_rows(p, &t, &row, j, e - j, NULL, ki, ko):
            j = next_stretch(<const unsigned char*>col_ptr(p, &t, &row, OP_M),
                             p.L.red[0].stride[OP_M], nr, e, &e)
        if j >= nr:
            fn_sfence()
            return
    elif periodic_rows(p, &t, &row, 0, nr, sel, ki, ko):
        fn_sfence()
        return
    column_rows_chunked(p, &t, &row, &ahead, nr, row_bytes, ki, ko)
    fn_sfence()


cdef void plan_columns(ColumnPlan* p, const Layout* L, const Route* R, int mode, double eps,
                       bint has_y, in_t* ki, out_t* ko) noexcept nogil:
    """A columns_kernel call's sizes and flags (all of p but its scratch):
    the one place they are decided, for the call and for explain."""
    cdef Py_ssize_t cap, min_rows
    cdef bint runs
    p.L = L
    p.R = R
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
                   min(max(<Py_ssize_t>ROW_BLOCK_AIM,
                           COL_BLOCK_BYTES // (min(<Py_ssize_t>COL_TILE, p.n_cols)
                                               * <Py_ssize_t>sizeof(in_t))),
                       p.n_rows // COL_BLOCKS_MIN))
    p.n_blocks = min(cap, max(<Py_ssize_t>1, p.n_rows // min_rows))
    p.rows_per_block = (p.n_rows + p.n_blocks - 1) // p.n_blocks
    p.n_blocks = (p.n_rows + p.rows_per_block - 1) // p.rows_per_block
    # A thread without a block of rows to sum would only finish and write
    # columns another core summed, moving them between the cores.
    p.stat_threads = R.threads
    if mode != MODE_GIVEN:
        p.stat_threads = <int>min(<Py_ssize_t>R.threads, p.n_groups * p.n_blocks)
    p.rows_per_sweep = max(<Py_ssize_t>8,
                           SWEEP_BYTES // (min(<Py_ssize_t>COL_TILE, p.n_cols) * sizeof(in_t)))
    p.state_stride = STATE_STRIDE
    if in_t is not double:
        # Shifted sums go into moments every SUM_ROWS rows at most, whole
        # sweeps at a time (column_block_stats), into two more arrays.
        p.rows_per_sweep = min(p.rows_per_sweep, <Py_ssize_t>SUM_ROWS)
        if p.rows_per_block > SUM_ROWS:
            p.state_stride = 2 * STATE_STRIDE
    p.finish_pieces = (min(<Py_ssize_t>COL_TILE, p.n_cols) + FINISH_COLS - 1) // FINISH_COLS
    p.n_out_blocks = max(<Py_ssize_t>1, min(p.n_rows, MAX_COL_ITEMS // p.n_outer))
    p.rows_per_out = (p.n_rows + p.n_out_blocks - 1) // p.n_out_blocks
    p.n_out_blocks = (p.n_rows + p.rows_per_out - 1) // p.rows_per_out
    # Hardware prefetchers follow rows that follow each other in memory;
    # rows apart need software prefetch (short ones: a long row trains the
    # hardware by itself).
    p.prefetch = (not (L.n_red >= 1 and L.red[L.n_red - 1].stride[OP_X]
                       == p.n_cols * L.kept[L.n_kept - 1].stride[OP_X])
                  and p.n_cols * L.kept[L.n_kept - 1].stride[OP_X] <= PREFETCH_ROW_MAX)
    # From cache a strip reads a line twice at little cost, and the edges'
    # vectors cost their own sweeps.  (A stream's chunk is from memory.)
    p.from_memory = R.cold or (p.n_outer * p.n_rows * p.n_cols * <Py_ssize_t>sizeof(in_t)
                               > CACHED_BYTES)
    # From cache, fetching the next sweep gains nothing.  Where the L2 hint
    # fills L1 too (AMD's cores before Zen 4) it pushes out lines the
    # strips still read, and rows an L1 way apart share their sets: those
    # fetch the next rows' heads alone.
    p.fetch_heads = (p.from_memory and PREFETCH_FILLS_L1 and L.n_red == 1
                     and way_apart(L.red[0].stride[OP_X]))
    # A tile's rows one block of one sweep, equally spaced, in cache: each
    # strip finished while the next is summed, in the same item (no other
    # block to merge).
    # (omit: each column its own count, lanes_masked whatever the mask)
    p.rows_masked = (L.base[OP_M] != NULL and L.kept[L.n_kept - 1].stride[OP_M] == 0
                     and not L.omit)
    p.lanes_masked = L.base[OP_M] != NULL and not p.rows_masked
    p.n_stride = min(<Py_ssize_t>COL_TILE, p.n_cols) if p.lanes_masked else 1
    p.block_n = NULL
    p.finish_with_sums = (mode != MODE_GIVEN and p.n_blocks == 1 and L.n_red == 1
                          and p.rows_per_sweep >= p.n_rows and not p.from_memory
                          and L.base[OP_M] == NULL)
    p.state = NULL
    p.coef32 = NULL
    p.ok32 = NULL
    p.fold = R.fold
    # Blocks of rows are single runs when the rows follow each other in
    # memory and every row is normalized alike.
    # (where=: a mask constant along the columns makes a run of each stretch
    # of selected rows; one that varies along them reads its bytes beside
    # x, rows of them following each other.)
    runs = (has_y and p.fold and p.n_tiles == 1 and L.n_red == 1
            and (not p.lanes_masked or (L.kept[L.n_kept - 1].stride[OP_M] == 1
                                        and L.red[0].stride[OP_M] == p.n_cols))
            and L.kept[L.n_kept - 1].stride[OP_X] == sizeof(in_t)
            and L.kept[L.n_kept - 1].stride[OP_Y] == sizeof(out_t)
            and L.red[0].stride[OP_X] == p.n_cols * <Py_ssize_t>sizeof(in_t)
            and L.red[0].stride[OP_Y] == p.n_cols * <Py_ssize_t>sizeof(out_t))
    p.f32 = False
    if in_t is float and out_t is float:
        p.f32 = R.f32
    p.periodic = p.f32 and runs
    p.periodic_d = (runs and not p.periodic and p.n_outer == 1
                    and p.n_cols * 3 * <Py_ssize_t>sizeof(double) <= PERIODIC_BYTES)


cdef int columns_kernel(const Layout* L, const Route* R, int mode, double eps, bint has_y,
                        in_t* ki, out_t* ko) noexcept nogil:
    cdef ColumnPlan p
    cdef int nthreads = R.threads
    cdef Py_ssize_t i, n_items, n_out_items, n_finish
    plan_columns(&p, L, R, mode, eps, has_y, ki, ko)
    n_items = p.n_groups * p.n_blocks
    n_finish = 0 if p.finish_with_sums else p.n_groups * p.finish_pieces
    n_out_items = p.n_outer * p.n_out_blocks
    p.coef = <double*>fn_malloc(p.n_groups * COEF_STRIDE * sizeof(double))
    if mode != MODE_GIVEN:
        p.state = <double*>fn_malloc(n_items * p.state_stride * sizeof(double))
        if L.base[OP_M] != NULL:
            p.block_n = <double*>fn_malloc(n_items * p.n_stride * sizeof(double))
    if p.f32:
        p.coef32 = <float*>fn_malloc(p.n_groups * COEF32_STRIDE * sizeof(float))
        p.ok32 = <char*>fn_malloc(p.n_groups)
    if (p.coef == NULL or (mode != MODE_GIVEN and p.state == NULL)
            or (p.f32 and (p.coef32 == NULL or p.ok32 == NULL))
            or (L.base[OP_M] != NULL and mode != MODE_GIVEN and p.block_n == NULL)):
        fn_free(p.block_n)
        fn_free(p.coef)
        fn_free(p.state)
        fn_free(p.coef32)
        fn_free(p.ok32)
        return -1
    if p.stat_threads > 1:
        # One team for the statistics, merged and finished (each loop ends
        # on the team's barrier): a team per loop cost small calls its start.
        with parallel(num_threads=p.stat_threads):
            if mode != MODE_GIVEN:
                for i in prange(p.n_groups, schedule="runtime"):
                    column_pivots(&p, i, ki)
                for i in prange(n_items, schedule="runtime"):
                    column_block_stats(&p, i, ki)
            for i in prange(n_finish, schedule="static"):
                column_finish(&p, i)
            if has_y:
                for i in prange(p.n_groups, schedule="runtime"):
                    column_coefs(&p, i)
    else:
        if mode != MODE_GIVEN:
            for i in range(p.n_groups):
                column_pivots(&p, i, ki)
            for i in range(n_items):
                column_block_stats(&p, i, ki)
        for i in range(n_finish):
            column_finish(&p, i)
        if has_y:
            for i in range(p.n_groups):
                column_coefs(&p, i)
    if has_y and nthreads > 1:
        for i in prange(n_out_items, num_threads=nthreads, schedule="runtime"):
            column_rows_out(&p, i, ki, ko)
    elif has_y:
        for i in range(n_out_items):
            column_rows_out(&p, i, ki, ko)
    fn_free(p.block_n)
    fn_free(p.state)
    fn_free(p.coef)
    fn_free(p.coef32)
    fn_free(p.ok32)
    return 0


cdef int columns_forward(const Layout* L, const Route* R, int mode, double eps, bint has_y,
                         in_t* ki, out_t* ko) noexcept nogil:
    """The COLUMNS schedule: columns_kernel over pieces of L's kept axes of
    at most MAX_PASS_GROUPS groups each (pass_axis; an outer index that is
    still too much goes on alone, split again), so that a call of many short
    columns keeps its scratch within the kept blocks."""
    cdef Layout sub             # (6 KiB; a pass's recursion is a few deep)
    cdef Py_ssize_t step, start = 0, size
    cdef int a = pass_axis(L, COL_TILE, MAX_PASS_GROUPS, &step), rc = 0
    if a < 0:
        return columns_kernel(L, R, mode, eps, has_y, ki, ko)
    while start < L.kept[a].size and rc == 0:
        size = piece_size(L, a, start, step, COL_TILE)
        layout_piece(L, &sub, a, start, size)
        if a == L.n_kept - 1:       # at most MAX_PASS_GROUPS + n_outer groups
            rc = columns_kernel(&sub, R, mode, eps, has_y, ki, ko)
        else:
            rc = columns_forward(&sub, R, mode, eps, has_y, ki, ko)
        start += size
    return rc


cdef dict column_plan_dict(const Layout* L, const Route* R, int mode, bint has_y, in_t* ki,
                           out_t* ko):
    """explain's account of a COLUMNS call's plan: plan_columns's, for the
    first piece where the call goes in pieces (as columns_forward takes
    them)."""
    cdef ColumnPlan p
    cdef Layout piece[2]
    cdef Py_ssize_t step
    cdef int a = pass_axis(L, COL_TILE, MAX_PASS_GROUPS, &step), k = 0
    cdef bint last
    while a >= 0:
        layout_piece(L, &piece[k], a, 0, piece_size(L, a, 0, step, COL_TILE))
        last = a == L.n_kept - 1
        L = &piece[k]
        k = 1 - k
        a = -1 if last else pass_axis(L, COL_TILE, MAX_PASS_GROUPS, &step)
    plan_columns(&p, L, R, mode, 0.0, has_y, ki, ko)
    return {"tile_columns": min(<Py_ssize_t>COL_TILE, p.n_cols), "tiles": p.n_tiles,
            "row_blocks": p.n_blocks, "rows_per_block": p.rows_per_block,
            "statistics_threads": p.stat_threads, "finish_with_sums": bool(p.finish_with_sums),
            "sweep_rows": p.rows_per_sweep,
            "fetch_ahead": "heads" if p.fetch_heads else "sweeps" if p.from_memory else "none",
            "where": "rows" if p.rows_masked else "lanes" if p.lanes_masked else None}


cdef dict column_plan_in(const Layout* L, const Route* R, int mode, bint has_y, int out_code,
                         in_t* ki):
    if out_code == 0:
        return column_plan_dict(L, R, mode, has_y, ki, <half_t*>NULL)
    if out_code == 1:
        return column_plan_dict(L, R, mode, has_y, ki, <float*>NULL)
    return column_plan_dict(L, R, mode, has_y, ki, <double*>NULL)


# ---------------------------------------------------------------------------
# IMAGES of a few values per run (WAY_CHANNELS): x is a matrix of `outer`
# rows and channels x inner columns (c_block, plan.pxd).  The statistics of
# every column (the COLUMNS schedule), each channel's columns merged with
# chan's formula; the output image by image, or as the columns with every
# channel's coefficients repeated over its columns.

cdef inline void channels_matrix(const Layout* L, Layout* M, Py_ssize_t isz,
                                 Py_ssize_t osz) noexcept nogil:
    """M: L's x (and y) as a matrix of columns, each column one operand
    value of G, B and S (their bases set by the caller)."""
    cdef Py_ssize_t rows = L.red[0].size, cols = L.kept[0].size * L.red[1].size
    cdef int k
    memcpy(M, L, sizeof(Layout))
    M.n_kept = 1
    M.n_red = 1
    M.columns = True
    M.n_slices = cols
    M.slice_len = rows
    for k in range(N_OPS):
        M.red[0].stride[k] = 0
        M.kept[0].stride[k] = sizeof(double)
    M.red[0].size = rows
    M.kept[0].size = cols
    M.red[0].stride[OP_X] = cols * isz
    M.kept[0].stride[OP_X] = isz
    M.red[0].stride[OP_Y] = cols * osz
    M.kept[0].stride[OP_Y] = osz
    M.stat[2] = NULL


cdef inline void repeat_operand(const Layout* L, int k, double* out) noexcept nogil:
    """Operand k of L (one value a channel) repeated over each channel's
    inner values."""
    cdef Py_ssize_t ch, j, inner = L.red[1].size
    cdef double v
    for ch in range(L.kept[0].size):
        v = param_at(L.base[k] + ch * L.kept[0].stride[k])[0]
        for j in range(inner):
            out[ch * inner + j] = v


cdef int channels_forward(const Layout* L, const Route* R, int mode, double eps, bint has_y,
                          in_t* ki, out_t* ko) noexcept nogil:
    cdef Layout M
    cdef Route RM = R[0]
    cdef Py_ssize_t inner = L.red[1].size, n_ch = L.kept[0].size, cols = n_ch * inner, ch
    cdef Py_ssize_t rows = L.red[0].size, sS = L.kept[0].stride[OP_S]
    cdef double* arrays = <double*>fn_malloc(4 * cols * sizeof(double))
    cdef Coef* coefs = <Coef*>fn_malloc(n_ch * sizeof(Coef))
    cdef Moments m
    cdef SlicePlan p
    cdef int rc = 0, a
    if arrays == NULL or coefs == NULL:
        fn_free(arrays)
        fn_free(coefs)
        return -1
    channels_matrix(L, &M, sizeof(in_t), sizeof(out_t))
    # The matrix's own route (its output is not written channel by channel).
    route_forward(&RM, &M, MODE_GIVEN, has_y, tcode(ki), ocode(ko), R.threads, False, True,
                  rows * cols * <Py_ssize_t>sizeof(in_t), R.out_bytes)
    if mode != MODE_GIVEN:
        M.base[OP_S] = M.stat[0] = <char*>arrays
        M.stat[1] = <char*>(arrays + cols)
        RM.f32 = False
        rc = columns_forward(&M, &RM, MODE_STATS, 0.0, False, ki, ko)
        for ch in range(n_ch):
            if rc != 0:
                break
            m = merge_equal(arrays + ch * inner, arrays + cols + ch * inner, inner,
                            <double>rows)
            coefs[ch] = record(m, 0.0, mode, L, ch * sS,
                               rstd_of(m.m2 / m.n, m.mean, mode, eps))
    else:
        for ch in range(n_ch):
            coefs[ch] = given(L, ch * sS)
    if rc == 0 and has_y:
        if R.images_out:
            p.L = L
            p.R = R
            p.mode = MODE_GIVEN
            p.eps = eps
            p.has_y = True
            p.run_len = inner
            p.n_runs = rows
            p.n_chunks = 1
            rc = image_output(&p, coefs, ki, ko)
        else:
            # Each column's mean, rstd, gain and bias: its channel's.
            for ch in range(n_ch):
                for a in range(inner):
                    arrays[ch * inner + a] = coefs[ch].pivot + coefs[ch].shift
                    arrays[cols + ch * inner + a] = coefs[ch].scale
            repeat_operand(L, OP_G, arrays + 2 * cols)
            repeat_operand(L, OP_B, arrays + 3 * cols)
            M.base[OP_S] = M.stat[0] = <char*>arrays
            M.stat[1] = <char*>(arrays + cols)
            M.base[OP_G] = <char*>(arrays + 2 * cols)
            M.base[OP_B] = <char*>(arrays + 3 * cols)
            route_forward(&RM, &M, MODE_GIVEN, True, tcode(ki), ocode(ko), R.threads, False,
                          True, rows * cols * <Py_ssize_t>sizeof(in_t), R.out_bytes)
            rc = columns_forward(&M, &RM, MODE_GIVEN, eps, True, ki, ko)
    fn_free(arrays)
    fn_free(coefs)
    return rc


# ---------------------------------------------------------------------------

cdef int forward_run(const Layout* L, const Route* R, int mode, double eps, bint has_y,
                     in_t* ki, out_t* ko) noexcept nogil:
    """A forward call on its route."""
    if R.way == WAY_TILES:
        return columns_forward(L, R, mode, eps, has_y, ki, ko)
    if R.way == WAY_CHANNELS:
        return channels_forward(L, R, mode, eps, has_y, ki, ko)
    if R.way == WAY_IMAGES:
        return images_forward(L, R, mode, eps, ki, ko)
    return slices_forward(L, R, mode, eps, has_y, ki, ko)


cdef int forward_in(const Layout* L, const Route* R, int mode, double eps, bint has_y,
                    int out_code, in_t* ki) noexcept nogil:
    if out_code == 0:
        return forward_run(L, R, mode, eps, has_y, ki, <half_t*>NULL)
    if out_code == 1:
        return forward_run(L, R, mode, eps, has_y, ki, <float*>NULL)
    return forward_run(L, R, mode, eps, has_y, ki, <double*>NULL)
