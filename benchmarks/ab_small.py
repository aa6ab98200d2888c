"""Two builds' small calls timed against each other in one process.

    python -I benchmarks/ab_small.py KERNELS_A.so KERNELS_B.so [--rounds 15] [--rows R N]
                                     [--cols R N] [--grad R N] [--threads T]

Each KERNELS is a compiled kernel module of one build (for example
``.../site-packages/fastnorm/_kernels_avx2.cpython-311-x86_64-linux-gnu.so``
of two environments; the same SIMD level for both).  Both are loaded into
this process next to the installed fastnorm, and their fast-path entries
(what a public call reaches after its first checks) are called on the same
arrays, alternating A and B within each round: a small call's time moves
with the process (its allocations, the interpreter's state), so two
processes, as in benchmarks/ab.py, hide differences of a few percent.  Per
call: the median over rounds of the best of 3 loops (of 300 calls, or of
about 2 ms for longer ones), and the median of the ratios B / A taken
round by round.  One thread (``--threads``).  ``--rows R N`` adds
layer_norm and rms_norm over the rows of an (R, N) array, float32 and
float64, into ``out=``; ``--cols R N`` mean_var and batch_norm over its
columns; ``--grad R N`` the rows' gradients.
Not an asv benchmark.
"""
import argparse
import importlib.util
import os
import shutil
import statistics
import tempfile
import timeit

import numpy as np

import fastnorm  # the package the kernel modules import at load
from fastnorm._small_calls import copy_destination


def load(path, tag, folder):
    """The kernel module at path, loaded from a copy of its own."""
    copy = os.path.join(folder, tag + "_" + os.path.basename(path))
    shutil.copy(path, copy)
    name = os.path.basename(path).split(".")[0]
    spec = importlib.util.spec_from_file_location("fastnorm." + name, copy)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def calls(k, arrays):
    """{label: a no-argument call of k's fast-path entries}, float32."""
    x, o, x1, o1, g, b, rm, rv = arrays
    c = copy_destination(x)
    # update_running writes in place: each build its own buffers
    rm_own, rv_own = rm.copy(), rv.copy()
    stats = (np.random.default_rng(1).standard_normal(768), np.ones(768))
    center, rms = k.MODES["center"], k.MODES["rms"]
    return {
        "layer_norm (32, 768)": lambda: k.fast_norm(center, x, None, None, -1, 1e-5, o, None,
                                                     False),
        "  with gain, bias": lambda: k.fast_norm(center, x, g, b, -1, 1e-5, o, None, False),
        "rms_norm (32, 768)": lambda: k.fast_norm(rms, x, None, None, -1, 1e-5, o, None, False),
        "layer_norm (1, 256)": lambda: k.fast_norm(center, x1, None, None, -1, 1e-5, o1, None,
                                                    False),
        "batch_norm (32, 768)": lambda: k.fast_batch_norm(x, None, None, None, None, True, 0.1,
                                                          1e-5, 0, o, None, False),
        "  with gain, bias ": lambda: k.fast_batch_norm(x, g, b, None, None, True, 0.1, 1e-5, 0,
                                                        o, None, False),
        "batch_norm eval (32, 768)": lambda: k.fast_batch_norm(x, g, b, rm, rv, False, 0.1,
                                                               1e-5, 0, o, None, False),
        "mean_var rows (32, 768)": lambda: k.fast_mean_var(x, -1, 0, False, None, None),
        "mean_var columns (32, 768)": lambda: k.fast_mean_var(x, 0, 0, False, None, None),
        "update_running (768)": lambda: k.update_running(rm_own, rv_own, stats[0], stats[1],
                                                         0.1, 32 / 31),
        "np.copyto (32, 768)": lambda: np.copyto(c, x) or c,
    }


def row_calls(k, shape, rng):
    """{label: a call of k's fast path} for layer_norm and rms_norm over the
    rows of a float32 and a float64 array of `shape`, into out=."""
    made = {}
    for dtype in (np.float32, np.float64):
        x = rng.standard_normal(shape).astype(dtype)
        o = np.empty_like(x)
        for func in ("layer_norm", "rms_norm"):
            mode = k.MODES["center" if func == "layer_norm" else "rms"]
            made[f"{func} {shape} {np.dtype(dtype).name}"] = (
                lambda mode=mode, x=x, o=o: k.fast_norm(mode, x, None, None, -1, 1e-5, o, None,
                                                        False))
    return made


def column_calls(k, shape, rng):
    """{label: a call of k's fast path} for mean_var and batch_norm
    (training, no gain) over the columns of a float32 and a float64 array
    of `shape`, into out=."""
    made = {}
    for dtype in (np.float32, np.float64):
        x = rng.standard_normal(shape).astype(dtype)
        o = np.empty_like(x)
        stats = (np.empty(shape[1], dtype), np.empty(shape[1], dtype))
        name = f"{shape} {np.dtype(dtype).name}"
        made[f"mean_var columns {name}"] = (
            lambda x=x, s=stats: k.fast_mean_var(x, 0, 0, False, None, s))
        made[f"batch_norm {name}"] = (
            lambda x=x, o=o: k.fast_batch_norm(x, None, None, None, None, True, 0.1, 1e-5, 0,
                                               o, None, False))
    return made


