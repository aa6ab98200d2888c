"""fastnorm.explain's own contract: the keys it reports for every public
function, that it runs nothing and writes nothing (out= arrays, x in
place, running statistics and gradient outputs stay as they were), the
copies a call makes before its kernel runs, the errors it raises (a function
that is not fastnorm's, Dask arrays, whatever the call itself raises), and
that explaining in one thread leaves calls in other threads alone.  (The
routes themselves: test_routes*.py.)"""
import contextlib
import threading

import numpy as np
import pytest
from numpy.exceptions import AxisError

import fastnorm
import fastnorm._simd as dispatch
import fastpath
from reference import assert_bitwise, fingerprint

KEYS = {"pattern", "schedule", "threads", "streams", "descending", "float32_pass", "rows_pass",
        "in_cache", "simd", "slices", "slice_length", "fast_path", "copies", "machine", "tuning",
        "rules", "columns", "runs_fetch", "next_fetch"}
RNG = np.random.default_rng(0)
X = (2.0 + RNG.standard_normal((6, 4, 5))).astype(np.float32)
DY = RNG.standard_normal(X.shape).astype(np.float32)
_, LN_MEAN, LN_RSTD = fastnorm.layer_norm(X, return_stats=True)
_, RMS_RSTD = fastnorm.rms_norm(X, return_stats=True)
_, BN_MEAN, BN_RSTD = fastnorm.batch_norm(X, return_stats=True)
_, GN_MEAN, GN_RSTD = fastnorm.group_norm(X, 2, return_stats=True)

# One call of every public function: (function, arguments, keywords).
CALLS = {
    "mean_var": (fastnorm.mean_var, (X,), dict(axis=(0, 2))),
    "zscore": (fastnorm.zscore, (X,), dict(axis=(0, 2))),
    "layer_norm": (fastnorm.layer_norm, (X,), {}),
    "rms_norm": (fastnorm.rms_norm, (X,), {}),
    "batch_norm": (fastnorm.batch_norm, (X,), {}),
    "group_norm": (fastnorm.group_norm, (X, 2), {}),
    "instance_norm": (fastnorm.instance_norm, (X,), {}),
    "weight_norm": (fastnorm.weight_norm, (X,), {}),
    "weight_standardize": (fastnorm.weight_standardize, (X,), {}),
    "layer_norm_backward": (fastnorm.layer_norm_backward, (DY, X, LN_MEAN, LN_RSTD), {}),
    "rms_norm_backward": (fastnorm.rms_norm_backward, (DY, X, RMS_RSTD), {}),
    "batch_norm_backward": (fastnorm.batch_norm_backward, (DY, X, BN_MEAN, BN_RSTD), {}),
    "group_norm_backward": (fastnorm.group_norm_backward, (DY, X, GN_MEAN, GN_RSTD, 2), {}),
}


def test_every_public_function_is_explained():
    assert set(CALLS) == {f.__name__ for f in fastnorm._public_functions()}


@pytest.mark.parametrize("name", list(CALLS))
def test_keys_and_their_types(name):
    func, args, kw = CALLS[name]
    r = fastnorm.explain(func, *args, **kw)
    assert set(r) == KEYS, set(r) ^ KEYS
    assert r["pattern"] in ("slices", "images", "columns")
    assert r["schedule"] in ("rows", "lanes", "whole", "turns", "split", "images", "channels",
                             "tiles")
    for key in ("streams", "descending", "float32_pass", "rows_pass", "in_cache", "fast_path"):
        assert type(r[key]) is bool, key
    for key in ("threads", "slices", "slice_length"):
        assert type(r[key]) is int and r[key] >= 1, key
    assert r["simd"] == dispatch.kernels.build_info()["variant"]
    assert r["copies"] == []
    assert set(r["machine"]) == {"l1d", "l2", "l3", "cores", "guest", "source", "share",
                                 "share_rule", "profile"}
    assert r["tuning"] == dispatch.kernels.tuning()
    assert set(r["rules"]) == set(r["tuning"])
    if r["pattern"] == "columns" and r["schedule"] == "tiles" and "backward" not in name:
        assert set(r["columns"]) == {"tile_columns", "tiles", "row_blocks", "rows_per_block",
                                     "sweep_rows", "fetch_ahead"}
        assert r["columns"]["fetch_ahead"] in ("sweeps", "heads", "none")
    else:
        assert r["columns"] is None
    assert r["runs_fetch"] in (None, "own", "next slice", "next run")
    assert r["next_fetch"] in (None, "head", "whole")


