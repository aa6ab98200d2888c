/*
 * simd.h -- the few vector primitives the Cython kernels are written in.
 *
 * Every kernel accumulates and computes in double.  A vector `fn_vd` holds
 * FN_W doubles; its width follows the instruction set this translation unit
 * is compiled for (the build compiles the same Cython source once per level:
 * baseline SSE2, x86-64-v3 = AVX2/FMA/F16C, x86-64-v4 = AVX-512), so the
 * algorithms are written once and only these primitives know the hardware.
 *
 * Loads widen float16/float32/float64 to double, stores narrow back with
 * round-to-nearest-even.  float16 is handled as its IEEE bit pattern
 * (`fn_half`, a uint16) so that no compiler support for _Float16 is needed.
 */
#ifndef FASTNORM_SIMD_H
#define FASTNORM_SIMD_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <math.h>

#include "tuning.h"

#if defined(__x86_64__) || defined(_M_X64) || defined(__i386__)
#include <immintrin.h>
#define FN_X86 1
#else
#define FN_X86 0
#endif

#if defined(__AVX512F__)
#define FN_VBYTES 64
#elif defined(__AVX__)
#define FN_VBYTES 32
#else
#define FN_VBYTES 16
#endif
#define FN_W (FN_VBYTES / 8)
/* floats per vector (the float32 passes) */
#define FN_WF (FN_VBYTES / 4)

#ifndef FN_VARIANT_NAME
#define FN_VARIANT_NAME "baseline"
#endif

typedef uint16_t fn_half;

/* Gain and bias of calls that have none. */
static const double fn_one = 1.0;
static const double fn_zero_value = 0.0;

/* ------------------------------------------------------------------ */
/* OpenMP shim: the kernels also build (serially) without OpenMP.       */
#ifdef _OPENMP
#include <omp.h>
#define FN_OPENMP 1
#else
#define FN_OPENMP 0
static inline int omp_get_max_threads(void) { return 1; }
static inline int omp_get_num_procs(void) { return 1; }
#endif

/* The schedule of the calling thread's next schedule(runtime) loops: the
 * same static split every time, else guided or one item at a time
 * (dynamic); see _threads.pxd.  A thread's own setting: calls from other
 * threads keep theirs. */
static inline void fn_set_schedule(int same_split, int guided)
{
#ifdef _OPENMP
    omp_set_schedule(same_split ? omp_sched_static
                     : guided ? omp_sched_guided : omp_sched_dynamic, 0);
#else
    (void)same_split;
    (void)guided;
#endif
}


/* Write a byte of every page of a fresh output of nbytes at p, the pages
 * dealt out to nthreads threads by address, so that each thread's first
 * writes fault its own pages in (the kernel zeroes each).  Written channel
 * by channel (slices of several runs: the maps of NCHW images), the
 * threads' own passes would first write the same pages at the same time,
 * one waiting while the other's page is zeroed: kernel alone into a fresh
 * y, two threads, (64, 64, 56, 56), eval batch_norm float32 12.8 -> 9.1
 * ms, float64 15.6 -> 12.4, training 10.4 -> 8.3 and 18.5 -> 14.6. */
#define FN_FAULT_PAGE 4096
static inline void fn_fault_in(char *p, ptrdiff_t nbytes, int nthreads)
{
    ptrdiff_t i, n = (nbytes + FN_FAULT_PAGE - 1) / FN_FAULT_PAGE;
#ifdef _OPENMP
#pragma omp parallel for num_threads(nthreads) schedule(static)
#endif
    for (i = 0; i < n; i++)
        p[i * FN_FAULT_PAGE] = 0;
    (void)nthreads;
}

/* a + b of two values rounded to double first, as NumPy adds two arrays:
 * read through volatile, so that no product that made them is contracted
 * into an FMA with the sum (the kernels build with contraction on). */
static inline double fn_sum_rounded(double a, double b)
{
    volatile double ra = a, rb = b;
    return ra + rb;
}

#if defined(__clang__)
#define FN_COMPILER "clang " __clang_version__
#elif defined(__GNUC__)
#define FN_COMPILER "gcc " __VERSION__
#elif defined(_MSC_VER)
#define FN_COMPILER "msvc"
#else
#define FN_COMPILER "unknown"
#endif

/* ------------------------------------------------------------------ */
/* Scalar float16 <-> float conversions (exact, round-to-nearest-even). */
static inline float fn_bits_to_float(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint32_t fn_float_to_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

static inline double fn_half_to_double(fn_half h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    if (exp == 0x1f) /* inf or nan */
        return (double)fn_bits_to_float(sign | 0x7f800000u | (man << 13));
    if (exp == 0) { /* zero or subnormal: man * 2^-24 is exact */
        double v = (double)man * (1.0 / 16777216.0);
        return sign ? -v : v;
    }
    return (double)fn_bits_to_float(sign | ((exp + 112u) << 23) | (man << 13));
}

static inline fn_half fn_float_to_half(float f)
{
    uint32_t u = fn_float_to_bits(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7fffffffu;
    if (a >= 0x7f800000u) /* inf or nan (keep nan quiet) */
        return (fn_half)(sign | 0x7c00u | (a > 0x7f800000u ? (0x200u | ((a >> 13) & 0x3ffu)) : 0u));
    if (a >= 0x477ff000u) /* rounds to >= 65520: overflow to inf */
        return (fn_half)(sign | 0x7c00u);
    if (a < 0x38800000u) { /* below the smallest normal half: subnormal or zero */
        if (a < 0x33000000u) /* < 2^-25: rounds to zero */
            return (fn_half)sign;
        uint32_t e = a >> 23;
        uint32_t m = (a & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126u - e; /* 14..24 */
        uint32_t r = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1u);
        uint32_t half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (r & 1u)))
            r += 1u;
        return (fn_half)(sign | r);
    }
    /* normal: rebias the exponent and round the mantissa to 10 bits */
    uint32_t r = a - 0x38000000u; /* exponent 127 -> 15 */
    uint32_t low = r & 0x1fffu;
    r >>= 13;
    if (low > 0x1000u || (low == 0x1000u && (r & 1u)))
        r += 1u;
    return (fn_half)(sign | r);
}

