"""The other libraries, each optional: loaded once (or skipped with the
reason), then asked per row for one Timed per thread count, after checking
that their result agrees with fastnorm's.

A Rival's ``columns(case, inp, want, threads)`` returns the Timed columns
and the relative difference of its result from fastnorm's, or raises Skip
with the reason the row has none (no code for the op or layout, or a
result that differs from fastnorm's).
"""
import importlib.util

from . import jax_worker, numba_code, ort_code, torch_code
from .agree import agrees, disagreement
from .timing import Timed

# How each library's columns were produced, for the notes under the table.
NOTES = {
    "torch": "PyTorch: torch.nn.functional on torch.from_numpy(x) (shared memory); "
             "torch.set_num_threads(n); allocates every output (no out=); "
             "backward = torch.autograd.grad on a recorded graph",
    "onnxruntime": "ONNX Runtime: one small model per op (Transpose nodes for other "
                   "layouts), CPU provider, intra_op_num_threads=n, no spinning, "
                   "IOBinding into outputs allocated once; no backward (inference package)",
    "jax": "JAX: jax.jit of the NumPy-style expression (backward: jax.vjp inside the "
           "jit, forward recomputed); allocates every output; n threads = a worker process "
           "restricted to n CPUs (sched_setaffinity), so XLA's pool has n threads "
           "(1 thread also: XLA_FLAGS=" + jax_worker.SINGLE_THREAD_FLAGS + ")",
    "numba": "numba: hand-written loops, numba.njit(parallel=True, fastmath=False), "
             "numba.prange over rows (layer/rms norm, mean_var rows, layer_norm and rms_norm "
             "backward: chunks of rows), row chunks with per-column partial sums (columns, "
             "batch_norm (N, C)/NHWC) or channels (NCHW); float64 sums, two passes "
             "(mean, then variance); outputs allocated once; numba.set_num_threads(n); "
             "compiled before timing; no other gradients",
}


class Skip(Exception):
    """This library has no column for this row; the message says why."""


def _checked(got, want, dtype):
    error = disagreement(got, want)
    if not agrees(error, dtype):
        raise Skip(f"result differs from fastnorm's (relative error {error:.2g})")
    return error


class TorchRival:
    name = "torch"

    def __init__(self):
        self.torch, self.F = torch_code.load()
        self.version = self.torch.__version__

    def columns(self, case, inp, want, threads):
        try:
            call = torch_code.build(self.torch, self.F, inp)
        except NotImplementedError as e:
            raise Skip(str(e)) from None
        error = _checked(torch_code.to_numpy(call()), want, inp.dtype)
        torch = self.torch
        return [Timed((self.name, n), call, enter=lambda n=n: torch.set_num_threads(n))
                for n in threads], error

    def release(self):
        pass

    def close(self):
        pass


class OrtRival:
    name = "onnxruntime"

    def __init__(self):
        self.ort, self.onnx = ort_code.load()
        self.version = f"{self.ort.__version__} (onnx {self.onnx.__version__})"

    def columns(self, case, inp, want, threads):
        out, timeds, error = None, [], None
        for n in threads:
            try:
                # The sessions share one set of outputs: they never run at once.
                call, out = ort_code.build(self.ort, self.onnx, inp, n, out)
            except NotImplementedError as e:
                raise Skip(str(e)) from None
            except Exception as e:  # ONNX Runtime refused the model (type, op)
                raise Skip(f"{type(e).__name__}: {str(e).splitlines()[0][:150]}") from None
            error = _checked(tuple(call()), want, inp.dtype)
            timeds.append(Timed((self.name, n), call))
        return timeds, error

    def release(self):
        pass

    def close(self):
        pass


class _WorkerTimed(Timed):
    """A column timed inside a JAX worker: the pipe's round trip is not in it."""

    def __init__(self, key, worker):
        super().__init__(key, None)
        self.worker = worker
        self.cpu_per_wall = []

    def sample(self):
        per_call, cpu = self.worker.ask("sample", self.inner)
        self.cpu_per_wall.append(cpu)
        return per_call


class JaxRival:
    name = "jax"

    def __init__(self, threads):
        self.workers = {}
        if importlib.util.find_spec("jax") is None:  # say so without starting a process
            raise ImportError("No module named 'jax'")
        try:
            for n in threads:
                self.workers[n] = jax_worker.Worker(n)
        except Exception:
            self.close()
            raise
        self.version = next(iter(self.workers.values())).version

    def columns(self, case, inp, want, threads):
        timeds, worst = [], 0.0
        # All workers build their arrays and compile at once, then answer.
        for n in threads:
            self.workers[n].send("prepare", case, inp.dtype.name, inp.seed)
        for n in threads:
            worker = self.workers[n]
            try:
                error = worker.reply()
            except RuntimeError as e:
                raise Skip(str(e).splitlines()[0][:150]) from None
            if not agrees(error, inp.dtype):
                raise Skip(f"result differs from fastnorm's (relative error {error:.2g})")
            worst = max(worst, error)
            timeds.append(_WorkerTimed((self.name, n), worker))
        return timeds, worst

    def release(self):
        for w in self.workers.values():
            w.ask("release")

    def close(self):
        for w in self.workers.values():
            w.close()
        self.workers = {}


class NumbaRival:
    name = "numba"

    def __init__(self):
        self.numba, self.kernels = numba_code.load()

    @property
    def version(self):
        """numba's and llvmlite's versions, and the threading layer once a
        parallel kernel has run (read at the end of the run)."""
        import llvmlite
        numba = self.numba
        text = f"{numba.__version__} (llvmlite {llvmlite.__version__}"
        try:
            text += f", threading layer {numba.threading_layer()}"
        except ValueError:   # no parallel kernel has run yet
            pass
        return text + ")"

    def columns(self, case, inp, want, threads):
        numba = self.numba
        if max(threads) > numba.config.NUMBA_NUM_THREADS:
            raise Skip(f"numba's pool has {numba.config.NUMBA_NUM_THREADS} threads "
                       "(NUMBA_NUM_THREADS)")
        try:
            call = numba_code.build(self.kernels, inp)
        except NotImplementedError as e:
            raise Skip(str(e)) from None
        # The first call compiles the kernel for this dtype and layout: here,
        # untimed, with the check.
        numba.set_num_threads(max(threads))
        error = _checked(call(), want, inp.dtype)
        return [Timed((self.name, n), call, enter=lambda n=n: numba.set_num_threads(n))
                for n in threads], error

    def release(self):
        pass

    def close(self):
        pass


def load(names, threads):
    """(the rivals that loaded, {name: why not} for the others)."""
    makers = {"torch": TorchRival, "onnxruntime": OrtRival,
              "jax": lambda: JaxRival(threads), "numba": NumbaRival}
    loaded, missing = [], {}
    for name in names:
        try:
            loaded.append(makers[name]())
        except ImportError as e:
            missing[name] = f"not installed ({e})"
        except Exception as e:
            missing[name] = f"failed to start: {type(e).__name__}: {e}"
    return loaded, missing
