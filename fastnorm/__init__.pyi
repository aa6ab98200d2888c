# Types of the public functions.
#
# Result dtypes follow the input, as NumPy's reductions do: float16, float32
# and float64 arrays keep their dtype, integer and bool arrays give float64,
# and dtype= (where a function has it) overrides both.  Statistics
# (return_stats=True, return_norm=True, parameter gradients without a float
# gamma) are float64 for float64 results and float32 for float16 and float32
# ones.  So each function's overloads come in this order: a Dask x; float16
# or float32 x; float64 (or integer, bool) x; dtype= given; any array-like,
# whose dtype the checker does not know.  Within each, return_stats False,
# True, then a plain bool (either shape).
#
# A Dask array as x gives Dask arrays.  Dask is optional, so it is matched by
# a protocol rather than imported: without Dask installed every NumPy
# overload still resolves.  (A Dask array as another argument with a NumPy x
# also gives Dask arrays at run time; these types follow x.)
#
# NumPy's precision types (float16's _16Bit derives from float64's _64Bit)
# make mypy report overlaps between the overloads for float16/float32 and
# those for float64, which no array matches both of; so those reports are
# switched off for this file.
# mypy: disable-error-code="overload-overlap"
from typing import Any, Callable, Literal, Protocol, SupportsIndex, TypeAlias, TypeVar, overload

import numpy as np
from numpy.typing import ArrayLike, DTypeLike, NDArray

__version__: str

class _DaskArray(Protocol):
    # Members a dask.array.Array has and an ndarray (or an xarray object) lacks.
    def __dask_graph__(self) -> Any: ...
    @property
    def numblocks(self) -> Any: ...
    @property
    def chunks(self) -> Any: ...

# A Dask x: results of its class (dask.array.Array).
_D = TypeVar("_D", bound=_DaskArray)
# Dtypes whose statistics are float32.
_H = TypeVar("_H", bound=np.float16 | np.float32)
# Any dtype the kernels compute in.
_F = TypeVar("_F", bound=np.float16 | np.float32 | np.float64)
# A float gamma's dtype, which its gradients take.
_G = TypeVar("_G", bound=np.float16 | np.float32 | np.float64)
_S = TypeVar("_S", bound=np.generic)

_DType: TypeAlias = type[_S] | np.dtype[_S]
# Arrays whose results are float64 by default.
_ToF64: TypeAlias = NDArray[np.float64] | NDArray[np.integer[Any]] | NDArray[np.bool_]
_Float: TypeAlias = NDArray[np.floating[Any]]
_F32: TypeAlias = NDArray[np.float32]
_F64: TypeAlias = NDArray[np.float64]
_Axis: TypeAlias = SupportsIndex | tuple[SupportsIndex, ...] | None
_Param: TypeAlias = ArrayLike | None
_Out: TypeAlias = _Float | tuple[_Float | None, ...] | None
_Running: TypeAlias = _Float | None
_NanPolicy: TypeAlias = Literal["propagate", "omit", "raise"]

# --------------------------------------------------------------------------
# mean_var: NumPy scalars when the result is 0-d (axis=None, the default,
# without keepdims or out=; also a 1-d x with axis=0), else arrays.

@overload
def mean_var(
    x: _D, axis: _Axis = None, *, ddof: float = 0, keepdims: bool = False,
    dtype: DTypeLike | None = None, out: None = None, where: ArrayLike | None = None,
    nan_policy: _NanPolicy = "propagate",
) -> tuple[_D, _D]: ...
@overload
def mean_var(
    x: NDArray[_F], axis: None = None, *, ddof: float = 0, keepdims: Literal[False] = False,
    dtype: None = None, out: None = None, where: ArrayLike | None = None,
    nan_policy: _NanPolicy = "propagate",
) -> tuple[_F, _F]: ...
@overload
def mean_var(
    x: NDArray[_F], axis: _Axis = None, *, ddof: float = 0, keepdims: bool = False,
    dtype: None = None, out: tuple[_Float | None, _Float | None] | None = None,
    where: ArrayLike | None = None,
    nan_policy: _NanPolicy = "propagate",
) -> tuple[NDArray[_F] | _F, NDArray[_F] | _F]: ...
@overload
def mean_var(
    x: _ToF64, axis: None = None, *, ddof: float = 0, keepdims: Literal[False] = False,
    dtype: None = None, out: None = None, where: ArrayLike | None = None,
    nan_policy: _NanPolicy = "propagate",
) -> tuple[np.float64, np.float64]: ...
@overload
def mean_var(
    x: _ToF64, axis: _Axis = None, *, ddof: float = 0, keepdims: bool = False,
    dtype: None = None, out: tuple[_Float | None, _Float | None] | None = None,
    where: ArrayLike | None = None,
    nan_policy: _NanPolicy = "propagate",
) -> tuple[_F64 | np.float64, _F64 | np.float64]: ...
@overload
def mean_var(
    x: ArrayLike, axis: None = None, *, ddof: float = 0, keepdims: Literal[False] = False,
    dtype: _DType[_F], out: None = None, where: ArrayLike | None = None,
    nan_policy: _NanPolicy = "propagate",
) -> tuple[_F, _F]: ...
@overload
def mean_var(
    x: ArrayLike, axis: _Axis = None, *, ddof: float = 0, keepdims: bool = False,
    dtype: _DType[_F], out: tuple[_Float | None, _Float | None] | None = None,
    where: ArrayLike | None = None,
    nan_policy: _NanPolicy = "propagate",
) -> tuple[NDArray[_F] | _F, NDArray[_F] | _F]: ...
@overload
def mean_var(
    x: ArrayLike, axis: _Axis = None, *, ddof: float = 0, keepdims: bool = False,
    dtype: DTypeLike | None = None, out: tuple[_Float | None, _Float | None] | None = None,
    where: ArrayLike | None = None,
    nan_policy: _NanPolicy = "propagate",
) -> tuple[_Float | np.floating[Any], _Float | np.floating[Any]]: ...

# --------------------------------------------------------------------------
# zscore: the scores in a's float dtype (float64 for integers) or dtype=.

@overload
def zscore(
    a: _D, axis: _Axis = 0, *, ddof: float = 0, nan_policy: _NanPolicy = "propagate",
    out: None = None, dtype: DTypeLike | None = None,
) -> _D: ...
@overload
def zscore(
    a: NDArray[_F], axis: _Axis = 0, *, ddof: float = 0, nan_policy: _NanPolicy = "propagate",
    out: NDArray[_F] | None = None, dtype: None = None,
) -> NDArray[_F]: ...
@overload
def zscore(
    a: _ToF64, axis: _Axis = 0, *, ddof: float = 0, nan_policy: _NanPolicy = "propagate",
    out: _F64 | None = None, dtype: None = None,
) -> _F64: ...
@overload
def zscore(
    a: ArrayLike, axis: _Axis = 0, *, ddof: float = 0, nan_policy: _NanPolicy = "propagate",
    out: NDArray[_F] | None = None, dtype: _DType[_F],
) -> NDArray[_F]: ...
@overload
def zscore(
    a: ArrayLike, axis: _Axis = 0, *, ddof: float = 0, nan_policy: _NanPolicy = "propagate",
    out: _Float | None = None, dtype: DTypeLike | None = None,
) -> _Float: ...

