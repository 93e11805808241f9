"""A plate's clusters written back where its images are: one NGFF label image per field of an OME-Zarr input.

:func:`write_cluster_labels` reads the store's predictions (``ticlust predict RESULT STORE``) and, for every
field of the OME-Zarr image or HCS plate the store was extracted from, paints the field's segmentation (the
label image its objects were cut from) with each object's cluster: value ``cluster + 1`` (1 … K), ``0`` for the
background and for objects the store did not keep (touching the border, too small), and :data:`OUTLIER_VALUE`
for objects marked as outliers (or rejected by the method). The label image goes into the field's ``labels``
group under ``name`` with the same pyramid levels, axes and scales as the segmentation and the NGFF version of
the input (0.4 on Zarr v2, 0.5 on Zarr v3), written with ome-zarr-py; its ``image-label`` metadata gives every
value a colour (:func:`cluster_color`, the napari dock's) and properties (cluster, objects), and its attribute
``ticlust`` records where it came from (result digest, method, K, field).

Each field's label image is written under a temporary name inside the ``labels`` group and renamed into place
(one rename: it is there whole or not at all), then listed in the group's ``labels``. A run that is stopped is
finished by running it again: fields that hold this result's labels are kept. Labels of another result under the
same name are replaced only when asked (``overwrite``); a label image ticlust did not write, or the
segmentation itself, never.
"""
from __future__ import annotations

import os
import shutil
import uuid
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..core.atomic import owned
from ..errors import InputError

#: The label image's name inside each field's ``labels`` group, unless another is given.
DEFAULT_NAME = "clusters"
#: The value of objects marked as outliers (or rejected by the method): the largest uint16, so that it stays the
#: same whatever K is (the label images are uint16; K may be up to OUTLIER_VALUE - 1).
OUTLIER_VALUE = 65535
#: The colour of every cluster (RGB in 0…1, cycling after ten): the napari dock's and the label images'.
CLUSTER_COLORS = np.array([
    [0.12, 0.47, 0.71], [1.00, 0.50, 0.05], [0.17, 0.63, 0.17], [0.84, 0.15, 0.16], [0.58, 0.40, 0.74],
    [0.55, 0.34, 0.29], [0.89, 0.47, 0.76], [0.50, 0.50, 0.50], [0.74, 0.74, 0.13], [0.09, 0.75, 0.81],
])
#: The colour of rejected items and outliers.
OUTLIER_COLOR = np.array([0.3, 0.3, 0.3, 1.0])


def cluster_color(label: int) -> np.ndarray:
    """A distinct RGBA colour per cluster (cycling after ten); grey for rejected items and outliers (-1)."""
    if label < 0:
        return OUTLIER_COLOR.copy()
    return np.append(CLUSTER_COLORS[label % len(CLUSTER_COLORS)], 1.0)


@dataclass
class LabelsWritten:
    """What :func:`write_cluster_labels` did: the label image's name, the fields written now, those that held this
    result's labels already (``kept``), the fields the store left out (``skipped``: no objects were cut from them,
    nothing written), and the label images' paths."""

    name: str
    written: int
    kept: int
    skipped: int
    digest: str
    paths: list = field(default_factory=list)


@dataclass(frozen=True)
class _Field:
    """One field to paint: its index, its image group, the segmentation's name, and where the label image goes."""

    index: int
    image: Path
    source: str
    target: Path


