"""The dock's sources: what a user has, and all that differs between one kind of input and another.

:class:`Source` declares what the dock and its parts may ask of a source (and answers it where most sources answer
alike). Three sources here read napari layers, their items in memory (:class:`LayerSource`): image layers
(:class:`StackSource`: a stack, or several stacks of one shape as its channels, in the order picked), a field with its
labels (:class:`FieldSource`: objects cut out, or their contours traced), landmark points (:class:`PointsSource`).
The plate's object store is :class:`ticlust._napari.plate.PlateSource`. A movie (T×Y×X with labels and tracks) would
be one more subclass: its items the tracked objects, its ``show`` a Tracks layer and a per-track state strip.
"""
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from magicgui.widgets import CheckBox, ComboBox, Container, FloatSpinBox, Select

from .. import api
from ..errors import InputError
from . import layers as L
from .method_form import crop_options

NO_LABELS = "none"


def row(*widgets, labels: bool = False) -> Container:
    """Widgets side by side (with their labels: ``labels``), without the margins a nested container adds."""
    out = Container(widgets=list(widgets), layout="horizontal", labels=labels)
    out.native.layout().setContentsMargins(0, 0, 0, 0)
    return out


@dataclass
class Seen:
    """An item inspected, made in the inspector's worker: every prototype aligned onto it with its score, the cluster
    to frame (``chosen``) and the runner-up, its warp grid (None: none to draw), the line the status says, and the
    picture of the item where the source draws it beside the field (None: it is on the layer already)."""

    item: int
    aligned: np.ndarray
    scores: np.ndarray
    chosen: int
    runner: int
    grid: np.ndarray | None
    line: str
    picture: np.ndarray | None = None


@dataclass
class Objects:
    """A fit's first event on a field: the cut-out objects (or contours) and their table."""

    data: np.ndarray
    table: dict


class Source(ABC):
    """One kind of input. The dock and its parts ask a source only what this class declares; each method says what is
    asked, and its body answers it for sources whose items sit in memory."""

    title = ""                              # its entry in the dock's input box
    pages = ("Fit", "Curate", "Export")     # the steps it takes beyond Data
    word = "item"                           # what its items are called in sentences
    method = "kmeans"                       # the method the form offers first for it

    def __init__(self, dock):
        self.dock, self.viewer = dock, dock.viewer
        # its widgets on the dock's pages (shown while it is the dock's source), its own pages, its map's adapter
        self.widgets, self.fit_widgets, self.predict_widgets, self.curate_widgets, self.export_widgets = [], [], [], [], []
        self.extra_pages: list[tuple[str, object]] = []
        self.map = None

    # ---- what it is: whether the viewer holds an input for it, its hint, the methods that take its items ----
    def offered(self) -> bool:
        return False

    def hint(self) -> str:
        return ""

    def takes(self, spec) -> bool:
        return spec.inputs != ("landmarks",)

    def method_changed(self) -> None:
        """The form's method changed."""

    busy = False                            # a background read of its own runs

    def enable(self, on: bool) -> None:
        """Its pickers, held while a job runs."""

    def can(self, runner) -> bool:
        """Whether one of its job buttons can start now."""
        return True

    def gone(self) -> str | None:
        """The sentence for an input that vanished while a job ran (None: it is there)."""
        return None

    def close(self) -> None:
        """The dock closed: its reads stop."""

    # ---- fit and show ----
    @abstractmethod
    def fit(self, args: dict):
        """The fit of its items as a job ``call(sink)`` (``args``: method, k, params, seed, runs, device); an InputError
        says why it cannot. Every source answers it (an abstract method: a source without it cannot be made)."""

    def job_layers(self) -> list[str]:
        """The layers a fit or a refine draws into while it runs (put back on Cancel)."""
        return []

    def fit_event(self, event) -> None:
        """A fit's event that is neither Progress nor Snapshot."""

    def live(self, prototypes) -> None:
        """The prototypes while a fit runs."""

    def done_text(self, result) -> str:
        return (f"Done: {result.k} clusters in {result.timing.get('total_s', 0):.1f} s on {result.device}, final loss "
                f"{result.final_loss:.4g}.{self.note(result)}")

    def show(self, result, fresh: bool) -> None:
        """Draw the dock's result (``fresh``: a run or a load, framed; else an edit or an Undo)."""

    def note(self, result) -> str:
        """Words added to what is said of a result (its accuracy against true classes)."""
        return ""

    def on_step(self) -> None:
        """The viewer's slider moved."""

    def on_zoom(self) -> None:
        """The canvas zoomed: lines keep their screen width."""

    def click_at(self, position, add: bool = False):
        """A click at a world position picks the item under it (``add``: to those picked)."""

    # ---- curate: the items picked or typed, the edits (``ticlust.curation`` here) ----
    def picked(self, what: str) -> list[int]:
        raise InputError(f"No {self.word} is picked to {what}: type their numbers.")

    def typed(self, text: str, what: str) -> list[int]:
        from ..curation import item_index

        return item_index(text, self.dock.result.n, what).tolist()

    def check(self, result) -> None:
        """Refuse in one sentence a result that cannot be curated here."""

    def edit(self, op: str, result, *args):
        from .. import curation

        return getattr(curation, op)(result, *args)

    def split(self, result, cluster: int, seed: int, device: str):
        from .. import curation

        data = self.data()
        return lambda _sink: curation.split(data, result, cluster, seed=seed, device=device)

    def refine(self, result, device: str, keep: bool):
        from ..curation import refine_events
        from .parts import drain

        data = self.data()
        return lambda sink: drain(refine_events(data, result, device, keep), sink)

    def data(self):
        """The items the result was fitted on, as the methods read them (split, refine, galleries, the map)."""
        raise InputError(f"There are no {self.word}s to read.")

    def scan_items(self, method: str, params: dict):
        """The items a K scan fits (or a function that makes them in the worker), read now from what is picked."""
        raise InputError("A K scan fits every K on items in memory: scan a stack, a field's objects or landmark shapes "
                         "(a store: a sample of its crops from Python, ticlust.scan_k).")

    # ---- inspect: a job for the inspector's worker (its Seen, or a sentence; None: nothing to inspect) ----
    def current(self) -> int | None:
        return None

    def inspection(self, item: int):
        return None

    @abstractmethod
    def anchor(self, seen: Seen):
        """The layer the inspector draws beside (made or updated in the GUI thread); None: it is gone. Every source
        answers it (LayerSource for the layer inputs, the plate's objects part for a plate)."""

    def inspected(self) -> None:
        """The inspector is drawn."""
        self.on_zoom()

    # ---- save, load, export ----
    def save(self, result, path) -> Path:
        return result.save(path)

    def gallery(self, folder):
        """(a job writing prototypes.png and one cluster_NN.png per cluster into ``folder``, a note on them)."""
        from ..io.gallery import export_gallery

        result, data = self.dock.result, self.data()
        return lambda _sink: export_gallery(result, data, folder), ""

    def load(self, path: Path, layer=None):
        result = api.load_result(path)
        self.dock.take_result(result, fitted=result.state is not None)
        return result