# --------------------------------------------------------------------------
# Moments: a streaming accumulator; statistics are float64 of the kept shape.

class Moments:
    def __init__(self, axis: _Axis = None, *, nan_policy: _NanPolicy = "propagate") -> None: ...
    def update(self, x: ArrayLike | _DaskArray, *, where: ArrayLike | None = None) -> Moments: ...
    def merge(self, other: Moments) -> Moments: ...
    def __add__(self, other: Moments) -> Moments: ...
    def copy(self) -> Moments: ...
    @property
    def axis(self) -> int | tuple[int, ...] | None: ...
    @property
    def nan_policy(self) -> str: ...
    @property
    def count(self) -> _F64: ...
    @property
    def mean(self) -> _F64: ...
    def var(self, ddof: float = 0) -> _F64: ...
    def std(self, ddof: float = 0) -> _F64: ...
    @overload
    def normalize(self, x: NDArray[_F], *, eps: float = 0.0,
                  out: NDArray[_F] | None = None) -> NDArray[_F]: ...
    @overload
    def normalize(self, x: ArrayLike, *, eps: float = 0.0,
                  out: _Float | None = None) -> _Float: ...
    def __eq__(self, other: object) -> bool: ...

# --------------------------------------------------------------------------
# layer_norm: y, or (y, mean, rstd)

@overload
def layer_norm(
    x: _D, gamma: _Param = None, beta: _Param = None, *, axis: _Axis = -1,
    eps: float = 1e-5, out: None = None, dtype: DTypeLike | None = None,
    return_stats: Literal[False] = False, where: ArrayLike | None = None,
    nan_policy: _NanPolicy = "propagate",
) -> _D: ...
@overload
def layer_norm(
    x: _D, gamma: _Param = None, beta: _Param = None, *, axis: _Axis = -1,
    eps: float = 1e-5, out: None = None, dtype: DTypeLike | None = None,
    return_stats: Literal[True], where: ArrayLike | None = None,
    nan_policy: _NanPolicy = "propagate",
) -> tuple[_D, _D, _D]: ...
@overload
def layer_norm(
    x: _D, gamma: _Param = None, beta: _Param = None, *, axis: _Axis = -1,
    eps: float = 1e-5, out: None = None, dtype: DTypeLike | None = None,
    return_stats: bool, where: ArrayLike | None = None,
    nan_policy: _NanPolicy = "propagate",
) -> _D | tuple[_D, _D, _D]: ...
@overload
def layer_norm(
    x: NDArray[_H], gamma: _Param = None, beta: _Param = None, *, axis: _Axis = -1,
    eps: float = 1e-5, out: _Out = None, dtype: None = None,
    return_stats: Literal[False] = False, where: ArrayLike | None = None,
    nan_policy: _NanPolicy = "propagate",
) -> NDArray[_H]: ...
@overload
def layer_norm(
    x: NDArray[_H], gamma: _Param = None, beta: _Param = None, *, axis: _Axis = -1,
    eps: float = 1e-5, out: _Out = None, dtype: None = None,
    return_stats: Literal[True], where: ArrayLike | None = None,
    nan_policy: _NanPolicy = "propagate",
) -> tuple[NDArray[_H], _F32, _F32]: ...
@overload
def layer_norm(
    x: NDArray[_H], gamma: _Param = None, beta: _Param = None, *, axis: _Axis = -1,
    eps: float = 1e-5, out: _Out = None, dtype: None = None,
    return_stats: bool, where: ArrayLike | None = None,
    nan_policy: _NanPolicy = "propagate",
) -> NDArray[_H] | tuple[NDArray[_H], _F32, _F32]: ...
@overload
def layer_norm(
    x: _ToF64, gamma: _Param = None, beta: _Param = None, *, axis: _Axis = -1,
    eps: float = 1e-5, out: _Out = None, dtype: None = None,
    return_stats: Literal[False] = False, where: ArrayLike | None = None,
    nan_policy: _NanPolicy = "propagate",
) -> _F64: ...
@overload
def layer_norm(
    x: _ToF64, gamma: _Param = None, beta: _Param = None, *, axis: _Axis = -1,
    eps: float = 1e-5, out: _Out = None, dtype: None = None,
    return_stats: Literal[True], where: ArrayLike | None = None,
    nan_policy: _NanPolicy = "propagate",
) -> tuple[_F64, _F64, _F64]: ...
@overload
def layer_norm(
    x: _ToF64, gamma: _Param = None, beta: _Param = None, *, axis: _Axis = -1,
    eps: float = 1e-5, out: _Out = None, dtype: None = None,
    return_stats: bool, where: ArrayLike | None = None,
    nan_policy: _NanPolicy = "propagate",
) -> _F64 | tuple[_F64, _F64, _F64]: ...
@overload
def layer_norm(
    x: ArrayLike, gamma: _Param = None, beta: _Param = None, *, axis: _Axis = -1,
    eps: float = 1e-5, out: _Out = None, dtype: _DType[_H],
    return_stats: Literal[False] = False, where: ArrayLike | None = None,
    nan_policy: _NanPolicy = "propagate",
) -> NDArray[_H]: ...
@overload
def layer_norm(
    x: ArrayLike, gamma: _Param = None, beta: _Param = None, *, axis: _Axis = -1,
    eps: float = 1e-5, out: _Out = None, dtype: _DType[_H],
    return_stats: Literal[True], where: ArrayLike | None = None,
    nan_policy: _NanPolicy = "propagate",
) -> tuple[NDArray[_H], _F32, _F32]: ...
@overload
def layer_norm(
    x: ArrayLike, gamma: _Param = None, beta: _Param = None, *, axis: _Axis = -1,
    eps: float = 1e-5, out: _Out = None, dtype: _DType[_H],
    return_stats: bool, where: ArrayLike | None = None,
    nan_policy: _NanPolicy = "propagate",
) -> NDArray[_H] | tuple[NDArray[_H], _F32, _F32]: ...
@overload
def layer_norm(
    x: ArrayLike, gamma: _Param = None, beta: _Param = None, *, axis: _Axis = -1,
    eps: float = 1e-5, out: _Out = None, dtype: _DType[np.float64],
    return_stats: Literal[False] = False, where: ArrayLike | None = None,
    nan_policy: _NanPolicy = "propagate",
) -> _F64: ...
@overload
def layer_norm(
    x: ArrayLike, gamma: _Param = None, beta: _Param = None, *, axis: _Axis = -1,
    eps: float = 1e-5, out: _Out = None, dtype: _DType[np.float64],
    return_stats: Literal[True], where: ArrayLike | None = None,
    nan_policy: _NanPolicy = "propagate",
) -> tuple[_F64, _F64, _F64]: ...
@overload
def layer_norm(
    x: ArrayLike, gamma: _Param = None, beta: _Param = None, *, axis: _Axis = -1,
    eps: float = 1e-5, out: _Out = None, dtype: _DType[np.float64],
    return_stats: bool, where: ArrayLike | None = None,
    nan_policy: _NanPolicy = "propagate",
) -> _F64 | tuple[_F64, _F64, _F64]: ...
@overload
def layer_norm(
    x: ArrayLike, gamma: _Param = None, beta: _Param = None, *, axis: _Axis = -1,
    eps: float = 1e-5, out: _Out = None, dtype: DTypeLike | None = None,
    return_stats: Literal[False] = False, where: ArrayLike | None = None,
    nan_policy: _NanPolicy = "propagate",
) -> _Float: ...
@overload
def layer_norm(
    x: ArrayLike, gamma: _Param = None, beta: _Param = None, *, axis: _Axis = -1,
    eps: float = 1e-5, out: _Out = None, dtype: DTypeLike | None = None,
    return_stats: Literal[True], where: ArrayLike | None = None,
    nan_policy: _NanPolicy = "propagate",
) -> tuple[_Float, _Float, _Float]: ...
@overload
def layer_norm(
    x: ArrayLike, gamma: _Param = None, beta: _Param = None, *, axis: _Axis = -1,
    eps: float = 1e-5, out: _Out = None, dtype: DTypeLike | None = None,
    return_stats: bool, where: ArrayLike | None = None,
    nan_policy: _NanPolicy = "propagate",
) -> _Float | tuple[_Float, _Float, _Float]: ...