static inline fn_half fn_double_to_half(double v) { return fn_float_to_half((float)v); }

/* ------------------------------------------------------------------ */
/* The vector type.                                                      */
#if defined(__GNUC__) || defined(__clang__)
typedef double fn_vd __attribute__((vector_size(FN_VBYTES)));
typedef float fn_vf __attribute__((vector_size(FN_VBYTES / 2)));

static inline fn_vd fn_set1(double a) { fn_vd v = {0}; return v + a; }
static inline fn_vd fn_add(fn_vd a, fn_vd b) { return a + b; }
static inline fn_vd fn_sub(fn_vd a, fn_vd b) { return a - b; }
static inline fn_vd fn_mul(fn_vd a, fn_vd b) { return a * b; }
static inline fn_vd fn_fma(fn_vd a, fn_vd b, fn_vd c) { return a * b + c; }
static inline fn_vd fn_div(fn_vd a, fn_vd b) { return a / b; }
static inline fn_vd fn_sqrt(fn_vd a)
{
#if defined(__AVX512F__)
    return (fn_vd)_mm512_sqrt_pd((__m512d)a);
#elif defined(__AVX__)
    return (fn_vd)_mm256_sqrt_pd((__m256d)a);
#elif defined(__SSE2__)
    return (fn_vd)_mm_sqrt_pd((__m128d)a);
#else
    for (int i = 0; i < FN_W; i++) a[i] = sqrt(a[i]);
    return a;
#endif
}
static inline double fn_lane(fn_vd a, int i) { return a[i]; }
static inline fn_vd fn_load_f64(const double *p) { fn_vd v; memcpy(&v, p, sizeof v); return v; }
static inline void fn_store_f64(double *p, fn_vd v) { memcpy(p, &v, sizeof v); }

static inline fn_vd fn_load_f32(const float *p)
{
#if defined(__AVX512F__)
    return (fn_vd)_mm512_cvtps_pd(_mm256_loadu_ps(p));
#elif defined(__AVX__)
    return (fn_vd)_mm256_cvtps_pd(_mm_loadu_ps(p));
#else
    fn_vf t; memcpy(&t, p, sizeof t); return __builtin_convertvector(t, fn_vd);
#endif
}

static inline void fn_store_f32(float *p, fn_vd v)
{
#if defined(__AVX512F__)
    _mm256_storeu_ps(p, _mm512_cvtpd_ps((__m512d)v));
#elif defined(__AVX__)
    _mm_storeu_ps(p, _mm256_cvtpd_ps((__m256d)v));
#else
    fn_vf t = __builtin_convertvector(v, fn_vf); memcpy(p, &t, sizeof t);
#endif
}

static inline fn_vd fn_load_f16(const fn_half *p)
{
#if defined(__AVX512F__)
    return (fn_vd)_mm512_cvtps_pd(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)));
#elif defined(__AVX__) && defined(__F16C__)
    return (fn_vd)_mm256_cvtps_pd(_mm_cvtph_ps(_mm_loadl_epi64((const __m128i *)p)));
#else
    fn_vd v;
    for (int i = 0; i < FN_W; i++) v[i] = fn_half_to_double(p[i]);
    return v;
#endif
}

static inline void fn_store_f16(fn_half *p, fn_vd v)
{
#if defined(__AVX512F__)
    _mm_storeu_si128((__m128i *)p, _mm256_cvtps_ph(_mm512_cvtpd_ps((__m512d)v), _MM_FROUND_TO_NEAREST_INT));
#elif defined(__AVX__) && defined(__F16C__)
    _mm_storel_epi64((__m128i *)p, _mm_cvtps_ph(_mm256_cvtpd_ps((__m256d)v), _MM_FROUND_TO_NEAREST_INT));
#else
    for (int i = 0; i < FN_W; i++) p[i] = fn_double_to_half(v[i]);
#endif
}

/* Non-temporal stores: write a whole vector without reading its cache line
 * first (no read-for-ownership), for outputs too large to stay in cache.  p
 * must be aligned to FN_W * sizeof(element); call fn_sfence() after the last. */
static inline void fn_stream_f64(double *p, fn_vd v)
{
#if defined(__AVX512F__)
    _mm512_stream_pd(p, (__m512d)v);
#elif defined(__AVX__)
    _mm256_stream_pd(p, (__m256d)v);
#elif defined(__SSE2__)
    _mm_stream_pd(p, (__m128d)v);
#else
    fn_store_f64(p, v);
#endif
}

static inline void fn_stream_f32(float *p, fn_vd v)
{
#if defined(__AVX512F__)
    _mm256_stream_ps(p, _mm512_cvtpd_ps((__m512d)v));
#elif defined(__AVX__)
    _mm_stream_ps(p, _mm256_cvtpd_ps((__m256d)v));
#elif defined(__SSE2__) && defined(__x86_64__)
    fn_vf t = __builtin_convertvector(v, fn_vf);
    long long bits; memcpy(&bits, &t, 8);
    _mm_stream_si64((long long *)p, bits);
#else
    fn_store_f32(p, v);
#endif
}

static inline void fn_stream_f16(fn_half *p, fn_vd v)
{
#if defined(__AVX512F__)
    _mm_stream_si128((__m128i *)p, _mm256_cvtps_ph(_mm512_cvtpd_ps((__m512d)v), _MM_FROUND_TO_NEAREST_INT));
#elif defined(__AVX__) && defined(__F16C__) && defined(__x86_64__)
    __m128i h = _mm_cvtps_ph(_mm256_cvtpd_ps((__m256d)v), _MM_FROUND_TO_NEAREST_INT);
    _mm_stream_si64((long long *)p, _mm_cvtsi128_si64(h));
#else
    fn_store_f16(p, v);
#endif
}

static inline void fn_sfence(void)
{
#if defined(__SSE2__)
    _mm_sfence();
#endif
}

