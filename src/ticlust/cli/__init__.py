"""Command line: ``ticlust methods``, ``ticlust fit``, ``ticlust extract``, ``ticlust predict``, ``ticlust export``,
``ticlust curate``, ``ticlust gui``."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
import warnings

import numpy as np

from ..core.atomic import check_outputs
from ..errors import InputError
from ..io.readers import IMAGE_SUFFIXES, folder_images, read_input
from ..result import OUTLIER, npz_path


def main(argv: list[str] | None = None) -> int:
    from ..datasets.samples import SAMPLES     # here, not at the top: a worker process re-imports this module (spawn)

    parser = argparse.ArgumentParser(prog="ticlust", description="Transformation-invariant clustering of image stacks and landmark shapes.")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true", help="show the full traceback of an unexpected error")
    sub = parser.add_subparsers(dest="command", required=True)

    sub.add_parser("methods", parents=[common], help="list the methods and their parameters with defaults")

    fit = sub.add_parser("fit", parents=[common], help="cluster a stack (or landmark set) and save the result")
    fit.add_argument("input", nargs="?", help=".npz, .npy, .tif stack, a folder of images, or landmarks (.csv, .tps)")
    fit.add_argument("--sample", choices=sorted(SAMPLES), help="use a bundled sample instead of INPUT")
    fit.add_argument("--method", default="kmeans", help="clustering method (see `ticlust methods`)")
    fit.add_argument("--k", type=int, help="number of clusters (default: the method's own, see `ticlust methods`)")
    fit.add_argument("--device", default="auto", help="auto, cpu or cuda")
    fit.add_argument("--seed", type=int, default=0)
    fit.add_argument("--runs", type=int, default=1, help="train this many seeds and keep the lowest final loss")
    fit.add_argument("--max-images", type=int, help="cluster a seeded random subset of this many items")
    fit.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="a method parameter (repeatable)")
    fit.add_argument("--key", help="array name inside an .npz input (default: the first)")
    fit.add_argument("--labels-key", help="array of true labels inside the .npz, to print ACC/NMI/ARI")
    fit.add_argument("-o", "--output", default="ticlust_result.npz", help="where to save the result (.npz)")
    fit.add_argument("--csv", help="also write the assignments table here")
    fit.add_argument("--quiet", action="store_true", help="no progress bar")
    # objects from a segmentation (issue 14): INPUT is a field, --labels its label image
    fit.add_argument("--labels", help="label image of INPUT (.tif/.npy/.npz; 0 = background): cluster its objects "
                     "(cut out and masked; contours as landmarks for shape-kmeans), one CSV row per object")
    crop_options(fit, "with --labels: ")
    fit.add_argument("--fit-sample", type=int, metavar="N", help="INPUT an object store (ticlust extract): fit on a "
                     "seeded sample of N objects spread over its fields (default: all objects, up to "
                     f"{STORE_FIT_ALL:,})")
    cluster_options(fit, "with an object store: run the fit's per-chunk steps (kmeans' and gmm's E-steps)")

    predict = sub.add_parser("predict", parents=[common], help="assign every object of a store (or a stack, or a "
                             "field with --labels) with a saved result, in chunks, resumable on a store")
    predict.add_argument("result", help="a result file written by ticlust fit -o")
    predict.add_argument("input", help="an object store (ticlust extract), a stack (.npz, .npy, .tif, a folder of "
                         "images, landmarks), or a field image with --labels MASK")
    predict.add_argument("--labels", help="label image of INPUT: assign its objects (cut as ticlust fit --labels does)")
    predict.add_argument("--key", help="array name inside an .npz input (default: the first)")
    predict.add_argument("--csv", help="write the table (one row per object or item, with cluster, score, runner_up) here")
    predict.add_argument("--parquet", help="write the same table as Parquet here")
    predict.add_argument("--batch-size", type=int, help=f"items assigned at once (default: {4096})")
    predict.add_argument("--device", default="auto", help="auto, cpu or cuda")
    predict.add_argument("--quiet", action="store_true", help="no progress bar")
    predict.add_argument("--save-aligned", action="store_true", help="INPUT an object store: also write every object "
                         "aligned with its prototype into the store, part by part (methods that align)")
    crop_options(predict, "with --labels: ")
    cluster_options(predict, "assign the store's parts")

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

    export = sub.add_parser("export", parents=[common], help="pictures of a saved result: per-cluster galleries and the prototype montage")
    export.add_argument("result", help="a result file written by ticlust fit -o")
    export.add_argument("--gallery", required=True, metavar="FOLDER", help="write prototypes.png and cluster_NN.png here")
    export.add_argument("--input", required=True, help="the stack the result was fitted on (as given to ticlust fit)")
    export.add_argument("--key", help="array name inside an .npz input (default: the first)")
    export.add_argument("--max-items", type=at_least_one, default=60, help="members shown per cluster, closest first")

    curate = sub.add_parser("curate", parents=[common], help="edit a saved result by hand: move items, mark outliers "
                            "or merge two clusters (one edit per call)")
    curate.add_argument("result", help="a result file written by ticlust fit -o (or by ticlust curate)")
    edit = curate.add_mutually_exclusive_group(required=True)
    edit.add_argument("--move", metavar="ITEMS", help="put these items into cluster --to and pin them there: item "
                      "numbers and inclusive ranges, e.g. \"3, 8-12\"")
    edit.add_argument("--outliers", metavar="ITEMS", help="mark these items as outliers (flagged in the CSV, left out "
                      "when the result is refined), e.g. \"3, 8-12\"")
    edit.add_argument("--merge", nargs=2, type=int, metavar=("A", "B"),
                      help="cluster B joins cluster A (the clusters after B are numbered one lower)")
    curate.add_argument("--to", type=int, metavar="CLUSTER", help="with --move: the cluster the items go into")
    curate.add_argument("-o", "--output", required=True, help="where to save the edited result (.npz; not the input)")
    curate.add_argument("--csv", help="also write the assignments table here")

    gui = sub.add_parser("gui", parents=[common], help="open napari with ticlust docked on the nuclei field and its "
                         "segmentation, ready to Run on the objects (other samples: File > Open Sample)")
    gui.add_argument("--sample", choices=sorted(SAMPLES), default="nuclei", help="the sample opened (default: nuclei)")

    args = parser.parse_args(argv)
    try:
        if args.command == "methods":
            return _methods()
        if args.command == "fit":
            return _fit(args)
        if args.command == "export":
            return _export(args)
        if args.command == "extract":
            return _extract(args)
        if args.command == "predict":
            return _predict(args)
        if args.command == "curate":
            return _curate(args)
        return _gui(args.sample)
    except InputError as exc:
        print(f"ticlust: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:            # `ticlust methods | head`: the reader left, nothing is wrong
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        print("ticlust: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:           # a bug or an environment fault: one line, the traceback on --debug
        if args.debug:
            raise
        print(f"ticlust: error: {type(exc).__name__}: {exc}. This is unexpected: run again with --debug for the "
              "traceback and report it.", file=sys.stderr)
        return 2


def crop_options(parser, note: str) -> None:
    """The options of cutting objects out of a field, shared by ``fit --labels`` and ``extract``."""
    parser.add_argument("--keep-border", action="store_true", help=f"{note}keep objects that touch the image border")
    parser.add_argument("--crop-size", type=int, help=f"{note}crop side in pixels (default: fits the largest object)")
    parser.add_argument("--channel", type=int, help=f"{note}keep this channel of a multi-channel field")
    parser.add_argument("--rescale", action="store_true", help=f"{note}zoom every object to fill the crop")
    parser.add_argument("--orient", action=argparse.BooleanOptionalAction,
                        help=f"{note}turn every object's major axis along x (default: on)")
    parser.add_argument("--normalize", action=argparse.BooleanOptionalAction,
                        help=f"{note}divide every object by its mean brightness (default: on)")


def cluster_options(parser, what: str) -> None:
    """Where the per-field / per-chunk steps run (docs/cluster.md): this process, a local dask cluster, a running one."""
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--workers", type=int, metavar="N", help=f"{what} on a local dask cluster of N worker processes "
                       "started for this run (default: in this process)")
    where.add_argument("--scheduler", metavar="ADDRESS", help=f"{what} on a running dask cluster, e.g. "
                       "tcp://HOST:8786 (its workers must see the same paths)")


def _route_defaults(args) -> None:
    """The objects route's defaults where no --(no-)orient / --(no-)normalize was given."""
    from ..objects.crops import ROUTE_OPTIONS

    for name, default in ROUTE_OPTIONS.items():
        if getattr(args, name) is None:
            setattr(args, name, default)


