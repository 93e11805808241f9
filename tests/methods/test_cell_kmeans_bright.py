"""cell-kmeans in transmitted light (stained smears): found from the data or declared, the crops compared by
their central object's descriptors, so a neighbouring red cell, the lamp's level and the cell's orientation do
not decide; predict repeats the fit; a bad ``illumination`` is refused in one sentence."""
import numpy as np
import pytest

import ticlust
from ticlust.errors import InputError

SIDE = 32


def stained_cells(n_per=12, seed=0):
    """uint8 RGB crops on a lit background: kind 0 a round nucleus in blue cytoplasm, kind 1 two lobes in pink
    cytoplasm, each turned at random; a red cell in a random corner; the lamp's level varies from crop to crop."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[:SIDE, :SIDE].astype(float)
    items, labels = [], []
    for kind in (0, 1):
        for _ in range(n_per):
            t = np.ones((SIDE, SIDE, 3))
            a = rng.uniform(0, np.pi)
            cy, cx = 15.5 + rng.normal(0, 0.7, 2)
            t[np.hypot(yy - cy, xx - cx) <= 8] = (0.75, 0.8, 0.95) if kind == 0 else (0.95, 0.75, 0.85)
            lobes = [(0.0, 4.5)] if kind == 0 else [(-3.2, 2.8), (3.2, 2.8)]
            for off, r in lobes:
                t[np.hypot(yy - cy - off * np.sin(a), xx - cx - off * np.cos(a)) <= r] = (0.3, 0.35, 0.85)
            ry, rx = rng.choice([3.0, 28.0], 2)
            t[np.hypot(yy - ry, xx - rx) <= 6] = (0.95, 0.5, 0.65)            # a red cell at the edge
            light = rng.uniform(180, 250) * np.array([1.0, 0.97, 0.92])
            noisy = light * t + rng.normal(0, 2.0, t.shape)
            items.append(np.clip(noisy, 0, 255).astype(np.uint8))
            labels.append(kind)
    return np.asarray(items), np.asarray(labels)


def test_stained_cells_found_and_told_apart_at_any_turn():
    x, y = stained_cells()
    res = ticlust.fit(x, method="cell-kmeans", k=2, seed=0, device="cpu", n_init=2)
    assert res.state.direction is not None                                   # auto: transmitted light
    assert ticlust.evaluate(y, res.labels)["acc"] == 1.0
    assert res.prototypes.shape == (2, SIDE, SIDE, 3)
    again = ticlust.predict(res, x)
    np.testing.assert_array_equal(again.labels, res.labels)
    same = ticlust.fit(x, method="cell-kmeans", k=2, seed=0, device="cpu", n_init=2)
    np.testing.assert_allclose(same.scores, res.scores, rtol=1e-5, atol=1e-6)
    assert np.array_equal(x, stained_cells()[0])                             # input untouched


def test_the_stacks_range_does_not_move_the_densities():
    """Optical density needs the data's own zero: the same crops as floats in [0, 1], or with their darkest value
    far above 0 (a bright stack), give the same state."""
    x, _ = stained_cells(n_per=6)
    a = ticlust.fit(x, method="cell-kmeans", k=2, seed=0, device="cpu", n_init=1)
    b = ticlust.fit(x.astype(np.float32) / 255, method="cell-kmeans", k=2, seed=0, device="cpu", n_init=1)
    np.testing.assert_array_equal(a.labels, b.labels)
    np.testing.assert_allclose(a.state.direction, b.state.direction, atol=1e-5)
    np.testing.assert_allclose(a.state.centre, b.state.centre, rtol=1e-4, atol=1e-6)


def test_illumination_declared_or_refused():
    x, _ = stained_cells(n_per=6)
    dark = ticlust.fit(x, method="cell-kmeans", k=2, seed=0, device="cpu", n_init=1, illumination="dark")
    assert dark.state.direction is None and dark.state.centre is None
    bright = ticlust.fit(x, method="cell-kmeans", k=2, seed=0, device="cpu", n_init=1, illumination="bright")
    assert bright.state.direction is not None
    with pytest.raises(InputError, match="illumination"):
        ticlust.fit(x, method="cell-kmeans", k=2, illumination="sideways")


def test_fluorescence_stays_on_its_route():
    """Bright spots on a dark background (fluorescence) are not read as stains."""
    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[:SIDE, :SIDE]
    spot = np.exp(-((yy - 15.5) ** 2 + (xx - 15.5) ** 2) / 18.0)
    x = (20 + rng.uniform(100, 400, (12, 1, 1)) * spot + rng.normal(0, 1, (12, SIDE, SIDE))).astype(np.float32)
    res = ticlust.fit(x, method="cell-kmeans", k=2, seed=0, device="cpu", n_init=1)
    assert res.state.direction is None
