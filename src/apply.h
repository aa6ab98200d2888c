/*
 * apply.h -- the one output pass.
 *
 * Every value the kernels write is the affine map of its input
 *
 *     out = (x - m) * k2 + k0
 *
 * then, in a forward pass whose gain and bias vary along the run,
 * out * g + b, and in a gradient, out + dy * k1.  m is the slice's mean
 * rounded to the compute type and k0 carries what that rounding left (times
 * the scale), so x - m is exact near the mean however large the mean is
 * (Sterbenz); coefs.pxd makes the coefficients.
 *
 * The coefficients come
 *   per run    one set for a run of n values (fn_run_*),
 *   per value  value c's at [c] of arrays continued periodically, so that
 *              rows of n values that follow each other are one run
 *              (fn_values_*: the columns of a tile),
 *   per row    row r's at [r] for rows of n values that follow each other,
 *              a vector crossing a row end taking each lane's from its own
 *              row (fn_rows_*: short rows, the channels of an image).
 *
 * Two compute types: float, for float32 data and output (float32
 * arithmetic: twice the lanes), and double, for every other pair of
 * float16/32/64 types (values widened on load, narrowed on store).
 * apply_t.h is the template; it is instantiated once for each.  With
 * `stream`, the vectors of the output go around the caches (non-temporal
 * stores from its first aligned vector on; fn_sfence after the last).
 */
#ifndef FASTNORM_APPLY_H
#define FASTNORM_APPLY_H

#include "simd.h"

#if defined(__GNUC__) || defined(__clang__)
#define FN_AI static inline __attribute__((always_inline))
#define FN_HAVE_F32 1
#else
#define FN_AI static inline
#define FN_HAVE_F32 0
#endif

/* Element type codes of the data: float16, float32, float64. */
enum { FN_F16 = 0, FN_F32 = 1, FN_F64 = 2 };

static const size_t fn_sizes[3] = {2, 4, 8};

/* ---- double compute: any element type, widened and narrowed ------- */
FN_AI fn_vd fn_vld_d(const void *p, int t, ptrdiff_t i)
{
    if (t == FN_F16)
        return fn_load_f16((const fn_half *)p + i);
    if (t == FN_F32)
        return fn_load_f32((const float *)p + i);
    return fn_load_f64((const double *)p + i);
}

FN_AI double fn_ld1_d(const void *p, int t, ptrdiff_t i)
{
    if (t == FN_F16)
        return fn_half_to_double(((const fn_half *)p)[i]);
    if (t == FN_F32)
        return ((const float *)p)[i];
    return ((const double *)p)[i];
}

FN_AI void fn_vst_d(void *p, int t, ptrdiff_t i, fn_vd v, int stream)
{
    if (t == FN_F16) {
        if (stream) fn_stream_f16((fn_half *)p + i, v); else fn_store_f16((fn_half *)p + i, v);
    } else if (t == FN_F32) {
        if (stream) fn_stream_f32((float *)p + i, v); else fn_store_f32((float *)p + i, v);
    } else {
        if (stream) fn_stream_f64((double *)p + i, v); else fn_store_f64((double *)p + i, v);
    }
}

FN_AI void fn_st1_d(void *p, int t, ptrdiff_t i, double v)
{
    if (t == FN_F16)
        ((fn_half *)p)[i] = fn_double_to_half(v);
    else if (t == FN_F32)
        ((float *)p)[i] = (float)v;
    else
        ((double *)p)[i] = v;
}

/* Lanes 0 .. k - 1 set (as the bits of a vector), for k in 0 .. FN_W. */
FN_AI fn_vd fn_own_d(ptrdiff_t k)
{
#if defined(__GNUC__) || defined(__clang__)
    typedef int64_t vi __attribute__((vector_size(FN_VBYTES)));
    vi lane;
    for (int l = 0; l < FN_W; l++)
        lane[l] = l;
    return (fn_vd)(lane < (int64_t)k);
#else
    return fn_lane_mask(0, k);
#endif
}

/* ---- float compute: float32 in and out ---------------------------- */
#if FN_HAVE_F32
typedef float fn_vf32 __attribute__((vector_size(FN_VBYTES)));

FN_AI fn_vf32 fn_fset1(float a) { fn_vf32 v = {0}; return v + a; }
FN_AI fn_vf32 fn_fadd(fn_vf32 a, fn_vf32 b) { return a + b; }
FN_AI fn_vf32 fn_fsub(fn_vf32 a, fn_vf32 b) { return a - b; }
FN_AI fn_vf32 fn_fmul(fn_vf32 a, fn_vf32 b) { return a * b; }
FN_AI fn_vf32 fn_ffma(fn_vf32 a, fn_vf32 b, fn_vf32 c) { return a * b + c; }
FN_AI fn_vf32 fn_floadu(const float *p) { fn_vf32 v; memcpy(&v, p, sizeof v); return v; }
FN_AI fn_vf32 fn_vld_f(const void *p, int t, ptrdiff_t i) { (void)t; return fn_floadu((const float *)p + i); }
FN_AI float fn_ld1_f(const void *p, int t, ptrdiff_t i) { (void)t; return ((const float *)p)[i]; }
FN_AI void fn_st1_f(void *p, int t, ptrdiff_t i, float v) { (void)t; ((float *)p)[i] = v; }

