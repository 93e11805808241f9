"""The object map docked beside the ticlust widget (a single-field or single-stack result) and beside the plate
panel (every object of a store's predictions), linked both ways.

A lasso or a box on the map (:class:`~ticlust._napari.object_map.ObjectMap`) shows the selection's gallery beside
the field, rings its objects on the field shown and counts them per cluster (and per well); the dock's curation acts
on it — Move to a cluster, Mark outliers, Split off as a new cluster (``ticlust.curation`` for a result,
``ticlust.plate.curate`` for a store's objects) — and the map is recoloured with the edit. A click on a point opens
that object's field and its inspector; a click on an object of the field (or the slider, for a stack) rings it on
the map. The map follows Undo and edits; after a Refine, a split or another fit the places it shows (a store's
predictions) are out of date until Re-predict: the banner says so and its Refresh re-predicts. A store without
predictions, a result or predictions made before maps existed (Compute map learns one: ``plate.maps.compute_map``),
an empty selection: one sentence each in the panel.

The two hosts differ only in where objects, edits and pictures come from: :class:`ResultMap` (the ticlust
widget) and :class:`PlateMap` (the plate panel); :class:`MapPanel` is the docked widget both use.
"""
from contextlib import contextmanager

import numpy as np
import pandas as pd
from qtpy.QtWidgets import QHBoxLayout, QLabel, QPushButton, QSpinBox, QVBoxLayout, QWidget

from ..errors import InputError
from ..plate.view import field_span, object_fields
from . import layers as L
from .object_map import ObjectMap
from .workers import said, start_worker

#: Crops shown in a selection's gallery at most (evenly spread over the selection, in object order).
GALLERY_MAX = 48
GALLERY_COLUMNS = 8
#: The colour of the selection's outline on the field.
RING = np.array([1.0, 0.9, 0.2, 1.0])
#: The map's least height in pixels (the dock shares its column with the plate panel or the ticlust widget).
MAP_HEIGHT = 180
#: Values listed per count (cluster, well) at most.
COUNT_ROWS = 8
BUSY = "A job is running in the dock: let it finish (or Cancel it), then edit from the map."
NOTHING_SELECTED = "Nothing is selected on the map: draw a lasso or a box around some points first."


class MapPanel(QWidget):
    """The map, a line for what is missing (with Compute map), the selection's counts and the curation buttons."""

    def __init__(self, link, parent=None):
        super().__init__(parent)
        self.link = link
        self.map = ObjectMap(link.viewer)
        self.message = QLabel("")
        self.message.setWordWrap(True)
        self.compute_button = QPushButton("Compute map")
        self.compute_button.setToolTip("Learn the object map from the data the result was fitted on")
        self.compute_button.hide()
        self.counts = QLabel("")
        self.counts.setWordWrap(True)
        self.to = QSpinBox()
        self.to.setPrefix("to cluster ")
        self.move_button = QPushButton("Move")
        self.move_button.setToolTip("Put the selected objects in the cluster and pin them there")
        self.outlier_button = QPushButton("Mark outliers")
        self.outlier_button.setToolTip("Flag the selected objects as outliers (Refine fits without them)")
        self.split_button = QPushButton("Split off")
        self.split_button.setToolTip("Make the selected objects a new cluster (Refine learns its prototype)")
        actions = QHBoxLayout()
        for widget in (self.to, self.move_button, self.outlier_button, self.split_button):
            actions.addWidget(widget)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(2, 2, 2, 2)
        layout.addWidget(self.message)
        layout.addWidget(self.compute_button)
        self.map.canvas.setMinimumHeight(MAP_HEIGHT)
        policy = self.map.sizePolicy()       # its room kept while it is hidden: shown once a store is predicted, the
        policy.setRetainSizeWhenHidden(True)  # map would otherwise resize the window and napari's canvas with it
        self.map.setSizePolicy(policy)
        layout.addWidget(self.map, 1)
        layout.addWidget(self.counts)
        layout.addLayout(actions)
        self.map.selection_changed.connect(self._selected)
        self.map.object_clicked.connect(lambda row: link.open_object(int(row)))
        self.map.refresh_requested.connect(link.refresh)
        self.compute_button.clicked.connect(lambda _=False: link.compute())
        self.move_button.clicked.connect(lambda _=False: self.act("move"))
        self.outlier_button.clicked.connect(lambda _=False: self.act("outliers"))
        self.split_button.clicked.connect(lambda _=False: self.act("split_off"))

    def say(self, text: str, compute: bool = False) -> None:
        """A sentence above the map (what is missing, what was done); ``compute``: offer Compute map."""
        self.message.setText(text)
        self.compute_button.setVisible(compute)

    def set_k(self, k: int) -> None:
        self.to.setMaximum(max(int(k) - 1, 0))

    def _selected(self, rows: np.ndarray) -> None:
        self.count()
        self.link.show_selection(rows)

    def count(self) -> None:
        """The selection's counts per cluster (and well), as the map colours them now."""
        rows = self.map.selection
        self.counts.setText(count_text(self.map.columns, rows, self.link.count_columns()) if rows.size else "")

    def act(self, kind: str):
        """Move / Mark outliers / Split off the selection through the dock's curation; one sentence when nothing
        is selected or the edit is refused. Returns the edited result (None: nothing done)."""
        rows = self.map.selection
        if not rows.size:
            self.say(NOTHING_SELECTED)
            return None
        try:
            edited = self.link.edit(kind, rows, int(self.to.value()))
        except InputError as exc:
            self.say(f"Not done: {exc}")
            return None
        self.count()
        return edited


