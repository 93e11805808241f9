"""The ticlust dock widget: pick an input layer, a method and its parameters, Run (or Cancel), and
watch the prototypes sharpen; then step through the stack to inspect each image's assignment.

No ``from __future__ import annotations`` here: napari finds the viewer parameter by its annotation
object, and a string annotation leaves ``Plugins > ticlust`` without a viewer.
"""
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from magicgui.widgets import CheckBox, ComboBox, Container, Label, ProgressBar, PushButton, SpinBox, Table
from napari.layers import Image, Labels, Points
from napari.utils.notifications import show_error, show_info
from qtpy.QtCore import QTimer
from napari.viewer import Viewer  # napari injects the viewer by this annotation: it must be the class, not a string

from .. import api
from ..errors import InputError
from ..core.validation import channels_last
from ..core.device import DEVICE_CHOICES
from ..events import Done, Progress, Snapshot
from ..methods import get_method
from ..objects.route import objects_route
from ..objects.crops import labels_fit
from ..plate.view import record_route
from ..api import load_result
from ..core.atomic import check_outputs
from ..result import ClusteringResult, npz_path
from . import layers as L
from .curation_panel import CurationPanel
from .map_panel import ResultMap
from .method_form import MethodForm, crop_options
from .store_panel import STORE_PANEL
from .workers import RunButton, show_progress, start_worker, when_closed

LIVE_UPDATE_S = 0.4   # at most this often the live prototypes layer is redrawn
FORM_WIDTH = 380      # the dock's width in pixels: the viewer keeps the rest of a 1600-pixel screen
SETTINGS = ("seed", "runs")
NO_LABELS = "none"


@dataclass
class Objects:
    """The worker's first event on a segmentation: the cut-out objects (or contours) and their table."""

    data: np.ndarray
    table: dict


