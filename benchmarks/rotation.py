"""Orientation-free clustering (issue: kinds that differ inside the cell, at any angle).

Sets (``--sets``, default all):
  rotated    MNIST-test (the first ``--n`` images; 10,000 = all), every digit turned by a uniform random
             angle (bilinear, about the image centre, seed 0). 6 and 9 become one kind: ceiling ≈ 0.90.
  mirrored   the same, and every other digit (at random) mirrored left-right as well.
  inner      the inner-pattern nuclei sample (ticlust.datasets.inner_nuclei: uniform, rim, foci, pole inside one outline
             distribution, random angles), cut out three ways: plain crops; the objects route's options
             (orient + normalize, ROUTE_OPTIONS); normalize + rescale (each object zoomed to fill its crop).
  route      the objects route's choice of crops, on round and elongated objects: the inner-pattern field and the
             outline nuclei field (ticlust.nuclei_field: round / elongated / dividing, 300, seed 0), each cut by
             objects_route with every combination of orient and rescale (normalize on), and every method given the
             route's parameters for objects (api.object_params: invariances auto → similarity).
  unrotated  MNIST-test (first ``--n``), the glyphs and the nuclei samples as they are: nothing may get worse.
  others     rotated sets of other kinds than the digits tuned on: USPS-test (2,007 digits, 16×16) and COIL-20 (1,440
             views of 20 objects, 32×32), every image turned by a uniform random angle (bilinear, seed 0).

Methods (``--methods``): any registered method with its defaults (K = the number of classes), plus
``regionprops``: k-means on standardised per-object measurements (skimage regionprops of each crop's
thresholded mask: area, eccentricity, solidity, extent, axis lengths, perimeter, mean/max/min intensity,
weighted Hu moments, which are rotation invariant) — what one would do without this library.
Every row: ACC (Hungarian), NMI, wall time, this process's CPU time (user + sys, all threads: what a loaded
machine cannot inflate the way it inflates wall time), the machine's load. Rows are appended to
benchmarks/results/rotation.jsonl; ``--report`` rebuilds benchmarks/results/rotation.md from it.
"""
from __future__ import annotations

import argparse
import os

import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _data import data_dir, load_average  # noqa: E402

import ticlust  # noqa: E402
from ticlust.metrics import hungarian_accuracy, nmi  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def turned(x: np.ndarray, mirror: bool = False, seed: int = 0) -> np.ndarray:
    """Every image (values in [0, 1]) turned by a uniform random angle about its centre (bilinear), and with ``mirror``
    every other one (at random) mirrored left-right first."""
    from scipy import ndimage

    rng = np.random.default_rng(seed)
    angles = rng.uniform(0, 360, len(x))
    flips = rng.random(len(x)) < 0.5 if mirror else np.zeros(len(x), bool)
    out = np.stack([ndimage.rotate(im[:, ::-1] if f else im, a, reshape=False, order=1) for im, a, f in zip(x, angles, flips)])
    return np.clip(out, 0, 1).astype(np.float32)


def rotated_mnist(n: int, mirror: bool = False, seed: int = 0, data: str | None = None):
    d = np.load(data_dir(data) / "mnist.npz")
    x, y = d["x_test"][:n].astype(np.float32) / 255.0, d["y_test"][:n].astype(np.int64)
    return turned(x, mirror, seed), y


def other_rotated_sets(seed: int = 0, data: str | None = None) -> dict:
    """USPS-test and COIL-20, every image turned (``turned``): rotated sets of other kinds than MNIST."""
    usps = np.load(data_dir(data) / "usps.npz")
    coil = np.load(data_dir(data) / "coil20_32x32.npz")
    return {"rotated USPS-test": (turned(usps["x_test"].astype(np.float32), seed=seed), usps["y_test"].astype(np.int64)),
            "rotated COIL-20": (turned(coil["images"].astype(np.float32) / 255.0, seed=seed), coil["labels"].astype(np.int64))}


def inner_sets(seed: int = 0):
    from ticlust.datasets.inner_nuclei import inner_nuclei_field
    from ticlust.objects.crops import ROUTE_OPTIONS, objects_from_labels

    f = inner_nuclei_field(seed=seed)
    out = {}
    for name, opts in (("plain", {}), ("route", dict(ROUTE_OPTIONS)), ("normalize+rescale", {"normalize": True, "rescale": True})):
        x, table = objects_from_labels(f.image, f.labels, **opts)
        out[f"inner ({name})"] = (x, f.kind_of(table["label"]))
    return out


