"""The polar rotation search (transforms/polar.py) and rigid-spectral: recoveries on small synthetic data."""
import math

import numpy as np
import pytest
import torch

import ticlust
from ticlust.api import align_one
from ticlust.errors import InputError
from ticlust.methods.rigid_spectral import Anchors, diffusion_weights, prepared
from ticlust.transforms.polar import intensity_centres, mirrored, nearest_turns, polar_spectra
from ticlust.transforms.rigid import aligned_items, angle_count, pose_theta


@pytest.fixture
def references(blob_pattern):
    """``references(n=6, size=24)``: ``n`` asymmetric blob patterns of size×size, (n, 1, size, size)."""
    def make(n: int = 6, size: int = 24) -> torch.Tensor:
        return torch.cat([blob_pattern(s, size) for s in range(10, 10 + n)])
    return make


def test_mirrored_coefficients_are_the_mirror_images_coefficients(references):
    x = references(3)
    n_angles = angle_count(tuple(x.shape[-2:]))
    c = intensity_centres(x)
    flipped = x.flip(-1)
    direct = polar_spectra(flipped, intensity_centres(flipped), n_angles)
    assert torch.allclose(mirrored(polar_spectra(x, c, n_angles)), direct, atol=1e-4 * float(direct.abs().max()))


@pytest.mark.parametrize("flip", [False, True])
def test_turned_and_mirrored_copies_find_their_reference_and_pose(references, posed, flip, one_thread):
    refs = references()
    rng = np.random.default_rng(1)
    angles = torch.from_numpy(rng.uniform(0, 2 * math.pi, len(refs))).float()
    flips = torch.full((len(refs),), flip)
    shifts = torch.from_numpy(rng.integers(-2, 3, (len(refs), 2))).float()
    items = torch.cat([posed(refs[i:i + 1], angles[i:i + 1], flips[i:i + 1], shifts[i:i + 1]) for i in range(len(refs))])
    n_angles = angle_count(tuple(refs.shape[-2:]))
    anchors = Anchors.of(refs)
    centres = intensity_centres(items)
    turns = nearest_turns(polar_spectra(items, centres, n_angles), anchors.spectra, 2, n_angles, flip=True)
    assert torch.equal(turns.index[:, 0], torch.arange(len(refs)))
    assert torch.equal(turns.flip[:, 0], flips)
    error = torch.remainder(turns.angle[:, 0] - angles + math.pi, 2 * math.pi) - math.pi
    assert float(error.abs().max()) <= 2 * math.pi / n_angles          # within one step of the angle grid
    assert bool((turns.distance[:, 0] < turns.distance[:, 1]).all())
    # without flip the mirror images are not found as such
    plain = nearest_turns(polar_spectra(items, centres, n_angles), anchors.spectra, 1, n_angles, flip=False)
    assert not bool(plain.flip.any())


def test_exclude_keeps_an_item_from_matching_itself(references):
    refs = references(4)
    anchors = Anchors.of(refs)
    n_angles = angle_count(tuple(refs.shape[-2:]))
    own = nearest_turns(anchors.spectra, anchors.spectra, 1, n_angles)
    assert torch.equal(own.index[:, 0], torch.arange(4)) and float(own.distance.max()) < 1e-5
    other = nearest_turns(anchors.spectra, anchors.spectra, 5, n_angles, exclude=torch.arange(4))
    assert other.index.shape == (4, 3) and not bool((other.index == torch.arange(4)[:, None]).any())


def test_the_warp_fit_brings_a_turned_copy_onto_its_anchor(references, posed, one_thread):
    """The pose the search hands the warp fit carries the item onto the anchor (the distance left is small)."""
    from ticlust.methods.rigid_spectral import RIGID_SPECTRAL, RigidSpectralConfig, anchor_links

    refs = references(5)
    items = posed(refs[2:3], [2.2], [False], [[1.0, -2.0]])
    cfg = RigidSpectralConfig(k=2, candidates=5, neighbours=5, fit_iter=4)
    anchors = Anchors.of(prepared(refs, cfg.lowpass))
    aligner = RIGID_SPECTRAL.aligner(cfg, tuple(refs.shape[-2:]), "cpu")
    dist, idx = anchor_links(items, anchors, cfg, aligner)
    assert int(idx[0, 0]) == 2 and float(dist[0, 0]) < 0.5 * float(dist[0, 1])
    assert float(dist[0, 0]) < 0.15            # unit-norm images: a distance of 0.15 is 99 % of the energy matched
    # the search's pose alone (no fit) is further off than the fitted warp, and never better
    unfitted, _ = anchor_links(items, anchors, RigidSpectralConfig(k=2, candidates=5, neighbours=5, fit_iter=0), aligner)
    assert float(unfitted[0, 0]) >= float(dist[0, 0]) - 1e-6


