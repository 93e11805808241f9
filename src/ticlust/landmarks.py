"""Landmark shapes without napari: file readers, napari point conversion, Procrustes alignment,
the Gaussian perturbation model of Gattone et al. (2018, Eq. 15), and ellipse geometry for display.

Every landmark array here is ``(n_shapes, n_landmarks, 2)`` in (x, y) order; napari points are
(row, col) = (y, x). Inputs are never modified.
"""
from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .errors import InputError

# ---- two bundled 8-landmark mean shapes (our own, arbitrary units ~ a skull section of radius 100) -----

from .validation import as_landmarks

# ---- two bundled 8-landmark mean shapes (our own, arbitrary units ~ a skull section of radius 100) -----
#: A rounded "skull" outline: 8 landmarks going round anticlockwise.
MEAN_SHAPE_A = np.array([[100.0, 0.0], [72.0, 58.0], [10.0, 88.0], [-60.0, 70.0],
                         [-98.0, 8.0], [-70.0, -55.0], [0.0, -80.0], [68.0, -62.0]])
#: The same outline with a longer snout (landmarks 0, 1, 7) and a flatter vault (2, 3).
MEAN_SHAPE_B = np.array([[125.0, 5.0], [82.0, 52.0], [12.0, 76.0], [-58.0, 60.0],
                         [-98.0, 8.0], [-70.0, -55.0], [2.0, -82.0], [80.0, -52.0]])

STRUCTURES = ("isotropic", "heteroscedastic", "anisotropic")
NOISE_SCALES = ("sd", "kronecker", "variance")


# ---- files ----------------------------------------------------------------------------------------
def read_landmarks_csv(path: str | Path) -> tuple[np.ndarray, list[str]]:
    """Read a CSV with columns shape_id, landmark, x, y (one row per landmark; any row order).

    Returns ``(landmarks (n, L, 2), shape ids)``; shapes keep the order of first appearance and
    landmarks are sorted by their ``landmark`` index.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"There is no landmark file at {path}: check the path.")
    # utf-8-sig: a CSV saved by Excel starts with a byte-order mark, which must not become part of the first column's name
    try:
        with open(path, newline="", encoding="utf-8-sig") as fh:
            sid, lm, xs, ys = _landmark_rows(csv.DictReader(fh), path.name)
    except UnicodeDecodeError:
        raise InputError(f"{path.name} is not UTF-8 text: save the landmark table as a UTF-8 CSV.") from None
    except csv.Error as exc:
        raise InputError(f"{path.name} is not a readable CSV ({exc}): save the landmark table as a plain CSV.") from None
    if not sid:
        raise InputError(f"{path.name} has a header but no landmark rows: add one row per landmark.")
    coords = np.stack([np.asarray(ys), np.asarray(xs)], axis=1)  # (row, col) as napari would hold them
    return points_to_landmarks(coords, sid, np.asarray(lm))


def _landmark_rows(reader: csv.DictReader, name: str) -> tuple[list, list, list, list]:
    """The shape ids, landmark indices, x and y of a landmark CSV's rows, checked line by line."""
    header = [h.strip().lower() for h in (reader.fieldnames or [])]
    missing = [c for c in ("shape_id", "landmark", "x", "y") if c not in header]
    if missing:
        raise InputError(f"{name} lacks the column(s) {', '.join(missing)}: a landmark CSV needs the columns shape_id, landmark, x, y.")
    names = dict(zip(header, reader.fieldnames))
    sid, lm, xs, ys = [], [], [], []
    for line, row in enumerate(reader, start=2):
        try:
            index = float(row[names["landmark"]])
            xs.append(float(row[names["x"]]))
            ys.append(float(row[names["y"]]))
        except (TypeError, ValueError):
            raise InputError(f"Line {line} of {name} has a non-numeric landmark, x or y: fix that row.") from None
        if not index.is_integer():
            raise InputError(f"Line {line} of {name} has landmark {index:g}, not a whole number: number the landmarks 0, 1, 2, ... in every shape.")
        lm.append(int(index))
        sid.append(str(row[names["shape_id"]]).strip())
    return sid, lm, xs, ys


