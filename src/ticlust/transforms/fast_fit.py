"""The fit's fast alignment: Levenberg-Marquardt instead of Adam in the Lloyd E-step of ai-kmeans and st-kmeans.

A Lloyd iteration improves every (item, centroid) warp from the last iteration's (the warm start) in the two
stages of ``Aligner.align``: the affine map on the low-passed images (from each pair's best turn for rigid and
similarity warps), then at full resolution the affine map (no TPS) or the TPS displacements with the affine map
fixed. Here each stage takes a few ``Aligner.gauss_newton`` iterations (what predict's fast path uses) instead of
tens of Adam steps: the warp's grid is linear in its parameters, so one sampling of an item and its slopes gives
a pair's Gauss-Newton step, which travels in one iteration what Adam takes many small steps for. The meaning of
the E-step is kept: every pair ends with the best warp it has seen under the current centroids (its start
included; between the stages, the best of the old affine map and the new one, with the old or no TPS
displacements, as ``Aligner.align``), so the Lloyd distortion stays monotone and the repair move prices the same
warps. The sampling is the lean one (``Aligner.lean``): equal to the elementwise form up to float roundoff.
"""
from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass

import torch

from .align import LM_DAMPING, Aligner, Alignments, Pyramid, Schedule, lower

#: Levenberg-Marquardt iterations per Lloyd iteration, warm-started: (low-pass affine stage, full-resolution affine
#: stage without a TPS, TPS stage); predict's counts. With them and FIT_CANDIDATES the fit's ACC on MNIST (2,000
#: test digits, K = 10), Non-rigid MNIST, the glyphs and generated nuclei is the Adam fit's or better
#: (benchmarks/results/fit_speed.md); on MNIST, seed 0, 2 TPS iterations or 5 candidates moved ST's ACC by < 0.01.
FIT_ITERATIONS = (2, 2, 3)
#: The same from a Lloyd run's second iteration on (``warm_schedule``), when every pair starts from the warp it ended
#: the last iteration with: one iteration of each affine stage, each Lloyd iteration then carrying on from the last
#: one's pose. On 2,000 MNIST digits ST's fit (seed 0) took 27 % less CPU at the same ACC (0.871 against 0.872); the
#: nuclei's 2-iteration fits 9 % less (benchmarks/results/fit_speed.md).
FIT_WARM_ITERATIONS = (1, 1, 3)
#: Centroids per item whose pairs go through the full-resolution stage, the closest after the low-pass stage: with
#: all 10 on MNIST, ST's fit took twice the time (149 against 70 CPU s, ACC 0.8845 against 0.8715, seed 0).
FIT_CANDIDATES = 3
#: The TPS stage's starting Levenberg-Marquardt damping, in a fit and in predict: its least-squares optimum bends an
#: image onto wrong centroids too (damping 0.01 in predict: ACC 0.83 vs 0.888 exact on MNIST); damped steps bend it
#: about as far as the exact path's Adam.
TPS_DAMPING = 1.0


@dataclass
class GaussNewtonSchedule(Schedule):
    """A :class:`Schedule` whose stages run Levenberg-Marquardt: ``low`` iterations of the low-pass affine stage
    (none where the config has no pre-alignment: ``affine_steps`` 0), ``affine`` of the full-resolution stage on
    the affine maps (no TPS), ``bend`` of the TPS stage. The Adam step counts stay: each stage advances the
    progress ticker by its Adam steps, so a fit's progress runs over the same total on either path."""

    low: int = FIT_ITERATIONS[0]
    affine: int = FIT_ITERATIONS[1]
    bend: int = FIT_ITERATIONS[2]
    candidates: int = FIT_CANDIDATES


def fit_schedule(cfg, ticker=None) -> Schedule:
    """The Lloyd E-step's schedule for the config's ``fit_align``: Adam's (``Schedule.of``) or Gauss-Newton's."""
    adam = Schedule.of(cfg, ticker)
    if cfg.fit_align == "adam":
        return adam
    return GaussNewtonSchedule(**{f.name: getattr(adam, f.name) for f in dataclasses.fields(adam)})


