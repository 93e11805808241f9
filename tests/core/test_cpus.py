"""Threads by the cores other jobs leave free: the decision, the in-process setting and a real cluster's workers."""
from __future__ import annotations

import pytest
import torch

from ticlust.core import cpus
from ticlust.core.backends import local_cluster, worker_environ
from ticlust.core.shared_setting import SharedSetting


@pytest.mark.parametrize("cores, busy, workers, threads", [
    (2, 0.0, None, 2), (2, 0.4, None, 2), (2, 0.6, None, 1), (2, 1.0, None, 1), (2, 2.0, None, 1), (2, 5.0, None, 1),
    (2, 0.0, 1, 2), (2, 0.0, 2, 1), (2, 1.0, 2, 1), (8, 1.0, 2, 3), (8, 0.0, 3, 2), (4, 0.0, 8, 1), (1, 0.0, None, 1),
    (2, -1.0, None, 2),
])
def test_plan_threads_shares_out_the_free_cores(cores, busy, workers, threads):
    assert cpus.plan_threads(cores, busy, workers) == threads


@pytest.fixture
def two_cores(monkeypatch):
    """A 2-core machine whose other jobs keep ``busy[0]`` cores busy; no OMP_NUM_THREADS; no cached probe."""
    busy = [0.0]
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(cpus, "allowed_cores", lambda: [0, 1])
    monkeypatch.setattr(cpus, "busy_cores", lambda interval=cpus.PROBE_S: busy[0])
    cpus.forget_probe()
    # a fresh shared setting: a run another test left going in a thread (a dock's worker) would hold the old one
    monkeypatch.setattr(cpus, "_threads", SharedSetting())
    yield busy
    cpus.forget_probe()                    # the staged machine's answer is not left for the next test


def test_a_local_clusters_share_comes_from_the_probe_free_cores_made(two_cores, monkeypatch):
    """worker_environ shares out free_cores' answer: a probe made in the last PROBE_REUSE_S seconds is not made
    again (each probe samples the cores for PROBE_S), and forget_probe makes the next one measure."""
    probes = []
    monkeypatch.setattr(cpus, "busy_cores", lambda interval=cpus.PROBE_S: probes.append(interval) or two_cores[0])
    two_cores[0] = 1.0
    assert cpus.free_cores() == 1
    two_cores[0] = 0.0                     # the other job ended, but the probe is recent
    assert worker_environ(1)["distributed.nanny.pre-spawn-environ.OMP_NUM_THREADS"] == 1 and len(probes) == 1
    cpus.forget_probe()
    assert worker_environ(1)["distributed.nanny.pre-spawn-environ.OMP_NUM_THREADS"] == 2 and len(probes) == 2
    assert worker_environ(2)["distributed.nanny.pre-spawn-environ.MKL_NUM_THREADS"] == 1 and len(probes) == 2


def test_cpu_threads_sets_the_free_cores_and_puts_the_count_back(two_cores):
    before = torch.get_num_threads()
    two_cores[0] = 1.0                     # one core held by another job
    try:
        torch.set_num_threads(2)
        with cpus.cpu_threads(torch.device("cpu")):
            assert torch.get_num_threads() == 1
            with cpus.cpu_threads(torch.device("cpu")):   # a second run inside keeps the setting
                assert torch.get_num_threads() == 1
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_cpu_threads_obeys_omp_num_threads(two_cores, monkeypatch):
    before = torch.get_num_threads()
    two_cores[0] = 1.0
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    try:
        torch.set_num_threads(2)
        with cpus.cpu_threads(torch.device("cpu")):
            assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_busy_cores_is_a_share_of_the_allowed_cores():
    busy = cpus.busy_cores(0.05)
    assert 0.0 <= busy <= len(cpus.allowed_cores())


def _threads():
    import os

    import torch as t
    return t.get_num_threads(), os.environ.get("OMP_NUM_THREADS")


@pytest.mark.parametrize("workers, busy, threads", [(1, 0.0, 2), (2, 0.0, 1)])
def test_local_cluster_workers_get_their_share_of_the_free_cores(two_cores, workers, busy, threads):
    from distributed import Client

    two_cores[0] = busy
    cluster = local_cluster(workers, dashboard=None)
    try:
        with Client(cluster) as client:
            seen = client.run(_threads)
    finally:
        cluster.close()
    assert len(seen) == workers
    # the workers' environment carries the share (dask's default is 1); torch reads it when it starts, and was
    # once seen with fewer threads than it says in a full suite at load 11, so its count is held to at most that
    assert {env for _, env in seen.values()} == {str(threads)}
    assert all(1 <= count <= threads for count, _ in seen.values())
