"""The full comparison (python -m fastnorm --full): its NumPy code computes
what fastnorm computes, its copy yardstick copies, and a quick run prints
every table and writes its JSON, with or without the other libraries."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from fastnorm._compare import cases, fastnorm_calls, numpy_code
from fastnorm._compare.agree import agrees, as_tuple, disagreement
from fastnorm._compare.inputs import make_inputs
from fastnorm._compare.yardstick import allocating_copy, copy_into, read_once

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", cases.STREAMING + cases.SCALING, ids=lambda c: c.name)
def test_numpy_code_agrees_with_fastnorm(case, dtype):
    inp = make_inputs(cases.shrunk(case, 32), dtype, seed=3)
    want = as_tuple(fastnorm_calls.build(inp)())
    error = disagreement(numpy_code.build(inp)(), want)
    assert agrees(error, dtype), error


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
        [sys.executable, "-m", "fastnorm", "--full", "--quick", "--no-rss",
         "--only", "layer_norm rows", "--only", "mean_var columns", "--dtype", "float32",
         "--without", "torch", "--without", "onnxruntime", "--without", "jax",
         "--json", str(out)],
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
