"""Tracks of a time-lapse: which track each clustered object belongs to, in which frame, and which track divided
into which (the lineage), from every form a lab has them in.

- **Label ids are track ids** (btrack, ultrack, trackastra and TrackMate label exports): the object table's
  ``label`` is the track; :func:`check_one_piece` refuses an id that is two pieces in one frame.
- **A tracks table** (CSV, Parquet, a DataFrame or a dict of columns): ``track_id, frame, label`` (which object
  of the labels each row is) or ``track_id, frame, y, x`` (a point inside the object: napari's Tracks layer data,
  TrackMate's spots), optionally ``parent_track_id``; napari's ``graph`` ({daughter: [mother]}) for the lineage.
  A Cell Tracking Challenge lineage file (``res_track.txt``/``man_track.txt``: ``L B E P``) gives the lineage of
  label ids that are track ids.
- **A stack of crops**: the object table itself has ``track_id`` and ``frame`` columns (and ``parent_track_id``).

Odd tracks: a frame in which a track has no object (missing from the table, or its object was left out, e.g.
touching the border) is a gap the states run through; tracks may start late and end early; a mother with two
(or any number of) daughters is a division, the daughters starting where she ends. Refused in one sentence:
a merge (an object claimed by two tracks, or a track with two mothers), a track with two objects in one frame,
a daughter that starts before her mother ends, and a lineage loop. Without any lineage, divisions are found
from the objects (:func:`find_divisions`): a track that ends where two tracks start in the next frame or the
one after, within twice its last object's diameter.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import InputError

#: The names each tracks-table column goes by (case is ignored), in order of preference.
ALIASES = {"track": ("track_id", "track", "trackid", "id"), "frame": ("frame", "t", "timepoint", "time_point"),
           "label": ("label", "label_id"), "y": ("y", "centroid_y", "position_y"), "x": ("x", "centroid_x", "position_x"),
           "parent": ("parent_track_id", "parent_track", "parent")}


@dataclass
class Tracks:
    """Each object's ``track`` (N,) (-1: in no track, left out of the states) and ``frame`` (N,), the lineage
    ``parents`` {daughter track: mother track}, ``frames`` (the movie's length: tracks reaching its last frame
    last to the end) and ``notes``: one sentence per thing done to the input (objects in no track, track rows
    without an object, divisions found)."""

    track: np.ndarray
    frame: np.ndarray
    parents: dict = field(default_factory=dict)
    frames: int = 0
    notes: list = field(default_factory=list)

    def __post_init__(self):
        self.track = np.asarray(self.track, np.int64)
        self.frame = np.asarray(self.frame, np.int64)
        if not self.frames:
            self.frames = int(self.frame.max()) + 1 if len(self.frame) else 0

    @property
    def n(self) -> int:
        return len(self.track)

    def daughters(self) -> dict:
        """{mother track: [daughter tracks, ascending]}."""
        out: dict[int, list[int]] = {}
        for d, m in sorted(self.parents.items()):
            out.setdefault(m, []).append(d)
        return out


def object_tracks(objects, tracks=None, graph=None, *, labels=None, divisions: bool = True,
                  frames: int | None = None) -> Tracks:
    """The :class:`Tracks` of the clustered objects.

    ``objects``: the object table, one row per clustered item in the result's order (a dict of columns or a
    DataFrame: ``objects_from_labels``' table, or a crops table with ``track_id`` and ``frame``). ``tracks``:
    None (label ids, or the table's own track column, are the tracks), a table (path, DataFrame, dict) or
    napari Tracks layer data (an (n, 4) array track_id, t, y, x); ``graph``: napari's {daughter: [mother]}.
    ``labels``: the T×Y×X label image, checked (:func:`check_one_piece`) when its ids are the tracks.
    ``divisions``: find divisions from the objects when the input gives no lineage. ``frames``: the movie's
    length (default: one past the last frame of an object).
    """
    obj = _table(objects, "object table")
    if _column(obj, "frame") is None:
        raise InputError("The object table has no frame column: give the objects of a time series (T×Y×X labels) or a "
                         "table with a frame column per item.")
    frame = _whole(obj[_column(obj, "frame")], "frame", "object table")
    n_frames = _frames(frames, frame)
    table = read_tracks(tracks) if tracks is not None else None
    own = _column(obj, "track") if tracks is None else None
    if table is not None and "frame" in table:
        track, parents, notes = _matched(obj, frame, table)
    elif own is not None:
        track, parents, notes = _whole(obj[own], "track", "object table"), {}, []
        _one_per_frame(track, frame)
        parents = _parents(obj, track) if _column(obj, "parent") else {}
    else:
        if "label" not in obj:
            raise InputError("The object table has neither a label nor a track_id column: give the objects cut from "
                             "labels (ids = track ids) or a table with a track_id column per item.")
        track, notes = _whole(obj["label"], "label", "object table"), []
        if labels is not None:
            check_one_piece(labels)
        _one_per_frame(track, frame)
        _check_moves(obj, track, frame)
        parents = _lineage_only(table, track) if table is not None else {}
    parents.update(_graph(graph))
    _check_lineage(parents, track, frame)
    found = not parents and divisions and table is None and graph is None and _column(obj, "parent") is None
    if found:
        parents, note = find_divisions(obj, track, frame, n_frames)
        notes.append(note)
    return Tracks(track, frame, parents, n_frames, notes)


def _table(data, what: str):
    """A DataFrame of ``data`` (a DataFrame, a dict of equal columns)."""
    import pandas as pd

    if isinstance(data, pd.DataFrame):
        return data.reset_index(drop=True)
    if isinstance(data, dict):
        try:
            return pd.DataFrame({str(k): np.asarray(v) for k, v in data.items()})
        except ValueError:
            raise InputError(f"The {what}'s columns differ in length: give one value per row in every column.") from None
    raise InputError(f"The {what} is a {type(data).__name__}: give a dict of columns or a pandas DataFrame.")


def _column(table, role: str) -> str | None:
    """The table's column for ``role`` (ALIASES, case ignored), or None."""
    lower = {str(c).lower(): c for c in table.columns}
    for name in ALIASES[role]:
        if name in lower:
            return lower[name]
    return None


def _whole(values, name: str, what: str) -> np.ndarray:
    """Whole numbers (int64) of a column; anything else is one sentence."""
    values = np.asarray(values)
    if values.dtype.kind in "iu":
        return values.astype(np.int64)
    try:
        as_float = values.astype(np.float64)
    except (TypeError, ValueError):
        raise InputError(f"The {what}'s {name} column holds text: give whole numbers.") from None
    if not np.isfinite(as_float).all() or (as_float != np.round(as_float)).any():
        raise InputError(f"The {what}'s {name} column holds values that are not whole numbers (or are empty): give "
                         "whole numbers in every row.")
    return as_float.astype(np.int64)


def _frames(frames, frame: np.ndarray) -> int:
    if len(frame) and frame.min() < 0:
        raise InputError(f"The objects' frames include {int(frame.min())}: frames count from 0.")
    last = int(frame.max()) + 1 if len(frame) else 0
    if frames is None:
        return last
    if isinstance(frames, bool) or not isinstance(frames, (int, np.integer)) or frames < last:
        raise InputError(f"frames={frames!r} must be a whole number of at least {last} (the objects reach frame "
                         f"{last - 1}).")
    return int(frames)


def read_tracks(source):
    """A tracks table as a DataFrame with the columns ``track`` and, as given, ``frame``, ``label``, ``y``, ``x``,
    ``parent`` (or ``first``, ``last``, ``parent`` for a Cell Tracking Challenge lineage file). ``source``: a path
    (.csv, .tsv, .parquet, .txt lineage, .npy Tracks data), a DataFrame, a dict of columns, or napari Tracks
    layer data (an (n, 4) array: track_id, t, y, x). Rows without a track or frame (TrackMate's unit rows, spots
    in no track) are dropped; their count is in ``attrs["dropped"]``."""
    import pandas as pd

    if isinstance(source, (str, Path)):
        source = read_table(source)
    if isinstance(source, np.ndarray):
        return _napari_data(source)
    if isinstance(source, pd.DataFrame) and source.attrs.get("lineage"):
        return source
    table = _table(source, "tracks table")
    names = {role: _column(table, role) for role in ALIASES}
    if names["track"] is None:
        raise InputError(f"The tracks table has no track column (columns: {', '.join(map(str, table.columns[:8]))}): "
                         "name it track_id (or track, id).")
    out = pd.DataFrame({role: pd.to_numeric(table[col], errors="coerce") for role, col in names.items()
                        if col is not None})
    keep = out["track"].notna() & (out["frame"].notna() if "frame" in out else True)
    out = out[keep].reset_index(drop=True)
    out.attrs["dropped"] = int((~keep).sum())
    if not len(out):
        raise InputError("The tracks table has no row with a track and a frame: give one row per object of a track.")
    if "frame" in out and "label" not in out and not {"y", "x"} <= set(out):
        raise InputError("The tracks table says which object each row is by a label column or by y and x columns: it "
                         "has neither.")
    return out


def read_table(path):
    """A tracks (or items') file read by its suffix: .csv, .tsv, .parquet (a DataFrame), .npy (an array), .txt (a
    Cell Tracking Challenge lineage)."""
    import pandas as pd

    path = Path(path)
    if not path.is_file():
        raise InputError(f"There is no tracks file at {path}: check the path.")
    suffix = path.suffix.lower()
    try:
        if suffix in (".parquet", ".pq"):
            return pd.read_parquet(path)
        if suffix == ".npy":
            return np.load(path, allow_pickle=False)
        if suffix == ".txt":
            return _lineage_file(path)
        return pd.read_csv(path, sep="\t" if suffix == ".tsv" else ",", low_memory=False)
    except InputError:
        raise
    except (ValueError, OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path} cannot be read as a tracks table ({type(exc).__name__}): give a CSV, Parquet, .npy "
                         "Tracks data or a Cell Tracking Challenge lineage .txt.") from None


