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

The alignment engine (``Aligner``, the per-pair Adam, the low-pass pyramid) is ``ticlust.transforms.align``;
this file holds the method: its config, the Lloyd and mini-batch loops, the repair move and predict.
"""
from __future__ import annotations

import copy
import dataclasses
import math
import time
from dataclasses import dataclass

import numpy as np
import torch

from ..errors import InputError
from ..core.stack import Stack, StackImages, from_nchw, to_nchw
from ..core.validation import check_same_size
from ..result import Assignments, ClusteringResult, FittedState
from ..core.scratch import RowScratch
from ..transforms import affine_matrix
from ..transforms.align import AdamState, Aligner, Alignments, Moments, Pyramid, Schedule, Ticker
from ..transforms.fast_fit import align_pairs, fit_schedule
from ..transforms.rigid import SHIFT_FRACTION, rigid_search, shift_pixels
from ..events import Progress, Snapshot, drain
from ..kernels import BISECT_BLOCK, Rows, bisect, keep_pinned, kmeans_plus_plus, own_and_runner_up
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
    max_iter: int = param(20, "Most Lloyd iterations (stops earlier once no assignment changes)", low=1, essential=True)
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


@dataclass
class STKMeansConfig(AIKMeansConfig):
    invariances: str = invariances_param("deformable (affine + thin-plate spline)")
    landmarks: int = param(4, "Side g of the g×g grid of TPS landmarks (ℓ = g², the paper sweeps 3 … 8)", low=3, high=8, essential=True)
    # ST's TPS keeps shrinking in check better than a bare affine map: a looser scale bound measured
    # better on both MNIST sets (docs/st_kmeans.md), while AI K-means keeps 1.5
    max_scale: float = param(2.0, "Bound on the affine warp: its scale factors stay within [1/max_scale, max_scale]", low=1.0)
    max_displacement: float = param(0.5, "Bound on each landmark displacement, as a fraction of the landmark spacing", low=0.0)
    affine_first: bool = param(True, "Deformable Lloyd runs: cluster with affine warps alone until no label changes, then "
                               "add the thin-plate spline (coarse to fine, as DTI's curriculum; stops a TPS bending "
                               "members of two groups onto one blended centroid)")
    # the affine screen ranks ST's centroids less well than AI's (the TPS reorders close ones): on MNIST (2,000 held
    # back) the Gauss-Newton path with 4 candidates lost 0.0125 ACC against the exact path, 5 keep it (0.888 both)
    predict_candidates: int = param(5, "Predict: centroids per new image aligned in full, the closest after a short "
                                    "alignment to every centroid; 0: every centroid, predict_steps per stage from the "
                                    "identity (the exact, slow path)", low=0)


# ---- shared pieces of the training loop ----------------------------------------------------------
CPU_CHUNK = 512
PAIR_BYTES = 48   # bytes per pixel of one (image, centroid) alignment in flight: grids, warps, their gradients


def auto_chunk(stack: Stack, k: int, device: torch.device) -> int:
    """Images aligned at once: 512 on the CPU; on a GPU, the K·N alignments of a Lloyd iteration in as few
    launches as a quarter of the free memory allows (one, for MNIST-test on an 80 GB card)."""
    if device.type != "cuda":
        return CPU_CHUNK
    free, _ = torch.cuda.mem_get_info(device)
    per_image = k * int(np.prod(stack.item_shape)) * PAIR_BYTES
    return int(max(CPU_CHUNK, min(stack.n, free // 4 // max(per_image, 1))))


PREDICT_BLOCK = 4096   # images read from a (lazy) stack at once when assigning new images
#: Predict's fast path (``_screened``): Levenberg-Marquardt iterations (``Aligner.gauss_newton``) of its stages,
#: PREDICT_ITERATIONS[has a TPS stage] = (screen: every pair's affine map at low resolution, the candidates' affine map
#: at full resolution, the candidates' TPS displacements at full resolution), chosen on MNIST (2,000 held back,
#: benchmarks/results/predict_rates.md): ai-kmeans without its full-resolution stage lost 0.03 ACC, with 2 iterations
#: it is within 0.004 of the exact path; ST's TPS goes on from the screened affine map (a full-resolution affine stage
#: before it lost 0.01: 0.8615 vs 0.8710 with 4 candidates and 3 TPS iterations).
PREDICT_ITERATIONS = {False: (2, 2, 0), True: (3, 0, 5)}
#: The TPS stage's starting Levenberg-Marquardt damping: its least-squares optimum bends an image onto wrong centroids
#: too (damping 0.01: ACC 0.83 vs 0.888 exact on MNIST), damped steps bend it about as far as the exact path's Adam.
TPS_DAMPING = 1.0


def _chunks(n: int, size: int):
    return [slice(s, min(s + size, n)) for s in range(0, n, size)]


class _WarmStart:
    """The fit's per-pair warm start: every (item, centroid) warp the next Lloyd iteration starts from
    (``theta`` N×K×6, ``nu`` N×K×ℓ×2) and their losses (N×K). The warps live in a :class:`RowScratch` (in memory
    while small, else on disk: N×K×ℓ×2 floats is 1.3 GB at a million items and K = 10), the losses in memory
    (they are the result's scores). It reads and writes by rows like :class:`Alignments` (``rows(s)``,
    ``pairs[s] = part``), so an E-step holds one chunk's pairs; the repair move's column reads and copies and an
    emptied cluster's reset go chunk by chunk. Made and closed by its run (``_Run.warm_start``, ``_Run.close``)."""

    def __init__(self, aligner: Aligner, n: int, k: int, chunk: int):
        fields = {"theta": (k, 6)}
        if aligner.landmarks:
            fields["nu"] = (k, aligner.n_landmarks, 2)
        self.scratch = RowScratch(n, fields)
        self.losses = torch.full((n, k), math.inf, device=aligner.device)
        self.n, self.device, self.block = n, aligner.device, chunk * 8

    def rows(self, idx) -> Alignments:
        """The pairs of items ``idx`` (a slice or item numbers) as an Alignments on the device."""
        at = _host_index(idx)
        theta = torch.from_numpy(self.scratch.read("theta", at)).to(self.device)
        nu = torch.from_numpy(self.scratch.read("nu", at)).to(self.device) if "nu" in self.scratch.shapes else None
        return Alignments(theta, nu, self.losses[idx])

    def __setitem__(self, idx, part: Alignments) -> None:
        at = _host_index(idx)
        self.scratch.write("theta", at, part.theta.detach().cpu().numpy())
        if part.nu is not None:
            self.scratch.write("nu", at, part.nu.detach().cpu().numpy())
        self.losses[idx] = part.losses

    def _gathered(self, pick) -> Alignments:
        """``pick(rows)`` (an Alignments of one pair per item) of every block of items, joined: N rows."""
        parts = [pick(self.rows(s), s) for s in _chunks(self.n, self.block)]
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
        for s in _chunks(self.n, self.block):
            rows = self.rows(s)
            rows.copy_column(to, source)
            self[s] = rows

    def reset(self, centroids) -> None:
        """Identity warps onto the given centroids (their losses kept), as :meth:`Alignments.reset`."""
        for s in _chunks(self.n, self.block):
            rows = self.rows(s)
            rows.reset(centroids)
            self[s] = rows

    def start_from(self, coarse: "_WarmStart") -> None:
        """Every pair's affine map taken from an affine-only warm start (ST's first stage), TPS at identity."""
        for s in _chunks(self.n, self.block):
            self.scratch.write("theta", s, coarse.scratch.read("theta", s))

    def close(self) -> None:
        self.scratch.close()


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
        at = _host_index(idx)

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
        at = _host_index(idx)
        for stage, st in states.items():
            for i, (m, v) in enumerate(zip(st.m, st.v)):
                self.scratch.write(f"{stage}.m{i}", at, m.detach().cpu().numpy())
                self.scratch.write(f"{stage}.v{i}", at, v.detach().cpu().numpy())
            self.scratch.write(f"{stage}.t", at, st.t.detach().cpu().numpy())

    def close(self) -> None:
        if self.scratch is not None:
            self.scratch.close()


