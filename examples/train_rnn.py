"""Train a recurrent network with layer normalization at every time step
(Ba et al.) on the synthetic digits read one row of pixels per step, with
fastnorm's layer_norm and layer_norm_backward and plain SGD.

    python examples/train_rnn.py [--epochs 15] [--numpy] [--float64]
"""
import argparse

import numpy as np

from npnet.data import train_test
from npnet.layers import FASTNORM, NUMPY
from npnet.models import LayerNormRNN
from npnet.training import accuracy, fit


def as_sequences(x):
    """(N, 64) images -> (N, 8 steps, 8 pixels): one row per step."""
    return x.reshape(len(x), 8, 8)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epochs", type=int, default=15)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.2)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--numpy", action="store_true", help="NumPy reference layers")
    ap.add_argument("--float64", action="store_true", help="float64 instead of float32")
    args = ap.parse_args(argv)

    dtype = np.float64 if args.float64 else np.float32
    x_train, y_train, x_test, y_test = train_test(seed=args.seed, dtype=dtype)
    x_train, x_test = as_sequences(x_train), as_sequences(x_test)
    model = LayerNormRNN(x_train.shape[2], args.hidden, 10,
                         norms=NUMPY if args.numpy else FASTNORM, dtype=dtype, seed=args.seed)
    print(f"{len(x_train)} sequences of {x_train.shape[1]} steps x {x_train.shape[2]} pixels; "
          f"{'NumPy' if args.numpy else 'fastnorm'} layers, {np.dtype(dtype).name}")
    history = fit(model, x_train, y_train, epochs=args.epochs, batch_size=args.batch_size,
                  lr=args.lr, seed=args.seed,
                  log=lambda e, loss: print(f"epoch {e:3d}  loss {loss:.4f}"))
    acc = accuracy(model, x_test, y_test)
    print(f"test accuracy: {acc:.3f}")
    return history, acc


if __name__ == "__main__":
    main()
