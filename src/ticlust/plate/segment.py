"""A plate's fields segmented by ticlust when they come without masks (``ticlust extract --segment nuclei``).

The masks are written beside the store, into its **masks folder** (``plate.zarr`` → ``plate_masks/``), as one label
TIFF per field (``<field>_masks.tif``: 0 background, one id per nucleus) that napari, Fiji or Cellpose's GUI open
and correct; ``fields.csv`` there lists every field with its mask, a manifest ``ticlust extract`` takes as it is
(extract it again after correcting masks). ``segmentation.json`` records what made them (the options and the input's
listing), so that a run stopped part-way reuses the masks already written and a folder holding another
segmentation's masks is refused rather than mixed in.

A field is segmented by the per-field steps themselves (:func:`ensure_mask`, called by the store's survey and cut
steps): where its mask is not there yet, the step segments the field's nuclear channel
(:func:`ticlust.objects.segment.segment_nuclei`) and writes the mask whole or not at all. So segmenting is
resumable and runs wherever the steps run (this process or a dask cluster), and a field whose image cannot be read
fails alone with its own reason.
"""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np

from ..core.atomic import write_atomic
from ..errors import InputError
from ..objects.segment import OBJECTS, THRESHOLDS, check_diameter, check_threshold, nuclear_plane, segment_nuclei
from .fields import field_image
from .spec import CHANNEL_PREFIX

#: The file in a masks folder that records the segmentation its masks come from.
RECORD = "segmentation.json"
#: The manifest a masks folder holds: every field with its mask (extract it again after correcting the masks).
MANIFEST = "fields.csv"


def segment_option(segment, diameter, threshold) -> dict | None:
    """The segmentation as a store records it among its options (None: the fields come with masks), checked:
    ``segment`` one of :data:`ticlust.objects.segment.OBJECTS`, ``diameter`` the expected diameter in pixels,
    ``threshold`` one of :data:`ticlust.objects.segment.THRESHOLDS`."""
    if segment is None:
        if diameter is not None or threshold not in (None, THRESHOLDS[0]):
            raise InputError("diameter= and threshold= set how ticlust segments fields: give them with segment='nuclei' "
                             "(--segment nuclei).")
        return None
    if segment not in OBJECTS:
        raise InputError(f"segment={segment!r} is not known: ticlust segments {', '.join(OBJECTS)} "
                         "(--segment nuclei).")
    if diameter is None:
        raise InputError("Segmenting needs the nuclei's expected diameter in pixels: give --diameter D (diameter=D), "
                         "measured across a typical nucleus in napari or Fiji.")
    return {"objects": segment, "diameter": check_diameter(diameter),
            "threshold": check_threshold(threshold or THRESHOLDS[0])}


def masks_folder(store) -> Path:
    """Where a store's segmented masks go: beside it, named after it (``plate.zarr`` → ``plate_masks``)."""
    store = Path(store)
    stem = store.name[:-len(".zarr")] if store.name.lower().endswith(".zarr") and len(store.name) > 5 else store.name
    return store.with_name(f"{stem}_masks")


def with_masks(specs, listing, folder: Path):
    """``(specs, listing)`` with every field's mask set to its file in ``folder``: ``<field>_masks.tif``, the field
    named after its image (its channels' common name, its scene), made unique by the field's index where two fields
    would share a name. The listing's ``labels`` column gives the masks' absolute paths."""
    names = [_field_name(s) for s in specs]
    counts = {n: names.count(n) for n in names}
    paths = [str((folder / f"{n}{'_' + str(s.index) if counts[n] > 1 else ''}_masks.tif").resolve())
             for n, s in zip(names, specs)]
    listing = listing.copy()
    listing["labels"] = paths
    return [replace(s, labels=p) for s, p in zip(specs, paths)], listing


