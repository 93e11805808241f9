"""ST/AI K-means' fast predict (issue 29 item 5): a short alignment to every centroid screens the candidates,
only ``predict_candidates`` of them per image get the full alignment. Checked against the exact path
(``predict_candidates=0``: every centroid aligned in full) on separated kinds, on the objects route's crops
(one and three channels), for repeatability, and for a hot loop that stays on the device."""
import inspect

import numpy as np
import pytest
import torch

import ticlust
from ticlust.methods import st_kmeans
from ticlust.metrics import hungarian_accuracy
from ticlust.datasets.nuclei import nuclei_field
from ticlust.objects.route import objects_route
from ticlust.datasets.samples import glyphs_sample
from ticlust.transforms.align import Aligner, Alignments

#: Short fits to predict from: Adam's few steps (``fit_align="adam"``) leave the deformable fit on the nuclei's kinds
#: apart, where a fit aligned in full (Gauss-Newton, or Adam's default steps) bends them onto each other (ACC 0.53).
FIT = dict(steps=6, affine_steps=4, max_iter=3, predict_steps=10, fit_align="adam")


pytestmark = pytest.mark.usefixtures("one_thread")


def _predict(result, x, candidates):
    """Predict with the fitted result, its number of candidates set (0: the exact path)."""
    result.config = {**result.config, "predict_candidates": candidates}
    return ticlust.predict(result, x, device="cpu")


