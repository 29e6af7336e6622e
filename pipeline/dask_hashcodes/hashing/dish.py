"""DisH: hashing for distributed data (Leng et al., ICML 2015) on Dask "nodes".

consensus="admm" is Algorithm 1: P nodes (groups of rows, each computed on its own worker)
start from the same dictionary; each outer iteration is ONE pass over every node's data
that computes B_i = sgn(X_i C_i) and the local Gram term B_i^T X_i together, then K inner
ADMM steps in which nodes exchange only their d x r dictionaries with graph neighbours.
consensus="allreduce" solves the centralised objective exactly: the Gram terms of all
chunks are summed by a tree reduction and one SVD gives the shared dictionary.

Penalty rho: the paper's rho = 100 is tied to its data scale. The ADMM step balances
2 B_i^T X_i (entries grow like n_i x the data scale) against rho * t_i dictionaries (entries
of order 1), so the default is rho = rho_scale * mean(n_i) * sqrt(mean ||x - mu||^2). The
value of rho_scale was chosen on validation splits (test queries removed) of four data sets,
by recall of the exact L2 neighbours against ITQ: a large penalty holds the nodes'
dictionaries together but slows the objective's descent so much that the iteration cap ends
far from the optimum (and the stopping rule can mistake the slow descent for convergence);
a small one lets the nodes drift apart. The chosen value keeps consensus while descending
fast (the validation runs are on the DisH page of the documentation).

Stopping: after an outer iteration whose objective changed by at most ``tol`` (relative) while
the nodes' dictionaries agree to ``consensus_tol`` (largest relative difference over the graph's
edges), or after ``max_iter`` iterations (ITQ's count). From a random dictionary, DisH must
first find the leading subspace: on data whose variance sits in a few directions the rule
stops it early, but on flat spectra (sentence embeddings) the objective still falls slowly
after many iterations, and a lower cap left DisH below ITQ in the validation sweeps on
sentence embeddings.
"""

from __future__ import annotations

import logging
import time
from numbers import Integral, Real

import numpy as np

from dask_hashcodes.distributed.graph import chunk_reads, map_reduce
from dask_hashcodes.distributed.progress import steps
from dask_hashcodes.distributed.row_sums import finite_row_sums
from dask_hashcodes.errors import InputError
from dask_hashcodes.hashing.base import BITS, SEED, Scored, TrainingPlot, draw_objective, label_panel, report_row_label
from dask_hashcodes.hashing.constraints import Interval, Options
from dask_hashcodes.hashing.dish_nodes import PARTITIONS, NodeData, NodeRunner, node_groups, partition_rows
from dask_hashcodes.hashing.dish_topology import TOPOLOGIES, build_topology, edges
from dask_hashcodes.hashing.linear import LinearHasher, training_covariance
from dask_hashcodes.kernels.codes import encode_linear_grouped
from dask_hashcodes.kernels.dish import (
    admm_round,
    multiplier_step,
    node_objective,
    orthonormal_maximiser,
    random_orthonormal,
    relative_residual,
)
from dask_hashcodes.kernels.gram import centred_sq_norm, gram_chunk
from dask_hashcodes.kernels.stats import add, add_partials, top_eigenvectors
from dask_hashcodes.storage.npz import FLOAT

log = logging.getLogger(__name__)
BYTES_PER_FLOAT = 8


