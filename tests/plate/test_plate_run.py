"""Fit on a sample of an object store, assign every object (ticlust.plate.run; `ticlust fit STORE --fit-sample`,
`ticlust predict`), on a small generated plate: 6 fields × 40 nuclei of 256×256."""
from __future__ import annotations


import numpy as np
import pandas as pd
import pytest

import ticlust
from ticlust.cli import main
from ticlust.errors import InputError
from ticlust.core.execute import LocalBackend
from ticlust.datasets.nuclei import write_nuclei_plate
from ticlust.plate.run import PREDICTIONS, predict_store, sample_objects, sample_quotas
from ticlust.result import load_result


@pytest.fixture(scope="module")
def plate(tmp_path_factory):
    """The plate (with its manifest), its store, and a kmeans result fitted through the CLI on a sample of 120."""
    folder = tmp_path_factory.mktemp("plate")
    manifest = write_nuclei_plate(folder / "plate", fields=6, n=40, shape=(256, 256), seed=3)
    store = ticlust.extract(manifest, folder / "s.zarr", workers=1)
    assert main(["fit", str(store.path), "--fit-sample", "120", "--method", "kmeans", "--k", "3", "-o",
                 str(folder / "km.npz"), "--quiet", "--csv", str(folder / "fit.csv")]) == 0
    return manifest, store, folder / "km.npz", folder


def test_sample_is_seeded_spread_and_capped():
    fields = np.repeat(np.arange(4), [1000, 10, 10, 10])       # one crowded field
    a, b = sample_objects(fields, 40, seed=1), sample_objects(fields, 40, seed=1)
    assert np.array_equal(a, b) and len(a) == 40 and len(np.unique(a)) == 40
    per = np.bincount(fields[a], minlength=4)
    assert per[0] <= 20                                         # at most twice the even share (40 / 4 fields)
    assert not np.array_equal(a, sample_objects(fields, 40, seed=2))
    assert sample_quotas([5, 5], 20).tolist() == [5, 5]         # more than there are: everything
    assert sample_quotas([100, 100, 100], 30).tolist() == [10, 10, 10]


def test_extract_fit_sample_predict_gives_one_row_per_object(files, plate, tmp_path, capsys):
    manifest, store, km, folder = plate
    before = files(manifest.parent)
    result_bytes = km.read_bytes()
    out_csv, out_pq = tmp_path / "p.csv", tmp_path / "p.parquet"
    assert main(["predict", str(km), str(store.path), "--csv", str(out_csv), "--parquet", str(out_pq), "--quiet"]) == 0
    said = capsys.readouterr().out
    assert "120 of 120 objects got the cluster they had in the fit (0 differ)" in said
    table = pd.read_csv(out_csv)
    assert len(table) == len(store)
    assert table[["image", "label"]].equals(store.table[["image", "label"]].reset_index(drop=True))
    for column in ("well", "site", "cluster", "score", "runner_up", "runner_up_score"):
        assert column in table.columns
    kinds = pd.read_csv(manifest.parent / "kinds.csv")
    assert len(table.merge(kinds, on=["image", "label"])) == len(table)    # right image and label id
    assert pd.read_parquet(out_pq).equals(pd.read_parquet(store.path / PREDICTIONS))
    assert (pd.read_parquet(out_pq)["cluster"].to_numpy() == table["cluster"].to_numpy()).all()
    # the fit's own CSV: the sample's rows with the fit's clusters, the same as predict gives them
    fit = pd.read_csv(folder / "fit.csv")
    assert len(fit) == 120
    assert (table["cluster"].to_numpy()[fit["object"]] == fit["cluster"].to_numpy()).all()
    config = load_result(km).config
    assert config["fit_sample"]["size"] == 120 and config["fit_sample"]["seed"] == 0
    assert config["fit_sample"]["index"] == fit["object"].tolist()
    assert files(manifest.parent) == before and km.read_bytes() == result_bytes      # inputs untouched


def test_a_killed_prediction_resumes_to_the_same_table(plate, tmp_path):
    _, store, km, _ = plate
    whole = predict_store(km, store).table

    class Dies(LocalBackend):
        """Killed after two parts are done (predict hands every part out at once, through imap)."""

        def imap(self, fn, tasks):
            for i, task in enumerate(tasks):
                if i == 2:
                    raise KeyboardInterrupt
                yield i, fn(task)

    other = ticlust.fit(store.crops[:60], method="kmeans", k=3, seed=5, progress=False)
    with pytest.raises(KeyboardInterrupt):
        predict_store(other, store, backend=Dies())           # two parts now hold another result's predictions
    again = predict_store(km, store)
    assert again.skipped == 4 and again.parts == 6            # the two parts of the other result are re-predicted
    pd.testing.assert_frame_equal(again.table, whole)
    with pytest.raises(KeyboardInterrupt):
        predict_store(km, store.path, backend=Dies())         # killed while it finds the parts already done
    assert predict_store(km, store).skipped == 6


def test_python_predict_accepts_a_store_and_refuses_an_edited_result(plate):
    _, store, km, _ = plate
    result = load_result(km)
    done = ticlust.predict(result, store.path)
    assert done.objects == len(store) and done.sample_changed == 0
    result.state = None
    with pytest.raises(InputError, match="edited by hand"):
        ticlust.predict(result, store)