#else /* portable fallback: a struct of doubles, for compilers without vector extensions */
typedef struct { double v[FN_W]; } fn_vd;
static inline fn_vd fn_set1(double a) { fn_vd r; for (int i = 0; i < FN_W; i++) r.v[i] = a; return r; }
static inline fn_vd fn_add(fn_vd a, fn_vd b) { for (int i = 0; i < FN_W; i++) a.v[i] += b.v[i]; return a; }
static inline fn_vd fn_sub(fn_vd a, fn_vd b) { for (int i = 0; i < FN_W; i++) a.v[i] -= b.v[i]; return a; }
static inline fn_vd fn_mul(fn_vd a, fn_vd b) { for (int i = 0; i < FN_W; i++) a.v[i] *= b.v[i]; return a; }
static inline fn_vd fn_fma(fn_vd a, fn_vd b, fn_vd c) { for (int i = 0; i < FN_W; i++) c.v[i] += a.v[i] * b.v[i]; return c; }
static inline fn_vd fn_div(fn_vd a, fn_vd b) { for (int i = 0; i < FN_W; i++) a.v[i] /= b.v[i]; return a; }
static inline fn_vd fn_sqrt(fn_vd a) { for (int i = 0; i < FN_W; i++) a.v[i] = sqrt(a.v[i]); return a; }
static inline double fn_lane(fn_vd a, int i) { return a.v[i]; }
static inline fn_vd fn_load_f64(const double *p) { fn_vd r; memcpy(r.v, p, sizeof r.v); return r; }
static inline void fn_store_f64(double *p, fn_vd v) { memcpy(p, v.v, sizeof v.v); }
static inline fn_vd fn_load_f32(const float *p) { fn_vd r; for (int i = 0; i < FN_W; i++) r.v[i] = p[i]; return r; }
static inline void fn_store_f32(float *p, fn_vd v) { for (int i = 0; i < FN_W; i++) p[i] = (float)v.v[i]; }
static inline fn_vd fn_load_f16(const fn_half *p) { fn_vd r; for (int i = 0; i < FN_W; i++) r.v[i] = fn_half_to_double(p[i]); return r; }
static inline void fn_store_f16(fn_half *p, fn_vd v) { for (int i = 0; i < FN_W; i++) p[i] = fn_double_to_half(v.v[i]); }
static inline void fn_stream_f64(double *p, fn_vd v) { fn_store_f64(p, v); }
static inline void fn_stream_f32(float *p, fn_vd v) { fn_store_f32(p, v); }
static inline void fn_stream_f16(fn_half *p, fn_vd v) { fn_store_f16(p, v); }
static inline void fn_sfence(void) {}
#endif

static inline fn_vd fn_zero(void) { return fn_set1(0.0); }

/* Lane masks, held as the bits of a vector of doubles (all ones or all
 * zeros per lane; never used as numbers): lanes lo <= l < hi. */
static inline fn_vd fn_lane_mask(ptrdiff_t lo, ptrdiff_t hi)
{
    fn_vd m;
    uint64_t bits[FN_W];
    for (int l = 0; l < FN_W; l++)
        bits[l] = (l >= lo && l < hi) ? ~(uint64_t)0 : 0;
    memcpy(&m, bits, sizeof m);
    return m;
}

/* The lanes of a where mask is set, +0.0 elsewhere. */
static inline fn_vd fn_masked(fn_vd a, fn_vd mask)
{
#if defined(__GNUC__) || defined(__clang__)
    typedef int64_t vi __attribute__((vector_size(FN_VBYTES)));
    return (fn_vd)((vi)a & (vi)mask);
#else
    uint64_t x[FN_W], m[FN_W];
    memcpy(x, &a, sizeof x); memcpy(m, &mask, sizeof m);
    for (int l = 0; l < FN_W; l++) x[l] &= m[l];
    memcpy(&a, x, sizeof x);
    return a;
#endif
}

/* The lanes of a where mask is set, those of b elsewhere. */
static inline fn_vd fn_select(fn_vd mask, fn_vd a, fn_vd b)
{
#if defined(__GNUC__) || defined(__clang__)
    typedef int64_t vi __attribute__((vector_size(FN_VBYTES)));
    return (fn_vd)(((vi)a & (vi)mask) | ((vi)b & ~(vi)mask));
#else
    uint64_t x[FN_W], y[FN_W], m[FN_W];
    memcpy(x, &a, sizeof x); memcpy(y, &b, sizeof y); memcpy(m, &mask, sizeof m);
    for (int l = 0; l < FN_W; l++) x[l] = (x[l] & m[l]) | (y[l] & ~m[l]);
    memcpy(&a, x, sizeof x);
    return a;
#endif
}

#if defined(__GNUC__) || defined(__clang__)
#define FN_PREFETCH(p, locality) __builtin_prefetch((p), 0, (locality))
#else
#define FN_PREFETCH(p, locality) ((void)(p))
#endif

/* Ask for the cache line at p ahead of its use (rows of the COLUMNS pattern
 * are short segments far apart, which hardware prefetchers do not follow). */
static inline void fn_prefetch(const void *p) { FN_PREFETCH(p, 3); }

/* The same into the second-level cache only: for lines needed a while
 * later, which would push lines in use out of the first. */
static inline void fn_prefetch_l2(const void *p) { FN_PREFETCH(p, 2); }

static inline double fn_hsum(fn_vd a)
{
    /* A tree of adds (a fixed order, so the result is the same every call). */
#if defined(__AVX512F__) && (defined(__GNUC__) || defined(__clang__))
    return _mm512_reduce_add_pd((__m512d)a);
#elif defined(__AVX__) && (defined(__GNUC__) || defined(__clang__))
    __m128d lo = _mm256_castpd256_pd128((__m256d)a), hi = _mm256_extractf128_pd((__m256d)a, 1);
    lo = _mm_add_pd(lo, hi);
    return _mm_cvtsd_f64(_mm_add_sd(lo, _mm_unpackhi_pd(lo, lo)));
#else
    double s = 0.0;
    for (int i = 0; i < FN_W; i++) s += fn_lane(a, i);
    return s;
#endif
}

/* Lane l of the result is the sum of v[l]'s lanes, for FN_W vectors: the
 * horizontal sums of a batch of rows in one go (a network of shuffles and
 * adds, a fixed order), instead of FN_W reductions one after another. */
