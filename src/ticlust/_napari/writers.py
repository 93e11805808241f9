"""npe2 writers: File > Save Selected Layers on what the ticlust dock drew.

A painted field (``<field> objects by cluster``, or a plate's ``<store> objects``) saves as its per-object table
(.csv: label, centroid, area, cluster, score, runner-up… as the layer's features hold them); the layer a result was
fitted on (a stack, a field's objects, landmarks: its ``ticlust_result``) saves as the result (.npz, and its
assignments table as .csv beside it, as the dock's Save result… writes them). Anything else is declined (napari then
offers its own writers).
"""
from __future__ import annotations

from pathlib import Path


def write_objects(path: str, data, meta: dict) -> list[str]:
    """The per-object table of a painted field (its layer's features) as CSV, written whole or not at all."""
    import pandas as pd

    from ..plate.view import write_shares

    features = meta.get("features")
    if features is None or not len(features) or "cluster" not in features:
        return []
    return [str(write_shares(pd.DataFrame(features), _with_suffix(path, ".csv")))]


def write_result(path: str, data, meta: dict) -> list[str]:
    """The result a layer carries (``metadata["ticlust_result"]``) as .npz, its assignments table beside it."""
    result = (meta.get("metadata") or {}).get("ticlust_result")
    if result is None:
        return []
    out = result.save(_with_suffix(path, ".npz"))
    result.assignments_table(out.with_suffix(".csv"))
    return [str(out), str(out.with_suffix(".csv"))]


def _with_suffix(path: str, suffix: str) -> Path:
    path = Path(path)
    return path if path.suffix.lower() == suffix else path.with_suffix(suffix)
