"""asv benchmarks for ways of calling: small calls allocating their output
or writing into ``out=`` (the fast path's cost beside the kernel's), with
their statistics (``return_stats``), small gradients, over other axes than
the last, small group and instance norms, the same small call spelled the
ways users write it, and where= / masked arrays beside the unmasked call on
the same data."""
import inspect
import warnings

import numpy as np

SMALL_SHAPES = ("(1, 256)", "(8, 1024)", "(32, 768)")


def _call(func, x, out):
    import fastnorm
    if func == "mean_var":
        return fastnorm.mean_var(x, -1, out=out)
    if func == "batch_norm":
        return fastnorm.batch_norm(x, axis=0, training=False, running_mean=np.zeros(x.shape[1]),
                                   running_var=np.ones(x.shape[1]), out=out)
    return getattr(fastnorm, func)(x, out=out)


class SmallCall:
    """One small float32 call, allocating its result or into out=."""
    params = [["layer_norm", "rms_norm", "batch_norm", "mean_var"], ["alloc", "out"],
              list(SMALL_SHAPES)]
    param_names = ["func", "output", "shape"]

    def setup(self, func, output, shape):
        shape = tuple(int(s) for s in shape.strip("()").split(","))
        self.x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        self.out = None
        if output == "out":
            self.out = ((np.empty(shape[0], np.float32), np.empty(shape[0], np.float32))
                        if func == "mean_var" else np.empty_like(self.x))
        self.func = func
        _call(func, self.x, self.out)

    def time_call(self, func, output, shape):
        _call(self.func, self.x, self.out)


class _OneCall:
    """A call made by self.fn (set by setup through _start), timed on one
    thread; the thread count is restored afterwards."""

    def _start(self, fn):
        import fastnorm
        self.fn = fn
        self.threads = fastnorm.get_num_threads()
        fastnorm.set_num_threads(1)
        fn()

    def teardown(self, *params):
        # A setup that skipped its case (NotImplementedError) set nothing.
        if hasattr(self, "threads"):
            import fastnorm
            fastnorm.set_num_threads(self.threads)

    def time_call(self, *params):
        self.fn()


class ReturnStats(_OneCall):
    """A small float32 call that returns its statistics too (a training
    step's forward, for the gradient), allocating, on one thread."""
    params = [["layer_norm", "rms_norm", "batch_norm"], list(SMALL_SHAPES)]
    param_names = ["func", "shape"]

    def setup(self, func, shape):
        import fastnorm
        shape = tuple(int(s) for s in shape.strip("()").split(","))
        if func == "batch_norm" and shape[0] < 2:
            raise NotImplementedError("training needs two values a channel")
        x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        f = getattr(fastnorm, func)
        self._start(lambda: f(x, return_stats=True))


class SmallGradient(_OneCall):
    """A small float32 gradient with a gain, from the forward's float32
    statistics (a training step's backward), allocating, on one thread;
    batch_norm's over axis 0, the others' over the last."""
    params = [["layer_norm_backward", "rms_norm_backward", "batch_norm_backward"],
              list(SMALL_SHAPES)]
    param_names = ["func", "shape"]

    def setup(self, func, shape):
        import fastnorm
        shape = tuple(int(s) for s in shape.strip("()").split(","))
        rng = np.random.default_rng(0)
        x, dy = (rng.standard_normal(shape).astype(np.float32) for _ in range(2))
        gamma = rng.uniform(0.5, 2, shape[-1]).astype(np.float32)
        if func == "layer_norm_backward":
            _, mean, rstd = fastnorm.layer_norm(x, gamma, return_stats=True)
            self._start(lambda: fastnorm.layer_norm_backward(dy, x, mean, rstd, gamma))
        elif func == "batch_norm_backward":
            if shape[0] < 2:
                raise NotImplementedError("training needs two values a channel")
            _, mean, rstd = fastnorm.batch_norm(x, gamma, axis=0, return_stats=True)
            self._start(lambda: fastnorm.batch_norm_backward(dy, x, mean, rstd, gamma, axis=0))
        else:
            _, rstd = fastnorm.rms_norm(x, gamma, return_stats=True)
            self._start(lambda: fastnorm.rms_norm_backward(dy, x, rstd, gamma))


