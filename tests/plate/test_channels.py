"""Fields whose channels are separate files: image_<Channel> manifests, CellProfiler LoadData CSVs (with their
Objects* label images and Metadata_* columns), --channel by name, and each layout's bad inputs."""
import numpy as np
import pandas as pd
import pytest
import tifffile

import ticlust
from ticlust.cli import main
from ticlust.datasets.cell_painting import cell_painting_plate
from ticlust.datasets.nuclei import nuclei_field
from ticlust.errors import InputError
from ticlust.metrics import hungarian_accuracy
from ticlust.plate.run import fit_store, predict_store
from ticlust.plate.view import condition_columns, field_picture

NAMES = ("DNA", "ER", "Mito")
FILE_COLUMNS = ["image", "labels"] + [f"image_{n}" for n in NAMES]


def write_channels(root, fields=2):
    """Per-channel TIFFs in images/, masks in masks/, and the same pixels as one Y×X×C TIFF per field in
    whole/: {field name: (Y×X×C image, labels)}."""
    made = {}
    for folder in ("images", "masks", "whole"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    for f in range(fields):
        field = nuclei_field(n=10, shape=(96, 96), seed=f)
        rng = np.random.default_rng(f)
        planes = [field.image, (field.image // 2 + rng.integers(0, 50, field.image.shape)).astype(np.uint16),
                  np.where(field.labels > 0, rng.integers(100, 900, field.image.shape), 30).astype(np.uint16)]
        name = f"A0{f + 1}"
        for ch, plane in zip(NAMES, planes):
            tifffile.imwrite(root / "images" / f"{name}_{ch}.tif", plane)
        tifffile.imwrite(root / "masks" / f"{name}_masks.tif", field.labels)
        whole = np.stack(planes, axis=-1)
        tifffile.imwrite(root / "whole" / f"{name}.tif", whole)
        made[name] = (whole, field.labels)
    return made


def channel_manifest(root, made, order=NAMES, extra=None):
    rows = [{**{f"image_{c}": f"images/{name}_{c}.tif" for c in order}, "labels": f"masks/{name}_masks.tif",
             "well": name, **(extra or {})} for name in made]
    pd.DataFrame(rows).to_csv(root / "channels.csv", index=False)
    return root / "channels.csv"


def whole_manifest(root, made):
    rows = [{"image": f"whole/{name}.tif", "labels": f"masks/{name}_masks.tif", "well": name} for name in made]
    pd.DataFrame(rows).to_csv(root / "whole.csv", index=False)
    return root / "whole.csv"


def loaddata(root, made, objects=("Nuclei",), metadata=True, absolute=False):
    rows = []
    for name in made:
        row = {}
        for c in NAMES:
            row[f"FileName_{c}"] = f"{name}_{c}.tif"
            row[f"PathName_{c}"] = str(root / "images") if absolute else "images"
        for o in objects:
            row[f"ObjectsFileName_{o}"] = f"{name}_masks.tif"
            row[f"ObjectsPathName_{o}"] = "masks"
        if metadata:
            row.update({"Metadata_Plate": "P1", "Metadata_Well": name, "Metadata_Site": 0, "Metadata_label": 7})
        rows.append(row)
    pd.DataFrame(rows).to_csv(root / "load_data.csv", index=False)
    return root / "load_data.csv"


def same_store(a, b, drop=()):
    """Two stores hold the same crops, masks and rows (the file columns aside)."""
    assert (a.size, a.dtype, a.channels) == (b.size, b.dtype, b.channels)
    assert np.array_equal(np.asarray(a.crops[:]), np.asarray(b.crops[:]))
    assert np.array_equal(np.asarray(a.masks[:]), np.asarray(b.masks[:]))
    ta = a.table.drop(columns=[c for c in a.table.columns if c in FILE_COLUMNS or c in drop])
    tb = b.table.drop(columns=[c for c in b.table.columns if c in FILE_COLUMNS or c in drop])
    pd.testing.assert_frame_equal(ta, tb)


def test_image_channel_columns_stack_the_files_in_the_manifests_order(tmp_path):
    made = write_channels(tmp_path)
    store = ticlust.extract(channel_manifest(tmp_path, made), tmp_path / "c.zarr")
    whole = ticlust.extract(whole_manifest(tmp_path, made), tmp_path / "w.zarr")
    assert store.channels == 3
    same_store(store, whole)
    assert condition_columns(store) == ["well"]          # the channel files are no condition to group by
    picture = field_picture(store, 1)
    assert picture.image.shape == (3, 96, 96) and np.array_equal(picture.image, np.moveaxis(made["A02"][0], -1, 0))
    # another column order is another channel order
    reordered = ticlust.extract(channel_manifest(tmp_path, made, order=("Mito", "DNA", "ER")), tmp_path / "r.zarr")
    assert np.array_equal(np.asarray(reordered.crops[:]), np.asarray(store.crops[:])[..., [2, 0, 1]])


def test_loaddata_pairs_are_read_as_they_are_with_objects_and_metadata(tmp_path):
    made = write_channels(tmp_path)
    store = ticlust.extract(loaddata(tmp_path, made, absolute=True), tmp_path / "l.zarr")
    same_store(store, ticlust.extract(channel_manifest(tmp_path, made), tmp_path / "c.zarr"),
               drop=("well", "Plate", "Well", "Site", "Metadata_label"))
    table = store.table
    assert {"Plate", "Well", "Site"} <= set(table.columns)
    assert "Metadata_label" in table.columns and (table["Metadata_label"] == 7).all()   # "label" is the rows' own
    assert (table["Well"].unique() == ["A01", "A02"]).all()
    assert not any(c.startswith(("FileName_", "PathName_", "Objects")) for c in table.columns)


def test_loaddata_with_two_object_sets_needs_the_one_named(tmp_path):
    made = write_channels(tmp_path)
    csv = loaddata(tmp_path, made, objects=("Nuclei", "Cells"))
    with pytest.raises(InputError, match=r"2 object sets \(Nuclei, Cells\): choose the one to cut with --labels NAME"):
        ticlust.extract(csv, tmp_path / "s.zarr")
    assert not (tmp_path / "s.zarr").exists()
    assert len(ticlust.extract(csv, tmp_path / "s.zarr", labels="Cells")) > 0
    with pytest.raises(InputError, match="has none called 'Golgi'"):
        ticlust.extract(csv, tmp_path / "g.zarr", labels="Golgi")


def test_channel_picks_channels_by_name_or_index_in_the_order_given(tmp_path, capsys):
    made = write_channels(tmp_path)
    csv = channel_manifest(tmp_path, made)
    full = np.asarray(ticlust.extract(csv, tmp_path / "all.zarr").crops[:])
    er = ticlust.extract(csv, tmp_path / "er.zarr", channel="ER")
    assert er.channels is None and np.array_equal(np.asarray(er.crops[:]), full[..., 1])
    assert np.array_equal(np.asarray(ticlust.extract(csv, tmp_path / "i.zarr", channel=1).crops[:]), full[..., 1])
    two = ticlust.extract(csv, tmp_path / "two.zarr", channel=["Mito", "DNA"])
    assert two.channels == 2 and np.array_equal(np.asarray(two.crops[:]), full[..., [2, 0]])
    assert main(["extract", str(csv), "-o", str(tmp_path / "cli.zarr"), "--channel", "Mito,DNA", "--quiet"]) == 0
    assert np.array_equal(np.asarray(ticlust.open_objects(tmp_path / "cli.zarr").crops[:]), full[..., [2, 0]])
    assert main(["extract", str(csv), "-o", str(tmp_path / "bad.zarr"), "--channel", "GFP"]) == 2
    err = capsys.readouterr().err
    assert "has no channel 'GFP': its channels are DNA, ER, Mito" in err and not (tmp_path / "bad.zarr").exists()



def test_a_channel_text_given_in_python_means_what_it_means_typed(tmp_path):
    """channel="0,2" is the indices 0 and 2, as --channel 0,2 is (not channels named "0" and "2")."""
    made = write_channels(tmp_path)
    csv = channel_manifest(tmp_path, made)
    full = np.asarray(ticlust.extract(csv, tmp_path / "all.zarr").crops[:])
    assert main(["extract", str(csv), "-o", str(tmp_path / "cli.zarr"), "--channel", "0,2", "--quiet"]) == 0
    typed = np.asarray(ticlust.open_objects(tmp_path / "cli.zarr").crops[:])
    given = ticlust.extract(csv, tmp_path / "api.zarr", channel="0,2")
    assert given.options["channel"] == [0, 2] and np.array_equal(np.asarray(given.crops[:]), typed)
    assert np.array_equal(typed, full[..., [0, 2]])
    one = ticlust.extract(csv, tmp_path / "one.zarr", channel=" 2 ")
    assert one.channels is None and np.array_equal(np.asarray(one.crops[:]), full[..., 2])
    assert ticlust.extract(csv, tmp_path / "names.zarr", channel="Mito, DNA").options["channel"] == ["Mito", "DNA"]

def _bad_missing_channel_file(root, made):
    (root / "images" / "A01_ER.tif").unlink()
    return channel_manifest(root, {"A01": made["A01"]}), {}, "There is no ER channel file at"


def _bad_shapes(root, made):
    tifffile.imwrite(root / "images" / "A01_ER.tif", np.zeros((90, 96), np.uint16))
    return channel_manifest(root, {"A01": made["A01"]}), {}, r"differ in shape \(DNA 96×96, ER 90×96, Mito 96×96\)"


def _bad_named_twice(root, made):
    (root / "m.csv").write_text("image_DNA,image_ER,image_DNA,labels\nimages/A01_DNA.tif,images/A01_ER.tif,"
                                "images/A01_Mito.tif,masks/A01_masks.tif\n")
    return root / "m.csv", {}, r"names the channel DNA twice \(two image_DNA columns\)"


def _bad_loaddata_named_twice(root, made):
    (root / "m.csv").write_text("FileName_DNA,FileName_DNA,ObjectsFileName_Nuclei\nA01_DNA.tif,A01_ER.tif,"
                                "masks/A01_masks.tif\n")
    return root / "m.csv", {}, r"names the channel DNA twice \(two FileName_DNA columns\)"


def _bad_no_objects(root, made):
    return loaddata(root, made, objects=()), {}, "The LoadData manifest load_data.csv has no object column"


def _bad_unknown_channel(root, made):
    return channel_manifest(root, made), {"channel": ["DNA", "GFP"]}, "The input has no channel 'GFP'"


def _bad_channel_twice(root, made):
    return channel_manifest(root, made), {"channel": "DNA,DNA"}, "names the channel 'DNA' twice"


def _bad_both_layouts(root, made):
    pd.DataFrame([{"image": "whole/A01.tif", "image_DNA": "images/A01_DNA.tif", "labels": "masks/A01_masks.tif"}]
                 ).to_csv(root / "m.csv", index=False)
    return root / "m.csv", {}, "has both image and image_<Channel> columns"


def _bad_blank_channel_cell(root, made):
    pd.DataFrame([{"image_DNA": "images/A01_DNA.tif", "image_ER": "", "labels": "masks/A01_masks.tif"}]
                 ).to_csv(root / "m.csv", index=False)
    return root / "m.csv", {}, "names no file for the channel ER"


BAD = [_bad_missing_channel_file, _bad_shapes, _bad_named_twice, _bad_loaddata_named_twice, _bad_no_objects,
       _bad_unknown_channel, _bad_channel_twice, _bad_both_layouts, _bad_blank_channel_cell]


@pytest.mark.parametrize("case", BAD, ids=lambda f: f.__name__[5:])
def test_bad_channel_inputs_are_one_sentence_and_write_nothing(tmp_path, case):
    made = write_channels(tmp_path)
    csv, options, message = case(tmp_path, made)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    with pytest.raises(InputError, match=message) as caught:
        ticlust.extract(csv, tmp_path / "s.zarr", **options)
    assert "\n" not in str(caught.value)
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


def test_every_method_that_takes_a_store_clusters_multichannel_crops(tmp_path):
    made = write_channels(tmp_path)
    store = ticlust.extract(channel_manifest(tmp_path, made), tmp_path / "c.zarr")
    for method in ("kmeans", "procrustes-kmeans"):           # an image method on the crops, a shape one on masks
        result, _ = fit_store(store, method=method, k=2, seed=0, progress=False)
        assert result.labels.shape == (len(store),)
    assert np.shape(fit_store(store, method="kmeans", k=2, seed=0, progress=False)[0].prototypes)[-1] == 3


def test_a_cell_painting_plate_is_told_apart_by_all_channels_and_not_by_one(tmp_path):
    plate = cell_painting_plate(tmp_path / "plate", wells=1, sites=2, cells=40, seed=3)
    truth = pd.read_csv(plate.truth)
    scores = {}
    for channel in (None, "DNA"):
        store = ticlust.extract(plate.load_data, tmp_path / f"{channel}.zarr", channel=channel)
        result, _ = fit_store(store, method="kmeans", k=2, seed=0, progress=False)
        table = pd.read_parquet(predict_store(result, store, progress=False).path)
        rows = table.merge(truth, on=["Well", "Site", "label"])
        assert len(rows) == len(table)
        scores[channel] = hungarian_accuracy(rows["kind"].to_numpy(), rows["cluster"].to_numpy())
    assert scores[None] >= 0.95 and scores["DNA"] < 0.75, scores


def test_an_ome_zarr_images_channels_are_picked_by_their_omero_labels(tmp_path):
    import zarr
    from ome_zarr.writer import write_image, write_labels

    field = nuclei_field(n=8, shape=(96, 96), seed=1)
    root = zarr.open_group(tmp_path / "f.ome.zarr", mode="w")
    write_image(np.stack([field.image, field.image // 2, field.image // 3]), root, axes="cyx")
    root.attrs["ome"] = {**root.attrs["ome"], "omero": {"channels": [{"label": n, "color": "FFFFFF"} for n in NAMES]}}
    write_labels(field.labels, root, name="nuclei", axes="yx")
    full = np.asarray(ticlust.extract(tmp_path / "f.ome.zarr", tmp_path / "a.zarr").crops[:])
    two = ticlust.extract(tmp_path / "f.ome.zarr", tmp_path / "e.zarr", channel=["Mito", "ER"])
    assert two.channels == 2 and np.array_equal(np.asarray(two.crops[:]), full[..., [2, 1]])
    with pytest.raises(InputError, match="f.ome.zarr has no channel 'GFP': its channels are DNA, ER, Mito."):
        ticlust.extract(tmp_path / "f.ome.zarr", tmp_path / "x.zarr", channel="GFP")
    assert not (tmp_path / "x.zarr").exists()
