"""Curating a plate (ticlust.plate.curate, ``ticlust curate RESULT --store STORE``): hand edits named by the store's
object numbers, kept through every re-predict and shown in the table; merges renumber the predictions without
aligning anything, a Refine predicts every object anew. A small generated plate (4 fields, 72 objects) with kmeans."""
import shutil

import numpy as np
import pandas as pd
import pytest

import ticlust
from ticlust.cli import main
from ticlust.plate import curate, run as plate_run
from ticlust.plate.run import PREDICTIONS, fit_store
from ticlust.result import OUTLIER


@pytest.fixture(scope="module")
def made(tmp_path_factory, kmeans_plate):
    """(folder, the store, the kmeans result fitted on 40 of its objects, predicted into the store)."""
    folder = tmp_path_factory.mktemp("curate")
    _, store, result = kmeans_plate(folder, fields=4, n=20, size=256, seed=3, sample=40)
    result.save(folder / "km.npz")
    return folder, store, result


@pytest.fixture
def plate(made, tmp_path, predicted_copy):
    """A fresh copy of the store holding the fitted result's predictions, and the result."""
    folder, store, result = made
    return predicted_copy(store, result, tmp_path / "s.zarr"), result


def outside(result, store, count=2):
    sample = set(curate.fit_sample(result).tolist())
    return [i for i in range(len(store)) if i not in sample][:count]


def test_a_move_outside_the_sample_is_a_pin_the_model_keeps_its_state(plate, tmp_path):
    store, result = plate
    o = outside(result, store)
    moved = curate.move(result, o, 2, len(store))
    assert moved.state is not None and moved.labels is result.labels
    assert moved.config[curate.PINS] == {"objects": o, "clusters": [2, 2]} and moved.edits[-1]["op"] == "pin"
    assert curate.PINS not in result.config and not result.edits        # the input result is unchanged
    marked = curate.mark_outliers(moved, [o[1]], len(store))
    objects, values = curate.plate_pins(marked)
    assert objects.tolist() == o and values.tolist() == [2, OUTLIER]
    done = curate.repredict(marked, store, previous=result, device="cpu", csv=tmp_path / "dock.csv")
    assert done.relabelled and done.by_hand == 1 and done.outliers == 1
    table = pd.read_parquet(store.path / PREDICTIONS)
    assert table["by_hand"].tolist() == [i == o[0] for i in range(len(store))]
    assert table["outlier"].tolist() == [i == o[1] for i in range(len(store))]
    assert table["cluster"][o[0]] == 2
    # the moved result is still a fitted one: ticlust predict gives the same table, row for row
    marked.save(tmp_path / "marked.npz")
    assert main(["predict", str(tmp_path / "marked.npz"), str(store.path), "--csv", str(tmp_path / "cli.csv"),
                 "--quiet"]) == 0
    assert (tmp_path / "dock.csv").read_bytes() == (tmp_path / "cli.csv").read_bytes()


def test_a_move_inside_the_sample_is_curations_and_refine_keeps_it(plate):
    store, result = plate
    sample = curate.fit_sample(result)
    target = (int(result.labels[0]) + 1) % result.k
    moved = curate.move(result, [int(sample[0])], target, len(store))
    assert moved.state is None and moved.pinned[0] == target and moved.edits[-1]["op"] == "move"
    assert curate.PINS not in moved.config
    refined = curate.refine(store, moved, device="cpu")
    assert refined.state is not None and refined.labels[0] == target
    done = curate.repredict(refined, store, previous=moved, device="cpu")
    assert not done.relabelled and done.sample_size == len(sample)
    table = pd.read_parquet(store.path / PREDICTIONS)
    assert table["cluster"][int(sample[0])] == target and table["by_hand"][int(sample[0])]
    assert int(table["by_hand"].sum()) == 1


def test_a_merge_renumbers_the_predictions_without_aligning_anything(plate, monkeypatch):
    store, result = plate
    before = pd.read_parquet(store.path / PREDICTIONS)
    o = outside(result, store, 1)
    edited = curate.merge(curate.move(result, o, 2, len(store)), 0, 2)
    assert edited.config[curate.PINS]["clusters"] == [0] and edited.k == 2
    assert curate.cluster_map(result, edited).tolist() == [0, 1, 0]

    def no_alignment(*_args, **_kwargs):
        raise AssertionError("a merge must not predict anything again")
    monkeypatch.setattr(plate_run, "predict_part", no_alignment)
    done = curate.repredict(edited, store, previous=result, device="cpu")
    assert done.relabelled and done.objects == len(store)
    after = pd.read_parquet(store.path / PREDICTIONS)
    free = ~after["by_hand"].to_numpy()
    assert (after["cluster"][free].to_numpy() == np.array([0, 1, 0])[before["cluster"][free]]).all()
    lost = np.isin(before["cluster"], [0, 2]) & np.isin(before["runner_up"], [0, 2])
    assert (after["runner_up"][lost] == -1).all() and after["runner_up_score"][lost].isna().all()
    assert (after["score"] == before["score"]).all()


