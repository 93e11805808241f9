"""The field a plate source shows: picked by well and field, read in a worker (latest request wins), its image and
its objects painted by cluster (by object before any prediction; the dock's edits not yet re-predicted shown on the
store's predictions), and the gallery of each cluster under it. The layers are made, hidden, one per turn of the event
loop when a store opens, so that every later step only draws into them."""
import numpy as np

from ..errors import InputError
from ..plate.view import field_picture, field_span, field_title, object_fields
from . import layers as L

TRANSPARENT = np.zeros(4)


class PlateField:
    """The plate source's field and gallery (a part of :class:`~.plate.PlateSource`, which holds the store)."""

    def layer_plan(self, opened) -> list[tuple]:
        """(name, kind, shape, options) of every layer drawn for a store, in the order they are stacked."""
        crop = tuple(opened.store.crops.shape[1:])
        rgb_crops = len(crop) == 3 and crop[-1] == 3
        field = ((1, 1, 3), {"rgb": True}) if opened.picture is not None and opened.picture.rgb else \
            ((1, 1), {"colormap": "gray"})
        crop_image = ((1, 1, 3), {"rgb": True}) if rgb_crops else ((1, 1), {"colormap": "gray"})
        gallery = crop_image if rgb_crops or len(crop) == 2 else ((crop[-1], 1, 1), {"colormap": "gray"})
        text = ((1, 1, 4), {"rgb": True, "dtype": np.uint8})     # RGBA text rasters (uint8: their contrast range)
        names, inspector = self.names(), L.layer_names(self.names()["object"])
        return [(names["field"], "image", *field), (names["objects"], "labels", (1, 1), {"opacity": 0.6}),
                (names["gallery"], "image", *gallery), (names["gallery labels"], "image", *text),
                (names["object"], "image", *crop_image), (inspector["prototypes"], "image", *crop_image),
                (inspector["prototype_labels"], "image", *text), (inspector["inspector"], "image", *crop_image),
                (inspector["scores"], "image", *text), (inspector["frames"], "shapes", (), {}),
                (inspector["grid"], "shapes", (), {})]

    def _make_layers(self, opened, then) -> None:
        """Make the store's missing layers (hidden and undrawn), one per turn of the event loop, then ``then()``: a
        layer made is tenths of a second of the GUI thread, a drawing into one hundredths."""
        missing = next((plan for plan in self.layer_plan(opened) if plan[0] not in self.viewer.layers), None)
        if missing is None:              # and the text glyphs the inspector's frames need (once), in a turn too
            L.load_text_glyphs(self.dock.native)
            self.later(then)
            return
        name, kind, shape, options = missing
        L.add_undrawn_layer(self.viewer, name, kind, shape, **options)
        self.later(lambda: self._make_layers(opened, then))

    # ---- a field ----
    def _well_choices(self, _widget=None) -> list[str]:
        if self.store is None or not self.has_wells:
            return []
        return list(dict.fromkeys(str(w) for w in self.store.fields["well"]))

    def _field_choices(self, _widget=None) -> list[tuple[str, int]]:
        if self.store is None:
            return []
        listing = self.store.fields
        if self.has_wells and self.well.value is not None:
            listing = listing[listing["well"].astype(str) == self.well.value]
        return [(field_title(row), int(row["field_index"])) for _, row in listing.iterrows()]

    def _on_well(self, _=None) -> None:
        if not self.filling and self.store is not None:
            self.filling = True
            try:
                self.field.reset_choices()
            finally:
                self.filling = False
            self._show_current()

    def _show_current(self) -> None:
        if self.field.value is not None:
            self.show_field(int(self.field.value))

    def _set_pickers(self, field_index: int) -> None:
        """Show ``field_index`` in the pickers without reading it."""
        row = self.store.fields.iloc[int(field_index)]
        self.filling = True
        try:
            if self.has_wells:
                self.well.value = str(row["well"])
                self.field.reset_choices()
            self.field.value = int(field_index)
        finally:
            self.filling = False

    def pick(self, field_index: int) -> None:
        """Show field ``field_index`` (as the pickers do): its well, then the field."""
        row = self.store.fields.iloc[int(field_index)]
        if self.has_wells:
            self.well.value = str(row["well"])
        self.field.value = int(field_index)

    def show_field(self, field_index: int):
        """Read field ``field_index`` (image, mask, rows) in a worker and draw it (latest request wins). Returns the
        worker, or None when it waits."""
        store, index = self.store, int(field_index)

        def job():
            try:
                return field_picture(store, index), None
            except InputError as exc:
                return None, str(exc)
            except Exception as exc:       # said in the dock, in one sentence
                return None, self.gone() or f"reading it stopped with {type(exc).__name__}: {exc}"
        if not self._says_object_of(index):
            self.dock.say(f"Reading {field_title(store.fields.iloc[index])}…")
        return self.reading.ask((str(store.path), index), job,
                                lambda done: store is self.store and self._draw_field(index, *done))

    def _says_object_of(self, field_index: int) -> bool:
        """Whether the status line says the inspected object and it is on field ``field_index`` (left said)."""
        shown = self.dock.inspector.shown
        return (shown is not None and self.starts is not None and self.dock.status.value == self.dock.inspector.line
                and int(object_fields(self.starts, shown)[0]) == int(field_index))

    def _draw_field(self, field_index: int, picture, problem: str | None) -> None:
        """The field's image and its objects painted by cluster (by object before any prediction)."""
        names, layers = self.names(), self.viewer.layers
        self.picture = picture
        self.reading.shown = (str(self.store.path), field_index)
        if problem is not None:
            for key in ("field", "objects"):
                if names[key] in layers:
                    layers.remove(names[key])
            self.dock.say(f"{field_title(self.store.fields.iloc[field_index])}: {problem}")
            return
        if names["field"] in layers and layers[names["field"]].rgb != picture.rgb:
            layers.remove(names["field"])
        shown = names["field"] in layers and layers[names["field"]].metadata.get("field_index") == field_index \
            and layers[names["field"]].data.shape == picture.image.shape
        if not shown:
            L.set_image(self.viewer, names["field"], picture.image, metadata={"field_index": picture.field_index},
                        **({"rgb": True} if picture.rgb else {"colormap": "gray"}))
        if names["objects"] in layers and shown:
            self.paint(picture)
        else:               # a new picture: in the event loop's next turn, so that the window reacts between
            self.later(lambda: self.picture is picture and self.paint(picture))
        self._place_gallery()
        if not shown:
            self.viewer.reset_view()

    def paint(self, picture) -> None:
        """The objects layer: values = place in the field + 1, coloured by cluster (or one colour per object)."""
        from napari.utils.colormaps import DirectLabelColormap, label_colormap

        table = picture.table.copy()
        table.insert(0, "index", np.arange(1, len(table) + 1))
        applied = self.applied is not None and self.applied[0] == picture.field_index
        if applied:                      # the last Apply result on this field, over the store's predictions
            for key, values in self.applied[1].items():
                table[key] = values
        if "cluster" not in table.columns:
            colormap, how = label_colormap(50), "painted by object: no predictions yet (Predict, or Apply result)"
        else:
            table, edits = (table, "") if applied else \
                self.previewed(table, self.field_objects(picture.field_index, len(table)))
            shown = table["cluster"].to_numpy()
            if "outlier" in table.columns:          # outliers grey, as on a painted field
                shown = np.where(table["outlier"].to_numpy(bool), -1, shown)
            colors = {None: TRANSPARENT, 0: TRANSPARENT, **{i + 1: L.cluster_color(int(c)) for i, c in enumerate(shown)}}
            colormap = DirectLabelColormap(color_dict=colors)
            how = f"painted by cluster ({self.applied[2]} applied)" if applied else \
                f"painted by cluster (the store's predictions{edits})"
        name = self.names()["objects"]
        if name in self.viewer.layers:
            layer = self.viewer.layers[name]
            L.reveal(layer)
            if layer.data is not picture.values and not _same(layer.data, picture.values):
                layer.data = picture.values     # an edit, or the field read again, repaints only its colours
            layer.colormap, layer.features = colormap, table
        else:
            layer = self.viewer.add_labels(picture.values, name=name, colormap=colormap, features=table, opacity=0.6)
        layer.metadata["field_index"] = picture.field_index
        self.map.field_painted(picture)
        if not self._says_object_of(picture.field_index):
            self.dock.say(f"{field_title(self.store.fields.iloc[picture.field_index])}: {len(table)} objects, {how}.")

    def field_objects(self, field_index: int, count: int) -> np.ndarray:
        """The store object numbers of a field's ``count`` objects (its rows of the table)."""
        start = field_span(self.starts, field_index)[0] if self.starts is not None else 0
        return np.arange(start, start + count)

    def previewed(self, table, objects: np.ndarray):
        """Predicted rows (of store objects ``objects``) with the dock's edits not yet re-predicted shown on them
        (``plate.curate``: clusters renumbered, hand-set clusters and outliers), and a note saying so."""
        from ..plate.curate import pin_columns, plate_pins, relabel_columns

        result, predicted = self.dock.result, self.predicted
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

    def renumbering(self) -> np.ndarray | None:
        """The predictions' clusters in the dock's result's numbering when it is the result they were made with,
        edited by merges, moves and outlier marks only (``plate.curate.cluster_map``), else None; worked out once
        per pair of predictions and result."""
        from ..plate.curate import cluster_map

        result, predicted = self.dock.result, self.predicted
        if self._renumbered is None or self._renumbered[0] is not predicted or self._renumbered[1] is not result:
            self._renumbered = (predicted, result, cluster_map(predicted, result))
        return self._renumbered[2]

    def pending(self) -> str:
        """What the store's predictions lack of the dock's result."""
        result = self.dock.result
        if result is None or result is self.predicted:
            return ""
        if self.predicted is not None and result.state is None and self.renumbering() is None:
            return "Refine, then Re-predict, to carry it to every object."
        return "Re-predict carries it to every object."

    # ---- the gallery ----
    def _draw_gallery(self, gallery) -> None:
        """The gallery under the field, or none (kept, hidden) before any prediction."""
        names = self.names()
        if gallery is None:
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
        if new:
            self.frame()

    def frame(self) -> None:
        """Frame the view on everything drawn (field, gallery, the object inspected, the prototypes); the objects
        layer active, so that napari's status bar reports the object under the mouse."""
        self.viewer.reset_view()
        if self.names()["objects"] in self.viewer.layers:
            self.viewer.layers.selection.active = self.viewer.layers[self.names()["objects"]]

    def _gallery_origin(self) -> tuple[float, float]:
        names = self.names()
        lo, hi = L.field_extent(self.viewer.layers[names["field"]]) if L.drawn(self.viewer, names["field"]) else \
            (np.zeros(2), np.zeros(2))
        return float(hi[0]) + 4 * L.Scene(self.store.size, self.store.size, 1).gap, float(lo[1])

    def _place_gallery(self) -> None:
        """Keep the gallery (and its text) under the field shown (moved only when the field's size changed)."""
        names = self.names()
        if not L.drawn(self.viewer, names["gallery"]):
            return
        gallery, text = self.viewer.layers[names["gallery"]], self.viewer.layers[names["gallery labels"]]
        shift = np.asarray(self._gallery_origin()) - np.asarray(gallery.translate[-2:], float)
        if not np.allclose(shift, 0):
            gallery.translate = np.asarray(gallery.translate, float) + np.pad(shift, (gallery.ndim - 2, 0))
            text.translate = np.asarray(text.translate, float) + shift


def _same(a, b) -> bool:
    """Whether two label images are equal (a millisecond; painting one anew is a hundred times that)."""
    return np.shape(a) == np.shape(b) and bool(np.array_equal(a, b))