def _field_name(spec) -> str:
    """A field's name for its mask file: its image's name without the suffix (of channel files named ``NAME<channel>``,
    NAME; of other channel files, the part their names share), without a trailing separator, with ``_s<k>`` for
    scene k of a file of several scenes."""
    named = [(ch, Path(p).stem) for ch, p in spec.channels if p] or [("", Path(spec.image).stem)]
    if all(stem.endswith(ch) and len(stem) > len(ch) for ch, stem in named):
        shared = named[0][1][:len(named[0][1]) - len(named[0][0])]
    else:
        shared = named[0][1]
        for _, stem in named[1:]:
            shared = shared[:next((i for i, (a, b) in enumerate(zip(shared, stem)) if a != b),
                                  min(len(shared), len(stem)))]
    name = shared.rstrip("_-. ") or named[0][1]
    if name.lower().endswith(".ome"):
        name = name[:-4]
    return name + (f"_s{spec.scene}" if spec.scene is not None else "")


def prepare_folder(folder: Path, options: dict, digest: str) -> None:
    """Make the masks folder, or check that the one there holds this segmentation's masks (a run stopped part-way):
    a folder holding masks of other options or another input, or other files, is refused in one sentence."""
    record = {"segment": options["segment"], "channel": options["channel"], "z": options.get("z"),
              "keep_border": options["keep_border"], "input": digest}
    marker = folder / RECORD
    if marker.is_file():
        try:
            theirs = json.loads(marker.read_text())
        except (OSError, ValueError):
            theirs = None
        if theirs != record:
            raise InputError(f"The masks folder {folder} holds the masks of another segmentation (other options or "
                             "another input): move it away, or extract into a store of another name.")
        return
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise InputError(f"{folder}, where this store's masks go, exists and holds other files: move it away, or "
                         "extract into a store of another name.")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        write_atomic(marker, lambda tmp: tmp.write_text(json.dumps(record, indent=2, sort_keys=True)))
    except OSError as exc:
        raise InputError(f"Cannot write the masks folder {folder} ({exc.strerror}): choose a writable place for the "
                         "store.") from None


def nuclear_channel(channel):
    """The channel the nuclei are found in: the first that ``channel`` (a store's channel option) names."""
    return channel[0] if isinstance(channel, list) else channel


def ensure_mask(spec, segment: dict, channel, z, keep_border: bool) -> None:
    """Segment the field and write its mask (``spec.labels``), unless it is there already; the file appears whole
    or not at all. ``segment``: the store's segmentation option; ``channel``, ``z``, ``keep_border``: the store's."""
    target = Path(spec.labels)
    if target.is_file():
        return
    nuclear = nuclear_channel(channel)
    image, caxis, picks = field_image(spec, nuclear, z)
    plane = nuclear_plane(image, picks, getattr(image, "names", None), caxis)
    labels = segment_nuclei(plane, segment["diameter"], threshold=segment["threshold"], keep_border=keep_border)
    write_mask(target, labels)


def write_mask(path: Path, labels: np.ndarray) -> None:
    """A label image as a TIFF (uint16 while the ids fit, else int32; deflate-compressed), written atomically."""
    import tifffile

    data = labels.astype(np.uint16 if labels.max(initial=0) < 65536 else np.int32)
    write_atomic(path, lambda tmp: tifffile.imwrite(tmp, data, compression="zlib"))


def write_manifest(folder: Path, listing, source) -> None:
    """``fields.csv`` in the masks folder: the listing's rows with absolute image paths and each mask's file name, a
    manifest ``ticlust extract`` takes as it is (one image column, or one ``image_<Channel>`` column per channel)."""
    base = Path(source) if Path(source).is_dir() else Path(source).parent
    table = listing.drop(columns=["field_index"])
    channels = [c for c in table.columns if str(c).startswith(CHANNEL_PREFIX)]
    if channels:
        table = table.drop(columns=["image"])
    for column in channels or ["image"]:
        table[column] = [None if v is None else str((base / str(v)).resolve()) for v in table[column]]
    table["labels"] = [Path(p).name for p in table["labels"]]
    write_atomic(folder / MANIFEST, lambda tmp: table.to_csv(tmp, index=False))
