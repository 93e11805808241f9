"""The toy data sets of the ST K-means paper (App. F), made from any labelled image set.

*Rigid MNIST*: one randomly drawn instance per class, each warped by ``n_transforms`` random affine
transformations; a third of the warped copies of every class is held out for testing.
*Non-rigid MNIST*: the same plus a random thin-plate-spline warp on top of every affine one.
The paper gives no ranges for the random transformations; ours are documented in docs/st_kmeans.md
and are the keyword defaults below. Everything is seeded and napari-free.
"""
from __future__ import annotations


import numpy as np
import torch
import torch.nn.functional as F

from ..errors import InputError, whole_number


def random_affines(rng: np.random.Generator, n: int, rotation: float = 30.0, scale: tuple[float, float] = (0.8, 1.2),
                   shear: float = 0.2, shift: float = 0.12) -> np.ndarray:
    """``n`` random affine sampling matrices (n, 2, 3) in normalised [-1, 1] coordinates.

    rotation in degrees (uniform ±), isotropic zoom drawn uniformly in ``scale``, shear uniform ±,
    translation uniform ± ``shift`` (fraction of the half image side, so 0.12 ≈ ±1.7 px on 28×28).
    """
    angle = np.deg2rad(rng.uniform(-rotation, rotation, n))
    zoom = rng.uniform(scale[0], scale[1], n)
    sh = rng.uniform(-shear, shear, n)
    t = rng.uniform(-shift, shift, (n, 2))
    cos, sin = np.cos(angle), np.sin(angle)
    rot = np.stack([np.stack([cos, -sin], -1), np.stack([sin, cos], -1)], -2)       # (n, 2, 2)
    shr = np.zeros((n, 2, 2))
    shr[:, 0, 0] = shr[:, 1, 1] = 1.0
    shr[:, 0, 1] = sh
    # a sampling matrix maps output coordinates to input coordinates, so a zoom by z samples at p / z
    lin = rot @ shr / zoom[:, None, None]
    return np.concatenate([lin, t[:, :, None]], axis=2).astype(np.float32)


def _pick_instances(images: np.ndarray, labels: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    images = np.asarray(images)
    labels = np.asarray(labels).ravel()
    if images.ndim != 3:
        raise InputError(f"The images have shape {images.shape}: give a grey-level stack shaped N×H×W.")
    if labels.shape[0] != images.shape[0]:
        raise InputError(f"Got {labels.shape[0]} labels for {images.shape[0]} images: give one label per image.")
    classes = np.unique(labels)
    if len(classes) < 2:
        raise InputError("The labels hold a single class: give images of at least 2 classes.")
    index = np.array([rng.choice(np.flatnonzero(labels == c)) for c in classes])
    x = images[index].astype(np.float32)
    hi = float(x.max())
    if hi <= float(x.min()):
        raise InputError("The chosen instances are constant images: give images with some contrast.")
    x = (x - float(x.min())) / (hi - float(x.min()))
    return x, classes, index


def _split(n_classes: int, n_transforms: int, test_fraction: float, rng: np.random.Generator) -> np.ndarray:
    """A boolean test mask over class-major copies: round(test_fraction·n) copies of every class."""
    n_test = int(round(test_fraction * n_transforms))
    mask = np.zeros((n_classes, n_transforms), dtype=bool)
    for c in range(n_classes):
        mask[c, rng.choice(n_transforms, n_test, replace=False)] = True
    return mask.ravel()


def _warp(x: np.ndarray, grids: torch.Tensor) -> np.ndarray:
    """Bilinear sampling of each instance x[c] (C, H, W) on grids (C, T, H, W, 2), zero outside."""
    c, t, h, w, _ = grids.shape
    src = torch.from_numpy(x)[:, None]                                   # (C, 1, H, W)
    out = F.grid_sample(src, grids.reshape(c, t * h, w, 2), mode="bilinear", padding_mode="zeros",
                        align_corners=False)
    return out.reshape(c, t, h, w).clamp(0, 1).numpy()


def _check(n_transforms, test_fraction):
    whole_number(n_transforms, "n_transforms", 3)
    if not 0 < test_fraction < 1:
        raise InputError(f"test_fraction = {test_fraction!r} must lie strictly between 0 and 1.")


def _package(warped, classes, index, test):
    n_classes, n_t = warped.shape[:2]
    x = warped.reshape(n_classes * n_t, *warped.shape[2:]).astype(np.float32)
    y = np.repeat(np.arange(n_classes), n_t)
    return {"x_train": x[~test], "y_train": y[~test], "x_test": x[test], "y_test": y[test],
            "classes": classes, "source_index": index}


def rigid_digits(images, labels, n_transforms: int = 100, test_fraction: float = 1 / 3, seed: int = 0,
                 **affine_ranges) -> dict[str, np.ndarray]:
    """Rigid MNIST (App. F) from any labelled grey image set.

    Returns ``x_train, y_train, x_test, y_test`` (float32 images in [0, 1], labels 0..C-1 in the
    order of ``classes``), ``classes`` and ``source_index`` (the chosen instance of each class).
    ``affine_ranges`` override the keyword ranges of :func:`random_affines`.
    """
    _check(n_transforms, test_fraction)
    rng = np.random.default_rng(seed)
    x, classes, index = _pick_instances(images, labels, rng)
    h, w = x.shape[1:]
    theta = torch.from_numpy(random_affines(rng, len(classes) * n_transforms, **affine_ranges))
    grids = F.affine_grid(theta, (len(theta), 1, h, w), align_corners=False)
    warped = _warp(x, grids.reshape(len(classes), n_transforms, h, w, 2))
    return _package(warped, classes, index, _split(len(classes), n_transforms, test_fraction, rng))


def random_tps(rng: np.random.Generator, n: int, grid_size: int = 4, strength: float = 0.08) -> np.ndarray:
    """``n`` random TPS control-point displacements (n, g², 2), normal with std ``strength``
    (normalised units, 0.08 ≈ 1.1 px on 28×28), clipped at 2.5 std so no warp folds badly."""
    disp = rng.normal(0.0, strength, (n, grid_size * grid_size, 2))
    return np.clip(disp, -2.5 * strength, 2.5 * strength).astype(np.float32)


def nonrigid_digits(images, labels, n_transforms: int = 100, test_fraction: float = 1 / 3, seed: int = 0,
                    tps_grid_size: int = 4, tps_strength: float = 0.08, **affine_ranges) -> dict[str, np.ndarray]:
    """Non-rigid MNIST (App. F): as :func:`rigid_digits`, each copy also bent by a random TPS.

    The sampling grid is the random affine map applied to a random thin-plate-spline grid
    (``tps_grid_size``² control points, displacement std ``tps_strength``), so every copy is an
    affine-and-elastic warp of its class's instance.
    """
    from ..transforms import affine_points, tps_grid

    _check(n_transforms, test_fraction)
    rng = np.random.default_rng(seed)
    x, classes, index = _pick_instances(images, labels, rng)
    h, w = x.shape[1:]
    n = len(classes) * n_transforms
    theta = torch.from_numpy(random_affines(rng, n, **affine_ranges))
    disp = torch.from_numpy(random_tps(rng, n, tps_grid_size, tps_strength))
    bent = tps_grid(disp, (h, w))                                         # (n, H, W, 2)
    params = (theta - torch.eye(2, 3)).reshape(n, 6)
    grids = affine_points(params, bent.reshape(n, -1, 2)).reshape(n, h, w, 2)
    warped = _warp(x, grids.reshape(len(classes), n_transforms, h, w, 2))
    return _package(warped, classes, index, _split(len(classes), n_transforms, test_fraction, rng))
