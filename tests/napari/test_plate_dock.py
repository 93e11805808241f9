"""The plate dock with a real napari viewer: a generated plate driven through the dock alone — open its folder,
extract, fit, predict, click an object, move it, merge, Undo, Refine, re-predict, export — and the exported table
equal to ``ticlust predict``'s; Cancel of extract, fit and predict mid-way (nothing half-written, the next press
resumes, no half layers); and bad input said in one sentence in the dock, with nothing written and nothing raised."""
import filecmp
import os
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import tifffile

napari = pytest.importorskip("napari")

import ticlust  # noqa: E402
from ticlust.cli import main  # noqa: E402
from ticlust.datasets.nuclei import write_nuclei_plate  # noqa: E402
from ticlust.events import Progress  # noqa: E402
from ticlust.plate import curate  # noqa: E402
from ticlust.plate.run import PREDICTIONS, fit_store, predict_store  # noqa: E402
from ticlust.plate.store import read_attributes  # noqa: E402

pytestmark = pytest.mark.gui

#: ai-kmeans kept short for the default suite (the slow variant fits with the method's defaults).
FAST_AI = {"steps": 8, "affine_steps": 8, "max_iter": 3, "reseed": False, "predict_steps": 20}


@pytest.fixture(scope="module")
def files(tmp_path_factory, nuclei_store):
    """A generated 20-field plate (10 wells × 2 sites, 12 nuclei per 192×192 field) and an uninterrupted store of it."""
    manifest, reference = nuclei_store(tmp_path_factory.mktemp("dock"), fields=20, n=12, size=192, seed=5,
                                       name="reference.zarr", from_folder=True)
    return manifest.parent, reference


def settle(qtbot, panel, timeout=180_000) -> None:
    """Wait until every worker of the panel is done and its results drawn."""
    qtbot.waitUntil(lambda: not panel.busy, timeout=timeout)


def press(qtbot, panel, button, timeout=180_000) -> None:
    button.native.click()
    settle(qtbot, panel, timeout)


def same_store(a: Path, b: Path) -> None:
    """Every file of two stores byte for byte (the lock file and the empty tmp/ aside)."""
    files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file() and p.name != ".lock")
    assert files == sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file() and p.name != ".lock")
    for f in files:
        assert filecmp.cmp(a / f, b / f, shallow=False), f


def centre_of(panel, obj: int):
    """A world position inside store object ``obj`` of the field shown."""
    table = panel.plate.picture.table
    place = obj - int(panel.plate.starts[panel.plate.picture.field_index])
    mask = panel.plate.picture.values == place + 1
    ys, xs = np.nonzero(mask)
    i = len(ys) // 2
    return (float(ys[i]), float(xs[i])), table.iloc[place]


def cancel_when(panel, section_runner, stage: str, at: int = 1):
    """Press Cancel the first time a Progress of ``stage`` reaches step ``at``."""
    shown = panel.on_event

    def watch(event):
        shown(event)
        if isinstance(event, Progress) and event.stage.startswith(stage) and event.step >= at and \
                section_runner.worker is not None and section_runner.button.text == "Cancel":
            section_runner.button.native.click()
    panel.on_event = watch
    return lambda: setattr(panel, "on_event", shown)


def layers_now(viewer) -> dict:
    return {layer.name: np.asarray(layer.data).copy() if not isinstance(layer.data, list) else None
            for layer in viewer.layers}


# ---- (a) a plate through the dock alone ------------------------------------------------------------
def drive_plate(folder, tmp_path, plate_dock, qtbot, sample: int, params: dict):
    plate = Path(shutil.copytree(folder, tmp_path / "plate"))
    viewer, panel = plate_dock(file=plate)                     # File > Open of the folder: the plate reader
    assert panel.plate.extract.source.value == str(plate)
    assert panel.plate.extract.target.value == str(tmp_path / "plate.zarr")      # beside the folder
    press(qtbot, panel, panel.plate.extract.extract_button)
    assert panel.plate.store is not None and "Extracted" in panel.status.value, panel.status.value
    store = panel.plate.store
    assert panel.plate.extract.failed.value == "none"

    panel.form.method.value = "ai-kmeans"
    panel.form.k.value, panel.plate.sample.value, panel.seed.value, panel.device.value = 3, sample, 0, "cpu"
    for name, value in params.items():
        panel.form.param(name).value = value
    press(qtbot, panel, panel.run_button, 600_000)
    assert panel.result is not None and panel.result.method == "ai-kmeans" and panel.result.n == min(sample, len(store))
    assert f"{panel.plate.names()['object']} prototypes" in viewer.layers
    press(qtbot, panel, panel.plate.predict_run.button, 600_000)
    said = panel.status.value
    assert f"Assigned {len(store)} objects of 20 fields" in said and "fit sample:" in said, said
    assert panel.plate.predicted is panel.result and panel.plate.predictions is not None
    predictions = pd.read_parquet(store.path / PREDICTIONS)
    return viewer, panel, store, predictions


