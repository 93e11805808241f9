"""Objects from a segmentation (issue 14): clustering nuclei cut out of a generated field, and the
cost of cutting them out.

Sections (``--sections``, default all):
  accuracy  the generated nuclei field (ticlust.nuclei_field: 300 nuclei of 3 kinds, 1024×1024,
            seed 0): objects_from_labels (border objects left out; ``--extractions``: default
            crops, and crops turned to their major axis), then every image method with K=3 and
            its defaults — ACC (Hungarian), NMI, ARI, extraction + fit time. Slow on a CPU (DTI
            and NT take minutes each): run it alone.
  shapes    shapes_from_labels on the same field → shape-kmeans K=3; and the osteosarcoma check:
            the raw cell contours of ../shared/datasets rasterised into a label image, traced back by
            shapes_from_labels, compared with the dataset's own 100-point resampling.
  invariances  issue 14's acceptance at the objects route's defaults (crops oriented and brightness-
            normalised, ROUTE_OPTIONS; invariances auto → similarity, api.object_params): every image
            method, dti-kmeans and st-kmeans at every invariance family and (extra seeds) again, and
            the crop options' ablation that chose the route's defaults.
  other     the invariance trade-off on data whose nuisance warps are not shape-keeping: Non-rigid
            MNIST (App. F of the ST paper) and the glyphs sample, auto vs similarity.
  timing    extraction time of objects_from_labels on a 2048×2048 field with 2,000 nuclei (target
            ≤ 5 s on 2 cores), shapes_from_labels on it, and peak extra memory (tracemalloc) on a
            4096×4096 field with 10,000 nuclei against the field's own size.

Each section's numbers go to benchmarks/results/objects.json; benchmarks/results/objects.md is
rebuilt from all sections measured so far, with the machine's load average beside every number.
"""
from __future__ import annotations

import argparse
import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # idle OpenMP threads must not spin on a shared CPU

import json  # noqa: E402
import platform  # noqa: E402
import resource  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import tracemalloc  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))

import ticlust  # noqa: E402
from ticlust.metrics import evaluate  # noqa: E402
from ticlust.datasets.nuclei import nuclei_field  # noqa: E402
from ticlust.api import object_params  # noqa: E402
from ticlust.methods.invariances import FAMILIES  # noqa: E402
from ticlust.objects.crops import ROUTE_OPTIONS, objects_from_labels, shapes_from_labels  # noqa: E402
from _data import data_dir, load_average  # noqa: E402  (benchmarks/ is on sys.path when run as a script)

RESULTS = HERE / "results"
JSON = RESULTS / "objects.json"
IMAGE_METHODS = ("kmeans", "gmm", "ai-kmeans", "st-kmeans", "pssc", "dti-kmeans", "dti-gmm", "nt")




def commit() -> str:
    if os.environ.get("BENCH_COMMIT"):          # a run from an exported copy of the tree says which commit it is
        return os.environ["BENCH_COMMIT"]
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True, text=True).stdout.strip()
    except OSError:
        return "?"


EXTRACTIONS = {"default": {}, "orient": {"orient": True}, "orient+rescale": {"orient": True, "rescale": True},
               "orient+rescale+normalize": {"orient": True, "rescale": True, "normalize": True}}


