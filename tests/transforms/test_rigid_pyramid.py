"""The coarse-to-fine rigid search (transforms/rigid.py, ``levels``) against the exhaustive one (``levels=0``): the same
poses and scores where the pose is defined (a turned, mirrored and shifted copy of a prototype), and every score the
distance at the pose it returns."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from ticlust.transforms.rigid import angle_count, pyramid_levels, rigid_search, turned_prototypes


@pytest.fixture(scope="module")
def copies(blob_pattern, posed):
    """The maker of posed copies below, bound to the shared pattern helpers of conftest."""
    return lambda size, channels, n, seed=0: _copies(blob_pattern, posed, size, channels, n, seed)


def _copies(blob_pattern, posed, size: int, channels: int, n: int, seed: int = 0):
    """Three asymmetric prototypes (K, C, size, size) and ``n`` noisy copies of prototype 0 at grid angles, mirrors and
    integer shifts within ±4 px; the copies' angle steps, flips and shifts."""
    rng = np.random.default_rng(seed)
    mu = torch.cat([torch.cat([blob_pattern(3 * s + c, size) for c in range(channels)], 1) for s in range(3)])
    steps = torch.from_numpy(rng.integers(0, angle_count((size, size)), n))
    flips = torch.from_numpy(rng.random(n) < 0.5)
    shifts = torch.from_numpy(rng.integers(-4, 5, (n, 2)).astype(np.float32))
    x = torch.cat([posed(mu[:1, c:c + 1], steps * 2 * math.pi / angle_count((size, size)), flips, shifts)
                   for c in range(channels)], 1)
    return mu, x + 0.02 * torch.from_numpy(rng.standard_normal(x.shape).astype(np.float32)), steps, flips, shifts


def distance_at(x: torch.Tensor, mu: torch.Tensor, angle, flip, shift) -> torch.Tensor:
    """||x − P(· − s)||² of one item (C, H, W) and its prototype turned by (angle, flip), both zero outside their frame."""
    p = turned_prototypes(mu[None], torch.tensor([float(angle)]), torch.tensor([bool(flip)]))[0, 0]
    w = int(max(abs(float(shift[0])), abs(float(shift[1])))) + 1
    sx, sy = int(shift[0]), int(shift[1])
    moved = F.pad(p, (w + sx, w - sx, w + sy, w - sy))
    return ((F.pad(x, (w, w, w, w)) - moved) ** 2).sum()


def test_levels_from_the_crop_size():
    assert [pyramid_levels((s, s)) for s in (16, 28, 32, 40, 48, 64, 128)] == [0, 0, 0, 0, 1, 2, 3]
    assert pyramid_levels((64, 64), n_angles=102) == 2 and pyramid_levels((128, 128), n_angles=102) == 2


@pytest.mark.parametrize("size, channels", [(48, 1), (64, 2)])
def test_pyramid_finds_the_exhaustive_pose_of_posed_copies(size, channels, one_thread, copies):
    mu, x, steps, flips, shifts = copies(size, channels, 24)
    window = 5
    fast = rigid_search(x, mu, flip=True, max_shift=window)
    full = rigid_search(x, mu, flip=True, max_shift=window, levels=0)
    n = angle_count((size, size))
    assert torch.equal(torch.round(full.angle[:, 0] / (2 * math.pi / n)).long() % n, steps)      # the poses made
    for field in ("angle", "flip", "shift"):
        assert torch.equal(getattr(fast, field)[:, 0], getattr(full, field)[:, 0])
    scale = float((x ** 2).sum((1, 2, 3)).max() + (mu ** 2).sum((1, 2, 3)).max())
    assert torch.allclose(fast.score[:, 0], full.score[:, 0], rtol=0, atol=1e-5 * scale)
    assert torch.equal(fast.score.argmin(1), full.score.argmin(1))


def test_every_score_is_the_distance_at_its_pose(one_thread, copies):
    mu, x, *_ = copies(64, 1, 6, seed=1)
    found = rigid_search(x, mu, flip=True, max_shift=5)
    scale = float((x ** 2).sum((1, 2, 3)).max() + (mu ** 2).sum((1, 2, 3)).max())
    for i in range(len(x)):
        for k in range(len(mu)):
            direct = distance_at(x[i], mu[k], found.angle[i, k], found.flip[i, k], found.shift[i, k])
            assert abs(float(direct) - float(found.score[i, k])) < 1e-5 * scale
            assert float(found.score[i, k]) >= float(rigid_search(x[i:i + 1], mu[k:k + 1], flip=True, max_shift=5,
                                                                   levels=0).score[0, 0]) - 1e-5 * scale


def test_a_window_of_no_shift_and_an_angle_grid_levels_cannot_halve(one_thread, blob_pattern, posed):
    mu = torch.cat([blob_pattern(s, 48) for s in range(3)])
    steps = torch.tensor([5, 17, 30, 41])
    x = posed(mu[:1], steps * 2 * math.pi / 48, torch.zeros(4, dtype=torch.bool), torch.zeros(4, 2))
    fast = rigid_search(x, mu, n_angles=48, max_shift=0)
    full = rigid_search(x, mu, n_angles=48, max_shift=0, levels=0)
    assert float(fast.shift.abs().max()) == 0.0
    assert torch.equal(fast.angle[:, 0], full.angle[:, 0])
    assert torch.equal(torch.round(fast.angle[:, 0] / (2 * math.pi / 48)).long(), steps)
    with pytest.raises(ValueError, match="not divisible"):
        rigid_search(x, mu, n_angles=50, levels=3)
