"""Bitwise reproducibility across OpenMP thread counts, and thread safety of
concurrent calls from Python threads.  Nothing here is timed."""
import os
import textwrap
import threading

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

import fastnorm
from reference import assert_bitwise


def _x(shape, dtype=np.float32, seed=0, offset=5.0):
    rng = np.random.default_rng(seed)
    return (offset + rng.standard_normal(shape) * 2).astype(dtype)


# Large enough for the parallel paths: whole slices per thread, few long
# slices split into blocks, column tiles, row blocks (up to 1 MiB of a tile
# each while 16 blocks remain: "columns" and "nhwc" have several), NCHW
# batch norm.
WORKLOADS = {
    "rows": (lambda: _x((64, 1024)), -1),
    "long-rows": (lambda: _x((4, 20000)), -1),
    "one-row": (lambda: _x((70_000,), np.float64), None),
    "columns": (lambda: _x((30000, 40)), 0),
    "column-tiles": (lambda: _x((100, 2100)), 0),
    "nchw": (lambda: _x((8, 16, 32, 32), np.float16), (0, 2, 3)),
    "nhwc": (lambda: _x((16, 48, 32, 24), np.float64), (0, 1, 2)),
}


def _all_results(x, axis):
    """Every function's outputs on x (statistics included)."""
    kept = tuple(i for i in range(x.ndim)
                 if i not in (range(x.ndim) if axis is None else np.atleast_1d(axis) % x.ndim))
    named = tuple(x.shape[i] for i in kept)
    rng = np.random.default_rng(1)
    g, b = rng.uniform(0.5, 2, size=named), rng.standard_normal(named)
    out = list(fastnorm.mean_var(x, axis=axis, ddof=1))
    out += fastnorm.layer_norm(x, axis=axis, return_stats=True)
    out += fastnorm.rms_norm(x, axis=axis, return_stats=True)
    if named:  # batch norm needs kept axes to carry its parameters
        rm, rv = np.zeros(named), np.ones(named)
        out += fastnorm.batch_norm(x, g, b, rm, rv, axis=axis, return_stats=True)
        out += [rm, rv]
        out += fastnorm.batch_norm(x, g, b, rm, rv, axis=axis, training=False, return_stats=True)
    return [np.asarray(a) for a in out]


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_bitwise_identical_for_any_thread_count(name):
    build, axis = WORKLOADS[name]
    x = build()
    fastnorm.set_num_threads(1)
    serial = _all_results(x, axis)
    for n in (2, 3, 4, 7):
        fastnorm.set_num_threads(n)
        for k, (a, b) in enumerate(zip(_all_results(x, axis), serial)):
            assert_bitwise(a, b, f"{name}: result {k} with {n} threads vs 1")


def test_threadpoolctl_limit_gives_the_same_bits():
    x, axis = WORKLOADS["long-rows"][0](), -1
    with threadpool_limits(limits=1, user_api="openmp"):
        assert fastnorm.get_num_threads() == 1
        limited = _all_results(x, axis)
    for a, b in zip(_all_results(x, axis), limited):
        assert_bitwise(a, b)


def _hammer(tasks_for, n_threads=8, repeats=4, between=None):
    """Start n_threads Python threads together; thread i runs the callables
    tasks_for(i) `repeats` times.  Returns each thread's results."""
    barrier = threading.Barrier(n_threads)
    results = [None] * n_threads
    errors = []

    def work(i):
        try:
            barrier.wait()
            mine = []
            for r in range(repeats):
                mine.append([t() for t in tasks_for(i)])
                if between is not None:
                    between(i, r)
            results[i] = mine
        except BaseException as e:  # re-raised in the main thread
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    if errors:
        raise errors[0]
    return results


def _flat(res):
    return [np.asarray(a) for a in (res if isinstance(res, tuple) else (res,))]


@pytest.mark.parametrize("func", ["mean_var", "layer_norm", "rms_norm", "batch_norm",
                                  "batch_norm_eval"])
