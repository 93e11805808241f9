"""Shared test fixtures and the helpers behind them (tests never import another test module: what two test files
share is here; one conftest for the whole tree, as a second one would take the module name 'conftest').

Sections: threads, landmark poses, small image stacks (_shapes), pinned fits (the pins: ``python tests/conftest.py``
re-makes them, see ``pins_main``), a toy method, GUI waits, plates and stores, the shared datasets folder."""
from __future__ import annotations

import hashlib
import math
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch

from ticlust.core.stack import Stack
from ticlust.events import Progress, Snapshot
from ticlust.methods.base import Method, param, register, unregister
from ticlust.result import FittedState


@pytest.fixture
def one_thread():
    """Tiny tensors: one torch thread avoids thread-pool overhead on a busy machine (restored after)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# ---- landmark poses ------------------------------------------------------------------------------------------
def _similar(shape, angle, scale, shift):
    """The shape (L, 2) rotated by angle, scaled and shifted: a new similarity pose."""
    rot = np.array([[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]])
    return scale * shape @ rot.T + shift


@pytest.fixture(scope="session")
def similar():
    """``similar(shape, angle, scale, shift)``: the landmark shape (L, 2) in a new similarity pose."""
    return _similar


@pytest.fixture
def landmark_fit():
    """Fit a landmark method twice on the two-group sample and check what every landmark method owes:
    input untouched, same seed same result, both groups found, the result's shapes, prototypes the
    cluster means of the aligned shapes. Returns (result, landmarks)."""
    import numpy as np

    import ticlust
    from ticlust.datasets.shapes import sample_landmarks

    def fit(method: str):
        x, y = sample_landmarks(seed=4, n=60)
        before = x.copy()
        r1, r2 = (ticlust.fit(x, method, k=2, device="cpu", seed=5) for _ in range(2))
        assert np.array_equal(x, before)
        assert np.array_equal(r1.labels, r2.labels) and r1.history == r2.history
        assert ticlust.evaluate(y, r1.labels)["ari"] == 1.0
        assert r1.scores.shape == (60, 2) and r1.prototypes.shape == (2, 8, 2) and r1.aligned.shape == (60, 8, 2)
        assert r1.covariances.shape == (2, 8, 2, 2) and r1.aligned_kind == "procrustes"
        for g in range(2):
            assert np.allclose(r1.prototypes[g], r1.aligned[r1.labels == g].mean(0))
        return r1, x
    return fit


@pytest.fixture
def size_groups():
    """Two groups of one shape at two sizes, in random poses: a landmark method must find them with
    scale=False (ARI 1, every size kept) and not with scale=True (ARI < 0.3). Returns (form fit, landmarks)."""
    import numpy as np

    import ticlust
    from ticlust.datasets.shapes import MEAN_SHAPE_A

    def fit(method: str, seed: int):
        rng = np.random.default_rng(seed)
        y = np.arange(40) % 2
        x = np.stack([_similar(MEAN_SHAPE_A + rng.normal(0, 2.0, (8, 2)), rng.uniform(0, 2 * np.pi), 1.0 + 0.5 * g,
                              rng.normal(0, 50, 2)) for g in y])
        form = ticlust.fit(x, method, k=2, device="cpu", scale=False)
        shape = ticlust.fit(x, method, k=2, device="cpu", scale=True)
        assert ticlust.evaluate(y, form.labels)["ari"] == 1.0
        assert ticlust.evaluate(y, shape.labels)["ari"] < 0.3
        size = np.sqrt(((form.aligned - form.aligned.mean(1, keepdims=True)) ** 2).sum((1, 2)))
        assert np.allclose(size, np.sqrt(((x - x.mean(1, keepdims=True)) ** 2).sum((1, 2))))   # sizes kept
        return form, x
    return fit


@pytest.fixture(scope="module")
def client():
    """A real dask cluster for a test module: two single-threaded worker processes on 127.0.0.1, dashboard off,
    started as ticlust starts its own (cluster.local_cluster: no malloc-trim setting leaking into this process)."""
    distributed = pytest.importorskip("distributed")
    from ticlust.core.backends import local_cluster

    with local_cluster(2, dashboard=None) as local, distributed.Client(local) as c:
        yield c


# ---- the dock, as a user docks it, and its waits --------------------------------------------------------------
def _settle(qtbot, dock, timeout: int = 120_000) -> None:
    """Wait until every job, background read and drawing of the dock and of its object map is done (a fast failure
    can finish before a signal wait is set up: wait on the state)."""
    qtbot.waitUntil(lambda: not dock.busy, timeout=timeout)


@pytest.fixture
def dock(qtbot):
    """``dock(viewer)``: the ticlust dock docked the way a user docks it (Plugins > ticlust: napari builds it and
    injects the viewer), its method form loaded."""
    from ticlust._napari.dock import TiclustDock

    def open_dock(viewer, timeout: int = 120_000):
        _, widget = viewer.window.add_plugin_dock_widget("napari-ticlust")
        assert isinstance(widget, TiclustDock)
        qtbot.waitUntil(lambda: widget.ready, timeout=timeout)
        return widget
    return open_dock


@pytest.fixture(scope="session")
def wait():
    """``wait(qtbot, dock, timeout=60_000)``: until the dock's jobs, reads and drawings are done."""
    return _settle


