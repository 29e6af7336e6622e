"""DisH "nodes" on a Dask cluster: which rows a node holds and which worker computes them.

A node's data is a list of row blocks whose read tasks are its own (see ``node_pieces``);
they run, with everything computed from them, on the node's worker: feature chunks never
travel. With at least as many workers as nodes every node has a
worker of its own; otherwise nodes are placed round-robin. Without a distributed client
the same calls run in-process (useful for numpy input and tests).
"""

from __future__ import annotations

import itertools
import logging
import time

import numpy as np
from dask.base import tokenize

from dask_hashcodes.distributed import cluster
from dask_hashcodes.distributed.graph import (
    InlineRead,
    chunk_reads,
    combine_in_tree,
    compact_rows,
    map_reduce,
    reduction_fan_in,
    row_bounds,
    take_rows,
)
from dask_hashcodes.distributed.resident import fits_budget
from dask_hashcodes.errors import InputError, shape_words

log = logging.getLogger(__name__)

PARTITIONS = ("contiguous", "random", "by-label")


# The random partition deals row blocks, not single rows, so that a node's rows stay a few
# [start, stop) runs (small tasks, contiguous reads). A block holds 65536 rows when the data
# is large, fewer when n is small, so that every node gets at least 8 blocks (any n >= nodes
# works). The size depends on n and the node count only, never on the storage chunking.
RANDOM_BLOCK_ROWS = 65536
MIN_BLOCKS_PER_NODE = 8


