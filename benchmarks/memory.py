"""Peak memory of ST/AI K-means and DTI K-means fit and predict on 20,000 items of 32×32, aligned images
not requested ("One house for a million objects", items 1–2).

    python benchmarks/memory.py [--src SRC] [--label after] [--n-per-class 5000] [--threads 2]
                                [--methods ai-kmeans,st-kmeans] [--cases fit]

The stack is ``ticlust.datasets.samples.glyphs_sample(n_per_class=5000)`` (4 classes, 20,000 items of 32×32),
written once as a uint8 .npy memmap (20 MiB; 78 MiB as float32, 80 MiB for an N×H×W float32 array).
Each case runs in a fresh child process (``--src``: the ticlust source tree it imports, e.g. a checkout
of an older commit) and reports the child's peak RSS (``ru_maxrss``) above its baseline: the RSS after
importing ticlust and opening the memmap ("fit"), or after fitting on the first 500 items ("predict":
then all 20,000 are assigned). Runs are short (2 Lloyd iterations of 2+2 Adam steps, 1 DTI epoch): the
point is memory, not accuracy. Appends a section to benchmarks/results/memory.md.
"""
from __future__ import annotations

import argparse
import inspect
import json
import resource
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _data import load_average  # noqa: E402  (benchmarks/ is on sys.path when run as a script)

HERE = Path(__file__).resolve()
PARAMS = {
    "ai-kmeans": dict(k=4, max_iter=2, steps=2, affine_steps=2, predict_steps=2),
    "st-kmeans": dict(k=4, max_iter=2, steps=2, affine_steps=2, predict_steps=2),
    "dti-kmeans": dict(k=4, max_epochs=1),
}


def rss_mb() -> float:
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("VmRSS")) / 1024


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def child(path: str, method: str, case: str, src: str, threads: int) -> None:
    import numpy as np
    import torch

    torch.set_num_threads(threads)
    sys.path.insert(0, src)
    import ticlust

    x = np.load(path, mmap_mode="r")
    params = dict(PARAMS[method])
    k = params.pop("k")
    request = {"aligned": False} if "aligned" in inspect.signature(ticlust.fit).parameters else {}
    start = time.perf_counter()
    if case == "fit":
        baseline = rss_mb()
        res = ticlust.fit(x, method=method, k=k, seed=0, device="cpu", progress=False, **request, **params)
    else:
        small = ticlust.fit(np.asarray(x[:500]), method=method, k=k, seed=0, device="cpu", progress=False, **request, **params)
        baseline = max(rss_mb(), peak_mb())
        start = time.perf_counter()
        res = ticlust.predict(small, x, device="cpu", **request)
    kept = {name: list(np.shape(getattr(res, name))) for name in ("aligned", "grids") if getattr(res, name) is not None}
    kept.update({f"params.{key}": list(np.shape(v)) for key, v in res.params.items() if np.ndim(v) >= 3})
    print(json.dumps({"baseline_mb": baseline, "peak_mb": peak_mb(), "seconds": time.perf_counter() - start,
                      "n": int(res.n), "kept": kept}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--src", default=str(HERE.parents[1] / "src"))
    ap.add_argument("--label", default="after")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n-per-class", type=int, default=5000)
    ap.add_argument("--methods", default=",".join(PARAMS))
    ap.add_argument("--cases", default="fit,predict", help="fit, predict or both (comma-separated)")
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    ap.add_argument("--out", default=str(HERE.parent / "results" / "memory.md"))
    args = ap.parse_args()
    if args.child:
        return child(*args.child, args.src, args.threads)
    import numpy as np

    sys.path.insert(0, args.src)
    from ticlust.datasets.samples import glyphs_sample

    images, _ = glyphs_sample(n_per_class=args.n_per_class)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "glyphs.npy"
        np.save(path, np.round(np.clip(images, 0, 1) * 255).astype(np.uint8))
        for method in args.methods.split(","):
            for case in args.cases.split(","):
                out = subprocess.run([sys.executable, str(HERE), "--child", str(path), method, case, "--src", args.src,
                                      "--threads", str(args.threads)], capture_output=True, text=True)
                if out.returncode:
                    raise SystemExit(out.stderr)
                rows.append((method, case, json.loads(out.stdout.strip().splitlines()[-1])))
                print(method, case, rows[-1][2], flush=True)
    n = len(images)
    lines = [f"## {args.label} ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})", "",
             f"`python benchmarks/memory.py --label {shlex.quote(args.label)} --src {args.src} --n-per-class "
             f"{args.n_per_class} --methods {args.methods} --cases {args.cases}`: {n:,} glyphs of 32×32 (uint8 memmap), "
             f"CPU, {args.threads} torch threads on a 2-core machine shared with other jobs, load average {load_average()} "
             f"when it finished. An N×H×W float32 array is {n * 32 * 32 * 4 / 2**20:.0f} MiB here.", "",
             "| method | case | peak RSS (MiB) | baseline (MiB) | above baseline (MiB) | seconds | per-item pictures kept |",
             "|---|---|---|---|---|---|---|"]
    for method, case, r in rows:
        kept = ", ".join(f"{name} {'×'.join(map(str, shape))}" for name, shape in r["kept"].items()) or "none"
        lines.append(f"| {method} | {case} | {r['peak_mb']:.0f} | {r['baseline_mb']:.0f} | "
                     f"{r['peak_mb'] - r['baseline_mb']:.0f} | {r['seconds']:.1f} | {kept} |")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    head = "" if out.exists() else "# Peak memory of fit and predict at 20,000 items\n\n"
    with open(out, "a") as fh:
        fh.write(head + "\n".join(lines) + "\n\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
