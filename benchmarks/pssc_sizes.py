"""PSSC on larger crops (issue 19): 2,000 MNIST-test digits zoomed to 64x64 and 128x128, defaults.

    python benchmarks/pssc_sizes.py [--data-dir DIR] [--threads 2] [--n 2000]

Scattering features grow with the image area (217 x (H/8) x (W/8) at J = 3: 13,888 at 64 px, 55,552 at
128 px), so PCA goes through the N x N Gram matrix instead of the F x F covariance. Each size runs in a
fresh child process; the table gives ACC/NMI, wall time and the child's peak RSS.
Writes benchmarks/results/pssc_sizes.md.
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

from _data import data_dir, load_average  # noqa: E402  (benchmarks/ is on sys.path when run as a script)

HERE = Path(__file__).resolve()


def child(args) -> None:
    import numpy as np
    import torch
    from scipy.ndimage import zoom

    torch.set_num_threads(args.threads)
    sys.path.insert(0, str(HERE.parents[1] / "src"))
    import ticlust

    with np.load(data_dir(args.data_dir) / "mnist.npz") as npz:
        x, y = npz["x_test"][: args.n], npz["y_test"][: args.n]
    big = zoom(x.astype(np.float32), (1, args.size / 28, args.size / 28), order=1)
    start = time.perf_counter()
    res = ticlust.fit(big, method="pssc", k=10, seed=0, device="cpu", progress=False)
    seconds = time.perf_counter() - start
    scores = ticlust.evaluate(y, res.labels)
    print(json.dumps({"seconds": seconds, "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                      "features": int(res.state.mean.shape[0]), **{k: float(v) for k, v in scores.items()}}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data-dir")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--size", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--out", default=str(HERE.parent / "results" / "pssc_sizes.md"))
    args = ap.parse_args()
    if args.size:
        return child(args)
    rows = []
    for size in (28, 64, 128):
        cmd = [sys.executable, str(HERE), "--size", str(size), "--n", str(args.n), "--threads", str(args.threads)]
        if args.data_dir:
            cmd += ["--data-dir", args.data_dir]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True)
        rows.append((size, json.loads(out.stdout.strip().splitlines()[-1])))
    load = load_average()
    lines = [f"# PSSC on larger crops ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})", "",
             f"`python benchmarks/pssc_sizes.py --threads {args.threads} --n {args.n}`: the first {args.n} MNIST-test "
             "digits zoomed (bilinear) to each size, PSSC defaults, K = 10, CPU, load average "
             f"{load} when it finished (other work ran beside it: times are upper bounds).", "",
             "| size | features | PCA through | ACC | ACC (majority) | NMI | seconds | peak RSS (MiB) |", "|---|---|---|---|---|---|---|---|"]
    for size, r in rows:
        via = "Gram (N×N)" if r["features"] > 8192 and args.n < r["features"] else "covariance (F×F)"
        lines.append(f"| {size}×{size} | {r['features']:,} | {via} | {r['acc']:.3f} | {r['acc_majority']:.3f} | "
                     f"{r['nmi']:.3f} | {r['seconds']:.1f} | {r['peak_mb']:.0f} |")
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
