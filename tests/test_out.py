"""out=: filled and returned, in place, overlapping x or the parameters
(the result as if the inputs had been read first), of other strides than x
or misaligned; and rejected, before anything is written, when it has the
wrong shape, dtype, length or is read-only."""
import numpy as np
import pytest

import fastnorm
from reference import assert_close, ref_layer_norm, ref_rms_norm

X = np.arange(24.0).reshape(2, 3, 4)


def test_mean_var_out_tuple_is_filled_and_returned():
    x = np.random.default_rng(3).standard_normal((5, 7))
    om, ov = np.empty(5), np.empty(5)
    m, v = fastnorm.mean_var(x, axis=1, out=(om, ov))
    assert m is om and v is ov
    assert_close(om, x.mean(axis=1), 1e-14, "mean")
    assert_close(ov, x.var(axis=1), 1e-14, "var")


def test_mean_var_out_for_a_full_reduction_is_a_0d_array():
    x = np.arange(7.0)
    om, ov = np.empty(()), np.empty(())
    m, v = fastnorm.mean_var(x, out=(om, ov))
    assert m is om and v is ov
    assert om[()] == 3.0 and ov[()] == 4.0


def test_mean_var_out_must_be_a_pair():
    x = np.ones((2, 3))
    with pytest.raises((TypeError, ValueError)):
        fastnorm.mean_var(x, axis=1, out=np.empty(2))
    with pytest.raises((TypeError, ValueError)):
        fastnorm.mean_var(x, axis=1, out=(np.empty(2),))


def test_rms_norm_out_tuple_with_rstd():
    x = np.random.default_rng(3).standard_normal((4, 10))
    y_out, r_out = np.empty_like(x), np.empty((4, 1))
    y, r = fastnorm.rms_norm(x, out=(y_out, r_out), return_stats=True)
    assert y is y_out and r is r_out
    yr, rr = ref_rms_norm(x, (1,))
    assert_close(y, yr, 1e-14)
    assert_close(r, rr, 1e-14)


def test_group_norm_out_and_dtype():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((4, 6, 3))
    ref = fastnorm.group_norm(x, 3)
    out = np.empty((4, 6, 3))
    assert fastnorm.group_norm(x, 3, out=out) is out
    assert_close(out, ref, 0)
    y32 = fastnorm.group_norm(x, 3, dtype=np.float32)
    assert y32.dtype == np.float32
    assert_close(y32, ref, 1e-6 * (1 + np.abs(ref)))
    xc = x.copy()
    assert fastnorm.group_norm(xc, 3, out=xc) is xc
    assert_close(xc, ref, 0)
    # Statistics in out arrays.
    outs = (np.empty_like(x), np.empty((4, 3, 1)), np.empty((4, 3, 1)))
    res = fastnorm.group_norm(x, 3, out=outs, return_stats=True)
    assert all(a is b for a, b in zip(res, outs))


def test_in_place():
    x = np.random.default_rng(7).standard_normal((6, 33)).astype(np.float32)
    ref = ref_layer_norm(x, (1,))[0]
    y = fastnorm.layer_norm(x, out=x)
    assert y is x
    assert_close(x, ref, 1e-5 * np.abs(ref) + 1e-7)


def test_out_overlapping_x_reversed():
    # out shares x's memory in another order: the result must be as if x
    # had been read completely first.
    x = np.random.default_rng(8).standard_normal((5, 20))
    ref = ref_layer_norm(x, (1,))[0]
    fastnorm.layer_norm(x, axis=1, out=x[::-1])
    assert_close(x[::-1], ref, 1e-13)


def test_gamma_sharing_memory_with_out():
    # gamma is a row of x and x is overwritten in place: gamma must be read
    # as it was when the call started.
    x = np.random.default_rng(9).standard_normal((6, 8))
    g = x[2]
    ref = ref_layer_norm(x, (1,), g.copy())[0]
    fastnorm.layer_norm(x, g, out=x)
    assert_close(x, ref, 1e-13)


def _data(shape, dtype=np.float32, seed=0, offset=3.0):
    rng = np.random.default_rng(seed)
    return (offset + rng.standard_normal(shape)).astype(dtype)


def test_out_with_other_strides_than_x():
    # x C-ordered, out F-ordered and reversed: values land where they belong.
    x = _data((700, 90), np.float64)
    out = np.asfortranarray(np.zeros((700, 90)))[::-1, ::-1]
    buf = out[::-1, ::-1]
    y = fastnorm.layer_norm(x, axis=0, out=out)
    assert y is out
    yr = ref_layer_norm(x, (0,))[0]
    assert_close(out, yr, 1e-12)
    assert_close(buf[::-1, ::-1], yr, 1e-12)


def _misaligned(values):
    """A writable float64 array whose data is not 8-byte aligned."""
    raw = bytearray(values.nbytes + 1)
    a = np.frombuffer(memoryview(raw)[1:], dtype=values.dtype).reshape(values.shape)
    a[...] = values
    return a


