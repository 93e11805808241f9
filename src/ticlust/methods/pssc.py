"""Projected-Scattering Spectral Clustering (Villar-Corrales & Morgenshtern, paper 001): scattering features, PCA and
POC, U-SPEC spectral clustering. The pipeline, its config and fitted state are ``kernels.pssc`` (rigid-pssc runs it
too, on rigidly posed items); see there and docs/pssc.md for every stage and choice.
"""
from __future__ import annotations

import torch

from ..core.stack import Stack
from ..kernels.pssc import PSSCConfig, PSSCState, check_config, fit_steps, predict_fields, refine_steps
from ..result import ClusteringResult
from .base import Method, register, seed_everything


class PSSC(Method):
    name, title = "pssc", "PSSC: scattering + POC + U-SPEC spectral clustering"
    config, state, inputs = PSSCConfig, PSSCState, ("images",)
    embeds = "spectral"   # the object map: each item's spectral coordinates
    paper = "Villar-Corrales & Morgenshtern, Scattering Transform Based Image Clustering"

    def train(self, stack: Stack, cfg: PSSCConfig, device: torch.device, seed: int):
        """Scattering features → PCA + POC → U-SPEC (or k-means) → k-means restarts on the embedding."""
        check_config(cfg, stack)
        state, fields = yield from fit_steps(stack, cfg, device, seed, seed_everything(seed))
        return self.result(cfg, state, **fields)

    def refine(self, stack: Stack, cfg: PSSCConfig, start: ClusteringResult, pinned: torch.Tensor, device: torch.device):
        """k-means on the embedding from the centres of the edited partition, the pinned items kept where the user
        put them. The embedding is rebuilt with the fit's seed (the fit's own when K is unchanged; the edit drops
        the state that held it)."""
        check_config(cfg, stack)
        seed = int(start.config.get("seed", 0))
        state, fields = yield from refine_steps(stack, cfg, start.labels, pinned, device, seed, seed_everything(seed))
        return self.result(cfg, state, **fields)

    def predict(self, result: ClusteringResult, stack: Stack, device: torch.device, batch_size: int | None = None) -> ClusteringResult:
        """Assign new images: features → stored PCA/POC projection → (U-SPEC) nearest representatives →
        transfer-cut embedding extension → nearest embedding centre (``kernels.pssc.predict_fields``)."""
        extras, fields = predict_fields(result.state, self.config_of(result), stack, device, batch_size)
        return self.predicted(result, extras=extras, **fields)


register(PSSC())
