"""Tests of the NT clustering method (paper 004): every closed form against a numerical optimiser."""
import numpy as np
import pytest
import torch
from scipy.optimize import minimize

import ticlust
from ticlust.evaluation import knn_evaluate
from ticlust.errors import InputError
from ticlust.methods import nt


def _rand(rng, *shape):
    return torch.from_numpy(rng.standard_normal(shape))


def _numeric_min(fun, x0s, bounds):
    best = None
    for x0 in x0s:
        r = minimize(fun, x0, method="L-BFGS-B", bounds=bounds, options={"maxiter": 5000, "ftol": 1e-15, "gtol": 1e-12})
        if best is None or r.fun < best.fun:
            best = r
    return best


def test_quartic_roots_match_numpy_roots():
    rng = np.random.default_rng(0)
    coeffs = rng.standard_normal((200, 5))
    coeffs[:, 0] += np.sign(coeffs[:, 0]) * 0.5
    ours = nt.quartic_roots(torch.from_numpy(coeffs)).numpy()
    for c, z in zip(coeffs, ours):
        ref = np.roots(c)
        # every numpy root has a match among ours (up to order)
        d = np.abs(ref[:, None] - z[None, :])
        assert d.min(1).max() < 1e-7 * (1 + np.abs(ref).max())
        assert np.abs(np.polyval(c, z)).max() < 1e-8 * (1 + np.abs(c).sum() * (1 + np.abs(z).max()) ** 4)


def test_quartic_roots_from_known_roots_across_scales():
    """Polynomials built from known real/complex roots over 1e-3..1e3, including a double root and the
    structured quartic of the candidate step (no h^2 term): the vectorised solver finds them all."""
    rng = np.random.default_rng(1)
    cases = []
    for _ in range(300):
        scale = 10.0 ** rng.uniform(-3, 3)
        kind = rng.integers(3)
        if kind == 0:
            r = rng.standard_normal(4) * scale
        elif kind == 1:
            re, im = rng.standard_normal(2) * scale
            r = np.array([complex(re, im), complex(re, -im), *(rng.standard_normal(2) * scale)])
        else:
            d = rng.standard_normal() * scale
            r = np.array([d, d, *(rng.standard_normal(2) * scale)])
        cases.append((r, np.real(np.poly(r))))
    coeffs = np.stack([c for _, c in cases]) * rng.uniform(0.5, 2, (len(cases), 1))
    ours = nt.quartic_roots(torch.from_numpy(coeffs)).numpy()
    for (r, c), z in zip(cases, ours):
        d = np.abs(np.asarray(r)[:, None] - z[None, :]).min(1) / np.abs(r).max()
        # simple roots to near machine precision; a double root is ill-conditioned (found to < 1%)
        assert d.max() < (1e-2 if len(set(np.asarray(r).tolist())) < 4 else 1e-9), (r, z)
    # the candidate step's quartic h^4 - Pv h^3 + c1 h + c0 with c0 >= 0
    pv, c1, c0 = rng.uniform(0.1, 50, 500), rng.standard_normal(500) * 10, rng.uniform(0, 5, 500)
    coeffs = np.stack([np.ones(500), -pv, np.zeros(500), c1, c0], 1)
    ours = nt.quartic_roots(torch.from_numpy(coeffs)).numpy()
    for c, z in zip(coeffs, ours):
        ref = np.roots(c)
        assert np.abs(ref[:, None] - z[None, :]).min(1).max() < 1e-7 * (1 + np.abs(ref).max())