class LayerSource(Source):
    """Items read from napari layers, all in memory: the result covers every item and is drawn beside the layer it
    was fitted on (``self.fitted``: the stack, the field's objects, or the landmarks)."""

    def __init__(self, dock):
        super().__init__(dock)
        self.fitted: str | None = None       # the name of the layer the result was fitted on
        self.table = None                    # the objects' table (label, centroid, …) of a field's items
        self.assignments = None              # the result's assignments table: one source for status and inspector
        self._framed = None                  # the result the view was last framed for
        self._stepped = None                 # (result, item) the slider was last handled for
        from .map_panel import ResultMap

        self.map = ResultMap(self)

    def layers_of(self, kind, exclude=()) -> list:
        return [layer for layer in self.viewer.layers if isinstance(layer, kind) and not L.is_ticlust_layer(layer.name)
                and layer.name not in exclude]

    def enable(self, on: bool) -> None:
        jobs = {id(runner.button) for runner in self.dock.runners}       # a job's button is the dock's to hold
        for widget in self.widgets:
            if id(widget) not in jobs:
                widget.enabled = on

    def fitted_layer(self):
        if self.fitted not in self.viewer.layers:
            raise InputError(f"The layer {self.fitted!r} the result was fitted on is gone: open it again.")
        return self.viewer.layers[self.fitted]

    def data(self):
        return self.read(self.fitted_layer())

    def read(self, layer):
        return layer.data

    def job_layers(self) -> list[str]:
        names = L.layer_names(self.fitted) if self.fitted else {}
        return [names[k] for k in ("prototypes", "prototype_labels")] if names else []

    def fit_job(self, items, args: dict, channels=()):
        """``api.run`` of ``items`` (an array, or a function that cuts them in the worker and yields what it cut)."""
        from .parts import drain

        def events():
            stack, params = items, args["params"]
            if callable(items):
                stack, params = yield from items()
            result = yield from api.run(stack, method=args["method"], k=args["k"], device=args["device"],
                                        seed=args["seed"], runs=args["runs"], **params)
            return result
        channels = list(channels)

        def call(sink):
            result = drain(events(), sink)
            if len(channels) > 1:                # channel names travel with the result (and into its CSV)
                result.config["channels"] = channels
            return result
        return call

    def live(self, prototypes) -> None:
        layer = self.viewer.layers[self.fitted] if self.fitted in self.viewer.layers else None
        if layer is not None and not isinstance(layer, _points_type()):
            first = L.layer_names(self.fitted)["prototypes"] not in self.viewer.layers
            L.show_prototypes(self.viewer, layer, prototypes)
            if first:                        # the mosaic sits beside the stack: bring it on screen once
                L.frame_result(self.viewer, layer)

    def note(self, result) -> str:
        layer = self.viewer.layers[self.fitted] if self.fitted in self.viewer.layers else None
        truth = layer.metadata.get("labels") if layer is not None else None
        if truth is None or len(truth) != result.n:
            return ""
        from ..metrics import evaluate

        scores = evaluate(np.asarray(truth), result.labels)
        return f" Against the layer's {len(np.unique(truth))} true classes: ACC {scores['acc']:.3f}, NMI {scores['nmi']:.3f}."

    # ---- a result on the layers ----
    def show(self, result, fresh: bool) -> None:
        layer = self.fitted_layer()
        self.assignments = L.assignment_features(result)
        self.paint(result)
        if isinstance(layer, _points_type()):
            L.show_landmark_result(self.viewer, layer, result)
            layer.selected_data.events.items_changed.connect(self._on_points_selected)
        else:
            L.show_image_result(self.viewer, layer, result)
        layer.metadata["ticlust_result"] = result          # what File > Save Selected Layers writes
        self.viewer.layers.selection.active = layer
        if not fresh:
            self._framed = result
        self.on_step(grid=False)            # show_image_result has just drawn the warp grid of the item under the slider
        if self._framed is not result and (isinstance(layer, _points_type()) or not self.dock.inspector.wanted()):
            self.frame()

    def paint(self, result) -> None:
        """The field's objects painted by cluster (a field source's)."""

    def frame(self) -> None:
        """Frame the view on everything the result shows (the stack, its mosaic, the inspector, the field)."""
        layer = self.fitted_layer()
        self._framed = self.dock.result
        L.frame_result(self.viewer, layer, self.extra_layers())
        self.on_zoom()

    def extra_layers(self) -> list:
        return []

    def on_zoom(self) -> None:
        if self.fitted is not None:
            L.rescale_lines(self.viewer, self.fitted)

    def verdict(self, item: int) -> tuple[int, int, np.ndarray]:
        """(chosen cluster, runner-up, scores (K,)) of a fitted item, from the result's assignments table: the one
        source of the status line, the inspector's frames and its score labels."""
        chosen = int(self.assignments["cluster"][item])
        runner = int(self.assignments["runner_up"][item]) if "runner_up" in self.assignments else chosen
        return chosen, runner, np.asarray(self.dock.result.scores[item])

    def name_of(self, item: int) -> str:
        if self.table is None or len(self.table["label"]) != self.dock.result.n:
            return f"{self.word} {item}"
        return f"object {item} (label {int(self.table['label'][item])})"

    def current(self) -> int | None:
        if self.fitted not in self.viewer.layers or self.viewer.dims.ndim < 3:
            return None
        frame = int(self.viewer.dims.current_step[0])
        return frame if 0 <= frame < self.dock.result.n else None

    def on_step(self, grid: bool = True) -> None:
        """Slider moved: the item's warp grid (unless drawn already), its status line, its inspector."""
        result = self.dock.result
        frame = self.current()
        if result is None or frame is None or self.assignments is None or len(self.assignments["cluster"]) != result.n:
            return
        if grid and self._stepped == (result, frame):     # napari says the step anew when a layer's extent changes
            return
        self._stepped = (result, frame)
        layer = self.viewer.layers[self.fitted]
        if isinstance(layer, _points_type()):
            return
        grids = result.grids is not None and result.grids.shape[0] == result.n
        if grid and grids and L.layer_names(self.fitted)["grid"] in self.viewer.layers:
            L.update_grid(self.viewer, layer, result)
        self.map.current(frame)
        chosen, runner, scores = self.verdict(frame)
        self.dock.say(f"{self.name_of(frame)} → cluster {chosen} (score {scores[chosen]:.4g}); "
                      f"runner-up {runner} ({scores[runner]:.4g}){L.pose_text(result, frame)}")
        if self.dock.inspector.wanted():
            self.dock.inspector.request(frame)

    def item_picture(self, layer, frame: int) -> np.ndarray:
        """Image ``frame`` of an input layer, channels last (as the methods see it)."""
        from ..core.validation import channels_last

        item = np.asarray(layer.data[frame])[None]
        return channels_last(item, item.shape)[0][0]

    def inspection(self, item: int):
        result, layer = self.dock.result, self.fitted_layer()
        if np.ndim(result.prototypes) < 3 or result.prototypes.shape[1:3] != self.item_picture(layer, 0).shape[:2]:
            return None
        picture, device = self.item_picture(layer, item), self.dock.device_value()
        chosen, runner, scores = self.verdict(item)

        def job():
            aligned, _ = api.align_one(result, picture, device, item)
            return Seen(item, np.asarray(aligned), scores, chosen, runner, None, "")
        return job

    def anchor(self, seen: Seen):
        return self.viewer.layers[self.fitted] if self.fitted in self.viewer.layers else None

    def inspected(self) -> None:
        if self._framed is not self.dock.result:
            self.frame()
        else:
            self.on_zoom()

    def show_item(self, item: int) -> None:
        """Put fitted item ``item`` under the slider (status and inspector follow), or select its shape's points."""
        layer = self.fitted_layer()
        if isinstance(layer, _points_type()):
            layer.selected_data = set(np.flatnonzero(L.shape_index_of_points(layer) == item).tolist())
        else:
            step = list(self.viewer.dims.current_step)
            step[0] = item
            self.viewer.dims.current_step = tuple(step)

    def picked(self, what: str) -> list[int]:
        """The item under the slider (in the sorted view's order when that view is shown)."""
        frame, layers = int(self.viewer.dims.current_step[0]), self.viewer.layers
        name = L.layer_names(self.fitted)["sorted"]
        shown = layers[name] if name in layers else None
        return [int(shown.metadata["order"][frame])] if shown is not None and shown.visible else [frame]

    def _on_points_selected(self, _=None) -> None:
        """Points picked in the landmark layer: their shapes highlighted and said."""
        if self.dock.result is None or self.fitted not in self.viewer.layers:
            return
        layer = self.viewer.layers[self.fitted]
        picked = sorted(layer.selected_data)
        shapes = sorted(set(L.shape_index_of_points(layer)[picked].tolist())) if picked else []
        L.highlight_shapes(self.viewer, layer, self.dock.result, shapes)
        if shapes:
            chosen, runner, scores = self.verdict(shapes[0])
            self.dock.say(f"{self.name_of(shapes[0])} → cluster {chosen} (score {scores[chosen]:.4g}); "
                          f"runner-up {runner} ({scores[runner]:.4g})")

    def save(self, result, path) -> Path:
        """The result (.npz) and its assignments table (.csv beside it: the objects' table and, for channels, each
        channel's mean per item, named by the channel), after the output guard: both refused, or both written."""
        from ..core.atomic import check_outputs
        from ..result import npz_path

        check_outputs({}, {"The result file": npz_path(path), "Its table": npz_path(path).with_suffix(".csv")})
        out = result.save(path)
        columns = dict(self.table) if self.table is not None and len(self.table["label"]) == result.n else {}
        names = result.config.get("channels")
        if names and self.fitted in self.viewer.layers:
            means = np.asarray(self.data(), np.float32)
            means = means.reshape(len(means), len(names), -1).mean(-1) if means.ndim == 4 and means.shape[1] == \
                len(names) else means.reshape(len(means), -1, len(names)).mean(1)
            columns.update({f"mean_{name}": means[:, c] for c, name in enumerate(names)})
        result.assignments_table(out.with_suffix(".csv"), columns=columns or None)
        return out

    def load(self, path: Path, layer=None):
        """Open a saved result and show it on ``layer`` (default: the fitted layer, else the first of as many items)."""
        result = api.load_result(path)
        self.dock.when_ready(lambda: self.dock.form.set({**result.config, "method": result.method, "k": result.k}))
        for name in ("seed", "runs"):
            if name in result.config:
                getattr(self.dock, name).value = int(result.config[name])
        candidates = [layer] if layer is not None else \
            [self.viewer.layers[n] for n in (self.fitted,) if n in self.viewer.layers] + self.candidates()
        match = next((c for c in candidates if c is not None and item_count(c) == result.n), None)
        if match is None:                   # kept for Predict (Apply result), shown once its items are open
            self.dock.result, self.dock.model = result, result if result.state is not None else None
            self.dock.controls()
            self.dock.say(f"Loaded {path.name} ({result.method}, K = {result.k}), fitted on {result.n} {self.word}s: "
                          "Apply result (the Predict tab) assigns new ones with it; open its own to see it.")
            return result
        if match.name != self.fitted:
            self.table = None            # shown on a plain stack, not on the objects of a field
        self.fitted = match.name
        self.dock.take_result(result, fitted=result.state is not None)
        self.dock.say(f"Loaded {path.name} ({result.method}, K = {result.k}) onto {match.name}.")
        return result

    def candidates(self) -> list:
        """Layers a loaded result may be shown on."""
        return []


