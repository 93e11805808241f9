"""Shape K-means (Gattone et al. 2018): distances against independent computations, Procrustes,
Type I / II clustering, simulation, readers, validation and determinism."""
import math

import numpy as np
import pytest
import scipy.linalg
import scipy.optimize
import torch

import ticlust
from ticlust import InputError
from ticlust.datasets.shapes import MEAN_SHAPE_A, MEAN_SHAPE_B, sample_landmarks, simulate_shapes
from ticlust.transforms.procrustes import align_to, ellipse_corners, procrustes_align
from ticlust.io.landmarks import (landmarks_to_points, points_to_landmarks, read_landmarks, read_landmarks_csv, read_tps,
                                  write_landmarks_csv, write_tps)
from ticlust.methods.shape_kmeans import (fisher_rao_diagonal, fisher_rao_round, fisher_rao_univariate,
                                          wasserstein_diagonal, wasserstein_gaussian)


# ---- distances --------------------------------------------------------------------------------------
def _eq7_term(m1, s1, m2, s2):
    """The paper's Eq. 7 term for one coordinate, written literally (log of half-plane distances)."""
    a = math.hypot((m1 - m2) / math.sqrt(2), s1 + s2)
    b = math.hypot((m1 - m2) / math.sqrt(2), s1 - s2)
    return math.sqrt(2) * math.log((a + b) / (a - b))


def _geodesic_length(p, q, metric_weights, n=24):
    """Length of the shortest discretised path between points p and q (last coordinate a scale s > 0)
    under ds² = (Σ_j w_j dθ_j²) / s², found by minimising the path length over its interior nodes."""
    p, q, w = np.asarray(p, float), np.asarray(q, float), np.asarray(metric_weights, float)
    lp, lq = p.copy(), q.copy()
    lp[-1], lq[-1] = np.log(p[-1]), np.log(q[-1])               # optimise log s: s stays positive
    t = np.linspace(0, 1, n + 1)[1:-1, None]
    start = lp + t * (lq - lp)
    start[:, -1] += np.sin(np.pi * t[:, 0])                      # bow upwards, like the true geodesic

    def length(flat):
        nodes = np.vstack([lp, flat.reshape(n - 1, -1), lq])
        d = np.diff(nodes, axis=0)
        s_mid = np.exp(0.5 * (nodes[1:, -1] + nodes[:-1, -1]))
        d[:, -1] = np.diff(np.exp(nodes[:, -1]))
        return float(np.sum(np.sqrt((w * d * d).sum(1)) / s_mid))

    return scipy.optimize.minimize(length, start.ravel(), method="BFGS", options={"gtol": 1e-9}).fun


def test_univariate_fisher_rao_matches_eq7_and_special_cases():
    rng = np.random.default_rng(1)
    for _ in range(20):
        m1, m2 = rng.normal(0, 3, 2)
        s1, s2 = rng.uniform(0.3, 3, 2)
        assert float(fisher_rao_univariate(m1, s1, m2, s2)) == pytest.approx(_eq7_term(m1, s1, m2, s2), rel=1e-9)
    # equal means: √2 |ln(s1/s2)|; equal sds: 2√2 asinh(|Δm| / (√8 s))
    assert float(fisher_rao_univariate(0, 1, 0, 5)) == pytest.approx(math.sqrt(2) * math.log(5), rel=1e-12)
    assert float(fisher_rao_univariate(0, 2, 3, 2)) == pytest.approx(2 * math.sqrt(2) * math.asinh(3 / (math.sqrt(8) * 2)))
    # the stable form stays accurate where Eq. 7's ratio cancels: distance ≈ Fisher norm |Δm| / s
    assert float(fisher_rao_univariate(0, 1, 1e-9, 1)) == pytest.approx(1e-9, rel=1e-6)


