"""Threads and build configuration."""
import contextlib
import operator
import os
import platform
import threading

import numpy as np

from . import _machine, _simd
from ._version import __version__

_lock = threading.Lock()
_num_threads = None  # None: follow OpenMP (OMP_NUM_THREADS, threadpoolctl)


class _ThreadCap(threading.local):
    """A ceiling on the threads of the calls made from one thread (0: none).
    Per thread, so that a task scheduler running many calls side by side
    can share the cores among them without touching the process-wide
    setting of set_num_threads."""
    limit = 0


_cap = _ThreadCap()

# A process forked from one whose calls ran OpenMP teams inherits no team
# threads, and GNU OpenMP's next team in it never starts (the call hangs).
# So calls in a forked child run on one thread.
_forked = False


def _after_fork_in_child():
    global _forked
    _forked = True


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)

_OPENMP = _simd.kernels.build_info()["openmp"]  # the same for every SIMD level
# OpenMP's team size as the process started (OMP_NUM_THREADS or the cores).
# A different value later means someone lowered or raised it for a while
# (threadpoolctl.threadpool_limits): that caps set_num_threads too.
_OMP_START = _simd.kernels.max_threads()


def _processors():
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # no affinity API on this OS
        return os.cpu_count() or 1


# Threads one call may start: one per processor the process may run on, or
# 64 where that is more (oversubscribing a few cores is legitimate, e.g. to
# show results do not depend on the count).  Beyond that a stray
# set_num_threads(100000) or OMP_NUM_THREADS would start a team that
# exhausts the process's thread limit, which OpenMP does not survive.
_MAX_TEAM = max(64, _processors())


def get_num_threads() -> int:
    """Number of threads the next call may use.

    Unless set_num_threads was called, this is OpenMP's default team size for
    the calling thread, which honours ``OMP_NUM_THREADS`` and
    ``threadpoolctl.threadpool_limits``; after set_num_threads(n), it is n,
    still capped by a ``threadpool_limits`` block in force.  Small inputs run on one thread
    whatever this says; a build without OpenMP, and a process forked from
    another (``os.fork``, multiprocessing's "fork" start method), always
    say 1: GNU OpenMP cannot start teams in a forked child of a process
    that ran them.

    Returns
    -------
    int
        At least 1.

    See Also
    --------
    set_num_threads : Set the count this returns.
    show_config : The count with the rest of the build and runtime facts.

    Examples
    --------
    >>> import fastnorm
    >>> fastnorm.get_num_threads() >= 1
    True
    """
    if not _OPENMP or _forked:
        return 1  # a serial build (nothing to set), or a forked child (above)
    omp = _simd.kernels.max_threads()
    n = _num_threads
    if n is None:
        n = omp
    elif omp != _OMP_START:
        n = min(n, omp)       # inside threadpool_limits: it caps every call
    if _cap.limit:
        n = min(n, _cap.limit)
    return max(1, int(n))


def team_size() -> int:
    """Threads the next call runs on at most: get_num_threads(), capped at
    one per processor (at least 64)."""
    return min(get_num_threads(), _MAX_TEAM)


def set_num_threads(n) -> None:
    """Use at most n threads in every later call.

    Results do not depend on the thread count: they are bitwise identical
    for any n.  Safe to call while other threads are computing (a call in
    flight keeps the count it started with).  A call never starts more
    than 64 threads, or one per processor on machines with more.

    Parameters
    ----------
    n : int or None
        The number of threads, at least 1; ``None`` goes back to following
        OpenMP (``OMP_NUM_THREADS``, ``threadpoolctl.threadpool_limits``).

    Raises
    ------
    TypeError
        n is not an integer (or None).
    ValueError
        n < 1.

    See Also
    --------
    get_num_threads : The count the next call may use.

    Examples
    --------
    >>> import fastnorm
    >>> fastnorm.set_num_threads(1)
    >>> fastnorm.get_num_threads()
    1
    >>> fastnorm.set_num_threads(None)
    """
    global _num_threads
    if n is not None:
        try:
            n = operator.index(n)
        except TypeError as e:
            raise TypeError(f"set_num_threads needs an int or None, got {n!r}") from e
        if n < 1:
            raise ValueError(f"set_num_threads needs n >= 1, got {n}")
    with _lock:
        _num_threads = n


