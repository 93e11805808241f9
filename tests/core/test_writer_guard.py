"""One guard for every file ticlust writes (issue 55, item 1).

The guard is ``core.atomic.check_outputs``; files are written through ``core.atomic.write_atomic``, which checks any
path no one checked. This file walks the package's source for every call that writes a file (pandas' ``to_csv``,
NumPy's ``save``, ``open(..., "w")``, Parquet and Zarr writers, renames, ...) and fails on one that takes neither
road: a write must happen inside the ``write`` callable handed to ``write_atomic``, or inside a block that declares
the folder ticlust writes in itself (``with owned(folder)``: an object store's own files, a label image in an
OME-Zarr's labels group), or in a function only ever called from such places. A new writer that bypasses the guard
fails here, whoever wrote it.
"""
from __future__ import annotations

import ast
import pathlib
import textwrap
import threading

import pytest

import ticlust
from ticlust.core.atomic import check_outputs, owned, write_atomic, zarr_root
from ticlust.errors import InputError

SRC = pathlib.Path(ticlust.__file__).parent
#: Method names that write a file whatever they are called on.
WRITES = {"write_text", "write_bytes", "imwrite", "imsave",
          "write_table", "ParquetWriter", "CSVWriter", "write_image", "write_labels", "write_multiscale",
          "write_multiscale_labels", "create_array", "create_group", "create_dataset", "savez", "savez_compressed",
          "savetxt", "copyfile", "copytree", "touch"}
#: Methods that write a file when given one (else they return the bytes or text).
PATH_WRITES = {"to_csv", "to_parquet", "to_zarr", "to_hdf", "to_feather", "to_json"}
#: Functions of these modules that write (``np.save``, ``os.replace``, ``shutil.copy``, ...).
MODULE_WRITES = {"np": {"save"}, "numpy": {"save"}, "os": {"rename", "replace", "write", "link", "symlink"},
                 "shutil": {"copy", "copy2", "move"}, "zarr": {"create", "array", "group", "save"}}
#: Modes of ``open`` / zarr's ``open*`` that write.
WRITE_MODES = ("w", "a", "x", "+")


def _mode(call: ast.Call) -> str | None:
    """The mode an ``open``-like call is given (second positional argument or ``mode=``), if it is a constant."""
    for kw in call.keywords:
        if kw.arg == "mode" and isinstance(kw.value, ast.Constant):
            return str(kw.value.value)
    if len(call.args) > 1 and isinstance(call.args[1], ast.Constant) and isinstance(call.args[1].value, str):
        return call.args[1].value
    return None


def is_write(call: ast.Call) -> bool:
    """Whether a call writes a file (see the module doc)."""
    func = call.func
    name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
    owner = func.value.id if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) else None
    if name in PATH_WRITES:           # pandas' to_csv() with no path returns the text
        return bool(call.args) or any(kw.arg in ("path", "path_or_buf", "store") for kw in call.keywords)
    if name in WRITES:
        return True
    if owner in MODULE_WRITES and name in MODULE_WRITES[owner]:
        return True
    if name in ("open", "open_group", "open_array", "open_consolidated"):
        mode = _mode(call)
        return mode is not None and any(m in mode for m in WRITE_MODES)
    if name == "save":                 # PIL's Image.save(path, format=...), or a picture made on the spot
        return any(kw.arg == "format" for kw in call.keywords) or isinstance(getattr(func, "value", None), ast.Call)
    return False


class Module:
    """One source file: its tree with parent links."""

    def __init__(self, path: pathlib.Path, source: str | None = None):
        self.path = path
        self.tree = ast.parse(source if source is not None else path.read_text())
        self.parent = {}
        for node in ast.walk(self.tree):
            for child in ast.iter_child_nodes(node):
                self.parent[child] = node

    def chain(self, node):
        while node in self.parent:
            node = self.parent[node]
            yield node


def _called(call: ast.AST, name: str) -> bool:
    func = getattr(call, "func", None)
    return isinstance(call, ast.Call) and (isinstance(func, ast.Name) and func.id == name or
                                           isinstance(func, ast.Attribute) and func.attr == name)


