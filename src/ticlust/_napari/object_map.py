"""The object map: every object of a plate as a point at its 2-D map coordinates, coloured by a column.

Drawn with pyqtgraph (measured against biaplotter, datashader and napari's own canvas in docs/object_map.md).
Where many points overlap (POINTS_BELOW or more in the drawn region) the map is a density image aggregated with
numpy at screen resolution; zoomed in, it is the points themselves, each a disc of POINT_RADIUS screen pixels in its
own colour; both are one pyqtgraph ImageItem. (ScatterPlotItem styles each point with Python objects: 50,000 of them
set off garbage collections of ~200 ms in napari's process.) Panning and zooming only move what is drawn; the
picture is made again in a worker thread once the view has rested RENDER_DELAY_MS. Lasso and box selections and
clicks answer object indices (rows of the table given to ``set_points``), found through a ``PointIndex``: the
points kept sorted by x and by y, so a box, a polygon or a click reads only the points near it.
"""
from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyqtgraph as pg
from qtpy.QtCore import QRectF, Qt, QTimer, Signal
from qtpy.QtGui import QColor, QImage, QPixmap
from qtpy.QtWidgets import (QComboBox, QFrame, QHBoxLayout, QLabel, QPushButton, QSizePolicy, QVBoxLayout,
                            QWidget)

from ..errors import InputError
from .layers import cluster_color
from .parts import on_destroyed

POINTS_BELOW = 50_000       # the points themselves are drawn when fewer than this are in the drawn region
PAD = 0.25                  # the drawn region reaches this fraction of the view beyond each side (pans stay filled)
BIN_PX = 1                  # screen pixels per density bin
MAX_BINS = 2048             # density bins per side at most
RENDER_DELAY_MS = 120       # the view must rest this long before the picture is made again
BASE_BINS = 512            # bins per side of the coarse picture of the whole map
RINGS_BELOW = 1000          # highlighted objects in the region are ringed below this count, else shaded
CLICK_PX = 8                # a click picks the nearest object within this many screen pixels
POINT_RADIUS = 2.5          # drawn points' radius in bins (screen pixels), the outer pixel ring darker
MAX_CATEGORIES = 64         # an integer column with at most this many values is coloured as categories
LEVELS = 64                 # colour levels of a numeric column
LEGEND_ROWS = 12            # categories listed in the legend at most
BACKGROUND = (24, 26, 32)
MISSING_COLOR = np.array([0.45, 0.45, 0.45, 1.0])
CATEGORY_COLORS = np.array([     # a fixed palette for categories that are not clusters (colours repeat after 20)
    [0.12, 0.47, 0.71], [0.68, 0.78, 0.91], [1.00, 0.50, 0.05], [1.00, 0.73, 0.47], [0.17, 0.63, 0.17],
    [0.60, 0.87, 0.54], [0.84, 0.15, 0.16], [1.00, 0.60, 0.59], [0.58, 0.40, 0.74], [0.77, 0.69, 0.84],
    [0.55, 0.34, 0.29], [0.77, 0.61, 0.58], [0.89, 0.47, 0.76], [0.97, 0.71, 0.82], [0.50, 0.50, 0.50],
    [0.78, 0.78, 0.78], [0.74, 0.74, 0.13], [0.86, 0.86, 0.55], [0.09, 0.75, 0.81], [0.62, 0.85, 0.90],
])
MODES = ("lasso", "box", "pan")


