"""What the asv suite measures: one table, ``OPS``.

Each entry names a public function, the layouts it is timed on (with the
layout's argument: ``axis=`` for most functions, ``channel_axis=`` for
group/instance norm) and a builder.  A builder gets a ``Case`` (the input
array, that argument, the reduced axes) and returns two zero-argument
callables: the fastnorm call, and the NumPy code a user would write for the
same result.  ``bench_fastnorm.py`` turns every entry into four benchmark
classes (fastnorm time and peak memory, NumPy time and peak memory), so
adding a function is one ``Op(...)`` line in ``OPS`` plus its builder; the
``layer_norm_backward`` entry is an example:

    def _layer_norm_backward(c):
        fn = c.function("layer_norm_backward")      # n/a on commits without it
        g, g_b = c.param(c.reduced, base=1.0)       # gamma, and gamma for broadcasting
        m, rstd = c.stats()                         # forward statistics, keepdims
        dy = c.like_x()
        return (lambda: fn(dy, c.x, m, rstd, g, axis=c.axis),
                lambda: <the same gradients written with NumPy>)

    Op("layer_norm_backward", {"rows": -1, "columns": 0}, _layer_norm_backward),

A function that a benchmarked commit does not have is reported as skipped
(n/a) for that commit, so new entries do not break runs over old releases.
``python -I scripts/check_benchmarks.py`` checks every entry against its
NumPy baseline in a few seconds.
"""
import os
from dataclasses import dataclass
from typing import Callable

import numpy as np

EPS = 1e-5
MOMENTUM = 0.1
GROUPS = 8   # group_norm's num_groups: divides every channel count below

DTYPES = ("float32", "float64", "float16")
SIZES = ("small", "large")
# "1": one thread; "all": the CPUs this process may use, or OMP_NUM_THREADS
# when that is set (see all_threads()).
THREADS = ("1", "all")

# Shapes per layout and size, all C order.  "small" is 65536 values (256 KiB
# in float32: in cache, call overhead shows); "large" is 4 Mi values (16 MiB
# in float32, 32 MiB in float64, 8 MiB in float16: memory bound).
SHAPES = {
    # 2-D, reduced over the last axis (contiguous slices) ...
    "rows": {"small": (256, 256), "large": (4096, 1024)},
    # ... in short rows (a few features per sample)
    "rows16": {"small": (4096, 16), "large": (262144, 16)},
    "rows32": {"small": (2048, 32), "large": (131072, 32)},
    # ... or over axis 0 (the kept axis is the contiguous one; (N, C) batch norm)
    "columns": {"small": (256, 256), "large": (4096, 1024)},
    # images, channels on axis 1 or axis 3
    "NCHW": {"small": (4, 16, 32, 32), "large": (16, 64, 64, 64)},
    "NHWC": {"small": (4, 32, 32, 16), "large": (16, 64, 64, 64)},
    # images of a network's last stages: 7x7 maps, channels on axis 1
    "NCHW7x7": {"small": (20, 64, 7, 7), "large": (256, 320, 7, 7)},
    # convolution weights (out, in, kh, kw), one statistic per output channel
    "OIHW": {"small": (64, 64, 4, 4), "large": (512, 512, 4, 4)},
}


def all_axes(ndim):
    return tuple(range(ndim))


def all_but_0(ndim):
    """weight_norm's and weight_standardize's default: one statistic per row
    (output unit)."""
    return tuple(range(1, ndim))


def all_but_1(ndim):
    """batch_norm's default: every axis but the channels (axis 1)."""
    return tuple(a for a in range(ndim) if a != 1)


@dataclass(frozen=True)
class Op:
    name: str            # benchmark name (the class names are made from it)
    layouts: dict        # layout name -> the builder's argument (Case.axis) for it
    build: Callable      # Case -> (fastnorm callable, NumPy callable)
    default_axes: Callable = all_axes   # Case.reduced when the argument is None