@pytest.mark.parametrize("seed", range(3))
def test_candidate_closed_form_matches_numerical_minimum(seed):
    """Eq. 20 in the sign-consistent orthant: closed form (quartic in h) vs L-BFGS-B with several starts."""
    rng = np.random.default_rng(seed)
    m = 12
    q = _rand(rng, m) * 2
    tau, nu = _rand(rng, m), _rand(rng, m)
    lam0, lam1 = [0.03, 0.3, 1.0][seed], 0.1
    score, a = nt.candidates(q[None], tau[None], nu[None], lam0, lam1)
    a = a[0, 0, 0]
    s = torch.sign(q)

    def full(y):  # the objective of Eq. 20 itself, in y
        y = torch.from_numpy(y)
        return float(0.5 * ((q - y) ** 2).sum() + lam1 * y.abs().sum()
                     + lam0 * (nt.rho(y, tau) / (nt.rho(y, nu) + nt._EPS) + nt.varsigma(y, tau)))

    ours = full((s * a).numpy())
    starts = [np.abs(q.numpy()) * f for f in (1.0, 0.5, 0.1)] + [rng.uniform(0, 2, m) for _ in range(5)]
    res = _numeric_min(lambda b: full(s.numpy() * b), starts, [(0, None)] * m)
    assert ours <= res.fun + 1e-6 * (1 + abs(res.fun))
    # the score of Eq. 24 is evaluated on the same candidate
    y = s * a
    assert float(score[0, 0, 0]) == pytest.approx(float(nt.rho(y, tau) / (nt.rho(y, nu) + nt._EPS) + nt.varsigma(y, tau)), rel=1e-6)


def test_candidate_without_ratio_is_soft_threshold():
    q = torch.tensor([[2.0, -1.0, 0.05, -3.0]])
    tau = torch.tensor([[0.5, 1.0, 0.0, -1.0]])
    nu = torch.zeros(1, 4)
    _, a = nt.candidates(q, tau, nu, 0.0, 0.1)
    assert torch.allclose(a[0, 0, 0], torch.tensor([1.9, 0.9, 0.0, 2.9]))


@pytest.mark.parametrize("lam0", [0.03, 0.8])
def test_fast_candidates_match_exact_solver(lam0):
    """The matrix-product fast path (support {|q| > lam1}, re-solve when it may move) equals the exact solver."""
    rng = np.random.default_rng(11)
    b, m = 6, 10
    q, tau, nu = _rand(rng, b, m), _rand(rng, 3, m), _rand(rng, 2, m)
    score, a = nt.candidates(q, tau, nu, lam0, 0.3)
    pos = (q > 0)[:, None, :]
    p = (q.abs() - 0.3)[:, None, None, :]
    kk = (1 + 2 * lam0 * tau * tau)[None, :, None, :]
    g = nt.matched(pos, tau[None])[:, :, None, :]
    v = nt.matched(pos, nu[None])[:, None, :, :]
    ref, h, r = nt.ratio_project(p, kk, lam0, g, v, support_iters=10)
    j_fast = nt.ratio_objective(a, p, kk, lam0, g, v)
    j_ref = nt.ratio_objective(ref, p, kk, lam0, g, v)
    assert torch.all(j_fast <= j_ref + 1e-9 * (1 + j_ref.abs()))
    direct = (g * a).sum(-1) / ((v * a).sum(-1) + nt._EPS) + (a * a * (tau * tau)[None, :, None, :]).sum(-1)
    assert torch.allclose(score, direct, rtol=1e-9, atol=1e-9)


def test_stationarity_of_the_quartic_solution():
    """On its support the solution satisfies a = (p - mu g/h + mu r v / h^2)/k with h = v.a, r = g.a (Eq. 21-23)."""
    rng = np.random.default_rng(3)
    m = 30
    p = torch.from_numpy(np.abs(rng.standard_normal(m)) + 0.5)
    kk = 1 + torch.from_numpy(rng.uniform(0, 1, m))
    g, v = torch.from_numpy(rng.uniform(0, 1, m)), torch.from_numpy(rng.uniform(0, 1, m))
    a, h, r = nt.ratio_project(p, kk, 0.7, g, v)
    on = a > 0
    pred = (p - 0.7 * g / h + 0.7 * r / h**2 * v) / kk
    assert torch.allclose(a[on], pred[on], atol=1e-9)
    assert torch.all(pred[~on] <= 1e-12)


