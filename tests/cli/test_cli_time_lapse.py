"""`ticlust fit MOVIE --labels LABELS [--tracks TRACKS] --smooth ...` and its state tables (issue 54), run through the
command line's own entry point; the refusals before any fit."""
import numpy as np
import pandas as pd
import pytest
import tifffile

import ticlust
from ticlust.cli import main


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A generated movie as TIFFs: labels with track ids, relabelled labels with a tracks table, crops with items."""
    d = tmp_path_factory.mktemp("movie")
    tl = ticlust.time_lapse(frames=16, cells=14, shape=(160, 160), seed=2)
    twin = ticlust.time_lapse(frames=16, cells=14, shape=(160, 160), seed=2, relabel=True)
    tifffile.imwrite(d / "movie.tif", tl.movie)
    tifffile.imwrite(d / "labels.tif", tl.labels)
    tifffile.imwrite(d / "relabelled.tif", twin.labels)
    pd.DataFrame(twin.tracks).to_csv(d / "tracks.csv", index=False)
    stack, table = ticlust.objects_from_labels(tl.movie, tl.labels, size=32)
    np.save(d / "crops.npy", stack)
    pd.DataFrame({"track_id": table["label"], "frame": table["frame"]}).to_csv(d / "items.csv", index=False)
    return d, tl


def run(*args):
    return main([str(a) for a in args])


def test_a_movie_with_track_id_labels_smoothed_in_an_order(files, capsys):
    d, tl = files
    out = d / "a"
    out.mkdir()
    code = run("fit", d / "movie.tif", "--labels", d / "labels.tif", "--method", "kmeans", "--k", "3", "--smooth",
               "order=0>1>2>0", "-o", out / "r.npz", "--csv", out / "r.csv", "--object-table", out / "o.parquet",
               "--track-table", out / "t.csv", "--visit-table", out / "v.csv", "--state-table", out / "s.parquet",
               "--quiet")
    printed = capsys.readouterr()
    assert code == 0, printed.err
    assert "smoothed (0>1>2>0" in printed.out and "divisions were found" in printed.err
    rows = pd.read_csv(out / "r.csv")
    assert {"label", "frame", "track", "state", "state_probability", "cluster"} <= set(rows.columns)
    assert np.array_equal(rows.track, rows.label)
    tracks = pd.read_csv(out / "t.csv")
    assert set(tracks.track) == set(rows.track) and {"entry_0", "frames_2", "division_frame"} <= set(tracks.columns)
    assert len(pd.read_parquet(out / "o.parquet")) == len(rows) and len(pd.read_parquet(out / "s.parquet")) == 3
    assert set(pd.read_csv(out / "v.csv").columns) >= {"track", "state", "frames", "complete"}


def test_a_tracks_table_with_relabelled_labels_gives_the_same_tracks(files, capsys):
    d, tl = files
    out = d / "b"
    out.mkdir()
    code = run("fit", d / "movie.tif", "--labels", d / "relabelled.tif", "--tracks", d / "tracks.csv", "--method",
               "kmeans", "--k", "3", "-o", out / "r.npz", "--track-table", out / "t.csv", "--quiet")
    assert code == 0, capsys.readouterr().err
    tracks = pd.read_csv(out / "t.csv").set_index("track")
    assert {d_: m for d_, m in tracks.parent.items() if m >= 0} == {d_: m for d_, m in tl.parents.items()
                                                                   if d_ in tracks.index and m in tracks.index}


def test_a_crops_stack_with_its_items_table(files, capsys):
    d, _ = files
    code = run("fit", d / "crops.npy", "--tracks", d / "items.csv", "--method", "kmeans", "--k", "3", "--smooth",
               "cyclic", "-o", d / "c.npz", "--track-table", d / "c.csv", "--quiet")
    printed = capsys.readouterr()
    assert code == 0, printed.err
    assert "smoothed (cyclic: 0>" in printed.out
    items = pd.read_csv(d / "items.csv")
    assert sorted(pd.read_csv(d / "c.csv").track) == sorted(items.track_id.unique())


@pytest.mark.parametrize("extra, words", [
    (["--sample", "digits", "--smooth", "free"], "do not go with --sample"),
    (["--smooth", "0>x"], "not cluster numbers"),
    (["--track-table", "t.txt"], "must end in .csv or .parquet"),
    (["--tracks", "items.csv", "--track-table", "items.csv"], "is the input --tracks"),
    (["--smooth", "order=0>1>2>7"], "names cluster(s) 7"),
])
def test_refusals_are_one_sentence(files, capsys, extra, words, monkeypatch):
    d, _ = files
    monkeypatch.chdir(d)
    given = ["fit", *([] if "--sample" in extra else ["crops.npy"]), "--method", "kmeans", "--k", "3", "-o",
             d / "x.npz", "--quiet", *extra]
    if "--tracks" not in extra and "--sample" not in extra:
        given += ["--tracks", "items.csv"]
    assert run(*given) == 2
    assert words in capsys.readouterr().err
