"""The one result object that every method returns, with save/load and an assignments table."""
from __future__ import annotations

import csv
import hashlib
import json
import zipfile
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from .core.atomic import check_outputs, is_owned, write_atomic
from .errors import InputError

@dataclass(frozen=True)
class ItemField:
    """One per-item field of a result's assignments: N rows of ``shape`` (in words) each."""

    name: str
    dtype: str                 # the dtype it is usually held in (a store allocates with it)
    shape: str                 # the shape of one item's entry: "" (a scalar), "K", "H,W[,C]", "gh,gw,2"
    picture: bool = False      # an image-sized picture: kept for every item only on request (``Stack.pictures``),
                               # else computed on demand for the items looked at (``api.align_one``)
    doc: str = ""


#: The per-item fields of every result, declared once: curation slices and joins them, save/load and the
#: assignments table read them, a store writes them chunk by chunk. Besides these, each entry of
#: ``params`` is per-item too (method parameters, N rows: "params/<key>" in :class:`Assignments`).
ITEM_FIELDS = (
    ItemField("labels", "int64", "", doc="cluster of each item"),
    ItemField("scores", "float32", "K", doc="cost to every cluster, lower = closer"),
    ItemField("responsibilities", "float32", "K", doc="mixtures: posterior of every cluster"),
    ItemField("rejected", "bool", "", doc="flagged as an outlier by the method"),
    ItemField("aligned", "float32", "H,W[,C]", picture=True, doc="the item aligned with its prototype"),
    ItemField("grids", "float32", "gh,gw,2", picture=True, doc="the item's warp as a display lattice"),
    ItemField("pinned", "int64", "", doc="cluster the user put the item in (-1: free, OUTLIER: none)"),
    ItemField("embedding", "float32", "E", doc="the item's invariant embedding, the object map's space (kernels.embedding)"),
    ItemField("map", "float32", "2", doc="the item's place (x, y) on the object map (kernels.embedding)"),
)
ITEM_NAMES = tuple(f.name for f in ITEM_FIELDS)
PICTURES = tuple(f.name for f in ITEM_FIELDS if f.picture)
PARAMS = "params/"      # prefix of the per-item ``params`` entries among an Assignments' fields
# The model's optional arrays stored under their own name in the .npz file (the per-item ones: ITEM_FIELDS).
_OPTIONAL_ARRAYS = ("covariances",)
# Dictionaries of arrays stored as "<prefix>__<key>" entries.
_ARRAY_DICTS = ("params", "extras")
# ``pinned`` value of an item the user marked as an outlier (it belongs to no cluster; ticlust.curation)
OUTLIER = -2
_META_FIELDS = ("method", "aligned_kind", "history", "run_losses", "timing", "device", "versions", "edits")
# The JSON type of each metadata field (a file whose metadata has other types is refused).
_META_TYPES = {"method": str, "aligned_kind": str, "history": list, "run_losses": list, "timing": dict,
               "device": str, "versions": dict, "edits": list}
# The entry that holds each other entry's SHA-256 as written by ``save`` (files saved before it existed
# have none: they are validated but not checked for later edits).
CHECKSUMS = "checksums_json"

# Each registered method's fitted-state class, by method name (filled by methods.base.register), so
# that a saved state is read back as the same typed dataclass.
STATE_TYPES: dict[str, type] = {}


@dataclass
class FittedState:
    """Base of each method's fitted state: the arrays (and dicts of arrays) ``predict`` needs.

    Fields hold NumPy arrays or scalars, dicts of arrays (a network's weights), or None (not fitted by
    this variant, left out of the file); they are saved as ``state__<field>`` /
    ``state__<field>__<key>`` entries and read back into the same class.
    """

    def to_arrays(self) -> dict[str, np.ndarray]:
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None:
                continue
            if isinstance(value, dict):
                out.update({f"state__{f.name}__{key}": np.asarray(v) for key, v in value.items()})
            else:
                out[f"state__{f.name}"] = np.asarray(value)
        return out

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> "FittedState":
        values: dict[str, Any] = {}
        for f in fields(cls):
            if f"state__{f.name}" in arrays:
                values[f.name] = arrays[f"state__{f.name}"]
            else:
                prefix = f"state__{f.name}__"
                entries = {k[len(prefix):]: v for k, v in arrays.items() if k.startswith(prefix)}
                if entries:
                    values[f.name] = entries
        return cls(**values)


