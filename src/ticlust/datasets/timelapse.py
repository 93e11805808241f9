"""A generated time-lapse of dividing nuclei (an H2B-like channel), its tracked labels and the true state of
every object in every frame, made on the fly (no download).

Each nucleus moves (a persistent random walk: its heading turns by a random angle every frame, slower in
mitosis) and goes through ``interphase → prophase → metaphase → anaphase → telophase``, after which its track
ends and two daughters (new tracks, parent = the mother) start in the next frame where the two telophase
masses were, in interphase. Some nuclei leave interphase for ``apoptosis`` instead (shrinking, bright, blebbed)
and vanish. The first frame's nuclei are at random points of their cycle.

What each state looks like (intensity inside the mask; the mask is always one connected piece):
``interphase`` a slightly oval disc with smooth texture, growing through the phase; ``prophase`` a round
disc with a bright rim and speckles (condensing chromatin); ``metaphase`` a bright bar (the plate);
``anaphase`` two parallel bars moving apart (the mask spans both); ``telophase`` two round masses further
apart, joined by a thin bridge; ``apoptosis`` a shrinking disc holding bright blebs.

Why per-frame clustering errs near transitions, as in real movies: the frame before and the frame after
every change of state show a blend of both states' looks (a random share, 20-50 % of the other one), and
any frame of any nucleus may be badly focused (``bad_frames``: blurred and dimmer). The field gets a
background, a Gaussian PSF, shot noise (Gaussian, of the Poisson variance) and read noise, and is stored as
uint16. The labels are the true masks with the track id as the label value (as btrack, ultrack, trackastra and
TrackMate's label exports keep them); ``tracks`` is the tracker's table (one row per object: track_id, frame,
label, parent_track_id, y, x) with each object's true ``state``.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy import ndimage

from ..errors import InputError, whole_number
from .nuclei import paint, window

STATES = ("interphase", "prophase", "metaphase", "anaphase", "telophase", "apoptosis")
#: Each state's duration in frames (low, high), drawn per nucleus and state.
DURATIONS = {"interphase": (30, 70), "prophase": (4, 7), "metaphase": (5, 9), "anaphase": (2, 4),
             "telophase": (3, 5), "apoptosis": (4, 8)}
#: The state after each one (interphase → apoptosis instead of prophase for the nuclei that die).
NEXT = {0: 1, 1: 2, 2: 3, 3: 4, 4: -1, 5: -1}
#: The share of a nucleus's reach (in radii) that every state's mask stays within.
REACH = 1.75


@dataclass
class TimeLapse:
    """A generated movie: ``movie`` (T, H, W) uint16, ``labels`` (T, H, W) int32 (value = track id, 0 background),
    ``tracks`` a dict of columns, one row per object in frame then track order (track_id, frame, label,
    parent_track_id (-1: none), y, x, state (index into ``state_names``)), and ``parents`` {daughter: mother} (of the
    daughters seen in the field)."""

    movie: np.ndarray
    labels: np.ndarray
    tracks: dict
    parents: dict = field(default_factory=dict)
    state_names: tuple[str, ...] = STATES

    def states_of(self, frame, label) -> np.ndarray:
        """The true state of the objects at (frame, label) (-1 for none)."""
        lookup = {(int(f), int(lab)): int(s) for f, lab, s in
                  zip(self.tracks["frame"], self.tracks["label"], self.tracks["state"])}
        return np.array([lookup.get((int(f), int(lab)), -1) for f, lab in zip(frame, label)], np.int64)


@dataclass
class _Cell:
    track: int
    parent: int
    y: float
    x: float
    heading: float
    speed: float
    r0: float
    angle: float
    bright: float
    state: int
    age: int                    # frames spent in the current state
    durations: np.ndarray       # this cell's duration of every state
    previous: int = -1          # the state before the current one, in this track (-1: none)
    blends: tuple = (0.0, 0.0)  # the share of the previous / next state's look at the edges of this state
    life: int = 0               # frames since the cell was born (interphase growth)


def time_lapse(frames: int = 100, cells: int = 200, shape: tuple[int, int] = (1024, 1024), seed: int = 0,
               radius: tuple[float, float] = (6.5, 8.5), death: float = 0.1, bad_frames: float = 0.04,
               blend: tuple[float, float] = (0.2, 0.5), turn: float = 0.5, speed: tuple[float, float] = (0.4, 1.4),
               brightness: float = 1200.0, background: float = 200.0, read_noise: float = 20.0, blur: float = 1.0,
               relabel: bool = False) -> TimeLapse:
    """Make ``frames`` frames starting from ``cells`` nuclei (see the module doc); more appear by division.

    ``radius``: range of a nucleus's radius (pixels); ``death``: the share of interphases that end in apoptosis;
    ``bad_frames``: the chance that a nucleus is out of focus in a frame; ``blend``: range of the share of the
    neighbouring state's look in the frame on either side of a change; ``turn``: s.d. of the heading's turn per
    frame (radians); ``speed`` (pixels per frame); ``relabel``: give every frame's objects their own label ids
    (then only the ``tracks`` table says which object is which track, as with a tracker's table export).
    """
    frames = whole_number(frames, "frames", 1)
    cells = whole_number(cells, "cells", 1, "nuclei")
    h, w = (int(s) for s in shape)
    if min(h, w) < 64:
        raise InputError(f"shape={shape!r} is too small: the field must be at least 64×64 pixels.")
    if not (0 <= death <= 1 and 0 <= bad_frames <= 1):
        raise InputError("death and bad_frames are shares: give numbers from 0 to 1.")
    rng = np.random.default_rng(seed)
    alive = _first_cells(rng, cells, (h, w), radius, speed, brightness, death)
    movie = np.empty((frames, h, w), np.uint16)
    labels = np.zeros((frames, h, w), np.int32)
    rows: list[dict] = []
    parents: dict[int, int] = {}
    next_id = [cells + 1]
    ids_rng = np.random.default_rng([seed, 1])        # relabelling draws apart: the same movie either way
    for t in range(frames):
        if t:
            alive = _step(alive, rng, (h, w), turn, radius, speed, brightness, death, blend, next_id, parents)
        signal = np.zeros((h, w), np.float32)
        ids = _relabels(ids_rng, len(alive)) if relabel else [c.track for c in alive]
        for cell, lab in zip(alive, ids):
            if _draw(cell, lab, labels[t], signal, rng, bad_frames):
                rows.append({"track_id": cell.track, "frame": t, "label": lab, "parent_track_id": cell.parent,
                             "y": cell.y, "x": cell.x, "state": cell.state})
        movie[t] = _camera(signal, rng, background, read_noise, blur)
    tracks = {k: np.asarray([r[k] for r in rows], np.float64 if k in ("y", "x") else np.int64) for k in rows[0]} \
        if rows else {}
    seen = set(tracks["track_id"].tolist()) if rows else set()
    return TimeLapse(movie=movie, labels=labels, tracks=tracks, parents={d: m for d, m in parents.items() if d in seen})


def _relabels(rng, n: int) -> list[int]:
    return [int(v) for v in rng.permutation(n) + 1]


def _durations(rng, dies: bool) -> np.ndarray:
    d = np.array([rng.integers(lo, hi + 1) for lo, hi in DURATIONS.values()])
    d[-1] = d[-1] if dies else 0
    return d


def _first_cells(rng, n: int, shape, radius, speed, brightness, death) -> list[_Cell]:
    """``n`` nuclei at random non-overlapping places, each at a random point of its cycle."""
    h, w = shape
    r0 = rng.uniform(*radius, n)
    reach = REACH * r0 + 2
    from .nuclei import _place     # the same dart throwing as the nuclei field

    centres = _place(reach, (h, w), 2.0, rng)
    out = []
    for i in range(n):
        dies = rng.random() < death
        d = _durations(rng, dies)
        path = [0, 5] if dies else [0, 1, 2, 3, 4]
        total = int(sum(d[s] for s in path))
        at = int(rng.integers(0, total))
        state = path[0]
        for s in path:
            if at < d[s]:
                state = s
                break
            at -= d[s]
        prev = -1 if state == path[0] else path[path.index(state) - 1]
        out.append(_Cell(i + 1, -1, centres[i, 0], centres[i, 1], rng.uniform(0, 2 * np.pi), rng.uniform(*speed), r0[i],
                         rng.uniform(0, np.pi), brightness * np.exp(rng.normal(0, 0.2)), state, at, d, prev,
                         (0.0, 0.0), life=at if state == 0 else int(d[0])))
    for c in out:
        c.blends = (0.0, float(rng.uniform(0.2, 0.5)))
    return out


def _step(alive, rng, shape, turn, radius, speed, brightness, death, blend, next_id, parents) -> list[_Cell]:
    """One frame on: every nucleus ages, changes state, divides or dies, then moves."""
    out: list[_Cell] = []
    for c in alive:
        c.age += 1
        c.life += 1
        if c.age < c.durations[c.state]:
            out.append(c)
            continue
        nxt = 5 if (c.state == 0 and c.durations[5] > 0) else NEXT[c.state]
        if c.state == 4:
            out += _daughters(c, rng, brightness, death, blend, next_id, parents)
        elif nxt >= 0:
            c.previous, c.state, c.age = c.state, nxt, 0
            c.blends = (c.blends[1], float(rng.uniform(*blend)))
            out.append(c)
    _move(out, rng, shape, turn)
    return out


def _daughters(c: _Cell, rng, brightness, death, blend, next_id, parents) -> list[_Cell]:
    """The two daughters of a nucleus at the end of telophase, where its two masses were, in interphase."""
    kids = []
    for side in (-1.0, 1.0):
        axis = c.angle + np.pi / 2                   # the masses part across the plate
        dy, dx = np.sin(axis) * 0.9 * c.r0 * side, np.cos(axis) * 0.9 * c.r0 * side
        dies = rng.random() < death
        kid = _Cell(next_id[0], c.track, c.y + dy, c.x + dx, float(np.arctan2(dy, dx)), c.speed, c.r0,
                    rng.uniform(0, np.pi), c.bright * np.exp(rng.normal(0, 0.05)), 0, 0, _durations(rng, dies),
                    previous=4, blends=(float(rng.uniform(*blend)), float(rng.uniform(*blend))))
        parents[kid.track] = c.track
        next_id[0] += 1
        kids.append(kid)
    return kids


def _reach(c: _Cell) -> float:
    return REACH * c.r0 + 2


def _move(cells: list[_Cell], rng, shape, turn: float) -> None:
    """Each nucleus turns by a random angle and steps forward, unless the step would bring it within reach of
    another nucleus or out of the field (then it stays and turns back)."""
    if not cells:
        return
    h, w = shape
    pos = np.array([[c.y, c.x] for c in cells])
    reach = np.array([_reach(c) for c in cells])
    for i, c in enumerate(cells):
        c.heading += rng.normal(0, turn)
        v = c.speed * (0.3 if c.state in (1, 2, 3, 4) else 1.0)
        new = pos[i] + v * np.array([np.sin(c.heading), np.cos(c.heading)])
        before = np.hypot(*(pos - pos[i]).T) - reach - reach[i]
        after = np.hypot(*(pos - new).T) - reach - reach[i]
        closer = (after < 1.0) & (after < before)      # daughters start within reach: they may only part
        closer[i] = False
        inside = -reach[i] * 0.5 <= new[0] <= h + reach[i] * 0.5 and -reach[i] * 0.5 <= new[1] <= w + reach[i] * 0.5
        if not closer.any() and inside:
            pos[i] = new
            c.y, c.x = float(new[0]), float(new[1])
        else:
            c.heading += np.pi


def _radius(c: _Cell) -> float:
    """Interphase nuclei grow from 0.75 to 1 times their full radius; mitotic and dying ones keep it."""
    if c.state == 0:
        return c.r0 * (0.75 + 0.25 * min(1.0, c.life / max(int(c.durations[0]), 1)))
    return c.r0


def _look(state: int, a: np.ndarray, b: np.ndarray, r: float, p: float, bright: float,
          rng) -> tuple[np.ndarray, np.ndarray]:
    """The mask and intensity of a nucleus in ``state`` at progress ``p`` (0..1) through it, on window coordinates
    ``a`` (along its axis) and ``b`` (across), in pixels. State -4: one telophase mass alone (a daughter's past)."""
    rho = np.hypot(a, b) / r
    if state == 0:
        mask = (a / r) ** 2 + (b / (0.85 * r)) ** 2 <= 1
        tex = ndimage.gaussian_filter(rng.normal(0, 1, a.shape), 1.5)
        return mask, bright * (1 + 0.15 * tex / max(tex.std(), 1e-9))
    if state == 1:
        spots = np.zeros(a.shape)
        for y, x in rng.normal(0, 0.35 * r, (8, 2)):
            spots += np.exp(-((a - x) ** 2 + (b - y) ** 2) / 1.3)
        return rho <= 0.95, bright * 1.3 * (0.55 + 0.9 * np.exp(-((rho - 0.7) / 0.18) ** 2) + 0.6 * spots)
    if state == 2:
        across = (b / (0.4 * r)) ** 2
        return (a / (1.05 * r)) ** 2 + across <= 1, bright * 2.0 * np.clip(1 - 0.3 * across, 0, 1)
    if state == 3:
        s = r * (0.45 + 0.45 * p)                 # the sister sets part from the first anaphase frame on
        bars = np.minimum(((b - s) / (0.22 * r)) ** 2, ((b + s) / (0.22 * r)) ** 2) + (a / (0.95 * r)) ** 2 <= 1
        between = (np.abs(a) <= 0.6 * r) & (np.abs(b) <= s)
        return bars | between, bright * np.where(bars, 2.0, 0.25)
    if state in (4, -4):
        d = 0.9 * r if state == 4 else 0.0
        blobs = np.minimum((b - d) ** 2, (b + d) ** 2) + a ** 2 <= (0.5 * r) ** 2
        bridge = (np.abs(a) <= 0.12 * r) & (np.abs(b) <= d)
        return blobs | bridge, bright * np.where(blobs, 1.6, 0.2)
    mask = rho <= 0.7 - 0.3 * p
    blebs = np.zeros(a.shape, bool)
    for y, x in rng.uniform(-0.35 * r, 0.35 * r, (4, 2)):
        blebs |= (a - x) ** 2 + (b - y) ** 2 <= (0.25 * r) ** 2
    return mask | blebs, bright * np.where(blebs, 2.5, 0.3)


def _draw(c: _Cell, label: int, labels: np.ndarray, signal: np.ndarray, rng, bad_frames: float) -> bool:
    """Paint one nucleus (its state's look, blended with the neighbouring state's at the edges of a state) into
    the frame's labels and signal; False when none of it lies inside the field."""
    yy, xx, y0, x0 = window(c.y, c.x, _reach(c))
    v, u = yy - c.y, xx - c.x
    a, b = np.cos(c.angle) * u + np.sin(c.angle) * v, -np.sin(c.angle) * u + np.cos(c.angle) * v
    r, dur = _radius(c), int(c.durations[c.state])
    mask, value = _look(c.state, a, b, r, c.age / max(dur, 1), c.bright, rng)
    other, share = None, 0.0
    if c.age == 0 and c.previous >= 0 and c.blends[0] > 0:
        other, share, at = (-4 if c.previous == 4 else c.previous), c.blends[0], 1.0
    elif c.age == dur - 1 and NEXT[c.state] >= 0 and c.blends[1] > 0:
        other = 5 if (c.state == 0 and c.durations[5] > 0) else NEXT[c.state]
        share, at = c.blends[1], 0.0
    if other is not None:
        m2, v2 = _look(other, a, b, r, at, c.bright, rng)
        mask, value = mask | m2, (1 - share) * np.where(mask, value, 0) + share * np.where(m2, v2, 0)
    if rng.random() < bad_frames:
        value = 0.6 * ndimage.gaussian_filter(np.where(mask, value, 0.0), 2.0)
    free = mask & _free(labels, y0, x0, mask.shape)
    if not free.any():
        return False
    paint(labels, signal, label, free, value, y0, x0)
    return True


def _free(labels: np.ndarray, y0: int, x0: int, shape) -> np.ndarray:
    """Which pixels of a window hold no nucleus yet (and lie in the field): a nucleus never paints over another."""
    h, w = labels.shape
    out = np.zeros(shape, bool)
    ys, xs = slice(max(y0, 0), min(y0 + shape[0], h)), slice(max(x0, 0), min(x0 + shape[1], w))
    if ys.stop > ys.start and xs.stop > xs.start:
        out[ys.start - y0:ys.stop - y0, xs.start - x0:xs.stop - x0] = labels[ys, xs] == 0
    return out


def _camera(signal: np.ndarray, rng, background: float, read_noise: float, blur: float) -> np.ndarray:
    """The frame as a camera records it: PSF blur, background, shot noise and read noise (one Gaussian draw with the
    Poisson variance plus the read noise's: every pixel holds at least the background's counts, where the two
    agree), uint16."""
    optical = ndimage.gaussian_filter(signal, blur) if blur > 0 else signal
    mean = np.clip(optical + background, 0, None).astype(np.float64)
    counts = mean + np.sqrt(mean + read_noise ** 2) * rng.standard_normal(signal.shape)
    return np.clip(np.rint(counts), 0, 65535).astype(np.uint16)