def accuracy(args) -> dict:
    import torch

    torch.set_num_threads(args.threads)
    field = nuclei_field(n=args.n, shape=(args.side, args.side), seed=args.seed)
    out = {"n_field": args.n, "side": args.side, "seed": args.seed, "threads": args.threads, "extractions": {}, "rows": []}
    prev = json.loads(JSON.read_text()).get("accuracy") if JSON.exists() else None
    if prev and all(prev.get(k) == out[k] for k in ("n_field", "side", "seed", "threads")):
        # keep the extractions measured before (another run) and replace only those measured now
        for name, ex in prev["extractions"].items():
            if name not in args.extractions:
                out["extractions"][name] = {"when": prev.get("when"), "commit": prev.get("commit"), **ex}
        now = {(e, m, json.dumps(params_for(args, m), sort_keys=True)) for e in args.extractions for m in args.methods}
        out["rows"] = [r for r in prev["rows"]
                       if (r["extraction"], r["method"], json.dumps(r.get("params", {}), sort_keys=True)) not in now]
    for extraction in args.extractions:
        t0 = time.perf_counter()
        stack, table = objects_from_labels(field.image, field.labels, **EXTRACTIONS[extraction])
        extract_s = time.perf_counter() - t0
        truth = field.kind_of(table["label"])
        out["extractions"][extraction] = {"when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "commit": commit(),
                                          "options": EXTRACTIONS[extraction], "n_objects": int(len(stack)),
                                          "crop": list(stack.shape[1:]), "per_kind": np.bincount(truth).tolist(),
                                          "extract_s": round(extract_s, 3)}
        print(f"{extraction}: {len(stack)} objects, crops {stack.shape[1:]}, kinds {np.bincount(truth)}, "
              f"extraction {extract_s:.3f} s", flush=True)
        for method in args.methods:
            params = params_for(args, method)
            row = {"extraction": extraction, "method": method, "params": params, "commit": commit(),
                   "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "load_before": load_average()}
            t1 = time.perf_counter()
            try:
                res = ticlust.fit(stack, method=method, k=3, device="cpu", seed=args.seed, progress=False, **params)
                row.update({k: round(v, 4) for k, v in evaluate(truth, res.labels).items()})
                row["sizes"] = res.cluster_sizes().tolist()
            except Exception as exc:  # report, do not hide: the row says what failed
                row["error"] = f"{type(exc).__name__}: {exc}"[:300]
            row["fit_s"] = round(time.perf_counter() - t1, 2)
            row["total_s"] = round(row["fit_s"] + extract_s, 2)
            row["load_after"] = load_average()
            row["peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
            out["rows"].append(row)
            print(json.dumps(row), flush=True)
            save("accuracy", out)
    return out


#: Crops of the invariances section: the route's, and the ablation of its two options.
CROPS = {"route": ROUTE_OPTIONS, "plain": {}, "normalize": {"normalize": True}, "orient": {"orient": True}}
ALIGNERS = ("dti-kmeans", "st-kmeans")


def invariance_plan(methods, seeds) -> list[tuple[str, str, dict, int]]:
    """(crops, method, params, seed) of every invariances row, most telling first: the route's defaults
    for every method, more seeds there, each family for DTI and ST, the crop ablation at similarity."""
    plan = [("route", m, object_params(m, {}), 0) for m in methods]
    plan += [("route", m, object_params(m, {}), s) for s in seeds for m in ALIGNERS if m in methods]
    plan += [("route", m, {"invariances": f}, 0) for m in ALIGNERS if m in methods for f in FAMILIES if f != "similarity"]
    plan += [(c, m, {"invariances": "similarity"}, 0) for c in ("plain", "normalize", "orient") for m in ALIGNERS if m in methods]
    if "st-kmeans" in methods:   # the lowest distortion of three seeds (minLoss): ST's answer to a bad start
        plan += [("route", "st-kmeans", {**object_params("st-kmeans", {}), "runs": 3}, s) for s in (0, *seeds)]
    return plan


def invariances(args) -> dict:
    import torch

    torch.set_num_threads(args.threads)
    field = nuclei_field(n=args.n, shape=(args.side, args.side), seed=args.seed)
    out = {"n_field": args.n, "side": args.side, "seed": args.seed, "threads": args.threads, "rows": []}
    prev = json.loads(JSON.read_text()).get("invariances") if JSON.exists() else None
    plan = [p for p in invariance_plan(args.methods, args.more_seeds) if p[0] in args.crops]
    if prev:   # rows measured before are kept, and not measured again unless --redo
        done = {key(r["crops"], r["method"], r["params"], r["seed"]) for r in prev["rows"]}
        redo = {key(*p) for p in plan} if args.redo else set()
        out["rows"] = [r for r in prev["rows"] if key(r["crops"], r["method"], r["params"], r["seed"]) not in redo]
        plan = [p for p in plan if key(*p) in redo or key(*p) not in done]
    cut = {}
    for crops, method, params, seed in plan:
        if crops not in cut:
            t0 = time.perf_counter()
            stack, table = objects_from_labels(field.image, field.labels, **CROPS[crops])
            cut[crops] = (stack, field.kind_of(table["label"]), time.perf_counter() - t0)
        stack, truth, extract_s = cut[crops]
        row = {"crops": crops, "options": CROPS[crops], "method": method, "params": params, "seed": seed,
               "n_objects": int(len(stack)), "crop": list(stack.shape[1:]), "commit": commit(),
               "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "load_before": load_average()}
        row.update(timed_fit(stack, truth, method, params, seed))
        row["total_s"] = round(row["fit_s"] + extract_s, 2)
        row["load_after"] = load_average()
        out["rows"].append(row)
        print(json.dumps(row), flush=True)
        save("invariances", out)
    return out


def key(crops, method, params, seed) -> str:
    return json.dumps([crops, method, params, seed], sort_keys=True)


def timed_fit(x, truth, method: str, params: dict, seed: int) -> dict:
    """ACC/NMI/ARI, cluster sizes and fit time of one CPU fit (or the error it raised), K = the classes."""
    t1 = time.perf_counter()
    row = {}
    try:
        res = ticlust.fit(x, method=method, k=len(np.unique(truth)), device="cpu", seed=seed, progress=False, **params)
        row.update({k: round(v, 4) for k, v in evaluate(truth, res.labels).items()})
        row["sizes"] = res.cluster_sizes().tolist()
        row["invariances"] = res.config.get("invariances")
    except Exception as exc:  # report, do not hide: the row says what failed
        row["error"] = f"{type(exc).__name__}: {exc}"[:300]
    row["fit_s"] = round(time.perf_counter() - t1, 2)
    return row


def other_data(args) -> dict:
    """auto vs similarity where the nuisance warps bend and shear: Non-rigid MNIST (train part) and glyphs."""
    import torch

    from ticlust.datasets.samples import glyphs_sample
    from ticlust.datasets.warped_digits import nonrigid_digits

    torch.set_num_threads(args.threads)
    mnist = np.load(data_dir(args.data_dir) / "mnist.npz")
    digits = nonrigid_digits(mnist["x_test"], mnist["y_test"], seed=args.seed)
    sets = {"non-rigid MNIST (train, 670)": (digits["x_train"], digits["y_train"]),
            "glyphs (600)": glyphs_sample(seed=args.seed)}
    prev = json.loads(JSON.read_text()).get("other") if JSON.exists() else None
    out = {"rows": prev["rows"] if prev else []}     # rows measured before are kept and not measured again
    done = {(r["data"], r["method"], r["invariances"]) for r in out["rows"]}
    for name, (x, y) in sets.items():
        for method in args.other_methods:
            for family in ("auto", "similarity"):
                if (name, method, family) in done:
                    continue
                row = {"data": name, "method": method, "invariances": family, "load_before": load_average()}
                row.update(timed_fit(x, y, method, {"invariances": family}, args.seed))
                row["load_after"] = load_average()
                out["rows"].append(row)
                print(json.dumps(row), flush=True)
                save("other", out)
    return out


def params_for(args, method: str) -> dict:
    """The method parameters given as --set METHOD:NAME=VALUE (strings, coerced by the method's config)."""
    out = {}
    for item in args.set:
        target, _, assignment = item.partition(":")
        name, _, value = assignment.partition("=")
        if target == method:
            out[name] = value
    return out


def shapes(args) -> dict:
    field = nuclei_field(n=args.n, shape=(args.side, args.side), seed=args.seed)
    t0 = time.perf_counter()
    marks, table = shapes_from_labels(field.labels, n_points=64)
    trace_s = time.perf_counter() - t0
    truth = field.kind_of(table["label"])
    out = {"nuclei": {"n_objects": int(len(marks)), "trace_s": round(trace_s, 3), "rows": []}}
    for distance in ("fisher-rao-diagonal", "wasserstein"):
        load0 = load_average()
        t1 = time.perf_counter()
        res = ticlust.fit(marks, method="shape-kmeans", k=3, seed=args.seed, device="cpu", progress=False, distance=distance)
        row = {"distance": distance, **{k: round(v, 4) for k, v in evaluate(truth, res.labels).items()},
               "fit_s": round(time.perf_counter() - t1, 2), "load": f"{load0} → {load_average()}"}
        out["nuclei"]["rows"].append(row)
        print(json.dumps(row), flush=True)
    out["osteosarcoma"] = osteosarcoma(args)
    save("shapes", out)
    return out


def osteosarcoma(args) -> dict:
    """Rasterise each raw contour as one object of a label image (cells laid out on a grid), trace
    the objects back and compare with the dataset's own 100-point resampling."""
    from skimage.draw import polygon

    path = data_dir(args.data_dir) / "osteosarcoma_cells.npz"
    with np.load(path, allow_pickle=False) as npz:
        points, offsets, ref, labels = npz["points"], npz["offsets"], npz["contours_resampled"], npz["labels"]
    cells = [points[offsets[i]:offsets[i + 1]].astype(np.float64) for i in range(len(offsets) - 1)]
    pad = 4
    boxes = [np.ceil(c.max(0) - c.min(0)).astype(int) + 2 * pad + 1 for c in cells]
    cell = int(max(b.max() for b in boxes))
    cols = int(np.ceil(np.sqrt(len(cells))))
    lab = np.zeros((cell * cols, cell * cols), np.int32)
    origin = []
    for i, c in enumerate(cells):
        oy, ox = (i // cols) * cell, (i % cols) * cell
        shift = np.array([ox, oy]) + pad - c.min(0)          # contour (x, y) → label-image (col, row)
        rr, cc = polygon(c[:, 1] + shift[1], c[:, 0] + shift[0], lab.shape)
        lab[rr, cc] = i + 1
        lab[np.rint(c[:, 1] + shift[1]).astype(int), np.rint(c[:, 0] + shift[0]).astype(int)] = i + 1  # boundary pixels too
        origin.append(shift)
    t0 = time.perf_counter()
    marks, table = shapes_from_labels(lab, n_points=100, keep_border=True)
    trace_s = time.perf_counter() - t0
    assert np.array_equal(table["label"], np.arange(1, len(cells) + 1))
    # distance of every traced landmark to the raw contour polygon, and of every reference point to ours
    d_ours, d_ref = [], []
    for i, c in enumerate(cells):
        ours = marks[i] - origin[i]
        d_ours.append(_to_polygon(ours, c).mean())
        d_ref.append(_to_polygon(ref[i], ours).mean())
    out = {"n_cells": len(cells), "trace_s": round(trace_s, 3), "mean_dist_ours_to_raw": round(float(np.mean(d_ours)), 3),
           "max_cell_mean_dist_ours_to_raw": round(float(np.max(d_ours)), 3),
           "mean_dist_reference_to_ours": round(float(np.mean(d_ref)), 3), "rows": []}
    for name, data in (("dataset's resampling", ref), ("shapes_from_labels", marks)):
        t1 = time.perf_counter()
        res = ticlust.fit(data, method="shape-kmeans", k=6, seed=args.seed, device="cpu", progress=False)
        row = {"landmarks": name, **{k: round(v, 4) for k, v in evaluate(labels, res.labels).items()},
               "fit_s": round(time.perf_counter() - t1, 2), "load": load_average()}
        out["rows"].append(row)
        print(json.dumps(row), flush=True)
    return out


def _to_polygon(p: np.ndarray, poly: np.ndarray) -> np.ndarray:
    """Distance of each point p (n, 2) to the closed polygon ``poly`` (m, 2)."""
    a, b = poly, np.roll(poly, -1, axis=0)
    ab = b - a
    t = np.clip(((p[:, None] - a[None]) * ab[None]).sum(-1) / np.maximum((ab ** 2).sum(-1), 1e-12)[None], 0, 1)
    near = a[None] + t[..., None] * ab[None]
    return np.sqrt(((p[:, None] - near) ** 2).sum(-1)).min(1)


def timing(args) -> dict:
    out = {"rows": []}
    for side, n, options in ((2048, 2000, {}), (2048, 2000, EXTRACTIONS["orient+rescale+normalize"]), (4096, 10000, {})):
        field = nuclei_field(n=n, shape=(side, side), seed=args.seed)
        field_mib = field.image.nbytes / 2 ** 20
        labels_mib = field.labels.nbytes / 2 ** 20
        times = []
        for _ in range(args.repeats):
            load0 = load_average()
            t0 = time.perf_counter()
            stack, table = objects_from_labels(field.image, field.labels, **options)
            times.append(time.perf_counter() - t0)
        tracemalloc.start()
        stack, table = objects_from_labels(field.image, field.labels, **options)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        t1 = time.perf_counter()
        marks, _ = shapes_from_labels(field.labels, n_points=64)
        shapes_s = time.perf_counter() - t1
        row = {"side": side, "nuclei": n, "options": options, "objects_kept": int(len(stack)), "crop": list(stack.shape[1:]),
               "extract_s_min": round(min(times), 3), "extract_s_median": round(float(np.median(times)), 3),
               "repeats": args.repeats, "shapes_s": round(shapes_s, 3), "field_mib": round(field_mib, 1),
               "labels_mib": round(labels_mib, 1), "stack_mib": round(stack.nbytes / 2 ** 20, 1),
               "peak_alloc_mib": round(peak / 2 ** 20, 1), "load": f"{load0} → {load_average()}"}
        out["rows"].append(row)
        print(json.dumps(row), flush=True)
        del field, stack, marks
    save("timing", out)
    return out


def save(section: str, data: dict) -> None:
    RESULTS.mkdir(exist_ok=True)
    allres = json.loads(JSON.read_text()) if JSON.exists() else {}
    data = {**data, "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "commit": commit(),
            "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.python_version()}"}
    allres[section] = data
    JSON.write_text(json.dumps(allres, indent=1))
    write_md(allres)


def write_md(allres: dict) -> None:
    lines = ["# Objects from a segmentation (issue 14)", "",
             "`python benchmarks/objects.py [--sections accuracy shapes timing]` — numbers from "
             "`benchmarks/results/objects.json`. The machine has 2 cores shared with other engineers' jobs; "
             "the load average (1/5/15 min) is given beside every number, and times are inflated by it.", ""]
    acc = allres.get("accuracy")
    if acc:
        lines += ["## Clustering the generated nuclei field (K=3)", "",
                  f"`ticlust.nuclei_field(n={acc['n_field']}, shape=({acc['side']}, {acc['side']}), seed={acc['seed']})`, "
                  "cut out by `objects_from_labels` (border objects left out, background masked) with the options below; "
                  f"every method with its defaults unless the row names a parameter, seed {acc['seed']}, CPU, {acc['threads']} torch threads; "
                  "total = extraction + fit; ACC is Hungarian; peak RSS is the benchmark process's peak so far (monotone "
                  "within one run).", ""]
        for name, ex in acc["extractions"].items():
            lines.append(f"- **{name}** (`{ex['options'] or 'defaults'}`): {ex['n_objects']} objects (round / elongated / "
                         f"dividing: {' / '.join(map(str, ex['per_kind']))}), {'×'.join(map(str, ex['crop']))} crops, "
                         f"extraction {ex['extract_s']} s; measured {ex.get('when', acc['when'])}, commit "
                         f"{ex.get('commit', acc['commit'])}")
        lines += ["", "| extraction | method | ACC | NMI | ARI | cluster sizes | fit s | total s | peak RSS MiB | load before → after |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for r in acc["rows"]:
            rest = " | " if "error" in r else f"{r['total_s']} | {r['peak_rss_mib']}"
            lines.append(f"| {r['extraction']} | {label(r)} | {metric_cells(r)} | {r['fit_s']} | {rest} | "
                         f"{r['load_before']} → {r['load_after']} |")
        lines.append("")
    lines += invariances_md(allres)
    sh = allres.get("shapes")
    if sh:
        nu = sh["nuclei"]
        lines += [f"## Shapes from labels, {sh['when']}, commit {sh['commit']}", "",
                  f"Nuclei field as above: `shapes_from_labels(labels, n_points=64)` traced {nu['n_objects']} contours in "
                  f"{nu['trace_s']} s; shape-kmeans K=3 (Type I, seed {0}):", "",
                  "| distance | ACC | NMI | ARI | fit s | load |", "|---|---|---|---|---|---|"]
        lines += [f"| {r['distance']} | {r['acc']:.3f} | {r['nmi']:.3f} | {r['ari']:.3f} | {r['fit_s']} | {r['load']} |" for r in nu["rows"]]
        os_ = sh["osteosarcoma"]
        lines += ["", f"Osteosarcoma check: the {os_['n_cells']} raw cell contours (`osteosarcoma_cells.npz`) rasterised as "
                  f"filled polygons into one label image, traced back with `shapes_from_labels(n_points=100)` in "
                  f"{os_['trace_s']} s. Mean distance of our landmarks to the raw contour polygon: "
                  f"{os_['mean_dist_ours_to_raw']} px (worst cell {os_['max_cell_mean_dist_ours_to_raw']} px); of the "
                  f"dataset's own 100-point resampling to our contour: {os_['mean_dist_reference_to_ours']} px. "
                  "shape-kmeans (defaults, K=6 = 2 lines × 3 treatments) on either set of landmarks:", "",
                  "| landmarks | ACC | NMI | ARI | fit s | load |", "|---|---|---|---|---|---|"]
        lines += [f"| {r['landmarks']} | {r['acc']:.3f} | {r['nmi']:.3f} | {r['ari']:.3f} | {r['fit_s']} | {r['load']} |" for r in os_["rows"]]
        lines.append("")
    tm = allres.get("timing")
    if tm:
        lines += [f"## Extraction time and memory, {tm['when']}, commit {tm['commit']}", "",
                  "`objects_from_labels(image, labels)` with defaults on generated uint16 fields (time: best and median of "
                  "the repeats; peak alloc: tracemalloc's peak of NumPy/Python allocations during one call, output stack "
                  "included; the field and labels themselves are inputs, not counted). `shapes_from_labels(n_points=64)` "
                  "on the same labels.", "",
                  "| field | nuclei | options | kept | crop | extract s (min / median) | shapes s | field MiB | labels MiB | stack MiB | peak alloc MiB | load |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        lines += [f"| {r['side']}×{r['side']} | {r['nuclei']} | {r.get('options') or 'defaults'} | {r['objects_kept']} | {'×'.join(map(str, r['crop']))} | "
                  f"{r['extract_s_min']} / {r['extract_s_median']} (×{r['repeats']}) | {r['shapes_s']} | {r['field_mib']} | "
                  f"{r['labels_mib']} | {r['stack_mib']} | {r['peak_alloc_mib']} | {r['load']} |" for r in tm["rows"]]
        lines.append("")
    (RESULTS / "objects.md").write_text("\n".join(lines))


def metric_cells(r: dict) -> str:
    """The ACC | NMI | ARI | cluster sizes cells of a results row, or its failure."""
    if "error" in r:
        return f"failed: {r['error']} | | | "
    return f"{r['acc']:.3f} | {r['nmi']:.3f} | {r['ari']:.3f} | {r['sizes']}"


def invariances_md(allres: dict) -> list[str]:
    """The dated sections of the invariances and other-data runs."""
    lines = []
    inv = allres.get("invariances")
    if inv:
        lines += [f"## Invariances: the objects route's defaults (issue 14 acceptance), {inv['when']}, commit {inv['commit']}", "",
                  f"The same field; crops: **route** = the objects route's `{ROUTE_OPTIONS}` (CLI `--labels`, napari Labels "
                  "workflow), **plain** = `objects_from_labels` defaults, **normalize** / **orient** = one option each. "
                  "`invariances` is what the warps may change; at the route's defaults `auto` becomes `similarity` "
                  f"(`api.object_params`). CPU, {inv['threads']} torch thread, K=3.", "",
                  "| crops | method | invariances | seed | ACC | NMI | ARI | cluster sizes | fit s | load before → after |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        order = {c: i for i, c in enumerate(CROPS)}
        for r in sorted(inv["rows"], key=lambda r: (order.get(r["crops"], 9), r["seed"])):
            extra = {k: v for k, v in r["params"].items() if k != "invariances"}
            name = r["method"] + (f" ({extra})" if extra else "")
            family = r.get("invariances") or r["params"].get("invariances", "—")
            lines.append(f"| {r['crops']} | {name} | {family or '—'} | {r['seed']} | {metric_cells(r)} | {r['fit_s']} | "
                         f"{r['load_before']} → {r['load_after']} |")
        lines.append("")
    oth = allres.get("other")
    if oth:
        lines += [f"## Invariances on other data: the trade-off, {oth['when']}, commit {oth['commit']}", "",
                  "Data whose nuisance warps bend and shear (Non-rigid MNIST of the ST paper's App. F, made from MNIST test "
                  "by `nonrigid_digits(seed=0)`, its 670 training images; the glyphs sample: affine + elastic warps). "
                  "Here `similarity` cannot undo the shear and bending that `auto` (each method's own family) can. "
                  "K = the classes, seed 0 (one fit per row), CPU; the header's commit is the last save's, each row's "
                  "own is in objects.json.", "",
                  "| data | method | invariances | ACC | NMI | ARI | fit s | load before → after |", "|---|---|---|---|---|---|---|---|"]
        for r in oth["rows"]:
            body = (f"failed: {r['error']} | | " if "error" in r else f"{r['acc']:.3f} | {r['nmi']:.3f} | {r['ari']:.3f} | ")
            lines.append(f"| {r['data']} | {r['method']} | {r['invariances']} | {body}{r['fit_s']} | "
                         f"{r['load_before']} → {r['load_after']} |")
        lines.append("")
    return lines


def label(row: dict) -> str:
    params = row.get("params") or {}
    return row["method"] + (" (" + ", ".join(f"{k}={v}" for k, v in params.items()) + ")" if params else "")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sections = {"accuracy": accuracy, "invariances": invariances, "other": other_data, "shapes": shapes, "timing": timing}
    ap.add_argument("--sections", nargs="+", default=["accuracy", "shapes", "timing"], choices=list(sections))
    ap.add_argument("--methods", nargs="+", default=list(IMAGE_METHODS))
    ap.add_argument("--extractions", nargs="+", default=["default", "orient"], choices=list(EXTRACTIONS))
    ap.add_argument("--set", action="append", default=[], metavar="METHOD:NAME=VALUE",
                    help="a method parameter instead of its default (repeatable); the row says so")
    ap.add_argument("--crops", nargs="+", default=list(CROPS), choices=list(CROPS), help="invariances: which crops")
    ap.add_argument("--redo", action="store_true", help="invariances: measure rows of the plan again (default: keep them)")
    ap.add_argument("--more-seeds", nargs="*", type=int, default=[1, 2], help="invariances: seeds repeated at the route's defaults")
    ap.add_argument("--other-methods", nargs="+", default=list(ALIGNERS), help="other: the methods compared")
    ap.add_argument("--n", type=int, default=300, help="nuclei in the accuracy field")
    ap.add_argument("--side", type=int, default=1024, help="side of the accuracy field")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--data-dir")
    args = ap.parse_args()
    for section in args.sections:
        sections[section](args)


if __name__ == "__main__":
    main()
