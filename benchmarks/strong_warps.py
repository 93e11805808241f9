"""A second warped-digit set, written apart from ``ticlust.datasets.warped_digits`` (issue 15), with stronger warps.

Ten base digits — the first image of each class in MNIST-test (a fixed, documented rule, no draw) —
each warped ``n_warps`` times by a random affine map about the image centre (rotation uniform in
±30°, isotropic scale uniform in 0.8–1.2, shear uniform in ±0.2, no translation) composed with a
thin-plate spline whose 4×4 control points (a grid spanning the image, corner to corner) move by
independent N(0, 1.5 px) offsets. Sampling is bilinear with zeros outside. Only NumPy and SciPy are
used, so this data set shares no code with the library it evaluates.
"""
from __future__ import annotations

import numpy as np
from scipy import ndimage


def first_of_each_class(images: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The first image of every class (in class order), scaled to [0, 1], and their indices."""
    labels = np.asarray(labels).ravel()
    index = np.array([np.flatnonzero(labels == c)[0] for c in np.unique(labels)])
    base = np.asarray(images)[index].astype(np.float64)
    return (base - base.min()) / (base.max() - base.min()), index


def _tps_radial(r2: np.ndarray) -> np.ndarray:
    """The thin-plate kernel U = r² log r, written with r² (U(0) = 0)."""
    return np.where(r2 > 0, 0.5 * r2 * np.log(np.maximum(r2, 1e-300)), 0.0)


def tps_basis(size: int, grid: int) -> np.ndarray:
    """(size², grid²) matrix B: the TPS displacement at every pixel (row-major) is B @ (control offsets)."""
    ctrl = np.stack(np.meshgrid(np.linspace(0, size - 1, grid), np.linspace(0, size - 1, grid)), -1).reshape(-1, 2)
    m = len(ctrl)
    poly = np.hstack([np.ones((m, 1)), ctrl])
    system = np.zeros((m + 3, m + 3))
    system[:m, :m] = _tps_radial(((ctrl[:, None] - ctrl[None]) ** 2).sum(-1))
    system[:m, m:] = poly
    system[m:, :m] = poly.T
    solve = np.linalg.inv(system)[:, :m]                 # (m + 3, m): offsets → (weights, affine part)
    pix = np.stack(np.meshgrid(np.arange(size), np.arange(size)), -1).reshape(-1, 2).astype(np.float64)
    rows = np.hstack([_tps_radial(((pix[:, None] - ctrl[None]) ** 2).sum(-1)), np.ones((len(pix), 1)), pix])
    return rows @ solve


def random_linear_maps(rng: np.random.Generator, n: int, rotation: float, scale: tuple[float, float],
                       shear: float) -> np.ndarray:
    """(n, 2, 2) forward maps rotation · shear · zoom, acting on (x, y) offsets from the centre."""
    angle = np.deg2rad(rng.uniform(-rotation, rotation, n))
    zoom = rng.uniform(*scale, n)
    sh = rng.uniform(-shear, shear, n)
    c, s = np.cos(angle), np.sin(angle)
    rot = np.stack([np.stack([c, -s], -1), np.stack([s, c], -1)], -2)
    shr = np.tile(np.eye(2), (n, 1, 1))
    shr[:, 0, 1] = sh
    return rot @ shr * zoom[:, None, None]


def strong_warps(images: np.ndarray, labels: np.ndarray, n_warps: int = 100, seed: int = 0, rotation: float = 30.0,
                 scale: tuple[float, float] = (0.8, 1.2), shear: float = 0.2, tps_sigma: float = 1.5,
                 tps_grid: int = 4) -> dict[str, np.ndarray]:
    """``n_warps`` warped copies of each class's first image: ``x`` (C·n_warps, H, W) float32 in [0, 1],
    class-major, ``y`` their classes 0..C-1 and ``base_index`` the base images' indices. Square images only."""
    base, index = first_of_each_class(images, labels)
    size = base.shape[1]
    rng = np.random.default_rng(seed)
    n = len(base) * n_warps
    inverse = np.linalg.inv(random_linear_maps(rng, n, rotation, scale, shear))
    offsets = rng.normal(0.0, tps_sigma, (n, tps_grid * tps_grid, 2))
    basis = tps_basis(size, tps_grid)
    pix = np.stack(np.meshgrid(np.arange(size), np.arange(size)), -1).reshape(-1, 2).astype(np.float64)
    centre = (size - 1) / 2
    out = np.empty((n, size, size), np.float32)
    for i in range(n):
        bent = pix + basis @ offsets[i] - centre          # TPS first, then the inverse of the forward affine map
        src = bent @ inverse[i].T + centre               # (x, y) read in the base image
        out[i] = ndimage.map_coordinates(base[i // n_warps], [src[:, 1], src[:, 0]], order=1, mode="constant",
                                         cval=0.0).reshape(size, size)
    return {"x": np.clip(out, 0, 1), "y": np.repeat(np.arange(len(base)), n_warps), "base_index": index}
