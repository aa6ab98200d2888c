# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# The planner: from any call to an access pattern and a route.
#
# A call is a set of operands that share x's shape (x, the output y, gamma,
# beta, and the per-slice statistics), each with its own byte strides; axes
# where an operand has size 1 get stride 0, so parameters and statistics in
# keepdims layout broadcast for free.  The planner drops size-1 axes, turns
# negative strides of x around, orders axes by x's stride (largest first) and
# coalesces neighbours whose strides chain for every operand.  What is left
# is split into kept axes (one statistic each) and reduced axes, both ordered
# outer -> inner:
#
#   SLICES   the innermost axis is reduced: each slice is a set of runs along
#            that axis (rows: layer norm on C order; with kept axes between
#            reduced ones it is batch norm on NCHW; any strides otherwise).
#   COLUMNS  the innermost axis is kept: the Welford update is vectorized
#            across it, one row of the reduced axes at a time (batch norm on
#            (N, C) and NHWC, layer norm over axis 0, F-ordered input).
#
# Every tuning value the kernels use is in tuning.h, declared here: fixed
# ones as constants, the machine's as fields of fn_tuning.

cimport numpy as cnp
from libc.string cimport memcpy, memmove

from simd cimport FN_HAVE_F32, FN_W, FN_WF

cdef extern from "tuning.h":
    enum:
        FN_NV "FN_NV"
        FN_NVC "FN_NVC"
        ROW_ACCS "FN_ROW_ACCS"
        SIDE_ROW_VECTORS "FN_SIDE_ROW_VECTORS"
        CHUNK "FN_CHUNK"
        SUM_ROWS "FN_SUM_ROWS"
        SHORT_ROW_MIN "FN_SHORT_ROW_MIN"
        SHORT_ROW_BYTES "FN_SHORT_ROW_BYTES"
        GIL_BYTES "FN_GIL_BYTES"
        CACHED_BATCH_BYTES "FN_CACHED_BATCH_BYTES"
        SHORT_SLICE_MAX "FN_SHORT_SLICE_MAX"
        SHORT_BATCH "FN_SHORT_BATCH"
        TURN_BYTES "FN_TURN_BYTES"
        TURN_ROWS "FN_TURN_ROWS"
        TURN_ITEMS "FN_TURN_ITEMS"
        SHORT_RUN_MIN "FN_SHORT_RUN_MIN"
        IMAGE_BLOCKS "FN_IMAGE_BLOCKS"
        IMAGE_STATE_BYTES "FN_IMAGE_STATE_BYTES"
        COL_TILE "FN_COL_TILE"
        GRAD_COL_TILE "FN_GRAD_COL_TILE"
        PAD "FN_PAD"
        FINISH_COLS "FN_FINISH_COLS"
        ROW_BLOCK_AIM "FN_ROW_BLOCK_AIM"
        ROW_BLOCK_MIN "FN_ROW_BLOCK_MIN"
        COL_BLOCKS_MIN "FN_COL_BLOCKS_MIN"
        MAX_COL_ITEMS "FN_MAX_COL_ITEMS"
        MAX_PASS_GROUPS "FN_MAX_PASS_GROUPS"
        GRAD_PASS_GROUPS "FN_GRAD_PASS_GROUPS"
        AHEAD_ROWS "FN_AHEAD_ROWS"
        PREFETCH_ROWS "FN_PREFETCH_ROWS"
        PREFETCH_ROW_MAX "FN_PREFETCH_ROW_MAX"
        OUT_ROWS "FN_OUT_ROWS"
        INNER_MAX "FN_INNER_MAX"
        MIN_COLUMN_BYTES "FN_MIN_COLUMN_BYTES"
        FORWARD_COLUMN_BYTES "FN_FORWARD_COLUMN_BYTES"
        GRADIENT_COLUMN_BYTES "FN_GRADIENT_COLUMN_BYTES"
        COLUMN_ARRAYS_MAX "FN_COLUMN_ARRAYS_MAX"
        IMAGES_INNER_MIN "FN_IMAGES_INNER_MIN"
        MAX_BLOCKS "FN_MAX_BLOCKS"
        MAX_PARTIAL_BYTES "FN_MAX_PARTIAL_BYTES"
        SLICE_BLOCK_BYTES "FN_SLICE_BLOCK_BYTES"
        ROWS_PER_BLOCK_MIN "FN_ROWS_PER_BLOCK_MIN"
        GRAD_ROWS "FN_GRAD_ROWS"
        L1_WAY_BYTES "FN_L1_WAY_BYTES"
        SWEEP_HEAD_BYTES "FN_SWEEP_HEAD_BYTES"
        G32_MAX "FN_G32_MAX"
        FOLD_CHUNK "FN_FOLD_CHUNK"
        MASK_ROWS "FN_MASK_ROWS"
        MASK_PIECE "FN_MASK_PIECE"
        MASK_PIECE_F64 "FN_MASK_PIECE_F64"
        NUMBERS_PIECE "FN_NUMBERS_PIECE"
        MASK_RUN_MIN "FN_MASK_RUN_MIN"

