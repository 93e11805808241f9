"""Tracks of a time-lapse from every form a lab has them (issue 54): label ids, a tracks table by label or by point,
napari Tracks data with its graph, a Cell Tracking Challenge lineage, per-item columns; and the odd tracks —
gaps, late starts, early ends, divisions handled; merges, doubled objects, loops refused in one sentence."""
import numpy as np
import pandas as pd
import pytest

import ticlust
from ticlust.errors import InputError
from ticlust.objects.crops import objects_from_labels
from ticlust.objects.tracks import check_one_piece, object_tracks, read_tracks


@pytest.fixture(scope="module")
def movie():
    """A small generated movie (ids = track ids), its relabelled twin (ids per frame) and their objects."""
    tl = ticlust.time_lapse(frames=24, cells=16, shape=(160, 160), seed=3)
    twin = ticlust.time_lapse(frames=24, cells=16, shape=(160, 160), seed=3, relabel=True)
    _, table = objects_from_labels(tl.movie, tl.labels)
    _, twin_table = objects_from_labels(twin.movie, twin.labels)
    return tl, table, twin, twin_table


def as_frame(tracks):
    return pd.DataFrame(tracks)


def test_label_ids_are_track_ids_and_divisions_are_found(movie):
    tl, table, _, _ = movie
    tracks = object_tracks(table, labels=tl.labels)
    assert np.array_equal(tracks.track, table["label"]) and np.array_equal(tracks.frame, table["frame"])
    assert tracks.frames == 24
    assert tracks.parents and all(tl.parents[d] == m for d, m in tracks.parents.items())   # found ones are right
    assert "found from the objects" in tracks.notes[0]
    assert object_tracks(table, divisions=False).parents == {}


def test_a_tracks_table_by_label_gives_the_same_tracks_and_the_lineage(movie, tmp_path):
    tl, table, twin, twin_table = movie
    path = tmp_path / "tracks.csv"
    as_frame(twin.tracks).to_csv(path, index=False)
    tracks = object_tracks(twin_table, path)
    key = dict(zip(zip(table["frame"], table["label"]), table["label"]))        # frame, track id → track id
    got = dict(zip(zip(tracks.frame, tracks.track), tracks.track))
    assert set(got) == set(key)
    assert tracks.parents == tl.parents                       # every division, from parent_track_id
    as_frame(twin.tracks).to_parquet(tmp_path / "tracks.parquet")
    again = object_tracks(twin_table, tmp_path / "tracks.parquet")
    assert np.array_equal(again.track, tracks.track) and again.parents == tracks.parents


def test_napari_tracks_data_and_graph_match_by_position(movie):
    tl, table, twin, twin_table = movie
    t = twin.tracks
    data = np.stack([t["track_id"], t["frame"], t["y"], t["x"]], 1).astype(float)
    graph = {d: [m] for d, m in tl.parents.items()}
    tracks = object_tracks(twin_table, data, graph)
    by_label = object_tracks(twin_table, as_frame(twin.tracks))
    assert np.array_equal(tracks.track, by_label.track) and tracks.parents == tl.parents


def test_a_cell_tracking_challenge_lineage(movie, tmp_path):
    tl, table, _, _ = movie
    rows = [(d, 0, 0, m) for d, m in tl.parents.items()] + [(1, 0, 5, 0)]
    (tmp_path / "res_track.txt").write_text("\n".join(" ".join(map(str, r)) for r in rows) + "\n")
    tracks = object_tracks(table, tmp_path / "res_track.txt", labels=tl.labels)
    assert np.array_equal(tracks.track, table["label"]) and tracks.parents == tl.parents


def test_per_item_columns_of_a_crops_stack():
    items = {"track_id": [5, 5, 5, 9, 9], "frame": [0, 1, 3, 4, 5], "parent_track_id": [-1, -1, -1, 5, 5]}
    tracks = object_tracks(items)
    assert tracks.track.tolist() == [5, 5, 5, 9, 9] and tracks.parents == {9: 5} and tracks.frames == 6
    assert object_tracks(pd.DataFrame({"track": [1, 1], "t": [0, 1]})).frame.tolist() == [0, 1]


