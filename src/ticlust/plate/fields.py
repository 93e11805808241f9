"""The fields of a plate: which image goes with which mask, and reading one field lazily.

An extraction's INPUT (see :func:`list_fields`) is one of

- a folder of fields, each image paired with its mask by name: ``NAME_cp_masks.*`` (Cellpose),
  ``NAME_masks.*`` or ``NAME.labels.*`` beside ``NAME.*`` (.tif, .png, .npy, ...); a file bioio reads
  (OME-TIFF, ND2, CZI, LIF, ...) is one field per scene, scene k's mask ``NAME_s<k>_masks.*`` (any of the
  endings; a file of one scene: ``NAME_masks.*``);
- a CSV manifest (:mod:`ticlust.plate.manifest`): ``image`` and ``labels`` columns, or one ``image_<Channel>``
  column per channel, or CellProfiler's LoadData ``FileName_<Channel>``/``PathName_<Channel>`` pairs with
  ``ObjectsFileName_<Name>``; its other columns are carried to every object's row;
- an OME-Zarr image (NGFF) with a ``labels`` group, read with ome-zarr-py (its first label image,
  or the one named by ``labels``);
- an NGFF HCS plate (plate → wells → fields, each field an OME-Zarr image with its labels group): every
  field of every well, the rows carrying well, row, column and site;
- one field image with ``labels=MASK``, or one file bioio reads (its scenes, masks paired by name beside it).

The listing is small and made up front (file names only, and the scenes of files bioio reads); a field is opened
by :func:`open_field` in whichever process cuts it, from its :class:`FieldSpec` (plain paths, so it travels to a
worker process or a cluster as it is). Problems of one field (a missing or unreadable file, a mask of another
shape) surface when it is opened, as an ``InputError`` for that field alone. Channels are picked by name where
the input names them (a manifest's channel columns, OME-Zarr's omero labels, a microscope file's channels), or by
index.
"""
from __future__ import annotations

import logging
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import numpy as np

from ..errors import InputError
from ..io.readers import (IMAGE_SUFFIXES, VENDOR_SUFFIXES, BioField, ChannelStack, bioio_scenes, read_by_bioio,
                          read_image, read_labels, vendor_suffix)
from .manifest import manifest_listing, scene_index
from .spec import CHANNEL_PREFIX, FieldSpec, beside, blank, first_line, repeated
from .spec import ASSIGN_COLUMNS, MAP_COLUMNS, RESERVED_COLUMNS, ROW_COLUMNS  # noqa: F401 - offered here, as before

# the helpers' names this module has always offered its room
_beside, _first_line = beside, first_line

#: How a mask is named after its image's stem NAME: NAME_cp_masks (Cellpose), NAME_masks, NAME.labels,
#: NAME_labels (StarDist's and others' label images). Cellpose's NAME_seg.npy is one too, taken when NAME has no other.
MASK_ENDINGS = ("_cp_masks", "_masks", ".labels", "_labels")
#: Cellpose's saved segmentation, a mask of the image NAME when nothing else is (io.readers.read_labels reads it).
SEG_ENDING = "_seg"
#: Cellpose's other outputs beside its masks (NAME_seg.npy, NAME_flows.tif, NAME_cp_outlines.png, ...): not fields.
SIDE_ENDINGS = ("_seg", "_flows", "_outlines")
#: Files a folder of fields may hold, images and masks alike (and files bioio reads, images only).
FIELD_SUFFIXES = IMAGE_SUFFIXES + (".npy",)