# The values derived from the machine's caches and cores (fastnorm/_machine.py),
# set once as a kernel module is imported (kernels.pyx: set_tuning).
cdef extern from "tuning.h" nogil:
    ctypedef struct fn_tuning_t:
        Py_ssize_t parallel_min
        Py_ssize_t same_split_bytes
        Py_ssize_t stats_ahead
        Py_ssize_t cached_bytes
        Py_ssize_t cached_row_bytes
        Py_ssize_t cached_bytes_f64
        Py_ssize_t cached_row_bytes_f64
        Py_ssize_t prefetch_bytes
        Py_ssize_t next_slice_bytes
        Py_ssize_t run_ahead_bytes
        Py_ssize_t ahead_f32
        Py_ssize_t image_run_bytes
        Py_ssize_t col_block_bytes
        Py_ssize_t sweep_bytes
        Py_ssize_t out_chunk
        Py_ssize_t periodic_bytes
        Py_ssize_t stream_min_bytes
        Py_ssize_t paged_grad_rows
        Py_ssize_t prefetch_fills_l1
    fn_tuning_t fn_tuning
    Py_ssize_t PARALLEL_MIN "FN_PARALLEL_MIN"
    Py_ssize_t SAME_SPLIT_BYTES "FN_SAME_SPLIT_BYTES"
    Py_ssize_t STATS_AHEAD "FN_STATS_AHEAD"
    Py_ssize_t CACHED_BYTES "FN_CACHED_BYTES"
    Py_ssize_t CACHED_ROW_BYTES "FN_CACHED_ROW_BYTES"
    Py_ssize_t CACHED_BYTES_F64 "FN_CACHED_BYTES_F64"
    Py_ssize_t CACHED_ROW_BYTES_F64 "FN_CACHED_ROW_BYTES_F64"
    Py_ssize_t PREFETCH_BYTES "FN_PREFETCH_BYTES"
    Py_ssize_t NEXT_SLICE_BYTES "FN_NEXT_SLICE_BYTES"
    Py_ssize_t RUN_AHEAD_BYTES "FN_RUN_AHEAD_BYTES"
    Py_ssize_t HAND_ON_BYTES "FN_HAND_ON_BYTES"
    Py_ssize_t AHEAD_F32 "FN_AHEAD_F32"
    Py_ssize_t IMAGE_RUN_BYTES "FN_IMAGE_RUN_BYTES"
    Py_ssize_t COL_BLOCK_BYTES "FN_COL_BLOCK_BYTES"
    Py_ssize_t SWEEP_BYTES "FN_SWEEP_BYTES"
    Py_ssize_t OUT_CHUNK "FN_OUT_CHUNK"
    Py_ssize_t PERIODIC_BYTES "FN_PERIODIC_BYTES"
    Py_ssize_t STREAM_MIN_BYTES "FN_STREAM_MIN_BYTES"
    Py_ssize_t PAGED_GRAD_ROWS "FN_PAGED_GRAD_ROWS"
    bint PREFETCH_FILLS_L1 "FN_PREFETCH_FILLS_L1"

cdef extern from "simd.h" nogil:
    void fn_set_schedule(int same_split, int guided)


cdef inline void schedule_for(Py_ssize_t x_bytes, bint guided) noexcept nogil:
    """Set the schedule of this thread's next parallel loops for a call on
    x_bytes bytes of x: static up to SAME_SPLIT_BYTES (each thread finds its
    part where it left it), else guided, or one item at a time (dynamic)."""
    fn_set_schedule(x_bytes <= SAME_SPLIT_BYTES, guided)

cdef enum:
    # what a forward call computes
    MODE_STATS = 0       # per-slice mean and M2 only (mean_var)
    MODE_CENTER = 1      # statistics, then y = (x - mean) * rstd * gamma + beta
    MODE_RMS = 2         # statistics, then y = x * rstd * gamma (+ beta), rstd from mean(x**2)
    MODE_GIVEN = 3       # no statistics: mean and rstd are inputs (batch norm eval)

cdef enum:
    # what a gradient computes
    GRAD_CENTER = 0      # dx = r (gd - A/n - xhat B/n), A = sum(gd), B = sum(gd xhat)
    GRAD_RMS = 1         # the same with mean 0 and A = 0
    GRAD_SCALE = 2       # dx = r gd (batch norm in eval mode)

cdef enum:
    MAX_DIMS = 64
    N_OPS = 6
    OP_X = 0      # input
    OP_Y = 1      # output
    OP_G = 2      # gamma (float64)
    OP_B = 3      # beta (float64)
    OP_S = 4      # per-slice statistics (float64 arrays, same strides)
    OP_M = 5      # where= mask (bytes, nonzero: selected); absent for unmasked calls
    N_STATS = 4   # statistics arrays on OP_S: three of a call's, then a count


cdef struct Axis:
    Py_ssize_t size
    Py_ssize_t stride[N_OPS]


