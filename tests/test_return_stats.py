"""Calls that return y alone write no statistics.

layer_norm, rms_norm, group_norm and weight_standardize without
``return_stats`` pass no statistics arrays to the kernels (one float64 per
slice is an eighth of x's bytes for rows of 32 float32 values, and fresh
pages fault on every call).  y must not change for it: these cases compare
y with and without the statistics bit for bit, over every access pattern
(short rows, long rows, columns, interleaved images, strided slices), and
with a plain float64 reference.
"""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import fastnorm
from fastnorm import _simd
from reference import (OUT_TOL, assert_bitwise, assert_close, ref_group_norm, ref_layer_norm,
                       ref_rms_norm)
from routes import schedule

# (shape, axes) pairs that take each access pattern: rows of 32 and of 1000
# values, the columns (axis 0), NCHW channels (interleaved runs), a
# transposed view (strided slices) and everything at once.
CASES = [((300, 32), (1,)), ((9, 1000), (1,)), ((257, 70), (0,)), ((6, 5, 7, 9), (0, 2, 3)),
         ("T", (0,)), ((4, 3, 50), None)]


def test_cases_reach_every_pattern():
    seen = set()
    for shape, axes in CASES:
        for dtype in (np.float16, np.float32, np.float64):
            x = np.ones((40, 33), dtype).T if shape == "T" else np.ones(shape, dtype)
            seen.add(schedule(fastnorm.layer_norm, x, axis=axes))
    assert {"slices/rows", "slices/whole", "columns/tiles", "images/images"} <= seen, seen


def _all(axes, x):
    return tuple(range(x.ndim)) if axes is None else axes


@st.composite
def problems(draw):
    shape, axes = draw(st.sampled_from(CASES))
    dtype = draw(st.sampled_from([np.float16, np.float32, np.float64]))
    offset = draw(st.sampled_from([0.0, 5.0, 1e4]))
    seed = draw(st.integers(0, 2**32 - 1))
    with_params = draw(st.booleans())
    rng = np.random.default_rng(seed)
    if shape == "T":
        x = (rng.standard_normal((40, 33)) + offset).astype(dtype).T
    else:
        x = (rng.standard_normal(shape) + offset).astype(dtype)
    # Gain and bias vary along the normalized axes (keepdims layout).
    along = tuple(n if axes is None or a in axes else 1 for a, n in enumerate(x.shape))
    gamma = rng.uniform(0.5, 2.0, along) if with_params else None
    beta = rng.standard_normal(along) if with_params else None
    return x, axes, gamma, beta


@settings(max_examples=60, deadline=None)
@given(problems())
def test_layer_norm_y_alone_is_y_with_stats(problem):
    x, axes, gamma, beta = problem
    before = x.copy()
    y = fastnorm.layer_norm(x, gamma, beta, axis=axes)
    y_stats, mean, rstd = fastnorm.layer_norm(x, gamma, beta, axis=axes, return_stats=True)
    assert_bitwise(y, y_stats, "y")
    ref = ref_layer_norm(x, _all(axes, x), gamma, beta)[0]
    assert_close(y, ref, OUT_TOL[x.dtype] * (1.0 + np.abs(ref)) * 4, "y")
    assert_bitwise(x, before, "x")


@settings(max_examples=60, deadline=None)
@given(problems())
def test_rms_norm_y_alone_is_y_with_stats(problem):
    x, axes, gamma, _ = problem
    y = fastnorm.rms_norm(x, gamma, axis=axes)
    y_stats, rstd = fastnorm.rms_norm(x, gamma, axis=axes, return_stats=True)
    assert_bitwise(y, y_stats, "y")
    ref = ref_rms_norm(x, _all(axes, x), gamma)[0]
    assert_close(y, ref, OUT_TOL[x.dtype] * (1.0 + np.abs(ref)) * 4, "y")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("out", [False, True])
def test_group_norm_y_alone_is_y_with_stats(dtype, out):
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((5, 12, 6, 7)) * 3 + 2).astype(dtype)
    gamma, beta = rng.uniform(0.5, 2.0, 12), rng.standard_normal(12)
    y = np.empty_like(x) if out else None
    y = fastnorm.group_norm(x, 4, gamma, beta, out=y)
    y_stats, _, _ = fastnorm.group_norm(x, 4, gamma, beta, return_stats=True)
    assert_bitwise(y, y_stats, "y")
    ref = ref_group_norm(x, 4, gamma=gamma, beta=beta)[0]
    assert_close(y, ref, OUT_TOL[np.dtype(dtype)] * (1.0 + np.abs(ref)) * 4, "y")


def test_weight_standardize_matches_layer_norm_with_stats():
    w = np.random.default_rng(4).standard_normal((64, 3, 3, 3)) * 0.1 + 0.02
    y, _, _ = fastnorm.layer_norm(w, axis=(1, 2, 3), return_stats=True)
    assert_bitwise(fastnorm.weight_standardize(w), y, "weight_standardize")


@pytest.mark.parametrize("mode", ["given", "stats"])
def test_kernel_refuses_missing_stats_where_it_needs_them(mode):
    # 'given' reads the statistics and 'stats' has nothing else to give.
    k = _simd.kernels
    x = np.ones((4, 8))
    with pytest.raises(ValueError, match="statistics"):
        k.forward(x, np.empty_like(x), None, None, None, None, None, (False, True),
                    k.MODES[mode], 0.0, 1)


def test_kernel_refuses_half_the_stats_or_no_output():
    k = _simd.kernels
    x = np.ones((4, 8))
    s = np.empty((4, 1))
    with pytest.raises(ValueError, match="statistics"):
        k.forward(x, np.empty_like(x), None, None, s, None, None, (False, True),
                    k.MODES["center"], 0.0, 1)
    with pytest.raises(ValueError, match="statistics"):
        k.forward(x, None, None, None, None, None, None, (False, True),
                    k.MODES["center"], 0.0, 1)