def list_fields(input, labels=None, *, segment: bool = False, suffixes=None):
    """The fields of INPUT in a fixed order: ``(specs, listing)``, ``listing`` a DataFrame with one row
    per field (``field``, ``image``, ``labels`` as the input names them, then a manifest's other columns).
    ``segment``: the fields need no masks (ticlust segments them; ``plate.segment``), so none is asked for.
    ``suffixes``: INPUT is a folder of one file per channel, ``NAME<suffix>.tif`` (``NAME_D.tif``, ``NAME_F.tif``:
    suffixes D, F), one field per NAME, its channels named by the suffixes (:func:`suffix_listing`)."""
    import pandas as pd

    path = Path(input)
    if not path.exists():
        raise InputError(f"There is no file or folder at {path}: check the path.")
    if suffixes is not None:
        rows, specs = suffix_listing(path, suffixes, need_masks=not segment)
    elif segment and path.is_dir() and _is_zarr(path):
        raise InputError(f"{path.name} is an OME-Zarr: ticlust segments fields given as image files (a folder, a "
                         "manifest, one file); add the segmentation to the OME-Zarr as a label image instead.")
    elif path.is_dir() and _is_zarr(path) and _plate_attributes(path) is not None:
        rows, specs = _plate_listing(path, labels)
    elif path.is_dir() and _is_zarr(path):
        image, name = _ome_listing(path, labels)
        rows, specs = [{"image": image, "labels": name}], [FieldSpec(0, image, name, ome=True)]
    elif path.suffix.lower() == ".csv":
        rows, specs = manifest_listing(path, labels, need_masks=not segment)
    elif labels is not None and path.is_dir():
        raise InputError("--labels (labels=) goes with one field image or names an OME-Zarr label image: a folder "
                         "pairs every image with its own mask.")
    elif path.is_dir():
        rows, specs = _folder_listing(path, need_masks=not segment)
    elif labels is None and read_by_bioio(path):
        rows, specs = _scene_listing(path.parent, [path], need_masks=not segment)
    elif labels is None and segment:
        rows, specs = [{"image": str(path.resolve()), "labels": None}], [FieldSpec(0, str(path.resolve()), None)]
    elif labels is None:
        raise InputError(f"{path.name} is one field: give its mask with --labels MASK (labels=), or give a folder of "
                         "fields with masks, a CSV manifest or an OME-Zarr image.")
    else:
        rows, specs = _one_field(path, labels)
    listing = pd.DataFrame(rows)
    listing = listing[["image", "labels"] + [c for c in listing.columns if c not in ("image", "labels")]]
    listing.insert(0, "field_index", np.arange(len(rows), dtype=np.int64))
    return specs, listing


def _one_field(path: Path, labels):
    """One field image with its mask (a file bioio reads: of one scene)."""
    image, mask = str(path.resolve()), str(Path(labels).resolve())
    scene = None
    if read_by_bioio(path):
        scenes = bioio_scenes(path)
        if len(scenes) > 1:
            raise InputError(f"{path.name} has {len(scenes)} scenes, each a field with its own mask: leave --labels out "
                             f"and name scene k's mask {_stem(path)}_s<k>_masks.tif beside it, or list the scenes in a "
                             "CSV manifest with a scene column.")
        scene = 0
    return [{"image": image, "labels": mask}], [FieldSpec(0, image, mask, scene=scene)]


def _stem(path: Path) -> str:
    """A field file's name without its format suffix (``.ome.tif`` counted whole)."""
    name = path.name
    suffix = vendor_suffix(path) if read_by_bioio(path) else path.suffix
    return name[:len(name) - len(suffix)] if name.lower().endswith(suffix) else path.stem


def _folder_listing(folder: Path, need_masks: bool = True):
    """Images of a folder (sorted by name) paired with their masks by name; a file bioio reads gives one field
    per scene. ``need_masks``: a folder without any mask is refused."""
    files = sorted(p for p in folder.iterdir() if p.is_file() and (p.suffix.lower() in FIELD_SUFFIXES
                                                                    or vendor_suffix(p) in VENDOR_SUFFIXES))
    masks = _masks_by_stem(files)
    images = [p for p in files if _mask_ending(_stem(p)) is None and not _stem(p).endswith(SIDE_ENDINGS)]
    if not images:
        raise InputError(f"The folder {folder} holds no field images ({', '.join(FIELD_SUFFIXES + VENDOR_SUFFIXES)}) "
                         "beside masks: put each field image beside its mask.")
    if not masks and need_masks:
        raise InputError(f"The folder {folder} holds {len(images)} images but no masks: name each image's mask "
                         "NAME_cp_masks.tif (Cellpose), NAME_masks.tif or NAME.labels.tif beside NAME.tif, list the "
                         "pairs in a CSV manifest with columns image,labels, or let ticlust find the nuclei "
                         "(--segment nuclei --diameter D).")
    bio = [p for p in images if read_by_bioio(p)]
    rows, specs = _scene_listing(folder, bio, masks, need_masks) if bio else ([], [])
    for image in images:
        if image in bio:
            continue
        mask = _one_mask(image, masks.get(_stem(image), []))
        rows.append({"image": image.name, "labels": mask.name if mask else None})
        specs.append(FieldSpec(0, str(image.resolve()), str(mask.resolve()) if mask else None))
    order = sorted(range(len(rows)), key=lambda i: (rows[i]["image"], rows[i].get("scene", 0)))
    rows = [rows[i] for i in order]
    return rows, [replace(specs[i], index=n) for n, i in enumerate(order)]


