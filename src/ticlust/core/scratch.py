"""Per-item rows a run revisits on every pass (ST/AI K-means' per-pair warm start): in memory while small,
otherwise in raw files of a temporary directory the run owns, read and written batch by batch.

A file read by offset (``os.pread``) rather than a memory map: the pages a map touches count as the
process's resident memory, which is what the scratch is there to avoid. Napari- and torch-free.
"""
from __future__ import annotations

import os
import tempfile

import numpy as np

#: Rows of every field together up to this size stay in memory (small runs never touch the disk); above it
#: each field is a file of N fixed-size rows.
IN_MEMORY_BYTES = 8 * 2**20


class RowScratch:
    """N rows of some named float32 fields, each row of a fixed shape, starting at zero; read and written by a
    slice or by item numbers. Held in memory while all fields together fit ``in_memory_bytes``; otherwise
    one file per field in a temporary directory that ``close()`` removes (the owner closes it in a
    ``finally``, so an error or a cancelled run removes it too; it is also removed when collected).
    """

    def __init__(self, n: int, fields: dict[str, tuple[int, ...]], in_memory_bytes: int | None = None):
        self.n = int(n)
        in_memory_bytes = IN_MEMORY_BYTES if in_memory_bytes is None else in_memory_bytes
        self.shapes = {name: tuple(int(s) for s in shape) for name, shape in fields.items()}
        self.row_bytes = {name: 4 * int(np.prod(shape)) for name, shape in self.shapes.items()}
        self.arrays: dict[str, np.ndarray] = {}
        self.files: dict[str, int] = {}
        self._dir: tempfile.TemporaryDirectory | None = None
        if self.n * sum(self.row_bytes.values()) <= in_memory_bytes:
            self.arrays = {name: np.zeros((self.n, *shape), np.float32) for name, shape in self.shapes.items()}
            return
        self._dir = tempfile.TemporaryDirectory(prefix="ticlust-scratch-")
        for name in self.shapes:
            fd = os.open(os.path.join(self._dir.name, name), os.O_RDWR | os.O_CREAT, 0o600)
            os.ftruncate(fd, self.n * self.row_bytes[name])   # a sparse file: reads as zeros until written
            self.files[name] = fd

    @property
    def on_disk(self) -> bool:
        return self._dir is not None

    @property
    def directory(self) -> str | None:
        """The temporary directory of the files (None in memory, or once closed)."""
        return None if self._dir is None else self._dir.name

    def read(self, name: str, index) -> np.ndarray:
        """Rows ``index`` (a slice with step 1, or item numbers in any order) of field ``name``, a new array."""
        if not self.files:
            return self.arrays[name][index].copy()
        out = []
        for start, stop in _runs(index, self.n):
            size = self.row_bytes[name] * (stop - start)
            raw = os.pread(self.files[name], size, self.row_bytes[name] * start)
            if len(raw) != size:
                raise OSError(f"the scratch file {name!r} was cut short: read {len(raw)} of {size} bytes")
            out.append(np.frombuffer(raw, np.float32))
        flat = np.concatenate(out) if out else np.empty(0, np.float32)
        return flat.reshape(-1, *self.shapes[name]).copy()

    def write(self, name: str, index, rows: np.ndarray) -> None:
        """Put ``rows`` (one per item of ``index``) into field ``name``."""
        rows = np.ascontiguousarray(rows, np.float32).reshape(-1, *self.shapes[name])
        if not self.files:
            self.arrays[name][index] = rows
            return
        at = 0
        for start, stop in _runs(index, self.n):
            part = rows[at:at + stop - start]
            at += stop - start
            os.pwrite(self.files[name], part.tobytes(), self.row_bytes[name] * start)

    def close(self) -> None:
        """Remove the files (idempotent); the scratch cannot be used afterwards."""
        for fd in self.files.values():
            os.close(fd)
        self.files, self.arrays = {}, {}
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None

    def __enter__(self) -> RowScratch:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:   # interpreter shutdown: the TemporaryDirectory's own finaliser still removes it
            pass


def host_index(idx):
    """A slice as it is, item numbers (a tensor on any device) as a NumPy array: how a RowScratch is indexed."""
    if isinstance(idx, slice):
        return idx
    if hasattr(idx, "cpu"):   # a torch tensor, on whichever device
        idx = idx.cpu().numpy()
    return np.asarray(idx).reshape(-1)


def _runs(index, n: int) -> list[tuple[int, int]]:
    """The rows of ``index`` as (start, stop) runs of consecutive item numbers, in the index's order."""
    if isinstance(index, slice):
        start, stop, step = index.indices(n)
        if step != 1:
            raise ValueError("a scratch reads slices with step 1")
        return [(start, stop)] if stop > start else []
    idx = np.asarray(index, np.int64).reshape(-1)
    if idx.size == 0:
        return []
    if idx.min() < 0 or idx.max() >= n:
        raise IndexError(f"item numbers must lie in 0 … {n - 1}")
    breaks = np.flatnonzero(np.diff(idx) != 1) + 1
    starts = np.concatenate([[0], breaks])
    stops = np.concatenate([breaks, [idx.size]])
    return [(int(idx[a]), int(idx[b - 1]) + 1) for a, b in zip(starts, stops)]
