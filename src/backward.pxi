# The gradients' schedules, on the same patterns as the forward ones
# (plan.pxd).  For a slice with mean m, rstd r and n values, xhat = (x - m) r
# and gd = dy gamma (the modes are plan.pxd's):
#
#   GRAD_CENTER  dx = r (gd - A/n - xhat B/n),  A = sum(gd), B = sum(gd xhat)
#   GRAD_RMS     the same with m = 0 and A = 0
#   GRAD_SCALE   dx = r gd                        (batch norm in eval mode)
#
# and for every entry p of gamma: dgamma[p] = sum(dy xhat), dbeta[p] =
# sum(dy), over the elements that read gamma[p].
#
# Operands: x (OP_X), dy (the bias slot, OP_DY), dx (the output slot,
# OP_DX), gamma (OP_G), mean and rstd (OP_S).  The parameter sums go to
# per-block partial buffers laid out like gamma (so OP_G's offsets address
# them), and are added up in block order: blocks depend on the shape alone,
# so the thread count never changes a bit.
#
# Pass 1 reads (dy, x) for the per-slice sums A, B and the parameter sums;
# pass 2 reads them again (from cache, for a slice that fits) and writes dx
# with the output pass (apply.h) from coefficients folded once per slice
# (coefs.pxd): dx = dy k1 + (x - m) k2 + k0.  Where folding would overflow
# (rstd**2), dx is written unfolded, value by value.


cdef enum:
    OP_DY = OP_B      # the layout's beta slot carries dy
    OP_DX = OP_Y      # ...and its output slot dx

cdef enum:
    PAGE = 512                      # doubles in 4 KiB
    HALF_PAGE = 256

cdef float ONE_F = 1.0
cdef double ONE_D = 1.0


cdef enum:
    # What a gradient call does (the Dask path cuts a slice's passes apart)
    PHASE_BOTH = 0      # pass 1, then pass 2
    PHASE_SUMS = 1      # pass 1 only: each slice's sums A, B and the parameter sums
    PHASE_DX = 2        # pass 2 only, from each slice's sums A, B given

cdef struct Grad:
    const Layout* L
    const Route* R
    int mode
    int phase
    char* sa                  # PHASE_SUMS, PHASE_DX: each slice's A and B, at
    char* sb                  # the statistics' offsets (OP_S)...
    char* sn                  # ...and with where=, its count of selected values
    double inv_n              # 1 / values per slice (where=: each slice's own)
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
                              # (with where=, then each slice's count)...
    Py_ssize_t bstride        # ...bstride doubles a block
    Py_ssize_t n_groups       # COLUMNS: outer kept indices x tiles of columns
    Py_ssize_t group          # COLUMNS: this many adjacent columns are one
                              # slice's (1: each column is a slice)
    const char* gamma
    char* dgamma
    char* dbeta
    float* c32                # COLUMNS, float32 data: per slice the folded
                              # coefficients (m, k1, k2, k0, each sstride
                              # apart), or NULL
    double* c64               # COLUMNS, other data: the same in double, or NULL
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


cdef float* gamma_f32(const Grad* g, double* largest) noexcept nogil:
    """gamma (its n_param entries as laid out) in float32, and its largest
    magnitude; NULL when an entry does not fit float32 with room to spare,
    or on a failed allocation."""
    cdef const double* src = <const double*>(g.gamma - g.gshift)
    cdef float* out
    cdef Py_ssize_t i
    cdef double big = 0.0, v
    cdef bint ok = True
    # The checks and the maximum in locals, with no exit inside the loop:
    # through *largest, each entry waited on the store of the last.
    for i in range(g.n_param):
        v = src[i]
        ok = ok & holds(v, <float*>NULL)
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


cdef inline void value_sums(const char* xp, const char* dyp, const char* gp, char* pg, char* pb,
                            double m, double r, double* ta, double* tb, in_t* ki) noexcept nogil:
    """run_sums of one value: its share of A and B into ta and tb, of the
    parameter sums into pg and pb."""
    cdef double xs = (sload(xp, ki) - m) * r, ds = sload(dyp, ki)
    cdef double gs = (<const double*>gp)[0]
    ta[0] = ta[0] + ds * gs
    tb[0] = tb[0] + ds * gs * xs
    (<double*>pg)[0] += ds * xs
    (<double*>pb)[0] += ds


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
    cdef double gs, ta = 0.0, tb = 0.0, td = 0.0, tdx = 0.0
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
        value_sums(xp + i * sx, dyp + i * sdy, gp + i * sg, pg + i * sg, pb + i * sg, m, r,
                   &ta, &tb, ki)
        i = i + 1
    acc.a = acc.a + fn_hsum(sa) + ta
    acc.b = acc.b + fn_hsum(sb) + tb


cdef inline double piece_sums(const char* xp, const char* dyp, const char* gp, Py_ssize_t sg,
                             char* pg, char* pb, const unsigned char* sel, Py_ssize_t n,
                             double m, double r, Sums* acc, in_t* ki) noexcept nogil:
    """run_sums over the values of n contiguous ones that sel selects (gamma
    along them, sg one float64, or one value, sg 0): lane by lane, the
    lanes not selected adding +0.0 whatever x and dy hold there; their
    count."""
    cdef fn_vd vm = fn_set1(m), vr = fn_set1(r), vmr = fn_set1(-m * r), one = fn_set1(1.0)
    cdef fn_vd sa = fn_zero(), sb = fn_zero(), cnt = fn_zero(), sd = fn_zero(), sdx = fn_zero()
    cdef fn_vd D, u, G, on
    cdef Py_ssize_t w = sizeof(in_t), i = 0
    cdef double ta = 0.0, tb = 0.0, tn = 0.0
    G = fn_set1(param_at(gp)[0])
    while i + FN_W <= n:
        on = fn_bytes_mask(sel + i)
        D = fn_masked(vload(dyp + i * w, w, ki), on)
        u = fn_masked(fn_mul(D, xhat(vload(xp + i * w, w, ki), vm, vr, vmr, ki)), on)
        if sg != 0:
            G = fn_load_f64(<const double*>gp + i)
            fn_store_f64(<double*>pg + i, fn_add(u, fn_load_f64(<double*>pg + i)))
            fn_store_f64(<double*>pb + i, fn_add(D, fn_load_f64(<double*>pb + i)))
        else:
            sd = fn_add(sd, D)
            sdx = fn_add(sdx, u)
        sa = fn_fma(D, G, sa)
        sb = fn_fma(u, G, sb)
        cnt = fn_add(cnt, fn_masked(one, on))
        i = i + FN_W
    while i < n:
        if sel[i]:
            value_sums(xp + i * w, dyp + i * w, gp + i * sg, pg + i * sg, pb + i * sg, m, r,
                       &ta, &tb, ki)
            tn = tn + 1.0
        i = i + 1
    if sg == 0:
        (<double*>pg)[0] += fn_hsum(sdx)     # one gain: its sums kept in registers
        (<double*>pb)[0] += fn_hsum(sd)
    acc.a = acc.a + fn_hsum(sa) + ta
    acc.b = acc.b + fn_hsum(sb) + tb
    return fn_hsum(cnt) + tn


