"""Dask arrays: every public function, forward and backward, returns lazy
Dask arrays equal to the NumPy path's results on the same data, for chunks
along the reduced axes, uneven chunks and a single chunk.  Computed on a
real distributed LocalCluster (two worker processes, one thread each, bound
to 127.0.0.1); the thread tests also use Dask's local threaded scheduler and
an in-process cluster."""
import logging
import warnings
import os

import numpy as np
import pytest
from numpy.exceptions import AxisError

pytest.importorskip("dask.array", reason="Dask is an optional dependency: "
                    "pip install '.[test,dask]' to run these tests")
pytest.importorskip("distributed", reason="the Dask tests run on a distributed LocalCluster: "
                    "pip install '.[test,dask]' to run them")
import dask  # noqa: E402
import dask.array as da  # noqa: E402
from dask.system import CPU_COUNT  # noqa: E402
from distributed import Client, LocalCluster  # noqa: E402

import fastnorm
import fastnorm._dask.tasks
import fastnorm._grad
import fastnorm._call
from reference import assert_bitwise, ref_row_variances

CLUSTER = dict(n_workers=2, threads_per_worker=1, protocol="tcp://", host="127.0.0.1",
               scheduler_port=0, dashboard_address="127.0.0.1:0", silence_logs=logging.ERROR)


@pytest.fixture(scope="module", autouse=True)
def client():
    """The default scheduler of every test here: a LocalCluster of two
    worker processes with one thread each."""
    with LocalCluster(processes=True, **CLUSTER) as cluster, Client(cluster) as c:
        yield c


def _x(shape=(12, 6, 5, 8), dtype=np.float64, seed=0):
    rng = np.random.default_rng(seed)
    return (3.0 + rng.standard_normal(shape) * 2).astype(dtype)


X = _x()
# Chunkings of X: one chunk (whole slices everywhere), chunks along axis 0
# only (a kept axis for layer norm, a reduced one for batch norm), uneven
# chunks on every axis; and many small chunks, for a deeper tree.
CHUNKINGS = {
    "single": X.shape,
    "batch": (4, 6, 5, 8),
    "uneven": ((5, 7), (1, 2, 3), (2, 3), (3, 5)),
}
FINE = (4, 3, 2, 4)


def _rng_arrays():
    rng = np.random.default_rng(1)
    return {
        "c": rng.uniform(0.5, 2.0, 6), "c2": rng.standard_normal(6),      # per channel
        "hw": rng.uniform(0.5, 2.0, (5, 8)), "hw2": rng.standard_normal((5, 8)),
        "chw": rng.uniform(0.5, 2.0, (6, 5, 8)), "w": rng.uniform(0.5, 2.0, 8),
        "n": rng.uniform(0.5, 2.0, 12), "dy": rng.standard_normal(X.shape),
    }


P = _rng_arrays()


def assert_same(lazy, eager, rtol=1e-12, atol=1e-12):
    """lazy (Dask arrays) has eager's structure, shapes, dtypes and values."""
    if isinstance(eager, tuple):
        assert isinstance(lazy, tuple) and len(lazy) == len(eager)
    else:
        lazy, eager = (lazy,), (eager,)
    for a in lazy:
        assert isinstance(a, da.Array), f"expected a Dask array, got {type(a).__name__}"
    computed = dask.compute(*lazy)
    for k, (a, lz, e) in enumerate(zip(computed, lazy, eager)):
        e = np.asarray(e)
        assert lz.shape == e.shape and lz.dtype == e.dtype, f"result {k} (metadata)"
        assert a.shape == e.shape and a.dtype == e.dtype, f"result {k}"
        np.testing.assert_allclose(a, e, rtol=rtol, atol=atol, err_msg=f"result {k}")


