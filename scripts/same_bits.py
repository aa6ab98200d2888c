"""Do two builds of fastnorm give the same bits?

Every public function runs over a grid of inputs chosen to reach every
route of the kernels (rows short and long, in cache and streamed, a few
long slices, columns, NCHW maps from 7x7 to 56x56, NHWC, groups, C, F,
strided and reversed layouts, float16/32/64, fresh outputs and out=,
gradients), on 1 and 2 threads.  `dump` writes each result to a folder;
`compare` reads two such folders (one per build, each written by that
build's Python) and reports, per case, whether the results are the same
bits and otherwise the largest difference in units in the last place of
the result's dtype:

    python scripts/same_bits.py dump DIR          # with build A's python
    python scripts/same_bits.py dump DIR2         # with build B's python
    python scripts/same_bits.py compare DIR DIR2

Run it from outside the source tree (or with python -I) so that the
installed package is imported.  Exit status of compare: 0 when every
result is the same bits, 1 otherwise.
"""
import argparse
import hashlib
import json
import os
import sys
import zlib

import numpy as np


def data(shape, dtype, seed, offset=3.0):
    """Values around `offset` with a spread of 2, the same for any build."""
    rng = np.random.default_rng(zlib.crc32(repr((shape, seed)).encode()))
    return (rng.standard_normal(shape) * 2.0 + offset).astype(dtype)


def layout(a, kind):
    """a (made C-ordered) seen in another layout of the same shape."""
    if kind == "C":
        return a
    if kind == "F":
        return np.asfortranarray(a)
    if kind == "strided":        # every other element of the last axis
        big = np.repeat(a, 2, axis=-1)
        return big[..., ::2]
    if kind == "reversed":       # negative strides on every axis
        return np.ascontiguousarray(a[(slice(None, None, -1),) * a.ndim])[
            (slice(None, None, -1),) * a.ndim]
    raise ValueError(kind)


FLOATS = ("float16", "float32", "float64")

# (name, shape, axis) of the forward normalizers; axis None: the function's default.
ROWS = [
    ("small", (32, 768), -1),
    ("tiny", (1, 256), -1),
    ("cached", (256, 1024), -1),
    ("large", (4096, 1024), -1),         # 16 MiB float32: streamed, threads
    ("short32", (65536, 32), -1),
    ("short8", (8192, 8), -1),
    ("short5", (6000, 5), -1),
    ("few_long", (3, 700001), -1),       # a few long slices: split into blocks
    ("last2", (16, 196, 768), (1, 2)),
    ("middle", (64, 50, 40), 1),
    ("axis0", (1024, 2048), 0),          # columns
    ("axis0_small", (256, 1000), 0),
    ("axis0_wide", (2, 600000), 0),      # columns in passes
    ("all", (300, 70), None),
]
IMAGES = [                               # batch norm layouts (N, C, H, W)
    ("nchw56", (16, 64, 56, 56)),
    ("nchw28", (16, 64, 28, 28)),
    ("nchw14", (8, 256, 14, 14)),
    ("nchw7", (32, 512, 7, 7)),
    ("nchw4", (64, 256, 4, 4)),
    ("ncl8", (500, 64, 8)),
]


