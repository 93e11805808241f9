"""A plate in napari (issue "Plates and a million objects", item 6): the plate panel and the store reader with a
real viewer, on a small generated plate (2 wells × 2 fields × 20 nuclei of 256×256) extracted, fitted with
kmeans on the store and predicted, once per module; and the napari-free pieces (ticlust.plate.view) on it."""
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import tifffile

napari = pytest.importorskip("napari")

import ticlust  # noqa: E402
from ticlust.plate import view as plate_view  # noqa: E402
from ticlust._napari import layers as L  # noqa: E402
from ticlust._napari import plate as plate_source, plate_field, plate_parts, reader  # noqa: E402
from ticlust.events import Progress, drain  # noqa: E402
from ticlust.plate.run import fit_store, predict_store  # noqa: E402

pytestmark = pytest.mark.gui


@pytest.fixture(scope="module")
def plate(tmp_path_factory, kmeans_plate):
    """(manifest, store with predictions, the kmeans result file, the predictions table)."""
    folder = tmp_path_factory.mktemp("plate")
    manifest, store, result = kmeans_plate(folder, fields=4, n=20, size=256, seed=3)
    result.save(folder / "km.npz")
    predict_store(folder / "km.npz", store, device="cpu")
    return manifest, store, folder / "km.npz", plate_view.read_predictions(store)


@pytest.fixture
def panel(plate, plate_dock):
    """A viewer with the store opened the way a user opens it (File > Open on the folder: the store reader)."""
    _, store, _, _ = plate
    assert reader.get_store_reader(str(store.path)) is reader.read_store
    viewer, docked = plate_dock(file=store.path)
    assert docked.plate.store is not None
    return viewer, docked


def settle(qtbot, panel) -> None:
    """Wait until the panel's workers (open, field, load, apply) are done and their results drawn."""
    qtbot.waitUntil(lambda: not panel.busy, timeout=120_000)


def pick(qtbot, panel, field_index: int) -> None:
    panel.plate.pick(field_index)
    settle(qtbot, panel)


def field_file(manifest, store, field_index: int):
    return tifffile.imread(manifest.parent / store.fields["image"][field_index])


# ---- napari-free ---------------------------------------------------------------------------------
def test_each_objects_field_and_place_agree_with_the_fields_rows(plate):
    """``field_starts``, ``field_span`` and ``object_fields`` (which field a store object is on, its place there)
    against each field's rows; a field without objects owns none (its start is the next field's)."""
    _, store, _, _ = plate
    starts = plate_view.field_starts(store)
    assert starts[0] == 0 and starts[-1] == len(store) and len(starts) == len(store.fields) + 1
    for f in range(len(store.fields)):
        rows = plate_view.field_rows(store, f)
        fields, places = plate_view.object_fields(starts, rows)
        assert (fields == f).all() and places.tolist() == list(range(len(rows)))
        assert plate_view.field_span(starts, f) == (rows[0], rows[-1] + 1)
    fields, places = plate_view.object_fields(np.array([0, 3, 3, 5]), np.arange(5))
    assert fields.tolist() == [0, 0, 0, 2, 2] and places.tolist() == [0, 1, 2, 0, 1]
    assert tuple(map(int, plate_view.object_fields(starts, starts[1]))) == (1, 0)


def test_shares_sum_to_one_per_well_and_their_csv_round_trips(plate, tmp_path):
    _, store, _, predictions = plate
    shares = plate_view.cluster_shares(predictions, "well")
    assert shares["well"].tolist() == ["A01", "A02"]
    clusters = [c for c in shares.columns if c.startswith("cluster_")]
    assert clusters == ["cluster_0", "cluster_1", "cluster_2"]
    assert np.allclose(shares[clusters].sum(axis=1), 1.0)
    for _, row in shares.iterrows():     # the counts behind each share
        mine = predictions[predictions["well"] == row["well"]]
        assert row["objects"] == len(mine)
        assert np.isclose(row["cluster_1"], (mine["cluster"] == 1).mean())
    out = plate_view.write_shares(shares, tmp_path / "shares.csv")
    assert pd.read_csv(out).equals(shares)
    assert not list(tmp_path.glob("*.partial"))
    with pytest.raises(ticlust.InputError, match="no column 'plate'"):
        plate_view.cluster_shares(predictions, "plate")
    with pytest.raises(ticlust.InputError, match="no predictions yet"):
        plate_view.cluster_shares(None, "well")
    with pytest.raises(ticlust.InputError, match="folder does not exist"):
        plate_view.write_shares(shares, tmp_path / "nowhere" / "s.csv")