def write_landmarks_csv(path: str | Path, landmarks, ids=None) -> Path:
    """Write (n, L, 2) landmarks as a CSV with columns shape_id, landmark, x, y."""
    arr = as_landmarks(landmarks)
    ids = _ids(ids, arr.shape[0])
    path = Path(path)
    with open(path, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["shape_id", "landmark", "x", "y"])
        for i, name in enumerate(ids):
            for j, (x, y) in enumerate(arr[i]):
                writer.writerow([name, j, repr(float(x)), repr(float(y))])
    return path


_TPS_KEY = re.compile(r"^\s*([A-Za-z]+)\s*=\s*(.*?)\s*$")


def read_tps(path: str | Path) -> tuple[np.ndarray, list[str]]:
    """Read a tpsDig ``.tps`` file: blocks starting ``LM=n`` followed by n "x y" lines, then
    optional IMAGE=, ID=, SCALE= lines (CURVES= / OUTLINES= with their POINTS= blocks are skipped). Returns ``(landmarks (n, L, 2), ids)``; the id is ID=, else
    IMAGE=, else the block number. Coordinates are returned as stored (SCALE= is not applied).
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"There is no .tps file at {path}: check the path.")
    lines = path.read_text(encoding="utf-8-sig", errors="replace").splitlines()   # -sig: Excel's byte-order mark
    shapes, ids = [], []
    i = 0
    while i < len(lines):
        match = _TPS_KEY.match(lines[i])
        i += 1
        if not match:
            if lines[i - 1].strip():
                raise InputError(f"Line {i} of {path.name} is neither a KEY=value line nor inside an LM= block: is it a tpsDig file?")
            continue
        key, value = match.group(1).upper(), match.group(2)
        if key == "LM":
            try:
                count = int(value)
            except ValueError:
                raise InputError(f"Line {i} of {path.name} says LM={value}: the landmark count must be a whole number.") from None
            if count < 1:
                raise InputError(f"Line {i} of {path.name} says LM={count}: a shape needs at least one landmark.")
            block = []
            for _ in range(count):
                parts = lines[i].split() if i < len(lines) else []
                try:
                    block.append([float(parts[0]), float(parts[1])])
                except (IndexError, ValueError):
                    raise InputError(f"Line {i + 1} of {path.name} should hold the x y of a landmark (LM={count}): the block is short or malformed.") from None
                i += 1
            shapes.append(block)
            ids.append({})
        elif key in ("ID", "IMAGE") and shapes:
            ids[-1].setdefault(key, value)
        elif key == "POINTS":  # a curve/outline block (CURVES= / OUTLINES=): its points are skipped
            try:
                i += int(value)
            except ValueError:
                raise InputError(f"Line {i} of {path.name} says POINTS={value}: the point count must be a whole number.") from None
    if not shapes:
        raise InputError(f"{path.name} holds no LM= blocks: a .tps file starts each shape with LM=<number of landmarks>.")
    ids = [tags.get("ID", tags.get("IMAGE", str(k))) for k, tags in enumerate(ids)]
    return as_landmarks([np.asarray(s) for s in shapes], name=f"landmarks in {path.name}"), ids


def write_tps(path: str | Path, landmarks, ids=None) -> Path:
    """Write (n, L, 2) landmarks as a tpsDig ``.tps`` file (LM=, coordinates, ID=)."""
    arr = as_landmarks(landmarks)
    ids = _ids(ids, arr.shape[0])
    out = []
    for name, shape in zip(ids, arr):
        out.append(f"LM={shape.shape[0]}")
        out.extend(f"{float(x)!r} {float(y)!r}" for x, y in shape)
        out.append(f"ID={name}")
    path = Path(path)
    path.write_text("\n".join(out) + "\n")
    return path


def read_landmarks(path: str | Path) -> tuple[np.ndarray, list[str]]:
    """Read landmarks from a .csv or .tps file (by suffix)."""
    suffix = Path(path).suffix.lower()
    if suffix == ".csv":
        return read_landmarks_csv(path)
    if suffix == ".tps":
        return read_tps(path)
    raise InputError(f"{Path(path).name} is not a landmark file: give a .csv (shape_id, landmark, x, y) or a tpsDig .tps file.")


def _ids(ids, n: int) -> list[str]:
    if ids is None:
        return [str(i) for i in range(n)]
    ids = [str(v) for v in ids]
    if len(ids) != n:
        raise InputError(f"Got {len(ids)} shape ids for {n} shapes: give one id per shape.")
    return ids


# ---- napari points <-> landmark arrays ------------------------------------------------------------
def points_to_landmarks(coords, shape_id, landmark=None) -> tuple[np.ndarray, list]:
    """Group napari-style points into shapes.

    ``coords``: (P, 2) point positions in napari's (row, col) order (extra leading dimensions, e.g. a
    slice index, are dropped: the last two columns are used). ``shape_id``: (P,) which shape each
    point belongs to. ``landmark``: optional (P,) landmark index of each point; without it, points
    keep their order within each shape. Returns ``(landmarks (n, L, 2) in (x, y) order, ids)`` with
    shapes in the order their id first appears.
    """
    coords = np.asarray(coords)
    if coords.ndim != 2 or coords.shape[1] < 2:
        raise InputError(f"The points have shape {coords.shape}: give (P, 2) positions in (row, col) order.")
    if coords.dtype.kind not in "biuf":
        raise InputError(f"The point coordinates have dtype {coords.dtype}: give numbers.")
    shape_id = np.asarray(shape_id)
    if shape_id.shape != (coords.shape[0],):
        raise InputError(f"Got {shape_id.size} shape ids for {coords.shape[0]} points: give a shape_id for every point.")
    if landmark is not None:
        landmark = np.asarray(landmark)
        if landmark.shape != (coords.shape[0],):
            raise InputError(f"Got {landmark.size} landmark indices for {coords.shape[0]} points: give one per point or none.")
        if landmark.dtype.kind == "f":
            if not np.isfinite(landmark).all() or not np.all(landmark == np.round(landmark)):
                raise InputError("The landmark indices are not whole numbers: number the landmarks 0, 1, 2, ... in every shape.")
            landmark = landmark.astype(np.int64)
        elif landmark.dtype.kind not in "iu":
            raise InputError(f"The landmark indices have dtype {landmark.dtype}: number the landmarks 0, 1, 2, ... in every shape.")
    ids, first = [], {}
    for p, s in enumerate(shape_id.tolist()):
        if s not in first:
            first[s] = []
            ids.append(s)
        first[s].append(p)
    shapes = []
    for s in ids:
        index = np.asarray(first[s])
        if landmark is not None:
            order = np.argsort(landmark[index], kind="stable")
            if len(np.unique(landmark[index])) != len(index):
                raise InputError(f"Shape {s!r} has the same landmark index twice: every landmark of a shape needs its own index.")
            index = index[order]
        xy = coords[index][:, -2:][:, ::-1]  # (row, col) -> (x, y)
        shapes.append(np.asarray(xy, dtype=np.float64))
    if landmark is not None:
        sets = {tuple(np.sort(landmark[np.asarray(first[s])]).tolist()) for s in ids}
        if len(sets) > 1:
            raise InputError("The shapes have different landmark indices: every shape needs the same landmarks 0..L-1.")
    return as_landmarks(shapes), ids


def landmarks_to_points(landmarks, ids=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The inverse of :func:`points_to_landmarks`: ``(coords (n*L, 2) in (row, col) order,
    shape_id (n*L,), landmark (n*L,))``, shape by shape, landmarks in order."""
    arr = np.asarray(landmarks, dtype=np.float64)
    if arr.ndim != 3 or arr.shape[2] != 2:
        raise InputError(f"The landmarks have shape {arr.shape}: give an array shaped (shapes, landmarks, 2).")
    n, n_lm = arr.shape[:2]
    names = np.asarray(list(range(n)) if ids is None else list(ids))
    if names.shape != (n,):
        raise InputError(f"Got {names.size} shape ids for {n} shapes: give one id per shape.")
    coords = arr[:, :, ::-1].reshape(n * n_lm, 2).copy()
    return coords, np.repeat(names, n_lm), np.tile(np.arange(n_lm), n)


