"""Label images as other segmenters write them are read as they come and paired with their fields by name:
Cellpose's NAME_seg.npy (its 'masks') and NAME_cp_masks.png, StarDist's (and others') NAME_labels.tif."""
import numpy as np
import pytest
import tifffile
from PIL import Image

import ticlust
from ticlust.datasets.nuclei import nuclei_field
from ticlust.errors import InputError
from ticlust.io.readers import read_labels
from ticlust.objects.crops import field_objects


def cellpose_seg(path, masks):
    """A file laid out as Cellpose's GUI saves it: np.save of a dict of arrays, numbers, lists and text."""
    np.save(path, {"masks": masks, "outlines": np.zeros_like(masks), "flows": [np.zeros((4, 4, 3), np.uint8)],
                   "est_diam": np.float64(17.2), "filename": "field.tif", "chan_choose": [0, 0],
                   "ismanual": np.zeros(3, bool), "normalize_params": {"percentile": [1.0, 99.0], "lowhigh": None}},
            allow_pickle=True)


def test_read_labels_takes_each_file_as_its_segmenter_writes_it(tmp_path):
    masks = np.arange(30, dtype=np.uint16).reshape(5, 6) % 7
    cellpose_seg(tmp_path / "a_seg.npy", masks)
    Image.fromarray(masks).save(tmp_path / "a_cp_masks.png")          # 16-bit PNG, as Cellpose --save_png
    tifffile.imwrite(tmp_path / "a_labels.tif", masks.astype(np.int32))
    for name in ("a_seg.npy", "a_cp_masks.png", "a_labels.tif"):
        assert np.array_equal(read_labels(tmp_path / name), masks), name
    assert ticlust.read_labels is read_labels


def test_a_seg_file_that_names_anything_but_arrays_is_refused_unread(tmp_path):
    class Payload:
        def __reduce__(self):
            return (open, (str(tmp_path / "made_by_the_file"), "w"))

    np.save(tmp_path / "bad_seg.npy", np.array({"masks": Payload()}, dtype=object), allow_pickle=True)
    with pytest.raises(InputError, match="could not be read as Cellpose's _seg.npy .*io.open, which is not a "
                                         "NumPy array's part"):
        read_labels(tmp_path / "bad_seg.npy")
    assert not (tmp_path / "made_by_the_file").exists()
    np.save(tmp_path / "other_seg.npy", {"outlines": np.zeros((2, 2))}, allow_pickle=True)
    with pytest.raises(InputError, match="holds no 'masks' array"):
        read_labels(tmp_path / "other_seg.npy")


def test_a_folder_pairs_each_segmenters_files_by_name(tmp_path):
    fields = [nuclei_field(n=30, shape=(200, 200), seed=i) for i in range(3)]
    for name, f in zip("abc", fields):
        tifffile.imwrite(tmp_path / f"{name}.tif", f.image)
    cellpose_seg(tmp_path / "a_seg.npy", fields[0].labels.astype(np.uint16))          # Cellpose's GUI alone
    cellpose_seg(tmp_path / "b_seg.npy", np.zeros((200, 200), np.uint16))            # beside its PNG: the PNG
    Image.fromarray(fields[1].labels.astype(np.uint16)).save(tmp_path / "b_cp_masks.png")
    tifffile.imwrite(tmp_path / "c_labels.tif", fields[2].labels)                      # StarDist
    store = ticlust.extract(tmp_path, tmp_path / "s.zarr")
    assert list(store.fields.labels) == ["a_seg.npy", "b_cp_masks.png", "c_labels.tif"] and len(store.failed) == 0
    for i, f in enumerate(fields):                       # each field's objects, cut as from its true masks
        ref, _, table, _ = field_objects(f.image, f.labels, store.size, orient=True, normalize=True)
        rows = np.flatnonzero(store.table.field_index == i)
        assert list(store.table.label[rows]) == list(table["label"]) and np.allclose(store.crops[rows], ref)
