"""The plate source: a plate's object store (``ticlust extract``), read the way a screen is read.

Pick a well and a field: its image, with its objects painted by cluster once the store has predictions (before that,
by object); under it a gallery of each cluster sampled across the plate. The plate's extras live here: Extract a
plate's files into a store, Fit on a seeded sample, Predict every object, Apply a result to the field shown,
Re-predict after edits, each cluster's share per well, the objects' table, the gallery folder and cluster labels
written into an OME-Zarr (:mod:`.plate_parts`). Every read of the store (opening it, a field, the shares, a result,
an object inspected) runs in a worker, the latest request winning (``parts.Latest``); what they read comes from
:mod:`ticlust.plate.view` and ``plate.explore``, and this module draws it. The layers a store needs are made, hidden,
one per turn of the event loop when it opens, so that every later step only draws into them.
"""
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from magicgui.widgets import ComboBox, Label, PushButton, SpinBox

from ..errors import InputError
from ..plate import STORE_FIT_ALL
from ..plate.store import ObjectStore
from ..plate.view import (GALLERY_PER_CLUSTER, assign_field, cluster_shares, condition_columns, field_picture,
                          field_starts, field_title, gallery_sample, load_store_result, read_predictions)
from . import layers as L
from .parts import ask_path, drain, said
from .plate_field import PlateField
from .plate_parts import Extract, PlateExport, PlateMap, PlateObjects, Shares
from .sources import Source

NO_STORE = "No store open: press Open store… or drag a STORE.zarr folder onto napari, or extract one below."
TRANSPARENT = np.zeros(4)


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
    number and size above its first crops (None before any prediction). Only the sampled crops are read."""
    if predictions is None:
        return None
    picked = gallery_sample(predictions)
    k = max(picked) + 1 if picked else 0
    columns = max(2, min(GALLERY_PER_CLUSTER, max((len(v) for v in picked.values()), default=0)))
    wanted = np.unique(np.concatenate(list(picked.values()))) if picked else np.zeros(0, int)
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
    """What the dock shows of a store when it opens, read off the GUI thread: the store, its predictions' few columns,
    the gallery, the shares per ``by``, the first field (its picture, or why it cannot be read), the fields' starts."""

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
    """Open the store at ``path`` and read what the dock shows first; an InputError when it is no (finished) store or
    its predictions do not match it."""
    store = ObjectStore(path)
    choices = condition_columns(store) + ["image"]
    predictions = read_predictions(store, ["field_index", "cluster", *choices])
    if predictions is not None:       # what shares are counted per, as categories: each count then reads codes
        for column in choices:
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


