"""Objects from a segmentation, without napari: cut every labelled object out of a field of view
into a stack of equal crops (:func:`objects_from_labels`), or trace its outer contour as a landmark
shape (:func:`shapes_from_labels`), with one table row per object.

A *field* is one image ``Y×X``, ``Y×X×C`` or ``C×Y×X`` (any number of channels), or a time series
``T×Y×X`` / ``T×Y×X×C`` / ``T×C×Y×X``; its *labels* are an integer array ``Y×X`` (or ``T×Y×X`` for a
time series): 0 is background, every other value one object (ids need not be consecutive; an id is
an object per frame). Work streams object by object through the bounding boxes that
``scipy.ndimage.find_objects`` gives, one frame of labels in memory at a time, so a large field with
many objects needs little more memory than one frame of labels plus the output stack. Inputs are
never modified and nothing is random: the same input gives the same output.

The table is a dict of equal-length 1-D NumPy columns, in stack order (frame, then label id):
``label, frame, centroid_y, centroid_x, bbox_y0, bbox_x0, bbox_y1, bbox_x1`` (bounding box, end
exclusive, field pixels), ``area`` (pixels), ``touches_border``, ``scale`` (the zoom applied to the
object, 1 unless ``rescale``) and ``angle`` (the object's major axis in radians when ``orient``, else 0).
"""
from __future__ import annotations

import math

import numpy as np
from scipy import ndimage

from ..errors import InputError, whole_number

TABLE_COLUMNS = ("label", "frame", "centroid_y", "centroid_x", "bbox_y0", "bbox_x0", "bbox_y1", "bbox_x1",
                 "area", "touches_border", "scale", "angle")
#: The largest crop side chosen automatically; larger objects need ``size=`` or ``rescale=True``.
MAX_AUTO_SIZE = 128
#: The extraction options of the objects route (CLI ``--labels``, the napari Labels workflow) unless the
#: user says otherwise: each object turned to its major axis and divided by its mean brightness, so that
#: the warps (``invariances``, see ``api.object_params``) only refine pose and the kinds compare by
#: shape (docs/objects.md has the measurements behind this choice). The function's own defaults are off.
ROUTE_OPTIONS = {"orient": True, "normalize": True}
#: What ``field_objects`` may do with an object larger than the crop: set it aside (listed), or zoom it down to fit.
OVERSIZE = ("skip", "rescale")
#: A plate's default crop (:func:`plate_size`) holds this quantile of its objects' needed sides, times CROP_MARGIN.
CROP_QUANTILE = 0.99
CROP_MARGIN = 1.1
#: A field more than this share of whose objects (of more than one pixel) are larger than the crop fails whole: so
#: many are no outliers to leave out but a crop size or a mask that is wrong (an image given as its own mask).
MOST_SET_ASIDE = 0.5
#: An object whose pixels cover less than this share of its bounding box is scattered pixels, not an object (the same
#: rule: most objects of a mask so, and its field fails).
SCATTERED = 0.05
#: Label ids above this are renumbered before ``find_objects`` (whose list is as long as the largest id).
_MAX_DIRECT_ID = 1 << 22


# ---- layout of the field -------------------------------------------------------------------------
class _Field:
    """Read access to a field (NumPy, memory-mapped, dask, zarr) in (frame, rows, cols) windows,
    returned channels-last (h, w, C) as NumPy; nothing is read until asked for."""

    def __init__(self, image, labels, channel_axis, channels):
        self.image = image
        self.labels = labels
        ishape = tuple(int(s) for s in image.shape)
        lshape = tuple(int(s) for s in labels.shape)
        self.time = len(lshape) == 3
        yx = lshape[-2:]
        self.height, self.width = yx
        self.frames = lshape[0] if self.time else 1
        spatial = len(lshape)                      # dimensions the image shares with the labels
        extra = len(ishape) - spatial
        lead = lshape[:-2]                         # () or (T,)
        if extra == 0:
            if ishape != lshape:
                raise _mismatch(ishape, lshape)
            self.caxis = None
        elif extra == 1:
            last = ishape[:-1] == lshape
            first = ishape[:len(lead)] == lead and ishape[len(lead) + 1:] == yx
            if channel_axis is not None:
                want = _channel_axis(channel_axis, len(ishape), len(lead))
                ok = last if want == len(ishape) - 1 else first
                if not ok:
                    raise InputError(f"The image has shape {ishape} and the labels {lshape}: with channel_axis={channel_axis} "
                                     f"the image's other axes must equal the labels' shape.")
                self.caxis = want
            elif last:
                self.caxis = len(ishape) - 1       # Y×X×C (T×Y×X×C) wins when both would fit
            elif first:
                self.caxis = len(lead)             # C×Y×X (T×C×Y×X)
            else:
                raise _mismatch(ishape, lshape)
        else:
            raise _mismatch(ishape, lshape)
        n_channels = ishape[self.caxis] if self.caxis is not None else 1
        self.squeeze = self.caxis is None
        self.channels = None
        if channels is not None:
            if self.caxis is None:
                raise InputError("channels= was given but the image has no channel axis: leave channels out for a grey image.")
            picked = np.atleast_1d(np.asarray(channels))
            if picked.dtype.kind not in "iu" or picked.ndim != 1 or len(picked) == 0 or picked.min() < -n_channels \
                    or picked.max() >= n_channels:
                raise InputError(f"channels={channels!r} does not name channels of an image with {n_channels}: give an index "
                                 f"or a list of indices from 0 to {n_channels - 1}.")
            self.channels = picked % n_channels
            self.squeeze = np.ndim(channels) == 0
            n_channels = len(self.channels)
        self.n_channels = n_channels

    def window(self, frame: int, rows: slice, cols: slice) -> np.ndarray:
        """Image pixels of one frame in a window inside the field, as (h, w, C)."""
        index: list = [frame] if self.time else []
        if self.caxis is None:
            block = np.asarray(self.image[tuple(index + [rows, cols])])[..., None]
        elif self.caxis == len(index):               # channels before Y, X
            block = np.moveaxis(np.asarray(self.image[tuple(index + [slice(None), rows, cols])]), 0, -1)
        else:
            block = np.asarray(self.image[tuple(index + [rows, cols])])
        if self.channels is not None:
            block = block[..., self.channels]
        return block

    def label_frame(self, frame: int) -> np.ndarray:
        lab = np.asarray(self.labels[frame] if self.time else self.labels)
        return lab.view(np.uint8) if lab.dtype == bool else lab


