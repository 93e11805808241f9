"""Shared test fixtures."""
import pytest
import torch


@pytest.fixture
def one_thread():
    """Tiny tensors: one torch thread avoids thread-pool overhead on a busy machine (restored after)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def landmark_fit():
    """Fit a landmark method twice on the two-group sample and check what every landmark method owes:
    input untouched, same seed same result, both groups found, the result's shapes, prototypes the
    cluster means of the aligned shapes. Returns (result, landmarks)."""
    import numpy as np

    import ticlust
    from ticlust.datasets.shapes import sample_landmarks

    def fit(method: str):
        x, y = sample_landmarks(seed=4, n=60)
        before = x.copy()
        r1, r2 = (ticlust.fit(x, method, k=2, device="cpu", seed=5) for _ in range(2))
        assert np.array_equal(x, before)
        assert np.array_equal(r1.labels, r2.labels) and r1.history == r2.history
        assert ticlust.evaluate(y, r1.labels)["ari"] == 1.0
        assert r1.scores.shape == (60, 2) and r1.prototypes.shape == (2, 8, 2) and r1.aligned.shape == (60, 8, 2)
        assert r1.covariances.shape == (2, 8, 2, 2) and r1.aligned_kind == "procrustes"
        for g in range(2):
            assert np.allclose(r1.prototypes[g], r1.aligned[r1.labels == g].mean(0))
        return r1, x
    return fit


@pytest.fixture
def size_groups():
    """Two groups of one shape at two sizes, in random poses: a landmark method must find them with
    scale=False (ARI 1, every size kept) and not with scale=True (ARI < 0.3). Returns (form fit, landmarks)."""
    import numpy as np

    import ticlust
    from landmark_poses import similar
    from ticlust.datasets.shapes import MEAN_SHAPE_A

    def fit(method: str, seed: int):
        rng = np.random.default_rng(seed)
        y = np.arange(40) % 2
        x = np.stack([similar(MEAN_SHAPE_A + rng.normal(0, 2.0, (8, 2)), rng.uniform(0, 2 * np.pi), 1.0 + 0.5 * g,
                              rng.normal(0, 50, 2)) for g in y])
        form = ticlust.fit(x, method, k=2, device="cpu", scale=False)
        shape = ticlust.fit(x, method, k=2, device="cpu", scale=True)
        assert ticlust.evaluate(y, form.labels)["ari"] == 1.0
        assert ticlust.evaluate(y, shape.labels)["ari"] < 0.3
        size = np.sqrt(((form.aligned - form.aligned.mean(1, keepdims=True)) ** 2).sum((1, 2)))
        assert np.allclose(size, np.sqrt(((x - x.mean(1, keepdims=True)) ** 2).sum((1, 2))))   # sizes kept
        return form, x
    return fit


@pytest.fixture(scope="module")
def client():
    """A real dask cluster for a test module: two single-threaded worker processes on 127.0.0.1, dashboard off,
    started as ticlust starts its own (cluster.local_cluster: no malloc-trim setting leaking into this process)."""
    distributed = pytest.importorskip("distributed")
    from ticlust.core.backends import local_cluster

    with local_cluster(2, dashboard=None) as local, distributed.Client(local) as c:
        yield c


def settle_dock(qtbot, panel, timeout: int = 120_000) -> None:
    """Wait until every worker of the plate dock and of its object map is done and what it made is drawn."""
    qtbot.waitUntil(lambda: not panel.busy and not panel.object_map.busy, timeout=timeout)


@pytest.fixture
def plate_dock(make_napari_viewer, qtbot):
    """Opens the plate dock in a real napari viewer as a user does: ``plate_dock(store=None, result=None,
    viewer=None, file=None)`` → (viewer, panel). ``file`` (a plate folder, a store) is opened first with File > Open
    (napari-ticlust's readers) in ``viewer`` (a new one when None); the dock is added and its warm-up waited for;
    then the store at ``store`` (a path) is opened with the dock and the result ``result`` (a file or a
    ClusteringResult) loaded, each waited for."""
    from ticlust._napari.store_panel import STORE_PANEL, StorePanel

    def open_dock(store=None, result=None, viewer=None, file=None, timeout: int = 120_000):
        viewer = make_napari_viewer() if viewer is None else viewer
        if file is not None:
            viewer.open(str(file), plugin="napari-ticlust")
        _, panel = viewer.window.add_plugin_dock_widget("napari-ticlust", STORE_PANEL)
        assert isinstance(panel, StorePanel)
        settle_dock(qtbot, panel, timeout)
        if store is not None:
            panel.open_store(store)
            settle_dock(qtbot, panel, timeout)
        if result is not None:
            panel.load_result(result)
            settle_dock(qtbot, panel, timeout)
        return viewer, panel
    return open_dock


@pytest.fixture(scope="session")
def kmeans_plate():
    """Makes the plate most store tests start from: ``kmeans_plate(folder, fields=, n=, size=, seed=, sample=None)``
    writes a generated nuclei plate (``fields`` fields of ``n`` nuclei, ``size`` pixels a side) into ``folder``,
    extracts its object store and fits kmeans (K = 3, seed 0) on ``sample`` of its objects (all when None).
    Returns (manifest, store, result)."""
    import ticlust
    from ticlust.datasets.nuclei import write_nuclei_plate
    from ticlust.plate.run import fit_store

    def make(folder, *, fields: int, n: int, size: int, seed: int, sample: int | None = None):
        manifest = write_nuclei_plate(folder / "plate", fields=fields, n=n, shape=(size, size), seed=seed)
        store = ticlust.extract(manifest, folder / "s.zarr")
        result, _ = fit_store(store, "kmeans", k=3, seed=0, device="cpu",
                              **({} if sample is None else {"sample": sample}))
        return manifest, store, result
    return make


@pytest.fixture(scope="session")
def predicted_copy():
    """``predicted_copy(store, result, target)``: a copy of ``store`` at ``target`` holding ``result``'s predictions
    (each test edits its own copy, the module's store stays as fitted)."""
    import shutil

    import ticlust
    from ticlust.plate.run import predict_store

    def make(store, result, target):
        copy = ticlust.open_objects(shutil.copytree(store.path, target))
        predict_store(result, copy, device="cpu")
        return copy
    return make


@pytest.fixture
def raw_fields(tmp_path):
    """Three small fields of touching nuclei as a microscope leaves them, no masks: one TIFF per channel
    (``siteN_D.tif`` the nuclei, ``siteN_F.tif`` another stain) in ``raw/``, and CellProfiler's LoadData CSV naming
    them (``FileName_OrigBlue``/``PathName_OrigBlue`` for D, ``FileName_OrigGreen`` for F, ``Metadata_Site``).
    Returns ``(folder, load_data, fields)``: the fields are the generator's, with their true masks."""
    import csv

    import numpy as np
    import tifffile

    from ticlust.datasets.touching_nuclei import touching_nuclei_field

    folder = tmp_path / "raw"
    folder.mkdir()
    fields, rows = [], []
    for site in range(3):
        f = touching_nuclei_field("touching", n=18, shape=(160, 160), seed=site)
        other = np.random.default_rng(site).integers(100, 400, f.image.shape).astype(np.uint16)
        tifffile.imwrite(folder / f"site{site}_D.tif", f.image)
        tifffile.imwrite(folder / f"site{site}_F.tif", other)
        rows.append({"Metadata_Plate": "P1", "Metadata_Site": site, "FileName_OrigBlue": f"site{site}_D.tif",
                     "PathName_OrigBlue": "raw", "FileName_OrigGreen": f"site{site}_F.tif", "PathName_OrigGreen": "raw"})
        fields.append(f)
    with open(tmp_path / "load_data.csv", "w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return folder, tmp_path / "load_data.csv", fields
