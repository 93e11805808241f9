"""Transformation modules: identity at zero, known warps recovered, gradients, TPS vs an independent solve."""
import numpy as np
import pytest
import torch

from ticlust import transforms as T


pytestmark = pytest.mark.usefixtures("one_thread")


def blob_images(n=3, h=16, w=20, c=1, seed=0):
    g = torch.Generator().manual_seed(seed)
    yy, xx = torch.meshgrid(torch.arange(h, dtype=torch.float64), torch.arange(w, dtype=torch.float64), indexing="ij")
    imgs = []
    for _ in range(n):
        chans = []
        for _ in range(c):
            cy, cx = torch.rand(2, generator=g) * torch.tensor([h / 2, w / 2]) + torch.tensor([h / 4, w / 4])
            s = 2 + 2 * torch.rand(1, generator=g)
            chans.append(torch.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * s ** 2)))
        imgs.append(torch.stack(chans))
    return torch.stack(imgs)


@pytest.mark.parametrize("name", ["identity", "color", "affine", "projective", "tps", "morpho"])
@pytest.mark.parametrize("channels", [1, 3])
def test_zero_parameters_are_the_identity(name, channels):
    x = blob_images(4, 12, 14, channels).float()
    seq = T.TransformSequence([name], (12, 14), channels)
    p = torch.zeros(4, seq.modules[0].n_params)
    out = seq.apply(x, [p])
    assert out.shape == x.shape
    assert torch.allclose(out, x, atol=1e-6), float((out - x).abs().max())


def test_identity_grid_is_exact_for_grid_sample():
    x = torch.rand(2, 1, 7, 9)
    assert torch.allclose(T.warp(x, T.affine_grid(torch.zeros(2, 6), (7, 9))), x, atol=1e-6)
    assert torch.allclose(T.warp(x, T.tps_grid(torch.zeros(2, 16, 2), (7, 9))), x, atol=1e-6)


def test_batched_prototypes_times_items():
    protos = torch.rand(1, 3, 1, 10, 10)
    params = torch.randn(5, 3, 6) * 0.1
    out = T.warp(protos, T.affine_grid(params, (10, 10)))
    assert out.shape == (5, 3, 1, 10, 10)
    one = T.warp(protos[0, 1][None], T.affine_grid(params[2, 1][None], (10, 10)))
    assert torch.allclose(out[2, 1], one[0], atol=1e-6)


def test_affine_and_projective_inverses_are_exact():
    g = torch.Generator().manual_seed(1)
    pts = torch.rand(4, 30, 2, generator=g, dtype=torch.float64) * 2 - 1
    pa = torch.randn(4, 6, generator=g, dtype=torch.float64) * 0.2
    back = T.affine_points(T.affine_inverse(pa), T.affine_points(pa, pts))
    assert torch.allclose(back, pts, atol=1e-12)
    pp = torch.randn(4, 8, generator=g, dtype=torch.float64) * 0.1
    back = T.projective_points(T.projective_inverse(pp), T.projective_points(pp, pts))
    assert torch.allclose(back, pts, atol=1e-12)
    pc = torch.randn(4, 6, generator=g, dtype=torch.float64) * 0.2
    x = torch.rand(4, 3, 5, 5, dtype=torch.float64)
    assert torch.allclose(T.color_apply(T.color_apply(x, pc), T.color_inverse(pc)), x, atol=1e-12)


def test_tps_inverse_points_approximates_the_inverse():
    g = torch.Generator().manual_seed(2)
    disp = torch.randn(3, 16, 2, generator=g, dtype=torch.float64) * 0.05
    pts = torch.rand(3, 40, 2, generator=g, dtype=torch.float64) * 1.6 - 0.8
    q = T.tps_inverse_points(disp, pts)
    assert torch.allclose(T.tps_points(disp, q), pts, atol=1e-8)


