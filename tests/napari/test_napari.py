"""The napari plugin with a real viewer (pytest-qt under Xvfb)."""
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest

napari = pytest.importorskip("napari")

from ticlust import load_result  # noqa: E402
from ticlust.methods import get_method  # noqa: E402
from ticlust._napari import layers as L  # noqa: E402
from ticlust._napari import reader, samples  # noqa: E402
from ticlust._napari.dock import TiclustDock  # noqa: E402

pytestmark = pytest.mark.gui


@pytest.fixture
def viewer_widget(dock, make_napari_viewer):
    viewer = make_napari_viewer()
    images = samples.digits()[0][0][:300]
    viewer.add_image(images, name="digits")
    return viewer, dock(viewer)


def test_plugin_menu_route_docks_the_widget(make_napari_viewer):
    """napari's own route (Plugins > ticlust) must inject the viewer; building the class by hand hides that."""
    viewer = make_napari_viewer()
    viewer.add_image(np.random.default_rng(0).random((6, 16, 16)), name="stack")
    dock_widget, widget = viewer.window.add_plugin_dock_widget("napari-ticlust")
    assert isinstance(widget, TiclustDock)
    assert dock_widget.widget() is not None and dock_widget.isAncestorOf(widget.native)
    assert widget.source is widget.stack and "stack" in widget.viewer.layers    # the injected viewer is this one
    assert [layer.name for layer in widget.stack.picked_layers()] == ["stack"]


