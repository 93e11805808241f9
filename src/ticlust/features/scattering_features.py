"""PSSC's stage 1: the scattering features of an image stack, as pssc and rigid-pssc cluster them.

Each image is zero-padded (to at least ``pad_to``, then a multiple of 2^J), scattered a batch at a time
(``features.scattering``: kymatio's filters, or kymatio itself), optionally combined over orientations and rings
(``features.invariant_scattering``) and each path divided by its largest spatial norm over the data set
(authors' code); the features are cached on disk by content hash, so that a re-run with another K or POC skips
this. ``cfg`` is a PSSC config (``kernels.pssc.PSSCConfig``).
"""
from __future__ import annotations

import hashlib
import time
from pathlib import Path

import numpy as np
import torch

from ..core.stack import Stack
from ..events import Progress
from .invariant_scattering import invariant_features, ring_weights
from .scattering import fast_scattering, kymatio_scattering, n_paths

CACHE_VERSION = "pssc-scattering-v1"
FIT_BLOCK = 256   # images a fit reads, scatters (``scattering_batch`` at a time) and reports as one progress step


def padded_shape(h: int, w: int, pad_to: int, scales: int) -> tuple[int, int]:
    """At least pad_to, and a multiple of 2^J."""
    step = 2 ** scales
    return tuple(-(-max(s, pad_to) // step) * step for s in (h, w))


class Scatterer:
    """Zero-pads a batch of (B, H, W[, C]) images and returns flat scattering features (B, C·P·h·w)."""

    def __init__(self, item_shape: tuple[int, ...], cfg, device: torch.device):
        h, w = item_shape[:2]
        self.channels = item_shape[2] if len(item_shape) == 3 else 1
        self.hp, self.wp = padded_shape(h, w, cfg.pad_to, cfg.scales)
        self.top, self.left = (self.hp - h) // 2, (self.wp - w) // 2
        self.h, self.w = h, w
        self.device = device
        if cfg.scattering_backend == "kymatio":
            self.op = kymatio_scattering((self.hp, self.wp), cfg.scales, cfg.angles, cfg.order, device)
        else:
            self.op = fast_scattering((self.hp, self.wp), cfg.scales, cfg.angles, cfg.order, device)
        self.paths = n_paths(cfg.scales, cfg.angles, cfg.order)
        self.spatial = (self.hp // 2 ** cfg.scales) * (self.wp // 2 ** cfg.scales)
        self.spatial_side = min(self.hp, self.wp) // 2 ** cfg.scales
        self.invariant = (cfg.scales, cfg.angles, cfg.order, max(1, self.spatial_side // 2)) if cfg.rotation_invariant else None
        if self.invariant:                                 # rotation-invariant: paths × rings (invariant_scattering.py)
            self.spatial = ring_weights(self.hp // 2 ** cfg.scales, self.wp // 2 ** cfg.scales, self.invariant[-1]).shape[0]
        self.dim = self.channels * self.paths * self.spatial

    @torch.no_grad()
    def __call__(self, batch: np.ndarray) -> torch.Tensor:
        x = torch.as_tensor(np.ascontiguousarray(batch), dtype=torch.float32).to(self.device)
        if self.channels > 1:                              # scatter each colour channel separately
            x = x.permute(0, 3, 1, 2).reshape(-1, self.h, self.w)
        padded = torch.zeros((x.shape[0], self.hp, self.wp), dtype=x.dtype, device=x.device)
        padded[:, self.top:self.top + self.h, self.left:self.left + self.w] = x
        s = self.op(padded)
        if self.invariant:
            s = invariant_features(s, *self.invariant)
        return s.reshape(batch.shape[0], self.dim)


def feature_key(stack: Stack, cfg, batch_size: int = 4096) -> str:
    """Content hash of the normalised input and every parameter the scattering features depend on."""
    h = hashlib.blake2b(digest_size=20)
    h.update(repr((CACHE_VERSION, stack.item_shape, cfg.scales, cfg.angles, cfg.order, cfg.pad_to)).encode())
    if cfg.rotation_invariant:
        h.update(b"rotation-invariant")
    for _, b in stack.batches(batch_size):
        h.update(np.ascontiguousarray(b, dtype=np.float32).tobytes())
    return h.hexdigest()


def scattering_batch(cfg, op: "Scatterer") -> int:
    """Images per scattering step: ``batch_size`` up to 32×32 padded pixels, proportionally fewer for larger
    images. 32 on the CPU: a step's wavelet maps stay in cache while OpenMP's per-step cost stays small (quiet
    2-core machine, 2 threads, MNIST predict: 8 / 32 / 64 per step 2,274 / 2,490 / 2,318 images/s with OpenMP's
    default waiting, 794 / 1,414 / 1,589 with OMP_WAIT_POLICY=PASSIVE); a GPU gets 8× as many per kernel launch."""
    area = op.hp * op.wp
    per_step = cfg.batch_size * (1 if op.device.type == "cpu" else 8)
    return max(1, min(per_step, per_step * 1024 // area))


def scattered(op: "Scatterer", batch: np.ndarray, step: int) -> torch.Tensor:
    """The features of a batch, scattered ``step`` images at a time (``scattering_batch``)."""
    return torch.cat([op(batch[i:i + step]) for i in range(0, len(batch), step)])


def scattering_features(stack: Stack, cfg, device: torch.device, timing: dict):
    """Generator: yields Progress while scattering; returns the (N, F) float32 features (cached on disk)."""
    path = None
    if cfg.cache_dir:
        start = time.perf_counter()
        path = Path(cfg.cache_dir) / f"{feature_key(stack, cfg)}.npy"
        timing["hash_s"] = time.perf_counter() - start
        if path.is_file():
            try:
                feats = np.load(path)
                if feats.shape[0] == stack.n:
                    timing["cache_hit"] = True
                    return feats
            except (OSError, ValueError):
                pass                                        # unreadable cache entry: recompute it
    start = time.perf_counter()
    op = Scatterer(stack.item_shape, cfg, device)
    feats = np.empty((stack.n, op.dim), dtype=np.float32)
    step = scattering_batch(cfg, op)
    total = -(-stack.n // FIT_BLOCK)
    for i, (s, batch) in enumerate(stack.batches(FIT_BLOCK)):
        feats[s:s + len(batch)] = scattered(op, batch, step).cpu().numpy()
        yield Progress(i + 1, total, stage="scattering")
    timing["scattering_s"] = time.perf_counter() - start
    timing["cache_hit"] = False
    if path is not None:
        _cache(path, feats)
    return feats


def _cache(path: Path, feats: np.ndarray) -> None:
    """Keep the features in the cache folder, written whole (a read-only cache only costs speed)."""
    from ..core.atomic import write_atomic

    def write(tmp: Path) -> None:
        with open(tmp, "wb") as fh:                         # a file object: numpy adds no .npy suffix
            np.save(fh, feats)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, write)
    except OSError:
        pass


def path_scales(feats: np.ndarray, groups: int, spatial: int) -> np.ndarray:
    """Largest spatial L2 norm of each scattering path over the data set, (groups,)."""
    out = np.zeros(groups, dtype=np.float32)
    for s in range(0, feats.shape[0], 8192):
        block = feats[s:s + 8192].reshape(-1, groups, spatial)
        np.maximum(out, np.sqrt((block.astype(np.float32) ** 2).sum(-1)).max(0), out=out)
    return np.where(out > 0, out, 1.0).astype(np.float32)


def feature_steps(stack: Stack, cfg, device: torch.device, timing: dict):
    """Generator, stage 1: the (N, F) features to cluster; returns them and the per-path divisors (or None).

    With ``path_norm`` the scattering features are divided by each path's largest norm (authors' code),
    in place so that a large data set is not held twice.
    """
    if cfg.features != "scattering":   # the ablation's features are the pixels, held whole like scattering's for the PCA
        return stack.numpy().reshape(stack.n, -1), None
    feats = yield from scattering_features(stack, cfg, device, timing)
    if not cfg.path_norm:
        return feats, None
    op_groups = Scatterer(stack.item_shape, cfg, torch.device("cpu"))
    scales = path_scales(feats, op_groups.channels * op_groups.paths, op_groups.spatial)
    if not feats.flags.writeable:
        feats = np.array(feats)
    feats.reshape(stack.n, len(scales), -1)[...] /= scales[None, :, None]     # in place: no second copy
    return feats, scales