cdef inline void out_dx(const Grad* g, const char* xp, Py_ssize_t sx, const char* dyp,
                        Py_ssize_t sdy, const char* gp, Py_ssize_t sg, const float* g32,
                        char* dxp, Py_ssize_t sdx, Py_ssize_t n, double m, double r,
                        double a, double b, const char* x_ahead, const char* dy_ahead,
                        const unsigned char* sel, in_t* ki, out_t* ko) noexcept nogil:
    """Pass 2 along one run: dx = r (dy gamma - a - xhat b), gamma along the
    run (sg one float64) or one value (sg 0).  The output pass from folded
    coefficients where x, dy and dx are contiguous (float32 data: in
    float32, gamma from g32 when it varies along the run), else, and where
    folding would overflow, value by value.  x_ahead, dy_ahead (or NULL):
    the next run's, fetched a line per line written.  sel (NULL, or where=
    bytes of contiguous data): the values it selects alone."""
    cdef float kf[4]
    cdef double kd[4]
    cdef bint stream = g.R.stream
    cdef Py_ssize_t i
    if sx == sizeof(in_t) and sdy == sizeof(in_t) and sdx == sizeof(out_t):
        if in_t is float and out_t is float:
            if sg == 0 and grad_affine(m, r, r * param_at(gp)[0], a, b, kf):
                fn_run_f(xp, 1, dxp, 1, dyp, n, kf[0], kf[2], kf[3], kf[1], &ONE_F, 0, NULL, 0,
                         FN_GRAD, stream, 0, x_ahead, dy_ahead, n, sel)
                return
            if (sg == sizeof(double) and g32 != NULL
                    and grad_affine(m, r, r * g.g32_max, a, b, kf)):
                fn_run_f(xp, 1, dxp, 1, dyp, n, kf[0], kf[2], kf[3], <float>r, g32, 1, NULL, 0,
                         FN_GRAD, stream, 0, x_ahead, dy_ahead, n, sel)
                return
        if sg == 0 and grad_affine(m, r, r * param_at(gp)[0], a, b, kd):
            fn_run_d(xp, tcode(ki), dxp, ocode(ko), dyp, n, kd[0], kd[2], kd[3], kd[1], &ONE_D, 0,
                     NULL, 0, FN_GRAD, stream, 0, x_ahead, dy_ahead, n, sel)
            return
        if sg == sizeof(double) and grad_affine(m, r, r, a, b, kd):
            fn_run_d(xp, tcode(ki), dxp, ocode(ko), dyp, n, kd[0], kd[2], kd[3], r, param_at(gp),
                     1, NULL, 0, FN_GRAD, stream, 0, x_ahead, dy_ahead, n, sel)
            return
    if sel == NULL:
        fn_strided_grad(xp, sx, dyp, sdy, tcode(ki), dxp, sdx, ocode(ko), gp, sg, n, m, r, a, b)
        return
    for i in range(n):
        if sel[i]:
            fn_strided_grad(xp + i * sx, sx, dyp + i * sdy, sdy, tcode(ki), dxp + i * sdx, sdx,
                            ocode(ko), gp + i * sg, sg, 1, m, r, a, b)


cdef inline bint given_sums(const Grad* g, Py_ssize_t off, Sums* acc,
                            double* n) noexcept nogil:
    """PHASE_DX: acc = the sums given for the slice at statistics offset
    off, and with where= its count into n (true); other phases: false."""
    if g.phase != PHASE_DX:
        return False
    acc.a = (<const double*>(g.sa + off))[0]
    acc.b = (<const double*>(g.sb + off))[0]
    if g.sn != NULL and n != NULL:
        n[0] = (<const double*>(g.sn + off))[0]
    return True


cdef inline bint kept_sums(const Grad* g, Py_ssize_t off, const Sums* acc,
                           double n) noexcept nogil:
    """PHASE_SUMS: write the slice's sums (with where=, and its count n) at
    statistics offset off and say so (true: no pass 2); other phases:
    false."""
    if g.phase != PHASE_SUMS:
        return False
    (<double*>(g.sa + off))[0] = acc.a
    (<double*>(g.sb + off))[0] = acc.b
    if g.sn != NULL:
        (<double*>(g.sn + off))[0] = n
    return True


cdef inline void slice_coefs(const Grad* g, const Sums* acc, double n, double* a,
                             double* b) noexcept nogil:
    """The a, b of pass 2 from a slice's sums A, B over its n values (where=:
    its count; else every slice's, g.inv_n)."""
    grad_ab(g.mode, 1.0 / n if g.L.base[OP_M] != NULL else g.inv_n, acc.a, acc.b, a, b)


