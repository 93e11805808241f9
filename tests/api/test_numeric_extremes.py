"""Numerical extremes give a result or a sentence, never NumPy's or torch's exception (issue 55, item 3): every
method family fitted and predicting on data scaled from 1e-30 to 1e30, on near-singular covariances and on
repeated eigenvalues. Landmark shapes scaled by 1e30 (shape-kmeans, procrustes-kmeans) raised LinAlgError ("eigh
failed to converge") from kernels/pca.py, where the object map's PCA formed float32 products of 1e30 values: the
rows are now decomposed at unit scale (an exact power of two) and eigh falls back to the SVD.

Scaling every value by one factor changes nothing a method sees (image stacks are normalised, shapes are compared
relative to their own spread), so the result must be the unit-scale fit's: the same partition, finite everywhere,
and no RuntimeWarning (an overflow or a 0/0 on the way is how silently wrong results start)."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import ticlust
from ticlust.datasets.samples import glyphs_sample
from ticlust.datasets.shapes import sample_landmarks
from ticlust.kernels.pca import pca_poc_steps, symmetric_eigh, unit_scale
from ticlust.events import drain

LANDMARK_METHODS = ("shape-kmeans", "procrustes-kmeans")
SCALES = (1e-30, 1e30)
ALL_SCALES = (1e-30, 1e-20, 1e-10, 1e10, 1e20, 1e30)


def data_of(method: str) -> np.ndarray:
    if method in LANDMARK_METHODS:
        return sample_landmarks(seed=0, n=30)[0].astype(np.float64)
    return glyphs_sample(n_per_class=6, size=16, seed=1)[0].astype(np.float64)


def fit_clean(x, method: str, k: int = 3, fast: dict | None = None, **params):
    """Fit (with the method's pinned, fast parameters ``fast``) and predict with every warning an error; the fit,
    checked finite."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = ticlust.fit(x, method, k=k, device="cpu", seed=0, progress=False, **{**(fast or {}), **params})
        again = ticlust.predict(result, x[:5], device="cpu")
    for name in ("scores", "prototypes", "map"):
        value = getattr(result, name)
        assert value is None or np.isfinite(np.asarray(value)).all(), (method, name)
    assert np.isfinite(np.asarray(again.scores)).all()
    return result


def same_partition(a, b) -> bool:
    return ticlust.evaluate(a.labels, b.labels)["ari"] == 1.0


@pytest.fixture(scope="module")
def unit_fits():
    return {}


def check_scales(method, scales, unit_fits, fast, dtype=np.float64, **params):
    x = data_of(method)
    key = (method, tuple(sorted(params.items())))
    if key not in unit_fits:
        unit_fits[key] = fit_clean(x, method, fast=fast, **params)
    for scale in scales:
        scaled = fit_clean((x * scale).astype(dtype), method, fast=fast, **params)
        assert same_partition(scaled, unit_fits[key]), (method, scale, params)


def test_every_method_family_fits_data_scaled_by_1e_minus_30_and_1e30(pinned_method, pins, unit_fits):
    check_scales(pinned_method, SCALES, unit_fits, pins.CASES[pinned_method])


@pytest.mark.slow
def test_every_method_family_over_the_whole_range_and_both_float_widths(pinned_method, pins, unit_fits):
    fast = pins.CASES[pinned_method]
    check_scales(pinned_method, ALL_SCALES, unit_fits, fast)
    if pinned_method not in LANDMARK_METHODS:
        check_scales(pinned_method, (1e-30, 1e30), unit_fits, fast, dtype=np.float32)


@pytest.mark.parametrize("params", [dict(scale=False), dict(distance="wasserstein"), dict(distance="fisher-rao-round"),
                                    dict(type=1)])
def test_the_shape_methods_variants_at_1e30(params, unit_fits):
    check_scales("shape-kmeans", SCALES, unit_fits, {}, **params)
    if list(params) == ["scale"]:
        check_scales("procrustes-kmeans", SCALES, unit_fits, {}, **params)


def _polygon(sides=8):
    angles = np.linspace(0, 2 * np.pi, sides, endpoint=False)
    return np.stack([np.cos(angles), np.sin(angles)], 1)


def _ill_conditioned():
    """(shapes, whether they hold two groups a fit must find at any scale; else only noise to split)."""
    rng = np.random.default_rng(0)
    poly = _polygon()
    line = np.stack([np.linspace(0, 1, 8), np.zeros(8)], 1)
    bent = poly.copy()
    bent[0] *= 1.6
    return {
        # a regular polygon's landmark cloud is isotropic: repeated eigenvalues in every Procrustes rotation
        "regular polygons of two sizes": (np.stack([poly * (1 + 0.5 * (i % 2)) for i in range(30)]), False),
        "regular polygons, 1e-9 noise": (np.stack([poly * (1 + 0.5 * (i % 2)) + rng.normal(0, 1e-9, (8, 2))
                                                   for i in range(30)]), False),
        "regular polygons and one landmark out": (np.stack([bent if i % 2 else poly for i in range(30)]), True),
        # landmarks on one line: every shape's covariance is singular
        "collinear landmarks": (np.stack([line ** (1 + i % 2) for i in range(30)]), True),
        # 1e-6 apart with 1e-12 noise: covariances near zero
        "near-singular spread": (np.stack([poly + rng.normal(0, 1e-12, (8, 2)) + (i % 2) * 1e-6 * poly
                                           for i in range(30)]), False),
    }


@pytest.mark.parametrize("case", list(_ill_conditioned()))
@pytest.mark.parametrize("method, params", [("shape-kmeans", {}), ("shape-kmeans", dict(distance="wasserstein")),
                                            ("shape-kmeans", dict(scale=False)), ("procrustes-kmeans", {})])
def test_ill_conditioned_shapes_at_every_scale_give_a_finite_result(case, method, params):
    """Finite everywhere, no warning, at every scale; the same two groups where there are two to find (shapes that
    differ by noise alone may be split anywhere)."""
    x, grouped = _ill_conditioned()[case]
    unit = fit_clean(x, method, k=2, **params)
    for scale in (1e-30, 1e30):
        scaled = fit_clean(x * scale, method, k=2, **params)
        assert not grouped or same_partition(scaled, unit), (case, scale)


def test_shapes_with_no_extent_are_one_sentence_at_every_scale():
    x = np.stack([_polygon() * (i % 2) for i in range(10)])
    for scale in (1.0, 1e-30, 1e30):
        with pytest.raises(ticlust.InputError, match="has all its landmarks at one point"):
            ticlust.fit(x * scale, "shape-kmeans", k=2, device="cpu", progress=False)


@pytest.mark.parametrize("case", ["one pixel differs", "rank one (brightness only)"])
def test_image_stacks_of_near_singular_covariance_at_every_scale(case, pins):
    base = np.random.default_rng(0).random((16, 16))
    x = np.stack([base * (1 + 0.1 * (i % 3)) for i in range(24)])
    if case == "one pixel differs":
        x = np.stack([base.copy() for _ in range(24)])
        x[:, 3, 3] += 0.5 * (np.arange(24) % 3)
    for method in ("kmeans", "gmm", "pssc", "nt"):          # at the pins' short settings (nt: 2 iterations)
        unit = fit_clean(x, method, fast=pins.CASES[method])
        for scale in SCALES:
            assert same_partition(fit_clean(x * scale, method, fast=pins.CASES[method]), unit), (method, scale)


# ---- the kernel ------------------------------------------------------------------------------------------------
def test_the_pca_decomposes_at_unit_scale_and_gives_back_the_rows_units():
    rng = np.random.default_rng(3)
    x = (rng.random((40, 12)) @ rng.random((12, 12))).astype(np.float32)
    z1, mean1, basis1, vals1 = drain(pca_poc_steps(x, 5, 1, "eigh", torch.device("cpu"), np.random.default_rng(0)))
    for k in (-100, 100):
        s = 2.0 ** k
        assert unit_scale(x * np.float32(s)) == 2.0 ** (k + np.floor(np.log2(np.abs(x).max())))
        z, mean, basis, vals = drain(pca_poc_steps(x * np.float32(s), 5, 1, "eigh", torch.device("cpu"),
                                                   np.random.default_rng(0)))
        np.testing.assert_allclose(basis.numpy(), basis1.numpy(), atol=1e-6)
        np.testing.assert_allclose(z.numpy() / s, z1.numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(mean.numpy() / s, mean1.numpy(), rtol=1e-6)
        np.testing.assert_allclose(vals.numpy() / s ** 2, vals1.numpy(), rtol=1e-6)
    assert unit_scale(x) == 1.0 and unit_scale(np.zeros((3, 2))) == 1.0


def test_eigh_that_does_not_converge_falls_back_to_the_svd(monkeypatch):
    """A PSD matrix with a repeated eigenvalue, LAPACK's eigh made to fail: the SVD gives the same eigenpairs."""
    q, _ = torch.linalg.qr(torch.randn(5, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(0)))
    values = torch.tensor([0.0, 1.0, 1.0, 1.0, 4.0], dtype=torch.float64)
    m = q @ torch.diag(values) @ q.T
    good_vals, _ = torch.linalg.eigh(m)

    def fails(_):
        raise torch.linalg.LinAlgError("linalg.eigh: The algorithm failed to converge")
    monkeypatch.setattr(torch.linalg, "eigh", fails)
    vals, vecs = symmetric_eigh(m)
    torch.testing.assert_close(vals, good_vals, atol=1e-10, rtol=0)
    torch.testing.assert_close(vecs @ torch.diag(vals) @ vecs.T, m, atol=1e-10, rtol=0)
