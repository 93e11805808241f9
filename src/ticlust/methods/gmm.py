"""Gaussian mixture with diagonal covariances, fitted by EM from a K-means start, in torch."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..data import Stack, check_same_size
from ..device import with_oom_retry
from ..result import ClusteringResult
from .base import Done, MethodSpec, Progress, Snapshot, config_dict, param, register, seed_everything
from .kmeans import kmeans_plus_plus, lloyd


@dataclass
class GMMConfig:
    k: int = 10
    max_iter: int = param(100, "Most EM iterations", low=1, essential=True)
    tol: float = param(1e-3, "Stop when the mean log-likelihood per item improves by less than this", low=0.0)
    variance_floor: float = param(1e-2, "Smallest allowed variance per pixel (keeps always-blank pixels from dominating)", low=1e-12, essential=True)
    kmeans_iter: int = param(100, "Most K-means iterations for the starting point", low=1)
    batch_size: int = param(8192, "Items per batch when computing likelihoods", low=1, gui=False)


def component_log_likelihoods(x: torch.Tensor, means: torch.Tensor, variances: torch.Tensor,
                              log_weights: torch.Tensor, batch_size: int = 8192) -> torch.Tensor:
    """log π_k + log N(x | μ_k, diag σ²_k) for every item and component, (N, K)."""
    precision = 1.0 / variances
    const = -0.5 * (x.shape[1] * math.log(2 * math.pi) + torch.log(variances).sum(1)
                    + (means * means * precision).sum(1)) + log_weights
    out = []
    for i in range(0, x.shape[0], batch_size):
        xb = x[i:i + batch_size]
        quad = (xb * xb) @ precision.T - 2.0 * xb @ (means * precision).T
        out.append(const[None] - 0.5 * quad)
    return torch.cat(out)


def m_step(x: torch.Tensor, resp: torch.Tensor, variance_floor: float):
    """Weights, means and diagonal variances from responsibilities (N, K)."""
    nk = resp.sum(0) + 10 * torch.finfo(resp.dtype).eps
    means = resp.T @ x / nk[:, None]
    second = resp.T @ (x * x) / nk[:, None]
    variances = (second - means * means).clamp_min(variance_floor)
    return torch.log(nk / x.shape[0]), means, variances


def em(x: torch.Tensor, resp: torch.Tensor, max_iter: int, tol: float, variance_floor: float, batch_size: int = 8192):
    """EM from initial responsibilities; yields (iteration, mean NLL, log_weights, means, variances, log-lik)."""
    previous = math.inf
    for it in range(1, max_iter + 1):
        log_weights, means, variances = m_step(x, resp, variance_floor)
        loglik = component_log_likelihoods(x, means, variances, log_weights, batch_size)
        norm = torch.logsumexp(loglik, 1)
        nll = float(-norm.mean())
        resp = torch.exp(loglik - norm[:, None])
        yield it, nll, log_weights, means, variances, loglik
        if previous - nll < tol:
            break
        previous = nll


def run(stack: Stack, cfg: GMMConfig, device: torch.device, seed: int):
    rng = seed_everything(seed)
    x = stack.tensor(device, flat=True)
    centers = kmeans_plus_plus(x, cfg.k, rng)
    for it, inertia, centers, labels in lloyd(x, centers, cfg.kmeans_iter, batch_size=cfg.batch_size):
        yield Progress(it, cfg.kmeans_iter + cfg.max_iter, inertia / stack.n, "K-means start")
    resp = torch.nn.functional.one_hot(labels, cfg.k).to(x.dtype)
    history = []
    for it, nll, log_weights, means, variances, loglik in em(x, resp, cfg.max_iter, cfg.tol, cfg.variance_floor, cfg.batch_size):
        history.append(nll)
        yield Progress(cfg.kmeans_iter + it, cfg.kmeans_iter + cfg.max_iter, nll, "EM iterations")
        yield Snapshot(means.reshape(cfg.k, *stack.item_shape).cpu().numpy())
    resp = torch.softmax(loglik, 1)
    shape = (cfg.k, *stack.item_shape)
    yield Done(ClusteringResult(
        labels=loglik.argmax(1).cpu().numpy(), scores=(-loglik).cpu().numpy(), responsibilities=resp.cpu().numpy(),
        prototypes=means.reshape(shape).cpu().numpy(), method="gmm", config=config_dict(cfg), history=history,
        extras={"variances": variances.reshape(shape).cpu().numpy(), "weights": torch.exp(log_weights).cpu().numpy()},
        state={"means": means.cpu().numpy(), "variances": variances.cpu().numpy(), "log_weights": log_weights.cpu().numpy()}))


def predict(result: ClusteringResult, stack: Stack, device: torch.device, batch_size: int = 8192) -> ClusteringResult:
    """Most probable fitted component for each new item, streaming the items in batches."""
    means, variances, log_weights = (torch.from_numpy(result.state[k]).to(device) for k in ("means", "variances", "log_weights"))
    check_same_size(stack, means.shape[1])
    loglik = with_oom_retry(lambda bs: torch.cat([
        component_log_likelihoods(torch.from_numpy(b).to(device).reshape(len(b), -1), means, variances, log_weights)
        for _, b in stack.batches(bs)]), batch_size)
    return ClusteringResult(labels=loglik.argmax(1).cpu().numpy(), scores=(-loglik).cpu().numpy(),
                            responsibilities=torch.softmax(loglik, 1).cpu().numpy(), prototypes=result.prototypes,
                            method=result.method, config=result.config, state=result.state)


SPEC = register(MethodSpec(name="gmm", title="Gaussian mixture (diagonal, pixels)", config=GMMConfig, run=run,
                           predict=predict, inputs=("images", "vectors"), paper="baseline"))
