"""Curation in the dock (issue 18) with a real napari viewer under Xvfb: merge, split, move, mark as
outlier, undo, refine (and its Cancel), the small plots and the gallery export."""
import dataclasses

import numpy as np
import pytest

napari = pytest.importorskip("napari")

import ticlust  # noqa: E402
from ticlust import curation  # noqa: E402
from ticlust.result import OUTLIER  # noqa: E402
from ticlust._napari import layers as L  # noqa: E402


pytestmark = [pytest.mark.gui, pytest.mark.usefixtures("one_thread")]
FAST_ST = dict(max_iter=3, steps=4, affine_steps=3, predict_steps=4, landmarks=3)


def mosaic_tiles(viewer, name, result):
    """The prototypes as the mosaic layer shows them."""
    scene = L.scene_for(result)
    data = viewer.layers[f"{name} prototypes"].data
    return np.stack([data[y:y + scene.h, x:x + scene.w] for y, x in scene.tile_origins(scene.mosaic_columns)])


@pytest.fixture
def glyphs(dock, make_napari_viewer):
    """30 images of each of the 4 glyphs of File > Open Sample > ticlust > Warped glyphs, the dock docked."""
    viewer = make_napari_viewer()
    layer = viewer.open_sample("napari-ticlust", "glyphs")[0]
    truth = np.asarray(layer.metadata["labels"])
    keep = np.concatenate([np.flatnonzero(truth == g)[:30] for g in range(4)])
    layer.data, layer.metadata = layer.data[keep], {"labels": truth[keep]}
    widget = dock(viewer)
    return viewer, widget, truth[keep]


def test_split_merge_refine_reaches_a_good_run_and_undo_walks_back(run_to_end, wait, glyphs, qtbot, tmp_path):
    """The acceptance path by hand: a deliberately bad start (two prototypes on glyph 0, glyphs 2 and 3
    under one prototype) → Split the shared cluster, Merge the duplicated pair, Refine → the accuracy of
    a good run; Undo then restores each previous state, layers and plots included."""
    viewer, widget, y = glyphs
    widget.form.method.value = "st-kmeans"
    widget.form.k.value, widget.seed.value, widget.device.value = 4, 2, "cpu"
    for name, value in FAST_ST.items():
        widget.form.param(name).value = value
    run_to_end(qtbot, widget)
    good = widget.result
    acc = lambda r: ticlust.evaluate(y, r.labels)["acc"]  # noqa: E731
    assert acc(good) >= 0.85 and not widget.undo_stack
    x = viewer.layers["glyphs"].data
    by_glyph = [int(np.bincount(good.labels[y == g], minlength=4).argmax()) for g in range(4)]
    assert len(set(by_glyph)) == 4
    merged = curation.merge(good, by_glyph[2], by_glyph[3])
    bad = curation.split(x, merged, int(np.bincount(merged.labels[y == 0]).argmax()), seed=0, device="cpu")
    assert acc(bad) <= 0.75
    widget.load_result(bad.save(tmp_path / "bad.npz"))
    states = [widget.result]

    shared = int(np.bincount(widget.result.labels[y == 2]).argmax())
    widget.curate.select_clusters(shared)
    assert widget.curate.split() is not None
    wait(qtbot, widget)
    assert widget.result.k == 5 and widget.status.value.startswith(f"Split cluster {shared}")
    states.append(widget.result)
    halves = sorted({int(c) for c in widget.result.labels[y == 0]})
    assert len(halves) == 2
    widget.curate.select_clusters(*halves)
    widget.curate.merge()
    assert widget.result.k == 4 and widget.status.value.startswith(f"Merged cluster {halves[1]} into {halves[0]}")
    states.append(widget.result)
    widget.curate.refine()
    wait(qtbot, widget)
    refined = widget.result
    assert refined.edits[-1]["op"] == "refine" and refined.state is not None
    assert acc(refined) >= acc(good), (acc(refined), acc(good))
    assert f"ACC {acc(refined):.3f}" in widget.status.value and widget.status.value.startswith("Refined")
    # the layers, the table and the plots show the refined result
    np.testing.assert_allclose(mosaic_tiles(viewer, "glyphs", refined), refined.prototypes, atol=1e-6)
    assert widget.curate.table.to_dict("list")["size"] == refined.cluster_sizes().tolist()
    np.testing.assert_allclose(widget.curate.history_plot.values, refined.history)
    assert widget.curate.sizes_plot.values.tolist() == refined.cluster_sizes().tolist()
    assert viewer.layers["glyphs"].metadata["ticlust_assignments"]["cluster"].tolist() == refined.labels.tolist()
    # Undo: every edit, refine included, back to the bad start
    for state in reversed(states):
        assert widget.undo() is state and widget.result is state
        np.testing.assert_allclose(mosaic_tiles(viewer, "glyphs", state), state.prototypes, atol=1e-6)
        assert widget.curate.table.to_dict("list")["size"] == state.cluster_sizes().tolist()
        assert widget.curate.sizes_plot.values.tolist() == state.cluster_sizes().tolist()
    assert widget.result is states[0] and not widget.curate.undo_button.enabled
    assert widget.undo() is None


