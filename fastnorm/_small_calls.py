"""The small calls of ``python -m fastnorm``: calls whose cost is the call
more than its bytes (one time step of a recurrent network, a batch of a few
rows), each spelled the ways a user writes it.

Every spelling of a call computes the same thing and should cost the same;
the table gives the microseconds of the plain spelling, the range over all
of them and the slowest, beside ``np.copyto`` of the same bytes and the
target.  Whole calls on one thread, the spellings interleaved within each
repetition (as the large cases are), medians over the repetitions of the
mean of a loop of calls.
"""
import gc
import time
from dataclasses import dataclass
from statistics import median

import numpy as np

import fastnorm

DTYPE = np.float32


@dataclass(frozen=True)
class SmallCall:
    """One small call: the function, the float32 shape, the target in
    microseconds and its spellings as (name, the arguments after x as
    Python source, ``out`` naming a preallocated output)."""
    func: str
    shape: tuple
    target_us: float
    spellings: tuple

    @property
    def label(self):
        return f"{self.func} {self.shape}"


ROWS_SPELLINGS = (("axis=-1", "axis=-1"), ("axis=1", "axis=1"), ("axis=(1,)", "axis=(1,)"),
                  ("eps=1e-5", "axis=-1, eps=1e-5"), ("out=", "axis=-1, out=out"))

SMALL_CALLS = [
    SmallCall("layer_norm", (32, 768), 3.0, ROWS_SPELLINGS),
    SmallCall("rms_norm", (32, 768), 3.0, ROWS_SPELLINGS),
    SmallCall("layer_norm", (1, 256), 1.0, ROWS_SPELLINGS),
    SmallCall("rms_norm", (1, 256), 1.0, ROWS_SPELLINGS),
    SmallCall("batch_norm", (32, 768), 5.0,
              (("axis=0", "axis=0"), ("default axis", ""), ("axis=(0,)", "axis=(0,)"),
               ("eps=1e-5", "axis=0, eps=1e-5"), ("out=", "axis=0, out=out"))),
    SmallCall("mean_var", (32, 768), 2.5, ROWS_SPELLINGS[:3] + (("out=", "axis=-1, out=out"),)),
]


def output(call, x):
    """The preallocated output(s) of a call on x."""
    if call.func == "mean_var":
        return np.empty(x.shape[0], DTYPE), np.empty(x.shape[0], DTYPE)
    return np.empty_like(x)


def callables(call, x):
    """{spelling name: a no-argument callable making that call on x}, each
    compiled from its source as a user writes it (a call through **kwargs
    costs a small call a few tenths of a microsecond more)."""
    made = {}
    for name, args in call.spellings:
        scope = {"func": getattr(fastnorm, call.func), "x": x, "out": output(call, x)}
        made[name] = eval(f"lambda: func(x, {args})" if args else "lambda: func(x)", scope)
    return made


def copy_destination(x):
    """An empty array of x's shape and dtype (C order) that starts at x's
    offset within a page: the copy yardstick's destination.  glibc copies
    a few KiB up to about the L2's size with ``rep movsb``, which some AMD
    processors run ten times slower when the destination lies 1 to 31
    bytes past the source, modulo 64; NumPy aligns arrays to 16 bytes, so
    one pair of arrays in four would time that instead of the bytes."""
    page = 4096
    raw = np.empty(x.nbytes + page, np.uint8)
    start = (x.ctypes.data - raw.ctypes.data) % page
    return raw[start:start + x.nbytes].view(x.dtype).reshape(x.shape)


def _loop_us(fn, loops):
    t0 = time.perf_counter()
    for _ in range(loops):
        fn()
    return 1e6 * (time.perf_counter() - t0) / loops


