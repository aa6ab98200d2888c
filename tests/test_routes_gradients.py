"""The gradients' routes, as fastnorm.explain names them: rows (single
contiguous runs along which gamma lies, rows a few at a time sharing the
parameter sums, half as many where rows lie a multiple of 4 KiB apart),
whole, images and channels (NCHW, test_routes_images.py)
and tiles (columns).

The dx pass works from coefficients made once per slice: dx = dy * (gamma
r) + (x - m) * k2 + k0; float32 dy and x into a float32 dx in float32
arithmetic (m the mean rounded to float32, k0 carrying its rounding rest),
float64 columns the same in float64; calls whose coefficients float32
cannot hold with room to spare, or whose rstd squared overflows, go back to
the unfolded float64 formula.  Columns calls with a gain per column go in
passes of at most `grad_pass_groups` groups (a tile of `grad_column_tile`
columns of one outer slice), over pieces of the columns or of the outermost
kept axis.  Every case is compared with the closed form in float64 on the
very same values; 1 and 2 threads give the same bits.
"""
import numpy as np
import pytest

import fastnorm
from fastnorm import _simd
from reference import assert_close, expand_param, ref_norm_grads, tiny
from routes import assert_route, route, schedule

F32 = np.float32
F16, F64 = np.dtype(np.float16), np.dtype(np.float64)
EPS = 1e-5
TILES = {"pattern": "columns", "schedule": "tiles"}


# --------------------------------------------------------------------------
# the dx pass

# name: (x shape, reduced axes, axes gamma varies along, call).  Each name
# says which way through the kernels the case goes.
CASES = {
    "columns": ((300, 70), (0,), (1,), "batch"),            # batch norm over (N, C)
    "columns-wide": ((40, 1100), (0,), (1,), "batch"),      # two tiles of columns
    "short-maps": ((40, 12, 3, 3), (0, 2, 3), (1,), "batch"),  # (N, C*9) columns in groups
    "channel-runs": ((6, 5, 20, 20), (0, 2, 3), (1,), "batch"),  # one gamma per run
    "rows": ((50, 300), (1,), (1,), "layer"),               # rows side by side
    # rows a page apart (float32; float64 two): half a group side by side,
    # 21 rows leave one for the slice-by-slice way
    "rows-page": ((21, 1024), (1,), (1,), "layer"),
    "two-axes": ((6, 10, 33), (1, 2), (1, 2), "layer"),     # gamma along runs, 10 runs
    "rms-rows": ((50, 300), (1,), (1,), "rms"),
    "eval-columns": ((300, 70), (0,), (1,), "eval"),
    "eval-runs": ((6, 5, 20, 20), (0, 2, 3), (1,), "eval"),
}


# Where each case goes, float32 and float64 alike.
CASE_ROUTES = {
    "columns": "columns/tiles", "columns-wide": "columns/tiles", "short-maps": "images/channels",
    "channel-runs": "images/images", "rows": "slices/rows", "rows-page": "slices/rows",
    "two-axes": "slices/rows",              # the two axes merge into runs of 330 values
    "rms-rows": "slices/rows", "eval-columns": "columns/tiles", "eval-runs": "images/images",
}

def _problem(shape, axes, along, offset, seed=0, dtype=F32):
    rng = np.random.default_rng(seed)
    x = (offset + rng.standard_normal(shape)).astype(dtype)
    dy = rng.standard_normal(shape).astype(dtype)
    gamma = rng.uniform(0.5, 2.0, [shape[i] if i in along else 1 for i in range(len(shape))])
    return x, dy, gamma


def _stats(x, axes, kind):
    """float64 statistics in keepdims layout, as the kernels take them."""
    xd = x.astype(np.float64)
    if kind == "rms":
        return np.zeros((1,) * x.ndim), 1 / np.sqrt((xd * xd).mean(axes, keepdims=True) + EPS)
    mean = xd.mean(axes, keepdims=True)
    return mean, 1 / np.sqrt(xd.var(axes, keepdims=True) + EPS)


