"""The fields of a plate: which image goes with which mask, and reading one field lazily.

An extraction's INPUT (see :func:`list_fields`) is one of

- a folder of fields, each image paired with its mask by name: ``NAME_cp_masks.*`` (Cellpose),
  ``NAME_masks.*`` or ``NAME.labels.*`` beside ``NAME.*`` (.tif, .png, .npy, ...);
- a CSV manifest with columns ``image`` and ``labels`` (paths relative to the CSV) and any others
  (well, field, time, condition, ...), which every object's row carries;
- an OME-Zarr image (NGFF) with a ``labels`` group, read with ome-zarr-py (its first label image,
  or the one named by ``labels``);
- an NGFF HCS plate (plate → wells → fields, each field an OME-Zarr image with its labels group): every
  field of every well, the rows carrying well, row, column and site;
- one field image with ``labels=MASK``.

The listing is small and made up front (file names only, nothing is read); a field is opened by
:func:`open_field` in whichever process cuts it, from its :class:`FieldSpec` (plain paths, so it
travels to a worker process or a cluster as it is). Problems of one field (a missing or unreadable
file, a mask of another shape) surface when it is opened, as an ``InputError`` for that field alone.
"""
from __future__ import annotations

import logging
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import InputError
from ..objects.crops import TABLE_COLUMNS
from ..io.readers import IMAGE_SUFFIXES, read_image

#: How a mask is named after its image's stem NAME: NAME_cp_masks (Cellpose), NAME_masks, NAME.labels.
MASK_ENDINGS = ("_cp_masks", "_masks", ".labels")
#: Cellpose's other outputs beside its masks (NAME_seg.npy, NAME_flows.tif, NAME_cp_outlines.png, ...): not fields.
SIDE_ENDINGS = ("_seg", "_flows", "_outlines")
#: Files a folder of fields may hold, images and masks alike.
FIELD_SUFFIXES = IMAGE_SUFFIXES + (".npy",)
#: Columns every object row has besides the manifest's own (a manifest may not reuse these names).
ROW_COLUMNS = ("field_index", "image", "labels") + TABLE_COLUMNS
#: The assignment columns a prediction adds to every row (ticlust.plate.run).
ASSIGN_COLUMNS = ("cluster", "score", "runner_up", "runner_up_score")
#: The object map's columns after them: each object's place (NaN for a result without a map: ticlust.plate.maps).
MAP_COLUMNS = ("map_x", "map_y")
#: Names a manifest's own columns may not take: the rows' own, a prediction's, and those of a store fit's CSV.
RESERVED_COLUMNS = ROW_COLUMNS + ASSIGN_COLUMNS + MAP_COLUMNS + ("rejected", "object")


@dataclass(frozen=True)
class FieldSpec:
    """Where one field is: ``image`` a file or an OME-Zarr image group (absolute paths), ``labels`` its
    mask file, or the label image's name inside the OME-Zarr (``ome``); None when no mask was found."""

    index: int
    image: str
    labels: str | None
    ome: bool = False


