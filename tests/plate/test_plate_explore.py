"""One plate object looked at closely and the plate's clustering taken out (ticlust.plate.explore), napari-free: the
inspector's alignment of an object (the fit's own warps for a sample object, its assignment's for any other, the
scores the predictions hold), the per-object table as ticlust predict writes it, and the gallery folder."""
import numpy as np
import pandas as pd
import pytest

import ticlust
from ticlust.cli import main
from ticlust.plate import curate
from ticlust.plate.explore import export_objects, export_plate_gallery, inspect_object
from ticlust.plate.run import PREDICTIONS, fit_store, predict_store


@pytest.fixture(scope="module")
def plate(tmp_path_factory, nuclei_store):
    """A small plate's store, ai-kmeans (short settings) fitted on 40 objects and predicted into the store."""
    folder = tmp_path_factory.mktemp("explore")
    _, store = nuclei_store(folder, fields=3, n=30, size=256, seed=2)
    result, _ = fit_store(store, "ai-kmeans", k=3, sample=40, seed=0, device="cpu", steps=8, affine_steps=8,
                          max_iter=3, reseed=False, predict_steps=20)
    predict_store(result, store, device="cpu")
    return folder, store, result, pd.read_parquet(store.path / PREDICTIONS)


def test_an_object_of_the_sample_replays_the_fit_and_another_its_assignment(plate):
    _, store, result, predictions = plate
    sample = curate.fit_sample(result)
    seen = inspect_object(store, result, int(sample[3]), "cpu")
    assert seen.sample == 3 and np.array_equal(seen.scores, result.scores[3])
    assert np.array_equal(seen.grid, result.grids[3]) and seen.aligned.shape == (3, store.size, store.size)
    assert np.array_equal(seen.item, store.crops[int(sample[3])])
    other = next(o for o in range(len(store)) if o not in set(sample.tolist()))
    seen = inspect_object(store, result, other, "cpu")
    assert seen.sample is None and seen.grid.shape[-1] == 2
    assert int(np.argmin(seen.scores)) == predictions["cluster"][other]
    assert np.isclose(seen.scores.min(), predictions["score"][other], rtol=1e-4)
    with pytest.raises(ticlust.InputError, match="not one of the store's"):
        inspect_object(store, result, len(store), "cpu")
    shapes = ticlust.fit(ticlust.sample("shapes")[0], "shape-kmeans", k=2, device="cpu")
    with pytest.raises(ticlust.InputError, match="contours"):
        inspect_object(store, shapes, 0, "cpu")


def test_the_exported_table_is_ticlust_predicts_and_the_gallery_has_a_picture_per_cluster(plate, tmp_path):
    folder, store, result, _ = plate
    export_objects(store, tmp_path / "o.csv")
    export_objects(store, tmp_path / "o.parquet")
    path = result.save(tmp_path / "r.npz")
    assert main(["predict", str(path), str(store.path), "--csv", str(tmp_path / "c.csv"), "--parquet",
                 str(tmp_path / "c.parquet"), "--quiet"]) == 0
    assert (tmp_path / "o.csv").read_bytes() == (tmp_path / "c.csv").read_bytes()
    assert (tmp_path / "o.parquet").read_bytes() == (tmp_path / "c.parquet").read_bytes()
    paths = export_plate_gallery(store, tmp_path / "gallery", result, max_items=5)
    assert [p.name for p in paths] == ["prototypes.png", "cluster_00.png", "cluster_01.png", "cluster_02.png"]
    with pytest.raises(ticlust.InputError, match="folder does not exist"):
        export_objects(store, tmp_path / "nowhere" / "o.csv")
    bare = ticlust.extract(folder / "plate" / "plate.csv", tmp_path / "bare.zarr")
    with pytest.raises(ticlust.InputError, match="no predictions yet"):
        export_objects(bare, tmp_path / "b.csv")
    assert not (tmp_path / "b.csv").exists()
