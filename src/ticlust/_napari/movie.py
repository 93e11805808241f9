"""A movie's objects along their tracks: the field source's part for a T×Y×X field whose T×Y×X labels keep one id per
cell over time (btrack, ultrack, trackastra, TrackMate's label export).

After Run (and each edit or Undo) the result's clusters become states per track — ``ticlust.object_tracks`` from the
labels' ids, ``ticlust.track_states`` (smoothed along each track by the HMM of ``objects/states.py``) — read off the
GUI thread through the dock's "latest request wins" helper, then drawn: a napari Tracks layer ``<field> tracks``
coloured by state (the state a property of every point), and in the Tracks tab a strip of states over time, one row
per track, in the clusters' colours (pyqtgraph). A click on the strip shows that track's object at that frame (the
slider, the status line, the inspector).
"""
import numpy as np
import pyqtgraph as pg
from magicgui.widgets import ComboBox, Container, Label
from qtpy.QtCore import Qt

from . import layers as L
from .parts import said
from .plots import BACKGROUND

#: The smoothing the track states are drawn with: "free" learns the transitions from the tracks, "none" keeps the raw
#: states (the method's clusters), "cyclic" asks the states to follow one cycle (docs/time_lapse.md).
ORDERS = ("free", "cyclic", "none")


def movie_states(result, table, labels, order: str):
    """(TrackStates, napari tracks (data, properties, graph), strip (track ids, states B×T)) of a movie's objects, in
    the worker: the labels' ids are the tracks (checked, one piece each)."""
    from ..objects.states import track_states
    from ..objects.tracks import object_tracks

    tracks = object_tracks(table, labels=labels)
    states = track_states(result, tracks, order="free" if order == "none" else order, smooth=order != "none")
    return states, states.napari_tracks(table), states.strip(smoothed=order != "none")


class StripPlot(pg.PlotWidget):
    """One row per track, one column per frame, each cell its state's colour (dark: no object); ``clicked(row, frame)``
    is called with the cell under a click."""

    def __init__(self, clicked):
        super().__init__(background=BACKGROUND)
        self.clicked, self.ids = clicked, np.zeros(0, int)
        self.setMinimumHeight(150)
        item = self.getPlotItem()
        item.hideButtons()
        item.setMenuEnabled(False)
        item.setLabel("bottom", "frame")
        item.setLabel("left", "track")
        item.getViewBox().invertY(True)
        self.image = pg.ImageItem(axisOrder="row-major")
        item.addItem(self.image)
        self.scene().sigMouseClicked.connect(self._click)

    def show_strip(self, ids: np.ndarray, states: np.ndarray) -> None:
        colors = np.array([L.cluster_color(int(s)) for s in range(max(int(states.max()) + 1, 1))], np.float32)
        rgba = np.where((states >= 0)[..., None], colors[states.clip(0)], np.array([0.1, 0.1, 0.1, 1.0], np.float32))
        self.ids = np.asarray(ids)
        self.image.setImage((rgba * 255).astype(np.uint8), autoLevels=False, levels=(0, 255))
        self.setRange(xRange=(0, states.shape[1]), yRange=(0, len(ids)), padding=0)

    def _click(self, event) -> None:
        if event.button() != Qt.MouseButton.LeftButton or not self.ids.size:
            return
        point = self.getPlotItem().getViewBox().mapSceneToView(event.scenePos())
        row, frame = int(np.floor(point.y())), int(np.floor(point.x()))
        if 0 <= row < len(self.ids) and frame >= 0:
            self.clicked(int(self.ids[row]), frame)


class MovieTracks:
    """The field source's tracks part: the Tracks tab (the smoothing and the strip), the read of the states, the
    Tracks layer."""

    def __init__(self, source):
        self.source, self.dock, self.viewer = source, source.dock, source.viewer
        self.reading = self.dock.latest()
        self.states = None                      # the TrackStates drawn, or None
        self.order = ComboBox(label="smoothing", choices=list(ORDERS), value="free",
                              tooltip="free: an HMM along each track with transitions learned from the tracks; cyclic: "
                                      "one cycle; none: the raw clusters")
        self.summary = Label(value="Run on a movie (T×Y×X with labels whose ids are track ids) to see its tracks.")
        self.summary.native.setWordWrap(True)
        self.strip = StripPlot(self.open)
        self.page = Container(labels=True, widgets=[self.order, self.summary])
        self.page.native.layout().addWidget(self.strip)
        self.order.changed.connect(lambda _=None: self.dock.result is not None and self.show(self.dock.result))

    @property
    def busy(self) -> bool:
        return self.reading.busy

    def show(self, result) -> None:
        """The states of ``result``'s objects along the movie's tracks, read in a worker, then drawn (a field that
        is no movie: nothing)."""
        labels, table = self.source.labels_layer(), self.source.table
        if labels is None or np.ndim(labels.data) != 3 or table is None or len(table["label"]) != result.n:
            self.states = None
            return
        order, mask = self.order.value, np.asarray(labels.data)
        self.reading.ask((id(result), order), lambda: said(movie_states, result, table, mask, order,
                                                           what="Following the tracks"),
                         lambda done: self._draw(result, labels, *done))

    def _draw(self, result, labels, made, problem) -> None:
        if problem is not None:
            self.dock.refuse(problem)
            return
        self.states, (data, properties, graph), (ids, strip) = made
        name = f"{self.source.field_name} tracks"
        if name in self.viewer.layers:
            self.viewer.layers.remove(name)
        low, high = int(properties["state"].min()), int(properties["state"].max())
        from napari.utils.colormaps import Colormap

        colormap = Colormap([L.cluster_color(s) for s in range(low, high + 1)], interpolation="zero", name="states",
                            controls=np.linspace(0, 1, high - low + 2))
        self.viewer.add_tracks(data, properties=properties, graph=graph, name=name, color_by="state",
                               colormaps_dict={"state": colormap}, scale=labels.scale[-3:],
                               translate=labels.translate[-3:], tail_length=10)
        self.strip.show_strip(ids, strip)
        notes = " ".join(self.states.notes)
        self.summary.value = (f"{len(ids)} tracks over {self.states.frames} frames, {result.k} states "
                              f"({self.order.value}); a click on the strip shows that object. {notes}").strip()

    def open(self, track: int, frame: int) -> None:
        """The object of ``track`` at ``frame`` under the slider (the status line and the inspector follow)."""
        if self.states is None:
            return
        objects = self.states.objects
        hit = objects[(objects.track == track) & (objects.frame == frame)]
        if len(hit):
            self.source.show_item(int(hit["item"].iloc[0]))
