"""The plate's extras in the dock, each a part the plate source owns: Extract (a plate's files into a store, in the
Data tab), the Shares page (each cluster's share per well or other manifest column), the plate's exports (the
objects' table, the gallery folder, cluster labels written into its OME-Zarr) and the object map's adapter for a
store's predictions. Each runs one call of the napari-free library as a dock job (progress, Cancel) or a background
read (latest request wins); nothing here cuts, fits or assigns an object itself.
"""
from pathlib import Path

import numpy as np
import pandas as pd
from magicgui.widgets import CheckBox, ComboBox, Container, FloatSpinBox, Label, LineEdit, PushButton, SpinBox

from ..errors import InputError
from ..plate.view import cluster_shares, condition_columns, field_table, field_title, object_fields, write_shares
from . import layers as L
from .map_panel import gallery_grid, gallery_rows, map_table, colour_columns, PREDICTED, ring_objects, show_gallery
from .method_form import crop_options
from .parts import ask_path, said
from .sources import Seen
from .plots import SharePlot


def store_beside(source) -> Path:
    """Where a plate's store goes by default: beside its input (``plate/`` → ``plate.zarr``, ``plate/plate.csv`` →
    ``plate/plate.zarr``, ``field.ome.zarr`` → ``field.objects.zarr``)."""
    path = Path(source)
    if path.suffix.lower() == ".zarr":
        return path.with_name(f"{path.name[:-len('.zarr')].removesuffix('.ome')}.objects.zarr")
    if path.is_dir() or not path.suffix:
        return path.with_name(f"{path.name}.zarr")
    return path.with_suffix(".zarr")


def tile_at(gallery_layer, position, size: int) -> tuple[int, int] | None:
    """(row, column) of the gallery tile under a world position (None: between tiles or outside)."""
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


def _row(*widgets) -> Container:
    from .sources import row

    return row(*widgets)


