"""Fit on a sample of an object store, assign every object (issue "Plates and a million objects", item 3).

``fit_store(store, method, k, sample=N)`` fits on a seeded sample spread over the store's fields
(:func:`sample_objects`: each field contributes in proportion to its objects, at most twice the even
share) and records the sample in the result's config (``fit_sample``: store, size, seed, rule, the
objects' indices) together with the store's options and crop (``store``), so a prediction can check
both. ``predict_store(result, store)`` assigns every object: one pure per-part step,
:func:`predict_part` (a result file, its digest, the store and a part in; the part's
``predict.parquet`` written by temp file + rename; a small report out), mapped over the parts through
an :class:`ticlust.core.execute.Backend`, then the joined table (the store's table + cluster, score,
runner-up) written to the store's ``predictions.parquet`` and to ``--csv`` / ``--parquet``, streamed
part by part. A part already predicted by the same result (its digest) is skipped, so a killed run
resumes; a part predicted by another result is predicted again, so two results never mix.

Memory: one part's crops (or a batch of them) at a time; the outputs per object are four numbers.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import sys
import time
import uuid
import warnings
from contextlib import closing, contextmanager, nullcontext
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

from ..errors import InputError, whole_number
from ..core.backends import LOCAL, Backend
from .fields import ASSIGN_COLUMNS, MAP_COLUMNS
from .spec import CHANNEL_PREFIX
from .store import (WHOLE_CHUNKS, LazyStack, ObjectStore, Reporter, _write_errors, busy, open_objects, part_name,
                    part_objects, part_rows, read_attributes, read_crops, store_lock, store_problem)

#: Name of the joined predictions table at the store's root, and of each part's predictions.
PREDICTIONS = "predictions.parquet"
PART_PREDICTIONS = "predict.parquet"
#: A part's aligned images (``--save-aligned``): a Zarr array beside its crops, tagged with the result digest.
PART_ALIGNED = "aligned"
#: A field contributes at most this many times the even share (sample / fields) to a fit sample.
SAMPLE_CAP = 2.0
SAMPLE_RULE = (f"proportional to each field's objects, at most {SAMPLE_CAP:g}x the even share (sample/fields), "
               "what the cap frees handed to the other fields in proportion; integer quotas by largest remainder; "
               "then a uniform draw without replacement in each field, fields in order, from one "
               "numpy.random.default_rng(seed)")
#: Landmarks per contour for shape methods when the result does not say (objects.shapes_from_labels' default).
N_POINTS = 64
#: Objects predicted at once on a stack or within a part when no --batch-size is given.
CHUNK = 4096
#: The columns of a part's predict.parquet that say which objects its rows are (checked before they are joined).
ROW_KEYS = ("label", "frame")
#: Options of the store that change the crops a result was fitted on (keep_border only selects objects).
CROP_OPTIONS = ("orient", "normalize", "rescale", "channel", "z")


# ---- the fit sample ------------------------------------------------------------------------------
def sample_quotas(counts, n: int, cap: float = SAMPLE_CAP) -> np.ndarray:
    """How many objects each field gives to a sample of ``n`` (see SAMPLE_RULE)."""
    counts = np.asarray(counts, np.int64)
    total = int(counts.sum())
    if n >= total:
        return counts.copy()
    nonempty = int((counts > 0).sum())
    limit = np.minimum(counts, math.ceil(cap * n / nonempty)).astype(float)
    q = np.zeros(len(counts))
    for bound in (limit, counts.astype(float)):     # the cap, and without it where the cap cannot hold n
        left = n - q.sum()
        active = q < bound - 1e-9
        while left > 1e-9 and active.any():
            share = left * counts[active] / counts[active].sum()
            add = np.minimum(share, bound[active] - q[active])
            q[active] += add
            left -= add.sum()
            active &= q < bound - 1e-9
        if n - q.sum() <= 1e-9:
            break
    quota = np.floor(q + 1e-9).astype(np.int64)
    rest = int(n - quota.sum())
    if rest > 0:
        room = np.flatnonzero(quota < counts)
        frac = (q - quota)[room]
        quota[room[np.argsort(-frac, kind="stable")[:rest]]] += 1
    return quota


def sample_objects(field_index, n: int, seed: int = 0) -> np.ndarray:
    """Sorted object indices (rows of a store's table) of a seeded sample of ``n`` spread over the fields.
    ``field_index``: the table's field_index column (objects in table order)."""
    field_index = np.asarray(field_index)
    ids, starts, counts = np.unique(field_index, return_index=True, return_counts=True)
    quota = sample_quotas(counts, int(n))
    rng = np.random.default_rng(int(seed))
    picks = [start + np.sort(rng.choice(count, q, replace=False)) for start, count, q in zip(starts, counts, quota) if q]
    return np.sort(np.concatenate(picks)) if picks else np.zeros(0, np.int64)


def store_digest(store: ObjectStore) -> str:
    """What identifies a store's objects for a result: its input's listing, options, crop and object count."""
    a = store.attributes
    key = json.dumps({"input": a["input"]["digest"], "options": a["options"], "crop": a["crop"], "objects": a["objects"]},
                     sort_keys=True)
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def store_items(store: ObjectStore, index, landmarks: bool, n_points: int = N_POINTS) -> np.ndarray:
    """The items of objects ``index`` as a method takes them: crops, or the outer contours of their masks
    (``n_points`` landmarks, (x, y) crop pixels) for a shape method."""
    if not landmarks:
        return store.crops[np.asarray(index)]
    return contours(store.masks[np.asarray(index)], n_points)


def contours(masks: np.ndarray, n_points: int) -> np.ndarray:
    """Each mask's outer contour as (n_points, 2) landmarks (objects.contour_landmarks)."""
    from ..objects.crops import contour_landmarks

    out = np.empty((len(masks), n_points, 2))
    for i, mask in enumerate(masks):
        out[i] = contour_landmarks(mask, n_points)
    return out


def fit_store(store, method: str = "kmeans", k: int | None = None, sample: int | None = None, seed: int = 0,
              device: str = "auto", runs: int = 1, progress=None, workers: int | None = None,
              scheduler: str | None = None, client=None, **params):
    """Fit ``method`` on a seeded sample of ``sample`` objects of an object store (all of them when None),
    spread over its fields (:func:`sample_objects`), with the objects route's parameters
    (``api.object_params``: similarity invariances for the aligning methods). Shape methods fit the
    contours of the objects' masks. Returns the result (its config holding ``fit_sample`` and ``store``) and
    the sample's object indices.
    ``progress``: as for ``extract`` and ``predict`` (True: a bar on standard error; a callable taking
    Progress events); None: a bar when standard error is a terminal, as ``ticlust.fit`` shows one.

    Where it runs, as for ``extract`` and ``predict`` (docs/cluster.md): in this process by default;
    ``workers=N`` (a local dask cluster started for the fit), ``scheduler`` or ``client`` (a running one)
    send the steps a method declares (``cluster_steps``: kmeans' Lloyd E-step, gmm's K-means and EM
    E-steps; one task per chunk of the sample, read by the workers from the store) to the cluster, with
    the same labels and prototypes to float tolerance. The other methods fit in this process and say so
    in one line (a warning); no cluster is started for them."""
    from ..api import fit_job, object_params, prepare
    from ..core.backends import backend_for, stderr_notice
    from ..core.execute import execute
    from ..kernels.chunked import StoreSample
    from ..methods import get_method

    from ..core.validation import check_seed

    seed = check_seed(seed)
    store = store if isinstance(store, ObjectStore) else ObjectStore(store)
    spec = get_method(method)
    landmarks = spec.inputs == ("landmarks",)
    fields = store.field_index
    store.check_parts()
    if sample is None:
        index = np.arange(len(fields))
    else:
        index = sample_objects(fields, whole_number(sample, "--fit-sample", 2, "objects"), seed)
    n_points = int(params.pop("n_points", N_POINTS)) if landmarks else N_POINTS
    steps = getattr(spec, "cluster_steps", None)
    cluster = any(v is not None for v in (workers, scheduler, client))
    if cluster and steps is None:
        warnings.warn(f"{spec.name} fits in this process (its training has no per-chunk step to distribute); "
                      "ticlust predict assigns the store's objects on the cluster.", stacklevel=2)
    # a scheduler that cannot be reached fails here, before the sample is read
    backend = backend_for(workers, scheduler, client, notice=stderr_notice if progress is True else None) \
        if cluster and steps is not None else None
    items = store_items(store, index, landmarks, n_points)
    report = Reporter(sys.stderr.isatty() if progress is None else progress)
    with backend or nullcontext():
        if backend is not None:
            items = StoreSample(prepare(items, spec), store.path.resolve(), index, backend, read_crops)
        job = fit_job(items, method=method, k=k, device=device, seed=seed, runs=runs, **object_params(method, params))
        result = execute(job, report.sink)
    result.config["store"] = {"path": str(store.path.resolve()), "digest": store_digest(store),
                              "options": store.options, "crop": store.attributes["crop"], "objects": len(store),
                              "channel_names": store_channels(store)}
    if landmarks:
        result.config["store"]["n_points"] = n_points
    result.config["fit_sample"] = {"size": int(len(index)), "requested": None if sample is None else int(sample),
                                   "seed": int(seed), "rule": SAMPLE_RULE, "index": index.astype(int).tolist()}
    return result, index


# ---- the result a prediction uses ----------------------------------------------------------------
def result_digest(path) -> str:
    """A fingerprint of a result file's contents (every array's name, dtype, shape and bytes): the same
    result saved twice gives the same digest (the zip's timestamps do not count)."""
    h = hashlib.sha256()
    with np.load(path, allow_pickle=False) as npz:
        for key in sorted(npz.files):
            a = npz[key]
            h.update(f"{key}|{a.dtype.str}|{a.shape}|".encode())
            h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:16]


