"""The aligned Lloyd iteration of AI and ST K-means (Cosentino et al., Algo. 2), as public pieces: the E-step (every
(item, centroid) warp improved by the alignment engine, argmin assignment, warped sums per cluster), the M-step
(Eq. 4: the mean of the warped members), the repair move, and the loop that runs them until the labels settle.

ai-kmeans and st-kmeans fit with it; rigid-kmeans' ``refine`` runs it from its rigid poses. A run
(:class:`AlignedRun`) holds the config, the stack, the :class:`~ticlust.transforms.align.Aligner` and the images (read
from the stack batch by batch); its config is an AI/ST K-means config: ``k``, ``chunk``, ``start``, ``max_iter``,
``reseed`` and the Adam schedule's fields (``Schedule.of``). The per-pair warm start lives in a
:class:`~ticlust.core.scratch.RowScratch` (:class:`WarmStart`), so a large fit never holds its N×K warps in memory.
"""
from __future__ import annotations

import copy
import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from ..core.scratch import RowScratch, host_index
from ..core.stack import Stack, StackImages, from_nchw, to_nchw
from ..events import Forecast, Progress, Snapshot, drain, each_progress
from ..result import Assignments
from ..transforms import affine_matrix
from ..transforms.align import Aligner, Alignments, Pyramid, Schedule, Ticker, lower
from ..transforms.fast_fit import align_pairs, fit_schedule, warm_schedule
from ..transforms.rigid import SHIFT_FRACTION, rigid_search, shift_pixels
from .chunked import StoreSample
from .kmeans import BISECT_BLOCK, bisect, keep_pinned, own_and_runner_up

CPU_CHUNK = 512
#: Relative roundoff allowed the stored pair losses where the repair move bounds a split's profit by them (``_elsewhere``).
BOUND_SLACK = 1e-3
#: Lloyd stops once an iteration moves at most this fraction of the items (the config's ``tol``): on 2,000 MNIST digits
#: ST's fit moved < 1 % of them from its 8th iteration of each stage on, for another 13 + 11 iterations at an ACC
#: within ±0.005 (benchmarks/results/fit_speed.md); with 0 it runs until no item moves.
LLOYD_TOL = 0.005
PAIR_BYTES = 48   # bytes per pixel of one (image, centroid) alignment in flight: grids, warps, their gradients


