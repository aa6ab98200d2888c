"""fastnorm.explain: the route a call would take, without running it.

The public function itself is called, in a mode where its kernel call
(the one place each call reaches the kernels) hands back the route the
kernels' planner chose instead of running; the checks, conversions and
copies before it run as they always do, and are noted on the way.  So the
route explain() reports is decided by the same code that decides it for
the real call.  Nothing is written: outputs and running statistics are
written after the kernel call, which does not happen.
"""
import threading

_local = threading.local()
_lock = threading.Lock()
# Explains in progress in any thread: calls check this module global first,
# which costs less than a thread-local attribute.
explaining = 0


class _Route(Exception):
    """Raised at the kernel call of an explained call, with its route."""

    def __init__(self, route):
        super().__init__(route)
        self.route = route


def active():
    """Whether this thread is explaining a call."""
    return explaining > 0 and getattr(_local, "notes", None) is not None


class unexplained:
    """Within it this thread's kernel calls run even while its call is
    explained: a read-only look at x that decides the route (nan_in_most's
    probe), so that explain() reports the route the call takes.  (A class:
    a generator's context costs microseconds a call.)"""

    def __enter__(self):
        self.notes = getattr(_local, "notes", None)
        _local.notes = None

    def __exit__(self, *exc):
        _local.notes = self.notes


def copied(what):
    """Note that the call copies or converts something before its kernel
    runs (what: a short phrase naming it)."""
    if explaining > 0:
        notes = getattr(_local, "notes", None)
        if notes is not None:
            notes.append(what)


def kernel(route):
    """At a kernel call: hand the route back when explaining."""
    raise _Route(route)


def _moments_update(func):
    """Whether func is a Moments accumulator's bound update."""
    from ._moments import Moments
    return (getattr(func, "__func__", None) is Moments.update
            and isinstance(func.__self__, Moments))


def explain(func, *args, **kwargs):
    """The route ``func(*args, **kwargs)`` would take, without running it.

    ``func`` itself is called, in a mode where its kernel call hands back
    the route the kernels' planner chose instead of running; the checks,
    conversions and copies before it run as they always do.  Nothing is
    written: not the output, not ``out=``, not running statistics.

    Parameters
    ----------
    func : callable
        A public fastnorm function (``fastnorm.layer_norm``, ...), or a
        ``Moments`` accumulator's ``update`` (its statistics unchanged).
    *args, **kwargs
        Its arguments, as they would be passed.

    Returns
    -------
    dict
        ``pattern`` ("slices", "images" or "columns": how the kernels see
        the axes), ``schedule`` (the way within the pattern), ``simd`` (the
        instruction-set level), ``threads``, ``streams`` (the output is
        written around the caches), ``descending`` (a fresh output is
        written from its last slice down), ``float32_pass``, ``rows_pass``,
        ``in_cache``, ``slices`` and ``slice_length``, ``fast_path`` (the
        call takes the fast path for small calls) and ``copies`` (what is
        copied or converted before the kernel runs).  ``columns`` is None
        but for a forward call on the columns pattern's ``tiles`` schedule
        (not gradients), where it gives the plan derived
        from the shape and the caches (of the call's first piece, where it
        goes in pieces): ``tile_columns`` (columns a thread's tile
        holds) and ``tiles``, the statistics' ``row_blocks`` of ``rows_per_block``
        rows (a function of the shape and the machine alone, so results
        do not depend on the thread count), ``statistics_threads`` (the
        threads that sum them: one a block at most, the output's rows
        going to all of ``threads``), ``finish_with_sums`` (rows that
        are one block of one sweep: each strip of columns turned into
        coefficients while the next is summed), ``sweep_rows`` (rows swept
        down each strip of columns while they stay in L2) and
        ``fetch_ahead``: what each sweep prefetches, "sweeps" (the next
        sweep's rows, for data larger than the caches), "heads" (only the
        first bytes of each next row, where rows lie a multiple of 4 KiB
        apart and would evict each other from L1) or "none" (in cache),
        and ``where``: None, "rows" (a mask constant along the columns:
        the rows it leaves out skipped) or "lanes" (a mask that varies
        along them: each column's selected values, lane by lane).
        ``runs_fetch`` is None but for the statistics of a forward call on
        the slices pattern whose slices are several runs (the maps of an
        NCHW channel): what each run's statistics fetch beyond their own
        reads ahead, "next slice" (the same run of the next slice: short
        runs), "next run" (the head of the next run of the slice: runs a
        little longer than those reads ahead) or "own" (nothing more).
        ``next_fetch`` is None but for a forward call whose slices are
        each one contiguous run written slice after slice (layer_norm over
        the last axes of a C-order array, too long for the grouped rows):
        what a slice's output fetches of the next slice for its statistics,
        "whole" (on one thread, through the float64 output pass, slices up
        to ``next_slice_bytes``: it and the next fit half of L2) or "head"
        (its first ``prefetch_bytes``).
        A call with nothing to compute (an empty input) gives ``pattern``
        None.  ``machine`` is what the tuning was derived from (``l1d``,
        ``l2``, ``l3`` in bytes, ``cores``, ``guest``: a virtual machine,
        ``source``; ``share``: a core's share of L3 in bytes,
        ``share_rule``: the rule that gave it; ``profile``: whether a
        measured profile is in use), ``tuning`` the values derived and
        ``rules`` the rule of each (as ``show_config`` prints them).

    Raises
    ------
    TypeError
        ``func`` is not a public fastnorm function, or a Dask array is
        among the arguments (its chunks each take the route of the NumPy
        call on them).
    Exception
        Whatever ``func`` raises for these arguments.

    See Also
    --------
    show_config : How this installation was built.
    get_num_threads : The threads a call may use.

    Examples
    --------
    >>> import numpy as np, fastnorm
    >>> x = np.zeros((64, 56, 56, 32), np.float32)
    >>> r = fastnorm.explain(fastnorm.batch_norm, x, axis=(0, 1, 2))
    >>> r["pattern"], r["schedule"]
    ('columns', 'tiles')
    """
    global explaining
    from . import _machine, _public_functions, _simd
    from ._config import machine_facts
    from ._lazy import any_dask
    if func not in _public_functions() and not _moments_update(func):
        raise TypeError(f"explain() takes a public fastnorm function, got {func!r}")
    if any_dask(*args, *kwargs.values()):
        raise TypeError("explain() describes calls on NumPy arrays; a call on Dask arrays "
                        "runs the NumPy call on each chunk")
    _local.notes = notes = []
    with _lock:
        explaining += 1
    try:
        func(*args, **kwargs)
    except _Route as r:
        route = dict(r.route)
    else:
        route = {"pattern": None, "schedule": None, "fast_path": False}
    finally:
        with _lock:
            explaining -= 1
        _local.notes = None
    route.setdefault("fast_path", False)
    route.setdefault("columns", None)
    route["copies"] = notes
    route["machine"] = machine_facts()
    route["tuning"] = _simd.kernels.tuning()
    route["rules"] = dict(_machine.RULE_TEXT)
    return route
