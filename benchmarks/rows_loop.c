/*
 * rows_loop.c -- layer norm over short rows as a plain loop, for
 * fastnorm's short-rows kernel to be timed against in the same process
 * (benchmarks/rows_loop.py compiles this file and loads it).
 *
 * x and y are float32, R rows of N values (N a multiple of 8), row after
 * row; g and b the gain and bias of a row. A row at a time: the sums of
 * d = x - p and of d * d in float64 (p: the row's first value, as
 * fastnorm's AVX2 kernel sums float32 rows), mean = p + S / N,
 * m2 = Q - S * S / N, k = 1 / sqrt(m2 / N + eps), then
 * y = ((x - mean) * k) * g + b in float32 vectors, stored plainly.
 *
 *   loop_order  one chain of 4 lanes a row, a vector after the other,
 *               lanes summed (l0 + l1) + (l2 + l3): fastnorm's order,
 *               which fixes its results' bits
 *   loop_two    two chains a row (even and odd vectors), then added:
 *               half the chain's length, other bits
 *
 * x86-64 with AVX2 and FMA only. Not part of the package or of asv: it
 * times loops, not fastnorm (docs/measurements.md quotes its figures).
 */
#include <immintrin.h>
#include <math.h>

static inline double lanes_sum(__m256d v)
{
    __m128d h = _mm_hadd_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
    return _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
}

static inline __m256d deviation(const float *x, __m256d p)
{
    return _mm256_sub_pd(_mm256_cvtps_pd(_mm_loadu_ps(x)), p);
}

/* The row's output from its sums S, Q about its first value p. */
static inline void row_out(const float *x, float *y, long n, double p, double S, double Q,
                           double eps, const float *g, const float *b)
{
    double mean = p + S / (double)n;
    double m2 = Q - S * S / (double)n;
    double k = 1.0 / sqrt(m2 / (double)n + eps);
    __m256 vm = _mm256_set1_ps((float)mean), vk = _mm256_set1_ps((float)k);
    for (long j = 0; j < n; j += 8) {
        __m256 t = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + j), vm), vk);
        _mm256_storeu_ps(y + j, _mm256_fmadd_ps(t, _mm256_loadu_ps(g + j),
                                                _mm256_loadu_ps(b + j)));
    }
}

void loop_order(const float *x, float *y, long rows, long n, double eps, const float *g,
                const float *b)
{
    for (long r = 0; r < rows; r++, x += n, y += n) {
        __m256d p = _mm256_set1_pd(x[0]), s = _mm256_setzero_pd(), q = s;
        for (long j = 0; j < n; j += 4) {
            __m256d d = deviation(x + j, p);
            s = _mm256_add_pd(s, d);
            q = _mm256_fmadd_pd(d, d, q);
        }
        row_out(x, y, n, x[0], lanes_sum(s), lanes_sum(q), eps, g, b);
    }
}

void loop_two(const float *x, float *y, long rows, long n, double eps, const float *g,
              const float *b)
{
    for (long r = 0; r < rows; r++, x += n, y += n) {
        __m256d p = _mm256_set1_pd(x[0]), s = _mm256_setzero_pd(), q = s, s1 = s, q1 = s;
        for (long j = 0; j < n; j += 8) {
            __m256d d = deviation(x + j, p), e = deviation(x + j + 4, p);
            s = _mm256_add_pd(s, d);
            q = _mm256_fmadd_pd(d, d, q);
            s1 = _mm256_add_pd(s1, e);
            q1 = _mm256_fmadd_pd(e, e, q1);
        }
        row_out(x, y, n, x[0], lanes_sum(_mm256_add_pd(s, s1)), lanes_sum(_mm256_add_pd(q, q1)),
                eps, g, b);
    }
}
