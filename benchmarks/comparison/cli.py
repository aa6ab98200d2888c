"""``python benchmarks/compare.py``: every row of the performance goal in
one run, printed as tables, optionally saved as JSON."""
import argparse
import json
import os
import platform
import sys
import time

import numpy as np

import fastnorm
from . import cases, markdown, measure, peak_rss, report, rivals
from .console import Progress, load_average
from .timing import Budget

RIVALS = ("torch", "onnxruntime", "jax", "numba")

FULL = Budget(row_s=2.0, slow_s=1.5, min_reps=5, max_reps=31, min_slow=3, max_slow=5,
              sample_s=0.005)
SMALL = Budget(row_s=1.5, slow_s=0.0, min_reps=15, max_reps=41, min_slow=0, max_slow=0,
               sample_s=0.01)
# --quick: arrays divided by QUICK_SHRINK along their first axis, a few
# repetitions: checks that every column runs; its numbers mean little.
QUICK = Budget(row_s=0.05, slow_s=0.05, min_reps=2, max_reps=3, min_slow=1, max_slow=1,
               sample_s=0.001)
QUICK_SHRINK = 16


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="python benchmarks/compare.py",
        description="Measure every row of fastnorm's performance goal: against a copy "
                    "of the same bytes with 1 and 2 threads, against the NumPy code a "
                    "user would write and, where installed, against PyTorch, ONNX "
                    "Runtime, JAX and numba; then the peak memory of every public call.")
    p.add_argument("--quick", action="store_true",
                   help="small arrays, few repetitions: checks that everything runs")
    p.add_argument("--json", metavar="PATH", help="also write every row to PATH as JSON")
    p.add_argument("--markdown", metavar="PATH",
                   help="also write the timing tables to PATH as Markdown, with the date, "
                        "the machine (lscpu) and the versions (for docs/performance.md; "
                        "nothing with --rss-only)")
    p.add_argument("--only", metavar="TEXT", action="append",
                   help="only the rows whose case name contains TEXT (repeatable)")
    p.add_argument("--dtype", action="append", choices=["float32", "float64"],
                   help="only this dtype (repeatable; default both)")
    p.add_argument("--without", action="append", choices=list(RIVALS), default=[],
                   help="leave this library out even when installed (repeatable)")
    p.add_argument("--no-rss", action="store_true", help="skip the peak-memory part")
    p.add_argument("--rss-only", action="store_true", help="only the peak-memory part")
    p.add_argument("--rss-mb", type=int, default=256, metavar="MB",
                   help="input size for the peak-memory part (default 256)")
    return p.parse_args(argv)


def _selected(case_list, args, shrink=True):
    """The cases --only keeps; quick runs shrink them unless they are small
    calls already (shrink=False)."""
    keep = [c for c in case_list
            if not args.only or any(t in c.name for t in args.only)]
    return [cases.shrunk(c, QUICK_SHRINK) for c in keep] if args.quick and shrink else keep


def _versions(loaded, missing):
    lines = [f"fastnorm {fastnorm.__version__}, numpy {np.__version__}, "
             f"Python {platform.python_version()}"]
    lines += [f"{r.name} {r.version}" for r in loaded]
    lines += [f"{name}: {why}" for name, why in missing.items()]
    return lines


def _machine_lines(load_before):
    load, cpus = load_average(), os.cpu_count() or 1
    if load is None or load_before is None:
        return [f"machine: {cpus} CPUs"]
    lines = [f"machine: {cpus} CPUs, load average {load_before:.2f} before, "
             f"{load:.2f} after (other processes make timings noisy)"]
    policy = os.environ.get("OMP_WAIT_POLICY")
    if max(load, load_before) > cpus - 0.5:
        # An OpenMP team (fastnorm's, PyTorch's) waits at every barrier for
        # its slowest thread; with every core wanted by other work, a woken
        # thread waits for a core while the rest of the team spins on theirs.
        lines.append("  busy: more runnable work than CPUs: the 2-thread columns wait for "
                     "cores (1-thread ones much less)"
                     + ("" if policy else "; OMP_WAIT_POLICY=passive, set before starting, "
                        "keeps waiting OpenMP threads off the cores"))
    lines.append("OMP_WAIT_POLICY=" + (policy or "(unset: OpenMP threads spin a while "
                                                 "before sleeping)"))
    return lines


def _plan(args):
    """(kind, case, dtype) for every row to measure, in order."""
    plan = []
    for c in _selected(cases.STREAMING, args):
        plan += [("streaming", c, d) for d in c.dtypes if not args.dtype or d in args.dtype]
    plan += [("small call", c, c.dtypes[0])
             for c in _selected(cases.SMALL_CALLS, args, shrink=False)]
    plan += [("scaling", c, c.dtypes[0]) for c in _selected(cases.SCALING, args)]
    return plan


def run_rows(plan, loaded, quick):
    """Every planned row; a row that fails gives an error row instead of
    ending the run."""
    progress = Progress(len(plan))
    rows = []
    try:
        for seed, (kind, case, dtype) in enumerate(plan):
            progress.show(f"{case.name} {dtype}")
            started = time.perf_counter()
            budget = QUICK if quick else SMALL if kind == "small call" else FULL
            try:
                if kind == "streaming":
                    rows.append(measure.streaming_row(case, dtype, seed, loaded, budget))
                elif kind == "small call":
                    rows.append(measure.small_call_row(case, seed, loaded, budget))
                else:
                    rows.append(measure.scaling_row(case, seed, budget))
            except Exception as e:  # report it, go on with the others
                rows.append({"kind": kind, "case": case.label, "shape": list(case.shape),
                             "dtype": dtype, "error": f"{type(e).__name__}: {e}"})
            rows[-1]["seconds"] = time.perf_counter() - started
            progress.advance()
    finally:
        progress.close()
    return rows


def main(argv=None):
    args = parse_args(argv)
    start = time.perf_counter()
    load_before = load_average()
    fastnorm.show_config()
    sys.stdout.flush()
    rows, loaded, missing, rss, rival_versions = [], [], {}, None, {}
    if not args.rss_only:
        wanted = [n for n in RIVALS if n not in args.without]
        loaded, missing = rivals.load(wanted, measure.THREADS)
        try:
            rows = run_rows(_plan(args), loaded, args.quick)
        finally:
            # After the run: numba names its threading layer once it has run.
            versions = _versions(loaded, missing)
            rival_versions = {r.name: r.version for r in loaded}
            for r in loaded:
                r.close()
    else:
        versions = _versions([], {})
    if not args.no_rss:
        nbytes = (args.rss_mb << 20) // (QUICK_SHRINK if args.quick else 1)
        rss = peak_rss.report(nbytes)
    header = versions + _machine_lines(load_before)
    report.print_all(rows, rss, [r.name for r in loaded], missing, header)
    print(f"took {time.perf_counter() - start:.0f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "peak_rss": rss, "versions": versions}, f, indent=1,
                      default=str)
    if args.markdown and rows:
        markdown.write(args.markdown, rows, rival_versions,
                       {name: f"not compared: {why}" for name, why in missing.items()})
    return 1 if any("error" in r for r in rows + (rss or [])) else 0
