"""AI/ST K-means fit large crops on images averaged down (``work_side``) and make their outputs at full size."""
import numpy as np
import torch

import ticlust
from ticlust.kernels.aligned_lloyd import work_factor
from ticlust.metrics import evaluate
from ticlust.methods import get_method
from ticlust.transforms.align import Aligner


def big_glyphs():
    """The glyphs sample (4 kinds, 32 px) enlarged to 64 px by repeating each pixel: 2×2 averages give it back."""
    x, y = ticlust.sample("glyphs")
    x = np.asarray(x, np.float32)[::5]
    return x.repeat(2, 1).repeat(2, 2), np.asarray(y)[::5], x


def test_the_factor_and_the_reduction():
    cfg = get_method("ai-kmeans").make_config(k=3)
    assert cfg.work_side == 32
    assert [work_factor(cfg, (s, s)) for s in (16, 28, 32, 48, 63, 64, 100, 128)] == [1, 1, 1, 1, 1, 2, 3, 4]
    assert work_factor(get_method("st-kmeans").make_config(k=3, work_side=0), (128, 128)) == 1
    a = Aligner((64, 64), None, "cpu", work=2)
    x = torch.rand(3, 2, 64, 64)
    assert a.size == (32, 32) and a.at_full_size().size == (64, 64) and a.at_full_size().work == 1
    assert torch.allclose(a.reduced(x), x.reshape(3, 2, 32, 2, 32, 2).mean((3, 5)))
    assert a.reduced(a.reduced(x)).shape == (3, 2, 32, 32)              # already at the working size: as it is


def test_a_reduced_fit_gives_full_size_outputs_and_scores(one_thread):
    big, y, small = big_glyphs()
    for method in ("ai-kmeans", "st-kmeans"):
        r = ticlust.fit(big, method, k=4, seed=0, progress=False, max_iter=4)
        assert r.prototypes.shape == (4, 64, 64) and r.aligned.shape == big.shape and r.grids.shape[1:] == (12, 12, 2)
        assert float(np.asarray(r.grids).max()) > 40                         # display grids in the 64-px frame
        assert evaluate(y, r.labels)["acc"] > 0.95
        # an item's score: its own prototype's distance at 64 px, within the blur a 2×2 average leaves
        own = r.scores[np.arange(len(y)), r.labels]
        direct = ((np.asarray(r.aligned) - np.asarray(r.prototypes)[r.labels]) ** 2).sum((1, 2))
        scale = (big ** 2).sum((1, 2)).mean()
        assert np.abs(own - direct).mean() < 0.05 * scale
        again = ticlust.predict(r, big)
        assert (again.labels == r.labels).mean() > 0.95 and again.aligned.shape == big.shape


def test_work_side_zero_fits_at_full_size(one_thread):
    big, y, _ = big_glyphs()
    full = ticlust.fit(big, "ai-kmeans", k=4, seed=0, progress=False, max_iter=2, work_side=0)
    reduced = ticlust.fit(big, "ai-kmeans", k=4, seed=0, progress=False, max_iter=2)
    assert full.config["work_side"] == 0 and full.prototypes.shape == reduced.prototypes.shape == (4, 64, 64)
    assert (full.labels == reduced.labels).mean() > 0.9


def test_held_reduced_images_give_the_fit_and_prediction_read_batch_by_batch(one_thread, monkeypatch):
    """Reduced images held once (``HELD_BYTES``) change nothing: the same labels, prototypes and scores to the bit as
    a fit that reduces them on every read."""
    from ticlust.kernels import aligned_lloyd

    big, _, _ = big_glyphs()
    runs = []
    for held in (0, aligned_lloyd.HELD_BYTES):
        monkeypatch.setattr(aligned_lloyd, "HELD_BYTES", held)
        r = ticlust.fit(big, "st-kmeans", k=4, seed=0, progress=False, max_iter=3)
        runs.append((r, ticlust.predict(r, big[::3])))
    (a, pa), (b, pb) = runs
    for name in ("labels", "prototypes", "scores"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    assert np.array_equal(pa.labels, pb.labels) and np.array_equal(pa.scores, pb.scores)
