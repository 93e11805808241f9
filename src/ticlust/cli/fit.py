"""``ticlust fit``: cluster a stack, a bundled sample, the objects of a field (--labels) or an object store,
and save the result."""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..core.atomic import check_outputs, write_atomic
from ..errors import InputError
from ..io.readers import IMAGE_SUFFIXES, folder_images, read_input
from ..plate import STORE_FIT_ALL
from ..result import npz_path
from . import timelapse
from .common import CROP_NEEDS_LABELS, check_in_process, cluster_options, crop_given, crop_options, notes

DEFAULT_OUTPUT = "ticlust_result.npz"


def add_parser(sub, common) -> None:
    from ..datasets.samples import SAMPLES     # here, not at the top: a worker process re-imports this module (spawn)

    fit = sub.add_parser("fit", parents=[common], help="cluster a stack (or landmark set) and save the result")
    fit.add_argument("input", nargs="?", help=".npz, .npy, .tif stack, a folder of images, or landmarks (.csv, .tps)")
    fit.add_argument("--sample", choices=sorted(SAMPLES), help="use a bundled sample instead of INPUT")
    fit.add_argument("--method", default="kmeans", help="clustering method (see `ticlust methods`)")
    fit.add_argument("--k", type=int, help="number of clusters (default: the method's own, see `ticlust methods`)")
    fit.add_argument("--k-scan", nargs="?", const="2-16", metavar="KMIN-KMAX", help="choose K: fit the method at every K "
                     "of the range (default 2-16) on subsamples, print each K's scores and the suggested K; with -o, then "
                     "fit at the suggested K and save that")
    fit.add_argument("--k-scan-criterion", choices=("stability", "silhouette", "knee"), default="knee",
                     help="with --k-scan: the criterion that suggests K (every criterion is printed)")
    fit.add_argument("--k-scan-merge", action="store_true", help="with --k-scan: fit the top K once per repeat and "
                     "merge its clusters down to each K (far fewer fits, for the slow methods)")
    fit.add_argument("--device", default="auto", help="auto, cpu or cuda")
    fit.add_argument("--seed", type=int, default=0)
    fit.add_argument("--runs", type=int, default=1, help="train this many seeds and keep the lowest final loss")
    fit.add_argument("--max-images", type=int, help="cluster a seeded random subset of this many items")
    fit.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="a method parameter (repeatable)")
    fit.add_argument("--key", help="array name inside an .npz input (default: the first)")
    fit.add_argument("--labels-key", help="array of true labels inside the .npz, to print ACC/NMI/ARI")
    fit.add_argument("-o", "--output", help=f"where to save the result (.npz; default {DEFAULT_OUTPUT})")
    fit.add_argument("--csv", help="also write the assignments table here")
    fit.add_argument("--quiet", action="store_true", help="no progress bar")
    # objects from a segmentation: INPUT is a field, --labels its label image
    fit.add_argument("--labels", help="label image of INPUT (.tif/.npy/.npz; 0 = background): cluster its objects "
                     "(cut out and masked; contours as landmarks for shape-kmeans), one CSV row per object")
    crop_options(fit, "with --labels: ")
    fit.add_argument("--fit-sample", type=int, metavar="N", help="INPUT an object store (ticlust extract): fit on a "
                     "seeded sample of N objects spread over its fields (default: all objects, up to "
                     f"{STORE_FIT_ALL:,})")
    cluster_options(fit, "with an object store: run the fit's per-chunk steps (kmeans' and gmm's E-steps)")
    timelapse.add_options(fit)


@dataclass
class FitInput:
    """What a stack, a sample or a field's objects give the fit: the items, their true labels (or None), their
    names (a folder's files, or None), the object table (or None), the method's parameters and a description."""
    data: object
    labels: object
    names: list | None
    objects: dict | None
    params: dict
    source: str