@pytest.fixture(scope="session")
def run_to_end():
    """``run_to_end(qtbot, dock, timeout=60_000)``: Run, then ``wait``."""
    def run(qtbot, dock, timeout=60_000):
        assert dock.start() is not None
        _settle(qtbot, dock, timeout)
    return run



@pytest.fixture
def plate_dock(make_napari_viewer, qtbot, dock):
    """Opens the dock on a plate in a real napari viewer as a user does: ``plate_dock(store=None, result=None,
    viewer=None, file=None)`` → (viewer, dock). ``file`` (a plate folder, a store) is opened first with File > Open
    (napari-ticlust's readers) in ``viewer`` (a new one when None); the dock is docked and its warm-up waited for; then
    the store at ``store`` is opened with the dock and the result ``result`` (a file) loaded, each waited for."""
    def open_dock(store=None, result=None, viewer=None, file=None, timeout: int = 120_000):
        viewer = make_napari_viewer() if viewer is None else viewer
        if file is not None:
            viewer.open(str(file), plugin="napari-ticlust")
        panel = dock(viewer, timeout)
        panel.use(panel.plate)
        _settle(qtbot, panel, timeout)
        if store is not None:
            panel.plate.open_store(store)
            _settle(qtbot, panel, timeout)
        if result is not None:
            panel.load_result(result)
            _settle(qtbot, panel, timeout)
        return viewer, panel
    return open_dock


@pytest.fixture(scope="session")
def nuclei_store():
    """Makes the generated plate a store test starts from: ``nuclei_store(folder, fields=, n=, size=, seed=,
    name="s.zarr", from_folder=False)`` writes a nuclei plate (``fields`` fields of ``n`` nuclei, ``size`` pixels a
    side) into ``folder``/plate and extracts its object store in this process at ``folder``/``name``, from the
    plate's manifest (or its folder). Returns (manifest, store)."""
    import ticlust
    from ticlust.datasets.nuclei import write_nuclei_plate

    def make(folder, *, fields: int, n: int, size: int, seed: int, name: str = "s.zarr", from_folder: bool = False,
             **extract):
        manifest = write_nuclei_plate(folder / "plate", fields=fields, n=n, shape=(size, size), seed=seed)
        return manifest, ticlust.extract(manifest.parent if from_folder else manifest, folder / name, **extract)
    return make


