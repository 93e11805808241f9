"""Reading stacks and landmark sets from files and folders (.npz, .npy, .tif, image folders, .csv, .tps)."""
from __future__ import annotations

import warnings
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


#: The ending of Cellpose's saved segmentation (``NAME_seg.npy``: a pickled dict whose ``masks`` entry is the labels).
CELLPOSE_SEG = "_seg.npy"


def read_labels(path: str | Path):
    """A label image as other segmenters write it, as it comes: Cellpose's ``NAME_seg.npy`` (its ``masks`` entry),
    ``NAME_cp_masks.png`` / ``.tif``, StarDist's or any ``NAME_labels.tif``, a plain ``.npy`` (memory-mapped
    where the format allows, as :func:`read_image`)."""
    path = Path(path)
    if path.name.lower().endswith(CELLPOSE_SEG):
        return _cellpose_masks(path)
    return read_image(path)


#: What a Cellpose ``_seg.npy`` may hold besides plain Python values: NumPy arrays, scalars and dtypes, by the names
#: NumPy 1 and 2 pickle them under. Nothing else is built while reading one (a pickle can run any code it names).
_NUMPY_PICKLED = {(m, n) for m in ("numpy.core.multiarray", "numpy._core.multiarray") for n in ("_reconstruct", "scalar")} \
    | {("numpy", "ndarray"), ("numpy", "dtype")}


def _cellpose_masks(path: Path) -> np.ndarray:
    """The ``masks`` entry of a Cellpose ``_seg.npy``, unpickled with only NumPy's array classes allowed."""
    import pickle

    from numpy.lib import format as npy

    class ArraysOnly(pickle.Unpickler):
        def find_class(self, module, name):
            if (module, name) not in _NUMPY_PICKLED:
                raise pickle.UnpicklingError(f"it names {module}.{name}, which is not a NumPy array's part")
            import importlib

            try:                       # NumPy 2 names its core numpy._core (numpy.core warns); NumPy 1 numpy.core
                return getattr(importlib.import_module(module.replace("numpy.core.", "numpy._core.")), name)
            except ImportError:
                return getattr(importlib.import_module(module.replace("numpy._core.", "numpy.core.")), name)

    try:
        with open(path, "rb") as fh:
            version = npy.read_magic(fh)
            npy.read_array_header_1_0(fh) if version == (1, 0) else npy.read_array_header_2_0(fh)
            content = ArraysOnly(fh).load()
    except Exception as exc:
        raise InputError(f"{path.name} could not be read as Cellpose's _seg.npy ({type(exc).__name__}: {exc}): give "
                         "the masks Cellpose saved (NAME_seg.npy, or NAME_cp_masks.png with --save_png).") from None
    content = content.item() if isinstance(content, np.ndarray) and content.dtype == object and content.ndim == 0 \
        else content
    masks = content.get("masks") if isinstance(content, dict) else None
    if not isinstance(masks, np.ndarray):
        raise InputError(f"{path.name} holds no 'masks' array, as Cellpose's _seg.npy does: give Cellpose's own file.")
    return masks


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


# ---- files read through bioio (microscope formats, OME-TIFF) ---------------------------------------
#: Files a folder of fields may hold that bioio reads: OME-TIFF and the microscopes' own formats. A manifest's
#: cell or a single INPUT file of any type that is not TIFF, PNG, JPEG, BMP, GIF or .npy goes to bioio too.
VENDOR_SUFFIXES = (".ome.tif", ".ome.tiff", ".nd2", ".czi", ".lif", ".dv", ".sldy")
#: The bioio plugin (module) that reads each vendor format the optional extra ``formats`` installs.
FORMAT_PLUGINS = {".nd2": "bioio_nd2", ".czi": "bioio_czi", ".lif": "bioio_lif"}
#: How a user gets the vendor plugins.
FORMATS_EXTRA = 'pip install "napari-ticlust[formats]"'


def vendor_suffix(path) -> str:
    """The format suffix of a file bioio reads (``.ome.tif`` counted whole), lower case."""
    name = Path(path).name.lower()
    return next((s for s in (".ome.tif", ".ome.tiff") if name.endswith(s)), Path(name).suffix)


def read_by_bioio(path) -> bool:
    """Whether a field file is read through bioio: OME-TIFF, and every type ticlust does not read itself."""
    suffix = vendor_suffix(path)
    return suffix in (".ome.tif", ".ome.tiff") or suffix not in IMAGE_SUFFIXES + (".npy",)


def open_bioimage(path):
    """A ``bioio.BioImage`` of ``path`` (OME-TIFF through bioio-ome-tiff, anything else through whichever plugin
    reads it); a format whose plugin is not installed is one sentence naming it (and the extra that brings it)."""
    import importlib.util

    with warnings.catch_warnings():      # pydantic's and ome-types' notices on import: not the user's to act on
        warnings.simplefilter("ignore", DeprecationWarning)
        from bioio import BioImage
        from bioio_base.exceptions import UnsupportedFileFormatError

    p = Path(path)
    if not p.is_file():
        raise InputError(f"There is no image file at {p}: check the path.")
    suffix = vendor_suffix(p)
    plugin = FORMAT_PLUGINS.get(suffix)
    if plugin is not None and importlib.util.find_spec(plugin) is None:
        raise InputError(_no_plugin(p, suffix))
    reader = None
    if suffix in (".ome.tif", ".ome.tiff"):
        import bioio_ome_tiff

        reader = bioio_ome_tiff.Reader
    try:
        with warnings.catch_warnings():      # ome-types' notice about an argument bioio passes: not the user's to act on
            warnings.simplefilter("ignore", DeprecationWarning)
            return BioImage(p, reader=reader) if reader is not None else BioImage(p)
    except UnsupportedFileFormatError:
        raise InputError(_no_plugin(p, suffix)) from None
    except Exception as exc:           # the plugins' own errors have no common base
        first = (str(exc).strip().splitlines() or [""])[0]
        raise InputError(f"Could not read {p.name} through bioio ({type(exc).__name__}: {first}): check that the "
                         "file is whole and of the type its name says.") from None


