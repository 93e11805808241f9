"""The alignment engine: every (image, centroid) pair's warp optimised at once by a batched Adam.

A warp is an affine map (of a family: rigid, similarity or affine, within scale and shift bounds), optionally
composed with a thin-plate spline on a g×g landmark grid (``core.tps_basis``). :class:`Aligner` fits the
(B, K) warps of B images onto K centroids: a low-pass affine pre-alignment, then full resolution
(Cosentino et al., App. B), each pair keeping the best parameters it has seen. :func:`adam` is the
per-pair optimiser (its moments in :class:`AdamState`, kept across calls in :class:`Moments` for
mini-batches), :class:`Alignments` the per-pair parameters and losses, :class:`Pyramid` images with their
low-passed copies, :class:`Schedule` the steps and learning rates, :class:`Ticker` their progress events.

ST and AI K-means (their Lloyd iteration: ``kernels/aligned_lloyd.py``) are built on it; it knows nothing of methods.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial

import torch
import torch.nn.functional as F

from ..events import Progress
from .core import affine_matrix, affine_points, assigned_pair, identity_points, lattice_pixels, to_normalized, to_pixels, tps_basis, warp

#: Display grids (``Aligner.display_grids``): a lattice of at most this many points a side.
DISPLAY_LATTICE = 12
#: Each invariance family's affine maps (methods/invariances.py): the linear part U·diag(σ)·Vᵀ becomes
#: U·diag(f(σ))·Vᵀ, the family's nearest map in the Frobenius norm (rigid: a rotation; similarity: a
#: scaled rotation, σ's mean; affine: unchanged).
FAMILY_SINGULAR_VALUES = {"rigid": torch.ones_like, "similarity": lambda sv: sv.mean(-1, keepdim=True).expand_as(sv),
                          "affine": lambda sv: sv}
#: Rigid and similarity warps: the pre-alignment starts from the best of this many turns of each pair's
#: map (every 360°/n, on the low-passed images). The loss is not convex in the angle: from one start,
#: an ellipse at 90° to its centroid never turns (an affine map can squash it instead, these cannot).
ROTATION_STARTS = 16
#: Images low-pass filtered at once (``Aligner.pyramid``).
LOWPASS_CHUNK = 512


class Ticker:
    """Counts Adam steps and turns them into Progress events."""

    def __init__(self, total: int):
        self.step, self.total = 0, max(1, int(total))

    def tick(self, stage: str, loss: float = float("nan")) -> Progress:
        self.step += 1
        return Progress(min(self.step, self.total), self.total, loss, stage)


def gaussian_kernel(sigma: float, device=None, dtype=torch.float32) -> tuple[int, torch.Tensor]:
    """The blur's radius r and its normalised 1-D Gaussian taps (2r + 1,) of standard deviation ``sigma`` pixels."""
    radius = max(1, int(math.ceil(3 * sigma)))
    t = torch.arange(-radius, radius + 1, device=device, dtype=dtype)
    kernel = torch.exp(-0.5 * (t / sigma) ** 2)
    return radius, kernel / kernel.sum()


def gaussian_matrix(n: int, sigma: float, device=None, dtype=torch.float32) -> torch.Tensor:
    """(n, n): the Gaussian blur (``gaussian_kernel``'s taps, zero outside) of a side of n pixels as one matrix."""
    radius, kernel = gaussian_kernel(sigma, device, dtype)
    offset = torch.arange(n, device=device)[None, :] - torch.arange(n, device=device)[:, None]
    return torch.where(offset.abs() <= radius, kernel[(offset + radius).clamp(0, 2 * radius)], 0.0).to(dtype)


def gaussian_lowpass(images: torch.Tensor, sigma: float) -> torch.Tensor:
    """Separable Gaussian blur (zero outside) of images (..., C, H, W): one matrix per side, two small matrix products
    (several times cheaper on the CPU than the two 1-D convolutions they equal up to float roundoff)."""
    if sigma <= 0:
        return images
    h, w = images.shape[-2:]
    return gaussian_matrix(h, sigma, images.device, images.dtype) @ images @ gaussian_matrix(w, sigma, images.device, images.dtype).T


def image_slopes(images: torch.Tensor, padding: str = "zeros") -> torch.Tensor:
    """Images (B, C, H, W) beside their slopes along x and y in grid units (``align_corners=False``: a pixel is 2/W
    wide), central differences with the warp's padding outside: (B, 3C, H, W), what Gauss-Newton samples."""
    p = F.pad(images, (1, 1, 1, 1), mode="constant" if padding == "zeros" else "replicate")
    h, w = images.shape[-2:]
    dx = (p[..., 1:-1, 2:] - p[..., 1:-1, :-2]) * (w / 4)   # half the two-pixel difference, w/2 pixels per grid unit
    dy = (p[..., 2:, 1:-1] - p[..., :-2, 1:-1]) * (h / 4)
    return torch.cat([images, dx, dy], -3)