# ---- Procrustes -----------------------------------------------------------------------------------
@dataclass
class ProcrustesFit:
    """Generalised Procrustes alignment of n shapes.

    ``aligned[i] = landmarks[i] @ matrix[i].T + offset[i]`` (matrix = scale x rotation, no
    reflection). ``consensus`` is the mean aligned shape. Aligned shapes are expressed at the mean
    centroid size and mean centroid of the input, in the orientation of the first shape, so they
    overlay the raw data sensibly.
    """

    aligned: np.ndarray      # (n, L, 2)
    consensus: np.ndarray    # (L, 2)
    matrix: np.ndarray       # (n, 2, 2)
    offset: np.ndarray       # (n, 2)
    iterations: int


def centroid_size(landmarks) -> np.ndarray:
    """Square root of the summed squared distances of the landmarks to their centroid, per shape."""
    x = np.asarray(landmarks, dtype=np.float64)
    return np.sqrt(((x - x.mean(-2, keepdims=True)) ** 2).sum((-2, -1)))


def _rotation_onto(x: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """Rotations R (n, 2, 2) minimising |x_i R^T - ref|, proper (det +1), for centred x (n, L, 2)."""
    m = np.einsum("nlc,ld->ncd", x, ref)                 # sum_l x_l ref_l^T, (n, 2, 2)
    a = m[:, 0, 0] + m[:, 1, 1]
    b = m[:, 0, 1] - m[:, 1, 0]
    theta = np.arctan2(b, a)                             # closed form in 2-D: no reflection possible
    c, s = np.cos(theta), np.sin(theta)
    return np.stack([np.stack([c, -s], -1), np.stack([s, c], -1)], -2)


def procrustes_align(landmarks, max_iter: int = 100, tol: float = 1e-12, scale: bool = True) -> ProcrustesFit:
    """Generalised Procrustes analysis: remove translation, scale (unit centroid size) and rotation.

    Iterates: rotate every centred, unit-size shape onto the current consensus, recompute the
    consensus and rescale it to unit size, until the consensus stops moving (``tol``).
    ``scale=False`` keeps every shape's size (form space: translation and rotation only); the
    consensus is then the plain mean of the rotated forms and ``tol`` is relative to its size.
    """
    x = as_landmarks(landmarks)
    n, n_lm = x.shape[:2]
    centre = x.mean(1)
    size = centroid_size(x)
    if np.any(size <= 0):
        bad = int(np.argmin(size))
        raise InputError(f"Shape {bad} has all its landmarks at one point: it has no shape to align.")
    z = (x - centre[:, None]) / (size[:, None, None] if scale else 1.0)
    ref = z[0].copy()
    rot = np.broadcast_to(np.eye(2), (n, 2, 2))
    it = 0
    for it in range(1, max_iter + 1):
        rot = _rotation_onto(z, ref)
        aligned = np.einsum("nlc,ndc->nld", z, rot)
        new_ref = aligned.mean(0)
        if scale:
            new_ref /= np.sqrt((new_ref ** 2).sum())
            moved = float(((new_ref - ref) ** 2).sum())
        else:
            moved = float(((new_ref - ref) ** 2).sum()) / max(float((new_ref ** 2).sum()), 1e-300)
        ref = new_ref
        if moved < tol:
            break
    # express in data units: mean centroid size (each shape's own with scale=False), mean centroid,
    # first shape's frame
    out_scale = float(size.mean()) if scale else 1.0
    out_centre = centre.mean(0)
    back = _rotation_onto(ref[None], z[0])[0]            # consensus frame -> orientation of shape 0
    total = np.einsum("cd,nde->nce", back, rot)
    if scale:
        total = total * (out_scale / size)[:, None, None]   # (n, 2, 2)
    offset = out_centre[None] - np.einsum("ncd,nd->nc", total, centre)
    aligned = np.einsum("nlc,ndc->nld", x, total) + offset[:, None]
    consensus = (ref @ back.T) * out_scale + out_centre
    return ProcrustesFit(aligned, consensus, total, offset, it)


def align_to(landmarks, reference, scale: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Ordinary Procrustes of each shape onto a fixed ``reference`` (L, 2): the similarity (no
    reflection) that maps the shape's centroid and centroid size onto the reference's and rotates it
    best (``scale=False``: the rotation and translation only, the shape keeps its size).
    Returns ``(aligned (n, L, 2), matrix (n, 2, 2), offset (n, 2))``."""
    x = np.asarray(landmarks, dtype=np.float64)
    if x.ndim == 2:
        x = x[None]
    if x.ndim != 3 or x.shape[2] != 2 or not np.isfinite(x).all():
        raise InputError(f"The shapes to align have shape {x.shape} or hold NaN: give finite (shapes, landmarks, 2) coordinates.")
    ref = np.asarray(reference, dtype=np.float64)
    if ref.shape != x.shape[1:]:
        raise InputError(f"The shapes have {x.shape[1]} landmarks but the fitted reference has {ref.shape[0]}: give shapes with the same landmarks.")
    centre, size = x.mean(1), centroid_size(x)
    if np.any(size <= 0):
        raise InputError(f"Shape {int(np.argmin(size))} has all its landmarks at one point: it has no shape to align.")
    ref_centre = ref.mean(0)
    ref_size = float(np.sqrt(((ref - ref_centre) ** 2).sum()))
    z = (x - centre[:, None]) / size[:, None, None]
    rot = _rotation_onto(z, ref - ref_centre)
    total = rot * (ref_size / size)[:, None, None] if scale else rot
    offset = ref_centre[None] - np.einsum("ncd,nd->nc", total, centre)
    return np.einsum("nlc,ndc->nld", x, total) + offset[:, None], total, offset


# ---- simulation (Gattone et al. 2018, Eq. 15) ------------------------------------------------------
def noise_sds(structure: str, n_landmarks: int, n_clusters: int, sigma: float = 13.0, sigma_low: float = 1.3,
              n_noisy: int = 3, noise_scale: str = "sd", rng: np.random.Generator | None = None) -> np.ndarray:
    """Per-cluster standard deviations (G, L, 2) of the landmark errors E_i for one structure.

    ``isotropic``: Σ_E = σI_K ⊗ σI_2. ``heteroscedastic``: Σ_E = diag[σ_1..σ_K] ⊗ σI_2 with σ_k = σ
    for ``n_noisy`` random landmarks of each cluster and ``sigma_low`` for the rest.
    ``anisotropic``: Σ_E = σI_K ⊗ diag[σ_x, σ_y], (σ_x, σ_y) = (σ, σ_low) in the first cluster and
    (σ_low, σ_low) in the others. ``noise_scale`` says how to read the σ's: "sd" (they are standard
    deviations), "kronecker" (the Kronecker product's entries are variances: variance = σ_k·σ) or
    "variance" (each listed value is a variance).
    """
    if structure not in STRUCTURES:
        raise InputError(f"Unknown covariance structure {structure!r}: choose one of {', '.join(STRUCTURES)}.")
    if noise_scale not in NOISE_SCALES:
        raise InputError(f"Unknown noise scale {noise_scale!r}: choose one of {', '.join(NOISE_SCALES)}.")
    rng = rng if rng is not None else np.random.default_rng(0)
    first = np.full((n_clusters, n_landmarks, 2), float(sigma))   # the "σ_k" / "σ_x, σ_y" factor
    if structure == "heteroscedastic":
        first[:] = sigma_low
        for g in range(n_clusters):
            first[g, rng.choice(n_landmarks, size=min(n_noisy, n_landmarks), replace=False)] = sigma
    elif structure == "anisotropic":
        first[:] = sigma_low
        first[0, :, 0] = sigma
    if noise_scale == "sd":
        return first
    if noise_scale == "variance":
        return np.sqrt(first)
    return np.sqrt(first * sigma) if structure != "isotropic" else first


def simulate_shapes(means, n: int = 100, structure: str = "isotropic", sigma: float = 13.0, sigma_low: float = 1.3,
                    n_noisy: int = 3, noise_scale: str = "sd", noisy_per: str = "cluster", translation: float = 2.0,
                    seed: int | np.random.Generator = 0, return_pose: bool = False):
    """Shapes from the Gaussian perturbation model X_i = (μ_g + E_i) Γ_i + 1 γ_i^T (Eq. 15).

    ``means`` (G, L, 2); n shapes split as evenly as possible over the G clusters (shuffled);
    Γ_i a rotation by an angle uniform in [0, 2π); γ_i uniform in [-translation, translation]².
    ``noisy_per`` = "cluster" draws the heteroscedastic noisy landmarks once per cluster,
    "shape" draws them again for every shape. Returns ``(shapes (n, L, 2), labels (n,))``, plus the
    rotation angles (n,) and translations (n, 2) when ``return_pose``.
    """
    mu = np.asarray(means, dtype=np.float64)
    if mu.ndim != 3 or mu.shape[2] != 2 or mu.shape[0] < 1:
        raise InputError(f"The mean shapes have shape {mu.shape}: give (clusters, landmarks, 2).")
    if noisy_per not in ("cluster", "shape"):
        raise InputError(f"noisy_per = {noisy_per!r}: choose 'cluster' or 'shape'.")
    if n < mu.shape[0]:
        raise InputError(f"n = {n} is smaller than the number of clusters ({mu.shape[0]}): simulate at least one shape per cluster.")
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    n_clusters, n_lm = mu.shape[:2]
    labels = rng.permutation(np.arange(n) % n_clusters)
    sds = noise_sds(structure, n_lm, n_clusters, sigma, sigma_low, n_noisy, noise_scale, rng)
    if structure == "heteroscedastic" and noisy_per == "shape":
        per_shape = np.stack([noise_sds(structure, n_lm, 1, sigma, sigma_low, n_noisy, noise_scale, rng)[0]
                              for _ in range(n)])
    else:
        per_shape = sds[labels]
    noise = rng.standard_normal((n, n_lm, 2)) * per_shape
    theta = rng.uniform(0.0, 2 * np.pi, size=n)
    c, s = np.cos(theta), np.sin(theta)
    gamma = np.stack([np.stack([c, -s], -1), np.stack([s, c], -1)], -2)   # row vectors times Γ
    shift = rng.uniform(-translation, translation, size=(n, 2))
    shapes = np.einsum("nlc,ncd->nld", mu[labels] + noise, gamma) + shift[:, None]
    if return_pose:
        return shapes, labels.astype(np.int64), theta, shift
    return shapes, labels.astype(np.int64)


def sample_landmarks(seed: int = 0, n: int = 100, structure: str = "heteroscedastic") -> tuple[np.ndarray, np.ndarray]:
    """A bundled landmark sample: n shapes of 8 landmarks from the two built-in mean shapes under
    Eq. 15 (rotated, translated, noise sd 6 on 3 landmarks per cluster and 0.6 on the rest)."""
    means = np.stack([MEAN_SHAPE_A, MEAN_SHAPE_B])
    return simulate_shapes(means, n=n, structure=structure, sigma=6.0, sigma_low=0.6, seed=seed)


# ---- display geometry -------------------------------------------------------------------------------
def ellipse_corners(mean, cov, n_sd: float = 2.0) -> np.ndarray:
    """The 4 corners of the box around the mean ± n_sd sd ellipse of each Gaussian, for napari's
    ellipse shapes: c ± a1 v1 ± a2 v2 with S = V diag(l) V^T and a_i = n_sd sqrt(l_i), in cyclic order.

    ``mean`` (..., 2) and ``cov`` (..., 2, 2) broadcast together; returns (..., 4, 2) in the same
    coordinate order as the input (swap columns for napari's (row, col)).
    """
    m = np.asarray(mean, dtype=np.float64)
    s = np.asarray(cov, dtype=np.float64)
    if m.shape[-1:] != (2,) or s.shape[-2:] != (2, 2):
        raise InputError(f"ellipse_corners needs means (..., 2) and covariances (..., 2, 2), got {m.shape} and {s.shape}.")
    s = 0.5 * (s + np.swapaxes(s, -1, -2))
    lam, vec = np.linalg.eigh(s)
    if np.any(lam < -1e-12 * np.maximum(1.0, np.abs(lam).max())):
        raise InputError("A covariance passed to ellipse_corners is not positive semi-definite: check the covariances.")
    axes = vec * (n_sd * np.sqrt(np.clip(lam, 0.0, None)))[..., None, :]   # columns a_i v_i
    a1, a2 = axes[..., :, 0], axes[..., :, 1]
    return np.stack([m + a1 + a2, m - a1 + a2, m - a1 - a2, m + a1 - a2], axis=-2)
