"""nan_policy on mean_var and the normalizers: "omit" takes each slice's
statistics over its values that are not NaN (and selected, with where=),
"raise" refuses a NaN before anything is written, "propagate" is every
other call.  References are float64 computed slice by slice over the
values that count (reference.masked_moments), never by fastnorm."""
import warnings

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import fastnorm
from reference import (assert_close, masked_moments, mean_rounding, norm_axes,
                       selected_mean_var, out_dtype, selected_norm, stat_dtype, tiny, tolerances)
from routes import nan_probe
from strategies import LAYOUTS, arrange, axis_args, make_values, normalizer_params, shapes

FUNCS = ["mean_var", "layer_norm", "rms_norm", "batch_norm", "zscore"]


@st.composite
def nan_specs(draw, min_dims=1):
    shape = draw(shapes(min_dims, 4))
    ndim = len(shape)
    return dict(
        shape=shape,
        axis=draw(axis_args(ndim, allow_none=True)),
        dtype=draw(st.sampled_from(["float16", "float32", "float64"])),
        layout=draw(st.sampled_from(LAYOUTS)),
        values=draw(st.sampled_from(["normal", "ints", "offset", "const_slices"])),
        nans=draw(st.sampled_from([0.0, 0.1, 0.5, 0.95, 1.0])),
        nan_rows=draw(st.booleans()),          # some slices all NaN too
        infs=draw(st.booleans()),
        # where= as well: which axes the mask varies along, or no mask
        mask_axes=draw(st.none() | st.lists(st.booleans(), min_size=ndim, max_size=ndim)),
        seed=draw(st.integers(0, 2**32 - 1)),
    )


def build(spec):
    """x with NaN (and maybe an inf) placed before its layout is arranged,
    the reduced axes, where (or None) and what counts: selected numbers."""
    rng = np.random.default_rng(spec["seed"])
    axes = norm_axes(spec["axis"], len(spec["shape"]))
    v = make_values(rng, spec["shape"], spec["dtype"], spec["values"], axes,
                    small=spec["dtype"] == "float16")
    if v.size:
        v[rng.random(v.shape) < spec["nans"]] = np.nan
        if spec["nan_rows"] and v.ndim > 1:
            v[rng.integers(0, v.shape[0])] = np.nan
        if spec["infs"]:
            v.flat[rng.integers(0, v.size)] = np.inf
    x = arrange(v, spec["layout"], rng)
    where = None
    if spec["mask_axes"] is not None:
        mshape = tuple(s if m else 1 for s, m in zip(spec["shape"], spec["mask_axes"]))
        where = rng.random(mshape) < 0.7
    counts = ~np.isnan(x) if where is None else ~np.isnan(x) & np.broadcast_to(where, x.shape)
    return x, axes, where, counts


@settings(max_examples=200, deadline=None)
@given(spec=nan_specs(), ddof=st.sampled_from([0, 1]), keepdims=st.booleans(),
       probed=st.booleans())
def test_mean_var_omit_is_nanmean_and_nanvar(spec, ddof, keepdims, probed):
    # probed: small arrays whose slices mostly hold a NaN go as big ones do
    with nan_probe(probed):
        check_mean_var_omit(spec, ddof, keepdims)


def check_mean_var_omit(spec, ddof, keepdims):
    x, axes, where, counts = build(spec)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        mean, var = fastnorm.mean_var(x, spec["axis"], ddof=ddof, keepdims=keepdims,
                                      where=where, nan_policy="omit")
        # NumPy's nan-functions decide the shapes and where a slice is empty.
        xd = x.astype(np.float64)
        kw = {} if where is None else {"where": where}
        np_m = np.nanmean(xd, spec["axis"], keepdims=keepdims, **kw)
        np_v = np.nanvar(xd, spec["axis"], keepdims=keepdims, ddof=ddof, **kw)
    selected_mean_var(mean, var, x, axes, counts, ddof, np_m)


@settings(max_examples=200, deadline=None)
@given(spec=nan_specs(), kind=st.sampled_from(["layer", "rms", "batch"]),
       params=st.booleans(), into=st.sampled_from(["fresh", "out"]), probed=st.booleans())
