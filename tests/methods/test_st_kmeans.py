"""ST K-means / AI K-means (paper 000) on tiny synthetic data: the monotone distortion, exact Eq. 4,
warp recovery, the display-grid convention, predict, determinism, selection, generators, bad input."""
import numpy as np
import pytest
import torch

import ticlust
from ticlust.errors import InputError
from ticlust.datasets.samples import glyphs_sample
from ticlust.core.validation import as_stack
from ticlust.events import Progress, drain
from ticlust.kernels.aligned_lloyd import settled
from ticlust.methods.base import MAP_STAGE, seed_everything
from ticlust.metrics import evaluate
from ticlust.kernels import kmeans_plus_plus
from ticlust.evaluation import select_model
from ticlust.kernels.aligned_lloyd import aligned_lloyd, centroid_update, reseed
from ticlust.methods.st_kmeans import _running_mean_update
from ticlust.transforms.align import Aligner, Alignments, Schedule, adam, gaussian_lowpass
from ticlust.result import load_result
from ticlust.transforms import tps_grid, warp
from ticlust.datasets.warped_digits import nonrigid_digits, rigid_digits

FAST = dict(steps=6, affine_steps=4, predict_steps=8, max_iter=4)


@pytest.fixture(scope="module")
def glyphs():
    x, y = glyphs_sample(n_per_class=8, size=16, seed=1)
    return x, y


def test_distortion_never_increases(glyphs):
    x, _ = glyphs
    for method, extra in (("st-kmeans", {"landmarks": 3}), ("ai-kmeans", {})):
        r = ticlust.fit(x, method, k=4, device="cpu", seed=0, **FAST, **extra, lr=5e-2)
        h = np.asarray(r.history)
        assert len(h) >= 2
        assert np.all(np.diff(h) <= 1e-5 * h[:-1]), (method, h)
        # the recorded final distortion is the assigned pairs' score
        assert np.isclose(h[-1], r.scores[np.arange(r.n), r.labels].mean(), rtol=1e-5)


def test_same_seed_same_result_and_kmeans_init(glyphs):
    x, _ = glyphs
    a = ticlust.fit(x, "st-kmeans", k=3, device="cpu", seed=3, landmarks=3, **FAST)
    b = ticlust.fit(x, "st-kmeans", k=3, device="cpu", seed=3, landmarks=3, **FAST)
    assert np.array_equal(a.labels, b.labels) and np.allclose(a.prototypes, b.prototypes)
    rng = seed_everything(3)
    init = kmeans_plus_plus(as_stack(x).tensor("cpu", flat=True), 3, rng).reshape(3, 16, 16)
    assert np.allclose(a.extras["initial_prototypes"], init.numpy())   # the very K-means++ init of `kmeans`


def test_centroid_is_mean_of_warped_members():
    torch.manual_seed(0)
    al = Aligner((12, 12), 3, "cpu")
    x = torch.rand(7, 1, 12, 12)
    mu = torch.rand(2, 1, 12, 12)
    theta = torch.randn(7, 2, 6) * 0.05
    nu = torch.randn(7, 2, 9, 2) * 0.05
    labels = torch.tensor([0, 1, 0, 0, 1, 1, 0])
    pairs = Alignments(theta, nu)
    pairs.losses = al.pair_losses(x, mu, pairs)
    new = centroid_update(al, x, mu.clone(), pairs, labels, 4)
    warped = al.warp_pairs(x, pairs)              # (7, 2, 1, 12, 12)
    for k in range(2):
        members = warped[labels == k, k]
        assert torch.allclose(new[k], members.mean(0), atol=1e-6)
    # Eq. 4 minimises the cluster's distortion for the fixed warps: any other centroid does worse
    def cost(m):
        return float(((warped[torch.arange(7), labels] - m[labels]) ** 2).sum())
    assert cost(new) < cost(new + 0.01 * torch.randn_like(new))


