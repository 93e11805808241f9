"""A generated fluorescence field of nuclei that differ inside, not in their outline (made on the fly).

Every nucleus has the same outline distribution: an ellipse with semi-axes a·r and r/a (a drawn in 1-1.2,
so the area is π r² whatever a), wobbled by low harmonics, at a uniform random angle, r drawn per nucleus.
The kinds differ only in how the intensity is laid out inside, each at its own random angle:

- ``uniform``: a flat interior with a smooth chromatin texture (as ``nuclei``);
- ``rim``: the signal concentrated at the envelope (a bright ring inside the outline, a dimmer centre);
- ``foci``: three or four small bright spots scattered inside;
- ``pole``: one bright cap at one end of the long axis (the end drawn at random).

Brightness is log-normal per nucleus and the integrated signal is about the same for every kind, so total
or mean intensity does not tell them apart; only the pattern, seen under any rotation, does. Imaging
(blur, background, Poisson and read noise, uint16) and the labels (true masks, ids in random order) are
as in :func:`ticlust.datasets.nuclei.nuclei_field`.
"""
from __future__ import annotations

import numpy as np
from scipy import ndimage

from ..errors import InputError
from .nuclei import NucleiField, _count, _place, _shape, blank_field, paint, window
from ..objects.crops import objects_from_labels

INNER_KINDS = ("uniform", "rim", "foci", "pole")


def inner_nuclei_field(n: int = 300, shape: tuple[int, int] = (1024, 1024), seed: int = 0,
                       radius: tuple[float, float] = (8.0, 11.0), wobble: float = 0.04, blur: float = 1.0,
                       brightness: float = 1500.0, brightness_spread: float = 0.3, background: float = 200.0,
                       read_noise: float = 20.0, texture: float = 0.15, spacing: float = 3.0) -> NucleiField:
    """A field of ``n`` nuclei, a quarter of each inner kind (module doc). Parameters as ``nuclei_field``."""
    n = _count(n)
    h, w = _shape(shape)
    lo, hi = (float(v) for v in radius)
    if not 3.0 <= lo <= hi:
        raise InputError(f"radius={radius!r} must be a range (low, high) with 3 ≤ low ≤ high pixels.")
    rng = np.random.default_rng(seed)
    kinds = np.resize(np.arange(len(INNER_KINDS)), n)
    rng.shuffle(kinds)
    r = rng.uniform(lo, hi, n)
    aspect = rng.uniform(1.0, 1.2, n)
    angle = rng.uniform(0, 2 * np.pi, n)
    harmonics = rng.normal(0, wobble, (n, 3)) * (wobble > 0)
    phases = rng.uniform(0, 2 * np.pi, (n, 3))
    bright = brightness * np.exp(rng.normal(0, brightness_spread, n))
    reach = 1.2 * r * (1 + np.abs(harmonics).sum(1)) + 1
    centres = _place(reach, (h, w), spacing, rng)
    ids = rng.permutation(n) + 1
    labels, signal, table = blank_field(h, w, n)
    for i in range(n):
        cy, cx = centres[i]
        yy, xx, y0, x0 = window(cy, cx, reach[i])
        v, u = (yy - cy) / r[i], (xx - cx) / r[i]
        c, s = np.cos(angle[i]), np.sin(angle[i])
        a, b = c * u + s * v, -s * u + c * v                         # along / across the long axis
        theta = np.arctan2(b, a)
        wob = 1 + sum(harmonics[i, j] * np.cos((j + 2) * theta + phases[i, j]) for j in range(3))
        ea, eb = a / wob / aspect[i], b / wob * aspect[i]
        rho = np.hypot(ea, eb)                                          # 1 on the outline
        inside = rho <= 1.0
        pattern = _pattern(kinds[i], ea, eb, rho, rng)
        pattern = pattern / max(pattern[inside].mean(), 1e-9)          # the same mean signal for every kind
        tex = ndimage.gaussian_filter(rng.normal(0, 1, inside.shape), 1.5)
        tex *= texture / max(tex.std(), 1e-9)
        paint(labels, signal, ids[i], inside, bright[i] * pattern * (1 + tex), y0, x0)
        table[ids[i]] = kinds[i]
    optical = ndimage.gaussian_filter(signal, blur) if blur > 0 else signal
    counts = rng.poisson(np.clip(optical + background, 0, None)).astype(np.float64) + rng.normal(0, read_noise, (h, w))
    image = np.clip(np.rint(counts), 0, 65535).astype(np.uint16)
    return NucleiField(image=image, labels=labels, kinds=table, kind_names=INNER_KINDS)


def _pattern(kind: int, ea: np.ndarray, eb: np.ndarray, rho: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Relative intensity inside one nucleus in its own frame (ea along the long axis, rho = 1 on the outline)."""
    base = np.ones_like(rho)
    if kind == 1:                                                   # rim: a ring just inside the envelope
        return 0.35 + 2.0 * np.exp(-0.5 * ((rho - 0.8) / 0.12) ** 2)
    if kind == 2:                                                   # foci: 3-4 small spots
        out = 0.6 * base
        for _ in range(int(rng.integers(3, 5))):
            rr, phi = 0.65 * np.sqrt(rng.uniform(0.05, 1.0)), rng.uniform(0, 2 * np.pi)
            out = out + 2.5 * np.exp(-0.5 * ((ea - rr * np.cos(phi)) ** 2 + (eb - rr * np.sin(phi)) ** 2) / 0.14 ** 2)
        return out
    if kind == 3:                                                   # pole: a bright cap at one end of the long axis
        end = 1.0 if rng.random() < 0.5 else -1.0
        return 0.45 + 2.0 * np.exp(-0.5 * ((ea - 0.7 * end) ** 2 + eb ** 2) / 0.3 ** 2)
    return base


def inner_nuclei_sample(seed: int = 0, n: int = 300, **cut) -> tuple[np.ndarray, np.ndarray]:
    """The inner-pattern nuclei as a stack: every nucleus not touching the border cut out (masked, 32×32 or
    the size that fits; ``cut``: more ``objects_from_labels`` options, e.g. normalize, rescale), and its true
    kind (0 uniform, 1 rim, 2 foci, 3 pole)."""
    f = inner_nuclei_field(n=n, seed=seed)
    stack, table = objects_from_labels(f.image, f.labels, **cut)
    return stack, f.kind_of(table["label"])
