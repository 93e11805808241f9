"""Speed at real sizes (issue 52 item 4): every image method's fit time, predict rate and peak memory on real cell
crops of 64×64×2 and 128×128×2, K = 8, 2 CPU threads; and the peak memory of a fit on 10,000 crops of 64×64×2.

The crops: ``real_ifc_cellcycle.npz`` (3,418 Jurkat cells imaged by imaging flow cytometry, 3×40×40 uint16, 7 phases):
channels brightfield and DNA, each tile padded to 64×64 with its own median per channel (the background about the
cell). A seeded 1,000 are fitted and 1,000 others predicted; 128×128: the same crops upsampled 2× (each pixel
repeated). ``--memory``: 10,000 crops of 64×64×2 — the 3,418 cells, then the same turned by 90°, 180° and 270°, cut to
10,000 — fitted by a short run of each method (a few iterations or one epoch: the point is memory, as in
benchmarks/memory.py). ACC / NMI / ARI are of the fitted crops against the 7 phases (K = 8: one cluster more).

Each run is a child process (its peak RSS is its own, ``ru_maxrss``), with 2 torch threads and OMP_WAIT_POLICY=PASSIVE
(a shared machine), under a cap (``--cap``, seconds: a run past it is reported as not finished); ``--lock FILE`` holds
that lock around each child. Rows are appended to benchmarks/results/real_speed.jsonl with the commit and the load
average before and after; benchmarks/results/real_speed.md is re-made from the newest row of each
(method, parameters, size, mode) at each commit, so a change shows before and after.

    PYTHONPATH=src python benchmarks/real_speed.py --lock /work/wt/bench.lock                  # every method, 64 px
    PYTHONPATH=src python benchmarks/real_speed.py --size 128 --methods rigid-kmeans kmeans
    PYTHONPATH=src python benchmarks/real_speed.py --methods dti-kmeans:schedule=quick --cap 3600
    PYTHONPATH=src python benchmarks/real_speed.py --memory
"""
from __future__ import annotations

import argparse
import fcntl
import json
import os
import resource
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from _data import data_dir, load_average  # noqa: E402  (benchmarks/ is on sys.path when run as a script)

HERE = Path(__file__).resolve().parent
LOG, TABLE = HERE / "results" / "real_speed.jsonl", HERE / "results" / "real_speed.md"
METHODS = ("kmeans", "gmm", "pssc", "cell-kmeans", "nt", "ai-kmeans", "st-kmeans", "rigid-kmeans", "rigid-pssc", "rigid-spectral",
           "dti-kmeans", "dti-kmeans:schedule=quick", "dti-gmm", "dti-gmm:schedule=quick")
K, N_FIT, N_PREDICT, N_MEMORY, SUBSET_SEED = 8, 1000, 1000, 10000, 0
#: The short runs of --memory (the peak of a fit is reached in its first iterations: each holds what the next holds).
SHORT = {"kmeans": {"max_iter": 3}, "gmm": {"max_iter": 2}, "pssc": {}, "cell-kmeans": {}, "nt": {"max_iter": 2}, "ai-kmeans": {"max_iter": 2},
         "st-kmeans": {"max_iter": 2}, "rigid-kmeans": {"max_iter": 2}, "rigid-pssc": {"rigid_iter": 2},
         "rigid-spectral": {}, "dti-kmeans": {"max_epochs": 1}, "dti-gmm": {"max_epochs": 1}}


