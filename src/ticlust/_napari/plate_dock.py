"""The plate dock's work sections: start from files (Extract), Fit on a sample, Predict every object, Curate the
result, Export it. Each is a tab of the plate panel (:class:`~ticlust._napari.store_panel.StorePanel`, its owner):
it reads its form, runs one call of the napari-free library in a worker (``plate.store.extract``,
``plate.run.fit_store`` / ``predict_store``, ``plate.curate``, ``plate.explore``) through
:meth:`~ticlust._napari.workers.RunButton.call` — progress with an ETA in the panel, Cancel on the button, which
stops the call at its next step through its own clean-up — and hands what came back to the panel, which draws it.
Nothing here cuts, fits or assigns an object itself.
"""
import time
from pathlib import Path

from magicgui.widgets import CheckBox, ComboBox, Container, Label, LineEdit, PushButton, SpinBox

from ..errors import InputError
from ..events import Progress, Snapshot
from . import layers as L
from .method_form import MethodForm, crop_options
from .workers import RunButton

#: The longest the live prototypes wait between two redraws while a fit runs (as the ticlust widget).
LIVE_UPDATE_S = 0.4


def store_beside(source) -> Path:
    """Where a plate's store goes by default: beside its input (``plate/`` → ``plate.zarr``, ``plate/plate.csv`` →
    ``plate/plate.zarr``, ``field.ome.zarr`` → ``field.objects.zarr``)."""
    path = Path(source)
    if path.suffix.lower() == ".zarr":
        return path.with_name(f"{path.name[:-len('.zarr')].removesuffix('.ome')}.objects.zarr")
    if path.is_dir() or not path.suffix:
        return path.with_name(f"{path.name}.zarr")
    return path.with_suffix(".zarr")


def _row(*widgets, labels: bool = False) -> Container:
    """Widgets side by side (with their labels: ``labels``), without the margins a nested container adds."""
    row = Container(widgets=list(widgets), layout="horizontal", labels=labels)
    row.native.layout().setContentsMargins(0, 0, 0, 0)
    return row


class Section(Container):
    """A tab of the plate panel: its ``owner`` the panel (viewer, store, results, progress and status line)."""

    def __init__(self, owner):
        super().__init__(labels=True)
        self.owner = owner
        self.runners: list[RunButton] = []

    def runner(self, button, start) -> RunButton:
        runner = RunButton(button, start, self.owner.say, alive=self.owner.alive)
        self.runners.append(runner)
        self.owner.runners.append(runner)
        return runner

    def needs_store(self) -> bool:
        """Whether a store is open and still there; else said in one sentence."""
        if self.owner.store is None:
            self.owner.say("Open a store (Open store…) or extract one from a plate's files (the Extract tab) first.")
            return False
        if self.owner.gone():
            self.owner.say(self.owner.gone())
            return False
        return True


