"""The plate dock: how long the inspector takes per object, and how long each step keeps napari's GUI thread busy.

    python benchmarks/plate_dock.py inspector [--objects 20] [--threads 2]
    xvfb-run -a python benchmarks/plate_dock.py freeze [--fields 400] [--plate-dir DIR] [--reuse] [--profile]
    xvfb-run -a python benchmarks/plate_dock.py floor [--repeats 5]

``inspector``: a generated plate extracted at 32×32 crops; each method (ai-kmeans, st-kmeans, dti-kmeans, pssc,
rigid-spectral) fitted on 200 of its objects with short settings (the inspector's cost does not depend on how long
the fit ran), then ``plate.explore.inspect_object`` — what the dock's worker runs when an object is clicked: the
store's crop read, every prototype aligned onto it with its score and warp grid — timed on ``--objects`` objects
outside the fit sample (the slower path: aligned from scratch) and on as many inside it, after one warm-up call.
One JSON line per method: median and 90th percentile in ms, torch threads.

``freeze``: a generated plate of ``--fields`` 1024×1024 fields of 250 nuclei (400: about 100,000 objects), written
once into ``--plate-dir``; then in a real napari window the plate dock does every step as a user does — Extract the
folder into a new store, Fit kmeans (K = 3) on a 2,000-object sample (``--sample``), Predict every object, click an object
(the inspector), Move it, Re-predict (renumbered), Merge two clusters, Undo, Refine, Re-predict (predicted anew),
Export the objects' CSV, the gallery and the shares — while a timer ticks every 5 ms in the GUI thread; the longest
gap between two ticks during a step is the longest the window could not react, and the GUI thread's own CPU time
in that gap (``time.thread_time``) what of it was the thread's own work rather than waiting for a loaded machine's
cores or for the interpreter's lock, and the garbage collections inside it (any thread: a collection holds the
lock) what of it was Python's collector. A step lasts until the dock and its object map are idle with their
results drawn. One JSON line: per step its wall time, longest freeze, that freeze's CPU time and collection time,
the objects, the load average, and the longest gap while the window sat idle for a second (what the machine's
load alone gives). ``--reuse`` opens the store a previous run extracted (kept in ``--plate-dir``) instead of
extracting again; ``--profile`` samples every thread's stack every 3 ms and prints, for every gap over 50 ms, the
functions most often on the GUI thread's stack, on each other thread's that was not waiting, and the collections.

``floor``: what napari itself costs the GUI thread in the same window, with a 1024×1024 field and its 250 objects
shown: one repaint of the canvas with nothing changed, one colour change of the objects' Labels layer (a
DirectLabelColormap of 250 objects), and making one empty layer of each kind the dock makes (Image, Labels,
Shapes) — ``--repeats`` times each, the longest GUI gap and its CPU time per repeat.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parents[1] / "src"))

import numpy as np  # noqa: E402

TICK_MS = 5
#: Short fits: the inspector's cost is the alignment of one object, whatever the fit's length.
FITS = {"ai-kmeans": {"steps": 10, "affine_steps": 10, "max_iter": 3},
        "st-kmeans": {"steps": 10, "affine_steps": 10, "max_iter": 3},
        "dti-kmeans": {"max_epochs": 5},
        "pssc": {},
        "rigid-spectral": {"anchors": 60}}


def load() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


# ---- the inspector's latency ----------------------------------------------------------------------------
def inspector(args) -> None:
    import torch

    import ticlust
    from ticlust.datasets.nuclei import write_nuclei_plate
    from ticlust.plate.explore import inspect_object
    from ticlust.plate.run import fit_store

    torch.set_num_threads(args.threads)
    folder = Path(tempfile.mkdtemp(prefix="ticlust_inspector_"))
    try:
        manifest = write_nuclei_plate(folder / "plate", fields=4, n=120, shape=(512, 512), seed=0)
        store = ticlust.extract(manifest, folder / "s.zarr", crop_size=32)
        for method in args.methods:
            start = time.perf_counter()
            result, sample = fit_store(store, method, k=3, sample=200, seed=0, device="cpu", **FITS[method])
            fit_s = time.perf_counter() - start
            inside = set(sample.tolist())
            outside = [o for o in range(len(store)) if o not in inside][:args.objects]
            row = {"method": method, "crop": "32x32", "k": 3, "threads": args.threads, "fit_s": round(fit_s, 1)}
            for name, objects in (("new", outside), ("fitted", sorted(inside)[:args.objects])):
                inspect_object(store, result, objects[0], "cpu")                    # warm
                times = []
                for obj in objects:
                    t = time.perf_counter()
                    inspect_object(store, result, obj, "cpu")
                    times.append(1000 * (time.perf_counter() - t))
                row[f"{name}_median_ms"] = round(float(np.median(times)), 1)
                row[f"{name}_p90_ms"] = round(float(np.percentile(times, 90)), 1)
            row["load"] = load()
            print(json.dumps(row), flush=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# ---- the GUI thread's freezes ---------------------------------------------------------------------------
class Sampler(threading.Thread):
    """Samples every thread's Python stack every ``every_s`` from a thread beside them: what the GUI thread ran during
    a freeze, and what the other threads ran meanwhile (a worker holding the interpreter's lock freezes the window
    with no GUI work on its stack)."""

    def __init__(self, every_s: float = 0.003):
        super().__init__(daemon=True)
        self.main, self.every_s, self.samples, self.on = threading.main_thread().ident, every_s, [], True

    def run(self) -> None:
        me = threading.get_ident()
        while self.on:
            stacks = {ident: _stack(frame) for ident, frame in sys._current_frames().items() if ident != me}
            self.samples.append((time.perf_counter(), stacks))
            time.sleep(self.every_s)

    def report(self, name: str, gaps, top: int = 14, at_least_s: float = 0.05) -> None:
        """For each gap between GUI ticks longer than ``at_least_s``: the functions most often on the GUI thread's
        stack during it (each counted once per sample), and those of every other thread that was not waiting,
        printed to stderr."""
        names = {t.ident: t.name for t in threading.enumerate()}
        for start, end in gaps:
            if end - start < at_least_s:
                continue
            inside = [stacks for t, stacks in self.samples if start <= t <= end]
            gui = [stacks.get(self.main, []) for stacks in inside]
            counts = Counter(f for stack in gui for f in dict.fromkeys(stack) if not _plumbing(f))
            print(f"  [{name}] freeze {end - start:.3f} s, {len(inside)} samples:", file=sys.stderr)
            for function, n in counts.most_common(top):
                print(f"      {n:4d}  {function}", file=sys.stderr)
            for a, b, generation, ident in COLLECTIONS:
                if b >= start and a <= end and b - a > 0.01:
                    where = "GUI thread" if ident == self.main else names.get(ident, ident)
                    print(f"    garbage collection of generation {generation}: {b - a:.3f} s in {where}",
                          file=sys.stderr)
            others = {ident for stacks in inside for ident in stacks if ident != self.main}
            for ident in sorted(others):
                busy = [s[ident] for s in inside if ident in s and s[ident] and not _waiting(s[ident][0])]
                if busy:
                    print(f"    thread {names.get(ident, ident)}: {len(busy)} samples busy", file=sys.stderr)
                    counts = Counter(f for stack in busy for f in dict.fromkeys(stack) if not _plumbing(f))
                    for function, n in counts.most_common(top // 2):
                        print(f"      {n:4d}  {function}", file=sys.stderr)


def _stack(frame) -> list[str]:
    stack = []
    while frame is not None:
        code = frame.f_code
        stack.append(f"{_short(code.co_filename)}:{code.co_name}")
        frame = frame.f_back
    return stack


def _waiting(leaf: str) -> bool:
    """Whether a thread's innermost frame is a wait (a lock, a queue, a sleep, a select): not holding the lock."""
    return any(w in leaf for w in ("threading.py:wait", "queue.py:get", "selectors.py", "threading.py:_wait_for",
                                   "plate_dock.py:run", "concurrent/futures/thread.py:_worker"))


