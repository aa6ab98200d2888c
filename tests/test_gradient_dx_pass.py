"""The dx pass of the gradients from coefficients worked out once per
slice: dx = dy * (gamma r) + (x - m) * k2 + k0.

float32 dy and x into a float32 dx: in float32 arithmetic, m the mean
rounded to float32 (the statistics given in float64 make its rounding rest
count: k0 carries it).  float64 columns (batch norm over (N, C)): the same
in float64.  Every layout that enters them, far from zero and near it, and
every way they hand a call back to the unfolded float64 formula.  Each case
compares with the closed form in float64 on the very same values.
"""
import numpy as np
import pytest

import fastnorm
from reference import assert_close, ref_norm_grads

F32 = np.float32
EPS = 1e-5

# name: (x shape, reduced axes, axes gamma varies along, call).  Each name
# says which way through the kernels the case goes.
CASES = {
    "columns": ((300, 70), (0,), (1,), "batch"),            # batch norm over (N, C)
    "columns-wide": ((40, 1100), (0,), (1,), "batch"),      # two tiles of columns
    "short-maps": ((40, 12, 3, 3), (0, 2, 3), (1,), "batch"),  # (N, C*9) columns in groups
    "channel-runs": ((6, 5, 20, 20), (0, 2, 3), (1,), "batch"),  # one gamma per run
    "rows": ((50, 300), (1,), (1,), "layer"),               # rows side by side
    "two-axes": ((6, 10, 33), (1, 2), (1, 2), "layer"),     # gamma along runs, 10 runs
    "rms-rows": ((50, 300), (1,), (1,), "rms"),
    "eval-columns": ((300, 70), (0,), (1,), "eval"),
    "eval-runs": ((6, 5, 20, 20), (0, 2, 3), (1,), "eval"),
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
    dx = _grad(kind, dy, x, mean, rstd, gamma, axes)
    hit = np.broadcast_to(~np.isfinite(dy).all(axes, keepdims=True), x.shape)
    assert hit.any() and not hit.all()
    assert not np.isfinite(dx[hit]).any()
    ref, scale = _reference(kind, clean, x, mean, rstd, gamma, axes)
    assert_close(dx[~hit], ref[~hit], TOL * scale[~hit], f"{case} dx")