def _extract(args) -> int:
    from ..plate.store import extract

    _route_defaults(args)
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = lambda message, *a, **k: print(f"ticlust: note: {message}", file=sys.stderr)
        store = extract(args.input, args.output, labels=args.labels, crop_size=args.crop_size,
                        keep_border=args.keep_border, channel=args.channel, orient=args.orient,
                        normalize=args.normalize, rescale=args.rescale, workers=args.workers,
                        scheduler=args.scheduler, progress=not args.quiet)
    fields = store.attributes["input"]["fields"]
    item = f"{store.size}×{store.size}" + (f"×{store.channels}" if store.channels else "")
    print(f"{store.path}: {len(store)} objects ({item} {store.dtype} crops) from {fields - len(store.failed)} of "
          f"{fields} fields")
    return 0


def check_writable(flag: str, path: Path) -> None:
    """Fail before a long fit, not after it, when an output file cannot be written."""
    existed = path.exists()
    try:
        with open(path, "ab"):
            pass
    except OSError as exc:
        raise InputError(f"{flag} {path}: cannot write there ({exc.strerror}): choose a file in a folder that exists and is writable.") from None
    if not existed:
        path.unlink()


def at_least_one(text: str) -> int:
    """An argparse type: a whole number of at least 1 (anything else is argparse's one-line error)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be a whole number of at least 1")
    return value


def _export(args) -> int:
    """``ticlust export RESULT --input STACK --gallery FOLDER``: no picture written over an input."""
    from ..io.gallery import export_gallery, gallery_files
    from ..api import load_result

    inputs = {"RESULT": args.result, "--input": args.input}
    check_outputs(inputs, {"--gallery": args.gallery})
    result = load_result(args.result)
    check_outputs(inputs, {f"--gallery's {p.name}": p for p in gallery_files(result, args.gallery)})
    images, _ = read_input(args.input, key=args.key)
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = lambda message, *a, **k: print(f"ticlust: note: {message}", file=sys.stderr)
        paths = export_gallery(result, images, args.gallery, args.max_items)
    for path in paths:
        print(f"wrote {path}")
    return 0


def _curate(args) -> int:
    """``ticlust curate RESULT``: one hand edit of ``ticlust.curation`` (items in its one selector grammar,
    ``curation.item_index``), saved to a new file; refine it in Python or napari, where the data is."""
    from .. import curation
    from ..api import load_result

    if args.move is not None and args.to is None:
        raise InputError("--move needs --to CLUSTER: the cluster the items go into.")
    if args.move is None and args.to is not None:
        raise InputError("--to only applies with --move.")
    check_outputs({"RESULT": args.result}, {"-o": npz_path(args.output), "--csv": args.csv})
    for flag, target in (("-o", npz_path(args.output)), ("--csv", args.csv)):
        if target is not None:
            check_writable(flag, Path(target))
    result = load_result(args.result)
    if args.move is not None:
        edited = curation.move(result, args.move, args.to)
        count = len(edited.edits[-1]["items"])
        done = f"moved {count} item{'s' * (count != 1)} to cluster {args.to} (pinned there)"
    elif args.outliers is not None:
        edited = curation.mark_outliers(result, args.outliers)
        count = len(edited.edits[-1]["items"])
        done = (f"marked {count} item{'s' * (count != 1)} as outliers "
                f"({int(np.sum(edited.pinned == OUTLIER))} outliers in all)")
    else:
        edited = curation.merge(result, *args.merge)
        done = f"merged cluster {args.merge[1]} into {args.merge[0]}"
    out = edited.save(args.output)
    if args.csv:
        edited.assignments_table(args.csv)
    print(done)
    print(f"cluster sizes: {', '.join(str(s) for s in edited.cluster_sizes())}")
    print(f"saved {out}")
    return 0


def _methods() -> int:
    from ..methods import available_methods, get_method
    from ..methods.base import param_infos

    for name in available_methods():
        spec = get_method(name)
        print(f"{name}: {spec.title} [{', '.join(spec.inputs)}; K = {spec.default_k} by default]" + (f" — {spec.paper}" if spec.paper else ""))
        for info in param_infos(spec.config):
            choices = f" one of {', '.join(map(str, info.choices))};" if info.choices else ""
            print(f"    {info.name} = {info.default!r}:{choices} {info.doc}")
    return 0


def _fit(args) -> int:
    from ..methods import get_method
    from ..datasets.samples import sample
    from ..core.validation import random_subset
    from ..api import fit
    from ..metrics import evaluate

    if (args.input is None) == (args.sample is None):
        raise InputError("Give either an INPUT file or --sample NAME (one of them).")
    from ..plate.store import read_attributes

    if args.input is not None and read_attributes(args.input) is not None:
        return _fit_store(args)
    if args.fit_sample is not None:
        raise InputError("--fit-sample applies to an object store (made by ticlust extract); for a stack use "
                         "--max-images N.")
    if args.workers is not None or args.scheduler is not None:
        raise InputError("--workers and --scheduler apply to an object store (ticlust extract): a stack or a field is "
                         "fitted in this process.")
    check_outputs({"INPUT": args.input, "--labels": args.labels},
                  {"-o": npz_path(args.output) if args.output else None, "--csv": args.csv})
    for flag, target in (("-o", args.output), ("--csv", args.csv)):
        if target is not None:
            check_writable(flag, npz_path(target) if flag == "-o" else Path(target))
    if args.sample:
        data, labels = sample(args.sample, seed=args.seed)
        source = f"sample {args.sample}"
    else:
        data, labels = read_input(args.input, key=args.key, labels_key=args.labels_key)
        source = args.input
    params = _params(args)
    objects = None
    if args.labels is not None:
        data, objects, params = _objects(args, data, params)
        source = f"{objects['label'].size} objects of {args.input}"
    elif args.keep_border or args.rescale or args.orient is not None or args.normalize is not None \
            or args.crop_size is not None or args.channel is not None:
        raise InputError("--keep-border, --crop-size, --channel, --rescale, --(no-)orient and --(no-)normalize only apply "
                         "with --labels MASK.")
    elif np.ndim(data) == 2 and Path(args.input).suffix.lower() in IMAGE_SUFFIXES:
        raise InputError(f"{Path(args.input).name} is a single 2-D image, not a stack: give a stack of images, a folder "
                         "of images, or the image with --labels MASK to cluster the objects in it.")
    # a folder's rows are named by their files (the CSV is useless without them)
    names = [p.name for p in folder_images(args.input)] if args.input and Path(args.input).is_dir() else None
    index = random_subset(int(data.shape[0]), args.max_images, args.seed)
    if index is not None:
        data = np.asarray(data[index])
        labels = None if labels is None else labels[index]
        objects = None if objects is None else {c: v[index] for c, v in objects.items()}
        names = None if names is None else [names[i] for i in index]
    k = get_method(args.method).default_k if args.k is None else args.k
    print(f"ticlust: {args.method}, K={k}, {data.shape[0]} items from {source}", file=sys.stderr)
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = lambda message, *a, **k: print(f"ticlust: note: {message}", file=sys.stderr)
        result = fit(data, method=args.method, k=k, device=args.device, seed=args.seed, runs=args.runs,
                     progress=not args.quiet, **params)
    if args.labels is not None:
        from ..plate.view import record_route

        record_route(result, vars(args))
    out = result.save(args.output)
    if args.csv:
        result.assignments_table(args.csv, names=names, columns=objects)
    sizes = ", ".join(str(s) for s in result.cluster_sizes())
    print(f"device {result.device}; {result.timing['total_s']:.1f} s; final loss {result.final_loss:.6g}")
    print(f"cluster sizes: {sizes}")
    if labels is not None:
        scores = evaluate(labels, result.labels)
        print("ACC {acc:.4f}  ACC(majority) {acc_majority:.4f}  NMI {nmi:.4f}  ARI {ari:.4f}".format(**scores))
    print(f"saved {out}")
    return 0


#: A store is fitted whole without --fit-sample up to this many objects.
STORE_FIT_ALL = 50_000


def _params(args) -> dict:
    params = {}
    for item in args.set:
        if "=" not in item:
            raise InputError(f"--set {item!r} must look like name=value.")
        name, value = item.split("=", 1)
        params[name.strip()] = value
    return params


def _fit_store(args) -> int:
    """``ticlust fit STORE --fit-sample N``: fit on a seeded sample spread over the store's fields."""
    from ..methods import get_method
    from ..plate.run import fit_store
    from ..plate.store import open_objects

    wrong = [flag for flag, value in (("--labels", args.labels), ("--max-images", args.max_images), ("--key", args.key),
                                      ("--labels-key", args.labels_key), ("--crop-size", args.crop_size),
                                      ("--channel", args.channel), ("--orient", args.orient),
                                      ("--normalize", args.normalize))
             if value is not None] + [flag for flag, on in (("--keep-border", args.keep_border),
                                                            ("--rescale", args.rescale)) if on]
    if wrong:
        raise InputError(f"{', '.join(wrong)} do(es) not apply to an object store: its objects were cut by ticlust "
                         "extract (extract again to change how).")
    check_outputs({"INPUT": args.input}, {"-o": npz_path(args.output) if args.output else None, "--csv": args.csv})
    for flag, target in (("-o", args.output), ("--csv", args.csv)):
        if target is not None:
            check_writable(flag, npz_path(target) if flag == "-o" else Path(target))
    store = open_objects(args.input)
    if args.fit_sample is None and len(store) > STORE_FIT_ALL:
        raise InputError(f"{args.input} holds {len(store):,} objects: fit on a sample of them with --fit-sample N "
                         f"(e.g. --fit-sample 20000), then assign them all with ticlust predict.")
    k = get_method(args.method).default_k if args.k is None else args.k
    n = len(store) if args.fit_sample is None else min(args.fit_sample, len(store))
    print(f"ticlust: {args.method}, K={k}, a sample of {n} of the {len(store)} objects of {args.input}", file=sys.stderr)
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = lambda message, *a, **k: print(f"ticlust: note: {message}", file=sys.stderr)
        result, index = fit_store(store, method=args.method, k=k, sample=args.fit_sample, seed=args.seed,
                                  device=args.device, runs=args.runs, progress=not args.quiet, workers=args.workers,
                                  scheduler=args.scheduler, **_params(args))
    out = result.save(args.output)
    if args.csv:                     # the sample's rows of the store's table, with their clusters
        import pyarrow.parquet as pq

        from ..plate.run import assignment_columns

        rows = pq.read_table(store.path / "table.parquet").take(index).to_pandas()
        rows.insert(0, "object", index)
        for name, values in assignment_columns(result.labels, result.scores).items():
            rows[name] = values
        rows.to_csv(args.csv, index=False)
    print(f"device {result.device}; {result.timing['total_s']:.1f} s; final loss {result.final_loss:.6g}")
    print(f"cluster sizes: {', '.join(str(s) for s in result.cluster_sizes())}")
    print(f"saved {out}")
    return 0