def count_text(columns: pd.DataFrame, rows: np.ndarray, names) -> str:
    """"N selected · cluster 0: 300, 2: 112 · well A01: 200, …": the selection counted per each column of ``names``
    that the map has."""
    parts = [f"{rows.size:,} selected"]
    for name in names:
        if name not in columns.columns:
            continue
        counts = columns[name].iloc[rows].value_counts(sort=True)
        counts = counts[counts > 0]                   # a categorical column counts its absent values too
        shown = ", ".join(f"{value}: {n:,}" for value, n in counts.iloc[:COUNT_ROWS].items())
        more = f", … {len(counts) - COUNT_ROWS} more" if len(counts) > COUNT_ROWS else ""
        parts.append(f"{name} {shown}{more}")
    return " · ".join(parts)


def gallery_rows(rows: np.ndarray) -> np.ndarray:
    """At most GALLERY_MAX of a selection's rows, evenly spread over it (the same selection, the same gallery)."""
    if rows.size <= GALLERY_MAX:
        return rows
    return rows[np.linspace(0, rows.size - 1, GALLERY_MAX).round().astype(int)]


def gallery_grid(crops: np.ndarray) -> np.ndarray:
    """Crops (n, H, W[, C]) as one picture of GALLERY_COLUMNS tiles a row: grey, RGB as it is, other channels
    averaged."""
    crops = np.asarray(crops, np.float32)
    if crops.ndim == 4 and crops.shape[-1] != 3:
        crops = crops.mean(-1)
    scene = L.Scene(crops.shape[1], crops.shape[2], len(crops))
    return L.tiles_grid(crops, scene, min(GALLERY_COLUMNS, len(crops)))


def show_gallery(viewer, name: str, grid: np.ndarray | None, beside) -> None:
    """The selection's gallery left of layer ``beside`` (the field, or the stack), or no gallery (None)."""
    if grid is None:
        if name in viewer.layers:
            viewer.layers.remove(name)
        return
    lo, _hi = L.field_extent(beside) if beside is not None else (np.zeros(2), np.zeros(2))
    gap = max(8.0, grid.shape[1] / 16)
    translate = (float(lo[-2]), float(lo[-1]) - gap - grid.shape[1])
    with kept_active(viewer):
        L.set_image(viewer, name, grid, translate=translate,
                    **({"rgb": True} if grid.ndim == 3 and grid.shape[-1] == 3 else {"colormap": "gray"}))


