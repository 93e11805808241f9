"""The object map (kernels.embedding, Method.embed): every family's fit carries each item's invariant embedding and
its 2-D place; predict places new items the same way every time, chunk by chunk, in this process and on a dask
cluster; a store's predictions and the CSVs carry map_x and map_y; a result saved before maps loads, predicts
without a map, and gets one from compute_map; the map's quality measure tells kinds apart from noise."""
import dataclasses
import shutil

import numpy as np
import pandas as pd
import pytest

import ticlust
from ticlust.datasets.nuclei import nuclei_sample
from ticlust.datasets.samples import glyphs_sample
from ticlust.datasets.shapes import sample_landmarks
from ticlust.kernels.embedding import EXTRAS, MapModel, interpolate, neighbour_agreement, tsne
from ticlust.methods import get_method
from ticlust.plate.maps import compute_map
from ticlust.result import load_result


#: One method of every family the map embeds (Method.embeds, and dti's own reading).
FAMILIES = ("kmeans", "ai-kmeans", "st-kmeans", "pssc", "nt", "procrustes-kmeans", "rigid-kmeans", "rigid-spectral",
            "dti-kmeans")


@pytest.fixture
def small_fit(pins):
    """``small_fit(method)``: the method's pinned parameters on the pinned sample, K = 3, seed 0: (items, result)."""
    return lambda method: _small_fit(method, pins.CASES[method])


def _small_fit(method: str, params: dict):
    if get_method(method).inputs == ("landmarks",):
        x, _ = sample_landmarks(seed=0, n=30)
    else:
        x, _ = glyphs_sample(n_per_class=6, size=16, seed=1)
    return x, ticlust.fit(x, method=method, k=3, device="cpu", seed=0, progress=False, **params)


@pytest.mark.parametrize("method", FAMILIES)
def test_every_family_fits_a_map_and_predict_places_new_items_the_same_way_every_time(small_fit, method, tmp_path):
    x, r = small_fit(method)
    assert r.embedding.ndim == 2 and len(r.embedding) == r.n and np.isfinite(r.embedding).all()
    assert r.map.shape == (r.n, 2) and np.isfinite(r.map).all() and np.ptp(r.map, 0).min() > 0
    model = MapModel.from_extras(r.extras)
    assert model is not None and model.basis.shape[1] == r.embedding.shape[1] and len(model.anchors) <= r.n
    back = load_result(r.save(tmp_path / "r.npz"))                       # kept through save and load
    np.testing.assert_array_equal(back.map, r.map)
    np.testing.assert_array_equal(back.embedding, r.embedding)
    a = ticlust.predict(back, x, device="cpu")
    b = ticlust.predict(r, x, device="cpu", batch_size=7)
    assert a.map.shape == (r.n, 2) and np.isfinite(a.map).all()
    np.testing.assert_allclose(a.map, b.map, rtol=1e-4, atol=1e-3 * np.ptp(r.map))
    np.testing.assert_allclose(ticlust.predict(r, x[:5], device="cpu").map, a.map[:5], rtol=1e-4,
                               atol=1e-3 * np.ptp(r.map))                 # one item's place depends on it alone


def test_the_same_seed_gives_the_same_map_and_the_fit_items_keep_their_place():
    x, _ = glyphs_sample(n_per_class=8, size=16, seed=2)
    a = ticlust.fit(x, method="kmeans", k=4, device="cpu", seed=3, progress=False)
    b = ticlust.fit(x, method="kmeans", k=4, device="cpu", seed=3, progress=False)
    np.testing.assert_allclose(a.map, b.map, rtol=1e-5, atol=1e-4)
    again = ticlust.predict(a, x, device="cpu")                           # kmeans embeds the items themselves
    np.testing.assert_allclose(again.map, a.map, rtol=1e-4, atol=1e-3 * np.ptp(a.map))


def test_curation_keeps_the_map_and_refine_makes_a_new_one(small_fit):
    from ticlust import curation

    x, r = small_fit("kmeans")
    moved = curation.move(r, [0, 1], 2)
    np.testing.assert_array_equal(moved.map, r.map)
    assert all(key in moved.extras for key in EXTRAS)
    refined = curation.refine(x, moved, device="cpu")
    assert refined.map.shape == (r.n, 2) and np.isfinite(refined.map).all()


def _without_map(result):
    extras = {k: v for k, v in result.extras.items() if k not in EXTRAS}
    return dataclasses.replace(result, embedding=None, map=None, extras=extras)


def test_a_result_saved_before_maps_loads_predicts_without_one_and_compute_map_adds_it(small_fit, tmp_path):
    x, r = small_fit("ai-kmeans")
    old = load_result(_without_map(r).save(tmp_path / "old.npz"))
    assert old.map is None and old.embedding is None and "map_x" not in old.assignments_table()[0]
    assert ticlust.predict(old, x, device="cpu").map is None
    with pytest.raises(ticlust.InputError, match="has 10 items but the result has 24"):
        compute_map(old, x[:10])
    made = compute_map(tmp_path / "old.npz", x, device="cpu")
    np.testing.assert_allclose(made.map, r.map, rtol=1e-4, atol=1e-3 * np.ptp(r.map))
    assert old.map is None                                              # the input is not modified
    assert ticlust.predict(made, x, device="cpu").map.shape == (r.n, 2)
    row = made.assignments_table()[0]
    assert list(row)[-2:] == ["map_x", "map_y"] and row["map_x"] == pytest.approx(float(made.map[0, 0]))


