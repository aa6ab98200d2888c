"""Standardize a data set read in chunks from .npy files with missing values.

A data set too large to load at once is a folder of .npy files (written
here first: sensor readings of 64 channels, about 5% of them missing as
NaN, each channel with its own offset and scale).  Two passes over the
files:

1. the statistics: each file read through a memory map and fed to one
   ``fastnorm.Moments(axis=0, nan_policy="omit")``, which keeps each
   channel's count, mean and M2 (each channel has its own count of values
   that are not NaN);
2. the output: each file standardized with those statistics
   (``Moments.normalize``, NaN kept where the reading is missing) and
   written to a second folder.

With scikit-learn installed, the same statistics come from
``StandardScaler.partial_fit`` and ``transform`` for comparison.  Run::

    python examples/standardize_chunks.py [--files 40] [--rows 25000]
"""
import argparse
import os
import tempfile
import time

import numpy as np

import fastnorm


def write_files(folder, files, rows, channels, rng):
    offsets = rng.uniform(-50, 1000, channels)
    scales = rng.uniform(0.1, 20, channels)
    paths = []
    for i in range(files):
        x = (offsets + scales * rng.standard_normal((rows, channels))).astype(np.float32)
        x[rng.random(x.shape) < 0.05] = np.nan
        path = os.path.join(folder, f"part-{i:04d}.npy")
        np.save(path, x)
        paths.append(path)
    return paths


def with_fastnorm(paths, out_folder):
    t0 = time.perf_counter()
    stats = fastnorm.Moments(axis=0, nan_policy="omit")
    for p in paths:
        stats.update(np.load(p, mmap_mode="r"))
    t1 = time.perf_counter()
    transform = 0.0
    for p in paths:
        x = np.load(p)
        t = time.perf_counter()
        stats.normalize(x, out=x)                # in place: no second array
        transform += time.perf_counter() - t
        np.save(os.path.join(out_folder, os.path.basename(p)), x)
    return stats, t1 - t0, transform


def with_sklearn(paths):
    try:
        from sklearn.preprocessing import StandardScaler
    except ImportError:
        return None
    t0 = time.perf_counter()
    scaler = StandardScaler()
    for p in paths:
        scaler.partial_fit(np.load(p, mmap_mode="r"))
    t1 = time.perf_counter()
    transform = 0.0
    for p in paths:
        x = np.load(p)
        t = time.perf_counter()
        scaler.transform(x)
        transform += time.perf_counter() - t
    return scaler, t1 - t0, transform


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=40)
    ap.add_argument("--rows", type=int, default=25_000)
    ap.add_argument("--channels", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    fastnorm.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as src, tempfile.TemporaryDirectory() as dst:
        paths = write_files(src, args.files, args.rows, args.channels, rng)
        total = args.files * args.rows
        print(f"{args.files} files of ({args.rows}, {args.channels}) float32, "
              f"{total * args.channels * 4 / 2**20:.0f} MiB, about 5% NaN; "
              f"{args.threads} thread(s)")
        stats, fit, transform = with_fastnorm(paths, dst)
        print(f"fastnorm.Moments    statistics {fit * 1e3:8.1f} ms   "
              f"standardize {transform * 1e3:8.1f} ms (in place)")
        # The whole data set in memory, for the check alone.
        whole = np.concatenate([np.load(p) for p in paths]).astype(np.float64)
        err = np.max(np.abs(stats.mean - np.nanmean(whole, 0)) / np.nanstd(whole, 0))
        print(f"  counts per channel {int(stats.count.min())}..{int(stats.count.max())}; "
              f"mean off np.nanmean by {err:.1e} standard deviations")
        y = np.concatenate([np.load(os.path.join(dst, os.path.basename(p))) for p in paths])
        assert np.array_equal(np.isnan(y), np.isnan(whole)), "NaN kept where missing"
        y = y.astype(np.float64)
        print(f"  standardized: channel means within {np.abs(np.nanmean(y, 0)).max():.1e} of 0, "
              f"standard deviations within {np.abs(np.nanstd(y, 0) - 1).max():.1e} of 1")
        sk = with_sklearn(paths)
        if sk is None:
            print("scikit-learn is not installed: no comparison")
            return
        scaler, fit_sk, transform_sk = sk
        print(f"StandardScaler      statistics {fit_sk * 1e3:8.1f} ms   "
              f"standardize {transform_sk * 1e3:8.1f} ms")
        print(f"  fastnorm faster by {fit_sk / fit:.1f}x (statistics, files read included), "
              f"{transform_sk / transform:.1f}x (standardize, in memory)")
        diff = np.max(np.abs(scaler.mean_ - stats.mean) / np.sqrt(scaler.var_))
        print(f"  the two means differ by {diff:.1e} standard deviations")


if __name__ == "__main__":
    main()
