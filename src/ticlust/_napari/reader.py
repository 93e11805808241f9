"""napari readers: .npz files (ticlust results, or plain image stacks), tpsDig .tps files, object stores
(``ticlust extract``), which open in the ticlust dock, and a plate's fields (a folder with masks, a CSV manifest,
an OME-Zarr image or plate with labels), which the dock offers to extract into a store."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from ..api import load_result
from ..result import is_result_file


def get_reader(path):
    """Return a reader for one .npz or tpsDig .tps path, or None so that napari tries other plugins."""
    if isinstance(path, list):
        return None
    if str(path).lower().endswith(".tps"):
        return read_tps_points
    if not str(path).endswith(".npz"):
        return None
    try:
        with np.load(path, allow_pickle=False) as npz:
            keys = list(npz.files)
            shapes = {k: npz[k].shape for k in keys} if not is_result_file(keys) else {}
    except Exception:
        return None
    if is_result_file(keys):
        return read_result
    if any(len(s) in (3, 4) for s in shapes.values()):
        return read_stack
    return None


def read_result(path) -> list[tuple]:
    """A saved result. With a stack of as many items open in the viewer, the ticlust dock (docked if
    needed) shows the whole result against it: prototypes, assignments, sorted view, aligned stack, warp
    grid and inspector. Otherwise: the prototypes (a numbered mosaic, or landmark mean shapes), the
    aligned stack when there is one, and the assignments table in the layers' metadata."""
    result = load_result(path)
    handled = _hand_to_widget(path, result)
    if handled:
        return [(None,)]   # napari's sentinel: the reader added its layers itself
    from .layers import Scene, assignment_features, tiles_grid

    stem = Path(path).stem
    meta = {"ticlust_result": str(path), "method": result.method, "labels": result.labels,
            "ticlust_assignments": pd.DataFrame(assignment_features(result))}
    layers = []
    if result.prototypes.ndim >= 3 and result.prototypes.shape[-1] != 2:
        scene = Scene(int(result.prototypes.shape[1]), int(result.prototypes.shape[2]), result.k)
        mosaic = tiles_grid(result.prototypes, scene, scene.mosaic_columns)
        rgb = mosaic.ndim == 3 and mosaic.shape[-1] == 3
        if mosaic.ndim == 3 and not rgb:
            mosaic = np.moveaxis(mosaic, -1, 0)
        layers.append((mosaic, {"name": f"{stem} prototypes", "metadata": meta, "rgb": rgb}, "image"))
    else:  # landmark means (K, L, 2): closed polygons in (row, col) order
        layers.append(([m[:, ::-1] for m in result.prototypes],
                       {"name": f"{stem} mean shapes", "shape_type": "polygon", "face_color": "transparent",
                        "edge_color": "yellow", "metadata": meta}, "shapes"))
    if result.aligned is not None and result.aligned.ndim >= 3 and result.aligned.shape[-1] != 2:
        layers.append((result.aligned, {"name": f"{stem} aligned", "metadata": meta}, "image"))
    return layers


def _hand_to_widget(path, result) -> bool:
    """Show ``result`` in the ticlust dock when the current viewer holds a stack (or landmarks) of as many items."""
    try:
        import napari
        from napari.layers import Image, Points
    except ImportError:  # pragma: no cover - the reader only runs inside napari
        return False
    viewer = napari.current_viewer()
    if viewer is None:
        return False
    from .layers import is_ticlust_layer
    from .sources import item_count

    wanted = Points if result.prototypes.ndim == 3 and result.prototypes.shape[-1] == 2 else Image
    match = next((layer for layer in viewer.layers if isinstance(layer, wanted) and not is_ticlust_layer(layer.name)
                  and item_count(layer) == result.n), None)
    if match is None:
        return False
    dock = _dock(viewer)
    if dock.job is not None:
        return False
    dock.use(dock.points if wanted is Points else dock.stack)
    dock.load_result(path, match)
    return True


def _dock(viewer):
    """The ticlust dock of ``viewer``, docked the way Plugins > ticlust docks it."""
    return viewer.window.add_plugin_dock_widget("napari-ticlust")[1]


def read_stack(path) -> list[tuple]:
    """The first image-like array (N×H×W or N×H×W×3) of a plain .npz, labels in metadata when present."""
    with np.load(path, allow_pickle=False) as npz:
        key = next(k for k in npz.files if npz[k].ndim in (3, 4))
        data = npz[key]
        labels = next((npz[k] for k in npz.files if npz[k].ndim == 1 and npz[k].shape[0] == data.shape[0]), None)
    rgb = data.ndim == 4 and data.shape[-1] == 3
    meta = {} if labels is None else {"labels": labels}
    return [(data, {"name": f"{Path(path).stem} {key}", "rgb": rgb, "metadata": meta}, "image")]


def read_tps_points(path) -> list[tuple]:
    """A tpsDig file as a Points layer: one point per landmark with shape_id and landmark features."""
    from ..io.landmarks import landmarks_to_points, read_tps

    landmarks, ids = read_tps(path)
    coords, shape_id, landmark = landmarks_to_points(landmarks, ids)
    return [(coords, {"name": Path(path).stem, "features": {"shape_id": shape_id, "landmark": landmark}}, "points")]


def get_store_reader(path):
    """Return a reader for an object store folder (``ticlust extract``), or None so that napari tries other plugins."""
    from ..plate.run import is_store

    if isinstance(path, list) or not is_store(path):
        return None
    return read_store


def get_plate_reader(path):
    """Return a reader for a plate's fields — a folder of images with their masks, a CSV manifest (image,labels,…),
    an OME-Zarr image or plate with labels (``plate.fields.list_fields`` lists them, reading no pixel) — or None so
    that napari tries other plugins."""
    from ..errors import InputError
    from ..plate.fields import list_fields
    from ..plate.run import is_store

    if isinstance(path, list) or is_store(path):
        return None
    try:
        list_fields(path)
    except (InputError, OSError, ValueError):
        return None
    return read_plate_input


def read_plate_input(path) -> list[tuple]:
    """Dock the ticlust dock and offer to extract the plate's fields into a store beside them (the store's path and
    the crop options can be changed there before Extract)."""
    import napari

    viewer = napari.current_viewer()
    if viewer is None:     # pragma: no cover - the reader only runs inside napari
        return []
    _dock(viewer).plate.extract.offer(path)
    return [(None,)]       # napari's sentinel: the reader added its layers itself


def read_store(path) -> list[tuple]:
    """Dock the ticlust dock and open the store in it: the dock makes the field, objects and gallery layers itself.
    A store that cannot be opened is said in the dock."""
    import napari

    viewer = napari.current_viewer()
    if viewer is None:     # pragma: no cover - the reader only runs inside napari
        return []
    _dock(viewer).plate.open_store(path)
    return [(None,)]       # napari's sentinel: the reader added its layers itself
