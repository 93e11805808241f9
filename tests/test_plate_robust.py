"""The plate route's findings of a robustness pass (extract, fit on a store, predict a store; the library and the
CLI): each was a file destroyed, silently wrong data, a run that "succeeded" with nothing, an internal error, a
hang or a misleading sentence, and each is now one sentence (an InputError; exit status 2 on the command line)
with nothing written and the inputs byte for byte as they were, or a correct result. Then a Hypothesis battery
over generated plates, manifests and damaged stores, runs of two processes on one store at once, and dask workers
killed mid-run. docs/robustness.md has the table of cases (before, after)."""
from __future__ import annotations

import contextlib
import io
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import tifffile

import ticlust
from test_store import files
from ticlust.cli import main
from ticlust.core import backends
from ticlust.datasets.nuclei import write_nuclei_plate
from ticlust.errors import InputError
from ticlust.plate.run import PREDICTIONS, fit_store, predict_store
from ticlust.plate.store import read_attributes

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def plate(tmp_path_factory):
    """A small generated plate (3 fields × 12 nuclei of 128×128: its folder and manifest), its store extracted from
    the manifest in this process, a k-means result fitted on the store's crops, and the store's predictions by that result."""
    folder = tmp_path_factory.mktemp("robust")
    manifest = write_nuclei_plate(folder / "plate", fields=3, n=12, shape=(128, 128), seed=3)
    store = ticlust.extract(manifest, folder / "ref" / "s.zarr")
    result = ticlust.fit(store.crops[:], k=2, seed=0, progress=False).save(folder / "km.npz")
    predicted = folder / "predicted" / "s.zarr"
    shutil.copytree(store.path, predicted)
    table = ticlust.predict(result, predicted).table
    return manifest, store, result, table


def copy_of(store, tmp_path: Path, name: str = "s.zarr") -> Path:
    """A copy of the store (same name as the reference: the two compare byte for byte)."""
    copy = tmp_path / name
    shutil.copytree(store.path if hasattr(store, "path") else store, copy)
    return copy


def one_sentence(err) -> str:
    message = str(err.value if hasattr(err, "value") else err)
    assert message and "\n" not in message and "Traceback" not in message, message
    return message


