"""The slices pattern: each slice a set of runs along the innermost axis,
which is reduced.  Its schedules, as fastnorm.explain names them:

rows    single contiguous runs of 8 values up to 1 KiB (short rows), or
        while x is in cache (4 MiB; float64 1 MiB) up to 16 KiB (float64 4
        KiB; cached rows), as are float16/float32 rows of up to 16 KiB
        whose statistics are all the call computes, wherever they are
        (read from memory, each row fetches ahead as it is read);
        statistics a batch of rows at a time, one vector
        lane per row (float64 by the corrected two-pass formula, float16/
        float32 by sums shifted by each row's first value, in one look); rows
        that follow each other in x and y are normalized as one run
        (rows_pass) whose vectors may cross from one row into the next.
        Without statistics to return, a batch's coefficients are made in
        vectors; batches that cannot (non-finite rows, float32 cannot hold a
        row's coefficients) go row by row, and rows whose sums overflow or
        meet inf/NaN are redone Welford's way.
lanes   short or strided single runs of up to 64 values, one slice a lane.
whole   each slice by itself, longer ones in 4096-value blocks.
turns   single contiguous runs of over 2 KiB of x beyond half the
        last-level cache (read from memory), written upwards by the float32
        pass (the float64 pass fetches the next run as it writes one): a
        thread takes a block and writes each one's output in 2 KiB pieces,
        each followed by the statistics of as many values of the next, so
        that reads and writes overlap.
split   few long slices and several threads: the slices cut into blocks.

The float32 pass (float32_pass) normalizes float32 data into float32 output
along contiguous runs; slices whose mean or scale float32 cannot hold with
room to spare go back to the float64 pass.  Statistics loops fetch a few KiB
ahead: across rows when rows follow each other, else within the run; each
such case has x end at the last readable byte of its memory (a read past
what the call reads next would crash).  Every value is compared with the
plain float64 reference on the same input.
"""
import warnings

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import fastnorm
from fastnorm import _machine, _simd
from hostile import at_the_end_of_memory
from reference import (OUT_TOL, assert_close, ref_layer_norm, ref_mean_var, ref_rms_norm)
from routes import assert_route, schedule
from strategies import row_problem

EPS = 1e-5
F32 = np.float32
ROWS = {"pattern": "slices", "schedule": "rows"}
LANES = {"pattern": "slices", "schedule": "lanes"}
WHOLE = {"pattern": "slices", "schedule": "whole"}
TURNS = {"pattern": "slices", "schedule": "turns"}
# Short rows: up to this many bytes (longer ones only while x is in cache).
SHORT_ROW_BYTES = 1024
# The bounds the kernels use (x's and y's bytes together, a row's bytes),
# by itemsize.
_T = _simd.kernels.tuning()
CACHED = {2: (_T["cached_bytes"], _T["cached_row_bytes"]),
          4: (_T["cached_bytes"], _T["cached_row_bytes"]),
          8: (_T["cached_bytes_f64"], _T["cached_row_bytes_f64"])}


def _cached_route(x, y_bytes):
    """In cache (x and an output of y_bytes within the bound), rows up to
    the cached bound take the rows schedule."""
    total, row = CACHED[x.itemsize]
    assert x.nbytes + y_bytes <= total
    return dict(ROWS if x.shape[1] * x.itemsize <= row else WHOLE, in_cache=True)


# --------------------------------------------------------------------------
# short rows

def _tol(y_ref, dtype, spread=1.0):
    return OUT_TOL[np.dtype(dtype)] * (1.0 + np.abs(y_ref)) * spread


def _check_layer_norm(x, gamma, beta, y):
    ref = ref_layer_norm(x, (1,), gamma, beta, eps=EPS)[0]
    assert_close(y, ref, _tol(ref, x.dtype, 4.0), "y")


@st.composite
def short_row_problems(draw):
    dtype = draw(st.sampled_from([np.float32, np.float64, np.float16]))
    limit = 1024 // np.dtype(dtype).itemsize
    n = draw(st.integers(8, limit + 8))           # a few past the limit too
    rows = draw(st.integers(1, 600))
    offset = draw(st.sampled_from([0.0, 3.0, 1e6 if dtype != np.float16 else 100.0]))
    params = draw(st.sampled_from(["none", "along", "one"]))
    seed = draw(st.integers(0, 2**32 - 1))
    return dtype, n, rows, offset, params, seed


@given(short_row_problems())
def test_short_rows_layer_norm(problem):
    x, gamma, beta = row_problem(*problem)
    # up to 1 KiB a row; past it the call is in cache, whose rows are longer
    assert_route(ROWS, fastnorm.layer_norm, x, gamma, beta, eps=EPS)
    y, mean, rstd = fastnorm.layer_norm(x, gamma, beta, eps=EPS, return_stats=True)
    ref, rmean, rrstd, _, _ = ref_layer_norm(x, (1,), gamma, beta, eps=EPS)
    assert_close(y, ref, _tol(ref, x.dtype, 4.0), "y")
    # Without statistics (coefficients a batch at a time): the same bits.
    np.testing.assert_array_equal(fastnorm.layer_norm(x, gamma, beta, eps=EPS), y)
    if x.dtype == np.float64:
        assert_close(mean, rmean, 1e-12 * (1 + np.abs(rmean)), "mean")
    else:   # float32 statistics: within an ulp or two of the exact mean
        assert_close(mean, rmean, 2.0 * np.spacing(np.abs(rmean).astype(np.float32)), "mean")
    assert_close(rstd, rrstd, 1e-5 * rrstd if x.dtype != np.float64 else 1e-11 * rrstd, "rstd")


@given(short_row_problems())
def test_short_rows_rms_norm_and_mean_var(problem):
    x, gamma, _ = row_problem(*problem)
    # as layer_norm's: past 1 KiB a row only in cache, which these are
    assert_route(ROWS, fastnorm.rms_norm, x, gamma, eps=EPS)
    assert_route(ROWS, fastnorm.mean_var, x, axis=1, dtype=np.float64)
    y = fastnorm.rms_norm(x, gamma, eps=EPS)
    ref, _ = ref_rms_norm(x, (1,), gamma, eps=EPS)
    assert_close(y, ref, _tol(ref, x.dtype, 4.0), "rms_norm y")
    mean, var = fastnorm.mean_var(x, axis=1, dtype=np.float64)
    rmean, rvar, _ = ref_mean_var(x, (1,))
    tol = 1e-12 if x.dtype == np.float64 else 1e-9
    assert_close(mean, rmean[:, 0], tol * (1 + np.abs(rmean[:, 0])), "mean")
    # Relative to the variance itself: the looks (float16/float32: one, about
    # each row's first value) keep it exact whatever the offset (1e6 included).
    assert_close(var, rvar[:, 0], tol * rvar[:, 0], "var")


