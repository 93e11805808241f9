"""ST/AI and DTI K-means fit and predict hold no whole stack and no N×K×… per-pair array beyond a batch
(issue 28: "One house for a million objects"): every read of the source is at most a batch, ST/AI's per-pair
warm start goes to a scratch on disk when large (the same result as in memory) and the scratch is removed
when the run ends, is cancelled or fails."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from ticlust.core import scratch
from ticlust.events import Progress, drain
from ticlust.kernels import aligned_lloyd
from ticlust.methods import dti, st_kmeans
from ticlust.methods.base import get_method
from ticlust.datasets.samples import glyphs_sample
from ticlust.core.scratch import RowScratch
from ticlust.core.stack import Stack
from ticlust.transforms.align import Aligner

N, BATCH = 96, 64   # every batch size below is BATCH or less, so a read of more than BATCH items is a whole-stack read
CPU = torch.device("cpu")
FAST = {"ai-kmeans": dict(max_iter=2, steps=2, affine_steps=2, predict_steps=2, chunk=BATCH // 8),
        "st-kmeans": dict(max_iter=2, steps=2, affine_steps=2, predict_steps=2, landmarks=3, chunk=BATCH // 8),
        "dti-kmeans": dict(max_epochs=1, batch_size=16, infer_batch_size=BATCH, threads=1)}


class ReadLog:
    """An N×H×W array-like source (a .npy file, memory-mapped) that records how many items each read asked for."""

    def __init__(self, array):
        self.array, self.shape, self.dtype, self.ndim = array, array.shape, array.dtype, array.ndim
        self.sizes: list[int] = []

    def __getitem__(self, index):
        out = self.array[index]
        self.sizes.append(len(out) if np.ndim(out) == self.ndim else 1)
        return out


@pytest.fixture(scope="module")
def glyph_file(tmp_path_factory):
    x, _ = glyphs_sample(n_per_class=N // 4, size=16, seed=3)
    path = tmp_path_factory.mktemp("fit_memory") / "glyphs.npy"
    np.save(path, np.round(np.clip(x, 0, 1) * 255).astype(np.uint8))
    return path


def logged_stack(path) -> Stack:
    return Stack(ReadLog(np.load(path, mmap_mode="r")), 0.0, 255.0, pictures=False)


@pytest.fixture
def pair_sizes(monkeypatch):
    """The item counts every identity warm start (``Aligner.zeros``: N×K×… per-pair arrays) was made for."""
    sizes, zeros = [], Aligner.zeros

    def spy(self, n, k):
        sizes.append(n)
        return zeros(self, n, k)
    monkeypatch.setattr(Aligner, "zeros", spy)
    return sizes


@pytest.fixture
def scratch_dirs(monkeypatch):
    """Every scratch forced to disk; the directories they made."""
    made, init = [], RowScratch.__init__

    def spy(self, *args, **kwargs):
        init(self, *args, **kwargs)
        made.append(self.directory)
    monkeypatch.setattr(scratch, "IN_MEMORY_BYTES", 0)
    monkeypatch.setattr(RowScratch, "__init__", spy)
    return made


def fit(method: str, stack: Stack, **changes):
    spec = get_method(method)
    return drain(spec.run(stack, spec.make_config(3, **{**FAST[method], **changes}), CPU, 0))


@pytest.mark.parametrize("method", ["ai-kmeans", "st-kmeans", "dti-kmeans"])
def test_fit_and_predict_read_batches_and_keep_no_pair_array_of_every_item(method, glyph_file, pair_sizes,
                                                                            scratch_dirs, monkeypatch):
    monkeypatch.setattr(st_kmeans, "PREDICT_BLOCK", BATCH)
    monkeypatch.setattr(dti, "SEED_BATCH", BATCH, raising=False)   # raising=False: the test also runs on older code
    stack = logged_stack(glyph_file)
    res = fit(method, stack)
    assert res.n == N and res.aligned is None and res.grids is None and "pair_theta" not in res.params
    assert max(stack.source.sizes) <= BATCH, f"the fit read {max(stack.source.sizes)} of {N} items at once"
    new = logged_stack(glyph_file)
    out = get_method(method).predict(res, new, CPU, BATCH if method == "dti-kmeans" else None)
    assert out.n == N and max(new.source.sizes) <= BATCH and out.aligned is None and out.grids is None
    assert not pair_sizes or max(pair_sizes) <= BATCH, "a per-pair array was made for every item"
    if method != "dti-kmeans":
        assert scratch_dirs and all(d is not None and not os.path.exists(d) for d in scratch_dirs)


@pytest.mark.parametrize("method,changes", [("ai-kmeans", {"fit_align": "adam"}), ("st-kmeans", {}),
                                            ("st-kmeans", dict(mode="minibatch", epochs=2, batch_size=20))])
def test_the_warm_start_on_disk_gives_the_result_it_gives_in_memory(method, changes, glyph_file, monkeypatch):
    """Lloyd runs make a repair move here (the column copy: AI's two-step Adam fit in its first iteration, ST's
    Gauss-Newton fit in its TPS stage) and ST's second stage starts from the affine one's warps; the mini-batch
    run reads and writes random rows."""
    in_memory = fit(method, logged_stack(glyph_file), **changes)
    monkeypatch.setattr(scratch, "IN_MEMORY_BYTES", 0)
    on_disk = fit(method, logged_stack(glyph_file), **changes)
    if changes.get("mode") != "minibatch":
        assert len(on_disk.extras["repairs"]) >= 1
    np.testing.assert_array_equal(on_disk.labels, in_memory.labels)
    np.testing.assert_array_equal(on_disk.scores, in_memory.scores)
    np.testing.assert_array_equal(on_disk.prototypes, in_memory.prototypes)


def test_the_repair_move_bisects_a_cluster_block_by_block_from_a_scratch(glyph_file, monkeypatch):
    """The repair move's split is priced on one cluster's warped members: written to a scratch (on disk here) and
    bisected a block at a time, never held whole; the fit is the one it is in memory. (AI's two-step Adam fit makes
    a repair move here; its Gauss-Newton fit aligns well enough to need none.)"""
    in_memory = fit("ai-kmeans", logged_stack(glyph_file), fit_align="adam")
    blocks, whole = [], aligned_lloyd.bisect

    def spy(rows):
        assert callable(rows), "a cluster's warped members were handed over whole"
        return whole(lambda: (blocks.append(len(b)) or b for b in rows()))
    monkeypatch.setattr(aligned_lloyd, "bisect", spy)
    monkeypatch.setattr(aligned_lloyd, "BISECT_BLOCK", 8)
    monkeypatch.setattr(scratch, "IN_MEMORY_BYTES", 0)
    on_disk = fit("ai-kmeans", logged_stack(glyph_file), fit_align="adam")
    assert len(on_disk.extras["repairs"]) >= 1 and blocks and max(blocks) <= 8
    np.testing.assert_array_equal(on_disk.labels, in_memory.labels)
    np.testing.assert_array_equal(on_disk.prototypes, in_memory.prototypes)


def test_a_fit_and_a_predict_import_no_scikit_learn(glyph_file):
    """Every result is stamped with scikit-learn's version; importing scikit-learn for it cost each fit and
    predict process ~140 MiB of resident memory and ~1 s of CPU (benchmarks/results/memory.md)."""
    code = ("import sys\nimport numpy as np\nimport ticlust\n"
            "x = np.load(sys.argv[1], mmap_mode='r')\n"
            "res = ticlust.fit(x, method='dti-kmeans', k=3, seed=0, device='cpu', progress=False, max_epochs=1, threads=1)\n"
            "out = ticlust.predict(res, x, device='cpu')\n"
            "assert out.versions['scikit-learn'] == res.versions['scikit-learn'] != ''\n"
            "print('sklearn' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code, str(glyph_file)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False"]


def test_a_cancelled_fit_removes_its_scratch(glyph_file, scratch_dirs):
    spec = get_method("st-kmeans")
    events = spec.run(logged_stack(glyph_file), spec.make_config(3, **FAST["st-kmeans"]), CPU, 0)
    while not scratch_dirs:
        assert isinstance(next(events), Progress)
    assert os.path.isdir(scratch_dirs[0]) and os.listdir(scratch_dirs[0])
    events.close()                                  # what a front end's Cancel does
    assert not os.path.exists(scratch_dirs[0])


def test_a_failed_fit_removes_its_scratch(glyph_file, scratch_dirs, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("the centroid update failed")
    monkeypatch.setattr(aligned_lloyd, "_means", broken)
    with pytest.raises(RuntimeError, match="centroid update"):
        fit("ai-kmeans", logged_stack(glyph_file))
    assert scratch_dirs and not any(os.path.exists(d) for d in scratch_dirs)


@pytest.mark.parametrize("limit", [None, 0])
def test_row_scratch_reads_back_what_was_written_by_slice_and_by_item_numbers(limit):
    rng = np.random.default_rng(0)
    with RowScratch(50, {"a": (3, 2), "b": (4,)}, in_memory_bytes=limit) as rows:
        assert rows.on_disk == (limit == 0)
        np.testing.assert_array_equal(rows.read("a", slice(0, 50)), np.zeros((50, 3, 2), np.float32))
        a, b = rng.normal(size=(50, 3, 2)).astype(np.float32), rng.normal(size=(50, 4)).astype(np.float32)
        rows.write("a", slice(0, 50), a)
        order = rng.permutation(50)
        rows.write("b", order, b[order])
        np.testing.assert_array_equal(rows.read("a", slice(10, 20)), a[10:20])
        np.testing.assert_array_equal(rows.read("b", order[:7]), b[order[:7]])
        np.testing.assert_array_equal(rows.read("b", [3, 4, 5, 9]), b[[3, 4, 5, 9]])
        where = rows.directory
    assert where is None or not os.path.exists(where)
