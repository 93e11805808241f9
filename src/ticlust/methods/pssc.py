"""Projected-Scattering Spectral Clustering (Villar-Corrales & Morgenshtern, paper 001).

Pipeline (each stage a function below, all in torch on the CPU or a GPU):

1. scattering transform (J=3, L=8, order 2) of the images zero-padded to 32×32 → 217 paths × 4×4,
   optionally each path divided by its largest spatial norm over the data set (authors' code);
   features are cached on disk by content hash so that a re-run with another K / POC skips this;
2. PCA to 1000 dimensions and POC: drop the n=2 leading principal directions (Eq. 4);
3. U-SPEC (Sec. 3.3): p' candidates sampled without replacement, k-means → p representatives,
   the k=5 nearest representatives of every item, Gaussian affinities (σ = mean k-NN distance) in a
   sparse N×p matrix, transfer cut (Eq. 6-8) on the p×p graph, row-normalised embedding, k-means
   with restarts.

The ablations of Table 5 are config flags: ``features`` (scattering | pixels), ``poc`` (0 = off) and
``clustering`` (uspec | kmeans). See docs/pssc.md for every choice the paper leaves open.
"""
from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..errors import InputError
from ..core.stack import Stack
from ..result import Assignments, ClusteringResult, FittedState
from ..features.invariant_scattering import invariant_features, ring_weights
from ..features.scattering import fast_scattering, kymatio_scattering, n_paths
from ..events import Progress, Snapshot, drain
from ..kernels import (affinities, extend_embedding, keep_pinned, kmeans_restarts, lloyd, partition_means, random_init,
                       squared_distances, transfer_cut)
from .base import Method, param, register, seed_everything

CACHE_VERSION = "pssc-scattering-v1"
FIT_BLOCK = 256   # images a fit reads, scatters (``scattering_batch`` at a time) and reports as one progress step


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


