"""The printed tables: one line per row (case x dtype) in each."""
from . import peak_rss
from .cases import AHEAD
from .console import format_table
from .floor import Looks
from .measure import THREADS
from .rivals import NOTES

SHORT = {"torch": "torch", "onnxruntime": "ORT", "jax": "JAX", "numba": "numba"}


def _num(v, fmt):
    return "-" if v is None else format(v, fmt)


def _pair(d, fmt, keys=(1, 2)):
    """'a/b' for the values of d at 1 and 2 threads ('-' where missing)."""
    if not d:
        return "-"
    return "/".join(_num(d.get(k), fmt) for k in keys)


def _shape(row):
    return "x".join(map(str, row["shape"]))


def _met(met):
    if isinstance(met, bool):
        return "yes" if met else "NO"
    if all(met.values()):
        return "yes"
    if not any(met.values()):
        return "NO"
    return "NO " + "/".join(f"{n}t" for n, ok in met.items() if not ok)


def _case(r):
    return r["case"]


# The first cells of every table, also shown for a row that failed.
LEAD = [("case", 28, _case), ("shape", 14, _shape), ("dtype", 7, lambda r: r["dtype"])]


def _table(columns, rows):
    return format_table(rows, LEAD + columns, lead=len(LEAD))


def targets_table(rows):
    return _table([
        ("copy ms 1t/2t", 13, lambda r: _pair(r["copy_ms"], ".2f")),
        ("read ms 1t/2t", 13, lambda r: _pair(r.get("read_ms"), ".2f")),
        ("fastnorm 1t/2t", 14, lambda r: _pair(r["fastnorm_ms"], ".2f")),
        ("/copy 1t/2t", 11, lambda r: _pair(r["ratio"], ".2f")),
        ("floor 1t/2t", 11, lambda r: _pair(r.get("floor"), ".2f")),
        ("target 1t/2t", 12, target_text),
        ("met", 6, lambda r: _met(r["met"])),
    ], rows)


def target_text(r):
    """A STREAMING row's targets with 1 and 2 threads."""
    return "/".join(f"{t:.2f}" for t in r["target"])


def looks_of(r):
    """The row's stream model (floor.Looks) from its JSON-able form."""
    d = r["looks"]
    return Looks(tuple(d["read"].items()), tuple(d["written"]))


def floor_lines(rows):
    """One line per stream model among the rows: what it reads and writes,
    its floor's formula, and the cases it holds."""
    models = {}
    for r in rows:
        if "looks" in r:
            looks = looks_of(r)
            models.setdefault(looks, []).append(r["case"])
    return [f"{looks.text()}: floor {looks.formula()}: {', '.join(dict.fromkeys(names))}"
            for looks, names in models.items()]


def _rival(name, field, fmt, keys=(1, 2)):
    """A cell of a library's ms or speed-up ("a/b" for 1 and 2 threads)."""
    return lambda r: _pair(r["rivals"].get(name, {}).get(field), fmt, keys)


def _lead_met(r):
    return _met(r["lead_met"]) if "lead_met" in r else "-"


def libraries_table(rows, rivals):
    columns = [
        ("fastnorm 1t/2t", 14, lambda r: _pair(r["fastnorm_ms"], ".2f")),
        ("NumPy ms", 8, lambda r: _num(r.get("numpy_ms"), ".1f")),
        ("x", 9, lambda r: _pair(r.get("numpy_speedup"), ".1f")),
    ]
    for name in rivals:
        columns += [(f"{SHORT.get(name, name)} ms", 13, _rival(name, "ms", ".2f")),
                    ("x", 9, _rival(name, "speedup", ".1f"))]
    columns += [("lead 1t/2t", 10, lambda r: _pair(r.get("lead"), ".2f")),
                (f">={AHEAD}", 6, _lead_met)]
    return _table(columns, rows)


