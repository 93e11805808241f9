"""Shape table (issue 15 item 4): every shape-kmeans variant beside procrustes-kmeans on every labelled
landmark set in shared/datasets, ARI (mean and sd over seeds) and seconds per fit.

    python benchmarks/shape_table.py                      # everything -> results/shape_table.md
    python benchmarks/shape_table.py --sets mice,rats8 --seeds 3

Also, per set, the objective at the true partition against the one the method found (the
diagnosis: when the truth scores *better* than the found partition the search failed; when it
scores worse, the objective itself prefers another partition and no start can fix that).
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parents[1] / "src"))

import ticlust  # noqa: E402
from ticlust.transforms.procrustes import procrustes_align  # noqa: E402
from ticlust.methods.shape_kmeans import ShapeKMeansConfig, _final  # noqa: E402
from _data import data_dir, load_average  # noqa: E402

DD2 = dict(distance="fisher-rao-diagonal", type=2)
# column -> (method, parameters, what it is)
VARIANTS = {
    "pk": ("procrustes-kmeans", {}, "procrustes-kmeans (GPA with scale, K-means, k-means++ x 10)"),
    "dd2": ("shape-kmeans", dict(DD2, combine="l1"), "the paper's default: Fisher–Rao diagonal, Type II, L1 (Eq. 13)"),
    "dd1": ("shape-kmeans", dict(distance="fisher-rao-diagonal", type=1, combine="l1"), "Fisher–Rao diagonal, Type I, L1"),
    "dr": ("shape-kmeans", dict(distance="fisher-rao-round", type=1, combine="l1"), "Fisher–Rao round (pooled), Type I, L1"),
    "dw": ("shape-kmeans", dict(distance="wasserstein", type=1, combine="l1"), "Wasserstein, Type I, L1"),
    "dd2-l2": ("shape-kmeans", dict(DD2, combine="l2"), "dd2 with L2 over landmarks (Eq. 14)"),
    "dw-l2": ("shape-kmeans", dict(distance="wasserstein", type=1, combine="l2"), "dw with L2 (= Euclidean K-means from random partitions)"),
    "dd2++": ("shape-kmeans", dict(DD2, combine="l1", init="k-means++"), "dd2 started from k-means++ partitions"),
    "dw++": ("shape-kmeans", dict(distance="wasserstein", type=1, combine="l1", init="k-means++"), "dw started from k-means++"),
    "pk-form": ("procrustes-kmeans", dict(scale=False), "procrustes-kmeans without scaling (form: size counts)"),
    "dd2-form": ("shape-kmeans", dict(DD2, combine="l1", scale=False), "dd2 without scaling (form)"),
    "dw-form": ("shape-kmeans", dict(distance="wasserstein", type=1, combine="l1", scale=False), "dw without scaling (form)"),
}


def load_sets(ddir: Path) -> dict:
    rats = np.load(ddir / "landmarks_rats.npz")
    mice = np.load(ddir / "landmarks_mice_t2.npz")
    scz = np.load(ddir / "landmarks_schizophrenia.npz")
    cells = np.load(ddir / "osteosarcoma_cells.npz")
    young = rats["labels"] <= 1
    return {
        "rats7v14": ("rat ages 7 vs 14 days", rats["landmarks"][young], rats["labels"][young]),
        "rats8": ("rat ages, all eight", rats["landmarks"], rats["labels"]),
        "mice": ("mice T2: control / large / small", mice["landmarks"], mice["labels"]),
        "scz": ("schizophrenia: controls / patients", scz["landmarks"], scz["labels"]),
        "cell-line": ("osteosarcoma contours by cell line", cells["contours_resampled"], cells["cell_line"]),
        "treatment": ("osteosarcoma contours by treatment", cells["contours_resampled"], cells["treatment"]),
    }


def objective_at(method: str, params: dict, x: np.ndarray, labels: np.ndarray, k: int) -> float:
    """The method's own objective for a given partition: K-means inertia on the aligned coordinates,
    or shape-kmeans' total distance (centres and variances re-estimated from the partition)."""
    scale = params.get("scale", True)
    aligned = procrustes_align(x, scale=scale).aligned
    if method == "procrustes-kmeans":
        return float(sum(((aligned[labels == g] - aligned[labels == g].mean(0)) ** 2).sum() for g in range(k)))
    names = {f.name for f in dataclasses.fields(ShapeKMeansConfig)}
    cfg = ShapeKMeansConfig(k=k, **{key: v for key, v in params.items() if key in names})
    centred = aligned - aligned.reshape(-1, 2).mean(0)
    t = torch.from_numpy(centred).double()
    return float(_final(cfg, t, torch.from_numpy(labels.astype(np.int64))[None])[3][0])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--sets", default=None, help="comma-separated set keys (default: all)")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=str(HERE.parent / "results" / "shape_table.md"))
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    sets = load_sets(data_dir(args.data_dir))
    keys = args.sets.split(",") if args.sets else list(sets)
    variants = [v for v in args.variants.split(",") if v]
    load0 = load_average()
    ari, secs, diag = {}, {}, {}
    for key in keys:
        name, x, y = sets[key]
        k = len(np.unique(y))
        for v in variants:
            method, params, _ = VARIANTS[v]
            scores, times, best = [], [], None
            for seed in range(args.seeds):
                t0 = time.perf_counter()
                r = ticlust.fit(x, method, k=k, device="cpu", seed=seed, progress=False, **params)
                times.append(time.perf_counter() - t0)
                scores.append(ticlust.evaluate(y, r.labels)["ari"])
                if best is None or r.final_loss < best.final_loss:
                    best = r
            ari[key, v], secs[key, v] = scores, times
            if v in ("pk", "dd2", "dw", "dd2-l2", "pk-form", "dd2-form"):
                diag[key, v] = (objective_at(method, params, x, y, k), objective_at(method, params, x, best.labels, k))
            print(f"{key:10s} {v:9s} ARI {np.mean(scores):.3f} ± {np.std(scores):.3f}  {np.mean(times):.2f} s/fit  load {load_average()}",
                  flush=True)
    lines = ["# Shape table: shape-kmeans variants beside procrustes-kmeans (issue 15 item 4)", "",
             f"CPU, torch threads {args.threads}, load average at start {load0}, at end {load_average()} (2-core machine "
             f"shared with other jobs: times are inflated and noisy). ARI: mean ± sd over seeds 0-{args.seeds - 1} "
             "(every variant has random starts); K = the number of groups. `python benchmarks/shape_table.py`.", "",
             "Variants:", ""]
    lines += [f"- `{v}`: {VARIANTS[v][2]}" for v in variants]
    lines += ["", "## ARI (mean ± sd over seeds)", "",
              "| set | n | L | K | " + " | ".join(variants) + " |", "|---" * (len(variants) + 4) + "|"]
    for key in keys:
        name, x, y = sets[key]
        cells = []
        for v in variants:
            best_here = max(np.mean(ari[key, w]) for w in variants)
            text = f"{np.mean(ari[key, v]):.2f} ± {np.std(ari[key, v]):.2f}"
            cells.append(f"**{text}**" if np.mean(ari[key, v]) >= best_here - 1e-9 else text)
        lines.append(f"| {name} | {x.shape[0]} | {x.shape[1]} | {len(np.unique(y))} | " + " | ".join(cells) + " |")
    lines += ["", "## Seconds per fit (mean over seeds)", "", "| set | " + " | ".join(variants) + " |",
              "|---" * (len(variants) + 1) + "|"]
    for key in keys:
        lines.append(f"| {sets[key][0]} | " + " | ".join(f"{np.mean(secs[key, v]):.2f}" for v in variants) + " |")
    if diag:
        dv = [v for v in ("pk", "dd2", "dw", "dd2-l2", "pk-form", "dd2-form") if v in variants]
        lines += ["", "## Objective at the true partition / at the found one (lowest-loss seed)", "",
                  "Below 1: the truth scores better than what the search found (a search failure); above 1: the "
                  "method's own objective prefers another partition to the truth.", "",
                  "| set | " + " | ".join(dv) + " |", "|---" * (len(dv) + 1) + "|"]
        for key in keys:
            lines.append(f"| {sets[key][0]} | " + " | ".join(f"{diag[key, v][0] / diag[key, v][1]:.3f}" for v in dv) + " |")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
