"""Clustering with jointly learned nonlinear transforms and min-max assignment (Kostadinov et al., paper 004).

Every item x is mapped by a shared linear map A (M x N) to q = A x. For each pair (tau_c1, nu_c2) of a
"dissimilarity" vector tau (C_d = K of them) and a "similarity" vector nu (C_s, few) a candidate
representation y is the exact minimiser (Eq. 20-23) of

    1/2 ||q - y||^2 + lam1 ||y||_1 + lam0 [ rho(y, tau) / rho(y, nu) + varsigma(y, tau) ],

found from the roots of a quartic in h = rho(y, nu) (docs/nt.md derives it). By default the item goes to
the pair whose candidate minimises its own term of Eq. 17 (the above plus 1/2||q - tau_c1 - nu_c2||^2,
which Eq. 11/13 keep in the likelihood); assignment="published" uses the min-max score
s_P = rho(y, tau)/rho(y, nu) + varsigma(y, tau) alone (Eq. 24, 26). Its cluster is c1 and its
representation that candidate. tau and nu are then updated in closed form
(Eq. 28-29) and A by an approximate closed form (Eq. 30), online with step rho on a random batch.
"""
from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch

from ..errors import InputError
from ..core.stack import SCAN_BATCH, Stack, to_nchw
from ..core.validation import check_same_size
from ..result import Assignments, ClusteringResult, FittedState
from ..events import Progress, Snapshot, drain
from ..kernels import kmeans_plus_plus, lloyd
from .base import Method, param, register, seed_everything

_EPS = 1e-6          # added to rho(y, nu) in every ratio so that an empty support intersection stays finite
_PAPER_M = 2100      # the paper's transform dimension, used with 20x25 = 500-pixel COIL images
_PAPER_N = 500


@dataclass
class NTConfig:
    k: int = 20
    c_s: int = param(2, "Number of similarity vectors nu (C_s, 'small' in the paper)", low=1, high=16)
    transform: str = param("learned", "The linear map A: learned (overcomplete, Eq. 30) or identity (A = I)",
                           choices=("learned", "identity"), essential=True)
    assignment: str = param("objective", "Assignment rule: objective (the (c1, c2) minimising the item's term of "
                            "Eq. 17, incl. 1/2||q - tau - nu||^2) or published (min-max score s_P alone, Eq. 26)",
                            choices=("objective", "published"))
    reseed_empty: bool = param(True, "Give an empty cluster the worst-fitting item of a cluster with more than one "
                               "member before the tau update (our addition, not in the paper)")
    init: str = param("gaussian", "Initialisation: gaussian (paper Sec. 5.1: A, tau, nu i.i.d. N(0,1)) or kmeans "
                      "(tau, nu fitted by Eq. 28-29 to a pixel k-means++ partition; not in the paper)",
                      choices=("gaussian", "kmeans"))
    m: int = param(0, "Transform dimension M (0 = the paper's M/N = 2100/500 ratio, capped at 2100 and at least N)",
                   low=0)
    lam0: float = param(0.03, "lambda0: weight of the min-max discrimination measure f_c", low=0.0)
    lam1: float = param(0.03, "lambda1: weight of the l1 sparsity of the representation", low=0.0)
    lam_e: float = param(0.001, "lambdaE: weight of the prior u_p on tau and nu", low=0.0)
    lam2: float = param(16.0, "lambda2: weight of ||A||_F^2", low=0.0)
    lam3: float = param(16.0, "lambda3: weight of ||A A^T - I||_F^2", low=0.0)
    lam4: float = param(16.0, "lambda4: weight of -log|det A^T A|", low=1e-9)
    max_iter: int = param(100, "Iterations (the paper stops after the 100th)", low=1, essential=True)
    refine_iter: int = param(10, "Iterations of a Refine, which starts from a clustering edited by hand", low=1)
    tol: float = param(0.0, "Also stop when fewer than this fraction of items change cluster (0 = run all iterations)",
                       low=0.0, high=1.0)
    online_rho: float = param(0.5, "Step rho of the online A update A <- A - rho (A - A_hat)", low=0.0, high=1.0)
    batch_fraction: float = param(0.87, "Fraction of items in each A update's random batch (paper: 87% on COIL)",
                                  low=0.01, high=1.0)
    nu_iters: int = param(5, "Inner iterations of the nu update (Eq. 29)", low=1)
    support_iters: int = param(3, "Support refinements of the closed-form candidate solution", low=1)
    resolve_top: int = param(4, "Candidates per item re-solved exactly when they may leave the fast path's support: "
                             "the best few by their feasible (upper-bound) criterion; 0 = all", low=0)
    reject_quantile: float = param(0.0, "Flag as rejected the items whose best score is above this upper quantile "
                                   "(e.g. 0.05 flags the 5% worst; 0 = no rejection)", low=0.0, high=0.5, essential=True)
    batch_size: int = param(256, "Items per batch in the candidate step", low=1, gui=False)
    # the paper's items had 500 values (COIL at 20×25); a 64×64×2 crop has 8,192, and A (M ≥ N) with its N×N
    # factorisations then takes minutes an iteration (1,000 such crops: not one fit of 100 iterations in 600 s)
    work_values: int = param(1024, "Images with more values (pixels × channels) are averaged down by the smallest whole "
                             "factor that leaves at most this many (64×64×2 crops: by 3); 0: as they are", low=0)


# ---- measures ------------------------------------------------------------------------------------
def rho(y1: torch.Tensor, y2: torch.Tensor) -> torch.Tensor:
    """rho(y1, y2) = ||y1^- * y2^-||_1 + ||y1^+ * y2^+||_1: the sign-agreeing overlap (last axis)."""
    return (y1.clamp_min(0) * y2.clamp_min(0) + y1.clamp_max(0) * y2.clamp_max(0)).sum(-1)


def varsigma(y1: torch.Tensor, y2: torch.Tensor) -> torch.Tensor:
    """varsigma(y1, y2) = ||y1 * y2||_2^2: the strength on the support intersection (last axis)."""
    return (y1 * y1 * y2 * y2).sum(-1)


