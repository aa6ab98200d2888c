/*
 * tuning.h -- every tuning value of the kernels, with one line of why.
 *
 * The planner (plan.pxd) and the schedules read these and nothing else.
 * Two kinds: fixed values (register counts, numerics, data-structure sizes,
 * memory budgets) are macros; values that depend on the machine's caches
 * and cores are fields of fn_tuning, set once at import from what
 * fastnorm/_machine.py detected and derived (the rules are there, one line
 * of why each).  Results never depend on the thread count: the values that
 * cut work into blocks depend on the shape and the machine alone.
 */
#ifndef FASTNORM_TUNING_H
#define FASTNORM_TUNING_H

#include <stddef.h>

/* ---- derived from the machine (fastnorm/_machine.py) --------------- */
typedef struct {
    ptrdiff_t parallel_min;
    ptrdiff_t same_split_bytes;
    ptrdiff_t stats_ahead;
    ptrdiff_t cached_bytes;
    ptrdiff_t cached_row_bytes;
    ptrdiff_t cached_bytes_f64;
    ptrdiff_t cached_row_bytes_f64;
    ptrdiff_t prefetch_bytes;
    ptrdiff_t next_slice_bytes;
    ptrdiff_t run_ahead_bytes;
    ptrdiff_t ahead_f32;
    ptrdiff_t image_run_bytes;
    ptrdiff_t col_block_bytes;
    ptrdiff_t sweep_bytes;
    ptrdiff_t out_chunk;
    ptrdiff_t periodic_bytes;
    ptrdiff_t stream_min_bytes;
    ptrdiff_t paged_grad_rows;
    ptrdiff_t prefetch_fills_l1;
} fn_tuning_t;

/* One per kernel module (each level is one translation unit); zero until
 * the module's import sets it, and the module never runs a call before. */
static fn_tuning_t fn_tuning;

#define FN_PARALLEL_MIN (fn_tuning.parallel_min)
#define FN_SAME_SPLIT_BYTES (fn_tuning.same_split_bytes)
#define FN_STATS_AHEAD (fn_tuning.stats_ahead)
#define FN_CACHED_BYTES (fn_tuning.cached_bytes)
#define FN_CACHED_ROW_BYTES (fn_tuning.cached_row_bytes)
#define FN_CACHED_BYTES_F64 (fn_tuning.cached_bytes_f64)
#define FN_CACHED_ROW_BYTES_F64 (fn_tuning.cached_row_bytes_f64)
#define FN_PREFETCH_BYTES (fn_tuning.prefetch_bytes)
#define FN_NEXT_SLICE_BYTES (fn_tuning.next_slice_bytes)
#define FN_RUN_AHEAD_BYTES (fn_tuning.run_ahead_bytes)
#define FN_HAND_ON_BYTES (fn_tuning.run_ahead_bytes)
#define FN_AHEAD_F32 (fn_tuning.ahead_f32)
#define FN_IMAGE_RUN_BYTES (fn_tuning.image_run_bytes)
#define FN_COL_BLOCK_BYTES (fn_tuning.col_block_bytes)
#define FN_SWEEP_BYTES (fn_tuning.sweep_bytes)
#define FN_OUT_CHUNK (fn_tuning.out_chunk)
#define FN_PERIODIC_BYTES (fn_tuning.periodic_bytes)
#define FN_STREAM_MIN_BYTES (fn_tuning.stream_min_bytes)
#define FN_PAGED_GRAD_ROWS (fn_tuning.paged_grad_rows)
#define FN_PREFETCH_FILLS_L1 (fn_tuning.prefetch_fills_l1)

/* ---- vector registers ---------------------------------------------- */
/* Independent accumulators per Welford run: hide the sub -> fma latency. */
#define FN_NV 8
/* Vectors of columns a sweep keeps in registers (3 live vectors each). */
#if defined(__AVX512F__)
#define FN_NVC 4
#else
#define FN_NVC 2
#endif

/* ---- statistics ---------------------------------------------------- */
/* Grouped rows of up to this many vectors are summed side by side, a
 * chain per row (the rows hide each other's latency); longer ones one at a
 * time in FN_ROW_ACCS chains, whose sum at the row's end they outweigh. */
