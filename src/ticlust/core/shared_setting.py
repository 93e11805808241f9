"""A process-wide setting that concurrent runs share (a Refine in one thread, the inspector in another): made when
the first run enters, put back when the last one leaves, so one run's end never undoes another's setting."""
from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Any, Callable


class SharedSetting:
    """``with setting.held(make, restore):`` — ``make()`` (returning what was there before) runs when the first run
    enters, ``restore(before)`` when the last one leaves."""

    def __init__(self):
        self._lock = threading.Lock()
        self._inside = 0
        self._before: Any = None

    @contextmanager
    def held(self, make: Callable[[], Any], restore: Callable[[Any], None]):
        with self._lock:
            if self._inside == 0:
                self._before = make()
            self._inside += 1
        try:
            yield
        finally:
            with self._lock:
                self._inside -= 1
                if self._inside == 0:
                    restore(self._before)
