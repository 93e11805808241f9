"""The dock says the library's sentences (issue 55, item 4): each refusal of issue 55, met from the dock on a plate
or on image layers, is a napari notification with the library's one sentence, nothing is written, and nothing is raised
in the event loop (pytest-qt fails a test on any exception there). One of each: a file the output guard refuses
(Save result, Export objects, Export gallery, Export shares, Save on a stack's result), a result of other channels than the
store's, a store's own result on a one-channel store, and a stack scaled by 1e30 (a result, no error)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import tifffile

napari = pytest.importorskip("napari")

import ticlust  # noqa: E402
from ticlust.datasets.nuclei import nuclei_field, write_nuclei_plate  # noqa: E402
from ticlust.plate.run import fit_store, predict_store  # noqa: E402

pytestmark = pytest.mark.gui


def snapshot(folder: Path) -> dict:
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
            and p.name != ".lock"}


@pytest.fixture
def notes():
    """Every napari notification's message while the test runs."""
    from napari.utils.notifications import notification_manager

    said = []
    notification_manager.notification_ready.connect(lambda note: said.append(str(note.message)))
    return said


@pytest.fixture
def dialogs(monkeypatch):
    """QFileDialog answering with the path a test sets (``dialogs.path``), as a user picking it."""
    from qtpy.QtWidgets import QFileDialog

    class Answer:
        path = None
    monkeypatch.setattr(QFileDialog, "getSaveFileName", staticmethod(lambda *a, **k: (str(Answer.path), "")))
    monkeypatch.setattr(QFileDialog, "getExistingDirectory", staticmethod(lambda *a, **k: str(Answer.path)))
    return Answer


@pytest.fixture(scope="module")
def predicted(tmp_path_factory):
    """A generated plate, its store predicted with a kmeans result: (plate folder, store, result file)."""
    folder = tmp_path_factory.mktemp("refusals")
    manifest = write_nuclei_plate(folder / "plate", fields=4, n=8, shape=(96, 96), seed=2)
    store = ticlust.extract(manifest, folder / "s.zarr", progress=False)
    result, _ = fit_store(store, "kmeans", k=3, seed=0, progress=False)
    predict_store(result, store, progress=False)
    return manifest.parent, store, result.save(folder / "km.npz")


def press(qtbot, panel, button) -> None:
    button.native.click()
    qtbot.waitUntil(lambda: not panel.busy, timeout=120_000)


def test_the_docks_file_actions_on_a_plate_refuse_the_store_in_a_notification(predicted, plate_dock, qtbot, notes,
                                                                         dialogs):
    plate, store, result = predicted
    kept, plate_kept = snapshot(store.path), snapshot(plate)
    viewer, panel = plate_dock(store.path, result=result)
    assert panel.result is not None and panel.plate.shares.table is not None
    actions = [("Save result", panel.save_button, store.path / "table.parquet"),
               ("Export objects", panel.plate.export.table.button, store.path / "predictions.parquet"),
               ("Export gallery", panel.gallery_run.button, store.path / "fields"),
               ("Export shares", panel.plate.shares.export_button, store.path / "shares.csv"),
               ("Export objects onto the plate", panel.plate.export.table.button, plate / "A01_s0.tif")]
    for name, button, target in actions:
        assert button.enabled, name
        before = len(notes)
        dialogs.path = target
        press(qtbot, panel, button)
        said = notes[before:]
        assert len(said) == 1 and "\n" not in said[0], (name, said)
        assert ("lies inside the object store" in said[0] or "a field's image or mask" in said[0]), (name, said)
        assert said[0] in panel.status.value, (name, panel.status.value)
        assert snapshot(store.path) == kept and snapshot(plate) == plate_kept, name


def test_save_on_a_stacks_result_refuses_a_file_of_a_store_in_a_notification(predicted, dock, make_napari_viewer,
                                                                             qtbot, notes, dialogs):
    _, store, _ = predicted
    kept = snapshot(store.path)
    viewer = make_napari_viewer()
    viewer.add_image(np.asarray(store.crops[:]), name="crops")
    widget = dock(viewer)
    widget.form.k.value = 2
    assert widget.start() is not None
    qtbot.waitUntil(lambda: not widget.busy, timeout=60_000)
    assert widget.result is not None
    dialogs.path = store.path / "mine.npz"
    press(qtbot, widget, widget.save_button)
    assert len(notes) == 1 and "lies inside the object store" in notes[0], notes
    assert snapshot(store.path) == kept