def test_normalizers_omit_match_reference(spec, kind, params, into, probed):
    with nan_probe(probed):
        check_normalizer_omit(spec, kind, params, into)


def check_normalizer_omit(spec, kind, params, into):
    x, axes, where, counts = build(spec)
    case = normalizer_params(x, axes, kind, params, spec["seed"] + 1)
    if case is None:
        return
    axes, g, b = case
    res = out_dtype(x.dtype)
    old = np.full(x.shape, 7, res)
    out = old.copy() if into == "out" else None
    kw = dict(eps=1e-3, out=out, return_stats=True, where=where, nan_policy="omit")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        if kind == "layer":
            y, *stats = fastnorm.layer_norm(x, g, b, axis=axes, **kw)
        elif kind == "rms":
            y, *stats = fastnorm.rms_norm(x, g, axis=axes, **kw)
        else:
            # A batch of one value per feature raises, and so does a where=
            # that selects one value of a feature (as in test_where); a
            # feature with one number left by "omit" does not.
            selected = np.count_nonzero(np.broadcast_to(True if where is None else where,
                                                        x.shape), axis=axes)
            if (selected == 1).any() if where is not None else (
                    np.prod([x.shape[i] for i in axes]) == 1):
                with pytest.raises(ValueError, match="more than one"):
                    fastnorm.batch_norm(x, g, b, axis=axes, **kw)
                return
            y, *stats = fastnorm.batch_norm(x, g, b, axis=axes, **kw)
    yr, mean, rstd, xhat, spread = selected_norm(x, axes, counts, kind, g, b, 1e-3)
    selected = np.ones(x.shape, bool) if where is None else np.broadcast_to(where, x.shape)
    assert y.dtype == res and y.shape == x.shape
    if into == "out":
        assert y is out
        assert np.array_equal(y[~selected], old[~selected]), "unselected values kept"
    # NaN exactly where x is NaN or its slice has no number (or holds an inf).
    assert np.array_equal(np.isnan(y[selected]), np.isnan(yr[selected]))
    tout, tacc = tolerances(x.dtype, res)
    gb = np.abs(1.0 if g is None else g)
    with np.errstate(invalid="ignore", over="ignore"):
        allowed = (tout * np.abs(yr) + tacc * gb * (np.abs(xhat) + 1) * (1 + spread * rstd)
                   + mean_rounding(mean, rstd, g) + tiny(res))
        ok = selected & ~np.isnan(yr)
        assert_close(y[ok], yr[ok], np.broadcast_to(allowed, x.shape)[ok], "y")
    rstd_got = stats[-1]
    assert rstd_got.dtype == stat_dtype(res)
    with np.errstate(invalid="ignore"):
        assert_close(rstd_got, rstd, 1e-5 * np.abs(rstd) + 1e-6 * rstd * spread * rstd
                     + tiny(stat_dtype(res)), "rstd")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_batch_norm_omit_updates_running_stats_with_each_features_count(dtype):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((50, 6, 3)).astype(dtype)
    x[rng.random(x.shape) < 0.3] = np.nan
    x[:, 4] = np.nan                          # a feature with no number
    x[1:, 5] = np.nan                         # one with one number
    x[0, 5] = 3.0
    rm, rv = np.full(6, 0.5, dtype), np.full(6, 2.0, dtype)
    rm0, rv0 = rm.copy(), rv.copy()
    with pytest.warns(RuntimeWarning, match="empty slice"):
        fastnorm.batch_norm(x, running_mean=rm, running_var=rv, momentum=0.25,
                            nan_policy="omit")
    for c in range(6):
        v = x[:, c].astype(np.float64)
        v = v[~np.isnan(v)]
        if v.size <= 1:
            assert rm[c] == rm0[c] and rv[c] == rv0[c], "a feature with < 2 numbers is kept"
            continue
        want_m = 0.75 * rm0[c] + 0.25 * v.mean()
        want_v = 0.75 * rv0[c] + 0.25 * v.var(ddof=1)     # unbiased by its own count
        tol = 1e-6 if dtype == "float32" else 1e-13
        assert abs(rm[c] - want_m) <= tol * (1 + abs(want_m))
        assert abs(rv[c] - want_v) <= tol * (1 + abs(want_v))


