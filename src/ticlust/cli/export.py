"""``ticlust export``: pictures of a saved result, per-cluster galleries and the prototype montage."""
from __future__ import annotations

from ..core.atomic import check_outputs
from ..errors import InputError
from ..io.readers import read_input
from .common import at_least_one, notes


def add_parser(sub, common) -> None:
    export = sub.add_parser("export", parents=[common], help="pictures of a saved result: per-cluster galleries and the prototype montage")
    export.add_argument("result", help="a result file written by ticlust fit -o")
    export.add_argument("--gallery", required=True, metavar="FOLDER", help="write prototypes.png and cluster_NN.png here")
    export.add_argument("--input", required=True, help="the stack the result was fitted on (as given to ticlust fit)")
    export.add_argument("--key", help="array name inside an .npz input (default: the first)")
    export.add_argument("--max-items", type=at_least_one, default=60, help="members shown per cluster, closest first")


def run(args) -> int:
    """``ticlust export RESULT --input STACK --gallery FOLDER``: no picture written over an input."""
    from ..io.gallery import export_gallery, gallery_outputs
    from ..api import load_result

    from ..plate.run import is_store

    if is_store(args.input):
        raise InputError(f"--input {args.input} is an object store (ticlust extract), not a stack: ticlust export draws "
                         "the galleries of a stack's result; look at a store's clusters in the napari plate panel, or "
                         "give the stack the result was fitted on.")
    inputs = {"RESULT": args.result, "--input": args.input}
    check_outputs(inputs, {"--gallery": args.gallery}, folders=True)
    result = load_result(args.result)
    gallery_outputs(result, args.gallery, inputs, "--gallery")
    images, _ = read_input(args.input, key=args.key)
    with notes():
        paths = export_gallery(result, images, args.gallery, args.max_items)
    for path in paths:
        print(f"wrote {path}")
    return 0