def test_move_and_outliers_update_the_layers_survive_save_load_and_export(run_to_end, wait, glyphs, qtbot, tmp_path):
    viewer, widget, _ = glyphs
    widget.form.k.value = 4                                      # kmeans: instant
    run_to_end(qtbot, widget)
    first = widget.result
    widget.curate.select_clusters(1)                      # a wrong choice says so and changes nothing
    widget.curate.b.value = 1
    widget.curate.merge()
    assert "Not done: Cannot merge cluster 1 with itself" in widget.status.value
    assert widget.result is first and not widget.undo_stack
    step = list(viewer.dims.current_step)
    step[0] = 5
    viewer.dims.current_step = tuple(step)
    target = (int(first.labels[5]) + 1) % 4
    widget.curate.to.value = target
    widget.curate.move()                                  # the item under the slider
    features = lambda: viewer.layers["glyphs"].metadata["ticlust_assignments"]  # noqa: E731
    assert widget.result.labels[5] == target and features()["cluster"][5] == target
    assert widget.result.pinned[5] == target and "Moved item 5" in widget.status.value
    widget.curate.items.value = "7, 9-10"
    widget.curate.mark_outliers()
    assert features()["outlier"].tolist() == [i in (7, 9, 10) for i in range(120)]
    assert "Marked 3 items as outlier" in widget.status.value
    widget.curate.refine()                                # outliers left out, the moved item kept
    wait(qtbot, widget)
    refined = widget.result
    assert refined.labels[5] == target and np.all(refined.pinned[[7, 9, 10]] == OUTLIER)
    # in the sorted view's order when the user shows it
    viewer.layers["glyphs sorted by cluster"].visible = True
    widget.curate.items.value = ""
    order = viewer.layers["glyphs sorted by cluster"].metadata["order"]
    assert widget.curate.picked("select") == [int(order[5])]
    with pytest.raises(ticlust.InputError, match="e.g. 3, 8-12"):
        widget.curate.items.value = "3, x"
        widget.curate.picked("select")
    # Save / Load keep the edits; the CSV flags the outliers; Load starts a fresh undo stack
    path = widget.save_result(tmp_path / "edited.npz")
    assert "outlier" in (tmp_path / "edited.csv").read_text().splitlines()[0]
    widget.load_result(path)
    assert widget.result.edits == refined.edits and np.array_equal(widget.result.pinned, refined.pinned)
    assert features()["outlier"].tolist() == [i in (7, 9, 10) for i in range(120)]
    assert not widget.undo_stack
    # Export gallery writes what `ticlust export --gallery` writes
    widget.export_gallery(tmp_path / "gallery")
    wait(qtbot, widget)
    assert sorted(p.name for p in (tmp_path / "gallery").iterdir()) == ["cluster_00.png", "cluster_01.png", "cluster_02.png", "cluster_03.png",
                                             "prototypes.png"]
    # the plots are drawn, not only filled: the bars are in the clusters' colours
    image = widget.curate.sizes_plot.grab().toImage()
    colors = {image.pixelColor(x, image.height() - 6).name() for x in range(image.width())}
    assert any(np.allclose(np.array([int(c[i:i + 2], 16) for i in (1, 3, 5)]) / 255, L.cluster_color(0)[:3], atol=0.02)
               for c in colors), colors