#if defined(__GNUC__) || defined(__clang__)
__attribute__((always_inline))
#endif
static inline fn_vd fn_hsum_rows(const fn_vd *v)
{
#if defined(__AVX512F__) && (defined(__GNUC__) || defined(__clang__))
    __m512d p[4], q[2];
    for (int k = 0; k < 4; k++) {
        __m512d a = (__m512d)v[2 * k], b = (__m512d)v[2 * k + 1];
        /* 128-bit lane j: (a's pair j summed, b's pair j summed) */
        p[k] = _mm512_add_pd(_mm512_unpacklo_pd(a, b), _mm512_unpackhi_pd(a, b));
    }
    for (int k = 0; k < 2; k++)   /* lanes: (rows 4k, 4k+1) halves, (4k+2, 4k+3) halves */
        q[k] = _mm512_add_pd(_mm512_shuffle_f64x2(p[2 * k], p[2 * k + 1], 0x88),
                             _mm512_shuffle_f64x2(p[2 * k], p[2 * k + 1], 0xdd));
    return (fn_vd)_mm512_add_pd(_mm512_shuffle_f64x2(q[0], q[1], 0x88),
                                _mm512_shuffle_f64x2(q[0], q[1], 0xdd));
#elif defined(__AVX__) && (defined(__GNUC__) || defined(__clang__))
    __m256d h01 = _mm256_hadd_pd((__m256d)v[0], (__m256d)v[1]);
    __m256d h23 = _mm256_hadd_pd((__m256d)v[2], (__m256d)v[3]);
    return (fn_vd)_mm256_add_pd(_mm256_permute2f128_pd(h01, h23, 0x20),
                                _mm256_permute2f128_pd(h01, h23, 0x31));
#elif defined(__SSE2__) && (defined(__GNUC__) || defined(__clang__))
    return (fn_vd)_mm_add_pd(_mm_unpacklo_pd((__m128d)v[0], (__m128d)v[1]),
                             _mm_unpackhi_pd((__m128d)v[0], (__m128d)v[1]));
#else
    double t[FN_W];
    for (int l = 0; l < FN_W; l++)
        t[l] = fn_hsum(v[l]);
    return fn_load_f64(t);
#endif
}

/* ------------------------------------------------------------------ */
/* float32 in, float32 out: the normalization pass in float32 arithmetic. */
/*
 * y = ((x - m) * s - e) * g + b, where m is the slice's (or column's) mean
 * rounded to float and e = (mean - m) * scale what that rounding left: x - m
 * is exact for x within a factor 2 of m (Sterbenz) and otherwise off by half
 * an ulp of itself, so xhat carries float32's relative error however large
 * the mean, and none of float64's conversions.  With `stream`, y's aligned
 * vectors are written around the caches.
 */
#if defined(__GNUC__) || defined(__clang__)
typedef float fn_vf32 __attribute__((vector_size(FN_VBYTES)));

/* Values of y before its first vector-aligned address (0 without stream). */
static inline ptrdiff_t fn_head_f32(const float *y, ptrdiff_t n, int stream)
{
    ptrdiff_t head = (ptrdiff_t)(((uintptr_t)y / sizeof(float)) % FN_WF);
    head = (!stream || head == 0) ? 0 : FN_WF - head;
    return head > n ? n : head;
}

static inline void fn_put_f32(float *p, fn_vf32 t, int stream)
{
    if (stream) {
#if defined(__AVX512F__)
        _mm512_stream_ps(p, (__m512)t);
#elif defined(__AVX__)
        _mm256_stream_ps(p, (__m256)t);
#elif defined(__SSE2__)
        _mm_stream_ps(p, (__m128)t);
#else
        memcpy(p, &t, sizeof t);
#endif
    } else {
        memcpy(p, &t, sizeof t);
    }
}

static inline fn_vf32 fn_loadu_f32(const float *p) { fn_vf32 v; memcpy(&v, p, sizeof v); return v; }
static inline fn_vf32 fn_set1_f32(float a) { fn_vf32 v = {0}; return v + a; }
#endif

/* Along a run: g and b advance by g_inc, b_inc (1: one per value, 0: one
 * for the run), inlined as constants by the callers.
 *
 * `down`: from the last value to the first, prefetching `ahead` (the same
 * span of the run before, or NULL) once a line.  A fresh output written
 * run by run across its pages (the maps of NCHW channels, streamed) is
 * written that way, runs in descending order too (when that came in, a
 * fresh 64 MiB written downwards cost about 1.5 ms over the writes
 * themselves, upwards 6).  A fresh output written in address order takes
 * ordinary stores upwards instead: see stream_output in _layout.pxd. */
static inline float fn_normalized_f32(const float *x, const float *g, ptrdiff_t g_inc,
                                      const float *b, ptrdiff_t b_inc, ptrdiff_t i,
                                      float m, float s, float e)
{
    return ((x[i] - m) * s - e) * g[i * g_inc] + b[i * b_inc];
}

#if defined(__GNUC__) || defined(__clang__)
/* The same for the vector of values i to i + FN_WF; g0 and b0 are the gain
 * and bias broadcast, for increments of 0. */
static inline void fn_normalize_vector_f32(const float *x, float *y, const float *g,
                                           ptrdiff_t g_inc, const float *b, ptrdiff_t b_inc,
                                           ptrdiff_t i, fn_vf32 vm, fn_vf32 vs, fn_vf32 ve,
                                           fn_vf32 g0, fn_vf32 b0, int stream)
{
    fn_vf32 vg = g_inc ? fn_loadu_f32(g + i) : g0;
    fn_vf32 vb = b_inc ? fn_loadu_f32(b + i) : b0;
    fn_put_f32(y + i, ((fn_loadu_f32(x + i) - vm) * vs - ve) * vg + vb, stream);
}
#endif

