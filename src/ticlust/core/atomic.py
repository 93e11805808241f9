"""Files written whole or not at all, and outputs that never overwrite an input (the way git and SQLite
write: a failed or killed run leaves the previous file as it was)."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from ..errors import InputError


def write_atomic(path: str | Path, write: Callable[[Path], object]) -> Path:
    """``write(tmp)`` into a temporary file beside ``path``, then rename it onto ``path``: readers see the
    old file or the new one, never half of one; on any error the temporary file is removed."""
    path = Path(path)
    tmp = path.with_name(path.name + ".partial")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return path


def check_outputs(inputs: dict[str, object], outputs: dict[str, object]) -> None:
    """Refuse, before any work, an output that is one of the inputs or two outputs on one path
    (``inputs`` / ``outputs``: flag or argument name → path, None for not given)."""
    def same(a: Path, b: Path) -> bool:
        try:
            return a.resolve() == b.resolve() or (a.exists() and b.exists() and os.path.samefile(a, b))
        except OSError:
            return False

    given_in = {name: Path(p) for name, p in inputs.items() if p is not None}
    given_out = [(name, Path(p)) for name, p in outputs.items() if p is not None]
    for i, (name, out) in enumerate(given_out):
        for in_name, source in given_in.items():
            if same(out, source):
                raise InputError(f"{name} {out} is the input {in_name}: choose another file for the output, so that "
                                 "the input is never overwritten.")
        for other, path in given_out[i + 1:]:
            if same(out, path):
                raise InputError(f"{name} and {other} are the same file ({out}): give each output its own file.")
