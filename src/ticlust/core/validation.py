"""Checks on what users pass in: image stacks, landmark sets, K. Each failure is one InputError sentence."""
from __future__ import annotations

import hashlib
import os
import warnings

import numpy as np

from ..errors import InputError, whole_number
from .stack import SCAN_BATCH, Stack

FLOAT32_MAX = float(np.finfo(np.float32).max)
FLOAT32_TINY = float(np.finfo(np.float32).tiny)       # landmark spreads below this are refused as too small


def as_stack(data, allow_vectors: bool = False, name: str = "input", to_predict: bool = False) -> Stack:
    """Validate an array-like stack and wrap it; raises InputError with one clear sentence.

    ``to_predict`` accepts what cannot be clustered but can be assigned: a single item, constant items.
    """
    if isinstance(data, Stack):
        return data
    refuse_path(data, name)
    data = from_torch(data, name)
    if isinstance(data, (list, tuple)):
        try:
            data = np.stack([np.asarray(from_torch(d, name)) for d in data]) if len(data) else np.empty((0,))
        except ValueError:
            raise InputError(f"The {name} images differ in size: crop or resize them to one size first.") from None
    if not hasattr(data, "shape") or not hasattr(data, "dtype"):
        raise InputError(f"The {name} is a {type(data).__name__}, not an array: pass a NumPy, memory-mapped or dask array.")
    if any(not isinstance(s, (int, np.integer)) for s in data.shape):
        raise InputError(f"The {name} has shape {tuple(data.shape)}, with sizes not known yet (a dask array after "
                         "boolean indexing): call its compute_chunk_sizes() first.")
    shape = tuple(int(s) for s in data.shape)
    try:
        kind = np.dtype(data.dtype).kind
    except TypeError:
        kind = "?"
    if kind not in "biuf":
        raise InputError(f"The {name} has dtype {data.dtype}: ticlust needs real numbers (integer or floating point "
                         "images; take the magnitude or the real part of complex data first).")
    if len(shape) == 0 or shape[0] == 0 or int(np.prod(shape)) == 0:
        raise InputError(f"The {name} is empty (shape {shape}): give a stack of at least {1 if to_predict else 2} "
                         f"{'item' if to_predict else 'images'}.")
    data, shape = channels_last(data, shape, name)
    ndim = len(shape)
    if ndim == 1 or (ndim == 2 and not allow_vectors):
        raise InputError(f"The {name} has shape {shape}, a single image or vector: give a stack of images shaped N×H×W or N×H×W×C.")
    if ndim == 2 and not to_predict and shape[0] <= shape[1]:
        warnings.warn(f"The {name} is a 2-D array {shape[0]}×{shape[1]}: it is clustered as {shape[0]} vectors of "
                      f"{shape[1]} values. If it is one image, give a stack of images (N×H×W) instead.", stacklevel=3)
    if shape[0] < 2 and not to_predict:
        raise InputError(f"The {name} holds a single item: give at least 2 to cluster.")
    if ndim == 3 and shape[2] == 2:
        raise InputError(f"The {name} has shape {shape}, which looks like landmark shapes (n, L, 2): use the shape-kmeans method for landmarks.")
    if ndim >= 3 and min(shape[1:3]) < 4:
        raise InputError(f"The {name}'s images are {shape[1]}×{shape[2]} pixels: they must be at least 4×4.")
    lo, hi = np.inf, -np.inf
    for start in range(0, shape[0], SCAN_BATCH):
        block = np.asarray(data[start:start + SCAN_BATCH])
        if kind == "f" and not np.isfinite(block).all():
            bad = start + int(np.argwhere(~np.isfinite(block.reshape(block.shape[0], -1)).all(axis=1))[0, 0])
            raise InputError(f"The {name} contains NaN or infinite values (first in item {bad}): replace or drop those items.")
        lo, hi = min(lo, float(block.min())), max(hi, float(block.max()))
    if max(abs(lo), abs(hi)) > FLOAT32_MAX / 2:
        raise InputError(f"The {name} holds values up to {max(abs(lo), abs(hi)):.3g}, beyond what float32 arithmetic can hold: rescale the data (e.g. divide by its maximum) first.")
    if hi <= lo and not to_predict:
        raise InputError(f"Every value in the {name} is {lo:g}: the images are constant, so there is nothing to cluster.")
    return Stack(data, lo, hi if hi > lo else lo + max(1.0, abs(lo)))   # a span float64 can tell from lo


