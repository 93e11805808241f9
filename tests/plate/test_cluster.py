"""The same runs on a dask.distributed cluster (issue "Beyond one machine"): ticlust.core.backends's backends,
and extraction on a real local cluster of two worker processes (loopback only, no dashboard) — the same
store as in-process, a worker killed mid-run, an unreachable scheduler, a run killed from outside."""
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import cloudpickle
import psutil
import pytest

import ticlust
from ticlust.core import backends as cluster
from ticlust.core.backends import LOCAL, DaskBackend, backend_for
from ticlust.errors import InputError
from ticlust.plate.store import _Steps, extract_field, read_attributes


distributed = pytest.importorskip("distributed")
cloudpickle.register_pickle_by_value(sys.modules[__name__])   # the workers need not import this file


@pytest.fixture(scope="module")
def plate(tmp_path_factory, nuclei_store):
    """A generated plate of 8 fields and its store, extracted in this process (the reference)."""
    return nuclei_store(tmp_path_factory.mktemp("plate"), fields=8, n=40, size=256, seed=5, name="ref.zarr")


def _square(x):
    return x * x


def test_backend_for_picks_where_the_run_goes(client):
    assert backend_for() is LOCAL and list(LOCAL.imap(_square, [3, 1])) == [(0, 9), (1, 1)]
    with pytest.raises(InputError, match="Give one of workers and scheduler, not both"):
        backend_for(workers=2, scheduler="tcp://127.0.0.1:1")
    for bad in (0, -1, 2.5, True):
        with pytest.raises(InputError, match="must be a whole number of worker processes"):
            backend_for(workers=bad)
    own = backend_for(workers=4, tasks=3)
    assert isinstance(own, DaskBackend) and own.workers == 3 and own.cluster is None   # started on first need
    with backend_for(client=client) as backend:
        assert backend.map(_square, list(range(20))) == [i * i for i in range(20)]
        assert sorted(backend.imap(_square, [5, 6, 7])) == [(0, 25), (1, 36), (2, 49)]
        assert backend.map(_square, []) == []
    assert client.status == "running"                                   # the caller's client is left open


def test_a_task_error_is_raised_as_in_process(client):
    with pytest.raises(ZeroDivisionError):
        DaskBackend(client).map(lambda x: 1 / x, [1, 0, 2])


def test_extraction_on_a_cluster_writes_the_same_store(files, plate, client, tmp_path):
    manifest, ref = plate
    store = ticlust.extract(manifest, tmp_path / "ref.zarr", client=client)   # same name: compare byte for byte
    assert files(store.path) == files(ref.path) and len(store) == len(ref) > 200


def _die_once(task):
    """extract_field, except that the first call (a marker file says which) kills its own worker process."""
    spec, plan, root, marker = task
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return extract_field(spec, plan, root)
    os.close(fd)
    os._exit(1)


def test_a_task_whose_worker_dies_runs_again_elsewhere(files, plate, client, tmp_path):
    manifest, ref = plate
    store = ticlust.extract(manifest, tmp_path / "ref.zarr", client=client)
    for part in (store.path / "fields").glob("0000[0-7]"):
        os.rename(part, tmp_path / part.name)                          # parts to cut again
    from ticlust.plate.fields import list_fields
    from ticlust.plate.store import _plan_of

    specs, _ = list_fields(manifest)
    plan = _plan_of(read_attributes(store.path))
    tasks = [(s, plan, str(store.path), str(tmp_path / "died")) for s in specs]
    before = set(client.scheduler_info()["workers"])
    reports = DaskBackend(client).map(_die_once, tasks)
    assert (tmp_path / "died").exists() and before != set(client.scheduler_info()["workers"])   # a worker was lost
    assert [r.objects for r in reports] == [int((ref.table["field_index"] == i).sum()) for i in range(len(specs))]
    assert all(r.error is None and r.fatal is None for r in reports)
    assert files(store.path / "fields") == files(ref.path / "fields")


async def _exit_now():
    os._exit(1)


def test_a_worker_killed_mid_extraction_and_the_store_is_the_same(files, plate, client, tmp_path):
    manifest, ref = plate
    killed = []

    def progress(event):                                               # after the first field: kill a busy worker
        if event.stage == "cutting fields" and not killed:
            busy = [w for w, keys in client.processing().items() if keys]
            killed.append(busy[0] if busy else None)
            if busy:
                client.run(_exit_now, workers=busy[:1], wait=False)

    store = ticlust.extract(manifest, tmp_path / "ref.zarr", client=client, progress=progress)
    assert killed and killed[0] is not None
    assert files(store.path) == files(ref.path) and os.listdir(store.path / "tmp") == []
    deadline = time.monotonic() + 60
    while len(client.scheduler_info()["workers"]) < 2 and time.monotonic() < deadline:   # the nanny restarts it
        time.sleep(0.2)


