"""Shape K-means (Gattone et al. 2018): Figs. 4-6 (150 simulated samples per covariance structure) and
real landmark data sets, ARI per landmark distance beside the paper's medians.

    python benchmarks/shape_kmeans.py                       # everything, results/shape_kmeans.md
    python benchmarks/shape_kmeans.py --samples 30 --readings sd --no-real

The paper leaves the simulation's units ambiguous, so each "reading" is one way of turning its text
into numbers (see READINGS and docs/shape_kmeans.md). Runs on --device (cpu by default; cuda works).
"""
from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parents[1] / "src"))

import ticlust  # noqa: E402
from ticlust.datasets.shapes import simulate_shapes  # noqa: E402
from _data import data_dir  # noqa: E402  (benchmarks/ is on sys.path when run as a script)

PAPER = {"isotropic": (0.96, 0.85, 0.88, 0.96), "heteroscedastic": (0.54, 0.84, 1.00, 0.43),
         "anisotropic": (0.51, 0.79, 1.00, 0.44)}
METHODS = {
    "dr": dict(distance="fisher-rao-round", type=1),
    "dd1": dict(distance="fisher-rao-diagonal", type=1),
    "dd2": dict(distance="fisher-rao-diagonal", type=2),
    "dw": dict(distance="wasserstein", type=1),
    "dd2*": dict(distance="fisher-rao-diagonal", type=2, warm_start=False),   # the paper's literal Type II
}
STRUCTURES = ("isotropic", "heteroscedastic", "anisotropic")
# reading -> (simulate_shapes keyword arguments, description)
READINGS = {
    "sd": (dict(sigma=13.0, sigma_low=1.3, noise_scale="sd", noisy_per="cluster"),
           "σ values are standard deviations (13 / 1.3), noisy landmarks drawn per cluster"),
    "kronecker": (dict(sigma=13.0, sigma_low=1.3, noise_scale="kronecker", noisy_per="cluster"),
                  "Σ_E's Kronecker entries are variances: variance σ_k·σ (sd 13 / 4.11), per cluster"),
    "per-shape": (dict(sigma=13.0, sigma_low=1.3, noise_scale="sd", noisy_per="shape"),
                  "standard deviations 13 / 1.3, noisy landmarks drawn again for every shape"),
    "sd-x3": (dict(sigma=39.0, sigma_low=1.3, noise_scale="sd", noisy_per="cluster"),
              "stress: the large sd tripled (39 / 1.3) in the heteroscedastic and anisotropic cases (isotropic stays 13)"),
}



def fit_ari(x, y, k, device, seed, **kw):
    start = time.perf_counter()
    result = ticlust.fit(x, "shape-kmeans", k=k, device=device, seed=seed, progress=False, **kw)
    return ticlust.evaluate(y, result.labels), time.perf_counter() - start


def simulate(means, samples, reading, structures, device, log):
    kw, _ = READINGS[reading]
    out = {}
    for structure in structures:
        skw = dict(kw)
        if reading == "sd-x3" and structure == "isotropic":
            skw["sigma"] = 13.0
        aris = {m: [] for m in METHODS}
        secs = {m: 0.0 for m in METHODS}
        t0 = time.perf_counter()
        for rep in range(samples):
            x, y = simulate_shapes(means, n=100, structure=structure, seed=10_000 + rep, **skw)
            for name, mkw in METHODS.items():
                scores, sec = fit_ari(x, y, 2, device, rep, **mkw)
                aris[name].append(scores["ari"])
                secs[name] += sec
        out[structure] = (aris, secs, time.perf_counter() - t0)
        log(f"{reading:10s} {structure:16s} " + " ".join(f"{m}={np.median(v):.2f}" for m, v in aris.items())
            + f"  ({time.perf_counter() - t0:.0f} s)")
    return out


