"""The columns pattern (schedule tiles): the innermost axis is kept, and the
Welford update is vectorized across it, a tile of `column_tile` columns at
a time (batch norm on (N, C) and NHWC, layer norm over axis 0, F-ordered
input).

Statistics: strips of columns are swept down the rows with their sums in
registers (strips, then single vectors, then scalar columns), rows in
sweeps (in calls larger than the caches each prefetches the next, or over
rows a multiple of 4 KiB apart the next rows' heads); float16/float32
strips sum x minus each column's first value, block by block.  When every
row starts at the same place in a cache line (rows a whole number of lines
apart), the strips start at the first whole line in calls larger than the
caches (`columns_in_cache`); the columns before that line and those after
the last whole strip go in vectors whose lanes outside them are masked.

Output: a few rows at a time (`out_rows`), a chunk of columns at a time
(`out_chunk`; float64 coefficients: half), each piece fetching the next;
rows that follow each other go as one run instead while their coefficients
take at most `periodic_bytes`, gain and bias folded into the columns'
coefficients where they are the same for every row; the float32 pass
(float32_pass) for float32 in and out, a tile whose values float32 cannot
hold going the float64 way.

Calls of many groups (a group: a tile of one outer slice) go in passes of
at most `pass_groups` groups, over pieces of the columns while the outer
slices are few and of the outermost kept axis otherwise (an index of it
that is still too many groups goes on its own), so that their scratch
stays small.

The kernels' constants only choose shapes on both sides of each bound;
fastnorm.explain says the route, and every value is compared with the
float64 reference.
"""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import fastnorm
from fastnorm import _simd
from hostile import at_the_end_of_memory
from reference import OUT_TOL, assert_bitwise, assert_close, ref_layer_norm, ref_mean_var
from routes import assert_route

LINE = 64
KERNELS = _simd.kernels
TILE = KERNELS.column_tile
PASS = KERNELS.pass_groups
EPS = 1e-5
F32 = np.float32
ACC = {np.dtype(np.float32): 1e-6, np.dtype(np.float64): 1e-12}
TILES = {"pattern": "columns", "schedule": "tiles"}


def _tiles(width):
    """The route of a reduction over axis 0 of (rows, width): one column is
    a single contiguous slice."""
    return TILES if width > 1 else {"pattern": "slices"}


def _threads_for(x):
    """Calls of fewer values than the kernels' parallel size run on one thread."""
    return 1 if x.size < KERNELS.tuning()["parallel_min"] else 2


# --------------------------------------------------------------------------
# strips from any place in a cache line; output in chunks

