"""where= on mean_var and the normalizers: statistics over the selected
values, outputs at the selected positions, against a float64 reference that
takes each slice's selected values one slice at a time."""
import warnings

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import fastnorm
from reference import (OUT_TOL, assert_bitwise, assert_close, kept_axes, masked_moments,
                       mean_rounding, norm_axes, out_dtype, selected_mean_var, selected_norm,
                       stat_dtype, tiny, tolerances)
from strategies import LAYOUTS, arrange, axis_args, make_values, normalizer_params, shapes


@st.composite
def where_specs(draw):
    shape = draw(shapes(1, 4))
    ndim = len(shape)
    return dict(
        shape=shape,
        axis=draw(axis_args(ndim, allow_none=True)),
        dtype=draw(st.sampled_from(["float16", "float32", "float64"])),
        layout=draw(st.sampled_from(LAYOUTS)),
        values=draw(st.sampled_from(["normal", "ints", "offset", "const_slices"])),
        # which axes the mask varies along (the rest broadcast)
        mask_axes=draw(st.lists(st.booleans(), min_size=ndim, max_size=ndim)),
        density=draw(st.sampled_from([0.0, 0.3, 0.7, 1.0])),
        seed=draw(st.integers(0, 2**32 - 1)),
    )


def build(spec):
    rng = np.random.default_rng(spec["seed"])
    axes = norm_axes(spec["axis"], len(spec["shape"]))
    x = arrange(make_values(rng, spec["shape"], spec["dtype"], spec["values"], axes,
                            small=spec["dtype"] == "float16"), spec["layout"], rng)
    mshape = tuple(s if m else 1 for s, m in zip(spec["shape"], spec["mask_axes"]))
    where = rng.random(mshape) < spec["density"]
    return x, axes, where


@settings(max_examples=150, deadline=None)
@given(spec=where_specs(), ddof=st.sampled_from([0, 1]), keepdims=st.booleans())
def test_mean_var_where_matches_numpy(spec, ddof, keepdims):
    x, axes, where = build(spec)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        mean, var = fastnorm.mean_var(x, spec["axis"], ddof=ddof, keepdims=keepdims, where=where)
        # NumPy decides the shapes and which results are NaN or inf ...
        np_m = np.mean(x.astype(np.float64), spec["axis"], keepdims=keepdims, where=where)
        np_v = np.var(x.astype(np.float64), spec["axis"], keepdims=keepdims, where=where,
                      ddof=ddof)
    # ... the exact reference the values.
    want_v = selected_mean_var(mean, var, x, axes, where, ddof, np_m)
    assert np.array_equal(np.isnan(want_v), np.isnan(np_v))
    assert np.array_equal(np.isinf(want_v), np.isinf(np_v))


@settings(max_examples=150, deadline=None)
@given(spec=where_specs(), kind=st.sampled_from(["layer", "rms", "batch"]),
       params=st.booleans(), into=st.sampled_from(["fresh", "out"]))
def test_normalizers_where_match_reference(spec, kind, params, into):
    x, axes, where = build(spec)
    case = normalizer_params(x, axes, kind, params, spec["seed"] + 1)
    if case is None:
        return
    axes, g, b = case
    res = out_dtype(x.dtype)
    old = np.full(x.shape, 7, res)
    out = old.copy() if into == "out" else None
    kw = dict(eps=1e-3, out=out, return_stats=True, where=where)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        if kind == "layer":
            y, *stats = fastnorm.layer_norm(x, g, b, axis=axes, **kw)
        elif kind == "rms":
            y, *stats = fastnorm.rms_norm(x, g, axis=axes, **kw)
        else:
            counts = np.count_nonzero(np.broadcast_to(where, x.shape), axis=axes)
            if (counts == 1).any():    # the selection's counts, not the batch's size
                with pytest.raises(ValueError, match="more than one"):
                    fastnorm.batch_norm(x, g, b, axis=axes, **kw)
                return
            y, *stats = fastnorm.batch_norm(x, g, b, axis=axes, **kw)
    yr, mean, rstd, xhat, spread = selected_norm(x, axes, where, kind, g, b, 1e-3)
    if into == "out":
        assert y is out
    sel = np.broadcast_to(where, x.shape)
    # Outside the selection: out= keeps its values, a fresh y holds 0.
    assert (y[~sel] == (7 if into == "out" else 0)).all()
    tout, tacc = tolerances(x.dtype, res)
    gabs = 1.0 if g is None else np.abs(g)
    allowed = (tout * (gabs * np.abs(xhat) + (0 if b is None else np.abs(b)))
               + tacc * gabs * rstd * spread + mean_rounding(mean, rstd, g) + tiny(res))
    with np.errstate(invalid="ignore", over="ignore"):
        assert_close(np.where(sel, y, 0), np.where(sel, yr, 0), np.where(sel, allowed, 0), "y")
        sdt = stat_dtype(res)
        assert_close(stats[-1], rstd, rstd * (OUT_TOL[sdt] + tacc * spread**2 * rstd**2)
                     + tiny(sdt), "rstd")
        if kind != "rms":
            assert_close(stats[0], mean, OUT_TOL[sdt] * np.abs(mean) + tacc * spread + tiny(sdt),
                         "mean")


