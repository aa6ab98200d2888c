# where= on the COLUMNS pattern (SLICES take the mask in their own
# schedules): statistics over the selected values of each column and the
# output at the selected positions alone, x read once for the statistics
# and once for the output, nothing copied: a tile of columns walked row by
# row, each column with its own state.
#
# The selected values of a column come in any pattern, so lanes cannot share
# one count: a slice's values (x - pivot, the pivot as in moments.pxd) go
# into shifted sums of MASK_BLOCK selected values (a subtraction and an FMA a
# value, no division), each block folded into the slice's moments with
# chan.  A block's sums cancel at most log2(MASK_BLOCK + 1) bits (see
# moments.pxd).  Every slice is computed alone, in a fixed order: the thread
# count changes no bit.

cdef struct Block:
    double c        # the block's first value: the sums are of x - c
    double s1
    double s2
    double k        # values in the block


cdef struct MaskedState:
    # One slice (or column) of a masked walk.
    Block b
    Moments acc
    double pivot
    bint started    # the pivot is taken (the first selected value)


cdef inline void state_init(MaskedState* s) noexcept nogil:
    s.b.k = 0.0
    s.b.s1 = 0.0
    s.b.s2 = 0.0
    s.acc = moments_empty()
    s.pivot = 0.0
    s.started = False


cdef inline void block_flush(MaskedState* s) noexcept nogil:
    cdef Moments m
    if s.b.k == 0.0:
        return
    m.n = s.b.k
    m.mean = s.b.c + s.b.s1 / s.b.k
    m.m2 = max(s.b.s2 - s.b.s1 * s.b.s1 / s.b.k, 0.0)
    if s.b.s2 != s.b.s2:
        m.m2 = s.b.s2       # a NaN or inf value: NaN moments, as arithmetic says
    moments_merge(&s.acc, &m)
    s.b.k = 0.0
    s.b.s1 = 0.0
    s.b.s2 = 0.0


cdef inline void state_add(MaskedState* s, double v, in_t* ki) noexcept nogil:
    """One selected value into its slice's state."""
    cdef double u, d
    if not s.started:
        s.pivot = pick_pivot(v, ki)
        s.started = True
    u = v - s.pivot
    if s.b.k == 0.0:
        s.b.c = u
    d = u - s.b.c
    s.b.s1 += d
    s.b.s2 += d * d
    s.b.k += 1.0
    if s.b.k == MASK_BLOCK:
        block_flush(s)


cdef inline Coef state_finish(MaskedState* s, int mode, double eps, const Layout* L,
                              Py_ssize_t off) noexcept nogil:
    """A slice's statistics (with its count) written at byte offset off of
    the stat arrays, and its coefficients.  A slice with no selected value
    is an empty reduction: NaN statistics, and no position to write."""
    block_flush(s)
    if mode == MODE_GIVEN:
        return given(L, off)
    return finish(s.acc, s.pivot, mode, eps, L, off)


cdef struct Affine:
    # A slice's output map ((x - m) * k2 + k0) * g + b (coefs.pxd's affine_d).
    double m
    double k2
    double k0


cdef inline Affine affine_of(Coef c) noexcept nogil:
    cdef Affine a
    affine_d(c, 1.0, 0.0, &a.m, &a.k2, &a.k0)
    return a


cdef inline void masked_out(char* y, double v, const Affine* a, double g, double b,
                            out_t* ko) noexcept nogil:
    """One selected output, the mean in two parts as the double output pass
    takes it."""
    sstore(y, ((v - a.m) * a.k2 + a.k0) * g + b, ko)


