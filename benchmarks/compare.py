"""The full comparison in one command (the same as ``python -m fastnorm --full``):

    python benchmarks/compare.py [--json PATH] [--quick] [--only TEXT] ...

Every row of the performance goal: fastnorm against a copy of the same bytes
with 1 and 2 threads, against the NumPy code a user would write and, where
installed (``pip install '.[compare]'``), against PyTorch, ONNX Runtime and
JAX; then the peak memory of every public call.  ``--help`` lists the options.

Not an asv benchmark: asv imports this module and finds nothing to time.
"""
import sys


def main(argv=None):
    # Imported here: asv imports this file on commits that predate the module.
    from fastnorm._compare import main as compare
    return compare(argv)


if __name__ == "__main__":
    sys.exit(main())