def test_an_unreachable_scheduler_is_one_sentence_and_nothing_is_written(plate, tmp_path, monkeypatch):
    manifest, _ = plate
    monkeypatch.setattr(cluster, "CONNECT_TIMEOUT", 2.0)
    with socket.socket() as s:                                          # a loopback port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    start = time.monotonic()
    with pytest.raises(InputError) as err:
        ticlust.extract(manifest, tmp_path / "s.zarr", scheduler=f"tcp://127.0.0.1:{port}")
    assert time.monotonic() - start < 20
    message = str(err.value)
    assert message.startswith(f"Cannot reach the dask scheduler at tcp://127.0.0.1:{port} within 2 s")
    assert message.endswith("nothing was written.") and "\n" not in message
    assert not (tmp_path / "s.zarr").exists()


def test_steps_stopped_early_cancel_what_has_not_started(client):
    steps = _Steps(DaskBackend(client), lambda *a: None)
    results = steps.map(_slow_square, [(i,) for i in range(12)], "squares")
    first = next(results)
    results.close()                                                    # as a failed write stops the run
    assert first in {i * i for i in range(12)}
    time.sleep(0.5)
    assert not any(client.processing().values())                       # nothing left running for us


def _slow_square(task):
    time.sleep(0.3)
    return task[0] * task[0]


