"""Moments: a data set fed in chunks, or merged from accumulators in any
tree, gives the statistics of the whole within rounding; its state
pickles, compares and refuses what does not fit without changing."""
import pickle
import warnings

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import fastnorm
from fastnorm._moments import piece_moments
from reference import masked_moments, norm_axes


@st.composite
def stream_specs(draw):
    ndim = draw(st.integers(1, 3))
    shape = tuple(draw(st.sampled_from([1, 2, 3, 5, 17, 40])) for _ in range(ndim))
    axis = draw(st.sampled_from([None, 0] + ([(0, ndim - 1), -1] if ndim > 1 else [])))
    axes = norm_axes(axis, ndim)
    split = draw(st.sampled_from(axes))         # chunks cut along a reduced axis
    cuts = sorted(set(draw(st.lists(st.integers(0, shape[split]), max_size=6))))
    return dict(shape=shape, axis=axis, split=split, cuts=cuts,
                dtype=draw(st.sampled_from(["float16", "float32", "float64"])),
                offset=draw(st.sampled_from([0.0, 1e3, 1e6])),
                nans=draw(st.sampled_from([0.0, 0.2])),
                policy=draw(st.sampled_from(["propagate", "omit"])),
                masked=draw(st.booleans()),
                tree=draw(st.sampled_from(["stream", "pairs", "random"])),
                seed=draw(st.integers(0, 2**32 - 1)))


def build(spec):
    rng = np.random.default_rng(spec["seed"])
    scale = 1.0 if spec["dtype"] != "float16" else 0.1
    off = spec["offset"] if spec["dtype"] != "float16" else min(spec["offset"], 100.0)
    x = (off + scale * rng.standard_normal(spec["shape"])).astype(spec["dtype"])
    if x.size:
        x[rng.random(x.shape) < spec["nans"]] = np.nan
    where = rng.random(spec["shape"]) < 0.8 if spec["masked"] else None
    return x, where, rng


def pieces(spec, x, where):
    cuts = [0] + spec["cuts"] + [x.shape[spec["split"]]]
    for a, b in zip(cuts[:-1], cuts[1:]):
        idx = [slice(None)] * x.ndim
        idx[spec["split"]] = slice(a, b)
        yield x[tuple(idx)], None if where is None else where[tuple(idx)]


def merged(parts, tree, rng):
    """Accumulators merged as a stream, in pairs, or in a random tree."""
    parts = list(parts)
    if tree == "stream":
        acc = parts[0]
        for p in parts[1:]:
            acc.merge(p)
        return acc
    while len(parts) > 1:
        if tree == "pairs":
            parts = [parts[i] + parts[i + 1] if i + 1 < len(parts) else parts[i]
                     for i in range(0, len(parts), 2)]
        else:
            i = int(rng.integers(0, len(parts) - 1))
            parts[i:i + 2] = [parts[i] + parts[i + 1]]
    return parts[0]


@settings(max_examples=150, deadline=None)
@given(spec=stream_specs())
def test_chunks_and_merge_trees_give_the_statistics_of_the_whole(spec):
    x, where, rng = build(spec)
    axes = norm_axes(spec["axis"], x.ndim)
    accs = [fastnorm.Moments(spec["axis"], nan_policy=spec["policy"]).update(c, where=w)
            for c, w in pieces(spec, x, where)]
    got = merged(accs, spec["tree"], rng)
    counts = np.ones(x.shape, bool) if where is None else where.copy()
    if spec["policy"] == "omit":
        counts &= ~np.isnan(x)
    n, mean, m2, spread = masked_moments(x, axes, counts)
    kept = tuple(s for i, s in enumerate(x.shape) if i not in axes)
    n, mean, m2, spread = (a.reshape(kept) for a in (n, mean, m2, spread))
    assert got.count.shape == kept and np.array_equal(got.count, n)
    with np.errstate(invalid="ignore"):
        want_var = np.where(n > 0, m2 / np.maximum(n, 1), np.nan)
    # NaN where nothing counted, or (propagate) where a NaN was counted.
    assert np.array_equal(np.isnan(got.mean), np.isnan(mean))
    ok = ~np.isnan(mean)
    # Within rounding: of the accumulation (tol of the spread) and of the
    # chunks' means merged, each a float64 near |mean| (eps |mean| each).
    tol = 1e-6 if spec["dtype"] != "float64" else 1e-12
    eps_mean = 8 * np.finfo(np.float64).eps * np.abs(mean)
    assert np.all(np.abs(got.mean - mean)[ok] <= (tol * spread + eps_mean)[ok])
    assert np.all(np.abs(got.var() - want_var)[ok]
                  <= (tol * spread**2 + 1e-12 * np.abs(want_var) + eps_mean * spread)[ok])
    # The same as one mean_var call over the whole.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        m, v = fastnorm.mean_var(x.astype(np.float64), spec["axis"], where=where,
                                 nan_policy=spec["policy"])
    assert np.array_equal(np.isnan(got.mean), np.isnan(m))
    assert np.all(np.abs(got.mean - m)[ok] <= (2 * tol * spread + 2 * eps_mean)[ok])
    assert np.all(np.abs(got.var() - v)[ok]
                  <= (2 * tol * spread**2 + 1e-12 * np.abs(v) + 2 * eps_mean * spread)[ok])


