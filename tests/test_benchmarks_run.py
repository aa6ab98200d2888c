"""Every asv benchmark (benchmarks/bench_calls.py, benchmarks/bench_fastnorm.py)
runs on this fastnorm as asv runs it: the shared setup_cache once, then for
every parameter combination setup, each timed or measured method once, and
teardown, which asv calls after a setup that skipped its combination
(NotImplementedError) too.  fastnorm's thread count is left as it was
found, and every class has a combination that runs.  The large arrays are
replaced by the small ones (the same code runs; asv times the large ones):
the whole suite runs here in seconds where `asv run --quick` takes minutes."""
import inspect
import itertools
import os
import sys

import pytest

import fastnorm

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The repository root on sys.path only while the package imports: it holds
# the source folder fastnorm/, without compiled kernels, which processes
# started later (Dask's workers, spawned with this sys.path) would import.
sys.path.insert(0, ROOT)
try:
    from benchmarks import _cases, bench_calls, bench_fastnorm
finally:
    sys.path.remove(ROOT)

MEASURED = ("time_", "peakmem_", "track_", "mem_")


def _classes(module):
    # asv, like this, passes over names that start with an underscore
    return [c for name, c in inspect.getmembers(module, inspect.isclass)
            if c.__module__ == module.__name__ and not name.startswith("_") and any(
                name.startswith(MEASURED) for name in dir(c))]


CLASSES = _classes(bench_calls) + _classes(bench_fastnorm)


@pytest.fixture(scope="module")
def small_inputs(tmp_path_factory):
    """The inputs setup_cache writes, the large ones the small ones' shape."""
    shapes = {layout: {size: sizes["small"] for size in sizes}
              for layout, sizes in _cases.SHAPES.items()}
    saved, _cases.SHAPES = _cases.SHAPES, shapes
    folder = tmp_path_factory.mktemp("asv_cache")
    cwd = os.getcwd()
    os.chdir(folder)
    try:
        names = bench_fastnorm.Copy().setup_cache()
        yield {key: os.path.join(folder, name) for key, name in names.items()}
    finally:
        os.chdir(cwd)
        _cases.SHAPES = saved


def test_the_suite_is_every_class_of_both_modules():
    names = {c.__name__ for c in CLASSES}
    assert {"ReturnStats", "SmallCall", "Copy", "LayerNorm", "LayerNormNumPyMem"} <= names
    assert len(CLASSES) == len(_cases.OPS) * 4 + 1 + len(_classes(bench_calls))


@pytest.mark.parametrize("cls", CLASSES, ids=[c.__name__ for c in CLASSES])
def test_every_benchmark_sets_up_runs_once_and_tears_down(cls, small_inputs):
    threads = fastnorm.get_num_threads()
    cached = (small_inputs,) if hasattr(cls, "setup_cache") else ()
    ran = 0
    grid = getattr(cls, "params", [])
    if grid and not isinstance(grid[0], list):
        grid = [grid]          # one parameter, as asv allows
    for params in itertools.product(*grid):
        bench = cls()
        args = cached + params
        try:
            if hasattr(bench, "setup"):
                bench.setup(*args)
            for name in dir(bench):
                if name.startswith(MEASURED):
                    getattr(bench, name)(*args)
            ran += 1
        except NotImplementedError:
            pass            # asv's "skipped"
        finally:
            if hasattr(bench, "teardown"):
                bench.teardown(*args)
        assert fastnorm.get_num_threads() == threads, f"{cls.__name__}{params}: threads changed"
    assert ran, f"no combination of {cls.__name__} runs"
