"""The objects route, written once (the CLI's ``--labels``, the napari Labels workflow): a field and its
segmentation in, the items a method clusters out — crops for image methods, outer contours as landmark
shapes for shape methods — with the object table and the method's parameters for objects."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..api import object_params
from ..errors import InputError
from ..methods import get_method
from .crops import ROUTE_OPTIONS, TABLE_COLUMNS, objects_from_labels, shapes_from_labels


@dataclass
class ObjectItems:
    """What the route gives: ``items`` (N, size, size[, 3]) crops or (N, n_points, 2) contours, ``table``
    one row per item (``objects.TABLE_COLUMNS``; ``scale`` only with ``rescale``, ``angle`` only with
    ``orient``, neither for contours) and ``params``, the method's parameters for objects (``api.object_params``)."""

    items: np.ndarray
    table: dict
    params: dict


def objects_route(field, labels, method: str, params: dict | None = None, *, keep_border: bool = False,
                  size: int | None = None, channel: int | None = None, rescale: bool = False,
                  orient: bool | None = None, normalize: bool | None = None) -> ObjectItems:
    """Cut the objects of ``labels`` out of ``field`` (or trace their contours when ``method`` takes
    landmarks; ``field`` is then not read). ``orient`` / ``normalize`` left at None take the route's
    defaults (``objects.ROUTE_OPTIONS``); ``channel`` picks one channel of a multi-channel field."""
    params = object_params(method, dict(params or {}))
    if get_method(method).inputs == ("landmarks",):
        items, table = shapes_from_labels(labels, keep_border=keep_border)
        return ObjectItems(items, {c: table[c] for c in TABLE_COLUMNS if c not in ("scale", "angle")}, params)
    orient = ROUTE_OPTIONS["orient"] if orient is None else orient
    normalize = ROUTE_OPTIONS["normalize"] if normalize is None else normalize
    items, table = objects_from_labels(field, labels, size=size, keep_border=keep_border, channels=channel,
                                       rescale=rescale, orient=orient, normalize=normalize)
    unused = {name for name, used in (("scale", rescale), ("angle", orient)) if not used}
    return ObjectItems(items, {c: table[c] for c in TABLE_COLUMNS if c not in unused}, params)
