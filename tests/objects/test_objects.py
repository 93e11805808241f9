"""Objects from a segmentation (issue 14): objects_from_labels, shapes_from_labels, the nuclei field,
and `ticlust fit FIELD --labels MASK` on the command line."""
import csv
import subprocess
import sys
import tracemalloc

import numpy as np
import pytest

import ticlust
from ticlust.errors import InputError
from ticlust.transforms.procrustes import align_to
from ticlust.datasets.nuclei import nuclei_field
from ticlust.objects.crops import TABLE_COLUMNS, labels_fit, objects_from_labels, shapes_from_labels


def disc(labels, cy, cx, r, value):
    yy, xx = np.mgrid[:labels.shape[0], :labels.shape[1]]
    labels[(yy - cy) ** 2 + (xx - cx) ** 2 <= r * r] = value


def small_field(dtype=np.uint16):
    """Three objects with non-consecutive ids (one a rectangle beside a disc), one touching the border."""
    labels = np.zeros((40, 50), np.int32)
    disc(labels, 12, 12, 4, 300)
    labels[25:30, 30:39] = 7            # rectangle 5×9, centroid (27, 34)
    disc(labels, 27, 41, 2, 42)         # right next to the rectangle (inside its crop window)
    disc(labels, 20, 46, 2, 55)         # near the right edge, not touching it
    labels[0:3, 20:24] = 9              # touches the top border
    rng = np.random.default_rng(0)
    image = (rng.random((40, 50)) * 50 + 10).astype(dtype)
    image[labels > 0] += dtype(100) if np.dtype(dtype).kind != "f" else 100.0
    return image, labels


# ---- objects_from_labels -------------------------------------------------------------------------
def test_table_and_crops_by_hand():
    image, labels = small_field()
    before = (image.copy(), labels.copy())
    stack, table = objects_from_labels(image, labels, size=16)
    assert list(table) == list(TABLE_COLUMNS)
    assert table["label"].tolist() == [7, 42, 55, 300]                 # ascending ids, border object 9 left out
    assert table["frame"].tolist() == [0, 0, 0, 0]
    assert stack.shape == (4, 16, 16) and stack.dtype == np.uint16
    i = 0                                                              # the rectangle
    assert table["centroid_y"][i] == pytest.approx(27.0) and table["centroid_x"][i] == pytest.approx(34.0)
    assert [table[c][i] for c in ("bbox_y0", "bbox_x0", "bbox_y1", "bbox_x1")] == [25, 30, 30, 39]
    assert table["area"][i] == 45 and not table["touches_border"].any()
    # centred: crop pixel (8, 8) is field pixel (27, 34); object pixels copied, everything else 0
    crop = stack[i]
    window = image[27 - 8:27 + 8, 34 - 8:34 + 8]
    inside = labels[27 - 8:27 + 8, 34 - 8:34 + 8] == 7
    assert np.array_equal(crop[inside], window[inside]) and (crop[~inside] == 0).all()
    assert (labels[27 - 8:27 + 8, 34 - 8:34 + 8] == 42).any()          # the neighbour was in the window, masked out
    ctx, _ = objects_from_labels(image, labels, size=16, keep_context=True)
    assert np.array_equal(ctx[i], window)
    # the disc of radius 2 at (20, 46): its window runs past the right edge (x 38..53 of 0..49) -> fill there
    assert (ctx[2][:, 12:] == 0).all() and np.array_equal(ctx[2][:, :12], image[12:28, 38:50])
    assert np.array_equal(image, before[0]) and np.array_equal(labels, before[1])   # inputs untouched
    again, table2 = objects_from_labels(image, labels, size=16)
    assert np.array_equal(again, stack) and all(np.array_equal(table[c], table2[c]) for c in table)