def _predict(args) -> int:
    """``ticlust predict RESULT INPUT``: a store (every object, into the store and --csv/--parquet), a stack
    or a field with --labels (into --csv/--parquet), chunk by chunk with progress."""
    from ..methods import get_method
    from ..plate.run import assignment_columns, is_store, predict_store, predict_stream  # noqa: F401
    from ..api import load_result

    if args.batch_size is not None:
        from ..core.validation import check_batch_size

        check_batch_size(args.batch_size)
    crop_given = args.keep_border or args.rescale or args.orient is not None or args.normalize is not None \
        or args.crop_size is not None or args.channel is not None
    if is_store(args.input):
        if args.labels is not None or crop_given or args.key is not None:
            raise InputError("--labels, --key and the crop options do not apply to an object store: its objects were "
                             "cut by ticlust extract.")
        check_outputs({"RESULT": args.result}, {"--csv": args.csv, "--parquet": args.parquet})
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.showwarning = lambda message, *a, **k: print(f"ticlust: note: {message}", file=sys.stderr)
            done = predict_store(args.result, args.input, device=args.device, batch_size=args.batch_size,
                                 progress=not args.quiet, csv=args.csv, parquet=args.parquet, workers=args.workers,
                                 scheduler=args.scheduler, save_aligned=args.save_aligned)
        kept = f" ({done.skipped} of {done.parts} parts were predicted by this result already)" if done.skipped else ""
        print(f"{done.method}: {done.objects} objects of {done.parts} fields assigned in {done.seconds:.1f} s{kept}")
        if done.sample_size is not None:
            print(f"fit sample: {done.sample_size - done.sample_changed} of {done.sample_size} objects got the cluster "
                  f"they had in the fit ({done.sample_changed} differ)")
        for path in done.outputs:
            print(f"wrote {path}")
        return 0
    if args.workers is not None or args.scheduler is not None:
        raise InputError("--workers and --scheduler apply to an object store (ticlust extract): a stack or a field is "
                         "assigned in this process.")
    if args.save_aligned:
        raise InputError("--save-aligned writes into an object store (ticlust extract): for a stack or a field, use "
                         "ticlust.predict(result, items, aligned=True) in Python.")
    if args.csv is None and args.parquet is None:
        raise InputError("Give --csv FILE and/or --parquet FILE for the assignments of a stack or a field (only an "
                         "object store keeps them itself).")
    check_outputs({"RESULT": args.result, "INPUT": args.input, "--labels": args.labels},
                  {"--csv": args.csv, "--parquet": args.parquet})
    for flag, target in (("--csv", args.csv), ("--parquet", args.parquet)):
        if target is not None:
            check_writable(flag, Path(target))
    result = load_result(args.result)
    data, _ = read_input(args.input, key=args.key)
    columns = {}
    if args.labels is not None:
        from ..objects.route import objects_route

        from ..plate.view import route_options

        mask, _ = read_input(args.labels)
        if crop_given:      # the options given, the route's defaults for the rest
            _route_defaults(args)
            shape = np.shape(result.prototypes)
            size = args.crop_size if args.crop_size is not None else (
                None if get_method(result.method).inputs == ("landmarks",) else int(shape[1]))
            options = dict(size=size, keep_border=args.keep_border, channel=args.channel, rescale=args.rescale,
                           orient=args.orient, normalize=args.normalize)
        else:               # cut as the result's objects were cut (its store's or its fit's record)
            options = route_options(result)
            if get_method(result.method).inputs == ("landmarks",):
                options["size"] = None
        route = objects_route(data, mask, result.method, {}, **options)
        data, columns = route.items, {c: np.asarray(v) for c, v in route.table.items()}
    elif crop_given:
        raise InputError("--keep-border, --crop-size, --channel, --rescale, --(no-)orient and --(no-)normalize only apply "
                         "with --labels MASK.")
    else:
        names = [p.name for p in folder_images(args.input)] if Path(args.input).is_dir() else None
        columns = {"item": np.asarray(names) if names is not None else np.arange(int(data.shape[0]))}
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = lambda message, *a, **k: print(f"ticlust: note: {message}", file=sys.stderr)
        assigned = predict_stream(result, data, device=args.device, batch_size=args.batch_size, progress=not args.quiet)
    import pandas as pd

    table = pd.DataFrame({**columns, **assigned})
    for target, write in ((args.csv, lambda p: table.to_csv(p, index=False)),
                          (args.parquet, lambda p: table.to_parquet(p, index=False))):
        if target is not None:
            write(target)
            print(f"wrote {target}")
    sizes = np.bincount(assigned["cluster"], minlength=int(np.shape(result.scores)[1]))
    print(f"{result.method}: {len(table)} items assigned; cluster sizes: {', '.join(map(str, sizes))}")
    return 0