class Assignments:
    """The per-item part of a result, held in memory: one array of N rows per field present (``ITEM_FIELDS``
    by name, and ``params/<key>`` for per-item method parameters).

    The interface a chunked store implements too: ``write(start, fields)`` puts B rows of some fields at
    items ``start:start+B`` (a field is allocated on its first write, from the rows' shape and dtype),
    ``read(names, index)`` gives rows back. Methods write their outputs batch by batch into one of these
    instead of gathering blocks and concatenating them.
    """

    def __init__(self, n: int, arrays: dict[str, np.ndarray] | None = None):
        self.n = int(n)
        self.arrays: dict[str, np.ndarray] = {} if arrays is None else dict(arrays)

    @classmethod
    def of(cls, result: "ClusteringResult") -> "Assignments":
        """A view (no copy) of a result's per-item fields."""
        arrays = {name: getattr(result, name) for name in ITEM_NAMES if getattr(result, name) is not None}
        arrays.update({PARAMS + key: v for key, v in result.params.items()})
        return cls(result.n, arrays)

    @property
    def names(self) -> list[str]:
        return list(self.arrays)

    def write(self, start: int, fields: dict) -> None:
        """Rows ``start:start+B`` of each given field (arrays or tensors of B rows; None: not written)."""
        for name, rows in fields.items():
            if rows is None:
                continue
            rows = rows.detach().cpu().numpy() if hasattr(rows, "detach") else np.asarray(rows)
            if name not in self.arrays:
                self.arrays[name] = np.empty((self.n, *rows.shape[1:]), rows.dtype)
            self.arrays[name][start:start + len(rows)] = rows

    def read(self, names=None, index=slice(None)) -> dict[str, np.ndarray]:
        """The rows at ``index`` (a slice or item numbers) of the named fields (default: all present)."""
        names = self.names if names is None else [n for n in names if n in self.arrays]
        return {name: np.asarray(self.arrays[name])[index] for name in names}

    def result_fields(self, index=slice(None)) -> dict:
        """The rows at ``index`` as ClusteringResult keyword arguments (``params`` gathered in one dict)."""
        rows = self.read(None, index)
        fields = {name: rows.pop(name) for name in ITEM_NAMES if name in rows}
        fields["params"] = {name[len(PARAMS):]: v for name, v in rows.items() if name.startswith(PARAMS)}
        return fields