static inline void fn_normalize_f32(const float *x, float *y, const float *g, ptrdiff_t g_inc,
                                    const float *b, ptrdiff_t b_inc, ptrdiff_t n,
                                    float m, float s, float e, int stream, int down,
                                    const char *ahead)
{
    ptrdiff_t i = 0, head = 0, body = 0;
#if defined(__GNUC__) || defined(__clang__)
    fn_vf32 vm = fn_set1_f32(m), vs = fn_set1_f32(s), ve = fn_set1_f32(e);
    /* Broadcast once here: in the loop the compiler reloads g[0] and b[0]
     * after every store, as y might alias them. */
    fn_vf32 g0 = fn_set1_f32(g_inc ? 0.0f : g[0]), b0 = fn_set1_f32(b_inc ? 0.0f : b[0]);
    head = fn_head_f32(y, n, stream);
    body = head + (n - head) / FN_WF * FN_WF;
    if (down) {
        for (i = n - 1; i >= body; i--)
            y[i] = fn_normalized_f32(x, g, g_inc, b, b_inc, i, m, s, e);
        for (i = body - FN_WF; i >= head; i -= FN_WF) {
            if (ahead != NULL && i % 16 < FN_WF)
                fn_prefetch_l2(ahead + i * sizeof(float));
            fn_normalize_vector_f32(x, y, g, g_inc, b, b_inc, i, vm, vs, ve, g0, b0, stream);
        }
        for (i = head - 1; i >= 0; i--)
            y[i] = fn_normalized_f32(x, g, g_inc, b, b_inc, i, m, s, e);
        return;
    }
    for (; i < head; i++)
        y[i] = fn_normalized_f32(x, g, g_inc, b, b_inc, i, m, s, e);
    for (; i < body; i += FN_WF) {
        if (ahead != NULL && i % 16 < FN_WF) {
            /* FN_AHEAD_F32 values on: in this run, else in the next one */
            ptrdiff_t at = i + FN_AHEAD_F32;
            if (at < n)
                fn_prefetch_l2(x + at);
            else if (at - n < n)
                fn_prefetch_l2(ahead + (at - n) * sizeof(float));
        }
        fn_normalize_vector_f32(x, y, g, g_inc, b, b_inc, i, vm, vs, ve, g0, b0, stream);
    }
#endif
    (void)down;
    (void)ahead;
    for (; i < n; i++)
        y[i] = fn_normalized_f32(x, g, g_inc, b, b_inc, i, m, s, e);
}

/* One row of a tile of columns: the column arrays m, s, e hold each
 * column's mean, scale and rounding rest (or gain and bias folded in, with
 * g = 1 and b = 0), and g, b are the row's. */
static inline void fn_normalize_cols_f32(const float *x, float *y, const float *m,
                                         const float *s, const float *e, ptrdiff_t n,
                                         float g, float b, int stream, const char *ahead)
{
    ptrdiff_t i = 0;
#if defined(__GNUC__) || defined(__clang__)
    fn_vf32 vg = fn_set1_f32(g), vb = fn_set1_f32(b);
    for (ptrdiff_t head = fn_head_f32(y, n, stream); i < head; i++)
        y[i] = ((x[i] - m[i]) * s[i] - e[i]) * g + b;
    if (ahead != NULL) {
        /* The same bytes of the next piece of x, a line per vector. */
        for (; i + FN_WF <= n; i += FN_WF) {
            fn_prefetch_l2(ahead + i * sizeof(float));
            fn_put_f32(y + i, ((fn_loadu_f32(x + i) - fn_loadu_f32(m + i)) * fn_loadu_f32(s + i)
                               - fn_loadu_f32(e + i)) * vg + vb, stream);
        }
    }
    for (; i + FN_WF <= n; i += FN_WF)
        fn_put_f32(y + i, ((fn_loadu_f32(x + i) - fn_loadu_f32(m + i)) * fn_loadu_f32(s + i)
                           - fn_loadu_f32(e + i)) * vg + vb, stream);
#endif
    for (; i < n; i++)
        y[i] = ((x[i] - m[i]) * s[i] - e[i]) * g + b;
}

/* Rows of n columns that follow each other in memory, as one run of
 * `total` values starting at a row's start: column c's coefficients are m,
 * s, e [c], and the arrays continue periodically for FN_WF values past n
 * (m[n + j] = m[j mod n]), so a vector that crosses from one row into the
 * next loads its coefficients in one piece.  No per-row work at all: short
 * rows (batch norm over NHWC) stream like one long one. */
static inline void fn_normalize_periodic_f32(const float *x, float *y, ptrdiff_t total,
                                             const float *m, const float *s, const float *e,
                                             ptrdiff_t n, int stream)
{
    ptrdiff_t i = 0, c = 0;
#if defined(__GNUC__) || defined(__clang__)
    for (ptrdiff_t head = fn_head_f32(y, total, stream); i < head; i++) {
        y[i] = (x[i] - m[c]) * s[c] - e[c];
        if (++c == n)
            c = 0;
    }
    for (; i + FN_WF <= total; i += FN_WF) {
        fn_put_f32(y + i, (fn_loadu_f32(x + i) - fn_loadu_f32(m + c)) * fn_loadu_f32(s + c)
                          - fn_loadu_f32(e + c), stream);
        c += FN_WF;
        while (c >= n)
            c -= n;
    }
#endif
    for (; i < total; i++) {
        y[i] = (x[i] - m[c]) * s[c] - e[c];
        if (++c == n)
            c = 0;
    }
}

#if defined(__GNUC__) || defined(__clang__)
typedef int32_t fn_vi32 __attribute__((vector_size(FN_VBYTES)));

/* The lane numbers 0 .. FN_WF - 1. */
static inline fn_vi32 fn_lanes_i32(void)
{
    fn_vi32 lane;
    for (int l = 0; l < FN_WF; l++)
        lane[l] = l;
    return lane;
}

typedef int64_t fn_vi64 __attribute__((vector_size(FN_VBYTES)));

/* The lane numbers 0 .. FN_W - 1. */
static inline fn_vi64 fn_lanes_i64(void)
{
    fn_vi64 lane;
    for (int l = 0; l < FN_W; l++)
        lane[l] = l;
    return lane;
}
#endif

/* Values of a float64 output before its first vector-aligned one, when it
 * is streamed (none otherwise), at most n. */
static inline ptrdiff_t fn_head_f64(const double *y, ptrdiff_t n, int stream)
{
    ptrdiff_t head = (ptrdiff_t)(((uintptr_t)y / sizeof(double)) % FN_W);
    head = (!stream || head == 0) ? 0 : FN_W - head;
    return head > n ? n : head;
}

/* Rows that follow each other as one run: column c of row r moved on by
 * `step` values (less than a row). */
static inline void fn_row_advance(ptrdiff_t *c, ptrdiff_t *r, ptrdiff_t n, ptrdiff_t step)
{
    *c += step;
    if (*c >= n) {
        *c -= n;
        (*r)++;
    }
}

