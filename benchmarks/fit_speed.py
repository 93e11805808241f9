"""Fit time and accuracy of ai-kmeans / st-kmeans, paired against another version of the code.

  python benchmarks/fit_speed.py [--data mnist glyphs nonrigid nuclei] [--methods ai-kmeans st-kmeans]
                                 [--seeds 0 1 2] [--baseline-ref REF | --baseline-src DIR] [--set key=value ...]
                                 [--threads 2] [--out FILE.md] [--jsonl FILE.jsonl]

Data sets (made once by this checkout's code, saved to a temporary folder, read by every fit):
  mnist     the first --n (2,000) of a seeded shuffle of MNIST-test, zero-padded to 32×32, K = 10;
  glyphs    ticlust.sample("glyphs"): 600 warped glyphs of 4 kinds, 32×32, K = 4;
  nonrigid  Non-rigid MNIST (App. F of the ST paper, ticlust.datasets.warped_digits) from MNIST-test: its
            670 training items, 28×28, K = 10;
  nuclei    --n objects cut by the objects route out of generated nuclei fields (250 nuclei each, seeds 0, 1, ...),
            K = 3, invariances=similarity.
Every fit runs in its own process (``--worker``) at --threads torch threads with OMP_WAIT_POLICY=PASSIVE (the timed
call is ``ticlust.fit`` itself, the package's import of its API on first use done before the clock starts), from one
of two source trees: this checkout's src/ ("new") and, with --baseline-ref (a commit, exported by ``git archive``)
or --baseline-src (a folder holding the ticlust package), the baseline ("base"). For each (data, method, seed) the
two run back to back, the baseline first, so both see about the same load; the table gives each side's wall and CPU
seconds of the fit, Lloyd iterations and ACC / NMI, and their ratio. --set key=value changes the new side's
parameters only (to compare the new code's options against the baseline's defaults). --reuse-base FILE.jsonl takes
the baseline's row of a (data, method, seed) from an earlier run's --jsonl (its "new" side when that run had no
baseline: a --no-baseline run of the baseline's own checkout) instead of fitting it again; the table marks those
rows "earlier" (not back to back: compare CPU seconds, and the load).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
K = {"mnist": 10, "glyphs": 4, "nonrigid": 10, "nuclei": 3}
#: Parameters a data set's fits take (the objects route's invariances for the nuclei).
DATA_PARAMS = {"nuclei": {"invariances": "similarity"}}


def make_data(name: str, n: int, folder: Path, given: str | None = None) -> Path:
    """The data set ``name`` as an .npz (x, y) in ``folder``, made with this checkout's ticlust."""
    sys.path.insert(0, str(ROOT / "src"))
    sys.path.insert(0, str(HERE))
    from _data import data_dir
    path = folder / f"{name}.npz"
    if name == "mnist":
        d = np.load(data_dir(given) / "mnist.npz")
        order = np.random.default_rng(0).permutation(len(d["x_test"]))[:n]
        x, y = np.pad(d["x_test"][order], ((0, 0), (2, 2), (2, 2))), d["y_test"][order]
    elif name == "glyphs":
        import ticlust
        x, y = ticlust.sample("glyphs")
    elif name == "nonrigid":
        from ticlust.datasets.warped_digits import nonrigid_digits
        d = np.load(data_dir(given) / "mnist.npz")
        sets = nonrigid_digits(d["x_test"].astype(np.float32) / 255, d["y_test"], seed=0)
        x, y = sets["x_train"], sets["y_train"]
    elif name == "nuclei":
        x, y = nuclei_objects(n)
    else:
        raise SystemExit(f"unknown data set {name!r}")
    np.savez(path, x=np.asarray(x), y=np.asarray(y))
    return path