# ---- the crops -------------------------------------------------------------------------------------------------------
def ifc_crops(shared: Path, size: int = 64) -> tuple[np.ndarray, np.ndarray]:
    """Every IFC cell as a size×size×2 crop (brightfield, DNA; float32 counts), padded with each tile's median per
    channel to 64×64 and, for 128, upsampled 2× by repeating each pixel; and the phases."""
    d = np.load(shared / "real_ifc_cellcycle.npz", allow_pickle=False)
    tiles = d["images"][:, :2].astype(np.float32)                     # (N, 2, 40, 40): brightfield, DNA
    n, c, h, w = tiles.shape
    out = np.broadcast_to(np.median(tiles.reshape(n, c, -1), -1)[:, :, None, None], (n, c, 64, 64)).copy()
    top, left = (64 - h) // 2, (64 - w) // 2
    out[:, :, top:top + h, left:left + w] = tiles
    if size == 128:
        out = out.repeat(2, -2).repeat(2, -1)
    return np.ascontiguousarray(np.moveaxis(out, 1, -1)), d["labels"].astype(np.int64)


def split(n: int) -> tuple[np.ndarray, np.ndarray]:
    """The seeded fit items and predict items (disjoint) among n cells."""
    order = np.random.default_rng(SUBSET_SEED).permutation(n)
    return np.sort(order[:N_FIT]), np.sort(order[N_FIT:N_FIT + N_PREDICT])


def memory_crops(shared: Path) -> np.ndarray:
    """10,000 crops of 64×64×2: every cell, then every cell turned by 90°, 180°, 270°, cut to N_MEMORY."""
    x, _ = ifc_crops(shared)
    return np.ascontiguousarray(np.concatenate([np.rot90(x, t, axes=(1, 2)) for t in range(4)])[:N_MEMORY])


# ---- one run, in a child process -------------------------------------------------------------------------------------
def parse(spec: str) -> tuple[str, dict]:
    """'name' or 'name:key=value,key=value' → (name, parameters as strings: the method's config coerces them)."""
    name, _, rest = spec.partition(":")
    return name, dict(item.split("=", 1) for item in rest.split(",") if item)


def one_run(job: dict) -> dict:
    import torch

    import ticlust
    from ticlust.metrics import evaluate

    torch.set_num_threads(2)
    shared, (method, params) = Path(job["shared"]), parse(job["spec"])
    if job["mode"] == "memory":
        x, y, fit_rows, new_rows = memory_crops(shared), None, slice(None), None
        params = {**SHORT.get(method, {}), **params}
    else:
        x, y = ifc_crops(shared, job["size"])
        fit_rows, new_rows = split(len(x))
    loaded = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    wall, cpu = time.perf_counter(), time.process_time()
    result = ticlust.fit(x[fit_rows], method, K, device="cpu", seed=job["seed"], progress=False, **params)
    row = {"fit_s": time.perf_counter() - wall, "fit_cpu_s": time.process_time() - cpu,
           "iterations": result.timing.get("iterations"), "n": int(len(result.labels))}
    if y is not None:
        row.update({key: float(v) for key, v in evaluate(y[fit_rows], result.labels).items() if key in ("acc", "nmi", "ari")})
    if new_rows is not None:
        wall, cpu = time.perf_counter(), time.process_time()
        ticlust.predict(result, x[new_rows], device="cpu")
        row.update(predict_per_s=len(new_rows) / (time.perf_counter() - wall), predict_cpu_s=time.process_time() - cpu)
    return {**row, "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "loaded_mib": loaded}


def child_main(spec: str) -> None:
    try:
        row = {"status": "ok", **one_run(json.loads(spec))}
    except Exception as exc:       # the parent records a failure as the run's row
        row = {"status": f"error: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"}
    print("ROW " + json.dumps(row), flush=True)


# ---- the parent ------------------------------------------------------------------------------------------------------
def run_child(job: dict, cap: float, lock: str | None) -> dict:
    """The job in a child process, under the lock and the cap; its row with the loads and the commit."""
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE", "PYTHONPATH": str(HERE.parent / "src")}
    fh = open(lock, "a") if lock else None
    if fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
    try:
        before = load_average()
        try:
            out = subprocess.run([sys.executable, __file__, "--child", json.dumps(job)], env=env, capture_output=True,
                                 text=True, timeout=cap).stdout
            line = [s for s in out.splitlines() if s.startswith("ROW ")]
            row = json.loads(line[-1][4:]) if line else {"status": "error: the child printed no row"}
        except subprocess.TimeoutExpired:
            row = {"status": f"not finished in {cap:.0f} s"}
        after = load_average()
    finally:
        if fh:
            fcntl.flock(fh, fcntl.LOCK_UN)
            fh.close()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True, text=True).stdout.strip()
    return {**job, **row, "load_before": before, "load_after": after, "commit": commit,
            "when": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "cpu": os.cpu_count()}