#: Levenberg-Marquardt damping of ``Aligner.gauss_newton``: its start (× each parameter's curvature), and the factors
#: it shrinks by after a step that lowered a pair's loss and grows by after one that did not.
LM_DAMPING, LM_SHRINK, LM_GROW = 1e-2, 3.0, 4.0


ADAM_BETAS, ADAM_EPS = (0.9, 0.999), 1e-8


@dataclass
class AdamState:
    """Adam's moments (one m and v per parameter tensor) and step count t, per pair: (B, K, ...)."""

    m: list[torch.Tensor]
    v: list[torch.Tensor]
    t: torch.Tensor

    @classmethod
    def zeros(cls, params: list[torch.Tensor]) -> AdamState:
        return cls([torch.zeros_like(p) for p in params], [torch.zeros_like(p) for p in params],
                   torch.zeros(params[0].shape[:2], device=params[0].device))

    def rows(self, idx) -> AdamState:
        return AdamState([m[idx] for m in self.m], [v[idx] for v in self.v], self.t[idx])

    def put_rows(self, idx, part: AdamState) -> None:
        for whole, rows in zip(self.m + self.v + [self.t], part.m + part.v + [part.t]):
            whole[idx] = rows


def adam(loss_fn, params: list[torch.Tensor], steps: int, lr: float, *, ticker: Ticker | None = None,
         stage: str = "", state: AdamState | None = None, project=None):
    """Adam on per-pair losses (generator; returns the best parameters seen, their losses, the Adam state).

    ``loss_fn(*params)`` gives one loss per pair (B, K); the parameters are (B, K, ...). Pairs are
    independent, so one optimiser over the summed loss is K·B separate Adam runs. Every pair keeps
    the best iterate it visits (the starting point included), which is what makes the Lloyd
    distortion monotone. ``state`` carries Adam's moments across calls (mini-batch mode); without it
    they start at zero. ``project`` maps the parameters back into their feasible set after each step.
    """
    params = [p.detach().clone() for p in params]
    best = [p.clone() for p in params]
    state = AdamState.zeros(params) if state is None else state
    best_loss = None
    for _ in range(steps):
        for p in params:
            p.requires_grad_(True)
        loss = loss_fn(*params)
        grads = torch.autograd.grad(loss.sum(), params)
        with torch.no_grad():
            loss = loss.detach()
            best_loss = loss.clone() if best_loss is None else _keep_better(best, best_loss, params, loss)
            params = _adam_step(params, grads, state, lr)
            if project is not None:
                params = project(params)
        if ticker is not None:
            yield ticker.tick(stage, float(best_loss.min(1).values.mean()))
    with torch.no_grad():
        loss = loss_fn(*params)
        if best_loss is None:
            return params, loss, state
        return best, _keep_better(best, best_loss, params, loss), state


def _keep_better(best: list[torch.Tensor], best_loss: torch.Tensor, params: list[torch.Tensor],
                 loss: torch.Tensor) -> torch.Tensor:
    """Copy into ``best`` (in place) the pairs whose ``loss`` undercuts ``best_loss``; returns the new best losses."""
    better = loss < best_loss
    best_loss = torch.where(better, loss, best_loss)
    for b, p in zip(best, params):   # torch.where, not b[better] = p[better]: no boolean gather and scatter
        b.copy_(torch.where(better.view(*better.shape, *[1] * (p.ndim - 2)), p.detach(), b))
    return best_loss


def _adam_step(params: list[torch.Tensor], grads, state: AdamState, lr: float) -> list[torch.Tensor]:
    """One Adam update of every pair, with its own bias correction (pairs may have taken different step counts)."""
    beta1, beta2 = ADAM_BETAS
    state.t += 1
    t = state.t
    out = []
    for i, (p, g) in enumerate(zip(params, grads)):
        m = state.m[i].mul_(beta1).add_(g, alpha=1 - beta1)
        v = state.v[i].mul_(beta2).addcmul_(g, g, value=1 - beta2)
        shape = t.shape + (1,) * (p.ndim - 2)
        m_hat = m / (1 - beta1 ** t).view(shape)
        v_hat = v / (1 - beta2 ** t).view(shape)
        out.append(p.detach() - lr * m_hat / (v_hat.sqrt() + ADAM_EPS))
    return out


