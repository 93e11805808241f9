"""The object map dock with a real napari viewer, on 10^6 generated points (12 Gaussian blobs on a circle): drawn
as a density and, zoomed in, as points; coloured by cluster and by a number; lasso and box selections and clicks
answer object indices (checked against a plain numpy point-in-polygon over every point); highlight, the
out-of-date banner, and one sentence for each bad input."""
import numpy as np
import pandas as pd
import pytest

napari = pytest.importorskip("napari")
pytest.importorskip("pyqtgraph")

from qtpy.QtCore import QPointF, Qt  # noqa: E402

import ticlust  # noqa: E402
from ticlust._napari import object_map as om  # noqa: E402
from ticlust._napari.layers import cluster_color  # noqa: E402
from ticlust._napari.object_map import ObjectMap  # noqa: E402

pytestmark = pytest.mark.gui
N, K = 1_000_000, 12


@pytest.fixture(scope="module")
def points():
    """(xy float32, columns): 12 blobs of 1 unit's spread on a circle of radius 20 (seed 0)."""
    rng = np.random.default_rng(0)
    angle = np.arange(K) * 2 * np.pi / K
    centers = 20 * np.column_stack([np.cos(angle), np.sin(angle)])
    cluster = rng.integers(0, K, N)
    xy = (centers[cluster] + rng.normal(size=(N, 2))).astype(np.float32)
    columns = pd.DataFrame({"cluster": cluster, "score": rng.random(N), "well": rng.choice(["A01", "B02"], N),
                            "plate": "P1"})
    return xy, columns


@pytest.fixture
def shown(points, make_napari_viewer, qtbot):
    """A viewer with the map docked and the points drawn."""
    viewer = make_napari_viewer()
    widget = ObjectMap(viewer)
    viewer.window.add_dock_widget(widget, area="right", name="object map")
    widget.setMinimumSize(500, 450)
    xy, columns = points
    before = xy.copy()
    widget.set_points(*points)
    settle(qtbot, widget)
    assert np.array_equal(xy, before)
    return viewer, widget


def settle(qtbot, widget) -> None:
    qtbot.waitUntil(lambda: not widget.busy, timeout=20_000)


def pixel(widget, x: float, y: float) -> np.ndarray:
    """The RGB (0…1) of the drawn picture's bin under the data point (x, y)."""
    region, (h, w) = widget.drawn_region()
    row = int(np.floor((y - region[1]) / (region[3] - region[1]) * h))
    col = int(np.floor((x - region[0]) / (region[2] - region[0]) * w))
    assert 0 <= row < h and 0 <= col < w
    return widget.detail_image.image[row, col, :3] / 255


def inside_polygon(xy: np.ndarray, polygon: np.ndarray) -> np.ndarray:
    """The textbook crossing-number test, over every point and edge: which points lie inside."""
    x, y = xy[:, 0].astype(float), xy[:, 1].astype(float)
    inside = np.zeros(len(xy), dtype=bool)
    for (ax, ay), (bx, by) in zip(polygon, np.roll(polygon, -1, axis=0)):
        crosses = (ay > y) != (by > y)
        with np.errstate(divide="ignore", invalid="ignore"):
            inside ^= crosses & (x < (bx - ax) * (y - ay) / (by - ay) + ax)
    return inside


