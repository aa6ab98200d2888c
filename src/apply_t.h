/*
 * apply_t.h -- the output pass for one compute type: FN_C values in
 * vectors FN_V of FN_VW lanes, functions named FN_S(name).  apply.h defines
 * those and includes this once per compute type (which undefines them at
 * its end); see apply.h for the map.
 *
 * `kind` is FN_PLAIN, FN_GAIN or FN_GRAD, and like every flag below a
 * constant where the function is called: each call inlines into a loop of
 * its own.  Coefficient scalars are copied into locals and vectors before
 * the loops (through pointers the compiler would reload them after every
 * store, as y might alias them).
 */

/* One value: the map of apply.h. */
FN_AI FN_C FN_S(fn_map1)(FN_C xv, FN_C m, FN_C k2, FN_C k0)
{
    return (xv - m) * k2 + k0;
}

/* Fetch, as value i of a run of n is written, the line `dist` values on
 * (past the run's end, in the next run: ahead), or downwards the run
 * before at the same offset (ahead); once a line of the input. */
FN_AI void FN_S(fn_fetch)(const void *x, int xt, const char *ahead, ptrdiff_t i, ptrdiff_t n,
                          ptrdiff_t dist, int down)
{
    size_t size = fn_sizes[xt];
    ptrdiff_t p;
    if ((i * (ptrdiff_t)size) % 64 >= FN_VW * (ptrdiff_t)size)
        return;
    if (down) {
        fn_prefetch_l2(ahead + i * size);
        return;
    }
    p = i + dist;
    if (p < n)
        fn_prefetch_l2((const char *)x + p * size);
    else if (p - n < n)
        fn_prefetch_l2(ahead + (p - n) * size);
}

#ifndef FN_PICKED
/* body's loops twice: `pick` the where= bytes sel, or a constant NULL in the
 * copy for calls without them (the compiler drops its tests there). */
#define FN_PICKED(body)                                                          \
    do {                                                                         \
        if (sel == NULL) {                                                       \
            const unsigned char *const pick = NULL;                              \
            body;                                                                \
        } else {                                                                 \
            const unsigned char *const pick = sel;                               \
            body;                                                                \
        }                                                                        \
    } while (0)
#endif

/* A run of n contiguous values, one set of coefficients for the run:
 *   FN_PLAIN  (x - m) k2 + k0
 *   FN_GAIN   ((x - m) k2 + k0) g[i gi] + b[i bi]     gi, bi: 1 along the run, 0 one value
 *   FN_GRAD   (x - m) k2 + k0 + dy[i] k1 g[i gi]      g: gamma along the run (k1 = rstd),
 *                                                    or gi 0 and g[0] = 1 (k1 whole)
 * down: the last value first.  ahead (dy_ahead: dy's) NULL, or what to
 * fetch as the run is written (fn_fetch).  sel (where=) NULL, or a byte a
 * value: y is written where it is nonzero alone (a vector of mixed lanes
 * blends y's own values back). */