/* Rows of n >= FN_WF / 2 values that follow each other in memory (x and
 * y), row r's coefficients m, s, e [r], gamma and beta g, b [c] along the
 * row, continued periodically for FN_WF values (g[n + j] = g[j]), as one
 * run: the vectors line up with y (so that they can be streamed), whatever
 * n is; a vector that crosses from row r into row r + 1 (and r + 2) takes
 * each lane's coefficients from its own row.  Short rows normalized one at
 * a time paid a call, a misaligned head and a tail for every few vectors. */
#if defined(__GNUC__) || defined(__clang__)
__attribute__((always_inline))
#endif
static inline void fn_rows_f32(const float *x, float *y, ptrdiff_t rows, ptrdiff_t n,
                               const float *g, const float *b, const float *m, const float *s,
                               const float *e, int stream, const int three, const int held)
{
    /* three (a constant where it is called): rows shorter than a vector,
     * which a vector may cross twice.  Longer rows keep a loop without
     * those checks (with them, rows of 64 and 128 measured 11-17% slower).
     * held (a constant too): rows long enough to go vector after vector
     * with their coefficients held, a loop of their own (layer_norm (32,
     * 768) float32 with gain and bias, 7.00 -> 6.49 us a call); for rows of
     * 20-64 values that inner loop cost 5-8%, so they keep the other. */
    ptrdiff_t total = rows * n, i = 0, r = 0, c = 0;
#if defined(__GNUC__) || defined(__clang__)
    fn_vi32 lane = fn_lanes_i32();
    for (ptrdiff_t head = fn_head_f32(y, total, stream); i < head;
         i++, fn_row_advance(&c, &r, n, 1))
        y[i] = ((x[i] - m[r]) * s[r] - e[r]) * g[c] + b[c];
    while (held && i + FN_WF <= total) {
        /* the vectors wholly within row r, then the one across its end */
        fn_vf32 vm = fn_set1_f32(m[r]), vs = fn_set1_f32(s[r]), ve = fn_set1_f32(e[r]);
        for (ptrdiff_t end = i + (n - c); i + FN_WF <= end; i += FN_WF, c += FN_WF)
            fn_put_f32(y + i, ((fn_loadu_f32(x + i) - vm) * vs - ve) * fn_loadu_f32(g + c)
                              + fn_loadu_f32(b + c), stream);
        if (c == n) {
            c = 0;
            r++;
        } else if (i + FN_WF <= total) {
            fn_vi32 own = lane < (int32_t)(n - c);
            vm = (fn_vf32)(((fn_vi32)vm & own) | ((fn_vi32)fn_set1_f32(m[r + 1]) & ~own));
            vs = (fn_vf32)(((fn_vi32)vs & own) | ((fn_vi32)fn_set1_f32(s[r + 1]) & ~own));
            ve = (fn_vf32)(((fn_vi32)ve & own) | ((fn_vi32)fn_set1_f32(e[r + 1]) & ~own));
            fn_put_f32(y + i, ((fn_loadu_f32(x + i) - vm) * vs - ve) * fn_loadu_f32(g + c)
                              + fn_loadu_f32(b + c), stream);
            fn_row_advance(&c, &r, n, FN_WF);
            i += FN_WF;
        } else {
            break;
        }
    }
    for (; !held && i + FN_WF <= total; i += FN_WF) {
        fn_vf32 vm = fn_set1_f32(m[r]), vs = fn_set1_f32(s[r]), ve = fn_set1_f32(e[r]);
        if (n - c < FN_WF) {
            /* lanes from n - c on are row r + 1's (which exists: the
             * vector ends within the run)... */
            fn_vi32 own = lane < (int32_t)(n - c);
            vm = (fn_vf32)(((fn_vi32)vm & own) | ((fn_vi32)fn_set1_f32(m[r + 1]) & ~own));
            vs = (fn_vf32)(((fn_vi32)vs & own) | ((fn_vi32)fn_set1_f32(s[r + 1]) & ~own));
            ve = (fn_vf32)(((fn_vi32)ve & own) | ((fn_vi32)fn_set1_f32(e[r + 1]) & ~own));
            if (three && 2 * n - c < FN_WF) {
                /* ...and from 2n - c on row r + 2's */
                own = lane < (int32_t)(2 * n - c);
                vm = (fn_vf32)(((fn_vi32)vm & own) | ((fn_vi32)fn_set1_f32(m[r + 2]) & ~own));
                vs = (fn_vf32)(((fn_vi32)vs & own) | ((fn_vi32)fn_set1_f32(s[r + 2]) & ~own));
                ve = (fn_vf32)(((fn_vi32)ve & own) | ((fn_vi32)fn_set1_f32(e[r + 2]) & ~own));
            }
        }
        fn_put_f32(y + i, ((fn_loadu_f32(x + i) - vm) * vs - ve) * fn_loadu_f32(g + c)
                          + fn_loadu_f32(b + c), stream);
        fn_row_advance(&c, &r, n, FN_WF);
        if (three)
            fn_row_advance(&c, &r, n, 0);      /* a second row boundary */
    }
#endif
    for (; i < total; i++, fn_row_advance(&c, &r, n, 1))
        y[i] = ((x[i] - m[r]) * s[r] - e[r]) * g[c] + b[c];
}

static inline void fn_normalize_rows_f32(const float *x, float *y, ptrdiff_t rows, ptrdiff_t n,
                                         const float *g, const float *b, const float *m,
                                         const float *s, const float *e, int stream)
{
    if (n >= FN_ROWS_HELD)
        fn_rows_f32(x, y, rows, n, g, b, m, s, e, stream, 0, 1);
    else if (n >= FN_WF)
        fn_rows_f32(x, y, rows, n, g, b, m, s, e, stream, 0, 0);
    else
        fn_rows_f32(x, y, rows, n, g, b, m, s, e, stream, 1, 0);
}

/* The same for float64 rows of n >= FN_W values, in float64: y = ((x -
 * p[r]) - h[r]) * s[r] * g[c] + b[c] (pivot, shift and scale of row r). */
