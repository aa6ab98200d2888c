"""One row of each kind, measured: its columns built and checked against
fastnorm's result, timed interleaved, and summed up as a plain dict (the
JSON output is a list of these)."""
import time
from statistics import median

import numpy as np

import fastnorm
from . import fastnorm_calls, numpy_code
from .cases import AHEAD
from .agree import agrees, as_tuple, disagreement
from .floor import bound, stream_floor
from .inputs import make_inputs
from .rivals import Skip
from .timing import Timed, interleave, median_of, median_ratio
from .yardstick import allocating_copy, copy_destination, copy_into, read_once

THREADS = (1, 2)


def _fastnorm_column(call, n):
    return Timed(("fastnorm", n), call, enter=lambda: fastnorm.set_num_threads(n))


def _base(case, dtype, kind):
    return {"kind": kind, "case": case.label, "op": case.op, "shape": list(case.shape),
            "axis": case.axis, "dtype": str(dtype), "target": case.target,
            "allocating": case.allocating}


def _ms(seconds):
    return None if seconds is None else 1e3 * seconds


def _numpy_column(inp, want, row, slow):
    code = numpy_code.build(inp)
    error = disagreement(code(), want)
    row["numpy_error"] = error
    if not agrees(error, inp.dtype):
        row["skipped"]["numpy"] = f"result differs from fastnorm's (relative error {error:.2g})"
        return []
    return [Timed(("numpy", 1), code, slow=slow)]


def _rival_columns(rivals, case, inp, want, threads, row):
    timeds = []
    for r in rivals:
        try:
            cols, error = r.columns(case, inp, want, threads)
        except Skip as e:
            row["skipped"][r.name] = str(e)
            continue
        row["rivals"][r.name] = {"error": error}
        timeds += cols
    return timeds


def target_at(target, n):
    """A STREAMING row's target with n threads (the 1-thread and 2-thread
    pair; more threads take the 2-thread one)."""
    return target[0] if n == 1 else target[1]


def _lead(row, threads):
    """fastnorm's least speed-up over the rivals that ran (their time /
    fastnorm's), per thread count, and whether it is at least AHEAD; no
    entry where none ran."""
    lead = {}
    for n in threads:
        got = [e["speedup"][n] for e in row["rivals"].values()
               if e.get("speedup", {}).get(n) is not None]
        if got:
            lead[n] = min(got)
    if lead:
        row["lead"] = lead
        row["lead_met"] = {n: v >= AHEAD for n, v in lead.items()}


def _summarize_rivals(row, samples, timeds, threads, fast_key):
    """ms and fastnorm's speed-up (their time / fastnorm's, per repetition)
    per thread count, for NumPy and each rival that ran; then the lead over
    the fastest of them (_lead)."""
    if ("numpy", 1) in samples:
        row["numpy_ms"] = _ms(median_of(samples["numpy", 1]))
        row["numpy_speedup"] = {n: median_ratio(samples["numpy", 1], samples[fast_key(n)])
                                for n in threads}
    for name, entry in row["rivals"].items():
        entry["ms"] = {n: _ms(median_of(samples[name, n])) for n in threads}
        entry["speedup"] = {n: median_ratio(samples[name, n], samples[fast_key(n)])
                            for n in threads}
        load = {t.key[1]: median(t.cpu_per_wall) for t in timeds
                if t.key[0] == name and getattr(t, "cpu_per_wall", None)}
        if load:
            entry["cpu_per_wall"] = load
    _lead(row, threads)


def _release(rivals):
    for r in rivals:
        r.release()


