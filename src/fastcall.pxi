# The fast path for small calls: the commonest calls recognized in a few
# checks made here, in C, instead of the general path's Python (which costs
# a small call more than its kernel does).
#
# The contract.  Each fast_* function takes its public function's
# arguments as the caller passed them and either
#   - returns that function's result, made by the very kernel call the
#     general path makes for these arguments (so the same bits),
#   - raises the error of an argument that breaks a rule of the contract:
#     the rule of rules.pxi the general path applies, in the general path's
#     order, or
#   - returns None, having written nothing: the caller then takes the
#     general path.
# It takes only calls that need no conversion of x, no temporary output and
# no warning: ndarrays themselves (not subclasses) of float16/32/64 in
# native byte order, aligned, with values; float gains and biases of the
# normalized or per-channel shape; out= arrays the kernel writes directly.
# Where a call is being explained (fastnorm.explain), the route it would
# take comes back instead, at the point where the kernel would run.

import fastnorm._explain as _explain

cdef extern from "numpy/arrayobject.h":
    object PyArray_NewLikeArray(cnp.ndarray prototype, int order, void* descr, int subok)

cdef object _team_size = None
cdef object _update_running = None


cdef int threads_for(Py_ssize_t size) except -1:
    """The team of a call of `size` values: one thread below the kernels'
    parallel size (without asking OpenMP, which costs a small call a third
    of a microsecond), else fastnorm's thread count."""
    global _team_size
    if size < PARALLEL_MIN:
        return 1
    if _team_size is None:
        from fastnorm._config import team_size
        _team_size = team_size
    return _team_size()


cdef tuple reduced_flags(object axis, int ndim):
    """The reduced-axis flags of axis over ndim dimensions (axes_bits, with
    its errors)."""
    cdef unsigned long long bits
    axes_bits(axis, ndim, &bits)
    return bits_flags(bits, ndim)


cdef int explaining_forward(cnp.ndarray x, y, gamma, beta, s0, s1, s2, tuple reduced,
                            int mode, int threads, bint fresh) except -1:
    """Where the call is being explained: its route, instead of running."""
    cdef dict route
    if _explain.explaining and _explain.active():
        route = explain_forward(x, y, gamma, beta, s0, s1, s2, reduced, mode, threads, fresh)
        route["fast_path"] = True
        raise _explain._Route(route)
    return 0


cdef inline object stat_result(cnp.ndarray s, int t):
    """A statistic the kernel wrote (float64) as the general path delivers
    it for results of type t (as_result in stat_type)."""
    return as_result(s, stat_type(t), None)


cdef cnp.ndarray stat_buffer(int ndim, cnp.npy_intp* dims, bint returned):
    """A float64 array of dims for statistics the kernel writes: new where
    it is returned as it is (for a float64 x), else in kept memory (only
    read here: narrowed, or used), whose pages stay mapped from one call to
    the next (fresh ones fault in on every call: short rows' statistics)."""
    if returned:
        return cnp.PyArray_EMPTY(ndim, dims, cnp.NPY_DOUBLE, 0)
    return empty_f64(ndim, dims)


cdef inline bint stats_wanted(object return_stats, object out, bint* want):
    """return_stats as the fast path takes it: False, or True with no out=
    (the statistics into out= arrays are the general path's)."""
    if return_stats is False:
        want[0] = False
        return True
    want[0] = True
    return return_stats is True and out is None


cdef object norm_target(object out, cnp.ndarray x):
    """The array a normalizer's kernel writes y into (of x's type): a new
    one like x (out None), or out= (out_rule, with its errors) where the
    kernel writes it directly (writes_directly); None for a tuple, a
    subclass or an out= written through a temporary."""
    if out is None:
        return PyArray_NewLikeArray(x, cnp.NPY_KEEPORDER, NULL, 0)
    if type(out) is tuple:
        return None
    out_rule(out, "out", cnp.PyArray_NDIM(x), cnp.PyArray_DIMS(x), cnp.PyArray_TYPE(x))
    if type(out) is not cnp.ndarray or not writes_directly(<cnp.ndarray>out, x):
        return None
    return out


