"""Where per-block work runs: in this process, or on a dask.distributed cluster (docs/cluster.md).

A :class:`Backend` runs one pure function over many small tasks. The function is the same wherever it
runs (a chunk's store path(s) and parameters in, a small record out; arrays travel as store paths), so
the in-process loop and a cluster give the same result. :func:`backend_for` picks the backend from the
arguments every entry point shares:

- nothing: :data:`LOCAL`, a loop in this process (no cluster is started);
- ``workers=N``: a ``distributed.LocalCluster`` of N worker processes on 127.0.0.1, started on first
  need and closed when the run ends;
- ``scheduler="tcp://host:8786"``: a running cluster (e.g. dask-jobqueue on SLURM), connected to at
  once — an address that cannot be reached is one sentence (:class:`~ticlust.errors.InputError`)
  before anything is written;
- ``client=``: a ``distributed.Client`` the caller made (and closes).

A worker lost mid-run (killed, out of memory, its node gone) is dask's to handle: the scheduler runs
its tasks again on another worker, so every task must be idempotent (a store part is committed by one
rename; a second commit of the same part finds it there). This module imports neither torch nor
distributed until a cluster is used.
"""
from __future__ import annotations

import abc
import os
import sys
import time
from typing import Any, Callable, Iterator, Sequence

from ..errors import InputError, whole_number

#: Seconds to wait for a scheduler at ``scheduler=ADDRESS`` before giving up.
CONNECT_TIMEOUT = 10.0
#: Seconds a stopped run waits for the tasks its workers are still running (they may be committing parts).
DRAIN_TIMEOUT = 60.0
#: What dask's nanny sets in the environment of every worker it spawns that ticlust's local clusters leave out:
#: glibc's 64 KiB trim threshold (dask's default, to hand freed memory back at once) also fixes glibc's mmap
#: threshold, so every buffer over 128 KiB that torch allocates is mapped and zeroed afresh — a part predicted
#: 3-4x slower than in this process (benchmarks/results/scale_workers.md). Set it (to None) in a running
#: cluster's dask config as well (docs/cluster.md).
WORKER_ENV_UNSET = {"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None}


def worker_environ(workers: int) -> dict:
    """The dask config that starts ``workers`` local worker processes: without dask's malloc trim setting
    (:data:`WORKER_ENV_UNSET`) and with each worker's share of the free cores (``cpus.free_cores``: the probe this
    process made last, when recent) as its torch / BLAS thread count (dask's default is 1,
    which leaves cores idle when there are more cores than workers), or ``OMP_NUM_THREADS`` as this process's
    environment sets it."""
    from .cpus import free_cores, plan_threads, threads_fixed

    threads = os.environ["OMP_NUM_THREADS"].strip() if threads_fixed() else plan_threads(free_cores(), 0.0, workers)
    prefix = "distributed.nanny.pre-spawn-environ."
    return {**WORKER_ENV_UNSET, **{prefix + name: threads for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS",
                                                                        "OPENBLAS_NUM_THREADS")}}


def local_cluster(workers: int, dashboard: str | None = "127.0.0.1:0"):
    """A ``distributed.LocalCluster`` of ``workers`` worker processes on 127.0.0.1, each running one task at a time
    with its share of the free cores as threads (:func:`worker_environ`). The nanny writes its pre-spawn variables
    (OMP_NUM_THREADS, ...) into this process's environment; they are put back as they were, so a later
    subprocess (or cluster) does not inherit them."""
    import dask
    from distributed import LocalCluster

    before = dict(os.environ)
    try:
        with dask.config.set(worker_environ(workers)):
            return LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, host="127.0.0.1",
                                dashboard_address=dashboard)
    finally:
        os.environ.clear()
        os.environ.update(before)


