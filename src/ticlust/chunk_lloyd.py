"""Lloyd's k-means over an object store's crops, one E-step task per chunk of objects (docs/cluster.md).

The E-step is :func:`ticlust.kernels.lloyd_e_step`, a pure function of a chunk of rows and the centres. Here
a task names its chunk instead of carrying it — the store's path, the objects' numbers, the stack's
normalisation and the centres in; the chunk's sufficient statistics (:class:`~ticlust.kernels.LloydStep`:
per-cluster sums and counts, inertia, labels, farthest items) out — so a :class:`~ticlust.cluster.Backend`
runs it in this process or on a cluster's workers, which read the crops from the store: they are never
shipped. The M-step (:func:`ticlust.kernels.lloyd`) reduces the chunks' statistics in chunk order, so a
distributed Lloyd iteration is the in-process one: the same labels, centres equal to float tolerance.

:class:`StoreSample` is how a fit reaches it: a Stack of a store's objects that knows where they live and
the backend its chunks run on. ``ticlust.fit_store(..., workers=, scheduler=, client=)`` fits on one.
"""
from __future__ import annotations

import dataclasses
import numpy as np

from .cluster import LOCAL, Backend
from .stack import Stack


class StoreSample(Stack):
    """Objects ``index`` of the store at ``path`` as a Stack (``stack``: their crops, validated; held in this
    process for the k-means++ start and the final assignment) whose Lloyd E-step runs on ``backend``: one
    task per chunk, the worker reading the chunk's crops from the store by path. A part of it
    (``blocks``, ``subset``) is a plain Stack."""

    def __init__(self, stack: Stack, path, index, backend: Backend):
        super().__init__(stack.source, stack.lo, stack.hi, stack.pictures)
        self.path, self.index, self.backend = str(path), np.asarray(index, np.int64), backend

    def like(self, source) -> Stack:
        return Stack(source, self.lo, self.hi, self.pictures)

    def lloyd_e_steps(self, centers, pinned, chunk: int) -> list:
        """The E-step of every chunk of ``chunk`` objects through the backend, in chunk order, on the
        centres' device (see :meth:`ticlust.kernels.Rows.e_steps`)."""
        c = centers.detach().cpu().numpy()
        tasks = [(self.path, self.index[s:s + chunk], self.lo, self.hi, c,
                  None if pinned is None else pinned[s:s + chunk].cpu().numpy(), s) for s in range(0, self.n, chunk)]
        return [_on(step, centers.device) for step in self.backend.map(e_step, tasks)]


def e_step(task: tuple):
    """Task (store path, object numbers (n,), lo, hi, centres (K, D) float32, pinned (n,) or None, start):
    the chunk's :class:`~ticlust.kernels.LloydStep`, its crops read from the store and scaled as
    ``Stack(crops, lo, hi)`` scales them (so the rows are those of the fit's stack, bit for bit)."""
    import torch

    from .kernels import lloyd_e_step
    from .store import open_objects

    path, index, lo, hi, centers, pinned, start = task
    rows = Stack(open_objects(path).crops[np.asarray(index)], lo, hi).batch(0, len(index))
    x = torch.from_numpy(np.ascontiguousarray(rows.reshape(len(index), -1)))
    return lloyd_e_step(x, torch.from_numpy(centers), None if pinned is None else torch.from_numpy(pinned), int(start))


def _on(step, device):
    """A LloydStep with its tensors on ``device`` (a worker computes on its CPU)."""
    return dataclasses.replace(step, **{f.name: getattr(step, f.name).to(device) for f in dataclasses.fields(step)
                                        if hasattr(getattr(step, f.name), "to")})


def lloyd_store(path, centers, *, backend: Backend = LOCAL, max_iter: int = 300, tol: float = 1e-4,
                chunk: int = 8192):
    """:func:`ticlust.kernels.lloyd` on every crop of the store at ``path`` (flat rows, unscaled), its
    E-step one ``backend`` task per chunk of ``chunk`` objects; yields (iteration, inertia, centres,
    labels) after each update, as numpy arrays."""
    import torch

    from .kernels import Rows, lloyd
    from .store import open_objects

    crops = np.asarray(open_objects(path).crops)
    sample = StoreSample(Stack(crops, 0.0, 1.0), path, np.arange(len(crops)), backend)
    rows = Rows(sample, "cpu", chunk)
    for it, inertia, c, labels in lloyd(rows, torch.from_numpy(np.asarray(centers, np.float32)), max_iter, tol):
        yield it, inertia, c.numpy(), labels.numpy()


__all__ = ["StoreSample", "e_step", "lloyd_store"]
