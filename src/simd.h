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
 * (dynamic); see schedule_for in plan.pxd.  A thread's own setting: calls from other
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
 * one waiting while the other's page is zeroed. */
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
/* 1.0 in every lane, hidden from the compiler where the machine has FMA:
 * fn_fma(d, one, acc) is then acc + d on the multiply-add pipes, the same
 * bits (d * 1 is exact).  AMD's Zen cores add on two pipes and multiply-add
 * on two others, and a loop of subtractions, additions and FMAs (the
 * shifted sums) leaves the latter idle half the time.  Without FMA the
 * compiler sees the 1 and keeps the addition. */
static inline fn_vd fn_one_for_fma(void)
{
    fn_vd one = fn_set1(1.0);
#if defined(__FMA__) && defined(__AVX512F__)
    __asm__("" : "+v"(one));
#elif defined(__FMA__)
    __asm__("" : "+x"(one));
#endif
    return one;
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
static inline fn_vd fn_one_for_fma(void) { return fn_set1(1.0); }
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

/* The upper halves of the vector registers cleared, at the entry points:
 * NumPy's and Python's code, compiled for SSE, pays for each instruction
 * while they are dirty, and the compiler left them so (docs/design.md). */
static inline void fn_clean_upper(void)
{
#if defined(__AVX__)
    _mm256_zeroupper();
#endif
}

static inline fn_vd fn_zero(void) { return fn_set1(0.0); }

/* fn_sum_rounded lane by lane: one volatile store and load a vector. */
static inline fn_vd fn_vsum_rounded(fn_vd a, fn_vd b)
{
    volatile fn_vd ra = a, rb = b;
    fn_vd x = ra, y = rb;
    return fn_add(x, y);
}

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

/* Whether every lane of a lies strictly between lo and hi (false for NaN,
 * as a scalar lo < a && a < hi is). */
static inline int fn_all_between(fn_vd a, double lo, double hi)
{
#if (defined(__GNUC__) || defined(__clang__)) && defined(__AVX512F__)
    __m512d v = (__m512d)a;
    return (_mm512_cmp_pd_mask(v, _mm512_set1_pd(lo), _CMP_GT_OQ)
            & _mm512_cmp_pd_mask(v, _mm512_set1_pd(hi), _CMP_LT_OQ)) == 0xFF;
#elif (defined(__GNUC__) || defined(__clang__)) && defined(__AVX__)
    __m256d v = (__m256d)a;
    return _mm256_movemask_pd(_mm256_and_pd(_mm256_cmp_pd(v, _mm256_set1_pd(lo), _CMP_GT_OQ),
                                            _mm256_cmp_pd(v, _mm256_set1_pd(hi), _CMP_LT_OQ)))
           == 0xF;
#elif (defined(__GNUC__) || defined(__clang__)) && defined(__SSE2__)
    __m128d v = (__m128d)a;
    return _mm_movemask_pd(_mm_and_pd(_mm_cmpgt_pd(v, _mm_set1_pd(lo)),
                                      _mm_cmplt_pd(v, _mm_set1_pd(hi)))) == 0x3;
#else
    double t[FN_W];
    memcpy(t, &a, sizeof t);
    for (int l = 0; l < FN_W; l++)
        if (!(lo < t[l] && t[l] < hi))
            return 0;
    return 1;
#endif
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

/* The lane mask of the lanes of a that hold a number (not NaN). */
static inline fn_vd fn_numbers(fn_vd a)
{
#if defined(__GNUC__) || defined(__clang__)
    return (fn_vd)(a == a);
#else
    double v[FN_W];
    uint64_t bits[FN_W];
    fn_vd r;
    memcpy(v, &a, sizeof v);
    for (int l = 0; l < FN_W; l++)
        bits[l] = v[l] == v[l] ? ~(uint64_t)0 : 0;
    memcpy(&r, bits, sizeof r);
    return r;
#endif
}

/* Counts lane by lane, held as int64 in a vector's bits (never used as
 * numbers; fn_zero() is none): each lane set in a lane mask (all ones, -1)
 * adds one.  An integer subtraction, where adding a masked 1.0 takes an AND
 * and a floating-point addition, whose ports the sums need. */
static inline fn_vd fn_count(fn_vd k, fn_vd mask)
{
#if defined(__GNUC__) || defined(__clang__)
    typedef int64_t vi __attribute__((vector_size(FN_VBYTES)));
    return (fn_vd)((vi)k - (vi)mask);
#else
    int64_t c[FN_W], m[FN_W];
    memcpy(c, &k, sizeof c); memcpy(m, &mask, sizeof m);
    for (int l = 0; l < FN_W; l++) c[l] -= m[l];
    memcpy(&k, c, sizeof c);
    return k;
#endif
}

/* Two vectors of counts as one (fn_count's). */
static inline fn_vd fn_count_add(fn_vd a, fn_vd b)
{
    int64_t x[FN_W], y[FN_W];
    memcpy(x, &a, sizeof x); memcpy(y, &b, sizeof y);
    for (int l = 0; l < FN_W; l++) x[l] += y[l];
    memcpy(&a, x, sizeof x);
    return a;
}

/* fn_count's counts as doubles, lane by lane into t. */
static inline void fn_store_counts(double *t, fn_vd k)
{
    int64_t c[FN_W];
    memcpy(c, &k, sizeof c);
    for (int l = 0; l < FN_W; l++) t[l] = (double)c[l];
}

/* The lane mask of FN_W where= bytes: lanes whose byte is nonzero. */
static inline fn_vd fn_bytes_mask(const unsigned char *m)
{
#if (defined(__GNUC__) || defined(__clang__)) && defined(__AVX512F__)
    __m512i b = _mm512_cvtepu8_epi64(_mm_loadl_epi64((const __m128i *)m));
    return (fn_vd)_mm512_castsi512_pd(
        _mm512_maskz_set1_epi64(_mm512_test_epi64_mask(b, b), -1));
#elif (defined(__GNUC__) || defined(__clang__)) && defined(__AVX2__)
    int32_t four;
    memcpy(&four, m, 4);
    __m256i b = _mm256_cvtepu8_epi64(_mm_cvtsi32_si128(four));
    __m256i none = _mm256_cmpeq_epi64(b, _mm256_setzero_si256());
    return (fn_vd)_mm256_castsi256_pd(_mm256_xor_si256(none, _mm256_set1_epi64x(-1)));
#else
    uint64_t bits[FN_W];
    fn_vd r;
    for (int l = 0; l < FN_W; l++)
        bits[l] = m[l] ? ~(uint64_t)0 : 0;
    memcpy(&r, bits, sizeof r);
    return r;
#endif
}

/* Whether a byte of w is 0 (the classic test: its high bit survives). */
static inline int fn_zero_byte(uint64_t w)
{
    return ((w - (uint64_t)0x0101010101010101) & ~w & (uint64_t)0x8080808080808080) != 0;
}

/* where= bytes, a vector of them a step where the machine has AVX2, else
 * a word.  fn_mask_kind: of the n > 0 bytes at m, 0 none set, 1 every one
 * set, 2 some.  fn_mask_lead: how many from the first on are set
 * (`selected`) or unset. */
static inline int fn_mask_kind(const unsigned char *m, ptrdiff_t n)
{
    uint64_t some = 0, unset = 0, w;
    ptrdiff_t i = 0;
#if (defined(__GNUC__) || defined(__clang__)) && defined(__AVX2__)
    __m256i vs = _mm256_setzero_si256(), vu = _mm256_setzero_si256(), v;
    for (; i + 32 <= n; i += 32) {
        v = _mm256_loadu_si256((const __m256i *)(m + i));
        vs = _mm256_or_si256(vs, v);
        vu = _mm256_or_si256(vu, _mm256_cmpeq_epi8(v, _mm256_setzero_si256()));
    }
    some = !_mm256_testz_si256(vs, vs);
    unset = !_mm256_testz_si256(vu, vu);
#endif
    for (; i + 8 <= n; i += 8) {
        memcpy(&w, m + i, 8);
        some |= w;
        unset |= fn_zero_byte(w);
    }
    for (; i < n; i++) {
        some |= m[i];
        unset |= m[i] == 0;
    }
    return unset == 0 ? 1 : (some != 0 ? 2 : 0);
}

static inline ptrdiff_t fn_mask_lead(const unsigned char *m, ptrdiff_t n, int selected)
{
    ptrdiff_t i = 0;
#if (defined(__GNUC__) || defined(__clang__)) && defined(__AVX2__)
    for (; i + 32 <= n; i += 32) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(m + i));
        uint32_t zero = (uint32_t)_mm256_movemask_epi8(
            _mm256_cmpeq_epi8(v, _mm256_setzero_si256()));
        uint32_t stop = selected ? zero : ~zero;
        if (stop != 0)
            return i + __builtin_ctz(stop);
    }
#endif
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, m + i, 8);
        if (selected ? fn_zero_byte(w) : w != 0)
            break;
    }
    while (i < n && (m[i] != 0) == selected)
        i++;
    return i;
}

#if defined(__GNUC__) || defined(__clang__)
#define FN_PREFETCH(p, locality) __builtin_prefetch((p), 0, (locality))
#else
#define FN_PREFETCH(p, locality) ((void)(p))
#endif

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
#elif (defined(__GNUC__) || defined(__clang__)) && defined(__SSE2__)
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
