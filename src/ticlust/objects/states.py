"""Cell states along tracks: a fitted result's clusters read per track, optionally smoothed by a hidden Markov model
(``kernels.hmm``), and the tables a time-lapse lab wants — per object, per track, per visit of a state, per state.

``track_states(result, tracks, order="free", smooth=True)``: ``result`` is any fit of the objects (any method);
``tracks`` says which track and frame each object is (``objects.tracks.object_tracks``). The raw state of an
object is its cluster; the smoothed state (a column beside it, never in its place) is the Viterbi path of its
track, whose emissions are the method's own scores turned into probabilities with a temperature calibrated on
this result (``kernels.hmm``), whose transitions are learned from the tracks (Baum-Welch-like re-estimation
from the raw states' counts, with a prior of staying in a state) within the ``order`` the user allows, and in
which a daughter starts from her mother's last state. Gaps in a track are frames the states run through unseen.

``order``: ``"free"`` (any state may follow any), ``"cyclic"`` (one cycle through all states, its order learned
from the raw transitions), or the allowed steps as chains of cluster numbers, ``"3>5>1>2"`` (a path),
``"0>1>2>3>4>0"`` (a cycle), ``"0>1>2>3>4>0, 0>5"`` (a cycle and a branch); every cluster must be named and a
state may always stay as it is.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..core.atomic import check_outputs, write_atomic
from ..errors import InputError
from ..kernels import hmm
from .tracks import Tracks

#: ``cyclic`` learns the cycle's order by trying every order, up to this many states.
MAX_CYCLIC = 9
#: Suffixes of the table files: CSV or Parquet.
TABLE_SUFFIXES = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet"}


@dataclass
class TrackStates:
    """What :func:`track_states` gives. Tables (pandas DataFrames):

    - ``objects``: one row per object, in the result's order: ``item``, ``track`` (-1: in no track), ``frame``,
      ``raw_state`` (its cluster), ``state`` (smoothed; the raw state when not smoothed or in no track),
      ``state_probability`` (the posterior of that state), ``raw_score`` and ``state_score`` (the method's score of
      each), ``changed`` (smoothing changed it);
    - ``tracks``: one row per track: ``track``, ``parent``, ``daughters``, ``first_frame``, ``last_frame``,
      ``objects``, ``gaps`` (frames without an object), ``fate`` (divided, ends, lasts: to the movie's end),
      ``division_frame`` (the daughters' first frame, -1), ``states`` and ``raw_states`` (the order of the runs,
      ``"0>1>2"``), and per state k ``entry_k`` (first frame in it, -1) and ``frames_k`` (frames in it);
    - ``visits``: one row per run of one state in one track: ``track``, ``state``, ``entry_frame``, ``last_frame``,
      ``frames``, ``complete`` (both ends seen: not cut by the track's start or end, a birth and a division count);
    - ``states``: one row per state: visits, complete visits and their duration (median, mean, sd, quartiles, min,
      max, in frames), ``start`` (share of root tracks starting in it) and ``to_j`` (the transition row).

    Also ``transitions`` (K, K), ``start`` (K,), ``temperature`` (None when not smoothed), ``order`` (as given),
    ``allowed`` (K, K), ``frames`` and ``notes`` (sentences on what was done to the input)."""

    objects: object
    tracks: object
    visits: object
    states: object
    transitions: np.ndarray
    start: np.ndarray
    temperature: float | None
    order: str
    allowed: np.ndarray
    frames: int
    notes: list = field(default_factory=list)
    _paths: dict = field(default_factory=dict, repr=False)

    def write(self, objects=None, tracks=None, visits=None, states=None) -> list[Path]:
        """Write the named tables, each to a ``.csv`` or ``.parquet`` path, whole or not at all; the paths written."""
        given = {name: path for name, path in (("objects", objects), ("tracks", tracks), ("visits", visits),
                                              ("states", states)) if path is not None}
        for name, path in given.items():
            table_format(path, name)
        check_outputs({}, given)
        return [save_table(getattr(self, name), path) for name, path in given.items()]

    def strip(self, smoothed: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """(track ids (B,), states (B, frames)): each track's state in every frame, -1 outside the track (raw: -1 in
        its gaps too), tracks in ascending order. What a per-track strip of states over time draws."""
        ids, first, lengths = self._paths["tracks"], self._paths["first"], self._paths["lengths"]
        path = self._paths["smoothed" if smoothed else "raw"]
        out = np.full((len(ids), self.frames), -1, np.int16)
        for b in range(len(ids)):
            out[b, first[b]:first[b] + lengths[b]] = path[b, :lengths[b]]
        return ids, out

    def napari_tracks(self, objects) -> tuple[np.ndarray, dict, dict]:
        """napari Tracks layer data for the objects in a track: (data (n, 4) track_id, t, y, x from the object
        table's ``centroid_y``/``centroid_x``; properties: state, raw_state, state_probability, item; graph
        {daughter: [mother]}), rows sorted by track then frame."""
        import pandas as pd

        table = objects if isinstance(objects, pd.DataFrame) else \
            pd.DataFrame({k: np.asarray(v) for k, v in objects.items()})
        if not {"centroid_y", "centroid_x"} <= set(table.columns) or len(table) != len(self.objects):
            raise InputError(f"napari tracks need the object table ({len(self.objects)} rows with centroid_y and "
                             "centroid_x) the states were made for.")
        rows = self.objects[self.objects.track >= 0].sort_values(["track", "frame"])
        data = np.stack([rows.track, rows.frame, table.centroid_y.to_numpy()[rows.item],
                         table.centroid_x.to_numpy()[rows.item]], 1).astype(np.float64)
        props = {c: rows[c].to_numpy() for c in ("state", "raw_state", "state_probability", "item")}
        present = set(rows.track.tolist())
        graph = {int(d): [int(m)] for d, m in zip(self.tracks.track, self.tracks.parent) if m >= 0 and d in present
                 and m in present}
        return data, props, graph


def table_format(path, what: str = "table") -> str:
    """``csv`` or ``parquet`` from a path's suffix; any other suffix is one sentence."""
    suffix = Path(path).suffix.lower()
    if suffix not in TABLE_SUFFIXES:
        raise InputError(f"The {what} file {path} must end in .csv or .parquet (the format is taken from the suffix).")
    return TABLE_SUFFIXES[suffix]


def save_table(table, path) -> Path:
    """A DataFrame to ``path`` as CSV or Parquet (by its suffix), through a temporary file renamed into place."""
    kind = table_format(path)

    def write(tmp: Path) -> None:
        if kind == "csv":
            table.to_csv(tmp, index=False)
        else:
            table.to_parquet(tmp, index=False)
    return write_atomic(path, write)


def track_states(result, tracks: Tracks, order="free", smooth: bool = True, stay: float = 0.9) -> TrackStates:
    """Each object's raw and (with ``smooth``) smoothed state, and the per-track, per-visit and per-state tables.

    ``result``: a fitted :class:`~ticlust.result.ClusteringResult` of the objects; ``tracks``: their
    :class:`~ticlust.objects.tracks.Tracks` (one entry per item of the result). ``order``: see the module doc.
    ``stay``: the prior's share of staying in a state (each transition row starts with 10 pseudo-transitions,
    this share of them on the diagonal). Without ``smooth`` the states are the raw ones (a gap keeps the state
    seen before it) and the transitions their counts with the same prior.
    """
    from ..api import check_result

    check_result(result)
    return states_from_scores(result.labels, result.scores, tracks, order, smooth, stay)


def states_from_scores(labels, scores, tracks: Tracks, order="free", smooth: bool = True,
                       stay: float = 0.9) -> TrackStates:
    """:func:`track_states` from each object's cluster (N,) and scores (N, K) (lower = closer; NaN or +inf where a
    score is unknown), as a store's predictions keep them."""
    labels, scores = np.asarray(labels, np.int64), np.asarray(scores, np.float64)
    if scores.ndim != 2 or len(scores) != len(labels) or (len(labels) and not 0 <= labels.min() <= labels.max()
                                                          < scores.shape[1]):
        raise InputError(f"The scores ({scores.shape}) and clusters ({labels.shape}) must be one row of K scores and "
                         "one cluster from 0 to K-1 per object.")
    if not isinstance(tracks, Tracks):
        raise InputError(f"tracks is a {type(tracks).__name__}: give the Tracks that ticlust.object_tracks makes.")
    if tracks.n != len(labels):
        raise InputError(f"The tracks cover {tracks.n} objects but the result has {len(labels)} items: give the tracks "
                         "of the objects that were clustered, in the same order.")
    if isinstance(stay, bool) or not (isinstance(stay, (int, float)) and 0 < stay < 1):
        raise InputError(f"stay={stay!r} must be a number between 0 and 1 (the prior's share of staying in a state).")
    k = scores.shape[1]
    seqs = _sequences(tracks, np.where(np.isnan(scores), np.inf, scores), labels)
    if seqs.chains.scores.shape[0] == 0:
        raise InputError("No object is in a track: give the tracks of the clustered objects.")
    allowed, text = parse_order(order, k, lambda: hmm.raw_counts(seqs.chains, seqs.raw)[0])
    if smooth:
        model = hmm.fit(seqs.chains, allowed, stay, raw=seqs.raw)
        path, prob = hmm.decode(seqs.chains, model)
        trans, start, temperature = np.exp(model.log_trans), np.exp(model.log_start), model.temperature
    else:
        path, prob = _carried(seqs.raw, seqs.chains.lengths), np.full(seqs.raw.shape, np.nan)
        counts, first = hmm.raw_counts(seqs.chains, seqs.raw)
        counts = np.where(allowed, counts + hmm.transition_prior(allowed, stay), 0.0)
        trans, start, temperature = counts / counts.sum(1, keepdims=True), (first + 1) / (first + 1).sum(), None
    objects = _object_table(labels, scores, tracks, seqs, path, prob)
    per_track, visits = _track_tables(tracks, seqs, path, k)
    return TrackStates(objects, per_track, visits, _state_table(visits, trans, start), trans, start, temperature, text,
                       allowed, tracks.frames, list(tracks.notes) + seqs.notes,
                       {"tracks": seqs.ids, "first": seqs.first, "lengths": seqs.chains.lengths, "smoothed": path,
                        "raw": seqs.raw})


@dataclass
class _Sequences:
    """The tracks with objects as HMM sequences: ``ids`` (B,) track ids ascending, ``first`` (B,) first frames,
    ``chains`` (scores padded, lengths, mother's sequence, gap), ``seq``/``at`` (N,) each object's sequence and
    place in it (-1: in no track), ``raw`` (B, T) the objects' clusters (-1 in gaps and past the end), ``notes``."""

    ids: np.ndarray
    first: np.ndarray
    chains: hmm.Chains
    raw: np.ndarray
    seq: np.ndarray
    at: np.ndarray
    notes: list


def _sequences(tracks: Tracks, scores: np.ndarray, labels: np.ndarray) -> _Sequences:
    """Group the objects by track, each track from its first to its last object's frame (NaN rows in the gaps)."""
    inside = tracks.track >= 0
    ids, seq_of = np.unique(tracks.track[inside], return_inverse=True)
    b, k = len(ids), scores.shape[1]
    first = np.full(b, np.iinfo(np.int64).max)
    last = np.full(b, -1)
    np.minimum.at(first, seq_of, tracks.frame[inside])
    np.maximum.at(last, seq_of, tracks.frame[inside])
    lengths = last - first + 1 if b else np.zeros(0, np.int64)
    t_max = int(lengths.max()) if b else 1
    if b * t_max * k > 2 ** 27:
        raise InputError(f"{b} tracks over {t_max} frames with {k} states are too many to smooth at once (over 1 GiB): "
                         "split the movie into shorter parts or fewer tracks.")
    padded = np.full((b, t_max, k), np.nan)
    seq, at = np.full(tracks.n, -1), np.full(tracks.n, -1)
    seq[inside] = seq_of
    at[inside] = tracks.frame[inside] - first[seq_of]
    padded[seq_of, at[inside]] = scores[inside]
    raw = np.full((b, t_max), -1, np.int64)
    raw[seq_of, at[inside]] = labels[inside]
    parent, gap, notes = np.full(b, -1), np.ones(b, np.int64), []
    index = {int(t): i for i, t in enumerate(ids)}
    orphans = 0
    for d, m in tracks.parents.items():
        if d in index and m in index:
            parent[index[d]], gap[index[d]] = index[m], first[index[d]] - last[index[m]]
        elif d in index:
            orphans += 1
    if orphans:
        notes.append(f"{orphans} daughter track(s) have a mother with no clustered object: they start as new tracks.")
    return _Sequences(ids, first, hmm.Chains(padded, lengths, parent, gap), raw, seq, at, notes)


def _carried(raw: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The raw states with every gap holding the state seen before it (-1 past each sequence's end)."""
    raw = raw.copy()
    for t in range(1, raw.shape[1]):
        raw[:, t] = np.where(raw[:, t] < 0, raw[:, t - 1], raw[:, t])
    return np.where(np.arange(raw.shape[1])[None] < lengths[:, None], raw, -1)


def order_steps(order) -> list[list[int]] | str:
    """The syntax of an ``order``: "free", "cyclic", or its chains of cluster numbers (lists of at least two)."""
    if isinstance(order, (list, tuple)) and all(isinstance(v, (int, np.integer)) for v in order):
        order = ">".join(str(int(v)) for v in order)
    if not isinstance(order, str):
        raise InputError(f"order={order!r} must be 'free', 'cyclic' or steps such as '3>5>1>2'.")
    text = order.strip()
    text = text[len("order="):] if text.lower().startswith("order=") else text
    if text.lower() in ("free", "cyclic"):
        return text.lower()
    chains = []
    for chain in text.split(","):
        try:
            steps = [int(v) for v in chain.split(">")]
        except ValueError:
            raise InputError(f"order={order!r}: {chain.strip()!r} is not cluster numbers joined by '>' (e.g. '3>5>1>2'), "
                             "'free' or 'cyclic'.") from None
        if len(steps) < 2 or min(steps) < 0:
            raise InputError(f"order={order!r}: {chain.strip()!r} must step between clusters (at least two, from 0).")
        chains.append(steps)
    return chains


def parse_order(order, k: int, counts=None) -> tuple[np.ndarray, str]:
    """The allowed transitions (K, K) bool of an ``order`` (see the module doc) and the order as text; ``counts``: a
    callable giving the raw transition counts (K, K), which ``cyclic`` orders its cycle by."""
    steps = order_steps(order)
    allowed = np.eye(k, dtype=bool)
    if steps == "free":
        return np.ones((k, k), bool), "free"
    if steps == "cyclic":
        cycle = _best_cycle(counts() if counts is not None else np.ones((k, k)), k)
        for a, b in zip(cycle, cycle[1:] + cycle[:1]):
            allowed[a, b] = True
        return allowed, "cyclic: " + ">".join(map(str, cycle + cycle[:1]))
    bad = sorted({v for chain in steps for v in chain if v >= k})
    if bad:
        raise InputError(f"order={order!r} names cluster(s) {', '.join(map(str, bad))}, but the result has clusters 0 to "
                         f"{k - 1}.")
    for chain in steps:
        for a, b in zip(chain, chain[1:]):
            allowed[a, b] = True
    left = sorted(set(range(k)) - {v for chain in steps for v in chain})
    if left:
        raise InputError(f"order={order!r} names no step into or out of cluster(s) {', '.join(map(str, left))}: name "
                         "every cluster (e.g. '...>4' or ', 0>4'), or use 'free'.")
    return allowed, ", ".join(">".join(map(str, chain)) for chain in steps)


def _best_cycle(counts: np.ndarray, k: int) -> list[int]:
    """The cycle through all ``k`` states (from state 0) that the most raw transitions follow."""
    if k > MAX_CYCLIC:
        raise InputError(f"cyclic learns the order of at most {MAX_CYCLIC} clusters, this result has {k}: give the order "
                         "(e.g. '0>3>1>2>0').")
    if k == 1:
        return [0]
    perms = np.array([(0, *p) for p in itertools.permutations(range(1, k))])
    follow = counts[perms, np.roll(perms, -1, axis=1)].sum(1)
    return [int(v) for v in perms[int(np.argmax(follow))]]


def _object_table(raw: np.ndarray, scores: np.ndarray, tracks: Tracks, seqs: _Sequences, path: np.ndarray,
                  prob: np.ndarray):
    """One row per object (see TrackStates.objects)."""
    import pandas as pd

    state, p = raw.copy(), np.full(len(raw), np.nan)
    inside = seqs.seq >= 0
    state[inside] = path[seqs.seq[inside], seqs.at[inside]]
    p[inside] = prob[seqs.seq[inside], seqs.at[inside]]
    rows = np.arange(len(raw))
    return pd.DataFrame({"item": rows, "track": tracks.track, "frame": tracks.frame, "raw_state": raw, "state": state,
                         "state_probability": p, "raw_score": scores[rows, raw], "state_score": scores[rows, state],
                         "changed": state != raw})


def _runs(states: np.ndarray) -> list[tuple[int, int, int]]:
    """(state, start, length) of each run of equal values, values < 0 skipped."""
    keep = np.flatnonzero(states >= 0)
    if not len(keep):
        return []
    vals = states[keep]
    cut = np.flatnonzero(np.diff(vals) != 0) + 1
    starts = np.concatenate([[0], cut])
    ends = np.concatenate([cut, [len(vals)]])
    return [(int(vals[s]), int(keep[s]), int(keep[e - 1] - keep[s] + 1)) for s, e in zip(starts, ends)]


def _track_tables(tracks: Tracks, seqs: _Sequences, path: np.ndarray, k: int):
    """The per-track and per-visit tables (see TrackStates)."""
    import pandas as pd

    chains, index = seqs.chains, {int(t): i for i, t in enumerate(seqs.ids)}
    kids = {m: [d for d in ds if d in index] for m, ds in tracks.daughters().items()}
    rows, visits = [], []
    for b, t in enumerate(seqs.ids.tolist()):
        length, first = int(chains.lengths[b]), int(seqs.first[b])
        runs = _runs(path[b, :length])
        mine = kids.get(t, [])
        born = chains.parent[b] >= 0 and chains.gap[b] == 1
        divided = any(chains.gap[index[d]] == 1 for d in mine)
        row = {"track": t, "parent": int(seqs.ids[chains.parent[b]]) if chains.parent[b] >= 0 else
               int(tracks.parents.get(t, -1)), "daughters": ";".join(map(str, mine)), "first_frame": first,
               "last_frame": first + length - 1, "objects": int((seqs.raw[b, :length] >= 0).sum())}
        row["gaps"] = length - row["objects"]
        row["fate"] = "divided" if mine else ("lasts" if first + length == tracks.frames else "ends")
        row["division_frame"] = min(int(seqs.first[index[d]]) for d in mine) if mine else -1
        row["states"] = ">".join(str(s) for s, _, _ in runs)
        row["raw_states"] = ">".join(str(s) for s, _, _ in _runs(seqs.raw[b, :length]))
        for s in range(k):
            mine_s = [(st, n) for v, st, n in runs if v == s]
            row[f"entry_{s}"] = first + mine_s[0][0] if mine_s else -1
            row[f"frames_{s}"] = sum(n for _, n in mine_s)
        rows.append(row)
        for j, (s, st, n) in enumerate(runs):
            visits.append({"track": t, "state": s, "entry_frame": first + st, "last_frame": first + st + n - 1,
                           "frames": n, "complete": bool((j > 0 or born) and (j < len(runs) - 1 or divided))})
    cols = ["track", "state", "entry_frame", "last_frame", "frames", "complete"]
    return pd.DataFrame(rows), pd.DataFrame(visits, columns=cols)


def _state_table(visits, trans: np.ndarray, start: np.ndarray):
    """One row per state: its visits' durations (complete visits) and its transition row."""
    import pandas as pd

    rows = []
    for s in range(len(trans)):
        mine = visits[visits.state == s]
        done = mine[mine.complete].frames.to_numpy(np.float64)
        stats = {"median_frames": np.median(done), "mean_frames": done.mean(), "sd_frames": done.std(),
                 "q25_frames": np.percentile(done, 25), "q75_frames": np.percentile(done, 75),
                 "min_frames": done.min(), "max_frames": done.max()} if len(done) else \
            dict.fromkeys(("median_frames", "mean_frames", "sd_frames", "q25_frames", "q75_frames", "min_frames",
                           "max_frames"), np.nan)
        rows.append({"state": s, "visits": len(mine), "complete_visits": len(done), **stats, "start": float(start[s]),
                     **{f"to_{j}": float(trans[s, j]) for j in range(len(trans))}})
    return pd.DataFrame(rows)
