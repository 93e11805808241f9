"""Curating a plate's clustering by hand: the edits of :mod:`ticlust.curation`, on a result fitted on a sample of an
object store (``ticlust.plate.run.fit_store``), named by the store's object numbers and carried to every object.

Objects are the rows of the store's table (``store.table``, the crops' order). An edit of objects in the fit sample
is the edit of :mod:`ticlust.curation` on their places in the sample (the result's items), so that :func:`refine`
re-fits from it; an object outside the sample is pinned in the result's config (``plate_pins``), which the fit never
saw, so the model and its fitted state stay as they are. Every hand-set cluster (and outlier mark) of either kind is
applied over the predictions whenever the store's predictions are written (:func:`pinned_columns`, called by
``plate.run.predict_store``): the object keeps it through every re-predict, and the table says so (``by_hand``,
``outlier``).

:func:`repredict` brings the store's predictions to an edited result: after merges, moves and outlier marks
(:func:`cluster_map`) each part's predictions are renumbered without aligning anything; after a Refine (or a split)
every part is predicted anew by ``predict_store``, which resumes a stopped run and never mixes two results in one
table. Nothing here imports napari; the plate dock, ``ticlust curate RESULT --store STORE`` and a notebook call the
same functions.
"""
from __future__ import annotations

import dataclasses
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import InputError
from ..result import OUTLIER, ClusteringResult
from .pins import PINS, fit_sample, outside_pins, pin_columns, pin_values, pinned_columns, plate_pins  # noqa: F401  (curate is their public face)
from .store import ObjectStore, Reporter, _write_errors, part_name, store_lock

#: Edits after which the store's predictions are renumbered, not predicted again (``pin``: objects outside the sample;
#: ``split_off``: the new cluster holds only the objects pinned to it until a Refine).
RELABEL_OPS = ("merge", "move", "outliers", "split_off", "pin")


# ---- the result and its sample -------------------------------------------------------------------
def check_plate_result(result: ClusteringResult, store: ObjectStore) -> None:
    """Refuse, in one sentence, a result that was not fitted on a sample of this store's objects."""
    from .run import store_digest

    fit_sample(result)
    fitted = result.config.get("store", {})
    if fitted.get("digest") != store_digest(store):
        raise InputError(f"The result was fitted on the store {fitted.get('path', '(unknown)')}, not on "
                         f"{store.path}: curate it on the store it was fitted on (its object numbers are that store's).")


def objects_of(selection, store_objects: int, what: str = "select") -> np.ndarray:
    """Store object numbers from a selection (``curation.item_index``'s grammar: 3, "3, 8-12", a list, a mask)."""
    from ..curation import item_index

    return item_index(selection, store_objects, what)


def sample_places(result: ClusteringResult, objects) -> np.ndarray:
    """Each store object's item number in the result's fit sample, -1 for those outside it (all of them for a result
    not fitted on a store)."""
    objects = np.asarray(objects, np.int64).reshape(-1)
    sample = result.config.get("fit_sample")
    if not isinstance(sample, dict) or not len(sample.get("index", [])):
        return np.full(len(objects), -1, np.int64)
    index = np.asarray(sample["index"], np.int64)
    at = np.minimum(np.searchsorted(index, objects), len(index) - 1)
    return np.where(index[at] == objects, at, -1)


def _split_sample(result: ClusteringResult, objects: np.ndarray):
    """(places in the sample of the objects that are in it, the objects outside it)."""
    fit_sample(result)
    places = sample_places(result, objects)
    return places[places >= 0], objects[places < 0]


def _with_pins(result: ClusteringResult, pins: dict[int, int], edit: dict | None) -> ClusteringResult:
    """A copy whose config holds ``pins`` (objects outside the sample) and, when given, ``edit`` appended."""
    order = sorted(pins)
    config = {**result.config, PINS: {"objects": order, "clusters": [pins[o] for o in order]}}
    edits = result.edits if edit is None else [*result.edits, edit]
    return dataclasses.replace(result, config=config, edits=list(edits))


# ---- the edits -----------------------------------------------------------------------------------
def move(result: ClusteringResult, objects, cluster: int, store_objects: int) -> ClusteringResult:
    """Put store objects ``objects`` into ``cluster`` and pin them there (an outlier moved is one no more). Objects of
    the fit sample are moved in the result (``curation.move``: Refine keeps them there); the others are pinned in the
    config, and the model keeps its fitted state when no sample object was moved."""
    from .. import curation

    objects = objects_of(objects, store_objects, "move")
    cluster = curation.check_cluster(result, cluster)
    inside, outside = _split_sample(result, objects)
    edited = curation.move(result, inside, cluster) if len(inside) else result
    return _pin_outside(edited, outside, cluster)


