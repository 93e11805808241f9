"""Thread workers for the docks: one way to start a job off the GUI thread, and the Run/Cancel button.

A dock starts every job it runs in a napari thread worker through :func:`start_worker`, whose slots run in the
GUI thread; a job that a button starts and may cancel (the ticlust widget's Run, the plate panel's Apply result)
goes through a :class:`RunButton`, which swaps the button's text to Cancel while the job runs and quits the
worker (at its next ``yield``) when the button is pressed again. A library call that reports to a progress sink
(``extract``, ``fit_store``, ``predict_store``: ``progress=`` a callable) runs through :meth:`RunButton.call`: its
events reach the dock in the GUI thread, and Cancel makes the sink raise :class:`Cancelled` at the call's next
event, so the call stops through its own clean-up (locks let go, nothing half-committed) before the button reads
its idle text again.

A dock's close-down (its workers stopped, its object map taken away) runs once when its widget goes:
:func:`when_closed` (napari's close button, or the widget deleted) and :func:`on_destroyed` (the widget deleted).
"""
import threading
import time
import weakref

from napari.qt.threading import create_worker
from qtpy.QtCore import QEvent, QObject, Signal

from ..errors import InputError
from ..events import progress_line

CANCEL = "Cancel"
#: The shortest time between two Progress events relayed from a library call to the dock (the last one always is).
RELAY_EVERY_S = 0.05
#: At most this often (and at each stage's last step) a dock's progress bar and status line follow a run: a new bar
#: value repaints the whole window at once, the napari canvas included (tens of ms on a 2-core CPU), and a new status
#: line re-lays the dock out; a few times a second is enough.
PROGRESS_EVERY_S = 0.25


def show_progress(bar, say, event, last: float) -> float:
    """A run's Progress ``event`` on a dock: the ``bar`` and, through ``say``, its stage, step, loss and ETA
    (``events.progress_line``), unless it came within PROGRESS_EVERY_S of the one shown at ``last`` (perf_counter
    seconds) and is not its stage's last step. Returns when it was shown (``last`` when it was not)."""
    now = time.perf_counter()
    if now - last < PROGRESS_EVERY_S and event.step < event.total:
        return last
    bar.max = max(event.total, 1)
    bar.value = min(event.step, event.total)
    say(progress_line(event))
    return now


class Cancelled(Exception):
    """Raised by a progress sink inside a library call once Cancel was pressed: the call stops at that event."""


class _Relay(QObject):
    """Carries events from a worker thread to the GUI thread (a queued Qt signal)."""

    event = Signal(object)


def start_worker(job, *, yielded=None, returned=None, finished=None, alive=None):
    """Run ``job()`` (a function, or a generator whose yields reach ``yielded``) in a napari thread worker and
    return the started worker. ``returned`` gets its return value, ``finished`` is called when it has stopped
    (returned, failed or cancelled), all in the GUI thread; with ``alive`` given, no slot is called once
    ``alive()`` is False (the dock was closed: nothing of a late job is drawn into it)."""
    worker = create_worker(job, _start_thread=False)
    for name, slot in (("yielded", yielded), ("returned", returned), ("finished", finished)):
        if slot is not None:        # a function's worker has no yielded signal
            getattr(worker, name).connect(slot if alive is None else _while(alive, slot))
    worker.start()
    return worker


def said(call, *args, what: str, **kwargs):
    """(what ``call`` returns, None), or (None, the sentence) when it stops: a worker's failure said in the panel
    (``what``: the step, as the sentence names it)."""
    try:
        return call(*args, **kwargs), None
    except InputError as exc:
        return None, str(exc)
    except Exception as exc:           # said in the panel, in one sentence
        return None, f"{what} stopped with {type(exc).__name__}: {exc}"


def _while(alive, slot):
    def call(*args):
        if alive():
            slot(*args)
    return call


