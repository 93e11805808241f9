"""Shape K-means with Fisher–Rao and Wasserstein landmark distances (Gattone, De Sanctis, Puechmorel
& Nicol, "On the geodesic distance in shapes K-means clustering", Entropy 2018).

Each landmark k of a Procrustes-aligned shape is a bivariate Gaussian N(μ_k, Σ_k) whose mean is the
landmark position and whose variance is the landmark's variability across the population (Type I:
per landmark, shared by all clusters) or across the shape's cluster (Type II: per landmark and
cluster, re-estimated at every iteration). Two shapes are compared by summing (L1, Eq. 13) or
root-sum-squaring (L2, Eq. 14) the per-landmark distances: Fisher–Rao under the round model
N(μ, σ²I), under the diagonal model (Eq. 7, in a stable asinh form) or the 2-Wasserstein distance
(Eq. 10). K-means alternates assignment and Euclidean-mean centres from random partitions; all
random starts run together as one batch of tensors, the one with the lowest total distance is kept.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np
import torch

from ..errors import InputError
from ..transforms.procrustes import align_to, procrustes_align
from ..result import ClusteringResult, FittedState
from ..events import Forecast, Progress, Snapshot
from ..kernels import keep_pinned, kmeans_plus_plus, squared_distances
from .base import Method, param, register, seed_everything

DISTANCES = ("fisher-rao-round", "fisher-rao-diagonal", "wasserstein")
_SQRT8 = math.sqrt(8.0)
_TWO_SQRT2 = 2.0 * math.sqrt(2.0)


@dataclass
class ShapeKMeansConfig:
    k: int = 2
    distance: str = param("fisher-rao-diagonal", "Landmark distance: Fisher–Rao (round or diagonal Gaussian model) or 2-Wasserstein. "
                          "Measured (benchmarks/results/shape_table.md): on few landmarks with weak shape groups (mice T2, 6 "
                          "landmarks) procrustes-kmeans is better, ARI 0.27 vs 0.24, and 10-25x faster on 100-point contours",
                          choices=DISTANCES, essential=True)
    type: int = param(2, "1: landmark variances shared by all clusters; 2: variances per landmark and cluster, updated each iteration",
                      choices=(1, 2), essential=True)
    combine: str = param("l1", "Shape distance: sum of landmark distances (Eq. 13, the paper's) or their root sum of squares (Eq. 14)",
                         choices=("l1", "l2"))
    round_variance: str = param("pooled", "Round model: one variance for all landmarks (the paper's dr) or one per landmark",
                                choices=("pooled", "per-landmark"))
    n_init: int = param(10, "Random starts run together; the lowest total distance is kept", low=1)
    init: str = param("random-partition", "Start from a random partition (the paper) or from k-means++ on the aligned coordinates",
                      choices=("random-partition", "k-means++"))
    max_iter: int = param(100, "Most K-means iterations per start", low=1)
    shape_variance: str = param("own", "Type II: a shape carries its own cluster's variances (the paper's Sec. 4.2) or those of the centre it is compared with",
                                choices=("own", "centre"))
    warm_start: bool = param(True, "Type II refines the best Type I partition (off: Type II from every random start, as the paper)")
    align: bool = param(True, "Generalised Procrustes alignment first (off: the shapes are already registered)", essential=True)
    scale: bool = param(True, "The alignment removes size too (shape); off: rotation and translation only, so size "
                              "differences count (form): when every shape is in one unit and groups differ in size, e.g. "
                              "mice T2 ARI 0.24 -> 0.43 (dw 0.53), schizophrenia 0.01 -> 0.39, cell treatment 0.04 -> 0.22")
    variance_floor: float = param(1e-3, "Smallest variance, relative to the mean landmark variance (keeps tiny clusters finite)",
                                  low=1e-12, gui=False)
    batch_size: int = param(4096, "Shapes per batch when assigning new shapes", low=1, gui=False)


# ---- distances between Gaussians (torch, broadcasting) ---------------------------------------------
def fisher_rao_univariate(m1, s1, m2, s2) -> torch.Tensor:
    """Fisher–Rao distance between N(m1, s1²) and N(m2, s2²): 2√2 asinh(√(Δm² + 2Δs²) / √(8 s1 s2)).

    The same value as the paper's Eq. 7 term (√2 ln of the ratio of half-plane distances), but
    without its cancellation for nearby Gaussians.
    """
    m1, s1, m2, s2 = (torch.as_tensor(v, dtype=torch.float64) for v in (m1, s1, m2, s2))
    spread = torch.sqrt((m1 - m2) ** 2 + 2.0 * (s1 - s2) ** 2)
    return _TWO_SQRT2 * torch.asinh(spread / (_SQRT8 * torch.sqrt(s1 * s2)))


def fisher_rao_diagonal(mu1, sd1, mu2, sd2) -> torch.Tensor:
    """Eq. 7: Fisher–Rao distance between Gaussians with diagonal covariances (coordinates on the
    last axis, standard deviations ``sd``): the root sum of squares of the univariate distances."""
    return torch.sqrt((fisher_rao_univariate(mu1, sd1, mu2, sd2) ** 2).sum(-1))


def fisher_rao_round(mu1, s1, mu2, s2) -> torch.Tensor:
    """Fisher–Rao distance between round bivariate Gaussians N(μ1, s1²I) and N(μ2, s2²I).

    Their metric (|dμ|² + 4 ds²)/s² is four times the hyperbolic metric of (μ/2, s), so the distance
    is 4 asinh(√(|Δμ|² + 4Δs²) / (4 √(s1 s2))). ``mu`` (..., 2), ``s`` (...).
    """
    mu1, s1, mu2, s2 = (torch.as_tensor(v, dtype=torch.float64) for v in (mu1, s1, mu2, s2))
    spread = torch.sqrt(((mu1 - mu2) ** 2).sum(-1) + 4.0 * (s1 - s2) ** 2)
    return 4.0 * torch.asinh(spread / (4.0 * torch.sqrt(s1 * s2)))


def wasserstein_gaussian(mu1, cov1, mu2, cov2) -> torch.Tensor:
    """2-Wasserstein distance between bivariate Gaussians with full covariances (..., 2, 2):
    √(|Δμ|² + tr Σ1 + tr Σ2 − 2 tr (Σ1^½ Σ2 Σ1^½)^½), using tr √M = √(tr M + 2√det M) for 2×2 M."""
    mu1, cov1, mu2, cov2 = (torch.as_tensor(v, dtype=torch.float64) for v in (mu1, cov1, mu2, cov2))
    tr_prod = (cov1 * cov2.transpose(-1, -2)).sum((-1, -2))                       # tr(Σ1 Σ2)
    det = torch.linalg.det(cov1).clamp_min(0) * torch.linalg.det(cov2).clamp_min(0)
    cross = torch.sqrt((tr_prod + 2.0 * torch.sqrt(det)).clamp_min(0))
    bures = (torch.diagonal(cov1, 0, -2, -1).sum(-1) + torch.diagonal(cov2, 0, -2, -1).sum(-1) - 2.0 * cross).clamp_min(0)
    return torch.sqrt(((mu1 - mu2) ** 2).sum(-1) + bures)


def wasserstein_diagonal(mu1, sd1, mu2, sd2) -> torch.Tensor:
    """2-Wasserstein distance for diagonal covariances: √(|Δμ|² + |sd1 − sd2|²)."""
    mu1, sd1, mu2, sd2 = (torch.as_tensor(v, dtype=torch.float64) for v in (mu1, sd1, mu2, sd2))
    return torch.sqrt(((mu1 - mu2) ** 2).sum(-1) + ((sd1 - sd2) ** 2).sum(-1))


def landmark_distances(distance: str, mu1, sd1, mu2, sd2) -> torch.Tensor:
    """Per-landmark distance (...,) between Gaussians given by means (..., 2) and sds (..., 2).

    The round model reads the (equal) first sd column as its isotropic sd.
    """
    if distance == "fisher-rao-diagonal":
        return fisher_rao_diagonal(mu1, sd1, mu2, sd2)
    if distance == "fisher-rao-round":
        return fisher_rao_round(mu1, sd1[..., 0], mu2, sd2[..., 0])
    if distance == "wasserstein":
        return wasserstein_diagonal(mu1, sd1, mu2, sd2)
    raise InputError(f"Unknown distance {distance!r}: choose one of {', '.join(DISTANCES)}.")


def shape_distances(distance: str, combine: str, x, sd_x, centres, sd_c) -> torch.Tensor:
    """D(S_i, c_g) for every shape and centre.

    ``x`` (..., n, L, 2) shapes with sds ``sd_x`` (..., n, 1 or G, L, 2) (a shape's variances may
    depend on the centre it is compared with), ``centres`` (..., G, L, 2) with sds ``sd_c``;
    returns (..., n, G), L1 (Eq. 13) or L2 (Eq. 14) over landmarks.
    """
    per = landmark_distances(distance, x.unsqueeze(-3), sd_x, centres.unsqueeze(-4), sd_c.unsqueeze(-4))
    return per.sum(-1) if combine == "l1" else torch.sqrt((per ** 2).sum(-1))


# ---- the algorithm -----------------------------------------------------------------------------------
def model_variances(cfg: ShapeKMeansConfig, var: torch.Tensor, floor: float) -> torch.Tensor:
    """Coordinate variances (..., L, 2) turned into the model's: diagonal as is, round isotropic
    (pooled over all landmarks, or per landmark), floored."""
    if cfg.distance == "fisher-rao-round":
        if cfg.round_variance == "pooled":
            var = var.mean((-2, -1), keepdim=True).expand_as(var)
        else:
            var = var.mean(-1, keepdim=True).expand_as(var)
    return var.clamp_min(floor)


def cluster_moments(x: torch.Tensor, onehot: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Counts (R, G), means (R, G, L, 2) and ML variances (R, G, L, 2) of each start's clusters."""
    counts = onehot.sum(1)
    denom = counts.clamp_min(1)[..., None, None]
    means = torch.einsum("rng,nlc->rglc", onehot, x) / denom
    second = torch.einsum("rng,nlc->rglc", onehot, x * x) / denom
    return counts, means, (second - means * means).clamp_min(0)