def three_channel_manifests(root: Path) -> tuple[Path, Path, Path]:
    """Two fields of three channels (one TIFF each) listed with the channels in two orders, and with one."""
    (root / "images").mkdir(parents=True, exist_ok=True)
    names = ["DNA", "ER", "Mito"]
    for f in range(2):
        field = nuclei_field(n=8, shape=(88, 104), seed=20 + f)
        planes = [field.image, (field.image // 3 + 7).astype(np.uint16),
                  np.random.default_rng(f).integers(0, 900, field.image.shape).astype(np.uint16)]
        for ch, plane in zip(names, planes):
            tifffile.imwrite(root / "images" / f"f{f}_{ch}.tif", plane)
        tifffile.imwrite(root / "images" / f"f{f}_masks.tif", field.labels)
    made = []
    for order, name in ((names, "abc.csv"), (names[::-1], "cba.csv"), (names[:1], "one.csv")):
        rows = [{**{f"image_{c}": f"images/f{f}_{c}.tif" for c in order}, "labels": f"images/f{f}_masks.tif"}
                for f in range(2)]
        pd.DataFrame(rows).to_csv(root / name, index=False)
        made.append(root / name)
    return tuple(made)


def test_a_result_of_other_channels_is_one_notification_and_a_store_takes_its_own(tmp_path, plate_dock, qtbot,
                                                                                    notes):
    abc, cba, one = three_channel_manifests(tmp_path / "plate")
    first = ticlust.extract(abc, tmp_path / "abc.zarr", crop_size=32, progress=False)
    turned = ticlust.extract(cba, tmp_path / "cba.zarr", crop_size=32, progress=False)
    result, _ = fit_store(first, "kmeans", k=2, seed=0, progress=False)
    path = result.save(tmp_path / "abc.npz")
    kept = snapshot(turned.path)
    viewer, panel = plate_dock(turned.path, result=path)
    assert panel.result is None
    assert notes and "fitted on the channels DNA, ER, Mito" in notes[-1] and "holds Mito, ER, DNA" in notes[-1], notes
    assert snapshot(turned.path) == kept
    # a store of one named channel takes the result fitted on it (it refused it: "… with 1 channels")
    grey = ticlust.extract(one, tmp_path / "one.zarr", crop_size=32, progress=False)
    before = len(notes)
    panel.plate.open_store(grey.path)
    qtbot.waitUntil(lambda: not panel.busy, timeout=120_000)
    panel.form.method.value = "kmeans"
    panel.form.k.value, panel.plate.sample.value, panel.device.value = 2, 0, "cpu"
    press(qtbot, panel, panel.run_button)
    press(qtbot, panel, panel.plate.predict_run.button)
    assert f"Assigned {len(grey)} objects" in panel.status.value, panel.status.value
    assert notes[before:] == []


def test_a_stack_scaled_by_1e30_gives_a_result_in_the_dock(dock, make_napari_viewer, qtbot, notes):
    """Values of 1e30 in an image layer: a fit and its object map, no error. (Shapes at 1e20, where shape-kmeans
    raised LinAlgError, cannot be met from napari: a Points layer beyond about 2e9 overflows napari's own dims
    slider, "argument 1 overflowed"; tests/api/test_numeric_extremes.py holds them.)"""
    from ticlust.datasets.samples import glyphs_sample

    x, _ = glyphs_sample(n_per_class=6, size=16, seed=1)
    viewer = make_napari_viewer()
    viewer.add_image((x * 1e30).astype(np.float32), name="far")
    widget = dock(viewer)
    widget.stack.pick("far")
    widget.form.k.value = 3
    assert widget.start() is not None
    qtbot.waitUntil(lambda: not widget.busy, timeout=60_000)
    assert widget.result is not None and widget.result.k == 3, (widget.status.value, notes)
    assert np.isfinite(widget.result.scores).all() and np.isfinite(widget.result.map).all() and notes == []
