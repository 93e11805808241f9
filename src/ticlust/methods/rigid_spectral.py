"""Orientation-free spectral clustering: a k-nearest-neighbour graph whose distance has searched every
in-plane angle and then fitted a warp, cut spectrally.

Prototype methods (rigid-kmeans, ai/st-kmeans from a rigid start) ask each kind to be one template; a
kind that is drawn in several styles (a 2 with or without its loop, a round or a narrow 0) is not, and
those methods then spend prototypes on styles and merge kinds. A graph asks only that each item be near
a few others of its kind. The steps, as U-SPEC (the spectral step of PSSC, methods/pssc.py) on a
distance of our own:

1. ``anchors`` items drawn at random (seeded) are the graph's references (U-SPEC's representatives: an
   average of items at different angles means nothing, so items themselves are the references);
2. every item is compared with every anchor over every in-plane angle (and mirror, ``flip``) at once by
   correlation in polar coordinates about each image's centre of mass (``transforms.polar``), on images
   blurred by ``lowpass`` and scaled to unit norm (cosine distances);
3. the ``candidates`` nearest anchors of each item start from that pose a Levenberg-Marquardt fit of a warp
   of the ``invariances`` family (``Aligner.gauss_newton``, as ai-kmeans' predict) and are ranked again
   by the distance left after it: the ``neighbours`` nearest make the item's row of the sparse item × anchor
   affinity (Gaussian, σ = the mean neighbour distance);
4. the transfer cut (U-SPEC, Eq. 6-8) gives the spectral coordinates; ``embedding=diffusion`` weights the
   2K leading coordinates by exp(−λᵢ/λ_K) (λ: eigenvalues of the normalised Laplacian; a diffusion map
   at the time scale of K clusters) where ``spectral`` keeps the K leading ones alone (the textbook); rows
   are normalised and k-means with restarts makes the K clusters.

Each cluster's prototype is the mean of its members posed onto one frame by the exhaustive rigid search
(``transforms.rigid``), twice (onto the member nearest the cluster's centre, then onto that mean): the
prototypes, the per-item pose (angle, flip, shift), ``aligned`` and the inspector come from it. Predict
runs steps 2-3 for new items against the fitted anchors and extends the embedding through their
affinities (U-SPEC's out-of-sample rule), so the fit sample may be small and the plate large.
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

import numpy as np
import torch

from ..errors import InputError
from ..events import Progress, Snapshot
from ..kernels.aligned_lloyd import work_factor
from ..kernels import affinities, extend_embedding, keep_pinned, kmeans_restarts, lloyd, partition_means, transfer_cut
from ..result import Assignments, ClusteringResult, FittedState
from ..core.stack import Stack, from_nchw, to_nchw
from ..transforms.align import Aligner, Alignments, gaussian_lowpass
from ..transforms.polar import Turns, intensity_centres, nearest_turns, polar_spectra
from ..transforms.rigid import SHIFT_FRACTION, RigidMatch, aligned_items, angle_count, pose_theta, rigid_search, shift_pixels
from ..core.validation import check_images, check_same_items
from .base import Method, param, register, seed_everything
from .invariances import invariances_param


#: The warp's bounds (ai-kmeans' defaults): scale factors within [1/1.5, 1.5], shift within half the half side.
MAX_SCALE, MAX_SHIFT = 1.5, 0.5
#: Bytes of (item, candidate) pairs in one warp fit: the targets and the fit's sampled slopes, a few times over. Kept
#: small (about 30 MNIST items of 30 candidates): the fit's temporaries then stay in cache and are reused, not paged in
#: afresh (2 ** 28 took 1.3x the CPU time of 2 ** 26 on 512 MNIST items)
PAIR_BLOCK_BYTES = 2 ** 26


#: What the stages after the graph cost (k-means, the prototypes' two posing passes, every item posed, the object map)
#: as a share of the graph's, for its ETA: each later pass poses an item on one prototype where the graph fits
#: ``candidates`` warps onto anchors, so both grow with the items (measured: 0.21 on 6,000 MNIST digits, benchmarks/eta.py).
AFTER_GRAPH = 0.2


@dataclass
class RigidSpectralConfig:
    k: int = 10
    invariances: str = invariances_param("affine", ("rigid", "similarity", "affine"))
    flip: bool = param(False, "Mirror images count as the same (cells in 2-D have no handedness unless you say so)", essential=True)
    anchors: int = param(1000, "Items the graph is built on (U-SPEC's representatives): each item is linked to its nearest "
                         "anchors; more is slower and a little more accurate (capped by N)", low=2, essential=True)
    neighbours: int = param(5, "Nearest anchors per item (k of the k-NN affinity)", low=1)
    candidates: int = param(30, "Nearest anchors by the rotation search whose distance the warp fit then refines", low=1)
    # 2 measured as 4 on every set of benchmarks/rotation.py (rotated MNIST-test 10k 0.918 vs 0.918, COIL-20 0.959 vs
    # 0.962, USPS 0.890 vs 0.888) in 0.7x the time; 0 (the search's distance alone) loses 0.06 on rotated MNIST
    fit_iter: int = param(2, "Levenberg-Marquardt iterations of each (item, candidate) warp fit (0: the rotation search's "
                          "distance alone)", low=0)
    # 0.0125 (0.4 px at 32 px) measured against 0.025 and 0: equal within 0.002 on rotated MNIST-test, USPS and COIL-20 (no
    # blur loses COIL-20 0.033), and on six inner-pattern fields 0.964 mean ACC against 0.950 (a wider blur smears foci)
    lowpass: float = param(0.0125, "Gaussian blur σ before comparing, as a fraction of the image side", low=0.0, high=0.5)
    embedding: str = param("diffusion", "Coordinates k-means clusters: diffusion (the 2K leading spectral coordinates, "
                           "weighted by exp(−λ/λ_K)) or spectral (the K leading ones)", choices=("diffusion", "spectral"))
    restarts: int = param(10, "k-means restarts on the embedding (the lowest inertia is kept)", low=1)
    kmeans_iter: int = param(100, "Most Lloyd iterations per k-means restart", low=1, gui=False)
    batch_size: int = param(512, "Items compared with the anchors at once (memory vs speed)", low=1, gui=False)
    work_side: int = param(32, "Larger crops have their warps fitted on images averaged down by a whole factor to about this "
                           "side (a warp is the same map at any size; ai/st-kmeans' rule); 0: at full size", low=0)


@dataclass
class RigidSpectralState(FittedState):
    item_shape: np.ndarray     # the fitted item shape (new images must match)
    anchors: np.ndarray        # (P, C, H, W) the anchors, blurred and at unit norm
    sigma: np.ndarray          # the affinity's kernel width
    transfer: np.ndarray       # (P, E) the anchors' weighted spectral coordinates
    centers: np.ndarray        # (K, E) k-means centres in the embedding
    frames: np.ndarray         # (K, C, H, W) the prototypes items are posed onto


@dataclass
class Anchors:
    """The graph's references, ready for comparison: their images (blurred, unit norm), centres and polar spectra."""

    images: torch.Tensor
    centres: torch.Tensor
    spectra: torch.Tensor

    @classmethod
    def of(cls, images: torch.Tensor) -> "Anchors":
        centres = intensity_centres(images)
        return cls(images, centres, polar_spectra(images, centres, angle_count(tuple(images.shape[-2:]))))