def _host_index(idx):
    """A slice as it is, item numbers (a tensor on any device) as a NumPy array: how a RowScratch is indexed."""
    return idx if isinstance(idx, slice) else torch.as_tensor(idx).reshape(-1).cpu().numpy()


def _warp_assigned(aligner: Aligner, x: torch.Tensor, own: Alignments, chunk: int) -> torch.Tensor:
    """Every item warped by its own warp (N, ...) onto its assigned centroid, (N, C, H, W)."""
    out = []
    with torch.no_grad():
        for s in _chunks(x.shape[0], chunk * 8):
            out.append(aligner.warp_pairs(x[s], own.rows(s).as_pairs())[:, 0])
    return torch.cat(out)


def _centroid_update(aligner: Aligner, x: torch.Tensor, mu: torch.Tensor, pairs: _WarmStart, labels: torch.Tensor,
                     chunk: int) -> torch.Tensor:
    """Eq. 4: the mean of the warped members, summed chunk by chunk (the warped items are never held
    all at once). An emptied cluster restarts on the worst-fitted item."""
    own = pairs.assigned(labels)
    sums = torch.zeros_like(mu)
    with torch.no_grad():
        for s in _chunks(x.shape[0], chunk * 8):
            sums.index_add_(0, labels[s], aligner.warp_pairs(x[s], own.rows(s).as_pairs())[:, 0])
    return _means(sums, torch.bincount(labels, minlength=mu.shape[0]), pairs, labels, x)