def run_cli(*args) -> tuple[int, str]:
    """``ticlust ARGS`` in this process: (exit status, standard error)."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main([str(a) for a in args])
    return code, err.getvalue()


def refused_by_cli(*args) -> str:
    """The one ``ticlust: error:`` line of a refused command (exit status 2, no traceback, nothing unexpected)."""
    code, err = run_cli(*args)
    assert code == 2 and err.count("\n") == 1 and err.startswith("ticlust: error: "), err
    assert "This is unexpected" not in err, err
    return err.strip()


# ---- files destroyed: --csv / --parquet onto the store, the plate or the result ----------------------------------
TARGETS = {
    "the store's table": lambda store, plate, result: store / "table.parquet",
    "a file inside the store": lambda store, plate, result: store / "fields" / "00000" / "rows.parquet",
    "the store folder": lambda store, plate, result: store,
    "a new file inside the store": lambda store, plate, result: store / "fields" / "out.csv",
    "an input image": lambda store, plate, result: plate / "A01_s0.tif",
    "an input mask": lambda store, plate, result: plate / "A01_s1_cp_masks.tif",
    "the manifest": lambda store, plate, result: plate / "plate.csv",
    "the result": lambda store, plate, result: result,
}


@pytest.mark.parametrize("where", sorted(TARGETS))
@pytest.mark.parametrize("how", ["cli --csv", "library parquet="])
def test_predict_outputs_onto_the_store_the_plate_or_the_result_are_refused_before_anything_is_written(
        plate, tmp_path, where, how):
    manifest, ref, result, _ = plate
    store = copy_of(ref, tmp_path)
    target = TARGETS[where](store, manifest.parent, result)
    before = files(store), files(manifest.parent), result.read_bytes()
    if how == "cli --csv":
        message = refused_by_cli("predict", result, store, "--csv", target, "--quiet")
    else:
        with pytest.raises(InputError) as err:
            predict_store(result, store, parquet=target)
        message = one_sentence(err)
    assert str(target.name) in message or str(target) in message
    assert (files(store), files(manifest.parent), result.read_bytes()) == before
    assert not (store / PREDICTIONS).exists() and not list(store.rglob("*.partial"))


def test_csv_and_parquet_onto_one_file_and_a_file_beside_the_inputs(plate, tmp_path):
    manifest, ref, result, table = plate
    store = copy_of(ref, tmp_path)
    with pytest.raises(InputError, match="are the same file"):
        predict_store(result, store, csv=tmp_path / "p", parquet=tmp_path / "p")
    out = manifest.parent / "predictions.csv"             # a new file beside the plate's files is fine
    try:
        predict_store(result, store, csv=out)
        assert len(pd.read_csv(out)) == len(table)
    finally:
        out.unlink(missing_ok=True)


# ---- silently wrong data ---------------------------------------------------------------------------------------
def test_a_crops_chunk_deleted_after_extraction_is_refused_not_read_as_zeros(plate, tmp_path):
    manifest, ref, result, _ = plate
    store = copy_of(ref, tmp_path)
    (store / "fields" / "00001" / "crops" / "c" / "0" / "0" / "0").unlink()
    reopened = ticlust.open_objects(store)
    assert np.array_equal(reopened.crops[:3], ref.crops[:3])                 # field 0 still reads
    for read in (lambda: reopened.crops[:], lambda: fit_store(store, k=2),
                 lambda: predict_store(result, store)):
        with pytest.raises(InputError) as err:
            read()
        assert "the crops of field 1 cannot be read (1 of its 1 chunks are missing)" in one_sentence(err)
    assert not (store / PREDICTIONS).exists()


def test_a_field_of_zeros_is_a_store_that_reads(tmp_path):
    """Chunks that equal the fill value are written too, so a blank field is not taken for a lost chunk."""
    labels = np.zeros((40, 40), np.int32)
    labels[10:20, 10:20], labels[25:30, 22:35] = 1, 2
    np.save(tmp_path / "f.npy", np.zeros((40, 40), np.float32))
    np.save(tmp_path / "f_masks.npy", labels)
    store = ticlust.extract(tmp_path, tmp_path / "s.zarr")
    assert len(store) == 2 and not np.asarray(store.crops).any() and store.masks[:].any()


@pytest.mark.parametrize("twice", ["the same row", "one image under two wells"])
def test_a_field_listed_twice_in_a_manifest_is_refused_naming_the_rows(plate, tmp_path, twice):
    manifest, _, _, _ = plate
    rows = pd.read_csv(manifest)
    extra = rows.iloc[[1]].copy()
    if twice != "the same row":
        extra["well"] = "Z09"
    listed = tmp_path / "twice.csv"
    pd.concat([rows, extra]).assign(image=lambda t: [str(manifest.parent / v) for v in t["image"]],
                                    labels=lambda t: [str(manifest.parent / v) for v in t["labels"]]).to_csv(listed, index=False)
    with pytest.raises(InputError) as err:
        ticlust.extract(listed, tmp_path / "s.zarr")
    assert "A01_s1.tif with the mask" in one_sentence(err) and "2 times (rows 3, 5, the header being row 1)" in str(err.value)
    assert not (tmp_path / "s.zarr").exists()


def test_one_image_with_two_masks_is_two_fields(plate, tmp_path):
    manifest, _, _, _ = plate
    folder = manifest.parent
    mask = tifffile.imread(folder / "A01_s0_cp_masks.tif")
    tifffile.imwrite(tmp_path / "cells.tif", mask)
    pd.DataFrame({"image": [str(folder / "A01_s0.tif")] * 2,
                  "labels": [str(folder / "A01_s0_cp_masks.tif"), str(tmp_path / "cells.tif")]}).to_csv(
        tmp_path / "two.csv", index=False)
    store = ticlust.extract(tmp_path / "two.csv", tmp_path / "s.zarr")
    assert store.attributes["input"]["fields"] == 2 and len(store) % 2 == 0


@pytest.mark.parametrize("scale", [1e300, 1e-300])
def test_float_fields_near_the_ends_of_float64_give_finite_crops(plate, tmp_path, scale):
    manifest, _, _, _ = plate
    image = tifffile.imread(manifest.parent / "A01_s0.tif").astype(np.float64)
    np.save(tmp_path / "f.npy", image * scale)
    np.save(tmp_path / "f_masks.npy", tifffile.imread(manifest.parent / "A01_s0_cp_masks.tif"))
    np.save(tmp_path / "unit.npy", image)
    before = files(tmp_path)
    store = ticlust.extract(tmp_path / "f.npy", tmp_path / "s.zarr", labels=tmp_path / "f_masks.npy")
    unit = ticlust.extract(tmp_path / "unit.npy", tmp_path / "u.zarr", labels=tmp_path / "f_masks.npy")
    crops = np.asarray(store.crops)
    assert np.isfinite(crops).all() and crops.max() > 0.5
    np.testing.assert_allclose(crops, np.asarray(unit.crops), rtol=1e-5, atol=1e-6)
    assert {k: v for k, v in files(tmp_path).items() if not k.startswith(("s.zarr", "u.zarr"))} == before


def test_a_parts_predictions_replaced_by_another_parts_are_predicted_again(plate, tmp_path):
    _, ref, result, table = plate
    store = copy_of(ref, tmp_path)
    predict_store(result, store)
    shutil.copy(store / "fields" / "00000" / "predict.parquet", store / "fields" / "00001" / "predict.parquet")
    again = predict_store(result, store)
    assert again.skipped == 2                                   # field 1's copied file is not taken for its own
    pd.testing.assert_frame_equal(again.table, table)


def test_a_table_whose_rows_are_not_the_parts_objects_is_not_joined(plate, tmp_path):
    _, ref, result, _ = plate
    store = copy_of(ref, tmp_path)
    edited = pd.read_parquet(store / "table.parquet")
    edited["label"] = edited["label"].to_numpy()[::-1]          # the same rows, other objects' labels
    edited.to_parquet(store / "table.parquet", index=False)
    with pytest.raises(InputError) as err:
        predict_store(result, store, csv=tmp_path / "p.csv")
    assert "the predictions of field 0 are not of the objects its table lists there" in one_sentence(err)
    assert not (store / PREDICTIONS).exists() and not (tmp_path / "p.csv").exists()


@pytest.mark.parametrize("damage", ["garbage", "truncated", "rows missing"])
def test_extract_over_a_store_with_a_damaged_table_repairs_it(plate, tmp_path, damage):
    manifest, ref, _, _ = plate
    store = copy_of(ref, tmp_path)
    table = store / "table.parquet"
    if damage == "garbage":
        table.write_bytes(b"not parquet" * 9)
    elif damage == "truncated":
        table.write_bytes(table.read_bytes()[:len(table.read_bytes()) // 2])
    else:
        pd.read_parquet(table).iloc[:-3].to_parquet(table, index=False)
    ticlust.extract(manifest, store)
    assert files(store) == files(ref.path)
    assert len(ticlust.open_objects(store).table) == len(ref)


# ---- runs that "succeeded" with nothing --------------------------------------------------------------------------
def swapped(manifest: Path, tmp_path: Path) -> Path:
    """The manifest with its image and labels columns swapped."""
    rows = pd.read_csv(manifest)
    rows["image"], rows["labels"] = ([str(manifest.parent / v) for v in rows["labels"]],
                                     [str(manifest.parent / v) for v in rows["image"]])
    rows.to_csv(tmp_path / "swapped.csv", index=False)
    return tmp_path / "swapped.csv"


def infinite(manifest: Path, tmp_path: Path) -> Path:
    """The plate's fields as float32 with +inf in every object's pixels."""
    folder = tmp_path / "inf"
    folder.mkdir()
    for image in sorted(manifest.parent.glob("*_s?.tif")):
        mask = tifffile.imread(image.with_name(image.stem + "_cp_masks.tif"))
        pixels = tifffile.imread(image).astype(np.float32)
        pixels[mask > 0] = np.inf
        tifffile.imwrite(folder / image.name, pixels)
        tifffile.imwrite(folder / f"{image.stem}_cp_masks.tif", mask)
    return folder


NOTHING_CUT = {
    "a crop too small": (lambda m, t: m.parent, {"crop_size": 4}, "None of the 3 fields can be cut; the first, A01_s0.tif:"),
    "an absurd crop size": (lambda m, t: m.parent, {"crop_size": 100_000}, "crop_size=100000 is larger than any object"),
    "image and labels swapped": (swapped, {}, "None of the 3 fields can be cut"),
    "+inf in every object": (infinite, {}, "None of the 3 fields can be cut; the first, A01_s0.tif: The image holds NaN"),
}


@pytest.mark.parametrize("case", sorted(NOTHING_CUT))
def test_a_run_in_which_every_field_fails_when_cut_is_refused_and_leaves_nothing(plate, tmp_path, case):
    manifest, _, _, _ = plate
    make, options, said = NOTHING_CUT[case]
    source = make(manifest, tmp_path)
    before = files(source.parent if source.is_file() else source)
    with pytest.raises(InputError) as err:
        ticlust.extract(source, tmp_path / "new.zarr", **options)
    assert said in one_sentence(err)
    assert not (tmp_path / "new.zarr").exists()
    (tmp_path / "empty").mkdir()                                  # a folder the user made for the store stays empty
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in options.items()]
    assert said in refused_by_cli("extract", source, "-o", tmp_path / "empty", "--quiet", *flags)
    assert os.listdir(tmp_path / "empty") == []
    assert files(source.parent if source.is_file() else source) == before


def test_masks_that_hold_nothing_with_a_crop_size_are_refused(tmp_path):
    np.save(tmp_path / "f.npy", np.ones((30, 30), np.float32))
    np.save(tmp_path / "f_masks.npy", np.zeros((30, 30), np.int32))
    with pytest.raises(InputError, match="hold no objects away from the border"):
        ticlust.extract(tmp_path, tmp_path / "s.zarr", crop_size=8)
    assert not (tmp_path / "s.zarr").exists()


# ---- internal errors ------------------------------------------------------------------------------------------------
def test_a_negative_seed_on_a_store_fit_is_one_sentence(plate, tmp_path):
    _, ref, _, _ = plate
    assert "seed = -1 must be a whole number between 0" in refused_by_cli(
        "fit", ref.path, "--seed", "-1", "--fit-sample", "10", "--k", "2", "-o", tmp_path / "r.npz", "--quiet")
    with pytest.raises(InputError, match="seed = -3"):
        fit_store(ref, k=2, sample=10, seed=-3)
    assert not (tmp_path / "r.npz").exists()


@pytest.mark.parametrize("column", ["cluster", "score", "runner_up", "runner_up_score", "rejected", "object"])
def test_a_manifest_column_a_prediction_adds_is_refused_at_extract(plate, tmp_path, column):
    manifest, _, _, _ = plate
    rows = pd.read_csv(manifest)
    rows[column] = 1
    rows["image"] = [str(manifest.parent / v) for v in rows["image"]]
    rows["labels"] = [str(manifest.parent / v) for v in rows["labels"]]
    rows.to_csv(tmp_path / "m.csv", index=False)
    with pytest.raises(InputError) as err:
        ticlust.extract(tmp_path / "m.csv", tmp_path / "s.zarr")
    assert f"has column {column}, which every object row has already or a prediction adds" in one_sentence(err)
    assert not (tmp_path / "s.zarr").exists()


@pytest.mark.parametrize("damage", ["truncated", "garbage"])
def test_a_damaged_table_is_refused_by_fit_and_predict_naming_the_store_and_file(plate, tmp_path, damage):
    _, ref, result, _ = plate
    store = copy_of(ref, tmp_path)
    table = store / "table.parquet"
    table.write_bytes(table.read_bytes()[:len(table.read_bytes()) // 2] if damage == "truncated" else b"x" * 99)
    before = files(store)
    said = f"{store} is damaged: its table.parquet cannot be read"
    assert said in refused_by_cli("fit", store, "--k", "2", "-o", tmp_path / "r.npz", "--quiet")
    assert said in refused_by_cli("predict", result, store, "--quiet")
    for call in (lambda: fit_store(store, k=2), lambda: predict_store(result, store)):
        with pytest.raises(InputError, match=said):
            call()
    assert files(store) == before and not (tmp_path / "r.npz").exists()


def test_a_missing_part_is_refused_by_fit_and_predict_and_cut_again_by_extract(plate, tmp_path):
    manifest, ref, result, _ = plate
    store = copy_of(ref, tmp_path)
    shutil.rmtree(store / "fields" / "00001")
    said = f"{store} is damaged: the part of field 1 ({store / 'fields' / '00001'}) is missing"
    assert said in refused_by_cli("fit", store, "--k", "2", "-o", tmp_path / "r.npz", "--quiet")
    assert said in refused_by_cli("predict", result, store, "--quiet")
    with pytest.raises(InputError) as err:
        ticlust.open_objects(store).crops[:]
    assert "run the same ticlust extract command again" in one_sentence(err) and "delete" not in str(err.value)
    ticlust.extract(manifest, store)                             # what the sentence says to do
    assert files(store) == files(ref.path)


@contextlib.contextmanager
def listener(speaks: bytes | None):
    """A TCP port on 127.0.0.1 that accepts connections and, with ``speaks``, answers each with those bytes (another
    protocol), else says nothing at all: no dask scheduler. Yields its address."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        accepted, stop = [], threading.Event()

        def answer():
            server.settimeout(0.2)
            while not stop.is_set():
                try:
                    conn, _ = server.accept()
                except OSError:
                    continue
                accepted.append(conn)
                if speaks is not None:
                    conn.sendall(speaks)

        thread = threading.Thread(target=answer, daemon=True)
        thread.start()
        try:
            yield f"tcp://127.0.0.1:{server.getsockname()[1]}"
        finally:
            stop.set()
            thread.join()
            for conn in accepted:
                conn.close()


