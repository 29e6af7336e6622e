"""Discrete graph hashing (DGH) as a distributed estimator (kernels/dgh.py).

Passes over the stored features: AGH's (``kmeans_iter`` Lloyd steps, sigma, Z^T Z for the
initial embedding), then one that keeps every chunk's anchor graph rows (s indices and s
weights per row) on the workers. From there the optimisation never reads the features: the
bits B (int8) and the continuous codes Y of each chunk stay on the workers next to its graph
rows, and per step only m x r (Z^T B) and r x r (B^T B, 1^T B) sums travel to the client,
which sends back m x r and r x r matrices. Encoding is AGH's with W = Lambda^{-1} Z^T B.
"""

from __future__ import annotations

import logging
from numbers import Integral, Real

import dask
import numpy as np
from dask import delayed

from dask_hashcodes.distributed.graph import (
    chunk_delayeds,
    chunk_reads,
    map_chunks,
    map_reduce,
    row_numbers,
    tree_reduce,
)
from dask_hashcodes.distributed.progress import steps as counted_steps
from dask_hashcodes.hashing.anchor_graph import ANCHOR_GRAPH_PARAMETERS, AnchorGraphHasher
from dask_hashcodes.hashing.constraints import Interval
from dask_hashcodes.kernels.anchor_graph import agh_projection
from dask_hashcodes.kernels.dgh import (
    anchor_sums,
    centred_spectrum,
    code_moments,
    completion_moments,
    continuous_codes,
    graph_projection,
    graph_rows,
    graph_term,
    initial_codes,
    signed_gradient_step,
    y_step,
)
from dask_hashcodes.kernels.stats import add, add_partials

log = logging.getLogger(__name__)


def _item(pair, i):
    return pair[i]


def _b_step_sums(step):
    """(Z^T B, bits changed) of a signed-gradient step's result."""
    return step[1], step[2]


class ChunkState:
    """The per-chunk quantities of a DGH run, each a list of persisted Delayed (one per row
    chunk): ``graph`` rows, bits ``codes`` and continuous ``targets`` Y."""

    def __init__(self, graph: list, m: int, seed: int):
        self.graph, self.m, self.seed = graph, m, seed
        self.codes: list = []
        self.targets: list = []

    def start(self, W: np.ndarray) -> np.ndarray:
        """B0 = sgn(Z W), Y0 = Z W; returns Z^T B0."""
        pairs = dask.persist(*map_chunks("dgh-init", initial_codes, self.graph, W))
        self.codes = [delayed(_item, pure=True)(p, 0) for p in pairs]
        self.targets = [delayed(_item, pure=True)(p, 1) for p in pairs]
        self.codes = list(dask.persist(*self.codes))
        self.targets = list(dask.persist(*self.targets))
        return dask.compute(map_reduce("dgh-init-sums", anchor_sums, add, self._with_codes(), self.m))[0]

    def _with_codes(self):
        return list(zip(self.graph, self.codes))

    def b_step(self, M: np.ndarray, half_rho: float):
        """One signed-gradient step on every chunk: returns (Z^T B, bits changed) of the new B."""
        chunks = list(zip(self.graph, self.codes, self.targets))
        steps = list(dask.persist(*map_chunks("dgh-b-step", signed_gradient_step, chunks, M, half_rho)))
        sums = tree_reduce("dgh-b-sums", [delayed(_b_step_sums, pure=True)(s) for s in steps], add_partials)
        ZtB, changed = dask.compute(sums)[0]
        self.codes = list(dask.persist(*[delayed(_item, pure=True)(s, 0) for s in steps]))
        return ZtB, int(changed)

    def code_moments(self):
        return dask.compute(map_reduce("dgh-code-moments", code_moments, add_partials, self.codes))[0]

    def completion_moments(self, k: int):
        return dask.compute(
            map_reduce("dgh-completion", completion_moments, add_partials, self._with_codes(), k, self.seed)
        )[0]

    def set_targets(self, mu, P, completion_mean, Q) -> None:
        self.targets = list(
            dask.persist(
                *map_chunks("dgh-y-step", continuous_codes, self._with_codes(), mu, P, completion_mean, Q, self.seed)
            )
        )


def _graph_chunks(X, anchors, s, sigma) -> list:
    reads = list(zip(chunk_reads(X), chunk_delayeds(row_numbers(X))))
    return list(dask.persist(*map_chunks("dgh-graph", graph_rows, reads, anchors, s, sigma)))


