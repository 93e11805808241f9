"""PCA from float32 rows held in memory, in float64 and chunk by chunk (generators yield a Progress per chunk): the
covariance, or for more features than items the N×N Gram matrix (its dual), their leading eigenpairs (exact or
randomized), and the projection; POC (projected orthogonal complement, PSSC's Eq. 4) drops the leading directions.
PSSC's stage 2 (pssc, rigid-pssc).
"""
from __future__ import annotations

import numpy as np
import torch

from ..events import Progress


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
        vals, vecs = symmetric_eigh(cov)
        return vals.flip(0)[:d], vecs.flip(1)[:, :d]
    c32 = cov.float()
    return subspace_iteration(lambda m: c32 @ m, f, d, rng, power, cov.device)


def subspace_iteration(apply, f: int, d: int, rng: np.random.Generator, power: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """The d leading eigenpairs (descending, float64) of a symmetric PSD F×F matrix C known only by its products
    ``apply(m)`` = C m (float32 (F, r) in and out): a (d + 10)-dimensional random start (drawn from ``rng``), ``power``
    multiplications, then Rayleigh-Ritz (Halko et al. 2011)."""
    g = torch.from_numpy(rng.standard_normal((f, d + 10)).astype(np.float32)).to(device)
    q = torch.linalg.qr(apply(g)).Q
    for _ in range(power):
        q = torch.linalg.qr(apply(q)).Q
    small = (q.T @ apply(q)).double()
    vals, vecs = symmetric_eigh((small + small.T) / 2)
    vecs = q.double() @ vecs
    return vals.flip(0)[:d], vecs.flip(1)[:, :d]


def covariance_product(x: np.ndarray, mean: torch.Tensor, device: torch.device, chunk: int = 2048):
    """C m for the covariance C of float32 rows x about ``mean`` (F,), never formed: Σ xcᵀ (xc m) / N over chunks of rows,
    summed in float64 (a product costs 2·N·F·r operations where C itself costs N·F² and 8·F² bytes: 512 MiB at 8,192
    features). Returns the function m (F, r) float32 → C m float32."""
    mean32 = mean.float()

    def apply(m: torch.Tensor) -> torch.Tensor:
        out = torch.zeros(m.shape, dtype=torch.float64, device=device)
        for s in range(0, x.shape[0], chunk):
            xc = torch.as_tensor(x[s:s + chunk], device=device) - mean32
            out += (xc.T @ (xc @ m)).double()
        return (out / x.shape[0]).float()

    return apply


def symmetric_eigh(m: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Eigenpairs (ascending) of a symmetric PSD matrix: ``eigh``, and where LAPACK's eigh does not converge (a
    matrix ill-conditioned or with many repeated eigenvalues) its SVD, whose singular pairs are the eigenpairs."""
    try:
        return torch.linalg.eigh(m)
    except torch.linalg.LinAlgError:
        u, vals, _ = torch.linalg.svd(m)
        return vals.flip(0), u.flip(1)


#: Rows whose largest magnitude lies within [2**-SAFE_EXPONENT, 2**SAFE_EXPONENT] are decomposed as they are.
SAFE_EXPONENT = 20


def unit_scale(x: np.ndarray, chunk: int = 8192) -> float:
    """A power of two that brings the rows' largest magnitude near 1 (exact to divide by), or 1.0 where it is
    already within 2**±SAFE_EXPONENT: float32 products of rows at 1e20 overflow, at 1e-25 underflow."""
    top = max((float(np.abs(x[s:s + chunk]).max()) for s in range(0, len(x), chunk)), default=0.0)
    if top == 0.0 or not np.isfinite(top) or 2.0 ** -SAFE_EXPONENT <= top <= 2.0 ** SAFE_EXPONENT:
        return 1.0
    return float(2.0 ** np.floor(np.log2(top)))


def project_steps(x: np.ndarray, mean: torch.Tensor, basis: torch.Tensor, device: torch.device, chunk: int = 4096):
    """Generator (yields Progress per chunk): (x - mean) @ basis, float32 on ``device``."""
    m32, b32 = mean.float().to(device), basis.float().to(device)
    out, steps = [], -(-x.shape[0] // chunk)
    for i, s in enumerate(range(0, x.shape[0], chunk)):
        out.append((torch.as_tensor(x[s:s + chunk], device=device) - m32) @ b32)
        yield Progress(i + 1, steps, stage="PCA/POC projection")
    return torch.cat(out)


def pca_poc_steps(feats: np.ndarray, dim: int, poc: int, solver: str, device: torch.device, rng: np.random.Generator):
    """Generator, stage 2: PCA to d = ``dim`` dimensions (capped by N-1 and the feature count) with the eigensolver
    ``solver`` (:func:`top_eigenvectors`), then POC drops the ``poc`` leading ones (Eq. 4).

    Returns the projected items z (N, d - poc), the feature mean (F,), the basis (F, d - poc) and the
    d leading eigenvalues.
    """
    n, f = feats.shape
    d = min(dim, f, n - 1)
    n_poc = min(poc, d - 1)
    scale = unit_scale(feats)
    if scale != 1.0:                # decomposed at unit scale (exact: a power of two), given back in the rows' units
        z, mean, basis, eigvals = yield from pca_poc_steps(feats / np.float32(scale), dim, poc, solver, device, rng)
        return z * scale, mean * scale, basis, eigvals * scale ** 2
    if f > DUAL_PCA_FEATURES and n < f:        # large crops: the F×F covariance would not fit, N×N does
        mean, gram = yield from gram_steps(feats, device)
        yield Progress(2, 4, stage="PCA eigensolver")
        eigvals, eigvecs = top_eigenvectors(gram, d, solver, rng)
        eigvecs = yield from dual_basis(feats, mean, eigvecs, eigvals, device)
    else:
        mean, cov = yield from covariance_steps(feats, device)
        yield Progress(2, 4, stage="PCA eigensolver")
        eigvals, eigvecs = top_eigenvectors(cov, d, solver, rng)
    basis = eigvecs[:, n_poc:]                                # POC: W' = [w_{n+1} .. w_d] (Eq. 4)
    z = yield from project_steps(feats, mean, basis, device)
    return z, mean, basis, eigvals