class PointIndex:
    """The points sorted by x and by y (float64, exact copies of the float32 input): the rows in a box, in a
    polygon, in a region or nearest a spot, each found by reading only the slice of points near it."""

    def __init__(self, xy: np.ndarray):
        self.xy = xy
        self.x_order = np.argsort(xy[:, 0]).astype(np.int32)
        self.y_order = np.argsort(xy[:, 1]).astype(np.int32)
        self.xx, self.xy_ = (xy[self.x_order, 0].astype(float), xy[self.x_order, 1].astype(float))
        self.yx, self.yy = (xy[self.y_order, 0].astype(float), xy[self.y_order, 1].astype(float))

    def __len__(self) -> int:
        return len(self.xy)

    def x_window(self, x0: float, x1: float) -> slice:
        """The slice of the x-sorted points with x0 ≤ x ≤ x1."""
        return slice(int(np.searchsorted(self.xx, x0, "left")), int(np.searchsorted(self.xx, x1, "right")))

    def y_window(self, y0: float, y1: float) -> slice:
        """The slice of the y-sorted points with y0 ≤ y ≤ y1."""
        return slice(int(np.searchsorted(self.yy, y0, "left")), int(np.searchsorted(self.yy, y1, "right")))

    def box(self, x0: float, y0: float, x1: float, y1: float) -> np.ndarray:
        """The rows with x0 ≤ x ≤ x1 and y0 ≤ y ≤ y1, ascending (read along the narrower of the two sorts)."""
        (x0, x1), (y0, y1) = sorted((x0, x1)), sorted((y0, y1))
        sx, sy = self.x_window(x0, x1), self.y_window(y0, y1)
        if sx.stop - sx.start <= sy.stop - sy.start:
            other, order, lo, hi = self.xy_[sx], self.x_order[sx], y0, y1
        else:
            other, order, lo, hi = self.yx[sy], self.y_order[sy], x0, x1
        return np.sort(order[(other >= lo) & (other <= hi)]).astype(np.int64)

    def polygon(self, vertices) -> np.ndarray:
        """The rows inside the closed polygon (even-odd rule, a point on a lower edge counts), ascending.

        The points of the polygon's bounding box stay sorted by y, so each edge toggles only the points whose y
        lies in its own span: the work is the points times the edges a horizontal line crosses, not times all
        edges."""
        v = np.asarray(vertices, dtype=float)
        (x0, y0), (x1, y1) = v.min(0), v.max(0)
        s = self.y_window(y0, y1)
        keep = (self.yx[s] >= x0) & (self.yx[s] <= x1)
        px, py, rows = self.yx[s][keep], self.yy[s][keep], self.y_order[s][keep]
        inside = np.zeros(len(py), dtype=bool)
        for (ax, ay), (bx, by) in zip(v, np.roll(v, -1, axis=0)):
            if ay == by:
                continue
            a, b = np.searchsorted(py, min(ay, by), "left"), np.searchsorted(py, max(ay, by), "left")
            if a < b:
                inside[a:b] ^= px[a:b] < ax + (py[a:b] - ay) * (bx - ax) / (by - ay)
        return np.sort(rows[inside]).astype(np.int64)

    def nearest(self, x: float, y: float, rx: float, ry: float) -> int:
        """The row nearest (x, y) within the ellipse of radii (rx, ry), or -1 if there is none."""
        s = self.x_window(x - rx, x + rx)
        d = ((self.xx[s] - x) / rx) ** 2 + ((self.xy_[s] - y) / ry) ** 2
        if d.size == 0 or d.min() > 1.0:
            return -1
        return int(self.x_order[s][int(np.argmin(d))])

    def region(self, x0: float, y0: float, x1: float, y1: float) -> tuple[slice, np.ndarray]:
        """The x-sorted slice over [x0, x1] and the mask of its points with y0 ≤ y < y1."""
        s = self.x_window(x0, x1)
        y = self.xy_[s]
        return s, (y >= y0) & (y < y1)


def density_rgba(x, y, channels, keep, region, shape, alpha_floor: float = 0.4) -> np.ndarray:
    """An (H, W, 4) uint8 picture of points (x, y) over region (x0, y0, x1, y1), x0 ≤ x ≤ x1: each bin has the
    mean colour of its points (``channels``: three float64 arrays of r, g, b in 0…1) over the background, more
    opaque the more points it holds (log scale); empty bins are the background. Points outside ``keep`` are
    left out."""
    (x0, y0, x1, y1), (h, w) = region, shape
    ix = ((x - x0) * (w / (x1 - x0))).astype(np.int64)
    np.minimum(ix, w - 1, out=ix)
    t = (y - y0) * (h / (y1 - y0))
    np.floor(t, out=t)
    np.clip(t, -1, h, out=t)                                    # far points must not overflow the bin number
    b = t.astype(np.int64)
    ok = (b >= 0) & (b < h) & keep
    b *= w
    b += ix
    b[~ok] = h * w                                              # the dropped bin
    count = np.bincount(b, minlength=h * w + 1)[:-1].astype(np.float32)
    opacity = np.log1p(count) * np.float32(1 / np.log1p(max(float(count.max()), 1.0)))
    opacity = np.where(count > 0, alpha_floor + (1 - alpha_floor) * opacity, 0).astype(np.float32)
    per_point = opacity / np.maximum(count, 1)
    out = np.empty((h * w, 4), dtype=np.uint8)
    for c, (channel, back) in enumerate(zip(channels, BACKGROUND)):
        total = np.bincount(b, weights=channel, minlength=h * w + 1)[:-1].astype(np.float32)
        out[:, c] = total * per_point * 255 + (1 - opacity) * back + 0.5
    out[:, 3] = 255
    return out.reshape(h, w, 4)


