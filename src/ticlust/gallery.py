"""Pictures a lab keeps (issue 18): per-cluster galleries and the prototype montage, as PNG files.

A cluster's gallery shows its members sorted by score (closest first), each beside its alignment with
the prototype where the method aligns (the result's ``aligned``); the montage shows every prototype.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .errors import InputError
from .result import ClusteringResult
from .validation import as_stack


def _rgb(tile: np.ndarray) -> np.ndarray:
    """One image (H, W) or (H, W, C) as an 8-bit RGB tile, scaled by its own range."""
    tile = np.asarray(tile, dtype=np.float64)
    if tile.ndim == 3:
        tile = tile[..., :3] if tile.shape[-1] >= 3 else tile.mean(-1)
    lo, hi = float(tile.min()), float(tile.max())
    tile = (tile - lo) / (hi - lo) if hi > lo else np.zeros_like(tile)
    if tile.ndim == 2:
        tile = np.repeat(tile[..., None], 3, axis=-1)
    return (tile * 255).round().astype(np.uint8)


def tile(images: list[np.ndarray], columns: int, gap: int = 2) -> np.ndarray:
    """Images of one size laid out row by row on a white canvas (RGB uint8)."""
    h, w = images[0].shape[:2]
    rows = -(-len(images) // columns)
    canvas = np.full((rows * (h + gap) + gap, columns * (w + gap) + gap, 3), 255, np.uint8)
    for i, image in enumerate(images):
        r, c = divmod(i, columns)
        canvas[gap + r * (h + gap): gap + r * (h + gap) + h, gap + c * (w + gap): gap + c * (w + gap) + w] = _rgb(image)
    return canvas


def cluster_gallery(result: ClusteringResult, images, cluster: int, max_items: int = 60, columns: int = 10) -> np.ndarray:
    """The members of ``cluster`` sorted by score, each beside its alignment when the result has one."""
    if np.asarray(result.prototypes).ndim < 3:
        raise InputError("Galleries are for image results: this result holds landmark shapes.")
    stack = as_stack(images, to_predict=True)
    if stack.n != result.n:
        raise InputError(f"The images are {stack.n} but the result has {result.n} items: give the stack it was fitted on.")
    members = np.flatnonzero(result.labels == cluster)
    if members.size == 0:
        raise InputError(f"Cluster {cluster} is empty: there is nothing to show.")
    members = members[np.argsort(np.asarray(result.scores)[members, cluster], kind="stable")][:max_items]
    tiles = []
    for i in members:
        tiles.append(stack.batch(int(i), int(i) + 1)[0])
        if result.aligned is not None:
            tiles.append(np.asarray(result.aligned[i]))
    return tile(tiles, columns * (2 if result.aligned is not None else 1))


def export_gallery(result: ClusteringResult, images, folder: str | Path, max_items: int = 60) -> list[Path]:
    """Write ``prototypes.png`` (the montage) and one ``cluster_NN.png`` per non-empty cluster; returns the paths."""
    from PIL import Image

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / "prototypes.png"]
    Image.fromarray(tile(list(np.asarray(result.prototypes)), min(10, result.k))).save(paths[0])
    for c in np.flatnonzero(result.cluster_sizes()):
        paths.append(folder / f"cluster_{c:02d}.png")
        Image.fromarray(cluster_gallery(result, images, int(c), max_items)).save(paths[-1])
    return paths
