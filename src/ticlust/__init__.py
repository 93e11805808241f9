"""ticlust: transformation-invariant clustering of image stacks and landmark shapes.

The public names are imported on first use (PEP 562), so ``import ticlust`` is light and a process that
only cuts objects out (an extraction worker running :mod:`ticlust.plate.store`) never loads torch.
"""
import importlib

__version__ = "0.1.0"

from .core.determinism import request_reproducible_blas  # noqa: E402  (no torch: keeps the import light)

request_reproducible_blas()      # before MKL's first call: the same seed gives the same result (docs/reproducibility.md)

#: Each public name and the module that defines it.
_EXPORTS = {"fit": "api", "run": "api", "predict": "plate.predict", "refine": "curation", "InputError": "errors",
            "read_input": "io.readers", "sample": "datasets.samples", "available_methods": "methods",
            "get_method": "methods", "evaluate": "metrics", "scan_k": "evaluation", "KScan": "evaluation", "nuclei_field": "datasets.nuclei",
            "objects_from_labels": "objects.crops", "shapes_from_labels": "objects.crops",
            "segment_nuclei": "objects.segment", "read_labels": "io.readers",
            "ClusteringResult": "result", "load_result": "api", "extract": "plate.store",
            "open_objects": "plate.store", "ObjectStore": "plate.store", "write_cluster_labels": "plate.labels",
            "object_tracks": "objects.tracks", "track_states": "objects.states", "time_lapse": "datasets.timelapse"}

__all__ = [*_EXPORTS, "__version__"]


def __getattr__(name: str):
    """A public name, imported from its module the first time it is asked for."""
    if name not in _EXPORTS:
        raise AttributeError(f"module 'ticlust' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
