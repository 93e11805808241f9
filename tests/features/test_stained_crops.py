"""Crops in transmitted light (features/cells.py): optical density against each crop's own light, the test that
tells absorbing stains from fluorescence, the objects' stain, the central object (a neighbour left out, a lobe
kept) and the descriptors' scaling (a faint channel stays faint)."""
import numpy as np

from ticlust.features import cells

SIDE = 32


def disc(cy, cx, r, side=SIDE):
    yy, xx = np.mgrid[:side, :side]
    return np.hypot(yy - cy, xx - cx) <= r


def smear(light=(230.0, 220.0, 240.0), nucleus=(0.2, 0.3, 0.9), neighbour=(0.9, 0.4, 0.6), n=6):
    """RGB crops lit by ``light``: a central cell whose stain passes ``nucleus`` of each colour, a neighbour of
    another stain (``neighbour``) in a corner."""
    x = np.empty((n, SIDE, SIDE, 3), np.float32)
    for i in range(n):
        t = np.ones((SIDE, SIDE, 3))
        t[disc(15.5 + i % 2, 15.5, 5)] = nucleus
        t[disc(2, 29, 6)] = neighbour
        x[i] = np.asarray(light) * (1 + 0.1 * i) * t
    return x


def test_optical_density_is_the_stains_and_not_the_lights():
    x = smear()
    od = cells.optical_density(x)
    np.testing.assert_allclose(od[0, 16, 16], -np.log10([0.2, 0.3, 0.9]), atol=1e-5)
    np.testing.assert_allclose(od[0, 16, 2], 0.0, atol=1e-6)                 # the glass
    dimmer = cells.optical_density(x * np.float32(0.4))                      # a dimmer lamp: the same densities
    np.testing.assert_allclose(dimmer, od, atol=1e-5)
    assert np.array_equal(x, smear())                                        # input untouched


def test_absorbing_stains_are_told_from_fluorescence():
    x = smear()
    assert cells.absorbs(x)
    assert cells.absorbs(smear(nucleus=(0.3, 0.4, 1.05)))                   # a blue nucleus passes blue freely
    glowing = np.full((6, SIDE, SIDE, 2), 10.0, np.float32)
    glowing[:, disc(15.5, 15.5, 5)] += np.float32([500.0, 40.0])            # fluorescence: a bright centre
    assert not cells.absorbs(glowing)
    assert not cells.absorbs(glowing - 10.0)                                 # background taken off: not light


def test_stain_direction_is_the_centres_not_the_neighbours():
    od = cells.optical_density(smear())
    d = cells.stain_direction(od)
    assert np.isclose(np.linalg.norm(d), 1.0)
    nucleus, neighbour = -np.log10([0.2, 0.3, 0.9]), -np.log10([0.9, 0.4, 0.6])
    assert d @ nucleus > d @ neighbour + 0.5                                 # the centre stands out


def test_central_object_keeps_its_lobes_and_leaves_a_neighbour_out():
    stain = np.zeros((1, SIDE, SIDE), np.float32)
    stain[0, disc(15.5, 13, 4)] = 1.0
    stain[0, disc(15.5, 21, 3)] = 1.0                                        # a lobe 1-2 pixels away
    stain[0, disc(3, 3, 3)] = 1.0                                            # a neighbour in a corner
    mask = cells.central_objects(stain)[0]
    assert mask[15, 13] and mask[15, 21] and not mask[3, 3]
    assert cells.central_objects(np.zeros((1, 8, 8), np.float32)).all()     # a flat crop: the whole crop


def test_descriptors_are_turn_invariant_and_scaled_by_group():
    od = cells.optical_density(smear())
    masks = cells.central_objects(od @ cells.stain_direction(od))
    groups = cells.object_descriptors(od, masks)
    turned = cells.object_descriptors(np.rot90(od, 1, (1, 2)).copy(), np.rot90(masks, 1, (1, 2)).copy())
    for name in groups:
        np.testing.assert_allclose(turned[name], groups[name], rtol=1e-4, atol=1e-6)
    assert groups["nucleus mix"].shape == (6, 3)
    np.testing.assert_allclose(groups["nucleus mix"].sum(1), 1.0, atol=1e-6)
    rng = np.random.default_rng(0)
    made = {"object shape": rng.normal(0, [1.0, 100.0], (50, 2)), "spread": rng.normal(0, [1.0, 0.01], (50, 2))}
    centre, scale = cells.descriptor_scales(made)
    z = (np.concatenate(list(made.values()), 1) - centre) / scale
    np.testing.assert_allclose(z[:, :2].std(0), 1.0, atol=1e-9)             # shape: each value on its own
    assert z[:, 3].std() < 0.05 * z[:, 2].std()                             # one unit: a faint channel stays faint
    assert np.isclose((z[:, 2:] ** 2).sum(1).mean(), 2.0)                   # the group weighs by its values


def test_shapes_read_round_long_and_lobed():
    round_, long_, lobes = np.zeros((3, SIDE, SIDE), bool)
    round_[disc(15.5, 15.5, 8)] = True
    long_[12:20, 4:28] = True
    lobes[disc(15.5, 9, 4) | disc(15.5, 22, 4)] = True
    (la, solid, ecc, pieces, outline) = cells.object_descriptors(
        np.ones((3, SIDE, SIDE, 1), np.float32), np.stack([round_, long_, lobes]))["object shape"].T
    np.testing.assert_allclose(np.expm1(la), [round_.sum(), long_.sum(), lobes.sum()])
    assert ecc[0] < 0.2 < 0.9 < ecc[1]
    assert solid[0] > 0.85 and solid[2] < 0.75
    np.testing.assert_array_equal(pieces, [1, 1, 2])
    assert outline[1] > outline[0]                                           # a long bar has more edge per area