@lru_cache(maxsize=2)
def _loaded(path: str, digest: str):
    """A result file, loaded once per process (a worker predicts many parts with it)."""
    from ..api import load_result

    return load_result(path)


def check_result_for_store(result, store: ObjectStore) -> None:
    """Refuse, with one sentence, a result that cannot assign this store's objects: the one decision of whether a
    result and a store go together, from what the store records — its crop options, its crop as the methods see
    it (:func:`store_item`) and its channels' names in their order (:func:`store_channels`) — against what the
    result was fitted on. A store always takes the results fitted on it."""
    from ..methods import get_method

    if result.state is None:
        raise InputError("This result was edited by hand and not refined yet: run ticlust.refine(data, result) "
                         "before assigning new items.")
    spec = get_method(result.method)
    fitted = result.config.get("store") or {}
    theirs = fitted.get("options", {})
    names, fitted_names = store_channels(store), fitted.get("channel_names")
    named = names is not None and fitted_names is not None      # then the names say which channels, not the option
    diff = [k for k in CROP_OPTIONS if k in theirs and theirs[k] != store.options.get(k) and not
            (named and k == "channel")]
    if diff:
        raise InputError(f"The result was fitted on a store made with "
                         f"{', '.join(f'{k}={theirs[k]!r}' for k in diff)} but {store.path} was made with "
                         f"{', '.join(f'{k}={store.options.get(k)!r}' for k in diff)}: extract the plate with the "
                         "fit's options (or fit on this store).")
    if spec.inputs == ("landmarks",):
        return
    item, shape = store_item(store), tuple(int(s) for s in np.shape(result.prototypes)[1:])
    if shape != item:
        what = lambda s: f"{s[0]}×{s[1]} crops" + (f" with {s[2]} channels" if len(s) > 2 else "")   # noqa: E731
        raise InputError(f"The result was fitted on {what(shape)} but {store.path} holds {what(item)}: extract the "
                         f"plate with --crop-size {shape[0]}{' and the same channels' if shape[2:] != item[2:] else ''}"
                         ", or fit a result on this store.")
    if named and list(fitted_names) != list(names):
        raise InputError(f"The result was fitted on the channels {', '.join(fitted_names)} but {store.path} holds "
                         f"{', '.join(names)}: extract the plate with --channel {','.join(fitted_names)} (in that "
                         "order), or fit a result on this store.")


