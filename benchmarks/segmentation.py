"""Nucleus segmentation (``ticlust.segment_nuclei``) measured against known masks, and run on real fields.

1. F1 at IoU 0.5 (``ticlust.metrics.segmentation_f1``) on generated fields of touching nuclei
   (``ticlust.datasets.touching_nuclei``: separate, touching, uneven illumination, crowded with debris, saturated),
   each difficulty over several seeds, for every threshold method, with the nuclei's true mean diameter given.
2. How the score holds when the diameter given is off (0.75-1.4 times the true one), and what each part of the
   recipe is worth (the distance term of the seeds, the joining of shallow passes), by setting it to 0.
3. CellProfiler's ExampleFly fields (three real Drosophila sites, no truth): nuclei found per site, their
   equivalent diameters, and the CPU seconds per field. docs/make_segmentation_figure.py draws them to look at.

Writes benchmarks/results/segmentation.md; accuracy needs no lock, the CPU seconds are per field in this process.

    PYTHONPATH=src python benchmarks/segmentation.py [--seeds 5 --n 150 --size 512]
"""
from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

import numpy as np

from _data import data_dir, load_average
from ticlust.datasets.touching_nuclei import DIFFICULTIES, touching_nuclei_field
from ticlust.metrics import segmentation_f1
from ticlust.objects import segment as recipe

OUT = Path(__file__).parent / "results" / "segmentation.md"
SCALES = (0.75, 0.85, 1.0, 1.2, 1.4)


def score(fields, diameter_scale: float = 1.0, **kwargs) -> dict:
    """Mean and spread of F1 (and summed counts) of segment_nuclei over ``fields``; CPU seconds per field."""
    f1, counts, cpu = [], np.zeros(3, int), 0.0
    for f in fields:
        start = time.process_time()
        labels = recipe.segment_nuclei(f.image, f.diameter * diameter_scale, keep_border=True, **kwargs)
        cpu += time.process_time() - start
        s = segmentation_f1(f.labels, labels)
        f1.append(s["f1"])
        counts += (s["tp"], s["fp"], s["fn"])
    return {"f1": float(np.mean(f1)), "sd": float(np.std(f1)), "tp": counts[0], "fp": counts[1], "fn": counts[2],
            "cpu": cpu / len(fields)}


def cell(s: dict) -> str:
    return f"{s['f1']:.3f} ± {s['sd']:.3f}"


def generated(args) -> list[str]:
    fields = {d: [touching_nuclei_field(d, n=args.n, shape=(args.size, args.size), seed=s) for s in range(args.seeds)]
              for d in DIFFICULTIES}
    lines = ["## Generated fields: F1 at IoU 0.5 per difficulty", "",
             f"{args.seeds} fields per difficulty (seeds 0-{args.seeds - 1}), {args.n} nuclei each on "
             f"{args.size}×{args.size}, radii 7-11 px (mean diameter ≈ 18 px, given as `diameter`), `keep_border=True` "
             "(the border rule is not what is measured). Mean ± sd over the fields; TP / FP / FN summed.", "",
             "| threshold | " + " | ".join(DIFFICULTIES) + " | all | CPU s / field |",
             "|---|" + "---|" * (len(DIFFICULTIES) + 2)]
    default = {}
    for method in recipe.THRESHOLDS:
        rows = {d: score(fields[d], threshold=method) for d in DIFFICULTIES}
        if method == recipe.THRESHOLDS[0]:
            default = rows
        every = np.mean([r["f1"] for r in rows.values()])
        cpu = np.mean([r["cpu"] for r in rows.values()])
        name = f"**{method}** (default)" if method == recipe.THRESHOLDS[0] else method
        lines.append(f"| {name} | " + " | ".join(cell(rows[d]) for d in DIFFICULTIES) + f" | {every:.3f} | {cpu:.2f} |")
    lines += ["", "Default (li), counts per difficulty:", "", "| difficulty | TP | FP | FN | precision | recall |",
              "|---|---|---|---|---|---|"]
    for d, r in default.items():
        lines.append(f"| {d} | {r['tp']} | {r['fp']} | {r['fn']} | {r['tp'] / max(r['tp'] + r['fp'], 1):.3f} | "
                     f"{r['tp'] / max(r['tp'] + r['fn'], 1):.3f} |")
    lines += sensitivity(fields) + ablation(fields)
    return lines


