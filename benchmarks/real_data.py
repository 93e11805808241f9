"""Real, labelled, public cell images for the real-cells benchmarks (issue 52), converted into
benchmarks/_cache/<name>.npz (gitignored: the package never needs them; benchmarks/results/real_data.md says
where each comes from, its licence, classes and the checks run here).

Each set is read from a public GitHub repository at a pinned commit: from the local mirror of it (``--mirror``,
default /work/.mirror, as the search tool's ``fetch`` leaves it: a bare git directory read with ``git archive``)
or from a plain checkout (``--checkout owner/name=DIR``). Only image and label files are read; every line of the
conversion is ours. Each .npz holds ``images`` (N, H, W, C) uint8 channels-last, ``labels`` (N,) int64,
``classes`` (K,), ``channel_names`` (C,), ``files`` (N,) the source file of each item.

    PYTHONPATH=src python benchmarks/real_data.py                 # every set
    PYTHONPATH=src python benchmarks/real_data.py pbc --size 64
"""
from __future__ import annotations

import argparse
import hashlib
import io
import subprocess
import tarfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

HERE = Path(__file__).resolve().parent
CACHE = HERE / "_cache"
SIZE = 64           # crop side written (pixels)


@dataclass
class Source:
    """A repository at a pinned commit, and the folder inside it that is read."""

    repo: str
    commit: str
    path: str


@dataclass
class SetSpec:
    doc: str
    mask_channel: int               # the channel the regionprops route thresholds (real_cells.py)
    mask_dark: bool                 # objects darker than the background there
    subset: int | None              # real_cells.py's default seeded subset
    sources: tuple[Source, ...] = ()
    build: Callable | None = None   # build(files: dict[path, bytes] per source, size) -> dict of arrays


class Reader:
    """Files of a pinned repository folder: from a plain checkout, or from the mirror's bare git directory."""

    def __init__(self, mirror: Path, checkouts: dict[str, Path]):
        self.mirror, self.checkouts = mirror, checkouts

    def files(self, source: Source) -> dict[str, bytes]:
        """Every file under ``source.path`` as {path inside the repository: bytes}."""
        if source.repo in self.checkouts:
            root = self.checkouts[source.repo]
            return {str(p.relative_to(root)): p.read_bytes() for p in sorted((root / source.path).rglob("*")) if p.is_file()}
        git_dir = self.mirror / source.repo.replace("/", "+") / "repo"
        if not git_dir.is_dir():
            raise SystemExit(f"{source.repo} is not mirrored at {git_dir}: fetch it, or pass --checkout {source.repo}=DIR")
        tar = subprocess.run(["git", f"--git-dir={git_dir}", "archive", "--format=tar", source.commit, source.path],
                             capture_output=True, check=True).stdout
        with tarfile.open(fileobj=io.BytesIO(tar)) as archive:
            return {m.name: archive.extractfile(m).read() for m in archive.getmembers() if m.isfile()}


def rgb(data: bytes):
    from PIL import Image

    return Image.open(io.BytesIO(data)).convert("RGB")


def resized(image, box: tuple[int, int, int, int], size: int) -> np.ndarray:
    """The square ``box`` (left, top, right, bottom) of a PIL image, outside the image filled with its edge colour,
    resized to size × size (area averaging)."""
    from PIL import Image, ImageOps

    left, top, right, bottom = box
    pad = max(0, -left, -top, right - image.width, bottom - image.height)
    if pad:
        image = ImageOps.expand(image, border=pad, fill=tuple(int(v) for v in np.median(np.asarray(image).reshape(-1, 3), 0)))
        left, top, right, bottom = left + pad, top + pad, right + pad, bottom + pad
    return np.asarray(image.crop((left, top, right, bottom)).resize((size, size), Image.Resampling.BOX))


# ---- PBC: normal peripheral blood cells, CellaVision DM96, May Grünwald-Giemsa ------------------------------
PBC_CLASSES = ("basophil", "eosinophil", "erythroblast", "ig", "lymphocyte", "monocyte", "neutrophil", "platelet")


def build_pbc(files: list[dict[str, bytes]], size: int) -> dict:
    """Each 360×363 (a few 366×369) image cut to its central square of 360 (the cell is centred) and resized."""
    images, labels, names, seen = [], [], [], {}
    for path, data in sorted(files[0].items()):
        if not path.endswith(".jpg") or Path(path).name.startswith("."):    # a macOS .DS_ file among the neutrophils
            continue
        digest = hashlib.sha256(data).hexdigest()
        if digest in seen:              # an exact duplicate file is kept once
            continue
        seen[digest] = path
        image = rgb(data)
        side = min(image.size)
        left, top = (image.width - side) // 2, (image.height - side) // 2
        images.append(resized(image, (left, top, left + side, top + side), size))
        labels.append(PBC_CLASSES.index(path.split("/")[-2]))
        names.append(path)
    return {"images": np.stack(images), "labels": np.asarray(labels, np.int64), "classes": np.asarray(PBC_CLASSES),
            "files": np.asarray(names), "channel_names": np.asarray(("red", "green", "blue"))}


