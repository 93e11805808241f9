"""Choosing K (issue 52 item 5): the K that ``ticlust.scan_k`` suggests against the true K on every labelled set here —
the real cells (imaging flow cytometry, PBC and BCCD blood cells: benchmarks/real_cells.py's registry), MNIST, USPS,
COIL-20 and the generated nuclei — for each criterion, scanning K directly (a fit per K and repeat) and by
over-clustering then merging (a fit of the top K per repeat, merged down).

Appends every scan (its per-K scores) to benchmarks/results/k_scan.jsonl and re-makes k_scan.md (the table and the
hits: true K ± 1) from the newest scan of each (set, method, mode), so a run of a few sets or modes keeps the others.

    PYTHONPATH=src python benchmarks/k_scan.py [--methods kmeans] [--sets ifc mnist] [--modes direct merge]
                                               [--repeats 3] [--device cpu]

The range is 2–16 (the default of ``ticlust fit --k-scan``), 2–24 for COIL-20 (20 objects: 2–16 could not hold it).
Accuracy only: no timings are quoted beyond each scan's wall seconds (load written beside them).
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

import ticlust
from ticlust.evaluation import CRITERIA
from _data import data_dir, load_average  # noqa: E402  (benchmarks/ is on sys.path when run as a script)
from real_cells import DATASETS, commit, load_set, machine  # noqa: E402

HERE = Path(__file__).resolve().parent
SUBSET = 2000           # items of the larger sets (seeded, as real_cells.py's subsets)


def subset(x: np.ndarray, y: np.ndarray, m: int = SUBSET) -> tuple[np.ndarray, np.ndarray]:
    keep = np.sort(np.random.default_rng(0).choice(len(x), m, replace=False)) if len(x) > m else np.arange(len(x))
    return x[keep], y[keep]


def labelled_sets(shared: Path) -> dict:
    """name -> (images, labels, K range): every labelled set (a real-cells set not converted yet is left out)."""
    out = {}
    for name in ("ifc", "pbc", "bccd-wbc"):
        try:
            cells = load_set(name, DATASETS[name].subset, shared)
        except FileNotFoundError as exc:
            print(f"skipping {name}: {exc}")
            continue
        out[name] = (cells.images, cells.labels, range(2, 17))
    mnist, usps, coil = (np.load(shared / f) for f in ("mnist.npz", "usps.npz", "coil20_32x32.npz"))
    out["mnist"] = (*subset(mnist["x_test"], mnist["y_test"]), range(2, 17))
    out["usps"] = (*subset(usps["x_test"], usps["y_test"]), range(2, 17))
    out["coil20"] = (coil["images"], coil["labels"], range(2, 25))
    x, y = ticlust.sample("nuclei", seed=0)
    out["nuclei"] = (x, y, range(2, 17))
    return out


def merge_quality(x: np.ndarray, y: np.ndarray, method: str, device: str, top: int = 16) -> dict:
    """Does over-clustering then merging help the partition at the true K? The method fitted at the true K (seed 0)
    against its fit at ``top`` (or 2 × the true K, the larger) dissolved down to the true K: ACC / NMI / ARI of each."""
    from ticlust.evaluation import ScanFit, merged

    truth = len(np.unique(y))
    direct = ticlust.fit(x, method, truth, device=device, seed=0, progress=False)
    over = ticlust.fit(x, method, max(top, 2 * truth), device=device, seed=0, progress=False)
    costs = np.asarray(over.scores, np.float64)
    down = merged(ScanFit(costs.shape[1], costs.argmin(1), 0.0, 0.0, 0.0, costs), [truth])[0]
    return {"direct": ticlust.evaluate(y, direct.labels), "merged": ticlust.evaluate(y, down.labels),
            "top": costs.shape[1]}


def hit(k: int, truth: int) -> bool:
    return abs(k - truth) <= 1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--methods", nargs="+", default=["kmeans"])
    ap.add_argument("--sets", nargs="+")
    ap.add_argument("--modes", nargs="+", default=["direct", "merge"], choices=["direct", "merge"])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--data-dir")
    ap.add_argument("--out", default=str(HERE / "results" / "k_scan.md"))
    ap.add_argument("--merge-quality", action="store_true", help="only measure whether merging helps the partition at "
                    "the true K (appends to k_scan_merge.md)")
    args = ap.parse_args()
    if args.merge_quality:
        return merge_table(labelled_sets(data_dir(args.data_dir)), args)
    sets = labelled_sets(data_dir(args.data_dir))
    log = Path(args.out).with_suffix(".jsonl")
    for name in args.sets or list(sets):
        x, y, ks = sets[name]
        truth = len(np.unique(y))
        for method in args.methods:
            for mode in args.modes:
                load, start = load_average(), time.perf_counter()
                scan = ticlust.scan_k(x, method, ks=ks, device=args.device, repeats=args.repeats,
                                      merge=mode == "merge", progress=False)
                row = {"set": name, "n": len(x), "true_k": truth, "method": method, "mode": mode,
                       "ks": scan.ks, "scores": scan.scores, "spread": scan.spread,
                       "suggested": {c: scan.suggestion(c) for c in CRITERIA},
                       "seconds": round(time.perf_counter() - start, 1), "load": f"{load} -> {load_average()}",
                       "commit": commit(), "repeats": args.repeats}
                with open(log, "a") as fh:
                    fh.write(json.dumps(row) + "\n")
                print(json.dumps({k: v for k, v in row.items() if k not in ("scores", "spread", "ks")}), flush=True)
    newest = {}
    for line in log.read_text().splitlines():
        row = json.loads(line)
        newest[(row["set"], row["method"], row["mode"])] = row
    write(sorted(newest.values(), key=lambda r: (list(sets).index(r["set"]) if r["set"] in sets else 99, r["method"],
                                                 r["mode"])), Path(args.out))


def merge_table(sets: dict, args) -> None:
    """benchmarks/results/k_scan_merge.md: the partition at the true K, fitted there or merged down from an
    over-clustered fit, for each method and set."""
    lines = ["", f"## Over-clustering then merging at the true K (commit {commit()}, seed 0, load {load_average()})", "",
             "| set | true K | method | direct ACC / NMI / ARI | merged from K=top: ACC / NMI / ARI | top |",
             "|---|---|---|---|---|---|"]
    for name in args.sets or list(sets):
        x, y, _ = sets[name]
        for method in args.methods:
            q = merge_quality(x, y, method, args.device)
            cell = lambda m: " / ".join(f"{m[key]:.3f}" for key in ("acc", "nmi", "ari"))  # noqa: E731
            lines.append(f"| {name} | {len(np.unique(y))} | {method} | {cell(q['direct'])} | {cell(q['merged'])} | {q['top']} |")
            print(lines[-1], flush=True)
    out = Path(args.out).with_name("k_scan_merge.md")
    head = "" if out.exists() else "# Does over-clustering then merging help? (benchmarks/k_scan.py --merge-quality)\n"
    with open(out, "a") as fh:
        fh.write(head + "\n".join(lines) + "\n")


def write(rows: list[dict], out: Path) -> None:
    lines = ["# Choosing K: the suggested K against the true K (issue 52 item 5)", "",
             f"Made by `benchmarks/k_scan.py` on {machine()} (the commit of each scan in k_scan.jsonl). `ticlust.scan_k` "
             "with its defaults (3 fits per K on seeded 80% subsamples, every item assigned by each fit, seed 0); `direct`: a fit "
             "per K and repeat; `merge`: one fit of the top K per repeat, its clusters dissolved down to each K. A hit is "
             "the true K ± 1. The per-K scores of every scan are in k_scan.jsonl.", ""]
    head = ["set", "N", "true K", "method", "mode", *CRITERIA, "seconds", "load"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [f"{r['suggested'][c]}{' ✓' if hit(r['suggested'][c], r['true_k']) else ''}" for c in CRITERIA]
        lines.append("| " + " | ".join([r["set"], str(r["n"]), str(r["true_k"]), r["method"], r["mode"], *cells,
                                        str(r["seconds"]), r["load"]]) + " |")
    lines += ["", "Hits (true K ± 1) per method, mode and criterion (of the real cells among them):", ""]
    for method, mode in sorted({(r["method"], r["mode"]) for r in rows}):
        mine = [r for r in rows if (r["method"], r["mode"]) == (method, mode)]
        real = [r for r in mine if r["set"] in ("ifc", "pbc", "bccd-wbc")]
        counts = [f"{c} {sum(hit(r['suggested'][c], r['true_k']) for r in mine)} of {len(mine)} "
                  f"({sum(hit(r['suggested'][c], r['true_k']) for r in real)} of {len(real)})" for c in CRITERIA]
        lines.append(f"- {method}, {mode}: " + "; ".join(counts))
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
