"""The fitted-method contract (issue 13): one registry drives the API, CLI and widget; no import runs
back up the package; methods stay short; defaults come from each method's config."""
import ast
import dataclasses
import pathlib

import numpy as np
import pytest

import ticlust
from ticlust import cli, curation
from ticlust.errors import InputError
from ticlust.methods.base import get_method

SRC = pathlib.Path(ticlust.__file__).parent


def module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: pathlib.Path) -> set[str]:
    """Modules of the package that a file imports, at any depth (function-level imports too)."""
    here = module_name(path)
    package = here if path.name == "__init__.py" else here.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            if base.startswith("ticlust"):
                for alias in node.names:   # "from . import kmeans" names a module, not an attribute
                    candidate = f"{base}.{alias.name}"
                    found.add(candidate if (SRC.parent / (candidate.replace(".", "/") + ".py")).exists() else base)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("ticlust"))
    return found - {here}


def test_no_import_cycle_inside_the_package():
    graph = {module_name(p): imports_of(p) for p in SRC.rglob("*.py")}
    for name in graph:   # importing a module imports its package's __init__ first: not an edge of ours
        graph[name] = {m for m in graph[name] if m in graph and not name.startswith(m + ".")}
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(node):
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                raise AssertionError("import cycle: " + " -> ".join(path[path.index(nxt):] + [nxt]))
            if nxt not in state:
                visit(nxt)
        path.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)


def test_the_import_walker_resolves_relative_imports():
    """The walker above resolves relative imports and ``from . import module`` (so the cycle test can fail)."""
    pkg = SRC / "methods" / "kmeans.py"
    assert "ticlust.methods.base" in imports_of(pkg) and "ticlust.core.stack" in imports_of(pkg)
    assert "ticlust.methods.kmeans" in imports_of(SRC / "methods" / "__init__.py")


#: What a file in methods/ may import besides its own method's modules (a method package's, methods.dti.*).
METHODS_MAY_IMPORT = ("ticlust.kernels", "ticlust.transforms", "ticlust.features", "ticlust.core", "ticlust.errors",
                      "ticlust.events", "ticlust.result", "ticlust.methods.base", "ticlust.methods.invariances")
#: The methods room's own shared helpers: every method file may import them; they are no method.
METHOD_HELPERS = ("ticlust.methods.base", "ticlust.methods.invariances")
#: The rooms below the methods, and what none of their files may import.
LOWER_ROOMS = ("kernels", "transforms", "features", "core")
ABOVE_THE_LOWER_ROOMS = ("ticlust.methods", "ticlust.plate", "ticlust.objects", "ticlust.io", "ticlust.datasets",
                         "ticlust.cli", "ticlust.api", "ticlust.curation", "ticlust._napari")


def within(module: str, rooms) -> bool:
    """Whether ``module`` is one of ``rooms`` or inside one of them."""
    return any(module == room or module.startswith(room + ".") for room in rooms)


def method_of(module: str) -> str:
    """The method a module under ticlust.methods belongs to: its own file, or its package (methods.dti.net: methods.dti)."""
    return ".".join(module.split(".")[:3])


def files_of(*rooms: str) -> list[pathlib.Path]:
    return sorted(path for room in rooms for path in (SRC / room).rglob("*.py"))


def test_method_files_import_only_the_rooms_below_and_their_own_package():
    """A file in methods/ imports the lower rooms (kernels, transforms, features, core), errors, events, result, the
    methods room's helpers and its own method's modules, nothing else (the package's __init__ imports every method
    to register it: it is the registry's loader, not a method)."""
    wrong = [f"{path.relative_to(SRC)}: {m}" for path in files_of("methods") if path != SRC / "methods" / "__init__.py"
             for m in sorted(imports_of(path)) if not within(m, (*METHODS_MAY_IMPORT, method_of(module_name(path))))]
    assert not wrong, wrong


def test_no_method_imports_another_method():
    """What two methods share is a public function in a lower room: a method's modules import no other method's."""
    wrong = []
    for path in files_of("methods"):
        here = module_name(path)
        if here == "ticlust.methods" or here in METHOD_HELPERS:
            continue
        wrong += [f"{path.relative_to(SRC)}: {m}" for m in sorted(imports_of(path))
                  if within(m, ("ticlust.methods",)) and not within(m, (*METHOD_HELPERS, method_of(here)))]
    assert not wrong, wrong


def test_the_lower_rooms_import_nothing_above_them():
    """kernels/, transforms/, features/ and core/ import no method, plate, objects, io, datasets, CLI, API, curation or
    napari code (so a kernel runs without the registry, on a cluster's worker too); events.py imports nothing."""
    wrong = [f"{path.relative_to(SRC)}: {m}" for path in files_of(*LOWER_ROOMS)
             for m in sorted(imports_of(path)) if within(m, ABOVE_THE_LOWER_ROOMS)]
    assert not wrong, wrong
    assert imports_of(SRC / "events.py") == set()


