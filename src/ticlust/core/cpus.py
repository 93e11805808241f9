"""How many CPU threads a run uses: the cores this process may run on, less those other jobs keep busy now.

torch starts one OpenMP thread per core of the machine. When another job holds one of those cores, every
parallel region waits at its barrier for the thread that shares the held core (OpenMP threads spin there
before they sleep), so a predict with 2 threads on a 2-core machine where one core was busy took 2-7x the
CPU time of 1 thread (benchmarks/results/cpu_threads.md). So a run on the CPU sizes torch's threads by the
cores free when it starts (:func:`cpu_threads`), and a local cluster gives each worker process its share
(:func:`plan_threads`). ``OMP_NUM_THREADS`` set in the environment is obeyed as it is (a dask worker's,
or the user's choice): then nothing is probed or changed.
"""
from __future__ import annotations

import os
import time
from contextlib import contextmanager

from .shared_setting import SharedSetting

#: Seconds of CPU time sampled to see how busy the cores are, and how long that answer is reused.
PROBE_S, PROBE_REUSE_S = 0.1, 30.0

_probe: tuple[float, int] | None = None        # (when, free cores) of the last probe
_threads = SharedSetting()                     # torch's thread count while CPU runs last


def allowed_cores() -> list[int]:
    """The CPU numbers this process may run on (its affinity; every CPU where the system cannot say)."""
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return list(range(os.cpu_count() or 1))


def plan_threads(cores: int, busy: float, workers: int | None = None) -> int:
    """Threads for each of ``workers`` processes (None: this process alone) on ``cores`` cores of which other jobs
    keep ``busy`` (in cores, e.g. 0.7) busy: the free cores (a core more than half busy counts as taken; at least
    one) shared out evenly, at least 1 each."""
    free = max(1, min(int(cores), int(cores - max(0.0, float(busy)) + 0.5)))
    return max(1, free // max(1, int(workers or 1)))


def busy_cores(interval: float = PROBE_S) -> float:
    """Cores (of :func:`allowed_cores`) kept busy over the next ``interval`` seconds by other processes than this one."""
    import psutil

    cpus = allowed_cores()
    me = psutil.Process()
    before, own = psutil.cpu_times(percpu=True), me.cpu_times()
    start = time.monotonic()
    time.sleep(interval)
    after, own_after = psutil.cpu_times(percpu=True), me.cpu_times()
    elapsed = max(time.monotonic() - start, 1e-3)
    busy = 0.0
    for c in cpus:
        if c < min(len(before), len(after)):
            total = sum(after[c]) - sum(before[c])
            idle = (after[c].idle + getattr(after[c], "iowait", 0.0)) - (before[c].idle + getattr(before[c], "iowait", 0.0))
            busy += 0.0 if total <= 0 else min(1.0, max(0.0, 1.0 - idle / total))   # iowait may step back
    mine = (own_after.user + own_after.system - own.user - own.system) / elapsed
    return min(float(len(cpus)), max(0.0, busy - mine))   # the sums' rounding may pass the count


def free_cores() -> int:
    """Cores free for this process now (probed at most every PROBE_REUSE_S seconds; at least 1)."""
    global _probe
    now = time.monotonic()
    if _probe is None or now - _probe[0] > PROBE_REUSE_S:
        cores = len(allowed_cores())
        _probe = (now, plan_threads(cores, busy_cores()))
    return _probe[1]


def forget_probe() -> None:
    """Drop the last probe of the free cores, so that the next :func:`free_cores` measures again (the load changed,
    or a test stages another machine)."""
    global _probe
    _probe = None


def threads_fixed() -> bool:
    """Whether the environment fixes the thread count (``OMP_NUM_THREADS``, as a dask worker's): then it is kept."""
    return bool(os.environ.get("OMP_NUM_THREADS", "").strip())


@contextmanager
def cpu_threads(device):
    """While a CPU run lasts, torch uses one thread per free core (:func:`free_cores`); the count before is put back when
    the last run inside leaves (two runs in two threads share one setting); never more than torch's count at the start (its
    cores, or what the caller set). Nothing changes on a GPU, or where
    ``OMP_NUM_THREADS`` is set."""
    if getattr(device, "type", "cpu") != "cpu" or threads_fixed():
        yield
        return
    import torch

    def make() -> int:
        before = torch.get_num_threads()
        torch.set_num_threads(min(free_cores(), before))
        return before

    with _threads.held(make, torch.set_num_threads):
        yield


__all__ = ["allowed_cores", "plan_threads", "busy_cores", "free_cores", "forget_probe", "threads_fixed", "cpu_threads"]
