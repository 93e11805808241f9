"""Predict rates of the aligning methods (issue "Plates and a million objects", item 5): objects/s, ACC beside the
exact predict, and the fit-sample items whose cluster predict changes.

  python benchmarks/predict_rates.py [--quick] [--methods ai-kmeans st-kmeans dti-kmeans pssc] [--threads 2]

Two kinds of data, each fitted once per method on a sample and predicted on held-back items:
  mnist   MNIST 32×32 (the 28×28 digits zero-padded by 2 pixels), K = 10: fit on the first --fit items of a
          seeded shuffle of MNIST-test, predict the next --new items;
  nuclei  generated nuclei fields (ticlust.datasets.nuclei: round, elongated, dividing), cut by the objects route with
          its parameters for objects, K = 3: fit on fields seeded 0, 1, ..., predict the objects of fields seeded 10,000, ...
Per (data, method): the fit's settings (short ones for the slow methods, written in the table), predict
objects/s at --threads threads, ACC (Hungarian, against the truth) of the default predict, and for ST/AI
K-means also of the exact predict (``predict_candidates=0``: every centroid aligned in full, as before the
fast path) on the same fitted result, how many held-back items the two assign differently, and how many
fit-sample items each puts into another cluster than the fit did. Results go to
benchmarks/results/predict_rates.md with the machine and its load beside every line (timings under load are
not speed claims: compare the ratio of runs taken back to back).
"""
from __future__ import annotations

import argparse
import dataclasses
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))

import ticlust  # noqa: E402
from ticlust.api import object_params  # noqa: E402
from ticlust.core.atomic import write_atomic  # noqa: E402
from ticlust.metrics import hungarian_accuracy  # noqa: E402
from ticlust.datasets.nuclei import nuclei_field  # noqa: E402
from ticlust.objects.route import objects_route  # noqa: E402

from _data import data_dir, load_average  # noqa: E402

RESULTS = HERE / "results"
METHODS = ("ai-kmeans", "st-kmeans", "dti-kmeans", "pssc")
#: Fit settings: the slow methods' short ones (the defaults are for a full fit); predict keeps its defaults.
FIT = {"ai-kmeans": dict(steps=10, affine_steps=10, max_iter=5),
       "st-kmeans": dict(steps=10, affine_steps=10, max_iter=5),
       "dti-kmeans": dict(max_epochs=20),
       "pssc": {}}
EXACT = {"ai-kmeans", "st-kmeans"}   # methods whose exact predict path is kept beside the fast one


@dataclasses.dataclass
class Data:
    name: str
    k: int
    fit_x: np.ndarray
    fit_y: np.ndarray
    new_x: np.ndarray
    new_y: np.ndarray
    params: dict   # per-method parameter source: "objects" uses the objects route's parameters


def mnist(folder: Path, n_fit: int, n_new: int) -> Data:
    d = np.load(folder / "mnist.npz")
    x, y = np.pad(d["x_test"], ((0, 0), (2, 2), (2, 2))), d["y_test"]
    order = np.random.default_rng(0).permutation(len(x))
    fit, new = order[:n_fit], order[n_fit:n_fit + n_new]
    return Data("mnist", 10, x[fit], y[fit], x[new], y[new], {})


