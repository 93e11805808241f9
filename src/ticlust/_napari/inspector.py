"""The inspector, one for every source: every prototype aligned onto the item looked at, its score above it, its
cluster framed in yellow, the runner-up in blue, the rest in grey (DTI Fig. 2b), and the item's warp grid.

The source says how an item is aligned (``Source.inspection``: a job for a worker, the fit's own warps where it kept
them; which cluster is chosen comes from the result's assignments, or from the store's predictions) and where it is
drawn (``Source.anchor``: the stack itself, or a plate object's crop beside its field). Requests go through one
:class:`~ticlust._napari.parts.Latest`: while one item is aligned, only the latest asked for waits. The drawing is
spread over turns of the event loop (pictures, then scores, then frames, then the grid), so the window reacts
between them.
"""
from magicgui.widgets import CheckBox

from . import layers as L
from .parts import Latest


class Inspector:
    """Aligns and draws the item looked at, for the dock's current source."""

    def __init__(self, dock):
        self.dock = dock
        self.latest = Latest(dock.alive)
        self.shown = None                # the item the inspector layers show
        self.line = ""                   # what the status line said of it
        self.enabled = CheckBox(value=True, text="Inspector",
                                tooltip="Show every prototype aligned onto the item looked at, with its score")
        self._drawn = (None, None)       # (result, inspector layer) last drawn: a layer the user deleted stays gone

    @property
    def busy(self) -> bool:
        return self.latest.busy

    def wanted(self) -> bool:
        return bool(self.enabled.value) and self.dock.model is not None

    def request(self, item: int):
        """Align every prototype onto ``item`` in a worker and draw it. Returns the worker (None: it waits, or the
        source has nothing to show)."""
        source, model = self.dock.source, self.dock.model
        try:
            job = source.inspection(item)
        except Exception as exc:         # said, as every step says what stopped it
            self.dock.say(f"Not inspected: {exc}")
            return None
        drawn_for, name = self._drawn
        if job is None or (drawn_for is self.dock.result and name not in self.dock.viewer.layers):
            return None
        return self.latest.ask((id(source), id(model), int(item)), job, lambda seen: self._show(source, model, seen))

    def forget(self) -> None:
        self.latest.forget()
        self.shown, self._drawn = None, (None, None)

    def drop(self) -> None:
        self.latest.drop()

    def _show(self, source, model, seen) -> None:
        dock = self.dock
        if isinstance(seen, str):                 # the source's sentence: why it cannot be inspected
            dock.say(seen)
            return
        if source is not dock.source or model is not dock.model:
            return
        anchor = source.anchor(seen)
        if anchor is None:
            return
        self.shown, self.line = seen.item, seen.line
        self._drawn = (dock.result, L.layer_names(anchor.name)["inspector"])
        if seen.line:
            dock.say(seen.line)

        def current() -> bool:
            return source is dock.source and self.shown == seen.item and anchor.name in dock.viewer.layers

        def later(step) -> None:
            dock.later(lambda: current() and step())

        L.show_inspector(dock.viewer, anchor, seen.aligned, seen.scores, seen.chosen, seen.runner, seen.item,
                         later=later)
        if seen.grid is not None:
            later(lambda: later(lambda: later(lambda: self._grid(anchor, seen))))
        later(lambda: later(lambda: later(lambda: later(source.inspected))))

    def _grid(self, anchor, seen) -> None:
        L.draw_grid(self.dock.viewer, anchor, seen.grid, seen.chosen)
        L.rescale_lines(self.dock.viewer, anchor.name)
