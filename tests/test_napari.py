"""The napari plugin with a real viewer (pytest-qt under Xvfb)."""
import subprocess
import sys

import numpy as np
import pytest

napari = pytest.importorskip("napari")

from ticlust import load_result  # noqa: E402
from ticlust._napari import reader, samples  # noqa: E402
from ticlust._napari.widget import TiclustWidget  # noqa: E402

pytestmark = pytest.mark.gui


def dock(viewer) -> TiclustWidget:
    """The widget docked the way a user docks it (Plugins > ticlust): napari builds it and injects the viewer."""
    _, widget = viewer.window.add_plugin_dock_widget("napari-ticlust")
    assert isinstance(widget, TiclustWidget)
    return widget


@pytest.fixture
def viewer_widget(make_napari_viewer):
    viewer = make_napari_viewer()
    images = samples.digits()[0][0][:300]
    viewer.add_image(images, name="digits")
    return viewer, dock(viewer)


def test_plugin_menu_route_docks_the_widget(make_napari_viewer):
    """napari's own route (Plugins > ticlust) must inject the viewer; building the class by hand hides that."""
    viewer = make_napari_viewer()
    viewer.add_image(np.random.default_rng(0).random((6, 16, 16)), name="stack")
    dock_widget, widget = viewer.window.add_plugin_dock_widget("napari-ticlust")
    assert isinstance(widget, TiclustWidget) and dock_widget.isVisible()
    assert widget.input.value == "stack"


def run_to_end(qtbot, widget, timeout=60_000):
    assert widget.start() is not None
    # the widget drops its worker when the worker has finished (a fast failure can finish before any
    # signal wait could be set up, so wait on the state rather than on the signal)
    qtbot.waitUntil(lambda: widget.worker is None and widget._inspecting is None, timeout=timeout)