class Backend(abc.ABC):
    """Runs one pure function over many tasks. ``map(fn, tasks)`` returns ``[fn(t) for t in tasks]`` in
    task order. ``fn`` must be a pure, picklable function of its task (a chunk's store path(s) and
    parameters in, rows or arrays out, no globals changed) so that the in-process loop and a cluster
    call the very same function; large arrays travel as store paths, not as task arguments. A backend
    reports no progress of its own: :meth:`imap` hands back each task as it finishes, and the caller
    turns those into Progress records for its sink.

    :class:`LocalBackend` is the in-process loop; :class:`DaskBackend` (a LocalCluster or a scheduler
    address) implements the same methods."""

    name: str = ""

    @abc.abstractmethod
    def map(self, fn: Callable[[Any], Any], tasks: Sequence[Any]) -> list:
        """``fn`` applied to every task, the values in task order."""

    def imap(self, fn: Callable[[Any], Any], tasks: Sequence[Any]) -> Iterator[tuple[int, Any]]:
        """``(i, fn(tasks[i]))`` for every task, as each finishes (in any order). Closing the iterator
        early (the caller stops on an error) drops the tasks not yet started."""
        yield from enumerate(self.map(fn, tasks))

    def close(self) -> None:
        """Let go of what the backend started (a local cluster); the caller's own things stay."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class LocalBackend(Backend):
    """The default: a loop in this process, on the device the seam resolved."""

    name = "local"

    def map(self, fn, tasks):
        return [fn(task) for task in tasks]

    def imap(self, fn, tasks):
        for i, task in enumerate(tasks):
            yield i, fn(task)


LOCAL = LocalBackend()


class DaskBackend(Backend):
    """Tasks as ``distributed`` futures: submitted at once, collected with ``as_completed``.

    ``DaskBackend(client)`` uses a Client the caller made (and closes, unless ``own_client``). ``DaskBackend(workers=N)``
    starts a LocalCluster of N worker processes (one task at a time each) on 127.0.0.1 at the first
    :meth:`map` that has tasks, and :meth:`close` ends it. ``notice`` (a callable taking one line) is
    told the scheduler's and the dashboard's addresses when the cluster is first used."""

    name = "dask"

    def __init__(self, client=None, *, workers: int | None = None, notice: Callable[[str], None] | None = None,
                 own_client: bool = False):
        if (client is None) == (workers is None):
            raise ValueError("give a client or a number of workers")
        self.client, self.workers, self.notice, self.own_client = client, workers, notice, own_client
        self.cluster = None
        self.told = False

    def __repr__(self):
        return f"DaskBackend({self.client!r})" if self.cluster is None and self.workers is None else \
            f"DaskBackend(LocalCluster of {self.workers} worker processes)"

    # -- the cluster -------------------------------------------------------------------------------
    def _client(self):
        if self.client is None:
            from distributed import Client

            self.cluster = local_cluster(self.workers)
            self.client = Client(self.cluster)
        if not self.told and self.notice is not None:
            self.notice(describe_client(self.client))
        self.told = True
        return self.client

    def close(self) -> None:
        if self.cluster is not None:
            self.client.close()
            self.cluster.close()
            self.client = self.cluster = None
        elif self.own_client and self.client is not None:
            self.client.close()
            self.client = None

    # -- tasks -------------------------------------------------------------------------------------
    def map(self, fn, tasks):
        out = [None] * len(tasks)
        for i, value in self.imap(fn, tasks):
            out[i] = value
        return out

    def imap(self, fn, tasks):
        if not len(tasks):
            return
        from distributed import as_completed
        from distributed.scheduler import KilledWorker

        client = self._client()
        futures = client.map(fn, list(tasks), pure=False)
        index = {f.key: i for i, f in enumerate(futures)}
        finished = False
        try:
            for future in as_completed(futures):
                try:
                    value = future.result()
                except KilledWorker:
                    raise InputError(f"A task of {_name(fn)} ended {_allowed_failures(client)} workers in a row (each "
                                     "killed, or out of memory): give the workers more memory, then run the same "
                                     "command again to finish.") from None
                yield index[future.key], value
                future.release()
            finished = True
        finally:
            if not finished:
                pending = [f for f in futures if not f.done()]
                client.cancel(pending)
                _drain(client, [f.key for f in pending])


def _name(fn) -> str:
    return getattr(fn, "__name__", type(fn).__name__).strip("_")


def _allowed_failures(client) -> int:
    import dask

    return int(dask.config.get("distributed.scheduler.allowed-failures")) + 1


def _running(keys, dask_worker=None) -> list:
    """The keys of ``keys`` this worker is still running (cancelled tasks run on until they end)."""
    keys = set(keys)
    return [k for k, ts in dask_worker.state.tasks.items()
            if k in keys and ts.state in ("executing", "long-running", "cancelled", "resumed")]


def _drain(client, keys) -> None:
    """After a stop, wait (at most DRAIN_TIMEOUT) until no worker still runs one of our cancelled tasks:
    one may be committing a part, and the run must not let go of the store before it has."""
    if not keys or client.status != "running":
        return
    deadline = time.monotonic() + DRAIN_TIMEOUT
    while time.monotonic() < deadline:
        try:
            busy = client.run(_running, keys)
        except Exception:              # the cluster is going away: nothing more to wait for
            return
        if not any(busy.values()):
            return
        time.sleep(0.1)


def describe_client(client) -> str:
    """One line: how many workers, the scheduler's address and the dashboard's (or how to get one)."""
    info = client.scheduler_info()
    workers = info.get("workers", {})
    threads = sum(w.get("nthreads", 1) for w in workers.values())
    where = info.get("address", "?")
    try:
        import bokeh  # noqa: F401 - the dashboard is served only with bokeh installed

        board = f"dashboard {client.dashboard_link}"
    except ImportError:
        board = "no dashboard (pip install 'bokeh>=3.1' to serve one)"
    return f"dask cluster: {len(workers)} workers ({threads} threads), scheduler {where}, {board}"


def backend_for(workers: int | None = None, scheduler: str | None = None, client=None, *,
                notice: Callable[[str], None] | None = None, tasks: int | None = None) -> Backend:
    """The backend for a run: :data:`LOCAL` (nothing given), a LocalCluster of ``workers`` processes
    (at most ``tasks`` when given), a running cluster at ``scheduler``, or the caller's ``client``.
    Use it as a context manager: a cluster this call starts is closed when the run ends."""
    given = [name for name, v in (("workers", workers), ("scheduler", scheduler), ("client", client)) if v is not None]
    if len(given) > 1:
        raise InputError(f"Give one of {' and '.join(given)}, not both: workers starts a local cluster, scheduler or "
                         "client uses a running one.")
    if client is not None:
        if not hasattr(client, "map") or not hasattr(client, "scheduler_info"):
            raise InputError(f"client={client!r} is not a distributed.Client: pass one, or workers=N.")
        return DaskBackend(client, notice=notice)
    if scheduler is not None:
        return DaskBackend(connect(scheduler), notice=notice, own_client=True)
    if workers is None:
        return LOCAL
    workers = whole_number(workers, "workers", 1, "worker processes", none_means="in this process")
    if tasks is not None:
        workers = max(1, min(workers, int(tasks)))
    return DaskBackend(workers=workers, notice=notice)


def connect(address: str):
    """A Client on the running scheduler at ``address``; InputError in one sentence when it cannot be
    reached within CONNECT_TIMEOUT seconds: nothing listens there, the host is unknown, or what answers
    is not a dask scheduler (a silent port, another protocol). The whole handshake is bounded, not only
    the TCP connect (dask's own handshake read has no time limit), and a client that failed to start is
    let go at once (dask would otherwise spend 20 s closing it, with a traceback, when it is collected)."""
    address = _scheduler_address(address)
    try:
        return _bounded_client()(address, timeout=CONNECT_TIMEOUT, set_as_default=False)
    except Exception as exc:           # OSError, TimeoutError, ValueError; a MemoryError when another protocol answers
        raise InputError(f"Cannot reach the dask scheduler at {address} within {CONNECT_TIMEOUT:g} s ({_why(exc)}): "
                         "start it (dask scheduler) or give its address as tcp://HOST:PORT; nothing was written.") from None


def _scheduler_address(address) -> str:
    """``address`` stripped, or an InputError when it is no scheduler address (no host, no port, a port out of
    range, an unknown scheme)."""
    from distributed.comm.addressing import parse_address, parse_host_port

    address = str(address).strip()
    try:
        scheme, location = parse_address(address)
        if scheme in ("tcp", "tls", "ws", "wss"):
            host, port = parse_host_port(location)
            if not host or not 0 < int(port) < 65536:
                raise ValueError(location)
        elif scheme not in ("inproc", "ucx"):
            raise ValueError(scheme)
    except (ValueError, TypeError):
        raise InputError(f"{address!r} is not a dask scheduler address: give it as tcp://HOST:PORT (e.g. "
                         "tcp://127.0.0.1:8786).") from None
    return address


def _why(exc: Exception) -> str:
    """Why connecting failed, in a few words (dask's own message where it has a clear one)."""
    from distributed.comm import CommClosedError

    if isinstance(exc, TimeoutError) and not str(exc).startswith("Timed out trying to connect"):
        return "no dask scheduler answered"
    if isinstance(exc, CommClosedError):
        return "the connection was closed before a dask handshake"
    if isinstance(exc, (MemoryError, UnicodeError)) or (isinstance(exc, ValueError) and "tcp" not in str(exc).lower()):
        return "what answers there does not speak dask's protocol"
    return str(exc).split("\n")[0].strip() or type(exc).__name__


def _bounded_client():
    """``distributed.Client`` whose start (connect and handshake) ends within CONNECT_TIMEOUT seconds (and one more:
    dask's own connect timeout, which says more, comes first where it applies), and which,
    when its start fails, is marked closed and its event loop stopped, so that nothing lingers or waits."""
    from distributed import Client

    class BoundedClient(Client):
        def __init__(self, *args, **kwargs):
            try:
                super().__init__(*args, **kwargs)
            except BaseException:
                self.let_go()
                raise

        def start(self, **kwargs):
            return super().start(callback_timeout=CONNECT_TIMEOUT + 1, **kwargs)

        def let_go(self):
            self.status = "closed"
            runner = getattr(self, "_loop_runner", None)
            if runner is not None:
                runner.stop()

    return BoundedClient


def stderr_notice(line: str) -> None:
    """Print a notice line on standard error, as the command line prints its notes."""
    print(f"ticlust: {line}", file=sys.stderr, flush=True)


__all__ = ["Backend", "LocalBackend", "DaskBackend", "LOCAL", "backend_for", "connect", "describe_client",
           "local_cluster", "worker_environ", "CONNECT_TIMEOUT"]