def store_item(store: ObjectStore) -> tuple[int, ...]:
    """One crop's shape as a method sees it (``core.validation.channels_last``): (S, S), or (S, S, C) for C > 1
    channels (a single channel, as a manifest with one image_<Channel> column gives, is a grey crop)."""
    from ..core.validation import channels_last

    crop = (1, store.size, store.size) + ((store.channels,) if store.channels else ())
    return channels_last(np.broadcast_to(np.uint8(0), crop), crop, f"crops of {store.path}")[1][1:]


def store_channels(store: ObjectStore) -> tuple[str, ...] | None:
    """The names of the store's crop channels in their order, as the user gave them: the manifest's channel
    columns (``image_<Channel>``, LoadData's ``FileName_<Channel>``), picked by the store's ``channel`` option;
    None where the listing does not name the channels (an image file of several channels, an OME-Zarr)."""
    names = [str(c)[len(CHANNEL_PREFIX):] for c in store.fields.columns if str(c).startswith(CHANNEL_PREFIX)]
    if not names:
        return None
    picked = store.options.get("channel")
    picks = picked if isinstance(picked, list) else [picked] if picked is not None else list(range(len(names)))
    try:
        return tuple(p if isinstance(p, str) else names[int(p)] for p in picks)
    except (IndexError, ValueError):
        return None


def result_points(result) -> int:
    """Landmarks per shape of a shape method's result."""
    return int(result.config.get("store", {}).get("n_points") or np.shape(result.prototypes)[1])