def mark_outliers(result: ClusteringResult, objects, store_objects: int) -> ClusteringResult:
    """Mark store objects as outliers: flagged in the predictions (``outlier``), left out of Refine's prototypes
    when they are in the fit sample (``curation.mark_outliers``)."""
    from .. import curation

    objects = objects_of(objects, store_objects, "mark as outliers")
    inside, outside = _split_sample(result, objects)
    edited = curation.mark_outliers(result, inside) if len(inside) else result
    return _pin_outside(edited, outside, OUTLIER)


def split_off(result: ClusteringResult, objects, store_objects: int) -> ClusteringResult:
    """Make store objects ``objects`` (e.g. a lasso on the object map) a new cluster, numbered K, pinned there: those
    of the fit sample through ``curation.split_off`` (Refine learns the new prototype from them), the others pinned
    in the config. Refused when none is in the fit sample: Refine would have no member to learn the new cluster
    from."""
    from .. import curation

    objects = objects_of(objects, store_objects, "split off")
    inside, outside = _split_sample(result, objects)
    if len(inside) == 0:
        raise InputError(f"None of the {len(objects):,} objects is in the fit sample ({len(fit_sample(result)):,} "
                         "objects), so Refine could not learn a new cluster from them: select more objects, or move "
                         "them to an existing cluster.")
    edited = curation.split_off(result, inside)
    return _pin_outside(edited, outside, edited.k - 1)


def _pin_outside(edited: ClusteringResult, outside: np.ndarray, cluster: int) -> ClusteringResult:
    """``edited`` with the store objects ``outside`` the fit sample pinned to ``cluster`` (an outlier with OUTLIER) in
    its config, the pin logged as an edit; ``edited`` itself when there are none."""
    if len(outside) == 0:
        return edited
    pins = outside_pins(edited)
    pins.update({int(o): cluster for o in outside})
    return _with_pins(edited, pins, {"op": "pin", "objects": outside.tolist(), "cluster": cluster})


def merge(result: ClusteringResult, a: int, b: int) -> ClusteringResult:
    """Cluster ``b`` joins cluster ``a`` (``curation.merge``); the objects pinned outside the sample are renumbered
    with the clusters."""
    from .. import curation

    merged = curation.merge(result, a, b)
    mapping = merge_numbers(result.k, a, b)
    pins = {o: (int(mapping[c]) if c >= 0 else c) for o, c in outside_pins(result).items()}
    return _with_pins(merged, pins, None) if pins else merged


def merge_numbers(k: int, a: int, b: int) -> np.ndarray:
    """Each of K clusters' number after cluster ``b`` joins ``a`` (the clusters after ``b`` one lower)."""
    renumber = np.cumsum([c != b for c in range(k)]) - 1
    renumber[b] = renumber[a]
    return renumber.astype(np.int64)


def sample_items(store: ObjectStore, result: ClusteringResult):
    """The fit sample's items read from the store, as the fit read them (crops, or contours for a shape method)."""
    from ..methods import get_method
    from .run import result_points, store_items

    landmarks = get_method(result.method).inputs == ("landmarks",)
    return store_items(store, fit_sample(result), landmarks, result_points(result) if landmarks else 0)


def split(store: ObjectStore, result: ClusteringResult, cluster: int, seed: int = 0,
          device: str = "auto") -> ClusteringResult:
    """Re-cluster the fit sample's members of ``cluster`` in two (``curation.split``); the plate's other objects
    get a cluster when the split result is refined and predicted again."""
    from .. import curation

    check_plate_result(result, store)
    return curation.split(sample_items(store, result), result, cluster, seed=seed, device=device)


def refine_events(store: ObjectStore, result: ClusteringResult, device: str = "auto", keep_pinned: bool = True):
    """Re-fit the prototypes (and alignments) on the fit sample from the edits, warm started
    (``curation.refine_events``: Progress …, Done(result)); the pins outside the sample stay in the config."""
    from .. import curation

    check_plate_result(result, store)
    return (yield from curation.refine_events(sample_items(store, result), result, device, keep_pinned))