@pytest.fixture(scope="session")
def kmeans_plate(nuclei_store):
    """Makes the plate most store tests start from: ``kmeans_plate(folder, fields=, n=, size=, seed=, sample=None)``
    writes a generated nuclei plate and extracts its store (``nuclei_store``), and fits kmeans (K = 3, seed 0) on
    ``sample`` of its objects (all when None). Returns (manifest, store, result)."""
    from ticlust.plate.run import fit_store

    def make(folder, *, fields: int, n: int, size: int, seed: int, sample: int | None = None):
        manifest, store = nuclei_store(folder, fields=fields, n=n, size=size, seed=seed)
        result, _ = fit_store(store, "kmeans", k=3, seed=0, device="cpu",
                              **({} if sample is None else {"sample": sample}))
        return manifest, store, result
    return make


@pytest.fixture(scope="session")
def predicted_copy():
    """``predicted_copy(store, result, target)``: a copy of ``store`` at ``target`` holding ``result``'s predictions
    (each test edits its own copy, the module's store stays as fitted)."""
    import shutil

    import ticlust
    from ticlust.plate.run import predict_store

    def make(store, result, target):
        copy = ticlust.open_objects(shutil.copytree(store.path, target))
        predict_store(result, copy, device="cpu")
        return copy
    return make


def _write_hcs_plate(root_path, fields_per_well=2, label_name="nuclei", skip_labels=()):
    """An NGFF HCS plate written with ome-zarr-py's own writer at ``root_path``: wells B/3, A/1, A/12 (listed out of
    order: a store follows the plate's row/column order), ``fields_per_well`` generated nuclei fields of 96×96 each
    with a labels group ``label_name`` (but the (well, field) pairs in ``skip_labels``). Returns {(well, field): the
    generated field}."""
    from ticlust.datasets.nuclei import nuclei_field

    WELLS = ("B/3", "A/1", "A/12")
    import zarr
    from ome_zarr.writer import write_image, write_labels, write_plate_metadata, write_well_metadata

    root = zarr.open_group(root_path, mode="w")
    write_plate_metadata(root, ["A", "B"], [str(c) for c in range(1, 13)], list(WELLS))
    fields = {}
    for w, path in enumerate(WELLS):
        row, column = path.split("/")
        well = root.require_group(row).require_group(column)
        write_well_metadata(well, [str(f) for f in range(fields_per_well)])
        for f in range(fields_per_well):
            made = nuclei_field(n=8, shape=(96, 96), seed=10 * w + f)
            image = well.require_group(str(f))
            write_image(made.image, image, axes="yx")
            if (path, f) not in skip_labels:
                write_labels(made.labels, image, name=label_name, axes="yx")
            fields[(f"{row}{column}", f)] = made
    return fields


@pytest.fixture(scope="session")
def write_hcs_plate():
    """``write_hcs_plate(root_path, fields_per_well=2, label_name="nuclei", skip_labels=())``: see ``_write_hcs_plate``."""
    return _write_hcs_plate


# ---- small image stacks that several test files build the same way -------------------------------------------
def _corner_squares():
    """80 images of 8×8 in four well-separated groups (a bright 4×4 square in one of the four corners, over
    uniform noise of 0.2) and their groups: 20 of each, in group order."""
    rng = np.random.default_rng(0)
    x = rng.random((80, 8, 8)).astype(np.float32) * 0.2
    y = np.repeat(np.arange(4), 20)
    for i, g in enumerate(y):
        r, c = divmod(int(g), 2)
        x[i, 4 * r:4 * r + 4, 4 * c:4 * c + 4] += 1.0
    return x, y


def _noisy_prototypes(seed: int = 0, k: int = 3, n: int = 20, size: int = 8):
    """``n`` images of each of ``k`` random size×size prototypes (uniform 0-1) with Gaussian noise of 0.05, and
    their groups (float32, in group order)."""
    rng = np.random.default_rng(seed)
    protos = rng.uniform(0, 1, (k, size, size))
    labels = np.repeat(np.arange(k), n)
    return (protos[labels] + 0.05 * rng.standard_normal((k * n, size, size))).astype(np.float32), labels


