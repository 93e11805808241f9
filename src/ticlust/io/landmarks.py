"""Landmark shapes in and out, without napari: CSV (shape_id, landmark, x, y) and tpsDig files, and the
conversion between landmark arrays and napari points.

Every landmark array here is ``(n_shapes, n_landmarks, 2)`` in (x, y) order; napari points are
(row, col) = (y, x). Inputs are never modified.
"""
from __future__ import annotations

import csv
import re
from pathlib import Path

import numpy as np

from ..core.atomic import write_atomic
from ..errors import InputError
from ..core.validation import as_landmarks


# ---- files ----------------------------------------------------------------------------------------
def read_landmarks_csv(path: str | Path) -> tuple[np.ndarray, list[str]]:
    """Read a CSV with columns shape_id, landmark, x, y (one row per landmark; any row order).

    Returns ``(landmarks (n, L, 2), shape ids)``; shapes keep the order of first appearance and
    landmarks are sorted by their ``landmark`` index.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"There is no landmark file at {path}: check the path.")
    # utf-8-sig: a CSV saved by Excel starts with a byte-order mark, which must not become part of the first column's name
    try:
        with open(path, newline="", encoding="utf-8-sig") as fh:
            sid, lm, xs, ys = _landmark_rows(csv.DictReader(fh), path.name)
    except UnicodeDecodeError:
        raise InputError(f"{path.name} is not UTF-8 text: save the landmark table as a UTF-8 CSV.") from None
    except csv.Error as exc:
        raise InputError(f"{path.name} is not a readable CSV ({exc}): save the landmark table as a plain CSV.") from None
    if not sid:
        raise InputError(f"{path.name} has a header but no landmark rows: add one row per landmark.")
    coords = np.stack([np.asarray(ys), np.asarray(xs)], axis=1)  # (row, col) as napari would hold them
    return points_to_landmarks(coords, sid, np.asarray(lm))


def _landmark_rows(reader: csv.DictReader, name: str) -> tuple[list, list, list, list]:
    """The shape ids, landmark indices, x and y of a landmark CSV's rows, checked line by line."""
    header = [h.strip().lower() for h in (reader.fieldnames or [])]
    missing = [c for c in ("shape_id", "landmark", "x", "y") if c not in header]
    if missing:
        raise InputError(f"{name} lacks the column(s) {', '.join(missing)}: a landmark CSV needs the columns shape_id, landmark, x, y.")
    names = dict(zip(header, reader.fieldnames))
    sid, lm, xs, ys = [], [], [], []
    for line, row in enumerate(reader, start=2):
        try:
            index = float(row[names["landmark"]])
            xs.append(float(row[names["x"]]))
            ys.append(float(row[names["y"]]))
        except (TypeError, ValueError):
            raise InputError(f"Line {line} of {name} has a non-numeric landmark, x or y: fix that row.") from None
        if not index.is_integer():
            raise InputError(f"Line {line} of {name} has landmark {index:g}, not a whole number: number the landmarks 0, 1, 2, ... in every shape.")
        lm.append(int(index))
        sid.append(str(row[names["shape_id"]]).strip())
    return sid, lm, xs, ys


def write_landmarks_csv(path: str | Path, landmarks, ids=None) -> Path:
    """Write (n, L, 2) landmarks as a CSV with columns shape_id, landmark, x, y (whole, after the output guard)."""
    arr = as_landmarks(landmarks)
    ids = _ids(ids, arr.shape[0])

    def write(tmp: Path) -> None:
        with open(tmp, "w", newline="") as fh:
            writer = csv.writer(fh)
            writer.writerow(["shape_id", "landmark", "x", "y"])
            for i, name in enumerate(ids):
                for j, (x, y) in enumerate(arr[i]):
                    writer.writerow([name, j, repr(float(x)), repr(float(y))])
    return write_atomic(path, write)


