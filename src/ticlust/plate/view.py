"""A plate as a screen is read (issue "Plates and a million objects", item 6), without napari: the fields to
pick, one field's image and objects, each cluster's share per well (or condition), a gallery sample spread
over the plate, and assigning one field's objects with a result. The napari panel
(``ticlust._napari.store_panel``) only draws what these functions return, so they are tested without a viewer.

Everything reads an :class:`~ticlust.plate.store.ObjectStore` (``ticlust extract``) and, once ``ticlust predict``
has run, its ``predictions.parquet`` (the store's table + cluster, score, runner_up, runner_up_score, in
table order). Nothing here writes into the store; the share table is written only where asked, atomically.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import InputError, whole_number
from .spec import CHANNEL_PREFIX
from .store import ObjectStore

#: Crops per cluster in a gallery.
GALLERY_PER_CLUSTER = 16
#: Objects assigned per step when a result is applied to a field (a Cancel takes effect between steps).
APPLY_BLOCK = 256
#: Columns of the listing that name a field's files, not a condition.
FILE_COLUMNS = ("field_index", "image", "labels")
#: The objects route's options besides the crop size, as a store records them.
ROUTE_KEYS = ("keep_border", "channel", "orient", "normalize", "rescale")


# ---- the store and its predictions ---------------------------------------------------------------
def read_predictions(store: ObjectStore, columns=None):
    """The store's predictions table (``ticlust predict RESULT STORE``; only ``columns`` when given: a million
    objects' rows are read whole only when asked), or None when there are none yet."""
    import pandas as pd

    path = predictions_path(store)
    if not path.is_file():
        return None
    table = pd.read_parquet(path, columns=None if columns is None else list(columns))
    if len(table) != len(store):
        raise InputError(f"{path} holds {len(table)} rows but the store {len(store)} objects: predict the store again "
                         "(ticlust predict RESULT STORE).")
    return table


def predictions_path(store: ObjectStore) -> Path:
    from .run import PREDICTIONS

    return store.path / PREDICTIONS


def condition_columns(store: ObjectStore) -> list[str]:
    """The manifest's columns (well, site, condition, …): what shares can be grouped by."""
    return [c for c in store.fields.columns if c not in FILE_COLUMNS and not str(c).startswith(CHANNEL_PREFIX)]


def field_title(row) -> str:
    """How a field is named in a picker: its image file, then its manifest values
    (``A01_s0.tif · well A01 · site 0``)."""
    import pandas as pd

    values = [f"{k} {v}" for k, v in row.items() if k not in FILE_COLUMNS and not str(k).startswith(CHANNEL_PREFIX)
              and pd.notna(v)]
    return " · ".join([Path(str(row["image"])).name, *values])


def check_field(store: ObjectStore, field_index) -> int:
    """``field_index`` as a field of the store's listing, or an InputError saying which there are."""
    count = int(store.attributes["input"]["fields"])
    if isinstance(field_index, bool) or not isinstance(field_index, (int, np.integer)) or \
            not 0 <= field_index < count:
        raise InputError(f"Field {field_index!r} is not one of the store's fields: give a number from 0 to "
                         f"{count - 1}.")
    return int(field_index)


def field_rows(store: ObjectStore, field_index: int) -> np.ndarray:
    """The object indices (rows of the table, crops) of one field: one block, the table being in field order."""
    field_index = check_field(store, field_index)
    start, stop = np.searchsorted(store.field_index, [field_index, field_index + 1])
    return np.arange(start, stop)


def field_starts(store: ObjectStore) -> np.ndarray:
    """Where each field's objects start in the store's table (it is in field order), and where the last one ends:
    field ``f``'s objects are ``starts[f]:starts[f + 1]`` (none for a field without objects)."""
    return np.searchsorted(store.field_index, np.arange(int(store.attributes["input"]["fields"]) + 1))


def field_span(starts: np.ndarray, field_index: int) -> tuple[int, int]:
    """Field ``field_index``'s first store object and one past its last, from the fields' starts
    (:func:`field_starts`)."""
    return int(starts[int(field_index)]), int(starts[int(field_index) + 1])