def test_fisher_rao_against_numerical_geodesic():
    # univariate N(m, s²): ds² = (dm² + 2 ds²) / s²
    exact = float(fisher_rao_univariate(0.0, 1.0, 4.0, 2.0))
    assert _geodesic_length([0.0, 1.0], [4.0, 2.0], [1.0, 2.0]) == pytest.approx(exact, rel=2e-3)
    # round bivariate N(μ, s² I): ds² = (|dμ|² + 4 ds²) / s²
    exact = float(fisher_rao_round(torch.tensor([0.0, 0.0]), 1.0, torch.tensor([3.0, 1.0]), 0.5))
    assert _geodesic_length([0.0, 0.0, 1.0], [3.0, 1.0, 0.5], [1.0, 1.0, 4.0]) == pytest.approx(exact, rel=2e-3)
    # diagonal model = product of two half planes: root sum of squares of the univariate distances
    mu1, mu2 = torch.tensor([0.0, 1.0]), torch.tensor([2.0, -1.0])
    sd1, sd2 = torch.tensor([1.0, 0.5]), torch.tensor([2.0, 1.5])
    parts = [float(fisher_rao_univariate(mu1[c], sd1[c], mu2[c], sd2[c])) for c in range(2)]
    assert float(fisher_rao_diagonal(mu1, sd1, mu2, sd2)) == pytest.approx(math.hypot(*parts), rel=1e-12)


def test_wasserstein_closed_form_against_sqrtm():
    rng = np.random.default_rng(2)
    for _ in range(10):
        a, b = rng.normal(size=(2, 2)), rng.normal(size=(2, 2))
        s1, s2 = a @ a.T + 0.1 * np.eye(2), b @ b.T + 0.1 * np.eye(2)
        m1, m2 = rng.normal(size=2), rng.normal(size=2)
        r1 = scipy.linalg.sqrtm(s1).real
        w2 = np.sum((m1 - m2) ** 2) + np.trace(s1 + s2 - 2 * scipy.linalg.sqrtm(r1 @ s2 @ r1).real)
        assert float(wasserstein_gaussian(m1, s1, m2, s2)) == pytest.approx(math.sqrt(w2), rel=1e-7)
    sd1, sd2 = np.array([1.0, 3.0]), np.array([2.0, 0.5])
    assert float(wasserstein_diagonal([0, 0], sd1, [1, 2], sd2)) == pytest.approx(
        float(wasserstein_gaussian([0, 0], np.diag(sd1 ** 2), [1, 2], np.diag(sd2 ** 2))), rel=1e-10)
    # equal covariances: the Euclidean distance between the means (the paper's remark after Eq. 10)
    assert float(wasserstein_gaussian([0, 0], np.eye(2), [3, 4], np.eye(2))) == pytest.approx(5.0)


# ---- Procrustes ---------------------------------------------------------------------------------------


def test_procrustes_recovers_known_similarities(similar):
    rng = np.random.default_rng(3)
    params = [(rng.uniform(0, 2 * np.pi), rng.uniform(0.5, 3), rng.normal(0, 50, 2)) for _ in range(6)]
    shapes = np.stack([similar(MEAN_SHAPE_A, *p) for p in params])
    before = shapes.copy()
    fit = procrustes_align(shapes)
    assert np.array_equal(shapes, before)                                   # input untouched
    assert np.abs(fit.aligned - fit.aligned[0]).max() < 1e-8                 # one shape, six poses
    assert np.abs(fit.aligned - np.einsum("nlc,ndc->nld", shapes, fit.matrix) - fit.offset[:, None]).max() < 1e-9
    # the recovered transforms invert the known ones: matrix_i · scale_i R_i is the same for every i
    composed = [fit.matrix[i] @ (s * np.array([[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]]))
                for i, (a, s, _) in enumerate(params)]
    assert np.abs(np.array(composed) - composed[0]).max() < 1e-9
    assert np.linalg.det(fit.matrix).min() > 0                               # no reflection
    # ordinary Procrustes onto a reference recovers the inverse of a known similarity
    moved = similar(MEAN_SHAPE_B, 1.2, 2.0, np.array([5.0, -7.0]))
    aligned, matrix, offset = align_to(moved[None], MEAN_SHAPE_B)
    assert np.abs(aligned[0] - MEAN_SHAPE_B).max() < 1e-9
    assert matrix[0] == pytest.approx(0.5 * np.array([[math.cos(-1.2), -math.sin(-1.2)], [math.sin(-1.2), math.cos(-1.2)]]))
    # a mirror image cannot be matched without reflection
    mirrored = MEAN_SHAPE_A * np.array([1.0, -1.0])
    assert np.abs(align_to(mirrored[None], MEAN_SHAPE_A)[0][0] - MEAN_SHAPE_A).max() > 10


