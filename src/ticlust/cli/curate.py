"""``ticlust curate``: one hand edit of a saved result (move items, mark outliers, merge two clusters)."""
from __future__ import annotations

import numpy as np

from ..errors import InputError
from ..result import OUTLIER, npz_path
from .common import check_files


def add_parser(sub, common) -> None:
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


def run(args) -> int:
    """``ticlust curate RESULT``: one hand edit of ``ticlust.curation`` (items in its one selector grammar,
    ``curation.item_index``), saved to a new file; refine it in Python or napari, where the data is."""
    from ..api import load_result

    if args.move is not None and args.to is None:
        raise InputError("--move needs --to CLUSTER: the cluster the items go into.")
    if args.move is None and args.to is not None:
        raise InputError("--to only applies with --move.")
    check_files({"RESULT": args.result}, {"-o": npz_path(args.output), "--csv": args.csv})
    edited, done = _edit(args, load_result(args.result))
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
