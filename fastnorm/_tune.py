"""``python -m fastnorm --tune``: measure a core's share of the last-level
cache on this machine and write it as the profile later imports read.

The share is guessed from what the machine reports (``_machine.l3_share``),
and a virtual machine reports its host's L3.  What the share decides is
measurable: from which output size writing around the caches (streaming
stores) pays.  So this times float32 layer_norm over rows of 4 KiB into
``out=``, one thread, at sizes doubling from two L2s to 128 MiB, each with
outputs streamed and not, in rounds that alternate the two; the share is
the smallest size from which streaming is as fast or faster at every size
measured.  It is never run implicitly: it takes about half a minute and
wants a quiet machine.
"""
import datetime
import json
import os
import statistics
import time

import numpy as np

from . import _machine, _simd

MIB = _machine.MIB
LARGEST = 128 * MIB
ROW = 1024  # float32 values a row: 4 KiB


def sizes(m, largest=LARGEST):
    """Output sizes measured: powers of two from two L2s (4 MiB at least)
    to largest."""
    size = 4 * MIB
    while size < 2 * m.l2:
        size *= 2
    out = []
    while size <= largest:
        out.append(size)
        size *= 2
    return out


def _best(call, loops):
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(loops):
            call()
        best = min(best, (time.perf_counter() - t0) / loops)
    return best


def measure(m, rounds=5, largest=LARGEST, report=print):
    """[(size, time kept / time streamed)] on machine m's tuning, one
    thread, medians over rounds of the per-round ratio."""
    import fastnorm
    kernels = _simd.kernels
    values = _machine.derive(m)
    keep = dict(values, stream_min_bytes=1 << 62)
    stream = dict(values, stream_min_bytes=64)
    before, threads = kernels.tuning(), fastnorm.get_num_threads()
    results = []
    fastnorm.set_num_threads(1)
    try:
        for size in sizes(m, largest):
            x = np.random.default_rng(0).standard_normal((size // (4 * ROW), ROW), np.float32)
            y = np.empty_like(x)

            def call():
                fastnorm.layer_norm(x, out=y)
            loops = max(2, int(0.02 * 4e9 / size))  # about 20 ms a loop at 4 GB/s
            ratios, kept, streamed = [], [], []
            for r in range(rounds):
                times = {}
                for name, tuning in ((("keep", keep), ("stream", stream)) if r % 2 == 0
                                     else (("stream", stream), ("keep", keep))):
                    kernels.set_tuning(tuning)
                    call()
                    times[name] = _best(call, loops)
                ratios.append(times["keep"] / times["stream"])
                kept.append(times["keep"])
                streamed.append(times["stream"])
            ratio = statistics.median(ratios)
            report(f"  {_machine.size_text(size):>8s}: kept in cache "
                   f"{statistics.median(kept) * 1e3:8.3f} ms, streamed "
                   f"{statistics.median(streamed) * 1e3:8.3f} ms, kept / streamed {ratio:.3f}")
            results.append((size, ratio))
    finally:
        kernels.set_tuning(before)
        fastnorm.set_num_threads(threads)
    return results


def share_from(results):
    """The smallest size from which streaming was as fast or faster at
    every size measured; twice the largest where it never was."""
    share = 2 * results[-1][0]
    for size, ratio in reversed(results):
        if ratio < 1.0:
            break
        share = size
    return share


def write(m, share, results, path):
    """Write the profile for machine m (atomically) to path."""
    data = {"format": _machine.PROFILE_FORMAT, "machine": _machine.fingerprint(m),
            "share": int(share),
            "measured": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "kept_over_streamed": [[size, round(ratio, 4)] for size, ratio in results]}
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)
    return data


def main(rounds=5, largest=LARGEST):
    """Measure, write the profile, say what changed; 0 on success."""
    path = _machine.profile_path()
    if path is None:
        print("python -m fastnorm --tune: FASTNORM_PROFILE=off, so no profile would be read; "
              "unset it or name a file")
        return 2
    # The machine as detected, whatever FASTNORM_CACHES says: the profile
    # describes this one.
    m = _machine.detect({k: v for k, v in os.environ.items() if k != "FASTNORM_CACHES"})
    guess = _machine.l3_share(m)
    print(f"detected: {_machine.describe(m)}")
    print(f"a core's share of L3 by the rule: {_machine.describe_share(m)}")
    print("float32 layer_norm over rows of 4 KiB into out=, one thread, "
          f"{rounds} rounds:")
    results = measure(m, rounds, largest)
    share = max(share_from(results), 2 * m.l2)
    write(m, share, results, path)
    print(f"measured share: {_machine.size_text(share)} a core (the rule gave "
          f"{_machine.size_text(guess[0])}); outputs stream from "
          f"{_machine.size_text(max(share, 2 * m.l2))}")
    print(f"written to {path}; later imports use it (FASTNORM_PROFILE=off ignores it)")
    return 0