def test_gallery_sample_is_seeded_and_spread_over_the_fields(plate):
    _, _, _, predictions = plate
    picked = plate_view.gallery_sample(predictions, per_cluster=4, seed=1)
    assert picked.keys() == {0, 1, 2}
    assert {c: v.tolist() for c, v in picked.items()} == \
        {c: v.tolist() for c, v in plate_view.gallery_sample(predictions, per_cluster=4, seed=1).items()}
    for c, members in picked.items():
        assert (predictions["cluster"].to_numpy()[members] == c).all() and len(set(members)) == len(members)
        fields = predictions["field_index"].to_numpy()[members]
        own = predictions.loc[predictions["cluster"] == c, "field_index"].nunique()
        assert len(set(fields)) == min(len(members), own)      # one object per field before a second
    with pytest.raises(ticlust.InputError, match="at least 1"):
        plate_view.gallery_sample(predictions, per_cluster=0)


def test_object_values_paint_each_kept_object_by_its_row():
    labels = np.array([[0, 5, 5], [7, 7, 0], [9, 0, 0]])
    values = plate_view.object_values(labels, label_ids=[7, 5], frames=[0, 0])      # label 9 was left out
    assert values.tolist() == [[0, 2, 2], [1, 1, 0], [0, 0, 0]]
    series = np.stack([labels, labels])
    values = plate_view.object_values(series, label_ids=[5, 5, 9], frames=[0, 1, 1])
    assert values[0].tolist() == [[0, 1, 1], [0, 0, 0], [0, 0, 0]]
    assert values[1].tolist() == [[0, 2, 2], [0, 0, 0], [3, 0, 0]]


def test_assigning_a_field_gives_the_stores_predictions(plate):
    _, store, km, predictions = plate
    result = ticlust.load_result(km)
    events = plate_view.assign_field(result, store, 2, device="cpu", block=7)
    steps = []
    while True:
        try:
            steps.append(next(events))
        except StopIteration as stop:
            columns = stop.value
            break
    rows = plate_view.field_rows(store, 2)
    assert all(isinstance(e, Progress) for e in steps) and steps[-1].step == steps[-1].total == len(rows)
    assert len(steps) == -(-len(rows) // 7)
    assert columns["cluster"].tolist() == predictions["cluster"].to_numpy()[rows].tolist()
    other = ticlust.fit(np.random.default_rng(0).random((12, 20, 20)), "kmeans", k=2, device="cpu")
    with pytest.raises(ticlust.InputError, match="fitted on 20×20 crops"):
        drain(plate_view.assign_field(other, store, 0))
    for bad in (4, -1, "2", True, 1.0):
        with pytest.raises(ticlust.InputError, match="not one of the store's fields: give a number from 0 to 3"):
            drain(plate_view.assign_field(result, store, bad))


def test_a_result_loaded_in_a_fresh_process_keeps_its_fitted_state(plate):
    """ticlust.load_result alone, in a process that has not imported the methods, drops the fitted state (the
    registry of state types is empty) and the result then reads as edited by hand: load_store_result must not."""
    _, store, km, _ = plate
    code = ("import sys; from ticlust.plate.view import load_store_result; from ticlust import open_objects; "
            "r = load_store_result(sys.argv[1], open_objects(sys.argv[2])); print(r.state is not None)")
    out = subprocess.run([sys.executable, "-c", code, str(km), str(store.path)], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(Path(ticlust.__file__).parents[1])})
    assert out.returncode == 0 and out.stdout.strip() == "True", out.stderr[-2000:]


