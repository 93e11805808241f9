"""CSV manifests of a plate's fields: one row per field, in one of three layouts.

- ``image,labels``: one image file per field (any channels inside it) and its mask;
- ``image_<Channel>`` columns, one per channel (``image_DNA,image_ER,…``), and ``labels``: a field whose channels
  are separate files, stacked in the columns' order;
- CellProfiler's LoadData CSV as it is: ``FileName_<Channel>`` with ``PathName_<Channel>`` (the folder, optional)
  per channel, the segmentation in ``ObjectsFileName_<Name>``/``ObjectsPathName_<Name>`` (or a ``labels`` column);
  CellProfiler's exported per-image table too, whose same columns carry the prefix ``Image_``
  (``Image_FileName_<Channel>``, ``Image_PathName_<Channel>``, ``Image_ObjectsFileName_<Name>``,
  ``Image_Metadata_<Name>``): read as the LoadData columns are.

Paths are relative to the CSV's folder unless absolute. Every other column is carried to every object row; a
``Metadata_<Name>`` column (CellProfiler's) is carried as ``<Name>`` unless that name is taken. A ``scene`` column
picks the scene of a file read through bioio: a cell that names a scene is that scene, any other whole number
an index (:func:`scene_index`). Only names are read here, and a bioio file's list of scenes.
"""
from __future__ import annotations

import csv as csv_module
from pathlib import Path

from ..errors import InputError
from ..io.readers import bioio_scenes, read_by_bioio
from .spec import (ASSIGN_COLUMNS, CHANNEL_PREFIX, RESERVED_COLUMNS, FieldSpec, beside, blank, first_line,
                   repeated)

#: CellProfiler LoadData's column prefixes: a channel's file and folder, an object set's file and folder.
LOADDATA = ("FileName_", "PathName_", "ObjectsFileName_", "ObjectsPathName_")
#: The prefix of CellProfiler's metadata columns, dropped when a column is carried to the object rows.
METADATA = "Metadata_"
#: The prefix CellProfiler's exported per-image table (ExportToSpreadsheet, ExportToDatabase) puts before the
#: LoadData and metadata columns: ``Image_FileName_DNA`` is read as ``FileName_DNA``.
IMAGE_TABLE = "Image_"


def manifest_listing(csv: Path, labels=None, need_masks: bool = True):
    """``(rows, specs)`` of a CSV manifest in any of its layouts (see the module doc): one row and one
    :class:`FieldSpec` per field, in row order. ``labels`` names a LoadData manifest's object set; ``need_masks``
    False: a manifest without a mask column is taken (its fields are segmented: ``plate.segment``)."""
    table = read_manifest(csv)
    if len(table) == 0:
        raise InputError(f"The manifest {csv.name} lists no fields: add one row per field image.")
    channels = _channel_columns(csv, table)
    masks = _mask_column(csv, table, labels, any(isinstance(c, tuple) for c in channels.values()), need_masks)
    files = {c for c in channels.values() if not isinstance(c, tuple)} | {"image", "labels"} \
        | {c for c in table.columns if str(c).startswith(LOADDATA)}
    carried = _carried(csv, table, [c for c in table.columns if c not in files])
    base = csv.resolve().parent
    scenes: dict[str, tuple] = {}
    rows, specs = [], []
    for i, record in enumerate(table.to_dict("records")):
        named = {ch: _cell_path(record, column) for ch, column in channels.items()}
        image = next(iter(named.values())) if channels else _cell(record.get("image"))
        mask = _cell_path(record, masks) if isinstance(masks, tuple) else _cell(record.get(masks)) if masks else None
        scene = _scene(csv, i, beside(base, image), record.get("scene"), scenes)
        row = {"image": image, "labels": mask, **{CHANNEL_PREFIX + ch: p for ch, p in named.items()}}
        rows.append({**row, **{new: record[old] for old, new in carried.items()}})
        specs.append(FieldSpec(i, beside(base, image), beside(base, mask), scene=scene,
                               channels=tuple((ch, beside(base, p)) for ch, p in named.items())))
    twice = repeated(specs)
    if twice:
        raise InputError(f"The manifest {csv.name} lists the image {rows[twice[0]]['image']} with the mask "
                         f"{rows[twice[0]]['labels']} {len(twice)} times (rows {', '.join(str(i + 2) for i in twice)}, "
                         "the header being row 1): list each field once.")
    return rows, specs


