"""The object map with 10^6 points, and the candidates it was chosen from: how long the map takes to appear, the
longest freeze of napari's GUI thread during a scripted pan/zoom and during a lasso of ~100,000 points, and the
memory the map adds.

    xvfb-run -a python benchmarks/object_map.py [--n 1000000] [--candidates ticlust,biaplotter,...]

Each candidate runs in its own process (a clean RSS) inside a real napari window (1600×1000, the map docked at
900×800 where it is a widget). The points are 12 Gaussian blobs of different sizes (seed 0), coloured by cluster.
A timer ticks every 5 ms in the GUI thread: the longest gap between two ticks is the longest time the window could
not react. The pan/zoom sequence is 8 zoom-ins by 1/0.7 towards one blob, 6 pans by a fifth of the view and 8
zoom-outs, one step every 60 ms (a brisk wheel), then the wait until the map is drawn again. The lasso is a
120-vertex circle around one blob, sized to hold ~100,000 points; its time is until the selection is known and
shown. Memory is the RSS after the interactions minus the RSS before the points were given (and the peak's rise).
Candidates:

- ticlust: ``ticlust._napari.object_map.ObjectMap`` (pyqtgraph; density ⇄ points; numpy in a worker thread).
- empty-plot: an empty pyqtgraph plot docked the same way and panned/zoomed the same way: the floor, what any
  repaint of a docked widget costs here (napari's window holds an OpenGL canvas, so Qt composes the whole window
  with OpenGL, Mesa's software renderer under Xvfb, on every repaint).
- pyqtgraph-scatter: pyqtgraph's ScatterPlotItem with every point (one item per cluster colour).
- datashader: datashader aggregates the view (count_cat by cluster, shaded) into a pyqtgraph ImageItem, in the GUI
  thread on each view change (no selection of its own: lasso not measured).
- biaplotter: biaplotter's CanvasWidget (matplotlib) with its 2-D histogram artist, its lasso (matplotlib Path).
- napari-points: a napari Points layer in the viewer's own vispy canvas (Mesa's software OpenGL under Xvfb here;
  napari's Points have box selection only: lasso not measured).

Prints one JSON line per candidate; ``--markdown`` prints the table rows too.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()
CANDIDATES = ("ticlust", "empty-plot", "pyqtgraph-scatter", "datashader", "biaplotter", "napari-points")
TICK_MS = 5
STEP_MS = 60
LASSO_TARGET = 100_000


def blobs(n: int, seed: int = 0):
    """(xy float32 (n, 2), cluster (n,), score (n,)): 12 Gaussian blobs of different sizes."""
    import numpy as np

    rng = np.random.default_rng(seed)
    centers = rng.uniform(-20, 20, (12, 2))
    spread = rng.uniform(0.6, 2.0, 12)
    cluster = rng.integers(0, 12, n)
    xy = (centers[cluster] + rng.normal(size=(n, 2)) * spread[cluster, None]).astype(np.float32)
    return xy, cluster, rng.random(n).astype(np.float32)


def rss_mb() -> tuple[float, float]:
    """(current RSS, peak RSS) of this process in MB."""
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


class Probe:
    """A 5 ms timer in the GUI thread: the longest gap between its ticks is the longest freeze."""

    def __init__(self):
        from qtpy.QtCore import QTimer

        self.ticks: list[float] = []
        self.timer = QTimer()
        self.timer.timeout.connect(lambda: self.ticks.append(time.perf_counter()))
        self.timer.start(TICK_MS)

    def run(self, steps, done=lambda: True, step_ms: int = STEP_MS) -> dict:
        """Run each step, process events for step_ms after each, then until done(): wall time and freeze."""
        import numpy as np
        from qtpy.QtWidgets import QApplication

        start = time.perf_counter()
        self.ticks = [start]
        for step in steps:
            step()
            until = time.perf_counter() + step_ms / 1000
            while time.perf_counter() < until:
                QApplication.processEvents()
                time.sleep(0.001)
        while not done():
            QApplication.processEvents()
            time.sleep(0.001)
        for _ in range(5):
            QApplication.processEvents()
        end = time.perf_counter()
        self.ticks.append(end)
        return {"wall_s": round(end - start, 3), "freeze_s": round(float(np.max(np.diff(self.ticks))), 3)}


def lasso_polygon(xy, cluster):
    """A 120-vertex circle around the largest blob's centre holding about LASSO_TARGET points."""
    import numpy as np

    biggest = np.bincount(cluster).argmax()
    center = np.median(xy[cluster == biggest], axis=0).astype(float)
    distance = np.sort(np.hypot(*(xy - center).T))
    radius = float(distance[LASSO_TARGET])
    angle = np.linspace(0, 2 * np.pi, 120, endpoint=False)
    return np.column_stack([center[0] + radius * np.cos(angle), center[1] + radius * np.sin(angle)]), center


