"""Moments: the count, mean and M2 of each slice of a data set seen in
pieces, carried from one call to the next and merged across processes
with the kernels' own Chan merge; and the state of one piece, which the
Dask path's chunks share."""
import math

import numpy as np

from . import _simd
from ._args import as_input, axes_tuple, keepdims_shape, nan_policy_of
from ._call import forward, normalize
from ._lazy import any_dask
from ._missing import omitted_stats, refuse_nan
from ._where import Input, as_where

__all__ = ["Moments", "piece_moments"]


def piece_moments(x, axes, where=None, omit=False, warn=True, cold=False):
    """One piece's state, (count, mean, m2) per slice, float64 in keepdims
    layout (count one float for all slices when every value counts, else
    an array): over where's selection (as_where's bytes) and,
    with omit, the values that are numbers.  A slice with nothing counted
    has count 0 (its mean and m2 are not used by any merge).  warn False:
    no warning of slices with nothing selected (a piece of a slice).  cold:
    x is read from memory whatever its size (forward's)."""
    shape = keepdims_shape(x.shape, axes)
    if x.size == 0:
        return np.zeros(shape), np.zeros(shape), np.zeros(shape)
    if omit:
        mean, m2, count = omitted_stats(x, axes, where, warn, cold)
        return count, mean, m2
    if where is None:
        mean, m2, _ = forward(x, axes, "stats", cold=cold)
        return float(math.prod(x.shape[i] for i in axes)), mean, m2
    count = np.empty(shape)
    mean, m2, _ = forward(x, axes, "stats", where=where, count=count, warn=warn, cold=cold)
    return count, mean, m2


def stream_chunk(a):
    """Whether update reads a from memory whatever its size: a view into a
    larger array or a file's map (a stream's chunk, read once; fetched
    ahead).  An array that owns its memory was just written, by a
    conversion or a read, and is in the caches where it fits them."""
    return not a.flags.owndata


def _restore(axis, nan_policy, count, shift, mean, m2):
    m = Moments(axis, nan_policy=nan_policy)
    if count is not None:
        m._count, m._shift, m._mean, m._m2 = (np.array(a, dtype=np.float64, order="C")
                                              for a in (count, shift, mean, m2))
    return m