def suffix_listing(folder: Path, suffixes, need_masks: bool = True):
    """A folder of one image file per channel, named ``NAME<suffix>`` for each channel suffix (``01_POS002_D.TIF``,
    ``01_POS002_F.TIF`` with suffixes D, F): one field per NAME (a separator ``_ - .`` before the suffix is not part
    of it), its channels the suffixes in the order given, its mask ``NAME_masks.tif`` (any mask ending) if there is
    one. A field missing a channel's file fails alone when it is cut."""
    suffixes = _suffixes(suffixes)
    if not folder.is_dir():
        raise InputError(f"--channel-suffixes (channel_suffixes=) names the channels of a folder's files, and {folder} "
                         "is not a folder: give the folder of the fields' channel files.")
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in FIELD_SUFFIXES)
    masks = _masks_by_stem(files)
    fields: dict[str, dict[str, Path]] = {}
    for p in files:
        stem = _stem(p)
        if _mask_ending(stem) is not None or stem.endswith(SIDE_ENDINGS):
            continue
        suffix = next((x for x in sorted(suffixes, key=len, reverse=True) if stem.endswith(x) and len(stem) > len(x)),
                      None)
        if suffix is not None:
            fields.setdefault(stem[:-len(suffix)].rstrip("_-. ") or stem[:-len(suffix)], {})[suffix] = p
    if not fields:
        raise InputError(f"No image file of {folder} ends in a channel suffix ({', '.join(suffixes)}): name the files "
                         f"NAME_{suffixes[0]}.tif, or give the suffixes their names end with.")
    if need_masks and not any(masks.get(name) for name in fields):
        raise InputError(f"The folder {folder} holds {len(fields)} fields but no masks: name each field's mask "
                         "NAME_masks.tif beside its channel files, or let ticlust find the nuclei (--segment nuclei "
                         "--diameter D).")
    rows, specs = [], []
    for index, (name, found) in enumerate(sorted(fields.items())):
        mask = _one_mask(Path(name), masks.get(name, []))
        paths = [found.get(x) for x in suffixes]
        first = next(p for p in paths if p is not None)
        rows.append({"image": first.name, "labels": mask.name if mask else None,
                     **{CHANNEL_PREFIX + x: p.name if p else None for x, p in zip(suffixes, paths)}})
        specs.append(FieldSpec(index, str(first.resolve()), str(mask.resolve()) if mask else None,
                               channels=tuple((x, str(p.resolve()) if p else None) for x, p in zip(suffixes, paths))))
    return rows, specs


def _suffixes(suffixes) -> list[str]:
    """Channel suffixes as a list of distinct, non-empty texts (``"D,F,R"`` or a list), or one sentence."""
    picks = [t.strip() for t in suffixes.split(",")] if isinstance(suffixes, str) else list(suffixes or [])
    if not picks or any(not isinstance(t, str) or not t.strip() for t in picks) or len(set(picks)) < len(picks):
        raise InputError(f"channel_suffixes={suffixes!r} must name each channel's file suffix once, e.g. D,F,R for "
                         "NAME_D.tif, NAME_F.tif, NAME_R.tif.")
    return [t.strip() for t in picks]


def _mask_ending(stem: str) -> str | None:
    """The mask ending (:data:`MASK_ENDINGS`) a file's stem ends with, None for an image."""
    return next((e for e in MASK_ENDINGS if stem.endswith(e)), None)


def _masks_by_stem(files) -> dict[str, list[Path]]:
    """``{image stem: [mask files]}`` of the masks among ``files`` (in their order), by the stem of the image each
    is named after."""
    masks: dict[str, list[Path]] = {}
    for p in files:
        stem = _stem(p)
        ending = _mask_ending(stem) or (SEG_ENDING if p.suffix.lower() == ".npy" and stem.endswith(SEG_ENDING) else None)
        if ending is not None:
            masks.setdefault(stem[:-len(ending)], []).append(p)
    return masks


def _one_mask(image: Path, found: list[Path]):
    """The one mask found for ``image`` (or None), refusing two; Cellpose's ``_seg.npy`` only when nothing else is
    there (Cellpose writes it beside its ``_cp_masks.png``, the same masks)."""
    named = [p for p in found if not _stem(p).endswith(SEG_ENDING)]
    found = named or found
    if len(found) > 1:
        raise InputError(f"{image.name} has {len(found)} masks ({', '.join(p.name for p in found)}): keep one of "
                         "them in the folder.")
    return found[0] if found else None


