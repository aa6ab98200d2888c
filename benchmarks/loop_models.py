"""What the C loop models' scripts (columns_loop.py, rows_loop.py) share:
their C file compiled and loaded, and fastnorm timed against the loops
and a copy, round by round, in one process."""
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


def build(name, folder):
    """benchmarks/NAME.c compiled into folder with the system's C compiler
    (CC, default cc), loaded; SystemExit off x86-64."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        raise SystemExit(f"{name}.c needs x86-64 with AVX2 and FMA")
    source = os.path.join(os.path.dirname(os.path.abspath(__file__)), name + ".c")
    lib = os.path.join(folder, name + ".so")
    subprocess.run([os.environ.get("CC", "cc"), "-O2", "-mavx2", "-mfma", "-shared", "-fPIC",
                    "-o", lib, source, "-lm"], check=True)
    return ctypes.CDLL(lib)


def run_rounds(made, x, sink, rounds, hot=False):
    """{label: seconds of each round} of made's calls, in turn each round,
    each call after the same two copies of x into sink, so that every one
    starts from the same caches; or, hot, the best of three calls after
    one more, back to back as benchmarks/compare.py times them (x and the
    call's output stay in the caches as far as they fit)."""
    times = {k: [] for k in made}
    for _ in range(rounds):
        for k, f in made.items():
            if hot:
                f()
                times[k].append(min(timeit.repeat(f, number=1, repeat=3)))
                continue
            np.copyto(sink, x)
            np.copyto(sink, x)
            times[k].append(timeit.timeit(f, number=1))
    return times


def print_times(times, base):
    """Each call's median time, over np.copyto's, and [the median of its
    per-round ratios over base's]."""
    copy = statistics.median(times["np.copyto"])
    width = max(len(k) for k in times)
    for k, t in times.items():
        ratio = statistics.median(u / v for u, v in zip(t, times[base]))
        print(f"  {k:{width}s} {statistics.median(t) * 1e6:9.0f} us  "
              f"{statistics.median(t) / copy:5.2f} a copy  [{ratio:.3f}]")


def main(doc, name, shape_arg, shapes, rounds, calls, base):
    """A loop model's script: its float32 shapes (parsed by shape_arg,
    `shapes` by default) and --rounds (`rounds`), NAME.c built, and per
    shape calls(lib, x) -> (made, sink, header, footer): made's calls
    timed against each other and `base`, header printed before their
    times and footer() (if not None) after."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    p.add_argument("shapes", nargs="*", type=shape_arg, default=shapes)
    p.add_argument("--rounds", type=int, default=rounds)
    p.add_argument("--hot", action="store_true",
                   help="time calls back to back, as benchmarks/compare.py does, rather than "
                        "each after two copies of x")
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        lib = build(name, folder)
        fastnorm.set_num_threads(1)
        print(f"fastnorm {fastnorm.__version__}, one thread; {a.rounds} rounds"
              + (", calls back to back" if a.hot else ""))
        for shape in a.shapes:
            x = (np.random.default_rng(0).standard_normal(shape) + 1).astype(np.float32)
            made, sink, header, footer = calls(lib, x)
            times = run_rounds(made, x, sink, a.rounds, a.hot)
            print(f"{shape}: {header}")
            print_times(times, base)
            if footer is not None:
                print(footer())
