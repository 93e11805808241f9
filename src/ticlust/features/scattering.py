"""2-D scattering transform (Morlet wavelets, order 2) computed with kymatio's filter bank, batched over paths.

kymatio 0.3's torch frontend loops over the 217 scattering paths in Python, one small FFT at a time,
which tops out at a few hundred 32×32 images per second on a 2-core CPU. :class:`FastScattering2D`
computes exactly the same coefficients (same reflect padding, same Fourier-domain filters from
``kymatio.scattering2d.filter_bank``, same periodisation for subsampling, same path order) but
multiplies and transforms all orientations of one scale at once, folds the wavelet product's spectral
aliases block by block on real filters, and folds the final low-pass + subsampling + crop into one small
precomputed matrix per scale. ``tests/test_pssc.py`` checks it
against kymatio's own ``ScatteringTorch2D`` to 1e-5.

Import note: ``import kymatio`` (or ``kymatio.torch``) fails with SciPy >= 1.17 because its 3-D code
imports ``scipy.special.sph_harm``; only the 2-D modules are imported here, which work.
"""
from __future__ import annotations

import functools

import numpy as np
import torch


@functools.lru_cache(maxsize=8)
def kymatio_filters(m: int, n: int, j_max: int, n_angles: int):
    """kymatio's Fourier-domain filter bank for padded size (m, n), as NumPy arrays (cached: it is slow to build)."""
    from kymatio.scattering2d.filter_bank import filter_bank

    return filter_bank(m, n, j_max, n_angles)