def test_alignment_recovers_known_warps_and_never_worsens():
    torch.manual_seed(0)
    x, _ = glyphs_sample(n_per_class=1, size=24, seed=0)
    base = torch.from_numpy(x)[:, None]                     # 4 glyphs (4, 1, 24, 24)
    # a known TPS bend of each glyph (plus a shift): the aligner must undo it
    disp = torch.randn(4, 16, 2) * 0.06
    disp[..., 0] += 0.1
    bent = warp(base, tps_grid(disp, (24, 24)), padding_mode="zeros")
    al = Aligner((24, 24), 4, "cpu", lowpass=0.07)
    mu = base
    gen = al.align(al.pyramid(bent), al.pyramid(mu), al.zeros(4, 4), Schedule(60, 150, 1e-2, 1e-2))
    with pytest.raises(StopIteration) as stop:
        while True:
            next(gen)
    loss = stop.value.value.losses
    start = al.pair_losses(bent, mu, al.zeros(4, 4))
    diag = torch.arange(4)
    assert torch.all(loss <= start + 1e-6)                 # never worse than where it started
    assert torch.all(loss[diag, diag] < 0.15 * start[diag, diag])


def test_adam_keeps_best_iterate():
    # a huge learning rate overshoots; the returned parameters are still the best visited
    target = torch.tensor([[[0.3]]])
    gen = adam(lambda p: ((p - target) ** 2).sum(-1), [torch.zeros(1, 1, 1)], 5, lr=10.0)
    with pytest.raises(StopIteration) as stop:
        while True:
            next(gen)
    (best,), loss, _ = stop.value.value
    assert float(loss) <= 0.09 + 1e-7 and torch.allclose(loss, ((best - target) ** 2).sum(-1))


def test_display_grid_convention_and_aligned():
    from scipy.ndimage import map_coordinates
    x, _ = glyphs_sample(n_per_class=2, size=12, seed=0)
    r = ticlust.fit(x, "st-kmeans", k=2, device="cpu", seed=0, landmarks=3, **FAST)
    assert r.aligned_kind == "item-on-prototype" and r.aligned.shape == x.shape
    assert r.grids.shape == (len(x), 12, 12, 2) and r.params["affine"].shape == (len(x), 2, 3)
    # the grid is the sampling grid: on 12×12 images the 12×12 lattice is the pixel centres, so reading
    # each image at its grid positions (bilinear, zero outside) must give exactly `aligned`
    items = as_stack(x).numpy()
    for i in range(len(x)):
        gx, gy = r.grids[i, ..., 0], r.grids[i, ..., 1]
        sampled = map_coordinates(items[i], [gy.ravel(), gx.ravel()], order=1, mode="grid-constant").reshape(12, 12)
        assert np.allclose(sampled, r.aligned[i], atol=1e-4)
    lat = np.linspace(0, 15, 12)
    # a pure translation by t (normalised) moves the grid by t·W/2 pixels
    al = Aligner((16, 16), None, "cpu")
    theta = torch.zeros(1, 6)
    theta[0, 2], theta[0, 5] = 0.25, -0.5
    g = al.display_grids(Alignments(theta))[0].numpy()
    assert np.allclose(g[..., 0] - lat[None, :], 2.0) and np.allclose(g[..., 1] - lat[:, None], -4.0)


def test_st_result_fields_predict_and_save(glyphs, tmp_path):
    x, y = glyphs
    r = ticlust.fit(x, "st-kmeans", k=4, device="cpu", seed=0, landmarks=3, **FAST, lr=5e-2)
    n = len(x)
    assert r.params["displacements"].shape == (n, 9, 2) and r.params["landmarks"].shape == (n, 9, 2)
    assert r.scores.shape == (n, 4) and np.array_equal(r.labels, r.scores.argmin(1))
    p = ticlust.predict(r, x[:10], device="cpu")
    assert np.allclose(p.prototypes, r.prototypes)            # centroids stay fixed
    assert p.labels.shape == (10,) and p.aligned.shape == (10, 16, 16)
    assert np.mean(p.labels == r.labels[:10]) >= 0.8          # training items land where they were
    path = r.save(tmp_path / "st.npz")
    back = load_result(path)
    assert np.array_equal(back.labels, r.labels) and back.aligned_kind == "item-on-prototype"
    assert np.array_equal(ticlust.predict(back, x[:10], device="cpu").labels, p.labels)