class PlateSource(PlateField, PlateObjects, Source):
    """A plate's object store and the plate's extras; the field shown (with its objects by cluster and the gallery) as
    :class:`~.plate_field.PlateField` draws it, its objects picked and inspected as
    :class:`~.plate_parts.PlateObjects` does."""

    title = "plate (object store)"
    pages = ("Fit", "Predict", "Curate", "Export", "Shares")
    word = "object"
    method = "cell-kmeans"                  # a store holds cells: the method that wins on real cells

    def __init__(self, dock):
        super().__init__(dock)
        self.store: ObjectStore | None = None
        self.predictions = None          # the store's predictions (the columns shares and gallery need), or None
        self.predicted = None            # the result whose predictions the store holds, when the dock knows it
        self.result_path: Path | None = None
        self.applied: tuple | None = None   # (field index, assignment columns, result file name) of the last Apply
        self.picture = None              # the field shown (plate.view.FieldPicture), or None
        self.starts = None               # where each field's objects start in the store's table
        self.picked_objects: list[int] = []
        self.has_wells, self.filling, self._renumbered, self._first = False, False, None, False
        self.opening, self.reading, self.loading = dock.latest(), dock.latest(), dock.latest()
        self.open_button = PushButton(text="Open store…")
        self.summary = Label(label="store", value=NO_STORE)
        self.summary.native.setWordWrap(True)
        # choices are functions of the source's state: napari resets a docked widget's choices when layers change
        self.well = ComboBox(label="well", choices=self._well_choices, tooltip="The wells of the plate")
        self.field = ComboBox(label="field", choices=self._field_choices, tooltip="The fields of view (of the well)")
        self.extract = Extract(self)
        self.widgets = [self.open_button, self.summary, self.well, self.field, self.extract]
        self.sample = SpinBox(label="sample", min=0, max=2**31 - 1, value=0,
                              tooltip="Objects the fit sees, drawn (seeded) across the fields; 0: every object, up to "
                                      f"{STORE_FIT_ALL:,} (as ticlust fit STORE without --fit-sample)")
        self.fit_widgets = [self.sample]
        self.predict_run = dock.button("Predict every object", self.predict)
        self.workers = SpinBox(label="workers", min=0, max=256, value=0,
                               tooltip="Predict on a local dask cluster of this many processes (0: in this process)")
        self.apply_run = dock.button("Apply result", self.apply,
                                     tooltip="Assign the objects of the field shown with the dock's (or a loaded) result")
        self.predict_widgets = [self.predict_run.button, self.workers, self.apply_run.button]
        self.repredict_run = dock.button("Re-predict", self.repredict,
                                         tooltip="Bring the store's predictions to the edited result: renumbered "
                                                 "after merges, moves and outlier marks; predicted anew after a Refine")
        self.curate_widgets = [self.repredict_run.button]
        self.export = PlateExport(self)
        self.export_widgets = self.export.widgets
        self.shares = Shares(self)
        self.extra_pages = [("Shares", self.shares)]
        self.map = PlateMap(self)
        self.open_button.changed.connect(self._ask_open)
        self.well.changed.connect(self._on_well)
        self.field.changed.connect(lambda _=None: self.filling or self.store is None or self._show_current())

    # ---- what it is ----
    def offered(self) -> bool:
        return self.store is not None

    def hint(self) -> str:
        return NO_STORE if self.store is None else self.summary.value

    @property
    def busy(self) -> bool:
        return self.opening.busy or self.reading.busy or self.loading.busy or self.shares.counting.busy

    def enable(self, on: bool) -> None:
        for widget in (self.open_button, self.well, self.field, self.workers, self.sample):
            widget.enabled = on and not self.opening.busy
        self.shares.enable(on)

    def can(self, runner) -> bool:
        if runner is self.apply_run:
            return self.store is not None and self.dock.model is not None
        return not self.opening.busy

    def gone(self) -> str | None:
        if self.store is None or (self.store.path / "zarr.json").is_file():
            return None
        return (f"The store {self.store.path.name} is gone (deleted or moved while it was open): open it again, or "
                "extract the plate again.")

    def needs_store(self) -> bool:
        """Whether a store is open and still there; else said in one sentence."""
        problem = "Open a store (Open store…) or extract one from a plate's files first." if self.store is None \
            else self.gone()
        if problem:
            self.dock.say(problem)
        return problem is None

    def close(self) -> None:
        for latest in (self.opening, self.reading, self.loading, self.shares.counting):
            latest.drop()

    def names(self) -> dict[str, str]:
        """The layers drawn for the open store (reused by name)."""
        stem = self.store.path.stem if self.store is not None else "store"
        return {key: f"{stem} {key}" for key in ("field", "objects", "gallery", "gallery labels", "object")}

    # ---- opening ----
    def open_store(self, path, then: str | None = None, field_index: int | None = None):
        """Open a store in a worker (its listing, predictions, gallery crops, shares and first field read there) and
        show it: the pickers, its first field (or ``field_index``), the gallery, the shares; ``then`` said once shown.
        A folder that is no (finished) store is one sentence and changes nothing. Returns the worker."""
        path = Path(path)
        self.dock.use(self)
        self.dock.say(f"Opening {path.name}…")
        worker = self.opening.ask(("open", str(path), field_index), lambda: said(opened_store, path, field_index,
                                                                                  what=f"Opening {path.name}"),
                                  lambda done: self._opened(*done, then))
        self.dock.controls()
        return worker

    def _opened(self, opened: OpenedStore | None, problem: str | None, then) -> None:
        self.dock.controls()
        if problem is not None:
            self.dock.say(problem)
            return
        before = self.names().values()
        if self.store is None or self.store.path.resolve() != opened.store.path.resolve():
            self.dock.forget_results()      # another store: the dock's results were of the one before
            self.predicted = self.result_path = self._renumbered = None
            self.picked_objects = []
        self.store, self.predictions, self.applied, self.picture = opened.store, opened.predictions, None, None
        self.starts, listing = opened.starts, opened.store.fields
        self.has_wells = "well" in listing.columns
        for name in set(before) - set(self.names().values()):      # another store's layers go
            if name in self.viewer.layers:
                self.viewer.layers.remove(name)
        self.well.visible = self.has_wells
        self.filling = True
        try:
            for combo in (self.well, self.field):
                combo.reset_choices()
            self.shares.opened(opened)
        finally:
            self.filling = False
        wells = f" in {listing['well'].nunique()} wells" if self.has_wells else ""
        self.summary.value = (f"{opened.store.path.name}: {len(opened.store)} objects, {len(listing)} fields{wells}"
                              f"{'; no predictions yet' if opened.predictions is None else '; predicted'}")
        self._set_pickers(opened.field_index)

        def draw():      # once every layer is there: the field, then the gallery, each in a turn of its own
            self._draw_field(opened.field_index, opened.picture, opened.problem)
            self.later(lambda: self._draw_gallery(opened.gallery))
            if then is not None and opened.problem is None:
                self.later(lambda: self.dock.say(then))
        self.later(lambda: self._make_layers(opened, draw))
        self.map.opened(opened)

    def later(self, draw) -> None:
        """``draw()`` in the event loop's next turn, if the store shown is still the one it was for."""
        store = self.store
        self.dock.later(lambda: store is self.store and draw())

    # ---- fit, predict, apply ----
    def fit(self, args: dict):
        from ..plate.run import fit_store

        if not self.needs_store():
            raise InputError(self.dock.status.value)
        store, n = self.store, self.sample.value or None
        if n is None and len(store) > STORE_FIT_ALL:
            raise InputError(f"{store.path.name} holds {len(store):,} objects: give a sample (e.g. 20,000) to fit on; "
                             "Predict then assigns them all.")
        params = args["params"]
        return lambda sink: fit_store(store, args["method"], args["k"], sample=n, seed=args["seed"],
                                      device=args["device"], progress=sink, **params)[0]

    def job_layers(self) -> list[str]:
        names = L.layer_names(self.names()["object"])
        return [self.names()["object"]] + [names[k] for k in ("prototypes", "prototype_labels", "inspector", "scores",
                                                               "frames", "grid")]

    def done_text(self, result) -> str:
        return (f"Fitted {result.method} (K = {result.k}) on {result.n} objects in {result.timing.get('total_s', 0):.1f}"
                f" s, final loss {result.final_loss:.4g}: Predict assigns all {len(self.store)} objects.")

    def live(self, prototypes) -> None:
        self.show_prototypes(prototypes)

    def show(self, result, fresh: bool) -> None:
        """The field repainted with the dock's result and its prototypes (each a redraw of its own turn)."""
        if self.picture is not None:
            self.paint(self.picture)
        if self.store is not None and np.ndim(result.prototypes) >= 3:
            self.later(lambda: result is self.dock.result and self.show_prototypes(result.prototypes,
                                                                                   result.cluster_sizes()))

    def predict(self):
        """Assign every object of the store with the dock's result (``plate.run.predict_store``: part by part,
        resumable), then the field, the gallery and the shares read again."""
        from ..plate.run import predict_store, sample_agreement

        result = self.dock.result
        if not self.needs_store():
            return None
        if result is None or result.state is None:
            self.dock.say("Fit a result (the Fit tab) or load one first." if result is None else
                          "The result was edited by hand: Refine it (the Curate tab), or Re-predict, which renumbers "
                          "the store's predictions after a merge, a move or an outlier mark.")
            return None
        store, device, workers = self.store, self.dock.device_value(), self.workers.value or None

        def done(out) -> None:
            kept = f" ({out.skipped} of {out.parts} fields were predicted by this result already)" if out.skipped else ""
            sample = "" if (agreement := sample_agreement(out)) is None else f"; {agreement}"
            self.predicted_with(result, f"Assigned {out.objects} objects of {out.parts} fields in {out.seconds:.1f} s"
                                        f"{kept}{sample}.")
        self.dock.say(f"Predicting the {len(store)} objects of {store.path.name}…")
        return self.dock.run_job(self.predict_run, lambda sink: predict_store(result, store, device=device,
                                                                              progress=sink, workers=workers),
                                 done=done, kept="the store's predictions are as they were; Predict again resumes "
                                                 "(the fields done are kept)")

    def repredict(self):
        """The store's predictions brought to the edited result (renumbered, or predicted anew after a Refine)."""
        from ..plate import curate
        from ..plate.run import sample_agreement

        result = self.dock.curate.ready()
        if result is None or not self.needs_store():
            return None
        store, previous = self.store, self.predicted
        device, workers = self.dock.device_value(), self.workers.value or None

        def done(out) -> None:
            how = "renumbered (nothing aligned)" if out.relabelled else "predicted anew"
            sample = "" if (agreement := sample_agreement(out)) is None else f"; {agreement}"
            self.predicted_with(result, f"Re-predicted: {out.objects} objects {how} in {out.seconds:.1f} s, "
                                        f"{out.by_hand} set by hand, {out.outliers} outliers{sample}.")
        self.dock.say(f"Bringing the predictions of {store.path.name} to the edited result…")
        return self.dock.run_job(self.repredict_run, lambda sink: curate.repredict(
            result, store, previous, device=device, progress=sink, workers=workers), done=done,
            kept="the result, the store and the layers are as they were")

    def predicted_with(self, result, message: str) -> None:
        """The store's predictions are now ``result``'s: read again (field, gallery, shares), ``message`` said."""
        self.predicted = result
        if result.state is not None:
            self.dock.model = result
        self.open_store(self.store.path, then=message, field_index=self.reading.shown[1] if self.reading.shown else
                        None)

    def apply(self):
        """Assign the field shown with the dock's result in a worker; repainted when done, nothing changed on
        Cancel."""
        result, name = self.dock.model, self.result_path.name if self.result_path else "the dock's result"
        if not self.needs_store() or result is None or self.field.value is None:
            return None
        field_index, store, device = int(self.field.value), self.store, self.dock.device_value()

        def done(columns) -> None:
            self.applied = (field_index, columns, name)
            if self.picture is not None and self.picture.field_index == field_index:
                self.paint(self.picture)
        self.dock.say(f"Assigning the objects of {field_title(store.fields.iloc[field_index])}…")
        return self.dock.run_job(self.apply_run, lambda sink: drain(assign_field(result, store, field_index, device),
                                                                    sink), done=done, kept="nothing was changed")

    # ---- a result loaded ----
    def load(self, path: Path, layer=None):
        """Load a result in a worker (a session's first imports torch); one sentence when it cannot assign the open
        store's objects. When the store's predictions were made with it, the dock knows them for its own."""
        from ..plate.run import PREDICTIONS, part_digest, result_digest

        store = self.store

        def job():
            result = load_store_result(path, store)
            return result, store is not None and part_digest(store.path / PREDICTIONS) == result_digest(path)

        def loaded(done) -> None:
            got, problem = done
            if problem is not None:
                self.dock.refuse(problem)
                return
            result, ours = got
            self.dock.take_result(result, fitted=result.state is not None)
            self.result_path = path
            if ours:
                self.predicted = result
            made = " (the store's predictions were made with it)" if ours else ""
            self.dock.say(f"Loaded {path.name} ({result.method}, K = {result.k}){made}: Apply result assigns the field "
                          "shown; Predict every object of the store.")
        self.dock.say(f"Loading {path.name}…")
        return self.loading.ask(("load", str(path)), lambda: said(job, what=f"Loading {path.name}"), loaded)

    def save(self, result, path) -> Path:
        out = result.save(path)
        self.result_path = out
        return out

    def gallery(self, folder):
        from ..plate.explore import export_plate_gallery

        if not self.needs_store():
            raise InputError(self.dock.status.value)
        store, made = self.store, self.predicted or self.dock.model      # the predictions' numbering
        return lambda _sink: export_plate_gallery(store, folder, made), self.export.pending()

    # ---- curate ----
    def check(self, result) -> None:
        from ..plate.curate import check_plate_result

        if not self.needs_store():
            raise InputError(self.dock.status.value)
        check_plate_result(result, self.store)

    def typed(self, text: str, what: str) -> list[int]:
        from ..plate.curate import objects_of

        return objects_of(text, len(self.store), what).tolist()

    def picked(self, what: str) -> list[int]:
        if not self.picked_objects:
            raise InputError(f"No object is picked to {what}: click one on the field or in the gallery, or type their "
                             "numbers.")
        return list(self.picked_objects)

    def edit(self, op: str, result, *args):
        from ..plate import curate

        if op == "merge":
            return curate.merge(result, *args)
        if op == "move":
            return curate.move(result, args[0], args[1], len(self.store))
        return getattr(curate, op)(result, args[0], len(self.store))

    def split(self, result, cluster: int, seed: int, device: str):
        from ..plate import curate

        store = self.store
        return lambda _sink: curate.split(store, result, cluster, seed=seed, device=device)

    def refine(self, result, device: str, keep: bool):
        from ..plate import curate

        store = self.store
        return lambda sink: curate.refine(store, result, device, keep, progress=sink)

    def note(self, result) -> str:
        return f" {self.pending()}" if self.pending() else ""

    def _ask_open(self, _=None) -> None:
        ask_path(self.dock.native, "folder", "Open an object store (ticlust extract)", self.open_store)

