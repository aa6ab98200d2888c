"""The copy yardstick: x's bytes copied into another array with a given
number of threads.

A kernel that reads x once and writes y once cannot beat a copy of x, so
``fastnorm / copy`` near 1.0 means "at the memory-bandwidth limit" for that
many cores.  ``np.copyto`` runs on one thread; with n threads the copy is
split into n contiguous pieces copied at once (NumPy releases the GIL while
it copies), the calling thread taking the first piece as an OpenMP team's
master does.
"""
from concurrent.futures import ThreadPoolExecutor

import numpy as np

_pools = {}


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


def allocating_copy(src, threads):
    """A callable that returns a new copy of src made with `threads` threads
    (np.copy for one): the yardstick of calls that allocate their output."""
    if threads == 1:
        return lambda: np.copy(src)

    def copy():
        dst = np.empty_like(src)
        copy_into(dst, src, threads)()
        return dst
    return copy
