"""The example network (examples/npnet) trains with fastnorm's forward and
backward passes, and matches the same network on NumPy reference layers
step for step in float64."""
import os
import subprocess
import sys

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")
sys.path.insert(0, EXAMPLES)

from npnet.data import train_test  # noqa: E402
from npnet.layers import FASTNORM, NUMPY, BatchNorm, LayerNorm  # noqa: E402
from npnet.models import MLP, LayerNormRNN  # noqa: E402
from npnet.training import (accuracy, batches, fit, sgd_step,  # noqa: E402
                            softmax_cross_entropy)
from reference import assert_close  # noqa: E402


@pytest.fixture(autouse=True)
def _one_blas_thread():
    # Small matrix products: BLAS threads only contend with the kernels' own.
    with threadpool_limits(1, user_api="blas"):
        yield


@pytest.fixture(scope="module")
def digits32():
    return train_test(n_train=1500, n_test=500, seed=1, dtype=np.float32)


def _loss(model, x, labels, training=True):
    logits, _ = model.forward(x, training=training)
    return softmax_cross_entropy(logits, labels)[0]


def test_mlp_learns(digits32):
    x, y, x_test, y_test = digits32
    model = MLP(64, 64, 10, norms=FASTNORM, dtype=np.float32, seed=0)
    start = _loss(model, x, y)
    assert 1.5 < start < 4.0, start  # about log(10)
    history = fit(model, x, y, epochs=4, batch_size=32, lr=0.2, seed=0)
    assert history[-1] < 0.4 * start, (start, history)
    assert all(np.diff(history) < 0), history
    assert _loss(model, x, y, training=False) < 0.4 * start
    assert accuracy(model, x_test, y_test) > 0.7  # chance is 0.1
    for layer in model.layers:
        for name, p in layer.params.items():
            assert p.dtype == np.float32 and np.isfinite(p).all(), (layer, name)


def test_layer_norm_rnn_learns(digits32):
    x, y, x_test, y_test = digits32
    seqs, seqs_test = x.reshape(-1, 8, 8), x_test.reshape(-1, 8, 8)
    model = LayerNormRNN(8, 48, 10, norms=FASTNORM, dtype=np.float32, seed=0)
    start = _loss(model, seqs, y)
    history = fit(model, seqs, y, epochs=8, batch_size=32, lr=0.2, seed=0)
    assert history[-1] < 0.5 * start, (start, history)
    assert accuracy(model, seqs_test, y_test) > 0.35  # chance is 0.1


def _params(model):
    out = {}
    for k, layer in enumerate(model.layers):
        for name, p in layer.params.items():
            out[f"{k}.{name}"] = p
        if isinstance(layer, BatchNorm):
            out[f"{k}.running_mean"] = layer.running_mean
            out[f"{k}.running_var"] = layer.running_var
    return out


def _grads(model):
    return {f"{k}.{name}": g for k, layer in enumerate(model.layers)
            for name, g in layer.grads.items()}


def _assert_same(a, b, rtol, what):
    assert a.keys() == b.keys()
    for k in a:
        scale = np.abs(b[k]).max(initial=0.0) + 1e-300
        assert_close(a[k], b[k], rtol * scale, f"{what} {k}")


@pytest.mark.parametrize("arch", ["mlp", "rnn"])
def test_fastnorm_matches_numpy_reference(arch):
    x, y, _, _ = train_test(n_train=400, n_test=10, seed=2, dtype=np.float64)
    if arch == "mlp":
        fast = MLP(64, 48, 10, norms=FASTNORM, dtype=np.float64, seed=3)
        ref = MLP(64, 48, 10, norms=NUMPY, dtype=np.float64, seed=3)
    else:
        x = x.reshape(-1, 8, 8)
        fast = LayerNormRNN(8, 24, 10, norms=FASTNORM, dtype=np.float64, seed=3)
        ref = LayerNormRNN(8, 24, 10, norms=NUMPY, dtype=np.float64, seed=3)
    assert any(isinstance(layer, LayerNorm) for layer in fast.layers)
    assert not any(type(layer) in (LayerNorm, BatchNorm) for layer in ref.layers)
    _assert_same(_params(fast), _params(ref), 0, "initial")

    rng = np.random.default_rng(4)
    for step, idx in enumerate(batches(len(x), 40, rng)[:5]):
        lf = sgd_step(fast, x[idx], y[idx], lr=0.3)
        lr_ = sgd_step(ref, x[idx], y[idx], lr=0.3)
        assert abs(lf - lr_) <= 1e-12 * abs(lr_), (step, lf, lr_)
        _assert_same(_grads(fast), _grads(ref), 1e-10, f"step {step} gradient")
    _assert_same(_params(fast), _params(ref), 1e-10, "after 5 steps")
    # The parameters moved: the comparison is not of two untrained models.
    init = _params(MLP(64, 48, 10, dtype=np.float64, seed=3) if arch == "mlp"
                   else LayerNormRNN(8, 24, 10, dtype=np.float64, seed=3))
    assert max(np.abs(init[k] - p).max() for k, p in _params(fast).items()) > 1e-3

    # Eval mode (batch norm on its running statistics): outputs and gradients.
    outs = []
    for model in (fast, ref):
        for layer in model.layers:
            layer.zero_grad()
        logits, cache = model.forward(x[:50], training=False)
        model.backward(softmax_cross_entropy(logits, y[:50])[1], cache)
        outs.append((logits, _grads(model)))
    assert_close(outs[0][0], outs[1][0], 1e-10 * np.abs(outs[1][0]).max(), "eval logits")
    _assert_same(outs[0][1], outs[1][1], 1e-10, "eval gradient")


def test_batches_cover_everything_without_singletons():
    rng = np.random.default_rng(0)
    for n in (1, 2, 63, 64, 65, 129):
        parts = batches(n, 64, rng)
        assert sorted(np.concatenate(parts).tolist()) == list(range(n))
        assert n == 1 or min(len(p) for p in parts) >= 2


def test_softmax_cross_entropy_gradient():
    rng = np.random.default_rng(0)
    logits, labels = rng.standard_normal((5, 4)), rng.integers(0, 4, 5)
    loss, grad = softmax_cross_entropy(logits, labels)
    h = 1e-6
    for i in np.ndindex(logits.shape):
        up, down = logits.copy(), logits.copy()
        up[i] += h
        down[i] -= h
        fd = (softmax_cross_entropy(up, labels)[0]
              - softmax_cross_entropy(down, labels)[0]) / (2 * h)
        assert abs(fd - grad[i]) < 1e-8


@pytest.mark.parametrize("script", ["train_digits.py", "train_rnn.py"])
def test_example_scripts_run(script):
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    res = subprocess.run([sys.executable, os.path.join(EXAMPLES, script), "--epochs", "2"],
                         capture_output=True, text=True, timeout=300, env=env,
                         cwd=os.path.dirname(os.path.abspath(__file__)))
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    losses = [float(line.split()[-1]) for line in lines if line.startswith("epoch")]
    assert len(losses) == 2 and losses[1] < losses[0], res.stdout
    assert lines[-1].startswith("test accuracy:"), res.stdout
    assert float(lines[-1].split()[-1]) > 0.2, res.stdout
