# The contract's argument rules, each written once.  The general path
# (fastnorm._args and the public functions) calls the def functions here,
# the small calls' path (fastcall.pxi) the cdef ones under them: both admit
# the same arguments and raise the same errors.

import operator
from numpy.exceptions import AxisError

cdef extern from "Python.h":
    long PyLong_AsLongAndOverflow(object v, int* overflow) except? -1


# --------------------------------------------------------------------------
# dtypes

cdef inline bint behaved_float(object a):
    """Whether a is an ndarray itself (no subclass) of float16/32/64 in
    native byte order, aligned: what the kernels read where it is."""
    cdef int t
    if type(a) is not cnp.ndarray:
        return False
    t = cnp.PyArray_TYPE(<cnp.ndarray>a)
    return ((t == cnp.NPY_FLOAT16 or t == cnp.NPY_FLOAT or t == cnp.NPY_DOUBLE)
            and cnp.PyArray_ISNOTSWAPPED(<cnp.ndarray>a) and cnp.PyArray_ISALIGNED(<cnp.ndarray>a))


def behaved(a):
    """Whether the kernels read a where it is, with no conversion."""
    return behaved_float(a)


cdef inline int stat_type(int t) noexcept:
    """The type of the statistics (and of gain-less parameter gradients)
    for results of type t: float64 for float64, float32 for the others."""
    return cnp.NPY_DOUBLE if t == cnp.NPY_DOUBLE else cnp.NPY_FLOAT


cdef object F16 = np.dtype(np.float16)
cdef object F32 = np.dtype(np.float32)
cdef object F64 = np.dtype(np.float64)


def result_dtypes(x_dtype, dtype):
    """(output dtype, statistics dtype) for input dtype x_dtype and the
    user's dtype= (None: x's own float dtype, float64 for integers)."""
    if dtype is None:
        out = x_dtype if x_dtype == F32 or x_dtype == F64 or x_dtype == F16 else F64
    else:
        try:
            out = np.dtype(dtype)
        except TypeError as e:
            raise TypeError(f"dtype={dtype!r} is not a NumPy dtype") from e
        if not (out == F32 or out == F64 or out == F16):
            raise TypeError(f"dtype={out} is not supported; use float16, "
                            "float32 or float64")
    return out, (F64 if stat_type(out.num) == cnp.NPY_DOUBLE else F32)


def param_grad_dtype(gamma_dtype, x_dtype):
    """Parameter gradients come in gamma's float dtype (native byte order,
    as NumPy's results are); with no (float) gamma, in the statistics'."""
    if gamma_dtype is not None:
        return np.dtype(gamma_dtype).newbyteorder("=")
    return F64 if stat_type(np.dtype(x_dtype).num) == cnp.NPY_DOUBLE else F32


# --------------------------------------------------------------------------
# axes

cdef inline unsigned long long every_axis(int ndim) noexcept:
    """The bits of all ndim axes (at most 64)."""
    return (1ULL << ndim) - 1 if ndim < 64 else ~0ULL


cdef inline Py_ssize_t axis_index(object item, int ndim, object axis) except -1:
    """item as an axis of ndim dimensions, in [0, ndim).  NumPy's errors:
    AxisError out of range, TypeError for what is not an integer (bool
    included, which operator.index would take)."""
    cdef long i
    cdef int overflow = 0
    if type(item) is not int:
        if isinstance(item, bool):
            raise TypeError(f"an integer is required for the axis, not bool ({axis!r})")
        item = operator.index(item)
    i = PyLong_AsLongAndOverflow(item, &overflow)
    if overflow or not -ndim <= i < ndim:
        raise AxisError(item, ndim)
    return i + ndim if i < 0 else i


cdef inline int axes_bits(object axis, int ndim, unsigned long long* bits) except -1:
    """The axes axis names over ndim dimensions, as bits: None for every
    axis; an integer, or a tuple or list of them, in any order and sign;
    axis_index's errors, ValueError for an axis named twice."""
    cdef unsigned long long seen = 0, b
    if axis is None:
        bits[0] = every_axis(ndim)
        return 0
    if type(axis) is int:
        bits[0] = 1ULL << axis_index(axis, ndim, axis)
        return 0
    for item in (axis if isinstance(axis, (tuple, list)) else (axis,)):
        b = 1ULL << axis_index(item, ndim, axis)
        if seen & b:
            raise ValueError(f"repeated axis in axis={axis!r}")
        seen |= b
    bits[0] = seen
    return 0


