# Operands in the kernels' form: gains, biases and statistics widened to
# float64 (large ones in kept scratch blocks, whose pages stay mapped from
# one call to the next), float64 results narrowed back, and batch norm's
# running statistics updated in one loop that rounds as NumPy's expressions
# do.

cdef void widen(const char* p, Py_ssize_t stride, Py_ssize_t n, double* out,
                in_t* kind) noexcept nogil:
    cdef Py_ssize_t i
    cdef const in_t* c = <const in_t*>p
    if in_t is not half_t and stride == sizeof(in_t):
        for i in range(n):      # a loop of its own, which vectorizes
            out[i] = c[i]
        return
    for i in range(n):
        out[i] = sload(p + i * stride, kind)


cdef inline void running_loop(table_t* rm, table_t* rv, const double* mean,
                              const double* var, Py_ssize_t n, double momentum,
                              double unbias) noexcept nogil:
    """update_running's arithmetic over n values of buffers of one type, a
    vector at a time (each product rounded before its sum, as one at a
    time)."""
    cdef Py_ssize_t i = 0
    cdef double keep = 1.0 - momentum
    cdef fn_vd k = fn_set1(keep), mo = fn_set1(momentum), ub = fn_set1(unbias)
    while i + FN_W <= n:
        if table_t is float:
            fn_store_f32(rm + i, fn_vsum_rounded(fn_mul(k, fn_load_f32(rm + i)),
                                                 fn_mul(mo, fn_load_f64(mean + i))))
            fn_store_f32(rv + i, fn_vsum_rounded(fn_mul(k, fn_load_f32(rv + i)),
                                                 fn_mul(fn_mul(mo, fn_load_f64(var + i)), ub)))
        else:
            fn_store_f64(rm + i, fn_vsum_rounded(fn_mul(k, fn_load_f64(rm + i)),
                                                 fn_mul(mo, fn_load_f64(mean + i))))
            fn_store_f64(rv + i, fn_vsum_rounded(fn_mul(k, fn_load_f64(rv + i)),
                                                 fn_mul(fn_mul(mo, fn_load_f64(var + i)), ub)))
        i = i + FN_W
    while i < n:
        rm[i] = <table_t>fn_sum_rounded(keep * <double>rm[i], momentum * mean[i])
        rv[i] = <table_t>fn_sum_rounded(keep * <double>rv[i], momentum * var[i] * unbias)
        i = i + 1


cpdef bint update_running(cnp.ndarray rm, cnp.ndarray rv, cnp.ndarray mean,
                          cnp.ndarray var, double momentum, double unbias):
    """batch_norm's running statistics, updated in place as
    fastnorm/_running.py's NumPy expressions do it, rounding for rounding:
    rm = (1 - momentum) rm + momentum mean, rv = (1 - momentum) rv +
    (momentum var) unbias, in float64, then stored in the buffers' dtype.
    Done (True) when rm and rv are aligned, writable, C-contiguous arrays of
    one native dtype, float32 or float64, and mean and var C-contiguous
    native float64 arrays of as many values; else False, with nothing
    written (eight NumPy operations on a few hundred values cost more than
    a small call's kernel)."""
    fn_clean_upper()
    cdef Py_ssize_t n = cnp.PyArray_SIZE(rm)
    cdef int t = cnp.PyArray_TYPE(rm)
    cdef const double* m = <const double*>cnp.PyArray_DATA(mean)
    cdef const double* v = <const double*>cnp.PyArray_DATA(var)
    cdef cnp.ndarray a
    if t != cnp.NPY_FLOAT and t != cnp.NPY_DOUBLE:
        return False
    for a in (rm, rv):
        if not (cnp.PyArray_TYPE(a) == t and cnp.PyArray_ISNOTSWAPPED(a)
                and cnp.PyArray_ISCARRAY(a) and cnp.PyArray_SIZE(a) == n):
            return False
    for a in (mean, var):
        if not (cnp.PyArray_TYPE(a) == cnp.NPY_DOUBLE and cnp.PyArray_ISNOTSWAPPED(a)
                and cnp.PyArray_ISCARRAY_RO(a) and cnp.PyArray_SIZE(a) == n):
            return False
    if t == cnp.NPY_FLOAT:
        running_loop(<float*>cnp.PyArray_DATA(rm), <float*>cnp.PyArray_DATA(rv), m, v, n,
                     momentum, unbias)
    else:
        running_loop(<double*>cnp.PyArray_DATA(rm), <double*>cnp.PyArray_DATA(rv), m, v, n,
                     momentum, unbias)
    return True


def param_named(p, tuple along, shape):
    """param_f64 for an x of this shape (along: its flags, one an axis):
    the gain or bias as the kernels take it, or False where p is not a
    float ndarray of native byte order and the named shape."""
    fn_clean_upper()
    cdef cnp.npy_intp dims[MAX_DIMS]
    cdef int a, ndim = len(shape)
    if ndim > MAX_DIMS or len(along) != ndim:
        raise ValueError(f"param_named takes up to {MAX_DIMS} dimensions and a flag each")
    for a in range(ndim):
        dims[a] = shape[a]
    return param_f64(p, along, dims)