def regionprops_labels(x: np.ndarray, k: int, seed: int = 0) -> np.ndarray:
    """k-means on standardised regionprops of each crop (its largest bright component)."""
    from skimage import measure
    from sklearn.cluster import KMeans

    rows = []
    for im in x.astype(np.float32):
        im = im / max(float(im.max()), 1e-9)
        lab = measure.label(im > 0.3)
        props = measure.regionprops(lab, intensity_image=im)
        p = max(props, key=lambda q: q.area) if props else None
        if p is None:
            rows.append(np.zeros(16))
            continue
        rows.append(np.r_[p.area, p.eccentricity, p.solidity, p.extent, p.axis_major_length, p.axis_minor_length,
                          p.perimeter, p.intensity_mean, p.intensity_max, p.intensity_min, p.moments_weighted_hu[:6]])
    f = np.nan_to_num(np.asarray(rows, np.float64))
    f = (f - f.mean(0)) / np.where(f.std(0) > 0, f.std(0), 1)
    return KMeans(k, n_init=10, random_state=seed).fit_predict(f)


#: The route set's crops: objects_route's orient / rescale (normalize on: brightness is not the kind here).
ROUTE_CROPS = {"orient": dict(orient=True, rescale=False), "plain": dict(orient=False, rescale=False),
               "rescale": dict(orient=False, rescale=True), "orient+rescale": dict(orient=True, rescale=True)}


def route_sets(seed: int = 0, crops=tuple(ROUTE_CROPS)) -> dict:
    """The inner-pattern and outline nuclei fields cut by the objects route with each of ``crops`` (ROUTE_CROPS' names;
    normalize on)."""
    from ticlust.datasets.inner_nuclei import inner_nuclei_field
    from ticlust.datasets.nuclei import nuclei_field
    from ticlust.objects.route import objects_route

    out = {}
    for field_name, f in (("inner", inner_nuclei_field(seed=seed)), ("outline", nuclei_field(seed=seed))):
        for crop in crops:
            opts = ROUTE_CROPS[crop]
            got = objects_route(f.image, f.labels, "kmeans", normalize=True, **opts)
            out[f"route {field_name} ({crop}, normalize)"] = (got.items, f.kind_of(got.table["label"]))
    return out


def run_one(set_name: str, x: np.ndarray, y: np.ndarray, method: str, seed: int, params: dict) -> dict:
    k = int(len(np.unique(y)))
    if set_name.startswith("route ") and method != "regionprops":
        from ticlust.api import object_params
        params = object_params(method, params)   # what the objects route hands the method
    start, cpu = time.perf_counter(), os.times()
    if method == "regionprops":
        labels = regionprops_labels(x, k, seed)
    else:
        labels = ticlust.fit(x, method, k=k, device="cpu", seed=seed, progress=False, **params).labels
    wall = time.perf_counter() - start
    now = os.times()
    cpu_s = (now.user - cpu.user) + (now.system - cpu.system)
    return {"set": set_name, "n": int(len(y)), "method": method, "params": params, "seed": seed,
            "acc": float(hungarian_accuracy(y, labels)), "nmi": float(nmi(y, labels)), "wall_s": round(wall, 1),
            "cpu_s": round(cpu_s, 1), "load": load_average()}


def predict_row(set_name: str, x: np.ndarray, y: np.ndarray, method: str, seed: int, params: dict, n_fit: int) -> dict:
    """Fit on the first ``n_fit`` items, assign the rest with ``ticlust.predict``: both ACCs, the predict rate."""
    k = int(len(np.unique(y)))
    start = time.perf_counter()
    fitted = ticlust.fit(x[:n_fit], method, k=k, device="cpu", seed=seed, progress=False, **params)
    fit_s = time.perf_counter() - start
    start, cpu = time.perf_counter(), os.times()
    labels = ticlust.predict(fitted, x[n_fit:], device="cpu").labels
    wall = time.perf_counter() - start
    now = os.times()
    return {"set": f"{set_name}, fit on {n_fit}, predict {len(y) - n_fit}", "n": int(len(y)), "method": method,
            "params": params, "seed": seed, "acc": float(hungarian_accuracy(y[n_fit:], labels)),
            "nmi": float(nmi(y[n_fit:], labels)), "fit_acc": float(hungarian_accuracy(y[:n_fit], fitted.labels)),
            "fit_s": round(fit_s, 1), "wall_s": round(wall, 1), "cpu_s": round((now.user - cpu.user) + (now.system - cpu.system), 1),
            "per_s": round((len(y) - n_fit) / wall, 1), "load": load_average()}


