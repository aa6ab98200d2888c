"""What runs inside Dask's tasks: the kernels on one chunk, and the merge of
per-chunk statistics in Dask's tree reduction, all the kernels' own.

A chunk's statistics are its Welford state ``(n, mean, m2)`` per slice (the
kernels' own single-pass result on that chunk; n an array, one count per
slice), or ``(n, mean of squares, None)`` for RMS statistics; states of
neighbouring chunks are merged by the kernels' Chan merge
(``merge_moments``), in whatever tree ``split_every`` asks for.  A chunk
then normalizes itself with the merged statistics through the kernels'
"given statistics" mode, the pass batch norm's eval uses.  Gradients
alike: each chunk's part of its slices' sums from the kernels' first pass
(``backward_sums``), added up across chunks, then each chunk's dx from the
totals (``backward`` with ``sums=``).

Every kernel call here runs under a thread ceiling: Dask already runs one
task per thread, and OpenMP teams of all the cores inside each of them would
oversubscribe the machine.
"""
import contextlib
import math
import sys
import threading

import numpy as np

from .. import _simd
from .._args import as_input
from .._config import thread_cap
from .._where import as_where
from .._call import backward_dx, backward_sums, forward, normalize
from .._missing import refuse_nan
from .._moments import piece_moments
from .._zscore import zscore_scale

# The tree reduction's result: per slice the mean (of x, or of x**2 for RMS
# statistics) and, for moments, the sum of squared deviations.
MOMENTS = np.dtype([("mean", np.float64), ("m2", np.float64)])
SQUARES = np.dtype([("mean", np.float64)])
# A chunk's state over its selected values (where=): their count per slice
# varies, so it travels with the moments.
STATE = np.dtype([("n", np.float64), ("mean", np.float64), ("m2", np.float64)])


# --------------------------------------------------------------------------
# threads

def _dask_threads():
    """How many threads of this process run Dask tasks side by side."""
    distributed = sys.modules.get("distributed")
    if distributed is not None:
        try:
            worker = distributed.get_worker()
        except ValueError:
            pass  # not on a worker: the local threaded scheduler
        else:
            # Workers of one process (LocalCluster(processes=False)) share its cores.
            peers = list(type(worker)._instances)
            return sum(w.state.nthreads for w in peers) or worker.state.nthreads
    import dask
    from dask.system import CPU_COUNT
    pool = dask.config.get("pool", None)
    return getattr(pool, "_max_workers", None) or dask.config.get("num_workers", None) or CPU_COUNT