def refine(store: ObjectStore, result: ClusteringResult, device: str = "auto", keep_pinned: bool = True,
           progress=None) -> ClusteringResult:
    """:func:`refine_events` run to its end; ``progress``: as for ``fit_store``."""
    from .. import curation
    from ..core.execute import execute

    check_plate_result(result, store)
    report = Reporter(progress)
    return execute(curation.refine_job(sample_items(store, result), result, device, keep_pinned), report.sink)


def relabel_columns(columns: dict, mapping: np.ndarray) -> dict:
    """Assignment columns in another numbering of the clusters (``mapping``: old cluster → new). A runner-up that
    joined the object's own cluster is unknown after a merge (only the two best clusters are kept): -1, NaN."""
    cluster = np.asarray(columns["cluster"]).astype(np.int64)
    runner = np.asarray(columns["runner_up"]).astype(np.int64)
    new = np.where(cluster >= 0, mapping[np.clip(cluster, 0, None)], cluster)
    new_runner = np.where(runner >= 0, mapping[np.clip(runner, 0, None)], runner)
    lost = (new_runner == new) & (runner >= 0)
    runner_score = np.asarray(columns["runner_up_score"], np.float32).copy()
    runner_score[lost] = np.nan
    return {**columns, "cluster": new.astype(np.int32), "runner_up": np.where(lost, -1, new_runner).astype(np.int32),
            "runner_up_score": runner_score}


def cluster_map(previous: ClusteringResult, result: ClusteringResult) -> np.ndarray | None:
    """``previous``'s clusters in ``result``'s numbering when ``result`` is ``previous`` edited by merges, moves and
    outlier marks only (checked by replaying those edits on ``previous``: same prototypes), so that predictions made
    with ``previous`` are renumbered, not made again; None otherwise (a split, a refine, another fit)."""
    from .. import curation

    n = len(previous.edits)
    later = result.edits[n:]
    if result.method != previous.method or list(result.edits[:n]) != list(previous.edits) or \
            any(e.get("op") not in RELABEL_OPS for e in later):
        return None
    mapping, replay = np.arange(previous.k), previous
    for edit in later:
        if edit["op"] == "merge":
            mapping = merge_numbers(replay.k, edit["a"], edit["b"])[mapping]
            replay = curation.merge(replay, edit["a"], edit["b"])
        elif edit["op"] == "move":
            replay = curation.move(replay, edit["items"], edit["cluster"])
        elif edit["op"] == "outliers":
            replay = curation.mark_outliers(replay, edit["items"])
        elif edit["op"] == "split_off":
            replay = curation.split_off(replay, edit["items"])
    same = replay.k == result.k and np.shape(replay.prototypes) == np.shape(result.prototypes) and \
        np.allclose(replay.prototypes, result.prototypes)
    return mapping if same else None


# ---- bringing the store's predictions to an edited result --------------------------------------------
@dataclass
class Repredicted:
    """What :func:`repredict` did: how many objects (and parts) carry the result's clusters now, whether they were
    renumbered (``relabelled``) or predicted anew, how many are set by hand or outliers, the fit sample's objects
    whose predicted cluster differs from the fit's (``sample_changed`` of ``sample_size``, predicted anew only)."""

    path: Path
    objects: int
    parts: int
    relabelled: bool
    by_hand: int
    outliers: int
    seconds: float
    sample_size: int | None = None
    sample_changed: int | None = None
    outputs: list = dataclasses.field(default_factory=list)


def result_digest_of(result, folder: Path) -> str:
    """The digest ``predict_store`` tags predictions with, of a result file or of a result in memory (saved into a
    temporary file in ``folder`` for the count)."""
    from ..core.atomic import owned
    from .run import result_digest

    if not isinstance(result, ClusteringResult):
        return result_digest(result)
    with owned(folder), tempfile.TemporaryDirectory(dir=folder) as tmp:     # the store's scratch folder
        return result_digest(result.save(Path(tmp) / "result.npz"))