cdef void grad_slice(const Grad* g, Py_ssize_t si, double* part,
                     in_t* ki, out_t* ko) noexcept nogil:
    """Both passes over slice si; parameter sums into this block's part.
    With where=, each pass walks the stretches of selected values of each
    run (next_stretch), and the slice's count is theirs."""
    cdef const Layout* L = g.L
    cdef const Axis* inner = &L.red[L.n_red - 1]
    cdef Odometer s, r, s_next
    cdef Py_ssize_t ri, n_runs = L.slice_len // inner.size, go, ahead, j, e
    cdef Py_ssize_t sx = inner.stride[OP_X], sdy = inner.stride[OP_DY], sg = inner.stride[OP_G]
    cdef Py_ssize_t sm = inner.stride[OP_M]
    cdef double m, rs, a, b, n = 0.0
    cdef Sums acc
    cdef char* pg
    cdef char* pb
    cdef const unsigned char* mk = NULL
    cdef bint masked = L.base[OP_M] != NULL, pieces
    cdef int k
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
    if si + 1 < L.n_slices and n_runs > 1 and inner.size * sx <= IMAGE_RUN_BYTES:
        ahead = min(<Py_ssize_t>RUN_AHEAD_BYTES, inner.size * sx)
        odo_init(&s_next, L.kept, L.n_kept, si + 1)
    # The parts of a run (next_part; without a mask, the whole run).
    pieces = (sm == 1 and sx == sizeof(in_t) and sdy == sizeof(in_t)
              and (sg == 0 or sg == sizeof(double)) and inner.stride[OP_DX] == sizeof(out_t))
    odo_init(&r, L.red, L.n_red - 1, 0)
    for ri in range(0 if given_sums(g, s.off[OP_S], &acc, &n) else n_runs):
        if ahead > 0:
            fetch_lines(L.base[OP_X] + s_next.off[OP_X] + r.off[OP_X], ahead)
            fetch_lines(L.base[OP_DY] + s_next.off[OP_DY] + r.off[OP_DY], ahead)
        go = s.off[OP_G] + r.off[OP_G]
        pg = <char*>part + g.gshift + go
        pb = <char*>(part + g.pstride) + g.gshift + go
        if masked:
            mk = <const unsigned char*>(L.base[OP_M] + s.off[OP_M] + r.off[OP_M])
        j = 0
        k = next_part(mk, sm, inner.size, pieces, &j, &e)
        while k != 0:
            if k == 1:
                run_sums(L.base[OP_X] + s.off[OP_X] + r.off[OP_X] + j * sx, sx,
                         L.base[OP_DY] + s.off[OP_DY] + r.off[OP_DY] + j * sdy, sdy,
                         g.gamma + go + j * sg, sg, pg + j * sg, pb + j * sg, e - j, m, rs,
                         &acc, ki)
                n = n + (e - j)
            else:
                n = n + piece_sums(L.base[OP_X] + s.off[OP_X] + r.off[OP_X] + j * sx,
                                   L.base[OP_DY] + s.off[OP_DY] + r.off[OP_DY] + j * sdy,
                                   g.gamma + go + j * sg, sg, pg + j * sg, pb + j * sg,
                                   mk + j, e - j, m, rs, &acc, ki)
            j = e
            k = next_part(mk, sm, inner.size, pieces, &j, &e)
        odo_next(&r, L.red, L.n_red - 1)
    if kept_sums(g, s.off[OP_S], &acc, n):
        return
    slice_coefs(g, &acc, n, &a, &b)
    odo_init(&r, L.red, L.n_red - 1, 0)
    for ri in range(n_runs):
        go = s.off[OP_G] + r.off[OP_G]
        if masked:
            mk = <const unsigned char*>(L.base[OP_M] + s.off[OP_M] + r.off[OP_M])
        j = 0
        k = next_part(mk, sm, inner.size, pieces, &j, &e)
        while k != 0:
            out_dx(g, L.base[OP_X] + s.off[OP_X] + r.off[OP_X] + j * sx, sx,
                   L.base[OP_DY] + s.off[OP_DY] + r.off[OP_DY] + j * sdy, sdy,
                   g.gamma + go + j * sg, sg,
                   g.g32 + (g.gshift + go + j * sg) // sizeof(double) if g.g32 != NULL else NULL,
                   L.base[OP_DX] + s.off[OP_DX] + r.off[OP_DX] + j * inner.stride[OP_DX],
                   inner.stride[OP_DX], e - j, m, rs, a, b, NULL, NULL,
                   NULL if k == 1 else mk + j, ki, ko)
            j = e
            k = next_part(mk, sm, inner.size, pieces, &j, &e)
        odo_next(&r, L.red, L.n_red - 1)