@dataclass
class ClusteringResult:
    """What a clustering run produced, for every method alike.

    ``scores`` are distances, negative log-likelihoods or min-max scores: lower is closer.
    ``aligned`` holds, per item, its alignment with the assigned prototype; ``aligned_kind``
    says which way round ("prototype-on-item" or "item-on-prototype"). ``grids`` are the warps
    as sampling grids (N, gh, gw, 2) of (x, y) pixel coordinates. ``params`` holds per-item
    method parameters (affine matrices, TPS displacements, ...), ``extras`` other outputs
    (embeddings, representatives, ...), and ``state`` the method's typed fitted state (what
    ``predict`` needs).

    Two parts (``docs/architecture.md``): the model (method, config, prototypes, covariances, state,
    history, extras, timing …), whose size does not grow with N, and the assignments: the per-item fields
    declared in ``ITEM_FIELDS`` plus ``params``, seen together as :attr:`assignments`. ``aligned`` and
    ``grids`` are kept for every item only when requested or small (``Stack.pictures``); otherwise they
    are None and ``api.align_one`` computes them for the items looked at.
    """

    labels: np.ndarray
    scores: np.ndarray
    prototypes: np.ndarray
    method: str
    config: dict
    history: list = field(default_factory=list)
    responsibilities: np.ndarray | None = None
    rejected: np.ndarray | None = None
    covariances: np.ndarray | None = None
    aligned: np.ndarray | None = None
    aligned_kind: str = ""
    grids: np.ndarray | None = None
    params: dict = field(default_factory=dict)
    extras: dict = field(default_factory=dict)
    state: FittedState | None = None
    run_losses: list = field(default_factory=list)
    edits: list = field(default_factory=list)       # the user's edits, in order (ticlust.curation), kept through refine
    pinned: np.ndarray | None = None               # (N,) cluster the user put each item in (-1: free, OUTLIER: none), or None
    embedding: np.ndarray | None = None            # (N, E) each item's invariant embedding (Method.embed), or None
    map: np.ndarray | None = None                  # (N, 2) each item's place on the object map, or None (not made)
    timing: dict = field(default_factory=dict)
    device: str = "cpu"
    versions: dict = field(default_factory=dict)

    @property
    def k(self) -> int:
        return int(self.scores.shape[1])

    @property
    def n(self) -> int:
        return int(self.labels.shape[0])

    @property
    def final_loss(self) -> float:
        return float(self.history[-1]) if len(self.history) else float("nan")

    @property
    def assignments(self) -> Assignments:
        """The per-item fields (``ITEM_FIELDS`` and ``params``) as one :class:`Assignments` (a view)."""
        return Assignments.of(self)

    def cluster_sizes(self) -> np.ndarray:
        return np.bincount(self.labels, minlength=self.k)

    # ---- persistence -------------------------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        """Write everything to one compressed .npz file (no pickled objects), with each entry's checksum
        so that ``load_result`` refuses a file changed afterwards. The path goes through the output guard
        (``core.atomic.check_outputs``, in ``write_atomic``); a missing folder is made, once the guard allows it."""
        path = npz_path(path)
        if not path.parent.is_dir():
            if not is_owned(path):
                check_outputs({}, {"The result file's folder": path.parent}, folders=True)
            path.parent.mkdir(parents=True, exist_ok=True)
        arrays: dict[str, Any] = {
            "prototypes": np.asarray(self.prototypes),
            "config_json": np.array(json.dumps(self.config, default=_json_default)),
            "meta_json": np.array(json.dumps({f: getattr(self, f) for f in _META_FIELDS}, default=_json_default)),
        }
        for name in _OPTIONAL_ARRAYS:
            value = getattr(self, name)
            if value is not None:
                arrays[name] = np.asarray(value)
        for key, value in self.extras.items():
            arrays[f"extras__{key}"] = np.asarray(value)
        for name, value in self.assignments.read().items():   # the per-item part, under the names of old files
            arrays[f"params__{name[len(PARAMS):]}" if name.startswith(PARAMS) else name] = value
        if self.state is not None:
            arrays.update(self.state.to_arrays())
        arrays = {name: np.asarray(value) for name, value in arrays.items()}
        arrays[CHECKSUMS] = np.array(json.dumps({name: array_digest(name, a) for name, a in arrays.items()}))

        def write(tmp: Path) -> None:
            with open(tmp, "wb") as fh:          # a file object: numpy adds no second .npz suffix
                np.savez_compressed(fh, **arrays)
        return write_atomic(path, write)          # a failed save leaves the previous file whole

    def assignments_table(self, path: str | Path | None = None, names: list[str] | None = None,
                          columns: dict | None = None) -> list[dict]:
        """One row per item: cluster, its score, the runner-up and its score (and rejection; once the result
        was edited by hand, whether the user marked the item as an outlier; and its object map place, map_x and
        map_y, when the result has a map).

        ``columns``: extra per-item columns ({name: N values}, e.g. an object table), written after
        ``item``. ``names``: one name per item, in place of its number. Written as CSV when ``path`` is
        given; the rows are returned either way. Names or columns of another length are refused before
        anything is written (and ``path`` goes through the output guard, ``core.atomic.check_outputs``).
        """
        if path is not None:
            check_outputs({}, {"The table": path})
        if names is not None:
            if isinstance(names, (str, bytes)) or not hasattr(names, "__len__"):
                raise InputError(f"The names are a {type(names).__name__}: give a list of one name per item ({self.n}).")
            if len(names) != self.n:
                raise InputError(f"The names list has {len(names)} entries but the result has {self.n} items: give one "
                                 "name per item.")
        if columns is not None and not hasattr(columns, "items"):
            raise InputError(f"The extra columns are a {type(columns).__name__}: give a dict of {{name: one value per item}}.")
        columns = {} if columns is None else {str(c): np.asarray(v) for c, v in columns.items()}
        bad = [f"{c} ({f'{v.size} values' if v.ndim == 1 else f'shape {v.shape}'})" for c, v in columns.items()
               if v.shape != (self.n,)]
        if bad:
            raise InputError(f"The extra column(s) {', '.join(bad)} need one value per item ({self.n}).")
        order = np.argsort(self.scores, axis=1)
        rows = []
        for i in range(self.n):
            row = {"item": i if names is None else names[i], **{c: v[i].item() for c, v in columns.items()},
                   "cluster": int(self.labels[i]), "score": float(self.scores[i, self.labels[i]])}
            if self.k > 1:
                runner = int(order[i, 0] if order[i, 0] != self.labels[i] else order[i, 1])
                row["runner_up"] = runner
                row["runner_up_score"] = float(self.scores[i, runner])
            if self.rejected is not None:
                row["rejected"] = bool(self.rejected[i])
            if self.pinned is not None:
                row["outlier"] = bool(self.pinned[i] == OUTLIER)
            if self.map is not None:
                row["map_x"], row["map_y"] = float(self.map[i, 0]), float(self.map[i, 1])
            rows.append(row)
        if path is not None:
            def write(tmp: Path) -> None:
                with open(tmp, "w", newline="") as fh:
                    writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
                    writer.writeheader()
                    writer.writerows(rows)
            write_atomic(path, write)
        return rows


def npz_path(path: str | Path) -> Path:
    """Where ``save`` writes: the path itself if it ends in .npz, else with .npz appended."""
    path = Path(path)
    return path if path.suffix == ".npz" else Path(f"{path}.npz")


def load_result(path: str | Path) -> ClusteringResult:
    """Read a result written by :meth:`ClusteringResult.save`, checked before it is used.

    A file changed after it was saved (its checksums differ) is refused, and every array is validated:
    presence, dtype, shape, range and agreement between labels, scores, prototypes and the per-item
    fields; anything wrong is one :class:`InputError` sentence naming the file and what is wrong.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"No result file at {path}: check the path.")
    contents = _npz_contents(path)
    check_unchanged(path, contents)
    if not is_result_file(contents):
        raise InputError(f"{path} is an .npz file but not a ticlust result (no labels/scores/config_json): {_SAVED_BY}.")
    meta = _metadata(path, contents.pop("meta_json"), "meta_json")
    config = _metadata(path, contents.pop("config_json"), "config_json")
    _check_meta(path, meta)
    if "prototypes" not in contents:
        raise _damaged(path, "it has no prototypes array")
    kwargs: dict[str, Any] = {"labels": contents.pop("labels"), "scores": contents.pop("scores"),
                              "prototypes": contents.pop("prototypes"), "config": config,
                              **{k: v for k, v in meta.items() if k in _META_FIELDS}}
    for name in (*_OPTIONAL_ARRAYS, *ITEM_NAMES):
        if name in contents:
            kwargs[name] = contents.pop(name)
    for prefix in _ARRAY_DICTS:
        kwargs[prefix] = {k.split("__", 1)[1]: v for k, v in contents.items() if k.startswith(prefix + "__")}
    _check_arrays(path, kwargs)
    state_type = STATE_TYPES.get(meta["method"])
    state = {k: v for k, v in contents.items() if k.startswith("state__")}
    if state_type is not None and state:      # none saved: a result edited by hand and not refined yet
        kwargs["state"] = _state(path, state_type, meta["method"], state)
    return ClusteringResult(**kwargs)


