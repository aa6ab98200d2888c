"""fastnorm: normalization for NumPy at the speed of memory.

Exact single-pass statistics (Welford updates or shifted sums within blocks,
Chan et al.'s merge across blocks and threads) and fused normalization kernels over any axes of
any strided array: ``mean_var``, ``zscore``, ``layer_norm``, ``rms_norm``,
``batch_norm``, ``group_norm``, ``instance_norm``, ``weight_norm`` and
``weight_standardize``, with the gradients ``layer_norm_backward``,
``rms_norm_backward``, ``batch_norm_backward`` and ``group_norm_backward``.
Each takes Dask arrays too (any argument) and then returns lazy Dask arrays:
the kernels run on each chunk, and statistics are merged across chunks in
Dask's tree reduction (``pip install 'numpy-fastnorm[dask]'``).
Missing values: ``nan_policy="omit"`` leaves NaN out of the statistics (as
``np.nanmean`` / ``np.nanvar``); data seen in pieces: ``Moments`` carries
mergeable statistics from one call to the next.
``show_config()`` says how this installation was built.
"""
from ._version import __version__
from ._api import batch_norm, layer_norm, mean_var, rms_norm
from ._zscore import zscore
from ._moments import Moments
from ._family import group_norm, instance_norm, weight_norm, weight_standardize
from ._grad import (batch_norm_backward, group_norm_backward, layer_norm_backward,
                    rms_norm_backward)
from ._config import get_num_threads, set_num_threads, show_config
from ._explain import explain

__all__ = [
    "__version__",
    "mean_var",
    "zscore",
    "Moments",
    "layer_norm",
    "rms_norm",
    "batch_norm",
    "group_norm",
    "instance_norm",
    "weight_norm",
    "weight_standardize",
    "layer_norm_backward",
    "rms_norm_backward",
    "batch_norm_backward",
    "group_norm_backward",
    "get_num_threads",
    "set_num_threads",
    "show_config",
    "explain",
]


def _public_functions():
    """The functions explain() describes."""
    return (mean_var, zscore, layer_norm, rms_norm, batch_norm, group_norm, instance_norm,
            weight_norm, weight_standardize, layer_norm_backward, rms_norm_backward,
            batch_norm_backward, group_norm_backward)
