"""Global rigid alignment (transforms/rigid.py) and rigid-invariant K-means: exact recoveries on small synthetic data."""
import math

import numpy as np
import pytest
import torch

import ticlust
from ticlust.api import align_one
from ticlust.transforms.rigid import aligned_items, angle_count, rigid_search

H = W = 24


def test_angle_count_from_crop_size():
    assert angle_count((28, 28)) == 44 and angle_count((32, 32)) == 52 and angle_count((8, 8)) % 4 == 0


@pytest.mark.parametrize("engine", ["fft", "gemm", "direct"])
def test_recovers_known_angle_flip_and_shift(blob_pattern, posed, engine, one_thread):
    n = 32
    mu = blob_pattern()
    steps = torch.tensor([3, 11, 20, 29])
    flips = torch.tensor([False, True, False, True])
    shifts = torch.tensor([[2.0, -1.0], [0.0, 3.0], [-3.0, -2.0], [1.0, 1.0]])
    x = posed(mu, steps * 2 * math.pi / n, flips, shifts)
    r = rigid_search(x, mu, n_angles=n, flip=True, max_shift=4, engine=engine)
    assert torch.equal(torch.round(r.angle[:, 0] / (2 * math.pi / n)).long(), steps)
    assert torch.equal(r.flip[:, 0], flips)
    assert torch.equal(r.shift[:, 0], shifts)
    # carried back onto the prototype's frame, every item matches it (interpolation error only)
    back = aligned_items(x, r.theta[:, 0])
    assert float(((back - mu) ** 2).sum((1, 2, 3)).max()) < 0.02 * float((mu ** 2).sum())


def test_off_grid_angle_within_one_step_and_no_flip_without_flip(blob_pattern, posed, one_thread):
    n = 24
    mu = blob_pattern(1)
    true = torch.tensor([0.37, 2.9, 5.1])
    x = posed(mu, true, torch.zeros(3, dtype=torch.bool), torch.zeros(3, 2))
    r = rigid_search(x, mu, n_angles=n, max_shift=2)
    err = torch.remainder(r.angle[:, 0] - true + math.pi, 2 * math.pi) - math.pi
    assert float(err.abs().max()) <= 2 * math.pi / n / 2 + 1e-6      # nearest grid angle
    assert not bool(r.flip.any()) and float(r.shift.abs().max()) <= 1.0


def test_engines_and_batches_agree(one_thread):
    torch.manual_seed(0)
    mu = torch.rand(3, 2, 16, 16)                    # two channels: correlations summed over them
    x = torch.rand(7, 2, 16, 16)
    whole = rigid_search(x, mu, n_angles=8, flip=True, max_shift=3, engine="fft", block=7)
    ones = [rigid_search(x[i:i + 1], mu, n_angles=8, flip=True, max_shift=3, engine="gemm", block=1) for i in range(7)]
    for field in ("angle", "flip", "shift"):
        assert torch.equal(getattr(whole, field), torch.cat([getattr(o, field) for o in ones]))
    assert torch.allclose(whole.score, torch.cat([o.score for o in ones]), rtol=1e-4, atol=1e-3)


def test_rigid_kmeans_finds_patterns_at_any_angle(turned_set, one_thread):
    x, y = turned_set()
    r = ticlust.fit(x, "rigid-kmeans", k=3, device="cpu", seed=0, angles=32, max_iter=5)
    assert ticlust.evaluate(y, r.labels)["acc"] == 1.0
    assert r.scores.shape == (36, 3) and r.aligned.shape == x.shape and r.grids.shape[0] == 36
    assert r.params["angle"].shape == (36,) and not r.params["flip"].any()
    # (the distortion is not monotone: poses on a grid, and a mean of bilinear copies is blurrier than the seed item)
    assert r.prototypes.shape == (3, H, W) and len(r.history) >= 1
    p = ticlust.predict(r, x[:5], device="cpu")
    assert np.array_equal(p.labels, r.labels[:5])


def test_rigid_kmeans_flip_option(turned_set, one_thread):
    x, y = turned_set(flip=True, seed=1)
    with_flip = ticlust.fit(x, "rigid-kmeans", k=3, device="cpu", seed=0, angles=32, max_iter=5, flip=True)
    assert ticlust.evaluate(y, with_flip.labels)["acc"] == 1.0
    assert with_flip.params["flip"].any() and not with_flip.params["flip"].all()
    # the inspector's view: the item carried onto each prototype at its best pose, flip included
    warped, scores = align_one(with_flip, x[0], device="cpu")
    assert warped.shape == (3, H, W) and int(np.argmin(scores)) == with_flip.labels[0]