def test_no_function_over_60_lines_outside_qt_widget_constructors():
    """Every function in the package fits on a screen; only a Qt widget's constructor (a dock laying out its
    controls) may be longer."""
    long = []
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > 60:
                if path.parent.name == "_napari" and node.name == "__init__":
                    continue
                long.append(f"{path.relative_to(SRC)}:{node.name} ({node.end_lineno - node.lineno + 1} lines)")
    assert not long, long


def test_the_execution_seam_knows_no_method():
    assert not any(m.startswith(("ticlust.methods", "ticlust.api")) for m in imports_of(SRC / "core" / "execute.py"))


def test_the_package_top_holds_only_the_public_surface():
    """At most 8 modules at the top of src/ticlust (the public surface and the result model); the rest in rooms."""
    top = sorted(p.name for p in SRC.glob("*.py"))
    assert len(top) <= 8, top


#: What each room above the methods may import (rooms, and the package's top modules by name). The plate room
#: builds on the objects route and the result model; the CLI drives everything napari-free and starts the GUI
#: through the launcher only; the napari room draws everything napari-free and never calls the CLI.
NAPARI_FREE = ("core", "kernels", "transforms", "features", "methods", "objects", "plate", "io", "datasets", "api",
               "result", "curation", "metrics", "evaluation", "errors", "events")
ROOM_MAY_IMPORT = {
    "io": ("core", "errors", "events", "result"),
    "datasets": ("core", "errors", "events", "objects", "transforms"),
    "objects": ("core", "errors", "events", "result", "api", "kernels", "methods", "transforms"),
    "plate": ("core", "errors", "events", "result", "api", "curation", "metrics", "io", "kernels", "methods",
              "objects", "transforms"),
    "cli": NAPARI_FREE + ("_napari.launcher",),
    "_napari": NAPARI_FREE,
}


def room_of(module: str) -> str:
    """The room (or top module) a module of the package is in: ticlust.plate.view → plate, ticlust.api → api."""
    return module.split(".")[1] if "." in module else ""


@pytest.mark.parametrize("room", sorted(ROOM_MAY_IMPORT))
def test_each_room_imports_only_what_it_may(room):
    """plate/, objects/, io/, datasets/, cli/ and _napari/ import only the rooms their line of ROOM_MAY_IMPORT names
    (and themselves, and the package's top for its version)."""
    allowed = tuple(f"ticlust.{r}" for r in (room, *ROOM_MAY_IMPORT[room]))
    wrong = [f"{path.relative_to(SRC)}: {m}" for path in files_of(room) for m in sorted(imports_of(path))
             if m != "ticlust" and not within(m, allowed)]
    assert not wrong, wrong


def test_no_room_imports_another_rooms_private_names():
    """What two rooms share is a public name: ``from ..plate.view import _x`` from another room is refused."""
    wrong = []
    for path in SRC.rglob("*.py"):
        here = module_name(path)
        package = here if path.name == "__init__.py" else here.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom):
                continue
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            if base.startswith("ticlust") and room_of(base) != room_of(here):
                wrong += [f"{path.relative_to(SRC)}: {base}.{a.name}" for a in node.names
                          if a.name.startswith("_") and not a.name.startswith("__")]
    assert not wrong, wrong


def test_no_class_over_400_lines_in_the_napari_room():
    """The dock is small classes with a declared interface (a source, a part, a tab), none a screenful of screens."""
    long = [f"{path.name}:{node.name} ({node.end_lineno - node.lineno + 1} lines)" for path in files_of("_napari")
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.ClassDef) and node.end_lineno - node.lineno + 1 > 400]
    assert not long, long


QT_AND_NAPARI = ("napari", "qtpy", "PyQt5", "PyQt6", "PySide2", "PySide6", "magicgui", "superqt", "vispy")


def test_qt_and_napari_are_imported_only_in_the_napari_room():
    """Everything else runs without a display (the CLI, a dask worker, a plain Python session)."""
    wrong = []
    for path in SRC.rglob("*.py"):
        if "_napari" in path.relative_to(SRC).parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            wrong += [f"{path.relative_to(SRC)}: {n}" for n in names if n.split(".")[0] in QT_AND_NAPARI]
    assert not wrong, wrong


def test_the_napari_room_uses_no_private_attribute_of_another_object():
    """napari's public API only (the viewer arrives as a public-only proxy; ``window._qt_window`` and its kind break
    with napari's next release): no ``x._name`` in _napari/ but on ``self``."""
    wrong = [f"{path.name}:{node.lineno}: {ast.unparse(node)}" for path in files_of("_napari")
             for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
             and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))]
    assert not wrong, wrong


