"""Longest gap between training events, per method (issue 19.3): Cancel takes effect at the next event.

    python benchmarks/event_gaps.py [--data-dir DIR] [--threads 2] [--seconds 60] [--only nt,pssc]

Each method trains on the first 2,000 MNIST-test digits (PSSC: all 10,000) in a fresh process, for at
most ``--seconds``; the run is then cancelled the way the widget does it (the event generator is closed).
The table gives the longest gap between two events (the first event counted from the start), where it
happened, and how long closing took. Writes benchmarks/results/event_gaps.md.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from _data import data_dir, load_average  # noqa: E402  (benchmarks/ is on sys.path when run as a script)

HERE = Path(__file__).resolve()
METHODS = ["kmeans", "gmm", "ai-kmeans", "st-kmeans", "pssc", "dti-kmeans", "dti-gmm", "nt"]


def child(args) -> None:
    import numpy as np
    import torch

    torch.set_num_threads(args.threads)
    sys.path.insert(0, str(HERE.parents[1] / "src"))
    import ticlust

    with np.load(data_dir(args.data_dir) / "mnist.npz") as d:
        x = d["x_test"][: 10000 if args.method == "pssc" else 2000]
    events = ticlust.run(x, method=args.method, k=10, device="cpu", seed=0)
    start = last = time.perf_counter()
    longest, where, count = 0.0, "", 0
    for event in events:
        now = time.perf_counter()
        if now - last > longest:
            longest, where = now - last, getattr(event, "stage", type(event).__name__) or type(event).__name__
        last, count = now, count + 1
        if now - start > args.seconds:
            break
    t0 = time.perf_counter()
    events.close()
    print(json.dumps({"longest": longest, "where": where, "events": count, "ran": last - start,
                      "close_s": time.perf_counter() - t0, "finished": last - start <= args.seconds}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data-dir")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--only")
    ap.add_argument("--method", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.method:
        return child(args)
    rows = []
    for method in (args.only.split(",") if args.only else METHODS):
        cmd = [sys.executable, str(HERE), "--method", method, "--threads", str(args.threads), "--seconds", str(args.seconds)]
        out = subprocess.run(cmd + (["--data-dir", args.data_dir] if args.data_dir else []), capture_output=True, text=True)
        rows.append((method, json.loads(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 else
                     {"error": out.stderr.strip().splitlines()[-1]}))
        print(method, rows[-1][1], flush=True)
    load = load_average()
    lines = [f"# Longest gap between events ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})", "",
             f"`python benchmarks/event_gaps.py --threads {args.threads} --seconds {args.seconds:g}`: 2,000 MNIST-test "
             f"digits (PSSC 10,000), K = 10, defaults, CPU, load average {load} at the end. Target "
             "(issue 19): ≤ 1.5 s on 2 cores for every method.", "",
             "| method | longest gap (s) | before the event of stage | events | seconds run | finished | close (s) |",
             "|---|---|---|---|---|---|---|"]
    for method, r in rows:
        if "error" in r:
            lines.append(f"| {method} | failed: {r['error'][:100]} | | | | | |")
            continue
        lines.append(f"| {method} | {r['longest']:.2f} | {r['where']} | {r['events']} | {r['ran']:.1f} | "
                     f"{'yes' if r['finished'] else 'no (cancelled)'} | {r['close_s']:.3f} |")
    (HERE.parent / "results" / "event_gaps.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