def _grad(kind, dy, x, mean, rstd, gamma, axes):
    if kind == "layer":
        return fastnorm.layer_norm_backward(dy, x, mean, rstd, gamma, axis=axes)[0]
    if kind == "rms":
        return fastnorm.rms_norm_backward(dy, x, rstd, gamma, axis=axes)[0]
    return fastnorm.batch_norm_backward(dy, x, mean, rstd, gamma, axis=axes,
                                        training=kind == "batch")[0]


def _route(kind, dy, x, mean, rstd, gamma, axes):
    """pattern/schedule of the call _grad makes."""
    if kind == "layer":
        return schedule(fastnorm.layer_norm_backward, dy, x, mean, rstd, gamma, axis=axes)
    if kind == "rms":
        return schedule(fastnorm.rms_norm_backward, dy, x, rstd, gamma, axis=axes)
    return schedule(fastnorm.batch_norm_backward, dy, x, mean, rstd, gamma, axis=axes,
                    training=kind == "batch")

def _reference(kind, dy, x, mean, rstd, gamma, axes):
    """dx in float64 from the statistics as given (not recomputed), and the
    sum of the magnitudes of its terms (the tolerance's scale)."""
    xd, gd = x.astype(np.float64), dy.astype(np.float64) * gamma
    mean, rstd = np.asarray(mean, np.float64), np.asarray(rstd, np.float64)
    if kind == "eval":
        return rstd * gd, np.abs(rstd * gd)
    xhat = (xd - mean) * rstd
    mean_gd = gd.mean(axes, keepdims=True) if kind != "rms" else 0.0
    mean_gdx = (gd * xhat).mean(axes, keepdims=True)
    scale = np.abs(gd) + np.abs(gd).mean(axes, keepdims=True) * (kind != "rms")
    scale = scale + np.abs(xhat) * np.abs(gd * xhat).mean(axes, keepdims=True)
    return rstd * (gd - mean_gd - xhat * mean_gdx), rstd * scale


# A few roundings of the terms (gamma r, the coefficients, two products and
# two sums), each relative to the terms' magnitudes.
TOL = 8 * np.finfo(F32).eps


TOL64 = 8 * np.finfo(np.float64).eps


@pytest.mark.parametrize("offset", [0.0, 3.0, 1e6])
@pytest.mark.parametrize("case", sorted(CASES))
def test_float32_dx_matches_float64(case, offset, simd_level):
    shape, axes, along, kind = CASES[case]
    x, dy, gamma = _problem(shape, axes, along, offset)
    mean, rstd = _stats(x, axes, kind)
    assert _route(kind, dy, x, mean, rstd, gamma, axes) == CASE_ROUTES[case]
    dx = _grad(kind, dy, x, mean, rstd, gamma, axes)
    assert dx.dtype == F32
    ref, scale = _reference(kind, dy, x, mean, rstd, gamma, axes)
    assert_close(dx, ref, TOL * scale, f"{case} dx")


@pytest.mark.parametrize("offset", [0.0, 1e12])
@pytest.mark.parametrize("case", sorted(CASES))
def test_float64_dx_matches_the_closed_form(case, offset, simd_level):
    shape, axes, along, kind = CASES[case]
    x, dy, gamma = _problem(shape, axes, along, offset, dtype=np.float64)
    mean, rstd = _stats(x, axes, kind)
    assert _route(kind, dy, x, mean, rstd, gamma, axes) == CASE_ROUTES[case]
    dx = _grad(kind, dy, x, mean, rstd, gamma, axes)
    assert dx.dtype == np.float64
    ref, scale = _reference(kind, dy, x, mean, rstd, gamma, axes)
    assert_close(dx, ref, TOL64 * scale, f"{case} dx")