@pytest.mark.parametrize("seed", range(2))
def test_tau_update_matches_numerical_minimum(seed):
    """Eq. 28 for one tau (pairs of f_c fixed at the current tau): closed form vs L-BFGS-B per orthant."""
    rng = np.random.default_rng(10 + seed)
    m, n = 8, 5
    cfg = nt.NTConfig(k=3, c_s=2, lam0=0.3, lam_e=0.5)
    q = _rand(rng, n, m) * 2
    y = _rand(rng, n, m)
    tau, nu = _rand(rng, 3, m), _rand(rng, 2, m)
    c1 = torch.zeros(n, dtype=torch.long)
    c2 = torch.tensor([0, 1, 0, 1, 1])
    new = nt.update_tau(q, y, c1, c2, tau, nu, cfg)
    tau_p, nu_p = nt.fc_pair(tau[0], tau[1:], nu)

    def obj(t):
        t = torch.from_numpy(t)
        fit = 0.5 * ((q - t - nu[c2]) ** 2).sum()
        disc = (nt.rho(y, t[None]) / (nt.rho(y, nu[c2]) + nt._EPS) + nt.varsigma(y, t[None])).sum()
        prior = nt.rho(t, tau_p) / (nt.rho(t, nu_p) + nt._EPS) + nt.varsigma(t, tau_p)
        return float(fit + cfg.lam0 * disc + cfg.lam_e * prior)

    mvec = (q - nu[c2]).mean(0)
    s = torch.sign(mvec).numpy()
    starts = [np.abs(mvec.numpy()) * f for f in (1.0, 0.5)] + [rng.uniform(0, 2, m) for _ in range(4)]
    res = _numeric_min(lambda b: obj(s * b), starts, [(0, None)] * m)
    assert obj(new[0].numpy()) <= res.fun + 1e-6 * (1 + abs(res.fun))
    assert torch.equal(new[1:], tau[1:])          # clusters without members keep their tau


def test_nu_update_decreases_its_objective_to_near_the_numerical_minimum():
    rng = np.random.default_rng(4)
    m, n = 8, 6
    cfg = nt.NTConfig(k=2, c_s=2, lam0=0.3, lam_e=0.05, nu_iters=20)
    q = _rand(rng, n, m) * 2
    tau, nu = _rand(rng, 2, m), _rand(rng, 2, m)
    c1 = torch.tensor([0, 1, 0, 1, 0, 1])
    c2 = torch.zeros(n, dtype=torch.long)
    y = torch.sign(q) * (q.abs() - 0.1).clamp_min(0)
    new = nt.update_nu(q, y, c1, c2, tau, nu, cfg)
    before = nt.nu_objective(nu[0], q, y, c1, tau, nu[1:], cfg)
    after = nt.nu_objective(new[0], q, y, c1, tau, nu[1:], cfg)
    assert after < before
    mvec = (q - tau[c1]).mean(0)
    s = torch.sign(mvec).numpy()
    res = _numeric_min(lambda b: nt.nu_objective(torch.from_numpy(s * b), q, y, c1, tau, nu[1:], cfg),
                       [np.abs(mvec.numpy()), rng.uniform(0, 2, m)], [(0, None)] * m)
    assert after <= res.fun + 0.02 * abs(res.fun)


def _a_numeric(x, z, lam2, lam3, lam4, a0):
    m, n = a0.shape

    def fun(v):
        a = torch.from_numpy(v.reshape(m, n)).requires_grad_(True)
        f = nt.a_objective(a, x, z, lam2, lam3, lam4)
        f.backward()
        return float(f.detach()), a.grad.numpy().ravel()

    return minimize(fun, a0.numpy().ravel(), jac=True, method="L-BFGS-B",
                    options={"maxiter": 3000, "ftol": 1e-15, "gtol": 1e-10})


def test_a_update_is_exact_without_frame_term():
    """lam3 = 0: the Ravishankar-Bresler closed form is the exact minimiser (vs autograd + L-BFGS)."""
    rng = np.random.default_rng(5)
    x, z = _rand(rng, 4, 30), _rand(rng, 6, 30)
    a = nt.update_a(x, z, 2.0, 0.0, 1.5)
    res = _a_numeric(x, z, 2.0, 0.0, 1.5, a + 0.1 * _rand(rng, 6, 4))
    ours = float(nt.a_objective(a, x, z, 2.0, 0.0, 1.5))
    assert ours <= res.fun + 1e-7 * abs(res.fun)
    assert ours == pytest.approx(res.fun, rel=1e-7)


