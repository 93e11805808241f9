"""Lloyd's k-means under the rigid distance: d(x, μ) = min over angles, flips and integer shifts of
||x − μ turned and shifted||², every pose searched exhaustively (``transforms.rigid.rigid_search``).

rigid-kmeans fits with it (then may merge its prototypes or refine them with the aligned Lloyd), and rigid-pssc
poses its items with it before PSSC. The images are read from the stack block by block (a
:class:`~ticlust.core.stack.StackImages`, or a tensor in hand): the whole stack is never held at once. The config
is rigid-kmeans' or a :class:`RigidLloydConfig`: what the search and the loop read.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..core.stack import from_nchw
from ..events import Forecast, Progress, Snapshot, drain
from ..transforms.rigid import SHIFT_FRACTION, RigidMatch, aligned_items, rigid_search_blocks, shift_pixels
from .kmeans import keep_pinned

#: Items carried onto their prototype's frame at once (centroid means, aligned outputs).
WARP_BLOCK = 2048
#: The stage name of the rigid k-means++ seeding.
SEED_STAGE = "rigid k-means++ seeds"


@dataclass
class RigidLloydConfig:
    """The rigid search and its Lloyd loop: K, the mirror, the angles (0: from the crop size), the largest shift as a
    fraction of the half image side, the most iterations and the items searched at once (rigid-kmeans' defaults)."""

    k: int
    flip: bool = False
    angles: int = 0
    max_shift: float = SHIFT_FRACTION
    max_iter: int = 20
    batch_size: int = 512


def rigid_match(x, mu: torch.Tensor, cfg: Any) -> RigidMatch:
    """The best rigid pose of every item x (N, C, H, W; a tensor or a StackImages, read ``cfg.batch_size`` at a time)
    against every prototype mu (K, C, H, W), on the config's angles, flip and shift window."""
    return drain(rigid_match_blocks(x, mu, cfg, lambda done, blocks: None))


def rigid_kmeans_plus_plus(x, cfg: Any, rng: np.random.Generator):
    """Greedy k-means++ seeds under the rigid distance, as ``kernels.kmeans`` seeds plain K-means: each new seed the
    best of 2 + ln K candidates drawn ∝ their distance to the nearest seed (the one leaving the least total distance;
    one draw alone put two seeds on one kind of 3-kind nuclei fields of 600 in all three seeds tried:
    benchmarks/results/rigid_seeding.md). A generator, a Progress per
    seed (each a search of every item against the candidates), returns the seeds."""
    n = x.shape[0]
    trials = 2 + int(math.log(cfg.k))
    chosen = [int(rng.integers(n))]
    d2 = rigid_match(x, x[chosen[-1]:chosen[-1] + 1], cfg).score[:, 0].double()
    yield Progress(1, cfg.k, stage=SEED_STAGE)
    for i in range(1, cfg.k):
        p = d2.clamp_min(0).cpu().numpy()
        p = p / p.sum() if p.sum() > 0 else np.full(n, 1.0 / n)
        candidates = rng.choice(n, size=trials, p=p)
        scores = torch.minimum(d2[:, None], rigid_match(x, x[candidates], cfg).score.double())   # (N, trials)
        best = int(torch.argmin(scores.sum(0)))
        chosen.append(int(candidates[best]))
        d2 = scores[:, best]
        yield Progress(i + 1, cfg.k, stage=SEED_STAGE)
    return x[chosen].clone()


def rigid_match_blocks(x, mu: torch.Tensor, cfg: Any, told):
    """:func:`rigid_match` as a generator yielding ``told(blocks done, blocks)`` (a Progress) after each block of
    ``cfg.batch_size`` items searched (one search: the prototypes turned and shifted once); returns the match."""
    search = rigid_search_blocks(x, mu, n_angles=cfg.angles or None, flip=cfg.flip,
                                 max_shift=shift_pixels(cfg.max_shift, tuple(x.shape[-2:])), block=cfg.batch_size)
    while True:
        try:
            done, blocks = next(search)
        except StopIteration as stop:
            return stop.value
        yield told(done, blocks)


def lloyd_stage(iteration: int, done: int, blocks: int) -> str:
    """The name of a rigid Lloyd run's progress: the iteration and its blocks searched so far (one text up to its
    numbers, so a front end's ETA runs at the pace of blocks from the first iteration's first block)."""
    return f"Lloyd iteration {iteration} (rigid search): {done}/{blocks} batches searched"


def rigid_centroids(x, mu: torch.Tensor, theta: torch.Tensor, labels: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
    """Each centroid the mean of its members carried onto its frame; an emptied one restarts on the worst-fitted item."""
    k = mu.shape[0]
    sums = torch.zeros_like(mu)
    for s in range(0, x.shape[0], WARP_BLOCK):
        sums.index_add_(0, labels[s:s + WARP_BLOCK], aligned_items(x[s:s + WARP_BLOCK], theta[s:s + WARP_BLOCK]))
    counts = torch.bincount(labels, minlength=k)
    new = sums / counts.clamp_min(1).to(mu.dtype).view(-1, 1, 1, 1)
    empty = torch.nonzero(counts == 0).flatten()
    if len(empty):
        worst = torch.argsort(scores, descending=True)[: len(empty)]
        new[empty] = x[worst]
    return new


def aligned_stack(x, theta: torch.Tensor) -> torch.Tensor:
    """Every item carried onto its prototype's frame by its pose theta (N, 6), ``WARP_BLOCK`` items at a time."""
    return torch.cat([aligned_items(x[s:s + WARP_BLOCK], theta[s:s + WARP_BLOCK]) for s in range(0, x.shape[0], WARP_BLOCK)])


def rigid_lloyd(x, mu: torch.Tensor, cfg: Any, channels_last: bool, pinned: torch.Tensor | None = None,
                later: float = 0.0):
    """Lloyd iterations from centroids mu (generator: a Progress per block of items searched, a Snapshot of the
    centroids in the stack's layout after each update) until no label changes or ``cfg.max_iter``; ``pinned`` ≥ 0
    keeps those items in that cluster. ``later``: what the stages that follow (rigid-kmeans' refine, rigid-pssc's
    PSSC) cost, in Lloyd iterations of this one (``Progress.later``: the ETA covers them). Returns (centroids, the
    last search's RigidMatch, labels, distortion history, iterations)."""
    blocks = -(-x.shape[0] // cfg.batch_size)
    forecast = Forecast(cfg.max_iter)           # the total: the iterations the labels' changes say are left
    total, after = cfg.max_iter * blocks, later * blocks
    history, prev, it = [], None, 0
    yield Progress(0, total, stage=lloyd_stage(1, 0, blocks), later=after)          # the pace's start
    for it in range(1, cfg.max_iter + 1):
        loss = history[-1] if history else float("nan")
        match = yield from rigid_match_blocks(x, mu, cfg, lambda b, nb, it=it, loss=loss, total=total: Progress(
            (it - 1) * nb + b, total, loss, lloyd_stage(it, b, nb), later=after))
        labels = keep_pinned(match.score.argmin(1), pinned)
        own = match.score.gather(1, labels[:, None])[:, 0]
        history.append(float(own.sum()) / x.shape[0])
        moved = None if prev is None else int((prev != labels).sum())
        stop = moved == 0
        expected = it if stop else forecast.total(moved)
        total = expected * blocks
        yield Progress(it * blocks, total, history[-1], lloyd_stage(it, blocks, blocks), later=after)
        if stop:
            break
        mu = rigid_centroids(x, mu, match.assigned(labels).theta, labels, own)
        prev = labels
        yield Snapshot(from_nchw(mu, channels_last).cpu().numpy())
    return mu, match, labels, history, it


def rigid_kmeans_steps(x, cfg: Any, rng: np.random.Generator, channels_last: bool, later: float = 0.0):
    """Rigid k-means from k-means++ seeds (generator, as :func:`rigid_lloyd`, which it returns the end of)."""
    mu = yield from rigid_kmeans_plus_plus(x, cfg, rng)
    return (yield from rigid_lloyd(x, mu, cfg, channels_last, later=later))
