"""The ticlust dock: one panel for whatever the user has — image layers (a stack, or a stack's channels), a field with
its labels, landmark points, or a plate's object store — and one loop: data → fit → [predict] → inspect → curate →
export.

What differs between inputs lives in a *source* (:mod:`.sources`, :mod:`.plate`: each a class with the interface of
:class:`.sources.Source`); the steps are drawn by the same *parts*: one job runner with Cancel and layer rollback
(:class:`.parts.RunButton`, :class:`.parts.Rollback`), one undo of edits (here), one inspector
(:class:`.inspector.Inspector`), one curation tab (:class:`.curate.CurateTab`), one warm-up, one progress line, one
"latest request wins" helper (:class:`.parts.Latest`) under every background read, one object map (:mod:`.map_panel`).
A new input (a movie with tracks) is a new source class; a new step (a K scan) a new page.

No ``from __future__ import annotations``: napari finds the viewer parameter by its annotation object.
"""
import time
from pathlib import Path

from magicgui.widgets import ComboBox, Container, Label, ProgressBar, PushButton, SpinBox
from napari.utils.notifications import show_error
from napari.viewer import Viewer

from ..errors import InputError
from ..events import Progress, Snapshot
from .choose_k import ChooseK
from .curate import CurateTab
from .inspector import Inspector
from .map_panel import MapPart
from .parts import Latest, Rollback, RunButton, ask_path, freeze_heap, show_progress, start_worker, warm_up, when_closed
from .plate import PlateSource
from .sources import FieldSource, PointsSource, StackSource, row

DOCK_WIDTH = 380      # the dock's width in pixels: the viewer keeps the rest of a 1600-pixel screen
TAB_HEIGHT = 380      # the tabs' least height: a taller tab scrolls, and the object map below takes the rest
LIVE_UPDATE_S = 0.4   # at most this often the live prototypes are redrawn while a fit runs
PAGES = ("Data", "Fit", "Predict", "Curate", "Export")
RESULTS = "ticlust result (*.npz)"