_SAVED_BY = "give a file that ticlust saved (ClusteringResult.save, ticlust fit -o)"


def _npz_contents(path: Path) -> dict[str, np.ndarray]:
    """Every entry of a result file, read without unpickling; a file that is no .npz archive, a damaged
    one, or one holding Python objects is refused by what it is (NumPy's hint to load it unsafely is not
    passed on: a ticlust result never holds pickled data)."""
    if not zipfile.is_zipfile(path):
        with open(path, "rb") as fh:
            zipped = fh.read(4) == b"PK\x03\x04"          # a zip's first bytes: an archive cut short or damaged
        if zipped:
            raise InputError(f"{path} is not a readable ticlust result file (its .npz archive is cut short or "
                             "damaged): save the result again or fit again.")
        raise InputError(f"{path} is not a ticlust result file (it is not an .npz archive): {_SAVED_BY}.")
    try:
        with np.load(path, allow_pickle=False) as npz:
            return {key: npz[key] for key in npz.files}
    except Exception as exc:       # object arrays; a member cut short, a bad CRC, a header NumPy cannot parse
        if isinstance(exc, ValueError) and "pickle" in str(exc).lower():
            raise InputError(f"{path} is not a ticlust result file (it holds Python objects, which ticlust never "
                             f"saves): {_SAVED_BY}.") from None
        raise InputError(f"{path} is not a readable ticlust result file (an entry is damaged: "
                         f"{type(exc).__name__}): save the result again or fit again.") from None


