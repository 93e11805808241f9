"""The parts every step of the dock is drawn with, one of each: a worker started off the GUI thread
(:func:`start_worker`), a button that runs a job and reads Cancel meanwhile (:class:`RunButton`), the layers a job
touched put back on Cancel or failure (:class:`Rollback`), "latest request wins" for background reads
(:class:`Latest`), the progress line (:func:`show_progress`), the warm-up of a fresh process (:func:`warm_up`) and
the dock's close-down (:func:`when_closed`).

A job is a library call that reports to a progress sink (``extract``, ``fit_store``, ``predict_store``: ``progress=``
a callable) or a generator of events (``api.run``, ``curation.refine_events``, :func:`drain` feeds it to the sink):
its events reach the dock in the GUI thread, and Cancel makes the sink raise :class:`Cancelled` at the call's next
event, so the call stops through its own clean-up (locks let go, nothing half-committed).
"""
import gc
import threading
import time
import weakref

import numpy as np
from napari.qt.threading import create_worker
from qtpy.QtCore import QEvent, QObject, Signal

from ..errors import InputError
from ..events import Done, progress_line

CANCEL = "Cancel"
#: The shortest time between two Progress events relayed from a job to the dock (each stage's last one always is).
RELAY_EVERY_S = 0.05
#: At most this often (and at each stage's last step) the progress bar and line follow a job: a new bar value
#: repaints the window, the napari canvas included (tens of ms on a 2-core CPU); a few times a second is enough.
PROGRESS_EVERY_S = 0.25


def show_progress(bar, say, event, last: float) -> float:
    """A Progress ``event`` on the ``bar`` and, through ``say``, its stage, step, loss and ETA, unless it came within
    PROGRESS_EVERY_S of the one shown at ``last`` (perf_counter s) and is not its stage's last step. Returns when it
    was shown (``last`` when it was not)."""
    now = time.perf_counter()
    if now - last < PROGRESS_EVERY_S and event.step < event.total:
        return last
    bar.max = max(event.total, 1)
    bar.value = min(event.step, event.total)
    say(progress_line(event))
    return now


class Cancelled(Exception):
    """Raised by a job's progress sink once Cancel was pressed: the job stops at that event."""


class _Relay(QObject):
    """Carries events from a worker thread to the GUI thread (a queued Qt signal)."""

    event = Signal(object)


def start_worker(job, *, returned=None, finished=None, alive=None):
    """Run ``job()`` in a napari thread worker and return the started worker; ``returned`` gets its value and
    ``finished`` is called once it stopped, in the GUI thread; with ``alive``, neither once ``alive()`` is False
    (the dock was closed: nothing of a late job is drawn into it)."""
    worker = create_worker(job, _start_thread=False)
    for name, slot in (("returned", returned), ("finished", finished)):
        if slot is not None:
            getattr(worker, name).connect(slot if alive is None else _while(alive, slot))
    worker.start()
    return worker


def said(call, *args, what: str, **kwargs):
    """(what ``call`` returns, None), or (None, the sentence) when it stops: a worker's failure said in the dock."""
    try:
        return call(*args, **kwargs), None
    except InputError as exc:
        return None, str(exc)
    except Exception as exc:           # said in the dock, in one sentence
        return None, f"{what} stopped with {type(exc).__name__}: {exc}"


def drain(events, sink):
    """Feed a generator's events to ``sink`` and return its result (its Done's, else its return value); a Cancel
    raised by the sink closes the generator at that event."""
    done = None
    try:
        while True:
            try:
                event = next(events)
            except StopIteration as stop:
                return done if done is not None else stop.value
            sink(event)
            if isinstance(event, Done):
                done = event.result
    finally:
        events.close()


def ask_path(parent, kind: str, title: str, then, start: str = "", filter: str = "", refuse=None):
    """A file dialog (``kind``: "open", "save" or "folder"), then ``then(path)`` with the path picked (nothing when
    none is); an InputError it raises is said through ``refuse``. Returns what ``then`` returned, or None."""
    from qtpy.QtWidgets import QFileDialog

    path = QFileDialog.getExistingDirectory(parent, title) if kind == "folder" else \
        getattr(QFileDialog, f"get{kind.title()}FileName")(parent, title, start, filter)[0]
    try:
        return then(path) if path else None
    except InputError as exc:
        if refuse is None:
            raise
        refuse(str(exc))
        return None


def _while(alive, slot):
    def call(*args):
        if alive():
            slot(*args)
    return call


