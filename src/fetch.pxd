# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# Fetching ahead: the lines the kernels will read next, asked for into L2
# while the current ones are used.  Contiguous statistics fetch a fixed
# distance ahead (STATS_AHEAD); the columns' sweeps move a cursor over the
# next sweep's rows, line by line in address order, shared among the strips.
# Into L2, not L1: on a core with a small L2, fetches into L1 held up the
# reads from memory (docs/design.md).

from simd cimport fn_prefetch_l2, in_t
from plan cimport AHEAD_ROWS, STATS_AHEAD


cdef struct Ahead:
    # Where the prefetch of the next sweep stands.
    const char* row           # the row being prefetched
    Py_ssize_t col            # the next line's byte offset in it
    Py_ssize_t width          # bytes to prefetch per row
    Py_ssize_t rs             # bytes from row to row
    Py_ssize_t rows           # rows left
    Py_ssize_t share          # lines per strip


cdef inline void ahead_lines(Ahead* a, Py_ssize_t n) noexcept nogil:
    """Prefetch the cursor's next n lines (none once the rows are done)."""
    cdef Py_ssize_t l
    if a.rows == 0:
        return
    for l in range(n):
        fn_prefetch_l2(a.row + a.col)
        a.col = a.col + 64
        if a.col >= a.width:
            a.col = 0
            a.row = a.row + a.rs
            a.rows = a.rows - 1
            if a.rows == 0:
                return


cdef inline Py_ssize_t ahead_piece(const Ahead* a, Py_ssize_t nrows) noexcept nogil:
    """Lines a strip of nrows rows prefetches before each AHEAD_ROWS of
    them, its share in all: all before its rows held up the rows' own
    reads on an AVX-512 Xeon, a step per row slowed a Zen 3's rows even
    where it fetched nothing (docs/design.md)."""
    return (a.share * AHEAD_ROWS + nrows - 1) // max(<Py_ssize_t>1, nrows)


cdef inline void ahead_init(Ahead* a, const char* first, Py_ssize_t width, Py_ssize_t rs,
                            Py_ssize_t rows, Py_ssize_t strips) noexcept nogil:
    """A cursor over `rows` rows of `width` bytes, rs bytes apart, from
    `first` on, its lines shared evenly among `strips` strips."""
    a.row = first
    a.col = 0
    a.width = width
    a.rs = rs
    a.rows = rows
    strips = max(<Py_ssize_t>1, strips)
    a.share = ((width + 63) // 64 * rows + strips - 1) // strips


cdef inline Py_ssize_t ahead_steps(const char* x, Py_ssize_t stride, Py_ssize_t steps,
                                   Py_ssize_t step_bytes, const char* ahead_end,
                                   in_t* kind) noexcept nogil:
    """How many of `steps` steps of step_bytes, from x, may fetch the
    step_bytes STATS_AHEAD bytes on, all before ahead_end: the end of what
    the caller knows will be read next (strided data: none)."""
    cdef const char* first = x + STATS_AHEAD
    if stride != sizeof(in_t) or ahead_end == NULL or ahead_end <= first:
        return 0
    return min(steps, (ahead_end - first) // step_bytes)


cdef inline void fetch_lines(const char* p, Py_ssize_t nbytes) noexcept nogil:
    """Ask for the cache lines of nbytes from p, into L2 (see the top of
    this file)."""
    cdef Py_ssize_t off
    for off in range(0, nbytes, 64):
        fn_prefetch_l2(p + off)


cdef inline void fetch_ahead_of(const char* p, Py_ssize_t nbytes, const char* end) noexcept nogil:
    """Fetch the nbytes STATS_AHEAD bytes on from p, those before end."""
    cdef const char* q = p + STATS_AHEAD
    fetch_lines(q, min(nbytes, <Py_ssize_t>(end - q)))