def _scene_listing(folder: Path, files: list[Path], masks: dict | None = None, need_masks: bool = True):
    """Every scene of files bioio reads, each a field, its mask found by name in ``folder``: ``NAME_s<k>`` with a
    mask ending for scene k, or ``NAME`` with one for a file of one scene. One file given alone (no ``masks``)
    is refused when no scene of it has a mask."""
    alone = masks is None
    if alone:
        masks = _masks_by_stem(sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in FIELD_SUFFIXES))
    rows, specs = [], []
    for image in files:
        scenes = bioio_scenes(image)
        for k in range(len(scenes)):
            names = [f"{_stem(image)}_s{k}"] + ([_stem(image)] if len(scenes) == 1 else [])
            mask = _one_mask(image, [m for n in names for m in masks.get(n, [])])
            rows.append({"image": image.name, "labels": mask.name if mask else None, "scene": k})
            specs.append(FieldSpec(len(specs), str(image.resolve()), str(mask.resolve()) if mask else None, scene=k))
    if alone and need_masks and not any(s.labels for s in specs):
        name = _stem(files[0])
        raise InputError(f"No scene of {files[0].name} has a mask: name scene k's mask {name}_s<k>_cp_masks.tif, "
                         f"{name}_s<k>_masks.tif or {name}_s<k>.labels.tif beside it (a file of one scene: "
                         f"{name}_masks.tif), or list the fields in a CSV manifest.")
    return rows, specs


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
    twice = repeated(specs)
    if twice:
        raise InputError(f"The OME-Zarr plate {plate.name} lists the field {Path(specs[twice[0]].image).name} "
                         f"{len(twice)} times (wells {', '.join(rows[i]['well'] for i in twice)}): list each field once "
                         "in the plate's metadata.")
    if name is None and all(s.labels is None for s in specs):
        raise InputError(f"No field of the OME-Zarr plate {plate.name} has a labels group: add each field's "
                         "segmentation as an NGFF label image (e.g. ome_zarr.writer.write_labels).")
    return rows, specs


class _NGFFView:
    """An NGFF array as ticlust reads a field: z (and a label image's c) of length 1 dropped, or one plane of z
    picked (``z`` an index) or their maximum (``z="max"``, images only); one frame (the whole image without t)
    decoded at a time and kept while windows of it are read."""

    def __init__(self, array, axes: list[str], drop: tuple[str, ...], what: str, z=None):
        self.z = None
        if "z" in axes and array.shape[axes.index("z")] != 1:
            planes = int(array.shape[axes.index("z")])
            if z is None or (z == "max" and what != "image"):
                fix = "pick one plane with --z N" + (" (z=N) or project them with --z max" if what == "image" else "")
                raise InputError(f"The OME-Zarr {what} has {planes} planes along z and ticlust cuts 2-D objects: "
                                 f"{fix}.")
            if z != "max" and not 0 <= int(z) < planes:
                raise InputError(f"The OME-Zarr {what} has {planes} planes along z: give --z from 0 to {planes - 1}.")
            self.z = z if z == "max" else int(z)
        for name in drop:
            if name in axes and name != "z" and array.shape[axes.index(name)] != 1:
                raise InputError(f"The OME-Zarr {what} has {array.shape[axes.index(name)]} planes along {name}: ticlust "
                                 "cuts 2-D objects, so give a 2-D image per time point.")
        self.array = array
        self.axes_all = list(axes)
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
            key: list = [0] * self.array.ndim
            for i in self.keep:
                key[i] = slice(None)
            zaxis = self.axes_all.index("z") if "z" in self.axes_all else None
            if zaxis is not None and self.z is not None:
                key[zaxis] = slice(None) if self.z == "max" else self.z
            if self.timed:
                key[self.keep[0]] = frame
            data = np.asarray(self.array[tuple(key)])
            if self.z == "max":      # the z axis is the only one kept besides self.keep
                data = data.max(axis=sum(1 for i in range(zaxis) if isinstance(key[i], slice)))
            self._frame, self._data = frame, data
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


def _ome_field(spec: FieldSpec, channel, z):
    """(image, labels, channel_axis, channel names) of an OME-Zarr field, both read frame by frame from Zarr."""
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
        views.append(_NGFFView(array, axes, drop, what, z))
    image, labels = views
    channels = (_attributes(path).get("omero") or {}).get("channels") or []
    names = tuple(str(c.get("label", "")) if isinstance(c, dict) else "" for c in channels)
    if "c" not in image.axes or len(names) != image.shape[image.axes.index("c")] or not all(names):
        names = None                   # no omero labels, or not one per channel: channels by index only
    return image, labels, image.axes.index("c") if "c" in image.axes else None, names