def _nuclei(seed: int, channels: int = 1):
    """Crops of a small generated field of nuclei (round, elongated, dividing) by the objects route, its
    parameters for objects and the true kinds; three channels (RGB) when asked: the field, it halved and it mirrored."""
    f = nuclei_field(n=60, shape=(320, 320), seed=seed)
    field = f.image if channels == 1 else np.stack([f.image, f.image // 2, f.image[:, ::-1]], -1)
    route = objects_route(field, f.labels, "ai-kmeans")
    return route.items, route.params, f.kind_of(route.table["label"])


@pytest.mark.parametrize("method,extra", [("ai-kmeans", {}), ("st-kmeans", {"invariances": "deformable", "landmarks": 3})])
def test_fast_path_gives_the_exact_labels_on_separated_kinds(method, extra):
    crops, params, _ = _nuclei(3)
    new, _, _ = _nuclei(4)
    res = ticlust.fit(crops, method, k=3, device="cpu", seed=0, **{**params, **FIT, **extra})
    exact = _predict(res, new, 0)
    fast = _predict(res, new, 1)          # one candidate: the screen alone decides
    assert np.array_equal(fast.labels, exact.labels)
    # every pair has a finite score, the chosen one the lowest (the others keep their screened distances)
    assert np.all(np.isfinite(fast.scores)) and np.array_equal(fast.scores.argmin(1), fast.labels)
    assert np.array_equal(_predict(res, crops, 1).labels, res.labels)   # the fit's items keep their clusters


def test_candidates_k_aligns_every_centroid_and_repeats():
    """With K or more candidates every centroid goes through the candidates' stages (no screening out), not the exact
    path: here (its 10 Adam steps per stage) the Gauss-Newton stages align closer and label at least as well; the
    label is the lowest score; and a run repeats exactly."""
    fit_x, _ = glyphs_sample(n_per_class=6, size=16, seed=1)
    new_x, new_y = glyphs_sample(n_per_class=4, size=16, seed=2)
    res = ticlust.fit(fit_x, "st-kmeans", k=4, device="cpu", seed=0, landmarks=3, **FIT)
    exact = _predict(res, new_x, 0)
    every, more = _predict(res, new_x, 4), _predict(res, new_x, 9)
    assert np.array_equal(every.scores, more.scores) and np.array_equal(every.scores.argmin(1), every.labels)
    assert every.scores.min(1).mean() < 0.5 * exact.scores.min(1).mean()
    assert hungarian_accuracy(new_y, every.labels) >= hungarian_accuracy(new_y, exact.labels)
    a, b = _predict(res, new_x, 2), _predict(res, new_x, 2)
    assert np.array_equal(a.labels, b.labels) and np.array_equal(a.scores, b.scores)
    assert np.array_equal(a.params["displacements"], b.params["displacements"])


@pytest.mark.parametrize("channels", [1, 3])
def test_objects_route_crops(channels):
    crops, params, _ = _nuclei(3, channels)
    assert crops.shape[-1] == 3 if channels == 3 else crops.ndim == 3
    res = ticlust.fit(crops, "ai-kmeans", k=3, device="cpu", seed=0, **{**params, **FIT, "predict_steps": 30})
    exact, fast = _predict(res, crops, 0), _predict(res, crops, 2)
    assert fast.labels.shape == (len(crops),) and fast.scores.shape == (len(crops), 3)
    assert fast.prototypes.shape == res.prototypes.shape
    assert np.mean(fast.labels == exact.labels) >= 0.95
    assert np.mean(fast.labels == res.labels) >= 0.95      # the fit's items keep (nearly all) their clusters


def test_lean_kernels_equal_the_fit_kernels():
    torch.manual_seed(0)
    x, mu = torch.rand(5, 2, 12, 12), torch.rand(3, 2, 12, 12)
    warps = Alignments(torch.randn(5, 3, 6) * 0.1, torch.randn(5, 3, 9, 2) * 0.05)
    for low in (False, True):
        plain = Aligner((12, 12), 3, "cpu", lowpass=0.2)
        lean = Aligner((12, 12), 3, "cpu", lowpass=0.2, lean=True)
        ours = lean.pyramid(x)
        xs = ours.low if low else ours.full
        assert torch.allclose(lean.grid(warps, low), plain.grid(warps, low), atol=1e-6)
        assert torch.allclose(lean.warp_pairs(xs, warps, low), plain.warp_pairs(xs, warps, low), atol=1e-5)
    # per-pair centroids (B, m, C, H, W) give the same losses as the shared ones they were taken from
    pick = torch.tensor([[2, 0], [1, 2], [0, 1], [2, 1], [0, 2]])
    shared = plain.pair_losses(x, mu, warps)
    own = plain.pair_losses(x, mu[pick], warps.take(pick))
    assert torch.allclose(own, shared.gather(1, pick))


def test_lean_loss_has_the_fit_kernels_gradient():
    """The lean kernels' pair loss (one autograd function) gives the losses and the parameter gradients of the
    fit's elementwise form, for the affine stage at low resolution and the TPS at full resolution."""
    torch.manual_seed(1)
    x, mu = torch.rand(4, 2, 16, 16), torch.rand(3, 2, 16, 16)
    plain = Aligner((16, 16), 3, "cpu", lowpass=0.1)
    lean = Aligner((16, 16), 3, "cpu", lowpass=0.1, lean=True)
    xs, ms = plain.pyramid(x), plain.pyramid(mu)
    for low in (True, False):
        a, b = ((xs.low, ms.low) if low else (xs.full, ms.full))
        grads = []
        for aligner in (plain, lean):
            theta = (torch.randn(4, 3, 6, generator=torch.Generator().manual_seed(2)) * 0.1).requires_grad_(True)
            nu = (torch.randn(4, 3, 9, 2, generator=torch.Generator().manual_seed(3)) * 0.05).requires_grad_(True)
            loss = aligner.pair_losses(a, b, Alignments(theta, nu), low)
            (loss * torch.arange(1.0, 13.0).view(4, 3)).sum().backward()   # a different weight per pair
            grads.append((loss.detach(), theta.grad, nu.grad))
        for ours, theirs in zip(grads[1], grads[0]):   # at low resolution the TPS is not used: no nu gradient
            if theirs is None:
                assert low and ours is None
            else:   # float32 roundoff at the array's scale (sums over every pixel in another order)
                assert torch.allclose(ours, theirs, rtol=1e-4, atol=1e-5 * float(theirs.abs().max()))
        assert grads[0][0].shape == (4, 3) and torch.all(grads[0][1].abs().sum(-1) > 0)


def test_hot_loop_stays_on_the_device():
    """Nothing in the screen, the candidates' alignment or the lean kernels moves data to the host, so the
    same code runs batched on a GPU (``--device cuda``) without a synchronising copy per step."""
    for fn in (st_kmeans._screened, Aligner.gauss_newton, Aligner._least_squares, Aligner.grid, Aligner.warp_pairs,
               Aligner._grid_maps, Alignments.take, Alignments.put, Aligner.pair_losses):
        source = inspect.getsource(fn)
        for host in (".cpu()", ".numpy()", ".item()", ".tolist()", "np."):
            assert host not in source, (fn.__qualname__, host)


def _blobs(n: int, size: int = 24) -> torch.Tensor:
    """n smooth test images (1 channel): two Gaussian blobs each, of seeded places and widths."""
    g = torch.Generator().manual_seed(5)
    yy, xx = torch.meshgrid(torch.arange(size, dtype=torch.float32), torch.arange(size, dtype=torch.float32), indexing="ij")
    out = torch.zeros(n, 1, size, size)
    for i in range(n):
        for _ in range(2):
            cy, cx = (torch.rand(2, generator=g) * 0.5 + 0.25) * size
            w = float(torch.rand(1, generator=g)) * 2 + 2
            out[i, 0] += torch.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * w * w))
    return out


