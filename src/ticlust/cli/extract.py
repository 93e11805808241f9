"""``ticlust extract``: every object of a plate cut into an object store, resumable."""
from __future__ import annotations

import argparse

from ..errors import InputError
from ..objects.crops import OVERSIZE
from ..objects.segment import OBJECTS, THRESHOLDS
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
    extract.add_argument("input", help="a folder of field images with masks named NAME_cp_masks.tif, NAME_masks.tif, "
                         "NAME.labels.tif, NAME_labels.tif or Cellpose's NAME_seg.npy (microscope files: one field per "
                         "scene, masks NAME_s<k>_masks.tif); a CSV manifest with columns image,labels, one "
                         "image_<Channel> column per channel, or CellProfiler's LoadData or per-image table columns (+ "
                         "any carried to every row); an OME-Zarr image or HCS plate with labels; or one field image "
                         "with --labels MASK. Without masks: --segment nuclei")
    extract.add_argument("-o", "--output", required=True, metavar="STORE",
                         help="the object store to write, or to finish when a run stopped (a folder, e.g. plate.zarr)")
    extract.add_argument("--labels", help="the mask of a single field image, which label image of an OME-Zarr, or which "
                         "object set (ObjectsFileName_<Name>) of a LoadData manifest")
    extract.add_argument("--channel-suffixes", metavar="S[,S]", help="INPUT is a folder of one file per channel named "
                         "NAME_<S>.tif (e.g. D,F,R for NAME_D.tif, NAME_F.tif, NAME_R.tif): one field per NAME, its "
                         "channels named by the suffixes")
    segment = extract.add_argument_group("segmenting fields without masks")
    segment.add_argument("--segment", choices=OBJECTS, help="find the nuclei (in the first channel --channel names) "
                         "instead of reading masks; the masks are written beside the store (STORE_masks/)")
    segment.add_argument("--diameter", type=float, metavar="PX", help="the nuclei's expected diameter in pixels "
                         "(with --segment)")
    segment.add_argument("--threshold", choices=THRESHOLDS, help="how the nuclei are told from the background: li "
                         "(default, CellProfiler's), otsu, triangle (dim nuclei), local (uneven illumination)")
    crop_options(extract, "")
    extract.add_argument("--oversize", choices=OVERSIZE, default=OVERSIZE[0], help="an object larger than the crop is "
                         "left out and listed in the store's skipped table (skip, the default) or zoomed down to the "
                         "crop (rescale); its field's other objects are kept either way")
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
                        normalize=args.normalize, rescale=args.rescale, z=args.z, oversize=args.oversize,
                        segment=args.segment, diameter=args.diameter, threshold=args.threshold,
                        channel_suffixes=args.channel_suffixes, workers=args.workers, scheduler=args.scheduler,
                        progress=not args.quiet)
    fields = store.attributes["input"]["fields"]
    item = f"{store.size}×{store.size}" + (f"×{store.channels}" if store.channels else "")
    skipped = f", {len(store.skipped)} left out (skipped table)" if len(store.skipped) else ""
    print(f"{store.path}: {len(store)} objects ({item} {store.dtype} crops) from {fields - len(store.failed)} of "
          f"{fields} fields{skipped}")
    if args.segment:
        from ..plate.segment import MANIFEST, masks_folder

        print(f"masks: {masks_folder(store.path)} (correct them, then extract {masks_folder(store.path) / MANIFEST})")
    return 0