# ---- a toy method, registered in one line (conftest.py: Toy, the ``toy`` fixture) ----------------------------
def test_a_registered_toy_method_works_everywhere(dark_and_bright, toy, tmp_path, capsys):
    x = dark_and_bright()
    res = ticlust.fit(x, method="toy-bins", seed=0, shift=0.5)
    assert res.method == "toy-bins" and res.k == 3 and res.config["shift"] == 0.5    # K from ToyConfig
    saved = ticlust.load_result(res.save(tmp_path / "toy.npz"))
    assert isinstance(saved.state, toy.state) and np.array_equal(saved.state.thresholds, res.state.thresholds)
    assert np.array_equal(ticlust.predict(saved, x).labels, res.labels)
    refined = curation.refine(x, curation.move(res, [0], 2))
    assert refined.labels[0] == 2 and np.array_equal(refined.labels[1:], res.labels[1:])
    assert cli.main(["methods"]) == 0
    assert "toy-bins: Brightness bins (test)" in capsys.readouterr().out
    np.save(tmp_path / "x.npy", x)
    assert cli.main(["fit", str(tmp_path / "x.npy"), "--method", "toy-bins", "--quiet", "-o", str(tmp_path / "r.npz")]) == 0
    assert "K=3" in capsys.readouterr().err
    assert ticlust.load_result(tmp_path / "r.npz").method == "toy-bins"
    assert "toy-bins" in ticlust.available_methods()


def test_k_defaults_to_each_methods_config(dark_and_bright):
    assert get_method("nt").default_k == 20 and get_method("kmeans").default_k == 10
    distinct = dark_and_bright() + np.random.default_rng(0).random((12, 6, 6), np.float32) * 0.01   # K = 10 needs 10 distinct items
    res = ticlust.fit(distinct, method="kmeans", k=None, seed=0, max_iter=2)
    assert res.k == 10
    with pytest.raises(InputError, match="out of range"):
        ticlust.fit(dark_and_bright(), method="nt")   # NTConfig.k = 20 > 12 items: the config's K was used


def test_a_result_round_trips_its_config(dark_and_bright):
    res = ticlust.fit(dark_and_bright(), method="kmeans", k=2, seed=0, init="random", max_iter=3)
    cfg = get_method("kmeans").config_of(res)
    assert dataclasses.asdict(cfg) == {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}
    assert (cfg.k, cfg.init, cfg.max_iter) == (2, "random", 3)


@pytest.mark.gui
def test_the_toy_method_appears_in_the_widget(dark_and_bright, toy, dock, make_napari_viewer, qtbot):
    """Registered in one line, the toy method is in the dock's method list with its own K and parameters, and runs
    from there — no change to the dock."""
    pytest.importorskip("napari")
    viewer = make_napari_viewer()
    viewer.add_image(dark_and_bright(), name="stack")
    widget = dock(viewer)
    assert "toy-bins" in list(widget.form.method.choices)
    widget.form.method.value = "toy-bins"
    assert widget.form.k.value == 3                                       # ToyConfig.k, not a hard-coded 10
    assert widget.start() is not None
    qtbot.waitUntil(lambda: not widget.busy, timeout=30_000)
    assert widget.result is not None and widget.result.method == "toy-bins"


def test_a_method_is_one_file_under_methods(toy_method, tmp_path):
    """The toy method above, written as one new file in a copy of the package and nothing else changed:
    the registry, the API, save/load, predict and the CLI all find it (issue 28: a method is one file)."""
    import inspect
    import shutil
    import subprocess
    import sys

    package = tmp_path / "ticlust"
    shutil.copytree(SRC, package, ignore=shutil.ignore_patterns("__pycache__"))
    source = "\n\n".join(inspect.getsource(obj) for obj in (toy_method.config, toy_method.state, toy_method))
    (package / "methods" / "toy_bins.py").write_text(
        '"""A toy method dropped in as one file."""\nfrom dataclasses import dataclass\n\nimport numpy as np\n\n'
        "from ..events import Progress, Snapshot\nfrom ..result import FittedState\nfrom ..core.stack import Stack\n"
        "from .base import Method, param, register\n\n\n" + source + "\n\nregister(Toy())\n")
    script = (
        "import sys, numpy as np, ticlust\n"
        "from ticlust import cli\n"
        "assert ticlust.__file__.startswith(sys.argv[1]), ticlust.__file__\n"
        "x = np.zeros((12, 6, 6), np.float32); x[6:] = 1.0; x[::3] += 0.1\n"
        "res = ticlust.fit(x, method='toy-bins', seed=0)\n"
        "back = ticlust.load_result(res.save(sys.argv[1] + '/r.npz'))\n"
        "assert back.method == 'toy-bins' and np.array_equal(ticlust.predict(back, x).labels, res.labels)\n"
        "sys.exit(cli.main(['methods']))\n")
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path)], cwd=tmp_path, capture_output=True, text=True,
                          env={**__import__("os").environ, "PYTHONPATH": str(tmp_path)}, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "toy-bins: Brightness bins (test)" in done.stdout