FN_AI void FN_S(fn_run)(const void *x, int xt, void *y, int yt, const void *dy, ptrdiff_t n,
                        FN_C m, FN_C k2, FN_C k0, FN_C k1, const FN_C *g, ptrdiff_t gi,
                        const FN_C *b, ptrdiff_t bi, const int kind, int stream, int down,
                        const char *ahead, const char *dy_ahead, ptrdiff_t dist,
                        const unsigned char *sel)
{
    ptrdiff_t i, head, body;
    FN_V vm = FN_SET1(m), v2 = FN_SET1(k2), v0 = FN_SET1(k0), v1 = FN_SET1(k1), t;
    /* Gain and bias of one value, broadcast here once. */
    FN_V g0 = FN_SET1(kind != FN_PLAIN && gi == 0 ? g[0] : (FN_C)0);
    FN_V b0 = FN_SET1(kind == FN_GAIN && bi == 0 ? b[0] : (FN_C)0);
    FN_C s;
    head = fn_head(y, fn_sizes[yt], FN_VW, n, stream);
    body = head + (n - head) / FN_VW * FN_VW;
#define FN_RUN_ONE(i)                                                            \
    do {                                                                         \
        if (pick != NULL && !pick[i])                                            \
            break;                                                               \
        s = FN_S(fn_map1)(FN_LD1(x, xt, i), m, k2, k0);                          \
        if (kind == FN_GAIN)                                                     \
            s = s * g[(i) * gi] + b[(i) * bi];                                   \
        else if (kind == FN_GRAD)                                                \
            s = s + FN_LD1(dy, xt, i) * (k1 * g[(i) * gi]);                      \
        FN_ST1(y, yt, i, s);                                                     \
    } while (0)
#define FN_RUN_VEC(i)                                                            \
    do {                                                                         \
        t = FN_FMA(FN_SUB(FN_VLD(x, xt, i), vm), v2, v0);                        \
        if (kind == FN_GAIN)                                                     \
            t = FN_FMA(t, gi ? FN_LDC(g + (i)) : g0, bi ? FN_LDC(b + (i)) : b0);   \
        else if (kind == FN_GRAD)                                                \
            t = FN_FMA(FN_VLD(dy, xt, i), gi ? FN_MUL(FN_LDC(g + (i)), v1)       \
                                             : FN_MUL(g0, v1), t);               \
        if (pick != NULL)                                                        \
            t = FN_SELECT(FN_BYTES_MASK(pick + (i)), t, FN_VLD(y, yt, i));       \
        FN_VST(y, yt, i, t, stream);                                             \
    } while (0)
    /* Downwards runs take no sel (FN_PICKED's pick, a constant NULL). */
    if (down) {
        const unsigned char *const pick = NULL;
        (void)sel;
        for (i = n - 1; i >= body; i--)
            FN_RUN_ONE(i);
        for (i = body - FN_VW; i >= head; i -= FN_VW) {
            if (ahead != NULL)
                FN_S(fn_fetch)(x, xt, ahead, i, n, 0, 1);
            FN_RUN_VEC(i);
        }
        for (i = head - 1; i >= 0; i--)
            FN_RUN_ONE(i);
        return;
    }
#define FN_RUN_STEP(i)                                                           \
    do {                                                                         \
        if (ahead != NULL) {                                                     \
            FN_S(fn_fetch)(x, xt, ahead, i, n, dist, 0);                         \
            if (dy_ahead != NULL)                                                \
                FN_S(fn_fetch)(dy, xt, dy_ahead, i, n, dist, 0);                 \
        }                                                                        \
        FN_RUN_VEC(i);                                                           \
    } while (0)
#define FN_RUN_UP                                                                \
    do {                                                                         \
        for (i = 0; i < head; i++)                                               \
            FN_RUN_ONE(i);                                                       \
        /* two vectors a step (see fn_rows_as) */                                \
        for (; i + 2 * FN_VW <= body; i += 2 * FN_VW) {                          \
            FN_RUN_STEP(i);                                                      \
            FN_RUN_STEP(i + FN_VW);                                              \
        }                                                                        \
        for (; i < body; i += FN_VW)                                             \
            FN_RUN_STEP(i);                                                      \
        for (; i < n; i++)                                                       \
            FN_RUN_ONE(i);                                                       \
    } while (0)
    FN_PICKED(FN_RUN_UP);
#undef FN_RUN_ONE
#undef FN_RUN_VEC
#undef FN_RUN_STEP
#undef FN_RUN_UP
}

/* `total` contiguous values, value c's coefficients at [c] of arrays
 * continued periodically for FN_VW values past n (m[n + j] = m[j]): one
 * row of n columns (total <= n), or rows of n that follow each other as one
 * run (no per-row work at all):
 *   FN_PLAIN  (x - m[c]) k2[c] + k0[c]
 *   FN_GAIN   ((x - m[c]) k2[c] + k0[c]) g + b        g, b: the row's
 *   FN_GRAD   (x - m[c]) k2[c] + k0[c] + dy k1[c] g   g: the row's gain (or 1)
 * ahead (or NULL): the same bytes of the next piece of x, fetched a
 * vector's worth per vector.  sel: as fn_run's (where=, one row). */