# ---- one field -----------------------------------------------------------------------------------
def open_field(spec: FieldSpec, channel=None, z=None):
    """``(image, labels, channel_axis)`` of one field, lazy where the format allows (memory-mapped TIFF
    and .npy, OME-Zarr frame by frame, a bioio scene on first access); an ``InputError`` names what is wrong
    with this field. ``channel`` and ``z`` as :func:`field_source` takes them, the channels already picked
    where the field names them (an int ``channel`` of a plain image is left to the crops)."""
    return field_source(spec, channel, z)[:3]


def field_source(spec: FieldSpec, channel=None, z=None):
    """``(image, labels, channel_axis, channels)`` of one field for cutting: ``channels`` what the crops still
    pick (indices, or None). ``channel``: None (all), a channel's index or name, or a list of them (names where
    the field names its channels: a manifest's channel columns, OME-Zarr's omero labels, a bioio file's
    channels); one channel given alone gives grey crops. ``z``: the Z plane of a stack (an index) or ``"max"``."""
    if spec.image is None and not spec.channels:
        raise InputError("This manifest row names no image: give the field image's path in its image column.")
    if spec.labels is None and spec.ome:
        raise InputError(f"The OME-Zarr field {spec.image} has no labels group: add its segmentation as an NGFF "
                         "label image.")
    if spec.labels is None:
        name = _stem(Path(spec.image)) if spec.image else "NAME"
        name += f"_s{spec.scene}" if spec.scene is not None else ""
        raise InputError(f"No mask for {Path(spec.image).name if spec.image else 'this row'}"
                         f"{f' (scene {spec.scene})' if spec.scene is not None else ''}: name it "
                         f"{name}_cp_masks.tif, {name}_masks.tif or {name}.labels.tif (any image type) beside it, give "
                         "its path in a manifest's labels column, or let ticlust find the nuclei (--segment nuclei).")
    if spec.ome:
        image, labels, caxis, names = _ome_field(spec, channel, z)
        return image, labels, caxis, _indices(channel, names, Path(spec.image).name)
    image, caxis, picks = field_image(spec, channel, z)    # the image first: a missing image is what a user hears of
    labels = _read(spec.labels, "mask")
    if spec.scene is not None:
        caxis = image.ndim - 1 if image.ndim > np.ndim(labels) else None
    return image, labels, caxis, picks


def field_image(spec: FieldSpec, channel=None, z=None):
    """``(image, channel_axis, channels)`` of a field given as files (not OME-Zarr), without its mask: what a
    segmentation reads. ``channel_axis`` is known for channel files (the last axis) and left None otherwise (the
    field's mask settles it when cut);
    ``channels`` what is still to pick (indices, or None), as :func:`field_source` gives them."""
    if spec.image is None and not spec.channels:
        raise InputError("This manifest row names no image: give the field image's path in its image column.")
    if z not in (None, 0) and spec.scene is None:
        raise InputError(f"{Path(spec.image or spec.channels[0][1] or '').name} is a 2-D image: --z (z=) applies to "
                         "images with Z planes (OME-Zarr, OME-TIFF, microscope files).")
    if spec.channels:
        image, caxis = _channel_files(spec, channel, z)
        return image, caxis, None
    if spec.scene is not None:
        image = BioField(spec.image, spec.scene, z)
        picks = _indices(channel, image.names, f"{Path(spec.image).name} (scene {spec.scene})")
        image.select(None if picks is None else picks if isinstance(picks, list) else [picks],
                     keep_axis=isinstance(picks, list))
        return image, None, None
    return _read(spec.image, "image"), None, _indices(channel, None, Path(spec.image).name)


def _channel_files(spec: FieldSpec, channel, z=None):
    """``(image, channel_axis)`` of a field given as one file per channel: the picked channels' files stacked along
    a last axis (one channel picked alone: that file as a grey image), each read by :func:`_channel_file`."""
    names = [name for name, _ in spec.channels]
    picks = _indices(channel, tuple(names), f"The field of {Path(spec.image or '').name or 'this row'}")
    chosen = list(range(len(names))) if picks is None else picks if isinstance(picks, list) else [picks]
    arrays = []
    for i in chosen:
        name, path = spec.channels[i]
        if path is None:
            raise InputError(f"This manifest row names no file for the channel {name}: give every channel's file.")
        arrays.append(_channel_file(path, name, spec.scene, z))
    if isinstance(picks, int):
        return arrays[0], None
    stack = ChannelStack(arrays, [names[i] for i in chosen], [spec.channels[i][1] for i in chosen])
    return stack, stack.ndim - 1


