"""U-SPEC's spectral step, shared by PSSC and rigid-spectral: the nearest representatives of every item (exact or
HNSW), Gaussian affinities on a sparse item x representative graph, the transfer cut, the extension of the
embedding to new items, and k-means restarts on the embedding."""
from __future__ import annotations

import numpy as np
import torch

from ..events import Progress, drain
from .kmeans import kmeans_plus_plus, lloyd, squared_distances


def affinities(dist: torch.Tensor, sigma: float, local: bool = False) -> torch.Tensor:
    """Gaussian kernel on Euclidean distances (Eq. 5): one width ``sigma`` for every item, or (``local``) each item's
    own width, the mean of its k distances (self-tuning, Zelnik-Manor & Perona 2004; ``sigma`` where that is 0). With
    one width an item far from every representative (debris, a clump) keeps ~all its affinity on one representative,
    which then hangs off the graph; K such near-isolated pieces take the K leading eigenvectors (docs/pssc.md)."""
    d = dist.double()
    width = torch.as_tensor(float(sigma), dtype=d.dtype, device=d.device)
    if local:
        own = d.mean(1, keepdim=True)
        width = torch.where(own > 0, own, width)
    return torch.exp(-(d ** 2) / (2.0 * width * width))


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


def nearest_exact_steps(z: torch.Tensor, reps: torch.Tensor, k: int, chunk: int = 8192):
    """Generator (yields Progress per chunk): exact k nearest representatives, Euclidean distances (N, k)
    ascending and indices (N, k)."""
    dist, idx, steps = [], [], -(-z.shape[0] // chunk)
    for i, s in enumerate(range(0, z.shape[0], chunk)):
        d2, j = torch.topk(squared_distances(z[s:s + chunk], reps), k, dim=1, largest=False)
        dist.append(d2.sqrt())
        idx.append(j)
        yield Progress(i + 1, steps, stage="nearest representatives")
    return torch.cat(dist), torch.cat(idx)


def nearest_exact(z: torch.Tensor, reps: torch.Tensor, k: int, chunk: int = 8192) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact k nearest representatives: Euclidean distances (N, k) ascending and indices (N, k)."""
    return drain(nearest_exact_steps(z, reps, k, chunk))


def nearest_hnsw(z: torch.Tensor, reps: torch.Tensor, k: int, seed: int, ef: int = 64,
                 threads: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Approximate k nearest representatives with an HNSW graph (batched, multi-threaded queries).

    hnswlib's "l2" space returns squared distances: the square root is taken here.
    """
    import hnswlib

    threads = threads or torch.get_num_threads()
    r = reps.cpu().numpy()
    index = hnswlib.Index(space="l2", dim=r.shape[1])
    index.init_index(max_elements=r.shape[0], ef_construction=200, M=16, random_seed=seed)
    index.add_items(r, np.arange(r.shape[0]), num_threads=threads)
    index.set_ef(max(ef, k))
    labels, d2 = index.knn_query(z.cpu().numpy(), k=k, num_threads=threads)
    dev = z.device
    return (torch.from_numpy(np.sqrt(np.maximum(d2, 0))).to(dev), torch.from_numpy(labels.astype(np.int64)).to(dev))