def _short(filename: str) -> str:
    for marker in ("site-packages/", "src/", "lib/python3"):
        if marker in filename:
            return filename.split(marker, 1)[1]
    return filename


def _plumbing(function: str) -> bool:
    return any(p in function for p in ("plate_dock.py:measure", "plate_dock.py:step", "plate_dock.py:freeze",
                                       "plate_dock.py:main", "plate_dock.py:<", "threading.py"))


SAMPLER: Sampler | None = None
#: (start, end, generation, thread) of every garbage collection in the process: a collection holds the interpreter's
#: lock throughout, whichever thread's allocation set it off, and a full one walks every object Python tracks.
COLLECTIONS: list[tuple] = []


def _collected(phase: str, info: dict, _started=[0.0]) -> None:         # noqa: B006 (the start, kept between calls)
    if phase == "start":
        _started[0] = time.perf_counter()
    else:
        COLLECTIONS.append((_started[0], time.perf_counter(), info["generation"], threading.get_ident()))


def collected_in(start: float, end: float) -> float:
    """Seconds of garbage collection (any thread, any generation) inside [start, end]."""
    return sum(min(b, end) - max(a, start) for a, b, _, _ in COLLECTIONS if b > start and a < end)


def measure(action, done, name: str = "") -> dict:
    """Run ``action`` and process events until ``done()``: its wall time and the longest gap between GUI ticks
    (with ``--profile``: what the GUI thread ran during each gap over 50 ms)."""
    from qtpy.QtCore import QTimer
    from qtpy.QtWidgets import QApplication

    ticks, cpu = [time.perf_counter()], [time.thread_time()]
    timer = QTimer()
    timer.timeout.connect(lambda: (ticks.append(time.perf_counter()), cpu.append(time.thread_time())))
    timer.start(TICK_MS)
    start = time.perf_counter()
    action()
    while not done():
        QApplication.processEvents()
        time.sleep(0.001)
    for _ in range(5):                     # what the last step queued (a repaint) is part of the wait
        QApplication.processEvents()
    end = time.perf_counter()
    timer.stop()
    ticks.append(end)
    cpu.append(time.thread_time())
    if SAMPLER is not None:
        SAMPLER.report(name, [(a, b) for a, b in zip(ticks[:-1], ticks[1:])])
    gaps, used = np.diff(ticks), np.diff(cpu)
    longest = int(gaps.argmax())
    return {"wall_s": round(end - start, 2), "freeze_s": round(float(gaps.max()), 3),
            "freeze_cpu_s": round(float(used[longest]), 3), "max_gap_cpu_s": round(float(used.max()), 3),
            "freeze_gc_s": round(collected_in(ticks[longest], ticks[longest + 1]), 3)}


