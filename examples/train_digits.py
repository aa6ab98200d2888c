"""Train an MLP with batch and layer normalization on synthetic 8x8 digits,
with fastnorm's forward and backward kernels and plain SGD.

    python examples/train_digits.py [--epochs 10] [--numpy] [--float64]

--numpy runs the same model on the NumPy reference layers instead.
"""
import argparse

import numpy as np

from npnet.data import train_test
from npnet.layers import FASTNORM, NUMPY
from npnet.models import MLP
from npnet.training import accuracy, fit


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.2)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--numpy", action="store_true", help="NumPy reference layers")
    ap.add_argument("--float64", action="store_true", help="float64 instead of float32")
    args = ap.parse_args(argv)

    dtype = np.float64 if args.float64 else np.float32
    x_train, y_train, x_test, y_test = train_test(seed=args.seed, dtype=dtype)
    model = MLP(x_train.shape[1], args.hidden, 10, norms=NUMPY if args.numpy else FASTNORM,
                dtype=dtype, seed=args.seed)
    print(f"{len(x_train)} training and {len(x_test)} test images of {x_train.shape[1]} "
          f"pixels; {'NumPy' if args.numpy else 'fastnorm'} layers, {np.dtype(dtype).name}")
    print(f"test accuracy before training: {accuracy(model, x_test, y_test):.3f}")
    history = fit(model, x_train, y_train, epochs=args.epochs, batch_size=args.batch_size,
                  lr=args.lr, seed=args.seed,
                  log=lambda e, loss: print(f"epoch {e:3d}  loss {loss:.4f}"))
    acc = accuracy(model, x_test, y_test)
    print(f"test accuracy: {acc:.3f}")
    return history, acc


if __name__ == "__main__":
    main()