class Coloring:
    """A column turned into colours: each point's slot (uint8) into ``colors`` (S, 4), and the legend."""

    def __init__(self, name: str, series: pd.Series):
        self.name = name
        if self.numeric(name, series):
            self._numbers(series.to_numpy(dtype=float))
        else:
            self._categories(series)

    @staticmethod
    def numeric(name: str, series: pd.Series) -> bool:
        """Floats and integer columns with more than MAX_CATEGORIES values get a colormap; the rest categories."""
        if name == "cluster" or pd.api.types.is_bool_dtype(series):
            return False
        if pd.api.types.is_float_dtype(series):
            return True
        return pd.api.types.is_integer_dtype(series) and series.nunique() > MAX_CATEGORIES

    def _categories(self, series: pd.Series) -> None:
        codes, uniques = pd.factorize(series, sort=True)
        if self.name == "cluster":
            colors = np.array([cluster_color(int(u)) for u in uniques]).reshape(-1, 4)
        else:
            colors = np.column_stack([CATEGORY_COLORS[np.arange(len(uniques)) % len(CATEGORY_COLORS)],
                                      np.ones(len(uniques))])
        self.repeats = len(np.unique(colors, axis=0)) < len(uniques)
        colors = np.vstack([colors, MISSING_COLOR])           # code -1 (a missing value) is the last row
        palette, slot_of_code = np.unique(colors, axis=0, return_inverse=True)
        self.colors = palette
        self.slot = slot_of_code.reshape(-1)[codes].astype(np.uint8)
        counts = np.bincount(codes + 1, minlength=len(uniques) + 1)
        self.entries = [(str(u), colors[i], int(counts[i + 1])) for i, u in enumerate(uniques)]
        if counts[0]:
            self.entries.append(("missing", MISSING_COLOR, int(counts[0])))
        self.range = None

    def _numbers(self, v: np.ndarray) -> None:
        self.repeats = False
        finite = np.isfinite(v)
        lut = pg.colormap.get("viridis").getLookupTable(nPts=LEVELS, alpha=True).astype(float) / 255
        self.colors = np.vstack([lut, MISSING_COLOR])
        lo, hi = (float(v[finite].min()), float(v[finite].max())) if finite.any() else (np.nan, np.nan)
        level = np.zeros(len(v)) if not hi > lo else (np.where(finite, v, lo) - lo) / (hi - lo) * (LEVELS - 1)
        self.slot = np.where(finite, np.rint(level), LEVELS).astype(np.uint8)
        self.range = (lo, hi)
        self.entries = [("missing", MISSING_COLOR, int((~finite).sum()))] if not finite.all() else []

    def legend_html(self) -> str:
        """The legend as rich text: a swatch, the value and its count per category, or the colormap's range."""
        if self.range is not None:
            lo, hi = self.range
            if np.isnan(lo):
                text = f"{self.name} is missing for every object"
            elif lo == hi:
                text = f"{self.name} = {lo:.4g} for every object (one colour)"
            else:
                text = f"{self.name}: {lo:.4g} (dark) → {hi:.4g} (yellow)"
            missing = "".join(f" · {_swatch(c)} missing {n:,}" for _, c, n in self.entries)
            return text + missing
        if len(self.entries) == 1:
            value, color, n = self.entries[0]
            return f"{_swatch(color)} {self.name} = {value} for all {n:,} objects (one colour)"
        shown = [f"{_swatch(c)} {value} ({n:,})" for value, c, n in self.entries[:LEGEND_ROWS]]
        more = len(self.entries) - LEGEND_ROWS
        tail = f" · … {more} more" if more > 0 else ""
        repeat = " (colours repeat)" if self.repeats else ""
        return f"{self.name}{repeat}: " + " · ".join(shown) + tail


def _swatch(color) -> str:
    return f'<span style="color:{QColor.fromRgbF(*map(float, color[:3])).name()}">■</span>'


@dataclass(frozen=True)
class MapData:
    """Points and one colouring, made in the worker and read-only after: the index, each point's colour slot in
    x order, and the coarse picture of the whole map."""
    index: PointIndex
    coloring: Coloring | None
    colors: np.ndarray                  # (S, 4) RGBA, 0…1
    slots_x: np.ndarray                 # (N,) uint8 slot of each point, in x order
    extent: tuple                       # (x0, y0, x1, y1) of the coarse picture
    base: np.ndarray                    # the coarse picture (H, W, 4) uint8


@dataclass(frozen=True)
class Picture:
    """One render of a region: the picture (density or points), what it shows, and the highlighted objects in
    it, as rings or as an image."""
    region: tuple
    count: int
    drawn_as: str                       # "density" or "points"
    image: np.ndarray
    ring: tuple                         # (x, y) of the highlighted objects drawn as rings
    ring_image: np.ndarray | None


def map_data(xy: np.ndarray, columns: pd.DataFrame, name: str | None, index: PointIndex | None = None) -> MapData:
    """The index (made unless given) and the colouring by column ``name`` (None: one colour)."""
    index = PointIndex(xy) if index is None else index
    coloring = None if name is None else Coloring(name, _column(columns, name))
    colors = np.array([[*CATEGORY_COLORS[0], 1.0]]) if coloring is None else coloring.colors
    slots_x = np.zeros(len(index), np.uint8) if coloring is None else coloring.slot[index.x_order]
    (x0, y0), (x1, y1) = index.xy.min(0).astype(float), index.xy.max(0).astype(float)
    dx, dy = max(x1 - x0, 1e-6) * 0.01, max(y1 - y0, 1e-6) * 0.01
    extent = (x0 - dx, y0 - dy, x1 + dx, y1 + dy)
    base = density_rgba(index.xx, index.xy_, channels(colors, slots_x), True, extent, (BASE_BINS, BASE_BINS))
    return MapData(index, coloring, colors, slots_x, extent, base)