FN_AI void FN_S(fn_values)(const void *x, int xt, void *y, int yt, const void *dy,
                           ptrdiff_t total, ptrdiff_t n, const FN_C *m, const FN_C *k2,
                           const FN_C *k0, const FN_C *k1, FN_C g, FN_C b, const int kind,
                           int stream, const char *ahead, const unsigned char *sel)
{
    ptrdiff_t i = 0, c = 0, head = fn_head(y, fn_sizes[yt], FN_VW, total, stream);
    FN_V vg = FN_SET1(g), vb = FN_SET1(b), t;
    FN_C s;
#define FN_VALUES_ONE(i, c)                                                      \
    do {                                                                         \
        if (pick != NULL && !pick[i])                                            \
            break;                                                               \
        s = FN_S(fn_map1)(FN_LD1(x, xt, i), m[c], k2[c], k0[c]);                 \
        if (kind == FN_GAIN)                                                     \
            s = s * g + b;                                                       \
        else if (kind == FN_GRAD)                                                \
            s = s + FN_LD1(dy, xt, i) * (k1[c] * g);                             \
        FN_ST1(y, yt, i, s);                                                     \
    } while (0)
#define FN_VALUES_VEC(i, c, fetch, streamed)                                     \
    do {                                                                         \
        if (fetch)                                                               \
            fn_prefetch_l2(ahead + (i) * fn_sizes[xt]);                          \
        t = FN_FMA(FN_SUB(FN_VLD(x, xt, i), FN_LDC(m + (c))), FN_LDC(k2 + (c)),  \
                   FN_LDC(k0 + (c)));                                            \
        if (kind == FN_GAIN)                                                     \
            t = FN_FMA(t, vg, vb);                                               \
        else if (kind == FN_GRAD)                                                \
            t = FN_FMA(FN_VLD(dy, xt, i), FN_MUL(FN_LDC(k1 + (c)), vg), t);      \
        if (pick != NULL)                                                        \
            t = FN_SELECT(FN_BYTES_MASK(pick + (i)), t, FN_VLD(y, yt, i));       \
        FN_VST(y, yt, i, t, streamed);                                           \
    } while (0)
    /* The vectors up to the end of a row at a time (the last one reads the
     * continued coefficients): a loop with no wrap to check and no flag to
     * test, which in cache is paced by its loads alone. */
#define FN_VALUES_ALL                                                            \
    do {                                                                         \
        for (; i < head; i++) {                                                  \
            FN_VALUES_ONE(i, c);                                                 \
            if (++c == n)                                                        \
                c = 0;                                                           \
        }                                                                        \
        while (i + FN_VW <= total) {                                             \
            ptrdiff_t k = (n - c + FN_VW - 1) / FN_VW, j;                        \
            if (k > (total - i) / FN_VW)                                         \
                k = (total - i) / FN_VW;                                         \
            if (ahead == NULL && !stream) {                                      \
                /* two vectors a step (see fn_rows_as) */                        \
                for (j = 0; j + 2 <= k; j += 2) {                                \
                    FN_VALUES_VEC(i + j * FN_VW, c + j * FN_VW, 0, 0);           \
                    FN_VALUES_VEC(i + (j + 1) * FN_VW, c + (j + 1) * FN_VW, 0, 0); \
                }                                                                \
                if (j < k)                                                       \
                    FN_VALUES_VEC(i + j * FN_VW, c + j * FN_VW, 0, 0);           \
            } else                                                               \
                for (j = 0; j < k; j++)                                          \
                    FN_VALUES_VEC(i + j * FN_VW, c + j * FN_VW, ahead != NULL, stream); \
            i += k * FN_VW;                                                      \
            c += k * FN_VW;                                                      \
            while (c >= n)                                                       \
                c -= n;                                                          \
        }                                                                        \
        for (; i < total; i++) {                                                 \
            FN_VALUES_ONE(i, c);                                                 \
            if (++c == n)                                                        \
                c = 0;                                                           \
        }                                                                        \
    } while (0)
    FN_PICKED(FN_VALUES_ALL);
#undef FN_VALUES_ALL
#undef FN_VALUES_VEC
#undef FN_VALUES_ONE
}

/* Row r, column c moved on by `step` values (less than a row). */
FN_AI void FN_S(fn_row_step)(ptrdiff_t *c, ptrdiff_t *r, ptrdiff_t n, ptrdiff_t step)
{
    *c += step;
    if (*c >= n) {
        *c -= n;
        (*r)++;
    }
}

/* The coefficients of a vector starting at column c of row r: row r's
 * lanes, then row r + 1's (and with `three`, rows shorter than a vector,
 * r + 2's): lanes from n - c on belong to the next row. */