def fast_norm(int mode, x, gamma, beta, axis, eps, out, dtype, return_stats):
    """layer_norm (mode center) or rms_norm (rms, beta None) over any axes
    with dtype None, gain and bias of the normalized shape: y, or with
    return_stats (and no out=) y and the statistics, (y, mean, rstd) or
    (y, rstd) as the general path gives them; or None (the contract
    above)."""
    fn_clean_upper()
    cdef cnp.ndarray xa, y, s0 = None, s1 = None
    cdef cnp.npy_intp dims[MAX_DIMS]
    cdef int ndim, threads, t, a
    cdef double e
    cdef tuple reduced
    cdef bint fresh = out is None, stats
    if dtype is not None or not stats_wanted(return_stats, out, &stats):
        return None
    if not behaved_float(x):
        return None
    xa = <cnp.ndarray>x
    ndim = cnp.PyArray_NDIM(xa)
    if ndim == 0 or cnp.PyArray_SIZE(xa) == 0:
        return None
    reduced = reduced_flags(axis, ndim)
    e = eps_of(eps)
    if True not in reduced:
        return None
    g = param_f64(gamma, reduced, cnp.PyArray_DIMS(xa))
    b = param_f64(beta, reduced, cnp.PyArray_DIMS(xa))
    if g is False or b is False:
        return None
    y = norm_target(out, xa)
    if y is None:
        return None
    if stats:
        # (mean, rstd) or (mean of squares, rstd), float64 in keepdims layout
        for a in range(ndim):
            dims[a] = 1 if reduced[a] else cnp.PyArray_DIM(xa, a)
        s0 = stat_buffer(ndim, dims, cnp.PyArray_TYPE(xa) == cnp.NPY_DOUBLE)
        s1 = stat_buffer(ndim, dims, cnp.PyArray_TYPE(xa) == cnp.NPY_DOUBLE)
    threads = threads_for(cnp.PyArray_SIZE(xa))
    explaining_forward(xa, y, g, b, s0, s1, None, reduced, mode, threads, fresh)
    run_forward(xa, y, g, b, s0, s1, None, reduced, mode, e, threads, fresh)
    if not stats:
        return y
    t = cnp.PyArray_TYPE(xa)
    if mode == MODE_RMS:
        return y, stat_result(s1, t)
    return y, stat_result(s0, t), stat_result(s1, t)


cdef bint result_array(object o, str name, int ndim, const cnp.npy_intp* dims,
                       int t) except -1:
    """Whether o, an out= array for a result of type t and these dims
    (out_rule, with its errors), is one the fast path writes directly: an
    ndarray itself, C-contiguous, aligned, native."""
    out_rule(o, name, ndim, dims, t)
    return (type(o) is cnp.ndarray and cnp.PyArray_ISCARRAY(<cnp.ndarray>o)
            and cnp.PyArray_ISNOTSWAPPED(<cnp.ndarray>o))