def test_diffusion_weights():
    vals = torch.tensor([1.0, 0.9, 0.8, 0.5, 0.1], dtype=torch.float64)
    spectral = diffusion_weights(vals, 3, "spectral")
    assert spectral.tolist() == [1.0, 1.0, 1.0, 0.0, 0.0]
    w = diffusion_weights(vals, 3, "diffusion")
    assert w[0] == 1.0 and torch.all(w[1:] < w[:-1]) and abs(float(w[2]) - math.exp(-1)) < 1e-12
    # K or more disconnected parts (λ_K = 0): only their indicators count
    w = diffusion_weights(torch.tensor([1.0, 1.0, 0.7], dtype=torch.float64), 2, "diffusion")
    assert w[:2].tolist() == [1.0, 1.0] and float(w[2]) < 1e-100


def test_rigid_spectral_clusters_turned_and_mirrored_patterns(posed, turned_set, one_thread, tmp_path):
    x, y = turned_set(n_per=15, flip=True, seed=2)
    r = ticlust.fit(x, "rigid-spectral", k=3, device="cpu", seed=0, flip=True, anchors=30)
    assert ticlust.evaluate(y, r.labels)["acc"] == 1.0
    n = len(y)
    assert r.scores.shape == (n, 3) and r.prototypes.shape == (3, 24, 24) and r.aligned.shape == x.shape
    assert r.params["flip"].any() and not r.params["flip"].all()
    assert r.params["nearest_anchors"].shape == (n, 5) and r.extras["anchor_index"].shape == (30,)
    # every item aligned onto its prototype looks like it (the prototypes are the members posed into one frame)
    for c in range(3):
        members = r.aligned[r.labels == c]
        assert float(np.mean((members - r.prototypes[c]) ** 2)) < 0.25 * float(np.mean(r.prototypes[c] ** 2))
    # saved and loaded, new turned copies go where their kind went
    path = tmp_path / "r.npz"
    r.save(path)
    back = ticlust.load_result(path)
    rng = np.random.default_rng(5)
    fresh = np.stack([posed(torch.from_numpy(r.prototypes[c])[None, None], [a], [f], [[0.0, 0.0]])[0, 0].numpy()
                      for c, a, f in zip([0, 1, 2, 0], rng.uniform(0, 6.28, 4), [True, False, True, False])])
    p = ticlust.predict(back, fresh, device="cpu")
    assert p.labels.tolist() == [0, 1, 2, 0]
    # the fit's own items predicted: the fit's clusters
    assert np.array_equal(ticlust.predict(back, x, device="cpu").labels, r.labels)
    # the inspector: the item posed onto each prototype; the scores are the result's
    warped, scores = align_one(r, x[4], device="cpu")
    assert warped.shape == (3, 24, 24) and int(np.argmin(scores)) == r.labels[4]


def test_rigid_spectral_bad_input_one_sentence(turned_set):
    with pytest.raises(InputError, match="stack of images"):
        ticlust.fit(np.random.rand(20, 30).astype(np.float32), "rigid-spectral", k=2, device="cpu")
    with pytest.raises(InputError, match="at least 3 images"):
        ticlust.fit(np.random.rand(2, 16, 16).astype(np.float32), "rigid-spectral", k=1, device="cpu")
    with pytest.raises(InputError, match="8×8"):
        ticlust.fit(np.random.rand(20, 6, 6).astype(np.float32), "rigid-spectral", k=2, device="cpu")
    x, _ = turned_set(n_per=4)
    r = ticlust.fit(x, "rigid-spectral", k=2, device="cpu", anchors=6)
    with pytest.raises(InputError, match="same shape"):
        ticlust.predict(r, np.random.rand(3, 20, 20).astype(np.float32), device="cpu")


def test_pose_of_the_search_is_the_rigid_modules_convention(references, posed):
    """nearest_turns' (angle, flip) with the centres give pose_theta's map: the item carried onto the reference."""
    refs = references(1)
    item = posed(refs, [4.0], [True], [[2.0, 1.0]])
    n_angles = angle_count(tuple(refs.shape[-2:]))
    anchors = Anchors.of(refs)
    centre = intensity_centres(item)
    t = nearest_turns(polar_spectra(item, centre, n_angles), anchors.spectra, 1, n_angles, flip=True)
    ref = anchors.centres[0] * torch.tensor([-1.0 if bool(t.flip[0, 0]) else 1.0, 1.0])
    c, s = math.cos(float(t.angle[0, 0])), math.sin(float(t.angle[0, 0]))
    shift = centre[0] - torch.tensor([c * ref[0] - s * ref[1], s * ref[0] + c * ref[1]])
    back = aligned_items(item, pose_theta(t.angle[0], t.flip[0], shift[None], (24, 24)))
    assert float(((back - refs) ** 2).sum()) < 0.1 * float((refs ** 2).sum())


