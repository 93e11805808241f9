"""Every writer refuses a target inside an object store, onto a store's file or onto the plate's input, before any
work, in one sentence, with nothing written (issue 55, item 1). The first case is the issue's own: ``ticlust fit
STORE --csv STORE/table.parquet`` wrote the store's table over with CSV text and exited 0."""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

import ticlust
from ticlust.cli import main


@pytest.fixture(scope="module")
def plate(tmp_path_factory, kmeans_plate):
    """A small extracted, fitted and predicted plate: (manifest, store, result file)."""
    from ticlust.plate.run import predict_store

    folder = tmp_path_factory.mktemp("guarded")
    manifest, store, result = kmeans_plate(folder, fields=2, n=8, size=96, seed=3)
    predict_store(result, store, progress=False)
    return manifest, store, result.save(folder / "km.npz")


def snapshot(folder: Path) -> dict:
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def refused_by_cli(capsys, *args) -> str:
    assert main([str(a) for a in args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("ticlust: error:") and "Traceback" not in err, err
    return err


def test_fit_store_csv_onto_the_stores_table_is_refused_before_the_fit(plate, tmp_path, capsys):
    """Issue 55: the store's table.parquet was overwritten by the sample's CSV and the store no longer opened."""
    _, store, _ = plate
    before = snapshot(store.path)
    err = refused_by_cli(capsys, "fit", store.path, "--k", "2", "--quiet", "-o", tmp_path / "r.npz",
                         "--csv", store.path / "table.parquet")
    assert f"--csv {store.path / 'table.parquet'} lies inside the object store {store.path}" in err
    assert "choose a file outside it" in err
    assert snapshot(store.path) == before and not (tmp_path / "r.npz").exists()
    assert len(ticlust.open_objects(store.path)) == len(store)


def _cases(manifest: Path, store, result: Path, tmp: Path):
    """(name, CLI arguments or a callable, where its output goes) for every writer, each aimed inside the store."""
    from ticlust.datasets.cell_painting import cell_painting_plate
    from ticlust.datasets.nuclei import write_nuclei_plate
    from ticlust.io.gallery import export_gallery
    from ticlust.io.landmarks import write_landmarks_csv, write_tps
    from ticlust.plate import curate, explore, view
    from ticlust.plate.run import predict_store

    inside = store.path / "out.csv"
    loaded = ticlust.load_result(result)
    stack = tmp / "stack.npy"
    np.save(stack, np.random.default_rng(0).random((12, 8, 8)).astype(np.float32))
    shapes = np.random.default_rng(0).random((4, 5, 2))
    shares = view.cluster_shares(view.read_predictions(store), "well")
    return [
        ("fit STORE -o", ["fit", store.path, "--k", "2", "--quiet", "-o", store.path / "r.npz"]),
        ("fit STORE --csv", ["fit", store.path, "--k", "2", "--quiet", "-o", tmp / "r.npz", "--csv", inside]),
        ("fit STORE --csv onto the manifest", ["fit", store.path, "--k", "2", "--quiet", "-o", tmp / "r.npz",
                                               "--csv", manifest]),
        ("fit STACK --csv", ["fit", stack, "--k", "2", "--quiet", "-o", tmp / "r.npz", "--csv", inside]),
        ("predict RESULT STORE --csv", ["predict", result, store.path, "--quiet", "--csv", inside]),
        ("predict RESULT STORE --parquet", ["predict", result, store.path, "--quiet", "--parquet",
                                           store.path / "predictions.parquet"]),
        ("predict RESULT STACK --csv", ["predict", result, stack, "--quiet", "--csv", inside]),
        ("curate -o", ["curate", result, "--store", store.path, "--merge", "0", "1", "-o", store.path / "c.npz"]),
        ("curate --csv", ["curate", result, "--store", store.path, "--merge", "0", "1", "-o", tmp / "c.npz",
                          "--csv", inside]),
        ("curate --csv onto an image", ["curate", result, "--store", store.path, "--merge", "0", "1", "-o",
                                        tmp / "c.npz", "--csv", manifest.parent / "A01_s0.tif"]),
        ("export --gallery", ["export", result, "--input", stack, "--gallery", store.path / "g"]),
        ("extract -o inside a store", ["extract", manifest, "-o", store.path / "inner.zarr", "--quiet"]),
        ("ClusteringResult.save", lambda: loaded.save(store.path / "r.npz")),
        ("ClusteringResult.save in a new folder", lambda: loaded.save(store.path / "new" / "r.npz")),
        ("assignments_table", lambda: loaded.assignments_table(inside)),
        ("predict_store csv", lambda: predict_store(loaded, store, csv=inside, progress=False)),
        ("ticlust.predict parquet", lambda: ticlust.predict(loaded, store, parquet=store.path / "table.parquet")),
        ("repredict csv", lambda: curate.repredict(loaded, store, csv=inside, progress=False)),
        ("export_objects", lambda: explore.export_objects(store, store.path / "table.parquet")),
        ("export_objects onto the manifest", lambda: explore.export_objects(store, manifest)),
        ("export_plate_gallery", lambda: explore.export_plate_gallery(store, store.path / "fields", loaded)),
        ("write_shares", lambda: view.write_shares(shares, inside, store)),
        ("write_shares onto the manifest", lambda: view.write_shares(shares, manifest, store)),
        ("export_gallery", lambda: export_gallery(loaded, store.crops[:], store.path / "g")),
        ("write_landmarks_csv", lambda: write_landmarks_csv(inside, shapes)),
        ("write_tps", lambda: write_tps(store.path / "s.tps", shapes)),
        ("write_nuclei_plate", lambda: write_nuclei_plate(store.path / "plate", fields=1, n=4, shape=(64, 64))),
        ("cell_painting_plate", lambda: cell_painting_plate(store.path / "cp", wells=1, sites=1, cells=4,
                                                            shape=(64, 64))),
        ("extract", lambda: ticlust.extract(manifest, store.path / "inner.zarr", progress=False)),
    ]


def test_every_writer_refuses_the_store_and_the_input_before_any_work(plate, tmp_path, capsys):
    """Each writer, aimed into the store (or onto a store file, or onto the plate's input), is one sentence and
    leaves the store, the plate and the result byte for byte as they were."""
    manifest, store, result = plate
    kept = {folder: snapshot(folder) for folder in (store.path, manifest.parent)}
    result_bytes = result.read_bytes()
    said = {}
    for name, call in _cases(manifest, store, result, tmp_path):
        if isinstance(call, list):
            said[name] = refused_by_cli(capsys, *call)
        else:
            with pytest.raises(ticlust.InputError) as caught:
                call()
            said[name] = str(caught.value)
            assert "\n" not in said[name], (name, said[name])
        for folder, files in kept.items():
            assert snapshot(folder) == files, name
        assert result.read_bytes() == result_bytes, name
        assert not (tmp_path / "r.npz").exists() and not (tmp_path / "c.npz").exists(), name
    for name, message in said.items():
        assert any(words in message for words in ("lies inside the object store", "is the input",
                                                   "a field's image or mask", "lies inside the Zarr hierarchy")), \
            (name, message)
    assert "A01_s0.tif, a field's image or mask" in said["curate --csv onto an image"]


def test_a_new_file_beside_the_plate_and_the_store_is_written(plate, tmp_path, capsys):
    """The guard refuses what would destroy something, not a fresh file next to the plate's files."""
    manifest, store, result = plate
    copy = ticlust.open_objects(shutil.copytree(store.path, tmp_path / "copy.zarr"))
    beside = manifest.parent / "assigned.csv"
    try:
        assert main(["predict", str(result), str(copy.path), "--quiet", "--csv", str(beside)]) == 0
        assert len(beside.read_text().splitlines()) == len(copy) + 1
    finally:
        beside.unlink(missing_ok=True)
