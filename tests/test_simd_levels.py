"""Every instruction-set level this CPU can run passes the value tests.

The `simd_level` fixture (conftest) switches the kernels for the duration of
a test; the hypothesis checkers are the same as the per-function tests,
with fewer examples per level.
"""

import numpy as np
import pytest
from hypothesis import given, settings

import fastnorm
import fastnorm._simd as dispatch
from checks import check_batch_norm, check_layer_norm, check_mean_var, check_rms_norm
from reference import assert_close, keep_shape, ref_layer_norm, ref_mean_var, ref_rms_norm
from strategies import mean_var_specs, normalizer_spec

_PER_LEVEL = max(10, settings().max_examples // 3)
# The level is switched inside the test (not by the fixture) because a
# hypothesis test runs many examples per fixture instance.
LEVELS = pytest.mark.parametrize("level", dispatch.available_levels())


def test_levels_are_consistent():
    built, avail = dispatch.built_levels(), dispatch.available_levels()
    assert "baseline" in avail
    assert set(avail) <= set(built) <= set(dispatch.LEVELS)
    # The default is the best level available here.
    assert dispatch.kernels.build_info()["variant"] == avail[0]


def test_use_switches_and_restores():
    before = dispatch.kernels
    for level in dispatch.available_levels():
        with dispatch.use(level) as k:
            assert k.build_info()["variant"] == level
            assert dispatch.kernels is k
        assert dispatch.kernels is before


def test_use_restores_after_an_error():
    before = dispatch.kernels
    with pytest.raises(ZeroDivisionError):
        with dispatch.use("baseline"):
            1 / 0
    assert dispatch.kernels is before


def test_unknown_level_is_rejected():
    with pytest.raises(ValueError):
        with dispatch.use("sse9"):
            pass


def test_fastnorm_simd_environment_variable(run_python):
    code = "import fastnorm._simd as d; print(d.kernels.build_info()['variant'])"
    r = run_python(code, FASTNORM_SIMD="baseline")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "baseline"
    r = run_python(code, FASTNORM_SIMD="bogus")
    assert r.returncode != 0 and "FASTNORM_SIMD" in r.stderr


# --------------------------------------------------------------------------
# the value tests, on every level

@LEVELS
@settings(max_examples=_PER_LEVEL)
@given(spec=mean_var_specs())
def test_mean_var(level, spec):
    with dispatch.use(level):
        check_mean_var(spec)


@LEVELS
@settings(max_examples=_PER_LEVEL)
@given(spec=normalizer_spec("layer"))
def test_layer_norm(level, spec):
    with dispatch.use(level):
        check_layer_norm(spec)


@LEVELS
@settings(max_examples=_PER_LEVEL)
@given(spec=normalizer_spec("rms"))
def test_rms_norm(level, spec):
    with dispatch.use(level):
        check_rms_norm(spec)


@LEVELS
@settings(max_examples=_PER_LEVEL)
@given(spec=normalizer_spec("batch"))
def test_batch_norm(level, spec):
    with dispatch.use(level):
        check_batch_norm(spec)


# Lengths around every level's vector width and lane count (2/4/8 doubles,
# 16/32/64 Welford lanes), and past one 4096-value block.
LENGTHS = [1, 2, 3, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 129, 4095, 4097, 9000]


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_run_lengths(simd_level, dtype):
    rng = np.random.default_rng(0)
    tol = {np.float16: 5e-3, np.float32: 1e-5, np.float64: 1e-12}[dtype]
    for n in LENGTHS:
        x = (3 + rng.standard_normal((3, n))).astype(dtype)
        g = rng.uniform(0.5, 2, size=n)
        for axes, xx in (((1,), x), ((0,), np.ascontiguousarray(x.T)), ((1,), x[:, ::-1])):
            p = tuple(i for i in range(2) if i not in axes)
            gk = g.reshape(keep_shape(xx.shape, p)) if axes == (1,) else None
            y, mean, rstd = fastnorm.layer_norm(xx, gk, None, axis=axes, return_stats=True)
            yr, mr, rr, xhat, spread = ref_layer_norm(xx, axes, gk)
            gabs = 1.0 if gk is None else np.abs(gk)
            assert_close(y, yr, tol * gabs * (np.abs(xhat) + rr * spread) + 1e-7, f"y n={n}")
            assert_close(rstd, rr, 1e-6 * rr, f"rstd n={n}")
            yr2, rr2 = ref_rms_norm(xx, axes)
            y2 = fastnorm.rms_norm(xx, axis=axes)
            assert_close(y2, yr2, 2 * tol * np.abs(yr2) + 1e-7, f"rms n={n}")
            m, v = fastnorm.mean_var(xx, axis=axes, keepdims=True, dtype=np.float64)
            rm, rv, sp = ref_mean_var(xx, axes)
            assert_close(m, rm, 1e-12 * (1 + np.abs(rm)), f"mean n={n}")
            assert_close(v, rv, 1e-12 * (sp**2 + rv), f"var n={n}")


@pytest.mark.parametrize("shape,axis", [((7, 700), 0), ((130, 1100), 0), ((5000, 9), 0),
                                        ((8, 5, 33, 3), (0, 2, 3)), ((4, 9, 9, 17), (0, 1, 2))])
def test_batch_norm_shapes(simd_level, shape, axis):
    rng = np.random.default_rng(1)
    x = (rng.standard_normal(shape) * 3 - 7).astype(np.float32)
    axes = (axis,) if isinstance(axis, int) else axis
    kshape = keep_shape(shape, axes)
    g, b = rng.uniform(0.5, 2, size=kshape), rng.standard_normal(kshape)
    rm, rv = np.zeros(kshape), np.ones(kshape)
    y, mean, rstd = fastnorm.batch_norm(x, g, b, rm, rv, axis=axis, return_stats=True)
    yr, mr, rr, _, _ = ref_layer_norm(x, axes, g, b)
    assert_close(y, yr, 1e-5 * (np.abs(yr) + 1), "y")
    assert_close(mean, mr, 1e-6 * (np.abs(mr) + 1), "mean")
    ye = fastnorm.batch_norm(x, g, b, rm, rv, axis=axis, training=False)
    ref_e = (x.astype(np.float64) - rm) / np.sqrt(rv + 1e-5) * g + b
    assert_close(ye, ref_e, 1e-5 * (np.abs(ref_e) + 1), "eval y")


def test_levels_agree_closely():
    # Different levels may differ in the last bits (other lane counts),
    # but never by more than rounding.
    x = np.random.default_rng(2).standard_normal((16, 1000)) + 1e3
    outs = []
    for level in dispatch.available_levels():
        with dispatch.use(level):
            outs.append(fastnorm.layer_norm(x))
    for o in outs[1:]:
        assert_close(o, outs[0], 1e-11)