@settings(max_examples=60, deadline=None)
@given(rows=st.sampled_from([1, 7, 300, 9000]), cols=st.sampled_from([1, 5, 64, 131]),
       lead=st.integers(0, 3), axis=st.sampled_from([0, 1, None]),
       dtype=st.sampled_from(["float16", "float32", "float64"]),
       policy=st.sampled_from(["propagate", "omit"]), seed=st.integers(0, 2**32 - 1))
def test_a_chunk_read_from_memory_gives_the_bits_of_one_in_cache(rows, cols, lead, axis, dtype,
                                                                 policy, seed):
    # update plans a view as a stream's chunk (fetched ahead), an array of
    # its own as just written: the plan differs, the statistics may not.
    rng = np.random.default_rng(seed)
    base = (5.0 + rng.standard_normal((rows, cols + lead))).astype(dtype)
    base[rng.random(base.shape) < 0.05] = np.nan
    x = base[:, lead:]
    axes = (0, 1) if axis is None else (axis,)
    cold = piece_moments(x, axes, omit=policy == "omit", cold=True)
    warm = piece_moments(x, axes, omit=policy == "omit", cold=False)
    for a, b in zip(cold, warm):
        assert np.array_equal(a, b, equal_nan=True)


def test_explain_describes_an_update_and_changes_nothing():
    m = fastnorm.Moments(0).update(np.ones((4, 64)))
    before = m.copy()
    r = fastnorm.explain(m.update, np.zeros((6000, 64), np.float32)[:5000])
    assert r["pattern"] == "columns" and r["columns"]["fetch_ahead"] != "none"
    assert m == before
    with pytest.raises(TypeError, match="public fastnorm function"):
        fastnorm.explain(m.merge, m)


def test_chunks_of_one_value_with_a_large_offset():
    rng = np.random.default_rng(1)
    x = 1e9 + rng.standard_normal(1000)
    m = fastnorm.Moments()
    for v in x:
        m.update(np.array([v]))
    d = x - 1e9
    assert m.count == 1000
    assert abs(m.mean - x.mean()) <= 1e-6
    np.testing.assert_allclose(m.var(), d.var(), rtol=1e-9)
    np.testing.assert_allclose(m.var(ddof=1), d.var(ddof=1), rtol=1e-9)
    np.testing.assert_allclose(m.std(), d.std(), rtol=1e-9)


def test_before_any_update():
    m = fastnorm.Moments(axis=0)
    assert m.count == 0 and np.isnan(m.mean) and np.isnan(m.var()) and np.isnan(m.std())
    with pytest.raises(ValueError, match="update it first"):
        m.normalize(np.ones(3))
    assert m == fastnorm.Moments(axis=0)
    assert (m + fastnorm.Moments(axis=0)) == m


def test_a_different_kept_shape_is_refused_and_changes_nothing():
    m = fastnorm.Moments(axis=0).update(np.ones((4, 3)))
    before = pickle.dumps(m)
    with pytest.raises(ValueError, match="kept shape"):
        m.update(np.ones((4, 5)))
    with pytest.raises(ValueError, match="kept shape"):
        m.merge(fastnorm.Moments(axis=0).update(np.ones((2, 2))))
    assert pickle.loads(before) == m


def test_raise_policy_refuses_a_chunk_with_nan_and_changes_nothing():
    m = fastnorm.Moments(axis=0, nan_policy="raise").update(np.ones((3, 2)))
    with pytest.raises(ValueError, match="NaN"):
        m.update(np.array([[1.0, np.nan]]))
    assert m.count.tolist() == [3, 3]