def test_a_million_points_density_points_colours(shown, points, qtbot):
    _, widget = shown
    xy, columns = points
    assert widget.drawn_as == "density" and widget.count == N
    assert "1,000,000 objects" in widget.status.text()
    # coloured by cluster, in the field painting's colours: a blob's centre has its cluster's colour
    assert widget.color_combo.currentText() == "cluster"
    assert widget.legend.text().startswith("cluster (colours repeat): ")    # 12 clusters, 10 cluster colours
    assert "11 (" in widget.legend.text() and "more" not in widget.legend.text()
    for c in (0, 5):
        cx, cy = np.median(xy[columns["cluster"] == c], axis=0)
        assert np.allclose(pixel(widget, cx, cy), cluster_color(c)[:3], atol=0.12), c
    # by a number: a colormap over its range and a colour bar
    widget.color_by("score")
    settle(qtbot, widget)
    low, high = columns["score"].min(), columns["score"].max()
    assert widget.data.coloring.range == (low, high) and f"{low:.4g}" in widget.legend.text()
    assert not widget.colorbar.isHidden() and widget.color_combo.currentText() == "score"
    # the combo colours too; a column of one value is one colour, and the legend says so
    widget.color_by("well")
    settle(qtbot, widget)
    assert widget.legend.text().startswith("well: ") and "B02 (" in widget.legend.text()
    widget.color_combo.setCurrentText("plate")
    settle(qtbot, widget)
    assert len(np.unique(widget.data.slots_x)) == 1 and "for all 1,000,000 objects" in widget.legend.text()
    # zoomed in, the points themselves
    cx, cy = map(float, np.median(xy[columns["cluster"] == 3], axis=0))
    widget.view.setRange(xRange=(cx - 0.3, cx + 0.3), yRange=(cy - 0.3, cy + 0.3), padding=0)
    settle(qtbot, widget)
    assert widget.drawn_as == "points" and 0 < widget.count < om.POINTS_BELOW
    image, colors = widget.detail_image.image, widget.data.colors
    shades = {tuple(np.rint(c * 255).astype(int)) for c in colors} | {om.BACKGROUND + (255,)}
    shades |= {tuple(np.rint(np.append(c[:3] * 255 * 0.55, 255)).astype(int)) for c in colors}
    assert {tuple(p) for p in np.unique(image.reshape(-1, 4), axis=0)} <= shades
    # zoomed onto the outermost objects: the pixel under each has that object's cluster colour
    widget.color_by("cluster")
    outer = np.argsort(xy[:, 0])[-3:]
    lx, ly = map(float, xy[outer[-1]])
    widget.view.setRange(xRange=(lx - 1, lx + 0.2), yRange=(ly - 0.6, ly + 0.6), padding=0)
    settle(qtbot, widget)
    assert widget.drawn_as == "points"
    for i in outer:
        assert np.allclose(pixel(widget, *xy[i]), cluster_color(columns["cluster"][i])[:3], atol=0.01)
    widget.show_all()
    settle(qtbot, widget)
    assert widget.drawn_as == "density"


def test_lasso_box_and_click_answer_object_indices(shown, points, qtbot):
    _, widget = shown
    xy, _ = points
    # a concave lasso (a star) across two blobs
    angle = np.linspace(0, 2 * np.pi, 40, endpoint=False)
    radius = np.where(np.arange(40) % 2, 9.0, 24.0)
    star = np.column_stack([radius * np.cos(angle) + 3, radius * np.sin(angle) - 2])
    with qtbot.waitSignal(widget.selection_changed) as emitted:
        picked = widget.select_polygon(star)
    expected = np.flatnonzero(inside_polygon(xy, star))
    assert 10_000 < len(expected) < N and np.array_equal(picked, expected)
    assert np.array_equal(emitted.args[0], expected) and widget.selection is picked
    try:                                          # a second, independent check where matplotlib is installed
        from matplotlib.path import Path
    except ImportError:
        pass
    else:
        sample = np.random.default_rng(1).choice(N, 20_000, replace=False)
        assert np.array_equal(np.isin(sample, picked), Path(star).contains_points(xy[sample]))
    # a box, edges included
    with qtbot.waitSignal(widget.selection_changed) as emitted:
        boxed = widget.select_box(25.0, 5.0, 10.0, -5.0)
    x, y = xy[:, 0], xy[:, 1]
    assert np.array_equal(boxed, np.flatnonzero((x >= 10) & (x <= 25) & (y >= -5) & (y <= 5)))
    assert np.array_equal(emitted.args[0], boxed)
    # nothing inside: an empty array is emitted
    with qtbot.waitSignal(widget.selection_changed) as emitted:
        assert widget.select_polygon([(0, 0), (0.001, 0), (0, 0.001)]).size == 0
    assert isinstance(emitted.args[0], np.ndarray) and emitted.args[0].size == 0
    # a click at an object's coordinates answers that object; far from all, nothing
    with qtbot.waitSignal(widget.object_clicked) as clicked:
        assert widget.click_at(float(xy[123_456, 0]), float(xy[123_456, 1])) == 123_456
    assert clicked.args == [123_456]
    assert widget.click_at(0.0, 0.0) == -1