def list_fields(input, labels=None):
    """The fields of INPUT in a fixed order: ``(specs, listing)``, ``listing`` a DataFrame with one row
    per field (``field``, ``image``, ``labels`` as the input names them, then a manifest's other columns)."""
    import pandas as pd

    path = Path(input)
    if not path.exists():
        raise InputError(f"There is no file or folder at {path}: check the path.")
    if path.is_dir() and _is_zarr(path) and _plate_attributes(path) is not None:
        rows, specs = _plate_listing(path, labels)
    elif path.is_dir() and _is_zarr(path):
        image, name = _ome_listing(path, labels)
        rows, specs = [{"image": image, "labels": name}], [FieldSpec(0, image, name, ome=True)]
    elif labels is not None and (path.is_dir() or path.suffix.lower() == ".csv"):
        raise InputError("--labels (labels=) goes with one field image or names an OME-Zarr label image: a folder or "
                         "a manifest pairs every image with its own mask.")
    elif path.is_dir():
        rows, specs = _folder_listing(path)
    elif path.suffix.lower() == ".csv":
        rows, specs = _manifest_listing(path)
    elif labels is None:
        raise InputError(f"{path.name} is one field: give its mask with --labels MASK (labels=), or give a folder of "
                         "fields with masks, a CSV manifest or an OME-Zarr image.")
    else:
        image, mask = str(path.resolve()), str(Path(labels).resolve())
        rows, specs = [{"image": image, "labels": mask}], [FieldSpec(0, image, mask)]
    listing = pd.DataFrame(rows)
    listing = listing[["image", "labels"] + [c for c in listing.columns if c not in ("image", "labels")]]
    listing.insert(0, "field_index", np.arange(len(rows), dtype=np.int64))
    return specs, listing


def _folder_listing(folder: Path):
    """Images of a folder (sorted by name) paired with their masks by name."""
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in FIELD_SUFFIXES)
    masks: dict[str, list[Path]] = {}
    images = []
    for p in files:
        ending = next((e for e in MASK_ENDINGS if p.stem.endswith(e)), None)
        if p.stem.endswith(SIDE_ENDINGS):
            continue
        if ending is None:
            images.append(p)
        else:
            masks.setdefault(p.stem[:-len(ending)], []).append(p)
    if not images:
        raise InputError(f"The folder {folder} holds no field images ({', '.join(FIELD_SUFFIXES)}) beside masks: "
                         "put each field image beside its mask.")
    if not masks:
        raise InputError(f"The folder {folder} holds {len(images)} images but no masks: name each image's mask "
                         "NAME_cp_masks.tif (Cellpose), NAME_masks.tif or NAME.labels.tif beside NAME.tif, or list the "
                         "pairs in a CSV manifest with columns image,labels.")
    rows, specs = [], []
    for i, image in enumerate(images):
        found = masks.get(image.stem, [])
        if len(found) > 1:
            raise InputError(f"{image.name} has {len(found)} masks ({', '.join(p.name for p in found)}): keep one of "
                             "them in the folder.")
        mask = found[0] if found else None
        rows.append({"image": image.name, "labels": mask.name if mask else None})
        specs.append(FieldSpec(i, str(image.resolve()), str(mask.resolve()) if mask else None))
    return rows, specs


def _manifest_listing(csv: Path):
    """The rows of a CSV manifest: image and labels paths relative to the CSV, any other columns kept."""
    table = _read_manifest(csv)
    missing = [c for c in ("image", "labels") if c not in table.columns]
    if missing:
        raise InputError(f"The manifest {csv.name} has no column {' or '.join(repr(c) for c in missing)}: give columns "
                         "image,labels (paths relative to the CSV) and any others you want carried to every object.")
    if len(table) == 0:
        raise InputError(f"The manifest {csv.name} lists no fields: add one row per field image.")
    clash = [c for c in table.columns if c in RESERVED_COLUMNS and c not in ("image", "labels")]
    if clash:
        raise InputError(f"The manifest {csv.name} has column{'s' if len(clash) > 1 else ''} {', '.join(clash)}, which "
                         "every object row has already or a prediction adds: rename them (the rows' own columns are "
                         "field_index, image, labels and those of docs/objects.md; a prediction adds "
                         f"{', '.join(ASSIGN_COLUMNS)}).")
    base = csv.resolve().parent
    specs = [FieldSpec(i, _beside(base, image), _beside(base, labels))
             for i, (image, labels) in enumerate(zip(table["image"], table["labels"]))]
    twice = _repeated(specs)
    if twice:
        raise InputError(f"The manifest {csv.name} lists the image {table['image'][twice[0]]} with the mask "
                         f"{table['labels'][twice[0]]} {len(twice)} times (rows {', '.join(str(i + 2) for i in twice)}, "
                         "the header being row 1): list each field once.")
    for c in ("image", "labels"):
        table[c] = [None if _blank(v) else str(v) for v in table[c]]
    return table.to_dict("records"), specs


