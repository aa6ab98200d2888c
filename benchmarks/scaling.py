"""Thread scaling of the forward calls, from the repository root:

    python benchmarks/scaling.py [--threads 1,2,4,8] [--rounds 7] [--json PATH] [--quick]

Each call on float32 arrays into ``out=``, with 1 thread and with each
count given (default: 1, 2, 4, ... up to the CPUs this process may use),
the counts taken in turn within every round: the median time for each
count, its speed-up over one thread, and its time over a copy of x's bytes
with as many threads (the comparison's copy yardstick).  The full
comparison (``benchmarks/compare.py``) holds 1 and 2 threads only; this is
for machines with more cores.  It measures the fastnorm installed in the
Python that runs it.  ``--quick`` (arrays a 16th as long along their first
axis, one round) checks that every case runs.  Not an asv benchmark.
"""
import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def _cases(rng, shrink):
    """(name, x, a call of fastnorm into a preallocated y) for each case, x
    a `shrink`-th as long along its first axis."""
    import fastnorm

    def x_of(shape):
        shape = (max(1, shape[0] // shrink),) + shape[1:]
        return rng.standard_normal(shape).astype(np.float32)

    def layer(shape, axis=-1):
        x = x_of(shape)
        y = np.empty_like(x)
        return x, lambda: fastnorm.layer_norm(x, axis=axis, out=y)

    def rms(shape):
        x = x_of(shape)
        y = np.empty_like(x)
        return x, lambda: fastnorm.rms_norm(x, out=y)

    def batch(shape, axis=None):
        x = x_of(shape)
        y = np.empty_like(x)
        c = x.shape[-1] if axis is not None else x.shape[1]
        mean, var = np.zeros(c, np.float32), np.ones(c, np.float32)
        kw = {} if axis is None else {"axis": axis}
        return x, lambda: fastnorm.batch_norm(x, running_mean=mean, running_var=var,
                                              training=True, out=y, **kw)

    def mean_var(shape, axis):
        x = x_of(shape)
        return x, lambda: fastnorm.mean_var(x, axis=axis)

    made = [
        ("layer_norm rows (256, 1024)",) + layer((256, 1024)),
        ("layer_norm rows (8192, 1024)",) + layer((8192, 1024)),
        ("rms_norm rows (8192, 1024)",) + rms((8192, 1024)),
        ("layer_norm axis 0 (8192, 1024)",) + layer((8192, 1024), axis=0),
        ("batch_norm (N, C) (8192, 1024)",) + batch((8192, 1024), axis=0),
        ("batch_norm NCHW (16, 64, 56, 56)",) + batch((16, 64, 56, 56)),
        ("mean_var rows (8192, 1024)",) + mean_var((8192, 1024), -1),
        ("mean_var columns (8192, 1024)",) + mean_var((8192, 1024), 0),
        ("layer_norm rows (16384, 4096)",) + layer((16384, 4096)),
    ]
    return made


def _best(f, reps):
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - t0)
    return best


def main(argv=None):
    if HERE not in sys.path:
        sys.path.insert(0, HERE)
    import fastnorm
    from comparison.yardstick import copy_into

    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:
        cpus = os.cpu_count() or 1
    default = [1]
    while default[-1] * 2 <= cpus:
        default.append(default[-1] * 2)
    p = argparse.ArgumentParser(prog="python benchmarks/scaling.py",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", default=",".join(map(str, default)),
                   help="thread counts, comma-separated (1 is always added)")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--json", metavar="PATH", help="also write the results to PATH")
    p.add_argument("--quick", action="store_true",
                   help="arrays a 16th as long, one round: checks that every case runs")
    args = p.parse_args(argv)
    if args.quick:
        args.rounds = 1
    counts = sorted({1} | {int(t) for t in args.threads.split(",")})

    fastnorm.show_config()
    rows = []
    rng = np.random.default_rng(0)
    print(f"\n{'case':34s}" + "".join(f"{f'{n}t ms':>10s}{'x1t':>6s}{'/copy':>7s}"
                                        for n in counts))
    for name, x, call in _cases(rng, 16 if args.quick else 1):
        scratch = np.empty_like(x)
        copies = {n: copy_into(scratch, x, n) for n in counts}
        call()
        reps = max(2, min(50, int(0.02 / max(_best(call, 1), 1e-6))))
        took = {n: [] for n in counts}
        copy = {n: [] for n in counts}
        for _ in range(args.rounds):
            for n in counts:
                fastnorm.set_num_threads(n)
                took[n].append(_best(call, reps))
                copy[n].append(_best(copies[n], reps))
        fastnorm.set_num_threads(None)
        med = {n: statistics.median(took[n]) for n in counts}
        ratio = {n: statistics.median(t / c for t, c in zip(took[n], copy[n])) for n in counts}
        rows.append({"case": name, "ms": {n: med[n] * 1e3 for n in counts},
                     "speedup": {n: med[1] / med[n] for n in counts},
                     "per_copy": ratio})
        print(f"{name:34s}" + "".join(f"{med[n] * 1e3:10.3f}{med[1] / med[n]:6.2f}"
                                      f"{ratio[n]:7.2f}" for n in counts), flush=True)
    print("\nx1t: one thread's time / this count's; /copy: time / a copy of x's bytes "
          "with as many threads (medians over rounds)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"fastnorm": fastnorm.__version__, "cpus": cpus, "rows": rows}, f,
                      indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
