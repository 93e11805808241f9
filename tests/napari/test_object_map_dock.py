"""The object map docked with the ticlust dock, in a real napari viewer: drawn from a
store's predictions and from a single-field result; a lasso gives the selection's gallery, rings its objects on the
field and counts them; a move from the map recolours it and, re-predicted, changes the CSV's cluster, and Undo
restores both; a click on a point opens its field and inspector, a click on the field rings the object on the map;
after a Refine the map says it is out of date and Refresh re-predicts; and one sentence for each bad input (no
predictions, no map, an empty selection, a column of one value)."""
import shutil

import numpy as np
import pandas as pd
import pytest

napari = pytest.importorskip("napari")
pytest.importorskip("pyqtgraph")
from qtpy.QtWidgets import QWidget  # noqa: E402

import ticlust  # noqa: E402
from ticlust._napari.map_panel import NOTHING_SELECTED  # noqa: E402
from ticlust.plate import curate  # noqa: E402
from ticlust.plate.run import predict_store  # noqa: E402

pytestmark = pytest.mark.gui


@pytest.fixture(scope="module")
def made(tmp_path_factory, kmeans_plate):
    """A generated 6-field plate (3 wells × 2 sites, 14 nuclei a field), its store, and kmeans fitted on 40 objects."""
    folder = tmp_path_factory.mktemp("mapdock")
    _, store, result = kmeans_plate(folder, fields=6, n=14, size=192, seed=4, sample=40)
    return folder, store, result


@pytest.fixture
def predicted(made, tmp_path, predicted_copy):
    """A fresh copy of the store with the result's predictions, and the result file."""
    _, store, result = made
    copy = predicted_copy(store, result, tmp_path / "p.zarr")
    return copy, result.save(tmp_path / "km.npz")


def settle(qtbot, panel, timeout=120_000) -> None:
    qtbot.waitUntil(lambda: not panel.busy and not panel.object_map.busy, timeout=timeout)


def box_around(xy: np.ndarray, rows: np.ndarray):
    lo, hi = xy[rows].min(0) - 1e-3, xy[rows].max(0) + 1e-3
    return float(lo[0]), float(lo[1]), float(hi[0]), float(hi[1])