class Extract(Container):
    """A plate's fields (a folder with masks, a CSV manifest, an OME-Zarr image or plate) cut into an object store
    beside them: ``ticlust.extract`` with the objects route's crop options, resumable, failed fields listed."""

    def __init__(self, plate):
        super().__init__(labels=True)
        self.plate, dock = plate, plate.dock
        self.source = LineEdit(label="fields", tooltip="A folder of fields with masks, a CSV manifest (columns "
                                                       "image,labels, …) or an OME-Zarr image or HCS plate with labels")
        self.source.native.setPlaceholderText("a folder, plate.csv or an .ome.zarr")
        self.folder_button = PushButton(text="Folder / OME-Zarr…")
        self.file_button = PushButton(text="Manifest…")
        self.target = LineEdit(label="store", tooltip="Where the object store is written (an unfinished store made "
                                                      "with the same options is finished)")
        self.show_advanced = CheckBox(value=False, text="Advanced (crop options, channels, Z, workers, segment)")
        self.crop = crop_options()
        self.channels = LineEdit(label="channels", tooltip="Keep these channels, by name or index, in this order (DNA,ER "
                                                           "or 0,2); blank: every channel")
        self.z = LineEdit(label="Z plane", tooltip="Fields with several Z planes: the plane to cut (from 0), or max for "
                                                   "their maximum projection; blank: such fields are refused")
        self.workers = SpinBox(label="workers", min=0, max=256, value=0,
                               tooltip="Cut the fields on a local dask cluster of this many processes (0: here)")
        self.diameter = FloatSpinBox(label="segment nuclei", min=0, max=1000, value=0, step=1,
                                     tooltip="Fields without masks: the nuclei's expected diameter in pixels, found in "
                                             "the first channel named (ticlust.segment_nuclei; the masks are written "
                                             "beside the store); 0: the masks come with the fields")
        self.suffixes = LineEdit(label="channel files", tooltip="A folder of one file per channel (NAME_D.tif, "
                                                                "NAME_F.tif, …): their suffixes, D,F; blank: none")
        self.advanced = Container(widgets=[self.crop, Container(widgets=[self.channels, self.z, self.workers,
                                                                         self.diameter, self.suffixes])],
                                  labels=False, visible=False)
        self.run = dock.button("Extract", self.start)
        self.extract_button = self.run.button
        self.failed = Label(label="left out", value="")
        self.failed.native.setWordWrap(True)
        self.extend([self.source, _row(self.folder_button, self.file_button), self.target, self.show_advanced,
                     self.advanced, self.extract_button, self.failed])
        self.show_advanced.changed.connect(lambda on: setattr(self.advanced, "visible", bool(on)))
        self.source.changed.connect(lambda _=None: self.source.value.strip() and setattr(
            self.target, "value", str(store_beside(self.source.value.strip()))))
        self.folder_button.changed.connect(self._ask_folder)
        self.file_button.changed.connect(self._ask_file)

    def offer(self, source) -> None:
        """Fill in a plate's fields and the store beside them (what File > Open of the fields does)."""
        self.plate.dock.use(self.plate)
        self.source.value = str(source)
        self.plate.dock.show_tab("Data")
        self.plate.dock.say(f"Extract cuts every object of {Path(source).name} into {Path(self.target.value).name}: "
                            "check the store's path (and the crop options under Advanced), then press Extract.")

    def options(self) -> dict:
        """The crop options as ``extract`` takes them; a channel list that cannot be read raises InputError."""
        from ..plate.store import typed_channels

        o = {w.name: w.value for w in self.crop}
        suffixes = [part.strip() for part in self.suffixes.value.split(",") if part.strip()]
        return {"crop_size": o["size"] or None, "keep_border": o["keep_border"], "orient": o["orient"],
                "normalize": o["normalize"], "rescale": o["rescale"], "channel": typed_channels(self.channels.value),
                "z": self.z.value.strip() or None, "segment": "nuclei" if self.diameter.value else None,
                "diameter": self.diameter.value or None, "channel_suffixes": suffixes or None}

    def start(self):
        """Extract in a worker, progress and ETA in the dock, Cancel on the button; the store opens when done."""
        from ..plate.store import extract

        dock, source, target = self.plate.dock, self.source.value.strip(), self.target.value.strip()
        if not source or not target:
            dock.say("Give the plate's fields (a folder with masks — or without, with segment nuclei under Advanced —, a "
                     "CSV manifest or an OME-Zarr) and the store's path first.")
            return None
        try:
            options, workers = self.options(), self.workers.value or None
        except InputError as exc:
            dock.say(str(exc))
            return None
        self.failed.value = ""
        dock.say(f"Extracting {Path(source).name} into {Path(target).name}…")
        done = len(list((Path(target) / "fields").glob("[0-9]*"))) if Path(target).is_dir() else 0
        worker = dock.run_job(self.run, lambda sink: extract(source, target, **options, workers=workers, progress=sink),
                              done=self._done, busy=True, kept=f"the fields cut are kept (at least {done}); Extract "
                                                                "again finishes the store (the same store as an "
                                                                "uninterrupted run)")
        return worker

    def _done(self, store) -> None:
        failed = store.failed
        self.failed.value = "; ".join(f"{Path(str(r['image'])).name}: {r['error']}" for r in
                                      failed.to_dict("records")) or "none"
        left = f"; {len(failed)} field(s) left out (listed above)" if len(failed) else ""
        self.plate.open_store(store.path, then=f"Extracted {len(store)} objects of {len(store.fields)} fields into "
                                               f"{store.path.name}{left}.")

    def _ask_folder(self, _=None) -> None:
        ask_path(self.native, "folder", "The plate's fields: a folder with masks, or an OME-Zarr", self.offer)

    def _ask_file(self, _=None) -> None:
        ask_path(self.native, "open", "The plate's manifest", self.offer, "", "CSV manifest (*.csv)")


