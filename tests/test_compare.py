"""The full comparison (python benchmarks/compare.py): its rows carry the
performance goal's targets, its NumPy code computes what fastnorm computes,
its copy yardstick copies, its floors follow the stream model, its Markdown
report holds the header and every row, and a quick run prints every table
and writes its JSON and Markdown, with or without the other libraries; and
python -m fastnorm, which no longer runs it, says where it is.  No test here
times anything: made-up timings stand in for measured ones."""
import datetime
import importlib
import inspect
import json
import os
import pkgutil
import re
import shutil
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
    from comparison import cases, fastnorm_calls, machine, markdown, numpy_code
    from comparison.agree import agrees, as_tuple, disagreement
    from comparison.floor import bound, stream_floor
    from comparison.inputs import make_inputs
    from comparison.yardstick import allocating_copy, copy_into, read_once
finally:
    sys.path.remove(BENCHMARKS)


# The performance goal, target by target: (list, label, shape, axis, target).
# Streaming rows: /copy with 1 and 2 threads, met at the larger of the
# target and the floor (or_floor); small calls: copies of x into a new
# array; every scaling row 1.8x.
F, BC, G = (1.3, 1.2), (1.8, 1.4), (1.6, 1.6)
GOAL = [
    ("STREAMING", "layer_norm rows", (8192, 1024), -1, F),
    ("STREAMING", "layer_norm rows", (16384, 4096), -1, F),
    ("STREAMING", "layer_norm last 2 axes", (64, 196, 768), (1, 2), F),
    ("STREAMING", "layer_norm short rows", (131072, 32), -1, F),
    ("STREAMING", "layer_norm axis 0", (4096, 4096), 0, F),
    ("STREAMING", "batch_norm NCHW", (64, 64, 56, 56), None, F),
    ("STREAMING", "batch_norm NHWC", (64, 56, 56, 64), (0, 1, 2), F),
    ("STREAMING", "batch_norm (N, C)", (65536, 512), 0, BC),
    ("STREAMING", "batch_norm NCHW 7x7", (256, 512, 7, 7), None, F),
    ("STREAMING", "batch_norm eval NCHW", (64, 64, 56, 56), None, F),
    ("STREAMING", "batch_norm eval NHWC", (64, 56, 56, 64), (0, 1, 2), F),
    ("STREAMING", "rms_norm rows", (8192, 1024), -1, F),
    ("STREAMING", "mean_var rows", (8192, 1024), -1, (0.6, 0.6)),
    ("STREAMING", "mean_var columns", (8192, 1024), 0, (0.7, 0.7)),
    ("STREAMING", "layer_norm bwd rows", (8192, 1024), -1, G),
    ("STREAMING", "rms_norm bwd rows", (8192, 1024), -1, G),
    ("STREAMING", "batch_norm bwd NCHW", (64, 64, 56, 56), None, G),
    ("STREAMING", "batch_norm bwd (N, C)", (65536, 512), 0, G),
    ("STREAMING", "batch_norm bwd NCHW 7x7", (256, 512, 7, 7), None, G),
    ("STREAMING", "group_norm bwd NCHW", (64, 64, 56, 56), 1, G),
    ("STREAMING", "layer_norm rows, allocating", (8192, 1024), -1, F),
    ("STREAMING", "rms_norm rows, allocating", (8192, 1024), -1, F),
    ("STREAMING", "batch_norm eval, allocating", (64, 64, 56, 56), None, F),
    ("SMALL_CALLS", "layer_norm small call", (32, 768), -1, 2.0),
    ("SMALL_CALLS", "rms_norm small call", (32, 768), -1, 2.0),
    ("SMALL_CALLS", "layer_norm small call", (1, 256), -1, None),
    ("SMALL_CALLS", "rms_norm small call", (1, 256), -1, None),
    ("SMALL_CALLS", "batch_norm (N, C) small call", (32, 768), 0, 3.0),
    ("SMALL_CALLS", "mean_var rows small call", (32, 768), -1, 1.5),
] + [("SCALING", label, shape, axis, 1.8)
     for label, axis, shapes in [
         ("layer_norm rows", -1, [(256, 1024), (8192, 1024)]),
         ("rms_norm rows", -1, [(256, 1024), (8192, 1024)]),
         ("mean_var rows", -1, [(256, 1024), (8192, 1024)]),
         ("mean_var columns", 0, [(256, 1024), (8192, 1024)]),
         ("batch_norm (N, C)", 0, [(2048, 128), (8192, 1024)]),
         ("layer_norm axis 0", 0, [(256, 1024), (8192, 1024)]),
         ("layer_norm bwd rows", -1, [(256, 1024)]),
     ] for shape in shapes]


