"""Procrustes geometry of landmark shapes (numpy, napari-free): centroid size, the closed-form 2-D
rotation onto a reference, generalised Procrustes alignment, alignment onto given references, and the
corners of a covariance's ellipse for display. Shared by shape-kmeans, procrustes-kmeans and the layers.

Every landmark array here is ``(n_shapes, n_landmarks, 2)`` in (x, y) order.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import InputError
from ..core.validation import as_landmarks


# ---- Procrustes -----------------------------------------------------------------------------------
@dataclass
class ProcrustesFit:
    """Generalised Procrustes alignment of n shapes.

    ``aligned[i] = landmarks[i] @ matrix[i].T + offset[i]`` (matrix = scale x rotation, no
    reflection). ``consensus`` is the mean aligned shape. Aligned shapes are expressed at the mean
    centroid size and mean centroid of the input, in the orientation of the first shape, so they
    overlay the raw data sensibly.
    """

    aligned: np.ndarray      # (n, L, 2)
    consensus: np.ndarray    # (L, 2)
    matrix: np.ndarray       # (n, 2, 2)
    offset: np.ndarray       # (n, 2)
    iterations: int


def centroid_size(landmarks) -> np.ndarray:
    """Square root of the summed squared distances of the landmarks to their centroid, per shape."""
    x = np.asarray(landmarks, dtype=np.float64)
    return np.sqrt(((x - x.mean(-2, keepdims=True)) ** 2).sum((-2, -1)))


def _rotation_onto(x: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """Rotations R (n, 2, 2) minimising |x_i R^T - ref|, proper (det +1), for centred x (n, L, 2)."""
    m = np.einsum("nlc,ld->ncd", x, ref)                 # sum_l x_l ref_l^T, (n, 2, 2)
    a = m[:, 0, 0] + m[:, 1, 1]
    b = m[:, 0, 1] - m[:, 1, 0]
    theta = np.arctan2(b, a)                             # closed form in 2-D: no reflection possible
    c, s = np.cos(theta), np.sin(theta)
    return np.stack([np.stack([c, -s], -1), np.stack([s, c], -1)], -2)


def procrustes_align(landmarks, max_iter: int = 100, tol: float = 1e-12, scale: bool = True) -> ProcrustesFit:
    """Generalised Procrustes analysis: remove translation, scale (unit centroid size) and rotation.

    Iterates: rotate every centred, unit-size shape onto the current consensus, recompute the
    consensus and rescale it to unit size, until the consensus stops moving (``tol``).
    ``scale=False`` keeps every shape's size (form space: translation and rotation only); the
    consensus is then the plain mean of the rotated forms and ``tol`` is relative to its size.
    """
    x = as_landmarks(landmarks)
    n, n_lm = x.shape[:2]
    centre = x.mean(1)
    size = centroid_size(x)
    if np.any(size <= 0):
        bad = int(np.argmin(size))
        raise InputError(f"Shape {bad} has all its landmarks at one point: it has no shape to align.")
    z = (x - centre[:, None]) / (size[:, None, None] if scale else 1.0)
    ref = z[0].copy()
    rot = np.broadcast_to(np.eye(2), (n, 2, 2))
    it = 0
    for it in range(1, max_iter + 1):
        rot = _rotation_onto(z, ref)
        aligned = np.einsum("nlc,ndc->nld", z, rot)
        new_ref = aligned.mean(0)
        if scale:
            new_ref /= np.sqrt((new_ref ** 2).sum())
            moved = float(((new_ref - ref) ** 2).sum())
        else:
            moved = float(((new_ref - ref) ** 2).sum()) / max(float((new_ref ** 2).sum()), 1e-300)
        ref = new_ref
        if moved < tol:
            break
    # express in data units: mean centroid size (each shape's own with scale=False), mean centroid,
    # first shape's frame
    out_scale = float(size.mean()) if scale else 1.0
    out_centre = centre.mean(0)
    back = _rotation_onto(ref[None], z[0])[0]            # consensus frame -> orientation of shape 0
    total = np.einsum("cd,nde->nce", back, rot)
    if scale:
        total = total * (out_scale / size)[:, None, None]   # (n, 2, 2)
    offset = out_centre[None] - np.einsum("ncd,nd->nc", total, centre)
    aligned = np.einsum("nlc,ndc->nld", x, total) + offset[:, None]
    consensus = (ref @ back.T) * out_scale + out_centre
    return ProcrustesFit(aligned, consensus, total, offset, it)


def align_to(landmarks, reference, scale: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Ordinary Procrustes of each shape onto a fixed ``reference`` (L, 2): the similarity (no
    reflection) that maps the shape's centroid and centroid size onto the reference's and rotates it
    best (``scale=False``: the rotation and translation only, the shape keeps its size).
    Returns ``(aligned (n, L, 2), matrix (n, 2, 2), offset (n, 2))``."""
    x = np.asarray(landmarks, dtype=np.float64)
    if x.ndim == 2:
        x = x[None]
    if x.ndim != 3 or x.shape[2] != 2 or not np.isfinite(x).all():
        raise InputError(f"The shapes to align have shape {x.shape} or hold NaN: give finite (shapes, landmarks, 2) coordinates.")
    ref = np.asarray(reference, dtype=np.float64)
    if ref.shape != x.shape[1:]:
        raise InputError(f"The shapes have {x.shape[1]} landmarks but the fitted reference has {ref.shape[0]}: give shapes with the same landmarks.")
    centre, size = x.mean(1), centroid_size(x)
    if np.any(size <= 0):
        raise InputError(f"Shape {int(np.argmin(size))} has all its landmarks at one point: it has no shape to align.")
    ref_centre = ref.mean(0)
    ref_size = float(np.sqrt(((ref - ref_centre) ** 2).sum()))
    z = (x - centre[:, None]) / size[:, None, None]
    rot = _rotation_onto(z, ref - ref_centre)
    total = rot * (ref_size / size)[:, None, None] if scale else rot
    offset = ref_centre[None] - np.einsum("ncd,nd->nc", total, centre)
    return np.einsum("nlc,ndc->nld", x, total) + offset[:, None], total, offset


