"""The time-lapse options of ``ticlust fit`` (a movie with --labels, or a stack of crops with a per-item track
table): which objects are which tracks, the states along them (docs/time_lapse.md), and their tables."""
from __future__ import annotations

import sys
from ..errors import InputError

#: Each table output: its flag and the TrackStates table it writes.
TABLES = {"--object-table": "objects", "--track-table": "tracks", "--visit-table": "visits", "--state-table": "states"}


def add_options(parser, store: bool = False) -> None:
    """--tracks (fit) or --time (predict on a store), --smooth and the four state tables."""
    if store:
        parser.add_argument("--time", metavar="COLUMN", help="INPUT an object store: the states along the tracks of "
                            "its movies: 'frame' (fields that are time series) or the manifest column that numbers "
                            "each field's time point (label ids are track ids within a movie)")
    else:
        parser.add_argument("--tracks", metavar="TRACKS", help="time-lapse: a tracks table (.csv/.parquet: track_id, "
                            "frame, label or y, x, parent_track_id), napari Tracks data (.npy: track_id, t, y, x) or a "
                            "Cell Tracking Challenge lineage (.txt); without --labels, one row per item of INPUT "
                            "(track_id, frame). With --labels and no --tracks, label ids are track ids")
    parser.add_argument("--smooth", metavar="ORDER", help="time-lapse: smooth each track's states with a hidden Markov "
                        "model: free (any transition), cyclic (one learned cycle), 'order=3>5>1>2' (the steps allowed, "
                        "quoted for the shell; e.g. 'order=0>1>2>0,0>3'), or none (default: free)")
    for flag, name in TABLES.items():
        parser.add_argument(flag, metavar="FILE", help=f"time-lapse: write the per-{name[:-1]} state table here "
                            "(.csv or .parquet)")


def wanted(args) -> bool:
    """Whether the run is a time-lapse: any of --tracks (--time), --smooth or a state table given."""
    given = getattr(args, "tracks", None) if hasattr(args, "tracks") else getattr(args, "time", None)
    return given is not None or args.smooth is not None or any(_out(args, f) for f in TABLES)


def _out(args, flag: str):
    return getattr(args, flag[2:].replace("-", "_"))


def outputs(args) -> dict:
    """The state tables asked for, by flag (checked with the other outputs before the fit)."""
    return {flag: _out(args, flag) for flag in TABLES}


def check_syntax(args) -> None:
    """--smooth's syntax and the tables' suffixes, before anything is read."""
    from ..objects.states import order_steps, table_format

    if args.smooth is not None and args.smooth.lower() != "none":
        order_steps(args.smooth)       # the syntax now; the cluster numbers against the result after the fit
    for flag, path in outputs(args).items():
        if path is not None:
            table_format(path, flag)


def check(args) -> None:
    """Refuse what cannot be a time-lapse fit before anything is read."""
    check_syntax(args)
    if args.sample is not None or args.max_images is not None:
        raise InputError("--tracks, --smooth and the state tables need every object of a movie (or a stack with its "
                         "track table): they do not go with --sample or --max-images.")
    if args.labels is None and args.tracks is None:
        raise InputError("A time-lapse needs --labels LABELS (a T×Y×X label movie) or, for a stack of crops, --tracks "
                         "ITEMS.csv with each item's track_id and frame.")


def tracks_for(args, objects, n: int):
    """The Tracks of the items about to be fitted: from the label movie (ids, or --tracks), or the items' table."""
    from ..io.readers import read_input
    from ..objects.tracks import object_tracks, read_table

    if args.labels is not None:
        tracks = read_table(args.tracks) if args.tracks is not None else None
        return object_tracks(objects, tracks, labels=read_input(args.labels)[0])
    table = read_table(args.tracks)
    if not hasattr(table, "columns"):
        raise InputError(f"--tracks {args.tracks}: without --labels, give a table (.csv/.parquet) with one row per item "
                         "of INPUT (track_id, frame).")
    if len(table) != n:
        raise InputError(f"--tracks {args.tracks} has {len(table)} rows but INPUT has {n} items: without --labels, give "
                         "one row per item (track_id, frame) in the items' order.")
    return object_tracks(table)


def smoothing(args) -> tuple[str, bool]:
    """(order, smooth) of --smooth (default: free)."""
    order = "free" if args.smooth is None else args.smooth
    return ("free", False) if order.lower() == "none" else (order, True)


def states(args, result, tracks):
    """The states along the tracks of a fit: :func:`report`."""
    from ..objects.states import track_states

    order, smooth = smoothing(args)
    return report(args, track_states(result, tracks, order=order, smooth=smooth))


def store_states(args, k: int):
    """The states along the tracks of a predicted store's movies: :func:`report`."""
    from ..plate.states import store_states as states_of_store

    order, smooth = smoothing(args)
    return report(args, states_of_store(args.input, k, time=args.time or "frame", order=order, smooth=smooth))


def report(args, done):
    """Each table asked for written, the notes and a summary printed; ``done`` returned."""
    smooth = done.temperature is not None
    for note in done.notes:
        print(f"ticlust: note: {note}", file=sys.stderr)
    paths = {name: _out(args, flag) for flag, name in TABLES.items() if _out(args, flag) is not None}
    for path in done.write(**paths):
        print(f"wrote {path}")
    changed = int(done.objects.changed.sum())
    how = f"smoothed ({done.order}, temperature {done.temperature:.3g}): {changed} of {len(done.objects)} objects " \
          "changed state" if smooth else "not smoothed"
    print(f"{len(done.tracks)} tracks, {int((done.tracks.fate == 'divided').sum())} divided; states {how}")
    return done


def object_columns(done) -> dict:
    """The per-object state columns the assignments CSV gains."""
    return {c: done.objects[c].to_numpy() for c in ("track", "state", "state_probability")}
