"""A typed program using every public function of fastnorm on NumPy arrays.

tests/test_typing.py runs ``mypy --strict`` on it, which checks each
assert_type: the types fastnorm/__init__.pyi gives the results.  It also
runs it with Python, where ``returns`` checks the same results' classes and
dtypes, so the types cannot drift from what the functions return.  No Dask
here: this must type-check where Dask is not installed.
"""
import sys
from typing import Any

import numpy as np
import numpy.typing as npt

import fastnorm

if sys.version_info >= (3, 11):
    from typing import assert_type
else:
    from typing_extensions import assert_type

F16 = npt.NDArray[np.float16]
F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]


def returns(result: object, *expected: str) -> None:
    """result is an ndarray of dtype expected[0] ("float32"), or a NumPy
    scalar ("float32 scalar"), or a tuple of such, one per expected."""
    items = result if isinstance(result, tuple) else (result,)
    got = []
    for r in items:
        if isinstance(r, np.ndarray):
            got.append(str(r.dtype))
        elif isinstance(r, np.generic):
            got.append(f"{r.dtype} scalar")
        else:
            got.append(type(r).__name__)
    assert tuple(got) == expected, (got, expected)


rng = np.random.default_rng(0)
x64: F64 = rng.standard_normal((4, 6, 5))
x32: F32 = x64.astype(np.float32)
x16: F16 = x64.astype(np.float16)
xi: npt.NDArray[np.int32] = (x64 * 10).astype(np.int32)
dy32: F32 = np.ones_like(x32)
dy64: F64 = np.ones_like(x64)
g6: F64 = np.ones(6)
g5_32: F32 = np.ones(5, np.float32)
# A bool the checker cannot narrow to True or False.
flag: bool = x32.size > 0

# mean_var: scalars for the default full reduction, else arrays (or scalars
# when the result is 0-d).
returns(assert_type(fastnorm.mean_var(x32), tuple[np.float32, np.float32]),
        "float32 scalar", "float32 scalar")
returns(assert_type(fastnorm.mean_var(x64), tuple[np.float64, np.float64]),
        "float64 scalar", "float64 scalar")
returns(assert_type(fastnorm.mean_var(xi), tuple[np.float64, np.float64]),
        "float64 scalar", "float64 scalar")
returns(assert_type(fastnorm.mean_var(x32, axis=1),
                    tuple[F32 | np.float32, F32 | np.float32]), "float32", "float32")
returns(assert_type(fastnorm.mean_var(x64, axis=(0, 2), keepdims=flag),
                    tuple[F64 | np.float64, F64 | np.float64]), "float64", "float64")
returns(assert_type(fastnorm.mean_var(x16, dtype=np.float32), tuple[np.float32, np.float32]),
        "float32 scalar", "float32 scalar")
returns(assert_type(fastnorm.mean_var(x64, axis=-1, dtype=np.float32),
                    tuple[F32 | np.float32, F32 | np.float32]), "float32", "float32")

# layer_norm: y in x's dtype; mean and rstd float32 for float16/float32 y.
returns(assert_type(fastnorm.layer_norm(x32), F32), "float32")
returns(assert_type(fastnorm.layer_norm(x64, g5_32, axis=-1), F64), "float64")
returns(assert_type(fastnorm.layer_norm(x16), F16), "float16")
returns(assert_type(fastnorm.layer_norm(xi), F64), "float64")
returns(assert_type(fastnorm.layer_norm(x32, return_stats=True), tuple[F32, F32, F32]),
        "float32", "float32", "float32")
returns(assert_type(fastnorm.layer_norm(x16, return_stats=True), tuple[F16, F32, F32]),
        "float16", "float32", "float32")
returns(assert_type(fastnorm.layer_norm(x64, return_stats=True), tuple[F64, F64, F64]),
        "float64", "float64", "float64")
returns(assert_type(fastnorm.layer_norm(x32, return_stats=False), F32), "float32")
returns(assert_type(fastnorm.layer_norm(x32, return_stats=flag), F32 | tuple[F32, F32, F32]),
        "float32", "float32", "float32")
returns(assert_type(fastnorm.layer_norm(x64, return_stats=flag), F64 | tuple[F64, F64, F64]),
        "float64", "float64", "float64")