class ExtractSection(Section):
    """A plate's fields (a folder with masks, a CSV manifest, an OME-Zarr image or plate) cut into an object store
    beside them: ``ticlust.extract`` with the objects route's crop options, resumable, failed fields listed."""

    def __init__(self, owner):
        super().__init__(owner)
        self.source = LineEdit(label="fields", tooltip="A folder of fields with masks (NAME.tif beside NAME_cp_masks.tif, "
                                                       "NAME_masks.tif or NAME.labels.tif), a CSV manifest (columns "
                                                       "image,labels, …) or an OME-Zarr image or HCS plate with labels")
        self.source.native.setPlaceholderText("a folder, plate.csv or an .ome.zarr")
        self.folder_button = PushButton(text="Folder / OME-Zarr…", tooltip="A folder of fields with masks, or an "
                                                                           "OME-Zarr image or HCS plate (a folder too)")
        self.file_button = PushButton(text="Manifest…", tooltip="A CSV manifest (columns image,labels, …)")
        self.target = LineEdit(label="store", tooltip="Where the object store is written: a new folder (an unfinished "
                                                      "store made with the same options is finished)")
        self.show_advanced = CheckBox(value=False, text="Advanced (crop options, channels, Z, workers)")
        self.crop = crop_options()
        self.channels = LineEdit(label="channels", tooltip="Keep these channels, by name or index, in this order (DNA,ER "
                                                           "or 0,2); blank: every channel")
        self.z = LineEdit(label="Z plane", tooltip="Fields with several Z planes: the plane to cut (from 0), or max for "
                                                   "their maximum projection; blank: such fields are refused")
        self.workers = SpinBox(label="workers", min=0, max=256, value=0,
                               tooltip="Cut the fields on a local dask cluster of this many processes (0: here)")
        self.advanced = Container(widgets=[self.crop, Container(widgets=[self.channels, self.z, self.workers])],
                                  labels=False, visible=False)
        self.extract_button = PushButton(text="Extract")
        self.failed = Label(label="left out", value="")
        self.failed.native.setWordWrap(True)
        self.extend([self.source, _row(self.folder_button, self.file_button), self.target, self.show_advanced,
                     self.advanced, self.extract_button, self.failed])
        self.show_advanced.changed.connect(lambda on: setattr(self.advanced, "visible", bool(on)))
        self.source.changed.connect(self._on_source)
        self.folder_button.changed.connect(self._ask_folder)
        self.file_button.changed.connect(self._ask_file)
        self.run = self.runner(self.extract_button, self.start)

    def offer(self, source) -> None:
        """Fill in a plate's fields and the store beside them (what File > Open of the fields does)."""
        self.source.value = str(source)
        self.owner.show_tab(self)
        self.owner.say(f"Extract cuts every object of {Path(source).name} into {Path(self.target.value).name}: check "
                       "the store's path (and the crop options under Advanced), then press Extract.")

    def _on_source(self, _=None) -> None:
        if self.source.value.strip():
            self.target.value = str(store_beside(self.source.value.strip()))

    def extract_options(self) -> dict:
        """The crop options as ``extract`` takes them (crop size 0: fit the objects; blank channels: all of them; blank
        Z: one plane only). A channel list that cannot be read raises InputError."""
        from ..plate.store import typed_channels

        o = {w.name: w.value for w in self.crop}
        return {"crop_size": o["size"] or None, "keep_border": o["keep_border"], "orient": o["orient"],
                "normalize": o["normalize"], "rescale": o["rescale"], "channel": typed_channels(self.channels.value),
                "z": self.z.value.strip() or None}

    def start(self):
        """Extract in a worker, progress and ETA in the panel, Cancel on the button; the store opens when done."""
        from ..plate.store import extract

        source, target = self.source.value.strip(), self.target.value.strip()
        if not source or not target:
            self.owner.say("Give the plate's fields (a folder with masks, a CSV manifest or an OME-Zarr) and the "
                           "store's path first.")
            return None
        try:
            options, workers = self.extract_options(), self.workers.value or None
        except InputError as exc:
            self.owner.say(str(exc))
            return None
        self.failed.value = ""
        self.owner.say(f"Extracting {Path(source).name} into {Path(target).name}…")
        self.owner.busy_bar()
        worker = self.run.call(lambda sink: extract(source, target, **options, workers=workers, progress=sink),
                               event=self.owner.show_progress, returned=self._done, failed=self.owner.failed,
                               finished=lambda cancelled: self._finished(cancelled, target))
        self.owner.controls()
        return worker

    def _done(self, store) -> None:
        failed = store.failed
        self.failed.value = "; ".join(f"{Path(str(r['image'])).name}: {r['error']}" for r in
                                      failed.to_dict("records")) or "none"
        left = f"; {len(failed)} field(s) left out (listed above)" if len(failed) else ""
        self.owner.open_store(store.path, then=f"Extracted {len(store)} objects of {len(store.fields)} fields into "
                                                f"{store.path.name}{left}.")

    def _finished(self, cancelled: bool, target: str) -> None:
        self.owner.controls()
        self.owner.idle_bar()
        if cancelled:
            done = len(list((Path(target) / "fields").glob("[0-9]*"))) if Path(target).is_dir() else 0
            self.owner.say(f"Cancelled: {done} field(s) are cut and kept; Extract again finishes the store (the same "
                           "store as an uninterrupted run).")

    def _ask_folder(self, _=None) -> None:
        from qtpy.QtWidgets import QFileDialog

        path = QFileDialog.getExistingDirectory(self.native, "The plate's fields: a folder of images with masks, or an "
                                                             "OME-Zarr")
        if path:
            self.offer(path)

    def _ask_file(self, _=None) -> None:
        from qtpy.QtWidgets import QFileDialog

        path, _ = QFileDialog.getOpenFileName(self.native, "The plate's manifest (image,labels,…)", "",
                                              "CSV manifest (*.csv)")
        if path:
            self.offer(path)


