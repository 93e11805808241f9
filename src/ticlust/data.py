"""Reading, validating and normalising input stacks, batching over NumPy / memmap / dask arrays,
and the bundled sample data (made on the fly, no network)."""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

import numpy as np
import torch

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".tif", ".tiff", ".bmp", ".gif")
_SCAN_BATCH = 4096


class InputError(ValueError):
    """Bad input, with one sentence that names the problem and the fix."""


class Stack:
    """A validated stack of N items (images H×W, multichannel images H×W×C, or vectors D), read lazily.

    Items are normalised to float32 in [0, 1] by the stack's global minimum and maximum, computed
    in one streaming pass, so uint8 / uint16 / float data all land on the same scale without
    overflow. The source array is never modified and never loaded whole unless asked for.
    """

    def __init__(self, source, lo: float, hi: float):
        self.source = source
        self.lo = float(lo)
        self.hi = float(hi)
        self._cache: np.ndarray | None = None

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

    def batch(self, start: int, stop: int) -> np.ndarray:
        """Items ``start:stop`` as normalised float32."""
        if self._cache is not None:
            return self._cache[start:stop]
        raw = np.asarray(self.source[start:stop], dtype=np.float32)
        return (raw - np.float32(self.lo)) / np.float32(self.hi - self.lo)

    def batches(self, batch_size: int) -> Iterator[tuple[int, np.ndarray]]:
        for start in range(0, self.n, batch_size):
            yield start, self.batch(start, min(start + batch_size, self.n))

    def numpy(self) -> np.ndarray:
        """All items as one normalised float32 array (kept for reuse)."""
        if self._cache is None:
            self._cache = np.concatenate([b for _, b in self.batches(_SCAN_BATCH)], axis=0)
        return self._cache

    def tensor(self, device: torch.device | str = "cpu", flat: bool = False) -> torch.Tensor:
        x = torch.from_numpy(self.numpy()).to(device)
        return x.reshape(self.n, -1) if flat else x

    def subset(self, index) -> "Stack":
        """The items at ``index`` (read now), keeping this stack's normalisation."""
        return Stack(np.asarray(self.source[np.asarray(index)]), self.lo, self.hi)


def to_nchw(x: torch.Tensor) -> torch.Tensor:
    """(B, H, W) or (B, H, W, C) images → (B, C, H, W)."""
    return x.unsqueeze(1) if x.ndim == 3 else x.permute(0, 3, 1, 2)


def from_nchw(x: torch.Tensor, channels_last: bool) -> torch.Tensor:
    """(B, C, H, W) → (B, H, W) for grey or (B, H, W, C) for colour."""
    return x.permute(0, 2, 3, 1) if channels_last else x[:, 0]


def as_stack(data, allow_vectors: bool = False, name: str = "input", to_predict: bool = False) -> Stack:
    """Validate an array-like stack and wrap it; raises InputError with one clear sentence.

    ``to_predict`` accepts what cannot be clustered but can be assigned: a single item, constant items.
    """
    if isinstance(data, Stack):
        return data
    if isinstance(data, (list, tuple)):
        try:
            data = np.stack([np.asarray(d) for d in data]) if len(data) else np.empty((0,))
        except ValueError:
            raise InputError(f"The {name} images differ in size: crop or resize them to one size first.") from None
    if not hasattr(data, "shape") or not hasattr(data, "dtype"):
        raise InputError(f"The {name} is a {type(data).__name__}, not an array: pass a NumPy, memory-mapped or dask array.")
    shape = tuple(int(s) for s in data.shape)
    kind = np.dtype(data.dtype).kind
    if kind not in "biuf":
        raise InputError(f"The {name} has dtype {data.dtype}: ticlust needs numbers (integer or floating point images).")
    if len(shape) == 0 or shape[0] == 0 or int(np.prod(shape)) == 0:
        raise InputError(f"The {name} is empty: give a stack of at least 2 images.")
    data, shape = channels_last(data, shape, name)
    ndim = len(shape)
    if ndim == 1 or (ndim == 2 and not allow_vectors):
        raise InputError(f"The {name} has shape {shape}, a single image or vector: give a stack of images shaped N×H×W or N×H×W×C.")
    if shape[0] < 2 and not to_predict:
        raise InputError(f"The {name} holds a single item: give at least 2 to cluster.")
    if ndim == 3 and shape[2] == 2:
        raise InputError(f"The {name} has shape {shape}, which looks like landmark shapes (n, L, 2): use the shape-kmeans method for landmarks.")
    if ndim >= 3 and min(shape[1:3]) < 4:
        raise InputError(f"The {name}'s images are {shape[1]}×{shape[2]} pixels: they must be at least 4×4.")
    lo, hi = np.inf, -np.inf
    for start in range(0, shape[0], _SCAN_BATCH):
        block = np.asarray(data[start:start + _SCAN_BATCH])
        if kind == "f" and not np.isfinite(block).all():
            bad = start + int(np.argwhere(~np.isfinite(block.reshape(block.shape[0], -1)).all(axis=1))[0, 0])
            raise InputError(f"The {name} contains NaN or infinite values (first in item {bad}): replace or drop those items.")
        lo, hi = min(lo, float(block.min())), max(hi, float(block.max()))
    if hi <= lo and not to_predict:
        raise InputError(f"Every value in the {name} is {lo:g}: the images are constant, so there is nothing to cluster.")
    return Stack(data, lo, hi if hi > lo else lo + 1.0)


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


