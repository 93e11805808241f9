"""A plate at scale (issue "Plates and a million objects", items 3 and 7): extract, fit on a sample, predict every
object, on a generated plate with known kinds (ticlust.datasets.nuclei.write_nuclei_plate: fields of 250 nuclei, 1024×1024
uint16, Cellpose-style masks, kinds.csv).

  python benchmarks/scale.py --objects 10000 100000 --methods kmeans ai-kmeans pssc dti-kmeans --fit-sample 2000

Per plate size: `ticlust extract` (--workers 1), then per method `ticlust fit STORE --fit-sample N` and `ticlust
predict RESULT STORE --parquet`, each step a fresh process: wall time, objects/s, peak resident memory (the child's
ru_maxrss), the store's size after the step, ACC (Hungarian) of every interior object's predicted cluster against
kinds.csv, and how many of the fit sample's objects predict put into another cluster than the fit did.
--objects is rounded up to whole fields (250 nuclei each; about 240 of them are interior). Results go to
benchmarks/results/scale.md (and scale.json), with the machine and its load beside every line.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))

from _data import load_average  # noqa: E402

RESULTS = HERE / "results"
PER_FIELD = 250

#: Short settings of the slower methods (the defaults are for a full fit; noted in the report).
SETTINGS = {
    "kmeans": ["--k", "3"],
    "pssc": ["--k", "3"],
    "ai-kmeans": ["--k", "3", "--set", "steps=10", "--set", "affine_steps=10", "--set", "max_iter=5",
                  "--set", "predict_steps=30"],
    "dti-kmeans": ["--k", "3", "--set", "max_epochs=20"],
    "shape-kmeans": ["--k", "3"],
}

#: Runs the CLI in a child and prints its peak RSS (KiB) and the seconds of the command itself.
PROBE = """
import resource, sys, time
from ticlust.cli import main
start = time.perf_counter()
code = main(sys.argv[1:])
done = time.perf_counter()
print("PROBE", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,
      round(done - start, 2), code, file=sys.stderr)