def test_cancel_of_refine_leaves_the_previous_result_and_layers(wait, glyphs, qtbot, tmp_path):
    viewer, widget, _ = glyphs
    x = viewer.layers["glyphs"].data
    fitted = ticlust.fit(x, method="gmm", k=4, seed=0, max_iter=5)
    endless = dataclasses.replace(fitted, config={**fitted.config, "max_iter": 10**6, "tol": 0.0})  # refines until cancelled
    widget.load_result(endless.save(tmp_path / "endless.npz"))
    widget.curate.items.value = "3"
    widget.curate.mark_outliers()
    wait(qtbot, widget)                                     # the inspector of the item under the slider drawn
    edited, names = widget.result, [layer.name for layer in viewer.layers]
    mosaic = viewer.layers["glyphs prototypes"].data.copy()
    worker = widget.curate.refine()
    qtbot.waitUntil(lambda: "EM" in widget.status.value, timeout=30_000)
    assert widget.curate.refine_run.button.text == "Cancel" and not widget.curate.move_button.enabled
    with qtbot.waitSignal(worker.finished, timeout=10_000):
        widget.curate.refine_run.button.clicked.emit()
    wait(qtbot, widget)
    assert widget.result is edited and [layer.name for layer in viewer.layers] == names
    np.testing.assert_array_equal(viewer.layers["glyphs prototypes"].data, mosaic)
    assert "Cancelled" in widget.status.value and len(widget.undo_stack) == 1 and widget.curate.move_button.enabled


def test_a_one_line_method_refines_and_a_refused_refine_says_why(run_to_end, wait, toy, glyphs, qtbot):
    """The contract's toy method (registered in one line) refines from the dock, the moved item kept; a refine
    the library refuses (every item an outlier) puts its one sentence in the status line and changes nothing."""
    viewer, widget, _ = glyphs
    widget.form.method.value = "toy-bins"
    run_to_end(qtbot, widget)
    widget.curate.items.value = "0"
    widget.curate.to.value = 1
    widget.curate.move()
    widget.curate.refine()
    wait(qtbot, widget)
    assert "Refined" in widget.status.value and widget.result.labels[0] == 1
    n = widget.result.n
    widget.curate.items.value = f"0-{n - 1}"
    widget.curate.mark_outliers()
    edited, depth = widget.result, len(widget.undo_stack)
    widget.curate.refine()
    wait(qtbot, widget)
    assert "are not outliers, fewer than K" in widget.status.value
    assert widget.result is edited and len(widget.undo_stack) == depth


def test_an_outlier_object_is_painted_grey(dock, run_to_end, make_napari_viewer, qtbot):
    """Objects from a segmentation: the clicked object is the one Mark as outlier acts on."""
    viewer = make_napari_viewer()
    viewer.open_sample("napari-ticlust", "nuclei")
    widget = dock(viewer)
    widget.field.pick("nuclei", labels="nuclei labels")
    widget.form.k.value = 3
    run_to_end(qtbot, widget)
    painted = viewer.layers["nuclei objects by cluster"]
    ys, xs = np.nonzero(painted.data == 4 + 1)
    assert widget.field.click_at((0, float(ys[0]), float(xs[0]))) == 4
    widget.curate.mark_outliers()
    assert widget.result.pinned[4] == OUTLIER and painted.features["outlier"][4]
    np.testing.assert_allclose(painted.colormap.map(4 + 1), L.cluster_color(-1), atol=1e-6)


def test_picked_shapes_of_a_landmark_layer_are_the_items(dock, run_to_end, make_napari_viewer, qtbot):
    viewer = make_napari_viewer()
    shapes = viewer.open_sample("napari-ticlust", "shapes")[0]
    widget = dock(viewer)
    widget.form.method.value, widget.form.k.value = "shape-kmeans", 2
    run_to_end(qtbot, widget)
    picked = np.flatnonzero(L.shape_index_of_points(shapes) == 3)
    shapes.selected_data = set(picked[:2].tolist())
    assert widget.curate.picked("select") == [3]
    widget.curate.mark_outliers()
    assert widget.result.pinned[3] == OUTLIER and "Marked shape 3 as outlier" in widget.status.value
    shapes.selected_data = set()
    widget.curate.move()
    assert "No shape is selected" in widget.status.value and len(widget.undo_stack) == 1