def in_line(values, offset, lines):
    """A copy of the 2-d `values` whose first element is `offset` bytes
    into a cache line; its rows are a whole number of lines apart when
    `lines`, else a line and a half more than a row apart."""
    rows, width = values.shape
    item = values.dtype.itemsize
    row_bytes = width * item
    stride = -(-row_bytes // LINE) * LINE if lines else row_bytes + LINE + LINE // 2
    raw = np.empty(rows * stride + 2 * LINE, np.uint8)
    start = (-raw.ctypes.data) % LINE + offset
    flat = raw[start:start + rows * stride].view(values.dtype)
    out = flat.reshape(rows, stride // item)[:, :width]
    out[...] = values
    assert out.ctypes.data % LINE == offset
    return out


def rows_past_cache(width, dtype, extra):
    """Rows enough for x to be larger than the caches, and `extra` more."""
    return KERNELS.tuning()["cached_bytes"] // (width * np.dtype(dtype).itemsize) + extra


def _fetch(func, x):
    """What each sweep of func(x, axis=0) fetches ahead, as explain says."""
    return fastnorm.explain(func, x, axis=0)["columns"]["fetch_ahead"]


def values(shape, dtype, seed, offset=3.0):
    rng = np.random.default_rng(seed)
    return (offset + rng.standard_normal(shape) * (1.0 + rng.random(shape[-1]))).astype(dtype)


def check_mean_var(x):
    mean, var = fastnorm.mean_var(x, axis=0, dtype=np.float64)
    rmean, rvar, _ = ref_mean_var(x, (0,))
    tol = 1e-12 if x.dtype == np.float64 else 1e-9
    assert_close(mean, rmean[0], tol * (1 + np.abs(rmean[0])), "mean")
    assert_close(var, rvar[0], tol * (1e-300 + rvar[0]), "var")


@st.composite
def line_problems(draw):
    dtype = np.dtype(draw(st.sampled_from([np.float16, np.float32, np.float64])))
    offset = dtype.itemsize * draw(st.integers(0, LINE // dtype.itemsize - 1))
    width = draw(st.one_of(st.integers(1, 160),
                           st.sampled_from([LINE // dtype.itemsize + 31, 255, 256, 257, 1000])))
    rows = rows_past_cache(width, dtype, draw(st.integers(1, 70)))
    lines = draw(st.booleans())
    return dtype, offset, width, rows, lines, draw(st.integers(0, 2**32 - 1))


@settings(deadline=None, max_examples=40)
@given(line_problems())
def test_column_statistics_from_any_place_in_a_line(problem):
    dtype, offset, width, rows, lines, seed = problem
    x = in_line(values((rows, width), dtype, seed), offset, lines)
    assert_route(_tiles(width), fastnorm.mean_var, x, axis=0, dtype=np.float64)
    for level in _simd.available_levels():
        with _simd.use(level):
            check_mean_var(x)
    # And the same values where they fit the caches (strips from column 0).
    check_mean_var(x[:max(1, KERNELS.tuning()["cached_bytes"] // (2 * width * dtype.itemsize))])


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("offset", [8, 16, 48])
def test_column_statistics_over_several_sweeps_off_a_line(dtype, offset, simd_level):
    # Enough rows for several sweeps and blocks (the prefetch cursor runs on
    # across them) and an offset a float32 sum would lose.
    width = 1000 + 3
    rows = rows_past_cache(width, dtype, 300)
    x = in_line(values((rows, width), dtype, 7, offset=1e3 if dtype != np.float16 else 30.0),
                offset, True)
    assert_route(TILES, fastnorm.mean_var, x, axis=0, dtype=np.float64)
    assert _fetch(fastnorm.mean_var, x) == "sweeps"
    check_mean_var(x)
    assert _fetch(fastnorm.mean_var, x[:rows_past_cache(width, dtype, 0) // 2]) == "none"


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("row_bytes", [4096, 8192])
def test_column_statistics_of_rows_an_l1_way_apart(dtype, row_bytes, simd_level):
    # Rows a multiple of 4 KiB apart, larger than the caches: the sweeps
    # fetch only the next rows' heads (their rows share L1 sets); a tile
    # narrower than half a way fetches them from its first strip on.
    # layer_norm's output follows the same statistics.
    width = row_bytes // np.dtype(dtype).itemsize
    x = values((rows_past_cache(width, dtype, 40), width), dtype, 11)
    assert_route(TILES, fastnorm.mean_var, x, axis=0, dtype=np.float64)
    assert _fetch(fastnorm.mean_var, x) == "heads"
    check_mean_var(x)
    y = fastnorm.layer_norm(x, axis=0)
    want = ref_layer_norm(x, (0,))[0]
    assert_close(y, want, OUT_TOL[np.dtype(dtype)] * (np.abs(want) + 1.0), "layer_norm")
    if dtype == np.float32 and row_bytes == 4096:
        narrow = values((rows_past_cache(100, dtype, 40), width), dtype, 12)[:, :100]
        assert_route(TILES, fastnorm.mean_var, narrow, axis=0, dtype=np.float64)
        check_mean_var(narrow)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_masked_lanes_keep_non_finite_values_to_their_columns(dtype, simd_level):
    # Column 0 (before the first whole line), the first columns of the
    # first strip (lanes the head's vectors mask out), the last column (the
    # tail's vectors) and one in the middle hold inf or nan in one row;
    # every other column's statistics stay those of its own values.
    item = np.dtype(dtype).itemsize
    head = (LINE - 16) // item
    width = 300
    v = values((rows_past_cache(width, dtype, 40), width), dtype, 3)
    bad = {0: np.inf, head: np.nan, head + 1: -np.inf, width // 2: np.nan, width - 1: np.inf}
    for col, value in bad.items():
        v[5, col] = value
    x = in_line(v, 16, True)
    assert_route(TILES, fastnorm.mean_var, x, axis=0, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        mean, var = fastnorm.mean_var(x, axis=0, dtype=np.float64)
        rmean, rvar, _ = ref_mean_var(x, (0,))
    fine = np.setdiff1d(np.arange(width), list(bad))
    assert_close(mean[fine], rmean[0][fine], 1e-12 * (1 + np.abs(rmean[0][fine])), "mean")
    assert_close(var[fine], rvar[0][fine], 1e-12 * rvar[0][fine], "var")
    for col in bad:
        assert not np.isfinite(mean[col]) and not np.isfinite(var[col]), col


def output_widths():
    """Widths at the output's bounds: the chunk (float32, and half of it for
    float64 coefficients), the tile, and the widest run of whole rows."""
    chunk, tile = KERNELS.tuning()["out_chunk"], KERNELS.column_tile
    f64_run = KERNELS.tuning()["periodic_bytes"] // 32
    return sorted({chunk // 2 + 1, chunk + 1, 2 * chunk + 7, f64_run, f64_run + 1,
                   tile, tile + 5, 2 * tile + 100})


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("width", output_widths())
@pytest.mark.parametrize("rows", [1, KERNELS.out_rows + 1, 2 * KERNELS.out_rows + 3])
@pytest.mark.parametrize("threads", [1, 2])
def test_column_output_in_chunks_ends_at_x(dtype, width, rows, threads):
    # x ends where its memory does (a page that cannot be read follows), so
    # a piece fetched past x would crash.  layer_norm over axis 0 (a gain
    # and bias per row: not folded into the columns' coefficients) and eval
    # batch_norm (coefficients given, gain and bias per column: folded).
    x = at_the_end_of_memory(values((rows, width), dtype, width + rows, offset=50.0))
    rng = np.random.default_rng(width)
    row_gain, row_bias = rng.uniform(0.5, 2.0, rows), rng.standard_normal(rows)
    gamma, beta = rng.uniform(0.5, 2.0, width), rng.standard_normal(width)
    running_mean = rng.standard_normal(width)
    running_var = rng.uniform(0.5, 2.0, width)
    fastnorm.set_num_threads(threads)
    try:
        assert_route(dict(TILES, threads=min(threads, _threads_for(x))), fastnorm.layer_norm, x,
                     row_gain, row_bias, axis=0, eps=EPS)
        assert_route(TILES, fastnorm.batch_norm, x, gamma, beta, running_mean=running_mean,
                     running_var=running_var, training=False, eps=EPS)
        y = fastnorm.layer_norm(x, row_gain, row_bias, axis=0, eps=EPS)
        plain = fastnorm.layer_norm(x, axis=0, eps=EPS)
        z = fastnorm.batch_norm(x, gamma, beta, running_mean=running_mean,
                                running_var=running_var, training=False, eps=EPS)
    finally:
        fastnorm.set_num_threads(None)
    tol = 4.0 * OUT_TOL[np.dtype(dtype)]
    for got, gain, bias, what in ((y, row_gain[:, None], row_bias[:, None], "layer_norm"),
                                  (plain, None, None, "layer_norm, no gain")):
        ref = ref_layer_norm(x, (0,), gain, bias, eps=EPS)[0]
        assert_close(got, ref, tol * (1.0 + np.abs(ref)), what)
    xs = x.astype(np.float64)
    ref = (xs - running_mean) / np.sqrt(running_var + EPS) * gamma + beta
    assert_close(z, ref, tol * (1.0 + np.abs(ref)), "eval")


# --------------------------------------------------------------------------
# passes over pieces of the columns and of the outer axes

# Columns of a (rows, width) x over axis 0: a pass takes PASS tiles and the
# last piece whatever is left (at most PASS tiles and one more).
WIDTHS = [PASS * TILE + 1, 2 * PASS * TILE, 2 * PASS * TILE + 1,
          2 * PASS * TILE + TILE - 1, 2 * PASS * TILE + TILE + 5]


def _x(shape, dtype, seed):
    rng = np.random.default_rng(seed)
    scale = 1.0 + rng.random(shape[-1])
    return (7.0 + rng.standard_normal(shape) * scale).astype(dtype)


@pytest.fixture(params=[1, 2], ids=["1 thread", "2 threads"])
def threads(request):
    fastnorm.set_num_threads(request.param)
    yield request.param
    fastnorm.set_num_threads(None)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_pieces_of_the_columns(width, dtype, threads):
    x = _x((3, width), dtype, width)
    assert_route(TILES, fastnorm.layer_norm, x, axis=0)
    mean, var = fastnorm.mean_var(x, axis=0, dtype=np.float64)    # statistics unrounded
    ref_m, ref_v, spread = ref_mean_var(x, (0,))
    tol = ACC[np.dtype(dtype)]
    assert_close(mean, ref_m[0], tol * spread[0], "mean")
    assert_close(var, ref_v[0], tol * spread[0] ** 2, "var")
    y = fastnorm.layer_norm(x, axis=0)
    ref = ref_layer_norm(x, (0,))[0]
    assert_close(y, ref, OUT_TOL[np.dtype(dtype)] * (np.abs(ref) + 1.0), "layer_norm")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_batch_norm_features_in_pieces(dtype, threads):
    # (N, C) with C past a pass: gamma, beta, the batch statistics and the
    # running ones all per column, each offset per piece.
    n, c = 4, 2 * PASS * TILE + 77
    x = _x((n, c), dtype, 1)
    rng = np.random.default_rng(2)
    g = rng.uniform(0.5, 2.0, c).astype(dtype)
    b = rng.standard_normal(c).astype(dtype)
    xd = x.astype(np.float64)
    m, v = xd.mean(0), xd.var(0)
    want = (xd - m) / np.sqrt(v + EPS) * g + b
    tol = OUT_TOL[np.dtype(dtype)] * (np.abs(want) + 1.0)
    assert_route(TILES, fastnorm.batch_norm, x, g, b, axis=0)
    y, mean, rstd = fastnorm.batch_norm(x, g, b, axis=0, return_stats=True)
    assert_close(y, want, tol, "batch_norm training")
    out_tol = OUT_TOL[np.dtype(dtype)]         # statistics in x's dtype
    assert_close(mean.reshape(-1), m, out_tol * (np.abs(m) + np.sqrt(v)), "mean")
    assert_close(rstd.reshape(-1), 1 / np.sqrt(v + EPS), out_tol / np.sqrt(v + EPS), "rstd")
    run_m = rng.standard_normal(c).astype(dtype)
    run_v = rng.uniform(0.5, 3.0, c).astype(dtype)
    y = fastnorm.batch_norm(x, g, b, run_m, run_v, training=False, axis=0)
    want = (xd - run_m) / np.sqrt(run_v.astype(np.float64) + EPS) * g + b
    assert_close(y, want, OUT_TOL[np.dtype(dtype)] * (np.abs(want) + 1.0), "batch_norm eval")


@pytest.mark.parametrize("shape, axis", [
    ((40, 2, 3000), 1),          # outer slices past a pass: pieces of axis 0
    ((34, 17, 2, 2049), 2),      # an index of axis 0 is still too many: alone
    ((PASS + 1, 3, 5), 1),       # many outer slices of one narrow tile each
])
def test_pieces_of_the_outer_axes(shape, axis, threads):
    x = _x(shape, np.float32, sum(shape))
    assert_route(TILES, fastnorm.layer_norm, x, axis=axis)
    mean, var = fastnorm.mean_var(x, axis=axis, keepdims=True, dtype=np.float64)
    ref_m, ref_v, spread = ref_mean_var(x, (axis,))
    assert_close(mean, ref_m, 1e-6 * spread, "mean")
    assert_close(var, ref_v, 1e-6 * spread ** 2, "var")
    y = fastnorm.layer_norm(x, axis=axis)
    ref = ref_layer_norm(x, (axis,))[0]
    assert_close(y, ref, OUT_TOL[np.dtype(np.float32)] * (np.abs(ref) + 1.0), "layer_norm")


@pytest.mark.parametrize("shape", [(300, 70), (8192, 1024), (100_000, 8), (3, 2 * TILE + 5),
                                   (5, 2 * PASS * TILE + 3)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_column_plan_is_the_shapes(shape, dtype):
    # explain's plan of the columns: its tiles hold the columns and its row
    # blocks the rows, and nothing in it but the team that sums them
    # depends on the thread count (so that the statistics' bits do not);
    # where the call goes in pieces, the first piece's.
    x = np.zeros(shape, dtype)
    plans = []
    for n in (1, 2):
        fastnorm.set_num_threads(n)
        try:
            r = fastnorm.explain(fastnorm.layer_norm, x, axis=0)
            plans.append(r["columns"])
            assert r["columns"].pop("statistics_threads") == min(
                r["threads"], r["columns"]["tiles"] * r["columns"]["row_blocks"])
        finally:
            fastnorm.set_num_threads(None)
    assert plans[0] == plans[1]
    plan = plans[0]
    assert plan["tile_columns"] == min(TILE, shape[1])
    width = min(shape[1], PASS * TILE)
    assert plan["tiles"] == -(-width // TILE)
    rows, blocks, per_block = shape[0], plan["row_blocks"], plan["rows_per_block"]
    assert (blocks - 1) * per_block < rows <= blocks * per_block
    assert 1 <= plan["sweep_rows"]
    assert fastnorm.explain(fastnorm.layer_norm, x)["columns"] is None      # rows: slices
    # where=: the same plan, the mask read beside x (rows or lanes)
    assert plan.pop("where") is None
    for mshape, how in (((shape[0], 1), "rows"), (shape, "lanes")):
        masked = fastnorm.explain(fastnorm.layer_norm, x, axis=0, where=np.ones(mshape, bool))
        assert masked["schedule"] == "tiles"
        assert masked["columns"].pop("where") == how
        masked["columns"].pop("statistics_threads")
        assert masked["columns"].pop("finish_with_sums") is False     # blocks merged by counts
        assert masked["columns"] == {k: v for k, v in plan.items() if k != "finish_with_sums"}


@pytest.mark.parametrize("shape", [(64, 1024), (100, 2100), (200, 1024), (130, 3000)])
def test_statistics_take_a_thread_per_block_at_most(shape):
    # A thread without a block of rows to sum would only finish and write
    # the columns another core summed; the output's rows go to every
    # thread.  Eval batch norm sums nothing: its coefficients too.  The
    # bits are one thread's.
    x = _x(shape, np.float32, 4)
    plan = fastnorm.explain(fastnorm.layer_norm, x, axis=0)["columns"]
    blocks = plan["tiles"] * plan["row_blocks"]
    assert x.size >= KERNELS.tuning()["parallel_min"] and blocks < 8
    serial = fastnorm.layer_norm(x, axis=0, return_stats=True)
    rm, rv = np.zeros(shape[1]), np.ones(shape[1])
    for n in (2, 3, 8):
        fastnorm.set_num_threads(n)
        try:
            for func, kw in ((fastnorm.layer_norm, dict(axis=0)), (fastnorm.mean_var, dict(axis=0)),
                             (fastnorm.batch_norm, dict(axis=0))):
                r = fastnorm.explain(func, x, **kw)
                assert (r["threads"], r["columns"]["statistics_threads"]) == (n, min(n, blocks))
            r = fastnorm.explain(fastnorm.batch_norm, x, running_mean=rm, running_var=rv,
                                 training=False, axis=0)
            assert (r["threads"], r["columns"]["statistics_threads"]) == (n, n)
            for a, b in zip(fastnorm.layer_norm(x, axis=0, return_stats=True), serial):
                np.testing.assert_array_equal(a, b)
        finally:
            fastnorm.set_num_threads(None)


@settings(max_examples=60, deadline=None)
@given(rows=st.integers(1, 40), width=st.integers(2, 3 * 64 + 9),
       dtype=st.sampled_from([np.float16, np.float32, np.float64]), seed=st.integers(0, 2**16))
def test_a_columns_results_do_not_depend_on_its_neighbours(rows, width, dtype, seed):
    # Rows that are one block of one sweep finish each strip of columns
    # while the next is summed (finish_with_sums); a column's arithmetic is
    # its own, so the columns shuffled give the same bits shuffled, whichever
    # strip or edge each lands in, and both hold to the float64 reference.
    x = values((rows, width), dtype, seed)
    perm = np.random.default_rng(seed).permutation(width)
    assert fastnorm.explain(fastnorm.layer_norm, x, axis=0)["columns"]["finish_with_sums"]
    got = fastnorm.layer_norm(x, axis=0, return_stats=True)
    moved = fastnorm.layer_norm(np.ascontiguousarray(x[:, perm]), axis=0, return_stats=True)
    for a, b, what in zip(moved, got, ("y", "mean", "rstd")):
        assert_bitwise(a, b[:, perm], what)
    for a, b in zip(fastnorm.mean_var(np.ascontiguousarray(x[:, perm]), axis=0),
                    fastnorm.mean_var(x, axis=0)):
        assert_bitwise(a, b[perm], "mean_var")
    ref = ref_layer_norm(x, (0,))[0]
    assert_close(got[0], ref, 4.0 * OUT_TOL[np.dtype(dtype)] * (np.abs(ref) + 1.0), "layer_norm")
    check_mean_var(x)


def test_passes_do_not_depend_on_threads():
    x = _x((5, 2 * PASS * TILE + 3), np.float32, 3)
    assert_route(TILES, fastnorm.layer_norm, x, axis=0)
    got = []
    for n in (1, 2):
        fastnorm.set_num_threads(n)
        got.append(fastnorm.layer_norm(x, axis=0, return_stats=True))
    fastnorm.set_num_threads(None)
    for a, b in zip(*got):
        np.testing.assert_array_equal(a, b)


# --------------------------------------------------------------------------
# the float32 pass; strips; rows as one run

def _x32(shape, offset=0.0, scale=1.0, seed=0):
    rng = np.random.default_rng(seed)
    return (offset + scale * rng.standard_normal(shape)).astype(F32)


def _bar(y_ref, rel=2e-6):
    """float32 rounding of y plus that of xhat: a few ulps of |y| + |beta|."""
    return rel * (np.abs(y_ref) + 1.0)


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
    x = _x32(shape, offset)
    c = shape[-1]
    rng = np.random.default_rng(7)
    g = rng.uniform(0.5, 2.0, c) * rng.choice([-1.0, 1.0], c)
    g[::7] = 0.0
    b = rng.standard_normal(c)
    assert_route(dict(TILES, float32_pass=True), fastnorm.batch_norm, x, g, b, axis=axes)
    y = fastnorm.batch_norm(x, g, b, axis=axes)
    assert y.dtype == F32
    ref = _bn_ref(x, axes, g, b)
    assert_close(y, ref, 1e-5 if offset else _bar(ref), f"{shape} {offset}")


def test_columns_float32_pass_batch_norm_eval():
    x = _x32((257, 40), 2.0)
    rng = np.random.default_rng(8)
    g, b = rng.uniform(0.5, 2.0, 40), rng.standard_normal(40)
    rm, rv = rng.standard_normal(40), rng.uniform(0.5, 2.0, 40)
    assert_route(dict(TILES, float32_pass=True), fastnorm.batch_norm, x, g, b, rm, rv,
                 training=False, axis=0)
    y = fastnorm.batch_norm(x, g, b, rm, rv, training=False, axis=0)
    ref = _bn_ref(x, (0,), g, b, rm, rv)
    assert_close(y, ref, _bar(ref), "batch_norm eval (N, C)")


@pytest.mark.parametrize("order", ["C", "F"])
def test_columns_float32_pass_layer_norm_axis0(order):
    # Gain and bias vary along the rows: one of each per row.
    x = np.asarray(_x32((513, 77), -3.0), order=order)
    rng = np.random.default_rng(9)
    g, b = rng.uniform(0.5, 2.0, 513), rng.standard_normal(513)
    # (F order: axis 0 is the contiguous one, rows of the slices pattern)
    assert_route({"pattern": "columns" if order == "C" else "slices", "float32_pass": True},
                 fastnorm.layer_norm, x, g, b, axis=0)
    y = fastnorm.layer_norm(x, g, b, axis=0)
    ref = ref_layer_norm(x, (0,), g.reshape(-1, 1), b.reshape(-1, 1))[0]
    assert_close(y, ref, _bar(ref), f"layer_norm axis 0 ({order})")


def test_columns_float32_pass_streamed_unaligned_output():
    x = _x32((8200, 257), 1.0)
    buf = np.empty(x.size + 3, F32)
    out = buf[3:].reshape(x.shape)
    g = np.random.default_rng(10).uniform(0.5, 2.0, 257)
    assert_route(dict(TILES, float32_pass=True, streams=True), fastnorm.batch_norm, x, g, axis=0,
                 out=out)
    y = fastnorm.batch_norm(x, g, axis=0, out=out)
    assert y is out
    ref = _bn_ref(x, (0,), g, 0.0)
    assert_close(y, ref, _bar(ref), "streamed columns")


@pytest.mark.parametrize("column", [3, 9, 18])
def test_columns_float32_pass_hands_extreme_tiles_to_float64(column, simd_level):
    # One column near float32's largest values with mixed signs: its tile
    # is normalized in float64 (float32 would overflow x - mean), wherever
    # the column falls among the vectors of columns and the last ones.
    rng = np.random.default_rng(11)
    x = rng.standard_normal((64, 20)).astype(F32)
    x[:, column] = np.where(np.arange(64) % 16 == 0, -3e38, 3e38)
    assert_route(dict(TILES, float32_pass=True), fastnorm.batch_norm, x, axis=0)
    y = fastnorm.batch_norm(x, axis=0)
    assert np.all(np.isfinite(y))
    ref = _bn_ref(x, (0,), 1.0, 0.0)
    assert_close(y, ref, _bar(ref), "extreme column")


@pytest.mark.parametrize("column", [2, 13, 19])
def test_columns_an_extreme_gain_among_the_vectors_of_columns(column, simd_level):
    # A gain of 3e37 times the scale: past the float32 pass's room to spare
    # (1e30), so its tile goes the float64 way; float32 would still hold
    # these values, so what this holds is the result, not the way taken.
    rng = np.random.default_rng(12)
    x = rng.standard_normal((64, 20)).astype(F32)
    g = np.ones(20, F32)
    g[column] = 3e37
    y = fastnorm.batch_norm(x, g, axis=0)
    ref = _bn_ref(x, (0,), g.astype(np.float64), 0.0)
    assert_close(y, ref, _bar(ref), "extreme gain")


@pytest.mark.parametrize("dtype", [F32, np.float64])
def test_columns_nonfinite_columns_among_finite_ones(dtype, simd_level):
    # Columns that a NaN or an inf poisons, inside vectors of clean ones:
    # NaN statistics there (mean too), the others' as the reference's.
    rng = np.random.default_rng(13)
    x = (1.0 + rng.standard_normal((64, 20))).astype(dtype)
    x[7, 5] = np.nan
    x[3, 10] = np.inf
    rm, rv = np.zeros(20, dtype), np.ones(20, dtype)
    y, mean, rstd = fastnorm.batch_norm(x, None, None, rm, rv, axis=0, return_stats=True)
    mean, rstd = mean.ravel(), rstd.ravel()       # keepdims: (1, 20)
    bad = [5, 10]
    good = [c for c in range(20) if c not in bad]
    assert np.isnan(y[:, bad]).all()
    assert np.isnan(mean[bad]).all() and np.isnan(rstd[bad]).all()
    assert np.isnan(rm[bad]).all() and np.isnan(rv[bad]).all()
    xg = x[:, good].astype(np.float64)
    want_mean, want_var = xg.mean(axis=0), xg.var(axis=0)
    tol = ACC[np.dtype(dtype)]
    assert_close(mean[good], want_mean, tol * (1 + np.abs(want_mean)), "mean")
    assert_close(rstd[good], 1 / np.sqrt(want_var + EPS), tol / np.sqrt(want_var + EPS), "rstd")
    assert_close(rv[good], 0.9 + 0.1 * want_var * 64 / 63, tol * 4, "running var")
    ref = _bn_ref(x[:, good].astype(np.float64), (0,), 1.0, 0.0)
    assert_close(y[:, good], ref, OUT_TOL[np.dtype(dtype)] * (np.abs(ref) + 1.0), "y")


@pytest.mark.parametrize("dtype", [np.float16, F32, np.float64])
@pytest.mark.parametrize("width", [1, 7, 8, 9, 31, 32, 33, 47, 71, 1030, 2100])
def test_columns_strip_statistics_widths_and_sweeps(dtype, width, simd_level):
    # Every strip/vector/scalar split of the columns; rows enough for
    # several sweeps (a sweep holds about 128 KiB of rows), so the prefetch
    # cursor runs over sweep and block boundaries.  float64 data sits at an
    # offset, which the per-column pivots of the strips must take out.
    rows = max(64, (3 << 17) // (width * np.dtype(dtype).itemsize) + 5)
    offset = 1e9 if dtype == np.float64 else 0.0
    x = _x32((rows, width), 0.0).astype(dtype) + dtype(offset)
    assert_route(_tiles(width), fastnorm.mean_var, x, axis=0)
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
    assert_route(_tiles(width), fastnorm.mean_var, x, axis=0)
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
    assert_route(TILES, fastnorm.mean_var, x, axis=axes)
    mean, var = fastnorm.mean_var(x, axis=axes)
    rm, rv, _ = ref_mean_var(x, axes)
    rounding = np.finfo(dtype).eps
    assert_close(mean, rm.reshape(-1), (rounding * np.abs(rm)).reshape(-1), "mean")
    assert_close(var, rv.reshape(-1), (2 * rounding * rv).reshape(-1), "var")


@pytest.mark.parametrize("threads", [1, 2])
def test_columns_strip_statistics_strided_columns(threads):
    # Columns not contiguous (every other one): strips gather, no prefetch.
    base = _x32((3000, 2 * 45), 1.0).astype(np.float64)
    x = base[:, ::2]
    fastnorm.set_num_threads(threads)
    assert_route(TILES, fastnorm.mean_var, x, axis=0)
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
    base = _x32((40, 30, 3, 70), 5.0)
    x = base[:, :, 1, :]
    assert_route(dict(TILES, float32_pass=True), fastnorm.batch_norm, x, axis=(0, 1))
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
    assert_route(dict(TILES, float32_pass=True), fastnorm.batch_norm, x, g, axis=0)
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
    base = _x32((shape[0], 3000) if rows_apart else shape, 4.0)
    x = base[:, :shape[1]]
    rng = np.random.default_rng(13)
    g, b = rng.uniform(0.5, 2.0, shape[0]), rng.standard_normal(shape[0])
    fastnorm.set_num_threads(threads)
    assert_route(dict(TILES, float32_pass=True), fastnorm.layer_norm, x, g, b, axis=0)
    try:
        y = fastnorm.layer_norm(x, g, b, axis=0)
    finally:
        fastnorm.set_num_threads(None)
    ref = ref_layer_norm(x, (0,), g.reshape(-1, 1), b.reshape(-1, 1))[0]
    assert_close(y, ref, _bar(ref), f"row groups, chunks ({rows_apart}, {threads})")


def test_columns_output_short_rows_apart_prefetched():
    # Rows that are pieces of longer rows: the output pass prefetches ahead.
    base = _x32((700, 1500), -2.0)
    x = base[:, :1000]
    assert_route(dict(TILES, float32_pass=True), fastnorm.layer_norm, x, axis=0)
    y = fastnorm.layer_norm(x, axis=0)
    ref = ref_layer_norm(x, (0,))[0]
    assert_close(y, ref, _bar(ref), "rows apart")


@pytest.mark.parametrize("width", [1, 3, 5, 16, 17, 40, 64])
@pytest.mark.parametrize("offset", [0.0, 1e6])
def test_columns_periodic_float32_pass(width, offset, simd_level):
    # Rows of one tile that follow each other in memory, gain and bias the
    # same for every row: a block of rows is normalized as one run, the
    # column coefficients continuing periodically across row boundaries
    # (widths below a vector wrap several times within one).
    x = _x32((517, width), offset)
    rng = np.random.default_rng(14)
    g, b = rng.uniform(0.5, 2.0, width), rng.standard_normal(width)
    assert_route(dict(_tiles(width), float32_pass=True), fastnorm.batch_norm, x, g, b, axis=0)
    y = fastnorm.batch_norm(x, g, b, axis=0)
    ref = _bn_ref(x, (0,), g, b)
    assert_close(y, ref, 1e-5 if offset else _bar(ref), f"width {width}")


def test_columns_periodic_float32_pass_streamed_unaligned_nhwc(simd_level):
    # 9 MiB of NHWC output written around the caches from one float past a
    # vector boundary: a scalar head, then aligned vectors across rows.
    x = _x32((12, 28, 28, 293), 1.0)
    buf = np.empty(x.size + 1, F32)
    out = buf[1:].reshape(x.shape)
    g = np.random.default_rng(15).uniform(0.5, 2.0, 293)
    assert_route(dict(TILES, float32_pass=True, streams=True), fastnorm.batch_norm, x, g,
                 axis=(0, 1, 2), out=out)
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
    x = _x32((700, width), offset).astype(dtype)
    rng = np.random.default_rng(16)
    g, b = rng.uniform(0.5, 2.0, width), rng.standard_normal(width)
    assert_route(dict(_tiles(width), float32_pass=False), fastnorm.batch_norm, x, g, b, axis=0)
    y = fastnorm.batch_norm(x, g, b, axis=0)
    ref = _bn_ref(x, (0,), g, b)
    # The reference's own mean is rounded at the offset: an ulp of 1e6
    # relative to a spread of 1.
    tol = np.finfo(dtype).eps * 4 * (np.abs(ref) + 1.0 + offset * g)
    assert_close(y, ref, tol, f"{dtype} width {width}")


def test_columns_periodic_run_needs_unit_column_strides(simd_level):
    # Rows exactly n_cols values apart, but columns two values apart (rows
    # overlap): not one run; the rows are read as they are.
    buf = _x32((200,), 1.0).astype(np.float64)
    x = np.lib.stride_tricks.as_strided(buf, shape=(40, 4), strides=(32, 16))
    assert_route(TILES, fastnorm.batch_norm, x, axis=0)
    y = fastnorm.batch_norm(x, axis=0)
    ref = _bn_ref(np.array(x), (0,), 1.0, 0.0)
    assert_close(y, ref, 1e-13 * (np.abs(ref) + 1.0), "overlapping rows")
    # An out= whose columns are not unit-stride: not one run either.
    out = np.empty((4, 40)).T
    y = fastnorm.batch_norm(np.array(x), axis=0, out=out)
    assert_close(out, ref, 1e-13 * (np.abs(ref) + 1.0), "transposed out")