def _no_plugin(path: Path, suffix: str) -> str:
    """The sentence for a file no installed bioio plugin reads: the vendor extra where it covers the format."""
    plugin = FORMAT_PLUGINS.get(suffix)
    if plugin is not None:
        return (f"Reading {path.name} needs the bioio plugin {plugin.replace('_', '-')}, which is not installed: "
                f"install the vendor formats with {FORMATS_EXTRA}.")
    return (f"No installed bioio plugin reads {path.name} ({suffix or 'no suffix'}): install the bioio reader plugin "
            f"for it (the vendor formats ND2, CZI and LIF come with {FORMATS_EXTRA}), or convert it to OME-TIFF.")


def bioio_scenes(path) -> tuple[str, ...]:
    """The scenes (positions, series) of a file bioio reads: each one is a field."""
    return tuple(str(s) for s in open_bioimage(path).scenes)


class BioField:
    """One scene of a bioio image as ticlust reads a field: ``Y×X``, ``Y×X×C`` (channels last, only those
    picked, in the order picked) or with a leading ``T`` for a time series; one Z plane (``z``) or their maximum
    (``z="max"``). Shape and dtype come from the metadata; the pixels are read whole on first access and kept."""

    def __init__(self, path, scene: int, z=None):
        self.path = Path(path)
        self._image = open_bioimage(path)
        self._image.set_scene(scene)
        dims = self._image.dims
        self.names = tuple(str(n) for n in self._image.channel_names)
        self._size = {d: int(getattr(dims, d, 1) or 1) for d in "TCZYX"}
        self.z = _plane(self.path.name, scene, self._size["Z"], z)
        self.dtype = np.dtype(self._image.dtype)
        self.select(None)

    def select(self, channels: list[int] | None, keep_axis: bool = True) -> "BioField":
        """Read only ``channels`` (indices, in this order; None: all); one channel without ``keep_axis``, or a
        file of one channel, is a grey image."""
        self.channels = list(range(self._size["C"])) if channels is None else [int(c) for c in channels]
        grey = len(self.channels) == 1 and (channels is None or not keep_axis)
        self.shape = (((self._size["T"],) if self._size["T"] > 1 else ()) + (self._size["Y"], self._size["X"])
                      + (() if grey else (len(self.channels),)))
        self.ndim = len(self.shape)
        self._data = None
        return self

    def _load(self) -> np.ndarray:
        """Every pixel of the scene (the picked channels and plane), as NumPy, read once."""
        if self._data is None:
            data = self._image.get_image_dask_data("TCZYX")[:, self.channels]
            data = data.max(axis=2) if self.z == "max" else data[:, :, self.z]
            data = np.moveaxis(np.asarray(data.compute(scheduler="synchronous")), 1, -1)   # T, Y, X, C
            self._data = data.reshape(self.shape)
        return self._data

    def __getitem__(self, key):
        return self._load()[key]

    def __array__(self, dtype=None, copy=None):
        data = self._load()
        return data if dtype is None else data.astype(dtype)


def _plane(name: str, scene: int, planes: int, z):
    """Which Z plane of a scene to read (an index, or "max"), refusing a stack of planes without a choice."""
    if z is None:
        if planes > 1:
            raise InputError(f"{name} (scene {scene}) has {planes} Z planes and ticlust cuts 2-D objects: pick one "
                             f"with --z N (z=N, 0 to {planes - 1}) or project them with --z max (z='max').")
        return 0
    if z == "max":
        return "max"
    if not 0 <= int(z) < planes:
        raise InputError(f"{name} (scene {scene}) has {planes} Z plane{'s' if planes > 1 else ''}: give --z from 0 to "
                         f"{planes - 1}, or --z max.")
    return int(z)


class ChannelStack:
    """The channels of a field given as one file each, stacked along a last axis and read window by window
    (each file memory-mapped where it can be); ``names`` in stack order. Files of different shapes are refused."""

    def __init__(self, arrays, names, files):
        shapes = [tuple(int(s) for s in a.shape) for a in arrays]
        if len(set(shapes)) > 1:
            told = ", ".join(f"{n} {'×'.join(map(str, s))}" for n, s in zip(names, shapes))
            raise InputError(f"The channel files of {Path(files[0]).name} differ in shape ({told}): give every "
                             "channel of a field at the same size.")
        self.arrays, self.names = list(arrays), tuple(names)
        self.shape = shapes[0] + (len(arrays),)
        self.dtype = np.result_type(*[np.dtype(a.dtype) for a in arrays])
        self.ndim = len(self.shape)

    def __getitem__(self, key):
        key = key if isinstance(key, tuple) else (key,)
        return np.stack([np.asarray(a[key]) for a in self.arrays], axis=-1).astype(self.dtype, copy=False)

    def __array__(self, dtype=None, copy=None):
        data = self[...]
        return data if dtype is None else data.astype(dtype)
