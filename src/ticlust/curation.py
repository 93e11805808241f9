"""Editing a clustering by hand and re-fitting from the edit: merge, split, move, mark
outliers, refine.

Every edit returns a new result (the given one is never modified), records itself in ``edits`` and
drops the fitted state (the prototypes no longer match it), so ``predict`` asks for :func:`refine`
first. Items the user moved are pinned: ``refine`` keeps them where they were put. Items marked as
outliers are pinned to ``OUTLIER``: they keep a label (their nearest cluster) but ``refine`` fits the
prototypes without them. Items are named in one grammar, read by :func:`item_index` for the API, the
dock's text box and ``ticlust curate``: numbers, text ranges ("3, 8-12") or a boolean mask.
"""
from __future__ import annotations

import dataclasses
import re

import numpy as np
import torch

from .api import fit, fitted_scale, item_count, mapped, prepare
from .core.execute import Job, execute, stream
from .core.validation import check_same_items
from .errors import InputError
from .methods import get_method
from .result import ITEM_NAMES, OUTLIER, Assignments, ClusteringResult

# The result fields that hold one entry per item, as declared in ``result.ITEM_FIELDS`` (``params`` too:
# per-item method parameters, which ``Assignments`` carries as "params/<key>").
_PER_ITEM = ITEM_NAMES


def check_cluster(result: ClusteringResult, c, name: str = "cluster") -> int:
    """``c`` as a cluster number of ``result``, or one sentence saying which there are."""
    if isinstance(c, (bool, np.bool_)) or not isinstance(c, (int, np.integer)) or not 0 <= int(c) < result.k:
        raise InputError(f"{name} = {c!r} is not a cluster of this result: give a number from 0 to {result.k - 1}.")
    return int(c)


def _edited(result: ClusteringResult, edit: dict, **fields) -> ClusteringResult:
    """A copy with new fields, the edit recorded and the fitted state dropped (it no longer matches)."""
    return dataclasses.replace(result, state=None, edits=[*result.edits, edit], **fields)


def _pins(result: ClusteringResult) -> np.ndarray:
    return np.full(result.n, -1, np.int64) if result.pinned is None else result.pinned.copy()


def merge(result: ClusteringResult, a: int, b: int) -> ClusteringResult:
    """Cluster ``b`` joins cluster ``a`` (clusters after ``b`` are numbered one lower)."""
    a, b = check_cluster(result, a, "a"), check_cluster(result, b, "b")
    if a == b:
        raise InputError(f"Cannot merge cluster {a} with itself: choose two different clusters.")
    keep = [c for c in range(result.k) if c != b]
    renumber = np.cumsum([c != b for c in range(result.k)]) - 1
    renumber[b] = renumber[a]
    scores = np.asarray(result.scores).copy()
    scores[:, a] = np.minimum(scores[:, a], scores[:, b])
    sizes = result.cluster_sizes().astype(np.float64)
    protos = np.asarray(result.prototypes, np.float64).copy()
    if sizes[a] + sizes[b] > 0:
        protos[a] = (sizes[a] * protos[a] + sizes[b] * protos[b]) / (sizes[a] + sizes[b])
    pins = _pins(result)
    pins[pins >= 0] = renumber[pins[pins >= 0]]
    resp = None
    if result.responsibilities is not None:
        resp = np.asarray(result.responsibilities).copy()
        resp[:, a] += resp[:, b]
        resp = np.delete(resp, b, 1)
    return _edited(result, {"op": "merge", "a": a, "b": b}, labels=renumber[result.labels],
                   scores=scores[:, keep], prototypes=protos[keep].astype(np.asarray(result.prototypes).dtype),
                   responsibilities=resp, covariances=None if result.covariances is None else np.asarray(result.covariances)[keep],
                   pinned=None if result.pinned is None else pins)