class FitSection(Section):
    """Fit a method on a seeded sample of the store's objects (``plate.run.fit_store``), from the ticlust widget's
    method form; the prototypes update live. The form is built once the method registry is imported, in a worker
    when the dock opens (torch takes seconds to import: the dock stays responsive meanwhile)."""

    def __init__(self, owner):
        super().__init__(owner)
        self.form = self.sample = self.seed = self.device = None
        self.fit_button = PushButton(text="Fit", enabled=False)
        self.save_button = PushButton(text="Save result…", enabled=False)
        self.waiting = Label(value="Loading the methods…")
        self.extend([self.waiting, _row(self.fit_button, self.save_button)])
        self.save_button.changed.connect(self._ask_save)
        self.run = self.runner(self.fit_button, self.start)
        self._last_live = 0.0

    def build(self) -> None:
        """The method form, sample, seed and device (the registry is imported by now)."""
        from ..cli.fit import STORE_FIT_ALL
        from ..core.device import DEVICE_CHOICES

        if self.form is not None:
            return
        self.limit = STORE_FIT_ALL
        self.form = MethodForm(default="cell-kmeans")   # a store holds cells: the method that wins on real cells
        self.sample = SpinBox(label="sample", min=0, max=2**31 - 1, value=0,
                              tooltip=f"Objects the fit sees, drawn (seeded) across the fields; 0: every object, up to "
                                      f"{STORE_FIT_ALL:,} (as ticlust fit STORE without --fit-sample)")
        self.seed = SpinBox(label="seed", min=0, max=2**31 - 1, value=0, tooltip="The same seed, the same sample and fit")
        self.device = ComboBox(label="device", choices=list(DEVICE_CHOICES), value="auto",
                               tooltip="auto uses a CUDA GPU when there is one, else the CPU")
        self.remove(self.waiting)
        for i, widget in enumerate([self.form.method, self.form.k, self.form.params, self.form.show_advanced,
                                    self.sample, self.seed, self.device]):
            self.insert(i, widget)
        self.native.layout().insertWidget(self.index(self.form.show_advanced) + 1, self.form.area)
        self.owner.controls()

    def start(self):
        """Fit in a worker (the sample read from the store there); live prototypes; Cancel changes nothing."""
        from ..plate.run import fit_store

        if self.form is None or not self.needs_store():
            return None
        store, n = self.owner.store, self.sample.value or None
        if n is None and len(store) > self.limit:
            self.owner.say(f"{store.path.name} holds {len(store):,} objects: give a sample (e.g. 20,000) to fit on; "
                           "Predict then assigns them all.")
            return None
        method, k, seed, device = self.form.method.value, self.form.k.value, self.seed.value, self.device.value
        params = self.form.values()
        self.owner.remember_layers()
        self.owner.say(f"Fitting {method} (K = {k}) on {min(n or len(store), len(store))} of {len(store)} objects…")
        worker = self.run.call(lambda sink: fit_store(store, method, k, sample=n, seed=seed, device=device,
                                                      progress=sink, **params)[0],
                               event=self.event, returned=self._done, failed=self.owner.failed,
                               finished=self._finished)
        self.owner.controls()
        return worker

    def event(self, event) -> None:
        """A fit's (or a refine's) event: Progress in the panel, Snapshots as the live prototypes."""
        if isinstance(event, Progress):
            self.owner.show_progress(event)
        elif isinstance(event, Snapshot) and event.prototypes.ndim >= 3:
            now = time.perf_counter()
            if now - self._last_live >= LIVE_UPDATE_S:
                self._last_live = now
                self.owner.inspector.show_prototypes(event.prototypes)

    def _done(self, result) -> None:
        self.owner.take_result(result, fitted=True)
        self.save_button.enabled = True
        self.owner.say(f"Fitted {result.method} (K = {result.k}) on {result.n} objects in "
                       f"{result.timing.get('total_s', 0):.1f} s, final loss {result.final_loss:.4g}: Predict assigns "
                       f"all {len(self.owner.store)} objects.")

    def _finished(self, cancelled: bool) -> None:
        self.owner.job_finished(cancelled, "the store and the layers are as they were")

    def _ask_save(self, _=None) -> None:
        from qtpy.QtWidgets import QFileDialog

        path, _ = QFileDialog.getSaveFileName(self.native, "Save the plate's result", "plate_result.npz",
                                              "ticlust result (*.npz)")
        if path:
            try:
                self.owner.save_result(path)
            except InputError as exc:            # the output guard's sentence, nothing written
                self.owner.failed(exc)