def object_fields(starts: np.ndarray, objects) -> tuple[np.ndarray, np.ndarray]:
    """The field each store object (a row of the table) belongs to, and its place among that field's objects, from
    the fields' starts (:func:`field_starts`); a number gives two numbers (0-d arrays)."""
    objects = np.asarray(objects, np.int64)
    fields = np.searchsorted(starts, objects, side="right") - 1
    return fields, objects - np.asarray(starts)[fields]


def field_table(store: ObjectStore, field_index: int):
    """One field's rows of the table, in object order, with cluster, score and runner-up when the store has
    predictions: read from Parquet with a filter, so the rest of the plate stays on disk."""
    import pandas as pd

    field_index = check_field(store, field_index)
    path = predictions_path(store)
    path = path if path.is_file() else store.path / "table.parquet"
    return pd.read_parquet(path, filters=[("field_index", "==", field_index)]).reset_index(drop=True)


# ---- one field ---------------------------------------------------------------------------------------
@dataclass
class FieldPicture:
    """One field to show: its image (channels first unless ``rgb``), its objects as label values (``values``:
    row position within the field + 1, 0 elsewhere, so a time series stays unambiguous) and their rows
    (``table``: :func:`field_table`)."""

    field_index: int
    image: np.ndarray
    rgb: bool
    values: np.ndarray
    table: object


def field_picture(store: ObjectStore, field_index: int) -> FieldPicture:
    """Read one field's image and mask from where the store's input named them; an InputError when a file
    is gone or unreadable (the sentence names it)."""
    from .fields import open_field, row_spec

    field_index = check_field(store, field_index)
    row = store.fields.iloc[field_index]
    spec = row_spec(Path(store.attributes["input"]["path"]), row.to_dict(), field_index)
    image, labels, channel_axis = open_field(spec, z=store.options.get("z"))
    labels = np.asarray(labels)
    image, rgb = _displayed(np.asarray(image), labels.shape, channel_axis)
    rows = field_table(store, field_index)
    values = object_values(labels, rows["label"].to_numpy(), rows["frame"].to_numpy())
    return FieldPicture(field_index, image, rgb, values, rows)


def _displayed(image: np.ndarray, labels_shape: tuple, channel_axis: int | None) -> tuple[np.ndarray, bool]:
    """The image with its channels first (napari puts a slider on them) or as RGB(A), beside labels of
    ``labels_shape``."""
    if channel_axis is not None:
        return np.moveaxis(image, channel_axis, 0), False
    if image.ndim == len(labels_shape) + 1 and image.shape[:-1] == tuple(labels_shape):
        if image.shape[-1] in (3, 4):
            return image, True
        return np.moveaxis(image, -1, 0), False
    return image, False


def object_values(labels: np.ndarray, label_ids, frames) -> np.ndarray:
    """Labels (Y×X, or T×Y×X) with object ``i`` of (``label_ids[i]``, ``frames[i]``) painted ``i + 1`` and
    every other pixel 0 (objects the store left out, background)."""
    labels = np.asarray(labels)
    out = np.zeros(labels.shape, np.int32)
    label_ids, frames = np.asarray(label_ids), np.asarray(frames)
    stack = labels if labels.ndim == 3 else labels[None]
    painted = out if out.ndim == 3 else out[None]
    for t in np.unique(frames):
        mine = np.flatnonzero(frames == t)
        order = np.argsort(label_ids[mine], kind="stable")
        ids, value = label_ids[mine][order], mine[order] + 1
        frame = stack[int(t)]
        at = np.clip(np.searchsorted(ids, frame), 0, len(ids) - 1)
        painted[int(t)] = np.where(ids[at] == frame, value[at], 0)
    return out