def pan_zoom_steps(zoom_in, pan, zoom_out):
    return [zoom_in] * 8 + [pan] * 6 + [zoom_out] * 8


# ---- the candidates: each returns {"appear": …, "pan_zoom": …, "lasso": …} --------------------------------
def run_ticlust(viewer, probe, xy, cluster, score):
    import pandas as pd

    from ticlust._napari.object_map import ObjectMap

    widget = ObjectMap(viewer)
    viewer.window.add_dock_widget(widget, area="right", name="object map")
    widget.setMinimumSize(900, 800)
    probe.run([], step_ms=300)
    columns = pd.DataFrame({"cluster": cluster, "score": score})
    row = {"appear": probe.run([lambda: widget.set_points(xy, columns)], lambda: not widget.busy, step_ms=0)}
    polygon, center = lasso_polygon(xy, cluster)
    view = widget.view
    row["pan_zoom"] = probe.run(pan_zoom_steps(
        lambda: view.scaleBy(s=(0.7, 0.7), center=tuple(center)),
        lambda: view.translateBy(x=(view.viewRange()[0][1] - view.viewRange()[0][0]) / 5),
        lambda: view.scaleBy(s=(1 / 0.7, 1 / 0.7), center=tuple(center))), lambda: not widget.busy)
    widget.show_all()
    probe.run([], lambda: not widget.busy)
    picked = []

    def lasso():
        start = time.perf_counter()
        picked.append(widget.select_polygon(polygon))
        row["lasso_call_s"] = round(time.perf_counter() - start, 3)       # the point-in-polygon itself
    row["lasso"] = probe.run([lasso], lambda: not widget.busy)
    row["lasso"]["selected"] = int(len(picked[0]))
    row["drawn_as_zoomed"] = "density ⇄ points"
    return row


def run_empty_plot(viewer, probe, xy, cluster, score):
    import pyqtgraph as pg
    from qtpy.QtCore import QRectF

    plot = pg.PlotWidget()
    plot.setMinimumSize(900, 800)
    viewer.window.add_dock_widget(plot, area="right", name="empty")
    probe.run([], step_ms=300)
    view = plot.getViewBox()
    row = {"appear": probe.run([lambda: view.setRange(QRectF(-25, -25, 50, 50))], step_ms=100)}
    _, center = lasso_polygon(xy, cluster)
    row["pan_zoom"] = probe.run(pan_zoom_steps(
        lambda: view.scaleBy(s=(0.7, 0.7), center=tuple(center)),
        lambda: view.translateBy(x=(view.viewRange()[0][1] - view.viewRange()[0][0]) / 5),
        lambda: view.scaleBy(s=(1 / 0.7, 1 / 0.7), center=tuple(center))))
    return row


def run_pyqtgraph_scatter(viewer, probe, xy, cluster, score):
    import pyqtgraph as pg

    from ticlust._napari.layers import cluster_color

    plot = pg.PlotWidget()
    plot.setMinimumSize(900, 800)
    viewer.window.add_dock_widget(plot, area="right", name="scatter")
    probe.run([], step_ms=300)

    def show():
        for c in range(12):
            mine = cluster == c
            plot.addItem(pg.ScatterPlotItem(xy[mine, 0], xy[mine, 1], pen=None, size=3,
                                            brush=pg.mkBrush(*(cluster_color(c) * 255).astype(int))))
    row = {"appear": probe.run([show], step_ms=100)}
    _, center = lasso_polygon(xy, cluster)
    view = plot.getViewBox()
    row["pan_zoom"] = probe.run(pan_zoom_steps(
        lambda: view.scaleBy(s=(0.7, 0.7), center=tuple(center)),
        lambda: view.translateBy(x=(view.viewRange()[0][1] - view.viewRange()[0][0]) / 5),
        lambda: view.scaleBy(s=(1 / 0.7, 1 / 0.7), center=tuple(center))))
    return row