def click_object_outside_the_sample(qtbot, panel, predictions):
    sample = set(curate.fit_sample(panel.result).tolist())
    field = panel.plate.picture.field_index
    obj = next(o for o in range(int(panel.plate.starts[field]), int(panel.plate.starts[field + 1])) if o not in sample)
    position, row = centre_of(panel, obj)
    assert panel.plate.click_at(position) == obj
    settle(qtbot, panel)
    return obj, row


def test_a_plate_through_the_dock(files, tmp_path, plate_dock, qtbot):
    viewer, panel, store, predictions = drive_plate(files[0], tmp_path, plate_dock, qtbot, 60, FAST_AI)
    inspect_curate_export(qtbot, viewer, panel, store, predictions, tmp_path)


@pytest.mark.slow
def test_a_plate_through_the_dock_full_size(tmp_path_factory, tmp_path, plate_dock, qtbot):
    """The same at full size: the generated plate's defaults (20 fields of 250 nuclei, 1024×1024: about 4,800
    objects) and a fit sample of 1,000 (ai-kmeans' short settings, as above)."""
    folder = write_nuclei_plate(tmp_path_factory.mktemp("full") / "plate", fields=20, seed=5).parent
    viewer, panel, store, predictions = drive_plate(folder, tmp_path, plate_dock, qtbot, 1000, FAST_AI)
    inspect_curate_export(qtbot, viewer, panel, store, predictions, tmp_path)


def inspect_curate_export(qtbot, viewer, panel, store, predictions, tmp_path):
    """Click an object (the inspector's layers show the result's scores), move it, merge two clusters, Undo,
    Refine, re-predict, export: the exported CSV is ``ticlust predict``'s for the same result, byte for byte."""
    obj, _ = click_object_outside_the_sample(qtbot, panel, predictions)
    names = {key: f"{panel.plate.names()['object']} {suffix}" for key, suffix in
             (("inspector", "inspector"), ("scores", "inspector scores"), ("frames", "inspector frames"),
              ("grid", "warp grid"))}
    for name in names.values():
        assert name in viewer.layers and viewer.layers[name].visible, name
    for name in (names["scores"], f"{panel.plate.names()['object']} prototype numbers", panel.plate.names()["gallery labels"]):
        assert tuple(viewer.layers[name].contrast_limits) == (0, 255), name     # RGBA text shown in its colours
    shown = viewer.layers[names["scores"]].metadata
    assert shown["item"] == obj and shown["chosen"] == predictions["cluster"][obj]
    assert shown["runner_up"] == predictions["runner_up"][obj]
    assert np.isclose(shown["scores"][shown["chosen"]], predictions["score"][obj], rtol=1e-4)
    assert np.isclose(shown["scores"][shown["runner_up"]], predictions["runner_up_score"][obj], rtol=1e-4)

    # move it, merge two clusters, undo the merge, refine, re-predict
    target = (int(predictions["cluster"][obj]) + 1) % 3
    panel.curate.to.value = target
    panel.curate.move_button.native.click()
    assert "Moved object" in panel.status.value and panel.result.state is not None      # outside the sample: a pin
    painted = viewer.layers[panel.plate.names()["objects"]].features
    assert painted["cluster"][obj - int(panel.plate.starts[panel.plate.picture.field_index])] == target
    moved = panel.result
    panel.curate.a.value, panel.curate.b.value = 0, 1
    panel.curate.merge_button.native.click()
    assert panel.result.k == 2 and "Merged cluster 1 into 0" in panel.status.value
    panel.curate.undo_button.native.click()
    assert panel.result is moved and "Undid the merge" in panel.status.value
    press(qtbot, panel, panel.curate.refine_run.button, 600_000)
    assert panel.result.state is not None and panel.result.edits[-1]["op"] == "refine"
    press(qtbot, panel, panel.plate.repredict_run.button, 600_000)
    assert "Re-predicted" in panel.status.value and "1 set by hand" in panel.status.value, panel.status.value
    again = pd.read_parquet(store.path / PREDICTIONS)
    assert again["by_hand"].sum() == 1 and again["by_hand"][obj] and again["cluster"][obj] == target

    # export, and the same table from ticlust predict with the same result
    settle(qtbot, panel)
    panel.plate.export.export_objects(tmp_path / "dock.csv")
    settle(qtbot, panel)
    assert "Wrote the" in panel.status.value
    saved = panel.save_result(tmp_path / "curated.npz")
    assert main(["predict", str(saved), str(store.path), "--csv", str(tmp_path / "cli.csv"), "--quiet"]) == 0
    assert (tmp_path / "dock.csv").read_bytes() == (tmp_path / "cli.csv").read_bytes()
    panel.export_gallery(tmp_path / "gallery")
    settle(qtbot, panel)
    assert sorted(p.name for p in (tmp_path / "gallery").iterdir()) == \
        ["cluster_00.png", "cluster_01.png", "cluster_02.png", "prototypes.png"]
    panel.plate.shares.export(tmp_path / "shares.csv")
    assert len(pd.read_csv(tmp_path / "shares.csv")) == 20          # per image: a folder has no well column


