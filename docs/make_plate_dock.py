"""Render docs/plate_dock_*.png: the plate dock in a real napari window at each stage, driven as a user drives it —
File > Open on a plate's folder, Extract, Fit, Predict, a click on an object (the inspector), a hand edit, Export.

  xvfb-run -a -s "-screen 0 1600x1000x24" python docs/make_plate_dock.py [docs]

The plate: 8 fields (4 wells × 2 sites) of 120 generated nuclei, 512×512, in a temporary folder; ai-kmeans (K = 3)
fitted on 300 of its objects with short settings (10 steps, 3 Lloyd iterations), so that the pictures take a minute.
"""
import sys
import tempfile
import time
from pathlib import Path

import napari
import numpy as np
from qtpy.QtWidgets import QApplication

from ticlust._napari.store_panel import STORE_PANEL
from ticlust.datasets.nuclei import write_nuclei_plate
from ticlust.plate import curate

out = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent)


def settle(panel) -> None:
    while panel.busy:
        QApplication.processEvents()
        time.sleep(0.01)
    for _ in range(20):
        QApplication.processEvents()


def shot(viewer, name: str) -> None:
    viewer.screenshot(str(out / f"plate_dock_{name}.png"), canvas_only=False)
    print(out / f"plate_dock_{name}.png")


with tempfile.TemporaryDirectory() as tmp:
    folder = write_nuclei_plate(Path(tmp) / "plate", fields=8, n=120, shape=(512, 512), seed=0).parent
    viewer = napari.Viewer(title="ticlust")
    viewer.window.resize(1600, 1000)
    viewer.open(str(folder), plugin="napari-ticlust")                    # File > Open of the folder
    _, panel = viewer.window.add_plugin_dock_widget("napari-ticlust", STORE_PANEL)
    settle(panel)
    shot(viewer, "1_open")
    panel.extract.extract_button.native.click()
    settle(panel)
    panel.show_tab(panel.fit)
    panel.fit.form.method.value = "ai-kmeans"
    panel.fit.form.k.value, panel.fit.sample.value, panel.fit.device.value = 3, 300, "cpu"
    for name, value in {"steps": 10, "affine_steps": 10, "max_iter": 3}.items():
        panel.fit.form.param(name).value = value
    panel.fit.fit_button.native.click()
    settle(panel)
    shot(viewer, "2_fit")
    panel.show_tab(panel.predict)
    panel.predict.predict_button.native.click()
    settle(panel)
    panel.show_tab(panel.pages[4])                                    # Shares
    shot(viewer, "3_predict")
    field = panel.picture.field_index
    sample = set(curate.fit_sample(panel.result).tolist())
    obj = next(o for o in range(int(panel.starts[field]) + 20, int(panel.starts[field + 1])) if o not in sample)
    ys, xs = np.nonzero(panel.picture.values == obj - int(panel.starts[field]) + 1)
    panel.inspector.click_at((float(ys[len(ys) // 2]), float(xs[len(xs) // 2])))
    settle(panel)
    shot(viewer, "4_inspect")
    panel.show_tab(panel.curate)
    panel.curate.to.value = (int(panel.picture.table["cluster"][obj - int(panel.starts[field])]) + 1) % 3
    panel.curate.move_button.native.click()
    settle(panel)
    shot(viewer, "5_curate")
    panel.show_tab(panel.export)
    panel.export.export_objects(Path(tmp) / "plate_clusters.csv")
    settle(panel)
    shot(viewer, "6_export")
    viewer.close()
