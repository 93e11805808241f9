"""Clusters set by hand on a plate result, as the predictions see them: which store objects were pinned (the fit
sample's ``pinned`` items and the objects outside the sample, kept in the result's config) and the columns a
prediction gains from them (``by_hand``, ``outlier``). Below both :mod:`.run` (which writes them into every
prediction) and :mod:`.curate` (which makes the edits)."""
from __future__ import annotations

import numpy as np

from ..errors import InputError
from ..result import OUTLIER, ClusteringResult

#: The config key of the hand-set clusters of objects outside the fit sample: {"objects": [...], "clusters": [...]}.
PINS = "plate_pins"
#: The columns the written predictions gain when the result holds hand-set clusters.
HAND_COLUMNS = ("by_hand", "outlier")


def fit_sample(result: ClusteringResult) -> np.ndarray:
    """The store objects the result was fitted on (its items, in order); refused for a result not fitted on a store."""
    sample = result.config.get("fit_sample")
    if not isinstance(sample, dict) or "index" not in sample:
        raise InputError(f"This {result.method} result was not fitted on an object store (ticlust fit STORE, or Fit in "
                         "the plate dock): its items are not the store's objects, so it cannot curate a plate.")
    return np.asarray(sample["index"], np.int64)


def outside_pins(result: ClusteringResult) -> dict[int, int]:
    """The hand-set clusters of objects outside the fit sample, as {store object: cluster or OUTLIER}."""
    recorded = result.config.get(PINS) or {"objects": [], "clusters": []}
    return {int(o): int(c) for o, c in zip(recorded["objects"], recorded["clusters"])}


def plate_pins(result: ClusteringResult) -> tuple[np.ndarray, np.ndarray]:
    """Every hand-set cluster of the plate: (object numbers, sorted; their cluster, or OUTLIER), from the sample's
    ``pinned`` items and the pins of objects outside the sample. Empty arrays for a result without any."""
    pins = outside_pins(result) if isinstance(result.config.get("fit_sample"), dict) else {}
    if result.pinned is not None and isinstance(result.config.get("fit_sample"), dict):
        index = fit_sample(result)
        for item in np.flatnonzero(np.asarray(result.pinned) != -1):
            pins[int(index[item])] = int(result.pinned[item])
    objects = np.array(sorted(pins), np.int64)
    return objects, np.array([pins[o] for o in objects.tolist()], np.int64)


def pin_values(objects: np.ndarray, pins: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """The hand-set value of each of these object numbers (-1: none; a cluster; OUTLIER)."""
    pinned, values = pins
    out = np.full(len(objects), -1, np.int64)
    if len(pinned):
        at = np.minimum(np.searchsorted(pinned, objects), len(pinned) - 1)
        hit = pinned[at] == objects
        out[hit] = values[at[hit]]
    return out


def pin_columns(columns: dict, objects: np.ndarray, pins: tuple[np.ndarray, np.ndarray]) -> dict:
    """Assignment columns (cluster, score, …) of ``objects`` with the hand-set clusters applied: cluster set where
    pinned, ``by_hand`` True there, ``outlier`` True where marked (its cluster stays the predicted one). Score and
    runner-up stay the method's. A copy; no columns added when ``pins`` is empty."""
    if not len(pins[0]):
        return dict(columns)
    value = pin_values(np.asarray(objects, np.int64), pins)
    cluster = np.asarray(columns["cluster"]).copy()
    by_hand = value >= 0
    cluster[by_hand] = value[by_hand]
    return {**columns, "cluster": cluster, "by_hand": by_hand, "outlier": value == OUTLIER}


def pinned_columns(table, offset: int, pins: tuple[np.ndarray, np.ndarray]):
    """An Arrow table of predictions (rows ``offset`` … of the store's table) with :func:`pin_columns` applied:
    what ``predict_store`` writes when the result holds hand-set clusters."""
    import pyarrow as pa

    if not len(pins[0]):
        return table
    objects = np.arange(offset, offset + table.num_rows)
    done = pin_columns({"cluster": table.column("cluster").to_numpy()}, objects, pins)
    table = table.set_column(table.column_names.index("cluster"), "cluster",
                             pa.array(done["cluster"].astype(np.int32)))
    for name in HAND_COLUMNS:
        table = table.append_column(name, pa.array(done[name]))
    return table


__all__ = ["PINS", "HAND_COLUMNS", "fit_sample", "outside_pins", "plate_pins", "pin_values", "pin_columns", "pinned_columns"]
