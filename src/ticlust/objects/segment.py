"""Nuclei found in a field that has no segmentation, by a classical recipe (scikit-image, no model to download).

:func:`segment_nuclei` takes a field (one channel, or the nuclear channel of several) and the nuclei's expected
diameter in pixels, and returns a label image (0 = background, one id per nucleus) that the objects route, the
object store (``ticlust extract --segment nuclei``) and napari's Labels layer take as they take Cellpose's. The
recipe, each step measured in ``benchmarks/results/segmentation.md``:

1. **Smooth** the channel with a Gaussian of σ = diameter / 10 (at least 0.7 px): noise and chromatin texture
   no longer make holes in the mask.
2. **Threshold** it into foreground: ``li`` (minimum cross-entropy, CellProfiler's default), ``otsu``,
   ``triangle`` (dim nuclei on a dark background), or ``local`` (above the mean of a window four diameters across
   and above the triangle level: a strongly uneven illumination). Holes smaller than a nucleus are filled.
3. **Seeds at the expected size**: the peaks, at least 0.3 diameters apart, of a blob response made for nuclei of
   that size: the Laplacian of Gaussian at σ = 0.7 · diameter / (2√2) (a nucleus of that diameter answers with one
   peak at its centre; scaled by its 90th percentile in the mask) plus half the distance to the background (in
   half diameters, at most one), which gives a flat, saturated nucleus its centre too. One seed per nucleus, also where nuclei
   touch and the mask joins them.
4. **Split** the foreground between the seeds by a watershed on that same response, so that touching nuclei part
   along the valley between their blobs (and along the mask's waist between them); two neighbours whose parting
   valley is shallower than 0.1 of that response (their lower peak less than 0.1 above the pass between them) are
   one nucleus and joined again — a nucleus larger or flatter than expected would otherwise fall into pieces.
5. **Filter**: objects smaller than a disc of half the expected diameter (debris) are dropped, and those touching
   the field's border unless ``keep_border``. Large objects (clumps that did not split) are kept: the object store
   skips or rescales them (``--oversize``), never silently.

The work is a generator of :class:`ticlust.events.Progress` (:func:`nuclei_steps`), one event per step, so a napari
thread worker can show it and stop between steps; :func:`segment_nuclei` runs it to the end. Inputs are never
modified; nothing is random.
"""
from __future__ import annotations

import math
import numbers

import numpy as np
from scipy import ndimage

from ..errors import InputError
from ..events import Progress, drain

#: The threshold methods :func:`segment_nuclei` takes (step 2 of the module doc).
THRESHOLDS = ("li", "otsu", "triangle", "local")
#: What a segmentation may find: nuclei (a nucleus channel alone).
OBJECTS = ("nuclei",)
#: The steps :func:`nuclei_steps` reports, in order.
STEPS = ("smoothing", "thresholding", "finding seeds", "splitting touching nuclei", "filtering")
#: The expected diameter's bounds (pixels): below 3 px a nucleus has no shape to find.
MIN_DIAMETER = 3.0
#: The weight of the distance to the background in the seeds' blob response (step 3 of the module doc): 0.5 kept
#: touching nuclei apart and gave saturated (flat) nuclei one seed each (benchmarks/results/segmentation.md).
DISTANCE_WEIGHT = 0.5
#: Neighbours parted by a valley shallower than this (in the blob response's units) are joined (step 4): 0.1 cost
#: nothing at the right diameter and kept nuclei 1.3 times larger than expected whole (segmentation.md).
MERGE_DEPTH = 0.1


def segment_nuclei(image, diameter, channel=None, *, names=None, threshold: str = "li", keep_border: bool = False,
                   channel_axis: int | None = None) -> np.ndarray:
    """The nuclei of a field as a label image (Y×X int32, 0 background, ids 1..n in reading order).

    ``image``: Y×X, or Y×X×C / C×Y×X with ``channel`` naming the nuclear channel (an index, or a name in
    ``names``, the channels' names in order); ``channel_axis`` settles which axis holds the channels when both
    could. ``diameter``: the nuclei's expected diameter in pixels. ``threshold``: one of :data:`THRESHOLDS`.
    ``keep_border``: keep the nuclei that touch the field's border. The recipe is in the module doc."""
    return drain(nuclei_steps(image, diameter, channel, names=names, threshold=threshold, keep_border=keep_border,
                              channel_axis=channel_axis))