def test_var_without_degrees_of_freedom_is_nan():
    m = fastnorm.Moments(axis=0, nan_policy="omit").update(
        np.array([[1.0, np.nan], [3.0, np.nan], [5.0, 2.0]]))
    assert m.count.tolist() == [3, 1]
    np.testing.assert_allclose(m.var(ddof=1), [4.0, np.nan])
    assert np.isnan(m.var(ddof=3)).all()


@pytest.mark.parametrize("policy", ["propagate", "omit"])
def test_pickle_copy_and_equality(policy):
    rng = np.random.default_rng(2)
    m = fastnorm.Moments(axis=(0, 2), nan_policy=policy).update(rng.standard_normal((5, 3, 4)))
    m.update(np.full((2, 3, 4), np.nan))
    back = pickle.loads(pickle.dumps(m))
    assert back == m and back is not m
    assert back.axis == (0, 2) and back.nan_policy == policy
    c = m.copy()
    c.update(rng.standard_normal((1, 3, 4)))
    assert c != m
    assert m != fastnorm.Moments(axis=(0, 2), nan_policy="raise")
    assert "kept shape (3,)" in repr(m)


def test_accessors_return_copies():
    m = fastnorm.Moments(axis=0).update(np.arange(6.0).reshape(3, 2))
    m.count[:] = 0
    m.mean[:] = 0
    assert m.count.tolist() == [3, 3] and m.mean.tolist() == [2.0, 3.0]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_normalize_with_the_statistics_so_far(dtype):
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((100, 6)) * 3 + 7).astype(dtype)
    m = fastnorm.Moments(axis=0)
    for c in np.array_split(x, 7):
        m.update(c)
    new = (rng.standard_normal((4, 6)) * 3 + 7).astype(dtype)
    new[1, 2] = np.nan
    y = m.normalize(new, eps=1e-3)
    xd = x.astype(np.float64)
    want = (new - xd.mean(0)) / np.sqrt(xd.var(0) + 1e-3)
    assert y.dtype == np.dtype(dtype)
    np.testing.assert_allclose(y, want, rtol=1e-5 if dtype == "float32" else 1e-12,
                               atol=1e-6, equal_nan=True)
    out = np.empty_like(new)
    assert m.normalize(new, eps=1e-3, out=out) is out
    with pytest.raises(ValueError, match="kept shape"):
        m.normalize(np.ones((2, 5)))
    with pytest.raises(ValueError):
        m.normalize(new, eps=-1.0)


def test_where_and_masked_arrays_count_per_position():
    x = np.arange(12.0).reshape(3, 4)
    m = fastnorm.Moments(axis=0).update(x, where=x % 3 != 0)
    assert m.count.tolist() == [2, 2, 2, 2]
    mm = fastnorm.Moments(axis=0).update(np.ma.MaskedArray(x, mask=x > 8))
    assert mm.count.tolist() == [3, 2, 2, 2]
    np.testing.assert_allclose(mm.mean, [4.0, 3.0, 4.0, 5.0])


def test_bad_arguments():
    with pytest.raises(TypeError, match="merge takes a Moments"):
        fastnorm.Moments().merge(np.ones(3))
    with pytest.raises(TypeError):
        fastnorm.Moments() + 1
    with pytest.raises(ValueError, match="repeated|duplicate"):
        fastnorm.Moments(axis=(0, 0))
    with pytest.raises(TypeError, match="dtype"):
        fastnorm.Moments().update(np.array(["a"]))
    with pytest.raises(np.exceptions.AxisError):
        fastnorm.Moments(axis=3).update(np.ones((2, 2)))


def test_dask_update_uses_the_chunk_states():
    da = pytest.importorskip("dask.array")
    rng = np.random.default_rng(4)
    x = rng.standard_normal((60, 7)) + 1e6
    x[rng.random(x.shape) < 0.2] = np.nan
    a = fastnorm.Moments(axis=0, nan_policy="omit").update(da.from_array(x, chunks=(13, 3)))
    b = fastnorm.Moments(axis=0, nan_policy="omit").update(x)
    np.testing.assert_array_equal(a.count, b.count)
    np.testing.assert_allclose(a.mean, b.mean, rtol=1e-14)
    np.testing.assert_allclose(a.var(), b.var(), rtol=1e-9)