def test_tps_matches_scipy_thin_plate_rbf():
    from scipy.interpolate import RBFInterpolator

    rng = np.random.default_rng(3)
    disp = rng.normal(scale=0.1, size=(16, 2))
    basis = T.tps_basis(4)
    src = basis.sources.numpy()
    rbf = RBFInterpolator(src, disp, kernel="thin_plate_spline", degree=1, smoothing=0.0)
    size = (13, 17)
    pix = T.identity_points(size, dtype=torch.float64).reshape(-1, 2)
    expected = pix.numpy() + rbf(pix.numpy())
    got = T.tps_grid(torch.from_numpy(disp), size).reshape(-1, 2).numpy()
    assert np.allclose(got, expected, atol=1e-9)
    # landmarks are interpolated exactly
    at_src = T.tps_points(torch.from_numpy(disp), torch.from_numpy(src))
    assert np.allclose(at_src.numpy(), src + disp, atol=1e-10)


def test_morpho_dilates_and_erodes():
    x = torch.zeros(1, 1, 11, 11)
    x[0, 0, 5, 5] = 1.0
    k = 7
    p = torch.zeros(2, 1 + k * k)
    p[:, 1:] = 1.0  # full window (clamped to 1)
    p[0, 0], p[1, 0] = 40.0, -40.0
    out = T.morpho_apply(x.expand(2, 1, 11, 11), p)
    assert out[0, 0, 5, 2] > 0.99 and out[0, 0, 2, 2] > 0.99 and out[0, 0, 0, 0] < 0.01  # dilated square 7×7
    assert out[1].max() < 1e-6  # eroded away
    # huge α stays finite (max subtracted before exp)
    p[0, 0] = 500.0
    assert torch.isfinite(T.morpho_apply(x, p[:1])).all()


def test_sequence_fuses_spatial_modules_and_composes_in_order():
    g = torch.Generator().manual_seed(4)
    x = blob_images(2, 16, 16).float()
    seq = T.TransformSequence(["affine", "tps"], (16, 16))
    pa = torch.randn(2, 6, generator=g) * 0.1
    pt = torch.randn(2, 32, generator=g) * 0.05
    fused = seq.apply(x, [pa, pt])
    # T_tps ∘ T_aff: sample at g_aff(g_tps(q))
    pts = T.affine_points(pa, T.tps_grid(pt, (16, 16)).reshape(2, -1, 2)).reshape(2, 16, 16, 2)
    assert torch.allclose(fused, T.warp(x, pts), atol=1e-6)
    # a morphology module between them splits the grid but keeps the order
    seq3 = T.TransformSequence(["affine", "morpho", "tps"], (16, 16))
    pm = torch.zeros(2, 50)
    assert torch.allclose(seq3.apply(x, [pa, pm, pt]), T.warp(T.warp(x, T.affine_grid(pa, (16, 16))),
                                                                T.tps_grid(pt, (16, 16))), atol=1e-5)
    # only the first module active
    assert torch.allclose(seq.apply(x, [pa, pt], active=1), T.warp(x, T.affine_grid(pa, (16, 16))), atol=1e-6)


def test_display_grid_inverts_the_warp():
    """A lattice point p of the prototype frame maps to q in the item frame with g(q) = p."""
    g = torch.Generator().manual_seed(5)
    seq = T.TransformSequence(["affine", "morpho", "tps"], (20, 24))
    pa = torch.randn(3, 6, generator=g, dtype=torch.float64) * 0.1
    pt = torch.randn(3, 32, generator=g, dtype=torch.float64) * 0.04
    params = [pa, torch.zeros(3, 50, dtype=torch.float64), pt]
    grid = seq.display_grid(params, (6, 7))
    assert grid.shape == (3, 6, 7, 2)
    q = T.to_normalized(grid.reshape(3, -1, 2), (20, 24))
    forward = T.affine_points(pa, T.tps_points(pt, q))  # g = g_aff ∘ g_tps
    lattice = T.lattice_pixels((20, 24), (6, 7), dtype=torch.float64).reshape(-1, 2)
    assert torch.allclose(T.to_pixels(forward, (20, 24)), lattice.expand(3, -1, -1), atol=1e-6)
    fwd = seq.display_grid(params, (6, 7), inverse=False)
    assert torch.allclose(fwd.reshape(3, -1, 2), T.to_pixels(forward * 0 + T.affine_points(pa, T.tps_points(
        pt, T.to_normalized(lattice, (20, 24)).expand(3, -1, -1))), (20, 24)), atol=1e-9)


