"""`ticlust predict RESULT STORE --save-aligned`: every object aligned with its prototype, written into the
store part by part (issue "Plates and a million objects", item 4), with real files on disk."""
import numpy as np
import pytest

import ticlust
from ticlust import load_result
from ticlust.cli import main
from ticlust.errors import InputError
from ticlust.datasets.nuclei import write_nuclei_plate
from ticlust.plate.run import PART_ALIGNED, aligned_images, fit_store, predict_store


@pytest.fixture(scope="module")
def plate(tmp_path_factory):
    """A 3-field store and a rigid-kmeans result fitted on a sample of it (rigid: the cheapest aligning method)."""
    folder = tmp_path_factory.mktemp("aligned")
    manifest = write_nuclei_plate(folder / "plate", fields=3, n=30, shape=(224, 224), seed=5)
    store = ticlust.extract(manifest, folder / "plate.zarr")
    result, _ = fit_store(store, method="rigid-kmeans", k=3, sample=60, progress=False)
    path = result.save(folder / "rigid.npz")
    return store, path


def test_save_aligned_writes_each_objects_alignment_as_predict_makes_it(plate, capsys):
    store, path = plate
    assert main(["predict", str(path), str(store.path), "--save-aligned", "--quiet"]) == 0
    pictures = aligned_images(store)
    assert pictures.shape == (len(store),) + store.crops.shape[1:]
    table = store.table
    field = table["field_index"].to_numpy()
    one = np.flatnonzero(field == field[-1])                         # the last part's objects, read on their own
    direct = ticlust.predict(load_result(path), store.crops[one], aligned=True)
    np.testing.assert_allclose(pictures[one], direct.aligned, atol=1e-5)
    assert not any(p.name.endswith(".partial") for p in store.path.rglob("*"))


def test_save_aligned_resumes_and_is_remade_for_another_result(plate, tmp_path):
    store, path = plate
    predict_store(path, store, save_aligned=True)
    parts = sorted(store.path.glob(f"fields/*/{PART_ALIGNED}"))
    stamps = [p.stat().st_mtime_ns for p in parts]
    again = predict_store(path, store, save_aligned=True)
    assert again.skipped == again.parts and [p.stat().st_mtime_ns for p in parts] == stamps
    other, _ = fit_store(store, method="rigid-kmeans", k=2, sample=60, seed=1, progress=False)
    predict_store(other.save(tmp_path / "other.npz"), store)           # predictions of another result, no pictures
    with pytest.raises(InputError, match="holds no aligned images of its predictions"):
        aligned_images(store)


def test_save_aligned_is_refused_for_a_method_that_aligns_nothing(plate, tmp_path, capsys):
    store, _ = plate
    km, _ = fit_store(store, method="kmeans", k=3, sample=60, progress=False)
    path = km.save(tmp_path / "km.npz")
    before = sorted(p.name for p in store.path.rglob("*"))
    assert main(["predict", str(path), str(store.path), "--save-aligned", "--quiet"]) == 2
    assert "kmeans aligns no object with its prototype" in capsys.readouterr().err
    assert sorted(p.name for p in store.path.rglob("*")) == before


def test_what_a_killed_prediction_left_half_written_is_swept_by_the_next(plate):
    store, path = plate
    part = sorted(store.path.glob("fields/*"))[0]
    (part / "predict.parquet.999-deadbeef.partial").write_bytes(b"half a parquet file")
    (part / f"{PART_ALIGNED}.999-deadbeef.partial").mkdir()
    (part / f"{PART_ALIGNED}.999-deadbeef.partial" / "c").write_bytes(b"half a chunk")
    predict_store(path, store, save_aligned=True)
    assert not list(store.path.glob("fields/*/*.partial"))
