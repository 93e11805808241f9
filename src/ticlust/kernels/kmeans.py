"""K-means pieces shared by the methods, with no method of its own: rows of a stack on a device
(in memory or streamed), squared distances, k-means++ seeding, random starts, assignment, pinned labels,
partition means, Lloyd iterations, bisection and runner-up costs.

K-means is these pieces put together; GMM, NT, PSSC, DTI, ST/AI K-means and the landmark methods use
them for their own starts, final clusterings and repair moves. Napari-free, and below ``ticlust.methods``
(it imports only torch, numpy and the low-level ``stack`` and ``events`` modules), so a method file holds
only its method. Generators (``kmeans_plus_plus_steps``, ``lloyd_steps``) yield ``ticlust.events``
records, so a caller can show progress and cancel between steps.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np
import torch

from ..events import Forecast, Progress, Snapshot, drain
from ..core.stack import Stack
from .chunked import StoreSample

IN_MEMORY_BYTES = 256 * 2**20   # a stack whose float32 rows fit in this is loaded whole; a larger one streams


class Rows:
    """N items as flat float32 rows on a device: a tensor in memory, or batches streamed from a Stack.

    K-means, its k-means++ start and GMM's EM go through this, so a memory-mapped or dask stack larger
    than ``IN_MEMORY_BYTES`` is read batch by batch on every pass instead of being converted whole.
    """

    def __init__(self, source, device: torch.device | str = "cpu", batch_size: int = 8192,
                 in_memory_bytes: int = IN_MEMORY_BYTES):
        # a store's fit sample runs its chunk steps on its own backend (here or on a cluster's workers)
        self.remote = source if isinstance(source, StoreSample) else None
        if isinstance(source, Stack) and source.n * source.dim * 4 <= in_memory_bytes:
            source = source.tensor(device, flat=True)
        self.source, self.device, self.batch_size = source, torch.device(device), int(batch_size)
        self.n, self.dim = (source.n, source.dim) if isinstance(source, Stack) else tuple(source.shape)

    @property
    def streams(self) -> bool:
        return isinstance(self.source, Stack)

    def chunks(self) -> Iterator[tuple[int, torch.Tensor]]:
        """(start, rows) batches covering every item, in order."""
        for start in range(0, self.n, self.batch_size):
            stop = min(start + self.batch_size, self.n)
            if self.streams:
                yield start, torch.from_numpy(self.source.batch(start, stop)).to(self.device).reshape(stop - start, -1)
            else:
                yield start, self.source[start:stop]

    def take(self, index) -> torch.Tensor:
        """The rows at ``index`` (a sequence of item numbers)."""
        index = [int(i) for i in np.asarray(index).reshape(-1)]
        if not self.streams:
            return self.source[torch.tensor(index, device=self.source.device)]
        return torch.stack([torch.from_numpy(self.source.batch(i, i + 1)[0]).to(self.device).reshape(-1) for i in index])

    def mean_variance(self, rows: int = 1024) -> float:
        """The mean over features of each feature's (population) variance: two passes in float64, ``rows`` items at a
        time (a whole-array ``var`` of 10,000 crops of 64×64×2 held a second copy of them: 650 MiB at the fit's peak)."""
        total = torch.zeros(self.dim, dtype=torch.float64, device=self.device)
        for _, x in self.chunks():
            for s in range(0, len(x), rows):
                total += x[s:s + rows].sum(0, dtype=torch.float64)
        mean = total / self.n
        squares = torch.zeros_like(total)
        for _, x in self.chunks():
            for s in range(0, len(x), rows):
                squares += ((x[s:s + rows].double() - mean) ** 2).sum(0)
        return float((squares / self.n).mean())

    def distances(self, centers: torch.Tensor) -> torch.Tensor:
        """Squared distances (N, K) of every row to ``centers``."""
        return torch.cat([squared_distances(x, centers) for _, x in self.chunks()])

    def map_chunks(self, fn, args: tuple = (), pinned: torch.Tensor | None = None) -> list:
        """``fn(rows, *args, pinned=…, start=…)`` for every chunk of rows (its pinned items, its first item
        number), the values in chunk order. ``fn`` is a pure kernel (:func:`lloyd_e_step`, gmm's E-step), so
        where it runs changes nothing: here by default; a store's fit sample
        (``ticlust.kernels.chunked.StoreSample``, which carries its backend) sends each chunk there as one task
        instead."""
        if self.remote is not None:
            return self.remote.map_chunks(fn, args, pinned, self.batch_size)
        return [fn(x, *args, pinned=None if pinned is None else pinned[s:s + len(x)], start=s) for s, x in self.chunks()]


def as_rows(x, batch_size: int = 8192) -> Rows:
    return x if isinstance(x, Rows) else Rows(x, x.device, batch_size)


def squared_distances(x: torch.Tensor, centers: torch.Tensor) -> torch.Tensor:
    """Squared Euclidean distances (B, K) between flat items (B, D) and centres (K, D)."""
    x_sq = (x * x).sum(1, keepdim=True)
    d2 = torch.addmm(x_sq + (centers * centers).sum(1)[None], x, centers.T, alpha=-2.0)
    return d2.clamp_min_(0.0)


def kmeans_plus_plus(x, k: int, rng: np.random.Generator, n_trials: int | None = None) -> torch.Tensor:
    """Greedy k-means++ seeding (Arthur & Vassilvitskii; several candidates per step, the best kept).

    ``x``: (N, D) rows as a tensor or :class:`Rows` (then streamed: one pass over the items per centre).
    """
    return drain(kmeans_plus_plus_steps(x, k, rng, n_trials))


def kmeans_plus_plus_steps(x, k: int, rng: np.random.Generator, n_trials: int | None = None):
    """:func:`kmeans_plus_plus` as a generator: yields Progress after each centre, returns the (K, D) centres."""
    x = as_rows(x)
    n = x.n
    n_trials = n_trials or 2 + int(math.log(k))
    centers = [x.take([rng.integers(n)])[0]]
    closest = x.distances(centers[0][None])[:, 0]
    for i in range(1, k):
        yield Progress(i, k, float("nan"), "k-means++ start")
        total = float(closest.sum())
        if total <= 0:  # fewer distinct items than K: pick the rest at random
            centers.append(x.take([rng.integers(n)])[0])
            continue
        p = (closest / closest.sum()).double().cpu().numpy()
        candidates = rng.choice(n, size=n_trials, p=p / p.sum())
        d2 = x.distances(x.take(candidates))
        potentials = torch.minimum(closest[:, None], d2).sum(0)
        best = int(torch.argmin(potentials))
        centers.append(x.take([candidates[best]])[0])
        closest = torch.minimum(closest, d2[:, best])
    return torch.stack(centers)


#: Rows of a bisected set handled at once (``bisect``): its passes never hold more than this many rows' temporaries.
BISECT_BLOCK = 4096


def bisect(rows, iters: int = 10) -> tuple[float, float, torch.Tensor, torch.Tensor]:
    """Bisect points (n ≥ 2, P): their sum of squares about the mean, after the split, the split's two means (2, P)
    and the mask of the second side. Deterministic: split by the sign along the top principal axis (power
    iteration from the point farthest from the mean), then a few 2-means iterations. ``rows`` is a tensor or a
    callable giving the points' row blocks in order (each call a new pass, e.g. read back from a scratch), so a
    large set is bisected block by block, never whole."""
    blocks = rows if callable(rows) else (lambda: rows.split(BISECT_BLOCK))
    n, total = 0, None
    for b in blocks():
        n, total = n + len(b), b.sum(0) if total is None else total + b.sum(0)
    mean = total / n
    sse1, farthest, axis = 0.0, -1.0, None
    for b in blocks():
        distance = ((b - mean) ** 2).sum(1)
        sse1 += float(distance.sum())
        i = int(distance.argmax())
        if float(distance[i]) > farthest:
            farthest, axis = float(distance[i]), b[i] - mean
    for _ in range(iters):
        axis = sum(((b - mean).T @ ((b - mean) @ axis) for b in blocks()), torch.zeros_like(axis))
        axis = axis / axis.norm().clamp_min(1e-12)
    side = torch.cat([(b - mean) @ axis > 0 for b in blocks()])
    for _ in range(iters + 1):
        if side.all() or not side.any():
            return sse1, sse1, torch.stack([mean] * 2), side
        means = _side_means(blocks, side)
        new = torch.cat([((b - means[1]) ** 2).sum(1) < ((b - means[0]) ** 2).sum(1) for b in blocks()])
        if torch.equal(new, side):
            break
        side = new
    means = _side_means(blocks, side)
    sse2, at = 0.0, 0
    for b in blocks():
        sse2 += float(((b - means[side[at:at + len(b)].long()]) ** 2).sum())
        at += len(b)
    return sse1, sse2, means, side


def _side_means(blocks, side: torch.Tensor) -> torch.Tensor:
    """The means (2, P) of the rows off and on ``side``, summed block by block."""
    sums, at = None, 0
    for b in blocks():
        part = torch.zeros(2, b.shape[1], dtype=b.dtype, device=b.device).index_add_(0, side[at:at + len(b)].long(), b)
        sums, at = part if sums is None else sums + part, at + len(b)
    counts = torch.stack([(~side).sum(), side.sum()]).to(sums.dtype)
    return sums / counts[:, None]


def random_init(x, k: int, rng: np.random.Generator) -> torch.Tensor:
    """K distinct items drawn uniformly (rows as a tensor or :class:`Rows`)."""
    x = as_rows(x)
    return x.take(rng.choice(x.n, size=k, replace=False)).clone()


def assign(x, centers: torch.Tensor, batch_size: int = 8192) -> tuple[torch.Tensor, torch.Tensor]:
    """Squared distances to every centre (N, K) and the nearest centre (N,), in batches."""
    d2 = as_rows(x, batch_size).distances(centers)
    return d2, d2.argmin(1)


def keep_pinned(labels: torch.Tensor, pinned: torch.Tensor | None) -> torch.Tensor:
    """Labels with the user-fixed ones (pinned ≥ 0) put back."""
    return labels if pinned is None else torch.where(pinned >= 0, pinned.to(labels.device), labels)


def partition_means(x: torch.Tensor, labels: torch.Tensor, fallback: torch.Tensor) -> torch.Tensor:
    """Mean row (K, D) of each cluster of ``labels`` (N,) over rows ``x`` (N, D); an empty cluster keeps its
    ``fallback`` row. Refine starts Lloyd here: the centres of the user's edited partition."""
    one_hot = torch.nn.functional.one_hot(labels, len(fallback)).to(x.dtype)
    counts = one_hot.sum(0)
    means = (one_hot.T @ x) / counts.clamp_min(1)[:, None]
    return torch.where(counts[:, None] > 0, means, fallback.to(device=x.device, dtype=x.dtype))


@dataclass(frozen=True)
class LloydStep:
    """One chunk's sufficient statistics for a Lloyd iteration (its E-step), which the M-step reduces."""

    sums: torch.Tensor        # (K, D): the sum of the chunk's rows assigned to each centre
    counts: torch.Tensor      # (K,): how many rows each centre got
    inertia: float            # the chunk's squared distances to the assigned centres, summed
    labels: torch.Tensor      # (n,): the chunk's assignment, pinned items kept
    far: torch.Tensor         # (m,), m ≤ K: the chunk's largest own distances, descending
    far_index: torch.Tensor   # (m,): their item numbers (the chunk's start added)


def lloyd_e_step(x: torch.Tensor, centers: torch.Tensor, pinned: torch.Tensor | None = None,
                 start: int = 0) -> LloydStep:
    """The E-step of one chunk of rows ``x`` (n, D) against ``centers`` (K, D): a pure function, so the
    in-process loop and a cluster's workers (``ticlust.kernels.chunked``) run the very same arithmetic.
    ``pinned`` (n,): the chunk's user-fixed clusters (-1: free); ``start``: the chunk's first item number."""
    k = centers.shape[0]
    d2 = squared_distances(x, centers)
    labels = keep_pinned(d2.argmin(1), pinned)
    own = d2.gather(1, labels[:, None])[:, 0]
    one_hot = torch.nn.functional.one_hot(labels, k).to(centers.dtype)
    far = torch.argsort(own, descending=True)[:k]
    return LloydStep(one_hot.T @ x, one_hot.sum(0), float(own.sum()), labels, own[far], far + start)


def lloyd(x, centers: torch.Tensor, max_iter: int = 300, tol: float = 1e-4, batch_size: int = 8192,
          pinned: torch.Tensor | None = None) -> Iterator[tuple[int, float, torch.Tensor, torch.Tensor]]:
    """Lloyd iterations from ``centers``; yields (iteration, inertia, centres, labels) after each update.

    ``x``: (N, D) rows as a tensor or :class:`Rows` (streamed batch by batch). Each iteration is the E-step
    of every chunk (:func:`lloyd_e_step` through :meth:`Rows.map_chunks`: here, or one task per chunk on a
    cluster) and an M-step that reduces their sums and counts in chunk order, so it is the same iteration
    wherever the chunks ran.
    Stops when no label changes, when the labels are those of two iterations before (a two-cycle: float round-off
    in the distances can flip one item between two clusters for ever, as it did on 1,000 real 128-px crops, 300
    iterations), or when the total squared centre shift falls below ``tol`` times the mean per-feature variance
    (scikit-learn's rule). An emptied cluster is moved to the item that is farthest
    from its centre. ``pinned`` (N,): a cluster per item that the user fixed (-1: free); those items keep it.
    """
    x = as_rows(x, batch_size)
    tol_abs = tol * x.mean_variance()
    labels = before = None
    for it in range(1, max_iter + 1):
        steps = x.map_chunks(lloyd_e_step, (centers,), pinned)
        sums, counts = steps[0].sums, steps[0].counts
        for step in steps[1:]:                       # the M-step: a reduce in chunk order
            sums, counts = sums + step.sums, counts + step.counts
        new_labels = torch.cat([step.labels for step in steps])
        inertia = sum(step.inertia for step in steps)
        new_centers = sums / counts.clamp_min(1)[:, None]
        empty = torch.nonzero(counts == 0).flatten()
        if len(empty):
            far = torch.cat([step.far for step in steps])
            index = torch.cat([step.far_index for step in steps])
            pick = index[torch.argsort(far, descending=True, stable=True)[: len(empty)]]
            new_centers[empty] = x.take(pick.cpu().numpy())
        shift = float(((new_centers - centers) ** 2).sum())
        converged = any(seen is not None and bool(torch.equal(seen, new_labels)) for seen in (labels, before))
        centers, labels, before = new_centers, new_labels, labels
        yield it, inertia, centers, labels
        if converged or shift <= tol_abs:
            break


def lloyd_steps(x, centers: torch.Tensor, cfg, shape: tuple, stage: str, step0: int = 0,
                total: Callable[[int], int] | None = None, pinned: torch.Tensor | None = None):
    """:func:`lloyd` as events (Progress counted from ``step0``; a Snapshot of the centres, shaped (K, *shape), each
    iteration), then the final assignment with the pinned items kept. The Progress total is ``total(expected)`` (default
    ``step0 + expected``), ``expected`` the iterations this run will likely take (``events.Forecast``: at most max_iter).
    ``cfg`` gives k, max_iter, tol and batch_size. Returns (mean distortion per iteration and final, centres, d2, labels)."""
    x = as_rows(x, cfg.batch_size)
    history, prev, forecast = [], None, Forecast(cfg.max_iter)
    total = total or (lambda expected: step0 + expected)
    for it, inertia, centers, labels in lloyd(x, centers, cfg.max_iter, cfg.tol, pinned=pinned):
        history.append(inertia / x.n)
        changed = None if prev is None else int((prev != labels).sum())
        expected = it if changed == 0 else forecast.total(changed)        # no label changed: this was the last
        prev = labels
        yield Progress(step0 + it, max(step0 + it, total(expected)), history[-1], stage)
        yield Snapshot(centers.reshape(cfg.k, *shape).cpu().numpy())
    d2, labels = assign(x, centers)
    labels = keep_pinned(labels, pinned)
    history.append(float(d2.gather(1, labels[:, None]).sum()) / x.n)
    return history, centers, d2, labels


def own_and_runner_up(dist: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """From (N, K) costs and each item's cluster: its own cost, its runner-up's cost and that runner-up (N,).

    Swap moves (ST K-means, DTI) price dropping a centroid by what its members pay at their runner-up.
    """
    own = dist.gather(1, labels[:, None])[:, 0]
    others = dist.scatter(1, labels[:, None], float("inf")).min(1)
    return own, others.values, others.indices
