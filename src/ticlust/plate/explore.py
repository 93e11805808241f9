"""One plate object looked at closely, and a plate's clustering taken out, without napari: what the plate dock's
inspector shows of an object (its crop, every prototype aligned onto it with its score, its warp grid), the
per-object table as ``ticlust predict`` writes it, and a gallery folder per cluster. The dock draws what these
return; a notebook calls them as they are.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import InputError, whole_number
from .store import ObjectStore


@dataclass
class Inspection:
    """One object of a store against a result: its crop (``item``, H×W[×C]), every prototype aligned onto it
    (``aligned``, K×H×W[×C]) with its score to each (``scores``), the warp of its own cluster's alignment as a
    display grid of (x, y) crop pixels (``grid``; None for methods that do not warp), and its place in the fit
    sample (``sample``; None outside it)."""

    object: int
    item: np.ndarray
    aligned: np.ndarray
    scores: np.ndarray
    grid: np.ndarray | None
    sample: int | None


def inspect_object(store: ObjectStore, result, obj: int, device: str = "auto") -> Inspection:
    """Align every prototype of a fitted result onto store object ``obj`` (``api.align_one``), as the ticlust widget's
    inspector does for an item. An object of the fit sample whose fit kept its pictures replays the fit's own
    warps; any other object is assigned once with its pictures (``api.predict``: its scores and warp grid) and
    that assignment's warps replayed for every prototype, so the pictures are the alignments the scores measured.
    Shape methods (contours) have no crops to show: refused in one sentence."""
    from ..api import align_one, predict
    from ..methods import get_method
    from .curate import sample_places
    from .run import check_result_for_store

    if get_method(result.method).inputs == ("landmarks",):
        raise InputError(f"{result.method} clusters the objects' contours: the inspector shows image methods' "
                         "alignments (the contours are in the predictions table).")
    check_result_for_store(result, store)
    if isinstance(obj, bool) or not isinstance(obj, (int, np.integer)) or not 0 <= obj < len(store):
        raise InputError(f"Object {obj!r} is not one of the store's {len(store)} objects.")
    item = np.asarray(store.crops[int(obj)])
    place = int(sample_places(result, [int(obj)])[0])
    place = None if place < 0 or place >= result.n else place
    if place is not None and result.grids is not None:
        aligned, scores = align_one(result, item, device, index=place)
        return Inspection(int(obj), item, np.asarray(aligned), np.asarray(scores), np.asarray(result.grids[place]),
                          place)
    own = predict(result, item[None], device=device, aligned=True)
    aligned, scores = align_one(own, item, device, index=0)
    grid = None if own.grids is None else np.asarray(own.grids[0])
    return Inspection(int(obj), item, np.asarray(aligned), np.asarray(scores), grid, place)


# ---- taking the clustering out --------------------------------------------------------------------
def export_objects(store: ObjectStore, path) -> Path:
    """The store's predictions, one row per object, at ``path``: a ``.parquet`` file as ``ticlust predict --parquet``
    writes it (the same bytes), anything else as its CSV (``--csv``: the same columns, row for row). Written whole
    or not at all, after the output guard (``core.atomic.check_outputs``: never into the store or onto its input)."""
    from ..core.atomic import check_outputs
    from .run import PREDICTIONS, copy_table, store_inputs

    source, path = store.path / PREDICTIONS, Path(path)
    check_outputs(store_inputs(store), {"The table": path})
    if not source.is_file():
        raise InputError(f"{store.path.name} has no predictions yet: predict its objects first.")
    parquet = path.suffix.lower() == ".parquet"
    try:
        return copy_table(source, path, parquet)
    except OSError as exc:
        raise InputError(f"Cannot write {path} ({exc.strerror or exc}): choose a file you can write.") from None


def export_plate_gallery(store: ObjectStore, folder, result=None, max_items: int = 60) -> list[Path]:
    """A gallery folder of the store's predictions: ``prototypes.png`` (the prototypes of ``result``, when given and
    an image method's) and one ``cluster_NN.png`` per cluster with its ``max_items`` closest objects across the plate (lowest score
    first), as ``ticlust export --gallery`` draws them. Only those objects' crops are read. Returns the paths."""
    from ..core.atomic import check_outputs
    from ..io.gallery import tile, write_png
    from ..methods import get_method
    from .run import store_inputs
    from .view import read_predictions

    max_items = whole_number(max_items, "max_items", 1, "objects shown per cluster")
    inputs, folder = store_inputs(store), Path(folder)
    check_outputs(inputs, {"The gallery folder": folder}, folders=True)
    predictions = read_predictions(store, ["cluster", "score"])
    if predictions is None:
        raise InputError(f"{store.path.name} has no predictions yet: predict its objects first.")
    drawn = np.unique(predictions["cluster"].to_numpy())
    if folder.is_dir():                # none of its files an input (a plate's images kept in that folder)
        check_outputs(inputs, {f"The gallery's {n}": folder / n for n in
                               ["prototypes.png"] + [f"cluster_{int(c):02d}.png" for c in drawn[drawn >= 0]]})
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"Cannot make the gallery folder {folder} ({exc.strerror}): give a folder you can write "
                         "in.") from None
    clusters = predictions["cluster"].to_numpy()
    score = predictions["score"].to_numpy()
    paths = []
    if result is not None and get_method(result.method).inputs != ("landmarks",):
        paths.append(folder / "prototypes.png")
        write_png(paths[-1], tile(list(np.asarray(result.prototypes)), min(10, result.k)))
    for c in np.unique(clusters[clusters >= 0]):
        members = np.flatnonzero(clusters == c)
        members = np.sort(members[np.argsort(score[members], kind="stable")][:max_items])
        closest = members[np.argsort(score[members], kind="stable")]
        crops = store.crops[members]
        paths.append(folder / f"cluster_{int(c):02d}.png")
        write_png(paths[-1], tile([crops[np.searchsorted(members, i)] for i in closest], 10))
    return paths


__all__ = ["Inspection", "inspect_object", "export_objects", "export_plate_gallery"]
