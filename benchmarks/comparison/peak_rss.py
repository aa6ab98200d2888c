"""Peak memory of each public call: no temporary the size of the input.

``measure(name, nbytes)`` runs one call (forward or backward) on an input
of about nbytes in the current process and reports how much the peak
resident set size (VmHWM on Linux, else ``ru_maxrss``) grew during the call, and how much of that
was the output.  The rest ("extra") is what the call used besides: its
statistics, per-thread buffers, and any temporary; the goal is a few MB
whatever the input size.  Run it in a fresh process (``report`` starts one
per call): the peak of a long-lived process hides a call's growth under
earlier peaks.

Inputs are made without temporaries (random numbers drawn straight into
the array; the backward's statistics from ``mean_var``), so the peak before
the call is the current size; where Linux allows it, the peak is also reset
first (``/proc/self/clear_refs``).
"""
import gc
import multiprocessing
import resource
import sys

import numpy as np

import fastnorm
from .console import Progress
from .inputs import EPS, GROUPS, make_x

# name: (function, layout of the input, arguments).  x's shape is chosen
# from nbytes with these proportions.
CALLS = {
    "mean_var rows": ("mean_var", "rows", {"axis": -1}),
    "mean_var columns": ("mean_var", "rows", {"axis": 0}),
    "layer_norm rows": ("layer_norm", "rows", {"axis": -1}),
    "layer_norm axis 0": ("layer_norm", "rows", {"axis": 0}),
    "rms_norm rows": ("rms_norm", "rows", {"axis": -1}),
    "batch_norm NCHW": ("batch_norm", "NCHW", {}),
    "batch_norm NHWC": ("batch_norm", "NHWC", {"axis": (0, 1, 2)}),
    "batch_norm eval NCHW": ("batch_norm", "NCHW", {"training": False}),
    "group_norm NCHW": ("group_norm", "NCHW", {"channel_axis": 1}),
    "group_norm NHWC": ("group_norm", "NHWC", {"channel_axis": -1}),
    "instance_norm NCHW": ("instance_norm", "NCHW", {}),
    "weight_norm": ("weight_norm", "rows", {}),
    "weight_standardize": ("weight_standardize", "rows", {}),
    "layer_norm_backward rows": ("layer_norm_backward", "rows", {"axis": -1}),
    "rms_norm_backward rows": ("rms_norm_backward", "rows", {"axis": -1}),
    "batch_norm_backward NCHW": ("batch_norm_backward", "NCHW", {}),
    "group_norm_backward NCHW": ("group_norm_backward", "NCHW", {"channel_axis": 1}),
    # nan_policy="omit" on inputs with a tenth of their values NaN (measure)
    "mean_var columns omit": ("mean_var", "rows", {"axis": 0, "nan_policy": "omit"}),
    "layer_norm rows omit": ("layer_norm", "rows", {"axis": -1, "nan_policy": "omit"}),
    "batch_norm NHWC omit": ("batch_norm", "NHWC", {"axis": (0, 1, 2), "nan_policy": "omit"}),
    "zscore columns": ("zscore", "rows", {"axis": 0}),
    "zscore columns omit": ("zscore", "rows", {"axis": 0, "nan_policy": "omit"}),
}