def ring_objects(viewer, painted, values: np.ndarray, name: str) -> None:
    """Outline the objects of the painted layer ``painted`` whose values are ``values`` (a Labels layer ``name``
    over it, contours in RING); none: the layer goes."""
    from napari.utils.colormaps import DirectLabelColormap

    if painted is None or not len(values):
        if name in viewer.layers:
            viewer.layers.remove(name)
        return
    data = np.where(np.isin(painted.data, values), painted.data, 0)
    if name in viewer.layers:
        viewer.layers[name].data = data
        return
    with kept_active(viewer):
        layer = viewer.add_labels(data, name=name, scale=painted.scale, translate=painted.translate, opacity=1.0,
                                  colormap=DirectLabelColormap(color_dict={None: RING, 0: np.zeros(4)}))
        layer.contour = 2


@contextmanager
def kept_active(viewer):
    """The active layer stays the one the user had (a layer added becomes the active one in napari): a click on
    the field keeps picking objects, the layer controls keep showing what they showed."""
    active = viewer.layers.selection.active
    try:
        yield
    finally:
        if active is not None and active in viewer.layers:
            viewer.layers.selection.active = active


class MapLink:
    """What both hosts share: the docked panel (made when first needed, again after the user closed it)."""

    title = "Object map"

    def __init__(self, owner):
        self.owner = owner
        self.panel: MapPanel | None = None
        self.reading = None              # a worker reading or computing what the map shows
        self.gallery = None              # the worker reading a selection's crops

    @property
    def viewer(self):
        return self.owner.viewer

    @property
    def busy(self) -> bool:
        """Whether the map is still reading, computing or drawing what was asked."""
        drawing = self.alive_panel() is not None and self.panel.map.busy
        return self.reading is not None or self.gallery is not None or drawing

    def alive_panel(self) -> MapPanel | None:
        """The panel, or None when there is none (or the user closed its dock)."""
        try:
            if self.panel is not None:
                self.panel.isVisible()
        except RuntimeError:             # its dock was closed: Qt deleted it
            self.panel = None
        return self.panel

    def ensure(self) -> MapPanel:
        """The panel, docked (made now when there is none)."""
        if self.alive_panel() is None:
            self.panel = MapPanel(self)
            self.viewer.window.add_dock_widget(self.panel, name=self.title, area="right")
        return self.panel

    def close(self) -> None:
        """Take the panel's dock away and delete the panel (its host closed): the map's worker pool ends with it."""
        if self.alive_panel() is not None:
            try:
                self.viewer.window.remove_dock_widget(self.panel)
            except (LookupError, RuntimeError, AttributeError):   # the viewer is closing: its docks go with it
                pass
            self.panel.deleteLater()
            self.panel = None

    def count_columns(self) -> list[str]:
        return ["cluster"]

    def _finished(self) -> None:
        self.reading = None

    def show_points(self, xy, columns) -> None:
        """Draw these points (the map shown again after it was hidden)."""
        panel = self.ensure()
        panel.map.show()
        panel.map.set_points(xy, columns)

    def no_points(self, text: str, compute: bool = False) -> None:
        """No map to show (no predictions, no places): the sentence, and no points of an earlier store or result."""
        panel = self.ensure()
        panel.map.hide()
        panel.say(text, compute)


