"""Anchor graph hashing (AGH, one or two layers) as a distributed estimator (kernels/anchor_graph.py).

Passes over the data: ``kmeans_iter`` Lloyd steps (per-chunk assignment counts and sums,
tree-reduced; the m x d centres travel), one for sigma (the mean distance to the s-th
nearest anchor), one for Z^T Z (m x m), and with two layers one for the thresholds' terms
(2 x r/2 x m). The spectral step is m x m on the client. Encoding maps every chunk to its s
nearest anchors and sums s rows of W per point.
"""

from __future__ import annotations

from numbers import Integral

import dask
import numpy as np

from dask_hashcodes.distributed.graph import chunk_reads, map_reduce
from dask_hashcodes.distributed.kmeans import kmeans
from dask_hashcodes.errors import InputError
from dask_hashcodes.hashing.base import BITS, SEED, Hasher
from dask_hashcodes.hashing.constraints import Interval
from dask_hashcodes.kernels.anchor_graph import (
    agh_projection,
    anchor_gram,
    encode_anchor_graph,
    second_layer_sums,
    second_layer_thresholds,
    sth_distance_sum,
)
from dask_hashcodes.kernels.stats import add_partials
from dask_hashcodes.storage.npz import FLOAT
from dask_hashcodes.validation import check_int_param

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

    passes_over_rows_repeatedly = True

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
    """Anchor graph hashing: spectral hashing on a graph through a few k-means anchors.

    Learned: ``anchors_`` (m, d), ``sigma_``, ``components_`` (m, eigenfunctions) = W,
    ``eigenvalues_``, with two layers ``thresholds_`` (2, n_bits / 2).

    Parameters
    ----------
    n_bits : int, default=32
        Code length: the number of bits each row is encoded into. Longer codes separate near
        rows from far ones more finely, and cost more storage and longer Hamming scans.
    n_anchors : int, default=300
        k-means anchors m of the anchor graph (the paper's 300). More anchors approximate the
        neighbourhood graph more finely; the fit's eigenproblem is m x m and every encoded row
        is compared with all m.
    n_nearest : int, default=2
        Nearest anchors s each point is linked to (the paper's 2); more make the graph
        smoother.
    kmeans_iter : int, default=5
        Lloyd steps of the anchors' k-means, one pass over the data each (the paper's 5);
        0 keeps the sampled rows as anchors.
    layers : int, default=1
        1: one bit per eigenfunction; 2 (method agh2): n_bits / 2 eigenfunctions, two bits
        each, thresholded on both sides of the eigenfunction's zero, which keeps more bits
        from the informative top eigenfunctions.
    random_state : int or None, default=0
        Seed of the fit's random draws; the same seed on the same data gives the same codes.
        None draws fresh entropy (recorded as ``seed_``, so the fit can still be repeated).
    """

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
