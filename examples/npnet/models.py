"""Two models whose normalization layers are a parameter: ``norms`` is
``layers.FASTNORM`` (fastnorm's kernels) or ``layers.NUMPY`` (the same
mathematics in NumPy).  With one seed both start from the same weights."""
import numpy as np

from .layers import FASTNORM, Linear, ReLU, Tanh


class MLP:
    """Linear -> BatchNorm -> ReLU -> Linear -> LayerNorm -> ReLU -> Linear.

    The linear layers in front of a normalization have no bias: the
    normalization's beta takes its place."""

    def __init__(self, n_in, n_hidden, n_out, norms=FASTNORM, dtype=np.float32, seed=0):
        rng = np.random.default_rng(seed)
        self.layers = [
            Linear(n_in, n_hidden, rng, dtype, bias=False),
            norms["batch_norm"](n_hidden, dtype),
            ReLU(),
            Linear(n_hidden, n_hidden, rng, dtype, bias=False),
            norms["layer_norm"](n_hidden, dtype),
            ReLU(),
            Linear(n_hidden, n_out, rng, dtype),
        ]

    def forward(self, x, training=True):
        caches = []
        for layer in self.layers:
            x, cache = layer.forward(x, training)
            caches.append(cache)
        return x, caches

    def backward(self, dy, caches):
        for layer, cache in zip(reversed(self.layers), reversed(caches)):
            dy = layer.backward(dy, cache)
        return dy


class LayerNormRNN:
    """A recurrent network with layer normalization at every time step (Ba et
    al., section 3.1): the summed inputs ``a_t = x_t W_x + h_{t-1} W_h`` are
    normalized with one gain and bias shared by all steps,
    ``h_t = tanh(LN(a_t))``, and the last state is classified,
    ``logits = h_T W_o + b_o``.  x has shape (N, T, features)."""

    def __init__(self, n_in, n_hidden, n_out, norms=FASTNORM, dtype=np.float32, seed=0):
        rng = np.random.default_rng(seed)
        self.wx = Linear(n_in, n_hidden, rng, dtype, bias=False)
        self.wh = Linear(n_hidden, n_hidden, rng, dtype, bias=False,
                         scale=1.0 / np.sqrt(n_hidden))
        self.norm = norms["layer_norm"](n_hidden, dtype)
        self.tanh = Tanh()
        self.out = Linear(n_hidden, n_out, rng, dtype)
        self.layers = [self.wx, self.wh, self.norm, self.tanh, self.out]

    def forward(self, x, training=True):
        n, steps, _ = x.shape
        h = np.zeros((n, self.wh.params["W"].shape[0]), x.dtype)
        caches = []
        for t in range(steps):
            a_x, c_x = self.wx.forward(x[:, t], training)
            a_h, c_h = self.wh.forward(h, training)
            z, c_n = self.norm.forward(a_x + a_h, training)
            h, c_t = self.tanh.forward(z, training)
            caches.append((c_x, c_h, c_n, c_t))
        logits, c_o = self.out.forward(h, training)
        return logits, (caches, c_o)

    def backward(self, dy, cache):
        """Backpropagation through time; the shared parameters' gradients
        add up over the steps."""
        caches, c_o = cache
        dh = self.out.backward(dy, c_o)
        for c_x, c_h, c_n, c_t in reversed(caches):
            da = self.norm.backward(self.tanh.backward(dh, c_t), c_n)
            self.wx.backward(da, c_x)
            dh = self.wh.backward(da, c_h)
        return None
