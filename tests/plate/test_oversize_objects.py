"""Real segmentations never lose a field: an object larger than the crop is left out and listed (or zoomed down),
an object of one pixel is listed, touching objects are cut as any other, and the field's other objects are kept;
the default crop follows a robust statistic of the objects, not the largest one."""
import numpy as np
import pytest
import tifffile

import ticlust
from ticlust.datasets.nuclei import nuclei_field
from ticlust.errors import InputError
from ticlust.objects.crops import plate_size


@pytest.fixture
def clumpy(tmp_path):
    """Three fields of 40 generated nuclei; field 0 also holds a clump (label 999, 44×44), an object of one pixel
    (998) and two objects that touch (996, 997). Returns the folder and field 0's labels."""
    folder = tmp_path / "plate"
    folder.mkdir()
    for i in range(3):
        f = nuclei_field(n=40, shape=(256, 256), seed=i)
        image, labels = f.image.copy(), f.labels.copy()
        if i == 0:
            labels[100:144, 100:144] = 999
            image[100:144, 100:144] = 3000
            free = np.argwhere(ndi_free(labels))[0]
            labels[tuple(free)] = 998
            labels[200:210, 20:30], labels[200:210, 30:40] = 996, 997
            first = labels
        tifffile.imwrite(folder / f"f{i}.tif", image)
        tifffile.imwrite(folder / f"f{i}_masks.tif", labels)
    return folder, first


def ndi_free(labels):
    """Pixels whose 7×7 neighbourhood holds no object, away from the border and from rows 200-210."""
    from scipy import ndimage

    free = ~ndimage.maximum_filter(labels > 0, size=7)
    free[:10], free[-10:], free[:, :10], free[:, -10:], free[190:220] = False, False, False, False, False
    return free


def field_labels(labels):
    """The ids of a field's objects away from its border."""
    edge = set(np.unique(np.concatenate([labels[0], labels[-1], labels[:, 0], labels[:, -1]])))
    return set(np.unique(labels)) - edge - {0}


def test_an_oversized_object_leaves_its_fields_other_objects_in_the_store(clumpy, tmp_path):
    folder, first = clumpy
    with pytest.warns(UserWarning, match=r"^2 objects were left out of 1 field, listed in the store's skipped table: "
                                         r"1 larger than the \d+×\d+ crop, 1 one pixel \(--oversize rescale"):
        store = ticlust.extract(folder, tmp_path / "s.zarr")
    assert len(store.failed) == 0 and store.size <= 36        # turned to its axis, the clump needs 62: not the crop
    rows = store.table[store.table.field_index == 0]
    assert set(rows.label) == field_labels(first) - {998, 999} and {996, 997} <= set(rows.label)
    skipped = store.skipped.set_index("label")
    assert list(store.skipped.label) == [998, 999] and set(store.skipped.field_index) == {0}
    assert skipped.loc[999, "reason"] == f"larger than the {store.size}×{store.size} crop"
    assert skipped.loc[999, "needs"] == 62 and skipped.loc[998, "reason"] == "one pixel"
    assert skipped.loc[999, "image"] == "f0.tif" and skipped.loc[999, "area"] == 44 * 44


def test_rescale_keeps_the_oversized_object_zoomed_and_a_given_crop_size_wins(clumpy, tmp_path):
    folder, first = clumpy
    with pytest.warns(UserWarning, match="1 objects were left out of 1 field.*: 1 one pixel$"):
        store = ticlust.extract(folder, tmp_path / "r.zarr", oversize="rescale")
    row = store.table[(store.table.field_index == 0) & (store.table.label == 999)]
    assert len(row) == 1 and 0 < row.scale.iloc[0] < 1 and store.options["oversize"] == "rescale"
    assert (store.table.scale[store.table.label != 999] == 1).all()
    crop = store.crops[int(row.index[0])]
    assert crop.shape == (store.size, store.size) and store.masks[int(row.index[0])].mean() > 0.4   # a square turned, its corners at the edge
    wide = ticlust.extract(folder, tmp_path / "w.zarr", crop_size=64)
    assert wide.size == 64 and 999 in set(wide.table.label) and list(wide.skipped.label) == [998]
    with pytest.raises(InputError, match="oversize='crop' is not known: choose 'skip'"):
        ticlust.extract(folder, tmp_path / "x.zarr", oversize="crop")


def test_the_default_crop_is_a_robust_statistic():
    needs = np.r_[np.full(300, 26.0), np.linspace(20, 30, 50), 120.0]           # one clump among 351 nuclei
    assert plate_size(needs, rescale=False) == 36                                # 30 × 1.1 → 36, not 120
    assert plate_size(np.array([9.0, 10.0]), rescale=False) == 12                # never above the largest, in fours
    assert plate_size(np.array([10.0, 20.0, 30.0]), rescale=True) == 20          # rescale: the median


def test_a_mask_that_is_an_image_or_a_crop_far_too_small_still_fails_its_field(clumpy, tmp_path):
    folder, _ = clumpy
    tifffile.imwrite(folder / "f1_masks.tif", tifffile.imread(folder / "f1.tif"))      # an image as its own mask
    with pytest.warns(UserWarning, match="1 of 3 fields were left out"):
        store = ticlust.extract(folder, tmp_path / "s.zarr")
    assert store.failed.error.iloc[0].startswith("The mask is no label image: ") and list(store.failed.image) == ["f1.tif"]
    with pytest.raises(InputError, match=r"None of the 3 fields can be cut; the first, f0.tif: \d+ of the \d+ objects "
                                         r"are larger than the 8×8 crop .*too many to leave out"):
        ticlust.extract(folder, tmp_path / "t.zarr", crop_size=8)
