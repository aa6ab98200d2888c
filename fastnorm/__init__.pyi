from typing import Any, Callable, Literal, overload

import numpy as np
from numpy.typing import ArrayLike, DTypeLike, NDArray

__version__: str

_Axis = int | tuple[int, ...] | None
_Array = NDArray[np.floating]
_Out = NDArray[np.floating] | tuple[NDArray[np.floating] | None, ...] | None

def mean_var(
    x: ArrayLike,
    axis: _Axis = None,
    *,
    ddof: float = 0,
    keepdims: bool = False,
    dtype: DTypeLike | None = None,
    out: tuple[NDArray[np.floating] | None, NDArray[np.floating] | None] | None = None,
    where: ArrayLike | None = None,
) -> tuple[_Array | np.floating, _Array | np.floating]: ...
@overload
def layer_norm(
    x: ArrayLike,
    gamma: ArrayLike | None = None,
    beta: ArrayLike | None = None,
    *,
    axis: _Axis = -1,
    eps: float = 1e-5,
    out: _Out = None,
    dtype: DTypeLike | None = None,
    return_stats: Literal[False] = False,
    where: ArrayLike | None = None,
) -> _Array: ...
@overload
def layer_norm(
    x: ArrayLike,
    gamma: ArrayLike | None = None,
    beta: ArrayLike | None = None,
    *,
    axis: _Axis = -1,
    eps: float = 1e-5,
    out: _Out = None,
    dtype: DTypeLike | None = None,
    return_stats: Literal[True],
    where: ArrayLike | None = None,
) -> tuple[_Array, _Array, _Array]: ...
@overload
def rms_norm(
    x: ArrayLike,
    gamma: ArrayLike | None = None,
    *,
    axis: _Axis = -1,
    eps: float = 1e-5,
    out: _Out = None,
    dtype: DTypeLike | None = None,
    return_stats: Literal[False] = False,
    where: ArrayLike | None = None,
) -> _Array: ...
@overload
def rms_norm(
    x: ArrayLike,
    gamma: ArrayLike | None = None,
    *,
    axis: _Axis = -1,
    eps: float = 1e-5,
    out: _Out = None,
    dtype: DTypeLike | None = None,
    return_stats: Literal[True],
    where: ArrayLike | None = None,
) -> tuple[_Array, _Array]: ...
@overload
def batch_norm(
    x: ArrayLike,
    gamma: ArrayLike | None = None,
    beta: ArrayLike | None = None,
    running_mean: NDArray[np.floating] | None = None,
    running_var: NDArray[np.floating] | None = None,
    *,
    training: bool = True,
    momentum: float = 0.1,
    eps: float = 1e-5,
    axis: _Axis = None,
    out: _Out = None,
    dtype: DTypeLike | None = None,
    return_stats: Literal[False] = False,
    where: ArrayLike | None = None,
) -> _Array: ...
@overload
def batch_norm(
    x: ArrayLike,
    gamma: ArrayLike | None = None,
    beta: ArrayLike | None = None,
    running_mean: NDArray[np.floating] | None = None,
    running_var: NDArray[np.floating] | None = None,
    *,
    training: bool = True,
    momentum: float = 0.1,
    eps: float = 1e-5,
    axis: _Axis = None,
    out: _Out = None,
    dtype: DTypeLike | None = None,
    return_stats: Literal[True],
    where: ArrayLike | None = None,
) -> tuple[_Array, _Array, _Array]: ...
@overload
def group_norm(
    x: ArrayLike,
    num_groups: int,
    gamma: ArrayLike | None = None,
    beta: ArrayLike | None = None,
    *,
    channel_axis: int = 1,
    eps: float = 1e-5,
    out: _Out = None,
    dtype: DTypeLike | None = None,
    return_stats: Literal[False] = False,
) -> _Array: ...
@overload
def group_norm(
    x: ArrayLike,
    num_groups: int,
    gamma: ArrayLike | None = None,
    beta: ArrayLike | None = None,
    *,
    channel_axis: int = 1,
    eps: float = 1e-5,
    out: _Out = None,
    dtype: DTypeLike | None = None,
    return_stats: Literal[True],
) -> tuple[_Array, _Array, _Array]: ...
@overload
def instance_norm(
    x: ArrayLike,
    gamma: ArrayLike | None = None,
    beta: ArrayLike | None = None,
    *,
    channel_axis: int = 1,
    eps: float = 1e-5,
    out: _Out = None,
    dtype: DTypeLike | None = None,
    return_stats: Literal[False] = False,
) -> _Array: ...
@overload
def instance_norm(
    x: ArrayLike,
    gamma: ArrayLike | None = None,
    beta: ArrayLike | None = None,
    *,
    channel_axis: int = 1,
    eps: float = 1e-5,
    out: _Out = None,
    dtype: DTypeLike | None = None,
    return_stats: Literal[True],
) -> tuple[_Array, _Array, _Array]: ...
@overload
def weight_norm(
    v: ArrayLike,
    g: ArrayLike | None = None,
    *,
    axis: _Axis = None,
    return_norm: Literal[False] = False,
) -> _Array: ...
@overload
def weight_norm(
    v: ArrayLike,
    g: ArrayLike | None = None,
    *,
    axis: _Axis = None,
    return_norm: Literal[True],
) -> tuple[_Array, _Array]: ...
def weight_standardize(w: ArrayLike, *, axis: _Axis = None, eps: float = 1e-5) -> _Array: ...
def layer_norm_backward(
    dy: ArrayLike,
    x: ArrayLike,
    mean: ArrayLike,
    rstd: ArrayLike,
    gamma: ArrayLike | None = None,
    *,
    axis: _Axis = -1,
    out: _Out = None,
    where: ArrayLike | None = None,
) -> tuple[_Array, _Array, _Array]: ...
def rms_norm_backward(
    dy: ArrayLike,
    x: ArrayLike,
    rstd: ArrayLike,
    gamma: ArrayLike | None = None,
    *,
    axis: _Axis = -1,
    out: _Out = None,
    where: ArrayLike | None = None,
) -> tuple[_Array, _Array]: ...
def batch_norm_backward(
    dy: ArrayLike,
    x: ArrayLike,
    mean: ArrayLike,
    rstd: ArrayLike,
    gamma: ArrayLike | None = None,
    *,
    axis: _Axis = None,
    training: bool = True,
    out: _Out = None,
    where: ArrayLike | None = None,
) -> tuple[_Array, _Array, _Array]: ...
def group_norm_backward(
    dy: ArrayLike,
    x: ArrayLike,
    mean: ArrayLike,
    rstd: ArrayLike,
    num_groups: int,
    gamma: ArrayLike | None = None,
    *,
    channel_axis: int = 1,
    out: _Out = None,
) -> tuple[_Array, _Array, _Array]: ...
def get_num_threads() -> int: ...
def set_num_threads(n: int | None) -> None: ...
def show_config() -> None: ...

def explain(func: Callable[..., object], *args: object, **kwargs: object) -> dict[str, Any]: ...

__all__ = [
    "__version__",
    "mean_var",
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