FN_AI void fn_vst_f(void *p, int t, ptrdiff_t i, fn_vf32 v, int stream)
{
    float *q = (float *)p + i;
    (void)t;
    if (stream) {
#if defined(__AVX512F__)
        _mm512_stream_ps(q, (__m512)v);
#elif defined(__AVX__)
        _mm256_stream_ps(q, (__m256)v);
#elif defined(__SSE2__)
        _mm_stream_ps(q, (__m128)v);
#else
        memcpy(q, &v, sizeof v);
#endif
    } else {
        memcpy(q, &v, sizeof v);
    }
}

FN_AI fn_vf32 fn_own_f(ptrdiff_t k)
{
    typedef int32_t vi __attribute__((vector_size(FN_VBYTES)));
    vi lane;
    for (int l = 0; l < FN_WF; l++)
        lane[l] = l;
    return (fn_vf32)(lane < (int32_t)k);
}

/* The lane mask of FN_WF where= bytes: lanes whose byte is nonzero. */
FN_AI fn_vf32 fn_bytes_mask_f(const unsigned char *m)
{
    typedef int32_t vi __attribute__((vector_size(FN_VBYTES)));
    vi b;
    for (int l = 0; l < FN_WF; l++)
        b[l] = m[l];
    return (fn_vf32)(b != 0);
}

FN_AI fn_vf32 fn_fselect(fn_vf32 mask, fn_vf32 a, fn_vf32 b)
{
    typedef int32_t vi __attribute__((vector_size(FN_VBYTES)));
    return (fn_vf32)(((vi)a & (vi)mask) | ((vi)b & ~(vi)mask));
}
#endif

/* Values of an output of element size `size` before its first
 * vector-aligned one (vectors of `lanes` values), when it is streamed;
 * none otherwise; at most n. */
FN_AI ptrdiff_t fn_head(const void *y, size_t size, int lanes, ptrdiff_t n, int stream)
{
    ptrdiff_t head = (ptrdiff_t)(((uintptr_t)y / size) % (size_t)lanes);
    head = (!stream || head == 0) ? 0 : lanes - head;
    return head > n ? n : head;
}

/* How the second step of the map goes (a constant at every call):
 *   FN_PLAIN  out = (x - m) * k2 + k0          gain and bias folded in, or none
 *   FN_GAIN   out = ((x - m) * k2 + k0) * g + b   gain and bias along the run
 *   FN_GRAD   out = (x - m) * k2 + k0 + dy * k1   a gradient's dx */
enum { FN_PLAIN = 0, FN_GAIN = 1, FN_GRAD = 2 };

#if FN_HAVE_F32
#define FN_C float
#define FN_V fn_vf32
#define FN_VW FN_WF
#define FN_S(name) name##_f
#define FN_SET1 fn_fset1
#define FN_ADD fn_fadd
#define FN_SUB fn_fsub
#define FN_MUL fn_fmul
#define FN_FMA fn_ffma
#define FN_LDC(p) fn_floadu(p)
#define FN_VLD fn_vld_f
#define FN_LD1 fn_ld1_f
#define FN_VST fn_vst_f
#define FN_ST1 fn_st1_f
#define FN_OWN fn_own_f
#define FN_SELECT fn_fselect
#define FN_BYTES_MASK fn_bytes_mask_f
#include "apply_t.h"
#endif

#define FN_C double
#define FN_V fn_vd
#define FN_VW FN_W
#define FN_S(name) name##_d
#define FN_SET1 fn_set1
#define FN_ADD fn_add
#define FN_SUB fn_sub
#define FN_MUL fn_mul
#define FN_FMA fn_fma
#define FN_LDC(p) fn_load_f64(p)
#define FN_VLD fn_vld_d
#define FN_LD1 fn_ld1_d
#define FN_VST fn_vst_d
#define FN_ST1 fn_st1_d
#define FN_OWN fn_own_d
#define FN_SELECT fn_select
#define FN_BYTES_MASK fn_bytes_mask
#include "apply_t.h"

/* ---- any strides, one value at a time ----------------------------- */
/* The forward map with gain and bias, any byte strides and types, in
 * double (the coefficients of the double compute type). */
static inline void fn_strided(const char *x, ptrdiff_t sx, int xt, char *y, ptrdiff_t sy, int yt,
                              const char *g, ptrdiff_t sg, const char *b, ptrdiff_t sb,
                              ptrdiff_t n, double m, double k2, double k0)
{
    for (ptrdiff_t i = 0; i < n; i++)
        fn_st1_d(y + i * sy, yt, 0, ((fn_ld1_d(x + i * sx, xt, 0) - m) * k2 + k0)
                 * *(const double *)(g + i * sg) + *(const double *)(b + i * sb));
}

/* A gradient's dx unfolded, r (dy g - a - xhat b) with xhat = (x - m) r,
 * any strides and types: it holds where the folded coefficients (r^2 b)
 * would overflow. */
static inline void fn_strided_grad(const char *x, ptrdiff_t sx, const char *dy, ptrdiff_t sdy,
                                   int xt, char *dx, ptrdiff_t sdx, int yt, const char *g,
                                   ptrdiff_t sg, ptrdiff_t n, double m, double r, double a,
                                   double b)
{
    for (ptrdiff_t i = 0; i < n; i++) {
        double xs = (fn_ld1_d(x + i * sx, xt, 0) - m) * r;
        fn_st1_d(dx + i * sdx, yt, 0,
                 r * (fn_ld1_d(dy + i * sdy, xt, 0) * *(const double *)(g + i * sg) - a - xs * b));
    }
}

#endif /* FASTNORM_APPLY_H */