@pytest.mark.parametrize("where, label, shape, axis, target", GOAL,
                         ids=[f"{g[0]}: {g[1]} {g[2]}" for g in GOAL])
def test_every_goal_target_is_a_row(where, label, shape, axis, target):
    found = [c for c in getattr(cases, where) if (c.label, c.shape) == (label, shape)]
    assert len(found) == 1, found
    case = found[0]
    assert case.axis == axis
    assert (case.target is None if target is None
            else case.target == pytest.approx(target, rel=1e-12))
    assert case.or_floor == (where == "STREAMING")
    if where != "STREAMING":
        assert case.dtypes == ("float32",)


def test_the_rows_are_the_goals_and_no_others():
    goal = {(w, label, shape) for w, label, shape, _, _ in GOAL}
    have = {(w, c.label, c.shape) for w in ("STREAMING", "SMALL_CALLS", "SCALING")
            for c in getattr(cases, w)}
    assert have == goal
    # layer_norm rows in both dtypes, up to 512 MiB (float64)
    largest = [c for c in cases.STREAMING if c.label == "layer_norm rows"][-1]
    assert set(largest.dtypes) == {"float32", "float64"}
    assert np.prod(largest.shape) * 8 == 512 << 20
    # every small call holds "small call" in its name (--only 'small call'),
    # and no other row does
    assert all("small call" in c.name for c in cases.SMALL_CALLS)
    assert not any("small" in c.name for c in cases.STREAMING + cases.SCALING)


def _distinct(case_list):
    """Cases that build different arrays (SCALING has STREAMING's shapes)."""
    seen = {}
    for c in case_list:
        seen.setdefault((c.op, c.shape, c.axis), c)
    return list(seen.values())


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", _distinct([cases.shrunk(c, 32)
                                            for c in cases.STREAMING + cases.SCALING]),
                         ids=lambda c: c.name)
def test_numpy_code_agrees_with_fastnorm(case, dtype):
    inp = make_inputs(case, dtype, seed=3)
    want = as_tuple(fastnorm_calls.build(inp)())
    error = disagreement(numpy_code.build(inp)(), want)
    assert agrees(error, dtype), error


@pytest.mark.parametrize("case", cases.SMALL_CALLS, ids=lambda c: c.name)
def test_small_calls_run_and_agree_with_numpy(case):
    # As the run builds them: whole shapes (quick runs keep them), allocating.
    inp = make_inputs(case, case.dtypes[0], seed=3)
    got = as_tuple(fastnorm_calls.build(inp, allocate=case.allocating)())
    assert got[0].dtype == np.float32
    error = disagreement(numpy_code.build(inp)(), got)
    assert agrees(error, case.dtypes[0]), error


NUMBA_CASES = ([cases.shrunk(c, 32) for c in cases.STREAMING if not c.allocating]
               + cases.SMALL_CALLS)


def test_numba_code_agrees_with_fastnorm():
    # Only where numba is installed (the comparison's optional rival); each
    # kernel compiles on its first call (a few seconds).  One test for all
    # rows, so that a run without numba skips it once.
    pytest.importorskip("numba")
    from comparison import numba_code
    kernels = numba_code.load()[1]
    for case in NUMBA_CASES:
        for dtype in ("float32", "float64"):
            inp = make_inputs(case, dtype, seed=3)
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