@contextlib.contextmanager
def thread_cap(n):
    """Calls made from this thread inside the block use at most n threads
    (n >= 1; 0 or None: no ceiling).  Other threads are not affected; blocks
    nest, the innermost ceiling applying."""
    previous = _cap.limit
    _cap.limit = int(n or 0)
    try:
        yield
    finally:
        _cap.limit = previous


def config() -> dict:
    """The facts show_config prints, as a dict."""
    k = _simd.kernels
    info = k.build_info()
    runtime = None
    try:
        from threadpoolctl import threadpool_info
        for lib in threadpool_info():
            if lib.get("user_api") == "openmp":
                runtime = f"{lib.get('prefix')} ({lib.get('filepath')})"
                break
    except Exception:  # threadpoolctl is optional
        runtime = None
    return {
        "version": __version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "compiler": info["compiler"],
        "openmp": info["openmp"],
        "openmp_runtime": runtime,
        "threads": get_num_threads(),
        "threads_source": "set_num_threads" if _num_threads is not None else "OpenMP default",
        "simd": info["variant"],
        "simd_built": _simd.built_levels(),
        "simd_available": _simd.available_levels(),
        "vector_bits": info["vector_bits"],
        "welford_lanes": info["welford_lanes"],
        "caches": machine_facts(),
        "tuning": k.tuning(),
        "rules": dict(_machine.RULE_TEXT),
    }


def machine_facts() -> dict:
    """What the tuning was derived from, with a core's share of L3, the
    rule that gave it and the profile's line (config() and explain())."""
    m = _machine.MACHINE
    share, rule = _machine.l3_share(m)
    return {"l1d": m.l1d, "l2": m.l2, "l3": m.l3, "cores": m.cores, "guest": m.guest,
            "source": m.source, "share": share, "share_rule": rule,
            "profile": _machine.PROFILE}


def show_config() -> None:
    """Print version, compiler, threads, SIMD path, caches and tuning.

    Besides the build and the threads: the caches detected, a core's share
    of the last-level cache, the profile, and the tuning derived from them,
    each value with its rule.  The caches come from the OS (Linux:
    /sys/devices/system/cpu; macOS: sysctl; else glibc's sysconf), or from
    ``FASTNORM_CACHES`` (e.g. ``l1d=48K,l2=2M,l3=105M,cores=16``) where
    set; a size that cannot be found takes its fallback (L1d 32 KiB, L2
    512 KiB, L3 8 MiB), and the line says which.  A core's share of L3 is
    L3 over the cores, at most 16 MiB (a virtual machine sees its host's
    whole L3), or as measured by ``python -m fastnorm --tune``, whose
    profile later imports read (``FASTNORM_PROFILE`` names its file, or
    ``off``).  Every machine-dependent tuning value is derived from these
    at import; docs/design.md gives the rules and their reasons.

    ``fastnorm._config.config()`` returns the same facts as a dict.

    See Also
    --------
    get_num_threads : The thread count alone.
    explain : The route one call takes: SIMD level, threads, copies.

    Examples
    --------
    >>> import fastnorm
    >>> fastnorm.show_config()  # doctest: +ELLIPSIS
    fastnorm ...
      numpy: ...
      compiler: ...
      OpenMP: ...
      threads: ...
      SIMD: ...
      caches: ...
      L3 share: ...
      profile: ...
      tuning: ...
    """
    c = config()
    if c["openmp"]:
        omp = "yes" + (f", runtime {c['openmp_runtime']}" if c["openmp_runtime"] else "")
    else:
        omp = "no (built without OpenMP: kernels run serially)"
    lines = [
        f"fastnorm {c['version']}",
        f"  numpy:    {c['numpy']}  (python {c['python']}, {c['machine']})",
        f"  compiler: {c['compiler']}",
        f"  OpenMP:   {omp}",
        f"  threads:  {c['threads']} ({c['threads_source']})",
        f"  SIMD:     {c['simd']} ({c['vector_bits']}-bit vectors, "
        f"{c['welford_lanes']} Welford lanes); built: {', '.join(c['simd_built'])}; "
        f"usable here: {', '.join(c['simd_available'])}",
        f"  caches:   {_machine.describe()}",
        f"  L3 share: {_machine.describe_share()}",
        f"  profile:  {_machine.PROFILE}",
        "  tuning:",
    ] + [f"    {name:21s} {_machine.value_text(name, value):>9s}  ({c['rules'][name]})"
         for name, value in c["tuning"].items()]
    print("\n".join(lines))