# ---- assignment columns --------------------------------------------------------------------------
def assignment_columns(labels, scores) -> dict:
    """cluster, score, runner_up, runner_up_score per item (runner-up -1 and NaN when K = 1)."""
    scores = np.asarray(scores)
    labels = np.asarray(labels, np.int64)
    rows = np.arange(len(labels))
    own = scores[rows, labels] if len(labels) else np.zeros(0)
    if scores.shape[1] > 1:
        masked = scores.astype(np.float64, copy=True)
        masked[rows, labels] = np.inf
        runner = masked.argmin(1)
        runner_score = scores[rows, runner]
    else:
        runner, runner_score = np.full(len(labels), -1), np.full(len(labels), np.nan)
    return {"cluster": labels.astype(np.int32), "score": own.astype(np.float32),
            "runner_up": runner.astype(np.int32), "runner_up_score": runner_score.astype(np.float32)}


def map_columns(result) -> dict:
    """map_x, map_y per item of a result (a fit or a prediction): its object map places, NaN when it has none."""
    places = np.full((result.n, 2), np.nan, np.float32) if result.map is None else np.asarray(result.map, np.float32)
    return dict(zip(MAP_COLUMNS, places.T))


def predict_items(result, items, device="auto", batch_size: int | None = None, aligned: bool = False):
    """The assignment and map columns of a batch of items (api.predict: the seam, the fit's scaling); with
    ``aligned``, ``(columns, the items aligned with their prototypes, their kind)``."""
    from ..api import predict

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = predict(result, items, device=device, batch_size=batch_size, aligned=aligned)
    cols = assignment_columns(out.labels, out.scores)
    if out.rejected is not None:
        cols["rejected"] = np.asarray(out.rejected, bool)
    cols.update(map_columns(out))
    return (cols, out.aligned, out.aligned_kind) if aligned else cols


# ---- the per-part step (pure: paths in, a part's predict.parquet written, a small report out) ------
@dataclass(frozen=True)
class PartTask:
    """One part to predict: the result file and its digest, the store, the part's field index, options."""

    result: str
    digest: str
    store: str
    field: int
    batch_size: int | None = None
    device: str = "auto"
    save_aligned: bool = False


@dataclass(frozen=True)
class PartReport:
    field: int
    objects: int
    skipped: bool
    seconds: float


def part_digest(path: Path, field: int | None = None) -> str | None:
    """The result digest a part's predictions (or the joined table) were made with; None when there are none, they
    cannot be read, or (``field`` given) they are not field ``field``'s (another part's file copied over)."""
    import pyarrow.parquet as pq

    try:
        meta = pq.read_schema(path).metadata or {}
    except Exception:
        return None
    if field is not None and meta.get(b"field") != str(field).encode():
        return None
    return meta.get(b"ticlust_result", b"").decode() or None


def aligned_digest(part: Path) -> str | None:
    """The result digest a part's aligned images were made with (None: none yet)."""
    import zarr

    try:
        return zarr.open_array(part / PART_ALIGNED, mode="r", zarr_format=3).attrs.get("ticlust_result")
    except (OSError, ValueError, KeyError):          # zarr's errors are ValueErrors
        return None


def predict_part(task: PartTask) -> PartReport:
    """Assign every object of one part with the result and commit ``fields/NNNNN/predict.parquet`` (temp
    file + rename: there whole or not at all) and, with ``save_aligned``, ``fields/NNNNN/aligned`` (each
    object aligned with its prototype, written batch by batch into a temporary array, then renamed).
    Skipped when the part holds what was asked for, made by the same result."""
    from ..core.atomic import owned

    with owned(task.store):            # the part's own files, in the store this step was given
        return _predict_part(task)


