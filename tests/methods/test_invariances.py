"""The ``invariances`` choice (issue 14): each family's warps are of that kind, bad values get one sentence,
image stacks keep their defaults, and objects from a segmentation default to shape-keeping warps."""
import math

import numpy as np
import pytest
import torch

import ticlust
from ticlust.api import object_params
from ticlust.errors import InputError
from ticlust.events import drain
from ticlust.transforms.align import Aligner, Schedule
from ticlust.datasets.nuclei import nuclei_field
from ticlust.datasets.samples import glyphs_sample
from ticlust.transforms import affine_grid, make_module, similarity_affine

pytestmark = pytest.mark.usefixtures("one_thread")

ST_FAST = dict(steps=4, affine_steps=3, predict_steps=4, max_iter=2, landmarks=3)
DTI_FAST = dict(max_epochs=2, min_stage_epochs=1, patience=1, final_epochs=1, batch_size=16, threads=1)


def glyphs():
    return glyphs_sample(n_per_class=6, size=16, seed=1)[0]


def singular_values(matrices):
    return np.linalg.svd(np.asarray(matrices, np.float64)[..., :2, :2], compute_uv=False)


# ---- the modules ---------------------------------------------------------------------------------
def test_similarity_and_rigid_modules_are_shape_keeping_affine_maps():
    params = torch.tensor([[0.7, 0.3, 0.1, -0.2], [-2.0, -0.4, 0.0, 0.3]])
    sim, rigid = make_module("similarity"), make_module("rigid")
    assert (sim.n_params, rigid.n_params) == (4, 3)
    m = sim.shaped(params).numpy()
    sv = singular_values(m)
    assert np.allclose(sv[:, 0], sv[:, 1]) and np.allclose(sv[:, 0], np.exp([0.3, -0.4]), atol=1e-6)
    assert np.allclose(np.linalg.det(m[:, :, :2]), np.exp(2 * np.array([0.3, -0.4])), atol=1e-5)   # turns, never mirrors
    assert np.allclose(m[0, :, :2], math.exp(0.3) * np.array([[math.cos(0.7), -math.sin(0.7)], [math.sin(0.7), math.cos(0.7)]]),
                       atol=1e-6)
    r = rigid.shaped(params[:, [0, 2, 3]]).numpy()
    assert np.allclose(singular_values(r), 1, atol=1e-6) and np.allclose(np.linalg.det(r[:, :, :2]), 1, atol=1e-6)
    # zero parameters are the identity; the grid is the affine grid of the same map; the inverse undoes it
    assert torch.equal(sim.grid(torch.zeros(1, 4), (5, 7)), affine_grid(torch.zeros(1, 6), (5, 7)))
    assert torch.allclose(sim.grid(params, (5, 7)), affine_grid(similarity_affine(params), (5, 7)))
    pts = torch.rand(2, 9, 2) * 2 - 1
    assert torch.allclose(sim.inverse_points(params, sim.points(params, pts)), pts, atol=1e-5)


# ---- DTI -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("family, modules", [("rigid", ["color", "rigid"]), ("similarity", ["color", "similarity"]),
                                             ("affine", ["color", "affine"])])
def test_dti_family_decides_its_modules_and_warps(family, modules):
    res = ticlust.fit(glyphs(), method="dti-kmeans", k=3, device="cpu", seed=0, progress=False, invariances=family, **DTI_FAST)
    assert list(np.asarray(res.state.modules)) == modules and res.config["invariances"] == family
    sv = singular_values(res.params[family])
    if family == "affine":
        return
    assert np.allclose(sv[:, 0], sv[:, 1], atol=1e-5), "a shape-keeping family sheared or stretched"
    if family == "rigid":
        assert np.allclose(sv, 1, atol=1e-5)


def test_dti_deformable_family_and_conflicting_choices():
    from ticlust.methods.dti import DTIKMeansConfig, resolve_modules

    cfg = DTIKMeansConfig(k=3, invariances="deformable")
    assert resolve_modules(cfg, 1, (16, 16)) == ("color", "affine", "morpho", "tps")
    assert resolve_modules(DTIKMeansConfig(k=3), 1, (16, 16)) == ("affine", "morpho", "tps")   # auto: the paper's
    with pytest.raises(InputError, match="both choose the warps"):
        ticlust.fit(glyphs(), method="dti-kmeans", k=3, device="cpu", progress=False, invariances="rigid",
                    transforms="affine,tps", **DTI_FAST)


# ---- ST / AI K-means -----------------------------------------------------------------------------
@pytest.mark.parametrize("method, family", [("st-kmeans", "rigid"), ("st-kmeans", "similarity"), ("st-kmeans", "affine"),
                                            ("ai-kmeans", "similarity"), ("st-kmeans", "deformable")])