# --------------------------------------------------------------------------
# rms_norm: y, or (y, rstd)

@overload
def rms_norm(
    x: _D, gamma: _Param = None, *, axis: _Axis = -1, eps: float = 1e-5, out: None = None,
    dtype: DTypeLike | None = None, return_stats: Literal[False] = False,
    where: ArrayLike | None = None,
    nan_policy: _NanPolicy = "propagate",
) -> _D: ...
@overload
def rms_norm(
    x: _D, gamma: _Param = None, *, axis: _Axis = -1, eps: float = 1e-5, out: None = None,
    dtype: DTypeLike | None = None, return_stats: Literal[True],
    where: ArrayLike | None = None,
    nan_policy: _NanPolicy = "propagate",
) -> tuple[_D, _D]: ...
@overload
def rms_norm(
    x: _D, gamma: _Param = None, *, axis: _Axis = -1, eps: float = 1e-5, out: None = None,
    dtype: DTypeLike | None = None, return_stats: bool,
    where: ArrayLike | None = None,
    nan_policy: _NanPolicy = "propagate",
) -> _D | tuple[_D, _D]: ...
@overload
def rms_norm(
    x: NDArray[_H], gamma: _Param = None, *, axis: _Axis = -1, eps: float = 1e-5,
    out: _Out = None, dtype: None = None, return_stats: Literal[False] = False,
    where: ArrayLike | None = None,
    nan_policy: _NanPolicy = "propagate",
) -> NDArray[_H]: ...
@overload
def rms_norm(
    x: NDArray[_H], gamma: _Param = None, *, axis: _Axis = -1, eps: float = 1e-5,
    out: _Out = None, dtype: None = None, return_stats: Literal[True],
    where: ArrayLike | None = None,
    nan_policy: _NanPolicy = "propagate",
) -> tuple[NDArray[_H], _F32]: ...
@overload
def rms_norm(
    x: NDArray[_H], gamma: _Param = None, *, axis: _Axis = -1, eps: float = 1e-5,
    out: _Out = None, dtype: None = None, return_stats: bool,
    where: ArrayLike | None = None,
    nan_policy: _NanPolicy = "propagate",
) -> NDArray[_H] | tuple[NDArray[_H], _F32]: ...
@overload
def rms_norm(
    x: _ToF64, gamma: _Param = None, *, axis: _Axis = -1, eps: float = 1e-5,
    out: _Out = None, dtype: None = None, return_stats: Literal[False] = False,
    where: ArrayLike | None = None,
    nan_policy: _NanPolicy = "propagate",
) -> _F64: ...
@overload
def rms_norm(
    x: _ToF64, gamma: _Param = None, *, axis: _Axis = -1, eps: float = 1e-5,
    out: _Out = None, dtype: None = None, return_stats: Literal[True],
    where: ArrayLike | None = None,
    nan_policy: _NanPolicy = "propagate",
) -> tuple[_F64, _F64]: ...
@overload
def rms_norm(
    x: _ToF64, gamma: _Param = None, *, axis: _Axis = -1, eps: float = 1e-5,
    out: _Out = None, dtype: None = None, return_stats: bool,
    where: ArrayLike | None = None,
    nan_policy: _NanPolicy = "propagate",
) -> _F64 | tuple[_F64, _F64]: ...
@overload
def rms_norm(
    x: ArrayLike, gamma: _Param = None, *, axis: _Axis = -1, eps: float = 1e-5,
    out: _Out = None, dtype: _DType[_H], return_stats: Literal[False] = False,
    where: ArrayLike | None = None,
    nan_policy: _NanPolicy = "propagate",
) -> NDArray[_H]: ...
@overload
def rms_norm(
    x: ArrayLike, gamma: _Param = None, *, axis: _Axis = -1, eps: float = 1e-5,
    out: _Out = None, dtype: _DType[_H], return_stats: Literal[True],
    where: ArrayLike | None = None,
    nan_policy: _NanPolicy = "propagate",
) -> tuple[NDArray[_H], _F32]: ...
@overload
def rms_norm(
    x: ArrayLike, gamma: _Param = None, *, axis: _Axis = -1, eps: float = 1e-5,
    out: _Out = None, dtype: _DType[_H], return_stats: bool,
    where: ArrayLike | None = None,
    nan_policy: _NanPolicy = "propagate",
) -> NDArray[_H] | tuple[NDArray[_H], _F32]: ...
@overload
def rms_norm(
    x: ArrayLike, gamma: _Param = None, *, axis: _Axis = -1, eps: float = 1e-5,
    out: _Out = None, dtype: _DType[np.float64], return_stats: Literal[False] = False,
    where: ArrayLike | None = None,
    nan_policy: _NanPolicy = "propagate",
) -> _F64: ...
@overload
def rms_norm(
    x: ArrayLike, gamma: _Param = None, *, axis: _Axis = -1, eps: float = 1e-5,
    out: _Out = None, dtype: _DType[np.float64], return_stats: Literal[True],
    where: ArrayLike | None = None,
    nan_policy: _NanPolicy = "propagate",
) -> tuple[_F64, _F64]: ...
@overload
def rms_norm(
    x: ArrayLike, gamma: _Param = None, *, axis: _Axis = -1, eps: float = 1e-5,
    out: _Out = None, dtype: _DType[np.float64], return_stats: bool,
    where: ArrayLike | None = None,
    nan_policy: _NanPolicy = "propagate",
) -> _F64 | tuple[_F64, _F64]: ...
@overload
def rms_norm(
    x: ArrayLike, gamma: _Param = None, *, axis: _Axis = -1, eps: float = 1e-5,
    out: _Out = None, dtype: DTypeLike | None = None, return_stats: Literal[False] = False,
    where: ArrayLike | None = None,
    nan_policy: _NanPolicy = "propagate",
) -> _Float: ...
@overload
def rms_norm(
    x: ArrayLike, gamma: _Param = None, *, axis: _Axis = -1, eps: float = 1e-5,
    out: _Out = None, dtype: DTypeLike | None = None, return_stats: Literal[True],
    where: ArrayLike | None = None,
    nan_policy: _NanPolicy = "propagate",
) -> tuple[_Float, _Float]: ...
@overload
def rms_norm(
    x: ArrayLike, gamma: _Param = None, *, axis: _Axis = -1, eps: float = 1e-5,
    out: _Out = None, dtype: DTypeLike | None = None, return_stats: bool,
    where: ArrayLike | None = None,
    nan_policy: _NanPolicy = "propagate",
) -> _Float | tuple[_Float, _Float]: ...