def test_mouse_box_drag_and_click(shown, points, qtbot):
    """The same through the mouse: a left drag in box mode selects, a click picks the nearest object."""
    _, widget = shown
    xy, columns = points
    cx, cy = map(float, np.median(xy[columns["cluster"] == 2], axis=0))
    widget.view.setRange(xRange=(cx - 2, cx + 2), yRange=(cy - 2, cy + 2), padding=0)
    settle(qtbot, widget)
    viewport = widget.canvas.viewport()

    def screen(x, y):
        return widget.canvas.mapFromScene(widget.view.mapViewToScene(QPointF(x, y)))

    def data(point):
        spot = widget.view.mapSceneToView(widget.canvas.mapToScene(point))
        return spot.x(), spot.y()

    widget.set_mode("box")
    assert widget.mode_combo.currentText() == "box"
    start, end = screen(cx - 1, cy - 1), screen(cx + 1, cy + 0.5)
    with qtbot.waitSignal(widget.selection_changed) as emitted:
        qtbot.mousePress(viewport, Qt.MouseButton.LeftButton, pos=start)
        for t in np.linspace(0, 1, 6)[1:]:
            qtbot.mouseMove(viewport, pos=start + (end - start) * t)
        qtbot.mouseRelease(viewport, Qt.MouseButton.LeftButton, pos=end)
    (ax, ay), (bx, by) = data(start), data(end)
    x, y = xy[:, 0], xy[:, 1]
    expected = np.flatnonzero((x >= min(ax, bx)) & (x <= max(ax, bx)) & (y >= min(ay, by)) & (y <= max(ay, by)))
    assert len(expected) > 1000 and np.array_equal(emitted.args[0], expected)
    # a lasso: a triangle drawn with the mouse selects what the textbook test finds inside the drawn path
    widget.mode_combo.setCurrentText("lasso")
    assert widget.mode == "lasso"
    qtbot.wait(600)                                       # not a double click
    corners = [screen(cx - 1.5, cy - 1), screen(cx + 1.5, cy - 1), screen(cx, cy + 1.5)]
    path = []
    for i in range(3):
        path += [corners[i] + (corners[(i + 1) % 3] - corners[i]) * t for t in np.linspace(0, 1, 5)[:-1]]
    with qtbot.waitSignal(widget.selection_changed) as emitted:
        qtbot.mousePress(viewport, Qt.MouseButton.LeftButton, pos=path[0])
        for point in path[1:]:
            qtbot.wait(40)                            # pyqtgraph drops moves that come faster than it draws
            qtbot.mouseMove(viewport, pos=point)
        qtbot.mouseRelease(viewport, Qt.MouseButton.LeftButton, pos=path[-1])
    drawn = np.array([data(point) for point in path])
    expected = np.flatnonzero(inside_polygon(xy, drawn))
    assert len(expected) > 1000 and np.array_equal(emitted.args[0], expected)
    assert len(widget.outline.xData) == len(path) + 2            # the drawn path, closed, stays shown
    qtbot.wait(600)
    near = int(np.argmin(np.hypot(x - cx, y - cy)))
    qtbot.wait(600)                                       # not a double click
    target = screen(float(xy[near, 0]) + 0.01, float(xy[near, 1]))
    with qtbot.waitSignal(widget.object_clicked) as clicked:
        qtbot.mouseClick(viewport, Qt.MouseButton.LeftButton, pos=target)
    px, py = data(target)
    assert clicked.args[0] == int(np.argmin(np.hypot(x - px, y - py)))