def test_slices_and_their_length():
    r = fastnorm.explain(fastnorm.layer_norm, X, axis=(0, 2))
    assert (r["slices"], r["slice_length"]) == (4, 30)
    r = fastnorm.explain(fastnorm.batch_norm_backward, DY, X, BN_MEAN, BN_RSTD)
    assert (r["slices"], r["slice_length"]) == (4, 30)


def test_simd_is_the_level_in_use():
    for level in dispatch.available_levels():
        with dispatch.use(level):
            assert fastnorm.explain(fastnorm.layer_norm, X)["simd"] == level


def test_threads_are_the_team_the_call_would_get():
    big = np.zeros((300, 1000), np.float32)
    for n in (1, 2, 3):
        fastnorm.set_num_threads(n)
        assert fastnorm.explain(fastnorm.layer_norm, big)["threads"] == n
        # Calls below the kernels' parallel size run on one thread.
        assert fastnorm.explain(fastnorm.layer_norm, X)["threads"] == 1


# --------------------------------------------------------------------------
# nothing is run, nothing is written

@pytest.mark.parametrize("name", ["layer_norm", "rms_norm", "batch_norm", "group_norm",
                                  "instance_norm"])
def test_out_is_not_written(name):
    func, args, kw = CALLS[name]
    out = np.full(X.shape, 7.0, np.float32)
    before = fingerprint(out)
    fastnorm.explain(func, *args, out=out, **kw)
    assert fingerprint(out) == before


def test_mean_var_out_is_not_written():
    om, ov = np.full(4, 7.0, np.float32), np.full(4, 7.0, np.float32)
    before = fingerprint(om), fingerprint(ov)
    fastnorm.explain(fastnorm.mean_var, X, axis=(0, 2), out=(om, ov))
    assert (fingerprint(om), fingerprint(ov)) == before


def test_in_place_x_is_not_written():
    x = X.copy()
    fastnorm.explain(fastnorm.layer_norm, x, out=x)
    fastnorm.explain(fastnorm.layer_norm, x, axis=(0, 2), out=x)
    assert_bitwise(x, X)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("fast", [True, False], ids=["fast path", "general path"])
def test_running_statistics_are_not_updated(dtype, fast):
    rm, rv = np.full(4, 0.5, dtype), np.full(4, 2.0, dtype)
    before = fingerprint(rm), fingerprint(rv)
    with contextlib.nullcontext() if fast else fastpath.general_path():
        r = fastnorm.explain(fastnorm.batch_norm, X, None, None, rm, rv, momentum=0.5)
    assert r["fast_path"] == fast
    assert (fingerprint(rm), fingerprint(rv)) == before


@pytest.mark.parametrize("name", ["layer_norm_backward", "rms_norm_backward",
                                  "batch_norm_backward", "group_norm_backward"])
def test_gradient_outputs_are_not_written(name):
    func, args, kw = CALLS[name]
    dx = np.full(X.shape, 7.0, np.float32)
    before = fingerprint(dx)
    fastnorm.explain(func, *args, out=(dx, None, None) if name != "rms_norm_backward"
                     else (dx, None), **kw)
    assert fingerprint(dx) == before


def test_inputs_are_not_written():
    arrays = (X, DY, LN_MEAN, LN_RSTD)
    before = [fingerprint(a) for a in arrays]
    for func, args, kw in CALLS.values():
        fastnorm.explain(func, *args, **kw)
    assert [fingerprint(a) for a in arrays] == before


def test_an_empty_input_has_no_route():
    with pytest.warns(RuntimeWarning):     # as the call itself: an empty reduction
        r = fastnorm.explain(fastnorm.layer_norm, np.zeros((3, 0)))
    assert r["pattern"] is None and r["schedule"] is None and r["fast_path"] is False
    assert r["copies"] == []


# --------------------------------------------------------------------------
# copies made before the kernel runs