@dataclass
class Moments:
    """The Adam states of the two alignment stages, kept per pair across calls (mini-batch mode)."""

    affine: AdamState | None = None
    warp: AdamState | None = None

    def rows(self, idx) -> Moments:
        return Moments(*(None if s is None else s.rows(idx) for s in (self.affine, self.warp)))

    def store(self, idx, part: Moments, n: int) -> None:
        """Write a batch's states back into rows ``idx`` of these (all-item, n rows) states."""
        self.affine = _stored(self.affine, part.affine, idx, n)
        self.warp = _stored(self.warp, part.warp, idx, n)


def _stored(whole: AdamState | None, part: AdamState | None, idx, n: int) -> AdamState | None:
    if part is None:
        return whole
    if whole is None:
        whole = AdamState.zeros([torch.zeros(n, *m.shape[1:], device=m.device) for m in part.m])
    whole.put_rows(idx, part)
    return whole


@dataclass
class Alignments:
    """Per-pair alignment state of items onto centroids: the affine maps ``theta`` (N, K, 6), the TPS
    displacements ``nu`` (N, K, ℓ, 2; None for affine only) and their losses (N, K). With one pair per
    item (N, 6) / (N, ℓ, 2), they are each item's warp onto its assigned centroid."""

    theta: torch.Tensor
    nu: torch.Tensor | None = None
    losses: torch.Tensor | None = None

    def rows(self, idx) -> Alignments:
        return Alignments(self.theta[idx], None if self.nu is None else self.nu[idx],
                          None if self.losses is None else self.losses[idx])

    def __setitem__(self, idx, part: Alignments) -> None:
        self.theta[idx] = part.theta
        if self.nu is not None:
            self.nu[idx] = part.nu
        self.losses[idx] = part.losses

    def assigned(self, labels: torch.Tensor) -> Alignments:
        """Each item's warp onto its assigned centroid: theta (N, 6), nu (N, ℓ, 2)."""
        return Alignments(assigned_pair(self.theta, labels), assigned_pair(self.nu, labels))

    def as_pairs(self) -> Alignments:
        """Per-item warps (N, ...) as one pair per item (N, 1, ...)."""
        return Alignments(self.theta[:, None], None if self.nu is None else self.nu[:, None])

    def take(self, pick: torch.Tensor) -> Alignments:
        """The pairs (B, m) picked by centroid index ``pick`` (B, m) out of these (B, K) pairs."""
        return Alignments(_along(self.theta, pick), _along(self.nu, pick), _along(self.losses, pick))

    def put(self, pick: torch.Tensor, part: Alignments) -> None:
        """Write the (B, m) pairs ``part`` back at centroid indices ``pick`` (B, m), in place."""
        for whole, rows in ((self.theta, part.theta), (self.nu, part.nu), (self.losses, part.losses)):
            if whole is not None:
                whole.scatter_(1, _index_like(pick, rows), rows)

    def reset(self, centroids) -> None:
        """Identity warps onto the given centroids (restarted on a raw item: identity aligns it exactly)."""
        self.theta[:, centroids] = 0
        if self.nu is not None:
            self.nu[:, centroids] = 0

    def column(self, j: int) -> Alignments:
        """Every item's warp onto centroid j: theta (N, 6), nu (N, ℓ, 2)."""
        return Alignments(self.theta[:, j], None if self.nu is None else self.nu[:, j])

    def copy_column(self, to: int, source: int) -> None:
        """Every item's warp and loss onto centroid ``source`` copied onto centroid ``to``, in place."""
        for t in (self.theta, self.nu, self.losses):
            if t is not None:
                t[:, to] = t[:, source]


def lower(a: Alignments, b: Alignments) -> Alignments:
    """Per pair, whichever of two alignments of the same pairs has the lower loss (``b`` on a tie)."""
    better = a.losses < b.losses

    def pick(u, v):
        return None if u is None else torch.where(better.view(*better.shape, *[1] * (u.ndim - 2)), u, v)
    return Alignments(pick(a.theta, b.theta), pick(a.nu, b.nu), torch.minimum(a.losses, b.losses))


