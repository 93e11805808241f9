"""What the plate room's tests share: a file tree's hashes, the CLI in a subprocess, a predicted reference plate."""
import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest


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
