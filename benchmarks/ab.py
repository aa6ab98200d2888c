"""Two builds of fastnorm or more, timed against each other in one run.

    python benchmarks/ab.py PYTHON_A PYTHON_B [PYTHON_C ...] [--rounds 5]
        [--threads 1,2] [--only TEXT ...] [--budget SECONDS]

Each PYTHON is the interpreter of an environment with one build installed
(a venv's bin/python), or any executable that runs one (a shell script
that sets FASTNORM_CACHES first, say).  The cases are the rows of the
performance table in docs/performance.md, float32 and float64, with out=
preallocated, and the small calls.  Rounds alternate the builds (A, B, C,
then C, B, A, ...): each round starts a fresh process per build that times
every case (the median of a few calls, after a warm-up) on 1 and 2
threads; the report gives, per case and thread count, the median over
rounds of each build's time and of its ratio to A taken round by round
(adjacent runs see the same machine state), then the median and largest
of those ratios.  --budget stops starting rounds after that many seconds
(on a machine available for a limited time), and the report covers the
rounds done.  Not an asv benchmark: asv imports this module and finds
nothing to time.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

# (label, function, shape, keyword arguments, dtypes)
CASES = [
    ("layer_norm rows", "layer_norm", (8192, 1024), {"axis": -1}, ("float32", "float64")),
    ("layer_norm rows 256 MiB", "layer_norm", (16384, 4096), {"axis": -1}, ("float32",)),
    ("layer_norm short rows", "layer_norm", (131072, 32), {"axis": -1}, ("float32", "float64")),
    ("layer_norm last 2 axes", "layer_norm", (64, 196, 768), {"axis": (1, 2)},
     ("float32", "float64")),
    ("rms_norm rows", "rms_norm", (8192, 1024), {"axis": -1}, ("float32", "float64")),
    ("batch_norm (N, C)", "batch_norm", (65536, 512), {"axis": 0}, ("float32", "float64")),
    ("batch_norm NCHW", "batch_norm", (64, 64, 56, 56), {}, ("float32", "float64")),
    ("batch_norm NHWC", "batch_norm", (64, 56, 56, 64), {"axis": (0, 1, 2)},
     ("float32", "float64")),
    ("batch_norm NCHW 7x7", "batch_norm", (256, 512, 7, 7), {}, ("float32", "float64")),
    ("batch_norm NCHW 14x14", "batch_norm", (64, 512, 14, 14), {}, ("float32",)),
    ("batch_norm eval NCHW", "batch_norm_eval", (64, 64, 56, 56), {}, ("float32", "float64")),
    ("mean_var rows", "mean_var", (8192, 1024), {"axis": -1}, ("float32", "float64")),
    ("mean_var columns", "mean_var", (8192, 1024), {"axis": 0}, ("float32", "float64")),
    ("layer_norm axis 0", "layer_norm", (4096, 4096), {"axis": 0}, ("float32", "float64")),
    ("group_norm NCHW", "group_norm", (64, 64, 56, 56), {}, ("float32",)),
    ("layer_norm_backward rows", "layer_norm_backward", (8192, 1024), {"axis": -1},
     ("float32", "float64")),
    ("rms_norm_backward rows", "rms_norm_backward", (8192, 1024), {"axis": -1}, ("float32",)),
    ("layer_norm_backward axis 0", "layer_norm_backward", (4096, 2048), {"axis": 0},
     ("float32",)),
    ("batch_norm_backward (N, C)", "batch_norm_backward", (65536, 512), {"axis": 0},
     ("float32", "float64")),
    ("batch_norm_backward NCHW", "batch_norm_backward", (64, 64, 56, 56), {},
     ("float32",)),
    ("batch_norm_backward NCHW 7x7", "batch_norm_backward", (256, 512, 7, 7), {},
     ("float32", "float64")),
    ("group_norm_backward NCHW", "group_norm_backward", (32, 64, 56, 56), {}, ("float32",)),
    ("layer_norm rows allocating", "layer_norm_alloc", (8192, 1024), {"axis": -1},
     ("float32",)),
    ("small layer_norm (32, 768)", "layer_norm_alloc", (32, 768), {"axis": -1}, ("float32",)),
    ("small layer_norm (1, 256)", "layer_norm_alloc", (1, 256), {"axis": -1}, ("float32",)),
    ("small batch_norm (32, 768)", "batch_norm", (32, 768), {"axis": 0}, ("float32",)),
    ("small mean_var (32, 768)", "mean_var_alloc", (32, 768), {"axis": -1}, ("float32",)),
    ("small mean_var columns (32, 768)", "mean_var_alloc", (32, 768), {"axis": 0},
     ("float32",)),
    ("small batch_norm eval (32, 768)", "batch_norm_eval", (32, 768), {"axis": 0},
     ("float32",)),
    ("small layer_norm_backward (8, 1024)", "layer_norm_backward", (8, 1024), {"axis": -1},
     ("float32",)),
]


def prepare(fn, np, op, shape, kwargs, dtype):
    """A callable that runs the case once, its arrays made here."""
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(shape) + 1.0).astype(dtype)
    out = np.empty_like(x)
    axis = kwargs.get("axis", "default")
    if op.startswith("batch_norm"):
        kept = tuple(i for i in range(x.ndim) if i not in (
            (axis,) if isinstance(axis, int) else axis if axis != "default"
            else tuple(i for i in range(x.ndim) if i != 1)))
        c = tuple(x.shape[i] for i in kept)
        rm, rv = np.zeros(c), np.ones(c)
        g, b = np.ones(c, dtype), np.zeros(c, dtype)
    if op == "layer_norm":
        return lambda: fn.layer_norm(x, out=out, **kwargs)
    if op == "layer_norm_alloc":
        return lambda: fn.layer_norm(x, **kwargs)
    if op == "rms_norm":
        return lambda: fn.rms_norm(x, out=out, **kwargs)
    if op == "mean_var":
        red = kwargs["axis"]
        kept_shape = tuple(s for i, s in enumerate(shape) if i != red % len(shape))
        m, v = np.empty(kept_shape, dtype), np.empty(kept_shape, dtype)
        return lambda: fn.mean_var(x, out=(m, v), **kwargs)
    if op == "mean_var_alloc":
        return lambda: fn.mean_var(x, **kwargs)
    if op == "batch_norm":
        return lambda: fn.batch_norm(x, g, b, rm, rv, out=out, **kwargs)
    if op == "batch_norm_eval":
        return lambda: fn.batch_norm(x, g, b, rm, rv, training=False, out=out, **kwargs)
    if op == "group_norm":
        return lambda: fn.group_norm(x, 8, out=out)
    dy = rng.standard_normal(shape).astype(dtype)
    if op == "layer_norm_backward":
        _, mean, rstd = fn.layer_norm(x, return_stats=True, **kwargs)
        gamma = np.ones(tuple(shape[i] for i in ((kwargs["axis"] % len(shape)),)), dtype)
        dg, db = np.empty_like(gamma), np.empty_like(gamma)
        return lambda: fn.layer_norm_backward(dy, x, mean, rstd, gamma, out=(out, dg, db),
                                              **kwargs)
    if op == "rms_norm_backward":
        _, rstd = fn.rms_norm(x, return_stats=True, **kwargs)
        gamma = np.ones(shape[-1], dtype)
        dg = np.empty_like(gamma)
        return lambda: fn.rms_norm_backward(dy, x, rstd, gamma, out=(out, dg), **kwargs)
    if op == "batch_norm_backward":
        _, mean, rstd = fn.batch_norm(x, g, return_stats=True, **kwargs)
        dg, db = np.empty_like(g), np.empty_like(g)
        return lambda: fn.batch_norm_backward(dy, x, mean, rstd, g, out=(out, dg, db),
                                              **kwargs)
    if op == "group_norm_backward":
        gamma = np.ones(shape[1], dtype)
        _, mean, rstd = fn.group_norm(x, 8, gamma, return_stats=True)
        dg, db = np.empty_like(gamma), np.empty_like(gamma)
        return lambda: fn.group_norm_backward(dy, x, mean, rstd, 8, gamma, out=(out, dg, db))
    raise ValueError(op)


def worker(threads, only):
    """Time every case in this process; print one JSON line."""
    import numpy as np
    import fastnorm as fn
    results = {}
    for label, op, shape, kwargs, dtypes in CASES:
        if only and not any(text in label for text in only):
            continue
        for dtype in dtypes:
            call = prepare(fn, np, op, shape, kwargs, dtype)
            nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
            reps = 5 if nbytes > (8 << 20) else (15 if nbytes > (256 << 10) else 200)
            for t in threads:
                fn.set_num_threads(t)
                call()
                times = []
                for _ in range(reps):
                    t0 = time.perf_counter()
                    call()
                    times.append(time.perf_counter() - t0)
                results[f"{label} {dtype} t{t}"] = statistics.median(times)
    print(json.dumps(results))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("pythons", nargs="*", metavar="PYTHON")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", default="1,2")
    p.add_argument("--only", action="append", default=[],
                   help="only the cases whose label contains TEXT (repeatable)")
    p.add_argument("--budget", type=float, default=None,
                   help="start no round after this many seconds")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    threads = [int(t) for t in args.threads.split(",")]
    if args.worker:
        worker(threads, args.only)
        return 0
    if len(args.pythons) < 2:
        p.error("two builds at least: PYTHON_A PYTHON_B [PYTHON_C ...]")
    if len(args.pythons) > 26:
        p.error("26 builds at most (A to Z)")
    builds = [(chr(ord("A") + i), py) for i, py in enumerate(args.pythons)]
    runs = {name: [] for name, _ in builds}
    cmd = [os.path.abspath(__file__), "--worker", "--threads", args.threads]
    for text in args.only:
        cmd += ["--only", text]
    end = None if args.budget is None else time.monotonic() + args.budget
    for r in range(args.rounds):
        if end is not None and r > 0 and time.monotonic() > end:
            print(f"budget spent after {r} rounds", file=sys.stderr)
            break
        for name, py in builds if r % 2 == 0 else builds[::-1]:
            out = subprocess.run([py, "-I"] + cmd, capture_output=True, text=True,
                                 cwd="/", check=True)
            runs[name].append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(f"round {r + 1} of {args.rounds} done", file=sys.stderr)
    report(runs)
    return 0


def report(runs):
    """Per case, each build's median time and its median ratio to A."""
    names = list(runs)
    done = len(runs["A"])
    ratios = {name: [] for name in names[1:]}
    print(f"{'case':52s}" + "".join(f"{name + ' ms':>10s}" for name in names)
          + "".join(f"{name + ' / A':>7s}" for name in names[1:]))
    for key in runs["A"][0]:
        line = f"{key:52s}"
        for name in names:
            line += f"{statistics.median(run[key] for run in runs[name]) * 1e3:10.3f}"
        for name in names[1:]:
            ratio = statistics.median(runs[name][i][key] / runs["A"][i][key]
                                      for i in range(done))
            ratios[name].append(ratio)
            line += f"{ratio:7.3f}"
        print(line)
    print()
    for name in names[1:]:
        print(f"median ratio {name} / A {statistics.median(ratios[name]):.3f}, "
              f"largest {max(ratios[name]):.3f} ({len(ratios[name])} cases, {done} rounds)")


if __name__ == "__main__":
    sys.exit(main())
