"""Pictures a lab keeps: per-cluster galleries and the prototype montage, as PNG files.

A cluster's gallery shows its members sorted by score (closest first), each beside its alignment with
the prototype where the method aligns (the result's ``aligned``); the montage shows every prototype.
"""
from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

from ..core.atomic import check_outputs, write_atomic
from ..errors import InputError, whole_number
from ..result import ClusteringResult
from ..core.stack import Stack
from ..core.validation import as_stack, check_same_items


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
    stack = gallery_stack(result, images)
    max_items = check_max_items(max_items)
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


def gallery_stack(result: ClusteringResult, images) -> Stack:
    """The stack a result was fitted on, checked: an image result, as many items, of its prototypes' shape."""
    if np.asarray(result.prototypes).ndim < 3:
        raise InputError("Galleries are for image results: this result holds landmark shapes.")
    stack = as_stack(images, to_predict=True)
    check_same_items(stack, np.shape(result.prototypes)[1:])
    if stack.n != result.n:
        raise InputError(f"The images are {stack.n} but the result has {result.n} items: give the stack it was fitted on.")
    return stack


def check_max_items(max_items) -> int:
    """Members shown per cluster: a whole number of at least 1."""
    return whole_number(max_items, "max_items", 1, "members shown per cluster")


def gallery_files(result: ClusteringResult, folder: str | Path) -> list[Path]:
    """The files ``export_gallery`` writes: ``prototypes.png`` and one ``cluster_NN.png`` per non-empty cluster."""
    folder = Path(folder)
    return [folder / "prototypes.png"] + [folder / f"cluster_{c:02d}.png" for c in np.flatnonzero(result.cluster_sizes())]


def gallery_outputs(result: ClusteringResult, folder: str | Path, inputs: dict | None = None,
                    name: str = "The gallery folder") -> list[Path]:
    """The files a gallery of ``result`` writes into ``folder`` (:func:`gallery_files`), through the output guard
    before anything is drawn: the folder (made if missing; not a file, not in an object store or an OME-Zarr, not an
    input) and, where it exists already, each of its files (none of them an input)."""
    check_outputs(inputs or {}, {name: folder}, folders=True)
    paths = gallery_files(result, folder)
    if Path(folder).is_dir():
        check_outputs(inputs or {}, {f"{name}'s {p.name}": p for p in paths})
    return paths


def export_gallery(result: ClusteringResult, images, folder: str | Path, max_items: int = 60) -> list[Path]:
    """Write ``prototypes.png`` (the montage) and one ``cluster_NN.png`` per non-empty cluster; returns the paths.

    Everything is checked before a file is written, and each file is written whole (temporary file +
    rename); files of an earlier export are replaced, with a warning naming any left from other clusters.
    """
    paths = gallery_outputs(result, folder)
    stack = gallery_stack(result, images)
    max_items = check_max_items(max_items)
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"Cannot make the gallery folder {folder} ({exc.strerror}): give a folder you can write in.") from None
    write_png(paths[0], tile(list(np.asarray(result.prototypes)), min(10, result.k)))
    for path, c in zip(paths[1:], np.flatnonzero(result.cluster_sizes())):
        write_png(path, cluster_gallery(result, stack, int(c), max_items))
    stale = sorted(set(folder.glob("cluster_*.png")) - set(paths))
    if stale:
        warnings.warn(f"{folder} also holds {', '.join(p.name for p in stale)} from an earlier export, for clusters "
                      "this result does not have (or are empty now): remove them or export into a new folder.")
    return paths


def write_png(path: Path, picture: np.ndarray) -> None:
    """One PNG written whole or not at all; a folder that cannot be written is one sentence."""
    from PIL import Image

    try:
        write_atomic(path, lambda tmp: Image.fromarray(picture).save(tmp, format="PNG"))
    except OSError as exc:
        raise InputError(f"Cannot write {path} ({exc.strerror or exc}): give a gallery folder you can write in.") from None