def _lineage_file(path: Path):
    """A Cell Tracking Challenge lineage file: one line ``L B E P`` per track (label, first and last frame, mother
    label, 0 for none)."""
    import pandas as pd

    rows = np.loadtxt(path, dtype=np.float64, ndmin=2)
    if rows.shape[1] != 4 or not np.array_equal(rows, np.round(rows)):
        raise InputError(f"{path} is not a Cell Tracking Challenge lineage file (four whole numbers per line: label, "
                         "first frame, last frame, mother).")
    out = pd.DataFrame(rows.astype(np.int64), columns=["track", "first", "last", "parent"])
    out.attrs["lineage"] = True
    return out


def _napari_data(data: np.ndarray):
    """napari Tracks layer data (track_id, t, y, x) as a tracks table."""
    import pandas as pd

    if data.ndim != 2 or data.shape[1] not in (4, 5) or data.dtype.kind not in "iuf":
        raise InputError(f"The tracks array has shape {data.shape}: give napari Tracks layer data, one row per point "
                         "(track_id, t, y, x).")
    if data.shape[1] == 5:
        raise InputError("The tracks have 5 columns (track_id, t, z, y, x): ticlust follows 2-D objects, give "
                         "(track_id, t, y, x).")
    return pd.DataFrame(data[:, :4].astype(np.float64), columns=["track", "frame", "y", "x"])