def _read_manifest(csv: Path):
    """A manifest as a DataFrame, every cell in its own column: a row with more cells than the header is refused
    (pandas would shift it under the header), a header cell left blank over blank cells (a trailing comma) dropped."""
    import warnings

    import pandas as pd

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", pd.errors.ParserWarning)
            table = pd.read_csv(csv, index_col=False)
    except pd.errors.ParserWarning:
        raise InputError(f"The manifest {csv.name} has rows with more cells than its header: name every column in the "
                         "header, and quote cells that hold a comma.") from None
    except Exception as exc:
        raise InputError(f"Could not read the manifest {csv.name} ({type(exc).__name__}: {_first_line(exc)}): give a CSV "
                         "file with columns image,labels.") from None
    blank = [c for c in table.columns if str(c).startswith("Unnamed: ")]
    named = [c for c in blank if table[c].notna().any()]
    if named:
        raise InputError(f"The manifest {csv.name} has a column without a name in its header (column "
                         f"{table.columns.get_loc(named[0]) + 1}): name it, or remove its cells.")
    return table.drop(columns=blank)


def _first_line(exc: Exception) -> str:
    """An exception's message, first line only (a sentence of ours must stay one line)."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _repeated(specs) -> list[int]:
    """The indices of the first field listed more than once (the same image with the same mask: its objects would
    be cut and counted twice); [] when every field is listed once. One image with two masks (say, nuclei and
    cells) is two fields."""
    seen: dict[tuple, list[int]] = {}
    for i, spec in enumerate(specs):
        if spec.image is not None:
            seen.setdefault((spec.image, spec.labels), []).append(i)
    return next((rows for rows in seen.values() if len(rows) > 1), [])


def _blank(value) -> bool:
    """An empty manifest cell (missing, NaN or blank)."""
    return value is None or (isinstance(value, float) and np.isnan(value)) or str(value).strip() == ""


def _beside(base: Path, value) -> str | None:
    """A manifest path as an absolute one: relative paths are relative to the CSV's folder."""
    return None if _blank(value) else str((base / str(value)).resolve())


# ---- OME-Zarr ------------------------------------------------------------------------------------
def _is_zarr(path: Path) -> bool:
    """A folder that zarr opens as a Zarr node (v3 or v2, a group or an array): an OME-Zarr candidate."""
    import zarr

    try:
        zarr.open(path, mode="r")
    except (OSError, ValueError):             # zarr's errors (no node there, damaged metadata) are ValueErrors
        return False
    return True


@contextmanager
def _quiet_ome():
    """ome-zarr logs a warning for every label image that does not name its source image: not ours to show."""
    logger = logging.getLogger("ome_zarr")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def _ome_nodes(path: Path):
    """(image node, {label name: node}) of an OME-Zarr image, read with ome-zarr-py."""
    from ome_zarr.io import parse_url
    from ome_zarr.reader import Label, Multiscales, Reader

    with _quiet_ome():
        location = parse_url(str(path))
        nodes = list(Reader(location)()) if location is not None else []
    image = next((n for n in nodes if any(isinstance(s, Multiscales) for s in n.specs)
                  and not any(isinstance(s, Label) for s in n.specs)), None)
    if image is None:
        raise InputError(f"{path.name} is a Zarr group but not an OME-Zarr image (no multiscales): give an OME-Zarr "
                         "image with a labels group.")
    found = {Path(n.zarr.path).name: n for n in nodes if any(isinstance(s, Label) for s in n.specs)}
    return image, found