@pytest.mark.parametrize("shape,where", [((1, 1, 1), np.ones((1, 1, 1), bool)),
                                         ((5, 3), np.eye(5, 3, dtype=bool))])
def test_batch_norm_omit_still_refuses_a_where_that_selects_one_value(shape, where):
    # A feature left with one number by "omit" keeps its running statistics;
    # a where= that selects one value is refused under every policy, before
    # anything is written.
    x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    rm, rv = np.zeros(shape[-1]), np.ones(shape[-1])
    for policy in ("propagate", "omit"):
        with pytest.raises(ValueError, match="selects one value"):
            fastnorm.batch_norm(x, axis=tuple(range(x.ndim - 1)) or None, where=where,
                                running_mean=rm, running_var=rv, nan_policy=policy)
        assert not rm.any() and (rv == 1).all()


def test_omit_without_nan_is_the_propagate_call():
    rng = np.random.default_rng(8)
    for shape, axis in [((300, 70), 1), ((300, 70), 0), ((4, 6, 50), (0, 2))]:
        x = rng.standard_normal(shape).astype(np.float32) + 3
        for f in (fastnorm.layer_norm, fastnorm.rms_norm):
            a = f(x, axis=axis, return_stats=True)
            b = f(x, axis=axis, return_stats=True, nan_policy="omit")
            for p, q in zip(a, b):
                np.testing.assert_allclose(q, p, rtol=2e-6, atol=1e-6)
        a = fastnorm.mean_var(x, axis)
        b = fastnorm.mean_var(x, axis, nan_policy="omit")
        for p, q in zip(a, b):
            assert np.array_equal(p, q)       # the same call: the same bits


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("shape,axis", [((3, 5000), 1), ((5000, 3), 0), ((700, 96), 0),
                                         ((96, 700), 1), ((40, 50, 30), (0, 2)),
                                         ((6, 3000), None)])
def test_omit_through_long_runs_and_column_tiles(dtype, shape, axis):
    # Long selected stretches with NaN (taken again without them, a piece
    # at a time), column tiles lane by lane, and a large common offset with
    # the slices' first values NaN (the pivot is the first number).
    rng = np.random.default_rng(hash((dtype, shape)) % 2**32)
    off = {"float16": 50.0, "float32": 1e4, "float64": 1e9}[dtype]
    x = (off + rng.standard_normal(shape)).astype(dtype)
    x[rng.random(shape) < 0.01] = np.nan
    x[(0,) * x.ndim] = np.nan
    axes = norm_axes(axis, x.ndim)
    mean, var = fastnorm.mean_var(x, axis, keepdims=True, nan_policy="omit")
    n, want_m, m2, spread = masked_moments(x, axes, ~np.isnan(x))
    tout, tacc = tolerances(x.dtype, x.dtype)
    assert_close(mean, want_m, tout * np.abs(want_m) + tacc * spread, "mean")
    assert_close(var, m2 / n, tout * m2 / n + tacc * spread**2 * n, "var")


@pytest.mark.parametrize("func", FUNCS)
@pytest.mark.parametrize("masked", [False, True])
def test_inf_still_propagates_under_omit(func, masked):
    # masked: a masked array that masks nothing, the selection's masked pass
    x = np.array([[1.0, np.nan, np.inf, 2.0], [1.0, np.nan, 3.0, 5.0]])
    a = np.ma.MaskedArray(x, mask=np.zeros(x.shape, bool)) if masked else x
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        r = getattr(fastnorm, func)(a, axis=1, nan_policy="omit")
    r = tuple(np.ma.getdata(s) for s in r) if func == "mean_var" else np.ma.getdata(r)
    # The row with an inf: NaN variance (mean_var) or NaN outputs; the other
    # row: numbers wherever x is a number.
    inf_row, other = (r[1][0], r[1][1]) if func == "mean_var" else (r[0], r[1, [0, 2, 3]])
    assert np.isnan(inf_row).all()
    assert not np.isnan(other).any()


@pytest.mark.parametrize("func", ["mean_var", "layer_norm", "batch_norm", "zscore"])
def test_a_nan_among_numbers_warns_of_nothing(func):
    x = np.arange(12.0).reshape(4, 3)
    x[1, 2] = np.nan
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _call(func, x, nan_policy="omit")


