"""``ticlust predict``: every object of a store, or the items of a stack or of a field (--labels), assigned with
a saved result, chunk by chunk."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..core.atomic import check_outputs, write_atomic
from ..errors import InputError
from ..io.readers import folder_images, read_input
from ..plate.labels import DEFAULT_NAME, OUTLIER_VALUE
from . import timelapse
from .common import (CROP_NEEDS_LABELS, check_in_process, cluster_options, crop_given, crop_options,
                     notes, route_defaults)


def add_parser(sub, common) -> None:
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
    predict.add_argument("--write-labels", action="store_true", help="INPUT an object store extracted from an "
                         "OME-Zarr image or HCS plate: also write each field's objects as a label image of cluster + 1 "
                         f"(0 background, {OUTLIER_VALUE} outliers) into the field's labels group")
    predict.add_argument("--labels-name", default=DEFAULT_NAME, help="with --write-labels: the label image's name "
                         f"(default: {DEFAULT_NAME})")
    predict.add_argument("--overwrite-labels", action="store_true", help="with --write-labels: replace label images "
                         "of that name that another result wrote")
    crop_options(predict, "with --labels: ")
    cluster_options(predict, "assign the store's parts")
    timelapse.add_options(predict, store=True)


def run(args) -> int:
    """``ticlust predict RESULT INPUT``: a store (every object, into the store and --csv/--parquet), a stack
    or a field with --labels (into --csv/--parquet), chunk by chunk with progress."""
    from ..plate.run import is_store

    if args.batch_size is not None:
        from ..core.validation import check_batch_size

        check_batch_size(args.batch_size)
    return _predict_store(args) if is_store(args.input) else _predict_stack(args)


def _predict_store(args) -> int:
    """Every object of the store, resumable: into the store, and --csv/--parquet when given; with --time / --smooth,
    the states along its movies' tracks."""
    from ..api import load_result
    from ..plate.run import predict_store, sample_agreement

    if args.labels is not None or crop_given(args) or args.key is not None:
        raise InputError("--labels, --key and the crop options do not apply to an object store: its objects were "
                         "cut by ticlust extract.")
    lapse = timelapse.wanted(args)
    if lapse:
        timelapse.check_syntax(args)
    check_outputs({"RESULT": args.result}, {"--csv": args.csv, "--parquet": args.parquet, **timelapse.outputs(args)})
    if args.write_labels:
        from ..plate.labels import check_labels_target

        check_labels_target(args.input, args.labels_name)
    elif args.overwrite_labels or args.labels_name != DEFAULT_NAME:
        raise InputError("--labels-name and --overwrite-labels go with --write-labels.")
    with notes():
        done = predict_store(args.result, args.input, device=args.device, batch_size=args.batch_size,
                             progress=not args.quiet, csv=args.csv, parquet=args.parquet, workers=args.workers,
                             scheduler=args.scheduler, save_aligned=args.save_aligned)
    kept = f" ({done.skipped} of {done.parts} parts were predicted by this result already)" if done.skipped else ""
    print(f"{done.method}: {done.objects} objects of {done.parts} fields assigned in {done.seconds:.1f} s{kept}")
    if (agreement := sample_agreement(done)) is not None:
        print(agreement)
    for path in done.outputs:
        print(f"wrote {path}")
    if args.write_labels:
        _write_labels(args)
    if lapse:
        with notes():
            timelapse.store_states(args, int(np.shape(load_result(args.result).scores)[1]))
    return 0


def _write_labels(args) -> None:
    """The store's clusters as a label image in every field of its OME-Zarr input (after the prediction)."""
    from ..plate.labels import write_cluster_labels

    with notes():
        made = write_cluster_labels(args.input, args.result, name=args.labels_name, overwrite=args.overwrite_labels,
                                    progress=not args.quiet)
    kept = f" ({made.kept} held this result's labels already)" if made.kept else ""
    left = f"; {made.skipped} field(s) the store left out have none" if made.skipped else ""
    print(f"wrote the cluster labels {made.name!r} into {made.written + made.kept} fields{kept}{left}")


def _predict_stack(args) -> int:
    """The items of a stack, or the objects of a field with --labels, in this process: into --csv/--parquet."""
    from ..plate.run import predict_stream
    from ..api import load_result

    check_in_process(args, "assigned")
    if timelapse.wanted(args):
        raise InputError("--time, --smooth and the state tables follow the movies of an object store: for a movie with "
                         "its labels, fit it (ticlust fit MOVIE --labels LABELS --smooth ...), or extract it into a store "
                         "and predict that.")
    if args.write_labels or args.overwrite_labels or args.labels_name != DEFAULT_NAME:
        raise InputError("--write-labels writes into the OME-Zarr an object store was extracted from: extract the "
                         "OME-Zarr image or plate (ticlust extract INPUT -o STORE) and predict the store.")
    if args.save_aligned:
        raise InputError("--save-aligned writes into an object store (ticlust extract): for a stack or a field, use "
                         "ticlust.predict(result, items, aligned=True) in Python.")
    if args.csv is None and args.parquet is None:
        raise InputError("Give --csv FILE and/or --parquet FILE for the assignments of a stack or a field (only an "
                         "object store keeps them itself).")
    check_outputs({"RESULT": args.result, "INPUT": args.input, "--labels": args.labels},
                  {"--csv": args.csv, "--parquet": args.parquet})
    result = load_result(args.result)
    data, columns = _items(args, result)
    with notes():
        assigned = predict_stream(result, data, device=args.device, batch_size=args.batch_size, progress=not args.quiet)
    import pandas as pd

    table = pd.DataFrame({**columns, **assigned})
    if args.csv is not None:
        print(f"wrote {write_atomic(args.csv, lambda tmp: table.to_csv(tmp, index=False))}")
    if args.parquet is not None:
        print(f"wrote {write_atomic(args.parquet, lambda tmp: table.to_parquet(tmp, index=False))}")
    sizes = np.bincount(assigned["cluster"], minlength=int(np.shape(result.scores)[1]))
    print(f"{result.method}: {len(table)} items assigned; cluster sizes: {', '.join(map(str, sizes))}")
    return 0


def _items(args, result):
    """INPUT's items and their table columns: with --labels its objects (cut as the options given say, else as
    the result's own objects were cut) and their object table, else the items named by file or numbered."""
    from ..objects.route import objects_route

    data, _ = read_input(args.input, key=args.key)
    if args.labels is not None:
        mask, _ = read_input(args.labels)
        route = objects_route(data, mask, result.method, {}, **_cut_options(args, result))
        return route.items, {c: np.asarray(v) for c, v in route.table.items()}
    if crop_given(args):
        raise InputError(CROP_NEEDS_LABELS)
    names = [p.name for p in folder_images(args.input)] if Path(args.input).is_dir() else None
    return data, {"item": np.asarray(names) if names is not None else np.arange(int(data.shape[0]))}


def _cut_options(args, result) -> dict:
    """How a field's objects are cut for ``result``: the crop options given with the route's defaults for the
    rest, or, with none given, as the result's objects were cut (its store's or its fit's record)."""
    from ..methods import get_method
    from ..plate.view import route_options

    if crop_given(args):
        route_defaults(args)
        shape = np.shape(result.prototypes)
        size = args.crop_size if args.crop_size is not None else (
            None if get_method(result.method).inputs == ("landmarks",) else int(shape[1]))
        return dict(size=size, keep_border=args.keep_border, channel=args.channel, rescale=args.rescale,
                    orient=args.orient, normalize=args.normalize)
    options = route_options(result)
    if get_method(result.method).inputs == ("landmarks",):
        options["size"] = None
    return options
