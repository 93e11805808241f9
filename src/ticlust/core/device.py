"""Choosing the compute device, falling back to the CPU, and retrying CUDA out-of-memory with smaller batches."""
from __future__ import annotations

import os
import sys
import warnings
from contextlib import contextmanager
from typing import Callable, TypeVar

import torch

from .determinism import determinism_wanted
from .shared_setting import SharedSetting
from ..errors import InputError

T = TypeVar("T")
DEVICE_CHOICES = ("auto", "cpu", "cuda")


class DeviceFallbackWarning(UserWarning):
    """A GPU was asked for but is not available, so the work runs on the CPU."""


def resolve_device(requested: str | torch.device | None = "auto") -> torch.device:
    """'auto' picks CUDA when present, else the CPU; an absent GPU falls back to the CPU with a notice."""
    if isinstance(requested, torch.device):
        requested = str(requested)
    if requested is not None and not isinstance(requested, str):
        raise InputError(f"device = {requested!r} is not a device name: use one of {', '.join(DEVICE_CHOICES)} (or 'cuda:N').")
    name = (requested or "auto").strip().lower()
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cpu":
        return torch.device("cpu")
    if name.startswith("cuda"):
        if torch.cuda.is_available():
            return torch.device(name)
        warnings.warn("No CUDA GPU is available, so ticlust runs on the CPU instead.", DeviceFallbackWarning, stacklevel=2)
        return torch.device("cpu")
    raise InputError(f"Unknown device {requested!r}: use one of {', '.join(DEVICE_CHOICES)} (or 'cuda:N').")


_kernels = SharedSetting()    # deterministic kernels while runs (a Refine, the inspector) last


@contextmanager
def reproducible(device: torch.device):
    """Deterministic kernels while a run lasts (the previous setting is restored after the last run
    inside leaves, so two runs in two threads do not undo each other), unless TICLUST_DETERMINISTIC=0.

    torch then picks deterministic index_add / index_put / scatter / convolution kernels on every device,
    and on CUDA cuBLAS a fixed workspace; bilinear warps use ticlust's own sampler (transforms.sampler).
    torch's filling of every new tensor with NaN, which deterministic mode also turns on, is turned off: it
    changes no result (every kernel writes what it allocates) and took a fifth of a predict's time.
    Where no deterministic kernel exists torch warns instead of stopping. MKL's reproducible mode is
    asked for once, at import (``request_reproducible_blas``). docs/reproducibility.md says what holds.
    """
    if not determinism_wanted():
        yield
        return
    if device.type == "cuda":
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

    def make() -> tuple[bool, bool, bool]:
        before = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
                  torch.utils.deterministic.fill_uninitialized_memory)
        _deterministic(device, True, warn_only=True)
        torch.utils.deterministic.fill_uninitialized_memory = False
        return before

    def restore(before: tuple[bool, bool, bool]) -> None:
        _deterministic(device, before[0], warn_only=before[1])
        torch.utils.deterministic.fill_uninitialized_memory = before[2]

    with _kernels.held(make, restore):
        yield


def _deterministic(device: torch.device, mode: bool, warn_only: bool) -> None:
    """``torch.use_deterministic_algorithms``, which also sets the compiler's (inductor's) flag and so imports
    torch's compiler: 2-4 CPU seconds on a 2-core machine, every CLI fit's and the first dock run's. A CPU run sets
    the kernels' flag alone and the compiler's only where it is already imported (nothing on the CPU compiles by
    default); a CUDA run, where DTI may compile, goes through torch's own call."""
    if device.type == "cuda":
        torch.use_deterministic_algorithms(mode, warn_only=warn_only)
        return
    compiler = sys.modules.get("torch._inductor.config")
    if compiler is not None:
        compiler.deterministic = mode
    torch._C._set_deterministic_algorithms(mode, warn_only=warn_only)


def with_oom_retry(work: Callable[[int], T], batch_size: int, min_batch_size: int = 1) -> T:
    """Run ``work(batch_size)``; on CUDA out-of-memory halve the batch and try again."""
    while True:
        try:
            return work(batch_size)
        except torch.cuda.OutOfMemoryError:
            if batch_size <= min_batch_size:
                raise
            torch.cuda.empty_cache()
            batch_size = max(min_batch_size, batch_size // 2)
            warnings.warn(f"The GPU ran out of memory; retrying with batches of {batch_size}.", RuntimeWarning, stacklevel=2)


def describe(device: torch.device) -> str:
    """A short human name of the device, e.g. 'cuda:0 (NVIDIA H100)' or 'cpu (2 threads)'."""
    if device.type == "cuda":
        return f"{device} ({torch.cuda.get_device_name(device)})"
    return f"cpu ({torch.get_num_threads()} threads)"