# ---- the panel ---------------------------------------------------------------------------------
def test_opening_a_store_shows_its_first_field_gallery_and_shares(plate, panel, tmp_path, qtbot):
    manifest, store, _, predictions = plate
    viewer, panel = panel
    assert {"s field", "s objects", "s gallery", "s gallery labels"} <= {layer.name for layer in viewer.layers}
    assert panel.plate.well.choices == ("A01", "A02") and panel.plate.well.value == "A01"
    assert [value for value in panel.plate.field.choices] == [0, 1]
    assert np.array_equal(viewer.layers["s field"].data, field_file(manifest, store, 0))
    assert f"{len(store)} objects, 4 fields in 2 wells; predicted" in panel.plate.summary.value
    assert panel.plate.shares.group_by.value == "well" and panel.plate.shares.table is not None
    assert panel.plate.shares.table.equals(plate_view.cluster_shares(predictions, "well"))
    # the gallery: each cluster's row holds crops of that cluster, read from the store
    gallery = viewer.layers["s gallery"]
    picked, columns = gallery.metadata["ticlust_gallery"], gallery.metadata["columns"]
    assert sorted(picked) == [0, 1, 2] and all(len(v) for v in picked.values())
    scene = L.Scene(store.size, store.size, 3 * columns)
    origins = scene.tile_origins(columns)
    for c, members in picked.items():
        assert (predictions["cluster"].to_numpy()[members] == c).all()
        for j, obj in enumerate(members):
            y, x = origins[c * columns + j]
            assert np.allclose(gallery.data[y:y + store.size, x:x + store.size], store.crops[int(obj)])
    assert gallery.translate[0] > viewer.layers["s field"].extent.world[1][0]      # under the field
    # the shares per another column, drawn in the clusters' colours, and their export
    panel.plate.shares.group_by.value = "site"
    settle(qtbot, panel)                                     # counted in a worker
    assert panel.plate.shares.table["site"].tolist() == [0, 1]
    assert np.allclose(panel.plate.shares.table.filter(like="cluster_").sum(axis=1), 1.0)
    out = panel.plate.shares.export(tmp_path / "per_site.csv")
    assert pd.read_csv(out).equals(plate_view.cluster_shares(predictions, "site"))
    assert "per_site.csv" in panel.status.value
    shot = panel.plate.shares.plot.grab().toImage()
    colours = {shot.pixelColor(x, y).name() for x in range(0, shot.width(), 2) for y in range(0, shot.height(), 2)}
    from qtpy.QtGui import QColor

    drawn = {QColor.fromRgbF(*map(float, L.cluster_color(c)[:3])).name() for c in range(3)}
    assert drawn <= colours


