"""The dock's small plots: the loss/distortion history and the cluster sizes (pyqtgraph, the library the object map
uses: a PlotDataItem for the line, a BarGraphItem for the bars, no axes, no mouse interaction), and a plate's cluster
shares per well (stacked bars painted with Qt).
"""
import numpy as np
import pyqtgraph as pg
from qtpy.QtCore import QRectF, Qt
from qtpy.QtGui import QColor, QPainter
from qtpy.QtWidgets import QSizePolicy, QWidget

from .layers import cluster_color

BACKGROUND = (38, 41, 48)
LINE_COLOR = (255, 200, 60)
BAR_COLOR = (120, 170, 230)
CAPTION_COLOR = "#dcdcdc"


class SmallPlot(pg.PlotWidget):
    """A titled line plot (``kind="line"``) or bar plot (``kind="bars"``) of a few values."""

    def __init__(self, title: str, kind: str, parent=None):
        super().__init__(parent, background=BACKGROUND)
        self.title, self.kind = title, kind
        self.values = np.zeros(0)
        self.colors: list | None = None
        self.setMinimumSize(120, 72)
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)     # the dock sets the width
        self.setFixedHeight(72)
        self.setToolTip(title)
        item = self.getPlotItem()
        item.hideAxis("left")
        item.hideAxis("bottom")
        item.hideButtons()
        item.setMenuEnabled(False)
        item.setMouseEnabled(x=False, y=False)
        item.layout.setContentsMargins(4, 0, 4, 2)
        item.getViewBox().setDefaultPadding(0.0)
        self.line = pg.PlotDataItem(pen=pg.mkPen(LINE_COLOR, width=1.5))
        self.bars = pg.BarGraphItem(x=[], height=[], width=0.8, pen=None)
        item.addItem(self.line if kind == "line" else self.bars)
        self._show_caption()

    def set_values(self, values, colors=None) -> None:
        """Show these values (bars take one RGBA colour each, 0…1)."""
        self.values = np.asarray(values, dtype=float).reshape(-1)
        self.colors = None if colors is None else [QColor.fromRgbF(*map(float, c[:3])) for c in colors]
        v = np.where(np.isfinite(self.values), self.values, np.nan)
        finite = np.isfinite(v)
        if self.kind == "line":
            self.line.setData(np.flatnonzero(finite), v[finite])          # a missing value is stepped over
            lo, hi = (np.nanmin(v), np.nanmax(v)) if finite.any() else (0.0, 1.0)
            margin = 0.05 * (hi - lo) if hi > lo else 0.5
            self.setRange(xRange=(0, max(len(v) - 1, 1)), yRange=(lo - margin, hi + margin), padding=0)
        else:
            brushes = self.colors if self.colors else [pg.mkBrush(BAR_COLOR)] * len(v)
            self.bars.setOpts(x=np.arange(len(v)), height=np.nan_to_num(v), width=0.8, brushes=brushes)
            top = max(np.nanmax(v), 1e-12) if finite.any() else 1.0
            self.setRange(xRange=(-0.5, max(len(v), 1) - 0.5), yRange=(0, top), padding=0)
        self._show_caption()

    def caption(self) -> str:
        """The title and the range shown, e.g. "loss 0.512 → 0.317"."""
        v = self.values[np.isfinite(self.values)]
        if v.size == 0:
            return f"{self.title}: none"
        if self.kind == "line":
            return f"{self.title} {v[0]:.3g} → {v[-1]:.3g}"
        return f"{self.title} {int(v.min())}–{int(v.max())}"

    def _show_caption(self) -> None:
        self.getPlotItem().setTitle(self.caption(), color=CAPTION_COLOR, size="8pt", justify="left")


class SharePlot(QWidget):
    """Stacked bars, one per well (or condition): each cut into its clusters' shares, in the clusters' colours."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.shares = None
        self.by = ""
        self.setMinimumSize(200, 150)

    def set_shares(self, shares, by: str) -> None:
        """Show this share table (:func:`ticlust.plate.view.cluster_shares`), or nothing (None); repaint."""
        self.shares, self.by = shares, by
        self.setToolTip("" if shares is None else f"each cluster's share of the objects per {by}; Export shares… "
                                                  "writes the numbers")
        self.update()

    def paintEvent(self, _event) -> None:
        painter = QPainter(self)
        painter.fillRect(self.rect(), QColor(38, 41, 48))
        painter.setPen(QColor(220, 220, 220))
        title = "cluster share: no predictions yet" if self.shares is None else f"cluster share per {self.by}"
        painter.drawText(QRectF(4, 0, self.width() - 8, 16), Qt.AlignmentFlag.AlignLeft, title)
        if self.shares is not None and len(self.shares):
            self._bars(painter, QRectF(4, 20, self.width() - 8, self.height() - 40))
        painter.end()

    def _bars(self, painter: QPainter, area: QRectF) -> None:
        columns = [c for c in self.shares.columns if c.startswith("cluster_") or c == "rejected"]
        values = self.shares[columns].to_numpy(float)
        colors = [QColor.fromRgbF(*map(float, cluster_color(-1 if c == "rejected" else int(c[8:]))[:3]))
                  for c in columns]
        width = area.width() / len(values)
        painter.setPen(Qt.PenStyle.NoPen)
        for i, row in enumerate(values):
            bottom = area.bottom()
            for share, color in zip(row, colors):
                h = area.height() * share
                painter.setBrush(color)
                painter.drawRect(QRectF(area.left() + i * width + 0.1 * width, bottom - h, 0.8 * width, h))
                bottom -= h
        painter.setPen(QColor(220, 220, 220))
        names = [str(v) for v in self.shares[self.by]]
        every = max(1, int(np.ceil(max(len(n) for n in names) * 7 / max(width, 1))))     # labels that do not overlap
        for i in range(0, len(names), every):
            painter.drawText(QRectF(area.left() + i * width - width * (every - 1) / 2, area.bottom() + 2, width * every,
                                    16), Qt.AlignmentFlag.AlignHCenter, names[i])
