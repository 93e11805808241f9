"""A synthetic fluorescence field of nuclei with its segmentation, made on the fly (no download).

Three kinds of nucleus, equally many of each, at random positions, orientations and sizes:

- ``round``: a disc of radius r;
- ``elongated``: an ellipse with semi-axes 1.45 r and 0.7 r;
- ``dividing``: a dumbbell, two discs of radius 0.75 r whose centres lie 1.3 r apart (a waist of
  about 0.75 r across).

The three have about the same area (π r², 1.02 π r², 1.09 π r²) and the two non-round kinds about
the same length (2.9 r, 2.8 r), so neither size nor brightness tells them apart: only the shape does, seen under any
rotation, position and size. r is drawn per nucleus (default 6-9 px); every outline is wobbled by
random low harmonics (2-4) of the angle (a few % of the radius). Each nucleus has its own
brightness (log-normal) and a smooth chromatin texture; the field has a background offset, is
blurred by a Gaussian point-spread function, then gets Poisson (shot) noise and Gaussian read noise,
and is stored as uint16 like a camera image. The labels are the nuclei's true masks (the segmentation
a perfect Cellpose/StarDist run would give), with ids in random order (1..n, so an id says nothing
about the kind). Nuclei do not overlap; some touch the field's border, as in a real field.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import ndimage

from ..errors import InputError, whole_number
from ..objects.crops import objects_from_labels

KINDS = ("round", "elongated", "dividing")


@dataclass
class NucleiField:
    """A generated field: ``image`` (H, W) uint16, ``labels`` (H, W) int32 (0 = background),
    ``kinds`` (n + 1,) int: the kind index (into ``kind_names``) of every label id, -1 for id 0."""

    image: np.ndarray
    labels: np.ndarray
    kinds: np.ndarray
    kind_names: tuple[str, ...] = KINDS

    def kind_of(self, label_ids) -> np.ndarray:
        """The kind index of each given label id."""
        return self.kinds[np.asarray(label_ids, dtype=np.int64)]


def nuclei_field(n: int = 300, shape: tuple[int, int] = (1024, 1024), seed: int = 0, radius: tuple[float, float] = (6.0, 9.0),
                 wobble: float = 0.04, blur: float = 1.2, brightness: float = 1500.0, brightness_spread: float = 0.3,
                 background: float = 200.0, read_noise: float = 20.0, gain: float = 1.0, texture: float = 0.15,
                 spacing: float = 3.0) -> NucleiField:
    """Make a field of ``n`` nuclei (a third of each kind, see the module doc) of size ``shape``.

    ``radius``: range of r (pixels); ``wobble``: std of the outline's harmonics (fraction of r);
    ``blur``: PSF sigma (pixels); ``brightness``: median nucleus intensity above background
    (counts), ``brightness_spread`` its log-normal sigma; ``background`` and ``read_noise`` in
    counts; ``gain``: counts per photon (Poisson noise on counts / gain); ``texture``: relative
    amplitude of the chromatin texture; ``spacing``: least gap between nuclei (pixels).
    Raises InputError when the nuclei do not fit.
    """
    n = _count(n)
    h, w = _shape(shape)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise InputError(f"seed={seed!r} must be a whole number.")
    lo, hi = radius_range(radius, 2.0)
    for name, value in (("wobble", wobble), ("blur", blur), ("brightness_spread", brightness_spread), ("background", background),
                        ("read_noise", read_noise), ("texture", texture), ("spacing", spacing)):
        if not np.isfinite(value) or value < 0:
            raise InputError(f"{name}={value!r} must be a finite number ≥ 0.")
    if not (brightness > 0 and gain > 0):
        raise InputError("brightness and gain must be positive numbers.")
    rng = np.random.default_rng(seed)
    kinds = np.resize(np.arange(len(KINDS)), n)
    rng.shuffle(kinds)
    r = rng.uniform(lo, hi, n)
    angle = rng.uniform(0, np.pi, n)
    harmonics = rng.normal(0, wobble, (n, 3)) * (wobble > 0)
    phases = rng.uniform(0, 2 * np.pi, (n, 3))
    bright = brightness * np.exp(rng.normal(0, brightness_spread, n))
    reach = 1.45 * r * (1 + np.abs(harmonics).sum(1)) + 1              # bounding radius of each nucleus
    centres = _place(reach, (h, w), spacing, rng)
    ids = rng.permutation(n) + 1
    labels, signal, table = blank_field(h, w, n)
    for i in range(n):
        cy, cx = centres[i]
        yy, xx, y0, x0 = window(cy, cx, reach[i])
        inside = _inside(kinds[i], (yy - cy) / r[i], (xx - cx) / r[i], angle[i], harmonics[i], phases[i])
        tex = ndimage.gaussian_filter(rng.normal(0, 1, inside.shape), 1.5)
        tex *= texture / max(tex.std(), 1e-9)
        paint(labels, signal, ids[i], inside, bright[i] * (1 + tex), y0, x0)
        table[ids[i]] = kinds[i]
    optical = ndimage.gaussian_filter(signal, blur) if blur > 0 else signal
    photons = np.clip(optical + background, 0, None) / gain
    counts = rng.poisson(photons).astype(np.float64) * gain + rng.normal(0, read_noise, (h, w))
    image = np.clip(np.rint(counts), 0, 65535).astype(np.uint16)
    return NucleiField(image=image, labels=labels, kinds=table)


def blank_field(h: int, w: int, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """An empty field's label image, signal, and the kind of each of ``n`` labels (-1 until painted)."""
    return np.zeros((h, w), np.int32), np.zeros((h, w), np.float32), np.full(n + 1, -1, np.int64)