def shifted_shapes(n_per_class=6, size=16, seed=0):
    """Ring, vertical bar, horizontal bar (blurred), each rolled by up to ±2 pixels: only alignment separates them."""
    from scipy.ndimage import gaussian_filter
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:size, 0:size] - (size - 1) / 2
    shapes = [np.abs(np.hypot(xx, yy) - 4) < 1.2, (np.abs(xx) < 1.2) & (np.abs(yy) < 5), (np.abs(yy) < 1.2) & (np.abs(xx) < 5)]
    x, y = [], []
    for label, shape in enumerate(shapes):
        shape = gaussian_filter(shape.astype(np.float32), 1.0)
        for _ in range(n_per_class):
            x.append(np.roll(shape, tuple(rng.integers(-2, 3, size=2)), (0, 1)))
            y.append(label)
    return np.stack(x), np.array(y)


def test_minibatch_centroid_is_running_mean_of_all_members_seen():
    """Step 1/count: after any sequence of batches a centroid that was hit is the mean of every warped
    member it has received so far (its start forgotten); a centroid never hit stays where it was."""
    torch.manual_seed(0)
    mu0 = torch.rand(3, 1, 4, 4)
    mu, counts = mu0.clone(), torch.zeros(3)
    seen = {0: [], 1: [], 2: []}
    for size in (5, 2, 7):
        warped, labels = torch.rand(size, 1, 4, 4), torch.randint(0, 2, (size,))
        _running_mean_update(mu, counts, labels, warped)
        for w, k in zip(warped, labels.tolist()):
            seen[k].append(w)
    for k in (0, 1):
        assert torch.allclose(mu[k], torch.stack(seen[k]).mean(0), atol=1e-6) and counts[k] == len(seen[k])
    assert torch.equal(mu[2], mu0[2]) and counts[2] == 0


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("method, extra", [("st-kmeans", {"landmarks": 3}), ("ai-kmeans", {})])
def test_minibatch_mode_clusters_shifted_shapes(method, extra):
    from sklearn.metrics import adjusted_rand_score
    x, y = shifted_shapes()
    assert adjusted_rand_score(y, ticlust.fit(x, "kmeans", k=3, device="cpu", seed=0).labels) < 0.5  # pixels fail
    r = ticlust.fit(x, method, k=3, device="cpu", seed=0, mode="minibatch", epochs=6, batch_size=6, minibatch_steps=2,
                    steps=10, affine_steps=10, lr=5e-2, affine_lr=5e-2, predict_steps=3, **extra)
    assert adjusted_rand_score(y, r.labels) == 1.0
    h = np.asarray(r.history)                       # one entry per epoch, then the final full assignment pass
    assert len(h) >= 3 and np.all(np.diff(h) < 0), h
    assert np.array_equal(r.labels, r.scores.argmin(1)) and np.isclose(h[-1], r.scores.min(1).mean(), rtol=1e-5)


def test_model_selection_table(glyphs):
    x, _ = glyphs
    best, table = select_model(x[:12], "st-kmeans", k=2, device="cpu", landmarks=(3, 4), lrs=(1e-3, 5e-2),
                               steps=2, affine_steps=1, max_iter=2)
    assert len(table) == 4 and {r["landmarks"] for r in table} == {3, 4}
    assert best.final_loss == min(r["distortion"] for r in table)
    assert best.extras["selection_distortion"].shape == (4,) and best.config["select"]
    with pytest.raises(InputError):
        select_model(x[:12], "st-kmeans", k=2, device="cpu", landmarks=(2,))


def test_select_option_sweeps_the_paper_grid():
    x, _ = glyphs_sample(n_per_class=2, size=12, seed=0)
    r = ticlust.fit(x[:6], "ai-kmeans", k=2, device="cpu", select=True, steps=1, affine_steps=0, max_iter=1,
                    predict_steps=1)
    assert list(r.extras["selection_lr"]) == [1e-4, 5e-4, 1e-3, 5e-3, 1e-2, 5e-2]
    assert r.final_loss == r.extras["selection_distortion"].min()


