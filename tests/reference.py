"""Brute-force references: the slowest, most obvious implementation of each metric/search."""

from __future__ import annotations

import itertools

import numpy as np


def popcount_distances(q: np.ndarray, c: np.ndarray) -> np.ndarray:
    qb = np.unpackbits(q, axis=1)
    cb = np.unpackbits(c, axis=1)
    return (qb[:, None, :] != cb[None, :, :]).sum(axis=2)


def full_ranking(dist_row: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Positions sorted by (distance, id)."""
    return np.lexsort((ids, dist_row))


def average_precision(rel_ranked: np.ndarray) -> float:
    hits, total = 0, 0.0
    for pos, r in enumerate(rel_ranked, start=1):
        if r:
            hits += 1
            total += hits / pos
    return total / hits if hits else 0.0


def map_full(dist: np.ndarray, relevant: np.ndarray, ids: np.ndarray) -> float:
    return float(np.mean([average_precision(relevant[q][full_ranking(dist[q], ids)]) for q in range(dist.shape[0])]))


def tie_aware_ap_enumerated(dist_row, rel_row) -> float:
    """Average of AP over every ordering of items inside each equal-distance group."""
    groups = [np.flatnonzero(dist_row == h) for h in np.unique(dist_row)]
    per_group_orders = [list(itertools.permutations(rel_row[g])) for g in groups]
    aps = [
        average_precision(np.concatenate([np.array(o) for o in combo]))
        for combo in itertools.product(*per_group_orders)
    ]
    return float(np.mean(aps))


def map_at_k(dist, relevant, ids, k) -> float:
    vals = []
    for q in range(dist.shape[0]):
        r = relevant[q][full_ranking(dist[q], ids)][:k]
        vals.append(average_precision(r))
    return float(np.mean(vals))


def precision_recall_at_radius(dist, relevant, radius):
    precisions, recalls, failed = [], [], 0
    for q in range(dist.shape[0]):
        ret = dist[q] <= radius
        if ret.sum() == 0:
            failed += 1
            precisions.append(0.0)
        else:
            precisions.append(relevant[q][ret].sum() / ret.sum())
        n_rel = relevant[q].sum()
        recalls.append(relevant[q][ret].sum() / n_rel if n_rel else 0.0)
    return float(np.mean(precisions)), float(np.mean(recalls)), failed / dist.shape[0]


def topk_bruteforce(dist, ids, k):
    order = np.array([full_ranking(dist[q], ids)[:k] for q in range(dist.shape[0])])
    return np.take_along_axis(dist, order, axis=1), ids[order]


def l2_topk_bruteforce(Q, X, ids, k):
    d = ((Q[:, None, :].astype(np.float64) - X[None, :, :].astype(np.float64)) ** 2).sum(axis=2)
    order = np.array([np.lexsort((ids, d[q]))[:k] for q in range(len(Q))])
    return np.take_along_axis(d, order, axis=1), ids[order]


def signs(projections: np.ndarray) -> np.ndarray:
    """{-1, +1} codes as float (the math of ITQ/DisH written out); 0 maps to +1."""
    return np.where(projections >= 0, 1.0, -1.0).astype(projections.dtype, copy=False)
