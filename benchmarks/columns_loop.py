"""fastnorm's column statistics timed against a plain loop, in one process.

    python -I benchmarks/columns_loop.py [--rounds 25] [--hot] [SHAPE ...]

SHAPE is ROWSxCOLUMNS of a float32 x (default 8192x1024 4096x2048 8192x1000
65536x256; columns a multiple of 8). ``benchmarks/columns_loop.c`` is
compiled with the system's C compiler (``CC``, default ``cc``) into a
temporary folder and loaded with ctypes; its loops do mean_var's column
sums in the order of fastnorm's AVX2 kernel (its header lists them). Each
round times, on one thread, one call of each: ``fastnorm.mean_var(x,
axis=0, out=...)``, the loops (the sweeps and row blocks of as many rows
as ``fastnorm.explain`` reports for x) and ``np.copyto`` of
x, each call after the same two copies of x, so that every one starts
from the same caches (``--hot``: the best of three calls back to back, as
benchmarks/compare.py times them). Printed per shape: each median time over the
copy's, and in brackets the median round-by-round ratio over
``loop_plain``'s. x86-64 with AVX2 and FMA only; not an asv benchmark.
"""
import argparse
import ctypes
import os
import sys

import numpy as np

import fastnorm

HERE = os.path.dirname(os.path.abspath(__file__))

LOOPS = ("loop_plain", "loop_rows", "loop_share", "loop_rows_idle", "loop_share_idle")


def shape_arg(text):
    rows, cols = (int(v) for v in text.lower().split("x"))
    if rows < 1 or cols < 8 or cols % 8:
        raise argparse.ArgumentTypeError(f"{text}: rows >= 1 and columns a multiple of 8")
    return rows, cols


def calls(lib, x):
    """{label: a no-argument call} for one x, the copies' destination and
    the line that heads its times."""
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
    header = (f"sweeps of {plan['sweep_rows']} rows, blocks of {plan['rows_per_block']}, "
              f"fastnorm fetches {plan['fetch_ahead']}")
    return made, sink, header, None


def main():
    # beside this file, also under ``python -I`` (which leaves the script's
    # folder off sys.path); not at import, which asv does
    if HERE not in sys.path:
        sys.path.insert(0, HERE)
    import loop_models
    loop_models.main(__doc__, "columns_loop", shape_arg,
                     [(8192, 1024), (4096, 2048), (8192, 1000), (65536, 256)], 25, calls,
                     "loop_plain")


if __name__ == "__main__":
    main()