def grad_calls(k, shape, rng):
    """{label: a call of k's fast path} for layer_norm_backward and
    rms_norm_backward over the rows of a float32 and a float64 array of
    `shape`, with a gain, into out= (dx placed as x, gradients of the gain
    and bias)."""
    made = {}
    for dtype in (np.float32, np.float64):
        x = rng.standard_normal(shape).astype(dtype)
        dy = rng.standard_normal(shape).astype(dtype)
        gamma = rng.standard_normal(shape[-1]).astype(dtype)
        _, mean, rstd = fastnorm.layer_norm(x, gamma, return_stats=True)
        _, rms_rstd = fastnorm.rms_norm(x, gamma, return_stats=True)
        dx, dg, db = copy_destination(x), np.empty_like(gamma), np.empty_like(gamma)
        center, rms = k.GRAD_MODES["center"], k.GRAD_MODES["rms"]
        name = f"{shape} {np.dtype(dtype).name}"
        made[f"layer_norm_backward {name}"] = (
            lambda dy=dy, x=x, m=mean, r=rstd, g=gamma, o=(dx, dg, db):
            k.fast_norm_backward(center, dy, x, m, r, g, -1, o, 3))
        made[f"rms_norm_backward {name}"] = (
            lambda dy=dy, x=x, r=rms_rstd, g=gamma, o=(dx, dg):
            k.fast_norm_backward(rms, dy, x, None, r, g, -1, o, 2))
    return made


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--rows", type=int, nargs=2, action="append", default=[],
                   metavar=("R", "N"),
                   help="also layer_norm and rms_norm over the rows of (R, N), float32 and "
                        "float64, into out= (repeatable)")
    p.add_argument("--cols", type=int, nargs=2, action="append", default=[],
                   metavar=("R", "N"),
                   help="also mean_var and batch_norm over the columns of (R, N), float32 "
                        "and float64, into out= (repeatable)")
    p.add_argument("--grad", type=int, nargs=2, action="append", default=[],
                   metavar=("R", "N"),
                   help="also layer_norm_backward and rms_norm_backward over the rows of "
                        "(R, N), float32 and float64, into out= (repeatable)")
    p.add_argument("--threads", type=int, default=1,
                   help="threads for the calls (default 1; small calls run on one anyway)")
    args = p.parse_args()
    fastnorm.set_num_threads(args.threads)     # the kernels of both builds read it
    rng = np.random.default_rng(0)
    x = rng.standard_normal((32, 768)).astype(np.float32)
    x1 = rng.standard_normal((1, 256)).astype(np.float32)
    arrays = (x, np.empty_like(x), x1, np.empty_like(x1),
              rng.standard_normal(768).astype(np.float32),
              rng.standard_normal(768).astype(np.float32),
              np.zeros(768, np.float32), np.ones(768, np.float32))
    with tempfile.TemporaryDirectory() as folder:
        sides = []
        for tag, path in (("a", args.a), ("b", args.b)):
            k = load(path, tag, folder)
            side = calls(k, arrays)
            for shape in args.rows:
                side.update(row_calls(k, tuple(shape), np.random.default_rng(2)))
            for shape in args.cols:
                side.update(column_calls(k, tuple(shape), np.random.default_rng(4)))
            for shape in args.grad:
                side.update(grad_calls(k, tuple(shape), np.random.default_rng(3)))
            sides.append(side)
        labels = list(sides[0])
        # A build whose fast path refuses a call (None) leaves it out.
        refused = {k for k in labels if sides[0][k]() is None or sides[1][k]() is None}
        labels = [k for k in labels if k not in refused]
        times = {k: ([], []) for k in labels}
        # Loops of about 2 ms (300 calls of a small call)
        number = {k: max(1, min(300, round(2e-3 / min(timeit.repeat(sides[0][k], number=1,
                                                                      repeat=3)))))
                  for k in labels}
        for r in range(args.rounds):
            order = (0, 1) if r % 2 == 0 else (1, 0)
            for k in labels:
                for side in order:
                    f, n = sides[side][k], number[k]
                    times[k][side].append(min(timeit.repeat(f, number=n, repeat=3)) / n)
    w = max([28] + [len(k) for k in labels])
    print(f"{'call':{w}s} {'A us':>9s} {'B us':>9s}  B / A")
    for k in labels:
        a, b = times[k]
        ratio = statistics.median(y / x for x, y in zip(a, b))
        print(f"{k:{w}s} {1e6 * statistics.median(a):9.2f} {1e6 * statistics.median(b):9.2f}  "
              f"{ratio:.3f}")
    for k in sorted(refused):
        print(f"{k:{w}s} left to the general path by a build's fast path: not compared")


if __name__ == "__main__":
    main()
