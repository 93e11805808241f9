"""PSSC's U-SPEC graph on heavy-tailed data (issue 52 item 3): with one kernel width for every item, items far from
every representative hang off the graph on their own representative, the K leading eigenvectors sit on those
near-isolated pieces and one cluster takes nearly everything (real cells: 1,481 of 1,500). Each item's own width
(``kernel_width="local"``, the default) keeps them attached."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import ticlust
from ticlust.kernels.spectral import affinities
from ticlust.metrics import evaluate


def heavy_tailed_blobs(seed: int, per: int = 60) -> tuple[np.ndarray, np.ndarray]:
    """Three 8x8 patterns with Student-t noise (df 2: a few items far out, as debris and clumps in real crops)."""
    rng = np.random.default_rng(seed)
    protos = rng.uniform(0, 1, (3, 8, 8))
    x = np.concatenate([p + 0.2 * rng.standard_t(2, (per, 8, 8)) for p in protos])
    return x.astype(np.float32), np.repeat(np.arange(3), per)


FAST = dict(features="pixels", poc=0, restarts=3)


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("seed", [0, 1])
def test_local_widths_keep_heavy_tailed_data_from_collapsing_into_one_cluster(seed):
    x, y = heavy_tailed_blobs(seed)
    one = ticlust.fit(x, "pssc", 3, seed=0, progress=False, kernel_width="global", **FAST)
    assert np.bincount(one.labels, minlength=3).max() >= 0.9 * len(x)        # the defect, as it was
    own = ticlust.fit(x, "pssc", 3, seed=0, progress=False, **FAST)
    sizes = np.bincount(own.labels, minlength=3)
    assert sizes.min() >= 0.2 * len(x), sizes
    assert evaluate(y, own.labels)["ari"] > 0.8
    again = ticlust.predict(own, x)                                       # predict uses the same widths
    np.testing.assert_array_equal(again.labels, own.labels)


def test_local_width_is_each_items_mean_distance_and_spreads_an_outliers_affinity():
    dist = torch.tensor([[0.1, 0.2, 0.3], [0.01, 5.0, 6.0], [0.0, 0.0, 0.0]], dtype=torch.float64)
    glob = affinities(dist, 0.2)
    own = affinities(dist, 0.2, local=True)
    np.testing.assert_allclose(own[0].numpy(), np.exp(-dist[0].numpy() ** 2 / (2 * 0.2 ** 2)))   # mean of 0.1-0.3
    assert glob[1, 1:].max() < 1e-100 and own[1, 1:].min() > 0.2   # the far item reaches its other representatives
    np.testing.assert_allclose(own[2].numpy(), 1.0)                 # zero distances: the global width, no 0/0


@pytest.mark.usefixtures("one_thread")
def test_a_result_saved_before_the_local_width_predicts_with_the_global_one():
    x, _ = heavy_tailed_blobs(0, per=20)
    res = ticlust.fit(x, "pssc", 3, seed=0, progress=False, kernel_width="global", **FAST)
    res.state.local_width = None                                    # what an older saved result holds
    res.config.pop("kernel_width")
    np.testing.assert_array_equal(ticlust.predict(res, x).labels, res.labels)
