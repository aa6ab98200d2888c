"""The yardsticks: x's bytes copied into another array, or read once, with a
given number of threads.

A kernel that reads x once and writes y once cannot beat a copy of x, so
``fastnorm / copy`` near 1.0 means "at the memory-bandwidth limit" for that
many cores.  ``np.copyto`` runs on one thread; with n threads the copy is
split into n contiguous pieces copied at once (NumPy releases the GIL while
it copies), the calling thread taking the first piece as an OpenMP team's
master does.

The read yardstick sums x's bytes as unsigned integers of x's itemsize
(``np.add.reduce``, which reads as fast as a hand-written AVX-512 loop of
loads here, and releases the GIL too): what one look at x costs.  It is
the limit of a call that only reads (mean_var), and it says how much a
second look at x costs where x does not stay in cache (statistics of a
slice taken before its output: batch_norm training, layer_norm over axis
0, the gradients of batch_norm).  On one core it need not be half a copy:
a core keeps only so many reads from memory in flight, while a large
copy's writes go past them.  It is a bound for arrays read from memory;
for arrays that fit the last-level cache, its time, like every column's,
depends on what ran just before it (mean_var has come to 0.86-0.96 of it
there).
"""
from concurrent.futures import ThreadPoolExecutor

import numpy as np

try:  # the destination at x's offset within a page (see its docstring)
    from fastnorm._small_calls import copy_destination
except ImportError:  # a fastnorm from before it
    copy_destination = np.empty_like

_pools = {}
# Unsigned integers by itemsize: x's bytes summed without a cast.
_UNSIGNED = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def _pool(workers):
    """One pool per size for the whole run: starting threads per call would
    be timed too."""
    if workers not in _pools:
        _pools[workers] = ThreadPoolExecutor(max_workers=workers,
                                             thread_name_prefix="fastnorm-copy")
    return _pools[workers]


def _pieces(a, n):
    flat = a.reshape(-1)  # x and y are C-contiguous: a view
    bounds = np.linspace(0, flat.size, n + 1).astype(int)
    return [flat[lo:hi] for lo, hi in zip(bounds[:-1], bounds[1:])]


def copy_into(dst, src, threads):
    """A callable that copies src into dst (preallocated) with `threads`
    threads."""
    if threads == 1:
        return lambda: np.copyto(dst, src)
    pairs = list(zip(_pieces(dst, threads), _pieces(src, threads)))
    pool = _pool(threads - 1)

    def copy():
        rest = [pool.submit(np.copyto, d, s) for d, s in pairs[1:]]
        np.copyto(*pairs[0])
        for r in rest:
            r.result()
    return copy


def read_once(src, threads):
    """A callable that reads every byte of src (C-contiguous) once with
    `threads` threads and returns the sums of its pieces as integers
    (wrapping)."""
    flat = src.reshape(-1).view(_UNSIGNED[src.dtype.itemsize])
    if threads == 1:
        return lambda: [np.add.reduce(flat, dtype=flat.dtype)]
    pieces = _pieces(flat, threads)
    pool = _pool(threads - 1)

    def read():
        rest = [pool.submit(np.add.reduce, p, dtype=p.dtype) for p in pieces[1:]]
        first = np.add.reduce(pieces[0], dtype=flat.dtype)
        return [first] + [r.result() for r in rest]
    return read


def allocating_copy(src, threads):
    """A callable that copies src into a new array with `threads` threads:
    the yardstick of calls that allocate their output."""
    def copy():
        dst = copy_destination(src)
        if threads == 1:
            np.copyto(dst, src)
        else:
            copy_into(dst, src, threads)()
        return dst
    return copy
