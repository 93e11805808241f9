"""Spatial Transformer K-means and affine-invariant K-means (Cosentino et al., paper 000).

The distance of a datum x to a centroid μ is d(x, μ) = min_ν ||T(x, ν) − μ||² (Eq. 3), with T the
datum resampled (bilinear, zero outside) through a thin-plate spline on a g×g landmark grid (App. E)
— or through an affine map for ``ai-kmeans``. All N×K alignments are solved at once on the device
with Adam: first an affine pre-alignment of low-pass-filtered images (App. B), then the landmark
displacements at full resolution. Assignment is by argmin, the centroid is the mean of the warped
data (Eq. 4, Algo. 1), and Lloyd iterations (Algo. 2) run from K-means++ centroids until no
assignment changes.

Every alignment is warm-started from the previous Lloyd iteration and each (datum, centroid) pair
keeps the best parameters it has seen under the current centroids (the old ones included), so the
distortion (Eq. 2) recorded per iteration never increases: alignment, assignment and the
centroid mean each can only lower it.
"""
from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from ..data import InputError, Stack, check_same_size, from_nchw, to_nchw
from ..result import ClusteringResult
from ..transforms import (affine_matrix, affine_points, identity_points, lattice_pixels, to_normalized, to_pixels,
                          tps_basis, warp)
from .base import Done, MethodSpec, Progress, Snapshot, config_dict, own_and_runner_up, param, register, seed_everything
from .kmeans import kmeans_plus_plus

#: The paper's model-selection grids (Sec. 4.2): landmark grid sides and Adam learning rates.
LANDMARK_GRID = (3, 4, 5, 6, 7, 8)
LR_GRID = (1e-4, 5e-4, 1e-3, 5e-3, 1e-2, 5e-2)
DISPLAY_LATTICE = 12


@dataclass
class AIKMeansConfig:
    k: int = 10
    lr: float = param(5e-3, "Adam learning rate of the per-pair alignment (the paper cross-validates 1e-4 … 5e-2)", low=1e-6, high=1.0)
    steps: int = param(30, "Adam steps per Lloyd iteration on every (image, centroid) alignment, warm-started", low=1)
    affine_steps: int = param(30, "Adam steps of the low-pass affine pre-alignment per Lloyd iteration (App. B)", low=0)
    affine_lr: float = param(1e-2, "Adam learning rate of the low-pass affine pre-alignment", low=1e-6, high=1.0)
    lowpass: float = param(0.07, "Gaussian low-pass σ for the affine pre-alignment, as a fraction of the image side (0 = none)", low=0.0, high=0.5)
    max_iter: int = param(20, "Most Lloyd iterations (stops earlier once no assignment changes)", low=1, essential=True)
    max_scale: float = param(1.5, "Bound on the affine warp: its scale factors stay within [1/max_scale, max_scale]", low=1.0, essential=True)
    max_shift: float = param(0.5, "Bound on the affine translation, as a fraction of the half image side", low=0.0)
    mode: str = param("lloyd", "lloyd: full-batch Lloyd iterations (Algo. 2, monotone distortion); minibatch: for large N", choices=("lloyd", "minibatch"))
    epochs: int = param(150, "Mini-batch mode: passes over the data (paper: 150)", low=1)
    batch_size: int = param(64, "Mini-batch mode: images per batch (paper: 64)", low=1)
    minibatch_steps: int = param(1, "Mini-batch mode: Adam steps per stage each time a batch is visited", low=1)
    predict_steps: int = param(150, "Adam steps per stage when aligning new images to the fixed centroids", low=1)
    padding: str = param("zeros", "Value outside the image when warping: zeros (paper) or the border pixel", choices=("zeros", "border"))
    reseed: bool = param(True, "Move a redundant centroid (its members fit another one almost as well) onto the worst-fitted image when that lowers the distortion")
    select: bool = param(False, "Model selection (Sec. 4.2): sweep the paper's learning rates (and landmark grids) and keep the lowest distortion")
    chunk: int = param(512, "Images whose K alignments are optimised at once (memory vs speed)", low=1, gui=False)


@dataclass
class STKMeansConfig(AIKMeansConfig):
    landmarks: int = param(4, "Side g of the g×g grid of TPS landmarks (ℓ = g², the paper sweeps 3 … 8)", low=3, high=8, essential=True)
    # ST's TPS keeps shrinking in check better than a bare affine map: a looser scale bound measured
    # better on both MNIST sets (docs/st_kmeans.md), while AI K-means keeps 1.5
    max_scale: float = param(2.0, "Bound on the affine warp: its scale factors stay within [1/max_scale, max_scale]", low=1.0, essential=True)
    max_displacement: float = param(0.5, "Bound on each landmark displacement, as a fraction of the landmark spacing", low=0.0)


