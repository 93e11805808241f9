"""Spatial Transformer K-means and affine-invariant K-means (Cosentino et al., paper 000).

The distance of a datum x to a centroid μ is d(x, μ) = min_ν ||T(x, ν) − μ||² (Eq. 3), with T the
datum resampled (bilinear, zero outside) through a thin-plate spline on a g×g landmark grid (App. E)
— or through an affine map for ``ai-kmeans``. All N×K alignments are solved at once on the device
with Adam: first an affine pre-alignment of low-pass-filtered images (App. B), then the landmark
displacements at full resolution (the Lloyd fit takes these stages by a few Levenberg-Marquardt iterations
by default, ``fit_align``: ``transforms.fast_fit``). Assignment is by argmin, the centroid is the mean of the warped
data (Eq. 4, Algo. 1), and Lloyd iterations (Algo. 2) run from K-means++ centroids until no
assignment changes.

Every alignment is warm-started from the previous Lloyd iteration and each (datum, centroid) pair
keeps the best parameters it has seen under the current centroids (the old ones included), so the
distortion (Eq. 2) recorded per iteration never increases: alignment, assignment and the
centroid mean each can only lower it.

The alignment engine (``Aligner``, the per-pair Adam, the low-pass pyramid) is ``ticlust.transforms.align``; the
Lloyd iteration on it (E-step, M-step, the repair move, the loop) is ``ticlust.kernels.aligned_lloyd``, which
rigid-kmeans' refinement runs too. This file holds the method: its config, the mini-batch loop and predict.
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

import numpy as np
import torch

from ..errors import InputError
from ..core.stack import Stack, to_nchw
from ..core.validation import check_images, check_same_size
from ..result import Assignments, ClusteringResult, FittedState
from ..core.scratch import RowScratch, host_index
from ..transforms.align import AdamState, Aligner, Alignments, Moments, Schedule, Ticker, lower
from ..transforms.fast_fit import TPS_DAMPING
from ..events import Progress, Snapshot, drain
from ..kernels import Rows, kmeans_plus_plus
from ..kernels.aligned_lloyd import (LLOYD_TOL, AlignedRun, aligned_lloyd, aligner_for, chunks, full_size,
                                     lloyd_ticker, relabelled, starting)
from .base import Method, best_of, param, register, seed_everything
from .invariances import invariances_param, start_param

#: The paper's model-selection grids (Sec. 4.2): landmark grid sides and Adam learning rates.
LANDMARK_GRID = (3, 4, 5, 6, 7, 8)
LR_GRID = (1e-4, 5e-4, 1e-3, 5e-3, 1e-2, 5e-2)


@dataclass
class AIKMeansConfig:
    k: int = 10
    invariances: str = invariances_param("affine", ("rigid", "similarity", "affine"))
    lr: float = param(5e-3, "Adam learning rate of the per-pair alignment (the paper cross-validates 1e-4 … 5e-2)", low=1e-6, high=1.0)
    steps: int = param(30, "Adam steps per Lloyd iteration on every (image, centroid) alignment, warm-started", low=1)
    affine_steps: int = param(30, "Adam steps of the low-pass affine pre-alignment per Lloyd iteration (App. B)", low=0)
    affine_lr: float = param(1e-2, "Adam learning rate of the low-pass affine pre-alignment", low=1e-6, high=1.0)
    lowpass: float = param(0.07, "Gaussian low-pass σ for the affine pre-alignment, as a fraction of the image side (0 = none)", low=0.0, high=0.5)
    max_iter: int = param(20, "Most Lloyd iterations (stops earlier once no assignment changes, see tol)", low=1, essential=True)
    tol: float = param(LLOYD_TOL, "Lloyd stops once an iteration moves at most this fraction of the items to another "
                       "cluster (0: only once none moves)", low=0.0, high=1.0)
    fit_align: str = param("gauss-newton", "How the Lloyd fit aligns: gauss-newton, a few Levenberg-Marquardt iterations "
                           "per stage (fast); adam, steps / affine_steps Adam steps at lr / affine_lr (the paper's)",
                           choices=("gauss-newton", "adam"))
    max_scale: float = param(1.5, "Bound on the affine warp: its scale factors stay within [1/max_scale, max_scale]", low=1.0)
    max_shift: float = param(0.5, "Bound on the affine translation, as a fraction of the half image side", low=0.0)
    mode: str = param("lloyd", "lloyd: full-batch Lloyd iterations (Algo. 2, monotone distortion); minibatch: for large N", choices=("lloyd", "minibatch"))
    epochs: int = param(150, "Mini-batch mode: passes over the data (paper: 150)", low=1)
    batch_size: int = param(64, "Mini-batch mode: images per batch (paper: 64)", low=1)
    minibatch_steps: int = param(1, "Mini-batch mode: Adam steps per stage each time a batch is visited", low=1)
    predict_steps: int = param(150, "Adam steps per stage when aligning new images to the fixed centroids on the exact path "
                               "(predict_candidates=0)", low=1)
    predict_candidates: int = param(3, "Predict: centroids per new image aligned in full, the closest after a short "
                                    "alignment to every centroid; 0: every centroid, predict_steps per stage from the "
                                    "identity (the exact, slow path)", low=0)
    padding: str = param("zeros", "Value outside the image when warping: zeros (paper) or the border pixel", choices=("zeros", "border"))
    start: str = start_param("each Lloyd iteration takes when it beats the pair's last warp, and refines")
    reseed: bool = param(True, "Repair move: drop a redundant centroid and split the cluster that gains most from two, "
                         "when that lowers the distortion (fixes two centroids on one group and two groups under one)")
    select: bool = param(False, "Model selection (Sec. 4.2): sweep the paper's learning rates (and landmark grids) and keep the lowest distortion")
    chunk: int = param(0, "Images whose K alignments are optimised at once (memory vs speed); 0: 512 on the CPU, "
                       "on a GPU as many as fill about a quarter of its free memory", low=0, gui=False)
    # 32 measured on 1,000 real IFC crops of 64×64×2 (benchmarks/results/real_speed.md): ai-kmeans 6× less CPU at the
    # same ACC or better; crops below 64 px (MNIST, the generated nuclei, the pins) are fitted as they are
    work_side: int = param(32, "Larger crops are fitted on images averaged down by a whole factor to about this side (a warp "
                           "is the same map at any size), then their prototypes and pictures made at full size; 0: fit at "
                           "full size", low=0)


@dataclass
class STKMeansConfig(AIKMeansConfig):
    invariances: str = invariances_param("deformable (affine + thin-plate spline)")
    landmarks: int = param(4, "Side g of the g×g grid of TPS landmarks (ℓ = g², the paper sweeps 3 … 8)", low=3, high=8, essential=True)
    # ST's TPS keeps shrinking in check better than a bare affine map: a looser scale bound measured
    # better on both MNIST sets (docs/st_kmeans.md), while AI K-means keeps 1.5
    max_scale: float = param(2.0, "Bound on the affine warp: its scale factors stay within [1/max_scale, max_scale]", low=1.0)
    max_displacement: float = param(0.5, "Bound on each landmark displacement, as a fraction of the landmark spacing", low=0.0)
    affine_first: bool = param(True, "Deformable Lloyd runs: cluster with affine warps alone until the labels settle (tol), then "
                               "add the thin-plate spline (coarse to fine, as DTI's curriculum; stops a TPS bending "
                               "members of two groups onto one blended centroid)")
    # the affine screen ranks ST's centroids less well than AI's (the TPS reorders close ones): on MNIST (2,000 held
    # back) the Gauss-Newton path with 4 candidates lost 0.0125 ACC against the exact path, 5 keep it (0.888 both)
    predict_candidates: int = param(5, "Predict: centroids per new image aligned in full, the closest after a short "
                                    "alignment to every centroid; 0: every centroid, predict_steps per stage from the "
                                    "identity (the exact, slow path)", low=0)


PREDICT_BLOCK = 4096   # images read from a (lazy) stack at once when assigning new images
#: Predict's fast path (``_screened``): Levenberg-Marquardt iterations (``Aligner.gauss_newton``) of its stages,
#: PREDICT_ITERATIONS[has a TPS stage] = (screen: every pair's affine map at low resolution, the candidates' affine map
#: at full resolution, the candidates' TPS displacements at full resolution), chosen on MNIST (2,000 held back,
#: benchmarks/results/predict_rates.md): ai-kmeans without its full-resolution stage lost 0.03 ACC, with 2 iterations
#: it is within 0.004 of the exact path; ST's TPS goes on from the screened affine map (a full-resolution affine stage
#: before it lost 0.01: 0.8615 vs 0.8710 with 4 candidates and 3 TPS iterations).
PREDICT_ITERATIONS = {False: (2, 2, 0), True: (3, 0, 5)}


class _MomentScratch:
    """Mini-batch mode's per-pair Adam states (each stage's m and v per parameter and step counts, N×K×…) in a
    :class:`RowScratch`, laid out from the first batch's states; rows never stored read as zeros, which is a
    fresh Adam state. The same interface as :class:`Moments` (``rows``, ``store``); closed by its run."""

    STAGES = ("affine", "warp")

    def __init__(self, n: int, device):
        self.n, self.device = n, device
        self.scratch: RowScratch | None = None
        self.counts: dict[str, int] = {}   # parameter tensors per stage present

    def rows(self, idx) -> Moments:
        if self.scratch is None:
            return Moments()
        at = host_index(idx)

        def read(name):
            return torch.from_numpy(self.scratch.read(name, at)).to(self.device)

        def state(stage):
            if stage not in self.counts:
                return None
            count = self.counts[stage]
            return AdamState([read(f"{stage}.m{i}") for i in range(count)], [read(f"{stage}.v{i}") for i in range(count)],
                             read(f"{stage}.t"))
        return Moments(*(state(stage) for stage in self.STAGES))

    def store(self, idx, part: Moments, n: int) -> None:
        states = {stage: getattr(part, stage) for stage in self.STAGES if getattr(part, stage) is not None}
        if self.scratch is None:
            self.counts = {stage: len(st.m) for stage, st in states.items()}
            fields = {f"{stage}.t": tuple(st.t.shape[1:]) for stage, st in states.items()}
            for stage, st in states.items():
                for i, m in enumerate(st.m):
                    fields[f"{stage}.m{i}"] = fields[f"{stage}.v{i}"] = tuple(m.shape[1:])
            self.scratch = RowScratch(n, fields)
        at = host_index(idx)
        for stage, st in states.items():
            for i, (m, v) in enumerate(zip(st.m, st.v)):
                self.scratch.write(f"{stage}.m{i}", at, m.detach().cpu().numpy())
                self.scratch.write(f"{stage}.v{i}", at, v.detach().cpu().numpy())
            self.scratch.write(f"{stage}.t", at, st.t.detach().cpu().numpy())

    def close(self) -> None:
        if self.scratch is not None:
            self.scratch.close()


def _running_mean_update(mu: torch.Tensor, counts: torch.Tensor, labels: torch.Tensor, warped: torch.Tensor) -> None:
    """Mini-batch K-means step (in place): each hit centroid moves to the running mean of every warped
    member it has had (step 1/count); ``counts`` (K,) accumulates the members."""
    add = torch.bincount(labels, minlength=mu.shape[0]).to(counts.dtype)
    counts += add
    sums = torch.zeros_like(mu).index_add_(0, labels, warped)
    hit = add > 0
    mu[hit] = mu[hit] + (sums[hit] - add[hit].view(-1, 1, 1, 1) * mu[hit]) / counts[hit].view(-1, 1, 1, 1)


def _minibatch(run: AlignedRun, mu: torch.Tensor, rng: np.random.Generator):
    """Mini-batch variant: each batch's K alignments advance by a few Adam steps (moments kept per
    pair across epochs), then the assigned centroids move to the running mean of their warped
    members (per-centroid step 1/count, as in mini-batch K-means). Ends with a full assignment pass.
    Returns (centroids, alignments, labels, distortion history, epochs)."""
    cfg, n = run.cfg, run.stack.n
    pairs, moments = run.warm_start(), run.keep(_MomentScratch(n, mu.device))
    counts = torch.zeros(cfg.k, device=mu.device)
    labels = torch.full((n,), -1, dtype=torch.long, device=mu.device)
    batches = chunks(n, cfg.batch_size)
    ticker = Ticker(cfg.epochs * len(batches) * (cfg.minibatch_steps * (2 if cfg.affine_steps else 1))
                    + len(chunks(n, cfg.chunk)) * (cfg.affine_steps + cfg.steps))
    schedule = Schedule.of(cfg, ticker, cfg.minibatch_steps)
    history, epoch = [], 0
    for epoch in range(1, cfg.epochs + 1):
        order = torch.from_numpy(rng.permutation(n)).to(mu.device)
        total, changed = 0.0, 0
        for s in batches:
            idx = order[s]
            batch_moments = moments.rows(idx)
            x, targets = run.x.rows(idx), run.aligner.pyramid(mu)
            begin = starting(cfg.start, run.aligner, x, targets, pairs.rows(idx))
            aligned = yield from relabelled(run.aligner.align(x, targets, begin, schedule, batch_moments),
                                            f"mini-batch epoch {epoch}")
            moments.store(idx, batch_moments, n)
            pairs[idx] = aligned
            lab = aligned.losses.argmin(1)
            changed += int((lab != labels[idx]).sum())
            labels[idx] = lab
            total += float(aligned.losses.gather(1, lab[:, None]).sum())
            with torch.no_grad():
                warped = run.aligner.warp_pairs(run.x.full[idx], aligned.assigned(lab).as_pairs())[:, 0]
                _running_mean_update(mu, counts, lab, warped)
        history.append(total / n)
        yield Progress(ticker.step, ticker.total, history[-1], f"mini-batch epoch {epoch}")
        yield Snapshot(run.items(mu))
        if epoch > 1 and changed == 0:
            break
    yield from relabelled(run.align_all(mu, pairs, Schedule.of(cfg, ticker)), "final assignment")
    labels = pairs.losses.argmin(1)
    history.append(float(pairs.losses.gather(1, labels[:, None]).sum()) / n)
    return mu, pairs, labels, history, epoch


# ---- prediction ----------------------------------------------------------------------------------
def _screened(run: AlignedRun, mu: torch.Tensor) -> Alignments:
    """Predict's fast path: every (image, centroid) pair's affine map is fitted at low resolution by a few
    Gauss-Newton iterations from its start (the identity, or with ``start`` rigid each pair's rigid pose; rigid and
    similarity warps from their best turn, ``Aligner.turned``) and priced at full resolution (the screen); the
    ``predict_candidates`` closest centroids of each image then go on from that pose at full resolution: the affine
    map and, with a TPS, the landmark displacements (``PREDICT_ITERATIONS``); with K or more candidates, every centroid
    (a plate of few kinds). The other pairs keep their screened alignments, so their scores are upper bounds of a full
    alignment's and every image's label is one of its candidates."""
    cfg, aligner = run.cfg, run.aligner
    tps = aligner.landmarks is not None
    screen, affine, bend = PREDICT_ITERATIONS[tps]
    candidates = min(cfg.predict_candidates, mu.shape[0])
    mu = aligner.pyramid(mu)
    pairs = aligner.zeros(run.stack.n, mu.full.shape[0])
    for s in chunks(run.stack.n, cfg.chunk):
        x = run.x.rows(s)
        begin = starting(cfg.start, aligner, x, mu, pairs.rows(s))   # the identity, or each pair's rigid pose
        turned = Alignments(aligner.turned(x, mu, begin.theta), begin.nu)
        found = aligner.gauss_newton(x.low, mu.low, turned, screen, low=True)
        found.losses = aligner.pair_losses(x.full, mu.full, found)
        found = lower(found, begin)   # a rigid start's pose where it was better (the identity's loss is not known: inf)
        pick = found.losses.topk(candidates, dim=1, largest=False).indices   # (B, m)
        full, targets = found.take(pick), mu.full[pick]
        if affine:
            full = aligner.gauss_newton(x.full, targets, full, affine)
        if tps and bend:
            full = aligner.gauss_newton(x.full, targets, full, bend, tps=True, damping=TPS_DAMPING)
        found.put(pick, full)
        pairs[s] = found
    return pairs


# ---- the two methods -----------------------------------------------------------------------------
@dataclass
class STState(FittedState):
    centers: np.ndarray   # (K, C, H, W) centroids


class AIKMeans(Method):
    """Affine-invariant K-means; :class:`STKMeans` adds the thin-plate spline (a variant by subclass)."""

    name, title = "ai-kmeans", "Affine-invariant K-means"
    config, state, inputs = AIKMeansConfig, STState, ("images",)
    embeds = "aligned"   # the object map: each item carried onto its own prototype
    paper = "Cosentino et al., Spatial Transformer K-Means"
    auto_invariances = "affine"   # what invariances = auto means here (image stacks)
    #: What of a fit runs on a cluster (``fit_store(..., workers=N)``, docs/cluster.md): the aligned Lloyd's E-step per chunk
    #: (``kernels.aligned_lloyd``).
    cluster_steps = "the Lloyd E-step (alignments, assignment, warped sums per cluster), one task per chunk of images"

    def family(self, cfg) -> str:
        """The run's invariance family: the config's, or this method's own for auto."""
        return self.auto_invariances if cfg.invariances == "auto" else cfg.invariances

    def landmarks(self, cfg) -> int | None:
        """Side of the TPS landmark grid, or None: affine only."""
        return None

    def aligner(self, cfg, size, device, lean: bool = False) -> Aligner:
        """Affine warps of the run's family within the config's bounds (``lean``: see ``Aligner``)."""
        return aligner_for(cfg, self.family(cfg), None, size, device, lean)

    def selection_runs(self, cfg, landmarks, lrs) -> list:
        """(landmark grid side, 0 for none; config) of each model-selection run: one per learning rate (Adam's:
        the runs fit with ``fit_align="adam"``)."""
        return [(0, dataclasses.replace(cfg, lr=lr, select=False, fit_align="adam")) for lr in lrs]

    def validate(self, stack: Stack) -> None:
        check_images(stack, self.name, min_side=8)

    def train(self, stack: Stack, cfg, device: torch.device, seed: int):
        self.validate(stack)
        if cfg.select:
            best, _ = yield from self.sweep(stack, cfg, device, seed)
            return best
        return (yield from self._fit(stack, cfg, device, seed))

    def _start(self, stack: Stack, cfg, x: torch.Tensor | None, device) -> AlignedRun:
        """The run on images ``x`` (N, C, H, W) in hand, or (None) on the stack's, read batch by batch."""
        size = tuple(stack.item_shape[:2]) if x is None else tuple(x.shape[-2:])
        return AlignedRun.of(stack, cfg, self.aligner(cfg, size, device), x)

    def _fit(self, stack: Stack, cfg, device: torch.device, seed: int):
        """One run from K-means++ centroids, Lloyd iterations or mini-batches (generator; returns the result)."""
        start = time.perf_counter()
        rng = seed_everything(seed)
        run = self._start(stack, cfg, None, device)
        try:   # the warm start's scratch is removed however the run ends (error, cancel)
            rows = Rows(stack, device, run.cfg.chunk * 8, in_memory_bytes=0)   # streamed: never the whole stack at once
            mu = to_nchw(kmeans_plus_plus(rows, cfg.k, rng).reshape(cfg.k, *stack.item_shape)).contiguous()
            init = mu.clone()
            mu = run.aligner.reduced(mu)
            if cfg.mode == "minibatch":
                mu, pairs, labels, history, iters = yield from _minibatch(run, mu, rng)
            else:
                mu, pairs, labels, history, iters = yield from self._curriculum(run, mu)
            extras = {"initial_prototypes": run.items(init), "repairs": np.asarray(run.repairs, np.int64).reshape(-1, 3)}
            timing = {"fit_s": time.perf_counter() - start, "iterations": iters}
            return self._finished(cfg, run, mu, pairs, labels, history, timing, extras)
        finally:
            run.close()

    def _finished(self, cfg, run: AlignedRun, mu, pairs, labels, history, timing, extras=None) -> ClusteringResult:
        """The result of a Lloyd run (at full size when its warps were fitted on reduced images: ``full_size``)."""
        scale = run.aligner.work ** 2
        run, mu = full_size(run, mu, pairs, labels)
        return self.result(cfg, STState(mu.cpu().numpy()), prototypes=run.items(mu), history=[h * scale for h in history],
                           extras=extras or {}, timing=timing, **run.result_fields(pairs, labels))

    def _curriculum(self, run: AlignedRun, mu: torch.Tensor, pinned: torch.Tensor | None = None):
        """Lloyd iterations from centroids mu; AI K-means has one stage (see STKMeans)."""
        return (yield from aligned_lloyd(run, mu, pinned))

    def refine(self, stack: Stack, cfg, start: ClusteringResult, pinned: torch.Tensor, device: torch.device):
        """Lloyd iterations from an edited result's prototypes, the pinned items kept where the user put them."""
        t0 = time.perf_counter()
        self.validate(stack)
        mu = to_nchw(torch.from_numpy(np.asarray(start.prototypes, np.float32)).to(device))
        run = self._start(stack, cfg, None, device)
        try:   # the warm start's scratch is removed however the run ends (error, cancel)
            mu, pairs, labels, history, iters = yield from self._curriculum(run, run.aligner.reduced(mu), pinned.to(device))
            timing = {"fit_s": time.perf_counter() - t0, "iterations": iters}
            return self._finished(cfg, run, mu, pairs, labels, history, timing)
        finally:
            run.close()

    def sweep(self, stack, cfg, device, seed, landmarks=LANDMARK_GRID, lrs=LR_GRID):
        """Sec. 4.2 model selection: one run per (landmarks, learning rate), the lowest distortion kept.
        Returns (best result, table of every run: landmarks, lr, distortion, iterations, fit_s)."""
        runs = self.selection_runs(cfg, landmarks, lrs)
        best, results = yield from best_of([lambda sub=sub: self.run(stack, sub, device, seed) for _, sub in runs],
                                           lambda i, n: f"selection {i + 1}/{n}")
        rows = [{"landmarks": g, "lr": sub.lr, "distortion": r.final_loss,
                 "iterations": r.timing.get("iterations", 0), "fit_s": r.timing.get("fit_s", 0.0)}
                for (g, sub), r in zip(runs, results)]
        best.extras.update({f"selection_{key}": np.array([r[key] for r in rows]) for key in rows[0]})
        best.config = {**best.config, "select": True}
        return best, rows

    def align_new(self, result: ClusteringResult, stack: Stack, device: torch.device, batch_size: int | None = None):
        """Optimise the alignments of new images onto the fixed centroids: (run, centroids, alignments)."""
        check_images(stack, self.name)
        cfg = self.config_of(result)
        if batch_size is not None:
            cfg = dataclasses.replace(cfg, chunk=int(batch_size))
        mu = torch.from_numpy(np.asarray(result.state.centers, dtype=np.float32)).to(device)
        check_same_size(stack, int(np.prod(mu.shape[1:])))
        x = to_nchw(stack.tensor(device))   # a batch: predict's block of PREDICT_BLOCK items, or the inspector's one
        if tuple(x.shape[1:]) != tuple(mu.shape[1:]):
            raise InputError(f"The new images are {tuple(stack.item_shape)} but the centroids are {tuple(result.prototypes.shape[1:])}: give images of the same shape.")
        run = self._start(stack, cfg, x, device)
        if cfg.predict_candidates == 0:   # every centroid aligned in full by Adam: the exact path (the reference)
            pairs = run.aligner.zeros(stack.n, mu.shape[0])
            drain(run.align_all(mu, pairs, Schedule.of(cfg, steps=cfg.predict_steps)))
        else:
            run.aligner = self.aligner(cfg, run.aligner.full_size, device, lean=True)
            pairs = _screened(run, mu)
        pairs.losses *= run.aligner.work ** 2   # warps fitted on reduced images: their losses at the images' size
        return run.at_full_size(), mu, pairs

    def predict(self, result: ClusteringResult, stack: Stack, device: torch.device, batch_size: int | None = None) -> ClusteringResult:
        """Assign new images with the centroids fixed: only their alignments are optimised. The stack is read
        PREDICT_BLOCK images at a time (each image's alignments do not depend on the others) and each block's
        fields written into the per-item arrays (pictures only when the stack asks for them)."""
        start = time.perf_counter()
        out, pictures = Assignments(stack.n), stack.wants_pictures()
        for s, block in stack.blocks(PREDICT_BLOCK):
            run, _, pairs = self.align_new(result, block, device, batch_size)
            out.write(s, run.outputs(pairs, pairs.losses.argmin(1), pictures))
        timing = {"fit_s": time.perf_counter() - start}
        return self.predicted(result, timing=timing, aligned_kind="item-on-prototype", **out.result_fields())

    def align(self, result: ClusteringResult, stack: Stack, device: torch.device, index: int | None = None):
        """For the alignment inspector: one image warped onto every centroid, and its distance to each.

        For item ``index`` of the fitted stack the fit's own warps are replayed (no optimisation: the
        scores are the result's, so the inspector and the assignment agree) when the result kept them
        (``pair_theta``/``pair_nu``: kept with the per-item pictures, ``Stack.wants_pictures``); a new
        image, or a fitted one whose pair warps were not kept, is aligned from scratch as in ``predict``.
        """
        if index is not None and "pair_theta" in result.params:
            cfg = self.config_of(result)
            x = to_nchw(stack.tensor(device))   # the inspector's one item
            run = self._start(stack, cfg, x, device).at_full_size()
            nu = result.params.get("pair_nu")
            pairs = Alignments(torch.from_numpy(np.asarray(result.params["pair_theta"][index:index + 1])).to(device),
                               None if nu is None else torch.from_numpy(np.asarray(nu[index:index + 1])).to(device))
            with torch.no_grad():
                warped = run.aligner.warp_pairs(run.x.full[:1], pairs)[0]
            return run.items(warped), np.asarray(result.scores[index])
        run, _, pairs = self.align_new(result, stack, device)
        with torch.no_grad():
            warped = run.aligner.warp_pairs(run.x.full[:1], pairs.rows(slice(0, 1)))[0]
        return run.items(warped), pairs.losses[0].cpu().numpy()


