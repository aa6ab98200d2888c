"""zscore: SciPy's standard scores in one pass over the data where every
value counts (layer normalization's), else two (the statistics, then the
output), whatever the axes and the layout."""
import math
import warnings

import numpy as np

from . import _simd
from ._args import as_input, axes_tuple, keepdims_shape, nan_policy_of, result_dtypes
from ._call import forward, normalize
from ._lazy import any_dask, via_dask
from ._missing import (nan_in_most, nan_slices_again, omitted_stats, refuse_nan,
                       write_slices_again)
from ._where import Input, as_where

__all__ = ["zscore", "zscore_scale"]


def zscore_scale(mean, m2, n, ddof, dtype):
    """1 / std of each slice as zscore divides by it (float64, a new array):
    std over n - ddof; NaN where there are no degrees of freedom (SciPy's
    silent NaN) or where the slice is constant, std <= |eps * mean| with
    eps of the result dtype (SciPy's rule: 0/0 is not a score)."""
    std = np.sqrt(_simd.kernels.variance(m2, n, ddof))
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = 1.0 / std
    flat = (std <= np.abs(np.finfo(dtype).eps * mean)) | (np.asarray(n) - ddof <= 0)
    scale[np.broadcast_to(flat, scale.shape)] = np.nan
    return scale


def _one_pass(x, axes, n, ddof, out, dtype, out_dtype, omit):
    """zscore of every value in one pass: layer normalization without eps,
    its biased rstd scaled by a gain of sqrt((n - ddof) / n); then NaN in
    the slices SciPy's rule finds constant (a constant slice is 0/0, NaN,
    already; a nearly constant one is written again, rarely).  With omit,
    the slices that come out NaN are taken again without their NaN (their
    statistics through the masked pass, then their scores)."""
    # (ddof 0: the gain is 1, and a call without one skips its multiply)
    gain = None if ddof == 0 else np.full((1,) * x.ndim, math.sqrt((n - ddof) / n))
    y, (mean, _, var), _, _ = normalize(x, axes, "center", eps=0.0, gamma=gain, beta=None,
                                        out=out, dtype=dtype, n_stats=0, want_var=True)
    with np.errstate(invalid="ignore"):
        flat = np.sqrt(var * (n / (n - ddof))) <= np.abs(np.finfo(out_dtype).eps * mean)
    redo = np.isnan(mean) | np.isnan(var) if omit else None
    if redo is not None and redo.any():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            where, m, q, count = nan_slices_again(x, axes, redo)
            scale = zscore_scale(m, q, count, ddof, out_dtype)
        write_slices_again(x, axes, y, redo, where, (m, scale), dtype)
        flat &= ~redo
    if flat.any():
        np.copyto(y, np.nan, where=np.broadcast_to(flat, y.shape))
    return y


