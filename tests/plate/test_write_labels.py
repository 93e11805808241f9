"""A plate's clusters written back into its OME-Zarr (``ticlust predict … --write-labels``,
``ticlust.plate.labels.write_cluster_labels``): an HCS plate written with ome-zarr-py in NGFF 0.4 (Zarr v2) and
0.5 (Zarr v3), extracted, fitted and predicted; every field's label image read back with ome-zarr-py's Reader
(values cluster + 1 at every object's pixels, 0 elsewhere, outliers the reserved value), its metadata validated
with ome-zarr-models; a write killed mid-way resumes to the same bytes; another result's labels are refused unless
asked; inputs that are no OME-Zarr and stores without predictions are refused in one sentence."""
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import zarr

import ticlust
from ticlust.cli import main
from ticlust.datasets.nuclei import nuclei_field, write_nuclei_plate
from ticlust.errors import InputError
from ticlust.plate import curate
from ticlust.plate.labels import OUTLIER_VALUE, cluster_color, write_cluster_labels
from ticlust.plate.run import PREDICTIONS, fit_store, part_digest, predict_store

WELLS = ("A/1", "B/2")
SITES = 2


def write_plate(root_path: Path, version: str) -> None:
    """A 2-well HCS plate, two fields per well, each with a segmentation ``nuclei`` (a pyramid, as ome-zarr-py
    writes it), in NGFF ``version`` (0.4: Zarr v2; 0.5: Zarr v3)."""
    from ome_zarr.format import FormatV04, FormatV05
    from ome_zarr.writer import write_image, write_labels, write_plate_metadata, write_well_metadata

    fmt = FormatV04() if version == "0.4" else FormatV05()
    root = zarr.open_group(root_path, mode="w", zarr_format=fmt.zarr_format)
    write_plate_metadata(root, ["A", "B"], ["1", "2"], list(WELLS), fmt=fmt)
    for w, path in enumerate(WELLS):
        row, column = path.split("/")
        well = root.require_group(row).require_group(column)
        write_well_metadata(well, [str(f) for f in range(SITES)], fmt=fmt)
        for f in range(SITES):
            made = nuclei_field(n=10, shape=(112, 112), seed=10 * w + f)
            image = well.require_group(str(f))
            write_image(made.image, image, axes="yx", fmt=fmt)
            write_labels(made.labels, image, name="nuclei", axes="yx", fmt=fmt)


def fitted(tmp_path: Path, version: str = "0.5", k: int = 3, seed: int = 0):
    """(plate, store, result file) of a plate extracted and fitted (kmeans, K = ``k``), not yet predicted."""
    plate = tmp_path / "plate.ome.zarr"
    if not plate.exists():
        write_plate(plate, version)
    store = ticlust.extract(plate, tmp_path / "s.zarr")
    result, _ = fit_store(store, "kmeans", k, seed=seed)
    path = tmp_path / f"r{k}-{seed}.npz"
    result.save(path)
    return plate, store, path


def field_paths(plate: Path) -> list[Path]:
    return [plate / w / str(f) for w in WELLS for f in range(SITES)]


def read_label_nodes(field: Path) -> dict:
    """{name: node} of the label images of one field, as ome-zarr-py's Reader finds them."""
    from ome_zarr.io import parse_url
    from ome_zarr.reader import Label, Reader

    nodes = list(Reader(parse_url(str(field)))())
    return {Path(n.zarr.path).name: n for n in nodes if any(isinstance(s, Label) for s in n.specs)}


def expected_levels(field: Path, predictions, field_index: int, outliers=()) -> list[np.ndarray]:
    """Every pyramid level of the segmentation painted by hand: cluster + 1 where an object of the store lies,
    OUTLIER_VALUE for the objects in ``outliers``."""
    rows = predictions[predictions["field_index"] == field_index]
    nodes = read_label_nodes(field)
    out = []
    for level in nodes["nuclei"].data:
        seg = np.asarray(level)
        want = np.zeros(seg.shape, np.uint16)
        for i, row in rows.iterrows():
            want[seg == row["label"]] = OUTLIER_VALUE if i in outliers else row["cluster"] + 1
        out.append(want)
    return out


def validate(field: Path, version: str) -> None:
    """The field image (with its labels group) and the cluster label image validate as NGFF ``version``."""
    import ome_zarr_models.v04 as v04
    import ome_zarr_models.v05 as v05

    models = v04 if version == "0.4" else v05
    models.Image.from_zarr(zarr.open_group(field, mode="r"))
    models.ImageLabel.from_zarr(zarr.open_group(field / "labels" / "clusters", mode="r"))


