"""Cell crops read as a lab reads them, before any clustering: each crop's background level taken off per
channel (its outer ring's median), the object's mask (Otsu on the channels' summed contrast, every sizeable
piece of it kept, so a dividing cell keeps both daughters), its pose (centre of mass and major axis) and the
crop turned and shifted into that pose. Nothing here normalises an object's brightness: on real cells the
integrated intensity carries meaning (DNA content tells G1 from G2), so every channel stays in the units of
the stack, background-free.

Crops in transmitted light (stained smears and sections: H&E, Giemsa, May-Grünwald-Giemsa) are read as a
pathologist's software reads them: stains absorb, so each pixel becomes its optical density (Beer–Lambert,
against the crop's own light level), the object's stain is the colour that tells the crops' centres from their
rings (a neighbouring red cell's colour sits in the ring), and the central object is described by what tells
cell types apart there — its size and outline, its nucleus (the most absorbing part) and lobes, the stains' mix
in nucleus and cytoplasm, and texture — none of which depends on its orientation.

Pure NumPy/SciPy on channels-last float arrays (N, H, W, C); every function reads its items one at a time or
as one array and returns new arrays (inputs are never modified).
"""
from __future__ import annotations

import numpy as np
from scipy import ndimage
from scipy.spatial import ConvexHull
from skimage.filters import threshold_otsu

#: Pieces of a mask smaller than this share of its largest piece are debris, dropped.
KEEP_PIECE = 0.2
#: Pixels the mask is grown by, so a bright-field outline (dark ring) stays inside it.
GROW = 1
#: MAD → standard deviation for Gaussian noise.
MAD_SD = 1.4826
#: Percentile of a crop's ring taken as the light it was lit by (transmitted light): the ring's brightest
#: pixels are clear glass or plasma, its median may be a neighbouring cell.
LIGHT_PERCENTILE = 90
#: The central disc (radius, as a share of the crop's side) that holds the object a crop is centred on.
CENTRE_DISC = 0.12
#: Pieces of the stain this close (pixels) to the central object belong to it (a neutrophil's lobes, granules).
NEAR = 3
#: The descriptors' groups (``object_descriptors``); shape ones hold unlike units, each scaled on its own, the others
#: are optical densities of several channels in one unit, scaled together so a faint channel stays faint.
SHAPE_GROUPS = ("object shape", "nucleus shape")


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


def centre_disc(h: int, w: int) -> np.ndarray:
    """(H, W) bool: the disc of radius ``CENTRE_DISC`` × the side about the crop's centre."""
    yy, xx = np.mgrid[:h, :w]
    return np.hypot(yy - (h - 1) / 2, xx - (w - 1) / 2) < CENTRE_DISC * min(h, w)


def absorbs(x: np.ndarray) -> bool:
    """Whether the objects absorb light (transmitted light, stains): the typical crop's centre has a positive optical
    density, its mean over the channels of ``log(light / centre)``, ``light`` its ring's brightest pixels
    (``LIGHT_PERCENTILE``); a stain may pass one colour freely (a blue nucleus in blue). Fluorescence (a centre far
    brighter than its background in some channel) and data with values ≤ 0 (background taken off) answer False."""
    centre = x[:, centre_disc(*x.shape[1:3])].mean(1)
    light = np.percentile(ring(x), LIGHT_PERCENTILE, axis=1)
    if np.any(centre <= 0) or np.any(light <= 0):
        return False
    return bool(np.median(np.log(light / centre).mean(1)) > 0)


def optical_density(x: np.ndarray) -> np.ndarray:
    """Crops (N, H, W, C) as optical density ``log10(I0 / I)`` per channel, ``I0`` each crop's light level (the
    ``LIGHT_PERCENTILE`` of its ring), clipped at 0: stain amounts add, the light's colour and level drop out."""
    x = np.asarray(x, np.float32)
    light = np.percentile(ring(x), LIGHT_PERCENTILE, axis=1)
    floor = np.float32(max(1e-3 * float(np.max(light)), 1e-6))
    od = np.log10(np.maximum(light, floor)[:, None, None, :] / np.maximum(x, floor))
    return np.clip(od, 0.0, None).astype(np.float32)


def stain_direction(od: np.ndarray) -> np.ndarray:
    """(C,) unit vector: the colour (optical density) that best tells the crops' central discs from their rings
    (Fisher's discriminant over the stack), i.e. the stain of the objects the crops are centred on."""
    c = od.shape[-1]
    centre = od[:, centre_disc(*od.shape[1:3])].reshape(-1, c).astype(np.float64)
    edge = ring(od).reshape(-1, c).astype(np.float64)
    spread = np.atleast_2d(np.cov(centre.T)) + np.atleast_2d(np.cov(edge.T)) + 1e-9 * np.eye(c)
    d = np.linalg.solve(spread, centre.mean(0) - edge.mean(0))
    norm = np.linalg.norm(d)
    return (d / norm if norm > 0 else np.full(c, 1 / np.sqrt(c))).astype(np.float32)