def _means(sums: torch.Tensor, counts: torch.Tensor, pairs: _WarmStart, labels: torch.Tensor, x) -> torch.Tensor:
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
    (``_lloyd``); the M-step adds the chunks' sums in chunk order. Returns a :class:`_ChunkStep`."""
    pairs = yield from align_pairs(aligner, x, mu, start, schedule)
    labels = keep_pinned(pairs.losses.argmin(1), pinned)
    with torch.no_grad():
        warped = aligner.warp_pairs(x.full, pairs.assigned(labels).as_pairs())[:, 0]
    sums = torch.zeros_like(mu.full).index_add_(0, labels, warped)
    return _ChunkStep(pairs, labels, sums, torch.bincount(labels, minlength=mu.full.shape[0]))


def _starting(start: str, aligner: Aligner, x: Pyramid, mu: Pyramid, previous: Alignments) -> Alignments:
    """The alignments a chunk of items ``x`` starts from against centroids ``mu``: ``previous`` (the identity
    on a first pass, else the last iteration's), or with ``start`` rigid / rigid+flip, :func:`_rigid_start`."""
    if start == "identity":
        return previous
    return _rigid_start(aligner, x, mu, previous, flip=start == "rigid+flip")


@torch.no_grad()
def _rigid_start(aligner: Aligner, x: Pyramid, mu: Pyramid, previous: Alignments, flip: bool) -> Alignments:
    """Per (item, centroid) pair, the better at these centroids of its ``previous`` warp and its best global rigid
    pose (every angle of ``transforms.rigid``'s grid [and the mirror] × every shift within SHIFT_FRACTION, no TPS
    displacement): the gradient alignment then refines a pose instead of searching for it from the identity,
    whose nearest local minimum misses a pattern turned 120°. With losses: never worse than ``previous``."""
    match = rigid_search(x.full, mu.full, flip=flip, max_shift=shift_pixels(SHIFT_FRACTION, tuple(x.full.shape[-2:])))
    pose = Alignments(match.theta, None if previous.nu is None else torch.zeros_like(previous.nu))
    pose.losses = aligner.pair_losses(x.full, mu.full, pose)
    before = Alignments(previous.theta, previous.nu, aligner.pair_losses(x.full, mu.full, previous))
    return _lower(pose, before)


def _chunk_e_step(rows: torch.Tensor, aligner: Aligner, mu: Pyramid, schedule: Schedule, shape: tuple,
                  start_option: str, *, start: Alignments, pinned: torch.Tensor | None) -> _ChunkStep:
    """:func:`_e_step` as one task on a chunk of a store's fit sample (``chunk_lloyd.StoreSample.imap_tasks``,
    here or on a cluster's worker): the chunk's flat rows (n, D), read by the task, made the images
    (n, C, H, W) the in-process loop reads; its warm-start alignments in and out, the config's ``start``
    (:func:`_starting`) applied to them here, beside the images. The schedule has no ticker: the task emits no
    events, the driver reports each finished chunk (``_e_steps``)."""
    x = aligner.pyramid(to_nchw(rows.reshape(len(rows), *shape)))
    return drain(_e_step(aligner, x, mu, _starting(start_option, aligner, x, mu, start), schedule, pinned))


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