class ResultMap(MapLink):
    """The map of the ticlust widget's result: one point per fitted item at ``result.map``."""

    def __init__(self, widget):
        super().__init__(widget)
        self.shown_map = None            # the places array the map was given (an edit keeps it, a Refine makes one)

    def names(self) -> dict[str, str]:
        base = self.owner.result_layer_name or "result"
        return {"gallery": f"{base} map selection", "ring": f"{base} map selection on field"}

    def shown(self, result) -> None:
        """The widget shows ``result`` (a run, an edit, an Undo, a Refine, a loaded file): the map follows."""
        panel = self.ensure()
        panel.set_k(result.k)
        if result.map is None:
            self.shown_map = None
            self.no_points("This result has no object map (it was saved before maps were made): Compute map learns "
                           "one from the data it was fitted on.", compute=True)
            return
        panel.say("")
        columns = self.columns(result)
        if self.shown_map is result.map and len(panel.map.xy) == result.n:
            panel.map.update_columns(columns)
        else:
            self.shown_map = result.map
            self.show_points(result.map, columns)

    def columns(self, result) -> pd.DataFrame:
        """cluster (outliers -1), score, margin to the runner-up and, for the objects of a field, their table."""
        a = self.owner.assignments
        cluster = np.asarray(a["cluster"]).astype(np.int64)
        if "outlier" in a:
            cluster = np.where(np.asarray(a["outlier"], bool), -1, cluster)
        out = {"cluster": cluster, "score": np.asarray(a["score"], float)}
        if "runner_up_score" in a:
            out["margin"] = np.asarray(a["runner_up_score"], float) - out["score"]
        table = self.owner.objects[2] if self.owner.objects is not None else None
        if table is not None and len(table["label"]) == result.n:
            out.update({k: np.asarray(v) for k, v in table.items() if np.ndim(v) == 1 and k not in out})
        return pd.DataFrame(out)

    def current(self, item: int) -> None:
        """The item under the slider (or picked on the field) is ringed on the map."""
        panel = self.alive_panel()
        if panel is not None and self.shown_map is not None and 0 <= item < len(panel.map.xy):
            panel.map.highlight([item])

    def show_selection(self, rows: np.ndarray) -> None:
        """The selection's items as a gallery beside the stack and ringed on the painted field."""
        from napari.layers import Points

        widget, names = self.owner, self.names()
        try:
            layer = widget.fitted_layer()
        except InputError as exc:
            self.panel.say(str(exc))
            return
        field = widget.objects[0] if widget.objects is not None and widget.objects[0].name in self.viewer.layers \
            else None
        if isinstance(layer, Points):
            L.highlight_shapes(self.viewer, layer, widget.result, rows.tolist())
        else:
            picked = gallery_rows(rows)
            show_gallery(self.viewer, names["gallery"], gallery_grid(stack_items(layer, picked)) if rows.size else None,
                         field if field is not None else layer)
        painted = None
        if widget.objects is not None and widget.objects[2] is not None:
            name = L.layer_names(widget.objects[0].name)["painted"]
            painted = self.viewer.layers[name] if name in self.viewer.layers else None
        ring_objects(self.viewer, painted, rows + 1, names["ring"])

    def open_object(self, item: int) -> None:
        """A point clicked: the item goes under the slider (its inspector follows), or its shape is picked."""
        try:
            self.owner.show_item(item, self.owner.fitted_layer())
        except InputError as exc:
            self.panel.say(str(exc))
            return
        self.panel.say(f"item {item}: under the slider, with its inspector.")

    def edit(self, kind: str, rows: np.ndarray, to: int):
        from .. import curation

        result = self.owner.result
        if self.owner.worker is not None:
            raise InputError(BUSY)
        if kind == "move":
            edited, text = curation.move(result, rows, to), f"Moved {rows.size:,} items to cluster {to} (pinned there)"
        elif kind == "outliers":
            edited, text = curation.mark_outliers(result, rows), f"Marked {rows.size:,} items as outliers"
        else:
            edited = curation.split_off(result, rows)
            text = f"Split {rows.size:,} items off as cluster {edited.k - 1}; Refine learns its prototype"
        self.owner.curation.apply(edited, text)
        self.panel.say(f"{text}.")
        return edited

    def refresh(self) -> None:
        """Refresh: the map drawn anew from the widget's result."""
        if self.owner.result is not None:
            self.ensure().map.clear_stale()
            self.shown_map = None
            self.shown(self.owner.result)

    def compute(self):
        """Learn the result's map from the data it was fitted on, in a worker; the widget then shows it."""
        from ..plate.maps import compute_map

        widget, result = self.owner, self.owner.result
        try:
            data, layer = widget.fitted_data(), widget.fitted_layer()
        except InputError as exc:
            self.panel.say(str(exc), compute=True)
            return None
        device = widget.device.value

        def done(got) -> None:
            mapped, problem = got
            if problem is not None:
                self.panel.say(problem, compute=True)
            elif widget.result is result:
                widget.show_result(mapped, layer, reframe=False)
                self.panel.say("Computed the object map: Save result… keeps it with the result.")

        self.panel.say("Computing the object map…")
        self.reading = start_worker(lambda: said(compute_map, result, data, device=device, what="Computing the map"),
                                    returned=done,
                                    finished=self._finished)
        return self.reading



