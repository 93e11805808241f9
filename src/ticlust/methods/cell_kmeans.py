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

Transmitted light (stained smears and sections; ``illumination``: found from the data, or declared): the pixels
are optical densities, and the crops are compared by descriptors of their central object (``features.cells``:
size and outline, nucleus and lobes, the stains' mix, texture) rather than by their pixels. On stained blood
smears the class lies in fine structure and colour, a neighbouring red cell fills much of each crop and the cell
may point any way: pixel views (smoothed or not) lose there (benchmarks/results/real_cells.md, docs/cell_kmeans.md).
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
    # under Advanced: a form shows at most three essentials (scale, pose, illumination)
    detail: bool = param(True, "Also compare the crops pixel by pixel, the two views (smoothed, pixels) weighted equally "
                         "(each scaled to the same mean spread)")
    pose: str = param("none", "Undo each object's pose before comparing: none, centre (centre of mass to the crop's "
                      "centre) or centre+axis (and the major axis along +x: any orientation)",
                      choices=("none", "centre", "centre+axis"), essential=True)
    mask: bool = param(False, "Set everything outside each object's mask (Otsu on the channels' contrast) to the "
                       "background: neighbours and debris in the crop no longer count")
    illumination: str = param("auto", "How the crops were lit: dark (fluorescence: objects emit, brighter than the "
                              "background), bright (transmitted light: stains absorb, e.g. H&E, Giemsa smears; the "
                              "crops are compared by descriptors of their central object) or auto (bright when the "
                              "crops' centres are darker than their rings in every channel)",
                              choices=("auto", "dark", "bright"), essential=True)
    background: str = param("ring", "Each crop's background level per channel, taken off first: ring (the median of "
                            "its outer pixels) or none", choices=("ring", "none"))
    n_init: int = param(20, "K-means runs from different k-means++ starts; the lowest distortion is kept (real cells "
                        "leave basins of near-equal distortion: 10 starts miss the best one on some seeds)", low=1)
    max_iter: int = param(300, "Most Lloyd iterations per run", low=1)
    tol: float = param(1e-4, "Stop when the centroids move less than this (relative to the data's variance)", low=0.0)
    batch_size: int = param(8192, "Items per batch when computing distances", low=1, gui=False)


@dataclass
class CellKMeansState(FittedState):
    centers: np.ndarray      # (K, D) centroids of the smoothed crops
    noise: np.ndarray        # (C,) the background noise per channel (the masks' units)
    sigma: np.ndarray        # () the smoothing in pixels: scale × the fitted objects' median radius
    weights: np.ndarray      # (V,) each view's weight (1 / its rows' RMS spread about their mean)
    direction: np.ndarray | None = None   # transmitted light: (C,) the objects' stain (optical density)
    centre: np.ndarray | None = None      # transmitted light: (D,) the descriptors' centre
    scale: np.ndarray | None = None       # transmitted light: (D,) and their scale (cells.descriptor_scales)


def prepared(x: np.ndarray, cfg: CellKMeansConfig, noise: np.ndarray,
             direction: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Crops (B, H, W, C) background-free (transmitted light, ``direction`` given: as optical density), masked and
    posed as ``cfg`` says; with the poses (B, 3)."""
    if direction is None:
        level = cells.border_background(x) if cfg.background == "ring" else np.zeros((len(x), x.shape[-1]), x.dtype)
        out = x - level[:, None, None, :]
    else:
        out = cells.optical_density(x)
    pose = np.zeros((len(x), 3))
    if cfg.mask or cfg.pose != "none":
        masks = cells.object_masks(x, level, noise) if direction is None else cells.central_objects(out @ direction)
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


def _light(stack: Stack, x: np.ndarray) -> np.ndarray:
    """Items of ``stack`` (scaled to its range) back on the data's own zero, in the range's units: optical density
    is a ratio to the light, so it needs the sensor's zero, not the stack's darkest value."""
    return x + np.float32(stack.lo / (stack.hi - stack.lo))


class CellKMeans(Method):
    name, title, paper = "cell-kmeans", "Cell K-means (background-free, smoothed at the cells' size)", "baseline for real cells"
    config, state, inputs = CellKMeansConfig, CellKMeansState, ("images",)
    caution = ("For crops of cells or nuclei: compares stain amounts and coarse shape (fluorescence) or descriptors of "
               "the central object (transmitted light, stained smears); for fine structure (digits) set scale 0 or use "
               "an aligning method.")

    def train(self, stack: Stack, cfg: CellKMeansConfig, device: torch.device, seed: int):
        rng = seed_everything(seed)
        yield Progress(0, 1, float("nan"), "measuring the cells")
        rows, fitted = self._measured(stack, cfg)
        rows = torch.from_numpy(rows).to(device)
        best = None
        for run in range(cfg.n_init):
            centers = yield from kmeans_plus_plus_steps(rows, cfg.k, rng)
            history, centers, d2, labels = yield from _progress_only(lloyd_steps(
                rows, centers, cfg, (rows.shape[1],), f"Lloyd iterations (run {run + 1} of {cfg.n_init})"))
            if best is None or history[-1] < best[0][-1]:
                best = (history, centers, d2, labels)
        history, centers, d2, labels = best
        return self._result(stack, cfg, CellKMeansState(centers.cpu().numpy(), **fitted), d2, labels, history)

    def refine(self, stack: Stack, cfg: CellKMeansConfig, start: ClusteringResult, pinned: torch.Tensor,
               device: torch.device):
        """Lloyd iterations from the centroids of the edited partition, the pinned items kept there."""
        rows, fitted = self._measured(stack, cfg)
        rows = torch.from_numpy(rows).to(device)
        labels = torch.as_tensor(np.asarray(start.labels), device=device).long()
        centers = partition_means(rows, labels, rows[:cfg.k].clone())
        history, centers, d2, labels = yield from _progress_only(lloyd_steps(
            rows, centers, cfg, (rows.shape[1],), "Refine: Lloyd iterations", pinned=pinned))
        return self._result(stack, cfg, CellKMeansState(centers.cpu().numpy(), **fitted), d2, labels, history)

    def predict(self, result: ClusteringResult, stack: Stack, device: torch.device, batch_size: int | None = None):
        """Each new crop prepared as the fitted ones were (its own background, the fitted smoothing or stain and
        descriptor scales), then its nearest centroid."""
        state, cfg = result.state, self.config_of(result)
        if state.direction is not None:
            rows = ((self._descriptors(stack, state.direction) - state.centre) / state.scale).astype(np.float32)
        else:
            rows = _joined(self._views(stack, cfg, state.noise, float(state.sigma)), state.weights)
        d2, labels = assign(torch.from_numpy(rows).to(device), torch.from_numpy(state.centers).to(device))
        return self.predicted(result, labels=labels.cpu().numpy(), scores=d2.cpu().numpy())

    # ---- the pieces ---------------------------------------------------------------------------------------
    def _measured(self, stack: Stack, cfg: CellKMeansConfig) -> tuple[np.ndarray, dict]:
        """What a fit compares: the rows (N, D), with what they were made with (the state's fields but the
        centroids; the same for every seed: they are the data's, not the run's)."""
        noise, sigma, direction = self._scales(stack, cfg)
        if direction is not None:
            groups = self._descriptors(stack, direction, joined=False)
            centre, scale = cells.descriptor_scales(groups)
            rows = (np.concatenate(list(groups.values()), 1) - centre) / scale
            return rows.astype(np.float32), dict(noise=noise, sigma=np.asarray(0.0, np.float32),
                                                 weights=np.ones(1, np.float32), direction=direction,
                                                 centre=centre, scale=scale)
        views = self._views(stack, cfg, noise, sigma)
        weights = np.array([1.0 / max(float(np.sqrt(((v - v.mean(0)) ** 2).sum(1).mean())), 1e-12) for v in views])
        return _joined(views, weights), dict(noise=noise, sigma=np.asarray(sigma, np.float32),
                                             weights=weights.astype(np.float32))

    @staticmethod
    def _scales(stack: Stack, cfg: CellKMeansConfig) -> tuple[np.ndarray, float, np.ndarray | None]:
        """From a seeded sample: the background noise per channel, the smoothing in pixels (from the objects' masks)
        and, in transmitted light, the objects' stain (else None)."""
        rng = np.random.default_rng(0)
        index = np.sort(rng.choice(stack.n, RADIUS_SAMPLE, replace=False)) if stack.n > RADIUS_SAMPLE else np.arange(stack.n)
        x = _channels_last(stack.take(index))
        if cfg.illumination == "bright" or (cfg.illumination == "auto" and cells.absorbs(_light(stack, x))):
            od = cells.optical_density(_light(stack, x))
            return np.ones(x.shape[-1], np.float32), 0.0, cells.stain_direction(od)
        level = cells.border_background(x) if cfg.background == "ring" else np.zeros((len(x), x.shape[-1]), x.dtype)
        noise = cells.noise_levels(x, level)
        radius = np.sqrt(cells.object_masks(x, level, noise).sum((1, 2)) / np.pi)
        return noise.astype(np.float32), float(cfg.scale * np.median(radius)), None

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

    @staticmethod
    def _descriptors(stack: Stack, direction: np.ndarray, joined: bool = True):
        """Transmitted light: the central object's descriptors (``cells.object_descriptors``) of every crop, read
        ``BLOCK`` items at a time: their named groups, or (``joined``) one (N, D) array."""
        parts = []
        for _, b in stack.batches(BLOCK):
            od = cells.optical_density(_light(stack, _channels_last(b)))
            parts.append(cells.object_descriptors(od, cells.central_objects(od @ direction)))
        groups = {name: np.concatenate([p[name] for p in parts]) for name in parts[0]}
        return np.concatenate(list(groups.values()), 1) if joined else groups

    def _result(self, stack, cfg, state, d2, labels, history) -> ClusteringResult:
        """The result: the members' mean prepared crops (full resolution) as prototypes, each item's pose."""
        k, labels_np = cfg.k, labels.cpu().numpy()
        sums = np.zeros((k, *stack.item_shape[:2], stack.channels), np.float64)
        poses = []
        for start, b in stack.batches(BLOCK):
            b = _channels_last(b) if state.direction is None else _light(stack, _channels_last(b))
            crops, pose = prepared(b, cfg, state.noise, state.direction)
            np.add.at(sums, labels_np[start:start + len(b)], crops)
            poses.append(pose)
        counts = np.bincount(labels_np, minlength=k).astype(np.float64)
        protos = (sums / np.maximum(counts, 1)[:, None, None, None]).astype(np.float32).reshape(k, *stack.item_shape)
        return self.result(cfg, state, labels=labels_np, scores=d2.cpu().numpy(), prototypes=protos, history=history,
                           params={"pose": np.concatenate(poses).astype(np.float32)})


register(CellKMeans())
