"""The Python entry points: ``run`` (a generator of events), ``fit`` (drains it) and ``predict``."""
from __future__ import annotations

import sys
import time
from typing import Iterator

import numpy as np

from .device import describe, reproducible, resolve_device
from .errors import InputError
from .events import Done, Event, Progress, drain
from .methods import get_method
from .methods.base import Method, best_of, coerce, param_infos
from .methods.invariances import OBJECTS
from .result import ClusteringResult
from .stack import Stack
from .validation import as_landmarks, as_stack, check_batch_size, check_k, check_same_items, check_seed


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
    ``result.run_losses``. ``aligned``: keep per-item pictures (``aligned``, ``grids``) for every item;
    None: only while they are small (``stack.PICTURE_BYTES``), else ``align_one`` computes them on demand.
    """
    spec = get_method(method)
    if isinstance(runs, bool) or not isinstance(runs, (int, np.integer)) or runs < 1:
        raise InputError(f"runs = {runs!r} must be a whole number of at least 1.")
    seed = check_seed(seed)
    items = prepare(data, spec)
    if isinstance(items, Stack):
        items.pictures = aligned
    k = check_k(spec.default_k if k is None else k, item_count(items))
    cfg = spec.make_config(k, **params)
    dev = resolve_device(device)
    start = time.perf_counter()
    candidates = [lambda r=r: spec.run(items, cfg, dev, int(seed) + r) for r in range(runs)]
    with reproducible(dev):
        best, results = yield from with_eta(best_of(candidates, lambda i, n: f"run {i + 1}/{n}"))
    best.config = {"method": spec.name, "seed": int(seed), "runs": int(runs), "device": str(device), **best.config}
    if isinstance(items, Stack):  # new items are later scaled like the training stack
        best.config["input_range"] = [items.lo, items.hi]
    best.run_losses = [r.final_loss for r in results]
    best.timing = {**best.timing, "total_s": time.perf_counter() - start}
    best.device = describe(dev)
    best.versions = versions()
    yield Done(best)


def with_eta(events):
    """Pass events through, filling in each Progress' ETA from the current stage's pace (StagePace)."""
    pace = StagePace()
    while True:
        try:
            event = next(events)
        except StopIteration as stop:
            return stop.value
        if isinstance(event, Progress):
            event.eta = pace.eta(event.stage, event.step, event.total - event.step)
        yield event


class StagePace:
    """Seconds left, from the pace of the current stage only, or None ("estimating…") until that stage
    has shown ETA_MIN_STEPS steps and ETA_MIN_SECONDS seconds.

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

    def eta(self, stage: str, step: int, left: int, now: float | None = None) -> float | None:
        now = time.perf_counter() if now is None else now
        key = "".join(ch for ch in stage if not ch.isdigit())
        if key != self.key or step < self.step0:
            self.key, self.t0, self.step0 = key, now, step
            return None
        done, spent = step - self.step0, now - self.t0
        if done < ETA_MIN_STEPS or spent < ETA_MIN_SECONDS:
            return None
        return spent / done * max(left, 0)


ETA_MIN_STEPS = 3
ETA_MIN_SECONDS = 2.0


def format_eta(eta: float | None) -> str:
    """How front ends show an ETA: honest about being an estimate at the current stage's pace."""
    return "ETA estimating…" if eta is None else f"ETA ≈{format_seconds(eta)} at this stage's pace"


def fit(data, method: str = "kmeans", k: int | None = None, device: str = "auto", seed: int = 0, runs: int = 1,
        progress: bool | None = None, aligned: bool | None = None, **params) -> ClusteringResult:
    """Cluster ``data`` and return a :class:`ClusteringResult`.

    ``data``: an N×H×W or N×H×W×3 image stack (NumPy, memory-mapped or dask), N×D vectors where the
    method allows, or (n, L, 2) landmarks for shape methods. ``k`` defaults to the method's default;
    ``params`` are the method's own parameters (``ticlust methods`` lists them). ``progress`` shows a
    terminal bar (default: when standard error is a terminal). ``aligned``: see :func:`run`.
    """
    bar = TerminalProgress() if (progress if progress is not None else sys.stderr.isatty()) else None
    events = run(data, method=method, k=k, device=device, seed=seed, runs=runs, aligned=aligned, **params)
    if bar is None:
        return drain(events)
    for event in events:
        if isinstance(event, Progress):
            bar.update(event)
        elif isinstance(event, Done):
            bar.close()
            return event.result
    raise RuntimeError("the method finished without a result")  # a method must end with Done


def predict(result: ClusteringResult, data, device: str = "auto", batch_size: int | None = None,
            aligned: bool | None = None) -> ClusteringResult:
    """Assign new items with a fitted result's prototypes (and transforms); ``aligned``: see :func:`run`."""
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
    dev = resolve_device(device)
    start = time.perf_counter()
    out = spec.predict(result, items, dev, batch_size)
    out.timing = {"total_s": time.perf_counter() - start}
    out.device = describe(dev)
    out.versions = versions()
    return out


def fitted_scale(items, result: ClusteringResult):
    """Scale new items with the training stack's range, so that predictions match the fit."""
    if isinstance(items, Stack) and "input_range" in result.config:
        items = Stack(items.source, *result.config["input_range"], items.pictures)
    return items


def align_one(result: ClusteringResult, item, device: str = "auto", index: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Every prototype aligned onto one item, and the item's score to each: ((K, *item), (K,)).

    Methods that align (DTI, ST/AI K-means) compute the alignments on demand; the others return the
    prototypes themselves with the item's scores (so do results edited by hand and not yet refined:
    ``ticlust.curation``). ``index``: the item's place in the fitted stack, if it
    is one of them — its scores are then the result's own (the inspector agrees with the assignment).
    """
    spec = get_method(result.method)
    if index is not None and not 0 <= int(index) < result.n:
        raise InputError(f"index = {index} is outside the fitted stack of {result.n} items.")
    item = np.asarray(item)[None]
    lo, hi = result.config.get("input_range", (0.0, 1.0))
    stack = Stack(item, lo, hi)
    dev = resolve_device(device)
    if spec.align is not None and result.state is not None:   # an edited result's warps are stale until refined
        return spec.align(result, stack, dev, index=None if index is None else int(index))
    if index is not None:
        return np.asarray(result.prototypes), np.asarray(result.scores[int(index)])
    scores = spec.predict(result, stack, dev).scores[0]
    return np.asarray(result.prototypes), scores


def versions() -> dict[str, str]:
    import scipy
    import sklearn
    import torch

    from . import __version__

    return {"ticlust": __version__, "python": sys.version.split()[0], "numpy": np.__version__,
            "torch": torch.__version__, "scipy": scipy.__version__, "scikit-learn": sklearn.__version__}


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
        line = (f"\r{event.stage[:32]:32s} [{'#' * filled}{'.' * (self.width - filled)}] {event.step}/{event.total} "
                f"loss {event.loss:.4g} {format_eta(event.eta)}")
        self.stream.write(line.ljust(110))
        self.stream.flush()

    def close(self) -> None:
        self.stream.write(f"\r{'done':32s} [{'#' * self.width}]".ljust(110) + "\n")
        self.stream.flush()


def format_seconds(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


