"""The object map's maths: each item's invariant features reduced to a few dimensions (a PCA learned on a fit), a 2-D
layout learned on a sample of that embedding (exact t-SNE), and both extended to any other item (projection, then
the layout interpolated from the item's nearest sample items). Pure functions of small arrays (the model never grows
with N), the same in a fit, in a prediction in this process and in a part predicted on a dask worker.

Also the features the method families embed (``pixels``, ``aligned_pixels``) and the map's quality measure
(:func:`neighbour_agreement`). docs/embedding.md says why each choice was made, with the measurements.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..events import drain
from .pca import DUAL_PCA_FEATURES, covariance_product, feature_mean, pca_poc_steps, subspace_iteration, unit_scale

#: Dimensions of the embedding (PCA of a family's features; fewer when the features or the fit have fewer).
EMBED_DIMS = 16
#: Items of a fit whose features the PCA is learned on (a seeded sample when the fit has more).
PCA_SAMPLE = 4000
#: Items the 2-D layout is learned on (exact t-SNE: its cost grows with the square of this); the layout's anchors.
LAYOUT_SAMPLE = 600
#: Sample items whose layout places a new item (inverse squared distance weights in the embedding).
NEIGHBOURS = 10
#: t-SNE's perplexity (capped at a third of the sample for small fits), iterations with early exaggeration and after.
PERPLEXITY = 30.0
EXAGGERATION, EXAGGERATED_ITERATIONS, ITERATIONS = 12.0, 250, 250
#: How close (nats) each row's entropy must come to log(perplexity) when its Gaussian width is searched.
PERPLEXITY_TOL = 1e-5
#: The extras keys of a result's map model (``MapModel``).
EXTRAS = ("map_mean", "map_basis", "map_anchors", "map_coords")


@dataclass
class MapModel:
    """What extends the map to new items: the PCA (``mean`` (F,), ``basis`` (F, E)) and the layout's sample,
    its embedding ``anchors`` (S, E) and their map coordinates ``coords`` (S, 2). Kept in a result's extras."""

    mean: np.ndarray
    basis: np.ndarray
    anchors: np.ndarray
    coords: np.ndarray

    def to_extras(self) -> dict[str, np.ndarray]:
        return dict(zip(EXTRAS, (self.mean, self.basis, self.anchors, self.coords)))

    @classmethod
    def from_extras(cls, extras: dict) -> "MapModel | None":
        """The model in a result's extras, or None (a result made before the map, or without one)."""
        if not all(key in extras for key in EXTRAS):
            return None
        return cls(*(np.asarray(extras[key], np.float32) for key in EXTRAS))

    def embed(self, features, device) -> torch.Tensor:
        """Features (B, F) → their embedding (B, E), float32 on ``device``."""
        x = torch.as_tensor(np.asarray(features, np.float32), device=device).reshape(len(features), -1)
        return (x - torch.from_numpy(self.mean).to(device)) @ torch.from_numpy(self.basis).to(device)

    def place(self, embedding: torch.Tensor) -> torch.Tensor:
        """Map coordinates (B, 2) of embedded items: :func:`interpolate` from the layout's sample."""
        return interpolate(embedding, torch.from_numpy(self.anchors).to(embedding.device),
                           torch.from_numpy(self.coords).to(embedding.device))


# ---- features the families embed -----------------------------------------------------------------
def pixels(images: np.ndarray) -> np.ndarray:
    """Items as flat float32 rows (pixels, or vectors as they are)."""
    return np.asarray(images, np.float32).reshape(len(images), -1)


def aligned_pixels(images: np.ndarray, affine: np.ndarray, displacements: np.ndarray | None = None,
                   device="cpu") -> np.ndarray:
    """Items (B, H, W[, C]) carried onto their own prototype by their warp — the affine maps (B, 2, 3) of
    ``params/affine`` (normalised sampling coordinates, item-on-prototype) plus, for a thin-plate spline,
    ``params/displacements`` (B, g², 2) — as flat rows: what is left of each item once its pose is taken out."""
    from ..core.stack import to_nchw
    from ..transforms.core import affine_grid, identity_points, tps_grid, warp

    x = to_nchw(torch.as_tensor(np.asarray(images, np.float32), device=device))
    size = tuple(x.shape[-2:])
    theta = torch.as_tensor(np.asarray(affine, np.float32), device=device).reshape(len(x), 6)
    grid = affine_grid(theta - torch.eye(2, 3, device=device).reshape(6), size)
    if displacements is not None:
        nu = torch.as_tensor(np.asarray(displacements, np.float32), device=device)
        grid = grid + tps_grid(nu, size) - identity_points(size, device)
    return warp(x, grid, padding_mode="zeros").reshape(len(x), -1).cpu().numpy()


