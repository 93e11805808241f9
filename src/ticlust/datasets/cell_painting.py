"""A generated Cell-Painting-like plate on disk, laid out as a screen's files are (no download).

Every site (field) of every well is five single-channel uint16 TIFFs, one per stain — ``DNA`` (the
nucleus), ``ER`` (a textured cytoplasm), ``RNA`` (nucleoli), ``AGP`` (the membrane) and ``Mito`` — in
``images/``; its segmentation (the cells' true masks, as a perfect segmentation would give) is a label
TIFF in ``labels/``; and ``load_data.csv`` is CellProfiler's LoadData CSV naming them
(``FileName_<Ch>``/``PathName_<Ch>``, ``ObjectsFileName_Cells``/``ObjectsPathName_Cells``,
``Metadata_Plate``, ``Metadata_Well``, ``Metadata_Site``).

Cells are ellipses of random size, elongation and orientation. The two kinds differ only in ``Mito``:
``central`` cells hold their mitochondria in a disc around the nucleus, ``peripheral`` cells in a band
under the membrane; every other channel is drawn from the same distributions for both kinds, so a run on
any single channel but Mito cannot tell them apart. ``truth.csv`` gives every cell's kind.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy import ndimage

from ..errors import InputError, whole_number

#: The stains, in the LoadData CSV's column order.
CHANNELS = ("DNA", "ER", "RNA", "AGP", "Mito")
#: The kinds of cell: they differ only in the Mito channel.
KINDS = ("central", "peripheral")


@dataclass
class CellPaintingPlate:
    """Where a generated plate lies: ``load_data`` (the LoadData CSV), ``images`` and ``labels`` (folders),
    ``truth`` (a CSV of ``Well, Site, label, kind``: every cell's kind index into ``KINDS``)."""

    root: Path
    load_data: Path
    images: Path
    labels: Path
    truth: Path


def cell_painting_plate(folder, wells: int = 2, sites: int = 3, cells: int = 40, shape: tuple[int, int] = (256, 256),
                        seed: int = 0) -> CellPaintingPlate:
    """Write a plate of ``wells`` wells × ``sites`` sites, each about ``cells`` cells on a ``shape`` field, into
    ``folder`` (made if missing; files of an earlier plate there are overwritten). The same seed writes the same
    bytes. Returns the plate's paths."""
    import pandas as pd
    import tifffile

    from ..core.atomic import check_outputs, write_atomic

    for value, name, least in ((wells, "wells", 1), (sites, "sites", 1), (cells, "cells", 1)):
        whole_number(value, name, least, "")
    if len(shape) != 2 or min(shape) < 64:
        raise InputError(f"shape={shape!r} must be a field of at least 64×64 pixels.")
    root = Path(folder)
    check_outputs({}, {"The plate folder": root}, folders=True)
    images, labels = root / "images", root / "labels"
    images.mkdir(parents=True, exist_ok=True)
    labels.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    rows, truth = [], []
    for w in range(wells):
        well = f"{'ABCDEFGH'[w // 12 % 8]}{w % 12 + 1:02d}"
        for site in range(sites):
            stack, mask, kinds = _site(rng, cells, tuple(shape))
            name = f"{well}_s{site}"
            for path, picture in [(images / f"{name}_{ch}.tif", plane) for ch, plane in zip(CHANNELS, stack)] + \
                    [(labels / f"{name}_cells.tif", mask)]:
                write_atomic(path, lambda tmp: tifffile.imwrite(tmp, picture))
            rows.append({**{f"FileName_{ch}": f"{name}_{ch}.tif" for ch in CHANNELS},
                         **{f"PathName_{ch}": "images" for ch in CHANNELS},
                         "ObjectsFileName_Cells": f"{name}_cells.tif", "ObjectsPathName_Cells": "labels",
                         "Metadata_Plate": "P1", "Metadata_Well": well, "Metadata_Site": site})
            truth += [{"Well": well, "Site": site, "label": i + 1, "kind": int(k)} for i, k in enumerate(kinds)]
    for name, table in (("load_data.csv", rows), ("truth.csv", truth)):
        write_atomic(root / name, lambda tmp: pd.DataFrame(table).to_csv(tmp, index=False))
    return CellPaintingPlate(root, root / "load_data.csv", images, labels, root / "truth.csv")


def _site(rng, n: int, shape: tuple[int, int]):
    """One site: the five channels (5, H, W) uint16, the labels (H, W) int32 (1..m) and each cell's kind."""
    h, w = shape
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    labels = np.zeros(shape, np.int32)
    signal = np.zeros((len(CHANNELS),) + shape, np.float32)
    kinds = []
    for _ in range(n * 20):
        if len(kinds) == n:
            break
        r = rng.uniform(10, 12)
        elong = rng.uniform(1.0, 1.2)
        cy, cx, theta = rng.uniform(r * elong + 2, h - r * elong - 2), rng.uniform(r * elong + 2, w - r * elong - 2), \
            rng.uniform(0, np.pi)
        y0, y1, x0, x1 = int(cy - r * elong - 2), int(cy + r * elong + 3), int(cx - r * elong - 2), int(cx + r * elong + 3)
        dy, dx = yy[y0:y1, x0:x1] - cy, xx[y0:y1, x0:x1] - cx
        u = (dx * np.cos(theta) + dy * np.sin(theta)) / (r * elong)
        v = (-dx * np.sin(theta) + dy * np.cos(theta)) / r
        rho = np.hypot(u, v)
        inside = rho <= 1
        grown = ndimage.binary_dilation(labels[y0:y1, x0:x1] > 0, iterations=2)
        if (inside & grown).any():
            continue
        kind = int(rng.integers(len(KINDS)))
        kinds.append(kind)
        labels[y0:y1, x0:x1][inside] = len(kinds)
        signal[:, y0:y1, x0:x1] += _cell(rng, u, v, rho, inside, kind)
    signal = ndimage.gaussian_filter(signal, (0, 1.0, 1.0))
    counts = rng.poisson(np.maximum(signal, 0) + 100.0) + rng.normal(0, 5, signal.shape)
    return np.clip(counts, 0, 65535).astype(np.uint16), labels, np.asarray(kinds)


def _cell(rng, u, v, rho, inside, kind: int) -> np.ndarray:
    """One cell's five channels on its patch (photons above background); only Mito depends on ``kind``."""
    brightness = rng.lognormal(0, 0.2, len(CHANNELS)) * np.array([1500, 500, 400, 700, 900], np.float32)
    texture = ndimage.gaussian_filter(rng.normal(size=rho.shape), 1.0)
    nucleus = np.hypot(u * 1.6, v * 1.6) <= 1
    spots = np.zeros(rho.shape, bool)
    for _ in range(int(rng.integers(1, 4))):
        sy, sx = rng.normal(0, 0.2, 2)
        spots |= np.hypot(u - sx, v - sy) < 0.12
    mito = (rho < 0.55) if kind == 0 else ((rho > 0.7) & inside)
    planes = np.stack([nucleus, inside * (0.6 + 0.4 * texture), spots, (rho > 0.85) & inside, mito])
    return (planes * inside * brightness[:, None, None]).astype(np.float32)