class PlateMap(MapLink):
    """The map of a store's predictions: one point per predicted object at its map_x, map_y, coloured by its
    cluster (with the dock's edits not yet re-predicted shown), well, any manifest column, score or margin."""

    title = "Object map (plate)"

    def __init__(self, panel):
        super().__init__(panel)
        self.objects = None              # the store objects the map's rows are (those with a place)
        self.table = None                # their predictions: cluster, runner-up, scores, manifest columns
        self.store = None

    def names(self) -> dict[str, str]:
        stem = self.owner.names()["field"][:-len(" field")]
        return {"gallery": f"{stem} map selection", "ring": f"{stem} map selection on field"}

    def count_columns(self) -> list[str]:
        conditions = [c for c in self.table.columns if c not in PREDICTED] if self.table is not None else []
        return ["cluster"] + (["well"] if "well" in conditions else conditions[:1])

    # ---- the store's predictions --------------------------------------------------------------------
    def opened(self, opened) -> None:
        """A store was opened (or read again after a prediction): read the map's columns in a worker."""
        panel = self.ensure()
        self.store, self.objects, self.table = opened.store, None, None
        for name in self.names().values():
            if name in self.viewer.layers:
                self.viewer.layers.remove(name)
        panel.map.clear_stale()
        if opened.predictions is None:
            self.no_points("No predictions yet: predict the store first (the Predict tab, or ticlust predict RESULT "
                           "STORE); the map shows every predicted object.")
            return
        panel.say(f"Reading the map of {len(opened.store):,} objects…")
        store, predictions = opened.store, opened.predictions
        self.reading = start_worker(lambda: said(map_table, store, predictions, what="Reading the map"),
                                    returned=lambda got: self._read(store, got), finished=self._finished,
                                    alive=self.owner.alive)

    def _read(self, store, got) -> None:
        if store is not self.store:
            return
        read, problem = got
        panel = self.ensure()
        if problem is not None:
            panel.say(problem)
            return
        objects, xy, table, columns = read
        if not len(objects):
            self.no_points("The store's predictions have no map places (made with a result saved before maps were "
                           "made): Compute map learns one on the fit sample, then predicts again.", compute=True)
            return
        self.objects, self.table = objects, table
        missing = len(store) - len(objects)
        panel.say(f"{len(objects):,} objects" + (f" ({missing:,} without a place)" if missing else "") +
                  ": draw a lasso or a box to select, click a point to open its field.")
        if self.owner.result is not None:
            panel.set_k(self.owner.result.k)
        edited = self.owner.result is not None and self.owner.result is not self.owner.predicted
        self.show_points(xy, self.columns() if edited else columns)   # the dock's edits shown on them
        self.result_changed(recolor=False)

    def columns(self) -> pd.DataFrame:
        """The map's colour columns with the dock's edits not yet re-predicted shown (``StorePanel.previewed``)."""
        return colour_columns(self.owner.previewed(self.table, self.objects)[0])

    def stale_reason(self) -> str | None:
        """Why the places shown are not the dock's result's (a Refine, a split, another fit), or None."""
        result, predicted = self.owner.result, self.owner.predicted
        if result is None or predicted is None or result is predicted or self.owner.renumbering() is not None:
            return None
        return "the result changed since the store was predicted: Re-predict places every object anew"

    def result_changed(self, recolor: bool = True) -> None:
        """An edit, an Undo or a Refine in the dock: recoloured, or said out of date (with Refresh)."""
        panel = self.alive_panel()
        if panel is None or self.table is None:
            return
        if self.owner.result is not None:
            panel.set_k(self.owner.result.k)
        reason = self.stale_reason()
        if reason is not None:
            panel.map.mark_stale(reason)
            return
        panel.map.clear_stale()
        if recolor:
            panel.map.update_columns(self.columns())

    def refresh(self):
        """Refresh on the out-of-date banner: Re-predict (the Curate tab's), which reads the map again when done."""
        result = self.owner.result
        if result is not None and result.state is None:
            self.panel.say("The edited result places no object until it is refined: Refine it (the Curate tab), then "
                           "Refresh.")
            return None
        self.panel.say("Re-predicting the store for a fresh map…")
        return self.owner.curate.start_repredict()

    # ---- selection, clicks ----------------------------------------------------------------------------
    def show_selection(self, rows: np.ndarray) -> None:
        """A gallery of the selection's crops (read in a worker) left of the field; its objects ringed there."""
        owner, names = self.owner, self.names()
        objects = self.objects[rows] if rows.size else np.zeros(0, np.int64)
        self.ring_field(owner.picture)
        if not objects.size:
            show_gallery(self.viewer, names["gallery"], None, None)
            return
        store, picked = owner.store, gallery_rows(objects)
        field = owner.names()["field"]

        def shown(grid) -> None:
            if store is owner.store and self.panel is not None and np.array_equal(self.selected(), objects):
                beside = self.viewer.layers[field] if L.drawn(self.viewer, field) else None
                show_gallery(self.viewer, names["gallery"], grid, beside)

        def finished() -> None:
            if self.gallery is worker:
                self.gallery = None

        worker = self.gallery = start_worker(lambda: gallery_grid(store.crops[picked]), returned=shown,
                                             finished=finished, alive=owner.alive)

    def selected(self) -> np.ndarray:
        """The store objects selected on the map."""
        if self.alive_panel() is None or self.objects is None:
            return np.zeros(0, np.int64)
        return self.objects[self.panel.map.selection]

    def ring_field(self, picture) -> None:
        """Ring the selected objects that are on the field shown (the objects layer's values: place + 1)."""
        owner = self.owner
        name = owner.names()["objects"]
        painted = self.viewer.layers[name] if name in self.viewer.layers and picture is not None else None
        values = np.zeros(0, np.int64)
        if painted is not None:
            start, stop = field_span(owner.starts, picture.field_index)
            chosen = self.selected()                 # up to every object: two comparisons, not a search each
            values = chosen[(chosen >= start) & (chosen < stop)] - start + 1
        ring_objects(self.viewer, painted, values, self.names()["ring"])

    def field_painted(self, picture) -> None:
        """The field was (re)painted: its selected objects ringed again."""
        if self.alive_panel() is not None and self.panel.map.selection.size:
            self.ring_field(picture)

    def open_object(self, row: int) -> None:
        """A point clicked: its field is opened and the object inspected (and picked for the Curate tab)."""
        owner = self.owner
        obj = int(self.objects[row])
        field = int(object_fields(owner.starts, obj)[0])
        owner.picked = [obj]
        if owner.picture is None or owner.picture.field_index != field:
            owner.pick(field)
        owner.inspector.inspect(obj)
        self.panel.map.highlight([row])
        self.panel.say(f"object {obj}: its field is shown and the object inspected.")

    def picked(self, objects) -> None:
        """Objects picked on the field or in the gallery are ringed on the map."""
        if self.alive_panel() is None or self.objects is None:
            return
        objects = np.asarray(objects, np.int64)
        at = np.clip(np.searchsorted(self.objects, objects), 0, len(self.objects) - 1)
        self.panel.map.highlight(at[self.objects[at] == objects])

    def edit(self, kind: str, rows: np.ndarray, to: int):
        from ..plate import curate

        owner = self.owner
        if owner.job is not None or owner.opening is not None:
            raise InputError(BUSY)
        if owner.store is None or owner.result is None:
            raise InputError("Fit a result on the store (the Fit tab) or load the one it was predicted with first.")
        curate.check_plate_result(owner.result, owner.store)
        objects, n = self.objects[rows], len(owner.store)
        if kind == "move":
            edited, text = curate.move(owner.result, objects, to, n), f"Moved {objects.size:,} objects to cluster {to}"
        elif kind == "outliers":
            edited = curate.mark_outliers(owner.result, objects, n)
            text = f"Marked {objects.size:,} objects as outliers"
        else:
            edited = curate.split_off(owner.result, objects, n)
            text = f"Split {objects.size:,} objects off as cluster {edited.k - 1}"
        owner.apply_edit(edited, text)
        self.panel.say(f"{text}: {owner.pending_text() or 'the store has it.'}")
        return edited

    def compute(self):
        """Learn the map of the dock's fitted result on the store's fit sample, in a worker; then predict again,
        which gives every object its place."""
        from ..plate.maps import compute_map

        owner = self.owner
        model = owner.model
        if model is None or owner.store is None:
            self.panel.say("Load the result the store was predicted with (Load result… in the Predict tab) first: "
                           "its map is learned from its fit sample.", compute=True)
            return None
        store, device = owner.store, owner.device()

        def done(got) -> None:
            mapped, problem = got
            if problem is not None:
                self.panel.say(problem, compute=True)
            elif owner.store is store:
                owner.take_result(mapped, fitted=True)
                self.panel.say("Computed the map on the fit sample; predicting every object for its place…")
                owner.predict.start()

        self.panel.say("Computing the object map on the fit sample…")
        self.reading = start_worker(lambda: said(compute_map, model, store, device=device, what="Computing the map"),
                                    returned=done,
                                    finished=self._finished, alive=owner.alive)
        return self.reading