def random_block_rows(n: int, n_nodes: int) -> int:
    """Rows per block of the random partition of n rows over n_nodes nodes."""
    return max(1, min(RANDOM_BLOCK_ROWS, n // (n_nodes * MIN_BLOCKS_PER_NODE)))


def partition_rows(X, n_nodes: int, partition: str, seed: int, y=None) -> list[np.ndarray]:
    """Sorted row numbers of each node, independent of how the data is chunked.

    contiguous: equal consecutive row ranges; random: blocks of ``random_block_rows`` rows
    dealt to nodes in a seeded random order (equal block counts, +-1); by-label: the sorted
    classes split into ``n_nodes`` groups, node i holding every row of its classes (the
    non-iid case).
    """
    n = X.shape[0]
    if partition == "by-label":
        if y is None:
            raise InputError("partition='by-label' needs labels: call fit(X, y) or use a dataset with labels")
        y = np.asarray(y)
        if y.ndim != 1 or len(y) != n:
            raise InputError(f"by-label partition needs one class label per row ({n}); got {shape_words(y.shape)}")
        classes = np.unique(y)
        if len(classes) < n_nodes:
            raise InputError(
                f"by-label partition of {len(classes)} classes over {n_nodes} nodes leaves nodes empty; use at most {len(classes)} nodes"
            )
        return [np.flatnonzero(np.isin(y, g)).astype(np.int64) for g in np.array_split(classes, n_nodes)]
    if partition not in ("contiguous", "random"):
        raise InputError(f"unknown partition {partition!r}; use one of {', '.join(PARTITIONS)}")
    if n < n_nodes:
        raise InputError(f"{n} training rows cannot be spread over {n_nodes} nodes; use fewer nodes")
    if partition == "contiguous":
        return [np.arange(r[0], r[-1] + 1, dtype=np.int64) for r in np.array_split(np.arange(n), n_nodes)]
    block = random_block_rows(n, n_nodes)
    order = np.random.default_rng(seed).permutation(-(-n // block))  # at least n_nodes blocks
    return [
        np.sort(np.concatenate([np.arange(b * block, min(n, (b + 1) * block)) for b in blocks])).astype(np.int64)
        for blocks in np.array_split(order, n_nodes)
    ]


def _groups_from_runs(positions, *, run_starts, run_nodes):
    return run_nodes[np.searchsorted(run_starts, positions, side="right") - 1]


def node_groups(node_rows: list[np.ndarray], row_chunks: tuple):
    """int64 dask array (chunked like ``row_chunks``): the node holding each row.

    Partitions deal whole row ranges, so the groups are a few runs, and each chunk is
    rebuilt from them in its own task; the 8-byte-per-row array (80 MB at 10M rows) only
    goes into the graph when the runs are not fewer (by-label partitions)."""
    import dask.array as da

    n = sum(map(len, node_rows))
    runs = [compact_rows(rows) for rows in node_rows]
    if any(r.ndim != 2 for r in runs):
        groups = np.empty(n, np.int64)
        for node, rows in enumerate(node_rows):
            groups[rows] = node
        return da.from_array(groups, chunks=(tuple(row_chunks),))
    starts = np.concatenate([r[:, 0] for r in runs])
    nodes = np.concatenate([np.full(len(r), node, np.int64) for node, r in enumerate(runs)])
    order = np.argsort(starts)
    positions = da.arange(n, chunks=(tuple(row_chunks),), dtype=np.int64)
    return positions.map_blocks(_groups_from_runs, run_starts=starts[order], run_nodes=nodes[order], dtype=np.int64)


def node_chunk_rows(X, node_rows: list[np.ndarray]) -> list[list[tuple]]:
    """Per node, (chunk number, the node's rows of that chunk) for every chunk holding some:
    None for the whole chunk, else positions inside it or their compact_rows runs."""
    bounds = row_bounds(X)
    out = []
    for node, rows in enumerate(node_rows):
        if len(rows) == 0:
            raise InputError(f"node {node} holds no rows; use fewer nodes")
        cut = np.searchsorted(rows, bounds)
        entries = []
        for c in range(len(bounds) - 1):
            local = rows[cut[c] : cut[c + 1]] - bounds[c]
            if len(local):
                entries.append((c, None if len(local) == bounds[c + 1] - bounds[c] else compact_rows(local)))
        out.append(entries)
    return out


def node_pieces(X, node_rows: list[np.ndarray]) -> list[list]:
    """Per node, the chunk inputs of its row blocks for ``map_chunks``.

    For storage-backed arrays each piece is an InlineRead of its chunk (with the node's
    rows of it), so node i's reads run inside node i's own tasks, on its worker, and
    feature chunks never travel. An in-memory array (numpy wrapped by dask) already lives
    in the graph; its pieces select rows from the shared chunks instead.
    """
    from dask import delayed

    reads = chunk_reads(X)
    token = tokenize(X)
    return [
        [
            reads[c].with_rows(local) if isinstance(reads[c], InlineRead)
            else delayed(_select, pure=True)(reads[c], local, dask_key_name=f"dish-rows-{token}-{node}-{c}")
            for c, local in entries
        ]
        for node, entries in enumerate(node_chunk_rows(X, node_rows))
    ]  # fmt: skip


def _select(block, local_rows):
    return take_rows(block, local_rows)


def _loaded(pieces: list) -> tuple:
    """One task on a node's worker: its pieces read from storage (each chunk's rows of the node)."""
    return tuple(piece.load() if isinstance(piece, InlineRead) else piece for piece in pieces)


def _reduced_block(pieces, fn, combine, fan_in, *args):
    """One task on a node's worker: ``fn`` over each held piece, combined as ``tree_reduce``
    combines the streamed pieces' results (so both give the same bytes)."""
    return combine_in_tree([fn(piece, *args) for piece in pieces], combine, fan_in)


def _reduced_blocks(blocks, fn, combine, fan_in, args_per_node):
    """One task on a worker: ``_reduced_block`` of each node it holds, in node order."""
    return [_reduced_block(pieces, fn, combine, fan_in, *args) for pieces, args in zip(blocks, args_per_node)]


class NodeData:
    """The rows of every node of an iterative fit, held on the node's worker when they fit
    the workers' memory budget (distributed.resident: the dask setting
    ``dhash.resident-memory-fraction``), as the paper's machines hold their local data.

    Held: each node reads its pieces (its rows of each chunk) once, on its own worker, and
    keeps them there in the stored dtype; every later pass (``reduce``) is one task per node
    over the pieces in its memory, and reads no storage. A chunk is read once by each node
    holding rows of it (once in all when the partition is contiguous, save the chunks two
    nodes share); no row ever travels between workers. Streamed (no distributed client, or
    over the budget, said in one log line): every pass reads the node's pieces from storage,
    in its own tasks on its worker.

    Both give the same bytes: the same pieces, the same kernels, combined in the same tree
    (``combine_in_tree``). After a worker loss the runner re-places the nodes, and
    ``refresh`` reads again only the pieces of nodes whose worker changed."""

    def __init__(self, runner: NodeRunner, X, node_rows: list[np.ndarray], name: str):
        self.runner, self.name = runner, name
        self.pieces = node_pieces(X, node_rows)
        self.fan_in = reduction_fan_in()
        self.token = tokenize(X, node_rows)
        self.blocks: list = [None] * len(node_rows)
        self.held_on: list = [None] * len(node_rows)
        self.generation = 0
        nbytes = sum(map(len, node_rows)) * X.shape[1] * X.dtype.itemsize
        self.held = self._fits(nbytes)

    def _fits(self, nbytes: int) -> bool:
        client = self.runner.client
        if client is None:
            return False
        if not fits_budget(client, nbytes, self.name, "node rows", "every iteration reads them from storage"):
            return False
        log.info("%s: %.2f GB of node rows held on the nodes' workers, read from storage once", self.name, nbytes / 1e9)
        return True

    def refresh(self) -> None:
        """Read the pieces of the nodes that hold none on their worker now: at the start, or
        after a worker loss moved them."""
        if not self.held:
            return
        from dask import delayed

        runner = self.runner
        # a block not finished by now was being read when a worker died: it is read again,
        # like a moved one
        stale = [
            i for i in range(len(self.blocks))
            if self.blocks[i] is None or self.held_on[i] != runner.placement[i] or self.blocks[i].status != "finished"
        ]  # fmt: skip
        if stale:
            self.generation += 1
        for i in stale:
            block = delayed(_loaded, pure=True)(
                self.pieces[i], dask_key_name=f"{self.name}-node-rows-{self.token}-{self.generation}-{i}"
            )
            self.blocks[i] = runner.compute(i, block)
            self.held_on[i] = runner.placement[i]

    def reduce(self, node: int, name: str, fn, combine, *args):
        """``fn(piece, *args)`` over node ``node``'s rows, combined with ``combine``: a future
        on the node's worker (the value itself without a client)."""
        if self.held:
            return self.runner.submit(node, name, _reduced_block, self.blocks[node], fn, combine, self.fan_in, *args)
        return self.runner.compute(
            node, map_reduce(name, fn, combine, self.pieces[node], *args, salt=self.runner.attempt)
        )

    def reduce_group(self, nodes: list[int], name: str, fn, combine, args_per_node: list[tuple]):
        """``reduce`` of each of ``nodes`` (nodes placed on one worker, ``NodeRunner.groups``),
        node i with its own ``args_per_node[i]``: held, one task on that worker for all of
        them (a future of their list: each task costs the scheduler a round of messages, and
        on a small data set those rounds, not the math, set the pace); streamed, one
        computation per node as ``reduce`` gives (a list of futures). The same bytes either way."""
        if self.held:
            blocks = [self.blocks[i] for i in nodes]
            return self.runner.submit(nodes[0], name, _reduced_blocks, blocks, fn, combine, self.fan_in, args_per_node)
        return [self.reduce(i, name, fn, combine, *args) for i, args in zip(nodes, args_per_node)]


class WorkerLost(RuntimeError):
    """A worker holding nodes left the cluster while their tasks were pending."""


MAX_REPLACEMENTS = 5  # worker losses one step survives before the error is raised
WATCH_SECONDS = 0.5  # how often a waiting gather checks that the nodes' workers are alive
LOSS_GRACE_SECONDS = 2.0  # a worker counts as lost once the scheduler has left it out this long
PLACE_SECONDS = 60  # how long placing the nodes waits for a usable answer from the scheduler


class NodeRunner:
    """Runs each node's tasks on its worker (pinned) or, without a client, in-process.

    Pinned means ``allow_other_workers=False``: a node's chunk reads and passes run on its
    worker only, so the data a node holds is only ever read there. A pinned task whose
    worker dies would wait forever, so ``gather`` watches the nodes' workers while it
    waits: when one is gone it cancels what is pending and raises WorkerLost, and
    ``retrying`` re-places the nodes on the workers alive now (e.g. the replacement a
    nanny started) and redoes the step from its inputs. Steps are pure functions of the
    client-side state they start from, so the redone step gives the same bytes.

    Gone means the scheduler itself, asked afresh, lists the worker no more, and keeps not
    listing it for ``LOSS_GRACE_SECONDS``. A failed, slow or incomplete answer, or one with
    no workers at all, is no news: on a busy machine those happen while every worker is
    fine, and redoing steps for them only makes the job slower or fail.
    """

    def __init__(self, n_nodes: int):
        try:
            from distributed import get_client

            self.client = get_client()
        except (ImportError, ValueError):
            self.client = None
        self.n_nodes = n_nodes
        self.workers: list[str] = []
        self.placement: list[str | None] = [None] * n_nodes
        self.replacements = 0  # how often a change of workers moved the nodes
        self.attempt = 0  # > 0 after a worker loss: redone steps salt their keys with it (the
        # scheduler may still hold the cancelled tasks, pinned to the dead worker)
        self._task_ids = itertools.count()  # every submitted step is a new task, even with equal inputs
        self._missing: dict[str, float] = {}  # worker -> when the scheduler first left it out
        self.place()

    @property
    def pinned(self) -> bool:
        """Every node has a worker of its own."""
        return bool(self.workers) and len(self.workers) >= self.n_nodes

    def _alive(self) -> list[str] | None:
        """Sorted addresses of the workers the scheduler lists now; None when it gave no
        usable answer, or listed no workers (then nothing could run anyway, and a
        replacement worker shows up in a later answer)."""
        workers = cluster.scheduler_workers(self.client)
        return sorted(workers) if workers else None

    def place(self) -> None:
        """Nodes round-robin over the workers alive now (sorted addresses: reproducible).

        Without a usable answer the placement stays as it is; before the first one, this
        waits for it a while (then the nodes run anywhere until a later step places them)."""
        if self.client is None:
            return
        workers = self._alive()
        deadline = time.monotonic() + PLACE_SECONDS
        while workers is None and not self.workers and time.monotonic() < deadline:
            time.sleep(WATCH_SECONDS)
            workers = self._alive()
        if workers is None or workers == self.workers:
            return
        if self.workers:
            log.warning(
                "workers changed (%d -> %d alive); nodes placed on the workers alive now",
                len(self.workers),
                len(workers),
            )
            self.replacements += 1
        self.workers = workers
        self.placement = [workers[i % len(workers)] for i in range(self.n_nodes)]
        self._missing.clear()

    def groups(self) -> list[list[int]]:
        """The nodes that run together, in node order: those placed on one worker (a task on a
        worker steps all of its nodes), every node alone while no worker is known for it, and
        all nodes in one group without a client (they run in this process anyway)."""
        if self.client is None:
            return [list(range(self.n_nodes))]
        by_worker: dict = {}
        for i, worker in enumerate(self.placement):
            by_worker.setdefault(worker if worker is not None else ("anywhere", i), []).append(i)
        return list(by_worker.values())

    def _gone(self) -> set[str]:
        """Workers of the placement that the scheduler has left out of every answer for
        ``LOSS_GRACE_SECONDS`` (and at least two answers); see the class docstring."""
        alive = self._alive()
        if alive is None:
            return set()
        now = time.monotonic()
        placed = {w for w in self.placement if w is not None}
        for worker in list(self._missing):
            if worker in alive or worker not in placed:
                del self._missing[worker]
        gone = set()
        for worker in placed - set(alive):
            first = self._missing.setdefault(worker, now)
            if now - first >= LOSS_GRACE_SECONDS:
                gone.add(worker)
        return gone

    def retrying(self, step, *args):
        """``step(*args)``, redone on re-placed nodes when a node's worker dies during it."""
        losses = 0
        while True:
            self.place()
            try:
                return step(*args)
            except WorkerLost as exc:
                self.attempt += 1
                losses += 1
                if losses > MAX_REPLACEMENTS:
                    raise RuntimeError(f"{exc}; gave up after {MAX_REPLACEMENTS} worker losses in one step") from None
                log.warning("%s; redoing the step on the workers alive now", exc)

    def compute(self, node: int, obj):
        """Compute a dask collection/Delayed entirely on the node's worker."""
        if self.client is None:
            import dask

            return dask.compute(obj)[0]
        return self.client.compute(obj, **self._where(node))

    def submit(self, node: int, name: str, fn, *args):
        """One small task (an ADMM step) on the node's worker; args may hold futures."""
        if self.client is None:
            return fn(*args)
        return self.client.submit(
            fn, *args, **self._where(node), key=f"{name}-{tokenize(fn, args, next(self._task_ids))}-{node}"
        )

    def _where(self, node: int) -> dict:
        if self.placement[node] is None:  # no worker known yet: anywhere
            return {}
        return {"workers": [self.placement[node]], "allow_other_workers": False}

    def gather(self, values):
        """The values of (nested lists of) futures; WorkerLost if a node's worker dies first."""
        if self.client is None:
            return values
        self.wait(values)
        return self.client.gather(values)

    def wait(self, values) -> None:
        """Until (nested lists of) futures are done, leaving their values on the workers;
        WorkerLost if a node's worker dies first."""
        if self.client is None:
            return
        from concurrent.futures import CancelledError

        from distributed import futures_of, wait

        futures = futures_of(values)
        self._missing.clear()
        while True:
            try:
                wait(futures, timeout=WATCH_SECONDS)
            except TimeoutError:
                self._raise_if_lost(futures)
                continue
            except CancelledError:
                pass
            if not any(future.cancelled() for future in futures):
                return
            # the scheduler cancels what depended on rows a dead worker held, sometimes before
            # it stops listing the worker: the step is redone on the workers alive then
            deadline = time.monotonic() + 3 * LOSS_GRACE_SECONDS
            while time.monotonic() < deadline:
                self._raise_if_lost(futures)
                time.sleep(WATCH_SECONDS)
            self.client.cancel(futures)
            raise WorkerLost("tasks of a DisH step were cancelled (their inputs were lost)")

    def _raise_if_lost(self, futures) -> None:
        gone = self._gone()
        if gone:
            self.client.cancel(futures)
            raise WorkerLost(f"worker(s) {', '.join(sorted(gone))} left the cluster during a DisH step")
