"""Fields in files bioio reads (OME-TIFF written here by tifffile; never a download): scenes are fields, channels
have names, Z is one plane or a projection, and a format without its plugin is one sentence naming the extra."""
import numpy as np
import pandas as pd
import pytest
import tifffile

import ticlust
from ticlust.cli import main
from ticlust.datasets.nuclei import nuclei_field
from ticlust.errors import InputError
from ticlust.io import readers
from ticlust.plate.view import field_picture
from ticlust.plate.run import fit_store, predict_store

NAMES = ["DNA", "ER", "Mito"]
FILES = ["image", "labels", "scene"]


def scenes(n=2):
    """n fields of three channels (C×Y×X uint16) and their labels."""
    out = []
    for s in range(n):
        field = nuclei_field(n=8, shape=(88, 104), seed=20 + s)
        rng = np.random.default_rng(s)
        image = np.stack([field.image, field.image // 3 + 7,
                          rng.integers(0, 900, field.image.shape).astype(np.uint16)])
        out.append((image, field.labels))
    return out


def write_ome(path, made, axes="CYX"):
    with tifffile.TiffWriter(path, ome=True) as tw:
        for image, _ in made:
            tw.write(image, photometric="minisblack", metadata={"axes": axes, "Channel": {"Name": NAMES}})


def same_store(a, b):
    assert (a.size, a.dtype, a.channels) == (b.size, b.dtype, b.channels)
    assert np.array_equal(np.asarray(a.crops[:]), np.asarray(b.crops[:]))
    assert np.array_equal(np.asarray(a.masks[:]), np.asarray(b.masks[:]))
    pd.testing.assert_frame_equal(a.table.drop(columns=[c for c in FILES if c in a.table]),
                                  b.table.drop(columns=[c for c in FILES if c in b.table]))


def test_an_ome_tiff_of_scenes_extracts_as_the_same_pixels_given_as_tiffs(tmp_path):
    made = scenes()
    (tmp_path / "ome").mkdir()
    (tmp_path / "tif").mkdir()
    write_ome(tmp_path / "ome" / "plate.ome.tif", made)
    for s, (image, labels) in enumerate(made):
        tifffile.imwrite(tmp_path / "ome" / f"plate_s{s}_cp_masks.tif", labels)
        tifffile.imwrite(tmp_path / "tif" / f"plate_s{s}.tif", image, photometric="minisblack")
        tifffile.imwrite(tmp_path / "tif" / f"plate_s{s}_cp_masks.tif", labels)
    tiffs = ticlust.extract(tmp_path / "tif", tmp_path / "t.zarr")
    folder = ticlust.extract(tmp_path / "ome", tmp_path / "o.zarr")
    assert folder.channels == 3 and list(folder.fields["scene"]) == [0, 1]
    same_store(folder, tiffs)
    alone = ticlust.extract(tmp_path / "ome" / "plate.ome.tif", tmp_path / "a.zarr")    # the file as INPUT
    same_store(alone, tiffs)
    pd.DataFrame({"image": ["ome/plate.ome.tif"] * 2, "labels": [f"ome/plate_s{s}_cp_masks.tif" for s in (1, 0)],
                  "scene": ["Image:1", 0]}).to_csv(tmp_path / "m.csv", index=False)
    listed = ticlust.extract(tmp_path / "m.csv", tmp_path / "m.zarr")      # scenes by name or index, any order
    assert list(listed.fields["scene"]) == ["Image:1", "0"]
    rows = listed.table[listed.table["field_index"] == 1]
    assert np.array_equal(np.asarray(listed.crops[rows.index.to_numpy()]),
                          np.asarray(tiffs.crops[np.flatnonzero(tiffs.table["field_index"] == 0)]))
    picture = field_picture(folder, 1)
    assert np.array_equal(picture.image, made[1][0])


