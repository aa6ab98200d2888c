"""Layers with explicit forward and backward passes.

Every layer holds its parameters in ``params`` and their gradients in
``grads`` (same keys).  ``forward(x, training)`` returns the output and a
cache; ``backward(dy, cache)`` returns the gradient with respect to x and
*adds* the parameter gradients to ``grads``, so a layer used at several time
steps (an RNN) sums its gradients over them.  ``zero_grad()`` clears them.

The normalization layers come twice, with the same parameters and the same
interface:

- ``LayerNorm``, ``BatchNorm``: fastnorm's forward (``return_stats=True``)
  and its backward, which takes the statistics the forward returned;
- ``NumpyLayerNorm``, ``NumpyBatchNorm``: the same mathematics written out in
  NumPy, as a reference.

A model takes one of the two sets, ``FASTNORM`` or ``NUMPY``.
"""
import numpy as np

import fastnorm


class Layer:
    def __init__(self):
        self.params, self.grads = {}, {}

    def zero_grad(self):
        for name, p in self.params.items():
            self.grads[name] = np.zeros_like(p)


class Linear(Layer):
    """y = x @ W + b, He-initialized."""

    def __init__(self, n_in, n_out, rng, dtype=np.float32, bias=True, scale=None):
        super().__init__()
        scale = np.sqrt(2.0 / n_in) if scale is None else scale
        self.params["W"] = (scale * rng.standard_normal((n_in, n_out))).astype(dtype)
        if bias:
            self.params["b"] = np.zeros(n_out, dtype)
        self.zero_grad()

    def forward(self, x, training=True):
        y = x @ self.params["W"]
        if "b" in self.params:
            y += self.params["b"]
        return y, x

    def backward(self, dy, x):
        self.grads["W"] += x.T @ dy
        if "b" in self.params:
            self.grads["b"] += dy.sum(axis=0)
        return dy @ self.params["W"].T


class ReLU(Layer):
    def forward(self, x, training=True):
        return np.maximum(x, 0), x > 0

    def backward(self, dy, positive):
        return dy * positive


class Tanh(Layer):
    def forward(self, x, training=True):
        y = np.tanh(x)
        return y, y

    def backward(self, dy, y):
        return dy * (1 - y * y)


# --------------------------------------------------------------------------
# normalization on fastnorm

class LayerNorm(Layer):
    """Layer normalization (Ba et al.) over the last axis: each row
    standardized over its features, then scaled by gamma and shifted by beta."""

    def __init__(self, n, dtype=np.float32, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.params["gamma"] = np.ones(n, dtype)
        self.params["beta"] = np.zeros(n, dtype)
        self.zero_grad()

    def forward(self, x, training=True):
        y, mean, rstd = fastnorm.layer_norm(x, self.params["gamma"], self.params["beta"],
                                            eps=self.eps, return_stats=True)
        return y, (x, mean, rstd)

    def backward(self, dy, cache):
        x, mean, rstd = cache
        dx, dgamma, dbeta = fastnorm.layer_norm_backward(dy, x, mean, rstd,
                                                         self.params["gamma"])
        self.grads["gamma"] += dgamma
        self.grads["beta"] += dbeta
        return dx


class BatchNorm(Layer):
    """Batch normalization (Ioffe & Szegedy) of (N, features): training
    normalizes with the batch statistics and updates the running ones; eval
    uses the running ones."""

    def __init__(self, n, dtype=np.float32, eps=1e-5, momentum=0.1):
        super().__init__()
        self.eps, self.momentum = eps, momentum
        self.params["gamma"] = np.ones(n, dtype)
        self.params["beta"] = np.zeros(n, dtype)
        self.running_mean = np.zeros(n, dtype)
        self.running_var = np.ones(n, dtype)
        self.zero_grad()

    def forward(self, x, training=True):
        y, mean, rstd = fastnorm.batch_norm(
            x, self.params["gamma"], self.params["beta"], self.running_mean,
            self.running_var, training=training, momentum=self.momentum, eps=self.eps,
            axis=0, return_stats=True)
        return y, (x, mean, rstd, training)

    def backward(self, dy, cache):
        x, mean, rstd, training = cache
        dx, dgamma, dbeta = fastnorm.batch_norm_backward(
            dy, x, mean, rstd, self.params["gamma"], axis=0, training=training)
        self.grads["gamma"] += dgamma
        self.grads["beta"] += dbeta
        return dx


# --------------------------------------------------------------------------
# the same in NumPy

class NumpyLayerNorm(LayerNorm):
    def forward(self, x, training=True):
        mean = x.mean(axis=-1, keepdims=True)
        var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
        rstd = 1 / np.sqrt(var + self.eps)
        xhat = (x - mean) * rstd
        return xhat * self.params["gamma"] + self.params["beta"], (xhat, rstd)

    def backward(self, dy, cache):
        xhat, rstd = cache
        self.grads["gamma"] += (dy * xhat).sum(axis=0)
        self.grads["beta"] += dy.sum(axis=0)
        g = dy * self.params["gamma"]
        return rstd * (g - g.mean(axis=-1, keepdims=True)
                       - xhat * (g * xhat).mean(axis=-1, keepdims=True))


class NumpyBatchNorm(BatchNorm):
    def forward(self, x, training=True):
        if training:
            n = x.shape[0]
            mean = x.mean(axis=0)
            var = ((x - mean) ** 2).mean(axis=0)
            m = self.momentum
            self.running_mean[...] = (1 - m) * self.running_mean + m * mean
            self.running_var[...] = (1 - m) * self.running_var + m * var * n / (n - 1)
        else:
            mean, var = self.running_mean, self.running_var
        rstd = 1 / np.sqrt(var + self.eps)
        xhat = (x - mean) * rstd
        return xhat * self.params["gamma"] + self.params["beta"], (xhat, rstd, training)

    def backward(self, dy, cache):
        xhat, rstd, training = cache
        self.grads["gamma"] += (dy * xhat).sum(axis=0)
        self.grads["beta"] += dy.sum(axis=0)
        g = dy * self.params["gamma"]
        if not training:  # the running statistics are constants
            return rstd * g
        return rstd * (g - g.mean(axis=0) - xhat * (g * xhat).mean(axis=0))


FASTNORM = {"layer_norm": LayerNorm, "batch_norm": BatchNorm}
NUMPY = {"layer_norm": NumpyLayerNorm, "batch_norm": NumpyBatchNorm}
