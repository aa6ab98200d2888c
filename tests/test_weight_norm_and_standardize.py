"""weight_norm and weight_standardize against plain float64 references over
drawn weight shapes, axes, dtypes and layouts, and what each promises:
weight norm gives directions of norm |g| along v, standardized weights have
mean 0 and variance var / (var + eps)."""
import numpy as np
import pytest
from hypothesis import given

import fastnorm
from reference import (OUT_TOL, assert_close, expand_param, fingerprint, norm_axes, out_dtype,
                       ref_layer_norm, ref_weight_norm, stat_dtype, tiny, tolerances)
from strategies import build_param, build_x, weight_specs


def _weight_axes(axis, nd):
    return tuple(range(1, nd)) if axis is None else norm_axes(axis, nd)


@given(weight_specs())
def test_weight_norm_matches_reference(spec):
    rng = np.random.default_rng(spec["seed"])
    nd = len(spec["shape"])
    axes = _weight_axes(spec["axis"], nd)
    kept = tuple(i for i in range(nd) if i not in axes)
    v = build_x(spec, axes, rng)
    g = build_param(spec["g"], v.shape, kept, rng, "gamma")
    fps = (fingerprint(v), fingerprint(g) if g is not None else None)
    w, norm = fastnorm.weight_norm(v, g, axis=spec["axis"], return_norm=True)
    assert (fingerprint(v), fingerprint(g) if g is not None else None) == fps
    res_dt = out_dtype(v.dtype)
    sdt = stat_dtype(res_dt)
    assert w.shape == v.shape and w.dtype == res_dt, (w.shape, w.dtype)
    kshape = tuple(1 if i in axes else s for i, s in enumerate(v.shape))
    assert norm.shape == kshape and norm.dtype == sdt, (norm.shape, norm.dtype)
    gk = expand_param(g, v.shape, kept)
    wr, nr = ref_weight_norm(v, axes, gk)
    tout, tacc = tolerances(v.dtype, res_dt)
    gabs = 1.0 if gk is None else np.abs(gk)
    with np.errstate(invalid="ignore"):
        assert_close(w, wr, (tout + tacc) * gabs * np.abs(wr / (1 if gk is None else gk))
                     + tiny(res_dt), "w")
    assert_close(norm, nr, (OUT_TOL[sdt] + tacc) * nr + tiny(sdt), "norm")
    # The other entry point agrees.
    assert_close(fastnorm.weight_norm(v, g, axis=spec["axis"]), w, 0)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("shape, axis", [((16, 9), None), ((8, 4, 3, 3), None),
                                         ((8, 4, 3, 3), (1, 2)), ((5, 7), 0),
                                         ((6, 5, 4), (0, 2))])
def test_weight_norm_rows_have_norm_g(dtype, shape, axis):
    rng = np.random.default_rng(8)
    v = (rng.standard_normal(shape) * 3 + 1).astype(dtype)
    axes = _weight_axes(axis, len(shape))
    kept = tuple(i for i in range(len(shape)) if i not in axes)
    tol = 1e-14 if dtype == np.float64 else 1e-6
    w = fastnorm.weight_norm(v, axis=axis)
    assert_close(np.sqrt((w.astype(np.float64) ** 2).sum(axis=axes)), 1.0, tol * 10, "unit norm")
    named = tuple(shape[i] for i in kept)
    g = rng.uniform(0.5, 3, named) * rng.choice([-1.0, 1.0], named)
    w, norm = fastnorm.weight_norm(v, g, axis=axis, return_norm=True)
    norms = np.sqrt((w.astype(np.float64) ** 2).sum(axis=axes))
    assert_close(norms, np.abs(g), tol * 10 * np.abs(g), "norm |g|")
    # w points along v (or against it where g < 0).
    gk = expand_param(g, shape, kept)
    assert_close(w / gk * norm, v, tol * 10 * np.abs(v.astype(np.float64)) + tol, "direction")


def test_weight_norm_zero_direction_is_nan():
    v = np.array([[0.0, 0.0], [3.0, 4.0]])
    w = fastnorm.weight_norm(v)
    assert np.isnan(w[0]).all()
    assert_close(w[1], [0.6, 0.8], 1e-15)
    assert_close(fastnorm.weight_norm(np.array([[3.0, 4.0], [0.0, 2.0]]), g=np.array([10.0, 1.0])),
                 [[6, 8], [0, 1]], 1e-14)


@given(weight_specs())
def test_weight_standardize_matches_reference(spec):
    rng = np.random.default_rng(spec["seed"])
    nd = len(spec["shape"])
    axes = _weight_axes(spec["axis"], nd)
    w = build_x(spec, axes, rng)
    fp = fingerprint(w)
    y = fastnorm.weight_standardize(w, axis=spec["axis"], eps=spec["eps"])
    assert fingerprint(w) == fp
    res_dt = out_dtype(w.dtype)
    assert y.shape == w.shape and y.dtype == res_dt
    yr, _, rr, xhat, spread = ref_layer_norm(w, axes, eps=spec["eps"])
    tout, tacc = tolerances(w.dtype, res_dt)
    assert_close(y, yr, tout * np.abs(xhat) + tacc * rr * spread + tiny(res_dt), "w_hat")


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("shape, axis", [((16, 3, 3, 3), None), ((32, 9), None),
                                         ((4, 6, 5), (0, 2)), ((7, 40), 0)])
@pytest.mark.parametrize("eps", [0.0, 1e-5, 0.1])
def test_weight_standardize_mean_zero_variance(dtype, shape, axis, eps):
    rng = np.random.default_rng(9)
    w = (rng.standard_normal(shape) * rng.uniform(0.05, 2) + 0.3).astype(dtype)
    axes = _weight_axes(axis, len(shape))
    y = fastnorm.weight_standardize(w, axis=axis, eps=eps).astype(np.float64)
    wd = w.astype(np.float64)
    var = wd.var(axis=axes, keepdims=True)
    tol = 1e-13 if dtype == np.float64 else 2e-6
    assert_close(y.mean(axis=axes, keepdims=True), 0.0, tol, "mean")
    # var(w_hat) = var / (var + eps): 1 with eps = 0.
    assert_close(y.var(axis=axes, keepdims=True), var / (var + eps), tol * 4, "variance")