def fmt(v, digits=1) -> str:
    return "" if v is None else (f"{v:.{digits}f}" if isinstance(v, float) else str(v))


def table(rows: list[dict]) -> str:
    newest = {}   # the newest row of each (method, size, mode) at each commit: before and after a change side by side
    for r in rows:
        newest[(r["spec"], r["size"], r["mode"], r["commit"])] = r
    head = ("| method | crops | mode | fit s (wall) | fit CPU s | iterations | predict objects/s | peak MiB | ACC | NMI | ARI "
            "| status | load before / after | commit |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for (spec, size, mode, _), r in sorted(newest.items(), key=lambda kv: (kv[0][2], kv[0][1], kv[0][0], kv[1]["when"])):
        crops = f"{r.get('n', N_MEMORY if mode == 'memory' else N_FIT):,} × {size}×{size}×2"
        lines.append(f"| {spec} | {crops} | {mode} | {fmt(r.get('fit_s'))} | {fmt(r.get('fit_cpu_s'))} | "
                     f"{fmt(r.get('iterations'))} | {fmt(r.get('predict_per_s'), 0)} | {fmt(r.get('peak_mib'), 0)} | "
                     f"{fmt(r.get('acc'), 3)} | {fmt(r.get('nmi'), 3)} | {fmt(r.get('ari'), 3)} | {r['status']} | "
                     f"{r['load_before']} / {r['load_after']} | {r['commit']} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--methods", nargs="+", default=list(METHODS), help="names, or name:key=value,key=value")
    ap.add_argument("--size", type=int, choices=(64, 128), default=64)
    ap.add_argument("--memory", action="store_true", help="10,000 crops of 64×64×2, short runs: peak memory")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cap", type=float, default=900.0, help="seconds a run may take before it is stopped")
    ap.add_argument("--lock", help="hold this lock file around each run")
    ap.add_argument("--data-dir")
    ap.add_argument("--report", action="store_true", help="only re-make the table from the log")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return child_main(args.child)
    LOG.parent.mkdir(exist_ok=True)
    if not args.report:
        for spec in args.methods:
            job = {"spec": spec, "size": 64 if args.memory else args.size, "mode": "memory" if args.memory else "speed",
                   "seed": args.seed, "shared": str(data_dir(args.data_dir))}
            row = run_child(job, args.cap, args.lock)
            print(json.dumps(row), flush=True)
            with open(LOG, "a") as fh:
                fh.write(json.dumps(row) + "\n")
    rows = [json.loads(s) for s in LOG.read_text().splitlines() if s.strip()]
    TABLE.write_text(
        "# Speed at real sizes (benchmarks/real_speed.py)\n\n"
        f"Real cells: `real_ifc_cellcycle.npz` (imaging flow cytometry), channels brightfield and DNA, each 40×40 tile "
        f"padded to 64×64 with its own median per channel; 128×128: the same upsampled 2× (pixels repeated). Speed: "
        f"{N_FIT:,} crops fitted (seeded), {N_PREDICT:,} others predicted, K = {K}; ACC/NMI/ARI of the fitted crops "
        f"against the 7 phases. Memory: {N_MEMORY:,} crops of 64×64×2 (the cells and their quarter turns), short runs. "
        "Each run a child process, 2 torch threads, OMP_WAIT_POLICY=PASSIVE, CPU; peak MiB = the child's ru_maxrss; "
        "load = the machine's 1/5/15-minute load average before and after the run (2 cores, shared).\n\n" + table(rows))


if __name__ == "__main__":
    main()