static inline void fn_normalize_rows_f64(const double *x, double *y, ptrdiff_t rows, ptrdiff_t n,
                                         const double *g, const double *b, const double *p,
                                         const double *h, const double *s, int stream)
{
    ptrdiff_t total = rows * n, i = 0, r = 0, c = 0;
#if defined(__GNUC__) || defined(__clang__)
    fn_vi64 lane = fn_lanes_i64();
    for (ptrdiff_t head = fn_head_f64(y, total, stream); i < head;
         i++, fn_row_advance(&c, &r, n, 1))
        y[i] = ((x[i] - p[r]) - h[r]) * s[r] * g[c] + b[c];
    while (i + FN_W <= total) {
        fn_vd vp = fn_set1(p[r]), vh = fn_set1(h[r]), vs = fn_set1(s[r]), t;
        if (n >= FN_ROWS_HELD / 2) {
            /* the vectors wholly within row r, its coefficients held (as
             * fn_rows_f32 does) */
            for (ptrdiff_t end = i + (n - c); i + FN_W <= end; i += FN_W, c += FN_W) {
                t = ((fn_load_f64(x + i) - vp) - vh) * vs * fn_load_f64(g + c)
                    + fn_load_f64(b + c);
                if (stream)
                    fn_stream_f64(y + i, t);
                else
                    fn_store_f64(y + i, t);
            }
            if (c == n) {
                c = 0;
                r++;
                continue;
            }
            if (i + FN_W > total)
                break;
        }
        if (n - c < FN_W) {
            fn_vi64 own = lane < (int64_t)(n - c);
            vp = (fn_vd)(((fn_vi64)vp & own) | ((fn_vi64)fn_set1(p[r + 1]) & ~own));
            vh = (fn_vd)(((fn_vi64)vh & own) | ((fn_vi64)fn_set1(h[r + 1]) & ~own));
            vs = (fn_vd)(((fn_vi64)vs & own) | ((fn_vi64)fn_set1(s[r + 1]) & ~own));
        }
        t = ((fn_load_f64(x + i) - vp) - vh) * vs * fn_load_f64(g + c) + fn_load_f64(b + c);
        if (stream)
            fn_stream_f64(y + i, t);
        else
            fn_store_f64(y + i, t);
        fn_row_advance(&c, &r, n, FN_W);
        i += FN_W;
    }
#endif
    for (; i < total; i++, fn_row_advance(&c, &r, n, 1))
        y[i] = ((x[i] - p[r]) - h[r]) * s[r] * g[c] + b[c];
}

/* ------------------------------------------------------------------ */
/* float32 in, float32 out: the gradient's dx pass in float32 arithmetic.
 *
 * dx = r * (dy * gamma - a - xhat * b) is, with m the mean rounded to float
 * and d = mean - m what the rounding left,
 *     dx = dy * (gamma r) + (x - m) * (-r^2 b) + (d r^2 b - r a),
 * x - m being exact near the mean (Sterbenz) as in the forward pass: each
 * term keeps float32's relative error however large the mean.  The pass
 * before (the sums) stays in float64: it adds up a whole slice. */

/* One row of a tile of columns, column c's coefficients m, k1 (= gamma r),
 * k2 (= -r^2 b) and k0 (the constant) at [c]. */
static inline void fn_grad_cols_f32(const float *x, const float *dy, float *dx, const float *m,
                                    const float *k1, const float *k2, const float *k0,
                                    ptrdiff_t n, int stream)
{
    ptrdiff_t i = 0;
#if defined(__GNUC__) || defined(__clang__)
    for (ptrdiff_t head = fn_head_f32(dx, n, stream); i < head; i++)
        dx[i] = dy[i] * k1[i] + ((x[i] - m[i]) * k2[i] + k0[i]);
    for (; i + FN_WF <= n; i += FN_WF)
        fn_put_f32(dx + i, fn_loadu_f32(dy + i) * fn_loadu_f32(k1 + i)
                           + ((fn_loadu_f32(x + i) - fn_loadu_f32(m + i)) * fn_loadu_f32(k2 + i)
                              + fn_loadu_f32(k0 + i)), stream);
#endif
    for (; i < n; i++)
        dx[i] = dy[i] * k1[i] + ((x[i] - m[i]) * k2[i] + k0[i]);
}

/* One run of a slice: gamma along the run (g_inc 1) or one value (g_inc 0),
 * times r; the slice's m, k2, k0 as above.  x_ahead and dy_ahead (or NULL)
 * are the next run's, fetched a line per line of dx written, into L2.  (On
 * an AMD EPYC, x into L1 and dy into L2: layer_norm_backward over rows of
 * (8192, 1024), one thread, time / a copy, 2.43 -> 2.27, both into L2 or
 * both into L1 measured alike; on a Xeon with 2 MiB of L2 a core, x into L2
 * too: rows of (16384, 4096) float32 2.92 -> 2.55, (8192, 1024) and NCHW
 * maps the same.) */
static inline void fn_grad_run_f32(const float *x, const float *dy, float *dx, const float *g,
                                   ptrdiff_t g_inc, float r, float m, float k2, float k0,
                                   ptrdiff_t n, int stream, const char *x_ahead,
                                   const char *dy_ahead)
{
    ptrdiff_t i = 0;
#if defined(__GNUC__) || defined(__clang__)
    fn_vf32 vr = fn_set1_f32(r), vm = fn_set1_f32(m), v2 = fn_set1_f32(k2),
            v0 = fn_set1_f32(k0), vg = fn_set1_f32(g[0] * r);
    for (ptrdiff_t head = fn_head_f32(dx, n, stream); i < head; i++)
        dx[i] = dy[i] * (g[i * g_inc] * r) + ((x[i] - m) * k2 + k0);
    for (; i + FN_WF <= n; i += FN_WF) {
        if (x_ahead != NULL && i % 16 < FN_WF) {
            fn_prefetch_l2(x_ahead + i * sizeof(float));
            fn_prefetch_l2(dy_ahead + i * sizeof(float));
        }
        if (g_inc)
            vg = fn_loadu_f32(g + i) * vr;
        fn_put_f32(dx + i, fn_loadu_f32(dy + i) * vg + ((fn_loadu_f32(x + i) - vm) * v2 + v0),
                   stream);
    }
#endif
    for (; i < n; i++)
        dx[i] = dy[i] * (g[i * g_inc] * r) + ((x[i] - m) * k2 + k0);
}

