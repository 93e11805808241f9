"""Make docs/segmentation-fly.png and docs/segmentation-fly-detail.png: the nuclei ``ticlust.segment_nuclei`` finds
in CellProfiler's ExampleFly fields (three real Drosophila sites, no masks ship with them), outlined over the DNA
channel, so that a reader can judge the segmentation by eye (there is no truth for these fields).

Drawn with NumPy and Pillow only: an outline pixel is a nucleus pixel with a 4-neighbour of another label; each
nucleus gets one of a few bright colours, so that touching nuclei are told apart.

    PYTHONPATH=src python docs/make_segmentation_figure.py [--data-dir shared/datasets] [--diameter 20]
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from ticlust import segment_nuclei

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


def outlined(image: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """The grey image (stretched to its 99.5th percentile) as RGB with every nucleus's outline in its colour."""
    grey = np.clip(image.astype(np.float64) / max(np.percentile(image, 99.5), 1) * 255, 0, 255).astype(np.uint8)
    rgb = np.repeat(grey[..., None], 3, axis=-1)
    edge = np.zeros(labels.shape, bool)
    for axis in (0, 1):
        for shift in (1, -1):
            edge |= labels != np.roll(labels, shift, axis=axis)
    edge &= labels > 0
    rgb[edge] = COLOURS[labels[edge] % len(COLOURS)]
    return rgb


def caption(picture: Image.Image, text: str) -> Image.Image:
    draw = ImageDraw.Draw(picture)
    draw.rectangle((0, 0, 8 + 7 * len(text), 16), fill=(0, 0, 0))
    draw.text((4, 2), text, fill=(255, 255, 255))
    return picture


def main() -> None:
    import tifffile

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", help="the folder holding real_fields/ (default: shared/datasets beside the repo)")
    parser.add_argument("--diameter", type=float, default=20.0)
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
    sheet = Image.new("RGB", (sum(p.width for p in panels) + 8 * (len(panels) - 1), panels[0].height), (255, 255, 255))
    x = 0
    for p in panels:
        sheet.paste(p, (x, 0))
        x += p.width + 8
    small = {"colors": 96, "method": Image.Quantize.MEDIANCUT}          # a palette keeps the PNGs light in git
    sheet.quantize(**small).save(HERE / "segmentation-fly.png", optimize=True)
    caption(detail, f"site {SITES[0]}, rows 330-630, columns 370-670, 2x").quantize(**small).save(
        HERE / "segmentation-fly-detail.png", optimize=True)
    print(f"wrote {HERE / 'segmentation-fly.png'} and {HERE / 'segmentation-fly-detail.png'}")


if __name__ == "__main__":
    main()
