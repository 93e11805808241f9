"""Generated fluorescence fields of nuclei that touch, with their true masks: what a nucleus segmentation is
measured on (``benchmarks/segmentation.py``), at four difficulties.

- ``separate``: nuclei apart from each other (at least 3 px between outlines), even illumination;
- ``touching``: most nuclei in clumps of two to six, pressed against each other (centres 0.75-1.0 of the sum of
  their radii apart: the outlines meet or flatten against each other, as crowded nuclei do);
- ``uneven``: ``touching`` under an uneven illumination, as an uncorrected widefield field is: the signal falls to
  about a third across the field (a ramp in a random direction and a vignette) and the background doubles;
- ``crowded``: denser clumps pressed harder (0.7-0.95), a wider brightness spread, and debris (small bright specks
  that are no nuclei and are not in the truth);
- ``saturated``: ``touching`` imaged with too long an exposure: every pixel above the 70th percentile of the nuclei's
  counts is clipped there, so the brighter nuclei are flat plateaus (their brightest region no longer marks their
  centre).

Each nucleus is an ellipse of area π r² (aspect 1-1.3, random angle) with a wobbled outline, brighter at its centre
than at its outline (a projected ellipsoid) and a smooth chromatin texture, r drawn in ``radius`` and its
brightness log-normal. Where two nuclei are pressed together each pixel belongs to
the one whose outline it lies deeper inside (the smaller radius-normalised distance), so the truth is a partition
and the signal is not doubled where they meet. Imaging as in :func:`ticlust.datasets.nuclei.nuclei_field`: a
Gaussian point-spread function, Poisson and read noise, uint16. The same seed gives the same field.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import ndimage

from ..errors import InputError
from .nuclei import _count, _shape, radius_range, window

#: The difficulties, easiest first.
DIFFICULTIES = ("separate", "touching", "uneven", "crowded", "saturated")
#: Per difficulty: the chance a nucleus joins a clump, the range of centre distances of pressed nuclei (in sums of
#: radii), the log-normal brightness spread, debris specks per nucleus, whether the illumination is uneven, and the
#: percentile of the nuclei's counts the camera saturates at (None: it does not).
_SETTINGS = {"separate": (0.0, (1.0, 1.0), 0.3, 0.0, False, None),
             "touching": (0.75, (0.75, 1.0), 0.3, 0.0, False, None),
             "uneven": (0.75, (0.75, 1.0), 0.3, 0.0, True, None),
             "crowded": (0.9, (0.7, 0.95), 0.45, 0.15, False, None),
             "saturated": (0.75, (0.75, 1.0), 0.3, 0.0, False, 70)}


@dataclass
class TouchingField:
    """A generated field: ``image`` (H, W) uint16, ``labels`` (H, W) int32, the true masks (ids 1..n),
    ``difficulty`` and ``diameter``, the nuclei's mean equivalent diameter 2r in pixels (what a segmentation is told
    to expect)."""

    image: np.ndarray
    labels: np.ndarray
    difficulty: str
    diameter: float


def touching_nuclei_field(difficulty: str = "touching", n: int = 150, shape: tuple[int, int] = (512, 512),
                          seed: int = 0, radius: tuple[float, float] = (7.0, 11.0), blur: float = 1.2,
                          brightness: float = 1200.0, background: float = 200.0,
                          read_noise: float = 15.0) -> TouchingField:
    """A field of ``n`` nuclei at ``difficulty`` (module doc); ``radius`` the range of radii (pixels), the other
    parameters as :func:`ticlust.datasets.nuclei.nuclei_field`. InputError when the nuclei do not fit."""
    if difficulty not in _SETTINGS:
        raise InputError(f"difficulty={difficulty!r} is not known: choose one of {', '.join(DIFFICULTIES)}.")
    n, (h, w) = _count(n), _shape(shape)
    lo, hi = radius_range(radius, 3.0)
    attach, press, spread, debris, uneven, saturate = _SETTINGS[difficulty]
    rng = np.random.default_rng(seed)
    r = rng.uniform(lo, hi, n)
    aspect, angle = rng.uniform(1.0, 1.3, n), rng.uniform(0, np.pi, n)
    centres = _clumps(r * np.sqrt(aspect), (h, w), attach, press, rng)
    labels = np.zeros((h, w), np.int32)
    depth = np.full((h, w), np.inf)
    signal = np.zeros((h, w), np.float64)
    bright = brightness * np.exp(rng.normal(0, spread, n))
    for i in range(n):
        _paint(labels, depth, signal, i + 1, centres[i], r[i], aspect[i], angle[i], bright[i], rng)
    for _ in range(int(round(debris * n))):       # specks: bright, a pixel or two across, not nuclei
        y, x = rng.uniform(0, h), rng.uniform(0, w)
        yy, xx, y0, x0 = window(y, x, 2.0)
        speck = np.exp(-((yy - y) ** 2 + (xx - x) ** 2) / (2 * rng.uniform(0.6, 1.2) ** 2)) * brightness * 1.5
        _add(signal, speck, y0, x0)
    gain, offset = _illumination((h, w), rng) if uneven else (np.ones((h, w)), np.zeros((h, w)))
    optical = ndimage.gaussian_filter(signal, blur) * gain + background * (1 + offset)
    counts = rng.poisson(np.clip(optical, 0, None)).astype(np.float64) + rng.normal(0, read_noise, (h, w))
    if saturate is not None:
        counts = np.minimum(counts, np.percentile(counts[labels > 0], saturate))
    image = np.clip(np.rint(counts), 0, 65535).astype(np.uint16)
    return TouchingField(image, labels, difficulty, float(2 * np.mean(r)))


def _clumps(reach: np.ndarray, shape, attach: float, press: tuple[float, float], rng, tries: int = 400) -> np.ndarray:
    """Centres: each nucleus, with chance ``attach``, pressed against one placed before (centre distance ``press``
    times the sum of their reaches), else alone (3 px from every other); no two closer than ``press[0]`` sums."""
    h, w = shape
    n = len(reach)
    centres = np.zeros((n, 2))
    for i in range(n):
        for _ in range(tries):
            if i and rng.random() < attach:
                j = int(rng.integers(i))
                turn = rng.uniform(0, 2 * np.pi)
                p = centres[j] + rng.uniform(*press) * (reach[i] + reach[j]) * np.array([np.sin(turn), np.cos(turn)])
                least = press[0] * (reach[:i] + reach[i])
            else:
                p = rng.uniform([0, 0], [h, w])
                least = reach[:i] + reach[i] + 3.0
            inside = reach[i] <= p[0] <= h - reach[i] and reach[i] <= p[1] <= w - reach[i]
            if inside and np.all(np.hypot(*(centres[:i] - p).T) >= least - 1e-9):
                centres[i] = p
                break
        else:
            raise InputError(f"{n} nuclei do not fit in a {h}×{w} field: give fewer nuclei or a larger field.")
    return centres


def _paint(labels, depth, signal, label: int, centre, r: float, aspect: float, angle: float, bright: float, rng):
    """One nucleus: the pixels it lies deepest in (radius-normalised distance below 1 and below every nucleus
    painted before) become its label and carry its signal: brightest at the centre, falling to 0.35 at the outline,
    as the thickness of a flattened ellipsoid seen from above does (a widefield image sums the stain along z), with
    a smooth chromatin texture."""
    cy, cx = centre
    major, minor = r * np.sqrt(aspect), r / np.sqrt(aspect)           # area π r² whatever the aspect
    yy, xx, y0, x0 = window(cy, cx, major * 1.15 + 1)
    c, s = np.cos(angle), np.sin(angle)
    a, b = (c * (xx - cx) + s * (yy - cy)) / major, (-s * (xx - cx) + c * (yy - cy)) / minor
    theta = np.arctan2(b, a)
    wobble = 1 + 0.04 * sum(rng.normal() * np.cos(k * theta + rng.uniform(0, 2 * np.pi)) for k in (2, 3, 4))
    rho = np.hypot(a, b) / wobble
    texture = ndimage.gaussian_filter(rng.normal(0, 1, rho.shape), 1.5)
    texture *= 0.15 / max(texture.std(), 1e-9)
    hh, ww = labels.shape
    ys, xs = slice(max(y0, 0), min(y0 + rho.shape[0], hh)), slice(max(x0, 0), min(x0 + rho.shape[1], ww))
    local = (slice(ys.start - y0, ys.stop - y0), slice(xs.start - x0, xs.stop - x0))
    mine = (rho[local] <= 1.0) & (rho[local] < depth[ys, xs])
    labels[ys, xs][mine] = label
    depth[ys, xs][mine] = rho[local][mine]
    dome = 0.35 + 0.65 * np.sqrt(np.clip(1 - rho[local][mine] ** 2, 0, 1))    # a projected ellipsoid's thickness
    signal[ys, xs][mine] = bright * dome * (1 + texture[local][mine])


def _add(signal, values, y0: int, x0: int) -> None:
    """Add a window of values (top-left corner y0, x0), clipped to the field, to the signal."""
    hh, ww = signal.shape
    ys, xs = slice(max(y0, 0), min(y0 + values.shape[0], hh)), slice(max(x0, 0), min(x0 + values.shape[1], ww))
    signal[ys, xs] += values[ys.start - y0:ys.stop - y0, xs.start - x0:xs.stop - x0]


def _illumination(shape, rng):
    """An uneven illumination: a gain from 1 down to about 0.35 (a ramp in a random direction times a vignette)
    and a background offset rising to +1 (a doubled background) along the same ramp."""
    h, w = shape
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float64)
    turn = rng.uniform(0, 2 * np.pi)
    ramp = (np.cos(turn) * (xx / w - 0.5) + np.sin(turn) * (yy / h - 0.5)) / np.sqrt(0.5) + 0.5   # 0 .. 1
    ramp = np.clip(ramp, 0, 1)
    vignette = 1 - 0.25 * (((yy / h - 0.5) ** 2 + (xx / w - 0.5) ** 2) / 0.5)
    return (1 - 0.5 * ramp) * vignette, ramp