#: The prediction columns that are not colour columns of their own (cluster is shown with the edits, margin from
#: the scores).
PREDICTED = ("field_index", "cluster", "runner_up", "runner_up_score", "score", "by_hand", "outlier", "map_x",
             "map_y", "image")


def colour_columns(table: pd.DataFrame) -> pd.DataFrame:
    """What the map is coloured by, from predictions with the manifest's columns: cluster (outliers -1), each
    manifest column (categories stay categories: a million strings are never made), score and the margin to the
    runner-up."""
    cluster = table["cluster"].to_numpy().astype(np.int64)
    if "outlier" in table.columns:
        cluster = np.where(table["outlier"].to_numpy(bool), -1, cluster)
    out = {"cluster": cluster}
    out.update({name: table[name].array for name in table.columns if name not in PREDICTED})
    score = table["score"].to_numpy(float)
    out.update({"score": score, "margin": table["runner_up_score"].to_numpy(float) - score})
    return pd.DataFrame(out, copy=False)


def map_table(store, predictions):
    """(the store objects with a map place, their places (n, 2) float32, their predictions with the manifest's
    columns, the map's colour columns of them), read from the store's predictions (``predictions``: the columns
    the panel read already)."""
    import pyarrow.parquet as pq

    from ..plate.view import predictions_path

    path = predictions_path(store)
    names = set(pq.read_schema(path).names)
    wanted = [c for c in ("map_x", "map_y", "score", "runner_up", "runner_up_score", "by_hand", "outlier")
              if c in names]
    read = pd.read_parquet(path, columns=wanted)
    if "map_x" not in read.columns:
        return np.zeros(0, np.int64), np.zeros((0, 2), np.float32), None, None
    xy = np.column_stack([read["map_x"].to_numpy(np.float32), read["map_y"].to_numpy(np.float32)])
    objects = np.flatnonzero(np.isfinite(xy).all(1))
    table = pd.concat([predictions.drop(columns=[c for c in ("image",) if c in predictions.columns]),
                       read.drop(columns=["map_x", "map_y"])], axis=1)
    if len(objects) < len(xy):
        table = table.iloc[objects].reset_index(drop=True)
    return objects, xy[objects], table, colour_columns(table)


def stack_items(layer, rows: np.ndarray) -> np.ndarray:
    """Items ``rows`` of an image stack layer, channels last (as the methods and the galleries see them)."""
    from ..core.validation import channels_last

    items = np.asarray(layer.data[np.asarray(rows)])
    return channels_last(items, items.shape)[0]