def test_inner_nuclei_kinds_differ_only_inside(one_thread):
    from ticlust.datasets.inner_nuclei import INNER_KINDS, inner_nuclei_field
    from ticlust.objects.crops import objects_from_labels

    f = inner_nuclei_field(n=80, shape=(400, 400), seed=1)
    assert np.bincount(f.kinds[1:]).tolist() == [20] * 4 and f.kind_names == INNER_KINDS
    x, table = objects_from_labels(f.image, f.labels, normalize=True, rescale=True)
    y = f.kind_of(table["label"])
    areas = [table["area"][y == k].mean() for k in range(4)]
    assert max(areas) < 1.15 * min(areas)                     # not told apart by size ...
    raw, _ = objects_from_labels(f.image, f.labels)
    sums = [raw[y == k].astype(float).sum((1, 2)).mean() for k in range(4)]
    assert max(sums) < 1.4 * min(sums)                        # ... nor by total brightness (log-normal per nucleus, 20 of each)
    r = ticlust.fit(x, "rigid-kmeans", k=4, device="cpu", seed=0, runs=3, angles=24, max_iter=6, flip=True)   # Lloyd has local minima: best of 3
    assert ticlust.evaluate(y, r.labels)["acc"] >= 0.85
    assert ticlust.sample("inner-nuclei")[0].shape[1:] == (32, 32)


def test_rigid_pssc_clusters_turned_patterns_and_predicts(turned_set, one_thread):
    x, y = turned_set(n_per=15, flip=True, seed=2)
    r = ticlust.fit(x, "rigid-pssc", k=3, device="cpu", seed=0, flip=True, rigid_angles=24, rigid_iter=5, pca_dim=20,
                    poc=0, clustering="kmeans")   # POC drops the leading directions: on 3 tiny clusters those are the kinds
    assert ticlust.evaluate(y, r.labels)["acc"] == 1.0
    assert r.state.rigid_centers.shape == (3, 1, H, W) and r.state.rigid_frames.shape == (3, 6)
    assert r.aligned.shape == x.shape
    p = ticlust.predict(r, x[:6], device="cpu")
    assert np.array_equal(p.labels, r.labels[:6])


def test_invariant_scattering_ignores_quarter_turns(blob_pattern, turned_set, one_thread):
    from ticlust.features.invariant_scattering import invariant_features
    from ticlust.features.scattering import FastScattering2D

    op = FastScattering2D((32, 32), 2, 8, 2)
    img = blob_pattern(5, 32)[0, 0]
    other = blob_pattern(6, 32)[0, 0]
    s = op(torch.stack([img, torch.rot90(img, 1), other]))
    f = invariant_features(s, 2, 8, 2, 4)
    s_raw = s.flatten(1)
    # a quarter turn is 4 orientation steps: the features barely move (subsampling grids are not turned exactly),
    # far less than the raw coefficients do, and far less than another pattern's differ
    turned = float((f[1] - f[0]).norm() / f[0].norm())
    assert turned < 0.15 and turned < 0.5 * float((s_raw[1] - s_raw[0]).norm() / s_raw[0].norm())
    assert turned < 0.5 * float((f[2] - f[0]).norm() / f[0].norm())
    x, y = turned_set(n_per=10, seed=3)
    r = ticlust.fit(x, "pssc", k=3, device="cpu", seed=0, rotation_invariant=True, pad_to=24, scales=2, pca_dim=20, poc=0,
                    clustering="kmeans")
    assert r.labels.shape == (30,)


def test_rigid_start_poses_turned_copies_and_never_loses_the_previous_warp(blob_pattern, posed, one_thread):
    from ticlust.kernels.aligned_lloyd import rigid_start
    from ticlust.transforms.align import Aligner, Alignments

    mu = torch.cat([blob_pattern(2), blob_pattern(3)])
    x = torch.cat([posed(mu[:1], [2.0], [True], [[1.0, 0.0]]), posed(mu[1:], [4.0], [False], [[0.0, -1.0]])])
    aligner = Aligner((H, W), 3, "cpu")                     # affine + TPS: the start's displacements are zero
    prev = aligner.zeros(2, 2)
    identity = aligner.pair_losses(x, mu, prev)
    start = rigid_start(aligner, aligner.pyramid(x), aligner.pyramid(mu), prev, flip=True)
    assert start.nu is not None and float(start.nu.abs().max()) == 0
    own = start.losses[[0, 1], [0, 1]]
    assert float(own.max()) < 0.05 * float((mu ** 2).sum((1, 2, 3)).min())   # turned (and mirrored) back: a close fit
    assert bool((own < 0.2 * identity[[0, 1], [0, 1]]).all())
    assert torch.allclose(start.losses, aligner.pair_losses(x, mu, Alignments(start.theta, start.nu)))
    # a previous warp that fits better than any rigid pose is kept
    exact = Alignments(start.theta.clone(), start.nu.clone())
    exact.theta[0, 0] += 0.01
    better = rigid_start(aligner, aligner.pyramid(x), aligner.pyramid(mu), exact, flip=True)
    assert bool((better.losses <= aligner.pair_losses(x, mu, exact) + 1e-6).all())