def test_bad_input():
    x, _ = glyphs_sample(n_per_class=2, size=16, seed=0)
    with pytest.raises(InputError):
        ticlust.fit(np.random.rand(10, 30), "st-kmeans", k=2, device="cpu")
    with pytest.raises(InputError):
        ticlust.fit(np.random.rand(10, 6, 6), "st-kmeans", k=2, device="cpu")
    with pytest.raises(InputError):
        ticlust.fit(x, "st-kmeans", k=2, device="cpu", landmarks=9)
    r = ticlust.fit(x, "ai-kmeans", k=2, device="cpu", steps=1, affine_steps=1, max_iter=1)
    with pytest.raises(InputError):
        ticlust.predict(r, np.random.rand(3, 12, 12), device="cpu")
    before = x.copy()
    ticlust.fit(x, "ai-kmeans", k=2, device="cpu", steps=1, affine_steps=1, max_iter=1)
    assert np.array_equal(before, x)                          # input untouched


def test_lowpass_is_a_normalised_gaussian():
    img = torch.zeros(1, 1, 21, 21)
    img[..., 10, 10] = 1
    out = gaussian_lowpass(img, 2.0)
    assert abs(float(out.sum()) - 1) < 1e-5
    yy, xx = torch.meshgrid(torch.arange(21.0), torch.arange(21.0), indexing="ij")
    var = float((out[0, 0] * (xx - 10) ** 2).sum())
    assert abs(var - 4.0) < 0.05


@pytest.mark.parametrize("maker", [rigid_digits, nonrigid_digits])
def test_generators(maker):
    rng = np.random.default_rng(0)
    images = rng.random((30, 20, 20)) * 255
    images[:, :4] = 0
    labels = np.repeat([2, 5, 7], 10)
    a = maker(images, labels, n_transforms=12, seed=4)
    b = maker(images, labels, n_transforms=12, seed=4)
    assert a["x_train"].shape == (24, 20, 20) and a["x_test"].shape == (12, 20, 20)
    assert np.bincount(a["y_test"]).tolist() == [4, 4, 4]          # a third of each class held out
    assert np.array_equal(a["x_train"], b["x_train"]) and list(a["classes"]) == [2, 5, 7]
    assert a["x_train"].min() >= 0 and a["x_train"].max() <= 1
    assert not np.array_equal(a["x_train"][0], a["x_train"][1])
    with pytest.raises(InputError):
        maker(images, labels[:5])
    with pytest.raises(InputError):
        maker(images, labels, n_transforms=2)


