"""The benchmark that ``python -m fastnorm`` prints.

Each case (CASES, plain data) runs one fastnorm function on a float32 array
with a preallocated ``out=``, against two yardsticks:

* the NumPy code a user would write for the same result, and
* ``np.copyto`` of the same bytes: a kernel that reads x and writes y once
  cannot beat a copy, so ``fastnorm / copy`` near 1.0 means "at the
  memory-bandwidth limit".

Machines that run this are often small and shared, so timings drift while a
case runs.  The harness therefore interleaves the three callables within
each repetition and reports medians, with ratios taken per repetition
(adjacent runs see the same machine state, so drift cancels) before the
median.  Adding a case means adding a ``Case`` line; adding a kind of call
means adding a builder to ``OPS``.

After them come the small calls (fastnorm._small_calls): calls that cost
more than their bytes, each spelled the ways a user writes it, in
microseconds on one thread against their targets.

The full comparison (every row of the performance goal, float32 and
float64, other libraries, peak memory) is not shipped: it is
``python benchmarks/compare.py`` in a source checkout.
"""
import argparse
import gc
import json
import os
import sys
import time
import zlib
from dataclasses import dataclass
from statistics import median
from typing import Callable

import numpy as np

import fastnorm
from fastnorm import _small_calls

EPS = 1e-5
MOMENTUM = 0.1
DTYPE = np.float32
# Differences from NumPy's float32 result above this are reported as wrong:
# outputs are O(1), both sides round in float32, so honest results agree to
# ~1e-5 or better.
ERROR_TOLERANCE = 1e-3


@dataclass(frozen=True)
class Case:
    """One benchmark row (per thread count): what to call on which array."""
    label: str        # name in the table
    op: str           # key of OPS: which function, and its NumPy reference
    shape: tuple      # of the float32 input
    axis: object      # passed as axis= to fastnorm; None: batch_norm's "all but 1"


CASES = [
    Case("layer_norm rows", "layer_norm", (8192, 1024), -1),
    Case("layer_norm columns", "layer_norm", (4096, 2048), 0),
    Case("layer_norm last 2 axes", "layer_norm", (64, 196, 768), (1, 2)),
    Case("layer_norm padded rows", "layer_norm_padded", (8192, 1024), -1),
    Case("rms_norm rows", "rms_norm", (8192, 1024), -1),
    Case("batch_norm (N, C)", "batch_norm", (65536, 512), 0),
    Case("batch_norm NCHW", "batch_norm", (32, 64, 56, 56), None),
    Case("batch_norm NHWC", "batch_norm", (32, 56, 56, 64), (0, 1, 2)),
    Case("batch_norm eval NCHW", "batch_norm_eval", (32, 64, 56, 56), None),
    Case("mean_var rows", "mean_var", (8192, 1024), -1),
    Case("mean_var columns", "mean_var", (8192, 1024), 0),
    Case("layer_norm rows, omit NaN", "layer_norm_omit", (8192, 1024), -1),
    Case("layer_norm rows, omit 10% NaN", "layer_norm_omit_nan", (8192, 1024), -1),
    Case("mean_var rows, omit 10% NaN", "mean_var_omit_nan", (8192, 1024), -1),
    Case("zscore columns", "zscore", (4096, 1024), 0),
    Case("layer_norm bwd rows", "layer_norm_backward", (8192, 1024), -1),
    Case("batch_norm bwd (N, C)", "batch_norm_backward", (65536, 512), 0),
]


@dataclass(frozen=True)
class Budget:
    """How long to time each case: repetitions follow from a time budget and
    the warm-up time, so slow machines stay within the run's minute."""
    fast_s: float     # seconds for the copy + fastnorm repetitions
    ref_s: float      # seconds for the NumPy reference repetitions
    min_reps: int
    max_reps: int
    min_ref_reps: int
    max_ref_reps: int
    shrink: int       # the first axis of every shape is divided by this
    small_reps: int   # repetitions of each small call's spellings...
    small_loop_s: float  # ...each a loop of calls this long


FULL = Budget(fast_s=1.5, ref_s=1.0, min_reps=7, max_reps=61,
              min_ref_reps=3, max_ref_reps=5, shrink=1, small_reps=15, small_loop_s=0.01)