def test_floor_from_made_up_timings():
    # read / copy per repetition: 1/2, 2/2, 3/4, (slow column skipped), 9/10
    # -> median of 0.5, 1.0, 0.75, 0.9 = (0.75 + 0.9) / 2 = 0.825.
    read = [1.0, 2.0, 3.0, None, 9.0]
    copy = [2.0, 2.0, 4.0, 5.0, 10.0]
    r = 0.825
    want = {
        "ONE_PASS": 1.0,               # x read, y written: one copy
        "READ_ONLY": r,                # x read: one read
        "TWO_LOOKS": 1 + r,            # x read twice, y written
        "GRADIENT": 1 + r,             # x, dy read, dx written
        "BATCH_GRADIENT": 1 + 3 * r,   # x, dy read twice each, dx written
    }
    for name, floor in want.items():
        assert stream_floor(getattr(cases, name), read, copy) == pytest.approx(floor), name
    assert stream_floor(cases.GRADIENT, [None], [1.0]) is None
    assert cases.BATCH_GRADIENT.formula() == "1 + 3*read/copy"
    assert cases.READ_ONLY.formula() == "read/copy"
    assert cases.BATCH_GRADIENT.text() == "x 2, dy 2 read; dx written"
    # a row is held to the larger of its target and its floor (or_floor)
    assert bound(1.6, 1 + 3 * r, or_floor=True) == pytest.approx(3.475)
    assert bound(1.6, 1.4, or_floor=True) == 1.6
    assert bound(1.15, 3.0, or_floor=False) == 1.15
    assert bound(1.6, None, or_floor=True) == 1.6


def test_every_gradient_row_has_a_floor_above_one_copy():
    for c in cases.STREAMING:
        if c.op.endswith("_backward"):
            assert c.or_floor and c.looks.copies == 1 and c.looks.extra_reads >= 1, c.name
            assert dict(c.looks.reads).keys() == {"x", "dy"}, c.name


LSCPU = """Architecture:                            x86_64
CPU(s):                                  16
On-line CPU(s) list:                     0-15
Model name:                              Intel(R) Xeon(R) Platinum 8488C
Thread(s) per core:                      2
L1d cache:                               384 KiB (8 instances)
L2 cache:                                16 MiB (8 instances)
L3 cache:                                105 MiB (1 instance)
NUMA node0 CPU(s):                       0-15
"""


def test_machine_summary_keeps_lscpus_lines():
    assert machine.summary(LSCPU) == (
        "Model name: Intel(R) Xeon(R) Platinum 8488C; CPU(s): 16; Thread(s) per core: 2; "
        "L1d cache: 384 KiB (8 instances); L2 cache: 16 MiB (8 instances); "
        "L3 cache: 105 MiB (1 instance) (lscpu)")
    assert machine.summary("no such lines\n").endswith("CPUs (no lscpu)")


def _fake_rows():
    """A result of each kind as measure.py makes them (made-up numbers)."""
    base = {"kind": "streaming", "dtype": "float32", "allocating": False, "or_floor": True,
            "looks": {"read": {"x": 1}, "written": ["y"]}, "skipped": {}}
    return [
        dict(base, case="layer_norm rows", shape=[8192, 1024], target=[1.3, 1.2],
             ratio={1: 0.9, 2: 1.25}, met={1: True, 2: False}, floor={1: 1.0, 2: 1.0},
             bound={1: 1.3, 2: 1.2}, numpy_ms=40.0,
             rivals={"torch": {"ms": {1: 3.0, 2: 1.5}, "speedup": {1: 3.3, 2: 1.2}}},
             lead={1: 3.3, 2: 1.2}, lead_met={1: True, 2: False}),
        dict(base, case="batch_norm bwd (N, C)", shape=[65536, 512], target=[1.6, 1.6],
             looks={"read": {"x": 2, "dy": 2}, "written": ["dx"]},
             ratio={1: 2.0, 2: 2.5}, met={1: True, 2: False}, floor={1: 2.2, 2: 2.35},
             bound={1: 2.2, 2: 2.35}, numpy_ms=300.0, rivals={},
             skipped={"torch": "no code"}),
        {"kind": "streaming", "case": "mean_var columns", "shape": [8192, 1024],
         "dtype": "float64", "error": "ValueError: broken | here"},
        {"kind": "small call", "case": "rms_norm small call", "shape": [32, 768],
         "dtype": "float32", "target": 2.0, "threads": 2, "fastnorm_us": 0.8,
         "copy_us": 0.5, "ratio": 1.6, "met": True,
         "numpy_ms": 0.01, "rivals": {"torch": {"ms": {2: 0.004}, "speedup": {2: 5.0}}},
         "lead": {2: 5.0}, "lead_met": {2: True}},
        {"kind": "small call", "case": "layer_norm small call", "shape": [1, 256],
         "dtype": "float32", "target": None, "threads": 2, "fastnorm_us": 1.2,
         "copy_us": 0.3, "ratio": 4.0, "numpy_ms": 0.012, "rivals": {}},
        {"kind": "scaling", "case": "layer_norm axis 0", "shape": [8192, 1024],
         "dtype": "float32", "target": 1.8, "fastnorm_ms": {1: 4.0, 2: 2.0},
         "speedup": 2.0, "met": True},
    ]