class DisH(LinearHasher):
    """Distributed hashing: P nodes learn one linear hash dictionary together, each from its own rows.

    Learned: ``dictionaries_`` (P, d, r); ``components_`` = the dictionary of node
    ``dictionary`` (DisH2); ``node_of_row_`` is not stored (DisH1 needs the partition,
    recomputed from the parameters).

    Parameters
    ----------
    n_bits : int, default=32
        Code length: the number of bits each row is encoded into, one per principal direction,
        so at most the number of features.
    consensus : {'admm', 'allreduce'}, default='admm'
        'admm': the paper's Algorithm 1, nodes exchanging only their dictionaries with graph
        neighbours; 'allreduce' (method dish-allreduce): the centralised objective solved
        exactly from Gram terms summed over every chunk, one shared dictionary.
    nodes : int, default=10
        Number of nodes P, the groups of rows that each learn a dictionary on their own
        worker. More nodes spread the work and take longer to agree.
    topology : {'random', 'ring', 'star', 'complete'} or list, default='random'
        Graph of the nodes, along whose edges dictionaries are exchanged; a list of [i, j]
        node pairs gives the edges explicitly. Denser graphs reach consensus in fewer steps
        and exchange more per step.
    partition : {'contiguous', 'random', 'by-label'}, default='contiguous'
        How the rows are divided among the nodes: contiguous runs of rows, random blocks, or
        one label's rows per node (the paper's hardest, non-identically distributed case).
    inner_steps : int, default=5
        ADMM steps K per outer iteration, in which the nodes exchange dictionaries without
        reading the data again.
    rho : float or None, default=None
        ADMM penalty rho holding neighbouring dictionaries together; None: scaled to the data
        by rho_scale. A larger penalty keeps consensus and slows the objective's descent.
    rho_scale : float, default=0.03
        rho = this x mean node size x RMS distance to the mean, when rho is None: the penalty
        in units that hold for any data scale and node size.
    max_iter : int, default=50
        Outer iterations at most, one pass over every node's data each (ITQ's count).
    tol : float, default=1e-05
        Stop after an outer iteration that changes the objective by at most this (relative)
        while the dictionaries agree to consensus_tol; 0 always runs max_iter iterations.
    consensus_tol : float, default=1e-3
        Largest relative difference between neighbouring nodes' dictionaries at which they
        count as agreeing, for the stopping rule.
    init : {'random', 'pca'}, default='random'
        Starting dictionaries: random (the paper's), or the principal directions, which skips
        the search for the leading subspace at the cost of one covariance pass.
    dictionary : int, default=0
        Node whose dictionary encodes new rows (DisH2); any node's works once they agree.
    random_state : int or None, default=0
        Seed of the fit's random draws; the same seed on the same data gives the same codes.
        None draws fresh entropy (recorded as ``seed_``, so the fit can still be repeated).
    """

    method = "dish"
    linear_pca_based = True
    supports_checkpoint = True
    _parameter_constraints = {
        "n_bits": BITS,
        "consensus": [Options({"admm", "allreduce"})],
        "nodes": [Interval(Integral, 1, None, closed="left")],
        "topology": [Options(set(TOPOLOGIES)), list],
        "partition": [Options(set(PARTITIONS))],
        "inner_steps": [Interval(Integral, 1, None, closed="left")],
        "rho": [Interval(Real, 0, None, closed="neither"), None],
        "rho_scale": [Interval(Real, 0, None, closed="neither")],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "tol": [Interval(Real, 0, None, closed="left")],
        "consensus_tol": [Interval(Real, 0, None, closed="left")],
        "init": [Options({"random", "pca"})],
        "dictionary": [Interval(Integral, 0, None, closed="left")],
        "random_state": SEED,
    }

    def __init__(
        self,
        n_bits: int = 32,
        *,
        consensus: str = "admm",
        nodes: int = 10,
        topology="random",
        partition: str = "contiguous",
        inner_steps: int = 5,
        rho: float | None = None,
        rho_scale: float = 0.03,
        max_iter: int = 50,
        tol: float = 1e-5,
        consensus_tol: float = 1e-3,
        init: str = "random",
        dictionary: int = 0,
        random_state: int | None = 0,
    ):
        self.n_bits = n_bits
        self.consensus = consensus
        self.nodes = nodes
        self.topology = topology
        self.partition = partition
        self.inner_steps = inner_steps
        self.rho = rho
        self.rho_scale = rho_scale
        self.max_iter = max_iter
        self.tol = tol
        self.consensus_tol = consensus_tol
        self.init = init
        self.dictionary = dictionary
        self.random_state = random_state

    @property
    def passes_over_rows_repeatedly(self) -> bool:
        """The all-reduce variant passes over every chunk each iteration, so ``fit`` keeps the
        rows on the workers; ADMM nodes keep their own rows on their own workers (NodeData)."""
        return self.consensus == "allreduce"

    def labels_for_fit(self, y):
        """Single labels feed the by-label partition; multi-label rows are not used."""
        return y if y is not None and np.ndim(y) == 1 else None

    def _fit(self, X, y, checkpoint):
        if self.dictionary >= self.nodes:
            raise InputError(
                f"The 'dictionary' parameter of DisH must be a node number in [0, {self.nodes - 1}]. "
                f"Got {self.dictionary} instead."
            )
        rng = np.random.default_rng(self.seed_)
        d, r = X.shape[1], self.n_bits
        if self.consensus == "allreduce":
            return self._fit_allreduce(X, rng, checkpoint)
        P = self.nodes
        neighbours = build_topology(self.topology, P, seed=self.seed_)
        node_rows = partition_rows(X, P, self.partition, self.seed_, y)
        runner = NodeRunner(P)
        data = NodeData(runner, X, node_rows, "dish")

        def node_sums():
            data.refresh()
            return runner.gather([data.reduce(i, "dish-mean", finite_row_sums, add_partials) for i in range(P)])

        # global mean by one O(d) reduction of per-node sums (each computed on its node)
        sums = runner.retrying(node_sums)
        n_total = sum(s[0] for s in sums)
        self.mean_ = sum(s[1] for s in sums) / n_total
        node_sq = [centred_sq_norm(*s, self.mean_) for s in sums]  # ||X_i - mean||^2, for objective (3)
        rho = self.rho if self.rho is not None else self.rho_scale * (n_total / P) * np.sqrt(sum(node_sq) / n_total)

        history = {
            "objective": [],
            "consensus_residual": [],
            "bytes_exchanged_per_node": [],
            "pass_seconds": [],
            "admm_seconds": [],
        }
        prev, start = None, 0
        ckpt, saved = self._checkpoint(
            X, checkpoint, {"dictionaries": (FLOAT, (P, d, r)), "multipliers": (FLOAT, (P, d, r))}
        )
        if saved is not None:  # resume: the dictionaries and multipliers after iteration `start`
            start, arrays, meta = saved
            C, Lam = list(arrays["dictionaries"]), list(arrays["multipliers"])
            history, prev = meta["history"], meta["objective"]
            log.info("dish %d bits: resuming after iteration %d from %s", r, start, ckpt.path)
        else:
            C0 = self._initial_dictionary(X, d, r, rng)
            C = [C0] * P
            Lam = [np.zeros((d, r))] * P
        dict_bytes = d * r * BYTES_PER_FLOAT
        C_now = C
        for it in steps(range(start, self.max_iter), f"DisH {r} bits: ADMM iterations", initial=start):
            # a whole iteration is redone from (C, Lam) if a node's worker dies during it
            objective, C, Lam, pass_seconds, admm_seconds = runner.retrying(
                self._admm_iteration, runner, data, node_sq, sums, C, Lam, neighbours, rho
            )
            C_now = C
            history["pass_seconds"].append(round(pass_seconds, 4))
            history["admm_seconds"].append(round(admm_seconds, 4))
            residual = max(relative_residual(C_now[i], C_now[j]) for i, j in edges(neighbours)) if P > 1 else 0.0
            history["objective"].append(objective)
            history["consensus_residual"].append(residual)
            history["bytes_exchanged_per_node"].append(
                [self.inner_steps * len(neighbours[i]) * dict_bytes for i in range(P)]
            )
            log.info(
                "dish %d bits: iteration %d, objective %.6g, consensus residual %.3g, %d bytes of dictionaries "
                "received per node (max)",
                r,
                it + 1,
                objective,
                residual,
                max(history["bytes_exchanged_per_node"][-1]),
            )
            if (
                prev is not None
                and abs(prev - objective) <= self.tol * abs(objective)
                and residual <= self.consensus_tol
            ):
                break
            prev = objective
            if ckpt is not None:
                ckpt.save(
                    it + 1,
                    {"dictionaries": np.stack(C_now), "multipliers": np.stack(Lam)},
                    {"history": history, "objective": objective},
                )
        self.dictionaries_ = np.stack(C_now)
        self.components_ = self.dictionaries_[self.dictionary]
        self.n_iter_ = len(history["objective"])
        self.training_stats_.update(
            {
                "consensus": "admm",
                "nodes": P,
                "rho": float(rho),
                "iterations": len(history["objective"]),
                "passes": 1 + len(history["objective"]),
                "edges": [list(e) for e in edges(neighbours)],
                "node_rows": [int(len(rows)) for rows in node_rows],
                "pinned": runner.pinned,
                "node_rows_held": data.held,  # on their workers, or read from storage every pass
                "placement": runner.placement,
                "worker_changes": runner.replacements,
                "redone_steps": runner.attempt,
                **history,
            }
        )

    def _admm_iteration(self, runner, data, node_sq, sums, C, Lam, neighbours, rho):
        """One outer iteration from the client's (C, Lam): one pass over each node's data
        (B_i = sgn(X_i C_i) fused with B_i^T X_i), then the ADMM steps. The nodes a worker
        holds step together, in one task per worker per exchange of dictionaries (the math is
        each node's own, kernels.dish.admm_round), so an iteration costs a few task round
        trips, not several per node: the pass of a worker's nodes is one task when their rows
        are held, the objective terms ride on the first exchange, and the last multiplier
        step, which no worker needs before the next iteration, runs here once the
        dictionaries are back. The new state comes back to the client (2 P d x r matrices),
        so a lost worker costs at most this iteration. Returns (objective, C, Lam, pass
        seconds, ADMM seconds)."""
        started = time.perf_counter()
        data.refresh()
        groups = runner.groups()
        grams = [
            data.reduce_group(nodes, "dish-gram", gram_chunk, add, [(self.mean_, C[i]) for i in nodes])
            for nodes in groups
        ]
        objective_terms = [[(node_sq[i], C[i], sums[i][0]) for i in nodes] for nodes in groups]
        states = [(nodes, [Lam[i] for i in nodes], [C[i] for i in nodes], None) for nodes in groups]
        group_of = {i: g for g, nodes in enumerate(groups) for i in nodes}
        # each group reads the states of the groups holding its nodes' neighbours, no others
        reads = [sorted({g} | {group_of[j] for i in nodes for j in neighbours[i]}) for g, nodes in enumerate(groups)]
        # exchanges of dictionaries: the first steps the dictionaries only, the later ones the
        # multipliers and then the dictionaries; the final multiplier-only step is below
        for step in range(self.inner_steps):
            states = [
                runner.submit(nodes[0], "dish-admm", _group_admm_round, states[g], grams[g],
                              [states[h] for h in reads[g]], [neighbours[i] for i in nodes], rho,
                              {"update_multiplier": step > 0, "update_dictionary": True},
                              objective_terms[g] if step == 0 else None)
                for g, nodes in enumerate(groups)
            ]  # fmt: skip
        # every round is queued on the workers already: the client waits once, not per round
        runner.wait(grams)
        passed = time.perf_counter()
        C, Lam, objectives = list(C), list(Lam), {}
        for nodes, multipliers, dictionaries, node_objectives in runner.gather(states):
            objectives.update(node_objectives)
            for i, multiplier, dictionary in zip(nodes, multipliers, dictionaries):
                C[i], Lam[i] = dictionary, multiplier
        Lam = [multiplier_step(Lam[i], C[i], [C[j] for j in neighbours[i]], rho) for i in range(len(C))]
        objective = float(sum(objectives[i] for i in range(len(C))))
        return objective, C, Lam, passed - started, time.perf_counter() - passed

    def _initial_dictionary(self, X, d, r, rng):
        if self.init == "pca":
            _, cov = training_covariance(X, "dish")
            return top_eigenvectors(cov, r)[1]
        return random_orthonormal(d, r, rng)

    def _fit_allreduce(self, X, rng, checkpoint):
        import dask

        d, r = X.shape[1], self.n_bits
        chunks = chunk_reads(X)
        n, col_sum, sq_sum = dask.compute(map_reduce("dish-mean", finite_row_sums, add_partials, chunks))[0]
        self.mean_ = col_sum / n
        sq_norm = centred_sq_norm(n, col_sum, sq_sum, self.mean_)
        history = {"objective": []}
        prev, start = None, 0
        ckpt, saved = self._checkpoint(X, checkpoint, {"dictionary": (FLOAT, (d, r))})
        if saved is not None:
            start, arrays, meta = saved
            C, history, prev = arrays["dictionary"], meta["history"], meta["objective"]
            log.info("dish-allreduce %d bits: resuming after iteration %d from %s", r, start, ckpt.path)
        else:
            C = self._initial_dictionary(X, d, r, rng)
        for it in steps(range(start, self.max_iter), f"DisH {r} bits: iterations", initial=start):
            gram = dask.compute(map_reduce("dish-gram", gram_chunk, add, chunks, self.mean_, C))[0]
            objective = node_objective(sq_norm, gram, C, n)
            history["objective"].append(objective)
            log.info("dish-allreduce %d bits: iteration %d, objective %.6g", r, it + 1, objective)
            C = orthonormal_maximiser(gram)
            if prev is not None and abs(prev - objective) <= self.tol * abs(objective):
                break
            prev = objective
            if ckpt is not None:
                ckpt.save(it + 1, {"dictionary": C}, {"history": history, "objective": objective})
        self.dictionaries_ = C[None]
        self.components_ = C
        self.n_iter_ = len(history["objective"])
        self.training_stats_.update(
            {
                "consensus": "allreduce",
                "iterations": len(history["objective"]),
                "passes": 1 + len(history["objective"]),
                "nodes": 1,
                **history,
            }
        )

    # ------------------------------------------------------------------ DisH1/DisH2 ---
    def with_dictionary(self, i: int) -> DisH:
        """A copy encoding with node i's dictionary (DisH2 with dictionary i)."""
        import copy

        other = copy.copy(self)
        other.dictionary = int(i)
        other.components_ = self.dictionaries_[i]
        return other

    # the evaluation option: how many node dictionaries DisH2 is scored with (default: all)
    evaluation_options = {"dish2_dictionaries": "all"}
    # DisH2 is scored with the dictionaries of dish2_dictionaries nodes, not one node's
    evaluation_sets = ("dictionary",)

    def evaluation_results(self, scorer, options: dict) -> list[Scored]:
        """With ADMM consensus over several nodes, the paper's two evaluations: DisH2 (every
        row encoded by one node's dictionary; mean and std over the dictionaries chosen by
        the ``dish2_dictionaries`` option, see ``dish2_dictionaries``) and DisH1 (each node
        encodes its own rows and the queries with its own dictionary). With one shared
        dictionary (allreduce, or one node): the default single row."""
        if self.consensus != "admm" or self.nodes == 1:
            return super().evaluation_results(scorer, options)
        chosen = dish2_dictionaries(self.nodes, options.get("dish2_dictionaries"), scorer.seed)
        runs = [scorer.symmetric(self.with_dictionary(i)) for i in chosen]
        metrics, std = scorer.mean_and_std([m for m, _ in runs])
        spread = {"metrics_std": std, "per_dictionary_map": [m["map"] for m, _ in runs], "dictionaries": chosen}
        return [Scored(metrics, runs[0][1], "DisH2", spread), Scored(*self._score_dish1(scorer), "DisH1")]

    def _score_dish1(self, scorer) -> tuple[dict, dict]:
        """DisH1: each node encodes its own database rows (the fit's partition, recomputed from
        the parameters) and every query with its own dictionary."""
        import dask.array as da
        from dask.base import tokenize

        view = scorer.view
        db_features = view.features
        node_rows = partition_rows(
            db_features, self.nodes, self.partition, self.seed_, self.labels_for_fit(view.labels)
        )
        groups = node_groups(node_rows, db_features.chunks[0])
        codes = da.map_blocks(
            encode_linear_grouped,
            db_features,
            groups[:, None],
            self.mean_,
            self.dictionaries_,
            dtype=np.uint8,
            chunks=(db_features.chunks[0], (self.code_size,)),
            name="dish1-encode-" + tokenize(db_features, groups, self.model_id),
        )
        return scorer.grouped(
            codes,
            groups,
            lambda queries: np.stack([self.with_dictionary(i).encode(queries) for i in range(self.nodes)]),
        )

    @classmethod
    def training_plot(cls, row: dict) -> TrainingPlot | None:
        """DisH's objective and, with ADMM consensus, how far the nodes' dictionaries are apart
        per outer iteration. A DisH1 row repeats its DisH2 row's training, so it is not drawn."""
        if "DisH1" in row.get("label", "") or not isinstance(row["training"].get("objective"), list):
            return None
        return DISH_PLOT

    def _learned_arrays(self):
        return {**super()._learned_arrays(), "dictionaries_": self.dictionaries_}

    def _fitted_array_spec(self, n_features):
        nodes = self.nodes if self.consensus == "admm" else 1  # allreduce: one shared dictionary
        return {**super()._fitted_array_spec(n_features), "dictionaries_": (FLOAT, (nodes, n_features, self.n_bits))}


