"""python -m fastnorm's small calls (fastnorm._small_calls): each call's
spellings are the same computation, all take the fast path (which is why
they cost the same), give the same bits and the float64 reference's
values; the table and its notes say what the rows hold.  No timing is
checked here: the figures are the benchmark's to print."""
import numpy as np
import pytest

import fastnorm
from fastnorm import _small_calls as sc
from reference import OUT_TOL, assert_close, ref_layer_norm, ref_mean_var, ref_rms_norm

CALLS = [pytest.param(c, id=c.label) for c in sc.SMALL_CALLS]


def _x(call):
    return np.random.default_rng(7).standard_normal(call.shape).astype(sc.DTYPE) * 3 + 2


def _reference(call, x):
    """The call's results in float64, as its spellings return them."""
    if call.func == "layer_norm":
        return (ref_layer_norm(x, (1,))[0],)
    if call.func == "rms_norm":
        return (ref_rms_norm(x, (1,))[0],)
    if call.func == "batch_norm":
        return (ref_layer_norm(x, (0,))[0],)   # training: each column over the batch
    mean, var, _ = ref_mean_var(x, (1,))
    return mean[:, 0], var[:, 0]


@pytest.mark.parametrize("call", CALLS)
def test_every_spelling_takes_the_fast_path(call):
    x = _x(call)
    func = getattr(fastnorm, call.func)
    for name, args in call.spellings:
        kwargs = eval(f"dict({args})", {"out": sc.output(call, x)})
        assert fastnorm.explain(func, x, **kwargs)["fast_path"] is True, name


@pytest.mark.parametrize("call", CALLS)
def test_every_spelling_gives_the_same_bits_and_the_reference(call):
    x = _x(call)
    results = {name: fn() for name, fn in sc.callables(call, x).items()}
    first = next(iter(results.values()))
    for name, r in results.items():
        assert sc._same_bits(first, r), name
    got = first if isinstance(first, tuple) else (first,)
    want = _reference(call, x)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == sc.DTYPE
        assert_close(g, w, OUT_TOL[np.dtype(sc.DTYPE)] * 4 * (1.0 + np.abs(w)), call.label)


def test_a_row_holds_every_spelling_and_the_thread_count_is_restored():
    fastnorm.set_num_threads(2)
    try:
        rows = sc.run(reps=1, loop_s=1e-4)
        assert fastnorm.get_num_threads() == 2
    finally:
        fastnorm.set_num_threads(None)
    assert [r["case"] for r in rows] == [c.label for c in sc.SMALL_CALLS]
    for r, c in zip(rows, sc.SMALL_CALLS):
        assert "error" not in r, r
        assert list(r["spellings_us"]) == [name for name, _ in c.spellings]
        assert all(t > 0 for t in r["spellings_us"].values()) and r["copy_us"] > 0
        assert r["same_bits"] and r["threads"] == 1 and r["target_us"] == c.target_us
    assert sc.problems(rows, limit=float("inf")) == []


def _row(us, same=True):
    return {"case": "layer_norm (32, 768)", "spellings_us": us, "copy_us": 3.0,
            "target_us": 3.0, "same_bits": same}


def test_problems_name_the_slowest_spelling_and_different_bits():
    even = _row({"axis=-1": 4.0, "out=": 4.4})
    slow = _row({"axis=-1": 4.0, "axis=(1,)": 9.0})
    assert sc.problems([even]) == []
    assert sc.problems([slow]) == ["layer_norm (32, 768): axis=(1,) costs 2.2x the fastest "
                                   "spelling"]
    assert sc.problems([_row({"axis=-1": 4.0}, same=False)]) == [
        "layer_norm (32, 768): the spellings give different results"]


def test_the_table_gives_the_first_spelling_the_range_and_failures():
    table = sc.format_table([_row({"axis=-1": 4.0, "axis=(1,)": 9.0}),
                             {"case": "mean_var (32, 768)", "error": "ValueError: no"}])
    lines = table.splitlines()
    assert lines[2].split() == ["layer_norm", "(32,", "768)", "4.00", "4.00-9.00", "axis=(1,)",
                                "3.00", "3.0"]
    assert lines[3] == "mean_var (32, 768)       FAILED: ValueError: no"


@pytest.mark.parametrize("shape", [(32, 768), (1, 256), (3, 0), (7,)])
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("offset", [0, 16, 24, 4000])
def test_copy_destination_lies_at_x_offset_within_a_page(shape, dtype, offset):
    # x at a chosen place within a page; the copy's destination at the same
    buf = np.empty(int(np.prod(shape)) * np.dtype(dtype).itemsize + 8192, np.uint8)
    start = (offset - buf.ctypes.data) % 4096
    x = buf[start:start + int(np.prod(shape)) * np.dtype(dtype).itemsize].view(dtype)
    x = x.reshape(shape)
    x[...] = np.arange(x.size).reshape(shape)
    y = sc.copy_destination(x)
    assert (y.shape, y.dtype, y.flags.c_contiguous) == (x.shape, x.dtype, True)
    assert y.size == 0 or y.ctypes.data % 4096 == x.ctypes.data % 4096 == offset
    assert not np.shares_memory(x, y)
    np.copyto(y, x)
    np.testing.assert_array_equal(y, x)