def fast_mean_var(x, axis, ddof, keepdims, dtype, out):
    """(mean, var) over any axes as mean_var returns them (dtype None;
    out None or two float32/float64 arrays the results go into as they are;
    an int ddof in [0, n), a bool keepdims), or None.  The kernel
    writes the mean and M2 in float64; the division by n - ddof and the
    conversion to x's dtype follow here, in the order and rounding of the
    general path (NumPy's divide and astype; float16 through NumPy's cast,
    which rounds once)."""
    fn_clean_upper()
    cdef cnp.ndarray xa, mean, m2, mean_out, var_out
    cdef cnp.npy_intp dims[MAX_DIMS]
    cdef cnp.npy_intp kept[MAX_DIMS]
    cdef int ndim, out_ndim, a, t, threads
    cdef Py_ssize_t count, n = 1
    cdef tuple reduced
    cdef double div
    if (dtype is not None or not behaved_float(x)
            or type(ddof) is not int or type(keepdims) is not bool):
        return None
    if out is not None and not (type(out) is tuple and len(<tuple>out) == 2
                                and (<tuple>out)[0] is not None and (<tuple>out)[1] is not None):
        return None
    xa = <cnp.ndarray>x
    ndim = cnp.PyArray_NDIM(xa)
    if ndim == 0 or cnp.PyArray_SIZE(xa) == 0:
        return None
    reduced = reduced_flags(axis, ndim)
    out_ndim = 0
    for a in range(ndim):
        dims[a] = cnp.PyArray_DIM(xa, a)
        if reduced[a]:
            n *= dims[a]
            dims[a] = 1
        else:
            kept[out_ndim] = dims[a]
            out_ndim += 1
    if not 0 <= ddof < n:
        return None
    # keepdims' shape and the reduced one lay out the same values: the
    # kernel writes the former, the results may take the latter's dims.
    if keepdims:
        out_ndim = ndim
        memcpy(kept, dims, ndim * sizeof(cnp.npy_intp))
    t = cnp.PyArray_TYPE(xa)
    if out is not None and not (
            (t == cnp.NPY_FLOAT or t == cnp.NPY_DOUBLE)
            and result_array((<tuple>out)[0], "out[0]", out_ndim, kept, t)
            and result_array((<tuple>out)[1], "out[1]", out_ndim, kept, t)):
        return None
    mean = stat_buffer(ndim, dims, t == cnp.NPY_DOUBLE)
    m2 = stat_buffer(ndim, dims, t == cnp.NPY_DOUBLE)
    threads = threads_for(cnp.PyArray_SIZE(xa))
    explaining_forward(xa, None, None, None, mean, m2, None, reduced, MODE_STATS, threads,
                       False)
    run_forward(xa, None, None, None, mean, m2, None, reduced, MODE_STATS, 0.0, threads, False)
    count = cnp.PyArray_SIZE(mean)
    div = <double>n
    variances(<double*>cnp.PyArray_DATA(m2), &div, 0, <double>(<Py_ssize_t>ddof), count)
    if out is not None:
        # Into the caller's arrays: the mean first, then the variance (an
        # out that is both gets the variance, as copying them in would).
        return as_result(mean, t, (<tuple>out)[0]), as_result(m2, t, (<tuple>out)[1])
    if t == cnp.NPY_FLOAT:
        mean_out = as_result(mean, t, cnp.PyArray_EMPTY(out_ndim, kept, t, 0))
        var_out = as_result(m2, t, cnp.PyArray_EMPTY(out_ndim, kept, t, 0))
    else:
        if not keepdims:
            mean = cnp.PyArray_Reshape(mean, dims_tuple(out_ndim, kept))
            m2 = cnp.PyArray_Reshape(m2, dims_tuple(out_ndim, kept))
        mean_out, var_out = as_result(mean, t, None), as_result(m2, t, None)
    if out_ndim == 0:
        return mean_out[()], var_out[()]     # NumPy scalars, as np.mean gives
    return mean_out, var_out


cdef bint running_buffer(object r, cnp.npy_intp c, bint updated):
    """Whether r is a running statistic the fast path can use: a float
    ndarray of shape (C,), which training updates in place (then
    writable)."""
    cdef cnp.ndarray a
    cdef int t
    if not behaved_float(r):
        return False
    a = <cnp.ndarray>r
    if cnp.PyArray_NDIM(a) != 1 or cnp.PyArray_DIM(a, 0) != c:
        return False
    return not updated or cnp.PyArray_ISWRITEABLE(a)