def test_a_result_of_other_crops_or_options_is_refused_in_one_sentence(plate, tmp_path, capsys):
    manifest, store, km, _ = plate
    small = ticlust.fit(np.random.default_rng(0).random((20, 16, 16)), method="kmeans", k=2, progress=False)
    small.save(tmp_path / "small.npz")
    assert main(["predict", str(tmp_path / "small.npz"), str(store.path), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "fitted on 16×16 crops" in err and "32×32" in err and err.count("\n") == 1
    other = ticlust.extract(manifest, tmp_path / "flat.zarr", workers=1, orient=False, crop_size=store.size)
    assert main(["predict", str(km), str(other.path), "--quiet"]) == 2
    assert "orient=True" in capsys.readouterr().err
    assert not (other.path / PREDICTIONS).exists()


def test_predict_a_stack_and_a_field_with_labels(plate, tmp_path):
    manifest, store, km, _ = plate
    stack = tmp_path / "crops.npy"
    np.save(stack, store.crops[:50])
    assert main(["predict", str(km), str(stack), "--csv", str(tmp_path / "s.csv"), "--batch-size", "16", "--quiet"]) == 0
    rows = pd.read_csv(tmp_path / "s.csv")
    assert rows["item"].tolist() == list(range(50))
    assert (rows["cluster"].to_numpy() == store_clusters(store)[:50]).all()
    image, mask = manifest.parent / "A01_s0.tif", manifest.parent / "A01_s0_cp_masks.tif"
    assert main(["predict", str(km), str(image), "--labels", str(mask), "--parquet", str(tmp_path / "f.parquet"),
                 "--quiet"]) == 0
    field = pd.read_parquet(tmp_path / "f.parquet")
    first = store.table[store.table["field_index"] == 0]
    assert field["label"].tolist() == first["label"].tolist()
    assert (field["cluster"].to_numpy() == store_clusters(store)[:len(first)]).all()


def test_the_one_predict_routes_a_stack_a_field_and_a_store(plate, tmp_path):
    """ticlust.predict: a stack (array or file) gives a ClusteringResult, a field with labels (files) a table
    of its objects, a store a StorePrediction; what applies to one route only is refused on the others."""
    manifest, store, km, _ = plate
    ticlust.predict(km, store.path)
    np.save(tmp_path / "crops.npy", store.crops[:30])
    from_file = ticlust.predict(km, tmp_path / "crops.npy")
    assert np.array_equal(from_file.labels, ticlust.predict(load_result(km), store.crops[:30]).labels)
    assert np.array_equal(from_file.labels, store_clusters(store)[:30])
    events = []
    field = ticlust.predict(str(km), manifest.parent / "A01_s0.tif", labels=manifest.parent / "A01_s0_cp_masks.tif",
                            batch_size=7, progress=events.append)
    first = store.table[store.table["field_index"] == 0]
    assert field["label"].tolist() == first["label"].tolist()
    assert (field["cluster"].to_numpy() == store_clusters(store)[:len(first)]).all()
    assert events and events[-1].step == events[-1].total == len(first)
    with pytest.raises(InputError, match="labels does not apply to an object store"):
        ticlust.predict(km, store.path, labels=manifest.parent / "A01_s0_cp_masks.tif")
    with pytest.raises(InputError, match="aligned=True does not apply to a field"):
        ticlust.predict(km, manifest.parent / "A01_s0.tif", labels=manifest.parent / "A01_s0_cp_masks.tif",
                        aligned=True)
    with pytest.raises(InputError, match="apply to an object store"):
        ticlust.predict(km, tmp_path / "crops.npy", csv=tmp_path / "x.csv")


def store_clusters(store) -> np.ndarray:
    return pd.read_parquet(store.path / PREDICTIONS)["cluster"].to_numpy()


def test_shape_kmeans_fits_and_predicts_the_masks_contours(plate, tmp_path, capsys):
    _, store, _, _ = plate
    out = tmp_path / "shape.npz"
    assert main(["fit", str(store.path), "--fit-sample", "80", "--method", "shape-kmeans", "--k", "3", "-o", str(out),
                 "--quiet"]) == 0
    capsys.readouterr()
    assert main(["predict", str(out), str(store.path), "--parquet", str(tmp_path / "shape.parquet"), "--quiet"]) == 0
    said = capsys.readouterr().out
    # not exact: predict aligns each contour alone to the consensus, the fit aligned the sample jointly
    assert int(said.split("fit sample: ")[1].split(" of ")[0]) >= 76
    assert len(pd.read_parquet(tmp_path / "shape.parquet")) == len(store)


def test_ai_kmeans_on_a_sample(plate, tmp_path, capsys):
    _, store, _, _ = plate
    out = tmp_path / "ai.npz"
    assert main(["fit", str(store.path), "--fit-sample", "60", "--method", "ai-kmeans", "--k", "3", "--set", "steps=5",
                 "--set", "affine_steps=5", "--set", "max_iter=3", "--set", "predict_steps=20", "-o", str(out),
                 "--quiet"]) == 0
    assert load_result(out).config["invariances"] == "similarity"           # the objects route's parameters
    capsys.readouterr()
    assert main(["predict", str(out), str(store.path), "--quiet"]) == 0
    said = capsys.readouterr().out
    agree = int(said.split("fit sample: ")[1].split(" of ")[0])
    assert agree >= 50                                  # aligned from scratch: not exact, but nearly all