returns(assert_type(fastnorm.layer_norm(x64, dtype=np.float16, return_stats=True),
                    tuple[F16, F32, F32]), "float16", "float32", "float32")
returns(assert_type(fastnorm.layer_norm(x16, dtype=np.float64, return_stats=flag),
                    F64 | tuple[F64, F64, F64]), "float64", "float64", "float64")
# A dtype the checker cannot read (a string) gives some float dtype.
returns(assert_type(fastnorm.layer_norm(x64, dtype="float32"), npt.NDArray[np.floating[Any]]),
        "float32")

# rms_norm: y, or (y, rstd).
returns(assert_type(fastnorm.rms_norm(x32), F32), "float32")
returns(assert_type(fastnorm.rms_norm(x64), F64), "float64")
returns(assert_type(fastnorm.rms_norm(x32, return_stats=True), tuple[F32, F32]),
        "float32", "float32")
returns(assert_type(fastnorm.rms_norm(x64, return_stats=True), tuple[F64, F64]),
        "float64", "float64")
returns(assert_type(fastnorm.rms_norm(x32, return_stats=flag), F32 | tuple[F32, F32]),
        "float32", "float32")
returns(assert_type(fastnorm.rms_norm(x64, return_stats=flag), F64 | tuple[F64, F64]),
        "float64", "float64")

# batch_norm: statistics per channel (axis 1), running statistics updated.
running_mean, running_var = np.zeros(6), np.ones(6)
returns(assert_type(fastnorm.batch_norm(x32), F32), "float32")
returns(assert_type(fastnorm.batch_norm(x64, g6, g6, running_mean, running_var), F64),
        "float64")
returns(assert_type(fastnorm.batch_norm(x32, return_stats=True), tuple[F32, F32, F32]),
        "float32", "float32", "float32")
returns(assert_type(fastnorm.batch_norm(x64, return_stats=True), tuple[F64, F64, F64]),
        "float64", "float64", "float64")
returns(assert_type(fastnorm.batch_norm(x32, running_mean=running_mean,
                                        running_var=running_var, training=False,
                                        return_stats=flag), F32 | tuple[F32, F32, F32]),
        "float32", "float32", "float32")
returns(assert_type(fastnorm.batch_norm(x64, return_stats=flag), F64 | tuple[F64, F64, F64]),
        "float64", "float64", "float64")

# group_norm and instance_norm: statistics per sample and group.
returns(assert_type(fastnorm.group_norm(x32, 3), F32), "float32")
returns(assert_type(fastnorm.group_norm(x64, 3, g6, g6), F64), "float64")
returns(assert_type(fastnorm.group_norm(x32, 3, return_stats=True), tuple[F32, F32, F32]),
        "float32", "float32", "float32")
returns(assert_type(fastnorm.group_norm(x64, 3, return_stats=True), tuple[F64, F64, F64]),
        "float64", "float64", "float64")
returns(assert_type(fastnorm.group_norm(x32, 3, return_stats=flag), F32 | tuple[F32, F32, F32]),
        "float32", "float32", "float32")
returns(assert_type(fastnorm.group_norm(x64, 3, return_stats=flag), F64 | tuple[F64, F64, F64]),
        "float64", "float64", "float64")
returns(assert_type(fastnorm.instance_norm(x32), F32), "float32")
returns(assert_type(fastnorm.instance_norm(x64), F64), "float64")
returns(assert_type(fastnorm.instance_norm(x32, return_stats=True), tuple[F32, F32, F32]),
        "float32", "float32", "float32")
returns(assert_type(fastnorm.instance_norm(x64, return_stats=True), tuple[F64, F64, F64]),
        "float64", "float64", "float64")
returns(assert_type(fastnorm.instance_norm(x32, return_stats=flag),
                    F32 | tuple[F32, F32, F32]), "float32", "float32", "float32")
returns(assert_type(fastnorm.instance_norm(x64, return_stats=flag),
                    F64 | tuple[F64, F64, F64]), "float64", "float64", "float64")