def three_shapes(n: int, size: int = 16, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Ring, square and plus (no affine map turns one into another), each n times, shifted ≤ 1 px."""
    from scipy.ndimage import gaussian_filter, shift
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[:size, :size] - (size - 1) / 2
    r = np.hypot(xx, yy)
    bases = [np.abs(r - 4.5) < 1.2, (np.abs(xx) < 3.5) & (np.abs(yy) < 3.5), ((np.abs(xx) < 1.2) | (np.abs(yy) < 1.2)) & (r < 6)]
    x = [shift(gaussian_filter(b.astype(np.float32), 0.7), rng.uniform(-1, 1, 2), order=1) for b in bases for _ in range(n)]
    return np.array(x), np.repeat(np.arange(3), n)


def bad_start(x: torch.Tensor, y: np.ndarray) -> torch.Tensor:
    """Two centroids on the rings (two of them), one on the blend of squares and pluses."""
    r0, r1 = np.flatnonzero(y == 0)[:2]
    return torch.stack([x[r0], x[r1], x[torch.from_numpy(y > 0)].mean(0)])


def test_repair_move_splits_the_blend_and_drops_a_twin():
    x, y = three_shapes(4)
    xt = torch.from_numpy(x)[:, None]
    al = Aligner((16, 16), None, "cpu")
    pairs = al.zeros(len(x), 3)
    pairs.losses = al.pair_losses(xt, bad_start(xt, y), pairs)
    labels = pairs.losses.argmin(1)
    assert sorted(np.unique(labels[y > 0]).tolist()) == [2]            # squares and pluses under one centroid
    before = float(pairs.losses.gather(1, labels[:, None]).sum())
    pairs.theta[:, 2] = 0.01                                            # j's warps are handed to the new half
    a, j = reseed(al, xt, pairs, labels, 8)
    assert a in (0, 1) and j == 2
    assert len(np.unique(labels[y == 0])) == 1 and labels[y == 0][0] != a      # rings: all on the kept twin
    assert {int(labels[y == 1].unique()), int(labels[y == 2].unique())} == {a, j}   # the blend split by shape
    assert torch.all(pairs.theta[:, a] == 0.01)
    mu = centroid_update(al, xt, torch.zeros(3, 1, 16, 16), pairs, labels, 8)
    after = float(al.pair_losses(xt, mu, pairs).gather(1, labels[:, None]).sum())
    assert after < before
    # one centroid per shape: every centroid is needed, no move
    good = torch.stack([xt[y == c].mean(0) for c in range(3)])
    pairs.losses = al.pair_losses(xt, good, pairs)
    labels = pairs.losses.argmin(1)
    assert reseed(al, xt, pairs, labels, 8) is None and np.array_equal(labels.numpy(), y)


@pytest.mark.parametrize("method", ["st-kmeans", "ai-kmeans"])
def test_lloyd_repairs_two_centroids_on_one_group(method):
    """From the bad start Lloyd alone stays stuck; with the repair move (default) every shape gets its centroid."""
    x, y = three_shapes(6)
    spec = ticlust.get_method(method)
    stack = as_stack(x)
    xt = torch.from_numpy(x)[:, None]
    got = {}
    for repair in (True, False):
        cfg = spec.make_config(3, steps=6, affine_steps=4, max_iter=6, reseed=repair,
                               **({"landmarks": 3} if method == "st-kmeans" else {}))
        run = spec._start(stack, cfg, xt, torch.device("cpu"))
        _, _, labels, history, _ = drain(aligned_lloyd(run, bad_start(xt, y)))
        assert np.all(np.diff(history) <= 1e-5 * np.asarray(history[:-1]))       # still monotone
        got[repair] = (evaluate(y, labels.numpy())["acc"], run.repairs)
    assert got[True][0] == 1.0 and len(got[True][1]) >= 1
    assert got[False][0] < 0.7 and got[False][1] == []


def test_affine_first_runs_ai_kmeans_then_adds_the_tps(glyphs):
    """affine_first: the deformable run's first stage is AI K-means with ST's bounds (same seed, same
    distortions), then Lloyd with the TPS lowers the distortion further; progress never passes its total."""
    x, _ = glyphs
    opts = dict(k=4, device="cpu", seed=2, max_scale=2.0, **FAST)
    coarse = ticlust.fit(x, "ai-kmeans", **opts)
    events = list(ticlust.run(x, method="st-kmeans", landmarks=3, **opts))
    both = events[-1].result
    h = len(coarse.history)
    assert np.allclose(both.history[:h], coarse.history, rtol=1e-6)
    assert len(both.history) > h and both.history[-1] < coarse.history[-1]
    assert both.timing["iterations"] == len(both.history)
    steps = [(e.step, e.total) for e in events if isinstance(e, Progress) and e.stage != MAP_STAGE]
    assert all(0 <= s <= t for s, t in steps) and [s for s, _ in steps] == sorted(s for s, _ in steps)
    counted = [int(e.stage.split()[2]) for e in events if isinstance(e, Progress) and e.stage.startswith("Lloyd iteration")]
    assert counted == sorted(counted) and sorted(set(counted)) == list(range(1, len(both.history) + 1))   # counts on
    single = ticlust.fit(x, "st-kmeans", landmarks=3, affine_first=False, **opts)
    assert not np.isclose(single.history[0], coarse.history[0], rtol=1e-6)   # one stage: TPS from the start


@pytest.mark.parametrize("fit_align", ["gauss-newton", "adam"])
def test_progress_names_the_stage_and_gives_an_eta_in_the_first_iteration(glyphs, fit_align, monkeypatch):
    """Every event of a Lloyd stage has one name up to its numbers (iteration, chunks aligned), which names the warps
    and the aligner, so the pace estimate runs from the first chunk: an ETA comes before the first iteration ends
    (the two-second floor lifted for these short fits). ST's TPS stage is its own stage, and its remaining steps are
    its own iterations' (the affine stage's unused ones are not counted as still to come); the object map follows."""
    from ticlust.core import execute
    monkeypatch.setattr(execute, "ETA_MIN_SECONDS", 0.0)
    x, _ = glyphs
    events = [e for e in ticlust.run(x, method="st-kmeans", k=4, device="cpu", seed=2, landmarks=3, chunk=8,
                                     fit_align=fit_align, **FAST) if isinstance(e, Progress)]
    names = list(dict.fromkeys("".join(c for c in e.stage if not c.isdigit()) for e in events))
    assert names == [f"Lloyd iteration  (affine warps, {fit_align}): / chunks aligned",
                     f"Lloyd iteration  (affine + TPS warps, {fit_align}): / chunks aligned", MAP_STAGE]
    first_end = next(i for i, e in enumerate(events) if e.stage.startswith("Lloyd iteration 1 ") and
                     e.stage.endswith(f"{len(x) // 8}/{len(x) // 8} chunks aligned"))
    assert any(e.eta is not None for e in events[:first_end + 1])
    tps = next(e for e in events if "TPS" in e.stage)
    assert tps.total - tps.step == events[0].total // 2     # at the start: max_iter iterations of each stage to come


def test_runs_keep_the_lowest_distortion(glyphs):
    x, _ = glyphs
    runs = ticlust.fit(x, "ai-kmeans", k=4, device="cpu", seed=5, runs=3, **FAST)
    singles = [ticlust.fit(x, "ai-kmeans", k=4, device="cpu", seed=5 + r, **FAST).final_loss for r in range(3)]
    assert np.allclose(runs.run_losses, singles) and np.isclose(runs.final_loss, min(singles))
    assert runs.config["runs"] == 3 and runs.config["seed"] == 5


def test_warps_stay_within_bounds(glyphs):
    x, _ = glyphs
    al = Aligner((16, 16), 3, "cpu", max_scale=1.5, max_shift=0.3, max_displacement=0.5)
    theta = torch.randn(50, 2, 6)
    (proj,) = al.project_affine([theta])
    m = proj[..., [0, 1, 3, 4]].reshape(50, 2, 2, 2) + torch.eye(2)
    sv = torch.linalg.svdvals(m)
    assert sv.min() >= 1 / 1.5 - 1e-5 and sv.max() <= 1.5 + 1e-5
    assert proj[..., [2, 5]].abs().max() <= 0.3 + 1e-6
    inside = torch.zeros(3, 2, 6)
    inside[..., 0] = 0.2
    inside[..., 2] = 0.1
    assert torch.allclose(al.project_affine([inside])[0], inside, atol=1e-6)   # feasible maps are untouched
    (nu,) = al.project_tps([torch.randn(5, 2, 9, 2)])
    assert nu.abs().max() <= 0.5 + 1e-6                                        # spacing 1.0 on a 3×3 grid
    r = ticlust.fit(x, "st-kmeans", k=3, device="cpu", seed=0, landmarks=3, max_scale=1.2, max_shift=0.2,
                    max_displacement=0.25, **FAST, lr=5e-2)
    svs = np.linalg.svd(r.params["affine"][:, :, :2], compute_uv=False)
    assert svs.min() >= 1 / 1.2 - 1e-4 and svs.max() <= 1.2 + 1e-4
    assert np.abs(r.params["affine"][:, :, 2]).max() <= 0.2 + 1e-5
    assert np.abs(r.params["displacements"]).max() <= 0.25 + 1e-5


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("method, extra", [("st-kmeans", {"landmarks": 3}), ("ai-kmeans", {})])
def test_default_scale_bound_is_enforced(method, extra):
    """Discs of radius 1.5 … 7 onto one centroid need scale factors far outside either variant's default
    bound (ST 2, AI 1.5): with the bound left at its default, fitted and predicted warps stop exactly at it."""
    from scipy.ndimage import gaussian_filter
    yy, xx = np.mgrid[0:16, 0:16] - 7.5
    x = np.stack([gaussian_filter((np.hypot(xx, yy) < rad).astype(np.float32), 0.7) for rad in (1.5, 2, 6, 7)])
    fast = dict(k=1, device="cpu", seed=0, steps=15, affine_steps=15, max_iter=2, lr=5e-2, affine_lr=5e-2,
                predict_steps=20, **extra)

    def scales(result):
        return np.linalg.svd(result.params["affine"][:, :, :2], compute_uv=False)

    r = ticlust.fit(x, method, **fast)
    bound = r.config["max_scale"]
    loose = ticlust.fit(x, method, max_scale=10.0, **fast)
    assert scales(loose).min() < 0.75 / bound                    # these data do push past the default bound
    for sv in (scales(r), scales(ticlust.predict(r, x, device="cpu"))):
        assert sv.min() >= 1 / bound - 1e-4 and sv.max() <= bound + 1e-4
        assert sv.min() <= 1 / bound + 1e-3                      # and the bound is what stops them


def test_inspector_replays_the_fits_warps_for_fitted_items(glyphs):
    """For an item of the fitted stack the inspector shows the fit's own alignments: its scores are the
    result's row (so its chosen and runner-up clusters are the result's), and the warped image onto the
    assigned centroid is the result's aligned image."""
    from ticlust.api import align_one

    x, _ = glyphs
    r = ticlust.fit(x[:16], "st-kmeans", k=3, device="cpu", seed=0, landmarks=3, **FAST)
    for i in range(16):
        warped, scores = align_one(r, x[i], device="cpu", index=i)
        np.testing.assert_array_equal(scores, r.scores[i])
        assert int(np.argmin(scores)) == r.labels[i]
        np.testing.assert_allclose(warped[r.labels[i]], r.aligned[i], atol=1e-5)
    fresh_warped, fresh_scores = align_one(r, x[0], device="cpu")   # a new image: aligned from scratch
    assert fresh_warped.shape == warped.shape and fresh_scores.shape == (3,)


