"""The object store: every object of a plate cut out onto disk, with one table row per object.

``extract(INPUT, STORE)`` lists the fields (:mod:`ticlust.plate.fields`), fixes the crop size, dtype and
channels for the whole store (from a first pass over the masks and file headers), then cuts field
after field with :func:`ticlust.objects.crops.field_objects`: in this process, or on a dask.distributed
cluster (``workers=N``, ``scheduler=ADDRESS`` or ``client=``; :mod:`ticlust.core.backends`). Each field's
step, :func:`extract_field`, is one pure function — a field's paths and the plan in, its part written
into the store by path, a small :class:`FieldReport` out — so the local loop and a cluster's workers
call the same function, and a task that a lost worker had begun is simply run again. A field's part
(Zarr v3 arrays ``crops`` and ``masks``, chunked along the object axis, and its rows in Parquet) is
written in ``tmp/`` and committed by one rename: a field is there whole or not at all. The last step writes ``table.parquet`` (all rows, fields in input order, then
label) and marks the store complete. A run that is killed, or stops on a full disk, is finished by
running it again: only fields without a part are cut, and the store ends byte for byte as an
uninterrupted run leaves it. A field that cannot be read or cut is left out, listed in ``failed``,
and tried again by the next run. docs/store.md has the layout on disk.

Memory: each worker holds one field at a time; the parent holds the listing and small reports, and
writes the table in row groups, so nothing grows with the number of fields but the listing.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import uuid
import warnings
from contextlib import closing, contextmanager
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

from ..core.atomic import owned, write_atomic, zarr_root
from ..core.backends import Backend, backend_for, stderr_notice
from ..errors import InputError, whole_number
from ..objects.crops import (MAX_AUTO_SIZE, OVERSIZE, ROUTE_OPTIONS, TABLE_COLUMNS, crop_channels, crop_needs,
                             field_objects, plate_size)
from . import segment as segmenting
from .fields import FieldSpec, _first_line, channel_names, field_source, list_fields

#: Version of the layout on disk (docs/store.md).
FORMAT = 1
#: Uncompressed bytes per chunk of a part's crops (along the object axis).
CHUNK_BYTES = 8 << 20
#: Rows per row group of table.parquet.
ROW_GROUP = 1 << 14
#: Every chunk is written, even one that equals the fill value (zarr leaves those out by default), so that a
#: chunk missing from disk is known to be lost (:class:`LazyStack` refuses it) rather than read as zeros.
WHOLE_CHUNKS = {"write_empty_chunks": True}
#: What a store's folder holds before its attributes are written (a run stopped early), and once it is complete.
UNFINISHED_ENTRIES = (".lock", "fields.parquet", "fields", "tmp")
STORE_ENTRIES = UNFINISHED_ENTRIES + ("zarr.json", "table.parquet", "failed.parquet", "skipped.parquet")
#: What extraction does by default with an object larger than the crop: leave it out, listed (``--oversize``).
OVERSIZE_DEFAULT = OVERSIZE[0]


@dataclass(frozen=True)
class Plan:
    """What every field's step shares: the options and the store's one crop size, dtype and channels."""

    size: int
    dtype: str
    channels: int | None
    keep_border: bool
    channel: int | None
    orient: bool
    normalize: bool
    rescale: bool
    z: int | str | None = None
    oversize: str = OVERSIZE_DEFAULT
    segment: dict | None = None


@dataclass(frozen=True)
class Survey:
    """One field seen before cutting: its image dtype, its crops' channels, the crop sides its objects need (all
    of them with ``rescale``, else the largest) and its diagonal (``reach``: no object of it needs a crop side
    above twice that), or why it cannot be read."""

    field: int
    dtype: str | None = None
    channels: int | None = None
    needs: np.ndarray | None = None
    error: str | None = None
    reach: int = 0


@dataclass(frozen=True)
class FieldReport:
    """What one field's step reports: how many objects it committed (and ``skipped``: how many it left out, listed
    in its part), or why the field was left out (``error``), or why the store could not be written (``fatal``: the
    run stops, the field is not done)."""

    field: int
    objects: int = 0
    error: str | None = None
    fatal: str | None = None
    skipped: int = 0


# ---- the per-field steps (pure: paths in, a small record out) --------------------------------------
def survey_field(spec: FieldSpec, options: dict) -> Survey:
    """What fixing the store's crop size, dtype and channels needs from one field: masks and headers only (a field
    to segment is segmented first, its mask written: :mod:`ticlust.plate.segment`)."""
    try:
        if options.get("segment"):
            segmenting.ensure_mask(spec, options["segment"], options["channel"], options.get("z"),
                                   options["keep_border"])
        image, labels, caxis, pick = field_source(spec, options["channel"], options.get("z"))
        channels = crop_channels(image, labels, caxis, pick)
        needs = None
        if options["crop_size"] is None:
            needs = crop_needs(labels, keep_border=options["keep_border"], rescale=options["rescale"],
                               orient=options["orient"]).astype(np.float32)
        reach = math.ceil(math.hypot(*[int(n) for n in np.shape(labels)[-2:]]))
        return Survey(spec.index, str(np.dtype(image.dtype)), channels, needs, reach=reach)
    except Exception as exc:
        return Survey(spec.index, error=_reason(exc))


def extract_field(spec: FieldSpec, plan: Plan, store: str) -> FieldReport:
    """Cut one field's objects and commit them as the store's part ``fields/NNNNN``, whole or not at all."""
    final = Path(store) / "fields" / part_name(spec.index)
    if final.exists():
        return FieldReport(spec.index, part_objects(final), skipped=part_skipped(final))
    try:
        crops, masks, table, skipped = _cut(spec, plan)
    except Exception as exc:
        return FieldReport(spec.index, error=_reason(exc))
    try:
        _commit(Path(store), spec.index, crops, masks, table, skipped)
    except OSError as exc:
        return FieldReport(spec.index, fatal=exc.strerror or str(exc))
    return FieldReport(spec.index, len(crops), skipped=len(skipped["label"]))


def _survey(task: tuple) -> Survey:
    """:func:`survey_field` on one task (spec, options): the function a backend maps."""
    return survey_field(*task)


def _extract(task: tuple) -> FieldReport:
    """:func:`extract_field` on one task (spec, plan, store path): the function a backend maps."""
    return extract_field(*task)


def _cut(spec: FieldSpec, plan: Plan):
    """The field's crops in the store's dtype, masks, table rows and the objects it left out; InputError when they do
    not fit the store. A field to segment whose mask is not written yet is segmented first."""
    if plan.segment:
        segmenting.ensure_mask(spec, plan.segment, plan.channel, plan.z, plan.keep_border)
    image, labels, caxis, pick = field_source(spec, plan.channel, plan.z)
    crops, masks, table, skipped = field_objects(image, labels, plan.size, keep_border=plan.keep_border,
                                                 rescale=plan.rescale, orient=plan.orient, normalize=plan.normalize,
                                                 channel_axis=caxis, channels=pick, oversize=plan.oversize)
    got = crops.shape[3] if crops.ndim == 4 else None
    if got != plan.channels:
        raise InputError(f"Its crops have {got or 'no'} channels where the store's have {plan.channels or 'none'}: "
                         "give fields with the same channels (or pick one with --channel).")
    if crops.dtype != plan.dtype:
        if not np.can_cast(crops.dtype, plan.dtype):
            raise InputError(f"Its image is {crops.dtype}, which the store's {plan.dtype} crops cannot hold exactly: "
                             "give fields of one dtype (or use --normalize).")
        crops = crops.astype(plan.dtype)
    return crops, masks, table, skipped


def _commit(store: Path, index: int, crops, masks, table, skipped) -> None:
    """Write one field's part under tmp/ and move it into fields/ with one rename (the commit); the objects it left
    out, if any, as ``skipped.parquet`` in it: files of the store a worker was given, its own to write
    (``core.atomic.owned``)."""
    with owned(store):
        _write_part(store, index, crops, masks, table, skipped)


def _write_part(store: Path, index: int, crops, masks, table, skipped) -> None:
    """:func:`_commit`'s writes: the part under tmp/, then one rename into fields/."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    import zarr

    tmp = store / "tmp" / f"{part_name(index)}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        group = zarr.open_group(tmp, mode="w", attributes={"field": index, "objects": len(crops)})
        for name, data in (("crops", crops), ("masks", masks)):
            chunk = max(1, min(len(data), CHUNK_BYTES // max(1, data[0:1].nbytes or data.itemsize)))
            array = group.create_array(name, shape=data.shape, chunks=(chunk,) + data.shape[1:], dtype=data.dtype,
                                       config=WHOLE_CHUNKS)
            if len(data):
                array[...] = data
        pq.write_table(pa.table(table), tmp / "rows.parquet")
        if len(skipped["label"]):
            pq.write_table(pa.table(skipped), tmp / "skipped.parquet")
        try:
            os.rename(tmp, store / "fields" / part_name(index))
        except OSError:
            if not (store / "fields" / part_name(index)).exists():   # else an earlier worker committed the same part
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def part_objects(part: Path) -> int:
    """How many objects a committed part holds (its group's attributes; no array is opened)."""
    import zarr

    return int(zarr.open_group(part, mode="r", zarr_format=3).attrs["objects"])


def part_skipped(part: Path) -> int:
    """How many objects a committed part left out (the rows of its ``skipped.parquet``; 0 without one)."""
    import pyarrow.parquet as pq

    path = Path(part) / "skipped.parquet"
    return pq.ParquetFile(path).metadata.num_rows if path.is_file() else 0


def part_rows(root: Path, index: int, columns=None):
    """Field ``index``'s table rows as its part holds them (an Arrow table); a part whose rows cannot be read is
    refused in one sentence naming the store, the field and how to cut it anew."""
    import pyarrow.parquet as pq

    part = Path(root) / "fields" / part_name(index)
    try:
        return pq.read_table(part / "rows.parquet", columns=columns)
    except Exception as exc:           # pyarrow's errors (ArrowInvalid, OSError, ...) have no common base of ours
        raise InputError(f"{root} is damaged: the rows of field {index} cannot be read ({_first_line(exc)}); delete "
                         f"{part} and run the same ticlust extract command again to cut that field anew.") from None


def _reason(exc: Exception) -> str:
    """Why a field was left out, in one sentence: ours as it is, anything else with its type."""
    return str(exc) if isinstance(exc, InputError) else f"{type(exc).__name__}: {exc}"


def part_name(index: int) -> str:
    """The name of field ``index``'s part (zero-padded, so that names sort in input order)."""
    return f"{index:05d}"


# ---- extraction ------------------------------------------------------------------------------------
def extract(input, store, *, labels=None, crop_size: int | None = None, keep_border: bool = False, channel=None,
            orient: bool = ROUTE_OPTIONS["orient"], normalize: bool = ROUTE_OPTIONS["normalize"], rescale: bool = False,
            z=None, oversize: str = OVERSIZE_DEFAULT, segment: str | None = None, diameter: float | None = None,
            threshold: str | None = None, channel_suffixes=None, workers: int | None = None,
            scheduler: str | None = None, client=None, progress=None) -> ObjectStore:
    """Cut every object of a plate into the object store ``store`` (a folder, e.g. ``plate.zarr``); docs/store.md.

    ``input``: a folder of fields with masks paired by name (``channel_suffixes=["D", "F"]``: of one file per channel,
    ``NAME_D.tif``, ...), a CSV manifest (``image,labels``, ``image_<Channel>`` columns, CellProfiler's LoadData or
    per-image table; other columns carried to every row), an OME-Zarr image or HCS plate with labels (``labels``
    names one), a microscope file bioio reads, or one field image with ``labels=MASK`` (:mod:`ticlust.plate.fields`).
    ``segment="nuclei"``: the fields have no masks; ticlust finds the nuclei (``diameter`` in pixels, ``threshold``
    method) in the first channel ``channel`` names and writes the masks beside the store (:mod:`.segment`).
    ``channel``: None (all), a channel's name or index (grey crops), or a list of them. ``z``: the Z plane of
    fields that have several, or ``"max"``. The crop options are the objects route's (``orient``, ``normalize``
    on); ``crop_size`` None: from a first pass over the masks, 99 % of the objects with a 10 % margin
    (:func:`ticlust.objects.crops.plate_size`), at most 128. ``oversize``: an object larger than the crop is left
    out and listed in ``ObjectStore.skipped`` (``"skip"``, as objects of one pixel are) or zoomed down to the crop
    (``"rescale"``); its field is cut either way. Where (docs/cluster.md): this process; ``workers=N``, a local
    dask cluster for the run; ``scheduler`` / ``client``, a running one seeing the same paths; the store is the
    same byte for byte. ``progress``: True (a bar on standard error) or a callable taking Progress events.

    Run it again on the same store to finish an interrupted run; a store made with other options or from another
    input is refused. Fields that cannot be read or cut are left out, named in one warning and in
    ``ObjectStore.failed``. Returns the :class:`ObjectStore`.
    """
    options = _options(crop_size, keep_border, channel, orient, normalize, rescale, z, oversize,
                       segmenting.segment_option(segment, diameter, threshold))
    root = Path(store)
    specs, listing, masks = _listing(input, root, labels, options, channel_suffixes)
    # a scheduler that cannot be reached fails here, before the store is touched
    backend = backend_for(workers, scheduler, client, notice=stderr_notice if progress is True else None,
                          tasks=len(specs))
    report = Reporter(progress)
    steps = _Steps(backend, report)
    finished = False
    try:
        with _locked(root) as lock:
            try:
                attrs = _resume(root, options, listing)
                lock.created = attrs is None
                if masks is not None:
                    segmenting.prepare_folder(masks, options, _digest(listing))
                attrs = attrs or _create(root, input, specs, listing, options, steps)
                failed = _extract_fields(root, specs, _plan_of(attrs), steps)
            finally:
                backend.close()        # a local cluster ends before the lock is let go
            _clear_tmp(root)           # what workers lost mid-commit left behind
            _something_cut(root, specs, listing, options, failed, lock)
            if _repair(root, listing):
                _finish(root, listing, failed)
            if masks is not None:
                segmenting.write_manifest(masks, listing, input)
        finished = True
    finally:
        backend.close()
        report.close(finished)
    result = ObjectStore(root)
    _left_out(result, failed, len(specs))
    return result


def _listing(input, root: Path, labels, options: dict, suffixes):
    """``(specs, listing, masks)``: the input's fields (refused before anything is written when a channel it names
    is not the input's, or the store would be the input) and, when ticlust segments them, the masks folder beside
    the store, every field's mask placed in it (:mod:`ticlust.plate.segment`); ``masks`` None otherwise."""
    segment = options.get("segment") is not None
    if segment and labels is not None:
        raise InputError("labels= (--labels) names masks to cut and segment= (--segment) makes them: give one of the two.")
    specs, listing = list_fields(input, labels, segment=segment, suffixes=suffixes)
    _known_channels(specs, options["channel"])
    _not_the_input(root, input)
    if not segment:
        return specs, listing, None
    masks = segmenting.masks_folder(root)
    return (*segmenting.with_masks(specs, listing, masks), masks)


def _left_out(store: ObjectStore, failed: list, fields: int) -> None:
    """One warning line for the fields left out (``failed``, of ``fields``) and one for the objects left out."""
    if failed:
        shown = "; ".join(f"{r['image']}: {r['error']}" for r in store.failed.head(2).to_dict("records"))
        more = f"; and {len(failed) - 2} more" if len(failed) > 2 else ""
        warnings.warn(f"{len(failed)} of {fields} fields were left out (listed in the store's failed table; a "
                      f"new run tries them again) — {shown}{more}", stacklevel=3)
    if len(store.skipped):
        warnings.warn(_skipped_note(store), stacklevel=3)


def _skipped_note(store: ObjectStore) -> str:
    """The one line that says which objects a store left out, and how to keep them."""
    reasons = store.skipped["reason"].value_counts().sort_index()
    told = ", ".join(f"{n} {why}" for why, n in reasons.items())
    keep = (" (--oversize rescale zooms the large ones down to the crop, --crop-size a larger crop keeps them whole)"
            if any(str(why).startswith("larger") for why in reasons.index) else "")
    fields = store.skipped["field_index"].nunique()
    return (f"{len(store.skipped)} objects were left out of {fields} field{'s' if fields > 1 else ''}, listed in the "
            f"store's skipped table: {told}{keep}")


def _options(crop_size, keep_border, channel, orient, normalize, rescale, z=None, oversize=OVERSIZE_DEFAULT,
             segment: dict | None = None) -> dict:
    """The extraction options as the store records them, checked (``z``, ``oversize`` and ``segment`` only when
    given and not the default, so that the stores made before they existed are finished with the same options)."""
    if crop_size is not None:
        whole_number(crop_size, "crop_size", 4, "pixels", none_means="fit the objects")
    if oversize not in OVERSIZE:
        raise InputError(f"oversize={oversize!r} is not known: choose 'skip' (objects larger than the crop are left out "
                         "and listed) or 'rescale' (they are zoomed down to the crop).")
    options = {"crop_size": None if crop_size is None else int(crop_size), "keep_border": bool(keep_border),
               "channel": channel_option(channel), "orient": bool(orient), "normalize": bool(normalize),
               "rescale": bool(rescale)}
    if z is not None:
        options["z"] = z_option(z)
    if oversize != OVERSIZE_DEFAULT:
        options["oversize"] = oversize
    if segment is not None:
        options["segment"] = segment
    return options


def channel_option(channel):
    """A channel choice as a store records it: None, an index, a name, or a list of indices and names; one sentence
    for anything else or a repeat. A text means what it means typed (:func:`typed_channels`): ``"DNA,ER"`` is
    ``["DNA", "ER"]``, ``"0,2"`` the indices ``[0, 2]`` as ``--channel 0,2`` is."""
    if isinstance(channel, str) and channel.strip():
        channel = typed_channels(channel)
    if channel is None or (isinstance(channel, (int, np.integer)) and not isinstance(channel, bool)):
        return None if channel is None else int(channel)
    picks = list(channel) if isinstance(channel, (list, tuple)) else [channel]
    bad = [c for c in picks if isinstance(c, bool) or not isinstance(c, (str, int, np.integer))
           or (isinstance(c, str) and not c.strip())]
    if bad or not picks:
        raise InputError(f"channel={channel!r} must be a channel's name or index, or a list of them (or None: all "
                         "channels).")
    picks = [c.strip() if isinstance(c, str) else int(c) for c in picks]
    twice = next((c for c in picks if picks.count(c) > 1), None)
    if twice is not None:
        raise InputError(f"channel={channel!r} names the channel {twice!r} twice: name each channel once.")
    return picks if isinstance(channel, (list, tuple)) else picks[0]


def typed_channels(text: str):
    """Channels as typed (``--channel``, the plate dock's field): one name or index, a list of them (``DNA,ER`` or
    ``0,2``: the crops' channels in that order), or None for a blank text (every channel)."""
    if not str(text).strip():
        return None
    picks = [int(t) if t.strip().isdigit() else t.strip() for t in str(text).split(",")]
    if any(p == "" for p in picks):
        raise InputError(f"{text!r} has an empty channel name: give NAME or NAME,NAME (or indices).")
    return picks if len(picks) > 1 else picks[0]


def z_option(z):
    """The Z plane choice as a store records it: an index from 0, or ``"max"`` (the maximum projection)."""
    if isinstance(z, str) and z.strip().lower() == "max":
        return "max"
    if isinstance(z, str) and z.strip().isdigit():
        return int(z)
    if isinstance(z, bool) or not isinstance(z, (int, np.integer)) or z < 0:
        raise InputError(f"z={z!r} must be a Z plane's index (0, 1, ...) or 'max' for the maximum projection.")
    return int(z)


def _known_channels(specs, channel) -> None:
    """Refuse, before anything is written, a channel name that a listing naming its channels (a manifest's channel
    columns) does not have."""
    names = channel_names(specs[0]) if specs else None
    wanted = channel if isinstance(channel, list) else [channel]
    unknown = [c for c in wanted if isinstance(c, str)] if names is not None else []
    unknown = [c for c in unknown if c not in names]
    if unknown:
        raise InputError(f"The input has no channel {unknown[0]!r}: its channels are {', '.join(names)} (--channel takes "
                         "their names or indices).")


@contextmanager
def store_lock(root: Path, busy: str):
    """Hold the store's lock file (``.lock``, an exclusive flock) while the block runs: every run that writes
    into a store (an extraction, a prediction) takes it, so a second one is refused with ``busy``, one
    sentence. A lock file this call made in a folder that is no store when it ends (a refused extraction) is
    removed again: nothing is left in the user's folder. Where there is no fcntl (Windows) there is no lock."""
    with owned(root), _flock(root, busy):    # the store's own files: this run's to write while it holds the lock
        yield


@contextmanager
def _flock(root: Path, busy: str):
    """:func:`store_lock`'s lock file and its flock."""
    lock = Path(root) / ".lock"
    made = not lock.exists()
    handle = open(lock, "a")
    try:
        try:
            import fcntl

            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except ImportError:
            pass
        except OSError:
            made = False               # another run's lock
            raise InputError(busy) from None
        yield
    finally:
        handle.close()
        if made and read_attributes(root) is None:
            lock.unlink(missing_ok=True)


def busy(root, then: str) -> str:
    """The sentence for a run refused because another holds the store's lock; ``then``: what to do after it."""
    return (f"Another run (an extraction or a prediction) is writing to {root} now: let it finish (or stop it), then "
            f"{then}.")


@dataclass
class _Lock:
    """What an extraction tells :func:`_locked` about its store: whether this run created it, and whether the
    refusal on its way out (a run that cut nothing) takes the store it created away again."""

    created: bool = False
    discard: bool = False


@contextmanager
def _locked(root: Path):
    """Hold the store's lock for an extraction: a second run into the same store is refused. A folder that
    is no store is refused before anything is written into it; a store folder this run made and did not get as
    far as creating, or created and then found to hold nothing, is removed again (of a folder that was there,
    only the store's own entries)."""
    if root.exists() and not root.is_dir():
        raise InputError(f"{root} is a file, not an object store: choose a new folder name for the store.")
    if root.is_dir() and read_attributes(root) is None:
        _refuse_foreign(root)
    made = not root.exists()
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"Cannot make the store folder {root} ({exc.strerror}): choose a writable place.") from None
    lock = _Lock()
    try:
        with store_lock(root, busy(root, "run again")):
            try:
                yield lock
            except BaseException:      # removed with the lock held: another run's store is never touched
                if lock.discard or (made and read_attributes(root) is None):
                    _remove_store(root, made)
                raise
    except InputError:
        if made and root.is_dir() and not any(root.iterdir()):   # refused at the lock: an empty folder it made goes
            root.rmdir()
        raise


def _remove_store(root: Path, made: bool) -> None:
    """Remove what an extraction wrote: the whole folder when it made it, else only the store's own entries."""
    if made:
        shutil.rmtree(root, ignore_errors=True)
        return
    for name in STORE_ENTRIES:
        path = root / name
        shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)


