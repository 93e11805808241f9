"""Differentiable image transformations as plain functions of parameter tensors (napari-free, torch).

Coordinates follow ``torch.nn.functional.grid_sample`` with ``align_corners=False``: a point is
(x, y) in [-1, 1], x along the width, y along the height, (-1, -1) the outer corner of the top-left
pixel. A *sampling grid* (..., H, W, 2) gives, for every output pixel, the point of the input that
it reads; ``warp(images, grid)`` applies it. Every function takes parameters with arbitrary leading
batch dimensions (for example (B, K, P): B images × K prototypes) so that one call warps them all,
and zero parameters are the exact identity.
"""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from .sampler import bilinear_sample


# ---- coordinates ---------------------------------------------------------------------------------
def identity_points(size: tuple[int, int], device=None, dtype=torch.float32) -> torch.Tensor:
    """Normalised (x, y) centres of every pixel of an H×W image, (H, W, 2)."""
    h, w = size
    ys = (torch.arange(h, device=device, dtype=dtype) * 2 + 1) / h - 1
    xs = (torch.arange(w, device=device, dtype=dtype) * 2 + 1) / w - 1
    gy, gx = torch.meshgrid(ys, xs, indexing="ij")
    return torch.stack([gx, gy], dim=-1)


def to_pixels(points: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """Normalised (x, y) → pixel (x, y) positions (0 = centre of the first pixel)."""
    h, w = size
    scale = points.new_tensor([w / 2.0, h / 2.0])
    return (points + 1) * scale - 0.5


def to_normalized(pixels: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """Pixel (x, y) positions → normalised (x, y)."""
    h, w = size
    scale = pixels.new_tensor([2.0 / w, 2.0 / h])
    return (pixels + 0.5) * scale - 1


def lattice_pixels(size: tuple[int, int], lattice: tuple[int, int], device=None, dtype=torch.float32) -> torch.Tensor:
    """A regular gh×gw lattice of pixel positions spanning an H×W image, (gh, gw, 2) of (x, y)."""
    h, w = size
    gh, gw = lattice
    ys = torch.linspace(0, h - 1, gh, device=device, dtype=dtype)
    xs = torch.linspace(0, w - 1, gw, device=device, dtype=dtype)
    gy, gx = torch.meshgrid(ys, xs, indexing="ij")
    return torch.stack([gx, gy], dim=-1)


def warp(images: torch.Tensor, grid: torch.Tensor, padding_mode: str = "border", mode: str = "bilinear") -> torch.Tensor:
    """Sample ``images`` (..., C, H, W) at ``grid`` (..., Ho, Wo, 2), broadcasting the leading dims.

    One ``grid_sample`` call for the whole batch: e.g. prototypes (1, K, C, H, W) with grids
    (B, K, H, W, 2) give the B×K warped prototypes, items (B, 1, C, H, W) the B×K warped items.
    On CUDA, bilinear warps go through :func:`bilinear_sample`, whose backward has no atomic adds, so
    the same seed gives the same run (on the CPU ``grid_sample`` is already deterministic, and faster).
    """
    # NumPy's, not torch.broadcast_shapes: its first call imports torch._refs and sympy (0.3-1 s of a first fit)
    lead = np.broadcast_shapes(images.shape[:-3], grid.shape[:-3])
    c, h, w = images.shape[-3:]
    ho, wo = grid.shape[-3:-1]
    imgs = images.expand(*lead, c, h, w).reshape(-1, c, h, w)
    grd = grid.to(images.dtype).expand(*lead, ho, wo, 2).reshape(-1, ho, wo, 2)
    if imgs.is_cuda and mode == "bilinear" and padding_mode in ("zeros", "border"):
        out = bilinear_sample(imgs, grd, padding_mode)
    else:
        out = F.grid_sample(imgs, grd, mode=mode, padding_mode=padding_mode, align_corners=False)
    return out.reshape(*lead, c, ho, wo)


# ---- affine (6 parameters) -----------------------------------------------------------------------
def affine_matrix(params: torch.Tensor) -> torch.Tensor:
    """(..., 6) parameters → (..., 2, 3) matrices, identity plus the parameters."""
    eye = torch.eye(2, 3, device=params.device, dtype=params.dtype)
    return eye + params.reshape(*params.shape[:-1], 2, 3)


def affine_points(params: torch.Tensor, points: torch.Tensor) -> torch.Tensor:
    """Map normalised points (..., M, 2) by the affine maps of ``params`` (..., 6)."""
    m = affine_matrix(params)[..., None, :, :]   # elementwise: cheaper than many tiny batched matmuls
    x, y = points[..., 0:1], points[..., 1:2]
    return x * m[..., 0] + y * m[..., 1] + m[..., 2]


def affine_grid(params: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """Sampling grids (..., H, W, 2) of the affine maps ``params`` (..., 6): ``affine_points`` at the pixel centres.

    Without a graph (DTI's all-pairs warps) the same operations run on the x and y planes (..., 2, H, W), returned as
    a (..., H, W, 2) view: elementwise work along a last dimension of 2 is a slow loop on the CPU (measured: 3.4 against
    2.4 ms for 31×10 grids of 28×28) and ``grid_sample`` reads either layout, so the numbers are the same. With a
    graph the points are kept: the planes' backward would sum each parameter's gradient in another order (another
    last bit, so another run from the same seed)."""
    pts = identity_points(size, params.device, params.dtype)
    if params.requires_grad and torch.is_grad_enabled():
        return affine_points(params, pts.reshape(-1, 2)).reshape(*params.shape[:-1], *size, 2)
    x, y = pts[..., 0], pts[..., 1]
    m = affine_matrix(params)[..., None, None]                     # (..., 2, 3, 1, 1)
    planes = [x * m[..., r, 0, :, :] + y * m[..., r, 1, :, :] + m[..., r, 2, :, :] for r in (0, 1)]
    return torch.stack(planes, dim=-3).movedim(-3, -1)


def affine_inverse(params: torch.Tensor) -> torch.Tensor:
    """Parameters (..., 6) of the inverse affine maps."""
    m = affine_matrix(params)
    a_inv = torch.linalg.inv(m[..., :, :2])
    t_inv = -(a_inv @ m[..., :, 2:])
    eye = torch.eye(2, 3, device=params.device, dtype=params.dtype)
    return (torch.cat([a_inv, t_inv], dim=-1) - eye).reshape(params.shape)


# ---- similarity (4 parameters) and rigid (3) as affine maps -------------------------------------
def similarity_affine(params: torch.Tensor) -> torch.Tensor:
    """Affine parameters (..., 6) of the maps x ↦ s·R(θ)·x + t given by ``params`` (..., 4)
    [θ, log s, t_x, t_y], or (..., 3) [θ, t_x, t_y] for rigid maps (s = 1). Zero is the identity, and
    no parameter value shears, stretches one axis or mirrors: these warps keep an object's shape."""
    angle = params[..., 0]
    scale = torch.exp(params[..., 1]) if params.shape[-1] == 4 else torch.ones_like(angle)
    cos, sin = scale * torch.cos(angle), scale * torch.sin(angle)
    return torch.stack([cos - 1, -sin, params[..., -2], sin, cos - 1, params[..., -1]], dim=-1)


# ---- projective (8 parameters) -------------------------------------------------------------------
def projective_matrix(params: torch.Tensor) -> torch.Tensor:
    """(..., 8) parameters → (..., 3, 3) homographies, identity plus the parameters (last entry 1)."""
    full = torch.cat([params, torch.zeros_like(params[..., :1])], dim=-1)
    return torch.eye(3, device=params.device, dtype=params.dtype) + full.reshape(*params.shape[:-1], 3, 3)


def projective_points(params: torch.Tensor, points: torch.Tensor) -> torch.Tensor:
    """Map normalised points (..., M, 2) by the homographies ``params`` (..., 8)."""
    h = projective_matrix(params)
    homog = points @ h[..., :, :2].transpose(-1, -2) + h[..., None, :, 2]
    return homog[..., :2] / homog[..., 2:]


def projective_grid(params: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """Sampling grids (..., H, W, 2) of the homographies ``params`` (..., 8)."""
    pts = identity_points(size, params.device, params.dtype).reshape(-1, 2)
    return projective_points(params, pts).reshape(*params.shape[:-1], *size, 2)


def projective_inverse(params: torch.Tensor) -> torch.Tensor:
    """Parameters (..., 8) of the inverse homographies (normalised so the last entry is 1)."""
    h_inv = torch.linalg.inv(projective_matrix(params))
    h_inv = h_inv / h_inv[..., 2:, 2:]
    eye = torch.eye(3, device=params.device, dtype=params.dtype)
    return (h_inv - eye).reshape(*params.shape[:-1], 9)[..., :8]


# ---- thin-plate spline on a fixed g×g control grid -----------------------------------------------
#: When the TPS inverse's fixed-point iteration has converged: no point moves more (normalised units; 1e-6 is
#: 1/40,000 of a pixel on a 28-pixel side).
INVERSE_TOL = 1e-6


def _tps_kernel(d2: torch.Tensor) -> torch.Tensor:
    """U(r) = r² log r² written on squared distances, 0 at r = 0 (and a finite gradient there)."""
    return d2 * torch.log(d2 + 1e-20)


class TPSBasis:
    """The fixed part of a thin-plate spline with source landmarks on a g×g grid spanning [-1, 1]².

    The warp maps a point q to q + d(q); d interpolates the landmark displacements Δ (n, 2) with
    the thin-plate (minimum bending energy) spline, whose coefficients are linear in Δ:
    d(q) = φ(q) · L⁻¹[:, :n] · Δ with φ(q) = [U(|q - p_j|)_j, 1, x, y]. The kernel inverse L⁻¹ and,
    per image size, the per-pixel matrix φ(q)·L⁻¹[:, :n] (H·W, n) are computed once, so a grid
    costs one (H·W × n) @ (n × 2) product per warp.
    """

    def __init__(self, grid_size: int = 4):
        if grid_size < 2:
            raise ValueError("the TPS control grid needs at least 2×2 points")
        self.grid_size = grid_size
        lin = torch.linspace(-1, 1, grid_size, dtype=torch.float64)
        gy, gx = torch.meshgrid(lin, lin, indexing="ij")
        self.sources = torch.stack([gx, gy], dim=-1).reshape(-1, 2)  # (n, 2), row-major, (x, y)
        n = self.sources.shape[0]
        k = _tps_kernel(((self.sources[:, None] - self.sources[None]) ** 2).sum(-1))
        p = torch.cat([torch.ones(n, 1, dtype=torch.float64), self.sources], dim=1)
        top = torch.cat([k, p], dim=1)
        bottom = torch.cat([p.T, torch.zeros(3, 3, dtype=torch.float64)], dim=1)
        self.l_inv = torch.linalg.inv(torch.cat([top, bottom], dim=0))[:, :n]  # (n + 3, n)
        self._cache: dict = {}

    @property
    def n(self) -> int:
        return self.sources.shape[0]

    def features(self, points: torch.Tensor) -> torch.Tensor:
        """φ(q) (..., M, n + 3) for points (..., M, 2)."""
        src = self.sources.to(points.device, points.dtype)
        # x and y apart: the same sums bit for bit as ((p - s)²).sum(-1), without its (..., M, n, 2) temporary (10x faster)
        d2 = (points[..., :, None, 0] - src[:, 0]) ** 2 + (points[..., :, None, 1] - src[:, 1]) ** 2
        ones = torch.ones_like(points[..., :1])
        return torch.cat([_tps_kernel(d2), ones, points], dim=-1)

    def interpolation_matrix(self, points: torch.Tensor) -> torch.Tensor:
        """(..., M, n): displacements at ``points`` = this @ Δ."""
        return self.features(points.double()) @ self.l_inv.to(points.device)

    def pixel_matrix(self, size: tuple[int, int], device, dtype) -> torch.Tensor:
        """(H·W, n) interpolation matrix at the pixel centres, cached per size/device/dtype."""
        key = (tuple(size), str(device), dtype)
        if key not in self._cache:
            pts = identity_points(size, device, torch.float64).reshape(-1, 2)
            self._cache[key] = self.interpolation_matrix(pts).to(dtype)
        return self._cache[key]


_TPS_BASES: dict[int, TPSBasis] = {}


def tps_basis(grid_size: int = 4) -> TPSBasis:
    """The shared TPSBasis for a g×g control grid."""
    if grid_size not in _TPS_BASES:
        _TPS_BASES[grid_size] = TPSBasis(grid_size)
    return _TPS_BASES[grid_size]


def _tps_displacements(params: torch.Tensor, grid_size: int | None) -> tuple[torch.Tensor, int]:
    """Accept (..., n, 2) or flat (..., 2n) displacements; return (..., n, 2) and g."""
    if params.shape[-1] == 2 and params.ndim >= 2 and (grid_size is None or params.shape[-2] == grid_size ** 2):
        n = params.shape[-2]
        disp = params
    else:
        n = params.shape[-1] // 2
        disp = params.reshape(*params.shape[:-1], n, 2)
    g = int(round(math.sqrt(n)))
    if g * g != n or (grid_size is not None and g != grid_size):
        raise ValueError(f"TPS displacements of shape {tuple(params.shape)} do not fit a square control grid")
    return disp, g


def tps_grid(displacements: torch.Tensor, size: tuple[int, int], grid_size: int | None = None) -> torch.Tensor:
    """Sampling grids (..., H, W, 2) of TPS warps given control-point displacements.

    ``displacements``: (..., g·g, 2) or flat (..., 2·g·g), the (x, y) shifts, in normalised units,
    of the sampling positions at the fixed g×g control points (row-major from the top-left).
    """
    disp, g = _tps_displacements(displacements, grid_size)
    mat = tps_basis(g).pixel_matrix(size, disp.device, disp.dtype)  # (HW, n)
    base = identity_points(size, disp.device, disp.dtype)
    lead = disp.shape[:-2]
    # one GEMM for the whole batch: (batch·2, n) @ (n, HW)
    flat = disp.transpose(-1, -2).reshape(-1, disp.shape[-2]) @ mat.T
    return base + flat.reshape(*lead, 2, *size).movedim(-3, -1)


def tps_points(displacements: torch.Tensor, points: torch.Tensor, grid_size: int | None = None) -> torch.Tensor:
    """Map arbitrary normalised points (..., M, 2) by the TPS warps."""
    disp, g = _tps_displacements(displacements, grid_size)
    mat = tps_basis(g).interpolation_matrix(points).to(disp.dtype)
    return points + mat @ disp


def tps_inverse_points(displacements: torch.Tensor, points: torch.Tensor, grid_size: int | None = None,
                       iterations: int = 30, tol: float = INVERSE_TOL) -> torch.Tensor:
    """Approximate inverse of the TPS maps at ``points``: q with q + d(q) = p, by fixed-point iteration.

    Converges when the displacement field contracts (|∇d| < 1), the usual case for the smooth
    warps the methods learn; exact up to the iteration's tolerance otherwise it returns the last
    iterate. Stops once no point moves by more than ``tol`` (normalised units) in an iteration: a smooth warp's
    iteration contracts by |∇d| per step, so most batches are there in 5-10 of the ``iterations``.
    """
    disp, g = _tps_displacements(displacements, grid_size)
    basis = tps_basis(g)
    weights = (basis.l_inv.to(disp.device) @ disp.double())          # (..., n + 3, 2): d(q) = φ(q) @ weights
    q = points.expand(*np.broadcast_shapes(points.shape[:-2], disp.shape[:-2]), *points.shape[-2:])
    for _ in range(iterations):
        step = points - (basis.features(q.double()) @ weights).to(disp.dtype)
        moved = float((step - q).abs().max()) if step.numel() else 0.0
        q = step
        if moved <= tol:
            break
    return q


# ---- colour (per-channel affine: 2 parameters grey, 6 RGB) ---------------------------------------
def color_apply(images: torch.Tensor, params: torch.Tensor) -> torch.Tensor:
    """x·(1 + a_c) + b_c per channel; ``params`` (..., 2C) = [a_1..a_C, b_1..b_C], images (..., C, H, W)."""
    c = images.shape[-3]
    scale = 1 + params[..., :c, None, None]
    shift = params[..., c:, None, None]
    return images * scale + shift


def color_inverse(params: torch.Tensor) -> torch.Tensor:
    """Parameters of the inverse colour maps."""
    c = params.shape[-1] // 2
    scale = 1 + params[..., :c]
    return torch.cat([1 / scale - 1, -params[..., c:] / scale], dim=-1)


# ---- morphology (soft dilation / erosion, Eq. 6 of DTI) ------------------------------------------
def morpho_apply(images: torch.Tensor, params: torch.Tensor, kernel_size: int = 7) -> torch.Tensor:
    """Soft dilation (α > 0) or erosion (α < 0) of Eq. 6 over a k×k window.

    ``params`` (..., 1 + k²): α, then the window weights as offsets from the one-hot centre,
    a = clamp(δ_centre + p, 0, 1), so zero parameters give the exact identity for any α.
    out[u] = Σ_w x[u+w]·a[w]·e^{α x[u+w]} / Σ_w a[w]·e^{α x[u+w]}: both sums are depthwise
    convolutions (one grouped conv over the whole batch). For stability the exponent is shifted
    by α times the image's maximum (dilation) or minimum (erosion), which cancels in the ratio and
    keeps every exponential ≤ 1. Neighbours outside the image are left out of both sums.
    """
    k = kernel_size
    lead = np.broadcast_shapes(images.shape[:-3], params.shape[:-1])
    c, h, w = images.shape[-3:]
    x = images.expand(*lead, c, h, w).reshape(-1, c, h, w)
    p = params.expand(*lead, params.shape[-1]).reshape(-1, params.shape[-1])
    n = x.shape[0]
    alpha = p[:, :1, None, None]
    delta = torch.zeros(k * k, device=p.device, dtype=p.dtype)
    delta[k * k // 2] = 1
    a = (delta + p[:, 1:]).clamp(0, 1)
    flat = x.reshape(n, -1)
    ref = torch.where(alpha[:, 0, 0] >= 0, flat.max(1, keepdim=True).values, flat.min(1, keepdim=True).values)
    e = torch.exp(alpha * (x - ref.detach()[:, :, None, None]))
    weight = a.reshape(n, 1, k, k).repeat_interleave(c, dim=0)
    both = torch.cat([(x * e).reshape(1, n * c, h, w), e.reshape(1, n * c, h, w)], dim=0)
    conv = F.conv2d(both, weight, padding=k // 2, groups=n * c)
    out = conv[0] / conv[1].clamp_min(torch.finfo(conv.dtype).tiny)
    return out.reshape(*lead, c, h, w)


def assigned_pair(t: torch.Tensor | None, labels: torch.Tensor) -> torch.Tensor | None:
    """The assigned pair's values (N, ...) out of per-pair values (N, K, ...): each item's row for its ``labels`` (N,)."""
    if t is None:
        return None
    idx = labels.view(-1, 1, *([1] * (t.ndim - 2))).expand(-1, 1, *t.shape[2:])
    return t.gather(1, idx)[:, 0]
