"""The plate panel: a plate in napari, from its files to its curated clustering, read the way a screen is read.

Pick a well and a field: its image, with its objects painted by cluster once the store has predictions
(``ticlust predict RESULT STORE``; before that, by object). Beside it, a gallery of each cluster sampled
across the plate; in the dock, each cluster's share per well (or per another manifest column), exportable
as CSV; and Apply result, which assigns with a loaded result the objects of the current field, or of an image
layer and its labels layer (no store needed: cut as the result's objects were). Opening a store, reading a
field, counting the shares and Apply result run in worker threads; what they read and compute comes from
:mod:`ticlust.plate.view` (no napari there), and this module draws it in the GUI thread. Closing the dock stops
its workers and draws nothing more.

Its tabs start the work (:mod:`ticlust._napari.plate_dock`): Extract a plate's files into a store, Fit on a sample,
Predict every object, Curate the result (move, outliers, merge, split, Undo, Refine, Re-predict) and Export; a click
on an object of the field (or a gallery tile) shows it in the inspector (:mod:`ticlust._napari.plate_inspector`).

No ``from __future__ import annotations``: napari finds the viewer parameter by its annotation object.
"""
import gc
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from magicgui.widgets import ComboBox, Container, Label, ProgressBar, PushButton
from napari.layers import Image, Labels
from napari.utils.notifications import show_error
from napari.viewer import Viewer
from qtpy.QtCore import QRectF, Qt
from qtpy.QtGui import QColor, QPainter
from qtpy.QtWidgets import QWidget

from ..errors import InputError
from ..events import Progress
from ..objects.crops import labels_fit
from ..plate.view import (GALLERY_PER_CLUSTER, assign_field, assign_objects, cluster_shares, condition_columns,
                          field_picture, field_span, field_starts, field_title, gallery_sample, load_store_result,
                          object_fields, read_predictions, write_shares)
from ..plate.store import ObjectStore
from . import layers as L
from .plate_dock import CurateSection, ExportSection, ExtractSection, FitSection, PredictSection
from .map_panel import PlateMap
from .plate_inspector import PlateInspector
from .workers import RunButton, said, show_progress, start_worker, when_closed

#: The panel's name in napari.yaml (Plugins > ticlust > …).
STORE_PANEL = "Plate (object store)"
PANEL_WIDTH = 380     # the dock's width in pixels, as the ticlust widget's
NO_STORE = ("No store open: press Open store… or drag a STORE.zarr folder onto napari. Load result… and Apply "
            "result also assign the objects of an image layer and its labels layer.")
