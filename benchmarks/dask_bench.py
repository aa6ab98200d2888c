"""fastnorm on Dask against the same computation in dask.array's own terms.

On a distributed LocalCluster (two worker processes, one thread each, bound
to 127.0.0.1), over a chunked float32 array of at least 2 GB held in the
workers' memory (persisted first, so that generating it is not timed):

- ``mean_var``: ``fastnorm.mean_var(x, axis=0)`` against ``x.mean(axis=0)``
  and ``x.var(axis=0)`` computed together;
- ``batch_norm``: ``fastnorm.batch_norm(x, gamma, beta, axis=0)`` (training,
  batch statistics) against ``(x - m) / sqrt(v + eps) * gamma + beta`` with
  dask's ``m = x.mean(0)``, ``v = x.var(0)``; y is persisted in the workers
  (not sent back) and then released.

The reduced axis 0 is chunked: statistics are merged across chunks.  Each
figure is the median of a few repeats after one warm-up run.  Run from the
repository root, with fastnorm installed with the dask extra:

    python benchmarks/dask_bench.py

This is a script, not part of the asv suite (it defines no benchmarks; it
imports Dask only when run).
"""
import argparse
import logging
import statistics
import time
import uuid


def _timed(run, repeats):
    run()  # warm-up: imports, worker caches
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        run()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1 << 20,
                        help="rows of the (rows, 512) float32 array (default 2**20: 2 GiB)")
    parser.add_argument("--chunk-rows", type=int, default=1 << 16,
                        help="rows per chunk (default 2**16: 128 MiB chunks)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)

    import dask
    import dask.array as da
    import numpy as np
    from distributed import Client, LocalCluster, wait

    import fastnorm

    features, eps = 512, 1e-5
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, protocol="tcp://",
                      host="127.0.0.1", scheduler_port=0, dashboard_address="127.0.0.1:0",
                      silence_logs=logging.ERROR) as cluster, Client(cluster) as client:
        rng = da.random.default_rng(0)
        x = rng.random((args.rows, features), dtype=np.float32,
                       chunks=(args.chunk_rows, features)) * 4 + 10
        x = x.persist()
        wait(x)
        gamma = np.linspace(0.5, 2.0, features, dtype=np.float32)
        beta = np.linspace(-1.0, 1.0, features, dtype=np.float32)

        def fresh():
            # x under new keys (a no-op task per chunk, where the chunk is), so
            # that no run finds results of an earlier one still in memory.
            return x.map_blocks(np.asarray, name="x-" + uuid.uuid4().hex)

        def persisted(y):
            wait(y.persist())  # computed and held in the workers, then dropped

        def mean_var_fastnorm():
            dask.compute(*fastnorm.mean_var(fresh(), axis=0))

        def mean_var_dask():
            a = fresh()
            dask.compute(a.mean(axis=0), a.var(axis=0))

        def batch_norm_fastnorm():
            persisted(fastnorm.batch_norm(fresh(), gamma, beta, axis=0, eps=eps))

        def batch_norm_dask():
            a = fresh()
            persisted((a - a.mean(axis=0)) / da.sqrt(a.var(axis=0) + eps) * gamma + beta)

        cases = {"mean_var (axis 0)": (mean_var_fastnorm, mean_var_dask),
                 "batch_norm (training, axis 0)": (batch_norm_fastnorm, batch_norm_dask)}

        # The two sides compute the same thing.
        mean, var = dask.compute(*fastnorm.mean_var(x, axis=0))
        ref_mean, ref_var = dask.compute(x.mean(axis=0), x.var(axis=0))
        np.testing.assert_allclose(mean, ref_mean, rtol=1e-4)
        np.testing.assert_allclose(var, ref_var, rtol=1e-3)
        y = fastnorm.batch_norm(x[:4096], gamma, beta, axis=0, eps=eps).compute()
        block = x[:4096].compute().astype(np.float64)
        ref = (block - block.mean(0)) / np.sqrt(block.var(0) + eps) * gamma + beta
        np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)

        gib = x.nbytes / 2**30
        print(f"fastnorm {fastnorm.__version__}, dask {dask.__version__}; "
              f"x: {x.shape} float32 = {gib:.2f} GiB ({x.nbytes / 1e9:.2f} GB) in "
              f"{x.numblocks[0]} chunks of {args.chunk_rows} rows; "
              f"{len(client.scheduler_info()['workers'])} worker processes x 1 thread; "
              f"median of {args.repeats}")
        print(f"{'operation':<32}{'fastnorm':>11}{'dask.array':>13}{'speed-up':>10}")
        for name, (ours, theirs) in cases.items():
            t_ours, t_theirs = _timed(ours, args.repeats), _timed(theirs, args.repeats)
            print(f"{name:<32}{t_ours:>9.3f} s{t_theirs:>11.3f} s{t_theirs / t_ours:>9.2f}x")


if __name__ == "__main__":
    main()
