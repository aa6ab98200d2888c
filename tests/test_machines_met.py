"""The planner's decisions on every machine fastnorm has been measured on,
checked on any machine.

Each machine is held as what fastnorm detected there (caches, cores, a
virtual machine or not); through ``_machine.use`` its tuning is in force
while ``explain()`` reports how the performance table's calls (the cases
of benchmarks/ab.py, and sizes either side of the thresholds) would run:
the pattern and schedule, whether the output streams, whether the rows
count as in cache.  The expected decisions are written out here, not
derived: a change of a rule that flips a decision on a machine nobody has
at hand fails here, and the new decision needs that machine's figures.

Which decisions were measured fastest on each machine, and which follow
from the rules alone, is in docs/performance.md ("Decisions on the
machines met").
"""
import numpy as np
import pytest

import fastnorm
from fastnorm import _machine
from fastnorm._machine import KIB, MIB, Machine

# What fastnorm detected on each machine met (sysfs, affinity, the
# hypervisor flag); all are KVM guests of large server sockets.
MACHINES = {
    # Intel Xeon, family 6 model 207 (Emerald Rapids), 2 vCPUs, AVX-512
    "xeon-emr-2": Machine(48 * KIB, 2 * MIB, 300 * MIB, 2, "met", guest=True),
    # the same CPU as a 16-vCPU guest
    "xeon-emr-16": Machine(48 * KIB, 2 * MIB, 300 * MIB, 16, "met", guest=True),
    # Intel Xeon, family 6 model 167 as the guest sees it (AMX, AVX-512 FP16), 2 vCPUs
    "xeon-480-2": Machine(48 * KIB, 2 * MIB, 480 * MIB, 2, "met", guest=True),
    # AMD EPYC (Zen 5), 2 vCPUs, AVX-512
    "epyc-zen5-2": Machine(48 * KIB, 1 * MIB, 32 * MIB, 2, "met", guest=True),
    # AMD EPYC, family 25 model 1 (Zen 3), 2 vCPUs, AVX2; its prefetches into
    # L2 fill L1 too
    "epyc-zen3-2": Machine(32 * KIB, 512 * KIB, 32 * MIB, 2, "met", guest=True,
                           prefetch_l1=True),
}

F32, F64 = np.float32, np.float64


def _z(shape, dtype):
    # Zeros from calloc: pages untouched, explain() reads nothing.
    return np.zeros(shape, dtype)


def _rows(func, shape, dtype, axis=-1):
    x = _z(shape, dtype)
    return getattr(fastnorm, func), (x,), {"axis": axis, "out": np.empty_like(x)}


def _mean_var(shape, dtype, axis):
    x = _z(shape, dtype)
    kept = tuple(n for i, n in enumerate(shape) if i != axis % len(shape))
    return fastnorm.mean_var, (x,), {"axis": axis, "out": (_z(kept, dtype), _z(kept, dtype))}


def _batch_norm(shape, dtype, axis=None, training=True):
    x = _z(shape, dtype)
    red = tuple(i for i in range(x.ndim) if i != 1) if axis is None else axis
    c = tuple(n for i, n in enumerate(shape) if i not in red)
    kw = {} if axis is None else {"axis": axis}
    return fastnorm.batch_norm, (x, np.ones(c, dtype), _z(c, dtype), _z(c, F64),
                                 np.ones(c, F64)), dict(kw, training=training,
                                                        out=np.empty_like(x))


def _backward(func, shape, dtype, axis):
    x = _z(shape, dtype)
    red = (axis,) if isinstance(axis, int) else axis
    stat = tuple(1 if i in red or i - len(shape) in red else n for i, n in enumerate(shape))
    if func == "batch_norm_backward":
        g = np.ones(tuple(n for i, n in enumerate(shape) if i not in red), dtype)
    else:
        g = np.ones(tuple(shape[i] for i in red), dtype)
    dx, dg, db = np.empty_like(x), np.empty_like(g), np.empty_like(g)
    if func == "rms_norm_backward":
        return (fastnorm.rms_norm_backward, (x, x, np.ones(stat, dtype), g),
                {"axis": axis, "out": (dx, dg)})
    return (getattr(fastnorm, func), (x, x, _z(stat, dtype), np.ones(stat, dtype), g),
            {"axis": axis, "out": (dx, dg, db)})