def _not_the_input(root: Path, input) -> None:
    """Refuse a store path that is the input itself or lies inside an input folder's Zarr (an OME-Zarr)."""
    try:
        store, source = root.resolve(), Path(input).resolve()
    except OSError:
        return
    if store == source:
        raise InputError(f"The store {root} is the input {input}: choose a new folder for the store, so that the "
                         "input is never written into.")
    if source.is_dir() and (source / "zarr.json").exists() and store.is_relative_to(source):
        raise InputError(f"The store {root} lies inside the OME-Zarr input {input}: choose a folder outside it.")
    outer = zarr_root(store.parent)
    if outer is not None:
        raise InputError(f"The store {root} lies inside the Zarr hierarchy {outer} (an object store, an OME-Zarr): "
                         "choose a folder outside it.")


def _refuse_foreign(root: Path) -> None:
    """Refuse a folder that holds anything but an unfinished store's own entries: a damaged store by what is
    damaged, any other folder by what it holds."""
    problem = store_problem(root)
    if problem is not None:
        raise InputError(f"{root} is a damaged object store ({problem}): extract the plate into a new folder (or "
                         "delete this one first).")
    strange = sorted(p.name for p in root.iterdir() if p.name not in UNFINISHED_ENTRIES and
                     not p.name.endswith(".partial"))
    if strange:
        raise InputError(f"{root} exists and is not an object store (it holds {', '.join(strange[:3])}): choose a "
                         "new folder for the store.")