def repredict(result, store, previous=None, *, device: str = "auto", batch_size: int | None = None,
              progress=None, csv=None, parquet=None, workers: int | None = None) -> Repredicted:
    """Bring the store's predictions to ``result`` (a ClusteringResult or its file), a result fitted on a sample of
    the store and edited by hand. When the store holds ``previous``'s predictions and ``result`` is ``previous``
    edited by merges, moves and outlier marks (:func:`cluster_map`), each part's predictions are renumbered (no
    object aligned; a part renumbered already is skipped, so a stopped run resumes); otherwise every part is
    predicted anew with ``result`` (``predict_store``: resumable, two results never mixed), which takes a fitted
    result (Refine an edited one first). Either way the store's predictions.parquet (and ``csv`` / ``parquet``)
    are written with the hand-set clusters applied. ``progress``: as for ``predict_store``."""
    from ..api import load_result
    from .run import PREDICTIONS, check_prediction_outputs, part_digest, predict_store

    start = time.perf_counter()
    store = store if isinstance(store, ObjectStore) else ObjectStore(store)
    check_prediction_outputs(store, result, csv, parquet)
    result = load_result(result) if not isinstance(result, ClusteringResult) else result
    previous = load_result(previous) if previous is not None and not isinstance(previous, ClusteringResult) \
        else previous
    check_plate_result(result, store)
    mapping = cluster_map(previous, result) if previous is not None else None
    tag = part_digest(store.path / PREDICTIONS)
    if mapping is not None and tag is not None and tag == result_digest_of(previous, store.path / "tmp"):
        done = _relabel(result, store, tag, mapping, progress, csv, parquet)
        relabelled = True
    else:
        if result.state is None:
            raise InputError("The store's predictions are not those of the result before these edits, and an edited "
                             "result predicts nothing until it is refined: Refine it, then predict again.")
        done = predict_store(result, store, device=device, batch_size=batch_size, progress=progress, csv=csv,
                             parquet=parquet, workers=workers)
        relabelled = False
    values = plate_pins(result)[1]
    return Repredicted(done.path, done.objects, done.parts, relabelled, int((values >= 0).sum()),
                       int((values == OUTLIER).sum()), time.perf_counter() - start, done.sample_size,
                       None if relabelled else done.sample_changed, done.outputs)


def _relabel(result: ClusteringResult, store: ObjectStore, before: str, mapping: np.ndarray, progress, csv, parquet):
    """Renumber every part's predictions (made by the result of digest ``before``) into ``result``'s clusters, tag
    them with ``result``'s digest, then write the joined table: under the store's lock, part by part (temp file +
    rename), parts renumbered already skipped."""
    from .run import (PART_PREDICTIONS, PREDICTIONS, StorePrediction, _result_file, _sweep_partials,
                      _write_joined)

    report = Reporter(progress)
    with _result_file(result, store) as (obj, path):
        from .run import result_digest

        digest = result_digest(path)
        with store_lock(store.path, f"Another run is writing to {store.path} now: let it finish (or stop it), then "
                                    "curate again."):
            _sweep_partials(store)
            ids, counts = np.unique(store.field_index, return_counts=True)
            for step, i in enumerate(ids, 1):
                _relabel_part(store.path / "fields" / part_name(int(i)) / PART_PREDICTIONS, before, digest, mapping,
                              obj.method)
                report("renumbering clusters", step, len(ids))
            report.close()
            _write_joined(store, obj, digest, ids, csv, parquet)
    outputs = [store.path / PREDICTIONS] + [Path(p) for p in (csv, parquet) if p is not None]
    return StorePrediction(store.path / PREDICTIONS, int(counts.sum()), len(ids), 0, 0.0, obj.method, digest,
                           outputs=outputs)


def _relabel_part(path: Path, before: str, digest: str, mapping: np.ndarray, method: str) -> None:
    """One part's predict.parquet renumbered and tagged ``digest`` (skipped when tagged so already)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ..core.atomic import write_atomic
    from .run import part_digest

    tag = part_digest(path)
    if tag == digest:
        return
    if tag != before:
        raise InputError(f"{path} holds predictions of another result than the one edited (a second prediction ran "
                         "at the same time?): predict the store again.")
    table = pq.read_table(path)
    columns = relabel_columns({c: table.column(c).to_numpy() for c in table.column_names}, mapping)
    out = pa.table({c: columns[c] for c in table.column_names}, schema=table.schema.remove_metadata())
    meta = {**(table.schema.metadata or {}), b"ticlust_result": digest.encode(), b"method": method.encode()}
    out = out.replace_schema_metadata(meta)            # the part's other tags (its field) kept
    with _write_errors(path.parents[2], f"while renumbering field {int(path.parent.name)}"):
        write_atomic(path, lambda tmp: pq.write_table(out, tmp))


__all__ = ["fit_sample", "sample_places", "check_plate_result", "objects_of", "plate_pins", "move", "mark_outliers", "split_off", "merge", "split",
           "refine", "refine_events", "sample_items", "pin_values", "pin_columns", "pinned_columns", "relabel_columns",
           "cluster_map", "merge_numbers", "repredict", "Repredicted", "result_digest_of", "PINS"]
