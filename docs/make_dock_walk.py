"""Screenshots of a user's walk through the one ticlust dock, each input from open to export: a real napari window
(1600×1000), the dock docked the way a user docks it (Plugins > ticlust), every step pressed in the dock, and the view
as the dock leaves it (nobody presses Home).

    xvfb-run -a -s "-screen 0 1600x1000x24" python docs/make_dock_walk.py [stack] [field] [channels] [points] [plate]
        [segment] [movie]

writes docs/walk_<input>_<step>.png (every walk when none is named):

* stack — the warped-glyphs sample (200 images): picked, st-kmeans run (live prototypes, then the aligned stack, the
  warp grid, the mosaic and the inspector), two clusters merged and Undo, the gallery exported;
* field — the nuclei sample and its labels: picked, st-kmeans on its objects (the field painted by cluster), an
  object clicked and marked as an outlier, its result and per-object table saved;
* channels — two stacks of one shape picked in order as one stack's channels, k-means on both channels;
* points — the landmark-shapes sample: shape-kmeans, a shape picked and moved, its result saved;
* plate — a generated plate's folder opened (File > Open: Extract offered), extracted, fitted on a sample, every
  object predicted, an object clicked (the inspector) and moved, the shares per well and the objects' table exported;
* segment — a field without masks: Segment nuclei (a Labels layer to correct), a K scan, Run on its objects;
* movie — a generated time-lapse and its tracked labels: Run on its objects, the Tracks layer coloured by state and
  the strip of states per track.
"""
import sys
import tempfile
import time
from pathlib import Path

import napari
import numpy as np
from qtpy.QtWidgets import QApplication

HERE = Path(__file__).resolve().parent
OUT = Path(tempfile.mkdtemp(prefix="ticlust_walk_"))


def settle(dock, seconds: float = 0.5, timeout: float = 600) -> None:
    """Turn the event loop until the dock is idle (its jobs, reads and drawings done), then ``seconds`` more."""
    app, end = QApplication.instance(), time.time() + timeout
    while time.time() < end and (dock.busy or not dock.ready):
        app.processEvents()
        time.sleep(0.01)
    end = time.time() + seconds
    while time.time() < end:
        app.processEvents()
        time.sleep(0.01)


def opened(*samples):
    """A 1600×1000 napari window with these samples opened and the dock docked; (viewer, dock)."""
    viewer = napari.Viewer(title="ticlust")
    viewer.window.resize(1600, 1000)
    for sample in samples:
        viewer.open_sample("napari-ticlust", sample)
    _, dock = viewer.window.add_plugin_dock_widget("napari-ticlust")
    settle(dock)
    return viewer, dock


def shot(viewer, dock, walk: str, step: str, tab: str) -> None:
    dock.show_tab(tab)
    settle(dock)
    path = HERE / f"walk_{walk}_{step}.png"
    viewer.screenshot(str(path), canvas_only=False)
    print("wrote", path.name, "·", dock.status.value[:110])


def to_item(viewer, dock, item: int) -> None:
    step = list(viewer.dims.current_step)
    step[0] = item
    viewer.dims.current_step = tuple(step)
    settle(dock)


def walk_stack() -> None:
    viewer, dock = opened("glyphs")
    layer = viewer.layers["glyphs"]
    layer.data, layer.metadata = layer.data[:200], {"labels": layer.metadata["labels"][:200]}
    dock.stack.pick("glyphs")
    shot(viewer, dock, "stack", "1_open", "Data")
    dock.form.method.value, dock.form.k.value = "st-kmeans", 4
    dock.start()
    settle(dock)
    to_item(viewer, dock, 10)
    shot(viewer, dock, "stack", "2_fit", "Fit")
    dock.curate.select_clusters(0, 1)
    dock.curate.merge()
    settle(dock)
    shot(viewer, dock, "stack", "3_curate", "Curate")
    dock.undo()
    dock.export_gallery(OUT / "gallery")
    dock.save_result(OUT / "glyphs.npz")
    shot(viewer, dock, "stack", "4_export", "Export")
    viewer.close()