def _channel_axis(axis, ndim: int, n_lead: int) -> int:
    allowed = {n_lead, ndim - 1}
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)) or (axis % ndim) not in allowed:
        raise InputError(f"channel_axis={axis!r} is not possible here: the channels are axis {n_lead} (before Y×X) "
                         f"or axis {ndim - 1} (last).")
    return int(axis) % ndim


def _mismatch(ishape, lshape) -> InputError:
    return InputError(f"The labels have shape {lshape} but the image {ishape}: give labels of the image's Y×X size "
                      f"(T×Y×X for a time series), the image optionally with one channel axis more.")


def labels_fit(image, labels) -> bool:
    """Whether ``labels`` (by shape) segment ``image``: a layout :func:`objects_from_labels` accepts."""
    try:
        _Field(image, labels, None, None)
    except InputError:
        return False
    return len(labels.shape) in (2, 3)


def crop_channels(image, labels, channel_axis: int | None = None, channels=None) -> int | None:
    """How many channels this field's crops have (None: grey crops without a channel axis), from shapes alone."""
    _check_image(image)
    _check_labels(labels)
    field = _Field(image, labels, channel_axis, channels)
    return None if field.squeeze else field.n_channels


def _check_array(arr, name: str):
    if not hasattr(arr, "shape") or not hasattr(arr, "dtype"):
        raise InputError(f"The {name} is a {type(arr).__name__}, not an array: pass a NumPy, memory-mapped or dask array.")


def _check_labels(labels):
    _check_array(labels, "labels")
    kind = np.dtype(labels.dtype).kind
    if kind == "f":
        raise InputError(f"The labels have dtype {labels.dtype} (floating point): a Labels layer holds whole numbers, "
                         f"0 for background and one id per object, so pass an integer array.")
    if kind not in "iub":
        raise InputError(f"The labels have dtype {labels.dtype}: pass integer object ids (0 = background).")
    if labels.ndim not in (2, 3):
        raise InputError(f"The labels have {labels.ndim} dimensions: give Y×X labels, or T×Y×X for a time series.")
    if min(labels.shape) == 0:
        raise InputError(f"The labels have shape {tuple(labels.shape)}, with no pixels: give a segmented field.")


def _check_image(image):
    _check_array(image, "image")
    if np.dtype(image.dtype).kind not in "biuf":
        raise InputError(f"The image has dtype {image.dtype}: give a numeric image (uint8, uint16 or float).")


# ---- pass 1: the table ---------------------------------------------------------------------------
def _frame_objects(lab: np.ndarray):
    """(ids ascending, bounding-box slices) of the objects present in one frame of labels."""
    if lab.size and lab.min() < 0:
        raise InputError(f"The labels hold a negative id ({int(lab.min())}): use 0 for background and positive object ids.")
    top = int(lab.max()) if lab.size else 0
    if top == 0:
        return [], []
    if top > _MAX_DIRECT_ID:                        # sparse huge ids: renumber 1..n for find_objects
        ids, inverse = np.unique(lab, return_inverse=True)
        if ids[0] == 0:
            ids, work = ids[1:], inverse.reshape(lab.shape)
        else:
            work = inverse.reshape(lab.shape) + 1
        return [int(i) for i in ids], ndimage.find_objects(work.astype(np.int32))
    slices = ndimage.find_objects(lab)
    present = [(i + 1, s) for i, s in enumerate(slices) if s is not None]
    return [p[0] for p in present], [p[1] for p in present]