@pytest.mark.parametrize("version", ["0.4", "0.5"])
def test_predict_write_labels_paints_every_field_in_the_inputs_ngff_version(tmp_path, capsys, version):
    plate, store, result = fitted(tmp_path, version)
    assert main(["predict", str(result), str(store.path), "--write-labels", "--quiet"]) == 0
    assert "wrote the cluster labels 'clusters' into 4 fields" in capsys.readouterr().out
    import pandas as pd

    predictions = pd.read_parquet(store.path / PREDICTIONS)
    digest = part_digest(store.path / PREDICTIONS)
    assert predictions["cluster"].nunique() > 1
    for index, field in enumerate(field_paths(plate)):
        nodes = read_label_nodes(field)
        assert list(nodes) == ["nuclei", "clusters"]                      # the segmentation stays the first
        got = [np.asarray(level) for level in nodes["clusters"].data]
        want = expected_levels(field, predictions, index)
        assert len(got) == len(want) > 1 and all(g.dtype == np.uint16 for g in got)
        for g, w in zip(got, want):
            assert np.array_equal(g, w)
        assert (got[0] > 0).sum() > 0
        meta = nodes["clusters"].metadata
        assert sorted(meta["color"]) == [1, 2, 3, OUTLIER_VALUE]                     # the dock's palette
        assert all(np.allclose(meta["color"][c + 1], cluster_color(c), atol=1 / 255) for c in range(3))
        assert np.allclose(meta["color"][OUTLIER_VALUE], cluster_color(-1), atol=1 / 255)
        assert meta["properties"][1]["cluster"] == 0 and meta["properties"][OUTLIER_VALUE]["name"] == "outlier"
        group = zarr.open_group(field / "labels" / "clusters", mode="r")
        assert group.metadata.zarr_format == (2 if version == "0.4" else 3)
        assert group.attrs["ticlust"] == {"result": digest, "method": "kmeans", "k": 3, "field": index,
                                               "segmentation": "nuclei", "outlier_value": OUTLIER_VALUE,
                                               "complete": True}
        validate(field, version)
    # a second run keeps every field (the same result's labels)
    again = write_cluster_labels(store, result)
    assert (again.written, again.kept) == (0, 4)
    assert [p.name for p in plate.rglob("*.partial")] == []


def test_outliers_get_the_reserved_value(tmp_path):
    plate, store, path = fitted(tmp_path)
    predict_store(path, store)
    result = ticlust.load_result(path)
    marked = curate.mark_outliers(result, [0, 5], len(store))
    curate.repredict(marked, store, result)
    done = write_cluster_labels(store, marked)
    assert done.written == 4
    import pandas as pd

    predictions = pd.read_parquet(store.path / PREDICTIONS)
    assert predictions["outlier"].tolist()[:6] == [True, False, False, False, False, True]
    for index, field in enumerate(field_paths(plate)):
        got = np.asarray(read_label_nodes(field)["clusters"].data[0])
        assert np.array_equal(got, expected_levels(field, predictions, index, outliers={0, 5})[0])
    first = np.asarray(read_label_nodes(field_paths(plate)[0])["clusters"].data[0])
    assert (first == OUTLIER_VALUE).any()


KILL = textwrap.dedent("""
    import os, signal, sys
    import ome_zarr.writer
    from ticlust.plate.labels import write_cluster_labels
    real, calls = ome_zarr.writer.write_multiscale_labels, []

    def dying(*args, **kwargs):
        real(*args, **kwargs)
        calls.append(1)
        if len(calls) == 3:                  # the third field's label image written, not yet renamed: killed
            os.kill(os.getpid(), signal.SIGKILL)

    ome_zarr.writer.write_multiscale_labels = dying
    write_cluster_labels(sys.argv[1], sys.argv[2])
""")


def test_a_killed_write_leaves_whole_label_images_and_the_next_run_finishes(tmp_path):
    plate, store, result = fitted(tmp_path)
    predict_store(result, store)
    env = {**os.environ, "PYTHONPATH": str(Path(ticlust.__file__).parents[1])}
    killed = subprocess.run([sys.executable, "-c", KILL, str(store.path), str(result)], env=env, capture_output=True)
    assert killed.returncode == -9, killed.stderr.decode()[-2000:]
    fields = field_paths(plate)
    assert [("clusters" in read_label_nodes(f)) for f in fields] == [True, True, False, False]
    assert len(list(plate.rglob(".clusters.*.partial"))) == 1                 # what the kill left, hidden
    for f in fields[:2]:
        assert zarr.open_group(f / "labels" / "clusters", mode="r").attrs["ticlust"]["complete"] is True
    done = write_cluster_labels(store, result)
    assert (done.written, done.kept) == (2, 2)
    assert list(plate.rglob("*.partial")) == []
    # the same label images as an uninterrupted run
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    write_plate(fresh / "plate.ome.zarr", "0.5")
    other = ticlust.extract(fresh / "plate.ome.zarr", fresh / "s.zarr")
    predict_store(result, other)
    write_cluster_labels(other, result)
    for f, g in zip(fields, field_paths(fresh / "plate.ome.zarr")):
        a, b = read_label_nodes(f)["clusters"], read_label_nodes(g)["clusters"]
        assert all(np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(a.data, b.data))
        assert a.metadata["properties"] == b.metadata["properties"]


