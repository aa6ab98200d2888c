"""Columns (a reduction over every axis but the last, which is contiguous).

Statistics: strips of columns are swept down the rows with their sums in
registers.  When every row starts at the same place in a cache line (rows a
whole number of lines apart), the strips start at the first whole line, so
that none reads a line that the next strip reads again (numpy's large
arrays start 16 bytes into a line) in calls larger than the caches
(`columns_in_cache`); the columns before that line and those after the last
whole strip go in vectors whose lanes outside them are masked (`line_head`
and `edge_welford` in src/_kernels.pyx).

Output: a few rows at a time (`out_rows`), a chunk of columns at a time
(`out_chunk`; float64 coefficients: half), each piece fetching the next
(`column_rows_chunked`); rows that follow each other go as one run instead
while their coefficients take at most `periodic_bytes`.

These cases put x at every offset in a line, with rows a whole number of
lines apart and not, widths on both sides of the strip, tile, chunk and run
bounds, at every SIMD level, and compare with the float64 reference.
"""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import fastnorm
from fastnorm import _simd
from reference import OUT_TOL, assert_close, ref_layer_norm, ref_mean_var
from test_fetch_ahead import at_the_end_of_memory

LINE = 64
KERNELS = _simd.kernels
EPS = 1e-5


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
    return KERNELS.columns_in_cache // (width * np.dtype(dtype).itemsize) + extra


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
    for level in _simd.available_levels():
        with _simd.use(level):
            check_mean_var(x)
    # And the same values where they fit the caches (strips from column 0).
    check_mean_var(x[:max(1, KERNELS.columns_in_cache // (2 * width * dtype.itemsize))])


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("offset", [8, 16, 48])
def test_column_statistics_over_several_sweeps_off_a_line(dtype, offset, simd_level):
    # Enough rows for several sweeps and blocks (the prefetch cursor runs on
    # across them) and an offset a float32 sum would lose.
    width = 1000 + 3
    rows = rows_past_cache(width, dtype, 300)
    x = in_line(values((rows, width), dtype, 7, offset=1e3 if dtype != np.float16 else 30.0),
                offset, True)
    check_mean_var(x)


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
    chunk, tile = KERNELS.out_chunk, KERNELS.column_tile
    f64_run = KERNELS.periodic_bytes // 32
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