def plate_folder(folder: Path, fields: int) -> Path:
    from ticlust.datasets.nuclei import write_nuclei_plate

    plate = folder / f"plate{fields}"
    if not (plate / "plate.csv").exists():
        write_nuclei_plate(plate, fields=fields, n=250, shape=(1024, 1024), seed=0)
    return plate


def freeze(args) -> None:
    import napari
    from qtpy.QtWidgets import QApplication

    from ticlust.plate import curate

    global SAMPLER
    plate = plate_folder(Path(args.plate_dir), args.fields)
    target = Path(args.plate_dir) / f"dock{args.fields}.zarr"
    pristine = Path(args.plate_dir) / f"pristine{args.fields}.zarr"      # the store as extracted, no predictions
    shutil.rmtree(target, ignore_errors=True)
    gc.callbacks.append(_collected)
    if args.profile:
        SAMPLER = Sampler()
        SAMPLER.start()
    viewer = napari.Viewer(title="ticlust")
    viewer.window.resize(1600, 1000)
    for _ in range(20):
        QApplication.processEvents()
    _, panel = viewer.window.add_plugin_dock_widget("napari-ticlust")      # the one dock, its plate source
    plate_ = panel.plate
    panel.use(plate_)
    idle = lambda: not panel.busy            # noqa: E731  (its map drawn too)
    measure(lambda: None, idle)              # the method registry's import, in its worker
    row = {"fields": args.fields, "load_before": load()}
    steps = {}

    def step(name, action):
        steps[name] = measure(action, idle, name)
        steps[name]["said"] = panel.status.value[:160]
        print(name, steps[name], file=sys.stderr, flush=True)

    if args.reuse and pristine.is_dir():      # the extraction skipped: the store as it was extracted, opened
        shutil.copytree(pristine, target)
        step("open store (extracted before)", lambda: plate_.open_store(target))
    else:
        plate_.extract.offer(plate)
        plate_.extract.target.value = str(target)
        step("extract", lambda: plate_.extract.extract_button.native.click())
        shutil.rmtree(pristine, ignore_errors=True)
        shutil.copytree(target, pristine)
    row["objects"] = len(plate_.store)
    plate_.sample.value, panel.form.k.value, panel.device.value = args.sample, 3, "cpu"
    step("fit", lambda: panel.run_button.native.click())
    step("predict", lambda: plate_.predict_run.button.native.click())
    field = plate_.picture.field_index
    sample = set(curate.fit_sample(panel.result).tolist())
    obj = next(o for o in range(int(plate_.starts[field]), int(plate_.starts[field + 1])) if o not in sample)
    ys, xs = np.nonzero(plate_.picture.values == obj - int(plate_.starts[field]) + 1)
    step("inspect", lambda: plate_.click_at((float(ys[len(ys) // 2]), float(xs[len(xs) // 2]))))
    panel.curate.to.value = (int(plate_.picture.table["cluster"][obj - int(plate_.starts[field])]) + 1) % 3
    step("move", lambda: panel.curate.move_button.native.click())
    step("re-predict (renumbered)", lambda: plate_.repredict_run.button.native.click())
    panel.curate.a.value, panel.curate.b.value = 0, 1
    step("merge", lambda: panel.curate.merge_button.native.click())
    step("undo", lambda: panel.curate.undo_button.native.click())
    step("refine", lambda: panel.curate.refine_run.button.native.click())
    step("re-predict (anew)", lambda: plate_.repredict_run.button.native.click())
    out = Path(tempfile.mkdtemp(prefix="ticlust_dock_export_"))
    step("export objects", lambda: plate_.export.export_objects(out / "objects.csv"))
    step("export gallery", lambda: panel.export_gallery(out / "gallery"))
    step("export shares", lambda: plate_.shares.export(out / "shares.csv"))
    step("switch field", lambda: plate_.pick(7))
    until = time.perf_counter() + 1.0
    row["idle_freeze_s"] = measure(lambda: None, lambda: time.perf_counter() > until)["freeze_s"]
    row["steps"] = steps
    row["load_after"] = load()
    viewer.close()
    shutil.rmtree(out, ignore_errors=True)
    print(json.dumps(row))


def floor(args) -> None:
    import napari
    from napari.utils.colormaps import DirectLabelColormap
    from qtpy.QtWidgets import QApplication

    from ticlust._napari import layers as L
    from ticlust._napari.parts import warm_up

    warm_up()
    viewer = napari.Viewer(title="ticlust")
    viewer.window.resize(1600, 1000)
    for _ in range(20):
        QApplication.processEvents()
    rng = np.random.default_rng(0)
    values = np.zeros((1024, 1024), np.int32)
    for i in range(1, 251):
        y, x = rng.integers(0, 1000, 2)
        values[y:y + 24, x:x + 24] = i
    viewer.add_image(rng.random((1024, 1024)).astype(np.float32), name="field", colormap="gray")
    colours = lambda shift: DirectLabelColormap(color_dict={None: np.zeros(4), 0: np.zeros(4), **{    # noqa: E731
        i: L.cluster_color((i + shift) % 3) for i in range(1, 251)}})
    objects = viewer.add_labels(values, name="objects", colormap=colours(0), opacity=0.6)
    canvas = viewer.window._qt_viewer.canvas.native
    row, made = {"load_before": load()}, [0]

    def add(kind):
        made[0] += 1
        L.add_undrawn_layer(viewer, f"{kind} {made[0]}", kind)

    actions = {"repaint (nothing changed)": canvas.update,
               "recolour the 1024x1024 objects": lambda: setattr(objects, "colormap", colours(made[0] + 1)),
               "make an Image layer": lambda: add("image"), "make a Labels layer": lambda: add("labels"),
               "make a Shapes layer": lambda: add("shapes")}
    for name, action in actions.items():
        runs = []
        for _ in range(args.repeats):
            until = time.perf_counter() + 0.4       # what the action queued (a repaint) is drawn meanwhile
            runs.append(measure(action, lambda: time.perf_counter() > until))
            made[0] += 1
        row[name] = {"freeze_s": [r["freeze_s"] for r in runs], "freeze_cpu_s": [r["freeze_cpu_s"] for r in runs]}
    until = time.perf_counter() + 1.0
    row["idle_freeze_s"] = measure(lambda: None, lambda: time.perf_counter() > until)["freeze_s"]
    row["load_after"] = load()
    viewer.close()
    print(json.dumps(row))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    one = sub.add_parser("inspector")
    one.add_argument("--objects", type=int, default=20)
    one.add_argument("--threads", type=int, default=2)
    one.add_argument("--methods", nargs="+", default=list(FITS))
    gui = sub.add_parser("freeze")
    gui.add_argument("--fields", type=int, default=400)
    gui.add_argument("--plate-dir", default="/tmp/ticlust_plate_dock")
    gui.add_argument("--sample", type=int, default=2000, help="the fit sample's size")
    gui.add_argument("--reuse", action="store_true", help="open the store a previous run extracted (kept in "
                                                          "--plate-dir) instead of extracting the plate again")
    gui.add_argument("--profile", action="store_true", help="print what the GUI thread ran in each freeze over 50 ms")
    napari_floor = sub.add_parser("floor")
    napari_floor.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    {"inspector": inspector, "freeze": freeze, "floor": floor}[args.what](args)


if __name__ == "__main__":
    main()