class OtherAxes(_OneCall):
    """A small float32 layer_norm or rms_norm, or its gradient, over axes
    other than the last alone (the columns, a token's (positions,
    features) with a gain of that shape, every axis), on one thread: the
    forward into out=, the gradient with a gain, allocating."""
    params = [["layer_norm", "rms_norm", "layer_norm_backward", "rms_norm_backward"],
              ["axis=0 (32, 768)", "axis=(1, 2) (4, 16, 64), gain", "axis=None (1, 256)"]]
    param_names = ["func", "case"]

    def setup(self, func, case):
        import fastnorm
        spelled, shape = case.split(" (", 1)
        shape = tuple(int(s) for s in shape.split(")")[0].split(","))
        axis = {"axis=0": 0, "axis=(1, 2)": (1, 2), "axis=None": None}[spelled]
        named = tuple(n for a, n in enumerate(shape)
                      if axis is None or a in (axis if isinstance(axis, tuple) else (axis,)))
        rng = np.random.default_rng(0)
        x, dy = (rng.standard_normal(shape).astype(np.float32) for _ in range(2))
        out = np.empty_like(x)
        gain = rng.uniform(0.5, 2, named).astype(np.float32)
        if func == "layer_norm_backward":
            _, mean, rstd = fastnorm.layer_norm(x, gain, axis=axis, return_stats=True)
            self._start(lambda: fastnorm.layer_norm_backward(dy, x, mean, rstd, gain, axis=axis))
        elif func == "rms_norm_backward":
            _, rstd = fastnorm.rms_norm(x, gain, axis=axis, return_stats=True)
            self._start(lambda: fastnorm.rms_norm_backward(dy, x, rstd, gain, axis=axis))
        else:
            gamma = gain if "gain" in case else None
            f = getattr(fastnorm, func)
            self._start(lambda: f(x, gamma, axis=axis, out=out))


class SmallGroupNorm(_OneCall):
    """A small float32 group_norm (8 groups), instance_norm or group_norm's
    gradients (with the gain, if any) of images between convolutions,
    allocating, on one thread."""
    params = [["group_norm", "instance_norm", "group_norm_backward"],
              ["(8, 64, 7, 7)", "(8, 64, 7, 7), gain and bias", "(1, 32, 16, 16), gain and bias"]]
    param_names = ["func", "case"]

    def setup(self, func, case):
        import fastnorm
        shape = tuple(int(s) for s in case.split(")")[0].strip("(").split(","))
        rng = np.random.default_rng(0)
        x = rng.standard_normal(shape).astype(np.float32)
        params = ()
        if "gain" in case:
            params = (rng.uniform(0.5, 2, shape[1]).astype(np.float32),
                      rng.standard_normal(shape[1]).astype(np.float32))
        if func == "group_norm":
            self._start(lambda: fastnorm.group_norm(x, 8, *params))
        elif func == "group_norm_backward":
            _, mean, rstd = fastnorm.group_norm(x, 8, *params, return_stats=True)
            dy = rng.standard_normal(shape).astype(np.float32)
            gamma = params[0] if params else None
            self._start(lambda: fastnorm.group_norm_backward(dy, x, mean, rstd, 8, gamma))
        else:
            self._start(lambda: fastnorm.instance_norm(x, *params))


# python -m fastnorm's small calls (fastnorm._small_calls), by label and
# spelling: the union of every call's spellings (a call skips the others).
SPELLED_CALLS = ("layer_norm (32, 768)", "rms_norm (32, 768)", "layer_norm (1, 256)",
                 "rms_norm (1, 256)", "batch_norm (32, 768)", "mean_var (32, 768)")
SPELLINGS = ("axis=-1", "axis=1", "axis=(1,)", "axis=0", "default axis", "axis=(0,)",
             "eps=1e-5", "out=")


class Spelling(_OneCall):
    """One small float32 call on one thread, spelled one way: every
    spelling of a call should cost the same (python -m fastnorm's small
    calls, which set the targets)."""
    params = [list(SPELLED_CALLS), list(SPELLINGS)]
    param_names = ["call", "spelling"]

    def setup(self, call, spelling):
        try:
            from fastnorm import _small_calls
        except ImportError:
            raise NotImplementedError("no small-call table in this version")
        found = [c for c in _small_calls.SMALL_CALLS if c.label == call]
        if not found or spelling not in dict(found[0].spellings):
            raise NotImplementedError(f"{call} is not spelled {spelling}")
        x = np.random.default_rng(0).standard_normal(found[0].shape).astype(np.float32)
        self._start(_small_calls.callables(found[0], x)[spelling])


class Where:
    """where= and masked arrays beside the unmasked call, float32: layer
    norm over rows with padded rows, batch norm over padded sequences
    (N, T, C) with a (N, T, 1) mask, mean_var over rows; "where_random",
    a random half of x's values."""
    params = [["layer_norm", "batch_norm", "mean_var"],
              ["none", "where", "masked_array", "where_random"]]
    param_names = ["func", "selection"]

    def setup(self, func, selection):
        import fastnorm
        if selection != "none" and "where" not in inspect.signature(fastnorm.mean_var).parameters:
            raise NotImplementedError("where= is not in this version")
        rng = np.random.default_rng(0)
        if func == "batch_norm":
            shape, mask_shape = (64, 256, 256), (64, 256, 1)
        else:
            shape, mask_shape = (4096, 1024), (4096, 1)
        self.x = rng.standard_normal(shape).astype(np.float32)
        keep = rng.random(mask_shape) < 0.8
        self.where = keep if selection == "where" else None
        if selection == "where_random":
            self.where = rng.random(shape) < 0.5
        if selection == "masked_array":
            self.x = np.ma.array(self.x, mask=~np.broadcast_to(keep, shape))
        self.func = func
        # Padded rows are empty slices, which warn as NumPy's do.
        warnings.filterwarnings("ignore", "Mean of empty slice|Degrees of freedom", RuntimeWarning)
        self.time_call(func, selection)

    def time_call(self, func, selection):
        import fastnorm
        if self.func == "layer_norm":
            fastnorm.layer_norm(self.x, where=self.where)
        elif self.func == "batch_norm":
            fastnorm.batch_norm(self.x, axis=(0, 1), where=self.where)
        else:
            fastnorm.mean_var(self.x, -1, where=self.where)