def central_objects(stain: np.ndarray) -> np.ndarray:
    """(N, H, W) bool: per crop, Otsu's threshold on the (lightly smoothed) stain image, the piece under the centre
    (else the nearest) with every piece within ``NEAR`` pixels of it, holes filled. A flat crop gets the whole crop."""
    stain = ndimage.gaussian_filter(np.asarray(stain, np.float32), (0, 1, 1))
    h, w = stain.shape[1:]
    out = np.ones(stain.shape, bool)
    for i, s in enumerate(stain):
        if s.max() <= s.min():
            continue
        lab, n = ndimage.label(s > threshold_otsu(s))
        dist, (iy, ix) = ndimage.distance_transform_edt(lab == 0, return_indices=True)
        core = lab == lab[iy[h // 2, w // 2], ix[h // 2, w // 2]]
        near = np.unique(lab[ndimage.binary_dilation(core, iterations=NEAR)])
        out[i] = ndimage.binary_fill_holes(np.isin(lab, near[near > 0]))
    return out


def _shapes(masks: np.ndarray) -> np.ndarray:
    """(N, 5) per mask: log area, solidity (area over its convex hull's), eccentricity (of its second moments),
    pieces, and outline length (pixels on its edge) over √area; zeros for an empty mask. NumPy over the stack,
    SciPy's hull per mask: regionprops per crop costs ten times as much."""
    masks = np.asarray(masks, bool)
    area = masks.sum((1, 2)).astype(np.float64)
    w = masks / np.maximum(area, 1)[:, None, None]
    yy, xx = np.mgrid[:masks.shape[1], :masks.shape[2]].astype(np.float64)
    my, mx = (w * yy).sum((1, 2)), (w * xx).sum((1, 2))
    dy, dx = yy - my[:, None, None], xx - mx[:, None, None]
    syy, sxx, sxy = (w * dy * dy).sum((1, 2)), (w * dx * dx).sum((1, 2)), (w * dx * dy).sum((1, 2))
    root = np.sqrt(((syy - sxx) / 2) ** 2 + sxy ** 2)
    big, small = (syy + sxx) / 2 + root, (syy + sxx) / 2 - root
    ecc = np.sqrt(np.clip(1 - small / np.where(big > 0, big, 1), 0, 1))
    edge = (masks & ~ndimage.binary_erosion(masks, np.ones((1, 3, 3), bool), border_value=0)).sum((1, 2))
    corners = np.array([[-0.5, -0.5], [-0.5, 0.5], [0.5, -0.5], [0.5, 0.5]])
    out = np.zeros((len(masks), 5))
    for i, m in enumerate(masks):
        if area[i] < 2:
            continue
        points = (np.argwhere(m & ~ndimage.binary_erosion(m))[:, None, :] + corners).reshape(-1, 2)
        solidity = area[i] / ConvexHull(points).volume
        out[i] = [np.log1p(area[i]), solidity, ecc[i], ndimage.label(m)[1], edge[i] / np.sqrt(area[i])]
    return out


def _mix(od: np.ndarray) -> np.ndarray:
    """The stains' mix of some pixels (P, C): their mean optical density as shares of its sum (C,)."""
    mean = od.mean(0) if len(od) else np.zeros(od.shape[-1], np.float32)
    return mean / max(float(mean.sum()), 1e-6)


def object_descriptors(od: np.ndarray, masks: np.ndarray) -> dict[str, np.ndarray]:
    """Per crop, what tells stained cell types apart, none of it orientation's: the object's shape; its nucleus
    (the part above Otsu's threshold of the total optical density inside it): shape and share of the object; the
    stains' mix of nucleus and of cytoplasm (an object of one density is all nucleus); the object's spread of
    optical density and its texture (the mean absolute difference from a 2-pixel smoothing: granules). Named groups
    of (N, ·) float64 arrays; an object of 4 pixels or fewer is taken as the whole crop."""
    fine = np.abs(od - ndimage.gaussian_filter(od, (0, 2, 2, 0)))
    total = od.sum(-1)
    masks = np.where(masks.sum((1, 2))[:, None, None] > 4, masks, True)
    nuclei = np.zeros(masks.shape, bool)
    rows = {name: [] for name in ("nucleus mix", "cytoplasm mix", "spread", "texture")}
    for i, m in enumerate(masks):
        t = total[i][m]
        nuclei[i] = m & (total[i] > threshold_otsu(t)) if t.max() > t.min() else m      # a flat object: all nucleus
        cytoplasm = m & ~nuclei[i] if (m & ~nuclei[i]).any() else m
        rows["nucleus mix"].append(_mix(od[i][nuclei[i]]))
        rows["cytoplasm mix"].append(_mix(od[i][cytoplasm]))
        rows["spread"].append(od[i][m].std(0))
        rows["texture"].append(fine[i][m].mean(0))
    share = nuclei.sum((1, 2)) / masks.sum((1, 2))
    shapes = {"object shape": _shapes(masks), "nucleus shape": np.c_[_shapes(nuclei), share]}
    return {**shapes, **{name: np.asarray(v, np.float64) for name, v in rows.items()}}


def descriptor_scales(groups: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Centre and scale (D,) of the joined descriptors: each ``SHAPE_GROUPS`` value by its own standard deviation,
    each other group by one scale for all its values (its RMS spread per value), so every group weighs by its
    number of values. A value that does not vary gets scale 1 (it adds nothing)."""
    mean, scale = [], []
    for name, v in groups.items():
        centred = v - v.mean(0)
        joint = np.sqrt((centred ** 2).sum(1).mean() / v.shape[1])
        s = centred.std(0) if name in SHAPE_GROUPS else np.full(v.shape[1], joint)
        mean.append(v.mean(0))
        scale.append(np.where(s > 1e-12, s, 1.0))
    return np.concatenate(mean), np.concatenate(scale)
