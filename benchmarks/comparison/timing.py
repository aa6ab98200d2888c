"""Interleaved timing of several callables on one row.

Machines that run this are often small and shared, so timings drift while a
row runs.  Every repetition runs each callable once, back to back, so the
ratio of two callables can be taken per repetition (adjacent runs see the
same machine state and drift cancels) before the median.  Slow callables
(the NumPy code) run on an evenly spread subset of the repetitions.
"""
import gc
import time
from dataclasses import dataclass
from statistics import median

import numpy as np


class Timed:
    """One column of a row.  ``call`` (no arguments) is the work timed;
    ``enter``, run untimed just before each sample, puts the library in the
    state the column names (its thread count).  A sample times ``inner``
    calls in a loop and gives the time per call, so calls of microseconds
    are not lost in the timer's resolution."""

    def __init__(self, key, call, enter=None, slow=False):
        self.key = key
        self.call = call
        self.enter = enter
        self.slow = slow   # run on a subset of the repetitions only
        self.inner = 1

    def sample(self):
        if self.enter is not None:
            self.enter()
        call, n = self.call, self.inner
        t0 = time.perf_counter()
        for _ in range(n):
            call()
        return (time.perf_counter() - t0) / n


@dataclass(frozen=True)
class Budget:
    """How long to time a row: repetitions follow from a time budget and the
    warm-up times."""
    row_s: float        # seconds for the repetitions of the fast callables
    slow_s: float       # seconds for the slow ones
    min_reps: int
    max_reps: int
    min_slow: int
    max_slow: int
    sample_s: float     # a sample lasts at least this long (calls looped)


def _clamp(value, low, high):
    return int(max(low, min(high, round(value))))


WARM_ENOUGH_S = 0.02   # a call this long is warm after one run


def _warm_up(t, budget):
    """Run t once or twice (page faults, caches, thread pools, JIT); set its
    loop count from the best time; return that time per sample."""
    t.inner = 1
    best = t.sample()
    if best < WARM_ENOUGH_S and not t.slow:
        best = min(best, t.sample())
    t.inner = _clamp(budget.sample_s / max(best, 1e-9), 1, 100000)
    return best * t.inner


def interleave(timeds, budget):
    """Samples of every Timed, by key: a list with one entry per repetition,
    None where a slow callable did not run."""
    cost = [_warm_up(t, budget) for t in timeds]
    fast_s = sum(c for t, c in zip(timeds, cost) if not t.slow)
    slow_s = sum(c for t, c in zip(timeds, cost) if t.slow)
    reps = _clamp(budget.row_s / max(fast_s, 1e-9), budget.min_reps, budget.max_reps)
    slow_reps = _clamp(budget.slow_s / max(slow_s, 1e-9), budget.min_slow,
                       min(budget.max_slow, reps))
    slow_at = set(np.linspace(0, reps - 1, slow_reps).round().astype(int).tolist())
    samples = {t.key: [] for t in timeds}
    gc_was_enabled = gc.isenabled()
    gc.disable()  # a collection inside a timed call would be noise
    try:
        for rep in range(reps):
            for t in timeds:
                samples[t.key].append(t.sample() if rep in slow_at or not t.slow else None)
    finally:
        if gc_was_enabled:
            gc.enable()
    return samples


def median_of(samples):
    got = [s for s in samples if s is not None]
    return median(got) if got else None


def median_ratio(num, den):
    """Median over the repetitions where both ran of num / den."""
    got = [a / b for a, b in zip(num, den) if a is not None and b is not None]
    return median(got) if got else None
