"""The full comparison in one command, from the repository root:

    python benchmarks/compare.py [--json PATH] [--quick] [--only TEXT] ...

Every row of the performance goal: fastnorm against a copy of the same bytes
with 1 and 2 threads, against the NumPy code a user would write and, where
installed (``pip install '.[compare]'``), against PyTorch, ONNX Runtime,
JAX and numba; then the peak memory of every public call.  ``--help`` lists
the options.  It measures the fastnorm installed in the Python that runs it; the code is
the package ``comparison`` beside this file.

Not an asv benchmark: asv imports this module and finds nothing to time.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def main(argv=None):
    # The package beside this file, also under ``python -I`` (which leaves the
    # script's folder off sys.path); imported here, not when asv imports
    # this module as benchmarks.compare.
    if HERE not in sys.path:
        sys.path.insert(0, HERE)
    from comparison import main as compare
    return compare(argv)


if __name__ == "__main__":
    sys.exit(main())
