"""Inputs other than plain ndarrays: masked arrays are honoured, ndarray
subclasses come back as NumPy's reductions return them, and array-likes that
a conversion would strip of their meaning are refused."""
import warnings

import numpy as np
import pytest

import fastnorm
from reference import assert_close


class Tagged(np.ndarray):
    """A subclass carrying an attribute, as NumPy's docs write one."""

    def __new__(cls, a, tag="t"):
        obj = np.asarray(a).view(cls)
        obj.tag = tag
        return obj

    def __array_finalize__(self, obj):
        self.tag = getattr(obj, "tag", None)


def test_the_masked_array_of_the_report():
    x = np.ma.array([[2, 3, 4, 5], [100, 2, 3, 4]], mask=[[0, 0, 0, 0], [1, 0, 0, 0]])
    mean, var = fastnorm.mean_var(x, axis=0)
    assert isinstance(mean, np.ma.MaskedArray) and isinstance(var, np.ma.MaskedArray)
    assert_close(mean, np.ma.mean(x, axis=0).data, 1e-15)
    assert_close(var, np.ma.var(x, axis=0).data, 1e-15)
    assert_close(mean, [2, 2.5, 3.5, 4.5], 1e-15)


@pytest.mark.parametrize("axis", [None, 0, 1, (0, 2), -1])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_masked_mean_var_matches_np_ma(axis, dtype):
    rng = np.random.default_rng(7)
    data = rng.standard_normal((5, 6, 7)).astype(dtype)
    mask = rng.random(data.shape) < 0.4
    mask[1] = True                                # a fully masked part
    x = np.ma.array(data, mask=mask)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        mean, var = fastnorm.mean_var(x, axis)
    want_m, want_v = np.ma.mean(x, axis), np.ma.var(x, axis)
    if np.ndim(want_m) == 0:
        assert_close(mean, want_m, 1e-6)
        assert_close(var, want_v, 1e-6)
        return
    assert np.array_equal(np.ma.getmaskarray(mean), np.ma.getmaskarray(want_m))
    assert np.array_equal(np.ma.getmaskarray(var), np.ma.getmaskarray(want_v))
    keep = ~np.ma.getmaskarray(want_m)
    assert_close(mean.data[keep], want_m.data[keep], 1e-6)
    assert_close(var.data[keep], want_v.data[keep], 1e-6)