def _predict_part(task: PartTask) -> PartReport:
    """:func:`predict_part`'s work, inside the store it owns for the step."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    import zarr

    from ..methods import get_method

    start = time.perf_counter()
    part = Path(task.store) / "fields" / part_name(task.field)
    out = part / PART_PREDICTIONS
    n = part_objects(part)
    if part_digest(out, task.field) == task.digest and (not task.save_aligned or aligned_digest(part) == task.digest):
        return PartReport(task.field, n, True, 0.0)
    result = _loaded(task.result, task.digest)
    landmarks = get_method(result.method).inputs == ("landmarks",)
    array = part / ("masks" if landmarks else "crops")
    source, meta = LazyStack.one(array)          # a missing or damaged array or chunk: one sentence
    chunk = int(meta.chunks[0])
    step = task.batch_size or CHUNK
    chunks, pictures = [], None
    tmp_aligned = part / f"{PART_ALIGNED}.{os.getpid()}-{uuid.uuid4().hex[:8]}.partial"
    try:
        with _write_errors(Path(task.store), f"while predicting field {task.field}"):
            for s in range(0, n, step):
                block = np.asarray(source[s:min(s + step, n)])
                items = contours(block, result_points(result)) if landmarks else block
                if not task.save_aligned:
                    chunks.append(predict_items(result, items, task.device, task.batch_size))
                    continue
                cols, aligned, kind = predict_items(result, items, task.device, task.batch_size, aligned=True)
                chunks.append(cols)
                if pictures is None:
                    pictures = zarr.create_array(tmp_aligned, shape=(n, *aligned.shape[1:]), dtype="float32",
                                                 chunks=(chunk, *aligned.shape[1:]), config=WHOLE_CHUNKS,
                                                 attributes={"ticlust_result": task.digest, "aligned_kind": kind})
                pictures[s:s + len(aligned)] = np.asarray(aligned, np.float32)
            if pictures is not None:
                shutil.rmtree(part / PART_ALIGNED, ignore_errors=True)   # another result's pictures
                os.replace(tmp_aligned, part / PART_ALIGNED)
    finally:
        shutil.rmtree(tmp_aligned, ignore_errors=True)
    cols = {c: np.concatenate([ch[c] for ch in chunks]) for c in chunks[0]} if chunks else \
        {c: np.zeros(0, np.int32 if c in ("cluster", "runner_up") else np.float32) for c in ASSIGN_COLUMNS + MAP_COLUMNS}
    rows = part_rows(Path(task.store), task.field, list(ROW_KEYS))
    table = pa.table({**{c: rows.column(c) for c in ROW_KEYS}, **cols}).replace_schema_metadata(
        {"ticlust_result": task.digest, "method": result.method, "field": str(task.field)})
    tmp = part / f"{PART_PREDICTIONS}.{os.getpid()}-{uuid.uuid4().hex[:8]}.partial"
    try:
        with _write_errors(Path(task.store), f"while predicting field {task.field}"):
            pq.write_table(table, tmp)
            os.replace(tmp, out)
    finally:
        if tmp.exists():
            tmp.unlink()
    return PartReport(task.field, n, False, time.perf_counter() - start)


# ---- the driver ----------------------------------------------------------------------------------
@dataclass
class StorePrediction:
    """What predicting a store did: where the joined table is, how many objects and parts (and how many
    parts were already done), and, when the result was fitted on a sample of this store, how many of the
    sample's objects got another cluster than in the fit (``sample_changed`` of ``sample_size``)."""

    path: Path
    objects: int
    parts: int
    skipped: int
    seconds: float
    method: str
    digest: str
    sample_size: int | None = None
    sample_changed: int | None = None
    outputs: list = field(default_factory=list)

    @property
    def table(self):
        """The store's table with cluster, score, runner_up, runner_up_score (read now)."""
        import pandas as pd

        return pd.read_parquet(self.path)


def sample_agreement(done) -> str | None:
    """One line on how many of the fit sample's objects got the cluster they had in the fit, for a
    :class:`StorePrediction` or a re-prediction (None when the result was not fitted on a sample of this store)."""
    if done.sample_size is None:
        return None
    return (f"fit sample: {done.sample_size - done.sample_changed} of {done.sample_size} objects got the cluster they "
            f"had in the fit ({done.sample_changed} differ)")


def _sweep_partials(store: ObjectStore) -> None:
    """Remove what killed predictions left half-written in the parts (``*.partial`` files and arrays): called
    with the store's lock held, when no other writer can be at work."""
    for stale in store.path.glob("fields/*/*.partial"):
        shutil.rmtree(stale, ignore_errors=True) if stale.is_dir() else stale.unlink(missing_ok=True)


