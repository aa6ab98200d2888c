"""The public functions: argument layer -> one kernel call -> results."""
import math
import warnings

import numpy as np

from ._args import (as_input, axes_tuple, batch_axes, check_disjoint, check_eps, check_out,
                    check_training, keepdims_shape, nan_policy_of, param, result_dtypes,
                    running_stat, selected_values, split_out)
from . import _simd
from ._call import forward, normalize
from ._missing import omitted_stats, one_number_kept, policy_normalize, refuse_nan
from ._running import running_rstd, update_running
from ._lazy import any_dask, via_dask
from ._where import Input, Selection, as_where

__all__ = ["mean_var", "layer_norm", "rms_norm", "batch_norm"]

_CENTER = _simd.kernels.MODES["center"]
_RMS = _simd.kernels.MODES["rms"]


def mean_var(x, axis=None, *, ddof=0, keepdims=False, dtype=None, out=None, where=None,
             nan_policy="propagate"):
    """Mean and variance in one pass.

    Welford updates within blocks (float16/float32 runs: sums shifted by a
    value of the block), merged across blocks and threads with Chan et al.'s
    formula, all in float64 and shifted by a value of each slice or block,
    so data with a large common offset (``1e6 + noise`` in float32) keeps
    its digits where ``E[x**2] - E[x]**2`` would lose them.

    Parameters
    ----------
    x : array_like
        Real numbers; integers and bool are converted to float64.
    axis : None, int or tuple of ints, optional
        Axes to reduce over; ``None`` (default) reduces over all axes.
    ddof : int, optional
        The variance divides by ``n - ddof`` (default 0), as in ``np.var``.
    keepdims : bool, optional
        Keep the reduced axes with size 1.
    dtype : dtype, optional
        Result dtype (float16, float32 or float64); default as ``np.mean``:
        x's float dtype, float64 for integers.  Accumulation is always float64.
    out : tuple of two ndarrays, optional
        Arrays for (mean, var), of the result's shape and dtype (either may
        be None: that result is a new array).  Not with Dask arrays
        (TypeError).
    where : array_like of bool, optional
        Elements to include, broadcast to x (``np.var``'s ``where=``): each
        slice's statistics are over its selected values, ``n`` is their
        number.
    nan_policy : {"propagate", "omit", "raise"}, optional
        What a NaN in x does (SciPy's names): "propagate" (default), its
        slice's statistics are NaN; "omit", each slice's statistics are over
        its values that are not NaN (and selected, with ``where``), as
        ``np.nanmean`` / ``np.nanvar`` give them, ``n`` their number (a
        slice with none: NaN, warned of); "raise", ValueError if x holds a
        NaN.  Only NaN is omitted: an inf still gives NaN.  "omit" costs
        one pass over data without NaN; the slices with a NaN are read
        once more, with no temporary of x's size.

    Returns
    -------
    mean : ndarray or scalar
        Shape and dtype as ``np.mean`` with the same arguments (``out[0]``
        when given).
    var : ndarray or scalar
        Shape and dtype as ``np.var`` with the same arguments (``out[1]``
        when given).  For both: a slice that holds a NaN or inf gets NaN
        (``np.mean`` would say +-inf for an inf of one sign).  A masked
        array gives masked arrays, statistics over its unmasked values,
        masked where a slice has none (as ``np.ma.mean`` / ``np.ma.var``);
        an ndarray subclass comes back through its ``__array_wrap__``, as
        from ``np.mean``.

    Raises
    ------
    TypeError
        x of another dtype than real numbers (complex, object, datetime,
        long double), ``dtype`` not float16, float32 or float64, an axis
        that is not an integer, ``out`` not a tuple of two or holding
        something other than an ndarray of the result's dtype, a
        ``where`` that is not boolean, or an array type that converting
        to an ndarray would strip of its meaning (units, device memory).
    ValueError
        A repeated axis, an ``out`` array of the wrong shape or read-only,
        a ``where`` that does not broadcast to x, an unknown
        ``nan_policy``, or (``nan_policy="raise"``) a NaN in x.
    numpy.exceptions.AxisError
        An axis out of range (a ValueError too).

    Warns
    -----
    RuntimeWarning
        A slice with no values (an empty reduction, or none selected): NaN
        statistics there; or ``n - ddof <= 0``: an inf or NaN variance
        there, as ``np.var`` gives.

    See Also
    --------
    numpy.mean : The mean alone; the same ``axis``, ``keepdims``, ``dtype``
        and ``where``.
    numpy.var : The variance alone; the same ``ddof``.
    layer_norm : Normalize with these statistics in the pass that takes them.
    batch_norm : Per-feature statistics that also update running ones.

    Examples
    --------
    >>> import numpy as np, fastnorm
    >>> x = np.arange(12.0).reshape(3, 4)
    >>> m, v = fastnorm.mean_var(x, axis=1)
    >>> m
    array([1.5, 5.5, 9.5])
    >>> v
    array([1.25, 1.25, 1.25])
    >>> m, v = fastnorm.mean_var(x, axis=1, where=x % 2 == 0)   # even values alone
    >>> m
    array([1., 5., 9.])
    >>> v
    array([1., 1., 1.])
    """
    if where is None and nan_policy == "propagate":
        fast = _simd.kernels.fast_mean_var(x, axis, ddof, keepdims, dtype, out)
        if fast is not None:
            return fast
    policy = nan_policy_of(nan_policy)
    if any_dask(x, where):
        return via_dask(mean_var, locals())
    inp = Input(x, where)
    x = as_input(inp.data)
    axes = axes_tuple(axis, x.ndim)
    where = as_where(inp.where, x.shape)
    res_dtype, _ = result_dtypes(x.dtype, dtype)
    shape = keepdims_shape(x.shape, axes)
    if not keepdims:
        shape = tuple(s for i, s in enumerate(x.shape) if i not in axes)
    if out is not None:
        if not (isinstance(out, tuple) and len(out) == 2):
            raise TypeError("out must be a tuple of two arrays (mean, var)")
        for o, name in zip(out, ("out[0]", "out[1]")):
            if o is not None:
                check_out(o, name, shape, res_dtype)
    else:
        out = (None, None)
    if policy == "raise":
        refuse_nan(x)
    if policy == "omit":
        s0, m2, n = omitted_stats(x, axes, where)
    elif where is None:
        n = math.prod(x.shape[i] for i in axes)
        s0, m2, _ = forward(x, axes, "stats")
    else:
        n = np.empty(keepdims_shape(x.shape, axes))
        s0, m2, _ = forward(x, axes, "stats", where=where, count=n)
    if x.size > 0 and not np.all(np.asarray(n) - ddof > 0):
        warnings.warn("Degrees of freedom <= 0 for slice", RuntimeWarning, stacklevel=2)
    var = _simd.kernels.variance(m2, n, ddof, overwrite=True)   # m2 is ours: no second array
    empty = None if np.ndim(n) == 0 or not inp.masked else (n == 0).reshape(shape)
    results = []
    for stat, o in zip((s0, var), out):
        stat = stat.reshape(shape)
        r = _simd.kernels.result(stat, res_dtype, o)
        results.append(r if o is not None else inp.wrap(r[()] if r.ndim == 0 else r, empty))
    return tuple(results)