def warm_schedule(schedule: Schedule) -> Schedule:
    """The schedule of a Lloyd iteration after a run's first: Gauss-Newton's stages take FIT_WARM_ITERATIONS (at most
    their own counts); Adam's schedule is returned as it is."""
    if not isinstance(schedule, GaussNewtonSchedule):
        return schedule
    low, affine, bend = FIT_WARM_ITERATIONS
    return dataclasses.replace(schedule, low=min(schedule.low, low), affine=min(schedule.affine, affine),
                               bend=min(schedule.bend, bend))


def align_pairs(aligner: Aligner, x: Pyramid, mu: Pyramid, start: Alignments, schedule: Schedule):
    """The (B, K) alignments of items x onto centroids mu improved from ``start`` (generator; returns Alignments
    with their losses, never worse per pair than ``start``): ``Aligner.align`` (Adam) for a plain Schedule, the
    same stages by Levenberg-Marquardt for a :class:`GaussNewtonSchedule`."""
    if not isinstance(schedule, GaussNewtonSchedule):
        return (yield from aligner.align(x, mu, start, schedule))
    lean = _lean(aligner)
    with torch.no_grad():
        best = Alignments(start.theta, start.nu, lean.pair_losses(x.full, mu.full, start))
    if schedule.affine_steps > 0 and schedule.low > 0:
        best = pre_aligned(lean, x, mu, best, schedule.low)
        yield from _ticks(schedule, schedule.affine_steps, "affine pre-alignment", best)
    best = refined(lean, x.full, mu.full, best, schedule)
    yield from _ticks(schedule, schedule.steps, "TPS alignment" if aligner.landmarks else "affine alignment", best)
    return best


@torch.no_grad()
def pre_aligned(aligner: Aligner, x: Pyramid, mu: Pyramid, best: Alignments, iterations: int) -> Alignments:
    """The low-pass affine stage: every pair's affine map from its best turn (``Aligner.turned``) improved by
    ``iterations`` of Levenberg-Marquardt on the low-passed images; each pair then keeps whichever of (its
    affine map, its ν), (the new map, its ν) and (the new map, ν = 0) costs least at full resolution."""
    turned = Alignments(aligner.turned(x, mu, best.theta))
    theta = aligner.gauss_newton(x.low, mu.low, turned, iterations, low=True).theta
    candidates = [best.nu] + ([torch.zeros_like(best.nu)] if best.nu is not None else [])
    for nu in candidates:
        trial = Alignments(theta, nu, aligner.pair_losses(x.full, mu.full, Alignments(theta, nu)))
        best = lower(trial, best)
    return best


@torch.no_grad()
def refined(aligner: Aligner, x: torch.Tensor, mu: torch.Tensor, best: Alignments,
            schedule: GaussNewtonSchedule) -> Alignments:
    """The full-resolution stage on each item's ``schedule.candidates`` cheapest pairs (every pair with K or fewer
    centroids): the affine maps, or with a TPS the landmark displacements (affine maps fixed), by
    Levenberg-Marquardt from ``best``. The other pairs keep ``best``: their warps and losses at these centroids."""
    tps = aligner.landmarks is not None
    iterations = schedule.bend if tps else schedule.affine
    if not iterations:
        return best
    damping = TPS_DAMPING if tps else LM_DAMPING
    if schedule.candidates >= mu.shape[0]:
        return aligner.gauss_newton(x, mu, best, iterations, tps=tps, damping=damping)
    pick = best.losses.topk(schedule.candidates, dim=1, largest=False).indices   # (B, m)
    part = aligner.gauss_newton(x, mu[pick], best.take(pick), iterations, tps=tps, damping=damping)
    out = Alignments(best.theta.clone(), None if best.nu is None else best.nu.clone(), best.losses.clone())
    out.put(pick, part)
    return out


def _ticks(schedule: Schedule, steps: int, stage: str, best: Alignments):
    """One Progress for a stage done, the ticker advanced by the stage's Adam steps (none without a ticker)."""
    if schedule.ticker is not None and steps > 0:
        schedule.ticker.step += steps - 1
        yield schedule.ticker.tick(stage, float(best.losses.min(1).values.mean()))


def _lean(aligner: Aligner) -> Aligner:
    """The aligner sampling the lean way (one grid product, each item sampled once for all its pairs): the same
    warps up to float roundoff, several times cheaper for many pairs."""
    if aligner.lean:
        return aligner
    lean = copy.copy(aligner)
    lean.lean = True
    return lean
