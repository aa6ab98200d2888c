# Dask's own functions (from_array, astype, compute...) are partly
# unannotated, which --strict reports at each call; fastnorm's are not.
# mypy: allow-untyped-calls
"""A typed program using every public array function of fastnorm on Dask
arrays: each result is a dask.array.Array (tuples of them with
return_stats), whatever the dtype.  Checked like uses_numpy.py: by
``mypy --strict`` (the assert_type lines) and by running it (``returns``,
which also computes each result and compares its dtype with the NumPy
call's rules).
"""
import sys

import dask.array as da
import numpy as np

import fastnorm

if sys.version_info >= (3, 11):
    from typing import assert_type
else:
    from typing_extensions import assert_type

A = da.Array


def returns(result: object, *expected: str) -> None:
    """result is a Dask array of dtype expected[0] ("float32"), or a tuple
    of them, one per expected; computing each gives that dtype too."""
    items = result if isinstance(result, tuple) else (result,)
    got = []
    for r in items:
        assert isinstance(r, da.Array), type(r)
        computed = np.asarray(r.compute())
        assert computed.dtype == r.dtype, (computed.dtype, r.dtype)
        got.append(str(r.dtype))
    assert tuple(got) == expected, (got, expected)


rng = np.random.default_rng(0)
x64 = rng.standard_normal((4, 6, 5))
xd64: A = da.from_array(x64, chunks=(2, 6, 5))
xd32: A = xd64.astype(np.float32)
dyd: A = da.ones_like(xd32)
flag: bool = x64.size > 0

returns(assert_type(fastnorm.mean_var(xd32), tuple[A, A]), "float32", "float32")
returns(assert_type(fastnorm.mean_var(xd64, axis=1, dtype=np.float32), tuple[A, A]),
        "float32", "float32")

returns(assert_type(fastnorm.layer_norm(xd32), A), "float32")
returns(assert_type(fastnorm.layer_norm(xd64, return_stats=True), tuple[A, A, A]),
        "float64", "float64", "float64")
returns(assert_type(fastnorm.layer_norm(xd32, return_stats=flag), A | tuple[A, A, A]),
        "float32", "float32", "float32")
returns(assert_type(fastnorm.rms_norm(xd32), A), "float32")
returns(assert_type(fastnorm.rms_norm(xd32, return_stats=True), tuple[A, A]),
        "float32", "float32")
returns(assert_type(fastnorm.rms_norm(xd64, return_stats=flag), A | tuple[A, A]),
        "float64", "float64")
returns(assert_type(fastnorm.batch_norm(xd32), A), "float32")
returns(assert_type(fastnorm.batch_norm(xd32, return_stats=True), tuple[A, A, A]),
        "float32", "float32", "float32")
returns(assert_type(fastnorm.batch_norm(xd64, running_mean=np.zeros(6),
                                        running_var=np.ones(6), return_stats=flag),
                    A | tuple[A, A, A]), "float64", "float64", "float64")
returns(assert_type(fastnorm.group_norm(xd32, 3), A), "float32")
returns(assert_type(fastnorm.group_norm(xd32, 3, return_stats=True), tuple[A, A, A]),
        "float32", "float32", "float32")
returns(assert_type(fastnorm.group_norm(xd64, 3, return_stats=flag), A | tuple[A, A, A]),
        "float64", "float64", "float64")
returns(assert_type(fastnorm.instance_norm(xd32), A), "float32")
returns(assert_type(fastnorm.instance_norm(xd32, return_stats=True), tuple[A, A, A]),
        "float32", "float32", "float32")
returns(assert_type(fastnorm.instance_norm(xd64, return_stats=flag), A | tuple[A, A, A]),
        "float64", "float64", "float64")

wd32: A = xd32.reshape(4, 30)
returns(assert_type(fastnorm.weight_norm(wd32), A), "float32")
returns(assert_type(fastnorm.weight_norm(wd32, return_norm=True), tuple[A, A]),
        "float32", "float32")
returns(assert_type(fastnorm.weight_norm(wd32, return_norm=flag), A | tuple[A, A]),
        "float32", "float32")
returns(assert_type(fastnorm.weight_standardize(wd32), A), "float32")

y, mean, rstd = fastnorm.layer_norm(xd32, return_stats=True)
returns(assert_type(fastnorm.layer_norm_backward(dyd, xd32, mean, rstd), tuple[A, A, A]),
        "float32", "float32", "float32")
# A NumPy dy with a Dask x: Dask results all the same.
returns(assert_type(fastnorm.layer_norm_backward(np.ones((4, 6, 5), np.float32), xd32,
                                                 mean, rstd), tuple[A, A, A]),
        "float32", "float32", "float32")
y, rstd = fastnorm.rms_norm(xd32, return_stats=True)
returns(assert_type(fastnorm.rms_norm_backward(dyd, xd32, rstd), tuple[A, A]),
        "float32", "float32")
y, mean, rstd = fastnorm.batch_norm(xd32, return_stats=True)
returns(assert_type(fastnorm.batch_norm_backward(dyd, xd32, mean, rstd), tuple[A, A, A]),
        "float32", "float32", "float32")
y, mean, rstd = fastnorm.group_norm(xd32, 3, return_stats=True)
returns(assert_type(fastnorm.group_norm_backward(dyd, xd32, mean, rstd, 3), tuple[A, A, A]),
        "float32", "float32", "float32")
print("uses_dask: every result as typed")
