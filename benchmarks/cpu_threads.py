"""Store predict on a quiet and on a busy machine, this tree against another checkout (before the thread choice by free
cores), in alternating whole processes, the same store and result.

  python benchmarks/cpu_threads.py --base /tmp/main-checkout [--fields 20] [--modes in-process workers1 workers2]
                                   [--hold] [--rounds 2] [--out FILE]

A generated plate (--fields × 250 nuclei, ``write_nuclei_plate``) is extracted once and ai-kmeans fitted on a 300-object
sample (benchmarks/scale_workers.py's short settings); then each child process (A: this tree, B: --base) predicts every
object (``predict_store``) in-process or on a LocalCluster of 1 or 2 workers (start-up included: what a user waits
for) and reports wall and CPU seconds and the torch threads it ran with. ``--hold``: a busy loop (another process,
started here and ended after) holds one core all along, as another user's job would. Load (1/5/15 min) beside each
run; Markdown table on stdout (and appended to --out).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _paired import child_json, in_turn  # noqa: E402  (benchmarks/ is on sys.path when run as a script)

HERE = Path(__file__).resolve().parent


def child(args) -> None:
    """In a fresh process of the tree on PYTHONPATH: predict the store, one JSON line."""
    import torch
    from ticlust.plate.run import predict_store
    from _data import load_average

    store = Path(args.work) / f"store-{os.getpid()}.zarr"
    shutil.copytree(Path(args.work) / "plate.zarr", store)
    workers = None if args.child == "in-process" else int(args.child[-1])
    load, wall, cpu = load_average(), time.perf_counter(), os.times()
    done = predict_store(Path(args.work) / "result.npz", store, workers=workers)
    wall, now = time.perf_counter() - wall, os.times()
    cpu_s = now.user - cpu.user + now.system - cpu.system + now.children_user - cpu.children_user
    shutil.rmtree(store, ignore_errors=True)
    print(json.dumps({"objects": done.objects, "wall_s": round(wall, 2), "cpu_s": round(cpu_s, 2),
                      "threads_after": torch.get_num_threads(), "load_before": load, "load_after": load_average()}))


def prepare(work: Path, fields: int) -> None:
    sys.path.insert(0, str(HERE.parent / "src"))
    import ticlust
    from ticlust.datasets.nuclei import write_nuclei_plate
    from scale_workers import fit_for_predict

    write_nuclei_plate(work / "plate", fields=fields, n=250)
    store = ticlust.extract(work / "plate", work / "plate.zarr")
    shutil.move(fit_for_predict(store.path, work, "ai-kmeans", 300), work / "result.npz")


def run_child(tree: Path, mode: str, work: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    return child_json(tree, [__file__, "--child", mode, "--work", str(work)], env)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base")
    ap.add_argument("--fields", type=int, default=20)
    ap.add_argument("--modes", nargs="+", default=["in-process", "workers1", "workers2"],
                    choices=["in-process", "workers1", "workers2"])
    ap.add_argument("--hold", action="store_true", help="hold one core with a busy loop in another process")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--work")
    ap.add_argument("--out")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child(args)
        return 0
    work = Path(args.work or tempfile.mkdtemp(prefix="ticlust-threads-"))
    if not (work / "result.npz").exists():
        prepare(work, args.fields)
    trees = [("A", HERE.parent)] + ([("B", Path(args.base).resolve())] if args.base else [])
    hold = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if args.hold else None
    rows = []
    try:
        time.sleep(2 if hold else 0)
        for r in range(args.rounds):
            for mode in args.modes:
                for name, tree in in_turn(trees, r):
                    row = {"round": r + 1, "tree": name, "mode": mode, **run_child(tree, mode, work)}
                    print(json.dumps(row), flush=True)
                    rows.append(row)
    finally:
        if hold is not None:
            hold.kill()
            hold.wait()
    lines = [f"`python benchmarks/cpu_threads.py {' '.join(argv if argv is not None else sys.argv[1:])}`: {args.fields} "
             f"fields, {rows[0]['objects']} objects, ai-kmeans; {'one core held by a busy loop' if hold else 'no core held'}; "
             f"{os.cpu_count()} CPUs; {time.strftime('%Y-%m-%d %H:%M')}. A = this tree, B = --base.", "",
             "| round | tree | mode | wall s | CPU s (process + children) | load before / after |", "|---|---|---|---|---|---|"]
    lines += [f"| {r['round']} | {r['tree']} | {r['mode']} | {r['wall_s']} | {r['cpu_s']} | {r['load_before']} / "
              f"{r['load_after']} |" for r in rows]
    print("\n".join(lines))
    if args.out:
        with open(args.out, "a") as f:
            f.write("\n".join(lines) + "\n\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