def test_rigid_spectral_fits_a_store_sample_and_assigns_the_plate(tmp_path, one_thread):
    """The plate route: extract a generated plate, fit on a sample of its objects (similarity invariances, as for
    every aligning method on objects), predict every object into the store; the kinds come out."""
    import pandas as pd

    from ticlust.datasets.nuclei import write_nuclei_plate
    from ticlust.plate.run import fit_store, predict_store

    manifest = write_nuclei_plate(tmp_path / "plate", fields=3, n=30, shape=(224, 224), seed=5)
    store = ticlust.extract(manifest, tmp_path / "plate.zarr")
    result, _ = fit_store(store, method="rigid-spectral", k=3, sample=60, progress=False, anchors=40)
    assert result.config["invariances"] == "similarity" and result.n == 60
    predict_store(result, store, progress=False)
    table = pd.read_parquet(store.path / "predictions.parquet")
    assert len(table) == len(store) and table["cluster"].between(0, 2).all()
    kinds = pd.read_csv(tmp_path / "plate" / "kinds.csv")
    truth = table.merge(kinds, left_on=["image", "label"], right_on=["image", "label"])["kind"]
    assert len(truth) == len(table)
    assert ticlust.evaluate(pd.factorize(truth)[0], table["cluster"].to_numpy())["acc"] >= 0.9


def test_progress_names_each_stage_through_posing_every_item(turned_set, one_thread):
    """Every stage is named and the last of the fit, every item posed on its prototype, counts its batches (it was
    silent: the ETA said nothing was left while it ran), then the object map."""
    from ticlust.events import Progress
    from ticlust.methods.base import MAP_STAGE

    x, _ = turned_set()
    events = [e for e in ticlust.run(x, "rigid-spectral", k=3, device="cpu", seed=0, anchors=30, batch_size=8)
              if isinstance(e, Progress)]
    stages = list(dict.fromkeys(e.stage for e in events))
    assert stages == ["comparing every item with the anchors at every angle", "k-means restarts",
                      "prototypes: members posed and averaged", "posing every item on its prototype", MAP_STAGE]
    assert [e.step for e in events if e.stage.startswith("posing")] == [1, 2, 3, 4, 5]      # 36 items, 8 at a time


def test_the_blur_as_two_matrix_products_equals_the_two_convolutions():
    import torch.nn.functional as F

    from ticlust.transforms.align import gaussian_kernel, gaussian_lowpass

    x = torch.rand(6, 2, 40, 28, generator=torch.Generator().manual_seed(0))
    for sigma in (0.4, 0.8, 2.5):
        radius, kernel = gaussian_kernel(sigma)
        y = F.conv2d(x.reshape(-1, 1, 40, 28), kernel.view(1, 1, -1, 1), padding=(radius, 0))
        y = F.conv2d(y, kernel.view(1, 1, 1, -1), padding=(0, radius)).reshape(x.shape)
        assert torch.allclose(gaussian_lowpass(x, sigma), y, atol=1e-6)
    assert gaussian_lowpass(x, 0.0) is x


def test_a_warp_fitted_on_reduced_crops_finds_the_anchor_at_nearly_the_full_size_distance(references, posed, one_thread):
    """work_side: at 64 px the warps are fitted on 32-px averages (4× fewer pixels); the nearest anchor is the same and the
    distance, in the full size's units, within a few hundredths of the one fitted at full size."""
    import torch.nn.functional as F

    from ticlust.methods.rigid_spectral import RIGID_SPECTRAL, RigidSpectralConfig, anchor_links

    refs = F.interpolate(references(5, 32), scale_factor=2, mode="bilinear", align_corners=False)      # 64 px
    items = posed(refs[2:3], [2.2], [False], [[2.0, -4.0]])
    found = {}
    for side in (0, 32):
        cfg = RigidSpectralConfig(k=2, candidates=5, neighbours=5, fit_iter=4, work_side=side)
        aligner = RIGID_SPECTRAL.aligner(cfg, tuple(refs.shape[-2:]), "cpu")
        assert aligner.work == (2 if side else 1)
        found[side] = anchor_links(items, Anchors.of(prepared(refs, cfg.lowpass)), cfg, aligner)
    for dist, idx in found.values():
        assert int(idx[0, 0]) == 2 and float(dist[0, 0]) < 0.5 * float(dist[0, 1])
    assert abs(float(found[32][0][0, 0]) - float(found[0][0][0, 0])) < 0.05