def _index_like(pick: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """Centroid indices (B, m) expanded over the per-pair dimensions of t (B, K or m, ...)."""
    return pick.view(*pick.shape, *([1] * (t.ndim - 2))).expand(*pick.shape, *t.shape[2:])


def _along(t: torch.Tensor | None, pick: torch.Tensor) -> torch.Tensor | None:
    """t (B, K, ...) at centroid indices pick (B, m): (B, m, ...)."""
    if t is None:
        return None
    return t.gather(1, _index_like(pick, t))


class _SquaredDistance(torch.autograd.Function):
    """||warped − target||² over (C, H, W), its gradient 2 (warped − target) from the one saved difference:
    fewer passes over the pairs' pixels than autograd's square (the lean kernels' loss; target takes no gradient)."""

    @staticmethod
    def forward(ctx, warped: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        diff = warped - target
        ctx.save_for_backward(diff)
        return (diff * diff).sum((-3, -2, -1))

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (diff,) = ctx.saved_tensors
        return diff.mul_(2 * grad[..., None, None, None]), None


@dataclass
class Pyramid:
    """Images (B, C, H, W) and their low-passed copies, which the affine pre-alignment works on (App. B)."""

    full: torch.Tensor
    low: torch.Tensor

    def rows(self, idx) -> Pyramid:
        return Pyramid(self.full[idx], self.low[idx])


@dataclass
class Schedule:
    """Adam steps and learning rates of the two alignment stages, and the ticker that counts them."""

    affine_steps: int
    steps: int
    affine_lr: float
    lr: float
    ticker: Ticker | None = None

    @classmethod
    def of(cls, cfg, ticker: Ticker | None = None, steps: int | None = None) -> Schedule:
        """The config's stages; ``steps`` (mini-batch, prediction) replaces both step counts, the affine
        one only where the config runs an affine pre-alignment at all."""
        if steps is None:
            return cls(cfg.affine_steps, cfg.steps, cfg.affine_lr, cfg.lr, ticker)
        return cls(steps if cfg.affine_steps else 0, steps, cfg.affine_lr, cfg.lr, ticker)


class Aligner:
    """Warps of images onto centroids: affine (``landmarks`` None) or affine + TPS on a g×g grid; the
    affine maps are of the family ``linear`` (rigid, similarity or affine).

    A warp is a sampling grid F(p) = A(p) + Σ_j B_j(p) ν_j over the centroid's pixels p: the affine
    map A (6 parameters, zero = identity) composed with the thin-plate spline whose fixed source
    landmarks are a g×g grid and whose targets are A(s_j) + ν_j (the TPS reproduces affine maps, so
    this is a single TPS). B is the precomputed per-pixel TPS basis (kernel inverse done once).
    """

    def __init__(self, size: tuple[int, int], landmarks: int | None, device, *, lowpass: float = 0.0,
                 padding: str = "zeros", max_scale: float = math.inf, max_shift: float = math.inf,
                 max_displacement: float = math.inf, linear: str = "affine", lean: bool = False, work: int = 1):
        # work: the warps are fitted on images averaged over work×work blocks (``reduced``); a warp is the same map of
        # normalised coordinates at any size, so ``at_full_size`` applies it to the images as they are
        self.options = dict(lowpass=lowpass, padding=padding, max_scale=max_scale, max_shift=max_shift,
                            max_displacement=max_displacement, linear=linear, lean=lean)
        self.full_size, self.work = tuple(size), max(1, int(work))
        size = tuple(-(-int(s) // self.work) for s in size)
        self.size = size
        # lean: sampling grids made by one matrix product (``_grid_maps``) and each item sampled once for all its
        # pairs (``warp_pairs``): several times faster to differentiate, equal up to float roundoff. Predict's fast
        # path uses it; the fit keeps the elementwise form its pinned results were made with
        self.lean = lean
        self._maps: dict = {}   # matrices made once per size: the grid maps (``_grid_maps``), the low-pass sides
        self.linear = linear
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

    def at_full_size(self) -> "Aligner":
        """The same warps applied at the images' own size (itself when it fits there)."""
        if self.work == 1:
            return self
        return Aligner(self.full_size, self.landmarks, self.device, **self.options)

    def reduced(self, images: torch.Tensor) -> torch.Tensor:
        """Images (..., C, H, W) at the size the warps are fitted at: averaged over work×work blocks when they are at the
        full size (a last partial block averaged alone), as they are when already there."""
        if self.work == 1 or tuple(images.shape[-2:]) == self.size:
            return images
        lead = images.shape[:-3]
        out = F.avg_pool2d(images.reshape(-1, *images.shape[-3:]), self.work, ceil_mode=True)
        return out.reshape(*lead, *out.shape[-3:])

    @property
    def n_landmarks(self) -> int:
        return 0 if self.landmarks is None else self.landmarks ** 2

    def lowpass(self, images: torch.Tensor) -> torch.Tensor:
        """Images (..., C, H, W) blurred (Gaussian, ``sigma`` pixels, zero outside) and averaged down to ``low_size``:
        one linear map per side, so two small matrix products (``_lowpass_matrix``), several times cheaper on the CPU
        than the convolutions and pooling they equal (up to float roundoff)."""
        if self.sigma <= 0 and self.factor == 1:
            return images
        rows = self._lowpass_matrix(images.shape[-2], self.low_size[0]).to(images)
        cols = self._lowpass_matrix(images.shape[-1], self.low_size[1]).to(images)
        return rows @ images @ cols.T

    def _lowpass_matrix(self, n: int, m: int) -> torch.Tensor:
        """(m, n): a side of n pixels blurred by the Gaussian (zero outside) then averaged down to m
        (``adaptive_avg_pool1d``'s windows), as one matrix."""
        key = ("lowpass", n, m)
        if key not in self._maps:
            blur = gaussian_matrix(n, self.sigma, self.device) if self.sigma > 0 else torch.eye(n, device=self.device)
            pool = F.adaptive_avg_pool1d(torch.eye(n, device=self.device)[None], m)[0].T   # (m, n)
            self._maps[key] = pool @ blur
        return self._maps[key]

    def pyramid(self, images: torch.Tensor, chunk: int = LOWPASS_CHUNK) -> Pyramid:
        """Images at the warps' size (``reduced``) with their low-passed copies, filtered ``chunk`` images at a time: a
        convolution over a whole stack at once would allocate its unfolded buffer (N × kernel side × H × W) for every
        item."""
        images = self.reduced(images)
        low = [self.lowpass(images[s:s + chunk]) for s in range(0, images.shape[0], chunk)]
        return Pyramid(images, low[0] if len(low) == 1 else torch.cat(low))

    def project_affine(self, params: list[torch.Tensor]) -> list[torch.Tensor]:
        """Keep affine maps feasible: in the family ``linear``, singular values in [1/max_scale, max_scale],
        |shift| ≤ max_shift. Unbounded warps let an image shrink or slide off the frame until it matches
        any dim centroid."""
        theta = params[0]
        rows = theta.unflatten(-1, (2, 3))   # slices of the 2×3 view, not index lists: no gather per step
        if self.linear != "affine" or math.isfinite(self.max_scale):
            m = rows[..., :2] + torch.eye(2, device=theta.device)
            u, sv, vh = torch.linalg.svd(m)
            sv = FAMILY_SINGULAR_VALUES[self.linear](sv).clamp(1.0 / self.max_scale, self.max_scale)
            m = u @ (sv[..., None] * vh) - torch.eye(2, device=theta.device)
            rows = torch.cat([m, rows[..., 2:]], -1)
        if math.isfinite(self.max_shift):
            rows = torch.cat([rows[..., :2], rows[..., 2:].clamp(-self.max_shift, self.max_shift)], -1)
        return [rows.flatten(-2)] + list(params[1:])

    def project_tps(self, params: list[torch.Tensor]) -> list[torch.Tensor]:
        """Keep each landmark displacement within max_displacement × the landmark spacing."""
        if not math.isfinite(self.max_nu):
            return params
        return [p.clamp(-self.max_nu, self.max_nu) for p in params]

    def zeros(self, n: int, k: int) -> Alignments:
        """Identity warps of n items onto k centroids, their losses not yet known (inf)."""
        theta = torch.zeros(n, k, 6, device=self.device)
        nu = torch.zeros(n, k, self.n_landmarks, 2, device=self.device) if self.landmarks else None
        return Alignments(theta, nu, torch.full((n, k), math.inf, device=self.device))

    def _grid_maps(self, low: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """The identity grid (2P,) and the linear map (6 [+ 2ℓ], 2P) with grid = identity + [θ, ν] @ map, (x, y)
        interleaved per pixel: gx = (1 + θ₀) px + θ₁ py + θ₂ + Σ_j B_pj ν_jx, gy likewise with θ₃ θ₄ θ₅ and ν_jy.
        The backward of one product is one product, where the elementwise form reduces six broadcasts."""
        if low not in self._maps:
            pts = self.low_points if low else self.points
            px, py = pts[:, 0], pts[:, 1]
            one, zero = torch.ones_like(px), torch.zeros_like(px)
            rows = [(px, zero), (py, zero), (one, zero), (zero, px), (zero, py), (zero, one)]
            maps = torch.stack([torch.stack(r, -1).reshape(-1) for r in rows])
            if self.landmarks and not low:
                n = self.n_landmarks
                tps = torch.zeros(n, 2, pts.shape[0], 2, device=pts.device, dtype=pts.dtype)
                tps[:, 0, :, 0] = self.basis.T
                tps[:, 1, :, 1] = self.basis.T
                maps = torch.cat([maps, tps.reshape(2 * n, -1)])
            self._maps[low] = (pts.reshape(-1), maps)
        return self._maps[low]

    def grid(self, warps: Alignments, low: bool = False) -> torch.Tensor:
        """Sampling grids (..., h, w, 2) for affine parameters (..., 6) and displacements (..., ℓ, 2)."""
        theta, nu = warps.theta, warps.nu
        if self.lean:
            identity, maps = self._grid_maps(low)
            params = theta.reshape(-1, 6)
            if nu is not None and not low:
                params = torch.cat([params, nu.reshape(-1, 2 * self.n_landmarks)], 1)
            flat = torch.addmm(identity, params, maps[: params.shape[1]])
            return flat.reshape(*theta.shape[:-1], *(self.low_size if low else self.size), 2)
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

    def warp_pairs(self, x: torch.Tensor, warps: Alignments, low: bool = False) -> torch.Tensor:
        """Items x (B, C, H, W) warped by the (B, K) pair warps: (B, K, C, h, w)."""
        grid = self.grid(warps, low)
        if self.lean:   # the K grids of an item stacked into one tall grid: no K copies of the item
            b, k, h, w = grid.shape[:4]
            return warp(x, grid.reshape(b, k * h, w, 2), padding_mode=self.padding).unflatten(-2, (k, h)).transpose(1, 2)
        return warp(x[:, None], grid, padding_mode=self.padding)

    def pair_losses(self, x: torch.Tensor, mu: torch.Tensor, warps: Alignments, low: bool = False) -> torch.Tensor:
        """||T(x_i, ν_ik) − μ_k||² for all pairs, (B, K): centroids mu (K, C, H, W) shared by every item, or
        (B, K, C, H, W) of each pair's own (predict's candidates, ``Alignments.take``)."""
        target = mu if mu.ndim == x.ndim + 1 else mu[None]
        if self.lean:
            return _SquaredDistance.apply(self.warp_pairs(x, warps, low), target)
        return ((self.warp_pairs(x, warps, low) - target) ** 2).sum((-3, -2, -1))

    def align(self, x: Pyramid, mu: Pyramid, start: Alignments, schedule: Schedule, moments: Moments | None = None):
        """Improve the (B, K) alignments of items x onto centroids mu, warm-started from ``start`` (generator).

        Stage A (when it has steps) pre-aligns the affine maps on the low-passed images; stage B then
        refines at full resolution. Returns the Alignments with their losses, never worse per pair
        than ``start``. ``moments`` carries each stage's Adam state across calls (updated in place).
        """
        with torch.no_grad():
            best = Alignments(start.theta, start.nu, self.pair_losses(x.full, mu.full, start))
        if schedule.affine_steps > 0:
            best = yield from self._pre_align(x, mu, best, schedule, moments)
        return (yield from self._refine(x.full, mu.full, best, schedule, moments))

    def _pre_align(self, x: Pyramid, mu: Pyramid, best: Alignments, schedule: Schedule, moments: Moments | None):
        """Stage A: Adam on the affine maps of the low-passed images (from the best turn, see ``turned``).
        Each pair then keeps the best of (old affine, old ν), (new affine, old ν) and (new affine, ν = 0)
        as stage B's start."""
        (theta_a,), _, st = yield from adam(
            lambda th: self.pair_losses(x.low, mu.low, Alignments(th), low=True), [self.turned(x, mu, best.theta)],
            schedule.affine_steps,
            schedule.affine_lr, ticker=schedule.ticker, stage="affine pre-alignment",
            state=None if moments is None else moments.affine, project=self.project_affine)
        if moments is not None:
            moments.affine = st
        theta, nu, start_loss = best.theta, best.nu, best.losses
        with torch.no_grad():
            cands = [(theta_a, nu)] + ([(theta_a, torch.zeros_like(nu))] if nu is not None else [])
            for th_c, nu_c in cands:
                loss_c = self.pair_losses(x.full, mu.full, Alignments(th_c, nu_c))
                better = loss_c < start_loss
                start_loss = torch.where(better, loss_c, start_loss)
                theta = torch.where(better[..., None], th_c, theta)
                if nu is not None:
                    nu = torch.where(better[..., None, None], nu_c, nu)
        return Alignments(theta, nu, start_loss)

    @torch.no_grad()
    def turned(self, x: Pyramid, mu: Pyramid, theta: torch.Tensor) -> torch.Tensor:
        """Each pair's affine map after the best of ROTATION_STARTS turns of the centroid frame (low-pass
        loss; no turn may win): for the rigid and similarity families, whose Adam cannot leave a wrong
        orientation. The affine family's maps are returned as they are."""
        if self.linear == "affine":
            return theta
        best, best_loss = theta, self.pair_losses(x.low, mu.low, Alignments(theta), low=True)
        m = affine_matrix(theta)
        for turn in range(1, ROTATION_STARTS):
            angle = 2 * math.pi * turn / ROTATION_STARTS
            rot = theta.new_tensor([[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]])
            cand = (torch.cat([m[..., :2] @ rot, m[..., 2:]], -1) - torch.eye(2, 3, device=theta.device)).flatten(-2)
            loss = self.pair_losses(x.low, mu.low, Alignments(cand), low=True)
            better = loss < best_loss
            best, best_loss = torch.where(better[..., None], cand, best), torch.where(better, loss, best_loss)
        return best

    def _refine(self, x: torch.Tensor, mu: torch.Tensor, start: Alignments, schedule: Schedule, moments: Moments | None):
        """Stage B at full resolution: Adam on the landmark displacements with the affine maps fixed or,
        with no landmarks, on the affine maps. A pair keeps its start where Adam found nothing better."""
        if schedule.steps == 0:   # nothing to refine (predict's screen): start is priced already
            return start
        if start.nu is not None:   # the displacements move, the affine maps stay
            stage, param, project, warps = "TPS alignment", start.nu, self.project_tps, partial(Alignments, start.theta)
        else:
            stage, param, project, warps = "affine alignment", start.theta, self.project_affine, Alignments
        (new,), loss, st = yield from adam(
            lambda p: self.pair_losses(x, mu, warps(p)), [param], schedule.steps, schedule.lr, ticker=schedule.ticker,
            stage=stage, state=None if moments is None else moments.warp, project=project)
        if moments is not None:
            moments.warp = st
        better = loss < start.losses
        out = warps(torch.where(better.view(*better.shape, *[1] * (param.ndim - 2)), new, param))
        out.losses = torch.where(better, loss, start.losses)
        return out

    @torch.no_grad()
    def gauss_newton(self, x: torch.Tensor, mu: torch.Tensor, start: Alignments, iterations: int, *, low: bool = False,
                     tps: bool = False, damping: float = LM_DAMPING) -> Alignments:
        """Each pair's warp improved by Levenberg-Marquardt on its least squares ||T(x, q) − μ||² (predict's fast path):
        the affine maps (at low resolution on low-passed images x, mu with ``low``), or with ``tps`` the landmark
        displacements at full resolution, the affine maps fixed; ``damping`` is where the damping starts. The grid is
        linear in the parameters (``grid``), so one sampling of the items and their slopes (``image_slopes``) gives
        every pair's residual and Jacobian; a Gauss-Newton step travels in a few iterations what Adam takes tens of
        steps for. Per pair, a step that lowers the loss is kept
        (damping shrinks), one that does not is dropped (damping grows); the projections keep the warps feasible.
        Never worse than ``start`` per pair; returns the Alignments with their losses (at ``low``'s resolution)."""
        evaluate, warps, as_params = self._least_squares(x, mu, start, low, tps)
        project = self.project_tps if tps else self.project_affine
        q = start.nu if tps else start.theta
        loss, hess, grad = evaluate(q)
        damping = torch.full_like(loss, damping)
        for i in range(iterations):
            last = i == iterations - 1   # the last trial needs its loss alone: no slopes sampled, no JᵀJ made
            curvature = hess.diagonal(dim1=-2, dim2=-1)
            floor = 1e-6 * curvature.mean(-1, keepdim=True) + 1e-12   # a flat pair (blank image) still solves
            factor = torch.linalg.cholesky_ex(hess + torch.diag_embed(damping[..., None] * (curvature + floor)))[0]
            step = torch.cholesky_solve(-grad[..., None], factor)[..., 0]   # symmetric positive definite: Cholesky
            trial = project([q + as_params(step)])[0]
            t_loss, t_hess, t_grad = evaluate(trial, slopes=not last)
            better = t_loss < loss
            q = torch.where(better.view(*better.shape, *[1] * (q.ndim - 2)), trial, q)
            if not last:
                hess = torch.where(better[..., None, None], t_hess, hess)
                grad = torch.where(better[..., None], t_grad, grad)
            loss = torch.where(better, t_loss, loss)
            damping = torch.where(better, damping / LM_SHRINK, damping * LM_GROW)
        out = warps(q)
        out.losses = loss
        return out

    def _least_squares(self, x: torch.Tensor, mu: torch.Tensor, start: Alignments, low: bool, tps: bool):
        """:meth:`gauss_newton`'s least squares: ``evaluate(q)`` → every pair's loss, JᵀJ and Jᵀr at parameters q (with
        ``slopes=False`` the loss alone, JᵀJ and Jᵀr None),
        ``warps(q)`` the Alignments q makes from ``start``, ``as_params(step)`` a solved step laid out as q."""
        # the grid's x and y are each linear in their own parameters through the same functions φ of the pixel (affine:
        # px, py, 1 for θ₀₋₂ and θ₃₋₅; TPS: the landmarks' basis for ν_x and ν_y), so the Gauss-Newton matrix JᵀJ is
        # four blocks Σ_p w(p) φ_i(p) φ_j(p) with w = gx², gx·gy, gy² of the sampled slopes: one product each
        pts = self.low_points if low else self.points
        phi = self.basis if tps else torch.cat([pts, torch.ones_like(pts[:, :1])], 1)   # (P, n)
        n = phi.shape[1]
        channels = x.shape[-3]
        phi = phi.repeat(channels, 1)   # (CP, n): every channel's pixels in turn, as the images flatten
        rows, cols = torch.triu_indices(n, n, device=phi.device)   # JᵀJ is symmetric: each block's upper triangle
        outer = phi[:, rows] * phi[:, cols]   # (CP, n(n+1)/2)
        gradients = image_slopes(x, self.padding)
        target = (mu if mu.ndim == x.ndim + 1 else mu[None]).flatten(-3)   # (B or 1, K, CP)

        def warps(q):
            return Alignments(start.theta, q) if tps else Alignments(q, start.nu)

        def evaluate(q, slopes: bool = True):
            if not slopes:   # the images alone: the value channels of ``sampled`` below, sampled the same way
                residual = self.warp_pairs(x, warps(q), low).flatten(-3) - target
                return (residual * residual).sum(-1), None, None
            sampled = self.warp_pairs(gradients, warps(q), low).flatten(-2).unflatten(2, (3, channels)).flatten(-2)
            value, gx, gy = sampled.unbind(2)   # (B, K, CP) each
            residual = value - target
            products = torch.empty(5, *gx.shape, device=gx.device, dtype=gx.dtype)   # written in place: no stacking copy
            for out, (a, b) in zip(products, ((gx, gx), (gx, gy), (gy, gy), (gx, residual), (gy, residual))):
                torch.mul(a, b, out=out)
            upper = products[:3] @ outer   # (3, B, K, n(n+1)/2): one product for all pairs
            blocks = upper.new_empty(*upper.shape[:-1], n, n)
            blocks[..., rows, cols] = upper
            blocks[..., cols, rows] = upper
            hess = torch.cat([torch.cat([blocks[0], blocks[1]], -1), torch.cat([blocks[1], blocks[2]], -1)], -2)
            grad = torch.cat([products[3] @ phi, products[4] @ phi], -1)   # (B, K, 2n): x then y
            return (residual * residual).sum(-1), hess, grad

        def as_params(step):   # x then y parameters as the warp lays them out: θ in that order, ν as (ℓ, 2)
            return step.unflatten(-1, (2, n)).transpose(-1, -2) if tps else step

        return evaluate, warps, as_params

    def display_grids(self, warps: Alignments) -> torch.Tensor:
        """(N, gh, gw, 2) pixel (x, y) positions in each item of a regular lattice of the prototype frame."""
        lattice = (min(self.size[0], DISPLAY_LATTICE), min(self.size[1], DISPLAY_LATTICE))
        pix = lattice_pixels(self.size, lattice, self.device)
        pts = to_normalized(pix, self.size).reshape(-1, 2)
        g = affine_points(warps.theta, pts)
        if warps.nu is not None:
            g = g + tps_basis(self.landmarks).interpolation_matrix(pts).float() @ warps.nu
        return to_pixels(g, self.size).reshape(warps.theta.shape[0], *lattice, 2)

    def target_landmarks(self, warps: Alignments) -> torch.Tensor:
        """Pixel positions in the item of the landmarks: A(s_j) + ν_j, (N, ℓ, 2)."""
        src = tps_basis(self.landmarks).sources.to(self.device, torch.float32)
        return to_pixels(affine_points(warps.theta, src) + warps.nu, self.size)
