"""How long the plate panel keeps napari's GUI thread busy: opening a store, switching field and changing what the
cluster shares are counted per (issue "Plates and a million objects", item 6).

    xvfb-run -a python benchmarks/plate_panel.py [--fields 40] [--plate-dir DIR] [--src DIR]

Makes (once, in ``--plate-dir``) a generated plate of ``--fields`` 1024×1024 fields of 250 nuclei, extracts it,
fits kmeans (K=3) on 2,000 objects and predicts the store; then, in a real napari window, opens the store in the
ticlust dock (its plate source), switches to five other fields, then sets **share per** to site, image, well, twice. A timer ticks
every 5 ms in the GUI thread: the longest gap between two ticks is the longest time the window could not react (a
freeze). Prints one JSON line per run: the wall time of the open, of each field switch and of each share change
(until drawn) and the longest freeze during each (medians over the switches and changes, and the changes' worst),
and the longest gap while the window sat idle for a second (what the machine's load alone gives). ``--src`` runs
the panel of another checkout (its ``src`` folder), to compare two versions on the same plate back to back.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--fields", type=int, default=40)
parser.add_argument("--plate-dir", default="/tmp/ticlust_plate_panel", help="where the plate and its store are kept")
parser.add_argument("--src", default=str(HERE.parents[1] / "src"), help="the ticlust source folder to time")
args = parser.parse_args()
sys.path.insert(0, args.src)

import napari  # noqa: E402
import numpy as np  # noqa: E402
from qtpy.QtCore import QTimer  # noqa: E402
from qtpy.QtWidgets import QApplication  # noqa: E402

import ticlust  # noqa: E402

TICK_MS = 5
SWITCHES = 5
SHARES_PER = ("site", "image", "well") * 2


def plate(folder: Path, fields: int) -> Path:
    """The predicted store of a generated plate, made on the first call."""
    from ticlust.datasets.nuclei import write_nuclei_plate
    from ticlust.plate.run import fit_store, is_store, predict_store

    store = folder / f"plate{fields}.zarr"
    if not is_store(store) or not (store / "predictions.parquet").exists():
        manifest = write_nuclei_plate(folder / f"plate{fields}", fields=fields, n=250, shape=(1024, 1024), seed=0)
        objects = ticlust.extract(manifest, store)
        result, _ = fit_store(objects, "kmeans", k=3, sample=2000, seed=0, device="cpu")
        predict_store(result, objects, device="cpu")
    return store


def measure(action, done) -> dict:
    """Run ``action`` and process events until ``done()``: its wall time and the longest gap between GUI ticks."""
    ticks = [time.perf_counter()]
    timer = QTimer()
    timer.timeout.connect(lambda: ticks.append(time.perf_counter()))
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
    return {"wall_s": round(end - start, 3), "freeze_s": round(float(np.max(np.diff(ticks))), 3)}


store_path = plate(Path(args.plate_dir), args.fields)
viewer = napari.Viewer(title="ticlust")
viewer.window.resize(1600, 1000)
for _ in range(20):
    QApplication.processEvents()
_, dock = viewer.window.add_plugin_dock_widget("napari-ticlust")
dock.use(dock.plate)
panel = dock.plate
idle = lambda: not dock.busy          # noqa: E731
row = {"src": args.src, "fields": args.fields, "load": " ".join(f"{v:.2f}" for v in os.getloadavg())}
row["open"] = measure(lambda: panel.open_store(store_path), lambda: panel.store is not None and idle())
row["objects"] = len(panel.store)
switches = []
field_layer = viewer.layers[f"{store_path.stem} field"]
for field_index in range(3, 3 + 2 * SWITCHES, 2):
    switches.append(measure(lambda: panel.pick(field_index),
                            lambda: field_layer.metadata["field_index"] == field_index and idle()))
row["switch_wall_s"] = float(np.median([s["wall_s"] for s in switches]))
row["switch_freeze_s"] = float(np.median([s["freeze_s"] for s in switches]))
until = time.perf_counter() + 1.0       # the floor: the longest gap while the panel does nothing for a second
row["idle_freeze_s"] = measure(lambda: None, lambda: time.perf_counter() > until)["freeze_s"]
changes = []
for by in SHARES_PER:         # done when the plot's table is counted per ``by`` (the table has a column ``by``)
    changes.append(measure(lambda: setattr(panel.shares.group_by, "value", by),
                           lambda: panel.shares.table is not None and by in panel.shares.table.columns and idle()))
row["share_wall_s"] = round(float(np.median([c["wall_s"] for c in changes])), 3)
row["share_freeze_s"] = round(float(np.median([c["freeze_s"] for c in changes])), 3)
row["share_freeze_max_s"] = float(np.max([c["freeze_s"] for c in changes]))
viewer.close()
print(json.dumps(row))
