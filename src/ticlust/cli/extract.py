"""``ticlust extract``: every object of a plate cut into an object store, resumable."""
from __future__ import annotations

from .common import cluster_options, crop_options, notes, route_defaults


def add_parser(sub, common) -> None:
    extract = sub.add_parser("extract", parents=[common], help="cut every object of a plate into an object store "
                             "(crops, masks and one table row per object), resumable")
    extract.add_argument("input", help="a folder of field images with masks named NAME_cp_masks.tif, NAME_masks.tif or "
                         "NAME.labels.tif; a CSV manifest with columns image,labels (+ any carried to every row); an "
                         "OME-Zarr image with labels; or one field image with --labels MASK")
    extract.add_argument("-o", "--output", required=True, metavar="STORE",
                         help="the object store to write, or to finish when a run stopped (a folder, e.g. plate.zarr)")
    extract.add_argument("--labels", help="the mask of a single field image, or which label image of an OME-Zarr")
    crop_options(extract, "")
    cluster_options(extract, "cut the fields")
    extract.add_argument("--quiet", action="store_true", help="no progress bar")


def run(args) -> int:
    from ..plate.store import extract

    route_defaults(args)
    with notes():
        store = extract(args.input, args.output, labels=args.labels, crop_size=args.crop_size,
                        keep_border=args.keep_border, channel=args.channel, orient=args.orient,
                        normalize=args.normalize, rescale=args.rescale, workers=args.workers,
                        scheduler=args.scheduler, progress=not args.quiet)
    fields = store.attributes["input"]["fields"]
    item = f"{store.size}×{store.size}" + (f"×{store.channels}" if store.channels else "")
    print(f"{store.path}: {len(store)} objects ({item} {store.dtype} crops) from {fields - len(store.failed)} of "
          f"{fields} fields")
    return 0
