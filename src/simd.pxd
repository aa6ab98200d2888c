# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# Vector primitives (simd.h) and the fused-type adapters that let
# each kernel be written once for float16, float32 and float64 data.

from libc.stdint cimport uint64_t

cdef extern from "simd.h" nogil:
    ctypedef struct fn_vd:
        pass
    ctypedef unsigned short half_t "fn_half"

    const int FN_W
    const int FN_WF
    const int FN_OPENMP
    const char* FN_COMPILER
    const char* FN_VARIANT_NAME
    const double fn_one
    const double fn_zero_value

    fn_vd fn_set1(double a)
    fn_vd fn_zero()
    fn_vd fn_add(fn_vd a, fn_vd b)
    fn_vd fn_sub(fn_vd a, fn_vd b)
    fn_vd fn_mul(fn_vd a, fn_vd b)
    fn_vd fn_fma(fn_vd a, fn_vd b, fn_vd c)
    fn_vd fn_one_for_fma()
    fn_vd fn_div(fn_vd a, fn_vd b)
    fn_vd fn_sqrt(fn_vd a)
    fn_vd fn_lane_mask(Py_ssize_t lo, Py_ssize_t hi)
    fn_vd fn_masked(fn_vd a, fn_vd mask)
    fn_vd fn_select(fn_vd mask, fn_vd a, fn_vd b)
    fn_vd fn_bytes_mask(const unsigned char* m)
    fn_vd fn_numbers(fn_vd a)
    fn_vd fn_count(fn_vd k, fn_vd mask)
    fn_vd fn_count_add(fn_vd a, fn_vd b)
    void fn_store_counts(double* t, fn_vd k)
    bint fn_zero_byte(uint64_t w)
    int fn_mask_kind(const unsigned char* m, Py_ssize_t n)
    Py_ssize_t fn_mask_lead(const unsigned char* m, Py_ssize_t n, bint selected)
    bint fn_all_between(fn_vd a, double lo, double hi)
    fn_vd fn_hsum_rows(const fn_vd* v)
    double fn_hsum(fn_vd a)
    void fn_prefetch_l2(const void* p)

    fn_vd fn_load_f16(const half_t* p)
    fn_vd fn_load_f32(const float* p)
    fn_vd fn_load_f64(const double* p)
    void fn_store_f16(half_t* p, fn_vd v)
    void fn_store_f32(float* p, fn_vd v)
    void fn_store_f64(double* p, fn_vd v)
    void fn_stream_f16(half_t* p, fn_vd v)
    void fn_stream_f32(float* p, fn_vd v)
    void fn_stream_f64(double* p, fn_vd v)
    void fn_sfence()
    void fn_clean_upper()
    double fn_sum_rounded(double a, double b)
    fn_vd fn_vsum_rounded(fn_vd a, fn_vd b)
    double fn_half_to_double(half_t h)
    half_t fn_double_to_half(double v)

    void fn_fault_in(char* p, Py_ssize_t nbytes, int nthreads)
    int fn_cpu_has_x86_64_v3()
    int fn_cpu_has_x86_64_v4()
    int omp_get_max_threads()


cdef extern from "apply.h" nogil:
    enum:
        FN_HAVE_F32
        FN_PLAIN
        FN_GAIN
        FN_GRAD
    void fn_run_f(const void* x, int xt, void* y, int yt, const void* dy, Py_ssize_t n,
                  float m, float k2, float k0, float k1, const float* g, Py_ssize_t gi,
                  const float* b, Py_ssize_t bi, int kind, int stream, int down,
                  const char* ahead, const char* dy_ahead, Py_ssize_t dist,
                  const unsigned char* sel)
    void fn_run_d(const void* x, int xt, void* y, int yt, const void* dy, Py_ssize_t n,
                  double m, double k2, double k0, double k1, const double* g, Py_ssize_t gi,
                  const double* b, Py_ssize_t bi, int kind, int stream, int down,
                  const char* ahead, const char* dy_ahead, Py_ssize_t dist,
                  const unsigned char* sel)
    void fn_values_f(const void* x, int xt, void* y, int yt, const void* dy, Py_ssize_t total,
                     Py_ssize_t n, const float* m, const float* k2, const float* k0,
                     const float* k1, float g, float b, int kind, int stream, const char* ahead,
                     const unsigned char* sel)
    void fn_values_d(const void* x, int xt, void* y, int yt, const void* dy, Py_ssize_t total,
                     Py_ssize_t n, const double* m, const double* k2, const double* k0,
                     const double* k1, double g, double b, int kind, int stream,
                     const char* ahead, const unsigned char* sel)
    void fn_rows_f(const void* x, int xt, void* y, int yt, const void* dy, Py_ssize_t rows,
                   Py_ssize_t n, const float* m, const float* k2, const float* k0,
                   const float* k1, const float* g, const float* b, int kind, int stream)
    void fn_rows_d(const void* x, int xt, void* y, int yt, const void* dy, Py_ssize_t rows,
                   Py_ssize_t n, const double* m, const double* k2, const double* k0,
                   const double* k1, const double* g, const double* b, int kind, int stream)
    void fn_strided(const char* x, Py_ssize_t sx, int xt, char* y, Py_ssize_t sy, int yt,
                    const char* g, Py_ssize_t sg, const char* b, Py_ssize_t sb, Py_ssize_t n,
                    double m, double k2, double k0)
    void fn_strided_grad(const char* x, Py_ssize_t sx, const char* dy, Py_ssize_t sdy, int xt,
                         char* dx, Py_ssize_t sdx, int yt, const char* g, Py_ssize_t sg,
                         Py_ssize_t n, double m, double r, double a, double b)


# The element types of data that is read (in_t) and written (out_t).
ctypedef fused in_t:
    half_t
    float
    double

ctypedef fused out_t:
    half_t
    float
    double


cdef inline double sload(const char* p, in_t* kind) noexcept nogil:
    """One element at byte address p, widened to double (kind only selects the type)."""
    if in_t is half_t:
        return fn_half_to_double((<const half_t*>p)[0])
    else:
        return (<const in_t*>p)[0]


cdef inline void sstore(char* p, double v, out_t* kind) noexcept nogil:
    """Narrow v to out_t and store it at byte address p."""
    if out_t is half_t:
        (<half_t*>p)[0] = fn_double_to_half(v)
    else:
        (<out_t*>p)[0] = <out_t>v


cdef inline fn_vd vload(const char* p, Py_ssize_t stride, in_t* kind) noexcept nogil:
    """FN_W elements starting at p, `stride` bytes apart, widened to doubles.

    The contiguous case is one vector load; the compiler unswitches loops on
    the (loop-invariant) test, so strided data costs only its own loop.
    """
    cdef double tmp[8]
    cdef int i
    if stride == sizeof(in_t):
        if in_t is half_t:
            return fn_load_f16(<const half_t*>p)
        elif in_t is float:
            return fn_load_f32(<const float*>p)
        else:
            return fn_load_f64(<const double*>p)
    for i in range(FN_W):
        tmp[i] = sload(p + i * stride, kind)
    return fn_load_f64(tmp)
