"""Reading stacks and landmark sets from files and folders (.npz, .npy, .tif, image folders, .csv, .tps)."""
from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np

from ..errors import InputError

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".tif", ".tiff", ".bmp", ".gif")


def read_input(path: str | Path, key: str | None = None, labels_key: str | None = None):
    """Read a stack (or landmark set) and optional labels from a file or folder.

    Supports .npz (array by ``key``, default the first, which must then be a stack: a 1-D first array,
    labels say, is refused naming the arrays), .npy (memory-mapped), .tif/.tiff stacks,
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
            if not zipfile.is_zipfile(path):
                raise InputError(f"{path.name} is not an .npz archive (not a zip file): save arrays with numpy.savez.")
            npz = np.load(path, allow_pickle=False, mmap_mode="r")
            names = list(npz.files)
            if not names:
                raise InputError(f"{path.name} holds no arrays: save the image stack into it with numpy.savez.")
            if key is not None and key not in names:
                raise InputError(f"{path.name} has no array {key!r}: choose the array name (key) from {', '.join(names)}.")
            array = npz[names[0] if key is None else key]
            if np.ndim(array) == 0:
                raise InputError(f"{path.name}'s array {key or names[0]!r} is a single number, not a stack: choose the array of images.")
            if key is None and np.ndim(array) == 1:     # labels saved first, say: never clustered as one vector
                raise InputError(f"{path.name}'s first array {names[0]!r} holds {len(array)} single values, not a "
                                 f"stack: choose the stack among its arrays ({', '.join(names)}) with key= (--key on "
                                 "the command line).")
            if labels_key is not None:
                if labels_key not in names:
                    raise InputError(f"{path.name} has no array {labels_key!r}: choose the labels' array name from {', '.join(names)}.")
                labels = np.asarray(npz[labels_key])
        elif path.suffix.lower() in (".csv", ".tps"):
            from .landmarks import read_landmarks      # here, not above: landmarks loads torch

            array = read_landmarks(path)[0]
        elif path.suffix == ".npy" or path.suffix.lower() in (".tif", ".tiff"):
            array = read_image(path)
        else:
            raise InputError(f"{path.name} has an unknown type: give an .npz, .npy, .tif stack, a folder of images, or a landmark .csv/.tps file.")
    except InputError:
        raise
    except Exception as exc:
        raise InputError(f"Could not read {path.name} ({type(exc).__name__}: {exc}); is it a valid {path.suffix or 'image folder'}?") from None
    if labels_key is not None and labels is None:
        raise InputError(f"Labels by array name only work with .npz input; {path.name} has no named arrays.")
    return array, labels


def read_image(path: str | Path):
    """One image file as an array: memory-mapped where the format allows (.npy, uncompressed .tif),
    so a large field is read in windows, else read whole (compressed .tif, .png, .jpg, ...)."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".npy":
        return _read_npy(path)
    if suffix in (".tif", ".tiff"):
        import tifffile

        try:
            return tifffile.memmap(path, mode="r")
        except Exception:  # compressed or tiled TIFFs cannot be memory-mapped
            return tifffile.imread(path)
    from PIL import Image

    with Image.open(path) as im:
        return np.asarray(im)


def _read_npy(path: Path) -> np.ndarray:
    """An .npy file, memory-mapped; a file without NumPy's header (random bytes, text) or holding Python
    objects is refused as such, not with NumPy's hint to load it unsafely."""
    with open(path, "rb") as fh:
        magic = fh.read(6)
    if magic != b"\x93NUMPY":
        raise InputError(f"{path.name} could not be read as a NumPy file (it does not start with the .npy header): "
                         "save the stack with numpy.save, or give it the suffix of its real format.")
    try:
        return np.load(path, mmap_mode="r", allow_pickle=False)
    except ValueError as exc:
        if "pickle" in str(exc).lower() or "object" in str(exc).lower():
            raise InputError(f"{path.name} holds Python objects, not numbers: save a numeric stack with numpy.save.") from None
        raise InputError(f"{path.name} could not be read as a NumPy file (its header or data is damaged or cut "
                         "short): save the stack again with numpy.save.") from None


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