def test_the_old_fixture_file_still_loads_without_a_map():
    old = load_result("tests/fixtures/old_st_kmeans.npz")
    assert old.map is None and old.embedding is None and MapModel.from_extras(old.extras) is None


def test_the_quality_measure_tells_kinds_from_noise():
    rng = np.random.default_rng(0)
    kinds = np.repeat(np.arange(3), 100)
    assert neighbour_agreement(rng.random((300, 2)), kinds) < 0.45         # random places: about 1/3
    blobs = rng.normal(0, 1, (300, 8)) + 6 * np.eye(8)[kinds]
    places = tsne(blobs.astype(np.float32))
    assert neighbour_agreement(places, kinds) > 0.98
    placed = interpolate(*(__import__("torch").from_numpy(a.astype(np.float32)) for a in (blobs, blobs, places)))
    np.testing.assert_allclose(placed.numpy(), places, atol=1e-3)      # the anchors land on their own places


def test_a_generated_plate_map_keeps_the_kinds_apart():
    """Outline kinds of a small generated field, rigid-kmeans: its map's 15 nearest neighbours share the kind far
    more often than random places would (about 1/3). The 16-D embedding holds 0.76; the t-SNE layout of it moves by
    up to 0.07 when the PCA moves by float32 roundoff (measured: 0.727 and 0.658 for axes 1e-6 apart), so the map's
    bar sits below that spread."""
    x, kinds = nuclei_sample(seed=0, n=150)
    r = ticlust.fit(x, method="rigid-kmeans", k=3, device="cpu", seed=0, progress=False, flip=True)
    assert neighbour_agreement(r.embedding, kinds) > 0.7
    assert neighbour_agreement(r.map, kinds) > 0.6


# ---- an object store ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def store(tmp_path_factory, nuclei_store):
    return nuclei_store(tmp_path_factory.mktemp("mapplate"), fields=3, n=30, size=192, seed=7, progress=False)[1]


def test_store_predictions_carry_the_map_in_process_and_on_a_cluster(store, client, tmp_path):
    from ticlust.plate.run import PREDICTIONS, fit_store, predict_store

    result, index = fit_store(store, "kmeans", k=3, sample=40, seed=0, device="cpu", progress=False)
    assert result.map.shape == (40, 2)
    path = result.save(tmp_path / "km.npz")
    here = tmp_path / "here.zarr"
    shutil.copytree(store.path, here)
    done = predict_store(path, here, device="cpu", csv=tmp_path / "here.csv")
    table = done.table
    assert list(table.columns[-6:]) == ["cluster", "score", "runner_up", "runner_up_score", "map_x", "map_y"]
    assert np.isfinite(table[["map_x", "map_y"]].to_numpy()).all()
    np.testing.assert_allclose(table[["map_x", "map_y"]].to_numpy()[index], result.map, rtol=1e-4,
                               atol=1e-3 * np.ptp(result.map))             # the fit sample keeps its places
    csv = pd.read_csv(tmp_path / "here.csv")
    np.testing.assert_allclose(csv["map_x"], table["map_x"], rtol=1e-6)
    there = tmp_path / "there.zarr"
    shutil.copytree(store.path, there)
    remote = predict_store(path, there, device="cpu", client=client).table
    pd.testing.assert_frame_equal(remote, table)
    assert set(pd.read_parquet(there / PREDICTIONS).columns) >= {"map_x", "map_y"}


def test_a_store_predicted_without_a_map_says_so_with_nan_columns(store, tmp_path):
    from ticlust.plate.run import fit_store, predict_store

    result, _ = fit_store(store, "kmeans", k=3, sample=40, seed=0, device="cpu", progress=False)
    path = _without_map(result).save(tmp_path / "old.npz")
    copy = tmp_path / "s.zarr"
    shutil.copytree(store.path, copy)
    table = predict_store(path, copy, device="cpu").table
    assert table["map_x"].isna().all() and table["map_y"].isna().all()
    made = compute_map(path, copy, device="cpu")
    np.testing.assert_allclose(made.map, result.map, rtol=1e-4, atol=1e-3 * np.ptp(result.map))


def test_the_map_pca_without_the_covariance_matrix_equals_the_one_through_it():
    """learn_pca's subspace iteration on covariance products gives the axes the same iteration on the formed F×F
    covariance (``kernels.pca.top_eigenvectors``, same random start) gives, to float32 roundoff."""
    import torch

    from ticlust.events import drain
    from ticlust.kernels.embedding import _signed, learn_pca
    from ticlust.kernels.pca import pca_poc_steps

    rng = np.random.default_rng(3)
    latent = rng.standard_normal((300, 12)) * np.linspace(4, 1, 12)
    x = (latent @ rng.standard_normal((12, 500)) / 8 + 0.2 * rng.standard_normal((300, 500)) + 1.5).astype(np.float32)
    mean, basis = learn_pca(x, 8, "cpu", np.random.default_rng(0))
    _, mean0, basis0, _ = drain(pca_poc_steps(x, 8, 0, "randomized", torch.device("cpu"), np.random.default_rng(0)))
    assert basis.shape == (500, 8)
    np.testing.assert_allclose(mean, mean0.float().numpy(), atol=1e-6)
    np.testing.assert_allclose(basis, _signed(basis0.float().numpy()), atol=1e-5)