def test_a_picked_field_is_painted_by_cluster_and_apply_result_agrees(plate, panel, qtbot):
    manifest, store, km, predictions = plate
    viewer, panel = panel
    pick(qtbot, panel, 3)
    assert panel.plate.well.value == "A02" and panel.plate.field.value == 3
    assert np.array_equal(viewer.layers["s field"].data, field_file(manifest, store, 3))
    objects = viewer.layers["s objects"]
    rows = plate_view.field_rows(store, 3)
    labels = tifffile.imread(manifest.parent / store.fields["labels"][3])
    for i, row in enumerate(rows):
        on = objects.data == i + 1
        assert on.any() and (labels[on] == store.table["label"].iloc[row]).all()     # the object's own pixels
        expected = L.cluster_color(int(predictions["cluster"].iloc[row]))
        assert np.allclose(objects.colormap.map(np.array([i + 1]))[0], expected, atol=1e-6)
    assert objects.features["cluster"].tolist() == predictions["cluster"].iloc[rows].tolist()
    assert "painted by cluster" in panel.status.value
    # Apply result on another field: the same clusters as the store's predictions, painted when done
    pick(qtbot, panel, 1)
    panel.load_result(km)
    settle(qtbot, panel)
    assert panel.result is not None and panel.plate.apply_run.button.enabled and "Loaded km.npz" in panel.status.value
    worker = panel.plate.apply()
    assert worker is not None and panel.plate.apply_run.button.text == "Cancel"
    settle(qtbot, panel)
    rows = plate_view.field_rows(store, 1)
    assert panel.plate.applied[0] == 1
    assert panel.plate.applied[1]["cluster"].tolist() == predictions["cluster"].to_numpy()[rows].tolist()
    assert viewer.layers["s objects"].features["cluster"].tolist() == panel.plate.applied[1]["cluster"].tolist()
    assert "km.npz applied" in panel.status.value and panel.progress.value == panel.progress.max
    pick(qtbot, panel, 0)        # another field shows the store's predictions; back on field 1, the applied ones
    assert "the store's predictions" in panel.status.value
    pick(qtbot, panel, 1)
    assert "km.npz applied" in panel.status.value


def held_after_first_step(assign, go_on):
    """The real assignment ``assign`` (5 objects a step), held after its first step until ``go_on`` is set (the
    test cancels meanwhile)."""
    def held(*args, **kwargs):
        events = assign(*args, **kwargs, block=5)
        yield next(events)
        go_on.wait(10)
        return (yield from events)
    return held


def test_cancelled_apply_changes_nothing(plate, panel, qtbot, monkeypatch):
    _, _, km, _ = plate
    viewer, panel = panel
    go_on = threading.Event()
    monkeypatch.setattr(plate_source, "assign_field", held_after_first_step(plate_view.assign_field, go_on))
    pick(qtbot, panel, 2)
    panel.load_result(km)
    settle(qtbot, panel)
    before = viewer.layers["s objects"].colormap
    panel.plate.apply()
    qtbot.waitUntil(lambda: panel.progress.value > 0, timeout=30_000)
    panel.plate.apply_run.cancel()
    go_on.set()
    settle(qtbot, panel)
    assert panel.plate.applied is None and viewer.layers["s objects"].colormap is before
    assert panel.status.value == "Cancelled: nothing was changed." and panel.plate.apply_run.button.text == "Apply result"


def test_bad_input_is_one_sentence_in_the_panel(plate, panel, tmp_path, qtbot):
    manifest, store, _, _ = plate
    viewer, panel = panel
    assert reader.get_store_reader(str(tmp_path)) is None and reader.get_store_reader([str(store.path)]) is None
    panel.plate.open_store(tmp_path)
    settle(qtbot, panel)
    assert "is not an object store" in panel.status.value
    assert panel.plate.store is store or panel.plate.store.path == store.path            # the open store stays
    other = tmp_path / "other.npz"
    ticlust.fit(np.random.default_rng(0).random((12, 20, 20)), "kmeans", k=2, device="cpu").save(other)
    panel.load_result(other)
    settle(qtbot, panel)
    assert panel.result is None and not panel.plate.apply_run.button.enabled and "fitted on 20×20 crops" in panel.status.value
    image = manifest.parent / store.fields["image"][1]
    moved = image.with_name("moved.tif")
    image.rename(moved)
    try:
        pick(qtbot, panel, 1)
        assert "There is no image file at" in panel.status.value and "s field" not in viewer.layers
    finally:
        moved.rename(image)
    pick(qtbot, panel, 0)
    assert "s field" in viewer.layers


