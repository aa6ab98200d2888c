"""Zero-size inputs behave like NumPy's reductions."""
import warnings

import numpy as np
import pytest

import fastnorm
from reference import assert_close


@pytest.mark.parametrize("shape,axis,rshape", [((3, 0), 1, (3,)), ((0, 4), 0, (4,)),
                                               ((0,), None, ()), ((2, 0, 3), (1, 2), (2,)),
                                               ((2, 3, 0), (0, 2), (3,))])
def test_mean_var_over_an_empty_axis_is_nan_with_a_warning(shape, axis, rshape):
    x = np.empty(shape, dtype=np.float32)
    with pytest.warns(RuntimeWarning):
        m, v = fastnorm.mean_var(x, axis=axis)
    assert np.shape(m) == rshape and np.shape(v) == rshape
    assert m.dtype == np.float32 and v.dtype == np.float32
    assert np.isnan(m).all() and np.isnan(v).all()


def test_mean_var_empty_full_reduction_is_a_nan_scalar():
    with pytest.warns(RuntimeWarning):
        m, v = fastnorm.mean_var(np.empty((0, 3)))
    assert isinstance(m, np.float64) and np.isnan(m) and np.isnan(v)


@pytest.mark.parametrize("shape,axis,rshape", [((0, 4), 1, (0,)), ((3, 0), 0, (0,)),
                                               ((0, 5, 2), (1, 2), (0,)),
                                               ((0, 0), 1, (0,))])
def test_mean_var_zero_size_kept_axes(shape, axis, rshape):
    x = np.empty(shape)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        em = np.mean(x, axis=axis)
    m, v = fastnorm.mean_var(x, axis=axis)
    assert m.shape == em.shape == rshape and v.shape == rshape


def test_mean_var_zero_size_with_keepdims():
    m, v = fastnorm.mean_var(np.empty((0, 4)), axis=1, keepdims=True)
    assert m.shape == (0, 1) and v.shape == (0, 1)


@pytest.mark.parametrize("func", ["layer_norm", "rms_norm"])
@pytest.mark.parametrize("shape,axis", [((0, 5), -1), ((0, 5), 0), ((4, 0), -1), ((2, 0, 3), (0, 2)),
                                        ((0,), None)])
def test_normalizers_on_zero_size_input(func, shape, axis):
    x = np.empty(shape, dtype=np.float32)
    f = getattr(fastnorm, func)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        res = f(x, axis=axis, return_stats=True)
    y, stats = res[0], res[1:]
    assert y.shape == shape and y.dtype == np.float32
    axes = tuple(range(len(shape))) if axis is None else np.atleast_1d(axis) % len(shape)
    sshape = tuple(1 if i in axes else s for i, s in enumerate(shape))
    n = int(np.prod([shape[a] for a in axes]))
    for s in stats:
        assert s.shape == sshape and s.dtype == np.float32
        if n == 0:
            # An empty reduction: NaN statistics, with NumPy's warning.
            assert np.isnan(s).all()
    if n == 0 and np.prod(sshape) > 0:
        assert any(issubclass(x.category, RuntimeWarning) for x in w)


def test_normalizers_on_zero_size_input_with_params_and_out():
    x = np.empty((0, 5))
    out = np.empty((0, 5))
    y = fastnorm.layer_norm(x, np.ones(5), np.zeros(5), out=out)
    assert y is out
    y = fastnorm.rms_norm(x, np.ones(5))
    assert y.shape == (0, 5)


def test_batch_norm_zero_channels():
    x = np.empty((4, 0, 3))
    y, mean, rstd = fastnorm.batch_norm(x, np.ones(0), np.zeros(0), return_stats=True)
    assert y.shape == (4, 0, 3) and mean.shape == (1, 0, 1) and rstd.shape == (1, 0, 1)
    rm, rv = np.zeros(0), np.ones(0)
    y = fastnorm.batch_norm(x, running_mean=rm, running_var=rv)
    assert y.shape == (4, 0, 3)


def test_batch_norm_eval_on_an_empty_batch():
    x = np.empty((0, 3))
    y = fastnorm.batch_norm(x, running_mean=np.zeros(3), running_var=np.ones(3),
                            training=False, axis=0)
    assert y.shape == (0, 3)


@pytest.mark.parametrize("shape, axis", [((0, 3), 0), ((0, 5, 9), None), ((4, 0, 2, 2), 0)])
def test_batch_norm_training_on_an_empty_batch(shape, axis):
    # As PyTorch: a zero-size y, the running statistics as they were; the
    # statistics are an empty reduction's (NaN, with NumPy's warning).
    x = np.empty(shape)
    kept = shape[1:] if axis == 0 else (shape[1],)
    rm, rv = np.full(kept, 0.5), np.full(kept, 2.0)
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        y, mean, rstd = fastnorm.batch_norm(x, running_mean=rm, running_var=rv, axis=axis,
                                            return_stats=True)
    assert y.shape == shape
    assert [str(w.message) for w in warned] == (["Mean of empty slice"] if rm.size else [])
    assert np.isnan(mean).all() and np.isnan(rstd).all()
    assert (rm == 0.5).all() and (rv == 2.0).all()
    dx, dg, db = fastnorm.batch_norm_backward(y, x, mean, rstd, axis=axis)
    assert dx.shape == shape and dg.shape == db.shape == rm.shape
    assert not dg.any() and not db.any()


def test_batch_norm_training_refuses_one_value_a_feature():
    with pytest.raises(ValueError, match="more than one value"):
        fastnorm.batch_norm(np.ones((1, 3)), axis=0)


def test_gradients_of_empty_inputs():
    x = np.zeros((0, 5))
    _, m, r = fastnorm.layer_norm(x, return_stats=True)
    dx, dg, db = fastnorm.layer_norm_backward(x, x, m, r)
    assert dx.shape == (0, 5) and dg.shape == db.shape == (5,)
    assert_close(dg, 0.0, 0)
    assert_close(db, 0.0, 0)


@pytest.mark.parametrize("call", [
    lambda: fastnorm.mean_var(np.empty((3, 0)), axis=1),
    lambda: fastnorm.layer_norm(np.empty((3, 0))),
    lambda: fastnorm.rms_norm(np.empty((3, 0))),
    lambda: fastnorm.batch_norm(np.empty((0, 3))),
    lambda: fastnorm.group_norm(np.empty((2, 4, 0)), 2),
    lambda: fastnorm.layer_norm(np.ones((2, 3)), where=np.zeros((2, 1), bool)),
], ids=["mean_var", "layer_norm", "rms_norm", "batch_norm", "group_norm", "where"])
def test_empty_slice_warning_points_at_the_callers_line(call):
    # As NumPy's does: the user's line, not a line inside fastnorm.
    with pytest.warns(RuntimeWarning, match="empty slice") as record:
        call()
    assert {w.filename for w in record} == {__file__}
