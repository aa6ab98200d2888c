"""The full comparison, run by ``python benchmarks/compare.py``: every row
of the performance goal, fastnorm against a copy of the same bytes with 1
and 2 threads (and a read of them, for each row's floor), against the NumPy
code a user would write and, where installed, against PyTorch, ONNX Runtime,
JAX and numba; then the peak memory of every public call.

It is not part of the installed package: it measures an installed fastnorm
through its public functions alone.  asv imports every module here while
looking for benchmarks, so none imports the other libraries at import time
and none defines a name asv would take for a benchmark.

One job per module:

* cases: the rows, their targets and their stream models
* floor: the stream model's floor of a row, from the copy and the read
* inputs: the arrays of a row, the same in every process
* fastnorm_calls, numpy_code, torch_code, ort_code, jax_code, numba_code: each
  side's code
* yardstick: the copy and the read of x with n threads
* agree: whether two results are the same computation
* timing: interleaved repetitions, medians, per-repetition ratios
* rivals: the optional libraries, loaded or skipped with the reason
* jax_worker: JAX in processes of their own (XLA's thread count is per process)
* measure: one row of each kind, measured
* report: the tables
* markdown: the tables as Markdown, with the date, machine and versions
* machine: the machine in one line (lscpu)
* peak_rss: peak memory of each call in a fresh process
* console: the progress bar, the text tables' layout, the load average
* cli: the command line
"""
from .cli import main

__all__ = ["main"]