def test_a_plate_without_wells_or_predictions_is_pickable_and_painted_by_object(plate, plate_dock, tmp_path, qtbot):
    manifest, _, _, _ = plate
    fresh = ticlust.extract(manifest.parent, tmp_path / "fresh.zarr")       # the folder: no manifest columns
    viewer, panel = plate_dock(fresh.path)
    assert panel.plate.store is not None and panel.plate.store.path == fresh.path
    assert not panel.plate.has_wells and panel.plate.well.choices == () and list(panel.plate.field.choices) == [0, 1, 2, 3]
    assert panel.plate.shares.group_by.choices == ("image",)
    pick(qtbot, panel, 2)
    assert np.array_equal(viewer.layers["fresh field"].data, field_file(manifest, fresh, 2))
    assert "no predictions yet" in panel.plate.summary.value and "painted by object" in panel.status.value
    assert not L.drawn(viewer, "fresh gallery") and panel.plate.shares.table is None and not panel.plate.shares.export_button.enabled
    assert not viewer.layers["fresh gallery"].visible         # made when the store opened, hidden until predicted
    objects = viewer.layers["fresh objects"]
    assert objects.data.max() == len(plate_view.field_rows(fresh, 2)) and "cluster" not in objects.features


# ---- Apply result on an image and its labels layer (no store) ------------------------------------------
def field_layers(manifest, store, field_index: int):
    """A field's image and its labels as a user has them in napari (e.g. Cellpose's), read from the plate's files."""
    return (field_file(manifest, store, field_index),
            tifffile.imread(manifest.parent / store.fields["labels"][field_index]))


def clusters_by_label(labels, clusters) -> dict:
    return dict(zip(np.asarray(labels).tolist(), np.asarray(clusters).tolist()))


def test_assign_objects_cuts_as_the_result_was_fitted(plate):
    """A result fitted on a store cuts new objects with the store's options and crop size; one fitted on a field's
    objects (the route's defaults) cuts them as the route did: both give back the clusters of the objects fitted."""
    manifest, store, km, predictions = plate
    result = ticlust.load_result(km)
    options = {k: store.options[k] for k in plate_view.ROUTE_KEYS}
    assert plate_view.route_options(result) == {"size": store.size, **options}
    image, labels = field_layers(manifest, store, 2)
    events = plate_view.assign_objects(result, image, labels, device="cpu", block=6)
    steps = []
    while True:
        try:
            steps.append(next(events))
        except StopIteration as stop:
            table, columns = stop.value
            break
    assert steps[0].stage == "cutting objects" and steps[-1].step == steps[-1].total == len(table["label"])
    rows = plate_view.field_rows(store, 2)
    assert clusters_by_label(table["label"], columns["cluster"]) == \
        clusters_by_label(store.table["label"].iloc[rows], predictions["cluster"].iloc[rows])
    assert set(columns) >= {"cluster", "score", "runner_up", "runner_up_score"}
    assert image.flags.writeable and np.array_equal(image, field_layers(manifest, store, 2)[0])     # read, not changed

    from ticlust.objects.route import objects_route
    route = objects_route(image, labels, "kmeans")
    own = ticlust.fit(route.items, "kmeans", k=3, seed=0, device="cpu")
    assert plate_view.route_options(own)["size"] == route.items.shape[1]
    _, again = drain_value(plate_view.assign_objects(own, image, labels, device="cpu"))
    assert again["cluster"].tolist() == own.labels.tolist()


def drain_value(events):
    """A generator's return value, its events dropped."""
    while True:
        try:
            next(events)
        except StopIteration as stop:
            return stop.value


def test_a_shape_methods_result_assigns_the_contours_of_labels_as_of_the_store(plate):
    """shape-kmeans fitted on the store (its masks' contours): the contours traced from a labels layer get the
    clusters the store's masks get."""
    manifest, store, _, _ = plate
    result, _ = fit_store(store, "shape-kmeans", k=3, sample=30, seed=0, device="cpu")
    image, labels = field_layers(manifest, store, 2)
    table, columns = drain_value(plate_view.assign_objects(result, image, labels, device="cpu"))
    from_store = drain_value(plate_view.assign_field(result, store, 2, device="cpu"))
    rows = plate_view.field_rows(store, 2)
    assert clusters_by_label(table["label"], columns["cluster"]) == \
        clusters_by_label(store.table["label"].iloc[rows], from_store["cluster"])


