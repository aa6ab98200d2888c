"""The route a call takes, in fastnorm.explain's words, for the tests that
aim at one: a test that means to reach a way through the kernels says so,
and fails when a change to the planner moves its call elsewhere."""
import contextlib
from unittest import mock

import numpy as np

import fastnorm
from fastnorm import _missing, _simd

# Calls on x up to this many bytes split their work statically, larger
# ones guided or dynamic: tests take either side.
SAME_SPLIT = _simd.kernels.tuning()["same_split_bytes"]


def route(func, *args, **kwargs):
    """explain's dict for func(*args, **kwargs) on the current thread count."""
    return fastnorm.explain(func, *args, **kwargs)


def assert_route(expected, func, *args, **kwargs):
    """Every key of `expected` has its value in explain(func, *args,
    **kwargs); returns the whole dict."""
    got = route(func, *args, **kwargs)
    wrong = {k: (got.get(k), v) for k, v in expected.items() if got.get(k) != v}
    assert not wrong, (f"{getattr(func, '__name__', func)} takes another route: "
                       + ", ".join(f"{k} is {g!r}, not {v!r}" for k, (g, v) in wrong.items())
                       + f" (explain: {got})")
    return got


def schedule(func, *args, **kwargs):
    """'pattern/schedule' of the call, e.g. 'slices/rows'."""
    r = route(func, *args, **kwargs)
    return f"{r['pattern']}/{r['schedule']}"


def rows_x(rows, cols, dtype, seed=0):
    """C-ordered rows of values around 3."""
    rng = np.random.default_rng(seed)
    return (3.0 + rng.standard_normal((rows, cols)) * 2).astype(dtype)


def rows_for(nbytes, cols, dtype):
    """Rows of `cols` values that take just over nbytes."""
    return nbytes // (cols * np.dtype(dtype).itemsize) + 1


@contextlib.contextmanager
def nan_probe(whole):
    """whole: nan_in_most ("omit") probes all of any x, so that small
    arrays whose slices mostly hold a NaN take the route big ones take
    (their statistics in one pass that leaves NaN out); else as shipped."""
    if not whole:
        yield
        return
    with mock.patch.object(_missing, "PROBE_SHARE", 1), \
            mock.patch.object(_missing, "PROBE_MIN_BYTES", 0):
        yield