def nuclei_steps(image, diameter, channel=None, *, names=None, threshold: str = "li", keep_border: bool = False,
                 channel_axis: int | None = None):
    """:func:`segment_nuclei` as a generator: one :class:`~ticlust.events.Progress` before each step (stage named
    as :data:`STEPS`), then it returns the label image. Cancelling between steps leaves nothing behind."""
    diameter = check_diameter(diameter)
    threshold = check_threshold(threshold)
    plane = nuclear_plane(image, channel, names, channel_axis)
    total = len(STEPS)
    yield Progress(0, total, stage=STEPS[0])
    if not np.isfinite(plane).all():
        raise InputError("The image holds NaN or infinite values: replace them before segmenting it.")
    if plane.size == 0 or plane.min() == plane.max():
        return np.zeros(plane.shape, np.int32)              # a blank field holds no nuclei
    smooth = ndimage.gaussian_filter(plane, max(diameter / 10.0, 0.7))
    yield Progress(1, total, stage=STEPS[1])
    mask = _fill_small_holes(_foreground(smooth, diameter, threshold), diameter)
    yield Progress(2, total, stage=STEPS[2])
    blobs = _blobs(plane, mask, diameter)
    seeds = _seeds(blobs, mask, diameter)
    yield Progress(3, total, stage=STEPS[3])
    from skimage.segmentation import watershed

    labels = _join_shallow(watershed(-blobs, seeds, mask=mask), blobs, MERGE_DEPTH)
    yield Progress(4, total, stage=STEPS[4])
    return _filtered(labels, diameter, keep_border)


def check_diameter(diameter) -> float:
    """The expected diameter as a float of at least :data:`MIN_DIAMETER` pixels, or one sentence."""
    if isinstance(diameter, bool) or not isinstance(diameter, numbers.Real) or not math.isfinite(diameter) \
            or diameter < MIN_DIAMETER:
        raise InputError(f"diameter={diameter!r} must be the nuclei's expected diameter in pixels, a number of at least "
                         f"{MIN_DIAMETER:g} (measure a typical nucleus across in napari or Fiji).")
    return float(diameter)


def check_threshold(threshold) -> str:
    """The threshold method, one of :data:`THRESHOLDS`, or one sentence."""
    if threshold not in THRESHOLDS:
        raise InputError(f"threshold={threshold!r} is not a threshold method: choose one of {', '.join(THRESHOLDS)}.")
    return threshold


def nuclear_plane(image, channel=None, names=None, channel_axis: int | None = None) -> np.ndarray:
    """The one channel of ``image`` that holds the nuclei, as a float32 Y×X array (a copy: the input is never
    touched). A grey image needs no ``channel``; one of several channels must be named."""
    if not hasattr(image, "shape") or not hasattr(image, "dtype"):
        raise InputError(f"The image is a {type(image).__name__}, not an array: pass a NumPy, memory-mapped or dask array.")
    if np.dtype(image.dtype).kind not in "biuf":
        raise InputError(f"The image has dtype {image.dtype}: give a numeric image (uint8, uint16 or float).")
    shape = tuple(int(s) for s in image.shape)
    if len(shape) == 2:
        if channel not in (None, 0) and not (names is not None and len(names) == 1 and channel in names):
            raise InputError(f"channel={channel!r} was given but the image is grey (one channel): leave channel out.")
        return np.asarray(image, dtype=np.float32)
    if len(shape) != 3:
        raise InputError(f"The image has {len(shape)} dimensions: give one field, Y×X or with one channel axis "
                         "(Y×X×C or C×Y×X); segment a time series frame by frame.")
    axis = _channel_axis(shape, channel_axis)
    index = _channel_index(channel, names, shape[axis])
    return np.asarray(np.take(image, index, axis=axis), dtype=np.float32)


