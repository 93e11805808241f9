"""ticlust extract --segment: fields that come without masks are segmented into a masks folder beside the store,
every nucleus found is kept or listed, and the masks can be corrected and extracted again."""
import json

import numpy as np
import pytest
import tifffile

import ticlust
from ticlust.errors import InputError
from ticlust.plate.segment import MANIFEST, RECORD, masks_folder


def kept_or_listed(store, masks):
    """Every nucleus of the written masks away from the border is a row of the table or of the skipped table."""
    for i, row in store.fields.iterrows():
        labels = tifffile.imread(row["labels"])
        found = set(np.unique(labels)) - {0}
        rows = set(store.table.label[store.table.field_index == i]) | set(
            store.skipped.label[store.skipped.field_index == i])
        assert found == rows, (i, found ^ rows)
        assert str(masks) in row["labels"]


def test_a_loaddata_csv_without_objects_is_segmented_in_its_first_channel(raw_fields, tmp_path):
    folder, load_data, fields = raw_fields
    store = ticlust.extract(load_data, tmp_path / "p.zarr", segment="nuclei", diameter=fields[0].diameter,
                            channel=["OrigBlue", "OrigGreen"])
    masks = tmp_path / "p_masks"
    assert masks_folder(tmp_path / "p.zarr") == masks
    assert sorted(p.name for p in masks.iterdir()) == [MANIFEST, RECORD] + [f"site{i}_masks.tif" for i in range(3)]
    assert store.channels == 2 and store.options["segment"] == {"objects": "nuclei", "diameter": fields[0].diameter,
                                                                "threshold": "li"}
    assert set(store.table["Site"]) == {0, 1, 2} and len(store) > 30
    kept_or_listed(store, masks)
    # the masks are the recipe's on the D channel, as segment_nuclei gives them
    first = ticlust.segment_nuclei(tifffile.imread(folder / "site0_D.tif"), fields[0].diameter)
    assert np.array_equal(tifffile.imread(masks / "site0_masks.tif"), first)
    # corrected masks go back in through the masks folder's manifest
    edited = first.copy()
    edited[edited == 1] = 0
    tifffile.imwrite(masks / "site0_masks.tif", edited)
    again = ticlust.extract(masks / MANIFEST, tmp_path / "q.zarr", channel=["OrigBlue", "OrigGreen"])
    assert len(again) == len(store) - (1 if 1 in set(store.table.label[store.table.field_index == 0]) else 0)
    assert set(again.table["Site"]) == {0, 1, 2}


def test_a_folder_of_channel_files_and_a_stopped_run(raw_fields, tmp_path, monkeypatch):
    folder, _, fields = raw_fields
    calls = []
    import ticlust.plate.segment as segmenting

    original = segmenting.segment_nuclei
    monkeypatch.setattr(segmenting, "segment_nuclei", lambda *a, **k: calls.append(1) or original(*a, **k))
    store = ticlust.extract(folder, tmp_path / "f.zarr", channel_suffixes="D,F", segment="nuclei",
                            diameter=fields[0].diameter, channel="D")
    assert store.channels is None and len(calls) == 3
    assert list(store.fields["image_D"]) == [f"site{i}_D.tif" for i in range(3)]
    assert sorted(p.name for p in (tmp_path / "f_masks").glob("*.tif")) == [f"site{i}_masks.tif" for i in range(3)]
    # a run on the same store and masks segments nothing again, and the store stays as it was
    table = store.table
    again = ticlust.extract(folder, tmp_path / "f.zarr", channel_suffixes="D,F", segment="nuclei",
                            diameter=fields[0].diameter, channel="D")
    assert len(calls) == 3 and again.table.equals(table)
    # a masks folder that holds another segmentation's masks is refused, nothing mixed in
    other = tmp_path / "g_masks"
    other.mkdir()
    (other / RECORD).write_text(json.dumps({"other": 1}))
    with pytest.raises(InputError, match="holds the masks of another segmentation"):
        ticlust.extract(folder, tmp_path / "g.zarr", channel_suffixes="D,F", segment="nuclei", diameter=9, channel="D")
    assert sorted(p.name for p in other.iterdir()) == [RECORD]


def test_segmenting_refusals(raw_fields, tmp_path):
    folder, load_data, fields = raw_fields
    with pytest.raises(InputError, match="needs the nuclei's expected diameter in pixels: give --diameter"):
        ticlust.extract(load_data, tmp_path / "a.zarr", segment="nuclei")
    with pytest.raises(InputError, match="segment='cells' is not known"):
        ticlust.extract(load_data, tmp_path / "a.zarr", segment="cells", diameter=12)
    with pytest.raises(InputError, match="diameter= and threshold= set how ticlust segments fields"):
        ticlust.extract(load_data, tmp_path / "a.zarr", diameter=12)
    with pytest.raises(InputError, match="names masks to cut and segment= \\(--segment\\) makes them"):
        ticlust.extract(load_data, tmp_path / "a.zarr", segment="nuclei", diameter=12, labels="Nuclei")
    with pytest.raises(InputError, match="The image has 2 channels: name the one that shows the nuclei"):
        ticlust.extract(load_data, tmp_path / "b.zarr", segment="nuclei", diameter=12)
    (tmp_path / "c_masks").mkdir()
    (tmp_path / "c_masks" / "mine.txt").write_text("keep me")
    with pytest.raises(InputError, match="c_masks, where this store's masks go, exists and holds other files"):
        ticlust.extract(load_data, tmp_path / "c.zarr", segment="nuclei", diameter=12, channel="OrigBlue")
    assert (tmp_path / "c_masks" / "mine.txt").read_text() == "keep me" and not (tmp_path / "c.zarr").exists()
    with pytest.raises(InputError, match="No image file of .* ends in a channel suffix \\(X, Y\\)"):
        ticlust.extract(folder, tmp_path / "d.zarr", channel_suffixes="X,Y", segment="nuclei", diameter=12)
