"""procrustes-kmeans, the landmark baseline: generalised Procrustes alignment, then K-means."""

import numpy as np
import pytest

import ticlust
from ticlust import InputError
from ticlust.datasets.shapes import MEAN_SHAPE_A, MEAN_SHAPE_B, sample_landmarks
from ticlust.transforms.procrustes import align_to, procrustes_align

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def three_groups(similar):
    """``three_groups(seed, n=45, noise=3.0)``: three mean shapes (A, B and A with a bent vault), every shape in a
    random similarity pose."""
    def make(seed, n=45, noise=3.0):
        rng = np.random.default_rng(seed)
        bent = MEAN_SHAPE_A.copy()
        bent[2:4] += np.array([[-15.0, 20.0], [10.0, 25.0]])
        means = np.stack([MEAN_SHAPE_A, MEAN_SHAPE_B, bent])
        y = rng.permutation(np.arange(n) % 3)
        x = np.stack([similar(means[g] + rng.normal(0, noise, (8, 2)), rng.uniform(0, 2 * np.pi), rng.uniform(0.3, 4.0),
                               rng.normal(0, 200, 2)) for g in y])
        return x, y
    return make


def test_recovers_groups_under_random_similarities(three_groups):
    for seed in range(3):
        x, y = three_groups(seed)
        r = ticlust.fit(x, "procrustes-kmeans", k=3, device="cpu", seed=seed)
        assert ticlust.evaluate(y, r.labels)["ari"] == 1.0
        # raw-coordinate K-means cannot: pose, not shape, dominates the coordinates
        raw = ticlust.fit(x.reshape(len(x), -1), "kmeans", k=3, device="cpu", seed=seed)
        assert ticlust.evaluate(y, raw.labels)["ari"] < 0.5


def test_result_fields_predict_and_determinism(similar, landmark_fit):
    r1, x = landmark_fit("procrustes-kmeans")
    # scores are the squared distances to the prototypes (the cluster means of the aligned shapes)
    d2 = ((r1.aligned[:, None] - r1.prototypes[None]) ** 2).sum((-1, -2))
    assert np.allclose(r1.scores, d2)
    assert r1.history[-1] == pytest.approx(d2[np.arange(60), r1.labels].mean())
    # the aligned shapes are exactly the Procrustes fit, with its per-shape similarity
    fit = procrustes_align(x)
    assert np.allclose(r1.aligned, fit.aligned)
    assert np.allclose(r1.aligned, np.einsum("nlc,ndc->nld", x, r1.params["procrustes_matrix"]) + r1.params["procrustes_offset"][:, None])
    # predict: the training shapes get their labels; new poses of them too
    p = ticlust.predict(r1, x, device="cpu")
    assert np.array_equal(p.labels, r1.labels) and np.allclose(p.scores, r1.scores, atol=1e-6 * r1.scores.max())
    moved = np.stack([similar(s, 2.1, 0.4, np.array([30.0, -4.0])) for s in x[:20]])
    assert np.array_equal(ticlust.predict(r1, moved, device="cpu").labels, r1.labels[:20])
    with pytest.raises(InputError, match="landmarks"):
        ticlust.predict(r1, x[:, :6], device="cpu")


def test_more_starts_never_raise_the_loss():
    x, _ = sample_landmarks(seed=2, n=60)
    one = ticlust.fit(x, "procrustes-kmeans", k=4, device="cpu", seed=0, n_init=1)
    many = ticlust.fit(x, "procrustes-kmeans", k=4, device="cpu", seed=0, n_init=8)   # the same first start, then 7 more
    assert many.final_loss <= one.final_loss + 1e-12


def test_scale_option_keeps_size(similar, size_groups):
    """Two groups of one shape that differ only in size: found in form space, invisible in shape space."""
    form, x = size_groups("procrustes-kmeans", seed=0)                    # rotation and translation only
    assert np.array_equal(ticlust.predict(form, x, device="cpu").labels, form.labels)
    # align_to without scale: rotation and translation only, onto the reference's centroid
    moved = similar(MEAN_SHAPE_B, 1.2, 2.0, np.array([5.0, -7.0]))
    aligned = align_to(moved[None], MEAN_SHAPE_B, scale=False)[0][0]
    assert np.allclose(aligned, 2.0 * (MEAN_SHAPE_B - MEAN_SHAPE_B.mean(0)) + MEAN_SHAPE_B.mean(0))


def test_result_round_trips_through_npz(similar, tmp_path):
    x, _ = sample_landmarks(seed=0, n=40)
    r = ticlust.fit(x, "procrustes-kmeans", k=3, device="cpu", scale=False)
    back = ticlust.load_result(r.save(tmp_path / "pk.npz"))
    assert back.config["scale"] is False and np.array_equal(back.state.consensus, r.state.consensus)
    assert np.array_equal(back.state.centres, r.state.centres)
    new = np.stack([similar(s, 0.3, 1.0, np.array([1.0, 2.0])) for s in x])
    a, b = ticlust.predict(back, new, device="cpu"), ticlust.predict(r, new, device="cpu")
    assert np.array_equal(a.labels, b.labels) and np.allclose(a.scores, b.scores)


def test_parameters_are_validated():
    x, _ = sample_landmarks(seed=0, n=20)
    with pytest.raises(InputError, match="n_init"):
        ticlust.fit(x, "procrustes-kmeans", k=2, n_init=0)
    with pytest.raises(InputError, match="scale"):
        ticlust.fit(x, "procrustes-kmeans", k=2, scale="maybe")
    assert ticlust.fit(x, "procrustes-kmeans", k=2, device="cpu", scale="off").config["scale"] is False
    with pytest.raises(InputError):
        ticlust.fit(x.reshape(20, -1), "procrustes-kmeans", k=2)


def test_progress_counts_the_iterations_the_starts_take_not_max_iter():
    """The bar's total is the iterations forecast for this start plus the finished starts' mean for each start to come,
    not n_init × max_iter (3,000): it moves on, never passes its total, and ends at the iterations the starts took;
    each start is named, and the object map follows as its own stage."""
    from ticlust.events import Progress
    from ticlust.methods.base import MAP_STAGE

    x, _ = sample_landmarks(seed=0, n=200)
    events = list(ticlust.run(x, "procrustes-kmeans", k=3, device="cpu", seed=0))
    fit = [e for e in events if isinstance(e, Progress) and e.stage != MAP_STAGE]
    assert [e.step for e in fit] == list(range(1, len(fit) + 1)) and all(e.step <= e.total for e in fit)
    assert fit[0].total == 10 * 300 and fit[-1].total == fit[-1].step == len(fit) < 10 * 300
    assert fit[-1].stage == "K-means on Procrustes coordinates, start 10/10"
    assert [e.stage for e in events if isinstance(e, Progress)][-1] == MAP_STAGE