def streaming_row(case, dtype, seed, rivals, budget):
    """fastnorm against the copy yardstick with 1 and 2 threads (the read
    yardstick timed alongside, for the row's floor), and against NumPy and
    each rival (rows that allocate: against a copy into a new array only).
    Met: /copy at most the larger of the target with as many threads and
    the row's floor (floor.bound)."""
    started = time.perf_counter()
    inp = make_inputs(case, dtype, seed)
    fast = fastnorm_calls.build(inp, allocate=case.allocating)
    fastnorm.set_num_threads(1)
    want = as_tuple(fast())
    row = dict(_base(case, dtype, "streaming"), skipped={}, rivals={})
    if case.allocating:
        copies = {n: allocating_copy(inp.x, n) for n in THREADS}
    else:
        # Into fastnorm's output where it has x's shape and x's offset
        # within a page, as large arrays do: one array of x's size less on
        # the largest rows (want is checked before timing).
        out = want[0]
        scratch = (out if out.shape == inp.x.shape and out.flags.c_contiguous
                   and (out.ctypes.data - inp.x.ctypes.data) % 4096 == 0
                   else copy_destination(inp.x))
        copies = {n: copy_into(scratch, inp.x, n) for n in THREADS}
    reads = {n: read_once(inp.x, n) for n in THREADS}
    timeds = []
    for n in THREADS:
        timeds += [Timed(("copy", n), copies[n]), Timed(("read", n), reads[n]),
                   _fastnorm_column(fast, n)]
    try:
        if not case.allocating:
            timeds += _numpy_column(inp, want, row, slow=True)
            timeds += _rival_columns(rivals, case, inp, want, THREADS, row)
        del want
        row["setup_s"] = time.perf_counter() - started
        samples = interleave(timeds, budget)
    finally:
        _release(rivals)
        fastnorm.set_num_threads(None)
    row["reps"] = len(samples["copy", 1])
    row["copy_ms"] = {n: _ms(median_of(samples["copy", n])) for n in THREADS}
    row["read_ms"] = {n: _ms(median_of(samples["read", n])) for n in THREADS}
    row["fastnorm_ms"] = {n: _ms(median_of(samples["fastnorm", n])) for n in THREADS}
    row["ratio"] = {n: median_ratio(samples["fastnorm", n], samples["copy", n])
                    for n in THREADS}
    row["looks"] = case.looks.as_dict()
    row["traffic"] = [case.looks.extra_reads, case.looks.copies]
    row["floor"] = {n: stream_floor(case.looks, samples["read", n], samples["copy", n])
                    for n in THREADS}
    row["or_floor"] = case.or_floor
    row["bound"] = {n: bound(target_at(case.target, n), row["floor"][n], case.or_floor)
                    for n in THREADS}
    row["met"] = {n: row["ratio"][n] <= row["bound"][n] for n in THREADS}
    _summarize_rivals(row, samples, timeds, THREADS, lambda n: ("fastnorm", n))
    return row


def small_call_row(case, seed, rivals, budget):
    """The whole call (allocating its output) on an array that fits in L1,
    every library allowed the most threads of the run (small inputs are
    worth one; each library decides), in microseconds per call, against a
    copy of x (one thread) into an array made beforehand, as ``python -m
    fastnorm`` times it: making one costs a small call more than its bytes.
    Met: /copy at most the target (none: not judged)."""
    inp = make_inputs(case, case.dtypes[0], seed)
    threads = THREADS[-1]
    fast = fastnorm_calls.build(inp, allocate=case.allocating)
    want = as_tuple(fast())
    row = dict(_base(case, inp.dtype, "small call"), skipped={}, rivals={},
               threads=threads)
    timeds = [Timed(("copy", 1), copy_into(copy_destination(inp.x), inp.x, 1)),
              _fastnorm_column(fast, threads)]
    try:
        timeds += _numpy_column(inp, want, row, slow=False)
        timeds += _rival_columns(rivals, case, inp, want, (threads,), row)
        samples = interleave(timeds, budget)
    finally:
        _release(rivals)
        fastnorm.set_num_threads(None)
    row["reps"] = len(samples["fastnorm", threads])
    row["fastnorm_us"] = 1e6 * median_of(samples["fastnorm", threads])
    row["copy_us"] = 1e6 * median_of(samples["copy", 1])
    row["ratio"] = median_ratio(samples["fastnorm", threads], samples["copy", 1])
    if case.target is not None:
        row["met"] = row["ratio"] <= case.target
    _summarize_rivals(row, samples, timeds, (threads,), lambda n: ("fastnorm", n))
    return row


def scaling_row(case, seed, budget):
    """fastnorm on an in-cache array with 1 thread and with 2, alternately:
    time(1) / time(2)."""
    inp = make_inputs(case, case.dtypes[0], seed)
    fast = fastnorm_calls.build(inp)
    try:
        samples = interleave([_fastnorm_column(fast, n) for n in THREADS], budget)
    finally:
        fastnorm.set_num_threads(None)
    row = _base(case, inp.dtype, "scaling")
    row["reps"] = len(samples["fastnorm", 1])
    row["fastnorm_ms"] = {n: _ms(median_of(samples["fastnorm", n])) for n in THREADS}
    row["speedup"] = median_ratio(samples["fastnorm", 1], samples["fastnorm", 2])
    row["met"] = row["speedup"] >= case.target
    return row
