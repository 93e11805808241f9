"""The plate dock's inspector: click an object on the painted field (or a tile of the gallery) and it is shown as the
ticlust widget shows an item — the object's crop right of the field, with its warp grid; under it every prototype
aligned onto it with its score, its cluster framed in yellow and the runner-up in blue; the prototypes beside it.
The alignment is computed in a worker from the store's crop and the dock's fitted result
(``plate.explore.inspect_object``); which cluster is the object's and its runner-up come from the predictions the
field is painted with (the dock's edits shown on them), so the frames say what the field says. The layers are the
ticlust widget's (``_napari.layers``), laid out from the object's layer as the widget lays them out from a stack.
"""
import numpy as np

from ..errors import InputError
from . import layers as L
from .plate_dock import tile_at
from .workers import start_worker


class PlateInspector:
    """Picks objects for the plate panel (its ``panel``) and shows the picked one in the inspector layers."""

    def __init__(self, panel):
        self.panel = panel
        self.worker = None             # the worker aligning the prototypes onto an object
        self._pending: int | None = None
        self.shown: int | None = None  # the store object the inspector layers show
        self.line = ""                 # what the status line said of it (a field painted later leaves it there)
        self._prototypes = None        # the prototypes array the mosaic shows
        self._first = False            # the inspector's layers were just made: frame the view once they are drawn

    @property
    def viewer(self):
        return self.panel.viewer

    def name(self) -> str:
        """The object layer's name: every inspector layer is named after it (``<store> object inspector``, …)."""
        return f"{self.panel.names()['field'][:-len(' field')]} object"

    def layer_names(self) -> list[str]:
        names = L.layer_names(self.name())
        return [self.name()] + [names[k] for k in ("prototypes", "prototype_labels", "inspector", "scores", "frames",
                                                   "grid")]

    def forget(self) -> None:
        """Another store: its inspector layers go."""
        for name in self.layer_names():
            if name in self.viewer.layers:
                self.viewer.layers.remove(name)
        self.shown, self._pending = None, None

    def drop(self) -> None:
        if self.worker is not None:
            self.worker.quit()
            self.worker = None

    # ---- picking -------------------------------------------------------------------------------
    def on_click(self, _viewer, event):
        """A click (not a drag) on the painted field or the gallery picks the object under it; shift adds it."""
        start, add = event.position, "Shift" in getattr(event, "modifiers", ())
        if (yield from L.click_without_drag(event)):
            self.click_at(start, add)

    def click_at(self, position, add: bool = False) -> int | None:
        """Pick the object under a world position of the painted field or of the gallery and inspect it. Returns
        its store number, or None (nothing there)."""
        obj = self.object_at(position)
        if obj is None:
            return None
        self.panel.picked = sorted(set(self.panel.picked) | {obj}) if add else [obj]
        self.panel.object_map.picked(self.panel.picked)
        self.inspect(obj)
        return obj

    def object_at(self, position) -> int | None:
        """The store object under a world position: on the painted field, else on a gallery tile."""
        panel, layers = self.panel, self.viewer.layers
        if panel.store is None:
            return None
        names = panel.names()
        if names["objects"] in layers and layers[names["objects"]].visible and panel.picture is not None:
            place = L.object_at(layers[names["objects"]], position)
            if place is not None:
                layers[names["objects"]].selected_label = place + 1
                return int(panel.field_objects(panel.picture.field_index, place + 1)[place])
        if names["gallery"] in layers and layers[names["gallery"]].visible:
            gallery = layers[names["gallery"]]
            tile = tile_at(gallery, position, panel.store.size)
            members = gallery.metadata.get("ticlust_gallery", {}).get(tile[0], []) if tile is not None else []
            if tile is not None and tile[1] < len(members):
                return int(members[tile[1]])
        return None

    # ---- inspecting ------------------------------------------------------------------------------
    def inspect(self, obj: int):
        """Align every prototype of the dock's fitted result onto store object ``obj`` in a worker and show it. While
        one is aligned, the latest object asked for waits and is inspected next. Returns the worker (None: waits)."""
        from ..plate.explore import inspect_object
        from ..plate.view import field_table, object_fields

        panel = self.panel
        if panel.model is None:
            panel.say(f"Object {obj} picked: fit a result (the Fit tab) or load the one the store was predicted with "
                      "(Load result…) to inspect it.")
            return None
        if self.worker is not None:
            self._pending = obj
            return None
        store, model, device = panel.store, panel.model, panel.device()
        field, place = map(int, object_fields(panel.starts, obj))

        def job():
            try:
                seen = inspect_object(store, model, obj, device)
                row = field_table(store, field).iloc[[place]].reset_index(drop=True)
                return seen, row, field, None
            except InputError as exc:
                return None, None, field, str(exc)
            except Exception as exc:       # said in the dock, in one sentence
                return None, None, field, panel.gone() or \
                    f"inspecting object {obj} stopped with {type(exc).__name__}: {exc}"

        self.worker = start_worker(job, returned=lambda done: self._show(store, model, *done),
                                   finished=self._next, alive=panel.alive)
        panel.say(f"Aligning the prototypes onto object {obj}…")
        return self.worker

    def _next(self) -> None:
        self.worker = None
        pending, self._pending = self._pending, None
        if pending is not None and pending != self.shown:
            self.inspect(pending)

    def _show(self, store, model, seen, row, field: int, problem: str | None) -> None:
        panel = self.panel
        if store is not panel.store or model is not panel.model:     # another store or result meanwhile
            return
        if problem is not None:
            panel.say(problem)
            return
        chosen, runner, said = self._verdict(seen, row, field)
        anchor = self._anchor(seen.item)
        if self._make_layers(anchor):          # the inspector's layers are made one per turn, then drawn
            self._first = True
            panel.later(lambda: self._show(store, model, seen, row, field, problem))
            return
        first = self._first or not L.drawn(self.viewer, L.layer_names(anchor.name)["inspector"])
        self._first = False
        self.shown = seen.object
        where = "; in the fit sample: the fit's own alignment" if seen.sample is not None else ""
        self.line = (f"object {seen.object} ({said}) → cluster {chosen} (score {seen.scores[chosen]:.4g}); "
                     f"runner-up {runner} ({seen.scores[runner]:.4g}){where}.")
        panel.say(self.line)

        def current() -> bool:
            return store is panel.store and self.shown == seen.object and anchor.name in self.viewer.layers

        def draw():      # the aligned prototypes in this turn; their scores, their frames, the warp grid (and,
            if not current():     # the first time, the view) each in a turn of its own after it
                return
            L.show_inspector(self.viewer, anchor, _shown(seen.aligned, anchor.rgb), seen.scores, chosen, runner,
                             seen.object, later=lambda step: panel.later(lambda: current() and step()))
            after(3, lambda: self._grid(anchor, seen, chosen))
            if first:                        # the first object inspected: the view takes in what was drawn
                after(4, panel.frame)

        def after(turns: int, step) -> None:     # ``step`` in the ``turns``-th turn from now, if still current
            panel.later(lambda: current() and (step() if turns == 1 else after(turns - 1, step)))
        panel.later(draw)

    def _make_layers(self, anchor) -> bool:
        """Make the first of the inspector's layers that is missing (empty, drawn into later); False when they all
        exist. One napari layer takes tenths of a second of the GUI thread: one per turn keeps the window reacting."""
        names = L.layer_names(anchor.name)
        if names["inspector"] not in self.viewer.layers:
            self.viewer.add_image(np.zeros((2, 2, 3) if anchor.rgb else (2, 2), np.float32), name=names["inspector"],
                                  **L.image_kwargs(anchor))
        elif names["scores"] not in self.viewer.layers:
            self.viewer.add_image(np.zeros((2, 2, 4), np.uint8), name=names["scores"], rgb=True)
        elif names["frames"] not in self.viewer.layers:
            self.viewer.add_shapes(None, name=names["frames"])
        else:
            return False
        return True

    def _grid(self, anchor, seen, chosen: int) -> None:
        """The object's warp grid (none for methods that do not warp), then the prototypes if they are not shown."""
        if anchor.name not in self.viewer.layers:
            return
        grid = L.layer_names(anchor.name)["grid"]
        if seen.grid is not None:
            L.draw_grid(self.viewer, anchor, seen.grid, chosen)
            L.rescale_lines(self.viewer, anchor.name)
        elif L.drawn(self.viewer, grid):      # hidden, not removed: a layer made again is tenths of a second
            L.hide(self.viewer.layers[grid])
        if not L.drawn(self.viewer, L.layer_names(anchor.name)["prototypes"]) and self.panel.result is not None:
            self.panel.later(lambda: self.show_prototypes(self.panel.result.prototypes,
                                                          self.panel.result.cluster_sizes()))

    def _verdict(self, seen, row, field: int):
        """(cluster, runner-up, words) of the inspected object for the frames: the predictions' when the dock's model
        made them (the result's own verdict, as the field is painted), else the model's alignment's own (the lowest
        score and the next: the predictions are in another numbering); the words say what the field paints."""
        from ..plate.view import field_title

        title = f"{field_title(self.panel.store.fields.iloc[field])}, label {int(row['label'].iloc[0])}"
        order = np.argsort(seen.scores)
        chosen, runner = int(order[0]), int(order[min(1, len(order) - 1)])
        if "cluster" not in row.columns:
            return chosen, runner, title + ", not predicted yet"
        if self.panel.predicted is self.panel.model:
            chosen, runner = int(row["cluster"].iloc[0]), int(row["runner_up"].iloc[0])
            runner = chosen if runner < 0 else runner
        shown, _ = self.panel.previewed(row, np.array([seen.object]))
        title += f", painted cluster {int(shown['cluster'].iloc[0])}"
        for flag, words in (("by_hand", "set by hand"), ("outlier", "an outlier")):
            if flag in shown.columns and bool(shown[flag].iloc[0]):
                title += f", {words}"
        return chosen, runner, title

    # ---- layers ----------------------------------------------------------------------------------
    def _anchor(self, item: np.ndarray | None):
        """The object layer right of the field (made, or updated with ``item``; blank when it is made without one):
        what the inspector, the warp grid and the prototypes are laid out from."""
        store = self.panel.store
        item = np.zeros(store.crops.shape[1:], np.float32) if item is None else item   # blank, of the crops' kind
        rgb = item.ndim == 3 and item.shape[-1] == 3
        shown = _shown(item[None], rgb)[0]
        name = self.name()
        if name in self.viewer.layers and self.viewer.layers[name].rgb != rgb:
            self.viewer.layers.remove(name)
        field = self.panel.names()["field"]
        lo, hi = L.field_extent(self.viewer.layers[field]) if field in self.viewer.layers else \
            (np.zeros(2), np.zeros(2))
        u = float(max(1, round((hi[0] - lo[0]) / (6 * store.size))))
        gap = max(8.0, (hi[1] - lo[1]) / 32)
        translate = (float(lo[0]) + (u - 1) / 2, float(hi[1]) + gap + (u - 1) / 2)
        return L.set_image(self.viewer, name, shown, translate=translate, scale=(u, u),
                           **({"rgb": True} if rgb else {"colormap": "gray"}))

    def show_prototypes(self, prototypes, sizes=None) -> None:
        """The prototypes as the widget's numbered mosaic beside the object layer (live while a fit runs); the object
        layer, when it is made first, in the turn of the event loop before."""
        name = self.name()
        if name not in self.viewer.layers:
            self._anchor(None)         # not drawn if a Cancel took the object layer away meanwhile
            self.panel.later(lambda: name in self.viewer.layers and self.show_prototypes(prototypes, sizes))
            return
        anchor = self.viewer.layers[name] if L.drawn(self.viewer, name) else self._anchor(None)   # laid out
        made = L.drawn(self.viewer, L.layer_names(name)["prototypes"])
        later = None if made else (lambda draw: self.panel.later(lambda: name in self.viewer.layers and draw()))
        L.show_prototypes(self.viewer, anchor, _shown(np.asarray(prototypes, np.float32), anchor.rgb), sizes,
                          picture=not (made and prototypes is self._prototypes),   # a move changes the sizes only
                          later=later)     # the first time: the numbers in the next turn, the view in the one after
        self._prototypes = prototypes
        if not made:                           # the first prototypes: the view takes them in
            self.panel.later(lambda: self.panel.later(self.panel.frame))


def _shown(items: np.ndarray, rgb: bool) -> np.ndarray:
    """Crops (N, H, W[, C]) as the object layer shows them: grey, RGB as it is, other channels averaged."""
    items = np.asarray(items, np.float32)
    if items.ndim == 4 and not rgb:
        return items.mean(-1)
    return items