# ---- clustering ---------------------------------------------------------------------------------------
def _aniso(seed, d=3.0, hi=10.0, lo=1.0, n=60):
    """Registered shapes: cluster 0 noisy along x (sd hi), cluster 1 quiet (sd lo) and shifted by d in y."""
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 2
    sd = np.where(y[:, None, None] == 0, np.array([hi, lo]), np.array([lo, lo]))
    x = MEAN_SHAPE_A[None] + np.where(y[:, None, None] == 1, np.array([0.0, d]), 0.0) + rng.standard_normal((n, 8, 2)) * sd
    return x, y


def test_type2_recovers_anisotropic_clusters_that_the_round_model_misses():
    dr, dd2 = [], []
    for seed in range(3):
        x, y = _aniso(seed)
        dr.append(ticlust.evaluate(y, ticlust.fit(x, "shape-kmeans", k=2, device="cpu", seed=seed, align=False,
                                                  distance="fisher-rao-round", type=1).labels)["ari"])
        dd2.append(ticlust.evaluate(y, ticlust.fit(x, "shape-kmeans", k=2, device="cpu", seed=seed, align=False,
                                                   distance="fisher-rao-diagonal", type=2).labels)["ari"])
    assert min(dd2) > 0.95
    assert np.median(dr) < 0.8


def test_result_fields_predict_and_determinism(similar, landmark_fit):
    r1, x = landmark_fit("shape-kmeans")
    assert np.allclose(r1.covariances[..., 0, 1], 0) and (r1.covariances[..., 0, 0] > 0).all()
    assert r1.history[-1] == pytest.approx(r1.scores[np.arange(60), r1.labels].sum())
    # type 1 shares the landmark variances between clusters; the round model is isotropic
    r3 = ticlust.fit(x, "shape-kmeans", k=2, device="cpu", type=1, distance="fisher-rao-round")
    assert np.allclose(r3.covariances[0], r3.covariances[1])
    assert np.allclose(r3.covariances[..., 0, 0], r3.covariances[0, 0, 0, 0])
    # predict: new poses of the same shapes land in the same clusters
    moved = np.stack([similar(s, 0.7, 1.5, np.array([3.0, 4.0])) for s in x[:20]])
    assert np.array_equal(ticlust.predict(r1, moved, device="cpu").labels, r1.labels[:20])
    assert np.array_equal(ticlust.predict(r3, x, device="cpu").labels, r3.labels)


def test_degenerate_inputs_give_finite_scores():
    x, _ = sample_landmarks(seed=0, n=10)
    same = np.repeat(MEAN_SHAPE_A[None], 4, axis=0)
    for distance in ("fisher-rao-round", "fisher-rao-diagonal", "wasserstein"):
        for kind in (1, 2):
            for data, k, align in ((x, 1, True), (x[:2], 2, True), (same, 2, False), (same, 2, True)):
                r = ticlust.fit(data, "shape-kmeans", k=k, device="cpu", distance=distance, type=kind, align=align)
                assert np.isfinite(r.scores).all() and np.isfinite(r.history).all()
                assert np.bincount(r.labels, minlength=k).min() >= 1


def test_scale_off_clusters_forms_where_size_differs(similar, size_groups):
    """Two groups of one shape at two sizes: invisible once size is removed, found with scale=False."""
    form, x = size_groups("shape-kmeans", seed=7)
    moved = np.stack([similar(s, -0.9, 1.0, np.array([12.0, 3.0])) for s in x])           # new poses, same sizes
    assert np.array_equal(ticlust.predict(form, moved, device="cpu").labels, form.labels)


def test_result_round_trips_through_npz(tmp_path):
    x, _ = sample_landmarks(seed=0, n=40)
    r = ticlust.fit(x, "shape-kmeans", k=2, device="cpu", distance="wasserstein", combine="l2")
    back = ticlust.load_result(r.save(tmp_path / "shapes.npz"))
    assert np.array_equal(ticlust.predict(back, x, device="cpu").labels, ticlust.predict(r, x, device="cpu").labels)


def test_parameters_are_validated():
    x, _ = sample_landmarks(seed=0, n=20)
    with pytest.raises(InputError, match="distance"):
        ticlust.fit(x, "shape-kmeans", k=2, distance="euclid")
    with pytest.raises(InputError, match="type"):
        ticlust.fit(x, "shape-kmeans", k=2, type=3)
    assert ticlust.fit(x, "shape-kmeans", k=2, device="cpu", type="1").config["type"] == 1
    with pytest.raises(InputError, match="landmarks"):
        ticlust.fit(x[:, :2], "shape-kmeans", k=2)
    bad = x.copy()
    bad[3, 2, 0] = np.nan
    with pytest.raises(InputError, match="NaN"):
        ticlust.fit(bad, "shape-kmeans", k=2)
    r = ticlust.fit(x, "shape-kmeans", k=2, device="cpu")
    with pytest.raises(InputError, match="landmarks"):
        ticlust.predict(r, x[:, :5], device="cpu")