class Latest:
    """Latest request wins: one background read at a time; a request made while one runs waits (replacing any that
    waited), and an answer that is no longer the latest asked for is dropped. Keys are compared with ``==``."""

    def __init__(self, alive=None, changed=None):
        self.alive, self.changed, self.worker, self.key, self.shown = alive, changed, None, None, None
        self._waiting = None

    @property
    def busy(self) -> bool:
        return self.worker is not None

    def ask(self, key, job, show):
        """Run ``job()`` in a worker and ``show(value)`` in the GUI thread if ``key`` is still the latest asked for.
        Returns the worker, or None when the request waits."""
        self.key = key
        if self.worker is not None:
            self._waiting = (key, job, show)
            return None

        def answered(value):
            if self.key == key:
                self.shown = key
                show(value)
        self.worker = start_worker(job, returned=answered, finished=self._next, alive=self.alive)
        if self.changed is not None:
            self.changed()
        return self.worker

    def _next(self) -> None:
        self.worker, waiting, self._waiting = None, self._waiting, None
        if waiting is not None and waiting[0] == self.key and waiting[0] != self.shown:
            self.ask(*waiting)
        elif self.changed is not None:
            self.changed()

    def forget(self) -> None:
        """Drop every answer on its way and every waiting request (another store, another result)."""
        self.key, self.shown, self._waiting = object(), None, None

    def drop(self) -> None:
        """Stop the read at its next step and forget it (the dock was closed)."""
        self.forget()
        if self.worker is not None:
            self.worker.quit()
            self.worker = None


class RunButton:
    """A push button that starts a job (its own text) and reads Cancel while the job runs; pressing it then stops the
    job at its next event. The dock says what happens through ``say``."""

    def __init__(self, button, start, say, alive=None):
        self.button, self.idle = button, button.text
        self.start, self.say, self.alive = start, say, alive
        self.worker = self._stop = self._relay = None
        button.changed.connect(self._clicked)

    def _clicked(self, _=None) -> None:
        if self.worker is not None:
            self.cancel()
        else:
            self.start()

    def call(self, call, *, failed, event=None, returned=None, finished=None):
        """Run ``call(sink)`` in a worker with Cancel on the button: ``event`` gets the sink's events in the GUI thread
        (Progress at most every RELAY_EVERY_S and each stage's last one, every other event), ``returned`` the call's
        value, ``failed`` its exception; ``finished(cancelled)`` once it stopped and the button reads its text again.
        Returns the worker."""
        stop, relay, last, outcome = threading.Event(), _Relay(), [0.0], ["cancelled", None]
        if event is not None:
            relay.event.connect(event if self.alive is None else _while(self.alive, event))

        def sink(item):
            if stop.is_set():
                raise Cancelled
            step, total = getattr(item, "step", None), getattr(item, "total", None)
            now = time.perf_counter()
            if step is None or step >= total or now - last[0] >= RELAY_EVERY_S:
                last[0] = now
                relay.event.emit(item)

        def job():
            try:
                return "done", call(sink)
            except Cancelled:
                return "cancelled", None
            except Exception as exc:   # handed to ``failed`` in the GUI thread, never a traceback only
                return "failed", exc

        def ended(value):
            outcome[:] = value
            if value[0] == "failed":
                failed(value[1])
            elif value[0] == "done" and returned is not None:
                returned(value[1])

        def done():
            self.worker = self._stop = self._relay = None
            self.button.text = self.idle
            if finished is not None:
                finished(outcome[0] == "cancelled")

        self.button.text = CANCEL
        self._stop, self._relay = stop, relay
        self.worker = start_worker(job, returned=ended, finished=done, alive=self.alive)
        return self.worker

    def cancel(self, quiet: bool = False) -> None:
        """Stop the running job at its next event (``quiet``: without a word, the dock is closing)."""
        if self.worker is not None:
            if not quiet:
                self.say("Cancelling…")
            self._stop.set()
            self.worker.quit()


class Rollback:
    """Layers as they were before a job drew into them, put back on Cancel or failure: their data, whether they were
    shown and whether they were still undrawn; a layer the job made goes."""

    def __init__(self, viewer):
        self.viewer, self.before = viewer, {}

    def remember(self, names) -> None:
        from .layers import drawn

        layers = self.viewer.layers
        for name in names:
            if name not in self.before:
                self.before[name] = None if name not in layers else \
                    (layers[name].data, layers[name].visible, not drawn(self.viewer, name))

    def restore(self) -> None:
        from .layers import hide

        for name, before in self.before.items():
            if name not in self.viewer.layers:
                continue
            if before is None:
                self.viewer.layers.remove(name)
                continue
            layer = self.viewer.layers[name]
            layer.data, layer.visible = before[0], before[1]
            if before[2]:
                hide(layer)
        self.before = {}


