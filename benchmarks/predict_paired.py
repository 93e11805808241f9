"""One method's predict rate, this tree against another checkout of ticlust, paired: one fitted result, then whole
processes of each tree in turn (A B A B ...), each loading the result and predicting the same held-back items.

  python benchmarks/predict_paired.py --base /tmp/main-checkout [--method rigid-spectral] [--data mnist] [--rounds 3]

Data: MNIST-test at 28×28 (``mnist``) or every digit turned by a random angle (``rotated``, as benchmarks/rotation.py),
seeded shuffle; the fit (this tree, seed 0, defaults) on the first --fit items, predict on the next --new. Each child
warms up on 8 items, then times predict (wall and CPU seconds of the process, all threads) at --threads threads and
reports ACC (Hungarian). Load (1/5/15 min) before and after each child: run it under the benchmark lock, and read
the A/B ratio of a pair, not the absolute rates, when the machine is busy. Prints one JSON line per child and a
Markdown table (--out appends it to a file).
"""
from __future__ import annotations

import argparse
import json
import os
import pickle
import sys
import tempfile
import time
from pathlib import Path

from _paired import child_json, in_turn  # noqa: E402  (benchmarks/ is on sys.path when run as a script)

import numpy as np

HERE = Path(__file__).resolve().parent


def dataset(name: str, n: int, data: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    from _data import data_dir

    d = np.load(data_dir(data) / "mnist.npz")
    order = np.random.default_rng(0).permutation(len(d["x_test"]))[:n]
    x, y = d["x_test"][order].astype(np.float32) / 255.0, d["y_test"][order].astype(np.int64)
    if name == "rotated":
        from rotation import turned
        x = turned(x)
    return x, y


def child(args) -> None:
    """In a fresh process of the tree on PYTHONPATH: load the fit, predict, one JSON line."""
    import torch
    torch.set_num_threads(args.threads)
    import ticlust
    from ticlust.metrics import hungarian_accuracy
    from _data import load_average

    with open(args.child, "rb") as f:
        fitted, x, y = pickle.load(f)
    ticlust.predict(fitted, x[:8], device="cpu", aligned=False)
    load = load_average()
    wall, cpu = time.perf_counter(), os.times()
    labels = ticlust.predict(fitted, x, device="cpu", aligned=False).labels
    wall, now = time.perf_counter() - wall, os.times()
    print(json.dumps({"src": str(Path(ticlust.__file__).parents[1]), "n": len(x), "wall_s": round(wall, 3),
                      "cpu_s": round(now.user - cpu.user + now.system - cpu.system, 2), "rate": round(len(x) / wall, 1),
                      "acc": round(float(hungarian_accuracy(y, labels)), 4), "load_before": load, "load_after": load_average()}))


def run_child(tree: Path, job: str, args) -> dict:
    # the thread count fixed for both trees (a tree that sizes its threads by the free cores obeys OMP_NUM_THREADS)
    return child_json(tree, [__file__, "--child", job, "--threads", str(args.threads)],
                      {**os.environ, "OMP_NUM_THREADS": str(args.threads)})


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", help="the other checkout (its src/ is imported by the B runs)")
    ap.add_argument("--method", default="rigid-spectral")
    ap.add_argument("--data", default="mnist", choices=["mnist", "rotated"])
    ap.add_argument("--fit", type=int, default=1000)
    ap.add_argument("--new", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--data-dir")
    ap.add_argument("--out")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child(args)
        return 0
    if not args.base:
        ap.error("--base is required")
    sys.path.insert(0, str(HERE.parent / "src"))
    import ticlust
    x, y = dataset(args.data, args.fit + args.new, args.data_dir)
    fitted = ticlust.fit(x[:args.fit], args.method, k=10, device="cpu", seed=0, progress=False, aligned=False)
    trees = [("A (this tree)", HERE.parent), ("B (--base)", Path(args.base).resolve())]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        job = str(Path(tmp) / "job.pkl")
        with open(job, "wb") as f:
            pickle.dump((fitted, x[args.fit:], y[args.fit:]), f)
        for r in range(args.rounds):
            for name, tree in in_turn(trees, r):
                row = {"round": r + 1, "tree": name, **run_child(tree, job, args)}
                print(json.dumps(row), flush=True)
                rows.append(row)
    lines = [f"`python benchmarks/predict_paired.py {' '.join(argv if argv is not None else sys.argv[1:])}`: {args.method}, "
             f"{args.data} 28×28, K = 10, fit on {args.fit}, predict {args.new}, {args.threads} threads; "
             f"{time.strftime('%Y-%m-%d %H:%M')}.", "",
             "| round | tree | objects/s | wall s | CPU s | ACC | load before / after |", "|---|---|---|---|---|---|---|"]
    lines += [f"| {r['round']} | {r['tree']} | {r['rate']} | {r['wall_s']} | {r['cpu_s']} | {r['acc']} | "
              f"{r['load_before']} / {r['load_after']} |" for r in rows]
    for name, _ in trees:
        walls = sorted(r["wall_s"] for r in rows if r["tree"] == name)
        lines.append(f"\n{name}: median {args.new / walls[len(walls) // 2]:.0f} objects/s")
    print("\n".join(lines))
    if args.out:
        with open(args.out, "a") as f:
            f.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