def fast_batch_norm(x, gamma, beta, running_mean, running_var, training, momentum, eps,
                    axis, out, dtype, return_stats):
    """batch_norm over every axis but 1 (axis None, or those axes spelled
    out) with dtype None, training (with more than one value a channel and
    a finite float momentum) or eval: y, or with return_stats (and no out=)
    (y, mean, rstd) as the general path gives them; or None."""
    fn_clean_upper()
    cdef cnp.ndarray xa, y, s0, s1, s2 = None, rm, rv
    cdef cnp.npy_intp dims[MAX_DIMS]
    cdef int ndim, i, threads, t
    cdef cnp.npy_intp c, n
    cdef double e, mom = 0.0
    global _update_running
    cdef bint fresh = out is None, train, stats
    cdef tuple keep
    cdef unsigned long long bits
    if dtype is not None or not stats_wanted(return_stats, out, &stats):
        return None
    if not behaved_float(x) or type(training) is not bool:
        return None
    xa = <cnp.ndarray>x
    ndim = cnp.PyArray_NDIM(xa)
    train = training
    if ndim < 2 or cnp.PyArray_SIZE(xa) == 0:
        return None
    batch_bits(axis, ndim, "batch_norm", &bits)
    if bits != every_axis(ndim) & ~2ULL:
        return None
    e = eps_of(eps)
    g = param_f64(gamma, AXIS_1[ndim], cnp.PyArray_DIMS(xa))
    b = param_f64(beta, AXIS_1[ndim], cnp.PyArray_DIMS(xa))
    if g is False or b is False:
        return None
    c = cnp.PyArray_DIM(xa, 1)
    n = cnp.PyArray_SIZE(xa) // c
    if running_mean is None and running_var is None:
        if not train:
            return None
    elif not (running_buffer(running_mean, c, train) and running_buffer(running_var, c, train)
              and not overlap(<cnp.ndarray>running_mean, <cnp.ndarray>running_var)):
        return None
    if train:
        training_values(n, (<object>xa).shape, bits)
        mom = momentum_of(momentum)
    if fresh:
        y = PyArray_NewLikeArray(xa, cnp.NPY_KEEPORDER, NULL, 0)
    else:
        if type(out) is tuple:
            return None
        if type(out) is cnp.ndarray:
            for r in (running_mean, running_var):
                if r is not None and overlap(<cnp.ndarray>out, <cnp.ndarray>r):
                    return None     # (the general path's check_disjoint)
        out_rule(out, "out", ndim, cnp.PyArray_DIMS(xa), cnp.PyArray_TYPE(xa))
        if type(out) is not cnp.ndarray or not writes_directly(<cnp.ndarray>out, xa):
            return None
        y = <cnp.ndarray>out
    for i in range(ndim):
        dims[i] = 1
    dims[1] = c
    keep = dims_tuple(ndim, dims)
    threads = threads_for(cnp.PyArray_SIZE(xa))
    if train:
        s0 = stat_buffer(ndim, dims, cnp.PyArray_TYPE(xa) == cnp.NPY_DOUBLE)
        s1 = stat_buffer(ndim, dims, cnp.PyArray_TYPE(xa) == cnp.NPY_DOUBLE)
        if running_mean is not None:
            s2 = stat_buffer(ndim, dims, False)
        explaining_forward(xa, y, g, b, s0, s1, s2, BUT_AXIS_1[ndim], MODE_CENTER, threads,
                           fresh)
        run_forward(xa, y, g, b, s0, s1, s2, BUT_AXIS_1[ndim], MODE_CENTER, e, threads, fresh)
        # The running statistics: the C loop of fastnorm._running's update
        # straight away where it takes them (contiguous buffers), else that.
        if running_mean is not None and not update_running(
                running_mean, running_var, s0, s2, mom, <double>n / <double>(n - 1)):
            if _update_running is None:
                from fastnorm._running import update_running as _update_running
            _update_running(running_mean.reshape(keep), running_var.reshape(keep), s0, s2, mom, n)
        if stats:
            t = cnp.PyArray_TYPE(xa)
            return y, stat_result(s0, t), stat_result(s1, t)
        return y
    # eval: a copy of the running mean (never a view: it is also the mean
    # the call uses, which must not change when the caller's array does) and
    # rstd from the running variance, as the general path makes them.
    rm = as_float64(running_mean).reshape(keep)
    rv = as_float64(running_var).reshape(keep)
    rstds(<double*>cnp.PyArray_DATA(rv), c, e)
    explaining_forward(xa, y, g, b, rm, rv, None, BUT_AXIS_1[ndim], MODE_GIVEN, threads, fresh)
    run_forward(xa, y, g, b, rm, rv, None, BUT_AXIS_1[ndim], MODE_GIVEN, e, threads, fresh)
    if stats:
        t = cnp.PyArray_TYPE(xa)
        return y, stat_result(rm, t), stat_result(rv, t)
    return y


