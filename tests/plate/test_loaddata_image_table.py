"""CellProfiler's exported per-image table (Image_FileName_<Ch>, Image_PathName_<Ch>, Image_ObjectsFileName_<Name>,
Image_ObjectsPathName_<Name>, Image_Metadata_<Name>) is read as the LoadData columns are."""
import pandas as pd
import pytest

import ticlust
from ticlust.datasets.cell_painting import cell_painting_plate
from ticlust.errors import InputError


def test_the_per_image_table_makes_the_store_loaddata_makes(tmp_path):
    plate = cell_painting_plate(tmp_path / "p", wells=1, sites=2, cells=12, shape=(128, 128))
    table = pd.read_csv(plate.load_data)
    exported = table.rename(columns={c: f"Image_{c}" for c in table.columns})
    exported.insert(0, "ImageNumber", range(1, len(table) + 1))
    exported["Image_Count_Cells"] = 12                                   # a measurement: carried like any column
    exported.to_csv(tmp_path / "p" / "Image.csv", index=False)
    ref = ticlust.extract(plate.load_data, tmp_path / "a.zarr", channel="Mito")
    got = ticlust.extract(tmp_path / "p" / "Image.csv", tmp_path / "b.zarr", channel="Mito")
    assert len(got) == len(ref) and (got.table.Well == ref.table.Well).all()
    assert (got.crops[:] == ref.crops[:]).all() and "Image_Count_Cells" in got.table
    twice = exported.assign(FileName_DNA=exported["Image_FileName_DNA"])
    twice.to_csv(tmp_path / "p" / "twice.csv", index=False)
    with pytest.raises(InputError, match="has both FileName_DNA and Image_FileName_DNA, which name the same column"):
        ticlust.extract(tmp_path / "p" / "twice.csv", tmp_path / "c.zarr")
