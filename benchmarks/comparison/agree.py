"""Whether another library computed the same thing as fastnorm: checked once
per row before timing, so the comparison is between equal results."""
import numpy as np

# Outputs are compared relative to max(1, max |fastnorm's output|): the
# normalized outputs are O(1), the parameter gradients sums of thousands of
# terms.  Honest float32 results (float32 sums, other summation orders)
# agree to ~1e-5 of that; float64 ones to ~1e-12.
TOLERANCE = {np.dtype(np.float32): 1e-3, np.dtype(np.float64): 1e-8}

_CHUNK = 1 << 22   # elements: no temporary of the outputs' size


def as_tuple(result):
    return result if isinstance(result, tuple) else (result,)


def _scaled_error(got, want):
    got, want = np.ravel(np.asarray(got)), np.ravel(np.asarray(want))
    if got.size != want.size:
        return float("inf")
    worst = scale = 0.0
    for lo in range(0, want.size, _CHUNK):
        w = want[lo:lo + _CHUNK]
        diff = float(np.abs(got[lo:lo + _CHUNK] - w).max(initial=0.0))
        if np.isnan(diff):   # Python's max() would drop it
            return diff
        worst = max(worst, diff)
        scale = max(scale, float(np.abs(w).max(initial=0.0)))
    return worst / max(1.0, scale)


def disagreement(got, want):
    """Largest relative difference between the outputs (as many as fastnorm
    returns; extra ones of the other library, such as updated running
    statistics, are not compared).  NaN propagates: NaN never agrees."""
    errors = [_scaled_error(g, w) for g, w in zip(as_tuple(got), as_tuple(want))]
    if any(np.isnan(e) for e in errors):
        return float("nan")
    return max(errors)


def agrees(error, dtype):
    return error <= TOLERANCE[np.dtype(dtype)]   # False for NaN