def test_manifest_is_valid():
    out = subprocess.run([sys.executable, "-m", "npe2", "validate", "napari-ticlust"], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def inspected(qtbot, widget, viewer, item: int, name: str = "digits", timeout: int = 20_000):
    """Put image ``item`` under the slider and wait until the inspector shows it; its frames layer."""
    step = list(viewer.dims.current_step)
    step[0] = item
    viewer.dims.current_step = tuple(step)
    frames = f"{name} inspector frames"
    qtbot.waitUntil(lambda: not widget.busy and frames in viewer.layers
                         and viewer.layers[frames].metadata.get("item") == item, timeout=timeout)
    return viewer.layers[frames]


def test_kmeans_run_adds_layers_and_features(run_to_end, viewer_widget, qtbot):
    viewer, widget = viewer_widget
    before = viewer.layers["digits"].data.copy()
    assert widget.form.k.value == 10       # K's default comes from the method's config
    run_to_end(qtbot, widget)
    result = widget.result
    assert result is not None and result.k == 10
    # the prototypes are one 2-D mosaic beside the stack: never on the image slider, never over the image
    protos = viewer.layers["digits prototypes"]
    scene = L.Scene(32, 32, 10)
    assert protos.ndim == 2 and protos.data.shape == scene.grid_shape(scene.mosaic_columns)
    assert protos.translate[1] >= 2 * 32
    for c, (y, x) in enumerate(scene.tile_origins(scene.mosaic_columns)):
        np.testing.assert_allclose(protos.data[y:y + 32, x:x + 32], result.prototypes[c], atol=1e-6)
    features = viewer.layers["digits"].metadata["ticlust_assignments"]
    assert len(features) == 300 and set(features["cluster"]) == set(range(10))
    assert {"score", "runner_up"} <= set(features.columns)
    sorted_layer = viewer.layers["digits sorted by cluster"]
    assert np.all(np.diff(sorted_layer.metadata["labels"]) >= 0)
    assert sum(widget.curate.table.to_dict("list")["size"]) == 300
    np.testing.assert_array_equal(viewer.layers["digits"].data, before)  # input untouched
    # the inspector: every prototype on a grid under the current image, the chosen one framed
    frames = inspected(qtbot, widget, viewer, 7)
    strip = viewer.layers["digits inspector"]
    assert strip.ndim == 2 and strip.data.shape == scene.grid_shape(scene.inspector_columns)
    assert len(frames.data) == 10
    chosen = int(result.labels[7])
    assert np.allclose(frames.edge_color[chosen], L.CHOSEN_COLOR)
    assert viewer.layers["digits inspector scores"].metadata["texts"] == [f"{c}: {s:.3g}" for c, s in enumerate(result.scores[7])]
    assert f"item 7 → cluster {chosen}" in widget.status.value
    assert widget.run_button.text == "Run"


def test_view_is_framed_after_run_and_lines_keep_their_screen_width(fitted_on_glyphs, make_napari_viewer, qtbot):
    """After Run the image, its aligned prototype, its (clipped) warp grid, the prototypes and the
    inspector are all on screen without pressing Home; lines stay 1-3 screen pixels at any zoom."""
    viewer, widget = fitted_on_glyphs("st-kmeans", 24, k=3, max_iter=1, steps=3,
                                      affine_steps=3, predict_steps=3, landmarks=3)
    frames = inspected(qtbot, widget, viewer, 5, "glyphs")
    (top, left), (bottom, right) = L.visible_box(viewer)
    scene = L.scene_for(widget.result)
    (y0, x0), (y1, x1) = scene.extent()
    assert top <= y0 and left <= x0 and bottom >= y1 and right >= x1, ((top, left, bottom, right), scene.extent())
    assert viewer.layers["glyphs aligned"].translate[-1] >= 32          # beside the image, not over it
    grid = viewer.layers["glyphs warp grid"]
    vertices = np.concatenate([path[:, 1:] for path in grid.data])
    assert vertices.min() >= -0.5 - 1e-6 and vertices.max() <= 31.5 + 1e-6   # cut to the image
    zoom = viewer.camera.zoom
    assert np.allclose(np.asarray(grid.edge_width) * zoom, L.SCREEN_WIDTHS["grid"])
    viewer.camera.zoom = zoom * 4
    assert np.allclose(np.asarray(grid.edge_width) * zoom * 4, L.SCREEN_WIDTHS["grid"])
    assert np.allclose(np.asarray(frames.edge_width) * zoom * 4 >= 1.0, True)


def test_inspector_agrees_with_status_line_and_result_for_every_item(fitted_on_glyphs, make_napari_viewer, qtbot):
    """st-kmeans once framed cluster 2 (0.306) while the status line said runner-up 6 (0.291): the
    inspector re-optimised the alignment and ranked by its own scores. Chosen, runner-up and every
    score label must be the result's, for every image of the stack."""
    viewer, widget = fitted_on_glyphs("st-kmeans", 12, k=3, max_iter=1, steps=3,
                                      affine_steps=3, predict_steps=3, landmarks=3)
    result = widget.result
    for item in range(result.n):
        frames = inspected(qtbot, widget, viewer, item, "glyphs")
        scores = result.scores[item]
        label = int(result.labels[item])
        runner = int(min((c for c in range(result.k) if c != label), key=lambda c: scores[c]))
        assert (frames.metadata["chosen"], frames.metadata["runner_up"]) == (label, runner)
        assert np.allclose(frames.edge_color[label], L.CHOSEN_COLOR)
        assert np.allclose(frames.edge_color[runner], L.RUNNER_UP_COLOR)
        texts = viewer.layers["glyphs inspector scores"].metadata["texts"]
        assert texts == [f"{c}: {s:.3g}" for c, s in enumerate(scores)]
        assert widget.status.value == (f"item {item} → cluster {label} (score {scores[label]:.4g}); "
                                       f"runner-up {runner} ({scores[runner]:.4g})")


def test_deleting_inspector_layers_and_running_again(run_to_end, viewer_widget, qtbot):
    """Removing and re-making a Shapes layer with text crashed vispy under Xvfb: the inspector draws its
    scores as an image, and its frames layer carries no text."""
    viewer, widget = viewer_widget
    widget.form.k.value = 3
    run_to_end(qtbot, widget)
    inspected(qtbot, widget, viewer, 2)
    for suffix in ("inspector", "inspector scores", "inspector frames"):
        viewer.layers.remove(f"digits {suffix}")
    widget.form.k.value = 4
    run_to_end(qtbot, widget)
    frames = inspected(qtbot, widget, viewer, 4)
    assert len(frames.data) == 4 and "".join(map(str, np.ravel(frames.text.values))) == ""
    assert viewer.layers["digits inspector scores"].rgb


def test_run_twice_reuses_layers(run_to_end, viewer_widget, qtbot):
    viewer, widget = viewer_widget
    widget.form.k.value = 3
    run_to_end(qtbot, widget)
    n_layers = len(viewer.layers)
    widget.form.k.value = 4
    run_to_end(qtbot, widget)
    assert len(viewer.layers) == n_layers
    scene = L.Scene(32, 32, 4)
    assert viewer.layers["digits prototypes"].data.shape == scene.grid_shape(scene.mosaic_columns)


def test_cancel_leaves_no_half_made_layers(viewer_widget, qtbot):
    viewer, widget = viewer_widget
    widget.form.method.value = "gmm"
    widget.form.param("max_iter").value = 100000
    widget.form.param("tol").value = "0"
    names_before = [layer.name for layer in viewer.layers]
    worker = widget.start()
    qtbot.waitUntil(lambda: "EM" in widget.status.value and "digits prototypes" in viewer.layers, timeout=30_000)
    assert widget.run_button.text == "Cancel"
    live = viewer.layers["digits prototypes"]          # live while training, on no slider, beside the stack
    assert live.ndim == 2 and live.visible and live.translate[1] >= 64
    assert "ETA estimating…" in widget.status.value or "at this stage's pace" in widget.status.value
    first, drawn = np.array(live.data), []
    live.events.data.connect(lambda _: drawn.append(1))   # a later snapshot drawn (EM may already sit at its fixed point)
    qtbot.waitUntil(lambda: bool(drawn) or not np.array_equal(viewer.layers["digits prototypes"].data, first),
                    timeout=15_000)
    with qtbot.waitSignal(worker.finished, timeout=10_000):
        widget.run_button.clicked.emit()   # the Cancel button
    qtbot.waitUntil(lambda: widget.job is None, timeout=5000)
    assert [layer.name for layer in viewer.layers] == names_before
    assert widget.result is None and "Cancelled" in widget.status.value


def test_bad_input_shows_a_notification(dock, run_to_end, make_napari_viewer, qtbot):
    viewer = make_napari_viewer()
    stack = np.random.default_rng(0).random((20, 16, 16)).astype(np.float32)
    stack[3, 2, 2] = np.nan
    viewer.add_image(stack, name="broken")
    widget = dock(viewer)
    messages = []
    from napari.utils.notifications import notification_manager

    notification_manager.notification_ready.connect(lambda note: messages.append(note.message))
    widget.form.k.value = 2
    run_to_end(qtbot, widget)
    assert messages and "NaN" in messages[0] and "item 3" in messages[0]
    assert [layer.name for layer in viewer.layers] == ["broken"]
    assert "Stopped" in widget.status.value


def test_save_load_restores_the_form_and_file_open_shows_everything(run_to_end, viewer_widget, qtbot, tmp_path):
    """Load puts the result's method and parameters back in the form; File > Open on a result file shows
    the prototypes, assignments, sorted view and inspector against the open stack, not only prototypes."""
    viewer, widget = viewer_widget
    widget.form.method.value = "gmm"
    widget.form.k.value = 5
    widget.form.param("variance_floor").value = "0.05"
    widget.seed.value = 3
    run_to_end(qtbot, widget)
    path = widget.save_result(tmp_path / "res.npz")
    assert (tmp_path / "res.csv").exists()
    assert load_result(path).labels.tolist() == widget.result.labels.tolist()
    widget.form.method.value = "kmeans"
    widget.seed.value = 0
    widget.load_result(path)
    assert (widget.form.method.value, widget.form.k.value, widget.seed.value) == ("gmm", 5, 3)
    assert float(widget.form.param("variance_floor").value) == 0.05
    # with no matching stack open, File > Open still gives the prototypes and the assignments table
    stack = viewer.layers["digits"].data
    viewer.layers.remove("digits")
    alone = reader.read_result(str(path))
    kinds = {meta["name"]: kind for _, meta, kind in alone}
    assert kinds["res prototypes"] == "image" and "ticlust_assignments" in alone[0][1]["metadata"]
    # File > Open in a fresh viewer holding the stack: the reader hands the result to the widget
    fresh = type(viewer)(show=False)
    try:
        fresh.add_image(stack, name="digits")
        assert reader.get_reader(str(path)) is not None
        fresh.open(str(path), plugin="napari-ticlust")
        names = {layer.name for layer in fresh.layers}
        assert {"digits prototypes", "digits sorted by cluster"} <= names
        assert "ticlust_assignments" in fresh.layers["digits"].metadata
        qtbot.waitUntil(lambda: "digits inspector frames" in fresh.layers, timeout=20_000)
        _, opened = fresh.window.add_plugin_dock_widget("napari-ticlust")
        qtbot.waitUntil(lambda: not opened.busy, timeout=20_000)
        assert opened.result.labels.tolist() == widget.result.labels.tolist() and opened.form.method.value == "gmm"
    finally:
        fresh.close()


def test_sample_data_opens_from_menu_and_says_its_class_count(dock, make_napari_viewer):
    from npe2 import PluginManager

    viewer = make_napari_viewer()
    viewer.open_sample("napari-ticlust", "glyphs")
    assert viewer.layers["glyphs"].data.shape == (600, 32, 32)
    names = {s.key: s.display_name for s in PluginManager.instance().get_manifest("napari-ticlust").contributions.sample_data}
    assert "4 classes" in names["glyphs"] and "10 classes" in names["digits"] and "2 classes" in names["shapes"]
    widget = dock(viewer)
    assert "4 classes" in widget.status.value      # the dock says so too, before anyone runs K = 10


def test_gui_command_fits_the_screen_and_uses_the_plugin_route(qtbot, make_napari_viewer):   # its fresh napari app
    """`ticlust gui` opened wider than a 1600x1000 screen with Run cut off."""
    from qtpy.QtGui import QGuiApplication

    from ticlust._napari.launcher import GUI_SIZE, gui_viewer

    viewer = gui_viewer("glyphs")
    try:
        _, _, width, height = viewer.window.geometry()
        least = viewer.window._qt_window.minimumSizeHint()       # (the test may look; the launcher does not)
        screen = QGuiApplication.primaryScreen().availableGeometry()
        assert width <= max(min(GUI_SIZE[0], screen.width()), least.width())
        assert height <= max(min(GUI_SIZE[1], screen.height()), least.height())
        widget = next(w for w in viewer.window.dock_widgets.values() if isinstance(w, TiclustDock))
        qtbot.waitUntil(lambda: widget.ready, timeout=60_000)
        assert widget.source is widget.stack and widget.stack.picked_layers()[0].name == "glyphs"
        # every method's form fits the dock: essentials up front, at most three of them
        for method in widget.form.method.choices:
            widget.form.method.value = method
            assert len(widget.form.params) <= 3
            assert widget.native.minimumSizeHint().width() <= 420, method
            assert widget.form.k.value == get_method(method).config().k
    finally:
        viewer.close()


def test_multichannel_stack_runs_with_channels_on_their_own_slider(dock, run_to_end, make_napari_viewer, qtbot):
    """(N, C, H, W) with C = 2 was refused as 'a stack of 3-D volumes'."""
    viewer = make_napari_viewer()
    rng = np.random.default_rng(0)
    stack = rng.random((30, 2, 16, 16)).astype(np.float32)
    stack[:15, 0, :8] += 1.0
    viewer.add_image(stack, name="two channels")
    widget = dock(viewer)
    widget.stack.pick("two channels")
    widget.form.k.value = 2
    run_to_end(qtbot, widget)
    labels = widget.result.labels
    assert len(set(labels[:15])) == 1 and len(set(labels[15:])) == 1 and labels[0] != labels[-1]
    protos = viewer.layers["two channels prototypes"]
    scene = L.Scene(16, 16, 2)
    assert protos.data.shape == (2, *scene.grid_shape(scene.mosaic_columns))    # channel axis first, like the input
    frames = inspected(qtbot, widget, viewer, 20, "two channels")
    assert frames.metadata["chosen"] == labels[20]
    assert viewer.layers["two channels inspector"].data.shape == (2, *scene.grid_shape(scene.inspector_columns))


def test_manifest_ships_inside_the_wheel(tmp_path):
    """`pip install .` (not editable) must still find napari.yaml: it travels inside the package."""
    import zipfile
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
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


def test_landmark_workflow(dock, run_to_end, make_napari_viewer, qtbot, tmp_path):
    from ticlust.io.landmarks import write_tps

    viewer = make_napari_viewer()
    viewer.open_sample("napari-ticlust", "shapes")
    points = viewer.layers["shapes"]
    before = np.asarray(points.data).copy()
    widget = dock(viewer)
    assert widget.source is widget.points and widget.points.input.choices == ("shapes",)   # the landmarks' source
    assert "shape-kmeans" in widget.form.method.choices and "kmeans" not in widget.form.method.choices
    widget.form.method.value = "shape-kmeans"
    widget.points.input.value = "shapes"
    widget.form.k.value = 2
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
    # readable: the raw ring is hidden behind a gallery (one row of cells per cluster), ellipses are
    # tinted, a legend names the colours and the units
    assert not points.visible
    gallery = viewer.layers["shapes clusters"]
    centres = np.asarray(gallery.data).reshape(result.n, n_landmarks, 2).mean(1)
    spread = np.ptp(before.reshape(result.n, n_landmarks, 2), axis=1).max()
    nearest = np.sort(np.linalg.norm(centres[:, None] - centres[None], axis=-1), axis=1)[:, 1]
    assert nearest.min() > spread                                    # no two shapes overlap any more
    assert np.all(viewer.layers["shapes landmark ellipses"].face_color[:, 3] > 0.2)
    zoom = viewer.camera.zoom
    assert np.allclose(np.asarray(viewer.layers["shapes mean shapes"].edge_width) * zoom, L.SCREEN_WIDTHS["mean"])
    legend = viewer.layers["shapes legend"].metadata
    assert legend["texts"][:2] == [f"cluster {c}: {n} shapes" for c, n in enumerate(result.cluster_sizes())]
    assert "units" in legend["units"]
    points.selected_data = {0}
    for name in ("shapes aligned", "shapes clusters"):
        sizes = viewer.layers[name].size
        assert sizes[:n_landmarks].min() >= 2.5 * sizes[n_landmarks:].max() - 1e-9   # shape 0 highlighted
    assert "shape 0 → cluster" in widget.status.value
    # a tpsDig file opens as a Points layer ready for clustering
    write_tps(tmp_path / "s.tps", result.aligned[:5])
    layer = viewer.open(str(tmp_path / "s.tps"), plugin="napari-ticlust")[0]
    assert len(layer.data) == 5 * n_landmarks and "shape_id" in layer.features


def test_procrustes_kmeans_in_the_widget(dock, run_to_end, make_napari_viewer, qtbot):
    """The landmark baseline is offered for Points layers, shows its scale option up front with the
    measured advice as tooltip, and draws the same landmark layers as shape-kmeans."""
    viewer = make_napari_viewer()
    viewer.open_sample("napari-ticlust", "shapes")
    points = viewer.layers["shapes"]
    widget = dock(viewer)
    widget.form.method.value = "procrustes-kmeans"
    assert widget.points.input.choices == ("shapes",)
    assert widget.form.method.tooltip.startswith(get_method("procrustes-kmeans").title)
    widget.use(widget.stack)
    widget.form.method.value = "nt"          # a method measured below the baseline says so where it is picked
    assert "use kmeans or pssc" in widget.form.method.tooltip
    widget.use(widget.points)
    widget.form.method.value = "procrustes-kmeans"
    widget.points.input.value = "shapes"
    widget.form.k.value = 2
    run_to_end(qtbot, widget)
    result = widget.result
    assert result is not None and result.method == "procrustes-kmeans" and result.k == 2
    from ticlust.metrics import hungarian_accuracy

    assert hungarian_accuracy(np.asarray(points.features["true_group"]), np.asarray(points.features["cluster"])) == 1.0
    n_landmarks = result.prototypes.shape[1]
    assert len(viewer.layers["shapes landmark ellipses"].data) == 2 * n_landmarks
    assert len(viewer.layers["shapes mean shapes"].data) == 2
    from ticlust.methods.base import param_infos

    scale = {p.name: p for p in param_infos(get_method("procrustes-kmeans").config)}["scale"]
    assert scale.essential and "size" in scale.doc
    distance = {p.name: p for p in param_infos(get_method("shape-kmeans").config)}["distance"]
    assert "procrustes-kmeans is better" in distance.doc


def test_rgb_stack_and_gmm(dock, run_to_end, make_napari_viewer, qtbot):
    viewer = make_napari_viewer()
    rng = np.random.default_rng(0)
    stack = (rng.random((40, 12, 12, 3)) * 255).astype(np.uint8)
    stack[:20, :6] = 255          # two visibly different groups
    viewer.add_image(stack, name="rgb", rgb=True)
    widget = dock(viewer)
    widget.form.method.value = "gmm"
    widget.stack.pick("rgb")
    widget.form.k.value = 2
    run_to_end(qtbot, widget)
    scene = L.Scene(12, 12, 2)
    assert viewer.layers["rgb prototypes"].data.shape == (*scene.grid_shape(scene.mosaic_columns), 3)
    table = viewer.layers["rgb"].metadata["ticlust_assignments"]
    assert "responsibility" in table.columns
    labels = widget.result.labels
    assert len(set(labels[:20])) == 1 and len(set(labels[20:])) == 1 and labels[0] != labels[-1]
    viewer.dims.current_step = (5, 0, 0, 0)[: viewer.dims.ndim]
    qtbot.waitUntil(lambda: "rgb inspector" in viewer.layers and not widget.busy, timeout=10_000)
    assert viewer.layers["rgb inspector"].data.shape == (*scene.grid_shape(scene.inspector_columns), 3)


@pytest.fixture
def fitted_on_glyphs(make_napari_viewer, qtbot, dock, run_to_end):
    """``fitted_on_glyphs(method, n, k=4, **params)``: a viewer with the first n glyphs and the widget after a K=k
    run of ``method`` with ``params``."""
    def fit(method, n, k=4, **params):
        viewer = make_napari_viewer()
        viewer.add_image(samples.glyphs()[0][0][:n], name="glyphs")
        widget = dock(viewer)
        widget.form.method.value = method
        widget.stack.pick("glyphs")
        widget.form.k.value = k
        for name, value in params.items():
            widget.form.param(name).value = value
        run_to_end(qtbot, widget, timeout=120_000)
        return viewer, widget
    return fit


def test_st_kmeans_shows_aligned_stack_and_warp_grid(fitted_on_glyphs, make_napari_viewer, qtbot):
    viewer, widget = fitted_on_glyphs("st-kmeans", 40, max_iter=2, steps=5,
                                      affine_steps=5, predict_steps=5, landmarks=3)
    assert widget.result is not None
    aligned = viewer.layers["glyphs aligned"]
    assert aligned.data.shape == (40, 32, 32) and aligned.metadata["aligned_kind"] == "item-on-prototype"
    viewer.dims.current_step = (6, 0, 0)
    grid = viewer.layers["glyphs warp grid"]
    gh, gw = widget.result.grids.shape[1:3]
    assert 1 <= len(grid.data) and grid.metadata["item"] == 6     # lines cut to the image may split
    assert all(np.all(path[:, 0] == 6) for path in grid.data)   # drawn on the current slice only
    inside = L.clip_path(widget.result.grids[6, 0, :, ::-1], np.array([-0.5, -0.5]), np.array([31.5, 31.5]))
    np.testing.assert_allclose(grid.data[0][:, 1:], inside[0], atol=1e-4)
    qtbot.waitUntil(lambda: "glyphs inspector" in viewer.layers and not widget.busy, timeout=60_000)
    scene = L.Scene(32, 32, 4)
    assert viewer.layers["glyphs inspector"].data.shape == scene.grid_shape(scene.inspector_columns)


def test_dti_shows_aligned_prototypes_grid_and_inspector(fitted_on_glyphs, make_napari_viewer, qtbot):
    viewer, widget = fitted_on_glyphs("dti-kmeans", 64, max_epochs=2, min_stage_epochs=1,
                                      patience=1, final_epochs=1, batch_size=32)
    result = widget.result
    aligned = viewer.layers["glyphs aligned"]
    assert aligned.data.shape == (64, 32, 32) and aligned.metadata["aligned_kind"] == "prototype-on-item"
    viewer.dims.current_step = (9, 0, 0)
    grid = viewer.layers["glyphs warp grid"]
    assert all(np.all(path[:, 0] == 9) for path in grid.data)
    qtbot.waitUntil(lambda: not widget.busy, timeout=30_000)
    texts = viewer.layers["glyphs inspector scores"].metadata["texts"]
    assert texts == [f"{k}: {s:.3g}" for k, s in enumerate(result.scores[9])]


# ---- objects from a segmentation (issue 14) ------------------------------------------------------
@pytest.fixture
def nuclei_widget(dock, make_napari_viewer):
    """The nuclei sample opened from File > Open Sample, the widget docked by the plugin route."""
    viewer = make_napari_viewer()
    opened = viewer.open_sample("napari-ticlust", "nuclei")
    assert [type(layer).__name__ for layer in opened] == ["Image", "Labels"]
    widget = dock(viewer)
    assert widget.source is widget.field                           # a field and its labels: the field's source
    widget.form.method.value = "kmeans"
    widget.field.pick("nuclei")
    assert widget.field.labels.choices == ("none", "nuclei labels")     # only Labels layers that fit the image
    widget.field.labels.value = "nuclei labels"
    widget.form.k.value = 3
    return viewer, widget


def test_objects_from_labels_are_painted_by_cluster_and_clicks_select_them(run_to_end, nuclei_widget, qtbot, tmp_path):
    viewer, widget = nuclei_widget
    labels = viewer.layers["nuclei labels"]
    before, image_before = labels.data.copy(), viewer.layers["nuclei"].data.copy()
    run_to_end(qtbot, widget)
    result = widget.result
    assert "Against the layer's 3 true classes" in widget.status.value     # the sample's labels know every kind
    painted = viewer.layers["nuclei objects by cluster"]
    features = painted.features
    # one row per kept object: exactly the ids that do not touch the field's border
    ids = np.unique(labels.data)[1:]
    border = np.unique(np.concatenate([labels.data[0], labels.data[-1], labels.data[:, 0], labels.data[:, -1]]))
    inner = np.setdiff1d(ids, border)
    assert len(features) == result.n == viewer.layers["nuclei objects"].data.shape[0]
    np.testing.assert_array_equal(np.sort(features["label"]), inner)
    np.testing.assert_array_equal(features["cluster"], result.labels)
    assert {"centroid_y", "centroid_x", "score", "runner_up"} <= set(features.columns)
    # every kept object is painted with its own value, coloured as its cluster's prototype number
    for pos in (0, result.n // 2, result.n - 1):
        mask = labels.data == features["label"][pos]
        assert np.all(painted.data[mask] == pos + 1)
        np.testing.assert_allclose(painted.colormap.map(pos + 1), L.cluster_color(int(result.labels[pos])), atol=1e-6)
    assert np.all(painted.data[np.isin(labels.data, border)] == 0)
    np.testing.assert_array_equal(labels.data, before)                       # the input layers are left alone
    np.testing.assert_array_equal(viewer.layers["nuclei"].data, image_before)
    # a click on an object puts it under the slider: status line and inspector show that object
    pos = result.n - 2
    ys, xs = np.nonzero(labels.data == features["label"][pos])
    where = (0, float(ys[len(ys) // 2]), float(xs[len(xs) // 2]))
    assert widget.field.click_at(where) == pos
    assert viewer.dims.current_step[0] == pos and painted.selected_label == pos + 1
    assert widget.status.value.startswith(f"object {pos} (label {features['label'][pos]}) → cluster {result.labels[pos]}")
    frames = inspected(qtbot, widget, viewer, pos, name="nuclei objects")
    assert frames.metadata["chosen"] == result.labels[pos]
    # the objects' scene sits right of the field, drawn at the objects' own (enlarged) scale
    objects, inspector = viewer.layers["nuclei objects"], viewer.layers["nuclei objects inspector"]
    u, side = objects.scale[-1], objects.data.shape[-1]
    assert objects.translate[-1] - u / 2 > labels.data.shape[1] and u >= 2
    assert tuple(inspector.scale) == (u, u) and inspector.translate[1] == objects.translate[-1]
    assert inspector.translate[0] >= objects.translate[-2] + side * u     # under the object, not over it
    assert widget.field.click_at((0, -5.0, -5.0)) is None and viewer.dims.current_step[0] == pos    # off the field
    # the viewer's own mouse callback: a click selects, a drag (panning) does not
    assert widget._on_click in viewer.mouse_drag_callbacks
    other = 1 if pos != 1 else 2
    ys, xs = np.nonzero(labels.data == features["label"][other])
    for moves, expected in ((1, pos), (0, other)):
        event = SimpleNamespace(position=(0, float(ys[0]), float(xs[0])), type="mouse_press")
        drag = widget._on_click(viewer, event)
        next(drag)
        for _ in range(moves):
            event.type = "mouse_move"
            next(drag)
        event.type = "mouse_release"
        with pytest.raises(StopIteration):
            next(drag)
        assert viewer.dims.current_step[0] == expected
    # Save writes the per-object table into the CSV; Load shows the result on the objects again
    out = widget.save_result(tmp_path / "nuclei.npz")
    header = (tmp_path / "nuclei.csv").read_text().splitlines()[0].split(",")
    assert {"label", "centroid_y", "cluster", "runner_up"} <= set(header)
    painted.data = np.zeros_like(painted.data)
    assert widget.load_result(out).n == result.n and widget.field.fitted == "nuclei objects"
    assert np.all(painted.data[labels.data == features["label"][pos]] == pos + 1)     # painted again


def test_cancel_on_a_segmentation_leaves_no_layers(nuclei_widget, qtbot):
    viewer, widget = nuclei_widget
    names = [layer.name for layer in viewer.layers]
    widget.form.method.value = "dti-kmeans"
    widget.field.labels.value = "nuclei labels"
    assert widget.start() is not None
    qtbot.waitUntil(lambda: "nuclei objects" in viewer.layers, timeout=20_000)   # cut out: the run has begun
    widget.run.cancel()
    qtbot.waitUntil(lambda: widget.job is None, timeout=30_000)
    assert [layer.name for layer in viewer.layers] == names and widget.result is None


def test_bad_segmentations_give_one_notification_and_change_nothing(run_to_end, nuclei_widget, qtbot, monkeypatch):
    viewer, widget = nuclei_widget
    shown = []
    monkeypatch.setattr("ticlust._napari.dock.show_error", shown.append)
    labels = viewer.layers["nuclei labels"]
    names = [layer.name for layer in viewer.layers]
    good = labels.data.copy()
    one = np.zeros_like(good)
    one[100:120, 100:120] = 7
    for data, words in ((np.zeros_like(good), "no objects"), (one, "1 object"), (good[:200, :200], "labels have shape")):
        labels.data = data                 # re-segmented after it was chosen
        run_to_end(qtbot, widget)
        assert len(shown) == 1 and words in shown[0], shown
        shown.clear()
        assert [layer.name for layer in viewer.layers] == names and widget.result is None
    labels.data = good
    widget.field.crop["size"].value = 8                    # objects larger than the crop
    run_to_end(qtbot, widget)
    assert len(shown) == 1 and "larger than the 8×8 crop" in shown[0]
    assert [layer.name for layer in viewer.layers] == names


def test_shape_kmeans_clusters_the_contours_of_a_segmentation(run_to_end, nuclei_widget, qtbot):
    viewer, widget = nuclei_widget
    widget.form.method.value = "shape-kmeans"
    widget.field.labels.value = "nuclei labels"
    widget.form.k.value = 3
    run_to_end(qtbot, widget)
    result, painted = widget.result, viewer.layers["nuclei objects by cluster"]
    contours = viewer.layers["nuclei contours"]
    assert result.method == "shape-kmeans" and result.prototypes.shape[1:] == (64, 2)
    assert len(painted.features) == result.n == len(np.unique(contours.features["shape_id"]))
    labels = viewer.layers["nuclei labels"].data
    ys, xs = np.nonzero(labels == painted.features["label"][4])
    assert widget.field.click_at((0, float(ys[0]), float(xs[0]))) == 4
    assert widget.status.value.startswith(f"object 4 (label {painted.features['label'][4]}) → cluster {result.labels[4]}")


@pytest.mark.parametrize("method", ["rigid-kmeans", "rigid-spectral"])
def test_status_line_shows_the_rigid_pose_and_the_flip(dock, run_to_end, make_napari_viewer, qtbot, method):
    """A rigid method with flips searched: stepping through the items names the angle found and, for mirror images
    of the prototype's shape, that they are mirrored (issue 'Orientation-free', item 2)."""
    from scipy.ndimage import rotate

    shape = np.zeros((24, 24), np.float32)
    shape[5:19, 8:11] = 1.0      # an L: no mirror symmetry
    shape[16:19, 8:17] = 1.0
    rng = np.random.default_rng(0)
    mirrored = np.arange(16) % 2 == 1
    stack = np.stack([rotate(shape[:, ::-1] if m else shape, rng.uniform(0, 360), reshape=False, order=1)
                      for m in mirrored]).astype(np.float32)
    viewer = make_napari_viewer()
    viewer.add_image(stack, name="ells")
    widget = dock(viewer)
    widget.form.method.value = method
    widget.form.k.value = 1
    widget.form.param("flip").value = True
    run_to_end(qtbot, widget)
    said = []
    for item in range(len(stack)):
        step = list(viewer.dims.current_step)
        step[0] = item
        viewer.dims.current_step = tuple(step)
        assert "; pose: turned " in widget.status.value and "°" in widget.status.value
        said.append("mirrored" in widget.status.value)
    said = np.array(said)
    # one handedness is the prototype's, the other its mirror image, whichever the prototype took
    assert len(set(said[mirrored])) == 1 and len(set(said[~mirrored])) == 1 and said[mirrored][0] != said[~mirrored][0]


def test_progress_line_names_the_stage_and_gives_an_eta_for_rigid_kmeans(dock, run_to_end, make_napari_viewer, qtbot, monkeypatch):
    """A non-AI aligning method through the real dock: every progress line names its stage (the rigid search's Lloyd
    iteration and the batches searched, then the object map) and, once a stage has shown its pace, an ETA; the
    k-means++ seeds come first, and no line shows a loss the step does not have."""
    from ticlust.core import execute

    monkeypatch.setattr(execute, "ETA_MIN_SECONDS", 0.0)       # the two-second floor lifted for this short fit
    from ticlust.datasets.samples import glyphs_sample

    viewer = make_napari_viewer()
    viewer.add_image(glyphs_sample(n_per_class=275, size=16)[0], name="glyphs")    # 3 batches of 512 an iteration
    widget = dock(viewer)
    widget.form.method.value = "rigid-kmeans"
    widget.stack.pick("glyphs")
    widget.form.k.value = 4
    widget.form.param("max_iter").value = 3
    lines, shown = [], widget.on_event

    def show(event):                                            # what the status line said after each event
        shown(event)
        lines.append(widget.status.value)
    widget.on_event = show
    run_to_end(qtbot, widget, timeout=120_000)
    progress = [line for line in lines if " · ETA " in line]
    assert progress and progress[0].startswith("rigid k-means++ seeds 1/4 · ETA estimating…")
    searched = [line for line in progress if line.startswith("Lloyd iteration ")]
    assert searched and all(" (rigid search): " in line and " batches searched " in line for line in searched)
    # the status line follows a run at most every 0.25 s (and each stage's last step), so which batches it showed
    # depends on the machine's speed: an ETA is shown during the search, not at a given batch
    assert any("at this stage's pace" in line for line in searched)
    assert progress[-1].startswith("object map ") and "loss" not in progress[-1]
    assert widget.status.value.startswith("Done: 4 clusters")
