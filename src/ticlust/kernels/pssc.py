"""Projected-Scattering Spectral Clustering's pipeline (Villar-Corrales & Morgenshtern, paper 001), shared by
pssc (on the items as they are) and rigid-pssc (on the items posed by a rigid stage): its config and fitted
state, and the fit, refine and predict steps, each returning what the method puts in its result.

Pipeline (each stage a function, all in torch on the CPU or a GPU):

1. scattering transform (J=3, L=8, order 2) of the images zero-padded to 32×32 → 217 paths × 4×4,
   optionally each path divided by its largest spatial norm over the data set (authors' code);
   features are cached on disk by content hash so that a re-run with another K / POC skips this
   (``features.scattering_features``);
2. PCA to 1000 dimensions and POC: drop the n=2 leading principal directions (Eq. 4; ``kernels.pca``);
3. U-SPEC (Sec. 3.3): p' candidates sampled without replacement, k-means → p representatives,
   the k=5 nearest representatives of every item, Gaussian affinities (σ = mean k-NN distance) in a
   sparse N×p matrix, transfer cut (Eq. 6-8) on the p×p graph, row-normalised embedding, k-means
   with restarts (``kernels.spectral``).

The ablations of Table 5 are config flags: ``features`` (scattering | pixels), ``poc`` (0 = off) and
``clustering`` (uspec | kmeans). See docs/pssc.md for every choice the paper leaves open.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch

from ..core.params import param
from ..core.stack import Stack
from ..errors import InputError
from ..events import Progress, Snapshot
from ..features.scattering_features import Scatterer, feature_steps, padded_shape, scattered, scattering_batch
from ..result import Assignments, FittedState
from .kmeans import keep_pinned, lloyd, partition_means, random_init
from .pca import pca_poc_steps
from .spectral import (affinities, extend_embedding, kmeans_restarts, nearest_exact, nearest_exact_steps, nearest_hnsw,
                       transfer_cut)


@dataclass
class PSSCConfig:
    k: int = 10
    features: str = param("scattering", "Features to cluster: the scattering transform (PSSC) or raw pixels (ablation)",
                          choices=("scattering", "pixels"))
    scales: int = param(3, "Scattering scales J (2^J-pixel invariance)", choices=(2, 3, 4), essential=True)
    angles: int = param(8, "Scattering orientations L", low=1, high=16)
    order: int = param(2, "Scattering order", choices=(1, 2))
    pad_to: int = param(32, "Zero-pad images to at least this size (then to a multiple of 2^J)", low=8)
    path_norm: bool = param(True, "Divide each scattering path by its largest spatial norm over the data set (authors' code)")
    pca_dim: int = param(1000, "PCA dimensions kept before POC (capped by N-1 and the feature count)", low=1, essential=True)
    pca_solver: str = param("randomized", "Eigensolver for the PCA covariance: exact eigh, or randomized subspace iteration",
                            choices=("eigh", "randomized"))
    poc: int = param(2, "Leading principal directions removed by POC (0 = no POC, ablation)", low=0)
    clustering: str = param("uspec", "Final clustering: U-SPEC spectral clustering, or k-means (ablation)",
                            choices=("uspec", "kmeans"))
    candidates: int = param(9000, "U-SPEC candidates p' sampled without replacement (capped by N)", low=2)
    representatives: int = param(1000, "U-SPEC representatives p: k-means centres of the candidates (capped at p'/2); "
                                 "for large sets 2000 with 18000 candidates is more accurate (MNIST 70k: +1 point)", low=2, essential=True)
    neighbours: int = param(5, "Nearest representatives per item (k of the k-NN affinity)", low=1)
    kernel_width: str = param("local", "Affinity width: each item's own mean distance to its nearest representatives "
                              "(local; keeps outliers on the graph) or one width for all, U-SPEC's (global)",
                              choices=("local", "global"))
    rep_iter: int = param(10, "Lloyd iterations of the k-means that picks the representatives", low=1)
    knn: str = param("exact", "Nearest-representative search: exact (torch) or HNSW (hnswlib)", choices=("exact", "hnsw"))
    restarts: int = param(10, "k-means restarts on the spectral embedding (the lowest inertia is kept)", low=1)
    kmeans_iter: int = param(300, "Most Lloyd iterations per k-means restart", low=1)
    scattering_backend: str = param("fast", "Scattering code: batched re-implementation on kymatio's filters, or kymatio itself",
                                    choices=("fast", "kymatio"), gui=False)
    batch_size: int = param(32, "Images per scattering step at 32×32 (fewer for larger images; 8× as many on a GPU)",
                            low=1, gui=False)
    predict_batch_size: int = param(256, "Images per batch when assigning new images", low=1, gui=False)
    cache_dir: str = param("", "Folder for a disk cache of the scattering features, reused by later runs on the same "
                           "images (empty: no cache)", gui=False)
    rotation_invariant: bool = param(False, "Scattering combined over orientations and rings about the centre "
                                     "(invariant to turns; measured worse than rigid-pssc on turned digits, benchmarks/results/rotation.md)")


# ---- stage 3: U-SPEC -----------------------------------------------------------------------------
def uspec_sizes(n: int, cfg) -> tuple[int, int, int]:
    """(p', p, k) capped for small data: p' ≤ N, p ≤ p'/2 (k-means must merge candidates), p ≥ K, k ≤ p."""
    p_cand = min(cfg.candidates, n)
    p = max(min(cfg.representatives, p_cand // 2), min(cfg.k, p_cand))
    return p_cand, p, min(cfg.neighbours, p)


def uspec_steps(z: torch.Tensor, cfg, rng: np.random.Generator, seed: int, timing: dict):
    """Generator, stage 3: U-SPEC (Sec. 3.3) on the projected items.

    Returns the items' row-normalised spectral embedding (N, K), the fitted parts ``predict`` needs
    (PSSCState's representatives, sigma, transfer), and the result's extras and params.
    """
    start = time.perf_counter()
    p_cand, p, kn = uspec_sizes(z.shape[0], cfg)
    cand = z[torch.from_numpy(rng.choice(z.shape[0], size=p_cand, replace=False)).to(z.device)]
    reps = random_init(cand, p, rng)
    for it, inertia, reps, _ in lloyd(cand, reps, max_iter=cfg.rep_iter):
        yield Progress(it, cfg.rep_iter, inertia / p_cand, "U-SPEC representatives")
    timing["representatives_s"] = time.perf_counter() - start
    start = time.perf_counter()
    if cfg.knn == "hnsw":
        dist, idx = nearest_hnsw(z, reps, kn, seed)
    else:
        dist, idx = yield from nearest_exact_steps(z, reps, kn)
    sigma = float(dist.double().mean())
    sigma = sigma if sigma > 0 else 1.0
    aff = affinities(dist, sigma, cfg.kernel_width == "local")
    timing["knn_s"] = time.perf_counter() - start
    start = time.perf_counter()
    space, w, eig = transfer_cut(aff, idx, p, cfg.k)
    timing["transfer_cut_s"] = time.perf_counter() - start
    rep_items = nearest_exact(reps, z, 1)[1][:, 0]
    fitted = {"representatives": reps.cpu().numpy(), "sigma": np.float64(sigma), "transfer": w.cpu().numpy(),
              "local_width": np.bool_(cfg.kernel_width == "local")}
    extras = {"embedding": space.cpu().numpy(), "representatives": reps.cpu().numpy(),
              "representative_items": rep_items.cpu().numpy(), "transfer_eigenvalues": eig.cpu().numpy()}
    params = {"nearest_representatives": idx.cpu().numpy(), "representative_affinities": aff.float().cpu().numpy()}
    return space, fitted, extras, params


def restart_steps(stack: Stack, space: torch.Tensor, cfg, rng: np.random.Generator):
    """Generator, the end of stage 3 (or the k-means ablation on z): k-means restarts on ``space``, showing
    the best clusters after the first and the last; returns the lowest-inertia (centres, labels, history)."""
    best = None
    for r, best in kmeans_restarts(space, cfg.k, cfg.restarts, cfg.kmeans_iter, rng):
        yield Progress(r, cfg.restarts, best[2][-1], "k-means restarts")
        if r == 1 or r == cfg.restarts:
            yield Snapshot(cluster_means(stack, best[1].cpu().numpy(), cfg.k))
    return best


# ---- the pipeline ----------------------------------------------------------------------------------
def check_config(cfg, stack: Stack) -> None:
    if cfg.poc >= cfg.pca_dim:
        raise InputError(f"poc = {cfg.poc} removes all {cfg.pca_dim} PCA dimensions: make poc smaller than pca_dim.")
    if cfg.clustering == "uspec" and cfg.representatives < cfg.k:
        raise InputError(f"representatives = {cfg.representatives} is below K = {cfg.k}: U-SPEC needs at least K representatives.")
    if cfg.features == "scattering" and min(padded_shape(*stack.item_shape[:2], cfg.pad_to, cfg.scales)) <= 2 ** cfg.scales:
        raise InputError(f"pad_to = {cfg.pad_to} is too small for J = {cfg.scales}: the padded images must be larger than "
                         f"2^J = {2 ** cfg.scales} pixels, so raise pad_to or lower scales.")


def cluster_means(stack: Stack, labels: np.ndarray, k: int, batch_size: int = 4096) -> np.ndarray:
    """Per-cluster mean images (K, H, W[, C]); an empty cluster gets a blank image."""
    sums = torch.zeros((k, stack.dim), dtype=torch.float64)
    for s, b in stack.batches(batch_size):
        sums.index_add_(0, torch.from_numpy(labels[s:s + len(b)]), torch.from_numpy(b).reshape(len(b), -1).double())
    counts = np.bincount(labels, minlength=k)[:, None]
    return (sums.numpy() / np.maximum(counts, 1)).astype(np.float32).reshape(k, *stack.item_shape)


def medoids(scores: np.ndarray, labels: np.ndarray, k: int) -> np.ndarray:
    """Per cluster, the member closest to the cluster centre (the overall closest item if empty)."""
    out = np.empty(k, dtype=np.int64)
    for c in range(k):
        members = np.flatnonzero(labels == c)
        pool = members if len(members) else np.arange(len(labels))
        out[c] = pool[np.argmin(scores[pool, c])]
    return out


@dataclass
class Embedding:
    """Stages 1-3 up to the final k-means: the space it clusters and what the result and ``predict`` keep."""

    space: torch.Tensor       # (N, E) the U-SPEC embedding, or z for the k-means ablation
    mean: torch.Tensor        # (F,) feature mean of the PCA
    basis: torch.Tensor       # (F, d - poc) PCA basis after POC
    eigvals: torch.Tensor     # the d leading PCA eigenvalues
    scales: np.ndarray | None  # per scattering path divisor (path_norm)
    fitted: dict              # U-SPEC's parts of the state
    extras: dict
    params: dict
    clustering_start: float   # when stage 3 began (perf_counter), for its timing


def embedding_steps(stack: Stack, cfg, device: torch.device, seed: int, rng: np.random.Generator, timing: dict):
    """Generator: features → PCA + POC → U-SPEC embedding (or z itself, the k-means ablation); returns an Embedding."""
    start = time.perf_counter()
    feats, scales = yield from feature_steps(stack, cfg, device, timing)
    timing["features_s"] = time.perf_counter() - start
    yield Progress(1, 4, stage="PCA")
    start = time.perf_counter()
    z, mean, basis, eigvals = yield from pca_poc_steps(feats, cfg.pca_dim, cfg.poc, cfg.pca_solver, device, rng)
    timing["pca_s"] = time.perf_counter() - start
    yield Progress(3, 4, stage="clustering")
    clustering_start = time.perf_counter()
    space, fitted, extras, params = z, {}, {}, {}
    if cfg.clustering == "uspec":
        space, fitted, extras, params = yield from uspec_steps(z, cfg, rng, seed, timing)
    return Embedding(space, mean, basis, eigvals, scales, fitted, extras, params, clustering_start)


@dataclass
class PSSCState(FittedState):
    item_shape: np.ndarray                    # the fitted item shape (new images must match)
    mean: np.ndarray | None = None            # (F,) feature mean of the PCA
    basis: np.ndarray | None = None           # (F, d - poc) PCA basis after POC
    centers: np.ndarray | None = None         # (K, E) k-means centres in the final embedding
    path_scales: np.ndarray | None = None     # per scattering path divisor (path_norm)
    representatives: np.ndarray | None = None  # U-SPEC representatives (p, d - poc)
    sigma: np.ndarray | None = None           # U-SPEC kernel width
    transfer: np.ndarray | None = None        # U-SPEC transfer-cut eigenvectors (p, K)
    local_width: np.ndarray | None = None     # each item's own affinity width (kernel_width="local"); None: global


def fit_steps(stack: Stack, cfg, device: torch.device, seed: int, rng: np.random.Generator):
    """Generator: scattering features → PCA + POC → U-SPEC (or k-means) → k-means restarts on the embedding, with
    the method's seeded generator ``rng``; returns (PSSCState, the result's fields: :func:`clustered`)."""
    timing: dict = {}
    emb = yield from embedding_steps(stack, cfg, device, seed, rng, timing)
    start = time.perf_counter()
    centers, _, history = yield from restart_steps(stack, emb.space, cfg, rng)
    timing["kmeans_s"] = time.perf_counter() - start
    return clustered(stack, cfg, emb, centers, history, timing)


def refine_steps(stack: Stack, cfg, labels: np.ndarray, pinned: torch.Tensor, device: torch.device, seed: int,
                 rng: np.random.Generator):
    """Generator: k-means on the embedding (rebuilt with the fit's ``seed`` and ``rng``) from the centres of the edited
    partition ``labels``, the ``pinned`` items kept where the user put them; an emptied cluster starts from the centre
    of all items. Returns (PSSCState, the result's fields) as :func:`fit_steps`."""
    timing: dict = {}
    emb = yield from embedding_steps(stack, cfg, device, seed, rng, timing)
    pinned = pinned.to(emb.space.device)
    labels = torch.from_numpy(np.asarray(labels, np.int64)).to(emb.space.device)
    centers = partition_means(emb.space, labels, emb.space.mean(0).expand(cfg.k, -1))
    t0, history = time.perf_counter(), []
    for it, inertia, centers, _ in lloyd(emb.space, centers, cfg.kmeans_iter, pinned=pinned):
        history.append(inertia / stack.n)
        yield Progress(it, cfg.kmeans_iter, history[-1], "Refine: k-means from the edit")
    timing["kmeans_s"] = time.perf_counter() - t0
    return clustered(stack, cfg, emb, centers, history, timing, pinned)


def clustered(stack: Stack, cfg, emb: Embedding, centers: torch.Tensor, history: list, timing: dict,
              pinned: torch.Tensor | None = None) -> tuple[PSSCState, dict]:
    """The fitted state and the result's fields from the embedding and its k-means centres: nearest centre (pinned
    items kept), medoids, cluster means."""
    scores = torch.cdist(emb.space, centers)
    labels = keep_pinned(scores.argmin(1), pinned).cpu().numpy()
    medoid_index = medoids(scores.cpu().numpy(), labels, cfg.k)
    extras = {"pca_eigenvalues": emb.eigvals.float().cpu().numpy(), **emb.extras,
              "medoids": np.stack([stack.batch(int(i), int(i) + 1)[0] for i in medoid_index]), "medoid_index": medoid_index}
    state = PSSCState(item_shape=np.asarray(stack.item_shape), mean=emb.mean.float().cpu().numpy(),
                      basis=emb.basis.float().cpu().numpy(), centers=centers.cpu().numpy(), path_scales=emb.scales,
                      **emb.fitted)
    timing["clustering_s"] = time.perf_counter() - emb.clustering_start
    return state, dict(labels=labels, scores=scores.cpu().numpy(), prototypes=cluster_means(stack, labels, cfg.k),
                       history=history, params=emb.params, extras=extras, timing=timing)


def predict_fields(state: PSSCState, cfg, stack: Stack, device: torch.device, batch_size: int | None = None):
    """New images assigned batch by batch: features → stored PCA/POC projection → (U-SPEC) nearest representatives →
    transfer-cut embedding extension D_X⁻¹ A w → nearest embedding centre (the fitted k-means centres). Returns (the
    result's extras, its per-item fields)."""
    fitted = tuple(int(s) for s in state.item_shape)
    if stack.item_shape != fitted:
        raise InputError(f"The new images are {stack.item_shape} but the result was fitted on {fitted}: give images of the same size.")
    mean, basis = torch.from_numpy(state.mean).to(device), torch.from_numpy(state.basis).to(device)
    op = Scatterer(stack.item_shape, cfg, device) if cfg.features == "scattering" else None
    scales = state.path_scales
    centers = torch.from_numpy(state.centers).to(device)
    uspec = cfg.clustering == "uspec"
    if uspec:
        reps, transfer = torch.from_numpy(state.representatives).to(device), torch.from_numpy(state.transfer).to(device)
    out = Assignments(stack.n)     # every step is row by row: each batch's outputs are written as it is done
    for s, b in stack.batches(batch_size or cfg.predict_batch_size):
        f = scattered(op, b, scattering_batch(cfg, op)) if op is not None else torch.as_tensor(b, device=device).reshape(len(b), -1)
        if scales is not None:
            f = (f.reshape(len(b), len(scales), -1) / torch.from_numpy(scales).to(device)[None, :, None]).reshape(len(b), -1)
        z = (f.to(device) - mean) @ basis
        fields = {}
        if uspec:
            dist, idx = nearest_exact(z, reps, min(cfg.neighbours, len(reps)))
            aff = affinities(dist, float(state.sigma), bool(state.local_width))   # a result saved before: global
            z = extend_embedding(aff, idx, transfer)
            fields.update({"embedding": z, "params/nearest_representatives": idx,
                           "params/representative_affinities": aff.float()})
        scores = torch.cdist(z, centers.to(z.dtype))
        out.write(s, {"labels": scores.argmin(1), "scores": scores, **fields})
    extras = {"embedding": out.arrays.pop("embedding")} if uspec else {}
    return extras, out.result_fields()