# --------------------------------------------------------------------------
# batch_norm: y, or (y, mean, rstd)

@overload
def batch_norm(
    x: _D, gamma: _Param = None, beta: _Param = None, running_mean: _Running = None,
    running_var: _Running = None, *, training: bool = True, momentum: float = 0.1,
    eps: float = 1e-5, axis: _Axis = None, out: None = None, dtype: DTypeLike | None = None,
    return_stats: Literal[False] = False, where: ArrayLike | None = None,
    nan_policy: _NanPolicy = "propagate",
) -> _D: ...
@overload
def batch_norm(
    x: _D, gamma: _Param = None, beta: _Param = None, running_mean: _Running = None,
    running_var: _Running = None, *, training: bool = True, momentum: float = 0.1,
    eps: float = 1e-5, axis: _Axis = None, out: None = None, dtype: DTypeLike | None = None,
    return_stats: Literal[True], where: ArrayLike | None = None,
    nan_policy: _NanPolicy = "propagate",
) -> tuple[_D, _D, _D]: ...
@overload
def batch_norm(
    x: _D, gamma: _Param = None, beta: _Param = None, running_mean: _Running = None,
    running_var: _Running = None, *, training: bool = True, momentum: float = 0.1,
    eps: float = 1e-5, axis: _Axis = None, out: None = None, dtype: DTypeLike | None = None,
    return_stats: bool, where: ArrayLike | None = None,
    nan_policy: _NanPolicy = "propagate",
) -> _D | tuple[_D, _D, _D]: ...
@overload
def batch_norm(
    x: NDArray[_H], gamma: _Param = None, beta: _Param = None, running_mean: _Running = None,
    running_var: _Running = None, *, training: bool = True, momentum: float = 0.1,
    eps: float = 1e-5, axis: _Axis = None, out: _Out = None, dtype: None = None,
    return_stats: Literal[False] = False, where: ArrayLike | None = None,
    nan_policy: _NanPolicy = "propagate",
) -> NDArray[_H]: ...
@overload
def batch_norm(
    x: NDArray[_H], gamma: _Param = None, beta: _Param = None, running_mean: _Running = None,
    running_var: _Running = None, *, training: bool = True, momentum: float = 0.1,
    eps: float = 1e-5, axis: _Axis = None, out: _Out = None, dtype: None = None,
    return_stats: Literal[True], where: ArrayLike | None = None,
    nan_policy: _NanPolicy = "propagate",
) -> tuple[NDArray[_H], _F32, _F32]: ...
@overload
def batch_norm(
    x: NDArray[_H], gamma: _Param = None, beta: _Param = None, running_mean: _Running = None,
    running_var: _Running = None, *, training: bool = True, momentum: float = 0.1,
    eps: float = 1e-5, axis: _Axis = None, out: _Out = None, dtype: None = None,
    return_stats: bool, where: ArrayLike | None = None,
    nan_policy: _NanPolicy = "propagate",
) -> NDArray[_H] | tuple[NDArray[_H], _F32, _F32]: ...
@overload
def batch_norm(
    x: _ToF64, gamma: _Param = None, beta: _Param = None, running_mean: _Running = None,
    running_var: _Running = None, *, training: bool = True, momentum: float = 0.1,
    eps: float = 1e-5, axis: _Axis = None, out: _Out = None, dtype: None = None,
    return_stats: Literal[False] = False, where: ArrayLike | None = None,
    nan_policy: _NanPolicy = "propagate",
) -> _F64: ...
@overload
def batch_norm(
    x: _ToF64, gamma: _Param = None, beta: _Param = None, running_mean: _Running = None,
    running_var: _Running = None, *, training: bool = True, momentum: float = 0.1,
    eps: float = 1e-5, axis: _Axis = None, out: _Out = None, dtype: None = None,
    return_stats: Literal[True], where: ArrayLike | None = None,
    nan_policy: _NanPolicy = "propagate",
) -> tuple[_F64, _F64, _F64]: ...
@overload
def batch_norm(
    x: _ToF64, gamma: _Param = None, beta: _Param = None, running_mean: _Running = None,
    running_var: _Running = None, *, training: bool = True, momentum: float = 0.1,
    eps: float = 1e-5, axis: _Axis = None, out: _Out = None, dtype: None = None,
    return_stats: bool, where: ArrayLike | None = None,
    nan_policy: _NanPolicy = "propagate",
) -> _F64 | tuple[_F64, _F64, _F64]: ...
@overload
def batch_norm(
    x: ArrayLike, gamma: _Param = None, beta: _Param = None, running_mean: _Running = None,
    running_var: _Running = None, *, training: bool = True, momentum: float = 0.1,
    eps: float = 1e-5, axis: _Axis = None, out: _Out = None, dtype: _DType[_H],
    return_stats: Literal[False] = False, where: ArrayLike | None = None,
    nan_policy: _NanPolicy = "propagate",
) -> NDArray[_H]: ...
@overload
def batch_norm(
    x: ArrayLike, gamma: _Param = None, beta: _Param = None, running_mean: _Running = None,
    running_var: _Running = None, *, training: bool = True, momentum: float = 0.1,
    eps: float = 1e-5, axis: _Axis = None, out: _Out = None, dtype: _DType[_H],
    return_stats: Literal[True], where: ArrayLike | None = None,
    nan_policy: _NanPolicy = "propagate",
) -> tuple[NDArray[_H], _F32, _F32]: ...
@overload
def batch_norm(
    x: ArrayLike, gamma: _Param = None, beta: _Param = None, running_mean: _Running = None,
    running_var: _Running = None, *, training: bool = True, momentum: float = 0.1,
    eps: float = 1e-5, axis: _Axis = None, out: _Out = None, dtype: _DType[_H],
    return_stats: bool, where: ArrayLike | None = None,
    nan_policy: _NanPolicy = "propagate",
) -> NDArray[_H] | tuple[NDArray[_H], _F32, _F32]: ...
@overload
def batch_norm(
    x: ArrayLike, gamma: _Param = None, beta: _Param = None, running_mean: _Running = None,
    running_var: _Running = None, *, training: bool = True, momentum: float = 0.1,
    eps: float = 1e-5, axis: _Axis = None, out: _Out = None, dtype: _DType[np.float64],
    return_stats: Literal[False] = False, where: ArrayLike | None = None,
    nan_policy: _NanPolicy = "propagate",
) -> _F64: ...
@overload
def batch_norm(
    x: ArrayLike, gamma: _Param = None, beta: _Param = None, running_mean: _Running = None,
    running_var: _Running = None, *, training: bool = True, momentum: float = 0.1,
    eps: float = 1e-5, axis: _Axis = None, out: _Out = None, dtype: _DType[np.float64],
    return_stats: Literal[True], where: ArrayLike | None = None,
    nan_policy: _NanPolicy = "propagate",
) -> tuple[_F64, _F64, _F64]: ...
@overload
def batch_norm(
    x: ArrayLike, gamma: _Param = None, beta: _Param = None, running_mean: _Running = None,
    running_var: _Running = None, *, training: bool = True, momentum: float = 0.1,
    eps: float = 1e-5, axis: _Axis = None, out: _Out = None, dtype: _DType[np.float64],
    return_stats: bool, where: ArrayLike | None = None,
    nan_policy: _NanPolicy = "propagate",
) -> _F64 | tuple[_F64, _F64, _F64]: ...
@overload
def batch_norm(
    x: ArrayLike, gamma: _Param = None, beta: _Param = None, running_mean: _Running = None,
    running_var: _Running = None, *, training: bool = True, momentum: float = 0.1,
    eps: float = 1e-5, axis: _Axis = None, out: _Out = None, dtype: DTypeLike | None = None,
    return_stats: Literal[False] = False, where: ArrayLike | None = None,
    nan_policy: _NanPolicy = "propagate",
) -> _Float: ...
@overload
def batch_norm(
    x: ArrayLike, gamma: _Param = None, beta: _Param = None, running_mean: _Running = None,
    running_var: _Running = None, *, training: bool = True, momentum: float = 0.1,
    eps: float = 1e-5, axis: _Axis = None, out: _Out = None, dtype: DTypeLike | None = None,
    return_stats: Literal[True], where: ArrayLike | None = None,
    nan_policy: _NanPolicy = "propagate",
) -> tuple[_Float, _Float, _Float]: ...
@overload
def batch_norm(
    x: ArrayLike, gamma: _Param = None, beta: _Param = None, running_mean: _Running = None,
    running_var: _Running = None, *, training: bool = True, momentum: float = 0.1,
    eps: float = 1e-5, axis: _Axis = None, out: _Out = None, dtype: DTypeLike | None = None,
    return_stats: bool, where: ArrayLike | None = None,
    nan_policy: _NanPolicy = "propagate",
) -> _Float | tuple[_Float, _Float, _Float]: ...

