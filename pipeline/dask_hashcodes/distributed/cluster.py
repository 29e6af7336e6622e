"""Cluster bootstrap: --scheduler ADDRESS, then $DASK_SCHEDULER_ADDRESS, then a LocalCluster."""

from __future__ import annotations

import contextlib
import logging
import os
import sys

from dask_hashcodes import config
from dask_hashcodes.errors import InputError
from dask_hashcodes.storage.atomic import FILE_MARK, atomic_output, remove_stopped_temporaries

log = logging.getLogger(__name__)

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


WARM_KERNELS_VARIABLE = "DHASH_WARM_KERNELS"  # kernel families a worker loads at start-up (dask_setup)


def worker_environ(warm: tuple[str, ...] = ()) -> dict:
    """Environment of worker processes: dask's defaults minus MALLOC_TRIM_THRESHOLD_.

    Setting that variable switches off glibc's adaptive mmap threshold, so every buffer of
    a chunk (compressed bytes, decoded chunk, float32 slabs: MBs each) is a fresh mmap that
    is page-faulted in and unmapped again, which slows every chunk read and every DisH/ITQ pass.
    Our tasks allocate
    the same few chunk-sized buffers over and over, so glibc's default reuse is what we
    want; the BLAS/OpenMP thread caps (1 thread per worker thread) stay."""
    import dask

    environ = dict(dask.config.get("distributed.nanny.pre-spawn-environ", {}))
    environ.pop("MALLOC_TRIM_THRESHOLD_", None)
    if warm:
        environ[WARM_KERNELS_VARIABLE] = ",".join(warm)
    return environ


def connect(
    scheduler: str | None = None,
    *,
    workers: int | None = None,
    threads: int | None = None,
    quiet: bool = False,
    memory_limit: str = "auto",
    warm: tuple[str, ...] = (),
):
    """Return a distributed Client (and make it the default scheduler for dask).

    ``scheduler`` wins, then the DASK_SCHEDULER_ADDRESS environment variable, then dask's
    ``dhash.scheduler`` setting, else an embedded LocalCluster of ``workers`` processes x
    ``threads`` threads (default: sized from the cores, see ``default_shape``), whose workers
    load the compiled kernels named in ``warm`` ("mih") as they start, beside the scan's. The
    dashboard link is printed on stderr so it shows up in job logs and notebooks alike.
    """
    from distributed import Client, LocalCluster

    _quiet_abandoned_gathers()
    address = scheduler or os.environ.get("DASK_SCHEDULER_ADDRESS") or config.get("scheduler")
    if address:
        check_address(address)
        try:
            client = Client(address, timeout="20s")
        except OSError as exc:
            raise InputError(
                f"cannot reach the Dask scheduler at {address} ({exc}); check the address or drop `scheduler` to run a local cluster"
            ) from None
        where = f"scheduler {address}"
    else:
        import dask

        auto_workers, auto_threads = default_shape()
        workers, threads = workers or auto_workers, threads or auto_threads
        cluster = None
        try:
            with (
                dask.config.set({"distributed.nanny.pre-spawn-environ": worker_environ(warm)}),
                _workers_ignore_interrupts(),
            ):
                cluster = LocalCluster(
                    n_workers=workers,
                    threads_per_worker=threads,
                    processes=True,
                    dashboard_address="127.0.0.1:0",
                    memory_limit=memory_limit,
                    silence_logs=40,
                    preload=[__name__],  # dask_setup below, in every worker process as it starts
                )
            client = Client(cluster)
        except BaseException:  # Ctrl-C while it started (delivered once it runs): no cluster left behind
            if cluster is not None:
                with contextlib.suppress(BaseException):
                    cluster.close()
            raise
        where = f"local cluster {workers} workers x {threads} threads"
    if not quiet:
        print(f"dask: {where}; {dashboard_message(client.dashboard_link)}", file=sys.stderr)
    return client


def dashboard_message(link: str | None) -> str:
    """The dashboard link, and how to open it from another machine: it listens on the
    scheduler's host (a local cluster's on 127.0.0.1 only), so a browser elsewhere reaches
    it through an ssh tunnel to that port."""
    from urllib.parse import urlsplit

    if not link:
        return "no dashboard"
    parts = urlsplit(link)
    if parts.port is None:
        return f"dashboard {link}"
    host = parts.hostname or "localhost"
    if host in ("127.0.0.1", "localhost", "::1", "0.0.0.0"):
        import socket

        host = socket.gethostname()  # the tunnel goes to this machine
    local = parts._replace(netloc=f"localhost:{parts.port}").geturl()
    return (
        f"dashboard {link} (on a remote machine: ssh -L {parts.port}:localhost:{parts.port} {host}, then open {local})"
    )


