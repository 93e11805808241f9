"""An NGFF HCS plate (plate → wells → fields, each field an OME-Zarr image with a labels group) as
extraction input, written with ome-zarr-py's own writer as an acquisition system would."""
import numpy as np
import pytest

import ticlust
from ticlust.errors import InputError
from ticlust.objects.crops import objects_from_labels

WELLS = ("B/3", "A/1", "A/12")        # the wells write_hcs_plate (conftest.py) writes, out of order


def test_hcs_plate_extracts_every_field_of_every_well_with_its_well_and_site(write_hcs_plate, tmp_path):
    fields = write_hcs_plate(tmp_path / "plate.ome.zarr")
    store = ticlust.extract(tmp_path / "plate.ome.zarr", tmp_path / "s.zarr")
    table = store.table
    order = list(dict.fromkeys(zip(table["well"], table["site"])))
    assert order == [("A1", 0), ("A1", 1), ("A12", 0), ("A12", 1), ("B3", 0), ("B3", 1)]
    assert set(table["row"]) == {"A", "B"} and set(table["column"]) == {"1", "3", "12"}
    assert (table["labels"] == "nuclei").all()
    for (well, site), made in fields.items():
        rows = table[(table["well"] == well) & (table["site"] == site)]
        crops, expected = objects_from_labels(made.image, made.labels, size=store.size, orient=True, normalize=True)
        assert np.array_equal(rows["label"].to_numpy(), expected["label"])
        assert np.array_equal(store.crops[rows.index.to_numpy()], crops)


def test_hcs_plate_field_without_labels_fails_alone_and_a_plate_without_any_is_refused(write_hcs_plate, tmp_path):
    write_hcs_plate(tmp_path / "p.ome.zarr", skip_labels={("A/1", 1)})
    with pytest.warns(UserWarning, match="1 of 6 fields"):
        store = ticlust.extract(tmp_path / "p.ome.zarr", tmp_path / "s.zarr")
    assert len(store.failed) == 1 and "has no labels group" in store.failed["error"].iloc[0]
    assert ("A1", 1) not in set(zip(store.table["well"], store.table["site"]))
    none = {(w, f) for w in WELLS for f in range(2)}
    write_hcs_plate(tmp_path / "bare.ome.zarr", skip_labels=none)
    with pytest.raises(InputError, match="No field of the OME-Zarr plate bare.ome.zarr has a labels group"):
        ticlust.extract(tmp_path / "bare.ome.zarr", tmp_path / "bare.zarr")
    assert not (tmp_path / "bare.zarr").exists()