def test_gaps_objects_in_no_track_and_trackmate_unit_rows():
    objects = {"label": [1, 2, 3, 1, 2], "frame": [0, 0, 0, 2, 2]}
    table = pd.DataFrame({"TRACK_ID": ["Track ID", "", 7, 7, 7, 8], "FRAME": ["Frame", "", 0, 1, 2, 0],
                          "label": ["", "", 1, 4, 1, 2]})
    tracks = object_tracks(objects, table)
    assert tracks.track.tolist() == [7, 8, -1, 7, -1]
    assert any("in no track" in n for n in tracks.notes)
    assert any("have no clustered object" in n for n in tracks.notes)     # frame 1 of track 7, and the unit rows


@pytest.mark.parametrize("table, graph, words", [
    ({"track_id": [1, 2], "frame": [0, 0], "label": [1, 1]}, None, "claimed by tracks 1 and 2 (a merge)"),
    ({"track_id": [1, 1], "frame": [0, 0], "label": [1, 2]}, None, "Track 1 has 2 objects in frame 0"),
    ({"track_id": [1, 2, 3, 3], "frame": [0, 0, 1, 2], "label": [1, 2, 1, 1], "parent_track_id": [-1, -1, 1, 2]},
     None, "names two mothers"),
    ({"track_id": [1, 2, 3], "frame": [0, 0, 1], "label": [1, 2, 1]}, {3: [1, 2]}, "2 mothers in the graph"),
    ({"track_id": [1, 2], "frame": [0, 0], "label": [1, 2], "parent_track_id": [-1, 1]}, None,
     "before its mother 1 ends"),
    ({"track_id": [1, 2], "frame": [0, 1], "label": [1, 1], "parent_track_id": [2, 1]}, None, "The lineage loops"),
])
def test_odd_tracks_are_refused_in_one_sentence(table, graph, words):
    objects = {"label": [1, 2, 1, 1], "frame": [0, 0, 1, 2]}
    with pytest.raises(InputError, match=words.replace("(", r"\(").replace(")", r"\)")):
        object_tracks(objects, pd.DataFrame(table), graph)


def test_label_ids_in_pieces_or_not_following_objects_are_refused():
    labels = np.zeros((2, 20, 20), np.int32)
    labels[:, 2:5, 2:5] = 1
    labels[1, 10:13, 10:13] = 1                             # id 1 in two pieces in frame 1
    with pytest.raises(InputError, match="Label 1 is 2 separate pieces in frame 1"):
        check_one_piece(labels)
    objects = {"label": [1, 2, 1, 2, 1, 2], "frame": [0, 0, 1, 1, 2, 2], "centroid_y": [5, 100, 100, 5, 5, 100],
               "centroid_x": [5, 100, 100, 5, 5, 100], "area": [30] * 6}
    with pytest.raises(InputError, match="do not follow objects from frame to frame"):
        object_tracks(objects)


def test_bad_tables_are_one_sentence(tmp_path):
    with pytest.raises(InputError, match="5 columns"):
        read_tracks(np.zeros((3, 5)))
    with pytest.raises(InputError, match="no track column"):
        read_tracks({"frame": [0], "label": [1]})
    with pytest.raises(InputError, match="neither"):
        read_tracks({"track_id": [1], "frame": [0]})
    with pytest.raises(InputError, match="no tracks file"):
        read_tracks(tmp_path / "missing.csv")
    (tmp_path / "bad.txt").write_text("1 2 3\n")
    with pytest.raises(InputError, match="lineage file"):
        read_tracks(tmp_path / "bad.txt")
    with pytest.raises(InputError, match="no frame column"):
        object_tracks({"label": [1, 2]})
    with pytest.raises(InputError, match="not whole numbers"):
        object_tracks({"track_id": [1, 1], "frame": [0, 0.5]})