def _distances(cfg, x, labels, means, sds):
    """(R, n, G) distances; in Type II a shape carries the variances of its own cluster (Sec. 4.2)."""
    if cfg.type == 2 and cfg.shape_variance == "centre":
        sd_x = sds.unsqueeze(1)                                                              # (R, 1, G, L, 2)
    elif cfg.type == 2:
        own = torch.gather(sds, 1, labels[:, :, None, None].expand(-1, -1, *sds.shape[2:]))   # (R, n, L, 2)
        sd_x = own.unsqueeze(2)
    else:
        sd_x = sds[:, :1].unsqueeze(1)                                                       # (R, 1, 1, L, 2)
    return shape_distances(cfg.distance, cfg.combine, x.unsqueeze(0), sd_x, means, sds)


def _fill_empty(labels: torch.Tensor, dist: torch.Tensor, k: int, pinned: torch.Tensor | None = None) -> torch.Tensor:
    """Give every empty cluster the shape farthest from its own centre (per start), never a pinned one."""
    counts = torch.nn.functional.one_hot(labels, k).sum(1)
    if bool((counts > 0).all()):
        return labels
    labels = labels.clone()
    for r in torch.nonzero((counts == 0).any(1)).flatten().tolist():
        own = dist[r].gather(1, labels[r][:, None])[:, 0].clone()
        for g in torch.nonzero(counts[r] == 0).flatten().tolist():
            sizes = torch.bincount(labels[r], minlength=k)
            own[sizes[labels[r]] <= 1] = -math.inf          # never empty another cluster
            if pinned is not None:
                own[pinned >= 0] = -math.inf
            i = int(torch.argmax(own))
            labels[r, i] = g
            own[i] = -math.inf
    return labels