def window(cy: float, cx: float, reach: float) -> tuple[np.ndarray, np.ndarray, int, int]:
    """The pixel grid (yy, xx, float64) of the square window that holds a nucleus centred at (cy, cx) and
    reaching ``reach`` pixels, with its top-left corner (y0, x0): what :func:`paint` takes."""
    half = int(np.ceil(reach)) + 2
    y0, x0 = int(np.floor(cy)) - half, int(np.floor(cx)) - half
    yy, xx = np.mgrid[y0:y0 + 2 * half + 1, x0:x0 + 2 * half + 1].astype(np.float64)
    return yy, xx, y0, x0


def paint(labels: np.ndarray, signal: np.ndarray, label: int, inside: np.ndarray, values: np.ndarray, y0: int, x0: int) -> None:
    """Paint one nucleus: its square window (``inside`` mask, ``values``, top-left corner y0, x0), clipped
    to the field, into the label image and the signal."""
    h, w = labels.shape
    side_y, side_x = inside.shape
    ys, xs = slice(max(y0, 0), min(y0 + side_y, h)), slice(max(x0, 0), min(x0 + side_x, w))
    local = (slice(ys.start - y0, ys.stop - y0), slice(xs.start - x0, xs.stop - x0))
    m = inside[local]
    labels[ys, xs][m] = label
    signal[ys, xs][m] += values[local][m].astype(np.float32)


def _inside(kind: int, v: np.ndarray, u: np.ndarray, angle: float, harm: np.ndarray, phase: np.ndarray) -> np.ndarray:
    """Mask of one nucleus in units of r: (v, u) = (row, col) offsets from its centre / r."""
    c, s = np.cos(angle), np.sin(angle)
    a = c * u + s * v                          # along the nucleus's long axis
    b = -s * u + c * v
    theta = np.arctan2(b, a)
    wob = 1 + sum(harm[j] * np.cos((j + 2) * theta + phase[j]) for j in range(3))
    a, b = a / wob, b / wob
    if kind == 0:
        return a ** 2 + b ** 2 <= 1.0
    if kind == 1:
        return (a / 1.45) ** 2 + (b / 0.7) ** 2 <= 1.0
    return np.minimum((a - 0.65) ** 2 + b ** 2, (a + 0.65) ** 2 + b ** 2) <= 0.75 ** 2


