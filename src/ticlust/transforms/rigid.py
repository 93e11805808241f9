"""Global rigid alignment: every in-plane angle (and optionally a mirror flip) × every shift, exhaustively.

The gradient-based alignments (``transforms.align``) start from the identity and stop in the nearest local
minimum: a pattern 120° away is never found. Cryo-EM 2D classification (RELION, cryoSPARC, ISAC) instead
searches every in-plane angle on a grid and every shift at once by cross-correlation; this module does
the same for B items against K prototypes, batched on the CPU or a GPU:

- the prototypes (cheaper: K × angles × flips copies, not B × ...) are turned about the image centre by a
  bilinear warp, and mirrored (x ↦ −x) when ``flip``;
- for every (item, turned prototype) pair, ||x − P(· − s)||² = ||x||² + ||P||² − 2 (x ⋆ P)(s) for every
  integer shift s, the cross-correlation x ⋆ P either by FFT (zero-padded: no wrap-around, every shift of
  the window at once) or, for a small shift window, as one matrix product with the shifted prototypes
  (fewer operations than an FFT of the padded frame when the window holds a few dozen shifts);
- the best (angle, flip, shift) of each pair is kept: its squared distance, and the affine map that
  carries the item onto the prototype's frame (``theta``, the convention of ``transforms.align``:
  aligned(p) = x(A p + t) in normalised coordinates), so that it can start an affine or TPS refinement.

Distances are compared in the infinite plane (both images zero outside their frame), as the
cross-correlation sees them. :func:`angle_count` picks the angular step from the crop size.
"""
from __future__ import annotations

import math
import dataclasses
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..events import drain
from .core import assigned_pair, identity_points, warp

#: Angular step: a point on the inscribed circle moves at most this many pixels between two angles tried.
RIM_STEP_PX = 2.0
#: The default largest shift searched, as a fraction of the half image side (rigid-kmeans, ai/st-kmeans' rigid start).
SHIFT_FRACTION = 0.15
#: Pairs × shifts × pixels of one matrix-product block (memory ~ 4 bytes each for the scores).
DIRECT_BLOCK = 2 ** 27
#: FFT pairs handled at once (memory ~ 8 bytes × padded pixels each, a few times over).
FFT_BLOCK_PAIRS = 4096


def angle_count(size: tuple[int, int], rim_step: float = RIM_STEP_PX) -> int:
    """Angles tried over 360°: a step that moves a point on the inscribed circle by ``rim_step`` pixels,
    rounded up to a multiple of 4 (so that the quarter turns are on the grid): 44 for 28×28, 52 for 32×32."""
    radius = min(size) / 2.0
    n = math.ceil(2 * math.pi * radius / rim_step)
    return max(4, 4 * math.ceil(n / 4))


def shift_pixels(fraction: float, size: tuple[int, int]) -> int:
    """The search's shift bound in pixels for a bound given as a fraction of the half image side (2 px for 28×28 at 0.15)."""
    return int(round(fraction * min(size) / 2))


