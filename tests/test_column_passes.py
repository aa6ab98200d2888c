"""Columns calls of many groups (a group: a tile of `column_tile` columns of
one outer slice) go in passes of at most `pass_groups` groups, over pieces
of the columns while the outer slices are few and of the outermost kept
axis otherwise (an index of it that is still too many groups goes on its
own, that axis dropped), so that their scratch stays small.  Each case
crosses those pieces and is checked against the float64 reference, with
every operand that is offset per piece: x, y, gamma and beta per column,
the statistics written, the running statistics read."""
import numpy as np
import pytest

import fastnorm
from fastnorm import _simd
from reference import OUT_TOL, assert_close, ref_layer_norm, ref_mean_var

KERNELS = _simd.kernels
TILE = KERNELS.column_tile
PASS = KERNELS.pass_groups
EPS = 1e-5
ACC = {np.dtype(np.float32): 1e-6, np.dtype(np.float64): 1e-12}

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
    mean, var = fastnorm.mean_var(x, axis=axis, keepdims=True, dtype=np.float64)
    ref_m, ref_v, spread = ref_mean_var(x, (axis,))
    assert_close(mean, ref_m, 1e-6 * spread, "mean")
    assert_close(var, ref_v, 1e-6 * spread ** 2, "var")
    y = fastnorm.layer_norm(x, axis=axis)
    ref = ref_layer_norm(x, (axis,))[0]
    assert_close(y, ref, OUT_TOL[np.dtype(np.float32)] * (np.abs(ref) + 1.0), "layer_norm")


def test_passes_do_not_depend_on_threads():
    x = _x((5, 2 * PASS * TILE + 3), np.float32, 3)
    got = []
    for n in (1, 2):
        fastnorm.set_num_threads(n)
        got.append(fastnorm.layer_norm(x, axis=0, return_stats=True))
    fastnorm.set_num_threads(None)
    for a, b in zip(*got):
        np.testing.assert_array_equal(a, b)
