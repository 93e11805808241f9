"""DTI K-means / DTI GMM on MNIST-1k (1,000 random MNIST test images), beside the paper's Table 2.

For each seed: the seeded 1,000-image subset (the CLI's --max-images rule), a whole-curriculum run,
Hungarian ACC / NMI / ARI of the final assignment, ACC of the training assignments epoch by epoch
(for time-to-0.88), wall and CPU time, peak memory. Writes benchmarks/results/dti_mnist1k[_<tag>].md.

    python benchmarks/dti_mnist1k.py --seeds 0 1 2 --threads 2
    python benchmarks/dti_mnist1k.py --device cuda --seeds 0 1 2 3 4 5 6 7 8 9   # not run yet: no GPU here
"""
from __future__ import annotations

import argparse
import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # spinning OpenMP threads collapse on a shared CPU

import platform  # noqa: E402
import resource  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

import ticlust  # noqa: E402
from ticlust.core.validation import random_subset  # noqa: E402
from ticlust.metrics import evaluate, hungarian_accuracy  # noqa: E402
from _data import data_dir  # noqa: E402  (benchmarks/ is on sys.path when run as a script)

PAPER = {"dti-kmeans": (79.8, 90.5), "dti-gmm": (80.8, 87.1)}  # Table 2, MNIST-1k: avg / minLoss ACC (%)



def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--method", default="dti-kmeans", choices=("dti-kmeans", "dti-gmm"))
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--set", nargs="*", default=[], help="extra method parameters name=value")
    ap.add_argument("--tag", default="")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    params = dict(kv.split("=", 1) for kv in args.set)
    with np.load(data_dir(args.data_dir) / "mnist.npz") as npz:
        x_all, y_all = npz["x_test"], npz["y_test"].astype(np.int64)
    rows = []
    for seed in args.seeds:
        idx = random_subset(len(x_all), 1000, seed)
        x, y = x_all[idx], y_all[idx]
        load0 = os.getloadavg()[0]
        wall, cpu = time.perf_counter(), time.process_time()
        r = ticlust.fit(x, method=args.method, k=10, seed=seed, device=args.device, threads=args.threads,
                        record_labels=True, progress=False, **params)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        scores = evaluate(y, r.labels)
        accs = [hungarian_accuracy(y, lab) for lab in r.extras["epoch_labels"]]
        ends = r.extras["epoch_end_s"]
        hit = next((i for i, a in enumerate(accs) if a >= 0.88), None)
        row = dict(seed=seed, acc=scores["acc"], nmi=scores["nmi"], ari=scores["ari"], loss=r.final_loss,
                   epochs=r.timing["epochs"], wall=wall, cpu=cpu, train=r.timing["train_s"],
                   t88=None if hit is None else float(ends[hit]), e88=None if hit is None else hit + 1,
                   stages=r.timing["stages"], splits=r.extras["splits"].tolist(), load=(load0 + os.getloadavg()[0]) / 2,
                   s_epoch=float(np.diff(np.r_[0, ends])[-10:].mean()))
        rows.append(row)
        save_montage(r.prototypes, Path(__file__).resolve().parent / "results" / f"dti_mnist1k_prototypes_{args.method}_seed{seed}{args.tag}.png")
        print(row, flush=True)
        write_table(rows, args, params)


def save_montage(prototypes, path):
    from PIL import Image

    strip = np.concatenate([np.clip(p, 0, 1) for p in prototypes], axis=1)
    img = Image.fromarray((strip * 255).astype(np.uint8))
    img.resize((img.width * 3, img.height * 3), Image.NEAREST).save(path)


def write_table(rows, args, params):
    """The Markdown table so far (rewritten after every seed, so an interrupted run leaves a record)."""
    accs = np.array([r["acc"] for r in rows])
    best = min(rows, key=lambda r: r["loss"])
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    paper_avg, paper_min = PAPER[args.method]
    lines = [
        f"# {args.method} on MNIST-1k ({len(rows)} seeds)",
        "",
        f"Device {args.device} ({platform.processor() or platform.machine()}), {args.threads} torch threads, "
        f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')}; parameters {params or 'defaults'}; peak RSS {peak:.0f} MiB. "
        "The machine is shared with other jobs: the load average is given per run; wall times are inflated "
        "by contention, CPU time is the process's own CPU seconds.",
        "",
        "| seed | ACC | NMI | ARI | final loss | epochs | wall s | CPU s | s/epoch (last 10) | first epoch with ACC ≥ 0.88 (train s) | curriculum (epoch, s, event) | split moves (epoch: moved ← source) | load avg |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        t88 = "never" if r["t88"] is None else f"{r['e88']} ({r['t88']:.0f} s)"
        stages = "; ".join(f"{e}, {t:.0f}, {w}" for e, t, w in r["stages"])
        splits = "; ".join(f"{e}: {a} ← {j}" for e, a, j in r["splits"]) or "none"
        lines.append(f"| {r['seed']} | {r['acc']:.3f} | {r['nmi']:.3f} | {r['ari']:.3f} | {r['loss']:.5f} | {r['epochs']} | "
                     f"{r['wall']:.0f} | {r['cpu']:.0f} | {r['s_epoch']:.2f} | {t88} | {stages} | {splits} | {r['load']:.1f} |")
    lines += [
        "",
        "| | ACC avg (std) | ACC minLoss |",
        "| --- | --- | --- |",
        f"| ticlust {args.method} | {100 * accs.mean():.1f} ({100 * accs.std():.1f}) | {100 * best['acc']:.1f} (seed {best['seed']}) |",
        f"| paper, Table 2 (10 runs) | {paper_avg} | {paper_min} |",
        "",
        "The authors' code on an unloaded 2-core machine of this kind (issue 7): 3.3–4 s per epoch; ACC 0.50 after its "
        "100 identity-only epochs (182 s), 0.887 at epoch 160 of the affine phase (415 s), then flat at 0.887–0.889 "
        "until its fixed milestones (morphology at epoch 500, TPS at 700; 1,700 epochs in all: 2.7 h with 0 loader "
        "workers, 4.1 h as shipped). Seconds per epoch by phase: identity 1.3, +affine 2.9, +morphology 7.0, +TPS 7.0.",
    ]
    tag = f"_{args.tag}" if args.tag else ""
    out = Path(__file__).resolve().parent / "results" / f"dti_mnist1k_{args.method}{tag}.md"
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
