"""Render the README screenshot: napari with ticlust docked on the digits sample after a K-means run.

Run under a display (e.g. `xvfb-run -a -s "-screen 0 1600x1000x24" python docs/make_screenshot.py`).
"""
import sys
from pathlib import Path

import napari
from qtpy.QtWidgets import QApplication

from ticlust._napari.samples import digits
from ticlust._napari.widget import TiclustWidget

out = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent / "screenshot.png")
viewer = napari.Viewer(title="ticlust")
data, kwargs, _ = digits()[0]
viewer.add_image(data, **kwargs)
widget = TiclustWidget(viewer)
viewer.window.add_dock_widget(widget, name="ticlust", area="right")
viewer.window.resize(1500, 950)
worker = widget.start()
while widget.worker is not None:
    QApplication.processEvents()
viewer.dims.current_step = (3, 0, 0)
viewer.grid.enabled = False
viewer.reset_view()
for _ in range(20):
    QApplication.processEvents()
viewer.screenshot(str(out), canvas_only=False)
print(f"wrote {out}")
viewer.close()