def _shape(layout, nbytes, itemsize):
    n = max(nbytes // itemsize, 1 << 16)
    if layout == "rows":
        return (n // 4096, 4096)
    per_image = 64 * 64 * 64
    images = n // per_image
    return (images, 64, 64, 64)   # NCHW and NHWC alike: C = H = W = 64


def _peak_bytes():
    """The process's peak resident set size: Linux's VmHWM where there is
    one, else ru_maxrss.  (ru_maxrss also keeps the peak of the process
    before it exec'd Python, i.e. its parent's size at fork: a child of a
    large process reads the parent's peak and sees no growth.)"""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return r if sys.platform == "darwin" else r * 1024   # Linux says KiB


def _reset_peak():
    """Set the peak to the current size where the OS allows it."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _moments(x, axes):
    """mean and var in keepdims layout from mean_var: nothing of x's size."""
    return fastnorm.mean_var(x, axes, keepdims=True)


def _centred_stats(x, axes):
    mean, var = _moments(x, axes)
    return mean, 1.0 / np.sqrt(var + EPS)


def _group_stats(x):
    """group_norm's mean and rstd for channels on axis 1: (N, G, 1, 1)."""
    n, c = x.shape[:2]
    split = x.reshape((n, GROUPS, c // GROUPS) + x.shape[2:])
    mean, rstd = _centred_stats(split, tuple(range(2, split.ndim)))
    return mean.reshape(n, GROUPS, 1, 1), rstd.reshape(n, GROUPS, 1, 1)


def _call(name, x, rng):
    """The call of `name` on x, as a zero-argument callable."""
    fn, layout, kw = CALLS[name]
    f = getattr(fastnorm, fn)
    if not fn.endswith("_backward"):
        if fn == "batch_norm":
            c = x.shape[3] if layout == "NHWC" else x.shape[1]
            kw = dict(kw, running_mean=np.zeros(c, x.dtype), running_var=np.ones(c, x.dtype))
        if fn == "group_norm":
            return lambda: f(x, GROUPS, **kw)
        return lambda: f(x, **kw)
    dy = make_x(rng, x.shape, x.dtype)
    if fn == "layer_norm_backward":
        mean, rstd = _centred_stats(x, (x.ndim - 1,))
        return lambda: f(dy, x, mean, rstd, **kw)
    if fn == "rms_norm_backward":
        mean, var = _moments(x, (x.ndim - 1,))
        rstd = 1.0 / np.sqrt(var + mean ** 2 + EPS)   # mean of squares = var + mean^2
        return lambda: f(dy, x, rstd, **kw)
    if fn == "batch_norm_backward":
        mean, rstd = _centred_stats(x, (0, 2, 3))
        return lambda: f(dy, x, mean, rstd, **kw)
    mean, rstd = _group_stats(x)   # group_norm_backward, channels on axis 1
    return lambda: f(dy, x, mean, rstd, GROUPS, **kw)


def measure(name, nbytes, dtype="float32"):
    """Peak growth of one call in this process, as a dict (bytes)."""
    rng = np.random.default_rng(0)
    dtype = np.dtype(dtype)
    x = make_x(rng, _shape(CALLS[name][1], nbytes, dtype.itemsize), dtype)
    if CALLS[name][2].get("nan_policy") == "omit":
        x.reshape(-1)[::10] = np.nan      # in place: no temporary
    call = _call(name, x, rng)
    gc.collect()
    reset = _reset_peak()
    before = _peak_bytes()
    result = call()
    growth = _peak_bytes() - before
    outputs = result if isinstance(result, tuple) else (result,)
    out_bytes = sum(np.asarray(o).nbytes for o in outputs)
    return {"call": name, "shape": list(x.shape), "dtype": dtype.name,
            "input_bytes": x.nbytes, "growth_bytes": growth, "output_bytes": out_bytes,
            "extra_bytes": growth - out_bytes, "peak_reset": reset}


def _child(conn, name, nbytes, dtype):
    try:
        conn.send(measure(name, nbytes, dtype))
    except Exception as e:
        conn.send({"call": name, "error": f"{type(e).__name__}: {e}"})


def measure_in_fresh_process(name, nbytes, dtype="float32"):
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    p = ctx.Process(target=_child, args=(child, name, nbytes, dtype), daemon=True)
    p.start()
    child.close()
    try:
        if parent.poll(300):
            return parent.recv()
        return {"call": name, "error": "no answer in 300 s"}
    except EOFError:
        return {"call": name, "error": f"the process died (exit code {p.exitcode})"}
    finally:
        p.join(timeout=10)


EXTRA_LIMIT = 8 << 20   # "a few MB" beyond the output


def report(nbytes=256 << 20, names=None):
    """The records of every call of CALLS (or `names`), each measured in a
    fresh process (a progress bar on stderr)."""
    names = list(names or CALLS)
    progress, records = Progress(len(names)), []
    try:
        for name in names:
            progress.show(f"peak memory: {name}")
            records.append(measure_in_fresh_process(name, nbytes))
            progress.advance()
    finally:
        progress.close()
    return records


def table(records):
    mb = 1 << 20
    lines = [f"{'call':<26} {'shape':<16} {'input MB':>8} {'growth MB':>9} "
             f"{'output MB':>9} {'extra MB':>8}  ok",
             " ".join("-" * w for w in (26, 16, 8, 9, 9, 8, 3))]
    for r in records:
        if "error" in r:
            lines.append(f"{r['call']:<26} FAILED: {r['error']}")
            continue
        ok = "yes" if r["extra_bytes"] <= EXTRA_LIMIT else "NO"
        lines.append(f"{r['call']:<26} {'x'.join(map(str, r['shape'])):<16} "
                     f"{r['input_bytes'] / mb:8.0f} {r['growth_bytes'] / mb:9.1f} "
                     f"{r['output_bytes'] / mb:9.1f} {r['extra_bytes'] / mb:8.1f}  {ok}")
    return "\n".join(lines)