def boxplot_png(path: Path, title: str, aris: dict[str, list[float]], paper: tuple | None):
    """A plain boxplot (median, quartiles, 1.5 IQR whiskers, outliers as +) drawn with Pillow."""
    from PIL import Image, ImageDraw

    w, h, left, top, bottom = 520, 360, 50, 30, 40
    img = Image.new("RGB", (w, h), "white")
    draw = ImageDraw.Draw(img)
    lo, hi = -0.2, 1.05
    ymap = lambda v: top + (hi - v) / (hi - lo) * (h - top - bottom)  # noqa: E731
    draw.text((left, 8), title, fill="black")
    for tick in (0.0, 0.25, 0.5, 0.75, 1.0):
        yy = ymap(tick)
        draw.line([(left - 4, yy), (w - 10, yy)], fill=(225, 225, 225))
        draw.text((8, yy - 6), f"{tick:.2f}", fill="black")
    names = list(aris)
    step = (w - left - 10) / len(names)
    for i, name in enumerate(names):
        v = np.asarray(aris[name])
        q1, med, q3 = np.percentile(v, [25, 50, 75])
        iqr = q3 - q1
        inside = v[(v >= q1 - 1.5 * iqr) & (v <= q3 + 1.5 * iqr)]
        cx = left + step * (i + 0.5)
        bw = step * 0.3
        draw.line([(cx, ymap(inside.min())), (cx, ymap(q1))], fill="black")
        draw.line([(cx, ymap(q3)), (cx, ymap(inside.max()))], fill="black")
        draw.rectangle([cx - bw, ymap(q3), cx + bw, ymap(q1)], outline=(30, 60, 160), width=2)
        draw.line([(cx - bw, ymap(med)), (cx + bw, ymap(med))], fill=(200, 30, 30), width=2)
        for o in v[(v < q1 - 1.5 * iqr) | (v > q3 + 1.5 * iqr)]:
            draw.text((cx - 3, ymap(o) - 6), "+", fill=(200, 30, 30))
        if paper is not None and i < len(paper):
            draw.line([(cx - bw - 4, ymap(paper[i])), (cx + bw + 4, ymap(paper[i]))], fill=(20, 150, 20), width=1)
        draw.text((cx - 12, h - bottom + 8), name, fill="black")
    draw.text((w - 190, h - 16), "red: median, green: paper", fill="black")
    img.save(path)


