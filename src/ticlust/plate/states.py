"""Time on a plate: the states along the tracks of an object store's movies, from its predictions
(docs/time_lapse.md). A movie is one field with frames (an OME-Zarr or TIFF time series: the table's ``frame``),
or the fields of a manifest that share every column but a time column (one image per time point: ``--time
timepoint``); in a movie, label ids are track ids (as a tracker's label export keeps them)."""
from __future__ import annotations

import numpy as np

from ..errors import InputError
from ..objects.states import TrackStates, states_from_scores
from ..objects.tracks import object_tracks
from .store import ObjectStore, open_objects
from .view import condition_columns, read_predictions


def store_states(store, k: int, time: str = "frame", order="free", smooth: bool = True, stay: float = 0.9,
                 divisions: bool = True) -> TrackStates:
    """The :class:`~ticlust.objects.states.TrackStates` of a predicted store's movies (``ticlust predict RESULT
    STORE`` first). ``k``: the result's clusters; ``time``: ``"frame"`` (each field's own frames) or the manifest
    column that numbers a field's time point (whole numbers). The scores are the two the predictions keep (the
    cluster's and the runner-up's); every other cluster is taken to score as the runner-up does (it scores at
    least that), so the smoothing sees each object's best two states. The objects table gains the store's
    columns (field, well, label, ...) and ``movie``; the tracks table ``movie`` and ``label``."""
    store = store if isinstance(store, ObjectStore) else open_objects(store)
    keys = _movie_columns(store, time)
    table = read_predictions(store)
    if table is None:
        raise InputError(f"{store.path} has no predictions: assign its objects first (ticlust predict RESULT STORE).")
    frame = _time(table, time)
    movie = table.groupby(keys, sort=False, dropna=False).ngroup().to_numpy() if keys else np.zeros(len(table), int)
    track = table.assign(_m=movie).groupby(["_m", "label"], sort=False).ngroup().to_numpy()
    objects = {"track_id": track, "frame": frame, "movie": movie, "centroid_y": table.centroid_y.to_numpy(),
               "centroid_x": table.centroid_x.to_numpy(), "area": table.area.to_numpy()}
    tracks = object_tracks(objects, divisions=divisions)
    done = states_from_scores(table.cluster.to_numpy(), _two_scores(table, int(k)), tracks, order, smooth, stay)
    for c in ("field_index", *keys, "label"):
        if c not in done.objects:
            done.objects[c] = table[c].to_numpy()
    done.objects["movie"] = movie
    first = done.objects.drop_duplicates("track").set_index("track")
    done.tracks.insert(1, "movie", first.movie.reindex(done.tracks.track).to_numpy())
    done.tracks.insert(2, "label", first.label.reindex(done.tracks.track).to_numpy())
    return done


def _movie_columns(store: ObjectStore, time: str) -> list[str]:
    """The listing's columns that tell one movie from another: the field itself for ``frame``; every manifest
    column but ``time`` otherwise."""
    if time == "frame":
        return ["field_index"]
    columns = condition_columns(store)
    if time not in columns:
        raise InputError(f"--time {time}: the store's manifest has no such column (it has "
                         f"{', '.join(columns) or 'none'}): name the column that numbers the time points, or 'frame' "
                         "for fields that are time series.")
    return [c for c in columns if c != time]


def _time(table, time: str) -> np.ndarray:
    """Each object's frame: the field's own frame, or the manifest's time point (whole numbers from 0)."""
    values = table[time].to_numpy()
    if time != "frame" and table["frame"].max() > 0:
        raise InputError(f"The store's fields are time series themselves: their frames are the time (--time frame), "
                         f"not the column {time}.")
    as_float = np.asarray(values, np.float64) if values.dtype.kind in "iuf" else None
    if as_float is None or not np.isfinite(as_float).all() or (as_float != np.round(as_float)).any() \
            or as_float.min() < 0:
        raise InputError(f"The time column {time} must hold whole numbers from 0 (a frame number per field).")
    return as_float.astype(np.int64)


def _two_scores(table, k: int) -> np.ndarray:
    """(N, K) scores from the cluster's and the runner-up's: every other cluster at the runner-up's score (at the
    median gap above the best one where the runner-up is unknown)."""
    best, runner = table.score.to_numpy(np.float64), table.runner_up_score.to_numpy(np.float64)
    cluster, second = table.cluster.to_numpy(), table.runner_up.to_numpy()
    if k > 1 and cluster.max() >= k:
        raise InputError(f"The store's predictions name cluster {int(cluster.max())}, but the result has {k} clusters.")
    known = (second >= 0) & np.isfinite(runner)
    gap = float(np.median(runner[known] - best[known])) if known.any() else 1.0
    rest = np.where(known, runner, best + gap)
    scores = np.repeat(rest[:, None], k, 1)
    rows = np.arange(len(table))
    scores[rows[known], second[known]] = runner[known]
    scores[rows, cluster] = best
    return scores