def _blob_pattern(seed: int = 0, size: int = 24) -> torch.Tensor:
    """An asymmetric blob pattern (no rotational or mirror symmetry), (1, 1, size, size)."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32)
    c = (size - 1) / 2
    img = np.exp(-((yy - c) ** 2 + (xx - c) ** 2) / (2 * (size / 6) ** 2))
    for _ in range(3):
        cy, cx = c + rng.uniform(-size / 4, size / 4, 2)
        img += rng.uniform(0.5, 1.0) * np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * rng.uniform(1.0, 2.0) ** 2))
    return torch.from_numpy(img.astype(np.float32))[None, None]


def _posed(mu: torch.Tensor, angle, flip, shift) -> torch.Tensor:
    """Items x(p) = mu(T⁻¹ p) for the poses T = (angle, flip, shift): (B, 1, H, W)."""
    from ticlust.transforms.core import affine_grid, affine_inverse, warp
    from ticlust.transforms.rigid import pose_theta

    theta = pose_theta(torch.as_tensor(angle, dtype=torch.float32), torch.as_tensor(flip),
                       torch.as_tensor(shift, dtype=torch.float32), tuple(mu.shape[-2:]))
    return warp(mu.expand(len(theta), -1, -1, -1), affine_grid(affine_inverse(theta), tuple(mu.shape[-2:])), padding_mode="zeros")


def _turned_set(n_per: int = 12, flip: bool = False, seed: int = 0):
    """Three blob patterns, ``n_per`` copies of each turned (and mirrored when ``flip``) and shifted by a pixel, shuffled; and their groups."""
    rng = np.random.default_rng(seed)
    protos = [_blob_pattern(s) for s in (2, 3, 4)]
    xs, ys = [], []
    for label, mu in enumerate(protos):
        angles = rng.uniform(0, 2 * math.pi, n_per)
        flips = rng.random(n_per) < 0.5 if flip else np.zeros(n_per, bool)
        xs.append(_posed(mu, angles, flips, rng.integers(-1, 2, (n_per, 2)).astype(np.float32))[:, 0].numpy())
        ys += [label] * n_per
    order = rng.permutation(len(ys))
    return np.concatenate(xs)[order], np.asarray(ys)[order]


@pytest.fixture(scope="session")
def corner_squares():
    """The helper ``_corner_squares`` above, for the tests that build their data with it."""
    return _corner_squares


@pytest.fixture(scope="session")
def noisy_prototypes():
    """The helper ``_noisy_prototypes`` above, for the tests that build their data with it."""
    return _noisy_prototypes


@pytest.fixture(scope="session")
def blob_pattern():
    """The helper ``_blob_pattern`` above, for the tests that build their data with it."""
    return _blob_pattern


@pytest.fixture(scope="session")
def posed():
    """The helper ``_posed`` above, for the tests that build their data with it."""
    return _posed


@pytest.fixture(scope="session")
def turned_set():
    """The helper ``_turned_set`` above, for the tests that build their data with it."""
    return _turned_set


# ---- a toy method (tests/api/test_contract.py), registered in one line ---------------------------------------
@dataclass
class ToyConfig:
    k: int = 3
    shift: float = param(0.0, "Added to every score")


@dataclass
class ToyState(FittedState):
    thresholds: np.ndarray


class Toy(Method):
    """Clusters items by their mean brightness: K equal-width bins."""

    name, title, config, state, inputs = "toy-bins", "Brightness bins (test)", ToyConfig, ToyState, ("images", "vectors")

    def train(self, stack: Stack, cfg: ToyConfig, device, seed: int):
        means = stack.numpy().reshape(stack.n, -1).mean(1)
        edges = np.linspace(means.min(), means.max(), cfg.k + 1)[1:-1]
        yield Progress(1, 1, 0.0, "binning")
        yield Snapshot(np.zeros((cfg.k, *stack.item_shape), np.float32))
        return self.result(cfg, ToyState(edges), **self.scored(stack, edges, cfg), history=[0.0])

    def refine(self, stack: Stack, cfg: ToyConfig, start, pinned, device):
        """Bins again (they do not depend on a start), the pinned items kept in their cluster."""
        result = yield from self.train(stack, cfg, device, seed=0)
        result.labels = np.where(pinned.numpy() >= 0, pinned.numpy(), result.labels)
        return result

    def scored(self, stack: Stack, edges: np.ndarray, cfg: ToyConfig) -> dict:
        means = stack.numpy().reshape(stack.n, -1).mean(1)
        labels = np.searchsorted(edges, means)
        scores = np.abs(np.arange(cfg.k)[None] - labels[:, None]).astype(np.float32) + cfg.shift
        return {"labels": labels, "scores": scores, "prototypes": np.zeros((cfg.k, *stack.item_shape), np.float32)}

    def predict(self, result, stack, device, batch_size=None):
        return self.predicted(result, **{k: v for k, v in self.scored(stack, result.state.thresholds,
                                                                      self.config_of(result)).items() if k != "prototypes"})


@pytest.fixture(scope="session")
def toy_method():
    """The toy method's class (a subclass may register itself under another name)."""
    return Toy