# ---- simulation ---------------------------------------------------------------------------------------
def test_simulation_follows_eq15():
    means = np.stack([MEAN_SHAPE_A, MEAN_SHAPE_B])
    x, y, theta, shift = simulate_shapes(means, n=400, structure="anisotropic", sigma=4.0, sigma_low=0.5, seed=0,
                                         return_pose=True)
    assert x.shape == (400, 8, 2) and np.bincount(y).tolist() == [200, 200]
    assert theta.min() >= 0 and theta.max() < 2 * np.pi and np.abs(shift).max() <= 2.0
    # undo the pose: X Γ^T − γ Γ^T = μ_g + E_i, and E has the structure's standard deviations
    c, s = np.cos(theta), np.sin(theta)
    gamma = np.stack([np.stack([c, -s], -1), np.stack([s, c], -1)], -2)
    noise = np.einsum("nld,ncd->nlc", x - shift[:, None], gamma) - means[y]
    for g, (sx, sy) in enumerate([(4.0, 0.5), (0.5, 0.5)]):
        assert noise[y == g][..., 0].std() == pytest.approx(sx, rel=0.05)
        assert noise[y == g][..., 1].std() == pytest.approx(sy, rel=0.05)
    hetero, yh = simulate_shapes(means, n=400, structure="heteroscedastic", sigma=4.0, sigma_low=0.5, seed=1)
    sds = align_to(hetero[yh == 0], means[0])[0].std(0).mean(1)          # per landmark
    assert (sds > 2.0).sum() == 3                                         # 3 noisy landmarks per cluster
    x2, _ = simulate_shapes(means, n=400, structure="anisotropic", sigma=4.0, sigma_low=0.5, seed=0)
    assert np.array_equal(x, x2)
    with pytest.raises(InputError, match="structure"):
        simulate_shapes(means, structure="wobbly")


# ---- I/O ----------------------------------------------------------------------------------------------
def test_readers_round_trip(tmp_path):
    x, _ = sample_landmarks(seed=1, n=5)
    ids = [f"s{i}" for i in range(5)]
    back, back_ids = read_tps(write_tps(tmp_path / "a.tps", x, ids))
    assert np.array_equal(back, x) and back_ids == ids
    back, back_ids = read_landmarks_csv(write_landmarks_csv(tmp_path / "a.csv", x, ids))
    assert np.array_equal(back, x) and back_ids == ids
    assert np.array_equal(read_landmarks(tmp_path / "a.csv")[0], x)
    coords, sid, lm = landmarks_to_points(x, ids)
    assert np.array_equal(coords[1], x[0, 1, ::-1])                      # (row, col) = (y, x)
    order = np.random.default_rng(0).permutation(len(coords))            # any point order
    back, back_ids = points_to_landmarks(coords[order], sid[order], lm[order])
    assert set(back_ids) == set(ids)
    assert np.array_equal(back[[back_ids.index(i) for i in ids]], x)
    back, _ = points_to_landmarks(coords, sid)                           # no landmark index: point order
    assert np.array_equal(back, x)


def test_tps_file_with_image_and_scale_lines(tmp_path):
    path = tmp_path / "b.tps"
    path.write_text("LM=3\n1 2\n3 4\n5 7\nCURVES=1\nPOINTS=2\n9 9\n8 8\nIMAGE=one.jpg\nSCALE=0.1\n\nLM=3\n0 0\n1 0\n0 1\nIMAGE=two.jpg\nID=7\n")
    x, ids = read_tps(path)
    assert x.shape == (2, 3, 2) and ids == ["one.jpg", "7"] and x[0, 2].tolist() == [5.0, 7.0]


