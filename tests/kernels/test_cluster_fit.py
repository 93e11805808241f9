"""Fitting on an object store's sample with the fit's per-chunk steps on a dask.distributed cluster (issue
"Beyond one machine", item 1): kmeans' Lloyd E-step (and gmm's) as one task per chunk, read by the workers
from the store, gives the labels of the in-process fit and its prototypes to float tolerance — in-process,
``workers=1`` and a real local cluster of two worker processes."""
import sys

import cloudpickle
import numpy as np
import pytest

import ticlust
from ticlust.cli import main
from ticlust.plate.run import fit_store

distributed = pytest.importorskip("distributed")
cloudpickle.register_pickle_by_value(sys.modules[__name__])

#: A sample of 160 objects in chunks of 40: four E-step tasks per Lloyd iteration.
FIT = dict(method="kmeans", k=3, sample=160, seed=1, device="cpu", batch_size=40)


@pytest.fixture(scope="module")
def store(tmp_path_factory, nuclei_store):
    return nuclei_store(tmp_path_factory.mktemp("fitplate"), fields=6, n=40, size=256, seed=7, name="plate.zarr")[1]


@pytest.fixture(scope="module")
def reference(store):
    """The in-process fit (result, sample index)."""
    return fit_store(store, **FIT)


def _same_fit(got, ref):
    assert np.array_equal(got.labels, ref.labels)
    np.testing.assert_allclose(got.prototypes, ref.prototypes, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got.scores, ref.scores, rtol=1e-5, atol=1e-5)
    assert len(got.history) == len(ref.history) and got.config["fit_sample"] == ref.config["fit_sample"]


def test_kmeans_lloyd_runs_on_the_cluster_with_the_in_process_result(store, client, reference):
    ref, index = reference
    assert len(index) == 160 and len(ref.history) > 2
    with distributed.get_task_stream(client) as stream:
        got, got_index = fit_store(store, client=client, **FIT)
    _same_fit(got, ref)
    assert np.array_equal(got_index, index)
    tasks = [t for t in stream.data if t["key"].startswith("chunk_task")]
    # one task per chunk and Lloyd iteration (the final assignment is made in this process), on both workers
    assert len(tasks) == 4 * (len(ref.history) - 1)
    assert len({t["worker"] for t in tasks}) == 2
    assert client.status == "running"                                # the caller's client is left open


def test_gmm_sends_its_kmeans_start_and_em_e_step_to_the_cluster(store, client):
    params = dict(FIT, method="gmm", max_iter=5, kmeans_iter=20)
    ref, _ = fit_store(store, **params)
    with distributed.get_task_stream(client) as stream:
        got, _ = fit_store(store, client=client, **params)
    # 4 chunks: the K-means start's iterations, then every EM iteration's E-step
    assert len([t for t in stream.data if t["key"].startswith("chunk_task")]) >= 4 * (len(ref.history) + 1)
    assert np.array_equal(got.labels, ref.labels) and len(got.history) == len(ref.history)
    np.testing.assert_allclose(got.prototypes, ref.prototypes, rtol=1e-4, atol=1e-5)


def test_a_method_without_chunk_steps_fits_here_and_says_so(store, client):
    with distributed.get_task_stream(client) as stream, \
            pytest.warns(UserWarning, match="procrustes-kmeans fits in this process"):
        fit_store(store, method="procrustes-kmeans", k=2, sample=40, device="cpu", client=client)
    assert not stream.data


#: ai/st-kmeans on 36 objects in chunks of 12: three alignment E-step tasks per Lloyd iteration (short settings).
ALIGN = dict(k=2, sample=36, seed=1, device="cpu", chunk=12, max_iter=3, steps=2, affine_steps=2)


@pytest.mark.parametrize("method, extra", [("ai-kmeans", {}), pytest.param("st-kmeans", {"invariances": "deformable"},
                                                                            marks=pytest.mark.slow)])
def test_an_aligning_fit_sends_its_e_step_to_the_cluster_with_the_in_process_result(store, client, method, extra):
    """Each chunk's alignments (warm start in, improved out), labels and warped sums per cluster come from a
    worker; the M-step adds them in chunk order here: the labels and prototypes of the in-process fit, from
    a real two-process cluster and from a one-worker cluster the fit starts itself. st-kmeans runs its
    affine stage, then the thin-plate spline (its warm start carries the displacements)."""
    ref, _ = fit_store(store, method=method, **ALIGN, **extra)
    with distributed.get_task_stream(client) as stream:
        got, _ = fit_store(store, method=method, client=client, **ALIGN, **extra)
    _same_fit(got, ref)
    np.testing.assert_allclose(got.params["affine"], ref.params["affine"], rtol=1e-5, atol=1e-6)
    tasks = [t for t in stream.data if t["key"].startswith("chunk_task")]
    assert len(tasks) == 3 * len(ref.history) and len({t["worker"] for t in tasks}) == 2   # one per chunk and iteration
    if method == "st-kmeans":
        np.testing.assert_allclose(got.params["displacements"], ref.params["displacements"], rtol=1e-5, atol=1e-6)
        one, _ = fit_store(store, method=method, workers=1, **ALIGN, **extra)
        _same_fit(one, ref)


def test_workers_1_starts_a_local_cluster_for_the_fit_and_matches_in_process(store, reference):
    got, _ = fit_store(store, workers=1, **FIT)                # a LocalCluster started and closed by the fit
    _same_fit(got, reference[0])


def test_cli_fit_takes_workers_and_scheduler_for_a_store_only(store, tmp_path, capsys):
    out = tmp_path / "r.npz"
    assert main(["fit", str(store.path), "--k", "3", "--scheduler", "tcp://127.0.0.1:1", "-o", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "Cannot reach the dask scheduler at tcp://127.0.0.1:1" in err and len(err.strip().splitlines()) <= 2
    assert not out.exists()
    stack = tmp_path / "x.npy"
    np.save(stack, np.random.default_rng(0).random((20, 8, 8), np.float32))
    assert main(["fit", str(stack), "--workers", "2", "-o", str(out)]) == 2
    assert "apply to an object store" in capsys.readouterr().err and not out.exists()


# ---- ai/st-kmeans' fit reads its stack batch by batch (issue 28: no N×H×W array beyond a batch) --------
class Reads:
    """An array that records how many items each read takes."""

    def __init__(self, data):
        self.data, self.shape, self.dtype, self.ndim, self.sizes = data, data.shape, data.dtype, data.ndim, []

    def __getitem__(self, key):
        out = self.data[key]
        self.sizes.append(len(out))
        return out


def test_an_aligning_fit_reads_the_stack_a_chunk_at_a_time(monkeypatch):
    """ai-kmeans (st-kmeans runs the same loop): 80 items read at most chunk × 8 = 64 at a time; the object map
    after the fit reads its blocks (MAP_BLOCK items, here 16) the same way."""
    from ticlust.datasets.samples import glyphs_sample
    from ticlust.core.validation import as_stack
    from ticlust.methods import base

    monkeypatch.setattr(base, "MAP_BLOCK", 16)

    images, _ = glyphs_sample(n_per_class=20, size=16, seed=0)
    source = Reads(images)
    stack = as_stack(source)
    source.sizes.clear()                                                 # the validation's scan is not the fit
    result = ticlust.fit(stack, method="ai-kmeans", k=2, device="cpu", chunk=8, max_iter=2, steps=1, affine_steps=1)
    assert result.n == 80 and len(source.sizes) > 10
    assert max(source.sizes) <= 8 * 8          # never the stack as one array (Stack keeps no copy)
