"""The object map of a result saved before maps were made: ``compute_map(result, data)`` learns it on the items the
result was fitted on (a stack, landmarks, or the fit sample of an object store), as a fit learns it now
(``Method.with_map``). Predictions made with the returned result carry map_x and map_y."""
from __future__ import annotations

import dataclasses
import os

import numpy as np

from ..errors import InputError


def compute_map(result, data, device: str = "auto", seed: int | None = None):
    """A copy of ``result`` (a ClusteringResult or its file) with its object map: the model in its extras and every
    fitted item's embedding and place (``result.embedding``, ``result.map``), learned on ``data``, the items it was
    fitted on — the same stack or landmarks, or the object store it was fitted on (its fit sample is read back).
    ``seed``: the map's draws (default: the fit's seed). Save the copy and predict again to give a store's
    predictions their map columns."""
    from ..api import check_result, fitted_scale, item_count, load_result, mapped, prepare
    from ..core.validation import check_same_items, check_seed
    from ..methods import get_method
    from .run import check_result_for_store, is_store, result_points, store_items
    from .store import ObjectStore
    from ..core.execute import Job, execute

    result = load_result(result) if isinstance(result, (str, os.PathLike)) else result
    check_result(result)
    spec = get_method(result.method)
    if isinstance(data, ObjectStore) or (isinstance(data, (str, os.PathLike)) and is_store(data)):
        store = data if isinstance(data, ObjectStore) else ObjectStore(data)
        sample = result.config.get("fit_sample")
        if sample is None:
            raise InputError("This result was not fitted on an object store: give the stack (or landmarks) it was "
                             "fitted on.")
        check_result_for_store(result, store)
        landmarks = spec.inputs == ("landmarks",)
        data = store_items(store, np.asarray(sample["index"], np.int64), landmarks,
                           result_points(result) if landmarks else 0)
    items = fitted_scale(prepare(data, spec), result)
    if spec.inputs != ("landmarks",):
        check_same_items(items, np.shape(result.prototypes)[1:], "data's items", "give the data it was fitted on")
    if item_count(items) != result.n:
        raise InputError(f"The data has {item_count(items)} items but the result has {result.n}: give the data it "
                         "was fitted on.")
    out = dataclasses.replace(result, extras=dict(result.extras))
    seed = int(result.config.get("seed", 0)) if seed is None else check_seed(seed)
    return execute(Job(lambda _dev, _seed: out, device=device, losses=False, stamp=False,
                       after=mapped(spec, items, seed)))


__all__ = ["compute_map"]