def run(args) -> int:
    """``ticlust fit INPUT`` / ``--sample NAME``: an object store goes to :func:`_fit_store`; anything else is
    fitted in this process."""
    from ..methods import get_method
    from ..api import fit

    if (args.input is None) == (args.sample is None):
        raise InputError("Give either an INPUT file or --sample NAME (one of them).")
    from ..plate.run import is_store

    if args.k_scan is None and (args.k_scan_merge or args.k_scan_criterion != "knee"):
        raise InputError("--k-scan-merge and --k-scan-criterion apply to --k-scan: add --k-scan KMIN-KMAX.")
    scan_only = args.k_scan is not None and args.output is None     # a scan saves a fit only where -o asks for one
    args.output = args.output or DEFAULT_OUTPUT
    if args.input is not None and is_store(args.input):
        if args.k_scan is not None:
            raise InputError("--k-scan scans a stack or a field's objects, not an object store: scan a sample of it "
                             "(ticlust export, or --max-images on the stack it was cut from).")
        return _fit_store(args)
    if args.fit_sample is not None:
        raise InputError("--fit-sample applies to an object store (made by ticlust extract); for a stack use "
                         "--max-images N.")
    check_in_process(args, "fitted")
    lapse = timelapse.wanted(args)
    if lapse:
        timelapse.check(args)
    if not scan_only:
        _check_outputs(args, {"INPUT": args.input, "--labels": args.labels, "--tracks": args.tracks})
    given = _subset(args, _fit_input(args))
    tracks = timelapse.tracks_for(args, given.objects, int(given.data.shape[0])) if lapse else None
    k = get_method(args.method).default_k if args.k is None else args.k
    if args.k_scan is not None:
        k = _k_scan(args, given)
        if scan_only:
            return 0
    print(f"ticlust: {args.method}, K={k}, {given.data.shape[0]} items from {given.source}", file=sys.stderr)
    with notes():
        result = fit(given.data, method=args.method, k=k, device=args.device, seed=args.seed, runs=args.runs,
                     progress=not args.quiet, **given.params)
    if args.labels is not None:
        from ..plate.view import record_route

        record_route(result, vars(args))
    out = result.save(args.output)
    done = timelapse.states(args, result, tracks) if lapse else None
    if args.csv:
        columns = given.objects if done is None else {**(given.objects or {}), **timelapse.object_columns(done)}
        result.assignments_table(args.csv, names=given.names, columns=columns)
    _report(result, out, given.labels)
    return 0


def _k_scan(args, given: FitInput) -> int:
    """--k-scan KMIN-KMAX: the method fitted at every K of the range (``ticlust.evaluation.scan_k``), each K's scores
    printed and the suggested K returned."""
    from ..evaluation import scan_k

    if args.k is not None:
        raise InputError("--k and --k-scan both choose K: give one of them.")
    low, sep, high = args.k_scan.partition("-")
    if not (sep and low.strip().isdigit() and high.strip().isdigit()):
        raise InputError(f"--k-scan {args.k_scan} must look like KMIN-KMAX, e.g. 2-16.")
    print(f"ticlust: K scan of {args.method}, K={low}-{high}, {given.data.shape[0]} items from {given.source}",
          file=sys.stderr)
    with notes():
        scan = scan_k(given.data, method=args.method, ks=range(int(low), int(high) + 1), device=args.device,
                      seed=args.seed, merge=args.k_scan_merge, criterion=args.k_scan_criterion, progress=not args.quiet,
                      **given.params)
    print(scan.table())
    fits = f"{scan.repeats} fits of K={scan.ks[-1]} merged down" if scan.merged else f"{scan.repeats} fits per K"
    print(f"suggested K = {scan.suggested} (highest {scan.criterion}; {fits} on {scan.fraction:.0%} subsamples of "
          f"{scan.items} items)")
    return scan.suggested


def _check_outputs(args, inputs: dict) -> None:
    """-o, --csv and the state tables through the output guard (``core.atomic.check_outputs``) before the fit, not
    after it."""
    check_outputs(inputs, {"-o": npz_path(args.output) if args.output else None, "--csv": args.csv,
                           **timelapse.outputs(args)})


def _fit_input(args) -> FitInput:
    """INPUT or --sample read, and with --labels its objects cut out; a lone 2-D image is refused."""
    from ..datasets.samples import sample

    if args.sample:
        data, labels = sample(args.sample, seed=args.seed)
        source = f"sample {args.sample}"
    else:
        data, labels = read_input(args.input, key=args.key, labels_key=args.labels_key)
        source = args.input
    params = _params(args)
    objects = None
    if args.labels is not None:
        data, objects, params = field_objects(args, data, params)
        source = f"{objects['label'].size} objects of {args.input}"
    elif crop_given(args):
        raise InputError(CROP_NEEDS_LABELS)
    elif np.ndim(data) == 2 and Path(args.input).suffix.lower() in IMAGE_SUFFIXES:
        raise InputError(f"{Path(args.input).name} is a single 2-D image, not a stack: give a stack of images, a folder "
                         "of images, or the image with --labels MASK to cluster the objects in it.")
    # a folder's rows are named by their files (the CSV is useless without them)
    names = [p.name for p in folder_images(args.input)] if args.input and Path(args.input).is_dir() else None
    return FitInput(data, labels, names, objects, params, source)


def _subset(args, given: FitInput) -> FitInput:
    """--max-images: a seeded random subset of the items, with their labels, names and object rows."""
    from ..core.validation import random_subset

    index = random_subset(int(given.data.shape[0]), args.max_images, args.seed)
    if index is None:
        return given
    return FitInput(np.asarray(given.data[index]), None if given.labels is None else given.labels[index],
                    None if given.names is None else [given.names[i] for i in index],
                    None if given.objects is None else {c: v[index] for c, v in given.objects.items()},
                    given.params, given.source)


