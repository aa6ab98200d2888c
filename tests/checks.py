"""One checker per public function: build the arrays a spec describes, call
fastnorm, and compare everything (values, shapes, dtypes, identities of
out arrays, warnings, untouched inputs) with the reference.  The per-function
test modules and the SIMD-level tests share these."""
import warnings

import numpy as np
import pytest

import fastnorm
from reference import (OUT_TOL, assert_close, expand_param, fingerprint, keep_shape, kept_axes,
                       moments, norm_axes, out_dtype, ref_layer_norm, ref_mean_var, ref_rms_norm,
                       ref_running_update, stat_dtype, tiny, tolerances)
from strategies import (build_param, build_running, build_x, n_reduced, other_float,
                        placed, wrong_shape)


def _sentinel_out(shape, dtype, rng):
    """A non-contiguous out view inside a buffer whose other bytes must
    survive the call; returns (view, check)."""
    nd = len(shape)
    perm = rng.permutation(nd) if nd else None
    flips = tuple(i for i in range(nd) if rng.random() < 0.5)
    steps = rng.integers(1, 3, size=nd) if nd else None
    view, buf, mask = placed(np.zeros(shape, dtype=dtype), rng, perm, flips, steps,
                             fill=np.asarray(77, dtype=dtype))
    before = buf[~mask].copy()

    def check():
        assert np.array_equal(buf[~mask], before), "call wrote outside the out view"
    return view, check


def _expect_error(exc, call):
    with warnings.catch_warnings():
        # An empty reduction may warn before the bad argument is noticed.
        warnings.simplefilter("ignore", RuntimeWarning)
        with pytest.raises(exc):
            call()


def _record(fn):
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        res = fn()
    return res, [x for x in w if issubclass(x.category, RuntimeWarning)]


# --------------------------------------------------------------------------
# mean_var

def check_mean_var(spec):
    rng = np.random.default_rng(spec["seed"])
    nd = len(spec["shape"])
    axis, ddof, keepdims, dtype = spec["axis"], spec["ddof"], spec["keepdims"], spec["req_dtype"]
    axes = norm_axes(axis, nd)
    x = build_x(spec, axes, rng)
    res_dt = out_dtype(x.dtype, dtype)
    n = n_reduced(x.shape, axes)

    # Shapes, dtypes and scalar-ness are whatever np.mean / np.var give.
    (em, ev), _ = _record(lambda: (
        np.mean(x, axis=axis, keepdims=keepdims, dtype=dtype),
        np.var(x, axis=axis, ddof=ddof, keepdims=keepdims, dtype=dtype)))
    rshape = np.shape(em)
    assert em.dtype == res_dt and ev.dtype == res_dt  # the documented dtype rule agrees

    out, exc, checks = None, None, []
    mode = spec["out_mode"]
    if mode in ("fresh", "strided"):
        outs = []
        for _ in range(2):
            if mode == "fresh":
                outs.append(np.full(rshape, 5, dtype=res_dt))
            else:
                o, chk = _sentinel_out(rshape, res_dt, rng)
                outs.append(o)
                checks.append(chk)
        out = tuple(outs)
    elif mode == "wrong_shape":
        out, exc = (np.empty(wrong_shape(rshape), res_dt), np.empty(wrong_shape(rshape), res_dt)), ValueError
    elif mode == "wrong_dtype":
        out, exc = (np.empty(rshape, res_dt), np.empty(rshape, other_float(res_dt))), TypeError
    elif mode == "readonly":
        o = np.empty(rshape, res_dt)
        o.flags.writeable = False
        out, exc = (np.empty(rshape, res_dt), o), ValueError

    fx = fingerprint(x)

    def call():
        return fastnorm.mean_var(x, axis=axis, ddof=ddof, keepdims=keepdims, dtype=dtype, out=out)

    if exc is not None:
        _expect_error(exc, call)
        assert fingerprint(x) == fx, "a rejected call modified x"
        return
    (m, v), fn_warn = _record(call)
    assert fingerprint(x) == fx, "mean_var modified its input"
    for c in checks:
        c()
    for got, exp, name in ((m, em, "mean"), (v, ev, "var")):
        assert out is not None or isinstance(got, np.ndarray) == isinstance(exp, np.ndarray), \
            f"{name}: got {type(got)}, numpy gives {type(exp)}"
        assert isinstance(got, (np.ndarray, np.generic)), type(got)
        assert got.dtype == res_dt, f"{name} dtype {got.dtype} != {res_dt}"
        assert np.shape(got) == rshape, f"{name} shape {np.shape(got)} != {rshape}"
    if out is not None:
        assert m is out[0] and v is out[1], "mean_var must return its out arrays"

    if n - ddof <= 0 and np.prod(rshape) > 0:
        assert fn_warn, "NumPy warns for this reduction (empty / ddof >= n); fastnorm did not"
    if n - ddof > 0:
        assert not fn_warn, f"unexpected warning: {fn_warn[0].message}"

    rm, rv, spread = ref_mean_var(x, axes, ddof)
    rm, rv, spread = (np.reshape(a, rshape) for a in (rm, rv, spread))
    tout, tacc = tolerances(x.dtype, res_dt)
    scale = n / max(n - ddof, 1)
    with np.errstate(invalid="ignore", over="ignore"):
        assert_close(m, rm, tout * np.abs(rm) + tacc * spread + tiny(res_dt), "mean")
        assert_close(v, rv, tout * np.abs(rv) + tacc * spread**2 * scale + tiny(res_dt), "var")