def _measure(field: _Field):
    """One pass over the frames: per object its id, frame, centroid, bbox, area and border contact
    (the table), and where to find it again: (frame, bounding-box slice, id)."""
    cols = {c: [] for c in TABLE_COLUMNS if c not in ("scale", "angle")}
    where = []
    for t in range(field.frames):
        lab = field.label_frame(t)
        for obj_id, sl in zip(*_frame_objects(lab)):
            y0, y1, x0, x1 = sl[0].start, sl[0].stop, sl[1].start, sl[1].stop
            mask = lab[sl] == obj_id
            rows, colsum = mask.sum(1), mask.sum(0)
            area = int(rows.sum())
            cy = y0 + float(rows @ np.arange(y1 - y0)) / area
            cx = x0 + float(colsum @ np.arange(x1 - x0)) / area
            for name, value in (("label", obj_id), ("frame", t), ("centroid_y", cy), ("centroid_x", cx),
                                ("bbox_y0", y0), ("bbox_x0", x0), ("bbox_y1", y1), ("bbox_x1", x1), ("area", area),
                                ("touches_border", y0 == 0 or x0 == 0 or y1 == field.height or x1 == field.width)):
                cols[name].append(value)
            where.append((t, sl, obj_id))
    dtypes = {"centroid_y": np.float64, "centroid_x": np.float64, "touches_border": bool}
    table = {c: np.asarray(v, dtype=dtypes.get(c, np.int64)) for c, v in cols.items()}
    return table, where


def _select(table, where, keep_border: bool, what: str, least: int = 2):
    """The table rows and places of the objects kept (border objects only with ``keep_border``);
    fewer than ``least`` objects is an InputError."""
    n_all = len(where)
    if n_all == 0 and least > 0:
        raise InputError("The labels hold no objects (every pixel is 0): segment the image first, or pick the right Labels layer.")
    keep = np.ones(n_all, bool) if keep_border else ~table["touches_border"]
    n_keep = int(keep.sum())
    if n_keep < least:
        cut = n_all - n_keep
        why = f" after leaving out {cut} that touch{'es' if cut == 1 else ''} the image border (keep_border=True, or --keep-border, keeps them)" if cut else ""
        raise InputError(f"The segmentation gives {n_keep} object{'' if n_keep == 1 else 's'}{why}: {what} needs at least 2 objects.")
    idx = np.flatnonzero(keep)
    return {c: v[idx] for c, v in table.items()}, [where[i] for i in idx]


def _load_frames(field: _Field, where):
    """Iterate (position, frame labels, frame, slice, id) frame by frame (one frame in memory)."""
    current, lab = None, None
    for pos, (t, sl, obj_id) in enumerate(where):
        if t != current:
            current, lab = t, field.label_frame(t)
        yield pos, lab, t, sl, obj_id


# ---- objects -------------------------------------------------------------------------------------
def objects_from_labels(image, labels, size: int | None = None, *, keep_border: bool = False,
                        keep_context: bool = False, rescale: bool = False, orient: bool = False,
                        normalize: bool = False, margin: int = 1,
                        fill: float = 0, channel_axis: int | None = None, channels=None, max_size: int = MAX_AUTO_SIZE):
    """Cut every labelled object out of ``image`` into a stack of ``size``×``size`` crops.

    Each crop is centred on the object's centroid and keeps the image's dtype (float32 with
    ``normalize``). Pixels outside the object (other objects included) are set to ``fill`` unless
    ``keep_context``; pixels beyond the field's edge are always ``fill``. Objects touching the field's border are left out unless
    ``keep_border``. By default the crop is a plain copy of the field around the centroid rounded to
    a pixel. Two options resample it instead (bilinear image, mask = its bilinear 0.5 level, about the
    exact centroid): ``rescale`` zooms each object so that its outline (the outer edge of its
    farthest pixel) lies ``margin`` pixels inside the crop, and ``orient`` turns it so that its major
    principal axis points along +x, its longer tail to the right (the convention of
    :func:`shapes_from_labels`); the table's ``scale`` and ``angle`` columns record the zoom and the
    axis's direction in the field (radians from +x towards +y, y pointing down). ``normalize``
    divides each crop (per channel) by the mean of its object's pixels, so that objects of different
    brightness compare by their pattern; the stack is then float32.

    ``size``: the crop side; by default the smallest multiple of 4 that holds every kept object with
    ``margin`` pixels around it (the median object when ``rescale``), at most ``max_size``.
    ``channel_axis`` settles which axis holds channels when the shapes leave it open (default: last
    if it fits, else the one before Y×X); ``channels`` picks channels (an int drops the channel axis).

    Returns ``(stack, table)``: stack (N, size, size) for grey images or (N, size, size, C), table
    a dict of columns (see the module doc), one row per crop in stack order (frame, then label id).
    """
    stack, _, table, _ = _cut(image, labels, size, keep_border, keep_context, rescale, orient, normalize, margin, fill,
                              channel_axis, channels, max_size, least=2, with_masks=False)
    return stack, table


