"""Rotation-invariant scattering features: coefficients combined over orientations and over rings of positions.

A rotation of the image by α turns every scattering map S[j, θ, p] into S[j, θ + α, R_α p]: the
orientations shift together (cyclically, over π) and the positions turn about the centre. Two
combinations undo both (Sifre & Mallat's rotation invariants, in their simplest form):

- positions: each path's coefficients are averaged over rings of cells at the same distance from the
  image centre (``rings`` of them), which a turn about the centre maps onto themselves;
- orientations: per ring, the modulus of the discrete Fourier transform over θ₁ (first order) or over
  (θ₁, θ₂) jointly (second order) — a joint cyclic shift only changes the phases.

The features are exactly invariant to turns by multiples of π/L about the centre (up to the cells'
discretisation) and nearly so in between; the path's own scale j and the orientation *differences*
(what tells an L from a T) are kept, the absolute orientation is not.
"""
from __future__ import annotations

import math

import torch


def ring_weights(oh: int, ow: int, rings: int, device=None) -> torch.Tensor:
    """(rings, oh·ow) averaging weights of the output cells by their centre's distance to the map's centre."""
    yy, xx = torch.meshgrid(torch.arange(oh, dtype=torch.float32), torch.arange(ow, dtype=torch.float32), indexing="ij")
    r = torch.hypot(yy - (oh - 1) / 2, xx - (ow - 1) / 2).flatten()
    edges = torch.linspace(0, float(r.max()) + 1e-6, rings + 1)
    idx = torch.bucketize(r, edges[1:-1], right=True)
    w = torch.zeros(rings, oh * ow)
    w[idx, torch.arange(oh * ow)] = 1.0
    w = w[w.sum(1) > 0]
    return (w / w.sum(1, keepdim=True)).to(device)


def invariant_dim(j_max: int, n_angles: int, order: int, rings: int, oh: int, ow: int) -> int:
    nr = ring_weights(oh, ow, rings).shape[0]
    first = j_max * n_angles
    second = n_angles * n_angles * j_max * (j_max - 1) // 2 if order == 2 else 0
    return nr * (1 + first + second)


def invariant_features(s: torch.Tensor, j_max: int, n_angles: int, order: int, rings: int) -> torch.Tensor:
    """Scattering coefficients (B, P, oh, ow) in kymatio's path order → rotation-invariant features (B, F)."""
    b, p, oh, ow = s.shape
    L, J = n_angles, j_max
    w = ring_weights(oh, ow, rings, s.device)                                   # (R, oh·ow)
    pooled = s.reshape(b, p, oh * ow) @ w.T                                      # (B, P, R)
    out = [pooled[:, :1]]                                                        # order 0
    first = pooled[:, 1:1 + J * L].reshape(b, J, L, -1)
    out.append(torch.fft.fft(first, dim=2).abs().reshape(b, J * L, -1))
    if order == 2:
        at = 1 + J * L
        for j1 in range(J - 1):
            n2 = J - 1 - j1
            block = pooled[:, at:at + L * n2 * L].reshape(b, L, n2, L, -1)       # (θ1, j2, θ2)
            spec = torch.fft.fft2(block.permute(0, 2, 4, 1, 3), dim=(-2, -1)).abs()   # (B, j2, R, θ1, θ2)
            out.append(spec.permute(0, 1, 3, 4, 2).reshape(b, n2 * L * L, -1))
            at += L * n2 * L
    feats = torch.cat(out, 1)                                                    # (B, paths, R)
    return feats.reshape(b, -1) / math.sqrt(L)
