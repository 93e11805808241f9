"""Every image method clusters multichannel stacks (issue 20.9): C = 2 and C = 4, channels last or first."""
import numpy as np
import pytest

import ticlust
from ticlust import api

FAST = {
    "kmeans": {}, "gmm": {},
    "st-kmeans": dict(max_iter=1, steps=2, affine_steps=2, predict_steps=2, landmarks=3),
    "ai-kmeans": dict(max_iter=1, steps=2, affine_steps=2, predict_steps=2),
    "pssc": dict(candidates=20, representatives=8, pca_dim=10),
    "dti-kmeans": dict(max_epochs=1, min_stage_epochs=1, patience=1, final_epochs=0, batch_size=16),
    "dti-gmm": dict(max_epochs=1, min_stage_epochs=1, patience=1, final_epochs=0, batch_size=16),
    "nt": dict(max_iter=2),
    "rigid-spectral": dict(anchors=12, candidates=8),
}


@pytest.mark.parametrize("method", sorted(FAST))
def test_image_methods_take_two_and_four_channels(method, one_thread):
    rng = np.random.default_rng(0)
    for channels, first in ((2, True), (4, False)):
        x = rng.random((24, 16, 16, channels)).astype(np.float32)
        x[:12, :8] += 1.0
        data = np.moveaxis(x, -1, 1).copy() if first else x
        res = ticlust.fit(data, method=method, k=2, seed=0, progress=False, **FAST[method])
        assert res.prototypes.shape == (2, 16, 16, channels) and res.labels.shape == (24,)
        if res.aligned is not None:
            assert res.aligned.shape == (24, 16, 16, channels)
        assert ticlust.predict(res, data[:3]).labels.shape == (3,)
        aligned, scores = api.align_one(res, x[5])
        assert aligned.shape == (2, 16, 16, channels) and scores.shape == (2,)