@pytest.fixture
def toy():
    """The toy method registered in one line for one test ("toy-bins"); its class."""
    register(Toy())
    yield Toy
    unregister("toy-bins")


def _dark_and_bright():
    x = np.zeros((12, 6, 6), np.float32)
    x[6:] = 1.0
    x[::3] += 0.1
    return x


@pytest.fixture(scope="session")
def dark_and_bright():
    """``dark_and_bright()``: 12 images of 6×6, six dark and six bright, every third a little brighter (the toy's data)."""
    return _dark_and_bright


# ---- the shared datasets folder (../shared/datasets beside the repository or its worktree) ---------------------
@pytest.fixture(scope="session")
def shared_datasets():
    """``shared_datasets(name)``: the path of ``name`` in the shared datasets folder, the first found among this
    tree's ancestors' ``shared/datasets``; the test is skipped when it is not there (a fresh clone)."""
    def find(name: str) -> Path:
        for base in Path(__file__).resolve().parents:
            if (base / "shared" / "datasets" / name).exists():
                return base / "shared" / "datasets" / name
        pytest.skip(f"shared/datasets/{name} not found beside the repository")
    return find


# ---- pinned fits -----------------------------------------------------------------------------------------------
# Every method's pinned fit: a small sample, a fixed seed, the CPU, one thread; stored as arrays in
# tests/pins/<method>.npz and compared with a tolerance that another CPU's arithmetic cannot exceed and a
# real change of a method's maths does.
#
# Labels are compared exactly. Floats (prototypes, scores) are compared within ``PIN_ULPS`` float32 units
# of roundoff at the array's own scale: ``tol = PIN_ULPS * 2**-23 * max(1, max|pinned|)``. Why that size:
# another CPU (SIMD width, BLAS blocking, libm) rounds each float32 operation to within one unit of
# 2**-23 but in another order, and the pinned fits chain hundreds of such operations per value (Adam
# steps inside Lloyd iterations, sums over every pixel and item), each step feeding on the last one's
# rounding. Measured across CPU dispatches (docs/reproducibility.md) the largest drift is 2,836 units
# (ai-kmeans' prototypes); the budget of 8,192 units (1e-3 at unit scale) leaves three times that, while
# one more Adam step moves st-kmeans' prototypes by 390,000 units and another start changes labels.
# NT's scores are the one exception (``LOOSER``): each is a min-max score over a thresholded sparse code,
# and a last-bit change can move one coefficient across the threshold (measured: 54,000 units at the
# scores' scale with labels and prototypes unchanged), so they get 2**18 units (3 % of their scale).
#
# Re-make the pins after a deliberate change of a method's maths (and say why in the commit):
#     python tests/conftest.py [METHOD ...]
# Check this machine against them without pytest (exit status 1 and one line per mismatch):
#     python tests/conftest.py --check
# Fit every method twice-comparably for the same-seed test (at the current thread count):
#     python tests/conftest.py --same-seed OUT.npz
PIN_DIR = Path(__file__).parent / "pins"
FLOAT32_EPS = 2.0 ** -23
PIN_ULPS = 8192          # roundoff budget in float32 units, at the array's scale (see above)
LOOSER = {("nt", "scores"): 2 ** 18}   # thresholded sparse codes: see above
ARRAYS = ("labels", "prototypes", "scores")