/* dx of rows of n >= FN_WF values that follow each other in memory (x, dy
 * and dx: the channels of an NCHW image), row r's coefficients m, k1, k2,
 * k0 [r] (fn_grad_cols_f32's), as one run aligned to dx; a vector that
 * crosses into row r + 1 takes each lane's from its own row (as in
 * fn_normalize_rows_f32). */
static inline void fn_grad_rows_f32(const float *x, const float *dy, float *dx, ptrdiff_t rows,
                                    ptrdiff_t n, const float *m, const float *k1,
                                    const float *k2, const float *k0, int stream)
{
    ptrdiff_t total = rows * n, i = 0, r = 0, c = 0;
#if defined(__GNUC__) || defined(__clang__)
    fn_vi32 lane = fn_lanes_i32();
    for (ptrdiff_t head = fn_head_f32(dx, total, stream); i < head;
         i++, fn_row_advance(&c, &r, n, 1))
        dx[i] = dy[i] * k1[r] + ((x[i] - m[r]) * k2[r] + k0[r]);
    for (; i + FN_WF <= total; i += FN_WF) {
        fn_vf32 vm = fn_set1_f32(m[r]), v1 = fn_set1_f32(k1[r]), v2 = fn_set1_f32(k2[r]),
                v0 = fn_set1_f32(k0[r]);
        if (n - c < FN_WF) {
            fn_vi32 own = lane < (int32_t)(n - c);
            vm = (fn_vf32)(((fn_vi32)vm & own) | ((fn_vi32)fn_set1_f32(m[r + 1]) & ~own));
            v1 = (fn_vf32)(((fn_vi32)v1 & own) | ((fn_vi32)fn_set1_f32(k1[r + 1]) & ~own));
            v2 = (fn_vf32)(((fn_vi32)v2 & own) | ((fn_vi32)fn_set1_f32(k2[r + 1]) & ~own));
            v0 = (fn_vf32)(((fn_vi32)v0 & own) | ((fn_vi32)fn_set1_f32(k0[r + 1]) & ~own));
        }
        fn_put_f32(dx + i, fn_loadu_f32(dy + i) * v1 + ((fn_loadu_f32(x + i) - vm) * v2 + v0),
                   stream);
        fn_row_advance(&c, &r, n, FN_WF);
    }
#endif
    for (; i < total; i++, fn_row_advance(&c, &r, n, 1))
        dx[i] = dy[i] * k1[r] + ((x[i] - m[r]) * k2[r] + k0[r]);
}

static inline double fn_affine_one(const double *x, const double *dy, ptrdiff_t i, double m,
                                   double k1, double k2, double k0)
{
    double t = (x[i] - m) * k2 + k0;
    return dy ? t + dy[i] * k1 : t;
}

/* float64 rows of n >= FN_W values that follow each other in memory, row
 * r's coefficients m, k1, k2, k0 [r] (arrays of rows + 1: a vector that
 * crosses into row r + 1 takes each lane's from its own row):
 *     out = (x - m) * k2 + k0 + dy * k1     (dy NULL: without the last term)
 * the forward pass (k2 the scale times gamma) and the gradient's dx alike,
 * for the channels of an NCHW image. */
static inline void fn_affine_rows_f64(const double *x, const double *dy, double *out,
                                      ptrdiff_t rows, ptrdiff_t n, const double *m,
                                      const double *k1, const double *k2, const double *k0,
                                      int stream)
{
    ptrdiff_t total = rows * n, i = 0, r = 0, c = 0;
#if defined(__GNUC__) || defined(__clang__)
    fn_vi64 lane = fn_lanes_i64();
    for (ptrdiff_t head = fn_head_f64(out, total, stream); i < head;
         i++, fn_row_advance(&c, &r, n, 1))
        out[i] = fn_affine_one(x, dy, i, m[r], k1[r], k2[r], k0[r]);
    for (; i + FN_W <= total; i += FN_W) {
        fn_vd vm = fn_set1(m[r]), v2 = fn_set1(k2[r]), v0 = fn_set1(k0[r]), v1, t;
        if (n - c < FN_W) {
            fn_vi64 own = lane < (int64_t)(n - c);
            vm = (fn_vd)(((fn_vi64)vm & own) | ((fn_vi64)fn_set1(m[r + 1]) & ~own));
            v2 = (fn_vd)(((fn_vi64)v2 & own) | ((fn_vi64)fn_set1(k2[r + 1]) & ~own));
            v0 = (fn_vd)(((fn_vi64)v0 & own) | ((fn_vi64)fn_set1(k0[r + 1]) & ~own));
        }
        t = (fn_load_f64(x + i) - vm) * v2 + v0;
        if (dy) {
            v1 = fn_set1(k1[r]);
            if (n - c < FN_W) {
                fn_vi64 own = lane < (int64_t)(n - c);
                v1 = (fn_vd)(((fn_vi64)v1 & own) | ((fn_vi64)fn_set1(k1[r + 1]) & ~own));
            }
            t = t + fn_load_f64(dy + i) * v1;
        }
        if (stream)
            fn_stream_f64(out + i, t);
        else
            fn_store_f64(out + i, t);
        fn_row_advance(&c, &r, n, FN_W);
    }
#endif
    for (; i < total; i++, fn_row_advance(&c, &r, n, 1))
        out[i] = fn_affine_one(x, dy, i, m[r], k1[r], k2[r], k0[r]);
}

/* ------------------------------------------------------------------ */
/* Runtime CPU detection, used by the baseline module to pick a level.  */
static inline int fn_cpu_has_x86_64_v3(void)
{
#if FN_X86 && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __builtin_cpu_supports("bmi2") && __builtin_cpu_supports("f16c") ? 1 : 0;
#else
    return 0;
#endif
}

static inline int fn_cpu_has_x86_64_v4(void)
{
#if FN_X86 && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    return fn_cpu_has_x86_64_v3() && __builtin_cpu_supports("avx512f") &&
           __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512cd") ? 1 : 0;
#else
    return 0;
#endif
}

#endif /* FASTNORM_SIMD_H */