MAX_CHANNELS = 8


def channels_last(data, shape: tuple, name: str = "input"):
    """A 4-D stack as N×H×W×C: channels-last (N,H,W,C) or channel-first (N,C,H,W) multichannel images.

    The rule: the last axis is the channel axis when it holds at most MAX_CHANNELS (8) values and fewer
    than either image side; otherwise axis 1 is, when it holds at most 8 values and at most half of either
    image side (moved last as a lazy view). So (N, 6, 8, 8) stays a stack of volumes while (N, 2, 32, 32)
    is two-channel. A single channel is dropped (N×H×W); anything else 4-D is a stack of volumes.
    """
    if len(shape) > 4:
        raise InputError(f"The {name} has {len(shape)} dimensions: give N×H×W (grey) or N×H×W×C (C ≤ {MAX_CHANNELS} channels) images.")
    if len(shape) < 4:
        return data, shape
    if not (shape[-1] <= MAX_CHANNELS and shape[-1] < min(shape[1:3])):
        if shape[1] <= MAX_CHANNELS and 2 * shape[1] <= min(shape[2:4]):
            data, shape = np.moveaxis(data, 1, -1), (shape[0], shape[2], shape[3], shape[1])
        else:
            raise InputError(f"The {name} has shape {shape}, which looks like a stack of 3-D volumes: ticlust clusters 2-D images "
                             f"(N×H×W×C or N×C×H×W with at most {MAX_CHANNELS} channels), so take a slice or a projection of each volume.")
    if shape[-1] == 1:
        data, shape = data[..., 0], shape[:-1]
    return data, tuple(int(s) for s in shape)