# "3", "8-12", " 8 - 12 ": an item number or an inclusive range, ASCII digits only ("²" and "٣" are not numbers here)
_PART = re.compile(r"\s*([0-9]+)\s*(?:-\s*([0-9]+)\s*)?")
_HOW = "give item numbers (e.g. [3, 8]), text such as \"3, 8-12\", or a boolean mask with one value per item"


def item_index(selection, n: int, what: str = "select") -> np.ndarray:
    """The items a selection names, as sorted unique indices into N items: the one grammar of the API,
    the widget's text box and ``ticlust curate``.

    ``selection`` is an item number, a list or integer array of them, text such as ``"3, 8-12"``
    (ranges inclusive, spaces tolerated, commas or semicolons between parts), a set, or a boolean mask
    of length N. Repeated items are harmless and counted once. Refused with one sentence: nothing
    selected, negative numbers (items are numbered from 0; counting from the end is not offered, so
    that "-1" never means "the last item" in one place and a range sign in another), numbers past N - 1,
    fractions (never rounded), reversed ranges, a mask of another length, a mask mixed with numbers,
    and anything else that is not one of the above. ``what`` names the action in messages ("move").
    """
    if isinstance(selection, str):
        return _text_index(selection, n, what)
    if isinstance(selection, (set, frozenset)):
        selection = list(selection)
    if isinstance(selection, (list, tuple)):
        flags = [isinstance(v, (bool, np.bool_)) for v in selection]
        if any(flags) and not all(flags):
            raise InputError(f"The items to {what} mix True/False with numbers: {_HOW}.")
    try:
        values = np.asarray(selection)
    except (TypeError, ValueError, RuntimeError):
        values = None
    if values is None or values.dtype == object or values.dtype.kind not in "biuf":
        raise InputError(f"The items to {what} cannot be read from {_shown(selection)}: {_HOW}.")
    if values.ndim > 1:
        raise InputError(f"The items to {what} must be a flat list, not an array of shape {values.shape}: {_HOW}.")
    if values.dtype.kind == "b" and values.ndim == 0:
        raise InputError(f"{selection!r} alone does not name items to {what}: {_HOW}.")
    values = values.reshape(-1)
    if values.dtype.kind == "b":
        if values.size != n:
            raise InputError(f"The boolean mask of items to {what} has {values.size} values but there are {n} items: "
                             "give one True/False per item.")
        index = np.flatnonzero(values)
    else:
        if values.dtype.kind == "f":
            odd = values[~np.isfinite(values) | (values != np.round(values))] if values.size else values
            if odd.size:
                raise InputError(f"Item {float(odd[0])!r} is not a whole number: the items to {what} must be integers "
                                 "(a fraction is never rounded).")
        index = np.unique(values)
        if index.size and index[0] < 0:
            raise InputError(f"Item {_number(index[0])} is negative: the items to {what} are numbered from 0 to "
                             f"{n - 1} (counting from the end is not offered).")
        if index.size and index[-1] >= n:
            raise InputError(f"Item {_number(index[-1])} is out of range: the items to {what} are numbered from 0 "
                             f"to {n - 1}.")
        index = index.astype(np.int64)
    if index.size == 0:
        raise InputError(f"No items to {what} were selected: {_HOW}.")
    return index


def _text_index(text: str, n: int, what: str) -> np.ndarray:
    """Items typed as "3, 8-12"; each part is bounds-checked before a range is expanded."""
    parts = []
    for part in text.replace(";", ",").split(","):
        if not part.strip():
            continue                          # "3, 8-12," : a trailing or doubled comma is harmless
        match = _PART.fullmatch(part)
        if match is None:
            hint = " (items are numbered from 0)" if part.strip().startswith("-") else ""
            raise InputError(f"{part.strip()!r} is not an item number or range{hint}: give items as numbers and "
                             "ranges, e.g. 3, 8-12.")
        if max(len(match[1]), len(match[2] or "")) > 18:     # past int64, and Python's int() digit limit
            raise InputError(f"{part.strip()!r} is out of range: the items to {what} are numbered from 0 to {n - 1}.")
        first, last = int(match[1]), int(match[2] or match[1])
        if last < first:
            raise InputError(f"The range {part.strip()!r} runs backwards: write it from the smaller number, e.g. "
                             f"{last}-{first}.")
        if last >= n:
            raise InputError(f"Item {last} is out of range: the items to {what} are numbered from 0 to {n - 1}.")
        parts.append(np.arange(first, last + 1, dtype=np.int64))
    if not parts:
        raise InputError(f"No items to {what} were given: type item numbers and ranges, e.g. 3, 8-12.")
    return np.unique(np.concatenate(parts))


