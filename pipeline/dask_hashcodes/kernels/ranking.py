"""Retrieval metrics of Hamming rankings, computed from per-chunk statistics (numpy only).

Every full-ranking metric is built from two per-query histograms over Hamming distance
h = 0..n_bits: how many database items sit at distance h (``total``) and how many of those
are relevant (``rel``). Histograms add across chunks, so they can be computed where the
codes live and summed with a tree reduction, for any database size.

* ``map`` (ties broken by id): the rank of a relevant item j at distance h is
  (#items with distance < h) + (#items at distance h with a smaller id) + 1. With chunks
  ordered by id, the second term is (count at h in earlier chunks) + (rank within the
  chunk), so a second pass per chunk, given those offsets, sums the precisions exactly.
* ``map_tie``: the expected AP over random orderings inside each equal-distance group
  (McSherry & Najork, 2008), closed form per group from the histograms.
* PR curve by radius and precision@radius2: counts of items with distance <= r.
Queries without any relevant item get AP 0 (reports say so).
"""

from __future__ import annotations

import numpy as np
from numba import njit
from scipy.special import digamma

from dask_hashcodes.kernels.codes import pack_signs
from dask_hashcodes.kernels.hamming import hamming_topk

# ---------------------------------------------------------------- relevance ----------


def relevance_from_labels(query_labels: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """(m, n) bool: query and item share at least one label (class ids or multi-hot rows)."""
    if query_labels.ndim == 1:
        return query_labels[:, None] == labels[None, :]
    return (query_labels.astype(np.int32) @ labels.T.astype(np.int32)) > 0


def relevance_from_neighbours(neighbours: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """(m, n) bool: item ``ids[j]`` is among the query's ground-truth neighbours.
    ``ids`` must be increasing (rows of a chunk); ``neighbours`` (m, K) ids, -1 padded."""
    m = neighbours.shape[0]
    rel = np.zeros((m, len(ids)), dtype=bool)
    if len(ids) == 0:
        return rel
    pos = np.searchsorted(ids, neighbours)
    pos_clipped = np.minimum(pos, len(ids) - 1)
    hit = (ids[pos_clipped] == neighbours) & (neighbours >= 0)
    rows = np.broadcast_to(np.arange(m)[:, None], neighbours.shape)
    rel[rows[hit], pos_clipped[hit]] = True
    return rel


# ---------------------------------------------------------------- pass 1 ------------


@njit(cache=True)
def _histograms(dist, relevant, width, total, rel):
    for q in range(dist.shape[0]):
        for j in range(dist.shape[1]):
            h = dist[q, j]
            total[q, h] += 1
            if relevant[q, j]:
                rel[q, h] += 1


def distance_histograms(dist: np.ndarray, relevant: np.ndarray, n_bits: int):
    """Per-query counts of all and of relevant items at each distance 0..n_bits."""
    m = dist.shape[0]
    total = np.zeros((m, n_bits + 1), np.int64)
    rel = np.zeros((m, n_bits + 1), np.int64)
    _histograms(np.ascontiguousarray(dist), np.ascontiguousarray(relevant), n_bits + 1, total, rel)
    return total, rel


def rank_offsets(chunk_histograms: list[tuple[np.ndarray, np.ndarray]]):
    """For each chunk (in id order): (#items, #relevant) ranked before its items at each
    distance, i.e. everything at a smaller distance plus earlier chunks at that distance."""
    total = sum(h[0] for h in chunk_histograms)
    rel = sum(h[1] for h in chunk_histograms)
    less_total = np.cumsum(total, axis=1) - total
    less_rel = np.cumsum(rel, axis=1) - rel
    offsets = []
    prefix_total = np.zeros_like(total)
    prefix_rel = np.zeros_like(rel)
    for t, r in chunk_histograms:
        offsets.append((less_total + prefix_total, less_rel + prefix_rel))
        prefix_total = prefix_total + t
        prefix_rel = prefix_rel + r
    return offsets


# ---------------------------------------------------------------- pass 2 ------------


@njit(cache=True)
def _precision_sums(dist, relevant, before_total, before_rel, out):
    width = before_total.shape[1]
    seen = np.zeros(width, np.int64)
    seen_rel = np.zeros(width, np.int64)
    for q in range(dist.shape[0]):
        seen[:] = 0
        seen_rel[:] = 0
        acc = 0.0
        for j in range(dist.shape[1]):  # ids ascend along the chunk: ties come in id order
            h = dist[q, j]
            seen[h] += 1
            if relevant[q, j]:
                seen_rel[h] += 1
                acc += (before_rel[q, h] + seen_rel[h]) / (before_total[q, h] + seen[h])
        out[q] = acc


def ap_precision_sums(
    dist: np.ndarray, relevant: np.ndarray, before_total: np.ndarray, before_rel: np.ndarray
) -> np.ndarray:
    """Sum, over the chunk's relevant items, of precision at their global rank (per query).

    One scan of each row in id order: a running count per distance gives every item's
    position among the chunk's items at its own distance, so no sort is needed (a sort-based
    numpy version was far slower).
    """
    out = np.zeros(dist.shape[0])
    if dist.shape[1]:
        _precision_sums(
            np.ascontiguousarray(dist),
            np.ascontiguousarray(relevant),
            np.ascontiguousarray(before_total),
            np.ascontiguousarray(before_rel),
            out,
        )
    return out


# ---------------------------------------------------------------- from histograms ---


def mean_ap(precision_sums: np.ndarray, n_relevant: np.ndarray) -> np.ndarray:
    return np.where(n_relevant > 0, precision_sums / np.maximum(n_relevant, 1), 0.0)


def _harmonic(x: np.ndarray) -> np.ndarray:
    """H(x) = sum_{i=1..x} 1/i for integer x >= 0 (H(0) = 0)."""
    return digamma(np.asarray(x, dtype=np.float64) + 1.0) + np.euler_gamma


def tie_aware_ap(total: np.ndarray, rel: np.ndarray) -> np.ndarray:
    """Expected AP per query when items at equal distance are in random order.

    A group at distance h holds n items, r relevant, after N items of which R relevant.
    Position i in the group is relevant with probability r/n, and then the expected
    number of relevant items ahead of it in the group is (i-N-1)(r-1)/(n-1), so
    E[sum of precisions] = r/n * sum_{i=N+1}^{N+n} (R + 1 + (i-N-1) b) / i, b = (r-1)/(n-1),
    = r/n * [(R + 1 - b (N+1)) (H(N+n) - H(N)) + b n].
    """
    N = np.cumsum(total, axis=1) - total
    R = np.cumsum(rel, axis=1) - rel
    n, r = total.astype(np.float64), rel.astype(np.float64)
    b = np.where(n > 1, (r - 1) / np.maximum(n - 1, 1), 0.0)
    group = (R + 1 - b * (N + 1)) * (_harmonic(N + n) - _harmonic(N)) + b * n
    contrib = np.where(r > 0, r / np.maximum(n, 1) * group, 0.0)
    return mean_ap(contrib.sum(axis=1), rel.sum(axis=1))


def radius_precision_recall(total: np.ndarray, rel: np.ndarray):
    """Per radius r = 0..n_bits: mean precision (a query retrieving nothing counts 0),
    mean recall, and the fraction of queries that retrieve nothing."""
    ret = np.cumsum(total, axis=1)
    hit = np.cumsum(rel, axis=1)
    n_rel = rel.sum(axis=1, keepdims=True)
    precision = np.where(ret > 0, hit / np.maximum(ret, 1), 0.0)
    recall = np.where(n_rel > 0, hit / np.maximum(n_rel, 1), 0.0)
    failed = ret == 0
    return precision.mean(axis=0), recall.mean(axis=0), failed.mean(axis=0)


def topk_metrics(relevant_topk: np.ndarray, n_relevant: np.ndarray, ks) -> dict:
    """precision@K, recall@K and map@K from the relevance of the ranked top-k lists.

    map@K = mean over queries of (sum of precision at relevant positions <= K) /
    (number of relevant items retrieved in the top K); 0 when none is retrieved.
    """
    out = {}
    cum = np.cumsum(relevant_topk, axis=1)
    positions = np.arange(1, relevant_topk.shape[1] + 1)
    prec_at = cum / positions
    for k in ks:
        hits = cum[:, k - 1]
        out[f"precision@{k}"] = float((hits / k).mean())
        out[f"recall@{k}"] = float(np.where(n_relevant > 0, hits / np.maximum(n_relevant, 1), 0.0).mean())
        sum_prec = np.where(relevant_topk[:, :k], prec_at[:, :k], 0.0).sum(axis=1)
        out[f"map@{k}"] = float(np.where(hits > 0, sum_prec / np.maximum(hits, 1), 0.0).mean())
    return out


def signs_precision_at_k(query_signs: np.ndarray, base_signs: np.ndarray, relevant: np.ndarray, k: int) -> float:
    """precision@k of ranking the base by Hamming distance to each query (ties by index), for
    codes given as {-1, +1} (or real: >= 0 is bit 1) matrices; ``relevant`` (m, n) bool."""
    _, ids = hamming_topk(
        pack_signs(base_signs), np.arange(len(base_signs)), queries=pack_signs(query_signs), k=min(k, len(base_signs))
    )
    return float(np.take_along_axis(relevant, ids, axis=1).mean())
