"""Issue 32, item 4: faults in long runs, with real files and real processes. An extraction (or a store's
prediction) killed with SIGKILL in the middle of a write, a disk that fills up (ENOSPC) part-way, a damaged
store file, and a result of another crop size or channel count: each ends in a store that a rerun finishes
to the same bytes as an uninterrupted run, or in one sentence that names what is wrong, and nothing else
is written. tests/test_store.py already covers a kill between two fields and ENOSPC on a field's rows;
tests/test_plate_run.py an interrupted prediction and a result of other crop options."""
import errno
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import tifffile

import ticlust
from ticlust.errors import InputError
from ticlust.plate.run import PREDICTIONS
from ticlust.plate.store import read_attributes

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def plate(tmp_path_factory, predicted_plate):
    """A small generated plate (3 fields × 12 nuclei; its folder), its store extracted from the folder in this process,
    a k-means result fitted on it and the store's predictions by that result (the uninterrupted references)."""
    manifest, store, result, predicted = predicted_plate(tmp_path_factory.mktemp("faults"), fields=3, n=12, size=128,
                                                         seed=3, k=2, from_folder=True)
    return manifest.parent, store, result, predicted


def one_sentence(err: InputError) -> str:
    message = str(err)
    assert message and "\n" not in message and "Traceback" not in message
    return message


def killed(script: str, *args) -> subprocess.CompletedProcess:
    """Run ``script`` (Python, with ``args`` as sys.argv[1:]) in a new process and check that it died of SIGKILL."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    run = subprocess.run([sys.executable, "-c", textwrap.dedent(script), *map(str, args)], env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == -signal.SIGKILL, run.stderr[-2000:]
    return run


#: Python run before ``ticlust extract``/``predict`` in the killed process: ``die()`` kills it with SIGKILL.
DIE = """
import os, signal, sys
from pathlib import Path
def die():
    os.kill(os.getpid(), signal.SIGKILL)