def predict_store(result, store, *, device: str = "auto", batch_size: int | None = None, backend=None,
                  progress=None, csv=None, parquet=None, workers: int | None = None, scheduler: str | None = None,
                  client=None, save_aligned: bool = False) -> StorePrediction:
    """Assign every object of an object store with a fitted result (a ClusteringResult or its file).

    Each part's predictions go to ``fields/NNNNN/predict.parquet`` (tagged with the result's digest), then
    the joined table (the store's table + cluster, score, runner_up, runner_up_score) to the store's
    ``predictions.parquet`` and, when given, to ``csv`` / ``parquet``. Run it again after a stop: parts
    predicted by the same result are kept. Where the per-part steps run (docs/cluster.md), as for
    ``ticlust.extract``: in this process by default; ``workers=N`` starts a local dask cluster of N worker
    processes (at most one per part) for the run; ``scheduler`` (``tcp://HOST:PORT``) or ``client`` (a
    ``distributed.Client``) uses a running cluster, whose workers must see the store and the result at the
    same paths; or ``backend``, an execute.Backend the caller made. The predictions are the same wherever
    they ran. ``progress``: True for a bar on standard error (and a line with the cluster's dashboard
    address), or a callable taking Progress events. ``save_aligned``: also write every object aligned with its
    prototype into its part (``fields/NNNNN/aligned``, read back with :func:`aligned_images`), batch by batch,
    for the methods that align (ai-/st-kmeans, rigid-kmeans, dti-kmeans)."""
    from ..core.backends import backend_for, stderr_notice
    from ..core.validation import check_batch_size

    start = time.perf_counter()
    store = store if isinstance(store, ObjectStore) else ObjectStore(store)
    if batch_size is not None:
        batch_size = check_batch_size(batch_size)
    check_prediction_outputs(store, result, csv, parquet)
    store.check_parts()
    if backend is not None and any(v is not None for v in (workers, scheduler, client)):
        raise InputError("Give backend or one of workers, scheduler and client, not both.")
    # a scheduler that cannot be reached fails here, before anything is written
    own = backend_for(workers, scheduler, client, notice=stderr_notice if progress is True else None,
                      tasks=len(np.unique(store.field_index)) if workers is not None else None)
    try:
        with _result_file(result, store) as (obj, path):
            _check_predictable(obj, store, save_aligned)
            digest = result_digest(path)
            with store_lock(store.path, busy(store.path, "predict again")):
                _sweep_partials(store)
                ids, counts = np.unique(store.field_index, return_counts=True)
                tasks = [PartTask(str(Path(path).resolve()), digest, str(store.path.resolve()), int(i), batch_size,
                                  device, bool(save_aligned)) for i in ids]
                with own:              # a local cluster ends before the joined table is written
                    reports = _run_parts(tasks, counts, backend or own, progress)
                changed, size = _write_joined(store, obj, digest, ids, csv, parquet)
    finally:
        own.close()
    outputs = [store.path / PREDICTIONS] + [Path(p) for p in (csv, parquet) if p is not None]
    return StorePrediction(store.path / PREDICTIONS, int(counts.sum()), len(ids), sum(r.skipped for r in reports),
                           time.perf_counter() - start, obj.method, digest, size, changed, outputs)


def check_prediction_outputs(store: ObjectStore, result, csv, parquet) -> None:
    """Refuse, before anything is predicted, a ``csv`` / ``parquet`` target that would destroy a file: the guard of
    every output (``core.atomic.check_outputs``) with the store's inputs and the result file as the inputs."""
    from ..core.atomic import check_outputs

    inputs = {"RESULT": None if not isinstance(result, (str, os.PathLike)) else result, **store_inputs(store)}
    check_outputs(inputs, {"--csv": csv, "--parquet": parquet})


def store_inputs(store: ObjectStore) -> dict[str, Path]:
    """What a store was extracted from, as the output guard's inputs (name → path): its input (a folder, a
    manifest, an OME-Zarr) and every field's image and mask file; nothing may be written onto them."""
    source, files = store.input_files()
    return {"INPUT": source, **{f"{f.name}, a field's image or mask": f for f in files}}


@contextmanager
def _result_file(result, store: ObjectStore):
    """``(result, its file)`` for a prediction's per-part steps, which read the result from a file: a
    ClusteringResult is saved into the store's tmp/ for the run (and removed after it), a file is loaded."""
    from ..api import load_result
    from ..core.atomic import owned
    from ..result import ClusteringResult

    if not isinstance(result, ClusteringResult):
        yield load_result(Path(result)), Path(result)
        return
    temp = store.path / "tmp" / f"result-{os.getpid()}-{uuid.uuid4().hex[:8]}.npz"
    try:
        with owned(store.path / "tmp"):     # the store's scratch folder, where the parts' workers read it
            temp.parent.mkdir(exist_ok=True)
            saved = result.save(temp)
        yield result, saved
    finally:
        if temp.exists():
            temp.unlink()


def _check_predictable(result, store: ObjectStore, save_aligned: bool) -> None:
    """Refuse, in one sentence, a result that cannot assign this store (or align its objects, ``save_aligned``)."""
    from ..methods import get_method

    check_result_for_store(result, store)
    if save_aligned and get_method(result.method).align is None:
        raise InputError(f"{result.method} aligns no object with its prototype: --save-aligned applies to the methods "
                         "that align (ai-kmeans, st-kmeans, rigid-kmeans, dti-kmeans).")