ST_FAST = dict(steps=4, affine_steps=3, predict_steps=4, max_iter=3, landmarks=3)
DTI_FAST = dict(max_epochs=2, min_stage_epochs=1, patience=1, final_epochs=1, batch_size=16, threads=1)
CASES = {
    "kmeans": {},
    "gmm": {"max_iter": 10},
    "ai-kmeans": {k: v for k, v in ST_FAST.items() if k != "landmarks"},
    "st-kmeans": ST_FAST,
    "pssc": dict(pad_to=16, scales=2, candidates=40, representatives=12, restarts=2),
    "dti-kmeans": DTI_FAST,
    "dti-gmm": DTI_FAST,
    "nt": dict(max_iter=2, m=256),
    "shape-kmeans": {},
    "procrustes-kmeans": {},
    "rigid-kmeans": dict(max_iter=3, flip=True),
    "rigid-pssc": dict(pad_to=16, scales=2, candidates=40, representatives=12, restarts=2, rigid_iter=3),
    "rigid-spectral": dict(anchors=12, candidates=8, restarts=3, flip=True),
    "cell-kmeans": dict(n_init=2, pose="centre+axis", mask=True),
}


def pinned_fit(method: str, **changes):
    """The pinned fit of ``method`` (``changes`` override its parameters: a deliberate change)."""
    import ticlust
    from ticlust.datasets.shapes import sample_landmarks
    from ticlust.datasets.samples import glyphs_sample

    if method in ("shape-kmeans", "procrustes-kmeans"):
        x, _ = sample_landmarks(seed=0, n=30)
    else:
        x, _ = glyphs_sample(n_per_class=6, size=16, seed=1)
    return ticlust.fit(x, method=method, k=3, device="cpu", seed=0, progress=False, **{**CASES[method], **changes})


def arrays_of(result) -> dict[str, np.ndarray]:
    """What a pin holds: labels (int64), prototypes and scores (float64 copies of the result's floats)."""
    return {"labels": np.asarray(result.labels, np.int64),
            "prototypes": np.asarray(result.prototypes, np.float64),
            "scores": np.asarray(result.scores, np.float64)}


def budget(method: str, name: str) -> int:
    """Roundoff budget of one pinned array, in float32 units."""
    return LOOSER.get((method, name), PIN_ULPS)


def tolerance(pinned: np.ndarray, units: int = PIN_ULPS) -> float:
    """Absolute tolerance for a float array: ``units`` float32 units at the array's scale."""
    scale = float(np.max(np.abs(pinned))) if pinned.size else 0.0
    return units * FLOAT32_EPS * max(1.0, scale)


