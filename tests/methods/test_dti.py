"""DTI K-means / DTI GMM: losses, batched heads, the curriculum, reassignment, results and predict."""

import numpy as np
import pytest
import torch

import ticlust
from ticlust.errors import InputError
from ticlust.metrics import hungarian_accuracy
from ticlust.methods import dti
from ticlust.kernels import own_and_runner_up
from ticlust.methods.dti.net import BatchedMLP

FAST = dict(max_epochs=2, min_stage_epochs=1, patience=1, final_epochs=1, batch_size=32, threads=1)


pytestmark = pytest.mark.usefixtures("one_thread")


def shapes(n=64, s=16, seed=0):
    """Rings and bars at random positions (labels 0 / 1), values in [0, 1]."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:s, 0:s]
    imgs, labels = [], []
    for i in range(n):
        cy, cx = rng.uniform(s / 2 - 2, s / 2 + 2, 2)
        if i % 2 == 0:
            img = np.clip(1 - np.abs(np.hypot(yy - cy, xx - cx) - s * 0.22), 0, 1)
        else:
            img = ((np.abs(yy - cy) < 1.2) & (np.abs(xx - cx) < s * 0.28)).astype(float)
        imgs.append(img)
        labels.append(i % 2)
    return np.stack(imgs).astype(np.float32), np.array(labels)


@pytest.fixture(scope="module")
def tiny():
    return shapes()


def test_dti_kmeans_result_fields(tiny):
    x, _ = tiny
    r = ticlust.fit(x, method="dti-kmeans", k=4, seed=0, **FAST)
    assert r.labels.shape == (64,) and r.scores.shape == (64, 4)
    assert np.array_equal(r.labels, r.scores.argmin(1))
    assert r.prototypes.shape == (4, 16, 16)
    assert r.aligned.shape == (64, 16, 16) and r.aligned_kind == "prototype-on-item"
    assert r.grids.shape == (64, 10, 10, 2)
    assert r.params["affine"].shape == (64, 2, 3) and r.params["morpho"].shape == (64, 50)
    assert r.params["tps"].shape == (64, 16, 2)
    assert np.isfinite(r.history).all() and len(r.history) == r.timing["epochs"] + 1
    # the aligned prototype's distance to its item is the item's score
    d = ((r.aligned - x / x.max()) ** 2).mean((1, 2))
    assert np.allclose(d, r.scores[np.arange(64), r.labels], atol=1e-5)


def test_same_seed_same_result_and_input_untouched(tiny):
    x, _ = tiny
    before = x.copy()
    a = ticlust.fit(x, method="dti-kmeans", k=3, seed=5, **FAST)
    b = ticlust.fit(x, method="dti-kmeans", k=3, seed=5, **FAST)
    assert np.array_equal(a.labels, b.labels) and np.allclose(a.prototypes, b.prototypes)
    assert np.array_equal(x, before)


def test_predict_and_save_load_round_trip(tiny, tmp_path):
    x, _ = tiny
    r = ticlust.fit(x, method="dti-gmm", k=3, seed=1, **FAST)
    assert r.responsibilities.shape == (64, 3) and np.allclose(r.responsibilities.sum(1), 1, atol=1e-5)
    assert r.extras["variances"].min() >= 0.25 ** 2 - 1e-7
    path = r.save(tmp_path / "dti.npz")
    back = ticlust.load_result(path)
    p = ticlust.predict(back, x)
    assert np.array_equal(p.labels, r.labels)
    assert np.allclose(p.scores, r.scores, rtol=1e-4, atol=1e-3)
    assert p.aligned.shape == r.aligned.shape
    with pytest.raises(InputError):
        ticlust.predict(back, np.zeros((3, 20, 20), np.float32) + np.arange(20, dtype=np.float32))


def test_colour_images_use_colour_modules():
    rng = np.random.default_rng(0)
    x = rng.random((24, 12, 12, 3)).astype(np.float32)
    r = ticlust.fit(x, method="dti-kmeans", k=2, seed=0, **FAST)
    assert set(r.params) == {"color", "affine", "tps"} and r.params["color"].shape == (24, 6)
    assert r.prototypes.shape == (2, 12, 12, 3) and r.aligned.shape == (24, 12, 12, 3)


@pytest.fixture
def two_threads(one_thread):
    """torch set to 2 threads for the test (restored by one_thread): a count that a fit with threads=1 changes."""
    torch.set_num_threads(2)
    return 2


def test_threads_setting_lasts_only_for_the_fit(tiny, two_threads):
    x, _ = tiny
    ticlust.fit(x, method="dti-kmeans", k=2, seed=0, **FAST)   # threads=1
    assert torch.get_num_threads() == two_threads
    with pytest.raises(InputError):   # raised inside training, after the count was set
        ticlust.fit(x, method="dti-kmeans", k=2, curriculum="milestones", milestones="5,3", threads=1)
    assert torch.get_num_threads() == two_threads


def test_input_errors(tiny):
    x, _ = tiny
    with pytest.raises(InputError):
        ticlust.fit(np.random.rand(20, 30), method="dti-kmeans", k=2)
    with pytest.raises(InputError):
        ticlust.fit(x, method="dti-kmeans", k=2, transforms="auto,affine")
    with pytest.raises(InputError):
        ticlust.fit(x, method="dti-kmeans", k=2, transforms="shear")
    with pytest.raises(InputError):
        ticlust.fit(x, method="dti-kmeans", k=2, curriculum="milestones", milestones="5,3")
    with pytest.raises(InputError):
        ticlust.fit(np.random.rand(10, 6, 6), method="dti-kmeans", k=2)


def test_model_starts_as_the_identity():
    torch.manual_seed(0)
    model = dti.DTIModel(dti.DTIKMeansConfig(k=3), 1, (16, 16), ("affine", "morpho", "tps"))
    model.prototypes.data.uniform_()
    x = torch.rand(5, 1, 16, 16)
    params = model.predict_params(x, 3)
    assert all(float(p.abs().max()) == 0 for p in params)
    out = model.transform(model.prototypes[None], params, 3)
    assert torch.allclose(out, model.prototypes[None].expand(5, -1, -1, -1, -1), atol=1e-6)


def test_batched_heads_equal_one_mlp_per_cluster():
    """Head k of the stacked weights is the plain MLP relu(relu(f·W1ₖ + b1ₖ)·W2ₖ + b2ₖ)·W3ₖ + b3ₖ, on its own."""
    torch.manual_seed(0)
    batched = BatchedMLP(4, 8, 6)
    with torch.no_grad():
        batched.w3.normal_()
        batched.b3.normal_()
    f = torch.randn(7, 8)
    out = batched(f)
    assert out.shape == (7, 4, 6)
    for k in range(4):
        h = torch.relu(f @ batched.w1[k] + batched.b1[k])
        h = torch.relu(h @ batched.w2[k] + batched.b2[k])
        assert torch.allclose(out[:, k], h @ batched.w3[k] + batched.b3[k], atol=1e-5)


def test_winner_only_graph_gives_the_gradient_of_eq4():
    """The K-means step re-runs only each item's closest prototype with a graph: same loss, same gradients."""
    torch.manual_seed(1)
    model = dti.DTIModel(dti.DTIKMeansConfig(k=3), 1, (12, 12), ("affine", "morpho", "tps"))
    with torch.no_grad():
        model.prototypes.uniform_()
        for h in model.heads:
            h.w3.normal_(std=0.01)
    x = torch.rand(6, 1, 12, 12)
    w = torch.ones(12, 12)
    cfg = dti.DTIKMeansConfig()
    loss, _, _, _ = dti._step(model, x, 3, w, False, False, cfg)
    grads = torch.autograd.grad(loss, [model.prototypes, model.heads[0].w3, model.heads[2].w1])
    params = model.predict_params(x, 3)
    full = dti.weighted_mse(x[:, None], model.transform(model.prototypes[None], params, 3), w).min(1).values.mean()
    ref = torch.autograd.grad(full, [model.prototypes, model.heads[0].w3, model.heads[2].w1])
    assert torch.allclose(loss, full, atol=1e-7)
    for g, r in zip(grads, ref):
        assert torch.allclose(g, r, atol=1e-6, rtol=1e-4)


