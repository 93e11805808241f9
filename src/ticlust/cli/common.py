"""What the ``ticlust`` commands share: the options of cutting objects and of where steps run, the checks of
output files, warnings shown as notes, and an error turned into one sentence and exit status 2."""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
import warnings

from ..errors import InputError

#: What ``fit`` and ``predict`` say when a crop option comes without a label image.
CROP_NEEDS_LABELS = ("--keep-border, --crop-size, --channel, --rescale, --(no-)orient and --(no-)normalize only "
                     "apply with --labels MASK.")


def guarded(command, args) -> int:
    """``command(args)``'s exit status; a bad input is one ``ticlust: error:`` sentence and status 2, and any other
    error one line too (its traceback with --debug), so that a user never reads a traceback they cannot act on."""
    try:
        return command(args)
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


@contextlib.contextmanager
def notes():
    """Every warning raised inside, each time it is raised, as a ``ticlust: note: ...`` line on stderr (a terminal
    user reads the library's warnings as notes, without Python's file and line)."""
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = lambda message, *a, **k: print(f"ticlust: note: {message}", file=sys.stderr)
        yield


def crop_options(parser, note: str) -> None:
    """The options of cutting objects out of a field, shared by ``fit --labels``, ``predict --labels`` and
    ``extract``."""
    parser.add_argument("--keep-border", action="store_true", help=f"{note}keep objects that touch the image border")
    parser.add_argument("--crop-size", type=int, help=f"{note}crop side in pixels (default: from the objects' sizes)")
    parser.add_argument("--channel", type=channel_choice, metavar="NAME[,NAME]",
                        help=f"{note}keep these channels of a multi-channel field, by name (where the input names "
                        "them) or index, in this order (one alone: grey crops)")
    parser.add_argument("--rescale", action="store_true", help=f"{note}zoom every object to fill the crop")
    parser.add_argument("--orient", action=argparse.BooleanOptionalAction,
                        help=f"{note}turn every object's major axis along x (default: on)")
    parser.add_argument("--normalize", action=argparse.BooleanOptionalAction,
                        help=f"{note}divide every object by its mean brightness (default: on)")


def channel_choice(text: str):
    """An argparse type: ``--channel`` as one channel (a name, or an index if it is a whole number) or a list of
    them (``DNA,ER`` or ``0,2``): ``plate.store.typed_channels``."""
    from ..plate.store import typed_channels

    try:
        return typed_channels(text)
    except InputError as exc:
        raise argparse.ArgumentTypeError(str(exc).rstrip(".")) from None


def cluster_options(parser, what: str) -> None:
    """Where the per-field / per-chunk steps run (docs/cluster.md): this process, a local dask cluster, a running one."""
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--workers", type=int, metavar="N", help=f"{what} on a local dask cluster of N worker processes "
                       "started for this run (default: in this process)")
    where.add_argument("--scheduler", metavar="ADDRESS", help=f"{what} on a running dask cluster, e.g. "
                       "tcp://HOST:8786 (its workers must see the same paths)")


def crop_given(args) -> bool:
    """Whether any of :func:`crop_options` was given."""
    return args.keep_border or args.rescale or args.orient is not None or args.normalize is not None \
        or args.crop_size is not None or args.channel is not None


def route_defaults(args) -> None:
    """The objects route's defaults where no --(no-)orient / --(no-)normalize was given."""
    from ..objects.crops import ROUTE_OPTIONS

    for name, default in ROUTE_OPTIONS.items():
        if getattr(args, name) is None:
            setattr(args, name, default)


def check_in_process(args, done: str) -> None:
    """Refuse --workers / --scheduler for a stack or a field, which is ``done`` ("fitted", "assigned") here."""
    if args.workers is not None or args.scheduler is not None:
        raise InputError("--workers and --scheduler apply to an object store (ticlust extract): a stack or a field is "
                         f"{done} in this process.")


def at_least_one(text: str) -> int:
    """An argparse type: a whole number of at least 1 (anything else is argparse's one-line error)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be a whole number of at least 1")
    return value
