"""Lloyd's k-means over an object store's crops, one E-step task per chunk of objects (docs/cluster.md).

The E-step is a pure function of a chunk — the store's path, the chunk's object range and the centres in;
the chunk's sufficient statistics out (per-cluster sums and counts, its inertia, its labels and its
farthest items) — so a :class:`~ticlust.cluster.Backend` runs it in this process or on a cluster's
workers; the crops are read by the worker from the store, never shipped. The M-step reduces the chunks'
statistics in chunk order, so a distributed Lloyd iteration is the iteration of :func:`ticlust.kernels.lloyd`
on the same rows: the same labels, centres equal to float tolerance (sums are accumulated in float64).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .cluster import LOCAL, Backend


@dataclass(frozen=True)
class Moments:
    """A chunk's per-feature sums and sums of squares (float64), for the mean variance behind ``tol``."""

    total: np.ndarray
    squares: np.ndarray
    n: int


@dataclass(frozen=True)
class EStep:
    """A chunk's sufficient statistics for one Lloyd iteration."""

    sums: np.ndarray          # (K, D) float64: the sum of the rows assigned to each centre
    counts: np.ndarray        # (K,) int64
    inertia: float            # the sum of every row's squared distance to its centre
    labels: np.ndarray        # (n,) int64, the chunk's rows in order
    far: np.ndarray           # (m,) float: the chunk's m ≤ K largest own distances, descending
    far_index: np.ndarray     # (m,) int64: their object numbers in the store


def _rows(path: str, start: int, stop: int) -> np.ndarray:
    from .store import open_objects

    crops = open_objects(path).crops[start:stop]
    return np.ascontiguousarray(crops.reshape(len(crops), -1), dtype=np.float32)


def moments(task: tuple) -> Moments:
    """Task (store path, start, stop): the chunk's per-feature sums and sums of squares."""
    x = _rows(*task).astype(np.float64)
    return Moments(x.sum(0), (x * x).sum(0), len(x))


def e_step(task: tuple) -> EStep:
    """Task (store path, start, stop, centres (K, D) float32): the chunk's statistics for one iteration."""
    import torch

    from .kernels import squared_distances

    path, start, stop, centers = task
    x = torch.from_numpy(_rows(path, start, stop))
    c = torch.from_numpy(np.asarray(centers, np.float32))
    d2 = squared_distances(x, c)
    labels = d2.argmin(1)
    own = d2.gather(1, labels[:, None])[:, 0]
    one_hot = torch.nn.functional.one_hot(labels, len(c)).to(x.dtype)
    sums = (one_hot.T.double() @ x.double()).numpy()
    order = torch.argsort(own, descending=True)[: len(c)].numpy()
    own = own.numpy()
    return EStep(sums, np.bincount(labels.numpy(), minlength=len(c)).astype(np.int64), float(own.astype(np.float64).sum()),
                 labels.numpy().astype(np.int64), own[order], order.astype(np.int64) + start)


def chunks(n: int, size: int) -> list[tuple[int, int]]:
    """(start, stop) ranges of at most ``size`` objects covering 0..n."""
    return [(s, min(s + size, n)) for s in range(0, n, max(1, int(size)))]


def lloyd_store(path, centers, *, backend: Backend = LOCAL, max_iter: int = 300, tol: float = 1e-4,
                chunk: int = 8192):
    """:func:`ticlust.kernels.lloyd` on the crops of the store at ``path`` (flat rows), its E-step one
    ``backend`` task per chunk of ``chunk`` objects; yields (iteration, inertia, centres, labels) after each
    update, as numpy arrays. Same stopping rule: no label changed, or the total squared centre shift at
    most ``tol`` times the mean per-feature variance; an emptied cluster moves to the farthest item."""
    from .store import open_objects

    path = str(path)
    n = len(open_objects(path))
    ranges = chunks(n, chunk)
    parts = backend.map(moments, [(path, a, b) for a, b in ranges])
    total, squares = sum(p.total for p in parts), sum(p.squares for p in parts)
    mean = total / n
    tol_abs = tol * float(np.clip(squares / n - mean * mean, 0, None).mean())
    centers = np.asarray(centers, np.float32)
    k = len(centers)
    labels = None
    for it in range(1, max_iter + 1):
        steps = backend.map(e_step, [(path, a, b, centers) for a, b in ranges])
        sums = sum(s.sums for s in steps)                            # the M-step: a reduce in chunk order
        counts = sum(s.counts for s in steps)
        new_labels = np.concatenate([s.labels for s in steps])
        inertia = float(sum(s.inertia for s in steps))
        new_centers = (sums / np.maximum(counts, 1)[:, None]).astype(np.float32)
        empty = np.flatnonzero(counts == 0)
        if len(empty):
            far = np.concatenate([s.far for s in steps])
            index = np.concatenate([s.far_index for s in steps])
            pick = index[np.argsort(-far, kind="stable")[: len(empty)]]
            new_centers[empty] = np.stack([_rows(path, int(i), int(i) + 1)[0] for i in pick])
        shift = float(((new_centers.astype(np.float64) - centers) ** 2).sum())
        converged = labels is not None and np.array_equal(labels, new_labels)
        centers, labels = new_centers, new_labels
        yield it, inertia, centers, labels
        if converged or shift <= tol_abs:
            break


__all__ = ["lloyd_store", "e_step", "moments", "chunks", "EStep", "Moments"]