# --------------------------------------------------------------------------
# shared out= handling of the normalizers

def _build_out(spec, x, res_dt, sdt, sshape, n_stats, rng):
    """(out argument, expected exception, checks, y_out, stat outs)."""
    mode = spec["out_mode"]
    checks = []
    y_out, exc = None, None
    if mode == "inplace" and not (x.flags.writeable and x.dtype == res_dt):
        mode = "strided"
    if mode == "fresh":
        y_out = np.full(x.shape, 3, dtype=res_dt)
    elif mode == "strided":
        y_out, chk = _sentinel_out(x.shape, res_dt, rng)
        checks.append(chk)
    elif mode == "inplace":
        y_out = x
    elif mode == "wrong_shape":
        y_out, exc = np.empty(wrong_shape(x.shape), res_dt), ValueError
    elif mode == "wrong_dtype":
        y_out, exc = np.empty(x.shape, other_float(res_dt)), TypeError
    elif mode == "readonly":
        y_out, exc = np.empty(x.shape, res_dt), ValueError
        y_out.flags.writeable = False
    elif mode == "list":
        y_out, exc = np.zeros(x.shape).tolist(), TypeError
    if not spec["return_stats"]:
        return y_out, exc, checks, y_out, [None] * n_stats

    smode = spec["stats_out"]
    stats = [None] * n_stats
    if smode in ("all", "stats_only", "mean_only", "rstd_only", "stats_wrong_shape"):
        for k in range(n_stats):
            if smode == "mean_only" and k != 0 or smode == "rstd_only" and k != n_stats - 1:
                continue
            if rng.random() < 0.5:
                stats[k], chk = _sentinel_out(sshape, sdt, rng)
                checks.append(chk)
            else:
                stats[k] = np.full(sshape, 9, dtype=sdt)
        y_exc = exc
        if smode == "stats_wrong_shape":
            stats[0] = np.empty(wrong_shape(sshape), sdt)
            exc = exc or ValueError
        first = None if smode == "stats_only" and y_exc is None else y_out
        out = (first, *stats)
        y_out = first
    elif smode == "single":
        out = None if y_out is None else (y_out,)
    else:  # "none" or "bare": a bare array is the first result
        out = y_out
    return out, exc, checks, y_out, stats


def _check_result(res, *, x_shape, res_dt, sdt, sshape, n_stats, return_stats, y_out, stats_out):
    if not return_stats:
        assert isinstance(res, np.ndarray), f"expected an ndarray, got {type(res)}"
        y, stats = res, []
    else:
        assert isinstance(res, tuple) and len(res) == 1 + n_stats, \
            f"expected a tuple of {1 + n_stats}, got {type(res)}"
        y, stats = res[0], list(res[1:])
    assert y.shape == x_shape, f"y shape {y.shape} != {x_shape}"
    assert y.dtype == res_dt, f"y dtype {y.dtype} != {res_dt}"
    if y_out is not None:
        assert y is y_out, "the out array must be returned"
    for k, s in enumerate(stats):
        assert isinstance(s, np.ndarray)
        assert s.shape == sshape, f"stat {k} shape {s.shape} != {sshape}"
        assert s.dtype == sdt, f"stat {k} dtype {s.dtype} != {sdt}"
        if stats_out[k] is not None:
            assert s is stats_out[k], f"stat {k} must be returned in its out array"
    return y, stats


def _fingerprints(*arrays):
    return [fingerprint(a) if isinstance(a, np.ndarray) else None for a in arrays]


# --------------------------------------------------------------------------
# layer_norm and rms_norm