cdef inline bint param_out(object p, str name, int t, int ndim,
                           const cnp.npy_intp* dims) except -1:
    """Whether the fast path writes a parameter gradient of type t and these
    dims (the parameter's named shape) into p: None, or an ndarray itself
    in native byte order (any strides) that out_rule takes (with its
    errors)."""
    if p is None:
        return True
    out_rule(p, name, ndim, dims, t)
    return type(p) is cnp.ndarray and cnp.PyArray_ISNOTSWAPPED(<cnp.ndarray>p)


def fast_norm_backward(int mode, dy, x, mean, rstd, gamma, axis, out, int n_out,
                       bint batch=False):
    """(dx, dgamma, dbeta) of layer_norm_backward (mode center, n_out 3) or
    (dx, dgamma) of rms_norm_backward (rms, mean None, n_out 2) over any
    axes, or None: dy and x of one float dtype and shape, the forward's
    statistics as float ndarrays, gamma None or a float array of the
    normalized shape, out None or a tuple of n_out entries, each None or an
    ndarray (dx writable, contiguous, of x's kind and apart from every
    input; the parameter gradients writable and of their exact shape and
    dtype).  batch: batch_norm_backward's (mode center in training, scale
    in eval; n_out 3): gamma of the kept shape, axis None every axis but 1."""
    fn_clean_upper()
    cdef cnp.ndarray xa, dya, g, m, r
    cdef cnp.npy_intp keep[MAX_DIMS]      # the statistics' keepdims shape
    cdef cnp.npy_intp kept[MAX_DIMS]      # ...without the normalized axes
    cdef cnp.npy_intp named[MAX_DIMS]     # the parameters' shape
    cdef cnp.npy_intp gkeep[MAX_DIMS]     # ...in keepdims layout
    cdef int ndim, i, n_kept = 0, n_named = 0
    cdef tuple reduced, along
    if not (behaved_float(x) and behaved_float(dy)):
        return None
    xa = <cnp.ndarray>x
    dya = <cnp.ndarray>dy
    ndim = cnp.PyArray_NDIM(xa)
    if (ndim == 0 or cnp.PyArray_TYPE(dya) != cnp.PyArray_TYPE(xa)
            or not same_dims(dya, ndim, cnp.PyArray_DIMS(xa)) or cnp.PyArray_SIZE(xa) == 0):
        return None
    if batch and axis is None:
        if ndim < 2:
            return None
        reduced = BUT_AXIS_1[ndim]
    else:
        reduced = reduced_flags(axis, ndim)
    if True not in reduced:
        return None
    # The parameters vary along the normalized axes, or batch norm's along
    # the others.
    along = tuple([flag != batch for flag in reduced])
    if True not in along:
        return None
    for i in range(ndim):
        keep[i] = 1
        gkeep[i] = 1
        if not reduced[i]:
            keep[i] = kept[n_kept] = cnp.PyArray_DIM(xa, i)
            n_kept += 1
        if along[i]:
            gkeep[i] = named[n_named] = cnp.PyArray_DIM(xa, i)
            n_named += 1
    if gamma is None:
        g = unit_gain(ndim, gkeep)
    else:
        gv = param_f64(gamma, along, cnp.PyArray_DIMS(xa))
        if gv is None or gv is False:
            return None
        g = gv
    m = None
    if mode != GRAD_RMS:
        m = stat_operand(mean, "mean", ndim, keep, n_kept, kept)
    r = stat_operand(rstd, "rstd", ndim, keep, n_kept, kept)
    if m is None:
        m = cnp.PyArray_ZEROS(ndim, keep, cnp.NPY_DOUBLE, 0)
    return grad_call(dya, xa, None, g, m, r, param_grad_type(gamma, xa), out, n_out, reduced,
                     mode, n_named, named, mode == GRAD_RMS)