# --------------------------------------------------------------------------
# group_norm: y, or (y, mean, rstd)

@overload
def group_norm(
    x: _D, num_groups: SupportsIndex, gamma: _Param = None, beta: _Param = None, *,
    channel_axis: SupportsIndex = 1, eps: float = 1e-5, out: None = None,
    dtype: DTypeLike | None = None, return_stats: Literal[False] = False,
) -> _D: ...
@overload
def group_norm(
    x: _D, num_groups: SupportsIndex, gamma: _Param = None, beta: _Param = None, *,
    channel_axis: SupportsIndex = 1, eps: float = 1e-5, out: None = None,
    dtype: DTypeLike | None = None, return_stats: Literal[True],
) -> tuple[_D, _D, _D]: ...
@overload
def group_norm(
    x: _D, num_groups: SupportsIndex, gamma: _Param = None, beta: _Param = None, *,
    channel_axis: SupportsIndex = 1, eps: float = 1e-5, out: None = None,
    dtype: DTypeLike | None = None, return_stats: bool,
) -> _D | tuple[_D, _D, _D]: ...
@overload
def group_norm(
    x: NDArray[_H], num_groups: SupportsIndex, gamma: _Param = None, beta: _Param = None, *,
    channel_axis: SupportsIndex = 1, eps: float = 1e-5, out: _Out = None,
    dtype: None = None, return_stats: Literal[False] = False,
) -> NDArray[_H]: ...
@overload
def group_norm(
    x: NDArray[_H], num_groups: SupportsIndex, gamma: _Param = None, beta: _Param = None, *,
    channel_axis: SupportsIndex = 1, eps: float = 1e-5, out: _Out = None,
    dtype: None = None, return_stats: Literal[True],
) -> tuple[NDArray[_H], _F32, _F32]: ...
@overload
def group_norm(
    x: NDArray[_H], num_groups: SupportsIndex, gamma: _Param = None, beta: _Param = None, *,
    channel_axis: SupportsIndex = 1, eps: float = 1e-5, out: _Out = None,
    dtype: None = None, return_stats: bool,
) -> NDArray[_H] | tuple[NDArray[_H], _F32, _F32]: ...
@overload
def group_norm(
    x: _ToF64, num_groups: SupportsIndex, gamma: _Param = None, beta: _Param = None, *,
    channel_axis: SupportsIndex = 1, eps: float = 1e-5, out: _Out = None,
    dtype: None = None, return_stats: Literal[False] = False,
) -> _F64: ...
@overload
def group_norm(
    x: _ToF64, num_groups: SupportsIndex, gamma: _Param = None, beta: _Param = None, *,
    channel_axis: SupportsIndex = 1, eps: float = 1e-5, out: _Out = None,
    dtype: None = None, return_stats: Literal[True],
) -> tuple[_F64, _F64, _F64]: ...
@overload
def group_norm(
    x: _ToF64, num_groups: SupportsIndex, gamma: _Param = None, beta: _Param = None, *,
    channel_axis: SupportsIndex = 1, eps: float = 1e-5, out: _Out = None,
    dtype: None = None, return_stats: bool,
) -> _F64 | tuple[_F64, _F64, _F64]: ...
@overload
def group_norm(
    x: ArrayLike, num_groups: SupportsIndex, gamma: _Param = None, beta: _Param = None, *,
    channel_axis: SupportsIndex = 1, eps: float = 1e-5, out: _Out = None,
    dtype: _DType[_H], return_stats: Literal[False] = False,
) -> NDArray[_H]: ...
@overload
def group_norm(
    x: ArrayLike, num_groups: SupportsIndex, gamma: _Param = None, beta: _Param = None, *,
    channel_axis: SupportsIndex = 1, eps: float = 1e-5, out: _Out = None,
    dtype: _DType[_H], return_stats: Literal[True],
) -> tuple[NDArray[_H], _F32, _F32]: ...
@overload
def group_norm(
    x: ArrayLike, num_groups: SupportsIndex, gamma: _Param = None, beta: _Param = None, *,
    channel_axis: SupportsIndex = 1, eps: float = 1e-5, out: _Out = None,
    dtype: _DType[_H], return_stats: bool,
) -> NDArray[_H] | tuple[NDArray[_H], _F32, _F32]: ...
@overload
def group_norm(
    x: ArrayLike, num_groups: SupportsIndex, gamma: _Param = None, beta: _Param = None, *,
    channel_axis: SupportsIndex = 1, eps: float = 1e-5, out: _Out = None,
    dtype: _DType[np.float64], return_stats: Literal[False] = False,
) -> _F64: ...
@overload
def group_norm(
    x: ArrayLike, num_groups: SupportsIndex, gamma: _Param = None, beta: _Param = None, *,
    channel_axis: SupportsIndex = 1, eps: float = 1e-5, out: _Out = None,
    dtype: _DType[np.float64], return_stats: Literal[True],
) -> tuple[_F64, _F64, _F64]: ...
@overload
def group_norm(
    x: ArrayLike, num_groups: SupportsIndex, gamma: _Param = None, beta: _Param = None, *,
    channel_axis: SupportsIndex = 1, eps: float = 1e-5, out: _Out = None,
    dtype: _DType[np.float64], return_stats: bool,
) -> _F64 | tuple[_F64, _F64, _F64]: ...
@overload
def group_norm(
    x: ArrayLike, num_groups: SupportsIndex, gamma: _Param = None, beta: _Param = None, *,
    channel_axis: SupportsIndex = 1, eps: float = 1e-5, out: _Out = None,
    dtype: DTypeLike | None = None, return_stats: Literal[False] = False,
) -> _Float: ...
@overload
def group_norm(
    x: ArrayLike, num_groups: SupportsIndex, gamma: _Param = None, beta: _Param = None, *,
    channel_axis: SupportsIndex = 1, eps: float = 1e-5, out: _Out = None,
    dtype: DTypeLike | None = None, return_stats: Literal[True],
) -> tuple[_Float, _Float, _Float]: ...
@overload
def group_norm(
    x: ArrayLike, num_groups: SupportsIndex, gamma: _Param = None, beta: _Param = None, *,
    channel_axis: SupportsIndex = 1, eps: float = 1e-5, out: _Out = None,
    dtype: DTypeLike | None = None, return_stats: bool,
) -> _Float | tuple[_Float, _Float, _Float]: ...

