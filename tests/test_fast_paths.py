"""The float32 normalization pass (float32 data into float32 output along
contiguous runs), case by case: every way it is entered and every way it
hands a slice back to the float64 pass.

Each test compares with a float64 reference on the very same float32
values (tests/reference.py), so only fastnorm's own error is measured.
"""
import numpy as np
import pytest

import fastnorm
from reference import assert_close, ref_layer_norm, ref_mean_var, ref_norm_grads, ref_rms_norm

F32 = np.float32


def _x(shape, offset=0.0, scale=1.0, seed=0):
    rng = np.random.default_rng(seed)
    return (offset + scale * rng.standard_normal(shape)).astype(F32)


def _bar(y_ref, rel=2e-6):
    """float32 rounding of y plus that of xhat: a few ulps of |y| + |beta|."""
    return rel * (np.abs(y_ref) + 1.0)


@pytest.mark.parametrize("shape", [(7, 1001), (3, 16), (64, 768), (5, 3)])
@pytest.mark.parametrize("params", ["none", "gamma", "beta", "both", "keepdims"])
@pytest.mark.parametrize("offset", [0.0, 1e6])
def test_rows_float32_pass_matches_float64(shape, params, offset):
    x = _x(shape, offset)
    rng = np.random.default_rng(1)
    n = shape[-1]
    g = rng.uniform(0.5, 2.0, n).astype(F32) if params in ("gamma", "both", "keepdims") else None
    b = rng.standard_normal(n).astype(F32) if params in ("beta", "both", "keepdims") else None
    if params == "keepdims":
        g, b = g.reshape(1, n), b.reshape(1, n)
    y = fastnorm.layer_norm(x, g, b)
    assert y.dtype == F32
    ref = ref_layer_norm(x, (1,), None if g is None else g.reshape(-1),
                         None if b is None else b.reshape(-1))[0]
    # The accuracy bar of float32 data at a large offset (1e-5) holds.
    assert_close(y, ref, 1e-5 if offset else _bar(ref), f"{shape} {params} {offset}")


def test_rms_rows_float32_pass():
    x = _x((33, 515), 3.0)
    g = np.random.default_rng(2).uniform(0.5, 2.0, 515).astype(F32)
    y = fastnorm.rms_norm(x, g)
    ref = ref_rms_norm(x, (1,), g)[0]
    assert_close(y, ref, _bar(ref), "rms_norm")


def test_rows_float32_pass_unaligned_and_streamed_output():
    # 9 MiB of output goes around the caches; an out= that starts one float
    # past a vector boundary makes the pass write a scalar head first.
    x = _x((2304, 1025), 2.0)
    buf = np.empty(x.size + 1, F32)
    out = buf[1:].reshape(x.shape)
    y = fastnorm.layer_norm(x, out=out)
    assert y is out
    ref = ref_layer_norm(x, (1,))[0]
    assert_close(y, ref, _bar(ref), "streamed")


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_rows_float32_pass_long_slices_split_across_threads(threads):
    # Fewer slices than twice the threads: slices are cut into blocks and
    # each block is normalized on its own (gamma indexed from its start).
    x = _x((2, 70_001), -5.0)
    g = np.random.default_rng(3).uniform(0.5, 2.0, 70_001).astype(F32)
    b = np.random.default_rng(4).standard_normal(70_001).astype(F32)
    fastnorm.set_num_threads(threads)
    try:
        y = fastnorm.layer_norm(x, g, b)
    finally:
        fastnorm.set_num_threads(None)
    ref = ref_layer_norm(x, (1,), g, b)[0]
    assert_close(y, ref, _bar(ref), f"{threads} threads")


def test_batch_norm_eval_nchw_float32_pass():
    # Runs of H*W values with one gamma, beta, mean and rstd each.
    x = _x((4, 6, 9, 11), 1.5)
    rng = np.random.default_rng(5)
    g, b = rng.uniform(0.5, 2.0, 6), rng.standard_normal(6)
    rm, rv = rng.standard_normal(6), rng.uniform(0.5, 2.0, 6)
    y = fastnorm.batch_norm(x, g, b, rm, rv, training=False)
    k = (1, 6, 1, 1)
    ref = ((x.astype(np.float64) - rm.reshape(k)) / np.sqrt(rv.reshape(k) + 1e-5)
           * g.reshape(k) + b.reshape(k))
    assert_close(y, ref, _bar(ref), "batch_norm eval")


