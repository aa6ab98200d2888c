"""Arrays laid out the way a kernel with raw pointers and strides finds
hardest, and the bookkeeping that proves a call touched none of them.

Every array of an example lives in a raw byte buffer of the Arena (a uint8
array whose other bytes are random), as a view with any strides: C or
Fortran order, permuted with gaps, reversed (negative strides), broadcast
(zero strides), overlapping (several indices, one address), misaligned (a
byte offset, or strides that are not a multiple of the item size), in
non-native byte order, read-only.  The Arena snapshots every buffer before a
call and checks afterwards that no byte changed except those a call may
write (its out= arrays and in-place running statistics).

at_the_end_of_memory places an array so that the page after its last byte
cannot be read: a kernel that reads past what it needs crashes the test.
"""
import ctypes
import mmap

import numpy as np
import pytest

# Layouts of one array inside its buffer.
LAYOUTS = ("C", "F", "permuted", "reversed", "broadcast", "overlapping")

FLOAT_DTYPES = ("float16", "float32", "float64")
# Converted to float64, as np.mean does.
INT_DTYPES = ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "bool")
# Everything else NumPy has: fastnorm must refuse each with a TypeError.
BAD_DTYPES = ("complex64", "complex128", "clongdouble", "longdouble", "object", "U3", "S3",
              "datetime64[s]", "timedelta64[ms]", "f8,i4", "V8") + (
    ("StringDType",) if hasattr(np.dtypes, "StringDType") else ())   # NumPy >= 2


def make_dtype(name, swap=False):
    """A NumPy dtype by name, in non-native byte order when swap (and the
    dtype has a byte order)."""
    if name == "StringDType":
        return np.dtypes.StringDType()
    dt = np.dtype(name)
    if swap and dt.kind in "fiucmM" and dt.itemsize > 1:
        dt = dt.newbyteorder("S")
    return dt


def element_strides(shape, layout, itemsize, rng, odd=False):
    """Byte strides of an array of this shape and item size in one of LAYOUTS.

    Storage axes are built innermost first, each stride at least the extent
    of the axes inside it, so that no two indices share a byte except where
    the layout asks for it (broadcast, overlapping).  odd adds a byte to
    each stride: misaligned strides for any item size above 1.
    """
    nd = len(shape)
    if layout == "overlapping":
        return tuple(int(rng.integers(-2, 3)) * itemsize for _ in range(nd))
    if layout == "F":
        order = list(range(nd))                       # innermost first
    elif layout in ("permuted", "reversed"):
        order = list(rng.permutation(nd)) if layout == "permuted" else list(range(nd))[::-1]
    else:
        order = list(range(nd))[::-1]
    strides = [0] * nd
    extent = itemsize
    for ax in order:
        step = int(rng.integers(1, 3)) if layout == "permuted" else 1
        s = extent * step + (1 if odd else 0)
        strides[ax] = s
        extent = (shape[ax] - 1) * s + extent if shape[ax] > 0 else extent
    if layout == "reversed":
        strides = [-s for s in strides]
    elif layout == "permuted":
        strides = [-s if rng.random() < 0.4 else s for s in strides]
    elif layout == "broadcast" and nd:
        zero = [i for i in range(nd) if rng.random() < 0.5] or [int(rng.integers(nd))]
        strides = [0 if i in zero else s for i, s in enumerate(strides)]
    return tuple(strides)


def _span(shape, strides, itemsize):
    """(lowest, highest + 1) byte offset an array touches, from its first element."""
    if 0 in shape:
        return 0, 0
    lo = sum((n - 1) * s for n, s in zip(shape, strides) if s < 0)
    hi = sum((n - 1) * s for n, s in zip(shape, strides) if s > 0) + itemsize
    return lo, hi


def address(a):
    return a.__array_interface__["data"][0]


def byte_offsets(a):
    """Offset from a's first element of every element (a's shape, int64)."""
    offs = np.zeros(a.shape, dtype=np.int64)
    for ax, s in enumerate(a.strides):
        idx = np.arange(a.shape[ax], dtype=np.int64) * s
        offs += idx.reshape((-1,) + (1,) * (a.ndim - ax - 1))
    return offs


def has_internal_overlap(a):
    """Whether two indices of a share an address."""
    offs = byte_offsets(a).ravel()
    return offs.size != np.unique(offs).size


