# Sweeps of the COLUMNS pattern: a block of rows is read a strip of columns
# at a time, each strip swept down the rows with its accumulators in
# registers.  Only the first strip reads memory; the rows stay in L2 for the
# others.  Meanwhile a cursor prefetches the next sweep's rows, line by line
# in address order (DRAM and the hardware prefetchers like it best), spread
# evenly over the strips.  It asks for L2 (prefetcht1).  On an AMD EPYC
# (1 MiB of L2 a core) L1 had measured better, one thread, time / a copy,
# L2 -> L1: mean_var over axis 0 of (8192, 1024) float32 1.08 -> 1.00 and
# 1.46 -> 1.11, (256, 25088) 1.54 -> 1.31; batch_norm over (65536, 512)
# float32 1.94 -> 1.54 and 1.77 -> 1.58.  On a Xeon (2 MiB of L2 a core),
# with every other fetch ahead of the forward kernels also into L2, L1 ->
# L2: layer_norm over axis 0 of (4096, 4096) float32 1.50 -> 1.35, float64
# 1.62 -> 1.51; batch_norm over (65536, 512) float32 1.33 -> 1.25, float64
# 2.29 -> 2.15; mean_var over axis 0 of (8192, 1024) float64 0.51 -> 0.43;
# the rest within noise.  (The gradients' sweeps: no change either way.)

from _simd cimport fn_prefetch_l2


cdef struct Ahead:
    # Where the prefetch of the next sweep stands.
    const char* row           # the row being prefetched
    Py_ssize_t col            # the next line's byte offset in it
    Py_ssize_t width          # bytes to prefetch per row
    Py_ssize_t rs             # bytes from row to row
    Py_ssize_t rows           # rows left
    int per_step              # lines per row of the current sweep


cdef inline void ahead_step(Ahead* a) noexcept nogil:
    """Prefetch the next per_step lines (none once the rows are done)."""
    cdef int l
    for l in range(a.per_step):
        if a.rows == 0:
            return
        fn_prefetch_l2(a.row + a.col)
        a.col = a.col + 64
        if a.col >= a.width:
            a.col = 0
            a.row = a.row + a.rs
            a.rows = a.rows - 1


cdef inline void ahead_init(Ahead* a, const char* first, Py_ssize_t width, Py_ssize_t rs,
                            Py_ssize_t rows, Py_ssize_t strips) noexcept nogil:
    """A cursor over `rows` rows of `width` bytes, rs bytes apart, from
    `first` on, to be stepped once per row of each of `strips` strips."""
    a.row = first
    a.col = 0
    a.width = width
    a.rs = rs
    a.rows = rows
    # Lines per step that cover the next sweep by the last strip.
    strips = max(<Py_ssize_t>1, strips)
    a.per_step = <int>(((width + 63) // 64 + strips - 1) // strips)