class Moments:
    """A streaming accumulator of count, mean and M2 per slice.

    Feed a data set chunk by chunk with ``update`` (or merge accumulators
    filled elsewhere, in other processes, with ``merge`` or ``+``) and get
    the statistics of the whole: any chunking, any order and any tree of
    merges gives the statistics of the concatenation within rounding.
    Each chunk's moments come from the kernels' single pass (Welford
    updates and shifted sums in float64); chunks are merged with Chan et
    al.'s formula, never through sums of values, so a large common offset
    or a long stream keeps its digits.

    Parameters
    ----------
    axis : None, int or tuple of ints, optional
        The reduced axes of every array given to ``update``, as in
        ``mean_var`` (default None: all of them, one slice).  The kept axes
        (the others) must have the same sizes in every update.
    nan_policy : {"propagate", "omit", "raise"}, optional
        "propagate" (default): a NaN makes its slice's statistics NaN from
        then on; "omit": NaN values are not counted (each slice keeps its
        own count, as scikit-learn's ``partial_fit`` does); "raise":
        ``update`` raises ValueError on a chunk that holds a NaN, changing
        nothing.

    Attributes
    ----------
    count : ndarray
        Values counted per slice (float64, the kept shape; a 0-d 0 before
        any update).  With ``where=`` or "omit", each slice's own count.
    mean : ndarray
        Each slice's mean (float64, the kept shape; NaN where nothing is
        counted, or where a NaN or inf propagated).

    Raises
    ------
    ValueError
        An unknown ``nan_policy``, or a repeated axis.
    TypeError
        An axis that is not an integer.

    See Also
    --------
    mean_var : The statistics of one array in one call.
    zscore : Standard scores of one array.

    Notes
    -----
    The kept shape is fixed by the first update: a later array whose kept
    shape differs raises ValueError and changes nothing.  Accumulators
    pickle (their counts, means and M2 as float64 arrays) and compare
    equal when their axis, policy and statistics are the same (NaN equal
    to NaN).  A Moments is not safe to update from several threads at once.
    ``update`` reads a chunk that is a view into a larger array (a slice of
    it, a memory-mapped file) as a stream's chunk, from memory, fetching
    ahead whatever its size; an array of its own as just written, from the
    caches where it fits them (the statistics are the same either way).

    Examples
    --------
    >>> import numpy as np, fastnorm
    >>> m = fastnorm.Moments(axis=0)
    >>> for chunk in np.split(np.arange(12.0).reshape(6, 2), 3):
    ...     m = m.update(chunk)
    >>> m.count, m.mean, m.var()
    (array([6., 6.]), array([5., 6.]), array([11.66666667, 11.66666667]))
    >>> m.normalize(np.array([[5.0, 6.0]]))
    array([[0., 0.]])
    """

    __slots__ = ("_axis", "_policy", "_count", "_shift", "_mean", "_m2")

    def __init__(self, axis=None, *, nan_policy="propagate"):
        self._policy = nan_policy_of(nan_policy)
        if axis is not None:
            axes_tuple(axis, 64)        # the types and repeats of axis, checked now
        self._axis = tuple(axis) if isinstance(axis, (list, tuple)) else axis
        self._count = self._shift = self._mean = self._m2 = None

    # ---------------------------------------------------------------- feeding

    def update(self, x, *, where=None):
        """Add the values of x (an array_like, a masked array's unmasked
        values; a Dask array is computed, one pass) and return self.

        where : array_like of bool, optional
            The values to add, broadcast to x (``np.var``'s ``where=``).

        Raises ValueError when x's kept shape differs from the one the first
        update fixed, or (nan_policy="raise") x holds a NaN; TypeError and
        ValueError for arguments mean_var refuses.  Nothing changes then.
        """
        if type(x) is np.ndarray and where is None:
            a, w = as_input(x), None       # (the common case: no Input needed)
        elif any_dask(x, where):
            from ._dask.api import moments_piece
            count, mean, m2, kept = moments_piece(x, self._axis, where, self._policy)
            self._check_kept(kept)
            return self._fold(count.reshape(kept), mean.reshape(kept), m2.reshape(kept))
        else:
            inp = Input(x, where)
            a = as_input(inp.data)
            w = as_where(inp.where, a.shape)
        axes = axes_tuple(self._axis, a.ndim)
        shape = tuple(s for i, s in enumerate(a.shape) if i not in axes)
        self._check_kept(shape)
        if self._policy == "raise":
            refuse_nan(a)
        count, mean, m2 = piece_moments(a, axes, w, self._policy == "omit", warn=False,
                                        cold=stream_chunk(a))
        # (reshape of the kernels' C-contiguous statistics: views; a count
        # may be one for all)
        return self._fold(count if np.ndim(count) == 0 else count.reshape(shape),
                          mean.reshape(shape), m2.reshape(shape))

    def merge(self, other):
        """Fold another accumulator's statistics into this one, in place, and
        return self (ValueError where their kept shapes differ)."""
        if not isinstance(other, Moments):
            raise TypeError(f"merge takes a Moments, not {type(other).__name__}")
        if other._count is None:
            return self
        self._check_kept(other._count.shape)
        return self._fold(other._count, other._mean, other._m2, other._shift)

    def __add__(self, other):
        if not isinstance(other, Moments):
            return NotImplemented
        return self.copy().merge(other)

    def copy(self):
        """An independent accumulator with the same statistics."""
        return _restore(self._axis, self._policy, self._count, self._shift, self._mean,
                        self._m2)

    def _check_kept(self, kept):
        if self._count is not None and tuple(kept) != self._count.shape:
            raise ValueError(f"Moments over kept shape {self._count.shape} cannot take an "
                             f"array whose kept shape is {tuple(kept)}")

    def _fold(self, count, mean, m2, shift=None):
        """Merge moments into this state (the kernels' fold_moments): counts
        (one for all, or an array), means relative to shift (another
        accumulator's) or absolute (a chunk's), M2."""
        if self._count is None:
            self._count, self._shift, self._mean, self._m2 = (np.zeros(np.shape(mean))
                                                              for _ in range(4))
        _simd.kernels.fold_moments(self._count, self._shift, self._mean, self._m2, count,
                                   mean, m2, shift)
        return self

    # ------------------------------------------------------------ statistics

    @property
    def axis(self):
        return self._axis

    @property
    def nan_policy(self):
        return self._policy

    @property
    def count(self):
        return np.zeros(()) if self._count is None else self._count.copy()

    @property
    def mean(self):
        if self._count is None:
            return np.full((), np.nan)
        mean = _simd.kernels.means_of(np.array(self._mean + self._shift), self._m2)
        mean[self._count == 0] = np.nan
        return mean

    def var(self, ddof=0):
        """Each slice's variance, M2 / (count - ddof): float64 of the kept
        shape, NaN where count <= ddof (no warning) or a NaN propagated."""
        if self._count is None:
            return np.full((), np.nan)
        var = _simd.kernels.variance(self._m2, self._count, ddof)
        var[self._count - ddof <= 0] = np.nan
        return var

    def std(self, ddof=0):
        """The square root of var(ddof)."""
        return np.sqrt(self.var(ddof))

    def normalize(self, x, *, eps=0.0, out=None):
        """``(x - mean) / sqrt(var + eps)`` with the statistics so far
        (variance over count), for x of this accumulator's kept shape along
        its kept axes, in one pass of the kernels: x's float dtype (float64
        for integers), into out when given (``out=x`` works).  NaN where x
        is NaN.  ValueError before any update or for another kept shape."""
        from ._args import check_eps
        if self._count is None:
            raise ValueError("Moments.normalize needs statistics: update it first")
        a = as_input(x)
        axes = axes_tuple(self._axis, a.ndim)
        self._check_kept(tuple(s for i, s in enumerate(a.shape) if i not in axes))
        shape = keepdims_shape(a.shape, axes)
        rstd = _simd.kernels.rstd(self.var(), check_eps(eps)).reshape(shape)
        y, _, _, _ = normalize(a, axes, "given", eps=0.0, gamma=None, beta=None, out=out,
                               dtype=None, n_stats=0,
                               given=(self.mean.reshape(shape), rstd))
        return y

    # --------------------------------------------------------------- objects

    def __reduce__(self):
        return (_restore, (self._axis, self._policy, self._count, self._shift, self._mean,
                           self._m2))

    def __eq__(self, other):
        if not isinstance(other, Moments):
            return NotImplemented
        if (self._axis, self._policy) != (other._axis, other._policy):
            return False
        if self._count is None or other._count is None:
            return self._count is None and other._count is None
        return all(np.array_equal(a, b, equal_nan=True) for a, b in
                   ((self._count, other._count), (self._mean + self._shift,
                                                  other._mean + other._shift),
                    (self._m2, other._m2)))

    __hash__ = None

    def __repr__(self):
        kept = "no values yet" if self._count is None else (
            f"kept shape {self._count.shape}, {self._count.sum():.17g} values")
        return f"Moments(axis={self._axis!r}, nan_policy={self._policy!r}; {kept})"