def read_manifest(csv: Path):
    """A manifest as a DataFrame, every cell in its own column: a column named twice is refused (pandas would
    rename the second), as is a row with more cells than the header (pandas would shift it under the header);
    a header cell left blank over blank cells (a trailing comma) is dropped."""
    import warnings

    import pandas as pd

    try:
        with open(csv, newline="", encoding="utf-8-sig") as fh:
            header = next(csv_module.reader(fh), [])
        with warnings.catch_warnings():
            warnings.simplefilter("error", pd.errors.ParserWarning)
            table = pd.read_csv(csv, index_col=False)
    except pd.errors.ParserWarning:
        raise InputError(f"The manifest {csv.name} has rows with more cells than its header: name every column in the "
                         "header, and quote cells that hold a comma.") from None
    except Exception as exc:
        raise InputError(f"Could not read the manifest {csv.name} ({type(exc).__name__}: {first_line(exc)}): give a CSV "
                         "file with columns image,labels.") from None
    twice = next((c for c in header if c.strip() and header.count(c) > 1), None)
    if twice is not None:
        channel = twice[len(CHANNEL_PREFIX):] if twice.startswith(CHANNEL_PREFIX) else \
            twice[len("FileName_"):] if twice.startswith("FileName_") else None
        what = f"the channel {channel} twice (two {twice} columns)" if channel else f"the column {twice} twice"
        raise InputError(f"The manifest {csv.name} names {what}: give each column (each channel) one name of its own.")
    table = _loaddata_names(csv, table)
    blanks = [c for c in table.columns if str(c).startswith("Unnamed: ")]
    named = [c for c in blanks if table[c].notna().any()]
    if named:
        raise InputError(f"The manifest {csv.name} has a column without a name in its header (column "
                         f"{table.columns.get_loc(named[0]) + 1}): name it, or remove its cells.")
    return table.drop(columns=blanks)


def _loaddata_names(csv: Path, table):
    """``table`` with CellProfiler's per-image table columns (``Image_FileName_<Ch>``, ``Image_PathName_<Ch>``,
    ``Image_ObjectsFileName_<Name>``, ``Image_ObjectsPathName_<Name>``, ``Image_Metadata_<Name>``) named as LoadData
    names them; a column so named twice (``FileName_DNA`` beside ``Image_FileName_DNA``) is refused."""
    renamed = {c: str(c)[len(IMAGE_TABLE):] for c in table.columns
               if str(c).startswith(IMAGE_TABLE) and str(c)[len(IMAGE_TABLE):].startswith(LOADDATA + (METADATA,))}
    twice = next((new for old, new in renamed.items() if new in table.columns), None)
    if twice is not None:
        raise InputError(f"The manifest {csv.name} has both {twice} and {IMAGE_TABLE}{twice}, which name the same "
                         "column: keep one of them.")
    return table.rename(columns=renamed) if renamed else table


def _channel_columns(csv: Path, table) -> dict[str, object]:
    """``{channel: column}`` in the manifest's order: ``image_<Ch>`` columns, or LoadData's ``FileName_<Ch>`` with
    its ``PathName_<Ch>`` (a ``(file, folder)`` pair of columns); {} for a manifest with one ``image`` column."""
    columns = [str(c) for c in table.columns]
    own = [c for c in columns if c.startswith(CHANNEL_PREFIX)]
    loaddata = [c for c in columns if c.startswith("FileName_")]
    layouts = [name for name, found in (("image", "image" in columns), ("image_<Channel>", own),
                                        ("FileName_<Channel>", loaddata)) if found]
    if len(layouts) > 1:
        raise InputError(f"The manifest {csv.name} has both {' and '.join(layouts)} columns: give one image column, one "
                         "image_<Channel> column per channel, or CellProfiler's FileName_<Channel>/PathName_<Channel> "
                         "pairs.")
    if not layouts:
        raise InputError(f"The manifest {csv.name} has no column 'image': give columns image,labels (paths relative to "
                         "the CSV), one image_<Channel> column per channel with labels, or CellProfiler's "
                         "FileName_<Channel>/PathName_<Channel> pairs with ObjectsFileName_<Name>.")
    if own and any(c == CHANNEL_PREFIX for c in own):
        raise InputError(f"The manifest {csv.name} has a column {CHANNEL_PREFIX!r} without a channel name: name it "
                         f"{CHANNEL_PREFIX}<Channel>, e.g. {CHANNEL_PREFIX}DNA.")
    lonely = [c for c in columns if c.startswith("PathName_") and "FileName_" + c[len("PathName_"):] not in columns]
    if lonely:
        raise InputError(f"The manifest {csv.name} has {lonely[0]} but no {'FileName_' + lonely[0][9:]}: give each "
                         "channel's file name beside its folder.")
    if own:
        return {c[len(CHANNEL_PREFIX):]: c for c in own}
    return {c[len("FileName_"):]: (c, "PathName_" + c[len("FileName_"):]) for c in loaddata}