# ---- the alignment engine ------------------------------------------------------------------------
class Ticker:
    """Counts Adam steps and turns them into Progress events."""

    def __init__(self, total: int):
        self.step, self.total = 0, max(1, int(total))

    def tick(self, stage: str, loss: float = float("nan")) -> Progress:
        self.step += 1
        return Progress(min(self.step, self.total), self.total, loss, stage)


def gaussian_lowpass(images: torch.Tensor, sigma: float) -> torch.Tensor:
    """Separable Gaussian blur (zero outside) of images (..., C, H, W)."""
    if sigma <= 0:
        return images
    radius = max(1, int(math.ceil(3 * sigma)))
    t = torch.arange(-radius, radius + 1, device=images.device, dtype=images.dtype)
    kernel = torch.exp(-0.5 * (t / sigma) ** 2)
    kernel = kernel / kernel.sum()
    shape = images.shape
    x = images.reshape(-1, 1, *shape[-2:])
    x = F.conv2d(x, kernel.view(1, 1, -1, 1), padding=(radius, 0))
    x = F.conv2d(x, kernel.view(1, 1, 1, -1), padding=(0, radius))
    return x.reshape(shape)


def adam(loss_fn, params: list[torch.Tensor], steps: int, lr: float, ticker: Ticker | None = None, stage: str = "",
         state: dict | None = None, project=None, betas=(0.9, 0.999), eps: float = 1e-8):
    """Adam on per-pair losses (generator; returns the best parameters seen and their losses).

    ``loss_fn(*params)`` gives one loss per pair (B, K); the parameters are (B, K, ...). Pairs are
    independent, so one optimiser over the summed loss is K·B separate Adam runs. Every pair keeps
    the best iterate it visits (the starting point included), which is what makes the Lloyd
    distortion monotone. ``state`` (m, v, t per pair) carries Adam's moments across calls
    (mini-batch mode); without it the moments start at zero.
    """
    params = [p.detach().clone() for p in params]
    best = [p.clone() for p in params]
    if state is None:
        state = {"m": [torch.zeros_like(p) for p in params], "v": [torch.zeros_like(p) for p in params],
                 "t": torch.zeros(params[0].shape[:2], device=params[0].device)}
    best_loss = None
    for _ in range(steps):
        for p in params:
            p.requires_grad_(True)
        loss = loss_fn(*params)
        grads = torch.autograd.grad(loss.sum(), params)
        with torch.no_grad():
            loss = loss.detach()
            if best_loss is None:
                best_loss = loss.clone()
            else:
                better = loss < best_loss
                best_loss = torch.where(better, loss, best_loss)
                for b, p in zip(best, params):
                    b[better] = p.detach()[better]
            state["t"] += 1
            t = state["t"]
            for i, (p, g) in enumerate(zip(params, grads)):
                m = state["m"][i].mul_(betas[0]).add_(g, alpha=1 - betas[0])
                v = state["v"][i].mul_(betas[1]).addcmul_(g, g, value=1 - betas[1])
                shape = t.shape + (1,) * (p.ndim - 2)
                m_hat = m / (1 - betas[0] ** t).view(shape)
                v_hat = v / (1 - betas[1] ** t).view(shape)
                params[i] = (p.detach() - lr * m_hat / (v_hat.sqrt() + eps))
            if project is not None:
                params = project(params)
        if ticker is not None:
            yield ticker.tick(stage, float(best_loss.min(1).values.mean()))
    with torch.no_grad():
        loss = loss_fn(*params)
        if best_loss is None:
            return params, loss, state
        better = loss < best_loss
        best_loss = torch.where(better, loss, best_loss)
        for b, p in zip(best, params):
            b[better] = p[better]
    return best, best_loss, state