def _norm_matrix(size: tuple[int, int], device, dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """S and S⁻¹ with pixel offsets from the centre = S · normalised coordinates (x, y)."""
    h, w = size
    s = torch.tensor([[w / 2.0, 0.0], [0.0, h / 2.0]], device=device, dtype=dtype)
    return s, torch.linalg.inv(s)


def rotations(angles: torch.Tensor, flips: torch.Tensor) -> torch.Tensor:
    """Pixel-space 2×2 maps R(a)·Fᶠ (F: x ↦ −x), (..., 2, 2), for angles (...) in radians and flips (...) bool."""
    c, s = torch.cos(angles), torch.sin(angles)
    fx = torch.where(flips, -torch.ones_like(c), torch.ones_like(c))
    return torch.stack([torch.stack([c * fx, -s], -1), torch.stack([s * fx, c], -1)], -2)


def turned_prototypes(mu: torch.Tensor, angles: torch.Tensor, flips: torch.Tensor) -> torch.Tensor:
    """Prototypes mu (K, C, H, W) turned by each (angle, flip) pose (M,): (K, M, C, H, W), zero outside.
    A pose's copy is P(p) = mu((R(a)Fᶠ)⁻¹ p) about the image centre, in pixel units (any aspect ratio)."""
    size = tuple(mu.shape[-2:])
    s, s_inv = _norm_matrix(size, mu.device, mu.dtype)
    inv = torch.linalg.inv(rotations(angles, flips).to(mu.dtype))            # (M, 2, 2), pixel space
    a = s_inv @ inv @ s                                                      # normalised space
    pts = identity_points(size, mu.device, mu.dtype).reshape(-1, 2)          # (P, 2)
    grid = torch.einsum("mij,pj->mpi", a, pts).reshape(len(angles), *size, 2)
    return warp(mu[:, None], grid[None], padding_mode="zeros", mode="bilinear")


@dataclass
class RigidMatch:
    """The best rigid pose of every (item, prototype) pair: ``angle`` (B, K) radians, ``flip`` (B, K) bool,
    ``shift`` (B, K, 2) pixels (x, y), ``score`` (B, K) the squared distance at that pose; ``theta``
    (B, K, 6) the affine parameters of ``transforms.align`` that carry the item onto the prototype's frame."""

    angle: torch.Tensor
    flip: torch.Tensor
    shift: torch.Tensor
    score: torch.Tensor
    theta: torch.Tensor

    def assigned(self, labels: torch.Tensor) -> "RigidMatch":
        """Each item's pose onto its own prototype ``labels`` (B,): every field with the prototype axis taken away."""
        return RigidMatch(*(assigned_pair(getattr(self, field.name), labels) for field in dataclasses.fields(self)))

    def put(self, rows: torch.Tensor, match: "RigidMatch") -> None:
        """Set rows ``rows`` of this match of one pose per item (fields (B, ...)) from a search of those items against a
        single prototype (``match``'s fields (b, 1, ...))."""
        for field in dataclasses.fields(self):
            getattr(self, field.name)[rows] = getattr(match, field.name)[:, 0]


def pose_theta(angle: torch.Tensor, flip: torch.Tensor, shift: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """Affine parameters (..., 6) of T(q) = R(a)Fᶠ q + s (pixel offsets from the centre) in normalised
    coordinates: the item x matches the prototype turned and shifted, x(p) ≈ mu(T⁻¹ p), so the item
    aligned onto the prototype is x(T q), i.e. ``warp(x, affine_grid(theta))``."""
    s, s_inv = _norm_matrix(size, angle.device, torch.float32)
    a = s_inv @ rotations(angle.float(), flip) @ s                           # (..., 2, 2)
    t = shift.float() @ s_inv.T                                              # (..., 2)
    return torch.stack([a[..., 0, 0] - 1, a[..., 0, 1], t[..., 0], a[..., 1, 0], a[..., 1, 1] - 1, t[..., 1]], -1)


def _shift_window(size: tuple[int, int], max_shift: int | None) -> tuple[int, int]:
    h, w = size
    if max_shift is None:
        return h - 1, w - 1
    return min(int(max_shift), h - 1), min(int(max_shift), w - 1)


def _fft_size(size: tuple[int, int], window: tuple[int, int]) -> tuple[int, int]:
    """The zero-padded frame: no shift in the window wraps around."""
    return size[0] + window[0], size[1] + window[1]


def _correlate_fft(x: torch.Tensor, fp: torch.Tensor, window: tuple[int, int]) -> torch.Tensor:
    """(x ⋆ P)(s) = Σ_q x(q) P(q − s) for |s_y| ≤ wy, |s_x| ≤ wx: x (B, C, H, W) and the prototypes' spectra fp
    (M, C, fh, fw/2+1) (``rfft2`` on the padded frame, :func:`_fft_size`) → (B, M, 2wy+1, 2wx+1)."""
    wy, wx = window
    fh, fw = _fft_size(tuple(x.shape[-2:]), window)
    fx = torch.fft.rfft2(x, s=(fh, fw))                                     # (B, C, fh, fw/2+1)
    rows = torch.arange(-wy, wy + 1, device=x.device) % fh
    cols = torch.arange(-wx, wx + 1, device=x.device) % fw
    step = max(1, FFT_BLOCK_PAIRS // max(len(x), 1))
    out = []
    for c in range(0, fp.shape[0], step):
        corr = torch.fft.irfft2((fx[:, None] * fp[None, c:c + step].conj()).sum(2), s=(fh, fw))   # index s mod (fh, fw)
        out.append(corr[..., rows[:, None], cols[None, :]])
    return torch.cat(out, 1)


def _correlate_direct(x: torch.Tensor, p: torch.Tensor, window: tuple[int, int]) -> torch.Tensor:
    """The same correlations as :func:`_correlate_fft`, as products with every shifted copy of P."""
    b, m = p.shape[:2]
    wy, wx = window
    h, w = x.shape[-2:]
    pad = F.pad(p.reshape(b * m, -1, h, w), (wx, wx, wy, wy))
    out = torch.empty(b, m, 2 * wy + 1, 2 * wx + 1, device=x.device, dtype=x.dtype)
    xf = x.reshape(b, 1, -1)
    for i, sy in enumerate(range(-wy, wy + 1)):
        for j, sx in enumerate(range(-wx, wx + 1)):
            # P(q − s) over the item frame: the padded copy read from (wy − sy, wx − sx)
            crop = pad[..., wy - sy:wy - sy + h, wx - sx:wx - sx + w].reshape(b, m, -1)
            out[:, :, i, j] = (crop * xf).sum(-1)
    return out


def shifted_copies(turned: torch.Tensor, window: tuple[int, int]) -> torch.Tensor:
    """Every shifted copy P(q − s) of the turned prototypes (M, C, H, W) over the window, flat: (M·S, C·H·W)."""
    m = turned.shape[0]
    wy, wx = window
    h, w = turned.shape[-2:]
    pad = F.pad(turned, (wx, wx, wy, wy))
    copies = torch.stack([pad[..., wy - sy:wy - sy + h, wx - sx:wx - sx + w]
                          for sy in range(-wy, wy + 1) for sx in range(-wx, wx + 1)], 1)   # (M, S, C, H, W)
    return copies.reshape(m * copies.shape[1], -1)


def _correlate_gemm(x: torch.Tensor, copies: torch.Tensor, window: tuple[int, int]) -> torch.Tensor:
    """Correlations of every item x (B, C, H, W) with every turned prototype, from their shifted copies
    (:func:`shifted_copies`), as one matrix product: (B, M, 2wy+1, 2wx+1)."""
    wy, wx = window
    return (x.reshape(x.shape[0], -1) @ copies.T).reshape(x.shape[0], -1, 2 * wy + 1, 2 * wx + 1)


def rigid_search(x: torch.Tensor, mu: torch.Tensor, n_angles: int | None = None, flip: bool = False,
                 max_shift: int | None = None, engine: str = "auto", block: int = 256) -> RigidMatch:
    """Best rigid pose of every item x (B, C, H, W) against every prototype mu (K, C, H, W).

    ``n_angles`` angles evenly over 360° (None: :func:`angle_count`), each also mirrored when ``flip``; every
    integer shift with |s| ≤ ``max_shift`` pixels per axis (None: every shift that keeps some overlap).
    ``engine``: ``fft`` (every shift at once, cost independent of the window), ``gemm`` (one matrix
    product with the shifted copies: faster for small windows) or ``auto`` (gemm up to 49 shifts).
    Items are processed ``block`` at a time: ``x`` may be anything that slices like the tensor (``shape``,
    ``device``, ``x[s:t]``), so a stack's images read block by block (``core.stack.StackImages``) are never held
    whole. Ties keep the first pose (angle 0 unflipped first).
    """
    return drain(rigid_search_blocks(x, mu, n_angles, flip, max_shift, engine, block))


def rigid_search_blocks(x: torch.Tensor, mu: torch.Tensor, n_angles: int | None = None, flip: bool = False,
                        max_shift: int | None = None, engine: str = "auto", block: int = 256):
    """:func:`rigid_search` as a generator that yields (blocks done, blocks) after each block of ``block`` items, for a
    caller's progress; returns the RigidMatch. The prototypes are turned and shifted (or transformed) once for all
    blocks."""
    size = tuple(x.shape[-2:])
    n_angles = angle_count(size) if n_angles is None else int(n_angles)
    angles = torch.arange(n_angles, device=x.device, dtype=torch.float32) * (2 * math.pi / n_angles)
    flips = torch.zeros(n_angles, dtype=torch.bool, device=x.device)
    if flip:
        angles, flips = torch.cat([angles, angles]), torch.cat([flips, ~flips])
    window = _shift_window(size, max_shift)
    n_shifts = (2 * window[0] + 1) * (2 * window[1] + 1)
    if engine == "auto":
        engine = "gemm" if n_shifts <= 49 else "fft"
    k, m = mu.shape[0], len(angles)
    turned = turned_prototypes(mu, angles, flips)                               # (K, M, C, H, W)
    energy = (turned ** 2).sum((-3, -2, -1)).reshape(1, k * m, 1)               # ||P||² per turned prototype
    flat = turned.reshape(k * m, *turned.shape[2:])
    copies = shifted_copies(flat, window) if engine == "gemm" else None
    spectra = torch.fft.rfft2(flat, s=_fft_size(size, window)) if engine == "fft" else None
    best_score, best_index = [], []
    starts = range(0, x.shape[0], block)
    for done, s in enumerate(starts, 1):
        xb = x[s:s + block]
        if engine == "fft":
            corr = _correlate_fft(xb, spectra, window)
        elif engine == "gemm":
            corr = _correlate_gemm(xb, copies, window)
        elif engine == "direct":
            corr = _correlate_direct(xb, flat[None].expand(len(xb), -1, -1, -1, -1), window)
        else:
            raise ValueError(f"engine={engine!r}: choose fft, gemm, direct or auto")
        d2 = (xb ** 2).sum((-3, -2, -1)).view(-1, 1, 1) + energy - 2 * corr.reshape(len(xb), k * m, -1)
        d2 = d2.reshape(len(xb), k, m * n_shifts)
        val, idx = d2.min(-1)
        best_score.append(val.clamp_min(0))
        best_index.append(idx)
        yield done, len(starts)
    score, idx = torch.cat(best_score), torch.cat(best_index)
    pose, cell = idx // n_shifts, idx % n_shifts
    sy = cell // (2 * window[1] + 1) - window[0]
    sx = cell % (2 * window[1] + 1) - window[1]
    angle, flipped = angles[pose], flips[pose]
    shift = torch.stack([sx, sy], -1).to(torch.float32)
    return RigidMatch(angle, flipped, shift, score, pose_theta(angle, flipped, shift, size))


def aligned_items(x: torch.Tensor, theta: torch.Tensor) -> torch.Tensor:
    """Items x (B, C, H, W) carried onto their prototype's frame by their affine parameters theta (B, 6)."""
    from .core import affine_grid

    return warp(x, affine_grid(theta, tuple(x.shape[-2:])), padding_mode="zeros")


def compose(first: torch.Tensor, then: torch.Tensor) -> torch.Tensor:
    """Affine parameters (..., 6) of q ↦ first(then(q)): the grid of ``then`` read through ``first``.
    With x(first q) ≈ mu(q) and mu(then q') ≈ ref(q'), x(compose(first, then) q') ≈ ref(q')."""
    eye = torch.eye(3, device=first.device, dtype=first.dtype)
    a = eye.expand(*first.shape[:-1], 3, 3).clone()
    b = eye.expand(*then.shape[:-1], 3, 3).clone()
    a[..., :2, :] += first.reshape(*first.shape[:-1], 2, 3)
    b[..., :2, :] += then.reshape(*then.shape[:-1], 2, 3)
    return ((a @ b)[..., :2, :] - torch.eye(2, 3, device=first.device, dtype=first.dtype)).flatten(-2)


def common_frame(mu: torch.Tensor, n_angles: int | None = None, flip: bool = False, max_shift: int | None = None) -> torch.Tensor:
    """Poses (K, 6) that carry K prototypes (K, C, H, W) into one shared frame: a spanning tree grown from
    prototype 0 (Prim's order), each prototype posed by the rigid search onto its nearest prototype already
    placed (as placed). Items posed onto their own prototype (theta_i) then share the frame through
    ``compose(theta_i, frame[label_i])``: similar prototypes (the same kind split in two, or two kinds
    that look alike) end up turned alike, whatever angle each Lloyd run left them at."""
    k = mu.shape[0]
    frames = torch.zeros(k, 6, device=mu.device)
    placed = [0]
    canon = {0: mu[0]}
    while len(placed) < k:
        rest = [c for c in range(k) if c not in canon]
        ref = torch.stack([canon[p] for p in placed])
        match = rigid_search(mu[rest], ref, n_angles=n_angles, flip=flip, max_shift=max_shift)
        flat = int(match.score.argmin())
        i, j = divmod(flat, len(placed))
        c = rest[i]
        frames[c] = match.theta[i, j]                      # onto the placed one as placed: already the shared frame
        canon[c] = aligned_items(mu[c:c + 1], frames[c:c + 1])[0]
        placed.append(c)
    return frames