class StackSource(LayerSource):
    """Image layers: one stack (N×H×W, N×H×W×3, a channel-first or channels-last multichannel stack), or several
    stacks of one shape taken as one stack's channels, in the order picked (their names are the channels')."""

    title = "image layers"

    def __init__(self, dock):
        super().__init__(dock)
        self.order: list[str] = []
        self.layers = Select(label="image layers", choices=self._choices,
                             tooltip="An image stack, or several stacks of one shape as its channels (in the order "
                                     "picked: ctrl-click adds one)")
        self.layers.native.setMaximumHeight(110)
        self.layers.changed.connect(self._on_pick)
        self.widgets = [self.layers]

    def _choices(self, _widget=None) -> list[str]:
        from napari.layers import Image

        return [layer.name for layer in self.layers_of(Image) if layer.ndim >= 3]

    def _on_pick(self, value) -> None:
        """Keep the order the layers were picked in (the channels' order)."""
        value = list(value or [])
        self.order = [n for n in self.order if n in value] + [n for n in value if n not in self.order]

    def pick(self, *names: str) -> None:
        """Pick these layers, in this order (what clicking them does)."""
        self.layers.value = list(names)
        self.order = list(names)

    def offered(self) -> bool:
        return bool(self._choices())

    def hint(self) -> str:
        layers = self.picked_layers()
        truth = layers[0].metadata.get("labels") if layers else None
        if truth is not None and len(truth):
            n = len(np.unique(np.asarray(truth)))
            return (f"{layers[0].name} carries true labels of {n} classes: K = {n} compares with them (the accuracy is "
                    "shown after Run).")
        return "Pick an image stack (or several, as its channels), then Run in the Fit tab."

    def picked_layers(self) -> list:
        """The layers picked, in the order picked (none picked: the first offered)."""
        names = [n for n in self.order if n in self.viewer.layers] or list(self.layers.value or []) or \
            self._choices()[:1]
        return [self.viewer.layers[n] for n in names]

    def stacked(self):
        """(the layers picked, their items: the one layer's data, or the channels picked stacked N×C×H×W); a sentence
        when they do not make one stack."""
        layers = self.picked_layers()
        if not layers:
            raise InputError("Choose an input layer first: open an image stack (or File > Open Sample > ticlust).")
        if len(layers) == 1:
            return layers, layers[0].data
        shapes = {tuple(layer.data.shape) for layer in layers}
        if len(shapes) > 1 or any(L.is_rgb(layer) or layer.ndim != 3 for layer in layers):
            raise InputError(f"The layers {', '.join(l.name for l in layers)} are not channels of one stack: give "
                             "grey stacks of one shape (N×H×W each).")
        return layers, np.stack([np.asarray(layer.data) for layer in layers], axis=1)

    def input_layer(self):
        """The stack to fit: the layer picked, or the channels picked as one layer (channels on a slider of their
        own)."""
        layers, data = self.stacked()
        if len(layers) == 1:
            return layers[0]
        name = f"{' + '.join(l.name for l in layers)} {L.SUFFIXES['channels']}"
        metadata = {k: v for k, v in layers[0].metadata.items() if k == "labels"}
        return L.set_image(self.viewer, name, data, metadata=metadata, colormap="gray")

    def scan_items(self, method: str, params: dict):
        return self.stacked()[1]

    def fit(self, args: dict):
        layer = self.input_layer()
        self.fitted, self.table = layer.name, None
        names = [l.name for l in self.picked_layers()]
        return self.fit_job(self.read(layer), args, names)

    def candidates(self) -> list:
        return self.picked_layers() + [self.viewer.layers[n] for n in self._choices()]