def test_gmm_loglik_matches_closed_form():
    from scipy.stats import norm

    rng = np.random.default_rng(0)
    x = torch.from_numpy(rng.random((2, 1, 1, 3, 3)))
    mu = torch.from_numpy(rng.random((2, 4, 1, 3, 3)))
    var = torch.from_numpy(rng.random((2, 4, 1, 3, 3)))
    got = dti.gmm_loglik(x, mu, var, 0.25, torch.ones(3, 3, dtype=torch.float64)).numpy()
    sd = np.sqrt(var.numpy() + 0.0625)
    ref = norm.logpdf(x.numpy(), mu.numpy(), sd).reshape(2, 4, -1).sum(-1)
    assert np.allclose(got, ref)


@pytest.mark.parametrize("init", ["k-means++", "random"])
def test_initial_prototypes_are_distinct_images_of_the_stack(init):
    # two tight groups of 50 images: k-means++ must start one prototype in each; both inits pick real images
    rng = np.random.default_rng(0)
    x = torch.from_numpy(np.concatenate([rng.normal(0, 0.01, (50, 1, 8, 8)), rng.normal(1, 0.01, (50, 1, 8, 8))])).float()
    for seed in range(5):
        protos = dti.initial_prototypes(x, 2, init, np.random.default_rng(seed))
        assert protos.shape == (2, 1, 8, 8)
        assert all(any(torch.equal(p, item) for item in x) for p in protos)
        if init == "k-means++":
            assert sorted(float(p.mean() > 0.5) for p in protos) == [0.0, 1.0]


