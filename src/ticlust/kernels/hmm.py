"""A hidden Markov model over many state sequences at once, in NumPy and log space: forward-backward,
Viterbi, and a Baum-Welch-like fit of the transitions and of the emissions' temperature.

The sequences are the tracks of a time-lapse (``objects.states``), padded to one length: ``scores`` (B, T, K)
holds each object's K cluster scores (lower = closer, as every ticlust result's), a row of NaN where a
track has no object in that frame (a gap: the state runs on, unobserved). Sequences form a forest: a
daughter (``parent[b] >= 0``) starts ``gap[b]`` frames after its parent's last frame, and its first state's
prior is the parent's last state carried over those frames by the transitions (``A ** gap``); roots start
from the learned start distribution. Sequences are decoded generation by generation, roots first.

Emissions: an object's log-probability in state k is ``-(s_k - min_j s_j) / temperature`` (floored at
:data:`LOG_FLOOR`), the softmax of its negative scores. The temperature is calibrated per result by
held-out agreement: each object's softmax is scored against the state its track predicts for it from the
*other* objects (the forward-backward posterior with the object's own emission divided out), and the
temperature that makes the two agree best is kept. An object's own argmax never enters its own
calibration, so this neither collapses to zero (hard emissions, no smoothing) nor grows without bound.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize_scalar

#: No state is ever impossible for an object: its emission log-probability is at least this.
LOG_FLOOR = -300.0
#: The prior of every transition row: this many pseudo-transitions, the share ``stay`` of them on the diagonal.
PRIOR_WEIGHT = 10.0


@dataclass
class Chains:
    """A batch of sequences: ``scores`` (B, T, K) with NaN rows for unobserved frames, ``lengths`` (B,) frames
    of each (the rest is padding), ``parent`` (B,) the parent sequence or -1, ``gap`` (B,) frames from the
    parent's last frame to this sequence's first (1: the next frame)."""

    scores: np.ndarray
    lengths: np.ndarray
    parent: np.ndarray
    gap: np.ndarray

    def __post_init__(self):
        self.seen = ~np.isnan(self.scores).all(-1)                       # (B, T): an object in that frame
        safe = np.where(self.seen[..., None], self.scores, 0.0)
        with np.errstate(invalid="ignore"):
            self.gaps = np.nan_to_num(safe - safe.min(-1, keepdims=True), nan=np.inf)    # score minus the best one

    def generations(self) -> list[np.ndarray]:
        """The sequences by depth in their lineage: roots, their daughters, ... (a forest, checked upstream)."""
        depth = np.full(len(self.lengths), -1)
        for b in range(len(depth)):
            chain, p = [], b
            while p >= 0 and depth[p] < 0:
                chain.append(p)
                p = self.parent[p]
            d = depth[p] if p >= 0 else -1
            for q in reversed(chain):
                d += 1
                depth[q] = d
        return [np.flatnonzero(depth == d) for d in range(int(depth.max()) + 1)] if len(depth) else []


@dataclass
class HMM:
    """A fitted model: ``log_trans`` (K, K) (-inf: forbidden), ``log_start`` (K,) for roots, ``temperature``."""

    log_trans: np.ndarray
    log_start: np.ndarray
    temperature: float

    def log_emissions(self, chains: Chains) -> np.ndarray:
        """Per sequence, frame and state the emission log-probability (0 for unobserved frames: no evidence)."""
        return log_emissions(chains.gaps, chains.seen, self.temperature)


def log_emissions(gaps: np.ndarray, seen: np.ndarray, temperature: float) -> np.ndarray:
    """``-gaps / temperature`` (a score minus the object's best) floored at LOG_FLOOR; 0 where ``seen`` is False."""
    return np.where(seen[..., None], np.maximum(-gaps / float(temperature), LOG_FLOOR), 0.0)


def _lse(a: np.ndarray, axis: int) -> np.ndarray:
    """log-sum-exp along ``axis``; rows of -inf give -inf."""
    top = np.max(a, axis=axis, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(divide="ignore"):
        return np.log(np.sum(np.exp(a - top), axis=axis)) + np.squeeze(top, axis)


def _log(p: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return np.log(p)


def carried(log_trans: np.ndarray, steps: int) -> np.ndarray:
    """log of the transition matrix taken ``steps`` times (the states ``steps`` frames on)."""
    return _log(np.linalg.matrix_power(np.exp(log_trans), int(steps)))


def forward_backward(log_emit: np.ndarray, lengths: np.ndarray, log_trans: np.ndarray, log_start: np.ndarray):
    """Posterior probabilities (B, T, K) of each frame's state, the expected transition counts (K, K) summed over
    all sequences and frames, and each sequence's log-likelihood (B,). ``log_start`` (B, K). Scaled recursions
    (every step's forward vector sums to 1; the scales make the likelihood), in probability space."""
    b, t_max, k = log_emit.shape
    trans, emit = np.exp(log_trans), np.exp(log_emit - log_emit.max(-1, keepdims=True))
    alpha, scale = np.zeros((b, t_max, k)), np.ones((b, t_max))
    a = np.exp(log_start - log_start.max(-1, keepdims=True)) * emit[:, 0]
    for t in range(t_max):
        if t:
            a = (alpha[:, t - 1] @ trans) * emit[:, t]
        scale[:, t] = a.sum(-1)
        alpha[:, t] = a / scale[:, t, None]
    last = lengths - 1
    beta = np.ones((b, t_max, k))
    counts = np.zeros((k, k))
    for t in range(t_max - 1, 0, -1):
        live = t <= last
        w = emit[:, t] * beta[:, t] / scale[:, t, None]
        counts += alpha[live, t - 1].T @ w[live]
        beta[:, t - 1] = np.where((t - 1 < last)[:, None], w @ trans.T, 1.0)
    valid = np.arange(t_max)[None] <= last[:, None]
    loglik = np.where(valid, np.log(scale), 0.0).sum(1) + log_start.max(-1) + np.where(
        valid, log_emit.max(-1), 0.0).sum(1)
    return alpha * beta, counts * trans, loglik


def viterbi(log_emit: np.ndarray, lengths: np.ndarray, log_trans: np.ndarray, log_start: np.ndarray) -> np.ndarray:
    """The most probable state path of each sequence (B, T), -1 past its length; ties go to the lower state."""
    b, t_max, k = log_emit.shape
    delta = log_start + log_emit[:, 0]
    back = np.zeros((b, t_max, k), np.int64)
    for t in range(1, t_max):
        cand = delta[:, :, None] + log_trans[None]
        back[:, t] = np.argmax(cand, axis=1)
        moved = np.max(cand, axis=1) + log_emit[:, t]
        delta = np.where((t < lengths)[:, None], moved, delta)      # a finished sequence keeps its last scores
    path = np.full((b, t_max), -1, np.int64)
    final = np.argmax(delta, axis=1)
    rows = np.arange(b)
    for t in range(t_max - 1, -1, -1):
        state = final if t == t_max - 1 else np.where(t == lengths - 1, final,
                                                      back[rows, t + 1, np.maximum(path[:, t + 1], 0)])
        path[:, t] = np.where(t < lengths, state, -1)
    return path


def _daughter_starts(chains: Chains, idx: np.ndarray, last_state: np.ndarray, log_trans: np.ndarray,
                     log_start: np.ndarray) -> np.ndarray:
    """Start log-priors (len(idx), K): a root's ``log_start``; a daughter's, her mother's last-state distribution
    ``last_state`` (B, K, probabilities) carried ``gap`` frames on by the transitions."""
    out = np.tile(log_start, (len(idx), 1))
    parent, gap = chains.parent[idx], chains.gap[idx]
    for steps in np.unique(gap[parent >= 0]):
        rows = np.flatnonzero((parent >= 0) & (gap == steps))
        out[rows] = _log(last_state[parent[rows]] @ np.exp(carried(log_trans, steps)))
    return out


def posteriors(chains: Chains, model: HMM):
    """Forward-backward over the forest, generation by generation: (posteriors (B, T, K), expected transition counts
    (K, K) within sequences and across divisions, expected first-state counts of roots (K,), log-likelihood)."""
    b, t_max, k = chains.scores.shape
    log_emit = model.log_emissions(chains)
    gamma = np.zeros((b, t_max, k))
    last_state = np.zeros((b, k))
    counts, start, loglik = np.zeros((k, k)), np.zeros(k), 0.0
    trans = np.exp(model.log_trans)
    for idx in chains.generations():
        starts = _daughter_starts(chains, idx, last_state, model.log_trans, model.log_start)
        span = int(chains.lengths[idx].max())                     # a generation of short daughters: no long padding
        g, c, ll = forward_backward(log_emit[idx, :span], chains.lengths[idx], model.log_trans, starts)
        gamma[idx, :span], loglik = g, loglik + float(ll.sum())
        counts += c
        last_state[idx] = g[np.arange(len(idx)), chains.lengths[idx] - 1]
        roots = chains.parent[idx] < 0
        start += g[roots, 0].sum(0)
        born = np.flatnonzero(~roots & (chains.gap[idx] == 1))      # the division step: mother's last → first
        if len(born):
            mother = last_state[chains.parent[idx[born]]]                      # (n, K)
            reach = mother @ trans                                              # (n, K)
            counts += mother.T @ (g[born, 0] / np.maximum(reach, 1e-300)) * trans
    return gamma, counts, start, loglik


def decode(chains: Chains, model: HMM) -> tuple[np.ndarray, np.ndarray]:
    """The Viterbi path of every sequence (B, T; -1 past its end), daughters started from their mother's decoded last
    state, and the posterior probability of each decoded state (B, T; NaN past the end)."""
    b, t_max, k = chains.scores.shape
    log_emit = model.log_emissions(chains)
    path = np.full((b, t_max), -1, np.int64)
    last_state = np.zeros((b, k))
    for idx in chains.generations():
        starts = _daughter_starts(chains, idx, last_state, model.log_trans, model.log_start)
        span = int(chains.lengths[idx].max())
        path[idx, :span] = viterbi(log_emit[idx, :span], chains.lengths[idx], model.log_trans, starts)
        last_state[idx] = np.eye(k)[path[idx, chains.lengths[idx] - 1]]
    gamma = posteriors(chains, model)[0]
    prob = np.where(path >= 0, np.take_along_axis(gamma, np.maximum(path, 0)[..., None], 2)[..., 0], np.nan)
    return path, prob


def transition_prior(allowed: np.ndarray, stay: float) -> np.ndarray:
    """Pseudo-counts (K, K) of every row: PRIOR_WEIGHT transitions, the share ``stay`` on the diagonal and the rest
    spread evenly over the row's other allowed states (all of it on the diagonal when there are none)."""
    k = len(allowed)
    off = allowed & ~np.eye(k, dtype=bool)
    n_off = off.sum(1, keepdims=True)
    prior = np.where(off, PRIOR_WEIGHT * (1 - stay) / np.maximum(n_off, 1), 0.0)
    prior[np.diag_indices(k)] = np.where(n_off[:, 0] > 0, PRIOR_WEIGHT * stay, PRIOR_WEIGHT)
    return prior


def _normalised(counts: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    counts = np.where(allowed, counts, 0.0)
    return _log(counts / counts.sum(-1, keepdims=True))


def best_states(chains: Chains) -> np.ndarray:
    """Each object's best state (lowest score) per sequence and frame (B, T); -1 where there is no object."""
    return np.where(chains.seen, np.argmin(chains.gaps, -1), -1)


def raw_counts(chains: Chains, raw: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Transition counts (K, K) between the raw states (``raw`` (B, T), -1 for none; default: each object's best
    state) of consecutive frames, across a division too, and the counts of the roots' first raw states (K,)."""
    b, t_max, k = chains.scores.shape
    raw = best_states(chains) if raw is None else raw
    pairs = (raw[:, :-1] >= 0) & (raw[:, 1:] >= 0)
    counts = np.zeros((k, k))
    np.add.at(counts, (raw[:, :-1][pairs], raw[:, 1:][pairs]), 1.0)
    start = np.zeros(k)
    for j in range(b):
        first = raw[j][raw[j] >= 0]
        if not len(first):
            continue
        p = chains.parent[j]
        if p < 0:
            start[first[0]] += 1
        elif chains.gap[j] == 1 and raw[p, chains.lengths[p] - 1] >= 0 and raw[j, 0] >= 0:
            counts[raw[p, chains.lengths[p] - 1], raw[j, 0]] += 1
    return counts, start


def first_temperature(scores: np.ndarray) -> float:
    """The median gap between an object's best and second-best score (an object at that gap is e:1 for its best
    state): where the calibration starts."""
    flat = scores.reshape(-1, scores.shape[-1])
    flat = flat[~np.isnan(flat).all(1)]
    if flat.shape[1] < 2 or not len(flat):
        return 1.0
    two = np.sort(flat, 1)[:, :2]
    gap = two[:, 1] - two[:, 0]
    gap = gap[np.isfinite(gap) & (gap > 0)]
    return float(np.median(gap)) if len(gap) else 1.0


def calibrate(gaps: np.ndarray, held_out: np.ndarray, around: float) -> float:
    """The temperature whose softmax of each object's negative score gaps (N, K: score minus the object's best)
    best agrees with ``held_out`` (N, K), the log-probability of each state given the object's track without the
    object: it maximises sum_i log sum_k exp(held_out_ik) softmax_ik, searched over 1e-3..1e3 times ``around``."""
    held = np.exp(held_out)

    def loss(log_t: float) -> float:
        e = np.exp(np.maximum(-gaps / np.exp(log_t), LOG_FLOOR))          # each row's best state gives 1
        return -float((np.log(np.maximum(np.einsum("nk,nk->n", held, e), 1e-300)) - np.log(e.sum(1))).sum())

    lo, hi = np.log(around) - np.log(1e3), np.log(around) + np.log(1e3)
    return float(np.exp(minimize_scalar(loss, bounds=(lo, hi), method="bounded", options={"xatol": 1e-3}).x))


def fit(chains: Chains, allowed: np.ndarray, stay: float = 0.9, iterations: int = 30, tol: float = 1e-3,
        raw: np.ndarray | None = None) -> HMM:
    """Transitions (only where ``allowed``, (K, K) bool), root start distribution and temperature, re-estimated
    in turn from the expected counts of :func:`posteriors` and :func:`calibrate`, starting from the counts of the
    raw states (``raw``, see :func:`raw_counts`); each step adds the rows' prior (:func:`transition_prior`) and
    one pseudo-count per start state."""
    prior = transition_prior(allowed, stay)
    counts, start = raw_counts(chains, raw)
    around = first_temperature(chains.scores)
    model = HMM(_normalised(counts + prior, allowed), _log((start + 1) / (start + 1).sum()), around)
    seen, gaps = chains.seen, chains.gaps[chains.seen]
    for _ in range(int(iterations)):
        gamma, counts, start, _ = posteriors(chains, model)
        held = (_log(gamma) - model.log_emissions(chains))[seen]
        held = held - _lse(held, 1)[:, None]
        new = HMM(_normalised(counts + prior, allowed), _log((start + 1) / (start + 1).sum()),
                  calibrate(gaps, held, around))
        moved = max(float(np.nanmax(np.abs(np.exp(new.log_trans) - np.exp(model.log_trans)))),
                    abs(np.log(new.temperature / model.temperature)))
        model = new
        if moved < tol:
            break
    return model
