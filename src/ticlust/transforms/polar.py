"""Every in-plane rotation of every (item, reference) pair at once, by correlation in polar coordinates.

``transforms.rigid`` turns K prototypes to every angle and correlates each copy with B items: K × angles
image products per item. To compare every item with hundreds of references (a k-nearest-neighbour graph)
that is too slow. A rotation about a centre is a cyclic shift of the angle in polar coordinates, and a
cyclic shift multiplies each angular Fourier coefficient by a phase. So each image is sampled once on
rings about its centre (its intensity centre of mass: the search needs no shift), its rings Fourier
transformed along the angle and cut at a band limit, and for a pair

    <x, turned(y, a)> = Σ_m w_m Re(G_m e^{-ima}),   G_m = Σ_rings c_x(r, m) conj(c_y(r, m)),

one small complex product per band (the G_m of B × P pairs are one batched matrix product) and one real
product of their real and imaginary parts with the (2·bands × angles) table of cosines and sines gives the
correlation at every angle. The
rings are weighted by √r, so the sums approximate the image inner product over the inscribed disc.
Distances are cosine distances 2 − 2·corr/(‖x‖‖y‖) (brightness and contrast between items do not count).
A mirror image's coefficients are (−1)^m conj(c): ``flip`` searches the mirrored references too.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

#: Bytes of the per-block (items × references × angles) correlation table: a few MiB, so that it is taken at its
#: maximum while still in cache (2 ** 27 took 2.6x the CPU time of 2 ** 23 for 512 items × 1,000 references).
BLOCK_BYTES = 2 ** 23


def intensity_centres(x: torch.Tensor) -> torch.Tensor:
    """Centres of mass (B, 2) of |x| summed over channels, as pixel offsets (x, y) from the image centre
    (the image centre for a blank image)."""
    h, w = x.shape[-2:]
    m = x.abs().sum(1)
    total = m.sum((-2, -1))
    ys = torch.arange(h, device=x.device, dtype=x.dtype) - (h - 1) / 2
    xs = torch.arange(w, device=x.device, dtype=x.dtype) - (w - 1) / 2
    cx = (m.sum(1) * xs).sum(-1) / total.clamp_min(1e-30)
    cy = (m.sum(2) * ys).sum(-1) / total.clamp_min(1e-30)
    return torch.stack([cx, cy], -1) * (total > 0)[:, None]


def polar_spectra(x: torch.Tensor, centres: torch.Tensor, n_angles: int) -> torch.Tensor:
    """Angular Fourier coefficients (B, C·R, bands + 1), complex, of images x (B, C, H, W) sampled on R rings
    (1 px apart, out to the inscribed circle) and ``n_angles`` angles about ``centres`` (B, 2), weighted by √r;
    bands = n_angles // 4 (what the angle step resolves twice over)."""
    b, c, h, w = x.shape
    rings = max(1, min(h, w) // 2)
    radius = (torch.arange(rings, device=x.device, dtype=x.dtype) + 0.5) * (min(h, w) / 2) / rings
    angle = torch.arange(n_angles, device=x.device, dtype=x.dtype) * (2 * math.pi / n_angles)
    px = radius[:, None] * torch.cos(angle)[None]
    py = radius[:, None] * torch.sin(angle)[None]
    gx = (centres[:, 0, None, None] + px[None]) * (2.0 / w)    # normalised, align_corners=False
    gy = (centres[:, 1, None, None] + py[None]) * (2.0 / h)
    sampled = F.grid_sample(x, torch.stack([gx, gy], -1), mode="bilinear", padding_mode="zeros", align_corners=False)
    sampled = sampled * radius.sqrt()[None, None, :, None]
    spectra = torch.fft.rfft(sampled, dim=-1)[..., : n_angles // 4 + 1]
    return spectra.reshape(b, c * rings, -1)


def mirrored(spectra: torch.Tensor) -> torch.Tensor:
    """The coefficients of the mirror images (x ↦ −x about the centre): (−1)^m conj(c)."""
    sign = 1.0 - 2.0 * (torch.arange(spectra.shape[-1], device=spectra.device) % 2)
    return spectra.conj() * sign.to(spectra.real.dtype)


@dataclass
class Turns:
    """The ``k`` nearest references of each item under every rotation (and mirror): ``distance`` (B, k) cosine
    distances ascending, ``index`` (B, k) reference numbers, ``angle`` (B, k) radians and ``flip`` (B, k) bool of
    the pose that carries the reference onto the item (item ≈ reference mirrored if flip, then turned by angle)."""

    distance: torch.Tensor
    index: torch.Tensor
    angle: torch.Tensor
    flip: torch.Tensor


def _table(bands: int, n_angles: int, device, dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """(bands, angles) cosines and sines, each band but the zeroth counted twice (the negative frequencies)."""
    m = torch.arange(bands, device=device, dtype=dtype)
    a = torch.arange(n_angles, device=device, dtype=dtype) * (2 * math.pi / n_angles)
    weight = torch.where(m > 0, 2.0, 1.0).to(dtype)[:, None]
    return torch.cos(m[:, None] * a[None]) * weight, torch.sin(m[:, None] * a[None]) * weight


def nearest_turns(items: torch.Tensor, refs: torch.Tensor, k: int, n_angles: int, flip: bool = False,
                  exclude: torch.Tensor | None = None) -> Turns:
    """The ``k`` references nearest to each item over every rotation (``n_angles`` of them; and mirror with ``flip``),
    from their ``polar_spectra`` items (B, R, M) and refs (P, R, M). ``exclude`` (B,): a reference number each item
    may not match (itself, when the items are references too), or −1."""
    bands = items.shape[-1]
    cos, sin = _table(bands, n_angles, items.device, items.real.dtype)
    weight = cos[:, 0]
    table = torch.stack([cos, sin], 1).reshape(2 * bands, n_angles)   # rows (cos, sin) per band: as view_as_real lays G out
    energy = lambda s: (s.abs() ** 2 * weight).sum((-2, -1)).clamp_min(1e-30).sqrt()   # noqa: E731
    norm_items, norm_refs = energy(items), energy(refs)
    # each pose's references laid out once as (M, R, P), conjugated: the right factor of every block's product
    poses = [r.permute(2, 1, 0).conj() for r in ([refs, mirrored(refs)] if flip else [refs])]
    k = min(k, refs.shape[0] - (0 if exclude is None else 1))
    block = max(1, BLOCK_BYTES // max(1, refs.shape[0] * n_angles * 4 * len(poses)))
    out = []
    for s in range(0, items.shape[0], block):
        part = items[s:s + block].permute(2, 0, 1)                       # (M, b, R)
        best, where = [], []
        for spectra in poses:
            g = torch.matmul(part, spectra)                              # (M, b, P): G_m of every pair
            g = torch.view_as_real(g).permute(1, 2, 0, 3).reshape(*g.shape[1:], 2 * bands)   # (b, P, 2M)
            value, turn = torch.matmul(g, table).max(-1)                 # (b, P): the best angle's correlation
            best.append(value)
            where.append(turn)
        value, pose = torch.stack(best).max(0)
        turn = torch.stack(where).gather(0, pose[None])[0]
        dist = 2.0 - 2.0 * value / (norm_items[s:s + block, None] * norm_refs[None])
        if exclude is not None:
            own = exclude[s:s + block]
            rows = torch.nonzero(own >= 0).flatten()
            dist[rows, own[rows]] = math.inf
        d, j = torch.topk(dist, k, dim=1, largest=False)
        # the correlation peaks at a = −(the reference's turn onto the item)
        out.append((d.clamp_min(0), j, -turn.gather(1, j) * (2 * math.pi / n_angles), pose.gather(1, j) > 0))
    return Turns(*(torch.cat(parts) for parts in zip(*out)))
