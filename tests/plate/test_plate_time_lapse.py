"""Time on a plate (issue 54): a manifest with a time-point column, one TIFF per frame in two wells; `ticlust predict
RESULT STORE --time timepoint --smooth ...` writes the states along each well's tracks, and refuses what is not time."""
import csv

import pandas as pd
import pytest
import tifffile

import ticlust
from ticlust.cli import main
from ticlust.errors import InputError
from ticlust.plate.states import store_states


@pytest.fixture(scope="module")
def predicted(tmp_path_factory):
    d = tmp_path_factory.mktemp("plate")
    rows = []
    for well, seed in (("A01", 1), ("B02", 2)):
        tl = ticlust.time_lapse(frames=10, cells=10, shape=(128, 128), seed=seed)
        for t in range(10):
            tifffile.imwrite(d / f"{well}_t{t}.tif", tl.movie[t])
            tifffile.imwrite(d / f"{well}_t{t}_masks.tif", tl.labels[t])
            rows.append({"image": f"{well}_t{t}.tif", "labels": f"{well}_t{t}_masks.tif", "well": well, "timepoint": t})
    with open(d / "plate.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    assert main(["extract", str(d / "plate.csv"), "-o", str(d / "p.zarr"), "--quiet"]) == 0
    assert main(["fit", str(d / "p.zarr"), "--method", "kmeans", "--k", "3", "-o", str(d / "r.npz"), "--quiet"]) == 0
    return d


def test_predict_a_store_with_time_writes_the_states(predicted, capsys):
    d = predicted
    code = main(["predict", str(d / "r.npz"), str(d / "p.zarr"), "--time", "timepoint", "--smooth", "free",
                 "--track-table", str(d / "t.csv"), "--object-table", str(d / "o.parquet"), "--quiet"])
    assert code == 0, capsys.readouterr().err
    tracks, objects = pd.read_csv(d / "t.csv"), pd.read_parquet(d / "o.parquet")
    assert {"movie", "label", "states", "division_frame"} <= set(tracks.columns)
    assert sorted(tracks.movie.unique()) == [0, 1] and tracks.last_frame.max() == 9
    assert {"well", "label", "frame", "track", "state"} <= set(objects.columns)
    assert (objects.groupby("track").well.nunique() == 1).all()         # a track stays in its well
    assert objects.groupby(["well", "label"]).track.nunique().eq(1).all()


def test_time_that_is_not_a_column_or_not_a_store_is_refused(predicted, capsys):
    d = predicted
    with pytest.raises(InputError, match="no such column"):
        store_states(d / "p.zarr", 3, time="hour")
    with pytest.raises(InputError, match="whole numbers"):
        store_states(d / "p.zarr", 3, time="well")
    assert main(["predict", str(d / "r.npz"), str(d / "A01_t0.tif"), "--labels", str(d / "A01_t0_masks.tif"),
                 "--csv", str(d / "x.csv"), "--smooth", "free"]) == 2
    assert "follow the movies of an object store" in capsys.readouterr().err
    assert main(["fit", str(d / "p.zarr"), "--smooth", "free", "-o", str(d / "y.npz")]) == 2
    assert "ticlust predict" in capsys.readouterr().err