def test_concurrent_calls_match_serial_calls(func):
    # A shared input and each thread's own input; small and large ones, so
    # both serial and OpenMP-parallel kernels run concurrently.
    shared = [_x((16, 100), seed=0), _x((40, 2000), np.float64, seed=1), _x((3000, 30), seed=2)]
    own = [_x((64, 700), seed=10 + i) for i in range(8)]
    rv = {}

    def call(x):
        if func == "mean_var":
            return fastnorm.mean_var(x, axis=0)
        if func == "layer_norm":
            return fastnorm.layer_norm(x, return_stats=True)
        if func == "rms_norm":
            return fastnorm.rms_norm(x, axis=0, return_stats=True)
        c = x.shape[1]
        if func == "batch_norm":
            return fastnorm.batch_norm(x, np.ones(c), np.zeros(c), axis=0, return_stats=True)
        key = c
        rv.setdefault(key, (np.linspace(-1, 1, c), np.linspace(0.5, 2, c)))
        return fastnorm.batch_norm(x, None, None, *rv[key], training=False, axis=0)

    expected_shared = [_flat(call(x)) for x in shared]
    expected_own = [_flat(call(x)) for x in own]

    def tasks_for(i):
        return [lambda x=x: _flat(call(x)) for x in shared + [own[i]]]

    results = _hammer(tasks_for, repeats=3)
    for i, per_thread in enumerate(results):
        for rep in per_thread:
            for got, exp in zip(rep, expected_shared + [expected_own[i]]):
                assert len(got) == len(exp)
                for a, b in zip(got, exp):
                    assert_bitwise(a, b, f"{func}: thread {i}")


def test_running_stats_of_distinct_arrays_from_many_threads():
    # Each thread owns its running statistics; updates must not mix.
    xs = [_x((256, 4), np.float64, seed=i, offset=float(i)) for i in range(8)]
    expected = []
    for x in xs:
        rm, rv = np.zeros(4), np.ones(4)
        for _ in range(5):
            fastnorm.batch_norm(x, running_mean=rm, running_var=rv, axis=0)
        expected.append((rm, rv))
    state = [(np.zeros(4), np.ones(4)) for _ in xs]

    def step(i, _r):
        fastnorm.batch_norm(xs[i], running_mean=state[i][0], running_var=state[i][1], axis=0)

    _hammer(lambda i: [], repeats=5, between=step)
    for (rm, rv), (em, ev) in zip(state, expected):
        assert_bitwise(rm, em)
        assert_bitwise(rv, ev)


def test_changing_the_thread_count_while_others_compute():
    # set_num_threads from one thread while seven others compute: every
    # result still has the same bits.
    x = _x((6, 30000))
    fastnorm.set_num_threads(1)
    ref = _flat(fastnorm.layer_norm(x, return_stats=True))
    stop = threading.Event()

    def toggler():
        n = 0
        while not stop.is_set():
            fastnorm.set_num_threads(1 + n % 4)
            n += 1

    t = threading.Thread(target=toggler)
    t.start()
    try:
        results = _hammer(lambda i: [lambda: fastnorm.layer_norm(x, return_stats=True)],
                          n_threads=7, repeats=4)
    finally:
        stop.set()
        t.join()
    for per_thread in results:
        for (res,) in per_thread:
            for a, b in zip(_flat(res), ref):
                assert_bitwise(a, b)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no os.fork on this platform")
def test_calls_in_a_forked_child_run_and_match_the_parent(run_python):
    # GNU OpenMP cannot start a team in a child forked from a process that
    # ran teams: the first parallel call there never returned.  A forked
    # child runs every call on one thread; its results are the parent's
    # bits (results do not depend on the thread count).
    code = textwrap.dedent("""
        import os, pickle, sys, numpy as np, fastnorm
        fastnorm.set_num_threads(2)
        rng = np.random.default_rng(0)
        x = rng.standard_normal((64, 20000)).astype(np.float32)
        dy = rng.standard_normal(x.shape).astype(np.float32)
        def calls():
            y, m, r = fastnorm.layer_norm(x, return_stats=True)
            return [fastnorm.mean_var(x, axis=0)[1], y, fastnorm.batch_norm(x, axis=0),
                    fastnorm.layer_norm(x, axis=0), fastnorm.rms_norm(x),
                    fastnorm.layer_norm_backward(dy, x, m, r)[0]]
        parent = calls()
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read)
            with os.fdopen(write, "wb") as f:
                pickle.dump((fastnorm.get_num_threads(), calls()), f)
            os._exit(0)
        os.close(write)
        with os.fdopen(read, "rb") as f:
            threads, child = pickle.load(f)
        os.waitpid(pid, 0)
        assert threads == 1, threads
        assert all(a.tobytes() == b.tobytes() for a, b in zip(parent, child))
        assert fastnorm.get_num_threads() == 2
        print("ok")
    """)
    done = run_python(code)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
