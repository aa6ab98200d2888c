"""Per-channel statistics and gradients over a short inner axis, taken as
columns.

Batch norm over ``(N, C, H, W)`` with a small ``H * W`` (the last stages of
a convolutional network, 7x7 or 4x4; ``(N, C, L)`` sequences) reduces every
channel over N runs of ``H * W`` values, each run far from the next.  Run
by run, a few values per run, the kernels spend more on each run than on
its values (10-30x a copy of the same bytes measured).

A C-contiguous x is also a matrix of N rows and ``C * H * W`` columns, a
layout the COLUMNS kernels stream at the speed of memory.  So: the moments
of every column (Welford, float64), merged over the ``H * W`` columns of
each channel with Chan's formula (equal counts); then the normalization of
the matrix with each channel's coefficients repeated over its columns.
Gradients alike: the gradient kernel sums every column, adds up each
channel's columns (a group) before dx, and the parameter gradients are
summed per channel here.

Where the kernels go image by image themselves (float32 or float64 x and
y alike, or any gradient, with at least IMAGES_INNER_MIN values per run:
see ``_kernels.pyx``, ``interleaved``, and ``_backward.pyx``, IMAGES), only
float16/float32 statistics are taken here and the output goes through x's
own view; with the statistics given, or for a gradient, the call does not
come here at all.

Statistics are taken this way for float16/float32 data only: their column
means are exact in float64, so the merge loses nothing.  float64 statistics
keep the kernels' own way, whose shift by a value of each slice the merge
of absolute column means would undo.  With the statistics given (batch norm
in eval mode, every gradient) nothing is merged, so float64 takes the
columns too.  The per-column arrays (here and in the kernels) cost up to
48 bytes per column (88 for a gradient); the rows must be many enough for
that to stay an eighth of x or less, or the arrays a few MiB.
"""
import math

import numpy as np

from . import _dispatch
from ._args import _cached
from ._config import team_size

# Most values per run (product of the reduced axes after the kept ones) for
# which the columns view is taken.  Measured: batch_norm training, float32,
# 1 thread, time / a copy of the same bytes, kernels' way -> columns way:
#   (64, 512, 4, 4) 25.7 -> 6.8, (128, 256, 7, 7) 13.1 -> 5.0,
#   (64, 256, 10, 10) 13.5 -> 5.3, (64, 256, 14, 14) 3.1 -> 3.3,
#   (32, 128, 28, 28) 2.8 -> 4.2; out of cache, (512, 256, 7, 7) 6.1 -> 2.5
#   and (1024, 256, 16) 17.1 -> 2.4.
INNER_MAX = 100
# Bytes of x per column, at least (the shapes measured above have more).
MIN_COLUMN_BYTES = 128
# Per-column arrays, bytes: a forward pass holds four float64 ones at a time
# here and 16 bytes of coefficients in the kernel; a gradient five here
# (gamma, mean and rstd repeated, dgamma and dbeta per column) and, in the
# kernel, up to 32 of folded coefficients and 16 of sums per block of rows.
# Blocks beyond the first are not counted: a block has 64 rows or more, so
# their sums stay within a sixteenth of float32 x (and 32 MiB in all).
FORWARD_COLUMN_BYTES = 48
GRADIENT_COLUMN_BYTES = 88
# They may take an eighth of x, or this much whatever x's size.
COLUMN_ARRAYS_MAX = 8 << 20

# float32 and float64 calls (x and y alike) with at least this many values
# per run are normalized by the kernels image by image, each image's runs one
# run with per-channel coefficients, in address order: faster than the
# columns, whose coefficients vary along every row.  Measured, eval
# batch_norm, 1 thread, time / a copy: float32 (784, 512, 4, 4) 1.54 ->
# 1.12, (256, 512, 7, 7) 1.72 -> 0.98; float64 (256, 512, 7, 7) 1.64 ->
# 0.72.  (The kernels need a vector of values per run: 16 floats.)  The
# float16/float32 statistics stay the columns': taken by the kernels image
# by image too, they measured slower up to 8x8 images and no faster from
# 10x10 to 14x14 ((256, 512, 7, 7): 2.13 against 1.76x a copy in all).
IMAGES_INNER_MIN = 16

# dtypes whose statistics are merged from column moments, and those that
# take the columns only with the statistics given.
_MERGED_DTYPES = (np.dtype(np.float16), np.dtype(np.float32))
_GIVEN_DTYPES = _MERGED_DTYPES + (np.dtype(np.float64),)
# dtypes (x and y alike) that the kernels normalize image by image.
_IMAGES_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def plan(x, axes, mode, gamma, beta, y):
    """(rows, channels, inner) when the call is better run as columns, else
    None.  The kept axes must be one block with reduced axes on both sides,
    gain and bias constant along the reduced axes, x and y C-contiguous."""
    if mode not in ("stats", "center", "given"):
        return None
    dtypes = _GIVEN_DTYPES if mode == "given" else _MERGED_DTYPES
    split = _matrix(x, axes, (y,), (gamma, beta), dtypes, FORWARD_COLUMN_BYTES)
    if split is not None and mode == "given" and _by_images(x, y, split):
        return None
    return split


def _by_images(x, y, split):
    """Whether the kernels normalize x into y image by image themselves."""
    return (y is not None and x.dtype == y.dtype and x.dtype in _IMAGES_DTYPES
            and split[0] > 1 and split[2] >= IMAGES_INNER_MIN)


