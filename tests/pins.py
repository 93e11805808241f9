"""Every method's pinned fit: a small sample, a fixed seed, the CPU, one thread; stored as arrays in
tests/pins/<method>.npz and compared with a tolerance that another CPU's arithmetic cannot exceed and a
real change of a method's maths does.

Labels are compared exactly. Floats (prototypes, scores) are compared within ``PIN_ULPS`` float32 units
of roundoff at the array's own scale: ``tol = PIN_ULPS * 2**-23 * max(1, max|pinned|)``. Why that size:
another CPU (SIMD width, BLAS blocking, libm) rounds each float32 operation to within one unit of
2**-23 but in another order, and the pinned fits chain hundreds of such operations per value (Adam
steps inside Lloyd iterations, sums over every pixel and item), each step feeding on the last one's
rounding. Measured across CPU dispatches (docs/reproducibility.md) the largest drift is 2,836 units
(ai-kmeans' prototypes); the budget of 8,192 units (1e-3 at unit scale) leaves three times that, while
one more Adam step moves st-kmeans' prototypes by 390,000 units and another start changes labels.
NT's scores are the one exception (``LOOSER``): each is a min-max score over a thresholded sparse code,
and a last-bit change can move one coefficient across the threshold (measured: 54,000 units at the
scores' scale with labels and prototypes unchanged), so they get 2**18 units (3 % of their scale).

Re-make the pins after a deliberate change of a method's maths (and say why in the commit):
    python tests/pins.py [METHOD ...]
Check this machine against them without pytest (exit status 1 and one line per mismatch):
    python tests/pins.py --check
Fit every method twice-comparably for the same-seed test (at the current thread count):
    python tests/pins.py --same-seed OUT.npz
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

PIN_DIR = Path(__file__).parent / "pins"
FLOAT32_EPS = 2.0 ** -23
PIN_ULPS = 8192          # roundoff budget in float32 units, at the array's scale (see the module doc)
LOOSER = {("nt", "scores"): 2 ** 18}   # thresholded sparse codes: see the module doc
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


def main(args: list[str]) -> int:
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


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