def small_call_table(rows, rivals):
    """Times in microseconds; each library at its default thread count."""
    def at_default(d, r, scale=1.0):
        v = (d or {}).get(r["threads"])
        return None if v is None else scale * v

    columns = [
        ("fastnorm us", 11, lambda r: f"{r['fastnorm_us']:.2f}"),
        ("copy us", 7, lambda r: f"{r['copy_us']:.2f}"),
        ("/copy", 5, lambda r: _num(r.get("ratio"), ".2f")),
        ("target", 6, lambda r: _num(r["target"], ".2f")),
        ("met", 4, lambda r: _met(r["met"]) if "met" in r else "-"),
        ("NumPy us", 8, lambda r: _num(None if r.get("numpy_ms") is None
                                       else 1e3 * r["numpy_ms"], ".1f")),
        ("x", 5, lambda r: _num(at_default(r.get("numpy_speedup"), r), ".1f")),
    ]
    for name in rivals:
        def entry(r, name=name):
            return r["rivals"].get(name, {})
        columns += [
            (f"{SHORT.get(name, name)} us", 8,
             lambda r, e=entry: _num(at_default(e(r).get("ms"), r, 1e3), ".1f")),
            ("x", 5, lambda r, e=entry: _num(at_default(e(r).get("speedup"), r), ".1f")),
        ]
    columns += [("lead", 5, lambda r: _num(at_default(r.get("lead"), r), ".2f")),
                (f">={AHEAD}", 6, _lead_met)]
    return _table(columns, rows)


def scaling_table(rows):
    return _table([
        ("fastnorm ms 1t/2t", 17, lambda r: _pair(r["fastnorm_ms"], ".3f")),
        ("1t/2t", 6, lambda r: _num(r["speedup"], ".2f")),
        ("target", 6, lambda r: f"{r['target']:.2f}"),
        ("met", 4, lambda r: _met(r["met"])),
    ], rows)


def skipped_lines(rows):
    """'library: reason: rows' lines, one per distinct reason."""
    by_reason = {}
    for r in rows:
        for name, why in r.get("skipped", {}).items():
            by_reason.setdefault((name, why), []).append(f"{r['case']} {r['dtype']}")
    return [f"  {name}: {why}: {', '.join(dict.fromkeys(where))}"
            for (name, why), where in by_reason.items()]


def cpu_lines(rows):
    """How busy each JAX worker was: CPU seconds per wall second while timed."""
    seen = {}
    for r in rows:
        for n, v in r.get("rivals", {}).get("jax", {}).get("cpu_per_wall", {}).items():
            seen.setdefault(n, []).append(v)
    return [f"  JAX {n} thread(s): {min(v):.2f}-{max(v):.2f} CPU s per s while timed"
            for n, v in sorted(seen.items())]


def rival_notes(rivals, missing):
    lines = [f"  {NOTES[name]}" for name in rivals]
    lines += [f"  {name}: not compared: {why}" for name, why in missing.items()]
    return lines


def summary_lines(rows):
    """Which targets hold; the unmet ones named."""
    judged = [r for r in rows if "met" in r]
    unmet = [r for r in judged if not (r["met"] if isinstance(r["met"], bool)
                                       else all(r["met"].values()))]
    failed = [r for r in rows if "error" in r]
    lines = [f"targets met: {len(judged) - len(unmet)} of {len(judged)} rows"
             + (f"; {len(failed)} rows failed" if failed else "")]
    for r in unmet:
        lines.append(f"  not met: {r['kind']}: {r['case']} {_shape(r)} {r['dtype']}: "
                     + _unmet_detail(r))
    led = [r for r in rows if "lead_met" in r]
    behind = [r for r in led if not all(r["lead_met"].values())]
    lines.append(f"ahead of the fastest other library by {AHEAD}x or more: "
                 f"{len(led) - len(behind)} of {len(led)} rows")
    for r in behind:
        lines.append(f"  not ahead: {r['kind']}: {r['case']} {_shape(r)} {r['dtype']}: "
                     f"lead {_pair(r['lead'], '.2f', sorted(r['lead']))} < {AHEAD}")
    return lines