def _e_steps(run: _Run, mu: Pyramid, pairs: Alignments, schedule: Schedule, pinned: torch.Tensor | None):
    """:func:`_e_step` on every chunk of the run's items (generator), each chunk's alignments written back into
    ``pairs`` as it is done; returns (labels (N,), warped sums (K, C, H, W) and counts (K,) per cluster, added
    in chunk order: the M-step's reduce). Here chunk by chunk, a Progress per Adam step; or, when the stack is
    a store's fit sample with a backend (``chunk_lloyd.StoreSample``: ``fit_store(..., workers=, scheduler=,
    client=)``), one :func:`_chunk_e_step` task per chunk, its warm-start alignments shipped with it, a
    Progress per finished task. Both give the same labels and sums."""
    slices = _chunks(run.stack.n, run.cfg.chunk)
    own = [None if pinned is None else pinned[s] for s in slices]
    remote = getattr(run.stack, "imap_tasks", None)
    steps = [None] * len(slices)
    if remote is None:
        for i, s in enumerate(slices):
            x = run.x.rows(s)
            start = _starting(run.cfg.start, run.aligner, x, mu, pairs.rows(s))
            steps[i] = yield from _e_step(run.aligner, x, mu, start, schedule, own[i])
            pairs[s], steps[i].pairs = steps[i].pairs, None
    else:
        ticker, ticks = schedule.ticker, (schedule.affine_steps if schedule.affine_steps > 0 else 0) + schedule.steps
        args = (_aligner_on(run.aligner, "cpu"), mu, dataclasses.replace(schedule, ticker=None),
                tuple(run.stack.item_shape), run.cfg.start)
        tasks = [dict(start=pairs.rows(s), pinned=p) for s, p in zip(slices, own)]
        for done, (i, step) in enumerate(remote(_chunk_e_step, run.cfg.chunk, args, tasks, run.aligner.device), 1):
            loss = float(step.pairs.losses.min(1).values.mean())
            pairs[slices[i]], step.pairs, steps[i] = step.pairs, None, step
            ticker.step += ticks - 1
            yield ticker.tick(f"alignment: {done}/{len(slices)} chunks", loss)
    sums, counts = steps[0].sums, steps[0].counts
    for step in steps[1:]:
        sums, counts = sums + step.sums, counts + step.counts
    return torch.cat([step.labels for step in steps]), sums, counts


def _running_mean_update(mu: torch.Tensor, counts: torch.Tensor, labels: torch.Tensor, warped: torch.Tensor) -> None:
    """Mini-batch K-means step (in place): each hit centroid moves to the running mean of every warped
    member it has had (step 1/count); ``counts`` (K,) accumulates the members."""
    add = torch.bincount(labels, minlength=mu.shape[0]).to(counts.dtype)
    counts += add
    sums = torch.zeros_like(mu).index_add_(0, labels, warped)
    hit = add > 0
    mu[hit] = mu[hit] + (sums[hit] - add[hit].view(-1, 1, 1, 1) * mu[hit]) / counts[hit].view(-1, 1, 1, 1)


def _members_warped(aligner: Aligner, x: torch.Tensor, own: Alignments, labels: torch.Tensor, c: int, chunk: int) -> RowScratch:
    """The members of cluster c warped by their own warps, one flat row each (n_c, P), written into a scratch
    (on disk when large) chunk by chunk: one cluster's, and never held whole."""
    members = labels == c
    warped, at = None, 0
    with torch.no_grad():
        for s in _chunks(x.shape[0], chunk * 8):
            mine = members[s]
            if bool(mine.any()):
                rows = aligner.warp_pairs(x[s], own.rows(s).as_pairs())[:, 0][mine].flatten(1)
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
                                                        for b in _chunks(warped.n, BISECT_BLOCK)))
            sse1[c], gain[c], halves[c] = one, one - two, (means, members[side])
    return sse1, gain, halves


def _elsewhere(aligner: Aligner, x: torch.Tensor, pairs: Alignments | _WarmStart, labels: torch.Tensor, j: int, means, chunk: int):
    """Each item's cheapest place other than its own cluster while cluster j splits: another cluster (its
    stored warp) or, on its warp onto j, one of j's half means. Returns costs (N,) and places (N,): a
    cluster, j for the first half, -1 for the second."""
    _, cost, place = own_and_runner_up(pairs.losses.index_fill(1, torch.tensor([j], device=labels.device), math.inf), labels)
    if means is not None:
        onto_j = pairs.column(j)
        values, indices = [], []
        with torch.no_grad():
            for s in _chunks(x.shape[0], chunk * 8):   # chunk by chunk: the warped items are never held all at once
                w = aligner.warp_pairs(x[s], onto_j.rows(s).as_pairs())[:, 0].flatten(1)
                half = ((w[:, None] - means[None]) ** 2).sum(-1).min(1)
                values.append(half.values)
                indices.append(half.indices)
        values, indices = torch.cat(values), torch.cat(indices)
        better = values < cost
        cost = torch.where(better, values, cost)
        place = torch.where(better, torch.where(indices == 0, j, -1), place)
    return cost, place