QUICK = Budget(fast_s=0.04, ref_s=0.04, min_reps=3, max_reps=9,
               min_ref_reps=1, max_ref_reps=3, shrink=8, small_reps=3, small_loop_s=0.001)


@dataclass
class Prepared:
    """A case ready to time.  Each callable returns its outputs (an array or
    a tuple of arrays) so the two results can be compared."""
    fast: Callable
    ref: Callable
    copy: Callable
    bytes_moved: int  # by the ideal kernel: read x (+ write y)


# ---------------------------------------------------------------- the cases

def _call(func, *args, **kwargs):
    """A fastnorm call as a callable, with its route (fastnorm.explain)."""
    def call():
        return func(*args, **kwargs)
    call.route = lambda: fastnorm.explain(func, *args, **kwargs)
    return call


def _param(rng, x, axes, over_reduced, base, spread):
    """A float32 parameter as fastnorm takes it (the normalized shape when
    over_reduced, else the kept shape) and as NumPy broadcasting needs it
    (the same values with size-1 axes in place of the others)."""
    belongs = [(i in axes) == over_reduced for i in range(x.ndim)]
    own_shape = tuple(s for s, b in zip(x.shape, belongs) if b)
    broadcast_shape = tuple(s if b else 1 for s, b in zip(x.shape, belongs))
    p = (base + spread * rng.standard_normal(own_shape)).astype(DTYPE)
    return p, p.reshape(broadcast_shape)


def _layer_norm(rng, x, axis, axes):
    g, g_b = _param(rng, x, axes, True, 1.0, 0.1)
    b, b_b = _param(rng, x, axes, True, 0.0, 0.1)
    y = np.empty_like(x)

    def ref():
        m = x.mean(axes, keepdims=True)
        v = x.var(axes, keepdims=True)
        return (x - m) / np.sqrt(v + EPS) * g_b + b_b

    return Prepared(fast=_call(fastnorm.layer_norm, x, g, b, axis=axis, eps=EPS, out=y),
                    ref=ref, copy=lambda: np.copyto(y, x), bytes_moved=2 * x.nbytes)