def test_all_nan_slice_warns_and_gives_nan_as_nanmean_does():
    x = np.array([[np.nan, np.nan], [1.0, 3.0]])
    with pytest.warns(RuntimeWarning, match="empty slice"):
        mean, var = fastnorm.mean_var(x, axis=1, nan_policy="omit")
    assert np.isnan(mean[0]) and np.isnan(var[0])
    assert mean[1] == 2.0 and var[1] == 1.0


def _call(func, x, **kw):
    if func == "batch_norm":
        return fastnorm.batch_norm(x, axis=0, **kw)
    return getattr(fastnorm, func)(x, axis=0, **kw)


@pytest.mark.parametrize("func", FUNCS)
def test_raise_refuses_nan_and_writes_nothing(func):
    x = np.array([[1.0, 2.0], [np.nan, 4.0], [5.0, 7.0]])
    out = (np.full(2, 9.0), np.full(2, 9.0)) if func == "mean_var" else np.full(x.shape, 9.0)
    kw = {"out": out}
    rm, rv = np.zeros(2), np.ones(2)
    if func == "batch_norm":
        kw.update(running_mean=rm, running_var=rv)
    before = x.copy()
    with pytest.raises(ValueError, match="NaN"):
        _call(func, x, nan_policy="raise", **kw)
    for o in (out if isinstance(out, tuple) else (out,)):
        assert (o == 9.0).all()
    assert rm.tolist() == [0, 0] and rv.tolist() == [1, 1]
    assert np.array_equal(x, before, equal_nan=True)
    # Without a NaN, "raise" is the propagate call.
    x[1, 0] = 3.0
    a, b = _call(func, x, nan_policy="raise"), _call(func, x)
    for p, q in zip(a if isinstance(a, tuple) else (a,), b if isinstance(b, tuple) else (b,)):
        assert np.array_equal(p, q)


@pytest.mark.parametrize("func", FUNCS)
@pytest.mark.parametrize("policy", ["Omit", "ignore", None, 1, ""])
def test_unknown_policy_is_a_value_error(func, policy):
    with pytest.raises(ValueError, match="nan_policy must be one of"):
        _call(func, np.ones((3, 2)), nan_policy=policy)


@pytest.mark.parametrize("policy", ["Omit", None])
def test_moments_refuse_unknown_policy(policy):
    with pytest.raises(ValueError, match="nan_policy must be one of"):
        fastnorm.Moments(nan_policy=policy)


def test_omit_leaves_the_input_unchanged():
    rng = np.random.default_rng(9)
    x = rng.standard_normal((64, 33))
    x[rng.random(x.shape) < 0.2] = np.nan
    before = x.copy()
    fastnorm.layer_norm(x, nan_policy="omit")
    fastnorm.batch_norm(x, axis=0, nan_policy="omit")
    fastnorm.mean_var(x, 0, nan_policy="omit")
    assert np.array_equal(x, before, equal_nan=True)


def test_omit_in_place():
    rng = np.random.default_rng(10)
    x = rng.standard_normal((40, 30)).astype(np.float32)
    x[rng.random(x.shape) < 0.2] = np.nan
    want = fastnorm.layer_norm(x, nan_policy="omit")
    y = fastnorm.layer_norm(x, out=x, nan_policy="omit")
    assert y is x
    assert np.array_equal(x, want, equal_nan=True)


def test_masked_arrays_and_omit_combine():
    x = np.ma.MaskedArray([[1.0, np.nan, 3.0, 100.0], [2.0, 4.0, np.nan, 6.0]],
                          mask=[[0, 0, 0, 1], [0, 0, 0, 0]])
    mean, var = fastnorm.mean_var(x, axis=1, nan_policy="omit")
    assert isinstance(mean, np.ma.MaskedArray)
    np.testing.assert_allclose(mean.data, [2.0, 4.0])
    np.testing.assert_allclose(var.data, [1.0, 8.0 / 3.0])


@pytest.mark.parametrize("func", ["mean_var", "layer_norm", "rms_norm", "batch_norm",
                                  "zscore"])
