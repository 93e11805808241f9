"""The generated time-lapse (issue 54): same seed, same movie; every track goes through the states in order; daughters
start in interphase the frame after their mother's telophase; ids are one piece; the tracks table matches the labels."""
import numpy as np
import pytest

import ticlust
from ticlust.errors import InputError
from ticlust.objects.tracks import check_one_piece


@pytest.fixture(scope="module")
def movie():
    return ticlust.time_lapse(frames=30, cells=12, shape=(160, 160), seed=7)


def test_same_seed_same_movie_and_relabelling_keeps_it(movie):
    again = ticlust.time_lapse(frames=30, cells=12, shape=(160, 160), seed=7)
    assert np.array_equal(movie.movie, again.movie) and np.array_equal(movie.labels, again.labels)
    twin = ticlust.time_lapse(frames=30, cells=12, shape=(160, 160), seed=7, relabel=True)
    assert np.array_equal(movie.movie, twin.movie) and not np.array_equal(movie.labels, twin.labels)
    assert np.array_equal(movie.labels > 0, twin.labels > 0)
    assert movie.movie.dtype == np.uint16 and movie.labels.shape == (30, 160, 160)


def test_states_follow_the_cycle_and_daughters_follow_their_mother(movie):
    t = movie.tracks
    allowed = {(0, 1), (1, 2), (2, 3), (3, 4), (0, 5)}
    for track in np.unique(t["track_id"]):
        mine = t["track_id"] == track
        states = t["state"][mine][np.argsort(t["frame"][mine])]
        steps = {(a, b) for a, b in zip(states[:-1], states[1:]) if a != b}
        assert steps <= allowed, (track, steps)
    for daughter, mother in movie.parents.items():
        first = t["frame"][t["track_id"] == daughter].min()
        assert first == t["frame"][t["track_id"] == mother].max() + 1
        assert t["state"][(t["track_id"] == daughter) & (t["frame"] == first)][0] == 0
        assert t["state"][(t["track_id"] == mother)][np.argmax(t["frame"][t["track_id"] == mother])] == 4
    kids = np.bincount(list(movie.parents.values()))
    assert kids.max() == 2 and (kids == 2).sum() >= (kids == 1).sum()    # two each (one may start outside the field)


def test_the_tracks_table_is_the_labels(movie):
    t = movie.tracks
    for f, lab, y, x in zip(t["frame"], t["label"], t["y"], t["x"]):
        assert (movie.labels[f] == lab).any()
    painted = sum(len(np.unique(frame)) - 1 for frame in movie.labels)
    assert painted == len(t["frame"])
    check_one_piece(movie.labels)
    assert np.array_equal(movie.states_of(t["frame"][:5], t["label"][:5]), t["state"][:5])


def test_bad_arguments_are_one_sentence():
    with pytest.raises(InputError, match="too small"):
        ticlust.time_lapse(shape=(32, 32))
    with pytest.raises(InputError, match="shares"):
        ticlust.time_lapse(frames=2, cells=2, shape=(64, 64), death=2)