def _digest(listing) -> str:
    """A fingerprint of the input's listing (paths, order, manifest values): what a resumed run must match."""
    return hashlib.sha256(listing.to_csv(index=False).encode()).hexdigest()


def _resume(root: Path, options: dict, listing) -> dict | None:
    """The attributes of the store at ``root`` when this run continues it; None when there is none yet.
    Refuses a store made with other options or from another input, and a folder that is no store."""
    attrs = read_attributes(root)
    if attrs is None:
        _refuse_foreign(root)
        return None
    if attrs["options"] != options:
        theirs = ", ".join(f"{k}={attrs['options'].get(k)!r}" for k in options if attrs["options"].get(k) != options[k])
        asked = ", ".join(f"{k}={options[k]!r}" for k in options if attrs["options"].get(k) != options[k])
        raise InputError(f"{root} was made with {theirs}, not {asked}: give the store's options to finish it, or "
                         "choose a new store path.")
    if attrs["input"]["digest"] != _digest(listing):
        raise InputError(f"{root} was made from another input ({attrs['input']['fields']} fields of "
                         f"{attrs['input']['path']}): give that input to finish it, or choose a new store path.")
    _clear_tmp(root)                                       # parts of killed runs that never got committed
    return attrs


def _clear_tmp(root: Path) -> None:
    """Empty tmp/: parts begun by killed runs or lost workers, never committed."""
    shutil.rmtree(root / "tmp", ignore_errors=True)
    (root / "tmp").mkdir(exist_ok=True)