def mismatch(method: str, got: dict[str, np.ndarray], pinned: dict[str, np.ndarray]) -> str | None:
    """None when ``got`` matches the pin; else one line naming the method, the array, the largest
    difference and where it is."""
    for name in ARRAYS:
        a, b = got[name], pinned[name]
        if a.shape != b.shape:
            return f"{method}: {name} has shape {a.shape}, the pin {b.shape}"
        if name == "labels":
            wrong = np.flatnonzero(a != b)
            if wrong.size:
                i = int(wrong[0])
                return (f"{method}: labels differ at {wrong.size} of {a.size} items "
                        f"(first at item {i}: {int(a[i])}, pinned {int(b[i])})")
            continue
        diff = np.abs(a - b)
        if not np.all(np.isfinite(a)):
            return f"{method}: {name} has non-finite values"
        worst = np.unravel_index(int(np.argmax(diff)), diff.shape) if diff.size else ()
        units = budget(method, name)
        tol = tolerance(b, units)
        if diff.size and diff[worst] > tol:
            return (f"{method}: {name} moved by up to {diff[worst]:.3g} at index {tuple(int(i) for i in worst)} "
                    f"({a[worst]:.6g}, pinned {b[worst]:.6g}; tolerance {tol:.2g} = {units} float32 units)")
    return None


def load_pin(method: str) -> dict[str, np.ndarray]:
    with np.load(PIN_DIR / f"{method}.npz") as f:
        return {name: f[name] for name in ARRAYS}


def save_pin(method: str, result) -> Path:
    PIN_DIR.mkdir(exist_ok=True)
    path = PIN_DIR / f"{method}.npz"
    np.savez_compressed(path, **arrays_of(result))
    return path


def check() -> list[str]:
    """Every method's pinned fit on this machine against its pin: the mismatches, one line each."""
    found = [mismatch(m, arrays_of(pinned_fit(m)), load_pin(m)) for m in CASES]
    return [line for line in found if line]


def same_seed_fits(out: str) -> None:
    """Every method on a larger sample (big enough for torch's threads to split the work), and two
    aligning methods on the objects route, at the current thread count; the arrays saved to ``out``."""
    import ticlust
    from ticlust.api import object_params
    from ticlust.datasets.shapes import sample_landmarks
    from ticlust.datasets.samples import glyphs_sample, sample

    images, _ = glyphs_sample(n_per_class=60, size=16, seed=2)
    shapes, _ = sample_landmarks(seed=1, n=120)
    crops, _ = sample("nuclei")
    fits = {}
    for method, params in CASES.items():
        params = {k: v for k, v in params.items() if k != "threads"}
        x = shapes if method in ("shape-kmeans", "procrustes-kmeans") else images
        fits[method] = ticlust.fit(x, method=method, k=4, device="cpu", seed=3, progress=False, **params)
    for method in ("dti-kmeans", "ai-kmeans"):
        params = object_params(method, {k: v for k, v in CASES[method].items() if k != "threads"})
        fits[f"objects/{method}"] = ticlust.fit(crops[:120], method=method, k=3, device="cpu", seed=3,
                                                progress=False, **params)
    np.savez(out, **{f"{m}:{name}": a for m, r in fits.items() for name, a in arrays_of(r).items()})


def pins_main(args: list[str]) -> int:
    """Re-make the pins of the named methods (all when none), at one torch thread as the tests run
    them; ``--check``: compare instead; ``--same-seed OUT``: the same-seed fits."""
    import torch

    if args[:1] == ["--same-seed"]:
        same_seed_fits(args[1])
        return 0
    torch.set_num_threads(1)
    if args == ["--check"]:
        lines = check()
        print("\n".join(lines) or f"all {len(CASES)} pins hold")
        return 1 if lines else 0
    for method in args or list(CASES):
        if method not in CASES:
            raise SystemExit(f"unknown method {method!r}: one of {', '.join(CASES)}")
        print("pinned", save_pin(method, pinned_fit(method)))
    return 0


@pytest.fixture(scope="session")
def pins():
    """The pinned fits: ``CASES`` (method → parameters), ``pinned_fit``, ``arrays_of``, ``load_pin``, ``mismatch``,
    and ``script`` (this file, which re-makes or checks the pins when run)."""
    from types import SimpleNamespace

    return SimpleNamespace(CASES=CASES, pinned_fit=pinned_fit, arrays_of=arrays_of, load_pin=load_pin,
                           mismatch=mismatch, script=Path(__file__))