@pytest.mark.parametrize("case", ["huge_mixed_signs", "huge_offset", "tiny_spread"])
def test_rows_float32_pass_hands_extreme_slices_to_float64(case):
    # Slices whose mean or scale float32 cannot hold with room to spare are
    # normalized in float64: the float32 pass would overflow (x - mean) or
    # the scale.  Each row is its own case, next to an ordinary row.
    rng = np.random.default_rng(6)
    eps = 1e-5
    if case == "huge_mixed_signs":
        # mean near +2.6e38: x - mean for the negative values is below
        # -float32's largest.
        row = np.where(np.arange(64) % 16 == 0, -3e38, 3e38)
    elif case == "huge_offset":
        row = 1e31 + 1e25 * rng.standard_normal(64)
    else:
        # Subnormal spread and eps=0: the scale (about 1e45) exceeds float32.
        row = np.where(np.arange(64) % 2 == 0, 0.0, float(np.finfo(F32).smallest_subnormal))
        eps = 0.0
    x = np.stack([row, rng.standard_normal(64)]).astype(F32)
    y = fastnorm.layer_norm(x, eps=eps)
    assert np.all(np.isfinite(y))
    ref = ref_layer_norm(x, (1,), eps=eps)[0]
    assert_close(y, ref, _bar(ref), case)


# --------------------------------------------------------------------------
# the COLUMNS pattern: a row of each tile of columns at a time

def _bn_ref(x, axes, g, b, mean=None, var=None, eps=1e-5):
    xd = x.astype(np.float64)
    if mean is None:
        mean = xd.mean(axis=axes, keepdims=True)
        var = xd.var(axis=axes, keepdims=True)
    return (xd - mean) / np.sqrt(var + eps) * g + b


@pytest.mark.parametrize("shape, axes", [((300, 70), (0,)),            # (N, C)
                                         ((130, 2100), (0,)),          # two tiles
                                         ((4, 5, 6, 24), (0, 1, 2))],  # NHWC
                         ids=["NC", "two-tiles", "NHWC"])
@pytest.mark.parametrize("offset", [0.0, 1e6])
def test_columns_float32_pass_batch_norm(shape, axes, offset):
    # Gain and bias are the same for every row: folded into the columns'
    # coefficients, zero gains included.
    x = _x(shape, offset)
    c = shape[-1]
    rng = np.random.default_rng(7)
    g = rng.uniform(0.5, 2.0, c) * rng.choice([-1.0, 1.0], c)
    g[::7] = 0.0
    b = rng.standard_normal(c)
    y = fastnorm.batch_norm(x, g, b, axis=axes)
    assert y.dtype == F32
    ref = _bn_ref(x, axes, g, b)
    assert_close(y, ref, 1e-5 if offset else _bar(ref), f"{shape} {offset}")


def test_columns_float32_pass_batch_norm_eval():
    x = _x((257, 40), 2.0)
    rng = np.random.default_rng(8)
    g, b = rng.uniform(0.5, 2.0, 40), rng.standard_normal(40)
    rm, rv = rng.standard_normal(40), rng.uniform(0.5, 2.0, 40)
    y = fastnorm.batch_norm(x, g, b, rm, rv, training=False, axis=0)
    ref = _bn_ref(x, (0,), g, b, rm, rv)
    assert_close(y, ref, _bar(ref), "batch_norm eval (N, C)")


@pytest.mark.parametrize("order", ["C", "F"])
def test_columns_float32_pass_layer_norm_axis0(order):
    # Gain and bias vary along the rows: one of each per row.
    x = np.asarray(_x((513, 77), -3.0), order=order)
    rng = np.random.default_rng(9)
    g, b = rng.uniform(0.5, 2.0, 513), rng.standard_normal(513)
    y = fastnorm.layer_norm(x, g, b, axis=0)
    ref = ref_layer_norm(x, (0,), g.reshape(-1, 1), b.reshape(-1, 1))[0]
    assert_close(y, ref, _bar(ref), f"layer_norm axis 0 ({order})")


def test_columns_float32_pass_streamed_unaligned_output():
    x = _x((8200, 257), 1.0)
    buf = np.empty(x.size + 3, F32)
    out = buf[3:].reshape(x.shape)
    g = np.random.default_rng(10).uniform(0.5, 2.0, 257)
    y = fastnorm.batch_norm(x, g, axis=0, out=out)
    assert y is out
    ref = _bn_ref(x, (0,), g, 0.0)
    assert_close(y, ref, _bar(ref), "streamed columns")


