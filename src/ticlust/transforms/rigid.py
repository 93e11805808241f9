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
#: The coarse-to-fine search halves the resolution while the smaller side stays at least this (``pyramid_levels``),
#: from crops of PYRAMID_SIDE on; smaller crops are searched exhaustively (on 32-px nuclei the 16-px coarse search
#: missed a fifth of the item-on-own-prototype poses; the exhaustive search costs little there).
COARSEST_SIDE, PYRAMID_SIDE = 16, 48
#: Bytes of the turned prototypes gathered for one step of the local refinement (items × K × 3 angles of them).
REFINE_BLOCK_BYTES = 2 ** 25
#: Prototypes per item whose full-resolution pose the coarse-to-fine search refines last (the nearest after its
#: every-pose step); the others keep that step's pose and score.
REFINED = 3
#: The most local searches (±1 angle × 3×3 shifts) at full resolution for a pair whose pose keeps moving.
CLIMBS = 4
#: Prototypes per item (the nearest) whose shift the search checks again at half resolution before the climb.
AGAIN = 1


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
                 max_shift: int | None = None, engine: str = "auto", block: int = 256, levels: int | None = None) -> RigidMatch:
    """Best rigid pose of every item x (B, C, H, W) against every prototype mu (K, C, H, W).

    ``n_angles`` angles evenly over 360° (None: :func:`angle_count`), each also mirrored when ``flip``; every
    integer shift with |s| ≤ ``max_shift`` pixels per axis (None: every shift that keeps some overlap).
    ``levels``: halvings of the resolution searched coarse to fine (None: :func:`pyramid_levels`, 0 below 32 px;
    0: every pose at full resolution, exhaustively). ``engine`` (the exhaustive search's, or the coarsest level's):
    ``fft`` (every shift at once), ``gemm`` (one matrix product with the shifted copies: faster for small windows),
    ``direct`` (the plain sums) or ``auto`` (gemm up to 49 shifts).
    Items are processed ``block`` at a time: ``x`` may be anything that slices like the tensor (``shape``,
    ``device``, ``x[s:t]``), so a stack's images read block by block (``core.stack.StackImages``) are never held
    whole. Ties keep the first pose (angle 0 unflipped first).
    """
    return drain(rigid_search_blocks(x, mu, n_angles, flip, max_shift, engine, block, levels))


def pyramid_levels(size: tuple[int, int], n_angles: int | None = None) -> int:
    """The halvings of a coarse-to-fine search: none below ``PYRAMID_SIDE`` (the exhaustive search is cheap there: 0 for
    28×28, 32×32, 40×40), else the resolution is halved while the smaller side stays ≥ ``COARSEST_SIDE`` (1 for 48×48,
    2 for 64×64, 3 for 128×128), and no more than the angle grid allows (its count divisible by 2^(levels − 1), so that
    every finer level's angles lie on the grid)."""
    n_angles = angle_count(size) if n_angles is None else int(n_angles)
    levels, side = 0, min(size)
    if side < PYRAMID_SIDE:
        return 0
    while side // 2 >= COARSEST_SIDE and (levels == 0 or n_angles % 2 ** levels == 0):
        levels, side = levels + 1, side // 2
    return levels


def rigid_search_blocks(x: torch.Tensor, mu: torch.Tensor, n_angles: int | None = None, flip: bool = False,
                        max_shift: int | None = None, engine: str = "auto", block: int = 256, levels: int | None = None):
    """:func:`rigid_search` as a generator that yields (blocks done, blocks) after each block of ``block`` items, for a
    caller's progress; returns the RigidMatch. The prototypes are turned and shifted (or transformed) once for all
    blocks."""
    size = tuple(x.shape[-2:])
    n_angles = angle_count(size) if n_angles is None else int(n_angles)
    levels = pyramid_levels(size, n_angles) if levels is None else int(levels)
    if levels > 1 and n_angles % 2 ** (levels - 1):
        raise ValueError(f"levels={levels}: {n_angles} angles are not divisible by {2 ** (levels - 1)}")
    window = _shift_window(size, max_shift)
    search = (_Pyramid(mu, n_angles, flip, window, engine, levels) if levels > 0
              else _Exhaustive(mu, *pose_grid(n_angles, flip, mu.device), window, engine))
    found = []
    starts = range(0, x.shape[0], block)
    for done, s in enumerate(starts, 1):
        found.append(search(x[s:s + block].contiguous()))   # one layout (a stack reads channels-last)
        yield done, len(starts)
    score, pose, shift = (torch.cat(parts) for parts in zip(*found))
    angles, flips = pose_grid(n_angles, flip, mu.device)
    angle, flipped = angles[pose], flips[pose]
    return RigidMatch(angle, flipped, shift, score, pose_theta(angle, flipped, shift, size))