class Shares(Container):
    """Each cluster's share of the objects per well (or another manifest column): counted in a worker (latest column
    asked wins), drawn as stacked bars, exported as CSV."""

    def __init__(self, plate):
        super().__init__(labels=True)
        self.plate = plate
        self.counting = plate.dock.latest()
        self.table, self.by = None, None
        self.group_by = ComboBox(label="share per", choices=self._choices,
                                 tooltip="Which manifest column the cluster shares are counted per (well, condition, …)")
        self.plot = SharePlot()
        self.export_button = PushButton(text="Export shares…", enabled=False)
        self.append(self.group_by)
        self.native.layout().addWidget(self.plot)
        self.append(self.export_button)
        self.group_by.changed.connect(lambda _=None: self.plate.filling or self.count())
        self.export_button.changed.connect(self._ask_export)

    def _choices(self, _widget=None) -> list[str]:
        store = self.plate.store
        return [] if store is None else condition_columns(store) + ["image"]

    def opened(self, opened) -> None:
        self.group_by.reset_choices()
        self.group_by.value = opened.by
        self.counting.forget()
        self._set(opened.shares, opened.by)

    def count(self):
        """Count each cluster's share per the chosen column in a worker (it reads every object) and show it. Returns
        the worker, or None when it waits or there is nothing to count."""
        by, predictions = self.group_by.value, self.plate.predictions
        if predictions is None or not by:
            self._set(None, by)
            return None
        self.export_button.enabled = False
        self.plate.dock.say(f"Counting each cluster's share per {by}…")

        def show(done) -> None:
            shares, problem = done
            self._set(shares if problem is None else None, by)
            self.plate.dock.say(problem or f"Each cluster's share per {by}: {len(shares)} groups.")
        return self.counting.ask((id(predictions), by),
                                 lambda: said(cluster_shares, predictions, by, what=f"counting the shares per {by}"),
                                 show)

    def _set(self, shares, by) -> None:
        self.table, self.by = shares, by
        self.plot.set_shares(shares, by or "")
        self.export_button.enabled = shares is not None

    def enable(self, on: bool) -> None:
        self.group_by.enabled = on

    def export(self, path) -> Path:
        """Write the share table shown to ``path`` (CSV, atomically)."""
        if self.table is None or self.counting.busy:
            raise InputError("There are no shares to export yet: open a store that has predictions.")
        out = write_shares(self.table, path, self.plate.store)
        self.plate.dock.say(f"Wrote the cluster shares per {self.by} to {out.name}.")
        return out

    def _ask_export(self, _=None) -> None:
        ask_path(self.native, "save", "Export cluster shares", self.export, f"shares_per_{self.by}.csv", "CSV (*.csv)",
                 lambda message: self.plate.dock.refuse(message, "Stopped: "))