def test_border_objects_kept_on_request_and_default_size():
    image, labels = small_field()
    stack, table = objects_from_labels(image, labels, keep_border=True)
    assert table["label"].tolist() == [7, 9, 42, 55, 300]
    assert table["touches_border"].tolist() == [False, True, False, False, False]
    # default size: multiple of 4 that holds the widest object (rectangle 9 wide -> 2*5 + 2 margin = 12)
    assert stack.shape[1] == stack.shape[2] == 12
    for k, obj in enumerate(table["label"]):
        assert (stack[k] > 0).sum() == (labels == obj).sum()          # every object pixel made it in


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.float32, np.float64])
def test_dtypes_are_kept(dtype):
    image, labels = small_field(dtype)
    stack, _ = objects_from_labels(image, labels, size=16)
    assert stack.dtype == dtype
    assert stack.max() == image[(labels > 0) & (labels != 9)].max()


def test_channel_layouts_and_time_series():
    image, labels = small_field(np.float32)
    labels = np.where(labels == 9, 0, labels)        # the border object would not touch the border when shifted
    grey, table = objects_from_labels(image, labels, size=16)
    yxc = np.stack([image, 2 * image, -image], axis=-1)
    cyx = np.moveaxis(yxc, -1, 0).copy()
    a, _ = objects_from_labels(yxc, labels, size=16)
    b, _ = objects_from_labels(cyx, labels, size=16)
    assert a.shape == (4, 16, 16, 3) and np.array_equal(a, b)
    assert np.array_equal(a[..., 1], 2 * grey)
    two, _ = objects_from_labels(cyx[:2], labels, size=16)          # any number of channels
    assert two.shape == (4, 16, 16, 2)
    one, _ = objects_from_labels(cyx, labels, size=16, channels=1)  # an int picks one channel, no channel axis
    assert np.array_equal(one, 2 * grey)
    # time series: frame 1 is frame 0 shifted down by 3 rows with objects renumbered
    labels_t = np.stack([labels, np.roll(np.where(labels > 0, labels + 1000, 0), 3, axis=0)])
    image_t = np.stack([image, np.roll(image, 3, axis=0)])
    ts, tt = objects_from_labels(image_t, labels_t, size=16)
    assert tt["frame"].tolist() == [0, 0, 0, 0, 1, 1, 1, 1]
    assert tt["label"].tolist() == [7, 42, 55, 300, 1007, 1042, 1055, 1300]
    assert tt["centroid_y"][4] == pytest.approx(table["centroid_y"][0] + 3)
    assert np.array_equal(ts[4:], ts[:4])
    tyxc = np.stack([yxc, np.roll(yxc, 3, axis=0)])
    tcyx = np.moveaxis(tyxc, -1, 1).copy()
    s1, _ = objects_from_labels(tyxc, labels_t, size=16)
    s2, _ = objects_from_labels(tcyx, labels_t, size=16)
    assert s1.shape == (8, 16, 16, 3) and np.array_equal(s1, s2)
    # labels_fit (the napari widget's choice of Labels layers) accepts exactly these layouts
    for img, lab in ((image, labels), (yxc, labels), (cyx, labels), (cyx[:2], labels), (tcyx, labels_t)):
        assert labels_fit(img, lab)
    for img, lab in ((image, labels[:30]), (image[:, :40], labels), (yxc, labels.T), (image, labels_t),
                     (np.zeros((2, 3, 40, 50)), labels)):
        assert not labels_fit(img, lab)


def test_memmap_and_dask_inputs(tmp_path):
    da = pytest.importorskip("dask.array")
    image, labels = small_field()
    ref, ref_table = objects_from_labels(image, labels, size=16)
    np.save(tmp_path / "im.npy", image)
    mm = np.load(tmp_path / "im.npy", mmap_mode="r")
    for im, lab in ((mm, labels), (da.from_array(image, chunks=(16, 16)), da.from_array(labels, chunks=(16, 16)))):
        stack, table = objects_from_labels(im, lab, size=16)
        assert np.array_equal(stack, ref) and np.array_equal(table["centroid_x"], ref_table["centroid_x"])
    marks, _ = shapes_from_labels(da.from_array(labels, chunks=(16, 16)), n_points=12)
    assert np.array_equal(marks, shapes_from_labels(labels, n_points=12)[0])


