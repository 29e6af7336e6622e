"""Both metric passes (kernels.ranking) fused with the Hamming distances, for the common
cases: single-label relevance and Euclidean top-K relevance, ungrouped query codes.

The generic path materialises a (queries x chunk) distance matrix and a relevance matrix
of the same size (131 MB of booleans for 1000 queries x a 131072-row chunk); these kernels
compute distances tile by tile with the search kernel's vectorised loop and test
relevance on the fly instead:

* labels: item j is relevant to query q iff ``db_labels[j] == query_labels[q]``;
* neighbours (lists or relevance bits): the chunk positions of each query's relevant
  rows, ascending and padded with a sentinel >= n, walked alongside the scan.

Results equal ``distance_histograms`` / ``ap_precision_sums`` exactly (tests).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from dask_hashcodes.kernels.hamming import TILE_CODES, as_words, tile_distances, word_major_tiles
from dask_hashcodes.kernels.l2 import relevant_positions

BY_LABEL, BY_POSITION = 0, 1


@njit(nogil=True, cache=True)
def _tile_rows(t, n):
    """(start, stop): the database rows that tile t holds (the last tile may be shorter)."""
    start = t * TILE_CODES
    return start, min(n, start + TILE_CODES)


@njit(nogil=True, cache=True)
def _relevant_end(positions, p, stop):
    """Where the walk over one query's relevant positions (ascending, then sentinels at n)
    from ``p`` leaves the rows before ``stop``: positions[p:end] are the query's relevant
    rows in the current tile, and ``end`` is where the next tile's walk starts."""
    while p < positions.shape[0] and positions[p] < stop:
        p += 1
    return p


@njit(nogil=True, cache=True)
def _histograms(queries, tiles, n, mode, query_labels, db_labels, rel_pos, total, rel):
    m = queries.shape[0]
    dist = np.empty(TILE_CODES, np.int32)
    ptr = np.zeros(m, np.int64)
    for t in range(tiles.shape[0]):
        start, stop = _tile_rows(t, n)
        for q in range(m):
            tile_distances(queries[q], tiles[t], dist)
            tq = total[q]
            rq = rel[q]
            for j in range(stop - start):
                tq[dist[j]] += 1
            if mode == BY_LABEL:
                label = query_labels[q]
                for j in range(stop - start):
                    if db_labels[start + j] == label:
                        rq[dist[j]] += 1
            else:
                end = _relevant_end(rel_pos[q], ptr[q], stop)
                for p in range(ptr[q], end):
                    rq[dist[rel_pos[q, p] - start]] += 1
                ptr[q] = end


@njit(nogil=True, cache=True)
def _precision_sums(queries, tiles, n, mode, query_labels, db_labels, rel_pos, before_total, before_rel, out):
    m = queries.shape[0]
    width = before_total.shape[1]
    dist = np.empty(TILE_CODES, np.int32)
    seen = np.zeros((m, width), np.int64)  # items of this chunk so far, per distance
    seen_rel = np.zeros((m, width), np.int64)
    ptr = np.zeros(m, np.int64)
    for t in range(tiles.shape[0]):
        start, stop = _tile_rows(t, n)
        for q in range(m):
            tile_distances(queries[q], tiles[t], dist)
            sq = seen[q]
            sr = seen_rel[q]
            acc = 0.0
            if mode == BY_LABEL:
                label = query_labels[q]
                for j in range(stop - start):
                    h = dist[j]
                    sq[h] += 1
                    if db_labels[start + j] == label:
                        sr[h] += 1
                        acc += (before_rel[q, h] + sr[h]) / (before_total[q, h] + sq[h])
            else:
                j0 = 0
                end = _relevant_end(rel_pos[q], ptr[q], stop)
                for p in range(ptr[q], end):
                    r = rel_pos[q, p] - start
                    for j in range(j0, r + 1):  # ids ascend: ties at a distance come in id order
                        sq[dist[j]] += 1
                    h = dist[r]
                    sr[h] += 1
                    acc += (before_rel[q, h] + sr[h]) / (before_total[q, h] + sq[h])
                    j0 = r + 1
                ptr[q] = end
                for j in range(j0, stop - start):
                    sq[dist[j]] += 1
            out[q] += acc


def relevance_spec(truth, ids: np.ndarray, truth_rows, query_slice=slice(None)):
    """(mode, query_labels, db_labels, rel_pos) for the fused kernels, or None when the
    relevance rule needs the generic path (multi-label rows). ``truth_rows``: the chunk's
    labels or relevance bits (``Truth.database_rows``)."""
    n = len(ids)
    if truth.kind == "labels":
        if truth.query_labels.ndim != 1:
            return None
        return (
            BY_LABEL,
            np.ascontiguousarray(truth.query_labels[query_slice], np.int64),
            np.ascontiguousarray(truth_rows, np.int64),
            np.zeros((1, 1), np.int64),
        )
    if truth.as_bits:
        return (
            BY_POSITION,
            np.zeros(1, np.int64),
            np.zeros(1, np.int64),
            relevant_positions(truth_rows, truth.n_queries)[query_slice],
        )
    neighbours = truth.neighbour_lists()[query_slice]
    pos = np.searchsorted(ids, neighbours)
    hit = (pos < n) & (ids[np.minimum(pos, max(n - 1, 0))] == neighbours) & (neighbours >= 0) if n else pos < 0
    rel_pos = np.sort(np.where(hit, pos, n), axis=1)  # each query's relevant positions, ascending, then sentinels
    return BY_POSITION, np.zeros(1, np.int64), np.zeros(1, np.int64), np.ascontiguousarray(rel_pos, np.int64)


def fused_histograms(queries, codes, spec, n_bits: int):
    m = queries.shape[0]
    total = np.zeros((m, n_bits + 1), np.int64)
    rel = np.zeros((m, n_bits + 1), np.int64)
    if len(codes):
        _histograms(as_words(queries), word_major_tiles(codes), len(codes), *spec, total, rel)
    return total, rel


def fused_precision_sums(queries, codes, spec, before_total, before_rel):
    out = np.zeros(queries.shape[0])
    if len(codes):
        _precision_sums(
            as_words(queries),
            word_major_tiles(codes),
            len(codes),
            *spec,
            np.ascontiguousarray(before_total),
            np.ascontiguousarray(before_rel),
            out,
        )
    return out
