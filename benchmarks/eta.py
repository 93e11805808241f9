"""How honest each aligning method's ETA is: one fit per method on a small real or generated set, every Progress
recorded as the dock receives it (``api.run``: the execution seam's events with ``with_eta`` filled in), then per
method: when the first ETA came (seconds and fraction of the run), that first ETA against the time really left,
how far off the ETA was over the run (time-weighted: at each moment, the last ETA shown against the time then left)
and whether every Progress names its stage.

    flock /work/wt/bench.lock env PYTHONPATH=src python benchmarks/eta.py [--methods a,b] [--label after]
    python benchmarks/eta.py --report          # the tables of every run recorded, one per label

Each fit's raw events go to results/eta.jsonl (with the label, the machine and its load before and after); --report
writes the Markdown tables of results/eta.md from them.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

import numpy as np

from _data import data_dir, load_average

import ticlust.api as api
from ticlust.datasets.nuclei import nuclei_sample
from ticlust.datasets.shapes import sample_landmarks
from ticlust.events import Done, Progress

#: The grid of moments the shown ETA is read at (fractions of the run).
GRID = 200


def mnist(n: int, folder: Path) -> np.ndarray:
    with np.load(folder / "mnist.npz") as d:
        return np.asarray(d["x_train"][:n], np.float32) / 255.0


def nuclei(n: int) -> np.ndarray:
    """``n`` nuclei crops (three kinds) from as many generated fields as it takes."""
    parts, seed = [], 0
    while sum(len(p) for p in parts) < n:
        parts.append(nuclei_sample(seed=seed, n=300)[0])
        seed += 1
    return np.concatenate(parts)[:n]


def shapes(n: int) -> np.ndarray:
    return sample_landmarks(seed=0, n=n)[0]


#: method -> (data maker, K, parameters): sizes chosen for 10-60 s fits on two shared cores.
CASES = {
    "ai-kmeans": (lambda d: mnist(4000, d), 10, {}),      # 4,000 and 2,000 since the Gauss-Newton fit: the sizes
    "st-kmeans": (lambda d: mnist(2000, d), 10, {}),      # before (1,000 and 600) ran 2-4 s, mostly "estimating…"
    "rigid-kmeans": (lambda d: nuclei(5000), 3, {}),      # (5,000: 3,000 ran 2.4 s since the rigid search's speed-up)
    "rigid-kmeans+affine": (lambda d: nuclei(1500), 3, {"refine": "affine"}),
    "rigid-spectral": (lambda d: mnist(6000, d), 10, {}),
    "rigid-pssc": (lambda d: mnist(2000, d), 10, {}),
    "dti-kmeans": (lambda d: mnist(400, d), 10, {"max_epochs": 20, "final_epochs": 3, "min_stage_epochs": 3}),
    "dti-gmm": (lambda d: mnist(400, d), 10, {"max_epochs": 20, "final_epochs": 3, "min_stage_epochs": 3}),
    "procrustes-kmeans": (lambda d: shapes(100000), 3, {}),
    "shape-kmeans": (lambda d: shapes(8000), 3, {}),
    "nt": (lambda d: mnist(1000, d).reshape(1000, -1), 10, {"max_iter": 10}),
}


def record(name: str, folder: Path) -> dict:
    """One fit through ``api.run``; every Progress as (seconds since the call, step, total, stage, eta)."""
    make, k, params = CASES[name]
    data = make(folder)
    method = name.split("+")[0]
    events, load, start = [], load_average(), time.perf_counter()
    for event in api.run(data, method, k, device="cpu", seed=0, **params):
        now = time.perf_counter() - start
        if isinstance(event, Progress):
            events.append((now, event.step, event.total, event.stage, event.eta))
        elif isinstance(event, Done):
            end = now
    return {"method": name, "n": int(len(data)), "k": k, "params": params, "seconds": end, "events": events,
            "load": f"{load} → {load_average()}", "machine": f"{platform.processor() or platform.machine()}, "
            f"{len(os.sched_getaffinity(0))} cores"}


def summary(run: dict) -> dict:
    """The table's row for one recorded run."""
    end, events = run["seconds"], run["events"]
    first = next(((t, eta) for t, _, _, _, eta in events if eta is not None), None)
    shown, within = [], 0
    for i in range(GRID):                         # what the dock shows at moment t: the last event's ETA
        t = end * (i + 0.5) / GRID
        last = [e for e in events if e[0] <= t]
        if not last or last[-1][4] is None:
            continue
        t_event, eta = last[-1][0], last[-1][4]
        left = max(end - t_event, 1e-3)
        shown.append((eta / left, abs(eta - left)))
        within += 0.5 <= eta / left <= 2.0
    stages = []
    for *_, stage, _ in events:
        key = "".join(ch for ch in stage if not ch.isdigit())
        if not stages or stages[-1][0] != key:
            stages.append([key, stage, 0])
        stages[-1][2] += 1
    return {"method": run["method"], "n": run["n"], "seconds": end, "progress": len(events),
            "first_eta_s": None if first is None else first[0],
            "first_eta_frac": None if first is None else first[0] / end,
            "first_ratio": None if first is None else first[1] / max(end - first[0], 1e-3),
            "shown_frac": len(shown) / GRID, "within_2x_frac": within / GRID,
            "median_ratio": statistics.median(r for r, _ in shown) if shown else None,
            "median_abs_err_s": statistics.median(e for _, e in shown) if shown else None,
            "named": all(e[3].strip() for e in events),
            "stages": " → ".join(f"{s[1]}×{s[2]}" for s in stages)}


