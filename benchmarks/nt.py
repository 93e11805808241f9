"""Benchmark of the NT clustering method (paper 004): Tables 1, 2 and 5 on COIL-20, plus USPS and MNIST-test.

    python benchmarks/nt.py [--data-dir DIR] [--device cpu|cuda|auto] [--threads 2] [--max-iter 100]
                            [--datasets coil20,usps,mnist] [--knn] [--subsample N] [--set name=value ...]

Writes benchmarks/results/nt.md: CA (Hungarian), majority ACC, NMI, ARI, wall time, time per iteration,
peak memory, kappa(A), mu(A), beside the paper's numbers, and (with --knn) the k-NN table (Table 5).
"""
from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parents[1] / "src"))

import torch  # noqa: E402

import ticlust  # noqa: E402
from ticlust.evaluation import knn_evaluate  # noqa: E402
from ticlust.metrics import evaluate  # noqa: E402
from _data import data_dir  # noqa: E402  (benchmarks/ is on sys.path when run as a script)

PAPER = {"coil20": {"ca": 89.2, "nmi": 91.2, "t": 46, "kappa": 16, "mu": ".2e-5", "knn_nt": 97.1, "knn_od": 94.0}}



def load(name: str, root: Path, subsample: int | None, seed: int):
    if name == "coil20":
        d = np.load(root / "coil20_32x32.npz")
        x, y = d["images"], d["labels"]
    elif name == "usps":
        d = np.load(root / "usps.npz")
        keys = d.files
        xk = [k for k in keys if k.startswith("x")]
        yk = [k for k in keys if k.startswith("y")]
        x = np.concatenate([d[k] for k in sorted(xk)])
        y = np.concatenate([d[k] for k in sorted(yk)])
    elif name == "mnist":
        d = np.load(root / "mnist.npz")
        x, y = d["x_test"], d["y_test"]
    else:
        raise SystemExit(f"unknown dataset {name}")
    if subsample and subsample < len(x):
        idx = np.sort(np.random.default_rng(seed).choice(len(x), subsample, replace=False))
        x, y = x[idx], y[idx]
    return x, y


def load_avg() -> str:
    return " / ".join(f"{v:.1f}" for v in os.getloadavg())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--datasets", default="coil20,usps,mnist")
    ap.add_argument("--subsample", type=int, default=0, help="random subset size for USPS / MNIST (0 = all)")
    ap.add_argument("--max-iter", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--knn", action="store_true", help="also the k-NN table (Table 5) on COIL-20")
    ap.add_argument("--set", nargs="*", default=[], help="method parameters name=value")
    ap.add_argument("--out", default=str(HERE.parent / "results" / "nt.md"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    root = data_dir(args.data_dir)
    params = dict(s.split("=", 1) for s in args.set)
    params["max_iter"] = args.max_iter
    rows = []
    for name in [d for d in args.datasets.split(",") if d]:
        x, y = load(name, root, args.subsample if name != "coil20" else 0, args.seed)
        load_before = load_avg()
        t0 = time.perf_counter()
        res = ticlust.fit(x, method="nt", k=int(len(np.unique(y))), device=args.device, seed=args.seed,
                          progress=False, **params)
        wall = time.perf_counter() - t0
        ev = evaluate(y, res.labels)
        rows.append({"data": f"{name} ({len(x)}x{'x'.join(map(str, x.shape[1:]))})", **ev, "wall": wall,
                     "iters": len(res.history) - 1, "t_iter": res.timing.get("per_iteration_s", float("nan")),
                     "kappa": float(res.extras["condition_number"]), "mu": float(res.extras["mutual_coherence"]),
                     "m": int(res.extras["m"]), "load": f"{load_before} -> {load_avg()}",
                     "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                     "sizes": np.bincount(res.labels, minlength=res.k).tolist(), "paper": PAPER.get(name, {})})
        print(rows[-1], flush=True)
    knn = None
    if args.knn:
        x, y = load("coil20", root, 0, args.seed)
        rng = np.random.default_rng(args.seed)
        perm = rng.permutation(len(x))
        tr, te = perm[: len(x) * 4 // 5], perm[len(x) * 4 // 5:]
        t0 = time.perf_counter()
        out = knn_evaluate(x[tr], y[tr], x[te], y[te], k=20, n_neighbors=1, device=args.device, seed=args.seed,
                              **params)
        knn = {"acc_nt": out["acc_nt"], "acc_raw": out["acc_raw"], "wall": time.perf_counter() - t0,
               "n_train": len(tr), "n_test": len(te)}
        print(knn, flush=True)
    write(args, rows, knn)


def write(args, rows, knn) -> None:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=HERE.parent).stdout.strip()
    lines = ["# NT clustering (paper 004) — benchmark", "",
             f"`python benchmarks/nt.py {' '.join(sys.argv[1:])}` — commit {commit}, device {args.device}, "
             f"torch threads {args.threads}, seed {args.seed}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. ",
             "Load average (1/5/15 min) before -> after each run is given: the 2-core machine was shared with other "
             "jobs, so times are inflated accordingly.", "",
             "| data | M | iters | CA % (paper) | majority ACC % | NMI % (paper) | ARI | wall s | s/iter (paper) | "
             "kappa(A) (paper) | mu(A) (paper) | peak RSS MB | load |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    if not rows:
        lines = lines[:5]
    for r in rows:
        p = r["paper"]
        lines.append(
            f"| {r['data']} | {r['m']} | {r['iters']} | {100 * r['acc']:.1f} ({p.get('ca', '—')}) | "
            f"{100 * r['acc_majority']:.1f} | {100 * r['nmi']:.1f} ({p.get('nmi', '—')}) | {r['ari']:.3f} | "
            f"{r['wall']:.0f} | {r['t_iter']:.1f} ({p.get('t', '—')}) | {r['kappa']:.1f} ({p.get('kappa', '—')}) | "
            f"{r['mu']:.3f} ({p.get('mu', '—')}) | {r['peak_mb']:.0f} | {r['load']} |")
    if rows:
        lines += ["", "Cluster sizes:", ""] + [f"- {r['data']}: {r['sizes']}" for r in rows]
    if knn:
        lines += ["", "## k-NN (Table 5), COIL-20, 80/20 split, 1-NN", "",
                  "| | NT representation | original data |", "|---|---|---|",
                  f"| ticlust | {100 * knn['acc_nt']:.1f} | {100 * knn['acc_raw']:.1f} |",
                  f"| paper | {PAPER['coil20']['knn_nt']} | {PAPER['coil20']['knn_od']} |", "",
                  f"({knn['n_train']} train / {knn['n_test']} test, {knn['wall']:.0f} s.)"]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.exists() and args.datasets != "coil20,usps,mnist":
        lines = [out.read_text().rstrip(), "", "---", ""] + lines
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