def test_a_stopped_renumbering_resumes_to_the_same_bytes(plate, tmp_path):
    store, result = plate
    copy = ticlust.open_objects(shutil.copytree(store.path, tmp_path / "copy.zarr"))
    edited = curate.merge(result, 1, 0)
    curate.repredict(edited, copy, previous=result)

    class Stop(Exception):
        pass

    def stop_after_two(event):
        if event.step == 2:
            raise Stop
    with pytest.raises(Stop):
        curate.repredict(edited, store, previous=result, progress=stop_after_two)
    tags = [plate_run.part_digest(p) for p in sorted(store.path.glob("fields/*/predict.parquet"))]
    assert len(set(tags)) == 2                                     # half renumbered, half not: nothing joined yet
    assert plate_run.part_digest(store.path / PREDICTIONS) == tags[-1]
    curate.repredict(edited, store, previous=result)
    for name in ["predictions.parquet"] + [f"fields/{p.parent.name}/predict.parquet"
                                           for p in store.path.glob("fields/*/predict.parquet")]:
        assert (store.path / name).read_bytes() == (copy.path / name).read_bytes(), name


def test_split_and_other_fits_are_predicted_anew_and_an_unfitted_edit_is_refused(plate):
    store, result = plate
    split = curate.split(store, result, 0, device="cpu")
    assert split.k == 4 and curate.cluster_map(result, split) is None
    with pytest.raises(ticlust.InputError, match="Refine it, then predict again"):
        curate.repredict(split, store, previous=result)
    other, _ = fit_store(store, "kmeans", k=3, sample=40, seed=5, device="cpu")
    assert curate.cluster_map(result, other) is None or np.allclose(other.prototypes, result.prototypes)
    done = curate.repredict(other, store, previous=result, device="cpu")
    assert not done.relabelled


def test_results_of_no_store_or_another_store_are_refused(plate, made, tmp_path):
    store, result = plate
    stack = ticlust.fit(np.random.default_rng(0).random((20, 8, 8)), "kmeans", k=2, device="cpu")
    with pytest.raises(ticlust.InputError, match="not fitted on an object store"):
        curate.move(stack, [0], 1, len(store))
    other = ticlust.extract(made[0] / "plate" / "plate.csv", tmp_path / "other.zarr", crop_size=40)
    with pytest.raises(ticlust.InputError, match="not on"):
        curate.repredict(result, other)
    with pytest.raises(ticlust.InputError, match="out of range"):
        curate.move(result, [len(store)], 0, len(store))
    with pytest.raises(ticlust.InputError, match="not a cluster"):
        curate.move(result, outside(result, store, 1), 3, len(store))


def test_cli_curate_with_a_store(plate, made, tmp_path, capsys):
    store, result = plate
    km = made[0] / "km.npz"
    out, csv = tmp_path / "m.npz", tmp_path / "m.csv"
    assert main(["curate", str(km), "--store", str(store.path), "--merge", "0", "1", "-o", str(out), "--csv",
                 str(csv), "--quiet"]) == 0
    said = capsys.readouterr().out
    assert "renumbered (nothing aligned)" in said and f"wrote {csv}" in said
    assert len(pd.read_csv(csv)) == len(store) and ticlust.load_result(out).k == 2
    refined = tmp_path / "r.npz"
    assert main(["curate", str(out), "--store", str(store.path), "--refine", "-o", str(refined), "--quiet"]) == 0
    assert "predicted anew" in capsys.readouterr().out
    assert main(["curate", str(km), "--refine", "-o", str(tmp_path / "x.npz")]) == 2
    assert "--split and --refine need" in capsys.readouterr().err
    assert not (tmp_path / "x.npz").exists()


def test_pin_columns_on_rows_of_a_block():
    pins = (np.array([3, 7, 9]), np.array([1, OUTLIER, 0]))
    cols = curate.pin_columns({"cluster": np.array([2, 2, 2, 2]), "score": np.ones(4)}, np.arange(6, 10), pins)
    assert cols["cluster"].tolist() == [2, 2, 2, 0] and cols["by_hand"].tolist() == [False, False, False, True]
    assert cols["outlier"].tolist() == [False, True, False, False]
    assert curate.pin_columns({"cluster": np.array([1])}, np.array([0]), (np.zeros(0, int), np.zeros(0, int))) == \
        {"cluster": np.array([1])}


def test_split_off_a_selection_renumbers_and_pins_a_new_cluster(plate, tmp_path):
    """A lasso's objects split off as cluster K: inside the sample through curation, outside it pinned; Re-predict
    renumbers (nothing aligned) and the table shows the new cluster; objects all outside the sample are refused."""
    store, result = plate
    sample = curate.fit_sample(result)
    chosen = [int(sample[0]), int(sample[1]), *outside(result, store, 3)]
    off = curate.split_off(result, chosen, len(store))
    assert off.k == result.k + 1 and [e["op"] for e in off.edits] == ["split_off", "pin"]
    assert curate.cluster_map(result, off) is not None
    done = curate.repredict(off, store, previous=result, device="cpu", csv=tmp_path / "off.csv")
    assert done.relabelled and done.by_hand == len(chosen)
    table = pd.read_csv(tmp_path / "off.csv")
    assert set(np.flatnonzero(table["cluster"] == result.k)) == set(chosen)
    with pytest.raises(ticlust.InputError, match="None of the 3 objects is in the fit sample"):
        curate.split_off(result, outside(result, store, 3), len(store))
