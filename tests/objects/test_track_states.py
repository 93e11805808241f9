"""States along tracks (issue 54): ticlust.track_states on hand-made results (gaps, late starts, early ends,
divisions, orders) and on a generated movie fitted for real; the tables, the strip, napari's Tracks data, and
the writers."""
import numpy as np
import pandas as pd
import pytest

import ticlust
from ticlust.errors import InputError
from ticlust.objects.crops import objects_from_labels
from ticlust.objects.states import parse_order, states_from_scores, track_states
from ticlust.objects.tracks import Tracks
from ticlust.result import ClusteringResult


def result_of(states, k=3, wrong=(), seed=0):
    """A result whose scores put each object nearest its state (0 vs 1), but nearest another one at ``wrong``."""
    states = np.asarray(states)
    scores = np.ones((len(states), k), np.float32)
    scores[np.arange(len(states)), states] = 0.0
    for i in wrong:
        scores[i] = 1.0
        scores[i, (states[i] + 1) % k] = 0.0
        scores[i, states[i]] = 0.2
    return ClusteringResult(labels=scores.argmin(1), scores=scores, prototypes=np.zeros((k, 4, 4), np.float32),
                            method="kmeans", config={})


@pytest.fixture
def lineage():
    """Mother 1 (frames 0-9: 0,0,0,0,1,1,1,2,2,2; frame 5 missing), daughters 2 and 3 from frame 10 (state 0,
    one of them ending at 13), track 4 starting late (frame 6) and lasting to the end (frame 15)."""
    rows = [(1, f, s) for f, s in zip(range(10), [0, 0, 0, 0, 1, 1, 1, 2, 2, 2]) if f != 5]
    rows += [(2, f, 0) for f in range(10, 16)] + [(3, f, 0) for f in range(10, 14)]
    rows += [(4, f, 0 if f < 11 else 1) for f in range(6, 16)]
    track, frame, state = map(np.array, zip(*rows))
    return Tracks(track, frame, {2: 1, 3: 1}, 16), state


def test_tables_of_a_lineage_with_a_gap_late_start_and_early_end(lineage):
    tracks, state = lineage
    wrong = [int(np.flatnonzero((tracks.track == 1) & (tracks.frame == 2))[0])]        # one flicker in the mother
    done = track_states(result_of(state, wrong=wrong), tracks, order="0>1>2>0")
    assert (done.objects.state.to_numpy() == state).all()
    assert done.objects.raw_state.to_numpy()[wrong[0]] == 1 and done.objects.changed.sum() == 1
    t = done.tracks.set_index("track")
    assert t.loc[1, "gaps"] == 1 and t.loc[1, "fate"] == "divided" and t.loc[1, "division_frame"] == 10
    assert t.loc[1, "daughters"] == "2;3" and t.loc[2, "parent"] == 1
    assert t.loc[1, "states"] == "0>1>2" and t.loc[1, "raw_states"] == "0>1>0>1>2"
    assert (t.loc[1, "entry_1"], t.loc[1, "frames_1"], t.loc[1, "frames_2"]) == (4, 3, 3)      # the gap counts
    assert t.loc[3, "fate"] == "ends" and t.loc[2, "fate"] == "lasts" and t.loc[4, "first_frame"] == 6
    v = done.visits
    mother = v[v.track == 1].set_index("state")
    assert not mother.loc[0, "complete"] and mother.loc[1, "complete"] and mother.loc[2, "complete"]   # cut by start
    assert v[v.track == 2].complete.tolist() == [False]             # born, but still in state 0 at the movie's end
    assert v[(v.track == 4) & (v.state == 0)].complete.tolist() == [False]        # started late: not seen entering
    s = done.states.set_index("state")
    assert s.loc[1, "median_frames"] == 3 and s.loc[1, "complete_visits"] == 1
    assert np.allclose(done.transitions.sum(1), 1) and done.transitions[1, 0] == 0          # 1 → 0 not allowed
    assert np.allclose(done.states[[f"to_{j}" for j in range(3)]].to_numpy(), done.transitions)


def test_smoothed_paths_keep_the_order_given(lineage):
    tracks, state = lineage
    rng = np.random.default_rng(0)
    wrong = rng.choice(len(state), 8, replace=False)
    for order in ("0>1>2", "0>1>2>0", "cyclic"):
        done = track_states(result_of(state, wrong=wrong), tracks, order=order)
        ids, strip = done.strip()
        for row in strip:
            seq = row[row >= 0]
            steps = {(a, b) for a, b in zip(seq[:-1], seq[1:]) if a != b}
            assert all(done.allowed[a, b] for a, b in steps), (order, steps)
        mother_last = strip[list(ids).index(1)][9]
        for d in (2, 3):
            assert done.allowed[mother_last, strip[list(ids).index(d)][10]]       # across the division too


