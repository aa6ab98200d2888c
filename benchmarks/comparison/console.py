"""What the comparison prints besides its numbers: a progress bar on stderr,
text tables, the machine's load.

Progress and load_average are copies of those in fastnorm/_bench.py
(``python -m fastnorm``), format_table the form of its own that takes the
columns: the comparison imports nothing private from fastnorm.
"""
import os
import sys


class Progress:
    """A plain-text bar on stderr: redrawn in place on a terminal, one line
    per step otherwise (CI logs)."""

    def __init__(self, total, stream=sys.stderr, width=20):
        self.total, self.done, self.stream, self.width = total, 0, stream, width
        self.in_place = stream.isatty()
        self.last_len = 0

    def show(self, what):
        filled = self.width * self.done // max(self.total, 1)
        line = f"[{'#' * filled}{'.' * (self.width - filled)}] {self.done}/{self.total} {what}"
        if self.in_place:
            self.stream.write("\r" + line.ljust(self.last_len))
            self.last_len = len(line)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def advance(self):
        self.done += 1

    def close(self):
        self.show("done")
        if self.in_place:  # leave the terminal clean for the table
            self.stream.write("\r" + " " * self.last_len + "\r")
            self.stream.flush()


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


def load_average():
    """1-minute load average, or None where the OS does not say."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None
