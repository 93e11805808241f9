"""The time-lapse HMM (issue 54): forward-backward, Viterbi and the lineage scheme against brute force over every
state path of tiny cases; the transition prior, the calibration and the fit."""
import itertools

import numpy as np
import pytest

from ticlust.kernels import hmm


def brute(log_emit, log_trans, log_start):
    """Every path's log-probability of one sequence: (paths, log-probabilities)."""
    k = len(log_start)
    paths = list(itertools.product(range(k), repeat=len(log_emit)))
    with np.errstate(divide="ignore"):
        logp = [log_start[p[0]] + log_emit[0, p[0]] + sum(log_trans[p[t - 1], p[t]] + log_emit[t, p[t]]
                                                         for t in range(1, len(p))) for p in paths]
    return paths, np.array(logp)


def tiny(seed, k=3, lengths=(4, 2, 5, 1, 6)):
    rng = np.random.default_rng(seed)
    trans = rng.random((k, k))
    trans[0, k - 1] = 0                                    # a forbidden step
    trans /= trans.sum(1, keepdims=True)
    with np.errstate(divide="ignore"):
        log_trans = np.log(trans)
    log_start = np.log(rng.dirichlet(np.ones(k)))
    lengths = np.array(lengths)
    log_emit = rng.normal(0, 2, (len(lengths), lengths.max(), k))
    log_emit[0, 2] = 0                                     # a gap: no evidence in that frame
    return log_emit, lengths, log_trans, np.tile(log_start, (len(lengths), 1))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_forward_backward_and_viterbi_equal_brute_force(seed):
    log_emit, lengths, log_trans, log_start = tiny(seed)
    gamma, counts, loglik = hmm.forward_backward(log_emit, lengths, log_trans, log_start)
    path = hmm.viterbi(log_emit, lengths, log_trans, log_start)
    want_counts = np.zeros_like(counts)
    for b, n in enumerate(lengths):
        paths, logp = brute(log_emit[b, :n], log_trans, log_start[b])
        z = np.logaddexp.reduce(logp)
        assert loglik[b] == pytest.approx(z)
        post = np.zeros((n, 3))
        for p, lp in zip(paths, logp):
            post[np.arange(n), p] += np.exp(lp - z)
            for t in range(1, n):
                want_counts[p[t - 1], p[t]] += np.exp(lp - z)
        assert np.allclose(gamma[b, :n], post)
        assert tuple(path[b, :n]) == paths[int(np.argmax(logp))]
        assert (path[b, n:] == -1).all()
    assert np.allclose(counts, want_counts)


def test_a_daughter_starts_from_her_mothers_last_state():
    """Mother (3 frames) then daughter (2 frames, gap 2 frames): the daughter's start prior is the mother's last-state
    posterior carried twice by the transitions (posteriors), or her decoded last state (decode)."""
    rng = np.random.default_rng(3)
    k = 3
    trans = rng.dirichlet(np.ones(k), k)
    model = hmm.HMM(np.log(trans), np.log(np.full(k, 1 / k)), 1.0)
    scores = rng.exponential(1.0, (2, 3, k))
    scores[1, 2] = np.nan                                   # padding past the daughter's end
    chains = hmm.Chains(scores, np.array([3, 2]), np.array([-1, 0]), np.array([1, 2]))
    gamma, _, _, _ = hmm.posteriors(chains, model)
    emit = model.log_emissions(chains)
    paths, logp = brute(emit[0], model.log_trans, model.log_start)
    mother_last = np.zeros(k)
    for p, lp in zip(paths, logp):
        mother_last[p[-1]] += np.exp(lp - np.logaddexp.reduce(logp))
    start = np.log(mother_last @ trans @ trans)
    paths, logp = brute(emit[1, :2], model.log_trans, start)
    post = np.zeros((2, k))
    for p, lp in zip(paths, logp):
        post[np.arange(2), p] += np.exp(lp - np.logaddexp.reduce(logp))
    assert np.allclose(gamma[1, :2], post)
    path, prob = hmm.decode(chains, model)
    mpaths, mlogp = brute(emit[0], model.log_trans, model.log_start)
    assert tuple(path[0]) == mpaths[int(np.argmax(mlogp))]
    dstart = np.log(np.eye(k)[path[0, 2]] @ trans @ trans)
    dpaths, dlogp = brute(emit[1, :2], model.log_trans, dstart)
    assert tuple(path[1, :2]) == dpaths[int(np.argmax(dlogp))] and path[1, 2] == -1
    assert np.isnan(prob[1, 2]) and 0 < prob[0, 0] <= 1


def test_the_generations_of_a_forest():
    chains = hmm.Chains(np.zeros((5, 2, 2)), np.full(5, 2), np.array([-1, 0, 0, 1, -1]), np.ones(5, int))
    assert [g.tolist() for g in chains.generations()] == [[0, 4], [1, 2], [3]]


def test_the_transition_prior_stays_and_respects_the_allowed_steps():
    allowed = np.eye(3, dtype=bool)
    allowed[0, 1] = allowed[1, 2] = True
    prior = hmm.transition_prior(allowed, 0.9)
    assert np.allclose(prior.sum(1), hmm.PRIOR_WEIGHT)
    assert prior[0, 0] == pytest.approx(9) and prior[0, 1] == pytest.approx(1) and prior[0, 2] == 0
    assert prior[2, 2] == pytest.approx(hmm.PRIOR_WEIGHT)            # no way out: all staying


def test_calibration_recovers_the_temperature_of_known_posteriors():
    """Objects whose true state is drawn from softmax(-gaps / T0), seen by their track: T0 comes back."""
    rng = np.random.default_rng(0)
    for t0 in (0.5, 2.0):
        gaps = rng.exponential(2.0, (20000, 4))
        gaps -= gaps.min(1, keepdims=True)
        q = np.exp(-gaps / t0)
        q /= q.sum(1, keepdims=True)
        z = (q.cumsum(1) > rng.random((len(q), 1))).argmax(1)
        with np.errstate(divide="ignore"):
            held = np.log(np.eye(4)[z])
        assert hmm.calibrate(gaps, held, 1.0) == pytest.approx(t0, rel=0.1)


def test_the_fit_smooths_isolated_errors_within_the_order():
    """Tracks 0→1→2 with one wrong object in three: the fit keeps the order and the path skips the errors."""
    rng = np.random.default_rng(1)
    truth = np.repeat([0, 1, 2], 10)
    scores = np.full((40, 30, 3), 1.0)
    scores[:, np.arange(30), truth] = 0.0
    flip = rng.random((40, 30)) < 0.15
    wrong = (truth + rng.integers(1, 3, (40, 30))) % 3
    scores[flip] = 1.0
    scores[flip, wrong[flip]] = 0.0
    scores[flip, truth[np.nonzero(flip)[1]]] = 0.3
    allowed = np.eye(3, dtype=bool) | np.eye(3, k=1, dtype=bool)
    chains = hmm.Chains(scores, np.full(40, 30), np.full(40, -1), np.ones(40, int))
    model = hmm.fit(chains, allowed)
    assert np.isneginf(model.log_trans[~allowed]).all()
    path, _ = hmm.decode(chains, model)
    assert (path == truth).mean() > 0.97 > (scores.argmin(-1) == truth).mean()
