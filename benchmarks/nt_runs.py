"""Short NT runs with per-iteration time, longest gap between events and CA/NMI (issue 16 measurements).

    python benchmarks/nt_runs.py --data coil20 --seeds 0,1,2 --max-iter 10 [--device cpu|cuda] [--set name=value ...]

Prints one line per run (load average before/after included) and, with --kmeans, pixel k-means on the
same items and seeds. Used for the tables of benchmarks/results/nt.md (issue 16 section).

Ablations the method has no parameter for (issue 16 item 4), patched in here only:
  --normalise global   the whole set to zero mean and unit variance (default: each item, Sec. 5.1)
  --a-start pca|eye    the learned A's start: the data's principal axes, or the identity, as its first N rows
                       (unit rows; the other M - N rows N(0, 1/N)); default: i.i.d. N(0, 1) (Sec. 5.1)
  --resize H,W         the images resampled (bilinear) to H×W first, e.g. 25,20 (the paper's 20×25 COIL-20)
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parents[1] / "src"))

import torch  # noqa: E402

import ticlust  # noqa: E402
from ticlust.events import Done, Progress  # noqa: E402
from ticlust.metrics import evaluate  # noqa: E402
from _data import data_dir  # noqa: E402


def load(name: str, subsample: int):
    root = Path(data_dir(None))
    d = np.load(root / ("coil20_32x32.npz" if name == "coil20" else f"{name}.npz"))
    if "images" in d.files:
        x, y = d["images"], d["labels"]
    else:                   # USPS / MNIST: train and test concatenated, as benchmarks/nt.py does
        x = np.concatenate([d[k] for k in sorted(k for k in d.files if k.startswith("x"))])
        y = np.concatenate([d[k] for k in sorted(k for k in d.files if k.startswith("y"))])
    if subsample and subsample < len(x):
        idx = np.sort(np.random.default_rng(0).choice(len(x), subsample, replace=False))
        x, y = x[idx], y[idx]
    return x, y


def patch_ablations(normalise: str, a_start: str) -> None:
    """Replace NT's per-item standardisation and/or its Gaussian A start (benchmark ablations only)."""
    from ticlust.methods import nt

    if normalise == "global":
        nt.standardise = lambda x: (x - x.mean()) / x.std(unbiased=False).clamp_min(1e-8)
    if a_start == "gaussian":
        return
    original = nt.initial_state

    def initial_state(stack, cfg, device, rng):
        x, a, tau, nu = original(stack, cfg, device, rng)
        if cfg.transform != "learned":
            return x, a, tau, nu
        n_dim = x.shape[1]
        gen = torch.Generator().manual_seed(int(rng.integers(2**31)))
        start = torch.randn(a.shape, generator=gen).to(a) / n_dim ** 0.5
        start[:n_dim] = torch.linalg.svd(x, full_matrices=False)[2] if a_start == "pca" else torch.eye(n_dim)
        return x, start, tau, nu

    nt.initial_state = initial_state


def resized(x: np.ndarray, size: str) -> np.ndarray:
    h, w = (int(v) for v in size.split(","))
    t = torch.nn.functional.interpolate(torch.from_numpy(x.astype(np.float32))[:, None], size=(h, w),
                                        mode="bilinear", align_corners=False, antialias=True)
    return t[:, 0].numpy()


def value(text: str):
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="coil20")
    ap.add_argument("--subsample", type=int, default=0)
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--max-iter", type=int, default=10)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--kmeans", action="store_true")
    ap.add_argument("--verbose", action="store_true", help="print the time at the end of every iteration")
    ap.add_argument("--set", nargs="*", default=[])
    ap.add_argument("--normalise", choices=("item", "global"), default="item")
    ap.add_argument("--a-start", choices=("gaussian", "pca", "eye"), default="gaussian")
    ap.add_argument("--resize", help="H,W: resample the images first")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    patch_ablations(args.normalise, args.a_start)
    x, y = load(args.data, args.subsample)
    if args.resize:
        x = resized(x, args.resize)
    k = len(np.unique(y))
    params = {kv.split("=")[0]: value(kv.split("=", 1)[1]) for kv in args.set}
    for seed in (int(s) for s in args.seeds.split(",")):
        load0, t0, last, gap = os.getloadavg(), time.perf_counter(), time.perf_counter(), 0.0
        cpu_marks = []          # process CPU time at the first batch of each iteration: less load-dependent
        for ev in ticlust.run(x, method="nt", k=k, seed=seed, device=args.device, max_iter=args.max_iter, **params):
            now = time.perf_counter()
            gap, last = max(gap, now - last), now
            if isinstance(ev, Progress) and ev.stage == "iterations" and ev.step % (ev.total // args.max_iter) == 1 % (ev.total // args.max_iter):
                cpu_marks.append(time.process_time())
            if args.verbose and isinstance(ev, Progress) and ev.stage == "iterations" and ev.step % (ev.total // args.max_iter) == 0:
                print(f"  it {ev.step // (ev.total // args.max_iter)} at {now - t0:.0f}s, load {os.getloadavg()[0]:.1f}", flush=True)
            if isinstance(ev, Done):
                res = ev.result
        e = evaluate(y, res.labels)
        tm = res.timing
        cpu = np.diff(cpu_marks).tolist() or [float("nan")]
        print(f"{args.data} {x.shape[1:]} n={len(x)} seed={seed} {params} norm={args.normalise} A0={args.a_start} iters={args.max_iter}: CA {e['acc']:.3f} NMI {e['nmi']:.3f} "
              f"clusters {len(np.unique(res.labels))} | wall {time.perf_counter() - t0:.0f}s, iter first "
              f"{tm['first_iteration_s']:.1f}s last {tm['last_iteration_s']:.1f}s mean {tm['per_iteration_s']:.1f}s, "
              f"CPU s/iter first {cpu[0]:.1f} last {cpu[-1]:.1f}, longest event gap {gap:.2f}s | load {load0[0]:.1f} -> {os.getloadavg()[0]:.1f} | {res.device}", flush=True)
        if args.kmeans:
            km = ticlust.fit(x, method="kmeans", k=k, seed=seed, device=args.device, progress=False)
            e = evaluate(y, km.labels)
            print(f"  pixel k-means seed={seed}: CA {e['acc']:.3f} NMI {e['nmi']:.3f}", flush=True)


if __name__ == "__main__":
    main()
