"""Softmax cross-entropy, minibatches, plain SGD and the training loop."""
import numpy as np


def softmax_cross_entropy(logits, labels):
    """Mean loss over the batch and its gradient with respect to the logits."""
    z = logits - logits.max(axis=1, keepdims=True)
    log_p = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    n = len(labels)
    loss = -log_p[np.arange(n), labels].mean()
    grad = np.exp(log_p)
    grad[np.arange(n), labels] -= 1
    return float(loss), grad / n


def batches(n, batch_size, rng):
    """Indices of shuffled minibatches covering range(n) (the last one may be
    smaller; none of size 1, which batch norm cannot train on)."""
    order = rng.permutation(n)
    cuts = list(range(batch_size, n, batch_size))
    if cuts and n - cuts[-1] < 2:
        cuts.pop()
    return np.split(order, cuts)


def sgd_step(model, x, labels, lr):
    """One step of plain SGD on a batch; returns the batch loss."""
    for layer in model.layers:
        layer.zero_grad()
    logits, cache = model.forward(x, training=True)
    loss, dlogits = softmax_cross_entropy(logits, labels)
    model.backward(dlogits.astype(logits.dtype), cache)
    for layer in model.layers:
        for name, p in layer.params.items():
            p -= lr * layer.grads[name]
    return loss


def accuracy(model, x, labels):
    logits, _ = model.forward(x, training=False)
    return float((logits.argmax(axis=1) == labels).mean())


def fit(model, x, labels, *, epochs, batch_size, lr, seed=0, log=None):
    """Train for `epochs` passes over (x, labels); returns the mean loss of
    each epoch.  `log(epoch, loss)` is called after each."""
    rng = np.random.default_rng(seed)
    history = []
    for epoch in range(1, epochs + 1):
        losses = [sgd_step(model, x[idx], labels[idx], lr)
                  for idx in batches(len(x), batch_size, rng)]
        history.append(float(np.mean(losses)))
        if log is not None:
            log(epoch, history[-1])
    return history