def report(path: Path = RESULTS / "rotation.jsonl") -> str:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    lines = ["# Orientation-free clustering: measured (benchmarks/rotation.py)", "",
             "Rows in the order measured; CPU only, 2 cores shared with other jobs (load = 1/5/15-min averages); "
             "CPU s = user + sys of the fit's process, all threads (not recorded before it was added). Rows up to the "
             "first rigid-spectral row ran under OMP_WAIT_POLICY=PASSIVE (the script set it), later ones with OpenMP's "
             "default waiting (what a user's process gets).", "",
             "| set | n | method | params | seed | ACC | NMI | wall s | CPU s | load |", "|---|---|---|---|---|---|---|---|---|---|"]
    predicted = [r for r in rows if "per_s" in r]
    rows = [r for r in rows if "per_s" not in r]
    for r in rows:
        params = ", ".join(f"{k}={v}" for k, v in r["params"].items()) or "defaults"
        lines.append(f"| {r['set']} | {r['n']} | {r['method']} | {params} | {r['seed']} | {r['acc']:.3f} | {r['nmi']:.3f} | "
                     f"{r['wall_s']} | {r.get('cpu_s', '')} | {r['load']} |")
    if predicted:
        lines += ["", "## Fit on a sample, predict the rest (``--predict-from N``)", "",
                  "ACC of the predicted items (the fit sample's own ACC beside it), predict wall time and items per second "
                  "(2 threads, CPU).", "",
                  "| set | method | params | seed | predict ACC | NMI | fit ACC | fit s | predict s | items/s | load |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in predicted:
            params = ", ".join(f"{k}={v}" for k, v in r["params"].items()) or "defaults"
            lines.append(f"| {r['set']} | {r['method']} | {params} | {r['seed']} | {r['acc']:.3f} | {r['nmi']:.3f} | "
                         f"{r['fit_acc']:.3f} | {r['fit_s']} | {r['wall_s']} | {r['per_s']} | {r['load']} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", default="rotated,mirrored,inner,unrotated")
    ap.add_argument("--methods", default="kmeans,regionprops,rigid-kmeans")
    ap.add_argument("--params", default="{}", help="JSON parameters for the ticlust methods, e.g. '{\"flip\": true}'")
    ap.add_argument("--crops", default=",".join(ROUTE_CROPS), help="the route set's crops (ROUTE_CROPS' names)")
    ap.add_argument("--n", type=int, default=2000, help="MNIST-test images (10000 = all)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--predict-from", type=int, default=0,
                    help="fit on the first N items of each set and predict the rest (0: fit on all, no predict)")
    ap.add_argument("--data-dir")
    ap.add_argument("--report", action="store_true", help="only rebuild results/rotation.md from results/rotation.jsonl")
    args = ap.parse_args(argv)
    if not args.report:
        sets: dict = {}
        for name in args.sets.split(","):
            if name == "rotated":
                sets["rotated MNIST-test"] = rotated_mnist(args.n, data=args.data_dir)
            elif name == "mirrored":
                sets["rotated+mirrored MNIST-test"] = rotated_mnist(args.n, mirror=True, data=args.data_dir)
            elif name == "inner":
                sets.update(inner_sets())
            elif name == "others":
                sets.update(other_rotated_sets(args.seed, args.data_dir))
            elif name == "route":
                sets.update(route_sets(crops=args.crops.split(",")))
            elif name == "unrotated":
                d = np.load(data_dir(args.data_dir) / "mnist.npz")
                sets["MNIST-test"] = (d["x_test"][:args.n].astype(np.float32) / 255.0, d["y_test"][:args.n].astype(np.int64))
                sets["glyphs"] = ticlust.sample("glyphs")
                sets["nuclei"] = ticlust.sample("nuclei")
        params = json.loads(args.params)
        RESULTS.mkdir(exist_ok=True)
        for set_name, (x, y) in sets.items():
            for method in args.methods.split(","):
                if args.predict_from:
                    row = predict_row(set_name, x, y, method, args.seed, params, args.predict_from)
                else:
                    row = run_one(set_name, x, y, method, args.seed, params if method != "regionprops" else {})
                print(json.dumps(row), flush=True)
                with open(RESULTS / "rotation.jsonl", "a") as fh:
                    fh.write(json.dumps(row) + "\n")
    (RESULTS / "rotation.md").write_text(report())


if __name__ == "__main__":
    main()