def _reseed(aligner: Aligner, x: torch.Tensor, pairs: Alignments | _WarmStart, labels: torch.Tensor, chunk: int) -> tuple[int, int] | None:
    """Repair move for two centroids on one group and two groups under one (ours; the paper has none):
    drop centroid a and split cluster j in two (2-means of its members warped onto it, ``_halves``), a
    taking the second half with j's warps; a's members go to their cheapest other place (``_elsewhere``).
    Priced on the warps in hand, the best (a, j) is made (labels and ``pairs`` in place) only when j's
    split gain beats a's drop cost (Σ cheapest other place − SSE₁(a)); since SSE₁ ≤ the assigned costs,
    the distortion after the centroid update is then below the current one (monotone). Returns (a, j) or None."""
    k, losses = pairs.losses.shape[1], pairs.losses
    if k < 2:
        return None
    sse1, gain, halves = _halves(aligner, x, pairs.assigned(labels), labels, k, chunk)
    drop, places = torch.full((k, k), math.inf, dtype=torch.float64), {}
    for j in range(k):
        cost, places[j] = _elsewhere(aligner, x, pairs, labels, j, halves.get(j, (None,))[0], chunk)
        cost = torch.where(labels == j, torch.zeros_like(cost), cost).double().cpu()
        drop[:, j] = torch.zeros(k, dtype=torch.float64).index_add_(0, labels.cpu(), cost) - sse1
    profit = gain[None, :] - drop
    profit.fill_diagonal_(-math.inf)
    a, j = divmod(int(profit.argmax()), k)
    if not float(profit[a, j]) > 1e-6 * float(losses.gather(1, labels[:, None]).sum()):
        return None
    dropped = labels == a
    labels[dropped] = torch.where(places[j] < 0, a, places[j])[dropped]
    labels[halves[j][1]] = a
    pairs.copy_column(a, j)
    return a, j


def _warp_options(cfg, family: str) -> dict:
    """The Aligner options both variants take from their config and invariance family: low-pass, padding,
    the affine maps' family and bounds."""
    return dict(lowpass=cfg.lowpass, padding=cfg.padding, max_scale=cfg.max_scale, max_shift=cfg.max_shift,
                linear="affine" if family == "deformable" else family)


def _check_images(stack: Stack, name: str) -> None:
    if not stack.is_image:
        raise InputError(f"{name} warps images: give an image stack shaped N×H×W or N×H×W×3, not vectors.")


@dataclass
class _StackPyramid:
    """A Pyramid whose rows are read from the stack and low-passed when asked for (batch by batch, on every
    Lloyd iteration) instead of holding every image and its low-passed copy for the whole fit."""

    full: StackImages
    aligner: Aligner

    def rows(self, idx) -> Pyramid:
        return self.aligner.pyramid(self.full[idx])


@dataclass
class _Run:
    """What one fit or prediction works with: its config, the stack, the aligner and the images (with low-pass):
    a fit reads them from the stack batch by batch (``_StackPyramid``) and owns its warm starts' scratch
    (``warm_start``), which ``close`` removes."""

    cfg: AIKMeansConfig
    stack: Stack
    aligner: Aligner
    x: Pyramid | _StackPyramid
    repairs: list = dataclasses.field(default_factory=list)   # (Lloyd iteration, dropped, split) of each move made
    scratches: list = dataclasses.field(default_factory=list)   # shared with a stage's copy (dataclasses.replace)

    def keep(self, scratch):
        """``scratch`` (anything with ``close``: a warm start, mini-batch moments), closed with the run."""
        self.scratches.append(scratch)
        return scratch

    def warm_start(self) -> _WarmStart:
        """Identity warps of every item onto every centroid, losses unknown: the start of a fit's Lloyd loop."""
        return self.keep(_WarmStart(self.aligner, self.stack.n, self.cfg.k, self.cfg.chunk))

    def close(self) -> None:
        """Remove every scratch of the run (the fit calls it in a ``finally``: on error and cancel too)."""
        for scratch in self.scratches:
            scratch.close()
        self.scratches.clear()

    def items(self, images: torch.Tensor) -> np.ndarray:
        """(B, C, H, W) images back in the stack's layout, (B, H, W) or (B, H, W, C)."""
        return from_nchw(images, self.stack.channels > 1).cpu().numpy()

    def align_all(self, mu: torch.Tensor, pairs: Alignments, schedule: Schedule):
        """All N×K alignments against centroids mu, chunk by chunk, improved in ``pairs`` (generator)."""
        mu = self.aligner.pyramid(mu)
        for s in _chunks(self.stack.n, self.cfg.chunk):
            x = self.x.rows(s)
            pairs[s] = yield from self.aligner.align(x, mu, _starting(self.cfg.start, self.aligner, x, mu, pairs.rows(s)), schedule)

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

    def result_fields(self, pairs: _WarmStart, labels: torch.Tensor) -> dict:
        """The fit's per-item result fields (every item of the run's stack), written block by block: the per-pair
        warps are read a block at a time and kept for every item only with the pictures."""
        out, pictures = Assignments(self.stack.n), self.stack.wants_pictures()
        for s in _chunks(self.stack.n, self.cfg.chunk * 8):
            out.write(s.start, self.outputs(pairs.rows(s), labels[s], pictures, s))
        return dict(aligned_kind="item-on-prototype", **out.result_fields())


