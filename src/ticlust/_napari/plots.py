"""Two small plots for the dock: the loss/distortion history and the cluster sizes.

Drawn with pyqtgraph, the library the object map uses: a PlotDataItem for the line, a BarGraphItem for the bars,
no axes (the caption gives the range) and no mouse interaction (a sparkline, not a chart to explore).
"""
import numpy as np
import pyqtgraph as pg
from qtpy.QtGui import QColor

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
