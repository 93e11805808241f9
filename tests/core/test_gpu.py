"""CUDA paths (``pytest -m gpu`` on a machine with a GPU; skipped elsewhere): the deterministic sampler
equals grid_sample on the GPU, and the same seed gives the same labels for every image method."""
import numpy as np
import pytest
import torch

import ticlust
from ticlust.datasets.samples import glyphs_sample

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

FAST = {
    "kmeans": {}, "gmm": {"max_iter": 10}, "nt": {"max_iter": 2},
    "st-kmeans": dict(steps=6, affine_steps=4, predict_steps=6, max_iter=3, landmarks=3),
    "ai-kmeans": dict(steps=6, affine_steps=4, predict_steps=6, max_iter=3),
    "pssc": dict(pad_to=16, scales=2, candidates=60, representatives=20, restarts=2),
    "dti-kmeans": dict(max_epochs=3, min_stage_epochs=1, patience=1, final_epochs=1, batch_size=32),
    "dti-gmm": dict(max_epochs=3, min_stage_epochs=1, patience=1, final_epochs=1, batch_size=32),
    "rigid-spectral": dict(anchors=40),
}


def test_sampler_equals_grid_sample_on_cuda():
    from ticlust.transforms.sampler import bilinear_sample

    images = torch.rand(64, 3, 28, 28, device="cuda", requires_grad=True)
    grid = (torch.rand(64, 28, 28, 2, device="cuda") * 2.4 - 1.2).requires_grad_(True)
    ref = torch.nn.functional.grid_sample(images, grid, align_corners=False)
    out = bilinear_sample(images, grid)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    w = torch.rand_like(ref)
    g_ref = torch.autograd.grad((ref * w).sum(), (images, grid))
    g_out = torch.autograd.grad((out * w).sum(), (images, grid))
    for a, b in zip(g_out, g_ref):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
    again = torch.autograd.grad((bilinear_sample(images, grid) * w).sum(), images)[0]
    assert torch.equal(again, g_out[0])   # bit for bit


@pytest.mark.parametrize("method", list(FAST))
def test_same_seed_same_labels_on_cuda(method):
    x, _ = glyphs_sample(n_per_class=25, size=16, seed=1)
    a = ticlust.fit(x, method=method, k=4, device="cuda", seed=3, **FAST[method])
    b = ticlust.fit(x, method=method, k=4, device="cuda", seed=3, **FAST[method])
    assert np.array_equal(a.labels, b.labels) and np.array_equal(a.prototypes, b.prototypes)


def test_compiled_dti_trains_and_saves(tmp_path):
    x, _ = glyphs_sample(n_per_class=25, size=16, seed=1)
    r = ticlust.fit(x, method="dti-kmeans", k=4, device="cuda", seed=0, compile=True, **FAST["dti-kmeans"])
    back = ticlust.load_result(r.save(tmp_path / "r.npz"))
    assert np.array_equal(ticlust.predict(back, x, device="cuda").labels, r.labels)