def _guarded_here(module: Module, node) -> tuple[bool, ast.FunctionDef | None]:
    """(whether ``node`` sits in a guarded place of its own function, that function): inside ``with owned(...)``,
    inside a lambda handed to ``write_atomic``, or inside a nested function handed to it by name."""
    for up in module.chain(node):
        if isinstance(up, ast.With) and any(_called(item.context_expr, "owned") for item in up.items):
            return True, None
        if isinstance(up, ast.Lambda) and _called(module.parent.get(up), "write_atomic"):
            return True, None
        if isinstance(up, (ast.FunctionDef, ast.AsyncFunctionDef)):
            scope = module.parent.get(up)
            handed = any(_called(c, "write_atomic") and any(isinstance(a, ast.Name) and a.id == up.name
                                                            for a in c.args + [k.value for k in c.keywords])
                         for c in ast.walk(scope) if isinstance(c, ast.Call))
            return handed, (None if handed else up)
    return False, None


def unguarded_writes(modules: list[Module]) -> list[str]:
    """Every write call (``is_write``) that is not guarded (see the module doc): ``file:line function: call``."""
    calls = {}                         # function name -> [(module, call node)] of every call of that name
    for m in modules:
        for node in ast.walk(m.tree):
            if isinstance(node, ast.Call):
                func = node.func
                name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
                calls.setdefault(name, []).append((m, node))
    memo: dict[str, bool] = {}

    def safe(module: Module, node, seen: frozenset) -> bool:
        here, function = _guarded_here(module, node)
        if here:
            return True
        if function is None or function.name in seen:
            return False
        if function.name not in memo:  # guarded when every call of it (and there is one) is guarded
            sites = [(m, c) for m, c in calls.get(function.name, []) if function not in set(m.chain(c))]
            memo[function.name] = bool(sites) and all(safe(m, c, seen | {function.name}) for m, c in sites)
        return memo[function.name]

    found = []
    for m in modules:
        if m.path.name == "atomic.py" and m.path.parent.name == "core":
            continue                   # the guarded writers themselves
        for node in ast.walk(m.tree):
            if isinstance(node, ast.Call) and is_write(node) and not safe(m, node, frozenset()):
                where = next((f.name for f in m.chain(node) if isinstance(f, (ast.FunctionDef,
                                                                                ast.AsyncFunctionDef))), "<module>")
                found.append(f"{m.path.relative_to(SRC.parent)}:{node.lineno} {where}: {ast.unparse(node)[:80]}")
    return found


def package_modules() -> list[Module]:
    return [Module(p) for p in sorted(SRC.rglob("*.py"))]


def test_every_writer_of_the_package_goes_through_the_guard():
    modules = package_modules()
    writes = [(m, n) for m in modules for n in ast.walk(m.tree) if isinstance(n, ast.Call) and is_write(n)]
    # the walk finds the writers there are (so that it cannot pass by finding none): results, tables, pictures,
    # label images, store parts, generated plates, landmark files
    where = {m.path.relative_to(SRC).as_posix() for m, _ in writes}
    assert {"result.py", "io/gallery.py", "io/landmarks.py", "plate/store.py", "plate/run.py", "plate/labels.py",
            "plate/view.py", "plate/curate.py", "datasets/nuclei.py", "datasets/cell_painting.py",
            "cli/fit.py", "cli/predict.py"} <= where, sorted(where)
    assert len(writes) >= 30, len(writes)
    assert unguarded_writes(modules) == []


@pytest.mark.parametrize("body, bypass", [
    ("table.to_csv(path)", True),                                   # the writer of issue 55's first case
    ("open(path, 'w').write('x')", True),
    ("np.savez(path, x=x)", True),
    ("os.replace(tmp, path)", True),
    ("Image.fromarray(x).save(path, format='PNG')", True),
    ("zarr.open_group(path, mode='w')", True),
    ("write_atomic(path, lambda tmp: table.to_csv(tmp))", False),
    ("with owned(store):\n    table.to_parquet(store / 't.parquet')", False),
    ("helper(path)", True),                                          # a helper called from an unguarded place too
    ("open(path).read()", False),                                    # reading is no write
])
def test_the_walk_flags_a_writer_that_bypasses_the_guard(body, bypass):
    """A made-up module with one writer: flagged when it writes outside write_atomic and owned blocks."""
    source = textwrap.dedent("""
        def helper(path):
            table.to_csv(path)

        def uses_helper(path):
            write_atomic(path, lambda tmp: helper(tmp))

        def new_writer(path, table, x, tmp, store):
        {body}
        """).format(body=textwrap.indent(body, "    "))
    found = unguarded_writes([Module(SRC / "plate" / "made_up.py", source)])
    assert bool(found) == bypass, found    # helper alone (called only inside write_atomic's callable) is guarded
    assert len(found) == bypass and (not bypass or ("helper" if "helper" in body else "new_writer") in found[0])