def layer_norm(x, gamma=None, beta=None, *, axis=-1, eps=1e-5, out=None,
               dtype=None, return_stats=False, where=None, nan_policy="propagate"):
    """Layer normalization: ``(x - mean) * rstd * gamma + beta``.

    Statistics (mean and biased variance) are taken over ``axis`` for each
    index of the other axes; the normalization, gain and bias are applied
    in the same pass, while the slice is still in cache.

    Parameters
    ----------
    x : array_like
        Input, any layout; it is never copied (integers and bool are
        converted to float64).
    gamma, beta : array_like, optional
        Gain and bias, of the normalized shape ``x.shape[axis]`` or with
        ``x.ndim`` dimensions that broadcast to x (keepdims layout).
        Converted to float64.  Default: 1 and 0.
    axis : int or tuple of ints, optional
        The normalized (reduced) axes; default -1.  ``None`` means all.
    eps : float, optional
        Added to the variance; ``rstd = 1 / sqrt(var + eps)``.  Finite and
        >= 0.
    out : ndarray or tuple, optional
        Output of x's shape and the result dtype (``out=x`` works in place);
        with ``return_stats`` a tuple ``(y, mean, rstd)`` (entries may be None).
        Not with Dask arrays (TypeError).
    dtype : dtype, optional
        Output dtype (float16, float32 or float64); default x's float dtype.
    return_stats : bool, optional
        Also return ``mean`` and ``rstd``.
    where : array_like of bool, optional
        Elements to include, broadcast to x: each slice's statistics are
        over its selected values, and y is written at the selected positions
        alone: with ``out=`` the others keep their old values (as NumPy's
        ufuncs do), a fresh y holds 0 there.  A masked array x selects its
        unmasked values, and y comes back masked where x is (or where= is
        false).
    nan_policy : {"propagate", "omit", "raise"}, optional
        What a NaN in x does (SciPy's names): "propagate" (default), its
        slice is NaN; "omit", each slice's statistics are over its values
        that are not NaN and y is NaN where x is and normalized elsewhere
        (as scikit-learn's ``StandardScaler`` keeps missing values);
        "raise", ValueError if x holds a NaN, nothing written.  Only NaN
        is omitted: an inf still gives NaN.  "omit" reads the slices that
        hold a NaN once more (statistics, then output), with no temporary
        of x's size.

    Returns
    -------
    y : ndarray
        The normalized x, of x's shape and the result dtype (``out``
        itself when given).  A slice that holds a NaN or inf gives NaN
        there; a constant slice gives ``beta`` (with ``eps > 0``; with 0 it
        is 0/0, NaN).
    mean, rstd : ndarray
        With ``return_stats=True`` alone: each slice's mean and
        ``1 / sqrt(var + eps)`` in keepdims layout (x's shape with the
        normalized axes of size 1), float32 for float16/float32 results and
        float64 for float64; ``layer_norm_backward`` takes them as they are.

    Raises
    ------
    TypeError
        x, gamma or beta not of real numbers, ``dtype`` not float16, float32
        or float64, an axis that is not an integer, ``eps`` not a number,
        ``out`` not an ndarray of the result dtype, a ``where`` that is not
        boolean, or an array type that converting to an ndarray would strip
        of its meaning (units, device memory).
    ValueError
        gamma or beta of the wrong shape, ``eps`` negative or not finite, a
        repeated axis, ``out`` of the wrong shape (or tuple length) or
        read-only, a ``where`` that does not broadcast to x, an
        unknown ``nan_policy``, or (``nan_policy="raise"``) a NaN in x.
    numpy.exceptions.AxisError
        An axis out of range (a ValueError too).

    Warns
    -----
    RuntimeWarning
        A slice with no values (an empty normalized axis, or none selected):
        NaN statistics there.

    See Also
    --------
    layer_norm_backward : The gradients, from the statistics returned here.
    rms_norm : The same without centring and bias.
    group_norm : Statistics per sample and group of channels.
    mean_var : The statistics alone.

    Examples
    --------
    >>> import numpy as np, fastnorm
    >>> x = np.array([[1.0, 2.0, 3.0], [10.0, 10.0, 40.0]])
    >>> fastnorm.layer_norm(x, eps=0.0).round(4)
    array([[-1.2247,  0.    ,  1.2247],
           [-0.7071, -0.7071,  1.4142]])
    """
    if where is None and nan_policy == "propagate":
        y = _simd.kernels.fast_norm(_CENTER, x, gamma, beta, axis, eps, out, dtype,
                                    return_stats)
        if y is not None:
            return y
    policy = nan_policy_of(nan_policy)
    if any_dask(x, gamma, beta, where):
        return via_dask(layer_norm, locals())
    inp = Input(x, where)
    x = as_input(inp.data)
    axes = axes_tuple(axis, x.ndim)
    eps = check_eps(eps)
    gamma = param(gamma, "gamma", x.shape, axes)
    beta = param(beta, "beta", x.shape, axes)
    sel = Selection(inp, x, axes)
    y, (mean, rstd, _), sdt, outs, _ = policy_normalize(
        policy, x, axes, "center", sel=sel, eps=eps, gamma=gamma, beta=beta, out=out,
        dtype=dtype, n_stats=2 if return_stats else 0, want_stats=return_stats)
    return sel.results(y, out, return_stats and (mean, rstd), sdt, outs)