def _number(value) -> str:
    """An item number as typed: 12, not 12.0 or np.int64(12); a huge float as 1e+300."""
    if isinstance(value, np.integer) or abs(float(value)) < 1e15:
        return str(int(value))
    return repr(float(value))


def _shown(selection) -> str:
    """A short repr for a message, or the type's name when the repr is long (or fails)."""
    try:
        text = repr(selection)
    except Exception:        # an object whose repr is broken must still get its one-sentence refusal
        text = ""
    return text if 0 < len(text) <= 40 else f"a {type(selection).__name__}"


def move(result: ClusteringResult, items, cluster: int) -> ClusteringResult:
    """Put ``items`` (a selection, see :func:`item_index`) into ``cluster`` and pin them there (an outlier
    moved is one no more)."""
    cluster = check_cluster(result, cluster)
    index = item_index(items, result.n, "move")
    labels, pins = np.asarray(result.labels).copy(), _pins(result)
    labels[index], pins[index] = cluster, cluster
    return _edited(result, {"op": "move", "items": index.tolist(), "cluster": cluster}, labels=labels, pinned=pins)


def mark_outliers(result: ClusteringResult, items) -> ClusteringResult:
    """Mark ``items`` (a selection, see :func:`item_index`) as outliers (debris, bad crops): they keep their label, are flagged in
    the assignments table and are left out when :func:`refine` fits the prototypes (and unpinned)."""
    index = item_index(items, result.n, "mark as outliers")
    pins = _pins(result)
    pins[index] = OUTLIER
    return _edited(result, {"op": "outliers", "items": index.tolist()}, pinned=pins)


def split(data, result: ClusteringResult, cluster: int, seed: int = 0, device: str = "auto") -> ClusteringResult:
    """Re-cluster the members of ``cluster`` in two by the same method and parameters; the second half
    becomes a new cluster, numbered K. Scores to both halves come from the two-cluster fit."""
    cluster = check_cluster(result, cluster)
    members = np.flatnonzero(result.labels == cluster)
    if members.size < 2:
        raise InputError(f"Cluster {cluster} has {members.size} member(s): a split needs at least 2.")
    spec = get_method(result.method)
    items = _fitted_items(data, result)
    params = {k: v for k, v in dataclasses.asdict(spec.config_of(result)).items() if k != "k"}
    half = fit(_take(items, members), method=result.method, k=2, seed=seed, device=device, progress=False, **params)
    scores = np.asarray(result.scores).copy()
    scores = np.concatenate([scores, scores[:, cluster:cluster + 1]], axis=1)
    scores[members, cluster], scores[members, result.k] = half.scores[:, 0], half.scores[:, 1]
    labels = np.asarray(result.labels).copy()
    labels[members[half.labels == 1]] = result.k
    protos = np.concatenate([np.asarray(result.prototypes), np.asarray(half.prototypes[1:2], dtype=np.asarray(result.prototypes).dtype)])
    protos[cluster] = half.prototypes[0]
    return _edited(result, {"op": "split", "cluster": cluster, "seed": int(seed)}, labels=labels, scores=scores,
                   prototypes=protos, responsibilities=None, covariances=None)


def _fitted_items(data, result: ClusteringResult):
    """The data a result was fitted on, validated and scaled like the fit; it must hold as many items, each
    of the shape the result's prototypes have."""
    items = prepare(data, get_method(result.method))
    check_same_items(items, np.shape(result.prototypes)[1:], "data's items", "give the data it was fitted on")
    items = fitted_scale(items, result)
    if item_count(items) != result.n:
        raise InputError(f"The data has {item_count(items)} items but the result has {result.n}: give the data it was fitted on.")
    return items