# --------------------------------------------------------------------------
# instance_norm: y, or (y, mean, rstd)

@overload
def instance_norm(
    x: _D, gamma: _Param = None, beta: _Param = None, *, channel_axis: SupportsIndex = 1,
    eps: float = 1e-5, out: None = None, dtype: DTypeLike | None = None,
    return_stats: Literal[False] = False,
) -> _D: ...
@overload
def instance_norm(
    x: _D, gamma: _Param = None, beta: _Param = None, *, channel_axis: SupportsIndex = 1,
    eps: float = 1e-5, out: None = None, dtype: DTypeLike | None = None,
    return_stats: Literal[True],
) -> tuple[_D, _D, _D]: ...
@overload
def instance_norm(
    x: _D, gamma: _Param = None, beta: _Param = None, *, channel_axis: SupportsIndex = 1,
    eps: float = 1e-5, out: None = None, dtype: DTypeLike | None = None,
    return_stats: bool,
) -> _D | tuple[_D, _D, _D]: ...
@overload
def instance_norm(
    x: NDArray[_H], gamma: _Param = None, beta: _Param = None, *,
    channel_axis: SupportsIndex = 1, eps: float = 1e-5, out: _Out = None, dtype: None = None,
    return_stats: Literal[False] = False,
) -> NDArray[_H]: ...
@overload
def instance_norm(
    x: NDArray[_H], gamma: _Param = None, beta: _Param = None, *,
    channel_axis: SupportsIndex = 1, eps: float = 1e-5, out: _Out = None, dtype: None = None,
    return_stats: Literal[True],
) -> tuple[NDArray[_H], _F32, _F32]: ...
@overload
def instance_norm(
    x: NDArray[_H], gamma: _Param = None, beta: _Param = None, *,
    channel_axis: SupportsIndex = 1, eps: float = 1e-5, out: _Out = None, dtype: None = None,
    return_stats: bool,
) -> NDArray[_H] | tuple[NDArray[_H], _F32, _F32]: ...
@overload
def instance_norm(
    x: _ToF64, gamma: _Param = None, beta: _Param = None, *,
    channel_axis: SupportsIndex = 1, eps: float = 1e-5, out: _Out = None, dtype: None = None,
    return_stats: Literal[False] = False,
) -> _F64: ...
@overload
def instance_norm(
    x: _ToF64, gamma: _Param = None, beta: _Param = None, *,
    channel_axis: SupportsIndex = 1, eps: float = 1e-5, out: _Out = None, dtype: None = None,
    return_stats: Literal[True],
) -> tuple[_F64, _F64, _F64]: ...
@overload
def instance_norm(
    x: _ToF64, gamma: _Param = None, beta: _Param = None, *,
    channel_axis: SupportsIndex = 1, eps: float = 1e-5, out: _Out = None, dtype: None = None,
    return_stats: bool,
) -> _F64 | tuple[_F64, _F64, _F64]: ...
@overload
def instance_norm(
    x: ArrayLike, gamma: _Param = None, beta: _Param = None, *,
    channel_axis: SupportsIndex = 1, eps: float = 1e-5, out: _Out = None,
    dtype: _DType[_H], return_stats: Literal[False] = False,
) -> NDArray[_H]: ...
@overload
def instance_norm(
    x: ArrayLike, gamma: _Param = None, beta: _Param = None, *,
    channel_axis: SupportsIndex = 1, eps: float = 1e-5, out: _Out = None,
    dtype: _DType[_H], return_stats: Literal[True],
) -> tuple[NDArray[_H], _F32, _F32]: ...
@overload
def instance_norm(
    x: ArrayLike, gamma: _Param = None, beta: _Param = None, *,
    channel_axis: SupportsIndex = 1, eps: float = 1e-5, out: _Out = None,
    dtype: _DType[_H], return_stats: bool,
) -> NDArray[_H] | tuple[NDArray[_H], _F32, _F32]: ...
@overload
def instance_norm(
    x: ArrayLike, gamma: _Param = None, beta: _Param = None, *,
    channel_axis: SupportsIndex = 1, eps: float = 1e-5, out: _Out = None,
    dtype: _DType[np.float64], return_stats: Literal[False] = False,
) -> _F64: ...
@overload
def instance_norm(
    x: ArrayLike, gamma: _Param = None, beta: _Param = None, *,
    channel_axis: SupportsIndex = 1, eps: float = 1e-5, out: _Out = None,
    dtype: _DType[np.float64], return_stats: Literal[True],
) -> tuple[_F64, _F64, _F64]: ...
@overload
def instance_norm(
    x: ArrayLike, gamma: _Param = None, beta: _Param = None, *,
    channel_axis: SupportsIndex = 1, eps: float = 1e-5, out: _Out = None,
    dtype: _DType[np.float64], return_stats: bool,
) -> _F64 | tuple[_F64, _F64, _F64]: ...
@overload
def instance_norm(
    x: ArrayLike, gamma: _Param = None, beta: _Param = None, *,
    channel_axis: SupportsIndex = 1, eps: float = 1e-5, out: _Out = None,
    dtype: DTypeLike | None = None, return_stats: Literal[False] = False,
) -> _Float: ...
@overload
def instance_norm(
    x: ArrayLike, gamma: _Param = None, beta: _Param = None, *,
    channel_axis: SupportsIndex = 1, eps: float = 1e-5, out: _Out = None,
    dtype: DTypeLike | None = None, return_stats: Literal[True],
) -> tuple[_Float, _Float, _Float]: ...
@overload
def instance_norm(
    x: ArrayLike, gamma: _Param = None, beta: _Param = None, *,
    channel_axis: SupportsIndex = 1, eps: float = 1e-5, out: _Out = None,
    dtype: DTypeLike | None = None, return_stats: bool,
) -> _Float | tuple[_Float, _Float, _Float]: ...