cdef int masked_columns(const Layout* L, Py_ssize_t item, int mode, double eps, bint has_y,
                        in_t* ki, out_t* ko) noexcept nogil:
    """COLUMNS: one tile of MASK_TILE columns of one outer slice, every row
    of the reduced axes for the statistics, then again for the output."""
    cdef const Axis* col = &L.kept[L.n_kept - 1]
    cdef Py_ssize_t n_tiles = (col.size + MASK_TILE - 1) // MASK_TILE
    cdef Py_ssize_t c0 = (item % n_tiles) * MASK_TILE
    cdef Py_ssize_t width = min(<Py_ssize_t>MASK_TILE, col.size - c0), ri, j
    cdef MaskedState* st = <MaskedState*>fn_malloc(width * sizeof(MaskedState))
    cdef Affine* coef = <Affine*>fn_malloc(width * sizeof(Affine))
    cdef Odometer o, r
    cdef const char* px
    cdef const char* pm
    cdef const char* pg
    cdef const char* pb
    cdef char* py
    cdef int phase, k
    cdef Py_ssize_t base[N_OPS]
    if st == NULL or coef == NULL:
        fn_free(st)
        fn_free(coef)
        return -1
    odo_init(&o, L.kept, L.n_kept - 1, item // n_tiles)
    for k in range(N_OPS):
        base[k] = o.off[k] + c0 * col.stride[k]
    for j in range(width):
        state_init(&st[j])
    for phase in range(2 if has_y else 1):
        odo_init(&r, L.red, L.n_red, 0)
        for ri in range(L.slice_len):
            px = L.base[OP_X] + base[OP_X] + r.off[OP_X]
            pm = L.base[OP_M] + base[OP_M] + r.off[OP_M]
            if phase == 0:
                for j in range(width if mode != MODE_GIVEN else 0):
                    if pm[j * col.stride[OP_M]]:
                        state_add(&st[j], sload(px + j * col.stride[OP_X], ki), ki)
            else:
                py = L.base[OP_Y] + base[OP_Y] + r.off[OP_Y]
                pg = L.base[OP_G] + base[OP_G] + r.off[OP_G]
                pb = L.base[OP_B] + base[OP_B] + r.off[OP_B]
                for j in range(width):
                    if pm[j * col.stride[OP_M]]:
                        masked_out(py + j * col.stride[OP_Y],
                                   sload(px + j * col.stride[OP_X], ki), &coef[j],
                                   (<const double*>(pg + j * col.stride[OP_G]))[0],
                                   (<const double*>(pb + j * col.stride[OP_B]))[0], ko)
            odo_next(&r, L.red, L.n_red)
        if phase == 0:
            for j in range(width):
                coef[j] = affine_of(state_finish(&st[j], mode, eps, L,
                                                 base[OP_S] + j * col.stride[OP_S]))
    fn_free(st)
    fn_free(coef)
    return 0


cdef Py_ssize_t masked_items(const Layout* L) noexcept nogil:
    """Work items of a masked call on the COLUMNS pattern: tiles of columns."""
    cdef Py_ssize_t cols = L.kept[L.n_kept - 1].size
    return L.n_slices // cols * ((cols + MASK_TILE - 1) // MASK_TILE)


cdef int masked_run(const Layout* L, int nthreads, int mode, double eps, bint has_y,
                    in_t* ki, out_t* ko) noexcept nogil:
    """A forward call with where= on the COLUMNS pattern, tile by tile."""
    cdef Py_ssize_t item, n_items = masked_items(L)
    cdef int failed = 0
    for item in prange(n_items, num_threads=nthreads, schedule="dynamic", chunksize=1):
        failed += masked_columns(L, item, mode, eps, has_y, ki, ko) != 0
    return -1 if failed else 0


# ---------------------------------------------------------------------------
# Gradients over the selected values of columns (backward.pxi's formulas,
# with n, A and B of each column taken over its selection; dx is written at
# the selected positions alone; slices take backward.pxi's own schedule).  The parameter sums go to per-block partial buffers laid
# out like gamma, added up in block order: blocks of items depend on the
# shape alone.

cdef struct MaskedGrad:
    const Layout* L
    int mode
    int phase                 # backward.pxi's PHASE_BOTH, PHASE_SUMS, PHASE_DX
    Py_ssize_t gshift         # bytes from gamma's data to L.base[OP_G]
    Py_ssize_t n_param
    double* partial           # the result: dgamma, then dbeta (n_param each)
    char* sums[3]             # PHASE_SUMS, PHASE_DX: each slice's A, B and n at
                              # the statistics' offsets (OP_S)


cdef inline bint sums_kept(const MaskedGrad* G, Py_ssize_t off, double* acc) noexcept nogil:
    """After pass 1, or instead of it: a slice's A, B, n from or to the
    given arrays; whether pass 2 (dx) follows."""
    cdef int k
    if G.phase == PHASE_BOTH:
        return True
    for k in range(3):
        if G.phase == PHASE_SUMS:
            (<double*>(G.sums[k] + off))[0] = acc[k]
        else:
            acc[k] = (<const double*>(G.sums[k] + off))[0]
    return G.phase == PHASE_DX


cdef inline void grad_value(const MaskedGrad* G, double x, double dy, double g, double m,
                            double r, double* acc, double* pg, in_t* ki) noexcept nogil:
    """Pass 1 for one selected value: A, B, n into acc, the parameter sums
    into pg (dgamma) and pg + n_param (dbeta)."""
    cdef double xhat = (x - m) * r
    acc[0] += dy * g
    acc[1] += dy * g * xhat
    acc[2] += 1.0
    pg[0] += dy * xhat
    pg[G.n_param] += dy


cdef inline double grad_dx(const MaskedGrad* G, double x, double dy, double g, double m,
                           double r, const double* acc) noexcept nogil:
    cdef double xhat = (x - m) * r
    if G.mode == GRAD_SCALE:
        return r * dy * g
    if G.mode == GRAD_RMS:
        return r * (dy * g - xhat * acc[1] / acc[2])
    return r * (dy * g - acc[0] / acc[2] - xhat * acc[1] / acc[2])


cdef int masked_grad_columns(const MaskedGrad* G, Py_ssize_t item, double* part,
                             in_t* ki, out_t* ko) noexcept nogil:
    """COLUMNS: one tile of columns of one outer slice, every row for the
    sums, then again for dx."""
    cdef const Layout* L = G.L
    cdef const Axis* col = &L.kept[L.n_kept - 1]
    cdef Py_ssize_t n_tiles = (col.size + MASK_TILE - 1) // MASK_TILE
    cdef Py_ssize_t c0 = (item % n_tiles) * MASK_TILE
    cdef Py_ssize_t width = min(<Py_ssize_t>MASK_TILE, col.size - c0), ri, j, go
    cdef double* st = <double*>fn_calloc(5 * width, sizeof(double))   # A, B, n, m, r
    cdef bint dx
    cdef Odometer o, r
    cdef const char* px
    cdef const char* pm
    cdef const char* pg
    cdef const char* pd
    cdef char* py
    cdef int phase, k
    cdef Py_ssize_t base[N_OPS]
    if st == NULL:
        return -1
    odo_init(&o, L.kept, L.n_kept - 1, item // n_tiles)
    for k in range(N_OPS):
        base[k] = o.off[k] + c0 * col.stride[k]
    for j in range(width):
        st[5 * j + 3] = (<const double*>(L.stat[0] + base[OP_S] + j * col.stride[OP_S]))[0]
        st[5 * j + 4] = (<const double*>(L.stat[1] + base[OP_S] + j * col.stride[OP_S]))[0]
    for phase in range(2):
        if phase == 0 and G.phase == PHASE_DX:
            continue
        if phase == 1:
            dx = False
            for j in range(width):
                dx = sums_kept(G, base[OP_S] + j * col.stride[OP_S], &st[5 * j])
            if not dx:
                break
        odo_init(&r, L.red, L.n_red, 0)
        for ri in range(L.slice_len):
            px = L.base[OP_X] + base[OP_X] + r.off[OP_X]
            pm = L.base[OP_M] + base[OP_M] + r.off[OP_M]
            pg = L.base[OP_G] + base[OP_G] + r.off[OP_G]
            pd = L.base[OP_DY] + base[OP_DY] + r.off[OP_DY]
            py = L.base[OP_DX] + base[OP_DX] + r.off[OP_DX]
            for j in range(width):
                if not pm[j * col.stride[OP_M]]:
                    continue
                if phase == 0:
                    go = G.gshift + base[OP_G] + r.off[OP_G] + j * col.stride[OP_G]
                    grad_value(G, sload(px + j * col.stride[OP_X], ki),
                               sload(pd + j * col.stride[OP_DY], ki),
                               (<const double*>(pg + j * col.stride[OP_G]))[0],
                               st[5 * j + 3], st[5 * j + 4], &st[5 * j],
                               part + go // <Py_ssize_t>sizeof(double), ki)
                else:
                    sstore(py + j * col.stride[OP_DX],
                           grad_dx(G, sload(px + j * col.stride[OP_X], ki),
                                   sload(pd + j * col.stride[OP_DY], ki),
                                   (<const double*>(pg + j * col.stride[OP_G]))[0],
                                   st[5 * j + 3], st[5 * j + 4], &st[5 * j]), ko)
            odo_next(&r, L.red, L.n_red)
    fn_free(st)
    return 0


cdef int masked_grad_run(const MaskedGrad* G, int nthreads, in_t* ki,
                         out_t* ko) noexcept nogil:
    cdef const Layout* L = G.L
    cdef Py_ssize_t n_items = masked_items(L), blk, item, per, n_blocks, lo, hi, p
    cdef double* part
    cdef double* pb
    cdef int failed = 0
    # Blocks of items, each with its own partial sums: as many as the
    # partial buffers' bound allows (at most MASK_GRAD_BLOCKS).
    n_blocks = MASK_GRAD_PARTIAL_BYTES // (16 * max(G.n_param, 1))
    n_blocks = max(1, min(n_blocks, <Py_ssize_t>MASK_GRAD_BLOCKS, n_items))
    per = (n_items + n_blocks - 1) // n_blocks
    n_blocks = (n_items + per - 1) // per
    part = <double*>fn_calloc(2 * G.n_param * n_blocks, sizeof(double))
    if part == NULL:
        return -1
    for blk in prange(n_blocks, num_threads=nthreads, schedule="dynamic", chunksize=1):
        pb = part + 2 * G.n_param * blk
        lo = blk * per
        hi = min(lo + per, n_items)
        for item in range(lo, hi):
            failed += masked_grad_columns(G, item, pb, ki, ko) != 0
    for blk in range(1, n_blocks):
        pb = part + 2 * G.n_param * blk
        for p in range(2 * G.n_param):
            part[p] += pb[p]
    memcpy(G.partial, part, 2 * G.n_param * sizeof(double))
    fn_free(part)
    return -1 if failed else 0


cdef int masked_grad_in(const MaskedGrad* G, int nthreads, int out_code,
                        in_t* ki) noexcept nogil:
    if out_code == 0:
        return masked_grad_run(G, nthreads, ki, <half_t*>NULL)
    if out_code == 1:
        return masked_grad_run(G, nthreads, ki, <float*>NULL)
    return masked_grad_run(G, nthreads, ki, <double*>NULL)