# ---- BCCD: white-blood-cell types in Giemsa-stained smears (one WBC of interest per image) --------------------
BCCD_CLASSES = ("eosinophil", "lymphocyte", "monocyte", "neutrophil")
BCCD_SIDE = 256      # pixels of the 640×480 image around each WBC's box centre (then resized)


def wbc_boxes(xml: bytes) -> list[tuple[int, int, int, int]]:
    root = ET.fromstring(xml)
    return [tuple(int(float(o.find("bndbox").find(k).text)) for k in ("xmin", "ymin", "xmax", "ymax"))
            for o in root.iter("object") if o.find("name").text.strip() == "WBC"]


def bccd_labels(csv: bytes) -> dict[int, str]:
    """Image number → its one WBC type (lower case); images with none or several types are left out."""
    import csv as csvlib

    out = {}
    for row in csvlib.DictReader(io.StringIO(csv.decode())):
        category = (row.get("Category") or "").strip().lower()
        if category and "," not in category:
            out[int(row["Image"])] = category
    return out


def build_bccd(files: list[dict[str, bytes]], size: int) -> dict:
    """The WBC of each image whose label names one type of BCCD_CLASSES and whose annotation has one WBC box:
    a BCCD_SIDE square about the box centre, resized (the same magnification for every cell)."""
    images_files, label_files = files
    labels_by_image = bccd_labels(next(v for k, v in label_files.items() if k.endswith("labels.csv")))
    xmls = {Path(k).stem: v for k, v in images_files.items() if k.endswith(".xml")}
    images, labels, names = [], [], []
    for path, data in sorted(images_files.items()):
        stem = Path(path).stem
        if not path.endswith(".jpg") or stem not in xmls:
            continue
        category = labels_by_image.get(int(stem.split("_")[-1]))
        boxes = wbc_boxes(xmls[stem])
        if category not in BCCD_CLASSES or len(boxes) != 1:
            continue
        x0, y0, x1, y1 = boxes[0]
        cx, cy, half = (x0 + x1) // 2, (y0 + y1) // 2, BCCD_SIDE // 2
        images.append(resized(rgb(data), (cx - half, cy - half, cx + half, cy + half), size))
        labels.append(BCCD_CLASSES.index(category))
        names.append(path)
    return {"images": np.stack(images), "labels": np.asarray(labels, np.int64), "classes": np.asarray(BCCD_CLASSES),
            "files": np.asarray(names), "channel_names": np.asarray(("red", "green", "blue"))}


SETS: dict[str, SetSpec] = {
    "pbc": SetSpec("PBC normal peripheral blood cells (Acevedo et al. 2020), MGG-stained RGB, 8 types, 64x64",
                   mask_channel=0, mask_dark=True, subset=2000,
                   sources=(Source("AuralinACC/Blood-Cell-Classification", "d2e7b75e11e21df3fb39f4d1d30004381663d96a",
                                   "PBC_dataset_normal_DIB"),),
                   build=build_pbc),
    "bccd-wbc": SetSpec("BCCD white blood cells (Giemsa-stained RGB smears), 4 types, 64x64 of 256x256", mask_channel=0,
                        mask_dark=True, subset=None,
                        sources=(Source("Shenggan/BCCD_Dataset", "d272fb14cdff6e473fafeeeba32aba5f560e9e43", "BCCD"),
                                 Source("apple2373/BCCD", "7751031e0b41bcfdff998cbc4c698a445a60b49e", "labels.csv")),
                        build=build_bccd),
}


def convert(name: str, reader: Reader, size: int) -> Path:
    spec = SETS[name]
    arrays = spec.build([reader.files(s) for s in spec.sources], size)
    CACHE.mkdir(exist_ok=True)
    out = CACHE / f"{name}.npz"
    np.savez_compressed(out, **arrays)
    counts = np.bincount(arrays["labels"], minlength=len(arrays["classes"]))
    print(f"{name}: {arrays['images'].shape} {arrays['images'].dtype}, "
          + ", ".join(f"{c} {n}" for c, n in zip(arrays["classes"], counts)) + f" -> {out}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", default=list(SETS), help=f"of {', '.join(SETS)} (default: all)")
    ap.add_argument("--size", type=int, default=SIZE)
    ap.add_argument("--mirror", default="/work/.mirror")
    ap.add_argument("--checkout", nargs="*", default=[], metavar="OWNER/NAME=DIR")
    args = ap.parse_args()
    checkouts = dict((k, Path(v)) for k, _, v in (c.partition("=") for c in args.checkout))
    reader = Reader(Path(args.mirror), checkouts)
    for name in args.names:
        convert(name, reader, args.size)


if __name__ == "__main__":
    main()