def _channel_axis(shape: tuple, channel_axis) -> int:
    """The channel axis of a 3-D field: as given, else the last when it holds at most 8 values and fewer than the
    other two, else the first when it holds at most 8 (the stack rule of ``core.validation.channels_last``)."""
    if channel_axis is not None:
        if isinstance(channel_axis, bool) or not isinstance(channel_axis, numbers.Integral) \
                or channel_axis % 3 not in (0, 2):
            raise InputError(f"channel_axis={channel_axis!r} is not possible: the channels are axis 0 (C×Y×X) or 2 "
                             "(Y×X×C).")
        return int(channel_axis) % 3
    if shape[2] <= 8 and shape[2] < min(shape[:2]):
        return 2
    if shape[0] <= 8 and shape[0] < min(shape[1:]):
        return 0
    raise InputError(f"The image has shape {shape}, which has no channel axis of at most 8 channels: give one field "
                     "(Y×X, Y×X×C or C×Y×X); segment a time series or a volume plane by plane.")


def _channel_index(channel, names, count: int) -> int:
    """The nuclear channel's index among ``count`` channels: ``channel`` an index, or a name in ``names``."""
    if channel is None and count == 1:
        return 0
    if channel is None:
        raise InputError(f"The image has {count} channels: name the one that shows the nuclei with channel= (an index "
                         f"from 0 to {count - 1}{' or a name' if names else ''}; --channel NAME, first of several).")
    if isinstance(channel, str):
        if names is None or channel not in list(names):
            have = f"its channels are {', '.join(map(str, names))}" if names else "the image does not name its channels"
            raise InputError(f"There is no channel {channel!r} ({have}): name the nuclear channel by index or by one of "
                             "its names.")
        return list(names).index(channel)
    if isinstance(channel, bool) or not isinstance(channel, numbers.Integral) or not -count <= channel < count:
        raise InputError(f"channel={channel!r} is not a channel of an image with {count}: give an index from 0 to "
                         f"{count - 1}.")
    return int(channel) % count


def _foreground(smooth: np.ndarray, diameter: float, method: str) -> np.ndarray:
    """The pixels above the threshold ``method`` sets on the smoothed channel."""
    from skimage import filters

    if method == "local":
        window = int(4 * diameter) | 1
        return (smooth > ndimage.uniform_filter(smooth, window)) & (smooth > filters.threshold_triangle(smooth))
    level = {"li": filters.threshold_li, "otsu": filters.threshold_otsu,
             "triangle": filters.threshold_triangle}[method](smooth)
    return smooth > level


def _fill_small_holes(mask: np.ndarray, diameter: float) -> np.ndarray:
    """``mask`` with its holes smaller than a nucleus filled (a ring of nuclei around background keeps its hole)."""
    holes, n = ndimage.label(~mask)
    if n == 0:
        return mask
    size = np.bincount(holes.ravel())
    edge = np.unique(np.concatenate([holes[0], holes[-1], holes[:, 0], holes[:, -1]]))
    small = size <= math.pi * (diameter / 2) ** 2
    small[0] = False
    small[edge] = False
    return mask | small[holes]


def _blobs(plane: np.ndarray, mask: np.ndarray, diameter: float) -> np.ndarray:
    """The blob response the seeds are the peaks of (step 3 of the module doc): LoG at the nuclei's scale, scaled by
    its 90th percentile in the mask, plus half the (lightly smoothed) distance to the background in half diameters,
    capped at one: a clump's middle is no deeper than a nucleus's centre, so the blobs part a clump."""
    log = -ndimage.gaussian_laplace(plane, 0.7 * diameter / (2 * math.sqrt(2)))
    inside = log[mask]
    level = float(np.percentile(inside, 90)) if inside.size else 0.0
    log /= level if level > 0 else max(float(np.abs(log).max()), 1e-12)
    distance = ndimage.distance_transform_edt(mask).astype(np.float32)
    distance = ndimage.gaussian_filter(np.minimum(distance, diameter / 2), 1.0)
    return log + DISTANCE_WEIGHT * distance / (diameter / 2)