def _table_rows(text):
    """The cells of every Markdown table row but headers and rules."""
    rows = []
    for line in text.splitlines():
        if line.startswith("| ") and not line.startswith("| case |"):
            rows.append([c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]])
    return rows


def test_markdown_report_holds_the_header_and_every_row(tmp_path):
    path = tmp_path / "report.md"
    markdown.write(path, _fake_rows(), {"torch": "2.5.1"},
                   {"jax": "not compared: not installed"})
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    # the date, today in UTC (a run just before midnight may see tomorrow)
    dates = re.findall(r"\d{4}-\d{2}-\d{2}", lines[0])
    assert lines[0].startswith("## ") and len(dates) == 1 and "(UTC)" in lines[0]
    day = datetime.datetime.strptime(dates[0], "%Y-%m-%d").date()
    now = datetime.datetime.now(datetime.timezone.utc).date()
    assert 0 <= (now - day).days <= 1
    machine_line = [ln for ln in lines if ln.startswith("- machine: ")]
    assert len(machine_line) == 1
    if shutil.which("lscpu"):
        assert "(lscpu)" in machine_line[0] and "CPU(s): " in machine_line[0]
    else:
        assert "(no lscpu)" in machine_line[0]
    assert any(ln.startswith("- fastnorm ") for ln in lines)
    assert any("torch 2.5.1" in ln and "jax: not compared" in ln for ln in lines)
    cells = {tuple(r[:3]): r for r in _table_rows(text)}
    assert set(cells) == {("layer_norm rows", "8192x1024", "float32"),
                          ("batch_norm bwd (N, C)", "65536x512", "float32"),
                          ("mean_var columns", "8192x1024", "float64"),
                          ("rms_norm small call", "32x768", "float32"),
                          ("layer_norm small call", "1x256", "float32"),
                          ("layer_norm axis 0", "8192x1024", "float32")}
    # streaming: 1t, 2t (/copy), targets, met, floor, NumPy ms, torch ms
    # 1t/2t, lead 1t/2t
    assert cells["layer_norm rows", "8192x1024", "float32"][3:] == [
        "0.90", "1.25", "1.30/1.20", "NO 2t", "-", "40.00", "3.00/1.50", "3.30/1.20"]
    assert cells["batch_norm bwd (N, C)", "65536x512", "float32"][3:] == [
        "2.00", "2.50", "1.60/1.60", "NO 2t", "2.20/2.35", "300.00", "-", "-"]
    assert "FAILED: ValueError: broken \\| here" in cells[
        "mean_var columns", "8192x1024", "float64"]
    # small call: us, copy us, /copy, target, met, NumPy us, torch us, lead
    assert cells["rms_norm small call", "32x768", "float32"][3:] == [
        "0.80", "0.50", "1.60", "2.00", "yes", "10.0", "4.0", "5.00"]
    # a small call without a target: timed, not judged
    assert cells["layer_norm small call", "1x256", "float32"][3:] == [
        "1.20", "0.30", "4.00", "-", "-", "12.0", "-", "-"]
    # scaling: ms 1t/2t, speed-up, target, met
    assert cells["layer_norm axis 0", "8192x1024", "float32"][3:] == [
        "4.000/2.000", "2.00", "1.80", "yes"]
    assert "floor = W + (R - W) * read/copy" in text
    assert "x 2, dy 2 read; dx written: floor 1 + 3*read/copy: batch_norm bwd (N, C)" in text