class RunButton:
    """A push button that starts a job (its own text, ``idle``) and reads Cancel while the job's worker runs;
    pressing it then stops the job at its next step. The dock says what happens through ``say``."""

    def __init__(self, button, start, say, alive=None):
        self.button, self.idle = button, button.text
        self.start, self.say, self.alive = start, say, alive
        self.worker = None
        self._stop = self._relay = None     # a library call's Cancel flag and event relay (:meth:`call`)
        button.changed.connect(self._clicked)

    @property
    def running(self) -> bool:
        return self.worker is not None

    def _clicked(self, _=None) -> None:
        if self.running:
            self.cancel()
        else:
            self.start()

    def run(self, events, *, failed, yielded=None, returned=None, finished=None):
        """Run the generator ``events()`` in a worker with Cancel on the button (a Cancel takes effect at its next
        ``yield``): ``yielded`` gets each event, ``returned`` its return value (None after a failure), ``failed``
        the exception it raised, ``finished(cancelled)`` is called once it has stopped and the button reads
        ``idle`` again; all in the GUI thread. ``failed`` is required: every job can fail, and its exception must
        reach the dock. Returns the worker."""
        def job():
            try:
                return (yield from events())
            except Exception as exc:   # handed to ``failed`` in the GUI thread, never a traceback only
                yield exc
                return None

        def event(item):
            if isinstance(item, Exception):
                failed(item)
            elif yielded is not None:
                yielded(item)

        def done():
            cancelled = self.worker is not None and self.worker.abort_requested
            self.worker = None
            self.button.text = self.idle
            if finished is not None:
                finished(cancelled)

        self.button.text = CANCEL
        self.worker = start_worker(job, yielded=event, returned=returned, finished=done, alive=self.alive)
        return self.worker

    def call(self, call, *, failed, event=None, returned=None, finished=None):
        """Run ``call(sink)`` — a library call that reports to the progress sink it is given — in a worker with
        Cancel on the button: ``event`` gets the sink's events in the GUI thread (Progress at most every
        RELAY_EVERY_S, each step's last one and every other event always), ``returned`` the call's return value,
        ``failed`` the exception it raised, ``finished(cancelled)`` is called once the call has stopped (after a
        Cancel: once it has let go of what it held) and the button reads ``idle`` again. Returns the worker."""
        stop, relay, last = threading.Event(), _Relay(), [0.0]
        if event is not None:
            relay.event.connect(event if self.alive is None else _while(self.alive, event))

        def sink(item):
            if stop.is_set():
                raise Cancelled
            now = time.perf_counter()
            step, total = getattr(item, "step", None), getattr(item, "total", None)
            if step is not None and step < total and now - last[0] < RELAY_EVERY_S:
                return
            last[0] = now
            relay.event.emit(item)

        def job():
            try:
                return "done", call(sink)
            except Cancelled:
                return "cancelled", None
            except Exception as exc:   # handed to ``failed`` in the GUI thread, never a traceback only
                return "failed", exc

        outcome = ["cancelled", None]

        def ended(value):
            outcome[:] = value
            if value[0] == "failed":
                failed(value[1])
            elif value[0] == "done" and returned is not None:
                returned(value[1])

        def done():
            self.worker, self._stop, self._relay = None, None, None
            self.button.text = self.idle
            if finished is not None:
                finished(outcome[0] == "cancelled")

        self.button.text = CANCEL
        self._stop, self._relay = stop, relay
        self.worker = start_worker(job, returned=ended, finished=done, alive=self.alive)
        return self.worker

    def cancel(self) -> None:
        """Stop the running job at its next step (nothing when none runs)."""
        if self.worker is not None:
            self.say("Cancelling…")
            if self._stop is not None:
                self._stop.set()
            self.worker.quit()

    def drop(self) -> None:
        """Stop the running job at its next step and forget it, without a word: the dock was closed."""
        if self.worker is not None:
            if self._stop is not None:
                self._stop.set()
            self.worker.quit()
            self.worker = None


# ---- a dock's close-down --------------------------------------------------------------------------------------
def on_destroyed(widget: QObject, callback, *args, **kwargs) -> weakref.finalize:
    """Call ``callback(*args, **kwargs)`` once, when ``widget`` goes: Qt deletes it (its ``destroyed`` signal) or its
    Python wrapper is collected, whichever comes first; the finalizer returned calls it at once when called. A
    finalizer holds the callback, not a slot on ``destroyed``: a garbage collection that frees the widget's reference
    cycle may clear a slot's lambda (its closure, its default arguments) before Qt emits ``destroyed`` to it, and
    the finalizers' registry is outside every cycle. Neither the callback nor its arguments may refer to the widget
    (it would never be collected)."""
    finalizer = weakref.finalize(widget, callback, *args, **kwargs)
    widget.destroyed.connect(finalizer)
    return finalizer


class _CloseWatch(QObject):
    """Calls ``closed()`` when the watched widget leaves the dock it was put in: napari's close button on a dock
    takes the widget out and deletes the dock."""

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
    its Qt widget deleted (the viewer's window closed). ``close`` is a function of the dock (``Class.method``): the
    dock itself is held weakly, so that the watch keeps nothing alive. A dock collected together with its widget is
    not closed down: nothing of it runs then (a running worker or a viewer's callback would hold it)."""
    closing = on_destroyed(dock.native, _close_alive, close, weakref.ref(dock))
    closing.atexit = False          # not at the interpreter's exit: the close-down works on Qt widgets, gone by then
    dock.native.installEventFilter(_CloseWatch(closing, parent=dock.native))    # Qt keeps it while the widget is
    return closing


def _close_alive(close, dock) -> None:
    dock = dock()
    if dock is not None:
        close(dock)