# ---- the guard's rules ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def store(tmp_path_factory):
    from ticlust.datasets.nuclei import write_nuclei_plate

    folder = tmp_path_factory.mktemp("guard")
    manifest = write_nuclei_plate(folder / "plate", fields=2, n=5, shape=(96, 96), seed=0)
    return ticlust.extract(manifest, folder / "s.zarr", progress=False), manifest


def _refused(inputs, outputs, words, **kw):
    with pytest.raises(InputError, match=words) as caught:
        check_outputs(inputs, outputs, **kw)
    assert "\n" not in str(caught.value)
    return str(caught.value)


def test_the_guard_refuses_each_kind_of_target_in_one_sentence(store, tmp_path):
    s, manifest = store
    root = s.path
    _refused({}, {"--csv": root / "table.parquet"}, f"lies inside the object store {root}: choose a file outside it")
    _refused({}, {"--csv": root / "fields" / "00000" / "rows.parquet"}, "lies inside the object store")
    _refused({}, {"--csv": root / "new.csv"}, "lies inside the object store")
    _refused({}, {"--csv": root}, "is a folder: give a file name")
    _refused({}, {"--gallery": root / "g"}, "lies inside the object store", folders=True)
    _refused({}, {"--gallery": root}, "lies inside the object store", folders=True)
    _refused({"INPUT": manifest}, {"--csv": manifest}, "is the input INPUT")
    _refused({}, {"--csv": tmp_path / "a.csv", "--parquet": tmp_path / "a.csv"}, "are the same file")
    _refused({}, {"--csv": tmp_path / "nowhere" / "a.csv"}, "its folder does not exist")
    _refused({}, {"--gallery": manifest}, "is a file: give a folder", folders=True)
    ome = tmp_path / "image.ome.zarr"
    (ome / "labels").mkdir(parents=True)
    (ome / "zarr.json").write_text('{"zarr_format": 3, "node_type": "group", "attributes": {"ome": {}}}')
    _refused({}, {"-o": ome / "labels" / "r.npz"}, "lies inside the Zarr hierarchy")
    assert zarr_root(ome / "labels" / "x") == ome.resolve() and zarr_root(tmp_path) is None
    assert check_outputs({"INPUT": manifest}, {"--csv": tmp_path / "fine.csv", "-o": None}) == \
        {"--csv": tmp_path / "fine.csv"}
    assert not (tmp_path / "fine.csv").exists()          # the writability probe leaves nothing behind


def test_write_atomic_checks_what_no_caller_checked_and_owned_folders_are_ticlusts_own(store):
    s, _ = store
    target = s.path / "mine.csv"
    with pytest.raises(InputError, match="lies inside the object store"):
        write_atomic(target, lambda tmp: tmp.write_text("x"))
    assert not target.exists() and not list(s.path.glob("*.partial"))
    with owned(s.path):
        write_atomic(target, lambda tmp: tmp.write_text("x"))
    assert target.read_text() == "x"
    target.unlink()
    with pytest.raises(InputError):    # the ticket ends with the block
        write_atomic(target, lambda tmp: tmp.write_text("x"))
    refused = []                       # and holds in its own thread only (a dock's action beside a running job)

    def other_thread():
        try:
            write_atomic(target, lambda tmp: tmp.write_text("x"))
        except InputError as exc:
            refused.append(str(exc))
    with owned(s.path):
        worker = threading.Thread(target=other_thread)
        worker.start()
        worker.join()
    assert refused and not target.exists()