def _run_parts(tasks, counts, backend, progress) -> list[PartReport]:
    """The parts through ``backend.imap``, all handed out at once (a worker takes the next part as soon as it is
    free: no round waits for its slowest part), progress (objects done, ETA) moving as each part finishes.
    The reports in task order."""
    report = Reporter(progress)
    total, done, fresh = int(np.sum(counts)), 0, 0
    reports = [None] * len(tasks)
    with closing(backend.imap(predict_part, tasks)) as finished:
        for i, part in finished:
            reports[i] = part
            done += part.objects
            fresh += 0 if part.skipped else part.objects
            # the pace of the objects predicted in this run (skipped parts cost nothing)
            report("predicting objects", done, total, paced=fresh)
    report.close()
    return reports


def _write_joined(store: ObjectStore, result, digest: str, ids, csv, parquet):
    """predictions.parquet: the store's table with the parts' assignments, row group by row group (:func:`_joined`),
    the result's hand-set clusters applied (``pins.pinned_columns``); then --csv / --parquet copied from it
    (:func:`copy_table`, the same bytes ``export_objects`` writes). Returns (sample objects whose cluster differs
    from the fit's, sample size) when the result was fitted on a sample of this store, else (None, None)."""
    import pyarrow.parquet as pq

    from ..core.atomic import owned, write_atomic
    from .pins import pinned_columns, plate_pins

    pins = plate_pins(result)          # clusters set by hand (ticlust.plate.curate), applied over the predictions
    sample = result.config.get("fit_sample")
    same_store = sample is not None and result.config.get("store", {}).get("digest") == store_digest(store)
    index = np.asarray(sample["index"], np.int64) if same_store else None
    picked = np.full(0 if index is None else len(index), -1, np.int64)
    meta = {b"ticlust_result": digest.encode(), b"method": result.method.encode()}

    def write(tmp):
        writer, offset = None, 0
        for table in _joined(store, ids, digest):
            if index is not None:
                sel = (index >= offset) & (index < offset + table.num_rows)
                picked[sel] = table.column("cluster").to_numpy()[index[sel] - offset]
            table = pinned_columns(table, offset, pins)
            offset += table.num_rows
            writer = writer or pq.ParquetWriter(tmp, table.schema.with_metadata(meta))
            writer.write_table(table.replace_schema_metadata(meta))
        if writer is not None:
            writer.close()

    with owned(store.path):
        write_atomic(store.path / PREDICTIONS, write)
    for target in (parquet, csv):
        if target is not None:
            copy_table(store.path / PREDICTIONS, target, parquet=target is parquet)
    if index is None:
        return None, None
    return int((picked != np.asarray(result.labels)[:len(index)]).sum()), int(len(index))


def _joined(store: ObjectStore, ids, digest: str):
    """The store's table with cluster, score, runner_up, runner_up_score joined on: one Arrow table per row
    group of ROW_GROUP rows, in table order, each part's predict.parquet read in turn and checked to hold the
    predictions of the result ``digest``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from .store import ROW_GROUP

    def parts():
        for i in ids:
            path = store.path / "fields" / part_name(int(i)) / PART_PREDICTIONS
            if part_digest(path, int(i)) != digest:
                raise InputError(f"{path} holds no predictions of this result for field {int(i)} (changed while this "
                                 "prediction ran?): predict again.")
            yield int(i), pq.read_table(path)

    it, pending, field = parts(), None, None
    for batch in pq.ParquetFile(store.path / "table.parquet").iter_batches(batch_size=ROW_GROUP):
        need, got, start = batch.num_rows, [], 0
        while need:
            if pending is None or pending.num_rows == 0:
                field, pending = next(it)
                continue
            take = pending.slice(0, need)
            _same_rows(store, field, take, batch.slice(start, take.num_rows))
            got.append(take)
            pending = pending.slice(take.num_rows)
            need -= take.num_rows
            start += take.num_rows
        assign = with_map_columns(pa.concat_tables(got).combine_chunks()) if got else None
        table = pa.Table.from_batches([batch])
        for c in ASSIGN_COLUMNS + MAP_COLUMNS:
            table = table.append_column(c, assign.column(c))
        yield table


def _same_rows(store: ObjectStore, field: int, predicted, rows) -> None:
    """Refuse to join a part's predictions onto table rows of other objects (field, label or frame differ): a
    part's predict.parquet replaced by another's, or a table edited after the prediction."""
    same = np.array_equal(rows.column("field_index").to_numpy(), np.full(rows.num_rows, field)) and all(
        np.array_equal(predicted.column(c).to_numpy(), rows.column(c).to_numpy()) for c in ROW_KEYS)
    if not same:
        raise InputError(f"{store.path} is damaged: the predictions of field {field} are not of the objects its table "
                         "lists there (their labels or frames differ: the table or the part was changed after "
                         "extraction); extract the plate again into a new store.")


def with_map_columns(part):
    """A part's predictions as the joined table takes them: the assignment columns, then the map's (NaN when the
    part was predicted before maps were made)."""
    import pyarrow as pa

    out = part.select(list(ASSIGN_COLUMNS))
    for c in MAP_COLUMNS:
        out = out.append_column(c, part.column(c) if c in part.column_names else
                                pa.array(np.full(part.num_rows, np.nan, np.float32)))
    return out


def copy_table(source: Path, path, parquet: bool) -> Path:
    """A store's table (``source``, Parquet) written whole at ``path`` (through the output guard): as Parquet, the
    same bytes; else as CSV, row group by row group, without Arrow's metadata."""
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    from ..core.atomic import write_atomic

    if parquet:
        return write_atomic(path, lambda tmp: shutil.copyfile(source, tmp))

    def write(tmp):
        table = pq.ParquetFile(source)
        with pcsv.CSVWriter(tmp, table.schema_arrow.remove_metadata()) as writer:
            for group in range(table.num_row_groups):
                writer.write_table(table.read_row_group(group).replace_schema_metadata(None))
    return write_atomic(path, write)