def test_a_update_is_exact_for_orthogonal_data_with_frame_term():
    """lam3 > 0 and X X^T = c I (so Q^T F^-1 Q is diagonal): the quartic in b gives the exact minimum."""
    rng = np.random.default_rng(6)
    u, _ = np.linalg.qr(rng.standard_normal((30, 4)))
    x = torch.from_numpy(u.T * 3.0)                   # (4, 30), X X^T = 9 I
    z = _rand(rng, 6, 30)
    a = nt.update_a(x, z, 1.0, 2.0, 0.5)
    ours = float(nt.a_objective(a, x, z, 1.0, 2.0, 0.5))
    best = min(_a_numeric(x, z, 1.0, 2.0, 0.5, a0).fun for a0 in (a + 0.2 * _rand(rng, 6, 4), _rand(rng, 6, 4)))
    assert ours <= best + 1e-6 * abs(best)


def test_a_update_is_close_to_numerical_minimum_in_general():
    """General data: the approximate closed form lands within a small margin of the numerical optimum."""
    rng = np.random.default_rng(7)
    x = _rand(rng, 5, 40) * torch.tensor([3.0, 2.0, 1.0, 1.0, 0.5])[:, None]
    z = _rand(rng, 8, 40)
    a = nt.update_a(x, z, 16.0, 16.0, 16.0)
    ours = float(nt.a_objective(a, x, z, 16.0, 16.0, 16.0))
    res = _a_numeric(x, z, 16.0, 16.0, 16.0, a)
    start = float(nt.a_objective(_rand(rng, 8, 5), x, z, 16.0, 16.0, 16.0))
    assert res.fun <= ours
    assert ours - res.fun <= 0.05 * (start - res.fun)


def test_fit_result_shapes_and_predict(noisy_prototypes):
    x, _ = noisy_prototypes()
    res = ticlust.fit(x, method="nt", k=3, seed=0, max_iter=2, m=64, progress=False)
    n = len(x)
    assert res.labels.shape == (n,) and res.scores.shape == (n, 3)
    assert np.array_equal(res.labels, res.scores.argmin(1))
    assert res.prototypes.shape == (3, 8, 8)
    assert res.params["representation"].shape == (n, int(res.extras["m"]))
    assert np.isfinite(res.extras["condition_number"]) and 0 <= res.extras["mutual_coherence"] <= 1
    assert len(res.history) == 3
    pred = ticlust.predict(res, x)
    assert np.array_equal(pred.labels, res.labels)
    assert np.allclose(pred.params["representation"], res.params["representation"], atol=1e-4)


def test_identity_transform_and_rejection(noisy_prototypes):
    x, _ = noisy_prototypes(1)
    res = ticlust.fit(x, method="nt", k=3, seed=0, max_iter=2, transform="identity", reject_quantile=0.1,
                      progress=False)
    assert int(res.extras["m"]) == 64
    assert res.rejected is not None and 0 < res.rejected.sum() <= 0.1 * len(x) + 1
    best = res.scores[np.arange(len(x)), res.labels]
    assert best[res.rejected].min() > best[~res.rejected].max()


def test_same_seed_same_result_and_input_untouched(noisy_prototypes):
    x, _ = noisy_prototypes(2)
    copy = x.copy()
    r1 = ticlust.fit(x, method="nt", k=3, seed=3, max_iter=2, m=64, progress=False)
    r2 = ticlust.fit(x, method="nt", k=3, seed=3, max_iter=2, m=64, progress=False)
    assert np.array_equal(r1.labels, r2.labels)
    assert np.array_equal(r1.state.a, r2.state.a)
    assert np.array_equal(x, copy)


def test_input_validation(noisy_prototypes):
    x, _ = noisy_prototypes()
    with pytest.raises(InputError):
        ticlust.fit(x, method="nt", k=3, m=10, progress=False)          # m < N
    with pytest.raises(InputError):
        ticlust.fit(x, method="nt", k=3, lam0=-1.0, progress=False)
    with pytest.raises(InputError):
        ticlust.fit(x, method="nt", k=3, transform="random", progress=False)
    with pytest.raises(InputError):
        ticlust.fit(x[:, :2, :2], method="nt", k=3, progress=False)
    with pytest.raises(InputError):
        ticlust.fit(np.full((5, 8, 8), np.nan), method="nt", k=2, progress=False)
    res = ticlust.fit(x, method="nt", k=3, max_iter=1, transform="identity", progress=False)
    with pytest.raises(InputError):
        ticlust.predict(res, np.zeros((4, 6, 6), np.float32) + np.arange(36).reshape(6, 6))