def field_objects(image, labels, size: int, *, keep_border: bool = False, keep_context: bool = False,
                  rescale: bool = False, orient: bool = False, normalize: bool = False, margin: int = 1, fill: float = 0,
                  channel_axis: int | None = None, channels=None, oversize: str = "skip"):
    """One field's objects at a crop side fixed beforehand, with their masks, any number of them (none too).

    The per-field step of an object store (:mod:`ticlust.plate.store`), where every field of a plate is cut at
    the plate's one crop size and an empty field is not an error, nor an object that cannot be cut: ``oversize``
    "skip" sets aside the objects larger than the crop, "rescale" zooms each of them down to the crop (its
    ``scale`` below 1); both set aside objects of one pixel. The other objects give the same crops and table as
    :func:`objects_from_labels` with the same options. Returns ``(stack, masks, table, skipped)``: masks (N, size,
    size) bool, the pixels of each crop that belong to its object; ``skipped`` the objects set aside, as columns
    (the table's, ``needs``: the crop side each needs, ``reason``: ``larger than the S×S crop`` or ``one pixel``).
    """
    if oversize not in OVERSIZE:
        raise InputError(f"oversize={oversize!r} is not known: choose 'skip' (objects larger than the crop are left out "
                         "and listed) or 'rescale' (they are zoomed down to the crop).")
    return _cut(image, labels, size, keep_border, keep_context, rescale, orient, normalize, margin, fill,
                channel_axis, channels, MAX_AUTO_SIZE, least=0, with_masks=True, oversize=oversize)


def crop_needs(labels, *, keep_border: bool = False, rescale: bool = False, orient: bool = False,
               margin: int = 1) -> np.ndarray:
    """Per object of ``labels`` (in table order) the crop side it needs: what :func:`auto_size` decides from.

    Reads the labels only, so a plate's one crop size can be chosen from its masks before any image is read.
    """
    _check_labels(labels)
    field = _Field(labels, labels, None, None)
    table, where = _measure(field)
    table, where = _select(table, where, keep_border, "clustering", least=0)
    return _needs(field, table, where, rescale or orient, False, whole_number(margin, "margin", 0))[0]


def auto_size(needs: np.ndarray, rescale: bool, max_size: int = MAX_AUTO_SIZE) -> int:
    """The default crop side for objects that need ``needs`` pixels: the largest (the median with
    ``rescale``, which zooms every object to the crop) rounded up to a multiple of 4, at most ``max_size``."""
    return min(max_size, _round4(float(np.median(needs) if rescale else np.max(needs))))


def plate_size(needs: np.ndarray, rescale: bool, max_size: int = MAX_AUTO_SIZE) -> int:
    """The default crop side of a plate's objects that need ``needs`` pixels: a robust statistic, not the largest
    object (one clump would set every crop): the :data:`CROP_QUANTILE` quantile of the needs times
    :data:`CROP_MARGIN`, at most the largest need, rounded up to a multiple of 4 and at most ``max_size``; the
    few objects above it are skipped or zoomed down (``field_objects``' ``oversize``). With ``rescale`` the median,
    as :func:`auto_size`."""
    needs = np.asarray(needs, np.float64)
    if rescale or needs.size == 0:
        return auto_size(needs, rescale, max_size)
    robust = float(np.quantile(needs, CROP_QUANTILE, method="higher")) * CROP_MARGIN   # a value of the data: no clump
    # is averaged in, and below 100 objects it is the largest one
    return min(max_size, _round4(min(float(np.max(needs)), robust)))


def _needs(field, table, where, resample: bool, orient: bool, margin: int):
    """(need, radius, angle) per object: the crop side it needs with ``margin`` free pixels around it and,
    when resampling, its outline's reach from the centroid and its axis angle (see :func:`_pose`)."""
    cy, cx = table["centroid_y"], table["centroid_x"]
    if resample:
        radius, angle = _pose(field, where, cy, cx, orient)
        return 2 * (radius + margin), radius, angle
    ry, rx = np.rint(cy).astype(np.int64), np.rint(cx).astype(np.int64)
    need = 2 * np.max(np.stack([ry - table["bbox_y0"], table["bbox_y1"] - ry,
                                rx - table["bbox_x0"], table["bbox_x1"] - rx]), axis=0) + 2 * margin
    return need, None, np.zeros(len(where))


