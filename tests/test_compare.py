"""The full comparison (python benchmarks/compare.py): its NumPy code computes
what fastnorm computes, its copy yardstick copies, and a quick run prints
every table and writes its JSON, with or without the other libraries; and
python -m fastnorm, which no longer runs it, says where it is."""
import importlib
import inspect
import json
import os
import pkgutil
import re
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
BENCHMARKS = os.path.join(os.path.dirname(HERE), "benchmarks")
COMPARE = os.path.join(BENCHMARKS, "compare.py")
if not os.path.isfile(COMPARE):
    pytest.skip("benchmarks/ is not here (an sdist leaves it out)", allow_module_level=True)

# The comparison's package, benchmarks/comparison, as compare.py imports it.
sys.path.insert(0, BENCHMARKS)
try:
    import comparison
    from comparison import cases, fastnorm_calls, numpy_code
    from comparison.agree import agrees, as_tuple, disagreement
    from comparison.inputs import make_inputs
    from comparison.yardstick import allocating_copy, copy_into, read_once
finally:
    sys.path.remove(BENCHMARKS)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", cases.STREAMING + cases.SCALING, ids=lambda c: c.name)
def test_numpy_code_agrees_with_fastnorm(case, dtype):
    inp = make_inputs(cases.shrunk(case, 32), dtype, seed=3)
    want = as_tuple(fastnorm_calls.build(inp)())
    error = disagreement(numpy_code.build(inp)(), want)
    assert agrees(error, dtype), error


NUMBA_CASES = [c for c in cases.STREAMING if not c.allocating] + [cases.SMALL_CALL]


def test_numba_code_agrees_with_fastnorm():
    # Only where numba is installed (the comparison's optional rival); each
    # kernel compiles on its first call (a few seconds).  One test for all
    # rows, so that a run without numba skips it once.
    pytest.importorskip("numba")
    from comparison import numba_code
    kernels = numba_code.load()[1]
    for case in NUMBA_CASES:
        for dtype in ("float32", "float64"):
            inp = make_inputs(cases.shrunk(case, 32), dtype, seed=3)
            want = as_tuple(fastnorm_calls.build(inp)())
            try:
                code = numba_code.build(kernels, inp)
            except NotImplementedError as e:
                # every forward row has numba code
                assert case.op.endswith("_backward"), (case.name, e)
                continue
            error = disagreement(code(), want)
            assert agrees(error, dtype), (case.name, dtype, error)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_copy_yardstick_copies(threads):
    x = np.arange(1001 * 7, dtype=np.float32).reshape(1001, 7)
    y = np.zeros_like(x)
    copy_into(y, x, threads)()
    np.testing.assert_array_equal(y, x)
    np.testing.assert_array_equal(allocating_copy(x, threads)(), x)


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_read_yardstick_reads_every_byte(threads, dtype):
    # The pieces' sums (wrapping) add up to the sum of x's unsigned view.
    x = np.random.default_rng(threads).standard_normal((1001, 7)).astype(dtype)
    view = x.reshape(-1).view(f"u{x.itemsize}")
    want = int(view.astype(np.uint64).sum(dtype=np.uint64)) % (1 << 8 * x.itemsize)
    sums = read_once(x, threads)()
    assert len(sums) == threads
    assert sum(int(s) for s in sums) % (1 << 8 * x.itemsize) == want


def test_disagreement_is_relative_and_catches_nan():
    a = np.ones(10)
    assert disagreement((a * 1000,), (a * 1000 + 1e-3,)) == pytest.approx(1e-6, rel=1e-4)
    b = a.copy()
    b[3] = np.nan
    assert not agrees(disagreement(b, a), "float64")


def test_quick_run_prints_every_table(tmp_path):
    out = tmp_path / "rows.json"
    p = subprocess.run(
        [sys.executable, "-I", COMPARE, "--quick", "--no-rss",
         "--only", "layer_norm rows", "--only", "mean_var columns", "--dtype", "float32",
         "--without", "torch", "--without", "onnxruntime", "--without", "jax",
         "--without", "numba", "--json", str(out)],
        capture_output=True, text=True, timeout=300, cwd=HERE)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    for title in ("against the copy yardstick", "1 thread against 2", "one small call",
                  "against NumPy and other libraries", "targets met:"):
        assert title in p.stdout
    rows = json.loads(out.read_text())["rows"]
    streaming = [r for r in rows if r["kind"] == "streaming"]
    assert {r["case"] for r in streaming} == {"layer_norm rows", "mean_var columns",
                                              "layer_norm rows, allocating"}
    for r in streaming:
        assert set(r["ratio"]) == {"1", "2"} and all(v > 0 for v in r["ratio"].values())
        assert set(r["read_ms"]) == {"1", "2"} and all(v > 0 for v in r["read_ms"].values())
        # the stream model's floor: mean_var reads x once, layer_norm reads
        # and writes it once (a copy)
        reads, copies = r["traffic"]
        assert (reads, copies) == ((1, 0) if r["op"] == "mean_var" else (0, 1))
        for n, floor in r["floor"].items():
            assert floor > 0 and (floor == 1.0 if reads == 0 else copies == 0), (n, floor)
        if not r["allocating"]:
            assert r["numpy_ms"] > 0 and not r["skipped"]


def test_python_m_fastnorm_points_to_the_comparison():
    p = subprocess.run([sys.executable, "-I", "-m", "fastnorm", "--full", "--quick"],
                       capture_output=True, text=True, timeout=60, cwd=HERE)
    assert p.returncode != 0
    assert "benchmarks/compare.py" in p.stderr and not p.stdout



# asv imports every module under benchmarks/ and takes these names, at module
# level or in a class, for benchmarks (asv_runner's benchmark types).
ASV_NAMES = re.compile(r"^((Time|Timeraw|Track|Mem|PeakMem)[A-Z_].+|"
                       r"(time|timeraw|track|mem|peakmem)_.+)$")


def test_asv_finds_no_benchmark_in_the_comparison():
    found = []
    for info in pkgutil.iter_modules(comparison.__path__, "comparison."):
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if name.startswith("_"):
                continue
            if inspect.isfunction(value) and ASV_NAMES.match(name):
                found.append(f"{info.name}.{name}")
            elif inspect.isclass(value):
                found += [f"{info.name}.{name}.{m}" for m, _ in inspect.getmembers(value)
                          if ASV_NAMES.match(m)]
    assert not found


def test_importing_the_comparison_loads_no_other_library(run_python):
    # asv imports every module, also where PyTorch, ONNX Runtime, JAX and
    # numba are not installed: each is imported only when the comparison runs.
    p = run_python("import importlib, pkgutil, sys\n"
                   f"sys.path.insert(0, {BENCHMARKS!r})\n"
                   "import comparison\n"
                   "for i in pkgutil.iter_modules(comparison.__path__, 'comparison.'):\n"
                   "    importlib.import_module(i.name)\n"
                   "print(sorted({'torch', 'onnxruntime', 'onnx', 'jax', 'numba', 'llvmlite'}"
                   " & set(sys.modules)))")
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout.split() == ["[]"]
