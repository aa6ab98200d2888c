"""Many Python threads calling every public function at once, on shared
inputs (read-only, and large enough that the calls run OpenMP teams of
their own), give bitwise the results of serial calls; set_num_threads from
another thread meanwhile changes nothing but the speed; each thread's
running statistics and in-place outputs stay its own; calls on either side
of the kernels' static split at once each set their own schedule; and a
forked child runs the calls on one thread with the parent's bits."""
import os
import textwrap
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import fastnorm
from reference import assert_bitwise
from routes import SAME_SPLIT, rows_for, rows_x

N_THREADS = 8


def _shared_inputs():
    """One problem for every function, read-only: large enough for the
    parallel paths (more than 2**16 values) and small enough to be quick."""
    rng = np.random.default_rng(0)
    a = dict(
        x=(2.0 + rng.standard_normal((32, 24, 96))).astype(np.float32),
        dy=rng.standard_normal((32, 24, 96)).astype(np.float32),
        x64=rng.standard_normal((4, 20000)),
        g_last=rng.uniform(0.5, 2.0, 96), g_chan=rng.uniform(0.5, 2.0, 24),
        b_chan=rng.standard_normal(24), rm=rng.standard_normal(24),
        rv=rng.uniform(0.5, 2.0, 24),
    )
    _, a["ln_mean"], a["ln_rstd"] = fastnorm.layer_norm(a["x"], return_stats=True)
    _, a["rms_rstd"] = fastnorm.rms_norm(a["x"], return_stats=True)
    _, a["bn_mean"], a["bn_rstd"] = fastnorm.batch_norm(a["x"], return_stats=True)
    _, a["gn_mean"], a["gn_rstd"] = fastnorm.group_norm(a["x"], 4, return_stats=True)
    for v in a.values():
        v.flags.writeable = False
    return a


# Every public computing function (batch norm in both modes; training
# updates running statistics of its own call).
CALLS = {
    "mean_var": lambda a: fastnorm.mean_var(a["x"], axis=(0, 2)),
    "mean_var_long": lambda a: fastnorm.mean_var(a["x64"], axis=1),
    "layer_norm": lambda a: fastnorm.layer_norm(a["x"], a["g_last"], return_stats=True),
    "rms_norm": lambda a: fastnorm.rms_norm(a["x"], a["g_last"], return_stats=True),
    "batch_norm": lambda a: fastnorm.batch_norm(
        a["x"], a["g_chan"], a["b_chan"], a["rm"].copy(), a["rv"].copy(), return_stats=True),
    "batch_norm_eval": lambda a: fastnorm.batch_norm(a["x"], a["g_chan"], a["b_chan"], a["rm"],
                                                     a["rv"], training=False),
    "batch_norm_nhwc": lambda a: fastnorm.batch_norm(a["x"], axis=(0, 1), return_stats=True),
    "group_norm": lambda a: fastnorm.group_norm(a["x"], 4, a["g_chan"], return_stats=True),
    "instance_norm": lambda a: fastnorm.instance_norm(a["x"], channel_axis=-1,
                                                      return_stats=True),
    "weight_norm": lambda a: fastnorm.weight_norm(a["x"], return_norm=True),
    "weight_standardize": lambda a: fastnorm.weight_standardize(a["x64"], axis=1),
    "layer_norm_backward": lambda a: fastnorm.layer_norm_backward(
        a["dy"], a["x"], a["ln_mean"], a["ln_rstd"], a["g_last"]),
    "rms_norm_backward": lambda a: fastnorm.rms_norm_backward(
        a["dy"], a["x"], a["rms_rstd"], a["g_last"]),
    "batch_norm_backward": lambda a: fastnorm.batch_norm_backward(
        a["dy"], a["x"], a["bn_mean"], a["bn_rstd"], a["g_chan"]),
    "group_norm_backward": lambda a: fastnorm.group_norm_backward(
        a["dy"], a["x"], a["gn_mean"], a["gn_rstd"], 4, a["g_chan"]),
}


def _flat(res):
    return [np.asarray(r) for r in (res if isinstance(res, tuple) else (res,))]


@pytest.fixture(scope="module")
def shared():
    a = _shared_inputs()
    serial = {name: _flat(call(a)) for name, call in CALLS.items()}
    return a, serial


def _check(name, got, serial):
    assert len(got) == len(serial[name])
    for k, (g, e) in enumerate(zip(got, serial[name])):
        assert_bitwise(g, e, f"{name}, result {k}, from a thread")


def test_every_function_from_many_threads_at_once(shared):
    # Each thread runs every function (in its own order), three times over.
    a, serial = shared
    names = list(CALLS) * 3
    orders = [np.random.default_rng(i).permutation(len(names)) for i in range(N_THREADS)]
    barrier = threading.Barrier(N_THREADS)

    def worker(i):
        barrier.wait()
        return [(names[j], _flat(CALLS[names[j]](a))) for j in orders[i]]

    with ThreadPoolExecutor(N_THREADS) as pool:
        for results in pool.map(worker, range(N_THREADS), timeout=600):
            for name, got in results:
                _check(name, got, serial)


