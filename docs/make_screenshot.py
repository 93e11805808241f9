"""Render README screenshots: napari with ticlust docked on a sample after a run.

Run under a display, e.g.
  xvfb-run -a -s "-screen 0 1600x1000x24" python docs/make_screenshot.py docs/screenshot.png
  xvfb-run -a -s "-screen 0 1600x1000x24" python docs/make_screenshot.py docs/landmarks.png shapes shape-kmeans 2
  xvfb-run -a -s "-screen 0 1600x1000x24" python docs/make_screenshot.py docs/dti.png glyphs dti-kmeans 4 max_epochs=40
"""
import sys
from pathlib import Path

import napari
from qtpy.QtWidgets import QApplication

from ticlust._napari import samples
from ticlust._napari.widget import TiclustWidget

out = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent / "screenshot.png")
sample, method, k = (sys.argv[2:5] + ["digits", "kmeans", "10"][len(sys.argv[2:5]):])
settings = dict(arg.split("=", 1) for arg in sys.argv[5:])
viewer = napari.Viewer(title="ticlust")
data, kwargs, kind = getattr(samples, sample)()[0]
getattr(viewer, f"add_{kind}")(data, **kwargs)
widget = TiclustWidget(viewer)
viewer.window.add_dock_widget(widget, name="ticlust", area="right")
viewer.window.resize(1500, 950)
widget.method.value = method
widget.input.value = kwargs["name"]
widget.k.value = int(k)
for name, value in settings.items():
    widget.params[name].value = type(widget.params[name].value)(value)
worker = widget.start()
while widget.worker is not None:
    QApplication.processEvents()
if kind == "image":
    viewer.dims.current_step = (3, 0, 0)
    while widget._inspecting is not None:
        QApplication.processEvents()
else:
    viewer.layers[kwargs["name"]].visible = False
    viewer.layers[kwargs["name"]].selected_data = {0}
viewer.reset_view()
for _ in range(20):
    QApplication.processEvents()
viewer.screenshot(str(out), canvas_only=False)
print(f"wrote {out}")
viewer.close()
