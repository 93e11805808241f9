"""Pixel K-means with k-means++ initialisation and Lloyd iterations, in torch on the CPU or a GPU.

The method only: its pieces (``Rows``, ``kmeans_plus_plus``, ``lloyd``, ...) are ``ticlust.kernels.kmeans``,
which the other methods share.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..core.stack import Stack
from ..core.validation import check_same_size
from ..core.device import with_oom_retry
from ..result import ClusteringResult, FittedState
from ..kernels import Rows, kmeans_plus_plus_steps, lloyd_steps, random_init, squared_distances
from .base import Method, param, register, seed_everything


@dataclass
class KMeansConfig:
    k: int = 10
    init: str = param("k-means++", "How the first centroids are chosen", choices=("k-means++", "random"), essential=True)
    max_iter: int = param(300, "Most Lloyd iterations", low=1, essential=True)
    tol: float = param(1e-4, "Stop when the centroids move less than this (relative to the data's variance)", low=0.0)
    batch_size: int = param(8192, "Items per batch when computing distances", low=1, gui=False)


@dataclass
class KMeansState(FittedState):
    centers: np.ndarray   # (K, D) flat centroids


class KMeans(Method):
    name, title, paper = "kmeans", "K-means (pixels)", "baseline"
    config, state, inputs = KMeansConfig, KMeansState, ("images", "vectors")
    embeds = "pixels"   # the object map: the PCA of the items themselves
    #: What of a fit runs on a cluster (``fit_store(..., workers=N)``, docs/cluster.md): Rows.map_chunks per chunk.
    cluster_steps = "the Lloyd E-step, one task per chunk of batch_size items"

    def train(self, stack: Stack, cfg: KMeansConfig, device: torch.device, seed: int):
        rng = seed_everything(seed)
        x = Rows(stack, device, cfg.batch_size)
        centers = (yield from kmeans_plus_plus_steps(x, cfg.k, rng)) if cfg.init == "k-means++" else random_init(x, cfg.k, rng)
        return (yield from self._lloyd(x, stack, cfg, centers, "Lloyd iterations"))

    def refine(self, stack: Stack, cfg: KMeansConfig, start: ClusteringResult, pinned: torch.Tensor, device: torch.device):
        """Lloyd iterations from an edited result's prototypes, the pinned items kept where the user put them."""
        x = Rows(stack, device, cfg.batch_size)
        centers = torch.from_numpy(np.asarray(start.prototypes, np.float32).reshape(cfg.k, -1)).to(device)
        return (yield from self._lloyd(x, stack, cfg, centers, "Refine: Lloyd iterations", pinned))

    def _lloyd(self, x: Rows, stack: Stack, cfg: KMeansConfig, centers: torch.Tensor, stage: str,
               pinned: torch.Tensor | None = None):
        """Lloyd iterations from ``centers`` (events), then the final assignment as the result."""
        history, centers, d2, labels = yield from lloyd_steps(x, centers, cfg, stack.item_shape, stage, pinned=pinned)
        return self.result(cfg, KMeansState(centers.cpu().numpy()), labels=labels.cpu().numpy(), scores=d2.cpu().numpy(),
                           prototypes=centers.reshape(cfg.k, *stack.item_shape).cpu().numpy(), history=history)

    def predict(self, result: ClusteringResult, stack: Stack, device: torch.device, batch_size: int | None = None) -> ClusteringResult:
        """Nearest fitted centroid for each new item, streaming the items in batches."""
        centers = torch.from_numpy(result.state.centers).to(device)
        check_same_size(stack, centers.shape[1])
        d2 = with_oom_retry(lambda bs: torch.cat([squared_distances(torch.from_numpy(b).to(device).reshape(len(b), -1), centers)
                                                  for _, b in stack.batches(bs)]),
                            batch_size or self.config_of(result).batch_size)
        return self.predicted(result, labels=d2.argmin(1).cpu().numpy(), scores=d2.cpu().numpy())


register(KMeans())
