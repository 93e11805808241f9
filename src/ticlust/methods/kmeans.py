"""Pixel K-means with k-means++ initialisation and Lloyd iterations, in torch on the CPU or a GPU.

``kmeans_plus_plus`` and ``lloyd`` are also the building blocks other methods use for their own
initialisation and final clustering steps.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator

import numpy as np
import torch

from ..data import Stack, check_same_size
from ..device import with_oom_retry
from ..result import ClusteringResult
from .base import Done, MethodSpec, Progress, Snapshot, config_dict, param, register, seed_everything


@dataclass
class KMeansConfig:
    k: int = 10
    init: str = param("k-means++", "How the first centroids are chosen", choices=("k-means++", "random"), essential=True)
    max_iter: int = param(300, "Most Lloyd iterations", low=1, essential=True)
    tol: float = param(1e-4, "Stop when the centroids move less than this (relative to the data's variance)", low=0.0)
    batch_size: int = param(8192, "Items per batch when computing distances", low=1, gui=False)


def squared_distances(x: torch.Tensor, centers: torch.Tensor, x_sq: torch.Tensor | None = None) -> torch.Tensor:
    """Squared Euclidean distances (B, K) between flat items (B, D) and centres (K, D).

    ``x_sq`` (B, 1), the items' squared norms, can be passed in when they are reused across calls.
    """
    if x_sq is None:
        x_sq = (x * x).sum(1, keepdim=True)
    d2 = torch.addmm(x_sq + (centers * centers).sum(1)[None], x, centers.T, alpha=-2.0)
    return d2.clamp_min_(0.0)


def kmeans_plus_plus(x: torch.Tensor, k: int, rng: np.random.Generator, n_trials: int | None = None) -> torch.Tensor:
    """Greedy k-means++ seeding (Arthur & Vassilvitskii; several candidates per step, the best kept)."""
    n = x.shape[0]
    n_trials = n_trials or 2 + int(math.log(k))
    centers = [x[int(rng.integers(n))]]
    closest = squared_distances(x, centers[0][None])[:, 0]
    for _ in range(1, k):
        total = float(closest.sum())
        if total <= 0:  # fewer distinct items than K: pick the rest at random
            centers.append(x[int(rng.integers(n))])
            continue
        p = (closest / closest.sum()).double().cpu().numpy()
        candidates = rng.choice(n, size=n_trials, p=p / p.sum())
        d2 = squared_distances(x, x[candidates])
        potentials = torch.minimum(closest[:, None], d2).sum(0)
        best = int(torch.argmin(potentials))
        centers.append(x[int(candidates[best])])
        closest = torch.minimum(closest, d2[:, best])
    return torch.stack(centers)


def random_init(x: torch.Tensor, k: int, rng: np.random.Generator) -> torch.Tensor:
    return x[torch.from_numpy(rng.choice(x.shape[0], size=k, replace=False)).to(x.device)].clone()


def assign(x: torch.Tensor, centers: torch.Tensor, batch_size: int = 8192,
           x_sq: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Squared distances to every centre (N, K) and the nearest centre (N,), in batches."""
    if x_sq is None:
        x_sq = (x * x).sum(1, keepdim=True)
    d2 = torch.cat([squared_distances(x[i:i + batch_size], centers, x_sq[i:i + batch_size])
                    for i in range(0, x.shape[0], batch_size)])
    return d2, d2.argmin(1)


def lloyd(x: torch.Tensor, centers: torch.Tensor, max_iter: int = 300, tol: float = 1e-4,
          batch_size: int = 8192) -> Iterator[tuple[int, float, torch.Tensor, torch.Tensor]]:
    """Lloyd iterations from ``centers``; yields (iteration, inertia, centres, labels) after each update.

    Stops when no label changes or the total squared centre shift falls below ``tol`` times the
    mean per-feature variance (scikit-learn's rule). An emptied cluster is moved to the item that is
    farthest from its centre.
    """
    tol_abs = tol * float(x.var(0, unbiased=False).mean())
    x_sq = (x * x).sum(1, keepdim=True)
    labels = None
    k = centers.shape[0]
    for it in range(1, max_iter + 1):
        d2, new_labels = assign(x, centers, batch_size, x_sq)
        inertia = float(d2.gather(1, new_labels[:, None]).sum())
        one_hot = torch.nn.functional.one_hot(new_labels, k).to(x.dtype)
        sums = one_hot.T @ x   # a matrix product: much faster than index_add_ on the CPU
        counts = one_hot.sum(0)
        new_centers = sums / counts.clamp_min(1)[:, None]
        empty = torch.nonzero(counts == 0).flatten()
        if len(empty):
            far = torch.argsort(d2.gather(1, new_labels[:, None])[:, 0], descending=True)[: len(empty)]
            new_centers[empty] = x[far]
        shift = float(((new_centers - centers) ** 2).sum())
        converged = labels is not None and bool(torch.equal(labels, new_labels))
        centers, labels = new_centers, new_labels
        yield it, inertia, centers, labels
        if converged or shift <= tol_abs:
            break


def run(stack: Stack, cfg: KMeansConfig, device: torch.device, seed: int):
    rng = seed_everything(seed)
    x = stack.tensor(device, flat=True)
    centers = kmeans_plus_plus(x, cfg.k, rng) if cfg.init == "k-means++" else random_init(x, cfg.k, rng)
    history = []
    for it, inertia, centers, labels in lloyd(x, centers, cfg.max_iter, cfg.tol, cfg.batch_size):
        history.append(inertia / stack.n)
        yield Progress(it, cfg.max_iter, history[-1], "Lloyd iterations")
        yield Snapshot(centers.reshape(cfg.k, *stack.item_shape).cpu().numpy())
    d2, labels = assign(x, centers, cfg.batch_size)
    history.append(float(d2.gather(1, labels[:, None]).sum()) / stack.n)
    protos = centers.reshape(cfg.k, *stack.item_shape).cpu().numpy()
    yield Done(ClusteringResult(labels=labels.cpu().numpy(), scores=d2.cpu().numpy(), prototypes=protos,
                                method="kmeans", config=config_dict(cfg), history=history,
                                state={"centers": centers.cpu().numpy()}))


def predict(result: ClusteringResult, stack: Stack, device: torch.device, batch_size: int = 8192) -> ClusteringResult:
    """Nearest fitted centroid for each new item, streaming the items in batches."""
    centers = torch.from_numpy(result.state["centers"]).to(device)
    check_same_size(stack, centers.shape[1])
    d2 = with_oom_retry(lambda bs: torch.cat([squared_distances(torch.from_numpy(b).to(device).reshape(len(b), -1), centers)
                                              for _, b in stack.batches(bs)]), batch_size)
    return ClusteringResult(labels=d2.argmin(1).cpu().numpy(), scores=d2.cpu().numpy(), prototypes=result.prototypes,
                            method=result.method, config=result.config, state=result.state)


SPEC = register(MethodSpec(name="kmeans", title="K-means (pixels)", config=KMeansConfig, run=run, predict=predict,
                           inputs=("images", "vectors"), paper="baseline"))