def test_channel_axis_settles_an_ambiguous_layout():
    labels = np.zeros((3, 3), np.int32)
    labels[1, 1] = 1
    labels[0, 0] = 2
    image = np.arange(27, dtype=np.float32).reshape(3, 3, 3)     # C == Y == X: both layouts fit
    last, _ = objects_from_labels(image, labels, size=4, keep_border=True)
    first, _ = objects_from_labels(image, labels, size=4, keep_border=True, channel_axis=0)
    assert last[0, 2, 2].tolist() == image[1, 1].tolist()           # default: channels last
    assert first[0, 2, 2].tolist() == image[:, 1, 1].tolist()
    with pytest.raises(InputError, match="channel_axis"):
        objects_from_labels(image, labels, size=4, channel_axis=1)


def test_rescale_zooms_each_object_to_the_crop():
    labels = np.zeros((120, 120), np.int32)
    disc(labels, 30, 30, 8, 1)
    disc(labels, 80, 80, 20, 2)
    image = np.where(labels > 0, 1000, 5).astype(np.uint16)
    stack, table = objects_from_labels(image, labels, size=32, rescale=True, margin=2)
    # the outline (farthest pixel centre 8 and 20 px out, + 0.5) lands margin px inside the edge: 14 px out
    assert table["scale"].tolist() == pytest.approx([14 / 8.5, 14 / 20.5])
    areas = (stack > 0).sum(axis=(1, 2))
    assert abs(int(areas[0]) - int(areas[1])) < 0.12 * areas.mean()  # same size after zooming (pixelated r=8 disc: 0.9)
    for crop in stack:                                                 # the margin stays free
        assert not crop[:2].any() and not crop[-2:].any() and not crop[:, :2].any() and not crop[:, -2:].any()
        assert crop.max() == 1000 and crop[crop > 0].min() >= 5       # bilinear: edge pixels mix in background
    with pytest.raises(InputError, match="larger than the 32×32 crop"):
        objects_from_labels(image, labels, size=32)                    # without rescale the big disc does not fit


