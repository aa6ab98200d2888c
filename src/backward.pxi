# Gradients of the normalizers, on the planner (_layout.pxd) and the vector
# primitives of the forward kernels; compiled once per instruction-set level
# (fastnorm._backward_<level>).  For a slice with mean m, rstd r and n values,
# xhat = (x - m) * r and gd = dy * gamma:
#
#   GRAD_CENTER  dx = r * (gd - A/n - xhat * B/n),  A = sum(gd), B = sum(gd * xhat)
#   GRAD_RMS     the same with m = 0 and A = 0
#   GRAD_SCALE   dx = r * gd                        (batch norm in eval mode)
#
# and for every entry p of gamma: dgamma[p] = sum(dy * xhat), dbeta[p] =
# sum(dy), over the elements that read gamma[p].
#
# Operands: x (OP_X), dy (OP_DY), dx (OP_DX), gamma (OP_G), mean and rstd
# (OP_S).  The parameter sums go to per-block partial buffers laid out like
# gamma (so OP_G's offsets address them), and are added up in block order:
# blocks depend on the shape alone, so the thread count never changes a bit.
#
# Pass 1 reads (dy, x) for the per-slice sums A, B and the parameter sums;
# pass 2 reads them again (from cache, for a slice that fits) and writes dx,
# for float32 data (and float64 columns) from coefficients folded once per
# slice: dx = dy * (gamma r) + (x - m) * k2 + k0.


cdef enum:
    OP_DY = OP_B      # the layout's beta slot carries dy
    OP_DX = OP_Y      # ...and its output slot dx

cdef enum:
    GRAD_CENTER = 0
    GRAD_RMS = 1
    GRAD_SCALE = 2

cdef enum:
    PAGE = 512                      # doubles in 4 KiB
    HALF_PAGE = 256

GRAD_MODES = {"center": GRAD_CENTER, "rms": GRAD_RMS, "scale": GRAD_SCALE}
grad_column_tile = GRAD_COL_TILE
grad_pass_groups = GRAD_PASS_GROUPS


cdef struct Grad:
    const Layout* L
    int mode
    double inv_n              # 1 / values per slice
    Py_ssize_t n_param        # entries of gamma
    Py_ssize_t n_blocks       # blocks of slices (SLICES) or rows (COLUMNS)
    Py_ssize_t per_block
    double* partial           # per block: dgamma, then dbeta at + pstride
    Py_ssize_t pstride        # spaced(n_param)
    bint slice_param          # gamma has one entry per slice (batch norm):
                              # the per-slice sums are the parameter sums
    Py_ssize_t sstride        # spaced(n_slices)
    Py_ssize_t gshift         # where gamma's (moved) base sits in a buffer, bytes
    double* sums              # COLUMNS: per block, A of every slice, then B
    Py_ssize_t n_groups       # COLUMNS: outer kept indices x tiles of columns
    Py_ssize_t group          # COLUMNS: this many adjacent columns are one
                              # slice's (1: each column is a slice)
    const char* gamma
    char* dgamma
    char* dbeta
    float* c32                # float32 data and dx, COLUMNS: per slice the
                              # coefficients of fn_grad_cols_f32 (m, k1, k2,
                              # k0, each sstride apart), or NULL
    double* c64               # float64 data and dx, COLUMNS: the same in
                              # float64 (grad_cols_f64), or NULL
    float* g32                # float32 data and dx, SLICES: gamma as float
                              # (gamma's own layout), or NULL
    double g32_max            # the largest magnitude in g32


