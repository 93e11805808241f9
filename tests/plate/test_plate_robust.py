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
from ticlust.cli import main
from ticlust.core import backends
from ticlust.errors import InputError
from ticlust.plate.run import PREDICTIONS, fit_store, predict_store
from ticlust.plate.store import read_attributes

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def plate(tmp_path_factory, predicted_plate):
    """A small generated plate (3 fields × 12 nuclei of 128×128: its folder and manifest), its store extracted from
    the manifest in this process, a k-means result fitted on the store's crops, and the store's predictions by that result."""
    return predicted_plate(tmp_path_factory.mktemp("robust"), fields=3, n=12, size=128, seed=3, k=2)


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
def test_predict_outputs_onto_the_store_the_plate_or_the_result_are_refused_before_anything_is_written(files, 
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
def test_float_fields_near_the_ends_of_float64_give_finite_crops(files, plate, tmp_path, scale):
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
def test_extract_over_a_store_with_a_damaged_table_repairs_it(files, plate, tmp_path, damage):
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
def test_a_run_in_which_every_field_fails_when_cut_is_refused_and_leaves_nothing(files, plate, tmp_path, case):
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
def test_a_damaged_table_is_refused_by_fit_and_predict_naming_the_store_and_file(files, plate, tmp_path, damage):
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


def test_a_missing_part_is_refused_by_fit_and_predict_and_cut_again_by_extract(files, plate, tmp_path):
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
def test_a_store_whose_zarr_json_is_not_json_is_called_a_damaged_store(files, plate, tmp_path):
    manifest, ref, result, _ = plate
    store = copy_of(ref, tmp_path)
    (store / "zarr.json").write_text("{ not json")
    before = files(store)
    said = f"{store} is a damaged object store (its zarr.json cannot be read as JSON)"
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
def test_a_refused_store_folder_keeps_no_lock_file(files, plate, tmp_path, where):
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


# ---- a battery over generated plates, manifests and damaged stores ------------------------------------------------
from hypothesis import HealthCheck, event, given, settings, strategies as st  # noqa: E402

_COMMON = dict(deadline=None, derandomize=True, database=None, print_blob=True,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much,
                                      HealthCheck.function_scoped_fixture])
#: Examples per battery in the default run (bounded: the whole battery well under a minute) and in the slow one.
BATTERY = settings(max_examples=6, **_COMMON)
LONG = settings(max_examples=int(os.environ.get("TICLUST_BATTERY_EXAMPLES", "500")), **_COMMON)
WRAPPED = re.compile(r"\b[A-Z]\w*(Error|Exception|Warning)\b:")
#: Where the batteries write their plates and stores (one folder per example, removed after it; this one at exit).
SCRATCH = Path(__import__("tempfile").mkdtemp(prefix="ticlust-plates-"))
__import__("atexit").register(shutil.rmtree, SCRATCH, ignore_errors=True)


def outcome(call):
    """``call()``'s value, or None after a clear refusal (one line, no wrapped internal error in it); any other
    exception, and a RuntimeWarning on the way (an overflow, a 0/0), fails the example."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        warnings.simplefilter("error", RuntimeWarning)
        try:
            value = call()
        except InputError as err:
            message = one_sentence(err)
            assert not WRAPPED.search(message), f"an internal error wrapped as a refusal: {message}"
            tell("a refusal")
            return None
    tell("a result")
    return value


def tell(what: str) -> None:
    """Count an outcome in Hypothesis's statistics (when a battery runs it, not a plain test)."""
    from hypothesis.control import currently_in_test_context

    if currently_in_test_context():
        event(what)


def cli_outcome(*args) -> int:
    """``ticlust ARGS`` in this process: 0, or 2 with one ``ticlust: error:`` line that is no internal error."""
    code, err = run_cli(*args)
    lines = [line for line in err.splitlines() if not line.startswith(("ticlust: note:", "ticlust: kmeans"))]
    if code == 2:
        assert len(lines) == 1 and lines[0].startswith("ticlust: error: ") and "unexpected" not in lines[0], err
        assert not WRAPPED.search(lines[0][len("ticlust: error: "):]), err
    else:
        assert code == 0, err
    tell(f"cli exit {code}")
    return code


FIELD_SHAPES = [(1, 1), (6, 9), (24, 24), (40, 17)]
CONTENTS = ["random", "random", "empty", "full", "huge", "tiny", "inf"]
MASKS = ["rectangles", "rectangles", "none", "one", "huge", "sparse ids", "float ids", "fractional", "negative"]
NAMES = ["f{}", "Zelle_é_{}", "视野 {}", "a,b {}"]


