"""Peak memory of K-means and GMM on a 100,000 x 28 x 28 uint8 memory-mapped stack (issue 19).

    python benchmarks/streaming.py [--data-dir DIR] [--threads 2] [--n 100000]

The stack is MNIST's 70,000 digits followed by the first 30,000 again, written once as a .npy memmap
(78 MB of uint8; 314 MB as float32). Each method runs in a fresh child process; the table gives the
child's peak RSS, its RSS after importing ticlust (the interpreter's baseline) and the difference.
Writes benchmarks/results/streaming.md.
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _data import data_dir, load_average  # noqa: E402  (benchmarks/ is on sys.path when run as a script)

HERE = Path(__file__).resolve()


def rss_mb() -> float:
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("VmRSS")) / 1024


def child(path: str, method: str, threads: int) -> None:
    import numpy as np
    import torch

    torch.set_num_threads(threads)
    sys.path.insert(0, str(HERE.parents[1] / "src"))
    import ticlust

    x = np.load(path, mmap_mode="r")
    baseline = rss_mb()
    start = time.perf_counter()
    params = {"max_iter": 20} if method == "kmeans" else {"max_iter": 10, "kmeans_iter": 10}
    res = ticlust.fit(x, method=method, k=10, seed=0, device="cpu", progress=False, **params)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"baseline_mb": baseline, "peak_mb": peak, "seconds": time.perf_counter() - start,
                      "sizes": res.cluster_sizes().tolist()}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data-dir")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--out", default=str(HERE.parent / "results" / "streaming.md"))
    args = ap.parse_args()
    if args.child:
        return child(args.child[0], args.child[1], args.threads)
    import numpy as np

    with np.load(data_dir(args.data_dir) / "mnist.npz") as npz:
        digits = np.concatenate([npz["x_train"], npz["x_test"]])
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "stack.npy"
        mm = np.lib.format.open_memmap(path, mode="w+", dtype=np.uint8, shape=(args.n, 28, 28))
        for start in range(0, args.n, len(digits)):
            stop = min(start + len(digits), args.n)
            mm[start:stop] = digits[: stop - start]
        mm.flush()
        del mm
        file_mb = path.stat().st_size / 2**20
        rows = []
        for method in ("kmeans", "gmm"):
            out = subprocess.run([sys.executable, str(HERE), "--child", str(path), method, "--threads", str(args.threads)],
                                 capture_output=True, text=True, check=True)
            rows.append((method, json.loads(out.stdout.strip().splitlines()[-1])))
    load = load_average()
    lines = [f"# Streaming memory ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})", "",
             f"`python benchmarks/streaming.py --threads {args.threads} --n {args.n}` on a {args.n:,} x 28 x 28 uint8 "
             f"memmap ({file_mb:.0f} MiB; {args.n * 784 * 4 / 2**20:.0f} MiB as float32), K = 10, CPU, "
             f"load average {load} when it finished. Target (issue 19): K-means peak ≤ 500 MB above "
             "the interpreter's baseline (the RSS after `import ticlust` and opening the memmap).", "",
             "| method | iterations | peak RSS (MiB) | baseline (MiB) | above baseline (MiB) | seconds | cluster sizes |",
             "|---|---|---|---|---|---|---|"]
    for method, r in rows:
        iters = "20 Lloyd" if method == "kmeans" else "10 K-means + 10 EM"
        lines.append(f"| {method} | {iters} | {r['peak_mb']:.0f} | {r['baseline_mb']:.0f} | "
                     f"{r['peak_mb'] - r['baseline_mb']:.0f} | {r['seconds']:.1f} | {r['sizes']} |")
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