# ---- what a screen is read by ------------------------------------------------------------------------
def cluster_shares(predictions, by: str = "well"):
    """One row per value of ``by`` (a well, a condition), in table order (wells as listed): its object count and
    each cluster's share of its objects (columns ``cluster_0`` …, and ``rejected`` when some objects were
    rejected): every row sums to 1. Counted with one ``bincount`` over (group, cluster) codes: a million objects
    in about 0.1 s (a pandas groupby took 0.7 s)."""
    import pandas as pd

    if predictions is None:
        raise InputError("The store has no predictions yet: run ticlust predict RESULT STORE first.")
    if by not in predictions.columns:
        raise InputError(f"The store's table has no column {by!r}: group by one of the manifest's columns.")
    clusters = predictions["cluster"].to_numpy()
    k = int(clusters.max()) + 1 if len(clusters) and clusters.max() >= 0 else 0
    names = [f"cluster_{c}" for c in range(k)] + (["rejected"] if (clusters < 0).any() else [])
    codes = np.where(clusters < 0, k, clusters)
    groups, values = pd.factorize(predictions[by], sort=False, use_na_sentinel=False)   # a missing value: a group
    counts = np.bincount(groups * len(names) + codes, minlength=len(values) * len(names))
    counts = counts.reshape(len(values), len(names))
    objects = counts.sum(axis=1)
    out = pd.DataFrame({by: np.asarray(values), "objects": objects})
    for j, name in enumerate(names):
        out[name] = counts[:, j] / objects
    return out


def write_shares(shares, path, store: ObjectStore | None = None) -> Path:
    """The share table as a CSV at ``path``, written whole or not at all, after the output guard
    (``core.atomic.check_outputs``; ``store``: the store the shares were counted from, whose input is kept)."""
    from ..core.atomic import check_outputs, write_atomic
    from .run import store_inputs

    path = Path(path)
    check_outputs({} if store is None else store_inputs(store), {"The shares table": path})
    return write_atomic(path, lambda tmp: shares.to_csv(tmp, index=False))


def gallery_sample(predictions, per_cluster: int = GALLERY_PER_CLUSTER, seed: int = 0) -> dict[int, np.ndarray]:
    """For each cluster, up to ``per_cluster`` of its objects (indices), drawn with ``seed`` and spread over
    the fields: every field gives one object before any field gives a second."""
    import pandas as pd

    if predictions is None:
        raise InputError("The store has no predictions yet: run ticlust predict RESULT STORE first.")
    whole_number(per_cluster, "per_cluster", 1, "objects")
    rng = np.random.default_rng(int(seed))
    clusters = predictions["cluster"].to_numpy()
    fields = predictions["field_index"].to_numpy()
    picked = {}
    for c in np.unique(clusters[clusters >= 0]):
        members = rng.permutation(np.flatnonzero(clusters == c))
        turn = pd.Series(fields[members]).groupby(fields[members]).cumcount().to_numpy()   # the field's 1st, 2nd, …
        picked[int(c)] = members[np.argsort(turn, kind="stable")][:per_cluster]
    return picked


# ---- a result on one field ---------------------------------------------------------------------------
def load_store_result(path, store: ObjectStore | None = None):
    """A saved result, ready to assign objects; with a ``store``, refused in one sentence when it cannot assign the
    store's objects (another crop size, channel count or crop options; edited by hand and not refined)."""
    from ..api import load_result
    from .run import check_result_for_store

    result = load_result(path)
    if store is not None:
        check_result_for_store(result, store)
    return result


def assign_field(result, store: ObjectStore, field_index: int, device: str = "auto", block: int = APPLY_BLOCK):
    """Assign one field's objects with a fitted result, ``block`` objects at a time: a generator of Progress
    events that returns the assignment columns (cluster, score, runner_up, runner_up_score) in the field's
    object order. Refuses a result that cannot assign this store's objects (another crop size, …)."""
    from ..methods import get_method
    from .run import N_POINTS, check_result_for_store, result_points, store_items

    check_result_for_store(result, store)
    index = field_rows(store, field_index)
    if len(index) == 0:
        raise InputError("This field has no objects in the store: pick another field.")
    landmarks = get_method(result.method).inputs == ("landmarks",)
    items = store_items(store, index, landmarks, result_points(result) if landmarks else N_POINTS)
    return (yield from assign_items(result, items, device, block))


def assign_items(result, items, device: str = "auto", block: int = APPLY_BLOCK):
    """Assign ``items`` with a fitted result, ``block`` at a time (a Cancel takes effect between blocks): a
    generator of Progress events that returns the assignment columns, in item order."""
    from ..events import Progress
    from .run import predict_items

    chunks = []
    for s in range(0, len(items), block):
        chunks.append(predict_items(result, items[s:s + block], device))
        yield Progress(step=min(s + block, len(items)), total=len(items), stage="assigning objects")
    return {c: np.concatenate([ch[c] for ch in chunks]) for c in chunks[0]}