def recolored(previous: Future | None, data: MapData | None, xy, columns, name: str) -> MapData:
    """The colouring by column ``name`` on the index of ``data``, or of the data job ``previous`` where that is
    still running (the one worker runs it first, so this never waits long)."""
    return map_data(xy, columns, name, (previous.result() if previous is not None else data).index)


def channels(colors: np.ndarray, slots: np.ndarray) -> list[np.ndarray]:
    """The r, g, b of each point (float64, what bincount weighs with) from its slot."""
    return [colors[:, c][slots] for c in range(3)]


def points_rgba(x, y, slots, colors, region, shape) -> np.ndarray:
    """An (H, W, 4) uint8 picture of points (x, y) over region as discs of POINT_RADIUS bins in their slot's colour
    (``colors`` (S, 4), 0…1), darker at the rim so that neighbours stay apart; later points and every centre
    are drawn over earlier rims."""
    (x0, y0, x1, y1), (h, w) = region, shape
    ix = np.floor((x - x0) * (w / (x1 - x0))).astype(np.int64)
    iy = np.floor((y - y0) * (h / (y1 - y0))).astype(np.int64)
    out = np.empty((h * w, 4), dtype=np.uint8)
    out[:] = BACKGROUND + (255,)
    full = np.rint(colors * 255).astype(np.uint8)
    rim = full.copy()
    rim[:, :3] = np.rint(colors[:, :3] * 255 * 0.55).astype(np.uint8)
    r = int(POINT_RADIUS)
    offsets = [(dx, dy) for dy in range(-r, r + 1) for dx in range(-r, r + 1) if dx * dx + dy * dy <= POINT_RADIUS ** 2]
    offsets.sort(key=lambda o: -(o[0] ** 2 + o[1] ** 2))       # the rim first, the centres last
    for dx, dy in offsets:
        px, py = ix + dx, iy + dy
        ok = (px >= 0) & (px < w) & (py >= 0) & (py < h)
        out[(py * w + px)[ok]] = (rim if dx * dx + dy * dy > 2 else full)[slots[ok]]
    return out.reshape(h, w, 4)


def picture(data: MapData, region: tuple, shape: tuple, highlighted: np.ndarray) -> Picture:
    """The region drawn as density (POINTS_BELOW points or more in it) or as points, with the highlight."""
    index = data.index
    s, keep = index.region(*region)
    count = int(np.count_nonzero(keep))
    if count >= POINTS_BELOW:
        drawn_as = "density"
        image = density_rgba(index.xx[s], index.xy_[s], channels(data.colors, data.slots_x[s]), keep, region, shape)
    else:
        drawn_as = "points"
        x, y, slots = index.xx[s][keep], index.xy_[s][keep], data.slots_x[s][keep]
        order = np.argsort(index.x_order[s][keep], kind="stable")      # drawn in object order, not by colour
        image = points_rgba(x[order], y[order], slots[order], data.colors, region, shape)
    ring, ring_image = (np.zeros(0), np.zeros(0)), None
    if highlighted.size:
        hx, hy = index.xy[highlighted, 0].astype(float), index.xy[highlighted, 1].astype(float)
        x0, y0, x1, y1 = region
        inside = (hx >= x0) & (hx <= x1) & (hy >= y0) & (hy < y1)
        if np.count_nonzero(inside) < RINGS_BELOW:
            ring = (hx[inside], hy[inside])
        else:
            white = [np.ones(len(hx))] * 3
            ring_image = density_rgba(hx, hy, white, inside, region, shape, alpha_floor=1.0)
            ring_image[..., 3] = np.where(ring_image[..., 0] == BACKGROUND[0], 0, 170)
    return Picture(region, count, drawn_as, image, ring, ring_image)


def _column(columns: pd.DataFrame, name: str) -> pd.Series:
    for c in columns.columns:
        if str(c) == name:
            return columns[c]
    raise InputError(f"there is no column {name!r} to colour by; the columns are "
                     f"{', '.join(map(str, columns.columns)) or 'none'}.")


