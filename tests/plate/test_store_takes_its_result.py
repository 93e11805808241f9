"""A store always takes its own result, whatever the manifest's spelling (issue 55, item 2), and a result fitted on
other channels — another count, other names, another order — is refused in one sentence
(``plate.run.check_result_for_store``, the one decision). A manifest with one named channel (``image_DNA,labels``)
gave a store that refused its own result: "fitted on 48×48 crops but STORE holds 48×48 crops with 1 channels"."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import tifffile

import ticlust
from ticlust.cli import main
from ticlust.datasets.nuclei import nuclei_field
from ticlust.plate.explore import inspect_object
from ticlust.plate.run import check_result_for_store, fit_store, predict_store, store_channels, store_item

NAMES = ["DNA", "ER", "Mito"]


def write_fields(root, n=2):
    """``n`` fields of three channels: one TIFF per channel in images/, the Y×X×C TIFF in whole/, masks in masks/,
    and the fields as the scenes of one OME-TIFF in ome/ (its masks beside it). Returns the field names."""
    for folder in ("images", "masks", "whole", "ome"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    names, planes_of = [], []
    for f in range(n):
        field = nuclei_field(n=8, shape=(88, 104), seed=30 + f)
        rng = np.random.default_rng(f)
        planes = [field.image, (field.image // 3 + 7).astype(np.uint16),
                  rng.integers(0, 900, field.image.shape).astype(np.uint16)]
        name = f"A0{f + 1}"
        for ch, plane in zip(NAMES, planes):
            tifffile.imwrite(root / "images" / f"{name}_{ch}.tif", plane)
        tifffile.imwrite(root / "masks" / f"{name}_masks.tif", field.labels)
        tifffile.imwrite(root / "whole" / f"{name}.tif", np.stack(planes, -1))
        tifffile.imwrite(root / "ome" / f"plate_s{f}_cp_masks.tif", field.labels)
        names.append(name)
        planes_of.append(np.stack(planes))
    with tifffile.TiffWriter(root / "ome" / "plate.ome.tif", ome=True) as tw:
        for image in planes_of:
            tw.write(image, photometric="minisblack", metadata={"axes": "CYX", "Channel": {"Name": NAMES}})
    return names


def manifest(root, names, spelling: str, order=NAMES):
    """The input of one spelling, and the extraction options it goes with (``order``: of the channel columns)."""
    if spelling.startswith("bioio"):
        return root / "ome", {"channel": ["DNA"]} if spelling == "bioio scenes, one channel kept" else {}
    rows = []
    for name in names:
        mask = {"labels": f"masks/{name}_masks.tif"}
        if spelling == "plain image,labels":
            row = {"image": f"whole/{name}.tif", **mask}
        elif spelling == "one named channel":
            row = {"image_DNA": f"images/{name}_DNA.tif", **mask}
        elif spelling.startswith("several named channels"):
            row = {**{f"image_{c}": f"images/{name}_{c}.tif" for c in order}, **mask}
        else:                          # CellProfiler's LoadData
            kept = NAMES[:1] if spelling == "LoadData, one channel" else NAMES
            row = {**{f"FileName_{c}": f"{name}_{c}.tif" for c in kept}, **{f"PathName_{c}": "images" for c in kept},
                   "ObjectsFileName_Nuclei": f"{name}_masks.tif", "ObjectsPathName_Nuclei": "masks",
                   "Metadata_Well": name}
        rows.append({**row, "well": name} if "Metadata_Well" not in row else row)
    path = root / f"{spelling.replace(' ', '_').replace(',', '')}{'' if order == NAMES else '_turned'}.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    options = {"several named channels, one kept as a list": {"channel": ["ER"]},
               "several named channels, two kept": {"channel": ["Mito", "DNA"]}}.get(spelling, {})
    return path, options


SPELLINGS = ["plain image,labels", "one named channel", "several named channels", "several named channels, two kept",
             "several named channels, one kept as a list", "LoadData", "LoadData, one channel", "bioio scenes",
             "bioio scenes, one channel kept"]


@pytest.fixture(scope="module")
def fields(tmp_path_factory):
    root = tmp_path_factory.mktemp("spellings")
    return root, write_fields(root)


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_a_store_takes_the_result_fitted_on_it_whatever_the_spelling(fields, tmp_path, capsys, spelling):
    """extract → fit → predict on itself, on the command line and in Python; and the inspector opens an object."""
    root, names = fields
    source, options = manifest(root, names, spelling)
    flags = sum((["--channel", ",".join(v) + ("," if len(v) == 1 else "")] for v in options.values()), [])
    store = tmp_path / "s.zarr"
    if len(options.get("channel", [])) == 1:     # a list of one channel: Python only (the CLI's "DNA" is one name)
        ticlust.extract(source, store, crop_size=32, progress=False, **options)
    else:
        assert main(["extract", str(source), "-o", str(store), "--crop-size", "32", "--quiet", *flags]) == 0, \
            capsys.readouterr().err
    assert main(["fit", str(store), "--k", "2", "-o", str(tmp_path / "r.npz"), "--quiet"]) == 0, \
        capsys.readouterr().err
    assert main(["predict", str(tmp_path / "r.npz"), str(store), "--quiet", "--csv", str(tmp_path / "p.csv")]) == 0, \
        capsys.readouterr().err
    opened = ticlust.open_objects(store)
    assert len(pd.read_csv(tmp_path / "p.csv")) == len(opened)
    result, _ = fit_store(opened, "kmeans", k=2, seed=0, progress=False)
    done = predict_store(result, opened, progress=False)
    assert done.objects == len(opened) and done.sample_changed == 0
    assert inspect_object(opened, result, 0, device="cpu").scores.shape == (2,)
    assert np.shape(result.prototypes)[1:] == store_item(opened)


@pytest.fixture(scope="module")
def two_orders(fields, tmp_path_factory):
    """The same fields extracted with their channels in two orders, and a result fitted on the first."""
    root, names = fields
    folder = tmp_path_factory.mktemp("orders")
    source, _ = manifest(root, names, "several named channels")
    first = ticlust.extract(source, folder / "a.zarr", crop_size=32, progress=False)
    other, _ = manifest(root, names, "several named channels", order=NAMES[::-1])
    turned = ticlust.extract(other, folder / "b.zarr", crop_size=32, progress=False)
    result, _ = fit_store(first, "kmeans", k=2, seed=0, progress=False)
    return first, turned, result


def test_a_result_of_other_channels_or_another_order_is_refused(two_orders, fields, tmp_path):
    first, turned, result = two_orders
    assert store_channels(first) == ("DNA", "ER", "Mito") and store_channels(turned) == ("Mito", "ER", "DNA")
    assert tuple(result.config["store"]["channel_names"]) == ("DNA", "ER", "Mito")
    before = sorted(p.relative_to(turned.path) for p in turned.path.rglob("*"))
    with pytest.raises(ticlust.InputError, match=r"fitted on the channels DNA, ER, Mito but .*b\.zarr holds Mito, ER, "
                                                 r"DNA: extract the plate with --channel DNA,ER,Mito"):
        predict_store(result, turned, progress=False)
    assert sorted(p.relative_to(turned.path) for p in turned.path.rglob("*")) == before
    root, names = fields
    grey = ticlust.extract(manifest(root, names, "one named channel")[0], tmp_path / "grey.zarr", crop_size=32,
                           progress=False)
    with pytest.raises(ticlust.InputError, match="fitted on 32×32 crops with 3 channels but .* holds 32×32 crops"):
        check_result_for_store(result, grey)
    check_result_for_store(result, first)
    source, _ = manifest(root, names, "several named channels")
    picked = ticlust.extract(source, tmp_path / "picked.zarr", crop_size=32, channel=NAMES, progress=False)
    check_result_for_store(result, picked)              # every channel named in the manifest's order: the same crops
    swapped = ticlust.extract(source, tmp_path / "swapped.zarr", crop_size=32, channel=NAMES[::-1], progress=False)
    with pytest.raises(ticlust.InputError, match="holds Mito, ER, DNA"):
        check_result_for_store(result, swapped)


def test_a_grey_store_takes_a_result_of_another_grey_store_of_the_same_channel(fields, tmp_path):
    """One named channel and a plain grey image are both grey crops: a result moves between them when the names
    agree or one side does not name its channel."""
    root, names = fields
    one = ticlust.extract(manifest(root, names, "one named channel")[0], tmp_path / "one.zarr", crop_size=32,
                          progress=False)
    loaddata = ticlust.extract(manifest(root, names, "LoadData, one channel")[0], tmp_path / "ld.zarr", crop_size=32,
                               progress=False)
    assert store_item(one) == store_item(loaddata) == (32, 32)
    result, _ = fit_store(one, "kmeans", k=2, seed=0, progress=False)
    assert predict_store(result, loaddata, progress=False).objects == len(loaddata)