# Each forward case: a call f(x) made once on the Dask array, once on X.
FORWARD = {
    "mean_var-nchw": lambda x: fastnorm.mean_var(x, axis=(0, 2, 3), ddof=1),
    "mean_var-all-keepdims": lambda x: fastnorm.mean_var(x, keepdims=True),
    "mean_var-rows": lambda x: fastnorm.mean_var(x, axis=-1),
    "layer_norm-sample": lambda x: fastnorm.layer_norm(x, P["chw"], P["chw"] - 1,
                                                       axis=(1, 2, 3), return_stats=True),
    "layer_norm-rows": lambda x: fastnorm.layer_norm(x, P["w"], P["w"] * 2),
    "rms_norm-hw": lambda x: fastnorm.rms_norm(x, P["hw"], axis=(2, 3), return_stats=True),
    "rms_norm-rows": lambda x: fastnorm.rms_norm(x, P["w"], eps=1e-3),
    "batch_norm-nchw": lambda x: fastnorm.batch_norm(x, P["c"], P["c2"], return_stats=True),
    "batch_norm-nchw-y": lambda x: fastnorm.batch_norm(x, P["c"], P["c2"]),
    "batch_norm-nhwc-eval": lambda x: fastnorm.batch_norm(
        x, P["w"], None, P["w"] - 1, P["w"], axis=(0, 1, 2), training=False,
        return_stats=True),
    "group_norm": lambda x: fastnorm.group_norm(x, 3, P["c"], P["c2"], return_stats=True),
    "group_norm-y": lambda x: fastnorm.group_norm(x, 2, P["c"], P["c2"], eps=1e-2),
    "group_norm-nhwc": lambda x: fastnorm.group_norm(x, 4, channel_axis=-1,
                                                     return_stats=True),
    "group_norm-one-gain": lambda x: fastnorm.group_norm(x, 3, P["c"][:1].reshape(1, 1, 1, 1),
                                                         P["c2"].reshape(1, 6, 1, 1)),
    "instance_norm": lambda x: fastnorm.instance_norm(x, P["c"], P["c2"], return_stats=True),
    "instance_norm-y": lambda x: fastnorm.instance_norm(x),
    "weight_norm": lambda x: fastnorm.weight_norm(x, P["n"], return_norm=True),
    "weight_norm-y": lambda x: fastnorm.weight_norm(x, P["n"]),
    "weight_norm-axes": lambda x: fastnorm.weight_norm(x, axis=(1, 3)),
    "weight_standardize": lambda x: fastnorm.weight_standardize(x),
}


@pytest.mark.parametrize("chunks", list(CHUNKINGS))
@pytest.mark.parametrize("case", list(FORWARD))
def test_forward_matches_numpy(case, chunks):
    f = FORWARD[case]
    assert_same(f(da.from_array(X, chunks=CHUNKINGS[chunks])), f(X))


def test_forward_on_many_chunks_in_a_deep_tree():
    """36 chunks, merged two at a time: every forward case in one compute."""
    d = da.from_array(X, chunks=FINE)
    with dask.config.set(split_every=2):
        lazy = [f(d) for f in FORWARD.values()]
    eager = [f(X) for f in FORWARD.values()]
    assert_same(_flat(lazy), _flat(eager))


def _flat(results):
    return tuple(a for r in results for a in (r if isinstance(r, tuple) else (r,)))


def _stats(name, **kw):
    return getattr(fastnorm, name)(X, return_stats=True, **kw)[1:]


# Each backward case: f(dy, x) with statistics from the NumPy forward on X.
_LN, _LN_ROWS = _stats("layer_norm", axis=(2, 3)), _stats("layer_norm")
_RMS, _BN = _stats("rms_norm"), _stats("batch_norm", gamma=P["c"])
_GN = _stats("group_norm", num_groups=2)
BACKWARD = {
    "layer_norm_backward-hw": lambda dy, x: fastnorm.layer_norm_backward(
        dy, x, *_LN, P["hw"], axis=(2, 3)),
    "layer_norm_backward-rows": lambda dy, x: fastnorm.layer_norm_backward(dy, x, *_LN_ROWS),
    "rms_norm_backward": lambda dy, x: fastnorm.rms_norm_backward(dy, x, *_RMS, P["w"]),
    "batch_norm_backward": lambda dy, x: fastnorm.batch_norm_backward(dy, x, *_BN, P["c"]),
    "batch_norm_backward-eval": lambda dy, x: fastnorm.batch_norm_backward(
        dy, x, *_BN, P["c"].reshape(1, 6, 1, 1), training=False),
    "group_norm_backward": lambda dy, x: fastnorm.group_norm_backward(dy, x, *_GN, 2, P["c"]),
    "group_norm_backward-no-gamma": lambda dy, x: fastnorm.group_norm_backward(dy, x, *_GN, 2),
    "group_norm_backward-one-gain": lambda dy, x: fastnorm.group_norm_backward(
        dy, x, *_GN, 2, P["c"][:1].reshape(1, 1, 1, 1)),
}