def _initial_labels(cfg, x: torch.Tensor, n_starts: int, rng: np.random.Generator) -> torch.Tensor:
    n = x.shape[0]
    if cfg.init == "random-partition":
        return torch.from_numpy(rng.integers(cfg.k, size=(n_starts, n))).to(x.device)
    flat = x.reshape(n, -1)
    rows = [squared_distances(flat, kmeans_plus_plus(flat, cfg.k, rng)).argmin(1) for _ in range(n_starts)]
    return torch.stack(rows)


def _centre_model(cfg, x, labels, shared_var, floor):
    onehot = torch.nn.functional.one_hot(labels, cfg.k).to(x.dtype)
    counts, means, var = cluster_moments(x, onehot)
    if cfg.type == 1:
        var = shared_var.expand_as(means)
    return means, torch.sqrt(model_variances(cfg, var, floor))


def _shared_variances(cfg, x: torch.Tensor) -> tuple[torch.Tensor, float]:
    """Type I variances (per landmark and coordinate, over all shapes) and the variance floor.

    Identical shapes have no variance at all; the floor then falls back to a tiny fraction of the
    squared coordinate scale so that every distance stays finite.
    """
    shared_var = x.var(0, unbiased=False)
    mean_var = float(shared_var.mean())
    if mean_var > 0:
        return shared_var, cfg.variance_floor * mean_var
    return shared_var, 1e-12 * max(float((x * x).mean()), 1.0)


