"""The object map, docked beside the dock and linked both ways: every item of the dock's result (a stack, a field's
objects), or every object of a store's predictions, as a point at its map place.

A lasso or a box on the map (:class:`~ticlust._napari.object_map.ObjectMap`) shows the selection's gallery beside
the field, rings its objects on the field shown and counts them per cluster (and per well); the dock's curation acts
on it — Move to a cluster, Mark outliers, Split off as a new cluster — and the map is recoloured with the edit. A click
on a point shows that item (a plate object: its field and its inspector); a click on an object of the field (or the
slider) rings it on the map. After a Refine, a split or another fit the places a store's predictions hold are out of
date until Re-predict: the banner says so and its Refresh re-predicts. No places (a result made before maps existed):
Compute map learns them (``plate.maps.compute_map``).

:class:`MapPart` is the dock's one map; where the points, colours and pictures come from is the source's adapter:
:class:`ResultMap` here for items in memory, ``plate.PlateMap`` for a store.
"""
from contextlib import contextmanager

import numpy as np
import pandas as pd
from qtpy.QtWidgets import QHBoxLayout, QLabel, QPushButton, QSizePolicy, QSpinBox, QVBoxLayout, QWidget

from ..errors import InputError
from . import layers as L
from .object_map import ObjectMap
from .parts import Latest, said

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
        # Its room kept while it is hidden, and no say in the column's width (its own and its sentences' width hints
        # ignored): shown once a store is predicted, the map would otherwise resize the window's right column and
        # napari's canvas with it (a pixel is enough to redraw the canvas at a new size).
        for widget in (self.map, self.message, self.counts):
            policy = widget.sizePolicy()
            policy.setHorizontalPolicy(QSizePolicy.Policy.Ignored)
            policy.setRetainSizeWhenHidden(widget is self.map)
            widget.setSizePolicy(policy)
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


class MapPart:
    """The dock's object map: the docked panel (made when first needed, again after the user closed it), its
    background reads (latest request wins) and what every source does alike — counts, edits, Compute map. What differs
    between sources (where the points, colours and pictures come from) is the source's adapter, ``source.map``."""

    title = "Object map"

    def __init__(self, dock):
        self.dock = dock
        self.panel: MapPanel | None = None
        self.reading = Latest(dock.alive)      # the map's places and colours read, or a map computed
        self.gallery = Latest(dock.alive)      # a selection's crops read

    @property
    def viewer(self):
        return self.dock.viewer

    @property
    def adapter(self):
        return self.dock.source.map

    @property
    def busy(self) -> bool:
        drawing = self.alive_panel() is not None and self.panel.map.busy
        return self.reading.busy or self.gallery.busy or drawing

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
        """Take the panel's dock away and delete the panel (the dock closed): its worker pool ends with it."""
        self.reading.drop()
        self.gallery.drop()
        if self.alive_panel() is not None:
            try:
                self.viewer.window.remove_dock_widget(self.panel)
            except (LookupError, RuntimeError, AttributeError):   # the viewer is closing: its docks go with it
                pass
            self.panel.deleteLater()
            self.panel = None

    def show_points(self, xy, columns) -> None:
        """Draw these points (the map shown again after it was hidden)."""
        panel = self.ensure()
        panel.map.show()
        panel.map.set_points(xy, columns)

    def no_points(self, text: str, compute: bool = False) -> None:
        """No map to show: the sentence, and no points of an earlier store or result."""
        panel = self.ensure()
        panel.map.hide()
        panel.say(text, compute)

    def result_changed(self) -> None:
        """The dock shows another result (a run, an edit, an Undo, a Refine, a load): the map follows."""
        if self.dock.result is not None or self.alive_panel() is not None:
            self.adapter.result_changed()

    # ---- what the panel asks -------------------------------------------------------------------------
    def count_columns(self) -> list[str]:
        return self.adapter.count_columns()

    def show_selection(self, rows) -> None:
        self.adapter.show_selection(rows)

    def open_object(self, row: int) -> None:
        self.adapter.open_object(row)

    def refresh(self):
        return self.adapter.refresh()

    def edit(self, kind: str, rows: np.ndarray, to: int):
        """Move / Mark outliers / Split off the selected objects: the source's edit, on the dock's undo stack."""
        dock = self.dock
        if dock.job is not None:
            raise InputError(BUSY)
        if dock.result is None:
            raise InputError("Fit a result first (the Fit tab), or load the one the map was made with.")
        dock.source.check(dock.result)
        items, word = self.adapter.items_of(rows), dock.source.word
        op, args, text = {"move": ("move", (to,), f"Moved {items.size:,} {word}s to cluster {to} (pinned there)"),
                          "outliers": ("mark_outliers", (), f"Marked {items.size:,} {word}s as outliers"),
                          "split_off": ("split_off", (), f"Split {items.size:,} {word}s off as a new cluster")}[kind]
        edited = dock.source.edit(op, dock.result, items, *args)
        dock.apply_edit(edited, text)
        self.panel.say(f"{text}: {self.adapter.pending() or 'done.'}")
        return edited

    def compute(self):
        """Learn the map of the dock's fitted result from the data it was fitted on, in a worker; the source then
        shows it (a plate predicts again, which places every object)."""
        from ..plate.maps import compute_map

        dock, adapter = self.dock, self.adapter
        model = dock.model
        try:
            data = adapter.map_data()
        except InputError as exc:
            self.panel.say(str(exc), compute=True)
            return None
        device = dock.device_value()

        def done(got) -> None:
            mapped, problem = got
            if problem is not None:
                self.panel.say(problem, compute=True)
            elif dock.model is model:
                adapter.computed(mapped)
        self.panel.say("Computing the object map…")
        return self.reading.ask(("compute", id(model)),
                                lambda: said(compute_map, model, data, device=device, what="Computing the map"), done)


