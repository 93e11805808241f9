"""Plates into an object store (issue "Plates and a million objects", items 1-2): ticlust.extract /
open_objects and `ticlust extract`, with real files on disk."""
import errno
import json
import os
import signal
import subprocess
import sys
import time
import warnings

import numpy as np
import pandas as pd
import pytest
import tifffile
from PIL import Image

import ticlust
from ticlust.errors import InputError
from ticlust.datasets.nuclei import nuclei_field, write_nuclei_plate
from ticlust.objects.crops import objects_from_labels
from ticlust.plate.store import read_attributes


@pytest.fixture(scope="module")
def plate(tmp_path_factory, files):
    """A generated plate of 6 fields × 40 nuclei (256×256) and its store, extracted in this process."""
    folder = tmp_path_factory.mktemp("plate")
    manifest = write_nuclei_plate(folder / "plate", fields=6, n=40, shape=(256, 256), seed=3)
    before = files(manifest.parent)
    store = ticlust.extract(manifest.parent, folder / "ref.zarr")
    return manifest, store, before


def test_store_holds_the_objects_route_crops_for_every_field(files, plate):
    manifest, store, before = plate
    assert files(manifest.parent) == before                            # the inputs are only read
    assert store.options == {"crop_size": None, "keep_border": False, "channel": None, "orient": True,
                             "normalize": True, "rescale": False}
    table = store.table
    assert len(store) == len(table) == store.crops.shape[0] == store.masks.shape[0] > 200
    assert list(table.columns[:3]) == ["field_index", "image", "labels"] and len(store.failed) == 0
    assert table["field_index"].is_monotonic_increasing and store.crops.dtype == np.float32
    for i, name in enumerate(sorted(p.name for p in manifest.parent.glob("*_s?.tif"))):
        image, labels = tifffile.imread(manifest.parent / name), tifffile.imread(manifest.parent / name.replace(".tif", "_cp_masks.tif"))
        crops, rows = objects_from_labels(image, labels, size=store.size, orient=True, normalize=True)
        mine = np.flatnonzero(table["field_index"].to_numpy() == i)
        assert (table["image"].to_numpy()[mine] == name).all()
        assert np.array_equal(store.crops[mine], crops)
        for column, values in rows.items():
            assert np.array_equal(table[column].to_numpy()[mine], values), column
    masks = store.masks[:]
    assert masks.dtype == bool and (store.crops[:][~masks] == 0).all() and masks.any(axis=(1, 2)).all()


def test_generated_plate_names_every_nucleus_kind(plate):
    manifest, store, _ = plate
    kinds = pd.read_csv(manifest.parent / "kinds.csv")
    assert len(kinds) == 6 * 40 and set(kinds["kind"]) == {"round", "elongated", "dividing"}
    merged = store.table.merge(kinds, on=["image", "label"], how="left")
    assert merged["kind"].notna().all() and len(merged) == len(store)


def test_manifest_columns_reach_every_row(plate, tmp_path):
    manifest, ref, _ = plate
    listing = pd.read_csv(manifest)
    listing["condition"] = ["dmso", "drug"] * 3
    csv = manifest.parent / "conditions.csv"
    listing.to_csv(csv, index=False)
    store = ticlust.extract(csv, tmp_path / "m.zarr")
    table = store.table
    assert list(table.columns[:6]) == ["field_index", "image", "labels", "well", "site", "condition"]
    for _, row in listing.iterrows():
        rows = table[table["image"] == row["image"]]
        assert len(rows) and (rows["well"] == row["well"]).all() and (rows["site"] == row["site"]).all()
        assert (rows["condition"] == row["condition"]).all()
    assert np.array_equal(store.crops[:], ref.crops[:]) and store.table["label"].equals(ref.table["label"])


def small_field(seed: int, n: int = 8):
    f = nuclei_field(n=n, shape=(96, 96), seed=seed)
    return f.image, f.labels


