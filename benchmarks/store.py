"""The object store (issue "Plates and a million objects", items 1-2): extraction speed and memory on a
generated plate (ticlust.datasets.nuclei.write_nuclei_plate: fields of 250 nuclei, 1024×1024 uint16, Cellpose-style
masks), through `ticlust extract` as a user runs it.

  speed    --fields (default 20 and 100) × 250 nuclei extracted with --workers 1 and 2 (the route's defaults: oriented,
           normalised float32 crops at the plate's size): wall time, objects/s, the store's size on disk.
  memory   peak resident memory of the extraction (the parent, and the largest worker) at two plate
           sizes, --fields-small and --fields-large (default 40 and 400: 10k and 100k objects), with
           --workers 1 (everything in one process) — the issue asks ≤ 1.3× from 10k to 100k.

Every run is a fresh `python -m ticlust.cli extract` process; results go to benchmarks/results/store.md
with the machine's load average beside every number (two cores shared with other jobs).
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

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))

from ticlust.datasets.nuclei import write_nuclei_plate  # noqa: E402
from _data import load_average  # noqa: E402  (benchmarks/ is on sys.path when run as a script)

RESULTS = HERE / "results"

#: Runs `ticlust extract` in a child: prints its peak RSS (KiB, Linux's ru_maxrss), the seconds to import the
#: CLI and to run it, the exit code, the peak RSS once the CLI was imported, and the run's CPU seconds.
PROBE = """
import multiprocessing, resource, sys, time
start = time.perf_counter()
from ticlust.cli import main
ready = time.perf_counter()
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
cpu0 = sum(getattr(resource.getrusage(resource.RUSAGE_SELF), f) for f in ("ru_utime", "ru_stime"))
code = main(sys.argv[1:])
done = time.perf_counter()
for child in multiprocessing.active_children():
    child.join()
me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
cpu = me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime - cpu0
print("RSS", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,
      round(ready - start, 2), round(done - ready, 2), code, base, round(cpu, 2), file=sys.stderr)