# weight_norm: w, or (w, norm); weight_standardize: w.
w32: F32 = x32.reshape(4, 30)
w64: F64 = x64.reshape(4, 30)
returns(assert_type(fastnorm.weight_norm(w32), F32), "float32")
returns(assert_type(fastnorm.weight_norm(w64, np.ones(4)), F64), "float64")
returns(assert_type(fastnorm.weight_norm(w32, return_norm=True), tuple[F32, F32]),
        "float32", "float32")
returns(assert_type(fastnorm.weight_norm(w64, return_norm=True), tuple[F64, F64]),
        "float64", "float64")
returns(assert_type(fastnorm.weight_norm(w32, return_norm=flag), F32 | tuple[F32, F32]),
        "float32", "float32")
returns(assert_type(fastnorm.weight_norm(w64, return_norm=flag), F64 | tuple[F64, F64]),
        "float64", "float64")
returns(assert_type(fastnorm.weight_standardize(w32), F32), "float32")
returns(assert_type(fastnorm.weight_standardize(w64), F64), "float64")
returns(assert_type(fastnorm.weight_standardize(xi), F64), "float64")

# Gradients: dx in x's dtype; dgamma, dbeta in gamma's, else float32 for
# float16/float32 x.
y32, mean32, rstd32 = fastnorm.layer_norm(x32, return_stats=True)
y64, mean64, rstd64 = fastnorm.layer_norm(x64, return_stats=True)
returns(assert_type(fastnorm.layer_norm_backward(dy32, x32, mean32, rstd32),
                    tuple[F32, F32, F32]), "float32", "float32", "float32")
returns(assert_type(fastnorm.layer_norm_backward(dy64, x64, mean64, rstd64),
                    tuple[F64, F64, F64]), "float64", "float64", "float64")
returns(assert_type(fastnorm.layer_norm_backward(dy64, x64, mean64, rstd64, g5_32),
                    tuple[F64, F32, F32]), "float64", "float32", "float32")

y32, rstd32 = fastnorm.rms_norm(x32, return_stats=True)
y64, rstd64 = fastnorm.rms_norm(x64, return_stats=True)
returns(assert_type(fastnorm.rms_norm_backward(dy32, x32, rstd32), tuple[F32, F32]),
        "float32", "float32")
returns(assert_type(fastnorm.rms_norm_backward(dy64, x64, rstd64), tuple[F64, F64]),
        "float64", "float64")
returns(assert_type(fastnorm.rms_norm_backward(dy32, x32, rstd32, g5_32), tuple[F32, F32]),
        "float32", "float32")

y32, mean32, rstd32 = fastnorm.batch_norm(x32, return_stats=True)
y64, mean64, rstd64 = fastnorm.batch_norm(x64, return_stats=True)
returns(assert_type(fastnorm.batch_norm_backward(dy32, x32, mean32, rstd32),
                    tuple[F32, F32, F32]), "float32", "float32", "float32")
returns(assert_type(fastnorm.batch_norm_backward(dy64, x64, mean64, rstd64, training=flag),
                    tuple[F64, F64, F64]), "float64", "float64", "float64")
returns(assert_type(fastnorm.batch_norm_backward(dy32, x32, mean32, rstd32, g6),
                    tuple[F32, F64, F64]), "float32", "float64", "float64")

y32, mean32, rstd32 = fastnorm.group_norm(x32, 3, return_stats=True)
y64, mean64, rstd64 = fastnorm.group_norm(x64, 3, return_stats=True)
returns(assert_type(fastnorm.group_norm_backward(dy32, x32, mean32, rstd32, 3),
                    tuple[F32, F32, F32]), "float32", "float32", "float32")
returns(assert_type(fastnorm.group_norm_backward(dy64, x64, mean64, rstd64, 3),
                    tuple[F64, F64, F64]), "float64", "float64", "float64")

# Threads, configuration and routes.
n = assert_type(fastnorm.get_num_threads(), int)
assert isinstance(n, int) and n >= 1
fastnorm.set_num_threads(n)
fastnorm.set_num_threads(None)
fastnorm.show_config()
route = assert_type(fastnorm.explain(fastnorm.layer_norm, x32), dict[str, Any])
assert isinstance(route, dict) and "pattern" in route
version = assert_type(fastnorm.__version__, str)
assert isinstance(version, str)
print("uses_numpy: every result as typed")