@pytest.mark.parametrize("case", ["columns", "columns-wide", "eval-columns"])
def test_float64_columns_hand_back_when_rstd_squared_overflows(case):
    # rstd 1e160 given: rstd^2 overflows float64, dx (about rstd^3 *
    # spread^2 with a spread of 1e-160) does not; the unfolded formula
    # takes the call.
    shape, axes, along, kind = CASES[case]
    x, dy, gamma = _problem(shape, axes, along, 0.0, seed=4, dtype=np.float64)
    x = x * 1e-160
    mean, rstd = _stats(x, axes, kind)
    rstd = np.full_like(rstd, 1e160)
    assert _route(kind, dy, x, mean, rstd, gamma, axes) == CASE_ROUTES[case]
    dx = _grad(kind, dy, x, mean, rstd, gamma, axes)
    ref, scale = _reference(kind, dy, x, mean, rstd, gamma, axes)
    assert np.isfinite(ref).all()
    assert np.isfinite(dx).all(), f"{case}: float64 overflow"
    assert_close(dx, ref, TOL64 * scale, f"{case} dx")


@pytest.mark.parametrize("case", ["columns", "channel-runs", "rows", "two-axes"])
def test_float32_statistics_give_the_same_dx(case):
    # The statistics as float32 (what return_stats gives for float32 data):
    # the mean is then a float32 value exactly, no rounding rest.
    shape, axes, along, kind = CASES[case]
    x, dy, gamma = _problem(shape, axes, along, 1e6, seed=1)
    mean, rstd = (s.astype(F32) for s in _stats(x, axes, kind))
    assert _route(kind, dy, x, mean, rstd, gamma, axes) == CASE_ROUTES[case]
    dx = _grad(kind, dy, x, mean, rstd, gamma, axes)
    ref, scale = _reference(kind, dy, x, mean, rstd, gamma, axes)
    assert_close(dx, ref, TOL * scale, f"{case} dx")


# Coefficients float32 cannot hold with room to spare: the call goes the
# float64 way and still matches the reference (no inf, no flush to zero).
@pytest.mark.parametrize("case", ["columns", "short-maps", "channel-runs", "rows", "two-axes"])
@pytest.mark.parametrize("what", ["huge-mean", "huge-gamma", "tiny-gamma", "huge-rstd"])
def test_float32_dx_hands_back_to_float64(case, what):
    shape, axes, along, kind = CASES[case]
    x, dy, gamma = _problem(shape, axes, along, 0.0, seed=2)
    if what == "huge-mean":
        x = (x.astype(np.float64) * 1e24 + 1e31).astype(F32)   # mean beyond 1e30
    elif what == "huge-gamma":
        gamma = gamma * 1e31                                   # gamma * rstd beyond 1e30
    elif what == "tiny-gamma":
        gamma = gamma * 1e-33                                  # would flush towards zero
    else:
        x = (1e-10 * x.astype(np.float64)).astype(F32)
    mean, rstd = _stats(x, axes, kind)
    if what == "huge-rstd":
        # rstd given: r^2 * b (about r^3 * spread, 1e41) overflows float32,
        # dx (about r^3 * spread^2) does not; the mean a float32 value, so
        # that nothing else is out of range.
        rstd = np.full_like(rstd, 1e17)
        mean = mean.astype(F32).astype(np.float64)
    assert _route(kind, dy, x, mean, rstd, gamma, axes) == CASE_ROUTES[case]
    dx = _grad(kind, dy, x, mean, rstd, gamma, axes)
    ref, scale = _reference(kind, dy, x, mean, rstd, gamma, axes)
    assert np.isfinite(ref).all()
    assert np.isfinite(dx).all(), f"{case} {what}: float32 overflow"
    assert_close(dx, ref, TOL * scale + np.finfo(F32).tiny * 4, f"{case} {what} dx")


