"""The Python entry points: ``fit``, ``run`` (the same as a generator of events), ``predict``, ``align_one``.

Each validates its input, builds a :class:`~ticlust.core.execute.Job` and hands it to the execution seam
(``execute.py``), which resolves the device, turns on deterministic kernels, runs the seeds and stamps
the result."""
from __future__ import annotations

import math
import sys
import time
from typing import Iterator

import numpy as np

from .errors import InputError, whole_number
from .events import Done, Event, Progress, format_eta, format_seconds  # noqa: F401  (front ends' ETA, here since ever)
from .core.execute import ETA_MIN_SECONDS, ETA_MIN_STEPS, Job, StagePace, execute, stream, versions, with_eta  # noqa: F401
from .methods import get_method
from .methods.base import Method, coerce, param_infos
from .methods.invariances import OBJECTS
# ticlust.load_result is taken from here: every method is registered by then, so a saved state reads back typed
from .result import ClusteringResult, load_result  # noqa: F401
from .core.stack import Stack
from .core.validation import (as_landmarks, as_stack, check_batch_size, check_distinct, check_fitted_range, check_k,
                         check_same_items, check_seed)


def prepare(data, method: Method, to_predict: bool = False):
    """Validate input for a method: a landmark array or an image/vector Stack."""
    if method.inputs == ("landmarks",):
        return as_landmarks(data, to_predict=to_predict)
    return as_stack(data, allow_vectors="vectors" in method.inputs, to_predict=to_predict)


def object_params(method: str, params: dict) -> dict:
    """A method's parameters for objects cut out of a segmentation (the CLI's ``--labels``, the napari
    Labels workflow): ``invariances`` left at auto becomes ``OBJECTS`` (similarity: the warps may turn,
    shift and scale an object but not change its shape, which is what tells kinds apart), unless DTI's
    ``transforms`` name the modules. A copy; everything else as given."""
    infos = {info.name: info for info in param_infos(get_method(method).config)}
    out = dict(params)
    if "invariances" not in infos or coerce(infos["invariances"], out.get("invariances", "auto")) != "auto":
        return out
    if "transforms" in infos and coerce(infos["transforms"], out.get("transforms", ("auto",))) not in ((), ("auto",)):
        return out
    out["invariances"] = OBJECTS
    return out


def item_count(items) -> int:
    return items.n if isinstance(items, Stack) else int(items.shape[0])


def run(data, method: str = "kmeans", k: int | None = None, device: str = "auto", seed: int = 0, runs: int = 1,
        aligned: bool | None = None, **params) -> Iterator[Event]:
    """Train ``method`` on ``data``, yielding Progress / Snapshot events and finally Done(result).

    ``k`` defaults to the method's own default. With ``runs`` > 1, trains with seeds seed, seed+1, ...
    and keeps the run with the lowest final loss (the papers' "minLoss"); every run's loss is kept in
    ``result.run_losses``. A generator over :func:`fit_job` (``execute.stream``).
    ``aligned``: keep per-item pictures (``aligned``, ``grids``) for every item;
    None: only while they are small (``stack.PICTURE_BYTES``), else ``align_one`` computes them on demand.
    """
    return (yield from stream(fit_job(data, method, k, device, seed, runs, aligned=aligned, **params)))


def fit_job(data, method: str = "kmeans", k: int | None = None, device: str = "auto", seed: int = 0, runs: int = 1,
            aligned: bool | None = None, **params) -> Job:
    """Training as a :class:`~ticlust.core.execute.Job`: the input validated and the config made now (errors
    are raised here, before anything runs), the fit's config stamped on the result at the end."""
    spec = get_method(method)
    whole_number(runs, "runs", 1)
    seed = check_seed(seed)
    items = prepare(data, spec)
    if isinstance(items, Stack):
        items.pictures = aligned
    k = check_k(spec.default_k if k is None else k, item_count(items))
    if isinstance(items, Stack):
        check_distinct(items, k)
    cfg = spec.make_config(k, **params)

    def finish(best: ClusteringResult, _results) -> ClusteringResult:
        best.config = {"method": spec.name, "seed": int(seed), "runs": int(runs), "device": str(device), **best.config}
        if isinstance(items, Stack):  # new items are later scaled like the training stack
            best.config["input_range"] = [items.lo, items.hi]
        return best

    return Job(lambda dev, s: spec.run(items, cfg, dev, s), device=device, seed=seed, runs=int(runs), label="run",
               finish=finish, after=mapped(spec, items, seed))


def fit(data, method: str = "kmeans", k: int | None = None, device: str = "auto", seed: int = 0, runs: int = 1,
        progress: bool | None = None, aligned: bool | None = None, **params) -> ClusteringResult:
    """Cluster ``data`` and return a :class:`ClusteringResult`.

    ``data``: an N×H×W or N×H×W×3 image stack (NumPy, memory-mapped or dask), N×D vectors where the
    method allows, or (n, L, 2) landmarks for shape methods. ``k`` defaults to the method's default;
    ``params`` are the method's own parameters (``ticlust methods`` lists them). ``progress`` shows a
    terminal bar (default: when standard error is a terminal). ``aligned``: see :func:`run`.
    """
    bar = TerminalProgress() if (progress if progress is not None else sys.stderr.isatty()) else None
    job = fit_job(data, method=method, k=k, device=device, seed=seed, runs=runs, aligned=aligned, **params)
    return execute(job, None if bar is None else bar.sink)