def time_call(call, reps, loop_s, rng):
    """The call's row: microseconds per spelling (medians over reps of
    loops of about loop_s seconds, the spellings and the copy interleaved
    within each repetition), one thread."""
    x = rng.standard_normal(call.shape, dtype=DTYPE)
    fns = callables(call, x)
    y = copy_destination(x)
    fns_all = dict(fns, copy=lambda: np.copyto(y, x))
    first = next(iter(fns.values()))()
    same = all(_same_bits(first, fn()) for fn in fns.values())
    loops = {k: max(1, int(loop_s / (max(_loop_us(fn, 20), 0.05) * 1e-6)))
             for k, fn in fns_all.items()}
    times = {k: [] for k in fns_all}
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(reps):
            for k, fn in fns_all.items():
                times[k].append(_loop_us(fn, loops[k]))
    finally:
        if gc_was_enabled:
            gc.enable()
    us = {k: median(v) for k, v in times.items()}
    copy_us = us.pop("copy")
    return {"case": call.label, "function": call.func, "shape": list(call.shape),
            "threads": 1, "spellings_us": us, "copy_us": copy_us,
            "target_us": call.target_us, "same_bits": same, "reps": reps}


def _same_bits(a, b):
    """Whether two results (an array or a tuple of them) are the same bits."""
    a = [np.asarray(p) for p in (a if isinstance(a, tuple) else (a,))]
    b = [np.asarray(q) for q in (b if isinstance(b, tuple) else (b,))]
    return len(a) == len(b) and all(p.dtype == q.dtype and p.shape == q.shape
                                    and p.tobytes() == q.tobytes() for p, q in zip(a, b))


def run(reps, loop_s, seed=0):
    """Every small call's row, on one thread (the thread count is restored)."""
    rng = np.random.default_rng(seed)
    before = fastnorm.get_num_threads()
    fastnorm.set_num_threads(1)
    rows = []
    try:
        for call in SMALL_CALLS:
            try:
                rows.append(time_call(call, reps, loop_s, rng))
            except Exception as e:  # report it, go on with the others
                rows.append({"case": call.label, "function": call.func,
                             "shape": list(call.shape), "error": f"{type(e).__name__}: {e}"})
    finally:
        fastnorm.set_num_threads(before)
    return rows


def spread(row):
    """The slowest spelling's time over the fastest's, and its name."""
    us = row["spellings_us"]
    slowest = max(us, key=us.get)
    return us[slowest] / min(us.values()), slowest


def format_table(rows):
    lines = [f"{'small call':<24} {'us':>6} {'spellings us':>13} {'slowest':>12} "
             f"{'copy us':>7} {'target':>6}",
             " ".join("-" * w for w in (24, 6, 13, 12, 7, 6))]
    for r in rows:
        if "error" in r:
            lines.append(f"{r['case']:<24} FAILED: {r['error']}")
            continue
        us = r["spellings_us"]
        plain = next(iter(us.values()))
        _, slowest = spread(r)
        span = f"{min(us.values()):.2f}-{max(us.values()):.2f}"
        lines.append(f"{r['case']:<24} {plain:6.2f} {span:>13} {slowest:>12} "
                     f"{r['copy_us']:7.2f} {r['target_us']:6.1f}")
    return "\n".join(lines)


def problems(rows, limit=1.5):
    """Lines about spellings that differ: in their bits, or in cost by more
    than `limit` times (the same call should cost the same however spelt;
    noise on a shared machine stays well inside 1.5)."""
    notes = []
    for r in rows:
        if "error" in r:
            notes.append(f"{r['case']}: failed ({r['error']})")
            continue
        if not r["same_bits"]:
            notes.append(f"{r['case']}: the spellings give different results")
        ratio, slowest = spread(r)
        if ratio > limit:
            notes.append(f"{r['case']}: {slowest} costs {ratio:.1f}x the fastest spelling")
    return notes


def print_report(rows):
    print()
    print("small calls: float32, one thread, microseconds per whole call (medians); "
          "us = the first spelling,")
    print("  spellings us = the range over every spelling of the same call (axis=-1, 1, (1,), "
          "eps=, out=),")
    print("  copy us = np.copyto of x's bytes, target = the goal for this call")
    print(format_table(rows))
    notes = problems(rows)
    if notes:
        print("looks wrong:")
        for n in notes:
            print(f"  - {n}")
