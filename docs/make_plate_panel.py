"""Render docs/plate-panel.png: a real napari window with a generated plate's object store opened through the
store reader (File > Open on the folder), so the plate panel docks itself; shown as the panel leaves it.

  xvfb-run -a -s "-screen 0 1600x1000x24" python docs/make_plate_panel.py docs/plate-panel.png

The plate: 8 fields (4 wells × 2 sites) of 120 generated nuclei, 512×512, extracted, fitted with kmeans (K=3) on
the store and predicted, in a temporary folder; the view shows well A03, site 1.
"""
import sys
import tempfile
import time
from pathlib import Path

import napari
from qtpy.QtWidgets import QApplication

import ticlust
from ticlust._napari.store_panel import STORE_PANEL
from ticlust.datasets.nuclei import write_nuclei_plate
from ticlust.plate.run import fit_store, predict_store

out = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent / "plate-panel.png")
with tempfile.TemporaryDirectory() as tmp:
    manifest = write_nuclei_plate(Path(tmp) / "plate", fields=8, n=120, shape=(512, 512), seed=0)
    store = ticlust.extract(manifest, Path(tmp) / "plate.zarr")
    result, _ = fit_store(store, "kmeans", k=3, sample=600, seed=0)
    predict_store(result, store)
    viewer = napari.Viewer(title="ticlust")
    viewer.window.resize(1600, 1000)
    viewer.open(str(store.path), plugin="napari-ticlust")
    _, panel = viewer.window.add_plugin_dock_widget("napari-ticlust", STORE_PANEL)
    for step in (lambda: None, lambda: panel.pick(5)):     # the store opens, then the field is read, in workers
        step()
        while panel.busy:
            QApplication.processEvents()
            time.sleep(0.01)
    for _ in range(20):
        QApplication.processEvents()
    viewer.screenshot(str(out), canvas_only=False)
    viewer.close()
print(out)