#define FN_SIDE_ROW_VECTORS 16
#define FN_ROW_ACCS 4
#if FN_SIDE_ROW_VECTORS < FN_ROW_ACCS
#error "a row summed one at a time starts its FN_ROW_ACCS chains from its first vectors"
#endif
/* Values per Welford block along a run: the work item when a few long
 * slices are split across threads. */
#define FN_CHUNK 4096
/* Rows of a column's shifted sums under a where= mask that varies along the
 * columns, before they join its moments: log2(65) = 6 bits cancelled at
 * most (the sums are about the column's mean so far), two divisions. */
#define FN_MASK_ROWS 64
/* A where= mask along a run is read in pieces of this many bytes: whole
 * pieces selected join the ordinary loops, the others take shifted sums
 * lane by lane (at most log2(257) = 8 bits of float64's 53 cancelled;
 * float64 data: 64, 6 bits), each piece one merge. */
#define FN_MASK_PIECE 256
#define FN_MASK_PIECE_F64 64
/* ...and a piece that starts with this many values or more selected (or
 * left out) takes that run as a stretch of its own (or skips it): the
 * edges of padding go to the ordinary loops, not lane by lane. */
#define FN_MASK_RUN_MIN 64
/* Values a piece of a float16/float32 run whose sums leave NaN out
 * (nan_policy="omit"), one merge a piece: log2(4097) = 12 bits cancelled
 * at most, of the 29 float64 holds beyond the data, as an unmasked block. */
#define FN_NUMBERS_PIECE 4096
/* Rows of float16/float32 column sums before they go into moments: a
 * segment's rounding grows with its length squared. */
#define FN_SUM_ROWS 4096

/* ---- slices -------------------------------------------------------- */
/* Rows of at least this many values are grouped, one vector lane a row;
 * shorter (or strided) slices are copied side by side instead. */
#define FN_SHORT_ROW_MIN 8
/* Rows up to this many bytes are grouped when x comes from memory. */
#define FN_SHORT_ROW_BYTES 1024
/* Bytes of rows per work item in cache, so small calls feed every thread. */
#define FN_CACHED_BATCH_BYTES 32768
/* Slices up to this many values are copied side by side; beyond, the
 * lanes' Welford chain is slower than a slice at a time. */
#define FN_SHORT_SLICE_MAX 64
/* Slices per work item of the grouped ways. */
#define FN_SHORT_BATCH 256
/* Rows from memory taken in turns (the output of one, the statistics of
 * the next): bytes a turn's piece writes, a few cache lines so that a
 * turn's reads and writes are both in flight, many enough vectors to pay
 * for a call's set-up; rows per work item at most (its first row goes
 * alone), and work items per thread at least. */
#define FN_TURN_BYTES 2048
#define FN_TURN_ROWS 32
#define FN_TURN_ITEMS 8
/* Runs of several-run slices from this many values take their statistics
 * a vector of runs at a time. */
#define FN_SHORT_RUN_MIN 16

/* ---- images (slices whose runs interleave: NCHW channels) ---------- */
/* Image blocks of the statistics at most, and the bytes their per-slice
 * moments may take. */
#define FN_IMAGE_BLOCKS 32
#define FN_IMAGE_STATE_BYTES (8 << 20)

/* ---- columns ------------------------------------------------------- */
/* Columns per tile of the forward pass: wider tiles write rows in fewer
 * pieces. */
#define FN_COL_TILE 2048
/* Columns per tile of the gradients, whose tile state lives on the stack. */
#define FN_GRAD_COL_TILE 1024
/* Doubles between arrays placed side by side: arrays 4 KiB apart make the
 * CPU see false dependencies between their loads and stores. */
#define FN_PAD 8
/* Columns per piece of a tile's finish, so that the threads share it. */
#define FN_FINISH_COLS 256
/* Row blocks of the column statistics: ROW_BLOCK_AIM rows or
 * COL_BLOCK_BYTES (derived) of a tile, whichever is more, where that leaves
 * COL_BLOCKS_MIN blocks, and at least ROW_BLOCK_MIN rows; blocks times tiles
 * at most MAX_COL_ITEMS (the scratch memory).  A block's state, 16 bytes a
 * column, is zeroed, written, folded and merged: over ROW_BLOCK_AIM float32
 * rows that is a 64th of what the block reads. */
