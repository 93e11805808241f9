"""Files written whole or not at all, and the one guard every file ticlust writes goes through (the way git and
SQLite write: a failed or killed run leaves the previous file as it was; and nothing ticlust reads is ever
written over).

:func:`check_outputs` is the guard: every command, API call and dock action that writes a file names its outputs
(and its inputs) to it before any work starts. :func:`write_atomic` writes one file whole, and checks a path no
caller checked with the same rules (none that needs the inputs). :func:`owned` marks the few writes into a folder
ticlust itself keeps (an object store's parts and tables under its lock, a label image in an OME-Zarr's
``labels`` group): only there may a file be written inside a Zarr hierarchy. ``tests/core/test_writer_guard.py``
walks the package and fails on a write that takes neither road.
"""
from __future__ import annotations

import json
import os
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Callable

from ..errors import InputError

#: The files that make a folder a Zarr node (v3; v2 groups and arrays).
ZARR_MARKERS = ("zarr.json", ".zgroup", ".zarray")

_owned = threading.local()           # .folders: the folders this thread is writing as ticlust's own (resolved paths)


def write_atomic(path: str | Path, write: Callable[[Path], object]) -> Path:
    """``write(tmp)`` into a temporary file beside ``path``, then rename it onto ``path``: readers see the
    old file or the new one, never half of one; on any error the temporary file is removed. A path outside the
    folders ticlust is writing itself (:func:`owned`) is checked by :func:`check_outputs` first."""
    path = Path(path)
    if not is_owned(path):
        check_outputs({}, {"The file": path})
    tmp = path.with_name(path.name + ".partial")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return path


@contextmanager
def owned(folder: str | Path):
    """While the block runs, files inside ``folder`` are ticlust's own to write in this thread (an object store it
    holds the lock of, or its part of one; a labels group it writes a label image into): :func:`write_atomic`
    writes them without the output checks, and the writer-guard test lets the block write directly. Another
    thread (a dock's action while a run holds the store) is checked as ever."""
    if not hasattr(_owned, "folders"):
        _owned.folders = []
    folders = _owned.folders
    folders.append(Path(folder).resolve())
    try:
        yield folders[-1]
    finally:
        folders.pop()


def is_owned(path: str | Path) -> bool:
    """Whether ``path`` lies in a folder this thread holds by :func:`owned` now."""
    where = Path(path).resolve()
    return any(where == folder or where.is_relative_to(folder) for folder in getattr(_owned, "folders", []))


def check_outputs(inputs: dict[str, object], outputs: dict[str, object], *, folders: bool = False) -> dict[str, Path]:
    """The guard of every file ticlust writes, called before any work starts. Refuses, in one sentence naming the
    output and the fix, an output that is: an existing folder (with ``folders``: a file), inside a Zarr hierarchy
    (an object store or one of its files, an OME-Zarr image or plate), one of the ``inputs`` (an image, mask,
    manifest or result being read), another output, in a folder that does not exist, or not writable.
    ``inputs`` / ``outputs``: name (a flag such as ``--csv``, or a few words) → path, None for not given;
    ``folders``: the outputs are folders that files will be written into (a gallery). Returns the outputs given."""
    given_in = {name: Path(p) for name, p in inputs.items() if p is not None}
    given_out = {name: Path(p) for name, p in outputs.items() if p is not None}
    for i, (name, out) in enumerate(given_out.items()):
        for in_name, source in given_in.items():
            if _same(out, source):
                raise InputError(f"{name} {out} is the input {in_name}: choose another file for the output, so that "
                                 "the input is never overwritten.")
        for other, path in list(given_out.items())[i + 1:]:
            if _same(out, path):
                raise InputError(f"{name} and {other} are the same file ({out}): give each output its own file.")
        _check_place(name, out, folders)
    return given_out


def _check_place(name: str, out: Path, folder: bool) -> None:
    """One output's own rules (:func:`check_outputs`): its kind, the Zarr hierarchy it would land in, its folder."""
    if not folder and out.is_dir():
        raise InputError(f"{name} {out} is a folder: give a file name for the output.")
    if folder and out.exists() and not out.is_dir():
        raise InputError(f"{name} {out} is a file: give a folder (it is made if missing).")
    root = zarr_root(out if folder else out.parent)
    if root is not None:
        what = "the object store" if _is_object_store(root) else "the Zarr hierarchy (an OME-Zarr image or plate)"
        raise InputError(f"{name} {out} lies inside {what} {root}: choose a {'folder' if folder else 'file'} outside "
                         "it, so that nothing of it is overwritten.")
    if folder:
        return
    if not out.parent.is_dir():
        raise InputError(f"{name} {out}: cannot write there (its folder does not exist): choose a file in a folder "
                         "that exists.")
    existed = out.exists()
    try:
        with open(out, "ab"):          # the probe leaves an existing file as it was
            pass
    except OSError as exc:
        raise InputError(f"{name} {out}: cannot write there ({exc.strerror}): choose a file in a folder that exists "
                         "and is writable.") from None
    if not existed:
        out.unlink()


def zarr_root(path: str | Path) -> Path | None:
    """The outermost Zarr hierarchy (a folder holding zarr.json, .zgroup or .zarray) that ``path`` is or lies in;
    None outside any. An object store is one (its zarr.json), and so is an OME-Zarr image or plate."""
    found = None
    for folder in [Path(path).resolve(), *Path(path).resolve().parents]:
        if any((folder / marker).is_file() for marker in ZARR_MARKERS):
            found = folder
    return found


def _is_object_store(root: Path) -> bool:
    """Whether a Zarr hierarchy is a ticlust object store (its zarr.json carries ticlust's attributes)."""
    try:
        return "ticlust" in json.loads((root / "zarr.json").read_text()).get("attributes", {})
    except (OSError, ValueError, AttributeError):
        return (root / "fields").is_dir() and (root / "fields.parquet").exists()


def _same(a: Path, b: Path) -> bool:
    """Whether two paths name one file (or folder): the same path resolved, or the same file on disk."""
    try:
        return a.resolve() == b.resolve() or (a.exists() and b.exists() and os.path.samefile(a, b))
    except OSError:
        return False