def check_layer_norm(spec, kind="layer"):
    rng = np.random.default_rng(spec["seed"])
    nd = len(spec["shape"])
    axis, eps, dtype = spec["axis"], spec["eps"], spec["req_dtype"]
    axes = norm_axes(axis, nd)
    x = build_x(spec, axes, rng)
    gamma = build_param(spec["gamma"], x.shape, axes, rng, "gamma")
    beta = build_param(spec["beta"], x.shape, axes, rng, "beta")
    res_dt = out_dtype(x.dtype, dtype)
    sdt = stat_dtype(res_dt)
    sshape = keep_shape(x.shape, axes)
    n_stats = 2 if kind == "layer" else 1
    n = n_reduced(x.shape, axes)

    g, b = expand_param(gamma, x.shape, axes), expand_param(beta, x.shape, axes)
    if kind == "layer":
        yr, mr, rr, xhat, spread = ref_layer_norm(x, axes, g, b, eps)
    else:
        yr, rr = ref_rms_norm(x, axes, g, eps)

    xabs = np.abs(np.asarray(x, dtype=np.float64))  # before x may be overwritten
    out, exc, checks, y_out, stats_out = _build_out(spec, x, res_dt, sdt, sshape, n_stats, rng)
    inplace = y_out is x
    fps = _fingerprints(x, gamma, beta)
    kw = dict(axis=axis, eps=eps, out=out, dtype=dtype, return_stats=spec["return_stats"])
    if kind == "layer":
        def call():
            return fastnorm.layer_norm(x, gamma, beta, **kw)
    else:
        def call():
            return fastnorm.rms_norm(x, gamma, **kw)

    if exc is not None:
        _expect_error(exc, call)
        assert _fingerprints(x, gamma, beta) == fps, \
            "a call rejected for its arguments modified x/gamma/beta (out=x?)"
        return
    res, warned = _record(call)
    after = _fingerprints(x, gamma, beta)
    assert after[1:] == fps[1:], "parameters were modified"
    if not inplace:
        assert after[0] == fps[0], "x was modified"
    for c in checks:
        c()
    y, stats = _check_result(res, x_shape=x.shape, res_dt=res_dt, sdt=sdt, sshape=sshape,
                             n_stats=n_stats, return_stats=spec["return_stats"],
                             y_out=y_out, stats_out=stats_out)
    if n == 0 and spec["return_stats"] and np.prod(sshape) > 0:
        assert warned, "an empty reduction must warn (as np.var does)"
    if n > 0:
        assert not warned, f"unexpected warning: {warned[0].message}"

    tout, tacc = tolerances(x.dtype, res_dt)
    st_tol = OUT_TOL[sdt]
    gabs = 1.0 if g is None else np.abs(g)
    with np.errstate(invalid="ignore", over="ignore"):
        if kind == "layer":
            babs = 0.0 if b is None else np.abs(b)
            allowed = tout * (gabs * np.abs(xhat) + babs) + tacc * gabs * rr * spread + tiny(res_dt)
            assert_close(y, yr, allowed, "y")
            if stats:
                assert_close(stats[0], mr, st_tol * np.abs(mr) + tacc * spread + tiny(sdt), "mean")
                assert_close(stats[1], rr, rr * (st_tol + tacc * spread**2 * rr**2) + tiny(sdt),
                             "rstd")
        else:
            assert_close(y, yr, (tout + tacc) * gabs * xabs * rr + tiny(res_dt), "y")
            if stats:
                assert_close(stats[0], rr, rr * (st_tol + tacc) + tiny(sdt), "rstd")


def check_rms_norm(spec):
    check_layer_norm(spec, kind="rms")


# --------------------------------------------------------------------------
# batch_norm