def _mask_column(csv: Path, table, labels, loaddata: bool, need: bool = True):
    """The manifest's mask column: ``labels``, or a LoadData object set's ``(file, folder)`` columns (the one
    there is, or the one ``labels`` names); None when there is none and none is ``need``ed."""
    columns = [str(c) for c in table.columns]
    objects = [c[len("ObjectsFileName_"):] for c in columns if c.startswith("ObjectsFileName_")]
    if labels is not None:
        if str(labels) not in objects:
            have = f"its object sets are {', '.join(objects)}" if objects else "it has no ObjectsFileName_<Name> columns"
            raise InputError(f"--labels (labels=) names a LoadData manifest's object set, but the manifest {csv.name} "
                             f"has none called {labels!r} ({have}): a manifest's labels column pairs every image with "
                             "its mask.")
        return ("ObjectsFileName_" + str(labels), "ObjectsPathName_" + str(labels))
    if "labels" in columns:
        return "labels"
    if len(objects) == 1:
        return ("ObjectsFileName_" + objects[0], "ObjectsPathName_" + objects[0])
    if objects:
        raise InputError(f"The manifest {csv.name} has {len(objects)} object sets ({', '.join(objects)}): choose the "
                         "one to cut with --labels NAME (labels=NAME).")
    if not need:
        return None
    if loaddata:
        raise InputError(f"The LoadData manifest {csv.name} has no object column: add each field's label image as "
                         "ObjectsFileName_<Name> (with ObjectsPathName_<Name>, its folder) or a labels column, or let "
                         "ticlust find the nuclei (--segment nuclei --diameter D).")
    raise InputError(f"The manifest {csv.name} has no column 'labels': give each field's mask in a labels column "
                     "(paths relative to the CSV).")


def _carried(csv: Path, table, columns) -> dict[str, str]:
    """``{column: name in the object rows}`` for the manifest's other columns: ``Metadata_<Name>`` as ``<Name>``
    where that name is free; a column named as the rows' own columns (or a prediction's) is refused."""
    clash = [c for c in columns if c in RESERVED_COLUMNS or str(c).startswith(CHANNEL_PREFIX)]
    if clash:
        raise InputError(f"The manifest {csv.name} has column{'s' if len(clash) > 1 else ''} {', '.join(clash)}, which "
                         "every object row has already or a prediction adds: rename them (the rows' own columns are "
                         "field_index, image, labels and those of docs/objects.md; a prediction adds "
                         f"{', '.join(ASSIGN_COLUMNS)}).")
    names: dict[str, str] = {}
    taken = set(map(str, table.columns))
    for c in columns:
        short = str(c)[len(METADATA):] if str(c).startswith(METADATA) else str(c)
        free = short == str(c) or (short and short not in taken and short not in RESERVED_COLUMNS
                                   and short not in names.values() and not short.startswith(CHANNEL_PREFIX))
        names[c] = short if free else str(c)
    return names


def _cell(value) -> str | None:
    """A manifest cell as text, None when blank."""
    return None if blank(value) else str(value)


def _cell_path(record: dict, column) -> str | None:
    """A file's path from its cell: ``column`` one column, or LoadData's ``(file, folder)`` pair joined."""
    if not isinstance(column, tuple):
        return _cell(record.get(column))
    name, folder = _cell(record.get(column[0])), _cell(record.get(column[1]))
    if name is None:
        return None
    return name if folder is None else str(Path(folder) / name)


def scene_index(value, scenes) -> int | None:
    """The scene a manifest's ``scene`` cell picks among a file's ``scenes`` (their names, in order), or None when
    it picks none. A cell that names a scene exactly is that scene, even when the name is a number (scenes named
    ``"1"``, ``"0"``); otherwise a whole number is an index from 0. A whole number that pandas read as a float (a
    column of numbers with a blank cell) is read as the number typed. The listing and a field opened again from
    its row both read the cell here, so they pick the same scene."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    text = str(value).strip()
    if text in scenes:
        return list(scenes).index(text)
    try:
        number = float(text)
    except ValueError:
        return None
    return int(number) if number.is_integer() and 0 <= number < len(scenes) else None


def _scene(csv: Path, row: int, image: str | None, value, seen: dict) -> int | None:
    """The scene index of a row whose image bioio reads (its ``scene`` cell, read by :func:`scene_index`; a file
    of one scene needs none); None for an image ticlust reads itself."""
    if image is None or not read_by_bioio(image) or not Path(image).is_file():
        return None                    # a missing file fails when its field is cut, as any other
    if image not in seen:
        seen[image] = bioio_scenes(image)
    scenes = seen[image]
    if blank(value):
        if len(scenes) > 1:
            raise InputError(f"{Path(image).name} (row {row + 2} of {csv.name}) has {len(scenes)} scenes: add a scene "
                             "column giving each row's scene (its index from 0, or its name), one row per scene.")
        return 0
    index = scene_index(value, scenes)
    if index is None:
        raise InputError(f"{Path(image).name} (row {row + 2} of {csv.name}) has no scene {str(value).strip()!r}: give "
                         f"an index from 0 to {len(scenes) - 1} or one of its scene names ({', '.join(scenes[:4])}).")
    return index
