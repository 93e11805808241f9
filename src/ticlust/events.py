"""The events a training run yields: small records that the CLI, the widget, the tests and the
kernels share, so a low-level loop (k-means++, Lloyd, the alignment engine) can report progress without
knowing about methods.

A run is a generator that yields :class:`Progress` and :class:`Snapshot` and ends with :class:`Done`
(or returns its value); :func:`drain` runs one without a front end.
"""
from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass
class Progress:
    """A step of training: ``step`` of ``total`` done, the current loss, and what stage this is."""

    step: int
    total: int
    loss: float = float("nan")
    stage: str = ""
    eta: float | None = None  # seconds left, filled in by core.execute.with_eta (or plate.store.Reporter)


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


def format_eta(eta: float | None) -> str:
    """How front ends show an ETA: honest about being an estimate at the current stage's pace (here, beside the
    events, so that a front end shows one without importing torch)."""
    return "ETA estimating…" if eta is None else f"ETA ≈{format_seconds(eta)} at this stage's pace"


def format_seconds(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"