class ResultMap:
    """The map of a result on layers: one point per fitted item at ``result.map``."""

    def __init__(self, source):
        self.source, self.shown_map = source, None     # the places array the map was given (an edit keeps it)

    @property
    def part(self) -> MapPart:
        return self.source.dock.object_map

    def names(self) -> dict[str, str]:
        base = self.source.fitted or "result"
        return {"gallery": f"{base} map selection", "ring": f"{base} map selection on field"}

    def count_columns(self) -> list[str]:
        return ["cluster"]

    def items_of(self, rows) -> np.ndarray:
        return np.asarray(rows, np.int64)

    def pending(self) -> str:
        return ""

    def result_changed(self) -> None:
        result = self.source.dock.result
        if result is None:
            return
        panel = self.part.ensure()
        panel.set_k(result.k)
        if result.map is None:
            self.shown_map = None
            self.part.no_points("This result has no object map (it was saved before maps were made): Compute map "
                                "learns one from the data it was fitted on.", compute=True)
            return
        panel.say("")
        columns = self.columns(result)
        if self.shown_map is result.map and len(panel.map.xy) == result.n:
            panel.map.update_columns(columns)
        else:
            self.shown_map = result.map
            self.part.show_points(result.map, columns)

    def columns(self, result) -> pd.DataFrame:
        """cluster (outliers -1), score, margin to the runner-up and, for the objects of a field, their table."""
        a = self.source.assignments
        cluster = np.asarray(a["cluster"]).astype(np.int64)
        if "outlier" in a:
            cluster = np.where(np.asarray(a["outlier"], bool), -1, cluster)
        out = {"cluster": cluster, "score": np.asarray(a["score"], float)}
        if "runner_up_score" in a:
            out["margin"] = np.asarray(a["runner_up_score"], float) - out["score"]
        table = self.source.table
        if table is not None and len(table["label"]) == result.n:
            out.update({k: np.asarray(v) for k, v in table.items() if np.ndim(v) == 1 and k not in out})
        return pd.DataFrame(out)

    def current(self, item: int) -> None:
        """The item under the slider is ringed on the map."""
        panel = self.part.alive_panel()
        if panel is not None and self.shown_map is not None and 0 <= item < len(panel.map.xy):
            panel.map.highlight([item])

    def show_selection(self, rows: np.ndarray) -> None:
        """The selection's items as a gallery beside the stack (shapes highlighted) and ringed on the painted field."""
        from napari.layers import Points

        source, viewer, names = self.source, self.source.viewer, self.names()
        try:
            layer = source.fitted_layer()
        except InputError as exc:
            self.part.panel.say(str(exc))
            return
        extra = source.extra_layers()
        if isinstance(layer, Points):
            L.highlight_shapes(viewer, layer, source.dock.result, rows.tolist())
        else:
            picked = gallery_rows(rows)
            show_gallery(viewer, names["gallery"], gallery_grid(stack_items(layer, picked)) if rows.size else None,
                         extra[0] if extra else layer)
        painted = next((p for p in extra if p.name.endswith(L.SUFFIXES["painted"])), None)
        ring_objects(viewer, painted, rows + 1, names["ring"])

    def open_object(self, item: int) -> None:
        """A point clicked: the item goes under the slider (its inspector follows), or its shape is picked."""
        try:
            self.source.show_item(item)
        except InputError as exc:
            self.part.panel.say(str(exc))
            return
        self.part.panel.say(f"item {item}: under the slider, with its inspector.")

    def refresh(self) -> None:
        """Refresh: the map drawn anew from the dock's result."""
        self.part.ensure().map.clear_stale()
        self.shown_map = None
        self.result_changed()

    def map_data(self):
        return self.source.data()

    def computed(self, mapped) -> None:
        dock = self.source.dock
        dock.result = mapped
        dock.model = mapped
        self.source.show(mapped, fresh=False)
        self.result_changed()
        self.part.panel.say("Computed the object map: Save result… keeps it with the result.")


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