def test_columns_float32_pass_hands_extreme_tiles_to_float64():
    # One column near float32's largest values with mixed signs: its tile
    # is normalized in float64 (float32 would overflow x - mean).
    rng = np.random.default_rng(11)
    x = rng.standard_normal((64, 20)).astype(F32)
    x[:, 3] = np.where(np.arange(64) % 16 == 0, -3e38, 3e38)
    y = fastnorm.batch_norm(x, axis=0)
    assert np.all(np.isfinite(y))
    ref = _bn_ref(x, (0,), 1.0, 0.0)
    assert_close(y, ref, _bar(ref), "extreme column")


# ---------------------------------------------------------------------------
# COLUMNS statistics: strips of columns swept down the rows with their
# Welford accumulators in registers (strips, then single vectors, then
# scalar columns), rows in sweeps that prefetch the next one; outputs
# written whole row by whole row across the tiles.  These run on every SIMD
# level this CPU has (the simd_level fixture): strip and vector widths
# differ between them.

@pytest.mark.parametrize("dtype", [np.float16, F32, np.float64])
@pytest.mark.parametrize("width", [1, 7, 8, 9, 31, 32, 33, 47, 71, 1030, 2100])
def test_columns_strip_statistics_widths_and_sweeps(dtype, width, simd_level):
    # Every strip/vector/scalar split of the columns; rows enough for
    # several sweeps (a sweep holds about 128 KiB of rows), so the prefetch
    # cursor runs over sweep and block boundaries.  float64 data sits at an
    # offset, which the per-column pivots of the strips must take out.
    rows = max(64, (3 << 17) // (width * np.dtype(dtype).itemsize) + 5)
    offset = 1e9 if dtype == np.float64 else 0.0
    x = _x((rows, width), 0.0).astype(dtype) + dtype(offset)
    mean, var = fastnorm.mean_var(x, axis=0)
    rm, rv, spread = ref_mean_var(x, (0,))
    # float64 accumulation, then one rounding to the data's dtype.
    rounding = np.finfo(dtype).eps
    tol = 64 * np.finfo(np.float64).eps * (np.abs(rm) + spread) + rounding * np.abs(rm)
    assert_close(mean, rm.reshape(-1), tol.reshape(-1), f"mean {dtype} {width}")
    tol = 1e-12 * spread * spread + rounding * rv
    assert_close(var, rv.reshape(-1), tol.reshape(-1), f"var {dtype} {width}")


@pytest.mark.parametrize("dtype", [np.float16, F32])
@pytest.mark.parametrize("width", [1, 9, 33, 71, 2100])
@pytest.mark.parametrize("case", ["offset", "drift", "outlier first"])
def test_columns_strip_sums_about_each_columns_first_value(dtype, width, case):
    # float16/float32 strips take sums of x - c and of its squares, c the
    # column's first value, block by block (several blocks of rows here),
    # then M2 = S2 - S1**2 / n.  Whatever c is (an outlier, far from later
    # blocks' values) the difference may only cost bits float64 has to
    # spare: compared at the data's own rounding with the reference.
    rng = np.random.default_rng(width)
    rows = 3000
    big = 1e6 if dtype == F32 else 1e3
    x = big + rng.standard_normal((rows, width))
    if case == "drift":
        x += np.linspace(0.0, 30.0, rows)[:, None]
    elif case == "outlier first":
        x[0] += 1e3 if dtype == F32 else 50.0
    x = x.astype(dtype)
    mean, var = fastnorm.mean_var(x, axis=0)
    rm, rv, spread = ref_mean_var(x, (0,))
    rounding = np.finfo(dtype).eps
    assert_close(mean, rm.reshape(-1), (rounding * np.abs(rm)).reshape(-1), f"mean {case}")
    assert_close(var, rv.reshape(-1), (2 * rounding * rv).reshape(-1), f"var {case}")
    if dtype == F32:
        y = fastnorm.layer_norm(x, axis=0)
        ref = ref_layer_norm(x, (0,))[0]
        assert_close(y, ref, _bar(ref), f"layer_norm {case}")


@pytest.mark.parametrize("dtype", [np.float16, F32])
@pytest.mark.parametrize("layout", ["rows follow", "rows apart"])
def test_columns_strip_sums_in_segments(dtype, layout, simd_level):
    # Row blocks of more than 4096 rows (here about 6250 and 4125): their
    # sums go into moments every 4096 rows at most, folded with Chan's
    # formula, whole sweeps at a time (rows that follow each other) or row
    # by row (reduced axes that do not merge).  Drift along the rows and an
    # outlying first row make every fold count.
    rng = np.random.default_rng(11)
    big = 1e5 if dtype == F32 else 1e2
    if layout == "rows follow":
        shape = (100_000, 40)
    else:
        shape = (66_000, 9)
    base = big + rng.standard_normal(shape) + np.linspace(0.0, 20.0, shape[0])[:, None]
    base[0] += 40.0
    if layout == "rows follow":
        x = base.astype(dtype)
    else:
        wide = np.zeros((1100, 60, 2, 9), dtype)
        wide[:, :, 1, :] = base.reshape(1100, 60, 9)
        x = wide[:, :, 1, :]
    axes = (0,) if layout == "rows follow" else (0, 1)
    mean, var = fastnorm.mean_var(x, axis=axes)
    rm, rv, _ = ref_mean_var(x, axes)
    rounding = np.finfo(dtype).eps
    assert_close(mean, rm.reshape(-1), (rounding * np.abs(rm)).reshape(-1), "mean")
    assert_close(var, rv.reshape(-1), (2 * rounding * rv).reshape(-1), "var")


@pytest.mark.parametrize("threads", [1, 2])
def test_columns_strip_statistics_strided_columns(threads):
    # Columns not contiguous (every other one): strips gather, no prefetch.
    base = _x((3000, 2 * 45), 1.0).astype(np.float64)
    x = base[:, ::2]
    fastnorm.set_num_threads(threads)
    try:
        mean, var = fastnorm.mean_var(x, axis=0)
    finally:
        fastnorm.set_num_threads(None)
    rm, rv, spread = ref_mean_var(x, (0,))
    assert_close(mean, rm.reshape(-1), 1e-13 * (np.abs(rm) + spread).reshape(-1), "mean")
    assert_close(var, rv.reshape(-1), 1e-12 * (spread * spread).reshape(-1), "var")


def test_columns_strip_statistics_rows_apart():
    # Reduced axes that do not merge into one (a strided middle axis): each
    # row is its own sweep, the next rows prefetched.
    base = _x((40, 30, 3, 70), 5.0)
    x = base[:, :, 1, :]
    y = fastnorm.batch_norm(x, axis=(0, 1))
    ref = _bn_ref(x, (0, 1), 1.0, 0.0)
    assert_close(y, ref, _bar(ref), "rows apart")


def test_columns_output_rows_across_tiles_one_handed_back(simd_level):
    # Three tiles of columns written row by row; the middle tile holds an
    # extreme column and goes the float64 way, the others the float32 way.
    rng = np.random.default_rng(12)
    x = rng.standard_normal((96, 4200)).astype(F32)
    x[:, 2500] = np.where(np.arange(96) % 16 == 0, -3e38, 3e38)
    g = rng.uniform(0.5, 2.0, 4200)
    y = fastnorm.batch_norm(x, g, axis=0)
    assert np.all(np.isfinite(y))
    ref = _bn_ref(x, (0,), g, 0.0)
    assert_close(y, ref, _bar(ref), "tiles across a row")


@pytest.mark.parametrize("rows_apart", [False, True], ids=["contiguous", "rows-apart"])
@pytest.mark.parametrize("threads", [1, 2])
def test_columns_output_row_groups_in_column_chunks(rows_apart, threads, simd_level):
    # Rows wider than a chunk of columns go out in groups of rows a chunk at
    # a time: two tiles (2048 + 552 columns) in chunks of 1024, 1024, 552;
    # 363 rows, so groups of 8 end in a short one (and two threads split the
    # rows elsewhere); gain and bias per row (not folded).
    shape = (363, 2600)
    base = _x((shape[0], 3000) if rows_apart else shape, 4.0)
    x = base[:, :shape[1]]
    rng = np.random.default_rng(13)
    g, b = rng.uniform(0.5, 2.0, shape[0]), rng.standard_normal(shape[0])
    fastnorm.set_num_threads(threads)
    try:
        y = fastnorm.layer_norm(x, g, b, axis=0)
    finally:
        fastnorm.set_num_threads(None)
    ref = ref_layer_norm(x, (0,), g.reshape(-1, 1), b.reshape(-1, 1))[0]
    assert_close(y, ref, _bar(ref), f"row groups, chunks ({rows_apart}, {threads})")


def test_columns_output_short_rows_apart_prefetched():
    # Rows that are pieces of longer rows: the output pass prefetches ahead.
    base = _x((700, 1500), -2.0)
    x = base[:, :1000]
    y = fastnorm.layer_norm(x, axis=0)
    ref = ref_layer_norm(x, (0,))[0]
    assert_close(y, ref, _bar(ref), "rows apart")


@pytest.mark.parametrize("dtype", [F32, np.float64])
@pytest.mark.parametrize("case", ["tiles", "rows-apart"])
def test_columns_backward_sweeps(dtype, case, simd_level):
    # batch_norm's gradient over (N, C) when each tile of columns is a piece
    # of its rows (several tiles, or rows of a wider array): pass 1 goes by
    # sweeps of strips, rows enough for several sweeps and blocks; the
    # columns that make no whole strip go row by row.
    rng = np.random.default_rng(13)
    if case == "tiles":
        base = rng.standard_normal((700, 1030))
        x = base.astype(dtype)
    else:
        base = rng.standard_normal((3000, 100))
        x = base.astype(dtype)[:, :70]
    dy = rng.standard_normal(x.shape).astype(dtype)
    g = rng.uniform(0.5, 2.0, x.shape[1])
    xd = x.astype(np.float64)
    mean = xd.mean(axis=0)
    rstd = 1 / np.sqrt(xd.var(axis=0) + 1e-5)
    dx, dgamma, dbeta = fastnorm.batch_norm_backward(dy, x, mean, rstd, g, axis=0)
    ref = ref_norm_grads(dy, x, (0,), (1,), g.reshape(1, -1), "center",
                         stats=(mean.reshape(1, -1), rstd.reshape(1, -1)))
    rounding = np.finfo(dtype).eps
    assert_close(dx, ref["dx"], 4 * rounding * ref["dx_scale"], f"dx {case}")
    assert_close(dgamma, ref["dgamma"].reshape(-1), 1e-12 * ref["dgamma_scale"].reshape(-1),
                 f"dgamma {case}")
    assert_close(dbeta, ref["dbeta"].reshape(-1), 1e-12 * ref["dbeta_scale"].reshape(-1),
                 f"dbeta {case}")


@pytest.mark.parametrize("width", [1, 3, 5, 16, 17, 40, 64])
@pytest.mark.parametrize("offset", [0.0, 1e6])
def test_columns_periodic_float32_pass(width, offset, simd_level):
    # Rows of one tile that follow each other in memory, gain and bias the
    # same for every row: a block of rows is normalized as one run, the
    # column coefficients continuing periodically across row boundaries
    # (widths below a vector wrap several times within one).
    x = _x((517, width), offset)
    rng = np.random.default_rng(14)
    g, b = rng.uniform(0.5, 2.0, width), rng.standard_normal(width)
    y = fastnorm.batch_norm(x, g, b, axis=0)
    ref = _bn_ref(x, (0,), g, b)
    assert_close(y, ref, 1e-5 if offset else _bar(ref), f"width {width}")


def test_columns_periodic_float32_pass_streamed_unaligned_nhwc(simd_level):
    # 9 MiB of NHWC output written around the caches from one float past a
    # vector boundary: a scalar head, then aligned vectors across rows.
    x = _x((12, 28, 28, 293), 1.0)
    buf = np.empty(x.size + 1, F32)
    out = buf[1:].reshape(x.shape)
    g = np.random.default_rng(15).uniform(0.5, 2.0, 293)
    y = fastnorm.batch_norm(x, g, axis=(0, 1, 2), out=out)
    assert y is out
    ref = _bn_ref(x, (0, 1, 2), g, 0.0)
    assert_close(y, ref, _bar(ref), "periodic streamed")


@pytest.mark.parametrize("dtype", [np.float16, np.float64])
@pytest.mark.parametrize("width", [1, 3, 9, 64])
def test_columns_periodic_run_other_dtypes(dtype, width, simd_level):
    # The same single-run pass for float16 and float64 data (float64
    # arithmetic, per-column pivot, shift, scale times gain, bias).
    offset = 1e6 if dtype == np.float64 else 0.0
    x = _x((700, width), offset).astype(dtype)
    rng = np.random.default_rng(16)
    g, b = rng.uniform(0.5, 2.0, width), rng.standard_normal(width)
    y = fastnorm.batch_norm(x, g, b, axis=0)
    ref = _bn_ref(x, (0,), g, b)
    # The reference's own mean is rounded at the offset: an ulp of 1e6
    # relative to a spread of 1.
    tol = np.finfo(dtype).eps * 4 * (np.abs(ref) + 1.0 + offset * g)
    assert_close(y, ref, tol, f"{dtype} width {width}")


def test_columns_periodic_run_needs_unit_column_strides(simd_level):
    # Rows exactly n_cols values apart, but columns two values apart (rows
    # overlap): not one run; the rows are read as they are.
    buf = _x((200,), 1.0).astype(np.float64)
    x = np.lib.stride_tricks.as_strided(buf, shape=(40, 4), strides=(32, 16))
    y = fastnorm.batch_norm(x, axis=0)
    ref = _bn_ref(np.array(x), (0,), 1.0, 0.0)
    assert_close(y, ref, 1e-13 * (np.abs(ref) + 1.0), "overlapping rows")
    # An out= whose columns are not unit-stride: not one run either.
    out = np.empty((4, 40)).T
    y = fastnorm.batch_norm(np.array(x), axis=0, out=out)
    assert_close(out, ref, 1e-13 * (np.abs(ref) + 1.0), "transposed out")


# ---------------------------------------------------------------------------
# Short slices (one run of at most 64 values): statistics FN_W slices at a
# time, one per vector lane, on every SIMD level (FN_W differs).

@pytest.mark.parametrize("dtype", [np.float16, F32, np.float64])
@pytest.mark.parametrize("n", [1, 2, 7, 8, 9, 16, 31, 63, 64, 65])
def test_short_slices(dtype, n, simd_level):
    # 203 slices: groups of lanes end in a partial one.  float64 sits at an
    # offset that only the per-slice pivot takes out.
    offset = 1e9 if dtype == np.float64 else 2.0
    x = (_x((203, n), 0.0).astype(np.float64) + offset).astype(dtype)
    rng = np.random.default_rng(14)
    g, b = rng.uniform(0.5, 2.0, n), rng.standard_normal(n)
    tol = {np.float16: 2e-3, F32: 2e-6, np.float64: 1e-12}[dtype]
    if n > 1:
        y, mean, rstd = fastnorm.layer_norm(x, g, b, return_stats=True)
        yr, mr, rr, _, _ = ref_layer_norm(x, (1,), g, b)
        assert_close(y, yr, tol * (np.abs(yr) + 1), f"layer_norm {dtype} {n}")
        assert_close(mean, mr, tol * np.abs(mr), "mean")
        assert_close(rstd, rr, tol * rr, "rstd")
    y = fastnorm.rms_norm(x, g)
    yr = ref_rms_norm(x, (1,), g)[0]
    assert_close(y, yr, tol * (np.abs(yr) + 1), f"rms_norm {dtype} {n}")
    m, v = fastnorm.mean_var(x, axis=1, dtype=np.float64)
    rm, rv, spread = ref_mean_var(x, (1,))
    assert_close(m, rm.ravel(), 1e-15 * np.abs(rm).ravel() + 1e-12 * spread.ravel(), "mean")
    assert_close(v, rv.ravel(), 1e-12 * (spread * spread).ravel(), "var")


@pytest.mark.parametrize("threads", [1, 2])
def test_short_slices_with_per_slice_gain_and_threads(threads):
    # instance_norm on 4x4 maps: slices of 16 values with a gain and bias
    # per channel (they vary along the kept axes); large enough for two
    # threads, whose batches of slices give the same bits as one thread.
    x = _x((64, 40, 4, 4), 3.0)
    rng = np.random.default_rng(15)
    g, b = rng.uniform(0.5, 2.0, 40), rng.standard_normal(40)
    fastnorm.set_num_threads(threads)
    try:
        y = fastnorm.instance_norm(x, g, b)
    finally:
        fastnorm.set_num_threads(None)
    yr = ref_layer_norm(x, (2, 3), g.reshape(1, -1, 1, 1), b.reshape(1, -1, 1, 1))[0]
    assert_close(y, yr, _bar(yr), f"instance_norm, {threads} threads")
    assert np.array_equal(y, fastnorm.instance_norm(x, g, b))