def _one_per_frame(track: np.ndarray, frame: np.ndarray) -> None:
    """A track is one object per frame."""
    key = np.stack([track, frame], 1)[track >= 0]
    uniq, counts = np.unique(key, axis=0, return_counts=True)
    if (counts > 1).any():
        t, f = uniq[np.argmax(counts > 1)]
        raise InputError(f"Track {t} has {counts.max()} objects in frame {f}: a track is one object per frame (a "
                         "lineage under one id, as TrackMate's TRACK_ID, must be split into one id per branch with "
                         "parent_track_id, and an id in pieces fixed in the labels).")


def _matched(obj, frame: np.ndarray, table):
    """Each object's track from a table of (track, frame, label) or (track, frame, y, x) rows; the lineage from
    its parent column."""
    ttrack, tframe = _whole(table["track"], "track_id", "tracks table"), _whole(table["frame"], "frame", "tracks table")
    _one_per_frame(ttrack, tframe)
    item = _rows_to_items(obj, frame, table, tframe)
    claimed = item[item >= 0]
    uniq, counts = np.unique(claimed, return_counts=True)
    if (counts > 1).any():
        i = int(uniq[np.argmax(counts > 1)])
        both = sorted(set(ttrack[item == i].tolist()))
        raise InputError(f"The object in frame {frame[i]} at row {i} is claimed by tracks {both[0]} and {both[1]} (a "
                         "merge): ticlust follows divisions, not merges; give the merged object to one track (end the "
                         "other one there, or split the object in the labels).")
    track = np.full(len(frame), -1, np.int64)
    track[item[item >= 0]] = ttrack[item >= 0]
    notes = []
    if (track < 0).any():
        notes.append(f"{int((track < 0).sum())} objects are in no track: they are left out of the states.")
    missing = int((item < 0).sum()) + int(table.attrs.get("dropped", 0))
    if missing:
        notes.append(f"{missing} rows of the tracks table have no clustered object (left out when cut, e.g. touching "
                     "the border, or not in the labels, or in no track): their frames are gaps.")
    parents = _parents(table, ttrack) if "parent" in table else {}
    return track, parents, notes