@pytest.mark.parametrize("chunks", ["single", "batch", "uneven"])
@pytest.mark.parametrize("case", list(BACKWARD))
def test_backward_matches_numpy(case, chunks):
    f = BACKWARD[case]
    # dy in other chunks than x with uneven chunks (it is read in x's).
    dy = da.from_array(P["dy"], chunks=FINE if chunks == "uneven" else CHUNKINGS[chunks])
    x = da.from_array(X, chunks=CHUNKINGS[chunks])
    assert_same(f(dy, x), f(P["dy"], X), rtol=1e-11, atol=1e-11)


@pytest.mark.parametrize("masked", [False, True])
def test_backward_of_many_features_in_batches(masked):
    # More features than one pass of the columns' gradients takes: each
    # pass reads and writes its own features' sums between the two phases.
    rng = np.random.default_rng(8)
    x, dy = rng.standard_normal((2, 12, 20000))
    g = rng.uniform(0.5, 2, 20000)
    where = None
    if masked:
        where = rng.random(x.shape) < 0.5
        where[:2] = True
    _, m, r = fastnorm.batch_norm(x, g, axis=0, return_stats=True, where=where)
    want = fastnorm.batch_norm_backward(dy, x, m, r, g, axis=0, where=where)
    chunked = [da.from_array(a, chunks=(4, 20000)) for a in (dy, x)]
    got = fastnorm.batch_norm_backward(*chunked, m, r, g, axis=0, where=where)
    assert_same(got, want, rtol=1e-11, atol=1e-11)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_low_precision_inputs(dtype):
    x = _x((10, 6, 7), dtype)
    d = da.from_array(x, chunks=((3, 7), 4, (2, 5)))
    tol = 2 * np.finfo(dtype).eps
    for f in (lambda a: fastnorm.mean_var(a, axis=(0, 2)),
              lambda a: fastnorm.layer_norm(a, axis=(1, 2), return_stats=True),
              lambda a: fastnorm.batch_norm(a, dtype=np.float64, return_stats=True),
              lambda a: fastnorm.rms_norm(a, np.arange(1.0, 8.0), return_stats=True)):
        assert_same(f(d), f(x), rtol=tol, atol=tol)
    dy = _x(x.shape, dtype, seed=3)
    _, mean, rstd = fastnorm.layer_norm(x, axis=(1, 2), return_stats=True)
    assert_same(fastnorm.layer_norm_backward(da.from_array(dy, chunks=4), d, mean, rstd,
                                             axis=(1, 2)),
                fastnorm.layer_norm_backward(dy, x, mean, rstd, axis=(1, 2)),
                rtol=4 * tol, atol=4 * tol)


def test_integer_input_and_dtype_argument():
    x = np.arange(60, dtype=np.int32).reshape(6, 10) % 7
    d = da.from_array(x, chunks=(4, 3))
    assert_same(fastnorm.mean_var(d, axis=0), fastnorm.mean_var(x, axis=0))
    assert_same(fastnorm.mean_var(d, axis=1, dtype=np.float32, keepdims=True),
                fastnorm.mean_var(x, axis=1, dtype=np.float32, keepdims=True))
    assert_same(fastnorm.layer_norm(d, dtype=np.float16), fastnorm.layer_norm(x, dtype=np.float16),
                rtol=1e-3, atol=1e-3)