#define FN_ROWS_COEFS(vm, v2, v0, v1, r, c)                                      \
    do {                                                                         \
        vm = FN_SET1(m[r]);                                                      \
        v2 = FN_SET1(k2[r]);                                                     \
        v0 = FN_SET1(k0[r]);                                                     \
        if (kind == FN_GRAD)                                                     \
            v1 = FN_SET1(k1[r]);                                                 \
        if (n - (c) < FN_VW) {                                                   \
            FN_V own = FN_OWN(n - (c));                                          \
            vm = FN_SELECT(own, vm, FN_SET1(m[(r) + 1]));                        \
            v2 = FN_SELECT(own, v2, FN_SET1(k2[(r) + 1]));                       \
            v0 = FN_SELECT(own, v0, FN_SET1(k0[(r) + 1]));                       \
            if (kind == FN_GRAD)                                                 \
                v1 = FN_SELECT(own, v1, FN_SET1(k1[(r) + 1]));                   \
            if (three && 2 * n - (c) < FN_VW) {                                  \
                own = FN_OWN(2 * n - (c));                                       \
                vm = FN_SELECT(own, vm, FN_SET1(m[(r) + 2]));                    \
                v2 = FN_SELECT(own, v2, FN_SET1(k2[(r) + 2]));                   \
                v0 = FN_SELECT(own, v0, FN_SET1(k0[(r) + 2]));                   \
                if (kind == FN_GRAD)                                             \
                    v1 = FN_SELECT(own, v1, FN_SET1(k1[(r) + 2]));               \
            }                                                                    \
        }                                                                        \
    } while (0)

/* Rows of n values that follow each other in x, y (and dy), row r's
 * coefficients at [r]:
 *   FN_PLAIN  (x - m[r]) k2[r] + k0[r]
 *   FN_GAIN   ((x - m[r]) k2[r] + k0[r]) g[c] + b[c]   g, b along the row,
 *                                                      continued periodically
 *   FN_GRAD   (x - m[r]) k2[r] + k0[r] + dy k1[r]
 * as one run whose vectors line up with y (so that they can be streamed)
 * whatever n is.  n >= FN_VW / 2 (a vector crosses at most two row ends).
 * `three` (rows shorter than a vector) and `held` (rows long enough to go
 * vector after vector with their coefficients held) are constants where
 * fn_rows calls this: each case gets a loop without the others' checks.
 * So is `tables`: FN_GAIN's gain and bias read from g and b, or 1 and 0. */