class Aligner:
    """Warps of images onto centroids: affine (``landmarks`` None) or affine + TPS on a g×g grid.

    A warp is a sampling grid F(p) = A(p) + Σ_j B_j(p) ν_j over the centroid's pixels p: the affine
    map A (6 parameters, zero = identity) composed with the thin-plate spline whose fixed source
    landmarks are a g×g grid and whose targets are A(s_j) + ν_j (the TPS reproduces affine maps, so
    this is a single TPS). B is the precomputed per-pixel TPS basis (kernel inverse done once).
    """

    def __init__(self, size: tuple[int, int], landmarks: int | None, lowpass: float, padding: str, device,
                 max_scale: float = math.inf, max_shift: float = math.inf, max_displacement: float = math.inf):
        self.size = size
        self.max_scale, self.max_shift = max_scale, max_shift
        self.max_nu = max_displacement * 2.0 / (landmarks - 1) if landmarks else math.inf
        self.padding = padding
        self.device = device
        self.points = identity_points(size, device).reshape(-1, 2)
        self.landmarks = landmarks
        self.basis = tps_basis(landmarks).pixel_matrix(size, device, torch.float32) if landmarks else None
        self.sigma = lowpass * max(size)
        # a low-passed image carries little above half its band: work on it at half resolution
        self.factor = 2 if self.sigma >= 1.5 and min(size) >= 16 else 1
        self.low_size = (math.ceil(size[0] / self.factor), math.ceil(size[1] / self.factor))
        self.low_points = identity_points(self.low_size, device).reshape(-1, 2)

    @property
    def n_landmarks(self) -> int:
        return 0 if self.landmarks is None else self.landmarks ** 2

    def lowpass(self, images: torch.Tensor) -> torch.Tensor:
        out = gaussian_lowpass(images, self.sigma)
        if self.factor > 1:
            lead = out.shape[:-2]
            out = F.adaptive_avg_pool2d(out.reshape(-1, *out.shape[-2:])[:, None], self.low_size)
            out = out.reshape(*lead, *self.low_size)
        return out

    def project_affine(self, params: list[torch.Tensor]) -> list[torch.Tensor]:
        """Keep affine maps feasible: singular values in [1/max_scale, max_scale], |shift| ≤ max_shift.
        Unbounded warps let an image shrink or slide off the frame until it matches any dim centroid."""
        theta = params[0]
        if math.isfinite(self.max_scale):
            m = theta[..., [0, 1, 3, 4]].reshape(*theta.shape[:-1], 2, 2) + torch.eye(2, device=theta.device)
            u, sv, vh = torch.linalg.svd(m)
            sv = sv.clamp(1.0 / self.max_scale, self.max_scale)
            m = u @ (sv[..., None] * vh) - torch.eye(2, device=theta.device)
            theta = torch.stack([m[..., 0, 0], m[..., 0, 1], theta[..., 2], m[..., 1, 0], m[..., 1, 1], theta[..., 5]], -1)
        if math.isfinite(self.max_shift):
            theta = theta.clone()
            theta[..., [2, 5]] = theta[..., [2, 5]].clamp(-self.max_shift, self.max_shift)
        return [theta] + list(params[1:])

    def project_tps(self, params: list[torch.Tensor]) -> list[torch.Tensor]:
        """Keep each landmark displacement within max_displacement × the landmark spacing."""
        if not math.isfinite(self.max_nu):
            return params
        return [p.clamp(-self.max_nu, self.max_nu) for p in params]

    def zeros(self, n: int, k: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        theta = torch.zeros(n, k, 6, device=self.device)
        nu = torch.zeros(n, k, self.n_landmarks, 2, device=self.device) if self.landmarks else None
        return theta, nu

    def grid(self, theta: torch.Tensor, nu: torch.Tensor | None, low: bool = False) -> torch.Tensor:
        """Sampling grids (..., h, w, 2) for affine parameters (..., 6) and displacements (..., ℓ, 2)."""
        pts = self.low_points if low else self.points
        p = theta.reshape(-1, 6)
        px, py = pts[:, 0], pts[:, 1]
        # elementwise, not a batched 2×2 matmul: far faster for many small maps
        gx = (1 + p[:, 0:1]) * px + p[:, 1:2] * py + p[:, 2:3]
        gy = p[:, 3:4] * px + (1 + p[:, 4:5]) * py + p[:, 5:6]
        if nu is not None and not low:
            n = self.n_landmarks
            disp = (nu.reshape(-1, n, 2).transpose(1, 2).reshape(-1, n) @ self.basis.T).view(-1, 2, pts.shape[0])
            gx, gy = gx + disp[:, 0], gy + disp[:, 1]
        return torch.stack([gx, gy], -1).reshape(*theta.shape[:-1], *(self.low_size if low else self.size), 2)

    def warp_pairs(self, x: torch.Tensor, theta: torch.Tensor, nu: torch.Tensor | None, low: bool = False) -> torch.Tensor:
        """Items x (B, C, H, W) warped by the (B, K) pair parameters: (B, K, C, h, w)."""
        return warp(x[:, None], self.grid(theta, nu, low), padding_mode=self.padding)

    def pair_losses(self, x, mu, theta, nu, low: bool = False) -> torch.Tensor:
        """||T(x_i, ν_ik) − μ_k||² for all pairs, (B, K)."""
        return ((self.warp_pairs(x, theta, nu, low) - mu[None]) ** 2).sum((-3, -2, -1))

    def align(self, x, x_low, mu, mu_low, theta, nu, steps_a: int, steps_b: int, lr_a: float, lr_b: float,
              ticker: Ticker | None = None, states: dict | None = None):
        """Improve the (B, K) alignments of items x onto centroids mu (generator).

        Stage A: Adam on the affine map of the low-passed images, warm-started from ``theta``.
        Stage B: Adam at full resolution on the landmark displacements (or, with no landmarks, on the
        affine map), started per pair from the best of (old affine, old ν), (new affine, old ν) and
        (new affine, ν = 0). Returns (theta, nu, losses), never worse per pair than the input.
        """
        with torch.no_grad():
            start_loss = self.pair_losses(x, mu, theta, nu)
        theta_a = theta
        if steps_a > 0:
            theta_a, _, st = yield from adam(lambda th: self.pair_losses(x_low, mu_low, th, None, low=True), [theta],
                                             steps_a, lr_a, ticker, "affine pre-alignment",
                                             None if states is None else states.get("a"), self.project_affine)
            theta_a = theta_a[0]
            if states is not None:
                states["a"] = st
            with torch.no_grad():
                cands = [(theta_a, nu)] + ([(theta_a, torch.zeros_like(nu))] if nu is not None else [])
                for th_c, nu_c in cands:
                    loss_c = self.pair_losses(x, mu, th_c, nu_c)
                    better = loss_c < start_loss
                    start_loss = torch.where(better, loss_c, start_loss)
                    theta = torch.where(better[..., None], th_c, theta)
                    if nu is not None:
                        nu = torch.where(better[..., None, None], nu_c, nu)
        stage = "TPS alignment" if nu is not None else "affine alignment"
        prev = None if states is None else states.get("b")
        if nu is not None:
            fixed = theta
            (nu_new,), loss, st = yield from adam(lambda v: self.pair_losses(x, mu, fixed, v), [nu], steps_b, lr_b,
                                                  ticker, stage, prev, self.project_tps)
            better = loss < start_loss
            nu = torch.where(better[..., None, None], nu_new, nu)
        else:
            (th_new,), loss, st = yield from adam(lambda th: self.pair_losses(x, mu, th, None), [theta], steps_b,
                                                  lr_b, ticker, stage, prev, self.project_affine)
            better = loss < start_loss
            theta = torch.where(better[..., None], th_new, theta)
        if states is not None:
            states["b"] = st
        return theta, nu, torch.where(better, loss, start_loss)

    def display_grids(self, theta: torch.Tensor, nu: torch.Tensor | None) -> torch.Tensor:
        """(N, gh, gw, 2) pixel (x, y) positions in each item of a regular lattice of the prototype frame."""
        lattice = (min(self.size[0], DISPLAY_LATTICE), min(self.size[1], DISPLAY_LATTICE))
        pix = lattice_pixels(self.size, lattice, self.device)
        pts = to_normalized(pix, self.size).reshape(-1, 2)
        g = affine_points(theta, pts)
        if nu is not None:
            g = g + tps_basis(self.landmarks).interpolation_matrix(pts).float() @ nu
        return to_pixels(g, self.size).reshape(theta.shape[0], *lattice, 2)

    def target_landmarks(self, theta: torch.Tensor, nu: torch.Tensor) -> torch.Tensor:
        """Pixel positions in the item of the landmarks: A(s_j) + ν_j, (N, ℓ, 2)."""
        src = tps_basis(self.landmarks).sources.to(self.device, torch.float32)
        return to_pixels(affine_points(theta, src) + nu, self.size)


# ---- shared pieces of the training loop ----------------------------------------------------------
def _landmarks(cfg) -> int | None:
    return getattr(cfg, "landmarks", None)


def _aligner(cfg, size, device) -> Aligner:
    return Aligner(size, _landmarks(cfg), cfg.lowpass, cfg.padding, device, cfg.max_scale, cfg.max_shift,
                   getattr(cfg, "max_displacement", math.inf))


def _chunks(n: int, size: int):
    return [slice(s, min(s + size, n)) for s in range(0, n, size)]


def _take(t: torch.Tensor | None, labels: torch.Tensor) -> torch.Tensor | None:
    """The assigned pair's parameters (N, ...) out of (N, K, ...)."""
    if t is None:
        return None
    idx = labels.view(-1, 1, *([1] * (t.ndim - 2))).expand(-1, 1, *t.shape[2:])
    return t.gather(1, idx)[:, 0]


def _warp_assigned(aligner: Aligner, x, theta, nu, labels, chunk: int) -> torch.Tensor:
    """Every item warped onto its assigned centroid, (N, C, H, W)."""
    th, v = _take(theta, labels), _take(nu, labels)
    out = []
    with torch.no_grad():
        for s in _chunks(x.shape[0], chunk * 8):
            out.append(aligner.warp_pairs(x[s], th[s, None], None if v is None else v[s, None])[:, 0])
    return torch.cat(out)


def _centroid_update(aligner, x, theta, nu, labels, losses, mu, chunk):
    """Eq. 4: the mean of the warped members. An emptied cluster restarts on the worst-fitted item."""
    k = mu.shape[0]
    warped = _warp_assigned(aligner, x, theta, nu, labels, chunk)
    sums = torch.zeros_like(mu).index_add_(0, labels, warped)
    counts = torch.bincount(labels, minlength=k)
    new = sums / counts.clamp_min(1).to(mu.dtype).view(-1, 1, 1, 1)
    empty = torch.nonzero(counts == 0).flatten()
    if len(empty):
        worst = torch.argsort(losses.gather(1, labels[:, None])[:, 0], descending=True)[: len(empty)]
        new[empty] = x[worst]
        theta[:, empty] = 0       # the new centroid is that raw item: identity is its exact alignment
        if nu is not None:
            nu[:, empty] = 0
    return new


def _reseed(x, mu, theta, nu, losses, labels) -> bool:
    """Swap move: drop the centroid whose members lose least by going to their runner-up, restart it
    on the worst-fitted image. Done (in place) only when it lowers the distortion: the members'
    runner-up costs (with their stored warps) plus 0 for that image (identity warp onto itself) must
    undercut the current costs, so the distortion stays monotone. This is how a K-means++ start with
    two centroids on one class and none on another recovers; the paper does not say how it does."""
    k = mu.shape[0]
    if k < 2:
        return False
    best, runner_up, runner_up_index = own_and_runner_up(losses, labels)
    loss_of = torch.zeros(k, device=x.device, dtype=losses.dtype).index_add_(0, labels, runner_up - best)
    counts = torch.bincount(labels, minlength=k)
    loss_of[counts == 0] = float("inf")            # empty clusters are restarted by the centroid update
    a = int(loss_of.argmin())
    outside = torch.where(labels == a, torch.full_like(best, -1.0), best)
    far = int(outside.argmax())
    if not float(loss_of[a]) < float(outside[far]):
        return False
    members = labels == a
    labels[members] = runner_up_index[members]
    labels[far] = a
    mu[a] = x[far]
    theta[:, a] = 0
    if nu is not None:
        nu[:, a] = 0
    losses[:, a] = float("inf")
    losses[far, a] = 0.0
    return True


def _align_all(aligner, x, x_low, mu, theta, nu, cfg, steps_a, steps_b, ticker):
    """All N×K alignments against the current centroids, chunk by chunk (generator)."""
    mu_low = aligner.lowpass(mu)
    losses = torch.empty(x.shape[0], mu.shape[0], device=x.device)
    for s in _chunks(x.shape[0], cfg.chunk):
        th, v, loss = yield from aligner.align(x[s], x_low[s], mu, mu_low, theta[s], None if nu is None else nu[s],
                                               steps_a, steps_b, cfg.affine_lr, cfg.lr, ticker)
        theta[s] = th
        if nu is not None:
            nu[s] = v
        losses[s] = loss
    return losses


def _result(method, cfg, aligner, stack, x, mu, theta, nu, losses, labels, history, extras, chunk, timing):
    protos = from_nchw(mu, stack.channels > 1 and len(stack.item_shape) == 3).cpu().numpy()
    warped = _warp_assigned(aligner, x, theta, nu, labels, chunk)
    th, v = _take(theta, labels), _take(nu, labels)
    params = {"affine": affine_matrix(th).cpu().numpy()}
    if v is not None:
        params["displacements"] = v.cpu().numpy()
        params["landmarks"] = aligner.target_landmarks(th, v).cpu().numpy()
    return ClusteringResult(
        labels=labels.cpu().numpy(), scores=losses.cpu().numpy(), prototypes=protos, method=method,
        config=config_dict(cfg), history=history,
        aligned=from_nchw(warped, stack.channels > 1 and len(stack.item_shape) == 3).cpu().numpy(),
        aligned_kind="item-on-prototype", grids=aligner.display_grids(th, v).cpu().numpy(), params=params,
        extras=extras, state={"centers": mu.cpu().numpy()}, timing=timing)


def _check_images(stack: Stack, name: str) -> None:
    if not stack.is_image:
        raise InputError(f"{name} warps images: give an image stack shaped N×H×W or N×H×W×3, not vectors.")


# ---- training ------------------------------------------------------------------------------------
def _lloyd(stack: Stack, cfg, device, seed: int, method: str):
    """Algo. 2: alignment of every pair, argmin assignment, Eq. 4 centroids, until no label changes."""
    start = time.perf_counter()
    rng = seed_everything(seed)
    x = to_nchw(stack.tensor(device))
    size = tuple(x.shape[-2:])
    mu = kmeans_plus_plus(x.reshape(x.shape[0], -1), cfg.k, rng).reshape(cfg.k, *x.shape[1:])
    init = mu.clone()
    aligner = _aligner(cfg, size, device)
    x_low = aligner.lowpass(x)
    n_chunks = len(_chunks(stack.n, cfg.chunk))
    if cfg.mode == "minibatch":
        out = yield from _minibatch(stack, cfg, x, x_low, mu, aligner, rng)
        mu, theta, nu, losses, labels, history, iters = out
    else:
        ticker = Ticker(cfg.max_iter * n_chunks * (cfg.affine_steps + cfg.steps))
        theta, nu = aligner.zeros(stack.n, cfg.k)
        history, prev = [], None
        for it in range(1, cfg.max_iter + 1):
            losses = yield from _align_all(aligner, x, x_low, mu, theta, nu, cfg, cfg.affine_steps, cfg.steps, ticker)
            labels = losses.argmin(1)
            history.append(float(losses.gather(1, labels[:, None]).sum()) / stack.n)
            yield Progress(ticker.step, ticker.total, history[-1], f"Lloyd iteration {it}")
            if it == cfg.max_iter:
                break
            moved = cfg.reseed and _reseed(x, mu, theta, nu, losses, labels)
            if prev is not None and torch.equal(prev, labels) and not moved:
                break
            mu = _centroid_update(aligner, x, theta, nu, labels, losses, mu, cfg.chunk)
            prev = labels
            yield Snapshot(from_nchw(mu, stack.channels > 1 and len(stack.item_shape) == 3).cpu().numpy())
        iters = it
    extras = {"initial_prototypes": from_nchw(init, stack.channels > 1 and len(stack.item_shape) == 3).cpu().numpy()}
    timing = {"fit_s": time.perf_counter() - start, "iterations": iters}
    return _result(method, cfg, aligner, stack, x, mu, theta, nu, losses, labels, history, extras, cfg.chunk, timing)


def _minibatch(stack, cfg, x, x_low, mu, aligner, rng):
    """Mini-batch variant: each batch's K alignments advance by a few Adam steps (moments kept per
    pair across epochs), then the assigned centroids move to the running mean of their warped
    members (per-centroid step 1/count, as in mini-batch K-means). Ends with a full assignment pass."""
    n, k = stack.n, cfg.k
    theta, nu = aligner.zeros(n, k)
    states = {"a": None, "b": None}
    keys = ("a", "b")
    global_states: dict = {}
    counts = torch.zeros(k, device=x.device)
    labels = torch.full((n,), -1, dtype=torch.long, device=x.device)
    batches = _chunks(n, cfg.batch_size)
    ticker = Ticker(cfg.epochs * len(batches) * (cfg.minibatch_steps * (2 if cfg.affine_steps else 1))
                    + len(_chunks(n, cfg.chunk)) * (cfg.affine_steps + cfg.steps))
    history = []
    epoch = 0
    for epoch in range(1, cfg.epochs + 1):
        order = torch.from_numpy(rng.permutation(n)).to(x.device)
        total, changed = 0.0, 0
        for s in batches:
            idx = order[s]
            states = {key: _gather_state(global_states.get(key), idx) for key in keys}
            mu_low = aligner.lowpass(mu)
            th, v, loss = yield from aligner.align(x[idx], x_low[idx], mu, mu_low, theta[idx],
                                                   None if nu is None else nu[idx],
                                                   cfg.minibatch_steps if cfg.affine_steps else 0,
                                                   cfg.minibatch_steps, cfg.affine_lr, cfg.lr, ticker, states)
            for key in keys:
                global_states[key] = _scatter_state(global_states.get(key), states.get(key), idx, n)
            theta[idx] = th
            if nu is not None:
                nu[idx] = v
            lab = loss.argmin(1)
            changed += int((lab != labels[idx]).sum())
            labels[idx] = lab
            total += float(loss.gather(1, lab[:, None]).sum())
            with torch.no_grad():
                warped = aligner.warp_pairs(x[idx], _take(th, lab)[:, None],
                                            None if v is None else _take(v, lab)[:, None])[:, 0]
                add = torch.bincount(lab, minlength=k).to(counts.dtype)
                counts += add
                sums = torch.zeros_like(mu).index_add_(0, lab, warped)
                hit = add > 0
                mu[hit] = mu[hit] + (sums[hit] - add[hit].view(-1, 1, 1, 1) * mu[hit]) / counts[hit].view(-1, 1, 1, 1)
        history.append(total / n)
        yield Progress(ticker.step, ticker.total, history[-1], f"epoch {epoch}")
        yield Snapshot(from_nchw(mu, stack.channels > 1 and len(stack.item_shape) == 3).cpu().numpy())
        if epoch > 1 and changed == 0:
            break
    losses = yield from _align_all(aligner, x, x_low, mu, theta, nu, cfg, cfg.affine_steps, cfg.steps, ticker)
    labels = losses.argmin(1)
    history.append(float(losses.gather(1, labels[:, None]).sum()) / n)
    return mu, theta, nu, losses, labels, history, epoch


def _gather_state(state, idx):
    if state is None:
        return None
    return {"m": [m[idx] for m in state["m"]], "v": [v[idx] for v in state["v"]], "t": state["t"][idx]}


def _scatter_state(glob, state, idx, n):
    if state is None:
        return glob
    if glob is None:
        glob = {"m": [torch.zeros(n, *m.shape[1:], device=m.device) for m in state["m"]],
                "v": [torch.zeros(n, *v.shape[1:], device=v.device) for v in state["v"]],
                "t": torch.zeros(n, *state["t"].shape[1:], device=state["t"].device)}
    for g, s in zip(glob["m"] + glob["v"] + [glob["t"]], state["m"] + state["v"] + [state["t"]]):
        g[idx] = s
    return glob


def _sweep(stack, cfg, device, seed, method, landmarks=LANDMARK_GRID, lrs=LR_GRID):
    """Sec. 4.2 model selection: one run per (landmarks, learning rate), the lowest distortion kept."""
    grid_l = tuple(landmarks) if _landmarks(cfg) is not None else (None,)
    rows, best = [], None
    total = len(grid_l) * len(lrs)
    for g in grid_l:
        for lr in lrs:
            sub = dataclasses.replace(cfg, lr=lr, select=False, **({} if g is None else {"landmarks": g}))
            result = None
            for event in _run_one(stack, sub, device, seed, method):
                if isinstance(event, Done):
                    result = event.result
                elif isinstance(event, Progress):
                    done = len(rows) + event.step / max(event.total, 1)
                    yield Progress(int(done * 1000), total * 1000, event.loss,
                                   f"selection {len(rows) + 1}/{total}: {event.stage}")
                else:
                    yield event
            rows.append({"landmarks": 0 if g is None else g, "lr": lr, "distortion": result.final_loss,
                         "iterations": result.timing.get("iterations", 0), "fit_s": result.timing.get("fit_s", 0.0)})
            if best is None or result.final_loss < best.final_loss:
                best = result
    best.extras.update({f"selection_{key}": np.array([r[key] for r in rows]) for key in rows[0]})
    best.config = {**best.config, "select": True}
    return best, rows


def _run_one(stack, cfg, device, seed, method):
    result = yield from _lloyd(stack, cfg, device, seed, method)
    yield Done(result)


def _validate(stack: Stack, cfg, method: str) -> None:
    _check_images(stack, method)
    if min(stack.item_shape[:2]) < 8:
        raise InputError(f"{method} needs images of at least 8×8 pixels to warp; these are {stack.item_shape[0]}×{stack.item_shape[1]}.")


def _make_run(method: str):
    def run(stack: Stack, cfg, device: torch.device, seed: int):
        _validate(stack, cfg, method)
        if cfg.select:
            best, _ = yield from _sweep(stack, cfg, device, seed, method)
            yield Done(best)
        else:
            yield from _run_one(stack, cfg, device, seed, method)
    run.__doc__ = f"Train {method} (generator of Progress / Snapshot events, then Done(result))."
    return run


def select_model(data, method: str = "st-kmeans", k: int = 10, device: str = "auto", seed: int = 0,
                 landmarks=LANDMARK_GRID, lrs=LR_GRID, **params):
    """Model selection of Sec. 4.2 / Fig. 5: sweep landmarks {3², …, 8²} (ST only) × the paper's learning
    rates, keep the run with the lowest distortion (Eq. 2). Returns (best result, table of every run:
    landmarks, lr, distortion, iterations, fit_s). Other grids can be given for quick looks."""
    from ..api import prepare
    from ..data import check_k
    from ..device import resolve_device
    from .base import get_method

    spec = get_method(method)
    if spec.name not in ("st-kmeans", "ai-kmeans"):
        raise InputError(f"Model selection is for st-kmeans and ai-kmeans, not {method!r}.")
    stack = prepare(data, spec)
    cfg = spec.make_config(check_k(k, stack.n), **params)
    _validate(stack, cfg, method)
    if not len(lrs) or (spec.name == "st-kmeans" and not len(landmarks)):
        raise InputError("The model-selection grids are empty: give at least one learning rate and landmark grid.")
    bad = [g for g in landmarks if not 3 <= int(g) <= 8] if spec.name == "st-kmeans" else []
    if bad:
        raise InputError(f"Landmark grid side {bad[0]} is out of range: choose sides between 3 and 8.")
    gen = _sweep(stack, cfg, resolve_device(device), seed, method, landmarks, lrs)
    try:
        while True:
            next(gen)
    except StopIteration as stop:
        return stop.value


# ---- prediction ----------------------------------------------------------------------------------
def _config_from(result: ClusteringResult, cls):
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{key: (tuple(v) if isinstance(v, list) else v) for key, v in result.config.items() if key in names})