cdef object param_f64(object p, tuple along, const cnp.npy_intp* dims):
    """A gain or bias that varies along the axes flagged in `along` of an x
    of dims, as the kernels take it: a new C-contiguous float64 array in
    keepdims layout (x's sizes along `along`, 1 elsewhere), which shares
    memory with nothing a call writes.  None for None; False unless p is a
    float ndarray of native byte order and the named shape (x's sizes
    along `along`, in order), in any strides.  Widened here: NumPy's astype
    and reshape cost a small call more than the conversion."""
    cdef cnp.npy_intp keep[MAX_DIMS]
    cdef cnp.ndarray a, out
    cdef int ndim = len(along), i, k = 0, t
    if p is None:
        return None
    if type(p) is not cnp.ndarray:
        return False
    a = <cnp.ndarray>p
    t = cnp.PyArray_TYPE(a)
    if (not (t == cnp.NPY_FLOAT16 or t == cnp.NPY_FLOAT or t == cnp.NPY_DOUBLE)
            or not cnp.PyArray_ISNOTSWAPPED(a)):
        return False
    for i in range(ndim):
        keep[i] = 1
        if along[i]:
            if k == cnp.PyArray_NDIM(a) or cnp.PyArray_DIM(a, k) != dims[i]:
                return False
            keep[i] = dims[i]
            k += 1
    if k != cnp.PyArray_NDIM(a):
        return False
    if k != 1 or not cnp.PyArray_ISALIGNED(a):
        # The named shape's values in C order are the keepdims layout's.
        return as_float64(a).reshape(tuple([keep[i] for i in range(ndim)]))
    out = empty_f64(ndim, keep)
    if t == cnp.NPY_FLOAT16:
        widen(<const char*>cnp.PyArray_DATA(a), cnp.PyArray_STRIDE(a, 0), cnp.PyArray_SIZE(a),
              <double*>cnp.PyArray_DATA(out), <half_t*>NULL)
    elif t == cnp.NPY_FLOAT:
        widen(<const char*>cnp.PyArray_DATA(a), cnp.PyArray_STRIDE(a, 0), cnp.PyArray_SIZE(a),
              <double*>cnp.PyArray_DATA(out), <float*>NULL)
    else:
        widen(<const char*>cnp.PyArray_DATA(a), cnp.PyArray_STRIDE(a, 0), cnp.PyArray_SIZE(a),
              <double*>cnp.PyArray_DATA(out), <double*>NULL)
    return out


cdef class _KeptBlock:
    """Owner of a scratch block lent to a NumPy array: the block goes back
    (to be kept for the next call, see scratch.h) with the array."""
    cdef void* data

    def __dealloc__(self):
        fn_free(self.data)


# The least double that rounds to inf as float32: FLT_MAX plus half its last place.
cdef double FLOAT32_ROUNDS_TO_INF = 3.4028235677973366e38   # 0x1.ffffffp127


cdef bint narrow(const double* v, Py_ssize_t n, char* out, Py_ssize_t stride) noexcept nogil:
    """out[i] = v[i] as float32 (out's byte stride), each value rounded once
    as NumPy's cast rounds it; false where a finite value overflowed, which
    NumPy's cast reports with a warning."""
    cdef Py_ssize_t i = 0
    cdef float f
    cdef bint ok = True
    cdef fn_vd w
    if stride == sizeof(float):
        # A vector at a time while every value is finite and rounds to a
        # finite float32 (below FLT_MAX and half its last place).
        while i + FN_W <= n:
            w = fn_load_f64(v + i)
            if not fn_all_between(w, -FLOAT32_ROUNDS_TO_INF, FLOAT32_ROUNDS_TO_INF):
                break
            fn_store_f32(<float*>out + i, w)
            i = i + FN_W
    while i < n:
        f = <float>v[i]
        (<float*>(out + i * stride))[0] = f
        ok = ok and (isfinite(f) or not isfinite(v[i]))
        i = i + 1
    return ok


def as_float64(cnp.ndarray a):
    """a (any real dtype and strides) as a new C-contiguous float64 array
    of its shape.  Large ones live in the kept scratch blocks: NumPy's
    astype gets fresh pages from the C library for each, and their faults
    cost more than the conversion.  Contiguous floats are widened here: a
    small call would pay more for NumPy's cast set-up than for the values."""
    fn_clean_upper()
    cdef cnp.ndarray out = empty_f64(a.ndim, cnp.PyArray_DIMS(a))
    cdef int t = cnp.PyArray_TYPE(a)
    cdef const char* p = <const char*>cnp.PyArray_DATA(a)
    cdef double* o = <double*>cnp.PyArray_DATA(out)
    if not (cnp.PyArray_IS_C_CONTIGUOUS(a) and cnp.PyArray_ISALIGNED(a)
            and cnp.PyArray_ISNOTSWAPPED(a)):
        cnp.PyArray_CopyInto(out, a)
    elif t == cnp.NPY_DOUBLE:
        widen(p, sizeof(double), cnp.PyArray_SIZE(a), o, <double*>NULL)
    elif t == cnp.NPY_FLOAT:
        widen(p, sizeof(float), cnp.PyArray_SIZE(a), o, <float*>NULL)
    elif t == cnp.NPY_FLOAT16:
        widen(p, sizeof(half_t), cnp.PyArray_SIZE(a), o, <half_t*>NULL)
    else:
        cnp.PyArray_CopyInto(out, a)
    return out


cdef cnp.ndarray empty_f64(int ndim, cnp.npy_intp* dims):
    """A new C-contiguous float64 array, in a kept scratch block when it is
    large enough to be kept (see as_float64)."""
    cdef Py_ssize_t nbytes = sizeof(double), a
    cdef _KeptBlock owner
    cdef cnp.ndarray out
    for a in range(ndim):
        nbytes = nbytes * dims[a]
    if nbytes < <Py_ssize_t>FN_KEEP_MIN:
        return cnp.PyArray_EMPTY(ndim, dims, cnp.NPY_DOUBLE, 0)
    owner = _KeptBlock()
    owner.data = fn_malloc(nbytes)
    if owner.data == NULL:
        raise MemoryError("fastnorm: could not allocate scratch memory")
    out = cnp.PyArray_SimpleNewFromData(ndim, dims, cnp.NPY_DOUBLE, owner.data)
    cnp.set_array_base(out, owner)
    return out