def test_assign_objects_refuses_what_does_not_fit_in_one_sentence(plate):
    manifest, store, km, _ = plate
    result = ticlust.load_result(km)
    image, labels = field_layers(manifest, store, 0)
    with pytest.raises(ticlust.InputError, match=r"The labels \(128×128\) do not segment the image \(256×256\)"):
        drain_value(plate_view.assign_objects(result, image, labels[:128, :128]))
    rgb = np.repeat(image[..., None], 3, axis=-1)
    with pytest.raises(ticlust.InputError, match=rf"fitted on {store.size}×{store.size} crops but these objects give "
                                                 rf"{store.size}×{store.size} crops with 3 channels"):
        drain_value(plate_view.assign_objects(result, rgb, labels))
    small = ticlust.fit(np.random.default_rng(0).random((12, 8, 8)), "kmeans", k=2, device="cpu")   # 8×8 crops
    with pytest.raises(ticlust.InputError, match=r"objects are larger than the 8×8 crop"):
        drain_value(plate_view.assign_objects(small, image, labels))


def test_apply_result_paints_an_image_and_its_labels_layer_without_a_store(plate, make_napari_viewer, dock, qtbot):
    """A field and its labels layer (no store): Predict's Apply result cuts its objects as the result's were cut and
    paints them by cluster, the store's clusters."""
    manifest, store, km, predictions = plate
    image, labels = field_layers(manifest, store, 1)
    viewer = make_napari_viewer()
    viewer.add_image(image, name="cells")
    viewer.add_labels(labels, name="cells_cp_masks", scale=(1, 1))
    viewer.add_labels(labels[:100, :100], name="other masks")
    panel = dock(viewer)
    assert panel.source is panel.field                      # a field and its labels: the field's source
    assert panel.field.labels.choices == ("none", "cells_cp_masks")      # only the labels that segment the field
    panel.field.pick("cells", labels="cells_cp_masks")
    panel.load_result(km)
    settle(qtbot, panel)
    assert panel.field.apply_run.button.enabled
    before = {layer.name for layer in viewer.layers}
    worker = panel.field.apply()
    assert worker is not None and panel.field.apply_run.button.text == "Cancel" and not panel.input.enabled
    settle(qtbot, panel)
    assert {layer.name for layer in viewer.layers} == before | {"cells objects by cluster"}
    painted = viewer.layers["cells objects by cluster"]
    features = painted.features
    rows = plate_view.field_rows(store, 1)
    assert clusters_by_label(features["label"], features["cluster"]) == \
        clusters_by_label(store.table["label"].iloc[rows], predictions["cluster"].iloc[rows])
    assert {"index", "score", "runner_up", "area"} <= set(features.columns)
    for _, row in features.iterrows():          # each object's pixels carry its row's value, in its cluster's colour
        on = painted.data == row["index"]
        assert on.any() and (labels[on] == row["label"]).all()
        assert np.allclose(painted.colormap.map(np.array([row["index"]]))[0], L.cluster_color(int(row["cluster"])))
    assert np.array_equal(viewer.layers["cells_cp_masks"].data, labels)            # the user's layers unchanged
    assert "objects of cells_cp_masks painted by cluster" in panel.status.value
    viewer.add_image(image[:100, :100], name="crop")          # layers added later are offered
    panel.field.pick("crop")
    assert "other masks" in panel.field.labels.choices