# ---- (b) cancel mid-way ----------------------------------------------------------------------------
def test_cancel_extract_then_extract_again_resumes_to_the_same_bytes(files, tmp_path, plate_dock, qtbot):
    folder, reference = files
    viewer, panel = plate_dock()
    panel.plate.extract.offer(folder)
    panel.plate.extract.target.value = str(tmp_path / "s.zarr")
    before = layers_now(viewer)
    restore = cancel_when(panel, panel.plate.extract.run, "cutting fields", 3)
    press(qtbot, panel, panel.plate.extract.extract_button)
    restore()
    assert panel.status.value.startswith("Cancelled:") and "Extract again" in panel.status.value
    assert not read_attributes(tmp_path / "s.zarr")["complete"] and panel.plate.store is None
    parts = sorted(p.name for p in (tmp_path / "s.zarr" / "fields").iterdir() if p.is_dir())
    assert 1 <= len(parts) < 20 and not list((tmp_path / "s.zarr" / "tmp").iterdir())
    assert layers_now(viewer).keys() == before.keys()
    press(qtbot, panel, panel.plate.extract.extract_button)
    assert panel.plate.store is not None
    same_store(tmp_path / "s.zarr", reference.path)


@pytest.fixture
def predicted(files, tmp_path):
    """A copy of the reference store, predicted with kmeans fitted on 100 of its objects."""
    _, reference = files
    store = ticlust.open_objects(shutil.copytree(reference.path, tmp_path / "p.zarr"))
    result, _ = fit_store(store, "kmeans", k=3, sample=100, seed=0, device="cpu")
    predict_store(result, store, device="cpu")
    return store, result.save(tmp_path / "km.npz")


def test_cancel_fit_and_predict_leave_store_and_layers_as_they_were(predicted, plate_dock, qtbot):
    store, km = predicted
    viewer, panel = plate_dock(store.path)
    panel.form.method.value = "ai-kmeans"
    panel.form.k.value, panel.plate.sample.value, panel.device.value = 3, 60, "cpu"
    for name, value in FAST_AI.items():
        panel.form.param(name).value = value
    before = layers_now(viewer)
    restore = cancel_when(panel, panel.run, "", 1)
    press(qtbot, panel, panel.run_button)
    restore()
    assert panel.status.value.startswith("Cancelled:") and panel.result is None
    assert layers_now(viewer).keys() == before.keys()

    # a result that predicts the store anew: cancel after the first field, nothing joined, then resume
    panel.form.method.value = "kmeans"
    panel.form.k.value, panel.plate.sample.value, panel.seed.value = 4, 150, 1
    press(qtbot, panel, panel.run_button)
    assert panel.result is not None and panel.result.k == 4
    joined = (store.path / PREDICTIONS).read_bytes()
    before = {name: data for name, data in layers_now(viewer).items()}
    restore = cancel_when(panel, panel.plate.predict_run, "predicting objects", 1)
    press(qtbot, panel, panel.plate.predict_run.button)
    restore()
    assert panel.status.value.startswith("Cancelled:") and "resumes" in panel.status.value
    assert (store.path / PREDICTIONS).read_bytes() == joined                      # the old predictions, whole
    assert not list(store.path.glob("fields/*/*.partial"))
    now = layers_now(viewer)
    assert now.keys() == before.keys()
    assert all(np.array_equal(now[n], before[n]) for n in now if now[n] is not None)
    press(qtbot, panel, panel.plate.predict_run.button)
    assert "were predicted by this result already" in panel.status.value, panel.status.value
    assert pd.read_parquet(store.path / PREDICTIONS)["cluster"].max() == 3