# ---- learning the map on a fit -------------------------------------------------------------------
def learn_pca(features: np.ndarray, dims: int, device, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Mean (F,) and the ``dims`` leading principal axes (F, E) of float32 feature rows (``kernels.pca``; E is at
    most the features' count and the rows' less one; a single row, or rows all alike, give one zero axis)."""
    feats = np.ascontiguousarray(features, np.float32)
    n, f = feats.shape
    if n < 2 or f < 1:
        return feats.mean(0) if n else np.zeros(f, np.float32), np.zeros((f, 1), np.float32)
    # randomized subspace iteration (exact when the features are few): a full eigh of 1,024 features took 38 s on
    # a busy 2-core machine, longer than the whole map should
    d = min(dims, f, n - 1)
    if d + 10 < f and (f <= DUAL_PCA_FEATURES or n >= f) and unit_scale(feats) == 1.0:
        # the same iteration on the covariance known by its products (kernels.pca.covariance_product): never the
        # F×F matrix (1.5 GB of temporaries at 64×64×2 crops; 2.5 of 4 CPU s of a pixel k-means fit of 1,000 crops)
        mean = feature_mean(feats, device)
        _, vecs = subspace_iteration(covariance_product(feats, mean, device), f, d, rng, 2, device)
        basis = vecs.float()
    else:
        _, mean, basis, _ = drain(pca_poc_steps(feats, d, 0, "randomized", device, rng))
    # features far from unit scale (landmarks in 1e30 units) embed at unit scale: the layout's squared distances
    # stay finite in float32 (an exact power of two, 1 for features in the usual range)
    basis = basis / unit_scale(feats)
    return mean.float().cpu().numpy(), _signed(basis.float().cpu().numpy())


def _signed(basis: np.ndarray) -> np.ndarray:
    """Each axis turned so its largest entry is positive: an eigensolver's arbitrary signs made definite."""
    flip = np.sign(basis[np.abs(basis).argmax(0), np.arange(basis.shape[1])])
    return basis * np.where(flip == 0, 1, flip)[None].astype(basis.dtype)


def tsne(points: np.ndarray, perplexity: float = PERPLEXITY) -> np.ndarray:
    """Exact t-SNE (van der Maaten & Hinton 2008) of S points (S, E) into (S, 2), float32 on the CPU in one thread (the
    same sums in the same order on any machine; and on a busy machine, threads waiting on each other made it 25×
    slower at S = 500): Gaussian affinities at the given perplexity (per point by bisection), symmetrised; a start
    from the points' first two coordinates (principal axes: no random start, so the layout is a function of the
    points); early exaggeration, then gradient descent with momentum and per-coordinate gains (Jacobs 1988), the
    learning rate S/48."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _tsne(torch.from_numpy(np.ascontiguousarray(points, np.float32)), perplexity)
    finally:
        torch.set_num_threads(before)


def _tsne(x: torch.Tensor, perplexity: float) -> np.ndarray:
    """:func:`tsne` of a tensor, in the threads set by the caller."""
    s = len(x)
    if s < 4:
        return _start(x).numpy() * 1e4
    p = _affinities(x, min(perplexity, (s - 1) / 3.0))
    exaggerated = p * EXAGGERATION
    y = _start(x)
    update, gains = torch.zeros_like(y), torch.ones_like(y)
    rate = max(s / EXAGGERATION / 4.0, 50.0)
    num = torch.empty(s, s)
    for it in range(EXAGGERATED_ITERATIONS + ITERATIONS):
        early = it < EXAGGERATED_ITERATIONS
        # Student-t kernel 1 / (1 + |y_i - y_j|²) written in place: 3 passes over the S×S matrix, not 8 temporaries
        sq = (y * y).sum(1)
        torch.addmm(sq[None, :].expand(s, s), y, y.T, alpha=-2.0, out=num)
        num.add_((sq + 1.0)[:, None]).reciprocal_()
        num.fill_diagonal_(0.0)
        pq = torch.sub(exaggerated if early else p, num, alpha=1.0 / float(num.sum())).mul_(num)
        # pq is symmetric, so its row sums and pq @ y come from one (3, S) @ (S, S) product: a (S, S) @ (S, 2)
        # product runs ~8x slower on a CPU (a matrix-matrix kernel for a 2-column right side)
        sums = torch.cat([torch.ones(s, 1), y], 1).T @ pq
        grad = 4.0 * (sums[:1].T * y - sums[1:].T)
        gains = torch.where((grad > 0) != (update > 0), gains + 0.2, gains * 0.8).clamp_min(0.01)
        update = (0.5 if early else 0.8) * update - rate * gains * grad
        y = y + update
        y = y - y.mean(0)
    return y.numpy()


def _start(x: torch.Tensor) -> torch.Tensor:
    """The first two coordinates (zero-padded), scaled to a standard deviation of 1e-4 along the first."""
    y = torch.zeros(len(x), 2)
    y[:, :min(2, x.shape[1])] = x[:, :2] - x[:, :2].mean(0)
    scale = float(y[:, 0].std()) if len(x) > 1 else 0.0
    return y * (1e-4 / scale) if scale > 0 else y


def _affinities(x: torch.Tensor, perplexity: float) -> torch.Tensor:
    """Symmetric joint probabilities P (S, S): each row's Gaussian width found by bisection on its entropy (to within
    ``PERPLEXITY_TOL`` nats of log perplexity, the usual tolerance)."""
    d2 = torch.cdist(x, x).pow(2).double()
    d2.fill_diagonal_(float("inf"))
    d2 = d2 / d2[torch.isfinite(d2)].mean().clamp_min(1e-12)       # scale-free: the bisection starts near 1
    target = float(np.log(perplexity))
    lo, hi = torch.zeros(len(x), dtype=torch.float64), torch.full((len(x),), float("inf"), dtype=torch.float64)
    beta = torch.ones(len(x), dtype=torch.float64)
    for _ in range(64):
        logits = -d2 * beta[:, None]
        cond = torch.softmax(logits, 1)
        entropy = -(cond * torch.log_softmax(logits, 1).clamp_min(-1e30)).nansum(1)
        if float((entropy - target).abs().max()) < PERPLEXITY_TOL:
            break                                                   # every row's perplexity found (~25 halvings)
        wider = entropy > target                                    # too flat: narrow the Gaussian (larger beta)
        lo = torch.where(wider, beta, lo)
        hi = torch.where(wider, hi, beta)
        beta = torch.where(torch.isinf(hi), beta * 2.0, (lo + hi) / 2.0)
    p = cond + cond.T
    return (p / p.sum()).float()


def learn_layout(embedding: np.ndarray, rng: np.random.Generator, sample: int = LAYOUT_SAMPLE) -> tuple[np.ndarray, np.ndarray]:
    """The layout's anchors: a seeded sample of at most ``sample`` embedded items (S, E), and their t-SNE
    coordinates (S, 2)."""
    n = len(embedding)
    pick = np.sort(rng.choice(n, sample, replace=False)) if n > sample else np.arange(n)
    anchors = np.ascontiguousarray(embedding[pick], np.float32)
    return anchors, tsne(anchors).astype(np.float32)


def interpolate(embedding: torch.Tensor, anchors: torch.Tensor, coords: torch.Tensor, k: int = NEIGHBOURS,
                chunk: int = 8192) -> torch.Tensor:
    """Each item's map place: the mean of its ``k`` nearest anchors' coordinates, weighted by inverse squared
    distance in the embedding (an anchor itself lands on its own place), chunk by chunk."""
    k = min(k, len(anchors))
    out = []
    for s in range(0, len(embedding), chunk):
        d2 = torch.cdist(embedding[s:s + chunk].float(), anchors.float()).pow(2)
        near, idx = d2.topk(k, dim=1, largest=False)
        w = 1.0 / (near + 1e-12 * (1.0 + near[:, -1:]))
        out.append((w[..., None] * coords[idx]).sum(1) / w.sum(1, keepdim=True))
    return torch.cat(out) if out else torch.zeros((0, 2), device=embedding.device)


# ---- the map's quality ---------------------------------------------------------------------------
def neighbour_agreement(coords, kinds, k: int = 15) -> float:
    """The fraction of each item's ``k`` nearest map neighbours (itself left out) that share its kind, averaged
    over the items: 1 when kinds lie in separate islands, about Σ share² for a map that ignores them."""
    from scipy.spatial import cKDTree

    coords, kinds = np.asarray(coords, np.float64), np.asarray(kinds)
    k = min(k, len(coords) - 1)
    if k < 1:
        return float("nan")
    _, idx = cKDTree(coords).query(coords, k + 1)
    return float((kinds[idx[:, 1:]] == kinds[:, None]).mean())