def _align_new(method: str, cls, result: ClusteringResult, stack: Stack, device: torch.device,
               batch_size: int | None = None):
    """Optimise the alignments of new images onto the fixed centroids: (cfg, aligner, x, mu, theta, nu, losses)."""
    _check_images(stack, method)
    cfg = _config_from(result, cls)
    if batch_size is not None:
        cfg = dataclasses.replace(cfg, chunk=int(batch_size))
    mu = torch.from_numpy(np.asarray(result.state["centers"], dtype=np.float32)).to(device)
    check_same_size(stack, int(np.prod(mu.shape[1:])))
    x = to_nchw(stack.tensor(device))
    if tuple(x.shape[1:]) != tuple(mu.shape[1:]):
        raise InputError(f"The new images are {tuple(stack.item_shape)} but the centroids are {tuple(result.prototypes.shape[1:])}: give images of the same shape.")
    aligner = _aligner(cfg, tuple(x.shape[-2:]), device)
    theta, nu = aligner.zeros(stack.n, mu.shape[0])
    gen = _align_all(aligner, x, aligner.lowpass(x), mu, theta, nu, cfg,
                     cfg.predict_steps if cfg.affine_steps else 0, cfg.predict_steps, None)
    try:
        while True:
            next(gen)
    except StopIteration as stop:
        losses = stop.value
    return cfg, aligner, x, mu, theta, nu, losses