# ---- training ------------------------------------------------------------------------------------
def _lloyd_ticker(run: _Run, stages: int = 1) -> Ticker:
    """Counts the Adam steps of ``stages`` Lloyd runs of at most max_iter iterations each."""
    cfg = run.cfg
    return Ticker(stages * cfg.max_iter * len(_chunks(run.stack.n, cfg.chunk)) * (cfg.affine_steps + cfg.steps))


def _lloyd(run: _Run, mu: torch.Tensor, pinned: torch.Tensor | None = None, pairs: _WarmStart | None = None,
           ticker: Ticker | None = None, done: int = 0):
    """Algo. 2: the E-step (alignment of every pair, argmin assignment, warped sums per cluster: ``_e_step``)
    chunk by chunk, then Eq. 4 centroids, until no label changes.
    ``pinned`` (N,): clusters the user fixed (-1: free); with any, the repair move (``_reseed``) is off.
    ``pairs``: the alignments to start from (default identity); ``done``: Lloyd iterations of an earlier stage
    (progress and the repairs log count on from it). Returns (centroids, alignments, labels,
    distortion history, iterations)."""
    cfg, n = run.cfg, run.stack.n
    ticker = _lloyd_ticker(run) if ticker is None else ticker
    schedule = fit_schedule(cfg, ticker)
    pairs = run.warm_start() if pairs is None else pairs
    history, prev = [], None
    for it in range(1, cfg.max_iter + 1):
        labels, sums, counts = yield from _e_steps(run, run.aligner.pyramid(mu), pairs, schedule, pinned)
        history.append(float(pairs.losses.gather(1, labels[:, None]).sum()) / n)
        yield Progress(ticker.step, ticker.total, history[-1], f"Lloyd iteration {done + it}")
        if it == cfg.max_iter:
            break
        move = _reseed(run.aligner, run.x.full, pairs, labels, cfg.chunk) if cfg.reseed and pinned is None else None
        if move is not None:            # labels moved: the members' warped sums are taken again
            run.repairs.append((done + it, *move))
        if prev is not None and torch.equal(prev, labels) and move is None:
            break
        mu = _means(sums, counts, pairs, labels, run.x.full) if move is None else \
            _centroid_update(run.aligner, run.x.full, mu, pairs, labels, cfg.chunk)
        prev = labels
        yield Snapshot(run.items(mu))
    return mu, pairs, labels, history, it


def _minibatch(run: _Run, mu: torch.Tensor, rng: np.random.Generator):
    """Mini-batch variant: each batch's K alignments advance by a few Adam steps (moments kept per
    pair across epochs), then the assigned centroids move to the running mean of their warped
    members (per-centroid step 1/count, as in mini-batch K-means). Ends with a full assignment pass.
    Returns (centroids, alignments, labels, distortion history, epochs)."""
    cfg, n = run.cfg, run.stack.n
    pairs, moments = run.warm_start(), run.keep(_MomentScratch(n, mu.device))
    counts = torch.zeros(cfg.k, device=mu.device)
    labels = torch.full((n,), -1, dtype=torch.long, device=mu.device)
    batches = _chunks(n, cfg.batch_size)
    ticker = Ticker(cfg.epochs * len(batches) * (cfg.minibatch_steps * (2 if cfg.affine_steps else 1))
                    + len(_chunks(n, cfg.chunk)) * (cfg.affine_steps + cfg.steps))
    schedule = Schedule.of(cfg, ticker, cfg.minibatch_steps)
    history, epoch = [], 0
    for epoch in range(1, cfg.epochs + 1):
        order = torch.from_numpy(rng.permutation(n)).to(mu.device)
        total, changed = 0.0, 0
        for s in batches:
            idx = order[s]
            batch_moments = moments.rows(idx)
            x, targets = run.x.rows(idx), run.aligner.pyramid(mu)
            aligned = yield from run.aligner.align(x, targets, _starting(cfg.start, run.aligner, x, targets, pairs.rows(idx)),
                                                   schedule, batch_moments)
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
        yield Progress(ticker.step, ticker.total, history[-1], f"epoch {epoch}")
        yield Snapshot(run.items(mu))
        if epoch > 1 and changed == 0:
            break
    yield from run.align_all(mu, pairs, Schedule.of(cfg, ticker))
    labels = pairs.losses.argmin(1)
    history.append(float(pairs.losses.gather(1, labels[:, None]).sum()) / n)
    return mu, pairs, labels, history, epoch


