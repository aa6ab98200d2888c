"""Synthetic 8x8 digits: a 5x7 font placed at random positions, with missing
ink, speckles, noise, and a contrast and brightness of its own per image (the
variation that normalization layers take out)."""
import numpy as np

FONT = {
    0: ["01110", "10001", "10011", "10101", "11001", "10001", "01110"],
    1: ["00100", "01100", "00100", "00100", "00100", "00100", "01110"],
    2: ["01110", "10001", "00001", "00010", "00100", "01000", "11111"],
    3: ["11111", "00010", "00100", "00010", "00001", "10001", "01110"],
    4: ["00010", "00110", "01010", "10010", "11111", "00010", "00010"],
    5: ["11111", "10000", "11110", "00001", "00001", "10001", "01110"],
    6: ["00110", "01000", "10000", "11110", "10001", "10001", "01110"],
    7: ["11111", "00001", "00010", "00100", "01000", "01000", "01000"],
    8: ["01110", "10001", "10001", "01110", "10001", "10001", "01110"],
    9: ["01110", "10001", "10001", "01111", "00001", "00010", "01100"],
}
GLYPHS = np.array([[[c == "1" for c in row] for row in FONT[d]] for d in range(10)],
                  dtype=np.float64)  # (10, 7, 5)


def synthetic_digits(n, rng, size=8, dropout=0.1, speckle=0.03, noise=0.2):
    """n images (n, size * size) and their labels (n,)."""
    labels = rng.integers(0, 10, n)
    images = np.zeros((n, size, size))
    rows = rng.integers(0, size - 7 + 1, n)
    cols = rng.integers(0, size - 5 + 1, n)
    for i in range(n):
        images[i, rows[i]:rows[i] + 7, cols[i]:cols[i] + 5] = GLYPHS[labels[i]]
    images *= rng.random(images.shape) >= dropout
    images = np.maximum(images, rng.random(images.shape) < speckle)
    images += noise * rng.standard_normal(images.shape)
    contrast = rng.uniform(0.5, 2.0, (n, 1, 1))
    brightness = rng.uniform(-0.5, 0.5, (n, 1, 1))
    return (brightness + contrast * images).reshape(n, size * size), labels


def train_test(n_train=4000, n_test=1000, seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    x_train, y_train = synthetic_digits(n_train, rng)
    x_test, y_test = synthetic_digits(n_test, rng)
    return x_train.astype(dtype), y_train, x_test.astype(dtype), y_test
