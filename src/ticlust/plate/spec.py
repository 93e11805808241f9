"""What a plate's listing is made of: where one field is (:class:`FieldSpec`), the names a listing's columns may
not take, and the small rules every listing shares (blank cells, paths relative to a manifest, fields listed twice)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..objects.crops import TABLE_COLUMNS

#: Columns every object row has besides the manifest's own (a manifest may not reuse these names).
ROW_COLUMNS = ("field_index", "image", "labels") + TABLE_COLUMNS
#: The assignment columns a prediction adds to every row (ticlust.plate.run).
ASSIGN_COLUMNS = ("cluster", "score", "runner_up", "runner_up_score")
#: The object map's columns after them: each object's place (NaN for a result without a map: ticlust.plate.maps).
MAP_COLUMNS = ("map_x", "map_y")
#: Names a manifest's own columns may not take: the rows' own, a prediction's, and those of a store fit's CSV.
RESERVED_COLUMNS = ROW_COLUMNS + ASSIGN_COLUMNS + MAP_COLUMNS + ("rejected", "object")
#: A listing's columns that name one file per channel: ``image_<channel>``, in channel order.
CHANNEL_PREFIX = "image_"


@dataclass(frozen=True)
class FieldSpec:
    """Where one field is: ``image`` a file or an OME-Zarr image group (absolute paths), ``labels`` its
    mask file, or the label image's name inside the OME-Zarr (``ome``); None when no mask was found.
    ``scene``: the scene of a file read through bioio (None: not read through bioio). ``channels``: a field
    given as one file per channel, ``(name, path or None)`` pairs in channel order (``image`` is the first)."""

    index: int
    image: str | None
    labels: str | None
    ome: bool = False
    scene: int | None = None
    channels: tuple = ()


def first_line(exc: Exception) -> str:
    """An exception's message, first line only (a sentence of ours must stay one line)."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def repeated(specs) -> list[int]:
    """The indices of the first field listed more than once (the same image, scene and channels with the same mask:
    its objects would be cut and counted twice); [] when every field is listed once. One image with two masks
    (say, nuclei and cells) is two fields."""
    seen: dict[tuple, list[int]] = {}
    for i, spec in enumerate(specs):
        if spec.image is not None:
            seen.setdefault((spec.image, spec.labels, spec.scene, spec.channels), []).append(i)
    return next((rows for rows in seen.values() if len(rows) > 1), [])


def blank(value) -> bool:
    """An empty manifest cell (missing, NaN or blank)."""
    return value is None or (isinstance(value, float) and np.isnan(value)) or str(value).strip() == ""


def beside(base: Path, value) -> str | None:
    """A manifest path as an absolute one: relative paths are relative to the CSV's folder."""
    return None if blank(value) else str((base / str(value)).resolve())