def cases():
    """(key, function name, builder) for every case: the builder returns
    (args, kwargs) with fresh arrays."""
    import fastnorm as fn
    out = []

    def add(key, func, build):
        out.append((key, func, build))

    for name, shape, axis in ROWS:
        for dt in FLOATS:
            if dt == "float16" and np.prod(shape) > 5_000_000:
                continue
            kinds = ["C", "F", "strided", "reversed"] if np.prod(shape) <= 300_000 else ["C"]
            for kind in kinds:
                key = f"{name}-{dt}-{kind}"
                ax = {"axis": axis}

                def x_of(shape=shape, dt=dt, kind=kind, key=key, offset=3.0):
                    return layout(data(shape, dt, key, offset), kind)

                n_along = (np.prod(shape) if axis is None else
                           np.prod([shape[a] for a in np.atleast_1d(axis)]))
                red = tuple(range(len(shape))) if axis is None else tuple(
                    a % len(shape) for a in np.atleast_1d(axis))
                pshape = tuple(shape[a] for a in red)

                def params(pshape=pshape, key=key, dt=dt):
                    return data(pshape, dt, key + "g", 1.0), data(pshape, dt, key + "b", 0.0)

                add(f"mean_var-{key}", "mean_var",
                    lambda x_of=x_of, ax=ax: ((x_of(),), dict(ax)))
                add(f"layer_norm-{key}", "layer_norm",
                    lambda x_of=x_of, ax=ax, params=params: (
                        (x_of(), *params()), dict(ax, return_stats=True)))
                add(f"layer_norm_plain-{key}", "layer_norm",
                    lambda x_of=x_of, ax=ax: ((x_of(),), dict(ax)))
                add(f"rms_norm-{key}", "rms_norm",
                    lambda x_of=x_of, ax=ax, params=params: (
                        (x_of(), params()[0]), dict(ax, return_stats=True)))
                if kind == "C":
                    add(f"layer_norm_offset-{key}", "layer_norm",
                        lambda x_of=x_of, ax=ax: ((x_of(offset=1e4),), dict(ax)))
                    add(f"layer_norm_out-{key}", "layer_norm",
                        lambda x_of=x_of, ax=ax, params=params: (
                            (x_of(), *params()), dict(ax, out=np.full_like(x_of(), 7))))
                    add(f"layer_norm_f64out-{key}", "layer_norm",
                        lambda x_of=x_of, ax=ax: ((x_of(),), dict(ax, dtype=np.float64)))
                    if n_along > 1:
                        add(f"layer_norm_backward-{key}", "layer_norm_backward",
                            lambda x_of=x_of, ax=ax, params=params, fn=fn: _ln_backward(
                                fn, x_of(), params()[0], ax))
                        add(f"rms_norm_backward-{key}", "rms_norm_backward",
                            lambda x_of=x_of, ax=ax, params=params, fn=fn: _rms_backward(
                                fn, x_of(), params()[0], ax))
                    if n_along > 1 and axis is not None:
                        add(f"batch_norm-{key}", "batch_norm",
                            lambda x_of=x_of, ax=ax, shape=shape, red=red, key=key, dt=dt:
                            _bn_args(x_of(), shape, red, key, dt, ax))

    for name, shape in IMAGES:
        for dt in FLOATS:
            for order in ("nchw", "nhwc"):
                key = f"{name}-{dt}-{order}"
                c = shape[1]

                def x_of(shape=shape, dt=dt, key=key, order=order):
                    x = data(shape, dt, key)
                    if order == "nhwc":
                        x = np.ascontiguousarray(np.moveaxis(x, 1, -1))
                    return x

                axes = None if order == "nchw" else tuple(range(len(shape) - 1))
                cax = 1 if order == "nchw" else -1
                red = tuple(i for i in range(len(shape)) if i != 1) if order == "nchw" else axes

                def running(c=c, key=key):
                    return data((c,), np.float64, key + "rm", 0.0), \
                        np.abs(data((c,), np.float64, key + "rv", 1.0)) + 0.5

                def gb(c=c, key=key, dt=dt):
                    return data((c,), dt, key + "g", 1.0), data((c,), dt, key + "b", 0.0)

                add(f"batch_norm-{key}", "batch_norm",
                    lambda x_of=x_of, axes=axes, running=running, gb=gb: _with_running(
                        x_of(), gb(), running(), dict(axis=axes, return_stats=True)))
                add(f"batch_norm_plain-{key}", "batch_norm",
                    lambda x_of=x_of, axes=axes: ((x_of(),), dict(axis=axes)))
                add(f"batch_norm_eval-{key}", "batch_norm",
                    lambda x_of=x_of, axes=axes, running=running, gb=gb: (
                        (x_of(), *gb(), *running()), dict(axis=axes, training=False)))
                add(f"batch_norm_eval_out-{key}", "batch_norm",
                    lambda x_of=x_of, axes=axes, running=running: (
                        (x_of(), None, None, *running()),
                        dict(axis=axes, training=False, out=np.full_like(x_of(), 7))))
                add(f"mean_var-{key}", "mean_var",
                    lambda x_of=x_of, red=red: ((x_of(),), dict(axis=red)))
                add(f"batch_norm_backward-{key}", "batch_norm_backward",
                    lambda x_of=x_of, axes=axes, gb=gb, fn=fn: _bn_backward(
                        fn, x_of(), gb()[0], axes, True))
                add(f"batch_norm_backward_eval-{key}", "batch_norm_backward",
                    lambda x_of=x_of, axes=axes, gb=gb, fn=fn: _bn_backward(
                        fn, x_of(), gb()[0], axes, False))
                if c % 8 == 0:
                    add(f"group_norm-{key}", "group_norm",
                        lambda x_of=x_of, cax=cax, gb=gb: (
                            (x_of(), 8, *gb()), dict(channel_axis=cax, return_stats=True)))
                    add(f"group_norm_backward-{key}", "group_norm_backward",
                        lambda x_of=x_of, cax=cax, gb=gb, fn=fn: _gn_backward(
                            fn, x_of(), gb()[0], cax))
                add(f"instance_norm-{key}", "instance_norm",
                    lambda x_of=x_of, cax=cax, gb=gb: (
                        (x_of(), *gb()), dict(channel_axis=cax)))

    for dt in FLOATS:
        for shape in [(256, 512), (64, 32, 3, 3), (1000, 7)]:
            key = f"weights-{shape}-{dt}"
            add(f"weight_norm-{key}", "weight_norm",
                lambda shape=shape, dt=dt, key=key: (
                    (data(shape, dt, key), data(shape[:1], dt, key + "g", 1.0)),
                    dict(return_norm=True)))
            add(f"weight_standardize-{key}", "weight_standardize",
                lambda shape=shape, dt=dt, key=key: ((data(shape, dt, key),), {}))
    return out