def zscore(a, axis=0, *, ddof=0, nan_policy="propagate", out=None, dtype=None):
    """Standard scores: ``(a - mean) / std`` along ``axis``, as ``scipy.stats.zscore``.

    The mean and the standard deviation of each slice (single-pass Welford
    updates merged with Chan et al.'s formula, in float64, exact for data
    with a large common offset) and the scores come from one pass over a,
    as layer normalization's, for float16/float32 scores (with "omit", the
    slices that hold a NaN are read again); float64 scores, and a masked
    array's, from two (the statistics, then the scores).

    Parameters
    ----------
    a : array_like
        Real numbers; integers and bool are converted to float64.
    axis : None, int or tuple of ints, optional
        Axes the mean and standard deviation are taken over (default 0, as
        SciPy's); ``None``: over the whole array.  The scores have a's shape
        whatever the axis.
    ddof : int, optional
        The standard deviation divides by ``n - ddof`` (default 0).
    nan_policy : {"propagate", "omit", "raise"}, optional
        SciPy's: "propagate" (default), a slice that holds a NaN gets NaN
        scores; "omit", each slice's statistics are over its values that
        are not NaN, and NaN scores stay NaN; "raise", ValueError if a holds
        a NaN.  Only NaN is omitted: an inf gives NaN scores in its slice.
    out : ndarray, optional
        Output of a's shape and the result dtype (``out=a`` works in place).
        Not with Dask arrays (TypeError).
    dtype : dtype, optional
        Result dtype (float16, float32 or float64); default a's float dtype,
        float64 for integers (SciPy's).

    Returns
    -------
    ndarray
        The scores, of a's shape.  NaN throughout a slice that is constant (its standard
        deviation at most ``eps * |mean|``, eps of the result dtype: SciPy's
        rule), that has no more than ``ddof`` values, or (with "propagate")
        that holds a NaN or inf.  An empty a gives an empty z.  A masked
        array gives a masked z, its statistics over the unmasked values; an
        ndarray subclass comes back through its ``__array_wrap__``.

    Raises
    ------
    TypeError
        a not of real numbers, ``dtype`` not a float dtype fastnorm
        computes in, an axis that is not an integer, or ``out`` not an
        ndarray of the result dtype.
    ValueError
        A repeated axis, ``out`` of the wrong shape or read-only, an unknown
        nan_policy, or (nan_policy="raise") a NaN in a.
    numpy.exceptions.AxisError
        An axis out of range (a ValueError too).

    See Also
    --------
    mean_var : The statistics alone, with ``where=``.
    Moments : Statistics of data seen in pieces, then ``normalize``.

    Notes
    -----
    No warning where SciPy gives none (constant or all-NaN slices, ``n <=
    ddof``); SciPy's precision-loss warning for nearly constant data is not
    given: the statistics here do not lose those digits.

    Examples
    --------
    >>> import numpy as np, fastnorm
    >>> fastnorm.zscore(np.array([1.0, 2.0, 3.0, 4.0])).round(4)
    array([-1.3416, -0.4472,  0.4472,  1.3416])
    >>> fastnorm.zscore(np.array([1.0, np.nan, 3.0]), nan_policy="omit")
    array([-1., nan,  1.])
    """
    policy = nan_policy_of(nan_policy)
    if any_dask(a):
        return via_dask(zscore, locals())
    inp = Input(a, None, "a")
    x = as_input(inp.data, "a")
    axes = axes_tuple(axis, x.ndim)
    out_dtype, _ = result_dtypes(x.dtype, dtype)
    where = as_where(inp.where, x.shape)
    if policy == "raise":
        refuse_nan(x, "a")
    shape = keepdims_shape(x.shape, axes)
    n = math.prod(x.shape[i] for i in axes)
    # (omit re-reads the slices with a NaN after y is written: not in place.
    # float64 scores take the given pass, (x - mean) * scale: the one pass's
    # x * k + c cancels log2 of offset / spread bits, below float32's.)
    # (most slices with a NaN: their statistics first, in one pass)
    most = policy == "omit" and where is None and nan_in_most(x, axes)
    if (where is None and x.size > 0 and n - ddof > 0 and out_dtype != np.float64 and not most
            and (policy != "omit" or out is None or not np.may_share_memory(out, x))):
        y = _one_pass(x, axes, n, ddof, out, dtype, out_dtype, policy == "omit")
        return y if out is not None else inp.wrap(y)
    with warnings.catch_warnings():
        # SciPy's zscore is silent about empty and all-NaN slices.
        warnings.simplefilter("ignore", RuntimeWarning)
        if policy == "omit":
            mean, m2, n = omitted_stats(x, axes, where, nan_most=most)
        elif where is None:
            mean, m2, _ = forward(x, axes, "stats")
        else:
            n = np.empty(shape)
            mean, m2, _ = forward(x, axes, "stats", where=where, count=n)
    scale = zscore_scale(mean, m2, n, ddof, out_dtype)
    selected = {} if where is None else {"where": where, "count": np.empty(shape)}
    y, _, _, _ = normalize(x, axes, "given", eps=0.0, gamma=None, beta=None, out=out,
                           dtype=dtype, n_stats=0, given=(mean, scale), **selected)
    if out is not None:
        return y
    return inp.wrap(y, None if where is None else np.logical_not(where.view(np.bool_)))