# 67 and 68: with AVX2, the longest rows summed side by side (a body of 16
# vectors and a tail) and the shortest one at a time (FN_SIDE_ROW_VECTORS).
@pytest.mark.parametrize("n", [8, 9, 15, 16, 17, 32, 67, 68, 100, 255])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_short_rows_every_level_and_thread_count(simd_level, n, dtype):
    # Rows of n values, 2100 of them (nine work items, a partial batch);
    # float32 rows of 8 to 15 values are normalized row by row.
    rng = np.random.default_rng(n)
    x = (1e3 + rng.standard_normal((2100, n))).astype(dtype)
    gamma, beta = rng.uniform(0.5, 2.0, n), rng.standard_normal(n)
    short = n * np.dtype(dtype).itemsize <= SHORT_ROW_BYTES
    assert_route(ROWS if short else WHOLE, fastnorm.layer_norm, x, gamma, beta, eps=EPS)
    outs = []
    for threads in (1, 2):
        fastnorm.set_num_threads(threads)
        outs.append(fastnorm.layer_norm(x, gamma, beta, eps=EPS))
    _check_layer_norm(x, gamma, beta, outs[0])
    np.testing.assert_array_equal(outs[0], outs[1])


@pytest.mark.parametrize("n", list(range(8, 16)))
@pytest.mark.parametrize("shift", [0, 1, 3, 7])
def test_short_rows_shorter_than_a_vector(n, shift):
    # float32 rows of 8 to 15 values: a 16-lane vector of the output pass
    # may hold parts of three rows, each lane with its own row's
    # coefficients; y starts `shift` floats past an aligned address, so the
    # vectors fall across the rows at every offset.
    rng = np.random.default_rng(n * 10 + shift)
    x = (3 + rng.standard_normal((301, n)) * rng.uniform(0.1, 10.0, (301, 1))).astype(np.float32)
    gamma, beta = rng.uniform(0.5, 2.0, n), rng.standard_normal(n)
    flat = np.empty(301 * n + 32, np.float32)
    start = (-flat.ctypes.data // 4) % 16 + shift
    y = flat[start:start + 301 * n].reshape(301, n)
    assert_route(ROWS, fastnorm.layer_norm, x, gamma, beta, eps=EPS, out=y)
    fastnorm.layer_norm(x, gamma, beta, eps=EPS, out=y)
    _check_layer_norm(x, gamma, beta, y)
    fastnorm.rms_norm(x, gamma, eps=EPS, out=y)
    ref, _ = ref_rms_norm(x, (1,), gamma, eps=EPS)
    assert_close(y, ref, _tol(ref, np.float32, 4.0), "rms_norm y")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_short_rows_output_apart_from_the_rows(dtype):
    # y not where the rows end (a strided view, a misaligned start): still
    # right, whichever way the output goes.
    rng = np.random.default_rng(1)
    x = (5 + rng.standard_normal((700, 48))).astype(dtype)
    gamma, beta = rng.uniform(0.5, 2.0, 48), rng.standard_normal(48)
    wide = np.full((700, 50), 7.0, dtype)
    # y's rows apart: no pass over the rows as one run
    assert_route(dict(ROWS, rows_pass=False), fastnorm.layer_norm, x, gamma, beta, eps=EPS,
                 out=wide[:, 1:49])
    fastnorm.layer_norm(x, gamma, beta, eps=EPS, out=wide[:, 1:49])
    _check_layer_norm(x, gamma, beta, wide[:, 1:49])
    assert (wide[:, 0] == 7).all() and (wide[:, 49] == 7).all()
    flat = np.full(700 * 48 + 1, 7.0, dtype)
    y = flat[1:].reshape(700, 48)
    assert_route(dict(ROWS, rows_pass=True), fastnorm.layer_norm, x, gamma, beta, eps=EPS,
                 out=y)
    fastnorm.layer_norm(x, gamma, beta, eps=EPS, out=y)
    _check_layer_norm(x, gamma, beta, y)
    assert flat[0] == 7


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_short_rows_streamed_misaligned_output(dtype):
    # Over 8 MiB of output is written with non-temporal stores from the
    # first vector-aligned address; rows of 33 values from an odd start.
    rng = np.random.default_rng(2)
    rows = (9 << 20) // (33 * np.dtype(dtype).itemsize) + 5
    x = (2 + rng.standard_normal((rows, 33))).astype(dtype)
    gamma, beta = rng.uniform(0.5, 2.0, 33), rng.standard_normal(33)
    flat = np.empty(rows * 33 + 3, dtype)
    y = flat[3:].reshape(rows, 33)
    assert_route(dict(ROWS, streams=True), fastnorm.layer_norm, x, gamma, beta, eps=EPS,
                 out=y)
    fastnorm.layer_norm(x, gamma, beta, eps=EPS, out=y)
    _check_layer_norm(x, gamma, beta, y)


@pytest.mark.parametrize("length", ["short", "cached"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_short_rows_nonfinite_rows_leave_the_others_alone(dtype, length):
    # (The longest rows grouped in cache take this way too.)
    itemsize = np.dtype(dtype).itemsize
    n = 40 if length == "short" else CACHED[itemsize][1] // itemsize
    rng = np.random.default_rng(3)
    x = rng.standard_normal((37, n)).astype(dtype)
    x[3, 5] = np.nan
    x[8, 0] = np.inf
    x[9, n - 1] = -np.inf
    x[10, 2], x[10, 7] = np.inf, -np.inf
    bad = np.zeros(37, bool)
    bad[[3, 8, 9, 10]] = True
    assert_route(ROWS, fastnorm.layer_norm, x, eps=EPS, return_stats=True)
    y, mean, rstd = fastnorm.layer_norm(x, eps=EPS, return_stats=True)
    assert np.isnan(y[bad]).any(axis=1).all()
    assert np.isnan(mean[bad]).all()
    np.testing.assert_array_equal(fastnorm.layer_norm(x, eps=EPS), y)
    good = ~bad
    _check_layer_norm(x[good], None, None, y[good])
    m, v = fastnorm.mean_var(x, axis=1)
    assert np.isnan(m[bad]).all() and np.isnan(v[bad]).all()
    rmean, rvar, _ = ref_mean_var(x[good], (1,))
    assert_close(v[good], rvar[:, 0], 1e-5 * rvar[:, 0], "var")


@pytest.mark.parametrize("mode", ["layer", "rms"])
def test_short_rows_batches_float32_cannot_hold_fall_back(mode):
    # float32 rows of 24 values, batches of 8 (AVX-512) or fewer: a row
    # near 1e31 (its float32 mean cannot carry the rounding remainder) and
    # constant rows with eps=0 (an infinite scale) in the middle of ordinary
    # rows; each batch with one of them goes row by row, the others not.
    rng = np.random.default_rng(7)
    x = rng.standard_normal((40, 24)).astype(np.float32)
    x[5] = (1e31 * (1 + 1e-3 * rng.standard_normal(24))).astype(np.float32)
    x[13] = 2.5
    x[22] = 0.0
    gamma, beta = rng.uniform(0.5, 2.0, 24), rng.standard_normal(24)
    assert_route(dict(ROWS, float32_pass=True), fastnorm.layer_norm, x, gamma, beta, eps=0.0)
    if mode == "layer":
        y = fastnorm.layer_norm(x, gamma, beta, eps=0.0)
        y_stats = fastnorm.layer_norm(x, gamma, beta, eps=0.0, return_stats=True)[0]
        ordinary = np.ones(40, bool)
        ordinary[[13, 22]] = False        # 0 / 0: NaN, as the reference says
        ref = ref_layer_norm(x[ordinary], (1,), gamma, beta, eps=0.0)[0]
        assert_close(y[ordinary], ref, _tol(ref, np.float32, 4.0), "y")
    else:
        y = fastnorm.rms_norm(x, gamma, eps=0.0)
        y_stats = fastnorm.rms_norm(x, gamma, eps=0.0, return_stats=True)[0]
        ordinary = np.ones(40, bool)
        ordinary[22] = False
        ref = ref_rms_norm(x[ordinary], (1,), gamma, eps=0.0)[0]
        assert_close(y[ordinary], ref, _tol(ref, np.float32, 4.0), "y")
    np.testing.assert_array_equal(y, y_stats)


def test_short_rows_sums_that_overflow_are_redone():
    # 32 values near the top of float64's range: their sum overflows, their
    # mean does not.  The batch's two-pass sums give inf; Welford's running
    # mean, which the row is handed back to, stays finite.
    rng = np.random.default_rng(4)
    x = rng.uniform(2e307, 1.7e308, (20, 32))
    x[1] = rng.standard_normal(32)               # an ordinary row in the batch
    assert_route(ROWS, fastnorm.mean_var, x, axis=1)
    mean, _ = fastnorm.mean_var(x, axis=1)
    expected = (x / 32).sum(axis=1)
    assert np.isfinite(mean).all()
    assert_close(mean, expected, 1e-12 * np.abs(expected) + 1e-300, "mean")
    rmean, rvar, _ = ref_mean_var(x[1:2], (1,))
    assert_close(fastnorm.mean_var(x, axis=1)[1][1], rvar[0, 0], 1e-12 * rvar[0, 0], "var")


def test_short_rows_eval_statistics_given():
    # Batch norm over a single image of (C, 16..) maps: one run per channel,
    # statistics given (no moments taken).
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 24, 5, 7))
    rm, rv = rng.standard_normal(24), rng.uniform(0.5, 2.0, 24)
    gamma, beta = rng.uniform(0.5, 2.0, 24), rng.standard_normal(24)
    assert_route(ROWS, fastnorm.batch_norm, x, gamma, beta, rm, rv, training=False, eps=EPS)
    y = fastnorm.batch_norm(x, gamma, beta, rm, rv, training=False, eps=EPS)
    c = (slice(None), None, None)
    ref = (x - rm[c]) / np.sqrt(rv[c] + EPS) * gamma[c] + beta[c]
    assert_close(y, ref, 1e-12 * (1 + np.abs(ref)), "y")


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("n", [8, 17, 31, 32, 67, 68, 100, 256])
def test_short_rows_results_do_not_depend_on_the_rows_beside_them(dtype, n):
    # Rows go a vector of rows at a time; a last vector of fewer rows (1 to
    # 7 here) must give each row the bits it gets in a full one.
    rng = np.random.default_rng(n)
    x = (rng.standard_normal((9, n)) * 3 + 5).astype(dtype)
    gamma, beta = rng.uniform(0.5, 2.0, n), rng.standard_normal(n)
    calls = {"layer_norm": lambda a: fastnorm.layer_norm(a, gamma, beta, eps=EPS,
                                                         return_stats=True),
             "rms_norm": lambda a: fastnorm.rms_norm(a, gamma, eps=EPS, return_stats=True),
             "mean_var": lambda a: fastnorm.mean_var(a, axis=-1)}
    assert_route(ROWS, fastnorm.layer_norm, x, gamma, beta, eps=EPS)
    for name, call in calls.items():
        whole = call(x)
        for k in range(1, 9):
            for part, full in zip(call(x[:k]), whole):
                np.testing.assert_array_equal(part, full[:k], err_msg=f"{name}, {k} rows")
            for part, full in zip(call(x[k:k + 1]), whole):
                np.testing.assert_array_equal(part, full[k:k + 1], err_msg=f"{name}, row {k}")


@pytest.mark.parametrize("shape", [(300, 64), (50, 500)])
def test_short_rows_invariances(shape):
    # Layer norm is invariant to re-scaling and re-centring each row (rows
    # of 500 float64 values: short-rows way because the call is in cache).
    rng = np.random.default_rng(6)
    x = rng.standard_normal(shape)
    a = rng.uniform(0.1, 10.0, (shape[0], 1))
    b = rng.uniform(-100.0, 100.0, (shape[0], 1))
    y1 = fastnorm.layer_norm(x, eps=0.0)
    y2 = fastnorm.layer_norm(a * x + b, eps=0.0)
    assert_close(y2, y1, 1e-11 * (1 + np.abs(y1)), "invariance")
    assert_route(dict(ROWS, in_cache=True), fastnorm.layer_norm, x, eps=0.0)


# --------------------------------------------------------------------------
# rows in cache

def _check_cached(x, gamma, beta, y, mean=None, rstd=None):
    ref, rmean, rrstd, _, _ = ref_layer_norm(x, (1,), gamma, beta, eps=EPS)
    assert_close(y, ref, _tol(ref, x.dtype, 4.0), "y")
    if mean is None:
        return
    if x.dtype == np.float64:
        assert_close(mean, rmean, 1e-12 * (1 + np.abs(rmean)), "mean")
        assert_close(rstd, rrstd, 1e-11 * rrstd, "rstd")
    else:   # float32 statistics: within an ulp or two of the exact mean
        assert_close(mean, rmean, 2.0 * np.spacing(np.abs(rmean).astype(np.float32)), "mean")
        assert_close(rstd, rrstd, 1e-5 * rrstd, "rstd")


@st.composite
def cached_row_problems(draw):
    dtype = np.dtype(draw(st.sampled_from([np.float32, np.float64, np.float16])))
    total, row = CACHED[dtype.itemsize]
    longest = row // dtype.itemsize
    n = draw(st.one_of(st.integers(65, longest + 16),      # a few past the bound too
                       st.sampled_from([128, 129, longest - 1, longest, longest + 1])))
    # x and y of its size within the bound
    rows = draw(st.integers(1, max(1, min(300, total // (2 * n * dtype.itemsize)))))
    offset = draw(st.sampled_from([0.0, 3.0, 1e6 if dtype != np.float16 else 100.0]))
    params = draw(st.sampled_from(["none", "along", "one"]))
    seed = draw(st.integers(0, 2**32 - 1))
    return dtype, n, rows, offset, params, seed


@settings(deadline=None)
@given(cached_row_problems())
def test_cached_rows_layer_norm(problem):
    x, gamma, beta = row_problem(*problem, spread=True)
    assert_route(_cached_route(x, x.nbytes), fastnorm.layer_norm, x, gamma, beta, eps=EPS)
    y, mean, rstd = fastnorm.layer_norm(x, gamma, beta, eps=EPS, return_stats=True)
    _check_cached(x, gamma, beta, y, mean, rstd)
    # Without statistics (coefficients a group of rows at a time): the same bits.
    np.testing.assert_array_equal(fastnorm.layer_norm(x, gamma, beta, eps=EPS), y)


@settings(deadline=None)
@given(cached_row_problems())
def test_cached_rows_mean_var(problem):
    x, _, _ = row_problem(*problem, spread=True)
    assert_route(_cached_route(x, 0), fastnorm.mean_var, x, axis=1, dtype=np.float64)
    mean, var = fastnorm.mean_var(x, axis=1, dtype=np.float64)
    rmean, rvar, _ = ref_mean_var(x, (1,))
    tol = 1e-12 if x.dtype == np.float64 else 1e-9
    assert_close(mean, rmean[:, 0], tol * (1 + np.abs(rmean[:, 0])), "mean")
    # Relative to the variance itself: exact whatever the offset.
    assert_close(var, rvar[:, 0], tol * rvar[:, 0], "var")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cached_rows_on_both_sides_of_the_size_bound(dtype):
    # Rows of the longest cached length: as many as fill the bound with x
    # and y (the grouped way), and one more (each row its own way); both
    # right, and a row gets its values either way.
    total, row = CACHED[np.dtype(dtype).itemsize]
    n = row // np.dtype(dtype).itemsize
    rows = total // (2 * row)
    rng = np.random.default_rng(11)
    x = (1e3 + rng.standard_normal((2 * rows + 1, n))).astype(dtype)
    gamma, beta = rng.uniform(0.5, 2.0, n), rng.standard_normal(n)
    assert_route(dict(ROWS, in_cache=True), fastnorm.layer_norm, x[:rows], gamma, beta,
                 eps=EPS)
    assert_route(dict(WHOLE, in_cache=False), fastnorm.layer_norm, x[:rows + 1], gamma, beta,
                 eps=EPS)
    inside = fastnorm.layer_norm(x[:rows], gamma, beta, eps=EPS)
    outside = fastnorm.layer_norm(x[:rows + 1], gamma, beta, eps=EPS)
    _check_cached(x[:rows], gamma, beta, inside)
    _check_cached(x[:rows + 1], gamma, beta, outside)
    # Statistics alone write nothing the size of x: twice the rows fit.
    # Beyond, float32 rows stay grouped (fetching ahead), float64 rows not.
    assert_route(dict(ROWS, in_cache=True), fastnorm.mean_var, x[:2 * rows], axis=1)
    beyond = ROWS if dtype == np.float32 else WHOLE
    assert_route(dict(beyond, in_cache=False), fastnorm.mean_var, x, axis=1)
    for part in (x[:2 * rows], x):
        mean, var = fastnorm.mean_var(part, axis=1, dtype=np.float64)
        rmean, rvar, _ = ref_mean_var(part, (1,))
        assert_close(var, rvar[:, 0], 1e-9 * rvar[:, 0], "var")


@pytest.mark.parametrize("n", [64, 127, 128, 129, 768, 1000, 4095])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cached_rows_every_level_and_thread_count(simd_level, n, dtype):
    # 203 rows (fewer where x and y would not fit the bound, an odd count):
    # several work items and a partial group of rows; the same bits on one
    # thread and two.
    total, row = CACHED[np.dtype(dtype).itemsize]
    while n * np.dtype(dtype).itemsize > row:
        n //= 2
    rows = min(203, total // (2 * n * np.dtype(dtype).itemsize) // 2 * 2 - 1)
    rng = np.random.default_rng(n)
    x = (1e3 + rng.standard_normal((rows, n))).astype(dtype)
    gamma, beta = rng.uniform(0.5, 2.0, n), rng.standard_normal(n)
    assert_route(dict(ROWS, in_cache=True), fastnorm.layer_norm, x, gamma, beta, eps=EPS)
    outs = []
    for threads in (1, 2):
        fastnorm.set_num_threads(threads)
        outs.append(fastnorm.layer_norm(x, gamma, beta, eps=EPS, return_stats=True))
    _check_cached(x, gamma, beta, *outs[0])
    for a, b in zip(*outs):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("shift", [1, 3, 7])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cached_rows_output_off_a_vector_boundary(dtype, shift):
    # y starts `shift` values past an aligned address: each row's held
    # vectors end short of the row, and a vector crosses into the next row.
    rng = np.random.default_rng(shift)
    x = (5 + rng.standard_normal((40, 300))).astype(dtype)
    gamma, beta = rng.uniform(0.5, 2.0, 300), rng.standard_normal(300)
    flat = np.full(40 * 300 + 64, 7.0, dtype)
    start = (-flat.ctypes.data // flat.itemsize) % 16 + shift
    y = flat[start:start + 40 * 300].reshape(40, 300)
    assert_route(dict(ROWS, in_cache=True), fastnorm.layer_norm, x, gamma, beta, eps=EPS,
                 out=y)
    fastnorm.layer_norm(x, gamma, beta, eps=EPS, out=y)
    _check_cached(x, gamma, beta, y)
    assert (flat[:start] == 7).all() and (flat[start + 40 * 300:] == 7).all()


def test_cached_rows_float32_offset_keeps_its_digits():
    # The accuracy bar: float32 rows at an offset of 1e6, error at most 1e-5.
    rng = np.random.default_rng(8)
    x = (1e6 + rng.standard_normal((64, 3000))).astype(np.float32)
    assert_route(dict(ROWS, in_cache=True), fastnorm.layer_norm, x, eps=0.0)
    y = fastnorm.layer_norm(x, eps=0.0)
    ref = ref_layer_norm(x, (1,), eps=0.0)[0]
    assert np.abs(y - ref).max() <= 1e-5 * (1 + np.abs(ref).max())


# --------------------------------------------------------------------------
# the float32 pass over rows; long slices split; short slices in lanes

def _x32(shape, offset=0.0, scale=1.0, seed=0):
    rng = np.random.default_rng(seed)
    return (offset + scale * rng.standard_normal(shape)).astype(F32)


def _bar(y_ref, rel=2e-6):
    """float32 rounding of y plus that of xhat: a few ulps of |y| + |beta|."""
    return rel * (np.abs(y_ref) + 1.0)


@pytest.mark.parametrize("shape", [(7, 1001), (3, 16), (64, 768), (5, 3)])
@pytest.mark.parametrize("params", ["none", "gamma", "beta", "both", "keepdims"])
@pytest.mark.parametrize("offset", [0.0, 1e6])
def test_rows_float32_pass_matches_float64(shape, params, offset):
    x = _x32(shape, offset)
    rng = np.random.default_rng(1)
    n = shape[-1]
    g = rng.uniform(0.5, 2.0, n).astype(F32) if params in ("gamma", "both", "keepdims") else None
    b = rng.standard_normal(n).astype(F32) if params in ("beta", "both", "keepdims") else None
    if params == "keepdims":
        g, b = g.reshape(1, n), b.reshape(1, n)
    assert_route({"pattern": "slices", "float32_pass": True}, fastnorm.layer_norm, x, g, b)
    y = fastnorm.layer_norm(x, g, b)
    assert y.dtype == F32
    ref = ref_layer_norm(x, (1,), None if g is None else g.reshape(-1),
                         None if b is None else b.reshape(-1))[0]
    # The accuracy bar of float32 data at a large offset (1e-5) holds.
    assert_close(y, ref, 1e-5 if offset else _bar(ref), f"{shape} {params} {offset}")


def test_rms_rows_float32_pass():
    x = _x32((33, 515), 3.0)
    g = np.random.default_rng(2).uniform(0.5, 2.0, 515).astype(F32)
    assert_route({"pattern": "slices", "float32_pass": True}, fastnorm.rms_norm, x, g)
    y = fastnorm.rms_norm(x, g)
    ref = ref_rms_norm(x, (1,), g)[0]
    assert_close(y, ref, _bar(ref), "rms_norm")


def test_rows_float32_pass_unaligned_and_streamed_output():
    # 9 MiB of output goes around the caches; an out= that starts one float
    # past a vector boundary makes the pass write a scalar head first.
    x = _x32((2304, 1025), 2.0)
    buf = np.empty(x.size + 1, F32)
    out = buf[1:].reshape(x.shape)
    assert_route({"pattern": "slices", "float32_pass": True, "streams": True},
                 fastnorm.layer_norm, x, out=out)
    y = fastnorm.layer_norm(x, out=out)
    assert y is out
    ref = ref_layer_norm(x, (1,))[0]
    assert_close(y, ref, _bar(ref), "streamed")


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_rows_float32_pass_long_slices_split_across_threads(threads):
    # Fewer slices than twice the threads: slices are cut into blocks and
    # each block is normalized on its own (gamma indexed from its start).
    x = _x32((2, 70_001), -5.0)
    g = np.random.default_rng(3).uniform(0.5, 2.0, 70_001).astype(F32)
    b = np.random.default_rng(4).standard_normal(70_001).astype(F32)
    fastnorm.set_num_threads(threads)
    try:
        assert_route({"schedule": "split" if threads > 1 else "whole", "threads": threads,
                      "float32_pass": True}, fastnorm.layer_norm, x, g, b)
        y = fastnorm.layer_norm(x, g, b)
    finally:
        fastnorm.set_num_threads(None)
    ref = ref_layer_norm(x, (1,), g, b)[0]
    assert_close(y, ref, _bar(ref), f"{threads} threads")


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
    assert_route({"pattern": "slices", "float32_pass": True}, fastnorm.layer_norm, x, eps=eps)
    y = fastnorm.layer_norm(x, eps=eps)
    assert np.all(np.isfinite(y))
    ref = ref_layer_norm(x, (1,), eps=eps)[0]
    assert_close(y, ref, _bar(ref), case)


@pytest.mark.parametrize("dtype", [np.float16, F32, np.float64])
@pytest.mark.parametrize("n", [1, 2, 7, 8, 9, 16, 31, 63, 64, 65])
def test_short_slices(dtype, n, simd_level):
    # 203 slices: groups of lanes end in a partial one.  float64 sits at an
    # offset that only the per-slice pivot takes out.
    offset = 1e9 if dtype == np.float64 else 2.0
    x = (_x32((203, n), 0.0).astype(np.float64) + offset).astype(dtype)
    rng = np.random.default_rng(14)
    g, b = rng.uniform(0.5, 2.0, n), rng.standard_normal(n)
    # (one value a slice: nothing is reduced, the values are columns)
    lane = n < 8 or n * np.dtype(dtype).itemsize > SHORT_ROW_BYTES
    assert_route({"pattern": "columns"} if n == 1 else LANES if lane else ROWS,
                 fastnorm.rms_norm, x, g)
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
    # (128 images: 81920 values, past the size from which calls take threads)
    x = _x32((128, 40, 4, 4), 3.0)
    rng = np.random.default_rng(15)
    g, b = rng.uniform(0.5, 2.0, 40), rng.standard_normal(40)
    fastnorm.set_num_threads(threads)
    try:
        assert_route(dict(ROWS, threads=threads), fastnorm.instance_norm, x, g, b)
        y = fastnorm.instance_norm(x, g, b)
    finally:
        fastnorm.set_num_threads(None)
    yr = ref_layer_norm(x, (2, 3), g.reshape(1, -1, 1, 1), b.reshape(1, -1, 1, 1))[0]
    assert_close(y, yr, _bar(yr), f"instance_norm, {threads} threads")
    assert np.array_equal(y, fastnorm.instance_norm(x, g, b))


# --------------------------------------------------------------------------
# reads that end where x ends

def data(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    return (1e3 + rng.standard_normal(shape) * 3).astype(dtype)


def tol(dtype):
    return {np.float16: 4e-3, np.float32: 2e-6, np.float64: 1e-12}[dtype]


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("n", [1, 63, 64, 65, 1000, 2048, 4096 + 17, 3 * 4096])
@pytest.mark.parametrize("threads", [1, 2])
def test_contiguous_rows_fetch_ahead_across_rows(dtype, n, threads):
    # Enough rows for more than the distance fetched.
    x = at_the_end_of_memory(data((max(37, 20000 // n), n), dtype))
    fastnorm.set_num_threads(threads)
    try:
        # (rows of one value: nothing reduced, the values are columns)
        assert_route({"pattern": "columns" if n == 1 else "slices"}, fastnorm.layer_norm, x,
                     axis=-1)
        mean, var = fastnorm.mean_var(x, axis=-1, keepdims=True)
        y = np.empty_like(x)
        fastnorm.layer_norm(x, axis=-1, out=y)
        fresh = fastnorm.layer_norm(x, axis=-1)
        rms = fastnorm.rms_norm(x, axis=-1)
    finally:
        fastnorm.set_num_threads(None)
    ref_mean, ref_var, _ = ref_mean_var(x, (1,))
    assert_close(mean, ref_mean, tol(dtype) * (1 + np.abs(ref_mean)), "mean")
    assert_close(var, ref_var, 4 * tol(dtype) * ref_var + 1e-30, "var")
    ref_y = ref_layer_norm(x, (1,))[0]
    assert_close(y, ref_y, 8 * tol(dtype) * (1 + np.abs(ref_y)), "layer_norm out=")
    assert_close(fresh, ref_y, 8 * tol(dtype) * (1 + np.abs(ref_y)), "layer_norm fresh")
    ref_r = ref_rms_norm(x, (1,))[0]
    assert_close(rms, ref_r, 8 * tol(dtype) * (1 + np.abs(ref_r)), "rms_norm")


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("n", [8, 33, 100, 255])
def test_short_rows_out_of_cache_fetch_ahead_of_each_group(dtype, n):
    # Short rows fetch ahead only in calls too large for the cache (x alone
    # over the cached bound: 4 MiB on the test machine, float64 2 MiB):
    # just over that, ending at the last readable byte.
    bound = CACHED[np.dtype(dtype).itemsize][0]
    x = at_the_end_of_memory(data((bound // (n * np.dtype(dtype).itemsize) + 37, n), dtype))
    y = np.empty_like(x)
    short = n * np.dtype(dtype).itemsize <= SHORT_ROW_BYTES
    for call in (fastnorm.layer_norm, fastnorm.rms_norm, fastnorm.mean_var):
        assert_route(dict(ROWS if short else WHOLE, in_cache=False), call, x, axis=-1)
    fastnorm.layer_norm(x, axis=-1, out=y)
    fresh = fastnorm.layer_norm(x, axis=-1)
    rms = fastnorm.rms_norm(x, axis=-1)
    mean, var = fastnorm.mean_var(x, axis=-1, keepdims=True)
    ref_y = ref_layer_norm(x, (1,))[0]
    assert_close(y, ref_y, 8 * tol(dtype) * (1 + np.abs(ref_y)), "layer_norm out=")
    assert_close(fresh, ref_y, 8 * tol(dtype) * (1 + np.abs(ref_y)), "layer_norm fresh")
    ref_r = ref_rms_norm(x, (1,))[0]
    assert_close(rms, ref_r, 8 * tol(dtype) * (1 + np.abs(ref_r)), "rms_norm")
    ref_mean, ref_var, _ = ref_mean_var(x, (1,))
    assert_close(var, ref_var, 4 * tol(dtype) * ref_var + 1e-30, "var")


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
@pytest.mark.parametrize("n", [129, 1000, 2048 + 3, "longest", "longer"])
def test_statistics_alone_of_rows_from_memory_go_grouped(dtype, n):
    # float16/float32 rows whose statistics are all a call computes go
    # grouped out of cache too, each row fetching ahead as it is read, up to
    # the cached row length; longer rows go whole.  x just over the cached
    # bound (with no y, twice its rows would fit), ending at the last
    # readable byte; an odd count leaves a partial group.
    itemsize = np.dtype(dtype).itemsize
    total, row = CACHED[itemsize]
    n = {"longest": row // itemsize, "longer": row // itemsize + 1}.get(n, n)
    x = at_the_end_of_memory(data((total // (n * itemsize) + 37, n), dtype, seed=n))
    assert_route(dict(ROWS if n * itemsize <= row else WHOLE, in_cache=False),
                 fastnorm.mean_var, x, axis=-1)
    results = []
    for threads in (1, 2):
        fastnorm.set_num_threads(threads)
        try:
            results.append(fastnorm.mean_var(x, axis=-1, keepdims=True, dtype=np.float64))
        finally:
            fastnorm.set_num_threads(None)
    (mean, var), (mean2, var2) = results
    assert np.array_equal(mean, mean2) and np.array_equal(var, var2)
    ref_mean, ref_var, _ = ref_mean_var(x, (1,))
    assert_close(mean, ref_mean, 1e-12 * (1 + np.abs(ref_mean)), "mean")
    assert_close(var, ref_var, 1e-9 * ref_var, "var")


# --------------------------------------------------------------------------
# rows from memory in turns

# The test machine with a last-level cache three times as large: the x of
# these tests is below its stream size, and x and y above its cached bound,
# so the same rows go whole, slice by slice.
BIG_L3 = _machine.Machine(l1d=_machine.MACHINE.l1d, l2=_machine.MACHINE.l2,
                          l3=3 * _machine.MACHINE.l3, cores=_machine.MACHINE.cores,
                          source="test")


@pytest.mark.parametrize("n", [1000, 4096 + 17, 2 * 4096 + 515])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("y_rows", ["contiguous", "apart"])
def test_turns_give_the_bits_of_whole_slices(n, threads, y_rows):
    # float32 rows (the float32 pass) in blocks of 4096 values and a tail;
    # y's rows contiguous, or one value apart (each row's pieces then start
    # at another alignment).  The rows end at the last readable byte of x's
    # memory.  Against the same calls slice by slice: the same bits, and
    # right.
    dtype = np.float32
    itemsize = np.dtype(dtype).itemsize
    x = at_the_end_of_memory(data((_T["stream_min_bytes"] // (n * itemsize) + 3, n), dtype))
    rng = np.random.default_rng(n)
    g, b = rng.uniform(0.5, 2.0, n), rng.standard_normal(n)

    def out():
        return np.empty((x.shape[0], n + (y_rows == "apart")), dtype)[:, :n]

    def calls():
        y, o1, o2 = out(), out(), out()
        return (fastnorm.layer_norm(x, g, b, out=y, return_stats=True)
                + (fastnorm.layer_norm(x, out=o1), fastnorm.rms_norm(x, g, out=o2),
                   fastnorm.layer_norm(x), fastnorm.rms_norm(x)))

    fastnorm.set_num_threads(threads)
    try:
        for func, args in ((fastnorm.layer_norm, (g, b)), (fastnorm.rms_norm, (g,))):
            assert_route(dict(TURNS, threads=threads), func, x, *args, out=out())
            assert_route(dict(TURNS, threads=threads), func, x, *args)
        turns = calls()
        with _machine.use(BIG_L3):
            assert_route(dict(WHOLE, threads=threads), fastnorm.layer_norm, x, g, b, out=out())
            whole = calls()
    finally:
        fastnorm.set_num_threads(None)
    for k, (a, w) in enumerate(zip(turns, whole)):
        assert a.tobytes() == w.tobytes(), f"result {k}: turns and whole slices differ"
    y, mean, rstd, plain, rms, fresh, fresh_rms = turns
    ref_y, ref_mean, ref_rstd = ref_layer_norm(x, (1,), g, b)[:3]
    assert_close(y, ref_y, 8 * tol(dtype) * (1 + np.abs(ref_y)), "layer_norm out=")
    assert_close(mean.ravel(), ref_mean.ravel(), tol(dtype) * (1 + np.abs(ref_mean.ravel())),
                 "mean")
    assert_close(rstd.ravel(), ref_rstd.ravel(), 4 * tol(dtype) * ref_rstd.ravel(), "rstd")
    ref_plain = ref_layer_norm(x, (1,))[0]
    assert_close(plain, ref_plain, 8 * tol(dtype) * (1 + np.abs(ref_plain)), "layer_norm")
    assert_close(fresh, ref_plain, 8 * tol(dtype) * (1 + np.abs(ref_plain)), "fresh")
    ref_r = ref_rms_norm(x, (1,), g)[0]
    assert_close(rms, ref_r, 8 * tol(dtype) * (1 + np.abs(ref_r)), "rms_norm")
    ref_r = ref_rms_norm(x, (1,))[0]
    assert_close(fresh_rms, ref_r, 8 * tol(dtype) * (1 + np.abs(ref_r)), "fresh rms_norm")


@pytest.mark.parametrize("mask", ["trailing", "leading", "random", "rows", "runs"])
@pytest.mark.parametrize("threads", [1, 2])
def test_masked_rows_from_memory_streamed(mask, threads):
    # where= over rows from memory into a streamed out=: rows with
    # trailing (or leading) padding of any length, none or all of a row
    # selected, lanes at random, whole rows left out, long runs with mixed
    # pieces between (each stretch's last part line goes through the
    # blend).  The unselected values of y untouched, the rest right
    # against float64.
    n = 1000
    x = at_the_end_of_memory(data((_T["stream_min_bytes"] // (n * 4) + 3, n), np.float32))
    rows = x.shape[0]
    rng = np.random.default_rng(rows)
    lengths = rng.integers(0, n + 1, (rows, 1))
    lengths[:3] = [[0], [n], [n - 1]]
    where = {"trailing": np.arange(n) < lengths,
             "leading": np.arange(n) >= lengths,
             "random": rng.random((rows, n)) < 0.5,
             "rows": rng.random((rows, 1)) < 0.7,
             "runs": (np.arange(n) // rng.integers(1, 300, (rows, 1))) % 3 != 0}[mask]
    g, b = rng.uniform(0.5, 2.0, n), rng.standard_normal(n)
    sel = np.broadcast_to(where, x.shape)
    y, rms = np.full(x.shape, -7, np.float32), np.full(x.shape, -7, np.float32)
    fastnorm.set_num_threads(threads)
    try:
        assert_route(dict(WHOLE, threads=threads, streams=True), fastnorm.layer_norm, x, g, b,
                     where=where, out=np.empty_like(x))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)     # rows none selected
            _, mean, _ = fastnorm.layer_norm(x, g, b, where=where, out=y, return_stats=True)
            fastnorm.rms_norm(x, g, where=where, out=rms)
    finally:
        fastnorm.set_num_threads(None)
    assert (y[~sel] == -7).all() and (rms[~sel] == -7).all()
    xd = x.astype(np.float64)
    count = sel.sum(axis=1)
    some = count > 0
    with np.errstate(invalid="ignore", divide="ignore"):
        mu = np.where(sel, xd, 0).sum(axis=1) / count
        var = np.where(sel, (xd - mu[:, None]) ** 2, 0).sum(axis=1) / count
        ms = np.where(sel, xd * xd, 0).sum(axis=1) / count
    assert np.isnan(mean.ravel()[~some]).all()
    assert_close(mean.ravel()[some], mu[some], tol(np.float32) * (1 + np.abs(mu[some])), "mean")
    want = (xd - mu[:, None]) / np.sqrt(var[:, None] + 1e-5) * g + b
    keep = sel & some[:, None]
    assert_close(y[keep], want[keep], 8 * tol(np.float32) * (1 + np.abs(want[keep])), "y")
    want = xd / np.sqrt(ms[:, None] + 1e-5) * g
    assert_close(rms[keep], want[keep], 8 * tol(np.float32) * (1 + np.abs(want[keep])), "rms")


# The bytes of a turn's output piece (tuning.h's TURN_BYTES).
TURN_BYTES = 2048


@pytest.mark.parametrize("n", [TURN_BYTES // 4, TURN_BYTES // 4 + 1])
def test_rows_of_one_piece_go_whole(n):
    # A row of one piece would take its turns in the order slice by slice
    # has: rows of more than one piece take turns.
    x = data((_T["stream_min_bytes"] // (n * 4) + 3, n), np.float32)
    y = np.empty_like(x)
    assert_route(TURNS if n * 4 > TURN_BYTES else WHOLE, fastnorm.layer_norm, x, out=y)
    fastnorm.layer_norm(x, out=y)
    ref = ref_layer_norm(x, (1,))[0]
    assert_close(y, ref, 8 * tol(np.float32) * (1 + np.abs(ref)), "layer_norm")


@pytest.mark.parametrize("dtype", [np.float16, np.float64])
def test_rows_from_memory_without_the_float32_pass_go_whole(dtype):
    # The float64 pass fetches the next row as it writes one: no turns.
    x = data((_T["stream_min_bytes"] // (1000 * np.dtype(dtype).itemsize) + 3, 1000), dtype)
    assert_route(WHOLE, fastnorm.layer_norm, x, out=np.empty_like(x))
    y = fastnorm.layer_norm(x, out=np.empty_like(x))
    ref = ref_layer_norm(x, (1,))[0]
    assert_close(y, ref, 8 * tol(dtype) * (1 + np.abs(ref)), "layer_norm")


# layer_norm's pattern/schedule in each case: rows that follow each other or
# not, slices of one run or of several, NCHW channels image by image.
FETCH_CASES = {
    ("rows apart", "float32"): "slices/rows", ("rows apart", "float64"): "slices/whole",
    ("reversed rows", "float32"): "slices/rows", ("reversed rows", "float64"): "slices/whole",
    ("last axes", "float32"): "slices/whole", ("last axes", "float64"): "slices/whole",
    ("long runs", "float32"): "slices/whole", ("long runs", "float64"): "slices/whole",
    ("image by image", "float32"): "images/images", ("image by image", "float64"): "images/images",
    ("short runs image by image", "float32"): "images/images",
    ("short runs image by image", "float64"): "images/images",
}

@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", ["rows apart", "reversed rows", "last axes", "long runs",
                                  "image by image", "short runs image by image"])
def test_other_layouts_fetch_within_what_comes_next(dtype, case):
    if case == "rows apart":          # each row a run of its own, then a gap
        x = at_the_end_of_memory(data((40, 3000), dtype))[:, :2990]
        axes = (1,)
    elif case == "reversed rows":     # rows taken downwards
        x = at_the_end_of_memory(data((40, 3000), dtype))[::-1]
        axes = (1,)
    elif case == "last axes":         # (196, 768) slices, each one run
        x = at_the_end_of_memory(data((6, 49, 768), dtype))
        axes = (1, 2)
    elif case == "long runs":         # NCHW maps too long for the image pass
        x = at_the_end_of_memory(data((3, 5, 64, 64), dtype))
        axes = (0, 2, 3)
    elif case == "image by image":    # NCHW maps of 1-8 KiB: the image pass
        x = at_the_end_of_memory(data((4, 6, 30, 30), dtype))
        axes = (0, 2, 3)
    else:                             # maps of at most 1 KiB, 8 at a time
        x = at_the_end_of_memory(data((5, 43, 7, 7), dtype))
        axes = (0, 2, 3)
    assert schedule(fastnorm.layer_norm, x, axis=axes) == FETCH_CASES[case, np.dtype(dtype).name]
    mean, var = fastnorm.mean_var(x, axis=axes, keepdims=True)
    y = fastnorm.layer_norm(x, axis=axes)
    ref_mean, ref_var, _ = ref_mean_var(x, axes)
    assert_close(mean, ref_mean, tol(dtype) * (1 + np.abs(ref_mean)), "mean")
    assert_close(var, ref_var, 4 * tol(dtype) * ref_var, "var")
    ref_y = ref_layer_norm(x, axes)[0]
    assert_close(y, ref_y, 8 * tol(dtype) * (1 + np.abs(ref_y)), "layer_norm")


@pytest.mark.parametrize("fresh", [False, True], ids=["out", "fresh"])
@pytest.mark.parametrize("maps", [(64, 64), (45, 57), "cropped", "cropped 6 KiB"])
def test_eval_maps_fetch_into_the_next_run(maps, fresh):
    # float32 maps that do not go image by image (too long, or rows of a
    # map apart): each run fetches ahead into the run after it, the last run
    # of a channel into the next channel's first, the last channel's last
    # run nothing, and never further than the next run's end.
    if maps == "cropped":
        x = at_the_end_of_memory(data((3, 5, 30, 31), np.float32))[..., :30]
    elif maps == "cropped 6 KiB":     # runs shorter than the distance fetched
        x = at_the_end_of_memory(data((3, 5, 2, 1501), np.float32))[..., :1500]
    else:
        x = at_the_end_of_memory(data((3, 5) + maps, np.float32))
    rng = np.random.default_rng(2)
    mean = rng.uniform(990.0, 1010.0, 5)
    var = rng.uniform(1.0, 20.0, 5)
    y = None if fresh else np.empty_like(x)
    assert_route(dict(WHOLE, float32_pass=True), fastnorm.batch_norm, x, running_mean=mean,
                 running_var=var, training=False, out=y)
    y = fastnorm.batch_norm(x, running_mean=mean.copy(), running_var=var.copy(),
                            training=False, out=y)
    ref = (x.astype(np.float64) - mean[:, None, None]) / np.sqrt(var[:, None, None] + 1e-5)
    assert_close(y, ref, 8 * tol(np.float32) * (1 + np.abs(ref)), "batch_norm eval")
