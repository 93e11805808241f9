"""The fit's Gauss-Newton alignment (transforms/fast_fit.py): it never worsens a pair, recovers known warps, keeps
honest losses for the pairs it screens out, fits what the Adam fit fits on easy data, and model selection (a sweep
of Adam's learning rates) still fits with Adam."""
import numpy as np
import pytest
import torch
from scipy.ndimage import gaussian_filter

import ticlust
from ticlust.datasets.samples import glyphs_sample
from ticlust.events import drain
from ticlust.metrics import evaluate
from ticlust.transforms import tps_grid, warp
from ticlust.transforms.align import Aligner, Alignments
from ticlust.transforms.fast_fit import GaussNewtonSchedule, align_pairs


def schedule(**changes) -> GaussNewtonSchedule:
    """The default fit's Gauss-Newton schedule (its Adam step counts only feed the progress ticker)."""
    return GaussNewtonSchedule(30, 30, 1e-2, 5e-3, **changes)


def test_gauss_newton_recovers_known_warps_and_never_worsens():
    torch.manual_seed(0)
    x, _ = glyphs_sample(n_per_class=1, size=24, seed=0)
    base = torch.from_numpy(x)[:, None]                     # 4 glyphs (4, 1, 24, 24)
    disp = torch.randn(4, 16, 2) * 0.06                     # a known TPS bend of each glyph, plus a shift
    disp[..., 0] += 0.1
    turn = torch.tensor([[0.97, -0.26, 0.1], [0.26, 0.97, -0.05]]).expand(4, 2, 3)   # a known turn (15°) and shift
    affine = torch.nn.functional.affine_grid(turn, (4, 1, 24, 24), align_corners=False)
    for landmarks, grid in ((4, tps_grid(disp, (24, 24))), (None, affine)):
        bent = warp(base, grid, padding_mode="zeros")
        al = Aligner((24, 24), landmarks, "cpu", lowpass=0.07)
        out = al.zeros(4, 4)
        for _ in range(4):   # a few Lloyd iterations' worth, each warm-started from the last
            out = drain(align_pairs(al, al.pyramid(bent), al.pyramid(base), out, schedule(candidates=4)))
        start = al.pair_losses(bent, base, al.zeros(4, 4))
        diag = torch.arange(4)
        assert torch.all(out.losses <= start + 1e-5)        # never worse than where it started
        assert torch.all(out.losses[diag, diag] < 0.15 * start[diag, diag]), landmarks


def test_screened_pairs_keep_honest_losses():
    """With one candidate per item the other pairs skip the full-resolution stage, but every loss returned is the
    loss of the warp returned, at these centroids, and no pair ends worse than its start."""
    x, _ = glyphs_sample(n_per_class=3, size=16, seed=2)
    x = torch.from_numpy(x)[:, None]
    mu = x[::3][:4]
    al = Aligner((16, 16), 3, "cpu", lowpass=0.07, max_scale=2.0, max_shift=0.5, max_displacement=0.5)
    start = Alignments(torch.randn(len(x), 4, 6) * 0.05, torch.randn(len(x), 4, 9, 2) * 0.02)
    before = al.pair_losses(x, mu, start)
    out = drain(align_pairs(al, al.pyramid(x), al.pyramid(mu), start, schedule(candidates=1)))
    assert torch.all(out.losses <= before + 1e-5)
    assert torch.allclose(out.losses, al.pair_losses(x, mu, out), rtol=1e-4, atol=1e-5)
    everyone = drain(align_pairs(al, al.pyramid(x), al.pyramid(mu), start, schedule(candidates=4)))
    own = out.losses.argmin(1)
    assert torch.all(everyone.losses[torch.arange(len(x)), own] <= out.losses[torch.arange(len(x)), own] + 1e-4)


def warped_patterns(n: int, size: int = 16, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Ring, square and plus, each ``n`` times under a known random affine warp (turn ≤ 15°, scale 0.9-1.1,
    shift ≤ 1 px): easy data whose clusters are not in doubt."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[:size, :size] - (size - 1) / 2
    r = np.hypot(xx, yy)
    bases = [np.abs(r - 4.5) < 1.2, (np.abs(xx) < 3.5) & (np.abs(yy) < 3.5), ((np.abs(xx) < 1.2) | (np.abs(yy) < 1.2)) & (r < 6)]
    images = torch.from_numpy(np.stack([gaussian_filter(b.astype(np.float32), 0.7) for b in bases]))[:, None]
    angle, scale = np.radians(rng.uniform(-15, 15, 3 * n)), rng.uniform(0.9, 1.1, 3 * n)
    theta = np.zeros((3 * n, 2, 3), np.float32)
    theta[:, 0, 0], theta[:, 0, 1] = scale * np.cos(angle), -scale * np.sin(angle)
    theta[:, 1, 0], theta[:, 1, 1] = scale * np.sin(angle), scale * np.cos(angle)
    theta[:, :, 2] = rng.uniform(-1, 1, (3 * n, 2)) * 2 / size
    grids = torch.nn.functional.affine_grid(torch.from_numpy(theta), (3 * n, 1, size, size), align_corners=False)
    y = np.repeat(np.arange(3), n)
    return warp(images[y], grids, padding_mode="zeros")[:, 0].numpy(), y


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("method, extra", [("ai-kmeans", {}), ("st-kmeans", {"landmarks": 3})])
def test_fast_and_exact_fits_agree_on_easy_data(method, extra):
    x, y = warped_patterns(8)
    opts = dict(k=3, device="cpu", seed=0, max_iter=4, **extra)
    fast = ticlust.fit(x, method, **opts)
    exact = ticlust.fit(x, method, fit_align="adam", **opts)
    assert fast.config["fit_align"] == "gauss-newton" and exact.config["fit_align"] == "adam"
    assert evaluate(y, fast.labels)["ari"] == 1.0 and evaluate(y, exact.labels)["ari"] == 1.0
    h = np.asarray(fast.history)
    assert np.all(np.diff(h) <= 1e-5 * h[:-1])               # the distortion stays monotone
    # near the optimum Gauss-Newton's steps (slopes from central differences of the item, not the derivative of its
    # bilinear sample) stop a little above Adam's minimum: ST 0.032 against 0.026 here, AI within 1 %
    assert fast.final_loss <= 1.3 * exact.final_loss


def test_model_selection_sweeps_adams_learning_rates_with_adam():
    x, _ = glyphs_sample(n_per_class=2, size=12, seed=0)
    r = ticlust.fit(x[:6], "ai-kmeans", k=2, device="cpu", select=True, steps=1, affine_steps=0, max_iter=1)
    assert r.config["fit_align"] == "adam" and len(r.extras["selection_lr"]) == 6