def array_digest(name: str, array: np.ndarray) -> str:
    """SHA-256 of one saved entry: its name, dtype, shape and bytes (C order)."""
    h = hashlib.sha256(f"{name}|{array.dtype.str}|{array.shape}|".encode())
    h.update(np.ascontiguousarray(array))      # the buffer itself: no copy of a large array
    return h.hexdigest()


def check_unchanged(path: Path, contents: dict[str, np.ndarray]) -> None:
    """Refuse a file whose entries differ from the checksums ``save`` wrote (none written: nothing to check)."""
    if CHECKSUMS not in contents:
        return
    saved = _metadata(path, contents.pop(CHECKSUMS), CHECKSUMS)
    if not all(isinstance(v, str) for v in saved.values()):
        raise _damaged(path, f"its {CHECKSUMS} entry is not a table of checksums")
    changed = [name for name in saved if name in contents and array_digest(name, contents[name]) != saved[name]]
    removed = [name for name in saved if name not in contents]
    added = [name for name in contents if name not in saved]
    if changed or removed or added:
        what = "; ".join(f"{label} {_names(names)}" for label, names in
                         (("changed:", changed), ("removed:", removed), ("added:", added)) if names)
        raise InputError(f"{path} was changed after it was saved ({what}): use the file as ticlust saved it "
                         "(edit clusters with ticlust.curation or the widget, then save), or fit again.")


def _names(names: list[str]) -> str:
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def _damaged(path: Path, what: str) -> InputError:
    return InputError(f"{path} is a damaged ticlust result ({what}): save the result again or fit again.")


def _metadata(path: Path, entry: np.ndarray, name: str) -> dict:
    """A JSON object stored as a text entry."""
    try:
        value = json.loads(str(entry)) if entry.dtype.kind == "U" and entry.ndim == 0 else None
    except json.JSONDecodeError:
        value = None
    if not isinstance(value, dict):
        raise _damaged(path, f"its {name} entry is not valid JSON metadata")
    return value


def _check_meta(path: Path, meta: dict) -> None:
    """Metadata of the types ``save`` writes, naming a method of this ticlust (while methods are registered)."""
    for name, kind in _META_TYPES.items():
        if name in meta and not isinstance(meta[name], kind):
            raise _damaged(path, f"its metadata's {name} is a {type(meta[name]).__name__}, not a {kind.__name__}")
    if "method" not in meta or not meta["method"]:
        raise _damaged(path, "its metadata names no method")
    if STATE_TYPES and meta["method"] not in STATE_TYPES:
        raise InputError(f"{path} was made by the method {meta['method']!r}, which this ticlust does not have: "
                         "load it with the ticlust (or plugin) that made it.")