def write_cluster_labels(store, result, *, name: str = DEFAULT_NAME, overwrite: bool = False,
                         progress=None) -> LabelsWritten:
    """Write the store's predictions as one NGFF label image per field into the OME-Zarr input it was extracted
    from (see the module doc for the values, metadata and how a stopped run resumes). ``result``: the result the
    predictions were made with (a ClusteringResult or its file), for its K and method. ``overwrite``: replace
    label images named ``name`` that another result wrote. ``progress``: True for a bar on standard error, or a
    callable taking Progress events. Returns a :class:`LabelsWritten`."""
    from .run import PREDICTIONS, part_digest
    from .store import ObjectStore, Reporter, busy, store_lock
    from .view import field_rows

    store = store if isinstance(store, ObjectStore) else ObjectStore(store)
    source = check_labels_target(store, name)
    with warnings.catch_warnings():      # ome-zarr-py 0.18 makes a deprecated Scaler as a default argument on import
        warnings.simplefilter("ignore", DeprecationWarning)
        import ome_zarr.writer  # noqa: F401
    with store_lock(store.path, busy(store.path, "write the labels again")):
        digest = part_digest(store.path / PREDICTIONS)
        if digest is None:
            raise InputError(f"{store.path.name} has no predictions yet: run ticlust predict RESULT "
                             f"{store.path.name} first, then write its labels.")
        loaded = _result_of(result, store, digest)
        if loaded.k >= OUTLIER_VALUE:
            raise InputError(f"K = {loaded.k} clusters do not fit a uint16 label image beside the outlier value "
                             f"{OUTLIER_VALUE}.")
        fields, skipped = _fields(store, source, name)
        made = {f.index: _provenance(f.target) if f.target.exists() else None for f in fields}
        _check_targets(fields, made, digest, name, overwrite)
        rows = _prediction_rows(store)
        report, written, paths = Reporter(progress), 0, []
        for done, target in enumerate(fields):
            report("writing labels", done, len(fields))
            with owned(target.target.parent):    # the field's labels group: checked above, ticlust's to write in
                _sweep(target)
                fmt = None
                if not _holds(made[target.index], digest):
                    picked = field_rows(store, target.index)     # one block: the table is in field order
                    fmt = _write_field(target, {c: v[picked] for c, v in rows.items()}, loaded, digest)
                    written += 1
                _register(target, fmt)
            paths.append(target.target)
        report("writing labels", len(fields), len(fields))
        report.close()
    return LabelsWritten(name, written, len(fields) - written, skipped, digest, paths)


def check_labels_target(store, name: str = DEFAULT_NAME) -> Path:
    """Refuse, in one sentence and before anything is predicted or written, cluster labels that cannot be written: a
    ``name`` that is no plain name, a store not extracted from an OME-Zarr image or plate, or one whose input is
    gone. Returns the OME-Zarr input's path."""
    from .store import ObjectStore

    store = store if isinstance(store, ObjectStore) else ObjectStore(store)
    _check_name(name)
    return _ome_source(store)


def _check_name(name) -> str:
    """A label image name that is one plain folder name."""
    if not isinstance(name, str) or not name.strip() or name != name.strip() or any(c in name for c in "/\\") \
            or name.startswith(".") or name.endswith(".partial"):
        raise InputError(f"The labels name {name!r} is not a plain name: give a name such as {DEFAULT_NAME!r} (no "
                         "slash, not starting with a dot).")
    return name


def _ome_source(store) -> Path:
    """The OME-Zarr the store was extracted from; refused for any other input, or one that is gone."""
    from .fields import _is_zarr

    source = Path(store.attributes["input"]["path"])
    if not source.exists():
        raise InputError(f"The input {source} that {store.path.name} was extracted from is gone: the labels are written "
                         "into it, so give it back at that path.")
    if not (source.is_dir() and _is_zarr(source)):
        raise InputError(f"{store.path.name} was extracted from {source.name}, which is not an OME-Zarr image or plate: "
                         "labels are written back only into an OME-Zarr input; export the clusters with --csv or "
                         "--parquet instead.")
    return source


def _result_of(result, store, digest: str):
    """The result the predictions were made with (loaded when a file); refused when it is another."""
    from .run import _result_file, result_digest

    with _result_file(result, store) as (loaded, path):
        if result_digest(path) != digest:
            raise InputError(f"The predictions of {store.path.name} were made with another result (digest {digest}): "
                             "predict the store with this result first, or give the result its predictions were made "
                             "with.")
    return loaded


def _fields(store, source: Path, name: str) -> tuple[list[_Field], int]:
    """The fields that objects were cut from, with their segmentation's name; and how many the store left out."""
    listing = store.fields
    failed = set(store.failed["field_index"].astype(int).tolist()) if len(store.failed) else set()
    fields = []
    for row in listing.to_dict("records"):
        index = int(row["field_index"])
        if index in failed:
            continue
        image = Path(str(row["image"]))             # an OME-Zarr field's image group, an absolute path
        segmentation = str(row["labels"])
        if segmentation == name:
            raise InputError(f"{name!r} is the segmentation the objects were cut from ({image.name}/labels/{name}): "
                             "give the cluster labels another name.")
        if not (image / "labels" / segmentation).is_dir():
            raise InputError(f"The field {image} has no label image {segmentation!r} any more (the objects were cut "
                             "from it): give the input back as it was extracted.")
        fields.append(_Field(index, image, segmentation, image / "labels" / name))
    return fields, len(failed)


