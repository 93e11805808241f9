"""Generated landmark shapes: two bundled 8-landmark mean shapes and the Gaussian perturbation model of
Gattone et al. (2018, Eq. 15) that draws labelled samples around them (the Landmark shapes sample)."""
from __future__ import annotations

import numpy as np

from ..errors import InputError

# ---- two bundled 8-landmark mean shapes (our own, arbitrary units ~ a skull section of radius 100) -----
#: A rounded "skull" outline: 8 landmarks going round anticlockwise.
MEAN_SHAPE_A = np.array([[100.0, 0.0], [72.0, 58.0], [10.0, 88.0], [-60.0, 70.0],
                         [-98.0, 8.0], [-70.0, -55.0], [0.0, -80.0], [68.0, -62.0]])
#: The same outline with a longer snout (landmarks 0, 1, 7) and a flatter vault (2, 3).
MEAN_SHAPE_B = np.array([[125.0, 5.0], [82.0, 52.0], [12.0, 76.0], [-58.0, 60.0],
                         [-98.0, 8.0], [-70.0, -55.0], [2.0, -82.0], [80.0, -52.0]])

STRUCTURES = ("isotropic", "heteroscedastic", "anisotropic")
NOISE_SCALES = ("sd", "kronecker", "variance")


# ---- simulation (Gattone et al. 2018, Eq. 15) ------------------------------------------------------
def noise_sds(structure: str, n_landmarks: int, n_clusters: int, sigma: float = 13.0, sigma_low: float = 1.3,
              n_noisy: int = 3, noise_scale: str = "sd", rng: np.random.Generator | None = None) -> np.ndarray:
    """Per-cluster standard deviations (G, L, 2) of the landmark errors E_i for one structure.

    ``isotropic``: Σ_E = σI_K ⊗ σI_2. ``heteroscedastic``: Σ_E = diag[σ_1..σ_K] ⊗ σI_2 with σ_k = σ
    for ``n_noisy`` random landmarks of each cluster and ``sigma_low`` for the rest.
    ``anisotropic``: Σ_E = σI_K ⊗ diag[σ_x, σ_y], (σ_x, σ_y) = (σ, σ_low) in the first cluster and
    (σ_low, σ_low) in the others. ``noise_scale`` says how to read the σ's: "sd" (they are standard
    deviations), "kronecker" (the Kronecker product's entries are variances: variance = σ_k·σ) or
    "variance" (each listed value is a variance).
    """
    if structure not in STRUCTURES:
        raise InputError(f"Unknown covariance structure {structure!r}: choose one of {', '.join(STRUCTURES)}.")
    if noise_scale not in NOISE_SCALES:
        raise InputError(f"Unknown noise scale {noise_scale!r}: choose one of {', '.join(NOISE_SCALES)}.")
    rng = rng if rng is not None else np.random.default_rng(0)
    first = np.full((n_clusters, n_landmarks, 2), float(sigma))   # the "σ_k" / "σ_x, σ_y" factor
    if structure == "heteroscedastic":
        first[:] = sigma_low
        for g in range(n_clusters):
            first[g, rng.choice(n_landmarks, size=min(n_noisy, n_landmarks), replace=False)] = sigma
    elif structure == "anisotropic":
        first[:] = sigma_low
        first[0, :, 0] = sigma
    if noise_scale == "sd":
        return first
    if noise_scale == "variance":
        return np.sqrt(first)
    return np.sqrt(first * sigma) if structure != "isotropic" else first


def simulate_shapes(means, n: int = 100, structure: str = "isotropic", sigma: float = 13.0, sigma_low: float = 1.3,
                    n_noisy: int = 3, noise_scale: str = "sd", noisy_per: str = "cluster", translation: float = 2.0,
                    seed: int | np.random.Generator = 0, return_pose: bool = False):
    """Shapes from the Gaussian perturbation model X_i = (μ_g + E_i) Γ_i + 1 γ_i^T (Eq. 15).

    ``means`` (G, L, 2); n shapes split as evenly as possible over the G clusters (shuffled);
    Γ_i a rotation by an angle uniform in [0, 2π); γ_i uniform in [-translation, translation]².
    ``noisy_per`` = "cluster" draws the heteroscedastic noisy landmarks once per cluster,
    "shape" draws them again for every shape. Returns ``(shapes (n, L, 2), labels (n,))``, plus the
    rotation angles (n,) and translations (n, 2) when ``return_pose``.
    """
    mu = np.asarray(means, dtype=np.float64)
    if mu.ndim != 3 or mu.shape[2] != 2 or mu.shape[0] < 1:
        raise InputError(f"The mean shapes have shape {mu.shape}: give (clusters, landmarks, 2).")
    if noisy_per not in ("cluster", "shape"):
        raise InputError(f"noisy_per = {noisy_per!r}: choose 'cluster' or 'shape'.")
    if n < mu.shape[0]:
        raise InputError(f"n = {n} is smaller than the number of clusters ({mu.shape[0]}): simulate at least one shape per cluster.")
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    n_clusters, n_lm = mu.shape[:2]
    labels = rng.permutation(np.arange(n) % n_clusters)
    sds = noise_sds(structure, n_lm, n_clusters, sigma, sigma_low, n_noisy, noise_scale, rng)
    if structure == "heteroscedastic" and noisy_per == "shape":
        per_shape = np.stack([noise_sds(structure, n_lm, 1, sigma, sigma_low, n_noisy, noise_scale, rng)[0]
                              for _ in range(n)])
    else:
        per_shape = sds[labels]
    noise = rng.standard_normal((n, n_lm, 2)) * per_shape
    theta = rng.uniform(0.0, 2 * np.pi, size=n)
    c, s = np.cos(theta), np.sin(theta)
    gamma = np.stack([np.stack([c, -s], -1), np.stack([s, c], -1)], -2)   # row vectors times Γ
    shift = rng.uniform(-translation, translation, size=(n, 2))
    shapes = np.einsum("nlc,ncd->nld", mu[labels] + noise, gamma) + shift[:, None]
    if return_pose:
        return shapes, labels.astype(np.int64), theta, shift
    return shapes, labels.astype(np.int64)


def sample_landmarks(seed: int = 0, n: int = 100, structure: str = "heteroscedastic") -> tuple[np.ndarray, np.ndarray]:
    """A bundled landmark sample: n shapes of 8 landmarks from the two built-in mean shapes under
    Eq. 15 (rotated, translated, noise sd 6 on 3 landmarks per cluster and 0.6 on the rest)."""
    means = np.stack([MEAN_SHAPE_A, MEAN_SHAPE_B])
    return simulate_shapes(means, n=n, structure=structure, sigma=6.0, sigma_low=0.6, seed=seed)