def padded_size(m: int, n: int, j_max: int) -> tuple[int, int]:
    """kymatio's internal padded size (its ``compute_padding``)."""
    step = 2 ** j_max
    return ((m + step) // step + 1) * step, ((n + step) // step + 1) * step


def n_paths(j_max: int, n_angles: int, order: int = 2) -> int:
    """Number of scattering paths: 1 + J·L (+ L²·J(J-1)/2 for order 2)."""
    return 1 + j_max * n_angles + (n_angles ** 2 * j_max * (j_max - 1) // 2 if order == 2 else 0)


def _periodize(x: torch.Tensor, k: int) -> torch.Tensor:
    """Subsampling by k in space = averaging the k×k aliases of the spectrum (kymatio's subsample_fourier)."""
    if k == 1:
        return x
    *lead, m, n = x.shape
    return x.reshape(*lead, k, m // k, k, n // k).mean(dim=(-4, -2))


class FastScattering2D:
    """Scattering coefficients S_J x (B, P, m/2^J, n/2^J) identical to kymatio's ``Scattering2D(J, (m, n), L, max_order)``.

    Works on any torch device; filters are moved there once. Input: real (B, m, n) float32.
    """

    def __init__(self, shape: tuple[int, int], j_max: int = 3, n_angles: int = 8, order: int = 2,
                 device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32):
        m, n = int(shape[0]), int(shape[1])
        if 2 ** j_max > min(m, n):
            raise ValueError(f"Images of {m}x{n} are smaller than 2^J = {2 ** j_max}.")
        self.shape, self.J, self.L, self.order = (m, n), j_max, n_angles, order
        self.device = torch.device(device)
        self.mp, self.np_ = padded_size(m, n, j_max)
        self.pads = ((self.mp - m) // 2, (self.mp - m + 1) // 2, (self.np_ - n) // 2, (self.np_ - n + 1) // 2)
        if max(self.pads[:2]) >= m or max(self.pads[2:]) >= n:
            raise ValueError(f"Images of {m}x{n} are too small for J = {j_max}: reflect padding needs them larger than 2^J.")
        bank = kymatio_filters(self.mp, self.np_, j_max, n_angles)
        self.dtype = dtype

        def t(a):
            return torch.as_tensor(np.asarray(a), dtype=dtype, device=self.device)

        self.phi = [t(p) for p in bank["phi"]["levels"]]                 # phi at resolution r
        # psi[j][r]: the L filters of scale j at resolution r, (L, mp/2^r, np/2^r)
        self.psi = {j: {r: t(np.stack([bank["psi"][j * n_angles + th]["levels"][r] for th in range(n_angles)]))
                        for r in range(len(bank["psi"][j * n_angles]["levels"]))} for j in range(j_max)}
        # low-pass at scale J, subsampling and [1:-1] crop of a real map at resolution r, as one
        # real matrix (out_h*out_w, s_h*s_w): S = U_flat @ Phi_r^T. Exact (it is a linear map).
        self.oh, self.ow = self.mp // 2 ** j_max - 2, self.np_ // 2 ** j_max - 2
        self.lowpass = {r: self._lowpass_matrix(r) for r in range(j_max)}
        # wavelet filtering + subsampling by k: psi_j at resolution r split into its k×k spectral aliases
        self.alias = {(j, r): self._alias_weights(j, r, 2 ** (j - r) if r < j else 1)
                      for j in range(j_max) for r in range(len(self.psi[j])) if r <= j}

    def _lowpass_matrix(self, r: int, chunk: int = 1024) -> torch.Tensor:
        """The operator applied to the unit images, ``chunk`` at a time: (sh·sw)² complex values at once
        needed 17 GB for 128×128 images."""
        sh, sw = self.mp // 2 ** r, self.np_ // 2 ** r
        phi = self.phi[r].to(torch.float64)
        out = torch.empty((self.oh * self.ow, sh * sw), dtype=self.dtype, device=self.device)
        for start in range(0, sh * sw, chunk):
            stop = min(start + chunk, sh * sw)
            eye = torch.zeros((stop - start, sh * sw), dtype=torch.float64, device=self.device)
            eye[torch.arange(stop - start), torch.arange(start, stop)] = 1.0
            part = torch.fft.ifft2(_periodize(torch.fft.fft2(eye.reshape(-1, sh, sw)) * phi, 2 ** (self.J - r)))
            out[:, start:stop] = part.real[:, 1:-1, 1:-1].reshape(stop - start, -1).T.to(self.dtype)
        return out    # (oh*ow, sh*sw)

    def _alias_weights(self, j: int, r: int, k: int) -> torch.Tensor:
        """psi_j at resolution r cut into its k×k spectral alias blocks, block-major and divided by k²,
        each real value written twice so that it multiplies a complex spectrum seen as (re, im) pairs:
        (k², 1, L, h/k, w/k, 2). kymatio's filters are real in the Fourier domain."""
        psi = self.psi[j][r] / (k * k)                                       # (L, h, w) at resolution r
        blocks = psi.reshape(self.L, k, psi.shape[1] // k, k, psi.shape[2] // k).permute(1, 3, 0, 2, 4)
        return blocks.reshape(k * k, 1, self.L, psi.shape[1] // k, psi.shape[2] // k, 1).expand(
            -1, -1, -1, -1, -1, 2).contiguous()

    def _wavelet_modulus(self, spec: torch.Tensor, j: int, r: int) -> torch.Tensor:
        """|u * psi_j| subsampled to resolution j, from u's spectrum at resolution r (M, h, w) → (M, L, h/k, w/k).

        Subsampling by k = 2^(j-r) in space averages the k×k aliases of the filtered spectrum (kymatio's
        periodisation). The product and the alias sum run block by block into one array already laid out
        as the inverse FFT reads it (an einsum left (u, v) outermost and needed a copy that cost more than
        the FFT), on (re, im) pairs times the real filters: half the multiplications of complex ones.
        """
        weights = self.alias[(j, r)]                                         # (k², 1, L, sh, sw, 2)
        blocks, _, _, sh, sw, _ = weights.shape
        k, m = round(blocks ** 0.5), spec.shape[0]
        parts = torch.view_as_real(spec).reshape(m, k, sh, k, sw, 2).permute(1, 3, 0, 2, 4, 5)
        parts = parts.reshape(blocks, m, 1, sh, sw, 2)                       # the k² alias blocks, block-major
        folded = parts[0] * weights[0]                                       # (M, L, sh, sw, 2)
        for b in range(1, blocks):
            folded.addcmul_(parts[b], weights[b])
        v = torch.view_as_real(torch.fft.ifft2(torch.view_as_complex(folded))).square_()
        return torch.add(v[..., 0], v[..., 1]).sqrt_()       # sqrt(re² + im²): half hypot's time, within 1 ulp of it

    def _low(self, u: torch.Tensor, r: int) -> torch.Tensor:
        """Low-pass + subsample + crop a real map (..., s, s) at resolution r → (..., oh, ow)."""
        lead = u.shape[:-2]
        return (u.reshape(-1, u.shape[-2] * u.shape[-1]) @ self.lowpass[r].T).reshape(*lead, self.oh, self.ow)

    def pad(self, x: torch.Tensor) -> torch.Tensor:
        top, bottom, left, right = self.pads
        return torch.nn.functional.pad(x[:, None], (left, right, top, bottom), mode="reflect")[:, 0]

    @torch.no_grad()
    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """(B, m, n) real → (B, P, oh, ow) scattering coefficients, in kymatio's path order."""
        J, L = self.J, self.L
        b = x.shape[0]
        xp = self.pad(x.to(self.device, self.dtype))
        x_hat = torch.fft.fft2(xp)
        out = [self._low(xp, 0)[:, None]]                                   # order 0: x * phi
        first, second = [], []
        for j1 in range(J):
            u1 = self._wavelet_modulus(x_hat, j1, 0)                          # (B, L, s1, s1)
            first.append(self._low(u1, j1))
            if self.order < 2 or j1 == J - 1:
                continue
            u1_hat = torch.fft.fft2(u1).reshape(b * L, *u1.shape[-2:])
            per_j2 = []
            for j2 in range(j1 + 1, J):
                u2 = self._wavelet_modulus(u1_hat, j2, j1)                     # (B·L1, L2, s2, s2)
                per_j2.append(self._low(u2, j2).reshape(b, L, L, self.oh, self.ow))
            second.append(torch.cat(per_j2, dim=2).reshape(b, L * (J - 1 - j1) * L, self.oh, self.ow))
        out.extend(first)
        out.extend(second)
        return torch.cat(out, dim=1)


@functools.lru_cache(maxsize=8)
def fast_scattering(shape: tuple[int, int], j_max: int = 3, n_angles: int = 8, order: int = 2,
                    device: torch.device | str = "cpu") -> FastScattering2D:
    """A :class:`FastScattering2D`, built once per shape, J, L, order and device: building its low-pass
    matrices takes about as long as scattering a few hundred 32×32 images, which every predict call paid."""
    return FastScattering2D(shape, j_max, n_angles, order, torch.device(device))


def kymatio_scattering(shape: tuple[int, int], j_max: int = 3, n_angles: int = 8, order: int = 2,
                       device: torch.device | str = "cpu"):
    """kymatio's own torch scattering module, imported from its torch frontend directly: kymatio 0.3.0's package
    import reaches a name SciPy 1.17 removed."""
    from kymatio.scattering2d.frontend.torch_frontend import ScatteringTorch2D

    return ScatteringTorch2D(J=j_max, shape=tuple(shape), L=n_angles, max_order=order).to(device)