def _group_norm(shape, dtype):
    x = _z(shape, dtype)
    return fastnorm.group_norm, (x, 8), {"out": np.empty_like(x)}


def _group_norm_backward(shape, dtype):
    x = _z(shape, dtype)
    stat = (shape[0], 8, 1, 1)
    g = np.ones(shape[1], dtype)
    return (fastnorm.group_norm_backward, (x, x, _z(stat, dtype), np.ones(stat, dtype), 8, g),
            {"out": (np.empty_like(x), np.empty_like(g), np.empty_like(g))})


# The performance table's calls (benchmarks/ab.py, out= given), and rows of
# layer_norm either side of where outputs start to stream.
CASES = {
    "layer_norm rows f32": lambda: _rows("layer_norm", (8192, 1024), F32),
    "layer_norm rows f64": lambda: _rows("layer_norm", (8192, 1024), F64),
    "layer_norm rows 256 MiB": lambda: _rows("layer_norm", (16384, 4096), F32),
    "layer_norm rows 2 MiB": lambda: _rows("layer_norm", (512, 1024), F32),
    "layer_norm rows 4 MiB": lambda: _rows("layer_norm", (1024, 1024), F32),
    "layer_norm rows 8 MiB": lambda: _rows("layer_norm", (2048, 1024), F32),
    "layer_norm rows 16 MiB": lambda: _rows("layer_norm", (4096, 1024), F32),
    "layer_norm rows 24 MiB": lambda: _rows("layer_norm", (6144, 1024), F32),
    "layer_norm short rows f32": lambda: _rows("layer_norm", (131072, 32), F32),
    "layer_norm short rows f64": lambda: _rows("layer_norm", (131072, 32), F64),
    "layer_norm last 2 axes": lambda: _rows("layer_norm", (64, 196, 768), F32, (1, 2)),
    "layer_norm last 2 axes f64": lambda: _rows("layer_norm", (64, 196, 768), F64, (1, 2)),
    "rms_norm rows": lambda: _rows("rms_norm", (8192, 1024), F32),
    "layer_norm axis 0": lambda: _rows("layer_norm", (4096, 4096), F32, 0),
    "batch_norm (N, C)": lambda: _batch_norm((65536, 512), F32, (0,)),
    "batch_norm NCHW": lambda: _batch_norm((64, 64, 56, 56), F32),
    "batch_norm NCHW f64": lambda: _batch_norm((64, 64, 56, 56), F64),
    "batch_norm NCHW 28x28": lambda: _batch_norm((64, 128, 28, 28), F32),
    "batch_norm NCHW 40x40 f64": lambda: _batch_norm((64, 64, 40, 40), F64),
    "batch_norm NCHW 112x112": lambda: _batch_norm((32, 64, 112, 112), F32),
    "batch_norm NHWC": lambda: _batch_norm((64, 56, 56, 64), F32, (0, 1, 2)),
    "batch_norm NCHW 7x7": lambda: _batch_norm((256, 512, 7, 7), F32),
    "batch_norm NCHW 14x14": lambda: _batch_norm((64, 512, 14, 14), F32),
    "batch_norm eval NCHW": lambda: _batch_norm((64, 64, 56, 56), F32, training=False),
    "mean_var rows": lambda: _mean_var((8192, 1024), F32, -1),
    "mean_var rows 4 MiB": lambda: _mean_var((1024, 1024), F32, -1),
    "mean_var rows 8 MiB": lambda: _mean_var((2048, 1024), F32, -1),
    "mean_var rows of 16 KiB": lambda: _mean_var((4096, 4096), F32, -1),
    "mean_var rows f64": lambda: _mean_var((8192, 1024), F64, -1),
    "mean_var columns": lambda: _mean_var((8192, 1024), F32, 0),
    "group_norm NCHW": lambda: _group_norm((64, 64, 56, 56), F32),
    "layer_norm_backward rows": lambda: _backward("layer_norm_backward", (8192, 1024), F32, -1),
    "rms_norm_backward rows": lambda: _backward("rms_norm_backward", (8192, 1024), F32, -1),
    "layer_norm_backward rows 1 MiB": lambda: _backward("layer_norm_backward", (128, 1024),
                                                        F32, -1),
    "layer_norm_backward axis 0": lambda: _backward("layer_norm_backward", (4096, 2048), F32,
                                                    0),
    "batch_norm_backward (N, C)": lambda: _backward("batch_norm_backward", (65536, 512), F32,
                                                    (0,)),
    "batch_norm_backward NCHW": lambda: _backward("batch_norm_backward", (64, 64, 56, 56),
                                                  F32, (0, 2, 3)),
    "batch_norm_backward NCHW 7x7": lambda: _backward("batch_norm_backward", (256, 512, 7, 7),
                                                      F32, (0, 2, 3)),
    "group_norm_backward NCHW": lambda: _group_norm_backward((32, 64, 56, 56), F32),
}