def test_raw_states_only_and_the_strip(lineage):
    tracks, state = lineage
    done = track_states(result_of(state, wrong=[0]), tracks, smooth=False)
    assert (done.objects.state == done.objects.raw_state).all() and done.temperature is None
    ids, strip = done.strip(smoothed=False)
    assert ids.tolist() == [1, 2, 3, 4] and strip.shape == (4, 16)
    assert strip[0, 5] == -1 and done.strip()[1][0, 5] == 1          # the gap: unseen raw, carried when not smoothed
    assert strip[3, :6].tolist() == [-1] * 6


def test_napari_tracks_data_graph_and_properties(lineage):
    tracks, state = lineage
    done = track_states(result_of(state), tracks)
    table = {"centroid_y": np.arange(len(state), dtype=float), "centroid_x": np.zeros(len(state))}
    data, props, graph = done.napari_tracks(table)
    assert data.shape == (len(state), 4) and graph == {2: [1], 3: [1]}
    assert (np.diff(data[:, 0]) >= 0).all() and set(props) == {"state", "raw_state", "state_probability", "item"}
    assert np.array_equal(data[:, 2], props["item"].astype(float))
    with pytest.raises(InputError, match="centroid_y"):
        done.napari_tracks({"centroid_y": [1.0]})


def test_writing_the_tables(lineage, tmp_path):
    tracks, state = lineage
    done = track_states(result_of(state), tracks)
    paths = done.write(objects=tmp_path / "o.csv", tracks=tmp_path / "t.parquet", visits=tmp_path / "v.csv",
                       states=tmp_path / "s.parquet")
    assert [p.name for p in paths] == ["o.csv", "t.parquet", "v.csv", "s.parquet"]
    assert len(pd.read_csv(tmp_path / "o.csv")) == len(state)
    assert pd.read_parquet(tmp_path / "t.parquet").track.tolist() == [1, 2, 3, 4]
    assert not list(tmp_path.glob("*.partial"))
    with pytest.raises(InputError, match="must end in .csv or .parquet"):
        done.write(tracks=tmp_path / "t.txt")
    with pytest.raises(InputError, match="same file"):
        done.write(tracks=tmp_path / "x.csv", visits=tmp_path / "x.csv")


def test_orders_and_bad_arguments_are_one_sentence(lineage):
    tracks, state = lineage
    result = result_of(state)
    allowed, text = parse_order("order=0>1, 1>2>0", 3)
    assert text == "0>1, 1>2>0" and allowed[0, 1] and allowed[2, 0] and not allowed[1, 0] and allowed.diagonal().all()
    for order, words in (("0>1", "no step into or out of cluster"), ("0>1>2>7", "names cluster"),
                         ("0>x", "not cluster numbers"), ("3", "at least two"), (5, "must be 'free'")):
        with pytest.raises(InputError, match=words):
            track_states(result, tracks, order=order)
    with pytest.raises(InputError, match="stay"):
        track_states(result, tracks, stay=1.5)
    with pytest.raises(InputError, match="cover"):
        track_states(result, Tracks(tracks.track[:-1], tracks.frame[:-1]))
    with pytest.raises(InputError, match="ClusteringResult"):
        track_states(object(), tracks)
    with pytest.raises(InputError, match="No object is in a track"):
        track_states(result, Tracks(np.full(tracks.n, -1), tracks.frame))
    with pytest.raises(InputError, match="one row of K scores"):
        states_from_scores([0, 5], np.zeros((2, 3)), Tracks([1, 1], [0, 1]))
    with pytest.raises(InputError, match="at most 9"):
        parse_order("cyclic", 10, lambda: np.ones((10, 10)))


def test_a_generated_movie_fitted_for_real_is_smoothed_not_spoiled():
    """gmm on the route's crops of a small generated movie: smoothing within the true order raises the per-object
    accuracy and never lowers it for free or cyclic."""
    tl = ticlust.time_lapse(frames=40, cells=30, shape=(256, 256), seed=5, bad_frames=0.1)
    stack, table = objects_from_labels(tl.movie, tl.labels, orient=True, normalize=True, rescale=True)
    truth = tl.states_of(table["frame"], table["label"])
    result = ticlust.fit(stack, method="gmm", k=6, seed=0, progress=False)
    tracks = ticlust.object_tracks(table, labels=tl.labels)
    from ticlust.metrics import _contingency
    from scipy.optimize import linear_sum_assignment

    rows, cols = linear_sum_assignment(-_contingency(truth, result.labels))
    named = dict(zip(rows, cols))
    acc = lambda states: float(np.mean([named.get(s, -1) == t for s, t in zip(states, truth)]))
    cluster = {state: c for c, state in named.items()}
    order = ">".join(str(cluster[s]) for s in (0, 1, 2, 3, 4, 0)) + f", {cluster[0]}>{cluster[5]}"
    raw = acc(result.labels)
    for o in ("free", "cyclic"):
        assert acc(track_states(result, tracks, order=o).objects.state) >= raw - 0.005, o
    assert acc(track_states(result, tracks, order=order).objects.state) >= raw + 0.03