cdef inline Py_ssize_t block_count(Py_ssize_t units, Py_ssize_t min_per_block,
                                   Py_ssize_t bytes_per_block) noexcept nogil:
    """How many blocks `units` slices or rows are cut into: enough for the
    threads, few enough for the memory; a function of the shape alone."""
    cdef Py_ssize_t cap = MAX_PARTIAL_BYTES // max(<Py_ssize_t>1, bytes_per_block)
    return max(<Py_ssize_t>1, min(min(<Py_ssize_t>MAX_BLOCKS, cap), units // min_per_block))


cdef inline Py_ssize_t spaced(Py_ssize_t n) noexcept nogil:
    """The stride, in doubles, of buffers of n doubles placed side by side:
    at least n + PAD, and half a 4 KiB page off a multiple of it.  The CPU
    matches loads against earlier stores by their low 12 address bits only,
    so buffers a multiple of 4 KiB apart (or one vector more) make a loop
    that updates both stall on false dependencies."""
    return n + PAD + (HALF_PAGE - (n + PAD) % PAGE + PAGE) % PAGE


cdef inline void add_partials(const Grad* g, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    """dgamma[p] and dbeta[p] for p in [lo, hi): the blocks' sums, in block
    order (block by block, so that each block's buffer is read in one
    sweep; every entry still adds its blocks in the same order)."""
    cdef Py_ssize_t p, b
    cdef double* part
    cdef double* dg = <double*>g.dgamma
    cdef double* db = <double*>g.dbeta
    for p in range(lo, hi):
        dg[p] = 0.0
        db[p] = 0.0
    for b in range(g.n_blocks):
        part = g.partial + 2 * b * g.pstride
        for p in range(lo, hi):
            dg[p] = dg[p] + part[p]
            db[p] = db[p] + part[g.pstride + p]


# ---------------------------------------------------------------------------
# float32 data and dx: pass 2 in float32 arithmetic (fastnorm_simd.h), from
# coefficients worked out in float64 once per slice.

cdef inline bint tame(double v) noexcept nogil:
    """Whether float32 holds v with room to spare: no overflow in a
    product with data, no flush to zero."""
    return fabs(v) < 1e30 and (v == 0.0 or fabs(v) > 1e-30)


cdef inline bint f32_coefs(double m, double r, double gr, double a, double b,
                           float* k) noexcept nogil:
    """k = (m rounded to float, k1, k2, k0) of fn_grad_*_f32 for a slice of
    mean m and rstd r, with gr = gamma * r and pass 2's a, b; false when
    float32 cannot hold them with room to spare (NaN and inf included: the
    float64 pass takes the call then)."""
    cdef float mf = <float>m
    cdef double rrb = r * r * b
    cdef double k0 = (m - <double>mf) * rrb - r * a
    if not (fabs(m) < 1e30 and tame(r) and tame(gr) and tame(rrb) and fabs(k0) < 1e30):
        return False
    k[0] = mf
    k[1] = <float>gr
    k[2] = <float>(-rrb)
    k[3] = <float>k0
    return True


cdef float* gamma_f32(const Grad* g, double* largest) noexcept nogil:
    """gamma (its n_param entries as laid out) in float32, and its largest
    magnitude; NULL when an entry does not fit float32 with room to spare,
    or on a failed allocation."""
    cdef const double* src = <const double*>(g.gamma - g.gshift)
    cdef float* out
    cdef Py_ssize_t i
    cdef double big = 0.0, v
    cdef bint ok = True
    # The checks and the maximum in locals first, with no exit inside the
    # loop: through *largest, each entry waited on the store of the last
    # (layer_norm_backward, kernel alone, float32: (8, 1024) 8.1 -> 7.2 us,
    # (32, 768) 14.7 -> 13.6).
    for i in range(g.n_param):
        v = src[i]
        ok = ok & tame(v)
        big = max(big, fabs(v))
    largest[0] = big
    if not ok:
        return NULL
    out = <float*>fn_malloc(g.n_param * sizeof(float))
    if out == NULL:
        return NULL
    for i in range(g.n_param):
        out[i] = <float>src[i]
    return out


# ---------------------------------------------------------------------------
# SLICES: blocks of whole slices; each slice is summed, then differentiated.

cdef struct Sums:
    double a    # sum(gd)
    double b    # sum(gd * xhat)


cdef inline fn_vd xhat(fn_vd x, fn_vd m, fn_vd r, fn_vd minus_mr, in_t* kind) noexcept nogil:
    """(x - m) * r; as x * r - m * r (one FMA) for float16/float32 data,
    whose cancellation float64's spare bits absorb."""
    if in_t is double:
        return fn_mul(fn_sub(x, m), r)
    return fn_fma(x, r, minus_mr)


cdef inline void run_sums(const char* xp, Py_ssize_t sx, const char* dyp, Py_ssize_t sdy,
                          const char* gp, Py_ssize_t sg, char* pg, char* pb,
                          Py_ssize_t n, double m, double r, Sums* acc,
                          in_t* ki) noexcept nogil:
    """Pass 1 along one run: A and B into acc, dy * xhat and dy into the
    partial buffers pg, pb (gamma's layout: byte stride sg)."""
    cdef fn_vd vm = fn_set1(m), vr = fn_set1(r), vmr = fn_set1(-m * r), X, D, G, u
    cdef fn_vd sa = fn_zero(), sb = fn_zero()
    cdef fn_vd sa2 = fn_zero(), sb2 = fn_zero(), sd = fn_zero(), sdx = fn_zero()
    cdef Py_ssize_t i = 0, j
    cdef double xs, ds, gs, ta = 0.0, tb = 0.0, td = 0.0, tdx = 0.0
    if sx == sizeof(in_t) and sdy == sizeof(in_t) and sg == sizeof(double):
        # gamma along the run (layer norm): vector sums into the buffers,
        # two vectors a step so the A and B sums have two chains each.
        while i + 2 * FN_W <= n:
            j = i + FN_W
            D = vload(dyp + i * sdy, sdy, ki)
            u = fn_mul(D, xhat(vload(xp + i * sx, sx, ki), vm, vr, vmr, ki))  # dy * xhat
            G = fn_load_f64(<const double*>gp + i)
            sa = fn_fma(D, G, sa)
            sb = fn_fma(u, G, sb)
            fn_store_f64(<double*>pg + i, fn_add(u, fn_load_f64(<double*>pg + i)))
            fn_store_f64(<double*>pb + i, fn_add(D, fn_load_f64(<double*>pb + i)))
            D = vload(dyp + j * sdy, sdy, ki)
            u = fn_mul(D, xhat(vload(xp + j * sx, sx, ki), vm, vr, vmr, ki))
            G = fn_load_f64(<const double*>gp + j)
            sa2 = fn_fma(D, G, sa2)
            sb2 = fn_fma(u, G, sb2)
            fn_store_f64(<double*>pg + j, fn_add(u, fn_load_f64(<double*>pg + j)))
            fn_store_f64(<double*>pb + j, fn_add(D, fn_load_f64(<double*>pb + j)))
            i = i + 2 * FN_W
        sa = fn_add(sa, sa2)
        sb = fn_add(sb, sb2)
    elif sx == sizeof(in_t) and sdy == sizeof(in_t) and sg == 0:
        # One gamma for the whole run (batch norm NCHW): sums in registers.
        while i + FN_W <= n:
            D = vload(dyp + i * sdy, sdy, ki)
            sd = fn_add(sd, D)
            sdx = fn_fma(D, xhat(vload(xp + i * sx, sx, ki), vm, vr, vmr, ki), sdx)
            i = i + FN_W
        td = fn_hsum(sd)
        tdx = fn_hsum(sdx)
        gs = (<const double*>gp)[0]
        ta = gs * td
        tb = gs * tdx
        (<double*>pg)[0] += tdx
        (<double*>pb)[0] += td
    while i < n:
        xs = (sload(xp + i * sx, ki) - m) * r
        ds = sload(dyp + i * sdy, ki)
        gs = (<const double*>(gp + i * sg))[0]
        ta = ta + ds * gs
        tb = tb + ds * gs * xs
        (<double*>(pg + i * sg))[0] += ds * xs
        (<double*>(pb + i * sg))[0] += ds
        i = i + 1
    acc.a = acc.a + fn_hsum(sa) + ta
    acc.b = acc.b + fn_hsum(sb) + tb


cdef inline fn_vd dx_vec(const char* xp, const char* dyp, const double* gp,
                         fn_vd vm, fn_vd vr, fn_vd va, fn_vd vb, fn_vd c1, fn_vd c0,
                         in_t* ki) noexcept nogil:
    """FN_W contiguous values of dx = r * (dy * gamma - a - xhat * b)."""
    cdef fn_vd xh, t
    if in_t is double:
        xh = fn_mul(fn_sub(fn_load_f64(<const double*>xp), vm), vr)
        t = fn_sub(fn_mul(fn_load_f64(<const double*>dyp), fn_load_f64(gp)), va)
        return fn_mul(fn_sub(t, fn_mul(xh, vb)), vr)
    # dx = dy * (gamma r) + (x * c1 + c0): three operations.  Its x * c1 + c0
    # cancels when the mean is large against the spread; float16/float32
    # data has the 29 bits float64 spares.
    t = fn_fma(vload(xp, sizeof(in_t), ki), c1, c0)
    return fn_fma(vload(dyp, sizeof(in_t), ki), fn_mul(fn_load_f64(gp), vr), t)


cdef inline void run_dx(const char* xp, Py_ssize_t sx, const char* dyp, Py_ssize_t sdy,
                        const char* gp, Py_ssize_t sg, const float* g32, double g32_max,
                        char* dxp, Py_ssize_t sdx,
                        Py_ssize_t n, double m, double r, double a, double b, bint stream,
                        const char* x_ahead, const char* dy_ahead,
                        in_t* ki, out_t* ko) noexcept nogil:
    """Pass 2 along one run: dx = r * (dy * gamma - a - xhat * b); with
    `stream`, aligned vectors of dx bypass the cache, and x_ahead, dy_ahead
    (or NULL), the next run's, are fetched a line per line written (here
    into L1; float32 runs: see fn_grad_run_f32).  g32: this run's gamma in
    float32 (when it varies along the run), or NULL."""
    cdef fn_vd vm = fn_set1(m), vr = fn_set1(r), va = fn_set1(a), vb = fn_set1(b)
    cdef float k[4]
    cdef float gr
    if in_t is float and out_t is float:
        if sx == sizeof(float) and sdy == sizeof(float) and sdx == sizeof(float):
            if sg == 0 and f32_coefs(m, r, r * (<const double*>gp)[0], a, b, k):
                gr = k[1]
                fn_grad_run_f32(<const float*>xp, <const float*>dyp, <float*>dxp, &gr, 0, 1.0,
                                k[0], k[2], k[3], n, stream, x_ahead, dy_ahead)
                return
            if (sg == sizeof(double) and g32 != NULL
                    and f32_coefs(m, r, r * g32_max, a, b, k)):
                fn_grad_run_f32(<const float*>xp, <const float*>dyp, <float*>dxp, g32, 1,
                                <float>r, k[0], k[2], k[3], n, stream, x_ahead, dy_ahead)
                return
    # dx = r*dy*gamma - r*a - (x - m)*r*r*b = dy*(gamma*r) + x*c1 + c0
    cdef fn_vd c1 = fn_set1(-r * r * b), c0 = fn_set1(m * r * r * b - r * a), t
    cdef Param g
    cdef const double* gv
    cdef Py_ssize_t i = 0, head = 0, step
    cdef double xs
    if (sx == sizeof(in_t) and sdy == sizeof(in_t) and sdx == sizeof(out_t)
            and param_init(&g, gp, sg)):
        if stream:
            head = (<size_t>dxp // sizeof(out_t)) % FN_W
            head = min(n, 0 if head == 0 else FN_W - head)
        while i < head:
            xs = (sload(xp + i * sx, ki) - m) * r
            sstore(dxp + i * sdx, r * (sload(dyp + i * sdy, ki) * g.p[i * g.inc] - a - xs * b), ko)
            i = i + 1
        # The loops are split by gamma's kind and the store kind so that
        # each is a straight run of vector operations.
        gv = g.p + head * g.inc
        step = FN_W * g.inc
        if stream:
            while i + FN_W <= n:
                if x_ahead != NULL and i % (64 // sizeof(in_t)) < FN_W:  # once a line
                    fn_prefetch(x_ahead + i * sizeof(in_t))
                    fn_prefetch(dy_ahead + i * sizeof(in_t))
                vstream(<out_t*>(dxp + i * sdx),
                        dx_vec(xp + i * sx, dyp + i * sdy, gv, vm, vr, va, vb, c1, c0, ki))
                gv = gv + step
                i = i + FN_W
        elif g.inc == 1:
            while i + FN_W <= n:
                vstore(dxp + i * sdx, sizeof(out_t),
                       dx_vec(xp + i * sx, dyp + i * sdy, g.p + i, vm, vr, va, vb, c1, c0, ki), ko)
                i = i + FN_W
        else:
            while i + FN_W <= n:
                vstore(dxp + i * sdx, sizeof(out_t),
                       dx_vec(xp + i * sx, dyp + i * sdy, g.p, vm, vr, va, vb, c1, c0, ki), ko)
                i = i + FN_W
    while i < n:
        xs = (sload(xp + i * sx, ki) - m) * r
        sstore(dxp + i * sdx, r * (sload(dyp + i * sdy, ki) * (<const double*>(gp + i * sg))[0]
                                   - a - xs * b), ko)
        i = i + 1


cdef inline void slice_coefs(const Grad* g, const Sums* acc, double* a, double* b) noexcept nogil:
    """The a, b of pass 2 from a slice's sums A, B."""
    a[0] = 0.0
    b[0] = 0.0
    if g.mode == GRAD_CENTER:
        a[0] = acc.a * g.inv_n
        b[0] = acc.b * g.inv_n
    elif g.mode == GRAD_RMS:
        b[0] = acc.b * g.inv_n


cdef void grad_slice(const Grad* g, Py_ssize_t si, double* part,
                     in_t* ki, out_t* ko) noexcept nogil:
    """Both passes over slice si; parameter sums into this block's part."""
    cdef const Layout* L = g.L
    cdef const Axis* inner = &L.red[L.n_red - 1]
    cdef Odometer s, r, s_next
    cdef Py_ssize_t ri, n_runs = L.slice_len // inner.size, go, ahead
    cdef double m, rs, a, b
    cdef Sums acc
    cdef char* pg
    cdef char* pb
    acc.a = 0.0
    acc.b = 0.0
    odo_init(&s, L.kept, L.n_kept, si)
    m = (<const double*>(L.stat[0] + s.off[OP_S]))[0]
    rs = (<const double*>(L.stat[1] + s.off[OP_S]))[0]
    # A slice of several runs (NCHW channels): they lie apart, too many
    # streams for the hardware prefetchers; each run of this slice fetches
    # the same run of the next slice into L2 (up to RUN_AHEAD_BYTES of it;
    # runs longer than IMAGE_RUN_BYTES the hardware prefetchers follow).
    ahead = 0
    if si + 1 < L.n_slices and n_runs > 1 and inner.size * inner.stride[OP_X] <= IMAGE_RUN_BYTES:
        ahead = min(<Py_ssize_t>RUN_AHEAD_BYTES, inner.size * inner.stride[OP_X])
        odo_init(&s_next, L.kept, L.n_kept, si + 1)
    odo_init(&r, L.red, L.n_red - 1, 0)
    for ri in range(n_runs):
        if ahead > 0:
            fetch_lines(L.base[OP_X] + s_next.off[OP_X] + r.off[OP_X], ahead)
            fetch_lines(L.base[OP_DY] + s_next.off[OP_DY] + r.off[OP_DY], ahead)
        go = s.off[OP_G] + r.off[OP_G]
        pg = <char*>part + g.gshift + go
        pb = <char*>(part + g.pstride) + g.gshift + go
        run_sums(L.base[OP_X] + s.off[OP_X] + r.off[OP_X], inner.stride[OP_X],
                 L.base[OP_DY] + s.off[OP_DY] + r.off[OP_DY], inner.stride[OP_DY],
                 g.gamma + go, inner.stride[OP_G], pg, pb, inner.size, m, rs, &acc, ki)
        odo_next(&r, L.red, L.n_red - 1)
    slice_coefs(g, &acc, &a, &b)
    odo_init(&r, L.red, L.n_red - 1, 0)
    for ri in range(n_runs):
        go = s.off[OP_G] + r.off[OP_G]
        run_dx(L.base[OP_X] + s.off[OP_X] + r.off[OP_X], inner.stride[OP_X],
               L.base[OP_DY] + s.off[OP_DY] + r.off[OP_DY], inner.stride[OP_DY],
               g.gamma + go, inner.stride[OP_G],
               g.g32 + (g.gshift + go) // sizeof(double) if g.g32 != NULL else NULL, g.g32_max,
               L.base[OP_DX] + s.off[OP_DX] + r.off[OP_DX], inner.stride[OP_DX],
               inner.size, m, rs, a, b, L.stream, NULL, NULL, ki, ko)
        odo_next(&r, L.red, L.n_red - 1)


cdef inline void rows_sums(const char** xp, const char** dyp, const double* gp,
                           double* pg, double* pb, Py_ssize_t n,
                           const double* m, const double* r, Sums* acc,
                           const char** xa, const char** da, in_t* ki) noexcept nogil:
    """Pass 1 over GRAD_ROWS contiguous runs that share gamma and the partial
    buffers: A and B of each into acc[k], and one read-modify-write of the
    buffers per vector for all of them.  The buffers receive the runs in
    order, so the sums are those of GRAD_ROWS calls of run_sums.  xa, da: the
    next GRAD_ROWS rows of x and dy (NULL at the end), fetched as these are read
    (float16/float32)."""
    cdef fn_vd vm[GRAD_ROWS]
    cdef fn_vd vr[GRAD_ROWS]
    cdef fn_vd vmr[GRAD_ROWS]
    cdef fn_vd sa[GRAD_ROWS]
    cdef fn_vd sb[GRAD_ROWS]
    cdef fn_vd G, PG, PB, D, u
    cdef double ta[GRAD_ROWS]
    cdef double tb[GRAD_ROWS]
    cdef const char* xk[GRAD_ROWS]     # local copies: stores to the buffers
    cdef const char* dyk[GRAD_ROWS]    # cannot change them, so they stay in registers
    cdef double gs, ds, xs, tg, td
    cdef Py_ssize_t i = 0
    cdef int k
    for k in range(GRAD_ROWS):
        xk[k] = xp[k]
        dyk[k] = dyp[k]
        vm[k] = fn_set1(m[k])
        vr[k] = fn_set1(r[k])
        vmr[k] = fn_set1(-m[k] * r[k])
        sa[k] = fn_zero()
        sb[k] = fn_zero()
        ta[k] = 0.0
        tb[k] = 0.0
    while i + FN_W <= n:
        if in_t is not double:
            # The next rows, as pass 2 also fetches them: a longer lead
            # (float32 layer_norm_backward over rows of (8192, 1024), one
            # thread, time / a copy: 1.94 -> 1.86 and 2.44 -> 2.14; float64
            # rows, twice the bytes, measured no better, 1.67 -> 1.76).
            # Into L2 (a Xeon with 2 MiB a core), not L1: rows of (16384,
            # 4096) float32 3.81 -> 3.04, two threads 1.79 -> 1.51; the
            # others the same within noise.
            if xa[GRAD_ROWS - 1] != NULL and i % (64 // sizeof(in_t)) < FN_W:  # once a line
                for k in range(GRAD_ROWS):
                    fn_prefetch_l2(xa[k] + i * sizeof(in_t))
                    fn_prefetch_l2(da[k] + i * sizeof(in_t))
        G = fn_load_f64(gp + i)
        PG = fn_load_f64(pg + i)
        PB = fn_load_f64(pb + i)
        for k in range(GRAD_ROWS):
            D = vload(dyk[k] + i * sizeof(in_t), sizeof(in_t), ki)
            u = fn_mul(D, xhat(vload(xk[k] + i * sizeof(in_t), sizeof(in_t), ki),
                               vm[k], vr[k], vmr[k], ki))
            sa[k] = fn_fma(D, G, sa[k])
            sb[k] = fn_fma(u, G, sb[k])
            PG = fn_add(PG, u)
            PB = fn_add(PB, D)
        fn_store_f64(pg + i, PG)
        fn_store_f64(pb + i, PB)
        i = i + FN_W
    while i < n:
        gs = gp[i]
        tg = pg[i]
        td = pb[i]
        for k in range(GRAD_ROWS):
            xs = (sload(xp[k] + i * sizeof(in_t), ki) - m[k]) * r[k]
            ds = sload(dyp[k] + i * sizeof(in_t), ki)
            ta[k] = ta[k] + ds * gs
            tb[k] = tb[k] + ds * gs * xs
            tg = tg + ds * xs
            td = td + ds
        pg[i] = tg
        pb[i] = td
        i = i + 1
    for k in range(GRAD_ROWS):
        acc[k].a = fn_hsum(sa[k]) + ta[k]
        acc[k].b = fn_hsum(sb[k]) + tb[k]


cdef void grad_rows(const Grad* g, Py_ssize_t si, double* part,
                    in_t* ki, out_t* ko) noexcept nogil:
    """Both passes over the GRAD_ROWS slices from si, when each is one contiguous
    run along which gamma lies (layer norm over the last axes): pass 1 reads
    the rows side by side, so the parameter sums cost one update per vector
    for all of them."""
    cdef const Layout* L = g.L
    cdef Py_ssize_t n = L.slice_len
    cdef Odometer s
    cdef const char* xp[GRAD_ROWS]
    cdef const char* dyp[GRAD_ROWS]
    cdef char* dxp[GRAD_ROWS]
    cdef double m[GRAD_ROWS]
    cdef double rs[GRAD_ROWS]
    cdef Sums acc[GRAD_ROWS]
    cdef double a, b
    cdef int k
    cdef const char* xa[GRAD_ROWS]
    cdef const char* da[GRAD_ROWS]
    odo_init(&s, L.kept, L.n_kept, si)
    for k in range(GRAD_ROWS):
        xp[k] = L.base[OP_X] + s.off[OP_X]
        dyp[k] = L.base[OP_DY] + s.off[OP_DY]
        dxp[k] = L.base[OP_DX] + s.off[OP_DX]
        m[k] = (<const double*>(L.stat[0] + s.off[OP_S]))[0]
        rs[k] = (<const double*>(L.stat[1] + s.off[OP_S]))[0]
        odo_next(&s, L.kept, L.n_kept)
    for k in range(GRAD_ROWS):
        if si + GRAD_ROWS + k < L.n_slices:
            xa[k] = L.base[OP_X] + s.off[OP_X]
            da[k] = L.base[OP_DY] + s.off[OP_DY]
            odo_next(&s, L.kept, L.n_kept)
        else:
            xa[k] = NULL
            da[k] = NULL
    rows_sums(xp, dyp, <const double*>g.gamma, <double*>(<char*>part + g.gshift),
              <double*>(<char*>(part + g.pstride) + g.gshift), n, m, rs, acc, xa, da, ki)
    for k in range(GRAD_ROWS):
        slice_coefs(g, &acc[k], &a, &b)
        run_dx(xp[k], sizeof(in_t), dyp[k], sizeof(in_t), g.gamma, sizeof(double),
               g.g32 + g.gshift // sizeof(double) if g.g32 != NULL else NULL, g.g32_max,
               dxp[k], L.red[0].stride[OP_DX], n, m[k], rs[k], a, b, L.stream, xa[k], da[k], ki, ko)


cdef inline bint rows_fit(const Grad* g, in_t* kind) noexcept nogil:
    """Whether grad_rows applies: slices are single contiguous runs of x and
    dy, with gamma contiguous along them and the same for every slice."""
    cdef const Layout* L = g.L
    cdef int j
    if L.columns or L.n_red != 1:
        return False
    if (L.red[0].stride[OP_X] != sizeof(in_t) or L.red[0].stride[OP_DY] != sizeof(in_t)
            or L.red[0].stride[OP_G] != sizeof(double)):
        return False
    for j in range(L.n_kept):
        if L.kept[j].stride[OP_G] != 0:
            return False
    return True


cdef void slice_block(const Grad* g, Py_ssize_t blk, in_t* ki, out_t* ko) noexcept nogil:
    cdef Py_ssize_t si, lo = blk * g.per_block
    cdef Py_ssize_t hi = min(lo + g.per_block, g.L.n_slices)
    cdef double* part = g.partial + 2 * blk * g.pstride
    si = lo
    if rows_fit(g, ki):
        while si + GRAD_ROWS <= hi:
            grad_rows(g, si, part, ki, ko)
            si = si + GRAD_ROWS
    while si < hi:
        grad_slice(g, si, part, ki, ko)
        si = si + 1
    fn_sfence()


# ---------------------------------------------------------------------------
# IMAGES: slices of several runs that interleave (run r of slice si + 1
# starts where run r of slice si ends, in x, dy and dx: the channels of NCHW
# images), gamma one value per slice.  Slice by slice, each image is a
# stream of its own and each run a few vectors: the runs cost more than
# their values.  Image by image, memory is read and written in address
# order: pass 1 sums each image's runs into its block's partial buffers
# (blocks of images, fixed by the shape), pass 2 writes dx image by image.

cdef inline bint images_fit(const Grad* g, in_t* kind) noexcept nogil:
    cdef const Layout* L = g.L
    cdef const Axis* inner
    cdef Py_ssize_t run_bytes
    cdef int j
    if L.columns or L.n_kept != 1 or L.n_red < 2:
        return False
    inner = &L.red[L.n_red - 1]
    run_bytes = inner.size * sizeof(in_t)
    if (inner.stride[OP_X] != sizeof(in_t) or inner.stride[OP_DY] != sizeof(in_t)
            or inner.stride[OP_DX] != inner.stride[OP_X] or run_bytes > IMAGE_RUN_BYTES
            or L.kept[0].stride[OP_X] != run_bytes or L.kept[0].stride[OP_DY] != run_bytes
            or L.kept[0].stride[OP_DX] != run_bytes):
        return False
    for j in range(L.n_red):
        if L.red[j].stride[OP_G] != 0:
            return False
    return True


cdef void image_block_sums(const Grad* g, Py_ssize_t blk, in_t* ki) noexcept nogil:
    """Pass 1 over the images of block blk: every run's sum(dy * xhat) and
    sum(dy) into the block's partial buffers, image after image."""
    cdef const Layout* L = g.L
    cdef const Axis* inner = &L.red[L.n_red - 1]
    cdef Py_ssize_t n_images = L.slice_len // inner.size
    cdef Py_ssize_t lo = blk * g.per_block, hi = min(lo + g.per_block, n_images), ri, si
    cdef double* part = g.partial + 2 * blk * g.pstride
    cdef Odometer r, s
    cdef Sums unused
    cdef char* pg
    odo_init(&r, L.red, L.n_red - 1, lo)
    for ri in range(lo, hi):
        odo_init(&s, L.kept, L.n_kept, 0)
        for si in range(L.n_slices):
            pg = <char*>part + g.gshift + s.off[OP_G]
            run_sums(L.base[OP_X] + s.off[OP_X] + r.off[OP_X], sizeof(in_t),
                     L.base[OP_DY] + s.off[OP_DY] + r.off[OP_DY], sizeof(in_t),
                     g.gamma + s.off[OP_G], 0, pg, pg + g.pstride * sizeof(double),
                     inner.size, (<const double*>(L.stat[0] + s.off[OP_S]))[0],
                     (<const double*>(L.stat[1] + s.off[OP_S]))[0], &unused, ki)
            odo_next(&s, L.kept, L.n_kept)
        odo_next(&r, L.red, L.n_red - 1)


cdef void image_dx(const Grad* g, Py_ssize_t ri, const double* ab, in_t* ki,
                   out_t* ko) noexcept nogil:
    """Pass 2 over image ri: every slice's run, with its a, b (ab[2 si],
    ab[2 si + 1])."""
    cdef const Layout* L = g.L
    cdef const Axis* inner = &L.red[L.n_red - 1]
    cdef Odometer r, s
    cdef Py_ssize_t si
    odo_init(&r, L.red, L.n_red - 1, ri)
    odo_init(&s, L.kept, L.n_kept, 0)
    for si in range(L.n_slices):
        run_dx(L.base[OP_X] + s.off[OP_X] + r.off[OP_X], sizeof(in_t),
               L.base[OP_DY] + s.off[OP_DY] + r.off[OP_DY], sizeof(in_t),
               g.gamma + s.off[OP_G], 0, NULL, 0.0,
               L.base[OP_DX] + s.off[OP_DX] + r.off[OP_DX], sizeof(out_t), inner.size,
               (<const double*>(L.stat[0] + s.off[OP_S]))[0],
               (<const double*>(L.stat[1] + s.off[OP_S]))[0], ab[2 * si], ab[2 * si + 1],
               L.stream, NULL, NULL, ki, ko)
        odo_next(&s, L.kept, L.n_kept)


cdef void image_dx_rows(const Grad* g, Py_ssize_t ri, const in_t* k) noexcept nogil:
    """Pass 2 over image ri, float32 or float64: its runs as one run of
    rows, slice si's coefficients k[si], k[n + si], k[2 n + si], k[3 n + si]
    (m, k1, k2, k0; n = n_slices + 1: each array holds one row more)."""
    cdef const Layout* L = g.L
    cdef Py_ssize_t n = L.n_slices + 1
    cdef Odometer r
    odo_init(&r, L.red, L.n_red - 1, ri)
    if in_t is float:
        fn_grad_rows_f32(<const float*>(L.base[OP_X] + r.off[OP_X]),
                         <const float*>(L.base[OP_DY] + r.off[OP_DY]),
                         <float*>(L.base[OP_DX] + r.off[OP_DX]), L.n_slices,
                         L.red[L.n_red - 1].size, k, k + n, k + 2 * n, k + 3 * n, L.stream)
    elif in_t is double:
        fn_affine_rows_f64(<const double*>(L.base[OP_X] + r.off[OP_X]),
                           <const double*>(L.base[OP_DY] + r.off[OP_DY]),
                           <double*>(L.base[OP_DX] + r.off[OP_DX]), L.n_slices,
                           L.red[L.n_red - 1].size, k, k + n, k + 2 * n, k + 3 * n, L.stream)


cdef float* images_f32_coefs(const Grad* g, const double* ab) noexcept nogil:
    """Every slice's float32 coefficients of pass 2 (m, k1, k2, k0, each an
    array of n_slices + 1), or NULL where float32 cannot hold one (or on a
    failed allocation)."""
    cdef const Layout* L = g.L
    cdef Py_ssize_t n = L.n_slices + 1, si
    cdef float* k = <float*>fn_calloc(4 * n, sizeof(float))
    cdef float c[4]
    cdef Odometer s
    cdef double m, r
    if k == NULL:
        return NULL
    odo_init(&s, L.kept, L.n_kept, 0)
    for si in range(L.n_slices):
        m = (<const double*>(L.stat[0] + s.off[OP_S]))[0]
        r = (<const double*>(L.stat[1] + s.off[OP_S]))[0]
        if not f32_coefs(m, r, r * (<const double*>(g.gamma + s.off[OP_G]))[0],
                         ab[2 * si], ab[2 * si + 1], c):
            fn_free(k)
            return NULL
        k[si] = c[0]
        k[n + si] = c[1]
        k[2 * n + si] = c[2]
        k[3 * n + si] = c[3]
        odo_next(&s, L.kept, L.n_kept)
    return k


cdef double* images_f64_coefs(const Grad* g, const double* ab) noexcept nogil:
    """Every slice's float64 coefficients of pass 2 (m, k1, k2, k0 of
    fn_affine_rows_f64: dx = dy * gamma r + (x - m) * (-r r b) - r a, each
    an array of n_slices + 1), or NULL on a failed allocation."""
    cdef const Layout* L = g.L
    cdef Py_ssize_t n = L.n_slices + 1, si
    cdef double* k = <double*>fn_calloc(4 * n, sizeof(double))
    cdef Odometer s
    cdef double r
    if k == NULL:
        return NULL
    odo_init(&s, L.kept, L.n_kept, 0)
    for si in range(L.n_slices):
        r = (<const double*>(L.stat[1] + s.off[OP_S]))[0]
        k[si] = (<const double*>(L.stat[0] + s.off[OP_S]))[0]
        k[n + si] = r * (<const double*>(g.gamma + s.off[OP_G]))[0]
        k[2 * n + si] = -r * r * ab[2 * si + 1]
        k[3 * n + si] = -r * ab[2 * si]
        odo_next(&s, L.kept, L.n_kept)
    return k


cdef int images_run(Grad* g, int nthreads, in_t* ki, out_t* ko) noexcept nogil:
    """Both passes image by image (see images_fit); the partial buffers'
    blocks are blocks of images."""
    cdef const Layout* L = g.L
    cdef Py_ssize_t n_images = L.slice_len // L.red[L.n_red - 1].size, i
    cdef Py_ssize_t image_bytes = max(<Py_ssize_t>1, L.n_slices * L.red[L.n_red - 1].size
                                      * <Py_ssize_t>sizeof(in_t))
    cdef Py_ssize_t n_blocks = block_count(
        n_images, max(<Py_ssize_t>1, SLICE_BLOCK_BYTES // image_bytes),
        2 * g.n_param * <Py_ssize_t>sizeof(double))
    cdef double* ab = <double*>fn_malloc(2 * L.n_slices * sizeof(double))
    cdef Odometer s
    cdef Sums acc
    cdef double gv
    cdef float* k32
    cdef double* k64
    g.per_block = (n_images + n_blocks - 1) // n_blocks
    g.n_blocks = (n_images + g.per_block - 1) // g.per_block
    g.partial = <double*>fn_calloc(2 * g.n_blocks * g.pstride, sizeof(double))
    if g.partial == NULL or ab == NULL:
        fn_free(g.partial)
        fn_free(ab)
        return -1
    for i in prange(g.n_blocks, num_threads=min(<Py_ssize_t>nthreads, g.n_blocks),
                    schedule="runtime"):
        image_block_sums(g, i, ki)
    add_partials(g, 0, g.n_param)
    # A = gamma sum(dy), B = gamma sum(dy * xhat), per slice.
    odo_init(&s, L.kept, L.n_kept, 0)
    for i in range(L.n_slices):
        gv = (<const double*>(g.gamma + s.off[OP_G]))[0]
        acc.a = gv * (<const double*>(g.dbeta + g.gshift + s.off[OP_G]))[0]
        acc.b = gv * (<const double*>(g.dgamma + g.gshift + s.off[OP_G]))[0]
        slice_coefs(g, &acc, &ab[2 * i], &ab[2 * i + 1])
        odo_next(&s, L.kept, L.n_kept)
    # float32 and float64: pass 2 from coefficients folded once per slice,
    # each image one run of rows; other dtypes run by run.
    k32 = NULL
    k64 = NULL
    if in_t is float and out_t is float:
        if L.red[L.n_red - 1].size >= FN_WF:
            k32 = images_f32_coefs(g, ab)
    if in_t is double and out_t is double:
        if L.red[L.n_red - 1].size >= FN_W:
            k64 = images_f64_coefs(g, ab)
    with parallel(num_threads=nthreads):
        if k32 != NULL:
            for i in prange(n_images, schedule="runtime"):
                image_dx_rows(g, i, k32)
        elif k64 != NULL:
            for i in prange(n_images, schedule="runtime"):
                image_dx_rows(g, i, k64)
        else:
            for i in prange(n_images, schedule="runtime"):
                image_dx(g, i, ab, ki, ko)
        fn_sfence()
    fn_free(g.partial)
    fn_free(ab)
    fn_free(k32)
    fn_free(k64)
    return 0


# ---------------------------------------------------------------------------
# COLUMNS: blocks of rows; within a block every tile of columns, one row at a
# time, vectorized across the columns.

cdef struct Cols:
    # One tile of one outer kept index, as pass 1 and pass 2 see it.
    Odometer outer
    Py_ssize_t c0
    Py_ssize_t width
    Py_ssize_t slice0       # flat slice index of column c0
    double m[GRAD_COL_TILE + PAD]    # per-column mean and rstd (padded: see run)
    double r[GRAD_COL_TILE + PAD]


cdef inline void cols_of(const Grad* g, Py_ssize_t group, Cols* t) noexcept nogil:
    cdef const Layout* L = g.L
    cdef const Axis* vec = &L.kept[L.n_kept - 1]
    cdef Py_ssize_t n_tiles = (vec.size + GRAD_COL_TILE - 1) // GRAD_COL_TILE, c, off
    odo_init(&t.outer, L.kept, L.n_kept - 1, group // n_tiles)
    t.c0 = (group % n_tiles) * GRAD_COL_TILE
    t.width = min(<Py_ssize_t>GRAD_COL_TILE, vec.size - t.c0)
    t.slice0 = (group // n_tiles) * vec.size + t.c0
    for c in range(t.width):
        off = t.outer.off[OP_S] + (t.c0 + c) * vec.stride[OP_S]
        t.m[c] = (<const double*>(L.stat[0] + off))[0]
        t.r[c] = (<const double*>(L.stat[1] + off))[0]


cdef inline double* start_group(const Grad* g, Py_ssize_t blk, Py_ssize_t grp, Cols* t,
                                Odometer* row) noexcept nogil:
    """Pass 1 of block blk over group grp: t and row set up, and this block's
    two per-column sums (the second at + sstride) zeroed and returned."""
    cdef double* s1
    cdef Py_ssize_t c
    cols_of(g, grp, t)
    s1 = g.sums + 2 * blk * g.sstride + t.slice0
    for c in range(t.width):
        s1[c] = 0.0
        s1[g.sstride + c] = 0.0
    odo_init(row, g.L.red, g.L.n_red, blk * g.per_block)
    return s1


cdef inline Py_ssize_t col_off(const Layout* L, const Cols* t, const Odometer* row,
                               int k) noexcept nogil:
    return t.outer.off[k] + row.off[k] + t.c0 * L.kept[L.n_kept - 1].stride[k]


cdef void cols_sums(const Grad* g, Py_ssize_t blk, in_t* ki) noexcept nogil:
    """Pass 1 over one block of rows: per-column A, B and the parameter sums."""
    cdef const Layout* L = g.L
    cdef const Axis* vec = &L.kept[L.n_kept - 1]
    cdef Py_ssize_t r0 = blk * g.per_block, nr = min(g.per_block, L.slice_len - r0)
    cdef Py_ssize_t sx = vec.stride[OP_X], sdy = vec.stride[OP_DY], sg = vec.stride[OP_G]
    cdef Py_ssize_t grp, k, c, go
    cdef double* part = g.partial + 2 * blk * g.pstride
    cdef double* sa
    cdef double* sb
    cdef Cols t
    cdef Odometer row
    cdef const char* xp
    cdef const char* dyp
    cdef const char* gp
    cdef char* pg
    cdef char* pb
    cdef fn_vd X, D, G, xh, gd, sd, sdx
    cdef double xs, ds, gs, td, tdx
    for grp in range(g.n_groups):
        sa = start_group(g, blk, grp, &t, &row)
        sb = sa + g.sstride
        for k in range(nr):
            xp = L.base[OP_X] + col_off(L, &t, &row, OP_X)
            dyp = L.base[OP_DY] + col_off(L, &t, &row, OP_DY)
            go = col_off(L, &t, &row, OP_G)
            gp = g.gamma + go
            pg = <char*>part + g.gshift + go
            pb = <char*>(part + g.pstride) + g.gshift + go
            c = 0
            td = 0.0
            tdx = 0.0
            if sx == sizeof(in_t) and sdy == sizeof(in_t) and (sg == 0 or sg == sizeof(double)):
                sd = fn_zero()
                sdx = fn_zero()
                while c + FN_W <= t.width:
                    X = vload(xp + c * sx, sx, ki)
                    D = vload(dyp + c * sdy, sdy, ki)
                    xh = fn_mul(fn_sub(X, fn_load_f64(t.m + c)), fn_load_f64(t.r + c))
                    if sg == 0:
                        G = fn_set1((<const double*>gp)[0])
                        sd = fn_add(sd, D)
                        sdx = fn_fma(D, xh, sdx)
                    else:
                        G = fn_load_f64(<const double*>gp + c)
                        fn_store_f64(<double*>pg + c, fn_fma(D, xh, fn_load_f64(<double*>pg + c)))
                        fn_store_f64(<double*>pb + c, fn_add(D, fn_load_f64(<double*>pb + c)))
                    gd = fn_mul(D, G)
                    fn_store_f64(sa + c, fn_add(fn_load_f64(sa + c), gd))
                    fn_store_f64(sb + c, fn_fma(gd, xh, fn_load_f64(sb + c)))
                    c = c + FN_W
                if sg == 0:
                    td = fn_hsum(sd)
                    tdx = fn_hsum(sdx)
            while c < t.width:
                xs = (sload(xp + c * sx, ki) - t.m[c]) * t.r[c]
                ds = sload(dyp + c * sdy, ki)
                gs = (<const double*>(gp + c * sg))[0]
                sa[c] += ds * gs
                sb[c] += ds * gs * xs
                if sg == 0:
                    td = td + ds
                    tdx = tdx + ds * xs
                else:
                    (<double*>(pg + c * sg))[0] += ds * xs
                    (<double*>(pb + c * sg))[0] += ds
                c = c + 1
            if sg == 0:
                (<double*>pg)[0] += tdx
                (<double*>pb)[0] += td
            odo_next(&row, L.red, L.n_red)


cdef inline void strip_sums(const char* x, const char* dy, Py_ssize_t rs_x, Py_ssize_t rs_dy,
                            Py_ssize_t nrows, const double* m, const double* r,
                            double* s1, double* s2, Ahead* ahead_x, Ahead* ahead_dy,
                            in_t* ki) noexcept nogil:
    """sum(dy) and sum(dy * xhat) over nrows rows of FN_NVC contiguous
    vectors of columns, added to s1 and s2; the sums live in registers for
    the whole sweep (xhat's rstd is applied once, at the end)."""
    cdef fn_vd a1[FN_NVC]
    cdef fn_vd a2[FN_NVC]
    cdef fn_vd mv[FN_NVC]
    cdef fn_vd D
    cdef Ahead px = ahead_x[0], pd = ahead_dy[0]   # locals: kept in registers
    cdef Py_ssize_t k
    cdef int v
    for v in range(FN_NVC):
        a1[v] = fn_zero()
        a2[v] = fn_zero()
        mv[v] = fn_load_f64(m + v * FN_W)
    for k in range(nrows):
        ahead_step(&px)
        ahead_step(&pd)
        for v in range(FN_NVC):
            D = vload(dy + k * rs_dy + v * FN_W * sizeof(in_t), sizeof(in_t), ki)
            a1[v] = fn_add(a1[v], D)
            a2[v] = fn_fma(D, fn_sub(vload(x + k * rs_x + v * FN_W * sizeof(in_t),
                                           sizeof(in_t), ki), mv[v]), a2[v])
    for v in range(FN_NVC):
        fn_store_f64(s1 + v * FN_W, fn_add(fn_load_f64(s1 + v * FN_W), a1[v]))
        fn_store_f64(s2 + v * FN_W, fn_fma(a2[v], fn_load_f64(r + v * FN_W),
                                           fn_load_f64(s2 + v * FN_W)))
    ahead_x[0] = px
    ahead_dy[0] = pd


cdef Py_ssize_t cols_sweeps(const Grad* g, Py_ssize_t r0, Py_ssize_t nr, const Cols* t,
                            double* s1, double* s2, in_t* ki) noexcept nogil:
    """Pass 1 of a block for the whole strips of a tile, when its rows are
    pieces equally spaced (one reduced axis) and its columns contiguous:
    sweeps of rows that fit L2, each prefetching the next.  Returns the
    columns done."""
    cdef const Layout* L = g.L
    cdef const Axis* vec = &L.kept[L.n_kept - 1]
    cdef Py_ssize_t strip = FN_NVC * FN_W, strips = t.width // strip
    cdef Py_ssize_t rs_x = L.red[0].stride[OP_X], rs_dy = L.red[0].stride[OP_DY]
    cdef Py_ssize_t per_sweep, k, n, nxt, c
    cdef const char* x
    cdef const char* dy
    cdef Ahead ax, ady
    if (L.n_red != 1 or strips == 0 or vec.stride[OP_X] != sizeof(in_t)
            or vec.stride[OP_DY] != sizeof(in_t)):
        return 0
    # Rows that follow each other in memory stream faster row by row (the
    # hardware prefetchers see one stream, and the sums are cheap enough).
    if rs_x == t.width * <Py_ssize_t>sizeof(in_t) and rs_dy == rs_x:
        return 0
    x = L.base[OP_X] + t.outer.off[OP_X] + r0 * rs_x + t.c0 * sizeof(in_t)
    dy = L.base[OP_DY] + t.outer.off[OP_DY] + r0 * rs_dy + t.c0 * sizeof(in_t)
    per_sweep = max(<Py_ssize_t>8, SWEEP_BYTES // (2 * t.width * <Py_ssize_t>sizeof(in_t)))
    k = 0
    while k < nr:
        n = min(per_sweep, nr - k)
        nxt = min(per_sweep, L.slice_len - (r0 + k + n))
        if n < nxt:
            nxt = 0
        ahead_init(&ax, x + (k + n) * rs_x, t.width * sizeof(in_t), rs_x, nxt, strips)
        ahead_init(&ady, dy + (k + n) * rs_dy, t.width * sizeof(in_t), rs_dy, nxt, strips)
        c = 0
        while c < strips * strip:
            strip_sums(x + k * rs_x + c * sizeof(in_t), dy + k * rs_dy + c * sizeof(in_t),
                       rs_x, rs_dy, n, t.m + c, t.r + c, s1 + c, s2 + c, &ax, &ady, ki)
            c = c + strip
        k = k + n
    return strips * strip


cdef void cols_sums_per_slice(const Grad* g, Py_ssize_t blk, in_t* ki) noexcept nogil:
    """Pass 1 when gamma has one entry per column (batch norm): per column
    sum(dy) and sum(dy * xhat), the parameter gradients themselves; A and B
    are gamma times them.  Whole strips of columns go by sweeps
    (cols_sweeps), the rest row by row."""
    cdef const Layout* L = g.L
    cdef const Axis* vec = &L.kept[L.n_kept - 1]
    cdef Py_ssize_t r0 = blk * g.per_block, nr = min(g.per_block, L.slice_len - r0)
    cdef Py_ssize_t sx = vec.stride[OP_X], sdy = vec.stride[OP_DY]
    cdef Py_ssize_t grp, k, c, swept
    cdef double* s1
    cdef double* s2
    cdef Cols t
    cdef Odometer row
    cdef const char* xp
    cdef const char* dyp
    cdef fn_vd D, xh
    cdef double xs, ds
    for grp in range(g.n_groups):
        s1 = start_group(g, blk, grp, &t, &row)
        s2 = s1 + g.sstride
        swept = cols_sweeps(g, r0, nr, &t, s1, s2, ki)
        if swept == t.width:
            continue
        for k in range(nr):
            xp = L.base[OP_X] + col_off(L, &t, &row, OP_X)
            dyp = L.base[OP_DY] + col_off(L, &t, &row, OP_DY)
            c = swept
            if sx == sizeof(in_t) and sdy == sizeof(in_t):
                while c + FN_W <= t.width:
                    D = vload(dyp + c * sdy, sdy, ki)
                    xh = fn_mul(fn_sub(vload(xp + c * sx, sx, ki), fn_load_f64(t.m + c)),
                                fn_load_f64(t.r + c))
                    fn_store_f64(s1 + c, fn_add(fn_load_f64(s1 + c), D))
                    fn_store_f64(s2 + c, fn_fma(D, xh, fn_load_f64(s2 + c)))
                    c = c + FN_W
            while c < t.width:
                ds = sload(dyp + c * sdy, ki)
                xs = (sload(xp + c * sx, ki) - t.m[c]) * t.r[c]
                s1[c] += ds
                s2[c] += ds * xs
                c = c + 1
            odo_next(&row, L.red, L.n_red)


cdef inline void kept_offsets(const Layout* L, Py_ssize_t si, Py_ssize_t* s_off,
                              Py_ssize_t* g_off) noexcept nogil:
    """The statistics' and gamma's byte offsets at flat kept index si: a
    multiplication each for one kept axis (batch norm's (N, C)), else the
    odometer (its set-up, per column, drew 8% of the samples of
    batch_norm_backward over axis 0 of (2, 3211264))."""
    cdef Odometer s
    if L.n_kept == 1:
        s_off[0] = si * L.kept[0].stride[OP_S]
        g_off[0] = si * L.kept[0].stride[OP_G]
        return
    odo_init(&s, L.kept, L.n_kept, si)
    s_off[0] = s.off[OP_S]
    g_off[0] = s.off[OP_G]


cdef inline void cols_fold(const Grad* g, Py_ssize_t si) noexcept nogil:
    """A and B of column si over all row blocks, in block order, scaled for
    pass 2 (kept in block 0's place).  With one gamma entry per column the
    block sums are sum(dy) and sum(dy * xhat): they are dbeta and dgamma.
    With columns in groups, A and B stay unscaled for cols_fold_group."""
    cdef Py_ssize_t b, ns = g.sstride, off, s_off
    cdef double a = 0.0, bb = 0.0, gs
    for b in range(g.n_blocks):
        a = a + g.sums[2 * b * ns + si]
        bb = bb + g.sums[2 * b * ns + ns + si]
    if g.slice_param:
        kept_offsets(g.L, si, &s_off, &off)
        (<double*>(g.dbeta + g.gshift + off))[0] = a
        (<double*>(g.dgamma + g.gshift + off))[0] = bb
        if g.group > 1:
            g.sums[si] = a
            g.sums[ns + si] = bb
            return
        gs = (<const double*>(g.gamma + off))[0]
        a = a * gs
        bb = bb * gs
    cols_scale(g, si, a, bb)


cdef void cols_fold_group(const Grad* g, Py_ssize_t first) noexcept nogil:
    """A and B of the slice whose columns are first .. first + group (their
    sums in column order, then scaled by the slice's gamma), for each of
    those columns."""
    cdef Py_ssize_t ns = g.sstride, si, s_off, g_off
    cdef double a = 0.0, bb = 0.0, gs
    for si in range(first, first + g.group):
        a = a + g.sums[si]
        bb = bb + g.sums[ns + si]
    kept_offsets(g.L, first, &s_off, &g_off)
    gs = (<const double*>(g.gamma + g_off))[0]
    for si in range(first, first + g.group):
        cols_scale(g, si, a * gs, bb * gs)


cdef inline void cols_scale(const Grad* g, Py_ssize_t si, double a, double bb) noexcept nogil:
    """Column si's coefficients of pass 2 from its slice's A and B."""
    cdef Py_ssize_t ns = g.sstride
    if g.mode == GRAD_CENTER:
        g.sums[si] = a * g.inv_n
        g.sums[ns + si] = bb * g.inv_n
    elif g.mode == GRAD_RMS:
        g.sums[si] = 0.0
        g.sums[ns + si] = bb * g.inv_n
    else:
        g.sums[si] = 0.0
        g.sums[ns + si] = 0.0


cdef inline int cols_coefs_f32(const Grad* g, Py_ssize_t si) noexcept nogil:
    """Column si's float32 coefficients for cols_dx (after the folds);
    returns 1 when float32 cannot hold them, else 0."""
    cdef Py_ssize_t ns = g.sstride, s_off, g_off
    cdef double m, r, gs
    cdef float k[4]
    kept_offsets(g.L, si, &s_off, &g_off)
    m = (<const double*>(g.L.stat[0] + s_off))[0]
    r = (<const double*>(g.L.stat[1] + s_off))[0]
    gs = (<const double*>(g.gamma + g_off))[0]
    if not f32_coefs(m, r, gs * r, g.sums[si], g.sums[ns + si], k):
        return 1
    g.c32[si] = k[0]
    g.c32[ns + si] = k[1]
    g.c32[2 * ns + si] = k[2]
    g.c32[3 * ns + si] = k[3]
    return 0


cdef inline bint roomy(double v) noexcept nogil:
    """Whether v is finite and far from float64's overflow and underflow."""
    return fabs(v) < 1e300 and (v == 0.0 or fabs(v) > 1e-300)


cdef inline int cols_coefs_f64(const Grad* g, Py_ssize_t si) noexcept nogil:
    """Column si's float64 coefficients for grad_cols_f64 (after the folds):
    dx = dy * k1 + (x - m) * k2 + k0; returns 1 when one of them could
    overflow (or flush) where the unfolded formula does not (rstd^2), else 0."""
    cdef Py_ssize_t ns = g.sstride, s_off, g_off
    cdef double m, r, gs, k1, k2, k0
    kept_offsets(g.L, si, &s_off, &g_off)
    m = (<const double*>(g.L.stat[0] + s_off))[0]
    r = (<const double*>(g.L.stat[1] + s_off))[0]
    gs = (<const double*>(g.gamma + g_off))[0]
    k1 = gs * r
    k2 = -r * r * g.sums[ns + si]
    k0 = -r * g.sums[si]
    if not (fabs(m) < 1e300 and roomy(r) and roomy(k1) and roomy(k2) and roomy(k0)):
        return 1
    g.c64[si] = m
    g.c64[ns + si] = k1
    g.c64[2 * ns + si] = k2
    g.c64[3 * ns + si] = k0
    return 0


cdef inline void grad_cols_f64(const double* x, const double* dy, double* dx, const double* k,
                               Py_ssize_t ks, Py_ssize_t n, bint stream) noexcept nogil:
    """One row of a tile of float64 columns: dx = dy * k1 + (x - m) * k2 + k0
    with column c's m, k1, k2, k0 at k[c], k[ks + c], k[2 ks + c], k[3 ks + c]."""
    cdef Py_ssize_t c = 0, head = 0
    cdef fn_vd t
    if stream:  # values up to dx's first aligned vector go one by one
        head = (<size_t>dx // sizeof(double)) % FN_W
        head = min(n, 0 if head == 0 else FN_W - head)
    while c < head:
        dx[c] = dy[c] * k[ks + c] + ((x[c] - k[c]) * k[2 * ks + c] + k[3 * ks + c])
        c = c + 1
    while c + FN_W <= n:
        t = fn_fma(fn_sub(fn_load_f64(x + c), fn_load_f64(k + c)), fn_load_f64(k + 2 * ks + c),
                   fn_load_f64(k + 3 * ks + c))
        t = fn_fma(fn_load_f64(dy + c), fn_load_f64(k + ks + c), t)
        if stream:
            fn_stream_f64(dx + c, t)
        else:
            fn_store_f64(dx + c, t)
        c = c + FN_W
    while c < n:
        dx[c] = dy[c] * k[ks + c] + ((x[c] - k[c]) * k[2 * ks + c] + k[3 * ks + c])
        c = c + 1


cdef inline Py_ssize_t chunks(Py_ssize_t n) noexcept nogil:
    return (n + FOLD_CHUNK - 1) // FOLD_CHUNK


cdef void cols_fold_chunk(const Grad* g, Py_ssize_t c) noexcept nogil:
    cdef Py_ssize_t si
    for si in range(c * FOLD_CHUNK, min((c + 1) * FOLD_CHUNK, g.L.n_slices)):
        cols_fold(g, si)


cdef Py_ssize_t cols_coefs_chunk(const Grad* g, Py_ssize_t c, in_t* kind) noexcept nogil:
    """cols_coefs_* of the columns of chunk c; how many did not fit."""
    cdef Py_ssize_t si, n_bad = 0
    for si in range(c * FOLD_CHUNK, min((c + 1) * FOLD_CHUNK, g.L.n_slices)):
        if in_t is float:
            n_bad += cols_coefs_f32(g, si)
        else:
            n_bad += cols_coefs_f64(g, si)
    return n_bad


cdef inline bint cols_folded_fit(const Grad* g, Py_ssize_t itemsize) noexcept nogil:
    """Whether cols_dx can run from folded per-column coefficients: columns
    contiguous in x, dy and dx, and gamma the same for every row (one
    coefficient set per column)."""
    cdef const Layout* L = g.L
    cdef const Axis* vec = &L.kept[L.n_kept - 1]
    cdef int j
    if (vec.stride[OP_X] != itemsize or vec.stride[OP_DY] != itemsize
            or vec.stride[OP_DX] != itemsize):
        return False
    for j in range(L.n_red):
        if L.red[j].stride[OP_G] != 0:
            return False
    return True


cdef void cols_folded_coefs(Grad* g, int nthreads, in_t* ki, out_t* ko) noexcept nogil:
    """Every column's folded coefficients (g.c32 for float32 data and dx,
    g.c64 for float64), after the folds; left NULL where the layout does not
    fit, on a failed allocation, or when a column's do not fit the type
    with room to spare (cols_dx then runs the unfolded formula)."""
    cdef Py_ssize_t i, n_bad = 0
    cdef void* buf
    if not ((in_t is float and out_t is float) or (in_t is double and out_t is double)):
        return
    if not cols_folded_fit(g, sizeof(in_t)):
        return
    buf = fn_malloc(4 * g.sstride * sizeof(in_t))
    if buf == NULL:
        return
    if in_t is float:
        g.c32 = <float*>buf
    else:
        g.c64 = <double*>buf
    for i in prange(chunks(g.L.n_slices), num_threads=nthreads, schedule="static"):
        n_bad += cols_coefs_chunk(g, i, ki)
    if n_bad:
        fn_free(buf)
        g.c32 = NULL
        g.c64 = NULL


cdef inline void cols_dx_at(const char* xp, Py_ssize_t sx, const char* dyp, Py_ssize_t sdy,
                            const char* gp, Py_ssize_t sg, char* dxp, Py_ssize_t sdx,
                            const Cols* t, const double* ab, const double* bs, Py_ssize_t c,
                            in_t* ki, out_t* ko) noexcept nogil:
    """dx of column c of one row, for any strides."""
    cdef double xs = (sload(xp + c * sx, ki) - t.m[c]) * t.r[c]
    sstore(dxp + c * sdx, t.r[c] * (sload(dyp + c * sdy, ki) * (<const double*>(gp + c * sg))[0]
                                     - ab[c] - xs * bs[c]), ko)


cdef void cols_dx(const Grad* g, Py_ssize_t blk, in_t* ki, out_t* ko) noexcept nogil:
    """Pass 2 over one block of rows: dx = r * (dy * gamma - a - xhat * b)."""
    cdef const Layout* L = g.L
    cdef const Axis* vec = &L.kept[L.n_kept - 1]
    cdef Py_ssize_t r0 = blk * g.per_block, nr = min(g.per_block, L.slice_len - r0)
    cdef Py_ssize_t sx = vec.stride[OP_X], sdy = vec.stride[OP_DY], sg = vec.stride[OP_G]
    cdef Py_ssize_t sdx = vec.stride[OP_DX]
    cdef Py_ssize_t grp, k, c, head
    cdef Cols t
    cdef Odometer row
    cdef const double* ab
    cdef const char* xp
    cdef const char* dyp
    cdef const char* gp
    cdef char* dxp
    cdef const double* bs
    cdef Param gv
    cdef fn_vd xh, tv
    cdef const float* k32
    for grp in range(g.n_groups):
        cols_of(g, grp, &t)
        ab = g.sums + t.slice0
        bs = ab + g.sstride
        odo_init(&row, L.red, L.n_red, r0)
        for k in range(nr):
            xp = L.base[OP_X] + col_off(L, &t, &row, OP_X)
            dyp = L.base[OP_DY] + col_off(L, &t, &row, OP_DY)
            gp = g.gamma + col_off(L, &t, &row, OP_G)
            dxp = L.base[OP_DX] + col_off(L, &t, &row, OP_DX)
            if in_t is double and out_t is double:
                if g.c64 != NULL:
                    grad_cols_f64(<const double*>xp, <const double*>dyp, <double*>dxp,
                                  g.c64 + t.slice0, g.sstride, t.width, L.stream)
                    odo_next(&row, L.red, L.n_red)
                    continue
            if in_t is float and out_t is float:
                if g.c32 != NULL:
                    k32 = g.c32 + t.slice0
                    fn_grad_cols_f32(<const float*>xp, <const float*>dyp, <float*>dxp, k32,
                                     k32 + g.sstride, k32 + 2 * g.sstride, k32 + 3 * g.sstride,
                                     t.width, L.stream)
                    odo_next(&row, L.red, L.n_red)
                    continue
            c = 0
            if (sx == sizeof(in_t) and sdy == sizeof(in_t) and sdx == sizeof(out_t)
                    and param_init(&gv, gp, sg)):
                head = 0
                if L.stream:  # values up to dx's first aligned vector go one by one
                    head = (<size_t>dxp // sizeof(out_t)) % FN_W
                    head = min(t.width, 0 if head == 0 else FN_W - head)
                while c < head:
                    cols_dx_at(xp, sx, dyp, sdy, gp, sg, dxp, sdx, &t, ab, bs, c, ki, ko)
                    c = c + 1
                while c + FN_W <= t.width:
                    xh = fn_mul(fn_sub(vload(xp + c * sx, sx, ki), fn_load_f64(t.m + c)),
                                fn_load_f64(t.r + c))
                    tv = fn_sub(fn_mul(vload(dyp + c * sdy, sdy, ki),
                                       fn_load_f64(gv.p + c * gv.inc)), fn_load_f64(ab + c))
                    tv = fn_mul(fn_sub(tv, fn_mul(xh, fn_load_f64(bs + c))), fn_load_f64(t.r + c))
                    if L.stream:
                        vstream(<out_t*>(dxp + c * sdx), tv)
                    else:
                        vstore(dxp + c * sdx, sdx, tv, ko)
                    c = c + FN_W
            while c < t.width:
                cols_dx_at(xp, sx, dyp, sdy, gp, sg, dxp, sdx, &t, ab, bs, c, ki, ko)
                c = c + 1
            odo_next(&row, L.red, L.n_red)
    fn_sfence()


# ---------------------------------------------------------------------------

cdef int run(Grad* g, int nthreads, in_t* ki, out_t* ko) noexcept nogil:
    cdef const Layout* L = g.L
    cdef Py_ssize_t i, n_blocks, min_per_block
    cdef Py_ssize_t units = L.slice_len if L.columns else L.n_slices
    cdef Py_ssize_t per_unit = 2 * g.n_param + (2 * L.n_slices if L.columns else 0)
    g.pstride = spaced(g.n_param)
    g.sstride = spaced(L.n_slices)
    if images_fit(g, ki):
        return images_run(g, nthreads, ki, ko)
    if L.columns:
        min_per_block = ROWS_PER_BLOCK_MIN
    else:
        min_per_block = max(<Py_ssize_t>1, SLICE_BLOCK_BYTES // max(<Py_ssize_t>1,
                                                                    L.slice_len * sizeof(in_t)))
    n_blocks = block_count(units, min_per_block, per_unit * sizeof(double))
    g.per_block = (units + n_blocks - 1) // n_blocks
    g.n_blocks = (units + g.per_block - 1) // g.per_block
    g.slice_param = L.columns and gamma_per_slice(g)
    g.sums = NULL
    g.c32 = NULL
    g.c64 = NULL
    g.g32 = NULL
    g.g32_max = 0.0
    g.partial = <double*>fn_calloc(0 if g.slice_param else 2 * g.n_blocks * g.pstride,
                                sizeof(double))
    if g.partial == NULL and not g.slice_param:
        return -1
    if L.columns:
        g.n_groups = (L.n_slices // L.kept[L.n_kept - 1].size
                      * ((L.kept[L.n_kept - 1].size + GRAD_COL_TILE - 1) // GRAD_COL_TILE))
        g.sums = <double*>fn_malloc(2 * g.n_blocks * g.sstride * sizeof(double))
        if g.sums == NULL:
            fn_free(g.partial)
            return -1
    nthreads = min(<Py_ssize_t>nthreads, g.n_blocks)
    if L.columns:
        if g.slice_param:
            for i in prange(g.n_blocks, num_threads=nthreads, schedule="runtime"):
                cols_sums_per_slice(g, i, ki)
        else:
            for i in prange(g.n_blocks, num_threads=nthreads, schedule="runtime"):
                cols_sums(g, i, ki)
        for i in prange(chunks(L.n_slices), num_threads=nthreads, schedule="static"):
            cols_fold_chunk(g, i)
        if g.group > 1:
            for i in prange(L.n_slices // g.group, num_threads=nthreads, schedule="static"):
                cols_fold_group(g, i * g.group)
        cols_folded_coefs(g, nthreads, ki, ko)
        for i in prange(g.n_blocks, num_threads=nthreads, schedule="runtime"):
            cols_dx(g, i, ki, ko)
    else:
        if in_t is float and out_t is float:
            if L.red[L.n_red - 1].stride[OP_G] == sizeof(double) and g.n_param <= G32_MAX:
                g.g32 = gamma_f32(g, &g.g32_max)
        for i in prange(g.n_blocks, num_threads=nthreads, schedule="runtime"):
            slice_block(g, i, ki, ko)
    if not g.slice_param:
        add_partials(g, 0, g.n_param)
    fn_free(g.partial)
    fn_free(g.sums)
    fn_free(g.c32)
    fn_free(g.c64)
    fn_free(g.g32)
    return 0


cdef inline bint gamma_per_slice(const Grad* g) noexcept nogil:
    """Whether gamma has one entry per slice (batch norm's per-feature one):
    then a slice's sums are its parameter sums."""
    cdef int i
    if g.n_param != g.L.n_slices:
        return False
    for i in range(g.L.n_red):
        if g.L.red[i].stride[OP_G] != 0:
            return False
    return True


cdef int run_passes(Grad* g, int nthreads, in_t* ki, out_t* ko) noexcept nogil:
    """run over pieces of the kept axes of at most GRAD_PASS_GROUPS groups each
    (pass_axis, _layout.pxd), for COLUMNS calls with gamma per column: every
    piece's gradients are its own columns' (gamma, dgamma and dbeta moved
    with it).  Many short columns took per-column scratch (48 bytes a
    column) beyond any kept block, fresh pages every call:
    batch_norm_backward over axis 0 of (2, 3211264) float32 spent a third
    of its time in page faults."""
    cdef const Layout* L = g.L
    cdef Layout sub             # (6 KiB; a pass's recursion is a few deep)
    cdef Grad piece
    cdef Py_ssize_t step, start = 0, size, shift
    cdef int a, rc = 0
    if not (L.columns and g.group == 1 and gamma_per_slice(g)):
        return run(g, nthreads, ki, ko)
    a = pass_axis(L, GRAD_COL_TILE, GRAD_PASS_GROUPS, &step)
    if a < 0:
        return run(g, nthreads, ki, ko)
    while start < L.kept[a].size and rc == 0:
        size = piece_size(L, a, start, step, GRAD_COL_TILE)
        layout_piece(L, &sub, a, start, size)
        piece = g[0]
        piece.L = &sub
        piece.n_param = sub.n_slices
        shift = start * L.kept[a].stride[OP_G]
        piece.gamma = g.gamma + shift
        piece.dgamma = g.dgamma + shift
        piece.dbeta = g.dbeta + shift
        if a == L.n_kept - 1:
            rc = run(&piece, nthreads, ki, ko)
        else:
            rc = run_passes(&piece, nthreads, ki, ko)
        start += size
    return rc


cdef int run_in(Grad* g, int nthreads, int out_code, in_t* ki) noexcept nogil:
    if out_code == 0:
        return run_passes(g, nthreads, ki, <half_t*>NULL)
    if out_code == 1:
        return run_passes(g, nthreads, ki, <float*>NULL)
    return run_passes(g, nthreads, ki, <double*>NULL)


def backward(cnp.ndarray dy, cnp.ndarray x, cnp.ndarray dx, cnp.ndarray gamma,
             cnp.ndarray mean, cnp.ndarray rstd, cnp.ndarray dgamma, cnp.ndarray dbeta,
             tuple reduced, int mode, int nthreads, Py_ssize_t group=1, bint fresh=False):
    """One backward call.  dy and x share a float dtype; dx has x's shape;
    gamma, dgamma, dbeta are C-contiguous float64 arrays of one keepdims shape
    (gamma all ones where the forward had none); mean and rstd C-contiguous
    float64 in keepdims layout (mean zeros for RMS).  group > 1: x is a
    matrix whose rows are reduced and whose columns go in groups of `group`,
    each group one slice (gamma, mean and rstd repeated over its columns);
    dgamma and dbeta come per column, for the caller to sum per group.
    fresh: dx was just allocated (its pages are not yet touched)."""
    cdef Layout L
    cdef Grad g
    cdef int rc, in_code = type_code(x), out_code = type_code(dx)
    cdef char* dx_data
    cdef Py_ssize_t dx_bytes
    if type_code(dy) != in_code:
        raise TypeError("dy and x must have the same dtype")
    # Slots: x, dx (output), gamma (its strides also address the gradient
    # buffers), dy (the beta slot), statistics.
    make_layout(&L, x, (dx, gamma, dy, mean, rstd, None), reduced)
    g.L = &L
    g.mode = mode
    if group > 1 and not (L.columns and x.ndim == 2 and L.n_slices % group == 0
                          and gamma.size == L.n_slices):
        raise ValueError("backward: columns in groups need a matrix whose columns are "
                         "kept, a multiple of the group, and gamma per column")
    g.group = group
    g.inv_n = 1.0 / <double>(L.slice_len * group)
    g.n_param = gamma.size
    g.gamma = <const char*>cnp.PyArray_DATA(gamma)
    g.dgamma = <char*>cnp.PyArray_DATA(dgamma)
    g.dbeta = <char*>cnp.PyArray_DATA(dbeta)
    # make_layout may have walked negative x strides forwards, moving gamma's
    # base; the partial buffers (gamma's layout) move the same way.
    g.gshift = L.base[OP_G] - g.gamma
    g.gamma = <const char*>L.base[OP_G]
    if L.n_slices * L.slice_len < PARALLEL_MIN:
        nthreads = 1
    L.stream = stream_output(&L, dx.nbytes, STREAM_MIN_BYTES, fresh)
    schedule_for(x.nbytes, False)
    if (L.stream and fresh and nthreads > 1
            and (cnp.PyArray_IS_C_CONTIGUOUS(dx) or cnp.PyArray_IS_F_CONTIGUOUS(dx))):
        # (a fresh dx streamed is written channel by channel: each thread
        # faults its own pages in, see fn_fault_in)
        dx_data = <char*>cnp.PyArray_DATA(dx)
        dx_bytes = dx.nbytes
        with nogil:
            fn_fault_in(dx_data, dx_bytes, nthreads)
    with nogil:
        if in_code == 0:
            rc = run_in(&g, nthreads, out_code, <half_t*>NULL)
        elif in_code == 1:
            rc = run_in(&g, nthreads, out_code, <float*>NULL)
        else:
            rc = run_in(&g, nthreads, out_code, <double*>NULL)
    if rc != 0:
        raise MemoryError("fastnorm: could not allocate scratch memory")