def _report(result, out, labels=None) -> None:
    """The fit's device, time, loss and cluster sizes; ACC/NMI/ARI against true ``labels``; where it was saved."""
    sizes = ", ".join(str(s) for s in result.cluster_sizes())
    print(f"device {result.device}; {result.timing['total_s']:.1f} s; final loss {result.final_loss:.6g}")
    print(f"cluster sizes: {sizes}")
    if labels is not None:
        from ..metrics import evaluate

        scores = evaluate(labels, result.labels)
        print("ACC {acc:.4f}  ACC(majority) {acc_majority:.4f}  NMI {nmi:.4f}  ARI {ari:.4f}".format(**scores))
    print(f"saved {out}")


def _params(args) -> dict:
    """The method parameters of --set NAME=VALUE (values stay text: the method's config parses them)."""
    params = {}
    for item in args.set:
        if "=" not in item:
            raise InputError(f"--set {item!r} must look like name=value.")
        name, value = item.split("=", 1)
        params[name.strip()] = value
    return params


def field_objects(args, field, params: dict):
    """The objects of --labels cut out of the field INPUT (or their contours, for shape methods):
    (items, object table, the method's parameters for objects), by the one objects route."""
    from ..objects.route import objects_route

    if args.input is None:
        raise InputError("--labels needs the field image as INPUT (it does not apply to --sample).")
    mask, _ = read_input(args.labels)
    route = objects_route(field, mask, args.method, params, keep_border=args.keep_border, size=args.crop_size,
                          channel=args.channel, rescale=args.rescale, orient=args.orient, normalize=args.normalize)
    return route.items, route.table, route.params


def _fit_store(args) -> int:
    """``ticlust fit STORE --fit-sample N``: fit on a seeded sample spread over the store's fields."""
    from ..methods import get_method
    from ..plate.run import fit_store, store_inputs
    from ..plate.store import open_objects

    from ..core.validation import check_seed

    _check_store_flags(args)
    _check_outputs(args, {"INPUT": args.input})      # inside the store: refused before the store is even opened
    check_seed(args.seed)
    store = open_objects(args.input)
    _check_outputs(args, {"INPUT": args.input, **store_inputs(store)})
    store.check_parts()                # a damaged table or a missing part: refused before the fit is announced
    if args.fit_sample is None and len(store) > STORE_FIT_ALL:
        raise InputError(f"{args.input} holds {len(store):,} objects: fit on a sample of them with --fit-sample N "
                         f"(e.g. --fit-sample 20000), then assign them all with ticlust predict.")
    k = get_method(args.method).default_k if args.k is None else args.k
    n = len(store) if args.fit_sample is None else min(args.fit_sample, len(store))
    print(f"ticlust: {args.method}, K={k}, a sample of {n} of the {len(store)} objects of {args.input}", file=sys.stderr)
    with notes():
        result, index = fit_store(store, method=args.method, k=k, sample=args.fit_sample, seed=args.seed,
                                  device=args.device, runs=args.runs, progress=not args.quiet, workers=args.workers,
                                  scheduler=args.scheduler, **_params(args))
    out = result.save(args.output)
    if args.csv:
        rows = _sample_rows(store, index, result)
        write_atomic(args.csv, lambda tmp: rows.to_csv(tmp, index=False))
    _report(result, out)
    return 0


def _check_store_flags(args) -> None:
    """Refuse the options of reading or cutting a stack: a store's objects were cut by ``ticlust extract``."""
    wrong = [flag for flag, value in (("--labels", args.labels), ("--max-images", args.max_images), ("--key", args.key),
                                      ("--labels-key", args.labels_key), ("--crop-size", args.crop_size),
                                      ("--channel", args.channel), ("--orient", args.orient),
                                      ("--normalize", args.normalize))
             if value is not None] + [flag for flag, on in (("--keep-border", args.keep_border),
                                                            ("--rescale", args.rescale)) if on]
    if wrong:
        raise InputError(f"{', '.join(wrong)} do(es) not apply to an object store: its objects were cut by ticlust "
                         "extract (extract again to change how).")
    if timelapse.wanted(args):
        raise InputError("The states along a plate's tracks come with the prediction of every object: ticlust predict "
                         "RESULT STORE --time COLUMN --smooth ... (a fit on a store is a sample, not whole tracks).")


def _sample_rows(store, index, result):
    """The fit sample's rows of the store's table (a DataFrame), each with its ``object`` number and its cluster."""
    from ..plate.run import assignment_columns, map_columns

    rows = store.table.iloc[index].reset_index(drop=True)
    rows.insert(0, "object", index)
    for name, values in {**assignment_columns(result.labels, result.scores), **map_columns(result)}.items():
        rows[name] = values
    return rows