def _provenance(path: Path) -> dict | None:
    """The ``ticlust`` attribute of a label image (None: none there, or no label image)."""
    import zarr

    try:
        value = zarr.open_group(path, mode="r").attrs.get("ticlust")
    except (OSError, ValueError):            # zarr's errors (nothing there, damaged metadata) are ValueErrors
        return None
    return value if isinstance(value, dict) else None


def _check_targets(fields: list[_Field], made: dict, digest: str, name: str, overwrite: bool) -> None:
    """Refuse, before anything is written, label images under ``name`` that are not ticlust's, or another result's
    unless ``overwrite``. ``made``: each field's label image's provenance (:func:`_provenance`) by field index."""
    foreign = [f for f in fields if f.target.exists() and made[f.index] is None]
    if foreign:
        more = f" (and {len(foreign) - 1} more)" if len(foreign) > 1 else ""
        raise InputError(f"{foreign[0].image}/labels/{name}{more} is a label image ticlust did not write: give the "
                         "cluster labels another name.")
    other = [f for f in fields if f.target.exists() and made[f.index].get("result") != digest]
    if other and not overwrite:
        theirs = made[other[0].index].get("result")
        raise InputError(f"{len(other)} field(s) hold labels {name!r} of another result (digest {theirs}, e.g. "
                         f"{other[0].image}): give --overwrite-labels (overwrite=True) to replace them, or another "
                         "--labels-name (name=).")


def _holds(made: dict | None, digest: str) -> bool:
    """Whether a field's label image, of provenance ``made`` (None: none there), was written whole by the result
    ``digest``."""
    return made is not None and made.get("result") == digest and made.get("complete") is True


def _prediction_rows(store) -> dict:
    """field_index, label, frame and the value to paint (cluster + 1, OUTLIER_VALUE) of every object."""
    import pyarrow.parquet as pq

    from .view import predictions_path, read_predictions

    names = pq.read_schema(predictions_path(store)).names
    flags = [c for c in ("outlier", "rejected") if c in names]
    table = read_predictions(store, ["field_index", "label", "frame", "cluster"] + flags)
    cluster = table["cluster"].to_numpy().astype(np.int64)
    outlier = cluster < 0
    for c in flags:
        outlier |= table[c].to_numpy().astype(bool)
    return {"field_index": table["field_index"].to_numpy(), "label": table["label"].to_numpy(),
            "frame": table["frame"].to_numpy(), "value": np.where(outlier, OUTLIER_VALUE, cluster + 1)}


def _sweep(target: _Field) -> None:
    """Remove what a stopped run left half-written in the field's labels group (temporary groups of ``name``)."""
    for stale in target.target.parent.glob(f".{target.target.name}.*.partial"):
        shutil.rmtree(stale, ignore_errors=True)


def _format_of(group):
    """The NGFF format a label image of ``group`` (the segmentation) is written in: its own version, whose Zarr
    format is the group's."""
    from ome_zarr.format import format_from_version
    from ome_zarr.writer import check_format, get_metadata

    meta = get_metadata(group)
    version = meta.get("version") or next((m.get("version") for m in meta.get("multiscales", []) if m.get("version")),
                                          None)
    try:
        fmt = format_from_version(str(version))
    except ValueError:
        return check_format(group)
    return fmt if fmt.zarr_format == group.metadata.zarr_format else check_format(group)