def test_the_fit_progress_names_the_stage_and_gives_an_eta_for_rigid_kmeans(predicted, plate_dock, qtbot, monkeypatch):
    """A non-AI aligning method fitted from the plate dock: its status line names each stage (the seeds, the rigid
    search's Lloyd iteration, the object map) and, once a stage has shown its pace, gives an ETA."""
    from ticlust._napari import parts
    from ticlust.core import execute

    monkeypatch.setattr(execute, "ETA_MIN_SECONDS", 0.0)          # the two-second floor lifted for this short fit
    monkeypatch.setattr(parts, "PROGRESS_EVERY_S", 0.0)         # every step said, none skipped
    store, _ = predicted
    viewer, panel = plate_dock(store.path)
    panel.form.method.value = "rigid-kmeans"
    panel.form.k.value, panel.plate.sample.value, panel.device.value = 3, 150, "cpu"
    panel.form.param("max_iter").value = 6
    lines, shown = [], panel.on_event

    def watch(event):
        shown(event)
        lines.append(panel.status.value)
    panel.on_event = watch
    press(qtbot, panel, panel.run_button)
    panel.on_event = shown
    assert panel.result is not None and panel.result.method == "rigid-kmeans"
    progress = [line for line in lines if " · ETA " in line]
    assert progress[0].startswith("rigid k-means++ seeds 1/3 · ETA estimating…")
    searched = [line for line in progress if line.startswith("Lloyd iteration ")]
    assert searched and all(" (rigid search): " in line for line in searched)
    assert any("at this stage's pace" in line for line in searched)
    assert progress[-1].startswith("object map ")


# ---- (c) bad input: one sentence, nothing written, nothing raised ---------------------------------------
def one_sentence(text: str) -> bool:
    return text.count("\n") == 0 and len(text) > 20 and "Traceback" not in text


def test_bad_inputs_are_one_sentence_in_the_dock(files, tmp_path, plate_dock, qtbot):
    folder, _ = files
    viewer, panel = plate_dock()
    bare = tmp_path / "bare"
    bare.mkdir()
    for name in ("A01_s0.tif", "A01_s1.tif"):
        shutil.copy(folder / name, bare / name)
    manifest = tmp_path / "missing.csv"
    manifest.write_text("image,labels,well\nnone_a.tif,none_a_masks.tif,A01\nnone_b.tif,none_b_masks.tif,A02\n")
    read_only = tmp_path / "read-only"
    read_only.mkdir()
    os.chmod(read_only, 0o555)
    # root writes anywhere: a folder under a read-only file system instead (mkdir there fails for root too)
    locked = Path("/sys/ticlust-store.zarr") if os.geteuid() == 0 else read_only / "s.zarr"
    for source, target, words in ((bare, tmp_path / "b.zarr", "no masks"),
                                  (manifest, tmp_path / "m.zarr", "None of the 2 fields can be cut"),
                                  (folder, locked, "Cannot make the store folder")):
        panel.plate.extract.offer(source)
        panel.plate.extract.target.value = str(target)
        press(qtbot, panel, panel.plate.extract.extract_button)
        assert words in panel.status.value and one_sentence(panel.status.value), panel.status.value
        assert not target.exists() and panel.plate.store is None
    os.chmod(read_only, 0o755)
    # a manifest with one field missing: the store is made of the others, the missing one listed with why
    partly = tmp_path / "partly.csv"
    partly.write_text(f"image,labels,well\n{folder / 'A01_s0.tif'},{folder / 'A01_s0_cp_masks.tif'},A01\n"
                      "gone.tif,gone_masks.tif,A02\n")
    panel.plate.extract.offer(partly)
    press(qtbot, panel, panel.plate.extract.extract_button)
    assert panel.plate.store is not None and "1 field(s) left out" in panel.status.value, panel.status.value
    assert panel.plate.extract.failed.value.startswith("gone.tif: There is no image file at")


