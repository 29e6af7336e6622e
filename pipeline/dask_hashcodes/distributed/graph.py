"""Dask wiring (no math): chunk maps, tree reductions, row selection, named tasks.

Kernels are plain numpy functions; these helpers only decide which task runs them on
which chunk and how partial results meet. Task keys carry a readable prefix
(``itq-rotation``, ``hamming-topk``...) so the dashboard shows what is running.
"""

from __future__ import annotations

import functools

import numpy as np
from dask import delayed
from dask.base import tokenize

from dask_hashcodes import config
from dask_hashcodes.errors import InputError


def chunk_delayeds(x) -> list:
    """One Delayed per row chunk of a dask array (column chunking is rejected upstream)."""
    return list(x.to_delayed(optimize_graph=False).ravel())


INLINE_GRAPH_BYTES = 1 << 20  # a chunk's read graph is embedded in a task only when it is small


class InlineRead:
    """The culled graph that produces one chunk (e.g. a zarr read), run inside the task
    that consumes it (``map_chunks`` resolves it). The read then happens in the same task
    as the kernel: no 16 MiB intermediate result is stored, accounted and released by the
    worker between two tasks, and the scheduler cannot place the read and its consumer on
    different workers: no pass over the features spends time moving chunks between tasks.
    ``local_rows`` optionally selects rows of the chunk (DisH nodes)."""

    def __init__(self, graph: dict, key, local_rows=None):
        self.graph, self.key, self.local_rows = graph, key, local_rows

    def load(self) -> np.ndarray:
        from dask.local import get_sync

        return take_rows(get_sync(self.graph, self.key), self.local_rows)

    def with_rows(self, local_rows) -> InlineRead:
        return InlineRead(self.graph, self.key, local_rows)


def compact_rows(rows: np.ndarray) -> np.ndarray:
    """Sorted row positions -> (k, 2) int64 [start, stop) runs when that is smaller, else
    the positions unchanged. A DisH node's rows inside a chunk are a few contiguous
    ranges (partitions deal 65536-row blocks); as positions they cost 8 bytes per row in
    every task of every pass (an 80 MB graph per pass at 10M rows), as runs a few bytes."""
    rows = np.asarray(rows, dtype=np.int64)
    if len(rows) == 0:
        return rows
    breaks = np.flatnonzero(np.diff(rows) != 1) + 1
    starts = np.concatenate([[0], breaks])
    stops = np.concatenate([breaks, [len(rows)]])
    if 2 * len(starts) >= len(rows):
        return rows
    return np.stack([rows[starts], rows[stops - 1] + 1], axis=1)


def take_rows(block: np.ndarray, rows) -> np.ndarray:
    """``block`` (rows None), or a copy of its rows given as positions or as compact_rows
    runs (a copy either way, as fancy indexing gives: callers may own the result)."""
    if rows is None:
        return block
    if rows.ndim == 2:
        return np.concatenate([block[start:stop] for start, stop in rows])
    return block[rows]


def _chunk_graph(x, c: int):
    from dask.core import flatten
    from dask.optimization import cull

    piece = x.blocks[c]
    key = next(iter(flatten(piece.__dask_keys__())))
    graph, _ = cull(dict(piece.__dask_graph__()), [key])
    return graph, key


def _inlinable(graph: dict) -> bool:
    """Small, self-contained read graphs only: not in-memory arrays (the whole array would
    ride along) and not persisted data (futures live on a worker already)."""
    import pickle

    try:
        from distributed import Future
    except ImportError:  # pragma: no cover
        Future = ()
    if any(isinstance(v, Future) for v in graph.values()):
        return False
    try:
        return len(pickle.dumps(graph)) <= INLINE_GRAPH_BYTES
    except Exception:
        return False


def chunk_reads(x) -> list:
    """Per row chunk, an InlineRead when the chunk's graph is a small storage read, else a
    Delayed: the chunk inputs of ``map_chunks`` for passes over stored features."""
    graph0, _ = _chunk_graph(x, 0)
    if not _inlinable(graph0):
        return chunk_delayeds(x)
    return [InlineRead(*_chunk_graph(x, c)) for c in range(x.numblocks[0])]


def _with_loaded_chunks(fn):
    """``fn`` taking arrays -> a task function that first loads any InlineRead argument."""

    def run(*args, **kwargs):
        return fn(*(a.load() if isinstance(a, InlineRead) else a for a in args), **kwargs)

    run.__name__ = getattr(fn, "__name__", "run")
    return run