@pytest.mark.parametrize("method", ["ai-kmeans", "st-kmeans"])
def test_ai_st_kmeans_rigid_start_finds_turned_and_mirrored_patterns(turned_set, method, one_thread):
    x, y = turned_set(flip=True, seed=1)
    opts = dict(k=3, device="cpu", seed=0, max_iter=5, steps=10, affine_steps=10)
    plain = ticlust.fit(x, method, **opts)
    assert ticlust.evaluate(y, plain.labels)["acc"] < 0.9     # from the identity a half turn or a mirror is not undone
    r = ticlust.fit(x, method, start="rigid+flip", **opts)
    assert ticlust.evaluate(y, r.labels)["acc"] == 1.0
    assert r.final_loss < 0.2 * plain.final_loss
    p = ticlust.predict(r, x[:8], device="cpu")               # predict starts from the same rigid poses
    assert np.array_equal(p.labels, r.labels[:8])


def test_dti_rigid_start_turns_prototypes_onto_items(blob_pattern, posed, one_thread):
    from ticlust.methods.dti import DTIKMeansConfig, _posed as dti_posed, _rigid_poses

    mu = torch.cat([blob_pattern(2), blob_pattern(3)])
    x = posed(mu[:1], [2.5], [True], [[1.0, -1.0]])[:, 0]                  # prototype 0 turned, mirrored, shifted
    assert _rigid_poses(DTIKMeansConfig(), x[:, None], mu) is None       # identity: the prototypes as they are
    poses = _rigid_poses(DTIKMeansConfig(start="rigid+flip"), x[:, None], mu)
    turned = dti_posed(mu, poses)                                         # (1 item, 2 prototypes, C, H, W)
    assert turned.shape == (1, 2, 1, H, W)
    assert float(((turned[0, 0] - x) ** 2).sum()) < 0.05 * float((x ** 2).sum())


@pytest.mark.slow
def test_dti_kmeans_rigid_start_finds_turned_and_mirrored_patterns(turned_set, one_thread):
    opts = dict(k=3, device="cpu", seed=0, invariances="rigid", max_epochs=8, min_stage_epochs=2, patience=1,
                final_epochs=1, batch_size=16)
    xs, y = turned_set(n_per=16, flip=True, seed=1)
    plain = ticlust.fit(xs, "dti-kmeans", **opts)
    r = ticlust.fit(xs, "dti-kmeans", start="rigid+flip", **opts)
    assert ticlust.evaluate(y, r.labels)["acc"] >= 0.8 > ticlust.evaluate(y, plain.labels)["acc"]
    assert r.final_loss < 0.5 * plain.final_loss
    p = ticlust.predict(r, xs[:8], device="cpu")                          # inference turns the prototypes the same way
    assert np.array_equal(p.labels, r.labels[:8])


def test_rigid_kmeans_refine_keeps_searching_the_rigid_pose(turned_set, one_thread):
    x, y = turned_set(flip=True, seed=1)
    r = ticlust.fit(x, "rigid-kmeans", k=3, device="cpu", seed=0, angles=32, max_iter=5, flip=True, refine="deformable",
                    refine_iter=2)
    assert ticlust.evaluate(y, r.labels)["acc"] == 1.0
    assert r.params["flip"].any() and r.params["displacements"].shape == (36, 16, 2)
    assert 0 < r.timing["rigid_s"] < r.timing["fit_s"]


def test_ward_groups_weighs_cluster_sizes():
    from ticlust.methods.rigid_kmeans import ward_groups
    # four centroids on a line at 0, 1, 10, 12: two big clusters 1 apart, two single items 2 apart
    pos = np.array([0.0, 1.0, 10.0, 12.0])
    d2 = (pos[:, None] - pos[None]) ** 2
    sizes = np.array([100, 100, 1, 1])
    g = ward_groups(d2, sizes, 3)             # joining the two singles raises the sum of squares least (2 < 50)
    assert g[2] == g[3] and len({g[0], g[1], g[2]}) == 3
    g = ward_groups(d2, sizes, 2)
    assert g[0] == g[1] and g[2] == g[3] and g[0] != g[2]
    assert ward_groups(d2, sizes, 4).tolist() == [0, 1, 2, 3]


