"""The one dock (issue 51) with a real napari viewer: its sources and their shared parts — several image layers taken
as one input's channels (issue 53 item 3), every layout framed after Run for several input shapes (issue 53 item 5),
napari's own menus (Layers > Classify, File > Save Selected Layers through the npe2 writers), and each part written
once."""
import numpy as np
import pandas as pd
import pytest

napari = pytest.importorskip("napari")

import ticlust  # noqa: E402
from ticlust._napari import layers as L  # noqa: E402

pytestmark = pytest.mark.gui


def two_kinds(n: int = 24, size: int = 16, seed: int = 0):
    """Two channel stacks (N×H×W each) whose items differ only in the second channel: a bright left half in the first
    N/2 items. One channel alone cannot tell the kinds apart."""
    rng = np.random.default_rng(seed)
    first = rng.random((n, size, size)).astype(np.float32) * 0.2 + 0.5
    second = rng.random((n, size, size)).astype(np.float32) * 0.2
    second[: n // 2, :, : size // 2] += 1.0
    return first, second


def test_channel_layers_are_one_stack_in_the_order_picked_and_their_names_travel(dock, run_to_end, make_napari_viewer,
                                                                                qtbot, tmp_path):
    first, second = two_kinds()
    viewer = make_napari_viewer()
    viewer.add_image(first, name="DNA")
    viewer.add_image(second, name="Mito")
    widget = dock(viewer)
    assert widget.source is widget.stack and widget.stack.layers.choices == ("DNA", "Mito")
    widget.stack.pick("Mito", "DNA")                        # the order picked is the channels' order
    widget.form.method.value, widget.form.k.value = "kmeans", 2
    run_to_end(qtbot, widget)
    composite = viewer.layers["Mito + DNA (channels)"]
    assert composite.data.shape == (24, 2, 16, 16)           # N×C×H×W: channels on a slider of their own
    np.testing.assert_array_equal(composite.data[:, 0], second)
    np.testing.assert_array_equal(composite.data[:, 1], first)
    labels = widget.result.labels
    assert len(set(labels[:12])) == 1 and len(set(labels[12:])) == 1 and labels[0] != labels[-1]
    assert widget.result.config["channels"] == ["Mito", "DNA"]
    out = widget.save_result(tmp_path / "two.npz")
    assert ticlust.load_result(out).config["channels"] == ["Mito", "DNA"]
    table = pd.read_csv(tmp_path / "two.csv")
    assert {"mean_Mito", "mean_DNA"} <= set(table.columns)
    np.testing.assert_allclose(table["mean_Mito"], second.reshape(24, -1).mean(1), rtol=1e-5)
    # layers that are not channels of one stack: one sentence, nothing run
    viewer.add_image(first[:, :8], name="cut")
    widget.stack.pick("DNA", "cut")
    assert widget.start() is None and "are not channels of one stack" in widget.status.value


def test_channel_layers_of_a_field_are_cut_together(dock, run_to_end, make_napari_viewer, qtbot):
    """A field opened as one layer per channel (as napari opens a multichannel TIFF with channel_axis): its objects
    are cut with every channel picked, and the channel names travel into the result."""
    field = ticlust.nuclei_field(n=20, shape=(160, 160), seed=1)
    viewer = make_napari_viewer()
    viewer.add_image(field.image, name="DNA")
    viewer.add_image(field.image[::-1, ::-1].copy(), name="Actin")
    viewer.add_labels(field.labels, name="masks")
    widget = dock(viewer)
    assert widget.source is widget.field
    widget.field.pick("DNA", "Actin", labels="masks")
    widget.form.method.value, widget.form.k.value = "kmeans", 2
    run_to_end(qtbot, widget)
    objects = viewer.layers["DNA objects"]
    assert objects.data.ndim == 4 and objects.data.shape[1] == 2          # N×C×H×W crops of both channels
    assert widget.result.prototypes.shape[-1] == 2 and widget.result.config["channels"] == ["DNA", "Actin"]
    assert "DNA objects by cluster" in viewer.layers


@pytest.mark.parametrize("shape, rgb", [((12, 32, 32), False), ((12, 2, 64, 64), False), ((12, 64, 64, 2), False),
                                        ((12, 24, 40, 3), True), ((6, 96, 96), False)])
def test_every_layout_is_framed_after_run(dock, run_to_end, make_napari_viewer, qtbot, shape, rgb):
    """After Run the stack, its prototype mosaic and the inspector are all on the canvas, whatever the input's shape (a
    channel-first N×2×64×64 stack was cut at both canvas edges)."""
    rng = np.random.default_rng(0)
    data = rng.random(shape).astype(np.float32)
    viewer = make_napari_viewer(show=True)
    viewer.window.resize(1400, 900)
    viewer.add_image(data, name="s", rgb=rgb)
    widget = dock(viewer)
    widget.form.k.value = 3
    run_to_end(qtbot, widget)
    qtbot.waitUntil(lambda: "s inspector" in viewer.layers and not widget.busy, timeout=60_000)
    (top, left), (bottom, right) = L.visible_box(viewer)
    for name in ("s", "s prototypes", "s inspector"):
        (y0, x0), (y1, x1) = L.field_extent(viewer.layers[name])
        assert top <= y0 and left <= x0 and bottom >= y1 and right >= x1, (name, (top, left, bottom, right),
                                                                           (y0, x0, y1, x1))


def test_the_dock_is_under_layers_classify_and_plugins(make_napari_viewer):
    """napari's own menus where a user looks: Layers > Classify and Plugins > ticlust open the one dock."""
    from napari._app_model import get_app_model

    make_napari_viewer()
    app = get_app_model()
    for menu in ("napari/layers/classify", "napari/plugins"):
        ids = {getattr(item, "command", None) and item.command.id for item in app.menus.get_menu(menu)}
        assert "napari-ticlust.widget" in ids, (menu, ids)


def test_save_selected_layers_writes_the_object_table_and_the_result(dock, run_to_end, make_napari_viewer, qtbot,
                                                                    tmp_path):
    """File > Save Selected Layers: the painted field writes its per-object table (CSV), the layer a result was
    fitted on writes the result (.npz and its CSV); napari-ticlust's writers, found by napari for those layers."""
    viewer = make_napari_viewer()
    viewer.open_sample("napari-ticlust", "nuclei")
    widget = dock(viewer)
    widget.field.pick("nuclei", labels="nuclei labels")
    widget.form.k.value = 3
    run_to_end(qtbot, widget)
    painted = viewer.layers["nuclei objects by cluster"]
    viewer.layers.selection = {painted}
    written = viewer.layers.save(str(tmp_path / "objects.csv"), selected=True, plugin="napari-ticlust")
    table = pd.read_csv(written[0])
    assert len(table) == widget.result.n and {"label", "cluster", "score", "centroid_y"} <= set(table.columns)
    assert table["cluster"].tolist() == widget.result.labels.tolist()
    viewer.layers.selection = {viewer.layers["nuclei objects"]}
    written = viewer.layers.save(str(tmp_path / "result.npz"), selected=True, plugin="napari-ticlust")
    assert ticlust.load_result(written[0]).labels.tolist() == widget.result.labels.tolist()
    assert (tmp_path / "result.csv").exists()


def test_each_part_is_written_once():
    """One rollback, one undo, one inspector, one latest-request-wins, one warm-up, one progress line in _napari/."""
    import ast
    import pathlib

    import ticlust._napari as room

    defined: dict[str, list[str]] = {}
    for path in pathlib.Path(room.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                defined.setdefault(node.name, []).append(path.name)
    for name in ("Rollback", "Latest", "Inspector", "warm_up", "show_progress", "undo", "start_worker", "RunButton"):
        assert len(defined.get(name, [])) == 1, (name, defined.get(name))
    text = "".join(p.read_text() for p in pathlib.Path(room.__file__).parent.glob("*.py"))
    assert text.count("def restore(") == 1 and text.count("undo_stack.pop(") == 1