def _create(root: Path, input, specs, listing, options: dict, steps: _Steps) -> dict:
    """A new store: the first pass over the masks fixes crop size, dtype and channels, then the listing,
    the fields group and the attributes (last: from then on the folder is a store)."""
    stage = "segmenting fields" if options.get("segment") else "measuring masks"
    with closing(steps.map(_survey, [(s, options) for s in specs], stage)) as results:
        surveys = sorted(results, key=lambda s: s.field)
    crop = _crop_of(surveys, options, listing)
    attrs = {"format": FORMAT, "options": options, "crop": crop,
             "input": {"path": str(Path(input).resolve()), "fields": len(specs), "digest": _digest(listing)},
             "complete": False, "objects": 0, "failed": 0}
    with _write_errors(root, "before any field was cut"):
        write_atomic(root / "fields.parquet", lambda tmp: listing.to_parquet(tmp, index=False))
        (root / "fields").mkdir(exist_ok=True)
        # by hand, not zarr.open_group: zarr writes the same group with its keys in another order, and the
        # stores made so far have these bytes (a resumed or re-run extraction ends byte for byte the same)
        _write_json(root / "fields" / "zarr.json", {"zarr_format": 3, "node_type": "group", "attributes": {}})
        shutil.rmtree(root / "tmp", ignore_errors=True)
        (root / "tmp").mkdir()
        _write_attributes(root, attrs)
    return attrs