#define FN_ROW_BLOCK_AIM 256
#define FN_ROW_BLOCK_MIN 64
#define FN_COL_BLOCKS_MIN 16
#define FN_MAX_COL_ITEMS 128
/* Groups (tiles of one outer index) per pass, so that a pass's scratch
 * stays within the kept blocks (scratch.h). */
#define FN_MAX_PASS_GROUPS 32
#define FN_GRAD_PASS_GROUPS 16
/* A column strip prefetches its share of the next sweep a piece before
 * each AHEAD_ROWS of its rows (even: the float sums take rows in pairs). */
#define FN_AHEAD_ROWS 4
#if FN_AHEAD_ROWS % 2
#error "strip_welford's float sums take rows two at a time"
#endif
/* Rows apart in memory are fetched this many rows ahead, rows up to
 * PREFETCH_ROW_MAX bytes (longer ones train the hardware prefetchers). */
#define FN_PREFETCH_ROWS 4
#define FN_PREFETCH_ROW_MAX 16384
/* The output goes OUT_ROWS rows at a time (and OUT_CHUNK columns, derived,
 * at a time). */
#define FN_OUT_ROWS 8
/* Rows of at least this many vectors hold their coefficients along the
 * row; shorter ones would pay the held loop's set-up per row for less work
 * than it saves, and take each vector's coefficients for its own lanes. */
#define FN_ROWS_HELD_VECTORS 3

/* ---- small maps as columns (NCHW with a few values per run) -------- */
/* Values per run up to which a channel's runs are taken as columns of the
 * (N, C * H * W) matrix: run by run they cost more than their values. */
#define FN_INNER_MAX 100
/* Bytes of x per column, at least. */
#define FN_MIN_COLUMN_BYTES 128
/* Per-column arrays (bytes a column) may take an eighth of x, or
 * COLUMN_ARRAYS_MAX whatever x's size. */
#define FN_FORWARD_COLUMN_BYTES 48
#define FN_GRADIENT_COLUMN_BYTES 88
#define FN_COLUMN_ARRAYS_MAX (8 << 20)
/* From this many values per run the image order is faster than the
 * columns for the output and the gradients. */
#define FN_IMAGES_INNER_MIN 16

/* ---- gradients ----------------------------------------------------- */
/* Parameter-sum blocks at most, and the memory they may take. */
#define FN_MAX_BLOCKS 64
#define FN_MAX_PARTIAL_BYTES (32 << 20)
/* Bytes of x in a block of slices, at least: its partial sums cost a
 * fraction of reading it. */
#define FN_SLICE_BLOCK_BYTES (256 << 10)
#define FN_ROWS_PER_BLOCK_MIN 64
/* Rows whose parameter sums share one pass over the partial buffers. */
#define FN_GRAD_ROWS 4
/* Bytes of each row of the next column sweep fetched where the rows lie an
 * L1 way apart: the start of a page, which the hardware prefetchers do not
 * see coming (they follow the rest of the row). */
#define FN_SWEEP_HEAD_BYTES 256
/* Addresses this many bytes apart fall into the same L1 set: one way of
 * the L1 spans a page at most (4 KiB on x86; its caches are indexed by the
 * address within the page). */
#define FN_L1_WAY_BYTES 4096
/* Entries of gamma copied to float32 at most. */
#define FN_G32_MAX (1 << 20)
/* Columns per work item of the folds and coefficients. */
#define FN_FOLD_CHUNK 4096


/* ---- calls --------------------------------------------------------- */
/* A call on fewer bytes of x keeps the GIL: handing it over and taking it
 * back costs about what a few KiB of work does (NumPy's loops keep it
 * under 500 elements too). */
#define FN_GIL_BYTES 4096


/* ---- scratch memory (scratch.h) ------------------------------------ */
/* Blocks of at least KEEP_MIN bytes that a call frees are kept for the
 * next call, KEEP_BLOCKS of them and KEEP_BYTES in all: fresh pages
 * fault on every call. */
#define FN_KEEP_MIN ((size_t)64 << 10)
#define FN_KEEP_BLOCKS 8
#define FN_KEEP_BYTES ((size_t)16 << 20)

#endif /* FASTNORM_TUNING_H */