def check_address(address: str) -> None:
    """InputError naming the problem when ``address`` is no scheduler address at all (no
    port, an unknown scheme): distributed would raise a ValueError deep in its comm layer."""
    from distributed.comm import get_address_host_port

    try:
        get_address_host_port(address)
    except ValueError as exc:
        raise InputError(
            f"`scheduler` {address!r} is not a Dask scheduler address ({exc}); give one like "
            "tcp://HOST:8786, or drop `scheduler` to run a local cluster"
        ) from None


@contextlib.contextmanager
def _workers_ignore_interrupts():
    """Ctrl-C in a terminal reaches every process of the foreground job, the local cluster's
    worker processes too: each would die with a KeyboardInterrupt traceback of its event loop
    over the client's one-line message. SIGINT is blocked in this thread while the cluster
    starts: the threads it starts inherit that mask, and so do the worker processes they
    start (a blocked signal stays blocked across exec; ``dask_setup`` then ignores it), while
    a Ctrl-C meanwhile stays pending for the client and interrupts it as soon as the cluster
    runs (ignoring the signal instead would lose it)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    # multiprocessing starts its resource tracker on the first process start, in the starting
    # thread, and unblocks SIGINT there afterwards: the worker processes started next would
    # then take a Ctrl-C during their first imports (a traceback). Started now, before the
    # block, it leaves the mask alone.
    from multiprocessing import resource_tracker

    resource_tracker.ensure_running()
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


class _DropRecords(logging.Filter):
    """Drops log records that are expected, not failures (see their users below)."""

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


def _is_abandoned_gather(record) -> bool:
    from distributed.client import AllExit

    return bool(record.exc_info) and isinstance(record.exc_info[1], AllExit)


_ABANDONED_GATHERS = _DropRecords(_is_abandoned_gather)


def _quiet_abandoned_gathers() -> None:
    """A gather interrupted by Ctrl-C (or an error) leaves distributed's per-key wait tasks
    ending in AllExit, its internal "stop waiting" signal, which nobody awaits any more:
    asyncio logs a "Task exception was never retrieved" traceback for each. They are not
    errors; drop exactly those records (once per process)."""
    asyncio_log = logging.getLogger("asyncio")
    if _ABANDONED_GATHERS not in asyncio_log.filters:
        asyncio_log.addFilter(_ABANDONED_GATHERS)


def _is_failed_heartbeat(record) -> bool:
    return record.getMessage().startswith("Failed to communicate with scheduler during heartbeat")


def dask_setup(worker) -> None:
    """Set-up of each worker process of the embedded cluster (its preload: distributed runs
    it in the process before the worker joins the scheduler, also in one a nanny starts
    again), so that no moment of the worker's life escapes it:

    - SIGINT is ignored (see ``_workers_ignore_interrupts``): the client handles Ctrl-C and
      closes the workers;
    - a task that raises InputError (a missing or damaged chunk, bad data) is the user's
      one-line error, printed once by the command: the worker's own "Compute Failed"
      traceback of it on the same terminal is dropped;
    - a heartbeat that fails is dropped: the scheduler lives in the command's process, so it
      fails only while that process closes the cluster (after an interruption the worker can
      outlive the scheduler by a heartbeat) or while a busy machine delays the answer, and a
      slow heartbeat is no lost worker; the command reports the job's outcome itself;
    - a background thread imports zarr and its codecs and runs the 64-bit scan kernel once
      (and multi-index hashing's, when ``connect`` was asked to warm them). The first
      compiled kernel a process runs costs it about a second (numba sets up its compiler
      and loads the cached code), and the first chunk read imports zarr; paid here, both
      overlap the client's own start-up (opening stores, reading metadata) instead of
      delaying the job's first tasks.
    """
    import signal
    import threading

    if threading.current_thread() is threading.main_thread():  # a worker process, not a thread of ours
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    worker_log = logging.getLogger("distributed.worker")
    worker_log.addFilter(_DropRecords(_is_input_error_report))
    worker_log.addFilter(_DropRecords(_is_failed_heartbeat))
    threading.Thread(target=_run_a_kernel, name="dhash-warm-kernels", daemon=True).start()


def _run_a_kernel() -> None:
    import numpy as np
    import zarr  # noqa: F401 - imported for its start-up cost (see dask_setup)
    from numcodecs import Zstd  # noqa: F401

    from dask_hashcodes.kernels.hamming import hamming_topk

    code = np.zeros((1, 8), np.uint8)  # 64 bits: the word type of most codes
    ids = np.zeros(1, np.int64)
    hamming_topk(code, ids, queries=code, k=1)
    if "mih" in os.environ.get(WARM_KERNELS_VARIABLE, "").split(","):
        from dask_hashcodes.kernels.mih import build_tables, mih_topk

        mih_topk(code, ids, build_tables(code, 64, 4), queries=code, k=1, n_bits=64)


def disconnect(client) -> None:
    """Close a client from ``connect`` and the local cluster it started, if any; a cluster
    reached by address keeps running for its other users.

    Closing happens after the job's outcome is decided, so it never changes that outcome:
    a close that times out or fails (a busy machine can be slower than distributed's close
    timeouts) is one warning line, and the processes of a local cluster end with this one."""
    cluster = getattr(client, "cluster", None)
    problems = []
    try:
        client.close()
    except Exception as exc:  # noqa: BLE001 - see the docstring
        problems.append(f"client: {_describe(exc)}")
    if cluster is not None:
        # a progress bar's scheduler feed sleeps up to its interval after the bar ends; closing
        # the scheduler cancels that sleep and logs a CancelledError traceback on every
        # successful job. It is not an error: drop exactly that record while closing.
        quiet = _DropRecords(_is_cancelled_feed)
        logger = logging.getLogger("distributed.scheduler")
        logger.addFilter(quiet)
        try:
            cluster.close()
        except Exception as exc:  # noqa: BLE001 - see the docstring
            problems.append(f"local cluster: {_describe(exc)}")
        finally:
            logger.removeFilter(quiet)
        # no task of a job that stopped can write any more: what one wrote into the job's
        # temporary after it was removed (and was then ended by the close) goes now
        remove_stopped_temporaries()
    if problems:
        log.warning(
            "warning: closing the Dask cluster did not finish cleanly (%s); the job's result stands",
            "; ".join(problems),
        )


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


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


SCHEDULER_ANSWER_SECONDS = 30  # how long a question to the scheduler may take on a busy machine


def _ask_scheduler(client, timeout: float) -> dict:
    # the scheduler's identity asked now, with every worker. Not client.scheduler_info(): that
    # returns the client's cached copy, which a periodic refresh overwrites with one that has
    # no per-worker entries, and which stays stale when a refresh fails.
    return client.sync(client.scheduler.identity, n_workers=-1, callback_timeout=timeout)


def scheduler_workers(client, timeout: float = SCHEDULER_ANSWER_SECONDS) -> dict | None:
    """Address -> the scheduler's description of every worker it lists now, or None when
    there is no trustworthy answer: the call failed or timed out, or the answer's per-worker
    entries do not add up to its worker count. None means "unknown", never "no workers"."""
    try:
        info = _ask_scheduler(client, timeout)
    except Exception as exc:  # noqa: BLE001 - a busy or reconnecting scheduler: the caller asks again
        log.debug("no answer from the Dask scheduler: %s", _describe(exc))
        return None
    workers = info.get("workers") if isinstance(info, dict) else None
    if not isinstance(workers, dict) or info.get("n_workers", len(workers)) != len(workers):
        return None
    return workers


def worker_info(client) -> dict:
    """Address -> the scheduler's description of every worker alive now (empty when the
    scheduler does not answer)."""
    workers = scheduler_workers(client)
    return {} if workers is None else workers


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


REPORT_KIND = "performance-report"


@contextlib.contextmanager
def performance_report(path, *, overwrite: bool = False):
    """Dask's performance report of everything the job computes, written atomically: a
    failed job leaves no report (and no half-written file) behind. The file ends with
    dhash's mark, so a later ``overwrite`` may replace it and nothing else."""
    if not path:
        yield
        return
    from distributed import performance_report as dask_report

    with atomic_output(path, kind=REPORT_KIND, overwrite=overwrite, file=True) as tmp:
        with dask_report(filename=str(tmp)):
            yield
        tmp.write_bytes(tmp.read_bytes() + ("\n" + FILE_MARK.format(kind=REPORT_KIND) + "\n").encode())
