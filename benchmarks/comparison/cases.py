"""The rows of the comparison: which call, on which array, and the target
the project's performance goal sets for it.

Three kinds of row, each measured against its own yardstick:

* STREAMING: memory-bound calls, timed against ``np.copyto`` of x's bytes
  into a preallocated array with the same number of threads (the target is
  the highest ``fastnorm / copy`` ratio allowed, one for 1 thread and one
  for 2), and against NumPy and the other libraries.  ``allocating`` rows
  call fastnorm without ``out=`` and are timed against ``np.copy``, which
  allocates too.  Each row's looks at its arrays give its floor from the
  copy and the read of x (floor.py): no loop doing the row's work moves
  fewer bytes, so a row is met at the larger of its target and its floor.
* SMALL_CALLS: whole calls on arrays that fit in L1, against a copy of the
  same bytes in the same process, into an array made beforehand (the
  target is the highest ``fastnorm / copy`` ratio allowed).
* SCALING: in-cache arrays, 1 thread against 2 (the target is the lowest
  ``time(1) / time(2)`` allowed).

The targets are the goal's, one for one:

* every forward row 1.3 with 1 thread and 1.2 with 2 (float32 and float64,
  up to 512 MiB), but batch_norm over (65536, 512) 1.8 and 1.4, and
  mean_var, which only reads, 0.6 over rows and 0.7 over columns;
* gradients 1.6 where their passes allow it, else their stream floor;
* small calls: layer_norm and rms_norm of (32, 768) float32 2 copies,
  batch_norm of (32, 768) over axis 0 3 copies, mean_var of (32, 768) 1.5
  copies (the calls on (1, 256), a copy of a few hundred nanoseconds, are
  timed without a target);
* 2 threads at least 1.8x faster than 1 on in-cache sizes, every forward;
* against PyTorch, ONNX Runtime, JAX and numba: fastnorm at least AHEAD
  times as fast as the fastest of them on every row they run, with as many
  threads.

Rows that allocate take the target of their call with ``out=``.
"""
from dataclasses import dataclass, replace

from .floor import Looks

BOTH = ("float32", "float64")
F32 = ("float32",)

# /copy with 1 thread and with 2
FORWARD = (1.3, 1.2)
BATCH_COLUMNS = (1.8, 1.4)
GRADIENT_TARGET = (1.6, 1.6)
# fastnorm's least speed-up over the fastest other library
AHEAD = 1.3

# Looks at the arrays of x's size (floor.py): a single pass reads x and
# writes y (one copy); mean_var reads x once; batch_norm training and
# layer_norm over axis 0 take every slice's statistics before its output,
# and their slices do not stay in cache (x read twice); a gradient whose
# slices stay in cache reads x and dy once for dx; batch_norm's reads x
# and dy for the sums over the batch, then again for dx.
ONE_PASS = Looks((("x", 1),), ("y",))
READ_ONLY = Looks((("x", 1),))
TWO_LOOKS = Looks((("x", 2),), ("y",))
GRADIENT = Looks((("x", 1), ("dy", 1)), ("dx",))
BATCH_GRADIENT = Looks((("x", 2), ("dy", 2)), ("dx",))


@dataclass(frozen=True)
class Case:
    label: str        # name in the tables
    op: str           # key of the call tables (fastnorm_calls.CALLS, numpy_code.CODE, ...)
    shape: tuple      # of x, C order
    axis: object      # fastnorm's axis= (channel_axis= for group norm); None: the default
    # the goal's bound (see the module docstring for its meaning per kind):
    # STREAMING (1 thread, 2 threads), the others one number
    target: object
    dtypes: tuple = BOTH
    allocating: bool = False   # no out=: the yardstick copies into a new array too
    looks: Looks = ONE_PASS    # the stream model: its floor (floor.py)
    # The goal's bound is the larger of target and the floor (floor.bound):
    # a row's passes may not allow its target on a machine whose reads are
    # slow against its copies.  Every STREAMING row.
    or_floor: bool = False

    @property
    def name(self):
        """Unique within a kind (labels repeat across the three kinds, and
        SCALING has rows of STREAMING's shapes)."""
        return f"{self.label} {'x'.join(map(str, self.shape))}"


def _row(label, op, shape, axis, target=FORWARD, **kw):
    return Case(label, op, shape, axis, target, or_floor=True, **kw)


def _gradient(label, op, shape, axis, looks):
    return _row(label, op, shape, axis, GRADIENT_TARGET, looks=looks)


