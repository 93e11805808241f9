"""How well the object map keeps kinds apart, and which 2-D layout to extend it with (issue "object map", part 1).

On generated fields with known kinds — outline kinds (ticlust.datasets.nuclei: round, elongated, dividing) and
inner-pattern kinds at random angles (ticlust.datasets.inner_nuclei: uniform, rim, foci, pole inside one outline) —
cut by the objects route (normalize, rescale), a method is fitted on a seeded half of the objects and the other half
is predicted. Measured on the predicted half: ACC (Hungarian) of its clusters, and the map's quality — the fraction of
each object's 15 nearest map neighbours that share its true kind (``kernels.embedding.neighbour_agreement``) — for:

- ``map``: what ticlust ships: the fit's exact t-SNE of a sample of its embedding, new objects placed by k-NN
  interpolation in the embedding (``Method.extend_map``);
- ``pca2``: the embedding's first two principal axes;
- ``umap``: umap-learn fitted on the fit half's embedding, its ``transform`` for the predicted half;
- ``opentsne``: openTSNE fitted on the fit half's embedding, its ``transform`` for the predicted half;
- ``regionprops+umap``: no ticlust at all: skimage ``regionprops_table`` of every object (area, eccentricity,
  solidity, extent, axis lengths, perimeter, intensity mean/max/min/std, weighted Hu moments) standardised, UMAP fitted
  on the fit half and ``transform`` for the rest.

Beside each: the seconds to place the predicted half (``place s``; the map's learning on the fit half is ``learn s``).

  python benchmarks/object_map_quality.py --seeds 0 1 2
"""
from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))

from _data import load_average  # noqa: E402

RESULTS = HERE / "results"
#: (set, method, parameters) measured; the objects route's invariances (similarity) for the aligning ones.
RUNS = (("outline", "rigid-kmeans", {"flip": True}), ("inner", "ai-kmeans", {}),
        ("outline", "ai-kmeans", {}), ("inner", "rigid-kmeans", {"flip": True}))
PROPS = ("area", "eccentricity", "solidity", "extent", "axis_major_length", "axis_minor_length", "perimeter",
         "intensity_mean", "intensity_max", "intensity_min", "intensity_std", "moments_weighted_hu")


def field(kind: str, seed: int, n: int):
    """A generated field of ``n`` nuclei: (crops cut by the objects route, true kinds, regionprops features)."""
    from skimage.measure import regionprops_table

    from ticlust.datasets.inner_nuclei import inner_nuclei_field
    from ticlust.datasets.nuclei import nuclei_field
    from ticlust.objects.route import objects_route

    side = int(64 * np.sqrt(n))
    f = (inner_nuclei_field if kind == "inner" else nuclei_field)(n=n, shape=(side, side), seed=seed)
    got = objects_route(f.image, f.labels, "ai-kmeans", normalize=True, rescale=True)
    labels = np.asarray(got.table["label"])
    table = regionprops_table(f.labels, intensity_image=f.image.astype(np.float64), properties=("label", *PROPS))
    rows = {int(v): i for i, v in enumerate(table["label"])}
    feats = np.stack([np.asarray(v, np.float64) for k, v in table.items() if k != "label"], 1)
    return got.items, f.kind_of(labels), np.nan_to_num(feats[[rows[int(v)] for v in labels]])


def layouts(fit_emb: np.ndarray, new_emb: np.ndarray, seed: int) -> dict:
    """(places of the predicted half, seconds) of the other layouts on the same embedding."""
    import openTSNE
    import umap

    out = {"pca2": (new_emb[:, :2], 0.0)}
    u = umap.UMAP(random_state=seed).fit(fit_emb)
    t = time.perf_counter()
    out["umap"] = (u.transform(new_emb), time.perf_counter() - t)
    e = openTSNE.TSNE(random_state=seed, n_jobs=1, verbose=False).fit(fit_emb)
    t = time.perf_counter()
    out["opentsne"] = (np.asarray(e.transform(new_emb)), time.perf_counter() - t)
    return out


def regionprops_umap(feats: np.ndarray, fit: np.ndarray, new: np.ndarray, seed: int):
    import umap

    z = (feats - feats[fit].mean(0)) / np.where(feats[fit].std(0) > 0, feats[fit].std(0), 1)
    u = umap.UMAP(random_state=seed).fit(z[fit])
    t = time.perf_counter()
    return u.transform(z[new]), time.perf_counter() - t


