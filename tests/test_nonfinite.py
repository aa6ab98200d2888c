"""NaN and inf stay inside the slice that holds them; constant slices give
beta.  Positions are chosen to hit the pivot (first value), the middle of a
vector block, the scalar tail and a later 4096-value block."""
import numpy as np
import pytest

import fastnorm
from reference import assert_close, keep_shape, ref_layer_norm, ref_mean_var, ref_rms_norm

BAD = [np.nan, np.inf, -np.inf, "inf-and-minus-inf"]


def _poison(x, axes, bad, rng, where):
    """Put `bad` into some slices of x (a copy); returns (x, slice mask)."""
    x = x.copy()
    kshape = keep_shape(x.shape, axes)
    mask = np.zeros(kshape, dtype=bool)
    flat_kept = np.argwhere(np.ones(kshape, dtype=bool))
    picked = flat_kept[rng.choice(len(flat_kept), size=max(1, len(flat_kept) // 3), replace=False)]
    red_shape = [x.shape[a] for a in axes]
    n = int(np.prod(red_shape))
    for k in picked:
        mask[tuple(k)] = True
        positions = {"first": [0], "last": [n - 1], "middle": [n // 2], "late": [n - 5]}[where]
        if bad == "inf-and-minus-inf":
            positions, values = [positions[0], (positions[0] + 1) % n], [np.inf, -np.inf]
        else:
            values = [bad]
        for p, v in zip(positions, values):
            idx = list(k)
            for a, i in zip(axes, np.unravel_index(p, red_shape)):
                idx[a] = i
            x[tuple(idx)] = v
    return x, mask


SHAPES = [((9, 37), (1,)), ((9, 37), (0,)), ((3, 9000), (1,)), ((2, 5000, 3), (1,)),
          ((600, 40), (0,)), ((4, 6, 5), (0, 2)), ((4, 3, 300), (0, 2)),
          # short slices, several to a vector (fastnorm's short_slices)
          ((40, 9), (1,)), ((11, 3, 8), (2,))]


@pytest.mark.parametrize("shape,axes", SHAPES)
@pytest.mark.parametrize("bad", BAD, ids=["nan", "inf", "-inf", "inf,-inf"])
@pytest.mark.parametrize("where", ["first", "middle", "last", "late"])
def test_layer_norm_nonfinite_confined(shape, axes, bad, where):
    rng = np.random.default_rng(0)
    x, mask = _poison(rng.standard_normal(shape), axes, bad, rng, where)
    g = rng.uniform(0.5, 2, size=keep_shape(shape, tuple(i for i in range(len(shape)) if i not in axes)))
    b = rng.standard_normal(g.shape)
    y, mean, rstd = fastnorm.layer_norm(x, g, b, axis=axes, return_stats=True)
    yr, mr, rr, _, _ = ref_layer_norm(x, axes, g, b)
    # Whole poisoned slices are NaN (output, mean and rstd); others are exact.
    assert np.isnan(y[np.broadcast_to(mask, y.shape)]).all()
    assert np.isnan(mean[mask]).all() and np.isnan(rstd[mask]).all()
    ok = np.broadcast_to(~mask, y.shape)
    assert_close(y[ok], yr[ok], 1e-12, "y in clean slices")
    assert_close(mean[~mask], mr[~mask], 1e-14, "mean in clean slices")
    assert_close(rstd[~mask], rr[~mask], 1e-13, "rstd in clean slices")


@pytest.mark.parametrize("shape,axes", SHAPES)
@pytest.mark.parametrize("bad", BAD, ids=["nan", "inf", "-inf", "inf,-inf"])
def test_rms_norm_nonfinite_confined(shape, axes, bad):
    rng = np.random.default_rng(1)
    x, mask = _poison(rng.standard_normal(shape), axes, bad, rng, "middle")
    y, rstd = fastnorm.rms_norm(x, axis=axes, return_stats=True)
    yr, rr = ref_rms_norm(x, axes)
    assert np.isnan(y[np.broadcast_to(mask, y.shape)]).all()
    assert np.isnan(rstd[mask]).all()
    ok = np.broadcast_to(~mask, y.shape)
    assert_close(y[ok], yr[ok], 1e-12, "y in clean slices")
    assert_close(rstd[~mask], rr[~mask], 1e-13, "rstd in clean slices")


@pytest.mark.parametrize("shape,axes", SHAPES)
@pytest.mark.parametrize("bad", BAD, ids=["nan", "inf", "-inf", "inf,-inf"])
@pytest.mark.parametrize("where", ["first", "middle", "last", "late"])
def test_mean_var_nonfinite_confined(shape, axes, bad, where):
    # "last": the inf is a Welford lane's final update, which leaves that
    # lane's mean at inf; the slice's mean must still come out NaN.
    rng = np.random.default_rng(2)
    x, mask = _poison(rng.standard_normal(shape), axes, bad, rng, where)
    m, v = fastnorm.mean_var(x, axis=axes, keepdims=True)
    rm, rv, _ = ref_mean_var(x, axes)
    # var of a slice with an inf is NaN for both NumPy and the contract;
    # the mean is NaN by the contract (NumPy would say +-inf for one sign).
    assert np.isnan(v[mask]).all()
    assert not np.isfinite(m[mask]).any()
    if bad != "inf-and-minus-inf" and not np.isnan(bad):
        assert np.isnan(m[mask]).all(), "contract: an inf makes the slice's mean NaN"
    assert_close(m[~mask], rm[~mask], 1e-14, "mean in clean slices")
    assert_close(v[~mask], rv[~mask], 1e-13, "var in clean slices")


@pytest.mark.parametrize("training", [True, False])
def test_batch_norm_nonfinite_channel(training):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((6, 4, 50))
    x[2, 1, 7] = np.nan
    x[0, 3, 0] = np.inf
    rm, rv = np.zeros(4), np.ones(4)
    y, mean, rstd = fastnorm.batch_norm(x, None, None, rm, rv, training=training,
                                        return_stats=True)
    if training:
        assert np.isnan(y[:, [1, 3]]).all()
        assert np.isnan(mean[0, [1, 3], 0]).all() and np.isnan(rstd[0, [1, 3], 0]).all()
        assert np.isnan(rm[[1, 3]]).all() and np.isnan(rv[[1, 3]]).all()
        assert np.isfinite(rm[[0, 2]]).all() and np.isfinite(rv[[0, 2]]).all()
        yr = ref_layer_norm(x, (0, 2))[0]
        assert_close(y[:, [0, 2]], yr[:, [0, 2]], 1e-12)
    else:
        # Eval is elementwise: only the poisoned values themselves.
        bad = ~np.isfinite(y)
        assert bad.sum() == 2 and np.isnan(y[2, 1, 7]) and y[0, 3, 0] == np.inf
        assert_close(y[~bad], (x[~bad] - 0) / np.sqrt(1 + 1e-5), 1e-15)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("shape,axes", [((5, 33), (1,)), ((33, 5), (0,)), ((2, 9000), (1,)),
                                        ((700, 3), (0,))])
def test_constant_slices_give_beta(dtype, shape, axes):
    rng = np.random.default_rng(4)
    x = rng.standard_normal(shape)
    kshape = keep_shape(shape, axes)
    const = rng.random(kshape) < 0.5
    x = np.where(const, np.round(rng.standard_normal(kshape) * 100, 1), x).astype(dtype)
    gshape = keep_shape(shape, tuple(i for i in range(len(shape)) if i not in axes))
    g, b = rng.uniform(0.5, 2, size=gshape), rng.standard_normal(gshape)
    y, mean, rstd = fastnorm.layer_norm(x, g, b, axis=axes, eps=1e-5, return_stats=True)
    cmask = np.broadcast_to(const, shape)
    np.testing.assert_array_equal(y[cmask], np.broadcast_to(b, shape)[cmask].astype(dtype))
    np.testing.assert_array_equal(rstd[const], np.float32(1 / np.sqrt(1e-5))
                                  if dtype != np.float64 else 1 / np.sqrt(1e-5))
    # Batch norm of a constant channel: beta too.
    xb = np.broadcast_to(np.arange(3.0, dtype=dtype), (50, 3))
    yb = fastnorm.batch_norm(xb, None, np.array([1.0, 2.0, 3.0]), axis=0)
    np.testing.assert_array_equal(yb, np.broadcast_to(np.array([1, 2, 3], dtype=dtype), (50, 3)))


def test_constant_slice_with_eps_zero_is_nan():
    # 0 * (1/sqrt(0)) = NaN, as arithmetic says.
    y = fastnorm.layer_norm(np.ones((2, 4)), eps=0.0)
    assert np.isnan(y).all()


def test_huge_values_do_not_crash():
    x = np.array([[1e300, -1e300, 0.0, 1.0], [1.0, 2.0, 3.0, 4.0]])
    y = fastnorm.layer_norm(x)
    assert_close(y[1], ref_layer_norm(x[1:], (1,))[0][0], 1e-12)