@pytest.fixture
def styled_set(blob_pattern, posed):
    """``styled_set(seed)``: three kinds at random angles; kind 0 (32 items) comes in two styles (the second with
    one more spot), kinds 1 and 2 have 6 items each."""
    def make(seed: int):
        rng = np.random.default_rng(seed)
        base = blob_pattern(2)
        yy, xx = np.mgrid[0:H, 0:W]
        other_style = base + 0.5 * torch.from_numpy(np.exp(-((yy - 5) ** 2 + (xx - 12) ** 2) / 4.0).astype(np.float32))
        xs, ys = [], []
        for mu, label, n in ((base, 0, 16), (other_style, 0, 16), (blob_pattern(3), 1, 6), (blob_pattern(4), 2, 6)):
            xs.append(posed(mu, rng.uniform(0, 2 * math.pi, n), np.zeros(n, bool), rng.integers(-1, 2, (n, 2)).astype(np.float32))[:, 0].numpy())
            ys += [label] * n
        return np.concatenate(xs), np.asarray(ys)
    return make


def test_rigid_kmeans_overcluster_keeps_two_styles_of_one_kind_together(styled_set, one_thread):
    x, y = styled_set(seed=1)
    opts = dict(k=3, device="cpu", seed=5, angles=32, max_iter=5)
    # with K prototypes, this seed spends two on kind 0's styles and lets kinds 1 and 2 share one (since the greedy
    # seeding, most seeds find the three kinds with K alone: seeds 0-4 do here)
    assert ticlust.evaluate(y, ticlust.fit(x, "rigid-kmeans", **opts).labels)["acc"] < 1.0
    merged = ticlust.fit(x, "rigid-kmeans", overcluster=3, **opts)
    assert ticlust.evaluate(y, merged.labels)["acc"] == 1.0
    assert merged.prototypes.shape == (3, H, W) and merged.scores.shape == (len(y), 3)
    # the labels are the merged prototypes' own assignments, so predict agrees with the fit
    assert np.array_equal(ticlust.predict(merged, x, device="cpu").labels, merged.labels)


def test_rigid_kmeans_progress_names_each_batch_and_forecasts_its_iterations(turned_set, one_thread, monkeypatch):
    """Progress: a Progress per k-means++ seed, then one per batch searched, every Lloyd event one stage up to its numbers
    (so an ETA comes within the first iteration), a total of the iterations the labels' changes forecast (the run
    stops well before max_iter = 20: the last total is the steps done), and with a refinement to follow, its
    iterations counted in the ETA as the steps still to come after the rigid stage's (``Progress.later``). The same labels as a search of every item at once."""
    from ticlust.core import execute
    from ticlust.events import Progress
    from ticlust.methods.base import MAP_STAGE

    monkeypatch.setattr(execute, "ETA_MIN_SECONDS", 0.0)
    x, y = turned_set()
    events = list(ticlust.run(x, "rigid-kmeans", k=3, device="cpu", seed=0, angles=32, max_iter=20, batch_size=8))
    fit = [e for e in events if isinstance(e, Progress) and e.stage != MAP_STAGE]
    assert [e.stage for e in fit[:3]] == ["rigid k-means++ seeds"] * 3 and [e.step for e in fit[:3]] == [1, 2, 3]
    lloyd = fit[3:]
    keys = {"".join(c for c in e.stage if not c.isdigit()) for e in lloyd}
    assert keys == {"Lloyd iteration  (rigid search): / batches searched"}
    first = [e for e in lloyd if e.stage.startswith("Lloyd iteration 1 ")]
    assert [e.step for e in first] == [0, 1, 2, 3, 4, 5, 5] and first[3].eta is not None   # 36 items: 5 batches
    assert [e.step for e in lloyd] == sorted(e.step for e in lloyd) and all(e.step <= e.total for e in lloyd)
    assert lloyd[-1].step == lloyd[-1].total < 20 * 5 and lloyd[0].total == 20 * 5
    result = events[-1].result
    assert lloyd[-1].step == result.timing["iterations"] * 5
    whole = ticlust.fit(x, "rigid-kmeans", k=3, device="cpu", seed=0, angles=32, max_iter=20)
    assert np.array_equal(whole.labels, result.labels) and np.allclose(whole.prototypes, result.prototypes, atol=1e-6)
    refined = [e for e in ticlust.run(x, "rigid-kmeans", k=3, device="cpu", seed=0, angles=32, max_iter=20, batch_size=8,
                                      refine="affine", refine_iter=2) if isinstance(e, Progress)]
    rigid = [e for e in refined if "(rigid search)" in e.stage]
    assert rigid[0].total == 20 * 5 and rigid[-1].total == rigid[-1].step                   # the rigid stage's own steps
    assert all(e.later == 2 * 5 for e in rigid) and rigid[3].eta is not None    # and the refinement still to come
    assert any(e.stage.startswith("Lloyd iteration 1 (affine warps") for e in refined)
