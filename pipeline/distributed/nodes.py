"""DisH "nodes" on a Dask cluster: which rows a node holds and which worker computes them.

A node's data is a clone of the rows it owns (``dask.graph_manipulation.clone``), so its
read tasks are its own and run, with everything computed from them, on the node's worker:
feature chunks never travel. With at least as many workers as nodes every node has a
worker of its own; otherwise nodes are placed round-robin. Without a distributed client
the same calls run in-process (useful for numpy input and tests).
"""
from __future__ import annotations

import numpy as np
from dask.base import tokenize
from dask.graph_manipulation import clone

from pipeline.distributed.graph import row_bounds, select_rows
from pipeline.errors import InputError

PARTITIONS = ("contiguous", "random", "by-label")


def _row_ranges(bounds: np.ndarray, groups: list[np.ndarray]) -> list[np.ndarray]:
    return [np.concatenate([np.arange(bounds[c], bounds[c + 1]) for c in g]) if len(g) else np.zeros(0, np.int64)
            for g in groups]


def partition_rows(X, n_nodes: int, partition: str, seed: int, y=None) -> list[np.ndarray]:
    """Sorted row numbers of each node.

    contiguous: consecutive groups of chunks (or equal row ranges when there are fewer
    chunks than nodes); random: chunks dealt to nodes in a seeded random order; by-label:
    the sorted classes split into ``n_nodes`` groups, node i holding every row of its
    classes (the non-iid case).
    """
    n = X.shape[0]
    bounds = row_bounds(X)
    n_chunks = len(bounds) - 1
    if partition == "by-label":
        if y is None:
            raise InputError("partition='by-label' needs labels: call fit(X, y) or use a dataset with labels")
        y = np.asarray(y)
        if y.ndim != 1 or len(y) != n:
            raise InputError(f"by-label partition needs one class label per row ({n}); got shape {y.shape}")
        classes = np.unique(y)
        if len(classes) < n_nodes:
            raise InputError(f"by-label partition of {len(classes)} classes over {n_nodes} nodes leaves nodes empty; use at most {len(classes)} nodes")
        groups = np.array_split(classes, n_nodes)
        return [np.flatnonzero(np.isin(y, g)).astype(np.int64) for g in groups]
    if partition not in ("contiguous", "random"):
        raise InputError(f"unknown partition {partition!r}; use one of {', '.join(PARTITIONS)}")
    if n < n_nodes:
        raise InputError(f"{n} training rows cannot be spread over {n_nodes} nodes; use fewer nodes")
    if n_chunks >= n_nodes:
        order = np.arange(n_chunks) if partition == "contiguous" else np.random.default_rng(seed).permutation(n_chunks)
        groups = [np.sort(g) for g in np.array_split(order, n_nodes)]
        return _row_ranges(bounds, groups)
    if partition == "random":
        raise InputError(f"random partition deals whole chunks to nodes but there are {n_chunks} chunks for {n_nodes} "
                         f"nodes; use smaller chunks (--chunk-rows) or partition='contiguous'")
    return [np.arange(a[0], a[-1] + 1) for a in np.array_split(np.arange(n), n_nodes)]


def node_arrays(X, node_rows: list[np.ndarray]) -> list:
    """Each node's rows as its own dask array with cloned (private) read tasks."""
    out = []
    for i, rows in enumerate(node_rows):
        if len(rows) == 0:
            raise InputError(f"node {i} holds no rows; use fewer nodes")
        out.append(clone(select_rows(X, rows, keep=True), seed=i))
    return out


class NodeRunner:
    """Runs each node's tasks on its worker (pinned) or, without a client, in-process."""

    def __init__(self, n_nodes: int):
        try:
            from distributed import get_client
            self.client = get_client()
        except (ImportError, ValueError):
            self.client = None
        workers = sorted(self.client.scheduler_info()["workers"]) if self.client else []
        self.placement = [workers[i % len(workers)] for i in range(n_nodes)] if workers else [None] * n_nodes
        self.pinned = bool(workers) and len(workers) >= n_nodes

    def compute(self, node: int, obj):
        """Compute a dask collection/Delayed entirely on the node's worker."""
        if self.client is None:
            import dask
            return dask.compute(obj)[0]
        return self.client.compute(obj, workers=[self.placement[node]], allow_other_workers=False)

    def submit(self, node: int, name: str, fn, *args):
        """One small task (an ADMM step) on the node's worker; args may hold futures."""
        if self.client is None:
            return fn(*args)
        return self.client.submit(fn, *args, workers=[self.placement[node]], allow_other_workers=False,
                                  key=f"{name}-{tokenize(fn, args, np.random.random())}-{node}")

    def gather(self, values):
        if self.client is None:
            return values
        return self.client.gather(values)
