"""U-SPEC's spectral step, shared by PSSC and rigid-spectral: Gaussian affinities on a sparse item x
representative graph, the transfer cut, the extension of the embedding to new items, and k-means restarts
on the embedding."""
from __future__ import annotations

import numpy as np
import torch

from .kmeans import kmeans_plus_plus, lloyd


def affinities(dist: torch.Tensor, sigma: float) -> torch.Tensor:
    """Gaussian kernel on Euclidean distances (Eq. 5)."""
    return torch.exp(-(dist.double() ** 2) / (2.0 * sigma * sigma))


def transfer_cut(aff: torch.Tensor, idx: torch.Tensor, p: int, n_clusters: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Transfer cut on the bipartite graph given by a sparse N×p affinity (values ``aff``, columns ``idx``).

    Ā = Aᵀ D_X⁻¹ A (Eq. 6), L = D_Y^-½ Ā D_Y^-½ (Eq. 7); the eigenvectors v of L with the C largest
    eigenvalues give w = D_Y^-½ v, which solve Eq. 8 on the representatives, and transfer to the items
    as D_X⁻¹ A w. Returns (items' embedding (N, C), w (p, C), eigenvalues (C,)).
    """
    n, k = aff.shape
    dx = aff.sum(1).clamp_min(1e-300)
    weights = (aff[:, :, None] * aff[:, None, :] / dx[:, None, None]).reshape(-1)
    flat = (idx[:, :, None] * p + idx[:, None, :]).reshape(-1)
    abar = torch.zeros(p * p, dtype=aff.dtype, device=aff.device).index_add_(0, flat, weights).reshape(p, p)
    dy = abar.sum(1)
    inv_sqrt = torch.where(dy > 0, dy.clamp_min(1e-300).rsqrt(), torch.zeros_like(dy))
    lap = inv_sqrt[:, None] * abar * inv_sqrt[None, :]
    vals, vecs = torch.linalg.eigh((lap + lap.T) / 2)
    vals, vecs = vals.flip(0)[:n_clusters], vecs.flip(1)[:, :n_clusters]
    w = inv_sqrt[:, None] * vecs
    return extend_embedding(aff, idx, w), w, vals


def extend_embedding(aff: torch.Tensor, idx: torch.Tensor, w: torch.Tensor, normalise: bool = True) -> torch.Tensor:
    """Items' spectral coordinates D_X⁻¹ A w, row-normalised (U-SPEC's embedding) unless told otherwise."""
    dx = aff.sum(1, keepdim=True).clamp_min(1e-300)
    emb = ((aff / dx)[:, :, None] * w[idx]).sum(1)
    if normalise:
        emb = emb / (emb.norm(dim=1, keepdim=True) + 1e-10)
    return emb.float()


def kmeans_restarts(x: torch.Tensor, k: int, restarts: int, max_iter: int, rng: np.random.Generator):
    """Generator: k-means++ + Lloyd, ``restarts`` times; yields after each restart, returns the lowest-inertia
    (centres, labels, history)."""
    best = None
    for r in range(restarts):
        centers = kmeans_plus_plus(x, k, rng)
        history = []
        for _, inertia, centers, labels in lloyd(x, centers, max_iter=max_iter):
            history.append(inertia / x.shape[0])
        if best is None or history[-1] < best[2][-1]:
            best = (centers, labels, history)
        yield r + 1, best
    return best