class Arena:
    """The raw buffers of one example's arrays, and what a call may write."""

    def __init__(self, rng):
        self.rng = rng
        self.raws = []
        self.writable_masks = []     # per raw buffer: bytes a call may change
        self._before = None

    def _new_raw(self, nbytes):
        raw = self.rng.integers(0, 256, size=nbytes, dtype=np.uint8)
        self.raws.append(raw)
        self.writable_masks.append(np.zeros(nbytes, dtype=bool))
        return raw

    def place(self, values, dtype, layout="C", *, misalign=False, odd=False, readonly=False,
              room=0):
        """values (any array_like of a numeric dtype) copied into a new
        buffer as a view of `dtype` in `layout`.  room: spare bytes after
        the view, where an aliasing out= can be placed later."""
        values = np.asarray(values)
        dt = np.dtype(dtype)
        if dt.kind in "OT":  # no raw buffer can hold object references
            a = np.array(values, dtype=dt)
            if readonly:
                a.flags.writeable = False
            return a
        shape = values.shape
        strides = element_strides(shape, layout, dt.itemsize, self.rng, odd=odd)
        lo, hi = _span(shape, strides, dt.itemsize)
        pad = 16
        raw = self._new_raw(hi - lo + 2 * pad + room + 1)
        a = np.ndarray(shape, dtype=dt, buffer=raw, offset=pad - lo + (1 if misalign else 0),
                       strides=strides)
        if dt.kind in "SUV":
            a[...] = np.zeros(shape, dtype=dt)
        else:
            with np.errstate(all="ignore"):
                a[...] = values.astype(dt) if dt.kind not in "mM" else values.astype(np.int64)
        if readonly:
            a.flags.writeable = False
        return a

    def alias(self, of, shape, dtype, layout="C", misalign=False):
        """A writable view of `dtype` and `shape` in the buffer that holds
        `of`, starting at a random byte near it (usually overlapping it), or
        None when it does not fit."""
        raw = self.raw_of(of)
        if raw is None:
            return None
        dt = np.dtype(dtype)
        strides = element_strides(shape, layout, dt.itemsize, self.rng)
        lo, hi = _span(shape, strides, dt.itemsize)
        room = raw.size - (hi - lo)
        if room < 0:
            return None
        # The region [first + lo, first + hi) must lie inside raw.
        near = address(of) - address(raw) + int(self.rng.integers(-16, 17))
        first = int(np.clip(near + lo, 0, room)) - lo
        if not misalign:
            first -= (address(raw) + first) % dt.alignment
            if first + lo < 0:
                first += dt.alignment
            if first + hi > raw.size:
                return None
        return np.ndarray(shape, dtype=dt, buffer=raw, offset=first, strides=strides)

    def raw_of(self, a):
        if not isinstance(a, np.ndarray) or a.dtype.kind in "OT":
            return None
        for raw in self.raws:
            p, r = address(a), address(raw)
            if r <= p < r + max(raw.size, 1):
                return raw
        return None

    def may_write(self, a):
        """Bytes under a (an out= array, running statistics) may change."""
        raw = self.raw_of(a)
        if raw is None or a.size == 0:
            return
        k = next(i for i, r in enumerate(self.raws) if r is raw)
        offs = (byte_offsets(a) + (address(a) - address(raw))).ravel()
        for b in range(a.dtype.itemsize):
            self.writable_masks[k][offs + b] = True

    def snapshot(self):
        self._before = [raw.copy() for raw in self.raws]

    def assert_unchanged(self, what="the call"):
        """No byte of any buffer changed but those may_write allowed."""
        for raw, before, mask in zip(self.raws, self._before, self.writable_masks):
            changed = (raw != before) & ~mask
            if changed.any():
                first = int(np.argmax(changed))
                raise AssertionError(f"{what} changed {int(changed.sum())} byte(s) it must not "
                                     f"write (first at offset {first} of a {raw.size}-byte "
                                     "buffer): an input was modified")


def assert_close_through(actual, expected, allowed, what, assert_close):
    """assert_close for an out= array that may have internal overlap: where
    several indices share an address, the value there must match one of
    theirs (which one wins is NumPy's copy order)."""
    if not (isinstance(actual, np.ndarray) and actual.size and has_internal_overlap(actual)):
        assert_close(actual, expected, allowed, what)
        return
    a = np.asarray(actual, dtype=np.float64).ravel()
    e = np.broadcast_to(np.asarray(expected, dtype=np.float64), actual.shape).ravel()
    tol = np.broadcast_to(np.asarray(allowed, dtype=np.float64), actual.shape).ravel()
    with np.errstate(invalid="ignore"):
        ok = (np.abs(a - e) <= tol) | (np.isnan(a) & np.isnan(e)) | (a == e)
    offs = byte_offsets(actual).ravel()
    _, group = np.unique(offs, return_inverse=True)
    hit = np.zeros(group.max() + 1, dtype=bool)
    np.logical_or.at(hit, group, ok)
    if not hit.all():
        g = int(np.argmin(hit))
        i = int(np.flatnonzero(group == g)[0])
        raise AssertionError(f"{what}: the value at a shared address ({a[i]!r}) is none of "
                             f"the results written there (e.g. {e[i]!r})")


PAGE = mmap.PAGESIZE
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)


def at_the_end_of_memory(values):
    """A copy of `values` (C order) whose last byte is followed by a page
    that cannot be read (the mapping lives as long as the array: it is the
    array's base)."""
    nbytes = values.nbytes
    span = -(-nbytes // PAGE) * PAGE
    buf = mmap.mmap(-1, span + PAGE)
    base = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    if _libc.mprotect(base + span, PAGE, 0) != 0:       # PROT_NONE
        pytest.skip(f"mprotect failed (errno {ctypes.get_errno()})")
    out = np.frombuffer(buf, dtype=values.dtype, count=values.size,
                        offset=span - nbytes).reshape(values.shape)
    out[...] = values
    return out