def test_a_disk_that_fills_is_one_sentence_and_the_next_press_finishes(files, predicted, tmp_path, plate_dock,
                                                                       qtbot, monkeypatch):
    """The disk fills part-way through Extract (the 4th table written) and while the objects' CSV is exported: one
    sentence in the dock each time, no store opened, no CSV left; with space again, Extract finishes the same store
    as an uninterrupted run."""
    import errno

    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    folder, reference = files
    viewer, panel = plate_dock()
    write, calls = pq.write_table, []

    def fills_up(*args, **kwargs):
        calls.append(1)
        if len(calls) == 4:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return write(*args, **kwargs)

    monkeypatch.setattr(pq, "write_table", fills_up)
    target = tmp_path / "full.zarr"
    panel.plate.extract.offer(folder)
    panel.plate.extract.target.value = str(target)
    press(qtbot, panel, panel.plate.extract.extract_button)
    said = panel.status.value
    assert "No space left on device" in said and one_sentence(said) and panel.plate.store is None, said
    monkeypatch.setattr(pq, "write_table", write)
    press(qtbot, panel, panel.plate.extract.extract_button)
    assert panel.plate.store is not None and "Extracted" in panel.status.value, panel.status.value
    same_store(target, reference.path)

    class FullWriter(pcsv.CSVWriter):
        def write_table(self, *args, **kwargs):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    store, _ = predicted
    panel.plate.open_store(store.path)
    settle(qtbot, panel)
    monkeypatch.setattr(pcsv, "CSVWriter", FullWriter)
    out = tmp_path / "objects.csv"
    panel.plate.export.export_objects(out)
    settle(qtbot, panel)
    said = panel.status.value
    assert "No space left on device" in said and one_sentence(said) and not out.exists(), said
    assert not list(tmp_path.glob("*objects.csv*"))             # no temporary file left beside it either


def test_results_that_do_not_fit_the_store_are_one_sentence(files, predicted, tmp_path, plate_dock, qtbot):
    folder, _ = files
    store, km = predicted
    other = ticlust.extract(folder, tmp_path / "other.zarr", crop_size=40)
    viewer, panel = plate_dock(other.path, km)
    assert "40×40" in panel.status.value and one_sentence(panel.status.value) and panel.result is None
    # the same crop size, other crop options (not turned upright): said, and nothing loaded
    upright = ticlust.extract(folder, tmp_path / "upright.zarr", crop_size=store.size, orient=False)
    panel.plate.open_store(upright.path)
    settle(qtbot, panel)
    panel.load_result(km)
    settle(qtbot, panel)
    said = panel.status.value
    assert "orient=True" in said and "orient=False" in said and one_sentence(said) and panel.result is None, said
    # a landmark result (another family: contours, not crops) can assign but not be inspected or curated here
    shapes = ticlust.fit(ticlust.sample("shapes")[0], "shape-kmeans", k=2, device="cpu")
    path = shapes.save(tmp_path / "shapes.npz")
    panel.plate.open_store(store.path)
    settle(qtbot, panel)
    panel.load_result(path)
    settle(qtbot, panel)
    assert panel.result is not None and panel.result.method == "shape-kmeans"
    panel.plate.picked_objects = [0]
    panel.curate.move_button.native.click()
    assert "not fitted on an object store" in panel.status.value and one_sentence(panel.status.value)
    panel.plate.inspect(0)
    settle(qtbot, panel)
    assert "contours" in panel.status.value and one_sentence(panel.status.value)


