"""The stream floor of a row: the least time its memory traffic allows, in
copies of x's bytes, from the copy and read yardsticks timed in the same run.

A row's traffic is counted in looks at arrays of x's size (x, dy, y, dx;
parameters and statistics are too small to count): each time an input is
read from memory is one look, each output of x's size is written once.  A
copy of x is one read and one write of x's bytes, so a row that reads
``R`` times and writes ``W`` arrays costs at least ``W`` copies and
``R - W`` further reads::

    floor = W + (R - W) * read / copy

with ``read / copy`` the median, over the repetitions, of the read
yardstick's time over the copy's with as many threads (adjacent in each
repetition, so drift cancels as in every other ratio).  A single pass that
reads x and writes y has the floor 1.0; mean_var (one read, nothing
written) ``read / copy``; a layer_norm gradient whose rows stay in cache
(x and dy read once, dx written) ``1 + read / copy``; batch_norm's
gradient (x and dy read for the sums over the batch, then again for dx)
``1 + 3 * read / copy``.  With read / copy about 0.3 in cache and 0.7 from
memory on one core, that last one is 1.9 to 3.1: more than the gradients'
target of 1.6, which is why a gradient's target is the larger of the two.
"""
from dataclasses import dataclass

from .timing import median_ratio


@dataclass(frozen=True)
class Looks:
    """The stream model of a row: how many times each input of x's size is
    read from memory, and which outputs of x's size are written (once)."""
    reads: tuple        # ((name, looks), ...)
    writes: tuple = ()  # (name, ...)

    @property
    def read_looks(self):
        """R: every read of an array of x's size."""
        return sum(n for _, n in self.reads)

    @property
    def copies(self):
        """W: each output written pairs with one read into a copy."""
        return len(self.writes)

    @property
    def extra_reads(self):
        """R - W: the reads no write pairs with."""
        return self.read_looks - self.copies

    def floor(self, read_per_copy):
        """W + (R - W) * read / copy, in copies."""
        return self.copies + self.extra_reads * read_per_copy

    def formula(self):
        """The floor as a text, e.g. '1 + 3*read/copy'."""
        parts = [str(self.copies)] if self.copies else []
        if self.extra_reads:
            parts.append(("" if self.extra_reads == 1 else f"{self.extra_reads}*")
                         + "read/copy")
        return " + ".join(parts) or "0"

    def text(self):
        """What is read and written, e.g. 'x 2, dy 2 read; dx written'."""
        reads = ", ".join(f"{name} {n}" for name, n in self.reads) + " read"
        return reads + ("; " + ", ".join(self.writes) + " written" if self.writes else "")

    def as_dict(self):
        return {"read": dict(self.reads), "written": list(self.writes)}


def stream_floor(looks, read_samples, copy_samples):
    """The floor in copies from the yardsticks' samples of one thread count
    (lists, one entry per repetition); None when they have no repetition in
    common."""
    read_per_copy = median_ratio(read_samples, copy_samples)
    return None if read_per_copy is None else looks.floor(read_per_copy)


def bound(target, floor, or_floor):
    """The highest /copy that meets the row: its target, or for a row whose
    passes may not allow it (or_floor: the gradients) the larger of the
    target and its floor."""
    if or_floor and floor is not None:
        return max(target, floor)
    return target