# ---- stage 1: features ---------------------------------------------------------------------------
def padded_shape(h: int, w: int, pad_to: int, scales: int) -> tuple[int, int]:
    """At least pad_to, and a multiple of 2^J."""
    step = 2 ** scales
    return tuple(-(-max(s, pad_to) // step) * step for s in (h, w))


class Scatterer:
    """Zero-pads a batch of (B, H, W[, C]) images and returns flat scattering features (B, C·P·h·w)."""

    def __init__(self, item_shape: tuple[int, ...], cfg: PSSCConfig, device: torch.device):
        h, w = item_shape[:2]
        self.channels = item_shape[2] if len(item_shape) == 3 else 1
        self.hp, self.wp = padded_shape(h, w, cfg.pad_to, cfg.scales)
        self.top, self.left = (self.hp - h) // 2, (self.wp - w) // 2
        self.h, self.w = h, w
        self.device = device
        if cfg.scattering_backend == "kymatio":
            self.op = kymatio_scattering((self.hp, self.wp), cfg.scales, cfg.angles, cfg.order, device)
        else:
            self.op = fast_scattering((self.hp, self.wp), cfg.scales, cfg.angles, cfg.order, device)
        self.paths = n_paths(cfg.scales, cfg.angles, cfg.order)
        self.spatial = (self.hp // 2 ** cfg.scales) * (self.wp // 2 ** cfg.scales)
        self.spatial_side = min(self.hp, self.wp) // 2 ** cfg.scales
        self.invariant = (cfg.scales, cfg.angles, cfg.order, max(1, self.spatial_side // 2)) if cfg.rotation_invariant else None
        if self.invariant:                                 # rotation-invariant: paths × rings (invariant_scattering.py)
            self.spatial = ring_weights(self.hp // 2 ** cfg.scales, self.wp // 2 ** cfg.scales, self.invariant[-1]).shape[0]
        self.dim = self.channels * self.paths * self.spatial

    @torch.no_grad()
    def __call__(self, batch: np.ndarray) -> torch.Tensor:
        x = torch.as_tensor(np.ascontiguousarray(batch), dtype=torch.float32).to(self.device)
        if self.channels > 1:                              # scatter each colour channel separately
            x = x.permute(0, 3, 1, 2).reshape(-1, self.h, self.w)
        padded = torch.zeros((x.shape[0], self.hp, self.wp), dtype=x.dtype, device=x.device)
        padded[:, self.top:self.top + self.h, self.left:self.left + self.w] = x
        s = self.op(padded)
        if self.invariant:
            s = invariant_features(s, *self.invariant)
        return s.reshape(batch.shape[0], self.dim)


def feature_key(stack: Stack, cfg: PSSCConfig, batch_size: int = 4096) -> str:
    """Content hash of the normalised input and every parameter the scattering features depend on."""
    h = hashlib.blake2b(digest_size=20)
    h.update(repr((CACHE_VERSION, stack.item_shape, cfg.scales, cfg.angles, cfg.order, cfg.pad_to)).encode())
    if cfg.rotation_invariant:
        h.update(b"rotation-invariant")
    for _, b in stack.batches(batch_size):
        h.update(np.ascontiguousarray(b, dtype=np.float32).tobytes())
    return h.hexdigest()


def scattering_batch(cfg: PSSCConfig, op: "Scatterer") -> int:
    """Images per scattering step: ``batch_size`` up to 32×32 padded pixels, proportionally fewer for larger
    images. 32 on the CPU: a step's wavelet maps stay in cache while OpenMP's per-step cost stays small (quiet
    2-core machine, 2 threads, MNIST predict: 8 / 32 / 64 per step 2,274 / 2,490 / 2,318 images/s with OpenMP's
    default waiting, 794 / 1,414 / 1,589 with OMP_WAIT_POLICY=PASSIVE); a GPU gets 8× as many per kernel launch."""
    area = op.hp * op.wp
    per_step = cfg.batch_size * (1 if op.device.type == "cpu" else 8)
    return max(1, min(per_step, per_step * 1024 // area))


def scattered(op: "Scatterer", batch: np.ndarray, step: int) -> torch.Tensor:
    """The features of a batch, scattered ``step`` images at a time (``scattering_batch``)."""
    return torch.cat([op(batch[i:i + step]) for i in range(0, len(batch), step)])


def scattering_features(stack: Stack, cfg: PSSCConfig, device: torch.device, timing: dict):
    """Generator: yields Progress while scattering; returns the (N, F) float32 features (cached on disk)."""
    path = None
    if cfg.cache_dir:
        start = time.perf_counter()
        path = Path(cfg.cache_dir) / f"{feature_key(stack, cfg)}.npy"
        timing["hash_s"] = time.perf_counter() - start
        if path.is_file():
            try:
                feats = np.load(path)
                if feats.shape[0] == stack.n:
                    timing["cache_hit"] = True
                    return feats
            except (OSError, ValueError):
                pass                                        # unreadable cache entry: recompute it
    start = time.perf_counter()
    op = Scatterer(stack.item_shape, cfg, device)
    feats = np.empty((stack.n, op.dim), dtype=np.float32)
    step = scattering_batch(cfg, op)
    total = -(-stack.n // FIT_BLOCK)
    for i, (s, batch) in enumerate(stack.batches(FIT_BLOCK)):
        feats[s:s + len(batch)] = scattered(op, batch, step).cpu().numpy()
        yield Progress(i + 1, total, stage="scattering")
    timing["scattering_s"] = time.perf_counter() - start
    timing["cache_hit"] = False
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp.npy")
            np.save(tmp, feats)
            os.replace(tmp, path)
        except OSError:
            pass                                            # a read-only cache only costs speed
    return feats


def path_scales(feats: np.ndarray, groups: int, spatial: int) -> np.ndarray:
    """Largest spatial L2 norm of each scattering path over the data set, (groups,)."""
    out = np.zeros(groups, dtype=np.float32)
    for s in range(0, feats.shape[0], 8192):
        block = feats[s:s + 8192].reshape(-1, groups, spatial)
        np.maximum(out, np.sqrt((block.astype(np.float32) ** 2).sum(-1)).max(0), out=out)
    return np.where(out > 0, out, 1.0).astype(np.float32)


def feature_steps(stack: Stack, cfg: PSSCConfig, device: torch.device, timing: dict):
    """Generator, stage 1: the (N, F) features to cluster; returns them and the per-path divisors (or None).

    With ``path_norm`` the scattering features are divided by each path's largest norm (authors' code),
    in place so that a large data set is not held twice.
    """
    if cfg.features != "scattering":
        return stack.numpy().reshape(stack.n, -1), None
    feats = yield from scattering_features(stack, cfg, device, timing)
    if not cfg.path_norm:
        return feats, None
    op_groups = Scatterer(stack.item_shape, cfg, torch.device("cpu"))
    scales = path_scales(feats, op_groups.channels * op_groups.paths, op_groups.spatial)
    if not feats.flags.writeable:
        feats = np.array(feats)
    feats.reshape(stack.n, len(scales), -1)[...] /= scales[None, :, None]     # in place: no second copy
    return feats, scales


# ---- stage 2: PCA + POC --------------------------------------------------------------------------
def covariance_steps(x: np.ndarray, device: torch.device, chunk: int = 2048):
    """Generator (yields Progress per chunk): mean (F,) and covariance (F, F), both float64, from float32 rows."""
    n, f = x.shape
    mean = feature_mean(x, device, chunk)
    mean32 = mean.float()
    cov = torch.zeros((f, f), dtype=torch.float64, device=device)
    steps = -(-n // chunk)
    for i, s in enumerate(range(0, n, chunk)):
        xc = torch.as_tensor(x[s:s + chunk], device=device) - mean32
        cov += (xc.T @ xc).double()
        yield Progress(i + 1, steps, stage="PCA covariance")
    return mean, cov / n


DUAL_PCA_FEATURES = 8192   # above this many features (a 512 MiB float64 covariance), PCA goes through the N×N Gram matrix


def feature_mean(x: np.ndarray, device: torch.device, chunk: int = 2048) -> torch.Tensor:
    """Mean (F,) in float64 of float32 rows, in chunks."""
    total = torch.zeros(x.shape[1], dtype=torch.float64, device=device)
    for s in range(0, x.shape[0], chunk):
        total += torch.as_tensor(x[s:s + chunk], device=device).sum(0, dtype=torch.float64)
    return total / x.shape[0]


def gram_steps(x: np.ndarray, device: torch.device, chunk: int = 1024):
    """Generator (yields Progress per block row): mean (F,) and the centred Gram matrix Xc Xc^T / N (N, N),
    float64 — the dual of the covariance: the same nonzero eigenvalues, for N < F."""
    n = x.shape[0]
    mean = feature_mean(x, device)
    mean32 = mean.float()
    gram = torch.zeros((n, n), dtype=torch.float64, device=device)
    starts = list(range(0, n, chunk))
    for i, s in enumerate(starts):
        rows = torch.as_tensor(x[s:s + chunk], device=device) - mean32
        for t in starts[i:]:
            block = (rows @ (torch.as_tensor(x[t:t + chunk], device=device) - mean32).T).double()
            gram[s:s + len(rows), t:t + block.shape[1]] = block
            gram[t:t + block.shape[1], s:s + len(rows)] = block.T
        yield Progress(i + 1, len(starts), stage="PCA Gram matrix")
    return mean, gram / n


def dual_basis(x: np.ndarray, mean: torch.Tensor, vecs: torch.Tensor, vals: torch.Tensor, device: torch.device,
               chunk: int = 1024):
    """Generator: covariance eigenvectors (F, d) from Gram eigenpairs: w = Xc^T v / sqrt(N λ)."""
    mean32 = mean.float()
    out = torch.zeros((x.shape[1], vecs.shape[1]), dtype=torch.float64, device=device)
    steps = -(-x.shape[0] // chunk)
    for i, s in enumerate(range(0, x.shape[0], chunk)):
        rows = torch.as_tensor(x[s:s + chunk], device=device) - mean32
        out += (rows.T @ vecs[s:s + len(rows)].float()).double()
        yield Progress(i + 1, steps, stage="PCA basis")
    return out / torch.sqrt(x.shape[0] * vals.clamp_min(1e-12))[None]


def top_eigenvectors(cov: torch.Tensor, d: int, solver: str, rng: np.random.Generator, power: int = 2) -> tuple[torch.Tensor, torch.Tensor]:
    """The d leading eigenpairs (descending) of a symmetric PSD matrix.

    ``eigh``: exact, all F eigenpairs (float64). ``randomized``: subspace iteration on a (d + 10)-
    dimensional random start with ``power`` multiplications, then Rayleigh-Ritz (Halko et al. 2011).
    """
    f = cov.shape[0]
    if solver == "eigh" or d + 10 >= f:
        vals, vecs = torch.linalg.eigh(cov)
        return vals.flip(0)[:d], vecs.flip(1)[:, :d]
    c32 = cov.float()
    g = torch.from_numpy(rng.standard_normal((f, d + 10)).astype(np.float32)).to(cov.device)
    q = torch.linalg.qr(c32 @ g).Q
    for _ in range(power):
        q = torch.linalg.qr(c32 @ q).Q
    small = (q.T @ c32 @ q).double()
    vals, vecs = torch.linalg.eigh((small + small.T) / 2)
    vecs = q.double() @ vecs
    return vals.flip(0)[:d], vecs.flip(1)[:, :d]


def project_steps(x: np.ndarray, mean: torch.Tensor, basis: torch.Tensor, device: torch.device, chunk: int = 4096):
    """Generator (yields Progress per chunk): (x - mean) @ basis, float32 on ``device``."""
    m32, b32 = mean.float().to(device), basis.float().to(device)
    out, steps = [], -(-x.shape[0] // chunk)
    for i, s in enumerate(range(0, x.shape[0], chunk)):
        out.append((torch.as_tensor(x[s:s + chunk], device=device) - m32) @ b32)
        yield Progress(i + 1, steps, stage="PCA/POC projection")
    return torch.cat(out)


def pca_poc_steps(feats: np.ndarray, cfg: PSSCConfig, device: torch.device, rng: np.random.Generator):
    """Generator, stage 2: PCA to d dimensions, then POC drops the leading ones (Eq. 4).

    Returns the projected items z (N, d - poc), the feature mean (F,), the basis (F, d - poc) and the
    d leading eigenvalues.
    """
    n, f = feats.shape
    d = min(cfg.pca_dim, f, n - 1)
    n_poc = min(cfg.poc, d - 1)
    if f > DUAL_PCA_FEATURES and n < f:        # large crops: the F×F covariance would not fit, N×N does
        mean, gram = yield from gram_steps(feats, device)
        yield Progress(2, 4, stage="PCA eigensolver")
        eigvals, eigvecs = top_eigenvectors(gram, d, cfg.pca_solver, rng)
        eigvecs = yield from dual_basis(feats, mean, eigvecs, eigvals, device)
    else:
        mean, cov = yield from covariance_steps(feats, device)
        yield Progress(2, 4, stage="PCA eigensolver")
        eigvals, eigvecs = top_eigenvectors(cov, d, cfg.pca_solver, rng)
    basis = eigvecs[:, n_poc:]                                # POC: W' = [w_{n+1} .. w_d] (Eq. 4)
    z = yield from project_steps(feats, mean, basis, device)
    return z, mean, basis, eigvals


# ---- stage 3: U-SPEC -----------------------------------------------------------------------------
def uspec_sizes(n: int, cfg: PSSCConfig) -> tuple[int, int, int]:
    """(p', p, k) capped for small data: p' ≤ N, p ≤ p'/2 (k-means must merge candidates), p ≥ K, k ≤ p."""
    p_cand = min(cfg.candidates, n)
    p = max(min(cfg.representatives, p_cand // 2), min(cfg.k, p_cand))
    return p_cand, p, min(cfg.neighbours, p)


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


def uspec_steps(z: torch.Tensor, cfg: PSSCConfig, rng: np.random.Generator, seed: int, timing: dict):
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
    aff = affinities(dist, sigma)
    timing["knn_s"] = time.perf_counter() - start
    start = time.perf_counter()
    space, w, eig = transfer_cut(aff, idx, p, cfg.k)
    timing["transfer_cut_s"] = time.perf_counter() - start
    rep_items = nearest_exact(reps, z, 1)[1][:, 0]
    fitted = {"representatives": reps.cpu().numpy(), "sigma": np.float64(sigma), "transfer": w.cpu().numpy()}
    extras = {"embedding": space.cpu().numpy(), "representatives": reps.cpu().numpy(),
              "representative_items": rep_items.cpu().numpy(), "transfer_eigenvalues": eig.cpu().numpy()}
    params = {"nearest_representatives": idx.cpu().numpy(), "representative_affinities": aff.float().cpu().numpy()}
    return space, fitted, extras, params


def restart_steps(stack: Stack, space: torch.Tensor, cfg: PSSCConfig, rng: np.random.Generator):
    """Generator, the end of stage 3 (or the k-means ablation on z): k-means restarts on ``space``, showing
    the best clusters after the first and the last; returns the lowest-inertia (centres, labels, history)."""
    best = None
    for r, best in kmeans_restarts(space, cfg.k, cfg.restarts, cfg.kmeans_iter, rng):
        yield Progress(r, cfg.restarts, best[2][-1], "k-means restarts")
        if r == 1 or r == cfg.restarts:
            yield Snapshot(cluster_means(stack, best[1].cpu().numpy(), cfg.k))
    return best


# ---- the method ----------------------------------------------------------------------------------
def check_config(cfg: PSSCConfig, stack: Stack) -> None:
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


def embedding_steps(stack: Stack, cfg: PSSCConfig, device: torch.device, seed: int, rng: np.random.Generator, timing: dict):
    """Generator: features → PCA + POC → U-SPEC embedding (or z itself, the k-means ablation); returns an Embedding."""
    start = time.perf_counter()
    feats, scales = yield from feature_steps(stack, cfg, device, timing)
    timing["features_s"] = time.perf_counter() - start
    yield Progress(1, 4, stage="PCA")
    start = time.perf_counter()
    z, mean, basis, eigvals = yield from pca_poc_steps(feats, cfg, device, rng)
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


class PSSC(Method):
    name, title = "pssc", "PSSC: scattering + POC + U-SPEC spectral clustering"
    config, state, inputs = PSSCConfig, PSSCState, ("images",)
    paper = "Villar-Corrales & Morgenshtern, Scattering Transform Based Image Clustering"

    def train(self, stack: Stack, cfg: PSSCConfig, device: torch.device, seed: int):
        """Scattering features → PCA + POC → U-SPEC (or k-means) → k-means restarts on the embedding."""
        check_config(cfg, stack)
        rng = seed_everything(seed)
        timing: dict = {}
        emb = yield from embedding_steps(stack, cfg, device, seed, rng, timing)
        start = time.perf_counter()
        centers, _, history = yield from restart_steps(stack, emb.space, cfg, rng)
        timing["kmeans_s"] = time.perf_counter() - start
        return self._clustered(stack, cfg, emb, centers, history, timing)

    def refine(self, stack: Stack, cfg: PSSCConfig, start: ClusteringResult, pinned: torch.Tensor, device: torch.device):
        """k-means on the embedding from the centres of the edited partition, the pinned items kept where the user
        put them. The embedding is rebuilt with the fit's seed (the fit's own when K is unchanged; the edit drops
        the state that held it); an emptied cluster starts from the centre of all items."""
        check_config(cfg, stack)
        seed = int(start.config.get("seed", 0))
        rng = seed_everything(seed)
        timing: dict = {}
        emb = yield from embedding_steps(stack, cfg, device, seed, rng, timing)
        pinned = pinned.to(emb.space.device)
        labels = torch.from_numpy(np.asarray(start.labels, np.int64)).to(emb.space.device)
        centers = partition_means(emb.space, labels, emb.space.mean(0).expand(cfg.k, -1))
        t0, history = time.perf_counter(), []
        for it, inertia, centers, _ in lloyd(emb.space, centers, cfg.kmeans_iter, pinned=pinned):
            history.append(inertia / stack.n)
            yield Progress(it, cfg.kmeans_iter, history[-1], "Refine: k-means from the edit")
        timing["kmeans_s"] = time.perf_counter() - t0
        return self._clustered(stack, cfg, emb, centers, history, timing, pinned)

    def _clustered(self, stack: Stack, cfg: PSSCConfig, emb: "Embedding", centers: torch.Tensor, history: list,
                   timing: dict, pinned: torch.Tensor | None = None) -> ClusteringResult:
        """The result from the embedding and its k-means centres: nearest centre (pinned items kept), medoids, state."""
        scores = torch.cdist(emb.space, centers)
        labels = keep_pinned(scores.argmin(1), pinned).cpu().numpy()
        medoid_index = medoids(scores.cpu().numpy(), labels, cfg.k)
        extras = {"pca_eigenvalues": emb.eigvals.float().cpu().numpy(), **emb.extras,
                  "medoids": np.stack([stack.batch(int(i), int(i) + 1)[0] for i in medoid_index]), "medoid_index": medoid_index}
        state = PSSCState(item_shape=np.asarray(stack.item_shape), mean=emb.mean.float().cpu().numpy(),
                          basis=emb.basis.float().cpu().numpy(), centers=centers.cpu().numpy(), path_scales=emb.scales,
                          **emb.fitted)
        timing["clustering_s"] = time.perf_counter() - emb.clustering_start
        return self.result(cfg, state, labels=labels, scores=scores.cpu().numpy(),
                           prototypes=cluster_means(stack, labels, cfg.k), history=history, params=emb.params,
                           extras=extras, timing=timing)

    def predict(self, result: ClusteringResult, stack: Stack, device: torch.device, batch_size: int | None = None) -> ClusteringResult:
        """Assign new images: features → stored PCA/POC projection → (U-SPEC) nearest representatives →
        transfer-cut embedding extension D_X⁻¹ A w → nearest embedding centre (the fitted k-means centres)."""
        cfg, state = self.config_of(result), result.state
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
                aff = affinities(dist, float(state.sigma))
                z = extend_embedding(aff, idx, transfer)
                fields.update({"embedding": z, "params/nearest_representatives": idx,
                               "params/representative_affinities": aff.float()})
            scores = torch.cdist(z, centers.to(z.dtype))
            out.write(s, {"labels": scores.argmin(1), "scores": scores, **fields})
        extras = {"embedding": out.arrays.pop("embedding")} if uspec else {}
        return self.predicted(result, extras=extras, **out.result_fields())


register(PSSC())