FN_AI void FN_S(fn_rows_as)(const void *x, int xt, void *y, int yt, const void *dy,
                            ptrdiff_t rows, ptrdiff_t n, const FN_C *m, const FN_C *k2,
                            const FN_C *k0, const FN_C *k1, const FN_C *g, const FN_C *b,
                            const int kind, int stream, const int three, const int held,
                            const int tables)
{
    ptrdiff_t total = rows * n, i = 0, r = 0, c = 0;
    FN_V vm, v2, v0, v1 = FN_SET1((FN_C)0), t;
    FN_C s;
#define FN_ROWS_ONE(i, r, c)                                                     \
    do {                                                                         \
        s = FN_S(fn_map1)(FN_LD1(x, xt, i), m[r], k2[r], k0[r]);                 \
        if (kind == FN_GAIN && tables)                                           \
            s = s * g[c] + b[c];                                                 \
        else if (kind == FN_GAIN)                                                \
            s = s * (FN_C)1 + (FN_C)0;                                           \
        else if (kind == FN_GRAD)                                                \
            s = s + FN_LD1(dy, xt, i) * k1[r];                                   \
        FN_ST1(y, yt, i, s);                                                     \
    } while (0)
#define FN_ROWS_VEC(i, c)                                                        \
    do {                                                                         \
        t = FN_FMA(FN_SUB(FN_VLD(x, xt, i), vm), v2, v0);                        \
        if (kind == FN_GAIN && tables)                                           \
            t = FN_FMA(t, FN_LDC(g + (c)), FN_LDC(b + (c)));                     \
        else if (kind == FN_GAIN)                                                \
            t = FN_FMA(t, FN_SET1((FN_C)1), FN_SET1((FN_C)0));                   \
        else if (kind == FN_GRAD)                                                \
            t = FN_FMA(FN_VLD(dy, xt, i), v1, t);                                \
        FN_VST(y, yt, i, t, stream);                                             \
    } while (0)
    for (ptrdiff_t head = fn_head(y, fn_sizes[yt], FN_VW, total, stream); i < head;
         i++, FN_S(fn_row_step)(&c, &r, n, 1))
        FN_ROWS_ONE(i, r, c);
    while (held && i + FN_VW <= total) {
        /* the vectors wholly within row r, then the one across its end */
        vm = FN_SET1(m[r]);
        v2 = FN_SET1(k2[r]);
        v0 = FN_SET1(k0[r]);
        if (kind == FN_GRAD)
            v1 = FN_SET1(k1[r]);
        /* two vectors a step: with one, the loop's own instructions and
         * where it falls across the code's fetch lines cost as much as its
         * work (see design.md, "Pipes and loop layout") */
        ptrdiff_t end = i + (n - c);
        for (; i + 2 * FN_VW <= end; i += 2 * FN_VW, c += 2 * FN_VW) {
            FN_ROWS_VEC(i, c);
            FN_ROWS_VEC(i + FN_VW, c + FN_VW);
        }
        if (i + FN_VW <= end) {
            FN_ROWS_VEC(i, c);
            i += FN_VW;
            c += FN_VW;
        }
        if (c == n) {
            c = 0;
            r++;
        } else if (i + FN_VW <= total) {
            FN_ROWS_COEFS(vm, v2, v0, v1, r, c);
            FN_ROWS_VEC(i, c);
            FN_S(fn_row_step)(&c, &r, n, FN_VW);
            i += FN_VW;
        } else {
            break;
        }
    }
    for (; !held && i + FN_VW <= total; i += FN_VW) {
        FN_ROWS_COEFS(vm, v2, v0, v1, r, c);
        FN_ROWS_VEC(i, c);
        FN_S(fn_row_step)(&c, &r, n, FN_VW);
        if (three)
            FN_S(fn_row_step)(&c, &r, n, 0);      /* a second row end */
    }
    for (; i < total; i++, FN_S(fn_row_step)(&c, &r, n, 1))
        FN_ROWS_ONE(i, r, c);
#undef FN_ROWS_ONE
#undef FN_ROWS_VEC
}

/* fn_rows_as with the loop for this n: rows of FN_ROWS_HELD_VECTORS
 * vectors and more hold their coefficients.
 * FN_GAIN with g and b NULL: a gain of 1 and a bias of 0, the same
 * arithmetic as tables of them with none read. */
FN_AI void FN_S(fn_rows)(const void *x, int xt, void *y, int yt, const void *dy,
                         ptrdiff_t rows, ptrdiff_t n, const FN_C *m, const FN_C *k2,
                         const FN_C *k0, const FN_C *k1, const FN_C *g, const FN_C *b,
                         const int kind, int stream)
{
#define FN_ROWS_CASES(tables)                                                    \
    do {                                                                         \
        if (n >= FN_ROWS_HELD_VECTORS * FN_VW)                                   \
            FN_S(fn_rows_as)(x, xt, y, yt, dy, rows, n, m, k2, k0, k1, g, b, kind,   \
                             stream, 0, 1, tables);                              \
        else if (n >= FN_VW)                                                     \
            FN_S(fn_rows_as)(x, xt, y, yt, dy, rows, n, m, k2, k0, k1, g, b, kind,   \
                             stream, 0, 0, tables);                              \
        else                                                                     \
            FN_S(fn_rows_as)(x, xt, y, yt, dy, rows, n, m, k2, k0, k1, g, b, kind,   \
                             stream, 1, 0, tables);                              \
    } while (0)
    if (kind == FN_GAIN && g == NULL && b == NULL)
        FN_ROWS_CASES(0);
    else
        FN_ROWS_CASES(1);
#undef FN_ROWS_CASES
}

#undef FN_C
#undef FN_V
#undef FN_VW
#undef FN_S
#undef FN_SET1
#undef FN_ADD
#undef FN_SUB
#undef FN_MUL
#undef FN_FMA
#undef FN_LDC
#undef FN_VLD
#undef FN_LD1
#undef FN_VST
#undef FN_ST1
#undef FN_OWN
#undef FN_SELECT
#undef FN_BYTES_MASK