def test_reassignment_copies_prototype_head_and_adam_state():
    torch.manual_seed(0)
    model = dti.DTIModel(dti.DTIKMeansConfig(k=3), 1, (8, 8), ("affine",))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    model.prototypes.data.uniform_()
    loss = model.predict_params(torch.rand(4, 1, 8, 8), 1)[0].pow(2).sum() + model.prototypes.pow(2).sum() \
        + model.heads[0].w3.sum() * 1.0
    loss.backward()
    opt.step()
    moved = dti.reassign_tiny_clusters(model, opt, np.array([50, 2, 48]), 0.2, 1e-3, torch.Generator().manual_seed(0))
    assert moved == [(1, 0)]
    h = model.heads[0]
    assert torch.equal(h.w1[1], h.w1[0]) and torch.equal(h.w3[1], h.w3[0])
    assert torch.equal(opt.state[h.w1]["exp_avg"][1], opt.state[h.w1]["exp_avg"][0])
    assert torch.equal(opt.state[model.prototypes]["exp_avg_sq"][1], opt.state[model.prototypes]["exp_avg_sq"][0])
    diff = (model.prototypes[1] - model.prototypes[0]).detach()
    assert 0 < float(diff.abs().max()) < 0.01
    assert dti.reassign_tiny_clusters(model, opt, np.array([34, 33, 33]), 0.2, 1e-3, torch.Generator()) == []


def test_split_moves_the_cheapest_prototype_onto_the_worst_cluster():
    torch.manual_seed(0)
    model = dti.DTIModel(dti.DTIKMeansConfig(k=3), 1, (8, 8), ("affine",))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    model.prototypes.data.uniform_()
    counts = np.array([40, 20, 40])
    removal = np.array([5.0, 0.4, 4.0])     # prototype 1's members fit another prototype almost as well (median 4)
    distortion = np.array([1.0, 0.2, 3.0])  # cluster 2 fits worst
    gen = torch.Generator().manual_seed(0)
    assert dti.split_redundant_cluster(model, opt, removal, distortion, counts, 0.05, 1e-3, gen) is None  # 0.4 ≥ 0.05·4
    assert dti.split_redundant_cluster(model, opt, removal, distortion, counts, 0.0, 1e-3, gen) is None  # off
    # the pair of the previous move is still separating: not dropped (then 2 costs 4 ≥ 0.5·4)
    assert dti.split_redundant_cluster(model, opt, removal, distortion, counts, 0.5, 1e-3, gen, keep=(1, 0)) is None
    before = model.prototypes.detach().clone()
    assert dti.split_redundant_cluster(model, opt, removal, distortion, counts, 0.5, 1e-3, gen) == (1, 2)
    after = model.prototypes.detach()
    assert torch.equal(after[0], before[0]) and torch.equal(after[2], before[2])
    assert 0 < float((after[1] - before[2]).abs().max()) < 0.01
    assert torch.equal(model.heads[0].w1[1], model.heads[0].w1[2])
    # an empty cluster is skipped (the tiny-cluster rule re-seeds it): dropping 2 costs 4 ≥ 0.5·median(5, 4)
    assert dti.split_redundant_cluster(model, opt, removal, distortion, np.array([40, 0, 40]), 0.5, 1e-3, gen) is None