@pytest.mark.parametrize("policy", ["omit", "propagate"])
@pytest.mark.parametrize("chunks", [(7, 11), (40, 3), (2, 30)])
def test_dask_policies_match_numpy(func, policy, chunks):
    da = pytest.importorskip("dask.array")
    rng = np.random.default_rng(11)
    x = rng.standard_normal((40, 30)) + 5
    x[rng.random(x.shape) < 0.2] = np.nan
    x[:, 3] = np.nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        want = _call(func, x, nan_policy=policy)
        got = _call(func, da.from_array(x, chunks=chunks), nan_policy=policy)
        got = tuple(g.compute() for g in got) if isinstance(got, tuple) else got.compute()
    for p, q in zip(want if isinstance(want, tuple) else (want,),
                    got if isinstance(got, tuple) else (got,)):
        np.testing.assert_allclose(q, p, rtol=1e-12, atol=1e-12, equal_nan=True)


def test_dask_raise_is_raised_when_computed():
    da = pytest.importorskip("dask.array")
    x = np.ones((8, 4))
    x[5, 2] = np.nan
    lazy = fastnorm.layer_norm(da.from_array(x, chunks=3), nan_policy="raise")
    with pytest.raises(ValueError, match="NaN"):
        lazy.compute()


def test_dask_batch_norm_omit_updates_running_stats():
    da = pytest.importorskip("dask.array")
    rng = np.random.default_rng(12)
    x = rng.standard_normal((60, 5))
    x[rng.random(x.shape) < 0.3] = np.nan
    x[1:, 4] = np.nan                   # one number: kept running statistics, no warning
    x[0, 4] = 2.0
    r1 = (np.zeros(5), np.ones(5))
    r2 = (np.zeros(5), np.ones(5))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        y1 = fastnorm.batch_norm(x, *[None, None], *r1, axis=0, nan_policy="omit")
        y2 = fastnorm.batch_norm(da.from_array(x, chunks=(13, 2)), None, None, *r2, axis=0,
                                 nan_policy="omit").compute()
    assert r2[0][4] == 0.0 and r2[1][4] == 1.0
    np.testing.assert_allclose(y2, y1, rtol=1e-12, equal_nan=True)
    for a, b in zip(r1, r2):
        np.testing.assert_allclose(b, a, rtol=1e-13)


def test_explain_takes_nan_policy_and_writes_nothing():
    x = np.ones((20, 16), np.float32)
    x[3, 3] = np.nan
    out = np.full(x.shape, 9.0, np.float32)
    for policy in ("omit", "propagate"):
        route = fastnorm.explain(fastnorm.layer_norm, x, axis=0, out=out, nan_policy=policy)
        assert route["pattern"] == "columns"
    assert (out == 9.0).all()


@pytest.mark.parametrize("nans", [0.0, 0.1])
def test_explain_reports_the_route_the_probe_chooses(nans):
    # (2048, 512) float32, 4 MiB: probed.  Its columns mostly with a NaN take
    # their statistics first, the masked lanes leaving NaN out; without
    # NaN the propagate call, unmasked.
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2048, 512)).astype(np.float32)
    x[rng.random(x.shape) < nans] = np.nan
    before = x.copy()
    out = np.full(x.shape, 9.0, np.float32)
    route = fastnorm.explain(fastnorm.layer_norm, x, axis=0, out=out, nan_policy="omit")
    assert route["columns"]["where"] == ("lanes" if nans else None)
    assert (out == 9.0).all() and np.array_equal(x, before, equal_nan=True)


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_omit_with_a_mask_constant_along_columns_reads_its_one_byte(dtype):
    # One where= byte for every column (stride 0), in a buffer whose next
    # bytes are False: each column's lanes take that byte, none beyond it.
    buf = np.zeros(64, bool)
    buf[0] = True
    where = buf[:1].reshape(1, 1)
    x = np.arange(45.0).reshape(3, 15).astype(dtype)
    x[1, 4] = np.nan
    mean, var = fastnorm.mean_var(x, 0, where=where, nan_policy="omit")
    want = np.nanmean(x.astype(np.float64), 0)
    np.testing.assert_allclose(mean, want, rtol=1e-3)
    np.testing.assert_allclose(var, np.nanvar(x.astype(np.float64), 0), rtol=1e-3)