"""


def run_extract(plate: Path, store: Path, workers: int) -> dict:
    """One `ticlust extract` in a fresh process: wall time, objects, peak memory of the run and its workers."""
    shutil.rmtree(store, ignore_errors=True)
    env_path = str(HERE.parent / "src")
    start = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-c", PROBE, "extract", str(plate), "-o", str(store), "--workers",
                              str(workers), "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": env_path})
    worker_kib = 0
    while child.poll() is None:
        worker_kib = max([worker_kib] + [high_water(pid) for pid in children(child.pid)])
        time.sleep(0.05)
    out = subprocess.CompletedProcess(child.args, child.returncode, *child.communicate())
    wall = time.perf_counter() - start
    if "RSS" not in out.stderr:
        raise SystemExit(out.stderr)
    rss = next(line for line in out.stderr.splitlines() if line.startswith("RSS")).split()
    objects = int(out.stdout.split(": ", 1)[1].split()[0])
    size = sum(p.stat().st_size for p in store.rglob("*") if p.is_file())
    run = float(rss[4])
    return {"workers": workers, "objects": objects, "wall_s": round(wall, 2), "startup_s": float(rss[3]),
            "extract_s": run, "objects_per_s": round(objects / run), "parent_mib": round(int(rss[1]) / 1024),
            "imported_mib": round(int(rss[6]) / 1024), "cpu_s": float(rss[7]),
            "worker_mib": round(worker_kib / 1024), "store_mib": round(size / 2 ** 20, 1), "load": load_average()}


def children(pid: int) -> list[int]:
    """The child processes of ``pid`` (Linux /proc)."""
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def high_water(pid: int) -> int:
    """A process's peak resident memory so far (VmHWM, KiB; since its exec, unlike ru_maxrss which also
    counts the moment a spawned worker was still a fork of its parent)."""
    try:
        line = next(l for l in Path(f"/proc/{pid}/status").read_text().splitlines() if l.startswith("VmHWM"))
        return int(line.split()[1])
    except (OSError, StopIteration):
        return 0


def speed(work: Path, fields: int) -> list[dict]:
    plate = work / f"plate{fields}"
    write_nuclei_plate(plate, fields=fields, n=250)
    rows = [{"fields": fields, **run_extract(plate, work / f"speed{w}.zarr", w)} for w in (1, 2)]
    shutil.rmtree(plate)
    return rows


def memory(work: Path, small: int, large: int) -> list[dict]:
    rows = []
    for fields in (small, large):
        plate = work / f"plate{fields}"
        if not plate.exists():
            write_nuclei_plate(plate, fields=fields, n=250)
        rows.append({"fields": fields, **run_extract(plate, work / f"memory{fields}.zarr", 1)})
        shutil.rmtree(plate)
    return rows


def report(results: dict) -> str:
    """benchmarks/results/store.md from every section measured so far."""
    lines = ["# Object store: extraction speed and memory (`python benchmarks/store.py`)", "",
             f"ticlust {results.get('commit', '?')}, Python {sys.version.split()[0]}; each line a fresh `ticlust "
             "extract` process: start-up is the CLI's import (torch included), extract s the run itself (worker "
             "start-up, both passes, the table); objects/s = objects / extract s; CPU s = the run's CPU time, "
             "workers included. The machine's 2 cores are shared with other jobs (load beside every line).", ""]
    if "speed" in results:
        lines += ["## Speed: fields × 250 nuclei (1024×1024 uint16), the route's defaults", "",
                  "| fields | workers | objects | start-up s | extract s | objects/s | CPU s | objects per CPU s | "
                  "parent MiB | largest worker MiB | store MiB | load |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        lines += [f"| {r['fields']} | {r['workers']} | {r['objects']} | {r['startup_s']} | {r['extract_s']} | "
                  f"{r['objects_per_s']} | {r['cpu_s']} | {round(r['objects'] / r['cpu_s'])} | {r['parent_mib']} | "
                  f"{r['worker_mib']} | {r['store_mib']} | {r['load']} |" for r in results["speed"]] + [""]
    if "memory" in results:
        small, large = results["memory"]
        grew = (large["parent_mib"] - large["imported_mib"]) / max(1, small["parent_mib"] - small["imported_mib"])
        lines += ["## Memory: peak resident memory, --workers 1 (one process does everything)", "",
                  "| fields | objects | extract s | objects/s | peak MiB | of which the CLI's imports | store MiB | load |",
                  "|---|---|---|---|---|---|---|---|"]
        lines += [f"| {r['fields']} | {r['objects']} | {r['extract_s']} | {r['objects_per_s']} | {r['parent_mib']} | "
                  f"{r['imported_mib']} | {r['store_mib']} | {r['load']} |" for r in results["memory"]]
        lines += ["", f"Peak memory, large / small plate: {large['parent_mib'] / small['parent_mib']:.2f}× "
                  f"({large['objects'] / small['objects']:.1f}× the objects); above the imports {grew:.2f}×.", ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sections", nargs="+", default=["speed", "memory"], choices=["speed", "memory"])
    parser.add_argument("--fields", type=int, nargs="+", default=[20, 100], help="plate sizes for the speed section")
    parser.add_argument("--fields-small", type=int, default=40)
    parser.add_argument("--fields-large", type=int, default=400)
    parser.add_argument("--work", help="folder for the plates and stores (default: a temporary one, removed after)")
    args = parser.parse_args()
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="ticlust-store-"))
    work.mkdir(parents=True, exist_ok=True)
    saved = RESULTS / "store.json"
    results = json.loads(saved.read_text()) if saved.exists() else {}
    results["commit"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True,
                                       text=True).stdout.strip()
    try:
        if "speed" in args.sections:
            results["speed"] = [row for fields in args.fields for row in speed(work, fields)]
        if "memory" in args.sections:
            results["memory"] = memory(work, args.fields_small, args.fields_large)
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    RESULTS.mkdir(exist_ok=True)
    saved.write_text(json.dumps(results, indent=1))
    (RESULTS / "store.md").write_text(report(results))
    print(report(results))


if __name__ == "__main__":
    main()
