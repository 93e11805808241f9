"""Gaussian mixture with diagonal covariances, fitted by EM from a K-means start, in torch."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from ..core.stack import Stack
from ..core.validation import check_same_size
from ..core.device import with_oom_retry
from ..result import ClusteringResult, FittedState
from ..events import Progress, Snapshot
from ..kernels import Rows, as_rows, keep_pinned, kmeans_plus_plus_steps, lloyd
from .base import Method, param, register, seed_everything


@dataclass
class GMMConfig:
    k: int = 10
    max_iter: int = param(100, "Most EM iterations", low=1, essential=True)
    tol: float = param(1e-3, "Stop when the mean log-likelihood per item improves by less than this", low=0.0)
    variance_floor: float = param(1e-2, "Smallest allowed variance per pixel (keeps always-blank pixels from dominating)", low=1e-12, essential=True)
    kmeans_iter: int = param(100, "Most K-means iterations for the starting point", low=1)
    batch_size: int = param(8192, "Items per batch when computing likelihoods", low=1, gui=False)


def component_log_likelihoods(x, means: torch.Tensor, variances: torch.Tensor, log_weights: torch.Tensor,
                              batch_size: int = 8192) -> torch.Tensor:
    """log π_k + log N(x | μ_k, diag σ²_k) for every item and component, (N, K); ``x`` rows or a tensor."""
    x = as_rows(x, batch_size)
    precision = 1.0 / variances
    const = -0.5 * (x.dim * math.log(2 * math.pi) + torch.log(variances).sum(1)
                    + (means * means * precision).sum(1)) + log_weights
    return torch.cat([const[None] - 0.5 * ((xb * xb) @ precision.T - 2.0 * xb @ (means * precision).T)
                      for _, xb in x.chunks()])


@dataclass(frozen=True)
class EMStep:
    """One chunk's E-step under the current parameters: its log-likelihoods and what the next M-step reduces."""

    nk: torch.Tensor         # (K,): the chunk's responsibilities summed
    sums: torch.Tensor       # (K, D): responsibilities.T @ rows
    squares: torch.Tensor    # (K, D): responsibilities.T @ rows²
    nll: float               # the chunk's negative log-likelihood, summed
    loglik: torch.Tensor     # (n, K): log π_k + log N(x | μ_k, σ²_k)