def test_cancelled_or_failed_apply_on_layers_leaves_no_layers(plate, make_napari_viewer, dock, qtbot, monkeypatch):
    manifest, store, km, _ = plate
    image, labels = field_layers(manifest, store, 3)
    viewer = make_napari_viewer()
    viewer.add_image(np.repeat(image[..., None], 3, axis=-1), name="rgb", rgb=True)    # crops of 3 channels: refused
    viewer.add_image(image, name="cells")
    viewer.add_labels(labels, name="masks")
    panel = dock(viewer)
    panel.load_result(km)
    names = {layer.name for layer in viewer.layers}
    panel.field.pick("rgb", labels="masks")
    panel.field.apply()
    settle(qtbot, panel)
    assert "crops with 3 channels" in panel.status.value and {layer.name for layer in viewer.layers} == names
    go_on = threading.Event()
    monkeypatch.setattr(plate_view, "assign_objects", held_after_first_step(plate_view.assign_objects, go_on))
    panel.field.pick("cells", labels="masks")
    panel.field.apply()
    qtbot.waitUntil(lambda: "cutting objects" in panel.status.value, timeout=30_000)
    panel.field.apply_run.cancel()
    go_on.set()
    settle(qtbot, panel)
    assert {layer.name for layer in viewer.layers} == names and panel.status.value == "Cancelled: nothing was changed."


# ---- opening and field switching off the GUI thread ------------------------------------------------------
def test_open_and_field_reads_run_in_workers_with_the_dock_disabled(plate, plate_dock, qtbot, monkeypatch):
    manifest, store, _, _ = plate
    threads = []
    for module, name in ((plate_source, "opened_store"), (plate_field, "field_picture")):
        real = getattr(module, name)

        def recorded(*args, _real=real, _name=name):
            threads.append((_name, threading.current_thread()))
            return _real(*args)

        monkeypatch.setattr(module, name, recorded)
    viewer, panel = plate_dock()
    worker = panel.plate.open_store(store.path)
    assert worker is not None and panel.plate.store is None and "Opening s.zarr" in panel.status.value
    assert not panel.plate.open_button.enabled and not panel.plate.field.enabled and panel.progress.max == 0     # busy
    assert "s field" not in viewer.layers
    settle(qtbot, panel)
    assert panel.plate.store.path == store.path and panel.plate.open_button.enabled and panel.progress.max == 1
    assert "s field" in viewer.layers and "s gallery" in viewer.layers
    for field_index in (1, 2, 3):      # asked for in a row: the last one wins, a field in between may be skipped
        panel.plate.pick(field_index)
    settle(qtbot, panel)
    assert viewer.layers["s field"].metadata["field_index"] == 3 and panel.plate.field.value == 3
    assert np.array_equal(viewer.layers["s field"].data, field_file(manifest, store, 3))
    assert threads[0][0] == "opened_store" and any(n == "field_picture" for n, _ in threads[1:])
    assert all(thread is not threading.main_thread() for _, thread in threads)


def held_shares(monkeypatch):
    """The real share count in a worker, the first call held until the returned event is set; the columns counted
    and the threads they were counted in."""
    go_on, counted = threading.Event(), []

    def held(predictions, by):
        counted.append((by, threading.current_thread()))
        if len(counted) == 1:
            go_on.wait(10)
        return plate_view.cluster_shares(predictions, by)

    monkeypatch.setattr(plate_parts, "cluster_shares", held)
    return go_on, counted


def test_share_per_is_counted_in_a_worker_and_the_last_column_asked_wins(plate, panel, qtbot, monkeypatch, tmp_path):
    _, _, _, predictions = plate
    viewer, panel = panel
    go_on, counted = held_shares(monkeypatch)
    drawn = []
    monkeypatch.setattr(panel.plate.shares.plot, "set_shares", lambda shares, by: drawn.append(by))
    panel.plate.shares.group_by.value = "site"
    qtbot.waitUntil(lambda: len(counted) == 1, timeout=10_000)
    assert panel.busy and panel.progress.max == 0 and "share per site" in panel.status.value       # busy bar
    assert not panel.plate.shares.export_button.enabled and panel.plate.shares.by == "well"     # the shares shown are still the wells'
    assert panel.plate.shares.group_by.enabled and panel.plate.field.enabled                    # the dock stays usable
    panel.plate.shares.group_by.value = "image"                                           # asked while site is being counted
    go_on.set()
    settle(qtbot, panel)
    assert [by for by, _ in counted] == ["site", "image"] and drawn == ["image"]      # site's count was dropped
    assert all(thread is not threading.main_thread() for _, thread in counted)
    assert panel.plate.shares.by == "image" and panel.plate.shares.table.equals(plate_view.cluster_shares(predictions, "image"))
    assert panel.plate.shares.export_button.enabled and panel.progress.max == 1
    out = panel.plate.shares.export(tmp_path / "per_image.csv")
    assert pd.read_csv(out).equals(plate_view.cluster_shares(predictions, "image"))
    assert "per image to per_image.csv" in panel.status.value


