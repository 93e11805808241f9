"""Shared test fixtures."""
import pytest
import torch


@pytest.fixture
def one_thread():
    """Tiny tensors: one torch thread avoids thread-pool overhead on a busy machine (restored after)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def landmark_fit():
    """Fit a landmark method twice on the two-group sample and check what every landmark method owes:
    input untouched, same seed same result, both groups found, the result's shapes, prototypes the
    cluster means of the aligned shapes. Returns (result, landmarks)."""
    import numpy as np

    import ticlust
    from ticlust.landmarks import sample_landmarks

    def fit(method: str):
        x, y = sample_landmarks(seed=4, n=60)
        before = x.copy()
        r1, r2 = (ticlust.fit(x, method, k=2, device="cpu", seed=5) for _ in range(2))
        assert np.array_equal(x, before)
        assert np.array_equal(r1.labels, r2.labels) and r1.history == r2.history
        assert ticlust.evaluate(y, r1.labels)["ari"] == 1.0
        assert r1.scores.shape == (60, 2) and r1.prototypes.shape == (2, 8, 2) and r1.aligned.shape == (60, 8, 2)
        assert r1.covariances.shape == (2, 8, 2, 2) and r1.aligned_kind == "procrustes"
        for g in range(2):
            assert np.allclose(r1.prototypes[g], r1.aligned[r1.labels == g].mean(0))
        return r1, x
    return fit