class PointsSource(LayerSource):
    """Landmark shapes: a Points layer whose points carry a ``shape_id`` (and a ``landmark`` order) feature."""

    title = "landmark points"
    word = "shape"

    def __init__(self, dock):
        super().__init__(dock)
        self.input = ComboBox(label="points layer", choices=self._choices,
                              tooltip="A Points layer with a shape_id feature (a tpsDig file opens as one)")
        self.widgets = [self.input]

    def _choices(self, _widget=None) -> list[str]:
        return [layer.name for layer in self.layers_of(_points_type()) if "shape_id" in layer.features]

    def offered(self) -> bool:
        return bool(self._choices())

    def hint(self) -> str:
        return "Pick a Points layer of landmark shapes, then Run a shape method in the Fit tab."

    def takes(self, spec) -> bool:
        return spec.inputs == ("landmarks",)

    def read(self, layer):
        from ..io.landmarks import points_to_landmarks

        features = layer.features
        if "shape_id" not in features:
            raise InputError(f"The Points layer {layer.name!r} has no shape_id feature: give every point the id of its "
                             "shape.")
        order = np.asarray(features["landmark"]) if "landmark" in features else None
        return points_to_landmarks(np.asarray(layer.data), np.asarray(features["shape_id"]), order)[0]

    def picked_layer(self):
        if self.input.value not in self.viewer.layers:
            raise InputError("Choose a Points layer of landmark shapes first (File > Open Sample > ticlust > Landmark "
                             "shapes, or a tpsDig file).")
        return self.viewer.layers[self.input.value]

    def fit(self, args: dict):
        layer = self.picked_layer()
        self.fitted, self.table = layer.name, None
        return self.fit_job(self.read(layer), args)

    def scan_items(self, method: str, params: dict):
        return self.read(self.picked_layer())

    def picked(self, what: str) -> list[int]:
        layer = self.fitted_layer()
        picked = sorted(layer.selected_data)
        if not picked:
            raise InputError("No shape is selected: pick points of the shapes in the landmark layer, or type their "
                             "numbers.")
        return sorted(set(L.shape_index_of_points(layer)[picked].tolist()))

    def candidates(self) -> list:
        return [self.viewer.layers[n] for n in self._choices()]