def _missing_values_available():
    import fastnorm
    if "nan_policy" not in inspect.signature(fastnorm.mean_var).parameters:
        raise NotImplementedError("nan_policy is not in this version")


class MissingValues:
    """nan_policy="omit" beside "propagate" on the same data, float32
    (4096, 1024), one thread: over rows (axis -1) and columns (axis 0), on
    data without NaN and with 10% of its values NaN; zscore among them."""
    params = [["mean_var", "layer_norm", "batch_norm", "zscore"], ["rows", "columns"],
              ["no_nan", "nan_10"], ["propagate", "omit"]]
    param_names = ["func", "axis", "data", "policy"]

    def setup(self, func, axis, data, policy):
        import fastnorm
        _missing_values_available()
        rng = np.random.default_rng(0)
        self.x = rng.standard_normal((4096, 1024)).astype(np.float32)
        if data == "nan_10":
            self.x[rng.random(self.x.shape) < 0.1] = np.nan
        self.out = np.empty_like(self.x)
        self.axis = -1 if axis == "rows" else 0
        fastnorm.set_num_threads(1)
        warnings.filterwarnings("ignore", "Mean of empty slice|Degrees of freedom", RuntimeWarning)
        self.time_call(func, axis, data, policy)

    def teardown(self, *args):
        import fastnorm
        fastnorm.set_num_threads(None)

    def time_call(self, func, axis, data, policy):
        import fastnorm
        if func == "mean_var":
            fastnorm.mean_var(self.x, self.axis, nan_policy=policy)
        elif func == "batch_norm":
            fastnorm.batch_norm(self.x, axis=self.axis, out=self.out, nan_policy=policy)
        else:
            getattr(fastnorm, func)(self.x, axis=self.axis, out=self.out, nan_policy=policy)


class ZscoreYardsticks:
    """The yardsticks of fastnorm's zscore on MissingValues' arrays without
    NaN: scipy.stats.zscore (where SciPy is installed), and its formula in
    NumPy (the mean, the standard deviation, then the scores)."""
    params = [["rows", "columns"], ["scipy", "numpy"]]
    param_names = ["axis", "code"]

    def setup(self, axis, code):
        if code == "scipy":
            try:
                from scipy import stats
            except ImportError:
                raise NotImplementedError("SciPy is not installed")
            self.zscore = stats.zscore
        else:
            def numpy_zscore(x, axis):
                m = x.mean(axis, keepdims=True)
                return (x - m) / x.std(axis, keepdims=True)
            self.zscore = numpy_zscore
        self.x = np.random.default_rng(0).standard_normal((4096, 1024)).astype(np.float32)
        self.axis = -1 if axis == "rows" else 0

    def time_zscore(self, axis, code):
        self.zscore(self.x, axis=self.axis)


class Streams:
    """A data set of (1e6, 64) float32 in 100 chunks (views, 256 MB: read
    from memory): Moments.update on a chunk beside mean_var on it (each call
    the stream's next chunk), the whole stream through Moments, and
    scikit-learn's StandardScaler.partial_fit on the same chunks."""
    params = [["mean_var_chunk", "moments_chunk", "moments_stream", "sklearn_stream"]]
    param_names = ["call"]

    def setup(self, call):
        import fastnorm
        if not hasattr(fastnorm, "Moments"):
            raise NotImplementedError("Moments is not in this version")
        if call == "sklearn_stream":
            try:
                from sklearn.preprocessing import StandardScaler
            except ImportError:
                raise NotImplementedError("scikit-learn is not installed")
            self.scaler = StandardScaler
        self.chunks = np.array_split(
            np.random.default_rng(0).standard_normal((1_000_000, 64), dtype=np.float32), 100)
        self.next = 0
        fastnorm.set_num_threads(1)

    def teardown(self, call):
        import fastnorm
        fastnorm.set_num_threads(None)

    def time_call(self, call):
        import fastnorm
        if call in ("mean_var_chunk", "moments_chunk"):
            chunk = self.chunks[self.next]
            self.next = (self.next + 1) % len(self.chunks)
            if call == "mean_var_chunk":
                fastnorm.mean_var(chunk, 0)
            else:
                fastnorm.Moments(0).update(chunk)
        elif call == "moments_stream":
            m = fastnorm.Moments(0)
            for c in self.chunks:
                m.update(c)
        else:
            s = self.scaler()
            for c in self.chunks:
                s.partial_fit(c)