@pytest.mark.parametrize("case", ["columns", "channel-runs", "rows"])
def test_float32_dx_nonfinite_dy(case):
    # A NaN and an inf in dy: every dx of their slices is NaN or inf (their
    # sums are), every other slice's dx is as without them.
    shape, axes, along, kind = CASES[case]
    x, dy, gamma = _problem(shape, axes, along, 0.0, seed=3)
    clean = dy.copy()
    dy.flat[5] = np.nan
    dy.flat[-7] = np.inf
    mean, rstd = _stats(x, axes, kind)
    assert _route(kind, dy, x, mean, rstd, gamma, axes) == CASE_ROUTES[case]
    dx = _grad(kind, dy, x, mean, rstd, gamma, axes)
    hit = np.broadcast_to(~np.isfinite(dy).all(axes, keepdims=True), x.shape)
    assert hit.any() and not hit.all()
    assert not np.isfinite(dx[hit]).any()
    ref, scale = _reference(kind, clean, x, mean, rstd, gamma, axes)
    assert_close(dx[~hit], ref[~hit], TOL * scale[~hit], f"{case} dx")


# --------------------------------------------------------------------------
# columns: passes over pieces, sweeps of strips

GRADS = _simd.backward


TILE = GRADS.grad_column_tile


PASS = GRADS.grad_pass_groups


DX_TOL = {np.dtype(np.float32): 1e-5, np.dtype(np.float64): 1e-12}


PARAM_TOL = {np.dtype(np.float32): 1e-5, np.dtype(np.float64): 1e-12}


# (shape, reduced axes): pieces of the columns (the last piece takes what
# is left), and pieces of an outer axis whose single indices are split again.
PIECES = {
    "columns, one past a pass": ((3, PASS * TILE + 1), (0,)),
    "columns, two passes and a ragged tile": ((4, 2 * PASS * TILE + TILE + 5), (0,)),
    "outer pieces": ((40, 4, 700), (1,)),
    "outer indices split again": ((34, 17, 3, 1025), (2,)),
}


def _inputs(shape, dtype, seed):
    rng = np.random.default_rng(seed)
    scale = 1.0 + rng.random(shape[-1])
    x = (3.0 + rng.standard_normal(shape) * scale).astype(dtype)
    dy = rng.standard_normal(shape).astype(dtype)
    return x, dy, rng