def test_manifest_is_valid():
    out = subprocess.run([sys.executable, "-m", "npe2", "validate", "napari-ticlust"], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_kmeans_run_adds_layers_and_features(viewer_widget, qtbot):
    viewer, widget = viewer_widget
    before = viewer.layers["digits"].data.copy()
    widget.k.value = 10
    run_to_end(qtbot, widget)
    assert widget.result is not None and widget.result.k == 10
    protos = viewer.layers["digits prototypes"].data
    assert protos.shape == (10, 32, 32)
    features = viewer.layers["digits"].metadata["ticlust_assignments"]
    assert len(features) == 300 and set(features["cluster"]) == set(range(10))
    assert {"score", "runner_up"} <= set(features.columns)
    sorted_layer = viewer.layers["digits sorted by cluster"]
    assert np.all(np.diff(sorted_layer.metadata["labels"]) >= 0)
    assert sum(widget.table.to_dict("list")["size"]) == 300
    np.testing.assert_array_equal(viewer.layers["digits"].data, before)  # input untouched
    # the inspector: every prototype beside each other under the current image, the chosen one framed
    viewer.dims.current_step = (7, 0, 0)
    qtbot.waitUntil(lambda: widget._inspecting is None and "digits inspector frames" in viewer.layers, timeout=10_000)
    frames = viewer.layers["digits inspector frames"]
    qtbot.waitUntil(lambda: frames.features["label"][0] == f"0: {widget.result.scores[7, 0]:.3g}", timeout=10_000)
    strip = viewer.layers["digits inspector"].data
    assert strip.shape == (32, 10 * 34 - 2)
    frames = viewer.layers["digits inspector frames"]
    assert len(frames.data) == 10
    chosen = int(widget.result.labels[7])
    assert np.allclose(frames.edge_color[chosen], [1.0, 0.85, 0.0, 1.0])
    assert f"item 7 → cluster {chosen}" in widget.status.value
    assert widget.run_button.text == "Run"


def test_run_twice_reuses_layers(viewer_widget, qtbot):
    viewer, widget = viewer_widget
    widget.k.value = 3
    run_to_end(qtbot, widget)
    n_layers = len(viewer.layers)
    widget.k.value = 4
    run_to_end(qtbot, widget)
    assert len(viewer.layers) == n_layers
    assert viewer.layers["digits prototypes"].data.shape[0] == 4


def test_cancel_leaves_no_half_made_layers(viewer_widget, qtbot):
    viewer, widget = viewer_widget
    widget.method.value = "gmm"
    widget.params["max_iter"].value = 100000
    widget.params["tol"].value = "0"
    names_before = [layer.name for layer in viewer.layers]
    worker = widget.start()
    qtbot.waitUntil(lambda: "EM" in widget.status.value, timeout=30_000)
    assert widget.run_button.text == "Cancel"
    with qtbot.waitSignal(worker.finished, timeout=10_000):
        widget.run_button.clicked.emit()   # the Cancel button
    qtbot.waitUntil(lambda: widget.worker is None, timeout=5000)
    assert [layer.name for layer in viewer.layers] == names_before
    assert widget.result is None and "Cancelled" in widget.status.value


def test_bad_input_shows_a_notification(make_napari_viewer, qtbot):
    viewer = make_napari_viewer()
    stack = np.random.default_rng(0).random((20, 16, 16)).astype(np.float32)
    stack[3, 2, 2] = np.nan
    viewer.add_image(stack, name="broken")
    widget = dock(viewer)
    messages = []
    from napari.utils.notifications import notification_manager

    notification_manager.notification_ready.connect(lambda note: messages.append(note.message))
    widget.k.value = 2
    run_to_end(qtbot, widget)
    assert messages and "NaN" in messages[0] and "item 3" in messages[0]
    assert [layer.name for layer in viewer.layers] == ["broken"]
    assert "Stopped" in widget.status.value


def test_save_and_reopen_through_reader(viewer_widget, qtbot, tmp_path):
    viewer, widget = viewer_widget
    widget.k.value = 5
    run_to_end(qtbot, widget)
    path = widget.save_result(tmp_path / "res.npz")
    assert (tmp_path / "res.csv").exists()
    assert load_result(path).labels.tolist() == widget.result.labels.tolist()
    read = reader.get_reader(str(path))
    assert read is not None
    layers = viewer.open(str(path), plugin="napari-ticlust")
    assert layers[0].data.shape == (5, 32, 32)
    widget2 = dock(viewer)
    widget2.input.value = "digits"
    widget2.load_result(path)
    assert widget2.result.k == 5


def test_sample_data_opens_from_menu(make_napari_viewer):
    viewer = make_napari_viewer()
    viewer.open_sample("napari-ticlust", "glyphs")
    assert viewer.layers["glyphs"].data.shape == (600, 32, 32)


def test_manifest_ships_inside_the_wheel(tmp_path):
    """`pip install .` (not editable) must still find napari.yaml: it travels inside the package."""
    import zipfile
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", str(root),
                          "-w", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    wheel = next(tmp_path.glob("*.whl"))
    with zipfile.ZipFile(wheel) as zf:
        manifest = zf.read("ticlust/napari.yaml").decode()
        entry_points = next(n for n in zf.namelist() if n.endswith("entry_points.txt"))
        assert "napari-ticlust = ticlust:napari.yaml" in zf.read(entry_points).decode()
    assert manifest == (root / "napari.yaml").read_text()


def test_reader_opens_plain_stack(tmp_path):
    stack = np.zeros((4, 8, 8), np.uint8)
    stack[:, 2:5, 2:5] = 200
    np.savez(tmp_path / "s.npz", images=stack, labels=np.arange(4))
    layer_data = reader.get_reader(str(tmp_path / "s.npz"))(str(tmp_path / "s.npz"))
    assert layer_data[0][0].shape == (4, 8, 8) and layer_data[0][1]["metadata"]["labels"].tolist() == [0, 1, 2, 3]
    assert reader.get_reader(str(tmp_path / "nothing.txt")) is None


def test_landmark_workflow(make_napari_viewer, qtbot, tmp_path):
    from ticlust.landmarks import write_tps

    viewer = make_napari_viewer()
    viewer.open_sample("napari-ticlust", "shapes")
    points = viewer.layers["shapes"]
    before = np.asarray(points.data).copy()
    widget = dock(viewer)
    widget.method.value = "shape-kmeans"
    assert widget.input.choices == ("shapes",)      # only Points layers for a landmark method
    widget.input.value = "shapes"
    widget.k.value = 2
    run_to_end(qtbot, widget)
    result = widget.result
    assert result is not None and result.k == 2
    truth = np.asarray(points.features["true_group"])
    from ticlust.metrics import hungarian_accuracy

    assert hungarian_accuracy(truth, np.asarray(points.features["cluster"])) == 1.0
    n_landmarks = result.prototypes.shape[1]
    assert len(viewer.layers["shapes landmark ellipses"].data) == 2 * n_landmarks
    assert len(viewer.layers["shapes mean shapes"].data) == 2
    assert len(viewer.layers["shapes aligned"].data) == len(before)
    np.testing.assert_array_equal(np.asarray(points.data), before)
    points.selected_data = {0}
    sizes = viewer.layers["shapes aligned"].size
    assert sizes[:n_landmarks].min() > sizes[n_landmarks:].max()   # shape 0 highlighted
    assert "shape 0" in widget.status.value
    # a tpsDig file opens as a Points layer ready for clustering
    write_tps(tmp_path / "s.tps", result.aligned[:5])
    layer = viewer.open(str(tmp_path / "s.tps"), plugin="napari-ticlust")[0]
    assert len(layer.data) == 5 * n_landmarks and "shape_id" in layer.features


def test_rgb_stack_and_gmm(make_napari_viewer, qtbot):
    viewer = make_napari_viewer()
    rng = np.random.default_rng(0)
    stack = (rng.random((40, 12, 12, 3)) * 255).astype(np.uint8)
    stack[:20, :6] = 255          # two visibly different groups
    viewer.add_image(stack, name="rgb", rgb=True)
    widget = dock(viewer)
    widget.method.value = "gmm"
    widget.input.value = "rgb"
    widget.k.value = 2
    run_to_end(qtbot, widget)
    assert viewer.layers["rgb prototypes"].data.shape == (2, 12, 12, 3)
    table = viewer.layers["rgb"].metadata["ticlust_assignments"]
    assert "responsibility" in table.columns
    labels = widget.result.labels
    assert len(set(labels[:20])) == 1 and len(set(labels[20:])) == 1 and labels[0] != labels[-1]
    viewer.dims.current_step = (5, 0, 0, 0)[: viewer.dims.ndim]
    qtbot.waitUntil(lambda: "rgb inspector" in viewer.layers and widget._inspecting is None, timeout=10_000)
    assert viewer.layers["rgb inspector"].data.shape == (12, 2 * 14 - 2, 3)


def fitted_on_glyphs(make_napari_viewer, qtbot, method, n, **params):
    """A viewer with the first n glyphs and the widget after a K=4 run of ``method`` with ``params``."""
    viewer = make_napari_viewer()
    viewer.add_image(samples.glyphs()[0][0][:n], name="glyphs")
    widget = dock(viewer)
    widget.method.value = method
    widget.input.value = "glyphs"
    widget.k.value = 4
    for name, value in params.items():
        widget.params[name].value = value
    run_to_end(qtbot, widget, timeout=120_000)
    return viewer, widget


def test_st_kmeans_shows_aligned_stack_and_warp_grid(make_napari_viewer, qtbot):
    viewer, widget = fitted_on_glyphs(make_napari_viewer, qtbot, "st-kmeans", 40, max_iter=2, steps=5,
                                      affine_steps=5, predict_steps=5, landmarks=3)
    assert widget.result is not None
    aligned = viewer.layers["glyphs aligned"]
    assert aligned.data.shape == (40, 32, 32) and aligned.metadata["aligned_kind"] == "item-on-prototype"
    viewer.dims.current_step = (6, 0, 0)
    grid = viewer.layers["glyphs warp grid"]
    gh, gw = widget.result.grids.shape[1:3]
    assert len(grid.data) == gh + gw
    assert all(np.all(path[:, 0] == 6) for path in grid.data)   # drawn on the current slice only
    np.testing.assert_allclose(grid.data[0][:, 1:], widget.result.grids[6, 0, :, ::-1], atol=1e-4)
    qtbot.waitUntil(lambda: "glyphs inspector" in viewer.layers and widget._inspecting is None, timeout=60_000)
    assert viewer.layers["glyphs inspector"].data.shape == (32, 4 * 34 - 2)


def test_dti_shows_aligned_prototypes_grid_and_inspector(make_napari_viewer, qtbot):
    viewer, widget = fitted_on_glyphs(make_napari_viewer, qtbot, "dti-kmeans", 64, max_epochs=2, min_stage_epochs=1,
                                      patience=1, final_epochs=1, batch_size=32)
    result = widget.result
    aligned = viewer.layers["glyphs aligned"]
    assert aligned.data.shape == (64, 32, 32) and aligned.metadata["aligned_kind"] == "prototype-on-item"
    viewer.dims.current_step = (9, 0, 0)
    grid = viewer.layers["glyphs warp grid"]
    assert all(np.all(path[:, 0] == 9) for path in grid.data)
    qtbot.waitUntil(lambda: widget._inspecting is None, timeout=30_000)
    labels = viewer.layers["glyphs inspector frames"].features["label"]
    assert list(labels) == [f"{k}: {s:.3g}" for k, s in enumerate(result.scores[9])]