def map_chunks(name: str, fn, chunks: list, *args, salt=None, **kwargs) -> list:
    """Apply ``fn(chunk_i, *args, **kwargs)`` to every chunk as tasks named ``name-<token>-i``.

    ``chunks`` may be a list of Delayed / InlineRead, or of tuples of them (zipped arrays).
    ``salt`` only enters the token: the same work under new keys (a step redone after a
    worker loss must not meet its cancelled tasks on the scheduler).
    """
    token = tokenize(fn, [_token_of(c) for c in chunks], args, kwargs, salt)
    args = [_shared(a) for a in args]
    kwargs = {k: _shared(v) for k, v in kwargs.items()}
    task = _with_loaded_chunks(fn)
    out = []
    for i, c in enumerate(chunks):
        c = c if isinstance(c, tuple) else (c,)
        out.append(delayed(task, pure=True)(*c, *args, **kwargs, dask_key_name=f"{name}-{token}-{i}"))
    return out


def _token_of(chunk):
    """Deterministic token input for a chunk (InlineRead objects by their graph key and rows)."""
    items = chunk if isinstance(chunk, tuple) else (chunk,)
    return tuple((c.key, tokenize(c.local_rows)) if isinstance(c, InlineRead) else c for c in items)


SHARED_ARG_BYTES = 1 << 16


def _shared(value):
    """Large constant arguments (query codes, ground truth) become one graph key that every
    chunk task references, instead of a copy embedded in each task."""
    from dask.delayed import Delayed

    if isinstance(value, Delayed):
        return value
    size = getattr(value, "nbytes", None)
    if size is None and hasattr(value, "__dataclass_fields__"):
        size = sum(getattr(getattr(value, f), "nbytes", 0) for f in value.__dataclass_fields__)
    if size is not None and size > SHARED_ARG_BYTES:
        return delayed(value, pure=True, traverse=False)
    return value


def _combine_all(combine, *parts):
    return functools.reduce(combine, parts)


def reduction_fan_in() -> int:
    """Partial results one combine task takes (the dask setting dhash.fan-in): few levels,
    small messages."""
    fan_in = int(config.get("fan-in"))
    if fan_in < 2:  # one part per task would never reduce
        raise InputError(f"dask setting dhash.fan-in must be at least 2, got {fan_in}")
    return fan_in


def tree_reduce(name: str, parts: list, combine):
    """Combine partial results with a tree of ``combine`` (binary, associative) tasks: level
    by level, each run of ``reduction_fan_in()`` consecutive parts reduced left to right."""
    if not parts:
        raise ValueError("tree_reduce needs at least one part")
    fan_in = reduction_fan_in()
    level = 0
    # fan-in is in the token: another fan-in groups other parts (and sums floats in another
    # order) under what would otherwise be the same task keys
    token = tokenize(parts, combine, fan_in)
    while len(parts) > 1:
        parts = [
            delayed(_combine_all, pure=True)(
                combine, *parts[i : i + fan_in], dask_key_name=f"{name}-{token}-{level}-{i}"
            )
            for i in range(0, len(parts), fan_in)
        ]
        level += 1
    return parts[0]


def combine_in_tree(parts: list, combine, fan_in: int):
    """The values ``tree_reduce`` computes, combined in this process in the same groups and
    order, so that floating-point sums come out bit for bit the same: a task holding every
    part (a node's resident rows) gives the answer the streamed graph gives."""
    if not parts:
        raise ValueError("combine_in_tree needs at least one part")
    while len(parts) > 1:
        parts = [_combine_all(combine, *parts[i : i + fan_in]) for i in range(0, len(parts), fan_in)]
    return parts[0]


def map_reduce(name: str, fn, combine, chunks: list, *args, salt=None, **kwargs):
    """Tree-reduced result of ``fn`` over all chunks (one Delayed; call dask.compute on it)."""
    return tree_reduce(f"{name}-combine", map_chunks(name, fn, chunks, *args, salt=salt, **kwargs), combine)


def row_bounds(x) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(x.chunks[0])]).astype(np.int64)


def _select_local_rows(block, rows_in_block, keep):
    mask = np.zeros(block.shape[0], dtype=bool) if keep else np.ones(block.shape[0], dtype=bool)
    mask[rows_in_block] = keep
    return block[mask]


def select_rows(x, rows: np.ndarray, *, keep: bool):
    """Dask array ``x`` with only (keep=True) or without (keep=False) the given sorted row
    numbers; chunk sizes stay known.

    Each task only receives the row numbers inside its own chunk, so the graph stays small
    even for a large dataset.
    """
    import dask.array as da
    from dask.highlevelgraph import HighLevelGraph

    rows = np.asarray(rows, dtype=np.int64)
    bounds = row_bounds(x)
    cut = np.searchsorted(rows, bounds)
    local = [rows[cut[i] : cut[i + 1]] - bounds[i] for i in range(len(bounds) - 1)]
    new_rows = tuple(
        int(len(loc)) if keep else int(bounds[i + 1] - bounds[i] - len(loc)) for i, loc in enumerate(local)
    )
    name = f"{'take' if keep else 'drop'}-rows-{tokenize(x, rows)}"
    dsk = {}
    for i, key in enumerate(x.__dask_keys__()):
        key = key[0] if isinstance(key, list) else key
        dsk[(name, i) + key[2:]] = (_select_local_rows, key, local[i], keep)
    graph = HighLevelGraph.from_collections(name, dsk, dependencies=[x])
    return da.Array(graph, name, chunks=(new_rows,) + x.chunks[1:], dtype=x.dtype)