# ---- a fresh process, warmed up ---------------------------------------------------------------------------------
def warm_up() -> None:
    """What a fresh process's first steps would otherwise do in the GUI thread, done in a worker when the dock opens:
    the method registry (and torch: seconds) imported for the Fit tab's form, and what torch runs on a session's
    first fit (a tiny K-means, thrown away); the accuracy's scikit-learn metrics; napari's one-time costs of the
    first Image, Labels and Shapes layers and of painting by cluster (numba compiles its colour mapping); vispy's
    dash atlas and the text fonts. Layer models only: nothing is added to a viewer. Last, the garbage the imports
    left is collected, so that :func:`freeze_heap` keeps none of it."""
    from napari.layers import Image, Labels, Shapes
    from napari.utils.colormaps import DirectLabelColormap, label_colormap
    from vispy.visuals.line.dash_atlas import DashAtlas

    from .. import metrics  # noqa: F401  (imported for its import's sake)
    from ..api import fit
    from . import layers as L

    fit(np.random.default_rng(0).random((12, 8, 8)), "kmeans", k=2, device="cpu", progress=False)
    colors = {None: np.zeros(4), 0: np.zeros(4), **{i: L.cluster_color(i) for i in range(1, 600)}}
    for colormap in (DirectLabelColormap(color_dict=colors), label_colormap(50)):
        colormap.map(np.arange(600, dtype=np.int32))
    Image(np.zeros((8, 8), np.float32))
    for labels in (Labels(np.zeros((8, 8), np.int32), colormap=DirectLabelColormap(color_dict=colors)),
                   Labels(np.zeros((8, 8), np.int32), opacity=0.6)):
        labels.refresh()
    DashAtlas()
    box = np.array([[0.0, 0.0], [0.0, 4.0], [4.0, 4.0], [4.0, 0.0]])
    Shapes([box], shape_type="rectangle").add([box[:3]], shape_type="path")
    L.text_raster(L.Scene(8, 8, 2), 2, ["0", "1"], [L.cluster_color(0), L.cluster_color(1)])
    gc.collect()


def freeze_heap(frozen: bool) -> None:
    """Keep the objects alive now out of Python's full garbage collections (``gc.freeze``), or give them back. With
    napari, Qt, torch and the registry imported the interpreter tracks half a million objects, and each full
    collection walks them all under the interpreter's lock: 0.2-1 s of a frozen window on 2 cores. The price: a cycle
    among the frozen objects that dies meanwhile is freed only once the dock gives them back, when it closes."""
    if frozen:
        gc.freeze()
    else:
        gc.unfreeze()


# ---- the dock's close-down --------------------------------------------------------------------------------------
def on_destroyed(widget: QObject, callback, *args, **kwargs) -> weakref.finalize:
    """Call ``callback(*args, **kwargs)`` once, when ``widget`` goes: Qt deletes it (its ``destroyed`` signal) or its
    Python wrapper is collected, whichever comes first. A finalizer holds the callback (a collection that frees the
    widget's cycle may clear a slot's closure before Qt emits ``destroyed`` to it). Neither the callback nor its
    arguments may refer to the widget."""
    finalizer = weakref.finalize(widget, callback, *args, **kwargs)
    widget.destroyed.connect(finalizer)
    return finalizer


class _CloseWatch(QObject):
    """Calls ``closed()`` when the watched widget leaves the dock it was put in (napari's close button)."""

    def __init__(self, closed, parent: QObject):
        super().__init__(parent)
        self.closed, self.docked = closed, False

    def eventFilter(self, watched, event) -> bool:
        if event.type() == QEvent.Type.ParentChange:
            if watched.parent() is not None:
                self.docked = True
            elif self.docked:
                self.closed()
        return False


def when_closed(dock, close) -> weakref.finalize:
    """Call ``close(dock)`` once, when the magicgui widget ``dock`` is closed: napari's close button on its dock, or
    its Qt widget deleted. ``close`` is a function of the dock (``Class.method``): the dock is held weakly."""
    closing = on_destroyed(dock.native, _close_alive, close, weakref.ref(dock))
    closing.atexit = False          # not at the interpreter's exit: the close-down works on Qt widgets, gone by then
    dock.native.installEventFilter(_CloseWatch(closing, parent=dock.native))
    return closing


def _close_alive(close, dock) -> None:
    dock = dock()
    if dock is not None:
        close(dock)