def _objects(args, field, params: dict):
    """The objects of --labels cut out of the field INPUT (or their contours, for shape methods):
    (items, object table, the method's parameters for objects), by the one objects route."""
    from ..objects.route import objects_route

    if args.input is None:
        raise InputError("--labels needs the field image as INPUT (it does not apply to --sample).")
    mask, _ = read_input(args.labels)
    route = objects_route(field, mask, args.method, params, keep_border=args.keep_border, size=args.crop_size,
                          channel=args.channel, rescale=args.rescale, orient=args.orient, normalize=args.normalize)
    return route.items, route.table, route.params


def _gui(sample_name: str) -> int:
    try:
        import napari
    except ImportError:
        raise InputError("napari is not installed: install the GUI with `pip install 'napari-ticlust[gui]'`.") from None
    gui_viewer(sample_name)
    napari.run()
    return 0


GUI_SIZE = (1600, 1000)
#: The method and K that ``ticlust gui`` prepares for a sample's objects: st-kmeans with the objects route's
#: similarity warps finds the nuclei's three kinds (ACC 1.00 on the 287 objects of benchmarks/results/objects.md,
#: and on the 50 objects of this 320×320 sample field, tests/test_selector.py).
GUI_RUN = {"nuclei": ("st-kmeans", 3)}