def _place(reach: np.ndarray, shape, spacing: float, rng: np.random.Generator, tries: int = 200) -> np.ndarray:
    """Random non-overlapping centres (dart throwing on a coarse bucket grid); the largest first."""
    h, w = shape
    n = len(reach)
    cell = float(2 * reach.max() + spacing)
    grid: dict[tuple[int, int], list[int]] = {}
    centres = np.zeros((n, 2))
    for i in np.argsort(-reach, kind="stable"):
        for _ in range(tries):
            p = rng.uniform([0, 0], [h, w])
            gy, gx = int(p[0] // cell), int(p[1] // cell)
            near = [j for dy in (-1, 0, 1) for dx in (-1, 0, 1) for j in grid.get((gy + dy, gx + dx), ())]
            if all(np.hypot(*(centres[j] - p)) >= reach[i] + reach[j] + spacing for j in near):
                centres[i] = p
                grid.setdefault((gy, gx), []).append(int(i))
                break
        else:
            raise InputError(f"{n} nuclei do not fit in a {h}×{w} field: give fewer nuclei or a larger field.")
    return centres


def radius_range(radius, least: float) -> tuple[float, float]:
    """``radius`` as a range (low, high) of pixels with ``least`` ≤ low ≤ high, or one sentence."""
    try:
        lo, hi = (float(v) for v in radius)
    except (TypeError, ValueError):
        raise InputError(f"radius={radius!r} must be a range (low, high) in pixels.") from None
    if not least <= lo <= hi:
        raise InputError(f"radius={radius!r} must be a range (low, high) with {least:g} ≤ low ≤ high pixels.")
    return lo, hi


def _count(n) -> int:
    return whole_number(n, "n", 1, "nuclei")


def _shape(shape) -> tuple[int, int]:
    try:
        h, w = (int(s) for s in shape)
    except (TypeError, ValueError):
        raise InputError(f"shape={shape!r} must be (height, width) in pixels.") from None
    if min(h, w) < 32:
        raise InputError(f"shape={shape!r} is too small: the field must be at least 32×32 pixels.")
    return h, w


def write_nuclei_plate(folder, fields: int = 20, n: int = 250, shape: tuple[int, int] = (1024, 1024), seed: int = 0,
                       fields_per_well: int = 2, **options):
    """Write a generated plate into ``folder``: ``fields`` nuclei fields (field i made with seed ``seed + i``)
    as ``WELL_sS.tif`` (uint16) beside Cellpose-style masks ``WELL_sS_cp_masks.tif``, a manifest
    ``plate.csv`` (image, labels, well, site) and ``kinds.csv`` (image, label, kind: every nucleus's true
    kind). The folder is an extraction input as it is, and so is the manifest. Returns the manifest's path.
    ``options`` go to :func:`nuclei_field`."""
    import csv
    from pathlib import Path

    import tifffile

    from ..core.atomic import check_outputs, write_atomic

    fields, per_well = _count(fields), _count(fields_per_well)
    folder = Path(folder)
    check_outputs({}, {"The plate folder": folder}, folders=True)
    folder.mkdir(parents=True, exist_ok=True)
    plate, kinds = [], []
    for i in range(fields):
        well = f"{chr(ord('A') + (i // per_well) // 12)}{(i // per_well) % 12 + 1:02d}"
        name = f"{well}_s{i % per_well}"
        f = nuclei_field(n=n, shape=shape, seed=seed + i, **options)
        for file, picture in ((f"{name}.tif", f.image), (f"{name}_cp_masks.tif", f.labels)):
            write_atomic(folder / file, lambda tmp: tifffile.imwrite(tmp, picture))
        plate.append({"image": f"{name}.tif", "labels": f"{name}_cp_masks.tif", "well": well, "site": i % per_well})
        kinds += [{"image": f"{name}.tif", "label": label, "kind": KINDS[f.kinds[label]]} for label in range(1, n + 1)]
    for file, rows in (("plate.csv", plate), ("kinds.csv", kinds)):
        def write(tmp, rows=rows):
            with open(tmp, "w", newline="") as out:
                writer = csv.DictWriter(out, fieldnames=list(rows[0]))
                writer.writeheader()
                writer.writerows(rows)
        write_atomic(folder / file, write)
    return folder / "plate.csv"


def nuclei_sample(seed: int = 0, n: int = 300) -> tuple[np.ndarray, np.ndarray]:
    """The nuclei sample as a stack: every nucleus not touching the border cut out (masked, 32×32
    or the size that fits), and its true kind (0 round, 1 elongated, 2 dividing)."""
    f = nuclei_field(n=n, seed=seed)
    stack, table = objects_from_labels(f.image, f.labels)
    return stack, f.kind_of(table["label"])
