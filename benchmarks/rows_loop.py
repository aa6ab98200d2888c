"""fastnorm's layer norm over short rows timed against a plain loop, in one process.

    python -I benchmarks/rows_loop.py [--rounds 15] [--hot] [SHAPE ...]

SHAPE is ROWSxN of a float32 x (default 131072x32 8192x32 65536x64
16384x24; N a multiple of 8, at most 64: the rows that fastnorm sums side
by side). ``benchmarks/rows_loop.c`` is compiled with the system's C
compiler (``CC``, default ``cc``) into a temporary folder and loaded with
ctypes; its loops do layer norm with gain and bias a row at a time (its
header lists them). Each round times, on one thread, one call of each:
``fastnorm.layer_norm(x, gamma, beta, out=...)``, the loops and
``np.copyto`` of x, each call after the same two copies of x, so that
every one starts from the same caches (``--hot``: the best of three calls
back to back, as benchmarks/compare.py times them). Printed per shape: each median time
over the copy's, and in brackets the median round-by-round ratio over
``loop_order``'s, then the largest difference between fastnorm's y and
the loops'. x86-64 with AVX2 and FMA only; not an asv benchmark.
"""
import argparse
import ctypes
import os
import sys

import numpy as np

import fastnorm

HERE = os.path.dirname(os.path.abspath(__file__))

LOOPS = ("loop_order", "loop_two")
EPS = 1e-5


def shape_arg(text):
    rows, n = (int(v) for v in text.lower().split("x"))
    if rows < 1 or n < 8 or n > 64 or n % 8:
        raise argparse.ArgumentTypeError(f"{text}: rows >= 1 and N one of 8, 16, ..., 64")
    return rows, n


def calls(lib, x):
    """{label: a no-argument call} for one x, the copies' destination, the
    line that heads its times and the one that follows them (how far
    fastnorm's y is from the loops')."""
    rows, n = x.shape
    rng = np.random.default_rng(1)
    g = rng.standard_normal(n).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    outs = {k: np.empty_like(x) for k in ("fastnorm",) + LOOPS}
    sink = np.empty_like(x)
    ptr = ctypes.c_void_p
    made = {"fastnorm": lambda: fastnorm.layer_norm(x, g, b, eps=EPS, out=outs["fastnorm"])}
    for name in LOOPS:
        args = (x.ctypes.data_as(ptr), outs[name].ctypes.data_as(ptr), ctypes.c_long(rows),
                ctypes.c_long(n), ctypes.c_double(EPS), g.ctypes.data_as(ptr),
                b.ctypes.data_as(ptr))
        made[name] = lambda f=getattr(lib, name), a=args: f(*a)
    made["np.copyto"] = lambda: np.copyto(sink, x)
    header = (f"{x.nbytes / 2**20:.1f} MiB, "
              f"route {fastnorm.explain(fastnorm.layer_norm, x)['schedule']}")

    def footer():
        diff = max(float(np.max(np.abs(outs["fastnorm"] - outs[k]))) for k in LOOPS)
        return f"  largest |fastnorm - loop|: {diff:.2e}"
    return made, sink, header, footer


def main():
    # beside this file, also under ``python -I`` (which leaves the script's
    # folder off sys.path); not at import, which asv does
    if HERE not in sys.path:
        sys.path.insert(0, HERE)
    import loop_models
    loop_models.main(__doc__, "rows_loop", shape_arg,
                     [(131072, 32), (8192, 32), (65536, 64), (16384, 24)], 15, calls,
                     "loop_order")


if __name__ == "__main__":
    main()
