"""Make docs/segmentation-fly.png and docs/segmentation-fly-detail.png: the nuclei ``ticlust.segment_nuclei`` finds
in CellProfiler's ExampleFly fields (three real Drosophila sites, no masks ship with them), outlined over the DNA
channel, so that a reader can judge the segmentation by eye (there is no truth for these fields); and
docs/segmentation-fly-clusters.png: the same sites taken from raw TIFFs to clusters as README's three commands do
(``extract --segment nuclei``, a ``cell-kmeans`` fit with K = 4, ``predict``), every nucleus outlined in its
cluster's colour, beside eight crops of each cluster (the three channels as RGB).

Drawn with NumPy and Pillow only: an outline pixel is a nucleus pixel with a 4-neighbour of another label; each
nucleus gets one of a few bright colours, so that touching nuclei are told apart.

    PYTHONPATH=src python docs/make_segmentation_figure.py [--data-dir shared/datasets] [--diameter 20] [--k 4]
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

import ticlust
from ticlust import segment_nuclei
from ticlust.plate.run import fit_store

HERE = Path(__file__).parent
SITES = ("002", "076", "218")
COLOURS = np.array([(255, 80, 80), (80, 255, 120), (90, 170, 255), (255, 220, 60), (255, 110, 255), (60, 240, 240)],
                   np.uint8)


def fly_folder(given: str | None) -> Path:
    if given:
        return Path(given) / "real_fields" / "example_fly"
    for base in HERE.resolve().parents:
        if (base / "shared" / "datasets" / "real_fields" / "example_fly").is_dir():
            return base / "shared" / "datasets" / "real_fields" / "example_fly"
    raise SystemExit("No shared/datasets/real_fields/example_fly beside the repository: pass --data-dir.")


def outlined(image: np.ndarray, labels: np.ndarray, colour_of=None) -> np.ndarray:
    """The grey image (stretched to its 99.5th percentile) as RGB with every nucleus's outline in its colour
    (``colour_of``: a table label → RGB; by default one of a few bright colours, so touching nuclei differ)."""
    grey = np.clip(image.astype(np.float64) / max(np.percentile(image, 99.5), 1) * 255, 0, 255).astype(np.uint8)
    rgb = np.repeat(grey[..., None], 3, axis=-1)
    edge = np.zeros(labels.shape, bool)
    for axis in (0, 1):
        for shift in (1, -1):
            edge |= labels != np.roll(labels, shift, axis=axis)
    edge &= labels > 0
    rgb[edge] = COLOURS[labels[edge] % len(COLOURS)] if colour_of is None else colour_of[labels[edge]]
    return rgb


def caption(picture: Image.Image, text: str) -> Image.Image:
    draw = ImageDraw.Draw(picture)
    draw.rectangle((0, 0, 8 + 7 * len(text), 16), fill=(0, 0, 0))
    draw.text((4, 2), text, fill=(255, 255, 255))
    return picture


def clustered(folder: Path, diameter: float, k: int) -> Image.Image:
    """The three sites from raw TIFFs to clusters (README's commands, in Python): each site's nuclei outlined in
    their cluster's colour (skipped objects white), and eight crops of each cluster beside them."""
    import tifffile

    with tempfile.TemporaryDirectory() as tmp:
        store = ticlust.extract(folder, Path(tmp) / "fly.zarr", channel_suffixes=["D", "F", "R"], segment="nuclei",
                                diameter=diameter, channel=["D", "F", "R"], normalize=False)
        result, _ = fit_store(store, "cell-kmeans", k=k, seed=0)
        table = ticlust.predict(result, store).table
        crops = np.asarray(store.crops[:], np.float64)     # each channel stretched to its 99.5th percentile to show
        crops = np.clip(crops / np.maximum(np.percentile(crops, 99.5, axis=(0, 1, 2)), 1) * 255, 0, 255).astype(np.uint8)
        panels = []
        for site in SITES:
            rows = table[table["image_D"] == f"01_POS{site}_D.TIF"]
            masks = tifffile.imread(rows["labels"].iloc[0])
            colour_of = np.full((int(masks.max()) + 1, 3), 255, np.uint8)
            colour_of[rows["label"].to_numpy()] = COLOURS[rows["cluster"].to_numpy() % len(COLOURS)]
            rgb = outlined(tifffile.imread(folder / f"01_POS{site}_D.TIF"), masks, colour_of)
            half = Image.fromarray(rgb).resize((rgb.shape[1] // 2, rgb.shape[0] // 2), Image.LANCZOS)
            panels.append(caption(half, f"site {site}: {len(rows)} nuclei"))
    side = crops.shape[1]
    gallery = Image.new("RGB", (8 * (side + 2) + 4, k * (side + 18)), (0, 0, 0))
    draw = ImageDraw.Draw(gallery)
    rng = np.random.default_rng(0)
    for c in range(k):
        members = np.flatnonzero(table["cluster"].to_numpy() == c)
        draw.text((4, c * (side + 18) + 2), f"cluster {c}: {len(members)}", fill=tuple(int(v) for v in COLOURS[c]))
        for j, i in enumerate(rng.choice(members, min(8, len(members)), replace=False)):
            gallery.paste(Image.fromarray(crops[i]), (4 + j * (side + 2), c * (side + 18) + 16))
    scale = panels[0].height / gallery.height
    gallery = gallery.resize((int(gallery.width * scale), panels[0].height), Image.NEAREST)
    return side_by_side(panels + [gallery])


def side_by_side(panels: list[Image.Image]) -> Image.Image:
    """The panels in a row, 8 white pixels apart."""
    sheet = Image.new("RGB", (sum(p.width for p in panels) + 8 * (len(panels) - 1), max(p.height for p in panels)),
                      (255, 255, 255))
    x = 0
    for p in panels:
        sheet.paste(p, (x, 0))
        x += p.width + 8
    return sheet


def main() -> None:
    import tifffile

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", help="the folder holding real_fields/ (default: shared/datasets beside the repo)")
    parser.add_argument("--diameter", type=float, default=20.0)
    parser.add_argument("--k", type=int, default=4, help="clusters of the clustered figure")
    args = parser.parse_args()
    folder = fly_folder(args.data_dir)
    panels, detail = [], None
    for site in SITES:
        image = tifffile.imread(folder / f"01_POS{site}_D.TIF")
        labels = segment_nuclei(image, args.diameter)
        rgb = outlined(image, labels)
        half = Image.fromarray(rgb).resize((rgb.shape[1] // 2, rgb.shape[0] // 2), Image.LANCZOS)
        panels.append(caption(half, f"site {site}: {labels.max()} nuclei"))
        if detail is None:                      # a 300 px square of the first site's crowded centre, at 2x
            detail = Image.fromarray(rgb[330:630, 370:670]).resize((600, 600), Image.NEAREST)
    sheet = side_by_side(panels)
    small = {"colors": 96, "method": Image.Quantize.MEDIANCUT}          # a palette keeps the PNGs light in git
    sheet.quantize(**small).save(HERE / "segmentation-fly.png", optimize=True)
    caption(detail, f"site {SITES[0]}, rows 330-630, columns 370-670, 2x").quantize(**small).save(
        HERE / "segmentation-fly-detail.png", optimize=True)
    clustered(folder, args.diameter, args.k).quantize(**small).save(HERE / "segmentation-fly-clusters.png",
                                                                   optimize=True)
    print(f"wrote {HERE / 'segmentation-fly.png'}, {HERE / 'segmentation-fly-detail.png'} and "
          f"{HERE / 'segmentation-fly-clusters.png'}")


if __name__ == "__main__":
    main()