def _layer_norm_padded(rng, x, axis, axes):
    """layer_norm with where=: row i keeps its first 512 to all of its
    values (sequences padded at the end), the rest of y left as it is."""
    g, g_b = _param(rng, x, axes, True, 1.0, 0.1)
    b, b_b = _param(rng, x, axes, True, 0.0, 0.1)
    n = x.shape[-1]
    keep = np.arange(n) < rng.integers(n // 2, n + 1, x.shape[:-1])[..., None]
    y = np.zeros_like(x)

    def ref():
        m = x.mean(axes, keepdims=True, where=keep)
        v = x.var(axes, keepdims=True, where=keep)
        return np.where(keep, (x - m) / np.sqrt(v + EPS) * g_b + b_b, 0)

    return Prepared(fast=_call(fastnorm.layer_norm, x, g, b, axis=axis, eps=EPS, out=y,
                               where=keep),
                    ref=ref, copy=lambda: np.copyto(y, x), bytes_moved=2 * x.nbytes)


def _rms_norm(rng, x, axis, axes):
    g, g_b = _param(rng, x, axes, True, 1.0, 0.1)
    y = np.empty_like(x)

    def ref():
        return x / np.sqrt((x * x).mean(axes, keepdims=True) + EPS) * g_b

    return Prepared(fast=_call(fastnorm.rms_norm, x, g, axis=axis, eps=EPS, out=y),
                    ref=ref, copy=lambda: np.copyto(y, x), bytes_moved=2 * x.nbytes)


def _batch_norm(rng, x, axis, axes):
    g, g_b = _param(rng, x, axes, False, 1.0, 0.1)
    b, b_b = _param(rng, x, axes, False, 0.0, 0.1)
    # Both sides update their own running statistics in place on every call,
    # as a training step does; the output does not depend on them.
    run_mean, run_mean_b = _param(rng, x, axes, False, 0.0, 0.0)
    run_var, run_var_b = _param(rng, x, axes, False, 1.0, 0.0)
    run_mean_b, run_var_b = run_mean_b.copy(), run_var_b.copy()
    n = x.size // run_mean.size
    y = np.empty_like(x)

    fast = _call(fastnorm.batch_norm, x, g, b, run_mean, run_var, training=True,
                 momentum=MOMENTUM, eps=EPS, axis=axis, out=y)

    def ref():
        m = x.mean(axes, keepdims=True)
        v = x.var(axes, keepdims=True)
        run_mean_b[...] = (1 - MOMENTUM) * run_mean_b + MOMENTUM * m
        run_var_b[...] = (1 - MOMENTUM) * run_var_b + MOMENTUM * v * (n / (n - 1))
        return (x - m) / np.sqrt(v + EPS) * g_b + b_b

    return Prepared(fast=fast, ref=ref, copy=lambda: np.copyto(y, x),
                    bytes_moved=2 * x.nbytes)


def _batch_norm_eval(rng, x, axis, axes):
    g, g_b = _param(rng, x, axes, False, 1.0, 0.1)
    b, b_b = _param(rng, x, axes, False, 0.0, 0.1)
    run_mean, run_mean_b = _param(rng, x, axes, False, 1.0, 0.1)
    run_var, run_var_b = _param(rng, x, axes, False, 4.0, 0.1)
    y = np.empty_like(x)

    fast = _call(fastnorm.batch_norm, x, g, b, run_mean, run_var, training=False, eps=EPS,
                 axis=axis, out=y)

    def ref():
        return (x - run_mean_b) / np.sqrt(run_var_b + EPS) * g_b + b_b

    return Prepared(fast=fast, ref=ref, copy=lambda: np.copyto(y, x),
                    bytes_moved=2 * x.nbytes)


def _mean_var(rng, x, axis, axes):
    kept_shape = tuple(s for i, s in enumerate(x.shape) if i not in axes)
    mean, var = np.empty(kept_shape, DTYPE), np.empty(kept_shape, DTYPE)
    # mean_var writes no array of x's size; the copy yardstick still moves
    # x's bytes once each way, so a kernel that only reads sits near 0.5.
    scratch = np.empty_like(x)
    return Prepared(fast=_call(fastnorm.mean_var, x, axis, out=(mean, var)),
                    ref=lambda: (x.mean(axes), x.var(axes)),
                    copy=lambda: np.copyto(scratch, x), bytes_moved=x.nbytes)


def _with_nan(rng, x, share):
    """x with a share of its values NaN, in place."""
    if share:
        x[rng.random(x.shape, dtype=np.float32) < share] = np.nan
    return x


def _layer_norm_omit(rng, x, axis, axes, share=0.0):
    """layer_norm with nan_policy="omit"; NumPy's nanmean and nanvar."""
    _with_nan(rng, x, share)
    g, g_b = _param(rng, x, axes, True, 1.0, 0.1)
    b, b_b = _param(rng, x, axes, True, 0.0, 0.1)
    y = np.empty_like(x)

    def ref():
        m = np.nanmean(x, axes, keepdims=True)
        v = np.nanvar(x, axes, keepdims=True)
        return (x - m) / np.sqrt(v + EPS) * g_b + b_b

    return Prepared(fast=_call(fastnorm.layer_norm, x, g, b, axis=axis, eps=EPS, out=y,
                               nan_policy="omit"),
                    ref=ref, copy=lambda: np.copyto(y, x), bytes_moved=2 * x.nbytes)


def _mean_var_omit(rng, x, axis, axes, share=0.1):
    _with_nan(rng, x, share)
    kept_shape = tuple(s for i, s in enumerate(x.shape) if i not in axes)
    mean, var = np.empty(kept_shape, DTYPE), np.empty(kept_shape, DTYPE)
    scratch = np.empty_like(x)
    return Prepared(fast=_call(fastnorm.mean_var, x, axis, out=(mean, var), nan_policy="omit"),
                    ref=lambda: (np.nanmean(x, axes), np.nanvar(x, axes)),
                    copy=lambda: np.copyto(scratch, x), bytes_moved=x.nbytes)


def _zscore(rng, x, axis, axes):
    """zscore; SciPy's formula in NumPy (the mean, the standard deviation,
    then the scores)."""
    y = np.empty_like(x)

    def ref():
        return (x - x.mean(axes, keepdims=True)) / x.std(axes, keepdims=True)

    return Prepared(fast=_call(fastnorm.zscore, x, axis, out=y), ref=ref,
                    copy=lambda: np.copyto(y, x), bytes_moved=2 * x.nbytes)


def _backward(rng, x, axis, axes, forward, backward, gamma_over_reduced):
    """A gradient: dy, x in; dx, dgamma, dbeta out (preallocated).  The copy
    yardstick still moves x's bytes once each way; the ideal kernel moves
    three streams (read dy and x, write dx)."""
    g, g_b = _param(rng, x, axes, gamma_over_reduced, 1.0, 0.1)
    dy = rng.standard_normal(x.shape, dtype=DTYPE)
    _, mean, rstd = forward(x, g, axis=axis, eps=EPS, return_stats=True)
    dx = np.empty_like(x)
    dg, db = np.empty(g.shape, g.dtype), np.empty(g.shape, g.dtype)
    keep = tuple(i for i in range(x.ndim) if i not in axes) if gamma_over_reduced else axes
    n = x.size // rstd.size

    def ref():
        # The sums in float64, as a careful user writes them: float32 sums
        # over 65536 rows are off by ~1e-3 themselves.
        xh = (x - mean) * rstd
        gd = dy * g_b
        a = gd.sum(axes, keepdims=True, dtype=np.float64) / n
        b = (gd * xh).sum(axes, keepdims=True, dtype=np.float64) / n
        return (rstd * (gd - a - xh * b),
                (dy * xh).sum(keep, dtype=np.float64).reshape(g.shape),
                dy.sum(keep, dtype=np.float64).reshape(g.shape))

    return Prepared(fast=_call(backward, dy, x, mean, rstd, g, axis=axis, out=(dx, dg, db)),
                    ref=ref, copy=lambda: np.copyto(dx, x), bytes_moved=3 * x.nbytes)


def _layer_norm_backward(rng, x, axis, axes):
    return _backward(rng, x, axis, axes, fastnorm.layer_norm, fastnorm.layer_norm_backward, True)


def _batch_norm_backward(rng, x, axis, axes):
    return _backward(rng, x, axis, axes, fastnorm.batch_norm, fastnorm.batch_norm_backward, False)


OPS = {
    "layer_norm": _layer_norm,
    "layer_norm_padded": _layer_norm_padded,
    "rms_norm": _rms_norm,
    "batch_norm": _batch_norm,
    "batch_norm_eval": _batch_norm_eval,
    "mean_var": _mean_var,
    "layer_norm_omit": _layer_norm_omit,
    "layer_norm_omit_nan": lambda *a: _layer_norm_omit(*a, share=0.1),
    "mean_var_omit_nan": _mean_var_omit,
    "zscore": _zscore,
    "layer_norm_backward": _layer_norm_backward,
    "batch_norm_backward": _batch_norm_backward,
}


def reduced_axes(case, ndim):
    """The axes the case reduces over, as a sorted tuple of non-negative ints."""
    if case.axis is None:  # batch_norm's default: every axis but the channels
        return tuple(i for i in range(ndim) if i != 1)
    axis = case.axis if isinstance(case.axis, tuple) else (case.axis,)
    return tuple(sorted(a % ndim for a in axis))


def case_shape(case, budget):
    return (max(2, case.shape[0] // budget.shrink),) + tuple(case.shape[1:])


def make_input(rng, shape):
    """Normal data with an offset, so centring matters."""
    x = rng.standard_normal(shape, dtype=DTYPE)
    x *= 2.0
    x += 1.0
    return x


# ------------------------------------------------------------- the harness

def _seconds(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _clamp(value, low, high):
    return int(max(low, min(high, round(value))))


def _as_tuple(result):
    return result if isinstance(result, tuple) else (result,)


def max_abs_error(got, want, chunk=1 << 22):
    """max |got - want| over every output, in chunks so a 128 MB output
    needs no 128 MB temporary.  NaN where either side has one."""
    worst = 0.0
    for g, w in zip(_as_tuple(got), _as_tuple(want)):
        g, w = np.ravel(g), np.ravel(w)
        for start in range(0, g.size, chunk):
            diff = float(np.abs(g[start:start + chunk] - w[start:start + chunk]).max())
            if np.isnan(diff):
                return diff
            worst = max(worst, diff)
    return worst


def checksum(result):
    """crc32 of the output bytes: the contract says they are bitwise equal
    whatever the thread count."""
    crc = 0
    for a in _as_tuple(result):
        crc = zlib.crc32(memoryview(np.ascontiguousarray(a)).cast("B"), crc)
    return crc


def _warm_up(fn, runs=2):
    """Run fn a few times (page faults, caches, thread pool); the best time
    sizes the timing loop."""
    return min(_seconds(fn) for _ in range(runs))


def time_interleaved(prep, thread_counts, budget):
    """Per thread count: medians of copy, fastnorm and NumPy times, and the
    medians of the per-repetition ratios fastnorm/copy and NumPy/fastnorm.

    Each repetition runs copy, then fastnorm on each thread count, then (on
    an evenly spread subset of repetitions) the slow NumPy reference, back
    to back: every ratio, and the comparison between thread counts, is
    between runs that saw the same machine state.
    """
    copy_s = _warm_up(prep.copy)
    fast_s = 0.0
    for n in thread_counts:
        fastnorm.set_num_threads(n)
        fast_s += _warm_up(prep.fast)
    ref_s = _warm_up(prep.ref, runs=1)
    reps = _clamp(budget.fast_s / (copy_s + fast_s), budget.min_reps, budget.max_reps)
    ref_reps = _clamp(budget.ref_s / ref_s, budget.min_ref_reps,
                      min(budget.max_ref_reps, reps))
    ref_at = set(np.linspace(0, reps - 1, ref_reps).round().astype(int).tolist())

    copies, refs = [], []
    fasts = {n: [] for n in thread_counts}
    over_copy = {n: [] for n in thread_counts}
    speedups = {n: [] for n in thread_counts}
    gc_was_enabled = gc.isenabled()
    gc.disable()  # a collection inside a timed call would be noise
    try:
        for rep in range(reps):
            c = _seconds(prep.copy)
            copies.append(c)
            this_rep = {}
            for n in thread_counts:
                fastnorm.set_num_threads(n)
                this_rep[n] = f = _seconds(prep.fast)
                fasts[n].append(f)
                over_copy[n].append(f / c)
            if rep in ref_at:
                r = _seconds(prep.ref)
                refs.append(r)
                for n, f in this_rep.items():
                    speedups[n].append(r / f)
    finally:
        if gc_was_enabled:
            gc.enable()
    return {n: {
        "fastnorm_ms": 1e3 * median(fasts[n]),
        "numpy_ms": 1e3 * median(refs),
        "copy_ms": 1e3 * median(copies),
        "speedup": median(speedups[n]),
        "ratio_to_copy": median(over_copy[n]),
        "reps": reps,
        "numpy_reps": ref_reps,
    } for n in thread_counts}


class Progress:
    """A plain-text bar on stderr: redrawn in place on a terminal, one line
    per step otherwise (CI logs)."""

    def __init__(self, total, stream=sys.stderr, width=20):
        self.total, self.done, self.stream, self.width = total, 0, stream, width
        self.in_place = stream.isatty()
        self.last_len = 0

    def show(self, what):
        filled = self.width * self.done // max(self.total, 1)
        line = f"[{'#' * filled}{'.' * (self.width - filled)}] {self.done}/{self.total} {what}"
        if self.in_place:
            self.stream.write("\r" + line.ljust(self.last_len))
            self.last_len = len(line)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def advance(self):
        self.done += 1

    def close(self):
        self.show("done")
        if self.in_place:  # leave the terminal clean for the table
            self.stream.write("\r" + " " * self.last_len + "\r")
            self.stream.flush()


def _threads_label(n):
    return f"{n} thread" + ("" if n == 1 else "s")


def run_case(case, thread_counts, budget, rng):
    """Rows (one per thread count) for one case; the arrays are freed on return."""
    shape = case_shape(case, budget)
    x = make_input(rng, shape)
    axes = reduced_axes(case, x.ndim)
    prep = OPS[case.op](rng, x, case.axis, axes)
    base = {
        "case": case.label, "function": case.op, "shape": list(shape),
        "axis": list(axes), "bytes": prep.bytes_moved,
        "route": "{pattern}/{schedule}".format(**prep.fast.route()),
    }
    fastnorm.set_num_threads(thread_counts[0])
    base["max_abs_err"] = max_abs_error(prep.fast(), prep.ref())
    checksums = {}
    for n in thread_counts:
        fastnorm.set_num_threads(n)
        checksums[n] = checksum(prep.fast())
    rows = []
    for n, timing in time_interleaved(prep, thread_counts, budget).items():
        row = dict(base, threads=n, checksum=checksums[n], **timing)
        row["gb_per_s"] = prep.bytes_moved / (row["fastnorm_ms"] * 1e-3) / 1e9
        rows.append(row)
    return rows


def run(cases, thread_counts, budget, seed=0):
    """Every case at every thread count; a case that fails gives an error
    row instead of ending the run."""
    rng = np.random.default_rng(seed)
    progress = Progress(len(cases))
    rows = []
    try:
        for case in cases:
            progress.show(case.label)
            try:
                rows.extend(run_case(case, thread_counts, budget, rng))
            except Exception as e:  # report it, go on with the others
                rows.append({"case": case.label, "function": case.op,
                             "shape": list(case_shape(case, budget)),
                             "error": f"{type(e).__name__}: {e}"})
            progress.advance()
            gc.collect()  # free this case's arrays before the next allocates
    finally:
        fastnorm.set_num_threads(None)
        progress.close()
    return rows


# ------------------------------------------------------------------ report

def _fmt_shape(shape):
    return "x".join(str(s) for s in shape)


def _fmt_axis(axis):
    return ",".join(str(a) for a in axis)


# (header, width, how to format a row's value); rows with "error" skip these.
COLUMNS = [
    ("case", 22, lambda r: r["case"]),
    ("shape", 13, lambda r: _fmt_shape(r["shape"])),
    ("axis", 5, lambda r: _fmt_axis(r["axis"])),
    ("route", 15, lambda r: r["route"]),
    ("thr", 3, lambda r: str(r["threads"])),
    ("fastnorm ms", 11, lambda r: f"{r['fastnorm_ms']:.2f}"),
    ("numpy ms", 8, lambda r: f"{r['numpy_ms']:.1f}"),
    ("speed-up", 8, lambda r: f"{r['speedup']:.1f}x"),
    ("copy ms", 7, lambda r: f"{r['copy_ms']:.2f}"),
    ("/copy", 5, lambda r: f"{r['ratio_to_copy']:.2f}"),
    ("GB/s", 5, lambda r: f"{r['gb_per_s']:.1f}"),
    ("max err", 8, lambda r: f"{r['max_abs_err']:.1e}"),
]


def format_table(rows):
    """One line per row under COLUMNS, the first two left-aligned; a row
    with an "error" shows its case and shape and the error instead."""
    def cells(r, cols):
        return [c.rjust(w) if i > 1 else c.ljust(w)
                for i, (c, (_, w, _)) in enumerate(zip([f(r) for _, _, f in cols], cols))]

    out = [" ".join(cells(None, [(h, w, lambda _, h=h: h) for h, w, _ in COLUMNS])).rstrip(),
           " ".join("-" * w for _, w, _ in COLUMNS)]
    for r in rows:
        if "error" in r:
            out.append(" ".join(cells(r, COLUMNS[:2])) + f" FAILED: {r['error']}")
        else:
            out.append(" ".join(cells(r, COLUMNS)).rstrip())
    return "\n".join(out)


def problems(rows):
    """Lines about anything that looks wrong: failures, results that differ
    from NumPy, thread counts that change the bits, kernels slower than NumPy."""
    notes = []
    by_case = {}
    for r in rows:
        if "error" in r:
            notes.append(f"{r['case']}: failed ({r['error']})")
            continue
        by_case.setdefault(r["case"], []).append(r)
        err = r["max_abs_err"]
        if not err <= ERROR_TOLERANCE:  # also catches NaN
            notes.append(f"{r['case']}: max |fastnorm - numpy| = {err:.3g} > {ERROR_TOLERANCE:g}")
        if r["speedup"] < 1.0:
            notes.append(f"{r['case']} ({_threads_label(r['threads'])}): "
                         f"slower than NumPy ({r['speedup']:.2f}x)")
    for label, case_rows in by_case.items():
        if len({r["checksum"] for r in case_rows}) > 1:
            notes.append(f"{label}: output bits differ between thread counts "
                         f"({', '.join(str(r['threads']) for r in case_rows)})")
        one = [r["fastnorm_ms"] for r in case_rows if r["threads"] == 1]
        for r in case_rows:
            if one and r["threads"] > 1 and r["fastnorm_ms"] > 1.1 * one[0]:
                # With spinning OpenMP threads, one core taken by another
                # process stalls the whole team: suspect the machine first.
                notes.append(f"{label}: {_threads_label(r['threads'])} slower than 1 "
                             f"({r['fastnorm_ms']:.2f} vs {one[0]:.2f} ms, timed "
                             "alternately); other load on the CPUs?")
    return list(dict.fromkeys(notes))  # the error note appears once per case


def load_average():
    """1-minute load average, or None where the OS does not say."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def print_report(rows, budget, load_before):
    print()
    print(f"benchmark: float32, out= preallocated; median of {budget.min_reps}-"
          f"{budget.max_reps} runs (NumPy: {budget.min_ref_reps}-{budget.max_ref_reps}); "
          "copy, each thread count and NumPy interleaved")
    if load_before is not None:
        print(f"machine: {os.cpu_count()} CPUs, load average {load_before:.2f} before, "
              f"{load_average():.2f} after (load from other processes makes timings noisy)")
    print(format_table(rows))
    print("ratio to copy (/copy) = fastnorm time / np.copyto of the same bytes; "
          "1.0 is the memory-bandwidth limit")
    print("  (mean_var only reads x: ~0.5 is its limit).  speed-up = NumPy time / "
          "fastnorm time; GB/s = bytes the ideal")
    print("  kernel moves (read x + write y; mean_var: read x; bwd: read dy, x + write dx) / time; "
          "max err = max |fastnorm - NumPy|;")
    print("  NumPy's float32 result is itself off by up to ~1e-4 on long reductions, "
          f"so only max err > {ERROR_TOLERANCE:g} is flagged.")
    notes = problems(rows)
    if notes:
        print("looks wrong:")
        for n in notes:
            print(f"  - {n}")


# -------------------------------------------------------------------- main

FULL_COMPARISON = ("The full comparison (every row of the performance goal, other "
                   "libraries, peak memory) is python benchmarks/compare.py in a "
                   "source checkout.")


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="python -m fastnorm",
        description="Print fastnorm's build configuration and benchmark it on this "
                    "machine against NumPy and against np.copyto of the same bytes.",
        epilog=FULL_COMPARISON)
    p.add_argument("--quick", action="store_true",
                   help="smaller arrays and fewer runs (a few seconds; for smoke tests)")
    p.add_argument("--threads", type=int, metavar="N",
                   help="run only with N threads (default: the default count and 1)")
    p.add_argument("--tune", action="store_true",
                   help="measure a core's share of the last-level cache here (about half "
                        "a minute, on a quiet machine) and write it as the profile that "
                        "later imports tune from, then stop (FASTNORM_PROFILE names the "
                        "file)")
    p.add_argument("--json", metavar="PATH",
                   help="also write the results to PATH as a JSON list of objects")
    args = p.parse_args(argv)
    if args.threads is not None and args.threads < 1:
        p.error("--threads needs N >= 1")
    return args


def default_thread_counts():
    fastnorm.set_num_threads(None)
    return list(dict.fromkeys([fastnorm.get_num_threads(), 1]))


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if "--full" in argv:
        # It was an option here; say where it went rather than fail on it.
        print(f"python -m fastnorm has no --full. {FULL_COMPARISON}", file=sys.stderr)
        return 2
    args = parse_args(argv)
    if args.tune:
        from fastnorm import _tune
        return _tune.main()
    fastnorm.show_config()
    sys.stdout.flush()  # config first, even while the bar draws on stderr
    budget = QUICK if args.quick else FULL
    threads = [args.threads] if args.threads else default_thread_counts()
    load_before = load_average()  # a busy machine explains odd numbers
    start = time.perf_counter()
    rows = run(CASES, threads, budget)
    print_report(rows, budget, load_before)
    small = _small_calls.run(budget.small_reps, budget.small_loop_s)
    _small_calls.print_report(small)
    rows = rows + small
    print(f"benchmark took {time.perf_counter() - start:.1f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 1 if any("error" in r for r in rows) else 0
