"""Rigid-invariant K-means: Lloyd iterations whose distance is the best of every in-plane rotation (and
optionally mirror flip) and every shift, searched exhaustively (``transforms.rigid``), as in cryo-EM 2D
classification (RELION, cryoSPARC, ISAC).

d(x, μ) = min over angles a, flips f, integer shifts s of ||x − μ turned by (a, f) and shifted by s||².
Each iteration searches every (item, centroid) pair's pose on the angle grid (its step from the crop
size), assigns each item to its nearest centroid, and moves every centroid to the mean of its members
carried onto its frame (the inverse of their pose, bilinear). The first centroids are chosen by
k-means++ under the same rigid distance, so two copies of one pattern at different angles are not
taken for two seeds. Unlike the gradient alignments of ai/st-kmeans this finds a pattern at any angle,
not only near the identity.

``overcluster`` > 1 first runs those Lloyd iterations with overcluster × K prototypes, then merges them down
to K by Ward's criterion (the least rise of the within-cluster sum of squares, with the cluster sizes) on the
prototypes' own rigid distances, each merged prototype the size-weighted mean of its parts posed into one
frame; the items are then assigned once to the K merged prototypes. With K prototypes alone, Lloyd often
spends two on one kind seen in two styles and lets two other kinds share one; many small prototypes are
purer, and the merge joins first the pairs that cost the clustering least (measured in docs/rotation.md: it
helps some sets and costs others, so it is off by default).

``refine`` hands the result to AI K-means (affine) or ST K-means (affine + TPS) as their start: every
pair's affine map starts at the rigid pose found here, and each of their iterations searches the rigid pose
again (their ``start`` rigid, with this ``flip``), so their Adam refines a pose instead of searching it.
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

import numpy as np
import torch

from ..core.stack import Stack, StackImages, from_nchw, to_nchw
from ..core.validation import check_images, check_same_size
from ..events import Progress
from ..kernels.aligned_lloyd import AlignedRun, aligned_lloyd, aligner_for, full_size
from ..kernels.rigid_lloyd import aligned_stack, rigid_kmeans_steps, rigid_lloyd, rigid_match
from ..result import ClusteringResult, FittedState
from ..transforms.align import Aligner, Alignments
from ..transforms.rigid import SHIFT_FRACTION, RigidMatch, aligned_items, common_frame, shift_pixels
from .base import Method, get_method, param, register, seed_everything


@dataclass
class RigidKMeansConfig:
    k: int = 10
    flip: bool = param(False, "Mirror images count as the same (cells in 2-D have no handedness unless you say so)", essential=True)
    angles: int = param(0, "Angles tried over 360°; 0: from the crop size (a point on the inscribed circle moves ≤ 2 px per step)", low=0)
    max_shift: float = param(SHIFT_FRACTION, "Largest shift searched, as a fraction of the half image side (every integer shift within it)", low=0.0, high=1.0)
    max_iter: int = param(20, "Most Lloyd iterations (stops earlier once no assignment changes)", low=1, essential=True)
    overcluster: int = param(1, "Prototypes per cluster in a first pass (1: off): Lloyd with overcluster × K prototypes, "
                             "then merged down to K by Ward's criterion on their rigid distances, so that one kind seen in "
                             "several styles can stay one cluster", low=1)
    refine: str = param("none", "Then refine from the rigid poses: none, affine (AI K-means) or deformable (ST K-means, TPS)",
                        choices=("none", "affine", "deformable"), essential=True)
    refine_iter: int = param(5, "Lloyd iterations of the refinement", low=1)
    batch_size: int = param(512, "Items searched at once (memory vs speed)", low=1, gui=False)


@dataclass
class RigidState(FittedState):
    centers: np.ndarray   # (K, C, H, W) centroids


def ward_groups(d2: np.ndarray, sizes: np.ndarray, k: int) -> np.ndarray:
    """Group label (0..k-1) of each of K' clusters, merged pairwise by Ward's criterion until k are left: at each
    step the pair whose merge raises the within-cluster sum of squares least, n_a n_b / (n_a + n_b) · d²(a, b),
    from the squared distances d2 (K', K') between their centroids (updated by Lance–Williams)."""
    d2 = np.minimum(d2, d2.T).astype(np.float64)
    n = sizes.astype(np.float64).copy()
    group = np.arange(len(n))
    alive = list(range(len(n)))
    while len(alive) > k:
        a_, b_ = np.array(alive)[:, None], np.array(alive)[None]
        cost = np.where(a_ == b_, np.inf, n[a_] * n[b_] / np.maximum(n[a_] + n[b_], 1e-12) * d2[a_, b_])
        i, j = np.unravel_index(np.argmin(cost), cost.shape)
        a, b = alive[i], alive[j]
        na, nb = n[a], n[b]
        total = max(na + nb, 1e-12)
        d2[a, :] = d2[:, a] = (na * d2[a] + nb * d2[b]) / total - na * nb * d2[a, b] / total ** 2   # centroid of a ∪ b
        n[a] = na + nb
        group[group == b] = a
        alive.remove(b)
    return np.searchsorted(np.array(alive), group)


def merged_prototypes(mu: torch.Tensor, sizes: torch.Tensor, cfg: RigidKMeansConfig) -> torch.Tensor:
    """K' prototypes (K', C, H, W) with their cluster sizes merged into cfg.k (:func:`ward_groups` on their rigid
    distances); each merged prototype is the size-weighted mean of its parts posed into one frame (its largest part's)."""
    d2 = rigid_match(mu, mu, cfg).score.double().cpu().numpy()
    group = ward_groups(d2, sizes.cpu().numpy(), cfg.k)
    window = shift_pixels(cfg.max_shift, tuple(mu.shape[-2:]))
    merged = []
    for g in range(cfg.k):
        parts = torch.from_numpy(np.flatnonzero(group == g)).to(mu.device)
        parts = parts[torch.argsort(sizes[parts], descending=True, stable=True)]
        posed = aligned_items(mu[parts], common_frame(mu[parts], n_angles=cfg.angles or None, flip=cfg.flip, max_shift=window))
        weight = sizes[parts].to(mu.dtype).clamp_min(1e-6).view(-1, 1, 1, 1)
        merged.append((posed * weight).sum(0) / weight.sum())
    return torch.stack(merged)


class RigidKMeans(Method):
    name, title = "rigid-kmeans", "Rigid-invariant K-means (exhaustive rotation × shift search)"
    config, state, inputs = RigidKMeansConfig, RigidState, ("images",)
    embeds = "aligned"   # the object map: each item posed onto its own prototype
    paper = "exhaustive in-plane search as in cryo-EM 2D classification (RELION, cryoSPARC)"
    caution = "Only rotations, flips and shifts are undone: a stretched or bent member costs its full distance (refine: affine/deformable)"

    def _items(self, stack: Stack, images: torch.Tensor) -> np.ndarray:
        return from_nchw(images, stack.channels > 1).cpu().numpy()

    def train(self, stack: Stack, cfg: RigidKMeansConfig, device: torch.device, seed: int):
        check_images(stack, self.name)
        start = time.perf_counter()
        rng = seed_everything(seed)
        x = StackImages(stack, device)   # read block by block on every pass, never whole
        first = dataclasses.replace(cfg, k=min(cfg.k * cfg.overcluster, stack.n))
        later = cfg.refine_iter if cfg.refine != "none" else 0     # the refinement's iterations, for the ETA
        mu, match, labels, history, iters = yield from rigid_kmeans_steps(x, first, rng, stack.channels > 1, later)
        if cfg.overcluster > 1:
            yield Progress(0, 1, stage=f"merging {first.k} prototypes into {cfg.k}")
            mu = merged_prototypes(mu, torch.bincount(labels, minlength=first.k), cfg)
            match = rigid_match(x, mu, cfg)
            labels = match.score.argmin(1)
            own = match.score.gather(1, labels[:, None])[:, 0]
            history = history + [float(own.sum()) / x.shape[0]]
        result = self._result(stack, cfg if cfg.overcluster > 1 else first, x, mu, match, labels, history, iters)
        result.timing = {**result.timing, "fit_s": time.perf_counter() - start}
        if cfg.refine != "none":
            result = yield from self._refined(stack, cfg, result, device, seed, start)
        return result

    def refine(self, stack: Stack, cfg: RigidKMeansConfig, start: ClusteringResult, pinned: torch.Tensor, device: torch.device):
        t0 = time.perf_counter()
        x = StackImages(stack, device)
        mu = to_nchw(torch.from_numpy(np.asarray(start.prototypes, np.float32)).to(device))
        mu, match, labels, history, iters = yield from rigid_lloyd(x, mu, cfg, stack.channels > 1, pinned.to(device))
        result = self._result(stack, cfg, x, mu, match, labels, history, iters)
        result.timing = {**result.timing, "fit_s": time.perf_counter() - t0}
        return result

    def _result(self, stack, cfg, x, mu, match, labels, history, iterations) -> ClusteringResult:
        return self.result(cfg, RigidState(mu.cpu().numpy()), prototypes=self._items(stack, mu), history=history,
                           timing={"iterations": iterations}, **self._outputs(stack, x, match, labels))

    def _outputs(self, stack: Stack, x, match: RigidMatch, labels: torch.Tensor) -> dict:
        own = match.assigned(labels)
        device = match.theta.device
        aligner = Aligner(tuple(x.shape[-2:]), None, device)
        params = {"angle": own.angle.cpu().numpy(), "flip": own.flip.cpu().numpy(), "shift": own.shift.cpu().numpy(),
                  "affine": (own.theta.reshape(-1, 2, 3) + torch.eye(2, 3, device=device)).cpu().numpy(),
                  "pair_theta": match.theta.cpu().numpy()}
        return dict(labels=labels.cpu().numpy(), scores=match.score.cpu().numpy(), aligned=self._items(stack, aligned_stack(x, own.theta)),
                    aligned_kind="item-on-prototype", grids=aligner.display_grids(Alignments(own.theta)).cpu().numpy(),
                    params=params)

    def _refined(self, stack, cfg, rigid: ClusteringResult, device, seed, start):
        """AI or ST K-means Lloyd iterations (``kernels.aligned_lloyd``) from the rigid centroids, every pair's affine
        map starting at its rigid pose; their config is ai/st-kmeans' own (the registry's) with these iterations."""
        pose = "rigid+flip" if cfg.flip else "rigid"   # every refinement iteration searches the rigid pose again
        affine = cfg.refine == "affine"
        sub_cfg = (get_method("ai-kmeans").config(k=cfg.k, invariances="affine", max_iter=cfg.refine_iter, start=pose)
                   if affine else
                   get_method("st-kmeans").config(k=cfg.k, max_iter=cfg.refine_iter, affine_first=False, start=pose))
        seed_everything(seed)
        aligner = aligner_for(sub_cfg, "affine" if affine else "deformable", None if affine else sub_cfg.landmarks,
                              tuple(stack.item_shape[:2]), device)
        run = AlignedRun.of(stack, sub_cfg, aligner)   # the images read from the stack chunk by chunk
        mu = torch.from_numpy(rigid.state.centers).to(device)
        pairs = run.aligner.zeros(stack.n, cfg.k)
        pairs.theta.copy_(torch.from_numpy(rigid.params["pair_theta"]).to(device))
        mu, pairs, labels, history, iters = yield from aligned_lloyd(run, run.aligner.reduced(mu), None, pairs)
        history = [h * run.aligner.work ** 2 for h in history]
        run, mu = full_size(run, mu, pairs, labels)   # warps fitted on reduced crops (work_side): prototypes at full size
        out = run.result_fields(pairs, labels)
        out["params"].update({k: rigid.params[k] for k in ("angle", "flip", "shift")})
        timing = {"fit_s": time.perf_counter() - start, "rigid_s": rigid.timing["fit_s"], "iterations": rigid.timing["iterations"] + iters}
        return self.result(cfg, RigidState(mu.cpu().numpy()), prototypes=run.items(mu), history=rigid.history + history,
                           timing=timing, **out)

    def predict(self, result: ClusteringResult, stack: Stack, device: torch.device, batch_size: int | None = None) -> ClusteringResult:
        """New images assigned to the fixed centroids by the same exhaustive search."""
        start = time.perf_counter()
        cfg = self.config_of(result)
        if batch_size:
            cfg = dataclasses.replace(cfg, batch_size=int(batch_size))
        mu = torch.from_numpy(np.asarray(result.state.centers, np.float32)).to(device)
        check_same_size(stack, int(np.prod(mu.shape[1:])))
        x = StackImages(stack, device)
        match = rigid_match(x, mu, cfg)
        out = self._outputs(stack, x, match, match.score.argmin(1))
        return self.predicted(result, timing={"fit_s": time.perf_counter() - start}, **out)

    def align(self, result: ClusteringResult, stack: Stack, device: torch.device, index: int | None = None):
        """For the alignment inspector: the image carried onto every centroid at its best pose (flip included), and its scores."""
        cfg = self.config_of(result)
        mu = torch.from_numpy(np.asarray(result.state.centers, np.float32)).to(device)
        x = StackImages(stack, device)[0:1]
        match = rigid_match(x, mu, cfg)
        warped = aligned_items(x.expand(mu.shape[0], -1, -1, -1), match.theta[0])
        return self._items(stack, warped), match.score[0].cpu().numpy()


RIGID_KMEANS = register(RigidKMeans())
