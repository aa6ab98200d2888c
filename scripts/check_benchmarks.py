"""Check the asv suite's table without asv, in a few seconds.

For every entry of benchmarks/_cases.py, every layout and dtype, on the small
arrays: the builder runs, the fastnorm call and the NumPy baseline both run,
and they agree (so a benchmark cannot silently time a different computation
from its baseline).  Exits non-zero on the first kind of failure, listing all
failing cases.

Run it with the Python that has fastnorm installed, from anywhere:

    python -I scripts/check_benchmarks.py

(-I keeps the current directory off sys.path: in the repository root the
source folder fastnorm/ would shadow the installed package.)
"""
import os
import sys
import traceback

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "benchmarks"))
import _cases  # noqa: E402  (benchmarks/_cases.py, without the repository root on sys.path)

# float64 cases with float32 running statistics round those in float32 on the
# NumPy side (eps is added in float32), hence 1e-6 rather than ~1e-12.
TOL = {"float16": 2e-2, "float32": 2e-4, "float64": 1e-6}


def _arrays(result):
    return list(result) if isinstance(result, tuple) else [result]


def main():
    import fastnorm
    print(f"fastnorm {fastnorm.__version__} from {os.path.dirname(fastnorm.__file__)}")
    failures, n = [], 0
    for op in _cases.OPS:
        for layout, axis in op.layouts.items():
            for dtype in _cases.DTYPES:
                shape = _cases.SHAPES[layout]["small"]
                label = f"{op.name} {layout} {dtype} {shape}"
                n += 1
                try:
                    x = _cases.make_input(shape, dtype)
                    case = _cases.Case(x, axis, op.default_axes)
                    fast, ref = op.build(case)
                    if case.missing:
                        raise AssertionError(f"missing in fastnorm: {case.missing}")
                    got, want = _arrays(fast()), _arrays(ref())
                    if len(got) != len(want):
                        raise AssertionError(f"{len(got)} results vs {len(want)} from NumPy")
                    for g, w in zip(got, want):
                        g, w = np.asarray(g, np.float64), np.asarray(w, np.float64)
                        if g.shape != w.shape:
                            raise AssertionError(f"shape {g.shape} vs NumPy's {w.shape}")
                        err = np.max(np.abs(g - w) / (1.0 + np.abs(w)), initial=0.0)
                        if not err <= TOL[dtype]:
                            raise AssertionError(f"differs from NumPy by {err:.3g} > {TOL[dtype]}")
                except Exception:
                    failures.append(f"{label}:\n{traceback.format_exc()}")
    if failures:
        print(f"{len(failures)} of {n} benchmark cases FAILED:\n\n" + "\n".join(failures))
        return 1
    print(f"all {n} benchmark cases run and agree with their NumPy baselines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