def test_vectors_and_knn_mode(noisy_prototypes):
    """k-NN on NT representations of vectors: every test blob item is found, and the accuracy is a 1-NN
    search of the predicted test representations among the fitted ones, against whatever labels are given."""
    x, y = noisy_prototypes(3)
    vec = x.reshape(len(x), -1)
    train, y_train, test, y_test = vec[::2], y[::2], vec[1::2], y[1::2]
    out = knn_evaluate(train, y_train, test, y_test, k=3, max_iter=2, m=64)
    assert out["acc_nt"] == 1.0 and out["acc_raw"] == 1.0                  # three well-separated blobs
    rep_train = out["fit"].params["representation"]
    rep_test = ticlust.predict(out["fit"], test).params["representation"]
    nearest = ((rep_test[:, None, :] - rep_train[None]) ** 2).sum(-1).argmin(1)
    wrong = np.random.default_rng(0).permutation(y_train)                  # labels that ignore the blobs
    shuffled = knn_evaluate(train, wrong, test, y_test, k=3, max_iter=2, m=64)   # same seed: same fit
    assert shuffled["acc_nt"] == float((wrong[nearest] == y_test).mean())
    assert shuffled["acc_nt"] < 0.5
    with pytest.raises(InputError):
        knn_evaluate(vec[::2], y[:3], vec[1::2], y[1::2], k=3)


def test_default_m_rule():
    assert nt.default_m(500) == 2100
    assert nt.default_m(256) == 1076
    assert nt.default_m(1024) == 2100
    assert nt.default_m(4096) == 4096


@pytest.mark.parametrize("seed", range(3))
def test_objective_assignment_recovers_separated_groups_published_rule_collapses(noisy_prototypes, seed):
    """Issue 16: minimising the item's term of Eq. 17 (default) finds three well-separated groups exactly;
    the min-max score alone (Eq. 26, no re-seeding, A = I) still collapses them onto fewer clusters."""
    from ticlust.metrics import evaluate
    x, y = noisy_prototypes(seed)
    res = ticlust.fit(x, method="nt", k=3, seed=seed, max_iter=10, m=64, progress=False)
    assert evaluate(y, res.labels)["nmi"] == pytest.approx(1.0)
    pub = ticlust.fit(x, method="nt", k=3, seed=seed, max_iter=10, transform="identity", assignment="published",
                      reseed_empty=False, progress=False)
    assert len(np.unique(pub.labels)) < 3


def test_reseed_empty_gives_every_cluster_the_worst_fitting_items():
    c1 = torch.tensor([0, 0, 0, 1, 1, 0])
    best = torch.tensor([1.0, 9.0, 2.0, 8.0, 0.5, 7.0])
    out = nt.reseed_empty(c1, best, 4)
    assert torch.equal(torch.bincount(out, minlength=4), torch.tensor([3, 1, 1, 1]))
    assert out[1] == 2 and out[3] == 3 and torch.equal(out[[0, 2, 4]], c1[[0, 2, 4]])   # 9.0 then 8.0 moved
    assert torch.equal(nt.reseed_empty(out, best, 4), out)                                 # nothing empty: unchanged
    single = nt.reseed_empty(torch.tensor([0, 1]), torch.tensor([5.0, 1.0]), 3)           # never empties a cluster
    assert torch.equal(single, torch.tensor([0, 1]))


def test_assignment_reports_progress_every_batch(noisy_prototypes):
    """Cancel and the ETA see every batch of the assignment, not only whole iterations."""
    from ticlust.events import Progress
    from ticlust.methods.base import MAP_STAGE
    x, _ = noisy_prototypes(0)                                     # 60 items, batch_size 16: 4 batches
    events = [e for e in ticlust.run(x, method="nt", k=3, max_iter=2, m=64, batch_size=16, device="cpu")
              if isinstance(e, Progress) and e.stage != MAP_STAGE]
    assert len(events) >= 2 * 4 + 4
    steps = [e.step for e in events if e.stage == "iterations"]
    assert steps == sorted(steps) and steps[-1] == events[-5].total
    assert all(e.total == 2 * 4 for e in events if e.stage == "iterations")