def _ome_listing(path: Path, name):
    """The one field of an OME-Zarr image: its path and the label image to use (the first, or ``name``)."""
    _, found = _ome_nodes(path)
    if not found:
        raise InputError(f"The OME-Zarr image {path.name} has no labels group: add the segmentation as an NGFF label "
                         "image (e.g. ome_zarr.writer.write_labels), or give a field image with --labels MASK.")
    if name is None:
        name = next(iter(found))
    elif str(name) not in found:
        raise InputError(f"The OME-Zarr image {path.name} has no label image {name!r}: choose one of {', '.join(found)}.")
    return str(path.resolve()), str(name)


def _attributes(path: Path) -> dict:
    """A Zarr group's attributes as ome-zarr-py reads them (Zarr v2 or v3; NGFF 0.5's ``ome`` key opened up);
    {} when the group is not there."""
    from ome_zarr.io import parse_url

    with _quiet_ome():
        location = parse_url(str(path))
    if location is None:
        return {}
    attrs = dict(location.root_attrs)
    return {**attrs, **attrs["ome"]} if isinstance(attrs.get("ome"), dict) else attrs


def _plate_attributes(path: Path) -> dict | None:
    """The ``plate`` metadata of an NGFF HCS plate (plate → wells → fields), or None for any other group."""
    plate = _attributes(path).get("plate")
    return plate if isinstance(plate, dict) else None


def _plate_listing(plate: Path, name):
    """Every field of every well of an NGFF HCS plate, wells in the plate's row/column order and fields in
    each well's order; each row carries ``well`` (row and column names, e.g. B03), ``row``, ``column`` and
    ``site`` (the field's place in its well). Only metadata is read here: a field without the label image
    fails on its own when it is cut, as a field of a folder does."""
    wells = _plate_attributes(plate).get("wells") or []
    if not wells:
        raise InputError(f"The OME-Zarr plate {plate.name} lists no wells: there is nothing to extract.")

    def place(well):
        r, c = well.get("rowIndex"), well.get("columnIndex")
        return (r, c) if isinstance(r, int) and isinstance(c, int) else tuple(str(well["path"]).split("/")[:2])

    rows, specs = [], []
    for well in sorted(wells, key=place):
        row_name, column_name = str(well["path"]).split("/")[:2]
        fields = (_attributes(plate / well["path"]).get("well") or {}).get("images") or []
        for site, field in enumerate(fields):
            image = plate / well["path"] / str(field["path"])
            found = (_attributes(image / "labels").get("labels") or []) if image.is_dir() else []
            label = (str(name) if name is not None else found[0]) if found else None
            rows.append({"image": str(image.resolve()), "labels": label, "well": f"{row_name}{column_name}",
                         "row": row_name, "column": column_name, "site": site})
            specs.append(FieldSpec(len(specs), str(image.resolve()), label, ome=True))
    if not specs:
        raise InputError(f"The OME-Zarr plate {plate.name} has wells but no field images in them: there is nothing "
                         "to extract.")
    twice = _repeated(specs)
    if twice:
        raise InputError(f"The OME-Zarr plate {plate.name} lists the field {Path(specs[twice[0]].image).name} "
                         f"{len(twice)} times (wells {', '.join(rows[i]['well'] for i in twice)}): list each field once "
                         "in the plate's metadata.")
    if name is None and all(s.labels is None for s in specs):
        raise InputError(f"No field of the OME-Zarr plate {plate.name} has a labels group: add each field's "
                         "segmentation as an NGFF label image (e.g. ome_zarr.writer.write_labels).")
    return rows, specs


