"""What the comparison prints besides its numbers: a progress bar on stderr,
text tables, the machine's load.  The progress bar and the load are those
of ``python -m fastnorm`` (fastnorm._bench); format_table is the form of
its own that takes the columns.
"""
from fastnorm._bench import Progress, load_average  # noqa: F401  (used by cli)


def format_table(rows, columns, lead):
    """One line per row under (header, width, format) columns, the first
    two left-aligned; a row with an "error" shows its first `lead` cells
    and the error instead."""
    def cells(r, cols):
        return [c.rjust(w) if i > 1 else c.ljust(w)
                for i, (c, (_, w, _)) in enumerate(zip([f(r) for _, _, f in cols], cols))]

    out = [" ".join(cells(None, [(h, w, lambda _, h=h: h) for h, w, _ in columns])).rstrip(),
           " ".join("-" * w for _, w, _ in columns)]
    for r in rows:
        if "error" in r:
            out.append(" ".join(cells(r, columns[:lead])) + f" FAILED: {r['error']}")
        else:
            out.append(" ".join(cells(r, columns)).rstrip())
    return "\n".join(out)
