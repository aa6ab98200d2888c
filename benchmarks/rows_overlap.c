/*
 * rows_overlap.c -- a model of the rows' two passes out of memory on one
 * thread: how much of a row's output can hide the next row's reads.
 *
 *   gcc -O2 -mavx2 -mfma -o /tmp/rows_overlap benchmarks/rows_overlap.c
 *   /tmp/rows_overlap [ROWS [REPEATS]]      # default 16384 rows, 5 repeats
 *
 * Rows of 4096 float32 values (16 KiB; 256 MiB for the default rows).
 * Statistics are shifted sums in float64 (a conversion, a subtraction, an
 * addition and an FMA a vector, as the kernels' float32 sums), the output
 * (x - m) * k streamed around the caches.  Each loop prints its time over
 * memcpy's of the same bytes, in the same repetition:
 *
 *   read         the statistics of every row alone
 *   serial       row k's statistics, then its output (the kernels' order)
 *   fetch next   the same, the output fetching row k + 1 a line at a time
 *   touch next   the same, the output loading a value of each line of k + 1
 *   fused        row k's output and row k + 1's statistics in one loop
 *   fused+1K     the same, fetching 1 KiB ahead in row k + 1
 *   turns 1K     the two loops taking turns, 1 KiB pieces, fetching 1 KiB ahead
 *
 * x86-64 with AVX2 and FMA only.  Not part of the package or of asv: it
 * times loops, not fastnorm (docs/measurements.md quotes its figures).
 */
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define N 4096

typedef struct {
    __m256d s_lo, s_hi, q_lo, q_hi;
} Sums;

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static Sums sums_zero(void)
{
    Sums s;
    s.s_lo = s.s_hi = s.q_lo = s.q_hi = _mm256_setzero_pd();
    return s;
}

/* A vector of 8 values into s, about `shift` (the row's first value). */
static inline void sums_vec(Sums *s, __m256 v, __m256d shift)
{
    __m256d lo = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(v)), shift);
    __m256d hi = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)), shift);
    s->s_lo = _mm256_add_pd(s->s_lo, lo);
    s->s_hi = _mm256_add_pd(s->s_hi, hi);
    s->q_lo = _mm256_fmadd_pd(lo, lo, s->q_lo);
    s->q_hi = _mm256_fmadd_pd(hi, hi, s->q_hi);
}

/* Values i0 .. i1 of row x into s; with `ahead`, fetch that many bytes on. */
static inline void sums_add(Sums *s, const float *x, int i0, int i1, int ahead)
{
    __m256d shift = _mm256_set1_pd(x[0]);
    Sums t = *s;        /* a local: its vectors stay in registers */
    for (int i = i0; i < i1; i += 8) {
        if (ahead && !(i & 15))
            _mm_prefetch((const char *)(x + i) + ahead, _MM_HINT_T0);
        sums_vec(&t, _mm256_load_ps(x + i), shift);
    }
    *s = t;
}

static float sums_mean(const Sums *s, const float *x)
{
    double t[4];
    _mm256_storeu_pd(t, _mm256_add_pd(s->s_lo, s->s_hi));
    return (float)(x[0] + (t[0] + t[1] + t[2] + t[3]) / N);
}

static inline __m256 map(const float *x, int i, __m256 m)
{
    return _mm256_sub_ps(_mm256_load_ps(x + i), m);
}

/* Row x's output into y, values i0 .. i1; with `next`, fetch (touch = 0)
 * or load (touch = 1) a value of each line of the row after. */
static inline void output(const float *x, float *y, int i0, int i1, float mean,
                          const float *next, int touch, volatile int *sink)
{
    __m256 m = _mm256_set1_ps(mean);
    int loaded = 0;
    for (int i = i0; i < i1; i += 8) {
        if (next && !(i & 15)) {
            if (touch)
                loaded |= *(const volatile int *)(next + i);
            else
                _mm_prefetch((const char *)(next + i), _MM_HINT_T1);
        }
        _mm256_stream_ps(y + i, map(x, i, m));
    }
    *sink |= loaded;
}

