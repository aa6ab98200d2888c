"""numba's side of each row: the loops a user would hand-write for the op,
compiled with ``numba.njit(parallel=True, fastmath=False, cache=False)``,
``numba.prange`` over the slices, writing into outputs allocated once.

x is viewed without a copy in one of three forms, as its layout permits
(C order; anything else raises NotImplementedError):

* rows ``(K, L)``: the reduced axes are the trailing ones (layer_norm,
  rms_norm, mean_var over rows).  One ``prange`` over the rows; per row a
  two-pass mean then variance in float64, then the output.
* columns ``(R, C)``: the reduced axes are the leading ones (mean_var over
  columns, layer_norm over axis 0, batch_norm (N, C) and NHWC).  Per-column
  sums accumulate over rows in float64 (the inner loop runs along the
  columns, so it vectorizes); the rows are split into one chunk per thread,
  each with its own partial sums, added at the end.  A second such pass
  gives the variance, a third (``prange`` over rows) the output.
* channels in the middle ``(A, C, B)``: batch_norm NCHW (every axis but the
  one kept).  One ``prange`` over the channels; per channel the two passes
  and the output, along its contiguous runs of B elements.

Gradients: layer_norm and rms_norm over rows (dx per row, dgamma/dbeta as
per-chunk partial sums added at the end); the others raise
NotImplementedError.  Compilation happens on the first call for each dtype
(the agreement check, before any timing).

``load`` imports numba; nothing here does at import time (asv imports this
module where numba is not installed).
"""
import numpy as np

from .inputs import EPS, MOMENTUM

_KERNELS = {}


