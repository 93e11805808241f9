"""From a microscope's raw fields (one TIFF per channel, no masks) to a predicted store and CSV on the command line,
as a user would type it: CellProfiler's LoadData spelling with --segment, and a folder named by channel suffixes."""
import time

import numpy as np
import pandas as pd
import pytest
import tifffile

import ticlust


def raw_to_csv(cli, source, tmp_path, *extract):
    """extract (segmenting), fit kmeans on every object, predict into a CSV; the store and the CSV."""
    store = tmp_path / "raw.zarr"
    out = cli("extract", source, "-o", store, "--segment", "nuclei", "--quiet", *extract, timeout=600)
    assert out.returncode == 0, out.stderr
    out = cli("fit", store, "--method", "kmeans", "--k", "3", "-o", tmp_path / "r.npz", "--quiet", timeout=600)
    assert out.returncode == 0, out.stderr
    out = cli("predict", tmp_path / "r.npz", store, "--csv", tmp_path / "raw.csv", "--quiet", timeout=600)
    assert out.returncode == 0, out.stderr
    return ticlust.open_objects(store), pd.read_csv(tmp_path / "raw.csv")


def every_nucleus_kept_or_listed(store):
    for i, row in store.fields.iterrows():
        found = set(np.unique(tifffile.imread(row["labels"]))) - {0}
        kept = set(store.table.label[store.table.field_index == i])
        skipped = set(store.skipped.label[store.skipped.field_index == i])
        assert found == kept | skipped and not kept & skipped


def test_loaddata_of_raw_fields_to_csv(raw_fields, tmp_path, cli):
    folder, load_data, fields = raw_fields
    store, table = raw_to_csv(cli, load_data, tmp_path, "--channel", "OrigBlue,OrigGreen", "--diameter",
                              f"{fields[0].diameter:.1f}")
    assert len(table) == len(store) > 30 and {"Plate", "Site", "cluster", "score"} <= set(table.columns)
    assert store.channels == 2 and set(table.cluster) <= {0, 1, 2}
    every_nucleus_kept_or_listed(store)
    assert (tmp_path / "raw_masks" / "site2_masks.tif").is_file()


def test_a_folder_named_by_channel_suffixes_and_the_flags_bad_values(raw_fields, tmp_path, cli):
    folder, _, fields = raw_fields
    out = cli("extract", folder, "-o", tmp_path / "s.zarr", "--channel-suffixes", "D,F", "--segment", "nuclei",
              "--channel", "D", "--diameter", "16", "--oversize", "rescale", "--quiet")
    assert out.returncode == 0, out.stderr
    assert "objects (" in out.stdout and "masks: " in out.stdout and "s_masks" in out.stdout
    store = ticlust.open_objects(tmp_path / "s.zarr")
    assert store.options["oversize"] == "rescale" and store.options["segment"]["diameter"] == 16.0
    for flags, said in ((["--diameter", "1"], "diameter=1.0 must be the nuclei's expected diameter in pixels"),
                        ([], "needs the nuclei's expected diameter in pixels: give --diameter"),
                        (["--diameter", "12", "--threshold", "max"], "invalid choice: 'max'"),
                        (["--diameter", "12", "--oversize", "crop"], "invalid choice: 'crop'")):
        out = cli("extract", folder, "-o", tmp_path / "t.zarr", "--channel-suffixes", "D,F", "--segment", "nuclei",
                  "--channel", "D", *flags)
        assert out.returncode == 2 and said in out.stderr.splitlines()[-1], out.stderr     # argparse's, or one sentence
        assert out.stderr.count("\n") == 1 or "invalid choice" in said
    assert not (tmp_path / "t.zarr").exists()


@pytest.mark.slow
def test_the_real_drosophila_sites_from_raw_tiffs_to_csv(tmp_path, shared_datasets, cli):
    """CellProfiler's ExampleFly: three sites of 1006×1000, three channels, no masks, its own LoadData spelling."""
    fly = shared_datasets("real_fields/example_fly")
    rows = [{"Metadata_Plate": "01", "Metadata_Site": site,
             **{f"FileName_Orig{c}": f"01_POS{site}_{s}.TIF" for c, s in (("Blue", "D"), ("Green", "F"), ("Red", "R"))},
             **{f"PathName_Orig{c}": str(fly) for c in ("Blue", "Green", "Red")}} for site in ("002", "076", "218")]
    pd.DataFrame(rows).to_csv(tmp_path / "load_data.csv", index=False)
    start = time.perf_counter()
    store, table = raw_to_csv(cli, tmp_path / "load_data.csv", tmp_path, "--channel", "OrigBlue,OrigGreen,OrigRed",
                              "--diameter", "20")
    print(f"raw TIFFs to CSV: {time.perf_counter() - start:.1f} s, {len(store)} objects, {store.size} px crops")
    assert len(table) == len(store) > 1200 and store.size <= 64 and store.channels == 3
    assert len(store.failed) == 0 and len(store.skipped) < 0.02 * len(store)
    every_nucleus_kept_or_listed(store)
