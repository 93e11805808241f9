"""A validated stack of items, read lazily and normalised batch by batch (NumPy / memmap / dask)."""
from __future__ import annotations

from typing import Iterator

import numpy as np
import torch

SCAN_BATCH = 4096  # items read at once when scanning or loading a lazy stack
#: Per-item pictures (a result's ``aligned`` and ``grids``, ST/AI's per-pair warps) are kept for every item
#: by default only while N×H×W[×C] float32 fits in this (16,384 items of 32×32); above it, and whenever
#: ``pictures`` is False, they are computed on demand for the items looked at.
PICTURE_BYTES = 64 * 2**20


class Stack:
    """A validated stack of N items (images H×W, multichannel images H×W×C, or vectors D), read lazily.

    Items are normalised to float32 in [0, 1] by the stack's global minimum and maximum, computed
    in one streaming pass, so uint8 / uint16 / float data all land on the same scale without
    overflow. The source array is never modified and never loaded whole unless asked for.
    """

    def __init__(self, source, lo: float, hi: float, pictures: bool | None = None):
        self.source = source
        self.lo = float(lo)
        self.hi = float(hi)
        self.pictures = pictures    # keep per-item pictures for every item: True, False, or None (by PICTURE_BYTES)

    @property
    def n(self) -> int:
        return int(self.source.shape[0])

    @property
    def item_shape(self) -> tuple[int, ...]:
        return tuple(int(s) for s in self.source.shape[1:])

    @property
    def is_image(self) -> bool:
        return len(self.item_shape) >= 2

    @property
    def channels(self) -> int:
        return self.item_shape[2] if len(self.item_shape) == 3 else 1

    @property
    def dim(self) -> int:
        return int(np.prod(self.item_shape))

    def wants_pictures(self) -> bool:
        """Whether a method keeps per-item pictures (aligned images, grids, pair warps) for all N items."""
        return self.pictures if self.pictures is not None else self.n * self.dim * 4 <= PICTURE_BYTES

    def like(self, source) -> "Stack":
        """Another stack of items ``source`` with this one's normalisation and picture request."""
        return Stack(source, self.lo, self.hi, self.pictures)

    def blocks(self, size: int) -> Iterator[tuple[int, "Stack"]]:
        """(start, stack of items start:start+size) covering every item in order: the batch interface that
        methods read a stack through. A block is a view of the source, read when used; the whole stack
        never is (a stack of at most ``size`` items is its own one block)."""
        if self.n <= size:
            yield 0, self
            return
        for start in range(0, self.n, size):
            stop = min(start + size, self.n)
            yield start, self.like(self.source[start:stop])

    def batch(self, start: int, stop: int) -> np.ndarray:
        """Items ``start:stop`` as normalised float32."""
        return self._normalised(np.asarray(self.source[start:stop]))

    def take(self, index) -> np.ndarray:
        """The items at ``index`` (item numbers, in that order) as normalised float32: a random mini-batch
        read from the source, as ``batch`` reads a slice."""
        return self._normalised(np.asarray(self.source[np.asarray(index).reshape(-1)]))

    def _normalised(self, raw: np.ndarray) -> np.ndarray:
        if np.can_cast(raw.dtype, np.float32):
            raw = raw.astype(np.float32, copy=False)
            return (raw - np.float32(self.lo)) / np.float32(self.hi - self.lo)
        # float64 / wide integers: scale before rounding to float32, so that values below float32's range
        # (1e-300) or differences finer than its precision (1 + 1e-12) keep their spread instead of
        # collapsing to one value (or to 0/0)
        return ((raw.astype(np.float64, copy=False) - self.lo) / (self.hi - self.lo)).astype(np.float32)

    def batches(self, batch_size: int) -> Iterator[tuple[int, np.ndarray]]:
        for start in range(0, self.n, batch_size):
            yield start, self.batch(start, min(start + batch_size, self.n))

    def numpy(self) -> np.ndarray:
        """All items as one normalised float32 array, read now and not kept: only for the few methods that
        truly need the whole stack at once (docs/architecture.md lists them); the rest read batches."""
        return np.concatenate([b for _, b in self.batches(SCAN_BATCH)], axis=0)

    def tensor(self, device: torch.device | str = "cpu", flat: bool = False) -> torch.Tensor:
        x = torch.from_numpy(self.numpy()).to(device)
        return x.reshape(self.n, -1) if flat else x

    def subset(self, index) -> "Stack":
        """The items at ``index`` (read now), keeping this stack's normalisation."""
        return self.like(np.asarray(self.source[np.asarray(index)]))


class StackImages:
    """A stack's images as (N, C, H, W) float32 tensors on ``device``, read and scaled when indexed (a slice or
    item numbers): what a fit holds instead of the whole stack as one tensor. It indexes like that tensor
    (``x[s]``, ``x.shape``, ``len(x)``), so a fit's loops take either."""

    def __init__(self, stack: Stack, device):
        self.stack, self.device = stack, device
        self.shape = (stack.n, stack.channels, *stack.item_shape[:2])

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, index) -> torch.Tensor:
        if isinstance(index, slice):
            start, stop, _ = index.indices(self.shape[0])
            raw = self.stack.batch(start, stop)
        else:
            raw = self.stack.take(torch.as_tensor(index).reshape(-1).cpu().numpy())
        return to_nchw(torch.from_numpy(raw).to(self.device))


def to_nchw(x: torch.Tensor) -> torch.Tensor:
    """(B, H, W) or (B, H, W, C) images → (B, C, H, W)."""
    return x.unsqueeze(1) if x.ndim == 3 else x.permute(0, 3, 1, 2)


def from_nchw(x: torch.Tensor, channels_last: bool) -> torch.Tensor:
    """(B, C, H, W) → (B, H, W) for grey or (B, H, W, C) for colour."""
    return x.permute(0, 2, 3, 1) if channels_last else x[:, 0]