def _seeds(blobs: np.ndarray, mask: np.ndarray, diameter: float) -> np.ndarray:
    """One marker per peak of the blob response inside the mask, peaks at least 0.3 diameters apart; every
    connected piece of the mask gets at least one (its highest point)."""
    from skimage.feature import peak_local_max

    pieces, n = ndimage.label(mask)
    markers = np.zeros(mask.shape, np.int32)
    if n == 0:
        return markers
    peaks = peak_local_max(blobs, min_distance=max(1, int(round(0.3 * diameter))), labels=pieces,
                           exclude_border=False)
    markers[tuple(peaks.T)] = np.arange(1, len(peaks) + 1, dtype=np.int32)
    seeded = np.zeros(n + 1, bool)
    seeded[pieces[tuple(peaks.T)]] = True
    bare = np.flatnonzero(~seeded[1:]) + 1
    if len(bare):                                         # a piece without a peak (a plateau) is one nucleus
        tops = ndimage.maximum_position(blobs, pieces, bare)
        for k, at in enumerate(tops):
            markers[at] = len(peaks) + 1 + k
    return markers


def _join_shallow(labels: np.ndarray, height: np.ndarray, depth: float) -> np.ndarray:
    """``labels`` with neighbours joined where the pass between them (the highest of the lower ``height`` of two
    touching pixels across their border) is less than ``depth`` below the lower of their peaks: regions merge along
    their passes from the highest down (a component tree), a joined region keeping the higher peak."""
    n = int(labels.max())
    keys, passes = _passes(labels, height, n)
    if keys.size == 0:
        return labels
    peak = ndimage.maximum(height, labels, index=np.arange(n + 1))
    parent = np.arange(n + 1)

    def root(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for k in np.argsort(-passes, kind="stable"):
        a, b = root(keys[k] // (n + 1)), root(keys[k] % (n + 1))
        if a != b and min(peak[a], peak[b]) - passes[k] < depth:
            a, b = (a, b) if peak[a] >= peak[b] else (b, a)
            parent[b] = a
    return np.array([root(i) for i in range(n + 1)], dtype=labels.dtype)[labels]


def _passes(labels: np.ndarray, height: np.ndarray, n: int):
    """Every pair of touching regions (key ``low * (n + 1) + high``) and its pass: the highest, over the pairs of
    4-neighbour pixels across their border, of the lower height of the two."""
    keys, values = [], []
    for a, b, ha, hb in ((labels[:, :-1], labels[:, 1:], height[:, :-1], height[:, 1:]),
                         (labels[:-1], labels[1:], height[:-1], height[1:])):
        across = (a != b) & (a > 0) & (b > 0)
        low, high = np.minimum(a[across], b[across]).astype(np.int64), np.maximum(a[across], b[across]).astype(np.int64)
        keys.append(low * (n + 1) + high)
        values.append(np.minimum(ha[across], hb[across]))
    keys, values = np.concatenate(keys), np.concatenate(values)
    order = np.lexsort((-values, keys))
    keys, values = keys[order], values[order]
    first = np.r_[True, keys[1:] != keys[:-1]] if keys.size else np.zeros(0, bool)
    return keys[first], values[first]


def _filtered(labels: np.ndarray, diameter: float, keep_border: bool) -> np.ndarray:
    """``labels`` without objects smaller than a disc of half the diameter (and those touching the border unless
    ``keep_border``), renumbered 1..n in reading order, as int32."""
    size = np.bincount(labels.ravel())
    drop = size < math.pi * (diameter / 4) ** 2
    if not keep_border:
        drop[np.unique(np.concatenate([labels[0], labels[-1], labels[:, 0], labels[:, -1]]))] = True
    drop[0] = True
    keep = np.flatnonzero(~drop)
    order = np.zeros(len(size), np.int32)
    first = ndimage.minimum(np.arange(labels.size).reshape(labels.shape), labels, keep) if len(keep) else []
    order[keep[np.argsort(first, kind="stable")]] = np.arange(1, len(keep) + 1, dtype=np.int32)
    return order[labels]