def test_st_family_constrains_the_affine_maps_and_the_tps_stage(method, family):
    params = ST_FAST if method == "st-kmeans" else {k: v for k, v in ST_FAST.items() if k != "landmarks"}
    res = ticlust.fit(glyphs(), method=method, k=3, device="cpu", seed=0, progress=False, invariances=family, **params)
    assert res.config["invariances"] == family
    assert ("displacements" in res.params) == (family == "deformable")    # the TPS stage only in the full family
    sv = singular_values(res.params["pair_theta"].reshape(-1, 2, 3) + np.eye(2, 3))
    if family in ("rigid", "similarity"):
        assert np.allclose(sv[:, 0], sv[:, 1], atol=1e-5)
    if family == "rigid":
        assert np.allclose(sv, 1, atol=1e-5)
    if family == "affine":
        assert not np.allclose(sv[:, 0], sv[:, 1], atol=1e-3)            # the unconstrained family does shear


def test_rotation_search_turns_an_item_the_local_search_cannot():
    """An ellipse at 90° to its centroid: from the identity Adam sits on a saddle; the turned starts find it."""
    yy, xx = np.mgrid[:24, :24] - 11.5
    ellipse = ((xx / 9) ** 2 + (yy / 4) ** 2 <= 1).astype(np.float32)
    x = torch.from_numpy(ellipse.T.copy())[None, None]
    mu = torch.from_numpy(ellipse)[None, None]
    losses = {}
    for linear in ("affine", "rigid"):
        aligner = Aligner((24, 24), None, "cpu", lowpass=0.07, linear=linear, max_scale=1.5)
        start = aligner.zeros(1, 1)
        out = drain(aligner.align(aligner.pyramid(x), aligner.pyramid(mu), start, Schedule(10, 10, 1e-2, 5e-3)))
        losses[linear] = float(out.losses[0, 0])
    identity = float(((x - mu) ** 2).sum())
    assert losses["rigid"] < 0.05 * identity < losses["affine"]


def test_bad_invariances_get_one_sentence_listing_the_choices():
    with pytest.raises(InputError, match=r"invariances = 'shear' is not allowed: choose from auto, rigid, similarity, affine, deformable\."):
        ticlust.fit(glyphs(), method="st-kmeans", k=3, progress=False, invariances="shear")
    with pytest.raises(InputError, match="choose from auto, rigid, similarity, affine\\.$"):
        ticlust.fit(glyphs(), method="ai-kmeans", k=3, progress=False, invariances="deformable")


# ---- objects from a segmentation -----------------------------------------------------------------
def test_object_params_default_to_similarity_and_the_user_overrides():
    assert object_params("dti-kmeans", {})["invariances"] == "similarity"
    assert object_params("st-kmeans", {"invariances": "auto", "steps": "3"}) == {"invariances": "similarity", "steps": "3"}
    assert object_params("ai-kmeans", {"invariances": "affine"})["invariances"] == "affine"
    assert object_params("dti-gmm", {"transforms": "affine,tps"}) == {"transforms": "affine,tps"}   # the expert's modules win
    assert object_params("kmeans", {"max_iter": 5}) == {"max_iter": 5}                              # nothing to choose
    given = {"invariances": "auto"}
    object_params("dti-kmeans", given)
    assert given == {"invariances": "auto"}                                                         # input untouched


def test_cli_labels_run_records_the_objects_route_invariances(tmp_path, capsys):
    import tifffile

    from ticlust.cli import main

    f = nuclei_field(n=30, shape=(200, 200), seed=2)
    tifffile.imwrite(tmp_path / "field.tif", f.image)
    tifffile.imwrite(tmp_path / "mask.tif", f.labels)
    fast = [a for key, value in ST_FAST.items() if key != "landmarks" for a in ("--set", f"{key}={value}")]
    for extra, want in (([], "similarity"), (["--set", "invariances=affine", "--no-orient", "--no-normalize"], "affine")):
        assert main(["fit", str(tmp_path / "field.tif"), "--labels", str(tmp_path / "mask.tif"), "--method", "ai-kmeans",
                     "--k", "3", *fast, *extra, "-o", str(tmp_path / "r.npz"), "--csv", str(tmp_path / "r.csv"), "--quiet"]) == 0
        assert ticlust.load_result(tmp_path / "r.npz").config["invariances"] == want
        header = (tmp_path / "r.csv").read_text().splitlines()[0].split(",")
        assert ("angle" in header) == (want == "similarity")          # the route orients objects unless told not to