def test_channels_of_a_bioio_file_are_picked_by_name(tmp_path):
    made = scenes(1)
    write_ome(tmp_path / "one.ome.tif", made)
    tifffile.imwrite(tmp_path / "one_masks.tif", made[0][1])
    full = np.asarray(ticlust.extract(tmp_path, tmp_path / "all.zarr").crops[:])
    mito = ticlust.extract(tmp_path, tmp_path / "mito.zarr", channel="Mito")
    assert mito.channels is None and np.array_equal(np.asarray(mito.crops[:]), full[..., 2])
    two = ticlust.extract(tmp_path, tmp_path / "two.zarr", channel=["ER", 0])
    assert np.array_equal(np.asarray(two.crops[:]), full[..., [1, 0]])
    with pytest.raises(InputError, match="has no channel 'GFP': its channels are DNA, ER"):
        ticlust.extract(tmp_path, tmp_path / "gfp.zarr", channel="GFP")
    assert not (tmp_path / "gfp.zarr").exists()


def test_z_planes_are_refused_until_one_plane_or_the_projection_is_chosen(tmp_path, capsys):
    field = nuclei_field(n=8, shape=(96, 96), seed=4)
    stack = np.stack([field.image // (z + 1) for z in range(3)])[:, None].repeat(2, axis=1)   # Z, C, Y, X
    stack[2, 1] = field.image                                     # the brightest plane of channel 1 is the last
    tifffile.imwrite(tmp_path / "z.ome.tif", stack, ome=True, metadata={"axes": "ZCYX", "Channel": {"Name": ["a", "b"]}})
    tifffile.imwrite(tmp_path / "z_masks.tif", field.labels)
    with pytest.raises(InputError, match=r"has 3 Z planes and ticlust cuts 2-D objects: pick one with --z N .* --z max"):
        ticlust.extract(tmp_path, tmp_path / "s.zarr")
    assert not (tmp_path / "s.zarr").exists()
    one = ticlust.extract(tmp_path, tmp_path / "one.zarr", z=1, channel="a")
    (tmp_path / "ref").mkdir()
    tifffile.imwrite(tmp_path / "ref" / "f.tif", stack[1, 0])
    tifffile.imwrite(tmp_path / "ref" / "f_masks.tif", field.labels)
    assert np.array_equal(np.asarray(one.crops[:]), np.asarray(ticlust.extract(tmp_path / "ref", tmp_path / "r.zarr").crops[:]))
    assert main(["extract", str(tmp_path), "-o", str(tmp_path / "max.zarr"), "--z", "max", "--quiet"]) == 0
    top = ticlust.open_objects(tmp_path / "max.zarr")
    assert top.options["z"] == "max" and top.channels == 2
    (tmp_path / "ref" / "f.tif").unlink()
    tifffile.imwrite(tmp_path / "ref" / "f.tif", np.moveaxis(stack.max(axis=0), 0, -1))
    assert np.array_equal(np.asarray(top.crops[:]), np.asarray(ticlust.extract(tmp_path / "ref", tmp_path / "rm.zarr").crops[:]))
    with pytest.raises(InputError, match="has 3 Z planes: give --z from 0 to 2"):
        ticlust.extract(tmp_path, tmp_path / "far.zarr", z=5)
    fitted, _ = fit_store(one, "kmeans", k=2, seed=0)
    other = ticlust.extract(tmp_path, tmp_path / "z2.zarr", z=2, channel="a")
    with pytest.raises(InputError, match=r"made with z=1 but .* was made with z=2"):
        predict_store(fitted, other)


def test_a_format_without_its_plugin_is_one_sentence_naming_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(readers.FORMAT_PLUGINS, ".nd2", "bioio_nd2_not_installed_here")
    (tmp_path / "well.nd2").write_bytes(b"not really an nd2")
    tifffile.imwrite(tmp_path / "well_masks.tif", np.zeros((8, 8), np.int32))
    for given in (tmp_path, tmp_path / "well.nd2"):
        with pytest.raises(InputError, match=r"needs the bioio plugin bioio-nd2-not-installed-here, which is not "
                           r"installed: install the vendor formats with pip install \"napari-ticlust\[formats\]\""):
            ticlust.extract(given, tmp_path / "s.zarr")
        assert not (tmp_path / "s.zarr").exists()
    (tmp_path / "odd.xyz").write_bytes(b"?")
    pd.DataFrame({"image": ["odd.xyz"], "labels": ["well_masks.tif"]}).to_csv(tmp_path / "m.csv", index=False)
    with pytest.raises(InputError, match=r"No installed bioio plugin reads odd.xyz \(.xyz\).*napari-ticlust\[formats\]"):
        ticlust.extract(tmp_path / "m.csv", tmp_path / "s.zarr")
    assert not (tmp_path / "s.zarr").exists()


def test_a_file_of_several_scenes_takes_no_single_mask(tmp_path):
    made = scenes()
    write_ome(tmp_path / "p.ome.tif", made)
    tifffile.imwrite(tmp_path / "m.tif", made[0][1])
    with pytest.raises(InputError, match="p.ome.tif has 2 scenes, each a field with its own mask: leave --labels out"):
        ticlust.extract(tmp_path / "p.ome.tif", tmp_path / "s.zarr", labels=tmp_path / "m.tif")
    with pytest.raises(InputError, match="No scene of p.ome.tif has a mask: name scene k's mask p_s<k>_cp_masks.tif"):
        ticlust.extract(tmp_path / "p.ome.tif", tmp_path / "s.zarr")
    pd.DataFrame({"image": ["p.ome.tif"], "labels": ["m.tif"]}).to_csv(tmp_path / "m.csv", index=False)
    with pytest.raises(InputError, match="has 2 scenes: add a scene column"):
        ticlust.extract(tmp_path / "m.csv", tmp_path / "s.zarr")
    assert not (tmp_path / "s.zarr").exists()


def test_a_scene_without_its_mask_fails_alone_naming_the_mask_it_needs(tmp_path):
    made = scenes()
    write_ome(tmp_path / "p.ome.tif", made)
    tifffile.imwrite(tmp_path / "p_s1_masks.tif", made[1][1])
    with pytest.warns(UserWarning, match="1 of 2 fields"):
        store = ticlust.extract(tmp_path, tmp_path / "s.zarr")
    assert list(store.failed["scene"]) == [0]
    assert store.failed["error"].iloc[0] == ("No mask for p.ome.tif (scene 0): name it p_s0_cp_masks.tif, "
                                             "p_s0_masks.tif or p_s0.labels.tif (any image type) beside it, give "
                                             "its path in a manifest's labels column, or let ticlust find the nuclei "
                                             "(--segment nuclei).")
    assert set(store.table["scene"]) == {1}


class _DigitScenes:
    """A real bioio image of a file on disk whose scenes are called "1" and "0": OME-TIFF's scene names are its
    image IDs, which ome-types rewrites to ``Image:<n>``, so the names of a vendor file that numbers its
    positions are put on here; every pixel still comes from the file."""

    scenes = ("1", "0")

    def __init__(self, image):
        self._image = image

    def __getattr__(self, name):
        return getattr(self._image, name)


def test_scene_cells_that_name_a_scene_pick_it_when_cut_and_when_opened_again(tmp_path, monkeypatch):
    from ticlust.plate.manifest import scene_index

    assert scene_index("0", ("1", "0")) == 1 and scene_index(0, ("1", "0")) == 1 and scene_index(1.0, ("1", "0")) == 0
    assert scene_index("1", ("Image:0", "Image:1")) == 1 and scene_index("Image:0", ("Image:0", "Image:1")) == 0
    assert scene_index("2", ("1", "0")) is None and scene_index("x", ("1", "0")) is None
    real = readers.open_bioimage
    monkeypatch.setattr(readers, "open_bioimage", lambda path: _DigitScenes(real(path)))
    made = scenes()
    write_ome(tmp_path / "p.ome.tif", made)
    for s, (_, labels) in enumerate(made):
        tifffile.imwrite(tmp_path / f"p_s{s}_cp_masks.tif", labels)
    pd.DataFrame({"image": ["p.ome.tif"] * 2, "labels": ["p_s1_cp_masks.tif", "p_s0_cp_masks.tif"],
                  "scene": [0, 1]}).to_csv(tmp_path / "m.csv", index=False)    # the scene called "0" is the second
    listed = ticlust.extract(tmp_path / "m.csv", tmp_path / "m.zarr")
    folder = ticlust.extract(tmp_path, tmp_path / "f.zarr")        # the folder's fields: scene by index
    assert list(folder.fields["scene"]) == [0, 1]
    for field, scene in ((0, 1), (1, 0)):
        assert np.array_equal(field_picture(listed, field).image, made[scene][0])      # opened again: the same scene
        assert np.array_equal(field_picture(folder, scene).image, made[scene][0])
        assert np.array_equal(np.asarray(listed.crops[np.flatnonzero(listed.table["field_index"] == field)]),
                              np.asarray(folder.crops[np.flatnonzero(folder.table["field_index"] == scene)]))


def test_channel_files_of_several_scenes_are_read_at_each_rows_scene(tmp_path):
    """A manifest whose channel columns name OME-TIFFs of two scenes each (one channel per file): every row is cut
    from its own scene and its picture shows that scene (both read the first scene before), the same pixels as the
    scenes given as plain per-channel TIFFs."""
    made = scenes()
    for c, name in enumerate(NAMES[:2]):
        with tifffile.TiffWriter(tmp_path / f"plate_{name}.ome.tif", ome=True) as tw:
            for image, _ in made:
                tw.write(image[c], photometric="minisblack", metadata={"axes": "YX", "Channel": {"Name": [name]}})
    for s, (image, labels) in enumerate(made):
        tifffile.imwrite(tmp_path / f"s{s}_masks.tif", labels)
        for c, name in enumerate(NAMES[:2]):
            tifffile.imwrite(tmp_path / f"s{s}_{name}.tif", image[c])
    order = (1, 0)
    pd.DataFrame({"image_DNA": ["plate_DNA.ome.tif"] * 2, "image_ER": ["plate_ER.ome.tif"] * 2,
                  "labels": [f"s{s}_masks.tif" for s in order], "scene": list(order)}).to_csv(tmp_path / "m.csv", index=False)
    pd.DataFrame({"image_DNA": [f"s{s}_DNA.tif" for s in order], "image_ER": [f"s{s}_ER.tif" for s in order],
                  "labels": [f"s{s}_masks.tif" for s in order]}).to_csv(tmp_path / "t.csv", index=False)
    scened = ticlust.extract(tmp_path / "m.csv", tmp_path / "m.zarr")
    plain = ticlust.extract(tmp_path / "t.csv", tmp_path / "t.zarr")
    assert scened.channels == 2 and len(scened) == len(plain) > 0
    assert np.array_equal(np.asarray(scened.crops[:]), np.asarray(plain.crops[:]))
    picture = field_picture(scened, 0)                                  # the first row: scene 1
    assert np.array_equal(np.asarray(picture.image), made[1][0][:2])     # channels first, as napari shows them


def test_a_channel_column_naming_a_file_of_several_channels_is_one_sentence(tmp_path):
    made = scenes(1)
    write_ome(tmp_path / "all.ome.tif", made)
    tifffile.imwrite(tmp_path / "m_masks.tif", made[0][1])
    pd.DataFrame({"image_DNA": ["all.ome.tif"], "labels": ["m_masks.tif"]}).to_csv(tmp_path / "m.csv", index=False)
    with pytest.raises(InputError, match=r"all.ome.tif, the DNA channel's file, is 88×104×3, not one grey plane"):
        ticlust.extract(tmp_path / "m.csv", tmp_path / "m.zarr")