def _rows_to_items(obj, frame: np.ndarray, table, tframe: np.ndarray) -> np.ndarray:
    """The object each table row is (-1: none): by (frame, label), or as the object of that frame whose bounding box
    holds the point (y, x), the nearest centroid among several."""
    import pandas as pd

    if "label" in table:
        if "label" not in obj:
            raise InputError("The tracks table names objects by label, but the objects have no label column.")
        keys = pd.DataFrame({"frame": frame, "label": _whole(obj["label"], "label", "object table"),
                             "item": np.arange(len(frame))})
        rows = pd.DataFrame({"frame": tframe, "label": _whole(table["label"], "label", "tracks table")})
        return rows.merge(keys, how="left", on=["frame", "label"])["item"].fillna(-1).to_numpy(np.int64)
    need = ("centroid_y", "centroid_x", "bbox_y0", "bbox_x0", "bbox_y1", "bbox_x1")
    if not set(need) <= set(obj.columns):
        raise InputError("The tracks are points (y, x) but the objects have no centroid and bounding box columns: cut "
                         "them with objects_from_labels, or give the tracks with a label column.")
    out = np.full(len(table), -1, np.int64)
    y, x = table["y"].to_numpy(np.float64), table["x"].to_numpy(np.float64)
    cols = {c: obj[c].to_numpy(np.float64) for c in need}
    for f in np.unique(tframe):
        rows, items = np.flatnonzero(tframe == f), np.flatnonzero(frame == f)
        if not len(items):
            continue
        py, px = y[rows, None], x[rows, None]
        inside = (py >= cols["bbox_y0"][items] - 0.5) & (py < cols["bbox_y1"][items] - 0.5) & \
                 (px >= cols["bbox_x0"][items] - 0.5) & (px < cols["bbox_x1"][items] - 0.5)
        dist = np.where(inside, (py - cols["centroid_y"][items]) ** 2 + (px - cols["centroid_x"][items]) ** 2, np.inf)
        best = np.argmin(dist, 1)
        hit = np.isfinite(dist[np.arange(len(rows)), best])
        out[rows[hit]] = items[best[hit]]
    return out


