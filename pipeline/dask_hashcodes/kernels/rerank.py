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
from numba import njit

from dask_hashcodes.kernels.codes import BIT_ORDER
from dask_hashcodes.kernels.l2 import heap_less, heap_replace_top


@njit(nogil=True, cache=True)
def _pair_l2(queries, rows, query_index, row_index, out):
    for p in range(len(out)):
        q, r = queries[query_index[p]], rows[row_index[p]]
        total = 0.0
        for j in range(q.shape[0]):
            diff = float(r[j]) - q[j]
            total += diff * diff
        out[p] = total


def exact_pair_distances(queries: np.ndarray, rows: np.ndarray, query_index: np.ndarray, row_index: np.ndarray):
    """Squared L2 between queries[query_index[p]] and rows[row_index[p]] for every pair p, in
    float64 (exact for integer features whose squared distances stay below 2**53)."""
    out = np.empty(len(query_index))
    _pair_l2(np.asarray(queries, np.float64), np.asarray(rows), query_index, row_index, out)
    return out


def lower_bound_tables(projections: np.ndarray) -> np.ndarray:
    """Per query, per code byte, the distance each of the 256 byte values adds: the sum of
    p_k^2 over the byte's bits k whose value disagrees with (p_k >= 0). (m, n_bytes, 256)
    float64; a pair's distance is then one lookup per byte, as FAISS's ADC tables."""
    p = np.asarray(projections, np.float64)
    m, n_bits = p.shape
    n_bytes = -(-n_bits // 8)
    padded = np.zeros((m, 8 * n_bytes))
    padded[:, :n_bits] = p
    values = np.arange(256, dtype=np.uint8)
    value_bits = np.unpackbits(values[:, None], axis=1, bitorder=BIT_ORDER).astype(bool)  # (256, 8)
    by_byte = padded.reshape(m, n_bytes, 8)
    disagree = value_bits[None, None, :, :] != (by_byte >= 0)[:, :, None, :]  # (m, bytes, 256, 8)
    # padding bits (n_bits not a multiple of 8) have p = 0: they add nothing
    return np.einsum("qbvk,qbk->qbv", disagree, by_byte * by_byte)


@njit(nogil=True, cache=True)
def _pair_lookup(tables, codes, query_index, row_index, out):
    for p in range(len(out)):
        table, code = tables[query_index[p]], codes[row_index[p]]
        total = 0.0
        for b in range(code.shape[0]):
            total += table[b, code[b]]
        out[p] = total


def lower_bound_pair_distances(
    projections: np.ndarray, codes: np.ndarray, query_index: np.ndarray, row_index: np.ndarray, tables=None
):
    """Gordo et al.'s asymmetric lower-bound distance between the real projections of
    queries[query_index[p]] and the packed code codes[row_index[p]]: the sum of p_k^2 over
    the bits k where (p_k >= 0) differs from the code's bit. ``tables``: lower_bound_tables
    of the projections, when the caller has them already."""
    tables = lower_bound_tables(projections) if tables is None else tables
    out = np.empty(len(query_index))
    _pair_lookup(tables, np.asarray(codes, np.uint8), query_index, row_index, out)
    return out


@njit(nogil=True, cache=True)
def _pairs_into_heaps(query_index, ids, distances, heap_d, heap_i):
    for p in range(len(ids)):
        q = query_index[p]
        if heap_less(distances[p], ids[p], heap_d[q, 0], heap_i[q, 0]):
            heap_replace_top(heap_d[q], heap_i[q], distances[p], ids[p])


def pairs_topk(query_index: np.ndarray, ids: np.ndarray, distances: np.ndarray, n_queries: int, k: int):
    """Per query, the k pairs of smallest (distance, id): (distances float64 (m, k), ids
    int64 (m, k)), inf / -1 where a query has fewer than k pairs. A bounded heap per query:
    O(pairs log k), whatever order the pairs come in."""
    heap_d = np.full((n_queries, k), np.inf)
    heap_i = np.full((n_queries, k), np.iinfo(np.int64).max, np.int64)
    _pairs_into_heaps(
        np.asarray(query_index, np.int64), np.asarray(ids, np.int64), np.asarray(distances, np.float64), heap_d, heap_i
    )
    order = np.lexsort((heap_i, heap_d), axis=-1)
    out_d, out_i = np.take_along_axis(heap_d, order, axis=1), np.take_along_axis(heap_i, order, axis=1)
    out_i[np.isinf(out_d)] = -1
    return out_d, out_i


def candidate_values(candidate_ids: np.ndarray, values: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """For each query row q, the value (e.g. the Hamming distance) that ``values[q]`` gives
    the id ``ids[q, j]`` among ``candidate_ids[q]``; -1 where ids[q, j] is -1."""
    out = np.full(ids.shape, -1, dtype=values.dtype)
    for q in range(ids.shape[0]):
        order = np.argsort(candidate_ids[q], kind="stable")
        found = ids[q] >= 0
        pos = order[np.searchsorted(candidate_ids[q], ids[q][found], sorter=order)]
        out[q, found] = values[q, pos]
    return out
