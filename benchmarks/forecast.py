"""How well ``events.Forecast`` foretells a Lloyd-type fit's iterations: the label changes of real fits are logged
(ai-kmeans and st-kmeans on MNIST, rigid-kmeans on rotated MNIST and on generated nuclei crops), then at each
iteration the forecast of the iterations left is compared with the iterations the fit really took after it.

    python benchmarks/forecast.py --log changes.jsonl          # fit and log every trajectory (a few minutes)
    python benchmarks/forecast.py --score changes.jsonl        # the forecast of this checkout against the logged fits

Scores: the median and geometric mean of forecast / real iterations left, and the share of iterations where the
forecast was within a factor 2 (what the ETA's total rests on).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _data import data_dir  # noqa: E402


def trajectories(folder: Path):
    """(method, n, seed, settle, [changes per iteration, None where a Lloyd run starts]) of each fit."""
    import torch

    import ticlust
    import ticlust.events as events
    import rotation
    from ticlust.datasets.nuclei import nuclei_sample

    log: list = []
    settles: list = []
    plain_init, plain_total = events.Forecast.__init__, events.Forecast.total

    def init(self, most, settle=0):
        settles.append(settle)
        plain_init(self, most, settle)

    def total(self, changed):
        log.append(changed)
        return plain_total(self, changed)
    events.Forecast.__init__, events.Forecast.total = init, total
    torch.set_num_threads(2)
    with np.load(folder / "mnist.npz") as d:
        digits = d["x_train"][:2000].astype(np.float32) / 255.0
    turned, _ = rotation.rotated_mnist(2000, data=str(folder))
    nuclei = np.concatenate([nuclei_sample(seed=s, n=300)[0] for s in range(7)])[:2000]
    cases = [("ai-kmeans", digits[:1000], 10), ("st-kmeans", digits[:600], 10), ("ai-kmeans", digits, 10),
             ("st-kmeans", digits, 10), ("rigid-kmeans", turned, 10), ("rigid-kmeans", nuclei, 3)]
    for method, x, k in cases:
        for seed in (0, 1):
            log.clear()
            settles.clear()
            ticlust.fit(x, method, k=k, device="cpu", seed=seed, progress=False)
            yield {"method": method, "n": len(x), "seed": seed, "settle": settles[0], "changes": list(log)}


def runs(rows):
    """Each Lloyd run of each logged fit: (settle, its changes), split where a run starts (None)."""
    for row in rows:
        run: list = []
        for c in row["changes"]:
            if c is None and run:
                yield row["settle"], run
                run = []
            run.append(c)
        yield row["settle"], run


def score(rows, most: int = 20) -> dict:
    from ticlust.events import Forecast

    ratios = []
    for settle, run in runs(rows):
        forecast = Forecast(most, settle=settle)
        for i, c in enumerate(run):
            said, left = forecast.total(c) - (i + 1), len(run) - (i + 1)
            if left > 0 and i >= 1:
                ratios.append(max(said, 0.5) / left)
    r = np.asarray(ratios)
    return {"iterations": len(r), "median": round(float(np.median(r)), 2),
            "geometric_mean": round(float(math.exp(np.log(r).mean())), 2),
            "within_2x": round(float(((r >= 0.5) & (r <= 2)).mean()), 2)}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--log", type=Path, help="fit the cases and write their trajectories here")
    ap.add_argument("--score", type=Path, help="score this checkout's Forecast on these trajectories")
    ap.add_argument("--data-dir")
    args = ap.parse_args(argv)
    if args.log:
        with open(args.log, "w") as fh:
            for row in trajectories(data_dir(args.data_dir)):
                fh.write(json.dumps(row) + "\n")
                print(json.dumps(row), flush=True)
    if args.score:
        rows = [json.loads(line) for line in open(args.score)]
        for family in ("ai-kmeans", "st-kmeans", "rigid-kmeans"):
            print(family, json.dumps(score([r for r in rows if r["method"] == family])))


if __name__ == "__main__":
    main()
