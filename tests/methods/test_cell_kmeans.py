"""cell-kmeans and the crop measurements under it (features/cells.py): same seed same result, the background
taken off per crop and channel, brightness kept (the class can be the stain's amount), the mask and the pose,
and the refusals as one sentence."""
import numpy as np
import pytest

import ticlust
from ticlust.errors import InputError
from ticlust.features import cells

SIDE = 24


def blob(amount, sy=3.0, sx=3.0, angle=0.0, cy=11.5, cx=11.5, side=SIDE):
    """A Gaussian spot of total ``amount`` with axes ``sx`` (along ``angle``) and ``sy``."""
    yy, xx = np.mgrid[:side, :side].astype(float)
    dy, dx = yy - cy, xx - cx
    u = dx * np.cos(angle) + dy * np.sin(angle)
    v = -dx * np.sin(angle) + dy * np.cos(angle)
    g = np.exp(-0.5 * ((u / sx) ** 2 + (v / sy) ** 2))
    return amount * g / g.sum()


def cell_stack(n_per=30, seed=0, offsets=(100.0, 20.0)):
    """Two kinds that differ only in the DNA channel's amount (G1 against G2: ×2), on a per-crop background
    offset that varies from crop to crop more than the kinds differ in brightness, with noise."""
    rng = np.random.default_rng(seed)
    items, labels = [], []
    for kind, amount in enumerate((4000.0, 8000.0)):
        for _ in range(n_per):
            dna = blob(amount * rng.uniform(0.9, 1.1), cy=11.5 + rng.normal(0, 1), cx=11.5 + rng.normal(0, 1))
            body = blob(6000.0 * rng.uniform(0.7, 1.3), 5, 5)
            level = np.array(offsets) * rng.uniform(0.8, 1.2, 2)
            img = np.stack([dna, body], -1) + level + rng.normal(0, 1.0, (SIDE, SIDE, 2))
            items.append(img)
            labels.append(kind)
    return np.asarray(items, np.float32), np.asarray(labels)


def test_same_seed_same_result_and_brightness_kept():
    x, y = cell_stack()
    a = ticlust.fit(x, method="cell-kmeans", k=2, seed=3, device="cpu", n_init=2)
    b = ticlust.fit(x, method="cell-kmeans", k=2, seed=3, device="cpu", n_init=2)
    np.testing.assert_array_equal(a.labels, b.labels)
    np.testing.assert_allclose(a.prototypes, b.prototypes, rtol=1e-5, atol=1e-6)
    # the kinds differ only in the stain's amount: a per-object normalisation would erase it
    assert ticlust.evaluate(y, a.labels)["acc"] == 1.0
    assert a.prototypes.shape == (2, SIDE, SIDE, 2)


def test_background_offset_per_crop_is_taken_off():
    """Each crop's own background level per channel is removed: clustering is the same with a different offset."""
    x, y = cell_stack(offsets=(100.0, 20.0))
    shifted = x + np.array([400.0, -15.0], np.float32)
    a = ticlust.fit(x, method="cell-kmeans", k=2, seed=0, device="cpu", n_init=2)
    b = ticlust.fit(shifted, method="cell-kmeans", k=2, seed=0, device="cpu", n_init=2)
    assert ticlust.evaluate(a.labels, b.labels)["acc"] == 1.0
    assert np.array_equal(x, cell_stack(offsets=(100.0, 20.0))[0])          # input untouched


def test_mask_drops_a_neighbour_in_the_corner():
    x = (blob(5000.0) + 10.0)[None, :, :, None].astype(np.float32)
    x[0, :3, -3:, 0] += 60.0                                                # a bright neighbour's edge in a corner
    level = cells.border_background(x)
    noise = np.array([1.0], np.float32)
    mask = cells.object_masks(x, level, noise)[0]
    assert mask[12, 12] and not mask[1, -2]
    assert mask.sum() < 0.5 * SIDE * SIDE


def test_mask_keeps_both_daughters():
    """A dividing cell's two halves are both kept (pieces of at least KEEP_PIECE of the largest)."""
    x = (blob(3000.0, 2, 2, cx=6.0) + blob(2500.0, 2, 2, cx=17.0))[None, :, :, None].astype(np.float32)
    mask = cells.object_masks(x, np.zeros((1, 1), np.float32), np.array([1e-3], np.float32))[0]
    assert mask[11, 6] and mask[11, 17]


@pytest.mark.parametrize("angle", [0.3, 1.2, 2.5, -2.0])
def test_pose_finds_the_major_axis_and_one_direction_along_it(angle):
    """The major axis is found at any angle, and the third moment picks one direction along it: the crop turned by
    180 degrees is posed into the same picture."""
    img = blob(1000.0, 2.0, 6.0, angle) + blob(300.0, 1.5, 1.5, cy=11.5 + 5 * np.sin(angle), cx=11.5 + 5 * np.cos(angle))
    pose = cells.poses(img[None], orient=True)[0]
    assert abs(np.angle(np.exp(2j * (pose[2] - angle)))) < 0.1            # the axis, either way along it
    turned = cells.posed(img[None, :, :, None], pose[None])[0, :, :, 0]
    flipped = img[::-1, ::-1].copy()
    turned_flipped = cells.posed(flipped[None, :, :, None], cells.poses(flipped[None], orient=True))[0, :, :, 0]
    assert np.abs(turned - turned_flipped).sum() < 0.05 * img.sum()
    assert turned[9:15, :].sum() > 0.8 * turned.sum()                      # lying along +x
    back = cells.posed(turned[None, :, :, None], pose[None], inverse=True)[0, :, :, 0]
    assert np.abs(back - img).sum() < 0.1 * img.sum()


def test_pose_and_mask_options_run_and_predict_repeats_the_fit():
    x, y = cell_stack(n_per=12)
    res = ticlust.fit(x, method="cell-kmeans", k=2, seed=0, device="cpu", n_init=1, pose="centre+axis", mask=True)
    assert res.params["pose"].shape == (len(x), 3)
    again = ticlust.predict(res, x)
    np.testing.assert_array_equal(again.labels, res.labels)


def test_refusals_are_one_sentence():
    x, _ = cell_stack(n_per=6)
    res = ticlust.fit(x, method="cell-kmeans", k=2, seed=0, device="cpu", n_init=1)
    with pytest.raises(InputError, match="same shape"):
        ticlust.predict(res, x[:, :20, :20])
    with pytest.raises(InputError):
        ticlust.fit(x, method="cell-kmeans", k=2, pose="sideways")
    with pytest.raises(InputError, match="stack of images"):
        ticlust.fit(np.random.default_rng(0).random((20, 5)), method="cell-kmeans", k=2, device="cpu")