def weighted_moments(x: torch.Tensor, resp: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A chunk's responsibility sums (K,), weighted sums (K, D) and weighted sums of squares (K, D)."""
    resp = resp.to(x.dtype)
    return resp.sum(0), resp.T @ x, resp.T @ (x * x)


def em_e_step(x: torch.Tensor, log_weights: torch.Tensor, means: torch.Tensor, variances: torch.Tensor,
              pinned: torch.Tensor | None = None, start: int = 0) -> EMStep:
    """The E-step of one chunk of rows (n, D): a pure function, run here or as a cluster task
    (``kernels.Rows.map_chunks``). ``pinned`` (n,): components the user fixed items to (-1: free);
    their responsibilities are one-hot."""
    loglik = component_log_likelihoods(x, means, variances, log_weights)
    norm = torch.logsumexp(loglik, 1)
    resp = torch.exp(loglik - norm[:, None])
    if pinned is not None:
        fixed = pinned >= 0
        resp[fixed] = torch.nn.functional.one_hot(pinned[fixed], resp.shape[1]).to(resp.dtype)
    return EMStep(*weighted_moments(x, resp), float(-norm.sum()), loglik)


def m_step(nk: torch.Tensor, sums: torch.Tensor, squares: torch.Tensor, n: int, variance_floor: float):
    """Weights, means and diagonal variances from the summed E-step statistics of n items."""
    nk = nk + 10 * torch.finfo(nk.dtype).eps
    means = sums / nk[:, None]
    variances = (squares / nk[:, None] - means * means).clamp_min(variance_floor)
    return torch.log(nk / n), means, variances


def _reduced(parts):
    """(nk, sums, squares) added up chunk by chunk, in chunk order."""
    total = list(parts[0])
    for part in parts[1:]:
        total = [a + b for a, b in zip(total, part)]
    return total


def em(x, resp: torch.Tensor, max_iter: int, tol: float, variance_floor: float, pinned: torch.Tensor | None = None):
    """EM from initial responsibilities; yields (iteration, mean NLL, log_weights, means, variances, log-lik).

    ``x``: (N, D) rows as a tensor or :class:`Rows` (streamed: one pass over the items per iteration). Each
    iteration is the M-step from the statistics in hand, then :func:`em_e_step` on every chunk
    (``Rows.map_chunks``: here, or one task per chunk on a cluster), whose statistics, summed in chunk
    order, feed the next M-step. ``pinned`` (N,): components the user fixed items to (-1: free); their
    responsibilities stay one-hot.
    """
    x = as_rows(x)
    stats = _reduced([weighted_moments(xb, resp[s:s + len(xb)]) for s, xb in x.chunks()])
    previous = math.inf
    for it in range(1, max_iter + 1):
        log_weights, means, variances = m_step(*stats, x.n, variance_floor)
        steps = x.map_chunks(em_e_step, (log_weights, means, variances), pinned)
        stats = _reduced([(step.nk, step.sums, step.squares) for step in steps])
        nll = sum(step.nll for step in steps) / x.n
        loglik = torch.cat([step.loglik for step in steps])
        yield it, nll, log_weights, means, variances, loglik
        if previous - nll < tol:
            break
        previous = nll


@dataclass
class GMMState(FittedState):
    means: np.ndarray        # (K, D)
    variances: np.ndarray    # (K, D), floored
    log_weights: np.ndarray  # (K,)


class GMM(Method):
    name, title, paper = "gmm", "Gaussian mixture (diagonal, pixels)", "baseline"
    config, state, inputs = GMMConfig, GMMState, ("images", "vectors")
    embeds = "pixels"   # the object map: the PCA of the items themselves
    #: What of a fit runs on a cluster (``fit_store(..., workers=N)``, docs/cluster.md): Rows.map_chunks per chunk.
    cluster_steps = "the K-means start's Lloyd E-step and EM's E-step, one task per chunk of batch_size items"

    def train(self, stack: Stack, cfg: GMMConfig, device: torch.device, seed: int):
        rng = seed_everything(seed)
        x = Rows(stack, device, cfg.batch_size)
        centers = yield from kmeans_plus_plus_steps(x, cfg.k, rng)
        for it, inertia, centers, labels in lloyd(x, centers, cfg.kmeans_iter):
            yield Progress(it, cfg.kmeans_iter + cfg.max_iter, inertia / stack.n, "K-means start")
        resp = torch.nn.functional.one_hot(labels, cfg.k).to(centers.dtype)
        history = []
        for it, nll, log_weights, means, variances, loglik in em(x, resp, cfg.max_iter, cfg.tol, cfg.variance_floor):
            history.append(nll)
            yield Progress(cfg.kmeans_iter + it, cfg.kmeans_iter + cfg.max_iter, nll, "EM iterations")
            yield Snapshot(means.reshape(cfg.k, *stack.item_shape).cpu().numpy())
        shape = (cfg.k, *stack.item_shape)
        state = GMMState(means.cpu().numpy(), variances.cpu().numpy(), log_weights.cpu().numpy())
        return self.result(
            cfg, state, labels=loglik.argmax(1).cpu().numpy(), scores=(-loglik).cpu().numpy(),
            responsibilities=torch.softmax(loglik, 1).cpu().numpy(), prototypes=means.reshape(shape).cpu().numpy(),
            history=history, extras={"variances": variances.reshape(shape).cpu().numpy(),
                                     "weights": torch.exp(log_weights).cpu().numpy()})

    def refine(self, stack: Stack, cfg: GMMConfig, start: ClusteringResult, pinned: torch.Tensor, device: torch.device):
        """EM from the edited assignment (one-hot responsibilities), the pinned items kept in their component."""
        x = Rows(stack, device, cfg.batch_size)
        pinned = pinned.to(device)
        resp = torch.nn.functional.one_hot(torch.from_numpy(np.asarray(start.labels)).to(device), cfg.k).float()
        history = []
        for it, nll, log_weights, means, variances, loglik in em(x, resp, cfg.max_iter, cfg.tol, cfg.variance_floor, pinned):
            history.append(nll)
            yield Progress(it, cfg.max_iter, nll, "Refine: EM iterations")
        labels = keep_pinned(loglik.argmax(1), pinned)
        shape = (cfg.k, *stack.item_shape)
        state = GMMState(means.cpu().numpy(), variances.cpu().numpy(), log_weights.cpu().numpy())
        return self.result(cfg, state, labels=labels.cpu().numpy(), scores=(-loglik).cpu().numpy(),
                           responsibilities=torch.softmax(loglik, 1).cpu().numpy(),
                           prototypes=means.reshape(shape).cpu().numpy(), history=history)

    def predict(self, result: ClusteringResult, stack: Stack, device: torch.device, batch_size: int | None = None) -> ClusteringResult:
        """Most probable fitted component for each new item, streaming the items in batches."""
        state = result.state
        means, variances, log_weights = (torch.from_numpy(a).to(device) for a in (state.means, state.variances, state.log_weights))
        check_same_size(stack, means.shape[1])
        loglik = with_oom_retry(lambda bs: torch.cat([
            component_log_likelihoods(torch.from_numpy(b).to(device).reshape(len(b), -1), means, variances, log_weights)
            for _, b in stack.batches(bs)]), batch_size or self.config_of(result).batch_size)
        return self.predicted(result, labels=loglik.argmax(1).cpu().numpy(), scores=(-loglik).cpu().numpy(),
                              responsibilities=torch.softmax(loglik, 1).cpu().numpy())


register(GMM())
