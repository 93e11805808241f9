"""The public surface: every name ``ticlust`` exports imports and is what it was before the package was arranged
in rooms, and the console script still points at ``ticlust.cli:main``."""
import importlib.metadata
import inspect

import ticlust

PUBLIC = {
    "fit": "function", "run": "function", "predict": "function", "refine": "function", "read_input": "function",
    "sample": "function", "available_methods": "function", "get_method": "function", "evaluate": "function",
    "nuclei_field": "function", "objects_from_labels": "function", "shapes_from_labels": "function",
    "load_result": "function", "extract": "function", "open_objects": "function", "write_cluster_labels": "function",
    "segment_nuclei": "function", "read_labels": "function", "scan_k": "function",
    "InputError": "class", "ClusteringResult": "class", "ObjectStore": "class", "KScan": "class",
    "object_tracks": "function", "track_states": "function", "time_lapse": "function",
}


def test_every_public_name_imports_and_is_listed():
    assert set(ticlust.__all__) == set(PUBLIC) | {"__version__"}
    for name, kind in PUBLIC.items():
        value = getattr(ticlust, name)
        assert (inspect.isclass(value) if kind == "class" else callable(value) and not inspect.isclass(value)), name
    assert issubclass(ticlust.InputError, ValueError)


def test_public_names_come_from_their_rooms():
    """Each name is defined in the room the architecture gives it, not in a private module."""
    rooms = {"predict": "ticlust.plate", "extract": "ticlust.plate", "ObjectStore": "ticlust.plate",
             "open_objects": "ticlust.plate", "read_input": "ticlust.io", "sample": "ticlust.datasets",
             "nuclei_field": "ticlust.datasets", "objects_from_labels": "ticlust.objects",
             "shapes_from_labels": "ticlust.objects", "write_cluster_labels": "ticlust.plate",
             "segment_nuclei": "ticlust.objects", "read_labels": "ticlust.io",
             "object_tracks": "ticlust.objects", "track_states": "ticlust.objects", "time_lapse": "ticlust.datasets"}
    for name, room in rooms.items():
        assert getattr(ticlust, name).__module__.startswith(room), (name, getattr(ticlust, name).__module__)


def test_the_console_script_is_the_cli_main():
    scripts = {e.name: e.value for e in importlib.metadata.entry_points(group="console_scripts")}
    assert scripts["ticlust"] == "ticlust.cli:main"
    from ticlust.cli import main

    assert callable(main)