class PredictSection(Section):
    """Assign every object of the store with the dock's result (``plate.run.predict_store``: part by part,
    resumable), then repaint the field, the gallery and the shares."""

    def __init__(self, owner):
        super().__init__(owner)
        self.predict_button = PushButton(text="Predict every object")
        self.show_advanced = CheckBox(value=False, text="Advanced")
        self.workers = SpinBox(label="workers", min=0, max=256, value=0, visible=False,
                               tooltip="Predict the parts on a local dask cluster of this many processes started for "
                                       "the run (0: in this process, the fastest on a small plate)")
        self.extend([self.predict_button, self.show_advanced, self.workers])
        self.show_advanced.changed.connect(lambda on: setattr(self.workers, "visible", bool(on)))
        self.run = self.runner(self.predict_button, self.start)

    def start(self):
        from ..plate.run import predict_store

        if not self.needs_store():
            return None
        result = self.owner.result
        if result is None:
            self.owner.say("Fit a result (the Fit tab) or load one (Load result…) first.")
            return None
        if result.state is None:
            self.owner.say("The result was edited by hand: Refine it (the Curate tab), or Re-predict, which renumbers "
                           "the store's predictions after a merge, a move or an outlier mark.")
            return None
        store, device, workers = self.owner.store, self.owner.device(), self.workers.value or None
        self.owner.say(f"Predicting the {len(store)} objects of {store.path.name}…")
        worker = self.run.call(lambda sink: predict_store(result, store, device=device, progress=sink, workers=workers),
                               event=self.owner.show_progress, returned=lambda done: self._done(result, done),
                               failed=self.owner.failed, finished=self._finished)
        self.owner.controls()
        return worker

    def _done(self, result, done) -> None:
        from ..plate.run import sample_agreement

        kept = f" ({done.skipped} of {done.parts} fields were predicted by this result already)" if done.skipped else ""
        sample = "" if (agreement := sample_agreement(done)) is None else f"; {agreement}"
        self.owner.predicted_with(result, f"Assigned {done.objects} objects of {done.parts} fields in "
                                          f"{done.seconds:.1f} s{kept}{sample}.")

    def _finished(self, cancelled: bool) -> None:
        self.owner.job_finished(cancelled, "the store's predictions are as they were; Predict again resumes (the "
                                           "fields done are kept)")