# ---- a result on an image and its segmentation (no store) ---------------------------------------------
def route_options(result) -> dict:
    """How the objects a result was fitted on were cut: the objects route's options (size, keep_border, channel,
    orient, normalize, rescale) as the result's store recorded them, or as the napari widget recorded them
    (``config["objects"]``, a run on a labels layer), else the route's defaults at its prototypes' size. New
    objects are cut the same way before they are assigned."""
    from ..objects.crops import ROUTE_OPTIONS

    fitted = result.config.get("store")
    if fitted is not None:
        options = fitted["options"]
        return {"size": int(fitted["crop"]["size"]), **{k: options[k] for k in ROUTE_KEYS}}
    recorded = result.config.get("objects")
    if recorded is not None:
        return {"size": int(recorded["size"]), **{k: recorded[k] for k in ROUTE_KEYS}}
    return {"size": int(np.shape(result.prototypes)[1]), "keep_border": False, "channel": None, "rescale": False,
            **ROUTE_OPTIONS}


def record_route(result, options: dict) -> None:
    """Write into ``result.config["objects"]`` how its objects were cut out of a field (the route's ``options``;
    a missing orient/normalize is the route's default), so that :func:`route_options` cuts new objects the same
    way. Image results only: a shape method's contours have no crop."""
    from ..objects.crops import ROUTE_OPTIONS

    if np.ndim(result.prototypes) >= 3:
        chosen = {k: options.get(k) for k in ROUTE_KEYS}
        chosen.update({k: v for k, v in ROUTE_OPTIONS.items() if chosen[k] is None})
        result.config["objects"] = {"size": int(np.shape(result.prototypes)[1]), **chosen}


def assign_objects(result, image, labels, device: str = "auto", block: int = APPLY_BLOCK):
    """Cut the objects of ``labels`` out of ``image`` as the result's objects were cut (:func:`route_options`;
    a shape method's result: their contours) and assign them with the result, ``block`` at a time: a generator
    of Progress events that returns ``(object table, assignment columns)``, one row per object. Labels that do
    not segment the image, or crops of another size or channel count than the result's, are refused in one
    sentence. The arrays are read, never changed."""
    from ..events import Progress
    from ..methods import get_method
    from ..objects.route import objects_route
    from ..objects.crops import labels_fit
    from .run import result_points

    if not labels_fit(image, labels):
        raise InputError(f"The labels ({_shape_words(np.shape(labels))}) do not segment the image "
                         f"({_shape_words(np.shape(image))}): choose the labels layer made for that image.")
    yield Progress(step=0, total=1, stage="cutting objects")
    options = route_options(result)
    route = objects_route(image, labels, result.method, {}, **options)
    items = route.items
    landmarks = get_method(result.method).inputs == ("landmarks",)
    wanted = (result_points(result), 2) if landmarks else tuple(int(s) for s in np.shape(result.prototypes)[1:])
    if tuple(items.shape[1:]) != wanted:
        raise InputError(f"The result was fitted on {_item_words(wanted, landmarks)} but these objects give "
                         f"{_item_words(items.shape[1:], landmarks)}: choose an image with the result's channels, or "
                         "fit a result on these objects.")
    columns = yield from assign_items(result, items, device, block)
    return {c: np.asarray(v) for c, v in route.table.items()}, columns


def _shape_words(shape) -> str:
    return "×".join(str(int(s)) for s in shape)


def _item_words(shape, landmarks: bool) -> str:
    """An item's shape in words: ``36×36 crops with 3 channels``, ``contours of 64 points``."""
    if landmarks:
        return f"contours of {shape[0]} points"
    return f"{shape[0]}×{shape[1]} crops" + (f" with {shape[2]} channels" if len(shape) > 2 else "")


__all__ = ["read_predictions", "condition_columns", "field_title", "check_field", "field_rows", "field_starts",
           "field_span", "object_fields", "field_table",
           "FieldPicture", "field_picture", "object_values", "cluster_shares", "write_shares", "gallery_sample",
           "load_store_result", "assign_field", "assign_items", "route_options", "record_route", "assign_objects",
           "GALLERY_PER_CLUSTER"]