def _make_predict(method: str, cls):
    def predict(result: ClusteringResult, stack: Stack, device: torch.device, batch_size: int | None = None) -> ClusteringResult:
        """Assign new images with the centroids fixed: only their alignments are optimised."""
        start = time.perf_counter()
        cfg, aligner, x, mu, theta, nu, losses = _align_new(method, cls, result, stack, device, batch_size)
        labels = losses.argmin(1)
        out = _result(method, cfg, aligner, stack, x, mu, theta, nu, losses, labels, [], {}, cfg.chunk,
                      {"fit_s": time.perf_counter() - start})
        out.config = result.config
        out.prototypes = result.prototypes
        out.state = result.state
        return out
    return predict


def _make_align(method: str, cls):
    def align(result: ClusteringResult, stack: Stack, device: torch.device):
        """For the alignment inspector: one image warped onto every centroid, and its distance to each."""
        _, aligner, x, _, theta, nu, losses = _align_new(method, cls, result, stack, device)
        with torch.no_grad():
            warped = aligner.warp_pairs(x[:1], theta[:1], None if nu is None else nu[:1])[0]
        return from_nchw(warped, stack.channels > 1).cpu().numpy(), losses[0].cpu().numpy()
    return align


SPEC = register(MethodSpec(name="st-kmeans", title="Spatial Transformer K-means (TPS)", config=STKMeansConfig,
                           run=_make_run("st-kmeans"), predict=_make_predict("st-kmeans", STKMeansConfig),
                           align=_make_align("st-kmeans", STKMeansConfig),
                           inputs=("images",), paper="000"))
AI_SPEC = register(MethodSpec(name="ai-kmeans", title="Affine-invariant K-means", config=AIKMeansConfig,
                              run=_make_run("ai-kmeans"), predict=_make_predict("ai-kmeans", AIKMeansConfig),
                              align=_make_align("ai-kmeans", AIKMeansConfig),
                              inputs=("images",), paper="000"))