def test_a_store_deleted_while_open_and_a_result_deleted_before_apply(predicted, tmp_path, plate_dock, qtbot):
    store, km = predicted
    viewer, panel = plate_dock()
    copy = shutil.copy(km, tmp_path / "gone.npz")
    os.remove(copy)
    panel.plate.open_store(store.path)
    settle(qtbot, panel)
    panel.load_result(copy)
    settle(qtbot, panel)
    assert "No result file" in panel.status.value and one_sentence(panel.status.value)
    loaded = shutil.copy(km, tmp_path / "loaded.npz")
    panel.load_result(loaded)
    settle(qtbot, panel)
    assert panel.plate.predicted is panel.result          # the store's predictions are this file's
    os.remove(loaded)                               # the file goes after Load: Apply uses what was loaded
    press(qtbot, panel, panel.plate.apply_run.button)
    assert "painted by cluster (loaded.npz applied)" in panel.status.value, panel.status.value
    shutil.rmtree(store.path)

    def says_gone():
        """The sentence reaches the status line from the worker's failure signal, which can come a turn of the
        event loop after the worker is done: wait for it, then check it is one sentence."""
        qtbot.waitUntil(lambda: "p.zarr is gone" in panel.status.value, timeout=60_000)
        assert one_sentence(panel.status.value), panel.status.value

    panel.plate.pick(3)
    settle(qtbot, panel)
    says_gone()
    for button in (panel.plate.predict_run.button, panel.run_button, panel.plate.apply_run.button):
        panel.say("")
        press(qtbot, panel, button)
        says_gone()
    panel.plate.inspect(5)
    settle(qtbot, panel)
    says_gone()
    panel.plate.export.export_objects(tmp_path / "x.csv")
    settle(qtbot, panel)
    says_gone()
    assert not (tmp_path / "x.csv").exists()
    assert not store.path.exists()                  # nothing wrote a new store there


# ---- the reader and the store's default place --------------------------------------------------------
def test_an_ome_zarr_plate_through_file_open_and_an_image_through_the_folder_button(write_hcs_plate, tmp_path, plate_dock, qtbot,
                                                                                    monkeypatch):
    """An NGFF HCS plate (written with ome-zarr-py) opened with File > Open offers itself for extraction beside it;
    Extract makes the same store as ``ticlust.extract`` and opens it with its wells; a single OME-Zarr image with
    labels, picked with the dock's Folder / OME-Zarr… button, does the same."""
    import zarr
    from ome_zarr.writer import write_image, write_labels
    from qtpy.QtWidgets import QFileDialog

    from ticlust.datasets.nuclei import nuclei_field

    plate = tmp_path / "plate.ome.zarr"
    made = write_hcs_plate(plate)
    viewer, panel = plate_dock(file=plate)                       # File > Open of the plate: the plate reader
    assert panel.plate.extract.source.value == str(plate)
    assert panel.plate.extract.target.value == str(tmp_path / "plate.objects.zarr")
    press(qtbot, panel, panel.plate.extract.extract_button)
    assert panel.plate.store is not None and "Extracted" in panel.status.value, panel.status.value
    assert panel.plate.extract.failed.value == "none"
    same_store(panel.plate.store.path, ticlust.extract(plate, tmp_path / "cli.zarr").path)
    assert panel.plate.has_wells and list(panel.plate.well.choices) == ["A1", "A12", "B3"]
    assert np.array_equal(viewer.layers["plate.objects field"].data, made[("A1", 0)].image)
    assert viewer.layers["plate.objects objects"].data.max() == len(panel.plate.picture.table)

    image = tmp_path / "field.ome.zarr"
    field = nuclei_field(n=10, shape=(128, 128), seed=3)
    group = zarr.open_group(image, mode="w")
    write_image(field.image, group, axes="yx")
    write_labels(field.labels, group, name="nuclei", axes="yx")
    monkeypatch.setattr(QFileDialog, "getExistingDirectory", lambda *args, **kwargs: str(image))
    panel.plate.extract.folder_button.native.click()                  # the dock's button, the folder picked
    assert panel.plate.extract.source.value == str(image)
    assert panel.plate.extract.target.value == str(tmp_path / "field.objects.zarr")
    press(qtbot, panel, panel.plate.extract.extract_button)
    assert panel.plate.store is not None and panel.plate.store.path == tmp_path / "field.objects.zarr", panel.status.value
    same_store(panel.plate.store.path, ticlust.extract(image, tmp_path / "cli_image.zarr").path)
    assert np.array_equal(viewer.layers["field.objects field"].data, field.image)