def _cut(image, labels, size, keep_border, keep_context, rescale, orient, normalize, margin, fill, channel_axis,
         channels, max_size, least: int, with_masks: bool, oversize: str | None = None):
    """objects_from_labels' work: (stack, masks or None, table, skipped), refusing fewer than ``least`` objects.
    ``oversize`` None refuses objects larger than the crop; "skip" / "rescale" set them aside or zoom them down
    (:func:`field_objects`), and set aside objects of one pixel; ``skipped`` lists those set aside."""
    _check_image(image)
    _check_labels(labels)
    field = _Field(image, labels, channel_axis, channels)
    margin = whole_number(margin, "margin", 0)
    max_size = whole_number(max_size, "max_size", 4)
    if size is not None:
        size = whole_number(size, "size", 4)
    dtype = np.dtype(image.dtype)
    fill_value = _fill(fill, dtype)
    table, where = _measure(field)
    table, where = _select(table, where, keep_border, "clustering", least)
    resample = rescale or orient
    need, radius, angle = _needs(field, table, where, resample, orient, margin)
    side = size or auto_size(need, rescale, max_size)
    too_big = _too_big(need, radius, side, margin, rescale, resample)
    if oversize is None and too_big.any():
        _refuse_too_big(table, need, too_big, side, margin, field.time)
    scale = (side / 2 - margin) / radius if rescale else np.ones(len(where))
    table, where, scale, angle, skipped = _set_aside(field, table, where, need, too_big, scale, angle, side, margin,
                                                     oversize)
    table["scale"] = np.asarray(scale, np.float64)
    table["angle"] = np.asarray(angle, np.float64)
    stack, masks = _crops(field, table, where, side, resample, keep_context, normalize, fill_value, dtype, with_masks)
    return stack, masks, table, skipped


def _too_big(need, radius, side: int, margin: int, rescale: bool, resample: bool) -> np.ndarray:
    """Per object: whether it is larger than a ``side`` crop (never, when every object is zoomed to the crop)."""
    if rescale:
        return np.zeros(len(need), bool)
    if resample:
        return radius > side / 2 + 1e-9
    return need - 2 * margin > side


def _refuse_too_big(table, need, too_big, side: int, margin: int, time: bool, of: int | None = None) -> None:
    """The one sentence for objects larger than the crop, naming the largest; ``of``: the objects they are among, when
    they are too many to leave out."""
    big = np.flatnonzero(too_big)
    worst = big[np.argmax(need[big])]
    where_txt = f" (frame {int(table['frame'][worst])})" if time else ""
    count = f"{len(big)} of the {of} objects are" if of else f"{len(big)} object{'s are' if len(big) > 1 else ' is'}"
    fix = (", too many to leave out: give a larger crop size, rescale, or check that the mask is a label image (0 "
           "background, one id per object)." if of else ": give a larger size, rescale=True, or remove such objects "
           "from the labels.")
    raise InputError(f"{count} larger than the {side}×{side} crop (label {int(table['label'][worst])}{where_txt} needs "
                     f"{int(math.ceil(need[worst] - 2 * margin))} px){fix}")


def _refuse_scattered(table) -> None:
    """Refuse a mask most of whose objects (of three pixels or more) are pixels scattered over a box twenty times their
    area: no segmentation but an image (an image and its mask given the other way round)."""
    box = (table["bbox_y1"] - table["bbox_y0"]) * (table["bbox_x1"] - table["bbox_x0"])
    sized = table["area"] >= 3
    scattered = sized & (table["area"] < SCATTERED * box)
    if scattered.sum() > MOST_SET_ASIDE * sized.sum():
        worst = np.flatnonzero(scattered)[np.argmax(box[scattered])]
        raise InputError(f"The mask is no label image: {int(scattered.sum())} of its {int(sized.sum())} objects are "
                         f"pixels scattered over the field (label {int(table['label'][worst])}: "
                         f"{int(table['area'][worst])} pixels over a {int(table['bbox_y1'][worst] - table['bbox_y0'][worst])}"
                         f"×{int(table['bbox_x1'][worst] - table['bbox_x0'][worst])} box); give the segmentation (0 "
                         "background, one id per object), not an image.")


