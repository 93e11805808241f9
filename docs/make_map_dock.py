"""Render docs/map_dock_plate.png and docs/map_dock_field.png: the object map docked in a real napari window with a
lasso selection — beside the plate panel (every object of a predicted store; the selection's gallery left of the
field, its objects ringed on the field, its counts per cluster and well) and beside the ticlust widget (the nuclei
sample's objects, a single-field result).

  xvfb-run -a -s "-screen 0 1600x1000x24" python docs/make_map_dock.py [docs]

The plate: 8 fields (4 wells × 2 sites) of 120 generated nuclei, 512×512, in a temporary folder; ai-kmeans (K = 3)
fitted on 300 of its objects with short settings, every object predicted (a minute or two).
"""
import sys
import tempfile
import time
from pathlib import Path

import napari
import numpy as np
from qtpy.QtWidgets import QApplication

import ticlust
from ticlust.datasets.nuclei import write_nuclei_plate
from ticlust.plate.run import fit_store, predict_store

out = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent)


def settle(*busy) -> None:
    while any(b() for b in busy):
        QApplication.processEvents()
        time.sleep(0.01)
    for _ in range(20):
        QApplication.processEvents()


def lasso(panel, rows: np.ndarray) -> np.ndarray:
    """A lasso (a 24-gon) around the points of ``rows``, on the map as a user draws it."""
    xy = panel.map.xy[rows]
    centre, radius = xy.mean(0), np.percentile(np.hypot(*(xy - xy.mean(0)).T), 70)
    angle = np.linspace(0, 2 * np.pi, 24, endpoint=False)
    return panel.map.select_polygon(centre + radius * np.column_stack([np.cos(angle), np.sin(angle)]))


def shot(viewer, name: str) -> None:
    viewer.screenshot(str(out / f"map_dock_{name}.png"), canvas_only=False)
    print(out / f"map_dock_{name}.png")


with tempfile.TemporaryDirectory() as tmp:
    manifest = write_nuclei_plate(Path(tmp) / "plate", fields=8, n=120, shape=(512, 512), seed=0)
    store = ticlust.extract(manifest, Path(tmp) / "plate.zarr")
    result, _ = fit_store(store, "ai-kmeans", k=3, sample=300, seed=0, device="cpu", steps=10, affine_steps=10,
                          max_iter=3)
    predict_store(result, store, device="cpu")
    viewer = napari.Viewer(title="ticlust")
    viewer.window.resize(1600, 1000)
    _, panel = viewer.window.add_plugin_dock_widget("napari-ticlust")
    link = panel.object_map
    settle(lambda: not panel.ready)
    panel.plate.open_store(store.path)
    settle(lambda: panel.busy, lambda: link.busy)
    panel.load_result(result.save(Path(tmp) / "r.npz"))
    settle(lambda: panel.busy, lambda: link.busy)
    first = np.flatnonzero(link.panel.map.columns["cluster"].to_numpy() == 1)
    lasso(link.panel, first[: len(first) // 3])
    link.panel.map.color_by("well")
    link.panel.map.color_by("cluster")
    settle(lambda: panel.busy, lambda: link.busy)
    panel.plate.frame()
    panel.show_tab("Curate")
    link.panel.map.show_all()
    settle(lambda: panel.busy, lambda: link.busy)
    shot(viewer, "plate")
    viewer.close()

viewer = napari.Viewer(title="ticlust")
viewer.window.resize(1600, 1000)
viewer.open_sample("napari-ticlust", "nuclei")
_, widget = viewer.window.add_plugin_dock_widget("napari-ticlust")
settle(lambda: not widget.ready)
widget.use(widget.field)
widget.field.pick("nuclei", labels="nuclei labels")
widget.form.method.value, widget.form.k.value = "kmeans", 3
widget.start()
settle(lambda: widget.busy)
link = widget.object_map
lasso(link.panel, np.flatnonzero(widget.result.labels == 0))
settle(lambda: widget.object_map.busy)
viewer.reset_view()
link.panel.map.show_all()
settle(lambda: widget.object_map.busy)
shot(viewer, "field")
viewer.close()
