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
    from ticlust.datasets.shapes import sample_landmarks

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


@pytest.fixture
def size_groups():
    """Two groups of one shape at two sizes, in random poses: a landmark method must find them with
    scale=False (ARI 1, every size kept) and not with scale=True (ARI < 0.3). Returns (form fit, landmarks)."""
    import numpy as np

    import ticlust
    from landmark_poses import similar
    from ticlust.datasets.shapes import MEAN_SHAPE_A

    def fit(method: str, seed: int):
        rng = np.random.default_rng(seed)
        y = np.arange(40) % 2
        x = np.stack([similar(MEAN_SHAPE_A + rng.normal(0, 2.0, (8, 2)), rng.uniform(0, 2 * np.pi), 1.0 + 0.5 * g,
                              rng.normal(0, 50, 2)) for g in y])
        form = ticlust.fit(x, method, k=2, device="cpu", scale=False)
        shape = ticlust.fit(x, method, k=2, device="cpu", scale=True)
        assert ticlust.evaluate(y, form.labels)["ari"] == 1.0
        assert ticlust.evaluate(y, shape.labels)["ari"] < 0.3
        size = np.sqrt(((form.aligned - form.aligned.mean(1, keepdims=True)) ** 2).sum((1, 2)))
        assert np.allclose(size, np.sqrt(((x - x.mean(1, keepdims=True)) ** 2).sum((1, 2))))   # sizes kept
        return form, x
    return fit


@pytest.fixture(scope="module")
def client():
    """A real dask cluster for a test module: two single-threaded worker processes on 127.0.0.1, dashboard off,
    started as ticlust starts its own (cluster.local_cluster: no malloc-trim setting leaking into this process)."""
    distributed = pytest.importorskip("distributed")
    from ticlust.core.backends import local_cluster

    with local_cluster(2, dashboard=None) as local, distributed.Client(local) as c:
        yield c