def pose_grid(n_angles: int, flip: bool, device) -> tuple[torch.Tensor, torch.Tensor]:
    """The poses searched, (M,) angles in radians and (M,) flips: ``n_angles`` angles from 0, then (``flip``) the same
    angles mirrored; pose m is angle m mod n_angles."""
    angles = torch.arange(n_angles, device=device, dtype=torch.float32) * (2 * math.pi / n_angles)
    flips = torch.zeros(n_angles, dtype=torch.bool, device=device)
    if flip:
        angles, flips = torch.cat([angles, angles]), torch.cat([flips, ~flips])
    return angles, flips


class _Exhaustive:
    """Every pose (angles, flips) × every shift of the window for K prototypes, turned and shifted (or transformed)
    once; called on a block of items it returns their best (score (B, K), pose index (B, K), shift (B, K, 2) x/y)."""

    def __init__(self, mu: torch.Tensor, angles: torch.Tensor, flips: torch.Tensor, window: tuple[int, int], engine: str):
        n_shifts = (2 * window[0] + 1) * (2 * window[1] + 1)
        self.engine = ("gemm" if n_shifts <= 49 else "fft") if engine == "auto" else engine
        if self.engine not in ("fft", "gemm", "direct"):
            raise ValueError(f"engine={engine!r}: choose fft, gemm, direct or auto")
        self.k, self.m, self.window, self.n_shifts = mu.shape[0], len(angles), window, n_shifts
        turned = turned_prototypes(mu, angles, flips)                               # (K, M, C, H, W)
        self.energy = (turned ** 2).sum((-3, -2, -1)).reshape(1, self.k * self.m, 1)   # ||P||² per turned prototype
        self.flat = turned.reshape(self.k * self.m, *turned.shape[2:])
        self.copies = shifted_copies(self.flat, window) if self.engine == "gemm" else None
        self.spectra = torch.fft.rfft2(self.flat, s=_fft_size(tuple(mu.shape[-2:]), window)) if self.engine == "fft" else None

    def __call__(self, xb: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if self.engine == "fft":
            corr = _correlate_fft(xb, self.spectra, self.window)
        elif self.engine == "gemm":
            corr = _correlate_gemm(xb, self.copies, self.window)
        else:
            corr = _correlate_direct(xb, self.flat[None].expand(len(xb), -1, -1, -1, -1), self.window)
        d2 = (xb ** 2).sum((-3, -2, -1)).view(-1, 1, 1) + self.energy - 2 * corr.reshape(len(xb), self.k * self.m, -1)
        val, idx = d2.reshape(len(xb), self.k, self.m * self.n_shifts).min(-1)
        pose, cell = idx // self.n_shifts, idx % self.n_shifts
        wy, wx = self.window
        shift = torch.stack([cell % (2 * wx + 1) - wx, cell // (2 * wx + 1) - wy], -1)
        return val.clamp_min(0), pose, shift.to(torch.float32)


def halved(x: torch.Tensor, times: int) -> torch.Tensor:
    """Images x (N, C, H, W) averaged over 2×2 blocks ``times`` times (an odd last row or column averaged alone)."""
    for _ in range(times):
        x = F.avg_pool2d(x, 2, ceil_mode=True)
    return x


class _Pyramid:
    """Coarse to fine, as cryo-EM 2D classification searches. At the coarsest level (the images halved ``levels`` times)
    every 2^levels-th angle of the grid × every shift of the window; at each finer level but the last, the angle found
    and its two neighbours on that level's grid × the 3×3 integer shifts about twice the shift found; at full
    resolution every pose of the grid at twice the shift found (one matrix product per prototype). Each item's nearest
    prototype (``AGAIN``) is searched again: every pose of the half-resolution grid at the 3×3 shifts about the
    half-resolution shift, then every full-resolution pose at twice the best of them; the better pose is kept. From
    there its ``REFINED`` nearest prototypes climb: the pose's two neighbouring angles × the 3×3 shifts, again from
    where that lands while the pose moves (at most ``CLIMBS`` times). The angle is chosen at full resolution because a coarse image hides what
    turns a round cell (its texture); the shift is found coarse (its outline), then checked a pixel about. Every pose
    returned and its score are one the exhaustive search compares; what it can miss is a pose whose coarse image
    ranked below another's (``tests/transforms/test_rigid_pyramid.py``, benchmarks/results/rigid_pyramid.md)."""

    def __init__(self, mu: torch.Tensor, n_angles: int, flip: bool, window: tuple[int, int], engine: str, levels: int):
        self.n_angles, self.k = n_angles, mu.shape[0]
        self.windows = [tuple(-(-w // 2 ** level) for w in window) for level in range(levels + 1)]
        angles, flips = pose_grid(n_angles, flip, mu.device)
        on_level = [torch.nonzero(torch.arange(len(angles), device=mu.device) % n_angles % 2 ** level == 0).flatten()
                    for level in range(levels + 1)]        # the poses of each level's grid, as indices of the full one
        self.coarse_poses = on_level[levels]
        self.coarse = _Exhaustive(halved(mu, levels), angles[self.coarse_poses], flips[self.coarse_poses],
                                  self.windows[levels], engine)
        self.banks = []     # per level below the coarsest, and the next: its prototypes turned to its poses, a blank last
        for level in range(max(levels, 2)):
            turned = turned_prototypes(halved(mu, level), angles[on_level[level]], flips[on_level[level]]).flatten(0, 1)
            self.banks.append((torch.cat([turned, torch.zeros_like(turned[:1])]), (turned ** 2).sum((-3, -2, -1))))

    def __call__(self, xb: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        levels = len(self.windows) - 1
        pyramid = [xb]
        for _ in range(levels):
            pyramid.append(halved(pyramid[-1], 1))
        padded = [_Padded(x, w) for x, w in zip(pyramid, self.windows)]
        b = len(xb)
        item = torch.arange(b, device=xb.device).repeat_interleave(self.k)   # every (item, prototype) pair, flat
        proto = torch.arange(self.k, device=xb.device).repeat(b)
        score, pose, shift = (v.flatten(0, 1) for v in self.coarse(pyramid[-1]))
        pose = self.coarse_poses[pose]
        for level in reversed(range(1, levels)):
            score, pose, shift = self._local(padded[level], level, item, proto, pose, 2 * shift, 1)
        half = shift                                                       # the shifts at half resolution
        score, pose, shift = self._every_pose(padded[0], 0, item, proto, 2 * shift)
        near = score.view(b, self.k).argsort(1)[:, :REFINED]
        pairs = (near + torch.arange(b, device=xb.device)[:, None] * self.k).flatten()
        first = pairs.view(b, -1)[:, :AGAIN].flatten()
        again = self._searched_again(padded, item[first], proto[first], half[first], shift[first])
        if again is not None:
            moved, found = again
            better = found[0] < score[first[moved]]
            for field, value in zip((score, pose, shift), found):
                field[first[moved][better]] = value[better]
        for _ in range(CLIMBS):                    # down the full-resolution slope while a pair's pose still moves
            found = self._local(padded[0], 0, item[pairs], proto[pairs], pose[pairs], shift[pairs], 1)
            moved = (found[1] != pose[pairs]) | (found[2] != shift[pairs]).any(1)
            score[pairs], pose[pairs], shift[pairs] = found
            pairs = pairs[moved]
            if not len(pairs):
                break
        return score.view(b, self.k), pose.view(b, self.k), shift.view(b, self.k, 2)

    def _searched_again(self, padded: list, item: torch.Tensor, proto: torch.Tensor, half: torch.Tensor,
                        shift: torch.Tensor):
        """Pairs (flat) searched again about their half-resolution shift ``half`` (P, 2): every pose of the half-
        resolution grid at the 3×3 shifts about it; where the best lands elsewhere than ``shift`` (P, 2, full
        resolution), every full-resolution pose at twice its shift. Returns (those pairs, their score, pose, shift) or
        None."""
        steps = torch.stack(torch.meshgrid(*[torch.arange(-1, 2, device=half.device)] * 2, indexing="xy"), -1).view(-1, 2)
        many = lambda t: t.repeat_interleave(len(steps), 0)             # noqa: E731  (each pair, once per step)
        score, _, found = self._every_pose(padded[1], 1, many(item), many(proto), many(half) + steps.repeat(len(half), 1))
        found = padded[0].inside(2 * found.view(len(item), -1, 2)[torch.arange(len(item)), score.view(len(item), -1).argmin(1)], (0, 0))
        moved = torch.nonzero((found != shift).any(1)).flatten()
        if not len(moved):
            return None
        return moved, self._every_pose(padded[0], 0, item[moved], proto[moved], found[moved])

    def _every_pose(self, x: "_Padded", level: int, item: torch.Tensor, proto: torch.Tensor, shift: torch.Tensor):
        """Every pose of this level's grid for each pair (flat: ``item``, ``proto``) at its shift (P, 2), kept in the
        window: the items read at their pairs' shifts times the prototypes' turned copies. Returns the best score, pose
        (an index of the full grid) and the shift. An item cut once for several pairs (the same shift against several
        prototypes: the usual case, a crop centred on its object) is multiplied once against every prototype; when
        that costs more than each pair against its own prototype, each pair is."""
        flat, energy = self.banks[level]
        m = len(energy) // self.k
        shift = x.inside(shift, (0, 0))
        first, group, _ = x.shared(item, shift)
        if len(first) * self.k <= 2 * len(item):
            crops = x.crops(item[first], shift[first], (0, 0)).flatten(1)                 # (U, C·h·w): x(q + s)
            corr = (crops @ flat[:-1].flatten(1).T).view(len(first), self.k, m)[group, proto]  # (P, M)
        else:
            corr = torch.empty(len(item), m, device=shift.device, dtype=flat.dtype)
            for k in range(self.k):
                rows = torch.nonzero(proto == k).flatten()
                corr[rows] = x.crops(item[rows], shift[rows], (0, 0)).flatten(1) @ flat[k * m:(k + 1) * m].flatten(1).T
        score, index = (energy.view(self.k, m)[proto] - 2 * corr).min(-1)
        step, n = 2 ** level, self.n_angles
        per_flip = n // step
        return (score + x.energy[item]).clamp_min(0), index // per_flip * n + index % per_flip * step, shift

    def _local(self, x: "_Padded", level: int, item: torch.Tensor, proto: torch.Tensor, pose: torch.Tensor,
               centre: torch.Tensor, spread: int):
        """For each pair (flat, (P,)) the best of its pose ``pose`` (full-grid indices) and, with ``spread`` 1, its two
        neighbours on this level's grid, × the 3×3 shifts about ``centre`` (P, 2; this level's pixels, kept in its
        window)."""
        flat, energy = self.banks[level]
        step, n = 2 ** level, self.n_angles
        flipped, j = pose // n, pose % n
        near = (j[:, None] + step * torch.arange(-spread, spread + 1, device=pose.device)) % n            # (P, A')
        rows = proto[:, None] * (len(energy) // self.k) + flipped[:, None] * (n // step) + near // step   # of ``flat``
        radius = tuple(min(1, w) for w in x.window)                                                     # (y, x)
        centre = x.inside(centre, radius)
        corr = local_correlation(x, item, flat, rows, centre, radius)                                   # (P, A', cy, cx)
        d2 = x.energy[item].view(-1, 1, 1, 1) + energy[rows][..., None, None] - 2 * corr
        val, idx = d2.flatten(1).min(-1)
        cells = corr.shape[-1] * corr.shape[-2]
        choice, cell = idx // cells, idx % cells
        step_xy = torch.stack([cell % corr.shape[-1] - radius[1], cell // corr.shape[-1] - radius[0]], -1)
        return val.clamp_min(0), flipped * n + near.gather(1, choice[:, None])[:, 0], centre + step_xy


class _Padded:
    """A block of items (B, C, H, W) zero-padded by a shift window (wy, wx), their energies ||x||², and every window of
    them as a strided view: what the local searches read each pair's crop from."""

    def __init__(self, x: torch.Tensor, window: tuple[int, int]):
        self.shape, self.window = x.shape, window
        wy, wx = window
        self.pad = F.pad(x, (wx, wx, wy, wy))
        self.energy = (x ** 2).sum((-3, -2, -1))

    def inside(self, centre: torch.Tensor, radius: tuple[int, int]) -> torch.Tensor:
        """Shifts (P, 2) x/y moved where the shifts within ``radius`` (y, x) about them lie in the window."""
        (wy, wx), (ry, rx) = self.window, radius
        return torch.stack([centre[:, 0].clamp(rx - wx, wx - rx), centre[:, 1].clamp(ry - wy, wy - ry)], -1)

    def shared(self, item: torch.Tensor, centre: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Pairs (``item``, ``centre``: (P,), (P, 2)) grouped by the crop they read: the first pair of each distinct
        (item, shift) (U,), each pair's group (P,) and its place among its group's pairs (P,)."""
        (wy, wx) = self.window
        key = (item * (2 * wy + 1) + centre[:, 1].long() + wy) * (2 * wx + 1) + centre[:, 0].long() + wx
        _, group = torch.unique(key, return_inverse=True)
        order = torch.argsort(group, stable=True)
        counts = torch.bincount(group)
        starts = torch.cumsum(counts, 0) - counts
        slot = torch.empty_like(group)
        slot[order] = torch.arange(len(group), device=group.device) - starts[group[order]]
        return order[starts], group, slot

    def crops(self, item: torch.Tensor, centre: torch.Tensor, radius: tuple[int, int]) -> torch.Tensor:
        """Item ``item[p]`` read from its pair's ``centre[p]`` − radius on (x/y pixels, inside the window):
        (P, C, H + 2·ry, W + 2·rx), crop[i] = x(c − r + i), zero outside the image."""
        b, c, h, w = self.shape
        (wy, wx), (ry, rx) = self.window, radius
        s = self.pad.stride()
        windows = self.pad.as_strided((b, 2 * (wy - ry) + 1, 2 * (wx - rx) + 1, c, h + 2 * ry, w + 2 * rx),
                                      (s[0], s[2], s[3], s[1], s[2], s[3]))
        return windows[item, centre[:, 1].long() + wy - ry, centre[:, 0].long() + wx - rx]


def local_correlation(x: _Padded, item: torch.Tensor, flat: torch.Tensor, rows: torch.Tensor, centre: torch.Tensor,
                      radius: tuple[int, int]) -> torch.Tensor:
    """(x ⋆ P)(c + d) = Σ_q x(q) P(q − c − d) for every |d_y| ≤ radius[0], |d_x| ≤ radius[1], of each pair p's item
    ``item[p]`` with the prototypes ``flat[rows[p, a]]`` about its shift c = ``centre[p]`` (x, y pixels):
    (P, A, 2·ry + 1, 2·rx + 1). One grouped convolution per block of distinct crops: each (item, shift) cut once
    (what a convolution costs here), the prototypes of every pair that shares it as its filters (``flat``'s last
    row, a blank, where a crop has fewer pairs than another)."""
    _, c, h, w = x.shape
    ry, rx = radius
    a = rows.shape[1]
    first, group, slot = x.shared(item, centre)
    g = int(slot.max()) + 1
    step = max(1, REFINE_BLOCK_BYTES // max(1, (g * a + 1) * c * h * w * flat.element_size()))
    out = torch.empty(len(item), a, 2 * ry + 1, 2 * rx + 1, device=flat.device, dtype=flat.dtype)
    for s in range(0, len(first), step):
        sel = torch.nonzero((group >= s) & (group < s + step)).flatten()
        crops = x.crops(item[first[s:s + step]], centre[first[s:s + step]], radius)      # (u, C, H', W')
        u = len(crops)
        table = torch.full((u, g, a), len(flat) - 1, device=rows.device, dtype=rows.dtype)
        table[group[sel] - s, slot[sel]] = rows[sel]
        found = F.conv2d(crops.reshape(1, u * c, h + 2 * ry, w + 2 * rx), flat[table.flatten()], groups=u)
        out[sel] = found.reshape(u, g, a, 2 * ry + 1, 2 * rx + 1)[group[sel] - s, slot[sel]]
    return out


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