# --------------------------------------------------------------------------
# weight_norm: w, or (w, norm); weight_standardize: w's dtype

@overload
def weight_norm(
    v: _D, g: _Param = None, *, axis: _Axis = None, return_norm: Literal[False] = False,
) -> _D: ...
@overload
def weight_norm(
    v: _D, g: _Param = None, *, axis: _Axis = None, return_norm: Literal[True],
) -> tuple[_D, _D]: ...
@overload
def weight_norm(
    v: _D, g: _Param = None, *, axis: _Axis = None, return_norm: bool,
) -> _D | tuple[_D, _D]: ...
@overload
def weight_norm(
    v: NDArray[_H], g: _Param = None, *, axis: _Axis = None,
    return_norm: Literal[False] = False,
) -> NDArray[_H]: ...
@overload
def weight_norm(
    v: NDArray[_H], g: _Param = None, *, axis: _Axis = None, return_norm: Literal[True],
) -> tuple[NDArray[_H], _F32]: ...
@overload
def weight_norm(
    v: NDArray[_H], g: _Param = None, *, axis: _Axis = None, return_norm: bool,
) -> NDArray[_H] | tuple[NDArray[_H], _F32]: ...
@overload
def weight_norm(
    v: _ToF64, g: _Param = None, *, axis: _Axis = None, return_norm: Literal[False] = False,
) -> _F64: ...
@overload
def weight_norm(
    v: _ToF64, g: _Param = None, *, axis: _Axis = None, return_norm: Literal[True],
) -> tuple[_F64, _F64]: ...
@overload
def weight_norm(
    v: _ToF64, g: _Param = None, *, axis: _Axis = None, return_norm: bool,
) -> _F64 | tuple[_F64, _F64]: ...
@overload
def weight_norm(
    v: ArrayLike, g: _Param = None, *, axis: _Axis = None,
    return_norm: Literal[False] = False,
) -> _Float: ...
@overload
def weight_norm(
    v: ArrayLike, g: _Param = None, *, axis: _Axis = None, return_norm: Literal[True],
) -> tuple[_Float, _Float]: ...
@overload
def weight_norm(
    v: ArrayLike, g: _Param = None, *, axis: _Axis = None, return_norm: bool,
) -> _Float | tuple[_Float, _Float]: ...

@overload
def weight_standardize(w: _D, *, axis: _Axis = None, eps: float = 1e-5) -> _D: ...
@overload
def weight_standardize(
    w: NDArray[_F], *, axis: _Axis = None, eps: float = 1e-5,
) -> NDArray[_F]: ...
@overload
def weight_standardize(w: _ToF64, *, axis: _Axis = None, eps: float = 1e-5) -> _F64: ...
@overload
def weight_standardize(w: ArrayLike, *, axis: _Axis = None, eps: float = 1e-5) -> _Float: ...

# --------------------------------------------------------------------------
# Gradients: dx in the dtype of dy and x (the wider of the two; float64 for
# integers), the parameter gradients in a float gamma's dtype, else float32
# for float16/float32 dx and float64 for float64.  A Dask dy or x gives Dask
# arrays.

@overload
def layer_norm_backward(
    dy: _D, x: ArrayLike, mean: ArrayLike, rstd: ArrayLike, gamma: _Param = None, *,
    axis: _Axis = -1, out: None = None, where: ArrayLike | None = None,
) -> tuple[_D, _D, _D]: ...
@overload
def layer_norm_backward(
    dy: ArrayLike, x: _D, mean: ArrayLike, rstd: ArrayLike, gamma: _Param = None, *,
    axis: _Axis = -1, out: None = None, where: ArrayLike | None = None,
) -> tuple[_D, _D, _D]: ...
@overload
def layer_norm_backward(
    dy: NDArray[_H], x: NDArray[_H], mean: ArrayLike, rstd: ArrayLike, gamma: None = None, *,
    axis: _Axis = -1, out: _Out = None, where: ArrayLike | None = None,
) -> tuple[NDArray[_H], _F32, _F32]: ...
@overload
def layer_norm_backward(
    dy: _ToF64, x: _ToF64, mean: ArrayLike, rstd: ArrayLike, gamma: None = None, *,
    axis: _Axis = -1, out: _Out = None, where: ArrayLike | None = None,
) -> tuple[_F64, _F64, _F64]: ...
@overload
def layer_norm_backward(
    dy: NDArray[_F], x: NDArray[_F], mean: ArrayLike, rstd: ArrayLike, gamma: NDArray[_G], *,
    axis: _Axis = -1, out: _Out = None, where: ArrayLike | None = None,
) -> tuple[NDArray[_F], NDArray[_G], NDArray[_G]]: ...
@overload
def layer_norm_backward(
    dy: _ToF64, x: _ToF64, mean: ArrayLike, rstd: ArrayLike, gamma: NDArray[_G], *,
    axis: _Axis = -1, out: _Out = None, where: ArrayLike | None = None,
) -> tuple[_F64, NDArray[_G], NDArray[_G]]: ...
@overload
def layer_norm_backward(
    dy: ArrayLike, x: ArrayLike, mean: ArrayLike, rstd: ArrayLike, gamma: _Param = None, *,
    axis: _Axis = -1, out: _Out = None, where: ArrayLike | None = None,
) -> tuple[_Float, _Float, _Float]: ...

