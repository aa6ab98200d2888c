/*
 * columns_loop.c -- mean_var's column statistics as a plain loop, for
 * fastnorm's columns kernel to be timed against in the same process
 * (benchmarks/columns_loop.py compiles this file and loads it).
 *
 * x is float32, R rows of C columns (C a multiple of 8), row after row.
 * Strips of 8 columns are swept down S rows at a time, two rows a step,
 * summing x - p and its square in float64 (p: each column's first value),
 * as fastnorm's AVX2 kernel sums float32 columns. Row blocks of B rows
 * keep sums of their own in `state` (2 * (C + 8) doubles a block); B = R
 * gives one block.
 *
 * The next sweep's rows may be prefetched into L2 by a cursor that walks
 * their lines in address order:
 *
 *   loop_plain       no cursor
 *   loop_rows        a step for each row of each strip, before its rows,
 *                    each step ceil(lines of a row / strips) lines
 *                    (fastnorm's cursor before 593700c)
 *   loop_share       each strip's share of the lines (all of them over the
 *                    strips) in one loop before its rows (fastnorm since)
 *   loop_rows_idle, loop_share_idle
 *                    the same cursors' bookkeeping without the prefetches
 *
 * x86-64 with AVX2 and FMA only. Not part of the package or of asv: it
 * times loops, not fastnorm (docs/measurements.md quotes its figures).
 */
#include <immintrin.h>
#include <stdint.h>

typedef struct {
    const char *row;  /* the row being fetched */
    long col;         /* the next line's byte offset in it */
    long width;       /* bytes of a row */
    long rs;          /* bytes from row to row */
    long rows;        /* rows left */
    long lines;       /* lines a step (rows) or a strip (share) */
} Cursor;

static inline void fetch_line(const char *a, int fetch)
{
    if (fetch)
        _mm_prefetch(a, _MM_HINT_T1);
    else
        __asm__ volatile("" : : "r"(a));    /* the address, kept */
}

/* A step of the cursor: its next `lines` lines, each checked against the
 * rows' end (fastnorm's ahead_step before 593700c). */
static inline void cursor_step(Cursor *a, int fetch)
{
    for (long l = 0; l < a->lines; l++) {
        if (a->rows == 0)
            return;
        fetch_line(a->row + a->col, fetch);
        a->col += 64;
        if (a->col >= a->width) {
            a->col = 0;
            a->row += a->rs;
            a->rows--;
        }
    }
}

/* A strip's share: its next `lines` lines, the end checked at each row's
 * end (fastnorm's ahead_lines). */
static inline void cursor_share(Cursor *a, int fetch)
{
    if (a->rows == 0)
        return;
    for (long l = 0; l < a->lines; l++) {
        fetch_line(a->row + a->col, fetch);
        a->col += 64;
        if (a->col >= a->width) {
            a->col = 0;
            a->row += a->rs;
            if (--a->rows == 0)
                return;
        }
    }
}

enum { NONE, ROWS, SHARE };

/* One strip: n rows of 8 columns from xr, sums continued in s and q. */
static inline void strip(const float *xr, long C, long n, const double *p, double *s,
                         double *q, Cursor *a, int cursor, int fetch)
{
    __m256d one = _mm256_set1_pd(1.0);
    __asm__("" : "+x"(one));    /* an FMA by 1, as fastnorm adds */
    __m256d p0 = _mm256_loadu_pd(p), p1 = _mm256_loadu_pd(p + 4);
    __m256d s0 = _mm256_loadu_pd(s), s1 = _mm256_loadu_pd(s + 4);
    __m256d q0 = _mm256_loadu_pd(q), q1 = _mm256_loadu_pd(q + 4);
    __m256d t0 = _mm256_setzero_pd(), t1 = t0, u0 = t0, u1 = t0;
    if (cursor == SHARE)
        cursor_share(a, fetch);
    if (cursor == ROWS)
        for (long k = 0; k < n; k++)
            cursor_step(a, fetch);
    long k = 0;
    for (; k + 1 < n; k += 2) {
        __m256d d0 = _mm256_sub_pd(_mm256_cvtps_pd(_mm_loadu_ps(xr)), p0);
        __m256d d1 = _mm256_sub_pd(_mm256_cvtps_pd(_mm_loadu_ps(xr + 4)), p1);
        __m256d e0 = _mm256_sub_pd(_mm256_cvtps_pd(_mm_loadu_ps(xr + C)), p0);
        __m256d e1 = _mm256_sub_pd(_mm256_cvtps_pd(_mm_loadu_ps(xr + C + 4)), p1);
        s0 = _mm256_fmadd_pd(d0, one, s0);
        s1 = _mm256_fmadd_pd(d1, one, s1);
        q0 = _mm256_fmadd_pd(d0, d0, q0);
        q1 = _mm256_fmadd_pd(d1, d1, q1);
        t0 = _mm256_fmadd_pd(e0, one, t0);
        t1 = _mm256_fmadd_pd(e1, one, t1);
        u0 = _mm256_fmadd_pd(e0, e0, u0);
        u1 = _mm256_fmadd_pd(e1, e1, u1);
        xr += 2 * C;
    }
    if (k < n) {
        __m256d d0 = _mm256_sub_pd(_mm256_cvtps_pd(_mm_loadu_ps(xr)), p0);
        __m256d d1 = _mm256_sub_pd(_mm256_cvtps_pd(_mm_loadu_ps(xr + 4)), p1);
        s0 = _mm256_add_pd(s0, d0);
        s1 = _mm256_add_pd(s1, d1);
        q0 = _mm256_fmadd_pd(d0, d0, q0);
        q1 = _mm256_fmadd_pd(d1, d1, q1);
    }
    _mm256_storeu_pd(s, _mm256_add_pd(s0, t0));
    _mm256_storeu_pd(s + 4, _mm256_add_pd(s1, t1));
    _mm256_storeu_pd(q, _mm256_add_pd(q0, u0));
    _mm256_storeu_pd(q + 4, _mm256_add_pd(q1, u1));
}

static inline void sweeps(const float *x, long R, long C, const double *p, double *state,
                          long S, long B, int cursor, int fetch)
{
    long strips = C / 8, row_lines = (C * 4 + 63) / 64;
    for (long b0 = 0; b0 < R; b0 += B) {
        double *s = state + (b0 / B) * 2 * (C + 8), *q = s + C + 8;
        long end = b0 + B < R ? b0 + B : R;
        for (long c = 0; c < C; c++)
            s[c] = q[c] = 0.0;
        for (long r0 = b0; r0 < end; r0 += S) {
            long n = end - r0 < S ? end - r0 : S;
            long next = R - (r0 + n) < S ? R - (r0 + n) : S;
            Cursor a = {(const char *)(x + (r0 + n) * C), 0, C * 4, C * 4, next, 0};
            a.lines = cursor == ROWS ? (row_lines + strips - 1) / strips
                                     : (row_lines * next + strips - 1) / strips;
            for (long c = 0; c < C; c += 8)
                strip(x + r0 * C + c, C, n, p + c, s + c, q + c, &a, cursor, fetch);
        }
    }
}

#define LOOP(name, cursor, fetch)                                                        \
    void name(const float *x, long R, long C, const double *p, double *state, long S, \
              long B)                                                                  \
    {                                                                                  \
        sweeps(x, R, C, p, state, S, B, cursor, fetch);                                \
    }

LOOP(loop_plain, NONE, 0)
LOOP(loop_rows, ROWS, 1)
LOOP(loop_share, SHARE, 1)
LOOP(loop_rows_idle, ROWS, 0)
LOOP(loop_share_idle, SHARE, 0)