def test_a_port_that_accepts_but_never_speaks_dask_gives_up_in_time(plate, tmp_path, monkeypatch):
    manifest, ref, result, _ = plate
    monkeypatch.setattr(backends, "CONNECT_TIMEOUT", 2.0)
    with listener(None) as address:
        for call in (lambda: ticlust.extract(manifest.parent, tmp_path / "s.zarr", scheduler=address),
                     lambda: predict_store(result, ref, scheduler=address, csv=tmp_path / "p.csv")):
            start = time.monotonic()
            with pytest.raises(InputError) as err:
                call()
            assert time.monotonic() - start < 8
            assert one_sentence(err) == (f"Cannot reach the dask scheduler at {address} within 2 s (no dask scheduler "
                                         "answered): start it (dask scheduler) or give its address as tcp://HOST:PORT; "
                                         "nothing was written.")
    assert not (tmp_path / "s.zarr").exists() and not (tmp_path / "p.csv").exists()


def test_a_port_that_speaks_another_protocol_is_one_line_and_the_command_ends_at_once(plate, tmp_path):
    """dask's client used to end in a MemoryError (it read an HTTP answer as a frame length), then spent 20 s
    closing itself, printing its own traceback."""
    manifest, _, _, _ = plate
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    with listener(b"HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\nhello" * 20) as address:
        start = time.monotonic()
        run = subprocess.run([sys.executable, "-m", "ticlust.cli", "extract", str(manifest.parent), "-o",
                              str(tmp_path / "s.zarr"), "--scheduler", address], env=env, capture_output=True,
                             text=True, timeout=120)
        took = time.monotonic() - start
    assert run.returncode == 2 and run.stderr.count("\n") == 1, run.stderr
    assert "does not speak dask's protocol" in run.stderr and took < 15
    assert not (tmp_path / "s.zarr").exists()