def test_dask_parameters_with_numpy_x():
    """Any argument may be the Dask array, chunked any way: the result is lazy."""
    g = da.from_array(P["hw"], chunks=(2, 3))
    d = da.from_array(X, chunks=CHUNKINGS["uneven"])
    assert_same(fastnorm.layer_norm(X, g, axis=(2, 3)),
                fastnorm.layer_norm(X, P["hw"], axis=(2, 3)))
    assert_same(fastnorm.layer_norm(d, g, P["hw2"], axis=(2, 3)),
                fastnorm.layer_norm(X, P["hw"], P["hw2"], axis=(2, 3)))
    rm, rv = da.from_array(P["c2"], chunks=4), da.from_array(P["c"], chunks=2)
    assert_same(fastnorm.batch_norm(X, None, None, rm, rv, training=False),
                fastnorm.batch_norm(X, None, None, P["c2"], P["c"], training=False))
    mean, rstd = (da.from_array(s, chunks=3) for s in _LN)
    assert_same(fastnorm.layer_norm_backward(P["dy"], X, mean, rstd, da.from_array(P["hw"]),
                                             axis=(2, 3)),
                fastnorm.layer_norm_backward(P["dy"], X, *_LN, P["hw"], axis=(2, 3)),
                rtol=1e-11, atol=1e-11)
    assert_same(fastnorm.group_norm(X, 3, da.from_array(P["c"], chunks=4)),
                fastnorm.group_norm(X, 3, P["c"]))
    one = P["c"][:1].reshape(1, 1, 1, 1)
    assert_same(fastnorm.instance_norm(d, da.from_array(one), da.from_array(one)),
                fastnorm.instance_norm(X, one, one))


def test_batch_norm_updates_running_statistics_before_returning():
    """Training with running statistics computes the batch statistics at
    once (one pass) and updates the NumPy running statistics in place, as
    the NumPy path does; y stays lazy and computing it changes nothing more."""
    d = da.from_array(X, chunks=CHUNKINGS["uneven"])
    rm, rv = np.zeros(6), np.ones((1, 6, 1, 1), np.float32)
    rm_np, rv_np = rm.copy(), rv.copy()
    y, mean, rstd = fastnorm.batch_norm(d, P["c"], P["c2"], rm, rv, momentum=0.3,
                                        return_stats=True)
    expected = fastnorm.batch_norm(X, P["c"], P["c2"], rm_np, rv_np, momentum=0.3,
                                   return_stats=True)
    np.testing.assert_allclose(rm, rm_np, rtol=1e-12)
    np.testing.assert_allclose(rv, rv_np, rtol=1e-6)
    assert_same((y, mean, rstd), expected)
    after = rm.copy(), rv.copy()
    y.compute()
    np.testing.assert_array_equal(rm, after[0])
    np.testing.assert_array_equal(rv, after[1])
    with pytest.raises(TypeError, match="updated in place"):
        fastnorm.batch_norm(d, running_mean=da.zeros(6), running_var=da.ones(6))


def _explode(block):
    raise AssertionError("computed at call time")


def test_calls_are_lazy():
    """Nothing is computed by a call, except batch norm's running update."""
    bad = da.zeros(X.shape, chunks=(6, 3, 5, 4)).map_blocks(_explode, dtype=np.float64)
    for f in FORWARD.values():
        f(bad)
    for f in BACKWARD.values():
        f(bad, bad)
    with pytest.raises(AssertionError, match="call time"):
        fastnorm.batch_norm(bad, running_mean=np.zeros(6), running_var=np.ones(6))


def test_errors_are_raised_at_call_time():
    d = da.from_array(X, chunks=4)
    with pytest.raises(AxisError):
        fastnorm.layer_norm(d, axis=4)
    with pytest.raises(ValueError, match="repeated"):
        fastnorm.mean_var(d, axis=(1, -3))
    with pytest.raises(ValueError, match="gamma has shape"):
        fastnorm.layer_norm(d, da.ones(7))
    with pytest.raises(ValueError, match="divide"):
        fastnorm.group_norm(d, 4)
    with pytest.raises(TypeError, match="complex"):
        fastnorm.rms_norm(d.astype(np.complex128))
    with pytest.raises(ValueError, match="more than one value"):
        fastnorm.batch_norm(d[:1, :, :1, :1])
    with pytest.raises(ValueError, match="dy has shape"):
        fastnorm.rms_norm_backward(d[1:], d, *_RMS)
    with pytest.raises(ValueError, match="expected"):
        fastnorm.group_norm_backward(P["dy"], d, _GN[0][:, :1], _GN[1], 2)
    for f in (lambda: fastnorm.layer_norm(d, out=np.empty(X.shape)),
              lambda: fastnorm.mean_var(d, out=(None, None)),
              lambda: fastnorm.batch_norm_backward(d, d, *_BN, out=np.empty(X.shape))):
        with pytest.raises(TypeError, match="out= is not supported with Dask"):
            f()