cdef inline void rows_sums(const char** xp, const char** dyp, const double* gp,
                           double* pg, double* pb, Py_ssize_t n,
                           const double* m, const double* r, Sums* acc, const int nr,
                           const char** xa, const char** da, bint fetch,
                           in_t* ki) noexcept nogil:
    """Pass 1 over nr (at most GRAD_ROWS, a constant where called)
    contiguous runs that share gamma and the partial buffers: A and B of
    each into acc[k], and one read-modify-write of the buffers per vector
    for all of them.  The buffers receive the runs in order, so the sums are
    those of nr calls of run_sums.  With `fetch`, the next nr rows of x
    and dy (xa, da) are fetched into L2 a line per line read, as pass 2
    fetches them again while it writes."""
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
    for k in range(nr):
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
        if fetch and i % (64 // sizeof(in_t)) < FN_W:  # once a line
            for k in range(nr):
                fn_prefetch_l2(xa[k] + i * sizeof(in_t))
                fn_prefetch_l2(da[k] + i * sizeof(in_t))
        G = fn_load_f64(gp + i)
        PG = fn_load_f64(pg + i)
        PB = fn_load_f64(pb + i)
        for k in range(nr):
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
        for k in range(nr):
            xs = (sload(xp[k] + i * sizeof(in_t), ki) - m[k]) * r[k]
            ds = sload(dyp[k] + i * sizeof(in_t), ki)
            ta[k] = ta[k] + ds * gs
            tb[k] = tb[k] + ds * gs * xs
            tg = tg + ds * xs
            td = td + ds
        pg[i] = tg
        pb[i] = td
        i = i + 1
    for k in range(nr):
        acc[k].a = fn_hsum(sa[k]) + ta[k]
        acc[k].b = fn_hsum(sb[k]) + tb[k]


cdef inline void grad_rows(const Grad* g, Py_ssize_t si, double* part, const int nr,
                           in_t* ki, out_t* ko) noexcept nogil:
    """Both passes over the nr slices from si (the route's batch, a constant
    where called), when each is one contiguous run along which gamma lies
    (layer norm over the last axes): pass 1 reads the rows side by side, so
    the parameter sums cost one update per vector for all of them."""
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
    # Pass 1 fetches the next rows too (float16/float32, out of cache), but
    # not where a fetch into L2 fills L1 as well (on the Zen 3 it cost more
    # than it saved, in cache and out of it).
    cdef bint fetch = (in_t is not double and not g.R.in_cache and not PREFETCH_FILLS_L1
                       and si + 2 * nr <= L.n_slices)
    odo_init(&s, L.kept, L.n_kept, si)
    for k in range(nr):
        xp[k] = L.base[OP_X] + s.off[OP_X]
        dyp[k] = L.base[OP_DY] + s.off[OP_DY]
        dxp[k] = L.base[OP_DX] + s.off[OP_DX]
        m[k] = (<const double*>(L.stat[0] + s.off[OP_S]))[0]
        rs[k] = (<const double*>(L.stat[1] + s.off[OP_S]))[0]
        odo_next(&s, L.kept, L.n_kept)
    for k in range(nr):
        if si + nr + k < L.n_slices:
            xa[k] = L.base[OP_X] + s.off[OP_X]
            da[k] = L.base[OP_DY] + s.off[OP_DY]
            odo_next(&s, L.kept, L.n_kept)
        else:
            xa[k] = NULL
            da[k] = NULL
    if g.phase == PHASE_DX:
        odo_init(&s, L.kept, L.n_kept, si)
        for k in range(nr):
            given_sums(g, s.off[OP_S], &acc[k], NULL)
            odo_next(&s, L.kept, L.n_kept)
    else:
        rows_sums(xp, dyp, <const double*>g.gamma, <double*>(<char*>part + g.gshift),
                  <double*>(<char*>(part + g.pstride) + g.gshift), n, m, rs, acc, nr,
                  xa, da, fetch, ki)
    if g.phase == PHASE_SUMS:
        odo_init(&s, L.kept, L.n_kept, si)
        for k in range(nr):
            kept_sums(g, s.off[OP_S], &acc[k], 0.0)
            odo_next(&s, L.kept, L.n_kept)
        return
    for k in range(nr):
        slice_coefs(g, &acc[k], 0.0, &a, &b)
        out_dx(g, xp[k], sizeof(in_t), dyp[k], sizeof(in_t), g.gamma, sizeof(double),
               g.g32 + g.gshift // sizeof(double) if g.g32 != NULL else NULL,
               dxp[k], L.red[0].stride[OP_DX], n, m[k], rs[k], a, b, xa[k], da[k], NULL, ki, ko)


cdef void slice_block(const Grad* g, Py_ssize_t blk, in_t* ki, out_t* ko) noexcept nogil:
    cdef Py_ssize_t si, lo = blk * g.per_block
    cdef Py_ssize_t hi = min(lo + g.per_block, g.L.n_slices)
    cdef double* part = g.partial + 2 * blk * g.pstride
    si = lo
    if g.R.way == WAY_ROWS:
        while si + g.R.batch <= hi:
            if g.R.batch == GRAD_ROWS:
                grad_rows(g, si, part, GRAD_ROWS, ki, ko)
            else:
                grad_rows(g, si, part, GRAD_ROWS // 2, ki, ko)
            si = si + g.R.batch
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
    """Pass 2 over image ri run by run: every slice's run, with its a, b
    (ab[2 si], ab[2 si + 1])."""
    cdef const Layout* L = g.L
    cdef const Axis* inner = &L.red[L.n_red - 1]
    cdef Odometer r, s
    cdef Py_ssize_t si
    odo_init(&r, L.red, L.n_red - 1, ri)
    odo_init(&s, L.kept, L.n_kept, 0)
    for si in range(L.n_slices):
        out_dx(g, L.base[OP_X] + s.off[OP_X] + r.off[OP_X], sizeof(in_t),
               L.base[OP_DY] + s.off[OP_DY] + r.off[OP_DY], sizeof(in_t),
               g.gamma + s.off[OP_G], 0, NULL,
               L.base[OP_DX] + s.off[OP_DX] + r.off[OP_DX], sizeof(out_t), inner.size,
               (<const double*>(L.stat[0] + s.off[OP_S]))[0],
               (<const double*>(L.stat[1] + s.off[OP_S]))[0], ab[2 * si], ab[2 * si + 1],
               NULL, NULL, NULL, ki, ko)
        odo_next(&s, L.kept, L.n_kept)


cdef inline void image_dx_rows(const Grad* g, Py_ssize_t ri, const float* kf, const double* kd,
                               Py_ssize_t ks, in_t* ki, out_t* ko) noexcept nogil:
    """Pass 2 over image ri: its runs as one run of rows, slice si's folded
    coefficients at [si] of the arrays m, k1, k2, k0 (ks apart)."""
    cdef const Layout* L = g.L
    cdef Odometer r
    odo_init(&r, L.red, L.n_red - 1, ri)
    if in_t is float and out_t is float:
        fn_rows_f(L.base[OP_X] + r.off[OP_X], 1, L.base[OP_DX] + r.off[OP_DX], 1,
                  L.base[OP_DY] + r.off[OP_DY], L.n_slices, L.red[L.n_red - 1].size, kf,
                  kf + 2 * ks, kf + 3 * ks, kf + ks, NULL, NULL, FN_GRAD, g.R.stream)
    else:
        fn_rows_d(L.base[OP_X] + r.off[OP_X], tcode(ki), L.base[OP_DX] + r.off[OP_DX],
                  ocode(ko), L.base[OP_DY] + r.off[OP_DY], L.n_slices, L.red[L.n_red - 1].size,
                  kd, kd + 2 * ks, kd + 3 * ks, kd + ks, NULL, NULL, FN_GRAD, g.R.stream)


cdef ct* images_coefs(const Grad* g, const double* ab, Py_ssize_t ks, ct* kind) noexcept nogil:
    """Every slice's folded coefficients of pass 2 (m, k1, k2, k0, arrays
    ks apart), or NULL where ct cannot hold one (or on a failed
    allocation)."""
    cdef const Layout* L = g.L
    cdef Py_ssize_t si
    cdef ct* k = <ct*>fn_calloc(4 * ks, sizeof(ct))
    cdef ct c[4]
    cdef Odometer s
    cdef double r
    if k == NULL:
        return NULL
    odo_init(&s, L.kept, L.n_kept, 0)
    for si in range(L.n_slices):
        r = (<const double*>(L.stat[1] + s.off[OP_S]))[0]
        if not grad_affine((<const double*>(L.stat[0] + s.off[OP_S]))[0], r,
                           r * param_at(g.gamma + s.off[OP_G])[0], ab[2 * si], ab[2 * si + 1],
                           c):
            fn_free(k)
            return NULL
        k[si] = c[0]
        k[ks + si] = c[1]
        k[2 * ks + si] = c[2]
        k[3 * ks + si] = c[3]
        odo_next(&s, L.kept, L.n_kept)
    return k


cdef int images_run(Grad* g, in_t* ki, out_t* ko) noexcept nogil:
    """The IMAGES schedule of a gradient: pass 1 image block by image block
    into the partial buffers (blocks of images), then dx image by image,
    each image's runs one run of rows with folded coefficients (run by run
    where they do not fit)."""
    cdef const Layout* L = g.L
    cdef int nthreads = g.R.threads
    cdef Py_ssize_t n_images = L.slice_len // L.red[L.n_red - 1].size, i
    cdef Py_ssize_t image_bytes = max(<Py_ssize_t>1, L.n_slices * L.red[L.n_red - 1].size
                                      * <Py_ssize_t>sizeof(in_t))
    cdef Py_ssize_t n_blocks = block_count(
        n_images, max(<Py_ssize_t>1, SLICE_BLOCK_BYTES // image_bytes),
        2 * g.n_param * <Py_ssize_t>sizeof(double))
    cdef Py_ssize_t ks = L.n_slices + 2, run_len = L.red[L.n_red - 1].size
    cdef double* ab = <double*>fn_malloc(2 * L.n_slices * sizeof(double))
    cdef Odometer s
    cdef Sums acc
    cdef double gv
    cdef float* kf = NULL
    cdef double* kd = NULL
    g.per_block = (n_images + n_blocks - 1) // n_blocks
    g.n_blocks = (n_images + g.per_block - 1) // g.per_block
    g.partial = <double*>fn_calloc(2 * g.n_blocks * g.pstride, sizeof(double))
    if g.partial == NULL or ab == NULL:
        fn_free(g.partial)
        fn_free(ab)
        return -1
    if g.phase != PHASE_DX:
        for i in prange(g.n_blocks, num_threads=min(<Py_ssize_t>nthreads, g.n_blocks),
                        schedule="runtime"):
            image_block_sums(g, i, ki)
    add_partials(g, 0, g.n_param)
    # A = gamma sum(dy), B = gamma sum(dy * xhat), per slice.
    odo_init(&s, L.kept, L.n_kept, 0)
    for i in range(L.n_slices):
        if not given_sums(g, s.off[OP_S], &acc, NULL):
            gv = param_at(g.gamma + s.off[OP_G])[0]
            acc.a = gv * (<const double*>(g.dbeta + g.gshift + s.off[OP_G]))[0]
            acc.b = gv * (<const double*>(g.dgamma + g.gshift + s.off[OP_G]))[0]
            kept_sums(g, s.off[OP_S], &acc, 0.0)
        slice_coefs(g, &acc, 0.0, &ab[2 * i], &ab[2 * i + 1])
        odo_next(&s, L.kept, L.n_kept)
    if g.phase == PHASE_SUMS:
        fn_free(g.partial)
        fn_free(ab)
        return 0
    # Rows of at least half a vector: one run of rows per image.
    if in_t is float and out_t is float:
        if 2 * run_len >= FN_WF:
            kf = images_coefs(g, ab, ks, <float*>NULL)
    elif 2 * run_len >= FN_W:
        kd = images_coefs(g, ab, ks, <double*>NULL)
    with parallel(num_threads=nthreads):
        if kf != NULL or kd != NULL:
            for i in prange(n_images, schedule="runtime"):
                image_dx_rows(g, i, kf, kd, ks, ki, ko)
        else:
            for i in prange(n_images, schedule="runtime"):
                image_dx(g, i, ab, ki, ko)
        fn_sfence()
    fn_free(g.partial)
    fn_free(ab)
    fn_free(kf)
    fn_free(kd)
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
    s1 = g.sums + blk * g.bstride + t.slice0
    for c in range(t.width):
        s1[c] = 0.0
        s1[g.sstride + c] = 0.0
        if g.L.base[OP_M] != NULL:
            s1[2 * g.sstride + c] = 0.0
    odo_init(row, g.L.red, g.L.n_red, blk * g.per_block)
    return s1


cdef inline Py_ssize_t col_off(const Layout* L, const Cols* t, const Odometer* row,
                               int k) noexcept nogil:
    return t.outer.off[k] + row.off[k] + t.c0 * L.kept[L.n_kept - 1].stride[k]


cdef inline const unsigned char* row_mask(const Grad* g, const Cols* t,
                                          const Odometer* row) noexcept nogil:
    """where=: the mask's byte of a tile's first column in a row; NULL without."""
    if g.L.base[OP_M] == NULL:
        return NULL
    return <const unsigned char*>(g.L.base[OP_M] + col_off(g.L, t, row, OP_M))


cdef inline void selected_row_sums(const Grad* g, const Cols* t, const char* xp,
                                   const char* dyp, const char* gp, char* pg, char* pb,
                                   const unsigned char* mp, double* s1, double* s2, double* sn,
                                   bint per_slice, in_t* ki) noexcept nogil:
    """Pass 1 of one row of a tile over the columns its where= bytes select
    (mp, a mask that varies along the columns): per_slice (a gain per
    column), sum(dy) and sum(dy xhat) into s1 and s2; else A and B, and the
    parameter sums into pg and pb (gamma's layout); the counts into sn.  The
    lanes not selected add +0.0 whatever x and dy hold there."""
    cdef const Axis* vec = &g.L.kept[g.L.n_kept - 1]
    cdef Py_ssize_t sx = vec.stride[OP_X], sdy = vec.stride[OP_DY], sg = vec.stride[OP_G]
    cdef Py_ssize_t sm = vec.stride[OP_M], c = 0
    cdef fn_vd X, D, G, xh, on, one = fn_set1(1.0)
    cdef double xs, ds, gs
    if (sx == sizeof(in_t) and sdy == sizeof(in_t) and sm == 1
            and (per_slice or sg == sizeof(double))):
        while c + FN_W <= t.width:
            on = fn_bytes_mask(mp + c)
            X = vload(xp + c * sx, sx, ki)
            D = fn_masked(vload(dyp + c * sdy, sdy, ki), on)
            xh = fn_masked(fn_mul(fn_sub(X, fn_load_f64(t.m + c)), fn_load_f64(t.r + c)), on)
            fn_store_f64(sn + c, fn_add(fn_load_f64(sn + c), fn_masked(one, on)))
            if per_slice:
                fn_store_f64(s1 + c, fn_add(fn_load_f64(s1 + c), D))
                fn_store_f64(s2 + c, fn_fma(D, xh, fn_load_f64(s2 + c)))
            else:
                G = fn_load_f64(<const double*>gp + c)
                fn_store_f64(<double*>pg + c, fn_fma(D, xh, fn_load_f64(<double*>pg + c)))
                fn_store_f64(<double*>pb + c, fn_add(D, fn_load_f64(<double*>pb + c)))
                D = fn_mul(D, G)
                fn_store_f64(s1 + c, fn_add(fn_load_f64(s1 + c), D))
                fn_store_f64(s2 + c, fn_fma(D, xh, fn_load_f64(s2 + c)))
            c = c + FN_W
    while c < t.width:
        if mp[c * sm]:
            xs = (sload(xp + c * sx, ki) - t.m[c]) * t.r[c]
            ds = sload(dyp + c * sdy, ki)
            sn[c] += 1.0
            if per_slice:
                s1[c] += ds
                s2[c] += ds * xs
            else:
                gs = (<const double*>(gp + c * sg))[0]
                s1[c] += ds * gs
                s2[c] += ds * gs * xs
                (<double*>(pg + c * sg))[0] += ds * xs
                (<double*>(pb + c * sg))[0] += ds
        c = c + 1


cdef inline bint row_taken(const Grad* g, const Cols* t, const Odometer* row,
                           const unsigned char** mp, Py_ssize_t* rows_on) noexcept nogil:
    """Pass 1's view of a row's where= bytes: false for a row a mask
    constant along the columns leaves out; else true, mp NULL for a whole
    row (counted in rows_on) or the row's bytes."""
    mp[0] = row_mask(g, t, row)
    if mp[0] != NULL and g.L.kept[g.L.n_kept - 1].stride[OP_M] == 0:
        if not mp[0][0]:
            return False
        rows_on[0] = rows_on[0] + 1
        mp[0] = NULL
    return True


cdef inline void add_rows(const Grad* g, const Cols* t, double* sn,
                          Py_ssize_t rows_on) noexcept nogil:
    """The whole rows a block took (row_taken) into each column's count."""
    cdef Py_ssize_t c
    if rows_on > 0:
        for c in range(t.width):
            sn[c] += <double>rows_on


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
    cdef const unsigned char* mp
    cdef Py_ssize_t rows_on
    for grp in range(g.n_groups):
        sa = start_group(g, blk, grp, &t, &row)
        sb = sa + g.sstride
        rows_on = 0
        for k in range(nr):
            if not row_taken(g, &t, &row, &mp, &rows_on):
                odo_next(&row, L.red, L.n_red)
                continue
            xp = L.base[OP_X] + col_off(L, &t, &row, OP_X)
            dyp = L.base[OP_DY] + col_off(L, &t, &row, OP_DY)
            go = col_off(L, &t, &row, OP_G)
            gp = g.gamma + go
            pg = <char*>part + g.gshift + go
            pb = <char*>(part + g.pstride) + g.gshift + go
            if mp != NULL:
                selected_row_sums(g, &t, xp, dyp, gp, pg, pb, mp, sa, sb, sa + 2 * g.sstride,
                                  False, ki)
                odo_next(&row, L.red, L.n_red)
                continue
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
        add_rows(g, &t, sa + 2 * g.sstride, rows_on)


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
    cdef Py_ssize_t k, due = 0
    cdef int v
    for v in range(FN_NVC):
        a1[v] = fn_zero()
        a2[v] = fn_zero()
        mv[v] = fn_load_f64(m + v * FN_W)
    for k in range(nrows):
        # The strip's share of the next sweep spread over its rows, a line
        # of each stream at a time: all at once, before the rows, held up
        # their own reads (float64, docs/design.md).
        due = due + px.share
        while due >= nrows:
            ahead_lines(&pd, 1)
            ahead_lines(&px, 1)
            due = due - nrows
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
            or vec.stride[OP_DY] != sizeof(in_t) or L.base[OP_M] != NULL):
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
    cdef const unsigned char* mp
    cdef Py_ssize_t rows_on
    for grp in range(g.n_groups):
        s1 = start_group(g, blk, grp, &t, &row)
        s2 = s1 + g.sstride
        swept = cols_sweeps(g, r0, nr, &t, s1, s2, ki)
        if swept == t.width:
            continue
        rows_on = 0
        for k in range(nr):
            if not row_taken(g, &t, &row, &mp, &rows_on):
                odo_next(&row, L.red, L.n_red)
                continue
            xp = L.base[OP_X] + col_off(L, &t, &row, OP_X)
            dyp = L.base[OP_DY] + col_off(L, &t, &row, OP_DY)
            if mp != NULL:
                selected_row_sums(g, &t, xp, dyp, NULL, NULL, NULL, mp, s1, s2,
                                  s1 + 2 * g.sstride, True, ki)
                odo_next(&row, L.red, L.n_red)
                continue
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
        add_rows(g, &t, s1 + 2 * g.sstride, rows_on)


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
    cdef double a = 0.0, bb = 0.0, gs, n = 0.0
    cdef bint masked = g.L.base[OP_M] != NULL
    cdef Sums acc
    kept_offsets(g.L, si, &s_off, &off)
    if given_sums(g, s_off, &acc, &n):
        if g.slice_param:
            (<double*>(g.dbeta + g.gshift + off))[0] = 0.0
            (<double*>(g.dgamma + g.gshift + off))[0] = 0.0
        cols_scale(g, si, acc.a, acc.b, n)
        return
    for b in range(g.n_blocks):
        a = a + g.sums[b * g.bstride + si]
        bb = bb + g.sums[b * g.bstride + ns + si]
        if masked:
            n = n + g.sums[b * g.bstride + 2 * ns + si]
    if g.slice_param:
        (<double*>(g.dbeta + g.gshift + off))[0] = a
        (<double*>(g.dgamma + g.gshift + off))[0] = bb
        if g.group > 1:
            g.sums[si] = a
            g.sums[ns + si] = bb
            return
        gs = (<const double*>(g.gamma + off))[0]
        a = a * gs
        bb = bb * gs
    acc.a = a
    acc.b = bb
    if not kept_sums(g, s_off, &acc, n):
        cols_scale(g, si, a, bb, n)


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
        cols_scale(g, si, a * gs, bb * gs, 0.0)


cdef inline void cols_scale(const Grad* g, Py_ssize_t si, double a, double bb,
                            double n) noexcept nogil:
    """Column si's coefficients of pass 2 from its slice's A and B (n: with
    where=, its count; a column with none writes no dx)."""
    cdef double inv_n = g.inv_n
    if g.L.base[OP_M] != NULL:
        inv_n = 1.0 / n if n > 0.0 else 0.0
    grad_ab(g.mode, inv_n, a, bb, &g.sums[si], &g.sums[g.sstride + si])


cdef inline int cols_coefs(const Grad* g, Py_ssize_t si, ct* base) noexcept nogil:
    """Column si's folded coefficients for cols_dx (after the folds), into
    base[si], base[ns + si], ... (m, k1, k2, k0; k1 without gamma where
    gamma is one value a row, which cols_dx multiplies in); 1 when ct
    cannot hold them, else 0."""
    cdef Py_ssize_t ns = g.sstride, s_off, g_off
    cdef double r, gr
    cdef ct k[4]
    kept_offsets(g.L, si, &s_off, &g_off)
    r = (<const double*>(g.L.stat[1] + s_off))[0]
    gr = r
    if g.L.kept[g.L.n_kept - 1].stride[OP_G] != 0:
        gr = param_at(g.gamma + g_off)[0] * r
    if not grad_affine((<const double*>(g.L.stat[0] + s_off))[0], r, gr, g.sums[si],
                       g.sums[ns + si], k):
        return 1
    base[si] = k[0]
    base[ns + si] = k[1]
    base[2 * ns + si] = k[2]
    base[3 * ns + si] = k[3]
    return 0


cdef inline Py_ssize_t chunks(Py_ssize_t n) noexcept nogil:
    return (n + FOLD_CHUNK - 1) // FOLD_CHUNK


cdef void cols_fold_chunk(const Grad* g, Py_ssize_t c) noexcept nogil:
    cdef Py_ssize_t si
    for si in range(c * FOLD_CHUNK, min((c + 1) * FOLD_CHUNK, g.L.n_slices)):
        cols_fold(g, si)


cdef Py_ssize_t cols_coefs_chunk(const Grad* g, Py_ssize_t c, in_t* kind) noexcept nogil:
    """cols_coefs of the columns of chunk c; how many did not fit."""
    cdef Py_ssize_t si, n_bad = 0
    for si in range(c * FOLD_CHUNK, min((c + 1) * FOLD_CHUNK, g.L.n_slices)):
        if in_t is float:
            n_bad += cols_coefs(g, si, g.c32)
        else:
            n_bad += cols_coefs(g, si, g.c64)
    return n_bad


cdef inline bint cols_folded_fit(const Grad* g, Py_ssize_t itemsize) noexcept nogil:
    """Whether cols_dx can run from folded per-column coefficients: columns
    contiguous in x, dy and dx, and gamma the same for every row (a gain
    per column) or for every column (a gain per row)."""
    cdef const Layout* L = g.L
    cdef const Axis* vec = &L.kept[L.n_kept - 1]
    cdef int j
    if (vec.stride[OP_X] != itemsize or vec.stride[OP_DY] != itemsize
            or vec.stride[OP_DX] != itemsize):
        return False
    if vec.stride[OP_G] == 0:
        return True
    for j in range(L.n_red):
        if L.red[j].stride[OP_G] != 0:
            return False
    return True


cdef void cols_folded_coefs(Grad* g, in_t* ki) noexcept nogil:
    """Every column's folded coefficients (g.c32 for float32 data, g.c64
    for the others), after the folds; left NULL where the layout does not
    fit, on a failed allocation, or when a column's do not fit the type
    with room to spare (cols_dx then runs the unfolded formula)."""
    cdef Py_ssize_t i, n_bad = 0
    cdef void* buf
    if not cols_folded_fit(g, sizeof(in_t)):
        return
    buf = fn_malloc(4 * g.sstride * (sizeof(float) if in_t is float else sizeof(double)))
    if buf == NULL:
        return
    if in_t is float:
        g.c32 = <float*>buf
    else:
        g.c64 = <double*>buf
    for i in prange(chunks(g.L.n_slices), num_threads=g.R.threads, schedule="static"):
        n_bad += cols_coefs_chunk(g, i, ki)
    if n_bad:
        fn_free(buf)
        g.c32 = NULL
        g.c64 = NULL


cdef void cols_dx(const Grad* g, Py_ssize_t blk, in_t* ki, out_t* ko) noexcept nogil:
    """Pass 2 over one block of rows: dx = r (dy gamma - a - xhat b), from
    the folded coefficients where there are some, else value by value."""
    cdef const Layout* L = g.L
    cdef const Axis* vec = &L.kept[L.n_kept - 1]
    cdef Py_ssize_t r0 = blk * g.per_block, nr = min(g.per_block, L.slice_len - r0)
    cdef Py_ssize_t sx = vec.stride[OP_X], sdy = vec.stride[OP_DY], sg = vec.stride[OP_G]
    cdef Py_ssize_t sdx = vec.stride[OP_DX], ns = g.sstride
    cdef Py_ssize_t grp, k, c
    cdef Cols t
    cdef Odometer row
    cdef const double* ab
    cdef const char* xp
    cdef const char* dyp
    cdef const char* gp
    cdef char* dxp
    cdef const float* kf
    cdef const double* kd
    cdef double grow = 1.0           # a gain per row (cols_coefs)
    cdef const unsigned char* mp
    cdef Py_ssize_t sm = vec.stride[OP_M], rows_on = 0
    for grp in range(g.n_groups):
        cols_of(g, grp, &t)
        ab = g.sums + t.slice0
        odo_init(&row, L.red, L.n_red, r0)
        for k in range(nr):
            if not row_taken(g, &t, &row, &mp, &rows_on):
                odo_next(&row, L.red, L.n_red)
                continue
            xp = L.base[OP_X] + col_off(L, &t, &row, OP_X)
            dyp = L.base[OP_DY] + col_off(L, &t, &row, OP_DY)
            gp = g.gamma + col_off(L, &t, &row, OP_G)
            dxp = L.base[OP_DX] + col_off(L, &t, &row, OP_DX)
            if sg == 0:
                grow = param_at(gp)[0]
            if in_t is float and out_t is float:
                if g.c32 != NULL and (mp == NULL or sm == 1):
                    kf = g.c32 + t.slice0
                    fn_values_f(xp, 1, dxp, 1, dyp, t.width, t.width, kf, kf + 2 * ns, kf + 3 * ns,
                                kf + ns, <float>grow, 0.0, FN_GRAD, g.R.stream, NULL, mp)
                    odo_next(&row, L.red, L.n_red)
                    continue
            if g.c64 != NULL and (mp == NULL or sm == 1):
                kd = g.c64 + t.slice0
                fn_values_d(xp, tcode(ki), dxp, ocode(ko), dyp, t.width, t.width, kd,
                            kd + 2 * ns, kd + 3 * ns, kd + ns, grow, 0.0, FN_GRAD, g.R.stream,
                            NULL, mp)
                odo_next(&row, L.red, L.n_red)
                continue
            for c in range(t.width):
                if mp == NULL or mp[c * sm]:
                    fn_strided_grad(xp + c * sx, 0, dyp + c * sdy, 0, tcode(ki), dxp + c * sdx,
                                    0, ocode(ko), gp + c * sg, 0, 1, t.m[c], t.r[c], ab[c],
                                    ab[ns + c])
            odo_next(&row, L.red, L.n_red)
    fn_sfence()


# ---------------------------------------------------------------------------

cdef int run(Grad* g, in_t* ki, out_t* ko) noexcept nogil:
    """A gradient on its route (WAY_IMAGES, or blocks of slices or rows)."""
    cdef const Layout* L = g.L
    cdef int nthreads
    cdef Py_ssize_t i, n_blocks, min_per_block
    cdef Py_ssize_t units = L.slice_len if L.columns else L.n_slices
    cdef Py_ssize_t per_unit = 2 * g.n_param + ((3 if L.base[OP_M] != NULL else 2) * L.n_slices
                                                 if L.columns else 0)
    g.pstride = spaced(g.n_param)
    g.sstride = spaced(L.n_slices)
    if g.R.way == WAY_IMAGES:
        return images_run(g, ki, ko)
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
        g.bstride = (3 if L.base[OP_M] != NULL else 2) * g.sstride
        g.sums = <double*>fn_malloc(g.n_blocks * g.bstride * sizeof(double))
        if g.sums == NULL:
            fn_free(g.partial)
            return -1
    nthreads = min(<Py_ssize_t>g.R.threads, g.n_blocks)
    if L.columns:
        if g.phase != PHASE_DX:
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
        if g.phase != PHASE_SUMS:
            cols_folded_coefs(g, ki)
            for i in prange(g.n_blocks, num_threads=nthreads, schedule="runtime"):
                cols_dx(g, i, ki, ko)
    else:
        if in_t is float and out_t is float:
            if L.red[L.n_red - 1].stride[OP_G] == sizeof(double) and g.n_param <= G32_MAX:
                g.g32 = gamma_f32(g, &g.g32_max)
        # A team of one too: a plain loop would be a second compiled copy of
        # the arithmetic, whose FMA contractions differ (bits by thread count).
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


cdef int run_passes(Grad* g, in_t* ki, out_t* ko) noexcept nogil:
    """The COLUMNS schedule of a gradient with gamma per column: run over
    pieces of the kept axes of at most GRAD_PASS_GROUPS groups each
    (pass_axis), every piece's gradients its own columns' (gamma, dgamma
    and dbeta moved with it), so that the per-column scratch stays within
    the kept blocks."""
    cdef const Layout* L = g.L
    cdef Layout sub             # (6 KiB; a pass's recursion is a few deep)
    cdef Grad piece
    cdef Py_ssize_t step, start = 0, size, shift
    cdef int a, rc = 0
    if not (L.columns and g.group == 1 and gamma_per_slice(g)):
        return run(g, ki, ko)
    a = pass_axis(L, GRAD_COL_TILE, GRAD_PASS_GROUPS, &step)
    if a < 0:
        return run(g, ki, ko)
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
        # (the slices' sums given or asked for: the statistics' layout)
        shift = start * L.kept[a].stride[OP_S]
        if g.sa != NULL:
            piece.sa = g.sa + shift
            piece.sb = g.sb + shift
        if g.sn != NULL:
            piece.sn = g.sn + shift
        if a == L.n_kept - 1:
            rc = run(&piece, ki, ko)
        else:
            rc = run_passes(&piece, ki, ko)
        start += size
    return rc


cdef int channels_backward(Grad* g, in_t* ki, out_t* ko) noexcept nogil:
    """WAY_CHANNELS: the gradient of runs of a few values as columns of the
    (outer, channels x inner) matrix (see channels_forward), each channel's
    inner columns one slice (Grad.group); gamma, mean and rstd repeated per
    column, the parameter sums added up per channel."""
    cdef const Layout* L = g.L
    cdef Layout M
    cdef Grad gm = g[0]
    cdef Py_ssize_t inner = L.red[1].size, n_ch = L.kept[0].size, cols = n_ch * inner, ch, j
    cdef double* arrays = <double*>fn_malloc(5 * cols * sizeof(double))
    cdef double sg, sb, v
    cdef int rc
    if arrays == NULL:
        return -1
    cdef Route RM
    channels_matrix(L, &M, sizeof(in_t), sizeof(out_t))
    M.red[0].stride[OP_DY] = M.red[0].stride[OP_X]
    M.kept[0].stride[OP_DY] = M.kept[0].stride[OP_X]
    route_backward(&RM, &M, tcode(ki), g.R.threads, g.R.fresh, True,
                   M.n_slices * M.slice_len * <Py_ssize_t>sizeof(in_t), g.R.out_bytes, True)
    repeat_operand(L, OP_G, arrays)
    repeat_operand(L, OP_S, arrays + cols)
    for ch in range(n_ch):
        v = (<const double*>(L.stat[1] + ch * L.kept[0].stride[OP_S]))[0]
        for j in range(inner):
            arrays[2 * cols + ch * inner + j] = v
    M.base[OP_G] = <char*>arrays
    M.base[OP_S] = M.stat[0] = <char*>(arrays + cols)
    M.stat[1] = <char*>(arrays + 2 * cols)
    gm.L = &M
    gm.R = &RM
    gm.group = inner
    gm.n_param = cols
    gm.gamma = <const char*>arrays
    gm.dgamma = <char*>(arrays + 3 * cols)
    gm.dbeta = <char*>(arrays + 4 * cols)
    gm.gshift = 0
    rc = run(&gm, ki, ko)
    if rc == 0:
        for ch in range(n_ch):
            sg = 0.0
            sb = 0.0
            for j in range(inner):
                sg = sg + arrays[3 * cols + ch * inner + j]
                sb = sb + arrays[4 * cols + ch * inner + j]
            (<double*>(g.dgamma + g.gshift + ch * L.kept[0].stride[OP_G]))[0] = sg
            (<double*>(g.dbeta + g.gshift + ch * L.kept[0].stride[OP_G]))[0] = sb
    fn_free(arrays)
    return rc


cdef int backward_run(Grad* g, in_t* ki, out_t* ko) noexcept nogil:
    if g.R.way == WAY_CHANNELS:
        return channels_backward(g, ki, ko)
    return run_passes(g, ki, ko)


cdef int backward_in(Grad* g, int out_code, in_t* ki) noexcept nogil:
    if out_code == 0:
        return backward_run(g, ki, <half_t*>NULL)
    if out_code == 1:
        return backward_run(g, ki, <float*>NULL)
    return backward_run(g, ki, <double*>NULL)
