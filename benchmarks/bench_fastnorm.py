"""asv benchmarks for every public function, made from the table in _cases.py.

For each entry ``Op("layer_norm", ...)`` there are four classes:

* ``LayerNorm.time_layer_norm``: the fastnorm call, over
  layout x dtype x size x threads;
* ``LayerNormMem.peakmem_layer_norm``: its peak memory, layout x dtype on
  the large arrays (on the small ones the peak is the interpreter's), threads
  left at the default;
* ``LayerNormNumPy.time_layer_norm`` and ``LayerNormNumPyMem.peakmem_layer_norm``:
  the NumPy code a user would write for the same result (NumPy is
  single-threaded here, so no threads parameter).  Next to the fastnorm rows
  they give the speed-up and the memory saved; across commits they also show
  how much of a change is the machine (NumPy's code did not change).

``Copy.time_copyto`` copies the same bytes: the floor of a call that reads
its input and writes its output once.

The input arrays are written once per run by ``setup_cache`` (shared by every
class: they inherit the same function) into asv's cache directory, and each
benchmark process loads only the array it needs.  Loading a saved array
creates no temporaries, so peak memory is the interpreter plus the input plus
what the call itself allocates.
"""
import hashlib
import inspect

import numpy as np

from . import _cases
from .comparison.yardstick import copy_destination


def _set_threads(threads):
    import fastnorm
    setter = getattr(fastnorm, "set_num_threads", None)
    if setter is None:
        raise NotImplementedError("fastnorm.set_num_threads does not exist in this version")
    setter(1 if threads == "1" else _cases.all_threads())


def _reset_threads():
    import fastnorm
    setter = getattr(fastnorm, "set_num_threads", None)
    if setter is not None:
        setter(None)


class _Inputs:
    """What every generated class shares."""
    timeout = 300          # per benchmark; large float16 NumPy cases are slow
    warmup_time = 0.1

    def setup_cache(self):
        return _cases.write_inputs(".")

    def _prepare(self, names, layout, dtype, size):
        x = np.load(names[layout, size, dtype])
        case = _cases.Case(x, self.op.layouts[layout], self.op.default_axes)
        self.fast, self.numpy = self.op.build(case)
        return case


def _camel(name):
    return "".join(part[:1].upper() + part[1:] for part in name.split("_"))


def _version(op):
    """Changes when this entry's measurement changes (its builder and the
    helpers it calls, its layouts, the shapes, the generated code), not when
    other entries are added; results of an older version are not compared."""
    helpers = [getattr(_cases, n, None) for n in op.build.__code__.co_names]
    helpers = [h for h in helpers if inspect.isfunction(h)]
    parts = [op.name, repr(op.layouts), repr(_cases.SHAPES), inspect.getsource(op.build),
             *map(inspect.getsource, helpers),
             inspect.getsource(_cases.Case), inspect.getsource(_cases.make_input),
             inspect.getsource(_Inputs), inspect.getsource(_make_classes)]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def _make_classes(op):
    layouts = list(op.layouts)
    common = {"op": op, "version": _version(op), "__module__": __name__}

    # fastnorm, time: layout x dtype x size x threads
    def setup(self, names, layout, dtype, size, threads):
        case = self._prepare(names, layout, dtype, size)
        if case.missing:
            raise NotImplementedError(f"not in this version: {', '.join(case.missing)}")
        _set_threads(threads)
        self.fast()  # starts the OpenMP team outside the timing (matters for --quick)

    def teardown(self, names, layout, dtype, size, threads):
        _reset_threads()

    def time_fast(self, names, layout, dtype, size, threads):
        self.fast()

    fast_time = type(_camel(op.name), (_Inputs,), dict(
        common,
        __doc__=f"fastnorm.{op.name}: time per call.",
        params=[layouts, list(_cases.DTYPES), list(_cases.SIZES), list(_cases.THREADS)],
        param_names=["layout", "dtype", "size", "threads"],
        setup=setup, teardown=teardown, **{f"time_{op.name}": time_fast}))

    # fastnorm, peak memory: layout x dtype, large arrays (on the small ones
    # the peak is the interpreter's); threads left at the default
    def setup_mem(self, names, layout, dtype):
        case = self._prepare(names, layout, dtype, "large")
        if case.missing:
            raise NotImplementedError(f"not in this version: {', '.join(case.missing)}")

    def peakmem_fast(self, names, layout, dtype):
        self.fast()

    fast_mem = type(_camel(op.name) + "Mem", (_Inputs,), dict(
        common,
        __doc__=f"fastnorm.{op.name}: peak memory of the process (large arrays).",
        params=[layouts, list(_cases.DTYPES)],
        param_names=["layout", "dtype"],
        setup=setup_mem, **{f"peakmem_{op.name}": peakmem_fast}))

    # NumPy baseline, time: layout x dtype x size
    def setup_numpy(self, names, layout, dtype, size):
        self._prepare(names, layout, dtype, size)

    def time_numpy(self, names, layout, dtype, size):
        self.numpy()

    numpy_time = type(_camel(op.name) + "NumPy", (_Inputs,), dict(
        common,
        __doc__=f"The NumPy code a user would write instead of fastnorm.{op.name}: time.",
        params=[layouts, list(_cases.DTYPES), list(_cases.SIZES)],
        param_names=["layout", "dtype", "size"],
        setup=setup_numpy, **{f"time_{op.name}": time_numpy}))

    # NumPy baseline, peak memory: layout x dtype, large arrays
    def setup_numpy_mem(self, names, layout, dtype):
        self._prepare(names, layout, dtype, "large")

    def peakmem_numpy(self, names, layout, dtype):
        self.numpy()

    numpy_mem = type(_camel(op.name) + "NumPyMem", (_Inputs,), dict(
        common,
        __doc__=f"The NumPy code a user would write instead of fastnorm.{op.name}: "
                "peak memory (large arrays).",
        params=[layouts, list(_cases.DTYPES)],
        param_names=["layout", "dtype"],
        setup=setup_numpy_mem, **{f"peakmem_{op.name}": peakmem_numpy}))

    return fast_time, fast_mem, numpy_time, numpy_mem


class Copy(_Inputs):
    """np.copyto of the same bytes as a rows input, one thread: the yardstick
    of a call that reads x once and writes y once.  Its code never changes,
    so across commits it shows what is the machine."""
    version = "2"
    params = [list(_cases.DTYPES), list(_cases.SIZES)]
    param_names = ["dtype", "size"]

    def setup(self, names, dtype, size):
        self.x = np.load(names["rows", size, dtype])
        self.out = copy_destination(self.x)

    def time_copyto(self, names, dtype, size):
        np.copyto(self.out, self.x)


for _op in _cases.OPS:
    for _cls in _make_classes(_op):
        globals()[_cls.__name__] = _cls
del _op, _cls
