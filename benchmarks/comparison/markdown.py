"""The timing tables as Markdown (``--markdown PATH``), to paste into
docs/performance.md: a header that says when, on what and with which
versions the run was made, then the goal's rows against their targets, the
small calls and the in-cache scaling.

The header is what two runs must agree on before their tables can be
compared: the date (UTC), the machine as lscpu names it, fastnorm's version
with the caches it detected and the tuning it derived from them (the same
machine with other caches gives other kernels' block sizes), and each other
library's version.  The numbers are the console tables' (medians; ratios
per repetition before the median).
"""
import datetime
import platform

import numpy as np

import fastnorm
from . import machine
from .measure import THREADS
from .cases import AHEAD
from .report import _met, floor_lines, looks_of, summary_lines, target_text

SHORT = {"torch": "torch", "onnxruntime": "ORT", "jax": "JAX", "numba": "numba"}


def today():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")


def _size(n):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.3g} {unit}"
    return f"{n} B"


def config_lines():
    """fastnorm's caches and tuning lines, from fastnorm._config.config();
    none where that function or its keys are absent (another version)."""
    try:
        from fastnorm import _config
        c = _config.config()
    except Exception:
        return []
    lines = []
    caches = c.get("caches")
    if isinstance(caches, dict):
        text = ", ".join(f"{name} {_size(caches[key])}"
                         for key, name in (("l1d", "L1d"), ("l2", "L2"), ("l3", "L3"))
                         if isinstance(caches.get(key), int))
        if "cores" in caches:
            text += f"; {caches['cores']} cores"
        if caches.get("source"):
            text += f" ({caches['source']})"
        lines.append(f"fastnorm caches: {text}")
    tuning = c.get("tuning")
    if isinstance(tuning, dict) and tuning:
        lines.append("fastnorm tuning: " + ", ".join(f"{k} {v}" for k, v in tuning.items()))
    return lines


def header(versions, missing=None, date=None, machine_line=None):
    """The lines above the tables: a title with the date, then one bullet
    each for the machine, fastnorm, its caches and tuning, the other
    libraries (versions: {name: version} of those compared; missing:
    {name: why not} of the others; date: YYYY-MM-DD, today in UTC by
    default; machine_line: instead of machine.summary())."""
    lines = [f"## fastnorm comparison, {date or today()} (UTC)", ""]
    bullets = [f"machine: {machine_line or machine.summary()}",
               f"fastnorm {fastnorm.__version__} (numpy {np.__version__}, "
               f"Python {platform.python_version()})"]
    bullets += config_lines()
    others = [f"{name} {v}" for name, v in versions.items()]
    others += [f"{name}: {why}" for name, why in (missing or {}).items()]
    if others:
        bullets.append("others: " + "; ".join(others))
    return lines + [f"- {b}" for b in bullets]


def _cell(text):
    return str(text).replace("|", "\\|")


def _table(head, rows):
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(_cell(c) for c in r) + " |" for r in rows]
    return out


def _num(v, fmt):
    return "-" if v is None else format(v, fmt)


def _at(d, n):
    """d's value for n threads (keys int or, after JSON, str); None if none."""
    return None if not d else d.get(n, d.get(str(n)))


def _pair(d, fmt):
    """'a/b' for 1 and 2 threads ('-' where missing)."""
    return "-" if not d else "/".join(_num(_at(d, n), fmt) for n in (1, 2))


def _shape(r):
    return "x".join(map(str, r["shape"]))


def _lead(r):
    return [r["case"], _shape(r), r["dtype"]]


def _failed(r, width):
    return _lead(r) + [f"FAILED: {r['error']}"] + [""] * (width - 4)


def streaming_table(rows, rivals):
    head = ["case", "shape", "dtype", "fastnorm 1t /copy", "fastnorm 2t /copy", "target 1t/2t",
            "met", "floor 1t/2t", "NumPy ms"] + [f"{SHORT.get(n, n)} ms 1t/2t" for n in rivals] + [
            "lead 1t/2t"]
    body = []
    for r in rows:
        if "error" in r:
            body.append(_failed(r, len(head)))
            continue
        floor = "-" if "looks" not in r or looks_of(r).extra_reads == 0 else _pair(
            r.get("floor"), ".2f")
        body.append(_lead(r) + [
            _num(_at(r["ratio"], 1), ".2f"), _num(_at(r["ratio"], 2), ".2f"), target_text(r),
            _met(r["met"]), floor, _num(r.get("numpy_ms"), ".2f")]
            + [_pair(r.get("rivals", {}).get(n, {}).get("ms"), ".2f") for n in rivals]
            + [_pair(r.get("lead"), ".2f")])
    return _table(head, body)


