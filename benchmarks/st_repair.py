"""ST / AI K-means repair (issue 15.1): ACC and NMI over seeds on two warped-digit generators.

Sets (1,000 images each, 10 base digits × 100 warps, data seed 0):
  ours    ticlust's Non-rigid MNIST (``warped_digits.nonrigid_digits`` on MNIST-test; train and test halves together)
  strong  ``benchmarks/strong_warps.py``, written apart from the library, with the issue's stronger warps
Every (set, method, seed) run appends one JSON line to ``--jsonl`` as it finishes (long runs can be
watched and resumed: rows already there are skipped). ``--report`` turns one or more such files,
tagged ``TAG=PATH``, into the Markdown table. One torch thread; the load average is written beside
every timing because the machine's two cores are shared.

  python benchmarks/st_repair.py --tag after --jsonl benchmarks/results/st_repair_after.jsonl
  python benchmarks/st_repair.py --report before=...before.jsonl after=...after.jsonl
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # idle OpenMP threads must not spin on a shared CPU

import argparse  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

import ticlust  # noqa: E402
from ticlust.metrics import evaluate  # noqa: E402
from ticlust.datasets.warped_digits import nonrigid_digits  # noqa: E402
from _data import data_dir, load_average  # noqa: E402  (benchmarks/ is on sys.path when run as a script)
from strong_warps import strong_warps  # noqa: E402

HERE = Path(__file__).resolve().parent
SETS = ("ours", "strong")
METHODS = ("kmeans", "ai-kmeans", "st-kmeans")


def make_set(name: str, mnist) -> tuple[np.ndarray, np.ndarray]:
    """The 1,000 images and labels of a set (data seed 0)."""
    if name == "ours":
        ds = nonrigid_digits(mnist["x_test"], mnist["y_test"], seed=0)
        return np.concatenate([ds["x_train"], ds["x_test"]]), np.concatenate([ds["y_train"], ds["y_test"]])
    ds = strong_warps(mnist["x_test"], mnist["y_test"], seed=0)
    return ds["x"], ds["y"]


def shared_digits(y: np.ndarray, labels: np.ndarray, k: int) -> tuple[int, int]:
    """(classes that hold the majority of two or more clusters, clusters whose majority is another's class)."""
    major = np.array([np.bincount(y[labels == c], minlength=k).argmax() if np.any(labels == c) else -1
                      for c in range(k)])
    counts = np.bincount(major[major >= 0], minlength=k)
    return int((counts >= 2).sum()), int((counts[counts >= 2] - 1).sum())


def one_run(set_name, x, y, method, seed, params, runs):
    load0 = load_average()
    t0 = time.perf_counter()
    r = ticlust.fit(x, method, k=10, device="cpu", seed=seed, runs=runs, **(params if method != "kmeans" else {}))
    fit_s = time.perf_counter() - t0
    scores = evaluate(y, r.labels)
    doubled, extra = shared_digits(y, r.labels, 10)
    return {"set": set_name, "method": method, "seed": seed, "runs": runs, "acc": round(scores["acc"], 4),
            "nmi": round(scores["nmi"], 4), "fit_s": round(fit_s, 1), "iterations": r.timing.get("iterations", 0),
            "distortion": round(r.final_loss, 4), "doubled_digits": doubled, "spare_centroids": extra,
            "moves": int(len(r.extras.get("repairs", []))), "load": f"{load0} → {load_average()}"}


def measure(args) -> None:
    mnist = np.load(data_dir(args.data_dir) / "mnist.npz")
    done = set()
    if args.jsonl.exists():
        done = {(r["set"], r["method"], r["seed"]) for r in map(json.loads, args.jsonl.read_text().splitlines())}
    params = dict(item.split("=", 1) for item in args.set)
    for set_name in args.sets:
        x, y = make_set(set_name, mnist)
        for method in args.methods:
            for seed in args.seeds:
                if (set_name, method, seed) in done:
                    continue
                row = {"tag": args.tag, "commit": args.commit, **one_run(set_name, x, y, method, seed, params, args.runs)}
                print(json.dumps(row), flush=True)
                with args.jsonl.open("a") as f:
                    f.write(json.dumps(row) + "\n")


def report(tagged: list[str], out: Path) -> None:
    """One table row per (tag, set, method): ACC / NMI per seed, min and mean, time per run and load."""
    lines = ["| version | set | method | runs | ACC per seed | min ACC | mean ACC | NMI per seed | mean NMI | "
             "doubled digits per seed | s per run (mean) | load (1/5/15) at start, range |", "|" + "---|" * 12]
    for item in tagged:
        tag, path = item.split("=", 1)
        rows = [json.loads(line) for line in Path(path).read_text().splitlines()]
        for key in sorted({(r["set"], r["method"], r["runs"]) for r in rows}, key=lambda k: (SETS.index(k[0]), METHODS.index(k[1]), k[2])):
            group = sorted((r for r in rows if (r["set"], r["method"], r["runs"]) == key), key=lambda r: r["seed"])
            acc, nmi = [r["acc"] for r in group], [r["nmi"] for r in group]
            load = [float(r["load"].split()[0]) for r in group]
            lines.append(f"| {tag} | {key[0]} | {key[1]} | {key[2]} | {' '.join(f'{a:.3f}' for a in acc)} | "
                         f"**{min(acc):.3f}** | {np.mean(acc):.3f} | {' '.join(f'{a:.3f}' for a in nmi)} | "
                         f"{np.mean(nmi):.3f} | {' '.join(str(r['doubled_digits']) for r in group)} | "
                         f"{np.mean([r['fit_s'] for r in group]):.1f} | {min(load):.1f}–{max(load):.1f} |")
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir")
    ap.add_argument("--sets", nargs="+", default=list(SETS), choices=SETS)
    ap.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--runs", type=int, default=1, help="minLoss over this many seeds per fit (ticlust.fit runs=)")
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="ST/AI parameter")
    ap.add_argument("--tag", default="")
    ap.add_argument("--jsonl", type=Path, default=HERE / "results" / "st_repair.jsonl")
    ap.add_argument("--report", nargs="+", metavar="TAG=JSONL", help="write the table from these files and stop")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "st_repair_table.md")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    if args.report:
        return report(args.report, args.out)
    args.commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True,
                                 text=True).stdout.strip() or "?"
    measure(args)


if __name__ == "__main__":
    main()