class TiclustWidget(Container):
    """Dock widget driving ``ticlust.run`` in a napari thread worker."""

    def __init__(self, viewer: Viewer):
        super().__init__(labels=True)
        self.viewer = viewer
        self.result: ClusteringResult | None = None
        self.result_layer_name: str | None = None
        self.assignments = None          # the result's assignments table: one source for status and inspector
        self._rollback: dict[str, object] = {}
        self._last_live = self._last_progress = 0.0
        self._finished_cleanly = False
        self._on_done = None             # what the running worker's Done does: show a run, or apply an edit
        self._inspecting = None          # the worker aligning prototypes onto the current image
        self._pending_frame: int | None = None
        self._inspected = None           # the result the inspector layers were made for
        self._framed = None              # the result the view was last framed for
        self.objects = None              # (field layer, labels layer, table) of a run on a segmentation

        self.extraction = crop_options()
        self.extraction.visible = False
        self.form = MethodForm(extras=[self.extraction])
        self.method, self.k, self.params = self.form.method, self.form.k, self.form.params
        self.show_advanced, self.advanced, self.advanced_area = self.form.show_advanced, self.form.advanced, self.form.area
        self.input = ComboBox(label="input layer", choices=self._input_choices,
                              tooltip="An image stack (N×H×W, N×H×W×C or N×C×H×W) or, for shape methods, a Points "
                                      "layer with a shape_id feature")
        self.labels = ComboBox(label="labels layer", choices=self._labels_choices,
                               tooltip="Optional segmentation of the input image (0 = background, one id per object): "
                                       "every object is cut out and clustered, then painted back by cluster")
        self.device = ComboBox(label="device", choices=list(DEVICE_CHOICES), value="auto",
                               tooltip="auto uses a CUDA GPU when there is one, else the CPU")
        self.seed = SpinBox(label="seed", min=0, max=2**31 - 1, value=0, tooltip="The same seed gives the same result")
        self.runs = SpinBox(label="runs", min=1, max=100, value=1, tooltip="Train this many seeds and keep the lowest final loss")
        self.run_button = PushButton(text="Run")
        self.progress = ProgressBar(label="progress", min=0, max=1, value=0)
        self.status = Label(label="", value="Choose an input layer and press Run.")
        self.status.native.setWordWrap(True)
        self.inspect = CheckBox(value=True, text="Inspector",
                                tooltip="Show every prototype aligned onto the image under the slider, with its score")
        self.save_button = PushButton(text="Save result…", enabled=False)
        self.load_button = PushButton(text="Load result…")
        files = Container(widgets=[self.save_button, self.load_button], layout="horizontal", labels=False)
        self.table = Table(label="clusters", value={"cluster": [], "size": [], "mean score": [], "closest items": []})
        self.table.native.setMinimumHeight(180)
        self.curation = CurationPanel(self)     # shown once there is a result
        self.object_map = ResultMap(self)       # the result's object map, docked once there is a result
        self.extend([self.method, self.input, self.labels, self.k, self.params, self.show_advanced, self.device,
                     self.seed, self.runs, self.run_button, self.progress, self.status, self.inspect, files, self.table])
        self.native.layout().addWidget(self.curation.native)     # the dock's full width, no label column
        # Advanced parameters scroll in a box of their own (the form's area), so that the dock fits a
        # 1000-pixel-high screen; the status line wraps, so nothing widens the dock past FORM_WIDTH
        self.native.layout().insertWidget(self.index(self.show_advanced) + 1, self.advanced_area)
        self.native.setMinimumWidth(FORM_WIDTH)

        self.method.changed.connect(self._on_method)
        self.input.changed.connect(self._on_input)
        self.labels.changed.connect(lambda _=None: setattr(self.extraction, "visible", self.labels_layer() is not None))
        self.runner = RunButton(self.run_button, self.start, lambda text: setattr(self.status, "value", text))
        self.save_button.changed.connect(self._ask_save)
        self.load_button.changed.connect(self._ask_load)
        self.table.native.cellDoubleClicked.connect(self._jump_to_cluster)
        for event in (viewer.layers.events.inserted, viewer.layers.events.removed):
            event.connect(lambda _=None: (self.input.reset_choices(), self.labels.reset_choices()))
        viewer.dims.events.current_step.connect(self._on_step)
        viewer.scene.camera.events.zoom.connect(self._on_zoom)
        viewer.mouse_drag_callbacks.append(self._on_click)
        self._on_method()
        QTimer.singleShot(0, lambda: start_worker(warm_up))    # once the window is drawn, off the GUI thread
        when_closed(self, TiclustWidget._closed)

    def _closed(self) -> None:
        """The widget's dock was closed (or the viewer's window): its object map goes with it (the map's dock, and
        its worker pool with the map)."""
        self.object_map.close()

    # ---- form ------------------------------------------------------------------------------------
    @property
    def spec(self):
        return get_method(self.method.value)

    def _input_choices(self, _widget=None) -> list[str]:
        wanted = Points if self.spec.inputs == ("landmarks",) else Image
        return [layer.name for layer in self.viewer.layers if isinstance(layer, wanted) and not self._is_ours(layer)]

    def _labels_choices(self, _widget=None) -> list[str]:
        """"none" and the Labels layers that segment the chosen image (any Labels layer for contours)."""
        image = None if self.spec.inputs == ("landmarks",) else self.input_layer()
        if image is None and self.spec.inputs != ("landmarks",):
            return [NO_LABELS]
        return [NO_LABELS] + [layer.name for layer in self.viewer.layers
                              if isinstance(layer, Labels) and not self._is_ours(layer)
                              and (image is None or labels_fit(image.data, layer.data))]

    def labels_layer(self):
        name = self.labels.value
        return self.viewer.layers[name] if name != NO_LABELS and name in self.viewer.layers else None

    def _is_ours(self, layer) -> bool:
        return L.is_ticlust_layer(layer.name)

    def _on_method(self, _=None) -> None:
        """Another method: the form has rebuilt its parameters (MethodForm.rebuild, connected first); the input
        layers it takes are offered."""
        self.input.reset_choices()
        self._on_input()

    def _on_input(self, _=None) -> None:
        self.labels.reset_choices()
        layer = self.input_layer()
        if layer is None or self.worker is not None:
            return
        labels = layer.metadata.get("labels") if hasattr(layer, "metadata") else None
        if labels is not None and len(labels):
            n_classes = len(np.unique(np.asarray(labels)))
            self.status.value = (f"{layer.name} carries true labels of {n_classes} classes: K = {n_classes} "
                                 f"compares with them (the accuracy is shown after Run).")

    def param_widgets(self) -> list:
        return self.form.widgets()

    def param(self, name: str):
        """The form widget of a method parameter (essential or advanced)."""
        return self.form.param(name)

    def param_values(self) -> dict:
        """The method parameters as set in the form (strings are converted by the method's config)."""
        return self.form.values()

    def set_form(self, config: dict) -> None:
        """Show a result's settings in the form: method, K, seed, runs and every parameter it used."""
        self.form.set(config)
        for name in SETTINGS:
            if name in config:
                getattr(self, name).value = int(config[name])
        if config.get("device") in DEVICE_CHOICES:
            self.device.value = config["device"]

    def input_layer(self):
        name = self.input.value
        return self.viewer.layers[name] if name in self.viewer.layers else None

    # ---- running ---------------------------------------------------------------------------------
    @property
    def worker(self):
        """The running job's worker (a run, a split, a refine), or None."""
        return self.runner.worker

    def start(self):
        """Start training in a thread worker; returns the worker (None when the input is missing)."""
        labels = self.labels_layer()
        contours = labels is not None and self.spec.inputs == ("landmarks",)
        layer = labels if contours else self.input_layer()
        if layer is None:
            show_error("Choose an input layer first: open an image stack (or File > Open Sample > ticlust).")
            return None
        try:
            data = None if labels is not None else self._layer_data(layer)
        except InputError as exc:
            show_error(str(exc))
            return None
        params = self.param_values()
        job_args = dict(method=self.method.value, k=self.k.value, device=self.device.value, seed=self.seed.value,
                        runs=self.runs.value)
        cut = self._extraction_job(layer, labels, params) if labels is not None else None

        def events():
            stack, run_params = data, params
            if cut is not None:     # objects from a segmentation: the objects route, in the worker
                route = cut()
                stack, run_params = route.items, route.params
                yield Objects(route.items, route.table)
            yield from api.run(stack, **job_args, **run_params)

        self.objects = (layer, labels, None) if labels is not None else None
        self.result_layer_name = layer.name
        return self.launch(events, self._show_run, "Starting…")

    def launch(self, events, on_done, status: str):
        """Run ``events()`` (a generator of Progress / Snapshot / … / Done) in a thread worker: progress in the
        status line, live prototypes, Cancel on the Run button; ``on_done(result)`` on the GUI thread at
        Done. A failure or Cancel puts back every layer the job touched. Returns the worker."""
        self._rollback = {}
        self._finished_cleanly = False
        self._on_done = on_done
        worker = self.runner.run(events, yielded=self._on_event, failed=self._on_error, finished=self._on_finished)
        self._set_running(True)
        self.status.value = status
        return worker

    def cancel(self) -> None:
        """Stop at the next step of training; layers touched by this run are put back as they were."""
        self.runner.cancel()

    def _extraction_job(self, field, labels, params: dict):
        """What the worker calls to cut the objects out (or trace their contours): the one objects route
        (``object_route.objects_route``, as the CLI's ``--labels``); the layers' data are read there, never changed."""
        options = {w.name: w.value for w in self.extraction}
        image, mask, method = field.data, labels.data, self.method.value
        return lambda: objects_route(image, mask, method, params, keep_border=options["keep_border"],
                                     size=options["size"] or None, orient=options["orient"], rescale=options["rescale"],
                                     normalize=options["normalize"])

    def _layer_data(self, layer):
        if isinstance(layer, Points):
            from ..io.landmarks import points_to_landmarks

            features = layer.features
            if "shape_id" not in features:
                raise InputError(f"The Points layer {layer.name!r} has no shape_id feature: give every point the id of its shape.")
            order = np.asarray(features["landmark"]) if "landmark" in features else None
            return points_to_landmarks(np.asarray(layer.data), np.asarray(features["shape_id"]), order)[0]
        return layer.data

    def _on_event(self, event) -> None:
        if isinstance(event, Objects):
            self._show_objects(event)
        elif isinstance(event, Progress):
            self._last_progress = show_progress(self.progress, lambda line: setattr(self.status, "value", line), event,
                                                self._last_progress)
        elif isinstance(event, Snapshot):
            now = time.perf_counter()
            layer = self.viewer.layers[self.result_layer_name] if self.result_layer_name in self.viewer.layers else None
            if now - self._last_live >= LIVE_UPDATE_S and isinstance(layer, Image) and event.prototypes.ndim >= 3:
                self._last_live = now
                names = L.layer_names(self.result_layer_name)
                first = names["prototypes"] not in self.viewer.layers
                for key in ("prototypes", "prototype_labels"):
                    self._remember(names[key])
                L.show_prototypes(self.viewer, layer, event.prototypes)
                if first:   # the mosaic sits beside the stack: bring it on screen once
                    L.frame_result(self.viewer, layer)
        elif isinstance(event, Done):
            self._finished_cleanly = True
            self._on_done(event.result)

    def _show_run(self, result: ClusteringResult) -> None:
        """A run's result: shown, framed, nothing to undo. A run on the crops of a segmentation records how they
        were cut (``config["objects"]``), so that Apply result cuts new objects the same way."""
        if self.objects is not None:
            record_route(result, {w.name: w.value for w in self.extraction})   # the form is locked while it runs
        self.curation.forget()
        self.show_result(result, self.viewer.layers[self.result_layer_name])
        self.status.value = (f"Done: {result.k} clusters in {result.timing.get('total_s', 0):.1f} s "
                             f"on {result.device}, final loss {result.final_loss:.4g}.{self.accuracy_note(result)}")

    def accuracy_note(self, result: ClusteringResult) -> str:
        """" Against the layer's C true classes: ACC …, NMI …." when the fitted layer carries true labels."""
        layer = self.fitted_layer()
        truth = layer.metadata.get("labels") if isinstance(layer, Image) else None
        if truth is None or len(truth) != result.n:
            return ""
        from ..metrics import evaluate

        scores = evaluate(np.asarray(truth), result.labels)
        return f" Against the layer's {len(np.unique(truth))} true classes: ACC {scores['acc']:.3f}, NMI {scores['nmi']:.3f}."

    def fitted_layer(self):
        """The layer the current result was fitted on (the stack, the objects of a field, or landmarks)."""
        if self.result_layer_name not in self.viewer.layers:
            raise InputError(f"The layer {self.result_layer_name!r} the result was fitted on is gone: open it again.")
        return self.viewer.layers[self.result_layer_name]

    def fitted_data(self):
        """The data the current result was fitted on, as the methods read it (for split, refine, galleries)."""
        return self._layer_data(self.fitted_layer())

    def _show_objects(self, event: Objects) -> None:
        """The objects are cut out: show them as the stack (or contours) this run clusters."""
        field, labels, _ = self.objects
        self.objects = (field, labels, event.table)
        names = L.layer_names(field.name)
        kinds = labels.metadata.get("kinds")
        truth = {"labels": np.asarray(kinds)[event.table["label"]]} if kinds is not None else {}
        if self.spec.inputs == ("landmarks",):                    # contours: (N, n_points, 2) landmarks
            from ..io.landmarks import landmarks_to_points

            self._remember(names["contours"])
            coords, shape_id, landmark = landmarks_to_points(event.data)
            lo, hi = L.field_extent(field)
            translate = (float(lo[0]), float(hi[1] + max(8.0, (hi[1] - lo[1]) / 32)))
            features = {"shape_id": shape_id, "landmark": landmark}
            if names["contours"] in self.viewer.layers:
                points = self.viewer.layers[names["contours"]]
                points.data, points.translate = coords, translate
                points.features, points.metadata = features, truth
            else:
                self.viewer.add_points(coords, name=names["contours"], translate=translate, size=1.0, features=features,
                                       metadata=truth)
            self.result_layer_name = names["contours"]
        else:
            self._remember(names["objects"])
            self.result_layer_name = L.show_objects(self.viewer, field, event.data, truth).name
        self.status.value = f"{len(event.table['label'])} objects cut out of {field.name}; clustering…"

    def _remember(self, name: str) -> None:
        """Note how a layer was before this run touched it (None: it did not exist)."""
        if name not in self._rollback:
            self._rollback[name] = self.viewer.layers[name].data if name in self.viewer.layers else None

    def _undo_run(self) -> None:
        for name, data in self._rollback.items():
            if name not in self.viewer.layers:
                continue
            if data is None:
                self.viewer.layers.remove(name)
            else:
                self.viewer.layers[name].data = data
        self._rollback = {}

    def _on_error(self, exc: Exception) -> None:
        """Show what went wrong as a napari notification and undo the run's half-made layers."""
        message = str(exc) if isinstance(exc, InputError) else f"ticlust stopped with {type(exc).__name__}: {exc}"
        show_error(message)
        self._undo_run()
        self.status.value = f"Stopped: {message}"

    def _on_finished(self, _cancelled: bool) -> None:
        if not self._finished_cleanly:
            self._undo_run()
            if not self.status.value.startswith("Stopped"):
                self.status.value = "Cancelled: nothing was changed."
        self._set_running(False)

    def _set_running(self, running: bool) -> None:
        for widget in (self.method, self.input, self.labels, self.extraction, self.k, self.params, self.advanced, self.device,
                       self.seed, self.runs,
                       self.load_button, self.curation):
            widget.enabled = not running
        self.save_button.enabled = not running and self.result is not None
        if not running and self._finished_cleanly:
            self.progress.value = self.progress.max

    # ---- results ---------------------------------------------------------------------------------
    def show_result(self, result: ClusteringResult, input_layer, reframe: bool = True) -> None:
        """Make or update every result layer, the features, the cluster table and the curation panel, and
        frame the view (not after an edit: ``reframe`` False keeps the user's view)."""
        self.result = result
        if not reframe:
            self._framed = result
        self.result_layer_name = input_layer.name
        self.assignments = L.assignment_features(result)
        if self.objects is not None and self.objects[2] is not None and len(self.objects[2]["label"]) == result.n:
            field, labels, table = self.objects     # a run (or a loaded result) on the objects of a field
            L.paint_objects(self.viewer, labels, table, self.assignments, L.layer_names(field.name)["painted"])
        if isinstance(input_layer, Points):
            L.show_landmark_result(self.viewer, input_layer, result)
            input_layer.selected_data.events.items_changed.connect(self._on_points_selected)
        else:
            L.show_image_result(self.viewer, input_layer, result)
        rows = L.cluster_summary(result)
        self.table.value = {key: [row[key] for row in rows] for key in rows[0]}
        self.curation.show_for(result)
        self.save_button.enabled = True
        self.viewer.layers.selection.active = input_layer
        self._on_step(grid=False)       # show_image_result has just drawn the warp grid of the item under the slider
        if self._framed is not result and (isinstance(input_layer, Points) or not self._inspector_wanted(input_layer)):
            self._frame(input_layer)
        self.object_map.shown(result)

    def _frame(self, input_layer) -> None:
        self._framed = self.result
        field = self.objects[0] if self.objects is not None and self.objects[2] is not None else None
        painted = L.layer_names(field.name)["painted"] if field is not None else None
        extra = [self.viewer.layers[n] for n in (getattr(field, "name", None), painted) if n in self.viewer.layers]
        L.frame_result(self.viewer, input_layer, extra)
        self._on_zoom()

    def verdict(self, item: int) -> tuple[int, int, np.ndarray]:
        """(chosen cluster, runner-up, scores (K,)) of a fitted item, from the result's assignments table:
        the one source of the status line, the inspector's frames and its score labels."""
        chosen = int(self.assignments["cluster"][item])
        runner = int(self.assignments["runner_up"][item]) if "runner_up" in self.assignments else chosen
        return chosen, runner, np.asarray(self.result.scores[item])

    def save_result(self, path) -> Path:
        """Save the current result (.npz) and its assignments table (.csv beside it)."""
        if self.result is None:
            raise ValueError("There is no result to save yet: press Run first.")
        check_outputs({}, {"The result file": npz_path(path), "Its table": npz_path(path).with_suffix(".csv")})
        out = self.result.save(path)
        table = self.objects[2] if self.objects is not None else None
        columns = table if table is not None and len(table["label"]) == self.result.n else None
        self.result.assignments_table(out.with_suffix(".csv"), columns=columns)
        show_info(f"Saved {out.name} and {out.with_suffix('.csv').name}.")
        return out

    def load_result(self, path, layer=None) -> ClusteringResult:
        """Open a saved result, put its settings in the form, and show it against ``layer`` (default: the
        chosen input layer, else the first stack with as many items)."""
        result = load_result(path)
        self.set_form({**result.config, "method": result.method, "k": result.k})
        current = self.viewer.layers[self.result_layer_name] if self.result_layer_name in self.viewer.layers else None
        candidates = [layer] if layer is not None else [self.input_layer(), current] + [
            self.viewer.layers[name] for name in self.input.choices]
        match = next((c for c in candidates if c is not None and _item_count(c) == result.n), None)
        if match is not None:
            if self.objects is not None and match.name != self.result_layer_name:
                self.objects = None          # the result is shown on a plain stack, not on the objects of a field
            if match.name in self.input.choices:     # the objects of a field stay shown, the field stays chosen
                self.input.value = match.name
            self.curation.forget()
            self.show_result(result, match)
            self.status.value = f"Loaded {Path(path).name} ({result.method}, K = {result.k}) onto {match.name}."
        else:
            self.result = result
            self.assignments = L.assignment_features(result)
            self.save_button.enabled = True
            show_info(f"Loaded {Path(path).name}; open its input stack ({result.n} items) to see the assignments.")
            self.status.value = (f"Loaded {Path(path).name}: open its input stack ({result.n} items) and load it "
                                 "again; to assign new objects with it, use Apply result in Plugins > ticlust > "
                                 f"{STORE_PANEL}.")
        return result

    def _ask_save(self, _=None) -> None:
        from qtpy.QtWidgets import QFileDialog

        path, _ = QFileDialog.getSaveFileName(self.native, "Save ticlust result", "ticlust_result.npz", "ticlust result (*.npz)")
        if path:
            try:
                self.save_result(path)
            except InputError as exc:            # the output guard's sentence, nothing written
                show_error(str(exc))

    def _ask_load(self, _=None) -> None:
        from qtpy.QtWidgets import QFileDialog

        path, _ = QFileDialog.getOpenFileName(self.native, "Load ticlust result", "", "ticlust result (*.npz)")
        if path:
            try:
                self.load_result(path)
            except ValueError as exc:
                show_error(str(exc))

    # ---- inspection ------------------------------------------------------------------------------
    def _on_zoom(self, _=None) -> None:
        if self.result_layer_name is not None:
            L.rescale_lines(self.viewer, self.result_layer_name)

    def _inspector_wanted(self, layer) -> bool:
        result = self.result
        return bool(self.inspect.value and result is not None and result.prototypes.ndim >= 3
                    and result.prototypes.shape[1:3] == self._item(layer, 0).shape[:2]
                    and (self._inspected is not result or L.layer_names(layer.name)["inspector"] in self.viewer.layers))

    def _item(self, layer, frame: int) -> np.ndarray:
        """Image ``frame`` of an input layer, channels last (as the methods see it)."""
        item = np.asarray(layer.data[frame])[None]
        return channels_last(item, item.shape)[0][0]

    def _on_step(self, _=None, grid: bool = True) -> None:
        """Slider moved: redraw the current image's warp grid (unless ``grid`` is False: it is drawn), its status
        line and its inspector."""
        result, name = self.result, self.result_layer_name
        if result is None or name not in self.viewer.layers or self.viewer.dims.ndim < 3:
            return
        layer = self.viewer.layers[name]
        if isinstance(layer, Points) or self.assignments is None:
            return
        frame = int(self.viewer.dims.current_step[0])
        if not 0 <= frame < result.n:
            return
        names = L.layer_names(name)
        # only layers that still exist are updated: one the user deleted (or a closing viewer removed) stays gone
        if grid and result.grids is not None and result.grids.shape[0] == result.n and names["grid"] in self.viewer.layers:
            L.update_grid(self.viewer, layer, result)
        self.object_map.current(frame)
        chosen, runner, scores = self.verdict(frame)
        self.status.value = (f"{self._item_name(frame)} → cluster {chosen} (score {scores[chosen]:.4g}); "
                             f"runner-up {runner} ({scores[runner]:.4g}){L.pose_text(result, frame)}")
        if self._inspector_wanted(layer):
            self._request_inspection(frame)

    def _request_inspection(self, frame: int) -> None:
        """Align every prototype onto image ``frame`` in a worker thread (the GUI stays responsive);
        while one alignment runs, only the latest requested frame is kept for the next."""
        if self._inspecting is not None:
            self._pending_frame = frame
            return
        result, layer = self.result, self.viewer.layers[self.result_layer_name]
        item = self._item(layer, frame)
        index = frame if 0 <= frame < result.n else None   # an item of the fitted stack: replay the fit's own warps
        device = self.device.value

        def show(aligned_scores):
            shown_before = self._inspected is result
            exists = L.layer_names(layer.name)["inspector"] in self.viewer.layers
            if self.result is result and layer.name in self.viewer.layers and (exists or not shown_before):
                # the pictures come from align_one (for fitted items the fit's own warps); which cluster is
                # chosen, the runner-up and the scores come from the result
                aligned, _recomputed = aligned_scores
                chosen, runner, scores = self.verdict(frame)
                L.show_inspector(self.viewer, layer, aligned, scores, chosen, runner, frame)
                self._inspected = result
                if self._framed is not result:
                    self._frame(layer)
                else:
                    self._on_zoom()

        def next_one():
            self._inspecting = None
            pending, self._pending_frame = self._pending_frame, None
            if pending is not None and pending != frame and self.result is result:
                self._request_inspection(pending)

        self._inspecting = start_worker(lambda: api.align_one(result, item, device, index), returned=show,
                                        finished=next_one)

    def _on_points_selected(self, _=None) -> None:
        """Points picked in the landmark layer: highlight their shapes and say where they went."""
        layer = self.viewer.layers[self.result_layer_name] if self.result_layer_name in self.viewer.layers else None
        if self.result is None or not isinstance(layer, Points):
            return
        picked = sorted(layer.selected_data)
        shapes = sorted(set(L.shape_index_of_points(layer)[picked].tolist())) if picked else []
        L.highlight_shapes(self.viewer, layer, self.result, shapes)
        if shapes:
            s = shapes[0]
            chosen, runner, scores = self.verdict(s)
            self.status.value = (f"{self._item_name(s, 'shape')} → cluster {chosen} (score {scores[chosen]:.4g}); "
                                 f"runner-up {runner} ({scores[runner]:.4g})")

    def _item_name(self, item: int, kind: str = "item") -> str:
        table = self.objects[2] if self.objects is not None else None
        if table is None or len(table["label"]) != self.result.n:
            return f"{kind} {item}"
        return f"object {item} (label {int(table['label'][item])})"

    def _on_click(self, _viewer, event):
        """A click (not a drag) on the painted objects selects the object under it."""
        start = event.position
        if (yield from L.click_without_drag(event)):
            self.select_at(start)

    def select_at(self, position) -> int | None:
        """Select the object under a world position of the painted layer: it goes under the slider (or its
        contour is selected), so the status line and the inspector show it. Returns its index, or None."""
        if self.objects is None or self.objects[2] is None or self.result is None:
            return None
        name = L.layer_names(self.objects[0].name)["painted"]
        if name not in self.viewer.layers or not self.viewer.layers[name].visible:
            return None
        item = L.object_at(self.viewer.layers[name], position)
        layer = self.viewer.layers[self.result_layer_name] if self.result_layer_name in self.viewer.layers else None
        if item is None or layer is None or item >= self.result.n:
            return None
        self.viewer.layers[name].selected_label = item + 1     # the layer controls name the picked object
        self.show_item(item, layer)
        return item

    def show_item(self, item: int, layer) -> None:
        """Put fitted item ``item`` of ``layer`` under the slider (status line and inspector follow), or select its
        shape's points in a landmark layer."""
        if isinstance(layer, Points):
            layer.selected_data = set(np.flatnonzero(L.shape_index_of_points(layer) == item).tolist())
        else:
            step = list(self.viewer.dims.current_step)
            step[0] = item
            self.viewer.dims.current_step = tuple(step)

    def _jump_to_cluster(self, row: int, _column: int = 0) -> None:
        """Double-click a cluster row: show its closest member under the slider."""
        if self.result is None:
            return
        own = self.result.scores[np.arange(self.result.n), self.result.labels]
        members = np.flatnonzero(self.result.labels == row)
        if members.size:
            step = list(self.viewer.dims.current_step)
            step[0] = int(members[np.argmin(own[members])])
            self.viewer.dims.current_step = tuple(step)


def warm_up() -> None:
    """What a fresh process's first result would otherwise do on the GUI thread, done ahead in a worker: napari
    compiles its numba mapping of a Labels layer's colours for a value type (here the painted objects' int32,
    ``plate.view.object_values``) on first use, and the accuracy against true classes imports scikit-learn's
    metrics: about a second of CPU together, several seconds of a first Run on a loaded 2-core machine."""
    from napari.utils.colormaps import DirectLabelColormap

    from .. import metrics  # noqa: F401  (imported for its import's sake)

    colors = {None: np.zeros(4), 0: np.zeros(4), 1: np.ones(4)}
    DirectLabelColormap(color_dict=colors).map(np.zeros(2, np.int32))


def _item_count(layer) -> int:
    if isinstance(layer, Points):
        return len(set(np.asarray(layer.features["shape_id"]).tolist())) if "shape_id" in layer.features else 0
    return int(layer.data.shape[0])

