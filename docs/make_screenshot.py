"""Render README screenshots: a real napari window with ticlust docked the way a user docks it
(Plugins > ticlust, i.e. ``add_plugin_dock_widget``), a sample opened from File > Open Sample, one Run,
and the view exactly as the widget leaves it (nobody presses Home).

Run under a 1600×1000 display; the README's series was made with
  xvfb-run -a -s "-screen 0 1600x1000x24" python docs/make_screenshot.py docs/screenshot.png digits kmeans 10 item=3
  xvfb-run -a -s "-screen 0 1600x1000x24" python docs/make_screenshot.py docs/landmarks.png shapes shape-kmeans 2
  xvfb-run -a -s "-screen 0 1600x1000x24" python docs/make_screenshot.py docs/dti.png glyphs dti-kmeans 4 max_epochs=25 n=300 item=3
  xvfb-run -a -s "-screen 0 1600x1000x24" python docs/make_screenshot.py docs/st-kmeans.png glyphs st-kmeans 4 n=200 item=10
  xvfb-run -a -s "-screen 0 1600x1000x24" python docs/make_screenshot.py docs/objects.png nuclei dti-kmeans 3 max_epochs=25 item=10
  xvfb-run -a -s "-screen 0 1600x1000x24" python docs/make_screenshot.py docs/curation.png glyphs st-kmeans 4 n=200 seed=1 curate=1
Arguments: output, sample (digits | glyphs | shapes | nuclei), method, K, then NAME=VALUE method parameters and
optionally item=I (the image under the slider, default 3; with curate=1 the first), n=N (only the first N images), seed=S and
curate=1 (after Run, the curation scenario of tests/napari/test_napari_curation.py by hand: a bad start with
two prototypes on glyph 0 and glyphs 2 and 3 under one, fixed with Split, Merge and Refine in the dock).
A sample with a Labels layer (nuclei) is run on its objects, and object I is selected by a click on the field.
"""
import sys
import tempfile
from pathlib import Path

import napari
import numpy as np
from qtpy.QtWidgets import QApplication

out = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent / "screenshot.png")
sample, method, k = (sys.argv[2:5] + ["digits", "kmeans", "10"][len(sys.argv[2:5]):])
settings = dict(arg.split("=", 1) for arg in sys.argv[5:])
item = int(settings.pop("item", 3))
first_n = settings.pop("n", None)
seed = int(settings.pop("seed", 0))
curate = settings.pop("curate", None) == "1"

viewer = napari.Viewer(title="ticlust")
viewer.window.resize(1600, 1000)
layer, *segmentation = viewer.open_sample("napari-ticlust", sample)
if first_n is not None:
    layer.data = layer.data[: int(first_n)]
    if "labels" in layer.metadata:
        layer.metadata = {**layer.metadata, "labels": layer.metadata["labels"][: int(first_n)]}
_, widget = viewer.window.add_plugin_dock_widget("napari-ticlust")


def settle():
    while widget.busy or not widget.ready:
        QApplication.processEvents()


settle()
if segmentation:
    widget.use(widget.field)
    widget.field.pick(layer.name, labels=segmentation[0].name)
elif isinstance(layer, napari.layers.Points):
    widget.use(widget.points)
    widget.points.input.value = layer.name
else:
    widget.stack.pick(layer.name)
form = widget.form
form.method.value = method          # K and the form follow the method; set them after it
form.k.value = int(k)
widget.seed.value = seed
for name, value in settings.items():
    form.param(name).value = type(form.param(name).value)(value)


widget.start()
settle()
if curate:
    from ticlust import curation

    y, good = np.asarray(layer.metadata["labels"]), widget.result
    by_glyph = [int(np.bincount(good.labels[y == g], minlength=good.k).argmax()) for g in range(4)]
    merged = curation.merge(good, by_glyph[2], by_glyph[3])
    bad = curation.split(layer.data, merged, int(np.bincount(merged.labels[y == 0]).argmax()))
    with tempfile.TemporaryDirectory() as folder:
        widget.load_result(bad.save(Path(folder) / "bad_start.npz"))
    widget.curate.select_clusters(int(np.bincount(widget.result.labels[y == 2]).argmax()))
    widget.curate.split()
    settle()
    widget.curate.select_clusters(*sorted(set(widget.result.labels[y == 0].tolist())))
    widget.curate.merge()
    widget.curate.refine()
    settle()
    widget.curate.select_clusters(int(widget.result.labels[viewer.dims.current_step[0]]))   # the shown image's
if segmentation:     # click on object ``item`` in the painted field, as a user would
    painted = viewer.layers[f"{layer.name} objects by cluster"]
    ys, xs = np.nonzero(painted.data == item + 1)
    assert widget.field.click_at((0, float(np.median(ys)), float(np.median(xs)))) == item
if segmentation or layer.ndim >= 3 and not layer.rgb or layer.ndim >= 4:
    if not segmentation and not curate:      # after curation the status line keeps Refine's accuracy
        step = list(viewer.dims.current_step)
        step[0] = item
        viewer.dims.current_step = tuple(step)
    for _ in range(5):
        QApplication.processEvents()
    settle()
else:
    layer.selected_data = {0}
widget.show_tab("Curate" if curate else "Fit")
for _ in range(30):
    QApplication.processEvents()
viewer.screenshot(str(out), canvas_only=False)
print(f"wrote {out}: {widget.status.value}")
viewer.close()