def test_misaligned_input_and_out():
    v = _data((6, 300), np.float64)
    x = _misaligned(v)
    assert not x.flags.aligned
    yr, mr, rr, _, _ = ref_layer_norm(v, (1,))
    assert_close(fastnorm.layer_norm(x), yr, 1e-13)
    out = _misaligned(np.zeros_like(v))
    assert fastnorm.layer_norm(x, out=out) is out
    assert_close(out, yr, 1e-13)
    fastnorm.layer_norm(x, out=x)
    assert_close(x, yr, 1e-13)


def test_out_is_the_transpose_of_x():
    # out overlaps x with other strides: the result is as if x was read first.
    x = _data((40, 40), np.float64)
    x0 = x.copy()
    fastnorm.layer_norm(x, out=x.T)
    assert_close(x.T, ref_layer_norm(x0, (1,))[0], 1e-13)


# --------------------------------------------------------------------------
# rejected out=

@pytest.mark.parametrize("func", ["layer_norm", "rms_norm", "batch_norm"])
def test_out_errors(func):
    f = getattr(fastnorm, func)
    x = X.copy()
    with pytest.raises(ValueError):
        f(x, out=np.empty((2, 3, 5)))
    with pytest.raises(ValueError):
        f(x, out=np.empty((3, 2, 4)))
    with pytest.raises(TypeError):
        f(x, out=np.empty((2, 3, 4), dtype=np.float32))
    with pytest.raises(TypeError):
        f(x, out=np.empty((2, 3, 4), dtype=np.int64))
    with pytest.raises(TypeError):
        f(x, out=np.empty((2, 3, 4)).tolist())
    ro = np.empty((2, 3, 4))
    ro.flags.writeable = False
    with pytest.raises(ValueError):
        f(x, out=ro)
    np.testing.assert_array_equal(x, X)


def test_out_with_requested_dtype():
    # out must have the dtype that dtype= asks for.
    with pytest.raises(TypeError):
        fastnorm.layer_norm(X, dtype=np.float32, out=np.empty(X.shape))
    y = fastnorm.layer_norm(X, dtype=np.float32, out=np.empty(X.shape, np.float32))
    assert y.dtype == np.float32


def test_in_place_on_a_broadcast_input_is_rejected():
    x = np.broadcast_to(np.arange(4.0), (3, 4))
    with pytest.raises(ValueError):
        fastnorm.layer_norm(x, out=x)


def test_in_place_on_a_dtype_mismatch_is_rejected():
    x = np.arange(12, dtype=np.int64).reshape(3, 4)
    with pytest.raises(TypeError):
        fastnorm.layer_norm(x, out=x)


@pytest.mark.parametrize("func,n_stats", [("layer_norm", 2), ("rms_norm", 1), ("batch_norm", 2)])
def test_bad_statistics_out_is_rejected_before_anything_is_written(func, n_stats):
    # A NumPy user expects a call that raises over its arguments to leave
    # every array as it was, including an in-place out.
    f = getattr(fastnorm, func)
    x = np.random.default_rng(2).standard_normal((5, 4))
    x0 = x.copy()
    stats = [None] * n_stats
    stats[0] = np.empty((7, 7))
    with pytest.raises(ValueError):
        f(x, out=(x, *stats), return_stats=True)
    np.testing.assert_array_equal(x, x0)
    y = np.full_like(x, 5.0)
    stats[0] = np.empty((1, 4) if func == "batch_norm" else (5, 1), dtype=np.float32)
    with pytest.raises(TypeError):
        f(x, out=(y, *stats), return_stats=True)
    np.testing.assert_array_equal(y, 5.0)


def test_bad_running_stats_are_rejected_before_out_is_written():
    x = np.random.default_rng(3).standard_normal((6, 3))
    y = np.full_like(x, 5.0)
    rv = np.ones(3)
    rv.flags.writeable = False
    with pytest.raises(ValueError):
        fastnorm.batch_norm(x, None, None, np.zeros(3), rv, axis=0, out=y)
    np.testing.assert_array_equal(y, 5.0)


def test_out_tuple_of_the_wrong_length():
    with pytest.raises(ValueError, match="tuple of 1 or 3 entries, got a tuple of 4"):
        fastnorm.layer_norm(X, out=(np.empty(X.shape),) * 4, return_stats=True)
    with pytest.raises(ValueError, match="tuple of one array, got a tuple of 3"):
        fastnorm.layer_norm(X, out=(np.empty(X.shape),) * 3)


def test_mean_var_out_errors():
    m, v = np.empty(3), np.empty(3)
    with pytest.raises(ValueError):
        fastnorm.mean_var(X, axis=(0, 2), out=(np.empty(4), v))
    with pytest.raises(TypeError):
        fastnorm.mean_var(X, axis=(0, 2), out=(m, np.empty(3, np.float32)))
    with pytest.raises(TypeError):
        fastnorm.mean_var(X, axis=(0, 2), out=([0.0] * 3, v))
    ro = np.empty(3)
    ro.flags.writeable = False
    with pytest.raises(ValueError):
        fastnorm.mean_var(X, axis=(0, 2), out=(m, ro))
    # keepdims changes the shape out must have.
    with pytest.raises(ValueError):
        fastnorm.mean_var(X, axis=(0, 2), keepdims=True, out=(m, v))