cdef struct Layout:
    char* base[N_OPS]
    char* stat[N_STATS]        # per-slice statistics arrays sharing the
                               # OP_S strides (base[OP_S] == stat[0]); NULL if absent
    int n_kept
    int n_red
    bint columns               # the innermost axis is kept (COLUMNS)
    int omit                   # statistics leave NaN out (nan_policy="omit"):
                               # a value counts where selected and a number
                               # (2: the selected slices hold a NaN: their
                               # runs go straight to numbers_run)
    Py_ssize_t n_slices        # product of the kept sizes
    Py_ssize_t slice_len       # product of the reduced sizes
    Axis kept[MAX_DIMS]        # outer -> inner
    Axis red[MAX_DIMS]         # outer -> inner; never empty


cdef struct Odometer:
    # Walks a list of axes in C order, keeping each operand's byte offset.
    Py_ssize_t idx[MAX_DIMS]
    Py_ssize_t off[N_OPS]


cdef inline void odo_init(Odometer* o, const Axis* axes, int n, Py_ssize_t flat) noexcept nogil:
    cdef int a, k
    cdef Py_ssize_t i
    for k in range(N_OPS):
        o.off[k] = 0
    for a in range(n - 1, -1, -1):
        # The index within one axis (a row of a 2-d array) needs no division
        # (two per row drew a tenth of the samples of layer_norm on rows in
        # cache).
        if flat < axes[a].size:
            i = flat
            flat = 0
        else:
            i = flat % axes[a].size
            flat = flat // axes[a].size
        o.idx[a] = i
        for k in range(N_OPS):
            o.off[k] += i * axes[a].stride[k]


cdef inline void odo_next(Odometer* o, const Axis* axes, int n) noexcept nogil:
    cdef int a = n - 1, k
    while a >= 0:
        o.idx[a] += 1
        for k in range(N_OPS):
            o.off[k] += axes[a].stride[k]
        if o.idx[a] < axes[a].size:
            return
        for k in range(N_OPS):
            o.off[k] -= axes[a].size * axes[a].stride[k]
        o.idx[a] = 0
        a -= 1


cdef inline bint _outer_of(const Axis* a, const Axis* b) noexcept:
    """Whether a goes outside b: larger x stride; stride-0 (broadcast) axes
    go outermost, where they cost nothing."""
    cdef Py_ssize_t sa = a.stride[OP_X], sb = b.stride[OP_X]
    if sa == 0:
        return sb != 0
    if sb == 0:
        return False
    return sa > sb


cdef inline bint _chains(const Axis* outer, const Axis* inner) noexcept:
    cdef int k
    for k in range(N_OPS):
        if outer.stride[k] != inner.size * inner.stride[k]:
            return False
    return True


cdef inline object operand(tuple ops, object mask, int k):
    """Operand k (OP_Y .. OP_M) of make_layout's arguments."""
    return mask if k == OP_M else ops[k - 1]


cdef inline bint way_apart(Py_ssize_t stride) noexcept nogil:
    """Whether rows stride bytes apart all fall into the same L1 sets (a
    multiple of an L1 way apart)."""
    return stride % L1_WAY_BYTES == 0


cdef inline int check_fits(cnp.ndarray x, cnp.ndarray op) except -1:
    """Raise unless op has x's dimensions, each x's size or 1: the strides
    below are read for x's axes (the Python layer shapes every operand so;
    this keeps a wrong one from reading past its shape)."""
    cdef int ax
    if op.ndim != x.ndim:
        raise ValueError(f"fastnorm kernels: an operand of {op.ndim} dimensions "
                         f"for an array of {x.ndim}")
    for ax in range(x.ndim):
        if op.shape[ax] != x.shape[ax] and op.shape[ax] != 1:
            raise ValueError(f"fastnorm kernels: an operand of shape "
                             f"{(<object>op).shape} for an array of shape {(<object>x).shape}")
    return 0


cdef inline int check_like(object first, cnp.ndarray s) except -1:
    """Raise unless statistics array s has the first one's shape and, along
    its axes longer than 1, its strides (it is addressed with the first's)."""
    cdef int ax
    cdef cnp.ndarray s0
    cdef bint same
    if first is None:
        raise ValueError("fastnorm kernels: statistics arrays without the first one")
    s0 = <cnp.ndarray>first
    same = s.ndim == s0.ndim
    if same:
        for ax in range(s0.ndim):
            same = same and s.shape[ax] == s0.shape[ax] and (
                s.shape[ax] == 1 or s.strides[ax] == s0.strides[ax])
    if not same:
        raise ValueError("fastnorm kernels: statistics arrays of different layouts")
    return 0


