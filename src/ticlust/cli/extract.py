"""``ticlust extract``: every object of a plate cut into an object store, resumable."""
from __future__ import annotations

import argparse

from ..errors import InputError
from .common import cluster_options, crop_options, notes, route_defaults


def z_choice(text: str):
    """An argparse type: ``--z`` as a plane index or ``max``, read by ``plate.store.z_option`` as the API reads it."""
    from ..plate.store import z_option

    try:
        return z_option(text)
    except InputError as exc:
        raise argparse.ArgumentTypeError(str(exc).rstrip(".")) from None


def add_parser(sub, common) -> None:
    extract = sub.add_parser("extract", parents=[common], help="cut every object of a plate into an object store "
                             "(crops, masks and one table row per object), resumable")
    extract.add_argument("input", help="a folder of field images with masks named NAME_cp_masks.tif, NAME_masks.tif or "
                         "NAME.labels.tif (microscope files: one field per scene, masks NAME_s<k>_masks.tif); a CSV "
                         "manifest with columns image,labels, one image_<Channel> column per channel, or CellProfiler "
                         "LoadData columns (+ any carried to every row); an OME-Zarr image or HCS plate with labels; "
                         "or one field image with --labels MASK")
    extract.add_argument("-o", "--output", required=True, metavar="STORE",
                         help="the object store to write, or to finish when a run stopped (a folder, e.g. plate.zarr)")
    extract.add_argument("--labels", help="the mask of a single field image, which label image of an OME-Zarr, or which "
                         "object set (ObjectsFileName_<Name>) of a LoadData manifest")
    crop_options(extract, "")
    extract.add_argument("--z", type=z_choice, metavar="N|max", help="the Z plane of fields with several (from 0), "
                         "or max for their maximum projection")
    cluster_options(extract, "cut the fields")
    extract.add_argument("--quiet", action="store_true", help="no progress bar")


def run(args) -> int:
    from ..plate.store import extract

    route_defaults(args)
    with notes():
        store = extract(args.input, args.output, labels=args.labels, crop_size=args.crop_size,
                        keep_border=args.keep_border, channel=args.channel, orient=args.orient,
                        normalize=args.normalize, rescale=args.rescale, z=args.z, workers=args.workers,
                        scheduler=args.scheduler, progress=not args.quiet)
    fields = store.attributes["input"]["fields"]
    item = f"{store.size}×{store.size}" + (f"×{store.channels}" if store.channels else "")
    print(f"{store.path}: {len(store)} objects ({item} {store.dtype} crops) from {fields - len(store.failed)} of "
          f"{fields} fields")
    return 0