def test_pixel_normalised_round_trip():
    pix = torch.tensor([[0.0, 0.0], [9.0, 4.0]], dtype=torch.float64)
    assert torch.allclose(T.to_pixels(T.to_normalized(pix, (5, 10)), (5, 10)), pix)
    assert torch.allclose(T.to_normalized(torch.tensor([[-0.5, -0.5]], dtype=torch.float64), (5, 10)),
                          torch.tensor([[-1.0, -1.0]], dtype=torch.float64))


def test_known_affine_warp_is_recovered_by_optimisation():
    x = (blob_images(1, 24, 24, seed=3) + 0.7 * blob_images(1, 24, 24, seed=4) + 0.4 * blob_images(1, 24, 24, seed=5)).float()
    true = torch.tensor([[0.1, -0.08, 0.1, 0.05, 0.05, -0.1]])
    target = T.warp(x, T.affine_grid(true, (24, 24)))
    p = torch.zeros(1, 6, requires_grad=True)
    opt = torch.optim.Adam([p], lr=0.01)
    for _ in range(300):
        opt.zero_grad()
        loss = ((T.warp(x, T.affine_grid(p, (24, 24))) - target) ** 2).mean()
        loss.backward()
        opt.step()
    assert torch.allclose(p.detach(), true, atol=0.02), p


def test_known_tps_warp_is_recovered_by_optimisation():
    x = (blob_images(1, 24, 24, seed=1) + blob_images(1, 24, 24, seed=2)).float()
    g = torch.Generator().manual_seed(6)
    true = torch.randn(1, 9, 2, generator=g) * 0.04
    target = T.warp(x, T.tps_grid(true, (24, 24), 3))
    p = torch.zeros(1, 9, 2, requires_grad=True)
    opt = torch.optim.Adam([p], lr=0.005)
    for _ in range(300):
        opt.zero_grad()
        loss = ((T.warp(x, T.tps_grid(p, (24, 24), 3)) - target) ** 2).mean()
        loss.backward()
        opt.step()
    recovered = T.tps_grid(p.detach(), (24, 24), 3)
    assert float(loss) < 1e-5
    assert (recovered - T.tps_grid(true, (24, 24), 3)).abs()[0, 6:18, 6:18].max() < 0.03


@pytest.mark.parametrize("name", ["color", "affine", "projective", "tps", "morpho"])
def test_gradcheck(name):
    torch.manual_seed(7)
    x = blob_images(2, 6, 7).requires_grad_(True)
    seq = T.TransformSequence([name], (6, 7), kernel_size=3)
    n = seq.modules[0].n_params
    p = (torch.randn(2, n, dtype=torch.float64) * 0.05)
    if name == "morpho":
        p[:, 0] = torch.tensor([2.0, -3.0])
        p[:, 1:] = torch.rand(2, n - 1, dtype=torch.float64) * 0.5 + 0.2  # away from the clamp's kinks
    p.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda a, b: seq.apply(a, [b]), (x, p), eps=1e-6, atol=1e-5)


def test_invalid_tps_shape():
    with pytest.raises(ValueError):
        T.tps_grid(torch.zeros(1, 10), (5, 5))


@pytest.mark.parametrize("padding", ["zeros", "border"])
def test_deterministic_sampler_equals_grid_sample_in_value_and_gradient(padding):
    from ticlust.transforms.sampler import bilinear_sample

    gen = torch.Generator().manual_seed(0)
    images = torch.rand(3, 2, 9, 7, generator=gen, dtype=torch.float64, requires_grad=True)
    grid = (torch.rand(3, 5, 6, 2, generator=gen, dtype=torch.float64) * 2.6 - 1.3).requires_grad_(True)
    grid.data[0, 0, 0] = torch.tensor([-1.0 + 1 / 7, -1.0 + 1 / 9])     # exactly on a pixel centre
    ref = torch.nn.functional.grid_sample(images, grid, mode="bilinear", padding_mode=padding, align_corners=False)
    out = bilinear_sample(images, grid, padding)
    torch.testing.assert_close(out, ref)
    weights = torch.rand(ref.shape, generator=gen, dtype=torch.float64)
    g_ref = torch.autograd.grad((ref * weights).sum(), (images, grid))
    g_out = torch.autograd.grad((out * weights).sum(), (images, grid))
    torch.testing.assert_close(g_out[0], g_ref[0])
    torch.testing.assert_close(g_out[1], g_ref[1])
    assert torch.autograd.gradcheck(lambda im: bilinear_sample(im, grid.detach(), padding), (images,))
