"""No temporaries the size of the input: each call, in a fresh process on a
64 MB input, raises the peak resident set size by its outputs and at most a
few MB more (benchmarks/comparison/peak_rss.py; the full comparison runs
every public call on 256 MB)."""
import json
import os
import sys

import pytest

BENCHMARKS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                          "benchmarks")
if not os.path.isdir(os.path.join(BENCHMARKS, "comparison")):
    pytest.skip("benchmarks/ is not here (an sdist leaves it out)", allow_module_level=True)

LIMIT = 8 << 20   # bytes beyond the outputs
SIZE = 64 << 20

CALLS = ["layer_norm rows", "layer_norm axis 0", "mean_var columns", "batch_norm NHWC",
         "group_norm NCHW", "layer_norm_backward rows", "batch_norm_backward NCHW",
         "layer_norm rows omit", "mean_var columns omit", "zscore columns omit"]


@pytest.mark.skipif(not sys.platform.startswith("linux"),
                    reason="reads the peak from /proc/self/status (VmHWM)")
@pytest.mark.parametrize("name", CALLS)
def test_peak_memory_is_output_plus_a_few_mb(run_python, name):
    p = run_python("import json, sys\n"
                   f"sys.path.insert(0, {BENCHMARKS!r})\n"
                   "from comparison.peak_rss import measure\n"
                   f"print(json.dumps(measure({name!r}, {SIZE})))")
    assert p.returncode == 0, p.stderr[-3000:]
    r = json.loads(p.stdout.splitlines()[-1])
    assert r["input_bytes"] == SIZE
    # The measurement sees the call at all: the output's pages are in the peak.
    assert r["growth_bytes"] >= 0.9 * r["output_bytes"], r
    assert r["extra_bytes"] <= LIMIT, (
        f"{name}: peak grew by {r['growth_bytes'] / 2**20:.1f} MB for "
        f"{r['output_bytes'] / 2**20:.1f} MB of output")