class FieldSource(LayerSource):
    """A field (one image layer, or several of one shape as its channels) and its Labels layer: every object cut out
    (the objects route, as ``ticlust fit FIELD --labels``) and clustered, or its contour traced for a shape method;
    the objects painted back by cluster. Predict assigns a field's objects with a result fitted elsewhere. A movie
    (T×Y×X, its labels' ids the tracks) gets its states along the tracks too (:class:`.movie.MovieTracks`)."""

    title = "field and labels"
    pages = ("Fit", "Predict", "Curate", "Export", "Tracks")
    word = "object"

    def __init__(self, dock):
        super().__init__(dock)
        self.order: list[str] = []
        self.field_name, self.options = None, {}
        self.images = Select(label="field layers", choices=self._image_choices,
                             tooltip="The field's image, or its channels (one layer each, in the order picked)")
        self.images.native.setMaximumHeight(90)
        self.labels = ComboBox(label="labels layer", choices=self._labels_choices,
                               tooltip="The field's segmentation (0 = background, one id per object)")
        self.show_crop = CheckBox(value=False, text="crop options")
        self.crop = crop_options()
        self.crop.visible = False
        self.show_crop.changed.connect(lambda on: setattr(self.crop, "visible", bool(on)))
        self.images.changed.connect(self._on_pick)
        from ..objects.segment import MIN_DIAMETER, THRESHOLDS

        self.diameter = FloatSpinBox(label="diameter", min=MIN_DIAMETER, max=1000, value=15, step=1,
                                     tooltip="The nuclei's expected diameter in pixels (measure one across)")
        self.threshold = ComboBox(label="threshold", choices=list(THRESHOLDS), value="li",
                                  tooltip="li: most fields; triangle: dim nuclei on a dark background; local: uneven "
                                          "illumination (ticlust.segment_nuclei)")
        self.segment_run = dock.button("Segment nuclei", self.segment,
                                       tooltip="Find the nuclei of the first field layer picked (its nuclear channel) "
                                               "as a Labels layer to correct with napari's brush before Run")
        self.widgets = [self.images, self.labels, self.diameter, self.threshold, self.segment_run.button,
                        self.show_crop, self.crop]
        self.apply_run = dock.button("Apply result", self.apply,
                                     tooltip="Assign the field's objects with the dock's (or a loaded) result, cut as "
                                             "its objects were; painted by cluster over the field")
        self.predict_widgets = [self.apply_run.button]
        from .movie import MovieTracks

        self.movie = MovieTracks(self)
        self.extra_pages = [("Tracks", self.movie.page)]

    busy = property(lambda self: self.movie.busy)

    def show(self, result, fresh: bool) -> None:
        super().show(result, fresh)
        self.movie.show(result)

    def close(self) -> None:
        self.movie.reading.drop()

    def _image_choices(self, _widget=None) -> list[str]:
        from napari.layers import Image

        return [layer.name for layer in self.layers_of(Image) if layer.ndim in (2, 3)]

    def _labels_choices(self, _widget=None) -> list[str]:
        """"none" and the Labels layers that segment the chosen field (any Labels layer for contours)."""
        from napari.layers import Labels
        from ..objects.crops import labels_fit

        layers = self.field_layers()
        image = layers[0].data if layers else None       # the channels share its shape: it settles the fit
        return [NO_LABELS] + [layer.name for layer in self.layers_of(Labels)
                              if image is None or labels_fit(image, layer.data)]

    def _on_pick(self, value) -> None:
        value = list(value or [])
        self.order = [n for n in self.order if n in value] + [n for n in value if n not in self.order]
        self.labels.reset_choices()

    def pick(self, *names: str, labels: str | None = None) -> None:
        """Pick the field's layers (in this order) and its labels layer."""
        self.images.value = list(names)
        self.order = list(names)
        self.labels.reset_choices()
        if labels is not None:
            self.labels.value = labels

    def offered(self) -> bool:
        """A field and its labels, or a field (a 2-D image) to segment."""
        from napari.layers import Image

        return bool(self._image_choices()) and (len(self._labels_choices()) > 1 or
                                                any(layer.ndim == 2 for layer in self.layers_of(Image)))

    def hint(self) -> str:
        return ("Pick a field (or its channel layers) and its labels layer — or Segment nuclei to make one —, then "
                "Run in the Fit tab.")

    def segment(self):
        """Segment the nuclei of the first field layer picked in a worker (``objects.segment.nuclei_steps``, one step
        of the progress bar each): a Labels layer ``<field> nuclei``, picked as the field's labels, to correct with
        napari's brush and eraser before Run. Cancel or a failure adds nothing. Returns the worker."""
        from ..objects.segment import nuclei_steps
        from .parts import drain

        layers = self.field_layers()
        if not layers:
            self.dock.refuse("Open the field's image first: the first layer picked (its nuclear channel) is segmented.")
            return None
        field, diameter, threshold = layers[0], self.diameter.value, self.threshold.value
        image = np.asarray(field.data)

        def done(labels) -> None:
            name = f"{field.name} nuclei"
            if name in self.viewer.layers:
                self.viewer.layers[name].data = labels
            else:
                self.viewer.add_labels(labels, name=name, scale=field.scale, translate=field.translate)
            self.labels.reset_choices()
            self.labels.value = name
            self.dock.say(f"{int(labels.max())} nuclei found in {field.name}: correct them in {name!r} with napari's "
                          "brush and eraser if need be, then Run in the Fit tab.")
        self.dock.say(f"Segmenting the nuclei of {field.name}…")
        return self.dock.run_job(self.segment_run, lambda sink: drain(nuclei_steps(image, diameter,
                                                                                   threshold=threshold), sink),
                                 done=done, kept="no labels layer was added", busy=True)

    def takes(self, spec) -> bool:
        return True

    def field_layers(self) -> list:
        """The field's layers, in the order picked (none picked: the first offered)."""
        names = [n for n in self.order if n in self.viewer.layers] or list(self.images.value or []) or \
            self._image_choices()[:1]
        return [self.viewer.layers[n] for n in names]

    def image(self):
        """The field's pixels: the layer's, or its channel layers' stacked last (Y×X×C)."""
        layers = self.field_layers()
        if not layers:
            raise InputError("Choose the field's image layer first.")
        if len(layers) == 1:
            return layers[0].data
        if len({tuple(layer.data.shape) for layer in layers}) > 1:
            raise InputError(f"The layers {', '.join(l.name for l in layers)} are not channels of one field: give "
                             "grey images of one shape.")
        return np.stack([np.asarray(layer.data) for layer in layers], axis=-1)

    def labels_layer(self):
        name = self.labels.value
        return self.viewer.layers[name] if name not in (None, NO_LABELS) and name in self.viewer.layers else None

    def route(self, method: str, params: dict):
        """What the worker calls to cut the objects out (or trace their contours, for a shape method): the one objects
        route (``objects.route.objects_route``, as the CLI's ``--labels``); the layers are read, never changed."""
        from ..methods import get_method
        from ..objects.route import objects_route

        labels = self.labels_layer()
        if labels is None:
            raise InputError("Choose the field's labels layer first (a segmentation: 0 = background, one id per "
                             "object), or Segment nuclei.")
        landmarks = get_method(method).inputs == ("landmarks",)
        image, mask, o = None if landmarks else self.image(), labels.data, {w.name: w.value for w in self.crop}
        return lambda: objects_route(image, mask, method, params, keep_border=o["keep_border"], size=o["size"] or None,
                                     orient=o["orient"], rescale=o["rescale"], normalize=o["normalize"])

    def cut(self, method: str, params: dict):
        """:meth:`route`, the source now fitting what it cuts."""
        from ..methods import get_method

        route = self.route(method, params)
        field = (self.field_layers() or [self.labels_layer()])[0]
        self.field_name, self.table, self.options = field.name, None, {w.name: w.value for w in self.crop}
        self.fitted = L.layer_names(field.name)["contours" if get_method(method).inputs == ("landmarks",) else
                                                "objects"]
        return route

    def scan_items(self, method: str, params: dict):
        route = self.route(method, params)
        return lambda: route().items

    def fit(self, args: dict):
        route = self.cut(args["method"], args["params"])

        def items():
            cut = route()
            yield Objects(cut.items, cut.table)
            return cut.items, cut.params
        contours = self.fitted.endswith(L.SUFFIXES["contours"])
        return self.fit_job(items, args, () if contours else [layer.name for layer in self.field_layers()])

    def job_layers(self) -> list[str]:
        names = L.layer_names(self.field_name)
        return [names[k] for k in ("objects", "contours")] + super().job_layers()

    def fit_event(self, event) -> None:
        """The objects are cut out: shown as the stack (or contours) this run clusters."""
        if not isinstance(event, Objects):
            return
        self.table = event.table
        field = self.viewer.layers[self.field_name] if self.field_name in self.viewer.layers else self.labels_layer()
        labels = self.labels_layer()
        kinds = labels.metadata.get("kinds") if labels is not None else None
        truth = {"labels": np.asarray(kinds)[event.table["label"]]} if kinds is not None else {}
        if self.fitted.endswith(L.SUFFIXES["contours"]):
            from ..io.landmarks import landmarks_to_points

            coords, shape_id, landmark = landmarks_to_points(event.data)
            lo, hi = L.field_extent(field)
            translate = (float(lo[0]), float(hi[1] + max(8.0, (hi[1] - lo[1]) / 32)))
            features = {"shape_id": shape_id, "landmark": landmark}
            if self.fitted in self.viewer.layers:
                points = self.viewer.layers[self.fitted]
                points.data, points.translate, points.features, points.metadata = coords, translate, features, truth
            else:
                self.viewer.add_points(coords, name=self.fitted, translate=translate, size=1.0, features=features,
                                       metadata=truth)
        else:
            L.show_objects(self.viewer, field, event.data, truth)
        self.dock.say(f"{len(event.table['label'])} objects cut out of {field.name}; clustering…")

    def done_text(self, result) -> str:
        from ..plate.view import record_route

        if not self.fitted.endswith(L.SUFFIXES["contours"]):
            record_route(result, self.options)     # Apply result cuts new objects the way these were cut
        return super().done_text(result)

    def paint(self, result) -> None:
        labels = self.labels_layer()
        if self.table is not None and len(self.table["label"]) == result.n and labels is not None:
            L.paint_objects(self.viewer, labels, self.table, self.assignments,
                            L.layer_names(self.field_name)["painted"])

    def extra_layers(self) -> list:
        names = (self.field_name, L.layer_names(self.field_name)["painted"]) if self.table is not None else ()
        return [self.viewer.layers[n] for n in names if n in self.viewer.layers]

    def click_at(self, position, add: bool = False):
        """A click on the painted objects puts the object under it under the slider (or selects its contour)."""
        if self.dock.result is None or self.table is None:
            return None
        name = L.layer_names(self.field_name)["painted"]
        if name not in self.viewer.layers or not self.viewer.layers[name].visible:
            return None
        item = L.object_at(self.viewer.layers[name], position)
        if item is None or item >= self.dock.result.n or self.fitted not in self.viewer.layers:
            return None
        self.viewer.layers[name].selected_label = item + 1
        self.show_item(item)
        return item

    select_at = click_at

    def picked(self, what: str) -> list[int]:
        if self.fitted.endswith(L.SUFFIXES["contours"]):
            return PointsSource.picked(self, what)
        return super().picked(what)

    def apply(self):
        """Assign the field's objects with the dock's result in a worker (cut as the result's objects were:
        ``plate.view.assign_objects``) and paint them over the field; Cancel or a failure paints nothing."""
        from ..plate.view import assign_objects
        from .parts import drain

        labels, result = self.labels_layer(), self.dock.model
        if result is None or labels is None:
            self.dock.say("Fit or load a result, and choose the field and its labels layer, first.")
            return None
        try:
            image, name = self.image(), self.field_layers()[0].name
        except (InputError, IndexError):
            self.dock.say(f"Choose the image layer that {labels.name!r} segments first.")
            return None

        def done(assigned) -> None:
            table, columns = assigned
            painted = L.paint_objects(self.viewer, labels, table, columns, L.layer_names(name)["painted"])
            self.dock.say(f"{len(columns['cluster'])} objects of {labels.name} painted by cluster in {painted.name!r}.")
        return self.dock.run_job(self.apply_run, lambda sink: drain(assign_objects(result, image, labels.data), sink),
                                 done=done, kept="nothing was changed")

    def candidates(self) -> list:
        return []


def _points_type():
    from napari.layers import Points

    return Points


def item_count(layer) -> int:
    """The items a layer holds: a stack's images, a landmark layer's shapes."""
    if isinstance(layer, _points_type()):
        return len(set(np.asarray(layer.features["shape_id"]).tolist())) if "shape_id" in layer.features else 0
    return int(layer.data.shape[0])