def plan_backward(x, axes, dy, dx, gamma):
    """The same for a gradient (any mode, the statistics given): x, dy and
    dx C-contiguous, gamma (keepdims layout) constant along the reduced
    axes.  From IMAGES_INNER_MIN values per run on, the kernels' own way
    (image by image) was faster: batch_norm_backward, float32, 1 thread,
    time / a copy, columns -> images: (784, 512, 4, 4) 4.7 -> 4.0,
    (501, 512, 5, 5) 4.2 -> 3.4, (256, 512, 7, 7) 4.5 -> 3.2; below it the
    columns were ((3125, 256, 8) 4.2 against 6.0)."""
    split = _matrix(x, axes, (dy, dx), (gamma,), _GIVEN_DTYPES, GRADIENT_COLUMN_BYTES)
    if split is not None and split[0] > 1 and split[2] >= IMAGES_INNER_MIN:
        return None
    return split


def _matrix(x, axes, arrays, params, dtypes, column_bytes):
    # Asked of every call, so the shape's part is looked up, not redone.
    split = _split(x.shape, tuple(axes), INNER_MAX)
    if (split is None or x.dtype not in dtypes
            or split[0] * x.dtype.itemsize < MIN_COLUMN_BYTES or not x.flags.c_contiguous
            or any(a is not None and not a.flags.c_contiguous for a in arrays)):
        return None
    if split[1] * split[2] * column_bytes > max(COLUMN_ARRAYS_MAX, x.nbytes // 8):
        return None
    for p in params:
        if p is not None and any(p.shape[i] != 1 for i in axes):
            return None
    return split


@_cached
def _split(shape, axes, inner_max):
    """(rows, channels, inner) of x's shape when the kept axes are one block
    with reduced axes on both sides and at most inner_max values inside."""
    kept = [i for i in range(len(shape)) if i not in axes]
    if not kept or kept[0] == 0 or kept[-1] == len(shape) - 1 or kept[-1] - kept[0] + 1 != len(kept):
        return None
    inner = math.prod(shape[kept[-1] + 1:])
    if not 1 < inner <= inner_max:
        return None
    return math.prod(shape[:kept[0]]), math.prod(shape[kept[0]:kept[-1] + 1]), inner


def _per_column(a, keep_shape, inner):
    """A per-channel array (keepdims layout, maybe broadcast along the kept
    axes too) repeated over each channel's columns, as the keepdims layout
    of the matrix."""
    return np.repeat(np.broadcast_to(a, keep_shape).reshape(-1), inner).reshape(1, -1)


def run(x, shape, mode, *, keep, reduced, eps, gamma, beta, y, s0, s1, s2, given):
    """The kernels' call on the matrix view; fills s0, s1 (and s2) as the
    kernels would (see _run.kernel_stats) and writes y, through x's own
    view where the kernels take it image by image.  keep: the statistics'
    keepdims shape; reduced: the reduced axes' mask."""
    rows, channels, inner = shape
    k = _dispatch.kernels
    x2 = x.reshape(rows, channels * inner)
    if mode == "given":
        mean, rstd = given
    else:
        col_mean, col_m2 = np.empty((1, channels * inner)), np.empty((1, channels * inner))
        k.normalize(x2, None, None, None, col_mean, col_m2, None, (True, False),
                    k.MODES["stats"], 0.0, team_size())
        col_mean = col_mean.reshape(channels, inner)
        col_m2 = col_m2.reshape(channels, inner)
        mean = col_mean.mean(axis=1)
        with np.errstate(invalid="ignore", over="ignore"):
            dev = col_mean - mean[:, None]
            m2 = col_m2.sum(axis=1) + rows * np.einsum("ij,ij->i", dev, dev)
        del col_mean, col_m2, dev   # four per-column arrays at a time, at most
        # A channel with a NaN or inf has a column whose mean and M2 the
        # kernel made NaN, so its mean and M2 are NaN here too, as the
        # kernels' own way gives them.
        if mode == "stats":
            s0[...] = mean.reshape(keep)
            s1[...] = m2.reshape(keep)
            return
        var = m2 / (rows * inner)
        with np.errstate(invalid="ignore", divide="ignore"):
            rstd = 1.0 / np.sqrt(var + eps)
        mean, rstd = mean.reshape(keep), rstd.reshape(keep)
        s0[...] = mean
        s1[...] = rstd
        if s2 is not None:
            s2[...] = var.reshape(keep)
    if y is None:
        return
    if _by_images(x, y, shape):
        k.normalize(x, y, gamma, beta, mean, rstd, None, reduced, k.MODES["given"], eps,
                    team_size())
        return
    g2 = None if gamma is None else _per_column(gamma, keep, inner)
    b2 = None if beta is None else _per_column(beta, keep, inner)
    k.normalize(x2, y.reshape(rows, channels * inner), g2, b2, _per_column(mean, keep, inner),
                _per_column(rstd, keep, inner), None, (True, False), k.MODES["given"], eps,
                team_size())


def run_backward(dy, x, dx, shape, mode, *, gamma, mean, rstd, dgamma, dbeta, fresh=False):
    """The gradient kernel on the matrix views, the columns of each channel
    one group: dx written, dgamma and dbeta (gamma's keepdims shape) filled
    (fresh: dx was just allocated)."""
    rows, channels, inner = shape
    k = _dispatch.backward
    keep = gamma.shape
    cols = channels * inner
    dg, db = np.empty((1, cols)), np.empty((1, cols))
    k.backward(dy.reshape(rows, cols), x.reshape(rows, cols), dx.reshape(rows, cols),
               _per_column(gamma, keep, inner), _per_column(mean, keep, inner),
               _per_column(rstd, keep, inner), dg, db, (True, False), k.GRAD_MODES[mode],
               team_size(), inner, fresh)
    dgamma[...] = dg.reshape(channels, inner).sum(axis=1).reshape(keep)
    dbeta[...] = db.reshape(channels, inner).sum(axis=1).reshape(keep)
