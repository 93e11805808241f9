"""DTI Refine (issue 18) on MNIST-1k: from a spoiled clustering mended by hand back to a good run's accuracy.

A good run (its ACC is the target) is spoiled as in the issue's acceptance test — the clusters of two digits
merged under one prototype, another digit's cluster split over two — then mended by hand as a user would
(split the shared cluster, merge the two halves; the splits are DTI fits of K=2 on the members), and refined
with each ``refine_epochs`` asked for. Writes benchmarks/results/dti_refine[_<tag>].md.

    python benchmarks/dti_refine.py --set max_epochs=40 --epochs 5 10 20
"""
from __future__ import annotations

import argparse
import dataclasses
import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # spinning OpenMP threads collapse on a shared CPU

import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

import ticlust  # noqa: E402
from ticlust import curation  # noqa: E402
from ticlust.metrics import evaluate  # noqa: E402
from ticlust.core.validation import random_subset  # noqa: E402
from _data import data_dir, load_average  # noqa: E402  (benchmarks/ is on sys.path when run as a script)


def majority(labels, y, digit) -> int:
    return int(np.bincount(labels[y == digit]).argmax())


def spoil_and_mend(x, y, good, merge_digits, split_digit, seed):
    """(spoiled, mended): two digits' clusters merged and one split, then split and merge by hand."""
    merged = curation.merge(good, majority(good.labels, y, merge_digits[0]), majority(good.labels, y, merge_digits[1]))
    spoiled = curation.split(x, merged, majority(merged.labels, y, split_digit), seed=seed, device="cpu")
    halves = np.bincount(spoiled.labels[y == split_digit], minlength=spoiled.k).argsort()[-2:]
    mended = curation.split(x, spoiled, majority(spoiled.labels, y, merge_digits[1]), seed=seed + 1, device="cpu")
    return spoiled, curation.merge(mended, int(halves.min()), int(halves.max()))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--method", default="dti-kmeans", choices=("dti-kmeans", "dti-gmm"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--epochs", type=int, nargs="+", default=[5, 10, 20], help="refine_epochs values to try")
    ap.add_argument("--merge", type=int, nargs=2, default=[4, 9], help="the two digits whose clusters are merged")
    ap.add_argument("--split", type=int, default=5, help="the digit whose cluster is split")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--set", nargs="*", default=[], help="extra method parameters name=value")
    ap.add_argument("--tag", default="")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    params = {"threads": args.threads, **dict(kv.split("=", 1) for kv in args.set)}
    with np.load(data_dir(args.data_dir) / "mnist.npz") as npz:
        idx = random_subset(len(npz["y_test"]), 1000, args.seed)
        x, y = npz["x_test"][idx], npz["y_test"].astype(np.int64)[idx]
    lines = [f"# {args.method} Refine on MNIST-1k (seed {args.seed})", "",
             f"Device cpu, {args.threads} torch thread(s), parameters {params}; merged digits {args.merge}, "
             f"split digit {args.split}. Shared machine: load average at the start {load_average()}.", "",
             "| run | ACC | NMI | epochs | wall s |", "| --- | --- | --- | --- | --- |"]

    def row(name, result, wall, epochs=""):
        s = evaluate(y, result.labels)
        lines.append(f"| {name} | {s['acc']:.3f} | {s['nmi']:.3f} | {epochs} | {wall:.0f} |")
        print(lines[-1], flush=True)

    t0 = time.perf_counter()
    good = ticlust.fit(x, method=args.method, k=10, seed=args.seed, device="cpu", progress=False, **params)
    row("good run (the target)", good, time.perf_counter() - t0, good.timing["epochs"])
    t0 = time.perf_counter()
    spoiled, mended = spoil_and_mend(x, y, good, args.merge, args.split, args.seed)
    row("spoiled (merge + split)", spoiled, 0)
    row("mended by hand (split + merge), before Refine", mended, time.perf_counter() - t0)
    for epochs in args.epochs:
        t0 = time.perf_counter()
        refined = curation.refine(x, dataclasses.replace(mended, config={**mended.config, "refine_epochs": epochs}), device="cpu")
        row(f"Refine, refine_epochs={epochs}", refined, time.perf_counter() - t0, epochs)
    lines += ["", f"Load average at the end {load_average()}."]
    out = Path(__file__).parent / "results" / f"dti_refine{'_' + args.tag if args.tag else ''}.md"
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