def _bn_args(x, shape, red, key, dt, ax):
    kept = tuple(shape[i] for i in range(len(shape)) if i not in red)
    rm = data(kept, np.float64, key + "rm", 0.0)
    rv = np.abs(data(kept, np.float64, key + "rv", 1.0)) + 0.5
    return (x, data(kept, dt, key + "g", 1.0), data(kept, dt, key + "b", 0.0), rm, rv), \
        dict(ax, return_stats=True)


def _with_running(x, gb, running, kwargs):
    return (x, *gb, *running), kwargs


def _dy(x, key):
    return data(x.shape, x.dtype, key + "dy", 0.0)


def _ln_backward(fn, x, gamma, ax):
    _, mean, rstd = fn.layer_norm(x, gamma, axis=ax.get("axis", -1), return_stats=True)
    return (_dy(x, "ln"), x, mean, rstd, gamma), dict(ax)


def _rms_backward(fn, x, gamma, ax):
    _, rstd = fn.rms_norm(x, gamma, axis=ax.get("axis", -1), return_stats=True)
    return (_dy(x, "rms"), x, rstd, gamma), dict(ax)


def _bn_backward(fn, x, gamma, axes, training):
    _, mean, rstd = fn.batch_norm(x, gamma, axis=axes, return_stats=True)
    return (_dy(x, "bn"), x, mean, rstd, gamma), dict(axis=axes, training=training)


def _gn_backward(fn, x, gamma, cax):
    _, mean, rstd = fn.group_norm(x, 8, gamma, channel_axis=cax, return_stats=True)
    return (_dy(x, "gn"), x, mean, rstd, 8, gamma), dict(channel_axis=cax)


def results_of(value, args):
    """The arrays a call gave: its results, then any array argument it
    wrote (running statistics)."""
    if not isinstance(value, tuple):
        value = (value,)
    arrays = [np.asarray(v) for v in value]
    arrays += [a for a in args if isinstance(a, np.ndarray) and a.dtype == np.float64
               and a.ndim == 1]
    return arrays


