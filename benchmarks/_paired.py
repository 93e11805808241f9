"""Paired runs of this tree against another checkout: each run is a fresh child process that imports one tree's
ticlust (its src/ on PYTHONPATH) and prints one JSON line last; the trees take turns, their order reversed every
other round, so a load that drifts during the benchmark falls on both sides alike."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def child_json(tree: Path, args: list[str], env: dict[str, str]) -> dict:
    """Run ``python ARGS`` with ``tree``'s src/ on PYTHONPATH (``env``: the rest of the child's environment) and
    return the JSON object of its last line of standard output."""
    env = {**env, "PYTHONPATH": str(Path(tree) / "src")}
    out = subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def in_turn(trees: list[tuple[str, Path]], round_index: int) -> list[tuple[str, Path]]:
    """The (name, tree) pairs in the order of round ``round_index`` (from 0): as given, reversed every other round."""
    return trees if round_index % 2 == 0 else trees[::-1]