def check_batch_norm(spec):
    rng = np.random.default_rng(spec["seed"])
    nd = len(spec["shape"])
    axis, eps, dtype = spec["axis"], spec["eps"], spec["req_dtype"]
    training, momentum = spec["training"], spec["momentum"]
    if axis is None:
        axes = tuple(i for i in range(nd) if i != 1) if nd >= 2 else None
    else:
        axes = norm_axes(axis, nd)
    x = build_x(spec, axes or (), rng)
    if axes is None:
        with pytest.raises(ValueError):
            fastnorm.batch_norm(x)
        return
    kept = kept_axes(nd, axes)
    gamma = build_param(spec["gamma"], x.shape, kept, rng, "gamma")
    beta = build_param(spec["beta"], x.shape, kept, rng, "beta")
    rm, rv = build_running(spec["running"], x.shape, kept, rng)
    res_dt = out_dtype(x.dtype, dtype)
    sdt = stat_dtype(res_dt)
    sshape = keep_shape(x.shape, axes)
    n = n_reduced(x.shape, axes)

    kw = dict(training=training, momentum=momentum, eps=eps, axis=axis, dtype=dtype,
              return_stats=spec["return_stats"])
    fps = _fingerprints(x, gamma, beta)
    if training and n == 1 or not training and rm is None:
        # n == 1 has no batch variance; eval needs running statistics.
        with pytest.raises(ValueError):
            fastnorm.batch_norm(x, gamma, beta, rm, rv, **kw)
        assert _fingerprints(x, gamma, beta) == fps
        return
    if training and n == 0:
        # An empty batch: zero-size y, empty-reduction statistics, the
        # running statistics as they were.
        run_fp = _fingerprints(rm, rv)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            res = fastnorm.batch_norm(x, gamma, beta, rm, rv, **kw)
        y = res[0] if spec["return_stats"] else res
        assert y.shape == x.shape and y.size == 0
        if spec["return_stats"]:
            assert all(s.shape == sshape and np.isnan(s).all() for s in res[1:])
        assert _fingerprints(rm, rv) == run_fp, "an empty batch changed the running statistics"
        return

    g, b = expand_param(gamma, x.shape, kept), expand_param(beta, x.shape, kept)
    gabs = 1.0 if g is None else np.abs(g)
    babs = 0.0 if b is None else np.abs(b)
    tout, tacc = tolerances(x.dtype, res_dt)
    xd = np.asarray(x, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        if training:
            yr, mr, rr, xhat, spread = ref_layer_norm(x, axes, g, b, eps)
            allowed = tout * (gabs * np.abs(xhat) + babs) + tacc * gabs * rr * spread + tiny(res_dt)
            if rm is not None:
                _, _, m2, _, _ = moments(x, axes)
                new_m, new_v = ref_running_update(expand_param(rm, x.shape, kept),
                                                  expand_param(rv, x.shape, kept),
                                                  mr, m2 / n, n, momentum)
        else:
            mr = expand_param(rm, x.shape, kept)
            rr = 1 / np.sqrt(expand_param(rv, x.shape, kept) + eps)
            xhat = (xd - mr) * rr
            yr = xhat * (1.0 if g is None else g) + (0.0 if b is None else b)
            spread = np.zeros(sshape)
            allowed = (tout * (gabs * np.abs(xhat) + babs)
                       + tacc * gabs * rr * (np.abs(xd) + np.abs(mr)) + tiny(res_dt))

    out, exc, checks, y_out, stats_out = _build_out(spec, x, res_dt, sdt, sshape, 2, rng)
    inplace = y_out is x
    run_fp = _fingerprints(rm, rv)
    rm_obj, rv_obj = rm, rv

    def call():
        return fastnorm.batch_norm(x, gamma, beta, rm, rv, out=out, **kw)

    if exc is not None:
        _expect_error(exc, call)
        assert _fingerprints(x, gamma, beta) == fps, \
            "a call rejected for its arguments modified x/gamma/beta (out=x?)"
        return
    res, warned = _record(call)
    after = _fingerprints(x, gamma, beta)
    assert after[1:] == fps[1:], "parameters were modified"
    if not inplace:
        assert after[0] == fps[0], "x was modified"
    for c in checks:
        c()
    assert not warned, f"unexpected warning: {warned[0].message}"
    y, stats = _check_result(res, x_shape=x.shape, res_dt=res_dt, sdt=sdt, sshape=sshape,
                             n_stats=2, return_stats=spec["return_stats"],
                             y_out=y_out, stats_out=stats_out)
    st_tol = OUT_TOL[sdt]
    with np.errstate(invalid="ignore", over="ignore"):
        assert_close(y, yr, allowed, "y")
        if stats:
            assert_close(stats[0], mr, st_tol * np.abs(mr) + tacc * spread + tiny(sdt), "mean")
            assert_close(stats[1], rr, rr * (st_tol + tacc * spread**2 * rr**2) + tiny(sdt), "rstd")
        if rm is None:
            return
        assert rm is rm_obj and rv is rv_obj
        if not training:
            assert _fingerprints(rm, rv) == run_fp, "eval must not touch the running statistics"
            return
        rtol = OUT_TOL[np.dtype(rm.dtype)]
        assert_close(expand_param(rm, x.shape, kept), new_m,
                     rtol * np.abs(new_m) + momentum * tacc * spread + tiny(rm.dtype), "running_mean")
        assert_close(expand_param(rv, x.shape, kept), new_v,
                     rtol * np.abs(new_v) + momentum * tacc * spread**2 * n / (n - 1)
                     + tiny(rv.dtype), "running_var")
