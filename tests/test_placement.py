"""Results do not depend on where x lies in memory: the same values at any
offset from a cache line give the same bits.  The kernels start column
strips and streamed stores at line boundaries, so a value's place decides
which code sums or writes it; each must take the one order every path
takes.  The float64 results (statistics as dtype=float64, running
statistics) show differences that float32 outputs would round away."""
import numpy as np
import pytest

import fastnorm
from reference import assert_bitwise

# x larger than the test machine's in-cache size (tests/conftest.py), so
# that column strips start at a line; a narrow tile; rows; NHWC.
CASES = {
    "columns": ((4096, 1024), 0),
    "narrow columns": ((4096, 13), 0),
    "rows": ((512, 1000), -1),
    "nhwc": ((16, 32, 32, 96), (0, 1, 2)),
}


def _placed(values, offset):
    """values copied into a buffer at `offset` elements past its start.
    The buffer itself may start anywhere on a 16-byte boundary (NumPy's
    large arrays 16 bytes past a line); the offsets, 8 bytes apart across
    64 bytes, put x at every 8-byte place in a line either way."""
    buf = np.empty(values.size + 64, values.dtype)
    x = buf[offset:offset + values.size].reshape(values.shape)
    x[...] = values
    return x


def _results(x, axis):
    kept = tuple(i for i in range(x.ndim) if i not in np.atleast_1d(axis) % x.ndim)
    named = tuple(x.shape[i] for i in kept)
    out = list(fastnorm.mean_var(x, axis=axis, dtype=np.float64))
    out.append(fastnorm.layer_norm(x, axis=axis, dtype=np.float64))
    out.append(fastnorm.layer_norm(x, axis=axis))
    rm, rv = np.zeros(named), np.ones(named)
    out.append(fastnorm.batch_norm(x, None, None, rm, rv, axis=axis))
    return out + [rm, rv]


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("case", list(CASES))
def test_the_same_values_anywhere_in_memory_give_the_same_bits(case, dtype):
    shape, axis = CASES[case]
    rng = np.random.default_rng(3)
    values = (3.0 + 2.0 * rng.standard_normal(shape)).astype(dtype)
    first = _results(_placed(values, 0), axis)
    step = max(1, 64 // np.dtype(dtype).itemsize // 8)    # eight offsets across a line
    for offset in range(step, 64 // np.dtype(dtype).itemsize, step):
        x = _placed(values, offset)
        for i, (got, want) in enumerate(zip(_results(x, axis), first)):
            assert_bitwise(got, want, f"result {i} at {x.ctypes.data % 64} bytes past a line")