def test_plate_map_lasso_gallery_ring_move_and_undo(predicted, plate_dock, qtbot, tmp_path):
    store, km = predicted
    viewer, panel = plate_dock(store.path, km)
    mp = panel.object_map.panel
    table = pd.read_parquet(store.path / "predictions.parquet")
    assert len(mp.map.xy) == len(store) and mp.map.drawn_as == "points"
    np.testing.assert_array_equal(mp.map.xy[:, 0], table["map_x"].to_numpy(np.float32))
    assert {"cluster", "well", "score", "margin"} <= set(mp.map.columns.columns)
    # a lasso around the first field's objects: a gallery left of the field, rings on it, counts per cluster and well
    first = np.flatnonzero(table["field_index"].to_numpy() == panel.plate.picture.field_index)
    x0, y0, x1, y1 = box_around(mp.map.xy, first[:5])
    rows = mp.map.select_polygon([(x0, y0), (x1, y0), (x1, y1), (x0, y1)])
    settle(qtbot, panel)
    assert set(first[:5]) <= set(rows.tolist())
    names = panel.plate.map.names()
    gallery = viewer.layers[names["gallery"]]
    field = viewer.layers[panel.plate.names()["field"]]
    assert gallery.extent.world[1][-1] < field.extent.world[0][-1]          # left of the field
    ring = viewer.layers[names["ring"]]
    on_field = rows[(rows >= first[0]) & (rows <= first[-1])] - first[0] + 1
    assert set(np.unique(ring.data)[1:].tolist()) == set(on_field.tolist())
    assert mp.counts.text().startswith(f"{rows.size} selected · cluster ") and " · well " in mp.counts.text()
    # Move from the map: the map's colours follow at once, and Undo restores them
    target = int((table["cluster"][rows[0]] + 1) % 3)
    before = mp.map.columns["cluster"].to_numpy().copy()
    mp.to.setValue(target)
    edited = mp.act("move")
    settle(qtbot, panel)
    assert edited is panel.result and (mp.map.columns["cluster"].to_numpy()[rows] == target).all()
    assert mp.counts.text().startswith(f"{rows.size} selected · cluster {target}: {rows.size} · well ")
    assert mp.map.legend.text().startswith("cluster") and not mp.map.is_stale
    panel.undo()
    settle(qtbot, panel)
    np.testing.assert_array_equal(mp.map.columns["cluster"].to_numpy(), before)
    # moved again and re-predicted: the CSV has it and the map (read again) too; Undo says the map is out of date
    # until Refresh re-predicts: the CSV and the map as they were
    mp.act("move")
    panel.plate.repredict()
    settle(qtbot, panel)
    panel.plate.export.export_objects(tmp_path / "moved.csv")
    settle(qtbot, panel)
    assert (pd.read_csv(tmp_path / "moved.csv")["cluster"].to_numpy()[rows] == target).all()
    assert (mp.map.columns["cluster"].to_numpy()[rows] == target).all() and mp.map.selection.size == 0
    panel.undo()
    settle(qtbot, panel)
    assert mp.map.is_stale and "Re-predict" in mp.map.banner_label.text()
    mp.map.refresh_button.click()
    settle(qtbot, panel)
    assert not mp.map.is_stale
    np.testing.assert_array_equal(mp.map.columns["cluster"].to_numpy(), before)
    panel.plate.export.export_objects(tmp_path / "undone.csv")
    settle(qtbot, panel)
    np.testing.assert_array_equal(pd.read_csv(tmp_path / "undone.csv")["cluster"], table["cluster"])


