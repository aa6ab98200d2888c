"""fastnorm's column statistics timed against a plain loop, in one process.

    python -I benchmarks/columns_loop.py [--rounds 25] [SHAPE ...]

SHAPE is ROWSxCOLUMNS of a float32 x (default 8192x1024 4096x2048 8192x1000
65536x256; columns a multiple of 8). ``benchmarks/columns_loop.c`` is
compiled with the system's C compiler (``CC``, default ``cc``) into a
temporary folder and loaded with ctypes; its loops do mean_var's column
sums in the order of fastnorm's AVX2 kernel (its header lists them). Each
round times, on one thread, one call of each: ``fastnorm.mean_var(x,
axis=0, out=...)``, the loops (the sweeps and row blocks of as many rows
as ``fastnorm.explain`` reports for x) and ``np.copyto`` of
x, each call after the same two copies of x, so that every one starts
from the same caches. Printed per shape: each median time over the
copy's, and in brackets the median round-by-round ratio over
``loop_plain``'s. x86-64 with AVX2 and FMA only; not an asv benchmark.
"""
import argparse
import ctypes
import os
import platform
import statistics
import subprocess
import tempfile
import timeit

import numpy as np

import fastnorm

LOOPS = ("loop_plain", "loop_rows", "loop_share", "loop_rows_idle", "loop_share_idle")


def build(folder):
    """columns_loop.c compiled into folder, loaded."""
    source = os.path.join(os.path.dirname(os.path.abspath(__file__)), "columns_loop.c")
    lib = os.path.join(folder, "columns_loop.so")
    subprocess.run([os.environ.get("CC", "cc"), "-O2", "-mavx2", "-mfma", "-shared", "-fPIC",
                    "-o", lib, source], check=True)
    return ctypes.CDLL(lib)


def shape_arg(text):
    rows, cols = (int(v) for v in text.lower().split("x"))
    if rows < 1 or cols < 8 or cols % 8:
        raise argparse.ArgumentTypeError(f"{text}: rows >= 1 and columns a multiple of 8")
    return rows, cols


def calls(lib, x):
    """{label: a no-argument call} for one x."""
    rows, cols = x.shape
    plan = fastnorm.explain(fastnorm.mean_var, x, axis=0)["columns"]
    sweep, block = plan["sweep_rows"], plan["rows_per_block"]
    first = x[0].astype(np.float64)
    state = np.zeros(2 * (cols + 8) * (-(-rows // block)))
    mean, var = np.empty(cols, np.float32), np.empty(cols, np.float32)
    sink = np.empty_like(x)
    ptr = ctypes.c_void_p
    args = (x.ctypes.data_as(ptr), ctypes.c_long(rows), ctypes.c_long(cols),
            first.ctypes.data_as(ptr), state.ctypes.data_as(ptr), ctypes.c_long(sweep),
            ctypes.c_long(block))
    made = {"fastnorm": lambda: fastnorm.mean_var(x, axis=0, out=(mean, var))}
    for name in LOOPS:
        made[name] = lambda f=getattr(lib, name): f(*args)
    made["np.copyto"] = lambda: np.copyto(sink, x)
    return made, sink, plan


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("shapes", nargs="*", type=shape_arg,
                   default=[(8192, 1024), (4096, 2048), (8192, 1000), (65536, 256)])
    p.add_argument("--rounds", type=int, default=25)
    a = p.parse_args()
    if platform.machine().lower() not in ("x86_64", "amd64"):
        raise SystemExit("columns_loop.c needs x86-64 with AVX2 and FMA")
    fastnorm.set_num_threads(1)
    print(f"fastnorm {fastnorm.__version__}, one thread; {a.rounds} rounds")
    with tempfile.TemporaryDirectory() as folder:
        lib = build(folder)
        for shape in a.shapes:
            x = (np.random.default_rng(0).standard_normal(shape) + 1).astype(np.float32)
            made, sink, plan = calls(lib, x)
            times = {k: [] for k in made}
            for _ in range(a.rounds):
                for k, f in made.items():
                    np.copyto(sink, x)
                    np.copyto(sink, x)
                    times[k].append(timeit.timeit(f, number=1))
            copy = statistics.median(times["np.copyto"])
            print(f"{shape}: sweeps of {plan['sweep_rows']} rows, blocks of "
                  f"{plan['rows_per_block']}, fastnorm fetches {plan['fetch_ahead']}")
            for k, t in times.items():
                ratio = statistics.median(u / v for u, v in zip(t, times["loop_plain"]))
                print(f"  {k:16s} {statistics.median(t) * 1e6:9.0f} us  "
                      f"{statistics.median(t) / copy:5.2f} a copy  [{ratio:.3f}]")


if __name__ == "__main__":
    main()