"""


def run(args: list[str], timeout: float | None = None) -> dict:
    """One `ticlust ...` in a fresh process: wall time (whole process, imports included), the command's own
    seconds, peak RSS (MiB) of it and of any worker, its stdout."""
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, timeout=timeout,
                         env={**os.environ, "PYTHONPATH": str(HERE.parent / "src")})
    wall = time.perf_counter() - start
    probe = [line for line in out.stderr.splitlines() if line.startswith("PROBE")]
    if not probe or probe[0].split()[4] != "0":
        raise SystemExit(f"ticlust {' '.join(args)} failed:\n{out.stderr[-3000:]}")
    _, rss, kids, seconds, _ = probe[0].split()
    return {"wall_s": round(wall, 1), "run_s": float(seconds), "peak_mib": round(int(rss) / 1024),
            "worker_mib": round(int(kids) / 1024), "stdout": out.stdout, "load": load_average()}


def size_mib(path: Path) -> float:
    return round(sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 2 ** 20, 1)


def accuracy(store: Path, plate: Path) -> float:
    import pandas as pd

    from ticlust.metrics import evaluate
    from ticlust.datasets.nuclei import KINDS

    table = pd.read_parquet(store / "predictions.parquet", columns=["image", "label", "cluster"])
    kinds = pd.read_csv(plate / "kinds.csv")
    joined = table.merge(kinds, on=["image", "label"], how="left", validate="one_to_one")
    assert joined["kind"].notna().all(), "a predicted row names no nucleus of the plate"
    truth = joined["kind"].map({k: i for i, k in enumerate(KINDS)}).to_numpy()
    return round(float(evaluate(truth, joined["cluster"].to_numpy())["acc"]), 4)


def without_map(result: Path) -> Path:
    """A copy of a result file without its object map (as a result saved before maps): predict then skips the map."""
    import dataclasses

    from ticlust.api import load_result
    from ticlust.kernels.embedding import EXTRAS

    r = load_result(result)
    extras = {k: v for k, v in r.extras.items() if k not in EXTRAS}
    plain = dataclasses.replace(r, extras=extras, embedding=None, map=None)
    return plain.save(result.with_name(result.stem + "-nomap.npz"))


def plate_size(work: Path, objects: int, args) -> list[dict]:
    from ticlust.datasets.nuclei import write_nuclei_plate

    fields = math.ceil(objects / PER_FIELD)
    plate, store = work / f"plate{fields}", work / f"plate{fields}.zarr"
    if not (plate / "kinds.csv").exists():
        t = time.perf_counter()
        # at most 96 wells (a 96-well plate, more fields per well as the plate grows), so well names stay A01-H12
        write_nuclei_plate(plate, fields=fields, n=PER_FIELD, fields_per_well=max(2, math.ceil(fields / 96)))
        print(f"  wrote plate of {fields} fields in {time.perf_counter() - t:.0f} s", flush=True)
    shutil.rmtree(store, ignore_errors=True)
    step = run(["extract", str(plate / "plate.csv"), "-o", str(store), "--workers", str(args.workers), "--quiet"])
    n = int(step["stdout"].split(": ", 1)[1].split()[0])
    rows = [{"objects": n, "fields": fields, "step": "extract", "method": "", "objects_per_s": round(n / step["run_s"]),
             "store_mib": size_mib(store), **{k: v for k, v in step.items() if k != "stdout"}}]
    print("  ", rows[-1], flush=True)
    for method in args.methods:
        result = work / f"{method}-{fields}.npz"
        step = run(["fit", str(store), "--fit-sample", str(args.fit_sample), "--method", method, "-o", str(result),
                    "--quiet", *SETTINGS.get(method, [])])
        rows.append({"objects": n, "fields": fields, "step": "fit", "method": method,
                     "objects_per_s": round(min(args.fit_sample, n) / step["run_s"]), "store_mib": size_mib(store),
                     **{k: v for k, v in step.items() if k != "stdout"}})
        print("  ", rows[-1], flush=True)
        if args.map_overhead:      # paired: the same result without its map, predicted just before it
            plain = without_map(result)
            step = run(["predict", str(plain), str(store), "--quiet"])
            rows.append({"objects": n, "fields": fields, "step": "predict (no map)", "method": method,
                         "objects_per_s": round(n / step["run_s"]), "store_mib": size_mib(store),
                         **{k: v for k, v in step.items() if k != "stdout"}})
            print("  ", rows[-1], flush=True)
        step = run(["predict", str(result), str(store), "--quiet"])
        said = step["stdout"]
        differ = int(said.split("(")[-1].split(" differ")[0]) if "differ)" in said else None
        rows.append({"objects": n, "fields": fields, "step": "predict", "method": method,
                     "objects_per_s": round(n / step["run_s"]), "store_mib": size_mib(store),
                     "acc": accuracy(store, plate), "sample_differ": differ,
                     **{k: v for k, v in step.items() if k != "stdout"}})
        print("  ", rows[-1], flush=True)
    if not args.keep:
        shutil.rmtree(store, ignore_errors=True)
    return rows


def report(rows: list[dict], args, commit: str) -> str:
    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(l.split(":", 1)[1].strip() for l in Path("/proc/cpuinfo").read_text().splitlines()
                   if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    lines = ["# A plate at scale: extract, fit on a sample, predict every object (`python benchmarks/scale.py`)", "",
             f"ticlust {commit}; {cpu}, {os.cpu_count()} cores shared with other jobs (load average 1/5/15 min beside "
             f"every line); Python {sys.version.split()[0]}. Generated plate: fields of {PER_FIELD} nuclei of three "
             "kinds (1024×1024 uint16; the interior ones are the objects), extracted by `ticlust extract --workers "
             f"{args.workers}` with the route's defaults; `ticlust fit STORE --fit-sample {args.fit_sample}` then "
             "`ticlust predict RESULT STORE`, each a fresh process. wall s = the whole process (its imports, "
             "about 3 s, included); run s = the command itself; objects/s = objects (the sample, for fit) / run s; "
             "peak MiB = the process's peak resident memory; store MiB = the store after the step (predictions "
             "included); ACC = Hungarian accuracy of every object's predicted cluster against kinds.csv; "
             "sample differ = objects of the fit sample that predict put in another cluster than the fit.", "",
             "Settings: " + "; ".join(f"{m}: {' '.join(SETTINGS.get(m, [])) or 'defaults'}" for m in args.methods), "",
             "| objects | step | method | wall s | run s | objects/s | peak MiB | store MiB | ACC | sample differ | load |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['objects']:,} | {r['step']} | {r['method']} | {r['wall_s']} | {r['run_s']} | "
                     f"{r['objects_per_s']:,} | {r['peak_mib']} | {r['store_mib']} | {r.get('acc', '')} | "
                     f"{'' if r.get('sample_differ') is None else r['sample_differ']} | {r['load']} |")
    sizes = sorted({r["objects"] for r in rows})
    if len(sizes) >= 2:
        lo, hi = sizes[0], sizes[-1]
        lines += ["", f"## {lo:,} → {hi:,} objects ({hi / lo:.1f}×)", "",
                  "| step | method | peak memory | wall time (run s) |", "|---|---|---|---|"]
        for r in rows:
            if r["objects"] != lo:
                continue
            big = next((b for b in rows if b["objects"] == hi and b["step"] == r["step"] and b["method"] == r["method"]),
                       None)
            if big is not None:
                lines.append(f"| {r['step']} | {r['method']} | {big['peak_mib'] / r['peak_mib']:.2f}× | "
                             f"{big['run_s'] / r['run_s']:.2f}× |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--objects", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--methods", nargs="+", default=["kmeans"])
    parser.add_argument("--fit-sample", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--work", default="/tmp/ticlust-scale", help="where plates and stores are written")
    parser.add_argument("--keep", action="store_true", help="keep the stores")
    parser.add_argument("--map-overhead", action="store_true", help="also predict each result without its object map "
                        "just before it (paired: the map's share of predict's time)")
    parser.add_argument("--out", default=str(RESULTS / "scale.md"))
    args = parser.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=HERE).stdout.strip() or "?"
    rows = []
    for n in args.objects:
        print(f"{n} objects", flush=True)
        rows += plate_size(work, n, args)
        Path(args.out).with_suffix(".json").write_text(json.dumps(rows, indent=1))
        Path(args.out).write_text(report(rows, args, commit))
    print(Path(args.out).read_text())


if __name__ == "__main__":
    main()