def gui_viewer(sample_name: str = "nuclei"):
    """napari sized to fit the screen (at most 1600x1000), a sample opened as File > Open Sample does,
    and ticlust docked the way Plugins > ticlust docks it. A field with its segmentation (the nuclei)
    is set up for the objects route — its image as input, its Labels layer, the method and K of
    ``GUI_RUN`` — so that Run is the one click left; the other samples stay in File > Open Sample."""
    import napari
    from napari.layers import Image, Labels
    from qtpy.QtGui import QGuiApplication

    viewer = napari.Viewer(title="ticlust")
    window = viewer.window._qt_window
    screen = (window.screen() or QGuiApplication.primaryScreen()).availableGeometry()
    width, height = min(GUI_SIZE[0], screen.width()), min(GUI_SIZE[1], screen.height())
    window.resize(width, height)
    window.move(screen.left(), screen.top())
    opened = viewer.open_sample("napari-ticlust", sample_name)
    _, widget = viewer.window.add_plugin_dock_widget("napari-ticlust")
    image = next((layer for layer in opened if isinstance(layer, Image)), None)
    labels = next((layer for layer in opened if isinstance(layer, Labels)), None)
    method, k = GUI_RUN.get(sample_name, (widget.method.value, None))
    widget.method.value = method            # first: a method change resets K and the layer choices
    if k is not None:
        widget.k.value = k
    if image is not None and labels is not None:
        widget.input.value, widget.labels.value = image.name, labels.name
        widget.status.value = (f"Ready: Run cuts the objects of {labels.name} out of {image.name} and clusters them "
                               f"with {method}, K = {widget.k.value}. The digits and other samples are in "
                               "File > Open Sample > ticlust.")
    return viewer