cdef int param_grad_type(object gamma, cnp.ndarray xa):
    """The parameter gradients' type: a float gamma's, else float64 for a
    float64 x and float32 for others (the general path's _param_dtype)."""
    if gamma is not None:
        return cnp.PyArray_TYPE(<cnp.ndarray>gamma)
    return cnp.NPY_DOUBLE if cnp.PyArray_TYPE(xa) == cnp.NPY_DOUBLE else cnp.NPY_FLOAT


cdef cnp.ndarray unit_gain(int ndim, cnp.npy_intp* dims):
    """A gain of ones (float64, of these dims) for a gradient without one."""
    cdef cnp.ndarray g = cnp.PyArray_EMPTY(ndim, dims, cnp.NPY_DOUBLE, 0)
    cdef double* gp = <double*>cnp.PyArray_DATA(g)
    cdef Py_ssize_t i
    for i in range(cnp.PyArray_SIZE(g)):
        gp[i] = 1.0
    return g


cdef object grad_call(cnp.ndarray dya, cnp.ndarray xa, object view, cnp.ndarray g,
                      cnp.ndarray m, cnp.ndarray r, int pt, object out, int n_out,
                      tuple reduced, int mode, int n_named, cnp.npy_intp* named,
                      bint no_mean):
    """The gradient kernel's call for the fast-path entries, once their
    operands are checked: dy and x (seen in the shape `view` when not None:
    C-contiguous arrays reshaped), g, m, r as the kernel reads them, pt the
    parameter gradients' type, out as the public function takes it (None or
    a tuple of n_out entries; the parameter gradients of shape `named`).
    (dx, dgamma[, dbeta]), or None where out is not one the fast path takes.
    no_mean: m is zeros of the fast path's own (rms_norm's)."""
    cdef cnp.ndarray dx, dg, db, o
    cdef tuple outs
    cdef bint fresh
    cdef int i, threads
    outs = (None,) * n_out if out is None else out if type(out) is tuple else None
    if outs is None or len(outs) != n_out:
        return None
    fresh = outs[0] is None
    if fresh:
        dx = PyArray_NewLikeArray(xa, cnp.NPY_KEEPORDER, NULL, 0)
    else:
        out_rule(outs[0], "out", cnp.PyArray_NDIM(xa), cnp.PyArray_DIMS(xa),
                 cnp.PyArray_TYPE(xa))
        # (a view's dx must reshape without a copy: C order)
        if type(outs[0]) is not cnp.ndarray or (
                view is not None and not cnp.PyArray_IS_C_CONTIGUOUS(<cnp.ndarray>outs[0])):
            return None
        dx = <cnp.ndarray>outs[0]
        if not writes_directly(dx, xa):
            return None
        for o in (dya, xa, r) if no_mean else (dya, xa, r, m):
            if overlap(dx, o):
                return None
    for i in range(1, n_out):
        if not param_out(outs[i], f"out[{i}]", pt, n_named, named):
            return None
    # The kernel reads the parameter gradients' buffers alone: the named
    # shape here, as they are returned.
    dg = cnp.PyArray_EMPTY(n_named, named, cnp.NPY_DOUBLE, 0)
    db = cnp.PyArray_EMPTY(n_named, named, cnp.NPY_DOUBLE, 0)
    threads = threads_for(cnp.PyArray_SIZE(xa))
    if view is None:
        kdy, kx, kdx = dya, xa, dx
    else:
        kdy, kx, kdx = dya.reshape(view), xa.reshape(view), dx.reshape(view)
    if _explain.explaining and _explain.active():
        route = explain_backward(kdy, kx, kdx, g, m, r, dg, db, reduced, mode, threads, fresh)
        route["fast_path"] = True
        raise _explain._Route(route)
    run_backward(kdy, kx, kdx, g, m, r, dg, db, reduced, mode, threads, fresh,
                 PHASE_BOTH, None, None, 0.0)
    if n_out == 2:
        return dx, as_result(dg, pt, outs[1])
    return dx, as_result(dg, pt, outs[1]), as_result(db, pt, outs[2])


