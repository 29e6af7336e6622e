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

FAN_IN = 8  # partial results combined per reduction task: few levels, small messages


def chunk_delayeds(x) -> list:
    """One Delayed per row chunk of a dask array (column chunking is rejected upstream)."""
    return list(x.to_delayed(optimize_graph=False).ravel())


def map_chunks(name: str, fn, chunks: list, *args, **kwargs) -> list:
    """Apply ``fn(chunk_i, *args, **kwargs)`` to every chunk as tasks named ``name-<token>-i``.

    ``chunks`` may be a list of Delayed or of tuples of Delayed (zipped arrays).
    """
    token = tokenize(fn, chunks, args, kwargs)
    args = [_shared(a) for a in args]
    kwargs = {k: _shared(v) for k, v in kwargs.items()}
    out = []
    for i, c in enumerate(chunks):
        c = c if isinstance(c, tuple) else (c,)
        out.append(delayed(fn, pure=True)(*c, *args, **kwargs, dask_key_name=f"{name}-{token}-{i}"))
    return out


SHARED_ARG_BYTES = 1 << 16


def _shared(value):
    """Large constant arguments (query codes, ground truth) become one graph key that every
    chunk task references, instead of a copy embedded in each task."""
    size = getattr(value, "nbytes", None)
    if size is None and hasattr(value, "__dataclass_fields__"):
        size = sum(getattr(getattr(value, f), "nbytes", 0) for f in value.__dataclass_fields__)
    if size is not None and size > SHARED_ARG_BYTES:
        return delayed(value, pure=True, traverse=False)
    return value


def _combine_all(combine, *parts):
    return functools.reduce(combine, parts)


def tree_reduce(name: str, parts: list, combine):
    """Combine partial results with a tree of ``combine`` (binary, associative) tasks."""
    if not parts:
        raise ValueError("tree_reduce needs at least one part")
    level = 0
    token = tokenize(parts, combine)
    while len(parts) > 1:
        parts = [delayed(_combine_all, pure=True)(combine, *parts[i:i + FAN_IN],
                                                  dask_key_name=f"{name}-{token}-{level}-{i}")
                 for i in range(0, len(parts), FAN_IN)]
        level += 1
    return parts[0]


def map_reduce(name: str, fn, combine, chunks: list, *args, **kwargs):
    """Tree-reduced result of ``fn`` over all chunks (one Delayed; call dask.compute on it)."""
    return tree_reduce(f"{name}-combine", map_chunks(name, fn, chunks, *args, **kwargs), combine)


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
    local = [rows[cut[i]:cut[i + 1]] - bounds[i] for i in range(len(bounds) - 1)]
    new_rows = tuple(int(len(loc)) if keep else int(bounds[i + 1] - bounds[i] - len(loc)) for i, loc in enumerate(local))
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


def as_dask(X, chunk_rows: int | None = None):
    """numpy -> dask (one chunk per ~16 MiB of rows); dask arrays pass through."""
    import dask.array as da
    if isinstance(X, da.Array):
        return X
    X = np.asarray(X)
    if chunk_rows is None:
        from pipeline.storage.datasets import default_chunk_rows
        chunk_rows = default_chunk_rows(X.shape[1] if X.ndim == 2 else 1, X.dtype.itemsize)
    return da.from_array(X, chunks=(chunk_rows,) + X.shape[1:])