_TPS_KEY = re.compile(r"^\s*([A-Za-z]+)\s*=\s*(.*?)\s*$")


def read_tps(path: str | Path) -> tuple[np.ndarray, list[str]]:
    """Read a tpsDig ``.tps`` file: blocks starting ``LM=n`` followed by n "x y" lines, then
    optional IMAGE=, ID=, SCALE= lines (CURVES= / OUTLINES= with their POINTS= blocks are skipped). Returns ``(landmarks (n, L, 2), ids)``; the id is ID=, else
    IMAGE=, else the block number. Coordinates are returned as stored (SCALE= is not applied).
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"There is no .tps file at {path}: check the path.")
    lines = path.read_text(encoding="utf-8-sig", errors="replace").splitlines()   # -sig: Excel's byte-order mark
    shapes, ids = [], []
    i = 0
    while i < len(lines):
        match = _TPS_KEY.match(lines[i])
        i += 1
        if not match:
            if lines[i - 1].strip():
                raise InputError(f"Line {i} of {path.name} is neither a KEY=value line nor inside an LM= block: is it a tpsDig file?")
            continue
        key, value = match.group(1).upper(), match.group(2)
        if key == "LM":
            try:
                count = int(value)
            except ValueError:
                raise InputError(f"Line {i} of {path.name} says LM={value}: the landmark count must be a whole number.") from None
            if count < 1:
                raise InputError(f"Line {i} of {path.name} says LM={count}: a shape needs at least one landmark.")
            block = []
            for _ in range(count):
                parts = lines[i].split() if i < len(lines) else []
                try:
                    block.append([float(parts[0]), float(parts[1])])
                except (IndexError, ValueError):
                    raise InputError(f"Line {i + 1} of {path.name} should hold the x y of a landmark (LM={count}): the block is short or malformed.") from None
                i += 1
            shapes.append(block)
            ids.append({})
        elif key in ("ID", "IMAGE") and shapes:
            ids[-1].setdefault(key, value)
        elif key == "POINTS":  # a curve/outline block (CURVES= / OUTLINES=): its points are skipped
            try:
                i += int(value)
            except ValueError:
                raise InputError(f"Line {i} of {path.name} says POINTS={value}: the point count must be a whole number.") from None
    if not shapes:
        raise InputError(f"{path.name} holds no LM= blocks: a .tps file starts each shape with LM=<number of landmarks>.")
    ids = [tags.get("ID", tags.get("IMAGE", str(k))) for k, tags in enumerate(ids)]
    return as_landmarks([np.asarray(s) for s in shapes], name=f"landmarks in {path.name}"), ids


def write_tps(path: str | Path, landmarks, ids=None) -> Path:
    """Write (n, L, 2) landmarks as a tpsDig ``.tps`` file (LM=, coordinates, ID=; whole, after the output guard)."""
    arr = as_landmarks(landmarks)
    ids = _ids(ids, arr.shape[0])
    out = []
    for name, shape in zip(ids, arr):
        out.append(f"LM={shape.shape[0]}")
        out.extend(f"{float(x)!r} {float(y)!r}" for x, y in shape)
        out.append(f"ID={name}")
    return write_atomic(path, lambda tmp: tmp.write_text("\n".join(out) + "\n"))


def read_landmarks(path: str | Path) -> tuple[np.ndarray, list[str]]:
    """Read landmarks from a .csv or .tps file (by suffix)."""
    suffix = Path(path).suffix.lower()
    if suffix == ".csv":
        return read_landmarks_csv(path)
    if suffix == ".tps":
        return read_tps(path)
    raise InputError(f"{Path(path).name} is not a landmark file: give a .csv (shape_id, landmark, x, y) or a tpsDig .tps file.")


def _ids(ids, n: int) -> list[str]:
    if ids is None:
        return [str(i) for i in range(n)]
    ids = [str(v) for v in ids]
    if len(ids) != n:
        raise InputError(f"Got {len(ids)} shape ids for {n} shapes: give one id per shape.")
    return ids


# ---- napari points <-> landmark arrays ------------------------------------------------------------
def points_to_landmarks(coords, shape_id, landmark=None) -> tuple[np.ndarray, list]:
    """Group napari-style points into shapes.

    ``coords``: (P, 2) point positions in napari's (row, col) order (extra leading dimensions, e.g. a
    slice index, are dropped: the last two columns are used). ``shape_id``: (P,) which shape each
    point belongs to. ``landmark``: optional (P,) landmark index of each point; without it, points
    keep their order within each shape. Returns ``(landmarks (n, L, 2) in (x, y) order, ids)`` with
    shapes in the order their id first appears.
    """
    coords = np.asarray(coords)
    if coords.ndim != 2 or coords.shape[1] < 2:
        raise InputError(f"The points have shape {coords.shape}: give (P, 2) positions in (row, col) order.")
    if coords.dtype.kind not in "biuf":
        raise InputError(f"The point coordinates have dtype {coords.dtype}: give numbers.")
    shape_id = np.asarray(shape_id)
    if shape_id.shape != (coords.shape[0],):
        raise InputError(f"Got {shape_id.size} shape ids for {coords.shape[0]} points: give a shape_id for every point.")
    if landmark is not None:
        landmark = np.asarray(landmark)
        if landmark.shape != (coords.shape[0],):
            raise InputError(f"Got {landmark.size} landmark indices for {coords.shape[0]} points: give one per point or none.")
        if landmark.dtype.kind == "f":
            if not np.isfinite(landmark).all() or not np.all(landmark == np.round(landmark)):
                raise InputError("The landmark indices are not whole numbers: number the landmarks 0, 1, 2, ... in every shape.")
            landmark = landmark.astype(np.int64)
        elif landmark.dtype.kind not in "iu":
            raise InputError(f"The landmark indices have dtype {landmark.dtype}: number the landmarks 0, 1, 2, ... in every shape.")
    ids, first = [], {}
    for p, s in enumerate(shape_id.tolist()):
        if s not in first:
            first[s] = []
            ids.append(s)
        first[s].append(p)
    shapes = []
    for s in ids:
        index = np.asarray(first[s])
        if landmark is not None:
            order = np.argsort(landmark[index], kind="stable")
            if len(np.unique(landmark[index])) != len(index):
                raise InputError(f"Shape {s!r} has the same landmark index twice: every landmark of a shape needs its own index.")
            index = index[order]
        xy = coords[index][:, -2:][:, ::-1]  # (row, col) -> (x, y)
        shapes.append(np.asarray(xy, dtype=np.float64))
    if landmark is not None:
        sets = {tuple(np.sort(landmark[np.asarray(first[s])]).tolist()) for s in ids}
        if len(sets) > 1:
            raise InputError("The shapes have different landmark indices: every shape needs the same landmarks 0..L-1.")
    return as_landmarks(shapes), ids


def landmarks_to_points(landmarks, ids=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The inverse of :func:`points_to_landmarks`: ``(coords (n*L, 2) in (row, col) order,
    shape_id (n*L,), landmark (n*L,))``, shape by shape, landmarks in order."""
    arr = np.asarray(landmarks, dtype=np.float64)
    if arr.ndim != 3 or arr.shape[2] != 2:
        raise InputError(f"The landmarks have shape {arr.shape}: give an array shaped (shapes, landmarks, 2).")
    n, n_lm = arr.shape[:2]
    names = np.asarray(list(range(n)) if ids is None else list(ids))
    if names.shape != (n,):
        raise InputError(f"Got {names.size} shape ids for {n} shapes: give one id per shape.")
    coords = arr[:, :, ::-1].reshape(n * n_lm, 2).copy()
    return coords, np.repeat(names, n_lm), np.tile(np.arange(n_lm), n)
