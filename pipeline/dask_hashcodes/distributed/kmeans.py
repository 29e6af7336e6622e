"""Lloyd's k-means over a chunked array on the cluster (Dask wiring; the math is
``kernels.kmeans``).

The rows are read once and kept on the workers when they fit (distributed.resident), so each
step is one pass over memory, not storage: every chunk sends its counts, m x d sums and inertia
(``kernels.kmeans.lloyd_sums``), which are added by a tree and turned into the next centres on
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
from dask_hashcodes.kernels.kmeans import lloyd_sums, updated_centres
from dask_hashcodes.kernels.stats import add_partials

log = logging.getLogger(__name__)


def kmeans(X, n_clusters: int, n_iter: int, rng: np.random.Generator, name: str, transform=None):
    """Lloyd's k-means on the cluster from ``n_clusters`` distinct training rows drawn with
    ``rng``: (centres, inertia per iteration). Each step is one pass; only counts, m x d sums
    and the inertia travel. ``transform``: the rows are clustered as ``transform`` (a function
    of a row slab, e.g. a projection) maps them, slab by slab inside each step, so the workers
    keep the rows as stored, not a float64 copy of them."""
    n = X.shape[0]
    # every step passes over the rows: read (and selected from storage) once, kept on the workers
    X = kept_on_workers(X, f"{name} k-means")
    rows = np.sort(rng.choice(n, n_clusters, replace=False))
    centres = select_rows(X, rows, keep=True).compute()
    centres = np.asarray(centres if transform is None else transform(centres), dtype=np.float64)
    reads, inertia = chunk_reads(X), []
    for it in steps(range(n_iter), f"{name}: k-means iterations"):
        counts, sums, total = dask.compute(
            map_reduce(f"{name}-kmeans", lloyd_sums, add_partials, reads, centres, transform)
        )[0]
        centres = updated_centres(centres, counts, sums)
        inertia.append(total)
        log.info("%s: k-means step %d/%d, mean squared distance %.6g", name, it + 1, n_iter, total / n)
    return centres, inertia
