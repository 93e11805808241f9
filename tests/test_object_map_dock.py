"""The object map docked with the plate panel and with the ticlust widget, in a real napari viewer: drawn from a
store's predictions and from a single-field result; a lasso gives the selection's gallery, rings its objects on the
field and counts them; a move from the map recolours it and, re-predicted, changes the CSV's cluster, and Undo
restores both; a click on a point opens its field and inspector, a click on the field rings the object on the map;
after a Refine the map says it is out of date and Refresh re-predicts; and one sentence for each bad input (no
predictions, no map, an empty selection, a column of one value)."""
import shutil

import numpy as np
import pandas as pd
import pytest

napari = pytest.importorskip("napari")
pytest.importorskip("pyqtgraph")

import ticlust  # noqa: E402
from ticlust._napari.map_panel import NOTHING_SELECTED  # noqa: E402
from ticlust._napari.store_panel import STORE_PANEL, StorePanel  # noqa: E402
from ticlust._napari.widget import TiclustWidget  # noqa: E402
from ticlust.datasets.nuclei import write_nuclei_plate  # noqa: E402
from ticlust.plate import curate  # noqa: E402
from ticlust.plate.run import fit_store, predict_store  # noqa: E402

pytestmark = pytest.mark.gui


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """A generated 6-field plate (3 wells × 2 sites, 14 nuclei a field), its store, and kmeans fitted on 40 objects."""
    folder = tmp_path_factory.mktemp("mapdock")
    manifest = write_nuclei_plate(folder / "plate", fields=6, n=14, shape=(192, 192), seed=4)
    store = ticlust.extract(manifest, folder / "s.zarr")
    result, _ = fit_store(store, "kmeans", k=3, sample=40, seed=0, device="cpu")
    return folder, store, result


@pytest.fixture
def predicted(made, tmp_path):
    """A fresh copy of the store with the result's predictions, and the result file."""
    _, store, result = made
    copy = ticlust.open_objects(shutil.copytree(store.path, tmp_path / "p.zarr"))
    predict_store(result, copy, device="cpu")
    return copy, result.save(tmp_path / "km.npz")


def settle(qtbot, panel, timeout=120_000) -> None:
    qtbot.waitUntil(lambda: not panel.busy and not panel.object_map.busy, timeout=timeout)


def plate_dock(make_napari_viewer, qtbot, store, result_file=None):
    viewer = make_napari_viewer()
    _, panel = viewer.window.add_plugin_dock_widget("napari-ticlust", STORE_PANEL)
    assert isinstance(panel, StorePanel)
    settle(qtbot, panel)
    panel.open_store(store.path)
    settle(qtbot, panel)
    if result_file is not None:
        panel.load_result(result_file)
        settle(qtbot, panel)
    return viewer, panel, panel.object_map.panel


def box_around(xy: np.ndarray, rows: np.ndarray):
    lo, hi = xy[rows].min(0) - 1e-3, xy[rows].max(0) + 1e-3
    return float(lo[0]), float(lo[1]), float(hi[0]), float(hi[1])


def test_plate_map_lasso_gallery_ring_move_and_undo(predicted, make_napari_viewer, qtbot, tmp_path):
    store, km = predicted
    viewer, panel, mp = plate_dock(make_napari_viewer, qtbot, store, km)
    table = pd.read_parquet(store.path / "predictions.parquet")
    assert len(mp.map.xy) == len(store) and mp.map.drawn_as == "points"
    np.testing.assert_array_equal(mp.map.xy[:, 0], table["map_x"].to_numpy(np.float32))
    assert {"cluster", "well", "score", "margin"} <= set(mp.map.columns.columns)
    # a lasso around the first field's objects: a gallery left of the field, rings on it, counts per cluster and well
    first = np.flatnonzero(table["field_index"].to_numpy() == panel.picture.field_index)
    x0, y0, x1, y1 = box_around(mp.map.xy, first[:5])
    rows = mp.map.select_polygon([(x0, y0), (x1, y0), (x1, y1), (x0, y1)])
    settle(qtbot, panel)
    assert set(first[:5]) <= set(rows.tolist())
    names = panel.object_map.names()
    gallery = viewer.layers[names["gallery"]]
    field = viewer.layers[panel.names()["field"]]
    assert gallery.extent.world[1][-1] < field.extent.world[0][-1]          # left of the field
    ring = viewer.layers[names["ring"]]
    on_field = rows[(rows >= first[0]) & (rows <= first[-1])] - first[0] + 1
    assert set(np.unique(ring.data)[1:].tolist()) == set(on_field.tolist())
    assert mp.counts.text().startswith(f"{rows.size} selected · cluster ") and " · well " in mp.counts.text()
    # Move from the map: the map's colours follow at once, and Undo restores them
    target = int((table["cluster"][rows[0]] + 1) % 3)
    before = mp.map.columns["cluster"].to_numpy().copy()
    mp.to.setValue(target)
    edited = mp.act("move")
    settle(qtbot, panel)
    assert edited is panel.result and (mp.map.columns["cluster"].to_numpy()[rows] == target).all()
    assert mp.map.legend.text().startswith("cluster") and not mp.map.is_stale
    panel.undo()
    settle(qtbot, panel)
    np.testing.assert_array_equal(mp.map.columns["cluster"].to_numpy(), before)
    # moved again and re-predicted: the CSV has it and the map (read again) too; Undo says the map is out of date
    # until Refresh re-predicts: the CSV and the map as they were
    mp.act("move")
    panel.curate.start_repredict()
    settle(qtbot, panel)
    panel.export.export_objects(tmp_path / "moved.csv")
    settle(qtbot, panel)
    assert (pd.read_csv(tmp_path / "moved.csv")["cluster"].to_numpy()[rows] == target).all()
    assert (mp.map.columns["cluster"].to_numpy()[rows] == target).all() and mp.map.selection.size == 0
    panel.undo()
    settle(qtbot, panel)
    assert mp.map.is_stale and "Re-predict" in mp.map.banner_label.text()
    mp.map.refresh_button.click()
    settle(qtbot, panel)
    assert not mp.map.is_stale
    np.testing.assert_array_equal(mp.map.columns["cluster"].to_numpy(), before)
    panel.export.export_objects(tmp_path / "undone.csv")
    settle(qtbot, panel)
    np.testing.assert_array_equal(pd.read_csv(tmp_path / "undone.csv")["cluster"], table["cluster"])
