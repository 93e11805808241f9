"""What the object map adds to predict, timed in one process (the budget: at most 10 % for ai, st, pssc and dti).

Objects of a generated field of nuclei (outline kinds, cut by the objects route as in object_map_quality.py); each
method is fitted once on a seeded half (short settings, as scale.py's), then the other half is predicted ``--reps``
times through the execution seam as ``ticlust.predict`` runs it, its two steps timed apart: the method's predict
(``Method.predict``) and the map's step after it (``Method.extend_map``: the embedding and the place of every
object). Timed as this process's CPU time (``time.process_time``) with torch on one thread, so that other jobs on a
shared machine, which stretch wall times by a factor of several, hardly move the numbers; the wall times are shown
beside. Reported: the medians, the map's share (map / predict, the median of the per-run ratios) and the load.

  flock /work/wt/bench.lock python benchmarks/map_overhead.py --methods ai-kmeans st-kmeans pssc dti-kmeans
"""
from __future__ import annotations

import argparse
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


def measure(method: str, x: np.ndarray, reps: int, seed: int) -> dict:
    import torch

    import ticlust
    from ticlust.api import fitted_scale, object_params, prepare
    from ticlust.core.execute import Job, execute
    from ticlust.methods import get_method

    order = np.random.default_rng(seed).permutation(len(x))
    fit, new = np.sort(order[: len(x) // 2]), np.sort(order[len(x) // 2:])
    result = ticlust.fit(x[fit], method=method, k=3, device="cpu", seed=seed, progress=False,
                         **object_params(method, dict(SETTINGS.get(method, {}))))
    spec = get_method(method)
    items = fitted_scale(prepare(x[new], spec, to_predict=True), result)
    times = {"predict_cpu": [], "map_cpu": [], "predict_wall": [], "map_wall": []}

    def work(dev, _seed):
        c, w = time.process_time(), time.perf_counter()
        out = spec.predict(result, items, dev, None)
        times["predict_cpu"].append(time.process_time() - c)
        times["predict_wall"].append(time.perf_counter() - w)
        c, w = time.process_time(), time.perf_counter()
        out = spec.extend_map(result, out, items, dev)
        times["map_cpu"].append(time.process_time() - c)
        times["map_wall"].append(time.perf_counter() - w)
        assert out.map is not None and len(out.map) == len(new)
        return out

    torch.set_num_threads(1)
    for _ in range(reps + 1):                          # the first run's one-time costs are dropped
        execute(Job(work, device="cpu", losses=False))
    t = {k: np.array(v[1:]) for k, v in times.items()}
    return {"method": method, "objects": len(new), **{k: float(np.median(v)) for k, v in t.items()},
            "share": float(np.median(t["map_cpu"] / t["predict_cpu"])),
            "shares": [round(float(r), 3) for r in t["map_cpu"] / t["predict_cpu"]], "load": load_average()}


def main() -> None:
    from object_map_quality import field

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--methods", nargs="+", default=["ai-kmeans", "st-kmeans", "pssc", "dti-kmeans"])
    ap.add_argument("--objects", type=int, default=800, help="nuclei in the generated field (half are predicted)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(RESULTS / "map_overhead.md"))
    args = ap.parse_args()
    x = field("outline", args.seed, args.objects)[0]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=HERE).stdout.strip() or "?"
    lines = ["# The object map's share of predict (`python benchmarks/map_overhead.py`)", "",
             f"{datetime.now():%Y-%m-%d %H:%M}, ticlust {commit}; {os.cpu_count()} cores shared with other jobs, run "
             f"under the benchmark lock; {args.reps} predicts per method, torch on one thread. Seconds are medians; the "
             "map's share is the median of the per-run ratios map CPU s / predict CPU s.", "",
             "| method | objects predicted | predict CPU s | map CPU s | map's share | per-run shares | predict / map "
             "wall s | load |", "|---|---|---|---|---|---|---|---|"]
    for method in args.methods:
        r = measure(method, x, args.reps, args.seed)
        print(r, flush=True)
        lines.append(f"| {method} | {r['objects']} | {r['predict_cpu']:.2f} | {r['map_cpu']:.3f} | "
                     f"{100 * r['share']:.1f} % | {', '.join(map(str, r['shares']))} | "
                     f"{r['predict_wall']:.2f} / {r['map_wall']:.3f} | {r['load']} |")
        Path(args.out).write_text("\n".join(lines) + "\n")
    print(Path(args.out).read_text())


if __name__ == "__main__":
    main()