class _MapViewBox(pg.ViewBox):
    """A ViewBox whose left drag draws a lasso or a box (in those modes) and whose click picks an object; the
    middle button pans and the wheel zooms in every mode."""

    def __init__(self, owner: "ObjectMap"):
        super().__init__(enableMenu=False)
        self.owner = owner

    def mouseDragEvent(self, ev, axis=None):
        if self.owner.mode == "pan" or ev.button() != Qt.MouseButton.LeftButton:
            return super().mouseDragEvent(ev, axis)
        ev.accept()
        spot = self.mapToView(ev.pos())
        if ev.isStart():
            self.owner.begin_drag(self.mapToView(ev.buttonDownPos()))
        self.owner.drag_to(spot)
        if ev.isFinish():
            self.owner.finish_drag()

    def mouseClickEvent(self, ev):
        if ev.button() != Qt.MouseButton.LeftButton:
            return super().mouseClickEvent(ev)
        ev.accept()
        spot = self.mapToView(ev.pos())
        self.owner.click_at(spot.x(), spot.y())


class ObjectMap(QWidget):
    """A dockable map of up to 10^6 objects: colour by any column, lasso/box selection and clicks answer object
    indices, objects picked elsewhere can be highlighted, and a banner says when the map is out of date.

    Indexing, colouring and aggregation run in one worker thread (numpy lets the GUI thread run while it counts);
    the GUI thread only swaps the finished picture in. ``busy`` is true until what was asked for is drawn."""

    selection_changed = Signal(object)      # np.ndarray of object indices (int64, ascending; empty for none)
    object_clicked = Signal(int)
    refresh_requested = Signal()
    _finished = Signal(object)              # (job number, kind, result) from the worker

    def __init__(self, viewer=None, parent=None):
        super().__init__(parent)
        self.viewer = viewer
        self.data: MapData | None = None
        self.xy = np.zeros((0, 2), np.float32)
        self.columns = pd.DataFrame()
        self.highlighted = np.zeros(0, dtype=np.int64)
        self.selection = np.zeros(0, dtype=np.int64)
        self.drawn_as = "nothing"          # "density" or "points": what the last picture drew
        self._fit_view = False
        self.count = 0                     # the points in the region the last picture drew
        self.mode = "lasso"
        self._drag: list[tuple[float, float]] = []
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="object-map")
        self._job = 0                      # the number of the newest data job; older results are dropped
        self._data_future: Future | None = None
        self._rendering = False            # a picture job is in the worker
        self._render_again = False         # the view changed while it was
        self._finished.connect(self._apply)

        self.banner = QFrame()
        self.banner.setStyleSheet("QFrame { background: #6b5a1e; color: white; }")
        self.banner_label = QLabel("map is out of date")
        self.refresh_button = QPushButton("Refresh")
        self.refresh_button.clicked.connect(self.refresh_requested.emit)
        row = QHBoxLayout(self.banner)
        row.setContentsMargins(6, 2, 6, 2)
        row.addWidget(self.banner_label, 1)
        row.addWidget(self.refresh_button)
        self.banner.hide()

        self.color_combo = QComboBox()
        self.color_combo.setToolTip("The column the points are coloured by")
        self.color_combo.currentTextChanged.connect(self._combo_changed)
        self.mode_combo = QComboBox()
        self.mode_combo.addItems(MODES)
        self.mode_combo.setToolTip("What a left drag does: draw a lasso, draw a box, or pan. The middle button pans "
                                   "and the wheel zooms in every mode; a click picks the nearest object.")
        self.mode_combo.currentTextChanged.connect(self.set_mode)
        controls = QHBoxLayout()
        controls.addWidget(QLabel("colour by"))
        controls.addWidget(self.color_combo, 1)
        controls.addWidget(QLabel("select"))
        controls.addWidget(self.mode_combo)

        self.view = _MapViewBox(self)
        self.view.setBackgroundColor(BACKGROUND)
        self.view.enableAutoRange(enable=False)
        self.canvas = pg.GraphicsView(background=BACKGROUND)
        self.canvas.setCentralItem(self.view)
        self.canvas.setMinimumSize(200, 200)
        self.canvas.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
        self.base_image = pg.ImageItem(axisOrder="row-major")      # the whole map, coarse: what a pan uncovers
        self.detail_image = pg.ImageItem(axisOrder="row-major")    # the drawn region at screen resolution
        self.ring_image = pg.ImageItem(axisOrder="row-major")      # many highlighted objects
        self.rings = pg.ScatterPlotItem(pxMode=True, size=2 * POINT_RADIUS + 7, symbol="o", brush=None,
                                        pen=pg.mkPen((255, 255, 255), width=2))
        self.outline = pg.PlotCurveItem(pen=pg.mkPen((255, 230, 80), width=1.5))
        for z, item in enumerate((self.base_image, self.detail_image, self.ring_image, self.rings, self.outline)):
            item.setZValue(10 * z - 20)
            self.view.addItem(item, ignoreBounds=True)

        self.legend = QLabel("no map yet")
        self.legend.setWordWrap(True)
        self.legend.setTextFormat(Qt.TextFormat.RichText)
        self.colorbar = QLabel()
        self.colorbar.hide()
        self.status = QLabel("")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(2, 2, 2, 2)
        layout.addWidget(self.banner)
        layout.addLayout(controls)
        layout.addWidget(self.canvas, 1)
        layout.addWidget(self.colorbar)
        layout.addWidget(self.legend)
        layout.addWidget(self.status)

        self._render_timer = QTimer(self)
        self._render_timer.setSingleShot(True)
        self._render_timer.setInterval(RENDER_DELAY_MS)
        self._render_timer.timeout.connect(self.render)
        self.view.sigRangeChanged.connect(lambda *_: self._render_timer.start())
        self.view.sigResized.connect(lambda *_: self._render_timer.start())
        on_destroyed(self, self._pool.shutdown, wait=False, cancel_futures=True)     # the pool ends with the widget

    @property
    def busy(self) -> bool:
        """True until the data, colouring and picture asked for are drawn."""
        return self._data_future is not None or self._rendering or self._render_timer.isActive()

    # ---- data -----------------------------------------------------------------------------------------
    def set_points(self, xy, columns: pd.DataFrame) -> None:
        """Show these objects: ``xy`` (N, 2) map coordinates, ``columns`` one row per object (any columns; cluster,
        else well, else the first column colours the map). Neither input is modified; the map is drawn by the
        worker (``busy`` until then)."""
        xy = _checked_points(xy)
        if not isinstance(columns, pd.DataFrame):
            raise InputError(f"columns must be a pandas DataFrame with one row per point, not "
                             f"{type(columns).__name__}.")
        if len(columns) != len(xy):
            raise InputError(f"xy has {len(xy):,} points but columns has {len(columns):,} rows; give one row per "
                             f"point.")
        self.xy, self.columns, self.data = xy, columns, None
        self.highlighted = self.selection = np.zeros(0, dtype=np.int64)
        self.outline.setData([], [])
        first = self._list_columns(columns, ("cluster", "well"))
        self._fit_view = True              # the new map is shown whole once its extent is known
        self.legend.setText(f"indexing {len(xy):,} objects…")
        self._submit_data(map_data, xy, columns, first)

    def update_columns(self, columns: pd.DataFrame) -> None:
        """New values for the same points (an edit renumbered clusters): the index, the view, the selection and the
        highlight stay; the map is recoloured by the column it shows (the first one when that column is gone)."""
        if not len(self.xy):
            raise InputError("there is no map to update yet; call set_points first.")
        if not isinstance(columns, pd.DataFrame) or len(columns) != len(self.xy):
            raise InputError(f"columns must be a pandas DataFrame with one row per point ({len(self.xy):,}).")
        self.columns = columns
        name = self._list_columns(columns, (self.color_combo.currentText(),))
        if name is not None:
            self._submit_data(recolored, self._data_future, self.data, self.xy, self.columns, name)

    def _list_columns(self, columns: pd.DataFrame, preferred: tuple[str, ...]) -> str | None:
        """The colour picker lists ``columns``' names, the first of ``preferred`` that is one of them chosen (else
        the first name), without signalling a choice (the caller colours the map). Returns the name chosen, or None
        when there are no columns."""
        names = [str(c) for c in columns.columns]
        name = next((c for c in preferred if c in names), names[0] if names else None)
        self.color_combo.blockSignals(True)
        self.color_combo.clear()
        self.color_combo.addItems(names)
        if name is not None:
            self.color_combo.setCurrentText(name)
        self.color_combo.blockSignals(False)
        return name

    def color_by(self, column_name: str) -> None:
        """Colour the points by this column: categories (clusters in the field painting's colours, other
        categories in a fixed palette) or a colormap for numbers. A column of one value gives one colour."""
        if not len(self.xy):
            raise InputError("there is no map to colour yet; call set_points first.")
        _column(self.columns, column_name)                  # the sentence for a column that is not there
        self.color_combo.blockSignals(True)
        self.color_combo.setCurrentText(column_name)
        self.color_combo.blockSignals(False)
        self._submit_data(recolored, self._data_future, self.data, self.xy, self.columns, column_name)

    def _submit_data(self, *job) -> None:
        self._job += 1
        number = self._job
        future = self._pool.submit(*job)
        self._data_future = future
        future.add_done_callback(lambda f: self._relay(number, "data", f))

    def _relay(self, number: int, kind: str, future: Future) -> None:
        """In the worker: hand the finished job to the GUI thread (a queued signal)."""
        try:
            self._finished.emit((number, kind, future))
        except RuntimeError:                # the widget is gone
            pass

    def _ready(self) -> MapData:
        """The current data, waiting for the worker where it is still being made (a programmatic call right
        after set_points). The index and the extent do not change with the colouring: a selection or a click
        while a new colouring is made reads them at once."""
        if self.data is None:
            self._take_data(self._data_future.result())
        return self.data

    def _apply(self, message) -> None:
        number, kind, future = message
        if kind == "data":
            if future is self._data_future:
                self._take_data(future.result())
            return
        self._rendering = False
        if number == self._job and self.data is not None and not self._render_again:
            self._draw(future.result())
        if self._render_again:
            self._render_again = False
            self.render()

    def _take_data(self, data: MapData) -> None:
        self._data_future = None
        self.data = data
        self.legend.setText("one colour: no columns" if data.coloring is None else data.coloring.legend_html())
        self._draw_colorbar(data.coloring)
        x0, y0, x1, y1 = data.extent
        self.base_image.setImage(data.base, autoLevels=False, levels=None)
        self.base_image.setRect(QRectF(x0, y0, x1 - x0, y1 - y0))
        if self._fit_view:
            self._fit_view = False
            self.show_all()
        self.render()

    def _draw_colorbar(self, coloring: Coloring | None) -> None:
        if coloring is None or coloring.range is None or not coloring.range[1] > coloring.range[0]:
            self.colorbar.hide()
            return
        bar = np.ascontiguousarray((coloring.colors[:LEVELS, :3] * 255).astype(np.uint8)[None].repeat(8, axis=0))
        image = QImage(bar.data, LEVELS, 8, 3 * LEVELS, QImage.Format.Format_RGB888).copy()
        self.colorbar.setPixmap(QPixmap.fromImage(image).scaled(200, 8))
        self.colorbar.show()

    # ---- drawing --------------------------------------------------------------------------------------
    def show_all(self) -> None:
        """Fit the whole map in the view."""
        if len(self.xy):
            x0, y0, x1, y1 = self._ready().extent
            self.view.setRange(QRectF(x0, y0, x1 - x0, y1 - y0), padding=0)

    def drawn_region(self) -> tuple[tuple[float, float, float, float], tuple[int, int]]:
        """The region a render draws (the view and PAD beyond each side) and its bins (rows, columns)."""
        (x0, x1), (y0, y1) = self.view.viewRange()
        dx, dy = (x1 - x0) * PAD, (y1 - y0) * PAD
        w = int(min(MAX_BINS, max(16, self.view.width() * (1 + 2 * PAD) / BIN_PX)))
        h = int(min(MAX_BINS, max(16, self.view.height() * (1 + 2 * PAD) / BIN_PX)))
        return (x0 - dx, y0 - dy, x1 + dx, y1 + dy), (h, w)

    def render(self) -> None:
        """Ask the worker for the region around the view: a density picture, or the points themselves when fewer
        than POINTS_BELOW lie in it; the highlighted objects on top. One job at a time: a view change while one
        runs asks again when it is done."""
        self._render_timer.stop()
        if self.data is None:
            return
        if self._rendering:
            self._render_again = True
            return
        self._rendering = True
        number, data, highlighted = self._job, self.data, self.highlighted
        future = self._pool.submit(picture, data, *self.drawn_region(), highlighted)
        future.add_done_callback(lambda f: self._relay(number, "picture", f))

    def _draw(self, pic: Picture) -> None:
        x0, y0, x1, y1 = pic.region
        rect = QRectF(x0, y0, x1 - x0, y1 - y0)
        self.drawn_as, self.count = pic.drawn_as, pic.count
        self.detail_image.setImage(pic.image, autoLevels=False, levels=None)
        self.detail_image.setRect(rect)
        self.rings.setData(*pic.ring)
        if pic.ring_image is not None:
            self.ring_image.setImage(pic.ring_image, autoLevels=False, levels=None)
            self.ring_image.setRect(rect)
        self.ring_image.setVisible(pic.ring_image is not None)
        self.status.setText(self._status_text())

    def _status_text(self) -> str:
        parts = [f"{len(self.xy):,} objects", f"{self.count:,} around the view, drawn as {self.drawn_as}"]
        if self.selection.size:
            parts.append(f"{self.selection.size:,} selected")
        if self.highlighted.size:
            parts.append(f"{self.highlighted.size:,} highlighted")
        return " · ".join(parts)

    # ---- selection, clicks, highlight -----------------------------------------------------------------
    def set_mode(self, mode: str) -> None:
        """What a left drag does: "lasso", "box" or "pan"."""
        if mode not in MODES:
            raise InputError(f"selection mode {mode!r} is not one of {', '.join(MODES)}.")
        self.mode = mode
        if self.mode_combo.currentText() != mode:
            self.mode_combo.setCurrentText(mode)

    def begin_drag(self, spot) -> None:
        self._drag = [(spot.x(), spot.y())]

    def drag_to(self, spot) -> None:
        if self.mode == "box":
            (ax, ay), (bx, by) = self._drag[0], (spot.x(), spot.y())
            self._drag = [(ax, ay), (bx, by)]
            self.outline.setData([ax, bx, bx, ax, ax], [ay, ay, by, by, ay])
        else:
            self._drag.append((spot.x(), spot.y()))
            path = np.array(self._drag + self._drag[:1])
            self.outline.setData(path[:, 0], path[:, 1])

    def finish_drag(self) -> None:
        if self.mode == "box":
            (ax, ay), (bx, by) = self._drag[0], self._drag[-1]
            self.select_box(ax, ay, bx, by)
        else:
            self.select_polygon(self._drag)

    def select_polygon(self, vertices) -> np.ndarray:
        """Select the objects inside this polygon ((M, 2) data coordinates; fewer than 3 vertices select
        nothing): emits ``selection_changed`` and returns their indices."""
        v = np.asarray(vertices, dtype=float).reshape(-1, 2) if len(vertices) else np.zeros((0, 2))
        if not np.isfinite(v).all():
            raise InputError("the lasso's vertices must be finite numbers.")
        if not len(self.xy) or len(v) < 3:
            return self._select(np.zeros(0, dtype=np.int64))
        path = np.vstack([v, v[:1]])
        self.outline.setData(path[:, 0], path[:, 1])
        return self._select(self._ready().index.polygon(v))

    def select_box(self, x0: float, y0: float, x1: float, y1: float) -> np.ndarray:
        """Select the objects in the box between corners (x0, y0) and (x1, y1), edges included: emits
        ``selection_changed`` and returns their indices."""
        if not np.isfinite([x0, y0, x1, y1]).all():
            raise InputError("the box's corners must be finite numbers.")
        if not len(self.xy):
            return self._select(np.zeros(0, dtype=np.int64))
        self.outline.setData([x0, x1, x1, x0, x0], [y0, y0, y1, y1, y0])
        return self._select(self._ready().index.box(x0, y0, x1, y1))

    def _select(self, rows: np.ndarray) -> np.ndarray:
        self.selection = rows
        self.status.setText(self._status_text())
        self.selection_changed.emit(rows)
        return rows

    def clear_selection(self) -> None:
        """Forget the selection and its outline; emits an empty selection."""
        self.outline.setData([], [])
        self._select(np.zeros(0, dtype=np.int64))

    def click_at(self, x: float, y: float) -> int:
        """The object nearest the data point (x, y) within CLICK_PX screen pixels: emits ``object_clicked`` and
        returns its index, or returns -1 (and emits nothing) where there is none."""
        if not len(self.xy):
            return -1
        px, py = self.view.viewPixelSize()
        row = self._ready().index.nearest(x, y, CLICK_PX * px, CLICK_PX * py)
        if row >= 0:
            self.status.setText(f"object {row:,}")
            self.object_clicked.emit(row)
        return row

    def highlight(self, indices) -> None:
        """Ring these objects (e.g. picked on a field); an empty list clears the highlight."""
        n = len(self.xy)
        rows = np.asarray(indices).reshape(-1)
        if rows.size and (not np.issubdtype(rows.dtype, np.integer) or rows.min() < 0 or rows.max() >= n):
            raise InputError(f"highlight takes object indices 0…{n - 1}; got {rows.tolist()[:5]}"
                             f"{'…' if rows.size > 5 else ''}.")
        self.highlighted = np.unique(rows).astype(np.int64)
        self.render()

    # ---- out of date ----------------------------------------------------------------------------------
    def mark_stale(self, message: str = "") -> None:
        """Show the banner "map is out of date — Refresh" (with ``message``) and its Refresh button."""
        self.banner_label.setText("map is out of date" + (f" ({message})" if message else "") + " — Refresh")
        self.banner.show()

    def clear_stale(self) -> None:
        """Hide the out-of-date banner."""
        self.banner.hide()

    @property
    def is_stale(self) -> bool:
        return not self.banner.isHidden()

    def _combo_changed(self, name: str) -> None:
        if name and len(self.xy):
            self.color_by(name)


def _checked_points(xy) -> np.ndarray:
    """``xy`` as a new (N, 2) float32 array, or one sentence saying what is wrong with it."""
    try:
        a = np.asarray(xy)
    except (ValueError, TypeError):     # ragged lists and other things numpy cannot stack
        raise InputError("xy must be an (N, 2) array of map coordinates; it has rows of different lengths.") from None
    if a.ndim != 2 or a.shape[1] != 2:
        raise InputError(f"xy must be an (N, 2) array of map coordinates, not shape {a.shape}.")
    if len(a) == 0:
        raise InputError("xy has no points; give at least one object to map.")
    if not (np.issubdtype(a.dtype, np.number) and not np.issubdtype(a.dtype, np.complexfloating)):
        raise InputError(f"xy must hold real numbers, not {a.dtype}.")
    a = np.array(a, dtype=np.float32)
    if not np.isfinite(a).all():
        bad = ~np.isfinite(a).all(axis=1)
        raise InputError(f"xy has {int(bad.sum()):,} points with non-finite coordinates (the first is point "
                         f"{int(np.argmax(bad))}); give finite map coordinates.")
    return a