TRANSPARENT = np.zeros(4)
#: The "apply to" choice that means the store's current field (the others are (image, labels) layer names).
FIELD = "field"


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
        colors = [QColor.fromRgbF(*map(float, L.cluster_color(-1 if c == "rejected" else int(c[8:]))[:3]))
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


@dataclass
class Gallery:
    """A store's gallery, made off the GUI thread: the tiles (channels first unless ``rgb``), the raster of their
    numbers (``factor`` raster pixels per tile pixel) and the objects shown per cluster (``metadata``)."""

    grid: np.ndarray
    rgb: bool
    raster: np.ndarray
    factor: int
    metadata: dict


def make_gallery(store: ObjectStore, predictions) -> Gallery | None:
    """Up to GALLERY_PER_CLUSTER crops of each cluster, drawn across the plate's fields: one row per cluster, its
    cluster number and size above its first crops (None before any prediction). Only the sampled crops are read."""
    if predictions is None:
        return None
    picked = gallery_sample(predictions)
    k = max(picked) + 1 if picked else 0
    columns = max(2, min(GALLERY_PER_CLUSTER, max((len(v) for v in picked.values()), default=0)))
    every = np.concatenate([v for v in picked.values()]) if picked else np.zeros(0, int)
    wanted = np.unique(every)
    crops = store.crops[wanted] if len(wanted) else np.zeros((0,) + store.crops.shape[1:])
    tiles = np.zeros((k * columns,) + store.crops.shape[1:], np.float32)
    texts, colors = [""] * (k * columns), [TRANSPARENT] * (k * columns)
    sizes = np.bincount(predictions["cluster"].to_numpy().clip(0), minlength=k)
    for c, members in picked.items():
        tiles[c * columns:c * columns + len(members)] = crops[np.searchsorted(wanted, members)]
        texts[c * columns], texts[c * columns + 1] = f"{c}", f"n={sizes[c]}"      # as the prototype numbers
        colors[c * columns] = colors[c * columns + 1] = L.cluster_color(c)
    scene = L.Scene(store.size, store.size, k * columns)
    grid = L.tiles_grid(tiles, scene, columns)
    rgb = grid.ndim == 3 and grid.shape[-1] == 3
    if grid.ndim == 3 and not rgb:
        grid = np.moveaxis(grid, -1, 0)
    raster, factor = L.text_raster(scene, columns, texts, colors)
    return Gallery(grid, rgb, raster, factor, {"ticlust_gallery": {c: v.tolist() for c, v in picked.items()},
                                               "columns": columns})


@dataclass
class OpenedStore:
    """Everything the panel shows of a store when it opens, read off the GUI thread: the store, its predictions'
    few columns, the gallery, the shares per ``by`` and the first field (its picture, or why it cannot be read)."""

    store: ObjectStore
    predictions: object
    gallery: Gallery | None
    by: str
    shares: object
    field_index: int
    picture: object
    problem: str | None
    starts: np.ndarray | None = None


def opened_store(path, field_index: int | None = None) -> OpenedStore:
    """Open the store at ``path`` and read what the panel shows first (the first field, or ``field_index``), and
    where each field's objects start in the table; an InputError when it is no (finished) store or its
    predictions do not match it."""
    store = ObjectStore(path)
    choices = condition_columns(store) + ["image"]
    predictions = read_predictions(store, ["field_index", "cluster", *choices])
    if predictions is not None:       # what shares are counted per, as categories: each count then reads codes
        for column in choices:        # (a million objects: 0.03 s, not 0.1-0.3 s of hashing strings)
            predictions[column] = predictions[column].astype("category")
    by = "well" if "well" in choices else choices[0]
    shares = cluster_shares(predictions, by) if predictions is not None else None
    first = int(store.fields["field_index"].iloc[0]) if field_index is None else int(field_index)
    try:
        picture, problem = field_picture(store, first), None
    except InputError as exc:
        picture, problem = None, str(exc)
    return OpenedStore(store, predictions, make_gallery(store, predictions), by, shares, first, picture, problem,
                       field_starts(store))


def _warm_up() -> None:
    """What the dock's first steps would otherwise do in the GUI thread, done in a worker when the dock opens: import
    the method registry (and torch: seconds), for the Fit tab's form, and what torch imports on a session's first
    fit (a thousand modules, held under the interpreter's lock for up to a second each: a tiny K-means fit of
    random pixels, thrown away); and napari's one-time costs of the first Image, Labels and Shapes layers and of
    painting by cluster (its colour-mapping kernels compiled by numba, its units registry), which froze the window
    for seconds on the first field painted by cluster. Layer models only: nothing is added to a viewer. Last, the
    garbage the imports left is collected here, so that the dock's :func:`freeze_heap` keeps none of it."""
    from napari.layers import Image, Labels, Shapes
    from napari.utils.colormaps import DirectLabelColormap, label_colormap
    from vispy.visuals.line.dash_atlas import DashAtlas

    from ..api import fit

    fit(np.random.default_rng(0).random((12, 8, 8)), "kmeans", k=2, device="cpu", progress=False)

    values = np.arange(600, dtype=np.int32)
    colors = {None: TRANSPARENT, 0: TRANSPARENT, **{i: L.cluster_color(i) for i in range(1, 600)}}
    for colormap in (DirectLabelColormap(color_dict=colors), label_colormap(50)):
        colormap.map(values)
    Image(np.zeros((8, 8), np.float32))
    for labels in (Labels(np.zeros((8, 8), np.int32), colormap=DirectLabelColormap(color_dict=colors)),
                   Labels(np.zeros((8, 8), np.int32), opacity=0.6)):      # and as a store's objects are made
        labels.refresh()
    DashAtlas()      # the dash patterns of vispy's lines (computed once): the first Labels layer's polygon overlay
    box = np.array([[0.0, 0.0], [0.0, 4.0], [4.0, 4.0], [4.0, 0.0]])   # the frames' and the grid's shapes (numba too)
    Shapes([box], shape_type="rectangle").add([box[:3]], shape_type="path")
    L.text_raster(L.Scene(8, 8, 2), 2, ["0", "1"], [L.cluster_color(0), L.cluster_color(1)])   # the fonts
    gc.collect()


def freeze_heap(frozen: bool) -> None:
    """Keep the objects alive now out of Python's full garbage collections (``gc.freeze``), or give them back
    (``gc.unfreeze``). With napari, Qt, torch and the method registry imported the interpreter tracks about half a
    million objects, and each full collection walks them all while holding the interpreter's lock: 0.2-1 s on a
    2-core machine, a freeze of the window whichever thread's allocation set it off (a worker's read, the first
    labels layer a store opens). Frozen, a collection walks only what was made since. The price: a cycle among the
    frozen objects that dies meanwhile (a layer the viewer had before the dock opened, deleted) is freed only once
    the dock gives them back, when it closes."""
    if frozen:
        gc.freeze()
    else:
        gc.unfreeze()


def _same(a, b) -> bool:
    """Whether two label images are equal (a millisecond; painting one anew is a hundred times that)."""
    return np.shape(a) == np.shape(b) and bool(np.array_equal(a, b))


class StorePanel(Container):
    """Dock widget for a plate: a field with its objects by cluster, a gallery, shares, Apply result, and the tabs
    that extract, fit, predict, curate and export it."""

    def __init__(self, viewer: Viewer):
        super().__init__(labels=True)
        self.viewer = viewer
        self.store: ObjectStore | None = None
        self.predictions = None          # the store's predictions (the columns shares and gallery need), or None
        self.shares = None               # the share table shown in the plot
        self.result = None               # a loaded result, for Apply result
        self.result_path: Path | None = None
        self.applied: tuple | None = None   # (field index, assignment columns, result file name) of the last Apply
        self.picture = None              # the field shown (plate_view.FieldPicture), or None
        self.loader = None               # Load result's worker
        self.opening = None              # the worker opening a store
        self.reading = None              # the worker reading a field
        self.counting = None             # the worker counting the shares
        self._wanted: int | None = None  # the field last asked for, and the one shown (or said unreadable)
        self._shown: int | None = None
        self._by_wanted: str | None = None  # the column shares were last asked per, and the one shown
        self.shares_by: str | None = None
        self.closed = False              # the dock was closed: its workers' late results are dropped
        self.has_wells = False           # whether the plate's manifest has a well column (a well picker)
        self._filling = False
        self.model = None                # the last fitted result of the dock's lineage (what aligns objects)
        self.predicted = None            # the result whose predictions the store holds, when the dock knows it
        self.undo_stack: list = []       # the dock's results before each edit
        self._renumbered: tuple | None = None   # (predicted, result, their renumbering): :meth:`renumbering`
        self.picked: list[int] = []      # store objects picked on the field or in the gallery
        self.starts = None               # where each field's objects start in the store's table
        self.runners: list = []          # the tabs' Run/Cancel buttons
        self._rollback: dict = {}        # layers as they were before a fit or refine (None: not there)
        self._then: str | None = None    # what to say once the store being opened is shown
        self._deferred = 0               # drawings waiting for the event loop's next turn (:meth:`later`)
        self._said_at = 0.0              # when a job's progress was last said in the status line

        self.open_button = PushButton(text="Open store…")
        self.summary = Label(label="store", value=NO_STORE)
        # choices are functions of the panel's state: napari calls reset_choices on a docked widget whenever
        # layers change, which would put back fixed lists
        self.well = ComboBox(label="well", choices=self._well_choices,
                             tooltip="The wells of the plate (the manifest's well column)")
        self.field = ComboBox(label="field", choices=self._field_choices,
                              tooltip="The fields of view (of the well): its image and objects")
        self.group_by = ComboBox(label="share per", choices=self._group_choices,
                                 tooltip="Which manifest column the cluster shares are counted per (well, "
                                         "condition, …)")
        self.export_button = PushButton(text="Export shares…", enabled=False)
        self.target = ComboBox(label="apply to", choices=self._target_choices,
                               tooltip="What Apply result assigns: the store's current field, or the objects of a "
                                       "labels layer in its image layer, cut as the result's objects were")
        self.load_button = PushButton(text="Load result…")
        self.apply_button = PushButton(text="Apply result", enabled=False)
        self.progress = ProgressBar(label="progress", min=0, max=1, value=0)
        self.status = Label(label="", value="")
        for label in (self.summary, self.status):
            label.native.setWordWrap(True)
        self.plot = SharePlot()
        self.extend([self.open_button, self.summary, self.well, self.field])
        self._make_tabs()
        self.extend([self.progress, self.status])
        self.native.setMinimumWidth(PANEL_WIDTH)

        self.open_button.changed.connect(self._ask_open)
        self.well.changed.connect(self._on_well)
        self.field.changed.connect(self._on_field)
        self.group_by.changed.connect(lambda _=None: self._filling or self.show_shares())
        self.export_button.changed.connect(self._ask_export)
        self.load_button.changed.connect(self._ask_load)
        self.apply_runner = RunButton(self.apply_button, self.apply_result, self.say, alive=self.alive)
        self.inspector = PlateInspector(self)
        self.object_map = PlateMap(self)     # every predicted object on a map, docked when a store opens
        viewer.mouse_drag_callbacks.append(self.inspector.on_click)
        self.importing = start_worker(_warm_up, finished=self._methods_ready, alive=self.alive)
        when_closed(self, StorePanel._dock_closed)

    def _make_tabs(self) -> None:
        """The work in tabs (the dock fits a 1000-pixel screen): Extract, Fit, Predict (with Load/Apply result),
        Curate, Shares (the plot and its export), Export."""
        from qtpy.QtWidgets import QTabWidget

        self.extract, self.fit, self.predict = ExtractSection(self), FitSection(self), PredictSection(self)
        self.curate, self.export = CurateSection(self), ExportSection(self)
        self.predict.extend([self.target, Container(widgets=[self.load_button, self.apply_button], layout="horizontal",
                                                    labels=False)])
        shares = Container(labels=True, widgets=[self.group_by])
        shares.native.layout().addWidget(self.plot)
        shares.append(self.export_button)
        self.tabs = QTabWidget()
        self.pages = [self.extract, self.fit, self.predict, self.curate, shares, self.export]
        for title, page in zip(("Extract", "Fit", "Predict", "Curate", "Shares", "Export"), self.pages):
            page.native.layout().addStretch(1)         # the widgets at the top of the tab, not spread over it
            self.tabs.addTab(page.native, title)
        self.native.layout().addWidget(self.tabs)

    def reset_choices(self, *_) -> None:
        """napari calls this when layers change: the pickers in the tabs (apply to, share per) are reset too."""
        super().reset_choices()
        for page in self.pages:
            page.reset_choices()

    def show_tab(self, section) -> None:
        self.tabs.setCurrentWidget(section.native)

    # ---- a tab's job: progress, failure, cancel ------------------------------------------------------
    def busy_bar(self) -> None:
        """The progress bar as a busy indicator (a job with no steps to count yet)."""
        self.progress.max, self.progress.value = 0, 0

    def idle_bar(self) -> None:
        self.progress.max, self.progress.value = 1, 0

    def show_progress(self, event) -> None:
        """A job's Progress: the bar, and the stage, step, loss and ETA in the status line (``workers.show_progress``:
        a few times a second, and each stage's last step)."""
        if isinstance(event, Progress):
            self._said_at = show_progress(self.progress, self.say, event, self._said_at)

    def failed(self, exc: Exception) -> None:
        """A job stopped on an error (or an action was refused): one sentence in a napari notification and in the
        status line, the layers it touched put back."""
        message = self.gone() or (str(exc) if isinstance(exc, InputError) else f"{type(exc).__name__}: {exc}")
        self._undo_layers()
        show_error(message)
        self.say(f"Stopped: {message}")

    def gone(self) -> str | None:
        """The sentence for an open store whose folder was deleted or moved meanwhile (None: it is there)."""
        if self.store is None or (self.store.path / "zarr.json").is_file():
            return None
        return (f"The store {self.store.path.name} is gone (deleted or moved while it was open): open it again, or "
                "extract the plate again.")

    def job_finished(self, cancelled: bool, kept: str) -> None:
        """A job has stopped: controls back; after a Cancel the layers it touched are put back and ``kept`` said."""
        self.controls()
        self.idle_bar()
        if cancelled:
            self._undo_layers()
            self.say(f"Cancelled: {kept}.")
        self._rollback = {}

    def remember_layers(self) -> None:
        """Note the layers a fit or refine redraws (the prototypes, the inspected object), to put them back on a
        Cancel or a failure: their data, whether they were shown, whether they were still undrawn."""
        layers = self.viewer.layers
        self._rollback = {name: ((layers[name].data, layers[name].visible, not L.drawn(self.viewer, name))
                                 if name in layers else None) for name in self.inspector.layer_names()}

    def _undo_layers(self) -> None:
        for name, before in self._rollback.items():
            if name in self.viewer.layers:
                if before is None:
                    self.viewer.layers.remove(name)
                    continue
                layer = self.viewer.layers[name]
                layer.data, layer.visible = before[0], before[1]
                if before[2]:
                    L.hide(layer)
        self._rollback = {}

    # ---- the dock's result: fitted, edited, predicted ------------------------------------------------
    def forget_results(self) -> None:
        """Another store: nothing the dock fitted, edited or loaded applies to it."""
        self.result = self.model = self.predicted = self.result_path = self._renumbered = None
        self.undo_stack.clear()
        self.picked = []
        self.inspector.forget()

    def take_result(self, result, fitted: bool) -> None:
        """A fitted or loaded result becomes the dock's: nothing to undo, its prototypes shown."""
        self.result = result
        if fitted or result.state is not None:
            self.model = result
        self.undo_stack.clear()
        self.curate.show_for(result)
        self.object_map.result_changed()
        if self.store is not None and np.ndim(result.prototypes) >= 3:
            self.inspector.show_prototypes(result.prototypes, result.cluster_sizes())
        self.controls()

    def curatable(self) -> bool:
        """Whether the dock's result can be curated on the open store (fitted on its sample); else said why."""
        from ..plate.curate import check_plate_result

        if self.result is None:
            self.say("Fit a result on the store (the Fit tab) or load one fitted on it first.")
            return False
        try:
            check_plate_result(self.result, self.store)
        except InputError as exc:
            self.say(f"Not done: {exc}")
            return False
        return True

    def apply_edit(self, edited, message: str, fitted: bool = False) -> None:
        """Show an edited result (the one before goes on the undo stack): the field repainted with the edit, the
        prototypes, and what changed."""
        self.undo_stack.append((self.result, self.model))
        self.result = edited
        if fitted or edited.state is not None:
            self.model = edited
        self._show_edited()
        self.say(f"{message}: {edited.k} clusters. {self.pending_text()}")

    def undo(self, _=None) -> None:
        """Show the result before the last edit again (Refine included)."""
        if not self.undo_stack:
            return
        undone = (self.result.edits[-1]["op"] if self.result is not None and self.result.edits else "edit")
        self.result, self.model = self.undo_stack.pop()
        self._show_edited()
        self.say(f"Undid the {undone}: {self.result.k} clusters. {self.pending_text()}")

    def _show_edited(self) -> None:
        """The field repainted with the edited result, and its prototypes (in the event loop's next turn: each is
        a redraw of its own, and the window reacts between the two)."""
        self.curate.show_for(self.result)
        if self.picture is not None:
            self._paint(self.picture)
        result = self.result
        if np.ndim(result.prototypes) >= 3:
            self.later(lambda: result is self.result and self.inspector.show_prototypes(result.prototypes,
                                                                                        result.cluster_sizes()))
        self.object_map.result_changed()
        self.controls()

    def pending_text(self) -> str:
        """What the store's predictions lack of the dock's result."""
        if self.result is None or self.result is self.predicted:
            return ""
        if self.predicted is not None and self.result.state is None and self.renumbering() is None:
            return "Refine, then Re-predict, to carry it to every object."
        return "Re-predict carries it to every object."

    def renumbering(self) -> np.ndarray | None:
        """The store's predictions' clusters in the dock's result's numbering when the result is the one they were
        made with, edited by merges, moves and outlier marks only (``plate.curate.cluster_map``, which replays those
        edits), else None (a Refine, a split, another fit). Worked out once per pair of predictions and result: the
        field's painting, the map's colours, its out-of-date banner and the status line each ask after an edit."""
        from ..plate.curate import cluster_map

        result, predicted = self.result, self.predicted
        if self._renumbered is None or self._renumbered[0] is not predicted or self._renumbered[1] is not result:
            self._renumbered = (predicted, result, cluster_map(predicted, result))
        return self._renumbered[2]

    def pending(self) -> str:
        """A note for exports made while the dock's edits are not re-predicted yet."""
        return "" if self.result is None or self.result is self.predicted else \
            " (the store's predictions: the edits since the last re-predict are not in them)"

    def predicted_with(self, result, message: str) -> None:
        """The store's predictions are now ``result``'s: read them again (the field shown, the gallery, the shares)
        in a worker and say ``message`` once drawn."""
        self.predicted = result
        if result.state is not None:
            self.model = result
        self.open_store(self.store.path, then=message, field_index=self._shown)

    def device(self) -> str:
        return "auto" if self.fit.device is None else self.fit.device.value

    def _methods_ready(self) -> None:
        """The method registry is imported (in a worker, when the dock opened): the Fit tab's form is built."""
        self.importing = None
        if not self.closed:
            freeze_heap(True)
        self.fit.build()

    def save_result(self, path) -> Path:
        """Save the dock's result (.npz)."""
        if self.result is None:
            raise InputError("There is no result to save yet: fit one first.")
        out = self.result.save(path)
        self.result_path = out
        self.say(f"Saved {out.name}.")
        return out

    # ---- names -----------------------------------------------------------------------------------
    def names(self) -> dict[str, str]:
        """The layers this panel makes for the open store (reused by name)."""
        stem = self.store.path.stem if self.store is not None else "store"
        return {key: f"{stem} {key}" for key in ("field", "objects", "gallery", "gallery labels")}

    def say(self, text: str) -> None:
        self.status.value = text

    @property
    def worker(self):
        """Apply result's worker, or None."""
        return self.apply_runner.worker

    @property
    def busy(self) -> bool:
        """Whether a worker of the panel (open, field, shares, load, apply, a tab's job, the inspector) is running."""
        return any(w is not None for w in (self.opening, self.reading, self.counting, self.loader, self.worker,
                                           self.inspector.worker, self.importing)) or self.job is not None \
            or self._deferred > 0

    @property
    def job(self):
        """The running tab job's worker (extract, fit, predict, split, refine, re-predict, export), or None."""
        return next((r.worker for r in self.runners if r.worker is not None), None)

    def alive(self) -> bool:
        """Whether the dock is still open (a closed one draws nothing more)."""
        return not self.closed

    def _dock_closed(self) -> None:
        """The dock was closed (its close button, or the viewer's window): stop every worker at its next step and
        forget them, so that nothing they were making is drawn afterwards."""
        if self.closed:
            return
        self.closed = True
        freeze_heap(False)
        for worker in (self.opening, self.reading, self.counting, self.loader):
            if worker is not None:
                worker.quit()
        self.opening = self.reading = self.counting = self.loader = None
        self.apply_runner.drop()
        for runner in self.runners:
            runner.drop()
        self.inspector.drop()
        self.object_map.close()
        if self.inspector.on_click in self.viewer.mouse_drag_callbacks:
            self.viewer.mouse_drag_callbacks.remove(self.inspector.on_click)

    def _controls(self) -> None:
        """Enable what can be used now: nothing but Cancel while a store opens, a result is applied or a tab's job
        runs; Export shares… once the shares shown are those of the column chosen."""
        opening, applying, job = self.opening is not None, self.worker is not None, self.job is not None
        held = opening or applying or job
        for widget in (self.open_button, self.well, self.field, self.group_by, self.target):
            widget.enabled = not held
        self.load_button.enabled = not (held or self.loader is not None)
        self.export_button.enabled = not opening and self.counting is None and self.shares is not None
        self.apply_button.enabled = applying or (not held and self.loader is None and self.result is not None)
        for runner in self.runners:
            runner.button.enabled = runner.worker is not None or not held
        self.fit.fit_button.enabled = self.fit.form is not None and (self.fit.run.worker is not None or not held)
        self.curate.undo_button.enabled = not held and bool(self.undo_stack)
        self.fit.save_button.enabled = not held and self.result is not None

    controls = _controls

    def _waiting(self) -> None:
        """The progress bar as a busy indicator (no steps to count) while a store opens, a field is read or shares
        are counted."""
        if self.worker is None and self.job is None:     # Apply result and the tabs' jobs count their own steps
            on = any(w is not None for w in (self.opening, self.reading, self.counting))
            self.progress.max, self.progress.value = (0, 0) if on else (1, 0)

    # ---- opening -----------------------------------------------------------------------------------
    def open_store(self, path, then: str | None = None, field_index: int | None = None):
        """Open an object store in a worker thread (its listing, predictions, gallery crops, shares and first field
        are read there, the dock disabled meanwhile) and show it in the GUI thread: the pickers, its first field
        (or ``field_index``), the gallery and the shares; ``then`` is said once it is shown. A folder that is no
        (finished) store, or a broken predictions table, is said in one sentence and changes nothing. A store
        opened while another opens wins. Returns the worker."""
        path = Path(path)
        self._then = then
        worker = start_worker(lambda: said(opened_store, path, field_index, what=f"Opening {path.name}"),
                              returned=lambda done: self._on_opened(worker, *done),
                              finished=lambda: self._on_open_finished(worker), alive=self.alive)
        self.opening = worker
        self._controls()
        self._waiting()
        self.say(f"Opening {path.name}…")
        return worker

    def _on_opened(self, worker, opened: OpenedStore | None, problem: str | None) -> None:
        if worker is not self.opening:     # another store was asked for meanwhile
            return
        if problem is not None:
            self.say(problem)
            return
        self.apply_runner.cancel()
        before = self.names().values()
        same = self.store is not None and self.store.path.resolve() == opened.store.path.resolve()
        if not same:                       # another store: the dock's results were of the one before
            self.forget_results()
        self.store, self.predictions, self.applied, self.picture = opened.store, opened.predictions, None, None
        self.starts = opened.starts
        listing = opened.store.fields      # before any layer goes: napari then asks the pickers for their choices
        self.has_wells = "well" in listing.columns
        for name in set(before) - set(self.names().values()):   # another store's layers (same names: reused)
            if name in self.viewer.layers:
                self.viewer.layers.remove(name)
        self.well.visible = self.has_wells
        self._filling = True
        try:
            for combo in (self.well, self.field, self.group_by, self.target):
                combo.reset_choices()
            self.group_by.value = opened.by
            self.target.value = FIELD
        finally:
            self._filling = False
        method = "; no predictions yet" if opened.predictions is None else "; predicted"
        wells = f" in {listing['well'].nunique()} wells" if self.has_wells else ""
        store = opened.store
        self.summary.value = f"{store.path.name}: {len(store)} objects, {len(listing)} fields{wells}{method}"
        self._by_wanted = opened.by
        self._set_shares(opened.shares, opened.by)
        self._wanted = opened.field_index
        self._set_pickers(opened.field_index)
        then, self._then = self._then, None

        def draw():      # once every layer is there: the field, then the gallery, each in a turn of its own
            if opened.store is not self.store:
                return
            self._draw_field(opened.field_index, opened.picture, opened.problem)
            self.later(lambda: opened.store is self.store and self._draw_gallery(opened.gallery))
            if then is not None and opened.problem is None:
                self.later(lambda: self.say(then))
        self.later(lambda: opened.store is self.store and self._make_layers(opened, draw))
        self.object_map.opened(opened)

    def layer_plan(self, opened: OpenedStore) -> list[tuple]:
        """(name, kind, shape, options) of every layer the dock draws for a store: its field, objects and gallery,
        and the inspector's (the object, the prototypes and their numbers, the aligned prototypes, their scores and
        frames, the warp grid), in the order they are stacked."""
        crop = tuple(opened.store.crops.shape[1:])
        rgb_crops = len(crop) == 3 and crop[-1] == 3
        field = ((1, 1, 3), {"rgb": True}) if opened.picture is not None and opened.picture.rgb else \
            ((1, 1), {"colormap": "gray"})
        crop_image = ((1, 1, 3), {"rgb": True}) if rgb_crops else ((1, 1), {"colormap": "gray"})
        gallery = crop_image if rgb_crops or len(crop) == 2 else ((crop[-1], 1, 1), {"colormap": "gray"})
        text = ((1, 1, 4), {"rgb": True, "dtype": np.uint8})     # RGBA text rasters (uint8: their contrast range)
        names, inspector = self.names(), L.layer_names(self.inspector.name())
        return [(names["field"], "image", *field),
                (names["objects"], "labels", (1, 1), {"opacity": 0.6}),
                (names["gallery"], "image", *gallery), (names["gallery labels"], "image", *text),
                (self.inspector.name(), "image", *crop_image), (inspector["prototypes"], "image", *crop_image),
                (inspector["prototype_labels"], "image", *text), (inspector["inspector"], "image", *crop_image),
                (inspector["scores"], "image", *text), (inspector["frames"], "shapes", (), {}),
                (inspector["grid"], "shapes", (), {})]

    def _make_layers(self, opened: OpenedStore, then) -> None:
        """Make the store's missing layers (hidden, undrawn layers, :func:`layers.add_undrawn_layer`), one per turn of the
        event loop, then call ``then()``: a napari layer made is tenths of a second of the GUI thread, so they are
        all made when a store opens and every later step (fit, predict, a click, an edit) only draws into them."""
        missing = next((plan for plan in self.layer_plan(opened) if plan[0] not in self.viewer.layers), None)
        if missing is None:              # and the text glyphs the inspector's frames need (once), in a turn too
            L.load_text_glyphs(self.native)
            self.later(lambda: opened.store is self.store and then())
            return
        name, kind, shape, options = missing
        L.add_undrawn_layer(self.viewer, name, kind, shape, **options)
        self.later(lambda: opened.store is self.store and self._make_layers(opened, then))

    def later(self, draw) -> None:
        """``draw()`` in the GUI thread's next turn of the event loop (not once the dock is closed); the panel counts
        as busy until it has run. A 1 ms timer, not a 0 ms one: Qt runs 0 ms timers as posted calls, and a chain of
        them (each drawing scheduling the next) ran back to back with no input, timer or repaint between them."""
        from qtpy.QtCore import QTimer

        def run():
            self._deferred -= 1
            if self.alive():
                draw()
        self._deferred += 1
        QTimer.singleShot(1, run)

    def _on_open_finished(self, worker) -> None:
        if worker is self.opening:
            self.opening = None
            self._waiting()
            self._controls()

    def _well_choices(self, _widget=None) -> list[str]:
        """The plate's wells, in the order the input lists them (none without a well column)."""
        if self.store is None or not self.has_wells:
            return []
        return list(dict.fromkeys(str(w) for w in self.store.fields["well"]))

    def _field_choices(self, _widget=None) -> list[tuple[str, int]]:
        """(name, field index) of the chosen well's fields (every field when the plate has no well column)."""
        if self.store is None:
            return []
        listing = self.store.fields
        if self.has_wells and self.well.value is not None:
            listing = listing[listing["well"].astype(str) == self.well.value]
        return [(field_title(row), int(row["field_index"])) for _, row in listing.iterrows()]

    def _group_choices(self, _widget=None) -> list[str]:
        """What shares can be counted per: the manifest's columns, and the field's image."""
        return [] if self.store is None else condition_columns(self.store) + ["image"]

    def _target_choices(self, _widget=None) -> list[tuple[str, object]]:
        """What Apply result can assign: the store's current field, and every labels layer with each image layer it
        segments (layers of ticlust's and of this panel left out)."""
        choices = [("the store's current field", FIELD)] if self.store is not None else []
        ours = set(self.names().values())
        layers = [layer for layer in self.viewer.layers
                  if layer.name not in ours and not L.is_ticlust_layer(layer.name)]
        images = [layer for layer in layers if isinstance(layer, Image)]
        for labels in (layer for layer in layers if isinstance(layer, Labels)):
            fit = [image for image in images if labels_fit(image.data, labels.data)]
            choices += [(f"{labels.name} in {image.name}", (image.name, labels.name)) for image in fit]
            if not fit:                    # offered, so that Apply result can say why it cannot
                choices.append((f"{labels.name} (no image of its shape)", (None, labels.name)))
        return choices

    def _on_well(self, _=None) -> None:
        if not self._filling and self.store is not None:
            self._filling = True
            try:
                self.field.reset_choices()
            finally:
                self._filling = False
            self._show_current()

    def _on_field(self, _=None) -> None:
        if not self._filling and self.store is not None:
            self._show_current()

    def _show_current(self) -> None:
        if self.field.value is not None:
            self.show_field(int(self.field.value))

    def _set_pickers(self, field_index: int) -> None:
        """Show ``field_index`` in the pickers without reading it (it is being drawn already)."""
        row = self.store.fields.iloc[int(field_index)]
        self._filling = True
        try:
            if self.has_wells:
                self.well.value = str(row["well"])
                self.field.reset_choices()
            self.field.value = int(field_index)
        finally:
            self._filling = False

    def pick(self, field_index: int) -> None:
        """Show field ``field_index`` (as the pickers do): its well, then the field."""
        row = self.store.fields.iloc[int(field_index)]
        if self.has_wells:
            self.well.value = str(row["well"])
        self.field.value = int(field_index)

    # ---- a field ---------------------------------------------------------------------------------
    def show_field(self, field_index: int):
        """Read field ``field_index`` (image, mask, rows) in a worker thread and draw it in the GUI thread. While a
        field is being read, the latest one asked for waits and is read next (the others are skipped). Returns the
        worker, or None when it waits."""
        self._wanted = int(field_index)
        if self.reading is not None:
            return None
        store, index = self.store, self._wanted

        def job():
            try:
                return field_picture(store, index), None
            except InputError as exc:
                return None, str(exc)
            except Exception as exc:       # said in the dock, in one sentence (and not asked for again)
                return None, self.gone() or f"reading it stopped with {type(exc).__name__}: {exc}"

        self.reading = start_worker(job, returned=lambda done: self._on_field_read(store, index, *done),
                                    finished=self._on_read_finished, alive=self.alive)
        self._waiting()
        if not self._says_object_of(index):
            self.say(f"Reading {field_title(store.fields.iloc[index])}…")
        return self.reading

    def _says_object_of(self, field_index: int) -> bool:
        """Whether the status line says the inspected object and it is on field ``field_index``: a map click inspects
        an object while its field is read (after the well's first field, at times), and reading or painting that field
        then leaves the object's line said."""
        shown = self.inspector.shown
        return (shown is not None and self.starts is not None and self.status.value == self.inspector.line
                and int(object_fields(self.starts, shown)[0]) == int(field_index))

    def _on_field_read(self, store, field_index: int, picture, problem: str | None) -> None:
        if store is self.store and field_index == self._wanted:
            self._draw_field(field_index, picture, problem)

    def _on_read_finished(self) -> None:
        self.reading = None
        self._waiting()
        if self._wanted is not None and self._wanted != self._shown and self.opening is None:
            self.show_field(self._wanted)

    def _draw_field(self, field_index: int, picture, problem: str | None) -> None:
        """The field's image and its objects painted by cluster (by object before any prediction); a file that is
        gone is said in the status line, and no stale field stays shown."""
        names = self.names()
        self._shown, self.picture = field_index, picture
        if problem is not None:
            for key in ("field", "objects"):
                if names[key] in self.viewer.layers:
                    self.viewer.layers.remove(names[key])
            self.say(f"{field_title(self.store.fields.iloc[field_index])}: {problem}")
            return
        layers = self.viewer.layers
        if names["field"] in layers and layers[names["field"]].rgb != picture.rgb:
            layers.remove(names["field"])
        shown = names["field"] in layers and layers[names["field"]].metadata.get("field_index") == field_index \
            and layers[names["field"]].data.shape == picture.image.shape
        if not shown:       # the same field again (the store read anew after a prediction): its image is as it was
            L.set_image(self.viewer, names["field"], picture.image, metadata={"field_index": picture.field_index},
                        **({"rgb": True} if picture.rgb else {"colormap": "gray"}))
        if names["objects"] in layers and shown:
            self._paint(picture)
        else:               # a new picture (or layer): in the event loop's next turn, so that the window reacts between
            self.later(lambda: self.picture is picture and self._paint(picture))
        self._place_gallery()
        if not shown:
            self.viewer.reset_view()

    def _paint(self, picture) -> None:
        """The objects layer: values = place in the field + 1, coloured by cluster (or one colour per object)."""
        from napari.utils.colormaps import DirectLabelColormap, label_colormap

        table = picture.table.copy()
        table.insert(0, "index", np.arange(1, len(table) + 1))
        applied = self.applied is not None and self.applied[0] == picture.field_index
        if applied:                      # the last Apply result on this field, over the store's predictions
            for key, values in self.applied[1].items():
                table[key] = values
        if "cluster" not in table.columns:
            colormap = label_colormap(50)
            how = ("painted by object: no predictions yet (ticlust predict RESULT STORE, or Load result… and Apply "
                   "result)")
        else:
            table, edits = (table, "") if applied else \
                self.previewed(table, self.field_objects(picture.field_index, len(table)))
            shown = table["cluster"].to_numpy()
            if "outlier" in table.columns:          # outliers grey, as on the ticlust widget's painted field
                shown = np.where(table["outlier"].to_numpy(bool), -1, shown)
            colors = {None: TRANSPARENT, 0: TRANSPARENT}
            colors.update({i + 1: L.cluster_color(int(c)) for i, c in enumerate(shown)})
            colormap = DirectLabelColormap(color_dict=colors)
            how = (f"painted by cluster ({self.applied[2]} applied)" if applied else
                   f"painted by cluster (the store's predictions{edits})")
        name = self.names()["objects"]
        if name in self.viewer.layers:
            layer = self.viewer.layers[name]
            L.reveal(layer)
            if layer.data is not picture.values and not _same(layer.data, picture.values):
                layer.data = picture.values     # an edit, or the field read again, repaints only its colours
            layer.colormap = colormap
            layer.features = table
        else:
            layer = self.viewer.add_labels(picture.values, name=name, colormap=colormap, features=table, opacity=0.6)
        layer.metadata["field_index"] = picture.field_index
        self.object_map.field_painted(picture)
        if not self._says_object_of(picture.field_index):     # an object of the field inspected meanwhile stays said
            self.say(f"{field_title(self.store.fields.iloc[picture.field_index])}: {len(table)} objects, {how}.")

    def field_objects(self, field_index: int, count: int) -> np.ndarray:
        """The store object numbers of a field's ``count`` objects (its rows of the table)."""
        start = field_span(self.starts, field_index)[0] if self.starts is not None else 0
        return np.arange(start, start + count)

    def previewed(self, table, objects: np.ndarray):
        """Predicted rows (of store objects ``objects``) with the dock's edits not yet re-predicted shown on them
        (clusters renumbered, hand-set clusters and outliers: ``plate.curate``), and a note saying so."""
        from ..plate.curate import pin_columns, plate_pins, relabel_columns

        result, predicted = self.result, self.predicted
        if result is None or predicted is None or result is predicted:
            return table, ""
        mapping = self.renumbering()
        if mapping is None:
            return table, "; the edited result differs from them: Refine and Re-predict to paint it"
        columns = {c: table[c].to_numpy() for c in ("cluster", "runner_up", "runner_up_score")}
        columns = pin_columns(relabel_columns(columns, mapping), objects, plate_pins(result))
        table = table.copy()
        for name, values in columns.items():
            table[name] = values
        return table, ", with the edits not yet re-predicted"

    # ---- the gallery ------------------------------------------------------------------------------
    def _draw_gallery(self, gallery: Gallery | None) -> None:
        """The gallery (:func:`make_gallery`) under the field, or none before any prediction."""
        names = self.names()
        if gallery is None:             # kept, hidden: made again it would cost the GUI thread tenths of a second
            for key in ("gallery", "gallery labels"):
                if L.drawn(self.viewer, names[key]):
                    L.hide(self.viewer.layers[names[key]])
            return
        new = not L.drawn(self.viewer, names["gallery"])
        at = self._gallery_origin()        # placed where it goes at once: each move re-measures every layer
        leading = (0.0,) * (gallery.grid.ndim - (3 if gallery.rgb else 2))
        L.set_image(self.viewer, names["gallery"], gallery.grid, metadata=gallery.metadata, translate=leading + at,
                    **({"rgb": True} if gallery.rgb else {"colormap": "gray"}))
        L.set_text_layer(self.viewer, names["gallery labels"], gallery.raster, gallery.factor, at)
        if new:                 # the first gallery: the view takes it in, under the field
            self.frame()

    def frame(self) -> None:
        """Frame the view on everything the dock shows (the field, the gallery, the inspected object, its
        inspector and the prototypes); the objects layer active, so that napari's status bar reports the object
        under the mouse."""
        self.viewer.reset_view()
        if self.names()["objects"] in self.viewer.layers:
            self.viewer.layers.selection.active = self.viewer.layers[self.names()["objects"]]

    def _gallery_origin(self) -> tuple[float, float]:
        """Where the gallery's top-left goes: under the field, left-aligned with it (a field is about as wide as a
        gallery row, and a tall dock leaves the canvas taller than wide)."""
        names = self.names()
        lo, hi = L.field_extent(self.viewer.layers[names["field"]]) if L.drawn(self.viewer, names["field"]) else \
            (np.zeros(2), np.zeros(2))
        return float(hi[0]) + 4 * L.Scene(self.store.size, self.store.size, 1).gap, float(lo[1])

    def _place_gallery(self) -> None:
        """Keep the gallery (and its text, moved with it) under the field shown (moved only when the field's size
        changed)."""
        names = self.names()
        if not L.drawn(self.viewer, names["gallery"]):
            return
        gallery, text = self.viewer.layers[names["gallery"]], self.viewer.layers[names["gallery labels"]]
        shift = np.asarray(self._gallery_origin()) - np.asarray(gallery.translate[-2:], float)
        if np.allclose(shift, 0):
            return
        gallery.translate = np.asarray(gallery.translate, float) + np.pad(shift, (gallery.ndim - 2, 0))
        text.translate = np.asarray(text.translate, float) + shift

    # ---- shares ------------------------------------------------------------------------------------
    def show_shares(self):
        """Count each cluster's share per the chosen column in a worker thread (the count reads every object) and
        show it in the plot (and ready for Export shares…) in the GUI thread. While shares are being counted, the
        latest column asked for waits and is counted next (the others are skipped), and Export shares… waits too.
        Returns the worker, or None when it waits or there is nothing to count."""
        by = self.group_by.value
        if self.predictions is None or not by:
            self._by_wanted = None
            self._set_shares(None, by)
            return None
        self._by_wanted = by
        if self.counting is not None:
            return None
        predictions = self.predictions
        self.counting = start_worker(lambda: said(cluster_shares, predictions, by, what=f"counting the shares per {by}"),
                                     returned=lambda done: self._on_counted(predictions, by, *done),
                                     finished=self._on_count_finished, alive=self.alive)
        self._controls()
        self._waiting()
        self.say(f"Counting each cluster's share per {by}…")
        return self.counting

    def _on_counted(self, predictions, by: str, shares, problem: str | None) -> None:
        if predictions is not self.predictions or by != self._by_wanted:   # another store or column meanwhile
            return
        if problem is not None:
            self._set_shares(None, by)
            self.say(problem)
            return
        self._set_shares(shares, by)
        self.say(f"Each cluster's share per {by}: {len(shares)} groups.")

    def _on_count_finished(self) -> None:
        self.counting = None
        self._waiting()
        self._controls()
        if self._by_wanted is not None and self._by_wanted != self.shares_by and self.predictions is not None:
            self.show_shares()

    def _set_shares(self, shares, by) -> None:
        self.shares, self.shares_by = shares, by
        self.plot.set_shares(shares, by or "")
        self._controls()

    def export_shares(self, path) -> Path:
        """Write the share table shown to ``path`` (CSV, atomically)."""
        if self.shares is None:
            raise InputError("There are no shares to export yet: open a store that has predictions.")
        out = write_shares(self.shares, path, self.store)
        self.say(f"Wrote the cluster shares per {self.shares_by} to {out.name}.")
        return out

    # ---- a result on the current field or on layers ----------------------------------------------
    def load_result(self, path):
        """Load a result for Apply result and the tabs (Predict, Curate, the inspector), in a worker thread (the first
        result of a session imports torch: seconds); one sentence when it cannot assign the open store's objects.
        When the store's predictions were made with this file's result, the dock knows them for its own. Returns
        the worker."""
        from ..plate.run import PREDICTIONS, part_digest, result_digest

        store, path = self.store, Path(path)

        def job():
            try:
                result = load_store_result(path, store)
                ours = store is not None and part_digest(store.path / PREDICTIONS) == result_digest(path)
                return (result, ours), None
            except InputError as exc:
                return (None, False), str(exc)
            except Exception as exc:       # said in the dock, in one sentence
                return (None, False), f"Loading {path.name} stopped with {type(exc).__name__}: {exc}"

        self.loader = start_worker(job, returned=lambda done: self._on_loaded(path, *done),
                                   finished=self._on_load_finished, alive=self.alive)
        self._controls()
        self.say(f"Loading {path.name}…")
        return self.loader

    def _on_loaded(self, path: Path, loaded, problem: str | None) -> None:
        if problem is not None:
            show_error(problem)
            self.say(problem)
            return
        result, ours = loaded
        self.take_result(result, fitted=result.state is not None)
        self.result_path = path
        if ours:
            self.predicted = result
        made = " (the store's predictions were made with it)" if ours else ""
        self.say(f"Loaded {path.name} ({result.method}, K = {result.k}){made}: Apply result assigns the objects chosen "
                 "in apply to; Predict assigns every object of the store.")

    def _on_load_finished(self) -> None:
        self.loader = None
        self._controls()

    def apply_result(self):
        """Assign with the loaded result, in a worker thread (progress in the bar, Cancel on the button), the objects
        chosen in ``apply to``: the store's current field (read from the store's crops), or the objects of a labels
        layer in its image layer (cut as the result's objects were: ``plate_view.assign_objects``). When it is done
        the field's objects layer is repainted, or ``<image> objects by cluster`` is painted over the image, in the
        GUI thread; a cancelled or failed run changes no layer. Returns the worker (None when there is nothing to
        apply)."""
        target = self.target.value
        if self.result is None or target is None or (target == FIELD and self.field.value is None):
            self.say("Load a result, and open a store or add an image layer and its labels layer, first.")
            return None
        result, name = self.result, self.result_path.name
        if target == FIELD and self.gone():
            self.say(self.gone())            # the store's crops may still be cached: refuse, as every other step does
            return None
        if target == FIELD:
            field_index, store = int(self.field.value), self.store
            work, on_done = (lambda: assign_field(result, store, field_index)), self._on_applied
            done = lambda columns: (field_index, columns, name)       # noqa: E731
            what = field_title(store.fields.iloc[field_index])
        else:
            image_name, labels_name = target
            labels = self.viewer.layers[labels_name].data
            if image_name is None:
                self.say(f"No image layer has the shape of the labels layer {labels_name!r} "
                         f"({'×'.join(map(str, labels.shape))}): open the image it segments.")
                return None
            image = self.viewer.layers[image_name].data
            work, on_done = (lambda: assign_objects(result, image, labels)), self._on_layers_applied
            done = lambda assigned: (image_name, labels_name, *assigned, name)      # noqa: E731
            what = f"{labels_name} in {image_name}"

        def events():
            return done((yield from work()))

        worker = self.apply_runner.run(events, yielded=self._on_event, returned=on_done, failed=self._on_failed,
                                       finished=self._on_finished)
        self._controls()
        self.progress.max, self.progress.value = 1, 0
        self.say(f"Assigning the objects of {what}…")
        return worker

    def cancel(self) -> None:
        """Stop Apply result at its next step: nothing is changed."""
        self.apply_runner.cancel()

    def _on_failed(self, exc: Exception) -> None:
        message = self.gone() or (str(exc) if isinstance(exc, InputError) else
                                  f"Apply result stopped with {type(exc).__name__}: {exc}")
        show_error(message)
        self.say(f"Stopped: {message}")

    def _on_event(self, event) -> None:
        if isinstance(event, Progress):
            self.progress.max = max(event.total, 1)
            self.progress.value = event.step

    def _on_applied(self, done) -> None:
        """A field assigned: repainted now when it is the field shown (else when it is picked again)."""
        if done is None:
            return
        self.applied = done
        if self.picture is not None and self.picture.field_index == done[0]:
            self._paint(self.picture)

    def _on_layers_applied(self, done) -> None:
        """The objects of a labels layer assigned: ``<image> objects by cluster`` over the image, its features the
        object table with cluster, score and runner-up (napari shows them under the mouse)."""
        if done is None:
            return
        image_name, labels_name, table, columns, name = done
        if labels_name not in self.viewer.layers:
            self.say(f"The labels layer {labels_name!r} was removed meanwhile: nothing was painted.")
            return
        painted = L.paint_objects(self.viewer, self.viewer.layers[labels_name], table, columns,
                                  L.layer_names(image_name)["painted"])
        self.say(f"{len(columns['cluster'])} objects of {labels_name} painted by cluster in {painted.name!r} ({name} "
                 "applied).")

    def _on_finished(self, cancelled: bool) -> None:
        self._controls()
        if cancelled:
            self.say("Cancelled: nothing was changed.")

    # ---- dialogs ---------------------------------------------------------------------------------
    def _ask_open(self, _=None) -> None:
        from qtpy.QtWidgets import QFileDialog

        path = QFileDialog.getExistingDirectory(self.native, "Open an object store (ticlust extract)")
        if path:
            self.open_store(path)

    def _ask_export(self, _=None) -> None:
        from qtpy.QtWidgets import QFileDialog

        path, _ = QFileDialog.getSaveFileName(self.native, "Export cluster shares",
                                              f"shares_per_{self.shares_by}.csv",
                                              "CSV (*.csv)")
        if path:
            try:
                self.export_shares(path)
            except InputError as exc:
                self.failed(exc)

    def _ask_load(self, _=None) -> None:
        from qtpy.QtWidgets import QFileDialog

        path, _ = QFileDialog.getOpenFileName(self.native, "Load ticlust result", "", "ticlust result (*.npz)")
        if path:
            self.load_result(path)