def sensitivity(fields) -> list[str]:
    lines = ["", "## The diameter given, against the true one", "",
             "F1 (li) when `diameter` is the true mean diameter times the factor.", "",
             "| diameter given / true | " + " | ".join(DIFFICULTIES) + " |", "|---|" + "---|" * len(DIFFICULTIES)]
    for scale in SCALES:
        lines.append(f"| {scale:.2f} | " + " | ".join(f"{score(fields[d], scale)['f1']:.3f}" for d in DIFFICULTIES)
                     + " |")
    return lines


def ablation(fields) -> list[str]:
    lines = ["", "## What each part of the recipe is worth", "",
             "F1 (li, true diameter; and at 0.75 of it) with a part of the recipe turned off.", "",
             "| recipe | " + " | ".join(DIFFICULTIES) + " | 0.75 × diameter, all |",
             "|---|" + "---|" * (len(DIFFICULTIES) + 1)]
    for name, weight, depth in (("as shipped", recipe.DISTANCE_WEIGHT, recipe.MERGE_DEPTH),
                                ("no distance term in the seeds", 0.0, recipe.MERGE_DEPTH),
                                ("no joining of shallow passes", recipe.DISTANCE_WEIGHT, 0.0)):
        kept = recipe.DISTANCE_WEIGHT, recipe.MERGE_DEPTH
        recipe.DISTANCE_WEIGHT, recipe.MERGE_DEPTH = weight, depth
        try:
            rows = [score(fields[d])["f1"] for d in DIFFICULTIES]
            small = np.mean([score(fields[d], 0.75)["f1"] for d in DIFFICULTIES])
        finally:
            recipe.DISTANCE_WEIGHT, recipe.MERGE_DEPTH = kept
        lines.append(f"| {name} | " + " | ".join(f"{v:.3f}" for v in rows) + f" | {small:.3f} |")
    return lines


def real(args) -> list[str]:
    import tifffile

    folder = data_dir(args.data_dir) / "real_fields" / "example_fly"
    lines = ["", "## Real fields: CellProfiler's ExampleFly (no truth)", "",
             f"`{folder.name}`: three Drosophila Kc167 sites, 1006×1000 uint8, nuclei in channel D, `diameter=20`, "
             "default threshold (li), border nuclei left out. docs/segmentation-fly.png shows the outlines.", "",
             "| site | nuclei | equivalent diameter, median (5-95 %) px | largest px | CPU s |", "|---|---|---|---|---|"]
    for site in ("002", "076", "218"):
        image = tifffile.imread(folder / f"01_POS{site}_D.TIF")
        start = time.process_time()
        labels = recipe.segment_nuclei(image, 20)
        cpu = time.process_time() - start
        area = np.bincount(labels.ravel())[1:]
        eq = 2 * np.sqrt(area / np.pi)
        lo, mid, hi = np.percentile(eq, [5, 50, 95])
        lines.append(f"| {site} | {labels.max()} | {mid:.1f} ({lo:.1f}-{hi:.1f}) | {eq.max():.1f} | {cpu:.2f} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--n", type=int, default=150)
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--data-dir", help="the folder holding real_fields/ (default: shared/datasets beside the repo)")
    args = parser.parse_args()
    load = load_average()
    lines = ["# Nucleus segmentation: generated fields against their true masks, real fields to look at", "",
             f"`PYTHONPATH=src python benchmarks/segmentation.py --seeds {args.seeds} --n {args.n} --size {args.size}` "
             f"on {platform.machine()} ({platform.processor() or 'CPU'}), load average before the run: {load}. "
             "Accuracy does not depend on the load; CPU seconds are `time.process_time` per field.", ""]
    lines += generated(args) + real(args)
    OUT.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