cdef int batch_bits(object axis, int ndim, str what, unsigned long long* bits) except -1:
    """batch norm's reduced axes: axis=None means every axis but 1, the
    channels of (N, C, ...)."""
    if axis is not None:
        return axes_bits(axis, ndim, bits)
    if ndim < 2:
        raise ValueError(f"{what} with axis=None expects x of shape (N, C, ...), "
                         f"got {ndim} dimension(s); pass axis= explicitly")
    bits[0] = every_axis(ndim) & ~2ULL
    return 0


cdef tuple bits_axes(unsigned long long bits, int ndim):
    return tuple([a for a in range(ndim) if (bits >> a) & 1])


# Reduced-axis flags of the commonest calls, by number of dimensions: the
# last axis; every axis but 1 (batch norm's default); axis 1 alone, along
# which batch norm's gain and bias vary.
cdef tuple LAST_AXIS = tuple(tuple(a == n - 1 for a in range(n)) for n in range(MAX_DIMS + 1))
cdef tuple BUT_AXIS_1 = tuple(tuple(a != 1 for a in range(n)) for n in range(MAX_DIMS + 1))
cdef tuple AXIS_1 = tuple(tuple(a == 1 for a in range(n)) for n in range(MAX_DIMS + 1))


cdef inline tuple bits_flags(unsigned long long bits, int ndim):
    """The axes of bits as the kernels' reduced-axis flags."""
    if ndim <= MAX_DIMS:
        if bits == 1ULL << (ndim - 1):
            return LAST_AXIS[ndim]
        if ndim >= 2 and bits == every_axis(ndim) & ~2ULL:
            return BUT_AXIS_1[ndim]
    return tuple([(bits >> a) & 1 == 1 for a in range(ndim)])


def axes_tuple(axis, int ndim, *, none_means=None):
    """axis (an int, a tuple or list of ints, or None) as a sorted tuple of
    non-negative axes (axes_bits; None: every axis, or none_means)."""
    cdef unsigned long long bits
    if axis is None and none_means is not None:
        return none_means
    axes_bits(axis, ndim, &bits)
    return bits_axes(bits, ndim)


def batch_axes(axis, int ndim, what="batch_norm"):
    """batch norm's reduced axes as a sorted tuple (batch_bits)."""
    cdef unsigned long long bits
    batch_bits(axis, ndim, what, &bits)
    return bits_axes(bits, ndim)


# --------------------------------------------------------------------------
# scalars

cdef inline double real_of(object v, str name) except? -1.0:
    """v as a double: a real number (what float() takes)."""
    if type(v) is float:
        return v
    try:
        return float(v)
    except (TypeError, ValueError) as err:
        raise TypeError(f"{name} must be a real number, got {v!r}") from err


cdef inline double eps_of(object eps) except? -1.0:
    """eps as a double: a real number, finite and >= 0."""
    cdef double e = real_of(eps, "eps")
    if not (isfinite(e) and e >= 0.0):
        raise ValueError(f"eps must be finite and >= 0, got {eps!r}")
    return e


def check_eps(eps):
    return eps_of(eps)


cdef double momentum_of(object momentum) except? -1.0:
    """batch_norm's momentum as a double: a finite real number."""
    cdef double m = real_of(momentum, "momentum")
    if not isfinite(m):
        raise ValueError(f"momentum must be finite, got {m}")
    return m


cdef int training_values(Py_ssize_t n, object shape, unsigned long long axes) except -1:
    """batch_norm training needs more than one value per feature, n the
    values of each (none is an empty batch)."""
    if n == 1:
        raise ValueError(f"batch_norm training needs more than one value per feature, got "
                         f"n={n} (x.shape={tuple(shape)}, reduced axes "
                         f"{bits_axes(axes, len(shape))})")
    return 0


def check_momentum(momentum):
    return momentum_of(momentum)


def check_training_values(Py_ssize_t n, shape, axes):
    cdef unsigned long long bits = 0
    for a in axes:
        bits |= 1ULL << <int>a
    training_values(n, shape, bits)


# --------------------------------------------------------------------------
# groups

cdef int channel_axis_of(int ndim, object channel_axis) except -1:
    """group and instance norm's channel axis, in [1, ndim): x needs a
    batch axis (0) and a channel axis besides it."""
    cdef Py_ssize_t ch
    if ndim < 2:
        raise ValueError(f"group/instance norm needs x of shape (N, C, ...), "
                         f"got {ndim} dimension(s)")
    ch = operator.index(channel_axis)
    if not -ndim <= ch < ndim:
        raise AxisError(ch, ndim)
    if ch < 0:
        ch += ndim
    if ch == 0:
        raise ValueError("channel_axis must not be 0: axis 0 is the batch (one "
                         "statistic per sample)")
    return ch


