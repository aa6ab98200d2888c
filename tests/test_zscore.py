"""zscore: scipy.stats.zscore's contract, against a float64 reference that
follows SciPy's documented rules slice by slice (and against SciPy itself
where it is installed)."""
import warnings

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import fastnorm
from reference import OUT_TOL, norm_axes, out_dtype, slices_of, tiny
from routes import nan_probe
from strategies import LAYOUTS, arrange, axis_args, make_values, shapes


def ref_zscore(x, axis, ddof, policy, dtype):
    """SciPy's zscore written plainly: per slice the mean and the standard
    deviation over n - ddof (omit: of the values that are not NaN), NaN
    scores where there are no degrees of freedom, where the slice is
    constant (std <= eps * |mean|, eps of the result dtype) or, with
    "propagate", where it holds a NaN or an inf."""
    xd = np.asarray(x, dtype=np.float64)
    axes = norm_axes(axis, xd.ndim)
    flat = slices_of(xd, axes)
    z = np.empty_like(flat)
    eps = np.finfo(dtype).eps
    for i, v in enumerate(flat):
        keep = ~np.isnan(v) if policy == "omit" else np.ones(v.shape, bool)
        w = v[keep]
        n = w.size
        if n == 0 or n - ddof <= 0 or not np.isfinite(w).all():
            z[i] = np.nan
            continue
        d = w - w[0]
        mean = w[0] + d.mean()
        std = np.sqrt(((w - mean) ** 2).sum() / (n - ddof))
        z[i] = np.nan if std <= eps * abs(mean) else (v - mean) / std
    kept = tuple(i for i in range(xd.ndim) if i not in axes)
    moved = z.reshape([xd.shape[i] for i in kept] + [xd.shape[i] for i in axes])
    return np.moveaxis(moved, tuple(range(xd.ndim)), kept + axes)


@st.composite
def zscore_specs(draw):
    shape = draw(shapes(1, 4))
    return dict(
        shape=shape,
        axis=draw(axis_args(len(shape), allow_none=True)),
        dtype=draw(st.sampled_from(["float16", "float32", "float64", "int32"])),
        layout=draw(st.sampled_from(LAYOUTS)),
        values=draw(st.sampled_from(["normal", "ints", "offset", "const_slices"])),
        nans=draw(st.sampled_from([0.0, 0.0, 0.2, 1.0])),
        seed=draw(st.integers(0, 2**32 - 1)),
    )


@settings(max_examples=250, deadline=None)
@given(spec=zscore_specs(), ddof=st.sampled_from([0, 1, 2]),
       policy=st.sampled_from(["propagate", "omit"]), probed=st.booleans())
def test_zscore_matches_scipys_rules(spec, ddof, policy, probed):
    # probed: small arrays whose slices mostly hold a NaN go as big ones do
    with nan_probe(probed):
        check_zscore(spec, ddof, policy)


def check_zscore(spec, ddof, policy):
    rng = np.random.default_rng(spec["seed"])
    axes = norm_axes(spec["axis"], len(spec["shape"]))
    v = make_values(rng, spec["shape"], spec["dtype"], spec["values"], axes,
                    small=spec["dtype"] == "float16")
    if v.dtype.kind == "f" and v.size:
        v[rng.random(v.shape) < spec["nans"]] = np.nan
    x = arrange(v, spec["layout"], rng)
    z = fastnorm.zscore(x, spec["axis"], ddof=ddof, nan_policy=policy)
    res = out_dtype(x.dtype)
    want = ref_zscore(x, spec["axis"], ddof, policy, res)
    assert z.shape == x.shape and z.dtype == res
    assert np.array_equal(np.isnan(z), np.isnan(want))
    ok = ~np.isnan(want)
    # Scores of nearly constant float16 slices are large and rounded twice.
    allowed = OUT_TOL[res] * (np.abs(want) + 1) + tiny(res)
    if res == np.float16:
        allowed = allowed * 4
    assert np.all(np.abs(z[ok].astype(np.float64) - want[ok]) <= allowed[ok] if np.ndim(allowed)
                  else np.abs(z[ok].astype(np.float64) - want[ok]) <= allowed)


