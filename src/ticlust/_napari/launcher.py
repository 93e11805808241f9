"""What ``ticlust gui`` opens: napari fitted to the screen, a sample, and the ticlust dock set up to Run."""
from __future__ import annotations

from ..errors import InputError

GUI_SIZE = (1600, 1000)
#: The method and K that ``ticlust gui`` prepares for a sample's objects: st-kmeans with the objects route's
#: similarity warps finds the nuclei's three kinds (ACC 1.00 on the 287 objects of benchmarks/results/objects.md,
#: and on the 50 objects of this 320×320 sample field, tests/api/test_selector.py).
GUI_RUN = {"nuclei": ("st-kmeans", 3)}


def launch(sample_name: str = "nuclei") -> None:
    """Open :func:`gui_viewer` on ``sample_name`` and run napari until its window is closed; without napari,
    the one sentence that says how to install it."""
    try:
        import napari
    except ImportError:
        raise InputError("napari is not installed: install the GUI with `pip install 'napari-ticlust[gui]'`.") from None
    gui_viewer(sample_name)
    napari.run()


def gui_viewer(sample_name: str = "nuclei"):
    """napari sized to fit the screen (at most 1600x1000), a sample opened as File > Open Sample does, and the ticlust
    dock docked the way Plugins > ticlust docks it (napari's public window API only). A field with its segmentation
    (the nuclei) is set up for the objects route — its image and Labels layer picked, the method and K of ``GUI_RUN``
    once the methods are loaded — so that Run is the one click left; the other samples stay in File > Open Sample."""
    import napari
    from napari.layers import Image, Labels
    from qtpy.QtGui import QGuiApplication

    viewer = napari.Viewer(title="ticlust")
    screen = QGuiApplication.primaryScreen().availableGeometry()
    viewer.window.set_geometry(screen.left(), screen.top(), min(GUI_SIZE[0], screen.width()),
                               min(GUI_SIZE[1], screen.height()))
    opened = viewer.open_sample("napari-ticlust", sample_name)
    _, dock = viewer.window.add_plugin_dock_widget("napari-ticlust")
    image = next((layer for layer in opened if isinstance(layer, Image)), None)
    labels = next((layer for layer in opened if isinstance(layer, Labels)), None)
    method, k = GUI_RUN.get(sample_name, (None, None))
    if image is not None and labels is not None:
        dock.use(dock.field)
        dock.field.pick(image.name, labels=labels.name)

    def prepared() -> None:
        if method is not None:
            dock.form.method.value = method          # first: a method change resets K
            dock.form.k.value = k
        dock.show_tab("Fit")
        if image is not None and labels is not None:
            dock.say(f"Ready: Run cuts the objects of {labels.name} out of {image.name} and clusters them with "
                     f"{dock.form.method.value}, K = {dock.form.k.value}. The digits and other samples are in "
                     "File > Open Sample > ticlust.")
    dock.when_ready(prepared)
    return viewer