def family(cfg: RigidSpectralConfig) -> str:
    return "affine" if cfg.invariances == "auto" else cfg.invariances


def prepared(images: torch.Tensor, lowpass: float) -> torch.Tensor:
    """Images (B, C, H, W) blurred by σ = lowpass × the longer side and scaled to unit norm (a blank one stays 0)."""
    x = gaussian_lowpass(images, lowpass * max(images.shape[-2:]))
    return x / x.flatten(1).norm(dim=1).clamp_min(1e-30).view(-1, 1, 1, 1)


def warp_distances(x: torch.Tensor, centres: torch.Tensor, anchors: Anchors, turns: Turns, aligner: Aligner,
                   iterations: int) -> torch.Tensor:
    """||x_i warped onto anchor j − anchor j||² (B, c) of each item's candidate anchors ``turns``, the warp started at the
    pair's pose from the rotation search (anchor mirrored if flip, turned about its centre onto the item's centre) and
    fitted by ``iterations`` Levenberg-Marquardt steps, on x and the anchors' images (already there, ``anchor_links``)
    reduced to the aligner's size; in the full size's units."""
    b, c = turns.index.shape
    size = tuple(x.shape[-2:])
    targets = anchors.images[turns.index]                                   # (b, c, C, H, W)
    ref = anchors.centres[turns.index]
    ref = torch.stack([torch.where(turns.flip, -ref[..., 0], ref[..., 0]), ref[..., 1]], -1)
    cos, sin = torch.cos(turns.angle), torch.sin(turns.angle)
    turned = torch.stack([cos * ref[..., 0] - sin * ref[..., 1], sin * ref[..., 0] + cos * ref[..., 1]], -1)
    theta = pose_theta(turns.angle, turns.flip, centres[:, None] - turned, size)
    start = Alignments(theta, None, None)   # gauss_newton evaluates the start's losses itself
    x, targets = aligner.reduced(x), aligner.reduced(targets)   # the warp is fitted at the aligner's size (work_side)
    with torch.no_grad():
        d2 = aligner.gauss_newton(x, targets, start, iterations).losses if iterations else aligner.pair_losses(x, targets, start)
    return d2 * aligner.work ** 2          # in the full size's units (a w×w average holds 1/w² of a block's squares)