def test_another_results_labels_are_refused_unless_asked(tmp_path, capsys):
    plate, store, first = fitted(tmp_path)
    predict_store(first, store)
    write_cluster_labels(store, first)
    field = field_paths(plate)[0]
    before = np.asarray(read_label_nodes(field)["clusters"].data[0])
    second, _ = fit_store(store, "kmeans", 2, seed=1)
    second = second.save(tmp_path / "second.npz")
    assert main(["predict", str(second), str(store.path), "--write-labels", "--quiet"]) == 2
    assert "of another result" in capsys.readouterr().err
    with pytest.raises(InputError, match=r"^4 field\(s\) hold labels 'clusters' of another result .*--overwrite-labels"):
        write_cluster_labels(store, second)
    assert np.array_equal(np.asarray(read_label_nodes(field)["clusters"].data[0]), before)
    assert main(["predict", str(second), str(store.path), "--write-labels", "--overwrite-labels", "--quiet"]) == 0
    after = zarr.open_group(field / "labels" / "clusters", mode="r").attrs["ticlust"]
    assert after["k"] == 2 and after["result"] == part_digest(store.path / PREDICTIONS)
    assert read_label_nodes(field).keys() == {"nuclei", "clusters"}
    assert list(plate.rglob("*.partial")) == []
    # a label image ticlust did not write, and the segmentation itself, are never replaced
    with pytest.raises(InputError, match="'nuclei' is the segmentation the objects were cut from"):
        write_cluster_labels(store, second, name="nuclei", overwrite=True)
    from ome_zarr.writer import write_labels

    write_labels(np.zeros((112, 112), np.uint8), zarr.open_group(field, mode="r+"), name="theirs", axes="yx")
    with pytest.raises(InputError, match=r"/A/1/0/labels/theirs is a label image ticlust did not write: give the "
                                         r"cluster labels another name\.$"):
        write_cluster_labels(store, second, name="theirs", overwrite=True)
    with pytest.raises(InputError, match="made with another result"):
        write_cluster_labels(store, first, name="other")


