"""Cell crops read as a lab reads them, before any clustering: each crop's background level taken off per
channel (its outer ring's median), the object's mask (Otsu on the channels' summed contrast, every sizeable
piece of it kept, so a dividing cell keeps both daughters), its pose (centre of mass and major axis) and the
crop turned and shifted into that pose. Nothing here normalises an object's brightness: on real cells the
integrated intensity carries meaning (DNA content tells G1 from G2), so every channel stays in the units of
the stack, background-free.

Pure NumPy/SciPy on channels-last float arrays (N, H, W, C); every function reads its items one at a time or
as one array and returns new arrays (inputs are never modified).
"""
from __future__ import annotations

import numpy as np
from scipy import ndimage
from skimage.filters import threshold_otsu

#: Pieces of a mask smaller than this share of its largest piece are debris, dropped.
KEEP_PIECE = 0.2
#: Pixels the mask is grown by, so a bright-field outline (dark ring) stays inside it.
GROW = 1
#: MAD → standard deviation for Gaussian noise.
MAD_SD = 1.4826


def ring(x: np.ndarray) -> np.ndarray:
    """The outer ring of every crop: (N, 2H + 2W, C)."""
    return np.concatenate([x[:, 0], x[:, -1], x[:, :, 0], x[:, :, -1]], axis=1)


def border_background(x: np.ndarray) -> np.ndarray:
    """Each crop's background level per channel (N, C): the median of its outer ring, which a crop centred on
    its object sees even when a neighbour reaches into a corner."""
    return np.median(ring(x), axis=1)


def noise_levels(x: np.ndarray, background: np.ndarray) -> np.ndarray:
    """Per channel (C,), the background's noise over the stack: the ring's median absolute deviation from each
    crop's level, as a standard deviation. A noiseless background (generated or masked crops) gets a thousandth
    of the channel's range instead (and a blank channel 1), so contrasts in these units stay finite."""
    mad = MAD_SD * np.median(np.abs(ring(x) - background[:, None, :]), axis=(0, 1))
    spread = x.reshape(-1, x.shape[-1]).max(0) - x.reshape(-1, x.shape[-1]).min(0)
    return np.where(mad > 0, mad, np.where(spread > 0, 1e-3 * spread, 1.0))


def object_masks(x: np.ndarray, background: np.ndarray, noise: np.ndarray) -> np.ndarray:
    """(N, H, W) bool: every crop's object. The channels' contrast from background, each in units of its noise,
    summed and lightly smoothed; Otsu's threshold per crop; pieces under ``KEEP_PIECE`` of the largest dropped,
    holes filled, grown by ``GROW``. A crop with no contrast at all gets the whole crop."""
    contrast = (np.abs(x - background[:, None, None, :]) / noise).sum(-1)
    contrast = ndimage.gaussian_filter(contrast, (0, 1, 1))
    masks = np.ones(contrast.shape, bool)
    for i, c in enumerate(contrast):
        if c.max() > c.min():
            masks[i] = _one_mask(c > threshold_otsu(c))
    return masks


def _one_mask(m: np.ndarray) -> np.ndarray:
    lab, n = ndimage.label(m)
    if n > 1:
        sizes = ndimage.sum_labels(m, lab, np.arange(1, n + 1))
        m = np.isin(lab, 1 + np.flatnonzero(sizes >= KEEP_PIECE * sizes.max()))
    m = ndimage.binary_fill_holes(m)
    return ndimage.binary_dilation(m, iterations=GROW) if GROW else m


def poses(weights: np.ndarray, orient: bool) -> np.ndarray:
    """(N, 3): each item's centre of mass (y, x) in pixels and, when ``orient``, the angle (radians, from +x towards
    +y) of its major axis, pointing to its heavier tail (the third moment), else 0. ``weights`` (N, H, W) ≥ 0;
    an item of zero weight is centred on the crop."""
    n, h, w = weights.shape
    yy, xx = np.mgrid[:h, :w].astype(np.float64)
    mass = weights.sum((1, 2))
    safe = np.where(mass > 0, mass, 1.0)
    cy = np.where(mass > 0, (weights * yy).sum((1, 2)) / safe, (h - 1) / 2)
    cx = np.where(mass > 0, (weights * xx).sum((1, 2)) / safe, (w - 1) / 2)
    out = np.stack([cy, cx, np.zeros(n)], 1)
    if orient:
        dy, dx = yy - cy[:, None, None], xx - cx[:, None, None]
        syy, sxx = (weights * dy * dy).sum((1, 2)), (weights * dx * dx).sum((1, 2))
        sxy = (weights * dx * dy).sum((1, 2))
        angle = 0.5 * np.arctan2(2 * sxy, sxx - syy)
        along = dx * np.cos(angle)[:, None, None] + dy * np.sin(angle)[:, None, None]
        tail = (weights * along ** 3).sum((1, 2))
        out[:, 2] = np.where(tail < 0, angle + np.pi, angle)
    return out


def posed(x: np.ndarray, pose: np.ndarray, inverse: bool = False) -> np.ndarray:
    """Crops (N, H, W, C) turned and shifted so that each item's centre of mass lies at the crop's centre and its
    major axis along +x (``inverse``: a posed picture put back into the item's frame). Bilinear, zero outside."""
    n, h, w, c = x.shape
    centre = np.array([(h - 1) / 2, (w - 1) / 2])
    out = np.empty(x.shape, np.float32)
    for i in range(n):
        cos, sin = np.cos(pose[i, 2]), np.sin(pose[i, 2])
        rot = np.array([[cos, sin], [-sin, cos]])          # output (y, x) offset → input offset, posed frame
        at = pose[i, :2]
        if inverse:
            rot, at, centre_i = rot.T, centre, pose[i, :2]
        else:
            centre_i = centre
        offset = at - rot @ centre_i
        for ch in range(c):
            out[i, :, :, ch] = ndimage.affine_transform(x[i, :, :, ch], rot, offset, order=1, mode="constant", cval=0.0)
    return out


def smoothed_rows(x: np.ndarray, sigma: float) -> np.ndarray:
    """Crops (N, H, W, C) smoothed by a Gaussian of ``sigma`` pixels in each channel and sampled every
    ``sigma // 2`` pixels (no detail is lost that the smoothing kept), as flat float32 rows (N, D); ``sigma`` 0:
    the crops as they are."""
    x = np.asarray(x, np.float32)
    if sigma <= 0:
        return x.reshape(len(x), -1)
    step = max(1, int(sigma // 2))
    smooth = ndimage.gaussian_filter(x, (0, sigma, sigma, 0), mode="constant")
    return np.ascontiguousarray(smooth[:, ::step, ::step]).reshape(len(x), -1)