class PlateExport:
    """The plate's clustering taken out (``plate.explore``, ``plate.labels``): the per-object table as ``ticlust
    predict`` writes it (CSV or Parquet), a gallery folder, and cluster labels written into its OME-Zarr."""

    def __init__(self, plate):
        self.plate, dock = plate, plate.dock
        self.table = dock.button("Export objects…", self._ask_table, tooltip="Every object's row with its cluster, "
                                 "score and runner-up (CSV or Parquet), as ticlust predict --csv / --parquet writes it")
        self.labels = dock.button("Write labels to OME-Zarr", self.write_labels, tooltip="Every field of the OME-Zarr "
                                  "input gets a label image 'clusters' (cluster + 1 per object), as ticlust predict "
                                  "--write-labels")
        self.replace_labels = CheckBox(value=False, text="replace another result's labels")
        self.widgets = [self.table.button, self.labels.button, self.replace_labels]

    def _run(self, runner, call, said_, kept: str = "nothing was written"):
        dock = self.plate.dock
        if not self.plate.needs_store():
            return None
        return dock.run_job(runner, call, done=lambda out: dock.say(said_(out)), kept=kept, busy=True)

    def export_objects(self, path):
        """Write the store's predictions to ``path`` in a worker (.parquet: Parquet, else CSV). Returns the worker."""
        from ..plate.explore import export_objects

        store = self.plate.store
        return self._run(self.table, lambda _sink: export_objects(store, path),
                         lambda out: f"Wrote the {len(store)} objects' table to {out.name}{self.pending()}.")

    def write_labels(self):
        """The predictions as a label image in every field of the store's OME-Zarr input, in a worker (resumable;
        another result's labels replaced only when the box is ticked). Returns the worker."""
        from ..plate.labels import write_cluster_labels

        store, made, overwrite = self.plate.store, self.plate.predicted, bool(self.replace_labels.value)
        if made is None:
            self.plate.dock.say("Predict every object (the Predict tab), or load the result the store's predictions "
                                "were made with (Load result…), first.")
            return None
        return self._run(self.labels, lambda sink: write_cluster_labels(store, made, overwrite=overwrite, progress=sink),
                         lambda done: f"Wrote the cluster labels {done.name!r} into {done.written + done.kept} fields "
                                      f"of {Path(store.attributes['input']['path']).name} ({done.kept} held them "
                                      f"already){self.pending()}.",
                         "the fields written are whole and kept; press again to finish the rest")

    def pending(self) -> str:
        result = self.plate.dock.result
        return "" if result is None or result is self.plate.predicted else \
            " (the store's predictions: the edits since the last re-predict are not in them)"

    def _ask_table(self):
        return ask_path(self.plate.dock.native, "save", "Export every object's cluster", self.export_objects,
                        "plate_clusters.csv", "CSV (*.csv);;Parquet (*.parquet)")