def data_file(layout, size, dtype):
    """File name of one input array in the setup_cache directory."""
    shape = SHAPES[layout][size]
    return f"x_{'x'.join(map(str, shape))}_{dtype}.npy"


def make_input(shape, dtype):
    """Input values: 1 + standard normal, made in float64 and rounded to
    dtype; the same shape gets the same values in every run."""
    rng = np.random.default_rng(int(np.prod(shape)) + len(shape))
    return (1.0 + rng.standard_normal(shape)).astype(dtype)


def write_inputs(directory="."):
    """Write every input array once (asv setup_cache); returns
    {(layout, size, dtype): file name}."""
    names = {}
    for layout, sizes in SHAPES.items():
        for size, shape in sizes.items():
            for dtype in DTYPES:
                name = data_file(layout, size, dtype)
                names[layout, size, dtype] = name
                path = os.path.join(directory, name)
                if not os.path.exists(path):
                    np.save(path, make_input(shape, dtype))
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
    """One benchmark point: the input ``x``, the layout's argument ``axis``
    (as the user passes it), and ``reduced``/``kept``, x's axes as tuples
    (``axis`` resolved, None meaning the op's default)."""

    def __init__(self, x, axis, default_axes=all_axes):
        self.x = x
        self.axis = axis
        if axis is None:
            reduced = default_axes(x.ndim)
        elif isinstance(axis, int):
            reduced = (axis % x.ndim,)
        else:
            reduced = tuple(a % x.ndim for a in axis)
        self.reduced = reduced
        self.kept = tuple(a for a in range(x.ndim) if a not in reduced)
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
        """Another array of x's shape and dtype, standard normal (e.g. a
        gradient dy), made in chunks so that no x-sized temporary raises
        the peak memory that peakmem benchmarks measure."""
        rng = np.random.default_rng(seed)
        a = np.empty(self.x.shape, self.x.dtype)
        flat = a.reshape(-1)
        for i in range(0, flat.size, 1 << 16):
            part = flat[i:i + (1 << 16)]
            part[...] = rng.standard_normal(part.size)
        return a

    def stats(self, axes=None, view=None):
        """mean and rstd = 1/sqrt(var + EPS) of x (or of `view`, a view of
        x) over `axes` (default: reduced), in keepdims layout and in the
        dtype fastnorm's forward functions return them (float32 for
        float16/float32, float64 for float64); computed with NumPy."""
        v = self.x if view is None else view
        axes = self.reduced if axes is None else axes
        sdt = np.float64 if v.dtype == np.float64 else np.float32
        m = v.mean(axes, dtype=np.float64, keepdims=True)
        var = v.var(axes, dtype=np.float64, keepdims=True)
        return m.astype(sdt), (1 / np.sqrt(var + EPS)).astype(sdt)

    def param(self, axes, *, base, spread=0.1, dtype=None, seed=2):
        """A parameter spanning x's `axes`, as fastnorm takes it (shape
        ``x.shape`` over `axes`) and the same values as NumPy broadcasting
        needs them (size-1 axes in place of the others).  x's dtype unless
        `dtype` is given."""
        x = self.x
        shape = tuple(x.shape[a] for a in axes)
        bshape = tuple(s if i in axes else 1 for i, s in enumerate(x.shape))
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


def _zscore(c):
    fn = c.function("zscore")
    x, axis, red, acc = c.x, c.axis, c.reduced, _acc(c.x)

    def numpy():
        # SciPy's formula: the mean, the standard deviation, then the scores.
        m = x.mean(red, dtype=acc, keepdims=True)
        return ((x - m) / x.std(red, dtype=acc, keepdims=True)).astype(x.dtype, copy=False)

    return lambda: fn(x, axis), numpy