def dish2_dictionaries(n_nodes: int, count: int | None, seed: int) -> list[int]:
    """Which node dictionaries DisH2 is scored with: all of them (count None, the default:
    mean and std over every choice), or ``count`` nodes drawn with the seed (count 1 is the
    paper's DisH2: one randomly selected node's hash functions encode everything)."""
    if count is None or count >= n_nodes:
        return list(range(n_nodes))
    if count < 1:
        raise InputError(f"`dish2_dictionaries` must be a positive number of nodes; got {count}")
    return sorted(np.random.default_rng(seed).choice(n_nodes, count, replace=False).tolist())


def _draw_training(rows: list, axes: list) -> None:
    """DisH's training plot: objective (3) per outer iteration relative to its first value,
    and the consensus residual of ADMM fits (largest relative dictionary difference over the
    graph's edges), on a log scale."""
    objective_ax, residual_ax = axes
    draw_objective(rows, objective_ax, "DisH objective", "outer iteration", "objective (3) / first value")
    for r in rows:
        residual = r["training"].get("consensus_residual")
        if residual is not None:
            residual_ax.semilogy(np.arange(1, len(residual) + 1), residual, marker=".", label=report_row_label(r))
    label_panel(residual_ax, "outer iteration", "max over edges ||C_i - C_j|| / ||C_i||", "consensus residual")


DISH_PLOT = TrainingPlot(2, _draw_training)


def _group_admm_round(state, grams, states, neighbours, rho, flags, objective_terms):
    """One task on a worker: an ADMM round (kernels.dish.admm_round) of each node it holds,
    reading the dictionaries of the previous round of its own group and of the groups holding
    its nodes' neighbours (``states``). ``objective_terms`` (first round only: each node's
    ||X_i - mean||^2, dictionary of the pass, row count) give each node's objective term,
    carried along in the state to the client."""
    nodes, multipliers, dictionaries, objectives = state
    if objective_terms is not None:
        objectives = {i: node_objective(sq, gram, Ci, n) for i, gram, (sq, Ci, n) in zip(nodes, grams, objective_terms)}
    current = {i: C for group_nodes, _, Cs, _ in states for i, C in zip(group_nodes, Cs)}
    stepped = [
        admm_round(gram, multiplier, current[i], [current[j] for j in node_neighbours], rho, **flags)
        for i, gram, multiplier, node_neighbours in zip(nodes, grams, multipliers, neighbours)
    ]
    return nodes, [m for m, _ in stepped], [C for _, C in stepped], objectives
