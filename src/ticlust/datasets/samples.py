"""The bundled sample data, made on the fly (no download): digits, warped glyphs, landmark shapes."""
from __future__ import annotations

import numpy as np

from ..errors import InputError
from .shapes import sample_landmarks
from .inner_nuclei import inner_nuclei_sample
from .nuclei import nuclei_sample


SAMPLES = {
    "digits": "1,797 handwritten digits (scikit-learn's bundled set), upsampled to 32×32, labels 0-9",
    "glyphs": "600 synthetic glyphs of 4 kinds under random affine and elastic warps, 32×32, with labels",
    "shapes": "100 landmark shapes (8 landmarks) from two mean shapes, rotated, shifted and noisy, with labels",
    "nuclei": "~290 nuclei (round, elongated, dividing) cut out of a generated 1024×1024 uint16 field, 32×32, with kinds",
    "inner-nuclei": "~285 nuclei of one outline distribution that differ inside (uniform, rim, foci, pole) at random angles, "
                    "cut out of a generated 1024×1024 uint16 field, 32×32, with kinds",
}


def sample(name: str, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A bundled sample stack and its labels, made without any download."""
    if name == "digits":
        return digits_sample()
    if name == "glyphs":
        return glyphs_sample(seed=seed)
    if name == "shapes":
        return sample_landmarks(seed=seed)
    if name == "nuclei":
        return nuclei_sample(seed=seed)
    if name == "inner-nuclei":
        return inner_nuclei_sample(seed=seed)
    raise InputError(f"Unknown sample {name!r}: choose one of {', '.join(SAMPLES)}.")


def digits_sample(size: int = 32) -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's 8×8 digits (shipped inside the package), upsampled with bilinear zoom."""
    from scipy.ndimage import zoom
    from sklearn.datasets import load_digits

    digits = load_digits()
    small = digits.images.astype(np.float32) / 16.0
    pad = np.pad(small, ((0, 0), (1, 1), (1, 1)))  # a blank border, as in MNIST
    big = zoom(pad, (1, size / 10, size / 10), order=1)
    return np.clip(big, 0, 1).astype(np.float32), digits.target.astype(np.int64)


def glyphs_sample(n_per_class: int = 150, size: int = 32, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Four glyphs (ring, cross, triangle, bar) under random affine + smooth elastic warps."""
    from scipy.ndimage import gaussian_filter, map_coordinates

    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32)
    c = (size - 1) / 2
    u, v = (xx - c) / (size / 2), (yy - c) / (size / 2)   # [-1, 1] coordinates
    r = np.hypot(u, v)
    glyphs = [
        np.clip(1 - np.abs(r - 0.5) / 0.12, 0, 1),                                           # ring
        np.clip(1 - np.minimum(np.abs(u), np.abs(v)) / 0.12, 0, 1) * (np.maximum(np.abs(u), np.abs(v)) < 0.6),  # cross
        ((v < 0.45) & (v > -0.55 + 1.7 * np.abs(u))).astype(np.float32),                       # triangle
        ((np.abs(u) < 0.15) & (np.abs(v) < 0.6)).astype(np.float32),                            # bar
    ]
    images, labels = [], []
    for label, glyph in enumerate(glyphs):
        glyph = gaussian_filter(glyph.astype(np.float32), 0.6)
        for _ in range(n_per_class):
            angle = rng.uniform(-0.5, 0.5)
            scale = rng.uniform(0.8, 1.15)
            shear = rng.uniform(-0.15, 0.15)
            rot = np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]])
            mat = rot @ np.array([[1, shear], [0, 1]]) / scale
            shift = rng.uniform(-2.5, 2.5, size=2)
            pts = np.stack([yy - c, xx - c]).reshape(2, -1)
            src = mat @ pts + c + shift[:, None]
            elastic = gaussian_filter(rng.normal(size=(2, size, size)), (0, 4, 4)) * 18.0
            src = src + elastic.reshape(2, -1)
            warped = map_coordinates(glyph, src, order=1, mode="constant").reshape(size, size)
            images.append(warped)
            labels.append(label)
    images = np.clip(np.stack(images), 0, 1).astype(np.float32)
    labels = np.asarray(labels, dtype=np.int64)
    order = rng.permutation(len(labels))
    return images[order], labels[order]