class TiclustDock(Container):
    """The one ticlust panel: a source picked in ``input``, its steps in tabs, its parts shared."""

    def __init__(self, viewer: Viewer):
        from qtpy.QtWidgets import QFrame, QScrollArea, QTabWidget

        super().__init__(labels=True)
        self.viewer = viewer
        self.result = self.model = None    # the dock's result, and the fitted one it came from (what aligns)
        self.undo_stack: list = []         # (result, model) before each edit
        self.closed, self.form, self.device, self.runners = False, None, None, []
        self._deferred, self._said_at, self._live_at, self._when_ready = 0, 0.0, 0.0, []
        self.rollback = Rollback(viewer)
        self.status = Label(value="")
        self.status.native.setWordWrap(True)
        self.progress = ProgressBar(label="progress", min=0, max=1, value=0)
        self.stack, self.field, self.points, self.plate = (StackSource(self), FieldSource(self), PointsSource(self),
                                                           PlateSource(self))
        self.sources = [self.stack, self.field, self.points, self.plate]
        self.input = ComboBox(label="input", choices=[s.title for s in self.sources],
                              tooltip="What to cluster: image layers (a stack, or several as its channels), a field "
                                      "and its labels, landmark points, or a plate's object store")
        self.seed = SpinBox(label="seed", min=0, max=2**31 - 1, value=0, tooltip="The same seed gives the same result")
        self.runs = SpinBox(label="runs", min=1, max=100, value=1,
                            tooltip="Train this many seeds and keep the lowest final loss")
        self.run = self.button("Run", self.start)
        self.run_button = self.run.button
        self.save_button, self.load_button = PushButton(text="Save result…"), PushButton(text="Load result…")
        self.pages = {title: Container(labels=True) for title in PAGES}
        self.pages["Data"].extend([self.input, *[w for s in self.sources for w in s.widgets]])
        self.waiting = Label(value="Loading the methods…")
        self.gallery_run = self.button("Export gallery…", self._ask_gallery,
                                       tooltip="prototypes.png and one cluster_NN.png per cluster: its closest items")
        self.pages["Fit"].extend([self.waiting, self.seed, self.runs, *[w for s in self.sources for w in s.fit_widgets],
                                  row(self.run_button, self.save_button, self.load_button)])
        self.pages["Export"].append(self.gallery_run.button)
        self.choose_k = ChooseK(self)
        self.pages["Fit"].append(self.choose_k)
        for source in self.sources:
            self.pages["Predict"].extend(source.predict_widgets)
            self.pages["Export"].extend(source.export_widgets)
        self.inspector = Inspector(self)
        self.curate = CurateTab(self)
        self.pages["Curate"].append(self.curate)
        self.tabs = QTabWidget()
        for title, page in [*self.pages.items(), *[p for s in self.sources for p in s.extra_pages]]:
            page.native.layout().addStretch(1)         # the widgets at the top of the tab, not spread over it
            scroll = QScrollArea()                     # a tall tab scrolls: the dock never makes the window taller
            scroll.setWidgetResizable(True)
            scroll.setFrameShape(QFrame.Shape.NoFrame)
            scroll.setWidget(page.native)
            self.tabs.addTab(scroll, title)
        self.tabs.setMinimumHeight(TAB_HEIGHT)
        self.native.layout().addWidget(self.tabs)
        self.extend([self.progress, self.status])
        self.native.setMinimumWidth(DOCK_WIDTH)
        self.object_map = MapPart(self)
        self.save_button.changed.connect(self._ask_save)
        self.load_button.changed.connect(self._ask_load)
        self.input.changed.connect(self._on_input)
        for event in (viewer.layers.events.inserted, viewer.layers.events.removed):
            event.connect(self._layers_changed)
        viewer.dims.events.current_step.connect(self._on_step)
        viewer.scene.camera.events.zoom.connect(lambda _=None: self.source.on_zoom())
        viewer.mouse_drag_callbacks.append(self._on_click)
        self.input.value = self._guess().title
        self._on_input()
        self.importing = start_worker(_import_methods, finished=self._methods_ready, alive=self.alive)
        when_closed(self, TiclustDock.close_down)

    # ---- the source ----------------------------------------------------------------------------
    @property
    def source(self):
        return next(s for s in self.sources if s.title == self.input.value)

    def use(self, source) -> None:
        """Make ``source`` the dock's input (what picking it in ``input`` does)."""
        self.input.value = source.title

    def _guess(self):
        """The source the layers suggest when the dock opens: landmarks, a field with its labels, else a stack."""
        return next((s for s in (self.points, self.field) if s.offered()), self.stack)

    def _on_input(self, _=None) -> None:
        """Another source: its widgets, pages and methods shown; the result of the one before forgotten."""
        source = self.source
        for s in self.sources:
            for widget in (*s.widgets, *s.fit_widgets, *s.predict_widgets, *s.curate_widgets, *s.export_widgets):
                widget.visible = s is source
        for i in range(self.tabs.count()):
            title = self.tabs.tabText(i)
            self.tabs.setTabVisible(i, title in ("Data", *source.pages))
        self.forget_results()
        self._offer_methods()
        self.say(source.hint())

    def _offer_methods(self) -> None:
        if self.form is None:
            return
        from ..methods import available_methods, get_method

        wanted = [m for m in available_methods() if self.source.takes(get_method(m))]
        if list(self.form.method.choices) != wanted:
            self.form.method.choices = wanted
        if self.source.method in wanted:
            self.form.method.value = self.source.method

    def _layers_changed(self, _=None) -> None:
        self.reset_choices()
        if self.result is None and not self.source.offered() and self._guess().offered():
            self.use(self._guess())

    def reset_choices(self, *_) -> None:
        """napari calls this when layers change: every picker of every page is reset."""
        super().reset_choices()
        for page in self.pages.values():
            page.reset_choices()

    def show_tab(self, title: str) -> None:
        self.tabs.setCurrentIndex(next(i for i in range(self.tabs.count()) if self.tabs.tabText(i) == title))

    # ---- the method form, once the registry is imported -------------------------------------------------
    def _methods_ready(self) -> None:
        """The method registry is imported (in a worker: torch takes seconds): the form is built, the rest of the
        warm-up goes on in another worker."""
        from ..core.device import DEVICE_CHOICES
        from .method_form import MethodForm

        self.importing = None
        if self.closed:
            return
        self.form, page = MethodForm(), self.pages["Fit"]
        page.remove(self.waiting)
        self.device = ComboBox(label="device", choices=list(DEVICE_CHOICES), value="auto",
                               tooltip="auto uses a CUDA GPU when there is one, else the CPU")
        for i, widget in enumerate([self.form.method, self.form.k, self.form.params, self.form.show_advanced]):
            page.insert(i, widget)
        page.insert(page.index(self.runs) + 1, self.device)
        page.native.layout().insertWidget(page.index(self.form.show_advanced) + 1, self.form.area)
        self.form.method.changed.connect(lambda _=None: self.source.method_changed())
        self._offer_methods()
        self.source.method_changed()
        self.importing = start_worker(warm_up, finished=self._warm, alive=self.alive)
        self.controls()
        for then in self._when_ready:
            then()
        self._when_ready.clear()

    def _warm(self) -> None:
        self.importing = None
        freeze_heap(True)

    ready = property(lambda self: self.form is not None, doc="Whether the form is built (Run can be pressed).")

    def when_ready(self, then) -> None:
        """``then()`` once the form is built (now, if it is)."""
        if self.ready:
            then()
        else:
            self._when_ready.append(then)

    # ---- jobs: one at a time, Cancel on their button, the layers they drew put back -------------------------
    def button(self, text: str, start, **options) -> RunButton:
        """A push button that starts a job (``start()``) and reads Cancel while it runs."""
        runner = RunButton(PushButton(text=text, **options), start, self.say, alive=self.alive)
        self.runners.append(runner)
        return runner

    def latest(self) -> Latest:
        """A "latest request wins" reader whose reads show the bar as busy and hold the controls they change."""
        return Latest(self.alive, changed=self.reads_changed)

    def reads_changed(self) -> None:
        if self.job is None:
            self.progress.max, self.progress.value = (0, 0) if any(s.busy for s in self.sources) else (1, 0)
        self.controls()

    @property
    def job(self):
        """The running job's worker, or None."""
        return next((r.worker for r in self.runners if r.worker is not None), None)

    def run_job(self, runner, call, *, done, kept: str, layers=(), event=None, busy: bool = False):
        """Run ``call(sink)`` through ``runner``'s button: ``event`` (default :meth:`on_event`) gets its events, ``done``
        its value; on Cancel or failure the ``layers`` it drew into are put back and ``kept`` is said. ``busy``: the
        bar as a busy indicator until the job counts steps. Returns the worker (None while another job runs)."""
        if self.job is not None:
            self.say("A job is running: let it finish (or Cancel it) first.")
            return None
        self.rollback.before = {}
        self.rollback.remember(layers)
        self.progress.max, self.progress.value = (0, 0) if busy else (1, 0)
        worker = runner.call(call, event=event or self.on_event, returned=done, failed=self.failed,
                             finished=lambda cancelled: self._job_finished(cancelled, kept))
        self.controls()
        return worker

    def on_event(self, event) -> None:
        """A job's event: Progress on the bar and line, Snapshots as live prototypes, the rest to the source."""
        if isinstance(event, Progress):
            self._said_at = show_progress(self.progress, self.say, event, self._said_at)
        elif isinstance(event, Snapshot):
            now = time.perf_counter()
            if now - self._live_at >= LIVE_UPDATE_S and event.prototypes.ndim >= 3:
                self._live_at = now
                self.source.live(event.prototypes)
        else:
            self.source.fit_event(event)

    def failed(self, exc: Exception) -> None:
        """A job stopped on an error: one sentence in the status line, the layers it touched put back."""
        message = self.source.gone() or (str(exc) if isinstance(exc, InputError) else
                                         f"ticlust stopped with {type(exc).__name__}: {exc}")
        self.rollback.restore()
        self.refuse(message, "Stopped: ")

    def refuse(self, message: str, prefix: str = "") -> None:
        """One sentence of what went wrong: a napari notification, and the status line."""
        show_error(message)
        self.say(prefix + message)

    def _job_finished(self, cancelled: bool, kept: str) -> None:
        self.progress.max, self.progress.value = 1, (1 if not cancelled and self.progress.max else 0)
        if cancelled:
            self.rollback.restore()
            self.say(f"Cancelled: {kept}.")
        self.rollback.before = {}
        self.controls()

    def controls(self) -> None:
        """Enable what can be used now: nothing but the running job's Cancel while a job runs."""
        held = self.job is not None
        for runner in self.runners:
            runner.button.enabled = runner.worker is not None or (not held and self.source.can(runner))
        self.run_button.enabled = self.run.worker is not None or (not held and self.ready)
        form = (self.form.method, self.form.k, self.form.params, self.form.advanced) if self.form else ()
        for widget in (self.input, self.seed, self.runs, self.load_button, self.device, *form):
            if widget is not None:
                widget.enabled = not held
        self.save_button.enabled = not held and self.result is not None
        self.curate.enable(not held)
        for source in self.sources:
            source.enable(not held)

    # ---- Run ------------------------------------------------------------------------------------
    def start(self):
        """Run: the source's fit as a job. Returns the worker (None: nothing to fit, said why)."""
        if self.form is None:
            self.say("The methods are still loading: press Run in a moment.")
            return None
        args = dict(method=self.form.method.value, k=self.form.k.value, params=self.form.values(),
                    seed=self.seed.value, runs=self.runs.value, device=self.device_value())
        try:
            call = self.source.fit(args)
        except InputError as exc:
            self.refuse(str(exc))
            return None
        self.say("Starting…")
        return self.run_job(self.run, call, done=self._fitted, layers=self.source.job_layers(),
                            kept="nothing was changed", busy=True)

    def _fitted(self, result) -> None:
        self.take_result(result, fitted=True)
        self.say(self.source.done_text(result))

    def device_value(self) -> str:
        return "auto" if self.device is None else self.device.value

    # ---- the dock's result: fitted, loaded, edited, undone --------------------------------------------
    def forget_results(self) -> None:
        """Another source or store: nothing fitted, edited or loaded applies to it."""
        self.result = self.model = None
        self.undo_stack.clear()
        self.inspector.forget()
        self.curate.show_for(None)
        self.controls()

    def take_result(self, result, fitted: bool) -> None:
        """A fitted or loaded result becomes the dock's: nothing to undo, shown and framed."""
        self.result = result
        if fitted or result.state is not None:
            self.model = result
        self.undo_stack.clear()
        self._show(fresh=True)

    def apply_edit(self, edited, message: str, fitted: bool = False) -> None:
        """Show an edited result (the one before goes on the undo stack) and say what changed."""
        self.undo_stack.append((self.result, self.model))
        self.result = edited
        if fitted or edited.state is not None:
            self.model = edited
        self._show(fresh=False)
        self.say(f"{message}: {edited.k} clusters.{self.source.note(edited)}")

    def undo(self, _=None):
        """Show the result before the last edit again (Refine included); returns it (None: nothing to undo)."""
        if not self.undo_stack:
            return None
        undone = self.result.edits[-1]["op"] if self.result.edits else "edit"
        self.result, self.model = self.undo_stack.pop()
        self._show(fresh=False)
        self.say(f"Undid the {undone}: {self.result.k} clusters.{self.source.note(self.result)}")
        return self.result

    def _show(self, fresh: bool) -> None:
        self.source.show(self.result, fresh)
        self.curate.show_for(self.result)
        self.object_map.result_changed()
        self.controls()

    def save_result(self, path) -> Path:
        """Save the dock's result (.npz, and what its source writes beside it: the items' table as CSV)."""
        if self.result is None:
            raise InputError("There is no result to save yet: press Run first.")
        out = self.source.save(self.result, path)
        self.say(f"Saved {out.name}.")
        return out

    def load_result(self, path, layer=None):
        return self.source.load(Path(path), layer)      # shown on its items, or kept for Predict

    # ---- the viewer's events: the slider, a click ---------------------------------------------------
    def _on_step(self, _=None) -> None:
        if self.result is not None:
            self.source.on_step()

    def _on_click(self, _viewer, event):
        """A click (not a drag) picks the object under it (shift adds it); a drag pans the view."""
        from .layers import click_without_drag

        start, add = event.position, "Shift" in getattr(event, "modifiers", ())
        if (yield from click_without_drag(event)):
            self.source.click_at(start, add)

    # ---- small things ------------------------------------------------------------------------------
    def say(self, text: str) -> None:
        self.status.value = text

    def later(self, draw) -> None:
        """``draw()`` in the event loop's next turn (a 1 ms timer: Qt runs 0 ms timers back to back, no repaint
        between); the dock is busy until it has run, and a closed dock runs nothing."""
        from qtpy.QtCore import QTimer

        def run():
            self._deferred -= 1
            if self.alive():
                draw()
        self._deferred += 1
        QTimer.singleShot(1, run)

    @property
    def busy(self) -> bool:
        """Whether a job, a read, the warm-up or a drawing of the dock or its map is still to finish."""
        return (self.job is not None or self.importing is not None or self._deferred > 0 or self.inspector.busy
                or any(s.busy for s in self.sources) or self.object_map.busy)

    def alive(self) -> bool:
        return not self.closed

    def close_down(self) -> None:
        """The dock was closed: every worker stops at its next step, nothing more is drawn."""
        if self.closed:
            return
        self.closed = True
        freeze_heap(False)
        for runner in self.runners:
            runner.cancel(quiet=True)
        self.inspector.drop()
        for source in self.sources:
            source.close()
        self.object_map.close()
        if self._on_click in self.viewer.mouse_drag_callbacks:
            self.viewer.mouse_drag_callbacks.remove(self._on_click)

    def export_gallery(self, folder):
        """Write what ``ticlust export --gallery`` writes into ``folder``, in a worker. Returns the worker."""
        if self.result is None:
            self.say("There is no result to export yet: press Run first.")
            return None
        try:
            call, note = self.source.gallery(folder)
        except InputError as exc:
            self.say(str(exc))
            return None
        return self.run_job(self.gallery_run, call, busy=True, kept="nothing was written",
                            done=lambda paths: self.say(f"Exported the gallery: {len(paths)} PNG files in {folder}{note}."))

    def _ask_gallery(self):
        return ask_path(self.native, "folder", "Export the gallery into a folder", self.export_gallery)

    def _ask_save(self, _=None) -> None:       # the output guard's sentence in a notification, nothing written
        ask_path(self.native, "save", "Save ticlust result", self.save_result, "result.npz", RESULTS, self.refuse)

    def _ask_load(self, _=None) -> None:
        ask_path(self.native, "open", "Load ticlust result", self.load_result, "", RESULTS, self.refuse)


def _import_methods() -> None:
    """The method registry (and torch), imported off the GUI thread."""
    from .. import methods  # noqa: F401