def _set_aside(field, table, where, need, too_big, scale, angle, side: int, margin: int, oversize):
    """What ``oversize`` does with the objects that cannot be cut as they are: "skip" sets aside those larger than
    the crop, "rescale" zooms them down to fit it (about their centroid, as ``rescale`` does); both set aside objects
    of one pixel (no shape to cut). When most objects are larger than the crop the field is refused (InputError).
    Returns the kept objects' table, places, scale and angle, and the set-aside
    objects' rows (the table's columns, ``needs``: the crop side they need, ``reason``)."""
    if oversize is None:
        return table, where, scale, angle, None
    tiny = table["area"] <= 1
    _refuse_scattered(table)
    if np.sum(too_big & ~tiny) > MOST_SET_ASIDE * np.sum(~tiny):      # not outliers: a wrong crop size or mask
        _refuse_too_big(table, need, too_big & ~tiny, side, margin, field.time, of=int(np.sum(~tiny)))
    reasons = np.where(tiny, "one pixel", np.where(too_big, f"larger than the {side}×{side} crop", ""))
    if oversize == "rescale":
        zoom = np.flatnonzero(too_big & ~tiny)
        if len(zoom):
            reach, _ = _pose(field, [where[i] for i in zoom], table["centroid_y"][zoom], table["centroid_x"][zoom], False)
            scale = np.asarray(scale, np.float64).copy()
            scale[zoom] = (side / 2 - margin) / reach
        reasons = np.where(tiny, reasons, "")
    out = reasons != ""
    skipped = {c: v[out] for c, v in table.items()}
    skipped["needs"] = np.ceil(need[out] - 2 * margin).astype(np.int64)
    skipped["reason"] = reasons[out].astype(str)
    keep = np.flatnonzero(~out)
    kept = {c: v[keep] for c, v in table.items()}
    return kept, [where[i] for i in keep], np.asarray(scale)[keep], np.asarray(angle)[keep], skipped


def _crops(field, table, where, side: int, resample: bool, keep_context: bool, normalize: bool, fill_value, dtype,
           with_masks: bool):
    """Cut every object in ``where`` (its row of ``table`` gives centroid, scale, angle): (stack, masks or None). An
    object is resampled when every object is (``resample``) or when it alone is zoomed (scale other than 1)."""
    n = len(where)
    cy, cx, scale, angle = table["centroid_y"], table["centroid_x"], table["scale"], table["angle"]
    ry, rx = np.rint(cy).astype(np.int64), np.rint(cx).astype(np.int64)
    shape = (n, side, side) if field.squeeze else (n, side, side, field.n_channels)
    out = np.empty(shape, dtype=np.float32 if normalize else dtype)
    masks = np.empty((n, side, side), bool) if with_masks else None
    for pos, lab, t, sl, obj_id in _load_frames(field, where):
        if resample or scale[pos] != 1:
            crop, obj = _resampled(field, lab, t, obj_id, cy[pos], cx[pos], scale[pos], angle[pos], side, keep_context,
                                   fill_value, dtype)
        else:
            crop, obj = _plain(field, lab, t, obj_id, int(ry[pos]), int(rx[pos]), side, keep_context, fill_value, dtype)
        if dtype.kind == "f" and not np.isfinite(crop).all():
            raise InputError(f"The image holds NaN or infinite values in object {obj_id}"
                             f"{f' (frame {t})' if field.time else ''}: replace them before cutting objects out.")
        if normalize:
            crop = _normalized(crop, obj, f"object {obj_id}{f' (frame {t})' if field.time else ''}")
        out[pos] = crop[..., 0] if field.squeeze else crop
        if with_masks:
            masks[pos] = obj
    return out, masks


#: Crops whose largest magnitude lies outside [FLOAT32_SAFE[0], FLOAT32_SAFE[1]] are normalised in float64: in float32
#: their values or their mean would overflow to inf (then NaN) or underflow to 0.
FLOAT32_SAFE = (1e-30, 1e30)


def _normalized(crop: np.ndarray, obj: np.ndarray, what: str) -> np.ndarray:
    """``crop`` (h, w, C) divided by its object's mean brightness per channel (a channel whose mean is not positive
    is left as it is), as float32. Values near float32's limits (1e300, 1e-300 in a float64 image) are scaled by
    their peak and divided in float64 first, so the crop stays finite; a crop whose ratios still do not fit
    float32 is refused."""
    peak = float(np.max(np.abs(crop))) if crop.size else 0.0
    if peak == 0 or FLOAT32_SAFE[0] <= peak <= FLOAT32_SAFE[1]:
        crop = crop.astype(np.float32)
        level = crop[obj].mean(axis=0) if obj.any() else np.zeros(crop.shape[-1], np.float32)
        crop /= np.where(level > 0, level, 1).astype(np.float32)
        return crop
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        wide = crop.astype(np.float64) / peak
        level = wide[obj].mean(axis=0) if obj.any() else np.zeros(crop.shape[-1])
        wide = np.where(level > 0, wide / np.where(level > 0, level, 1), wide * peak)
    if not (np.abs(wide) <= np.finfo(np.float32).max).all():
        raise InputError(f"The values of {what} span too wide a range to be normalised in float32: rescale the image "
                         "(or cut objects with --no-normalize).")
    return wide.astype(np.float32)


def _round4(n: int | float) -> int:
    return max(8, int(math.ceil(n / 4.0)) * 4)


def _fill(fill, dtype: np.dtype):
    if not isinstance(fill, (int, float, np.integer, np.floating)) or isinstance(fill, bool) or not np.isfinite(fill):
        raise InputError(f"fill={fill!r} must be a finite number.")
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        if not info.min <= fill <= info.max or fill != int(fill):
            raise InputError(f"fill={fill!r} does not fit the image's dtype {dtype}: give a whole number from {info.min} to {info.max}.")
    return fill