def rms_norm(x, gamma=None, *, axis=-1, eps=1e-5, out=None, dtype=None,
             return_stats=False, where=None, nan_policy="propagate"):
    """RMS normalization: ``x * rstd * gamma`` with ``rstd = 1/sqrt(mean(x**2) + eps)``.

    Layer normalization without the centring and the bias (Zhang &
    Sennrich): the statistic is the mean of squares over ``axis`` for each
    index of the other axes, and the scaling and gain are applied in the
    same pass.

    Parameters
    ----------
    x : array_like
        Input, any layout (integers and bool are converted to float64).
    gamma : array_like, optional
        Gain of the normalized shape ``x.shape[axis]`` (or keepdims layout).
        Default 1.
    axis : int or tuple of ints, optional
        Axes of the mean of squares; default -1.  ``None`` means all.
    eps : float, optional
        Added to the mean of squares.  Finite and >= 0.
    out : ndarray or tuple, optional
        Output of x's shape and the result dtype; with ``return_stats`` a
        tuple ``(y, rstd)``.  Not with Dask arrays (TypeError).
    dtype : dtype, optional
        Output dtype (float16, float32 or float64); default x's float dtype.
    return_stats : bool, optional
        Also return ``rstd``.
    where : array_like of bool, optional
        Elements to include, broadcast to x, as in ``layer_norm``: the mean
        of squares over the selected values, y written there alone.
    nan_policy : {"propagate", "omit", "raise"}, optional
        As in ``layer_norm``: with "omit", the mean of squares over the
        values that are not NaN, y NaN where x is.

    Returns
    -------
    y : ndarray
        The normalized x, of x's shape and the result dtype (``out``
        itself when given).  A slice that holds a NaN or inf gives NaN
        there.
    rstd : ndarray
        With ``return_stats=True`` alone: in keepdims layout (float32 for
        float16/float32 results, float64 for float64), as
        ``rms_norm_backward`` takes it.

    Raises
    ------
    TypeError
        x or gamma not of real numbers, ``dtype`` not float16, float32 or
        float64, an axis that is not an integer, ``eps`` not a number,
        ``out`` not an ndarray of the result dtype, a ``where`` that is not
        boolean, or an array type that converting to an ndarray would strip
        of its meaning.
    ValueError
        gamma of the wrong shape, ``eps`` negative or not finite, a repeated
        axis, ``out`` of the wrong shape (or tuple length) or read-only, a
        ``where`` that does not broadcast to x, an
        unknown ``nan_policy``, or (``nan_policy="raise"``) a NaN in x.
    numpy.exceptions.AxisError
        An axis out of range (a ValueError too).

    Warns
    -----
    RuntimeWarning
        A slice with no values (an empty normalized axis, or none selected):
        NaN ``rstd`` there.

    See Also
    --------
    rms_norm_backward : The gradients, from the ``rstd`` returned here.
    layer_norm : With centring and bias.
    weight_norm : Each output unit's norm instead of the mean of squares.

    Examples
    --------
    >>> import numpy as np, fastnorm
    >>> fastnorm.rms_norm(np.array([3.0, 4.0]), eps=0.0).round(4)
    array([0.8485, 1.1314])
    """
    if where is None and nan_policy == "propagate":
        y = _simd.kernels.fast_norm(_RMS, x, gamma, None, axis, eps, out, dtype, return_stats)
        if y is not None:
            return y
    policy = nan_policy_of(nan_policy)
    if any_dask(x, gamma, where):
        return via_dask(rms_norm, locals())
    inp = Input(x, where)
    x = as_input(inp.data)
    axes = axes_tuple(axis, x.ndim)
    eps = check_eps(eps)
    gamma = param(gamma, "gamma", x.shape, axes)
    sel = Selection(inp, x, axes)
    y, (_, rstd, _), sdt, outs, _ = policy_normalize(
        policy, x, axes, "rms", sel=sel, eps=eps, gamma=gamma, beta=None, out=out,
        dtype=dtype, n_stats=1 if return_stats else 0, want_stats=return_stats)
    return sel.results(y, out, return_stats and (rstd,), sdt, outs)