def test_own_and_runner_up_costs():
    d = torch.tensor([[0.1, 0.5, 0.3], [0.9, 0.2, 0.4]])
    own, runner_up, index = own_and_runner_up(d, torch.tensor([0, 2]))
    assert torch.allclose(own, torch.tensor([0.1, 0.4])) and torch.allclose(runner_up, torch.tensor([0.3, 0.2]))
    assert index.tolist() == [2, 1]


def glyphs(kinds, n, s=16):
    """n images cycling through ``kinds`` (ring, disk, bar, column, plus), jittered by up to half a pixel; labels i % len(kinds)."""
    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[0:s, 0:s]
    imgs = []
    for i in range(n):
        cy, cx = rng.uniform(-0.5, 0.5, 2) + s / 2
        r = np.hypot(yy - cy, xx - cx)
        bar = (np.abs(yy - cy) < 1.5) & (np.abs(xx - cx) < s * 0.35)
        column = (np.abs(xx - cx) < 1.5) & (np.abs(yy - cy) < s * 0.35)
        drawn = dict(ring=np.clip(1 - np.abs(r - s * 0.3), 0, 1), disk=r < s * 0.2, bar=bar, column=column, plus=bar | column)
        imgs.append(drawn[kinds[i % len(kinds)]])
    return np.stack(imgs).astype(np.float32), np.arange(n) % len(kinds)


def test_split_targets_the_cluster_of_two_patterns_and_holds_its_halves_apart():
    """Prototype 1 sits between the bars and the columns, prototypes 0 and 2 are two rings. The
    cluster of two patterns gains most from a second prototype; the move copies it into the redundant
    prototype and holds one pattern in each copy for ``split_hold`` epochs, then frees them."""
    from ticlust.core.validation import as_stack
    x, y = glyphs(("ring", "bar", "column"), 60)
    cfg = dti.DTIKMeansConfig(k=3, transforms=("color", "affine"), curriculum="milestones", milestones=(1, 2, 9),
                              max_epochs=10, split_hold=2)
    run = dti.DTIRun(as_stack(x), cfg, torch.device("cpu"), 0, False)
    with torch.no_grad():
        run.model.prototypes.copy_(torch.from_numpy(np.stack([x[0], (x[1] + x[2]) / 2, x[3]]))[:, None])
    run.curriculum.active = 1
    gains, halves = run.cluster_halves()
    members, second = (h.numpy() for h in halves[1])
    assert int(np.argmax(gains)) == 1 and set(y[members]) == {1, 2} and len(members) == 40
    assert set(y[second]) in ({1}, {2}) and len(second) == 20
    labels = torch.zeros(60, dtype=torch.int64)
    for c, (items, _) in halves.items():
        labels[items] = c
    tally = dti.EpochTally(3, torch.device("cpu"))
    tally.add(labels, torch.zeros(60), torch.tensor([0.5, 1.0, 0.001])[labels])   # dropping 2 costs little
    run.epoch, run.history = 2, [1.0, 1.0]
    run.end_epoch(tally)                                    # epoch 2: the second module comes in
    a, j = run.splits[-1][1:]
    assert (a, j) == (2, 1) and run.held_until == 4
    held = run.pinned.numpy()
    assert set(held[y == 0]) == {-1} and {tuple(sorted(set(held[y == d]))) for d in (1, 2)} == {(a,), (j,)}
    run.epoch, run.history = 3, run.history + [1.0]
    run.end_epoch(dti.EpochTally(3, torch.device("cpu")))
    assert run.pinned is not None
    run.epoch, run.history = 4, run.history + [1.0]
    run.end_epoch(dti.EpochTally(3, torch.device("cpu")))
    assert run.pinned is None and run.held_until == 0