def _check_arrays(path: Path, arrays: dict[str, Any]) -> None:
    """Dtype, shape and range of each array, and agreement between them (N items, K clusters)."""
    labels, scores, prototypes = arrays["labels"], arrays["scores"], arrays["prototypes"]
    if labels.ndim != 1 or labels.dtype.kind not in "iu":
        raise _damaged(path, f"its labels are {labels.dtype} of shape {labels.shape}, not one whole number per item")
    n = len(labels)
    if scores.ndim != 2 or scores.dtype.kind != "f" or scores.shape[1] < 1:
        raise _damaged(path, f"its scores are {scores.dtype} of shape {scores.shape}, not items × clusters in floats")
    k = scores.shape[1]
    if scores.shape[0] != n:
        raise _damaged(path, f"it has {n} labels but {scores.shape[0]} rows of scores")
    if n and (labels.min() < 0 or labels.max() >= k):
        raise _damaged(path, f"its labels run from {labels.min()} to {labels.max()}, outside its {k} clusters 0 to {k - 1}")
    if np.isnan(scores).any() or np.isneginf(scores).any():
        raise _damaged(path, "its scores hold NaN or -inf")
    if n and not np.isfinite(scores[np.arange(n), labels]).all():
        raise _damaged(path, "an item's score for its own cluster is infinite")
    if prototypes.ndim < 2 or prototypes.dtype.kind != "f" or prototypes.shape[0] != k:
        raise _damaged(path, f"its prototypes are {prototypes.dtype} of shape {prototypes.shape}, not {k} prototypes in floats")
    if not np.isfinite(prototypes).all():
        raise _damaged(path, "its prototypes hold NaN or infinite values")
    covariances = arrays.get("covariances")
    if covariances is not None and (covariances.ndim < 1 or covariances.shape[0] != k):
        raise _damaged(path, f"its covariances have shape {covariances.shape}, not one per cluster ({k})")
    rows = {spec.name: arrays[spec.name] for spec in ITEM_FIELDS if arrays.get(spec.name) is not None}
    rows.update({f"params__{key}": v for key, v in arrays["params"].items()})
    for name, value in rows.items():
        if value.ndim < 1 or value.shape[0] != n:
            raise _damaged(path, f"its {name} has {value.shape[0] if value.ndim else 'no'} rows but it has {n} items")
    expected = {"responsibilities": ((n, k), "f"), "rejected": ((n,), "b"), "pinned": ((n,), "iu"),
                "aligned": ((n, *prototypes.shape[1:]), "f"), "map": ((n, 2), "f")}
    embedding = rows.get("embedding")
    if embedding is not None and (embedding.ndim != 2 or embedding.dtype.kind != "f"):
        raise _damaged(path, f"its embedding is {embedding.dtype} of shape {embedding.shape}, not items × dimensions")
    for name, (shape, kinds) in expected.items():
        if name in rows and (rows[name].shape != shape or rows[name].dtype.kind not in kinds):
            raise _damaged(path, f"its {name} are {rows[name].dtype} of shape {rows[name].shape}, not {shape}")
    grids = rows.get("grids")
    if grids is not None and (grids.ndim != 4 or grids.shape[-1] != 2 or grids.dtype.kind != "f"):
        raise _damaged(path, f"its grids are {grids.dtype} of shape {grids.shape}, not items × gh × gw × 2")
    pinned = rows.get("pinned")
    if pinned is not None and not np.all((pinned == -1) | (pinned == OUTLIER) | ((pinned >= 0) & (pinned < k))):
        raise _damaged(path, f"its pinned clusters are not all -1 (free), {OUTLIER} (outlier) or 0 to {k - 1}")
    span = arrays["config"].get("input_range")
    if span is not None and not (isinstance(span, list) and len(span) == 2 and
                                 all(isinstance(v, (int, float)) and np.isfinite(v) for v in span)):
        raise _damaged(path, f"its config's input_range is {span!r}, not two finite numbers")
    sample = arrays["config"].get("fit_sample")         # a store's fit: the objects its N items are (ticlust.plate.run)
    if sample is not None:
        index = np.asarray(sample.get("index", []) if isinstance(sample, dict) else [])
        if index.shape != (n,) or index.dtype.kind not in "iu" or (n and index.min() < 0):
            raise _damaged(path, f"its config's fit_sample does not list the {n} objects it was fitted on")


def _state(path: Path, state_type: type, method: str, arrays: dict[str, np.ndarray]) -> FittedState:
    """The typed fitted state, refused when a field ``predict`` needs is missing."""
    given = {k[len("state__"):].split("__", 1)[0] for k in arrays}
    missing = [f"state__{f.name}" for f in fields(state_type) if f.name not in given
               and f.default is MISSING and f.default_factory is MISSING]
    if missing:
        raise _damaged(path, f"it lacks {_names(missing)}, which a {method} result needs to assign new items")
    return state_type.from_arrays(arrays)


def is_result_file(contents) -> bool:
    """Whether an opened .npz (or its key list) is a ticlust result."""
    keys = set(contents.files if hasattr(contents, "files") else contents)
    return {"labels", "scores", "config_json", "meta_json"} <= keys


def _json_default(value):
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, tuple):
        return list(value)
    raise TypeError(f"cannot store {type(value).__name__} in a result's JSON")