class CurateSection(Section):
    """Hand edits of the plate's result (``plate.curate``): move the picked objects, mark outliers, merge, split,
    Undo, Refine on the fit sample, Re-predict the store."""

    def __init__(self, owner):
        super().__init__(owner)
        self.objects = LineEdit(label="objects", tooltip="Store object numbers, e.g. 3, 8-12; empty: the objects picked "
                                                         "on the field or in the gallery (shift-click adds)")
        self.objects.native.setPlaceholderText("empty: the picked objects")
        self.to = SpinBox(label="to cluster", min=0, max=0, tooltip="The cluster Move puts the objects in")
        self.move_button = PushButton(text="Move", tooltip="Put the objects in the cluster and pin them there")
        self.outlier_button = PushButton(text="Mark outlier", tooltip="Flag the objects as outliers (grey, outlier "
                                                                      "in the table; Refine fits without them)")
        self.a = SpinBox(label="cluster A", min=0, max=0, tooltip="Merge: the cluster that stays; Split: the one split")
        self.b = SpinBox(label="cluster B", min=0, max=0, tooltip="Merge: the cluster that joins A")
        self.merge_button = PushButton(text="Merge B into A")
        self.split_button = PushButton(text="Split A", tooltip="Re-cluster the fit sample's members of A in two")
        self.undo_button = PushButton(text="Undo", enabled=False, tooltip="Go back one edit (Refine included)")
        self.keep_moved = CheckBox(text="keep moved objects", value=True,
                                   tooltip="Refine keeps the objects you moved where you put them")
        self.refine_button = PushButton(text="Refine", tooltip="Re-fit the prototypes on the fit sample from the "
                                                               "edits, warm started")
        self.repredict_button = PushButton(text="Re-predict", tooltip="Bring the store's predictions to the edited "
                                                                      "result: renumbered after merges, moves and "
                                                                      "outlier marks; predicted anew after a Refine")
        self.extend([self.objects, _row(self.to, self.move_button, labels=True), self.outlier_button,
                     _row(self.a, self.b, labels=True),
                     _row(self.merge_button, self.split_button, self.undo_button),
                     _row(self.keep_moved, self.refine_button), self.repredict_button])
        self.move_button.changed.connect(self.move)
        self.outlier_button.changed.connect(self.mark_outliers)
        self.merge_button.changed.connect(self.merge)
        self.undo_button.changed.connect(self.owner.undo)
        self.split = self.runner(self.split_button, self.start_split)
        self.refine = self.runner(self.refine_button, self.start_refine)
        self.repredict = self.runner(self.repredict_button, self.start_repredict)

    def show_for(self, result) -> None:
        """The cluster boxes span the result's K."""
        for box in (self.to, self.a, self.b):
            box.max = max(result.k - 1, 0)

    def picked(self, what: str):
        """The objects typed, else those picked on the field or in the gallery."""
        from ..plate.curate import objects_of

        if self.objects.value.strip():
            return objects_of(self.objects.value, len(self.owner.store), what).tolist()
        if not self.owner.picked:
            raise InputError(f"No object is picked to {what}: click one on the field or in the gallery, or type their "
                             "numbers.")
        return list(self.owner.picked)

    def _edit(self, make, message) -> None:
        try:
            if not self.needs_store() or not self.owner.curatable():
                return None
            edited = make()
        except InputError as exc:
            self.owner.say(f"Not done: {exc}")
            return None
        return self.owner.apply_edit(edited, message(edited))

    def move(self, _=None):
        from ..plate import curate

        to = int(self.to.value)
        return self._edit(lambda: curate.move(self.owner.result, self.picked("move"), to, len(self.owner.store)),
                          lambda _r: f"Moved {_count(self.picked('move'))} to cluster {to} (pinned there)")

    def mark_outliers(self, _=None):
        from ..plate import curate

        return self._edit(lambda: curate.mark_outliers(self.owner.result, self.picked("mark as outliers"),
                                                       len(self.owner.store)),
                          lambda _r: f"Marked {_count(self.picked('mark as outliers'))} as outlier")

    def merge(self, _=None):
        from ..plate import curate

        a, b = int(self.a.value), int(self.b.value)
        return self._edit(lambda: curate.merge(self.owner.result, a, b), lambda _r: f"Merged cluster {b} into {a}")

    def start_split(self):
        from ..plate import curate

        if not self.needs_store() or not self.owner.curatable():
            return None
        store, result, a, device = self.owner.store, self.owner.result, int(self.a.value), self.owner.device()
        seed = int(result.config.get("seed", 0))
        self.owner.busy_bar()
        self.owner.say(f"Splitting cluster {a} of the fit sample…")
        worker = self.split.call(lambda _sink: curate.split(store, result, a, seed=seed, device=device),
                                 returned=lambda r: self.owner.apply_edit(r, f"Split cluster {a} in two (the new half "
                                                                             f"is cluster {result.k}); Refine, then "
                                                                             "Re-predict"),
                                 failed=self.owner.failed, finished=self._finished)
        self.owner.controls()
        return worker

    def start_refine(self):
        from ..plate import curate

        if not self.needs_store() or not self.owner.curatable():
            return None
        store, result, device, keep = self.owner.store, self.owner.result, self.owner.device(), self.keep_moved.value
        self.owner.remember_layers()
        self.owner.say("Refining on the fit sample…")
        worker = self.refine.call(lambda sink: curate.refine(store, result, device, bool(keep), progress=sink),
                                  event=self.owner.fit.event, returned=self._refined, failed=self.owner.failed,
                                  finished=self._finished)
        self.owner.controls()
        return worker

    def _refined(self, refined) -> None:
        self.owner.apply_edit(refined, f"Refined on the fit sample (final loss {refined.final_loss:.4g})",
                              fitted=True)

    def start_repredict(self):
        from ..plate import curate

        if not self.needs_store() or not self.owner.curatable():
            return None
        store, result, previous = self.owner.store, self.owner.result, self.owner.predicted
        device, workers = self.owner.device(), self.owner.predict.workers.value or None
        self.owner.say(f"Bringing the predictions of {store.path.name} to the edited result…")
        worker = self.repredict.call(lambda sink: curate.repredict(result, store, previous, device=device,
                                                                   progress=sink, workers=workers),
                                     event=self.owner.show_progress,
                                     returned=lambda done: self._repredicted(result, done),
                                     failed=self.owner.failed, finished=self._finished)
        self.owner.controls()
        return worker

    def _repredicted(self, result, done) -> None:
        from ..plate.run import sample_agreement

        how = "renumbered (nothing aligned)" if done.relabelled else "predicted anew"
        sample = "" if (agreement := sample_agreement(done)) is None else f"; {agreement}"
        self.owner.predicted_with(result, f"Re-predicted: {done.objects} objects {how} in {done.seconds:.1f} s, "
                                          f"{done.by_hand} set by hand, {done.outliers} outliers{sample}.")

    def _finished(self, cancelled: bool) -> None:
        self.owner.job_finished(cancelled, "the result, the store and the layers are as they were")