def _root(value, track: int, has_zero: bool) -> bool:
    """Whether a parent value means "no mother": empty, negative, the track itself (btrack), 0 where no track is 0."""
    return not np.isfinite(value) or value < 0 or value == track or (value == 0 and not has_zero)


def _parents(table, track: np.ndarray) -> dict:
    """{daughter: mother} from a parent column (one mother per track; two is a merge)."""
    col = _column(table, "parent") or "parent"
    values = np.asarray(table[col], np.float64)
    has_zero = bool((track == 0).any())
    out: dict[int, int] = {}
    for t, p in zip(track.tolist(), values.tolist()):
        if t < 0 or _root(p, t, has_zero):
            continue
        if t in out and out[t] != int(p):
            raise InputError(f"Track {t} names two mothers ({out[t]} and {int(p)}), a merge: ticlust follows divisions, "
                             "not merges; give every track one parent_track_id.")
        out[t] = int(p)
    return out


def _lineage_only(table, track: np.ndarray) -> dict:
    """The lineage of a table without frames (a CTC lineage file, or track_id + parent_track_id rows)."""
    if "parent" not in table:
        raise InputError("The tracks table has no frame column and no parent column: give (track_id, frame, label), "
                         "(track_id, frame, y, x) or a lineage (track_id, parent_track_id).")
    return _parents(table, _whole(table["track"], "track_id", "tracks table"))


def _graph(graph) -> dict:
    """napari's Tracks graph {daughter: [mother]} (or {daughter: mother}) as {daughter: mother}."""
    if graph is None:
        return {}
    if not hasattr(graph, "items"):
        raise InputError(f"The tracks graph is a {type(graph).__name__}: give napari's {{daughter: [mother]}} dict.")
    out = {}
    for child, mothers in graph.items():
        mothers = list(np.atleast_1d(mothers))
        if len(mothers) > 1:
            raise InputError(f"Track {child} has {len(mothers)} mothers in the graph ({', '.join(map(str, mothers))}), a "
                             "merge: ticlust follows divisions, not merges; keep one mother per track.")
        if mothers:
            out[int(child)] = int(mothers[0])
    return out


def _check_lineage(parents: dict, track: np.ndarray, frame: np.ndarray) -> None:
    """Every daughter starts after her mother's last object, and no track descends from itself. Mothers or
    daughters with no clustered object stay in the lineage; the states skip them."""
    first, last = _spans(track, frame)
    for d, m in parents.items():
        seen, p = {d}, m
        while p in parents:
            if p in seen:
                raise InputError(f"The lineage loops: track {d} descends from itself (through {p}): give each track "
                                 "one mother that started before it.")
            seen.add(p)
            p = parents[p]
        if d in first and m in last and first[d] <= last[m]:
            raise InputError(f"Track {d} starts in frame {first[d]}, before its mother {m} ends (frame {last[m]}): a "
                             "daughter starts after her mother's last frame.")


def _spans(track: np.ndarray, frame: np.ndarray) -> tuple[dict, dict]:
    """Each track's first and last frame among the objects."""
    import pandas as pd

    g = pd.DataFrame({"t": track, "f": frame})[track >= 0].groupby("t")["f"]
    return g.min().to_dict(), g.max().to_dict()


def _check_moves(obj, track: np.ndarray, frame: np.ndarray) -> None:
    """Label ids taken as track ids must stay on one object from frame to frame: refused when an id's typical step
    between consecutive frames is longer than a typical object (the ids of an untracked segmentation)."""
    if not {"centroid_y", "centroid_x", "area"} <= set(obj.columns):
        return
    order = np.lexsort((frame, track))
    t, f = track[order], frame[order]
    y, x = obj["centroid_y"].to_numpy(np.float64)[order], obj["centroid_x"].to_numpy(np.float64)[order]
    step = (t[1:] == t[:-1]) & (f[1:] == f[:-1] + 1)
    if step.sum() < 3:
        return
    moves = np.hypot(np.diff(y), np.diff(x))[step]
    size = 2 * np.sqrt(np.median(obj["area"].to_numpy(np.float64)) / np.pi)
    if np.median(moves) > size:
        raise InputError(f"The label ids do not follow objects from frame to frame (an id moves {np.median(moves):.0f} "
                         f"px between frames, objects are {size:.0f} px across): they are not track ids; track the "
                         "objects first (btrack, ultrack, trackastra) or give the tracks table.")