def dump(folder, threads):
    import fastnorm as fn
    os.makedirs(folder, exist_ok=True)
    index = {}
    for n in threads:
        fn.set_num_threads(n)
        for key, func, build in cases():
            args, kwargs = build()
            value = getattr(fn, func)(*args, **kwargs)
            for i, a in enumerate(results_of(value, args)):
                name = f"{key}-t{n}-r{i}"
                digest = hashlib.sha1(np.ascontiguousarray(a).view(np.uint8)).hexdigest()
                np.save(os.path.join(folder, name + ".npy"), a)
                index[name] = digest
    with open(os.path.join(folder, "index.json"), "w") as f:
        json.dump({"fastnorm": fn.__version__, "config": _config(fn), "results": index}, f,
                  indent=0)
    print(f"{len(index)} results in {folder}")


def _config(fn):
    try:
        from fastnorm._config import config
        return {k: str(v) for k, v in config().items()}
    except Exception:
        return {}


def ulps(a, b):
    """Largest distance in units in the last place between two float arrays
    of one dtype (NaN against NaN counts 0; NaN against a number, inf)."""
    if a.dtype.kind != "f":
        return 0 if np.array_equal(a, b) else float("inf")
    ints = {2: np.int16, 4: np.int32, 8: np.int64}[a.dtype.itemsize]
    ia = a.view(ints).astype(np.int64)
    ib = b.view(ints).astype(np.int64)
    mask = (1 << (8 * a.dtype.itemsize - 1)) - 1
    # A monotone integer line: negative floats mirrored below zero (-0 is 0).
    ia = np.where(ia < 0, -(ia & mask), ia)
    ib = np.where(ib < 0, -(ib & mask), ib)
    both_nan = np.isnan(a) & np.isnan(b)
    one_nan = np.isnan(a) ^ np.isnan(b)
    if one_nan.any():
        return float("inf")
    d = np.abs(ia - ib)
    d[both_nan] = 0
    return int(d.max()) if d.size else 0


def scaled_ulps(a, b):
    """The largest difference in units in the last place of the array's
    largest finite magnitude: what a value near zero that came out of a
    cancellation can be asked to carry."""
    if a.dtype.kind != "f":
        return 0 if np.array_equal(a, b) else float("inf")
    both = np.isfinite(a) & np.isfinite(b)
    if not both.any():
        return 0.0
    top = np.abs(a[both]).max()
    unit = np.spacing(a.dtype.type(top)) if top > 0 else np.finfo(a.dtype).tiny
    with np.errstate(over="ignore"):
        diff = np.abs(a[both].astype(np.float64) - b[both].astype(np.float64))
    return float(diff.max() / float(unit))


def compare(a_dir, b_dir):
    with open(os.path.join(a_dir, "index.json")) as f:
        a = json.load(f)["results"]
    with open(os.path.join(b_dir, "index.json")) as f:
        b = json.load(f)["results"]
    missing = sorted(set(a) ^ set(b))
    same = differ = 0
    worst = {}
    for name in sorted(set(a) & set(b)):
        if a[name] == b[name]:
            same += 1
            continue
        x = np.load(os.path.join(a_dir, name + ".npy"))
        y = np.load(os.path.join(b_dir, name + ".npy"))
        if x.shape != y.shape or x.dtype != y.dtype:
            d = scaled = float("inf")
        else:
            d, scaled = ulps(x, y), scaled_ulps(x, y)
        differ += 1
        route = name.rsplit("-t", 1)[0]
        worst[route] = max(worst.get(route, 0), scaled)
        print(f"differs: {name}  {x.dtype}  largest difference {d} ulp, "
              f"{scaled:.3g} ulp of the largest value")
    print(f"\n{same} results the same bits, {differ} differ, {len(missing)} in one folder only")
    for name in missing:
        print(f"only in one: {name}")
    return 0 if differ == 0 and not missing else 1


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("dump")
    d.add_argument("folder")
    d.add_argument("--threads", default="1,2")
    c = sub.add_parser("compare")
    c.add_argument("a")
    c.add_argument("b")
    args = p.parse_args(argv)
    if args.cmd == "dump":
        dump(args.folder, [int(t) for t in args.threads.split(",")])
        return 0
    return compare(args.a, args.b)


if __name__ == "__main__":
    sys.exit(main())