def batch_norm(x, gamma=None, beta=None, running_mean=None, running_var=None, *,
               training=True, momentum=0.1, eps=1e-5, axis=None, out=None,
               dtype=None, return_stats=False, where=None, nan_policy="propagate"):
    """Batch normalization, training (batch statistics) or eval (running ones).

    Training normalizes each feature (each index of the kept axes, the
    channels of ``(N, C, *)`` by default) with its mean and biased variance
    over the batch axes, and updates the running statistics in place when
    given; eval normalizes with the running statistics and computes none.

    Parameters
    ----------
    x : array_like
        Input of shape ``(N, C, *)`` by default (integers and bool are
        converted to float64).
    gamma, beta : array_like, optional
        Per-feature gain and bias, of the kept shape (``(C,)`` by default) or
        keepdims layout (``(1, C, 1, 1)``).  Default: 1 and 0.
    running_mean, running_var : ndarray, optional
        Running statistics of the kept shape (or keepdims layout).  With
        ``training=True`` they are updated **in place** (both or neither;
        writable float16, float32 or float64 arrays that share no memory
        with each other or ``out``):
        ``r_mean = (1 - momentum) * r_mean + momentum * mean`` and
        ``r_var = (1 - momentum) * r_var + momentum * var * n / (n - 1)``,
        n the number of values per feature (PyTorch's convention; with
        ``where=``, the selected ones).  An empty batch (n == 0) leaves them
        as they were; so does a feature with no selected value.  With
        ``training=False`` they are required and used to normalize (any
        real array_like then).  With a Dask x, training computes the batch
        statistics during the call (one pass over x) and updates these NumPy
        arrays before returning; y is lazy and reads x once more when
        computed.
    training : bool, optional
        Normalize with the batch mean and biased variance (default), or with
        the running statistics in one pass that computes no statistics.
    momentum : float, optional
        Weight of the new batch in the running statistics (default 0.1);
        finite.  Not used with ``training=False``.
    eps : float, optional
        Added to the variance.  Finite and >= 0.
    axis : int or tuple of ints, optional
        Reduced axes; default every axis but 1.  Use ``axis=(0, 1, 2)`` for
        channels-last NHWC, ``axis=0`` for (N, C).
    out : ndarray or tuple, optional
        Output of x's shape and the result dtype (``out=x`` works); with
        ``return_stats`` a tuple ``(y, mean, rstd)``.  Not with Dask arrays
        (TypeError).
    dtype : dtype, optional
        Output dtype (float16, float32 or float64); default x's float dtype.
    return_stats : bool, optional
        Also return the ``mean`` and ``rstd`` used.
    where : array_like of bool, optional
        Elements to include, broadcast to x (``(N, T, 1)`` for padded
        sequences of shape ``(N, T, C)`` with ``axis=(0, 1)``): each
        feature's statistics, and the running statistics' update, are over
        its selected values; y is written at the selected positions alone
        (with ``out=`` the others keep their old values, a fresh y holds 0
        there).  A masked array x selects its unmasked values, and y comes
        back masked where x is (or where= is false).
    nan_policy : {"propagate", "omit", "raise"}, optional
        As in ``layer_norm``: with "omit" (training), each feature's
        statistics are over its values that are not NaN, and the running
        statistics are updated with each feature's own count.  A feature
        with no number, or one alone, keeps its running statistics (one
        value gives no unbiased variance) and is normalized with what it
        has (one value: variance 0, y = beta); NaN is data, so unlike a
        ``where=`` that selects one value it raises nothing.  In eval
        nothing is computed from x: "omit" changes nothing there, and
        "raise" still refuses a NaN.

    Returns
    -------
    y : ndarray
        The normalized x, of x's shape and the result dtype (``out``
        itself when given).
    mean, rstd : ndarray
        With ``return_stats=True`` alone: the statistics y was normalized
        with (in eval, the running mean and ``1 / sqrt(running_var + eps)``)
        in keepdims layout (``(1, C, 1, 1)`` for NCHW), float32 for
        float16/float32 results and float64 for float64;
        ``batch_norm_backward`` takes them as they are.

    Raises
    ------
    ValueError
        Training with one value per feature (n == 1; with ``where=``, one
        selected value in some feature), eval without running statistics,
        one running statistic without the other, parameters of the wrong
        shape, a negative or non-finite eps, a non-finite momentum, a
        running statistic that is read-only or shares memory with another
        written array, x of fewer than 2 dimensions with ``axis=None``, a
        repeated axis, ``out`` of the wrong shape or read-only, a
        ``where`` that does not broadcast to x, an
        unknown ``nan_policy``, or (``nan_policy="raise"``) a NaN in x.
    TypeError
        x or a parameter not of real numbers, in training a running
        statistic that is not a float ndarray, ``dtype`` not float16, float32
        or float64, an axis that is not an integer, ``eps`` or ``momentum``
        not a number, ``out`` not an ndarray of the result dtype, a
        ``where`` that is not boolean, or an array type that converting to
        an ndarray would strip of its meaning.
    numpy.exceptions.AxisError
        An axis out of range (a ValueError too).

    Warns
    -----
    RuntimeWarning
        Training on an empty batch (n == 0) or a feature with no selected
        value: NaN statistics there.

    See Also
    --------
    batch_norm_backward : The gradients, from the statistics returned here.
    layer_norm : Statistics over the features of each sample instead.
    group_norm : Statistics per sample and group of channels, for small batches.
    mean_var : The batch statistics alone.

    Examples
    --------
    >>> import numpy as np, fastnorm
    >>> x = np.array([[1.0, 10.0], [3.0, 30.0]])
    >>> rm, rv = np.zeros(2), np.ones(2)
    >>> fastnorm.batch_norm(x, running_mean=rm, running_var=rv, axis=0, eps=0.0)
    array([[-1., -1.],
           [ 1.,  1.]])
    >>> rm, rv
    (array([0.2, 2. ]), array([ 1.1, 20.9]))
    """
    if where is None and nan_policy == "propagate":
        y = _simd.kernels.fast_batch_norm(x, gamma, beta, running_mean, running_var, training,
                                          momentum, eps, axis, out, dtype, return_stats)
        if y is not None:
            return y
    policy = nan_policy_of(nan_policy)
    if any_dask(x, gamma, beta, running_mean, running_var, where):
        return via_dask(batch_norm, locals())
    inp = Input(x, where)
    x = as_input(inp.data)
    axes = batch_axes(axis, x.ndim)
    kept = tuple(i for i in range(x.ndim) if i not in axes)
    eps = check_eps(eps)
    gamma = param(gamma, "gamma", x.shape, kept)
    beta = param(beta, "beta", x.shape, kept)
    if (running_mean is None) != (running_var is None):
        raise ValueError("running_mean and running_var go together: give both or neither")
    n_stats = 2 if return_stats else 0
    sel = Selection(inp, x, axes)
    if policy == "raise":
        refuse_nan(x)

    if not training:
        if running_mean is None:
            raise ValueError("batch_norm with training=False needs running_mean and running_var")
        # A copy, never a view of running_mean: it is also the mean this
        # call returns, which must not change when the caller's array does
        # (or when an out= over that array is written).
        mean = np.array(param(running_mean, "running_mean", x.shape, kept), order="C")
        var = param(running_var, "running_var", x.shape, kept)
        rstd = running_rstd(var, eps)
        y, (mean, rstd, _), sdt, outs = normalize(
            x, axes, "given", eps=eps, gamma=gamma, beta=beta, out=out, dtype=dtype,
            n_stats=n_stats, given=(mean, rstd), **sel.kernel_args())
    else:
        # A fresh y is the caller's only after the counts are checked.
        # ("omit" counts numbers, not the selection: the mask is counted.)
        counted = out is None and sel.count is not None and policy != "omit"
        n, momentum = check_training(x.shape, axes, momentum, sel.where, counted)
        if running_mean is not None:
            rm_view = running_stat(running_mean, "running_mean", x.shape, kept)
            rv_view = running_stat(running_var, "running_var", x.shape, kept)
            # Updated after y is written: sharing memory with an output (or
            # with each other) would leave one of the two results wrong.
            outs = split_out(out, 1 + n_stats)
            check_disjoint([("running_mean", running_mean), ("running_var", running_var)]
                           + [(f"out[{i}]" if i else "out", o) for i, o in enumerate(outs)])
        # ("raise" was checked above, for eval too)
        y, (mean, rstd, var), sdt, outs, numbers = policy_normalize(
            "propagate" if policy == "raise" else policy, x, axes, "center", sel=sel,
            eps=eps, gamma=gamma, beta=beta, out=out, dtype=dtype, n_stats=n_stats,
            want_var=running_mean is not None,
            check_count=selected_values if counted else None)
        if numbers is not None:
            n = one_number_kept(numbers)
        elif sel.count is not None:
            n = sel.count
        if running_mean is not None and x.size > 0:
            update_running(rm_view, rv_view, mean, var, momentum, n)
    return sel.results(y, out, return_stats and (mean, rstd), sdt, outs)
