"""Lloyd's k-means over a chunked array on the cluster (Dask wiring; the math is
``kernels.kmeans``), and its Hamming-space twin k-majority over packed codes
(``kernels.hamming_kmeans``).

The rows are read once and kept on the workers when they fit (distributed.resident), so each
step is one pass over memory, not storage: every chunk sends its step statistics (counts and
sums, or counts of set bits), which are added by a tree and turned into the next centres on
the client. The anchors of the anchor graph and the inverted file's coarse quantiser are
learned this way.
"""

from __future__ import annotations

import logging

import dask
import numpy as np

from dask_hashcodes.distributed.graph import chunk_reads, map_reduce, select_rows
from dask_hashcodes.distributed.progress import steps
from dask_hashcodes.distributed.resident import kept_on_workers
from dask_hashcodes.kernels.hamming_kmeans import majority_centres, majority_counts
from dask_hashcodes.kernels.kmeans import lloyd_sums, updated_centres
from dask_hashcodes.kernels.stats import add_partials

log = logging.getLogger(__name__)


def kmeans(X, n_clusters: int, n_iter: int, rng: np.random.Generator, name: str, transform=None):
    """Lloyd's k-means on the cluster from ``n_clusters`` distinct training rows drawn with
    ``rng``: (centres, inertia per iteration). Each step is one pass; only counts, m x d sums
    and the inertia travel. ``transform``: the rows are clustered as ``transform`` (a function
    of a row slab, e.g. a projection) maps them, slab by slab inside each step, so the workers
    keep the rows as stored, not a float64 copy of them."""

    def start(centres):
        return np.asarray(centres if transform is None else transform(centres), dtype=np.float64)

    def step(reads, centres):
        counts, sums, total = dask.compute(
            map_reduce(f"{name}-kmeans", lloyd_sums, add_partials, reads, centres, transform)
        )[0]
        return updated_centres(centres, counts, sums), total

    return _lloyd(X, n_clusters, n_iter, rng, f"{name}: k-means", start, step, "mean squared distance")


def kmajority(codes, n_clusters: int, n_iter: int, rng: np.random.Generator, name: str):
    """k-majority on the cluster: Lloyd's steps in Hamming space over ``codes`` (a dask array of
    packed codes) from ``n_clusters`` distinct rows drawn with ``rng``: (centre codes, total
    Hamming distance per iteration). Only integer counts travel, so the centres are the same
    whatever the chunking."""

    def step(reads, centres):
        members, ones, total = dask.compute(
            map_reduce(f"{name}-kmajority", majority_counts, add_partials, reads, centres)
        )[0]
        return majority_centres(centres, members, ones), total

    return _lloyd(codes, n_clusters, n_iter, rng, f"{name}: k-majority", np.asarray, step, "mean Hamming distance")


def _lloyd(X, n_clusters: int, n_iter: int, rng, title: str, start, step, measure: str):
    """The loop both share: the rows kept on the workers, ``start`` of the drawn rows as the
    first centres, then ``n_iter`` times ``step(chunk reads, centres)`` -> (centres, total)."""
    n = X.shape[0]
    # every step passes over the rows: read (and selected from storage) once, kept on the workers
    X = kept_on_workers(X, title)
    rows = np.sort(rng.choice(n, n_clusters, replace=False))
    centres = start(select_rows(X, rows, keep=True).compute())
    reads, totals = chunk_reads(X), []
    for it in steps(range(n_iter), f"{title} iterations"):
        centres, total = step(reads, centres)
        totals.append(total)
        log.info("%s step %d/%d, %s %.6g", title, it + 1, n_iter, measure, total / n)
    return centres, totals