def aligned_images(store):
    """Every object of a store aligned with its prototype, as ``predict --save-aligned`` wrote them: a lazy
    array (N, size, size[, C]) in table order, read part by part on indexing. Refused when a part has none,
    or pictures made by another result than the store's predictions."""
    from .store import LazyStack

    store = store if isinstance(store, ObjectStore) else ObjectStore(store)
    paths, counts = store._parts
    wanted = part_digest(store.path / PREDICTIONS)
    made = {aligned_digest(p) for p in paths}
    if wanted is None or made != {wanted}:
        raise InputError(f"{store.path.name} holds no aligned images of its predictions: run ticlust predict RESULT "
                         f"{store.path.name} --save-aligned.")
    import zarr

    first = zarr.open_array(paths[0] / PART_ALIGNED, mode="r")
    return LazyStack([p / PART_ALIGNED for p in paths], counts, first.shape[1:], first.dtype)


# ---- stacks and single fields, chunk by chunk ----------------------------------------------------
def predict_stream(result, items, *, device: str = "auto", batch_size: int | None = None, progress=None) -> dict:
    """Assign a stack (or landmark set), a chunk of ``batch_size`` (default CHUNK) items at a time, with
    progress; the assignment columns for every item."""
    if result.state is None:
        raise InputError("This result was edited by hand and not refined yet: run ticlust.refine(data, result) "
                         "before assigning new items.")
    report = Reporter(progress)
    n = int(items.shape[0])
    step = batch_size or CHUNK
    chunks = []
    for s in range(0, n, step):
        chunks.append(predict_items(result, np.asarray(items[s:min(s + step, n)]), device, batch_size))
        report("predicting items", min(s + step, n), n)
    report.close()
    return {c: np.concatenate([ch[c] for ch in chunks]) for c in chunks[0]}


def is_store(path) -> bool:
    """Whether ``path`` is an object store (written by ticlust extract), or a damaged one (which ObjectStore then
    refuses by what is damaged, instead of it being read as a folder of images)."""
    return read_attributes(path) is not None or store_problem(path) is not None


def lloyd_store(path, centers, *, backend: Backend = LOCAL, max_iter: int = 300, tol: float = 1e-4,
                chunk: int = 8192):
    """:func:`ticlust.kernels.kmeans.lloyd` on every crop of the store at ``path`` (flat rows, unscaled), its
    E-step one ``backend`` task per chunk of ``chunk`` objects; yields (iteration, inertia, centres,
    labels) after each update, as numpy arrays."""
    import torch

    from ..core.stack import Stack
    from ..kernels import Rows, lloyd
    from ..kernels.chunked import StoreSample

    crops = np.asarray(open_objects(path).crops)
    sample = StoreSample(Stack(crops, 0.0, 1.0), path, np.arange(len(crops)), backend, read_crops)
    rows = Rows(sample, "cpu", chunk)
    for it, inertia, c, labels in lloyd(rows, torch.from_numpy(np.asarray(centers, np.float32)), max_iter, tol):
        yield it, inertia, c.numpy(), labels.numpy()


__all__ = ["fit_store", "predict_store", "predict_part", "predict_stream", "sample_objects", "sample_quotas",
           "StorePrediction", "PartTask", "PartReport", "result_digest", "is_store", "lloyd_store", "PREDICTIONS"]

