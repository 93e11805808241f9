"""What the object map adds to predict, paired in one process (issue "object map": at most 10 % for ai/st/pssc/dti).

Objects of a generated field of nuclei (outline kinds, cut by the objects route as in object_map_quality.py); each
method is fitted once on a seeded half (short settings, as scale.py's), then the other half is predicted ``--pairs``
times with the result as saved before maps were made (no map: predict skips the map step) and with its map,
alternating which goes first, so that the machine's load falls on both alike. Reported: the median of each, the
median of the per-pair ratios, and the load.

  flock /work/wt/bench.lock python benchmarks/map_overhead.py --methods ai-kmeans st-kmeans pssc dti-kmeans
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))
sys.path.insert(0, str(HERE))

from _data import load_average  # noqa: E402

RESULTS = HERE / "results"
#: Short settings (scale.py's for ai-kmeans and dti-kmeans); predict's work is what is timed.
SETTINGS = {"ai-kmeans": {"steps": 10, "affine_steps": 10, "max_iter": 5, "predict_steps": 30},
            "dti-kmeans": {"max_epochs": 20}, "st-kmeans": {"max_iter": 5}, "pssc": {}}


def without_map(result):
    """The result as saved before maps were made: predict then places nothing."""
    from ticlust.kernels.embedding import EXTRAS

    return dataclasses.replace(result, extras={k: v for k, v in result.extras.items() if k not in EXTRAS},
                               embedding=None, map=None)


def measure(method: str, x: np.ndarray, pairs: int, seed: int) -> dict:
    import ticlust
    from ticlust.api import object_params

    order = np.random.default_rng(seed).permutation(len(x))
    fit, new = np.sort(order[: len(x) // 2]), np.sort(order[len(x) // 2:])
    result = ticlust.fit(x[fit], method=method, k=3, device="cpu", seed=seed, progress=False,
                         **object_params(method, dict(SETTINGS.get(method, {}))))
    plain = without_map(result)
    times = {"plain": [], "map": []}
    for i in range(pairs):
        for name in (("plain", "map") if i % 2 == 0 else ("map", "plain")):
            t = time.perf_counter()
            out = ticlust.predict(plain if name == "plain" else result, x[new], device="cpu")
            times[name].append(time.perf_counter() - t)
            assert (out.map is None) == (name == "plain")
    ratios = np.array(times["map"]) / np.array(times["plain"])
    return {"method": method, "objects": len(new), "plain": float(np.median(times["plain"])),
            "map": float(np.median(times["map"])), "ratio": float(np.median(ratios)),
            "ratios": [round(float(r), 3) for r in ratios], "load": load_average()}


def main() -> None:
    from object_map_quality import field

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--methods", nargs="+", default=["ai-kmeans", "st-kmeans", "pssc", "dti-kmeans"])
    ap.add_argument("--objects", type=int, default=400, help="nuclei in the generated field (half are predicted)")
    ap.add_argument("--pairs", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(RESULTS / "map_overhead.md"))
    args = ap.parse_args()
    x = field("outline", args.seed, args.objects)[0]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=HERE).stdout.strip() or "?"
    lines = ["# The object map's share of predict (`python benchmarks/map_overhead.py`)", "",
             f"{datetime.now():%Y-%m-%d %H:%M}, ticlust {commit}; {os.cpu_count()} cores shared with other jobs, run "
             f"under the benchmark lock; {args.pairs} pairs per method (predict without the map, with it; the order "
             "alternates). Seconds are medians; the ratio is the median of the per-pair ratios.", "",
             "| method | objects predicted | without map s | with map s | with / without | per-pair ratios | load |",
             "|---|---|---|---|---|---|---|"]
    for method in args.methods:
        r = measure(method, x, args.pairs, args.seed)
        print(r, flush=True)
        lines.append(f"| {method} | {r['objects']} | {r['plain']:.2f} | {r['map']:.2f} | {r['ratio']:.3f} | "
                     f"{', '.join(map(str, r['ratios']))} | {r['load']} |")
        Path(args.out).write_text("\n".join(lines) + "\n")
    print(Path(args.out).read_text())


if __name__ == "__main__":
    main()