def test_summary_names_the_rows_behind_the_fastest_other_library():
    from comparison import report
    lines = report.summary_lines(_fake_rows())
    assert lines[0] == "targets met: 2 of 4 rows; 1 rows failed"
    assert "ahead of the fastest other library by 1.3x or more: 1 of 2 rows" in lines
    assert ("  not ahead: streaming: layer_norm rows 8192x1024 float32: lead 3.30/1.20 < 1.3"
            in lines)
    assert not any(ln.startswith("  not met: small call") for ln in lines)
    assert ("  not met: streaming: layer_norm rows 8192x1024 float32: /copy 0.90/1.25 > "
            "1.30/1.20 (the larger of 1.30/1.20 and the floor) (floor 1.00/1.00)") in lines


def test_the_lead_is_over_the_fastest_library_that_ran():
    from comparison import measure
    row = {"rivals": {"torch": {"speedup": {1: 2.0, 2: 1.1}},
                      "numba": {"speedup": {1: 1.5, 2: None}},
                      "jax": {"error": 0.0}}}
    measure._lead(row, (1, 2))
    assert row["lead"] == {1: 1.5, 2: 1.1}
    assert row["lead_met"] == {1: True, 2: False}
    alone = {"rivals": {}}
    measure._lead(alone, (1, 2))
    assert "lead" not in alone and "lead_met" not in alone


def test_disagreement_is_relative_and_catches_nan():
    a = np.ones(10)
    assert disagreement((a * 1000,), (a * 1000 + 1e-3,)) == pytest.approx(1e-6, rel=1e-4)
    b = a.copy()
    b[3] = np.nan
    assert not agrees(disagreement(b, a), "float64")


def test_quick_run_prints_every_table(tmp_path):
    out, md = tmp_path / "rows.json", tmp_path / "rows.md"
    p = subprocess.run(
        [sys.executable, "-I", COMPARE, "--quick", "--no-rss",
         "--only", "layer_norm rows", "--only", "mean_var columns", "--dtype", "float32",
         "--without", "torch", "--without", "onnxruntime", "--without", "jax",
         "--without", "numba", "--json", str(out), "--markdown", str(md)],
        capture_output=True, text=True, timeout=300, cwd=HERE)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    for title in ("against the copy yardstick", "1 thread against 2", "small calls",
                  "against NumPy and other libraries", "targets met:"):
        assert title in p.stdout
    rows = json.loads(out.read_text())["rows"]
    # every row of the run is a row of the Markdown tables
    table = {tuple(r[:3]) for r in _table_rows(md.read_text(encoding="utf-8"))}
    assert table == {(r["case"], "x".join(map(str, r["shape"])), r["dtype"]) for r in rows}
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


def test_scaling_quick_run_times_every_case_on_each_thread_count(tmp_path):
    out = tmp_path / "scaling.json"
    p = subprocess.run([sys.executable, "-I", os.path.join(BENCHMARKS, "scaling.py"), "--quick",
                        "--threads", "2,3", "--json", str(out)],
                       capture_output=True, text=True, timeout=300, cwd=HERE)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    rows = json.loads(out.read_text())["rows"]
    assert len(rows) == 9 and len({r["case"] for r in rows}) == 9
    for r in rows:
        assert r["case"] in p.stdout
        assert set(r["ms"]) == set(r["speedup"]) == set(r["per_copy"]) == {"1", "2", "3"}
        assert all(v > 0 for v in r["ms"].values()) and r["speedup"]["1"] == 1.0
        assert all(v > 0 for v in r["per_copy"].values())


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
