/* Scratch memory of the kernels, kept from one call to the next.
 *
 * A call's scratch (per-block moments, per-column coefficients, parameter
 * tables) is malloc'd and freed by the call.  Blocks of a few MiB come back
 * from the C library as fresh pages (mmap, or a heap whose top it trims on
 * free), and every page faults again on the next call, which can cost more
 * than the call's arithmetic.  So blocks of FN_KEEP_MIN bytes or more that
 * a call frees are kept, up to FN_KEEP_BLOCKS of them and FN_KEEP_BYTES in
 * all (tuning.h), and handed to the next call that asks for no more than
 * they hold (nor much less); smaller ones go straight to malloc and free.
 *
 * Any thread may allocate and free (OpenMP workers included): the kept
 * blocks sit behind a spin lock held for a few loads and stores.  Where
 * that is not available (compilers without GCC's atomics, systems without
 * pthread_atfork) nothing is kept. */

#ifndef FASTNORM_SCRATCH_H
#define FASTNORM_SCRATCH_H

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "tuning.h"

/* Each block starts with its size; 64 bytes keep the data as aligned as
 * malloc's. */
typedef struct {
    size_t size;
    size_t pad[7];
} fn_block;

#if (defined(__GNUC__) || defined(__clang__)) && defined(__unix__)
#include <pthread.h>
static fn_block *fn_kept[FN_KEEP_BLOCKS];
static size_t fn_kept_bytes;
static int fn_kept_lock;

/* A child forked while another thread held the lock has that thread no
 * more: it starts unlocked. */
static void fn_kept_unlock_in_child(void) { fn_kept_lock = 0; }

__attribute__((constructor)) static void fn_kept_at_fork(void)
{
    pthread_atfork(NULL, NULL, fn_kept_unlock_in_child);
}

static inline void fn_kept_acquire(void)
{
    while (__atomic_exchange_n(&fn_kept_lock, 1, __ATOMIC_ACQUIRE))
        while (__atomic_load_n(&fn_kept_lock, __ATOMIC_RELAXED))
            ;
}

static inline void fn_kept_release(void)
{
    __atomic_store_n(&fn_kept_lock, 0, __ATOMIC_RELEASE);
}

/* A kept block of size bytes at least, and at most four times that (a
 * large block must not go to a small request while the next large one
 * faults in a new one), or NULL. */
static inline fn_block *fn_take_kept(size_t size)
{
    fn_block *b = NULL;
    int i, best = -1;
    fn_kept_acquire();
    for (i = 0; i < FN_KEEP_BLOCKS; i++)
        if (fn_kept[i] != NULL && fn_kept[i]->size >= size && fn_kept[i]->size / 4 <= size
                && (best < 0 || fn_kept[i]->size < fn_kept[best]->size))
            best = i;
    if (best >= 0) {
        b = fn_kept[best];
        fn_kept[best] = NULL;
        fn_kept_bytes -= b->size;
    }
    fn_kept_release();
    return b;
}

/* Keep b if there is room; true if kept. */
static inline int fn_keep(fn_block *b)
{
    int i, kept = 0;
    fn_kept_acquire();
    if (fn_kept_bytes + b->size <= FN_KEEP_BYTES)
        for (i = 0; i < FN_KEEP_BLOCKS && !kept; i++)
            if (fn_kept[i] == NULL) {
                fn_kept[i] = b;
                fn_kept_bytes += b->size;
                kept = 1;
            }
    fn_kept_release();
    return kept;
}
#else
static inline fn_block *fn_take_kept(size_t size) { (void)size; return NULL; }
static inline int fn_keep(fn_block *b) { (void)b; return 0; }
#endif

/* malloc, calloc and free for scratch memory (a block from fn_malloc or
 * fn_calloc goes back through fn_free alone). */
static inline void *fn_malloc(size_t size)
{
    fn_block *b = NULL;
    if (size >= FN_KEEP_MIN)
        b = fn_take_kept(size);
    if (b == NULL) {
        if (size > (size_t)-1 - sizeof(fn_block))
            return NULL;
        b = (fn_block *)malloc(sizeof(fn_block) + size);
        if (b == NULL)
            return NULL;
        b->size = size;
    }
    return b + 1;
}

static inline void *fn_calloc(size_t count, size_t size)
{
    void *p;
    if (size != 0 && count > (size_t)-1 / size)
        return NULL;
    p = fn_malloc(count * size);
    if (p != NULL)
        memset(p, 0, count * size);
    return p;
}

static inline void fn_free(void *p)
{
    fn_block *b;
    if (p == NULL)
        return;
    b = (fn_block *)p - 1;
    if (b->size >= FN_KEEP_MIN && fn_keep(b))
        return;
    free(b);
}

#endif
