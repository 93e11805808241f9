"""Render docs/object_map.png: the object map dock with 10⁶ generated points (12 Gaussian blobs, seed 0), left
coloured by cluster as a density, right zoomed onto a blob's edge and coloured by a score, drawn as points, with a
lasso selection and two highlighted objects.

  xvfb-run -a python docs/make_object_map.py docs/object_map.png
"""
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from qtpy.QtGui import QPainter, QPixmap
from qtpy.QtWidgets import QApplication

app = QApplication.instance() or QApplication([])
from ticlust._napari.object_map import ObjectMap  # noqa: E402  (pyqtgraph picks the Qt the app already runs)


def settle(widget) -> None:
    while widget.busy:
        app.processEvents()
        time.sleep(0.01)
    for _ in range(10):
        app.processEvents()


out = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent / "object_map.png")
rng = np.random.default_rng(0)
centers, spread = rng.uniform(-20, 20, (12, 2)), rng.uniform(0.6, 2.0, 12)
cluster = rng.integers(0, 12, 1_000_000)
xy = (centers[cluster] + rng.normal(size=(len(cluster), 2)) * spread[cluster, None]).astype(np.float32)
table = pd.DataFrame({"cluster": cluster, "score": rng.beta(5, 2, len(cluster)), "well": rng.choice(["A01", "B02"],
                                                                                                     len(cluster))})
shots = []
for zoomed in (False, True):
    widget = ObjectMap()
    widget.resize(640, 620)
    widget.show()
    widget.set_points(xy, table)
    settle(widget)
    if zoomed:
        widget.color_by("score")
        cx, cy = map(float, centers[0] + spread[0] * 1.5)
        widget.view.setRange(xRange=(cx - 1, cx + 1), yRange=(cy - 1, cy + 1), padding=0)
        angle = np.linspace(0, 2 * np.pi, 24, endpoint=False)
        widget.select_polygon(np.column_stack([cx + 0.5 * np.cos(angle) * (1 + 0.3 * np.sin(3 * angle)),
                                               cy + 0.5 * np.sin(angle)]))
        near = np.argsort(np.hypot(xy[:, 0] - cx - 0.6, xy[:, 1] - cy + 0.5))[:2]
        widget.highlight(near)
    settle(widget)
    shots.append(widget.grab())
picture = QPixmap(sum(s.width() for s in shots) + 10, max(s.height() for s in shots))
picture.fill()
painter = QPainter(picture)
painter.drawPixmap(0, 0, shots[0])
painter.drawPixmap(shots[0].width() + 10, 0, shots[1])
painter.end()
picture.save(str(out))