def nuclei_objects(n: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` objects cut by the objects route from generated fields of 250 nuclei, seeds 0, 1, ..., every field's
    crops of one size: the largest of the fields' own (the route sizes a field's crops to its widest object)."""
    from ticlust.datasets.nuclei import nuclei_field
    from ticlust.objects.route import objects_route
    fields, sizes = [], []
    while sum(sizes) < n:
        fields.append(nuclei_field(n=250, seed=len(fields)))
        sizes.append(len(objects_route(fields[-1].image, fields[-1].labels, "st-kmeans").items))
    size = max(objects_route(f.image, f.labels, "st-kmeans").items.shape[1] for f in fields)
    xs, ys = [], []
    for f in fields:
        route = objects_route(f.image, f.labels, "st-kmeans", DATA_PARAMS["nuclei"], size=size)
        xs.append(route.items)
        ys.append(f.kind_of(route.table["label"]))
    return np.concatenate(xs)[:n], np.concatenate(ys)[:n]


def worker(args) -> None:
    """One fit (in this process, with whatever ticlust PYTHONPATH gives): prints its row as one JSON line."""
    import torch
    import ticlust
    from ticlust.metrics import evaluate
    torch.set_num_threads(args.threads)
    d = np.load(args.worker_data)
    params = {**DATA_PARAMS.get(args.data[0], {}), **json.loads(args.worker_params)}
    fit = ticlust.fit   # the package imports its API on first use: that import is not the fit's (not timed)
    load_before = " ".join(f"{v:.2f}" for v in os.getloadavg())
    wall, cpu = time.perf_counter(), time.process_time()
    r = fit(d["x"], args.methods[0], k=K[args.data[0]], device="cpu", seed=args.seeds[0], progress=False, **params)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    scores = evaluate(d["y"], r.labels)
    print(json.dumps({"wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "iterations": r.timing.get("iterations"),
                      "distortion": float(r.final_loss), "acc": round(scores["acc"], 4), "nmi": round(scores["nmi"], 4),
                      "repairs": int(len(r.extras.get("repairs", ()))), "load_before": load_before,
                      "load_after": " ".join(f"{v:.2f}" for v in os.getloadavg()),
                      "ticlust": str(Path(ticlust.__file__).parent)}), flush=True)


def run_one(src: Path, data: Path, name: str, method: str, seed: int, params: dict, threads: int) -> dict:
    """A fit in a fresh process on the source tree ``src``: its row."""
    env = {**os.environ, "PYTHONPATH": str(src), "OMP_WAIT_POLICY": "PASSIVE"}
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker-data", str(data), "--worker-params",
           json.dumps(params), "--data", name, "--methods", method, "--seeds", str(seed), "--threads", str(threads)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=tempfile.gettempdir())
    if out.returncode:
        raise SystemExit(f"fit failed ({src}): {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def export_ref(ref: str, folder: Path) -> tuple[Path, str]:
    """The src/ of commit ``ref`` of this repository, unpacked into ``folder``: (its path, the short commit)."""
    sha = subprocess.run(["git", "rev-parse", "--short", ref], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    archive = folder / "base.tar"
    with open(archive, "wb") as f:
        subprocess.run(["git", "archive", sha, "src"], cwd=ROOT, stdout=f, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(folder / "base", filter="data")
    return folder / "base" / "src", sha


def head() -> str:
    sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "src"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    return sha + ("+changes" if dirty else "")


def cpu_model() -> str:
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
            if line.startswith("Model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def table(rows: list[dict]) -> list[str]:
    """The paired table and, per (data, method), the means over seeds (rows with a baseline only)."""
    rows = [r for r in rows if r["base"] is not None]
    out = ["| data | method | seed | base run | base wall s | new wall s | wall ratio | base CPU s | new CPU s | CPU ratio | "
           "base iters | new iters | base ACC | new ACC | base NMI | new NMI | load before base / new |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        b, n = r["base"], r["new"]
        when = "earlier" if b.get("earlier") else "paired"
        out.append(f"| {r['data']} | {r['method']} | {r['seed']} | {when} | {b['wall_s']} | {n['wall_s']} | "
                   f"{b['wall_s'] / n['wall_s']:.1f}× | {b['cpu_s']} | {n['cpu_s']} | {b['cpu_s'] / n['cpu_s']:.1f}× | "
                   f"{b['iterations']} | {n['iterations']} | {b['acc']:.4f} | {n['acc']:.4f} | {b['nmi']:.4f} | "
                   f"{n['nmi']:.4f} | {b['load_before']} / {n['load_before']} |")
    out += ["", "Means over seeds:", "",
            "| data | method | seeds | base wall s | new wall s | wall ratio | CPU ratio | base ACC | new ACC | ACC change |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for key in dict.fromkeys((r["data"], r["method"]) for r in rows):
        group = [r for r in rows if (r["data"], r["method"]) == key]

        def mean(side, field):
            return float(np.mean([r[side][field] for r in group]))
        out.append(f"| {key[0]} | {key[1]} | {len(group)} | {mean('base', 'wall_s'):.1f} | {mean('new', 'wall_s'):.1f} | "
                   f"{mean('base', 'wall_s') / mean('new', 'wall_s'):.1f}× | {mean('base', 'cpu_s') / mean('new', 'cpu_s'):.1f}× | "
                   f"{mean('base', 'acc'):.4f} | {mean('new', 'acc'):.4f} | {mean('new', 'acc') - mean('base', 'acc'):+.4f} |")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", nargs="+", default=["mnist", "glyphs", "nonrigid", "nuclei"], choices=list(K))
    ap.add_argument("--methods", nargs="+", default=["ai-kmeans", "st-kmeans"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--n", type=int, default=2000, help="items of mnist and nuclei")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--data-dir", help="the folder of mnist.npz (default: shared/datasets beside the repository)")
    ap.add_argument("--baseline-ref", help="commit of this repository whose src/ is the baseline")
    ap.add_argument("--baseline-src", help="folder holding the baseline's ticlust package")
    ap.add_argument("--no-baseline", action="store_true", help="time the new side only")
    ap.add_argument("--reuse-base", help="a --jsonl file whose rows give the baseline where they have one")
    ap.add_argument("--set", nargs="*", default=[], help="key=value (JSON value) parameters of the new side")
    ap.add_argument("--out", help="markdown table to write")
    ap.add_argument("--jsonl", help="append every paired row here as it finishes")
    ap.add_argument("--worker-data", help=argparse.SUPPRESS)
    ap.add_argument("--worker-params", default="{}", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker_data:
        worker(args)
        return 0
    changes = {}
    for item in args.set:
        key, value = item.split("=", 1)
        try:
            changes[key] = json.loads(value)
        except json.JSONDecodeError:
            changes[key] = value
    earlier = {}
    for line in Path(args.reuse_base).read_text().splitlines() if args.reuse_base else []:
        row = json.loads(line)
        earlier[(row["data"], row["method"], row["seed"])] = {**(row["base"] or row["new"]), "earlier": True}
    if not (args.no_baseline or args.baseline_ref or args.baseline_src or args.reuse_base):
        raise SystemExit("Say what to pair against: --baseline-ref REF, --baseline-src DIR or --no-baseline.")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        base_src, base_name = None, "none"
        if args.baseline_ref:
            base_src, base_name = export_ref(args.baseline_ref, tmp)
        elif args.baseline_src:
            base_src, base_name = Path(args.baseline_src), args.baseline_src
        if args.reuse_base:
            base_name += f" (rows marked earlier: from {args.reuse_base})"
        new_src, new_name = ROOT / "src", head()
        started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        for name in args.data:
            path = make_data(name, args.n, tmp, args.data_dir)
            for method in args.methods:
                for seed in args.seeds:
                    base = earlier.get((name, method, seed))
                    if base is None and base_src:
                        base = run_one(base_src, path, name, method, seed, {}, args.threads)
                    new = run_one(new_src, path, name, method, seed, changes, args.threads)
                    row = {"data": name, "method": method, "seed": seed, "base": base, "new": new, "set": changes}
                    rows.append(row)
                    print(json.dumps(row), flush=True)
                    if args.jsonl:
                        with open(args.jsonl, "a") as f:
                            f.write(json.dumps(row) + "\n")
    if args.out and not args.no_baseline:
        lines = [f"# Fit speed: ai-kmeans / st-kmeans fit, paired against {base_name}", "",
                 f"`python benchmarks/fit_speed.py {' '.join(argv if argv is not None else sys.argv[1:])}`, started "
                 f"{started}: new = {new_name}, base = {base_name}; {args.threads} torch threads, OMP_WAIT_POLICY=PASSIVE; "
                 f"CPU {cpu_model()} ({os.cpu_count()} cores); load (1/5/15 min) before each fit in the last column.", ""]
        Path(args.out).write_text("\n".join(lines + table(rows)) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