def test_the_plate_reader_claims_a_plates_files_and_nothing_else(files, tmp_path):
    from ticlust._napari import reader
    from ticlust._napari.plate_parts import store_beside

    folder, reference = files
    assert reader.get_plate_reader(str(folder)) is reader.read_plate_input
    assert reader.get_plate_reader(str(folder / "plate.csv")) is reader.read_plate_input
    assert reader.get_plate_reader(str(reference.path)) is None             # a store opens as a store
    assert reader.get_store_reader(str(reference.path)) is reader.read_store
    (tmp_path / "notes.csv").write_text("a,b\n1,2\n")
    assert reader.get_plate_reader(str(tmp_path / "notes.csv")) is None    # no image,labels columns
    assert reader.get_plate_reader(str(tmp_path)) is None                   # no images
    assert reader.get_plate_reader([str(folder)]) is None
    assert store_beside(folder) == folder.with_name(f"{folder.name}.zarr")
    assert store_beside(folder / "plate.csv") == folder / "plate.zarr"
    assert store_beside(tmp_path / "field.ome.zarr") == tmp_path / "field.objects.zarr"


def test_a_loaddata_plate_extracts_the_channels_named_in_the_dock(tmp_path, plate_dock, qtbot):
    from ticlust.datasets.cell_painting import cell_painting_plate

    plate = cell_painting_plate(tmp_path / "cp", wells=1, sites=1, cells=12, shape=(128, 128), seed=2)
    reference = ticlust.extract(plate.load_data, tmp_path / "reference.zarr", channel=["Mito", "DNA"])
    viewer, panel = plate_dock()
    panel.plate.extract.offer(plate.load_data)
    for typed, words in ((" ,Mito", "has an empty channel name"), ("GFP", "has no channel 'GFP'")):
        panel.plate.extract.channels.value = typed
        panel.plate.extract.target.value = str(tmp_path / "bad.zarr")
        press(qtbot, panel, panel.plate.extract.extract_button)
        assert words in panel.status.value and one_sentence(panel.status.value), panel.status.value
        assert not (tmp_path / "bad.zarr").exists()
    panel.plate.extract.channels.value = "Mito,DNA"
    panel.plate.extract.target.value = str(tmp_path / "dock.zarr")
    press(qtbot, panel, panel.plate.extract.extract_button)
    assert panel.plate.store is not None and panel.plate.store.channels == 2, panel.status.value
    same_store(tmp_path / "dock.zarr", tmp_path / "reference.zarr")


# ---- napari's one-time costs, paid before the first click --------------------------------------------------------
def test_the_heap_is_frozen_while_the_dock_is_open_and_the_text_glyphs_are_loaded_with_a_store(files, plate_dock,
                                                                                                 qtbot):
    """A full garbage collection walks every object Python tracks while holding the interpreter's lock (with napari,
    Qt and torch imported, hundreds of thousands: tenths of a second of frozen window). Once warmed up the dock
    freezes them (``gc.freeze``), so a collection walks only what was made since; closing the dock gives them
    back to the collector. A store opened renders the glyphs of napari's canvas font that the first Shapes layer
    shown (the inspector's frames) would otherwise render in its repaint."""
    import gc

    from qtpy.QtWidgets import QDockWidget

    from ticlust._napari import layers as L

    gc.unfreeze()
    _, reference = files
    viewer, panel = plate_dock(reference.path)
    frozen = gc.get_freeze_count()
    assert frozen > 100_000 and len(gc.get_objects()) < frozen / 4, (frozen, len(gc.get_objects()))
    info = viewer.window._qt_viewer.canvas.font_info()
    assert set(L.MEASURED_GLYPHS) <= set(info.font_manager.get_font(info.face)._glyphs)
    dock = panel.native
    while not isinstance(dock, QDockWidget):
        dock = dock.parent()
    dock.destroyOnClose()                                         # what the dock's close button does
    qtbot.waitUntil(lambda: panel.closed, timeout=10_000)
    assert gc.get_freeze_count() == 0