def _moments(c):
    """Moments fed x in 16 chunks along its first reduced axis; NumPy: the
    running sums a user keeps (count, sum, sum of squares in float64)."""
    cls = c.function("Moments")
    x, axis, red = c.x, c.axis, c.reduced
    chunks = np.array_split(x, 16, axis=red[0])

    def fast():
        m = cls(axis)
        for part in chunks:
            m.update(part)
        return m.mean, m.var()

    def numpy():
        n, s, q = 0, 0.0, 0.0
        for part in chunks:
            n += np.prod([part.shape[i] for i in red])
            s = s + part.sum(red, dtype=np.float64)
            q = q + np.square(part, dtype=np.float64).sum(red)
        return s / n, q / n - (s / n) ** 2

    return fast, numpy


def _layer_norm(c):
    fn = c.function("layer_norm")
    x, axis, red, acc = c.x, c.axis, c.reduced, _acc(c.x)
    g, g_b = c.param(red, base=1.0, seed=2)
    b, b_b = c.param(red, base=0.0, seed=3)

    def numpy():
        m = x.mean(red, dtype=acc, keepdims=True)
        v = x.var(red, dtype=acc, keepdims=True)
        return ((x - m) / np.sqrt(v + EPS) * g_b + b_b).astype(x.dtype, copy=False)

    return lambda: fn(x, g, b, axis=axis, eps=EPS), numpy


def _rms_norm(c):
    fn = c.function("rms_norm")
    x, axis, red, acc = c.x, c.axis, c.reduced, _acc(c.x)
    g, g_b = c.param(red, base=1.0)

    def numpy():
        ms = np.mean(np.square(x, dtype=acc), axis=red, keepdims=True)
        return (x / np.sqrt(ms + EPS) * g_b).astype(x.dtype, copy=False)

    return lambda: fn(x, g, axis=axis, eps=EPS), numpy


def _batch_norm_train(c):
    fn = c.function("batch_norm")
    x, axis, red, acc = c.x, c.axis, c.reduced, _acc(c.x)
    g, g_b = c.param(c.kept, base=1.0, seed=2)
    b, b_b = c.param(c.kept, base=0.0, seed=3)
    # running statistics in float32, updated in place by both sides
    rm, rm_b = c.param(c.kept, base=0.0, dtype=np.float32, seed=4)
    rv, rv_b = c.param(c.kept, base=1.0, dtype=np.float32, seed=5)
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
    g, g_b = c.param(c.kept, base=1.0, seed=2)
    b, b_b = c.param(c.kept, base=0.0, seed=3)
    rm, rm_b = c.param(c.kept, base=0.0, dtype=np.float32, seed=4)
    rv, rv_b = c.param(c.kept, base=1.0, dtype=np.float32, seed=5)

    def numpy():
        return ((x - rm_b) / np.sqrt(rv_b + EPS) * g_b + b_b).astype(x.dtype, copy=False)

    return (lambda: fn(x, g, b, rm, rv, training=False, eps=EPS, axis=axis),
            numpy)