def test_split_gains_of_a_large_set_come_from_a_sample(monkeypatch):
    """Above SPLIT_SAMPLE_BYTES of residuals the clusters are bisected on a seeded sample of the items."""
    from ticlust.core.validation import as_stack
    x, y = glyphs(("ring", "bar", "column"), 60)
    monkeypatch.setattr(dti, "SPLIT_SAMPLE_BYTES", 4 * 16 * 16 * 30)       # 30 items of 16 × 16

    def halves(seed):
        run = dti.DTIRun(as_stack(x), dti.DTIKMeansConfig(k=2, transforms=("affine",)), torch.device("cpu"), seed, False)
        with torch.no_grad():
            run.model.prototypes.copy_(torch.from_numpy(np.stack([x[0], (x[1] + x[2]) / 2]))[:, None])
        run.curriculum.active = 1
        gains, by_cluster = run.cluster_halves()
        return gains, {c: [h.tolist() for h in pair] for c, pair in by_cluster.items()}
    gains, by_cluster = halves(0)
    assert sum(len(members) for members, _ in by_cluster.values()) == 30 and int(np.argmax(gains)) == 1
    assert set(y[by_cluster[1][1]]) in ({1}, {2})
    assert halves(0)[1] == by_cluster and halves(1)[1] != by_cluster


def test_split_move_frees_a_prototype_that_started_on_a_taken_pattern(monkeypatch):
    """K-means' classic trap: two prototypes start on the rings, one between the pluses and the bars.

    No affine map turns a ring into a disk or a bar into a plus, so without the move pluses and bars
    stay merged; before the second module the move drops one ring prototype and splits them."""
    x, y = glyphs(("ring", "disk", "plus", "bar"), 128)
    monkeypatch.setattr(dti, "initial_prototypes", lambda x_all, k, init, rng:
                        torch.cat([x_all[[0, 4, 1]], (x_all[[2]] + x_all[[3]]) / 2]))
    opts = dict(k=4, seed=0, transforms=("color", "affine"), max_epochs=40, min_stage_epochs=4, patience=2,
                final_epochs=2, batch_size=16, threads=1)
    off = ticlust.fit(x, method="dti-kmeans", split_ratio=0.0, **opts)
    on = ticlust.fit(x, method="dti-kmeans", **opts)
    assert len(off.extras["splits"]) == 0 and len(on.extras["splits"]) == 1
    assert hungarian_accuracy(y, off.labels) <= 0.75
    assert hungarian_accuracy(y, on.labels) == 1.0


def test_plateau_curriculum():
    cfg = dti.DTIKMeansConfig(patience=2, plateau_tol=0.01, min_stage_epochs=3, final_epochs=2, max_epochs=100)
    cur = dti.Curriculum(cfg, 2)
    losses = [1.0, 0.9, 0.8, 0.8, 0.8, 0.8,   # windows of 2: no gain by epoch 6 → module 1
              0.7, 0.69, 0.7, 0.7,             # module 2 at epoch 10 (noise within 1 %)
              0.7, 0.7, 0.7, 0.7,              # lr drop at epoch 14
              0.6, 0.6]                        # two final epochs → done
    changes = {}
    for e, loss in enumerate(losses, 1):
        c = cur.update(e, loss)
        if c:
            changes[e] = c
        if cur.done:
            break
    assert changes == {6: "module", 10: "module", 14: "lr"} and cur.done and e == 16


def test_milestone_curriculum():
    cfg = dti.DTIKMeansConfig(curriculum="milestones", milestones=(2, 4, 6), max_epochs=8)
    cur = dti.Curriculum(cfg, 2)
    out = [cur.update(e, 1.0) for e in range(1, 9)]
    assert out == [None, "module", None, "module", None, "lr", None, None] and cur.done