def shape_kmeans(cfg: ShapeKMeansConfig, x: torch.Tensor, labels: torch.Tensor, pinned: torch.Tensor | None = None):
    """Batched K-means over R starts from ``labels`` (R, n); yields (iteration, totals (R,), labels,
    means, sds) after each assignment step and stops when no start changes any label.
    ``pinned`` (n,): clusters the user fixed shapes to (-1: free); those shapes keep them."""
    shared_var, floor = _shared_variances(cfg, x)
    active = torch.ones(labels.shape[0], dtype=torch.bool, device=x.device)
    for it in range(1, cfg.max_iter + 1):
        means, sds = _centre_model(cfg, x, labels, shared_var, floor)
        dist = _distances(cfg, x, labels, means, sds)
        new = keep_pinned(_fill_empty(dist.argmin(-1), dist, cfg.k, pinned), pinned)
        totals = dist.gather(2, new[:, :, None])[:, :, 0].sum(1)
        changed = (new != labels).any(1)
        labels = torch.where(active[:, None], new, labels)
        active = active & changed
        yield it, totals, labels, means, sds
        if not bool(active.any()):
            break


def _final(cfg, x, labels):
    """Centres, sds, distances (R, n, G) and totals (R,) of converged partitions."""
    shared_var, floor = _shared_variances(cfg, x)
    means, sds = _centre_model(cfg, x, labels, shared_var, floor)
    dist = _distances(cfg, x, labels, means, sds)
    return means, sds, dist, dist.gather(2, labels[:, :, None])[:, :, 0].sum(1)