cdef inline int make_layout(Layout* L, cnp.ndarray x, tuple ops, tuple reduced,
                            count=None, mask=None) except -1:
    """Fill L for x and ops = (y, gamma, beta, s0, s1, s2), any of them None
    (s1 with s0: no statistics written), a per-slice count (masked calls)
    and a where= mask.  Every operand but x has x.ndim dimensions, each
    equal to x's or 1; s1, s2 and count have the strides of s0."""
    cdef Axis dims[MAX_DIMS]
    cdef bint red[MAX_DIMS]
    cdef Axis tmp_axis
    cdef bint tmp_red
    cdef int nd = x.ndim, ax, k, n = 0, i, j
    cdef Py_ssize_t size
    cdef cnp.ndarray op
    cdef object o
    L.base[OP_X] = <char*>cnp.PyArray_DATA(x)
    L.omit = 0
    for k in range(1, N_OPS):
        o = operand(ops, mask, k)
        L.base[k] = NULL if o is None else <char*>cnp.PyArray_DATA(o)
        if o is not None:
            check_fits(x, <cnp.ndarray>o)
    for k in range(N_STATS):
        o = count if k == 3 else ops[3 + k]
        L.stat[k] = NULL if o is None else <char*>cnp.PyArray_DATA(o)
        if k > 0 and o is not None:
            check_like(ops[3], <cnp.ndarray>o)

    for ax in range(nd):
        size = x.shape[ax]
        if size == 1:
            continue
        dims[n].size = size
        dims[n].stride[OP_X] = x.strides[ax]
        for k in range(1, N_OPS):
            o = operand(ops, mask, k)
            if o is None:
                dims[n].stride[k] = 0
            else:
                op = <cnp.ndarray>o
                dims[n].stride[k] = 0 if op.shape[ax] == 1 else op.strides[ax]
        red[n] = reduced[ax]
        n += 1

    # Walk negative x strides forwards: the order of a reduction is free,
    # and every operand moves with x, so results land in the same places.
    for i in range(n):
        if dims[i].stride[OP_X] < 0:
            for k in range(N_OPS):
                if L.base[k] != NULL:
                    L.base[k] += (dims[i].size - 1) * dims[i].stride[k]
                if k == OP_S:
                    for j in range(1, N_STATS):
                        if L.stat[j] != NULL:
                            L.stat[j] += (dims[i].size - 1) * dims[i].stride[k]
                dims[i].stride[k] = -dims[i].stride[k]
    L.stat[0] = L.base[OP_S]

    # Stable insertion sort, outermost first.
    for i in range(1, n):
        tmp_axis = dims[i]
        tmp_red = red[i]
        j = i - 1
        while j >= 0 and _outer_of(&tmp_axis, &dims[j]):
            dims[j + 1] = dims[j]
            red[j + 1] = red[j]
            j -= 1
        dims[j + 1] = tmp_axis
        red[j + 1] = tmp_red

    # Coalesce neighbours of the same kind whose strides chain for all operands.
    L.n_kept = 0
    L.n_red = 0
    L.n_slices = 1
    L.slice_len = 1
    i = 0
    while i < n:
        tmp_axis = dims[i]
        while i + 1 < n and red[i + 1] == red[i] and _chains(&tmp_axis, &dims[i + 1]):
            size = tmp_axis.size * dims[i + 1].size
            tmp_axis = dims[i + 1]
            tmp_axis.size = size
            i += 1
        if red[i]:
            L.red[L.n_red] = tmp_axis
            L.n_red += 1
            L.slice_len *= tmp_axis.size
        else:
            L.kept[L.n_kept] = tmp_axis
            L.n_kept += 1
            L.n_slices *= tmp_axis.size
        i += 1

    L.columns = n > 0 and not red[n - 1]
    if L.n_red == 0:
        # Nothing reduced: every slice is a single value.
        L.red[0].size = 1
        for k in range(N_OPS):
            L.red[0].stride[k] = 0
        L.n_red = 1
    return 0


# COLUMNS calls of many groups (a group: a tile of columns of one outer
# slice) go in passes over pieces of their kept axes, so that the scratch a
# pass takes (per-column state, a few hundred bytes a column) stays within
# the kept blocks rather than coming as fresh pages on every call.

cdef inline bint stream_output(const Layout* L, Py_ssize_t nbytes, Py_ssize_t stream_min,
                               bint fresh) noexcept nogil:
    """Whether an output of nbytes is written with non-temporal stores: one
    of stream_min bytes or more, unless it is fresh (just allocated) and
    written in address order (the columns' rows, slices of one run), which
    takes ordinary stores: the pages the kernel hands out were just zeroed,
    most likely through the cache, where ordinary stores find their lines
    and streamed ones write past them.  A fresh output written run by run
    across its pages (slices of several runs: the channels of NCHW images)
    stays streamed."""
    cdef int a
    if nbytes < stream_min:
        return False
    if not fresh:
        return True
    if L.columns:
        return False
    for a in range(L.n_red - 1):
        if L.red[a].size > 1:
            return True
    return False