STREAMING = [
    _row("layer_norm rows", "layer_norm", (8192, 1024), -1),
    _row("layer_norm rows", "layer_norm", (16384, 4096), -1),   # 512 MiB in float64
    _row("layer_norm last 2 axes", "layer_norm", (64, 196, 768), (1, 2)),
    _row("layer_norm short rows", "layer_norm", (131072, 32), -1),
    _row("layer_norm axis 0", "layer_norm", (4096, 4096), 0, looks=TWO_LOOKS),
    _row("batch_norm NCHW", "batch_norm", (64, 64, 56, 56), None, looks=TWO_LOOKS),
    _row("batch_norm NHWC", "batch_norm", (64, 56, 56, 64), (0, 1, 2), looks=TWO_LOOKS),
    _row("batch_norm (N, C)", "batch_norm", (65536, 512), 0, BATCH_COLUMNS, looks=TWO_LOOKS),
    _row("batch_norm NCHW 7x7", "batch_norm", (256, 512, 7, 7), None, looks=TWO_LOOKS),
    _row("batch_norm eval NCHW", "batch_norm_eval", (64, 64, 56, 56), None),
    _row("batch_norm eval NHWC", "batch_norm_eval", (64, 56, 56, 64), (0, 1, 2)),
    _row("rms_norm rows", "rms_norm", (8192, 1024), -1),
    _row("mean_var rows", "mean_var", (8192, 1024), -1, (0.6, 0.6), looks=READ_ONLY),
    _row("mean_var columns", "mean_var", (8192, 1024), 0, (0.7, 0.7), looks=READ_ONLY),
    _gradient("layer_norm bwd rows", "layer_norm_backward", (8192, 1024), -1, GRADIENT),
    _gradient("rms_norm bwd rows", "rms_norm_backward", (8192, 1024), -1, GRADIENT),
    _gradient("batch_norm bwd NCHW", "batch_norm_backward", (64, 64, 56, 56), None,
              BATCH_GRADIENT),
    _gradient("batch_norm bwd (N, C)", "batch_norm_backward", (65536, 512), 0,
              BATCH_GRADIENT),
    _gradient("batch_norm bwd NCHW 7x7", "batch_norm_backward", (256, 512, 7, 7), None,
              BATCH_GRADIENT),
    _gradient("group_norm bwd NCHW", "group_norm_backward", (64, 64, 56, 56), 1, GRADIENT),
    _row("layer_norm rows, allocating", "layer_norm", (8192, 1024), -1, allocating=True),
    _row("rms_norm rows, allocating", "rms_norm", (8192, 1024), -1, allocating=True),
    _row("batch_norm eval, allocating", "batch_norm_eval", (64, 64, 56, 56), None,
         allocating=True),
]

# Whole calls allocating their output, float32, in copies of x; the most
# threads of the run allowed (fastnorm runs calls this
# small on one thread).  Every label holds "small call" (--only 'small call').
SMALL_CALLS = [
    Case("layer_norm small call", "layer_norm", (32, 768), -1, 2.0, F32, allocating=True),
    Case("rms_norm small call", "rms_norm", (32, 768), -1, 2.0, F32, allocating=True),
    Case("layer_norm small call", "layer_norm", (1, 256), -1, None, F32, allocating=True),
    Case("rms_norm small call", "rms_norm", (1, 256), -1, None, F32, allocating=True),
    Case("batch_norm (N, C) small call", "batch_norm", (32, 768), 0, 3.0, F32,
         allocating=True),
    Case("mean_var rows small call", "mean_var", (32, 768), -1, 1.5, F32,
         allocating=True),
]

# In cache, time(1) / time(2), every forward at two sizes: (256, 1024), 1
# MiB of float32 in and at most 1 MiB out, and (8192, 1024), 32 MiB in (the
# last-level cache of the goal's machines).  The layer_norm gradient's row
# is kept from before the goal named the forwards alone.
_IN_CACHE = ((256, 1024), (8192, 1024))
SCALING = [Case(label, op, shape, axis, 1.8, F32)
           for label, op, axis, shapes in [
               ("layer_norm rows", "layer_norm", -1, _IN_CACHE),
               ("rms_norm rows", "rms_norm", -1, _IN_CACHE),
               ("mean_var rows", "mean_var", -1, _IN_CACHE),
               ("mean_var columns", "mean_var", 0, _IN_CACHE),
               ("batch_norm (N, C)", "batch_norm", 0, ((2048, 128), (8192, 1024))),
               ("layer_norm axis 0", "layer_norm", 0, _IN_CACHE),
               ("layer_norm bwd rows", "layer_norm_backward", -1, _IN_CACHE[:1]),
           ]
           for shape in shapes]


def shrunk(case, factor):
    """The case with its first axis divided by factor (quick runs)."""
    return replace(case, shape=(max(2, case.shape[0] // factor),) + case.shape[1:])
