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

from ..result import ClusteringResult
from ..core.stack import Stack, from_nchw, to_nchw
from ..core.validation import check_images
from ..transforms.rigid import aligned_items, common_frame, compose, rigid_search
from .base import param, register, seed_everything
from .pssc import PSSC, PSSCConfig, PSSCState
from .rigid_kmeans import RIGID_KMEANS, RigidKMeansConfig, _window


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


def _rigid_cfg(cfg: RigidPSSCConfig) -> RigidKMeansConfig:
    return RigidKMeansConfig(k=cfg.frames or cfg.k, flip=cfg.flip, angles=cfg.rigid_angles, max_shift=cfg.max_shift, max_iter=cfg.rigid_iter)


def _posed(stack: Stack, x: torch.Tensor, theta: torch.Tensor) -> Stack:
    """The items resampled at their poses, as a stack already in [0, 1]."""
    out = torch.cat([aligned_items(x[s:s + 2048], theta[s:s + 2048]) for s in range(0, x.shape[0], 2048)])
    return Stack(np.ascontiguousarray(from_nchw(out, stack.channels > 1).cpu().numpy()), 0.0, 1.0)


class RigidPSSC(PSSC):
    name, title = "rigid-pssc", "PSSC on rigidly posed items (rotation/flip-invariant)"
    config, state = RigidPSSCConfig, RigidPSSCState
    paper = "exhaustive in-plane pose search (cryo-EM 2D classification) + Villar-Corrales & Morgenshtern's PSSC"
    caution = "For items with no preferred orientation; where orientation is part of the kind, use pssc"

    def _frame(self, stack: Stack, cfg: RigidPSSCConfig, device: torch.device, seed: int):
        """Generator: the rigid stage; returns (posed stack, rigid centres, frames)."""
        check_images(stack, self.name)
        x = to_nchw(stack.tensor(device))
        rcfg = _rigid_cfg(cfg)
        rigid = yield from RIGID_KMEANS.train(stack, rcfg, device, seed)
        mu = torch.from_numpy(rigid.state.centers).to(device)
        frames = common_frame(mu, n_angles=rcfg.angles or None, flip=cfg.flip, max_shift=_window(rcfg, x.shape[-2:]))
        labels = torch.from_numpy(rigid.labels).to(device)
        own = torch.from_numpy(rigid.params["pair_theta"]).to(device)[torch.arange(stack.n, device=device), labels]
        return _posed(stack, x, compose(own, frames[labels])), mu, frames

    def train(self, stack: Stack, cfg: RigidPSSCConfig, device: torch.device, seed: int):
        start = time.perf_counter()
        posed, mu, frames = yield from self._frame(stack, cfg, device, seed)
        rigid_s = time.perf_counter() - start
        result = yield from super().train(posed, cfg, device, seed)
        return self._with_frames(result, posed, mu, frames, rigid_s)

    def refine(self, stack: Stack, cfg: RigidPSSCConfig, start: ClusteringResult, pinned: torch.Tensor, device: torch.device):
        seed = int(start.config.get("seed", 0))
        seed_everything(seed)
        t0 = time.perf_counter()
        posed, mu, frames = yield from self._frame(stack, cfg, device, seed)
        result = yield from super().refine(posed, cfg, start, pinned, device)
        return self._with_frames(result, posed, mu, frames, time.perf_counter() - t0)

    def _with_frames(self, result: ClusteringResult, posed: Stack, mu, frames, rigid_s: float) -> ClusteringResult:
        state = result.state
        result.state = RigidPSSCState(**{f.name: getattr(state, f.name) for f in dataclasses.fields(PSSCState)},
                                      rigid_centers=mu.cpu().numpy(), rigid_frames=frames.cpu().numpy())
        result.aligned, result.aligned_kind = posed.numpy(), "item-on-prototype"
        result.timing = {**result.timing, "rigid_s": rigid_s}
        return result

    def predict(self, result: ClusteringResult, stack: Stack, device: torch.device, batch_size: int | None = None) -> ClusteringResult:
        cfg, state = self.config_of(result), result.state
        x = to_nchw(stack.tensor(device))
        mu = torch.from_numpy(np.asarray(state.rigid_centers, np.float32)).to(device)
        frames = torch.from_numpy(np.asarray(state.rigid_frames, np.float32)).to(device)
        rcfg = _rigid_cfg(cfg)
        match = rigid_search(x, mu, n_angles=rcfg.angles or None, flip=cfg.flip, max_shift=_window(rcfg, x.shape[-2:]))
        labels = match.score.argmin(1)
        own = match.theta[torch.arange(stack.n, device=device), labels]
        posed = _posed(stack, x, compose(own, frames[labels]))
        out = super().predict(result, posed, device, batch_size)
        out.aligned, out.aligned_kind = posed.numpy(), "item-on-prototype"
        return out


register(RigidPSSC())