class ExportSection(Section):
    """The plate's clustering taken out (``plate.explore``): the per-object table as ``ticlust predict`` writes it
    (CSV or Parquet) and a gallery folder with one picture per cluster; the shares are exported from the Shares
    tab."""

    def __init__(self, owner):
        super().__init__(owner)
        self.table_button = PushButton(text="Export objects…", tooltip="Every object's row with its cluster, score "
                                                                       "and runner-up (CSV or Parquet), as ticlust "
                                                                       "predict --csv / --parquet writes it")
        self.gallery_button = PushButton(text="Export gallery…", tooltip="prototypes.png and one cluster_NN.png per "
                                                                         "cluster: its closest objects on the plate")
        self.labels_button = PushButton(text="Write labels to OME-Zarr", tooltip="Every field of the OME-Zarr input "
                                        "gets a label image 'clusters' (cluster + 1 per object) in its labels group, "
                                        "for napari-ome-zarr and other NGFF viewers (as ticlust predict --write-labels)")
        self.replace_labels = CheckBox(value=False, text="replace another result's labels")
        self.extend([self.table_button, self.gallery_button, _row(self.labels_button, self.replace_labels)])
        self.table = self.runner(self.table_button, self._ask_table)
        self.gallery = self.runner(self.gallery_button, self._ask_gallery)
        self.labels = self.runner(self.labels_button, self.write_labels)

    def export_objects(self, path):
        """Write the store's predictions to ``path`` in a worker (.parquet: Parquet, else CSV). Returns the worker."""
        from ..plate.explore import export_objects

        if not self.needs_store():
            return None
        store = self.owner.store
        return self._run(self.table, lambda _sink: export_objects(store, path),
                         lambda out: f"Wrote the {len(store)} objects' table to {out.name}{self.owner.pending()}.")

    def export_gallery(self, folder):
        """Write the gallery folder in a worker. Returns the worker."""
        from ..plate.explore import export_plate_gallery

        if not self.needs_store():
            return None
        store, made = self.owner.store, self.owner.predicted or self.owner.model   # the predictions' numbering
        return self._run(self.gallery, lambda _sink: export_plate_gallery(store, folder, made),
                         lambda paths: f"Wrote {len(paths)} pictures to {Path(folder).name}{self.owner.pending()}.")

    def write_labels(self):
        """Write the predictions as a label image into every field of the store's OME-Zarr input, in a worker
        (``plate.labels.write_cluster_labels``: resumable, another result's labels replaced only when the box is
        ticked). Returns the worker."""
        from ..plate.labels import write_cluster_labels

        if not self.needs_store():
            return None
        store, made, overwrite = self.owner.store, self.owner.predicted, bool(self.replace_labels.value)
        if made is None:
            self.owner.say("Predict every object (the Predict tab), or load the result the store's predictions were "
                           "made with (Load result…), first.")
            return None
        return self._run(self.labels, lambda sink: write_cluster_labels(store, made, overwrite=overwrite, progress=sink),
                         lambda done: f"Wrote the cluster labels {done.name!r} into {done.written + done.kept} fields "
                                      f"of {Path(store.attributes['input']['path']).name} ({done.kept} held them "
                                      f"already){self.owner.pending()}.",
                         "the fields written are whole and kept; press again to finish the rest")

    def _run(self, runner, call, said, kept: str = "nothing was written"):
        self.owner.busy_bar()
        worker = runner.call(call, returned=lambda out: self.owner.say(said(out)), failed=self.owner.failed,
                             finished=lambda cancelled: self.owner.job_finished(cancelled, kept))
        self.owner.controls()
        return worker

    def _ask_table(self):
        from qtpy.QtWidgets import QFileDialog

        path, _ = QFileDialog.getSaveFileName(self.native, "Export every object's cluster", "plate_clusters.csv",
                                              "CSV (*.csv);;Parquet (*.parquet)")
        return self.export_objects(path) if path else None

    def _ask_gallery(self):
        from qtpy.QtWidgets import QFileDialog

        folder = QFileDialog.getExistingDirectory(self.native, "Export the gallery into a folder")
        return self.export_gallery(folder) if folder else None


def _count(objects) -> str:
    return f"object {objects[0]}" if len(objects) == 1 else f"{len(objects)} objects"


def tile_at(gallery_layer, position, size: int) -> tuple[int, int] | None:
    """(row, column) of the gallery tile under a world position (None: between tiles or outside)."""
    import numpy as np

    columns = int(gallery_layer.metadata.get("columns", 0))
    rows = max(gallery_layer.metadata.get("ticlust_gallery", {}) or [-1]) + 1
    if not columns or not rows:
        return None
    scene = L.Scene(size, size, rows * columns)
    y, x = np.asarray(gallery_layer.world_to_data(np.asarray(position)[-gallery_layer.ndim:]))[-2:] + 0.5
    for i, (top, left) in enumerate(scene.tile_origins(columns)):
        if top <= y < top + size and left <= x < left + size:
            return divmod(i, columns)
    return None