def anchor_links(images: torch.Tensor, anchors: Anchors, cfg: RigidSpectralConfig, aligner: Aligner,
                 exclude: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The step on a chunk, for the fit and predict alike: items (B, C, H, W) in [0, 1] → the distances (B, n) ascending
    and anchor numbers (B, n) of their ``neighbours`` nearest anchors after the warp fit. ``exclude`` (B,): the anchor each
    item is (not its own neighbour), or −1."""
    x = prepared(images, cfg.lowpass)
    centres = intensity_centres(x)
    n_angles = angle_count(tuple(x.shape[-2:]))
    turns = nearest_turns(polar_spectra(x, centres, n_angles), anchors.spectra, cfg.candidates, n_angles, cfg.flip, exclude)
    anchors = dataclasses.replace(anchors, images=aligner.reduced(anchors.images))   # once, not per pair
    per_block = max(1, PAIR_BLOCK_BYTES // (turns.index.shape[1] * x[0].numel() // aligner.work ** 2 * 4 * 24))
    d2 = torch.cat([warp_distances(x[s:s + per_block], centres[s:s + per_block], anchors,
                                   Turns(*(t[s:s + per_block] for t in (turns.distance, turns.index, turns.angle, turns.flip))),
                                   aligner, cfg.fit_iter) for s in range(0, len(x), per_block)])
    d2, order = torch.topk(d2, min(cfg.neighbours, d2.shape[1]), dim=1, largest=False)
    return d2.clamp_min(0).sqrt(), turns.index.gather(1, order)


def diffusion_weights(eigenvalues: torch.Tensor, k: int, kind: str) -> torch.Tensor:
    """Per spectral coordinate (largest eigenvalue first) its weight: exp(−λᵢ/λ_K) with λ = 1 − eigenvalue (the normalised
    Laplacian's; ``diffusion``), or 1 for the K leading ones and 0 after (``spectral``)."""
    if kind == "spectral":
        return (torch.arange(len(eigenvalues), device=eigenvalues.device) < k).to(eigenvalues.dtype)
    lap = (1.0 - eigenvalues).clamp_min(0)
    return torch.exp(-lap / lap[min(k, len(lap)) - 1].clamp_min(1e-12))


@dataclass
class Graph:
    """The fit's embedding and what the result and ``predict`` keep of it."""

    space: torch.Tensor      # (N, E) row-normalised, weighted spectral coordinates
    anchor_index: np.ndarray
    anchors: Anchors
    sigma: float
    transfer: torch.Tensor   # (P, E)
    eigenvalues: torch.Tensor
    links: tuple[torch.Tensor, torch.Tensor]


class RigidSpectral(Method):
    name, title = "rigid-spectral", "Orientation-free spectral clustering (every angle searched, a warp fitted, a k-NN graph cut)"
    config, state, inputs = RigidSpectralConfig, RigidSpectralState, ("images",)
    embeds = "spectral"   # the object map: each item's spectral coordinates
    paper = "exhaustive in-plane search (cryo-EM 2D classification) + U-SPEC spectral clustering (Huang et al., as in PSSC)"
    caution = "Indifferent to orientation by design: on upright data where orientation tells kinds apart (6 and 9), use another method"

    def _checked(self, stack: Stack) -> None:
        check_images(stack, self.name, min_side=8)
        if stack.n < 3:
            raise InputError(f"{self.name} needs at least 3 images to build its graph; this stack has {stack.n}.")

    def aligner(self, cfg: RigidSpectralConfig, size, device) -> Aligner:
        return Aligner(size, None, device, lean=True, linear=family(cfg), max_scale=MAX_SCALE, max_shift=MAX_SHIFT,
                       work=work_factor(cfg, size))

    def _graph(self, stack: Stack, cfg: RigidSpectralConfig, device: torch.device, rng: np.random.Generator):
        """Generator: anchors → every item's nearest anchors → affinities → transfer cut → weighted embedding (a Graph)."""
        p = min(cfg.anchors, stack.n)
        anchor_index = np.sort(rng.choice(stack.n, size=p, replace=False))
        anchors = Anchors.of(prepared(to_nchw(torch.from_numpy(stack.take(anchor_index)).to(device)), cfg.lowpass))
        position = np.full(stack.n, -1, np.int64)
        position[anchor_index] = np.arange(p)
        aligner = self.aligner(cfg, tuple(stack.item_shape[:2]), device)
        dist, idx, steps = [], [], -(-stack.n // cfg.batch_size)
        for i, (s, b) in enumerate(stack.batches(cfg.batch_size)):
            d, j = anchor_links(to_nchw(torch.from_numpy(b).to(device)), anchors, cfg, aligner,
                                torch.from_numpy(position[s:s + len(b)]).to(device))
            dist.append(d)
            idx.append(j)
            yield Progress(i + 1, steps, stage="comparing every item with the anchors at every angle",
                           later=steps * AFTER_GRAPH)
        dist, idx = torch.cat(dist), torch.cat(idx)
        sigma = float(dist.double().mean())
        sigma = sigma if sigma > 0 else 1.0
        aff = affinities(dist, sigma)
        n_vectors = min(2 * cfg.k if cfg.embedding == "diffusion" else cfg.k, p)
        _, w, vals = transfer_cut(aff, idx, p, n_vectors)
        transfer = w * diffusion_weights(vals, cfg.k, cfg.embedding)[None]
        return Graph(extend_embedding(aff, idx, transfer), anchor_index, anchors, sigma, transfer, vals, (dist, idx))

    def train(self, stack: Stack, cfg: RigidSpectralConfig, device: torch.device, seed: int):
        self._checked(stack)
        start = time.perf_counter()
        rng = seed_everything(seed)
        graph = yield from self._graph(stack, cfg, device, rng)
        timing = {"graph_s": time.perf_counter() - start}
        t0 = time.perf_counter()
        best = None
        for r, best in kmeans_restarts(graph.space, cfg.k, cfg.restarts, cfg.kmeans_iter, rng):
            yield Progress(r, cfg.restarts, best[2][-1], "k-means restarts")
        timing["kmeans_s"] = time.perf_counter() - t0
        centers, _, history = best
        return (yield from self._clustered(stack, cfg, graph, centers, history, timing, device))

    def refine(self, stack: Stack, cfg: RigidSpectralConfig, start: ClusteringResult, pinned: torch.Tensor, device: torch.device):
        """k-means on the graph's embedding (rebuilt with the fit's seed) from the centres of the edited partition, pinned
        items kept where the user put them; an emptied cluster starts from the centre of all items."""
        self._checked(stack)
        seed = int(start.config.get("seed", 0))
        rng = seed_everything(seed)
        t0 = time.perf_counter()
        graph = yield from self._graph(stack, cfg, device, rng)
        pinned = pinned.to(graph.space.device)
        labels = torch.from_numpy(np.asarray(start.labels, np.int64)).to(graph.space.device)
        centers = partition_means(graph.space, labels, graph.space.mean(0).expand(cfg.k, -1))
        history = []
        for it, inertia, centers, _ in lloyd(graph.space, centers, cfg.kmeans_iter, pinned=pinned):
            history.append(inertia / stack.n)
            yield Progress(it, cfg.kmeans_iter, history[-1], "Refine: k-means from the edit")
        return (yield from self._clustered(stack, cfg, graph, centers, history, {"graph_s": time.perf_counter() - t0}, device, pinned))

    def _clustered(self, stack, cfg, graph: Graph, centers, history, timing, device, pinned=None):
        """Labels and scores from the embedding, prototypes posed from the members, the per-item poses; the result."""
        scores = torch.cdist(graph.space, centers)
        labels = keep_pinned(scores.argmin(1), pinned)
        t0 = time.perf_counter()
        frames = yield from self._prototypes(stack, cfg, labels, scores, device)
        timing = {**timing, "prototypes_s": time.perf_counter() - t0}
        yield Snapshot(self._items(stack, frames))
        out = Assignments(stack.n)
        out.write(0, {"labels": labels, "scores": scores, "params/nearest_anchors": graph.anchor_index[graph.links[1].cpu().numpy()],
                      "params/anchor_distances": graph.links[0].float()})
        steps = -(-stack.n // cfg.batch_size)
        for i, (s, b) in enumerate(stack.batches(cfg.batch_size)):
            out.write(s, self._posed(stack, cfg, to_nchw(torch.from_numpy(b).to(device)), frames, labels[s:s + len(b)]))
            yield Progress(i + 1, steps, stage="posing every item on its prototype")
        state = RigidSpectralState(item_shape=np.asarray(stack.item_shape), anchors=graph.anchors.images.cpu().numpy(),
                                   sigma=np.float64(graph.sigma), transfer=graph.transfer.float().cpu().numpy(),
                                   centers=centers.cpu().numpy(), frames=frames.cpu().numpy())
        extras = {"embedding": graph.space.cpu().numpy(), "anchor_index": graph.anchor_index,
                  "transfer_eigenvalues": graph.eigenvalues.float().cpu().numpy()}
        return self.result(cfg, state, prototypes=self._items(stack, frames), history=history, extras=extras,
                           timing=timing, **out.result_fields())

    def _items(self, stack: Stack, images: torch.Tensor) -> np.ndarray:
        return from_nchw(images, stack.channels > 1).cpu().numpy()

    def _search(self, cfg: RigidSpectralConfig, x: torch.Tensor, frames: torch.Tensor):
        return rigid_search(x, frames, flip=cfg.flip, max_shift=shift_pixels(SHIFT_FRACTION, tuple(x.shape[-2:])))

    def _own_search(self, cfg: RigidSpectralConfig, x: torch.Tensor, frames: torch.Tensor, labels: torch.Tensor) -> RigidMatch:
        """Each item's rigid pose (B,) onto its own cluster's prototype ``labels`` (B,) alone: the search of each cluster's
        items against that one frame (the same poses as the search against all K, at 1/K of its cost)."""
        b = x.shape[0]
        out = RigidMatch(x.new_zeros(b), torch.zeros(b, dtype=torch.bool, device=x.device), x.new_zeros(b, 2),
                         x.new_zeros(b), x.new_zeros(b, 6))
        for c in torch.unique(labels).tolist():
            rows = torch.nonzero(labels == c).flatten()
            out.put(rows, self._search(cfg, x[rows], frames[c:c + 1]))
        return out

    def _prototypes(self, stack: Stack, cfg: RigidSpectralConfig, labels: torch.Tensor, scores: torch.Tensor, device):
        """Generator: each cluster's members posed onto its medoid (the member nearest its centre) and averaged, then
        posed onto that mean and averaged again; an empty cluster keeps the overall medoid. Returns (K, C, H, W)."""
        k = scores.shape[1]
        own = scores.gather(1, labels[:, None])[:, 0]
        medoid = []
        for c in range(k):
            members = torch.nonzero(labels == c).flatten()
            pool = members if len(members) else torch.arange(len(labels), device=labels.device)
            medoid.append(int(pool[torch.argmin(own[pool] if len(members) else scores[pool, c])]))
        frames = to_nchw(torch.from_numpy(stack.take(np.asarray(medoid))).to(device))
        sizes = torch.bincount(labels, minlength=k).view(-1, 1, 1, 1)
        for rnd in range(2):
            sums = torch.zeros_like(frames)
            for s, b in stack.batches(cfg.batch_size):
                x, lab = to_nchw(torch.from_numpy(b).to(device)), labels[s:s + len(b)]
                sums.index_add_(0, lab, aligned_items(x, self._own_search(cfg, x, frames, lab).theta))
            frames = torch.where(sizes > 0, sums / sizes.clamp_min(1).to(frames.dtype), frames)
            yield Progress(rnd + 1, 2, stage="prototypes: members posed and averaged")
        return frames

    def _posed(self, stack: Stack, cfg: RigidSpectralConfig, x: torch.Tensor, frames: torch.Tensor, labels: torch.Tensor) -> dict:
        """Each item's pose onto its cluster's prototype (angle, flip, shift, affine) and, when pictures are kept, the item
        aligned onto it and its grid."""
        own = self._own_search(cfg, x, frames, labels)
        theta = own.theta
        fields = {"params/angle": own.angle, "params/flip": own.flip, "params/shift": own.shift,
                  "params/affine": theta.reshape(-1, 2, 3) + torch.eye(2, 3, device=x.device)}
        if stack.wants_pictures():
            aligner = Aligner(tuple(x.shape[-2:]), None, x.device)
            fields.update({"aligned": self._items(stack, aligned_items(x, theta)),
                           "grids": aligner.display_grids(Alignments(theta))})
        return fields

    def _fitted(self, result: ClusteringResult, device):
        state = result.state
        anchors = Anchors.of(torch.from_numpy(np.asarray(state.anchors, np.float32)).to(device))
        return (anchors, torch.from_numpy(np.asarray(state.transfer, np.float32)).to(device),
                torch.from_numpy(np.asarray(state.centers, np.float32)).to(device),
                torch.from_numpy(np.asarray(state.frames, np.float32)).to(device))

    def _embedded(self, cfg, x, anchors: Anchors, transfer, sigma: float, aligner: Aligner) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        dist, idx = anchor_links(x, anchors, cfg, aligner)
        return extend_embedding(affinities(dist, sigma), idx, transfer), dist, idx

    def predict(self, result: ClusteringResult, stack: Stack, device: torch.device, batch_size: int | None = None) -> ClusteringResult:
        """New images linked to the fitted anchors as the fit linked its items, their spectral coordinates extended
        through those links (U-SPEC's D_X⁻¹ A w), and each assigned to its nearest k-means centre and posed onto it."""
        start = time.perf_counter()
        cfg = self.config_of(result)
        self._checked_predict(stack, result)
        anchors, transfer, centers, frames = self._fitted(result, device)
        aligner = self.aligner(cfg, tuple(stack.item_shape[:2]), device)
        out, spectral = Assignments(stack.n), []
        for s, b in stack.batches(batch_size or cfg.batch_size):
            x = to_nchw(torch.from_numpy(b).to(device))
            z, dist, idx = self._embedded(cfg, x, anchors, transfer, float(result.state.sigma), aligner)
            scores = torch.cdist(z, centers)
            labels = scores.argmin(1)
            spectral.append(z.cpu().numpy())
            out.write(s, {"labels": labels, "scores": scores, "params/anchor_distances": dist.float(),
                          **self._posed(stack, cfg, x, frames, labels)})
        extras = {"embedding": np.concatenate(spectral)} if spectral else {}   # as the fit's: the object map reads it
        return self.predicted(result, timing={"fit_s": time.perf_counter() - start}, extras=extras, **out.result_fields())

    def _checked_predict(self, stack: Stack, result: ClusteringResult) -> None:
        check_images(stack, self.name)
        check_same_items(stack, tuple(int(s) for s in result.state.item_shape))

    def align(self, result: ClusteringResult, stack: Stack, device: torch.device, index: int | None = None):
        """For the inspector: the image posed onto every prototype by the rigid search (flip included), and its scores
        (distances to the k-means centres in the embedding, as the result's)."""
        cfg = self.config_of(result)
        frames = torch.from_numpy(np.asarray(result.state.frames, np.float32)).to(device)
        x = to_nchw(torch.from_numpy(stack.batch(0, 1)).to(device))
        if index is not None and result.scores is not None:   # an item of the fit: its scores are the result's
            scores = np.asarray(result.scores[index])
        else:
            anchors, transfer, centers, _ = self._fitted(result, device)
            z, _, _ = self._embedded(cfg, x, anchors, transfer, float(result.state.sigma), self.aligner(cfg, tuple(x.shape[-2:]), device))
            scores = torch.cdist(z, centers)[0].cpu().numpy()
        match = self._search(cfg, x, frames)
        warped = aligned_items(x.expand(frames.shape[0], -1, -1, -1), match.theta[0])
        return self._items(stack, warped), scores


RIGID_SPECTRAL = register(RigidSpectral())