def _multi_start(cfg, x: torch.Tensor, starts: torch.Tensor, offset: np.ndarray, stage: str, step0: int, total_steps: int,
                 pinned: torch.Tensor | None = None):
    """Run every start (in chunks that keep the (R, n, G, L, 2) tensors below ~4M numbers), yielding
    events; returns (best labels (n,), its history, final totals (R,)). ``pinned``: as in :func:`shape_kmeans`."""
    n, n_lm = x.shape[:2]
    chunk = max(1, int(4_000_000 // (n * cfg.k * n_lm * 2)))
    shift = torch.as_tensor(offset, device=x.device)
    finals, histories = [], []
    for c0 in range(0, starts.shape[0], chunk):
        labels, hist = starts[c0:c0 + chunk], []
        forecast = Forecast(cfg.max_iter)       # the chunk's iterations, from how many labels still change
        for it, totals, new, means, sds in shape_kmeans(cfg, x, labels, pinned):
            changed, labels = int((new != labels).sum()), new
            unused = labels.shape[0] * (cfg.max_iter - (it if changed == 0 else forecast.total(changed)))
            hist.append(totals)
            best = int(torch.argmin(totals))
            step = min(step0 + c0 * cfg.max_iter + it * labels.shape[0], total_steps)
            yield Progress(step, max(step, total_steps - unused), float(totals[best]) / n, stage)
            yield Snapshot((means[best] + shift).cpu().numpy())
        finals.append(labels)
        hist.append(_final(cfg, x, labels)[3])
        histories.append(torch.stack(hist, 1))                  # (r, iterations + 1)
    labels = torch.cat(finals)
    totals = _final(cfg, x, labels)[3]
    best = int(torch.argmin(totals))
    history = [float(v) for v in histories[best // chunk][best % chunk].cpu()]
    return labels[best], history, totals


def _registered(landmarks: np.ndarray, cfg: ShapeKMeansConfig, device: torch.device):
    """Procrustes registration (None without ``align``), the registered shapes, their consensus, their mean
    position, and the registered shapes centred on it as float64 on ``device`` (centred: accurate variances)."""
    fit = procrustes_align(landmarks, scale=cfg.scale) if cfg.align else None
    aligned, consensus = (fit.aligned, fit.consensus) if fit is not None else (landmarks.copy(), landmarks.mean(0))
    offset = aligned.reshape(-1, 2).mean(0)
    return fit, aligned, consensus, offset, torch.from_numpy(aligned - offset).to(device=device, dtype=torch.float64)


def fit_shapes(landmarks: np.ndarray, cfg: ShapeKMeansConfig, device: torch.device, seed: int):
    """Procrustes registration, then shape K-means from several starts (Type II warm-started by Type I)."""
    rng = seed_everything(seed)
    fit, aligned, consensus, offset, x = _registered(landmarks, cfg, device)
    starts = _initial_labels(cfg, x, cfg.n_init, rng)
    warm = cfg.type == 2 and cfg.warm_start
    total_steps = cfg.n_init * cfg.max_iter + (cfg.max_iter if warm else 0)
    first = dataclasses.replace(cfg, type=1) if warm else cfg
    labels, history, totals = yield from _multi_start(first, x, starts, offset, "shape K-means (Type I)" if warm or cfg.type == 1
                                                      else "shape K-means (Type II)", 0, total_steps)
    if warm:  # Type II refines the best Type I partition
        labels, history2, _ = yield from _multi_start(cfg, x, labels[None], offset, "shape K-means (Type II)",
                                                      cfg.n_init * cfg.max_iter, total_steps)
        history = history + history2
    return _shapes_result(cfg, fit, (aligned, consensus, offset, x), labels, history, totals)


def refine_shapes(landmarks: np.ndarray, cfg: ShapeKMeansConfig, labels: np.ndarray, pinned: torch.Tensor,
                  device: torch.device):
    """Shape K-means of the configured type from an edited partition, the pinned shapes kept where the user put
    them. The edit is the warm start (as Type I's partition is a fit's), so no random starts and no Type I stage."""
    fit, aligned, consensus, offset, x = _registered(landmarks, cfg, device)
    start = torch.from_numpy(np.asarray(labels, np.int64)).to(device)
    labels, history, totals = yield from _multi_start(cfg, x, start[None], offset, f"Refine: shape K-means (Type {cfg.type})",
                                                      0, cfg.max_iter, pinned.to(device))
    return _shapes_result(cfg, fit, (aligned, consensus, offset, x), labels, history, totals)


def _shapes_result(cfg, fit, registered, labels, history, totals) -> ClusteringResult:
    """The result of a converged partition: centres, sds, distances, the registration and its parameters."""
    aligned, consensus, offset, x = registered
    means, sds, dist, _ = _final(cfg, x, labels[None])
    sd = sds[0].cpu().numpy()
    protos = means[0].cpu().numpy() + offset
    return SHAPE_KMEANS.result(
        cfg, ShapeState(protos, sd, consensus), labels=labels.cpu().numpy().astype(np.int64),
        scores=dist[0].cpu().numpy(), prototypes=protos, covariances=_diag_cov(sd ** 2), aligned=aligned,
        aligned_kind="procrustes", history=history,
        extras={"start_totals": totals.cpu().numpy(), "consensus": consensus},
        params={"procrustes_matrix": fit.matrix, "procrustes_offset": fit.offset} if fit is not None else {})


def _diag_cov(var: np.ndarray) -> np.ndarray:
    """(K, L, 2) variances -> (K, L, 2, 2) diagonal covariances."""
    cov = np.zeros(var.shape + (2,))
    cov[..., 0, 0], cov[..., 1, 1] = var[..., 0], var[..., 1]
    return cov


@dataclass
class ShapeState(FittedState):
    centres: np.ndarray     # (K, L, 2) cluster mean shapes, in the registered frame
    sds: np.ndarray         # (K, L, 2) per-landmark standard deviations
    consensus: np.ndarray   # (L, 2) the Procrustes consensus new shapes are registered onto


class ShapeKMeans(Method):
    name, title = "shape-kmeans", "Shape K-means (Fisher–Rao / Wasserstein landmarks)"
    config, state, inputs, paper = ShapeKMeansConfig, ShapeState, ("landmarks",), "Gattone et al. 2018, Entropy 20(9):647"
    embeds = "landmarks"   # the object map: each shape in the prototypes' frame

    def train(self, landmarks: np.ndarray, cfg: ShapeKMeansConfig, device: torch.device, seed: int):
        return (yield from fit_shapes(landmarks, cfg, device, seed))

    def refine(self, landmarks: np.ndarray, cfg: ShapeKMeansConfig, start: ClusteringResult, pinned: torch.Tensor,
               device: torch.device):
        return (yield from refine_shapes(landmarks, cfg, start.labels, pinned, device))

    def predict(self, result: ClusteringResult, landmarks: np.ndarray, device: torch.device, batch_size: int | None = None) -> ClusteringResult:
        """Align new shapes to the fitted consensus and assign each to the nearest cluster centre.

        A new shape belongs to no cluster yet, so (in Type II) it is compared with each centre using that
        centre's own variances: the distance it would have as a member of that cluster.
        """
        cfg, state = self.config_of(result), result.state
        if landmarks.shape[1] != state.centres.shape[1]:
            raise InputError(f"The new shapes have {landmarks.shape[1]} landmarks but the result was fitted on {state.centres.shape[1]}: give shapes with the same landmarks.")
        aligned = align_to(landmarks, state.consensus, scale=cfg.scale)[0] if cfg.align else landmarks.copy()
        c = torch.as_tensor(state.centres, dtype=torch.float64, device=device)
        sd = torch.as_tensor(state.sds, dtype=torch.float64, device=device)
        batch_size = batch_size or cfg.batch_size
        scores = torch.cat([shape_distances(cfg.distance, cfg.combine, torch.as_tensor(aligned[i:i + batch_size], dtype=torch.float64, device=device),
                                            sd.unsqueeze(0), c, sd) for i in range(0, aligned.shape[0], batch_size)]).cpu().numpy()
        return self.predicted(result, labels=scores.argmin(1).astype(np.int64), scores=scores,
                              covariances=result.covariances, aligned=aligned, aligned_kind="procrustes")


SHAPE_KMEANS = register(ShapeKMeans())