def _rival_us(r, name, threads):
    """A library's microseconds per small call at the row's thread count."""
    ms = _at(r.get("rivals", {}).get(name, {}).get("ms"), threads)
    return None if ms is None else 1e3 * ms


def small_call_table(rows, rivals):
    head = ["case", "shape", "dtype", "fastnorm µs", "copy µs", "/copy", "target", "met",
            "NumPy µs"] + [f"{SHORT.get(n, n)} µs" for n in rivals] + ["lead"]
    body = []
    for r in rows:
        if "error" in r:
            body.append(_failed(r, len(head)))
            continue
        threads = r.get("threads")
        body.append(_lead(r) + [
            f"{r['fastnorm_us']:.2f}", f"{r['copy_us']:.2f}", _num(r.get("ratio"), ".2f"),
            _num(r["target"], ".2f"), _met(r["met"]) if "met" in r else "-",
            _num(None if r.get("numpy_ms") is None else 1e3 * r["numpy_ms"], ".1f")]
            + [_num(_rival_us(r, n, threads), ".1f") for n in rivals]
            + [_num(_at(r.get("lead"), threads), ".2f")])
    return _table(head, body)


def scaling_table(rows):
    head = ["case", "shape", "dtype", "fastnorm ms 1t/2t", "1t/2t", "target", "met"]
    body = []
    for r in rows:
        if "error" in r:
            body.append(_failed(r, len(head)))
            continue
        body.append(_lead(r) + [_pair(r["fastnorm_ms"], ".3f"), _num(r["speedup"], ".2f"),
                                f"{r['target']:.2f}", _met(r["met"])])
    return _table(head, body)


def document(rows, versions, missing=None, date=None, machine_line=None):
    """The whole Markdown text; a column per library in versions, in its
    order (the arguments as header's)."""
    rivals = list(versions)
    kinds = {k: [r for r in rows if r["kind"] == k]
             for k in ("streaming", "small call", "scaling")}
    out = header(versions, missing, date, machine_line)
    out += ["", f"- {summary_lines(rows)[0]}"] if rows else []
    if kinds["streaming"]:
        out += ["", "### Against a copy of the same bytes", ""]
        out += streaming_table(kinds["streaming"], rivals)
        out += ["", "fastnorm 1t, 2t: its time / `np.copyto` of x's bytes into a "
                "preallocated array with as many threads (medians of the per-repetition "
                "ratios); rows marked allocating call fastnorm without `out=` and are timed "
                "against a copy into a new array. Other libraries: ms with 1 / 2 threads; "
                "NumPy: one thread.",
                "",
                "floor: the least time the row's memory traffic allows, in copies. With R "
                "reads of arrays of x's size (each look at an input that does not stay in "
                "cache) and W such arrays written, it is W copies and R - W reads: "
                "`floor = W + (R - W) * read/copy`, read/copy the median ratio of the read "
                "yardstick (x's bytes read once) to the copy, with as many threads, in this "
                "run. A row meets its target with as many threads or, where its passes do "
                "not allow that, its floor (met: /copy at most the larger of the two). "
                "lead: fastnorm's speed-up over the fastest other library (met at "
                f"{AHEAD}). Models:", ""]
        out += [f"- {line}" for line in floor_lines(kinds["streaming"])]
    if kinds["small call"]:
        out += ["", "### Small calls", ""]
        out += small_call_table(kinds["small call"], rivals)
        out += ["", "One whole call each, allocating its output, microseconds (median); "
                f"{THREADS[-1]} threads allowed, each library decides how many to use "
                "(fastnorm runs calls this small on one). copy: x copied into an array "
                "made beforehand, in the same process; /copy: fastnorm's time over it "
                "(median of the "
                "per-repetition ratios), met at most the target."]
    if kinds["scaling"]:
        out += ["", "### In cache: 1 thread against 2", ""]
        out += scaling_table(kinds["scaling"])
        out += ["", "1t/2t: fastnorm's time with 1 thread / with 2 (median of the "
                "per-repetition ratios), `out=` preallocated."]
    return "\n".join(out) + "\n"


def write(path, rows, versions, missing=None, date=None, machine_line=None):
    """Write the Markdown report of rows to path (the arguments as
    document's)."""
    with open(path, "w", encoding="utf-8") as f:
        f.write(document(rows, versions, missing, date, machine_line))
