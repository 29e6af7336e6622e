"""Per-chunk metric statistics (numpy): Hamming distances of the queries to one database
chunk, the chunk's relevance, then histograms (pass 1) or precision sums (pass 2).

Single-label and Euclidean relevance with ungrouped queries take the fused kernels
(kernels.fused_metrics: no distance or relevance matrix at all); the generic path processes
queries in batches so the (queries x chunk) temporaries stay bounded whatever the chunk size.
"""

from __future__ import annotations

import numpy as np

from dask_hashcodes.kernels.fused_metrics import fused_histograms, fused_precision_sums, relevance_spec
from dask_hashcodes.kernels.hamming import n_queries, query_distances, query_rows
from dask_hashcodes.kernels.ranking import ap_precision_sums, distance_histograms

PAIRS_PER_BATCH = 1 << 23


def _query_batches(m: int, n: int):
    step = max(1, PAIRS_PER_BATCH // max(1, n))
    return [slice(s, min(m, s + step)) for s in range(0, m, step)]


def chunk_histograms(codes, ids, truth_rows, groups, *, queries, truth, n_bits):
    """(total, relevant) per query and distance 0..n_bits for one database chunk."""
    spec = relevance_spec(truth, ids, truth_rows) if groups is None else None
    if spec is not None:
        return fused_histograms(queries, codes, spec, n_bits)
    m = n_queries(queries)
    total = np.zeros((m, n_bits + 1), np.int64)
    rel = np.zeros((m, n_bits + 1), np.int64)
    for qs in _query_batches(m, len(codes)):
        dist = query_distances(query_rows(queries, qs), codes, groups)
        total[qs], rel[qs] = distance_histograms(dist, truth.chunk_relevance(ids, truth_rows, qs), n_bits)
    return total, rel


def chunk_precision_sums(codes, ids, truth_rows, groups, before_total, before_rel, *, queries, truth):
    """Sum of precision at the rank (ties by id) of each relevant item of the chunk."""
    spec = relevance_spec(truth, ids, truth_rows) if groups is None else None
    if spec is not None:
        return fused_precision_sums(queries, codes, spec, before_total, before_rel)
    m = n_queries(queries)
    out = np.zeros(m)
    for qs in _query_batches(m, len(codes)):
        dist = query_distances(query_rows(queries, qs), codes, groups)
        out[qs] = ap_precision_sums(dist, truth.chunk_relevance(ids, truth_rows, qs), before_total[qs], before_rel[qs])
    return out