def test_predict_reads_a_large_stack_block_by_block(glyphs, monkeypatch):
    """Assigning new images streams them in blocks; the blocks give what one pass gives."""
    from ticlust.methods import st_kmeans

    x, _ = glyphs
    r = ticlust.fit(x[:16], "st-kmeans", k=2, device="cpu", seed=0, landmarks=3, **FAST)
    whole = ticlust.predict(r, x, device="cpu")
    monkeypatch.setattr(st_kmeans, "PREDICT_BLOCK", 7)
    blocks = ticlust.predict(r, x, device="cpu")
    assert np.array_equal(blocks.labels, whole.labels)
    np.testing.assert_allclose(blocks.scores, whole.scores, rtol=1e-5, atol=1e-6)
    assert blocks.aligned.shape == whole.aligned.shape and set(blocks.params) == set(whole.params)
    np.testing.assert_allclose(blocks.params["pair_theta"], whole.params["pair_theta"], atol=1e-5)


def test_lloyd_stops_once_at_most_tol_of_the_items_move(glyphs):
    """``tol``: an iteration moving at most that fraction of the items ends the loop (0: only one moving none); the
    loop still ends on an alignment pass, so the labels are the argmin of the returned scores."""
    assert settled(0, 8, 0.0) and not settled(8, 8, 0.5)
    assert settled(2, 8, 0.25) and not settled(2, 8, 0.2) and not settled(2, 8, 0.0)
    x, _ = glyphs
    runs = {tol: ticlust.fit(x, "ai-kmeans", k=4, seed=0, tol=tol, reseed=False, max_iter=10, device="cpu")
            for tol in (0.0, 1.0)}
    assert runs[1.0].timing["iterations"] == 2 < runs[0.0].timing["iterations"]   # 1.0: the first comparison stops it
    for r in runs.values():
        assert len(r.history) == r.timing["iterations"]
        assert np.array_equal(r.scores.argmin(1), r.labels)