def _plain(field, lab, t, obj_id, ry, rx, side, keep_context, fill, dtype):
    """An integer-centred crop: the window [ry - side//2, ...) copied, the object masked."""
    y0, x0 = ry - side // 2, rx - side // 2
    fy0, fx0 = max(y0, 0), max(x0, 0)
    fy1, fx1 = min(y0 + side, field.height), min(x0 + side, field.width)
    crop = np.full((side, side, field.n_channels), fill, dtype=dtype)
    obj = np.zeros((side, side), bool)
    if fy1 <= fy0 or fx1 <= fx0:
        return crop, obj
    rows, cols = slice(fy0, fy1), slice(fx0, fx1)
    block = field.window(t, rows, cols)
    inner = (slice(fy0 - y0, fy1 - y0), slice(fx0 - x0, fx1 - x0))
    mask = lab[rows, cols] == obj_id
    obj[inner] = mask
    if keep_context:
        crop[inner] = block
    else:
        crop[inner][mask] = block[mask]
    return crop, obj


def _pose(field, where, cy, cx, orient: bool):
    """Per object: its outline's reach from the centroid (farthest pixel centre + 0.5 px) and, when
    ``orient``, the direction of its major principal axis towards its longer tail (radians)."""
    radius, angle = np.empty(len(where)), np.zeros(len(where))
    for pos, lab, t, sl, obj_id in _load_frames(field, where):
        ys, xs = np.nonzero(lab[sl] == obj_id)
        dy, dx = ys + sl[0].start - cy[pos], xs + sl[1].start - cx[pos]
        radius[pos] = np.sqrt((dy ** 2 + dx ** 2).max()) + 0.5
        if orient:
            angle[pos] = _axis_angle(dx, dy)
    return radius, angle


def _axis_angle(dx: np.ndarray, dy: np.ndarray) -> float:
    """Direction (radians, in (x, y)) of the major principal axis of centred pixel offsets, pointing to
    the side with the positive third moment (the longer tail); ties go to +x, then +y."""
    d = np.stack([dx, dy], 1).astype(np.float64)
    _, v = np.linalg.eigh(d.T @ d / len(d))
    axis = v[:, 1]
    skew = float(((d @ axis) ** 3).mean())
    if abs(skew) <= 1e-9 * max(1.0, float((d ** 2).sum(1).mean()) ** 1.5):
        skew = 0.0
    if skew < 0 or (skew == 0 and (axis[0] < -1e-12 or (abs(axis[0]) <= 1e-12 and axis[1] < 0))):
        axis = -axis
    return float(np.arctan2(axis[1], axis[0]))


def _resampled(field, lab, t, obj_id, cy, cx, scale, angle, side, keep_context, fill, dtype):
    """A crop about the exact centroid: crop +x along ``angle`` in the field, zoomed by ``scale``."""
    half = (side - 1) / 2.0
    reach = half * math.sqrt(2) / scale + 2                      # field pixels the crop can see
    y0, y1 = max(int(math.floor(cy - reach)), 0), min(int(math.ceil(cy + reach)) + 1, field.height)
    x0, x1 = max(int(math.floor(cx - reach)), 0), min(int(math.ceil(cx + reach)) + 1, field.width)
    crop = np.full((side, side, field.n_channels), fill, dtype=dtype)
    if y1 <= y0 or x1 <= x0:
        return crop, np.zeros((side, side), bool)
    v, u = np.mgrid[0:side, 0:side].astype(np.float64) - half
    c, s = math.cos(angle) / scale, math.sin(angle) / scale
    coords = np.stack([(cy - y0) + s * u + c * v, (cx - x0) + c * u - s * v])
    seen = ndimage.map_coordinates(np.ones((y1 - y0, x1 - x0)), coords, order=1, mode="constant", cval=0.0) >= 0.5
    mask = (lab[y0:y1, x0:x1] == obj_id).astype(np.float64)
    obj = seen & (ndimage.map_coordinates(mask, coords, order=1, mode="constant", cval=0.0) >= 0.5)
    if not obj.any():                  # an object of a pixel or two (or a field of one) falls between the samples:
        cover = ndimage.map_coordinates(mask, coords, order=1, mode="grid-constant", cval=0.0)
        obj = cover >= max(cover.max(), 1e-9) - 1e-9       # keep the samples it covers most: no crop without a mask
    keep = seen if keep_context else obj
    block = field.window(t, slice(y0, y1), slice(x0, x1))
    for ch in range(field.n_channels):
        vals = ndimage.map_coordinates(block[..., ch].astype(np.float64), coords, order=1, mode="nearest")
        if dtype.kind in "iu":
            info = np.iinfo(dtype)
            vals = np.clip(np.rint(vals), info.min, info.max)
        crop[..., ch][keep] = vals[keep].astype(dtype)
    return crop, obj