def auto_chunk(stack: Stack, k: int, device: torch.device) -> int:
    """Images aligned at once: 512 on the CPU; on a GPU, the K·N alignments of a Lloyd iteration in as few
    launches as a quarter of the free memory allows (one, for MNIST-test on an 80 GB card)."""
    if device.type != "cuda":
        return CPU_CHUNK
    free, _ = torch.cuda.mem_get_info(device)
    per_image = k * int(np.prod(stack.item_shape)) * PAIR_BYTES
    return int(max(CPU_CHUNK, min(stack.n, free // 4 // max(per_image, 1))))


def chunks(n: int, size: int):
    return [slice(s, min(s + size, n)) for s in range(0, n, size)]


class WarmStart:
    """The fit's per-pair warm start: every (item, centroid) warp the next Lloyd iteration starts from
    (``theta`` N×K×6, ``nu`` N×K×ℓ×2) and their losses (N×K). The warps live in a :class:`RowScratch` (in memory
    while small, else on disk: N×K×ℓ×2 floats is 1.3 GB at a million items and K = 10), the losses in memory
    (they are the result's scores). It reads and writes by rows like :class:`Alignments` (``rows(s)``,
    ``pairs[s] = part``), so an E-step holds one chunk's pairs; the repair move's column reads and copies and an
    emptied cluster's reset go chunk by chunk. Made and closed by its run (``AlignedRun.warm_start``, ``AlignedRun.close``)."""

    def __init__(self, aligner: Aligner, n: int, k: int, chunk: int):
        fields = {"theta": (k, 6)}
        if aligner.landmarks:
            fields["nu"] = (k, aligner.n_landmarks, 2)
        self.scratch = RowScratch(n, fields)
        self.losses = torch.full((n, k), math.inf, device=aligner.device)
        self.n, self.device, self.block = n, aligner.device, chunk * 8

    def rows(self, idx) -> Alignments:
        """The pairs of items ``idx`` (a slice or item numbers) as an Alignments on the device."""
        at = host_index(idx)
        theta = torch.from_numpy(self.scratch.read("theta", at)).to(self.device)
        nu = torch.from_numpy(self.scratch.read("nu", at)).to(self.device) if "nu" in self.scratch.shapes else None
        return Alignments(theta, nu, self.losses[idx])

    def __setitem__(self, idx, part: Alignments) -> None:
        at = host_index(idx)
        self.scratch.write("theta", at, part.theta.detach().cpu().numpy())
        if part.nu is not None:
            self.scratch.write("nu", at, part.nu.detach().cpu().numpy())
        self.losses[idx] = part.losses

    def _gathered(self, pick) -> Alignments:
        """``pick(rows)`` (an Alignments of one pair per item) of every block of items, joined: N rows."""
        parts = [pick(self.rows(s), s) for s in chunks(self.n, self.block)]
        nu = None if parts[0].nu is None else torch.cat([p.nu for p in parts])
        return Alignments(torch.cat([p.theta for p in parts]), nu)

    def assigned(self, labels: torch.Tensor) -> Alignments:
        """Each item's warp onto its assigned centroid (N, ...): per item, as the result keeps it."""
        return self._gathered(lambda rows, s: rows.assigned(labels[s]))

    def column(self, j: int) -> Alignments:
        """Every item's warp onto centroid j (N, ...)."""
        return self._gathered(lambda rows, s: rows.column(j))

    def copy_column(self, to: int, source: int) -> None:
        """Every item's warp and loss onto centroid ``source`` copied onto centroid ``to`` (the repair move)."""
        for s in chunks(self.n, self.block):
            rows = self.rows(s)
            rows.copy_column(to, source)
            self[s] = rows

    def reset(self, centroids) -> None:
        """Identity warps onto the given centroids (their losses kept), as :meth:`Alignments.reset`."""
        for s in chunks(self.n, self.block):
            rows = self.rows(s)
            rows.reset(centroids)
            self[s] = rows

    def start_from(self, coarse: "WarmStart") -> None:
        """Every pair's affine map taken from an affine-only warm start (ST's first stage), TPS at identity."""
        for s in chunks(self.n, self.block):
            self.scratch.write("theta", s, coarse.scratch.read("theta", s))

    def close(self) -> None:
        self.scratch.close()


def _warp_assigned(aligner: Aligner, x: torch.Tensor, own: Alignments, chunk: int) -> torch.Tensor:
    """Every item warped by its own warp (N, ...) onto its assigned centroid, (N, C, H, W)."""
    out = []
    with torch.no_grad():
        for s in chunks(x.shape[0], chunk * 8):
            out.append(aligner.warp_pairs(x[s], own.rows(s).as_pairs())[:, 0])
    return torch.cat(out)


def centroid_update(aligner: Aligner, x: torch.Tensor, mu: torch.Tensor, pairs: WarmStart, labels: torch.Tensor,
                     chunk: int) -> torch.Tensor:
    """Eq. 4: the mean of the warped members, summed chunk by chunk (the warped items are never held
    all at once). An emptied cluster restarts on the worst-fitted item."""
    own = pairs.assigned(labels)
    sums = torch.zeros_like(mu)
    with torch.no_grad():
        for s in chunks(x.shape[0], chunk * 8):
            sums.index_add_(0, labels[s], aligner.warp_pairs(x[s], own.rows(s).as_pairs())[:, 0])
    return _means(sums, torch.bincount(labels, minlength=mu.shape[0]), pairs, labels, x)


def _means(sums: torch.Tensor, counts: torch.Tensor, pairs: WarmStart, labels: torch.Tensor, x) -> torch.Tensor:
    """Eq. 4 from the members' warped sums (K, C, H, W) and counts (K,); an emptied cluster restarts on the
    worst-fitted item (its pairs' warps reset to identity)."""
    new = sums / counts.clamp_min(1).to(sums.dtype).view(-1, 1, 1, 1)
    empty = torch.nonzero(counts == 0).flatten()
    if len(empty):
        worst = torch.argsort(pairs.losses.gather(1, labels[:, None])[:, 0], descending=True)[: len(empty)]
        new[empty] = x[worst]
        pairs.reset(empty)
    return new


@dataclass
class _ChunkStep:
    """One chunk's Lloyd E-step: its alignments, labels, and its members' warped sums and counts per cluster."""

    pairs: Alignments
    labels: torch.Tensor      # (n,)
    sums: torch.Tensor        # (K, C, H, W)
    counts: torch.Tensor      # (K,)


def _e_step(aligner: Aligner, x: Pyramid, mu: Pyramid, start: Alignments, schedule: Schedule,
            pinned: torch.Tensor | None = None):
    """Algo. 2's E-step on one chunk of items ``x`` (generator): every (item, centroid) alignment improved
    from ``start``, each item assigned to its cheapest centroid (``pinned`` ≥ 0 kept), and the members'
    warped images summed per cluster. A pure function of its arguments, run chunk by chunk over the stack
    (``aligned_lloyd``); the M-step adds the chunks' sums in chunk order. Returns a :class:`_ChunkStep`."""
    pairs = yield from align_pairs(aligner, x, mu, start, schedule)
    labels = keep_pinned(pairs.losses.argmin(1), pinned)
    with torch.no_grad():
        warped = aligner.warp_pairs(x.full, pairs.assigned(labels).as_pairs())[:, 0]
    sums = torch.zeros_like(mu.full).index_add_(0, labels, warped)
    return _ChunkStep(pairs, labels, sums, torch.bincount(labels, minlength=mu.full.shape[0]))


def starting(start: str, aligner: Aligner, x: Pyramid, mu: Pyramid, previous: Alignments) -> Alignments:
    """The alignments a chunk of items ``x`` starts from against centroids ``mu``: ``previous`` (the identity
    on a first pass, else the last iteration's), or with ``start`` rigid / rigid+flip, :func:`rigid_start`."""
    if start == "identity":
        return previous
    return rigid_start(aligner, x, mu, previous, flip=start == "rigid+flip")


@torch.no_grad()
def rigid_start(aligner: Aligner, x: Pyramid, mu: Pyramid, previous: Alignments, flip: bool) -> Alignments:
    """Per (item, centroid) pair, the better at these centroids of its ``previous`` warp and its best global rigid
    pose (every angle of ``transforms.rigid``'s grid [and the mirror] × every shift within SHIFT_FRACTION, no TPS
    displacement): the gradient alignment then refines a pose instead of searching for it from the identity,
    whose nearest local minimum misses a pattern turned 120°. With losses: never worse than ``previous``."""
    match = rigid_search(x.full, mu.full, flip=flip, max_shift=shift_pixels(SHIFT_FRACTION, tuple(x.full.shape[-2:])))
    pose = Alignments(match.theta, None if previous.nu is None else torch.zeros_like(previous.nu))
    pose.losses = aligner.pair_losses(x.full, mu.full, pose)
    before = Alignments(previous.theta, previous.nu, aligner.pair_losses(x.full, mu.full, previous))
    return lower(pose, before)


def _chunk_e_step(rows: torch.Tensor, aligner: Aligner, mu: Pyramid, schedule: Schedule, shape: tuple,
                  start_option: str, *, start: Alignments, pinned: torch.Tensor | None) -> _ChunkStep:
    """:func:`_e_step` as one task on a chunk of a store's fit sample (``kernels.chunked.StoreSample.imap_tasks``,
    here or on a cluster's worker): the chunk's flat rows (n, D), read by the task, made the images
    (n, C, H, W) the in-process loop reads; its warm-start alignments in and out, the config's ``start``
    (:func:`starting`) applied to them here, beside the images. The schedule has no ticker: the task emits no
    events, the driver reports each finished chunk (``_e_steps``)."""
    x = aligner.pyramid(to_nchw(rows.reshape(len(rows), *shape)))
    return drain(_e_step(aligner, x, mu, starting(start_option, aligner, x, mu, start), schedule, pinned))


def _aligner_on(aligner: Aligner, device) -> Aligner:
    """``aligner`` with its tensors on ``device`` (a cluster's workers compute on their CPU); itself if there."""
    device = torch.device(device)
    if torch.device(aligner.device) == device:
        return aligner
    moved = copy.copy(aligner)
    for name, value in vars(aligner).items():
        if isinstance(value, torch.Tensor):
            setattr(moved, name, value.to(device))
    moved.device, moved._maps = device, {}
    return moved


def relabelled(events, stage: str):
    """``events`` passed through (generator; returns their return value), every Progress named ``stage``: the
    alignment engine's own names (its sub-stages) would make a front end's pace estimate start over at each."""
    return (yield from each_progress(events, lambda event: setattr(event, "stage", stage)))


def lloyd_stage(run: AlignedRun, iteration: int, aligned: int) -> str:
    """The name of a Lloyd fit's progress: the iteration, the warps it aligns with and the chunks aligned so far.
    One text up to its numbers for every event of a Lloyd run, so a front end's ETA (the pace of a stage whose
    name changes only in numbers) runs from the run's first chunk; ST's TPS stage is another stage."""
    aligner = run.aligner
    kind = "affine + TPS" if aligner.landmarks else aligner.linear
    return (f"Lloyd iteration {iteration} ({kind} warps, {run.cfg.fit_align}): "
            f"{aligned}/{len(chunks(run.stack.n, run.cfg.chunk))} chunks aligned")


def _e_steps(run: AlignedRun, mu: Pyramid, pairs: Alignments, schedule: Schedule, pinned: torch.Tensor | None,
             iteration: int = 1):
    """:func:`_e_step` on every chunk of the run's items (generator), each chunk's alignments written back into
    ``pairs`` as it is done; returns (labels (N,), warped sums (K, C, H, W) and counts (K,) per cluster, added
    in chunk order: the M-step's reduce). Here chunk by chunk, a Progress per Adam step; or, when the stack is
    a store's fit sample with a backend (``kernels.chunked.StoreSample``: ``fit_store(..., workers=, scheduler=,
    client=)``), one :func:`_chunk_e_step` task per chunk, its warm-start alignments shipped with it, a
    Progress per finished task. Both give the same labels and sums."""
    slices = chunks(run.stack.n, run.cfg.chunk)
    own = [None if pinned is None else pinned[s] for s in slices]
    steps = [None] * len(slices)
    if not isinstance(run.stack, StoreSample):
        for i, s in enumerate(slices):
            x = run.x.rows(s)
            start = starting(run.cfg.start, run.aligner, x, mu, pairs.rows(s))
            steps[i] = yield from relabelled(_e_step(run.aligner, x, mu, start, schedule, own[i]),
                                             lloyd_stage(run, iteration, i))
            pairs[s], steps[i].pairs = steps[i].pairs, None
    else:
        ticker, ticks = schedule.ticker, (schedule.affine_steps if schedule.affine_steps > 0 else 0) + schedule.steps
        args = (_aligner_on(run.aligner, "cpu"), mu, dataclasses.replace(schedule, ticker=None),
                tuple(run.stack.item_shape), run.cfg.start)
        tasks = [dict(start=pairs.rows(s), pinned=p) for s, p in zip(slices, own)]
        finished = run.stack.imap_tasks(_chunk_e_step, run.cfg.chunk, args, tasks, run.aligner.device)
        for done, (i, step) in enumerate(finished, 1):
            loss = float(step.pairs.losses.min(1).values.mean())
            pairs[slices[i]], step.pairs, steps[i] = step.pairs, None, step
            ticker.step += ticks - 1
            yield ticker.tick(lloyd_stage(run, iteration, done), loss)
    sums, counts = steps[0].sums, steps[0].counts
    for step in steps[1:]:
        sums, counts = sums + step.sums, counts + step.counts
    return torch.cat([step.labels for step in steps]), sums, counts


def _members_warped(aligner: Aligner, x: torch.Tensor, own: Alignments, labels: torch.Tensor, c: int, chunk: int) -> RowScratch:
    """The members of cluster c warped by their own warps, one flat row each (n_c, P), written into a scratch
    (on disk when large) chunk by chunk: one cluster's, and never held whole; only the members are warped."""
    members = labels == c
    warped, at = None, 0
    with torch.no_grad():
        for s in chunks(x.shape[0], chunk * 8):
            mine = members[s]
            if bool(mine.any()):
                rows = aligner.warp_pairs(x[s][mine], own.rows(s).rows(mine).as_pairs())[:, 0].flatten(1)
                if warped is None:
                    warped = RowScratch(int(members.sum()), {"warped": (rows.shape[1],)})
                warped.write("warped", slice(at, at + len(rows)), rows.cpu().numpy())
                at += len(rows)
    return warped


def _halves(aligner: Aligner, x: torch.Tensor, own: Alignments, labels: torch.Tensor, k: int, chunk: int):
    """Every cluster bisected on its warped members (n_c, P; one cluster at a time, read back block by block from
    a scratch, so a large fit sample's cluster is never in memory whole): SSE₁ and the split gain
    SSE₁ − SSE₂ (K,) each, and per cluster with two or more members its two half means (2, P) and the
    members of the second half."""
    sse1, gain, halves = torch.zeros(k, dtype=torch.float64), torch.zeros(k, dtype=torch.float64), {}
    for c in range(k):
        members = torch.nonzero(labels == c).flatten()
        if len(members) >= 2:
            with _members_warped(aligner, x, own, labels, c, chunk) as warped:
                one, two, means, side = bisect(lambda: (torch.from_numpy(warped.read("warped", b)).to(labels.device)
                                                        for b in chunks(warped.n, BISECT_BLOCK)))
            sse1[c], gain[c], halves[c] = one, one - two, (means, members[side])
    return sse1, gain, halves


def _elsewhere(aligner: Aligner, x: torch.Tensor, pairs: Alignments | WarmStart, labels: torch.Tensor, j: int, means, chunk: int,
               centre: torch.Tensor | None = None):
    """Each item's cheapest place other than its own cluster while cluster j splits: another cluster (its
    stored warp) or, on its warp onto j, one of j's half means. Returns costs (N,) and places (N,): a
    cluster, j for the first half, -1 for the second. With ``centre`` (centroid j, where ``pairs.losses`` were
    priced) nothing is warped: a half mean's cost is bounded below by the triangle inequality,
    ||w − m|| ≥ ||w − μ_j|| − ||μ_j − m||, so the costs are lower bounds (the places are not computed: None)."""
    _, cost, place = own_and_runner_up(pairs.losses.index_fill(1, torch.tensor([j], device=labels.device), math.inf), labels)
    if means is not None and centre is not None:
        apart = torch.linalg.vector_norm(means - centre.reshape(1, -1).to(means), dim=1)   # (2,)
        near = pairs.losses[:, j].clamp_min(0).sqrt() * (1 - BOUND_SLACK)   # roundoff of the stored losses
        return torch.minimum(cost, ((near[:, None] - apart[None]).clamp_min(0) ** 2).min(1).values), None
    if means is not None:
        onto_j = pairs.column(j)
        values, indices = [], []
        with torch.no_grad():
            for s in chunks(x.shape[0], chunk * 8):   # chunk by chunk: the warped items are never held all at once
                w = aligner.warp_pairs(x[s], onto_j.rows(s).as_pairs())[:, 0].flatten(1)
                half = ((w[:, None] - means[None]) ** 2).sum(-1).min(1)
                values.append(half.values)
                indices.append(half.indices)
        values, indices = torch.cat(values), torch.cat(indices)
        better = values < cost
        cost = torch.where(better, values, cost)
        place = torch.where(better, torch.where(indices == 0, j, -1), place)
    return cost, place


def reseed(aligner: Aligner, x: torch.Tensor, pairs: Alignments | WarmStart, labels: torch.Tensor, chunk: int,
           mu: torch.Tensor | None = None) -> tuple[int, int] | None:
    """Repair move for two centroids on one group and two groups under one (ours; the paper has none):
    drop centroid a and split cluster j in two (2-means of its members warped onto it, ``_halves``), a
    taking the second half with j's warps; a's members go to their cheapest other place (``_elsewhere``).
    Priced on the warps in hand, the best (a, j) is made (labels and ``pairs`` in place) only when j's
    split gain beats a's drop cost (Σ cheapest other place − SSE₁(a)); since SSE₁ ≤ the assigned costs,
    the distortion after the centroid update is then below the current one (monotone). Returns (a, j) or None.
    ``mu``: the centroids ``pairs.losses`` were priced at; given, a split j whose profit is bounded by the floor for
    every a (``_elsewhere``'s bounds, no warping) is not priced further: the same move, at a fraction of the warps."""
    k, losses = pairs.losses.shape[1], pairs.losses
    if k < 2:
        return None
    floor = 1e-6 * float(losses.gather(1, labels[:, None]).sum())
    sse1, gain, halves = _halves(aligner, x, pairs.assigned(labels), labels, k, chunk)
    drop, places = torch.full((k, k), math.inf, dtype=torch.float64), {}

    def drop_costs(cost, j):   # (K,): Σ over each cluster a's members of their cheapest other place, − SSE₁(a)
        cost = torch.where(labels == j, torch.zeros_like(cost), cost).double().cpu()
        return torch.zeros(k, dtype=torch.float64).index_add_(0, labels.cpu(), cost) - sse1
    for j in range(k):
        means = halves.get(j, (None,))[0]
        if mu is not None and means is not None:
            drop[:, j] = drop_costs(_elsewhere(aligner, x, pairs, labels, j, means, chunk, centre=mu[j])[0], j)
            if bool(((gain[j] - drop[:, j]).index_fill(0, torch.tensor([j]), -math.inf) <= floor).all()):
                continue                    # no a pays for this split even at the bound: never the move
        cost, places[j] = _elsewhere(aligner, x, pairs, labels, j, means, chunk)
        drop[:, j] = drop_costs(cost, j)
    profit = gain[None, :] - drop
    profit.fill_diagonal_(-math.inf)
    a, j = divmod(int(profit.argmax()), k)
    if not float(profit[a, j]) > floor:
        return None
    dropped = labels == a
    labels[dropped] = torch.where(places[j] < 0, a, places[j])[dropped]
    labels[halves[j][1]] = a
    pairs.copy_column(a, j)
    return a, j


def aligner_for(cfg, family: str, landmarks: int | None, size: tuple[int, int], device, lean: bool = False) -> Aligner:
    """The warps of an AI/ST K-means run: affine maps of ``family`` within the config's bounds, and with ``landmarks``
    a thin-plate spline on that g×g grid whose displacements stay within ``max_displacement`` (``lean``: see Aligner),
    fitted on images reduced by :func:`work_factor`."""
    bound = {"max_displacement": cfg.max_displacement} if landmarks else {}
    return Aligner(size, landmarks, device, lean=lean, work=work_factor(cfg, size), **bound, **_warp_options(cfg, family))


def work_factor(cfg, size: tuple[int, int]) -> int:
    """The whole factor the config's ``work_side`` reduces crops of ``size`` by for the fit (1: none): the largest that
    keeps the smaller side at least ``work_side`` (64 px → 2 at 32, 128 px → 4; 0 or a config without it: 1)."""
    side = getattr(cfg, "work_side", 0)
    return max(1, min(size) // side) if side else 1


def full_size(run: AlignedRun, mu: torch.Tensor, pairs: WarmStart | Alignments, labels: torch.Tensor):
    """A run whose warps were fitted on reduced images (``Aligner.work``) made whole: the centroids its members' own
    warps make of the images at their own size (Eq. 4 once more), and every pair's loss scaled by work² to that size's
    pixel count (the labels stay the fit's). Returns (the run at full size, the centroids); unchanged when the warps
    were fitted at full size."""
    work = run.aligner.work
    if work == 1:
        return run, mu
    full = run.at_full_size()
    zeros = torch.zeros(mu.shape[0], mu.shape[1], *full.aligner.size, device=mu.device, dtype=mu.dtype)
    mu = centroid_update(full.aligner, full.x.full, zeros, pairs, labels, run.cfg.chunk)
    pairs.losses *= work ** 2
    return full, mu


def _warp_options(cfg, family: str) -> dict:
    """The Aligner options both variants take from their config and invariance family: low-pass, padding,
    the affine maps' family and bounds."""
    return dict(lowpass=cfg.lowpass, padding=cfg.padding, max_scale=cfg.max_scale, max_shift=cfg.max_shift,
                linear="affine" if family == "deformable" else family)

#: Items reduced at once when a fit's reduced images are held (``StackPyramid``).
REDUCE_BLOCK = 1024
#: A fit on images reduced for the warps (``Aligner.work`` > 1) holds them and their low-passed copies when they take at
#: most this many bytes: reduced and low-passed once, not on every read (a fifth of an ST K-means fit of 1,000 crops of
#: 64×64×2 went to averaging the same images down again); a larger stack is read and reduced batch by batch.
HELD_BYTES = 256 * 2 ** 20


@dataclass
class StackPyramid:
    """A Pyramid whose rows are read from the stack and low-passed when asked for (batch by batch, on every
    Lloyd iteration) instead of holding every image and its low-passed copy for the whole fit. ``full`` reads them at
    the size the warps are fitted at (``Aligner.reduced``), ``images`` at their own. Reduced images that fit in
    ``HELD_BYTES`` are made once and held (the same values: each item is reduced and low-passed alone)."""

    images: StackImages
    aligner: Aligner
    held: Pyramid | None = dataclasses.field(default=None, init=False, repr=False)

    def __post_init__(self):
        n, c = self.images.shape[:2]
        (h, w), (lh, lw) = self.aligner.size, self.aligner.low_size
        if self.aligner.work > 1 and n * c * (h * w + lh * lw) * 4 <= HELD_BYTES:
            parts = [self.aligner.pyramid(self.images[s:s + REDUCE_BLOCK]) for s in range(0, n, REDUCE_BLOCK)]
            self.held = Pyramid(torch.cat([p.full for p in parts]), torch.cat([p.low for p in parts]))

    @property
    def full(self):
        if self.held is not None:
            return self.held.full
        return self.images if self.aligner.work == 1 else _Reduced(self.images, self.aligner)

    def rows(self, idx) -> Pyramid:
        return self.held.rows(idx) if self.held is not None else self.aligner.pyramid(self.images[idx])


class _Reduced:
    """Images read from ``images`` (indexed like a tensor) at the aligner's working size when indexed."""

    def __init__(self, images, aligner: Aligner):
        self.images, self.aligner = images, aligner
        self.shape = (images.shape[0], images.shape[1], *aligner.size)

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, index) -> torch.Tensor:
        return self.aligner.reduced(self.images[index])


@dataclass
class AlignedRun:
    """What one fit or prediction works with: its config, the stack, the aligner and the images (with low-pass):
    a fit reads them from the stack batch by batch (``StackPyramid``) and owns its warm starts' scratch
    (``warm_start``), which ``close`` removes."""

    cfg: Any   # an AI/ST K-means config (see the module's doc)
    stack: Stack
    aligner: Aligner
    x: Pyramid | StackPyramid
    images: Any = None   # the images at their own size, where the aligner fits the warps on smaller ones (in hand)
    repairs: list = dataclasses.field(default_factory=list)   # (Lloyd iteration, dropped, split) of each move made
    scratches: list = dataclasses.field(default_factory=list)   # shared with a stage's copy (dataclasses.replace)

    @classmethod
    def of(cls, stack: Stack, cfg, aligner: Aligner, x: torch.Tensor | None = None) -> "AlignedRun":
        """The run on images ``x`` (N, C, H, W) in hand, or (None) on the stack's, read batch by batch; a config
        without ``chunk`` gets :func:`auto_chunk`'s."""
        if not cfg.chunk:
            cfg = dataclasses.replace(cfg, chunk=auto_chunk(stack, cfg.k, aligner.device))
        if x is None:
            return cls(cfg, stack, aligner, StackPyramid(StackImages(stack, aligner.device), aligner))
        return cls(cfg, stack, aligner, aligner.pyramid(x), x)

    def at_full_size(self) -> "AlignedRun":
        """The run with its warps applied at the images' own size (``Aligner.at_full_size``): what makes a fit's
        prototypes and a result's pictures when the warps were fitted on reduced images. Itself when they were not."""
        if self.aligner.work == 1:
            return self
        full = self.aligner.at_full_size()
        x = StackPyramid(self.x.images, full) if isinstance(self.x, StackPyramid) else Pyramid(self.images, self.images)
        return dataclasses.replace(self, aligner=full, x=x)

    def keep(self, scratch):
        """``scratch`` (anything with ``close``: a warm start, mini-batch moments), closed with the run."""
        self.scratches.append(scratch)
        return scratch

    def warm_start(self) -> WarmStart:
        """Identity warps of every item onto every centroid, losses unknown: the start of a fit's Lloyd loop."""
        return self.keep(WarmStart(self.aligner, self.stack.n, self.cfg.k, self.cfg.chunk))

    def close(self) -> None:
        """Remove every scratch of the run (the fit calls it in a ``finally``: on error and cancel too)."""
        for scratch in self.scratches:
            scratch.close()
        self.scratches.clear()

    def items(self, images: torch.Tensor) -> np.ndarray:
        """(B, C, H, W) images back in the stack's layout, (B, H, W) or (B, H, W, C), at its size (centroids of warps
        fitted on reduced images, shown while the fit runs, enlarged bilinearly)."""
        size = tuple(self.stack.item_shape[:2])
        if tuple(images.shape[-2:]) != size:
            images = F.interpolate(images, size=size, mode="bilinear", align_corners=False)
        return from_nchw(images, self.stack.channels > 1).cpu().numpy()

    def align_all(self, mu: torch.Tensor, pairs: Alignments, schedule: Schedule):
        """All N×K alignments against centroids mu, chunk by chunk, improved in ``pairs`` (generator)."""
        mu = self.aligner.pyramid(mu)
        for s in chunks(self.stack.n, self.cfg.chunk):
            x = self.x.rows(s)
            pairs[s] = yield from self.aligner.align(x, mu, starting(self.cfg.start, self.aligner, x, mu, pairs.rows(s)), schedule)

    def outputs(self, pairs: Alignments, labels: torch.Tensor, pictures: bool, items: slice = slice(None)) -> dict:
        """The per-item fields of these items (an ``Assignments.write``): labels, scores and each item's own
        warp parameters; with ``pictures`` also the aligned items, display grids and every (item, centroid)
        warp (``pair_theta``/``pair_nu``: the inspector replays them for fitted items). ``items``: which of the
        run's images ``pairs`` and ``labels`` are (default all)."""
        own = pairs.assigned(labels)
        fields = {"labels": labels, "scores": pairs.losses, "params/affine": affine_matrix(own.theta)}
        if own.nu is not None:
            fields["params/displacements"] = own.nu
            fields["params/landmarks"] = self.aligner.target_landmarks(own)
        if pictures:
            fields["aligned"] = self.items(_warp_assigned(self.aligner, self.x.full[items], own, self.cfg.chunk))
            fields["grids"] = self.aligner.display_grids(own)
            fields["params/pair_theta"] = pairs.theta
            if own.nu is not None:
                fields["params/pair_nu"] = pairs.nu
        return fields

    def result_fields(self, pairs: WarmStart, labels: torch.Tensor) -> dict:
        """The fit's per-item result fields (every item of the run's stack), written block by block: the per-pair
        warps are read a block at a time and kept for every item only with the pictures."""
        out, pictures = Assignments(self.stack.n), self.stack.wants_pictures()
        for s in chunks(self.stack.n, self.cfg.chunk * 8):
            out.write(s.start, self.outputs(pairs.rows(s), labels[s], pictures, s))
        return dict(aligned_kind="item-on-prototype", **out.result_fields())


def settled(moved: int, n: int, tol: float) -> bool:
    """Whether a Lloyd iteration that moved ``moved`` of ``n`` items to another cluster moved at most the fraction
    ``tol`` of them (none with 0)."""
    return moved <= math.floor(tol * n)


def lloyd_ticker(run: AlignedRun, stages: int = 1) -> Ticker:
    """Counts the Adam steps of ``stages`` Lloyd runs of at most max_iter iterations each."""
    cfg = run.cfg
    return Ticker(stages * cfg.max_iter * len(chunks(run.stack.n, cfg.chunk)) * (cfg.affine_steps + cfg.steps))


def aligned_lloyd(run: AlignedRun, mu: torch.Tensor, pinned: torch.Tensor | None = None, pairs: WarmStart | None = None,
           ticker: Ticker | None = None, done: int = 0):
    """Algo. 2: the E-step (alignment of every pair, argmin assignment, warped sums per cluster: ``_e_step``)
    chunk by chunk, then Eq. 4 centroids, until an iteration moves at most the config's ``tol`` of the items
    (none with 0; a config without ``tol``: none) and makes no repair move, or ``max_iter``.
    ``pinned`` (N,): clusters the user fixed (-1: free); with any, the repair move (``reseed``) is off.
    ``pairs``: the alignments to start from (default identity); ``done``: Lloyd iterations of an earlier stage
    (progress and the repairs log count on from it). Returns (centroids, alignments, labels,
    distortion history, iterations)."""
    cfg, n = run.cfg, run.stack.n
    ticker = lloyd_ticker(run) if ticker is None else ticker
    per_iteration = lloyd_ticker(run).total // cfg.max_iter
    start, later = ticker.step, ticker.total - ticker.step - cfg.max_iter * per_iteration   # later: ST's TPS stage
    tol = getattr(cfg, "tol", 0.0)
    forecast = Forecast(cfg.max_iter, settle=math.floor(tol * n))   # the total: the iterations the labels' changes say are left
    first = fit_schedule(cfg, ticker)
    warm = warm_schedule(first)   # from the second iteration on, every pair starts from its last warp
    pairs = run.warm_start() if pairs is None else pairs
    history, prev = [], None
    yield Progress(ticker.step, ticker.total, float("nan"), lloyd_stage(run, done + 1, 0))   # the pace's start
    for it in range(1, cfg.max_iter + 1):
        labels, sums, counts = yield from _e_steps(run, run.aligner.pyramid(mu), pairs, first if it == 1 else warm,
                                                   pinned, done + it)
        history.append(float(pairs.losses.gather(1, labels[:, None]).sum()) / n)
        moved = None if prev is None else int((prev != labels).sum())
        expected = forecast.total(moved)
        ticker.total = max(ticker.step + 1, start + expected * per_iteration + later)
        yield Progress(ticker.step, ticker.total, history[-1], lloyd_stage(run, done + it, len(chunks(n, cfg.chunk))))
        if it == cfg.max_iter:
            break
        move = reseed(run.aligner, run.x.full, pairs, labels, cfg.chunk, mu) if cfg.reseed and pinned is None else None
        if move is not None:            # labels moved: the members' warped sums are taken again
            run.repairs.append((done + it, *move))
        if moved is not None and move is None and settled(moved, n, tol):
            break
        mu = _means(sums, counts, pairs, labels, run.x.full) if move is None else \
            centroid_update(run.aligner, run.x.full, mu, pairs, labels, cfg.chunk)
        prev = labels
        yield Snapshot(run.items(mu))
    ticker.total = ticker.step + later            # this run's unused iterations are not still to come
    return mu, pairs, labels, history, it
