"""Where the benchmark datasets live: --data-dir, else the shared/datasets folder beside the repository
(the checkout's parent in CI and here; one level further up from a worktree)."""
from __future__ import annotations

import os
from pathlib import Path


def data_dir(given: str | None = None) -> Path:
    if given:
        return Path(given)
    for base in Path(__file__).resolve().parents[1:4]:
        if (base / "shared" / "datasets").is_dir():
            return base / "shared" / "datasets"
    raise SystemExit("No shared/datasets folder found beside the repository: pass --data-dir.")


def load_average() -> str:
    """The machine's 1/5/15-minute load averages, written beside every timing (other jobs share the cores)."""
    return " ".join(f"{v:.2f}" for v in os.getloadavg())