def _write_field(target: _Field, rows: dict, result, digest: str):
    """The field's label image, every pyramid level of the segmentation painted, written under a temporary name and
    renamed into the labels group (replacing another result's). Returns the NGFF format it was written in."""
    import zarr
    from ome_zarr.writer import get_metadata, write_multiscale_labels

    segmentation = zarr.open_group(target.image / "labels" / target.source, mode="r")
    fmt = _format_of(segmentation)
    multiscale = get_metadata(segmentation)["multiscales"][0]
    axes = multiscale.get("axes")
    names = [a["name"] if isinstance(a, dict) else str(a) for a in axes] if axes else None
    pyramid, chunks, transforms = [], [], []
    for level in multiscale["datasets"]:
        array = segmentation[level["path"]]
        pyramid.append(_painted(np.asarray(array[...]), names, rows))
        chunks.append({"chunks": tuple(int(c) for c in array.chunks)})
        transforms.append(level["coordinateTransformations"])
    colors, properties = _label_metadata(rows, result.k)
    tmp = target.target.parent / f".{target.target.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.partial"
    try:
        root = zarr.open_group(tmp, mode="w", zarr_format=fmt.zarr_format)
        with warnings.catch_warnings():         # coordinate_transformations: the segmentation's levels, as they are
            warnings.simplefilter("ignore", DeprecationWarning)
            write_multiscale_labels(pyramid, root, target.target.name, fmt=fmt, axes=axes,
                                    coordinate_transformations=transforms, storage_options=chunks,
                                    label_metadata={"colors": colors, "properties": properties,
                                                    "source": {"image": "../../"}})
        made = tmp / "labels" / target.target.name
        zarr.open_group(made, mode="r+").attrs["ticlust"] = {
            "result": digest, "method": result.method, "k": int(result.k), "field": target.index,
            "segmentation": target.source, "outlier_value": OUTLIER_VALUE, "complete": True}
        old = tmp / "replaced"
        if target.target.exists():
            os.rename(target.target, old)        # another result's labels, taken away in one rename
        os.rename(made, target.target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return fmt


def _painted(level: np.ndarray, names: list[str] | None, rows: dict) -> np.ndarray:
    """One pyramid level of the segmentation with every object's pixels set to its value (0 elsewhere)."""
    from .view import object_values

    names = names or ["t", "c", "z", "y", "x"][-level.ndim:]
    timed = "t" in names
    if timed and names.index("t") != 0:
        raise InputError("The segmentation's time axis is not its first: ticlust reads t, c, z, y, x in that order.")
    flat = level.reshape(((level.shape[0],) if timed else ()) + level.shape[-2:])    # c and z are 1 in a segmentation
    position = object_values(flat, rows["label"], rows["frame"])
    lookup = np.concatenate([[0], rows["value"]]).astype(np.uint16)
    return lookup[position].reshape(level.shape)


def _label_metadata(rows: dict, k: int) -> tuple[list, list]:
    """``colors`` and ``properties`` of ``image-label``: every cluster's value (and the outlier value) with its
    colour as 0…255 RGBA, its cluster number and how many of the field's objects it holds."""
    counts = np.bincount(np.minimum(rows["value"], k + 1).astype(np.int64), minlength=k + 2)
    colors, properties = [], []
    for cluster in list(range(k)) + [-1]:
        value = cluster + 1 if cluster >= 0 else OUTLIER_VALUE
        rgba = [int(round(255 * c)) for c in cluster_color(cluster)]
        colors.append({"label-value": value, "rgba": rgba})
        properties.append({"label-value": value, "cluster": cluster, "name": f"cluster {cluster}" if cluster >= 0
                           else "outlier", "objects": int(counts[value if cluster >= 0 else k + 1])})
    return colors, properties


def _register(target: _Field, fmt=None) -> None:
    """List the label image in its labels group's ``labels`` (once), in the group's own NGFF version: ``fmt``, the
    format the label image was just written in (None: the segmentation's, read when the list needs it)."""
    import zarr
    from ome_zarr.writer import add_metadata, get_metadata

    group = zarr.open_group(target.target.parent, mode="r+")
    meta = get_metadata(group)
    listed = list(meta.get("labels", []))
    if target.target.name in listed:
        return
    if fmt is None:
        fmt = _format_of(zarr.open_group(target.image / "labels" / target.source, mode="r"))
    # NGFF 0.5 wants the version beside the list (ome-zarr-py 0.18 leaves it out of the labels group)
    version = {} if fmt.zarr_format == 2 or "version" in meta else {"version": fmt.version}
    add_metadata(group, {"labels": listed + [target.target.name], **version}, fmt=fmt)


__all__ = ["write_cluster_labels", "check_labels_target", "LabelsWritten", "cluster_color", "CLUSTER_COLORS", "OUTLIER_COLOR",
           "OUTLIER_VALUE", "DEFAULT_NAME"]
