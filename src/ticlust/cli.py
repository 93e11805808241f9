"""Command line: ``ticlust methods``, ``ticlust fit``, ``ticlust gui``."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
import warnings

import numpy as np

from .data import SAMPLES, InputError, folder_images, random_subset, read_input, sample
from .methods import available_methods, get_method
from .methods.base import param_infos


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ticlust", description="Transformation-invariant clustering of image stacks and landmark shapes.")
    sub = parser.add_subparsers(dest="command", required=True)

    sub.add_parser("methods", help="list the methods and their parameters with defaults")

    fit = sub.add_parser("fit", help="cluster a stack (or landmark set) and save the result")
    fit.add_argument("input", nargs="?", help=".npz, .npy, .tif stack, a folder of images, or landmarks (.csv, .tps)")
    fit.add_argument("--sample", choices=sorted(SAMPLES), help="use a bundled sample instead of INPUT")
    fit.add_argument("--method", default="kmeans", help="clustering method (see `ticlust methods`)")
    fit.add_argument("--k", type=int, default=10, help="number of clusters")
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

    gui = sub.add_parser("gui", help="open napari with ticlust docked and a sample stack loaded")
    gui.add_argument("--sample", choices=sorted(SAMPLES), default="digits")

    args = parser.parse_args(argv)
    try:
        if args.command == "methods":
            return _methods()
        if args.command == "fit":
            return _fit(args)
        return _gui(args.sample)
    except InputError as exc:
        print(f"ticlust: error: {exc}", file=sys.stderr)
        return 2


PAPERS = {  # the papers in ../shared/papers, by the number the method specs carry
    "000": "Cosentino et al., Spatial Transformer K-Means",
    "001": "Villar-Corrales & Morgenshtern, Scattering Transform Based Image Clustering using Projection onto Orthogonal Complement",
    "002": "Gattone et al., On the geodesic distance in shapes K-means clustering",
    "003": "Monnier et al. 2020, Deep Transformation-Invariant Clustering",
    "004": "Kostadinov et al., Clustering with Jointly Learned Nonlinear Transforms Over Discriminating Min-Max Similarity/Dissimilarity Assignment",
}


def paper_name(paper: str) -> str:
    """A method spec's paper as people cite it: '000' becomes 'Cosentino et al., ...'; a spec that
    already names its paper after the number keeps that name."""
    number, _, rest = paper.partition(" ")
    if number.isdigit() and len(number) == 3:
        return rest.strip() or PAPERS.get(number, f"paper {number}")
    return paper


def _methods() -> int:
    for name in available_methods():
        spec = get_method(name)
        print(f"{name}: {spec.title} [{', '.join(spec.inputs)}]" + (f" — {paper_name(spec.paper)}" if spec.paper else ""))
        for info in param_infos(spec.config):
            choices = f" one of {', '.join(map(str, info.choices))};" if info.choices else ""
            print(f"    {info.name} = {info.default!r}:{choices} {info.doc}")
    return 0


def _fit(args) -> int:
    from .api import fit
    from .metrics import evaluate

    if (args.input is None) == (args.sample is None):
        raise InputError("Give either an INPUT file or --sample NAME (one of them).")
    if args.sample:
        data, labels = sample(args.sample, seed=args.seed)
        source = f"sample {args.sample}"
    else:
        data, labels = read_input(args.input, key=args.key, labels_key=args.labels_key)
        source = args.input
    # a folder's rows are named by their files (the CSV is useless without them)
    names = [p.name for p in folder_images(args.input)] if args.input and Path(args.input).is_dir() else None
    index = random_subset(int(data.shape[0]), args.max_images, args.seed)
    if index is not None:
        data = np.asarray(data[index])
        labels = None if labels is None else labels[index]
        names = None if names is None else [names[i] for i in index]
    params = {}
    for item in args.set:
        if "=" not in item:
            raise InputError(f"--set {item!r} must look like name=value.")
        name, value = item.split("=", 1)
        params[name.strip()] = value
    print(f"ticlust: {args.method}, K={args.k}, {data.shape[0]} items from {source}", file=sys.stderr)
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = lambda message, *a, **k: print(f"ticlust: note: {message}", file=sys.stderr)
        result = fit(data, method=args.method, k=args.k, device=args.device, seed=args.seed, runs=args.runs,
                     progress=not args.quiet, **params)
    out = result.save(args.output)
    if args.csv:
        result.assignments_table(args.csv, names=names)
    sizes = ", ".join(str(s) for s in result.cluster_sizes())
    print(f"device {result.device}; {result.timing['total_s']:.1f} s; final loss {result.final_loss:.6g}")
    print(f"cluster sizes: {sizes}")
    if labels is not None:
        scores = evaluate(labels, result.labels)
        print("ACC {acc:.4f}  ACC(majority) {acc_majority:.4f}  NMI {nmi:.4f}  ARI {ari:.4f}".format(**scores))
    print(f"saved {out}")
    return 0


def _gui(sample_name: str) -> int:
    try:
        import napari
    except ImportError:
        raise InputError("napari is not installed: install the GUI with `pip install 'napari-ticlust[gui]'`.") from None
    gui_viewer(sample_name)
    napari.run()
    return 0


GUI_SIZE = (1600, 1000)


def gui_viewer(sample_name: str = "digits"):
    """napari sized to fit the screen (at most 1600x1000), a sample opened as File > Open Sample does,
    and ticlust docked the way Plugins > ticlust docks it."""
    import napari
    from qtpy.QtGui import QGuiApplication

    viewer = napari.Viewer(title="ticlust")
    window = viewer.window._qt_window
    screen = (window.screen() or QGuiApplication.primaryScreen()).availableGeometry()
    width, height = min(GUI_SIZE[0], screen.width()), min(GUI_SIZE[1], screen.height())
    window.resize(width, height)
    window.move(screen.left(), screen.top())
    viewer.open_sample("napari-ticlust", sample_name)
    viewer.window.add_plugin_dock_widget("napari-ticlust")
    return viewer


if __name__ == "__main__":
    sys.exit(main())
