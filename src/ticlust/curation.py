"""Editing a clustering by hand and re-fitting from the edit (issue 18): merge, split, move, mark
outliers, refine.

Every edit returns a new result (the given one is never modified), records itself in ``edits`` and
drops the fitted state (the prototypes no longer match it), so ``predict`` asks for :func:`refine`
first. Items the user moved are pinned: ``refine`` keeps them where they were put. Items marked as
outliers are pinned to ``OUTLIER``: they keep a label (their nearest cluster) but ``refine`` fits the
prototypes without them.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import torch

from .api import fit, fitted_scale, item_count, prepare
from .execute import Job, execute, stream
from .errors import InputError
from .methods import get_method
from .result import ITEM_NAMES, OUTLIER, Assignments, ClusteringResult

# The result fields that hold one entry per item, as declared in ``result.ITEM_FIELDS`` (``params`` too:
# per-item method parameters, which ``Assignments`` carries as "params/<key>").
_PER_ITEM = ITEM_NAMES


def _cluster(result: ClusteringResult, c, name: str = "cluster") -> int:
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
    a, b = _cluster(result, a, "a"), _cluster(result, b, "b")
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


def _items(result: ClusteringResult, items, what: str) -> np.ndarray:
    index = np.unique(np.asarray(items, dtype=np.int64).reshape(-1))
    if index.size == 0 or index.min() < 0 or index.max() >= result.n:
        raise InputError(f"The items to {what} must be indices from 0 to {result.n - 1}.")
    return index


def move(result: ClusteringResult, items, cluster: int) -> ClusteringResult:
    """Put ``items`` (indices) into ``cluster`` and pin them there (an outlier moved is one no more)."""
    cluster = _cluster(result, cluster)
    index = _items(result, items, "move")
    labels, pins = np.asarray(result.labels).copy(), _pins(result)
    labels[index], pins[index] = cluster, cluster
    return _edited(result, {"op": "move", "items": index.tolist(), "cluster": cluster}, labels=labels, pinned=pins)


def mark_outliers(result: ClusteringResult, items) -> ClusteringResult:
    """Mark ``items`` (indices) as outliers (debris, bad crops): they keep their label, are flagged in
    the assignments table and are left out when :func:`refine` fits the prototypes (and unpinned)."""
    index = _items(result, items, "mark as outliers")
    pins = _pins(result)
    pins[index] = OUTLIER
    return _edited(result, {"op": "outliers", "items": index.tolist()}, pinned=pins)


def split(data, result: ClusteringResult, cluster: int, seed: int = 0, device: str = "auto") -> ClusteringResult:
    """Re-cluster the members of ``cluster`` in two by the same method and parameters; the second half
    becomes a new cluster, numbered K. Scores to both halves come from the two-cluster fit."""
    cluster = _cluster(result, cluster)
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
    """The data a result was fitted on, validated and scaled like the fit; it must hold as many items."""
    items = fitted_scale(prepare(data, get_method(result.method)), result)
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
               losses=False)