"""

#: Where an extraction is killed: in the middle of a part's second chunk file (half its bytes written), in
#: the middle of table.parquet (a row group written, no footer), and with the final attributes written to
#: their temporary file but not yet renamed.
KILL_EXTRACTION = {
    "a chunk": """
        import zarr.storage._local as local
        put, chunks = local._put, []
        def half_then_die(path, value, exclusive=False):
            chunks.extend(["chunk"] if "c" in path.parts else [])
            if len(chunks) == 2:
                data = value.as_buffer_like()
                path.parent.mkdir(parents=True, exist_ok=True)
                with open(path, "wb") as f:
                    f.write(bytes(data)[:len(data) // 2]); f.flush()
                die()
            return put(path, value, exclusive)
        local._put = half_then_die
    """,
    "the table": """
        import pyarrow.parquet as pq
        write = pq.ParquetWriter.write_table
        def write_then_die(self, table, *a, **k):
            write(self, table, *a, **k)
            if isinstance(self.where, Path) and self.where.name.startswith("table.parquet"):
                die()
        pq.ParquetWriter.write_table = write_then_die
    """,
    "the attributes": """
        import ticlust.core.atomic as atomic
        replace = atomic.os.replace
        class Dies:
            def __getattr__(self, name):
                return getattr(os, name)
            def replace(self, src, dst):
                if Path(dst).name == "zarr.json" and '"complete": true' in Path(src).read_text():
                    die()
                return replace(src, dst)
        atomic.os = Dies()
    """,
}


@pytest.mark.parametrize("where", sorted(KILL_EXTRACTION))
def test_an_extraction_killed_mid_write_is_refused_then_finished_by_a_rerun(files, plate, tmp_path, where):
    folder, ref, _, _ = plate
    store = tmp_path / "s.zarr"                                # the same name: the stores compare byte for byte
    killed(DIE + textwrap.dedent(KILL_EXTRACTION[where]) + """
from ticlust.cli import main
main(["extract", sys.argv[1], "-o", sys.argv[2], "--quiet"])
""", folder, store)
    assert read_attributes(store) is not None and not read_attributes(store)["complete"]
    with pytest.raises(InputError) as err:
        ticlust.open_objects(store)
    assert "is not finished" in one_sentence(err.value)
    ticlust.extract(folder, store)
    assert files(store) == files(ref.path)


def test_a_prediction_killed_mid_write_is_finished_by_a_rerun(plate, tmp_path):
    folder, _, result, predicted = plate
    store = ticlust.extract(folder, tmp_path / "s.zarr")
    killed(DIE + """
import pyarrow.parquet as pq
write, calls = pq.write_table, []
def half_then_die(table, where, *a, **k):
    calls.append(where)
    if len(calls) == 2:                          # the second part's predict.parquet: half of its bytes, then death
        write(table, where, *a, **k)
        data = Path(where).read_bytes()
        Path(where).write_bytes(data[:len(data) // 2])
        die()
    return write(table, where, *a, **k)
pq.write_table = half_then_die
import ticlust
ticlust.predict(sys.argv[1], sys.argv[2])
""", result, store.path)
    assert not (store.path / PREDICTIONS).exists()
    again = ticlust.predict(result, store.path)
    assert again.skipped == 1                                  # the part committed before the kill is kept
    pd.testing.assert_frame_equal(again.table, predicted)


@pytest.fixture
def full_disk(monkeypatch):
    """``fill(module, name, after, which)``: the function ``module.name`` raises OSError(ENOSPC) on the calls
    that ``which(*args)`` selects, from the ``after``+1-th of them on (all others write as usual)."""
    def fill(module, name: str, after: int, which=lambda *args: True) -> None:
        write, calls = getattr(module, name), []

        def no_space(*args, **kwargs):
            if which(*args):
                calls.append(args)
                if len(calls) > after:
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return write(*args, **kwargs)

        monkeypatch.setattr(module, name, no_space)
    return fill


def test_a_disk_full_in_the_middle_of_a_part_stops_with_one_sentence_and_a_rerun_finishes(files, plate, tmp_path,
                                                                                          monkeypatch, full_disk):
    import zarr.storage._local as local

    folder, ref, _, _ = plate
    store = tmp_path / "s.zarr"
    full_disk(local, "_put", 2, lambda path, *_: "c" in path.parts)   # the second part's first chunk: no space
    with pytest.raises(InputError) as err:
        ticlust.extract(folder, store)
    assert "No space left on device" in one_sentence(err.value) and "1 of 3 fields done" in str(err.value)
    assert sorted(os.listdir(store / "fields")) == ["00000", "zarr.json"] and os.listdir(store / "tmp") == []
    monkeypatch.undo()
    ticlust.extract(folder, store)
    assert files(store) == files(ref.path)


def test_a_disk_full_while_writing_the_table_stops_with_one_sentence_and_a_rerun_finishes(files, plate, tmp_path,
                                                                                          monkeypatch, full_disk):
    import pyarrow.parquet as pq

    folder, ref, _, _ = plate
    store = tmp_path / "s.zarr"
    full_disk(pq.ParquetWriter, "write_table", 0, lambda writer, *_: str(writer.where).endswith("table.parquet.partial"))
    with pytest.raises(InputError) as err:
        ticlust.extract(folder, store)
    assert "every field done" in one_sentence(err.value)
    assert not (store / "table.parquet").exists() and not list(store.glob("*.partial"))
    monkeypatch.undo()
    ticlust.extract(folder, store)
    assert files(store) == files(ref.path)


def test_a_disk_full_while_predicting_stops_with_one_sentence_and_a_rerun_finishes(plate, tmp_path, monkeypatch,
                                                                                   full_disk):
    import pyarrow.parquet as pq

    folder, _, result, predicted = plate
    store = ticlust.extract(folder, tmp_path / "s.zarr")
    full_disk(pq, "write_table", 1)                           # the second part's predict.parquet
    with pytest.raises(InputError) as err:
        ticlust.predict(result, store.path)
    assert "No space left on device" in one_sentence(err.value)
    assert not list(store.path.rglob("*.partial")) and not (store.path / PREDICTIONS).exists()
    monkeypatch.undo()
    again = ticlust.predict(result, store.path)
    assert again.skipped == 1
    pd.testing.assert_frame_equal(again.table, predicted)


def damage(path: Path) -> None:
    path.write_bytes(b"not a chunk" * 7)


def test_a_damaged_chunk_is_named_with_its_store_and_field_and_cut_again(files, plate, tmp_path):
    folder, ref, _, _ = plate
    store = ticlust.extract(folder, tmp_path / "s.zarr")
    damage(store.path / "fields" / "00001" / "crops" / "c" / "0" / "0" / "0")
    reopened = ticlust.open_objects(store.path)
    first = reopened.crops[:3]                                 # field 0 still reads
    in_field_1 = int(reopened.crops.offsets[1])
    for read in (lambda: reopened.crops[:], lambda: reopened.crops[in_field_1], lambda: list(reopened.crops)):
        with pytest.raises(InputError) as err:
            read()
        message = one_sentence(err.value)
        assert f"{store.path} is damaged: the crops of field 1 cannot be read" in message
    shutil.rmtree(store.path / "fields" / "00001")            # what the sentence says to do
    ticlust.extract(folder, store.path)
    assert files(store.path) == files(ref.path)


def test_predicting_a_store_with_a_damaged_chunk_names_the_store_and_field(plate, tmp_path):
    folder, _, result, _ = plate
    store = ticlust.extract(folder, tmp_path / "s.zarr")
    damage(store.path / "fields" / "00002" / "crops" / "c" / "0" / "0" / "0")
    with pytest.raises(InputError, match="crops of field 2 cannot be read"):
        ticlust.predict(result, store.path)


@pytest.mark.parametrize("name", ["table.parquet", "fields.parquet", "failed.parquet"])
def test_a_damaged_store_table_is_named(plate, tmp_path, name):
    folder, _, _, _ = plate
    store = ticlust.extract(folder, tmp_path / "s.zarr")
    damage(store.path / name)
    reopened = ticlust.open_objects(store.path)
    with pytest.raises(InputError) as err:
        {"table.parquet": lambda: reopened.table, "fields.parquet": lambda: reopened.fields,
         "failed.parquet": lambda: reopened.failed}[name]()
    assert f"{store.path} is damaged: its {name} cannot be read" in one_sentence(err.value)


def test_a_result_of_another_crop_size_or_channel_count_writes_nothing(files, plate, tmp_path):
    folder, store, result, _ = plate
    two = tmp_path / "two"                                     # the same plate with a second channel
    two.mkdir()
    for image in sorted(folder.glob("*_s?.tif")):
        grey = tifffile.imread(image)
        tifffile.imwrite(two / image.name, np.stack([grey, grey[::-1]], axis=-1))
        (two / image.name.replace(".tif", "_cp_masks.tif")).write_bytes(
            (folder / image.name.replace(".tif", "_cp_masks.tif")).read_bytes())
    stores = {"channels": ticlust.extract(two, tmp_path / "two.zarr", crop_size=store.size),
              "crop size": ticlust.extract(folder, tmp_path / "big.zarr", crop_size=store.size + 8)}
    assert stores["channels"].channels == 2 and stores["crop size"].size == store.size + 8
    for what, other in stores.items():
        before = files(other.path), sorted(p for p in other.path.rglob("*"))
        for given in (result, ticlust.load_result(result)):
            with pytest.raises(InputError) as err:
                ticlust.predict(given, other.path, csv=tmp_path / "out.csv")
            message = one_sentence(err.value)
            assert f"fitted on {store.size}×{store.size} crops but {other.path} holds" in message
            assert ("2 channels" in message) == (what == "channels")
            assert (files(other.path), sorted(p for p in other.path.rglob("*"))) == before
            assert not (tmp_path / "out.csv").exists()