def check_k(k, n: int) -> int:
    """K must be a whole number between 1 and the number of items."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) and not (isinstance(k, float) and k.is_integer()):
        raise InputError(f"K = {k!r} is not a whole number: give the number of clusters as an integer.")
    k = int(k)
    if k < 1 or k > n:
        raise InputError(f"K = {k} is out of range: it must be between 1 and the number of items ({n}).")
    return k


def check_distinct(stack: Stack, k: int) -> None:
    """Refuse K larger than the number of distinct items (as the method sees them: normalised float32),
    before any work: K clusters of fewer distinct images leave some empty, split identical items or give
    NaN scores. The scan stops as soon as K distinct items are seen. (Landmark methods keep their own
    handling of identical shapes: every cluster non-empty, finite scores; tests/test_shape_kmeans.py.)"""
    seen: set[bytes] = set()
    start, size = 0, max(64, 4 * k)        # small reads first: K distinct items usually turn up at once
    while start < stack.n:
        block = stack.batch(start, min(start + size, stack.n))
        start, size = start + len(block), min(2 * size, SCAN_BATCH)
        rows = np.ascontiguousarray(block.reshape(len(block), -1) + 0.0)    # + 0.0: -0.0 and 0.0 are one value
        for row in rows:
            seen.add(hashlib.blake2b(row.tobytes(), digest_size=16).digest())
            if len(seen) >= k:
                return
    raise InputError(f"K = {k} but the input holds only {len(seen)} distinct item{'s' if len(seen) != 1 else ''}: "
                     f"lower K to at most {len(seen)} (or drop the duplicates).")


def check_fitted_range(stack: Stack, lo: float, hi: float) -> None:
    """New items scaled with a fit's input range [lo, hi] must stay where float32 distances are finite
    (squared differences summed over every value); items of another scale are refused rather than
    assigned by overflowed scores."""
    if stack.n == 0:
        return
    span = hi - lo
    far = max(abs(stack.lo - lo), abs(stack.hi - lo)) / span
    if far > np.sqrt(FLOAT32_MAX / (4 * stack.dim)):
        raise InputError(f"The new items hold values from {stack.lo:.3g} to {stack.hi:.3g}, far outside the range the "
                         f"result was fitted on ({lo:.3g} to {hi:.3g}): give items on the scale of the training data.")


def check_batch_size(batch_size) -> int:
    """A batch size must be a whole number of at least 1."""
    return whole_number(batch_size, "batch_size", 1)


def check_seed(seed) -> int:
    """A seed must be a whole number in [0, 2³¹ − 1] (what NumPy, torch and the widget all accept)."""
    if isinstance(seed, np.integer):
        seed = int(seed)
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= 2**31 - 1:
        raise InputError(f"seed = {seed!r} must be a whole number between 0 and {2**31 - 1}.")
    return seed


def check_images(stack: Stack, method: str, min_side: int = 0) -> None:
    """A method that warps or compares images takes an image stack (grey or multichannel), not vectors, and images
    of at least ``min_side`` pixels a side where its warps or filters need that many."""
    if not stack.is_image:
        raise InputError(f"{method} warps or compares images: give an image stack shaped N×H×W or N×H×W×C, not vectors.")
    h, w = stack.item_shape[:2]
    if min(h, w) < min_side:
        raise InputError(f"{method} needs images of at least {min_side}×{min_side} pixels; these are {h}×{w}.")


def check_same_items(items, fitted_shape: tuple[int, ...], what: str = "new items",
                     fix: str = "give items of the same shape") -> None:
    """Items (a Stack, or a validated landmark array) must have the shape of the items a result was fitted
    on (not only as many values); ``what`` names them and ``fix`` says what to give instead."""
    shape = tuple(int(s) for s in (items.item_shape if isinstance(items, Stack) else items.shape[1:]))
    fitted_shape = tuple(int(s) for s in fitted_shape)
    if shape == fitted_shape:
        return
    if not isinstance(items, Stack) and len(shape) == len(fitted_shape) == 2 and shape[1] == fitted_shape[1] == 2:
        raise InputError(f"The {what} have {shape[0]} landmarks each but the result was fitted on shapes of "
                         f"{fitted_shape[0]}: {fix}.")
    raise InputError(f"The {what} are {'×'.join(map(str, shape))} but the result was fitted on "
                     f"{'×'.join(map(str, fitted_shape))}: {fix}.")


def check_same_size(stack: Stack, fitted_dim: int) -> None:
    """New items must have as many values as the items a result was fitted on."""
    if stack.dim != fitted_dim:
        raise InputError(f"The new items have {stack.dim} values each but the result was fitted on {fitted_dim}: give items of the same size.")


def random_subset(n: int, m: int | None, seed: int) -> np.ndarray | None:
    """Sorted indices of a seeded random subset of m out of n items (None when m is None or ≥ n)."""
    if m is None or m >= n:
        return None
    if m < 2:
        raise InputError(f"A subset of {m} items is too small: take at least 2.")
    return np.sort(np.random.default_rng(seed).choice(n, size=m, replace=False))


def as_landmarks(data, name: str = "landmarks", to_predict: bool = False) -> np.ndarray:
    """Validate a landmark set as a float64 (n_shapes, n_landmarks, 2) array (a copy).

    ``to_predict`` accepts a single shape (it can be assigned, not clustered).
    """
    refuse_path(data, name)
    if isinstance(data, (list, tuple)):
        data = [from_torch(d, name) for d in data]
        counts = {np.shape(d)[0] if np.ndim(d) == 2 else -1 for d in data}
        if len(counts) > 1:
            raise InputError(f"The shapes have different numbers of landmarks ({', '.join(map(str, sorted(counts)))}): every shape needs the same landmarks in the same order.")
        data = np.asarray(data) if len(data) else np.empty((0, 0, 2))
    arr = np.asarray(from_torch(data, name))
    if arr.dtype.kind not in "biuf":
        raise InputError(f"The {name} have dtype {arr.dtype}: give numeric (x, y) coordinates.")
    arr = arr.astype(np.float64)     # a copy; float16 / integer checks below compare in float64
    if arr.ndim != 3 or arr.shape[2] != 2:
        raise InputError(f"The {name} have shape {arr.shape}: give an array shaped (shapes, landmarks, 2) of 2-D coordinates.")
    if arr.shape[0] < (1 if to_predict else 2):
        raise InputError(f"There {'is' if arr.shape[0] == 1 else 'are'} {arr.shape[0]} shape{'' if arr.shape[0] == 1 else 's'}: "
                         f"give at least {1 if to_predict else 2} to {'assign' if to_predict else 'cluster'}.")
    if arr.shape[1] < 3:
        raise InputError(f"Each shape has {arr.shape[1]} landmarks: at least 3 are needed to describe a shape.")
    if not np.isfinite(arr).all():
        bad = int(np.argwhere(~np.isfinite(arr).all(axis=(1, 2)))[0, 0])
        raise InputError(f"The {name} contain NaN or infinite coordinates (first in shape {bad}): fix or drop those shapes.")
    if np.abs(arr).max() > FLOAT32_MAX / 2:
        raise InputError(f"The {name} hold coordinates up to {np.abs(arr).max():.3g}, too large to compute with: rescale them (e.g. to millimetres or pixels) first.")
    spread = np.abs(arr - arr.mean(1, keepdims=True)).max(axis=(1, 2))
    tiny = (spread > 0) & (spread < FLOAT32_TINY)       # squared sizes would underflow: not one point, too small
    if tiny.any():
        bad = int(np.argmax(tiny))
        raise InputError(f"The {name}' coordinates are too small to align (shape {bad}'s landmarks lie within "
                         f"{spread[bad]:.3g} of its centre): rescale them (e.g. to micrometres or pixels) first.")
    return arr


def refuse_path(data, name: str = "input") -> None:
    """A file path (text or ``Path``) given where an array belongs is refused, saying whether it exists."""
    if not isinstance(data, (str, os.PathLike)):
        return
    text = os.fspath(data)
    if not os.path.exists(text):
        raise InputError(f"{text!r}, given as the {name}, is not an array and no file or folder exists at that path: "
                         "check the path (ticlust.read_input reads a file into an array).")
    raise InputError(f"{text!r}, given as the {name}, is a path, not an array: read it with ticlust.read_input first.")


def from_torch(data, name: str = "input"):
    """A torch tensor as a NumPy array (detached, on the CPU; the caller's tensor is never touched);
    anything else unchanged. Floating types NumPy lacks (bfloat16, float8) become float32 and complex32
    becomes complex64 (which the callers refuse by name)."""
    if not (type(data).__module__.startswith("torch") and hasattr(data, "detach")):
        return data
    import torch

    tensor = data.detach()
    try:
        if tensor.is_complex() and tensor.dtype not in (torch.complex64, torch.complex128):
            tensor = tensor.to(torch.complex64)
        elif tensor.is_floating_point() and tensor.dtype not in (torch.float16, torch.float32, torch.float64):
            tensor = tensor.to(torch.float32)
        return tensor.cpu().numpy()
    except (TypeError, RuntimeError, NotImplementedError):
        raise InputError(f"The {name} is a torch tensor ({tensor.dtype}, {tensor.layout}, on {tensor.device}) that "
                         "cannot be read as an array: pass a dense CPU tensor of numbers.") from None
