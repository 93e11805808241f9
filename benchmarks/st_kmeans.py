"""ST K-means benchmark (paper 000): K-means vs AI K-means vs ST K-means from the same K-means++ init.

Sections (``--sections``):
  mnist2k   a seeded 2,000-image subset of MNIST-train (train ACC, as the paper's unsupervised setting)
  mnisttest all 10,000 MNIST-test images (train ACC; the issue's GPU-sized run, also feasible on a CPU)
  rigid     Rigid MNIST (App. F) made from MNIST-test digits: fit on train, predict() on test
  nonrigid  Non-rigid MNIST (App. F), same protocol (the acceptance run: ST ≥ 0.95 and ≥ K-means + 20)
  timing    time per Lloyd iteration vs N (ℓ = 7²) and vs ℓ (N = 500), the paper's Fig. 2
Writes benchmarks/results/st_kmeans.md (+ st_kmeans_<set>.png centroid montages: rows = K-means++
init, K-means, AI K-means, ST K-means, as the paper's Fig. 3). ``--device cuda`` runs it on a GPU.
"""
from __future__ import annotations

import argparse
import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # idle OpenMP threads must not spin on a shared CPU

import json  # noqa: E402
import resource  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

import ticlust  # noqa: E402
from ticlust.metrics import evaluate  # noqa: E402
from ticlust.datasets.warped_digits import nonrigid_digits, rigid_digits  # noqa: E402
from _data import data_dir  # noqa: E402  (benchmarks/ is on sys.path when run as a script)

HERE = Path(__file__).resolve().parent
METHODS = ("kmeans", "ai-kmeans", "st-kmeans")



def load_avg() -> str:
    return " ".join(f"{v:.1f}" for v in os.getloadavg())


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def fit_eval(name, method, x, y, x_test, y_test, device, seed, params):
    load0 = load_avg()
    t0 = time.perf_counter()
    r = ticlust.fit(x, method, k=int(len(np.unique(y))), device=device, seed=seed,
                    **(params if method != "kmeans" else {}))
    fit_s = time.perf_counter() - t0
    row = {"set": name, "method": method, "seed": seed, "n_train": len(x), "fit_s": round(fit_s, 1),
           "iterations": r.timing.get("iterations", len(r.history)), "distortion": round(r.final_loss, 3),
           "train": {k: round(v, 4) for k, v in evaluate(y, r.labels).items()}}
    if x_test is not None:
        t1 = time.perf_counter()
        p = ticlust.predict(r, x_test, device=device)
        row["predict_s"] = round(time.perf_counter() - t1, 1)
        row["test"] = {k: round(v, 4) for k, v in evaluate(y_test, p.labels).items()}
    row["peak_rss_mib"] = round(peak_mib())
    row["load"] = f"{load0} → {load_avg()}"
    print(json.dumps(row), flush=True)
    return row, r


def montage(results: dict, path: Path) -> None:
    from PIL import Image

    first = results["st-kmeans"]
    rows = [first.extras["initial_prototypes"]] + [results[m].prototypes for m in METHODS]
    tiles = [np.concatenate([p / max(p.max(), 1e-8) for p in row], axis=1) for row in rows]
    img = np.concatenate(tiles, axis=0)
    h, w = img.shape
    Image.fromarray((np.clip(img, 0, 1) * 255).astype(np.uint8)).resize((w * 3, h * 3), Image.NEAREST).save(path)


def run_set(name, x, y, x_test, y_test, args, params):
    rows, results = [], {}
    for method in METHODS:
        row, r = fit_eval(name, method, x, y, x_test, y_test, args.device, args.seed, params)
        rows.append(row)
        results[method] = r
    montage(results, args.out.parent / f"st_kmeans_{name}{args.tag}.png")
    return rows


def timing(args, mnist, params):
    rows = []
    rng = np.random.default_rng(0)
    pick = rng.choice(len(mnist["x_train"]), 4000, replace=False)
    x = mnist["x_train"][pick]
    base = {**params, "max_iter": 1}
    for n in args.time_n:
        for method, extra in (("ai-kmeans", {}), ("st-kmeans", {"landmarks": 7})):
            t0 = time.perf_counter()
            ticlust.fit(x[:n], method, k=10, device=args.device, seed=0, **base, **extra)
            rows.append({"axis": "N", "n": n, "landmarks": extra.get("landmarks", 0), "method": method,
                         "s_per_iter": round(time.perf_counter() - t0, 2), "load": load_avg()})
            print(json.dumps(rows[-1]), flush=True)
    for g in args.time_l:
        t0 = time.perf_counter()
        ticlust.fit(x[:args.time_l_n], "st-kmeans", k=10, device=args.device, seed=0, **base, landmarks=g)
        rows.append({"axis": "l", "n": args.time_l_n, "landmarks": g, "method": "st-kmeans",
                     "s_per_iter": round(time.perf_counter() - t0, 2), "load": load_avg()})
        print(json.dumps(rows[-1]), flush=True)
    t0 = time.perf_counter()
    ticlust.fit(x[:args.time_l_n], "ai-kmeans", k=10, device=args.device, seed=0, **base)
    rows.append({"axis": "l", "n": args.time_l_n, "landmarks": 0, "method": "ai-kmeans",
                 "s_per_iter": round(time.perf_counter() - t0, 2), "load": load_avg()})
    return rows


