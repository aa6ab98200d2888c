"""Two sets of tuning values, timed against each other in one process.

    python benchmarks/ab_tuning.py --set NAME=VALUE [--set ...] [--op mean_var]
        [--axis -1] [--dtype float32] [--threads 1] [--rounds 7] SHAPE [SHAPE ...]

A is the tuning in force (the values derived from this machine, see
`fastnorm.show_config()`); B is A with each --set NAME=VALUE replaced
(VALUE in bytes or with K, M or G).  Both run on the same build and the
same arrays: rounds alternate A and B (fastnorm._machine's values set with
the kernels' set_tuning), each the best of three loops of calls on x of
SHAPE (rows, columns: the last axis reduced, or with `--axis 0` the
first, `out=` preallocated), and
the report gives each one's median time, the schedule `explain()` names,
and the median of the per-round ratios B / A.  So a rule of
fastnorm/_machine.py can be checked on any machine without a rebuild: for
instance where rows are grouped in cache,

    python benchmarks/ab_tuning.py --set cached_bytes=1M --op mean_var 2048,1024

Not an asv benchmark: asv imports this module and finds nothing to time.
"""
import argparse
import statistics
import sys
import time


def parse_set(text):
    from fastnorm._machine import parse_size
    name, sep, value = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"--set takes NAME=VALUE, not {text!r}")
    try:
        return name.strip(), parse_size(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def call_for(fn, np, op, x, axis=-1):
    """op over x's axis into arrays made here: (function, keywords), timed
    as function(x, **keywords) and explained with the same."""
    if op == "mean_var":
        kept = tuple(n for i, n in enumerate(x.shape) if i != axis % x.ndim)
        m, v = np.empty(kept, x.dtype), np.empty(kept, x.dtype)
        return fn.mean_var, {"axis": axis, "out": (m, v)}
    return getattr(fn, op), {"axis": axis, "out": np.empty_like(x)}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("shapes", nargs="+", metavar="SHAPE", help="rows,columns (e.g. 2048,1024)")
    p.add_argument("--set", dest="sets", action="append", type=parse_set, required=True,
                   metavar="NAME=VALUE", help="B's value for a tuning field (repeatable)")
    p.add_argument("--op", default="mean_var", choices=["mean_var", "layer_norm", "rms_norm"])
    p.add_argument("--axis", type=int, default=-1, choices=[-1, 0],
                   help="the axis reduced: -1 the rows (default), 0 the columns")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=7)
    args = p.parse_args(argv)

    import numpy as np
    import fastnorm as fn
    from fastnorm import _simd

    kernels = _simd.kernels
    a_values = kernels.tuning()
    unknown = [name for name, _ in args.sets if name not in a_values]
    if unknown:
        p.error(f"no tuning field {', '.join(unknown)}; the fields: {', '.join(a_values)}")
    b_values = dict(a_values, **dict(args.sets))
    try:
        kernels.set_tuning(b_values)        # refused values stop here, not mid-run
    except ValueError as e:
        p.error(str(e))
    finally:
        kernels.set_tuning(a_values)
    fn.set_num_threads(args.threads)
    print(f"B: {', '.join(f'{k}={v}' for k, v in args.sets)}; {args.op} over axis "
          f"{args.axis}, {args.dtype}, "
          f"{args.threads} thread(s), {args.rounds} rounds")
    try:
        for text in args.shapes:
            shape = tuple(int(v) for v in text.split(","))
            x = np.random.default_rng(0).standard_normal(shape).astype(args.dtype)
            func, kwargs = call_for(fn, np, args.op, x, args.axis)
            loops = max(3, int(1e7 / x.nbytes))

            def best():
                times = []
                for _ in range(3):
                    t0 = time.perf_counter()
                    for _ in range(loops):
                        func(x, **kwargs)
                    times.append((time.perf_counter() - t0) / loops)
                return min(times)

            runs = {"A": [], "B": []}
            schedule = {}
            for _ in range(args.rounds):
                for name, values in (("A", a_values), ("B", b_values)):
                    kernels.set_tuning(values)
                    runs[name].append(best())
                    schedule[name] = fn.explain(func, x, **kwargs)["schedule"]
            ratio = statistics.median(b / a for a, b in zip(runs["A"], runs["B"]))
            print(f"{str(shape):16s} {x.nbytes / 2**20:7.2f} MiB  "
                  f"A {schedule['A']:6s} {statistics.median(runs['A']) * 1e6:9.1f} us  "
                  f"B {schedule['B']:6s} {statistics.median(runs['B']) * 1e6:9.1f} us  "
                  f"B / A {ratio:.3f}", flush=True)
    finally:
        kernels.set_tuning(a_values)
    return 0


if __name__ == "__main__":
    sys.exit(main())