def one(kind: str, method: str, params: dict, seed: int, n: int) -> list[dict]:
    import torch

    import ticlust
    from ticlust.api import mapped, object_params, prepare
    from ticlust.methods import get_method
    from ticlust.kernels.embedding import neighbour_agreement
    from ticlust.metrics import evaluate
    from ticlust.events import drain

    x, y, feats = field(kind, seed, n)
    order = np.random.default_rng(seed).permutation(len(x))
    fit, new = np.sort(order[: len(x) // 2]), np.sort(order[len(x) // 2:])
    k = int(len(np.unique(y)))
    t = time.perf_counter()
    r = ticlust.fit(x[fit], method=method, k=k, device="cpu", seed=seed, progress=False,
                    **object_params(method, params))
    fit_s = time.perf_counter() - t
    t = time.perf_counter()
    r.embedding = r.map = None
    spec = get_method(method)
    r = drain(mapped(spec, prepare(x[fit], spec), seed)(r, torch.device("cpu")))   # timed alone (a generator of Progress)
    learn_s = time.perf_counter() - t
    t = time.perf_counter()
    p = ticlust.predict(r, x[new], device="cpu")
    predict_s = time.perf_counter() - t
    acc = float(evaluate(y[new], p.labels)["acc"])
    base = {"set": kind, "method": method, "seed": seed, "objects": len(x), "acc": round(acc, 4),
            "fit_s": round(fit_s, 1), "predict_s": round(predict_s, 1), "load": load_average()}
    rows = [{**base, "layout": "map", "agreement": neighbour_agreement(p.map, y[new]), "learn_s": round(learn_s, 1)}]
    for name, (places, secs) in layouts(r.embedding, p.embedding, seed).items():
        rows.append({**base, "layout": name, "agreement": neighbour_agreement(places, y[new]), "place_s": round(secs, 2)})
    places, secs = regionprops_umap(feats, fit, new, seed)
    rows.append({**base, "layout": "regionprops+umap", "agreement": neighbour_agreement(places, y[new]),
                 "place_s": round(secs, 2), "acc": ""})
    return rows


def report(rows: list[dict], args) -> str:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=HERE).stdout.strip() or "?"
    try:
        cpu = next(l.split(":", 1)[1].strip() for l in Path("/proc/cpuinfo").read_text().splitlines()
                   if l.startswith("model name"))
    except (OSError, StopIteration):
        cpu = platform.processor() or platform.machine()
    lines = ["# Object map quality (`python benchmarks/object_map_quality.py`)", "",
             f"{date.today()}, ticlust {commit}; {cpu}, {os.cpu_count()} cores shared with other jobs (load average "
             f"1/5/15 min beside every line); Python {sys.version.split()[0]}. Fields of {args.objects} generated "
             "nuclei cut by the objects route (normalize, rescale; similarity invariances for ai-kmeans); fit on a "
             "seeded half, the other half predicted. agreement = fraction of each predicted object's 15 nearest map "
             "neighbours (among the predicted half) of its true kind; ACC = the predicted half's clusters (Hungarian); "
             "learn s = learning the map on the fit half (features, PCA, t-SNE), place s = placing the predicted "
             "half (the map's is inside predict s).", "",
             "| set | method | seed | objects | ACC | layout | agreement | fit s | predict s | learn / place s | load |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['set']} | {r['method']} | {r['seed']} | {r['objects']} | {r['acc']} | {r['layout']} | "
                     f"{r['agreement']:.3f} | {r['fit_s']} | {r['predict_s']} | {r.get('learn_s', r.get('place_s'))} | "
                     f"{r['load']} |")
    lines += ["", "## Mean agreement over seeds", "", "| set | method | mean ACC | " +
              " | ".join(LAYOUTS) + " |", "|---|---|---|" + "---|" * len(LAYOUTS)]
    for kind, method, _ in RUNS:
        mine = [r for r in rows if r["set"] == kind and r["method"] == method]
        if not mine:
            continue
        accs = [r["acc"] for r in mine if r["layout"] == "map"]
        means = [np.mean([r["agreement"] for r in mine if r["layout"] == lay]) for lay in LAYOUTS]
        lines.append(f"| {kind} | {method} | {np.mean(accs):.3f} (min {min(accs):.3f}) | " +
                     " | ".join(f"{m:.3f}" for m in means) + " |")
    return "\n".join(lines) + "\n"


LAYOUTS = ("map", "pca2", "umap", "opentsne", "regionprops+umap")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--objects", type=int, default=600, help="nuclei per generated field")
    ap.add_argument("--out", default=str(RESULTS / "object_map_quality.md"))
    args = ap.parse_args()
    rows = []
    for seed in args.seeds:
        for kind, method, params in RUNS:
            rows += one(kind, method, params, seed, args.objects)
            print(rows[-6:], flush=True)
            Path(args.out).write_text(report(rows, args))
    print(Path(args.out).read_text())


if __name__ == "__main__":
    main()