@pytest.fixture(params=list(CASES))
def pinned_method(request) -> str:
    """Each method that has a pin, one test each."""
    return request.param


if __name__ == "__main__":
    sys.exit(pins_main(sys.argv[1:]))


# What the plate room's tests share (one conftest for the whole tree: a second conftest module would take the
# name "conftest" in sys.modules and hide this one from inspect).
def _files(root: Path) -> dict:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*"))
            if p.is_file()}


@pytest.fixture(scope="session")
def files():
    """``files(root)``: every file under ``root`` by relative path, with its bytes' hash (what "nothing changed"
    and "the same store" compare)."""
    return _files


@pytest.fixture(scope="session")
def cli():
    """``cli(*args, timeout=300)``: ``python -m ticlust.cli ARGS`` in a subprocess, its output captured as text."""
    def run(*args, timeout=300):
        return subprocess.run([sys.executable, "-m", "ticlust.cli", *map(str, args)], capture_output=True, text=True,
                              timeout=timeout)
    return run


@pytest.fixture(scope="session")
def predicted_plate(nuclei_store):
    """``predicted_plate(folder, fields=, n=, size=, seed=, k=, from_folder=False)``: a generated plate and its store
    extracted in this process at ``folder``/ref/s.zarr (``nuclei_store``), a k-means result fitted on every crop
    (seed 0) saved at ``folder``/km.npz, and the predictions of a copy of the store at ``folder``/predicted/s.zarr (the
    reference store itself stays unpredicted): the uninterrupted references. Returns (manifest, store, result path,
    predictions table)."""
    import ticlust

    def make(folder, *, fields: int, n: int, size: int, seed: int, k: int, from_folder: bool = False):
        manifest, store = nuclei_store(folder, fields=fields, n=n, size=size, seed=seed, name="ref/s.zarr",
                                       from_folder=from_folder)
        result = ticlust.fit(store.crops[:], k=k, seed=0, progress=False).save(folder / "km.npz")
        predicted = folder / "predicted" / "s.zarr"
        shutil.copytree(store.path, predicted)
        return manifest, store, result, ticlust.predict(result, predicted).table
    return make


@pytest.fixture
def raw_fields(tmp_path):
    """Three small fields of touching nuclei as a microscope leaves them, no masks: one TIFF per channel
    (``siteN_D.tif`` the nuclei, ``siteN_F.tif`` another stain) in ``raw/``, and CellProfiler's LoadData CSV naming
    them (``FileName_OrigBlue``/``PathName_OrigBlue`` for D, ``FileName_OrigGreen`` for F, ``Metadata_Site``).
    Returns ``(folder, load_data, fields)``: the fields are the generator's, with their true masks."""
    import csv

    import numpy as np
    import tifffile

    from ticlust.datasets.touching_nuclei import touching_nuclei_field

    folder = tmp_path / "raw"
    folder.mkdir()
    fields, rows = [], []
    for site in range(3):
        f = touching_nuclei_field("touching", n=18, shape=(160, 160), seed=site)
        other = np.random.default_rng(site).integers(100, 400, f.image.shape).astype(np.uint16)
        tifffile.imwrite(folder / f"site{site}_D.tif", f.image)
        tifffile.imwrite(folder / f"site{site}_F.tif", other)
        rows.append({"Metadata_Plate": "P1", "Metadata_Site": site, "FileName_OrigBlue": f"site{site}_D.tif",
                     "PathName_OrigBlue": "raw", "FileName_OrigGreen": f"site{site}_F.tif", "PathName_OrigGreen": "raw"})
        fields.append(f)
    with open(tmp_path / "load_data.csv", "w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return folder, tmp_path / "load_data.csv", fields