def _unmet_detail(r):
    if r["kind"] == "streaming":
        bound = (f"{_pair(r['bound'], '.2f')} (the larger of {target_text(r)} and the floor)"
                 if r.get("or_floor") else target_text(r))
        return (f"/copy {_pair(r['ratio'], '.2f')} > {bound} "
                f"(floor {_pair(r.get('floor'), '.2f')})")
    if r["kind"] == "small call":
        return (f"{r['fastnorm_us']:.2f} us = {r['ratio']:.2f} copies > {r['target']:.2f} "
                f"(copy {r['copy_us']:.2f} us)")
    return f"1t/2t {r['speedup']:.2f} < {r['target']:.2f}"


def _section(title, table, notes=()):
    return "\n".join([title, table, *notes])


def timing_sections(rows, names, missing):
    """The four timing tables with their notes, as printable blocks."""
    kinds = {k: [r for r in rows if r["kind"] == k]
             for k in ("streaming", "small call", "scaling")}
    lib_notes = ["  NumPy: the whole-array expression a user writes (one thread; temporaries "
                 "allocated); x compares it with fastnorm at 1t/2t."]
    lib_notes += rival_notes(names, missing) + cpu_lines(rows)
    skipped = skipped_lines(rows)
    if skipped:
        lib_notes += ["  not timed:"] + ["  " + s for s in skipped]
    return [
        _section("fastnorm against the copy yardstick (medians; ratios per repetition, "
                 "then median)", targets_table(kinds["streaming"]), [
                     "  copy = np.copyto of x's bytes into a preallocated array with as many "
                     "threads (x split into contiguous pieces);",
                     "  rows marked 'allocating' call fastnorm without out= and are timed "
                     "against a copy into a new array (allocated too).",
                     "  read = x's bytes read once (np.add.reduce over an unsigned integer "
                     "view, split as the copy): what one look at x costs.",
                     "  floor = the stream model's least time, in copies: with R reads of "
                     "arrays of x's size (each look at an input that does not stay in cache) "
                     "and W such arrays written,",
                     "  W copies + (R - W) reads: floor = W + (R - W) * read/copy (median of "
                     "the per-repetition ratios, as many threads):",
                     *("    " + line for line in floor_lines(kinds["streaming"])),
                     "  met: /copy at most the larger of the target with as many threads and "
                     "the floor (no loop doing the row's work moves fewer bytes)."]),
        _section("in cache: fastnorm with 1 thread against 2", scaling_table(kinds["scaling"])),
        _section(f"small calls (one whole call each, allocating its output; {THREADS[-1]} "
                 "threads allowed, each library decides how many to use), microseconds; "
                 "copy = x copied into an array made beforehand, one thread",
                 small_call_table(kinds["small call"], names)),
        _section("fastnorm against NumPy and other libraries (ms 1t/2t; x = their time / "
                 "fastnorm's with as many threads)",
                 libraries_table([r for r in kinds["streaming"] if not r["allocating"]],
                                 names), lib_notes),
    ]


def rss_section(rss):
    return _section(f"peak memory: each call in a fresh process; extra = peak RSS growth - "
                    f"outputs (limit {peak_rss.EXTRA_LIMIT >> 20} MB)", peak_rss.table(rss))


def rss_summary(rss):
    good = [r for r in rss if "error" not in r and r["extra_bytes"] <= peak_rss.EXTRA_LIMIT]
    return (f"peak memory: {len(good)} of {len(rss)} calls within "
            f"{peak_rss.EXTRA_LIMIT >> 20} MB of their outputs")


def print_all(rows, rss, names, missing, header):
    """Every section, in order: the header lines, the timing tables with
    their notes, peak memory, and the summary."""
    blocks = ["\n".join(header)]
    if rows:
        blocks += timing_sections(rows, names, missing)
    if rss is not None:
        blocks.append(rss_section(rss))
    summary = (summary_lines(rows) if rows else []) + ([rss_summary(rss)] if rss else [])
    blocks.append("\n".join(summary))
    print("\n\n".join(blocks))