# ---- prediction ----------------------------------------------------------------------------------
def _screened(run: _Run, mu: torch.Tensor) -> Alignments:
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
    for s in _chunks(run.stack.n, cfg.chunk):
        x = run.x.rows(s)
        begin = _starting(cfg.start, aligner, x, mu, pairs.rows(s))   # the identity, or each pair's rigid pose
        turned = Alignments(aligner.turned(x, mu, begin.theta), begin.nu)
        found = aligner.gauss_newton(x.low, mu.low, turned, screen, low=True)
        found.losses = aligner.pair_losses(x.full, mu.full, found)
        found = _lower(found, begin)   # a rigid start's pose where it was better (the identity's loss is not known: inf)
        pick = found.losses.topk(candidates, dim=1, largest=False).indices   # (B, m)
        full, targets = found.take(pick), mu.full[pick]
        if affine:
            full = aligner.gauss_newton(x.full, targets, full, affine)
        if tps and bend:
            full = aligner.gauss_newton(x.full, targets, full, bend, tps=True, damping=TPS_DAMPING)
        found.put(pick, full)
        pairs[s] = found
    return pairs


def _lower(a: Alignments, b: Alignments) -> Alignments:
    """Per pair, whichever of two alignments of the same pairs has the lower loss."""
    better = a.losses < b.losses

    def pick(u, v):
        return None if u is None else torch.where(better.view(*better.shape, *[1] * (u.ndim - 2)), u, v)
    return Alignments(pick(a.theta, b.theta), pick(a.nu, b.nu), torch.minimum(a.losses, b.losses))


# ---- the two methods -----------------------------------------------------------------------------
@dataclass
class STState(FittedState):
    centers: np.ndarray   # (K, C, H, W) centroids


