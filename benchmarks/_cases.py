"""What the asv suite measures: one table, ``OPS``.

Each entry names a public function, the layouts it is timed on (with the
``axis=`` a user passes for that layout) and a builder.  A builder gets a
``Case`` (the input array and its axes) and returns two zero-argument
callables: the fastnorm call, and the NumPy code a user would write for the
same result.  ``bench_fastnorm.py`` turns every entry into three benchmark
classes (fastnorm time, fastnorm peak memory, NumPy time and peak memory),
so adding a function is one ``Op(...)`` line here plus its builder, e.g.::

    def _layer_norm_backward(c):
        fn = c.function("layer_norm_backward")
        g, g_b = c.param(over_reduced=True, base=1.0)
        _, m, rstd = c.function("layer_norm")(c.x, axis=c.axis, eps=EPS, return_stats=True)
        dy = c.like_x(seed=1)

        def numpy():
            ...  # dx, dgamma, dbeta as a NumPy user would write them

        return lambda: fn(dy, c.x, m, rstd, g, axis=c.axis), numpy

    Op("layer_norm_backward", {"rows": -1, "columns": 0}, _layer_norm_backward),

A function that a benchmarked commit does not have is reported as skipped
(n/a) for that commit, so new entries do not break runs over old releases.
"""
import os
from dataclasses import dataclass
from typing import Callable

import numpy as np

EPS = 1e-5
MOMENTUM = 0.1

DTYPES = ("float32", "float64", "float16")
SIZES = ("small", "large")
# "1": one thread; "all": the CPUs this process may use, or OMP_NUM_THREADS
# when that is set (see all_threads()).
THREADS = ("1", "all")

# Shapes per layout and size.  "small" is 65536 values (256 KiB in float32:
# in cache, call overhead shows); "large" is 4 Mi values (16 MiB in float32,
# 32 MiB in float64, 8 MiB in float16: memory-bound).
SHAPES = {
    "rows": {"small": (256, 256), "large": (4096, 1024)},
    "columns": {"small": (256, 256), "large": (4096, 1024)},
    "NCHW": {"small": (4, 16, 32, 32), "large": (16, 64, 64, 64)},
    "NHWC": {"small": (4, 32, 32, 16), "large": (16, 64, 64, 64)},
}
# "rows" and "columns" are the same C-order 2-D arrays, reduced over the last
# axis (the contiguous one) or over axis 0 (the kept axis is contiguous).
# NCHW and NHWC are C-order 4-D arrays; channels are axis 1 or axis 3.


def all_axes(ndim):
    return tuple(range(ndim))


def all_but_1(ndim):
    """batch_norm's default: every axis but the channels (axis 1)."""
    return tuple(a for a in range(ndim) if a != 1)


@dataclass(frozen=True)
class Op:
    name: str            # benchmark name (the class names are made from it)
    layouts: dict        # layout name -> the axis= argument passed for it
    build: Callable      # Case -> (fastnorm callable, NumPy callable)
    default_axes: Callable = all_axes   # reduced axes for axis=None, from x.ndim


def data_file(layout, size, dtype):
    """File name of one input array in the setup_cache directory."""
    shape = SHAPES[layout][size]
    return f"x_{'x'.join(map(str, shape))}_{dtype}.npy"


def write_inputs(directory="."):
    """Write every input array once (asv setup_cache); returns their names.
    Values are standard normal with a common offset, made in float64 and
    rounded to each dtype; the same shape gets the same values in every run."""
    names = {}
    for layout, sizes in SHAPES.items():
        for size, shape in sizes.items():
            seed = int(np.prod(shape)) + len(shape)
            base = None
            for dtype in DTYPES:
                name = data_file(layout, size, dtype)
                names[layout, size, dtype] = name
                path = os.path.join(directory, name)
                if os.path.exists(path):
                    continue
                if base is None:
                    base = 1.0 + np.random.default_rng(seed).standard_normal(shape)
                np.save(path, base.astype(dtype))
    return names


def all_threads():
    """Thread count of the "all" parameter."""
    env = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    if env.isdigit() and int(env) > 0:
        return int(env)
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


class Case:
    """One benchmark point: the input array, the axis= argument, and the
    reduced axes as a tuple (for the NumPy side)."""

    def __init__(self, x, axis, default_reduced):
        self.x = x
        self.axis = axis
        if axis is None:
            reduced = default_reduced(x.ndim)
        elif isinstance(axis, int):
            reduced = (axis % x.ndim,)
        else:
            reduced = tuple(a % x.ndim for a in axis)
        self.reduced = reduced
        self.missing = []

    def function(self, name):
        """The fastnorm function `name`.  On a commit that does not have it,
        a stand-in that raises NotImplementedError, and `missing` names it:
        the fastnorm benchmark is then skipped (n/a) while the NumPy one
        still runs."""
        import fastnorm
        fn = getattr(fastnorm, name, None)
        if fn is None:
            self.missing.append(name)

            def fn(*args, **kwargs):
                raise NotImplementedError(f"fastnorm.{name} does not exist in this version")
        return fn

    def like_x(self, seed=1):
        """Another array of x's shape and dtype (e.g. a gradient dy)."""
        rng = np.random.default_rng(seed)
        return rng.standard_normal(self.x.shape).astype(self.x.dtype)

    def param(self, *, over_reduced, base, spread=0.1, dtype=None, seed=2):
        """A parameter as fastnorm takes it (normalized shape when
        over_reduced, else kept shape) and the same values as NumPy
        broadcasting needs them (size-1 axes in place of the others)."""
        x = self.x
        own = [(i in self.reduced) == over_reduced for i in range(x.ndim)]
        shape = tuple(s for s, b in zip(x.shape, own) if b)
        bshape = tuple(s if b else 1 for s, b in zip(x.shape, own))
        rng = np.random.default_rng(seed)
        p = (base + spread * rng.standard_normal(shape)).astype(dtype or x.dtype)
        return p, p.reshape(bshape)