def test_fully_masked_input_gives_masked_results():
    x = np.ma.array(np.ones((2, 3)), mask=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        mean, var = fastnorm.mean_var(x)
        y = fastnorm.layer_norm(x)
    assert mean is np.ma.masked and var is np.ma.masked
    assert np.ma.getmaskarray(y).all()


@pytest.mark.parametrize("func, axis", [(fastnorm.layer_norm, -1), (fastnorm.layer_norm, 0),
                                        (fastnorm.rms_norm, -1), (fastnorm.batch_norm, 0)])
def test_masked_normalizers_match_np_ma(func, axis):
    rng = np.random.default_rng(8)
    data = rng.standard_normal((9, 11)) * 4 + 2
    x = np.ma.array(data, mask=rng.random(data.shape) < 0.3)
    y, *stats = func(x, axis=axis, return_stats=True, eps=1e-5)
    assert isinstance(y, np.ma.MaskedArray)
    assert np.array_equal(np.ma.getmaskarray(y), x.mask)
    if func is fastnorm.rms_norm:
        want = x / np.ma.sqrt((x * x).mean(axis=axis, keepdims=True) + 1e-5)
    else:
        want = ((x - x.mean(axis=axis, keepdims=True))
                / np.ma.sqrt(x.var(axis=axis, keepdims=True) + 1e-5))
    assert_close(y.data[~x.mask], want.data[~x.mask], 1e-12)
    for s in stats:
        assert isinstance(s, np.ma.MaskedArray)


def test_masked_arrays_and_where_combine():
    data = np.arange(12.0).reshape(3, 4)
    x = np.ma.array(data, mask=[[1, 0, 0, 0]] * 3)
    where = np.array([True, True, False, True])
    mean, _ = fastnorm.mean_var(x, axis=1, where=where)
    assert_close(mean, np.mean(data, axis=1, where=~x.mask & where), 1e-15)


def test_masked_arrays_are_never_modified():
    x = np.ma.array(np.arange(6.0), mask=[0, 1, 0, 0, 1, 0])
    before = (x.data.copy(), x.mask.copy())
    fastnorm.layer_norm(x)
    fastnorm.mean_var(x)
    assert np.array_equal(x.data, before[0]) and np.array_equal(x.mask, before[1])


@pytest.mark.parametrize("axis", [None, 0, 1])
def test_subclass_comes_back_as_from_np_mean(axis):
    x = Tagged(np.arange(12.0).reshape(3, 4), tag="kept")
    mean, var = fastnorm.mean_var(x, axis)
    want = np.mean(x, axis)
    assert type(mean) is type(want) and type(var) is type(want)
    assert getattr(mean, "tag", None) == getattr(want, "tag", None)
    assert_close(mean, want, 1e-15)


@pytest.mark.parametrize("func", [fastnorm.layer_norm, fastnorm.rms_norm,
                                  lambda x, **kw: fastnorm.batch_norm(x, axis=0, **kw)])
def test_normalizers_keep_the_subclass(func):
    x = Tagged(np.random.default_rng(9).standard_normal((6, 5)), tag="kept")
    y = func(x)
    want = np.add(x, 0)                 # how NumPy's ufuncs return a subclass
    assert type(y) is type(want) and y.tag == want.tag
    y, *stats = func(x, return_stats=True)
    assert all(type(s) is Tagged for s in [y] + stats)


def test_out_is_returned_as_given():
    x = Tagged(np.ones((2, 3)))
    out = np.empty((2, 3))
    assert fastnorm.layer_norm(x, out=out) is out


class DuckArray:
    """An array-like with its own NumPy protocol (like a unit-carrying
    quantity): converting it would drop what it carries."""

    def __init__(self, a):
        self.a = np.asarray(a)

    def __array__(self, dtype=None, copy=None):
        return self.a

    def __array_function__(self, func, types, args, kwargs):
        return NotImplemented


class Quantity(np.ndarray):
    """An ndarray subclass that takes over NumPy's ufuncs (as units do)."""

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        return NotImplemented


@pytest.mark.parametrize("make", [DuckArray, lambda a: np.asarray(a).view(Quantity)])
@pytest.mark.parametrize("func", [fastnorm.mean_var, fastnorm.layer_norm, fastnorm.rms_norm,
                                  lambda x: fastnorm.batch_norm(x, axis=0)])
def test_array_likes_with_their_own_semantics_are_refused(make, func):
    with pytest.raises(TypeError, match="defines its own NumPy semantics"):
        func(make(np.ones((3, 4))))


@pytest.mark.parametrize("func", [lambda x: fastnorm.group_norm(x, 1),
                                  fastnorm.instance_norm, fastnorm.weight_norm,
                                  fastnorm.weight_standardize])
def test_functions_without_where_refuse_masked_values(func):
    x = np.ma.array(np.ones((2, 3, 4)), mask=np.zeros((2, 3, 4), bool))
    func(x)                                       # nothing masked: nothing lost
    x[0, 0, 0] = np.ma.masked
    with pytest.raises(TypeError, match="masked values"):
        func(x)


@pytest.mark.parametrize("func", [lambda x, **kw: fastnorm.group_norm(x, 2, **kw),
                                  fastnorm.instance_norm,
                                  lambda x, **kw: fastnorm.weight_standardize(x),
                                  lambda x, **kw: fastnorm.weight_norm(x)])
def test_other_functions_keep_the_subclass(func):
    x = Tagged(np.random.default_rng(10).standard_normal((3, 4, 5)), tag="kept")
    y = func(x)
    assert type(y) is Tagged and y.tag == np.add(x, 0).tag
    out = np.empty(x.shape)
    if func is fastnorm.instance_norm:
        assert func(x, out=out) is out


def test_gradients_keep_the_subclass():
    x = Tagged(np.random.default_rng(13).standard_normal((3, 4, 5)))
    y, m, r = fastnorm.group_norm(x, 2, return_stats=True)
    dx, dg, db = fastnorm.group_norm_backward(np.asarray(y), x, m, r, 2)
    assert type(dx) is Tagged
    y, m, r = fastnorm.layer_norm(x, return_stats=True)
    assert type(fastnorm.layer_norm_backward(np.asarray(y), x, m, r)[0]) is Tagged