cdef inline int pass_axis(const Layout* L, Py_ssize_t tile, Py_ssize_t max_groups,
                          Py_ssize_t* step) noexcept nogil:
    """The kept axis of a COLUMNS layout to cut into pieces of `step` indices
    so that a piece holds at most about max_groups groups, or -1 when the
    whole fits one pass: pieces of the columns (whole tiles) while the outer
    slices are at most max_groups, else of the outermost kept axis."""
    cdef int last = L.n_kept - 1
    cdef Py_ssize_t n_cols = L.kept[last].size
    cdef Py_ssize_t n_tiles = (n_cols + tile - 1) // tile
    cdef Py_ssize_t n_outer = L.n_slices // n_cols
    if n_outer * n_tiles <= max_groups:
        return -1
    if n_outer <= max_groups:                   # then n_tiles > 1
        step[0] = max(<Py_ssize_t>1, max_groups // n_outer) * tile
        return last
    # Then axis 0 is an outer one.
    step[0] = max(<Py_ssize_t>1, max_groups // (n_outer // L.kept[0].size * n_tiles))
    return 0


cdef inline Py_ssize_t piece_size(const Layout* L, int a, Py_ssize_t start, Py_ssize_t step,
                                  Py_ssize_t tile) noexcept nogil:
    """Indices of kept axis a in the piece starting at `start`: the last
    piece of the columns takes what remains, so that none is narrow."""
    cdef Py_ssize_t size = L.kept[a].size - start
    if a == L.n_kept - 1 and size < step + tile:
        return size
    return min(size, step)


cdef inline void layout_piece(const Layout* L, Layout* sub, int a, Py_ssize_t start,
                              Py_ssize_t size) noexcept nogil:
    """sub: L restricted to indices start .. start + size of kept axis a (an
    outer axis left with one index dropped)."""
    cdef int k
    memcpy(sub, L, sizeof(Layout))
    sub.kept[a].size = size
    sub.n_slices = L.n_slices // L.kept[a].size * size
    for k in range(N_OPS):
        if L.base[k] != NULL:
            sub.base[k] = L.base[k] + start * L.kept[a].stride[k]
    for k in range(N_STATS):
        if L.stat[k] != NULL:
            sub.stat[k] = L.stat[k] + start * L.kept[a].stride[OP_S]
    if size == 1 and a != L.n_kept - 1:
        memmove(&sub.kept[0], &sub.kept[1], (sub.n_kept - 1) * sizeof(Axis))
        sub.n_kept -= 1


cdef inline int type_code(cnp.ndarray a) except -1:
    """0, 1, 2 for float16, float32, float64 arrays (the kernels' element types)."""
    cdef int t = cnp.PyArray_TYPE(a)
    if t == cnp.NPY_FLOAT16:
        return 0
    if t == cnp.NPY_FLOAT:
        return 1
    if t == cnp.NPY_DOUBLE:
        return 2
    raise TypeError(f"kernel got dtype {a.dtype}")


# ---------------------------------------------------------------------------
# Routes: which schedule a call takes, decided here once (the schedules
# follow the route; explain() reports it).

cdef enum:
    # access patterns
    SLICES = 0        # the innermost axis is reduced
    IMAGES = 1        # slices of several runs that interleave (NCHW channels)
    COLUMNS = 2       # the innermost axis is kept

cdef enum:
    # ways within a pattern
    WAY_ROWS = 0      # short contiguous rows, a vector of rows at a time
    WAY_LANES = 1     # short (or strided) slices, copied side by side
    WAY_WHOLE = 2     # whole slices, one thread each: statistics, then output
    WAY_SPLIT = 3     # a few long slices cut into blocks for the threads
    WAY_IMAGES = 4    # statistics image block by image block, output image by image
    WAY_CHANNELS = 5  # runs of a few values: columns of the (outer, channels x inner) matrix
    WAY_TILES = 6     # tiles of columns times blocks of rows
    WAY_TURNS = 7     # single runs from memory, a block of them a thread: the
                      # output of one and the statistics of the next in turns


cdef struct Route:
    int pattern
    int way
    int threads
    bint stream          # the output is written around the caches
    bint descend         # ...from its last slice down (a fresh y written run by run)
    bint fault_in        # ...its pages faulted in by the threads first
    bint guided          # large calls share work as threads come free (else dynamic)
    bint f32             # runs are written in float32 arithmetic (apply.h)
    bint g_table         # ...with gamma along the run as a float table (else one value a run)
    bint b_table         # ...and beta
    bint rows_out        # (ROWS) rows that follow each other are written as one run
    bint in_cache        # x and y fit the caches: the grouped rows fetch nothing ahead
    bint short_runs      # (WHOLE) statistics of several short runs a vector of runs at a time
    bint flat            # (SLICES) each slice of several runs is one block of x: its
                         # statistics as one run (the runs differ in gain or bias)
    bint runs_out        # ...and its short runs written as rows, one call a slice
    bint images_out      # (CHANNELS) the output image by image, else as columns
    bint fold            # (TILES) gain and bias the same for every row: folded
                         # into the columns' coefficients
    bint fresh           # the output was just allocated
    bint cold            # x is read from memory whatever its size (a stream's
                         # chunk, read once): fetched ahead, never taken as cached
    Py_ssize_t out_bytes # the output's size
    Py_ssize_t row_max   # (ROWS) the longest rows, bytes
    Py_ssize_t batch     # (ROWS, LANES) slices per work item; (gradients, ROWS)
                         # rows read side by side
    Py_ssize_t inner     # (CHANNELS) values per run


cdef inline bint same_for_all(const Layout* L, int k) noexcept nogil:
    """Whether operand k is the same for every slice."""
    cdef int j
    for j in range(L.n_kept):
        if L.kept[j].stride[k] != 0:
            return False
    return True


cdef inline bint slice_is_block(const Layout* L, int k, Py_ssize_t size) noexcept nogil:
    """Whether each slice of operand k (elements of `size` bytes) is one
    block of memory, its reduced axes in C order."""
    cdef Py_ssize_t extent = size
    cdef int a
    for a in range(L.n_red - 1, -1, -1):
        if L.red[a].stride[k] != extent:
            return False
        extent = extent * L.red[a].size
    return True


cdef inline bint c_block(const Layout* L, int k, Py_ssize_t size) noexcept nogil:
    """Whether operand k (elements of `size` bytes) is one C-ordered block
    of (outer, kept, inner) axes, the kept ones between two reduced ones:
    a matrix of (outer) rows of (kept x inner) columns."""
    return (L.n_red == 2 and L.n_kept == 1 and L.red[1].stride[k] == size
            and L.kept[0].stride[k] == L.red[1].size * size
            and L.red[0].stride[k] == L.kept[0].size * L.kept[0].stride[k])


cdef inline bint channels_fit(const Layout* L, Py_ssize_t isz, Py_ssize_t column_bytes,
                              Py_ssize_t x_bytes, int op, Py_ssize_t osz) noexcept nogil:
    """Whether a call of runs of at most INNER_MAX values takes its runs as
    columns (WAY_CHANNELS): x (and operand op, if not -1, of elements of osz
    bytes) one C block, enough rows for each column, and the per-column
    arrays (column_bytes a column) within an eighth of x or
    COLUMN_ARRAYS_MAX."""
    cdef Py_ssize_t inner, cols
    if not c_block(L, OP_X, isz) or (op >= 0 and not c_block(L, op, osz)):
        return False
    inner = L.red[1].size
    cols = L.kept[0].size * inner
    if not (1 < inner <= INNER_MAX and L.red[0].size * isz >= MIN_COLUMN_BYTES):
        return False
    if L.red[0].stride[OP_G] != 0 or L.red[1].stride[OP_G] != 0:
        return False
    return cols * column_bytes <= max(<Py_ssize_t>COLUMN_ARRAYS_MAX, x_bytes // 8)


cdef inline bint images_fit(const Layout* L, int ops_mask, int params_mask, Py_ssize_t isz,
                            Py_ssize_t min_run) noexcept nogil:
    """Whether slices of several runs interleave (run r of slice s + 1 starts
    where run r of slice s ends) in every operand of ops_mask (bits by
    operand), runs of min_run to IMAGE_RUN_BYTES / isz contiguous values,
    the operands of params_mask one value per slice: the channels of NCHW
    images."""
    cdef Py_ssize_t run_len, run_bytes
    cdef int a, k
    if L.columns or L.n_kept != 1 or L.n_red < 2:
        return False
    run_len = L.red[L.n_red - 1].size
    run_bytes = run_len * isz
    if run_len < min_run or run_bytes > IMAGE_RUN_BYTES:
        return False
    for k in range(N_OPS):
        if ops_mask & (1 << k) and (L.red[L.n_red - 1].stride[k] != isz
                                     or L.kept[0].stride[k] != run_bytes):
            return False
    for a in range(L.n_red):
        for k in range(N_OPS):
            if params_mask & (1 << k) and L.red[a].stride[k] != 0:
                return False
    return True


cdef inline void route_init(Route* R, const Layout* L, int nthreads, bint fresh,
                            Py_ssize_t out_bytes) noexcept nogil:
    """A route with the facts every call shares and nothing chosen yet."""
    R.threads = 1 if L.n_slices * L.slice_len < PARALLEL_MIN else nthreads
    R.stream = R.descend = R.fault_in = R.guided = False
    R.f32 = R.g_table = R.b_table = R.rows_out = R.in_cache = False
    R.short_runs = R.images_out = R.fold = R.flat = R.runs_out = False
    R.row_max = R.batch = R.inner = 0
    R.fresh = fresh
    R.cold = False
    R.out_bytes = out_bytes


cdef inline Py_ssize_t code_size(int t) noexcept nogil:
    """Bytes of an element of type code t (0, 1, 2: float16/32/64)."""
    return 2 if t == 0 else (4 if t == 1 else 8)


cdef inline int route_forward(Route* R, const Layout* L, int mode, bint has_y, int xt, int yt,
                              int nthreads, bint fresh, bint y_contiguous, Py_ssize_t x_bytes,
                              Py_ssize_t y_bytes, bint cold=False) noexcept nogil:
    """Decide how a forward call runs (xt, yt: the element codes of x and y,
    code_size; cold: Route.cold)."""
    cdef Py_ssize_t isz = code_size(xt), run_len, n_runs = 1, row_bytes
    cdef Py_ssize_t cached_bytes, cached_row, stat_bytes
    cdef const Axis* inner
    cdef bint contiguous, f32, masked = L.base[OP_M] != NULL
    cdef int a
    route_init(R, L, nthreads, fresh, y_bytes)
    R.cold = cold
    # where=: along slices only the schedules that walk runs one by one take
    # a mask (the whole slice or its blocks); columns, the tiles.
    R.stream = has_y and stream_output(L, y_bytes, STREAM_MIN_BYTES, fresh)
    R.descend = R.stream and fresh
    R.fault_in = R.descend and R.threads > 1 and y_contiguous
    R.guided = True
    R.row_max = SHORT_ROW_BYTES
    R.batch = SHORT_BATCH
    if L.columns:
        R.pattern = COLUMNS
        R.way = WAY_TILES
        R.fold = True
        for a in range(L.n_red):
            if L.red[a].stride[OP_G] != 0 or L.red[a].stride[OP_B] != 0:
                R.fold = False
        # The float32 pass, with gain and bias folded or one value a row.
        inner = &L.kept[L.n_kept - 1]
        R.f32 = (FN_HAVE_F32 and has_y and xt == 1 and yt == 1 and inner.stride[OP_X] == 4
                 and inner.stride[OP_Y] == 4
                 and (R.fold or (inner.stride[OP_G] == 0 and inner.stride[OP_B] == 0)))
        return 0
    # Runs of a few values, their channels a block between reduced axes:
    # statistics of float16/float32 data (exact as column means), or any
    # data's output with the statistics given, go as columns.
    if (not masked and mode != MODE_RMS and (xt != 2 or mode == MODE_GIVEN)
            and channels_fit(L, isz, FORWARD_COLUMN_BYTES, x_bytes, OP_Y if has_y else -1,
                             code_size(yt))):
        R.images_out = (has_y and xt == yt and xt != 0 and L.red[0].size > 1
                        and L.red[1].size >= IMAGES_INNER_MIN)
        if not (mode == MODE_GIVEN and R.images_out):
            R.pattern = IMAGES
            R.way = WAY_CHANNELS
            R.inner = L.red[1].size
            R.descend = R.fault_in = False
            return 0
    inner = &L.red[L.n_red - 1]
    run_len = inner.size
    for a in range(L.n_red - 1):
        n_runs *= L.red[a].size
    row_bytes = run_len * isz
    contiguous = inner.stride[OP_X] == isz
    # float32 in and out, contiguous runs, gain and bias each one value a
    # run or a table along it shared by every slice: the float32 pass.
    if FN_HAVE_F32 and has_y and xt == 1 and yt == 1 and contiguous and inner.stride[OP_Y] == 4:
        f32 = True
        for a in range(OP_G, OP_B + 1):
            if inner.stride[a] != 0 and not (inner.stride[a] == 8 and L.n_red == 1
                                             and same_for_all(L, a)):
                f32 = False
        R.f32 = f32
        R.g_table = f32 and inner.stride[OP_G] != 0
        R.b_table = f32 and inner.stride[OP_B] != 0
    # Runs that differ only in gain or bias (channels of a group): the
    # slice's statistics go as one run, the runs' output one call a slice.
    R.flat = not masked and n_runs > 1 and slice_is_block(L, OP_X, isz)
    R.runs_out = (R.flat and has_y and xt == yt and xt != 0 and slice_is_block(L, OP_Y, isz)
                  and inner.stride[OP_G] == 0 and inner.stride[OP_B] == 0
                  and row_bytes <= SHORT_ROW_BYTES and not R.descend
                  and (FN_WF <= 2 * run_len if xt == 1 else FN_W <= 2 * run_len)
                  and (xt == 2 or R.f32))
    stat_bytes = L.slice_len * isz if R.flat else row_bytes
    cached_bytes = CACHED_BYTES_F64 if xt == 2 else CACHED_BYTES
    cached_row = CACHED_ROW_BYTES_F64 if xt == 2 else CACHED_ROW_BYTES
    # x and y, all the call reads and writes, fit the caches: rows grouped.
    # So are float16/float32 rows whose statistics are all the call does,
    # read from memory: each row one stream fetched ahead step by step
    # (run_deviations), the lanes of FN_W rows summed together, where row by
    # row each row's sums and finish held up the reads.
    R.in_cache = (not cold and (n_runs == 1 or R.flat)
                  and L.n_slices * stat_bytes + y_bytes <= cached_bytes)
    if R.in_cache or (not has_y and xt != 2 and n_runs == 1 and contiguous):
        R.row_max = cached_row
        # whole groups of FN_W rows (a group of fewer costs as much)
        R.batch = min(<Py_ssize_t>SHORT_BATCH,
                      max(<Py_ssize_t>FN_W, CACHED_BATCH_BYTES // stat_bytes // FN_W * FN_W))
    R.short_runs = (not masked and n_runs > 1 and not R.flat and mode != MODE_GIVEN
                    and run_len >= SHORT_RUN_MIN and row_bytes <= SHORT_ROW_BYTES
                    and contiguous)
    # Interleaved slices go image by image (float32 through the float32
    # pass with one gain a slice, float64 in and out).
    if not masked and has_y and n_runs > 1 and xt == yt and (
            (xt == 1 and R.f32 and not R.g_table and not R.b_table and run_len >= FN_WF)
            or (xt == 2 and run_len >= FN_W)) and images_fit(L, (1 << OP_X) | (1 << OP_Y), (1 << OP_G) | (1 << OP_B), isz, 1):
        R.pattern = IMAGES
        R.way = WAY_IMAGES
        return 0
    R.pattern = SLICES
    if masked:
        R.way = WAY_WHOLE if R.threads <= 1 or L.n_slices >= 2 * R.threads else WAY_SPLIT
    elif ((n_runs == 1 or R.flat) and L.slice_len >= SHORT_ROW_MIN
          and stat_bytes <= R.row_max and contiguous):
        R.way = WAY_ROWS
        # Rows that follow each other, gain and bias the same for every row:
        # one pass over the item's rows (float32 and float64 in and out).
        R.rows_out = (has_y and L.n_kept == 1 and L.n_red == 1 and xt == yt and xt != 0
                      and inner.stride[OP_Y] == isz
                      and L.kept[0].stride[OP_X] == row_bytes
                      and L.kept[0].stride[OP_Y] == row_bytes
                      and same_for_all(L, OP_G) and same_for_all(L, OP_B)
                      and inner.stride[OP_G] in (0, 8) and inner.stride[OP_B] in (0, 8)
                      and (FN_WF <= 2 * run_len if xt == 1 else FN_W <= run_len))
        if xt == 1 and not R.f32:
            R.rows_out = False
    elif (n_runs == 1 or R.flat) and L.slice_len <= SHORT_SLICE_MAX and mode != MODE_GIVEN:
        R.way = WAY_LANES
    elif R.short_runs or R.threads <= 1 or L.n_slices >= 2 * R.threads:
        R.way = WAY_WHOLE
        # Single runs read from memory (x of at least the size from which
        # outputs stream), written upwards by the float32 pass: a
        # slice's statistics read with nothing written, its output writes
        # with nothing read; in turns, both are in flight at once.  (The
        # double pass has its own fetch of the next slice, next_fetch; a
        # run of one piece would take its turns in the order it has.)
        if (n_runs == 1 and contiguous and has_y and mode != MODE_GIVEN and not R.descend
                and R.f32 and x_bytes >= STREAM_MIN_BYTES and row_bytes > TURN_BYTES
                and L.n_slices > 1):
            R.way = WAY_TURNS
            R.batch = max(<Py_ssize_t>2, min(<Py_ssize_t>TURN_ROWS,
                                              L.n_slices // (TURN_ITEMS * R.threads)))
    else:
        R.way = WAY_SPLIT
    return 0


cdef inline int route_backward(Route* R, const Layout* L, int xt, int nthreads, bint fresh,
                               bint dx_contiguous, Py_ssize_t x_bytes, Py_ssize_t dx_bytes,
                               bint both_passes) noexcept nogil:
    """Decide how a gradient runs: x and dy of element code xt, dx of x's
    type in the output slot (OP_Y, absent: no bytes), dy in the bias slot
    (OP_B); both_passes false for one pass of the two (the Dask path)."""
    cdef Py_ssize_t isz = code_size(xt)
    cdef bint masked = L.base[OP_M] != NULL
    route_init(R, L, nthreads, fresh, dx_bytes)
    # where=: dx is written where selected alone (vectors of mixed lanes
    # blend dx's own values back), not streamed.
    R.stream = not masked and stream_output(L, dx_bytes, STREAM_MIN_BYTES, fresh)
    # x, dy and dx, all the call reads and writes, fit the caches
    R.in_cache = 2 * x_bytes + dx_bytes <= (CACHED_BYTES_F64 if xt == 2 else CACHED_BYTES)
    R.fault_in = R.stream and fresh and R.threads > 1 and dx_contiguous
    if L.columns:
        R.pattern = COLUMNS
        R.way = WAY_TILES
        return 0
    # Runs of a few values as columns, up to the run length from which the
    # image order is faster.
    if (not masked and both_passes
            and channels_fit(L, isz, GRADIENT_COLUMN_BYTES, x_bytes, OP_Y, isz)
            and c_block(L, OP_B, isz) and L.red[1].size < IMAGES_INNER_MIN):
        R.pattern = IMAGES
        R.way = WAY_CHANNELS
        R.inner = L.red[1].size
        return 0
    if not masked and images_fit(L, (1 << OP_X) | (1 << OP_B) | ((1 << OP_Y) if dx_bytes else 0),
                                 1 << OP_G, isz, 1):
        R.pattern = IMAGES
        R.way = WAY_IMAGES
        return 0
    R.pattern = SLICES
    R.way = WAY_WHOLE
    # Single contiguous runs along which gamma lies, the same for every
    # slice (layer norm): rows a few at a time share the parameter sums.
    if (not masked and L.n_red == 1 and L.red[0].stride[OP_X] == isz
            and L.red[0].stride[OP_B] == isz
            and L.red[0].stride[OP_G] == 8 and same_for_all(L, OP_G)):
        R.way = WAY_ROWS
        # Rows a multiple of an L1 way apart share their sets: where a whole
        # group of x's and dy's rows fills a set's ways, each line the
        # partial buffers bring there evicts one still being read, and half
        # a group leaves room (PAGED_GRAD_ROWS, from the L1's ways).
        R.batch = GRAD_ROWS
        if L.n_kept > 0 and (way_apart(L.kept[L.n_kept - 1].stride[OP_X])
                             or way_apart(L.kept[L.n_kept - 1].stride[OP_B])):
            R.batch = GRAD_ROWS if PAGED_GRAD_ROWS >= GRAD_ROWS else GRAD_ROWS // 2
    return 0