def test_highlight_and_the_stale_banner(shown, points, qtbot):
    _, widget = shown
    xy, _ = points
    widget.highlight([5, 17, 17])
    settle(qtbot, widget)
    assert widget.highlighted.tolist() == [5, 17] and len(widget.rings.data) == 2
    assert sorted(map(tuple, np.column_stack([widget.rings.data["x"], widget.rings.data["y"]]))) == \
        sorted(map(tuple, xy[[5, 17]].astype(float)))
    widget.highlight(np.arange(0, N, 2))                       # many: shaded, not ringed
    settle(qtbot, widget)
    assert len(widget.rings.data) == 0 and widget.ring_image.isVisible()
    widget.highlight([])
    settle(qtbot, widget)
    assert widget.highlighted.size == 0 and len(widget.rings.data) == 0 and not widget.ring_image.isVisible()
    with pytest.raises(ticlust.InputError, match="object indices 0…999999"):
        widget.highlight([N])
    # out of date: a banner with a Refresh button that asks for a refresh
    assert not widget.is_stale
    widget.mark_stale("3 objects moved to another cluster")
    assert widget.is_stale and widget.banner.isVisibleTo(widget)
    assert widget.banner_label.text().startswith("map is out of date") and "Refresh" in widget.banner_label.text()
    with qtbot.waitSignal(widget.refresh_requested):
        qtbot.mouseClick(widget.refresh_button, Qt.MouseButton.LeftButton)
    widget.clear_stale()
    assert not widget.is_stale


def test_bad_input_is_one_sentence(make_napari_viewer, qtbot):
    viewer = make_napari_viewer()
    widget = ObjectMap(viewer)
    viewer.window.add_dock_widget(widget, area="right")
    frame = pd.DataFrame({"cluster": [0, 1, 1]})
    xy = np.zeros((3, 2), np.float32)
    with pytest.raises(ticlust.InputError, match="no map to colour yet"):
        widget.color_by("cluster")
    cases = [
        (xy[:2], frame, "xy has 2 points but columns has 3 rows"),
        (np.array([[0, 0], [np.nan, 1], [2, 2]]), frame, "1 points with non-finite coordinates .* point 1"),
        (np.array([[0, 0], [np.inf, 1], [2, 2]]), frame, "non-finite"),
        (np.zeros((0, 2)), frame.iloc[:0], "no points"),
        (np.zeros((3, 3)), frame, r"\(N, 2\) array .* not shape \(3, 3\)"),
        ([[0, 0], [1], [2, 2]], frame, "rows of different lengths"),
        (np.array([["a", "b"]] * 3), frame, "real numbers"),
        (xy, {"cluster": [0, 1, 1]}, "pandas DataFrame"),
    ]
    for bad_xy, bad_columns, sentence in cases:
        with pytest.raises(ticlust.InputError, match=sentence) as error:
            widget.set_points(bad_xy, bad_columns)
        assert str(error.value).count(". ") == 0 and str(error.value).endswith(".")
    widget.set_points(xy + np.arange(3)[:, None], frame.assign(score=[0.5, np.nan, 2.0]))
    widget.color_by("score")                          # asked before the map is drawn: drawn coloured by score
    assert widget.select_box(-1, -1, 1, 1).tolist() == [0, 1]       # a selection waits for the index
    settle(qtbot, widget)
    assert widget.legend.text().startswith("score: 0.5 (dark) → 2 (yellow)") and "missing 1" in widget.legend.text()
    with pytest.raises(ticlust.InputError, match="no column 'size' to colour by; the columns are cluster, score"):
        widget.color_by("size")
    with pytest.raises(ticlust.InputError, match="selection mode 'circle'"):
        widget.set_mode("circle")
    with pytest.raises(ticlust.InputError, match="finite"):
        widget.select_polygon([(0, 0), (1, np.nan), (1, 1)])
    # a tiny map, all drawn as points; no columns at all is one colour
    assert widget.drawn_as == "points" and widget.count == 3
    widget.set_points(xy, pd.DataFrame(index=range(3)))
    settle(qtbot, widget)
    assert widget.legend.text() == "one colour: no columns" and widget.color_combo.count() == 0
    assert widget.select_box(-1, -1, 1, 1).tolist() == [0, 1, 2]


def test_the_maps_worker_pool_ends_with_the_widget(make_napari_viewer, qtbot):
    """The map's worker thread pool is shut down when the widget goes, also when a garbage collection frees it (a slot
    on ``destroyed`` could be cleared by that collection before Qt called it: a TypeError in the Qt event loop)."""
    import gc

    widget = ObjectMap(make_napari_viewer())
    pool = widget._pool
    widget.deleteLater()
    del widget
    qtbot.wait(50)
    gc.collect()
    with pytest.raises(RuntimeError, match="after shutdown"):
        pool.submit(print)
