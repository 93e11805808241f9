"""Small image stacks that several test files build the same way: one definition each, imported where used."""
import math

import numpy as np
import torch

from ticlust.transforms.core import affine_grid, affine_inverse, warp
from ticlust.transforms.rigid import pose_theta


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


def blob_pattern(seed: int = 0, size: int = 24) -> torch.Tensor:
    """An asymmetric blob pattern (no rotational or mirror symmetry), (1, 1, size, size)."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32)
    c = (size - 1) / 2
    img = np.exp(-((yy - c) ** 2 + (xx - c) ** 2) / (2 * (size / 6) ** 2))
    for _ in range(3):
        cy, cx = c + rng.uniform(-size / 4, size / 4, 2)
        img += rng.uniform(0.5, 1.0) * np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * rng.uniform(1.0, 2.0) ** 2))
    return torch.from_numpy(img.astype(np.float32))[None, None]


def posed(mu: torch.Tensor, angle, flip, shift) -> torch.Tensor:
    """Items x(p) = mu(T⁻¹ p) for the poses T = (angle, flip, shift): (B, 1, H, W)."""
    theta = pose_theta(torch.as_tensor(angle, dtype=torch.float32), torch.as_tensor(flip),
                       torch.as_tensor(shift, dtype=torch.float32), tuple(mu.shape[-2:]))
    return warp(mu.expand(len(theta), -1, -1, -1), affine_grid(affine_inverse(theta), tuple(mu.shape[-2:])), padding_mode="zeros")


def turned_set(n_per: int = 12, flip: bool = False, seed: int = 0):
    rng = np.random.default_rng(seed)
    protos = [blob_pattern(s) for s in (2, 3, 4)]
    xs, ys = [], []
    for label, mu in enumerate(protos):
        angles = rng.uniform(0, 2 * math.pi, n_per)
        flips = rng.random(n_per) < 0.5 if flip else np.zeros(n_per, bool)
        xs.append(posed(mu, angles, flips, rng.integers(-1, 2, (n_per, 2)).astype(np.float32))[:, 0].numpy())
        ys += [label] * n_per
    order = rng.permutation(len(ys))
    return np.concatenate(xs)[order], np.asarray(ys)[order]