def write(args, rows, trows):
    dev = "cpu" if args.device == "cpu" else args.device
    lines = [
        "# ST K-means benchmark (paper 000)", "",
        f"`python benchmarks/st_kmeans.py {' '.join(args.argv)}` — device {dev}, torch threads "
        f"{torch.get_num_threads()}, seed {args.seed}, ticlust commit {args.commit}. The machine's 2 cores were "
        "shared with other jobs: the load average (1/5/15 min) before → after each run is listed; times "
        "are inflated accordingly. All three methods start from the same K-means++ centroids (same seed). "
        "ACC = Hungarian accuracy; peak RSS is the process's peak so far (monotone over the run).", "",
        "Paper's numbers: Table 1 of the paper did not survive the text conversion (only its caption), so "
        "no per-dataset figure can be quoted; the paper's qualitative claims are ST ≥ AI > K-means, "
        "ST ≈ AI on Rigid MNIST, ST centroids crisper (Fig. 3), and near-flat GPU time in ℓ (Fig. 2).", "",
        "| set | method | N train | iters | fit s | distortion | train ACC | NMI | ARI | test ACC | test NMI | test ARI | predict s | peak RSS MiB | load |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        te = r.get("test", {})
        lines.append(f"| {r['set']} | {r['method']} | {r['n_train']} | {r['iterations']} | {r['fit_s']} | {r['distortion']} | "
                     f"{r['train']['acc']:.3f} | {r['train']['nmi']:.3f} | {r['train']['ari']:.3f} | "
                     f"{te.get('acc', float('nan')):.3f} | {te.get('nmi', float('nan')):.3f} | {te.get('ari', float('nan')):.3f} | "
                     f"{r.get('predict_s', '')} | {r['peak_rss_mib']} | {r['load']} |")
    if trows:
        lines += ["", "## Time per Lloyd iteration (paper Fig. 2)", "",
                  f"One Lloyd iteration (max_iter=1: the K·N alignments of {args.params_text}) — CPU measured here; "
                  "the GPU column is left for a session with a GPU (`--device cuda`).", "",
                  "| axis | N | landmarks ℓ | method | CPU s | GPU s | load |", "|---|---|---|---|---|---|---|"]
        for r in trows:
            ell = f"{r['landmarks']}²" if r["landmarks"] else "— (affine)"
            lines.append(f"| {r['axis']} | {r['n']} | {ell} | {r['method']} | {r['s_per_iter']} | not run | {r['load']} |")
    args.out.write_text("\n".join(lines) + "\n")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sections", default="nonrigid,rigid,mnist2k,timing")
    ap.add_argument("--n-mnist", type=int, default=2000)
    ap.add_argument("--time-n", type=int, nargs="+", default=[250, 500, 1000, 2000])
    ap.add_argument("--time-l", type=int, nargs="+", default=[3, 4, 5, 6, 7, 8])
    ap.add_argument("--time-l-n", type=int, default=500)
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="ST/AI parameter")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "st_kmeans.md")
    ap.add_argument("--json", type=Path, default=None, help="also dump the raw rows here")
    ap.add_argument("--tag", default="", help="suffix for the montage file names")
    args = ap.parse_args(argv)
    args.argv = list(argv) if argv is not None else __import__("sys").argv[1:]
    torch.set_num_threads(args.threads)
    params = {}
    for item in args.set:
        key, value = item.split("=", 1)
        params[key] = value
    args.params_text = ", ".join(f"{k}={v}" for k, v in params.items()) or "default settings"
    try:
        args.commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True,
                                     text=True).stdout.strip() or "?"
    except OSError:
        args.commit = "?"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    mnist = np.load(data_dir(args.data_dir) / "mnist.npz")
    rows, trows = [], []
    sections = args.sections.split(",")
    for sec in sections:
        if sec in ("rigid", "nonrigid"):
            maker = rigid_digits if sec == "rigid" else nonrigid_digits
            ds = maker(mnist["x_test"], mnist["y_test"], seed=args.seed)
            rows += run_set(sec, ds["x_train"], ds["y_train"], ds["x_test"], ds["y_test"], args, params)
        elif sec == "mnist2k":
            pick = np.sort(np.random.default_rng(args.seed).choice(len(mnist["x_train"]), args.n_mnist, replace=False))
            rows += run_set("mnist2k", mnist["x_train"][pick], mnist["y_train"][pick], None, None, args, params)
        elif sec == "mnisttest":
            rows += run_set("mnisttest", mnist["x_test"], mnist["y_test"], None, None, args, params)
        elif sec == "timing":
            trows = timing(args, mnist, params)
        else:
            raise SystemExit(f"unknown section {sec}")
        write(args, rows, trows)
        if args.json:
            args.json.write_text(json.dumps({"rows": rows, "timing": trows}, indent=1))


if __name__ == "__main__":
    main()
