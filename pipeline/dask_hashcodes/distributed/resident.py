"""Data kept in the workers' memory between computations: a stored index's lists, which a
batch would otherwise read and regroup again for every batch, and the rows an iterative fit
passes over again and again (``kept_on_workers``).

``resident(name, content_id, blocks)`` computes the Delayed ``blocks`` once on the cluster
and keeps their results on the workers that computed them, as futures this process holds:
later graphs take those futures as inputs, the scheduler runs each task where its block
lives, and nothing is read from storage again. The blocks are registered under
(scheduler, name, content id): a second call with the same content returns the blocks
already held, and another content (a rebuilt index) never meets the old one's blocks.

A worker lost meanwhile loses its blocks; the scheduler recomputes them from their graph
(the storage reads) the next time a task needs them, as it recovers any lost result. Under
memory pressure the workers spill them to their local disk as they spill any data, and
``release`` (or ``release_resident`` for all of them) drops them on request. When the blocks would take more than a budget of the
workers' memory (the dask setting ``dhash.resident-memory-fraction`` of their summed
memory limits), nothing is kept: the caller streams from storage as before, and one log
line says so.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from dask_hashcodes import config
from dask_hashcodes.distributed.cluster import worker_info
from dask_hashcodes.distributed.progress import active_client

log = logging.getLogger(__name__)

_HELD: dict[tuple, ResidentBlocks] = {}


@dataclass
class ResidentBlocks:
    """Blocks held on the workers: ``futures`` (one per block, in the blocks' order) of
    ``nbytes`` in all, registered as ``key``."""

    key: tuple
    futures: list = field(repr=False)
    nbytes: int

    def by_worker(self) -> dict[str, dict]:
        """worker address -> {"blocks": how many, "bytes": their size} of what each holds now."""
        client = active_client()
        if client is None:
            return {}
        keys = [future.key for future in self.futures]
        sizes = client.nbytes(keys, summary=False)
        held: dict[str, dict] = {}
        for future_key, workers in client.who_has(self.futures).items():
            for worker in workers:
                entry = held.setdefault(worker, {"blocks": 0, "bytes": 0})
                entry["blocks"] += 1
                entry["bytes"] += int(sizes.get(future_key, 0))
        return held

    def release(self) -> None:
        """Drop the blocks: the workers free them once no running graph needs them."""
        _HELD.pop(self.key, None)
        self.futures = []


def resident_budget(client) -> int:
    """Bytes of worker memory resident blocks may take: the setting's fraction of the summed
    memory limits (a worker without a limit counts as none)."""
    fraction = float(config.get("resident-memory-fraction"))
    limits = [info.get("memory_limit") or 0 for info in worker_info(client).values()]
    return int(fraction * sum(limits))


def fits_budget(client, nbytes: int, name: str, what: str, otherwise: str) -> bool:
    """Whether ``nbytes`` of ``what`` fit the workers' budget (``resident_budget``); when they
    do not, one log line says so and what happens ``otherwise``."""
    budget = resident_budget(client)
    if nbytes <= budget:
        return True
    log.info(
        "%s: %.2f GB of %s would exceed %.2f GB of worker memory (dhash.resident-memory-fraction): %s",
        name, nbytes / 1e9, what, budget / 1e9, otherwise,
    )  # fmt: skip
    return False


def resident(name: str, content_id: str, blocks: list, nbytes: int, *, client=None) -> ResidentBlocks | None:
    """The Delayed ``blocks`` (about ``nbytes`` in all) computed once and held on the workers,
    registered under (the client's scheduler, ``name``, ``content_id``); the blocks held
    already when registered before. None when there is no distributed client or they would
    not fit the budget: the caller then computes from storage per batch."""
    client = client or active_client()
    if client is None:
        return None
    held = held_blocks(name, content_id, client=client)
    if held is not None:
        return held
    key = (client.scheduler.address, name, content_id)
    if not fits_budget(client, nbytes, name, "blocks", "streamed from storage for every batch"):
        return None
    # block i goes to the i-th worker thread in turn, so that equal blocks make equal work per
    # thread (the scheduler would put them wherever a thread was free first); another worker
    # may take a block over when its own is lost or busy
    slots = worker_slots(client)
    futures = [
        client.compute(block, workers=[slots[i % len(slots)]], allow_other_workers=True) if slots
        else client.compute(block)  # the scheduler did not answer: it places them itself
        for i, block in enumerate(blocks)
    ]  # fmt: skip
    held = _HELD[key] = ResidentBlocks(key, futures, nbytes)
    return held


def worker_slots(client) -> list[str]:
    """The workers' addresses, each repeated once per thread, in address order."""
    workers = worker_info(client)
    return [address for address in sorted(workers) for _ in range(max(1, int(workers[address].get("nthreads", 1))))]


def kept_on_workers(X, name: str, *, client=None):
    """The dask array ``X`` computed once and held on the workers (``client.persist``), so that
    an iterative computation's passes read memory, not storage; ``X`` itself, streamed from
    storage by every pass, when there is no distributed client or it would not fit the
    budget (one log line says so). The persisted array is freed when the caller drops it."""
    client = client or active_client()
    if client is None:
        return X
    if not fits_budget(client, X.nbytes, name, "rows", "every pass reads them from storage"):
        return X
    return client.persist(X)


def held_blocks(name: str, content_id: str, *, client=None) -> ResidentBlocks | None:
    """The blocks registered under ``name`` and ``content_id`` on the client's cluster, or None
    (never computes them)."""
    client = client or active_client()
    if client is None:
        return None
    held = _HELD.get((client.scheduler.address, name, content_id))
    if held is None or not held.futures or any(f.status in ("error", "cancelled") for f in held.futures):
        return None  # a block that failed (storage unreadable then) is computed again, never kept
    return held


def resident_report() -> dict[str, dict]:
    """What each worker of the current client's cluster holds: worker address -> {"blocks",
    "bytes"} summed over every registered set of blocks (the dashboard's memory view shows
    them under their names: ivf-lists-...)."""
    client = active_client()
    held: dict[str, dict] = {}
    for key, blocks in list(_HELD.items()):
        if client is None or key[0] != client.scheduler.address:
            continue
        for worker, entry in blocks.by_worker().items():
            total = held.setdefault(worker, {"blocks": 0, "bytes": 0})
            total["blocks"] += entry["blocks"]
            total["bytes"] += entry["bytes"]
    return held


def release_resident() -> None:
    """Drop every block this process holds on any cluster."""
    for held in list(_HELD.values()):
        held.release()