class _NGFFView:
    """An NGFF array as ticlust reads a field: z (and a label image's c) of length 1 dropped, one frame
    (the whole image without t) decoded at a time and kept while windows of it are read."""

    def __init__(self, array, axes: list[str], drop: tuple[str, ...], what: str):
        for name in drop:
            if name in axes and array.shape[axes.index(name)] != 1:
                raise InputError(f"The OME-Zarr {what} has {array.shape[axes.index(name)]} planes along {name}: ticlust "
                                 "cuts 2-D objects, so give a 2-D image (or a projection) per time point.")
        self.array = array
        self.keep = [i for i, a in enumerate(axes) if a not in drop]
        self.axes = [axes[i] for i in self.keep]
        self.shape = tuple(int(array.shape[i]) for i in self.keep)
        self.dtype = np.dtype(array.dtype)
        self.ndim = len(self.shape)
        self.timed = "t" in self.axes
        self._frame, self._data = None, None

    def _load(self, frame):
        """The whole frame ``frame`` (None: the image without t), decoded once and kept for its windows."""
        if self._frame != frame or self._data is None:
            key = [0] * self.array.ndim
            for i in self.keep:
                key[i] = slice(None)
            if self.timed:
                key[self.keep[0]] = frame
            self._frame, self._data = frame, np.asarray(self.array[tuple(key)])
        return self._data

    def __getitem__(self, key):
        """A window of one frame (``[t, ...]`` for a time series), as NumPy."""
        key = key if isinstance(key, tuple) else (key,)
        if self.timed:
            return self._load(int(key[0]))[key[1:]]
        return self._load(None)[key]

    def __array__(self, dtype=None, copy=None):
        """All of it (a label image of one frame, as objects.py reads labels)."""
        data = np.stack([self._load(t) for t in range(self.shape[0])]) if self.timed else self._load(None)
        return data if dtype is None else data.astype(dtype)


def _ome_field(spec: FieldSpec, channel):
    """(image, labels, channel_axis) of an OME-Zarr field, both read frame by frame from Zarr."""
    import zarr

    path = Path(spec.image)
    image_node, found = _ome_nodes(path)
    if spec.labels not in found:
        raise InputError(f"The OME-Zarr image {path.name} has no label image {spec.labels!r} any more.")
    views = []
    for node, drop, what in ((image_node, ("z",), "image"), (found[spec.labels], ("z", "c"), "labels")):
        axes = [a["name"] if isinstance(a, dict) else str(a) for a in node.metadata.get("axes", [])]
        level = next(s for s in node.specs if hasattr(s, "datasets")).datasets[0]
        array = zarr.open_array(f"{node.zarr.path}/{level}", mode="r")
        if not axes:
            axes = ["t", "c", "z", "y", "x"][-array.ndim:]
        if what == "image" and channel is None and "c" in axes and array.shape[axes.index("c")] == 1:
            drop = drop + ("c",)
        views.append(_NGFFView(array, axes, drop, what))
    image, labels = views
    return image, labels, image.axes.index("c") if "c" in image.axes else None


# ---- one field -----------------------------------------------------------------------------------
def open_field(spec: FieldSpec, channel=None):
    """``(image, labels, channel_axis)`` of one field, lazy where the format allows (memory-mapped TIFF
    and .npy, OME-Zarr frame by frame); an ``InputError`` names what is wrong with this field."""
    if spec.image is None:
        raise InputError("This manifest row names no image: give the field image's path in its image column.")
    if spec.labels is None and spec.ome:
        raise InputError(f"The OME-Zarr field {spec.image} has no labels group: add its segmentation as an NGFF "
                         "label image.")
    if spec.labels is None:
        name = Path(spec.image).stem
        raise InputError(f"No mask for {Path(spec.image).name}: name it {name}_cp_masks.tif, {name}_masks.tif or "
                         f"{name}.labels.tif (any image type) beside it, or give its path in a manifest's labels column.")
    if spec.ome:
        return _ome_field(spec, channel)
    return _read(spec.image, "image"), _read(spec.labels, "mask"), None


def _read(path: str, what: str):
    """One image or mask file, or an InputError naming it."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"There is no {what} file at {p}: check the path.")
    try:
        return read_image(p)
    except Exception as exc:
        raise InputError(f"Could not read the {what} {p.name} ({type(exc).__name__}: {exc}).") from None