cdef int group_dims(cnp.ndarray xa, object num_groups, object channel_axis,
                    cnp.npy_intp* vdims, cnp.npy_intp* kdims) except -2:
    """group_norm's view of x: its shape with the channel axis split into
    (groups, channels per group), in vdims (ndim + 1 of them), and its
    statistics' keepdims shape (1 but on axis 0 and the groups') in kdims;
    the channel axis (channel_axis_of, groups_of: their errors), or -1
    for an x the fast path leaves to the general path (not C-contiguous,
    empty, of fewer than 2 dimensions or too many)."""
    cdef int ndim = cnp.PyArray_NDIM(xa)
    if (ndim < 2 or ndim >= MAX_DIMS or cnp.PyArray_SIZE(xa) == 0
            or not cnp.PyArray_IS_C_CONTIGUOUS(xa)):
        return -1
    return group_view(ndim, cnp.PyArray_DIMS(xa), num_groups, channel_axis, vdims, kdims)


cdef inline tuple group_reduced(int vndim, int ch):
    """The reduced-axis flags of group_norm's view: all but 0 and the groups'."""
    return tuple([a != 0 and a != ch for a in range(vndim)])


cdef object group_gain(object p, int ch, cnp.npy_intp* vdims, int vndim):
    """A group_norm gain or bias as its kernel takes it on the view of vndim
    dims (param_f64, varying along the groups and the channels in each):
    None for None, False unless a float ndarray of shape (C,)."""
    if p is None:
        return None
    if not (type(p) is cnp.ndarray and cnp.PyArray_NDIM(<cnp.ndarray>p) == 1
            and cnp.PyArray_DIM(<cnp.ndarray>p, 0) == vdims[ch] * vdims[ch + 1]):
        return False
    return param_f64(p.reshape((vdims[ch], vdims[ch + 1])),
                     tuple([a == ch or a == ch + 1 for a in range(vndim)]), vdims)