def matched(sign_pos: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """w^+ where the reference is positive, w^- (as a magnitude) where it is not: the weights g, v of Eq. 22."""
    return torch.where(sign_pos, w.clamp_min(0), (-w).clamp_min(0))


# ---- the quartic ---------------------------------------------------------------------------------
def _largest_cubic_root(b: torch.Tensor, c: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    """Largest real root of m^3 + b m^2 + c m + d (float64, batched): trigonometric / Cardano form, then Newton."""
    p = c - b * b / 3
    q = 2 * b ** 3 / 27 - b * c / 3 + d
    disc = q * q / 4 + p ** 3 / 27
    sq = torch.sqrt(disc.clamp_min(0))
    one = torch.where(disc >= 0, torch.sign(-q / 2 + sq) * (-q / 2 + sq).abs().pow(1 / 3)
                      + torch.sign(-q / 2 - sq) * (-q / 2 - sq).abs().pow(1 / 3), torch.zeros_like(q))
    rp = torch.sqrt((-p / 3).clamp_min(1e-300))
    cosarg = (3 * q / (2 * p.clamp_max(-1e-300)) / rp).clamp(-1, 1)
    three = 2 * rp * torch.cos(torch.acos(cosarg) / 3)
    m = torch.where(disc >= 0, one, three) - b / 3
    for _ in range(3):
        f = ((m + b) * m + c) * m + d
        df = (3 * m + 2 * b) * m + c
        step = torch.where(df.abs() > 1e-300, f / df, torch.zeros_like(f))
        m = torch.where(torch.isfinite(step), m - step, m)
    return m


def quartic_roots(coeffs: torch.Tensor, polish: int = 3) -> torch.Tensor:
    """All complex roots (..., 4) of c4 h^4 + c3 h^3 + c2 h^2 + c1 h + c0, batched.

    Ferrari's closed form in float64 elementwise arithmetic (a resolvent cubic, then two quadratics), so
    it is a fixed sequence of vectorised kernels on any device — no batched eigen-solver, no host sync —
    followed by ``polish`` Newton steps on each root. ``coeffs`` is (..., 5), highest degree first, with
    c4 != 0; degenerate rows (non-finite after normalisation) get NaN roots (callers treat them as invalid).
    """
    c = coeffs.to(torch.float64)
    c = c / c[..., :1]
    bad = ~torch.isfinite(c).all(-1)
    c = torch.where(bad[..., None], torch.tensor([1.0, 0, 0, 0, -1.0], dtype=c.dtype, device=c.device), c)
    scale = torch.stack([c[..., k].abs().pow(1 / k) for k in range(1, 5)], -1).amax(-1).clamp_min(1e-150)
    a3, a2, a1, a0 = (c[..., k] / scale ** k for k in range(1, 5))      # h = scale * u: roots of order 1
    shift = a3 / 4                                                       # h = y - shift: y^4 + p y^2 + q y + r
    p = a2 - 6 * shift ** 2
    q = a1 - 2 * a2 * shift + 8 * shift ** 3
    r = a0 - a1 * shift + a2 * shift ** 2 - 3 * shift ** 4
    m = _largest_cubic_root(p, p * p / 4 - r, -q * q / 8).clamp_min(0)  # resolvent: 8m^3+8pm^2+(2p^2-8r)m-q^2
    s = torch.sqrt(2 * m)
    biq = s <= 1e-12                                                   # q = 0: y^2 = (-p ± sqrt(p^2-4r))/2
    t = torch.where(biq, torch.zeros_like(q), q / (2 * torch.where(biq, torch.ones_like(s), s)))
    roots = []
    for sign in (1.0, -1.0):                                             # y^2 - sign s y + (p/2 + m + sign t)
        bq, cq = -sign * s, p / 2 + m + sign * t
        roots += _quadratic(bq, cq)
    z = torch.stack(roots, -1)
    bi = torch.stack(_biquadratic(p, r), -1)
    z = (torch.where(biq[..., None], bi, z) - shift[..., None].to(z.dtype)) * scale[..., None].to(z.dtype)
    cz = c.to(z.dtype)[..., None, :]

    def value(z):
        return (((z + cz[..., 1]) * z + cz[..., 2]) * z + cz[..., 3]) * z + cz[..., 4]

    f = value(z)
    for _ in range(polish):             # Newton, each step kept only where it lowers |f| (double roots)
        df = ((4 * z + 3 * cz[..., 1]) * z + 2 * cz[..., 2]) * z + cz[..., 3]
        new = z - torch.where(df.abs() > 1e-300, f / df, torch.zeros_like(f))
        f_new = value(new)
        ok = torch.isfinite(f_new.real) & torch.isfinite(f_new.imag) & (f_new.abs() < f.abs())
        z, f = torch.where(ok, new, z), torch.where(ok, f_new, f)
    return torch.where(bad[..., None], torch.full_like(z, complex(math.nan, 0)), z)


def _quadratic(b: torch.Tensor, c: torch.Tensor) -> list[torch.Tensor]:
    """The two complex roots of y^2 + b y + c (real b, c), the larger-magnitude one first (stable form)."""
    disc = b * b - 4 * c
    sq = torch.sqrt(disc.abs())
    real = disc >= 0
    big = -(b + torch.where(b >= 0, sq, -sq)) / 2                         # real roots: no cancellation
    small = torch.where(big.abs() > 1e-300, c / torch.where(big == 0, torch.ones_like(big), big), torch.zeros_like(big))
    r1 = torch.complex(torch.where(real, big, -b / 2), torch.where(real, torch.zeros_like(b), sq / 2))
    r2 = torch.complex(torch.where(real, small, -b / 2), torch.where(real, torch.zeros_like(b), -sq / 2))
    return [r1, r2]


def _biquadratic(p: torch.Tensor, r: torch.Tensor) -> list[torch.Tensor]:
    """The four roots of y^4 + p y^2 + r: y = ±sqrt(w) for the two roots w of w^2 + p w + r."""
    w = [wi.sqrt() for wi in _quadratic(p, r)]
    return [w[0], -w[0], w[1], -w[1]]


# ---- the closed form of the constrained projection -----------------------------------------------
def ratio_objective(a, p, kk, mu, g, v):
    """1/2 sum kk a^2 - p.a + mu (g.a)/(v.a + eps): Eq. 20 up to a constant, in magnitudes a = |y|."""
    h = (v * a).sum(-1)
    r = (g * a).sum(-1)
    return 0.5 * (kk * a * a).sum(-1) - (p * a).sum(-1) + mu * r / (h + _EPS)


def _best_root(pp, pg, pv, gg, gv, vv, mu: float):
    """Given the sums over a support, the (alpha, beta) = (mu/h, mu r/h^2) of the best root of the quartic.

    On a fixed support S the solution is a = (p - alpha g + beta v)/k there, and its objective
    1/2 sum k a^2 - p.a + mu r/h has the closed form below in the sums, so every root is scored in O(1).
    The plain soft threshold (alpha = beta = 0) is the fallback. Returns (alpha, beta, objective).
    """
    best_j = torch.where(pv > 0, -0.5 * pp + mu * pg / pv.clamp_min(1e-300), torch.full_like(pv, math.inf))
    alpha, beta = torch.zeros_like(pv), torch.zeros_like(pv)
    if mu <= 0:
        return alpha, beta, -0.5 * pp
    coeffs = torch.stack([torch.ones_like(pv), -pv, torch.zeros_like(pv), mu * (gv * pv - vv * pg),
                          mu * mu * (vv * gg - gv * gv)], -1)
    roots = quartic_roots(coeffs).real
    for j in range(4):
        h = roots[..., j]
        valid = h > 1e-12
        h = torch.where(valid, h, torch.ones_like(h))
        den = h * h - mu * gv
        den = torch.where(den.abs() > 1e-300, den, torch.full_like(den, 1e-300))
        r = h * (h * pg - mu * gg) / den
        al, be = mu / h, mu * r / (h * h)
        uu = pp - 2 * al * pg + 2 * be * pv + al * al * gg - 2 * al * be * gv + be * be * vv
        jv = 0.5 * uu - (pp - al * pg + be * pv) + mu * r / h
        better = valid & torch.isfinite(jv) & (jv < best_j)
        best_j = torch.where(better, jv, best_j)
        alpha = torch.where(better, al, alpha)
        beta = torch.where(better, be, beta)
    return alpha, beta, best_j


def ratio_project(p, kk, mu: float, g, v, support_iters: int = 3, init=None):
    """Exact minimiser a >= 0 of 1/2 sum kk a^2 - p.a + mu (g.a)/(v.a), batched over leading axes.

    Stationarity gives a = max(p - mu g/h + mu (r/h^2) v, 0) / kk with h = v.a and r = g.a; on a fixed
    support both reduce to one quartic in h (docs/nt.md, Eq. Q). Every positive root is scored and the best
    kept; the support is then re-read from the thresholded solution and the step repeated, keeping the
    best solution seen under the true objective. Returns (a, h, r). p, kk, g, v broadcast to (..., M);
    mu is a number >= 0; ``init`` is an optional starting solution.
    """
    mu = float(mu)
    shape = np.broadcast_shapes(p.shape, kk.shape, g.shape, v.shape)
    best = (p.clamp_min(0) / kk).expand(shape)
    best_j = ratio_objective(best, p, kk, mu, g, v)
    if init is not None:
        init_j = ratio_objective(init, p, kk, mu, g, v)
        keep = init_j < best_j
        best = torch.where(keep[..., None], init, best)
        best_j = torch.where(keep, init_j, best_j)
    support = best > 0
    for _ in range(support_iters if mu > 0 else 0):
        sk = support.to(p.dtype) / kk
        sums = [(t * sk).sum(-1).to(torch.float64) for t in (p * p, g * p, v * p, g * g, g * v, v * v)]
        alpha, beta, _ = _best_root(*sums, mu)
        a = (p - alpha.to(p.dtype)[..., None] * g + beta.to(p.dtype)[..., None] * v).clamp_min(0) / kk
        jv = ratio_objective(a, p, kk, mu, g, v)
        better = torch.isfinite(jv) & (jv < best_j)
        best = torch.where(better[..., None], a, best)
        best_j = torch.where(better, jv, best_j)
        new_support = best > 0
        if torch.equal(new_support, support):
            break
        support = new_support
    return best, (v * best).sum(-1), (g * best).sum(-1)


# ---- Stage 1: candidates, scores and assignment --------------------------------------------------
def pair_mats(tau: torch.Tensor, nu: torch.Tensor, lam0: float) -> dict:
    """The (M, C_d C_s) matrices g^a v^b w / k of the fast candidate sums, for the positive and negative side.

    w is 1 ("k": the quartic sums) or tau^2/k ("w": the varsigma sums). They depend on tau, nu and lam0
    only, so a caller computes them once per (tau, nu) and passes them to every batch of :func:`candidates`.
    """
    cd, cs, m = tau.shape[0], nu.shape[0], tau.shape[1]
    ik = 1.0 / (1 + 2 * lam0 * tau * tau)
    weights = {"k": ik, "w": tau * tau * ik * ik}
    sides = ((tau.clamp_min(0), nu.clamp_min(0)), ((-tau).clamp_min(0), (-nu).clamp_min(0)))
    mats = {}
    for ga, vb in ((0, 0), (1, 0), (0, 1), (2, 0), (1, 1), (0, 2)):
        for wn, w in weights.items():
            mats[(ga, vb, wn)] = tuple(((t_ ** ga * w)[:, None, :] * (n_ ** vb)[None, :, :]).reshape(cd * cs, m).T.contiguous()
                                       for t_, n_ in sides)
    return mats


def support_solution(p, sup, pos, neg, mats: dict, lam0: float, shape: tuple[int, int, int]):
    """On the plain soft threshold's support S: the best root's (alpha, beta), the score s_P and the objective J
    of Eq. 20 (up to 1/2||q||^2), each (B, C_d, C_s).

    Every sum over M is two matrix products with the :func:`pair_mats` matrices (positive and negative
    side of q), so each (item, c1, c2) costs O(1) after them.
    """
    def ssum(fp, ga: int, vb: int, w: str):
        """sum_m fp_m g^ga v^vb w_c1 over m for every (item, c1, c2), as two matrix products."""
        mp, mn = mats[(ga, vb, w)]
        return ((fp * pos) @ mp + (fp * neg) @ mn).reshape(shape).to(torch.float64)

    sp, sp2 = sup * p, sup * p * p
    pp, pg, pv = ssum(sp2, 0, 0, "k"), ssum(sp, 1, 0, "k"), ssum(sp, 0, 1, "k")
    gg, gv, vv = ssum(sup, 2, 0, "k"), ssum(sup, 1, 1, "k"), ssum(sup, 0, 2, "k")
    alpha, beta, jv = _best_root(pp, pg, pv, gg, gv, vv, lam0)
    h = pv - alpha * gv + beta * vv                                         # v.a on S
    r = pg - alpha * gg + beta * gv                                         # g.a on S
    sig = (ssum(sp2, 0, 0, "w") - 2 * alpha * ssum(sp, 1, 0, "w") + 2 * beta * ssum(sp, 0, 1, "w")
           + alpha * alpha * ssum(sup, 2, 0, "w") - 2 * alpha * beta * ssum(sup, 1, 1, "w")
           + beta * beta * ssum(sup, 0, 2, "w"))
    return alpha, beta, (r / (h + _EPS) + sig).to(p.dtype), jv


def may_leave_support(p, sup, g3, v3, alpha, beta) -> torch.Tensor:
    """Sufficient test that the thresholded solution stays on S, negated: (B, C_d, C_s) True where it may not.

    It stays when no coordinate of S drops below zero (alpha g <= p there) and none outside S rises
    above it (beta v <= -p there).
    """
    amax = torch.where((sup[:, None, :] > 0) & (g3 > 0), p[:, None, :] / g3.clamp_min(1e-30),
                       torch.full_like(g3, math.inf)).amin(-1)
    bmax = torch.where((sup[:, None, :] == 0) & (v3 > 0), (-p)[:, None, :] / v3.clamp_min(1e-30),
                       torch.full_like(v3, math.inf)).amin(-1)
    return (alpha > amax[:, :, None]) | (beta > bmax[:, None, :]) | (beta < 0)


@dataclass
class CandidateMagnitudes:
    """The magnitudes |y| of a batch's candidates: the closed form on S, or the exact re-solve where S may not hold.

    Called as (i, c1, c2) → (len(i), M), so that a caller builds only the candidates it keeps.
    """

    p: torch.Tensor                      # (B, M) |q| - lam1
    g3: torch.Tensor                     # (B, C_d, M) tau matched to the signs of q
    v3: torch.Tensor                     # (B, C_s, M) nu matched to the signs of q
    alpha: torch.Tensor                  # (B, C_d, C_s) float64, the best root's mu/h
    beta: torch.Tensor                   # (B, C_d, C_s) float64, the best root's mu r/h^2
    ik: torch.Tensor                     # (C_d, M) 1 / (1 + 2 lam0 tau^2)
    moved: torch.Tensor                  # (B, C_d, C_s) bool: may leave S
    objective: torch.Tensor | None = None  # (B, C_d, C_s) float64: Eq. 20 at the candidate, less 1/2||q||^2
    exact: torch.Tensor | None = None    # (moved.sum(), M) the moved ones' exact magnitudes, once re-solved

    def closed_form(self, i, c1, c2) -> torch.Tensor:
        """(p - alpha g + beta v)^+ / k on the fixed support S."""
        al, be = self.alpha[i, c1, c2, None].to(self.p.dtype), self.beta[i, c1, c2, None].to(self.p.dtype)
        return (self.p[i] - al * self.g3[i, c1] + be * self.v3[i, c2]).clamp_min(0) * self.ik[c1]

    def __call__(self, i, c1, c2) -> torch.Tensor:
        a = self.closed_form(i, c1, c2)
        if self.exact is not None:
            rank = torch.full(self.moved.shape, -1, dtype=torch.long, device=self.p.device)
            rank[self.moved] = torch.arange(int(self.moved.sum()), device=self.p.device)
            ridx = rank[i, c1, c2]
            hit = ridx >= 0
            a[hit] = self.exact[ridx[hit]]
        return a


RESOLVE_CHUNK = 4096   # candidates handled together: bounds the (chunk, M) temporaries of ratio_project


def moved_rows(mags: CandidateMagnitudes, select: torch.Tensor | None = None):
    """(rows into mags.exact, item, c1, c2) of the moved candidates, or of those in ``select`` (a subset of moved)."""
    bi, ci, si = torch.nonzero(mags.moved, as_tuple=True)
    rows = torch.arange(bi.numel(), device=bi.device)
    if select is not None:
        keep = select[bi, ci, si]
        rows, bi, ci, si = rows[keep], bi[keep], ci[keep], si[keep]
    return rows, bi, ci, si


def estimate_moved(mags: CandidateMagnitudes, score, tau, lam0: float) -> None:
    """The candidates that may leave S get their thresholded closed form (feasible), scored exactly.

    Its J is an upper bound on the exact re-solve's. Fills ``mags.exact``, ``score`` and ``mags.objective``.
    """
    rows, bi_all, ci_all, si_all = moved_rows(mags)
    mags.exact = torch.empty(rows.numel(), mags.p.shape[-1], dtype=mags.p.dtype, device=mags.p.device)
    for lo in range(0, rows.numel(), RESOLVE_CHUNK):
        bi, ci, si = (t[lo:lo + RESOLVE_CHUNK] for t in (bi_all, ci_all, si_all))
        g, v, p = mags.g3[bi, ci], mags.v3[bi, si], mags.p[bi]          # gathered once for both steps
        al, be = mags.alpha[bi, ci, si, None].to(p.dtype), mags.beta[bi, ci, si, None].to(p.dtype)
        a = (p - al * g + be * v).clamp_min(0) * mags.ik[ci]            # = mags.closed_form(bi, ci, si)
        write_moved(mags, score, tau, lam0, rows[lo:lo + RESOLVE_CHUNK], (bi, ci, si), a, (g, v, p))


def write_moved(mags, score, tau, lam0, rows, index, a, gvp=None) -> None:
    """Store the magnitudes ``a`` of moved candidates ``index`` = (item, c1, c2) with their s_P and J;
    ``gvp`` = their gathered (g, v, p) when the caller has them."""
    bi, ci, si = index
    g, v, p = gvp if gvp is not None else (mags.g3[bi, ci], mags.v3[bi, si], mags.p[bi])
    h, r = (v * a).sum(-1), (g * a).sum(-1)
    score[bi, ci, si] = r / (h + _EPS) + (a * a * tau[ci] ** 2).sum(-1)
    mags.objective[bi, ci, si] = ratio_objective(a, p, 1.0 / mags.ik[ci], lam0, g, v).to(torch.float64)
    mags.exact[rows] = a


def resolve_moved(mags: CandidateMagnitudes, score, tau, lam0: float, support_iters: int, select=None) -> None:
    """Re-solve exactly (:func:`ratio_project`, from the stored estimate) the moved candidates in ``select``
    (default: all), in chunks of RESOLVE_CHUNK with at most ``support_iters`` support passes each, so memory
    and time per call stay bounded. Needs :func:`estimate_moved` first."""
    rows_all, bi_all, ci_all, si_all = moved_rows(mags, select)
    for lo in range(0, rows_all.numel(), RESOLVE_CHUNK):
        rows, bi, ci, si = (t[lo:lo + RESOLVE_CHUNK] for t in (rows_all, bi_all, ci_all, si_all))
        g, v, p = mags.g3[bi, ci], mags.v3[bi, si], mags.p[bi]
        a, _, _ = ratio_project(p, 1.0 / mags.ik[ci], lam0, g, v, support_iters, init=mags.exact[rows])
        write_moved(mags, score, tau, lam0, rows, (bi, ci, si), a, (g, v, p))


def candidates(q: torch.Tensor, tau: torch.Tensor, nu: torch.Tensor, lam0: float, lam1: float,
               support_iters: int = 3, full: bool = True, mats: dict | None = None, resolve: bool = True):
    """Candidates of Eq. 21-23 for a batch of q (B, M): scores s_P (B, C_d, C_s) of Eq. 24 and magnitudes |y|.

    Fast path: on the support S = {|q| > lam1} of the plain soft threshold, the sums that define the
    quartic, its roots' objectives and the score are matrix products over M (:func:`support_solution`).
    A candidate whose thresholded solution may leave S (a cheap sufficient test) is re-solved exactly by
    :func:`ratio_project` (with ``resolve``; else every candidate keeps the fast path's values — for a
    moved one the closed form on S, which may be infeasible — and the caller picks the ones it needs, then
    runs :func:`estimate_moved` and :func:`resolve_moved` on them). Returns (scores, magnitudes) where magnitudes(i, c1, c2) (a
    :class:`CandidateMagnitudes`) gives |y| (len(i), M) of the chosen candidates; with ``full`` the
    (B, C_d, C_s, M) tensor of all instead. ``mats`` is :func:`pair_mats` of (tau, nu, lam0), computed
    here when not given.
    """
    lam0 = float(lam0)
    if mats is None:
        mats = pair_mats(tau, nu, lam0)
    pos, neg = (q > 0).to(q.dtype), (q < 0).to(q.dtype)
    p = q.abs() - lam1                                                     # (B, M)
    sup = (p > 0).to(q.dtype)
    b, cd, cs, m = q.shape[0], tau.shape[0], nu.shape[0], tau.shape[1]
    alpha, beta, score, jv = support_solution(p, sup, pos, neg, mats, lam0, (b, cd, cs))
    g3 = pos[:, None, :] * tau.clamp_min(0)[None] + neg[:, None, :] * (-tau).clamp_min(0)[None]   # (B, Cd, M)
    v3 = pos[:, None, :] * nu.clamp_min(0)[None] + neg[:, None, :] * (-nu).clamp_min(0)[None]     # (B, Cs, M)
    kk = 1 + 2 * lam0 * tau * tau                                           # (Cd, M)
    mags = CandidateMagnitudes(p, g3, v3, alpha, beta, 1.0 / kk, may_leave_support(p, sup, g3, v3, alpha, beta), jv)
    if resolve and bool(mags.moved.any()):
        estimate_moved(mags, score, tau, lam0)
        if support_iters > 0:
            resolve_moved(mags, score, tau, lam0, support_iters)
    if not full:
        return score, mags
    ii, c1, c2 = (t.reshape(-1).to(q.device)
                  for t in torch.meshgrid(torch.arange(b), torch.arange(cd), torch.arange(cs), indexing="ij"))
    return score, mags(ii, c1, c2).reshape(b, cd, cs, m)


def item_objective(q, mags: CandidateMagnitudes, tau, nu) -> torch.Tensor:
    """(B, C_d, C_s) float64: the item's term of Eq. 17 at each candidate,
    1/2||q - y||^2 + lam1||y||_1 + lam0 s_P + 1/2||q - tau_c1 - nu_c2||^2 (the first three are Eq. 20's J + 1/2||q||^2)."""
    q64, tau64, nu64 = q.to(torch.float64), tau.to(torch.float64), nu.to(torch.float64)
    qq = (q64 * q64).sum(-1)
    pair = 0.5 * ((tau64[:, None, :] + nu64[None, :, :]) ** 2).sum(-1)                 # (C_d, C_s)
    fit = 0.5 * qq[:, None, None] - (q64 @ tau64.T)[:, :, None] - (q64 @ nu64.T)[:, None, :] + pair[None]
    return mags.objective + 0.5 * qq[:, None, None] + fit


def pinned_only(crit: torch.Tensor, pinned: torch.Tensor | None) -> torch.Tensor:
    """The criterion (B, C_d, C_s) with every cluster but its own ruled out (inf) for a pinned item (pinned ≥ 0)."""
    if pinned is None:
        return crit
    other = (torch.arange(crit.shape[1], device=crit.device)[None] != pinned[:, None]) & (pinned[:, None] >= 0)
    return crit.masked_fill(other[:, :, None], math.inf)


def assign_batch(q, tau, nu, cfg, mats, pinned=None):
    """Joint assignment of a batch: labels c1, c2, representation y, and the criterion (B, C_d) min over c2.

    ``assignment="objective"``: (c1, c2) minimise the item's term of Eq. 17 (:func:`item_objective`);
    ``"published"``: they minimise the min-max score s_P alone (Eq. 26). Lower = closer in both.
    ``mats`` is :func:`pair_mats` of (tau, nu, cfg.lam0). ``pinned`` (B,): clusters the user fixed items to
    (-1: free); such an item takes its best pair within that cluster.
    """
    top = cfg.resolve_top
    score, magnitudes = candidates(q, tau, nu, cfg.lam0, cfg.lam1, cfg.support_iters, full=False, mats=mats,
                                   resolve=top == 0)
    crit = score if cfg.assignment == "published" else item_objective(q, magnitudes, tau, nu).to(q.dtype)
    b, cd, cs = score.shape
    if top > 0 and bool(magnitudes.moved.any()):              # exact re-solve of each item's best few
        best = torch.zeros(b, cd * cs, dtype=torch.bool, device=q.device)
        best.scatter_(1, pinned_only(crit, pinned).reshape(b, cd * cs).topk(min(top, cd * cs), 1, largest=False).indices, True)
        best = best.reshape(b, cd, cs)
        dropped = magnitudes.moved & ~best                     # fast-path values not to be trusted: out of the running
        magnitudes.moved = magnitudes.moved & best
        estimate_moved(magnitudes, score, tau, cfg.lam0)
        if cfg.support_iters > 0:
            resolve_moved(magnitudes, score, tau, cfg.lam0, cfg.support_iters)
        crit = score if cfg.assignment == "published" else item_objective(q, magnitudes, tau, nu).to(q.dtype)
        chosen = pinned_only(crit, pinned).masked_fill(dropped, math.inf).reshape(b, -1).min(1).values[:, None, None]
        floor = torch.nextafter(chosen, torch.full_like(chosen, math.inf))    # never re-solved: never ahead of the chosen
        crit = torch.where(dropped, torch.maximum(crit, floor), crit)
    flat = pinned_only(crit, pinned).reshape(b, cd * cs).argmin(1)
    c1, c2 = flat // cs, flat % cs
    y = torch.sign(q) * magnitudes(torch.arange(b, device=q.device), c1, c2)
    return c1, c2, y, crit.min(2).values


def assign_batches(q, tau, nu, cfg, mats, pinned=None):
    """Generator: assign the items batch by batch, yielding (done, total) batches after each; returns
    (c1, c2, y, criterion) for all. ``mats`` is :func:`pair_mats` of (tau, nu, cfg.lam0), shared by every batch;
    ``pinned``: as in :func:`assign_batch`."""
    starts = range(0, q.shape[0], cfg.batch_size)
    outs = []
    for i, lo in enumerate(starts):
        part = None if pinned is None else pinned[lo:lo + cfg.batch_size]
        outs.append(assign_batch(q[lo:lo + cfg.batch_size], tau, nu, cfg, mats, part))
        yield i + 1, len(starts)
    return tuple(torch.cat(t) for t in zip(*outs))


def assign_all(q, tau, nu, cfg, mats):
    """:func:`assign_batches` run to the end, without events."""
    return drain(assign_batches(q, tau, nu, cfg, mats))


# ---- Stage 2: tau and nu ---------------------------------------------------------------------------
def fc_pair(z: torch.Tensor, others_tau: torch.Tensor, nus: torch.Tensor):
    """The (tau', nu') that attain f_c(z, theta\\z) = min_tau' [rho(z,tau')/max_nu rho(z,nu) + varsigma(z,tau')].

    nu' is None when there is no nu to compare with (then only the varsigma part counts); both are None
    when there is no other tau.
    """
    if others_tau.shape[0] == 0:
        return None, None
    s = varsigma(z[None], others_tau)
    nu_p = None
    if nus.shape[0]:
        rn = rho(z[None], nus)
        nu_p = nus[int(rn.argmax())]
        s = s + rho(z[None], others_tau) / (float(rn.max()) + _EPS)
    return others_tau[int(s.argmin())], nu_p


def update_tau(q, y, c1, c2, tau, nu, cfg):
    """Closed-form tau update of Eq. 28 for every non-empty cluster (docs/nt.md, B.1)."""
    new = tau.clone()
    w = 1.0 / (rho(y, nu[c2]) + _EPS)                     # 1 / rho(y_i, nu_j2(i)), fixed (assumption A_ss)
    for c in range(tau.shape[0]):
        members = torch.nonzero(c1 == c).flatten()
        n = members.numel()
        if n == 0:
            continue
        yi, wi = y[members], w[members]
        mvec = (q[members] - nu[c2[members]]).mean(0)
        pos = mvec > 0
        lin = torch.where(pos, (wi[:, None] * yi.clamp_min(0)).sum(0), (wi[:, None] * (-yi).clamp_min(0)).sum(0))
        quad = (yi * yi).sum(0)
        others = torch.cat([tau[:c], tau[c + 1:]])
        tau_p, nu_p = fc_pair(tau[c], others, nu)
        kk = 1 + 2 * cfg.lam0 / n * quad
        if tau_p is not None:
            kk = kk + 2 * cfg.lam_e / n * tau_p * tau_p
        p = mvec.abs() - cfg.lam0 / n * lin
        if tau_p is not None and nu_p is not None:
            a, _, _ = ratio_project(p, kk, cfg.lam_e / n, matched(pos, tau_p), matched(pos, nu_p), cfg.support_iters)
        else:
            a = p.clamp_min(0) / kk
        new[c] = torch.where(pos, a, -a)
    return new


def nu_objective(nu_c, q, y, c1, tau, others_nu, cfg):
    """Eq. 29 for one nu (members only): fit + lam0 sum rho(y,tau)/rho(y,nu) + lamE f_c(nu, theta\\nu)."""
    fit = 0.5 * ((q - tau[c1] - nu_c) ** 2).sum()
    ratio = (rho(y, tau[c1]) / (rho(y, nu_c[None]) + _EPS)).sum()
    tau_p, nu_p = fc_pair(nu_c, tau, others_nu)
    prior = 0.0
    if tau_p is not None:
        prior = varsigma(nu_c, tau_p) + (rho(nu_c, tau_p) / (rho(nu_c, nu_p) + _EPS) if nu_p is not None else 0.0)
    return float(fit + cfg.lam0 * ratio + cfg.lam_e * prior)


def update_nu(q, y, c1, c2, tau, nu, cfg):
    """Iterative nu update of Eq. 29 (docs/nt.md, B.2): linearise the sum of ratios, solve in closed form, repeat.

    Each inner step keeps the new nu only if Eq. 29 decreases, so the update never makes it worse.
    """
    new = nu.clone()
    for c in range(nu.shape[0]):
        members = torch.nonzero(c2 == c).flatten()
        n = members.numel()
        if n == 0:
            continue
        qi, yi, ci = q[members], y[members], c1[members]
        num = rho(yi, tau[ci])
        mvec = (qi - tau[ci]).mean(0)
        pos = mvec > 0
        others = torch.cat([new[:c], new[c + 1:]])
        cur = new[c].clone()
        cur_obj = nu_objective(cur, qi, yi, ci, tau, others, cfg)
        for _ in range(cfg.nu_iters):
            den = rho(yi, cur[None]) + _EPS
            wgt = (num / (den * den))[:, None]
            lin = torch.where(pos, (wgt * yi.clamp_min(0)).sum(0), (wgt * (-yi).clamp_min(0)).sum(0))
            tau_p, nu_p = fc_pair(cur, tau, others)
            kk = 1 + 2 * cfg.lam_e / n * tau_p * tau_p
            p = mvec.abs() + cfg.lam0 / n * lin
            if nu_p is not None:
                a, _, _ = ratio_project(p, kk, cfg.lam_e / n, matched(pos, tau_p), matched(pos, nu_p), cfg.support_iters)
            else:
                a = p.clamp_min(0) / kk
            cand = torch.where(pos, a, -a)
            obj = nu_objective(cand, qi, yi, ci, tau, others, cfg)
            if not obj < cur_obj:
                break
            cur, cur_obj = cand, obj
        new[c] = cur
    return new


# ---- Stage 3: the linear map ---------------------------------------------------------------------
def a_prior(a, lam2, lam3, lam4):
    """f_d(A) = lam2/2 ||A||^2 + lam3/2 ||A A^T - I||^2 - lam4 log det(A^T A) (the priors of Eq. 30)."""
    gram = (a.T @ a).to(torch.float64)
    fro = gram.diagonal().sum()
    frame = (gram * gram).sum() - 2 * fro + a.shape[0]                      # ||A A^T - I_M||_F^2 via A^T A
    return 0.5 * lam2 * fro + 0.5 * lam3 * frame - lam4 * torch.linalg.slogdet(gram)[1]


def a_objective(a, x, z, lam2, lam3, lam4):
    """Eq. 30: 1/2||A X - Z||^2 + f_d(A), with X (N, n) and Z (M, n) column-wise."""
    return 0.5 * ((a @ x - z) ** 2).sum() + a_prior(a, lam2, lam3, lam4)


def update_a(x: torch.Tensor, z: torch.Tensor, lam2: float, lam3: float, lam4: float) -> torch.Tensor:
    """:func:`update_a_steps` run to the end."""
    return drain(update_a_steps(x, z, lam2, lam3, lam4))


def update_a_steps(x: torch.Tensor, z: torch.Tensor, lam2: float, lam3: float, lam4: float):
    """Generator (yields None between its large matrix steps, so a caller can emit events); returns A.

    Approximate closed form of Eq. 30 (Ravishankar & Bresler 2015 extended; docs/nt.md, Sec. A).

    x: (N, n) data columns, z: (M, n) targets. With X X^T + lam2 I = L L^T and the SVD L^-1 X Z^T = Q S R^T,
    A = R diag(b) Q^T L^-1 where each b_j is the best positive root of
    2 lam3 w_j^2 b^4 + (1 - 2 lam3 w_j) b^2 - s_j b - 2 lam4 = 0, w_j = (Q^T (X X^T + lam2 I)^-1 Q)_jj.
    Exact when lam3 = 0 or when Q^T (X X^T + lam2 I)^-1 Q is diagonal; needs M >= N.
    """
    dt = x.dtype
    x64, z64 = x.to(torch.float64), z.to(torch.float64)
    n_dim = x.shape[0]
    f = x64 @ x64.T + lam2 * torch.eye(n_dim, dtype=torch.float64, device=x.device)
    chol = torch.linalg.cholesky(f)
    linv = torch.linalg.solve_triangular(chol, torch.eye(n_dim, dtype=torch.float64, device=x.device), upper=False)
    yield
    kmat = linv @ (x64 @ z64.T)                                                # (N, M)
    gram = kmat @ kmat.T
    yield
    ev, qm = torch.linalg.eigh(gram)                                           # thin SVD via the N x N Gram
    yield
    s = ev.clamp_min(0).sqrt()
    ok = s > 1e-9 * float(s.max().clamp_min(1e-300))
    rt = (qm.T @ kmat) / torch.where(ok, s, torch.ones_like(s))[:, None]        # R^T (N, M)
    if not bool(ok.all()):    # rank-deficient X Z^T: complete R with orthonormal columns (s_j = 0 there)
        s = torch.where(ok, s, torch.zeros_like(s))
        gen = torch.Generator(device="cpu").manual_seed(0)
        extra = torch.randn(int((~ok).sum()), rt.shape[1], generator=gen, dtype=torch.float64).to(x.device)
        valid = rt[ok]
        extra = extra - (extra @ valid.T) @ valid
        rt[~ok] = torch.linalg.qr(extra.T)[0].T
    yield
    w = ((qm.T @ linv.T) ** 2).sum(1)                                         # diag(Q^T F^-1 Q)
    if lam3 > 0:
        coeffs = torch.stack([2 * lam3 * w * w, torch.zeros_like(w), 1 - 2 * lam3 * w, -s,
                              torch.full_like(w, -2 * lam4)], -1)
        roots = quartic_roots(coeffs)
        re = roots.real
        ok = (re > 0) & (roots.imag.abs() <= 1e-6 * (1 + re.abs()))
        b = re.clamp_min(1e-300)
        phi = 0.5 * b * b - s[:, None] * b + 0.5 * lam3 * (w[:, None] * b * b - 1) ** 2 - 2 * lam4 * torch.log(b)
        phi = torch.where(ok, phi, torch.full_like(phi, math.inf))
        bsel = b.gather(1, phi.argmin(1, keepdim=True))[:, 0]
    else:
        bsel = 0.5 * (s + torch.sqrt(s * s + 8 * lam4))
    a = rt.T @ (bsel[:, None] * qm.T) @ linv
    return a.to(dt)


def default_m(n_dim: int) -> int:
    """The paper's M = 2100 for N = 500 pixels, scaled by the same ratio, capped at 2100, never below N."""
    return max(n_dim, min(_PAPER_M, int(math.ceil(n_dim * _PAPER_M / _PAPER_N))))


def reduction(cfg: NTConfig, stack: Stack) -> int:
    """The whole factor NT averages a stack's images down by: the smallest that leaves at most ``cfg.work_values`` values
    per item (1: vectors, images within it, or work_values 0)."""
    if not cfg.work_values or not stack.is_image or stack.dim <= cfg.work_values:
        return 1
    (h, w), factor = stack.item_shape[:2], 2
    while -(-h // factor) * -(-w // factor) * stack.channels > cfg.work_values:
        factor += 1
    return factor


def nt_items(raw: np.ndarray, factor: int, device) -> torch.Tensor:
    """Items (B, ...) of a stack as NT's flat rows (B, N): as they are, or images averaged over factor×factor blocks (a
    last partial block alone)."""
    x = torch.from_numpy(raw).to(device)
    if factor > 1:
        x = torch.nn.functional.avg_pool2d(to_nchw(x), factor, ceil_mode=True)
    return x.reshape(len(x), -1)


def standardise(x: torch.Tensor) -> torch.Tensor:
    """Each item to zero mean and unit variance (Sec. 5.1 'normalized to unit variance')."""
    x = x - x.mean(1, keepdim=True)
    return x / x.std(1, unbiased=False, keepdim=True).clamp_min(1e-8)


def coherence(a: torch.Tensor) -> float:
    """Expected mutual coherence: mean |cos| between distinct rows of A."""
    rows = a / a.norm(dim=1, keepdim=True).clamp_min(1e-12)
    gram = (rows @ rows.T).abs()
    m = a.shape[0]
    return float((gram.sum() - gram.diagonal().sum()) / (m * (m - 1))) if m > 1 else 0.0


def condition_number(a: torch.Tensor) -> float:
    sv = torch.linalg.svdvals(a.to(torch.float64))
    return float(sv.max() / sv.min().clamp_min(1e-300))


def total_objective(q, y, c1, c2, tau, nu, a, cfg) -> float:
    """Eq. 17 with the fit weights of Eq. 28-30, per item: what the history records."""
    fit = 0.5 * ((q - y) ** 2).sum() + 0.5 * ((q - tau[c1] - nu[c2]) ** 2).sum()
    s_p = rho(y, tau[c1]) / (rho(y, nu[c2]) + _EPS) + varsigma(y, tau[c1])
    disc = cfg.lam0 * s_p.sum() + cfg.lam1 * y.abs().sum()
    up = 0.0
    for c in range(tau.shape[0]):
        tp, npair = fc_pair(tau[c], torch.cat([tau[:c], tau[c + 1:]]), nu)
        if tp is not None:
            up += float(rho(tau[c], tp) / (rho(tau[c], npair) + _EPS) + varsigma(tau[c], tp))
    for c in range(nu.shape[0]):
        tp, npair = fc_pair(nu[c], tau, torch.cat([nu[:c], nu[c + 1:]]))
        if tp is not None:
            up += float(varsigma(nu[c], tp) + (rho(nu[c], tp) / (rho(nu[c], npair) + _EPS) if npair is not None else 0))
    prior_a = 0.0
    if cfg.transform == "learned":
        prior_a = float(a_prior(a, cfg.lam2, cfg.lam3, cfg.lam4))
    return (float(fit + disc) + cfg.lam_e * up + prior_a) / q.shape[0]


# ---- the method ----------------------------------------------------------------------------------
class Assignment(NamedTuple):
    """Stage 1's output for all items: what the tau, nu and A updates and the result read."""

    q: torch.Tensor        # (n, M) transformed items A x
    c1: torch.Tensor       # (n,) cluster (the tau of the best pair)
    c2: torch.Tensor       # (n,) the nu of the best pair
    y: torch.Tensor        # (n, M) NT representation
    scores: torch.Tensor   # (n, K) the assignment criterion (Eq. 17's item term, or s_P), minimised over nu


def initial_state(stack: Stack, cfg: NTConfig, device: torch.device, rng: np.random.Generator):
    """Standardised items x (n, N) and the starting A (M, N), tau (K, M), nu (C_s, M).

    Sec. 5.1: A, tau, nu i.i.d. N(0, 1) (A = I for the identity transform); with init="kmeans", tau and
    nu are then fitted to a pixel k-means partition.
    """
    if cfg.c_s < 1:
        raise InputError("c_s must be at least 1: the min-max score needs one similarity vector nu.")
    # the whole stack, unavoidably: NT's alternating updates of A and the clusters revisit every item at each step
    x = standardise(nt_items(stack.numpy(), reduction(cfg, stack), device))      # (n, N)
    n_dim = x.shape[1]
    m_dim = n_dim if cfg.transform == "identity" else (cfg.m or default_m(n_dim))
    if m_dim < n_dim:
        raise InputError(f"m = {m_dim} is smaller than the item size {n_dim}: the learned A must be square or "
                         "overcomplete (m >= N, or m = 0 for the default).")
    gen = torch.Generator(device="cpu").manual_seed(int(rng.integers(2**31)))

    def gauss(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float32).to(device)

    a = torch.eye(n_dim, device=device) if cfg.transform == "identity" else gauss(m_dim, n_dim)
    tau, nu = gauss(cfg.k, m_dim), gauss(cfg.c_s, m_dim)
    if cfg.init == "kmeans":
        tau, nu = kmeans_start(x, x @ a.T, tau, nu, cfg, rng)
    return x, a, tau, nu


def assignment_stage(x, a, tau, nu, cfg: NTConfig, pinned=None):
    """Generator, Stage 1: q = A x and the joint assignment of every item (pinned ones within their cluster),
    yielding (done, total) batches; returns (Assignment, the objective it reaches)."""
    q = x @ a.T
    c1, c2, y, scores = yield from assign_batches(q, tau, nu, cfg, pair_mats(tau, nu, cfg.lam0), pinned)
    return Assignment(q, c1, c2, y, scores), total_objective(q, y, c1, c2, tau, nu, a, cfg)


def reseed_empty(c1: torch.Tensor, best: torch.Tensor, k: int, pinned: torch.Tensor | None = None) -> torch.Tensor:
    """Labels with every empty cluster given one item (our addition, not in the paper).

    The items are taken in order of decreasing ``best`` (their assignment criterion: the worst-fitting
    first), each from a cluster that keeps at least one member, never a ``pinned`` one (≥ 0); the tau
    update (Eq. 28) then fits the new cluster's tau to it. One host copy per call, only when a cluster is empty.
    """
    counts = torch.bincount(c1, minlength=k)
    empty = torch.nonzero(counts == 0).flatten().tolist()
    if not empty:
        return c1
    c1, counts = c1.clone(), counts.tolist()
    labels = c1.tolist()
    free = [True] * len(labels) if pinned is None else (pinned < 0).tolist()
    for i in torch.argsort(best, descending=True).tolist():
        if not empty:
            break
        if counts[labels[i]] > 1 and free[i]:
            c = empty.pop(0)
            counts[labels[i]] -= 1
            counts[c] += 1
            c1[i] = c
    return c1


def update_stage(x, asg: Assignment, tau, nu, a, cfg: NTConfig, rng: np.random.Generator, pinned=None):
    """Generator (yields None after each sub-step, for events; returns (tau, nu, A)). Stages 2 and 3: tau (Eq. 28), then nu (Eq. 29), then the online step on A (Eq. 30) from a random batch.

    With ``reseed_empty``, empty clusters first get an item each (:func:`reseed_empty`), never a pinned one."""
    if cfg.reseed_empty:
        asg = asg._replace(c1=reseed_empty(asg.c1, asg.scores.gather(1, asg.c1[:, None])[:, 0], cfg.k, pinned))
    tau = update_tau(asg.q, asg.y, asg.c1, asg.c2, tau, nu, cfg)
    yield
    nu = update_nu(asg.q, asg.y, asg.c1, asg.c2, tau, nu, cfg)
    yield
    if cfg.transform == "learned":
        n = x.shape[0]
        size = max(1, int(round(cfg.batch_fraction * n)))
        idx = torch.from_numpy(np.sort(rng.choice(n, size=size, replace=False))).to(x.device)
        target = 0.5 * (asg.y[idx] + tau[asg.c1[idx]] + nu[asg.c2[idx]])
        a_hat = yield from update_a_steps(x[idx].T, target.T, cfg.lam2, cfg.lam3, cfg.lam4)
        a = a - cfg.online_rho * (a - a_hat)
    return tau, nu, a


def kmeans_start(x, q, tau, nu, cfg, rng):
    """Fit tau, nu (Eq. 28-29) to a pixel k-means++ / Lloyd partition instead of starting from noise."""
    centers = kmeans_plus_plus(x, cfg.k, rng)
    labels = None
    for _, _, centers, labels in lloyd(x, centers, max_iter=100):
        pass
    return fit_to_partition(q, labels, tau, nu, cfg)


def fit_to_partition(q, labels, tau, nu, cfg):
    """tau, nu fitted (Eq. 28-29) to a partition of the transformed items q, with the soft threshold of q as
    the representation and each item's nu the one it overlaps most: the k-means start, and Refine's."""
    y = torch.sign(q) * (q.abs() - cfg.lam1).clamp_min(0)
    c2 = rho(y[:, None, :], nu[None]).argmax(1)
    tau = update_tau(q, y, labels, c2, tau, nu, cfg)
    nu = update_nu(q, y, labels, c2, tau, nu, cfg)
    return tau, nu


def cluster_means(stack: Stack, labels: torch.Tensor, k: int) -> np.ndarray:
    """Per-cluster mean of the input images (K, *item_shape), for display; empty clusters are zero. The stack is read
    batch by batch, each batch's rows added in item order (the sums of one whole-stack ``index_add_``)."""
    sums = torch.zeros(k, stack.dim, device=labels.device)
    for s, b in stack.batches(SCAN_BATCH):
        sums.index_add_(0, labels[s:s + len(b)], torch.from_numpy(b).to(labels.device).reshape(len(b), -1))
    counts = torch.bincount(labels, minlength=k).clamp_min(1).to(sums.dtype)
    return (sums / counts[:, None]).reshape(k, *stack.item_shape).cpu().numpy()


def batch_progress(stage, done_iters: int, total_iters: int, history: list, name: str = "iterations"):
    """Run an :func:`assignment_stage` generator, turning its (batch, batches) into Progress events in
    units of iterations x batches (so the ETA and Cancel see every batch); returns the stage's value."""
    loss = history[-1] if history else float("nan")
    while True:
        try:
            done, batches = next(stage)
        except StopIteration as stop:
            return stop.value
        yield Progress(done_iters * batches + done, max(total_iters, 1) * batches, loss, name)


@dataclass
class NTState(FittedState):
    a: np.ndarray                  # (M, N) the learned linear map
    tau: np.ndarray                # (K, M) cluster vectors
    nu: np.ndarray                 # (C_s, M) similarity vectors
    reject_threshold: np.ndarray   # best-score threshold above which an item is rejected (inf: none)


class NT(Method):
    name, title = "nt", "Nonlinear-transform clustering (min-max assignment)"
    config, state, inputs = NTConfig, NTState, ("images", "vectors")
    embeds = "representation"   # the object map: each item's NT representation
    paper = "Kostadinov et al., Clustering with Jointly Learned Nonlinear Transforms"
    caution = ("Below pixel K-means on every set measured (COIL-20 accuracy 0.50 against 0.68; the paper's 0.89 "
               "is not reproducible from its equations, docs/nt.md §7): use kmeans or pssc to find groups.")

    def train(self, stack: Stack, cfg: NTConfig, device: torch.device, seed: int):
        """Alternate the three stages of Sec. 4.2 (assignment, tau/nu, online A) for ``max_iter`` iterations."""
        rng = seed_everything(seed)
        x, a, tau, nu = initial_state(stack, cfg, device, rng)
        return (yield from self._iterate(stack, cfg, x, (a, tau, nu), rng, cfg.max_iter))

    def refine(self, stack: Stack, cfg: NTConfig, start: ClusteringResult, pinned: torch.Tensor, device: torch.device):
        """``refine_iter`` iterations of the three stages from the edited partition, pinned items kept in their cluster.

        The edit dropped A, tau and nu (the state). The partition is the warm start, as a pixel k-means partition
        is for init="kmeans": tau and nu are fitted to it (Eq. 28-29) from the fit's Gaussian start (its seed), A
        starts from that start too. (Fitting A to the saved representations instead was measured worse: they
        are sparse, not A x, and the N×N data matrix of a small set leaves A undetermined.)"""
        rng = seed_everything(int(start.config.get("seed", 0)))
        x, a, tau, nu = initial_state(stack, dataclasses.replace(cfg, init="gaussian"), device, rng)
        labels = torch.from_numpy(np.asarray(start.labels, np.int64)).to(device)
        tau, nu = fit_to_partition(x @ a.T, labels, tau, nu, cfg)
        return (yield from self._iterate(stack, cfg, x, (a, tau, nu), rng, cfg.refine_iter, pinned.to(device),
                                         "Refine: iterations"))

    def _iterate(self, stack: Stack, cfg: NTConfig, x, params, rng, iters: int, pinned=None, name: str = "iterations"):
        """``iters`` iterations of the three stages from (A, tau, nu), then the final assignment (generator: events;
        returns the result). ``pinned`` (N,): clusters the user fixed items to (-1: free)."""
        a, tau, nu = params
        history: list[float] = []
        labels = None
        t_start = time.perf_counter()
        iter_times = []
        batches = -(-x.shape[0] // cfg.batch_size)
        for it in range(1, iters + 1):
            t0 = time.perf_counter()
            stage = assignment_stage(x, a, tau, nu, cfg, pinned)                     # Stage 1
            asg, objective = yield from batch_progress(stage, it - 1, iters, history, name)
            history.append(objective)
            changed = 1.0 if labels is None else float((labels != asg.c1).float().mean())
            labels = asg.c1
            updates = update_stage(x, asg, tau, nu, a, cfg, rng, pinned)              # Stages 2 and 3
            while True:
                try:
                    next(updates)
                except StopIteration as stop:
                    tau, nu, a = stop.value
                    break
                yield Progress(it * batches, iters * batches, history[-1], name)
            iter_times.append(time.perf_counter() - t0)
            if it % 5 == 0 or it == iters:
                yield Snapshot(cluster_means(stack, labels, cfg.k))
            if cfg.tol > 0 and it > 1 and changed < cfg.tol:
                break
        asg, objective = yield from batch_progress(assignment_stage(x, a, tau, nu, cfg, pinned), 0, 1, history,
                                                   "final assignment")
        history.append(objective)
        timing = {"fit_s": time.perf_counter() - t_start, "per_iteration_s": float(np.mean(iter_times)),
                  "first_iteration_s": iter_times[0], "last_iteration_s": iter_times[-1]}
        return self.final_result(stack, cfg, asg, (a, tau, nu), history, timing)

    def final_result(self, stack: Stack, cfg: NTConfig, asg: Assignment, params, history: list, timing: dict) -> ClusteringResult:
        """The result of a fit from its final assignment and its fitted (A, tau, nu), with the rejections."""
        a, tau, nu = params
        best = asg.scores.gather(1, asg.c1[:, None])[:, 0]
        threshold = float(torch.quantile(best.double(), 1 - cfg.reject_quantile)) if cfg.reject_quantile > 0 else math.inf
        rejected = (best > threshold).cpu().numpy() if cfg.reject_quantile > 0 else None
        state = NTState(a.cpu().numpy(), tau.cpu().numpy(), nu.cpu().numpy(), np.array(threshold))
        return self.result(
            cfg, state, labels=asg.c1.cpu().numpy(), scores=asg.scores.cpu().numpy(),
            prototypes=cluster_means(stack, asg.c1, cfg.k), history=history, rejected=rejected,
            params={"representation": asg.y.cpu().numpy(), "similarity_index": asg.c2.cpu().numpy()},
            extras={"condition_number": np.array(condition_number(a)), "mutual_coherence": np.array(coherence(a)),
                    "m": np.array(a.shape[0])},
            timing=timing)

    def predict(self, result: ClusteringResult, stack: Stack, device: torch.device, batch_size: int | None = None) -> ClusteringResult:
        """Cluster and NT representation of new items by the fit's assignment rule with the fitted A, tau, nu."""
        state = result.state
        a = torch.from_numpy(state.a).to(device)
        check_same_size(stack, int(np.prod(np.shape(result.prototypes)[1:])))
        tau, nu = torch.from_numpy(state.tau).to(device), torch.from_numpy(state.nu).to(device)
        cfg = self.config_of(result)
        if batch_size is not None:
            cfg.batch_size = batch_size
        mats = pair_mats(tau, nu, cfg.lam0)
        out = Assignments(stack.n)
        threshold = float(state.reject_threshold)
        for s, b in stack.batches(SCAN_BATCH):
            q = standardise(nt_items(b, reduction(cfg, stack), device)) @ a.T
            c1, c2, y, scores = assign_all(q, tau, nu, cfg, mats)
            best = scores.gather(1, c1[:, None])[:, 0]
            out.write(s, {"labels": c1, "scores": scores, "params/representation": y, "params/similarity_index": c2,
                          "rejected": best > threshold if math.isfinite(threshold) else None})
        return self.predicted(result, **out.result_fields())


register(NT())