class PlateMap:
    """The object map's adapter for a store: one point per predicted object at its map_x, map_y, coloured by its
    cluster (the dock's edits not yet re-predicted shown on it), well, any manifest column, score or margin."""

    def __init__(self, plate):
        self.plate = plate
        self.objects = self.table = self.store = None   # the objects with a place, their predictions, their store

    @property
    def part(self):
        return self.plate.dock.object_map

    def names(self) -> dict[str, str]:
        stem = self.plate.names()["field"][:-len(" field")]
        return {"gallery": f"{stem} map selection", "ring": f"{stem} map selection on field"}

    def count_columns(self) -> list[str]:
        conditions = [c for c in self.table.columns if c not in PREDICTED] if self.table is not None else []
        return ["cluster"] + (["well"] if "well" in conditions else conditions[:1])

    def items_of(self, rows) -> np.ndarray:
        return self.objects[rows]

    def pending(self) -> str:
        return self.plate.pending()

    def opened(self, opened) -> None:
        """A store was opened (or read again after a prediction): the map's columns read in a worker."""
        self.part.ensure()
        self.store, self.objects, self.table = opened.store, None, None
        for name in self.names().values():
            if name in self.plate.viewer.layers:
                self.plate.viewer.layers.remove(name)
        self.part.panel.map.clear_stale()
        if opened.predictions is None:
            self.part.no_points("No predictions yet: predict the store first (the Predict tab, or ticlust predict "
                                "RESULT STORE); the map shows every predicted object.")
            return
        self.part.panel.say(f"Reading the map of {len(opened.store):,} objects…")
        store, predictions = opened.store, opened.predictions
        self.part.reading.ask(("map", str(store.path), id(predictions)),
                              lambda: said(map_table, store, predictions, what="Reading the map"),
                              lambda got: self._read(store, *got))

    def _read(self, store, read, problem) -> None:
        if store is not self.store:
            return
        panel = self.part.ensure()
        if problem is not None:
            panel.say(problem)
            return
        objects, xy, table, columns = read
        if not len(objects):
            self.part.no_points("The store's predictions have no map places (made with a result saved before maps "
                                "were made): Compute map learns one on the fit sample, then predicts again.",
                                compute=True)
            return
        self.objects, self.table = objects, table
        missing = len(store) - len(objects)
        panel.say(f"{len(objects):,} objects" + (f" ({missing:,} without a place)" if missing else "") +
                  ": draw a lasso or a box to select, click a point to open its field.")
        result = self.plate.dock.result
        if result is not None:
            panel.set_k(result.k)
        self.part.show_points(xy, self.columns() if result is not None and result is not self.plate.predicted
                              else columns)
        self.result_changed(recolor=False)

    def columns(self) -> pd.DataFrame:
        return colour_columns(self.plate.previewed(self.table, self.objects)[0])

    def result_changed(self, recolor: bool = True) -> None:
        """An edit, an Undo or a Refine: recoloured, or said out of date (with Refresh)."""
        panel, dock = self.part.alive_panel(), self.plate.dock
        if panel is None or self.table is None:
            return
        if dock.result is not None:
            panel.set_k(dock.result.k)
        result, predicted = dock.result, self.plate.predicted
        if result is not None and predicted is not None and result is not predicted and \
                self.plate.renumbering() is None:
            panel.map.mark_stale("the result changed since the store was predicted: Re-predict places every object "
                                 "anew")
            return
        panel.map.clear_stale()
        if recolor:
            panel.map.update_columns(self.columns())

    def refresh(self):
        """Refresh on the out-of-date banner: Re-predict, which reads the map again when done."""
        result = self.plate.dock.result
        if result is not None and result.state is None:
            self.part.panel.say("The edited result places no object until it is refined: Refine it (the Curate tab), "
                                "then Refresh.")
            return None
        self.part.panel.say("Re-predicting the store for a fresh map…")
        return self.plate.repredict()

    def selected(self) -> np.ndarray:
        if self.part.alive_panel() is None or self.objects is None:
            return np.zeros(0, np.int64)
        return self.objects[self.part.panel.map.selection]

    def show_selection(self, rows: np.ndarray) -> None:
        """A gallery of the selection's crops (read in a worker) left of the field; its objects ringed there."""
        plate, names = self.plate, self.names()
        objects = self.objects[rows] if rows.size else np.zeros(0, np.int64)
        self.ring_field(plate.picture)
        if not objects.size:
            show_gallery(plate.viewer, names["gallery"], None, None)
            return
        store, picked, field = plate.store, gallery_rows(objects), plate.names()["field"]

        def shown(grid) -> None:
            if store is plate.store and np.array_equal(self.selected(), objects):
                beside = plate.viewer.layers[field] if L.drawn(plate.viewer, field) else None
                show_gallery(plate.viewer, names["gallery"], grid, beside)
        self.part.gallery.ask(("gallery", id(store), objects.tobytes()), lambda: gallery_grid(store.crops[picked]),
                              shown)

    def ring_field(self, picture) -> None:
        """Ring the selected objects that are on the field shown (the objects layer's values: place + 1)."""
        from ..plate.view import field_span

        plate = self.plate
        name = plate.names()["objects"]
        painted = plate.viewer.layers[name] if name in plate.viewer.layers and picture is not None else None
        values = np.zeros(0, np.int64)
        if painted is not None:
            start, stop = field_span(plate.starts, picture.field_index)
            chosen = self.selected()
            values = chosen[(chosen >= start) & (chosen < stop)] - start + 1
        ring_objects(plate.viewer, painted, values, self.names()["ring"])

    def field_painted(self, picture) -> None:
        if self.part.alive_panel() is not None and self.part.panel.map.selection.size:
            self.ring_field(picture)

    def open_object(self, row: int) -> None:
        """A point clicked: its field shown and the object inspected (and picked for the Curate tab)."""
        plate = self.plate
        obj = int(self.objects[row])
        field = int(object_fields(plate.starts, obj)[0])
        plate.picked_objects = [obj]
        if plate.picture is None or plate.picture.field_index != field:
            plate.pick(field)
        plate.inspect(obj)
        self.part.panel.map.highlight([row])
        self.part.panel.say(f"object {obj}: its field is shown and the object inspected.")

    def picked(self, objects) -> None:
        """Objects picked on the field or in the gallery are ringed on the map."""
        if self.part.alive_panel() is None or self.objects is None:
            return
        objects = np.asarray(objects, np.int64)
        at = np.clip(np.searchsorted(self.objects, objects), 0, len(self.objects) - 1)
        self.part.panel.map.highlight(at[self.objects[at] == objects])

    def map_data(self):
        if self.plate.dock.model is None or self.plate.store is None:
            raise InputError("Load the result the store was predicted with (Load result… in the Fit tab) first: its "
                             "map is learned from its fit sample.")
        return self.plate.store

    def computed(self, mapped) -> None:
        self.plate.dock.take_result(mapped, fitted=True)
        self.part.panel.say("Computed the map on the fit sample; predicting every object for its place…")
        self.plate.predict()