def predict(result: ClusteringResult, data, device: str = "auto", batch_size: int | None = None,
            aligned: bool | None = None) -> ClusteringResult:
    """Assign new items with a fitted result's prototypes (and transforms); ``aligned``: see :func:`run`."""
    check_result(result)
    spec = get_method(result.method)
    if result.state is None:
        raise InputError("This result was edited by hand and not refined yet: run ticlust.refine(data, result) "
                         "before assigning new items.")
    items = fitted_scale(prepare(data, spec, to_predict=True), result)
    if isinstance(items, Stack):
        check_same_items(items, result.prototypes.shape[1:])
        items.pictures = aligned
    if batch_size is not None:
        batch_size = check_batch_size(batch_size)
    return execute(Job(lambda dev, _seed: spec.extend_map(result, spec.predict(result, items, dev, batch_size), items, dev),
                       device=device, losses=False))


def mapped(spec: Method, items, seed: int):
    """The last step of a fit and of a refine (a Job's ``after``): the result, fitted on ``items``, given its object
    map (``Method.with_map``) on the job's device, under the seam's deterministic kernels."""
    return lambda result, device: spec.with_map(result, items, device, seed)


def check_result(result) -> None:
    """Prediction and alignment take a fitted result (``ticlust.fit`` or ``ticlust.load_result``)."""
    if not isinstance(result, ClusteringResult):
        raise InputError(f"The result is a {type(result).__name__}, not a ClusteringResult: pass what ticlust.fit "
                         "returns or ticlust.load_result reads.")


def fitted_scale(items, result: ClusteringResult):
    """Scale new items with the training stack's range, so that predictions match the fit."""
    if isinstance(items, Stack) and "input_range" in result.config:
        lo, hi = result.config["input_range"]
        check_fitted_range(items, lo, hi)
        items = Stack(items.source, lo, hi, items.pictures)
    return items


def align_one(result: ClusteringResult, item, device: str = "auto", index: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Every prototype aligned onto one item, and the item's score to each: ((K, *item), (K,)).

    Methods that align (DTI, ST/AI K-means) compute the alignments on demand; the others return the
    prototypes themselves with the item's scores (so do results edited by hand and not yet refined:
    ``ticlust.curation``). ``index``: the item's place in the fitted stack, if it
    is one of them — its scores are then the result's own (the inspector agrees with the assignment).
    """
    check_result(result)
    spec = get_method(result.method)
    if index is not None and (isinstance(index, bool) or not isinstance(index, (int, np.integer))
                              or not 0 <= index < result.n):
        raise InputError(f"index = {index!r} must be a whole number between 0 and {result.n - 1}, an item of the "
                         f"fitted stack (or None for a new item).")
    lo, hi = result.config.get("input_range", (0.0, 1.0))
    stack = prepare([item], spec, to_predict=True)
    if isinstance(stack, Stack):
        check_fitted_range(stack, lo, hi)
        check_same_items(stack, result.prototypes.shape[1:])
        stack = Stack(stack.source, lo, hi)

    def work(dev, _seed):
        if spec.align is not None and result.state is not None:   # an edited result's warps are stale until refined
            return spec.align(result, stack, dev, index=None if index is None else int(index))
        if index is not None:
            return np.asarray(result.prototypes), np.asarray(result.scores[int(index)])
        return np.asarray(result.prototypes), spec.predict(result, stack, dev).scores[0]

    return execute(Job(work, device=device))    # the fit's deterministic kernels replay its warps


class TerminalProgress:
    """A one-line progress bar on standard error: stage, bar, step/total, loss, ETA."""

    def __init__(self, stream=None, width: int = 28):
        self.stream = stream or sys.stderr
        self.width = width
        self.last = 0.0

    def update(self, event: Progress) -> None:
        now = time.perf_counter()
        if now - self.last < 0.1 and event.step < event.total:
            return
        self.last = now
        frac = min(1.0, event.step / max(event.total, 1))
        filled = int(frac * self.width)
        loss = f"loss {event.loss:.4g} " if math.isfinite(event.loss) else ""     # steps without a loss (extraction)
        line = (f"\r{event.stage[:32]:32s} [{'#' * filled}{'.' * (self.width - filled)}] {event.step}/{event.total} "
                f"{loss}{format_eta(event.eta)}")
        self.stream.write(line.ljust(110))
        self.stream.flush()

    def sink(self, event) -> None:
        """The seam's sink: Progress moves the bar, Done closes it."""
        if isinstance(event, Progress):
            self.update(event)
        elif isinstance(event, Done):
            self.close()

    def close(self) -> None:
        self.stream.write(f"\r{'done':32s} [{'#' * self.width}]".ljust(110) + "\n")
        self.stream.flush()