def drop_rows(x, rows: np.ndarray):
    """``x`` without the given sorted row numbers (e.g. the queries of a split)."""
    return select_rows(x, rows, keep=False)


def row_numbers(x):
    """int64 dask array of row numbers aligned with the row chunks of ``x``."""
    import dask.array as da

    return da.arange(x.shape[0], chunks=(x.chunks[0],), dtype=np.int64)


def is_dask_array(X) -> bool:
    import dask.array as da

    return isinstance(X, da.Array)


def as_dask(X, chunk_rows: int | None = None):
    """numpy -> dask (one chunk per ~16 MiB of rows); dask arrays pass through."""
    import dask.array as da

    if isinstance(X, da.Array):
        return X
    X = np.asarray(X)
    if chunk_rows is None:
        from dask_hashcodes.storage.datasets import default_chunk_rows

        chunk_rows = default_chunk_rows(X.shape[1] if X.ndim == 2 else 1, X.dtype.itemsize)
    return da.from_array(X, chunks=(chunk_rows,) + X.shape[1:])


def merged_row_chunks(x, target_bytes: int):
    """``x`` with runs of consecutive row chunks merged so that each chunk holds about
    ``target_bytes`` (whole stored chunks, never split; chunks already that large are kept).
    For passes whose tasks gain from seeing more rows at once than storage chunks hold."""
    rows = x.chunks[0]
    row_bytes = max(1, x.dtype.itemsize * int(np.prod(x.shape[1:])))
    per_task = target_bytes // (max(rows) * row_bytes)
    if per_task < 2:
        return x
    merged = tuple(sum(rows[i : i + per_task]) for i in range(0, len(rows), per_task))
    return x.rechunk((merged,) + x.chunks[1:])


def _first(pair):
    return pair[0]


def _second(pair):
    return pair[1]


def update_and_reduce(name: str, fn, chunks: list, combine, *args, **kwargs):
    """Run ``fn(*chunk, *args, **kwargs) -> (new chunk state, partial sums)`` on every chunk as
    ``name`` tasks; the new states stay on the workers (persisted Delayeds, one per chunk) and
    the partial sums are tree-combined and brought back: (list of states, combined sums).
    The shape of iterative methods whose per-row state (codes) lives with the data."""
    import dask

    outs = map_chunks(name, fn, chunks, *args, **kwargs)
    states = [delayed(_first, pure=True)(o) for o in outs]
    sums = tree_reduce(f"{name}-sums", [delayed(_second, pure=True)(o) for o in outs], combine)
    *states, sums = dask.persist(*states, sums)
    return list(states), sums.compute()


def _take(part, local_rows):
    return part[local_rows]


def gather_rows(parts: list, bounds: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Rows ``rows`` (sorted) of an array kept on the workers as one persisted Delayed per row
    chunk (``bounds``: the chunks' first rows and the end), brought to the client: each
    chunk gives only its own rows, nothing is read or computed again."""
    import dask

    rows = np.asarray(rows, dtype=np.int64)
    cut = np.searchsorted(rows, bounds)
    taken = [
        delayed(_take, pure=True)(part, rows[cut[i] : cut[i + 1]] - bounds[i])
        for i, part in enumerate(parts)
        if cut[i + 1] > cut[i]
    ]
    if not taken:
        return np.asarray(dask.compute(delayed(_take, pure=True)(parts[0], rows))[0])
    return np.concatenate(dask.compute(*taken))


def _add_counts(a, b):
    return a + b


def write_shards(name: str, fn, data, expected_rows: int, progress=None, **kwargs) -> None:
    """Run ``fn(chunk, shard_number, **kwargs)`` as one ``name`` task per row chunk of the
    dask array ``data``; each writes its part of an artifact and returns its row count. The
    counts are added by a tree (``name``-rows) and must come to ``expected_rows``.
    ``progress``, if given, computes the final task (e.g. behind a progress bar)."""
    parts = map_chunks(name, fn, [(block, i) for i, block in enumerate(chunk_reads(data))], **kwargs)
    done = tree_reduce(f"{name}-rows", parts, _add_counts)
    written = progress(done) if progress is not None else done.compute()
    if written is not None and written != expected_rows:
        raise RuntimeError(f"{name} wrote {written} rows, expected {expected_rows}")
