"""Network topologies of DisH nodes: which nodes exchange dictionaries.

Named graphs are built from the node count and a seed; an explicit edge list is accepted
as well. A disconnected graph is rejected: consensus cannot reach every node.
"""

from __future__ import annotations

import numpy as np

from dask_hashcodes.errors import InputError

TOPOLOGIES = ("random", "ring", "star", "complete")
RANDOM_EXTRA_EDGE_PROBABILITY = 0.2


def _edges_of(name: str, p: int, seed: int) -> set[tuple[int, int]]:
    if name == "complete":
        return {(i, j) for i in range(p) for j in range(i + 1, p)}
    if name == "star":
        return {(0, j) for j in range(1, p)}
    if name == "ring":
        return {tuple(sorted((i, (i + 1) % p))) for i in range(p)} if p > 2 else {(0, 1)} if p == 2 else set()
    # random connected graph like the paper's Fig. 1: a random spanning tree (every node
    # joins a random earlier node) plus a few extra random edges
    rng = np.random.default_rng(seed)
    order = rng.permutation(p)
    edges = {tuple(sorted((int(order[k]), int(order[rng.integers(k)])))) for k in range(1, p)}
    for i in range(p):
        for j in range(i + 1, p):
            if rng.random() < RANDOM_EXTRA_EDGE_PROBABILITY:
                edges.add((i, j))
    return edges


def build_topology(topology, n_nodes: int, seed: int = 0) -> list[list[int]]:
    """Neighbour lists for ``n_nodes`` nodes; ``topology`` is a name or a list of (i, j) edges."""
    if isinstance(topology, str):
        if topology not in TOPOLOGIES:
            raise InputError(f"unknown topology {topology!r}; use one of {', '.join(TOPOLOGIES)} or an edge list")
        edges = _edges_of(topology, n_nodes, seed)
    else:
        try:
            edges = {tuple(sorted((int(a), int(b)))) for a, b in topology}
        except (TypeError, ValueError):
            raise InputError("topology edge list must be pairs of node numbers, e.g. [[0, 1], [1, 2]]") from None
        bad = [e for e in edges if e[0] == e[1] or min(e) < 0 or max(e) >= n_nodes]
        if bad:
            raise InputError(
                f"topology edge {bad[0]} is not an edge between two of the {n_nodes} nodes 0..{n_nodes - 1}"
            )
    neighbours = [[] for _ in range(n_nodes)]
    for i, j in sorted(edges):
        neighbours[i].append(j)
        neighbours[j].append(i)
    _check_connected(neighbours)
    return neighbours


def _check_connected(neighbours: list[list[int]]) -> None:
    seen, stack = {0}, [0]
    while stack:
        for j in neighbours[stack.pop()]:
            if j not in seen:
                seen.add(j)
                stack.append(j)
    if len(seen) != len(neighbours):
        missing = sorted(set(range(len(neighbours))) - seen)
        raise InputError(
            f"the topology is disconnected (nodes {missing[:5]} cannot reach node 0); consensus needs a "
            f"connected graph, add edges or use ring/star/complete"
        )


def edges(neighbours: list[list[int]]) -> list[tuple[int, int]]:
    return [(i, j) for i, ns in enumerate(neighbours) for j in ns if i < j]