def _compile(numba):
    """The kernels, as numba dispatchers (compiled per dtype on first call)."""
    prange = numba.prange
    jit = numba.njit(parallel=True, fastmath=False, cache=False)
    threads = numba.get_num_threads

    # ---- rows (K, L): reduce along each row ---------------------------------

    @jit
    def rows_layer_norm(x, g, b, eps, out):
        k, n = x.shape
        for i in prange(k):
            s = 0.0
            for j in range(n):
                s += x[i, j]
            m = s / n
            q = 0.0
            for j in range(n):
                d = x[i, j] - m
                q += d * d
            r = 1.0 / np.sqrt(q / n + eps)
            for j in range(n):
                out[i, j] = (x[i, j] - m) * r * g[j] + b[j]

    @jit
    def rows_rms_norm(x, g, eps, out):
        k, n = x.shape
        for i in prange(k):
            q = 0.0
            for j in range(n):
                v = np.float64(x[i, j])
                q += v * v
            r = 1.0 / np.sqrt(q / n + eps)
            for j in range(n):
                out[i, j] = x[i, j] * r * g[j]

    @jit
    def rows_mean_var(x, mean, var):
        k, n = x.shape
        for i in prange(k):
            s = 0.0
            for j in range(n):
                s += x[i, j]
            m = s / n
            q = 0.0
            for j in range(n):
                d = x[i, j] - m
                q += d * d
            mean[i] = m
            var[i] = q / n

    # ---- columns (R, C): reduce along each column ---------------------------

    @jit
    def cols_stats(x):
        """float64 mean and (biased) variance of every column."""
        r, c = x.shape
        chunks = min(threads(), r)
        step = (r + chunks - 1) // chunks
        part = np.zeros((chunks, c))
        for t in prange(chunks):
            for i in range(t * step, min(r, (t + 1) * step)):
                for j in range(c):
                    part[t, j] += x[i, j]
        mean = np.zeros(c)
        for t in range(chunks):
            for j in range(c):
                mean[j] += part[t, j]
        for j in range(c):
            mean[j] /= r
        part[:] = 0.0
        for t in prange(chunks):
            for i in range(t * step, min(r, (t + 1) * step)):
                for j in range(c):
                    d = x[i, j] - mean[j]
                    part[t, j] += d * d
        var = np.zeros(c)
        for t in range(chunks):
            for j in range(c):
                var[j] += part[t, j]
        for j in range(c):
            var[j] /= r
        return mean, var

    @jit
    def cols_mean_var(x, mean, var):
        m, v = cols_stats(x)
        mean[:] = m
        var[:] = v

    @jit
    def cols_apply(x, m, rstd, g, b, out):
        """out = (x - m) * rstd * g + b, all four along the columns."""
        r, c = x.shape
        for i in prange(r):
            for j in range(c):
                out[i, j] = (x[i, j] - m[j]) * rstd[j] * g[j] + b[j]

    @jit
    def cols_layer_norm(x, g, b, eps, out):
        """Normalized over the rows (axis 0); g and b run along the rows."""
        m, v = cols_stats(x)
        rstd = 1.0 / np.sqrt(v + eps)
        r, c = x.shape
        for i in prange(r):
            gi, bi = g[i], b[i]
            for j in range(c):
                out[i, j] = (x[i, j] - m[j]) * rstd[j] * gi + bi

    @jit
    def cols_batch_norm(x, g, b, run_m, run_v, training, momentum, eps, out):
        r, c = x.shape
        if training:
            m, v = cols_stats(x)
            for j in range(c):
                run_m[j] = (1 - momentum) * run_m[j] + momentum * m[j]
                run_v[j] = (1 - momentum) * run_v[j] + momentum * v[j] * (r / (r - 1))
        else:
            m, v = run_m.astype(np.float64), run_v.astype(np.float64)
        cols_apply(x, m, 1.0 / np.sqrt(v + eps), g, b, out)

    # ---- channels in the middle (A, C, B): reduce over A and B --------------

    @jit
    def mid_batch_norm(x, g, b, run_m, run_v, training, momentum, eps, out):
        na, nc, nb = x.shape
        n = na * nb
        for c in prange(nc):
            if training:
                s = 0.0
                for a in range(na):
                    for k in range(nb):
                        s += x[a, c, k]
                m = s / n
                q = 0.0
                for a in range(na):
                    for k in range(nb):
                        d = x[a, c, k] - m
                        q += d * d
                v = q / n
                run_m[c] = (1 - momentum) * run_m[c] + momentum * m
                run_v[c] = (1 - momentum) * run_v[c] + momentum * v * (n / (n - 1))
            else:
                m, v = np.float64(run_m[c]), np.float64(run_v[c])
            r = 1.0 / np.sqrt(v + eps)
            gc, bc = g[c], b[c]
            for a in range(na):
                for k in range(nb):
                    out[a, c, k] = (x[a, c, k] - m) * r * gc + bc

    # ---- gradients over rows -------------------------------------------------

    @jit
    def rows_layer_norm_backward(dy, x, mean, rstd, g, dx, dg, db):
        k, n = x.shape
        chunks = min(threads(), k)
        step = (k + chunks - 1) // chunks
        part_g = np.zeros((chunks, n))
        part_b = np.zeros((chunks, n))
        for t in prange(chunks):
            for i in range(t * step, min(k, (t + 1) * step)):
                m, r = np.float64(mean[i]), np.float64(rstd[i])
                sa = 0.0
                sb = 0.0
                for j in range(n):
                    xh = (x[i, j] - m) * r
                    gd = dy[i, j] * np.float64(g[j])
                    sa += gd
                    sb += gd * xh
                    part_g[t, j] += dy[i, j] * xh
                    part_b[t, j] += dy[i, j]
                sa /= n
                sb /= n
                for j in range(n):
                    xh = (x[i, j] - m) * r
                    dx[i, j] = r * (dy[i, j] * np.float64(g[j]) - sa - xh * sb)
        for j in range(n):
            tg = 0.0
            tb = 0.0
            for t in range(chunks):
                tg += part_g[t, j]
                tb += part_b[t, j]
            dg[j] = tg
            db[j] = tb

    @jit
    def rows_rms_norm_backward(dy, x, rstd, g, dx, dg):
        k, n = x.shape
        chunks = min(threads(), k)
        step = (k + chunks - 1) // chunks
        part_g = np.zeros((chunks, n))
        for t in prange(chunks):
            for i in range(t * step, min(k, (t + 1) * step)):
                r = np.float64(rstd[i])
                sc = 0.0
                for j in range(n):
                    xh = x[i, j] * r
                    sc += dy[i, j] * np.float64(g[j]) * xh
                    part_g[t, j] += dy[i, j] * xh
                sc /= n
                for j in range(n):
                    dx[i, j] = r * (dy[i, j] * np.float64(g[j]) - x[i, j] * r * sc)
        for j in range(n):
            tg = 0.0
            for t in range(chunks):
                tg += part_g[t, j]
            dg[j] = tg

    return {name: f for name, f in locals().items() if isinstance(f, numba.core.dispatcher.Dispatcher)}


def load():
    """(numba, its kernels); ImportError when numba is absent."""
    import numba
    if not _KERNELS:
        _KERNELS.update(_compile(numba))
    return numba, _KERNELS


def _trailing(inp):
    return inp.axes == tuple(range(inp.x.ndim - len(inp.axes), inp.x.ndim))


def _leading(inp):
    return inp.axes == tuple(range(len(inp.axes)))


def _rows(inp, a):
    """a (x, dy, or an output like them) as (K, L): the reduced axes last."""
    return a.reshape(-1, int(np.prod([inp.x.shape[i] for i in inp.axes])))


def _columns(inp, a):
    """a as (R, C): the reduced axes first."""
    return a.reshape(int(np.prod([inp.x.shape[i] for i in inp.axes])), -1)


def _stats_vector(s):
    """A per-slice statistic the forward returned (keepdims) as a vector."""
    return np.ascontiguousarray(s).reshape(-1)