@overload
def rms_norm_backward(
    dy: _D, x: ArrayLike, rstd: ArrayLike, gamma: _Param = None, *,
    axis: _Axis = -1, out: None = None, where: ArrayLike | None = None,
) -> tuple[_D, _D]: ...
@overload
def rms_norm_backward(
    dy: ArrayLike, x: _D, rstd: ArrayLike, gamma: _Param = None, *,
    axis: _Axis = -1, out: None = None, where: ArrayLike | None = None,
) -> tuple[_D, _D]: ...
@overload
def rms_norm_backward(
    dy: NDArray[_H], x: NDArray[_H], rstd: ArrayLike, gamma: None = None, *,
    axis: _Axis = -1, out: _Out = None, where: ArrayLike | None = None,
) -> tuple[NDArray[_H], _F32]: ...
@overload
def rms_norm_backward(
    dy: _ToF64, x: _ToF64, rstd: ArrayLike, gamma: None = None, *,
    axis: _Axis = -1, out: _Out = None, where: ArrayLike | None = None,
) -> tuple[_F64, _F64]: ...
@overload
def rms_norm_backward(
    dy: NDArray[_F], x: NDArray[_F], rstd: ArrayLike, gamma: NDArray[_G], *,
    axis: _Axis = -1, out: _Out = None, where: ArrayLike | None = None,
) -> tuple[NDArray[_F], NDArray[_G]]: ...
@overload
def rms_norm_backward(
    dy: _ToF64, x: _ToF64, rstd: ArrayLike, gamma: NDArray[_G], *,
    axis: _Axis = -1, out: _Out = None, where: ArrayLike | None = None,
) -> tuple[_F64, NDArray[_G]]: ...
@overload
def rms_norm_backward(
    dy: ArrayLike, x: ArrayLike, rstd: ArrayLike, gamma: _Param = None, *,
    axis: _Axis = -1, out: _Out = None, where: ArrayLike | None = None,
) -> tuple[_Float, _Float]: ...

@overload
def batch_norm_backward(
    dy: _D, x: ArrayLike, mean: ArrayLike, rstd: ArrayLike, gamma: _Param = None, *,
    axis: _Axis = None, training: bool = True, out: None = None,
    where: ArrayLike | None = None,
) -> tuple[_D, _D, _D]: ...
@overload
def batch_norm_backward(
    dy: ArrayLike, x: _D, mean: ArrayLike, rstd: ArrayLike, gamma: _Param = None, *,
    axis: _Axis = None, training: bool = True, out: None = None,
    where: ArrayLike | None = None,
) -> tuple[_D, _D, _D]: ...
@overload
def batch_norm_backward(
    dy: NDArray[_H], x: NDArray[_H], mean: ArrayLike, rstd: ArrayLike, gamma: None = None, *,
    axis: _Axis = None, training: bool = True, out: _Out = None,
    where: ArrayLike | None = None,
) -> tuple[NDArray[_H], _F32, _F32]: ...
@overload
def batch_norm_backward(
    dy: _ToF64, x: _ToF64, mean: ArrayLike, rstd: ArrayLike, gamma: None = None, *,
    axis: _Axis = None, training: bool = True, out: _Out = None,
    where: ArrayLike | None = None,
) -> tuple[_F64, _F64, _F64]: ...
@overload
def batch_norm_backward(
    dy: NDArray[_F], x: NDArray[_F], mean: ArrayLike, rstd: ArrayLike, gamma: NDArray[_G], *,
    axis: _Axis = None, training: bool = True, out: _Out = None,
    where: ArrayLike | None = None,
) -> tuple[NDArray[_F], NDArray[_G], NDArray[_G]]: ...
@overload
def batch_norm_backward(
    dy: _ToF64, x: _ToF64, mean: ArrayLike, rstd: ArrayLike, gamma: NDArray[_G], *,
    axis: _Axis = None, training: bool = True, out: _Out = None,
    where: ArrayLike | None = None,
) -> tuple[_F64, NDArray[_G], NDArray[_G]]: ...
@overload
def batch_norm_backward(
    dy: ArrayLike, x: ArrayLike, mean: ArrayLike, rstd: ArrayLike, gamma: _Param = None, *,
    axis: _Axis = None, training: bool = True, out: _Out = None,
    where: ArrayLike | None = None,
) -> tuple[_Float, _Float, _Float]: ...

@overload
def group_norm_backward(
    dy: _D, x: ArrayLike, mean: ArrayLike, rstd: ArrayLike, num_groups: SupportsIndex,
    gamma: _Param = None, *, channel_axis: SupportsIndex = 1, out: None = None,
) -> tuple[_D, _D, _D]: ...
@overload
def group_norm_backward(
    dy: ArrayLike, x: _D, mean: ArrayLike, rstd: ArrayLike, num_groups: SupportsIndex,
    gamma: _Param = None, *, channel_axis: SupportsIndex = 1, out: None = None,
) -> tuple[_D, _D, _D]: ...
@overload
def group_norm_backward(
    dy: NDArray[_H], x: NDArray[_H], mean: ArrayLike, rstd: ArrayLike,
    num_groups: SupportsIndex, gamma: None = None, *, channel_axis: SupportsIndex = 1,
    out: _Out = None,
) -> tuple[NDArray[_H], _F32, _F32]: ...
@overload
def group_norm_backward(
    dy: _ToF64, x: _ToF64, mean: ArrayLike, rstd: ArrayLike, num_groups: SupportsIndex,
    gamma: None = None, *, channel_axis: SupportsIndex = 1, out: _Out = None,
) -> tuple[_F64, _F64, _F64]: ...
@overload
def group_norm_backward(
    dy: NDArray[_F], x: NDArray[_F], mean: ArrayLike, rstd: ArrayLike,
    num_groups: SupportsIndex, gamma: NDArray[_G], *, channel_axis: SupportsIndex = 1,
    out: _Out = None,
) -> tuple[NDArray[_F], NDArray[_G], NDArray[_G]]: ...
@overload
def group_norm_backward(
    dy: _ToF64, x: _ToF64, mean: ArrayLike, rstd: ArrayLike, num_groups: SupportsIndex,
    gamma: NDArray[_G], *, channel_axis: SupportsIndex = 1, out: _Out = None,
) -> tuple[_F64, NDArray[_G], NDArray[_G]]: ...
@overload
def group_norm_backward(
    dy: ArrayLike, x: ArrayLike, mean: ArrayLike, rstd: ArrayLike, num_groups: SupportsIndex,
    gamma: _Param = None, *, channel_axis: SupportsIndex = 1, out: _Out = None,
) -> tuple[_Float, _Float, _Float]: ...

# --------------------------------------------------------------------------

def get_num_threads() -> int: ...
def set_num_threads(n: SupportsIndex | None) -> None: ...
def show_config() -> None: ...
def explain(func: Callable[..., object], *args: object, **kwargs: object) -> dict[str, Any]: ...

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
