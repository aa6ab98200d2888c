"""JAX in worker processes, one per thread count.

XLA sizes its CPU thread pool once, when JAX starts, from the CPUs the
process may run on, and offers no per-call limit.  XLA_FLAGS do not do it:
with ``--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1``
XLA's runtime still spreads one jitted call over several busy threads.  So
the worker for n threads restricts itself to n CPUs (the first n it may
use; ``os.sched_setaffinity``) before JAX starts, and XLA's pool has n
threads; the 1-thread worker also sets those flags.

The parent sends each worker the row (case, dtype, seed); the worker builds
the same arrays itself (inputs.py), checks its result against fastnorm's,
and then times one sample per request, so its samples interleave with the
parent's columns.  Each sample also reports the CPU time the worker used
per second of wall time: about 1.0 means one thread worked.
"""
import gc
import multiprocessing
import os
import resource
import time

SINGLE_THREAD_FLAGS = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
START_TIMEOUT_S = 180
REPLY_TIMEOUT_S = 600


def _cpu_seconds():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _settle(quiet=0.05, step_s=0.002, limit_s=0.5):
    """Return once this process's threads have gone quiet: XLA's pool
    spins for a while after a call, and the parent's next column would
    share the cores with it (fastnorm's group_norm_backward with two
    threads took 11.5 ms right after a JAX sample, 5.6 ms without JAX in
    the run).  Quiet: under `quiet` CPU seconds per second over a step;
    at most limit_s."""
    end = time.perf_counter() + limit_s
    last = _cpu_seconds()
    while time.perf_counter() < end:
        time.sleep(step_s)
        now = _cpu_seconds()
        if now - last < quiet * step_s:
            return
        last = now


def _prepare(jax, case, dtype, seed):
    """The jitted function and its arguments for the row, and how far its
    result is from fastnorm's."""
    import numpy as np
    from . import fastnorm_calls, jax_code
    from .agree import as_tuple, disagreement
    from .inputs import make_inputs
    inp = make_inputs(case, dtype, seed)
    want = fastnorm_calls.build(inp, allocate=True)()
    fn, args = jax_code.build(jax, inp)
    got = jax.block_until_ready(fn(*args))
    error = disagreement(tuple(np.asarray(g) for g in as_tuple(got)), want)
    return fn, args, error


def serve(conn, threads):
    """The worker's loop: requests in, ("ok", value) or ("error", text) out."""
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:threads])
    if threads == 1:
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " "
                                   + SINGLE_THREAD_FLAGS).strip()
    os.environ["JAX_PLATFORMS"] = "cpu"
    try:
        import jax
        jax.config.update("jax_enable_x64", True)   # float64 rows; float32 stays float32
    except Exception as e:  # not installed, or broken: the parent reports why
        conn.send(("error", f"{type(e).__name__}: {e}"))
        return
    conn.send(("ok", jax.__version__))
    fn = args = None
    while True:
        try:
            request = conn.recv()
        except EOFError:   # the parent is gone
            return
        kind = request[0]
        if kind == "quit":
            return
        try:
            if kind == "prepare":
                fn = args = None
                gc.collect()
                fn, args, error = _prepare(jax, *request[1:])
                reply = error
            elif kind == "sample":
                n = request[1]
                c0, t0 = _cpu_seconds(), time.perf_counter()
                for _ in range(n):
                    jax.block_until_ready(fn(*args))
                wall = time.perf_counter() - t0
                reply = (wall / n, (_cpu_seconds() - c0) / wall)
                _settle()
            elif kind == "release":
                fn = args = None
                jax.clear_caches()
                gc.collect()
                reply = None
            else:
                raise ValueError(f"unknown request {kind!r}")
            conn.send(("ok", reply))
        except Exception as e:
            conn.send(("error", f"{type(e).__name__}: {e}"))


class Worker:
    """The parent's handle on one worker process."""

    def __init__(self, threads):
        ctx = multiprocessing.get_context("spawn")   # a fresh interpreter: XLA_FLAGS apply
        self.conn, child = ctx.Pipe()
        self.threads = threads
        self.process = ctx.Process(target=serve, args=(child, threads), daemon=True,
                                   name=f"fastnorm-jax-{threads}")
        self.process.start()
        child.close()
        self.version = self.reply(START_TIMEOUT_S)

    def send(self, *request):
        self.conn.send(request)

    def reply(self, timeout=REPLY_TIMEOUT_S):
        """The answer to the request sent last; RuntimeError with the
        worker's message when it failed."""
        if not self.conn.poll(timeout):
            raise TimeoutError(f"JAX worker ({self.threads} threads) gave no answer "
                               f"in {timeout} s")
        status, value = self.conn.recv()
        if status != "ok":
            raise RuntimeError(value)
        return value

    def ask(self, *request):
        self.send(*request)
        return self.reply()

    def close(self):
        try:
            self.conn.send(("quit",))
        except (BrokenPipeError, OSError):
            pass
        self.process.join(timeout=10)
        if self.process.is_alive():
            self.process.terminate()
