"""``ticlust.predict``, the one entry point that assigns new items with a fitted result, whatever they are: an
object store (part by part, :mod:`.run`), a field with its labels (its objects cut as the result's were,
:mod:`.view`), or a stack (:func:`ticlust.api.predict`). It sits above both plate modules so that neither
imports the other's caller."""
from __future__ import annotations

import os

import numpy as np

from ..errors import InputError
from .run import is_store, predict_store
from .store import ObjectStore, Reporter
from .view import APPLY_BLOCK, assign_objects


def predict(result, data, device: str = "auto", batch_size: int | None = None, progress=None, *,
            labels=None, workers: int | None = None, scheduler: str | None = None, client=None,
            aligned: bool | None = None, csv=None, parquet=None):
    """``ticlust.predict``: new items assigned with a fitted result (a ClusteringResult or its file), routed by
    what ``data`` is:

    - an object store (its path or an ObjectStore): every object, part by part into the store
      (:func:`~ticlust.plate.run.predict_store`; on a dask cluster with ``workers`` / ``scheduler`` / ``client``; ``csv`` /
      ``parquet``: the joined table there too); returns a :class:`StorePrediction`;
    - a field image with its mask ``labels`` (arrays, or files ``ticlust.read_input`` reads): its objects cut
      as the result's objects were (``plate.view.route_options``; a shape method's: their contours) and
      assigned (``plate.view.assign_objects``); returns a DataFrame, one row per object: its table row
      (label, centroid, bbox, ...) and cluster, score, runner_up, runner_up_score;
    - a stack (NumPy, memory-mapped or dask, or a file or folder ``ticlust.read_input`` reads):
      :func:`ticlust.api.predict`; returns a ClusteringResult (``aligned`` as there).

    ``progress``: True for a bar on standard error, or a callable taking Progress events (a store or a field)."""
    from ..api import load_result, predict as predict_items_of
    from ..io.readers import read_input

    path = isinstance(data, (str, os.PathLike))
    if isinstance(data, ObjectStore) or (path and is_store(data)):
        if aligned:
            raise InputError("aligned=True does not apply to an object store: its predictions hold cluster, score and "
                             "runner-up; align the objects you look at with ticlust.api.align_one.")
        if labels is not None:
            raise InputError("labels does not apply to an object store: its objects were cut by ticlust extract.")
        return predict_store(result, data, device=device, batch_size=batch_size, progress=progress, workers=workers,
                             scheduler=scheduler, client=client, csv=csv, parquet=parquet)
    if any(v is not None for v in (workers, scheduler, client, csv, parquet)):
        raise InputError("workers, scheduler, client, csv and parquet apply to an object store (ticlust.extract): a "
                         "stack or a field is assigned in this process and returned (write a stack's CSV with its "
                         "assignments_table, a field's with the DataFrame's to_csv).")
    result = load_result(result) if isinstance(result, (str, os.PathLike)) else result
    data = read_input(data)[0] if path else data
    if labels is None:
        return predict_items_of(result, data, device=device, batch_size=batch_size, aligned=aligned)
    if aligned:
        raise InputError("aligned=True does not apply to a field with labels: its objects are assigned into a table; "
                         "align the objects you look at with ticlust.api.align_one.")
    return _predict_field(result, data, read_input(labels)[0] if isinstance(labels, (str, os.PathLike)) else labels,
                          device, batch_size, progress)


def _predict_field(result, image, labels, device: str, batch_size: int | None, progress):
    """The objects of ``labels`` in ``image`` assigned with the result (``plate.view.assign_objects``, ``batch_size``
    objects at a time), its progress reported: their table and assignment columns as one DataFrame."""
    import pandas as pd

    from ..api import check_result
    from ..core.validation import check_batch_size
    check_result(result)
    block = APPLY_BLOCK if batch_size is None else check_batch_size(batch_size)
    report = Reporter(progress)
    steps = assign_objects(result, np.asarray(image), np.asarray(labels), device, block)
    while True:
        try:
            event = next(steps)
        except StopIteration as stop:
            table, columns = stop.value
            break
        report(event.stage, event.step, event.total)
    report.close()
    return pd.DataFrame({**table, **columns})