# ------------------------------------------------------------------ builders
#
# The NumPy side is what a careful user writes: float16 statistics are taken
# in float32 (dtype=, as fastnorm accumulates in higher precision; np.var in
# float16 overflows on the large arrays) and the result is cast back to x's
# dtype.

def _acc(x):
    return np.float32 if x.dtype == np.float16 else None


def _mean_var(c):
    fn = c.function("mean_var")
    x, axis, red, acc = c.x, c.axis, c.reduced, _acc(c.x)
    return (lambda: fn(x, axis=axis),
            lambda: (np.mean(x, axis=red, dtype=acc), np.var(x, axis=red, dtype=acc)))


def _layer_norm(c):
    fn = c.function("layer_norm")
    x, axis, red, acc = c.x, c.axis, c.reduced, _acc(c.x)
    g, g_b = c.param(over_reduced=True, base=1.0, seed=2)
    b, b_b = c.param(over_reduced=True, base=0.0, seed=3)

    def numpy():
        m = x.mean(red, dtype=acc, keepdims=True)
        v = x.var(red, dtype=acc, keepdims=True)
        return ((x - m) / np.sqrt(v + EPS) * g_b + b_b).astype(x.dtype, copy=False)

    return lambda: fn(x, g, b, axis=axis, eps=EPS), numpy


def _rms_norm(c):
    fn = c.function("rms_norm")
    x, axis, red, acc = c.x, c.axis, c.reduced, _acc(c.x)
    g, g_b = c.param(over_reduced=True, base=1.0)

    def numpy():
        ms = np.mean(np.square(x, dtype=acc), axis=red, keepdims=True)
        return (x / np.sqrt(ms + EPS) * g_b).astype(x.dtype, copy=False)

    return lambda: fn(x, g, axis=axis, eps=EPS), numpy


def _batch_norm_train(c):
    fn = c.function("batch_norm")
    x, axis, red, acc = c.x, c.axis, c.reduced, _acc(c.x)
    g, g_b = c.param(over_reduced=False, base=1.0, seed=2)
    b, b_b = c.param(over_reduced=False, base=0.0, seed=3)
    # running statistics in float32, updated in place by both sides
    rm, rm_b = c.param(over_reduced=False, base=0.0, dtype=np.float32, seed=4)
    rv, rv_b = c.param(over_reduced=False, base=1.0, dtype=np.float32, seed=5)
    n = int(np.prod([x.shape[a] for a in red]))

    def numpy():
        m = x.mean(red, dtype=acc, keepdims=True)
        v = x.var(red, dtype=acc, keepdims=True)
        rm_b[...] = (1 - MOMENTUM) * rm_b + MOMENTUM * m
        rv_b[...] = (1 - MOMENTUM) * rv_b + MOMENTUM * v * (n / (n - 1))
        return ((x - m) / np.sqrt(v + EPS) * g_b + b_b).astype(x.dtype, copy=False)

    return (lambda: fn(x, g, b, rm, rv, training=True, momentum=MOMENTUM, eps=EPS, axis=axis),
            numpy)


def _batch_norm_eval(c):
    fn = c.function("batch_norm")
    x, axis = c.x, c.axis
    g, g_b = c.param(over_reduced=False, base=1.0, seed=2)
    b, b_b = c.param(over_reduced=False, base=0.0, seed=3)
    rm, rm_b = c.param(over_reduced=False, base=0.0, dtype=np.float32, seed=4)
    rv, rv_b = c.param(over_reduced=False, base=1.0, dtype=np.float32, seed=5)

    def numpy():
        return ((x - rm_b) / np.sqrt(rv_b + EPS) * g_b + b_b).astype(x.dtype, copy=False)

    return (lambda: fn(x, g, b, rm, rv, training=False, eps=EPS, axis=axis),
            numpy)


# ---------------------------------------------------------------- the table

OPS = [
    Op("mean_var", {"rows": -1, "columns": 0, "NCHW": (0, 2, 3), "NHWC": (0, 1, 2)}, _mean_var),
    Op("layer_norm", {"rows": -1, "columns": 0, "NCHW": (1, 2, 3)}, _layer_norm),
    Op("rms_norm", {"rows": -1, "columns": 0}, _rms_norm),
    Op("batch_norm", {"columns": None, "NCHW": None, "NHWC": (0, 1, 2)}, _batch_norm_train,
       all_but_1),
    Op("batch_norm_eval", {"NCHW": None, "NHWC": (0, 1, 2)}, _batch_norm_eval, all_but_1),
]
