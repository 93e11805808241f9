"""Cell K-means: K-means on crops of real cells read as a lab reads them (``features.cells``): each crop's
background level taken off per channel, optionally its object's mask applied and its pose undone (centre of
mass to the crop's centre, major axis along +x), then every channel smoothed at a scale set by the objects' own
size before the crops are compared. Channels keep the stack's units (no per-object or per-channel
normalisation), so a channel's integrated intensity — DNA content on a DNA stain — weighs as much as the data
give it.

Why smoothing (benchmarks/results/real_cells.md): on real cells the crops differ by much that is not the class
(texture noise, the exact outline, debris); at a smoothing of about the objects' radius what is left is each
channel's amount and where it lies, which is what tells cell-cycle phases apart. ``scale`` 0 compares every pixel
(pixel K-means on background-free crops). The prototypes are the members' mean crops at full resolution.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..core.stack import Stack
from ..events import Progress
from ..features import cells
from ..kernels import assign, kmeans_plus_plus_steps, lloyd_steps, partition_means
from ..result import ClusteringResult, FittedState
from .base import Method, param, register, seed_everything

#: Items whose masks set the smoothing scale (a seeded sample of a larger stack).
RADIUS_SAMPLE = 2000
#: Items read and prepared at once.
BLOCK = 1024


@dataclass
class CellKMeansConfig:
    k: int = 8
    scale: float = param(1.6, "Smoothing before crops are compared, as a share of the objects' median radius: above 1 "
                         "it compares each channel's amount and where it lies (stain content, e.g. DNA for cell-cycle "
                         "phases), 0 compares every pixel (fine structure)", low=0.0, high=4.0, essential=True)
    detail: bool = param(True, "Also compare the crops pixel by pixel, the two views (smoothed, pixels) weighted equally "
                         "(each scaled to the same mean spread)", essential=True)
    pose: str = param("none", "Undo each object's pose before comparing: none, centre (centre of mass to the crop's "
                      "centre) or centre+axis (and the major axis along +x: any orientation)",
                      choices=("none", "centre", "centre+axis"), essential=True)
    mask: bool = param(False, "Set everything outside each object's mask (Otsu on the channels' contrast) to the "
                       "background: neighbours and debris in the crop no longer count")
    background: str = param("ring", "Each crop's background level per channel, taken off first: ring (the median of "
                            "its outer pixels) or none", choices=("ring", "none"))
    n_init: int = param(10, "K-means runs from different k-means++ starts; the lowest distortion is kept", low=1)
    max_iter: int = param(300, "Most Lloyd iterations per run", low=1)
    tol: float = param(1e-4, "Stop when the centroids move less than this (relative to the data's variance)", low=0.0)
    batch_size: int = param(8192, "Items per batch when computing distances", low=1, gui=False)


@dataclass
class CellKMeansState(FittedState):
    centers: np.ndarray      # (K, D) centroids of the smoothed crops
    noise: np.ndarray        # (C,) the background noise per channel (the masks' units)
    sigma: np.ndarray        # () the smoothing in pixels: scale × the fitted objects' median radius
    weights: np.ndarray      # (V,) each view's weight (1 / its rows' RMS spread about their mean)


def prepared(x: np.ndarray, cfg: CellKMeansConfig, noise: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Crops (B, H, W, C) background-free, masked and posed as ``cfg`` says; with the poses (B, 3)."""
    level = cells.border_background(x) if cfg.background == "ring" else np.zeros((len(x), x.shape[-1]), x.dtype)
    out = x - level[:, None, None, :]
    pose = np.zeros((len(x), 3))
    if cfg.mask or cfg.pose != "none":
        masks = cells.object_masks(x, level, noise)
        if cfg.mask:
            out = out * masks[..., None]
        if cfg.pose != "none":
            pose = cells.poses(np.abs(out).sum(-1) * masks, cfg.pose == "centre+axis")
            out = cells.posed(out, pose)
    return out.astype(np.float32), pose


def _progress_only(steps):
    """A kernel's events less its Snapshots (its centroids are smoothed rows, not pictures to show); returns its value."""
    while True:
        try:
            event = next(steps)
        except StopIteration as done:
            return done.value
        if isinstance(event, Progress):
            yield event


def _joined(views: list[np.ndarray], weights) -> np.ndarray:
    """The views side by side, each times its weight: one row per item."""
    return np.concatenate([v * np.float32(w) for v, w in zip(views, weights)], axis=1)


def _channels_last(x: np.ndarray) -> np.ndarray:
    return x if x.ndim == 4 else x[..., None]


