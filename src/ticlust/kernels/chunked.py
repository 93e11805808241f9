"""Lloyd's k-means (and gmm's EM, and ST/AI's aligned E-step) over a sample of objects kept on disk, one
E-step task per chunk of objects (docs/cluster.md).

The E-step is :func:`ticlust.kernels.kmeans.lloyd_e_step` (or ``methods.gmm.em_e_step``), a pure function of a
chunk of rows and the current parameters, run by :func:`chunk_task`. Here
a task names its chunk instead of carrying it — the store's path, the objects' numbers, the stack's
normalisation and the centres in; the chunk's sufficient statistics (:class:`~ticlust.kernels.kmeans.LloydStep`:
per-cluster sums and counts, inertia, labels, farthest items) out — so a :class:`~ticlust.core.backends.Backend`
runs it in this process or on a cluster's workers, which read the crops from the store: they are never
shipped. The M-step (:func:`ticlust.kernels.kmeans.lloyd`) reduces the chunks' statistics in chunk order, so a
distributed Lloyd iteration is the in-process one: the same labels, centres equal to float tolerance.

:class:`StoreSample` is how a fit reaches it: a Stack of a store's objects that knows where they live and
the backend its chunks run on, and the function that reads a chunk's crops (``read(path, index)``: the store
room hands in its reader, so this room imports nothing above it). ``ticlust.fit_store(..., workers=,
scheduler=, client=)`` fits on one.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

from ..core.backends import Backend
from ..core.stack import Stack


class StoreSample(Stack):
    """Objects ``index`` of the store at ``path`` as a Stack (``stack``: their crops, validated; held in this
    process for the k-means++ start and the final assignment) whose per-chunk kernels (the Lloyd E-step,
    gmm's EM E-step, st-kmeans' alignment E-step) run on ``backend``: one task per chunk, the worker reading
    the chunk's crops from the store by path. The fits know it by its type (``kernels.Rows``, st-kmeans'
    E-steps): a stack of any other type is worked through in this process. A part of it (``blocks``,
    ``subset``) is a plain Stack."""

    path: str                 # the store, as the workers see it
    index: np.ndarray         # (n,) the sample's objects: rows of the store's table
    backend: Backend          # where the chunks' tasks run
    read: Callable            # read(path, index) -> the objects' crops (a picklable module-level function)

    def __init__(self, stack: Stack, path, index, backend: Backend, read: Callable):
        super().__init__(stack.source, stack.lo, stack.hi, stack.pictures)
        self.path, self.index, self.backend, self.read = str(path), np.asarray(index, np.int64), backend, read

    def like(self, source) -> Stack:
        return Stack(source, self.lo, self.hi, self.pictures)

    def map_chunks(self, fn, args: tuple, pinned, chunk: int) -> list:
        """``fn`` (a pure kernel) on every chunk of ``chunk`` objects through the backend, the values in chunk
        order and on the arguments' device (see :meth:`ticlust.kernels.kmeans.Rows.map_chunks`)."""
        import torch

        device = next((a.device for a in args if isinstance(a, torch.Tensor)), torch.device("cpu"))
        starts = range(0, self.n, chunk)
        kwargs = [dict(pinned=None if pinned is None else pinned[s:s + chunk], start=s) for s in starts]
        out = [None] * len(kwargs)
        for i, value in self.imap_tasks(fn, chunk, args, kwargs, device):
            out[i] = value
        return out

    def imap_tasks(self, fn, chunk: int, args: tuple, kwargs: list, device="cpu"):
        """``(i, fn(rows, *args, **kwargs[i]))`` for chunk i of ``chunk`` objects (its flat rows, read by the
        task), as each task finishes, in any order: so a driver can report every finished chunk. The tensors
        go to the tasks on the CPU (a worker computes on its CPU) and the values come back on ``device``. A
        task carries the store's path and the chunk's object numbers, not its crops; ``kwargs[i]`` carries
        what is the chunk's own (its pinned items, ai/st-kmeans' warm-start alignments)."""
        args = _on(args, "cpu")
        tasks = [(fn, self.read, self.path, self.index[s:s + chunk], self.lo, self.hi, args, _on(kw, "cpu"))
                 for s, kw in zip(range(0, self.n, chunk), kwargs)]
        for i, value in self.backend.imap(chunk_task, tasks):
            yield i, _on(value, device)


def chunk_task(task: tuple):
    """Task (kernel, reader, store path, object numbers (n,), lo, hi, arguments, keyword arguments): the kernel
    on the chunk's flat rows, its crops read by ``reader(path, numbers)`` and scaled as ``Stack(crops, lo, hi)``
    scales them (so the rows are those of the fit's stack, bit for bit)."""
    import torch

    fn, read, path, index, lo, hi, args, kwargs = task
    rows = Stack(read(path, np.asarray(index)), lo, hi).batch(0, len(index))
    x = torch.from_numpy(np.ascontiguousarray(rows.reshape(len(index), -1)))
    return fn(x, *args, **kwargs)


def _on(value, device):
    """``value`` with every tensor in it (also in tuples, lists, dicts and dataclasses: a kernel's record,
    alignments) detached onto ``device``; anything else as it is."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.detach().to(device)
    if isinstance(value, (tuple, list)):
        return type(value)(_on(v, device) for v in value)
    if isinstance(value, dict):
        return {k: _on(v, device) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.replace(value, **{f.name: _on(getattr(value, f.name), device)
                                             for f in dataclasses.fields(value) if f.init})
    return value


__all__ = ["StoreSample", "chunk_task"]