def decisions(machine):
    """{case: "pattern schedule [streams] [in cache]"} with machine's tuning
    in force and as many threads as it has cores; the columns' tiles add
    the rows of a sweep and what it fetches ahead, slices of several runs
    what their runs' statistics fetch, slices of one run what their output
    fetches of the next slice."""
    out = {}
    fastnorm.set_num_threads(machine.cores)
    try:
        with _machine.use(machine):
            for name, make in CASES.items():
                func, args, kwargs = make()
                r = fastnorm.explain(func, *args, **kwargs)
                words = [r["pattern"], r["schedule"]]
                words += ["streams"] * r["streams"] + ["in cache"] * r["in_cache"]
                if r["columns"]:
                    words += [f"sweeps of {r['columns']['sweep_rows']}",
                              f"fetching {r['columns']['fetch_ahead']}"]
                if r["runs_fetch"]:
                    words += [f"runs fetching {r['runs_fetch']}"]
                if r["next_fetch"]:
                    words += [f"next slice's {r['next_fetch']}"]
                out[name] = " ".join(words)
    finally:
        fastnorm.set_num_threads(None)
    return out


# The same on every machine met.  Where outputs stream: from a core's
# share of L3 (16 MiB on all of them), so rows of 8 MiB are written
# through the cache and rows of 16 MiB around it (measured on xeon-480-2,
# epyc-zen3-2, xeon-emr-2 at 32 MiB); rows in cache while x and y fit a
# quarter of it (4 MiB: 2 MiB of rows grouped, 4 MiB not), or, for
# float32 statistics alone, wherever they come from (measured on
# xeon-480-2, derived elsewhere: the same reads fetched alike).
COMMON = {
    "layer_norm rows f32": "slices turns streams",
    # Slices of one run written slice after slice fetch the next one's head
    # on two threads and more (measured on xeon-480-2: layer_norm over
    # rows of 8 KiB to 1 MiB and over the last two axes of (N, 12-392, 768)
    # float64 0.74-0.98 of the time of fetching the next slice whole;
    # derived elsewhere); test_one_thread_fetches_the_next_slice_whole_...
    # below for one thread.
    "layer_norm rows f64": "slices whole streams next slice's head",
    "layer_norm rows 256 MiB": "slices turns streams",
    "layer_norm rows 2 MiB": "slices rows in cache",
    "layer_norm rows 4 MiB": "slices whole next slice's head",
    "layer_norm rows 8 MiB": "slices whole next slice's head",
    "layer_norm rows 16 MiB": "slices turns streams",
    "layer_norm rows 24 MiB": "slices turns streams",
    "layer_norm short rows f32": "slices rows streams",
    "layer_norm short rows f64": "slices rows streams",
    "layer_norm last 2 axes": "slices turns streams",
    "layer_norm last 2 axes f64": "slices whole streams next slice's head",
    "rms_norm rows": "slices turns streams",
    # The statistics of maps longer than image_run_bytes and up to twice
    # stats_ahead (12-24 KiB on the Xeons and the Zen 5, 8-16 KiB on the
    # Zen 3) fetch the head of the next map of their channel, longer ones
    # nothing more (measured on
    # xeon-480-2: 56x56 float32 and 40x40 float64 0.87-0.90 of the time of
    # fetching the next channel's map, 56x56 float64 and 112x112 float32
    # 0.99-1.02 either way; derived elsewhere).
    "batch_norm NCHW": "slices whole streams runs fetching next run",
    "batch_norm NCHW f64": "slices whole streams runs fetching own",
    "batch_norm NCHW 28x28": "images images streams",
    "batch_norm NCHW 40x40 f64": "slices whole streams runs fetching next run",
    "batch_norm NCHW 112x112": "slices whole streams runs fetching own",
    "batch_norm NCHW 7x7": "images channels streams",
    "batch_norm NCHW 14x14": "images images streams",
    "batch_norm eval NCHW": "slices whole streams",
    "mean_var rows": "slices rows",
    "mean_var rows 4 MiB": "slices rows in cache",
    "mean_var rows 8 MiB": "slices rows",
    "mean_var rows f64": "slices whole",
    "group_norm NCHW": "slices turns streams",
    "layer_norm_backward rows": "slices rows streams",
    "rms_norm_backward rows": "slices rows streams",
    # in cache, pass 1 fetches no rows ahead; beyond, it does where a
    # fetch into L2 leaves L1 alone (measured on xeon-480-2; on epyc-zen3-2
    # not: prefetch_fills_l1)
    "layer_norm_backward rows 1 MiB": "slices rows in cache",
    "layer_norm_backward axis 0": "columns tiles streams",
    "batch_norm_backward (N, C)": "columns tiles streams",
    "batch_norm_backward NCHW": "slices whole streams",
    "batch_norm_backward NCHW 7x7": "images images streams",
    "group_norm_backward NCHW": "slices whole streams",
}