@contextmanager
def _write_errors(root: Path, progress: str):
    """An OSError while writing the store's own files (a full disk, a read-only folder) as one sentence:
    what failed, how far the run got (``progress``) and how to go on."""
    try:
        yield
    except OSError as exc:
        raise InputError(f"Writing to {root} failed ({exc.strerror or _first_line(exc)}) {progress}: free space (or "
                         "fix the folder's permissions) and run the same command again to finish the store.") from None


def _crop_of(surveys, options: dict, listing) -> dict:
    """The store's crop size, dtype and channels, from the fields that could be read (the first one's channels)."""
    ok = [s for s in surveys if s.error is None]
    if not ok:
        first = surveys[0]
        raise InputError(_cannot_cut(len(surveys), listing["image"][first.field], first.error))
    same = [s for s in ok if s.channels == ok[0].channels]
    dtype = "float32" if options["normalize"] else str(np.result_type(*[np.dtype(s.dtype) for s in same]))
    size = options["crop_size"]
    largest = 2 * max(s.reach for s in ok) + 8
    if size is not None and size > largest:
        raise InputError(f"crop_size={size} is larger than any object of these fields can need (at most {largest} "
                         "pixels, twice the largest field's diagonal): give a smaller crop size, or none to fit the "
                         "objects.")
    if size is None:
        needs = np.concatenate([s.needs for s in same])
        if needs.size == 0:
            raise InputError(_no_objects(len(surveys), options))
        size = plate_size(needs, options["rescale"], MAX_AUTO_SIZE)
    return {"size": int(size), "dtype": dtype, "channels": ok[0].channels}


def _cannot_cut(fields: int, image, error: str) -> str:
    """The sentence for a plate none of whose fields can be cut, naming the first and why."""
    which = f"None of the {fields} fields can be cut; the first, " if fields > 1 else "The field "
    return f"{which}{image}: {error}"


def _no_objects(fields: int, options: dict) -> str:
    """The sentence for a plate whose masks hold no object to cut."""
    border = "" if options["keep_border"] else " away from the border (keep_border=True keeps those)"
    return (f"The masks of the {fields} fields hold no objects{border}: check that the masks are the segmentations of "
            "the images.")


def _something_cut(root: Path, specs, listing, options: dict, failed: list[FieldReport], lock: _Lock) -> None:
    """Refuse, as the first pass refuses a plate none of whose fields can be read, a run after which no field
    has an object in the store (every field failed when cut, or their masks held nothing to keep): a store
    this run created is then taken away again (``lock.discard``)."""
    for spec in specs:
        part = root / "fields" / part_name(spec.index)
        if part.exists() and part_objects(part) > 0:
            return
    lock.discard = lock.created
    if failed and len(failed) == len(specs):
        raise InputError(_cannot_cut(len(specs), listing["image"][failed[0].field], failed[0].error))
    raise InputError(_no_objects(len(specs), options))


def _damaged_tables(root: Path, complete: bool, objects: int) -> list[str]:
    """The store's Parquet files that cannot be read whole: fields.parquet, and of a complete store table.parquet
    (also when it does not hold the store's ``objects`` rows in field order) and failed.parquet."""
    import pyarrow.parquet as pq

    bad = []
    tables = ("table.parquet", "failed.parquet") + (("skipped.parquet",) if (root / "skipped.parquet").exists() else ())
    for name in ("fields.parquet",) + (tables if complete else ()):
        try:
            table = pq.read_table(root / name)
        except Exception:      # pyarrow's errors (ArrowInvalid, OSError, ...) have no common base of ours
            bad.append(name)
            continue
        if name == "table.parquet" and _table_problem(table.column_names, table, objects) is not None:
            bad.append(name)
    return bad


#: The columns every store's table has (besides the manifest's).
TABLE_NEEDS = ("field_index", "image", "labels") + TABLE_COLUMNS


def _table_problem(names, table, objects: int) -> str | None:
    """What is wrong with a store's table (its column ``names``, and ``table``, which has at least the field_index
    column): a column missing, another row count than the store's ``objects``, rows out of field order."""
    missing = [c for c in TABLE_NEEDS if c not in names]
    if missing:
        return f"lacks the column{'s' if len(missing) > 1 else ''} {', '.join(missing)}"
    if table.num_rows != objects:
        return f"holds {table.num_rows} rows where the store has {objects} objects"
    if np.any(np.diff(table.column("field_index").to_numpy()) < 0):
        return "is not in field order"
    return None


def _repair(root: Path, listing) -> bool:
    """Write fields.parquet again when it cannot be read; whether the last step (table, failed, the complete mark)
    must be done (again): the store is not complete, or its table or failed list cannot be read whole."""
    attrs = read_attributes(root)
    damaged = _damaged_tables(root, attrs["complete"], attrs["objects"])
    if "fields.parquet" in damaged:
        with _write_errors(root, "with every field done"):
            write_atomic(root / "fields.parquet", lambda tmp: listing.to_parquet(tmp, index=False))
    return not attrs["complete"] or bool(set(damaged) - {"fields.parquet"})


def _plan_of(attrs: dict) -> Plan:
    """The per-field plan from a store's attributes, so a resumed run cuts exactly as the first did."""
    o, c = attrs["options"], attrs["crop"]
    return Plan(c["size"], c["dtype"], c["channels"], o["keep_border"], o["channel"], o["orient"], o["normalize"],
                o["rescale"], o.get("z"), o.get("oversize", OVERSIZE_DEFAULT), o.get("segment"))


def _extract_fields(root: Path, specs, plan: Plan, steps: _Steps) -> list[FieldReport]:
    """Cut every field that has no part yet; the fields left out. A write that fails stops the run."""
    todo = [s for s in specs if not (root / "fields" / part_name(s.index)).exists()]
    attrs = read_attributes(root)
    if todo and attrs["complete"]:
        with _write_errors(root, "before any field was cut"):
            _write_attributes(root, {**attrs, "complete": False})
    failed = []
    with closing(steps.map(_extract, [(s, plan, str(root)) for s in todo], "cutting fields")) as results:
        for r in results:
            if r.fatal:
                done = sum((root / "fields" / part_name(s.index)).exists() for s in specs)
                raise InputError(f"Writing to {root} failed ({r.fatal}) with {done} of {len(specs)} fields done: free "
                                 "space (or fix the folder's permissions) and run the same command again to finish "
                                 "the rest.")
            if r.error:
                failed.append(r)
    return sorted(failed, key=lambda r: r.field)