def _take(items, index: np.ndarray):
    """The items at ``index`` of a validated stack (or landmark array)."""
    return items.subset(index) if hasattr(items, "subset") else items[index]


def _restricted(result: ClusteringResult, index: np.ndarray) -> ClusteringResult:
    """The result for the items at ``index`` only (every per-item field sliced)."""
    return dataclasses.replace(result, **result.assignments.result_fields(index))


def _joined(n: int, parts: list[tuple[np.ndarray, ClusteringResult]]) -> ClusteringResult:
    """One result for N items from results for disjoint index sets (the first gives every other field);
    a per-item field that some part lacks is left out."""
    views = [r.assignments for _, r in parts]
    common = [name for name in views[0].names if all(name in v.arrays for v in views)]
    out = Assignments(n)
    for (index, _), view in zip(parts, views):
        for name, rows in view.read(common).items():
            if name not in out.arrays:
                dtype = np.result_type(*[v.arrays[name] for v in views])
                out.arrays[name] = np.empty((n, *rows.shape[1:]), dtype)
            out.arrays[name][index] = rows
    fields = {name: None for name in _PER_ITEM}
    fields.update(out.result_fields())
    return dataclasses.replace(parts[0][1], **fields)


def refine(data, result: ClusteringResult, device: str = "auto", keep_pinned: bool = True) -> ClusteringResult:
    """Re-fit prototypes (and, for aligning methods, alignments) from an edited result, warm started
    from its prototypes, with the user's moved items kept where they were put (unless ``keep_pinned``
    is False) and the outliers left out (they are then assigned to the new prototypes and stay
    outliers). Returns a new, fitted result that keeps the edit history."""
    return execute(refine_job(data, result, device, keep_pinned))


def refine_events(data, result: ClusteringResult, device: str = "auto", keep_pinned: bool = True):
    """:func:`refine` as events (Progress …, Done(result)), for the widget's worker and Cancel."""
    return (yield from stream(refine_job(data, result, device, keep_pinned)))


def refine_job(data, result: ClusteringResult, device: str = "auto", keep_pinned: bool = True) -> Job:
    """:func:`refine` as a job of the execution seam (deterministic kernels, ETA, the result stamped);
    the data is checked against the result now, the randomness comes from the fit's seed."""
    spec = get_method(result.method)
    items = _fitted_items(data, result)
    cfg = dataclasses.replace(spec.config_of(result), k=result.k)
    pins = _pins(result)
    if not keep_pinned:
        pins[pins != OUTLIER] = -1
    kept, outliers = np.flatnonzero(pins != OUTLIER), np.flatnonzero(pins == OUTLIER)
    if outliers.size and kept.size < result.k:
        raise InputError(f"Only {kept.size} items are not outliers, fewer than K = {result.k}: "
                         "mark fewer outliers or merge clusters first.")

    def work(dev, _seed):
        if outliers.size == 0:
            return (yield from spec.refine(items, cfg, result, torch.from_numpy(pins), dev))
        refined = yield from spec.refine(_take(items, kept), cfg, _restricted(result, kept), torch.from_numpy(pins[kept]), dev)
        return _joined(result.n, [(kept, refined), (outliers, spec.predict(refined, _take(items, outliers), dev))])

    def finish(refined: ClusteringResult, _results) -> ClusteringResult:
        refined.config = {**result.config, "k": result.k}
        refined.edits = [*result.edits, {"op": "refine", "keep_pinned": bool(keep_pinned)}]
        refined.pinned = result.pinned if keep_pinned else (pins if outliers.size else None)
        return refined

    return Job(work, device=device, seed=int(result.config.get("seed", 0)), label="refine", finish=finish,
               losses=False, after=mapped(spec, items, int(result.config.get("seed", 0))))