@pytest.mark.parametrize("closed", ["dock", "viewer"])
def test_closing_the_dock_while_shares_are_counted_leaves_no_error(plate, panel, qtbot, monkeypatch, closed):
    """The dock's close button (or the viewer's window closed) while a count runs: the worker's late result is
    dropped, nothing is drawn and no error is raised (pytest-qt fails a test on an exception in a Qt slot)."""
    viewer, panel = panel
    go_on, counted = held_shares(monkeypatch)
    names = [layer.name for layer in viewer.layers]
    panel.plate.shares.group_by.value = "site"
    worker = panel.plate.shares.counting.worker
    qtbot.waitUntil(lambda: len(counted) == 1, timeout=10_000)
    if closed == "dock":
        from qtpy.QtWidgets import QDockWidget

        dock = panel.native
        while not isinstance(dock, QDockWidget):
            dock = dock.parent()
        dock.destroyOnClose()                                     # what the dock's close button does
        qtbot.wait(50)
    else:
        viewer.close()
    assert panel.closed and not panel.busy
    with qtbot.waitSignal(worker.finished, timeout=10_000):
        go_on.set()
    qtbot.wait(50)                                                # the late signals, delivered
    assert panel.plate.shares.by == "well" and not panel.plate.shares.counting.busy
    if closed == "dock":
        assert [layer.name for layer in viewer.layers] == names


def test_a_failing_open_is_one_sentence_and_makes_no_layers(plate, plate_dock, tmp_path):
    _, store, _, _ = plate
    broken = tmp_path / "broken.zarr"
    import shutil

    shutil.copytree(store.path, broken)
    table = pd.read_parquet(broken / "predictions.parquet")
    table.head(2).to_parquet(broken / "predictions.parquet")            # 2 rows, not one per object
    viewer, panel = plate_dock(broken)
    assert "holds 2 rows but the store" in panel.status.value and panel.plate.store is None
    assert len(viewer.layers) == 0 and panel.plate.open_button.enabled and panel.plate.summary.value.startswith("No store open")


def test_a_result_fitted_on_a_labels_layer_in_napari_is_applied_with_its_own_crop_options(make_napari_viewer, dock,
                                                                                          qtbot, tmp_path):
    """A run on a labels layer records how it cut the objects (here rescaled, not turned); Apply result cuts the same
    layers that way and gives back the run's clusters."""
    viewer = make_napari_viewer()
    viewer.open_sample("napari-ticlust", "nuclei")
    widget = dock(viewer)
    widget.field.pick("nuclei", labels="nuclei labels")
    widget.form.method.value, widget.form.k.value = "kmeans", 3
    widget.field.crop["rescale"].value, widget.field.crop["orient"].value = True, False
    widget.field.crop["size"].value = 24
    assert widget.start() is not None
    settle(qtbot, widget)
    fitted = widget.result
    assert fitted.config["objects"] == {"size": 24, "keep_border": False, "channel": None, "orient": False,
                                        "normalize": True, "rescale": True}
    viewer.layers.remove("nuclei objects by cluster")
    widget.load_result(widget.save_result(tmp_path / "fitted.npz"))
    widget.field.apply()
    settle(qtbot, widget)
    features = viewer.layers["nuclei objects by cluster"].features
    assert features["cluster"].tolist() == fitted.labels.tolist()
