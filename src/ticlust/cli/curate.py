"""``ticlust curate``: one hand edit of a saved result (move items, mark outliers, merge two clusters); with
``--store`` the result's plate: objects named by the store's numbers, split and refine on the fit sample, and the
store's predictions brought to the edited result (``ticlust.plate.curate``)."""
from __future__ import annotations

import numpy as np

from ..core.atomic import check_outputs
from ..errors import InputError
from ..result import OUTLIER, npz_path
from .common import notes


def add_parser(sub, common) -> None:
    curate = sub.add_parser("curate", parents=[common], help="edit a saved result by hand: move items, mark outliers "
                            "or merge two clusters (one edit per call); with --store, a plate's objects, and the "
                            "store's predictions follow")
    curate.add_argument("result", help="a result file written by ticlust fit -o (or by ticlust curate)")
    edit = curate.add_mutually_exclusive_group(required=True)
    edit.add_argument("--move", metavar="ITEMS", help="put these items into cluster --to and pin them there: item "
                      "numbers and inclusive ranges, e.g. \"3, 8-12\" (with --store: the store's object numbers)")
    edit.add_argument("--outliers", metavar="ITEMS", help="mark these items as outliers (flagged in the CSV, left out "
                      "when the result is refined), e.g. \"3, 8-12\"")
    edit.add_argument("--merge", nargs=2, type=int, metavar=("A", "B"),
                      help="cluster B joins cluster A (the clusters after B are numbered one lower)")
    edit.add_argument("--split", type=int, metavar="CLUSTER", help="with --store: re-cluster the fit sample's members "
                      "of this cluster in two (the new half is cluster K); refine, and the store is predicted anew")
    edit.add_argument("--refine", action="store_true", help="with --store: re-fit the prototypes on the fit sample "
                      "from the edits (warm started), then predict every object of the store anew")
    curate.add_argument("--to", type=int, metavar="CLUSTER", help="with --move: the cluster the items go into")
    curate.add_argument("--store", help="the object store RESULT was fitted on (ticlust fit STORE --fit-sample N): "
                        "items are its objects, and its predictions are brought to the edited result")
    curate.add_argument("--free-moved", action="store_true", help="with --refine: let the moved items go where the "
                        "re-fit puts them (default: kept where they were moved)")
    curate.add_argument("--device", default="auto", help="with --store: auto, cpu or cuda (split, refine, predict)")
    curate.add_argument("--quiet", action="store_true", help="no progress bar")
    curate.add_argument("-o", "--output", required=True, help="where to save the edited result (.npz; not the input)")
    curate.add_argument("--csv", help="also write the assignments table here (with --store: one row per object of "
                        "the store, as ticlust predict writes it)")


def run(args) -> int:
    """``ticlust curate RESULT``: one hand edit of ``ticlust.curation`` (items in its one selector grammar,
    ``curation.item_index``), saved to a new file; with ``--store`` the plate's edit (``ticlust.plate.curate``),
    and the store's predictions renumbered (merge, move, outliers) or predicted anew (refine)."""
    from ..api import load_result

    if args.move is not None and args.to is None:
        raise InputError("--move needs --to CLUSTER: the cluster the items go into.")
    if args.move is None and args.to is not None:
        raise InputError("--to only applies with --move.")
    if args.store is None and (args.split is not None or args.refine):
        raise InputError("--split and --refine need the data the result was fitted on: give --store STORE (a result "
                         "fitted on a stack is split and refined in Python or napari, where the data is).")
    if args.free_moved and not args.refine:
        raise InputError("--free-moved only applies with --refine.")
    check_outputs({"RESULT": args.result, "--store": args.store}, {"-o": npz_path(args.output), "--csv": args.csv})
    result = load_result(args.result)
    if args.store is not None:
        return _curate_store(args, result)
    edited, done = _edit(args, result)
    out = edited.save(args.output)
    if args.csv:
        edited.assignments_table(args.csv)
    print(done)
    print(f"cluster sizes: {', '.join(str(s) for s in edited.cluster_sizes())}")
    print(f"saved {out}")
    return 0


def _edit(args, result):
    """The edited result and the sentence that says what changed."""
    from .. import curation

    if args.move is not None:
        edited = curation.move(result, args.move, args.to)
        count = len(edited.edits[-1]["items"])
        return edited, f"moved {count} item{'s' * (count != 1)} to cluster {args.to} (pinned there)"
    if args.outliers is not None:
        edited = curation.mark_outliers(result, args.outliers)
        count = len(edited.edits[-1]["items"])
        return edited, (f"marked {count} item{'s' * (count != 1)} as outliers "
                        f"({int(np.sum(edited.pinned == OUTLIER))} outliers in all)")
    return curation.merge(result, *args.merge), f"merged cluster {args.merge[1]} into {args.merge[0]}"


def _curate_store(args, result) -> int:
    """The plate's edit: objects by the store's numbers; the edited result saved, then the store's predictions
    brought to it (``plate.curate.repredict``: renumbered after merge/move/outliers, predicted anew after refine)."""
    from ..plate import curate
    from ..plate.run import sample_agreement, store_inputs
    from ..plate.store import open_objects

    store = open_objects(args.store)
    check_outputs({"RESULT": args.result, **store_inputs(store)}, {"-o": npz_path(args.output), "--csv": args.csv})
    curate.check_plate_result(result, store)
    progress = not args.quiet
    with notes():
        edited, done = _edit_store(args, result, store, progress)
        out = edited.save(args.output)
        print(done)
        if edited.state is None and args.split is not None:
            print(f"saved {out}; refine it (ticlust curate {out} --store {args.store} --refine -o …) to predict the "
                  "store's objects with it")
            return 0
        print(f"saved {out}")
        redone = curate.repredict(out, store, previous=args.result, device=args.device, progress=progress,
                                  csv=args.csv)
    how = "renumbered (nothing aligned)" if redone.relabelled else "predicted anew"
    print(f"{redone.objects} objects of {redone.parts} fields {how} in {redone.seconds:.1f} s; {redone.by_hand} set "
          f"by hand, {redone.outliers} outliers")
    if (agreement := sample_agreement(redone)) is not None:
        print(agreement)
    for path in redone.outputs:
        print(f"wrote {path}")
    return 0


def _edit_store(args, result, store, progress: bool):
    """The plate's edited result and the sentence that says what changed."""
    from ..plate import curate

    if args.move is not None:
        edited = curate.move(result, args.move, args.to, len(store))
        return edited, f"moved object(s) {args.move} to cluster {args.to} (pinned there)"
    if args.outliers is not None:
        edited = curate.mark_outliers(result, args.outliers, len(store))
        return edited, f"marked object(s) {args.outliers} as outliers"
    if args.merge is not None:
        return curate.merge(result, *args.merge), f"merged cluster {args.merge[1]} into {args.merge[0]}"
    if args.split is not None:
        edited = curate.split(store, result, args.split, seed=int(result.config.get("seed", 0)), device=args.device)
        return edited, f"split cluster {args.split} of the fit sample in two (the new half is cluster {result.k})"
    edited = curate.refine(store, result, device=args.device, keep_pinned=not args.free_moved, progress=progress)
    return edited, f"refined on the fit sample of {edited.n} objects: final loss {edited.final_loss:.4g}"
