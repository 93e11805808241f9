"""The one execution seam: every fit, refine, model selection and prediction runs through :func:`execute`.

It owns what every route used to do on its own (or forget): the device is resolved once, deterministic
kernels are on while the work lasts (``device.reproducible``), a CPU run uses one thread per core that other jobs
leave free (``cpus.cpu_threads``), the runs' seeds are handed out and the
lowest final loss kept (:func:`best_of`, the papers' "minLoss"), Progress events get their ETA
(:class:`StagePace`), and the result is stamped (device, versions, total time, every run's loss).

The work itself is a plain function of (device, seed): a method's ``train`` / ``refine`` / ``sweep`` /
``predict`` with everything else bound. It returns a result, or a generator of events that returns (or
ends with ``Done``) one. The seam reports events to a *sink*, a plain callable that receives small,
picklable records (``events.Progress``, ``Snapshot``, ``Done``): nothing in the seam needs the caller to
hold a generator, so a sink may as well forward the records across a process boundary. :func:`stream`
is the same as a generator (what the sink would receive, in order) for the napari worker, whose Cancel
takes effect at the next event.

Per-block work (one pure function applied to chunks) goes through a :class:`Backend` (in
:mod:`ticlust.core.backends`: in-process, or a dask.distributed cluster); this module knows no method (it
imports only ``device``, ``cpus``, ``events`` and ``cluster``), so a method and a remote worker can call into it.
"""
from __future__ import annotations

import inspect
import math
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch

from .cpus import cpu_threads
from .device import describe, reproducible, resolve_device
from ..events import Done, Event, Progress, each_progress

Sink = Callable[[Event], None]


# ---- where per-block work runs -------------------------------------------------------------------
# Backend (map/imap of one pure function over small tasks), the in-process LocalBackend and the
# dask.distributed DaskBackend live in ticlust.core.backends (no torch there, so the store's extraction uses
# them too); backend_for(workers=, scheduler=, client=) picks one.
from .backends import LOCAL, Backend, DaskBackend, LocalBackend, backend_for  # noqa: E402,F401


# ---- what to run ---------------------------------------------------------------------------------
@dataclass
class Job:
    """One call of the seam.

    ``work(device, seed)`` returns a result or a generator of events returning (or ending with
    ``Done``) one. With ``runs`` > 1 it is called with seeds seed, seed+1, …; the lowest final loss is
    kept and the stages are prefixed "``label`` i/n". ``finish(best, every run's result)`` adds the
    route's own stamp (a fit's config, a refine's edit history) and returns what the job returns."""

    work: Callable[[torch.device, int], Any]
    device: str | torch.device | None = "auto"
    seed: int = 0
    runs: int = 1
    label: str = "run"
    finish: Callable[[Any, list], Any] | None = None
    losses: bool = True          # record every run's final loss in ``run_losses`` (not for a prediction)
    #: A last step on the kept result, on the job's device with deterministic kernels (a fit's object map): the
    #: result, or a generator of Progress events that returns it.
    after: Callable[[Any, torch.device], Any] | None = None
    stamp: bool = True           # stamp a result with device, versions and time (not a step on a finished one)


def execute(job: Job, sink: Sink | None = None):
    """Run ``job``, handing every event record to ``sink`` (the last one is ``Done(result)``); returns the result."""
    events = stream(job)
    while True:
        try:
            event = next(events)
        except StopIteration as stop:
            return stop.value
        if sink is not None:
            sink(event)


def stream(job: Job) -> Iterator[Event]:
    """:func:`execute` as a generator: yields what the sink would receive, returns the result."""
    device = resolve_device(job.device)
    seed = int(job.seed)
    start = time.perf_counter()
    candidates = [lambda r=r: job.work(device, seed + r) for r in range(int(job.runs))]
    with reproducible(device), cpu_threads(device):
        best, results = yield from with_eta(kept(job, candidates, device))
    if job.stamp and hasattr(best, "timing"):      # a ClusteringResult: stamped with where, how long and with what
        if job.losses:
            best.run_losses = [r.final_loss for r in results]
        best.timing = {**best.timing, "total_s": time.perf_counter() - start}
        best.device = describe(device)
        best.versions = versions()
    out = job.finish(best, results) if job.finish is not None else best
    yield Done(out)
    return out