def test_item_objective_is_the_eq17_term_of_each_candidate():
    rng = np.random.default_rng(4)
    q, tau, nu = _rand(rng, 5, 9), _rand(rng, 3, 9), _rand(rng, 2, 9)
    lam0, lam1 = 0.3, 0.1
    _, mags = nt.candidates(q, tau, nu, lam0, lam1, full=False)
    obj = nt.item_objective(q, mags, tau, nu)
    for i in range(5):
        for c1 in range(3):
            for c2 in range(2):
                y = torch.sign(q[i]) * mags(torch.tensor([i]), torch.tensor([c1]), torch.tensor([c2]))[0]
                direct = (0.5 * ((q[i] - y) ** 2).sum() + lam1 * y.abs().sum()
                          + lam0 * (nt.rho(y, tau[c1]) / (nt.rho(y, nu[c2]) + nt._EPS) + nt.varsigma(y, tau[c1]))
                          + 0.5 * ((q[i] - tau[c1] - nu[c2]) ** 2).sum())
                assert float(obj[i, c1, c2]) == pytest.approx(float(direct), rel=1e-6)   # J omits the 1e-6 in rho(y, nu)


def test_exact_re_solve_of_the_best_few_matches_re_solving_all():
    """resolve_top: re-solving only each item's best few candidates (ranked by the fast path) picks what
    re-solving all picks (here, where most candidates leave the fast path's support), and never a worse
    criterion than the feasible thresholded forms without any re-solve."""
    rng = np.random.default_rng(5)
    q, tau, nu = _rand(rng, 40, 30) * 0.5, _rand(rng, 6, 30) * 2, _rand(rng, 2, 30) * 2
    cfgs = {top: nt.NTConfig(k=6, lam0=0.5, resolve_top=top) for top in (0, 4)}
    mats = nt.pair_mats(tau, nu, 0.5)
    score, mags = nt.candidates(q, tau, nu, 0.5, 0.03, full=False, mats=mats, resolve=False)
    assert mags.moved.float().mean() > 0.5
    nt.estimate_moved(mags, score, tau, 0.5)          # every moved candidate at its feasible thresholded form
    out = {top: nt.assign_batch(q, tau, nu, cfg, mats) for top, cfg in cfgs.items()}
    none = nt.item_objective(q, mags, tau, nu).reshape(40, -1).min(1).values
    assert torch.equal(out[4][0], out[0][0]) and torch.equal(out[4][1], out[0][1])
    best4 = out[4][3].min(1).values
    assert torch.allclose(best4, out[0][3].min(1).values) and torch.all(best4 <= none + 1e-9)


def test_large_images_are_averaged_down_to_work_values():
    """The factor: the smallest whole one that leaves at most work_values values per item; vectors and small images
    stay as they are."""
    from ticlust.core.stack import Stack

    def factor(shape, **cfg):
        return nt.reduction(nt.NTConfig(**cfg), Stack(np.zeros(shape, np.float32), 0.0, 1.0))

    assert factor((2, 28, 28)) == factor((2, 32, 32)) == factor((2, 5000)) == 1     # MNIST, COIL, vectors: as they are
    assert factor((2, 64, 64, 2)) == 3 and factor((2, 128, 128, 2)) == 6             # 22×22×2 = 968 values
    assert factor((2, 64, 64, 2), work_values=512) == 4 and factor((2, 64, 64, 2), work_values=0) == 1


def test_an_nt_fit_on_enlarged_images_is_the_fit_on_the_images_themselves(one_thread):
    """Glyphs enlarged 2× (each pixel repeated) and averaged back by work_values: the same labels and scores as the fit
    (and the prediction) of the glyphs at their own size; prototypes at the size given."""
    from ticlust.datasets.samples import glyphs_sample

    small, _ = glyphs_sample(n_per_class=8, size=16, seed=2)
    big = small.repeat(2, 1).repeat(2, 2)
    a = ticlust.fit(small, "nt", k=3, seed=0, progress=False, max_iter=2, m=256)
    b = ticlust.fit(big, "nt", k=3, seed=0, progress=False, max_iter=2, m=256, work_values=256)
    assert b.prototypes.shape == (3, 32, 32) and np.array_equal(a.labels, b.labels)
    np.testing.assert_allclose(a.scores, b.scores, rtol=1e-5, atol=1e-5)
    assert np.array_equal(ticlust.predict(a, small[::2]).labels, ticlust.predict(b, big[::2]).labels)
    with pytest.raises(InputError, match="fitted on 32×32"):
        ticlust.predict(b, small)
