"""Cluster bootstrap: --scheduler ADDRESS, then $DASK_SCHEDULER_ADDRESS, then a LocalCluster."""

from __future__ import annotations

import contextlib
import logging
import os
import sys

from pipeline import config
from pipeline.errors import InputError
from pipeline.storage.atomic import atomic_output

MAX_DEFAULT_WORKERS = 8  # beyond this, more threads per worker: memory per worker stays useful


def available_cores() -> int:
    """CPUs this process may run on (its affinity mask: what a container or SLURM grants)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def default_shape(cores: int | None = None) -> tuple[int, int]:
    """(worker processes, threads each) of a local cluster: one single-threaded process per
    core up to 8 (our kernels hold the GIL in parts, so processes scale best), then more
    threads per process. 2 cores -> 2 x 1; 16 -> 8 x 2; 64 -> 8 x 8."""
    cores = max(1, cores or available_cores())
    workers = min(cores, MAX_DEFAULT_WORKERS)
    return workers, max(1, cores // workers)


def worker_environ() -> dict:
    """Environment of worker processes: dask's defaults minus MALLOC_TRIM_THRESHOLD_.

    Setting that variable switches off glibc's adaptive mmap threshold, so every buffer of
    a chunk (compressed bytes, decoded chunk, float32 slabs: MBs each) is a fresh mmap that
    is page-faulted in and unmapped again, which slows every chunk read (a DisH/ITQ pass
    took up to 1.8x longer, Nov 2026, 2-core Xeon VM). Our tasks allocate
    the same few chunk-sized buffers over and over, so glibc's default reuse is what we
    want; the BLAS/OpenMP thread caps (1 thread per worker thread) stay."""
    import dask

    environ = dict(dask.config.get("distributed.nanny.pre-spawn-environ", {}))
    environ.pop("MALLOC_TRIM_THRESHOLD_", None)
    return environ


def connect(
    scheduler: str | None = None,
    *,
    workers: int | None = None,
    threads: int | None = None,
    quiet: bool = False,
    memory_limit: str = "auto",
):
    """Return a distributed Client (and make it the default scheduler for dask).

    ``scheduler`` wins, then the DASK_SCHEDULER_ADDRESS environment variable, then dask's
    ``dhash.scheduler`` setting, else an embedded LocalCluster of ``workers`` processes x
    ``threads`` threads (default: sized from the cores, see ``default_shape``). The dashboard
    link is printed on stderr so it shows up in job logs and notebooks alike.
    """
    from distributed import Client, LocalCluster

    address = scheduler or os.environ.get("DASK_SCHEDULER_ADDRESS") or config.get("scheduler")
    if address:
        try:
            client = Client(address, timeout="20s")
        except OSError as exc:
            raise InputError(
                f"cannot reach the Dask scheduler at {address} ({exc}); check the address or drop --scheduler to run a local cluster"
            ) from None
        where = f"scheduler {address}"
    else:
        import dask

        auto_workers, auto_threads = default_shape()
        workers, threads = workers or auto_workers, threads or auto_threads
        with dask.config.set({"distributed.nanny.pre-spawn-environ": worker_environ()}):
            cluster = LocalCluster(
                n_workers=workers,
                threads_per_worker=threads,
                processes=True,
                dashboard_address="127.0.0.1:0",
                memory_limit=memory_limit,
                silence_logs=40,
            )
        client = Client(cluster)
        client.register_plugin(QuietInputErrors())
        where = f"local cluster {workers} workers x {threads} threads"
    if not quiet:
        print(f"dask: {where}; dashboard {client.dashboard_link}", file=sys.stderr)
    return client


class _DropRecords(logging.Filter):
    """Drops log records that are expected, not failures (see the two users below)."""

    def __init__(self, test):
        super().__init__()
        self.test = test

    def filter(self, record) -> bool:
        try:
            return not self.test(record)
        except Exception:  # noqa: BLE001 - a filter must never break logging
            return True


def _is_input_error_report(record) -> bool:
    message = record.getMessage()
    return "Compute Failed" in message and "InputError(" in message


def _is_cancelled_feed(record) -> bool:
    import asyncio

    return bool(record.exc_info) and isinstance(record.exc_info[1], asyncio.CancelledError)


def _worker_plugin_base():
    from distributed.diagnostics.plugin import WorkerPlugin

    return WorkerPlugin


class QuietInputErrors(_worker_plugin_base()):
    """Worker plugin of the embedded cluster: a task that raises InputError (a missing or
    damaged chunk, bad data) is the user's one-line error, printed once by the CLI; the
    worker's own "Compute Failed" traceback of it on the same terminal is dropped."""

    name = "dhash-quiet-input-errors"
    idempotent = True

    def setup(self, worker):
        logging.getLogger("distributed.worker").addFilter(_DropRecords(_is_input_error_report))


def disconnect(client) -> None:
    """Close a client from ``connect`` and the local cluster it started, if any; a cluster
    reached by address keeps running for its other users."""
    cluster = getattr(client, "cluster", None)
    client.close()
    if cluster is not None:
        # a progress bar's scheduler feed sleeps up to its interval after the bar ends; closing
        # the scheduler cancels that sleep and logs a CancelledError traceback on every
        # successful job. It is not an error: drop exactly that record while closing.
        quiet = _DropRecords(_is_cancelled_feed)
        logger = logging.getLogger("distributed.scheduler")
        logger.addFilter(quiet)
        try:
            cluster.close()
        finally:
            logger.removeFilter(quiet)


def cluster_shape(client=None) -> dict:
    """Workers and threads of the active cluster (for reports)."""
    if client is None:
        try:
            from distributed import get_client

            client = get_client()
        except (ImportError, ValueError):
            return {"workers": 0, "threads": 0, "scheduler": "local-threads"}
    threads = [w["nthreads"] for w in worker_info(client).values()]
    return {"workers": len(threads), "threads": int(sum(threads)), "scheduler": client.scheduler.address}


def worker_info(client) -> dict:
    """Address -> the scheduler's description of every worker alive now."""
    try:
        return client.scheduler_info(n_workers=-1)["workers"]  # newer distributed lists only a few workers by default
    except TypeError:
        return client.scheduler_info()["workers"]


def cluster_memory_bytes() -> int:
    """Total memory limit of the distributed workers (else this machine's RAM)."""
    try:
        from distributed import get_client

        client = get_client()
        limits = [w.get("memory_limit") or 0 for w in worker_info(client).values()]
        if limits and all(limits):
            return int(sum(limits))
    except (ImportError, ValueError):
        pass
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


@contextlib.contextmanager
def performance_report(path):
    """Dask's performance report of everything the job computes, written atomically: a
    failed job leaves no report (and no half-written file) behind."""
    if not path:
        yield
        return
    from distributed import performance_report as dask_report

    with atomic_output(path, kind="file", overwrite=True, file=True) as tmp, dask_report(filename=str(tmp)):
        yield