def _nuclei_crops(first_seed: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` objects cut by the objects route from generated fields of 250 nuclei, seeds first_seed, +1, ..."""
    xs, ys, seed = [], [], first_seed
    while sum(len(x) for x in xs) < n:
        f = nuclei_field(n=250, seed=seed)
        route = objects_route(f.image, f.labels, "ai-kmeans")
        xs.append(route.items)
        ys.append(f.kind_of(route.table["label"]))
        seed += 1
    return np.concatenate(xs)[:n], np.concatenate(ys)[:n]


def nuclei(n_fit: int, n_new: int) -> Data:
    """Fit on fields seeded from 0, predict the objects of fields seeded from 10,000 (never the same field)."""
    fit_x, fit_y = _nuclei_crops(0, n_fit)
    new_x, new_y = _nuclei_crops(10_000, n_new)
    return Data("nuclei", 3, fit_x, fit_y, new_x, new_y, {"objects": True})


def _timed_predict(result, x, **config) -> tuple[np.ndarray, float]:
    result.config = {**result.config, **config}
    start = time.perf_counter()
    labels = ticlust.predict(result, x, device="cpu", aligned=False).labels
    return labels, time.perf_counter() - start


def measure(data: Data, method: str) -> dict:
    params = dict(FIT[method])
    if data.params.get("objects"):
        params = object_params(method, params)
    start = time.perf_counter()
    res = ticlust.fit(data.fit_x, method, k=data.k, device="cpu", seed=0, aligned=False, **params)
    row = {"data": data.name, "method": method, "fit_n": len(data.fit_x), "new_n": len(data.new_x),
           "settings": " ".join(f"{k}={v}" for k, v in params.items()), "fit_s": time.perf_counter() - start,
           "load_before": load_average()}
    _timed_predict(res, data.new_x[:8])   # warm-up: one-time set-up costs are not the rate
    labels, seconds = _timed_predict(res, data.new_x)
    row.update(rate=len(data.new_x) / seconds, acc=hungarian_accuracy(data.new_y, labels),
               fit_differ=int((_timed_predict(res, data.fit_x)[0] != res.labels).sum()),
               candidates=res.config.get("predict_candidates", ""), k=data.k)
    if method in EXACT:
        fast = res.config["predict_candidates"]
        exact, exact_s = _timed_predict(res, data.new_x, predict_candidates=0)
        row.update(exact_rate=len(data.new_x) / exact_s, exact_acc=hungarian_accuracy(data.new_y, exact),
                   new_differ=int((exact != labels).sum()),
                   exact_fit_differ=int((_timed_predict(res, data.fit_x)[0] != res.labels).sum()))
        res.config = {**res.config, "predict_candidates": fast}
    row["load_after"] = load_average()
    return row


def table(rows: list[dict]) -> list[str]:
    head = ("| data | method | fit / new items | predict objects/s | ACC | exact objects/s | exact ACC | "
            "held-back differ (fast vs exact) | fit items differ: fast, exact | settings | load before / after |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        exact = (f"{r['exact_rate']:.1f} | {r['exact_acc']:.4f} | {r['new_differ']} | {r['fit_differ']}, {r['exact_fit_differ']}"
                 if "exact_rate" in r else f"– | – | – | {r['fit_differ']}, –")
        cand = f" predict_candidates={r['candidates']}" if r["candidates"] != "" else ""
        if r["candidates"] != "" and r["candidates"] >= r["k"]:
            cand += " (≥ K: every centroid through the fast path's stages)"
        lines.append(f"| {r['data']} | {r['method']} | {r['fit_n']} / {r['new_n']} | {r['rate']:.1f} | {r['acc']:.4f} | "
                     f"{exact} | {r['settings']}{cand} | {r['load_before']} / {r['load_after']} |")
    return lines


def write(out: str, rows: list[dict], argv: list[str]) -> None:
    lines = ["# Predict rates (issue 29 item 5)", "",
             f"`python benchmarks/predict_rates.py {' '.join(argv)}`; {platform.machine()} {platform.processor() or ''}, "
             f"{torch.get_num_threads()} threads, torch {torch.__version__}, {time.strftime('%Y-%m-%d %H:%M')}. Load "
             "averages (1/5/15 min) beside each row: under load the objects/s are not speed claims, the ratio of the "
             "fast and exact columns of one row is (taken back to back).", "", *table(rows), ""]
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    write_atomic(out, lambda tmp: tmp.write_text("\n".join(lines)))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    ap.add_argument("--data", nargs="+", default=["mnist", "nuclei"], choices=["mnist", "nuclei"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--fit", type=int, default=1000, help="fit-sample items")
    ap.add_argument("--new", type=int, default=2000, help="held-back items predicted")
    ap.add_argument("--quick", action="store_true", help="300 fit and 300 held-back items, for development")
    ap.add_argument("--data-dir")
    ap.add_argument("--out", default=str(RESULTS / "predict_rates.md"))
    args = ap.parse_args(argv)
    if args.quick:
        args.fit, args.new = 300, 300
    torch.set_num_threads(args.threads)
    sets = {"mnist": lambda: mnist(data_dir(args.data_dir), args.fit, args.new), "nuclei": lambda: nuclei(args.fit, args.new)}
    rows = []
    for name in args.data:
        data = sets[name]()
        for method in args.methods:
            rows.append(measure(data, method))
            print(table(rows)[-1], flush=True)
            write(args.out, rows, argv if argv is not None else sys.argv[1:])   # after every row: a stopped run keeps its rows
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
