"""PSSC in a shared frame: rigid-invariant K-means poses every item, then scattering + spectral clustering.

Scattering features (PSSC) are stable to small deformations but not to rotations: on MNIST-test turned by
uniform random angles PSSC falls from 0.97 to 0.28 ACC. Here a rigid stage first brings every item into
one frame: rigid-invariant K-means (``rigid_kmeans``: exhaustive angle × shift search, optional flip) poses
each item onto its prototype, the prototypes are posed onto one another (``transforms.rigid.common_frame``,
a spanning tree of nearest prototypes), and each item is resampled at the composed pose. PSSC then
clusters the posed items with all of its own options. The rigid stage's K is ``frames`` (default K).

Prediction poses new items the same way (onto the fitted rigid prototypes, then the shared frame), then
assigns them with PSSC's own predict.
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

import numpy as np
import torch

from ..core.stack import Stack, StackImages, from_nchw
from ..core.validation import check_images
from ..kernels.pssc import PSSCConfig, PSSCState, check_config, fit_steps, predict_fields, refine_steps
from ..kernels.rigid_lloyd import RigidLloydConfig, aligned_stack, rigid_kmeans_steps, rigid_match
from ..result import ClusteringResult
from ..transforms.rigid import common_frame, compose, shift_pixels
from .base import Method, param, register, seed_everything


@dataclass
class RigidPSSCConfig(PSSCConfig):
    # not "essential": PSSC's three essentials fill the form's front (at most three, tests/test_napari.py)
    flip: bool = param(False, "Mirror images count as the same (cells in 2-D have no handedness unless you say so)")
    frames: int = param(0, "Prototypes of the rigid stage (0: K); each item is posed onto its own, the prototypes onto one another", low=0)
    rigid_angles: int = param(0, "Angles the rigid stage tries over 360° (0: from the crop size)", low=0)
    rigid_iter: int = param(20, "Most Lloyd iterations of the rigid stage", low=1)
    max_shift: float = param(0.15, "Largest shift the rigid stage searches, as a fraction of the half image side", low=0.0, high=1.0)


@dataclass
class RigidPSSCState(PSSCState):
    rigid_centers: np.ndarray | None = None   # (K', C, H, W) prototypes of the rigid stage
    rigid_frames: np.ndarray | None = None    # (K', 6) their poses into the shared frame


#: Items the prediction's rigid search compares at once (``transforms.rigid.rigid_search``'s own block).
PREDICT_SEARCH_BLOCK = 256


#: What PSSC after the rigid stage costs (scattering, PCA, U-SPEC, k-means, the object map), counted as searches of every
#: item against one prototype at every angle (a rigid Lloyd iteration is K of them), for the rigid stage's ETA. Both sides
#: grow with the items; measured: the PSSC stages took as long as 12.4 rigid Lloyd iterations of K = 10 on 2,000 MNIST
#: digits (benchmarks/eta.py).
PSSC_AS_SEARCHES = 120.0


def _rigid_cfg(cfg: RigidPSSCConfig, n: int) -> RigidLloydConfig:
    """The rigid stage: rigid k-means with ``frames`` (or K, at most N) prototypes."""
    return RigidLloydConfig(k=min(cfg.frames or cfg.k, n), flip=cfg.flip, angles=cfg.rigid_angles, max_shift=cfg.max_shift,
                            max_iter=cfg.rigid_iter)


def _posed(stack: Stack, x, theta: torch.Tensor) -> Stack:
    """The items resampled at their poses, as a stack already in [0, 1]."""
    out = aligned_stack(x, theta)
    return Stack(np.ascontiguousarray(from_nchw(out, stack.channels > 1).cpu().numpy()), 0.0, 1.0)


class RigidPSSC(Method):
    name, title = "rigid-pssc", "PSSC on rigidly posed items (rotation/flip-invariant)"
    config, state, inputs = RigidPSSCConfig, RigidPSSCState, ("images",)
    embeds = "spectral"   # the object map: each item's spectral coordinates
    paper = "exhaustive in-plane pose search (cryo-EM 2D classification) + Villar-Corrales & Morgenshtern's PSSC"
    caution = "For items with no preferred orientation; where orientation is part of the kind, use pssc"

    def _frame(self, stack: Stack, cfg: RigidPSSCConfig, device: torch.device, seed: int):
        """Generator: the rigid stage (``kernels.rigid_lloyd``, the stack read block by block); returns (posed stack,
        rigid centres, frames)."""
        check_images(stack, self.name)
        x = StackImages(stack, device)
        rcfg = _rigid_cfg(cfg, stack.n)
        mu, match, labels, _, _ = yield from rigid_kmeans_steps(x, rcfg, seed_everything(seed), stack.channels > 1,
                                                                later=PSSC_AS_SEARCHES / rcfg.k)
        frames = common_frame(mu, n_angles=rcfg.angles or None, flip=cfg.flip, max_shift=shift_pixels(rcfg.max_shift, x.shape[-2:]))
        own = match.theta[torch.arange(stack.n, device=labels.device), labels]
        return _posed(stack, x, compose(own, frames[labels])), mu, frames

    def train(self, stack: Stack, cfg: RigidPSSCConfig, device: torch.device, seed: int):
        start = time.perf_counter()
        posed, mu, frames = yield from self._frame(stack, cfg, device, seed)
        rigid_s = time.perf_counter() - start
        check_config(cfg, posed)
        state, fields = yield from fit_steps(posed, cfg, device, seed, seed_everything(seed))
        return self._with_frames(cfg, state, fields, posed, mu, frames, rigid_s)

    def refine(self, stack: Stack, cfg: RigidPSSCConfig, start: ClusteringResult, pinned: torch.Tensor, device: torch.device):
        seed = int(start.config.get("seed", 0))
        t0 = time.perf_counter()
        posed, mu, frames = yield from self._frame(stack, cfg, device, seed)
        check_config(cfg, posed)
        state, fields = yield from refine_steps(posed, cfg, start.labels, pinned, device, seed, seed_everything(seed))
        return self._with_frames(cfg, state, fields, posed, mu, frames, time.perf_counter() - t0)

    def _with_frames(self, cfg, state: PSSCState, fields: dict, posed: Stack, mu, frames, rigid_s: float) -> ClusteringResult:
        """The result of PSSC on the posed items, with the rigid stage's prototypes and frames in its state."""
        state = RigidPSSCState(**{f.name: getattr(state, f.name) for f in dataclasses.fields(PSSCState)},
                               rigid_centers=mu.cpu().numpy(), rigid_frames=frames.cpu().numpy())
        fields["timing"] = {**fields["timing"], "rigid_s": rigid_s}
        return self.result(cfg, state, aligned=posed.source, aligned_kind="item-on-prototype", **fields)

    def predict(self, result: ClusteringResult, stack: Stack, device: torch.device, batch_size: int | None = None) -> ClusteringResult:
        """New items posed onto the fitted rigid prototypes, then into the shared frame, then assigned by PSSC."""
        cfg, state = self.config_of(result), result.state
        x = StackImages(stack, device)
        mu = torch.from_numpy(np.asarray(state.rigid_centers, np.float32)).to(device)
        frames = torch.from_numpy(np.asarray(state.rigid_frames, np.float32)).to(device)
        rcfg = dataclasses.replace(_rigid_cfg(cfg, stack.n), batch_size=PREDICT_SEARCH_BLOCK)
        match = rigid_match(x, mu, rcfg)
        labels = match.score.argmin(1)
        own = match.theta[torch.arange(stack.n, device=labels.device), labels]
        posed = _posed(stack, x, compose(own, frames[labels]))
        extras, fields = predict_fields(state, cfg, posed, device, batch_size)
        out = self.predicted(result, extras=extras, **fields)
        out.aligned, out.aligned_kind = posed.source, "item-on-prototype"
        return out


register(RigidPSSC())