@st.composite
def generated_fields(draw):
    """One field: (image, mask) of a drawn shape, channels (1-3), dtype (uint8, uint16, float32) and content, and a
    mask with one object, none, a huge one, rectangles, sparse or float ids, a fractional or negative label."""
    shape = draw(st.sampled_from(FIELD_SHAPES))
    channels = draw(st.sampled_from([1, 1, 2, 3]))
    dtype = np.dtype(draw(st.sampled_from(["uint8", "uint16", "float32"])))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    top = np.iinfo(dtype).max if dtype.kind == "u" else 1.0
    content = draw(st.sampled_from(CONTENTS))
    image = rng.random(shape + ((channels,) if channels > 1 else ())) * top
    if content == "empty":
        image[...] = 0
    elif content == "full":
        image[...] = top
    elif content in ("huge", "tiny", "inf") and dtype.kind == "f":
        image = image * {"huge": 3e38, "tiny": 1e-40, "inf": 1.0}[content]
        if content == "inf":
            image[shape[0] // 2, shape[1] // 2] = np.inf
    image = image.astype(dtype)
    kind = draw(st.sampled_from(MASKS))
    mask = np.zeros(shape, np.float64)
    if kind == "huge":
        mask[...] = 1
    elif kind == "one":
        mask[shape[0] // 4:max(shape[0] // 4 + 1, 3 * shape[0] // 4), shape[1] // 4:max(shape[1] // 4 + 1, 3 * shape[1] // 4)] = 1
    elif kind != "none":
        ids = {"sparse ids": [3, 70, 1000], "float ids": [1.0, 2.0, 5.0]}.get(kind, [1, 2, 3])
        for label in ids:
            r, c = rng.integers(0, max(1, shape[0] - 2)), rng.integers(0, max(1, shape[1] - 2))
            mask[r:r + rng.integers(1, 7), c:c + rng.integers(1, 7)] = label
        if kind in ("fractional", "negative") and mask.any():
            mask[mask == mask.max()] = 1.5 if kind == "fractional" else -2
    mask_dtype = {"float ids": np.float32, "fractional": np.float64, "negative": np.int16}.get(
        kind, draw(st.sampled_from([np.uint16, np.int32, np.uint8])))
    return image, mask.astype(mask_dtype)


@st.composite
def generated_plates(draw):
    """A plate to write: 1-3 fields as .npy or .tif files, listed as a folder or by a manifest (a BOM, CRLF, a
    trailing comma, a cell more than the header, a missing file, a repeated row; unicode names); crop options."""
    fields = draw(st.lists(generated_fields(), min_size=1, max_size=3))
    manifest = draw(st.sampled_from([None, None, "plain", "missing file", "repeated row", "extra cell",
                                     "trailing comma"]))
    layout = dict(suffix=draw(st.sampled_from([".npy", ".tif"])), name=draw(st.sampled_from(NAMES)),
                  manifest=manifest, newline=draw(st.sampled_from(["\n", "\r\n"])), bom=draw(st.booleans()))
    options = dict(crop_size=draw(st.sampled_from([None, None, 8, 4])), keep_border=draw(st.booleans()),
                   normalize=draw(st.booleans()))
    return fields, layout, options


def write_plate(folder: Path, fields, layout: dict) -> Path:
    """Write a drawn plate into ``folder``/plate; the extraction input (the folder, or its manifest)."""
    plate = folder / "plate"
    plate.mkdir(parents=True)
    rows = []
    for i, (image, mask) in enumerate(fields):
        stem = layout["name"].format(i)
        for path, data in ((plate / f"{stem}{layout['suffix']}", image), (plate / f"{stem}_masks{layout['suffix']}", mask)):
            np.save(path, data) if layout["suffix"] == ".npy" else tifffile.imwrite(path, data)
        rows.append((f"{stem}{layout['suffix']}", f"{stem}_masks{layout['suffix']}", f"W{i % 2}"))
    odd = layout["manifest"]
    if odd is None:
        return plate
    rows += [("gone.npy", "gone_masks.npy", "W9")] if odd == "missing file" else [rows[0]] if odd == "repeated row" else []
    quote = lambda v: f'"{v}"' if "," in v else v                          # noqa: E731
    tail = "," if odd == "trailing comma" else ""
    lines = ["image,labels,well" + tail] + [",".join(map(quote, r)) + tail + (",x" if odd == "extra cell" else "")
                                           for r in rows]
    text = ("\ufeff" if layout["bom"] else "") + layout["newline"].join(lines) + layout["newline"]
    (plate / "plate.csv").write_bytes(text.encode())
    return plate / "plate.csv"


def check_plate(files, case, through_cli: bool) -> None:
    """Write the plate, extract it, fit on the store and predict it (library or CLI): each step a sentence or a sane
    result, and the plate's files byte for byte as they were."""
    fields, layout, options = case
    folder = Path(__import__("tempfile").mkdtemp(dir=SCRATCH))
    try:
        _check_plate(files, folder, write_plate(folder, fields, layout), options, through_cli)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _check_plate(files, folder: Path, source: Path, options: dict, through_cli: bool) -> None:
    plate = folder / "plate"
    before = files(plate)
    store_path = folder / "s.zarr"
    if through_cli:
        flags = [f"--crop-size={options['crop_size']}"] * (options["crop_size"] is not None) + \
            ["--keep-border"] * options["keep_border"] + ["--normalize" if options["normalize"] else "--no-normalize"]
        store = ticlust.open_objects(store_path) if cli_outcome("extract", source, "-o", store_path, "--quiet",
                                                                *flags) == 0 else None
    else:
        store = outcome(lambda: ticlust.extract(source, store_path, **options))
    assert files(plate) == before
    if store is None:
        assert not store_path.exists()
        return
    crops, masks, table = np.asarray(store.crops), np.asarray(store.masks), store.table
    assert len(store) == len(table) == len(crops) == len(masks) > 0
    assert np.isfinite(crops).all() and masks.reshape(len(masks), -1).any(axis=1).all()
    fitted = outcome(lambda: fit_store(store, "kmeans", k=2, seed=0, max_iter=5)[0])
    if fitted is None:
        return
    assert len(fitted.labels) == len(store) and set(np.unique(fitted.labels)) <= {0, 1}
    result = fitted.save(folder / "km.npz")
    if through_cli:
        done = cli_outcome("predict", result, store_path, "--csv", folder / "p.csv", "--quiet") == 0
        assigned = pd.read_csv(folder / "p.csv") if done else None
    else:
        done = outcome(lambda: predict_store(result, store, csv=folder / "p.csv"))
        assigned = None if done is None else done.table
    if assigned is not None:
        assert len(assigned) == len(store) and assigned["cluster"].between(0, 1).all()
    assert files(plate) == before


@BATTERY
@given(case=generated_plates(), through_cli=st.booleans())
def test_battery_generated_plates(files, case, through_cli):
    check_plate(files, case, through_cli)


@pytest.mark.slow
@LONG
@given(case=generated_plates(), through_cli=st.booleans())
def test_battery_generated_plates_long(files, case, through_cli):
    check_plate(files, case, through_cli)


def _chunk(store: Path, rng) -> Path:
    """One chunk file of the store's parts (crops or masks), picked with ``rng``."""
    chunks = sorted(p for p in store.glob("fields/*/*/c/**/*") if p.is_file())
    return chunks[int(rng.integers(len(chunks)))]


def _edit_table(store: Path, how: str) -> None:
    table = pd.read_parquet(store / "table.parquet")
    if how == "rows dropped":
        table = table.iloc[:-2]
    elif how == "labels reversed":
        table["label"] = table["label"].to_numpy()[::-1]
    elif how == "fields shuffled":
        table["field_index"] = np.random.default_rng(0).permutation(table["field_index"].to_numpy())
    elif how == "a column dropped":
        table = table.drop(columns=["frame"])
    table.to_parquet(store / "table.parquet", index=False)


def _attributes(store: Path, change) -> None:
    import json

    meta = json.loads((store / "zarr.json").read_text())
    change(meta["attributes"]["ticlust"])
    (store / "zarr.json").write_text(json.dumps(meta))


MUTATIONS = {
    "none": lambda s, rng: None,
    "a chunk truncated": lambda s, rng: (lambda c: c.write_bytes(c.read_bytes()[:int(rng.integers(len(c.read_bytes())))]))(_chunk(s, rng)),
    "a chunk deleted": lambda s, rng: _chunk(s, rng).unlink(),
    "a chunk of garbage": lambda s, rng: _chunk(s, rng).write_bytes(rng.bytes(int(rng.integers(1, 200)))),
    "a part deleted": lambda s, rng: shutil.rmtree(s / "fields" / f"{int(rng.integers(3)):05d}"),
    "a part's rows deleted": lambda s, rng: (s / "fields" / f"{int(rng.integers(3)):05d}" / "rows.parquet").unlink(),
    "a part's count wrong": lambda s, rng: (lambda z: z.write_text(z.read_text().replace('"objects": ', '"objects": 1'))
                                            )(s / "fields" / f"{int(rng.integers(3)):05d}" / "zarr.json"),
    "table truncated": lambda s, rng: (lambda t: t.write_bytes(t.read_bytes()[:int(rng.integers(len(t.read_bytes())))]))(s / "table.parquet"),
    "table rows dropped": lambda s, rng: _edit_table(s, "rows dropped"),
    "table labels reversed": lambda s, rng: _edit_table(s, "labels reversed"),
    "table fields shuffled": lambda s, rng: _edit_table(s, "fields shuffled"),
    "table column dropped": lambda s, rng: _edit_table(s, "a column dropped"),
    "fields.parquet garbage": lambda s, rng: (s / "fields.parquet").write_bytes(b"PAR1 nothing"),
    "failed.parquet deleted": lambda s, rng: (s / "failed.parquet").unlink(),
    "zarr.json garbage": lambda s, rng: (s / "zarr.json").write_bytes(rng.bytes(40)),
    "zarr.json without complete": lambda s, rng: _attributes(s, lambda a: a.pop("complete")),
    "zarr.json of format 2": lambda s, rng: _attributes(s, lambda a: a.update(format=2)),
    "zarr.json counting one more": lambda s, rng: _attributes(s, lambda a: a.update(objects=a["objects"] + 1)),
    "zarr.json of another crop size": lambda s, rng: _attributes(s, lambda a: a["crop"].update(size=a["crop"]["size"] + 4)),
    "predictions copied over": lambda s, rng: shutil.copy(s / "fields" / "00000" / "predict.parquet",
                                                          s / "fields" / "00002" / "predict.parquet"),
    "predictions truncated": lambda s, rng: (lambda t: t.write_bytes(t.read_bytes()[:50]))(s / "fields" / "00001" / "predict.parquet"),
    "joined predictions deleted": lambda s, rng: (s / PREDICTIONS).unlink(),
}
STEPS = ["open and read", "fit", "predict", "predict --csv (cli)", "fit (cli)", "extract again", "field view"]


def check_mutated(files, plate, mutation: str, seed: int, step: str) -> None:
    """A predicted copy of the plate's store, damaged by ``mutation``, then one ``step`` on it: a sentence or a sane
    result; the plate's files and the result byte for byte as they were."""
    from ticlust.plate.view import field_picture, read_predictions

    manifest, ref, result, table = plate
    folder = Path(__import__("tempfile").mkdtemp(dir=SCRATCH))
    try:
        store = folder / "s.zarr"
        shutil.copytree(ref.path.parent.parent / "predicted" / "s.zarr", store)
        MUTATIONS[mutation](store, np.random.default_rng(seed))
        before = files(manifest.parent), result.read_bytes()

        def open_and_read():
            opened = ticlust.open_objects(store)
            crops, masks, rows = np.asarray(opened.crops), np.asarray(opened.masks), opened.table
            assert len(crops) == len(masks) == len(rows) == len(opened)
            return opened

        if step == "open and read":
            outcome(open_and_read)
        elif step == "fit":
            fitted = outcome(lambda: fit_store(store, k=2, seed=0, max_iter=5)[0])
            assert fitted is None or set(np.unique(fitted.labels)) <= {0, 1}
        elif step == "predict":
            done = outcome(lambda: predict_store(result, store, parquet=folder / "p.parquet"))
            if done is not None:
                assert len(done.table) == len(pd.read_parquet(folder / "p.parquet")) == len(ticlust.open_objects(store))
        elif step == "predict --csv (cli)":
            cli_outcome("predict", result, store, "--csv", folder / "p.csv", "--quiet")
        elif step == "fit (cli)":
            cli_outcome("fit", store, "--k", "2", "-o", folder / "r.npz", "--quiet", "--set", "max_iter=5")
        elif step == "extract again":
            if outcome(lambda: ticlust.extract(manifest, store)) is not None:
                outcome(open_and_read)
        else:
            opened = outcome(lambda: ticlust.open_objects(store))
            if opened is not None:
                outcome(lambda: (field_picture(opened, 1), read_predictions(opened)))
        assert (files(manifest.parent), result.read_bytes()) == before
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@BATTERY
@given(mutation=st.sampled_from(sorted(MUTATIONS)), seed=st.integers(0, 2**16), step=st.sampled_from(STEPS))
def test_battery_damaged_stores(files, plate, mutation, seed, step):
    check_mutated(files, plate, mutation, seed, step)


@pytest.mark.slow
@LONG
@given(mutation=st.sampled_from(sorted(MUTATIONS)), seed=st.integers(0, 2**16), step=st.sampled_from(STEPS))
def test_battery_damaged_stores_long(files, plate, mutation, seed, step):
    check_mutated(files, plate, mutation, seed, step)


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
def test_every_damage_through_every_step(files, plate, mutation):
    """Each damage once through each step (the battery draws combinations; this is every one of them)."""
    for step in STEPS:
        check_mutated(files, plate, mutation, 7, step)


# ---- two processes on one store at once -----------------------------------------------------------------------------
#: Python run before ``ticlust ARGS`` in a child process: every field's cut and every part's prediction waits first,
#: HOLD seconds, or (HOLD a folder) until the file HOLD/go is there, having written HOLD/started: so that a test
#: knows the run holds the store's lock and can start a second run against it.
HELD = """
import sys, time
from pathlib import Path
import ticlust.plate.store as store, ticlust.plate.run as run
from ticlust.cli import main
cut, assign, hold = store.extract_field, run.predict_part, sys.argv[1]
def wait():
    if not Path(hold).is_dir():
        return time.sleep(float(hold))
    (Path(hold) / "started").touch()
    while not (Path(hold) / "go").exists():
        time.sleep(0.02)
store.extract_field = lambda *task: (wait(), cut(*task))[1]
run.predict_part = lambda task: (wait(), assign(task))[1]
sys.exit(main(sys.argv[2:]))
"""


def start(*args, hold=None) -> subprocess.Popen:
    """``ticlust ARGS`` in a new process, each field or part held first (``hold``: seconds, or a folder: see HELD;
    None: the command as it is)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    how = ["-c", HELD, str(hold)] if hold is not None else ["-m", "ticlust.cli"]
    return subprocess.Popen([sys.executable, *how, *map(str, args)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def finish(run: subprocess.Popen, timeout: float = 300) -> tuple[int, str]:
    _, err = run.communicate(timeout=timeout)
    return run.returncode, err


def wait_for(condition, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


BUSY = "ticlust: error: Another run (an extraction or a prediction) is writing to"


def test_two_extractions_into_one_store_at_once_one_is_refused_and_nothing_mixes(files, plate, tmp_path):
    manifest, ref, _, _ = plate
    store, gate = tmp_path / "s.zarr", tmp_path / "gate"
    gate.mkdir()
    runs = [start("extract", manifest, "-o", store, "--quiet", hold=gate) for _ in range(2)]
    wait_for(lambda: (gate / "started").exists() and any(run.poll() is not None for run in runs))
    (gate / "go").touch()                  # the one that holds the lock goes on once the other one was refused
    outcomes = sorted(finish(run) for run in runs)
    assert [code for code, _ in outcomes] == [0, 2], outcomes
    assert outcomes[1][1].startswith(BUSY) and outcomes[1][1].count("\n") == 1
    assert files(store) == files(ref.path)


def test_two_predictions_or_a_prediction_and_an_extraction_at_once_one_is_refused(files, plate, tmp_path):
    manifest, ref, result, table = plate
    store, gate = copy_of(ref, tmp_path), tmp_path / "gate"
    gate.mkdir()
    first = start("predict", result, store, "--quiet", hold=gate)
    wait_for(lambda: (gate / "started").exists())
    others = [start("predict", result, store, "--quiet"), start("extract", manifest, "-o", store, "--quiet")]
    for code, err in [finish(run) for run in others]:
        assert code == 2 and err.startswith(BUSY) and err.count("\n") == 1, err
    (gate / "go").touch()
    assert finish(first)[0] == 0
    pd.testing.assert_frame_equal(pd.read_parquet(store / PREDICTIONS), table)
    assert {k: v for k, v in files(store).items() if "predict" not in k} == files(ref.path)


def test_a_reader_during_a_prediction_sees_the_old_state_or_the_new_one(plate, tmp_path):
    from ticlust.plate.view import read_predictions

    _, ref, result, table = plate
    store = copy_of(ref, tmp_path)
    run = start("predict", result, store, "--quiet", hold=1.0)
    seen = set()
    while run.poll() is None:
        opened = ticlust.open_objects(store)
        assert np.array_equal(np.asarray(opened.crops), np.asarray(ref.crops))
        predictions = read_predictions(opened)
        seen.add(predictions is None)
        if predictions is not None:
            pd.testing.assert_frame_equal(predictions, table)
        time.sleep(0.05)
    assert finish(run)[0] == 0 and True in seen
    pd.testing.assert_frame_equal(read_predictions(ticlust.open_objects(store)), table)


def test_opening_a_store_while_it_is_written_is_refused_until_it_is_finished(files, plate, tmp_path):
    manifest, ref, _, _ = plate
    store = tmp_path / "s.zarr"
    run = start("extract", manifest, "-o", store, "--quiet", hold=1.0)
    said = set()
    while run.poll() is None:
        try:
            opened = ticlust.open_objects(store)
        except InputError as err:
            message = one_sentence(err)
            assert "is not finished" in message or "is not an object store" in message, message
            said.add(message.split(": ")[0].split(" is ")[1] if " is " in message else message)
        else:
            assert len(opened.table) == len(ref)                 # finished: every object there
        time.sleep(0.05)
    assert finish(run)[0] == 0 and said
    assert files(store) == files(ref.path)


def test_a_run_refused_at_the_lock_leaves_the_other_runs_new_store_alone(plate, tmp_path, monkeypatch):
    """A run that finds the store's folder missing, then loses the lock to another run that made it meanwhile,
    used to remove the folder the other run was writing (it took it for its own)."""
    import ticlust.plate.store as store_module

    manifest, _, _, _ = plate
    root = tmp_path / "s.zarr"

    @contextlib.contextmanager
    def another_run_got_there_first(folder, busy):
        (folder / "fields.parquet").write_bytes(b"the other run's")          # what the other run wrote so far
        raise InputError(busy)
        yield

    monkeypatch.setattr(store_module, "store_lock", another_run_got_there_first)
    with pytest.raises(InputError, match="Another run"):
        ticlust.extract(manifest, root)
    assert (root / "fields.parquet").read_bytes() == b"the other run's"


# ---- a dask worker killed mid-run -------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def larger_plate(tmp_path_factory, predicted_plate):
    """A plate of 8 fields × 40 nuclei of 256×256 (a run long enough to kill a worker in), its store extracted in this
    process and the store's predictions by a k-means result (the references)."""
    return predicted_plate(tmp_path_factory.mktemp("workers"), fields=8, n=40, size=256, seed=5, k=3)


def kill_a_worker(run: subprocess.Popen, ready, timeout: float = 180) -> bool:
    """Once ``ready()`` (the run has done some of its work), SIGKILL one of the dask worker processes that ``run``
    started; whether one was killed (False when the run ended first)."""
    import psutil

    deadline = time.monotonic() + timeout
    while not ready() and run.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    workers = [p for p in psutil.Process(run.pid).children(recursive=True)
               if any("spawn_main" in part or "forkserver" in part for part in p.cmdline())]
    if run.poll() is not None or not workers:
        return False
    os.kill(workers[0].pid, signal.SIGKILL)
    return True


@pytest.mark.slow
def test_a_worker_killed_mid_extraction_and_the_same_command_ends_with_the_same_store(files, larger_plate, tmp_path):
    manifest, ref, _, _ = larger_plate
    store = tmp_path / "s.zarr"
    args = ("extract", manifest, "-o", store, "--workers", "2", "--quiet")
    run = start(*args)
    assert kill_a_worker(run, lambda: (store / "fields" / "00001").exists())
    code, err = finish(run)
    if code != 0:                                                       # the same command finishes the store
        assert err.count("\n") == 1, err
        code, err = finish(start(*args))
    assert code == 0, err
    assert files(store) == files(ref.path) and read_attributes(store)["complete"]


@pytest.mark.slow
def test_a_worker_killed_mid_prediction_and_the_same_command_ends_with_the_same_table(larger_plate, tmp_path):
    _, ref, result, table = larger_plate
    store = copy_of(ref, tmp_path)
    args = ("predict", result, store, "--workers", "2", "--quiet", "--csv", tmp_path / "p.csv")
    run = start(*args)
    assert kill_a_worker(run, lambda: bool(list(store.glob("fields/*/predict.parquet"))))
    code, err = finish(run)
    if code != 0:
        assert err.count("\n") == 1, err
        code, err = finish(start(*args))
    assert code == 0, err
    pd.testing.assert_frame_equal(pd.read_parquet(store / PREDICTIONS), table)
    assert len(pd.read_csv(tmp_path / "p.csv")) == len(table) and not list(store.rglob("*.partial"))