@pytest.mark.parametrize("what, call, note", [
    ("integers", lambda: fastnorm.explain(fastnorm.layer_norm, np.arange(48).reshape(6, 8)),
     "x: int64 converted to float64"),
    ("byte-swapped x", lambda: fastnorm.explain(fastnorm.layer_norm, X.astype(">f4")),
     "x: copied to aligned native float32"),
    ("a list", lambda: fastnorm.explain(fastnorm.layer_norm, X.tolist()),
     "x: list converted to an ndarray"),
    ("a byte-swapped out", lambda: fastnorm.explain(fastnorm.layer_norm, X,
                                                    out=np.empty(X.shape, ">f4")),
     "out: written through a temporary, then copied in"),
    ("float32 x, float64 dy", lambda: fastnorm.explain(
        fastnorm.layer_norm_backward, DY.astype(np.float64), X, LN_MEAN, LN_RSTD, axis=(2,)),
     "x: float32 converted to float64"),
    ("integer gradients", lambda: fastnorm.explain(
        fastnorm.layer_norm_backward, np.ones((6, 8), int), np.arange(48).reshape(6, 8),
        np.zeros((6, 1)), np.ones((6, 1)), axis=(1,)),
     "dy: int64 converted to float64"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_copies_are_noted(what, call, note):
    copies = call()["copies"]
    assert note in copies, copies


def test_a_parameter_inside_out_is_copied_first():
    # A gain in keepdims layout is read where it is, so one inside out= is
    # copied first; one of the named shape is widened into an array of its
    # own anyway (param_named), with no copy to report.
    x = RNG.standard_normal((6, 8))
    with fastpath.general_path():
        r = fastnorm.explain(fastnorm.layer_norm, x, x[2:3], out=x)
        assert r["copies"] == ["a parameter that shares memory with out: copied first"]
        assert fastnorm.explain(fastnorm.layer_norm, x, x[2:3].copy(), out=x)["copies"] == []
        assert fastnorm.explain(fastnorm.layer_norm, x, x[2], out=x)["copies"] == []
    y = x.copy()
    want = fastnorm.layer_norm(y, y[2].copy(), out=y.copy())
    assert_bitwise(fastnorm.layer_norm(x, x[2], out=x), want, "gain inside out")


# --------------------------------------------------------------------------
# errors

@pytest.mark.parametrize("func", [np.mean, lambda x: x, fastnorm.show_config,
                                  fastnorm.set_num_threads, fastnorm.explain],
                         ids=["np.mean", "a lambda", "show_config", "set_num_threads", "explain"])
def test_a_function_that_is_not_fastnorms_is_a_type_error(func):
    with pytest.raises(TypeError, match="public fastnorm function"):
        fastnorm.explain(func, X)


def test_dask_arguments_are_a_type_error():
    da = pytest.importorskip("dask.array")
    dx = da.from_array(X, chunks=(3, 4, 5))
    with pytest.raises(TypeError, match="Dask"):
        fastnorm.explain(fastnorm.layer_norm, dx)
    with pytest.raises(TypeError, match="Dask"):
        fastnorm.explain(fastnorm.layer_norm, X, gamma=da.from_array(np.ones(5)))
    with pytest.raises(TypeError, match="Dask"):
        fastnorm.explain(fastnorm.layer_norm_backward, DY, dx, LN_MEAN, LN_RSTD)


def test_the_calls_own_errors_are_raised():
    with pytest.raises(AxisError):
        fastnorm.explain(fastnorm.layer_norm, X, axis=5)
    with pytest.raises(ValueError):
        fastnorm.explain(fastnorm.layer_norm, X, np.ones(3))
    with pytest.raises(TypeError):
        fastnorm.explain(fastnorm.layer_norm, X.astype(complex))
    with pytest.raises(ValueError):
        fastnorm.explain(fastnorm.batch_norm, X, training=False)


def test_explaining_in_one_thread_leaves_calls_in_another_alone():
    # While one thread explains calls over and over, calls in another run
    # and give their usual bits.
    x = RNG.standard_normal((64, 300))
    want = fastnorm.layer_norm(x, return_stats=True)
    stop = threading.Event()

    def explaining():
        while not stop.is_set():
            fastnorm.explain(fastnorm.layer_norm, x, return_stats=True)

    t = threading.Thread(target=explaining)
    t.start()
    try:
        for _ in range(200):
            got = fastnorm.layer_norm(x, return_stats=True)
            for a, b in zip(got, want):
                assert_bitwise(a, b)
    finally:
        stop.set()
        t.join()