def _finish(root: Path, listing, failed: list[FieldReport]) -> None:
    """Write table.parquet (every part's rows in field order, with the field's listing columns), failed.parquet and
    skipped.parquet, then mark the store complete; all of it again if killed before the mark."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    fields = pa.Table.from_pandas(listing, preserve_index=False).replace_schema_metadata()
    rows_schema = pa.table(field_objects(np.zeros((1, 1)), np.zeros((1, 1), np.int32), 8)[2]).schema
    schema = pa.schema(list(fields.schema) + list(rows_schema))
    total = 0

    def write(tmp):
        nonlocal total
        with pq.ParquetWriter(tmp, schema) as writer:
            buffer = []
            for i in range(len(listing)):
                part = root / "fields" / part_name(i)
                if not part.exists():
                    continue
                rows = part_rows(root, i)
                n = rows.num_rows
                columns = [pa.repeat(fields.column(c)[i], n) for c in fields.column_names] + rows.columns
                buffer.append(pa.Table.from_arrays(columns, schema=schema))
                total += n
                if sum(t.num_rows for t in buffer) >= ROW_GROUP:
                    writer.write_table(pa.concat_tables(buffer), row_group_size=ROW_GROUP)
                    buffer = []
            if buffer:
                writer.write_table(pa.concat_tables(buffer), row_group_size=ROW_GROUP)

    with _write_errors(root, "with every field done"):
        write_atomic(root / "table.parquet", write)
        errors = {r.field: r.error for r in failed}
        left = listing[listing["field_index"].isin(list(errors))].copy()
        left["error"] = [errors[f] for f in left["field_index"]]
        write_atomic(root / "failed.parquet", lambda tmp: left.to_parquet(tmp, index=False))
        skipped = _skipped_rows(root, listing)
        write_atomic(root / "skipped.parquet", lambda tmp: skipped.to_parquet(tmp, index=False))
        _write_attributes(root, {**read_attributes(root), "complete": True, "objects": total, "failed": len(failed),
                                 "skipped": len(skipped)})


#: The columns of a store's skipped table after the listing's: the object as its field's table would have had it,
#: the crop side it needs, and why it was left out.
SKIPPED_COLUMNS = tuple(c for c in TABLE_COLUMNS if c not in ("scale", "angle")) + ("needs", "reason")


def _skipped_rows(root: Path, listing):
    """Every part's objects left out (its ``skipped.parquet``), in field order, with the field's listing columns."""
    import pandas as pd

    frames = []
    for i in range(len(listing)):
        path = root / "fields" / part_name(i) / "skipped.parquet"
        if path.is_file():
            rows = pd.read_parquet(path)
            frames.append(pd.concat([listing.iloc[[i] * len(rows)].reset_index(drop=True), rows], axis=1))
    if frames:
        return pd.concat(frames, ignore_index=True)
    kinds = {"centroid_y": np.float64, "centroid_x": np.float64, "touches_border": bool, "reason": object}
    empty = pd.DataFrame({c: pd.Series(dtype=kinds.get(c, np.int64)) for c in SKIPPED_COLUMNS})
    return pd.concat([listing.iloc[[]].reset_index(drop=True), empty], axis=1)


# ---- running the steps -----------------------------------------------------------------------------
class _Steps:
    """Runs per-field steps through a :class:`~ticlust.core.backends.Backend` (this process, or a dask
    cluster's workers), turning every finished step into a Progress record."""

    def __init__(self, backend: Backend, report):
        self.backend = backend
        self.report = report

    def map(self, fn, tasks: list[tuple], stage: str):
        """``fn(task)`` for every task; results as they come, progress reported; the tasks not yet started
        are dropped (and those under way waited for) when the caller stops reading (a failed write)."""
        total = len(tasks)
        with closing(self.backend.imap(fn, tasks)) as results:
            for step, (_, result) in enumerate(results, 1):
                self.report(stage, step, total)
                yield result


class Reporter:
    """Where the progress of a run over a store goes — extraction, prediction, the fit on a store — and the one
    place that turns its steps into :class:`ticlust.events.Progress` events: ``progress`` True (a bar on
    standard error, ``api.TerminalProgress``), a callable taking Progress events, or None/False (nowhere, and
    nothing imported). A driver's steps get their ETA from their stage's pace (``core.execute.StagePace``); a
    fit's events, whose ETA the execution seam fills in, come in through :meth:`sink`."""

    def __init__(self, progress):
        self.bar = None
        if progress is True:
            from ..api import TerminalProgress

            self.bar = TerminalProgress()
        self.to = self.bar.update if self.bar is not None else (progress if callable(progress) else None)
        self.pace = None
        self.used = False

    def __call__(self, stage: str, step: int, total: int, paced: int | None = None) -> None:
        """``step`` of ``total`` done at ``stage``. ``paced``: the steps this run did itself (default ``step``),
        what the ETA's pace counts: a part an earlier run did costs nothing."""
        if self.to is None:
            return
        from ..core.execute import StagePace
        from ..events import Progress

        self.pace = self.pace or StagePace()
        self.used = True
        eta = self.pace.eta(stage, step if paced is None else paced, total - step)
        self.to(Progress(step=step, total=total, stage=stage, eta=eta))

    def sink(self, event) -> None:
        """The execution seam's sink (``core.execute.execute``): its Progress events as they are (their ETA
        filled in by the seam), and its Snapshots to a callable ``progress`` (a dock's live prototypes); Done ends
        the bar's line."""
        from ..events import Done, Progress, Snapshot

        if isinstance(event, Progress) and self.to is not None:
            self.used = True
            self.to(event)
        elif isinstance(event, Snapshot) and self.bar is None and self.to is not None:
            self.to(event)
        elif isinstance(event, Done) and self.bar is not None:
            self.used = True
            self.close()

    def close(self, finished: bool = True) -> None:
        """End the bar's line: "done" after a finished run, a bare line break after a failed one."""
        if self.bar is not None and self.used:
            self.bar.close() if finished else self.bar.stream.write("\n")
        self.used = False


# ---- files ---------------------------------------------------------------------------------------
def _write_json(path: Path, obj) -> None:
    """A JSON file (sorted keys: the same content gives the same bytes), written atomically."""
    write_atomic(path, lambda tmp: tmp.write_text(json.dumps(obj, indent=2, sort_keys=True)))


def _write_attributes(root: Path, attrs: dict) -> None:
    """The store's root zarr.json (a Zarr v3 group) with ``attrs`` under ``ticlust``. Written by hand, not
    through zarr: it is the store's commit mark (``complete``), so it must be replaced atomically (temp file +
    rename; zarr writes in place), and zarr would order its keys otherwise than the stores made so far."""
    _write_json(root / "zarr.json", {"zarr_format": 3, "node_type": "group", "attributes": {"ticlust": attrs}})


def read_attributes(root) -> dict | None:
    """The store's ``ticlust`` attributes (options, crop, input, state); None when ``root`` is no store (or its
    attributes are damaged: :func:`store_problem` says how)."""
    attrs = _raw_attributes(root)
    return attrs if isinstance(attrs, dict) and _attributes_problem(attrs) is None else None


def _raw_attributes(root):
    """The ``ticlust`` entry of ``root``'s zarr.json as zarr reads it; None when there is none, or the exception
    that reading it raised."""
    if not (Path(root) / "zarr.json").is_file():       # no Zarr v3 node: not a store, and zarr not imported
        return None
    import zarr

    try:
        return zarr.open_group(root, mode="r", zarr_format=3).attrs.get("ticlust")
    except Exception as exc:           # zarr's errors (ValueError, JSONDecodeError, OSError, ...) have no common base
        return exc


#: The attributes a store's zarr.json holds under ``ticlust``, and the type of each.
ATTRIBUTE_TYPES = {"format": int, "options": dict, "crop": dict, "input": dict, "complete": bool, "objects": int,
                   "failed": int}


def _attributes_problem(attrs: dict) -> str | None:
    """What is wrong with a store's attributes (a key missing or of another type, another format); None if nothing."""
    if attrs.get("format") != FORMAT:
        return f"it is of format {attrs.get('format')!r}, and this ticlust reads format {FORMAT}"
    wrong = [k for k, kind in ATTRIBUTE_TYPES.items() if not isinstance(attrs.get(k), kind)]
    crop = attrs.get("crop") if isinstance(attrs.get("crop"), dict) else {}
    wrong += [f"crop.{k}" for k, kind in (("size", int), ("dtype", str)) if not isinstance(crop.get(k), kind)]
    wrong += [f"input.{k}" for k in ("path", "fields", "digest") if not isinstance(attrs.get("input"), dict)
              or k not in attrs["input"]]
    return f"its attributes lack or mistype {', '.join(wrong)}" if wrong else None


def store_problem(root) -> str | None:
    """Why a folder laid out as an object store (a zarr.json beside fields.parquet or fields/) cannot be opened as
    one, in a few words; None when it opens, or when it is no store at all."""
    root = Path(root)
    if not (root / "zarr.json").is_file() or not ((root / "fields.parquet").is_file() or (root / "fields").is_dir()):
        return None
    attrs = _raw_attributes(root)
    if isinstance(attrs, Exception):
        return "its zarr.json cannot be read as JSON"
    if not isinstance(attrs, dict):
        return "its zarr.json holds no ticlust attributes"
    return _attributes_problem(attrs)


# ---- reading a store -------------------------------------------------------------------------------
def open_objects(path) -> ObjectStore:
    """Open an object store written by :func:`extract` (``ticlust extract``)."""
    return ObjectStore(path)


def read_crops(path, index) -> np.ndarray:
    """The crops of objects ``index`` (rows of the table) of the store at ``path``: what a chunk task on a worker
    reads (``kernels.chunked.StoreSample``), by path, so crops never travel through a scheduler."""
    return open_objects(path).crops[np.asarray(index)]


class ObjectStore:
    """An object store on disk: ``table`` (a DataFrame, one row per object), ``crops`` and ``masks`` (lazy
    arrays in table order), ``options`` (how it was extracted), ``fields`` (the input's listing) and
    ``failed`` (the fields left out, with why)."""

    def __init__(self, path):
        self.path = Path(path)
        attrs = read_attributes(self.path)
        if attrs is None:
            problem = store_problem(self.path)
            if problem is not None:
                raise InputError(f"{self.path} is a damaged object store ({problem}): extract the plate again into a "
                                 "new store.")
            raise InputError(f"{self.path} is not an object store: make one with ticlust extract INPUT -o STORE.")
        if not attrs["complete"]:
            raise InputError(f"{self.path} is not finished (an extraction stopped part-way): run the same "
                             "ticlust extract command again to finish it.")
        self.attributes = attrs
        self.options = dict(attrs["options"])
        self.size, self.dtype, self.channels = attrs["crop"]["size"], np.dtype(attrs["crop"]["dtype"]), attrs["crop"]["channels"]

    def __len__(self) -> int:
        return int(self.attributes["objects"])

    def __repr__(self) -> str:
        item = f"{self.size}×{self.size}" + (f"×{self.channels}" if self.channels else "")
        return (f"ObjectStore({str(self.path)!r}: {len(self)} objects, {item} {self.dtype} crops, "
                f"{self.attributes['input']['fields']} fields, {self.attributes['failed']} failed)")

    @cached_property
    def table(self):
        """One row per object, in crop order: field, image, labels, the manifest's columns, then label,
        frame, centroid, bbox, area, touches_border, scale, angle (see docs/objects.md)."""
        return self._read_table("table.parquet").to_pandas()

    @cached_property
    def fields(self):
        """The input's listing: one row per field (field, image, labels, the manifest's columns)."""
        return self._read_table("fields.parquet").to_pandas()

    @cached_property
    def failed(self):
        """The fields left out: their listing row and ``error``, the reason in one sentence."""
        return self._read_table("failed.parquet").to_pandas()

    @cached_property
    def skipped(self):
        """The objects left out of the fields that were cut — larger than the crop (``--oversize skip``) or of one
        pixel — each with its field's listing row, its measured columns (label, centroid, bbox, area, ...),
        ``needs`` (the crop side it needs) and ``reason``; empty for a store made before the table existed."""
        if not (self.path / "skipped.parquet").is_file():
            import pandas as pd

            return pd.DataFrame(columns=["field_index", "image", "labels", *SKIPPED_COLUMNS])
        return self._read_table("skipped.parquet").to_pandas()

    @cached_property
    def field_index(self) -> np.ndarray:
        """The table's field_index column (objects in table order), checked to hold one row per object, in field
        order: what the parts, a fit's sample and a field's rows are found by."""
        import pyarrow.parquet as pq

        table = self._read_table("table.parquet", columns=["field_index"])
        why = _table_problem(pq.read_schema(self.path / "table.parquet").names, table, len(self))
        if why is not None:
            raise InputError(f"{self.path} is damaged: its table.parquet {why}; run the same ticlust extract command "
                             "again to write it anew.")
        return table.column("field_index").to_numpy()

    @cached_property
    def _parts(self):
        """The parts that hold objects, in table order, and how many each holds (from the table's field_index)."""
        ids, counts = np.unique(self.field_index, return_counts=True)
        return [self.path / "fields" / part_name(int(i)) for i in ids], counts

    def check_parts(self) -> None:
        """Refuse, in one sentence, a store one of whose parts (a field with objects) is missing from its folder."""
        paths, _ = self._parts
        missing = [p for p in paths if not (p / "zarr.json").is_file()]
        if missing:
            more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
            raise InputError(f"{self.path} is damaged: the part of field {int(missing[0].name)} ({missing[0]}) is "
                             f"missing{more}; run the same ticlust extract command again to cut it anew.")

    def input_files(self) -> tuple[Path, list[Path]]:
        """``(input, files)``: the input the store was extracted from (a folder, a manifest, an OME-Zarr) and every
        field's image and mask file (none for an OME-Zarr, whose fields lie inside it), as absolute paths."""
        from .fields import CHANNEL_PREFIX, _beside, _is_zarr

        source = Path(self.attributes["input"]["path"])
        if source.is_dir() and _is_zarr(source):
            return source, []
        base = source if source.is_dir() else source.parent
        columns = ["image", "labels"] + [c for c in self.fields.columns if str(c).startswith(CHANNEL_PREFIX)]
        files = list(dict.fromkeys(_beside(base, v) for c in columns for v in self.fields[c]))
        return source, [Path(f) for f in files if f is not None]

    def _read_table(self, name: str, columns=None):
        """One of the store's Parquet files as an Arrow table; a missing or damaged one is refused by name."""
        import pyarrow.parquet as pq

        try:
            return pq.read_table(self.path / name, columns=columns)
        except Exception as exc:      # pyarrow's errors (ArrowInvalid, OSError, ...) have no common base of ours
            raise InputError(f"{self.path} is damaged: its {name} cannot be read ({_first_line(exc)}); extract "
                             "the plate again into a new store.") from None

    @cached_property
    def crops(self) -> LazyStack:
        """The crops (N, size, size[, C]), read part by part on indexing."""
        paths, counts = self._parts
        item = (self.size, self.size) + ((self.channels,) if self.channels else ())
        return LazyStack([p / "crops" for p in paths], counts, item, self.dtype)

    @cached_property
    def masks(self) -> LazyStack:
        """The objects' masks (N, size, size) bool: which pixels of each crop are the object."""
        paths, counts = self._parts
        return LazyStack([p / "masks" for p in paths], counts, (self.size, self.size), np.dtype(bool))


def _whole_array(path: Path):
    """The Zarr array at ``path``, refused (ValueError) when chunks of it are missing from disk."""
    import zarr

    array = zarr.open_array(path, mode="r")
    have, want = array.nchunks_initialized, array.nchunks
    if have != want:
        raise ValueError(f"{want - have} of its {want} chunks are missing")
    return array


class LazyStack:
    """Per-field Zarr arrays seen as one array along the object axis: indexing (an int, a slice, an
    index or boolean array, then the other axes) reads only the parts it touches. ``np.asarray`` reads
    all; ``dask.array.from_array(stack, chunks=...)`` makes a dask array of it."""

    def __init__(self, paths: list[Path], counts, item_shape: tuple, dtype):
        self.paths = list(paths)
        self.offsets = np.concatenate([[0], np.cumsum(np.asarray(counts, np.int64))]).astype(np.int64)
        self.shape = (int(self.offsets[-1]),) + tuple(item_shape)
        self.dtype = np.dtype(dtype)
        self.ndim = len(self.shape)
        self._open: dict[int, object] = {}

    @classmethod
    def one(cls, path: Path):
        """``(stack, array)``: a LazyStack over one Zarr array (a part's crops or masks), its length, item shape and
        dtype read from the array, which is opened (and checked) as a read would."""
        array = cls([path], [0], (), np.uint8)._part(0)
        stack = cls([path], [array.shape[0]], array.shape[1:], array.dtype)
        stack._open[0] = array
        return stack, array

    def __len__(self) -> int:
        return self.shape[0]

    def _part(self, k: int):
        """Part ``k``'s Zarr array, opened on first use, with every chunk on disk (zarr reads a missing chunk as
        zeros: a chunk deleted after extraction must not pass for objects) and of the shape the store's table and
        attributes give it."""
        if k not in self._open:
            def opened():
                array = _whole_array(self.paths[k])
                want = (int(self.offsets[k + 1] - self.offsets[k]),) + self.shape[1:]
                if self.shape[1:] and tuple(array.shape) != want:
                    raise ValueError(f"it holds {tuple(array.shape)} where the store's table and attributes say {want}")
                return array

            self._open[k] = self._checked(k, opened)
        return self._open[k]

    def _read(self, k: int, key, orthogonal: bool = False) -> np.ndarray:
        """``part[key]`` (``.oindex[key]`` when ``orthogonal``) of part ``k``, read now."""
        part = self._part(k)
        return self._checked(k, lambda: np.asarray(part.oindex[key] if orthogonal else part[key]))

    def _checked(self, k: int, read):
        """``read()``; a chunk or array that cannot be read (damaged, truncated, deleted) is refused in one
        sentence naming the store, the field and how to cut that field again."""
        try:
            return read()
        except Exception as exc:     # zarr and its codecs raise many kinds (RuntimeError, ValueError, OSError, ...)
            part = self.paths[k].parent
            fix = f"delete {part} and run" if part.exists() else "run"
            raise InputError(f"{part.parent.parent} is damaged: the {self.paths[k].name} of field {int(part.name)} "
                             f"cannot be read ({_first_line(exc)}); {fix} the same ticlust extract command again to cut "
                             "that field anew.") from None

    def __getitem__(self, key):
        key = key if isinstance(key, tuple) else (key,)
        first, rest = (key[0], key[1:]) if key else (slice(None), ())
        if first is Ellipsis:
            first, rest = slice(None), (Ellipsis,) + rest
        if isinstance(first, (int, np.integer)):
            i = int(first) + (len(self) if first < 0 else 0)
            if not 0 <= i < len(self):
                raise IndexError(f"index {first} is out of range for {len(self)} objects")
            k = int(np.searchsorted(self.offsets, i, side="right")) - 1
            return self._read(k, i - int(self.offsets[k]))[rest]
        index = np.arange(len(self))[first] if isinstance(first, slice) else self._indices(first)
        out = np.empty((len(index),) + self.shape[1:], self.dtype)
        part = np.searchsorted(self.offsets, index, side="right") - 1
        for k in np.unique(part):
            sel = np.flatnonzero(part == k)
            local = index[sel] - self.offsets[k]
            if len(local) > 1 and np.all(np.diff(local) == 1):
                out[sel] = self._read(int(k), slice(int(local[0]), int(local[-1]) + 1))
            else:
                out[sel] = self._read(int(k), local, orthogonal=True)
        return out[(slice(None),) + rest] if rest else out

    def _indices(self, first) -> np.ndarray:
        """An index or boolean array along the object axis as object numbers, checked."""
        index = np.asarray(first)
        if index.dtype == bool:
            if index.shape != (len(self),):
                raise IndexError(f"a boolean index must have {len(self)} entries")
            return np.flatnonzero(index)
        if index.dtype.kind not in "iu":
            raise IndexError("index objects with an int, a slice, or an array of ints or booleans")
        index = index.astype(np.int64).ravel()
        index = np.where(index < 0, index + len(self), index)
        if index.size and (index.min() < 0 or index.max() >= len(self)):
            raise IndexError(f"an index is out of range for {len(self)} objects")
        return index

    def __array__(self, dtype=None, copy=None):
        data = self[:]
        return data if dtype is None else data.astype(dtype)

    def __iter__(self):
        """One crop after another, each part read once."""
        for k in range(len(self.paths)):
            yield from self._read(k, ...)


__all__ = ["extract", "open_objects", "ObjectStore", "LazyStack", "extract_field", "survey_field", "Plan",
           "FieldReport", "read_attributes", "store_problem", "part_name", "part_objects", "part_rows", "store_lock", "Reporter"]