def walk_field() -> None:
    viewer, dock = opened("nuclei")
    dock.field.pick("nuclei", labels="nuclei labels")
    shot(viewer, dock, "field", "1_open", "Data")
    dock.form.method.value, dock.form.k.value = "st-kmeans", 3
    dock.start()
    settle(dock)
    shot(viewer, dock, "field", "2_fit", "Fit")
    painted = viewer.layers["nuclei objects by cluster"]
    ys, xs = np.nonzero(painted.data == 11)
    dock.field.click_at((float(ys[len(ys) // 2]), float(xs[len(xs) // 2])))
    settle(dock)
    dock.curate.mark_outliers()
    settle(dock)
    shot(viewer, dock, "field", "3_inspect_curate", "Curate")
    dock.save_result(OUT / "nuclei.npz")
    viewer.layers.selection = {painted}
    viewer.layers.save(str(OUT / "objects.csv"), selected=True, plugin="napari-ticlust")
    dock.say(f"Saved nuclei.npz and its CSV; File > Save Selected Layers wrote the painted field's {dock.result.n} "
             "objects as objects.csv.")
    shot(viewer, dock, "field", "4_export", "Export")
    viewer.close()


def walk_channels() -> None:
    from ticlust.datasets.samples import glyphs_sample

    images, kinds = glyphs_sample(n_per_class=40, size=32, seed=3)
    stain = (0.3 + 0.2 * (kinds[:, None, None] % 2)) * np.ones_like(images) + 0.1 * np.roll(images, 6, axis=-1)
    viewer, dock = opened()
    viewer.add_image(images.astype(np.float32), name="shape", metadata={"labels": kinds})
    viewer.add_image(stain.astype(np.float32), name="stain", colormap="magenta", blending="additive")
    settle(dock)
    dock.use(dock.stack)
    dock.stack.pick("shape", "stain")
    shot(viewer, dock, "channels", "1_open", "Data")
    dock.form.method.value, dock.form.k.value = "kmeans", 4
    dock.start()
    settle(dock)
    to_item(viewer, dock, 5)
    shot(viewer, dock, "channels", "2_fit", "Fit")
    dock.save_result(OUT / "channels.npz")
    dock.say(f"Saved channels.npz; its CSV has mean_shape and mean_stain per item (channels "
             f"{', '.join(dock.result.config['channels'])}).")
    shot(viewer, dock, "channels", "3_export", "Export")
    viewer.close()


def walk_points() -> None:
    viewer, dock = opened("shapes")
    shot(viewer, dock, "points", "1_open", "Data")
    dock.form.method.value, dock.form.k.value = "shape-kmeans", 2
    dock.start()
    settle(dock)
    shot(viewer, dock, "points", "2_fit", "Fit")
    shapes = viewer.layers["shapes"]
    shapes.selected_data = set(np.flatnonzero(np.asarray(shapes.features["shape_id"]) == 7).tolist())
    dock.curate.to.value = 1 - int(dock.result.labels[7])
    dock.curate.move()
    settle(dock)
    shot(viewer, dock, "points", "3_curate", "Curate")
    viewer.close()


def walk_plate() -> None:
    from ticlust.datasets.nuclei import write_nuclei_plate
    from ticlust.plate import curate

    folder = write_nuclei_plate(OUT / "plate", fields=8, n=60, shape=(384, 384), seed=5).parent
    viewer = napari.Viewer(title="ticlust")
    viewer.window.resize(1600, 1000)
    viewer.open(str(folder), plugin="napari-ticlust")        # File > Open of the plate's folder: Extract offered
    dock = next(w for w in viewer.window.dock_widgets.values() if hasattr(w, "plate"))
    settle(dock)
    shot(viewer, dock, "plate", "1_open", "Data")
    dock.plate.extract.extract_button.native.click()
    settle(dock)
    dock.form.method.value, dock.form.k.value = "ai-kmeans", 3
    for name, value in dict(steps=10, affine_steps=10, max_iter=4, predict_steps=20).items():
        dock.form.param(name).value = value
    dock.plate.sample.value = 200
    dock.run_button.native.click()
    settle(dock)
    dock.plate.predict_run.button.native.click()
    settle(dock)
    shot(viewer, dock, "plate", "2_fit_predict", "Predict")
    plate = dock.plate
    field = plate.picture.field_index
    sample = set(curate.fit_sample(dock.result).tolist())
    obj = next(o for o in range(int(plate.starts[field]), int(plate.starts[field + 1])) if o not in sample)
    ys, xs = np.nonzero(plate.picture.values == obj - int(plate.starts[field]) + 1)
    plate.click_at((float(ys[len(ys) // 2]), float(xs[len(xs) // 2])))
    settle(dock)
    shot(viewer, dock, "plate", "3_inspect", "Curate")
    dock.curate.to.value = (int(plate.picture.table["cluster"][obj - int(plate.starts[field])]) + 1) % 3
    dock.curate.move()
    plate.repredict()
    settle(dock)
    shot(viewer, dock, "plate", "4_curate", "Curate")
    plate.shares.export(OUT / "shares.csv")
    plate.export.export_objects(OUT / "objects.csv")
    settle(dock)
    shot(viewer, dock, "plate", "5_shares_export", "Shares")
    viewer.close()


def walk_segment() -> None:
    viewer, dock = opened("nuclei")
    viewer.layers.remove("nuclei labels")                    # a field as a microscope gives it: no masks
    settle(dock)
    dock.use(dock.field)
    dock.field.pick("nuclei")
    dock.field.diameter.value = 15
    dock.field.segment_run.button.native.click()
    settle(dock)
    shot(viewer, dock, "segment", "1_segmented", "Data")
    dock.form.method.value = "kmeans"
    dock.choose_k.low.value, dock.choose_k.high.value = 2, 8
    dock.choose_k.run.button.native.click()
    settle(dock)
    dock.choose_k.use.native.click()
    dock.show_tab("Fit")
    dock.tabs.currentWidget().ensureWidgetVisible(dock.choose_k.plot)       # the tab scrolled down to the plot
    shot(viewer, dock, "segment", "2_scan_k", "Fit")
    dock.start()
    settle(dock)
    shot(viewer, dock, "segment", "3_fit", "Fit")
    viewer.close()


def walk_movie() -> None:
    import ticlust

    movie = ticlust.time_lapse(frames=40, cells=25, shape=(256, 256), seed=5)
    viewer, dock = opened()
    viewer.add_image(movie.movie, name="H2B")
    viewer.add_labels(movie.labels, name="tracked", visible=False)
    settle(dock)
    dock.use(dock.field)
    dock.field.pick("H2B", labels="tracked")
    dock.form.method.value, dock.form.k.value = "kmeans", 6
    dock.start()
    settle(dock)
    shot(viewer, dock, "movie", "1_tracks", "Tracks")
    viewer.close()


WALKS = {"stack": walk_stack, "field": walk_field, "channels": walk_channels, "points": walk_points,
         "plate": walk_plate, "segment": walk_segment, "movie": walk_movie}

if __name__ == "__main__":
    for name in sys.argv[1:] or list(WALKS):
        WALKS[name]()
