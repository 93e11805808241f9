"""Two small plots for the dock (issue 18): the loss/distortion history and the cluster sizes.

Drawn with QPainter: ticlust does not depend on a plotting library, and two sparklines do not need one.
"""
import numpy as np
from qtpy.QtCore import QPointF, QRectF, Qt
from qtpy.QtGui import QColor, QPainter, QPen, QPolygonF
from qtpy.QtWidgets import QWidget

MARGIN = 4        # pixels around the drawing area
TITLE_H = 16      # pixels of the title line above it


class SmallPlot(QWidget):
    """A titled line plot (``kind="line"``) or bar plot (``kind="bars"``) of a few values."""

    def __init__(self, title: str, kind: str, parent=None):
        super().__init__(parent)
        self.title, self.kind = title, kind
        self.values = np.zeros(0)
        self.colors: list | None = None
        self.setMinimumSize(120, 72)
        self.setToolTip(title)

    def set_values(self, values, colors=None) -> None:
        """Show these values (bars take one RGBA colour each, 0…1); repaint."""
        self.values = np.asarray(values, dtype=float).reshape(-1)
        self.colors = None if colors is None else [QColor.fromRgbF(*map(float, c[:3])) for c in colors]
        self.update()

    def caption(self) -> str:
        """The title and the range shown, e.g. "loss 0.512 → 0.317"."""
        v = self.values[np.isfinite(self.values)]
        if v.size == 0:
            return f"{self.title}: none"
        if self.kind == "line":
            return f"{self.title} {v[0]:.3g} → {v[-1]:.3g}"
        return f"{self.title} {int(v.min())}–{int(v.max())}"

    def paintEvent(self, _event) -> None:
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        painter.fillRect(self.rect(), QColor(38, 41, 48))
        painter.setPen(QColor(220, 220, 220))
        painter.drawText(QRectF(MARGIN, 0, self.width() - 2 * MARGIN, TITLE_H),
                         Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter, self.caption())
        area = QRectF(MARGIN, TITLE_H + MARGIN, self.width() - 2 * MARGIN, self.height() - TITLE_H - 2 * MARGIN)
        v = np.where(np.isfinite(self.values), self.values, np.nan)
        if np.isfinite(v).any() and area.width() > 0 and area.height() > 0:
            (self._line if self.kind == "line" else self._bars)(painter, area, v)
        painter.end()

    def _line(self, painter: QPainter, area: QRectF, v: np.ndarray) -> None:
        lo, hi = np.nanmin(v), np.nanmax(v)
        y = (v - lo) / (hi - lo) if hi > lo else np.full_like(v, 0.5)
        x = np.arange(len(v)) / max(len(v) - 1, 1)
        points = [QPointF(area.left() + xi * area.width(), area.bottom() - yi * area.height())
                  for xi, yi in zip(x, y) if np.isfinite(yi)]
        painter.setPen(QPen(QColor(255, 200, 60), 1.5))
        painter.drawPolyline(QPolygonF(points))

    def _bars(self, painter: QPainter, area: QRectF, v: np.ndarray) -> None:
        top = max(np.nanmax(v), 1e-12)
        width = area.width() / len(v)
        painter.setPen(Qt.PenStyle.NoPen)
        for i, value in enumerate(np.nan_to_num(v)):
            painter.setBrush(self.colors[i] if self.colors else QColor(120, 170, 230))
            h = area.height() * value / top
            painter.drawRect(QRectF(area.left() + i * width + 0.1 * width, area.bottom() - h, 0.8 * width, h))