def task_threads():
    """OpenMP threads one kernel call inside a task may use: this process's
    cores shared among the threads that run tasks, at least 1.  0 (no
    ceiling) on the main thread, where the synchronous scheduler runs one
    task at a time.  (Distributed's worker processes also start with
    OMP_NUM_THREADS=1, which keeps each call there on one thread: this
    ceiling counts only the threads of its own process.)"""
    if threading.current_thread() is threading.main_thread():
        return 0
    from dask.system import CPU_COUNT
    return max(1, CPU_COUNT // max(1, _dask_threads()))


def sharing_cores():
    """A block in which this thread's kernel calls use their share of cores."""
    n = task_threads()
    return thread_cap(n) if n else contextlib.nullcontext()


# --------------------------------------------------------------------------
# statistics: one chunk, then the merge

def _chunk_state(block, axes, mode):
    shape = tuple(1 if i in axes else s for i, s in enumerate(block.shape))
    count = math.prod(block.shape[i] for i in axes)
    if block.size == 0:
        # Nothing to read: the state of no values, which every merge skips.
        return np.zeros(shape), np.zeros(shape), (np.zeros(shape) if mode == "stats" else None)
    with sharing_cores():
        s0, s1, _ = forward(as_input(block), axes, mode)
    return np.full(shape, float(count)), s0, (s1 if mode == "stats" else None)


def chunk_moments(block, axis, keepdims, computing_meta=False):
    """Per slice of one chunk: (n, mean, m2) from the kernels."""
    if computing_meta:
        return np.empty((0,) * block.ndim, MOMENTS)
    return _chunk_state(block, axis, "stats")


def chunk_squares(block, axis, keepdims, computing_meta=False):
    """Per slice of one chunk: (n, mean of squares, None) from the kernels."""
    if computing_meta:
        return np.empty((0,) * block.ndim, SQUARES)
    return _chunk_state(block, axis, "rms")


def chunk_state_where(block, where=None, *, axes, mode, omit=False):
    """STATE per slice of one chunk over its selected values (mode 'stats'
    or 'rms': m2 0), one per slice (size 1 along the reduced axes); with
    omit (mode 'stats'), over its values that are numbers (and selected,
    where given)."""
    shape = tuple(1 if i in axes else s for i, s in enumerate(block.shape))
    out = np.zeros(shape, STATE)
    if block.size == 0:
        return out
    count = np.empty(shape)
    w = None if where is None else as_where(where, block.shape)
    with sharing_cores():
        # (a chunk's slice may hold no value: a part of a slice, not empty)
        if mode == "stats":
            count, s0, s1 = piece_moments(as_input(block), axes, w, omit, warn=False)
        else:
            s0, s1, _ = forward(as_input(block), axes, mode, where=w, count=count, warn=False)
    out["n"], out["mean"] = count, s0
    if mode == "stats":
        out["m2"] = s1
    return out


def state_parts(block, axis, keepdims, moments=True, counts=False, computing_meta=False):
    """Dask's chunk step on STATE arrays: the state as combine_states takes
    it, (n, mean, m2) (m2 None for RMS statistics; counts: aggregated as
    STATE)."""
    if computing_meta:
        return np.empty((0,) * block.ndim, STATE if counts else MOMENTS if moments else SQUARES)
    return (np.ascontiguousarray(block["n"]), np.ascontiguousarray(block["mean"]),
            np.ascontiguousarray(block["m2"]) if moments else None)


def _states(parts):
    """The chunk states in a (nested) list, as Dask hands them over."""
    if isinstance(parts, tuple):
        return [parts]
    return [s for p in parts for s in _states(p)]


def combine_states(parts, axis, keepdims):
    """Dask's combine step: the states of up to split_every chunks as one
    (new arrays: Dask's own may be shared or read-only)."""
    states = _states(parts)
    n, mean, m2 = (None if a is None else np.array(a, dtype=np.float64, order="C")
                   for a in states[0])
    for s in states[1:]:
        b = [None if a is None else kernel_ready(a) for a in s]
        _simd.kernels.merge_moments(n, mean, m2, b[0], b[1], b[2])
    return n, mean, m2


def aggregate_states(parts, axis, keepdims, computing_meta=False, counts=False):
    """Dask's last step: the merged state as a MOMENTS or SQUARES array (an
    empty reduction gives NaN, as NumPy's does); with counts, as a STATE
    array (each slice's count beside its moments)."""
    if computing_meta:
        return parts
    n, mean, m2 = combine_states(parts, axis, keepdims)
    out = np.empty(mean.shape, STATE if counts else SQUARES if m2 is None else MOMENTS)
    if counts:
        out["n"] = n
    out["mean"] = np.where(n == 0, np.nan, mean)
    if m2 is not None:
        out["m2"] = np.where(n == 0, np.nan, m2)
    return out


# --------------------------------------------------------------------------
# normalizing one chunk

def numbers_only(block):
    """block itself, or ValueError where it holds a NaN (nan_policy="raise"
    on a Dask array: raised when the chunk is computed)."""
    refuse_nan(as_input(block))
    return block


def kernel_ready(a):
    """a as the kernels read it: C-contiguous, aligned float64.  Arrays that
    come over the network (or out of a memory map) may be neither."""
    return np.require(a, dtype=np.float64, requirements=["C", "A"])


def normalize_block(block, mean, rstd, gamma, beta, where=None, *, axes, out_dtype):
    """One chunk normalized by the kernels with the given float64 statistics
    of its slices (mean None: RMS, no centring); gamma, beta float64 in
    keepdims layout, or None; where: the chunk's piece of the selection
    (y 0 elsewhere), or None."""
    block = as_input(block)
    rstd = kernel_ready(rstd)
    mean = np.zeros_like(rstd) if mean is None else kernel_ready(mean)
    gamma = None if gamma is None else kernel_ready(gamma)
    beta = None if beta is None else kernel_ready(beta)
    selected = {}
    if where is not None:
        selected = {"where": as_where(where, block.shape), "count": np.empty(rstd.shape)}
    with sharing_cores():
        y, _, _, _ = normalize(block, axes, "given", eps=0.0, gamma=gamma, beta=beta,
                               out=None, dtype=out_dtype, n_stats=0, given=(mean, rstd),
                               **selected)
    return y


def numpy_block(func, names, index, block, *arrays):
    """func (a public function with its keyword arguments bound) on one
    chunk that holds whole slices, with the chunk's pieces of the other
    arrays passed by name; its result number `index` when that is not None."""
    with sharing_cores():
        result = func(block, **dict(zip(names, arrays)))
    return result if index is None else result[index]


def merge_groups(states, groups, axis, per_channel):
    """MOMENTS per channel (along `axis`, whole) merged within each of
    `groups` groups of neighbouring channels, in channel order, each
    channel's state holding per_channel values."""
    shape = states.shape[:axis] + (groups, states.shape[axis] // groups) + states.shape[axis + 1:]
    mean, m2 = states["mean"].reshape(shape), states["m2"].reshape(shape)
    part = [np.ascontiguousarray(np.take(a, 0, axis=axis + 1)) for a in (mean, m2)]
    n, count = np.full(part[0].shape, float(per_channel)), np.full(part[0].shape,
                                                                   float(per_channel))
    for j in range(1, mean.shape[axis + 1]):
        _simd.kernels.merge_moments(n, part[0], part[1], count,
                                    np.ascontiguousarray(np.take(mean, j, axis=axis + 1)),
                                    np.ascontiguousarray(np.take(m2, j, axis=axis + 1)))
    out = np.empty(states.shape[:axis] + (groups,) + states.shape[axis + 1:], MOMENTS)
    out["mean"], out["m2"] = part
    return out


# --------------------------------------------------------------------------
# gradients, one chunk at a time: the kernels' first pass gives a chunk's
# part of each slice's sums A = sum(dy gamma), B = sum(dy gamma xhat) and of
# the parameter sums; the second, dx from the totals.

# A chunk's part of the sums A and B of its slices, and of the sums that
# make dgamma and dbeta.
SLICE_SUMS = np.dtype([("a", np.float64), ("b", np.float64)])
PARAM_SUMS = np.dtype([("dgamma", np.float64), ("dbeta", np.float64)])


def _pack(fields, dtype):
    out = np.empty(fields[0].shape, dtype)
    for name, a in zip(dtype.names, fields):
        out[name] = a
    return out


def slice_sums_block(dy, x, mean, rstd, gamma, where=None, *, axes, mode):
    """SLICE_SUMS of one chunk over `axes` (mean None: RMS), over the
    selected values with where (the chunk's piece of the mask)."""
    with sharing_cores():
        a, b, _, _ = backward_sums(dy, x, axes, mean, rstd, gamma, mode, where)
    return _pack((a, b), SLICE_SUMS)


def param_sums_block(dy, x, mean, rstd, gamma, where=None, *, axes, mode):
    """PARAM_SUMS of one chunk: sum(dy xhat) and sum(dy) per entry of gamma
    (over the selected values with where)."""
    with sharing_cores():
        _, _, dg, db = backward_sums(dy, x, axes, mean, rstd, gamma, mode, where)
    return _pack((dg, db), PARAM_SUMS)


def dx_block(dy, x, mean, rstd, gamma, a, b, *, axes, mode, n, out_dtype):
    """dx of one chunk from its slices' sums A and B over all their n
    values (None where the mode has none: A for RMS, both in eval)."""
    with sharing_cores():
        return backward_dx(dy, x, axes, mean, rstd, gamma, mode, a, b, n).astype(
            out_dtype, copy=False)


def dx_block_where(dy, x, mean, rstd, gamma, a, b, n, where, *, axes, mode, out_dtype):
    """dx of one chunk at its selected positions (0 elsewhere) from its
    slices' sums A and B and counts n over the selected values of all
    their chunks."""
    with sharing_cores():
        return backward_dx(dy, x, axes, mean, rstd, gamma, mode, a, b, n, where).astype(
            out_dtype, copy=False)


def inverse_std(spread, eps):
    """rstd = 1 / sqrt(spread + eps), spread the variance or the mean of
    squares: the kernels' own (a negative or NaN one gives NaN, silently)."""
    return _simd.kernels.rstd(spread, eps)


def centre(states):
    """The mean of MOMENTS as mean_var's: NaN where the M2 is (a slice with
    a NaN or an inf has neither; Chan's merge may leave an inf mean there)."""
    return _simd.kernels.means_of(states["mean"], states["m2"])


def scores_scale(mean, m2, n, ddof, dtype):
    """zscore's 1 / std of a block of merged statistics (zscore_scale)."""
    return zscore_scale(mean, m2, n, ddof, dtype)


def variance(m2, n, ddof=0):
    """mean_var's variance M2 / max(n - ddof, 0) of a block, n one count or
    the block's counts (inf or NaN without degrees of freedom, no warning)."""
    return _simd.kernels.variance(m2, n, ddof)
