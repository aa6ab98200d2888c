"""asv benchmarks for ways of calling: small calls allocating their output
or writing into ``out=`` (the fast path's cost beside the kernel's), and
where= / masked arrays beside the unmasked call on the same data."""
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


class Where:
    """where= and masked arrays beside the unmasked call, float32: layer
    norm over rows with padded rows, batch norm over padded sequences
    (N, T, C) with a (N, T, 1) mask, mean_var over rows."""
    params = [["layer_norm", "batch_norm", "mean_var"], ["none", "where", "masked_array"]]
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