def test_click_a_point_opens_its_field_and_inspector_a_field_click_rings_it(predicted, plate_dock, qtbot):
    store, km = predicted
    viewer, panel = plate_dock(store.path, km)
    mp = panel.object_map.panel
    last = len(store) - 1                                  # an object of the last field (the first one is shown)
    x, y = map(float, mp.map.xy[last])
    mp.map.view.setRange(xRange=(x - 0.5, x + 0.5), yRange=(y - 0.5, y + 0.5), padding=0)
    assert mp.map.click_at(x, y) == last
    settle(qtbot, panel)
    field = int(np.searchsorted(panel.plate.starts, last, side="right") - 1)
    assert panel.plate.picture.field_index == field and panel.plate.picked_objects == [last]
    assert panel.inspector.shown == last and panel.status.value.startswith(f"object {last} (")
    assert mp.map.highlighted.tolist() == [last]
    # the field read (again) after the object was inspected leaves the object's line said (a map click on a plate
    # reads the well's first field, then this one: the second read could come after the inspector's line)
    said = panel.status.value
    panel.plate.show_field(field)
    settle(qtbot, panel)
    assert panel.status.value == said
    # a click on an object of the field rings it on the map
    objects = viewer.layers[panel.plate.names()["objects"]]
    ys, xs = np.nonzero(objects.data == 2)                 # the field's second object
    panel.plate.click_at((float(ys[len(ys) // 2]), float(xs[len(xs) // 2])))
    settle(qtbot, panel)
    assert mp.map.highlighted.tolist() == [int(panel.plate.starts[field]) + 1]


def test_refine_makes_the_map_say_it_is_out_of_date_refresh_repredicts(predicted, plate_dock, qtbot):
    store, km = predicted
    viewer, panel = plate_dock(store.path, km)
    mp = panel.object_map.panel
    sample = curate.fit_sample(panel.result)
    mp.map.select_box(*box_around(mp.map.xy, sample[:3]))
    mp.to.setValue(2)
    mp.act("split_off")                                    # a new cluster from the map, then Refine
    settle(qtbot, panel)
    assert panel.result.k == 4 and not mp.map.is_stale and mp.to.maximum() == 3
    assert (mp.map.columns["cluster"].to_numpy()[mp.map.selection] == 3).all()
    panel.curate.refine()
    settle(qtbot, panel)
    assert panel.result.state is not None and mp.map.is_stale
    assert "Re-predict" in mp.map.banner_label.text() and not mp.map.refresh_button.isHidden()
    mp.map.refresh_button.click()
    settle(qtbot, panel)
    assert not mp.map.is_stale and panel.plate.predicted is panel.result
    table = pd.read_parquet(store.path / "predictions.parquet")     # the map was read again from the new predictions
    np.testing.assert_array_equal(mp.map.columns["cluster"], table["cluster"])
    np.testing.assert_array_equal(mp.map.xy, table[["map_x", "map_y"]].to_numpy(np.float32))
    assert table["cluster"].max() == 3


def test_a_store_predicted_shows_its_map_without_resizing_naparis_canvas(made, predicted, make_napari_viewer,
                                                                         plate_dock, qtbot):
    """The map's room is kept while it is hidden (a store without predictions) and the docks' least height leaves
    room in a 1000-pixel window: showing the map does not resize the window, so napari's canvas is not drawn again
    at a new size (a tenth of a second or more of the GUI thread)."""
    _, store, _ = made
    copy, _ = predicted
    viewer = make_napari_viewer(show=True)                     # laid out on the screen, as a user sees it
    viewer.window.resize(1600, 1000)
    viewer, panel = plate_dock(viewer=viewer)
    panel.plate.open_store(store.path)
    settle(qtbot, panel)
    mp = panel.object_map.panel
    assert mp.map.isHidden()
    canvas = next(w for w in panel.native.window().findChildren(QWidget) if type(w).__name__ == "CanvasBackendDesktop")
    size = (canvas.width(), canvas.height())
    panel.plate.open_store(copy.path)
    settle(qtbot, panel)
    qtbot.wait(100)
    assert not mp.map.isHidden() and len(mp.map.xy) == len(copy)
    assert (canvas.width(), canvas.height()) == size


def test_bad_input_is_one_sentence_each(made, predicted, plate_dock, qtbot, tmp_path):
    folder, store, result = made
    # a store without predictions: predict first
    viewer, panel = plate_dock(store.path)
    mp = panel.object_map.panel
    assert mp.message.text().startswith("No predictions yet: predict the store first")
    assert len(mp.map.xy) == 0 and mp.compute_button.isHidden() and mp.map.isHidden()
    # an empty selection: nothing to move
    copy, km = predicted
    panel.plate.open_store(copy.path)
    settle(qtbot, panel)
    panel.load_result(km)
    settle(qtbot, panel)
    assert mp.map.select_polygon([]).size == 0 and mp.act("move") is None
    assert mp.message.text() == NOTHING_SELECTED and mp.counts.text() == ""
    # a column of one value: one colour, said in the legend
    mp.map.update_columns(mp.map.columns.assign(plate="P1"))
    mp.map.color_by("plate")
    qtbot.waitUntil(lambda: not mp.map.busy)
    assert "one colour" in mp.map.legend.text() and "plate = P1" in mp.map.legend.text()
    # predictions made with a result saved before maps: the map offers to compute one, then predicts again
    old = ticlust.open_objects(shutil.copytree(store.path, tmp_path / "old.zarr"))
    from ticlust.kernels.embedding import EXTRAS
    import dataclasses
    plain = dataclasses.replace(result, extras={k: v for k, v in result.extras.items() if k not in EXTRAS},
                                embedding=None, map=None)
    predict_store(plain, old, device="cpu")
    panel.plate.open_store(old.path)
    settle(qtbot, panel)
    assert mp.message.text().startswith("The store's predictions have no map places")
    assert not mp.compute_button.isHidden() and mp.map.isHidden()        # no points of the store before
    mp.compute_button.click()
    settle(qtbot, panel)
    assert mp.message.text().startswith("Load the result the store was predicted with")
    panel.load_result(plain.save(tmp_path / "plain.npz"))
    settle(qtbot, panel)
    mp.compute_button.click()
    settle(qtbot, panel)
    assert len(mp.map.xy) == len(old) and mp.compute_button.isHidden()
    assert np.isfinite(pd.read_parquet(old.path / "predictions.parquet")["map_x"]).all()


# ---- a single-field or single-stack result -------------------------------------------------------------------
def test_single_field_result_map_lasso_ring_move_undo_and_clicks(dock, run_to_end, make_napari_viewer, qtbot, tmp_path):
    viewer = make_napari_viewer()
    viewer.open_sample("napari-ticlust", "nuclei")
    widget = dock(viewer)
    widget.field.pick("nuclei", labels="nuclei labels")
    widget.form.method.value, widget.form.k.value = "kmeans", 3
    run_to_end(qtbot, widget, 120_000)
    result, mp = widget.result, widget.object_map.panel
    np.testing.assert_array_equal(mp.map.xy, result.map.astype(np.float32))
    assert {"cluster", "score", "margin", "label"} <= set(mp.map.columns.columns)
    # a box around five objects: their gallery left of the field, rings on the painted field, counts per cluster
    rows = mp.map.select_box(*box_around(mp.map.xy, np.arange(5)))
    qtbot.waitUntil(lambda: not widget.object_map.busy)
    assert set(range(5)) <= set(rows.tolist())
    gallery = viewer.layers["nuclei objects map selection"]
    assert gallery.extent.world[1][-1] < viewer.layers["nuclei"].extent.world[0][-1]
    ring = viewer.layers["nuclei objects map selection on field"]
    assert set(np.unique(ring.data)[1:].tolist()) == set((rows + 1).tolist())
    assert mp.counts.text().startswith(f"{rows.size} selected · cluster ")
    # Move from the map: the result, the map's colours and the saved CSV follow; Undo restores them
    target = int((result.labels[rows[0]] + 1) % 3)
    mp.to.setValue(target)
    moved = mp.act("move")
    qtbot.waitUntil(lambda: not widget.object_map.busy)
    assert widget.result is moved and (moved.labels[rows] == target).all()
    assert (mp.map.columns["cluster"].to_numpy()[rows] == target).all()
    widget.save_result(tmp_path / "moved.npz")
    assert (pd.read_csv(tmp_path / "moved.csv")["cluster"].to_numpy()[rows] == target).all()
    widget.undo()
    qtbot.waitUntil(lambda: not widget.object_map.busy)
    np.testing.assert_array_equal(mp.map.columns["cluster"], result.labels)
    widget.save_result(tmp_path / "undone.npz")
    np.testing.assert_array_equal(pd.read_csv(tmp_path / "undone.csv")["cluster"], result.labels)
    # a click on a point puts its object under the slider; a click on the field rings it on the map
    item = result.n - 2
    x, y = map(float, mp.map.xy[item])
    mp.map.view.setRange(xRange=(x - 0.5, x + 0.5), yRange=(y - 0.5, y + 0.5), padding=0)
    assert mp.map.click_at(x, y) == item and viewer.dims.current_step[0] == item
    labels = viewer.layers["nuclei labels"]
    ys, xs = np.nonzero(labels.data == widget.field.table["label"][3])
    assert widget.field.click_at((0, float(ys[len(ys) // 2]), float(xs[len(xs) // 2]))) == 3
    assert mp.map.highlighted.tolist() == [3]


def test_single_stack_map_and_an_old_result_offers_to_compute_one(dock, run_to_end, make_napari_viewer, qtbot,
                                                                  tmp_path):
    import dataclasses

    from ticlust._napari import samples
    from ticlust.kernels.embedding import EXTRAS

    viewer = make_napari_viewer()
    viewer.add_image(samples.digits()[0][0][:120], name="digits")
    widget = dock(viewer)
    widget.form.method.value, widget.form.k.value = "kmeans", 4
    run_to_end(qtbot, widget, 120_000)
    mp = widget.object_map.panel
    assert len(mp.map.xy) == 120
    rows = mp.map.select_box(*box_around(mp.map.xy, np.arange(3)))
    qtbot.waitUntil(lambda: not widget.object_map.busy)
    gallery = viewer.layers["digits map selection"]
    assert gallery.extent.world[1][-1] < viewer.layers["digits"].extent.world[0][-1]
    assert "digits map selection on field" not in viewer.layers and rows.size >= 3
    mp.to.setValue(3)
    off = mp.act("split_off")
    assert off.k == 5 and mp.to.maximum() == 4 and (widget.result.labels[rows] == 4).all()
    assert widget.curate.refine() is not None                        # while a job runs, the map edits nothing
    assert mp.act("move") is None and mp.message.text().startswith("Not done: A job is running in the dock")
    qtbot.waitUntil(lambda: not widget.busy, timeout=60_000)
    assert widget.result.state is not None and widget.result.k == 5 and len(mp.map.xy) == 120
    # a result saved before maps were made loads; the map offers to compute one
    old = dataclasses.replace(widget.result, extras={k: v for k, v in widget.result.extras.items()
                                                     if k not in EXTRAS}, embedding=None, map=None)
    widget.load_result(old.save(tmp_path / "old.npz"))
    assert mp.message.text().startswith("This result has no object map") and not mp.compute_button.isHidden()
    assert mp.map.isHidden()                                         # not the points of the result before
    mp.compute_button.click()
    qtbot.waitUntil(lambda: not widget.object_map.busy, timeout=60_000)
    assert widget.result.map is not None and len(mp.map.xy) == 120 and mp.compute_button.isHidden()
    assert not mp.map.isHidden()


@pytest.mark.parametrize("closed", ["dock", "viewer"])
def test_the_maps_worker_pool_ends_with_the_ticlust_dock(dock, make_napari_viewer, qtbot, closed):
    """The ticlust dock closed (its close button, or the viewer's window): its object map's dock goes and the map's
    worker pool is shut down."""
    from qtpy.QtWidgets import QDockWidget

    viewer = make_napari_viewer()
    widget = dock(viewer)
    pool = widget.object_map.ensure().map._pool
    assert widget.object_map.title in viewer.window._dock_widgets
    if closed == "dock":
        dock = widget.native
        while not isinstance(dock, QDockWidget):
            dock = dock.parent()
        dock.destroyOnClose()                                     # what the dock's close button does
        assert widget.object_map.panel is None and widget.object_map.title not in viewer.window._dock_widgets
    else:
        viewer.close()
    qtbot.wait(50)
    with pytest.raises(RuntimeError, match="after shutdown"):
        pool.submit(print)


def test_an_edit_works_out_the_renumbering_of_the_predictions_once(predicted, plate_dock, qtbot, monkeypatch):
    """A merge in the dock: the field's painting, the map's colours and banner and the status line all need the
    store's predictions renumbered to the edited result; the edits are replayed once for them all."""
    store, km = predicted
    viewer, panel = plate_dock(store.path, km)
    calls = []
    replay = curate.cluster_map
    monkeypatch.setattr(curate, "cluster_map", lambda *a: calls.append(1) or replay(*a))
    panel.apply_edit(curate.merge(panel.result, 0, 1), "Merged")
    settle(qtbot, panel)
    assert len(calls) == 1 and panel.object_map.panel.map.banner.isHidden()
    assert panel.object_map.panel.map.columns["cluster"].max() == 1                # the map, renumbered
    assert viewer.layers[panel.plate.names()["objects"]].features["cluster"].max() == 1  # the field, renumbered