# ---- display geometry -------------------------------------------------------------------------------
def ellipse_corners(mean, cov, n_sd: float = 2.0) -> np.ndarray:
    """The 4 corners of the box around the mean ± n_sd sd ellipse of each Gaussian, for napari's
    ellipse shapes: c ± a1 v1 ± a2 v2 with S = V diag(l) V^T and a_i = n_sd sqrt(l_i), in cyclic order.

    ``mean`` (..., 2) and ``cov`` (..., 2, 2) broadcast together; returns (..., 4, 2) in the same
    coordinate order as the input (swap columns for napari's (row, col)).
    """
    m = np.asarray(mean, dtype=np.float64)
    s = np.asarray(cov, dtype=np.float64)
    if m.shape[-1:] != (2,) or s.shape[-2:] != (2, 2):
        raise InputError(f"ellipse_corners needs means (..., 2) and covariances (..., 2, 2), got {m.shape} and {s.shape}.")
    s = 0.5 * (s + np.swapaxes(s, -1, -2))
    lam, vec = np.linalg.eigh(s)
    if np.any(lam < -1e-12 * np.maximum(1.0, np.abs(lam).max())):
        raise InputError("A covariance passed to ellipse_corners is not positive semi-definite: check the covariances.")
    axes = vec * (n_sd * np.sqrt(np.clip(lam, 0.0, None)))[..., None, :]   # columns a_i v_i
    a1, a2 = axes[..., :, 0], axes[..., :, 1]
    return np.stack([m + a1 + a2, m - a1 + a2, m - a1 - a2, m + a1 - a2], axis=-2)