def test_folder_pairs_masks_by_all_three_names(tmp_path):
    folder = tmp_path / "fields"
    folder.mkdir()
    for name, seed in (("a", 1), ("b", 2), ("c", 3), ("d", 4)):
        image, labels = small_field(seed)
        tifffile.imwrite(folder / f"{name}.tif", image)
        if name == "a":
            Image.fromarray(labels.astype(np.uint16)).save(folder / "a_cp_masks.png")     # Cellpose's PNG masks
        elif name == "b":
            np.save(folder / "b_masks.npy", labels)
        elif name == "c":
            tifffile.imwrite(folder / "c.labels.tif", labels)
    np.save(folder / "a_seg.npy", np.zeros(3))                                       # Cellpose's other outputs
    tifffile.imwrite(folder / "a_flows.tif", np.zeros((8, 8), np.uint8))
    np.save(folder / "e.npy", small_field(5)[0])
    tifffile.imwrite(folder / "e_masks.tif", np.zeros((96, 96), np.int32))              # a field without objects
    with pytest.warns(UserWarning, match=r"1 of 5 fields were left out .*d\.tif: No mask for d\.tif"):
        store = ticlust.extract(folder, tmp_path / "s.zarr")
    assert list(store.fields["image"]) == ["a.tif", "b.tif", "c.tif", "d.tif", "e.npy"]
    assert list(store.fields["labels"])[:3] == ["a_cp_masks.png", "b_masks.npy", "c.labels.tif"]
    assert list(store.failed["image"]) == ["d.tif"] and "d_cp_masks.tif" in store.failed["error"][0]
    assert sorted(set(store.table["image"])) == ["a.tif", "b.tif", "c.tif"]
    for name in ("a", "b", "c"):
        image, labels = small_field(" abc".index(name))
        crops, _ = objects_from_labels(image, labels, size=store.size, orient=True, normalize=True)
        assert np.array_equal(store.crops[(store.table["image"] == f"{name}.tif").to_numpy()], crops)


def test_folder_with_images_but_no_masks_is_refused_and_nothing_made(tmp_path):
    folder = tmp_path / "fields"
    folder.mkdir()
    tifffile.imwrite(folder / "a.tif", small_field(1)[0])
    with pytest.raises(InputError, match=r"holds 1 images but no masks: name each image's mask NAME_cp_masks"):
        ticlust.extract(folder, tmp_path / "s.zarr")
    assert not (tmp_path / "s.zarr").exists()