def test_a_killed_cluster_run_leaves_no_worker_and_resumes_to_the_same_store(cli, files, plate, tmp_path):
    """SIGKILL of `ticlust extract --workers 2` mid-run: its worker processes die with it, and the next run
    (on a local cluster, printing its address) finishes the store byte for byte as an uninterrupted run."""
    manifest, ref = plate
    store = tmp_path / "ref.zarr"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    run = subprocess.Popen([sys.executable, "-m", "ticlust.cli", "extract", str(manifest), "-o", str(store),
                            "--workers", "2", "--quiet"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 180
    while not (store / "fields" / "00000").exists() and run.poll() is None and time.monotonic() < deadline:
        time.sleep(0.002)
    children = psutil.Process(run.pid).children(recursive=True)
    run.send_signal(signal.SIGKILL)
    run.wait()
    gone, alive = psutil.wait_procs(children, timeout=30)
    assert not alive, alive                                             # no orphan writes into the store
    assert not read_attributes(store)["complete"] and len(os.listdir(store / "fields")) < 9
    out = cli("extract", manifest, "-o", store, "--workers", "2")
    assert out.returncode == 0, out.stderr
    assert "ticlust: dask cluster: 2 workers (2 threads), scheduler tcp://127.0.0.1:" in out.stderr
    assert files(store) == files(ref.path)


def test_a_distributed_lloyd_iteration_is_the_in_process_one(plate, client):
    """kmeans' E-step per chunk of store crops (sums and counts per cluster), reduced in the M-step: the
    same iterations as ticlust.kernels.kmeans.lloyd on the same rows, in-process and on the 2-process cluster."""
    import numpy as np
    import torch

    from ticlust.plate.run import lloyd_store
    from ticlust.kernels import kmeans_plus_plus, lloyd

    _, store = plate
    x = torch.from_numpy(np.asarray(store.crops).reshape(len(store), -1).astype(np.float32))
    init = kmeans_plus_plus(x, 5, np.random.default_rng(0))
    ref = list(lloyd(x, init.clone(), max_iter=50))
    assert len(ref) > 2
    for backend in (LOCAL, DaskBackend(client)):
        got = list(lloyd_store(store.path, init.numpy(), backend=backend, max_iter=50, chunk=40))   # 7 chunks
        assert len(got) == len(ref)
        for (it, inertia, centers, labels), (it2, inertia2, centers2, labels2) in zip(ref, got):
            assert it == it2 and np.array_equal(labels.numpy(), labels2)
            np.testing.assert_allclose(centers2, centers.numpy(), rtol=1e-5, atol=1e-5)
            assert inertia2 == pytest.approx(inertia, rel=1e-5)


# ---- predict: the per-part step on the cluster ------------------------------------------------------
@pytest.fixture(scope="module")
def fitted(plate, tmp_path_factory):
    """A kmeans result fitted on a sample of the plate's store, and the in-process predictions' CSV (the reference)."""
    from ticlust.cli import main
    from ticlust.plate.run import predict_store

    _, store = plate
    folder = tmp_path_factory.mktemp("predict")
    km = folder / "km.npz"
    assert main(["fit", str(store.path), "--fit-sample", "120", "--method", "kmeans", "--k", "3", "-o", str(km),
                 "--quiet"]) == 0
    ref = folder / "ref.zarr"
    shutil.copytree(store.path, ref)
    done = predict_store(km, ref, csv=folder / "ref.csv")
    return km, done.table, (folder / "ref.csv").read_bytes()


def _fresh(store, tmp_path):
    """A copy of the store with no predictions (as the reference was before it was predicted), at ref.zarr."""
    copy = tmp_path / "ref.zarr"
    shutil.copytree(store.path, copy)
    return copy


def test_prediction_on_a_cluster_gives_the_same_table(plate, fitted, client, tmp_path):
    import pandas as pd

    from ticlust.plate.run import predict_store

    _, store = plate
    km, table, csv = fitted
    done = ticlust.predict(km, _fresh(store, tmp_path), client=client)
    assert done.parts == 8 and done.skipped == 0 and done.objects == len(store)
    pd.testing.assert_frame_equal(done.table, table)
    again = tmp_path / "again"
    again.mkdir()
    done = predict_store(km, _fresh(store, again), client=client, csv=again / "p.csv")
    assert (again / "p.csv").read_bytes() == csv
    with pytest.raises(InputError, match="not both"):
        predict_store(km, store, client=client, backend=LOCAL)
    assert client.status == "running"                                   # the caller's client is left open


def _predict_dies_once(task):
    """predict_part, except that the first call (a marker file says which) kills its own worker process."""
    from ticlust.plate.run import predict_part

    part, marker = task
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return predict_part(part)
    os.close(fd)
    os._exit(1)


class _KillsOneWorker(DaskBackend):
    """The cluster, with one worker killed by the first part it starts."""

    def __init__(self, client, marker):
        super().__init__(client)
        self.marker = marker

    def imap(self, fn, tasks):
        return super().imap(_predict_dies_once, [(t, self.marker) for t in tasks])


def test_a_worker_killed_mid_prediction_and_the_csv_is_the_same(plate, fitted, client, tmp_path):
    from ticlust.plate.run import predict_store

    _, store = plate
    km, _, csv = fitted
    before = set(client.scheduler_info()["workers"])
    done = predict_store(km, _fresh(store, tmp_path), backend=_KillsOneWorker(client, str(tmp_path / "died")),
                         csv=tmp_path / "p.csv")
    assert (tmp_path / "died").exists() and before != set(client.scheduler_info()["workers"])   # a worker was lost
    assert done.parts == 8 and (tmp_path / "p.csv").read_bytes() == csv
    assert not list((tmp_path / "ref.zarr").rglob("*.partial"))
    deadline = time.monotonic() + 60
    while len(client.scheduler_info()["workers"]) < 2 and time.monotonic() < deadline:   # the nanny restarts it
        time.sleep(0.2)


def test_predict_with_an_unreachable_scheduler_is_one_sentence_and_writes_nothing(files, plate, fitted, tmp_path,
                                                                                 monkeypatch, capsys):
    from ticlust.cli import main

    _, store = plate
    km, _, _ = fitted
    copy = _fresh(store, tmp_path)
    before = files(copy)
    monkeypatch.setattr(cluster, "CONNECT_TIMEOUT", 2.0)
    with socket.socket() as s:                                          # a loopback port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code = main(["predict", str(km), str(copy), "--scheduler", f"tcp://127.0.0.1:{port}", "--csv",
                 str(tmp_path / "p.csv"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert err.startswith(f"ticlust: error: Cannot reach the dask scheduler at tcp://127.0.0.1:{port} within 2 s")
    assert err.rstrip().endswith("nothing was written.")
    assert files(copy) == before and not (tmp_path / "p.csv").exists()


def test_predict_workers_and_scheduler_exclude_each_other(plate, fitted, capsys):
    from ticlust.cli import main

    _, store = plate
    km, _, _ = fitted
    with pytest.raises(SystemExit) as exit_:
        main(["predict", str(km), str(store.path), "--workers", "2", "--scheduler", "tcp://127.0.0.1:1"])
    assert exit_.value.code == 2 and "not allowed with argument" in capsys.readouterr().err


def _worker_environment(_):
    import torch

    return os.environ.get("MALLOC_TRIM_THRESHOLD_"), os.environ.get("OMP_NUM_THREADS"), torch.get_num_threads()


def test_a_local_cluster_starts_its_workers_without_dasks_malloc_trim(monkeypatch):
    """dask's 64 KiB trim threshold made every torch buffer a fresh mapping (a part predicted 2-3x slower on a
    worker than in this process): ticlust's local clusters leave it out, and this process's environment
    is as it was."""
    from ticlust.core import cpus

    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(cpus, "allowed_cores", lambda: [0, 1])          # a quiet 2-core machine
    monkeypatch.setattr(cpus, "busy_cores", lambda interval=cpus.PROBE_S: 0.0)
    cpus.forget_probe()                                                  # measured on the staged machine
    try:
        with DaskBackend(workers=1) as backend:
            (trim, threads, torch_threads), = backend.map(_worker_environment, [0])
    finally:
        cpus.forget_probe()
    assert trim is None and threads == "2" and 1 <= torch_threads <= 2      # no trim setting; both cores its share
    assert "MALLOC_TRIM_THRESHOLD_" not in os.environ and "OMP_NUM_THREADS" not in os.environ
