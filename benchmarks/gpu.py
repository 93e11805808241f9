"""Every method's headline on one device, one table (issue 17.5): ACC, NMI, seconds, peak GPU memory.

    python benchmarks/gpu.py [--device cuda] [--data-dir DIR] [--only dti-kmeans,pssc] [--quick]

Each row runs in a fresh child process so that timings and peak memory are its own. On an H100 the
whole table is meant to take at most 8 minutes; ``--quick`` shrinks every row (a smoke test that runs on
a CPU in a few minutes). Writes benchmarks/results/gpu.md (or gpu_quick.md).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from _data import data_dir  # noqa: E402  (benchmarks/ is on sys.path when run as a script)

HERE = Path(__file__).resolve()

# name: (dataset, max items (quick), method, parameters, target from the issues)
ROWS = {
    "kmeans": ("mnist-test", 2000, "kmeans", {}, "baseline"),
    "gmm": ("mnist-test", 2000, "gmm", {}, "baseline"),
    "pssc": ("mnist-70k", 3000, "pssc", {}, "≤ 5 s, ACC 0.97"),
    "dti-kmeans": ("mnist-test", 300, "dti-kmeans", {"batch_size": 512}, "≤ 30 s at ACC ≥ 0.975"),
    "st-kmeans": ("mnist-test", 200, "st-kmeans", {"max_scale": 2}, "≤ 20 s at ACC 0.805 (20 Lloyd iterations)"),
    "ai-kmeans": ("mnist-test", 200, "ai-kmeans", {}, "—"),
    "shape-kmeans": ("rats", None, "shape-kmeans", {}, "—"),
    "nt": ("coil20", 300, "nt", {}, "issue 16: CA ≥ 0.70, NMI ≥ 0.78"),
    "rigid-spectral": ("rotated-mnist-test", 2000, "rigid-spectral", {}, "issue 31: ACC ≥ 0.85 (CPU: 0.918 in 27 s)"),
}
QUICK = {"dti-kmeans": {"max_epochs": 3}, "st-kmeans": {"max_iter": 2, "steps": 5, "affine_steps": 5},
         "ai-kmeans": {"max_iter": 2, "steps": 5, "affine_steps": 5}, "nt": {"max_iter": 2},
         "pssc": {"candidates": 600, "representatives": 100}}


def load(name: str, folder: Path):
    import numpy as np

    if name == "rotated-mnist-test":
        from rotation import rotated_mnist   # benchmarks/rotation.py: every digit at a uniform random angle, seed 0

        return rotated_mnist(10000, data=str(folder))
    if name.startswith("mnist"):
        with np.load(folder / "mnist.npz") as d:
            if name == "mnist-test":
                return d["x_test"], d["y_test"]
            return np.concatenate([d["x_train"], d["x_test"]]), np.concatenate([d["y_train"], d["y_test"]])
    if name == "coil20":
        with np.load(folder / "coil20_32x32.npz") as d:
            return d["images"], d["labels"]
    with np.load(folder / "landmarks_rats.npz") as d:
        return d["landmarks"], d["labels"]


def child(args) -> None:
    import numpy as np
    import torch

    sys.path.insert(0, str(HERE.parents[1] / "src"))
    import ticlust

    dataset, quick_n, method, params, _ = ROWS[args.row]
    x, y = load(dataset, data_dir(args.data_dir))
    if args.quick:
        params = {**params, **QUICK.get(args.row, {})}
        if quick_n is not None and len(x) > quick_n:
            keep = np.random.default_rng(0).choice(len(x), quick_n, replace=False)
            x, y = x[keep], y[keep]
    k = len(np.unique(y))
    cuda = args.device.startswith("cuda") and torch.cuda.is_available()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    res = ticlust.fit(x, method=method, k=k, device=args.device, seed=args.seed, progress=False, **params)
    seconds = time.perf_counter() - start
    scores = ticlust.evaluate(y, res.labels)
    print(json.dumps({"n": int(len(x)), "k": k, "seconds": seconds, "device": res.device, "params": params,
                      "gpu_mb": torch.cuda.max_memory_allocated() / 2**20 if cuda else None,
                      **{key: float(v) for key, v in scores.items()}}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--data-dir")
    ap.add_argument("--only", help="comma-separated rows (default: all)")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--row", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.row:
        return child(args)
    names = args.only.split(",") if args.only else list(ROWS)
    lines = [f"# Every method on {args.device} ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})", "",
             f"`python benchmarks/gpu.py --device {args.device}{' --quick' if args.quick else ''}`, seed {args.seed}; "
             "each row a fresh process; seconds are `ticlust.fit` end to end.", "",
             "| method | data | N | ACC | NMI | seconds | peak GPU MiB | device | target |", "|---|---|---|---|---|---|---|---|---|"]
    total = time.perf_counter()
    for name in names:
        cmd = [sys.executable, str(HERE), "--row", name, "--device", args.device, "--seed", str(args.seed)]
        cmd += (["--data-dir", args.data_dir] if args.data_dir else []) + (["--quick"] if args.quick else [])
        out = subprocess.run(cmd, capture_output=True, text=True)
        if out.returncode != 0:
            lines.append(f"| {name} | {ROWS[name][0]} | — | failed: {out.stderr.strip().splitlines()[-1][:120]} | | | | | |")
            continue
        r = json.loads(out.stdout.strip().splitlines()[-1])
        gpu = "—" if r["gpu_mb"] is None else f"{r['gpu_mb']:.0f}"
        lines.append(f"| {name} | {ROWS[name][0]} | {r['n']:,} | {r['acc']:.3f} | {r['nmi']:.3f} | {r['seconds']:.1f} | "
                     f"{gpu} | {r['device']} | {ROWS[name][4]} |")
        print(lines[-1], flush=True)
    lines += ["", f"Whole table: {time.perf_counter() - total:.0f} s."]
    out_path = HERE.parent / "results" / ("gpu_quick.md" if args.quick else "gpu.md")
    out_path.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