def real_data(ddir: Path, device, log):
    rows = []
    sets = []
    mice = np.load(ddir / "landmarks_mice_t2.npz")
    sets.append(("mice T2 (3 groups)", mice["landmarks"], mice["labels"]))
    scz = np.load(ddir / "landmarks_schizophrenia.npz")
    sets.append(("schizophrenia (2)", scz["landmarks"], scz["labels"]))
    rats = np.load(ddir / "landmarks_rats.npz")
    sets.append(("rat ages (8)", rats["landmarks"], rats["labels"]))
    sets.append(("rat ages 7 vs 14 days (2)", rats["landmarks"][rats["labels"] <= 1], rats["labels"][rats["labels"] <= 1]))
    cells = np.load(ddir / "osteosarcoma_cells.npz")
    sets.append(("osteosarcoma cell line (2)", cells["contours_resampled"], cells["cell_line"]))
    sets.append(("osteosarcoma treatment (3)", cells["contours_resampled"], cells["treatment"]))
    for name, x, y in sets:
        k = len(np.unique(y))
        row = {"data": name, "n": x.shape[0], "L": x.shape[1], "k": k}
        for method, mkw in METHODS.items():
            scores, sec = fit_ari(x, y, k, device, 0, **mkw)
            row[method] = (scores["ari"], scores["acc"], scores["nmi"], sec)
        log(f"{name:28s} " + " ".join(f"{m}={row[m][0]:.2f}" for m in METHODS))
        rows.append(row)
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--samples", type=int, default=150)
    ap.add_argument("--readings", default=",".join(READINGS), help="comma-separated: " + ", ".join(READINGS))
    ap.add_argument("--structures", default=",".join(STRUCTURES))
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (1 is fastest for these small tensors)")
    ap.add_argument("--no-real", action="store_true")
    ap.add_argument("--no-png", action="store_true")
    ap.add_argument("--out", default=str(HERE.parent / "results" / "shape_kmeans.md"))
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    ddir = data_dir(args.data_dir)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    log = lambda s: print(s, flush=True)  # noqa: E731
    rats = np.load(ddir / "landmarks_rats.npz")
    means = np.stack([rats["landmarks"][rats["labels"] == a].mean(0) for a in (0, 1)])   # 7 and 14 days
    load0 = open("/proc/loadavg").read().split()[:3] if Path("/proc/loadavg").exists() else ["?"] * 3
    lines = ["# Shape K-means (Gattone et al. 2018): benchmark", "",
             f"Device {args.device}, torch threads {args.threads}, load average at start {' '.join(load0)} "
             f"(machine shared with other jobs: timings are inflated). Samples per structure: {args.samples}, "
             "n = 100, G = 2; mean shapes: rat calvaria at 7 and 14 days (landmarks_rats.npz). "
             "10 random-partition starts per fit (the lowest total distance kept). "
             "Cell: median ARI (paper's median in brackets). dd2 = our Type II (warm-started from the best Type I "
             "partition, default); dd2* = the paper's literal Type II from every random start.", ""]
    timing = []
    for reading in [r for r in args.readings.split(",") if r]:
        structures = [s for s in args.structures.split(",") if s]
        t0 = time.perf_counter()
        res = simulate(means, args.samples, reading, structures, args.device, log)
        wall = time.perf_counter() - t0
        lines += [f"## Simulation, reading `{reading}`: {READINGS[reading][1]}", "",
                  "| structure | " + " | ".join(METHODS) + " | wall s |", "|---" * (len(METHODS) + 2) + "|"]
        for structure, (aris, secs, w) in res.items():
            cells = []
            for i, m in enumerate(METHODS):
                paper = f" ({PAPER[structure][i]:.2f})" if i < 4 else ""
                cells.append(f"{np.median(aris[m]):.2f}{paper}")
            lines.append(f"| {structure} | " + " | ".join(cells) + f" | {w:.0f} |")
            if not args.no_png:
                png = out.parent / f"shape_kmeans_{reading}_{structure}.png"
                boxplot_png(png, f"{structure}, reading {reading}: ARI over {args.samples} samples", aris, PAPER[structure])
            n_fit = len(aris["dd1"])
            timing.append((reading, structure, *(secs[m] / n_fit * 1000 for m in ("dd1", "dd2", "dd2*", "dr", "dw"))))
        lines += ["", f"Wall time for the {len(structures)} structures x {args.samples} samples x {len(METHODS)} variants: "
                  f"{wall:.0f} s ({wall * 4 / len(METHODS):.0f} s for the paper's four variants).", ""]
    if timing:
        lines += ["## Run time per fit (ms): Type II vs Type I", "",
                  "| reading | structure | dd1 (Type I) | dd2 (Type II, warm) | dd2* (Type II, paper) | dd2/dd1 | dd2*/dd1 | dr | dw |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for r, s, d1, d2, d2s, dr, dw in timing:
            lines.append(f"| {r} | {s} | {d1:.0f} | {d2:.0f} | {d2s:.0f} | {d2 / d1:.2f} | {d2s / d1:.2f} | {dr:.0f} | {dw:.0f} |")
        lines.append("")
        lines.append("The paper: Type II about 20x slower than Type I.")
        lines.append("")
    if not args.no_real:
        rows = real_data(ddir, args.device, log)
        lines += ["## Real data: ARI / ACC (Hungarian) / NMI per variant (the paper reports none)", "",
                  "| data | n | L | k | " + " | ".join(METHODS) + " |", "|---" * (len(METHODS) + 4) + "|"]
        for row in rows:
            lines.append(f"| {row['data']} | {row['n']} | {row['L']} | {row['k']} | "
                         + " | ".join(f"{row[m][0]:.2f} / {row[m][1]:.2f} / {row[m][2]:.2f}" for m in METHODS) + " |")
        lines += ["", "Seconds per fit: " + "; ".join(f"{row['data']}: " + ", ".join(f"{m} {row[m][3]:.1f}" for m in METHODS)
                                                   for row in rows), ""]
    lines += ["## Notes", "",
              "How each reading of the paper's simulation was chosen, and why none makes dr/dw fail at the printed "
              "σ's, is in docs/shape_kmeans.md. For scale: a classifier that knows both true mean shapes "
              "(Procrustes to each, nearest wins) reaches a median ARI of 0.88 on our isotropic samples "
              "(40 samples), so 0.84 is near the bound for these means; the paper's 0.96 implies a larger "
              "shape difference relative to σ than our 18-rat means give.", ""]
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    load1 = open("/proc/loadavg").read().split()[:3] if Path("/proc/loadavg").exists() else ["?"] * 3
    lines += [f"Peak resident memory {peak:.0f} MiB; load average at end {' '.join(load1)}.", ""]
    out.write_text("\n".join(lines))
    log(f"wrote {out}")


if __name__ == "__main__":
    main()
