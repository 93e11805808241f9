"""What the plate dock's object map does before the map itself draws (``_napari.map_panel``), for 10^6 predicted
objects: reading the map's columns from the store's predictions.parquet (in a worker) and making the colour columns
(again on the GUI thread whenever an edit recolours the map), and counting a 100,000-object selection per cluster
and well (GUI thread). Generated predictions (96 wells, 8 clusters, seed 0) in a temporary folder; three rounds.

  flock /work/wt/bench.lock python benchmarks/object_map_store.py
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
import types
from datetime import datetime
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))

from _data import load_average  # noqa: E402


def main() -> None:
    import pandas as pd

    from ticlust._napari.map_panel import colour_columns, count_text, map_table

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--out", default=str(HERE / "results" / "object_map_store.md"))
    args = ap.parse_args()
    n, rng = args.n, np.random.default_rng(0)
    wells = [f"{r}{c:02d}" for r in "ABCDEFGH" for c in range(1, 13)]
    lines = ["# The plate map's own steps for 10^6 objects (`python benchmarks/object_map_store.py`)", "",
             f"{datetime.now():%Y-%m-%d %H:%M}; 2 cores shared with other jobs, under the benchmark lock. read = "
             "map_table (predictions.parquet's map and score columns joined to the panel's columns; a worker); "
             "colours = colour_columns (what an edit redoes on the GUI thread); counts = a 100,000-object selection "
             "per cluster and well (GUI thread).", "",
             "| round | objects | read s | colours ms | counts ms | load |", "|---|---|---|---|---|---|"]
    with tempfile.TemporaryDirectory() as tmp:
        table = pd.DataFrame({
            "field_index": np.arange(n) // 250, "cluster": rng.integers(0, 8, n).astype(np.int32),
            "score": rng.random(n).astype(np.float32), "runner_up": rng.integers(0, 8, n).astype(np.int32),
            "runner_up_score": rng.random(n).astype(np.float32), "map_x": rng.normal(size=n).astype(np.float32),
            "map_y": rng.normal(size=n).astype(np.float32), "well": pd.Categorical(rng.choice(wells, n))})
        table.to_parquet(Path(tmp) / "predictions.parquet")
        store = types.SimpleNamespace(path=Path(tmp))
        panel_columns = table[["field_index", "cluster", "well"]]
        for round_ in range(1, 4):
            t = time.perf_counter()
            _objects, _xy, read, _ = map_table(store, panel_columns)
            read_s = time.perf_counter() - t
            t = time.perf_counter()
            columns = colour_columns(read)
            colours_ms = 1000 * (time.perf_counter() - t)
            t = time.perf_counter()
            count_text(columns, np.arange(0, n, max(1, n // 100_000)), ["cluster", "well"])
            counts_ms = 1000 * (time.perf_counter() - t)
            lines.append(f"| {round_} | {n:,} | {read_s:.2f} | {colours_ms:.0f} | {counts_ms:.0f} | {load_average()} |")
            print(lines[-1], flush=True)
    Path(args.out).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
