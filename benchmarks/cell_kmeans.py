"""cell-kmeans on real cells beside pixel K-means and PCA(50) + K-means, the protocol of benchmarks/real_cells.py
(issue 52): the imaging-flow-cytometry cells (shared/datasets/real_ifc_cellcycle.npz), a seeded subset of 1,500
(``np.random.default_rng(0).choice``), K = 7, seeds 0-2, ``ticlust.metrics.evaluate``. Accuracy only (no lock
needed); one line per (route, parameters) appended to benchmarks/results/cell_kmeans.jsonl and printed.

    PYTHONPATH=src python benchmarks/cell_kmeans.py                         # cell-kmeans with its defaults
    PYTHONPATH=src python benchmarks/cell_kmeans.py --set scale=0 --set detail=false
    PYTHONPATH=src python benchmarks/cell_kmeans.py --route pixel-kmeans
    PYTHONPATH=src python benchmarks/cell_kmeans.py --npz OTHER.npz --k 8    # images (N, H, W[, C]), labels
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from _data import data_dir, load_average  # noqa: E402  (benchmarks/ is on sys.path when run as a script)

RESULTS = Path(__file__).resolve().parent / "results" / "cell_kmeans.jsonl"


def load(args) -> tuple[np.ndarray, np.ndarray, str]:
    path = Path(args.npz) if args.npz else data_dir(args.data_dir) / "real_ifc_cellcycle.npz"
    d = np.load(path, allow_pickle=False)
    images, labels = d["images"], d["labels"]
    if args.subset and args.subset < len(labels):
        keep = np.random.default_rng(0).choice(len(labels), args.subset, replace=False)
        images, labels = images[keep], labels[keep]
    return images, labels, path.stem


def fit_labels(route: str, images: np.ndarray, k: int, seed: int, params: dict) -> np.ndarray:
    if route == "cell-kmeans":
        import ticlust

        return ticlust.fit(images, method="cell-kmeans", k=k, seed=seed, device="cpu", **params).labels
    from sklearn.cluster import KMeans
    from sklearn.decomposition import PCA

    x = images.reshape(len(images), -1).astype(np.float32)
    if route == "pca-kmeans":
        x = PCA(50, random_state=seed).fit_transform(x)
    return KMeans(k, n_init=10, random_state=seed).fit_predict(x)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--route", default="cell-kmeans", choices=("cell-kmeans", "pixel-kmeans", "pca-kmeans"))
    p.add_argument("--set", action="append", default=[], help="a cell-kmeans parameter, name=value")
    p.add_argument("--npz"), p.add_argument("--data-dir")
    p.add_argument("--subset", type=int, default=1500)
    p.add_argument("--k", type=int, default=7)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    args = p.parse_args()
    from ticlust.metrics import evaluate

    images, labels, name = load(args)
    params = dict(s.split("=", 1) for s in args.set)
    rows = []
    for seed in args.seeds:
        start = time.process_time()
        scores = evaluate(labels, fit_labels(args.route, images, args.k, seed, params))
        rows.append({**scores, "cpu_s": time.process_time() - start, "seed": seed})
    line = {"set": name, "items": len(labels), "k": args.k, "route": args.route, "params": params,
            "load": load_average(), "runs": rows}
    with RESULTS.open("a") as f:
        f.write(json.dumps(line) + "\n")
    mean = {m: float(np.mean([r[m] for r in rows])) for m in ("acc", "nmi", "ari", "cpu_s")}
    sd = {m: float(np.std([r[m] for r in rows])) for m in ("acc", "nmi", "ari")}
    print(f"{name} {args.route} {params}: " + ", ".join(f"{m.upper()} {mean[m]:.3f} ± {sd[m]:.3f}" for m in sd)
          + f", {mean['cpu_s']:.0f} CPU s a fit (load {line['load']})")


if __name__ == "__main__":
    main()
