"""Anchor graph hashing (AGH, one or two layers) as a distributed estimator (kernels/agh.py).

Passes over the data: ``kmeans_iter`` Lloyd steps (per-chunk assignment counts and sums,
tree-reduced; the m x d centres travel), one for sigma (the mean distance to the s-th
nearest anchor), one for Z^T Z (m x m), and with two layers one for the thresholds' terms
(2 x r/2 x m). The spectral step is m x m on the client. Encoding maps every chunk to its s
nearest anchors and sums s rows of W per point.
"""

from __future__ import annotations

import logging
from numbers import Integral

import dask
import numpy as np
from sklearn.utils._param_validation import Interval

from dask_hashcodes.distributed.graph import chunk_reads, map_reduce, select_rows
from dask_hashcodes.distributed.progress import steps
from dask_hashcodes.errors import InputError
from dask_hashcodes.hashing.base import BITS, SEED, Hasher
from dask_hashcodes.kernels.agh import (
    agh_projection,
    anchor_gram,
    encode_anchor_graph,
    lloyd_sums,
    second_layer_sums,
    second_layer_thresholds,
    sth_distance_sum,
    updated_centres,
)
from dask_hashcodes.kernels.stats import add_partials
from dask_hashcodes.storage.npz import FLOAT
from dask_hashcodes.validation import check_int_param

log = logging.getLogger(__name__)


def kmeans(X, n_clusters: int, n_iter: int, rng: np.random.Generator, name: str):
    """Lloyd's k-means on the cluster from ``n_clusters`` distinct training rows drawn with
    ``rng``: (centres, inertia per iteration). Each step is one pass; only counts, m x d sums
    and the inertia travel."""
    n = X.shape[0]
    rows = np.sort(rng.choice(n, n_clusters, replace=False))
    centres = np.asarray(select_rows(X, rows, keep=True).compute(), dtype=np.float64)
    reads, inertia = chunk_reads(X), []
    for it in steps(range(n_iter), f"{name}: k-means iterations"):
        counts, sums, total = dask.compute(map_reduce(f"{name}-kmeans", lloyd_sums, add_partials, reads, centres))[0]
        centres = updated_centres(centres, counts, sums)
        inertia.append(total)
        log.info("%s: k-means step %d/%d, mean squared distance %.6g", name, it + 1, n_iter, total / n)
    return centres, inertia


ANCHOR_GRAPH_PARAMETERS = {
    "n_bits": BITS,
    "n_anchors": [Interval(Integral, 2, None, closed="left")],
    "n_nearest": [Interval(Integral, 1, None, closed="left")],
    "kmeans_iter": [Interval(Integral, 0, None, closed="left")],
    "random_state": SEED,
}


class AnchorGraphHasher(Hasher):
    """What AGH and DGH share: the anchor graph (k-means anchors, sigma, Z^T Z and Z^T 1)
    and the encoder h(x) = sgn(z(x) W) (W = ``components_``, (m, r)), with AGH's second
    layer when ``_second_layer`` gives thresholds. Subclasses take ``n_anchors``,
    ``n_nearest`` and ``kmeans_iter``."""

    def _graph_sizes(self, n: int, functions: int) -> tuple[int, int]:
        """(m, s), checked, for ``functions`` eigenfunctions of the graph."""
        owner = type(self).__name__
        m = check_int_param(self.n_anchors, "n_anchors", owner, 2, n)  # anchors start as training rows
        s = check_int_param(self.n_nearest, "n_nearest", owner, 1, m)
        check_int_param(functions, "eigenfunctions", f"{owner} (the trivial eigenvector excluded)", 1, m - 1)
        return m, s

    def _fit_graph(self, X, m: int, s: int):
        """Sets ``anchors_`` and ``sigma_``; returns (Z^T Z, Z^T 1, k-means inertia per step).
        Passes: ``kmeans_iter`` + 2."""
        name = self.method
        self.anchors_, inertia = kmeans(X, m, self.kmeans_iter, np.random.default_rng(self.seed_), name)
        reads = chunk_reads(X)
        rows, total = dask.compute(
            map_reduce(f"{name}-sigma", sth_distance_sum, add_partials, reads, self.anchors_, s)
        )[0]
        self.sigma_ = total / rows
        if not self.sigma_ > 0:
            raise InputError(
                f"{type(self).__name__}: every row coincides with its anchors; the data has no spread to hash"
            )
        gram, column_sums = dask.compute(
            map_reduce(f"{name}-gram", anchor_gram, add_partials, reads, self.anchors_, s, self.sigma_)
        )[0]
        return gram, column_sums, inertia

    def _second_layer(self):
        """(2, r) thresholds of a second bit per eigenfunction, or None (one bit each)."""
        return None

    def _encode_kernel(self, block):
        return encode_anchor_graph(
            block, self.anchors_, self.n_nearest, self.sigma_, self.components_, self._second_layer()
        )

    def _learned_arrays(self):
        return {"anchors_": self.anchors_, "components_": self.components_, "sigma_": np.float64(self.sigma_)}

    def _fitted_array_spec(self, n_features):
        m = self.n_anchors  # a fit refuses fewer rows than anchors: exactly m k-means centres
        return {
            "anchors_": (FLOAT, (m, n_features)),
            "components_": (FLOAT, (m, self.n_bits)),
            "sigma_": (FLOAT, ()),
        }

    def _set_learned_arrays(self, arrays, where="the learned arrays"):
        super()._set_learned_arrays(arrays, where)
        self.sigma_ = float(arrays["sigma_"])