def run_datashader(viewer, probe, xy, cluster, score):
    import datashader as ds
    import datashader.transfer_functions as tf
    import numpy as np
    import pandas as pd
    import pyqtgraph as pg
    from qtpy.QtCore import QRectF

    from ticlust._napari.layers import cluster_color

    plot = pg.PlotWidget()
    plot.setMinimumSize(900, 800)
    viewer.window.add_dock_widget(plot, area="right", name="datashader")
    probe.run([], step_ms=300)
    frame = pd.DataFrame({"x": xy[:, 0], "y": xy[:, 1], "cluster": pd.Categorical(cluster)})
    keys = {c: "#%02x%02x%02x" % tuple((cluster_color(c)[:3] * 255).astype(int)) for c in range(12)}
    image = pg.ImageItem(axisOrder="row-major")
    plot.addItem(image)
    view = plot.getViewBox()

    def draw():
        (x0, x1), (y0, y1) = view.viewRange()
        canvas = ds.Canvas(plot_width=int(view.width()), plot_height=int(view.height()), x_range=(x0, x1),
                           y_range=(y0, y1))
        shaded = tf.shade(canvas.points(frame, "x", "y", ds.count_cat("cluster")), color_key=keys)
        rgba = np.asarray(shaded.to_numpy()).view(np.uint8).reshape(shaded.shape + (4,))
        image.setImage(rgba, autoLevels=False, levels=None)
        image.setRect(QRectF(x0, y0, x1 - x0, y1 - y0))

    def show():
        view.setRange(QRectF(-25, -25, 50, 50))
        draw()
        view.sigRangeChanged.connect(lambda *_: draw())
    row = {"appear": probe.run([show], step_ms=100)}
    _, center = lasso_polygon(xy, cluster)
    row["pan_zoom"] = probe.run(pan_zoom_steps(
        lambda: view.scaleBy(s=(0.7, 0.7), center=tuple(center)),
        lambda: view.translateBy(x=(view.viewRange()[0][1] - view.viewRange()[0][0]) / 5),
        lambda: view.scaleBy(s=(1 / 0.7, 1 / 0.7), center=tuple(center))))
    return row


def run_biaplotter(viewer, probe, xy, cluster, score):
    from biaplotter.plotter import CanvasWidget
    from biaplotter.selectors import BaseLassoSelector

    widget = CanvasWidget(viewer)
    widget.setMinimumSize(900, 800)
    viewer.window.add_dock_widget(widget, area="right", name="biaplotter")
    probe.run([], step_ms=300)

    def show():
        widget.active_artist.data = xy
        widget.canvas.draw()
    row = {"appear": probe.run([show], step_ms=100)}
    polygon, center = lasso_polygon(xy, cluster)
    axes = widget.axes

    def zoom(factor):
        def step():
            (x0, x1), (y0, y1) = axes.get_xlim(), axes.get_ylim()
            axes.set_xlim(center[0] + (x0 - center[0]) * factor, center[0] + (x1 - center[0]) * factor)
            axes.set_ylim(center[1] + (y0 - center[1]) * factor, center[1] + (y1 - center[1]) * factor)
            widget.canvas.draw()
        return step

    def pan():
        (x0, x1) = axes.get_xlim()
        axes.set_xlim(x0 + (x1 - x0) / 5, x1 + (x1 - x0) / 5)
        widget.canvas.draw()
    row["pan_zoom"] = probe.run(pan_zoom_steps(zoom(0.7), pan, zoom(1 / 0.7)))
    selector = BaseLassoSelector(axes, xy)
    picked = []

    def lasso():
        indices = selector.on_select(polygon)
        picked.append(indices)
        classes = widget.active_artist.color_indices
        classes = (classes if hasattr(classes, "__len__") else __import__("numpy").zeros(len(xy), int)).copy()
        classes[indices] = 1
        widget.active_artist.color_indices = classes
        widget.canvas.draw()
    row["lasso"] = probe.run([lasso], step_ms=100)
    row["lasso"]["selected"] = int(len(picked[0]))
    return row