def test_reader_errors_are_one_clear_sentence(tmp_path):
    (tmp_path / "bad.csv").write_text("shape,x,y\n1,2,3\n")
    with pytest.raises(InputError, match="lacks the column"):
        read_landmarks_csv(tmp_path / "bad.csv")
    (tmp_path / "uneven.csv").write_text("shape_id,landmark,x,y\na,0,1,1\na,1,2,1\na,2,2,2\nb,0,1,1\nb,1,2,2\n")
    with pytest.raises(InputError, match="different"):
        read_landmarks_csv(tmp_path / "uneven.csv")
    (tmp_path / "short.tps").write_text("LM=3\n1 2\n3 4\n")
    with pytest.raises(InputError, match="short or malformed"):
        read_tps(tmp_path / "short.tps")
    with pytest.raises(InputError, match="not a landmark file"):
        read_landmarks(tmp_path / "x.txt")
    with pytest.raises(InputError, match="shape_id for every point"):
        points_to_landmarks(np.zeros((6, 2)), [0, 0, 0, 1, 1])
    with pytest.raises(InputError, match="same landmark index twice"):
        points_to_landmarks(np.random.rand(6, 2), [0, 0, 0, 1, 1, 1], [0, 1, 1, 0, 1, 2])


# ---- display geometry ---------------------------------------------------------------------------------
def test_ellipse_corners():
    c = ellipse_corners([1.0, 2.0], np.diag([4.0, 1.0]))
    assert sorted(map(tuple, c.round(9).tolist())) == sorted([(5.0, 4.0), (5.0, 0.0), (-3.0, 4.0), (-3.0, 0.0)])
    # rotated covariance: the box edges follow the eigenvectors, half-lengths 2 sqrt(l_i), cyclic order
    angle = 0.6
    v = np.array([[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]])
    cov = v @ np.diag([9.0, 0.25]) @ v.T
    many = ellipse_corners(np.zeros((3, 5, 2)), np.broadcast_to(cov, (3, 5, 2, 2)))
    assert many.shape == (3, 5, 4, 2)
    box = many[0, 0]
    edges = np.roll(box, -1, axis=0) - box
    lengths = np.sort(np.linalg.norm(edges, axis=1))
    assert lengths == pytest.approx([2.0, 2.0, 12.0, 12.0])
    assert abs(np.dot(edges[0], edges[1])) < 1e-9                          # consecutive edges: a rectangle
    long_edge = edges[np.argmax(np.linalg.norm(edges, axis=1))]
    assert abs(abs(np.dot(long_edge / 12.0, v[:, 0])) - 1) < 1e-9


# ---- acceptance on the paper's simulation (real rat means: slow) -------------------------------------
@pytest.mark.slow
def test_heteroscedastic_simulation_dd2_is_best(shared_datasets):
    rats = np.load(shared_datasets("landmarks_rats.npz"))
    means = np.stack([rats["landmarks"][rats["labels"] == a].mean(0) for a in (0, 1)])
    variants = {"dr": ("fisher-rao-round", 1), "dd1": ("fisher-rao-diagonal", 1),
                "dd2": ("fisher-rao-diagonal", 2), "dw": ("wasserstein", 1)}
    aris = {v: [] for v in variants}
    for rep in range(30):
        x, y = simulate_shapes(means, n=100, structure="heteroscedastic", seed=10_000 + rep)
        for v, (distance, kind) in variants.items():
            r = ticlust.fit(x, "shape-kmeans", k=2, device="cpu", seed=rep, distance=distance, type=kind)
            aris[v].append(ticlust.evaluate(y, r.labels)["ari"])
    medians = {v: float(np.median(a)) for v, a in aris.items()}
    assert medians["dd2"] >= 0.95
    assert medians["dd2"] >= max(medians.values())


def test_progress_total_shrinks_to_the_iterations_the_starts_take():
    """Type I's starts run together: the total is their forecast iterations (× starts) plus Type II's reservation, not
    n_init × max_iter; steps never pass it and Type II follows as its own stage."""
    from ticlust.events import Progress

    x, _ = sample_landmarks(seed=0, n=120)
    events = [e for e in ticlust.run(x, "shape-kmeans", k=2, device="cpu", seed=0) if isinstance(e, Progress)]
    first = [e for e in events if e.stage == "shape K-means (Type I)"]
    second = [e for e in events if e.stage == "shape K-means (Type II)"]
    assert first and second and all(e.step <= e.total for e in first + second)
    assert first[0].total == 10 * 100 + 100 and first[-1].total < first[0].total
    assert first[-1].total == first[-1].step + 100          # the starts' iterations done, then Type II's max_iter