def test_gauss_newton_finds_a_known_affine_warp():
    """Targets made by warping the images with known affine maps: a few Levenberg-Marquardt iterations from the
    identity bring every pair's loss to a small part of where it started, at low and at full resolution, and no
    pair ends worse than it started (a start at the true map stays there)."""
    x = _blobs(4)
    aligner = Aligner((24, 24), None, "cpu", lowpass=0.07, max_scale=1.5, lean=True)
    truth = Alignments(torch.tensor([[0.08, 0.05, 0.1, -0.04, -0.06, -0.08]]).repeat(4, 1)[:, None])   # (4, 1, 6)
    with torch.no_grad():
        mu = aligner.warp_pairs(x, truth)                     # (4, 1, C, H, W): each image's own target
    start = aligner.zeros(4, 1)
    before = aligner.pair_losses(x, mu, start)
    full = aligner.gauss_newton(x, mu, start, 6)
    assert torch.all(full.losses < 0.01 * before)
    assert torch.allclose(full.losses, aligner.pair_losses(x, mu, full), rtol=1e-4, atol=1e-6)   # the losses it reports
    assert torch.allclose(full.theta, truth.theta, atol=0.02)
    ours, theirs = aligner.pyramid(x), aligner.pyramid(mu.flatten(0, 1)).low.unflatten(0, (4, 1))
    low = aligner.gauss_newton(ours.low, theirs, start, 6, low=True)
    assert torch.all(low.losses < 0.1 * aligner.pair_losses(ours.low, theirs, start, low=True))
    kept = aligner.gauss_newton(x, mu, Alignments(truth.theta.clone()), 3)
    assert torch.all(kept.losses <= aligner.pair_losses(x, mu, truth) + 1e-7)


def test_gauss_newton_bends_the_tps_within_its_bound():
    """The TPS stage (affine maps fixed) lowers every pair's loss towards targets bent by known displacements, and
    keeps each displacement within the aligner's bound (``max_displacement`` × the landmark spacing)."""
    x = _blobs(3)
    aligner = Aligner((24, 24), 3, "cpu", max_displacement=0.5, lean=True)
    nu = torch.randn(3, 1, 9, 2, generator=torch.Generator().manual_seed(7)) * 0.08
    bent = Alignments(torch.zeros(3, 1, 6), nu)
    with torch.no_grad():
        mu = aligner.warp_pairs(x, bent)
    start = aligner.zeros(3, 1)
    out = aligner.gauss_newton(x, mu, start, 6, tps=True)
    assert torch.all(out.losses < 0.1 * aligner.pair_losses(x, mu, start))
    assert torch.equal(out.theta, start.theta) and float(out.nu.abs().max()) <= aligner.max_nu + 1e-6