def test_ome_zarr_image_with_labels(tmp_path):
    import zarr
    from ome_zarr.writer import write_image, write_labels

    image, labels = small_field(7, n=10)
    both = np.stack([image, image // 3])
    root = zarr.open_group(tmp_path / "field.ome.zarr", mode="w")
    write_image(both, root, axes="cyx")
    write_labels(labels, root, name="nuclei", axes="yx")
    write_labels(np.where(labels > 0, labels + 100, 0).astype(np.int32), root, name="cells", axes="yx")
    store = ticlust.extract(tmp_path / "field.ome.zarr", tmp_path / "s.zarr")
    assert store.table["labels"].iloc[0] == "nuclei" and store.crops.shape[1:] == (store.size, store.size, 2)
    crops, _ = objects_from_labels(np.moveaxis(both, 0, -1), labels, size=store.size, orient=True, normalize=True)
    assert np.array_equal(store.crops[:], crops)
    one = ticlust.extract(tmp_path / "field.ome.zarr", tmp_path / "one.zarr", labels="cells", channel=1,
                          crop_size=24, orient=False)
    crops, rows = objects_from_labels(image // 3, labels, size=24, normalize=True)
    assert one.crops.shape[1:] == (24, 24) and np.array_equal(one.crops[:], crops)
    assert np.array_equal(one.table["label"], rows["label"] + 100)
    with pytest.raises(InputError, match="has no label image 'nucleoli': choose one of nuclei, cells"):
        ticlust.extract(tmp_path / "field.ome.zarr", tmp_path / "x.zarr", labels="nucleoli")


def test_ome_zarr_v04_time_series(tmp_path):
    import zarr
    from ome_zarr.format import FormatV04
    from ome_zarr.writer import write_image, write_labels

    (a, la), (b, lb) = small_field(1), small_field(2)
    root = zarr.open_group(tmp_path / "movie.zarr", mode="w", zarr_format=2)      # NGFF 0.4 on Zarr v2, t z y x
    write_image(np.stack([a, b])[:, None], root, axes="tzyx", fmt=FormatV04())
    write_labels(np.stack([la, lb])[:, None], root, name="nuclei", axes="tzyx", fmt=FormatV04())
    store = ticlust.extract(tmp_path / "movie.zarr", tmp_path / "s.zarr")
    crops, rows = objects_from_labels(np.stack([a, b]), np.stack([la, lb]), size=store.size, orient=True, normalize=True)
    assert np.array_equal(store.crops[:], crops) and np.array_equal(store.table["frame"], rows["frame"])
    root3 = zarr.open_group(tmp_path / "stack.zarr", mode="w")
    write_image(np.stack([a, b])[None], root3, axes="czyx")
    write_labels(np.stack([la, lb])[None], root3, name="nuclei", axes="czyx")
    with pytest.raises(InputError, match="has 2 planes along z and ticlust cuts 2-D objects: pick one plane with --z N"):
        ticlust.extract(tmp_path / "stack.zarr", tmp_path / "t.zarr")
    plane = ticlust.extract(tmp_path / "stack.zarr", tmp_path / "z1.zarr", z=1)     # image and labels: plane 1
    assert np.array_equal(plane.crops[:], objects_from_labels(b, lb, size=plane.size, orient=True, normalize=True)[0])
    with pytest.raises(InputError, match="The OME-Zarr labels has 2 planes along z .*: pick one plane with --z N."):
        ticlust.extract(tmp_path / "stack.zarr", tmp_path / "zm.zarr", z="max")   # no projection of labels


def test_one_field_with_labels_and_a_time_series(tmp_path):
    (a, la), (b, lb) = small_field(1), small_field(2)
    np.save(tmp_path / "movie.npy", np.stack([a, b]))
    np.save(tmp_path / "movie_labels.npy", np.stack([la, lb]))
    store = ticlust.extract(tmp_path / "movie.npy", tmp_path / "s.zarr", labels=tmp_path / "movie_labels.npy",
                            rescale=True, crop_size=20)
    crops, rows = objects_from_labels(np.stack([a, b]), np.stack([la, lb]), size=20, rescale=True, orient=True,
                                      normalize=True)
    assert np.array_equal(store.crops[:], crops) and np.array_equal(store.table["frame"], rows["frame"])
    assert set(store.table["frame"]) == {0, 1}
    with pytest.raises(InputError, match="is one field: give its mask with --labels MASK"):
        ticlust.extract(tmp_path / "movie.npy", tmp_path / "t.zarr")


def test_options_are_recorded_and_another_run_must_match(files, plate, tmp_path):
    manifest, ref, _ = plate
    assert read_attributes(ref.path)["options"] == ref.options and ref.size == 32
    with pytest.raises(InputError, match=r"was made with orient=True, not orient=False: give the store's options"):
        ticlust.extract(manifest.parent, ref.path, orient=False)
    with pytest.raises(InputError, match=r"was made with crop_size=None, not crop_size=40"):
        ticlust.extract(manifest.parent, ref.path, crop_size=40)
    with pytest.raises(InputError, match="was made from another input"):
        ticlust.extract(manifest, ref.path)
    before = files(ref.path)
    again = ticlust.extract(manifest.parent, ref.path)                 # complete: nothing to do
    assert files(ref.path) == before and len(again) == len(ref)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(InputError, match="exists and is not an object store"):
        ticlust.extract(manifest.parent, tmp_path / "other")
    assert (tmp_path / "other" / "notes.txt").read_text() == "mine"


def test_a_bad_field_is_listed_and_the_run_goes_on(plate, tmp_path):
    manifest, _, _ = plate
    folder = manifest.parent
    (tmp_path / "broken.tif").write_bytes(b"not a tiff")
    tifffile.imwrite(tmp_path / "small_mask.tif", np.zeros((10, 10), np.int32))
    rows = pd.read_csv(manifest).to_dict("records")[:2] + [
        {"image": str(folder / "A01_s0.tif"), "labels": "missing_mask.tif", "well": "Z01", "site": 0},
        {"image": str(folder / "A01_s0.tif"), "labels": str(tmp_path / "small_mask.tif"), "well": "Z02", "site": 0},
        {"image": str(tmp_path / "broken.tif"), "labels": str(folder / "A01_s0_cp_masks.tif"), "well": "Z03", "site": 0}]
    for row in rows[:2]:
        row["image"], row["labels"] = str(folder / row["image"]), str(folder / row["labels"])
    pd.DataFrame(rows).to_csv(tmp_path / "bad.csv", index=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        store = ticlust.extract(tmp_path / "bad.csv", tmp_path / "s.zarr")
    assert len(caught) == 1 and "\n" not in str(caught[0].message) and "3 of 5 fields were left out" in str(caught[0].message)
    failed = store.failed
    assert list(failed["well"]) == ["Z01", "Z02", "Z03"]
    assert "There is no mask file at" in failed["error"][0] and "missing_mask.tif" in failed["error"][0]
    assert "The labels have shape (10, 10) but the image (256, 256)" in failed["error"][1]
    assert "Could not read the image broken.tif" in failed["error"][2]
    assert set(store.table["well"]) == {"A01"} and len(store) > 0
    tifffile.imwrite(tmp_path / "missing_mask.tif", tifffile.imread(folder / "A01_s0_cp_masks.tif"))
    with pytest.warns(UserWarning, match="2 of 5 fields were left out"):
        store = ticlust.extract(tmp_path / "bad.csv", tmp_path / "s.zarr")   # the next run tries them again
    assert list(store.failed["well"]) == ["Z02", "Z03"] and "Z01" in set(store.table["well"])


def test_a_full_disk_stops_with_one_sentence_and_the_next_run_finishes(files, plate, tmp_path, monkeypatch):
    import pyarrow.parquet as pq

    manifest, ref, _ = plate
    write = pq.write_table
    calls = []

    def fills_up(*args, **kwargs):                                   # 1st call: fields.parquet, then one per field
        calls.append(1)
        if len(calls) == 4:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return write(*args, **kwargs)

    monkeypatch.setattr(pq, "write_table", fills_up)
    store = tmp_path / "ref.zarr"
    with pytest.raises(InputError, match=r"failed \(No space left on device\) with 2 of 6 fields done: free space"):
        ticlust.extract(manifest.parent, store)
    assert sorted(os.listdir(store / "fields")) == ["00000", "00001", "zarr.json"] and os.listdir(store / "tmp") == []
    with pytest.raises(InputError, match="is not finished"):
        ticlust.open_objects(store)
    monkeypatch.setattr(pq, "write_table", write)
    ticlust.extract(manifest.parent, store)
    assert files(store) == files(ref.path)                            # byte for byte an uninterrupted run


def test_a_killed_run_resumes_to_the_same_store(cli, files, plate, tmp_path):
    manifest, ref, _ = plate
    store = tmp_path / "ref.zarr"                                     # same name: the stores compare byte for byte
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    run = subprocess.Popen([sys.executable, "-m", "ticlust.cli", "extract", str(manifest.parent), "-o", str(store),
                            "--quiet"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not (store / "fields" / "00000").exists() and run.poll() is None and time.monotonic() < deadline:
        time.sleep(0.002)
    run.send_signal(signal.SIGKILL)
    run.wait()
    assert not read_attributes(store)["complete"] and len(os.listdir(store / "fields")) < 7   # stopped part-way
    out = cli("extract", manifest.parent, "-o", store, "--quiet")
    assert out.returncode == 0, out.stderr
    assert f"{len(ref)} objects (32×32 float32 crops) from 6 of 6 fields" in out.stdout
    assert files(store) == files(ref.path)


def test_two_workers_write_the_same_store_as_one(files, plate, tmp_path):
    manifest, ref, _ = plate
    store = ticlust.extract(manifest.parent, tmp_path / "ref.zarr", workers=2)
    assert files(store.path) == files(ref.path)


def test_a_second_run_on_a_store_in_use_is_refused(plate):
    import fcntl

    manifest, ref, _ = plate
    with open(ref.path / ".lock") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(InputError, match=r"Another run \(an extraction or a prediction\) is writing to"):
            ticlust.extract(manifest.parent, ref.path)


def test_lazy_crops_index_like_an_array(plate):
    _, store, _ = plate
    crops = store.crops
    full = np.asarray(crops)
    n = len(full)
    assert full.shape == (n, 32, 32) and np.array_equal(crops[-1], full[-1]) and np.array_equal(crops[3, 5:9], full[3, 5:9])
    pick = np.array([n - 1, 0, 37, 38, 39, 5])
    assert np.array_equal(crops[pick], full[pick]) and np.array_equal(crops[10:200:7, :, ::2], full[10:200:7, :, ::2])
    mask = np.zeros(n, bool)
    mask[::11] = True
    assert np.array_equal(crops[mask], full[mask]) and np.array_equal(crops[...], full)
    with pytest.raises(IndexError):
        crops[n]


def test_cli_extract_and_its_errors(cli, plate, tmp_path):
    manifest, ref, _ = plate
    out = cli("extract", manifest, "-o", tmp_path / "s.zarr", "--crop-size", "40", "--no-orient",
              "--quiet")
    assert out.returncode == 0, out.stderr
    store = ticlust.open_objects(tmp_path / "s.zarr")
    assert store.options["crop_size"] == 40 and store.options["orient"] is False and store.options["normalize"] is True
    assert len(store) == len(ref) and "well" in store.table
    (tmp_path / "bare").mkdir()
    tifffile.imwrite(tmp_path / "bare" / "a.tif", np.zeros((8, 8), np.uint16))
    out = cli("extract", tmp_path / "bare", "-o", tmp_path / "t.zarr")
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and out.stderr.startswith("ticlust: error: The folder")
    out = cli("extract", manifest, "-o", tmp_path / "s.zarr", "--rescale", "--quiet")
    assert out.returncode == 2 and ("was made with crop_size=40, orient=False, rescale=False, not crop_size=None, "
                                    "orient=True, rescale=True: give the store's options") in out.stderr
