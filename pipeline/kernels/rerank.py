"""Re-ranking Hamming candidates: distances of (query, candidate row) pairs, per-query top-k.

Two distances, both computed only for the pairs a Hamming search proposed:

* exact squared L2 between the query's vector and the candidate's original vector,
  in float64 (exact for integer features such as SIFT's bytes);
* the asymmetric lower-bound distance of Gordo, Perronnin, Gong and Lazebnik ("Asymmetric
  distances for binary embeddings", TPAMI 2014): the query is not binarised; its real
  projections p (whose signs would be its code) are compared with the candidate's code b by
  the squared distance from p to the cell of codes that b stands for. With bits set by
  p_k >= 0, that cell is a product of half-lines, so the distance is the sum of p_k^2 over
  the bits where sign(p_k) disagrees with b_k: a Hamming distance in which each disagreeing
  bit weighs as much as the query is sure of it. It needs no vectors of the database, only
  its codes.

Ties are broken by the smaller id, as every other ranking here.
"""

from __future__ import annotations

import numpy as np

from pipeline.kernels.codes import unpack_bits


def exact_pair_distances(queries: np.ndarray, rows: np.ndarray, query_index: np.ndarray, row_index: np.ndarray):
    """Squared L2 between queries[query_index[p]] and rows[row_index[p]] for every pair p, in
    float64 (exact for integer features whose squared distances stay below 2**53)."""
    diff = np.asarray(rows, np.float64)[row_index] - np.asarray(queries, np.float64)[query_index]
    return np.einsum("ij,ij->i", diff, diff)


def lower_bound_pair_distances(
    projections: np.ndarray, codes: np.ndarray, query_index: np.ndarray, row_index: np.ndarray
):
    """Gordo et al.'s asymmetric lower-bound distance between the real projections of
    queries[query_index[p]] and the packed code codes[row_index[p]]: the sum of p_k^2 over
    the bits k where (p_k >= 0) differs from the code's bit."""
    projections = np.asarray(projections, np.float64)
    n_bits = projections.shape[1]
    bits = unpack_bits(np.asarray(codes, np.uint8)[row_index], n_bits).astype(bool)
    p = projections[query_index]
    return np.einsum("ij,ij->i", p * p, bits != (p >= 0))


def pairs_topk(query_index: np.ndarray, ids: np.ndarray, distances: np.ndarray, n_queries: int, k: int):
    """Per query, the k pairs of smallest (distance, id): (distances float64 (m, k), ids
    int64 (m, k)), inf / -1 where a query has fewer than k pairs."""
    out_d = np.full((n_queries, k), np.inf)
    out_i = np.full((n_queries, k), -1, np.int64)
    order = np.lexsort((ids, distances, query_index))
    q_sorted = query_index[order]
    starts = np.searchsorted(q_sorted, np.arange(n_queries))
    rank = np.arange(len(order)) - starts[q_sorted]
    kept = rank < k
    out_d[q_sorted[kept], rank[kept]] = distances[order][kept]
    out_i[q_sorted[kept], rank[kept]] = ids[order][kept]
    return out_d, out_i


def candidate_values(candidate_ids: np.ndarray, candidate_values: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """For each query row q, the value (e.g. the Hamming distance) that ``candidate_values[q]``
    gives the id ``ids[q, j]`` among ``candidate_ids[q]``; -1 where ids[q, j] is -1."""
    out = np.full(ids.shape, -1, dtype=candidate_values.dtype)
    for q in range(ids.shape[0]):
        order = np.argsort(candidate_ids[q], kind="stable")
        found = ids[q] >= 0
        pos = order[np.searchsorted(candidate_ids[q], ids[q][found], sorter=order)]
        out[q, found] = candidate_values[q, pos]
    return out