def test_nan_policies_on_one_slice():
    x = np.array([[25.11, 30.10, np.nan, 32.02, 43.15], [14.95, 16.06, 121.25, 94.35, 29.81]])
    assert np.isnan(fastnorm.zscore(x, axis=1)[0]).all()
    z = fastnorm.zscore(x, axis=1, nan_policy="omit")
    v = x[0, [0, 1, 3, 4]]
    want = (x[0] - v.mean()) / v.std()
    np.testing.assert_allclose(z[0], want, rtol=1e-14, equal_nan=True)
    np.testing.assert_allclose(z[1], (x[1] - x[1].mean()) / x[1].std(), rtol=1e-14)


@pytest.mark.parametrize("a,kw", [([5.0, 5.0, 5.0], {}), ([0.0, 0.0], {}),
                                  ([1.0, 2.0], {"ddof": 2}), ([1.0], {"ddof": 1}),
                                  ([np.nan, np.nan], {"nan_policy": "omit"})])
def test_constant_and_too_small_slices_give_nan_silently(a, kw):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        z = fastnorm.zscore(np.array(a), **kw)
    assert np.isnan(z).all()


def test_empty_input_gives_an_empty_result():
    for shape, axis in [((0,), 0), ((0, 3), 0), ((3, 0), 1), ((3, 0), 0), ((0,), None)]:
        z = fastnorm.zscore(np.empty(shape), axis)
        assert z.shape == shape and z.dtype == np.float64


def test_dtypes_out_and_in_place():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((30, 4)).astype(np.float32)
    assert fastnorm.zscore(x).dtype == np.float32
    assert fastnorm.zscore(x.astype(np.float16)).dtype == np.float16
    assert fastnorm.zscore(np.arange(6).reshape(3, 2)).dtype == np.float64
    z64 = fastnorm.zscore(x, dtype=np.float64)
    assert z64.dtype == np.float64
    out = np.empty_like(x)
    assert fastnorm.zscore(x, out=out) is out
    want = fastnorm.zscore(x)
    assert np.array_equal(out, want)
    assert fastnorm.zscore(x, out=x) is x and np.array_equal(x, want)
    with pytest.raises(TypeError):
        fastnorm.zscore(x, out=np.empty(x.shape))
    with pytest.raises(ValueError):
        fastnorm.zscore(x, out=np.empty((3, 3), np.float32))


def test_masked_arrays_score_their_unmasked_values():
    x = np.ma.MaskedArray([1.0, 2.0, 100.0, 3.0], mask=[0, 0, 1, 0])
    z = fastnorm.zscore(x)
    assert isinstance(z, np.ma.MaskedArray) and z.mask.tolist() == [0, 0, 1, 0]
    np.testing.assert_allclose(z.compressed(), fastnorm.zscore(np.array([1.0, 2.0, 3.0])))


def test_bad_arguments():
    with pytest.raises(TypeError, match="dtype"):
        fastnorm.zscore(np.array(["a"]))
    with pytest.raises(np.exceptions.AxisError):
        fastnorm.zscore(np.ones((2, 2)), axis=2)
    with pytest.raises(ValueError, match="NaN"):
        fastnorm.zscore(np.array([1.0, np.nan]), nan_policy="raise")


@pytest.mark.parametrize("chunks", [(3, 4), (20, 1), (1, 7)])
@pytest.mark.parametrize("axis", [0, 1, None])
def test_dask_gives_the_numpy_scores(chunks, axis):
    da = pytest.importorskip("dask.array")
    rng = np.random.default_rng(2)
    x = rng.standard_normal((20, 7)) + 3
    x[2, 3] = np.nan
    x[:, 5] = 4.0
    for policy in ("propagate", "omit"):
        want = fastnorm.zscore(x, axis, ddof=1, nan_policy=policy)
        got = fastnorm.zscore(da.from_array(x, chunks=chunks), axis, ddof=1,
                              nan_policy=policy).compute()
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, equal_nan=True)


def test_agrees_with_scipy_where_installed():
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(3)
    for dtype in (np.float64, np.float32, np.int64):
        x = (rng.standard_normal((9, 6, 5)) * 3 + 2).astype(dtype)
        if x.dtype.kind == "f":
            x[rng.random(x.shape) < 0.1] = np.nan
            x[4] = 7
        for axis in (0, 1, -1, None, (0, 2)):
            for ddof in (0, 1):
                for policy in ("propagate", "omit"):
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        want = stats.zscore(x, axis=axis, ddof=ddof, nan_policy=policy)
                    got = fastnorm.zscore(x, axis, ddof=ddof, nan_policy=policy)
                    assert got.dtype == want.dtype and got.shape == want.shape
                    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5, equal_nan=True)