def fast_group_norm(x, num_groups, gamma, beta, channel_axis, eps, out, dtype, return_stats):
    """group_norm (and instance_norm through it) of a C-contiguous x with
    dtype None, gain and bias of shape (C,): y, or with return_stats (and no
    out=) (y, mean, rstd) as the general path gives them; or None.  The
    kernel call is the general path's: x seen with its channel axis split
    into (groups, channels per group), statistics over every axis of that
    view but 0 and the groups'."""
    fn_clean_upper()
    cdef cnp.ndarray xa, y, s0 = None, s1 = None
    cdef cnp.npy_intp vdims[MAX_DIMS]
    cdef cnp.npy_intp kdims[MAX_DIMS]     # the view's statistics
    cdef cnp.npy_intp sdims[MAX_DIMS]     # ...as returned
    cdef int ndim, ch, threads, t
    cdef double e
    cdef bint fresh = out is None, stats
    cdef tuple reduced, view
    if dtype is not None or not stats_wanted(return_stats, out, &stats):
        return None
    if not behaved_float(x):
        return None
    xa = <cnp.ndarray>x
    ch = group_dims(xa, num_groups, channel_axis, vdims, kdims)
    if ch < 0:
        return None
    e = eps_of(eps)
    ndim = cnp.PyArray_NDIM(xa)
    view = dims_tuple(ndim + 1, vdims)
    reduced = group_reduced(ndim + 1, ch)
    g = group_gain(gamma, ch, vdims, ndim + 1)
    b = group_gain(beta, ch, vdims, ndim + 1)
    if g is False or b is False:
        return None
    y = norm_target(out, xa)
    if y is None:
        return None
    if stats:
        s0 = stat_buffer(ndim + 1, kdims, cnp.PyArray_TYPE(xa) == cnp.NPY_DOUBLE)
        s1 = stat_buffer(ndim + 1, kdims, cnp.PyArray_TYPE(xa) == cnp.NPY_DOUBLE)
    xv = xa.reshape(view)
    yv = y.reshape(view)
    threads = threads_for(cnp.PyArray_SIZE(xa))
    explaining_forward(xv, yv, g, b, s0, s1, None, reduced, MODE_CENTER, threads, fresh)
    run_forward(xv, yv, g, b, s0, s1, None, reduced, MODE_CENTER, e, threads, fresh)
    if not stats:
        return y
    t = cnp.PyArray_TYPE(xa)
    group_stat_dims(ndim, ch, vdims, sdims)
    view = dims_tuple(ndim, sdims)
    return y, stat_result(s0.reshape(view), t), stat_result(s1.reshape(view), t)


def fast_group_norm_backward(dy, x, mean, rstd, num_groups, gamma, channel_axis, out):
    """(dx, dgamma, dbeta) of group_norm_backward, or None: dy and x
    C-contiguous of one float dtype and shape, mean and rstd float ndarrays
    of the forward's shape, gamma None or a float ndarray of shape (C,), out
    None or a tuple of 3 as fast_norm_backward takes it.  The kernel call is
    the general path's, on the forward's view of x (fast_group_norm)."""
    fn_clean_upper()
    cdef cnp.ndarray xa, dya, m, r, g
    cdef cnp.npy_intp vdims[MAX_DIMS]
    cdef cnp.npy_intp sdims[MAX_DIMS]     # the statistics as returned
    cdef cnp.npy_intp kdims[MAX_DIMS]     # ...as the kernel reads them
    cdef cnp.npy_intp gkeep[MAX_DIMS]     # the gain as the kernel reads it
    cdef cnp.npy_intp c
    cdef int ndim, ch, a
    if not (behaved_float(x) and behaved_float(dy)):
        return None
    xa = <cnp.ndarray>x
    dya = <cnp.ndarray>dy
    ndim = cnp.PyArray_NDIM(xa)
    if (cnp.PyArray_TYPE(dya) != cnp.PyArray_TYPE(xa)
            or not same_dims(dya, ndim, cnp.PyArray_DIMS(xa))
            or not cnp.PyArray_IS_C_CONTIGUOUS(dya)):
        return None
    ch = group_dims(xa, num_groups, channel_axis, vdims, kdims)
    if ch < 0:
        return None
    for a in range(ndim + 1):
        gkeep[a] = vdims[a] if a == ch or a == ch + 1 else 1
    group_stat_dims(ndim, ch, vdims, sdims)
    c = vdims[ch] * vdims[ch + 1]
    if gamma is None:
        g = unit_gain(ndim + 1, gkeep)
    else:
        gv = group_gain(gamma, ch, vdims, ndim + 1)
        if gv is False:
            return None
        g = gv
    view = dims_tuple(ndim + 1, kdims)
    m = stat_operand(mean, "mean", ndim, sdims, ndim, sdims).reshape(view)
    r = stat_operand(rstd, "rstd", ndim, sdims, ndim, sdims).reshape(view)
    return grad_call(dya, xa, dims_tuple(ndim + 1, vdims), g, m, r, param_grad_type(gamma, xa),
                     out, 3, group_reduced(ndim + 1, ch), GRAD_CENTER, 1, &c, False)