@pytest.mark.parametrize("case", list(PIECES))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("training", [True, False], ids=["training", "eval"])
def test_batch_norm_gradients_in_pieces(case, dtype, training):
    shape, axes = PIECES[case]
    x, dy, rng = _inputs(shape, dtype, len(case))
    along = tuple(i for i in range(x.ndim) if i not in axes)
    kept = tuple(shape[i] for i in along)
    assert np.prod(kept) // shape[-1] * -(-shape[-1] // TILE) > PASS, "no passes here"
    gamma = rng.uniform(0.5, 2.0, kept)
    gk = expand_param(gamma, shape, along)
    if training:
        # float64 statistics, as the reference computes them: those that
        # batch_norm returns for float32 are rounded to float32, which moves
        # xhat of a column of three close values beyond the tolerance.
        xd = x.astype(np.float64)
        mean = xd.mean(axis=axes, keepdims=True)
        rstd = 1.0 / np.sqrt(((xd - mean) ** 2).mean(axis=axes, keepdims=True) + 1e-5)
        ref = ref_norm_grads(dy, x, axes, along, gk)
    else:
        r_mean = rng.standard_normal(kept)
        r_var = rng.uniform(0.5, 2.0, kept)
        mean, rstd = r_mean, 1.0 / np.sqrt(r_var + 1e-5)
        stats = (expand_param(mean, shape, along), expand_param(rstd, shape, along))
        ref = ref_norm_grads(dy, x, axes, along, gk, "scale", stats=stats)
    assert_route(TILES, fastnorm.batch_norm_backward, dy, x, mean, rstd, gamma, axis=axes,
                 training=training)
    results = {}
    for threads in (1, 2):
        fastnorm.set_num_threads(threads)
        try:
            results[threads] = fastnorm.batch_norm_backward(dy, x, mean, rstd, gamma, axis=axes,
                                                            training=training)
        finally:
            fastnorm.set_num_threads(None)
    dx, dgamma, dbeta = results[1]
    assert dx.shape == shape and dgamma.shape == kept and dbeta.shape == kept
    tol = DX_TOL[np.dtype(dtype)]
    assert_close(dx, ref["dx"], tol * ref["dx_scale"] + tiny(dtype), "dx")
    ptol = PARAM_TOL[np.dtype(dtype)]
    assert_close(dgamma, ref["dgamma"].reshape(kept), ptol * ref["dgamma_scale"].reshape(kept),
                 "dgamma")
    assert_close(dbeta, ref["dbeta"].reshape(kept), ptol * ref["dbeta_scale"].reshape(kept),
                 "dbeta")
    for one, two in zip(results[1], results[2]):
        np.testing.assert_array_equal(two.view(np.uint8), one.view(np.uint8))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_reversed_features_in_pieces(dtype):
    # Negative strides turn round before the pieces are cut: gamma and the
    # gradients' buffers move with x.
    shape = (4, PASS * TILE + TILE + 3)
    x, dy, rng = _inputs(shape, dtype, 9)
    xr, dyr = x[:, ::-1], dy[:, ::-1]
    gamma = rng.uniform(0.5, 2.0, shape[1])
    _, mean, rstd = fastnorm.batch_norm(xr, gamma, axis=0, return_stats=True)
    assert_route(TILES, fastnorm.batch_norm_backward, dyr, xr, mean, rstd, gamma, axis=0)
    dx, dgamma, dbeta = fastnorm.batch_norm_backward(dyr, xr, mean, rstd, gamma, axis=0)
    ref = ref_norm_grads(dyr, xr, (0,), (1,), gamma[None, :])
    tol = DX_TOL[np.dtype(dtype)]
    assert_close(dx, ref["dx"], tol * ref["dx_scale"] + tiny(dtype), "dx")
    assert_close(dgamma, ref["dgamma"][0], PARAM_TOL[np.dtype(dtype)] * ref["dgamma_scale"][0],
                 "dgamma")
    assert_close(dbeta, ref["dbeta"][0], PARAM_TOL[np.dtype(dtype)] * ref["dbeta_scale"][0],
                 "dbeta")


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
    assert_route(TILES, fastnorm.batch_norm_backward, dy, x, mean, rstd, g, axis=0)
    dx, dgamma, dbeta = fastnorm.batch_norm_backward(dy, x, mean, rstd, g, axis=0)
    ref = ref_norm_grads(dy, x, (0,), (1,), g.reshape(1, -1), "center",
                         stats=(mean.reshape(1, -1), rstd.reshape(1, -1)))
    rounding = np.finfo(dtype).eps
    assert_close(dx, ref["dx"], 4 * rounding * ref["dx_scale"], f"dx {case}")
    assert_close(dgamma, ref["dgamma"].reshape(-1), 1e-12 * ref["dgamma_scale"].reshape(-1),
                 f"dgamma {case}")
    assert_close(dbeta, ref["dbeta"].reshape(-1), 1e-12 * ref["dbeta_scale"].reshape(-1),
                 f"dbeta {case}")


@pytest.mark.parametrize("dtype", [F32, F64])
def test_gradient_rows_in_cache_up_to_the_cached_bound(dtype):
    # x, dy and dx, all the call reads and writes, within the cached bound:
    # in cache (float32 rows then fetch nothing ahead); one row more: not.
    # Both right.
    t = _simd.kernels.tuning()
    bound = t["cached_bytes_f64"] if dtype == F64 else t["cached_bytes"]
    n = 1000
    rows = bound // (3 * n * np.dtype(dtype).itemsize)
    rng = np.random.default_rng(5)
    gamma = rng.uniform(0.5, 2.0, n)
    for count, inside in ((rows, True), (rows + 1, False)):
        x = (0.5 + rng.standard_normal((count, n))).astype(dtype)
        dy = rng.standard_normal((count, n)).astype(dtype)
        _, m, r = fastnorm.layer_norm(x, gamma, return_stats=True)
        assert_route({"pattern": "slices", "schedule": "rows", "in_cache": inside},
                     fastnorm.layer_norm_backward, dy, x, m, r, gamma)
        dx, dg, db = fastnorm.layer_norm_backward(dy, x, m, r, gamma)
        ref = ref_norm_grads(dy, x, (1,), (1,), expand_param(gamma, x.shape, (1,)))
        tol = 1e-12 if dtype == F64 else 1e-5
        assert_close(dx, ref["dx"], tol * ref["dx_scale"] + tiny(dtype), "dx")
        assert_close(dg, ref["dgamma"].reshape(n), tol * ref["dgamma_scale"].reshape(n),
                     "dgamma")
        assert_close(db, ref["dbeta"].reshape(n), tol * ref["dbeta_scale"].reshape(n), "dbeta")


