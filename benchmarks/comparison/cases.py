"""The rows of the comparison: which call, on which array, and the target
the project's performance goal sets for it.

Three kinds of row, each measured against its own yardstick:

* STREAMING: memory-bound calls, timed against ``np.copyto`` of x's bytes
  into a preallocated array with the same number of threads (the target is
  the highest ``fastnorm / copy`` ratio allowed), and against NumPy and the
  other libraries.  ``allocating`` rows call fastnorm without ``out=`` and
  are timed against ``np.copy``, which allocates too.  Each row's traffic
  model gives its floor from the copy and the read of x (see Case).
* SMALL_CALL: a whole call on an array that fits in L1 (the target is a
  time in seconds).
* SCALING: in-cache arrays, 1 thread against 2 (the target is the lowest
  ``time(1) / time(2)`` allowed).
"""
from dataclasses import dataclass, replace

BOTH = ("float32", "float64")
F32 = ("float32",)


@dataclass(frozen=True)
class Case:
    label: str        # name in the tables
    op: str           # key of the call tables (fastnorm_calls.CALLS, numpy_code.CODE, ...)
    shape: tuple      # of x, C order
    axis: object      # fastnorm's axis= (channel_axis= for group norm); None: the default
    target: float     # the goal's bound (see the module docstring for its meaning per kind)
    dtypes: tuple = BOTH
    allocating: bool = False   # no out=: the yardstick is np.copy, which allocates too
    # The stream model's least traffic, as (reads, copies) of x's bytes: a
    # call that reads x and writes y once is one copy; each further look at
    # an input that does not stay in cache is one more read.  Its floor is
    # reads * read + copies * copy, both yardsticks timed in the same run.
    traffic: tuple = (0, 1)

    @property
    def name(self):
        """Unique across the run (labels repeat across the three kinds)."""
        return f"{self.label} {'x'.join(map(str, self.shape))}"


# Traffic models (see Case.traffic): mean_var reads x once; batch_norm
# training and layer_norm over axis 0 take every slice's statistics before
# its output, and their slices do not stay in cache (two looks at x); a
# gradient whose slices stay in cache reads dy besides x -> dx; batch_norm's
# reads x and dy for the sums over the batch, then again for dx.
READ_ONLY = (1, 0)
TWO_LOOKS = (1, 1)
GRADIENT = (1, 1)
BATCH_GRADIENT = (3, 1)

# Targets: single-pass forwards 1.15 (1.3 where the reduced axis is the
# strided one), batch_norm training 1.6 (statistics need a second look at
# x), eval and rms_norm 1.1, mean_var 0.55 (it only reads: half a copy's
# traffic), backward 1.6 (three streams: dy and x in, dx out, against the
# copy's two).
STREAMING = [
    Case("layer_norm rows", "layer_norm", (8192, 1024), -1, 1.15),
    Case("layer_norm rows", "layer_norm", (16384, 4096), -1, 1.15),
    Case("layer_norm last 2 axes", "layer_norm", (64, 196, 768), (1, 2), 1.15),
    Case("layer_norm short rows", "layer_norm", (131072, 32), -1, 1.15),
    Case("layer_norm axis 0", "layer_norm", (4096, 4096), 0, 1.3, traffic=TWO_LOOKS),
    Case("batch_norm NCHW", "batch_norm", (64, 64, 56, 56), None, 1.6, traffic=TWO_LOOKS),
    Case("batch_norm NHWC", "batch_norm", (64, 56, 56, 64), (0, 1, 2), 1.6,
         traffic=TWO_LOOKS),
    Case("batch_norm (N, C)", "batch_norm", (65536, 512), 0, 1.6, traffic=TWO_LOOKS),
    Case("batch_norm NCHW 7x7", "batch_norm", (256, 512, 7, 7), None, 1.6,
         traffic=TWO_LOOKS),
    Case("batch_norm eval NCHW", "batch_norm_eval", (64, 64, 56, 56), None, 1.1),
    Case("batch_norm eval NHWC", "batch_norm_eval", (64, 56, 56, 64), (0, 1, 2), 1.1),
    Case("rms_norm rows", "rms_norm", (8192, 1024), -1, 1.1),
    Case("mean_var rows", "mean_var", (8192, 1024), -1, 0.55, traffic=READ_ONLY),
    Case("mean_var columns", "mean_var", (8192, 1024), 0, 0.55, traffic=READ_ONLY),
    Case("layer_norm bwd rows", "layer_norm_backward", (8192, 1024), -1, 1.6,
         traffic=GRADIENT),
    Case("rms_norm bwd rows", "rms_norm_backward", (8192, 1024), -1, 1.6,
         traffic=GRADIENT),
    Case("batch_norm bwd NCHW", "batch_norm_backward", (64, 64, 56, 56), None, 1.6,
         traffic=BATCH_GRADIENT),
    Case("batch_norm bwd (N, C)", "batch_norm_backward", (65536, 512), 0, 1.6,
         traffic=BATCH_GRADIENT),
    Case("batch_norm bwd NCHW 7x7", "batch_norm_backward", (256, 512, 7, 7), None, 1.6,
         traffic=BATCH_GRADIENT),
    Case("group_norm bwd NCHW", "group_norm_backward", (64, 64, 56, 56), 1, 1.6,
         traffic=GRADIENT),
    Case("layer_norm rows, allocating", "layer_norm", (8192, 1024), -1, 1.1,
         allocating=True),
    Case("rms_norm rows, allocating", "rms_norm", (8192, 1024), -1, 1.1, allocating=True),
    Case("batch_norm eval, allocating", "batch_norm_eval", (64, 64, 56, 56), None, 1.1,
         allocating=True),
]

# Whole call, default threads (small inputs run on one thread), seconds.
SMALL_CALL = Case("layer_norm small call", "layer_norm", (32, 768), -1, 5e-6, F32,
                  allocating=True)

# In cache (1 MiB of float32 in, at most 1 MiB out): time(1) / time(2).
SCALING = [
    Case("layer_norm rows", "layer_norm", (256, 1024), -1, 1.8, F32),
    Case("rms_norm rows", "rms_norm", (256, 1024), -1, 1.8, F32),
    Case("mean_var rows", "mean_var", (256, 1024), -1, 1.8, F32),
    Case("mean_var columns", "mean_var", (256, 1024), 0, 1.8, F32),
    Case("batch_norm (N, C)", "batch_norm", (2048, 128), 0, 1.8, F32),
    Case("layer_norm bwd rows", "layer_norm_backward", (256, 1024), -1, 1.8, F32),
]


def shrunk(case, factor):
    """The case with its first axis divided by factor (quick runs)."""
    return replace(case, shape=(max(2, case.shape[0] // factor),) + case.shape[1:])