def optimise(state: ChunkState, W0, column_sums, n, rho, max_iter, max_b_iter):
    """Algorithm 2 from (B0, Y0) = (sgn(Z W0), Z W0) on the chunks of ``state``: returns
    (Z^T B, per-iteration statistics); B and Y are left in ``state``."""
    ZtB = state.start(W0)
    history = []
    for it in counted_steps(range(max_iter), "DGH: iterations"):
        changed_total, steps = 0, 0
        for _ in range(max_b_iter):  # Algorithm 1: until B stops changing
            ZtB, changed = state.b_step(graph_projection(ZtB, column_sums), rho / 2.0)
            changed_total += changed
            steps += 1
            if changed == 0:
                break
        BtB, code_sums = state.code_moments()
        V, singular, Vbar = centred_spectrum(BtB, code_sums, n)
        completion = None
        if Vbar.shape[1]:  # J B is rank-deficient: complete U orthogonally to [1 U]
            completion = state.completion_moments(Vbar.shape[1])
        P, Q = y_step(n, code_sums, V, singular, Vbar, completion)
        state.set_targets(code_sums / n, P, None if completion is None else completion[2] / n, Q)
        graph_value = graph_term(ZtB, column_sums)
        coupling = float(np.sqrt(n) * singular.sum())  # tr(B^T Y) at the Y-step's optimum
        history.append(
            {
                "b_steps": steps,
                "bits_changed": changed_total,
                "rank": int(len(singular)),
                "graph_term": graph_value,
                "objective": graph_value + rho * coupling,
            }
        )
        log.info(
            "dgh: iteration %d/%d, %d B-steps, %d bits changed, objective %.6g",
            it + 1,
            max_iter,
            steps,
            changed_total,
            history[-1]["objective"],
        )
        if changed_total == 0:  # B did not move: Y is the same too, a fixed point
            break
    return ZtB, history


class DGH(AnchorGraphHasher):
    """Discrete graph hashing on AGH's anchor graph.

    Alternates B-steps (signed-gradient steps on the codes) and Y-steps (the balanced,
    uncorrelated continuous codes tied to B by rho); both stop early when B stops changing.
    Initialisation DGH-I: Y0 = AGH's embedding, B0 = sgn(Y0). Learned: ``anchors_`` (m, d),
    ``sigma_``, ``components_`` (m, r) = W = Lambda^{-1} Z^T B.

    Parameters
    ----------
    n_bits : int, default=32
        Code length: the number of bits each row is encoded into. Longer codes separate near
        rows from far ones more finely, and cost more storage and longer Hamming scans.
    n_anchors : int, default=300
        k-means anchors m of the anchor graph (the paper's 300). More anchors approximate the
        neighbourhood graph more finely; the fit's eigenproblem is m x m and every encoded row
        is compared with all m.
    n_nearest : int, default=3
        Nearest anchors s each point is linked to. With more anchors per point the bits need
        a stronger pull of the balanced Y (a larger rho).
    kmeans_iter : int, default=5
        Lloyd steps of the anchors' k-means, one pass over the data each (the paper's 5);
        0 keeps the sampled rows as anchors.
    rho : float, default=10.0
        Weight rho of the penalty tying the bits B to the balanced, uncorrelated Y; small
        values let the codes follow the graph alone and lose balance.
    max_iter : int, default=20
        Alternations of the B- and Y-steps at most (the paper's T_R).
    max_b_iter : int, default=300
        Signed-gradient steps per B-step at most (T_B), one pass over the workers' graph rows
        each.
    random_state : int or None, default=0
        Seed of the fit's random draws; the same seed on the same data gives the same codes.
        None draws fresh entropy (recorded as ``seed_``, so the fit can still be repeated).
    """

    method = "dgh"
    _parameter_constraints = {
        **ANCHOR_GRAPH_PARAMETERS,
        "rho": [Interval(Real, 0, None, closed="left")],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "max_b_iter": [Interval(Integral, 1, None, closed="left")],
    }

    def __init__(
        self,
        n_bits: int = 32,
        *,
        n_anchors: int = 300,
        n_nearest: int = 3,
        kmeans_iter: int = 5,
        rho: float = 10.0,
        max_iter: int = 20,
        max_b_iter: int = 300,
        random_state: int | None = 0,
    ):
        self.n_bits = n_bits
        self.n_anchors = n_anchors
        self.n_nearest = n_nearest
        self.kmeans_iter = kmeans_iter
        self.rho = rho
        self.max_iter = max_iter
        self.max_b_iter = max_b_iter
        self.random_state = random_state

    def _fit(self, X, y, checkpoint):
        n = X.shape[0]
        m, s = self._graph_sizes(n, self.n_bits)  # DGH-I starts from n_bits eigenvectors
        gram, column_sums, inertia = self._fit_graph(X, m, s)
        W0, _ = agh_projection(gram, column_sums, n, self.n_bits)
        state = ChunkState(_graph_chunks(X, self.anchors_, s, self.sigma_), m, self.seed_)
        ZtB, history = optimise(state, W0, column_sums, n, float(self.rho), self.max_iter, self.max_b_iter)
        self.components_ = graph_projection(ZtB, column_sums)
        self.n_iter_ = len(history)
        self.training_stats_.update(
            {
                "passes": self.kmeans_iter + 3,
                "kmeans_inertia": inertia,
                "sigma": self.sigma_,
                "iterations": history,
            }
        )