/* Row x's output into y and the next row's sums, vector by vector. */
static void fused(const float *x, float *y, float mean, const float *next, Sums *s, int ahead)
{
    __m256 m = _mm256_set1_ps(mean);
    __m256d shift = _mm256_set1_pd(next[0]);
    Sums t = *s;
    for (int i = 0; i < N; i += 8) {
        if (ahead && !(i & 15))
            _mm_prefetch((const char *)(next + i) + ahead, _MM_HINT_T0);
        sums_vec(&t, _mm256_load_ps(next + i), shift);
        _mm256_stream_ps(y + i, map(x, i, m));
    }
    *s = t;
}

enum { READ, SERIAL, FETCH, TOUCH, FUSED, FUSED_AHEAD, TURNS, LOOPS };
static const char *names[LOOPS] = {"read", "serial", "fetch next", "touch next", "fused",
                                   "fused+1K", "turns 1K"};

static void run(int loop, const float *x, float *y, long rows, volatile int *sink)
{
    Sums s;
    float mean;
    if (loop == READ) {
        for (long r = 0; r < rows; r++) {
            s = sums_zero();
            sums_add(&s, x + r * N, 0, N, 8192);
            *sink += (int)sums_mean(&s, x + r * N);
        }
        return;
    }
    if (loop == SERIAL || loop == FETCH || loop == TOUCH) {
        for (long r = 0; r < rows; r++) {
            const float *next = r + 1 < rows && loop != SERIAL ? x + (r + 1) * N : NULL;
            s = sums_zero();
            sums_add(&s, x + r * N, 0, N, 8192);
            output(x + r * N, y + r * N, 0, N, sums_mean(&s, x + r * N), next, loop == TOUCH,
                   sink);
        }
        _mm_sfence();
        return;
    }
    /* The pipelined loops: row 0's sums alone, then each row's output with
     * the next row's sums, the last row's output alone. */
    s = sums_zero();
    sums_add(&s, x, 0, N, 8192);
    mean = sums_mean(&s, x);
    for (long r = 0; r < rows; r++) {
        const float *xr = x + r * N, *next = x + (r + 1) * N;
        float *yr = y + r * N;
        if (r + 1 == rows) {
            output(xr, yr, 0, N, mean, NULL, 0, sink);
            break;
        }
        s = sums_zero();
        if (loop == TURNS)
            for (int i = 0; i < N; i += 256) {
                output(xr, yr, i, i + 256, mean, NULL, 0, sink);
                sums_add(&s, next, i, i + 256, 1024);
            }
        else
            fused(xr, yr, mean, next, &s, loop == FUSED_AHEAD ? 1024 : 0);
        mean = sums_mean(&s, next);
    }
    _mm_sfence();
}

int main(int argc, char **argv)
{
    long rows = argc > 1 ? atol(argv[1]) : 16384;
    int repeats = argc > 2 ? atoi(argv[2]) : 5;
    size_t bytes = (size_t)rows * N * sizeof(float);
    float *x = aligned_alloc(64, bytes), *y = aligned_alloc(64, bytes);
    volatile int sink = 0;
    if (rows < 2 || x == NULL || y == NULL) {
        fprintf(stderr, "rows_overlap: need at least 2 rows and %zu bytes twice\n", bytes);
        return 2;
    }
    for (size_t i = 0; i < (size_t)rows * N; i++) {
        x[i] = (float)(i % 97) * 0.01f;
        y[i] = 0.0f;
    }
    printf("%ld rows of %d float32 (%zu MiB), time / memcpy\n", rows, N, bytes >> 20);
    for (int k = 0; k < LOOPS; k++)
        printf("%12s", names[k]);
    printf("\n");
    for (int rep = 0; rep < repeats; rep++) {
        double t0 = now(), copy;
        memcpy(y, x, bytes);
        copy = now() - t0;
        for (int k = 0; k < LOOPS; k++) {
            t0 = now();
            run(k, x, y, rows, &sink);
            printf("%12.2f", (now() - t0) / copy);
        }
        printf("   (memcpy %.1f ms)\n", copy * 1e3);
        fflush(stdout);
    }
    return sink == 12345;
}