def run_napari_points(viewer, probe, xy, cluster, score):
    import numpy as np

    from ticlust._napari.layers import cluster_color

    colors = np.array([cluster_color(c) for c in range(12)])[cluster]

    def show():
        viewer.add_points(xy[:, ::-1], face_color=colors, size=0.08, border_width=0, name="map")
        viewer.reset_view()
    row = {"appear": probe.run([show], step_ms=100)}
    _, center = lasso_polygon(xy, cluster)
    camera = viewer.camera

    def zoom(factor):
        def step():
            camera.center = (center[1], center[0])
            camera.zoom *= factor
        return step

    def pan():
        camera.center = (camera.center[0], camera.center[1] + 1000 / camera.zoom / 5)
    row["pan_zoom"] = probe.run(pan_zoom_steps(zoom(1 / 0.7), pan, zoom(0.7)))
    return row


IMPORTS = {"ticlust": ["ticlust._napari.object_map"], "pyqtgraph-scatter": ["pyqtgraph"], "empty-plot": ["pyqtgraph"],
           "datashader": ["pyqtgraph", "datashader", "datashader.transfer_functions"],
           "biaplotter": ["biaplotter.plotter"], "napari-points": []}
RUNNERS = {"ticlust": run_ticlust, "empty-plot": run_empty_plot, "pyqtgraph-scatter": run_pyqtgraph_scatter,
           "datashader": run_datashader, "biaplotter": run_biaplotter, "napari-points": run_napari_points}


def one(candidate: str, n: int) -> dict:
    """Measure one candidate in this process."""
    import napari
    from qtpy.QtWidgets import QApplication

    viewer = napari.Viewer(title="ticlust object map")
    viewer.window.resize(1600, 1000)
    for _ in range(20):
        QApplication.processEvents()
    probe = Probe()
    xy, cluster, score = blobs(n)
    start, (rss0, _) = time.perf_counter(), rss_mb()
    for module in IMPORTS[candidate]:
        importlib.import_module(module)
    before, peak_before = rss_mb()
    row_imports = {"import_s": round(time.perf_counter() - start, 2), "import_mb": round(before - rss0, 1)}
    row = {"candidate": candidate, "n": n, **row_imports, **RUNNERS[candidate](viewer, probe, xy, cluster, score)}
    after, peak = rss_mb()
    row["rss_delta_mb"], row["peak_rise_mb"] = round(after - before, 1), round(max(peak - peak_before, 0), 1)
    row["idle_freeze_s"] = probe.run([lambda: None], step_ms=1000)["freeze_s"]     # what the load alone gives
    viewer.close()
    return row


def markdown(row: dict) -> str:
    def cell(key):
        part = row.get(key)
        return "n/a" if part is None else f"{part['wall_s']:.2f} s / {part['freeze_s'] * 1000:.0f} ms"
    selected = f" ({row['lasso']['selected']:,} picked)" if row.get("lasso") else ""
    if "lasso_call_s" in row:
        selected += f", the polygon test {row['lasso_call_s'] * 1000:.0f} ms"
    return (f"| {row['candidate']} | {cell('appear')} | {cell('pan_zoom')} | {cell('lasso')}{selected} | "
            f"{row['rss_delta_mb']:.0f} MB (peak +{row['peak_rise_mb']:.0f}) | {row['import_s']:.1f} s, "
            f"{row['import_mb']:.0f} MB | {row['idle_freeze_s'] * 1000:.0f} ms |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--candidates", default=",".join(CANDIDATES))
    parser.add_argument("--one", help=argparse.SUPPRESS)         # the child process: measure this candidate
    parser.add_argument("--markdown", action="store_true", help="print the table rows too")
    parser.add_argument("--extra-path", default="", help="a folder added to sys.path (candidates installed apart)")
    args = parser.parse_args()
    if args.extra_path:
        sys.path.append(args.extra_path)
    sys.path.insert(0, str(HERE.parents[1] / "src"))
    if args.one:
        print(json.dumps(one(args.one, args.n)))
        return
    rows = []
    for candidate in args.candidates.split(","):
        command = [sys.executable, str(HERE), "--one", candidate, "--n", str(args.n), "--extra-path", args.extra_path]
        done = subprocess.run(command, capture_output=True, text=True, env=os.environ)
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        if done.returncode or not lines:
            print(json.dumps({"candidate": candidate, "error": done.stderr.strip().splitlines()[-3:]}), flush=True)
            continue
        rows.append(json.loads(lines[-1]))
        print(lines[-1], flush=True)
    if args.markdown:
        for row in rows:
            print(markdown(row))


if __name__ == "__main__":
    main()