class STKMeans(AIKMeans):
    name, title, config = "st-kmeans", "Spatial Transformer K-means (TPS)", STKMeansConfig
    auto_invariances = "deformable"

    def landmarks(self, cfg) -> int | None:
        """The TPS grid side for the deformable family; the others are affine maps only (no TPS stage)."""
        return cfg.landmarks if self.family(cfg) == "deformable" else None

    def aligner(self, cfg, size, device, lean: bool = False) -> Aligner:
        """Affine (+ TPS on the config's landmark grid) warps of the run's family, within its bounds."""
        return aligner_for(cfg, self.family(cfg), self.landmarks(cfg), size, device, lean)

    def _curriculum(self, run: AlignedRun, mu: torch.Tensor, pinned: torch.Tensor | None = None):
        """With ``affine_first`` and a TPS stage: Lloyd with affine warps alone until the labels settle (``tol``; or
        max_iter), then Lloyd with the TPS from those centroids, each pair starting from its affine map.
        History and iteration counts cover both stages."""
        if not (run.cfg.affine_first and run.aligner.landmarks):
            return (yield from aligned_lloyd(run, mu, pinned))
        affine = dataclasses.replace(run, aligner=super().aligner(run.cfg, run.aligner.full_size, run.aligner.device))
        ticker = lloyd_ticker(run, stages=2)
        mu, coarse, _, history, iters = yield from aligned_lloyd(affine, mu, pinned, ticker=ticker)
        pairs = run.warm_start()
        pairs.start_from(coarse)
        coarse.close()
        mu, pairs, labels, fine, more = yield from aligned_lloyd(run, mu, pinned, pairs, ticker, done=iters)
        return mu, pairs, labels, history + fine, iters + more

    def selection_runs(self, cfg, landmarks, lrs) -> list:
        """One model-selection run per (landmark grid side, learning rate), as in Sec. 4.2 (per rate only
        without the TPS stage)."""
        if self.landmarks(cfg) is None:
            return super().selection_runs(cfg, landmarks, lrs)
        return [(g, dataclasses.replace(cfg, lr=lr, select=False, landmarks=g, fit_align="adam"))
                for g in landmarks for lr in lrs]


ST_KMEANS = register(STKMeans())
AI_KMEANS = register(AIKMeans())
