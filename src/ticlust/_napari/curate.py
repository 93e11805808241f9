"""The curation tab, one for every source: fix a clustering by hand and re-fit from the fix.

The items an edit acts on are typed ("3, 8-12": the selector grammar of ``curation.item_index``) or picked (the item
under the slider, the shapes selected in a landmark layer, the objects clicked on a plate's field); clusters are chosen
in the A and B boxes (or by selecting rows of the cluster table). Merge, Move, Mark outlier are instant; Split and
Refine run as the dock's jobs (Cancel changes nothing). The source does the science (``ticlust.curation`` for items in
memory, ``ticlust.plate.curate`` for a store's objects); the dock keeps the undo stack.
"""
import numpy as np
from magicgui.widgets import CheckBox, Container, LineEdit, PushButton, SpinBox, Table

from ..errors import InputError
from . import layers as L
from .plots import SmallPlot
from .sources import row


class CurateTab(Container):
    """Move / Mark outlier / Merge / Split / Undo / Refine, the cluster table and two small plots."""

    def __init__(self, dock):
        super().__init__(labels=True)
        self.dock = dock
        self.items = LineEdit(label="items", tooltip="Items to move or mark, e.g. 3, 8-12; empty: the ones picked (the "
                                                     "item under the slider, the points selected, the objects clicked; "
                                                     "shift-click adds)")
        self.items.native.setPlaceholderText("3, 8-12 (empty: the picked ones)")
        self.to = SpinBox(label="to", min=0, max=0, tooltip="The cluster Move puts the items in")
        self.move_button = PushButton(text="Move", tooltip="Put the items in the cluster and pin them there")
        self.outlier_button = PushButton(text="Mark outlier", tooltip="Flag the items as outliers (grey; Refine fits "
                                                                      "without them)")
        self.a = SpinBox(label="A", min=0, max=0, tooltip="Merge: the cluster that stays; Split: the one split")
        self.b = SpinBox(label="B", min=0, max=0, tooltip="Merge: the cluster that joins A")
        self.merge_button = PushButton(text="Merge B into A")
        for box in (self.to, self.a, self.b):
            box.native.setMinimumWidth(48)
            box.native.setMaximumWidth(70)
        self.split_run = dock.button("Split A", self.split, tooltip="Re-cluster A's members in two")
        self.undo_button = PushButton(text="Undo", enabled=False, tooltip="Go back one edit (Refine included)")
        self.keep_moved = CheckBox(text="keep moved items", value=True,
                                   tooltip="Refine keeps the items you moved where you put them")
        self.refine_run = dock.button("Refine", self.refine, tooltip="Re-fit the prototypes from the edits, warm "
                                                                     "started")
        self.table = Table(value={"cluster": [], "size": [], "mean score": [], "closest items": []})
        self.table.native.setMinimumHeight(90)
        self.table.native.setMaximumHeight(260)
        table = self.table.native
        table.setSizeAdjustPolicy(table.SizeAdjustPolicy.AdjustIgnored)     # the dock keeps its width
        table.horizontalHeader().setStretchLastSection(True)
        table.setSelectionBehavior(table.SelectionBehavior.SelectRows)
        table.setSelectionMode(table.SelectionMode.MultiSelection)
        self.history_plot, self.sizes_plot = SmallPlot("loss", "line"), SmallPlot("sizes", "bars")
        plots = row()
        plots.native.layout().addWidget(self.history_plot)
        plots.native.layout().addWidget(self.sizes_plot)
        self.extend([dock.inspector.enabled, self.items, row(self.to, self.move_button, labels=True), self.outlier_button,
                     row(self.a, self.b, labels=True), row(self.merge_button, self.split_run.button, self.undo_button),
                     row(self.keep_moved, self.refine_run.button), *[w for s in dock.sources for w in s.curate_widgets], self.table, plots])
        self.move_button.changed.connect(self.move)
        self.outlier_button.changed.connect(self.mark_outliers)
        self.merge_button.changed.connect(self.merge)
        self.undo_button.changed.connect(dock.undo)
        table.itemSelectionChanged.connect(self._rows_picked)
        table.cellDoubleClicked.connect(self._jump_to_cluster)

    # ---- what is chosen ----------------------------------------------------------------------
    def select_clusters(self, *clusters: int) -> None:
        """Select these rows of the cluster table (what clicking them does): A and B follow."""
        table = self.table.native
        table.clearSelection()
        for c in clusters:
            table.selectRow(int(c))

    def _rows_picked(self) -> None:
        rows = [i.row() for i in self.table.native.selectionModel().selectedRows()]
        if rows:
            self.a.value = rows[0]
        if len(rows) > 1:
            self.b.value = rows[1]

    def picked(self, what: str) -> list[int]:
        """The items typed, else the ones picked in the viewer (kept for the sentence that says what was done)."""
        source = self.dock.source
        self.taken = source.typed(self.items.value, what) if self.items.value.strip() else source.picked(what)
        return self.taken

    def ready(self):
        """The dock's result, if it can be curated here; else None, said why."""
        result = self.dock.result
        if result is None:
            self.dock.say("Fit a result first (the Fit tab), or load one.")
            return None
        try:
            self.dock.source.check(result)
        except InputError as exc:
            self.dock.say(f"Not done: {exc}")
            return None
        return result

    # ---- edits ---------------------------------------------------------------------------------
    def _edit(self, make, message):
        """An instant edit; a user's mistake is one sentence in the status line."""
        result = self.ready()
        if result is None:
            return None
        try:
            edited = make(result)
        except InputError as exc:
            self.dock.say(f"Not done: {exc}")
            return None
        self.dock.apply_edit(edited, message(edited))
        return edited

    def move(self, _=None):
        to, source = int(self.to.value), self.dock.source
        return self._edit(lambda r: source.edit("move", r, self.picked("move"), to),
                          lambda r: f"Moved {_count(self.taken, source.word)} to cluster {to} (pinned there)")

    def mark_outliers(self, _=None):
        source = self.dock.source
        return self._edit(lambda r: source.edit("mark_outliers", r, self.picked("mark as outliers")),
                          lambda r: f"Marked {_count(self.taken, source.word)} as outlier")

    def merge(self, _=None):
        a, b = int(self.a.value), int(self.b.value)
        return self._edit(lambda r: self.dock.source.edit("merge", r, a, b), lambda r: f"Merged cluster {b} into {a}")

    def split(self):
        """Split cluster A in two, in a worker (the method fits K = 2 on its members)."""
        result = self.ready()
        if result is None:
            return None
        a, seed, dock = int(self.a.value), int(result.config.get("seed", 0)), self.dock
        try:
            call = dock.source.split(result, a, seed, dock.device_value())
        except InputError as exc:
            dock.say(f"Not done: {exc}")
            return None
        dock.say(f"Splitting cluster {a}…")
        return dock.run_job(self.split_run, call, kept="the result and the layers are as they were", busy=True,
                            done=lambda r: dock.apply_edit(r, f"Split cluster {a} in two (the new half is cluster "
                                                              f"{result.k})"))

    def refine(self):
        """Re-fit from the edits in a worker, with progress; Cancel leaves everything as it was."""
        result = self.ready()
        if result is None:
            return None
        dock = self.dock
        try:
            call = dock.source.refine(result, dock.device_value(), bool(self.keep_moved.value))
        except InputError as exc:
            dock.say(f"Not done: {exc}")
            return None
        dock.say("Refining…")
        return dock.run_job(self.refine_run, call, layers=dock.source.job_layers(), busy=True,
                            kept="the result and the layers are as they were",
                            done=lambda r: dock.apply_edit(r, f"Refined (final loss {r.final_loss:.4g})", fitted=True))

    # ---- shown ---------------------------------------------------------------------------------
    def show_for(self, result) -> None:
        """The boxes span the result's K; its clusters in the table, its history and sizes in the plots."""
        for box in (self.to, self.a, self.b):
            box.max = max(result.k - 1, 0) if result is not None else 0
        self.undo_button.enabled = bool(self.dock.undo_stack)
        if result is None:
            return
        rows = L.cluster_summary(result)
        self.table.value = {key: [r[key] for r in rows] for key in rows[0]}
        self.history_plot.set_values(result.history)
        self.sizes_plot.set_values(result.cluster_sizes(), [L.cluster_color(c) for c in range(result.k)])

    def enable(self, on: bool) -> None:
        for widget in (self.items, self.to, self.move_button, self.outlier_button, self.a, self.b, self.merge_button,
                       self.keep_moved):
            widget.enabled = on
        self.undo_button.enabled = on and bool(self.dock.undo_stack)

    def _jump_to_cluster(self, row_: int, _column: int = 0) -> None:
        """Double-click a cluster row: its closest member under the slider."""
        result, source = self.dock.result, self.dock.source
        if result is None or not hasattr(source, "show_item"):
            return
        own = result.scores[np.arange(result.n), result.labels]
        members = np.flatnonzero(result.labels == row_)
        if members.size:
            source.show_item(int(members[np.argmin(own[members])]))


def _count(items, word: str) -> str:
    return f"{word} {items[0]}" if len(items) == 1 else f"{len(items)} {word}s"
