"""DTI K-means on several 1,000-image MNIST-test subsets, several seeds each, and minLoss over the seeds
(issue 15, item 2): does the default hold on subsets it was not tuned on, and does the paper's minLoss
(keep the run with the lowest final loss) pick a good run?

Subset s is the first 1,000 of ``np.random.default_rng(s).permutation(10000)`` (s = 100, 101, 102 by
default: none is the subset the defaults were tuned on). ``ticlust.fit(..., runs=N, seed=0)`` trains seeds
0 … N-1 and keeps the lowest final loss, so minLoss of N is read off the single-seed runs here (the same
seeds give bit-identical runs on the CPU). One JSON line per run is appended to the log as it finishes: scores,
final loss, CPU seconds (the process's own: robust to other jobs) and wall seconds, the curriculum's stages, and
every epoch's training ACC and loss.

    python benchmarks/dti_subsets.py --subsets 100 101 102 --seeds 0 1 2 3 4 --threads 1
    python benchmarks/dti_subsets.py --report          # the Markdown tables of the log, to paste into results/dti_subsets.md
    python benchmarks/dti_subsets.py --report --log results/dti_speed.jsonl --only encoder_stride=2   # one setting's runs

``--log`` writes elsewhere (trials of a setting, ``--set name=value``); ``--save DIR`` keeps each result
(``DIR/s{subset}_seed{seed}.npz``) and prints its confusion matrix, to see which digits a run mixes.
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402
import torch  # noqa: E402

import ticlust  # noqa: E402
from ticlust.metrics import evaluate, hungarian_accuracy  # noqa: E402
from _data import data_dir, load_average  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
LOG = RESULTS / "dti_subsets.jsonl"


def subset(n_total: int, permutation_seed: int, size: int = 1000) -> np.ndarray:
    return np.random.default_rng(permutation_seed).permutation(n_total)[:size]


def train(args):
    torch.set_num_threads(args.threads)
    with np.load(data_dir(None) / "mnist.npz") as npz:
        x_all, y_all = npz["x_test"], npz["y_test"].astype(np.int64)
    order = [(s, seed) for seed in args.seeds for s in args.subsets]        # every subset's seed 0 first
    for s, seed in order:
        idx = subset(len(x_all), s)
        load0, wall, cpu = load_average(), time.perf_counter(), time.process_time()
        r = ticlust.fit(x_all[idx], method="dti-kmeans", k=10, seed=seed, device=args.device, progress=False,
                        record_labels=True, **args.params)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        curve = [round(hungarian_accuracy(y_all[idx], lab), 3) for lab in r.extras["epoch_labels"]]
        row = dict(subset=s, seed=seed, params=args.params, **{k: float(v) for k, v in evaluate(y_all[idx], r.labels).items()},
                   loss=r.final_loss, wall=wall, cpu=cpu, epochs=r.timing["epochs"], stages=r.timing["stages"],
                   epoch_acc=curve, epoch_loss=[float(f"{v:.5g}") for v in r.history], load=f"{load0} -> {load_average()}", threads=args.threads, device=args.device,
                   code=args.code, date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
        with args.log.open("a") as f:
            f.write(json.dumps(row) + "\n")
        print({k: v for k, v in row.items() if k not in ("epoch_acc", "epoch_loss")}, flush=True)
        if args.save:
            r.save(args.save / f"s{s}_seed{seed}.npz")
            confusion = np.zeros((10, 10), np.int64)
            np.add.at(confusion, (y_all[idx], r.labels), 1)
            print("digit x cluster:\n" + "\n".join(f"{d}: " + " ".join(f"{v:3d}" for v in row) for d, row in enumerate(confusion)),
                  f"\nsplits (epoch, moved, source): {r.extras['splits'].tolist()}", flush=True)


def runs_of(logs: list[Path], only: dict | None) -> list[dict]:
    """The runs logged in ``logs`` (``only``: those whose ``--set`` parameters are exactly these; {}: the
    defaults), one per (subset, seed): a run logged twice must have given the same ACC and final loss."""
    kept: dict = {}
    for log in logs:
        for r in (json.loads(line) for line in log.read_text().splitlines() if line.strip()):
            if only is not None and r["params"] != only:
                continue
            twin = kept.get((r["subset"], r["seed"]))
            if twin is not None and (twin["acc"], twin["loss"]) != (r["acc"], r["loss"]):
                raise SystemExit(f"subset {r['subset']} seed {r['seed']} is logged twice with other numbers "
                                 f"({twin['code']}: {twin['acc']}, {twin['loss']}; {r['code']}: {r['acc']}, {r['loss']}).")
            kept[(r["subset"], r["seed"])] = r
    return sorted(kept.values(), key=lambda r: (r["subset"], r["seed"]))


def report(logs: list[Path], only: dict | None = None):
    """Print the runs of ``logs`` and each subset's mean and minLoss as Markdown (results/dti_subsets.md is
    written by hand around such tables: one per code version, with what they show). CPU seconds are the
    process's own (robust to other jobs on the machine); wall seconds are not."""
    rows = runs_of(logs, only)
    lines = [f"`{', '.join(log.name for log in logs)}`" + ("" if only is None else f", runs with {only or 'the defaults'}:"), "",
             "| subset | seed | ACC | NMI | final loss | epochs | CPU s | wall s | threads | load (1/5/15) | code | date |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        cpu = f"{r['cpu']:.0f}" if "cpu" in r else "—"
        lines.append(f"| {r['subset']} | {r['seed']} | {r['acc']:.3f} | {r['nmi']:.3f} | {r['loss']:.5f} | {r['epochs']} | "
                     f"{cpu} | {r['wall']:.0f} | {r['threads']} | {r['load']} | {r.get('code', '')} | {r['date']} |")
    lines += ["", "| subset | mean ACC seeds 0-2 | minLoss of 3 | mean ACC seeds 0-4 | minLoss of 5 | mean final loss seeds 0-4 "
              "| mean CPU s per run | mean wall s per run |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for s in sorted({r["subset"] for r in rows}):
        by_seed = {r["seed"]: r for r in rows if r["subset"] == s}

        def min_loss(n):
            runs = [by_seed[i] for i in range(n) if i in by_seed]
            return f"{min(runs, key=lambda r: r['loss'])['acc']:.3f}" if len(runs) == n else "—"

        def mean(n, key, digits):
            values = [by_seed[i][key] for i in range(n) if i in by_seed]
            return f"{np.mean(values):.{digits}f}" if len(values) == n else "—"
        cpus = [r["cpu"] for r in by_seed.values() if "cpu" in r]
        cpu = f"{np.mean(cpus):.0f}" if cpus else "—"
        lines.append(f"| {s} | {mean(3, 'acc', 3)} | {min_loss(3)} | {mean(5, 'acc', 3)} | {min_loss(5)} | {mean(5, 'loss', 5)} "
                     f"| {cpu} | {np.mean([r['wall'] for r in by_seed.values()]):.0f} |")
    print("\n".join(lines))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--subsets", type=int, nargs="+", default=[100, 101, 102])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--report", action="store_true")
    ap.add_argument("--log", type=Path, action="append", help="the log to append to (default results/dti_subsets.jsonl); "
                    "with --report, every log given is read")
    ap.add_argument("--only", nargs="*", metavar="NAME=VALUE", help="with --report: only the runs of exactly these --set "
                    "parameters (--only alone: the runs with the defaults)")
    ap.add_argument("--save", type=Path, help="keep each result here and print its confusion matrix")
    ap.add_argument("--code", default="", help="a label for the code under test, kept in the log (e.g. a commit)")
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="a dti-kmeans parameter")
    args = ap.parse_args()
    args.params = dict(kv.split("=", 1) for kv in args.set)      # the method's config converts the strings
    if args.save:
        args.save.mkdir(parents=True, exist_ok=True)
    logs = args.log or [LOG]
    if args.report:
        report(logs, None if args.only is None else dict(kv.split("=", 1) for kv in args.only))
        return
    if len(logs) > 1:
        raise SystemExit("Training appends to one log: give --log once.")
    args.log = logs[0]
    train(args)


if __name__ == "__main__":
    main()