def kept(job: Job, candidates, device: torch.device):
    """:func:`best_of` the candidates, then the job's ``after`` step on the kept result, its events (a fit's object
    map reports its blocks) on the same stream, so the ETA and the stage name cover the run to its end."""
    best, results = yield from best_of(candidates, lambda i, n: f"{job.label} {i + 1}/{n}")
    if job.after is not None:
        best = job.after(best, device)
        if inspect.isgenerator(best):
            best = yield from best
    return best, results


def best_of(candidates, label: Callable[[int, int], str]):
    """Run candidates one after another and return the lowest final loss (the first of equals).

    ``candidates`` are zero-argument callables each making a run: a result, or a generator of events that
    returns (or ends with Done) it. Their Progress events are put onto one overall bar (the steps the finished runs
    took, then this run's, out of those plus this run's total for it and each run still to come: a run's total may
    change as it goes, a forecast of its iterations) and their stage prefixed with ``label(i, n)``; Snapshots pass
    through, Done is kept back. Returns (best result, every run's result in order). Model selection's sweep
    (st_kmeans) runs its grid with it.
    """
    n = len(candidates)
    results: list = []
    before = 0                 # the steps the finished runs took
    for i, make in enumerate(candidates):
        events = make()
        result = done = None
        last = 0
        if not inspect.isgenerator(events):
            result = events
        while result is None:
            try:
                event = next(events)
            except StopIteration as stop:
                result = stop.value if stop.value is not None else done
                break
            if isinstance(event, Done):
                done = event.result
            elif isinstance(event, Progress) and n > 1:
                last = event.step
                yield Progress(before + event.step, before + (n - i) * event.total, event.loss,
                               f"{label(i, n)}: {event.stage}", later=event.later)
            else:
                yield event
        results.append(result)
        before += last
    best = results[0]
    for result in results[1:]:
        if result.final_loss < best.final_loss:
            best = result
    return best, results


# ---- progress ------------------------------------------------------------------------------------
def with_eta(events):
    """Pass events through, filling in each Progress' ETA from the current stage's pace (StagePace): its steps left and
    the steps' worth its method says the later stages take (``Progress.later``)."""
    pace = StagePace()

    def fill(event):
        event.eta = pace.eta(event.stage, event.step, event.total - event.step + event.later)
    return (yield from each_progress(events, fill))


class StagePace:
    """Seconds left, from the pace of the current stage only, or None ("estimating…") until that stage
    has shown ETA_MIN_STEPS steps and ETA_MIN_SECONDS seconds, or while the steps left are unknown (inf).

    Setup before the first step (k-means++ seeding, a network build) and earlier, faster or slower
    stages (DTI adds a module, PSSC goes from scattering to PCA) no longer skew the estimate: the
    first ETA of a 2 s K-means said 4 minutes because setup time was divided by one step of 300, and
    DTI's said 2½ minutes from its fast identity stage. Stage names count as the same stage when they
    differ only in numbers ("Lloyd iteration 3" and "Lloyd iteration 4"). The estimate assumes the
    rest runs at this stage's pace: methods whose later stages are slower or stop early (DTI's
    curriculum, a convergence test) can still finish later or sooner, so front ends say so.
    """

    def __init__(self):
        self.key: str | None = None
        self.t0 = 0.0
        self.step0 = 0

    def eta(self, stage: str, step: int, left: float, now: float | None = None) -> float | None:
        now = time.perf_counter() if now is None else now
        key = "".join(ch for ch in stage if not ch.isdigit())
        if key != self.key or step < self.step0:
            self.key, self.t0, self.step0 = key, now, step
            return None
        done, spent = step - self.step0, now - self.t0
        if done < ETA_MIN_STEPS or spent < ETA_MIN_SECONDS or math.isinf(left):   # inf: this pace says nothing of the rest
            return None
        return spent / done * max(left, 0)


ETA_MIN_STEPS = 3
ETA_MIN_SECONDS = 2.0


def versions() -> dict[str, str]:
    """The versions a result is stamped with. scikit-learn's is read from its installed metadata: importing it
    only for this cost every fit and predict process ~140 MiB of memory and ~1 s of CPU (benchmarks/memory.py)."""
    from importlib.metadata import version

    import scipy

    from .. import __version__

    return {"ticlust": __version__, "python": sys.version.split()[0], "numpy": np.__version__,
            "torch": torch.__version__, "scipy": scipy.__version__, "scikit-learn": version("scikit-learn")}