def test_split_every_shapes_the_tree():
    """Statistics are merged in Dask's tree reduction: split_every (Dask's
    configuration) sets its depth, not the result."""
    d = da.from_array(X, chunks=(1, 6, 5, 8))  # 12 chunks along the reduced axis
    expected = fastnorm.mean_var(X, axis=0)
    for split_every, tree in ((2, True), (16, False)):
        with dask.config.set(split_every=split_every):
            lazy = fastnorm.mean_var(d, axis=0)
        assert tree == any("partial" in name for name in lazy[0].dask.layers)
        assert_same(lazy, expected)


def test_nonfinite_values_stay_in_their_slices():
    x = X.copy()
    x[3, 1, 2, 5], x[7, 4, 0, 0] = np.nan, np.inf
    for chunks in ((12, 6, 5, 4), FINE):  # the inf alone in its chunk, or not
        d = da.from_array(x, chunks=chunks)
        for f in (lambda a: fastnorm.layer_norm(a, axis=(1, 2, 3), return_stats=True),
                  lambda a: fastnorm.batch_norm(a, return_stats=True),
                  lambda a: fastnorm.rms_norm(a, axis=(1, 2, 3), return_stats=True),
                  lambda a: fastnorm.group_norm(a, 3, channel_axis=1, return_stats=True),
                  lambda a: fastnorm.mean_var(a, axis=(2, 3))):
            lazy, eager = f(d), f(x)
            for a, e in zip(dask.compute(*lazy), eager):
                np.testing.assert_array_equal(np.isnan(a), np.isnan(e))
                np.testing.assert_allclose(a, e, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("ddof", [0, 1, 2.5, 6, 7])
def test_each_slice_divides_by_its_own_degrees_of_freedom(ddof):
    # Rows selecting 0 .. 7 values over chunks of two columns, one row
    # constant: M2 / max(k - ddof, 0) as the local call gives it.
    x = np.random.default_rng(5).standard_normal((8, 7))
    x[4, :] = 1.0
    where = np.arange(7) < np.arange(8)[:, None]
    d = da.from_array(x, chunks=(3, 2))
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        masked = fastnorm.mean_var(d, axis=1, ddof=ddof, where=where)[1].compute()
        whole = fastnorm.mean_var(d, axis=1, ddof=ddof)[1].compute()
    np.testing.assert_allclose(masked, ref_row_variances(x, where, ddof), rtol=1e-13)
    np.testing.assert_allclose(whole, ref_row_variances(x, where | True, ddof), rtol=1e-13)


def test_empty_reductions_warn_at_call_time():
    d = da.ones((0, 5), chunks=2)
    with pytest.warns(RuntimeWarning, match="empty"):
        mean, var = fastnorm.mean_var(d, axis=0)
    assert np.isnan(mean.compute()).all() and np.isnan(var.compute()).all()
    assert fastnorm.layer_norm(d).compute().shape == (0, 5)


# --------------------------------------------------------------------------
# threads: Dask runs one task per thread, so the kernels inside a task get
# their share of the cores, not all of them.

def _recording(monkeypatch):
    """Record the thread count every kernel call of this process gets."""
    seen = []
    for module in (fastnorm._call,):
        def record(original=module.team_size):
            seen.append(original())
            return seen[-1]
        monkeypatch.setattr(module, "team_size", record)
    return seen


def _work(x):
    """A forward and a backward that both go through chunk tasks."""
    d = da.from_array(x, chunks=(8, 64))
    y, mean, rstd = fastnorm.layer_norm(d, axis=0, return_stats=True)
    return y, fastnorm.layer_norm_backward(d, d, mean, rstd, axis=0)[0]


def test_worker_processes_run_one_openmp_thread_per_task(client):
    assert set(client.run(fastnorm.get_num_threads).values()) == {1}

    def kernel_threads_in_a_task():
        import fastnorm._call as run
        seen = []
        original = run.team_size
        run.team_size = lambda: seen.append(original()) or seen[-1]
        try:
            fastnorm._dask.tasks.chunk_moments(np.ones((64, 1024)), (1,), True)
        finally:
            run.team_size = original
        return seen

    assert client.submit(kernel_threads_in_a_task, pure=False).result() == [1]


@pytest.mark.parametrize("pool_threads", [None, 1])
def test_threaded_scheduler_shares_the_cores(monkeypatch, pool_threads):
    seen = _recording(monkeypatch)
    x = _x((32, 128))
    with dask.config.set(scheduler="threads", num_workers=pool_threads):
        dask.compute(*_work(x))
    share = max(1, CPU_COUNT // (pool_threads or CPU_COUNT))
    assert seen and max(seen) <= share
    if pool_threads == 1:  # one task at a time: it may use every core OpenMP offers
        monkeypatch.undo()
        assert max(seen) == min(share, fastnorm.get_num_threads())


def test_in_process_cluster_shares_the_cores(monkeypatch):
    seen = _recording(monkeypatch)
    with LocalCluster(processes=False, **CLUSTER) as cluster, \
            Client(cluster, set_as_default=False) as c:
        computed = c.compute(list(_work(_x((32, 128)))), sync=True)
    assert len(computed) == 2
    assert seen and max(seen) <= max(1, CPU_COUNT // 2)  # two workers' threads in here


def test_thread_cap_is_per_thread():
    from concurrent.futures import ThreadPoolExecutor
    from fastnorm._config import thread_cap
    default = fastnorm.get_num_threads()
    with thread_cap(1):
        assert fastnorm.get_num_threads() == 1
        with ThreadPoolExecutor(1) as pool:
            assert pool.submit(fastnorm.get_num_threads).result() == default
    assert fastnorm.get_num_threads() == default


def test_numpy_calls_do_not_import_dask(run_python):
    r = run_python("import fastnorm, numpy, sys; fastnorm.layer_norm(numpy.ones((2, 3))); "
                   "fastnorm.batch_norm_backward(*[numpy.ones((2, 3))] * 2, numpy.zeros(3), "
                   "numpy.ones(3)); assert 'dask' not in sys.modules, 'dask imported'")
    assert r.returncode == 0, r.stderr


def test_readme_example_runs():
    """The README's Dask example, as written (on this module's cluster, the
    default scheduler here)."""
    readme = os.path.join(os.path.dirname(__file__), os.pardir, "README.md")
    if not os.path.exists(readme):
        pytest.skip("README.md is not next to the tests (installed tests)")
    text = open(readme, encoding="utf-8").read()
    section = text.split("## Dask", 1)[1].split("\n## ", 1)[0]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    exec(compile(code, "README.md", "exec"), {"__name__": "readme"})


def _unaligned(a):
    """A copy of float64 array a at an address that is not a multiple of 8,
    as arrays that arrive over the network may be."""
    buf = np.empty(a.nbytes + 1, np.uint8)
    out = buf[1:].view(np.float64).reshape(a.shape)
    out[...] = a
    assert not out.flags.aligned
    return out


def test_normalize_task_reads_unaligned_statistics_and_parameters():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((6, 40))
    mean, rstd = x.mean(1, keepdims=True), 1 / np.sqrt(x.var(1, keepdims=True) + 1e-5)
    g, b = rng.standard_normal((1, 40)), rng.standard_normal((1, 40))
    y = fastnorm._dask.tasks.normalize_block(
        x, _unaligned(mean), _unaligned(rstd), _unaligned(g), _unaligned(b),
        axes=(1,), out_dtype=np.dtype(np.float64))
    np.testing.assert_allclose(y, (x - mean) * rstd * g + b, rtol=1e-12, atol=1e-12)


def test_keys_are_unique_to_their_computation(client):
    # Statistics held by one computation while another computes y from the
    # same array: one key with two task specs makes the scheduler warn (and
    # can deadlock).  Every layer fastnorm builds has a name of its own.
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    log = logging.getLogger("distributed.scheduler")
    level = log.level
    log.addHandler(handler)
    log.setLevel(logging.WARNING)
    try:
        b = da.from_array(_x((64, 256)), chunks=(16, 64))
        held = client.compute(fastnorm.layer_norm(b, return_stats=True)[1:])
        y = fastnorm.layer_norm(b).compute()
        mean, rstd = client.gather(held)
        again = fastnorm.layer_norm(b, return_stats=True)[0].compute()
    finally:
        log.removeHandler(handler)
        log.setLevel(level)
    assert not [r for r in records if "run_spec" in r.getMessage()]
    assert_bitwise(y, again)
    # The statistics held are those of the same computation.
    _, m, r = fastnorm.layer_norm(b, return_stats=True)
    assert_bitwise(mean, m.compute())
    assert_bitwise(rstd, r.compute())


WHERE = np.random.default_rng(21).random((12, 6, 5, 1)) < 0.6   # (N, C, T, 1)-like


@pytest.mark.parametrize("chunks", list(CHUNKINGS.values()) + [FINE])
@pytest.mark.parametrize("lazy_mask", [False, True])
def test_where_on_dask_matches_numpy(chunks, lazy_mask):
    b = da.from_array(X, chunks=chunks)
    w = WHERE
    if lazy_mask:
        w = da.from_array(WHERE, chunks=tuple(c if n > 1 else 1
                                              for c, n in zip(b.chunks, WHERE.shape)))
    cases = [
        (lambda a, m: fastnorm.mean_var(a, (0, 2, 3), ddof=1, where=m), 2),
        (lambda a, m: fastnorm.layer_norm(a, axis=(1, 3), where=m, return_stats=True), 3),
        (lambda a, m: fastnorm.rms_norm(a, axis=-1, where=m, return_stats=True), 2),
        (lambda a, m: fastnorm.batch_norm(a, where=m, return_stats=True), 3),
        (lambda a, m: fastnorm.batch_norm(a, running_mean=np.zeros(6), running_var=np.ones(6),
                                          training=False, where=m), 1),
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for func, n in cases:
            got, want = func(b, w), func(X, WHERE)
            got, want = (got, want) if n > 1 else ((got,), (want,))
            for g, e in zip(got, want):
                assert isinstance(g, da.Array)
                g = g.compute()
                assert g.shape == e.shape and g.dtype == e.dtype
                np.testing.assert_allclose(g, e, rtol=1e-12, atol=1e-12)


def test_where_batch_norm_running_statistics_on_dask():
    b = da.from_array(X, chunks=FINE)
    rm, rv = np.zeros(6), np.ones(6)
    rm0, rv0 = np.zeros(6), np.ones(6)
    y = fastnorm.batch_norm(b, running_mean=rm, running_var=rv, where=WHERE)
    y0 = fastnorm.batch_norm(X, running_mean=rm0, running_var=rv0, where=WHERE)
    np.testing.assert_allclose(rm, rm0, rtol=1e-12)
    np.testing.assert_allclose(rv, rv0, rtol=1e-12)
    np.testing.assert_allclose(y.compute(), y0, rtol=1e-12, atol=1e-12)
    one = np.zeros(X.shape, bool)
    one[0, :, 0, 0] = True          # one selected value a channel
    with pytest.raises(ValueError, match="more than one selected"):
        fastnorm.batch_norm(b, running_mean=rm, running_var=rv, where=one)


@pytest.mark.parametrize("chunks", list(CHUNKINGS.values()) + [FINE])
def test_where_gradients_on_dask_match_numpy(chunks):
    rng = np.random.default_rng(22)
    dy = rng.standard_normal(X.shape)
    b, bdy = da.from_array(X, chunks=chunks), da.from_array(dy, chunks=chunks)
    g_c, g_t = rng.standard_normal(6), rng.standard_normal(8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        _, m, r = fastnorm.batch_norm(X, g_c, where=WHERE, return_stats=True)
        _, lm, lr = fastnorm.layer_norm(X, g_t, where=WHERE, return_stats=True)
        _, rr = fastnorm.rms_norm(X, g_t, where=WHERE, return_stats=True)
        cases = [
            lambda d, a: fastnorm.batch_norm_backward(d, a, m, r, g_c, where=WHERE),
            lambda d, a: fastnorm.batch_norm_backward(d, a, m, r, g_c, where=WHERE,
                                                      training=False),
            lambda d, a: fastnorm.layer_norm_backward(d, a, lm, lr, g_t, where=WHERE),
            lambda d, a: fastnorm.rms_norm_backward(d, a, rr, g_t, where=WHERE),
        ]
        for func in cases:
            for got, want in zip(dask.compute(*func(bdy, b)), func(dy, X)):
                np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-12)
