"""The asv benchmarks of ways of calling (benchmarks/bench_calls.py) run on
this fastnorm: every parameter combination sets up, runs its timed call
once and tears down, leaving fastnorm's thread count as it found it.  A
combination this version cannot make raises NotImplementedError, which
asv reports as skipped; each class must have at least one that runs."""
import inspect
import itertools
import os
import sys

import pytest

import fastnorm

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "benchmarks"))
import bench_calls  # noqa: E402  (benchmarks/bench_calls.py)

CLASSES = [c for _, c in inspect.getmembers(bench_calls, inspect.isclass)
           if c.__module__ == bench_calls.__name__ and hasattr(c, "params")]


@pytest.mark.parametrize("cls", CLASSES, ids=[c.__name__ for c in CLASSES])
def test_every_benchmark_of_calls_runs(cls):
    threads = fastnorm.get_num_threads()
    ran = 0
    for params in itertools.product(*cls.params):
        bench = cls()
        try:
            bench.setup(*params)
        except NotImplementedError:
            continue
        try:
            for name in dir(bench):
                if name.startswith("time_"):
                    getattr(bench, name)(*params)
            ran += 1
        finally:
            if hasattr(bench, "teardown"):
                bench.teardown(*params)
        assert fastnorm.get_num_threads() == threads, f"{cls.__name__}{params}: threads changed"
    assert ran, f"no combination of {cls.__name__} runs"