def _channel_file(path: str, name: str, scene: int | None, z):
    """One channel's file as a grey image: through bioio where it reads the type (the row's scene and Z plane, as a
    file given whole is read; a microscope format ticlust does not read itself), else as ticlust reads a TIFF."""
    if not read_by_bioio(path):
        return _read(path, f"{name} channel")
    image = BioField(_existing(path, f"{name} channel"), 0 if scene is None else scene, z)
    if image.ndim != 2:
        raise InputError(f"{Path(path).name}, the {name} channel's file, is {'×'.join(map(str, image.shape))}, not one "
                         "grey plane: a manifest's channel columns name one single-channel image per file (a file of "
                         "several channels goes in the image column).")
    return image


def _indices(channel, names, where: str):
    """``channel`` (None, an index or a name, or a list of them) as indices into a field's channels ``names``
    (None: the field does not name them, so only indices are taken); one sentence for a name it does not have."""
    if channel is None:
        return None
    picks = channel if isinstance(channel, (list, tuple)) else [channel]
    out = []
    for c in picks:
        if isinstance(c, str) and names is None:
            raise InputError(f"{where} does not name its channels, so there is no channel {c!r}: pick channels by "
                             "index (--channel 0,2), or give one file per channel (image_<Channel> columns).")
        if isinstance(c, str) and c not in names:
            raise InputError(f"{where} has no channel {c!r}: its channels are {', '.join(names)}.")
        index = names.index(c) if isinstance(c, str) else int(c)
        if names is not None and not -len(names) <= index < len(names):
            raise InputError(f"{where} has {len(names)} channels ({', '.join(names)}): give --channel from 0 to "
                             f"{len(names) - 1} or a channel's name.")
        out.append(index % len(names) if names is not None else index)
    return out if isinstance(channel, (list, tuple)) else out[0]


def channel_names(spec: FieldSpec) -> tuple[str, ...] | None:
    """The channel names a field's listing already knows (a manifest's channel columns), None otherwise."""
    return tuple(name for name, _ in spec.channels) if spec.channels else None


def row_spec(source: Path, row, index: int) -> FieldSpec:
    """The :class:`FieldSpec` of a store's listing ``row`` (field ``index``) whose input was ``source``: what a
    picture of the field opens again."""
    source = Path(source)
    if source.is_dir() and _is_zarr(source) and _plate_attributes(source) is None:
        return FieldSpec(index, str(source), row["labels"], ome=True)
    if source.is_dir() and _is_zarr(source):     # one field image of an HCS plate, named relative to the plate
        return FieldSpec(index, beside(source, row["image"]), row["labels"], ome=True)
    base = source if source.is_dir() else source.parent
    channels = tuple((str(c)[len(CHANNEL_PREFIX):], beside(base, row[c])) for c in row.keys()
                     if str(c).startswith(CHANNEL_PREFIX))
    image = beside(base, row["image"])
    scene = None
    if image is not None and read_by_bioio(image):     # with channel files: the first one's scenes, as listed
        value = row.get("scene")
        if blank(value):
            scene = 0
        elif source.suffix.lower() != ".csv":      # a folder's or a file's listing writes the scene's index
            scene = int(value)
        else:                                      # a manifest's cell, read as the listing read it
            names = bioio_scenes(image)
            scene = scene_index(value, names)
            if scene is None:
                raise InputError(f"{Path(image).name} has no scene {str(value).strip()!r} any more: its scenes are "
                                 f"{', '.join(names[:4])}.")
    return FieldSpec(index, image, beside(base, row["labels"]), scene=scene, channels=channels)


def _existing(path: str, what: str) -> Path:
    """``path`` as a Path, or an InputError when no file is there (``what``: the image, the mask, a channel)."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"There is no {what} file at {p}: check the path.")
    return p


def _read(path: str, what: str):
    """One image or mask file (a mask as other segmenters write it: ``io.readers.read_labels``), or an InputError
    naming it."""
    p = _existing(path, what)
    try:
        return read_labels(p) if what == "mask" else read_image(p)
    except Exception as exc:
        raise InputError(f"Could not read the {what} {p.name} ({type(exc).__name__}: {exc}).") from None