# Where the machines part: the columns' sweeps hold a sixteenth of L2
# (2 MiB on the Xeons, 1 MiB on the Zen 5, 512 KiB on the Zen 3); over rows
# a multiple of 4 KiB apart they fetch the next sweep whole (measured on
# xeon-480-2: mean_var over the columns of (8192, 1024) 0.88 of the time
# of the heads alone), but on the Zen 3, whose prefetches into L2 fill L1
# too, only the next rows' heads (measured there).  Statistics alone of
# rows up to L2 / 128 go grouped (16 KiB on the Xeons, measured on
# xeon-480-2: mean_var of (4096, 4096) 0.94 of row by row's time; 8 and
# 4 KiB on the EPYCs, derived).
_XEON = dict(COMMON, **{
    "layer_norm axis 0": "columns tiles streams sweeps of 16 fetching sweeps",
    "batch_norm (N, C)": "columns tiles streams sweeps of 64 fetching sweeps",
    "batch_norm NHWC": "columns tiles streams sweeps of 512 fetching sweeps",
    "mean_var columns": "columns tiles sweeps of 32 fetching sweeps",
    "mean_var rows of 16 KiB": "slices rows",
})
EXPECTED = {
    "xeon-emr-2": _XEON,
    "xeon-emr-16": _XEON,
    "xeon-480-2": _XEON,
    "epyc-zen5-2": dict(COMMON, **{
        "layer_norm axis 0": "columns tiles streams sweeps of 8 fetching sweeps",
        "batch_norm (N, C)": "columns tiles streams sweeps of 32 fetching sweeps",
        "batch_norm NHWC": "columns tiles streams sweeps of 256 fetching sweeps",
        "mean_var columns": "columns tiles sweeps of 16 fetching sweeps",
        "mean_var rows of 16 KiB": "slices whole",
    }),
    "epyc-zen3-2": dict(COMMON, **{
        "layer_norm axis 0": "columns tiles streams sweeps of 8 fetching heads",
        "batch_norm (N, C)": "columns tiles streams sweeps of 16 fetching sweeps",
        "batch_norm NHWC": "columns tiles streams sweeps of 128 fetching sweeps",
        "mean_var columns": "columns tiles sweeps of 8 fetching heads",
        "mean_var rows of 16 KiB": "slices whole",
    }),
}


@pytest.mark.parametrize("name", list(MACHINES))
def test_the_planner_decides_on_each_machine_met_as_measured(name):
    assert set(EXPECTED[name]) == set(CASES)
    got = decisions(MACHINES[name])
    wrong = {case: f"{got[case]!r}, expected {want!r}" for case, want in EXPECTED[name].items()
             if got[case] != want}
    assert not wrong, wrong