@pytest.mark.slow
def test_dti_beats_pixel_kmeans_on_translated_shapes():
    """Two shapes at random positions: DTI with affine alignment separates them; clustering is the point."""
    x, labels = shapes(64)
    pixel = ticlust.fit(x, method="kmeans", k=2, seed=0)
    r = ticlust.fit(x, method="dti-kmeans", k=2, seed=0, transforms="affine", curriculum="milestones",
                    milestones=(1, 18), max_epochs=19, batch_size=16, threads=1, encoder_width=0.25)
    acc = ticlust.evaluate(labels, r.labels)["acc"]
    assert acc >= 0.9 > ticlust.evaluate(labels, pixel.labels)["acc"], acc


def test_inspector_alignment_matches_the_fit(tiny):
    """Every prototype aligned onto one image, as the napari inspector shows it, agrees with the fit."""
    from ticlust.api import align_one

    x, _ = tiny
    r = ticlust.fit(x, method="dti-kmeans", k=4, seed=0, **FAST)
    aligned, scores = align_one(r, x[3], device="cpu")
    assert aligned.shape == (4, 16, 16)
    np.testing.assert_allclose(scores, r.scores[3], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(aligned[r.labels[3]], r.aligned[3], atol=1e-5)


def test_large_batches_scale_and_warm_up_the_learning_rate(tiny):
    """Batches above 128 (a GPU's) train at lr × batch/128 after a linear warm-up; 128 and below are untouched."""
    from ticlust.methods.dti import DTIKMeansConfig, DTIRun
    from ticlust.core.validation import as_stack

    x, _ = tiny
    big = np.concatenate([x] * (300 // len(x) + 1))[:300]
    stack = as_stack(big)
    run = DTIRun(stack, DTIKMeansConfig(k=3, batch_size=256, warmup_epochs=1, max_epochs=3), torch.device("cpu"), 0, False)
    assert run.lr == pytest.approx(2e-3) and run.warmup_steps == 2
    steps = iter(run.run_epoch())
    next(steps)
    assert run.optimizer.param_groups[0]["lr"] == pytest.approx(1e-3)           # half-way through the warm-up
    for _ in steps:
        pass
    assert run.optimizer.param_groups[0]["lr"] == pytest.approx(2e-3)
    small = DTIRun(stack, DTIKMeansConfig(k=3, batch_size=128), torch.device("cpu"), 0, False)
    assert small.lr == 1e-3 and small.warmup_steps == 0


def test_cpu_bfloat16_fit_is_opt_in_and_needs_native_bfloat16(tiny, monkeypatch):
    """The fit's network runs under bfloat16 autocast on the CPU only when asked (cpu_bfloat16_fit, with
    mixed_precision) and where the CPU computes bfloat16 natively: by default the fit is float32 on every CPU,
    so a seed gives the same run on any machine."""
    from ticlust.methods.dti import DTIKMeansConfig, DTIRun
    from ticlust.core.validation import as_stack

    stack = as_stack(tiny[0])

    def autocast(native, **changes):
        monkeypatch.setattr(dti, "cpu_bfloat16", lambda: native)
        return DTIRun(stack, DTIKMeansConfig(k=2, **changes), torch.device("cpu"), 0, False).autocast

    assert not autocast(True)
    assert not autocast(False, cpu_bfloat16_fit=True)
    assert not autocast(True, cpu_bfloat16_fit=True, mixed_precision=False)
    assert autocast(True, cpu_bfloat16_fit=True)


def test_stride_two_encoder_reads_half_resolution_and_folds_exactly():
    """encoder_stride=2: every stage of ResNet-20 works at half the resolution, and predict's folded encoder
    (batch norms in the convolutions) keeps the stride, so it gives the trained encoder's features."""
    from ticlust.methods.dti.net import InferenceEncoder, ResNetEncoder

    torch.manual_seed(0)
    encoder = ResNetEncoder(1, "resnet20", stride=2)
    x = torch.rand(6, 1, 28, 28)
    encoder(x)                      # a training pass: running statistics that are not the identity
    encoder.eval()
    assert encoder.stem(x).shape[-2:] == (14, 14) and encoder(x).shape == (6, 64)
    torch.testing.assert_close(InferenceEncoder(encoder)(x), encoder(x), atol=1e-4, rtol=1e-4)
    default = dti.DTIModel(dti.DTIKMeansConfig(k=2), 1, (28, 28), ("affine",))
    assert default.encoder.stem[0].stride == (1, 1)


def test_progress_names_every_curriculum_stage_in_full_then_aligning_and_the_object_map(tiny):
    """The curriculum's stage names are whole (the last one was cut at 32 characters, '… (lr/1'), the alignment of
    every image after training counts its batches to the end, and the object map (DTI's inverse warps: as long as a
    short training) is a stage of its own that ends at its total."""
    from ticlust.events import Progress
    from ticlust.methods.base import MAP_STAGE

    x, _ = tiny
    events = [e for e in ticlust.run(x, "dti-kmeans", k=2, device="cpu", seed=0, curriculum="milestones",
                                     milestones=(1, 2, 3, 4), max_epochs=5, batch_size=32, threads=1, infer_batch_size=32)
              if isinstance(e, Progress)]
    stages = list(dict.fromkeys(e.stage for e in events))
    assert stages == ["identity", "identity+affine", "identity+affine+morpho", "identity+affine+morpho+tps",
                      "identity+affine+morpho+tps (lr/10)", "Aligning every image", MAP_STAGE]
    aligning = [e.step for e in events if e.stage == "Aligning every image"]
    assert aligning == [0, 1, 2] and events[-1].step == events[-1].total      # 64 images, 32 at a time


def test_lr_decay_follows_its_schedule_and_replaces_the_final_drop(tiny):
    """lr_decay: the learning rate stays at lr through the identity stage, then falls every epoch (linear here) to
    lr × lr_floor at max_epochs; the curriculum's final-phase event divides nothing. The prototypes' rate is
    prototype_lr times the network's all along."""
    from ticlust.core.validation import as_stack
    from ticlust.events import drain

    cfg = dti.DTIKMeansConfig(k=2, transforms=("affine",), curriculum="milestones", milestones=(2, 3), max_epochs=6,
                              batch_size=32, lr_decay="linear", lr_floor=0.2, encoder_width=0.25, prototype_lr=3.0)
    run = dti.DTIRun(as_stack(tiny[0]), cfg, torch.device("cpu"), 0, False)
    seen = []
    while not run.curriculum.done:
        run.end_epoch(drain(run.run_epoch()))
        prototypes, network = (group["lr"] for group in run.optimizer.param_groups)
        assert prototypes == pytest.approx(3 * network)
        seen.append(network)
    # the module comes in after epoch 2: epochs 3-6 run at 1, 0.8, 0.6, 0.4 of the way from lr to lr × 0.2
    assert seen[:4] == pytest.approx([1e-3, 1e-3, 1e-3 * (0.2 + 0.8 * 0.75), 1e-3 * (0.2 + 0.8 * 0.5)])
    assert seen[-1] == pytest.approx(1e-3 * 0.2) and len(seen) == 6
    cosine = dti.DTIKMeansConfig(lr_decay="cosine", lr_floor=0.0)
    assert [dti.lr_factor(cosine, d, 4) for d in (0, 2, 4, 9)] == pytest.approx([1.0, 0.5, 0.0, 0.0])


def test_stage_share_bounds_the_module_stages():
    """A stage that never plateaus ends when it has used stage_share of the epochs left; the last module gets the rest."""
    cfg = dti.DTIKMeansConfig(max_epochs=40, final_epochs=0, stage_share=0.25, min_stage_epochs=100)
    cur = dti.Curriculum(cfg, 2)
    changes = {e: c for e in range(1, 41) if (c := cur.update(e, 1.0 / e))}
    assert changes == {10: "module", 18: "module"} and cur.done


@pytest.mark.parametrize("bad", [dict(lr_decay="exponential"), dict(lr_floor=1.5), dict(stage_share=0.0),
                                 dict(prototype_lr=0.0)])
def test_schedule_parameters_refuse_bad_values(tiny, bad):
    with pytest.raises(InputError, match=next(iter(bad))):
        ticlust.fit(tiny[0], method="dti-kmeans", k=2, **bad, **FAST)
