"""The curation part of the dock: fix a clustering by hand and re-fit from the fix.

Clusters are chosen in the dock's cluster table, items under the slider (or typed, or picked in a
landmark layer). Merge, Move and Mark as outlier are instant; Split and Refine run in the dock's worker
(progress in the status line, the Run button's Cancel stops them and changes nothing). Every edit
pushes the previous result on a stack that Undo pops; Run and Load start a fresh stack. The science is
``ticlust.curation``; this module only reads the selection and shows the edited result.
"""
import numpy as np
from magicgui.widgets import CheckBox, Container, LineEdit, PushButton, SpinBox
from napari.layers import Points
from napari.utils.notifications import show_error, show_info

from .. import curation
from ..errors import InputError
from ..io.gallery import export_gallery
from ..events import Done
from ..result import OUTLIER, ClusteringResult
from . import layers as L
from .plots import SmallPlot

OPS = {"merge": "merge", "split": "split", "move": "move", "outliers": "outlier mark", "refine": "refine"}


class CurationPanel(Container):
    """Merge / Split / Move / Mark as outlier / Undo / Refine / Export gallery, and two small plots."""

    def __init__(self, owner):
        super().__init__(labels=False)
        self.owner = owner                      # the TiclustWidget: its result, layers, worker and status line
        self.undo_stack: list[ClusteringResult] = []
        self.merge_button = PushButton(text="Merge", tooltip="Merge the two clusters selected in the table")
        self.split_button = PushButton(text="Split", tooltip="Re-cluster the selected cluster's members in two")
        self.undo_button = PushButton(text="Undo", enabled=False, tooltip="Go back one edit (refine included)")
        self.items = LineEdit(label="items", tooltip="Items to move or mark, e.g. 3, 8-12; empty: the item under the "
                                                     "slider (or the shapes picked in the landmark layer)")
        self.items.native.setPlaceholderText("items: 3, 8-12 (empty: the one under the slider)")
        self.target = SpinBox(label="to cluster", min=0, max=0, tooltip="The cluster Move puts the items in")
        self.move_button = PushButton(text="Move to cluster", tooltip="Put the items in the cluster on the left and "
                                                                      "pin them there")
        self.outlier_button = PushButton(text="Mark as outlier",
                                         tooltip="Flag the items as outliers: Refine fits the prototypes without them")
        self.refine_button = PushButton(text="Refine", tooltip="Re-fit the prototypes (and alignments) from the edits")
        self.keep_moved = CheckBox(text="keep moved items", value=True,
                                   tooltip="Refine keeps the items you moved where you put them")
        self.export_button = PushButton(text="Export gallery…",
                                        tooltip="Write the prototype montage and one gallery PNG per cluster")
        self.history_plot, self.sizes_plot = SmallPlot("loss", "line"), SmallPlot("sizes", "bars")
        plots = _row()
        plots.native.layout().addWidget(self.history_plot)
        plots.native.layout().addWidget(self.sizes_plot)
        self.extend([_row(self.merge_button, self.split_button, self.undo_button, self.refine_button),
                     _row(self.items), _row(self.move_button, self.target, self.outlier_button),
                     _row(self.keep_moved, self.export_button), plots])
        self.native.layout().setContentsMargins(0, 0, 0, 0)
        table = owner.table.native
        table.setSelectionBehavior(table.SelectionBehavior.SelectRows)
        table.setSelectionMode(table.SelectionMode.MultiSelection)
        self.merge_button.changed.connect(self.merge)
        self.split_button.changed.connect(self.split)
        self.undo_button.changed.connect(self.undo)
        self.move_button.changed.connect(self.move)
        self.outlier_button.changed.connect(self.mark_outliers)
        self.refine_button.changed.connect(self.refine)
        self.export_button.changed.connect(self._ask_export)
        self.visible = False

    # ---- what is selected ----------------------------------------------------------------------
    @property
    def result(self) -> ClusteringResult:
        return self.owner.result

    def select_clusters(self, *clusters: int) -> None:
        """Select these rows of the cluster table (what a user does by clicking them)."""
        table = self.owner.table.native
        table.clearSelection()
        for c in clusters:
            table.selectRow(int(c))

    def selected_clusters(self) -> list[int]:
        rows = self.owner.table.native.selectionModel().selectedRows()
        return sorted({index.row() for index in rows})

    def _clusters(self, count: int, action: str) -> list[int]:
        chosen = self.selected_clusters()
        if len(chosen) != count:
            raise InputError(f"{action} needs {count} cluster{'s' if count > 1 else ''} selected in the table "
                             f"({len(chosen)} selected): click the rows.")
        return chosen

    def selected_items(self, what: str = "select") -> list[int]:
        """The typed items (``curation.item_index``'s grammar: "3, 8-12"), else the shapes picked in a landmark
        layer, else the item under the slider (in the sorted view's order when that view is shown)."""
        if self.items.value.strip():
            return curation.item_index(self.items.value, self.result.n, what).tolist()
        layer = self.owner.fitted_layer()
        if isinstance(layer, Points):
            picked = sorted(layer.selected_data)
            if not picked:
                raise InputError("No shape is selected: pick points of the shapes in the landmark layer, or type their numbers.")
            return sorted(set(L.shape_index_of_points(layer)[picked].tolist()))
        frame, layers = int(self.owner.viewer.dims.current_step[0]), self.owner.viewer.layers
        name = L.layer_names(layer.name)["sorted"]
        shown = layers[name] if name in layers else None
        return [int(shown.metadata["order"][frame])] if shown is not None and shown.visible else [frame]

    # ---- edits ---------------------------------------------------------------------------------
    def _edit(self, make, message) -> ClusteringResult | None:
        """Apply an instant edit; a user's mistake becomes one sentence in a notification and the status."""
        try:
            edited = make()
        except InputError as exc:
            return self._refuse(exc)
        return self.apply(edited, message if isinstance(message, str) else message(edited))

    def apply(self, edited: ClusteringResult, message: str) -> ClusteringResult:
        """Show an edited result (the current one goes on the undo stack) and say what changed."""
        self.undo_stack.append(self.result)
        self.owner.show_result(edited, self.owner.fitted_layer(), reframe=False)
        self.owner.status.value = f"{message}: {edited.k} clusters.{self.owner.accuracy_note(edited)}"
        return edited

    def merge(self, _=None):
        return self._edit(lambda: curation.merge(self.result, *self._clusters(2, "Merge")),
                          lambda r: f"Merged cluster {r.edits[-1]['b']} into {r.edits[-1]['a']}")

    def move(self, _=None):
        target = int(self.target.value)
        return self._edit(lambda: curation.move(self.result, self.selected_items("move"), target),
                          lambda r: f"Moved {_items_text(r.edits[-1]['items'])} to cluster {target} (pinned there)")

    def mark_outliers(self, _=None):
        return self._edit(lambda: curation.mark_outliers(self.result, self.selected_items("mark as outliers")),
                          lambda r: f"Marked {_items_text(r.edits[-1]['items'])} as outlier "
                                    f"({int(np.sum(r.pinned == OUTLIER))} outliers in all)")

    def undo(self, _=None) -> ClusteringResult | None:
        """Show the result before the last edit again."""
        if not self.undo_stack:
            return None
        undone = self.result.edits[-1]["op"] if self.result.edits else "edit"
        previous = self.undo_stack.pop()
        self.owner.show_result(previous, self.owner.fitted_layer(), reframe=False)
        self.owner.status.value = (f"Undid the {OPS.get(undone, undone)}: {previous.k} clusters."
                                   f"{self.owner.accuracy_note(previous)}")
        return previous

    def split(self, _=None):
        """Split the selected cluster in the worker (it fits K = 2 by the same method)."""
        try:
            (c,) = self._clusters(1, "Split")
        except InputError as exc:
            return self._refuse(exc)
        result, seed, device = self.result, int(self.owner.seed.value), self.owner.device.value

        def events(data):
            yield Done(curation.split(data, result, c, seed=seed, device=device))

        return self._in_worker(events, f"Split cluster {c} in two (the new half is cluster {result.k})",
                               f"Splitting cluster {c}…")

    def refine(self, _=None):
        """Re-fit from the edits in the worker, with progress; Cancel leaves everything as it was."""
        result, device, keep = self.result, self.owner.device.value, bool(self.keep_moved.value)
        return self._in_worker(lambda data: curation.refine_events(data, result, device, keep), "Refined",
                               "Refining…")

    def _in_worker(self, events, message: str, status: str):
        try:
            data = self.owner.fitted_data()
        except InputError as exc:
            return self._refuse(exc)
        return self.owner.launch(lambda: events(data), lambda edited: self.apply(edited, message), status)

    def _refuse(self, exc: InputError) -> None:
        show_error(str(exc))
        self.owner.status.value = f"Not done: {exc}"

    # ---- pictures ------------------------------------------------------------------------------
    def export(self, folder):
        """Write what ``ticlust export --gallery`` writes: prototypes.png and one cluster_NN.png each."""
        try:
            paths = export_gallery(self.result, self.owner.fitted_data(), folder)
        except InputError as exc:
            return self._refuse(exc)
        show_info(f"Wrote {len(paths)} pictures to {folder}.")
        self.owner.status.value = f"Exported the gallery: {len(paths)} PNG files in {folder}."
        return paths

    def _ask_export(self, _=None) -> None:
        from qtpy.QtWidgets import QFileDialog

        folder = QFileDialog.getExistingDirectory(self.native, "Export the gallery into a folder")
        if folder:
            self.export(folder)

    def show_for(self, result: ClusteringResult) -> None:
        """Show the panel for a result: its K in the target box, its history and sizes in the plots."""
        self.visible = True
        self.target.max = result.k - 1
        self.undo_button.enabled = bool(self.undo_stack)
        self.history_plot.set_values(result.history)
        self.sizes_plot.set_values(result.cluster_sizes(), [L.cluster_color(c) for c in range(result.k)])

    def forget(self) -> None:
        """A new run or a loaded result: nothing to undo."""
        self.undo_stack.clear()
        self.undo_button.enabled = False


def _row(*widgets) -> Container:
    """Widgets side by side, without the margins a nested container adds (the dock must fit 1000 pixels)."""
    row = Container(widgets=list(widgets), layout="horizontal", labels=False)
    row.native.layout().setContentsMargins(0, 0, 0, 0)
    return row


def _items_text(items: list[int]) -> str:
    return f"item {items[0]}" if len(items) == 1 else f"{len(items)} items"