def test_bad_inputs_are_refused_in_one_sentence(tmp_path, capsys):
    # a folder of TIFFs
    folder = write_nuclei_plate(tmp_path / "tiffs", fields=2, n=6, shape=(96, 96), seed=1).parent
    store = ticlust.extract(folder, tmp_path / "tiffs.zarr")
    result, _ = fit_store(store, "kmeans", 2)
    path = result.save(tmp_path / "r.npz")
    listing = sorted(p.name for p in folder.iterdir())
    assert main(["predict", str(path), str(store.path), "--write-labels", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "which is not an OME-Zarr image or plate" in err and err.count("\n") == 1, err
    assert not (store.path / PREDICTIONS).exists() and sorted(p.name for p in folder.iterdir()) == listing
    # an OME-Zarr store without predictions
    plate, ome, result = fitted(tmp_path / "ome")
    with pytest.raises(InputError, match="has no predictions yet: run ticlust predict RESULT s.zarr first"):
        write_cluster_labels(ome, result)
    assert all("clusters" not in read_label_nodes(f) for f in field_paths(plate))
    # the options without --write-labels, or on a stack; a name that is no plain name
    assert main(["predict", str(result), str(ome.path), "--overwrite-labels", "--quiet"]) == 2
    assert "go with --write-labels" in capsys.readouterr().err
    np.save(tmp_path / "stack.npy", np.zeros((4, 8, 8), np.float32))
    assert main(["predict", str(result), str(tmp_path / "stack.npy"), "--write-labels", "--csv",
                 str(tmp_path / "x.csv"), "--quiet"]) == 2
    assert "--write-labels writes into the OME-Zarr an object store was extracted from" in capsys.readouterr().err
    for bad in ("a/b", ".hidden", ""):
        with pytest.raises(InputError, match="is not a plain name"):
            write_cluster_labels(ome, result, name=bad)
    # the input moved away
    shutil.move(plate, tmp_path / "moved.ome.zarr")
    with pytest.raises(InputError, match="is gone: the labels are written into it"):
        write_cluster_labels(ome, result)


# ---- in napari: the written labels opened as an NGFF viewer opens them, and the dock's button --------------------
def settle(qtbot, panel, timeout=120_000) -> None:
    """Wait until every worker of the plate panel is done and its results drawn."""
    qtbot.waitUntil(lambda: not panel.busy, timeout=timeout)


def open_with_ome_zarr_py(viewer, field: Path) -> list:
    """The field's image and its cluster labels as layers, read with ome-zarr-py (pyramids, the labels' colours)."""
    from ome_zarr.io import parse_url
    from ome_zarr.reader import Label, Reader

    nodes = list(Reader(parse_url(str(field)))())
    image = next(n for n in nodes if n.zarr.path.rstrip("/").endswith(field.name) and n.data)
    labels = next(n for n in nodes if any(isinstance(s, Label) for s in n.specs) and n.zarr.path.rstrip("/").endswith(
        "clusters"))
    return [viewer.add_image(image.data, multiscale=True),
            viewer.add_labels(labels.data, multiscale=True, name="clusters", colormap=labels.metadata["color"])]


@pytest.mark.gui
def test_the_written_labels_open_in_napari_over_their_field(tmp_path, make_napari_viewer):
    """napari-ome-zarr (the test extra) opens a field with the cluster labels as a Labels layer over the image, in
    the clusters' colours; without it, ome-zarr-py's reader feeds viewer.add_labels the same pyramid."""
    from napari.layers import Image, Labels

    plate, store, result = fitted(tmp_path)
    predict_store(result, store)
    write_cluster_labels(store, result)
    field = field_paths(plate)[1]
    viewer = make_napari_viewer()
    try:
        import napari_ome_zarr  # noqa: F401
    except ImportError:
        layers = open_with_ome_zarr_py(viewer, field)
    else:
        layers = viewer.open(str(field), plugin="napari-ome-zarr")
    image = next(layer for layer in layers if isinstance(layer, Image))
    clusters = next(layer for layer in layers if isinstance(layer, Labels) and layer.name.endswith("clusters"))
    import pandas as pd

    want = expected_levels(field, pd.read_parquet(store.path / PREDICTIONS), 1)
    data = clusters.data if clusters.multiscale else [clusters.data]
    assert np.array_equal(np.asarray(data[0]), want[0]) and (want[0] > 0).any()
    assert np.allclose(image.extent.world, clusters.extent.world)                       # over the field, pixel on pixel
    for value in np.unique(want[0][want[0] > 0]):
        assert np.allclose(clusters.colormap.map(int(value))[:3], cluster_color(int(value) - 1)[:3], atol=1 / 255)


@pytest.mark.gui
def test_the_dock_writes_the_labels_in_a_worker(tmp_path, plate_dock, qtbot):
    plate, store, result = fitted(tmp_path)
    predict_store(result, store)
    viewer, panel = plate_dock(store.path)
    panel.plate.export.labels.button.native.click()                   # the dock does not know the predictions' result yet
    assert "load the result the store's predictions were made with" in panel.status.value
    panel.load_result(result)                               # its file: the predictions' own
    settle(qtbot, panel)
    assert panel.plate.predicted is not None
    panel.plate.export.labels.button.native.click()
    settle(qtbot, panel)
    assert "Wrote the cluster labels 'clusters' into 4 fields of plate.ome.zarr (0 held them already)" in \
        panel.status.value, panel.status.value
    assert all("clusters" in read_label_nodes(f) for f in field_paths(plate))
    # another result's predictions: refused in the status line until the box is ticked
    other, _ = fit_store(store, "kmeans", 2, seed=1)
    predict_store(other, store)
    panel.load_result(other.save(tmp_path / "other.npz"))
    settle(qtbot, panel)
    panel.plate.export.labels.button.native.click()
    settle(qtbot, panel)
    assert "of another result" in panel.status.value and "--overwrite-labels" in panel.status.value
    panel.plate.export.replace_labels.value = True
    panel.plate.export.labels.button.native.click()
    settle(qtbot, panel)
    assert "into 4 fields" in panel.status.value, panel.status.value
    made = zarr.open_group(field_paths(plate)[0] / "labels" / "clusters", mode="r").attrs["ticlust"]
    assert made["k"] == 2 and made["result"] == part_digest(store.path / PREDICTIONS)