def _layer_norm(k, inp):
    out = np.empty_like(inp.x)
    g, b = inp.gamma.reshape(-1), inp.beta.reshape(-1)
    if _trailing(inp):
        x2, o2 = _rows(inp, inp.x), _rows(inp, out)
        kernel = k["rows_layer_norm"]
    elif _leading(inp):
        x2, o2 = _columns(inp, inp.x), _columns(inp, out)
        kernel = k["cols_layer_norm"]
    else:
        raise NotImplementedError("numba code here: layer_norm over leading or trailing axes")

    def call():
        kernel(x2, g, b, EPS, o2)
        return out
    return call


def _rms_norm(k, inp):
    if not _trailing(inp):
        raise NotImplementedError("numba code here: rms_norm over trailing axes")
    out = np.empty_like(inp.x)
    x2, o2, g = _rows(inp, inp.x), _rows(inp, out), inp.gamma.reshape(-1)
    kernel = k["rows_rms_norm"]

    def call():
        kernel(x2, g, EPS, o2)
        return out
    return call


def _mean_var(k, inp):
    kept = [inp.x.shape[i] for i in inp.kept]
    mean, var = np.empty(kept, inp.dtype), np.empty(kept, inp.dtype)
    if _trailing(inp):
        x2, kernel = _rows(inp, inp.x), k["rows_mean_var"]
    elif _leading(inp):
        x2, kernel = _columns(inp, inp.x), k["cols_mean_var"]
    else:
        raise NotImplementedError("numba code here: mean_var over leading or trailing axes")
    m1, v1 = mean.reshape(-1), var.reshape(-1)

    def call():
        kernel(x2, m1, v1)
        return mean, var
    return call


def _batch_norm(k, inp, training):
    if len(inp.kept) != 1:
        raise NotImplementedError("batch norm over all but more than one axis")
    c = inp.kept[0]
    shape = inp.x.shape
    a, nc, nb = int(np.prod(shape[:c])), shape[c], int(np.prod(shape[c + 1:]))
    out = np.empty_like(inp.x)
    # Their own copies: updated in place while training, as fastnorm's are.
    run_m, run_v = inp.running_mean.copy(), inp.running_var.copy()
    g, b = inp.gamma, inp.beta
    if nb == 1:      # channels last: (N, C), NHWC
        x3, o3, kernel = inp.x.reshape(a, nc), out.reshape(a, nc), k["cols_batch_norm"]
    else:            # channels in the middle: NCHW
        x3, o3, kernel = inp.x.reshape(a, nc, nb), out.reshape(a, nc, nb), k["mid_batch_norm"]

    def call():
        kernel(x3, g, b, run_m, run_v, training, MOMENTUM, EPS, o3)
        return out
    return call


def _layer_norm_backward(k, inp):
    if not _trailing(inp):
        raise NotImplementedError("numba code here: gradients over rows only")
    dx, dg, db = np.empty_like(inp.x), np.empty_like(inp.gamma), np.empty_like(inp.gamma)
    dy2, x2, dx2 = _rows(inp, inp.dy), _rows(inp, inp.x), _rows(inp, dx)
    mean, rstd = _stats_vector(inp.mean), _stats_vector(inp.rstd)
    g, dg1, db1 = inp.gamma.reshape(-1), dg.reshape(-1), db.reshape(-1)
    kernel = k["rows_layer_norm_backward"]

    def call():
        kernel(dy2, x2, mean, rstd, g, dx2, dg1, db1)
        return dx, dg, db
    return call


def _rms_norm_backward(k, inp):
    if not _trailing(inp):
        raise NotImplementedError("numba code here: gradients over rows only")
    dx, dg = np.empty_like(inp.x), np.empty_like(inp.gamma)
    dy2, x2, dx2 = _rows(inp, inp.dy), _rows(inp, inp.x), _rows(inp, dx)
    rstd = _stats_vector(inp.rstd)
    g, dg1 = inp.gamma.reshape(-1), dg.reshape(-1)
    kernel = k["rows_rms_norm_backward"]

    def call():
        kernel(dy2, x2, rstd, g, dx2, dg1)
        return dx, dg
    return call


def build(kernels, inp):
    """The numba call for inp.op: a zero-argument callable returning the
    outputs, written into arrays allocated here once (NotImplementedError
    where this module has no numba code for the op or layout)."""
    op = inp.op
    if not inp.x.flags.c_contiguous:
        raise NotImplementedError("numba code here takes C-contiguous arrays")
    if op == "layer_norm":
        return _layer_norm(kernels, inp)
    if op == "rms_norm":
        return _rms_norm(kernels, inp)
    if op == "mean_var":
        return _mean_var(kernels, inp)
    if op in ("batch_norm", "batch_norm_eval"):
        return _batch_norm(kernels, inp, training=op == "batch_norm")
    if op == "layer_norm_backward":
        return _layer_norm_backward(kernels, inp)
    if op == "rms_norm_backward":
        return _rms_norm_backward(kernels, inp)
    if op.endswith("_backward"):
        raise NotImplementedError("no numba code for gradients "
                                  "(but layer_norm's and rms_norm's over rows)")
    raise NotImplementedError(op)
