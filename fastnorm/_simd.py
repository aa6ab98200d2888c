"""Pick the kernel module built for the best instruction set this CPU has.

The same Cython source is compiled once per level.  ``FASTNORM_SIMD``
(``baseline``, ``avx2`` or ``avx512``) caps the choice at import, e.g. to
run a lower level on a machine that has a higher one; ``use(level)`` does the
same at run time (tests run every level this way).
"""
import contextlib
import os
from importlib import import_module
from importlib.util import find_spec

# Best first; each is a module fastnorm._kernels_<level>.
LEVELS = ("avx512", "avx2", "baseline")
_REQUIRES = {"avx512": "x86-64-v4", "avx2": "x86-64-v3", "baseline": None}


def built_levels():
    """The levels compiled into this installation."""
    return [lv for lv in LEVELS if find_spec(f"fastnorm._kernels_{lv}") is not None]


def available_levels():
    """The built levels this CPU supports, best first."""
    try:
        baseline = import_module("fastnorm._kernels_baseline")
    except ImportError as e:
        here = os.path.dirname(os.path.abspath(__file__))
        raise ImportError(
            f"fastnorm's compiled kernels are missing from {here}. If that is a source "
            "checkout, Python found it before the installed package (the current "
            "directory comes first on sys.path): run from another directory or with "
            "`python -I`, or install in editable mode (see README.md).") from e
    features = baseline.cpu_features()
    return [lv for lv in built_levels()
            if _REQUIRES[lv] is None or features.get(_REQUIRES[lv], False)]


def _level(level):
    """`level`, checked, or the best available one (capped by FASTNORM_SIMD)."""
    levels = available_levels()
    if level is None:
        cap = os.environ.get("FASTNORM_SIMD", "").strip().lower()
        if cap and cap not in LEVELS:
            raise ImportError(f"FASTNORM_SIMD={cap!r} is not one of {', '.join(LEVELS)}")
        start = LEVELS.index(cap) if cap else 0
        return next(lv for lv in LEVELS[start:] if lv in levels)
    if level not in levels:
        raise ValueError(f"SIMD level {level!r} is not available here "
                         f"(available: {', '.join(levels)})")
    return level


def load(level=None):
    """The kernel module for `level` (default: the best available)."""
    return import_module(f"fastnorm._kernels_{_level(level)}")


kernels = load()
backward = kernels      # the gradients live in the same module


@contextlib.contextmanager
def use(level):
    """Run the enclosed calls on the kernels of `level` (process-wide)."""
    global kernels, backward
    previous = kernels, backward
    kernels = backward = load(level)
    try:
        yield kernels
    finally:
        kernels, backward = previous
