"""Gradients of columns calls with gain per column (batch norm's features)
go in passes of at most `pass_groups` groups (a group: a tile of
`column_tile` columns of one outer slice), over pieces of the columns while
the outer slices are few and of the outermost kept axis otherwise (an index
that is still too many groups goes on alone, split again).  Each case
crosses those pieces; dx, dgamma and dbeta, each offset per piece, are
checked against the float64 closed form, and 1 and 2 threads give the same
bits."""
import numpy as np
import pytest

import fastnorm
from fastnorm import _simd
from reference import assert_close, expand_param, ref_norm_grads, tiny

GRADS = _simd.backward
TILE = GRADS.grad_column_tile
PASS = GRADS.grad_pass_groups
DX_TOL = {np.dtype(np.float32): 1e-5, np.dtype(np.float64): 1e-12}
PARAM_TOL = {np.dtype(np.float32): 1e-5, np.dtype(np.float64): 1e-12}

# (shape, reduced axes): pieces of the columns (the last piece takes what
# is left), and pieces of an outer axis whose single indices are split again.
CASES = {
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


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("training", [True, False], ids=["training", "eval"])
def test_batch_norm_gradients_in_pieces(case, dtype, training):
    shape, axes = CASES[case]
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
    dx, dgamma, dbeta = fastnorm.batch_norm_backward(dyr, xr, mean, rstd, gamma, axis=0)
    ref = ref_norm_grads(dyr, xr, (0,), (1,), gamma[None, :])
    tol = DX_TOL[np.dtype(dtype)]
    assert_close(dx, ref["dx"], tol * ref["dx_scale"] + tiny(dtype), "dx")
    assert_close(dgamma, ref["dgamma"][0], PARAM_TOL[np.dtype(dtype)] * ref["dgamma_scale"][0],
                 "dgamma")
    assert_close(dbeta, ref["dbeta"][0], PARAM_TOL[np.dtype(dtype)] * ref["dbeta_scale"][0],
                 "dbeta")
