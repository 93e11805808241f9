"""The events a training run yields: small records that the CLI, the widget, the tests and the
kernels share, so a low-level loop (k-means++, Lloyd, the alignment engine) can report progress without
knowing about methods.

A run is a generator that yields :class:`Progress` and :class:`Snapshot` and ends with :class:`Done`
(or returns its value); :func:`drain` runs one without a front end.
"""
from __future__ import annotations

import math
import typing
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass
class Progress:
    """A step of training: ``step`` of ``total`` done, the current loss, and what stage this is. ``later``: what the
    run's stages after this one will cost, in this stage's steps (a method's cost model: a fit's last passes and its
    object map), so that the ETA covers the run to its end and not this stage's steps alone."""

    step: int
    total: int
    loss: float = float("nan")
    stage: str = ""
    eta: float | None = None  # seconds left, filled in by core.execute.with_eta (or plate.store.Reporter)
    later: float = 0.0


@dataclass
class Snapshot:
    """Current prototypes, for a live view (K, *item_shape)."""

    prototypes: np.ndarray


@dataclass
class Done:
    """Training finished; ``result`` is the ClusteringResult."""

    result: Any


Event = typing.Union[Progress, Snapshot, Done]


def drain(events):
    """Run a generator to its end without a front end; returns its return value or its Done result."""
    done = None
    while True:
        try:
            event = next(events)
        except StopIteration as stop:
            return stop.value if stop.value is not None else done
        if isinstance(event, Done):
            done = event.result


def each_progress(events, change):
    """``events`` passed through (generator; returns their return value), ``change(event)`` applied to every
    Progress before it goes on: how a front end's ETA and a kernel's stage names are put on a run's events."""
    while True:
        try:
            event = next(events)
        except StopIteration as stop:
            return stop.value
        if isinstance(event, Progress):
            change(event)
        yield event


class Forecast:
    """How many iterations a loop that stops once no label changes will likely take, at most ``most``: the honest
    total of its Progress, where ``most`` alone would make every ETA assume a run to the cap (Lloyd-type loops usually
    stop long before). Told after each iteration how many labels it changed, it extends the recent geometric decline of
    those changes (their rate over the last two iterations) until under one is left, plus the iteration that finds
    none; while they do not decline it says ``most``. ``settle``: a loop that stops once an iteration changes at most
    that many labels (a tolerance) is forecast to stop there. Never fewer than one more iteration than done: a loop
    that goes on past the forecast (a repair move, a slow tail) raises it as it goes."""

    def __init__(self, most: int, settle: int = 0):
        self.most = max(1, int(most))
        self.settle = max(0, int(settle))
        self.changes: list[int] = []
        self.done = 0

    def total(self, changed: int | None) -> int:
        """Iterations expected in all, after one more iteration that changed ``changed`` labels (None: unknown, the
        first one: every label is new)."""
        self.done += 1
        if changed is not None:
            self.changes.append(max(0, int(changed)))
        c, floor = self.changes, max(self.settle, 1)
        if len(c) < 2 or c[-2] == 0:
            return self.most if not c or c[-1] > self.settle else min(self.most, self.done + 1)
        rate = (c[-1] / c[-3]) ** 0.5 if len(c) >= 3 and c[-3] > 0 else c[-1] / c[-2]
        if c[-1] <= self.settle:
            return min(self.most, self.done + 1)
        if rate >= 1:
            return self.most
        left = math.ceil(math.log(c[-1] / floor) / -math.log(max(rate, 1e-3))) + 1 if c[-1] > floor else 1
        return min(self.most, self.done + max(1, left))


def format_eta(eta: float | None) -> str:
    """How front ends show an ETA: honest about being an estimate at the current stage's pace (here, beside the
    events, so that a front end shows one without importing torch)."""
    return "ETA estimating…" if eta is None else f"ETA ≈{format_seconds(eta)} at this stage's pace"


def progress_line(event: Progress) -> str:
    """How the docks show a Progress: its stage, step of total, the loss where it has one (the object map's and an
    extraction's steps have none) and the ETA."""
    loss = f" · loss {event.loss:.4g}" if math.isfinite(event.loss) else ""
    return f"{event.stage} {event.step}/{event.total}{loss} · {format_eta(event.eta)}"


def format_seconds(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"