# One thread: the next slice whole where it and the slice fit half of L2
# (next_slice_bytes, L2 / 4: 512 KiB on the Xeons, 256 KiB on the Zen 5,
# 128 KiB on the Zen 3), else its head. Measured on xeon-480-2: slices of
# 72 and 288 KiB 0.85-0.91 of the time of the head alone, of 1.1 and
# 2.3 MiB 1.11-1.30 (the fetched lines pushed out of L2 before the
# statistics read them); derived elsewhere.
ONE_THREAD = {
    "slices of 72 KiB": ((1024, 12, 768), {"xeon-emr-2": "whole", "xeon-emr-16": "whole",
                                           "xeon-480-2": "whole", "epyc-zen5-2": "whole",
                                           "epyc-zen3-2": "whole"}),
    "slices of 288 KiB": ((256, 49, 768), {"xeon-emr-2": "whole", "xeon-emr-16": "whole",
                                           "xeon-480-2": "whole", "epyc-zen5-2": "head",
                                           "epyc-zen3-2": "head"}),
    "slices of 1.1 MiB": ((64, 196, 768), dict.fromkeys(MACHINES, "head")),
}


@pytest.mark.parametrize("name", list(MACHINES))
def test_one_thread_fetches_the_next_slice_whole_where_both_fit_half_of_l2(name):
    got, want = {}, {}
    fastnorm.set_num_threads(1)
    try:
        with _machine.use(MACHINES[name]):
            for case, (shape, expected) in ONE_THREAD.items():
                func, args, kwargs = _rows("layer_norm", shape, F64, (1, 2))
                got[case] = fastnorm.explain(func, *args, **kwargs)["next_fetch"]
                want[case] = expected[name]
    finally:
        fastnorm.set_num_threads(None)
    assert got == want


# The columns' statistics take no more threads than they have blocks of
# rows (a function of the shape): (64, 1024) has one, (256, 1024) four, on
# every machine.  Measured on xeon-480-2: over axis 0 of (64, 1024)
# float32 two threads took 1.3-1.9 times one thread's time (mean_var,
# layer_norm, batch_norm), the second thread only finishing and writing
# columns the first had summed; derived elsewhere.
COLUMN_THREADS = {(64, 1024): lambda cores: 1, (256, 1024): lambda cores: min(cores, 4),
                  (65536, 512): lambda cores: cores}


@pytest.mark.parametrize("name", list(MACHINES))
def test_column_statistics_take_a_thread_per_block_at_most(name):
    machine = MACHINES[name]
    got, want = {}, {}
    fastnorm.set_num_threads(machine.cores)
    try:
        with _machine.use(machine):
            for shape, expected in COLUMN_THREADS.items():
                for func, args, kwargs in (_mean_var(shape, F32, 0), _batch_norm(shape, F32, (0,))):
                    r = fastnorm.explain(func, *args, **kwargs)["columns"]
                    got[func.__name__, shape] = r["statistics_threads"]
                    want[func.__name__, shape] = expected(machine.cores)
    finally:
        fastnorm.set_num_threads(None)
    assert got == want


def test_the_guests_of_large_sockets_no_longer_plan_by_their_whole_l3():
    # What went wrong at 941cd11: half of 300 or 480 MiB a core, outputs of
    # 32 MiB kept in cache, rows of 32 MiB grouped as if in cache.
    for name in ("xeon-emr-2", "xeon-480-2"):
        t = _machine.derive(MACHINES[name])
        assert t["stream_min_bytes"] == 16 * MIB and t["cached_bytes"] == 4 * MIB, name


# Moments.update takes a chunk that is a view into a larger array (or a
# file's map) as read from memory whatever its size, a chunk that owns its
# memory as just written (in the caches where it fits). Measured on
# epyc-zen3-2: (1e6, 64) float32 in 100 views, 0.69-0.71 (one thread) and
# 0.77-0.82 (two) of mean_var's time a chunk, where a view read again in
# cache takes 1.3-1.5 times it; derived elsewhere.
@pytest.mark.parametrize("name", list(MACHINES))
def test_moments_read_a_view_chunk_from_memory_and_an_own_one_from_cache(name):
    stream = _z((20000, 64), F32)
    rows = _z((200, 4096), F32)
    got = {}
    with _machine.use(MACHINES[name]):
        for kind, columns, runs in (("view", stream[:10000], rows[:100]),
                                    ("own", stream[:10000].copy(), rows[:100].copy())):
            r = fastnorm.explain(fastnorm.Moments(0).update, columns)
            got[kind, "columns"] = r["columns"]["fetch_ahead"] != "none"
            got[kind, "rows in cache"] = fastnorm.explain(fastnorm.Moments(1).update,
                                                          runs)["in_cache"]
    assert got == {("view", "columns"): True, ("view", "rows in cache"): False,
                   ("own", "columns"): False, ("own", "rows in cache"): True}