class AGH(AnchorGraphHasher):
    """Anchor graph hashing. ``n_anchors`` m = 300 k-means centres after ``kmeans_iter`` = 5
    Lloyd steps and ``n_nearest`` s = 2 anchors per point, the paper's settings. ``layers`` = 1:
    one bit per eigenfunction; 2 (method ``agh2``): n_bits / 2 eigenfunctions, two bits each.
    Learned: ``anchors_`` (m, d), ``sigma_``, ``components_`` (m, eigenfunctions) = W,
    ``eigenvalues_``, with two layers ``thresholds_`` (2, n_bits / 2)."""

    method = "agh"
    _parameter_constraints = {**ANCHOR_GRAPH_PARAMETERS, "layers": [Interval(Integral, 1, 2, closed="both")]}

    def __init__(
        self,
        n_bits: int = 32,
        *,
        n_anchors: int = 300,
        n_nearest: int = 2,
        kmeans_iter: int = 5,
        layers: int = 1,
        random_state: int | None = 0,
    ):
        self.n_bits = n_bits
        self.n_anchors = n_anchors
        self.n_nearest = n_nearest
        self.kmeans_iter = kmeans_iter
        self.layers = layers
        self.random_state = random_state

    def _fit(self, X, y, checkpoint):
        n = X.shape[0]
        if self.layers == 2 and self.n_bits % 2:
            raise InputError(f"two-layer AGH gives two bits per eigenfunction; n_bits must be even, got {self.n_bits}")
        functions = self.n_bits // self.layers
        m, s = self._graph_sizes(n, functions)
        gram, column_sums, inertia = self._fit_graph(X, m, s)
        self.components_, self.eigenvalues_ = agh_projection(gram, column_sums, n, functions)
        self.thresholds_ = None
        if self.layers == 2:
            sums = dask.compute(
                map_reduce(
                    "agh-thresholds",
                    second_layer_sums,
                    add_partials,
                    chunk_reads(X),
                    self.anchors_,
                    s,
                    self.sigma_,
                    self.components_,
                )
            )[0]
            self.thresholds_ = second_layer_thresholds(n, *sums, column_sums)
        passes = self.kmeans_iter + 1 + self.layers
        self.training_stats_.update({"passes": passes, "kmeans_inertia": inertia, "sigma": self.sigma_})

    def _second_layer(self):
        return self.thresholds_

    def _learned_arrays(self):
        return {
            **super()._learned_arrays(),
            "eigenvalues_": self.eigenvalues_,
            **({} if self.thresholds_ is None else {"thresholds_": self.thresholds_}),
        }

    def _fitted_array_spec(self, n_features):
        functions = self.n_bits // self.layers
        spec = super()._fitted_array_spec(n_features)
        spec["components_"] = (FLOAT, (self.n_anchors, functions))
        spec["eigenvalues_"] = (FLOAT, (functions,))
        if self.layers == 2:
            spec["thresholds_"] = (FLOAT, (2, functions))
        return spec

    def _set_learned_arrays(self, arrays, where="the learned arrays"):
        super()._set_learned_arrays(arrays, where)
        self.thresholds_ = arrays.get("thresholds_")
