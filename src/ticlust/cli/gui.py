"""``ticlust gui``: napari with ticlust docked on a sample; the napari code is in ``ticlust._napari.launcher``."""
from __future__ import annotations


def add_parser(sub, common) -> None:
    from ..datasets.samples import SAMPLES     # here, not at the top: a worker process re-imports this module (spawn)

    gui = sub.add_parser("gui", parents=[common], help="open napari with ticlust docked on the nuclei field and its "
                         "segmentation, ready to Run on the objects (other samples: File > Open Sample)")
    gui.add_argument("--sample", choices=sorted(SAMPLES), default="nuclei", help="the sample opened (default: nuclei)")


def run(args) -> int:
    from .._napari.launcher import launch      # only here: the other commands never import napari or Qt

    launch(args.sample)
    return 0
