"""Smoke test of an installed fastnorm (a wheel in a bare environment).

Imports fastnorm, calls every public function once on a small array and
checks the values against NumPy, checks that thread counts do not change the
bits, prints show_config(), and optionally checks how OpenMP came with the
build.  Needs only NumPy.  Exits non-zero on any failure.

    python -I scripts/smoke_test.py [--require-openmp] [--vendored-libgomp]

--require-openmp     the build must have OpenMP (config()["openmp"] is True).
--vendored-libgomp   (Linux, auditwheel-repaired wheels) the libgomp that is
                     loaded is the copy inside the wheel (numpy_fastnorm.libs/),
                     not the system's; read from /proc/self/maps, so it does
                     not need threadpoolctl.

Run it outside the source tree, or with -I: in the repository root the
source folder fastnorm/ would shadow the installed package.
"""
import argparse
import glob
import os
import sys

import numpy as np

FAILURES = []


def check(cond, what):
    print(("ok    " if cond else "FAIL  ") + what)
    if not cond:
        FAILURES.append(what)


def close(a, b, rtol=1e-5, atol=1e-6):
    return np.allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), rtol=rtol, atol=atol)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--require-openmp", action="store_true")
    ap.add_argument("--vendored-libgomp", action="store_true")
    args = ap.parse_args()

    import fastnorm
    from fastnorm import _config

    here = os.path.dirname(os.path.abspath(fastnorm.__file__))
    print(f"fastnorm {fastnorm.__version__} from {here}; numpy {np.__version__}")
    check("site-packages" in here or "dist-packages" in here,
          f"fastnorm is imported from an installation ({here})")
    fastnorm.show_config()
    cfg = _config.config()

    rng = np.random.default_rng(0)
    x = (3.0 + rng.standard_normal((64, 48))).astype(np.float32)
    x64 = x.astype(np.float64)
    eps = 1e-5

    # mean_var
    m, v = fastnorm.mean_var(x, axis=0)
    check(m.dtype == np.float32 and m.shape == (48,), "mean_var: dtype and shape as np.mean")
    check(close(m, x64.mean(0)) and close(v, x64.var(0)), "mean_var matches np.mean/np.var")

    # layer_norm over the last axis, with gain and bias
    g = (1 + 0.1 * rng.standard_normal(48)).astype(np.float32)
    b = (0.1 * rng.standard_normal(48)).astype(np.float32)
    mu, var = x64.mean(-1, keepdims=True), x64.var(-1, keepdims=True)
    y = fastnorm.layer_norm(x, g, b, eps=eps)
    check(close(y, (x64 - mu) / np.sqrt(var + eps) * g + b, rtol=1e-4, atol=1e-4),
          "layer_norm matches NumPy")

    # rms_norm
    y = fastnorm.rms_norm(x, g, eps=eps)
    ref = x64 / np.sqrt((x64 ** 2).mean(-1, keepdims=True) + eps) * g
    check(close(y, ref, rtol=1e-4, atol=1e-4), "rms_norm matches NumPy")

    # batch_norm, training on NCHW with running statistics, then eval
    imgs = rng.standard_normal((4, 3, 5, 6))
    rm, rv = np.zeros(3), np.ones(3)
    y = fastnorm.batch_norm(imgs, running_mean=rm, running_var=rv, momentum=0.1, eps=eps)
    bm = imgs.mean((0, 2, 3), keepdims=True)
    bv = imgs.var((0, 2, 3), keepdims=True)
    n = 4 * 5 * 6
    check(close(y, (imgs - bm) / np.sqrt(bv + eps), rtol=1e-10, atol=1e-10),
          "batch_norm (training) matches NumPy")
    check(close(rm, 0.1 * bm.ravel(), rtol=1e-10, atol=1e-12)
          and close(rv, 0.9 + 0.1 * bv.ravel() * n / (n - 1), rtol=1e-10, atol=1e-12),
          "batch_norm updated the running statistics")
    y = fastnorm.batch_norm(imgs, running_mean=rm, running_var=rv, training=False, eps=eps)
    ref = (imgs - rm.reshape(1, 3, 1, 1)) / np.sqrt(rv.reshape(1, 3, 1, 1) + eps)
    check(close(y, ref, rtol=1e-10, atol=1e-10), "batch_norm (eval) matches NumPy")

    # group_norm (2 groups of 2 channels) and instance_norm on NCHW
    gx = rng.standard_normal((2, 4, 3, 5))
    gs = gx.reshape(2, 2, 2, 3, 5)
    ref = ((gs - gs.mean((2, 3, 4), keepdims=True))
           / np.sqrt(gs.var((2, 3, 4), keepdims=True) + eps)).reshape(gx.shape)
    check(close(fastnorm.group_norm(gx, 2, eps=eps), ref, rtol=1e-10, atol=1e-10),
          "group_norm matches NumPy")
    ref = (gx - gx.mean((2, 3), keepdims=True)) / np.sqrt(gx.var((2, 3), keepdims=True) + eps)
    check(close(fastnorm.instance_norm(gx, eps=eps), ref, rtol=1e-10, atol=1e-10),
          "instance_norm matches NumPy")

    # weight_norm and weight_standardize: one statistic per row (output unit)
    wv = rng.standard_normal((6, 10))
    wg = 1 + rng.random(6)
    ref = wg[:, None] * wv / np.linalg.norm(wv, axis=1, keepdims=True)
    check(close(fastnorm.weight_norm(wv, wg), ref, rtol=1e-10, atol=1e-12),
          "weight_norm matches NumPy")
    ref = (wv - wv.mean(1, keepdims=True)) / np.sqrt(wv.var(1, keepdims=True) + eps)
    check(close(fastnorm.weight_standardize(wv, eps=eps), ref, rtol=1e-10, atol=1e-10),
          "weight_standardize matches NumPy")

    # gradients: layer norm against the closed form, the others run and shape
    dy = rng.standard_normal(x.shape)
    _, lm, lr = fastnorm.layer_norm(x64, g, eps=eps, return_stats=True)
    dx, dg, db = fastnorm.layer_norm_backward(dy, x64, lm, lr, g)
    xh = (x64 - lm) * lr
    gd = dy * g
    ref = lr * (gd - gd.mean(-1, keepdims=True) - xh * (gd * xh).mean(-1, keepdims=True))
    check(close(dx, ref, rtol=1e-9, atol=1e-9) and close(dg, (dy * xh).sum(0), rtol=1e-9)
          and close(db, dy.sum(0), rtol=1e-9), "layer_norm_backward matches the closed form")
    _, rr = fastnorm.rms_norm(x64, eps=eps, return_stats=True)
    check(fastnorm.rms_norm_backward(dy, x64, rr)[0].shape == x.shape, "rms_norm_backward runs")
    dyi = rng.standard_normal(imgs.shape)
    _, bm2, br2 = fastnorm.batch_norm(imgs, eps=eps, return_stats=True)
    check(fastnorm.batch_norm_backward(dyi, imgs, bm2, br2)[1].shape == (3,),
          "batch_norm_backward runs")
    _, gm, gr = fastnorm.group_norm(gx, 2, eps=eps, return_stats=True)
    check(fastnorm.group_norm_backward(rng.standard_normal(gx.shape), gx, gm, gr, 2)[2].shape
          == (4,), "group_norm_backward runs")

    # threads: the count is honoured and does not change the bits
    big = rng.standard_normal((512, 4096)).astype(np.float32)
    fastnorm.set_num_threads(1)
    check(fastnorm.get_num_threads() == 1, "set_num_threads(1) / get_num_threads()")
    one = fastnorm.layer_norm(big)
    fastnorm.set_num_threads(max(2, os.cpu_count() or 1))
    many = fastnorm.layer_norm(big)
    fastnorm.set_num_threads(None)
    check(np.array_equal(one, many), "results are bitwise identical for 1 and several threads")

    # explain: the route, without running (nothing is written)
    if hasattr(fastnorm, "explain"):
        route = fastnorm.explain(fastnorm.layer_norm, big)
        check(isinstance(route, dict) and "pattern" in route, "explain names a route")

    covered = {"explain", "mean_var", "layer_norm", "rms_norm", "batch_norm", "group_norm",
               "instance_norm", "weight_norm", "weight_standardize", "layer_norm_backward",
               "rms_norm_backward", "batch_norm_backward", "group_norm_backward",
               "set_num_threads", "get_num_threads", "show_config", "__version__"}
    extra = sorted(set(getattr(fastnorm, "__all__", ())) - covered)
    if extra:
        print(f"note  not covered by this smoke test: {', '.join(extra)}")

    # OpenMP
    print(f"info  config: openmp={cfg['openmp']} compiler={cfg['compiler']!r} "
          f"simd={cfg['simd']} built={cfg['simd_built']}")
    if args.require_openmp:
        check(cfg["openmp"] is True, "built with OpenMP (config()['openmp'])")
    if args.vendored_libgomp:
        libs = os.path.join(os.path.dirname(here), "numpy_fastnorm.libs")
        vendored = glob.glob(os.path.join(libs, "libgomp*.so*"))
        check(bool(vendored), f"the wheel vendors libgomp ({libs})")
        with open("/proc/self/maps") as f:
            loaded = sorted({line.split()[-1] for line in f if "libgomp" in line})
        print(f"info  libgomp mapped: {loaded}")
        check(bool(loaded) and all(p.startswith(libs + os.sep) for p in loaded),
              "the libgomp in use is the wheel's copy, not the system's")

    if FAILURES:
        print(f"\nSMOKE TEST FAILED: {len(FAILURES)} check(s)")
        return 1
    print("\nsmoke test passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