@pytest.mark.parametrize("address", ["tcp://", "tcp://127.0.0.1:99999", "foo://host:1", "localhost"])
def test_an_address_that_is_no_scheduler_address_is_refused_at_once(plate, tmp_path, address):
    manifest, _, _, _ = plate
    start = time.monotonic()
    with pytest.raises(InputError, match="is not a dask scheduler address: give it as tcp://HOST:PORT"):
        ticlust.extract(manifest.parent, tmp_path / "s.zarr", scheduler=address)
    assert time.monotonic() - start < 5 and not (tmp_path / "s.zarr").exists()


# ---- misleading sentences ---------------------------------------------------------------------------------------------
def test_a_store_whose_zarr_json_is_not_json_is_called_a_damaged_store(plate, tmp_path):
    manifest, ref, result, _ = plate
    store = copy_of(ref, tmp_path)
    (store / "zarr.json").write_text("{ not json")
    before = files(store)
    said = f"{store} is a damaged object store (its zarr.json cannot be read: JSONDecodeError"
    for args in (("fit", store, "--k", "2", "-o", tmp_path / "r.npz"), ("predict", result, store),
                 ("extract", manifest.parent, "-o", store)):
        message = refused_by_cli(*args, "--quiet")
        assert said in message and "holds no" not in message
    with pytest.raises(InputError, match="is a damaged object store"):
        ticlust.open_objects(store)
    assert files(store) == before


def test_export_of_a_store_says_it_is_a_store(plate, tmp_path):
    _, ref, result, _ = plate
    message = refused_by_cli("export", result, "--input", ref.path, "--gallery", tmp_path / "g")
    assert f"--input {ref.path} is an object store (ticlust extract), not a stack" in message
    assert not (tmp_path / "g").exists()


@pytest.mark.parametrize("where", ["the input folder", "a folder of other files", "the manifest"])
def test_a_refused_store_folder_keeps_no_lock_file(plate, tmp_path, where):
    manifest, _, _, _ = plate
    if where == "the input folder":
        folder, said = manifest.parent, "is the input"
    elif where == "a folder of other files":
        folder, said = tmp_path / "mine", "exists and is not an object store (it holds notes.txt)"
        folder.mkdir()
        (folder / "notes.txt").write_text("mine")
    else:
        folder, said = manifest, "is a file, not an object store"
    before = files(folder.parent)
    assert said in refused_by_cli("extract", manifest.parent, "-o", folder, "--quiet")
    with pytest.raises(InputError, match=re.escape(said)):
        ticlust.extract(manifest.parent, folder)
    assert files(folder.parent) == before and not (folder / ".lock").exists()
