"""Pick the kernel module built for the best instruction set this CPU has.

The same Cython source is compiled once per level; ``FASTNORM_SIMD``
(``baseline``, ``avx2`` or ``avx512``) caps the choice, e.g. to test a lower
level on a machine that has a higher one.
"""
import os
from importlib import import_module

# Best first; each name is a module fastnorm._kernels_<name>.
LEVELS = ("avx512", "avx2", "baseline")
_REQUIRES = {"avx512": "x86-64-v4", "avx2": "x86-64-v3", "baseline": None}


def available_levels():
    """The levels that are both built into this wheel and supported here."""
    base = import_module("fastnorm._kernels_baseline")
    features = base.cpu_features()
    found = []
    for level in LEVELS:
        need = _REQUIRES[level]
        if need is not None and not features.get(need, False):
            continue
        try:
            import_module(f"fastnorm._kernels_{level}")
        except ImportError:
            continue
        found.append(level)
    return found


def load(level=None):
    """The kernel module for `level`, or the best available one."""
    levels = available_levels()
    if level is None:
        level = os.environ.get("FASTNORM_SIMD", "").strip().lower() or levels[0]
        if level not in LEVELS:
            raise ImportError(
                f"FASTNORM_SIMD={level!r} is not one of {', '.join(LEVELS)}")
        # A requested level caps the choice; fall back below it if needed.
        level = next((lv for lv in LEVELS[LEVELS.index(level):] if lv in levels),
                     "baseline")
    elif level not in levels:
        raise ValueError(f"SIMD level {level!r} is not available here "
                         f"(available: {', '.join(levels)})")
    return import_module(f"fastnorm._kernels_{level}")