def check_same_size(stack: Stack, fitted_dim: int) -> None:
    """New items must have as many values as the items a result was fitted on."""
    if stack.dim != fitted_dim:
        raise InputError(f"The new items have {stack.dim} values each but the result was fitted on {fitted_dim}: give items of the same size.")


def random_subset(n: int, m: int | None, seed: int) -> np.ndarray | None:
    """Sorted indices of a seeded random subset of m out of n items (None when m is None or ≥ n)."""
    if m is None or m >= n:
        return None
    if m < 1:
        raise InputError(f"--max-images {m} is too small: take at least 2 images.")
    return np.sort(np.random.default_rng(seed).choice(n, size=m, replace=False))


# ---- files ---------------------------------------------------------------------------------------
def read_input(path: str | Path, key: str | None = None, labels_key: str | None = None):
    """Read a stack (or landmark set) and optional labels from a file or folder.

    Supports .npz (array by ``key``, default the first), .npy (memory-mapped), .tif/.tiff stacks,
    folders of images, and landmark files (.csv with shape_id, landmark, x, y columns; tpsDig .tps).
    Returns ``(array, labels or None)``; the array may be lazy.
    """
    path = Path(path)
    if not path.exists():
        raise InputError(f"There is no file or folder at {path}: check the path.")
    labels = None
    try:
        if path.is_dir():
            array = _read_folder(path)
        elif path.suffix == ".npz":
            npz = np.load(path, allow_pickle=False, mmap_mode="r")
            names = list(npz.files)
            if key is None:
                key = names[0]
            if key not in names:
                raise InputError(f"{path.name} has no array {key!r}: choose --key from {', '.join(names)}.")
            array = npz[key]
            if labels_key is not None:
                if labels_key not in names:
                    raise InputError(f"{path.name} has no array {labels_key!r}: choose --labels-key from {', '.join(names)}.")
                labels = np.asarray(npz[labels_key])
        elif path.suffix.lower() in (".csv", ".tps"):
            from .landmarks import read_landmarks

            array = read_landmarks(path)[0]
        elif path.suffix == ".npy":
            array = np.load(path, mmap_mode="r", allow_pickle=False)
        elif path.suffix.lower() in (".tif", ".tiff"):
            import tifffile

            try:
                array = tifffile.memmap(path, mode="r")
            except Exception:  # compressed or tiled TIFFs cannot be memory-mapped
                array = tifffile.imread(path)
        else:
            raise InputError(f"{path.name} has an unknown type: give an .npz, .npy, .tif stack, a folder of images, or a landmark .csv/.tps file.")
    except InputError:
        raise
    except Exception as exc:
        raise InputError(f"Could not read {path.name} ({type(exc).__name__}: {exc}); is it a valid {path.suffix or 'image folder'}?") from None
    if labels_key is not None and labels is None:
        raise InputError(f"--labels-key only works with .npz input; {path.name} has no named arrays.")
    return array, labels


def folder_images(folder: str | Path) -> list[Path]:
    """The image files of a folder in the order they are stacked (sorted by name)."""
    return sorted(p for p in Path(folder).iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)


def _read_folder(folder: Path) -> np.ndarray:
    from PIL import Image

    files = folder_images(folder)
    if not files:
        raise InputError(f"The folder {folder} holds no images ({', '.join(IMAGE_SUFFIXES)}).")
    images = [np.asarray(Image.open(f)) for f in files]
    shapes = {im.shape for im in images}
    if len(shapes) > 1:
        raise InputError(f"The images in {folder} differ in size ({', '.join(map(str, sorted(shapes)))}): crop or resize them to one size.")
    return np.stack(images)


# ---- sample data ---------------------------------------------------------------------------------
SAMPLES = {
    "digits": "1,797 handwritten digits (scikit-learn's bundled set), upsampled to 32×32, labels 0-9",
    "glyphs": "600 synthetic glyphs of 4 kinds under random affine and elastic warps, 32×32, with labels",
    "shapes": "100 landmark shapes (8 landmarks) from two mean shapes, rotated, shifted and noisy, with labels",
}