def find_divisions(obj, track: np.ndarray, frame: np.ndarray, frames: int, reach: float = 2.0) -> tuple[dict, str]:
    """Divisions found from the objects alone: a track that ends before the movie's last frame is the mother of the
    two tracks that start in the next frame or the one after, nearest her last object and within ``reach`` times
    its diameter (each new track to its nearest such mother; a track with one candidate is not a mother), in the
    same ``movie`` when the objects have that column (a plate's wells and sites). Returns ({daughter: mother}, a
    sentence saying how many were found)."""
    import pandas as pd

    if not {"centroid_y", "centroid_x", "area"} <= set(obj.columns):
        return {}, "No divisions were looked for: the objects have no centroids."
    rows = pd.DataFrame({"t": track, "f": frame, "y": obj["centroid_y"].to_numpy(np.float64),
                         "x": obj["centroid_x"].to_numpy(np.float64), "a": obj["area"].to_numpy(np.float64),
                         "m": obj["movie"].to_numpy() if "movie" in obj.columns else 0})
    rows = rows[rows.t >= 0].sort_values(["t", "f"])
    starts, ends = rows.groupby("t").head(1).set_index("t"), rows.groupby("t").tail(1).set_index("t")
    ends = ends[ends.f < frames - 1]
    pairs = []
    for m, e in ends.iterrows():
        near = starts[(starts.f > e.f) & (starts.f <= e.f + 2) & (starts.index != m) & (starts.m == e.m)]
        dist = np.hypot(near.y - e.y, near.x - e.x)
        limit = reach * 2 * np.sqrt(e.a / np.pi)
        pairs += [(float(d), int(m), int(c)) for c, d in dist[dist <= limit].items()]
    taken: dict[int, int] = {}
    for d, m, c in sorted(pairs):
        taken.setdefault(c, m)
    by_mother: dict[int, list[int]] = {}
    for c, m in taken.items():
        by_mother.setdefault(m, []).append(c)
    parents = {c: m for m, kids in by_mother.items() if len(kids) >= 2 for c in kids}
    n = len({m for m in parents.values()})
    return parents, f"{n} division{'s were' if n != 1 else ' was'} found from the objects (no lineage was given)."


def check_one_piece(labels) -> None:
    """Label ids taken as track ids: refuse an id that is several separate pieces in one frame (a tracker that gave
    both daughters their mother's id, or a broken mask); an object cut by the field's edge may be in pieces. Reads
    one frame at a time."""
    from skimage.measure import label as regions

    if getattr(labels, "ndim", 0) != 3:
        return
    for f in range(labels.shape[0]):
        lab = np.asarray(labels[f])
        parts = regions(lab, background=0, connectivity=2)
        _, first = np.unique(parts.ravel(), return_index=True)
        ids = lab.ravel()[first]
        edge = np.concatenate([lab[0], lab[-1], lab[:, 0], lab[:, -1]])
        ids = ids[(ids != 0) & ~np.isin(ids, edge)]
        uniq, counts = np.unique(ids, return_counts=True)
        if (counts > 1).any():
            i = int(uniq[np.argmax(counts > 1)])
            raise InputError(f"Label {i} is {int(counts.max())} separate pieces in frame {f}: with label ids as track "
                             "ids, each id is one object per frame (give daughters their own ids and a tracks table "
                             "with parent_track_id, or mend the mask).")