# ---- shapes --------------------------------------------------------------------------------------
def shapes_from_labels(labels, n_points: int = 64, *, keep_border: bool = False, start: str = "major-axis"):
    """Each object's outer contour as ``n_points`` landmarks equally spaced in arc length.

    The contour is the 0.5 iso-line of the object's mask (holes filled; the largest piece when the
    object has several), traced by marching squares. Every contour runs the same way round — positive
    signed area in (x, y), i.e. clockwise on screen where y points down — and starts at a point
    defined the same way for every object: where the ray from the object's centroid leaves the
    contour (its outermost crossing), the ray pointing along the mask's major principal axis on the
    side of its longer tail (third moment ≥ 0) for ``start="major-axis"``, so that the start turns
    with the object, or towards +x for ``start="east"`` (fixed in the field).

    Returns ``(landmarks, table)``: landmarks (N, n_points, 2) float64 in (x, y) field pixels (the
    convention of :mod:`ticlust.io.landmarks`), ready for ``shape-kmeans``; table as for
    :func:`objects_from_labels`.
    """
    _check_labels(labels)
    n_points = whole_number(n_points, "n_points", 3)
    if start not in ("major-axis", "east"):
        raise InputError(f"start={start!r} is not known: choose 'major-axis' or 'east'.")
    field = _Field(labels, labels, None, None)
    table, where = _measure(field)
    table, where = _select(table, where, keep_border, "shape clustering")
    table["scale"], table["angle"] = np.ones(len(where)), np.zeros(len(where))
    out = np.empty((len(where), n_points, 2))
    for pos, lab, t, sl, obj_id in _load_frames(field, where):
        mask = lab[sl] == obj_id
        out[pos] = contour_landmarks(mask, n_points, start) + np.array([sl[1].start, sl[0].start], float)
    return out, table


def contour_landmarks(mask: np.ndarray, n_points: int, start: str = "major-axis") -> np.ndarray:
    """The outer contour of a binary mask as (n_points, 2) (x, y) points in the mask's pixel frame."""
    from skimage.measure import find_contours

    filled = ndimage.binary_fill_holes(mask)
    padded = np.pad(filled, 1).astype(np.float64)
    contours = find_contours(padded, 0.5)
    poly = max(contours, key=lambda c: abs(_signed_area(c[:, ::-1])))[:, ::-1] - 1.0   # (x, y), unpadded
    if np.allclose(poly[0], poly[-1]):
        poly = poly[:-1]
    if _signed_area(poly) < 0:
        poly = poly[::-1]
    ys, xs = np.nonzero(filled)
    centre = np.array([xs.mean(), ys.mean()])
    if start == "east":
        direction = np.array([1.0, 0.0])
    else:
        theta = _axis_angle(xs - centre[0], ys - centre[1])
        direction = np.array([math.cos(theta), math.sin(theta)])
    poly = _start_on_ray(poly, centre, direction)
    closed = np.vstack([poly, poly[:1]])
    seg = np.sqrt((np.diff(closed, axis=0) ** 2).sum(1))
    arc = np.concatenate([[0.0], np.cumsum(seg)])
    at = np.arange(n_points) * (arc[-1] / n_points)
    return np.stack([np.interp(at, arc, closed[:, 0]), np.interp(at, arc, closed[:, 1])], 1)


def _start_on_ray(poly: np.ndarray, centre: np.ndarray, direction: np.ndarray) -> np.ndarray:
    """The closed polygon re-started where the ray from ``centre`` along ``direction`` leaves it
    (the outermost crossing, interpolated on its edge); the farthest vertex along the ray if none."""
    rel = poly - centre
    side = rel[:, 0] * direction[1] - rel[:, 1] * direction[0]      # which side of the ray's line
    nxt = np.roll(side, -1)
    cross = np.flatnonzero((side <= 0) != (nxt <= 0))
    best, at = -np.inf, None
    for i in cross.tolist():
        t = side[i] / (side[i] - nxt[i])
        point = poly[i] + t * (poly[(i + 1) % len(poly)] - poly[i])
        along = float((point - centre) @ direction)
        if along > best:
            best, at = along, (i, point)
    if at is None or best <= 0:
        return np.roll(poly, -int(np.argmax(rel @ direction)), axis=0)
    i, point = at
    rest = np.roll(poly, -(i + 1), axis=0)                            # vertices after the crossing, in order
    return np.vstack([point[None], rest])


def _signed_area(xy: np.ndarray) -> float:
    x, y = xy[:, 0], xy[:, 1]
    return 0.5 * float(np.dot(x, np.roll(y, -1)) - np.dot(np.roll(x, -1), y))


def table_rows(table: dict) -> list[dict]:
    """The table as a list of row dicts (plain Python values), e.g. for a CSV or a DataFrame."""
    names = list(table)
    return [{c: table[c][i].item() for c in names} for i in range(len(table[names[0]]))]