class PlateObjects:
    """The plate source's objects picked (on the field or a gallery tile) and inspected: the object's crop right of the
    field, every prototype aligned onto it (``plate.explore.inspect_object``), and the prototypes beside it."""

    def click_at(self, position, add: bool = False) -> int | None:
        """Pick the object under a world position of the painted field or of the gallery and inspect it. Returns its
        store number, or None (nothing there)."""
        obj = self.object_at(position)
        if obj is None:
            return None
        self.picked_objects = sorted(set(self.picked_objects) | {obj}) if add else [obj]
        self.map.picked(self.picked_objects)
        self.inspect(obj)
        return obj

    def object_at(self, position) -> int | None:
        """The store object under a world position: on the painted field, else on a gallery tile."""
        layers, names = self.viewer.layers, self.names()
        if self.store is None:
            return None
        if names["objects"] in layers and layers[names["objects"]].visible and self.picture is not None:
            place = L.object_at(layers[names["objects"]], position)
            if place is not None:
                layers[names["objects"]].selected_label = place + 1
                return int(self.field_objects(self.picture.field_index, place + 1)[place])
        if names["gallery"] in layers and layers[names["gallery"]].visible:
            gallery = layers[names["gallery"]]
            tile = tile_at(gallery, position, self.store.size)
            members = gallery.metadata.get("ticlust_gallery", {}).get(tile[0], []) if tile is not None else []
            if tile is not None and tile[1] < len(members):
                return int(members[tile[1]])
        return None

    def inspect(self, obj: int):
        """Inspect store object ``obj`` (said what is missing when the dock has no fitted result)."""
        if self.dock.model is None:
            self.dock.say(f"Object {obj} picked: fit a result (the Fit tab) or load the one the store was predicted "
                          "with (Load result…) to inspect it.")
            return None
        self.dock.say(f"Aligning the prototypes onto object {obj}…")
        return self.dock.inspector.request(obj)

    def inspection(self, obj: int):
        """The worker's job: every prototype of the dock's fitted result aligned onto the object
        (``plate.explore.inspect_object``), and its cluster and runner-up as the field paints them."""
        from ..plate.explore import inspect_object

        store, model, device = self.store, self.dock.model, self.dock.device_value()
        field, place = map(int, object_fields(self.starts, obj))

        def job():
            try:
                seen = inspect_object(store, model, obj, device)
                row = field_table(store, field).iloc[[place]].reset_index(drop=True)
            except InputError as exc:
                return str(exc)
            except Exception as exc:       # said in the dock, in one sentence
                return self.gone() or f"inspecting object {obj} stopped with {type(exc).__name__}: {exc}"
            chosen, runner, said_ = self._verdict(seen, row, field)
            where = "; in the fit sample: the fit's own alignment" if seen.sample is not None else ""
            line = (f"object {obj} ({said_}) → cluster {chosen} (score {seen.scores[chosen]:.4g}); runner-up {runner} "
                    f"({seen.scores[runner]:.4g}){where}.")
            return Seen(obj, _shown(seen.aligned), seen.scores, chosen, runner, seen.grid, line, seen.item)
        return job

    def _verdict(self, seen, row, field: int):
        """(cluster, runner-up, words) for the frames: the predictions' when the dock's model made them (as the field
        is painted), else the alignment's own (the lowest score and the next)."""
        title = f"{field_title(self.store.fields.iloc[field])}, label {int(row['label'].iloc[0])}"
        order = np.argsort(seen.scores)
        chosen, runner = int(order[0]), int(order[min(1, len(order) - 1)])
        if "cluster" not in row.columns:
            return chosen, runner, title + ", not predicted yet"
        if self.predicted is self.dock.model:
            chosen, runner = int(row["cluster"].iloc[0]), int(row["runner_up"].iloc[0])
            runner = chosen if runner < 0 else runner
        shown, _ = self.previewed(row, np.array([seen.object]))
        title += f", painted cluster {int(shown['cluster'].iloc[0])}"
        for flag, words in (("by_hand", "set by hand"), ("outlier", "an outlier")):
            if flag in shown.columns and bool(shown[flag].iloc[0]):
                title += f", {words}"
        return chosen, runner, title

    def anchor(self, seen: Seen | None):
        """The object's layer right of the field, showing its crop (blank without one): the inspector, its grid and
        the prototypes are laid out from it."""
        size = self.store.size
        blank = seen is None or seen.picture is None        # blank, of the crops' kind (an RGB store's is RGB)
        item = np.zeros(self.store.crops.shape[1:], np.float32) if blank else seen.picture
        rgb = item.ndim == 3 and item.shape[-1] == 3
        name, field = self.names()["object"], self.names()["field"]
        lo, hi = L.field_extent(self.viewer.layers[field]) if field in self.viewer.layers else (np.zeros(2), np.zeros(2))
        u = float(max(1, round((hi[0] - lo[0]) / (6 * size))))
        translate = (float(lo[0]) + (u - 1) / 2, float(hi[1]) + max(8.0, (hi[1] - lo[1]) / 32) + (u - 1) / 2)
        return L.set_image(self.viewer, name, _shown(item[None])[0], translate=translate, scale=(u, u),
                           **({"rgb": True} if rgb else {"colormap": "gray"}))

    def inspected(self) -> None:
        if not self._first:                 # the first object inspected: the view takes in what was drawn
            self._first = True
            self.frame()
        L.rescale_lines(self.viewer, self.names()["object"])
        if not L.drawn(self.viewer, L.layer_names(self.names()["object"])["prototypes"]) and self.dock.result:
            result = self.dock.result
            self.later(lambda: self.show_prototypes(result.prototypes, result.cluster_sizes()))

    def show_prototypes(self, prototypes, sizes=None) -> None:
        """The prototypes as a numbered mosaic beside the object layer (live while a fit runs)."""
        name = self.names()["object"]
        if not L.drawn(self.viewer, name):
            self.anchor(None)
            self.later(lambda: name in self.viewer.layers and self.show_prototypes(prototypes, sizes))
            return
        made = L.drawn(self.viewer, L.layer_names(name)["prototypes"])
        later = None if made else (lambda draw: self.later(lambda: name in self.viewer.layers and draw()))
        L.show_prototypes(self.viewer, self.viewer.layers[name], _shown(np.asarray(prototypes, np.float32)), sizes,
                          later=later)
        if not made:                           # the first prototypes: the view takes them in
            self.later(lambda: self.later(self.frame))

    def on_zoom(self) -> None:
        if self.store is not None:
            L.rescale_lines(self.viewer, self.names()["object"])


def _shown(items: np.ndarray) -> np.ndarray:
    """Crops (N, H, W[, C]) as the object layer shows them: grey, RGB as it is, other channels averaged."""
    items = np.asarray(items, np.float32)
    return items.mean(-1) if items.ndim == 4 and items.shape[-1] != 3 else items