def _grouped(c, groups):
    """Group norm's NumPy side: x's channel axis split into (groups,
    channels per group) (a view), statistics over the group's channels and
    every axis but 0 and the group axis."""
    x, ch, acc = c.x, c.axis % c.x.ndim, _acc(c.x)
    g, g_b = c.param((ch,), base=1.0, seed=2)
    b, b_b = c.param((ch,), base=0.0, seed=3)
    split = x.shape[:ch] + (groups, x.shape[ch] // groups) + x.shape[ch + 1:]
    red = tuple(a for a in range(1, x.ndim + 1) if a != ch)

    def numpy():
        xs = x.reshape(split)
        m = xs.mean(red, dtype=acc, keepdims=True)
        v = xs.var(red, dtype=acc, keepdims=True)
        y = ((xs - m) / np.sqrt(v + EPS)).reshape(x.shape)
        return (y * g_b + b_b).astype(x.dtype, copy=False)

    return g, b, numpy


def _group_norm(c):
    fn = c.function("group_norm")
    g, b, numpy = _grouped(c, GROUPS)
    x, ch = c.x, c.axis
    return lambda: fn(x, GROUPS, g, b, channel_axis=ch, eps=EPS), numpy


def _instance_norm(c):
    fn = c.function("instance_norm")
    g, b, numpy = _grouped(c, c.x.shape[c.axis])
    x, ch = c.x, c.axis
    return lambda: fn(x, g, b, channel_axis=ch, eps=EPS), numpy


def _weight_norm(c):
    fn = c.function("weight_norm")
    v, axis, red, acc = c.x, c.axis, c.reduced, _acc(c.x)
    g, g_b = c.param(c.kept, base=1.0)

    def numpy():
        norm = np.sqrt(np.sum(np.square(v, dtype=acc), axis=red, keepdims=True))
        return (g_b * v / norm).astype(v.dtype, copy=False)

    return lambda: fn(v, g, axis=axis), numpy


def _weight_standardize(c):
    fn = c.function("weight_standardize")
    w, axis, red, acc = c.x, c.axis, c.reduced, _acc(c.x)

    def numpy():
        m = w.mean(red, dtype=acc, keepdims=True)
        v = w.var(red, dtype=acc, keepdims=True)
        return ((w - m) / np.sqrt(v + EPS)).astype(w.dtype, copy=False)

    return lambda: fn(w, axis=axis, eps=EPS), numpy


def _f(a, acc):
    """a in the accumulation dtype (float16 -> float32), as a careful user
    would write float16 gradient code; a itself otherwise."""
    return a if acc is None else a.astype(acc)


def _center_backward_numpy(x, dy, m, rstd, g_b, red, sum_axes, acc):
    """dx, dgamma, dbeta of y = (x - m) * rstd * g + b: the textbook formulas
    (statistics over `red`, parameter gradients summed over `sum_axes`)."""
    xa, dya = _f(x, acc), _f(dy, acc)
    xhat = (xa - m) * rstd
    dbeta = dya.sum(sum_axes)
    dgamma = (dya * xhat).sum(sum_axes)
    dxhat = dya * g_b
    dx = rstd * (dxhat - dxhat.mean(red, keepdims=True)
                 - xhat * (dxhat * xhat).mean(red, keepdims=True))
    return dx.astype(x.dtype, copy=False), dgamma, dbeta


def _layer_norm_backward(c):
    fn = c.function("layer_norm_backward")
    x, axis, red, acc = c.x, c.axis, c.reduced, _acc(c.x)
    g, g_b = c.param(red, base=1.0)
    m, rstd = c.stats()
    dy = c.like_x()
    return (lambda: fn(dy, x, m, rstd, g, axis=axis),
            lambda: _center_backward_numpy(x, dy, m, rstd, g_b, red, c.kept, acc))


def _rms_norm_backward(c):
    fn = c.function("rms_norm_backward")
    x, axis, red, acc = c.x, c.axis, c.reduced, _acc(c.x)
    g, g_b = c.param(red, base=1.0)
    sdt = np.float64 if x.dtype == np.float64 else np.float32
    ms = np.mean(np.square(x, dtype=np.float64), axis=red, keepdims=True)
    rstd = (1 / np.sqrt(ms + EPS)).astype(sdt)
    dy = c.like_x()

    def numpy():
        xa, dya = _f(x, acc), _f(dy, acc)
        xhat = xa * rstd
        dgamma = (dya * xhat).sum(c.kept)
        dxhat = dya * g_b
        dx = rstd * (dxhat - xhat * (dxhat * xhat).mean(red, keepdims=True))
        return dx.astype(x.dtype, copy=False), dgamma

    return lambda: fn(dy, x, rstd, g, axis=axis), numpy


def _batch_norm_backward(c):
    fn = c.function("batch_norm_backward")
    x, axis, red, acc = c.x, c.axis, c.reduced, _acc(c.x)
    g, g_b = c.param(c.kept, base=1.0)
    m, rstd = c.stats()
    dy = c.like_x()
    return (lambda: fn(dy, x, m, rstd, g, axis=axis, training=True),
            lambda: _center_backward_numpy(x, dy, m, rstd, g_b, red, red, acc))


def _group_norm_backward(c):
    fn = c.function("group_norm_backward")
    x, acc = c.x, _acc(c.x)
    ch = c.axis % x.ndim
    g, g_b = c.param((ch,), base=1.0)
    split = x.shape[:ch] + (GROUPS, x.shape[ch] // GROUPS) + x.shape[ch + 1:]
    red = tuple(a for a in range(1, x.ndim + 1) if a != ch)
    m_s, rstd_s = c.stats(red, x.reshape(split))           # split view, keepdims
    stat_shape = tuple(x.shape[0] if i == 0 else (GROUPS if i == ch else 1)
                       for i in range(x.ndim))
    m, rstd = m_s.reshape(stat_shape), rstd_s.reshape(stat_shape)   # as group_norm returns them
    dy = c.like_x()
    g_split = g_b.reshape(g_b.shape[:ch] + (GROUPS, x.shape[ch] // GROUPS) + g_b.shape[ch + 1:])
    not_ch = tuple(a for a in range(x.ndim + 1) if a not in (ch, ch + 1))

    def numpy():
        dx, dgamma, dbeta = _center_backward_numpy(
            x.reshape(split), dy.reshape(split), m_s, rstd_s, g_split, red, not_ch, acc)
        return dx.reshape(x.shape), dgamma.reshape(-1), dbeta.reshape(-1)

    return lambda: fn(dy, x, m, rstd, GROUPS, g, channel_axis=c.axis), numpy


# ---------------------------------------------------------------- the table
#
# name, {layout: argument}, builder[, reduced axes when the argument is None]

OPS = [
    Op("mean_var", {"rows": -1, "rows16": -1, "columns": 0, "NCHW": (0, 2, 3),
                    "NHWC": (0, 1, 2)}, _mean_var),
    Op("zscore", {"rows": -1, "columns": 0}, _zscore),
    Op("Moments", {"rows": -1, "columns": 0}, _moments),
    Op("layer_norm", {"rows": -1, "rows16": -1, "rows32": -1, "columns": 0, "NCHW": (1, 2, 3)},
       _layer_norm),
    Op("rms_norm", {"rows": -1, "rows32": -1, "columns": 0}, _rms_norm),
    Op("batch_norm", {"columns": None, "NCHW": None, "NHWC": (0, 1, 2), "NCHW7x7": None},
       _batch_norm_train, all_but_1),
    Op("batch_norm_eval", {"NCHW": None, "NHWC": (0, 1, 2), "NCHW7x7": None}, _batch_norm_eval,
       all_but_1),
    Op("group_norm", {"NCHW": 1, "NHWC": -1}, _group_norm),           # argument: channel_axis
    Op("instance_norm", {"NCHW": 1, "NHWC": -1}, _instance_norm),     # argument: channel_axis
    Op("weight_norm", {"rows": None, "OIHW": None}, _weight_norm, all_but_0),
    Op("weight_standardize", {"rows": None, "OIHW": None}, _weight_standardize, all_but_0),
    Op("layer_norm_backward", {"rows": -1, "columns": 0}, _layer_norm_backward),
    Op("rms_norm_backward", {"rows": -1, "columns": 0}, _rms_norm_backward),
    Op("batch_norm_backward", {"columns": None, "NCHW": None, "NHWC": (0, 1, 2),
                               "NCHW7x7": None}, _batch_norm_backward, all_but_1),
    Op("group_norm_backward", {"NCHW": 1, "NHWC": -1}, _group_norm_backward),  # channel_axis
]