def mask_pattern(rng, rows, n, pattern):
    """A (rows, n) mask: trailing padding, coin flips, alternating runs of
    up to 300 values, or nothing / everything selected."""
    cols = np.arange(n)[None, :]
    if pattern == "trailing":
        return cols < rng.integers(0, n + 1, (rows, 1))
    if pattern == "random":
        return rng.random((rows, n)) < 0.5
    if pattern == "runs":
        lengths = rng.integers(1, 301, (rows, n))
        return (np.cumsum(lengths, axis=1) // 300 % 2 == 0)[:, :n]
    return np.full((rows, n), pattern == "all")


@settings(max_examples=80, deadline=None)
@given(dtype=st.sampled_from(["float16", "float32", "float64"]), rows=st.integers(1, 4),
       n=st.integers(1, 1100), pattern=st.sampled_from(["trailing", "random", "runs", "all",
                                                         "none"]),
       garbage=st.sampled_from([np.nan, np.inf, -3e4]), seed=st.integers(0, 2**32 - 1))
def test_long_rows_of_any_mask_pattern(dtype, rows, n, pattern, garbage, seed):
    # Rows long enough for every kind of piece of the mask (whole stretches,
    # mixed, empty), with garbage where nothing is selected: the statistics
    # and outputs are those of the selected values, and out= keeps its
    # values elsewhere, bit for bit.
    rng = np.random.default_rng(seed)
    x = (10 + 3 * rng.standard_normal((rows, n))).astype(dtype)
    where = mask_pattern(rng, rows, n, pattern)
    xg = np.where(where, x, np.asarray(garbage).astype(dtype))
    g = rng.uniform(0.5, 2, n)
    res = out_dtype(x.dtype)
    tout, tacc = tolerances(x.dtype, res)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        mean, var = fastnorm.mean_var(xg, 1, where=where)
        for kind in ("layer", "rms"):
            old = rng.standard_normal(x.shape).astype(res)
            out = old.copy()
            call = fastnorm.layer_norm if kind == "layer" else fastnorm.rms_norm
            call(xg, g, axis=1, eps=1e-3, out=out, where=where)
            yr, _, rstd, xhat, spread = selected_norm(x, (1,), where, kind, g, None, 1e-3)
            assert_bitwise(out[~where], old[~where])
            allowed = tout * g * np.abs(xhat) + tacc * g * rstd * spread + tiny(res)
            assert_close(out[where], yr[where], allowed[where], kind)
    cnt, want_m, m2, spread = (a[:, 0] for a in masked_moments(x, (1,), where))
    assert np.array_equal(np.isnan(mean), cnt == 0)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        assert_close(mean, want_m, tout * np.abs(want_m) + tacc * spread + tiny(res), "mean")
        assert_close(var, m2 / cnt, tout * m2 / cnt + tacc * spread**2 + tiny(res), "var")


def column_mask(rng, rows, cols, pattern, kind):
    """A mask over (rows, cols): whole rows ("rows", (rows, 1)), or values
    ("values"; "values_t": the same through a transposed array, its bytes
    cols apart along a row)."""
    if kind == "rows":
        return mask_pattern(rng, 1, rows, pattern).reshape(rows, 1)
    m = mask_pattern(rng, cols, rows, pattern).T
    return m if kind == "values_t" else np.ascontiguousarray(m)


@settings(max_examples=80, deadline=None)
@given(dtype=st.sampled_from(["float16", "float32", "float64"]),
       rows=st.sampled_from([1, 3, 40, 700, 9000]), cols=st.integers(1, 70),
       pattern=st.sampled_from(["trailing", "random", "runs", "all", "none"]),
       kind=st.sampled_from(["rows", "values", "values_t"]),
       split=st.booleans(), layout=st.sampled_from(["C", "F", "strided"]),
       seed=st.integers(0, 2**32 - 1))
def test_columns_of_any_mask_pattern(dtype, rows, cols, pattern, kind, split, layout, seed):
    # Masks over columns: constant along them (padded sequences: (N, T, 1)
    # over (N, T, C)) or varying: every column's statistics are those of its
    # selected values, garbage in the others changes nothing, and out= keeps
    # its values there, bit for bit.  Up to 9000 rows: several blocks of
    # rows, and float32 sums folded every few thousand rows.
    rng = np.random.default_rng(seed)
    x = (5 + 2 * rng.standard_normal((rows, cols))).astype(dtype)
    keep = column_mask(rng, rows, cols, pattern, kind)
    xg = np.where(keep, x, np.asarray(np.nan).astype(dtype))
    if layout == "F":
        xg = np.asfortranarray(xg)
    elif layout == "strided":
        xg = np.repeat(xg, 2, axis=1)[:, ::2]
    shape, axes = ((2, rows // 2, cols), (0, 1)) if split and rows % 2 == 0 else (x.shape, (0,))
    xs, ks, x0 = xg.reshape(shape), keep.reshape(shape[:-1] + keep.shape[-1:]), x.reshape(shape)
    res = out_dtype(x.dtype)
    tout, tacc = tolerances(x.dtype, res)
    old = rng.standard_normal(shape).astype(res)
    out = old.copy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        mean, var = fastnorm.mean_var(xs, axes, where=ks)
        fastnorm.layer_norm(xs, axis=axes, eps=1e-3, out=out, where=ks)
    sel = np.broadcast_to(ks, shape)
    assert_bitwise(out[~sel], old[~sel])
    yr, _, rstd, xhat, spread = selected_norm(x0, axes, ks, "layer", None, None, 1e-3)
    allowed = tout * np.abs(xhat) + tacc * rstd * spread + tiny(res)
    assert_close(out[sel], yr[sel], np.broadcast_to(allowed, shape)[sel], "y")
    cnt, want_m, m2, spread = (a.reshape(np.shape(mean)) for a in masked_moments(x0, axes, ks))
    assert np.array_equal(np.isnan(mean), cnt == 0)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        assert_close(mean, want_m, tout * np.abs(want_m) + tacc * spread + tiny(res), "mean")
        assert_close(var, m2 / cnt, tout * m2 / cnt + tacc * spread**2 + tiny(res), "var")


@pytest.mark.filterwarnings("ignore:Mean of empty slice")
@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("threads", [1, 2])
def test_a_fresh_output_holds_zero_where_rows_are_left_out(order, threads):
    # A mask constant along the rows (padded sequences): the rows it leaves
    # out are zeroed alone, in y and dx; the memory they get was NaN just
    # before (freed, then reused by the allocator), so a row missed shows.
    rng = np.random.default_rng(3)
    shape = (6, 40, 300) if order == "C" else (300, 40, 6)
    x = np.asarray(rng.standard_normal(shape), order=order)
    keep = rng.random((6, 40, 1) if order == "C" else (1, 40, 6)) < 0.6
    sel = np.broadcast_to(keep, shape)
    axis = -1 if order == "C" else 0
    fastnorm.set_num_threads(threads)
    try:
        calls = (lambda: fastnorm.layer_norm(x, axis=axis, where=keep),
                 lambda: fastnorm.batch_norm(x, axis=(0, 1) if order == "C" else (1, 2),
                                             where=keep),
                 lambda: fastnorm.layer_norm_backward(x, x, np.zeros(keep.shape),
                                                      np.ones(keep.shape), axis=axis,
                                                      where=keep)[0])
        for call in calls:
            for _ in range(3):
                dirty = np.full(shape, np.nan)
                del dirty
                y = call()
                assert (y[~sel] == 0).all() and np.isfinite(y[sel]).all()
                assert y.flags.c_contiguous if order == "C" else y.flags.f_contiguous
    finally:
        fastnorm.set_num_threads(None)


def test_all_true_where_is_the_unmasked_call():
    # where=True is no mask at all (the same bits); an all-true array takes
    # the masked schedule, whose rounding may differ by an ulp or so.
    x = np.random.default_rng(0).standard_normal((33, 65)).astype(np.float32)
    for axis in (0, 1):
        y0 = fastnorm.layer_norm(x, axis=axis)
        assert_bitwise(fastnorm.layer_norm(x, axis=axis, where=True), y0)
        assert_close(fastnorm.layer_norm(x, axis=axis, where=np.ones(x.shape, bool)), y0,
                     4e-7 * (1 + np.abs(y0)))
        m, v = fastnorm.mean_var(x, axis, where=True)
        m0, v0 = fastnorm.mean_var(x, axis)
        assert_bitwise(m, m0)
        assert_bitwise(v, v0)


def test_padded_sequences_batch_norm():
    # (N, T, C) with sequences of different lengths: the padding takes no
    # part in the statistics or the running statistics, and is not written.
    rng = np.random.default_rng(3)
    lengths = np.array([9, 2, 5, 7])
    x = rng.standard_normal((4, 9, 6)) * 3 + 1
    x[np.arange(9)[None, :] >= lengths[:, None]] = 1e6   # padding
    mask = (np.arange(9)[None, :] < lengths[:, None])[:, :, None]
    rm, rv = np.zeros(6), np.ones(6)
    y, mean, rstd = fastnorm.batch_norm(x, running_mean=rm, running_var=rv, axis=(0, 1),
                                        where=mask, return_stats=True)
    real = np.concatenate([x[i, :n] for i, n in enumerate(lengths)])
    n = len(real)
    assert_close(mean.ravel(), real.mean(0), 1e-12)
    assert_close(rstd.ravel(), 1 / np.sqrt(real.var(0) + 1e-5), 1e-12)
    assert_close(rm, 0.1 * real.mean(0), 1e-12)
    assert_close(rv, 0.9 + 0.1 * real.var(0) * n / (n - 1), 1e-12)
    assert (y[~np.broadcast_to(mask, x.shape)] == 0).all()
    # Eval with the same mask writes the real steps alone.
    out = np.full_like(x, -1.0)
    fastnorm.batch_norm(x, running_mean=rm, running_var=rv, training=False, axis=(0, 1),
                        where=mask, out=out)
    full = fastnorm.batch_norm(x, running_mean=rm, running_var=rv, training=False, axis=(0, 1))
    sel = np.broadcast_to(mask, x.shape)
    assert_bitwise(out[sel], full[sel])
    assert (out[~sel] == -1).all()


def test_a_feature_with_nothing_selected_keeps_its_running_statistics():
    x = np.random.default_rng(4).standard_normal((8, 3))
    where = np.array([True, True, False])
    rm, rv = np.full(3, 0.5), np.full(3, 2.0)
    with pytest.warns(RuntimeWarning, match="empty slice"):
        fastnorm.batch_norm(x, running_mean=rm, running_var=rv, axis=0, where=where)
    assert rm[2] == 0.5 and rv[2] == 2.0
    assert rm[0] != 0.5 and rv[0] != 2.0


@pytest.mark.parametrize("into_out", [False, True], ids=["fresh y", "out="])
@pytest.mark.parametrize("byte", [1, 2, 255])
def test_one_selected_value_of_a_feature_is_refused_whatever_its_byte(byte, into_out):
    # A boolean mask is a byte an element, any nonzero byte true (a view of
    # other bytes): one selected value of a feature is refused for training,
    # two are not, however the bytes that select them read as numbers.
    # Refused before anything the caller holds is written: out= (counted
    # from the mask first) and the running statistics alike.
    x = np.random.default_rng(5).standard_normal((6, 3))
    bytes_ = np.zeros((6, 3), np.uint8)
    bytes_[:, :2] = byte
    bytes_[0, 2] = byte
    rm, rv, out = np.zeros(3), np.ones(3), np.full((6, 3), -7.0) if into_out else None
    with pytest.raises(ValueError, match="more than one selected"):
        fastnorm.batch_norm(x, running_mean=rm, running_var=rv, axis=0, out=out,
                            where=bytes_.view(np.bool_))
    assert (rm == 0).all() and (rv == 1).all()
    assert out is None or (out == -7).all()
    bytes_[1, 2] = byte
    y = fastnorm.batch_norm(x, axis=0, out=out, where=bytes_.view(np.bool_))
    assert_bitwise(y, fastnorm.batch_norm(x, axis=0, where=bytes_ != 0, out=(
        None if out is None else np.full((6, 3), -7.0))))


@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("lazy", [False, True], ids=["numpy", "dask"])
def test_nothing_selected_is_an_empty_batch_whatever_its_size(batch, lazy):
    # A batch of one with nothing selected is no batch of one value.
    x = np.arange(5.0 * batch).reshape(batch, 5)
    rm, rv = np.full(5, 0.5), np.full(5, 2.0)
    with pytest.warns(RuntimeWarning, match="empty slice"):
        y = np.asarray(fastnorm.batch_norm(
            pytest.importorskip("dask.array").from_array(x) if lazy else x,
            running_mean=rm, running_var=rv, axis=0, where=np.zeros_like(x, bool)))
    assert (y == 0).all() and (rm == 0.5).all() and (rv == 2.0).all()
    # ...and one value selected of one feature, none of the others: refused,
    # with no warning of the empty ones first.
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        with pytest.raises(ValueError, match="one selected value"):
            fastnorm.batch_norm(x, running_mean=rm, running_var=rv, axis=0,
                                where=np.arange(5 * batch).reshape(batch, 5) == 0)


def test_a_fully_masked_slice_is_an_empty_reduction():
    x = np.arange(12.0).reshape(3, 4)
    where = np.array([[True] * 4, [False] * 4, [True, False, True, False]])
    # np.var's two warnings: the empty mean's and the variance's
    with pytest.warns(RuntimeWarning, match="Degrees of freedom <= 0"):
        with pytest.warns(RuntimeWarning, match="empty slice"):
            m, v = fastnorm.mean_var(x, 1, where=where)
    assert np.isnan(m[1]) and np.isnan(v[1])
    assert_close(m[[0, 2]], [1.5, 9.0], 0)
    with pytest.warns(RuntimeWarning, match="empty slice"):
        y, mean, rstd = fastnorm.layer_norm(x, where=where, return_stats=True)
    assert np.isnan(mean[1]).all() and (y[1] == 0).all()


@pytest.mark.parametrize("shape, axis, mshape", [((300, 700), 0, (300, 1)),
                                                 ((64, 3000), 1, (64, 3000)),
                                                 ((8, 16, 40, 40), (0, 2, 3), (8, 1, 40, 40))])
def test_where_gives_the_same_bits_on_any_thread_count(shape, axis, mshape):
    rng = np.random.default_rng(5)
    x = rng.standard_normal(shape).astype(np.float32)
    where = rng.random(mshape) < 0.6
    runs = []
    for t in (1, 2, 3):
        fastnorm.set_num_threads(t)
        try:
            runs.append(fastnorm.layer_norm(x, axis=axis, where=where, return_stats=True))
        finally:
            fastnorm.set_num_threads(None)
    for r in runs[1:]:
        for a, b in zip(r, runs[0]):
            assert_bitwise(a, b)


@pytest.mark.parametrize("where, exc, match", [
    (np.ones((4, 5), int), TypeError, "boolean"),
    (np.ones((3, 5), bool), ValueError, "broadcast"),
    (np.ones((1, 4, 5), bool), ValueError, "more dimensions"),
])
@pytest.mark.parametrize("func", [lambda x, w: fastnorm.mean_var(x, 0, where=w),
                                  lambda x, w: fastnorm.layer_norm(x, where=w),
                                  lambda x, w: fastnorm.rms_norm(x, where=w),
                                  lambda x, w: fastnorm.batch_norm(x, axis=0, where=w)])
def test_bad_where_is_refused(func, where, exc, match):
    x = np.ones((4, 5))
    with pytest.raises(exc, match=match):
        func(x, where)


@pytest.mark.parametrize("shape, axis, threads, route", [
    # slices: the whole slice a thread, or a few long slices in blocks
    ((64, 33), 1, 1, ("slices", "whole")),
    ((64, 33), 1, 2, ("slices", "whole")),
    ((2, 1 << 20), 1, 2, ("slices", "split")),
    ((8, 16, 40, 40), (0, 2, 3), 1, ("slices", "whole")),
    # columns: the tiles, whether the mask varies along them or not
    ((64, 33), 0, 1, ("columns", "tiles")),
    ((64, 33), 0, 2, ("columns", "tiles")),
    ((64, 33, 1), (0, 1), 1, ("columns", "tiles")),
])
def test_masked_calls_take_the_unmasked_schedules(shape, axis, threads, route):
    # A mask never takes a route that groups rows, images or channels, and
    # its output is never streamed: those passes write every position.
    x = np.ones(shape, np.float32)
    if len(shape) == 3:     # padded sequences: (N, T, C) and a mask (N, T, 1)
        x = np.ones((64, 33, 40), np.float32)
    fastnorm.set_num_threads(threads)
    try:
        got = fastnorm.explain(fastnorm.layer_norm, x, axis=axis,
                               where=np.ones(shape, bool))
    finally:
        fastnorm.set_num_threads(None)
    assert (got["pattern"], got["schedule"]) == route
    assert not got["streams"] and not got["rows_pass"]


def reference_grads(dy, x, axes, where, kind, g):
    """dx, dgamma, dbeta of the masked forward, float64, from the selected
    values' statistics: dx = r (gd - A/n - xhat B/n) (RMS: no A and no
    centring) at the selected positions, 0 elsewhere; parameter sums over
    the selected positions that read each entry."""
    n, mean, m2, _ = masked_moments(x, axes, where)
    xd, dyd = x.astype(np.float64), dy.astype(np.float64)
    sel = np.broadcast_to(where, x.shape)
    with np.errstate(invalid="ignore", divide="ignore"):
        if kind == "rms":
            r = 1 / np.sqrt(m2 / n + mean**2 + 1e-3)
            xhat = xd * r
        else:
            r = 1 / np.sqrt(m2 / n + 1e-3)
            xhat = (xd - mean) * r
        gd = dyd * g
        a = np.where(sel, gd, 0).sum(axis=axes, keepdims=True) / n
        b = np.where(sel, gd * xhat, 0).sum(axis=axes, keepdims=True) / n
        dx = r * (gd - xhat * b) if kind == "rms" else r * (gd - a - xhat * b)
    pax = kept_axes(x.ndim, axes) if kind != "batch" else axes
    dg = np.where(sel, dyd * xhat, 0).sum(axis=pax, keepdims=True)
    db = np.where(sel, dyd, 0).sum(axis=pax, keepdims=True)
    return np.where(sel, dx, 0), dg, db, xhat, r


@settings(max_examples=100, deadline=None)
@given(spec=where_specs(), kind=st.sampled_from(["layer", "rms", "batch"]),
       into=st.sampled_from(["fresh", "out"]))
def test_gradients_where_match_reference(spec, kind, into):
    x, axes, where = build(spec)
    if spec["dtype"] == "float16" or spec["values"] == "offset":
        return       # the float32 statistics limit those: the unmasked tests cover them
    if kind == "batch":
        if x.ndim < 2:
            return
        axes = tuple(i for i in range(x.ndim) if i != 1)
    sel = np.broadcast_to(where, x.shape)
    counts = np.count_nonzero(sel, axis=axes)
    if kind == "batch" and ((counts == 1).any() or np.prod([x.shape[a] for a in axes]) == 1):
        return
    rng = np.random.default_rng(spec["seed"] + 2)
    dy = rng.standard_normal(x.shape).astype(x.dtype)
    along = axes if kind != "batch" else kept_axes(x.ndim, axes)
    named = tuple(x.shape[i] for i in along)
    g = rng.standard_normal(named)
    gk = g.reshape(tuple(x.shape[i] if i in along else 1 for i in range(x.ndim)))
    out = np.full(x.shape, 5, x.dtype) if into == "out" else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        if kind == "layer":
            _, m, r = fastnorm.layer_norm(x, g, axis=axes, eps=1e-3, where=where,
                                          return_stats=True, dtype=np.float64)
            dx, dg, db = fastnorm.layer_norm_backward(dy, x, m, r, g, axis=axes, where=where,
                                                      out=out)
        elif kind == "rms":
            _, r = fastnorm.rms_norm(x, g, axis=axes, eps=1e-3, where=where, return_stats=True,
                                     dtype=np.float64)
            dx, dg = fastnorm.rms_norm_backward(dy, x, r, g, axis=axes, where=where, out=out)
            db = None
        else:
            _, m, r = fastnorm.batch_norm(x, g, axis=axes, eps=1e-3, where=where,
                                          return_stats=True, dtype=np.float64)
            dx, dg, db = fastnorm.batch_norm_backward(dy, x, m, r, g, axis=axes, where=where,
                                                      out=out)
    rdx, rdg, rdb, xhat, rr = reference_grads(dy, x, axes, where, kind, gk)
    assert (dx[~sel] == (5 if into == "out" else 0)).all()
    tout, tacc = tolerances(x.dtype, x.dtype)
    with np.errstate(invalid="ignore", over="ignore"):
        scale = rr * np.abs(gk) * (np.abs(dy) + np.abs(xhat) + 1)
        nmax = max(int(counts.max()) if counts.size else 1, 1)
        assert_close(np.where(sel, dx, 0), rdx, np.where(sel, (tout + 1e-12 * nmax) * scale, 0)
                     + tiny(x.dtype), "dx")
        pabs = np.where(sel, np.abs(dy) * (np.abs(xhat) + 1), 0).sum(
            axis=kept_axes(x.ndim, axes) if kind != "batch" else axes)
        assert_close(dg, rdg.reshape(g.shape), 1e-10 * pabs + 1e-300, "dgamma")
        if db is not None:
            assert_close(db, rdb.reshape(g.shape), 1e-10 * pabs + 1e-300, "dbeta")


@settings(max_examples=60, deadline=None)
@given(dtype=st.sampled_from(["float32", "float64"]), rows=st.integers(1, 3),
       n=st.integers(1, 1100), pattern=st.sampled_from(["trailing", "random", "runs", "all",
                                                         "none"]),
       kind=st.sampled_from(["layer", "rms"]), seed=st.integers(0, 2**32 - 1))
def test_gradients_of_long_rows_of_any_mask_pattern(dtype, rows, n, pattern, kind, seed):
    # Rows long enough for whole stretches, mixed pieces and empty ones of
    # the mask, NaN in x and dy where nothing is selected: dx and the
    # parameter gradients are those of the selected values, out= keeps its
    # values elsewhere, bit for bit.
    rng = np.random.default_rng(seed)
    x = (3 + rng.standard_normal((rows, n))).astype(dtype)
    dy = rng.standard_normal((rows, n)).astype(dtype)
    where = mask_pattern(rng, rows, n, pattern)
    nan = np.asarray(np.nan).astype(dtype)
    xg, dyg = np.where(where, x, nan), np.where(where, dy, nan)
    g = rng.uniform(0.5, 2, n)
    old = rng.standard_normal((rows, n)).astype(dtype)
    out = old.copy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        if kind == "layer":
            _, m, r = fastnorm.layer_norm(xg, g, eps=1e-3, where=where, return_stats=True,
                                          dtype=np.float64)
            _, dg, db = fastnorm.layer_norm_backward(dyg, xg, m, r, g, where=where, out=out)
        else:
            _, r = fastnorm.rms_norm(xg, g, eps=1e-3, where=where, return_stats=True,
                                     dtype=np.float64)
            _, dg = fastnorm.rms_norm_backward(dyg, xg, r, g, where=where, out=out)
    rdx, rdg, rdb, xhat, rr = reference_grads(dy, x, (1,), where, kind, g)
    assert_bitwise(out[~where], old[~where])
    tout, _ = tolerances(x.dtype, x.dtype)
    with np.errstate(invalid="ignore", over="ignore"):
        scale = rr * g * (np.abs(dy) + np.abs(xhat) + 1) * (tout + 1e-12 * n)
        assert_close(out[where], rdx[where], scale[where] + tiny(x.dtype), "dx")
        pabs = np.where(where, np.abs(dy) * (np.abs(xhat) + 1), 0).sum(axis=0)
        assert_close(dg, rdg.ravel(), (tout + 1e-12 * rows) * pabs + tiny(x.dtype), "dgamma")
        if kind == "layer":
            assert_close(db, rdb.ravel(), (tout + 1e-12 * rows) * pabs + tiny(x.dtype), "dbeta")


@settings(max_examples=60, deadline=None)
@given(dtype=st.sampled_from(["float32", "float64"]), rows=st.sampled_from([2, 40, 700]),
       cols=st.integers(1, 70), pattern=st.sampled_from(["trailing", "random", "runs", "all",
                                                         "none"]),
       mask=st.sampled_from(["rows", "values", "values_t"]), kind=st.sampled_from(["batch",
                                                                                  "layer"]),
       seed=st.integers(0, 2**32 - 1))
def test_gradients_of_columns_of_any_mask_pattern(dtype, rows, cols, pattern, mask, kind, seed):
    # Gradients over the rows of columns (batch norm's features; layer norm
    # over axis 0, a gain per row) with whole rows or single values left
    # out, NaN in x and dy there: dx and the parameter gradients are those
    # of the selected values, out= keeps its values elsewhere, bit for bit.
    rng = np.random.default_rng(seed)
    x = (3 + rng.standard_normal((rows, cols))).astype(dtype)
    dy = rng.standard_normal((rows, cols)).astype(dtype)
    where = column_mask(rng, rows, cols, pattern, mask)
    sel = np.broadcast_to(where, x.shape)
    nan = np.asarray(np.nan).astype(dtype)
    xg, dyg = np.where(sel, x, nan), np.where(sel, dy, nan)
    g = rng.uniform(0.5, 2, cols if kind == "batch" else (rows, 1))
    old = rng.standard_normal((rows, cols)).astype(dtype)
    out = old.copy()
    n, m, m2, _ = masked_moments(x, (0,), where)
    with np.errstate(invalid="ignore", divide="ignore"):
        r = 1 / np.sqrt(m2 / n + 1e-3)
    backward = fastnorm.batch_norm_backward if kind == "batch" else fastnorm.layer_norm_backward
    _, dg, db = backward(dyg, xg, m, r, g, axis=0, where=where, out=out)
    rdx, rdg, rdb, xhat, rr = reference_grads(dy, x, (0,), where, kind,
                                              g if kind == "layer" else g[None, :])
    assert_bitwise(out[~sel], old[~sel])
    tout, _ = tolerances(x.dtype, x.dtype)
    with np.errstate(invalid="ignore", over="ignore"):
        scale = rr * np.abs(g) * (np.abs(dy) + np.abs(xhat) + 1) * (tout + 1e-12 * rows)
        assert_close(out[sel], rdx[sel], np.broadcast_to(scale, x.shape)[sel] + tiny(x.dtype),
                     "dx")
        pax = 0 if kind == "batch" else 1
        pabs = np.where(sel, np.abs(dy) * (np.abs(xhat) + 1), 0).sum(axis=pax)
        assert_close(dg.ravel(), rdg.ravel(), (tout + 1e-12 * rows) * pabs + tiny(x.dtype),
                     "dgamma")
        assert_close(db.ravel(), rdb.ravel(), (tout + 1e-12 * rows) * pabs + tiny(x.dtype),
                     "dbeta")


def test_gradient_of_whole_selected_rows_is_the_unmasked_one():
    # Rows left out entirely: the others' gradients are those of the
    # unmasked call on them alone; the parameters' gradients sum over them.
    rng = np.random.default_rng(11)
    x, dy = rng.standard_normal((2, 12, 33))
    keep = rng.random((12, 1)) < 0.6
    g = rng.standard_normal(33)
    with pytest.warns(RuntimeWarning, match="empty slice"):    # the rows left out
        _, m, r = fastnorm.layer_norm(x, g, where=keep, return_stats=True)
    dx, dg, db = fastnorm.layer_norm_backward(dy, x, m, r, g, where=keep)
    rows = keep.ravel()
    _, m1, r1 = fastnorm.layer_norm(x[rows], g, return_stats=True)
    dx1, dg1, db1 = fastnorm.layer_norm_backward(dy[rows], x[rows], m1, r1, g)
    assert_close(dx[rows], dx1, 1e-13)
    assert (dx[~rows] == 0).all()
    assert_close(dg, dg1, 1e-12)
    assert_close(db, db1, 1e-12)


def test_masked_gradients_give_the_same_bits_on_any_thread_count():
    rng = np.random.default_rng(12)
    x, dy = rng.standard_normal((2, 64, 300, 48)).astype(np.float32)
    where = rng.random((64, 300, 1)) < 0.7
    _, m, r = fastnorm.batch_norm(x, axis=(0, 1), where=where, return_stats=True)
    runs = []
    for t in (1, 2, 3):
        fastnorm.set_num_threads(t)
        try:
            with pytest.warns(RuntimeWarning, match="empty slice"):    # rows none selected
                _, lm, lr = fastnorm.layer_norm(x, where=where, return_stats=True)
            runs.append(fastnorm.batch_norm_backward(dy, x, m, r, axis=(0, 1), where=where)
                        + fastnorm.layer_norm_backward(dy, x, lm, lr, where=where))
        finally:
            fastnorm.set_num_threads(None)
    for run in runs[1:]:
        for a, b in zip(run, runs[0]):
            assert_bitwise(a, b)