def fmt(v, spec):
    return "—" if v is None else format(v, spec)


def table(rows: list[dict], header: str) -> str:
    lines = [header, "", "| method | items | fit s | Progress events | first ETA at s (of run) | first ETA / real time left "
             "| ETA shown (of run) | within 2x (of run) | median ETA / left | median abs error s | stage named | load 1/5/15 |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|"]
    for r in rows:
        lines.append(f"| {r['method']} | {r['n']} | {r['seconds']:.1f} | {r['progress']} | {fmt(r['first_eta_s'], '.1f')} "
                     f"({fmt(r['first_eta_frac'], '.0%')}) | {fmt(r['first_ratio'], '.2f')} | {r['shown_frac']:.0%} | "
                     f"{r['within_2x_frac']:.0%} | {fmt(r['median_ratio'], '.2f')} | {fmt(r['median_abs_err_s'], '.1f')} | "
                     f"{'yes' if r['named'] else 'NO'} | {r['load']} |")
    lines += ["", "Stages in order (a stage's name as first shown × its Progress events; names equal up to digits are one "
              "stage):", ""]
    lines += [f"- {r['method']}: {r['stages'][:700]}" for r in rows]
    return "\n".join(lines) + "\n"


def report(raw: Path) -> str:
    """One table per label, the runs in the order recorded."""
    runs = [json.loads(line) for line in raw.read_text().splitlines() if line.strip()]
    out = []
    for label in dict.fromkeys(r["label"] for r in runs):
        mine = [r for r in runs if r["label"] == label]
        out.append(table([{**summary(r), "load": r["load"]} for r in mine], f"## {label or 'ETA'}: {mine[0]['machine']}"))
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", default=",".join(CASES))
    parser.add_argument("--data-dir")
    parser.add_argument("--raw", default=str(Path(__file__).parent / "results" / "eta.jsonl"))
    parser.add_argument("--label", default="", help="a word for the runs (e.g. before/after): one table each")
    parser.add_argument("--report", action="store_true", help="print the tables of the runs recorded in --raw")
    args = parser.parse_args()
    if args.report:
        print(report(Path(args.raw)))
        return
    folder = data_dir(args.data_dir)
    for name in args.methods.split(","):
        run = {**record(name, folder), "label": args.label}
        with Path(args.raw).open("a") as f:
            f.write(json.dumps(run) + "\n")
        print(table([{**summary(run), "load": run["load"]}], name), flush=True)


if __name__ == "__main__":
    main()