class CellKMeans(Method):
    name, title, paper = "cell-kmeans", "Cell K-means (background-free, smoothed at the cells' size)", "baseline for real cells"
    config, state, inputs = CellKMeansConfig, CellKMeansState, ("images",)
    caution = ("For crops of cells or nuclei: compares stain amounts and coarse shape; for fine structure (digits, "
               "lobed nuclei) set scale 0 or use an aligning method.")

    def train(self, stack: Stack, cfg: CellKMeansConfig, device: torch.device, seed: int):
        rng = seed_everything(seed)
        yield Progress(0, 1, float("nan"), "measuring the cells")
        rows, noise, sigma, weights = self._measured(stack, cfg)
        rows = torch.from_numpy(rows).to(device)
        best = None
        for run in range(cfg.n_init):
            centers = yield from kmeans_plus_plus_steps(rows, cfg.k, rng)
            history, centers, d2, labels = yield from _progress_only(lloyd_steps(
                rows, centers, cfg, (rows.shape[1],), f"Lloyd iterations (run {run + 1} of {cfg.n_init})"))
            if best is None or history[-1] < best[0][-1]:
                best = (history, centers, d2, labels)
        history, centers, d2, labels = best
        state = CellKMeansState(centers.cpu().numpy(), noise, np.asarray(sigma, np.float32), weights)
        return self._result(stack, cfg, state, d2, labels, history)

    def refine(self, stack: Stack, cfg: CellKMeansConfig, start: ClusteringResult, pinned: torch.Tensor,
               device: torch.device):
        """Lloyd iterations from the centroids of the edited partition, the pinned items kept there."""
        rows, noise, sigma, weights = self._measured(stack, cfg)
        rows = torch.from_numpy(rows).to(device)
        labels = torch.as_tensor(np.asarray(start.labels), device=device).long()
        centers = partition_means(rows, labels, rows[:cfg.k].clone())
        history, centers, d2, labels = yield from _progress_only(lloyd_steps(
            rows, centers, cfg, (rows.shape[1],), "Refine: Lloyd iterations", pinned=pinned))
        state = CellKMeansState(centers.cpu().numpy(), noise, np.asarray(sigma, np.float32), weights)
        return self._result(stack, cfg, state, d2, labels, history)

    def predict(self, result: ClusteringResult, stack: Stack, device: torch.device, batch_size: int | None = None):
        """Each new crop prepared as the fitted ones were (its own background, the fitted smoothing), then its
        nearest centroid."""
        state, cfg = result.state, self.config_of(result)
        views = self._views(stack, cfg, state.noise, float(state.sigma))
        rows = torch.from_numpy(_joined(views, state.weights)).to(device)
        d2, labels = assign(rows, torch.from_numpy(state.centers).to(device))
        return self.predicted(result, labels=labels.cpu().numpy(), scores=d2.cpu().numpy())

    # ---- the pieces ---------------------------------------------------------------------------------------
    def _measured(self, stack: Stack, cfg: CellKMeansConfig):
        """What a fit compares: the rows (N, D), with the noise, the smoothing and the views' weights they were made
        with (the same for every seed: they are the data's, not the run's)."""
        noise, sigma = self._scales(stack, cfg)
        views = self._views(stack, cfg, noise, sigma)
        weights = np.array([1.0 / max(float(np.sqrt(((v - v.mean(0)) ** 2).sum(1).mean())), 1e-12) for v in views])
        return _joined(views, weights), noise, sigma, weights.astype(np.float32)

    @staticmethod
    def _scales(stack: Stack, cfg: CellKMeansConfig) -> tuple[np.ndarray, float]:
        """The background noise per channel and the smoothing in pixels, from the masks of a seeded sample."""
        rng = np.random.default_rng(0)
        index = np.sort(rng.choice(stack.n, RADIUS_SAMPLE, replace=False)) if stack.n > RADIUS_SAMPLE else np.arange(stack.n)
        x = _channels_last(stack.take(index))
        level = cells.border_background(x) if cfg.background == "ring" else np.zeros((len(x), x.shape[-1]), x.dtype)
        noise = cells.noise_levels(x, level)
        radius = np.sqrt(cells.object_masks(x, level, noise).sum((1, 2)) / np.pi)
        return noise.astype(np.float32), float(cfg.scale * np.median(radius))

    @staticmethod
    def _views(stack: Stack, cfg: CellKMeansConfig, noise: np.ndarray, sigma: float) -> list[np.ndarray]:
        """The views compared, each (N, D_v) float32: the prepared crops smoothed by ``sigma`` and, with ``detail``
        (and ``sigma`` > 0), the prepared crops themselves; read ``BLOCK`` items at a time."""
        scales = [sigma, 0.0] if cfg.detail and sigma > 0 else [sigma]
        parts = [[] for _ in scales]
        for _, b in stack.batches(BLOCK):
            crops = prepared(_channels_last(b), cfg, noise)[0]
            for part, s in zip(parts, scales):
                part.append(cells.smoothed_rows(crops, s))
        return [np.concatenate(p) for p in parts]

    def _result(self, stack, cfg, state, d2, labels, history) -> ClusteringResult:
        """The result: the members' mean prepared crops (full resolution) as prototypes, each item's pose."""
        k, labels_np = cfg.k, labels.cpu().numpy()
        sums = np.zeros((k, *stack.item_shape[:2], stack.channels), np.float64)
        poses = []
        for start, b in stack.batches(BLOCK):
            crops, pose = prepared(_channels_last(b), cfg, state.noise)
            np.add.at(sums, labels_np[start:start + len(b)], crops)
            poses.append(pose)
        counts = np.bincount(labels_np, minlength=k).astype(np.float64)
        protos = (sums / np.maximum(counts, 1)[:, None, None, None]).astype(np.float32).reshape(k, *stack.item_shape)
        return self.result(cfg, state, labels=labels_np, scores=d2.cpu().numpy(), prototypes=protos, history=history,
                           params={"pose": np.concatenate(poses).astype(np.float32)})


register(CellKMeans())