class AIKMeans(Method):
    """Affine-invariant K-means; :class:`STKMeans` adds the thin-plate spline (a variant by subclass)."""

    name, title = "ai-kmeans", "Affine-invariant K-means"
    config, state, inputs = AIKMeansConfig, STState, ("images",)
    paper = "Cosentino et al., Spatial Transformer K-Means"
    auto_invariances = "affine"   # what invariances = auto means here (image stacks)
    #: What of a fit runs on a cluster (``fit_store(..., workers=N)``, docs/cluster.md): ``_e_steps`` per chunk.
    cluster_steps = "the Lloyd E-step (alignments, assignment, warped sums per cluster), one task per chunk of images"

    def family(self, cfg) -> str:
        """The run's invariance family: the config's, or this method's own for auto."""
        return self.auto_invariances if cfg.invariances == "auto" else cfg.invariances

    def landmarks(self, cfg) -> int | None:
        """Side of the TPS landmark grid, or None: affine only."""
        return None

    def aligner(self, cfg, size, device, lean: bool = False) -> Aligner:
        """Affine warps of the run's family within the config's bounds (``lean``: see ``Aligner``)."""
        return Aligner(size, None, device, lean=lean, **_warp_options(cfg, self.family(cfg)))

    def selection_runs(self, cfg, landmarks, lrs) -> list:
        """(landmark grid side, 0 for none; config) of each model-selection run: one per learning rate (Adam's:
        the runs fit with ``fit_align="adam"``)."""
        return [(0, dataclasses.replace(cfg, lr=lr, select=False, fit_align="adam")) for lr in lrs]

    def validate(self, stack: Stack) -> None:
        _check_images(stack, self.name)
        if min(stack.item_shape[:2]) < 8:
            raise InputError(f"{self.name} needs images of at least 8×8 pixels to warp; these are {stack.item_shape[0]}×{stack.item_shape[1]}.")

    def train(self, stack: Stack, cfg, device: torch.device, seed: int):
        self.validate(stack)
        if cfg.select:
            best, _ = yield from self.sweep(stack, cfg, device, seed)
            return best
        return (yield from self._fit(stack, cfg, device, seed))

    def _start(self, stack: Stack, cfg, x: torch.Tensor | None, device) -> _Run:
        """The run on images ``x`` (N, C, H, W) in hand, or (None) on the stack's, read batch by batch."""
        if not cfg.chunk:
            cfg = dataclasses.replace(cfg, chunk=auto_chunk(stack, cfg.k, device))
        if x is None:
            aligner = self.aligner(cfg, tuple(stack.item_shape[:2]), device)
            return _Run(cfg, stack, aligner, _StackPyramid(StackImages(stack, device), aligner))
        aligner = self.aligner(cfg, tuple(x.shape[-2:]), device)
        return _Run(cfg, stack, aligner, aligner.pyramid(x))

    def _fit(self, stack: Stack, cfg, device: torch.device, seed: int):
        """One run from K-means++ centroids, Lloyd iterations or mini-batches (generator; returns the result)."""
        start = time.perf_counter()
        rng = seed_everything(seed)
        run = self._start(stack, cfg, None, device)
        try:   # the warm start's scratch is removed however the run ends (error, cancel)
            rows = Rows(stack, device, run.cfg.chunk * 8, in_memory_bytes=0)   # streamed: never the whole stack at once
            mu = to_nchw(kmeans_plus_plus(rows, cfg.k, rng).reshape(cfg.k, *stack.item_shape)).contiguous()
            init = mu.clone()
            if cfg.mode == "minibatch":
                mu, pairs, labels, history, iters = yield from _minibatch(run, mu, rng)
            else:
                mu, pairs, labels, history, iters = yield from self._curriculum(run, mu)
            extras = {"initial_prototypes": run.items(init), "repairs": np.asarray(run.repairs, np.int64).reshape(-1, 3)}
            timing = {"fit_s": time.perf_counter() - start, "iterations": iters}
            return self.result(cfg, STState(mu.cpu().numpy()), prototypes=run.items(mu), history=history,
                               extras=extras, timing=timing, **run.result_fields(pairs, labels))
        finally:
            run.close()

    def _curriculum(self, run: _Run, mu: torch.Tensor, pinned: torch.Tensor | None = None):
        """Lloyd iterations from centroids mu; AI K-means has one stage (see STKMeans)."""
        return (yield from _lloyd(run, mu, pinned))

    def refine(self, stack: Stack, cfg, start: ClusteringResult, pinned: torch.Tensor, device: torch.device):
        """Lloyd iterations from an edited result's prototypes, the pinned items kept where the user put them."""
        t0 = time.perf_counter()
        self.validate(stack)
        mu = to_nchw(torch.from_numpy(np.asarray(start.prototypes, np.float32)).to(device))
        run = self._start(stack, cfg, None, device)
        try:   # the warm start's scratch is removed however the run ends (error, cancel)
            mu, pairs, labels, history, iters = yield from self._curriculum(run, mu, pinned.to(device))
            timing = {"fit_s": time.perf_counter() - t0, "iterations": iters}
            return self.result(cfg, STState(mu.cpu().numpy()), prototypes=run.items(mu), history=history,
                               timing=timing, **run.result_fields(pairs, labels))
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
        _check_images(stack, self.name)
        cfg = self.config_of(result)
        if batch_size is not None:
            cfg = dataclasses.replace(cfg, chunk=int(batch_size))
        mu = torch.from_numpy(np.asarray(result.state.centers, dtype=np.float32)).to(device)
        check_same_size(stack, int(np.prod(mu.shape[1:])))
        x = to_nchw(stack.tensor(device))
        if tuple(x.shape[1:]) != tuple(mu.shape[1:]):
            raise InputError(f"The new images are {tuple(stack.item_shape)} but the centroids are {tuple(result.prototypes.shape[1:])}: give images of the same shape.")
        run = self._start(stack, cfg, x, device)
        if cfg.predict_candidates == 0:   # every centroid aligned in full by Adam: the exact path (the reference)
            pairs = run.aligner.zeros(stack.n, mu.shape[0])
            drain(run.align_all(mu, pairs, Schedule.of(cfg, steps=cfg.predict_steps)))
            return run, mu, pairs
        run.aligner = self.aligner(cfg, run.aligner.size, device, lean=True)
        return run, mu, _screened(run, mu)

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
            x = to_nchw(stack.tensor(device))
            run = self._start(stack, cfg, x, device)
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
        return Aligner(size, self.landmarks(cfg), device, max_displacement=cfg.max_displacement,
                       lean=lean, **_warp_options(cfg, self.family(cfg)))

    def _curriculum(self, run: _Run, mu: torch.Tensor, pinned: torch.Tensor | None = None):
        """With ``affine_first`` and a TPS stage: Lloyd with affine warps alone until no label changes (or
        max_iter), then Lloyd with the TPS from those centroids, each pair starting from its affine map.
        History and iteration counts cover both stages."""
        if not (run.cfg.affine_first and run.aligner.landmarks):
            return (yield from _lloyd(run, mu, pinned))
        affine = dataclasses.replace(run, aligner=super().aligner(run.cfg, run.aligner.size, run.aligner.device))
        ticker = _lloyd_ticker(run, stages=2)
        mu, coarse, _, history, iters = yield from _lloyd(affine, mu, pinned, ticker=ticker)
        pairs = run.warm_start()
        pairs.start_from(coarse)
        coarse.close()
        mu, pairs, labels, fine, more = yield from _lloyd(run, mu, pinned, pairs, ticker, done=iters)
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