def test_set_num_threads_from_another_thread_while_every_function_runs(shared):
    # One thread keeps changing the thread count (None included: back to
    # OpenMP's default); results keep their bits.
    a, serial = shared
    stop = threading.Event()

    def toggler():
        n = 0
        while not stop.is_set():
            fastnorm.set_num_threads([1, 2, 3, None, 4][n % 5])
            n += 1

    t = threading.Thread(target=toggler)
    t.start()
    try:
        with ThreadPoolExecutor(N_THREADS - 1) as pool:
            futures = [pool.submit(lambda name=name: (name, _flat(CALLS[name](a))))
                       for name in list(CALLS) * 4]
            results = [f.result(timeout=600) for f in futures]
    finally:
        stop.set()
        t.join()
    for name, got in results:
        _check(name, got, serial)
    assert not any(v.flags.writeable for v in a.values())


def test_in_place_calls_on_private_arrays_from_many_threads(shared):
    # out= into each thread's own arrays, in place on each thread's copy:
    # no thread sees another's writes.
    a, serial = shared

    def worker(i):
        x = np.array(a["x"])
        y = np.empty_like(x)
        fastnorm.layer_norm(x, a["g_last"], out=y)
        fastnorm.layer_norm(x, a["g_last"], out=x)
        return y, x

    with ThreadPoolExecutor(N_THREADS) as pool:
        for y, x in pool.map(worker, range(2 * N_THREADS), timeout=600):
            assert_bitwise(y, serial["layer_norm"][0])
            assert_bitwise(x, serial["layer_norm"][0])


def test_scratch_kept_between_calls_of_other_sizes_and_threads():
    # The kernels keep scratch blocks of 64 KiB or more from one call for
    # the next (src/scratch.h).  Calls of shapes whose scratch differs
    # (columns of a wide matrix, of a narrow one; gradients, whose sums
    # start from zeroed scratch), from many threads at once and one after
    # another, must each get the float64 reference's values.
    rng = np.random.default_rng(3)
    xs = [rng.standard_normal(shape) * 3 + 1 for shape in ((64, 20000), (300, 700), (16, 70000))]
    dys = [rng.standard_normal(x.shape) for x in xs]

    def reference(i):
        x, dy = xs[i], dys[i]
        mean, var = x.mean(axis=0), x.var(axis=0)
        r = 1 / np.sqrt(var + 1e-5)
        xh = (x - mean) * r
        dx = r * (dy - dy.mean(axis=0) - xh * (dy * xh).mean(axis=0))
        return mean, var, xh, dx, (dy * xh).sum(axis=0)

    refs = [reference(i) for i in range(len(xs))]

    def one(k):
        i = k % len(xs)
        x, dy = xs[i], dys[i]
        mean, var = fastnorm.mean_var(x.astype(np.float32) if k % 2 else x, axis=0)
        y, m, r = fastnorm.batch_norm(x, axis=0, return_stats=True)
        dx, dg, db = fastnorm.batch_norm_backward(dy, x, m, r, axis=0)
        ref_mean, ref_var, ref_y, ref_dx, ref_dg = refs[i]
        tol = 1e-5 if k % 2 else 1e-10
        np.testing.assert_allclose(mean, ref_mean, rtol=tol, atol=tol)
        np.testing.assert_allclose(var, ref_var, rtol=tol, atol=tol)
        np.testing.assert_allclose(y, ref_y, rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(dx, ref_dx, rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(dg, ref_dg, rtol=1e-9, atol=1e-8)
        np.testing.assert_allclose(db, dy.sum(axis=0), rtol=1e-9, atol=1e-8)
        return k

    for k in range(6):
        one(k)
    with ThreadPoolExecutor(N_THREADS) as pool:
        assert sorted(pool.map(one, range(4 * N_THREADS))) == list(range(4 * N_THREADS))


# --------------------------------------------------------------------------
# one workload per thread

def _x(shape, dtype=np.float32, seed=0, offset=5.0):
    rng = np.random.default_rng(seed)
    return (offset + rng.standard_normal(shape) * 2).astype(dtype)


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


def _flat_results(res):
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

    expected_shared = [_flat_results(call(x)) for x in shared]
    expected_own = [_flat_results(call(x)) for x in own]

    def tasks_for(i):
        return [lambda x=x: _flat_results(call(x)) for x in shared + [own[i]]]

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
    ref = _flat_results(fastnorm.layer_norm(x, return_stats=True))
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
            for a, b in zip(_flat_results(res), ref):
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


# --------------------------------------------------------------------------
# either side of the static split at once



def test_concurrent_calls_on_either_side_of_the_split():
    """Threads calling on small arrays (static split) and one calling on
    large ones (shared out as threads come free), at once: each sets its own
    schedule, and every result is the one each call gives alone."""
    small = rows_x(64, 1024, np.float32, seed=1)
    large = rows_x(rows_for(SAME_SPLIT, 1024, np.float32), 1024, np.float32, seed=2)
    want = {id(a): fastnorm.layer_norm(a) for a in (small, large)}
    errors = []

    def hammer(a):
        try:
            for _ in range(20):
                assert_bitwise(fastnorm.layer_norm(a), want[id(a)], f"{a.shape}")
        except AssertionError as e:
            errors.append(e)

    threads = [threading.Thread(target=hammer, args=(a,)) for a in (small, large, small)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