def sample(name: str, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A bundled sample stack and its labels, made without any download."""
    if name == "digits":
        return digits_sample()
    if name == "glyphs":
        return glyphs_sample(seed=seed)
    if name == "shapes":
        from .landmarks import sample_landmarks

        return sample_landmarks(seed=seed)
    raise InputError(f"Unknown sample {name!r}: choose one of {', '.join(SAMPLES)}.")


def digits_sample(size: int = 32) -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's 8×8 digits (shipped inside the package), upsampled with bilinear zoom."""
    from scipy.ndimage import zoom
    from sklearn.datasets import load_digits

    digits = load_digits()
    small = digits.images.astype(np.float32) / 16.0
    pad = np.pad(small, ((0, 0), (1, 1), (1, 1)))  # a blank border, as in MNIST
    big = zoom(pad, (1, size / 10, size / 10), order=1)
    return np.clip(big, 0, 1).astype(np.float32), digits.target.astype(np.int64)


def glyphs_sample(n_per_class: int = 150, size: int = 32, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Four glyphs (ring, cross, triangle, bar) under random affine + smooth elastic warps."""
    from scipy.ndimage import gaussian_filter, map_coordinates

    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32)
    c = (size - 1) / 2
    u, v = (xx - c) / (size / 2), (yy - c) / (size / 2)   # [-1, 1] coordinates
    r = np.hypot(u, v)
    glyphs = [
        np.clip(1 - np.abs(r - 0.5) / 0.12, 0, 1),                                           # ring
        np.clip(1 - np.minimum(np.abs(u), np.abs(v)) / 0.12, 0, 1) * (np.maximum(np.abs(u), np.abs(v)) < 0.6),  # cross
        ((v < 0.45) & (v > -0.55 + 1.7 * np.abs(u))).astype(np.float32),                       # triangle
        ((np.abs(u) < 0.15) & (np.abs(v) < 0.6)).astype(np.float32),                            # bar
    ]
    images, labels = [], []
    for label, glyph in enumerate(glyphs):
        glyph = gaussian_filter(glyph.astype(np.float32), 0.6)
        for _ in range(n_per_class):
            angle = rng.uniform(-0.5, 0.5)
            scale = rng.uniform(0.8, 1.15)
            shear = rng.uniform(-0.15, 0.15)
            rot = np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]])
            mat = rot @ np.array([[1, shear], [0, 1]]) / scale
            shift = rng.uniform(-2.5, 2.5, size=2)
            pts = np.stack([yy - c, xx - c]).reshape(2, -1)
            src = mat @ pts + c + shift[:, None]
            elastic = gaussian_filter(rng.normal(size=(2, size, size)), (0, 4, 4)) * 18.0
            src = src + elastic.reshape(2, -1)
            warped = map_coordinates(glyph, src, order=1, mode="constant").reshape(size, size)
            images.append(warped)
            labels.append(label)
    images = np.clip(np.stack(images), 0, 1).astype(np.float32)
    labels = np.asarray(labels, dtype=np.int64)
    order = rng.permutation(len(labels))
    return images[order], labels[order]


# ---- landmark shapes -----------------------------------------------------------------------------
def as_landmarks(data, name: str = "landmarks") -> np.ndarray:
    """Validate a landmark set as a float64 (n_shapes, n_landmarks, 2) array (a copy)."""
    if isinstance(data, (list, tuple)):
        counts = {np.shape(d)[0] if np.ndim(d) == 2 else -1 for d in data}
        if len(counts) > 1:
            raise InputError(f"The shapes have different numbers of landmarks ({', '.join(map(str, sorted(counts)))}): every shape needs the same landmarks in the same order.")
        data = np.asarray(data) if len(data) else np.empty((0, 0, 2))
    arr = np.asarray(data)
    if arr.dtype.kind not in "biuf":
        raise InputError(f"The {name} have dtype {arr.dtype}: give numeric (x, y) coordinates.")
    if arr.ndim != 3 or arr.shape[2] != 2:
        raise InputError(f"The {name} have shape {arr.shape}: give an array shaped (shapes, landmarks, 2) of 2-D coordinates.")
    if arr.shape[0] < 2:
        raise InputError(f"There are {arr.shape[0]} shapes: give at least 2 to cluster.")
    if arr.shape[1] < 3:
        raise InputError(f"Each shape has {arr.shape[1]} landmarks: at least 3 are needed to describe a shape.")
    if not np.isfinite(arr).all():
        bad = int(np.argwhere(~np.isfinite(arr).all(axis=(1, 2)))[0, 0])
        raise InputError(f"The {name} contain NaN or infinite coordinates (first in shape {bad}): fix or drop those shapes.")
    return arr.astype(np.float64, copy=True)