def test_drawings_in_turns_of_their_own_let_a_timer_run_between_them(plate_dock, qtbot):
    """What the dock draws one turn at a time (``later``: a store's layers, the inspector's parts) leaves the event
    loop between turns: a 5 ms timer ticks between two drawings of 50 ms each, as input and repaints get in."""
    import time

    from qtpy.QtCore import QTimer

    viewer, panel = plate_dock()
    log = []
    tick = QTimer()
    tick.timeout.connect(lambda: log.append("tick"))
    tick.start(5)

    def drawing(name, then=None):
        start = time.perf_counter()
        while time.perf_counter() - start < 0.05:       # the GUI thread busy, as a layer being made keeps it
            pass
        log.append(name)
        if then is not None:
            panel.later(then)
    qtbot.wait(20)
    panel.later(lambda: drawing("a", lambda: drawing("b", lambda: drawing("c"))))
    qtbot.waitUntil(lambda: "c" in log and not panel.busy, timeout=5_000)
    tick.stop()
    order = list(log)
    a, b, c = order.index("a"), order.index("b"), order.index("c")
    assert "tick" in order[a:b] and "tick" in order[b:c], order


def test_a_close_down_runs_once_when_its_widget_is_deleted_or_collected(qtbot):
    """``on_destroyed``: the callback runs once when Qt deletes the widget, and once when a garbage collection frees
    the widget's reference cycle (a lambda slot on ``destroyed`` is cleared in that collection and never runs)."""
    import gc

    from qtpy.QtWidgets import QWidget

    from ticlust._napari.parts import on_destroyed

    calls = []
    widget = QWidget()
    on_destroyed(widget, calls.append, "deleted")
    widget.deleteLater()
    qtbot.waitUntil(lambda: calls == ["deleted"], timeout=5_000)
    del widget
    gc.collect()
    for i in range(3):
        widget = QWidget()
        widget.me = widget                      # a cycle: only a garbage collection frees it
        on_destroyed(widget, calls.append, i)
        del widget
        gc.collect()
    qtbot.wait(20)
    assert calls == ["deleted", 0, 1, 2]


def test_the_docks_close_down_runs_when_its_widget_is_deleted(make_napari_viewer, qtbot):
    """The dock's widget deleted without its dock's close button (never docked here): the dock closes down — the heap
    given back, its click callback taken from the viewer."""
    import gc

    from ticlust._napari.dock import TiclustDock

    viewer = make_napari_viewer()
    panel = TiclustDock(viewer)
    qtbot.waitUntil(lambda: panel.ready and panel.importing is None, timeout=120_000)   # warmed up: the heap frozen
    assert gc.get_freeze_count() > 0 and panel._on_click in viewer.mouse_drag_callbacks
    panel.native.deleteLater()
    qtbot.waitUntil(lambda: panel.closed, timeout=5_000)
    assert gc.get_freeze_count() == 0 and panel._on_click not in viewer.mouse_drag_callbacks


def test_raw_fields_without_masks_are_segmented_by_extract_then_fitted_and_predicted(raw_fields, tmp_path, plate_dock,
                                                                                       qtbot):
    """Issue 53 in the dock: a folder of one TIFF per channel and no masks; Extract with segment nuclei (the diameter)
    and the channel files' suffixes under Advanced; every nucleus found is kept or listed, the masks lie beside the
    store; Fit and Predict go on as for any plate."""
    folder, _, fields = raw_fields
    viewer, panel = plate_dock()
    extract = panel.plate.extract
    extract.source.value, extract.target.value = str(folder), str(tmp_path / "raw.zarr")
    extract.diameter.value, extract.suffixes.value, extract.channels.value = fields[0].diameter, "D, F", "D,F"
    press(qtbot, panel, extract.extract_button)
    store = panel.plate.store
    assert store is not None and store.channels == 2 and "Extracted" in panel.status.value, panel.status.value
    for i, row in store.fields.iterrows():
        found = set(np.unique(tifffile.imread(row["labels"]))) - {0}
        kept = set(store.table.label[store.table.field_index == i]) | set(store.skipped.label[store.skipped.field_index == i])
        assert found == kept and len(found) > 8
    assert (tmp_path / "raw_masks" / "site0_masks.tif").is_file()
    panel.form.method.value, panel.form.k.value, panel.plate.sample.value = "kmeans", 3, 0
    press(qtbot, panel, panel.run_button)
    press(qtbot, panel, panel.plate.predict_run.button)
    assert f"Assigned {len(store)} objects of 3 fields" in panel.status.value, panel.status.value