def test_orient_turns_the_major_axis_along_x():
    labels = np.zeros((160, 160), np.int32)
    angles = [0.3, 1.2, 2.5, 4.0]
    for i, a in enumerate(angles):
        teardrop(labels, 40 + 80 * (i // 2), 40 + 80 * (i % 2), a, i + 1)
    image = np.where(labels > 0, 500, 3).astype(np.float32)
    stack, table = objects_from_labels(image, labels, orient=True)
    got = np.angle(np.exp(1j * (table["angle"] - np.asarray(angles))))    # the blob's own axis is off u by a constant
    assert np.abs(got - got.mean()).max() < 0.03 and abs(got.mean()) < 0.3    # each turn recovered
    masks = stack > 0
    turned = (masks ^ masks[0]).sum(axis=(1, 2))[1:]
    assert turned.max() < 0.1 * masks[0].sum()                        # all turned alike, up to pixelation
    cols = np.nonzero(masks[0])[1]
    half = (stack.shape[2] - 1) / 2
    assert (cols - half).max() > -(cols - half).min() + 2             # the longer tail points to +x
    assert np.array_equal(table["scale"], np.ones(4))
    plain, ptable = objects_from_labels(image, labels)
    assert (ptable["angle"] == 0).all() and (masks.sum(axis=(1, 2)) - (plain > 0).sum(axis=(1, 2))).std() < 10
    unturned = ((plain > 0) ^ (plain[0] > 0)).sum(axis=(1, 2))[1:]
    assert (3 * turned < unturned).all()


def test_normalize_divides_each_object_by_its_mean():
    labels = np.zeros((60, 60), np.int32)
    disc(labels, 15, 15, 6, 1)
    disc(labels, 40, 40, 6, 2)
    rng = np.random.default_rng(1)
    texture = rng.uniform(0.5, 1.5, (13, 13))
    image = np.full((60, 60), 7, np.uint16)
    image[9:22, 9:22] = np.rint(100 * texture)
    image[34:47, 34:47] = np.rint(300 * texture)                  # the same object, three times as bright
    for kw in ({}, {"orient": True, "rescale": True}, {"keep_context": True}):
        stack, _ = objects_from_labels(image, labels, normalize=True, **kw)
        obj = np.asarray([objects_from_labels(np.ones_like(image), labels, **{**kw, "keep_context": False})[0] > 0])[0]
        assert stack.dtype == np.float32
        assert stack[0][obj[0]].mean() == pytest.approx(1.0, rel=1e-5) and stack[1][obj[1]].mean() == pytest.approx(1.0, rel=1e-5)
        assert np.abs(stack[0][obj[0]] - stack[1][obj[1]]).max() < 0.02


def test_huge_sparse_label_ids():
    image, labels = small_field()
    big = np.where(labels > 0, labels.astype(np.int64) * 10_000_000, 0)
    stack, table = objects_from_labels(image, big, size=16)
    ref, ref_table = objects_from_labels(image, labels, size=16)
    assert table["label"].tolist() == [70_000_000, 420_000_000, 550_000_000, 3_000_000_000]
    assert np.array_equal(stack, ref) and np.array_equal(table["area"], ref_table["area"])


def test_boolean_labels_are_one_object():
    image, labels = small_field()
    two = (labels == 7) | (labels == 300)
    with pytest.raises(InputError, match="1 object"):
        objects_from_labels(image, two)


@pytest.mark.parametrize("make, fragment", [
    (lambda im, lab: (im, lab[:, :-1]), "labels have shape"),
    (lambda im, lab: (im, np.zeros_like(lab)), "no objects"),
    (lambda im, lab: (im, np.where(lab == 7, 7, 0)), "1 object"),
    (lambda im, lab: (im, np.where((lab == 7) | (lab == 9), lab, 0)), "touches the image border"),
    (lambda im, lab: (im, lab.astype(np.float32)), "floating point"),
    (lambda im, lab: (im, -lab), "negative id"),
    (lambda im, lab: (im[None, None], lab), "labels have shape"),
    (lambda im, lab: (im.astype(str), lab), "dtype"),
    (lambda im, lab: ([[1, 2]], lab), "not an array"),
])
def test_bad_input_one_sentence(make, fragment):
    image, labels = small_field()
    im, lab = make(image, labels)
    with pytest.raises(InputError, match=fragment) as err:
        objects_from_labels(im, lab)
    assert str(err.value).endswith(".") and str(err.value).count(". ") == 0


def test_objects_larger_than_the_crop_and_bad_parameters():
    image, labels = small_field()
    with pytest.raises(InputError, match="2 objects are larger than the 8×8 crop \\(label 7 needs 10 px\\)"):
        objects_from_labels(image, labels, size=8)
    with pytest.raises(InputError, match="size=2"):
        objects_from_labels(image, labels, size=2)
    with pytest.raises(InputError, match="fill"):
        objects_from_labels(image, labels, size=16, fill=-1)
    with pytest.raises(InputError, match="channels"):
        objects_from_labels(image, labels, channels=0)
    nan = image.astype(np.float32)
    nan[27, 34] = np.nan
    with pytest.raises(InputError, match="NaN .* object 7"):
        objects_from_labels(nan, labels, size=16)


def test_streams_without_full_frame_temporaries():
    """A field with 1,000 objects: peak extra allocation stays far below one frame-sized bool mask."""
    f = nuclei_field(n=1000, shape=(1024, 1024), seed=3, radius=(4.0, 6.0))
    image = f.image.astype(np.float64)                           # 8 MiB field, labels 4 MiB
    objects_from_labels(image, f.labels)                          # warm-up (imports, caches)
    tracemalloc.start()
    stack, table = objects_from_labels(image, f.labels)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(stack) > 900
    assert peak - stack.nbytes < f.labels.size // 2, (peak, stack.nbytes)   # < half a full-frame bool mask


# ---- shapes_from_labels --------------------------------------------------------------------------
def test_disc_contour_is_round_even_and_consistently_oriented():
    labels = np.zeros((60, 60), np.int32)
    disc(labels, 30, 25, 12, 5)
    disc(labels, 10, 50, 5, 6)
    marks, table = shapes_from_labels(labels, n_points=40)
    assert marks.shape == (2, 40, 2) and table["label"].tolist() == [5, 6]
    r = np.hypot(marks[0, :, 0] - 25, marks[0, :, 1] - 30)
    assert abs(r.mean() - np.sqrt((labels == 5).sum() / np.pi)) < 0.2 and r.std() < 0.4   # encloses the pixels' area
    step = np.hypot(*np.diff(np.vstack([marks[0], marks[0][:1]]), axis=0).T)
    assert step.std() < 0.05 * step.mean()                          # equal arc-length spacing
    for m in marks:                                                 # positive signed area in (x, y)
        assert 0.5 * np.sum(m[:, 0] * np.roll(m[:, 1], -1) - np.roll(m[:, 0], -1) * m[:, 1]) > 0
    east, _ = shapes_from_labels(labels, n_points=40, start="east")
    assert east[0, 0, 0] == pytest.approx(25 + 12.5, abs=0.3) and east[0, 0, 1] == pytest.approx(30, abs=1.0)


def teardrop(labels, cy, cx, angle, value, scale=1.0):
    """A rotated asymmetric blob: a big disc with a smaller one overlapping on one side."""
    yy, xx = np.mgrid[:labels.shape[0], :labels.shape[1]].astype(float)
    u = (np.cos(angle) * (xx - cx) + np.sin(angle) * (yy - cy)) / scale
    v = (-np.sin(angle) * (xx - cx) + np.cos(angle) * (yy - cy)) / scale
    blob = (u ** 2 + v ** 2 <= 81) | ((u - 11) ** 2 + v ** 2 <= 25) | ((u + 3) ** 2 + (v - 7) ** 2 <= 16)
    labels[blob] = value


def test_major_axis_start_turns_with_the_object():
    labels = np.zeros((200, 200), np.int32)
    angles = [0.0, 0.7, 1.9, 3.0, 4.4, 5.6]
    for i, a in enumerate(angles):
        teardrop(labels, 40 + 60 * (i // 3), 40 + 60 * (i % 3), a, i + 1, scale=1.0 + 0.1 * i)
    marks, _ = shapes_from_labels(labels, n_points=50)
    aligned, _, _ = align_to(marks, marks[0])
    size = np.sqrt(((marks[0] - marks[0].mean(0)) ** 2).sum(1).mean())
    assert np.sqrt(((aligned - marks[0]) ** 2).sum(-1).mean(-1)).max() < 0.06 * size   # landmark i ↔ landmark i
    east, _ = shapes_from_labels(labels, n_points=50, start="east")
    aligned_e, _, _ = align_to(east, east[0])
    assert np.sqrt(((aligned_e - east[0]) ** 2).sum(-1).mean(-1)).max() > 0.3 * size   # fixed start does not


def test_shapes_time_series_and_errors():
    labels = np.zeros((2, 40, 40), np.int32)
    disc(labels[0], 10, 10, 4, 1)
    disc(labels[0], 25, 25, 6, 2)
    disc(labels[1], 20, 20, 5, 1)
    marks, table = shapes_from_labels(labels, n_points=16)
    assert table["frame"].tolist() == [0, 0, 1] and table["label"].tolist() == [1, 2, 1]
    with pytest.raises(InputError, match="floating point"):
        shapes_from_labels(labels.astype(float))
    with pytest.raises(InputError, match="no objects"):
        shapes_from_labels(np.zeros((10, 10), np.uint8))
    with pytest.raises(InputError, match="start"):
        shapes_from_labels(labels, start="north")
    with pytest.raises(InputError, match="n_points"):
        shapes_from_labels(labels, n_points=2)


def test_osteosarcoma_contours_traced_back(shared_datasets):
    """Raw cell contours drawn as filled objects and traced back lie on the raw polygon."""
    from skimage.draw import polygon

    with np.load(shared_datasets("osteosarcoma_cells.npz"), allow_pickle=False) as npz:
        points, offsets = npz["points"], npz["offsets"]
    cells = [points[offsets[i]:offsets[i + 1]].astype(float) for i in range(0, 600, 30)]
    labels = np.zeros((1400, 1400), np.int32)
    shifts = []
    for i, c in enumerate(cells):
        shift = np.array([(i % 5) * 280, (i // 5) * 280]) + 5 - c.min(0)
        rr, cc = polygon(c[:, 1] + shift[1], c[:, 0] + shift[0], labels.shape)
        labels[rr, cc] = i + 1
        labels[np.rint(c[:, 1] + shift[1]).astype(int), np.rint(c[:, 0] + shift[0]).astype(int)] = i + 1
        shifts.append(shift)
    assert labels.max() == len(cells) and np.all(np.diff([c.max(0) - c.min(0) for c in cells]) < 270)
    marks, table = shapes_from_labels(labels, n_points=100)
    assert table["label"].tolist() == list(range(1, len(cells) + 1))
    for c, m, s in zip(cells, marks, shifts):
        a, b = c, np.roll(c, -1, axis=0)
        p = m - s
        t = np.clip(((p[:, None] - a) * (b - a)).sum(-1) / np.maximum(((b - a) ** 2).sum(-1), 1e-12), 0, 1)
        d = np.sqrt(((p[:, None] - (a + t[..., None] * (b - a))) ** 2).sum(-1)).min(1)
        assert d.mean() < 0.8 and d.max() < 2.0


# ---- the generated nuclei field ------------------------------------------------------------------
def test_nuclei_field_is_seeded_balanced_and_labelled():
    f = nuclei_field(n=90, shape=(400, 400), seed=1)
    g = nuclei_field(n=90, shape=(400, 400), seed=1)
    h = nuclei_field(n=90, shape=(400, 400), seed=2)
    assert np.array_equal(f.image, g.image) and np.array_equal(f.labels, g.labels)
    assert not np.array_equal(f.labels, h.labels)
    assert f.image.dtype == np.uint16 and f.labels.dtype == np.int32
    assert sorted(np.unique(f.labels)) == list(range(91))            # every nucleus present, none overlaps another away
    assert np.bincount(f.kinds[1:]).tolist() == [30, 30, 30] and f.kinds[0] == -1
    bg = f.image[f.labels == 0].astype(float)
    fg = f.image[f.labels > 0].astype(float)
    assert fg.mean() > bg.mean() + 5 * bg.std()                      # nuclei stand out of a noisy background
    stack, table = objects_from_labels(f.image, f.labels)
    kinds = f.kind_of(table["label"])
    areas = [table["area"][kinds == k].mean() for k in range(3)]
    assert max(areas) < 1.15 * min(areas)                            # kinds are not told apart by size
    with pytest.raises(InputError, match="do not fit"):
        nuclei_field(n=500, shape=(64, 64))
    with pytest.raises(InputError, match="radius"):
        nuclei_field(radius=(9, 3))
    with pytest.raises(InputError, match="seed"):
        nuclei_field(seed="one")
    with pytest.raises(InputError, match="n="):
        nuclei_field(n=0)


def test_nuclei_sample_and_assignments_columns(tmp_path):
    x, y = ticlust.sample("nuclei")
    assert x.ndim == 3 and x.shape[1:] == (32, 32) and x.dtype == np.uint16 and len(x) == len(y) > 250
    res = ticlust.fit(x[:60], method="kmeans", k=3, seed=0)
    rows = res.assignments_table(tmp_path / "a.csv", columns={"label": np.arange(60) + 5, "frame": np.zeros(60, int)})
    assert list(rows[0])[:4] == ["item", "label", "frame", "cluster"] and rows[3]["label"] == 8
    with pytest.raises(ValueError, match="one value per item"):
        res.assignments_table(columns={"label": np.arange(3)})


# ---- command line --------------------------------------------------------------------------------
def cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "ticlust.cli", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=300)


def test_cli_fit_field_with_labels_one_row_per_kept_object(tmp_path):
    import tifffile

    f = nuclei_field(n=60, shape=(300, 300), seed=4)
    labels = f.labels.copy()
    labels[labels > 0] += 1000                                           # non-consecutive ids
    tifffile.imwrite(tmp_path / "field.tif", f.image)
    tifffile.imwrite(tmp_path / "mask.tif", labels)
    border = set(np.unique(np.concatenate([labels[0], labels[-1], labels[:, 0], labels[:, -1]]))) - {0}
    assert border, "the test needs a field with border objects"
    ids = set(np.unique(labels)) - {0}
    out = cli("fit", tmp_path / "field.tif", "--labels", tmp_path / "mask.tif", "--method", "kmeans", "--k", "3",
              "-o", tmp_path / "r.npz", "--csv", tmp_path / "r.csv", "--quiet")
    assert out.returncode == 0, out.stderr
    rows = list(csv.DictReader(open(tmp_path / "r.csv")))
    assert {int(r["label"]) for r in rows} == ids - border and len(rows) == len(ids - border)
    assert {"frame", "centroid_y", "centroid_x", "cluster"} <= set(rows[0])
    lab = int(rows[0]["label"])
    ys, xs = np.nonzero(labels == lab)
    assert float(rows[0]["centroid_y"]) == pytest.approx(ys.mean()) and float(rows[0]["centroid_x"]) == pytest.approx(xs.mean())
    out = cli("fit", tmp_path / "field.tif", "--labels", tmp_path / "mask.tif", "--keep-border", "--method", "shape-kmeans",
              "--k", "3", "-o", tmp_path / "s.npz", "--csv", tmp_path / "s.csv", "--quiet")
    assert out.returncode == 0, out.stderr
    rows = list(csv.DictReader(open(tmp_path / "s.csv")))
    assert {int(r["label"]) for r in rows} == ids
    out = cli("fit", tmp_path / "field.tif", "--labels", tmp_path / "mask.tif", "--orient", "--rescale", "--normalize",
              "--crop-size", "24", "--method", "kmeans", "--k", "3", "-o", tmp_path / "o.npz", "--csv", tmp_path / "o.csv", "--quiet")
    assert out.returncode == 0, out.stderr
    rows = list(csv.DictReader(open(tmp_path / "o.csv")))
    assert {int(r["label"]) for r in rows} == ids - border and {"angle", "scale"} <= set(rows[0])
    fitted = ticlust.load_result(tmp_path / "o.npz")
    assert fitted.prototypes.shape == (3, 24, 24)
    assert fitted.config["objects"] == {"size": 24, "keep_border": False, "channel": None, "orient": True,
                                        "normalize": True, "rescale": True}
    # predict --labels with no crop flags cuts the objects as the fit recorded (rescaled, 24 px): same clusters
    out = cli("predict", tmp_path / "o.npz", tmp_path / "field.tif", "--labels", tmp_path / "mask.tif",
              "--csv", tmp_path / "p.csv", "--quiet")
    assert out.returncode == 0, out.stderr
    predicted = list(csv.DictReader(open(tmp_path / "p.csv")))
    assert [(r["label"], r["cluster"]) for r in predicted] == [(r["label"], r["cluster"]) for r in rows]
    tifffile.imwrite(tmp_path / "small.tif", labels[:-1])
    out = cli("fit", tmp_path / "field.tif", "--labels", tmp_path / "small.tif", "-o", tmp_path / "x.npz", "--quiet")
    assert out.returncode == 2 and "labels have shape" in out.stderr and "Traceback" not in out.stderr