# --------------------------------------------------------------------------
# outputs larger than the caches: streamed

@pytest.mark.parametrize("func, shape, axes, dtype", [
    ("layer", (1100, 1001), (1,), F64),     # odd rows: dx vectors start unaligned
    ("layer", (2100, 1001), (1,), F32),
    ("layer", (4200, 1001), (1,), F16),
    ("batch", (16, 64, 33, 33), (0, 2, 3), F64),
    ("batch", (8200, 257), (0,), F32),      # columns; rows start unaligned
], ids=["layer-f64", "layer-f32", "layer-f16", "batch-nchw-f64", "batch-columns-f32"])
def test_outputs_larger_than_the_caches(func, shape, axes, dtype):
    # dx of stream_min_bytes and more is written with non-temporal stores:
    # the leading axis grows until dx is that large.
    rng = np.random.default_rng(12)
    stream = _simd.kernels.tuning()["stream_min_bytes"]
    rest = int(np.prod(shape[1:])) * np.dtype(dtype).itemsize
    shape = (max(shape[0], -(-stream // rest)),) + tuple(shape[1:])
    x = (0.5 + rng.standard_normal(shape)).astype(dtype)
    dy = rng.standard_normal(shape).astype(dtype)
    assert x.nbytes >= stream
    nd = len(shape)
    along = axes if func == "layer" else tuple(i for i in range(nd) if i not in axes)
    gamma = rng.uniform(0.5, 2.0, tuple(shape[i] for i in along))
    if func == "layer":
        _, m, r = fastnorm.layer_norm(x, gamma, axis=axes, return_stats=True)
        # A fresh dx written in address order takes ordinary stores; into an
        # existing array it is streamed.
        assert_route({"pattern": "slices", "schedule": "rows", "streams": False},
                     fastnorm.layer_norm_backward, dy, x, m, r, gamma, axis=axes)
        assert route(fastnorm.layer_norm_backward, dy, x, m, r, gamma, axis=axes,
                     out=(np.empty_like(x), None, None))["streams"]
        res = fastnorm.layer_norm_backward(dy, x, m, r, gamma, axis=axes)
    else:
        _, m, r = fastnorm.batch_norm(x, gamma, axis=axes, return_stats=True)
        # (NCHW channels of 33 x 33 float64 values: slice by slice, streamed
        # either way)
        assert_route({"pattern": "slices", "schedule": "whole", "streams": True} if len(shape) == 4
                     else dict(TILES, streams=False),
                     fastnorm.batch_norm_backward, dy, x, m, r, gamma, axis=axes)
        assert route(fastnorm.batch_norm_backward, dy, x, m, r, gamma, axis=axes,
                     out=(np.empty_like(x), None, None))["streams"]
        res = fastnorm.batch_norm_backward(dy, x, m, r, gamma, axis=axes)
    ref = ref_norm_grads(dy, x, axes, along, expand_param(gamma, shape, along))
    tol = {F64: 1e-12, F32: 1e-5, F16: 4e-3}[dtype]
    assert_close(res[0], ref["dx"], tol * ref["dx_scale"] + tiny(dtype), "dx")
    ptol = 1e-12 if dtype == F64 else 1e-5
    assert_close(res[1], ref["dgamma"].reshape(gamma.shape),
                 ptol * ref["dgamma_scale"].reshape(gamma.shape), "dgamma")
    assert_close(res[2], ref["dbeta"].reshape(gamma.shape),
                 ptol * ref["dbeta_scale"].reshape(gamma.shape), "dbeta")
