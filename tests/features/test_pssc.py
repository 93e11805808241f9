"""PSSC: scattering agrees with kymatio, PCA/POC and the transfer cut match closed forms, the cache works,
results are reproducible, and the method clusters the package's own digits sample."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import ticlust
from ticlust.errors import InputError
from ticlust.datasets.samples import digits_sample
from ticlust.events import drain
from ticlust.features import scattering_features
from ticlust.kernels import pca, spectral
from ticlust.kernels import pssc as kpssc
from ticlust.features.scattering import FastScattering2D, fast_scattering, kymatio_scattering, n_paths


# small, fast settings for the tiny test data (the defaults are the paper's)
SMALL = dict(pad_to=16, scales=2, candidates=200, representatives=60, restarts=3)


@pytest.fixture(scope="module")
def digits():
    x, y = digits_sample(16)
    rng = np.random.default_rng(0)
    idx = np.sort(rng.choice(len(x), 200, replace=False))
    return x[idx], y[idx]


def test_kymatio_2d_imports_despite_scipy_117():
    from kymatio.scattering2d.frontend.torch_frontend import ScatteringTorch2D  # the path used by ticlust

    s = ScatteringTorch2D(J=2, shape=(16, 16), L=4)
    assert tuple(s(torch.rand(1, 16, 16)).shape) == (1, n_paths(2, 4), 4, 4)


@pytest.mark.parametrize("shape,j,L,order", [((32, 32), 3, 8, 2), ((16, 24), 2, 4, 2), ((16, 16), 3, 6, 1)])
def test_fast_scattering_equals_kymatio(shape, j, L, order):
    x = torch.rand(6, *shape, generator=torch.Generator().manual_seed(1))
    ours = FastScattering2D(shape, j, L, order)(x)
    ref = kymatio_scattering(shape, j, L, order)(x)
    assert ours.shape == ref.shape == (6, n_paths(j, L, order), shape[0] // 2 ** j, shape[1] // 2 ** j)
    assert float((ours - ref).abs().max()) < 1e-5


def test_scattering_steps_give_the_same_features_and_the_operator_is_built_once():
    """Features do not depend on how many images a step scatters (fit and predict may step differently), the
    operator is built once per shape and device, and a CPU step holds fewer images when they are larger."""
    x = torch.rand(24, 32, 32, generator=torch.Generator().manual_seed(2))
    op = fast_scattering((32, 32))
    assert fast_scattering((32, 32)) is op and fast_scattering((16, 16), 2) is not op
    whole = op(x)
    # equal up to float32 roundoff, not bit for bit: on an AMD EPYC the batched FFT and products round a step of
    # 1, 5 or 8 images differently from one of 24 (1 unit at the features' scale; an Intel Xeon gave equal bits)
    roundoff = 16 * 2.0 ** -23 * float(whole.abs().max())
    for step in (1, 5, 8):
        torch.testing.assert_close(torch.cat([op(x[i:i + step]) for i in range(0, len(x), step)]), whole, rtol=0, atol=roundoff)
    cfg = kpssc.PSSCConfig()
    small, large = (scattering_features.Scatterer(shape, cfg, torch.device("cpu")) for shape in ((32, 32), (64, 64)))
    assert scattering_features.scattering_batch(cfg, small) == cfg.batch_size == 32
    assert scattering_features.scattering_batch(cfg, large) == 8   # 4× the pixels: a quarter of the images per step


def test_paper_feature_count():
    # 28×28 MNIST zero-padded to 32×32 → 217 paths × 4×4 = 3472 coefficients (paper Sec. 4.3)
    op = scattering_features.Scatterer((28, 28), kpssc.PSSCConfig(), torch.device("cpu"))
    assert (op.hp, op.wp, op.paths, op.dim) == (32, 32, 217, 3472)
    assert op(np.zeros((2, 28, 28), np.float32)).shape == (2, 3472)
    assert scattering_features.padded_shape(16, 16, 32, 3) == (32, 32) and scattering_features.padded_shape(40, 33, 32, 3) == (40, 40)


def test_pca_and_poc_remove_the_leading_directions():
    rng = np.random.default_rng(0)
    basis = np.linalg.qr(rng.normal(size=(30, 30)))[0]
    spectrum = 2.0 ** -np.arange(30)
    x = (rng.normal(size=(4000, 30)) * np.sqrt(spectrum)) @ basis.T
    x = x.astype(np.float32)
    mean, cov = drain(pca.covariance_steps(x, torch.device("cpu"), chunk=1000))
    np.testing.assert_allclose(cov.numpy(), np.cov(x.T, bias=True), atol=1e-5)
    vals, vecs = pca.top_eigenvectors(cov, 10, "eigh", rng)
    rvals, rvecs = pca.top_eigenvectors(cov, 10, "randomized", rng)
    np.testing.assert_allclose(rvals.numpy()[:8], vals.numpy()[:8], rtol=1e-4)
    z = drain(pca.project_steps(x, mean, vecs[:, 2:], torch.device("cpu"))).double().numpy()   # POC n = 2
    zvar = np.sort(np.linalg.eigvalsh(np.cov(z.T, bias=True)))[::-1]
    np.testing.assert_allclose(zvar, vals.numpy()[2:10], rtol=1e-3)
    # the removed directions are the two leading ones of the data
    assert abs(abs(float(vecs[:, 0] @ torch.from_numpy(basis[:, 0]))) - 1) < 1e-3


def test_transfer_cut_equals_full_bipartite_ncut():
    """D_X⁻¹ A w must be (column by column) the item part of the normalised-cut eigenvectors of the
    full (N+p)×(N+p) bipartite graph (Li et al.'s transfer-cut theorem)."""
    rng = np.random.default_rng(3)
    n, p, k, c = 120, 15, 4, 3
    z = torch.from_numpy(np.concatenate([rng.normal(m, 0.4, size=(n // 3, 2)) for m in (0, 3, 6)]).astype(np.float32))
    reps = z[torch.from_numpy(rng.choice(n, p, replace=False))]
    dist, idx = spectral.nearest_exact(z, reps, k)
    aff = spectral.affinities(dist, float(dist.mean()))
    _, w, vals = spectral.transfer_cut(aff, idx, p, c)
    emb = spectral.extend_embedding(aff, idx, w, normalise=False).double().numpy()
    a = np.zeros((n, p))
    np.put_along_axis(a, idx.numpy(), aff.numpy(), axis=1)
    full = np.block([[np.zeros((n, n)), a], [a.T, np.zeros((p, p))]])
    deg = full.sum(1)
    mu, g = np.linalg.eigh(full / np.sqrt(deg[:, None] * deg[None, :]))
    order = np.argsort(mu)[::-1][:c]
    u = (g[:, order] / np.sqrt(deg)[:, None])[:n]
    np.testing.assert_allclose(np.sqrt(np.clip(vals.numpy(), 0, None)), mu[order], atol=1e-8)
    # three separated groups make the top eigenvalue (1) threefold: only the spanned space is unique,
    # so compare spaces (every embedding column lies in the span of the full graph's eigenvectors)
    basis, _ = np.linalg.qr(u)
    for col in range(c):
        v = emb[:, col] / np.linalg.norm(emb[:, col])
        assert np.linalg.norm(basis.T @ v) > 1 - 1e-6


def test_hnsw_finds_the_exact_neighbours_and_euclidean_distances():
    rng = np.random.default_rng(0)
    z = torch.from_numpy(rng.normal(size=(500, 20)).astype(np.float32))
    reps = z[:50].clone()
    d_exact, i_exact = spectral.nearest_exact(z, reps, 5)
    d_hnsw, i_hnsw = spectral.nearest_hnsw(z, reps, 5, seed=0, ef=100)
    assert (np.sort(i_hnsw.numpy(), 1) == np.sort(i_exact.numpy(), 1)).mean() > 0.99
    np.testing.assert_allclose(d_hnsw.numpy(), d_exact.numpy(), rtol=1e-4, atol=5e-3)   # not squared


def test_fit_clusters_digits_and_fills_the_result(digits, tmp_path):
    x, y = digits
    r = ticlust.fit(x, method="pssc", k=10, seed=0, **SMALL)
    scores = ticlust.evaluate(y, r.labels)
    assert scores["acc"] > 0.7 and scores["nmi"] > 0.65, scores
    pixels = ticlust.evaluate(y, ticlust.fit(x, method="pssc", k=10, seed=0, features="pixels", **SMALL).labels)
    assert scores["nmi"] > pixels["nmi"] + 0.1, (scores, pixels)          # scattering helps (Table 5)
    n, k = len(x), 10
    assert r.scores.shape == (n, k) and (r.labels == r.scores.argmin(1)).all()
    assert r.prototypes.shape == (k, 16, 16) and r.extras["medoids"].shape == (k, 16, 16)
    members = r.labels == 3
    np.testing.assert_allclose(r.prototypes[3], x[members].mean(0) / x.max(), atol=1e-5)
    assert r.labels[r.extras["medoid_index"][3]] == 3
    emb = r.extras["embedding"]
    assert emb.shape == (n, k) and np.allclose(np.linalg.norm(emb, axis=1), 1, atol=1e-4)
    assert r.params["nearest_representatives"].shape == (n, 5)
    assert r.extras["representatives"].shape[0] == 60
    assert r.extras["representative_items"].shape == (60,)
    assert r.timing["scattering_s"] > 0 and not r.timing["cache_hit"]
    # predict() on the training items gives back their labels and embedding
    back = ticlust.predict(r, x)
    assert (back.labels == r.labels).all()
    np.testing.assert_allclose(back.extras["embedding"], emb, atol=1e-5)
    # and the result survives save/load (no pickles)
    path = r.save(tmp_path / "pssc.npz")
    again = ticlust.load_result(path)
    assert (ticlust.predict(again, x[:20]).labels == r.labels[:20]).all()


def test_same_seed_same_result_and_the_cache_skips_scattering(digits, tmp_path):
    x = digits[0][:100]
    small = {**SMALL, "candidates": 100, "representatives": 30, "cache_dir": str(tmp_path / "cache")}
    first = ticlust.fit(x, method="pssc", k=10, seed=1, **small)
    files = list((tmp_path / "cache").glob("*.npy"))
    assert len(files) == 1 and np.load(files[0]).shape == (100, n_paths(2, 8) * 16)
    second = ticlust.fit(x, method="pssc", k=10, seed=1, **small)
    assert second.timing["cache_hit"] and "scattering_s" not in second.timing
    assert (first.labels == second.labels).all()
    np.testing.assert_array_equal(first.scores, second.scores)
    other = ticlust.fit(x, method="pssc", k=8, seed=1, poc=0, **small)     # another K and POC: still a hit
    assert other.timing["cache_hit"] and other.scores.shape == (100, 8)
    changed = x.copy()
    changed[0, 8, 8] = 0.5 * changed[0, 8, 8] + 0.25
    assert not ticlust.fit(changed, method="pssc", k=10, seed=1, **small).timing["cache_hit"]
    assert len(list((tmp_path / "cache").glob("*.npy"))) == 2
    ticlust.fit(x[:60], method="pssc", k=10, seed=1, **{**small, "cache_dir": ""})   # no cache: nothing written
    assert len(list((tmp_path / "cache").glob("*.npy"))) == 2


def test_ablation_pipelines_run(digits):
    x, y = digits
    x, y = x[:120], y[:120]
    for params in (dict(features="pixels"), dict(poc=0), dict(clustering="kmeans"),
                   dict(features="pixels", poc=0, clustering="kmeans")):
        r = ticlust.fit(x, method="pssc", k=10, seed=0, **{**SMALL, **params})
        assert r.scores.shape == (120, 10)
        assert ("embedding" in r.extras) == (params.get("clustering", "uspec") == "uspec")
        assert ticlust.evaluate(y, r.labels)["nmi"] > 0.4


def test_streaming_inputs_and_rgb(digits, tmp_path):
    x, _ = digits
    x8 = (x[:60] * 255).astype(np.uint8)
    path = tmp_path / "x.npy"
    np.save(path, x8)
    mm = np.load(path, mmap_mode="r")
    a = ticlust.fit(x8, method="pssc", k=5, seed=0, batch_size=16, **{**SMALL, "candidates": 60, "representatives": 20})
    b = ticlust.fit(mm, method="pssc", k=5, seed=0, batch_size=16, **{**SMALL, "candidates": 60, "representatives": 20})
    assert (a.labels == b.labels).all()
    rgb = np.stack([x[:60], x[:60] ** 2, 1 - x[:60]], axis=-1)
    c = ticlust.fit(rgb, method="pssc", k=5, seed=0, **{**SMALL, "candidates": 60, "representatives": 20})
    assert c.prototypes.shape == (5, 16, 16, 3) and c.extras["medoids"].shape == (5, 16, 16, 3)
    assert c.state.mean.shape == (3 * n_paths(2, 8) * 16,)


def test_bad_parameters_and_inputs_fail_clearly(digits):
    x, _ = digits
    with pytest.raises(InputError, match="poc"):
        ticlust.fit(x, method="pssc", k=10, poc=5, pca_dim=5)
    with pytest.raises(InputError, match="pad_to"):
        ticlust.fit(np.random.default_rng(0).random((20, 8, 8)), method="pssc", k=3, pad_to=8, scales=3)
    with pytest.raises(InputError, match="representatives"):
        ticlust.fit(x, method="pssc", k=10, representatives=5)
    r = ticlust.fit(x[:80], method="pssc", k=4, features="pixels", **{**SMALL, "candidates": 80, "representatives": 20})
    with pytest.raises(InputError, match="same shape"):
        ticlust.predict(r, np.random.rand(5, 12, 12))


def test_dual_pca_spans_the_same_components_as_the_covariance():
    """With more features than items, PCA through the N×N Gram matrix gives the covariance's leading
    eigenvalues and (up to sign) eigenvectors, so large crops need no F×F matrix."""
    rng = np.random.default_rng(2)
    x = (rng.normal(size=(40, 300)) * np.linspace(3, 0.1, 300)).astype(np.float32)
    dev = torch.device("cpu")
    mean, cov = drain(pca.covariance_steps(x, dev))
    vals_c, vecs_c = pca.top_eigenvectors(cov, 5, "eigh", rng)
    mean_g, gram = drain(pca.gram_steps(x, dev, chunk=16))
    vals_g, vecs_g = pca.top_eigenvectors(gram, 5, "eigh", rng)
    basis = drain(pca.dual_basis(x, mean_g, vecs_g, vals_g, dev, chunk=16))
    torch.testing.assert_close(mean_g, mean)
    torch.testing.assert_close(vals_g, vals_c, rtol=1e-5, atol=1e-8)
    cos = (basis * vecs_c).sum(0).abs() / (basis.norm(dim=0) * vecs_c.norm(dim=0))
    assert bool((cos > 1 - 1e-5).all()) and torch.allclose(basis.norm(dim=0), torch.ones(5, dtype=basis.dtype), atol=1e-5)
