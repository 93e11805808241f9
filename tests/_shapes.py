"""Small image stacks that several test files build the same way: one definition each, imported where used."""
import numpy as np


def corner_squares():
    """80 images of 8×8 in four well-separated groups (a bright 4×4 square in one of the four corners, over
    uniform noise of 0.2) and their groups: 20 of each, in group order."""
    rng = np.random.default_rng(0)
    x = rng.random((80, 8, 8)).astype(np.float32) * 0.2
    y = np.repeat(np.arange(4), 20)
    for i, g in enumerate(y):
        r, c = divmod(int(g), 2)
        x[i, 4 * r:4 * r + 4, 4 * c:4 * c + 4] += 1.0
    return x, y


def noisy_prototypes(seed: int = 0, k: int = 3, n: int = 20, size: int = 8):
    """``n`` images of each of ``k`` random size×size prototypes (uniform 0-1) with Gaussian noise of 0.05, and
    their groups (float32, in group order)."""
    rng = np.random.default_rng(seed)
    protos = rng.uniform(0, 1, (k, size, size))
    labels = np.repeat(np.arange(k), n)
    return (protos[labels] + 0.05 * rng.standard_normal((k * n, size, size))).astype(np.float32), labels