cdef Py_ssize_t groups_of(object num_groups, Py_ssize_t channels) except -1:
    """group_norm's number of groups: an integer >= 1 that divides the channels."""
    cdef Py_ssize_t g
    if type(num_groups) is not int:
        try:
            num_groups = operator.index(num_groups)
        except TypeError as e:
            raise TypeError(f"num_groups must be an int, got {num_groups!r}") from e
    if num_groups < 1 or channels % num_groups != 0:
        raise ValueError(f"num_groups={num_groups} must be >= 1 and divide the {channels} "
                         "channels")
    g = num_groups
    return g


cdef int group_view(int ndim, const cnp.npy_intp* dims, object num_groups,
                    object channel_axis, cnp.npy_intp* vdims, cnp.npy_intp* kdims) except -1:
    """group_norm's view of an x of dims (at most 63 of them): its shape
    with the channel axis split into (groups, channels per group), in
    vdims (ndim + 1 of them), and its statistics' keepdims shape (1 but on
    axis 0 and the groups') in kdims; the channel axis (channel_axis_of,
    groups_of: their errors)."""
    cdef int ch = channel_axis_of(ndim, channel_axis), a
    cdef Py_ssize_t c = dims[ch], groups = groups_of(num_groups, c)
    for a in range(ndim + 1):
        vdims[a] = (dims[a] if a < ch else groups if a == ch
                    else c // groups if a == ch + 1 else dims[a - 1])
        kdims[a] = vdims[a] if a == 0 or a == ch else 1
    return ch


cdef void group_stat_dims(int ndim, int ch, const cnp.npy_intp* vdims,
                          cnp.npy_intp* sdims) noexcept:
    """group_norm's statistics' shape into sdims: (N, G, 1, ...) as x's,
    the groups on the channel axis."""
    cdef int a
    for a in range(ndim):
        sdims[a] = vdims[0] if a == 0 else vdims[ch] if a == ch else 1


def channel_axis(int ndim, channel_axis):
    return channel_axis_of(ndim, channel_axis)


def groups_view(shape, num_groups, channel_axis):
    """(channel axis, groups, the split view's shape, the statistics'
    shape as returned) of group_view for an x of this shape."""
    cdef cnp.npy_intp dims[64]
    cdef cnp.npy_intp vdims[65]
    cdef cnp.npy_intp kdims[65]
    cdef cnp.npy_intp sdims[64]
    cdef int i, ndim = len(shape), ch
    if ndim > 63:
        raise ValueError(f"group_norm takes x of at most 63 dimensions, got {ndim}")
    for i in range(ndim):
        dims[i] = shape[i]
    ch = group_view(ndim, dims, num_groups, channel_axis, vdims, kdims)
    group_stat_dims(ndim, ch, vdims, sdims)
    return ch, vdims[ch], dims_tuple(ndim + 1, vdims), dims_tuple(ndim, sdims)


# --------------------------------------------------------------------------
# out=

cdef inline bint same_dims(cnp.ndarray a, int ndim, const cnp.npy_intp* dims):
    cdef int i
    if cnp.PyArray_NDIM(a) != ndim:
        return False
    for i in range(ndim):
        if cnp.PyArray_DIM(a, i) != dims[i]:
            return False
    return True


cdef tuple dims_tuple(int ndim, const cnp.npy_intp* dims):
    return tuple([dims[a] for a in range(ndim)])


cdef inline int out_rule(object out, str name, int ndim, const cnp.npy_intp* dims,
                         int t) except -1:
    """out= for one result: an ndarray of exactly these dims and of type t
    in either byte order (a non-native one is written through a
    temporary), writable."""
    cdef cnp.ndarray o
    if not isinstance(out, cnp.ndarray):
        raise TypeError(f"{name} must be a numpy.ndarray, got {type(out).__name__}")
    o = <cnp.ndarray>out
    if not same_dims(o, ndim, dims):
        raise ValueError(f"{name} has shape {(<object>o).shape}; expected {dims_tuple(ndim, dims)}")
    if cnp.PyArray_TYPE(o) != t:
        raise TypeError(f"{name} has dtype {o.dtype}; expected {cnp.PyArray_DescrFromType(t)}")
    if not cnp.PyArray_ISWRITEABLE(o):
        raise ValueError(f"{name} is read-only")
    return 0


def check_out(out, name, shape, dtype):
    """out_rule for a shape tuple and a dtype; out itself."""
    cdef cnp.npy_intp dims[64]
    cdef int i, ndim = len(shape)
    if ndim > 64:
        raise ValueError(f"{name}: {ndim} dimensions")
    for i in range(ndim):
        dims[i] = shape[i]
    out_rule(out, name, ndim, dims, np.dtype(dtype).num)
    return out


cdef inline void span(cnp.ndarray a, char** lo, char** hi) noexcept:
    """The lowest and highest address a's elements start at."""
    cdef int i
    cdef Py_ssize_t e
    lo[0] = hi[0] = <char*>cnp.PyArray_DATA(a)
    for i in range(cnp.PyArray_NDIM(a)):
        e = (cnp.PyArray_DIM(a, i) - 1) * cnp.PyArray_STRIDE(a, i)
        if e < 0:
            lo[0] += e
        else:
            hi[0] += e


cdef inline bint overlap(cnp.ndarray a, cnp.ndarray b):
    """Whether the memory spans of a and b overlap (NumPy's
    may_share_memory: a conservative bound)."""
    cdef char* alo
    cdef char* ahi
    cdef char* blo
    cdef char* bhi
    if cnp.PyArray_SIZE(a) == 0 or cnp.PyArray_SIZE(b) == 0:
        return False
    span(a, &alo, &ahi)
    span(b, &blo, &bhi)
    return alo < bhi + cnp.PyArray_ITEMSIZE(b) and blo < ahi + cnp.PyArray_ITEMSIZE(a)


cdef inline bint self_overlaps(cnp.ndarray a):
    """Whether two elements of a may share an address (as_strided views,
    writable zero strides).  Conservative: false is certain, true may be a
    layout that interleaves without overlapping."""
    if cnp.PyArray_IS_C_CONTIGUOUS(a) or cnp.PyArray_IS_F_CONTIGUOUS(a):
        return False
    return strides_overlap(a)


cdef bint strides_overlap(cnp.ndarray a):
    """self_overlaps for other layouts: each axis, in order of stride, must
    step past the whole extent of the axes inside it."""
    cdef Py_ssize_t strides[64]
    cdef Py_ssize_t sizes[64]
    cdef Py_ssize_t extent = cnp.PyArray_ITEMSIZE(a), s, n
    cdef int i, j, k = 0
    for i in range(cnp.PyArray_NDIM(a)):
        n = cnp.PyArray_DIM(a, i)
        if n > 1:
            s = cnp.PyArray_STRIDE(a, i)
            s = -s if s < 0 else s
            j = k       # insertion by stride
            while j > 0 and strides[j - 1] > s:
                strides[j] = strides[j - 1]
                sizes[j] = sizes[j - 1]
                j -= 1
            strides[j] = s
            sizes[j] = n
            k += 1
    for i in range(k):
        if strides[i] < extent:
            return True
        extent += strides[i] * (sizes[i] - 1)
    return False


cdef inline bint writes_directly(cnp.ndarray out, cnp.ndarray x):
    """Whether a kernel writes its result into out where it is, out being
    a result of x's shape that out_rule took: native and aligned, no two
    elements at one address (the kernel's threads would race), and apart
    from x or x itself in its very layout (in place: each value is read
    before it is written).  Else the result goes through a temporary."""
    cdef int i
    if not (cnp.PyArray_ISNOTSWAPPED(out) and cnp.PyArray_ISALIGNED(out)) or self_overlaps(out):
        return False
    if not overlap(out, x):
        return True
    if (cnp.PyArray_DATA(out) != cnp.PyArray_DATA(x)
            or cnp.PyArray_ITEMSIZE(out) != cnp.PyArray_ITEMSIZE(x)):
        return False
    for i in range(cnp.PyArray_NDIM(x)):
        if cnp.PyArray_STRIDE(out, i) != cnp.PyArray_STRIDE(x, i):
            return False
    return True


def direct(cnp.ndarray out, cnp.ndarray x):
    """writes_directly."""
    return writes_directly(out, x)


# --------------------------------------------------------------------------
# statistics given back (the gradients')

cdef object stat_operand(object value, str name, int ndim, const cnp.npy_intp* keep,
                         int n_kept, const cnp.npy_intp* kept):
    """A statistic the forward returned, as the gradient kernels read it: a
    C-contiguous float64 array of the keepdims shape `keep` (ndim dims).
    It must hold real numbers, in that shape or the kept one (`kept`, n_kept
    dims: the same values in C order)."""
    cdef cnp.ndarray s = value if type(value) is cnp.ndarray else np.asarray(value)
    cdef int t = cnp.PyArray_TYPE(s)
    if not (cnp.PyArray_ISFLOAT(s) or cnp.PyArray_ISINTEGER(s)):
        raise TypeError(f"{name} has dtype {s.dtype}; it must hold real numbers")
    if not (same_dims(s, ndim, keep) or same_dims(s, n_kept, kept)):
        if n_kept == ndim and dims_tuple(ndim, keep) == dims_tuple(n_kept, kept):
            raise ValueError(f"{name} has shape {(<object>s).shape}; expected "
                             f"{dims_tuple(ndim, keep)} (as the forward returned it)")
        raise ValueError(f"{name} has shape {(<object>s).shape}; expected "
                         f"{dims_tuple(ndim, keep)} (as the forward returned it) or "
                         f"{dims_tuple(n_kept, kept)}")
    if not (t == cnp.NPY_DOUBLE and cnp.PyArray_IS_C_CONTIGUOUS(s)
            and cnp.PyArray_ISALIGNED(s) and cnp.PyArray_ISNOTSWAPPED(s)):
        s = as_float64(s)
    if cnp.PyArray_NDIM(s) == ndim:
        return s
    return cnp.PyArray_Reshape(s, dims_tuple(ndim, keep))


def stat_operand_of(value, str name, keep, kept):
    """stat_operand for shapes given as tuples."""
    cdef cnp.npy_intp k[MAX_DIMS]
    cdef cnp.npy_intp d[MAX_DIMS]
    cdef int i
    if len(keep) > MAX_DIMS or len(kept) > MAX_DIMS:
        raise ValueError(f"{name}: more than {MAX_DIMS} dimensions")
    for i in range(len(keep)):
        k[i] = keep[i]
    for i in range(len(kept)):
        d[i] = kept[i]
    return stat_operand(value, name, len(keep), k, len(kept), d)


# --------------------------------------------------------------------------
# results

cdef object as_result(cnp.ndarray s, int t, object out):
    """A float64 result the kernel wrote (C-contiguous) as the caller gets
    it, in type t, each value rounded once as NumPy's cast rounds it (and
    through that cast, with its warning, where float32 overflows): a new
    array of s's shape (s itself for float64), or written into out, an
    array of s's size that out_rule took (t its type), which comes back."""
    cdef cnp.ndarray a, r
    cdef const double* v = <const double*>cnp.PyArray_DATA(s)
    cdef Py_ssize_t i, n = cnp.PyArray_SIZE(s), stride
    if out is None:
        if t == cnp.NPY_DOUBLE:
            return s
        if t == cnp.NPY_FLOAT:
            r = cnp.PyArray_EMPTY(cnp.PyArray_NDIM(s), cnp.PyArray_DIMS(s), cnp.NPY_FLOAT, 0)
            if narrow(v, n, <char*>cnp.PyArray_DATA(r), sizeof(float)):
                return r
        return cnp.PyArray_Cast(s, t)
    a = <cnp.ndarray>out
    # One stride through every value: a vector, or C order.
    if cnp.PyArray_NDIM(a) == 1:
        stride = cnp.PyArray_STRIDE(a, 0)
    elif cnp.PyArray_IS_C_CONTIGUOUS(a):
        stride = cnp.PyArray_ITEMSIZE(a)
    else:
        stride = 0
    if (stride == 0 or not cnp.PyArray_ISALIGNED(a) or not cnp.PyArray_ISNOTSWAPPED(a)
            or not (t == cnp.NPY_DOUBLE or t == cnp.NPY_FLOAT)):
        cnp.PyArray_CopyInto(a, (<object>s).reshape((<object>a).shape))
    elif t == cnp.NPY_DOUBLE:
        for i in range(n):
            (<double*>(<char*>cnp.PyArray_DATA(a) + i * stride))[0] = v[i]
    elif not narrow(v, n, <char*>cnp.PyArray_DATA(a), stride):
        cnp.PyArray_CopyInto(a, (<object>s).reshape((<object>a).shape))
    return out


def result(s, dtype, out=None):
    """as_result of a float64 array in dtype (out's own with out)."""
    cdef cnp.ndarray a = np.asarray(s, dtype=np.float64, order="C")   # (0-d stays 0-d)
    return as_result(a, (np.dtype(dtype) if out is None else out.dtype).num, out)
