"""Gaussian mixture with diagonal covariances, fitted by EM from a K-means start, in torch."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from ..stack import Stack
from ..validation import check_same_size
from ..device import with_oom_retry
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


def m_step(x, resp: torch.Tensor, variance_floor: float):
    """Weights, means and diagonal variances from responsibilities (N, K); ``x`` rows or a tensor."""
    x = as_rows(x)
    nk = resp.sum(0) + 10 * torch.finfo(resp.dtype).eps
    means = x.weighted_sums(resp) / nk[:, None]
    second = x.weighted_sums(resp, squares=True) / nk[:, None]
    variances = (second - means * means).clamp_min(variance_floor)
    return torch.log(nk / x.n), means, variances


def em(x, resp: torch.Tensor, max_iter: int, tol: float, variance_floor: float, pinned: torch.Tensor | None = None):
    """EM from initial responsibilities; yields (iteration, mean NLL, log_weights, means, variances, log-lik).

    ``x``: (N, D) rows as a tensor or :class:`Rows` (streamed: each iteration is two passes over the items).
    ``pinned`` (N,): components the user fixed items to (-1: free); their responsibilities stay one-hot.
    """
    x = as_rows(x)
    previous = math.inf
    for it in range(1, max_iter + 1):
        log_weights, means, variances = m_step(x, resp, variance_floor)
        loglik = component_log_likelihoods(x, means, variances, log_weights)
        norm = torch.logsumexp(loglik, 1)
        nll = float(-norm.mean())
        resp = torch.exp(loglik - norm[:, None])
        if pinned is not None:
            fixed = pinned >= 0
            resp[fixed] = torch.nn.functional.one_hot(pinned[fixed], resp.shape[1]).to(resp.dtype)
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
    #: What of a fit runs on a cluster (``fit_store(..., workers=N)``, docs/cluster.md); EM runs in this process.
    cluster_steps = "the K-means start's Lloyd E-step, one task per chunk of batch_size items"

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
