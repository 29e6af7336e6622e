"""Asymmetric deep supervised hashing (ADSH; Jiang & Li, AAAI 2018): a network for the
queries, the database codes V learned directly, chunk by chunk on the cluster.

Algorithm 1, for ``outer_iter`` (T_out) outer iterations: draw Omega, ``n_samples`` (|Omega|)
database rows, with the seed; then ``inner_iter`` (T_in) times: one epoch of the network over
Omega in mini-batches of ``batch_size`` (pipeline/dask_hashcodes/deep/training.py), then the V-step (eq. 10,
every bit once) on every database chunk as an ``adsh-vstep`` task (pipeline/dask_hashcodes/kernels/adsh.py).

What moves: Omega's inputs and labels (|Omega| rows) and U (|Omega| x c) go to the chunk
tasks; back come V^T V, P V and 1^T V (integers: exact, so the result does not depend on the
chunking or the number of workers) and the codes of the Omega rows. S is formed inside each
task from labels, never larger than |Omega| x one chunk; V stays on the workers.

After fit, ``database_codes_`` holds V packed (the training rows' codes, a dask array); new
rows and queries are encoded by the network (sign of its outputs). Saved: the network's
weights and spec (no pickle) and the input scaling; the database codes are a codes store
written by the train workflow.
"""

from __future__ import annotations

import logging
import time
from numbers import Integral, Real

import dask
import numpy as np
from dask import delayed

from dask_hashcodes.distributed.graph import gather_rows, row_bounds, select_rows, update_and_reduce
from dask_hashcodes.distributed.progress import steps_bar
from dask_hashcodes.hashing.base import (
    BITS,
    SEED,
    TrainingPlot,
    label_chunks,
    label_panel,
    labels_of_rows,
    report_row_label,
)
from dask_hashcodes.hashing.constraints import Interval
from dask_hashcodes.hashing.deep import INPUT_SHAPE, NETWORK, DeepHashFunction
from dask_hashcodes.kernels.adsh import chunk_pass
from dask_hashcodes.kernels.codes import pack_signs
from dask_hashcodes.kernels.label_similarity import add_chunk_sums, negative_weight, similarity_product
from dask_hashcodes.kernels.ranking import tie_aware_ap
from dask_hashcodes.validation import check_int_param

log = logging.getLogger(__name__)


class ADSH(DeepHashFunction):
    """Asymmetric deep supervised hashing: a network for the queries, the database codes learned directly.

    Learned: the network (``network_``, its weights in arrays.npz), ``mean_`` and ``scale_``
    of the inputs, ``database_codes_`` (after fit only).

    Parameters
    ----------
    n_bits : int, default=32
        Code length: the number of bits each row is encoded into. Longer codes separate near
        rows from far ones more finely, and cost more storage and longer Hamming scans.
    gamma : float, default=200.0
        Weight gamma of the quantisation term tying the network's outputs to the database
        codes of the sampled rows (the paper's 200).
    outer_iter : int, default=50
        Outer iterations T_out, each with a new sample Omega (the paper's 50).
    inner_iter : int, default=3
        Network epochs + V-steps per Omega, T_in (the paper's 3).
    n_samples : int, default=2000
        Database rows sampled per outer iteration, |Omega| (the paper's 2000): the rows the
        network trains on in that iteration.
    batch_size : int, default=64
        Rows per mini-batch of the network's training.
    learning_rate : float, default=1e-3
        Adam's learning rate (Adam because the loss's scale changes with the code length and
        the label balance).
    network : {'cnn', 'mlp'}, str, dict or None, default=None
        The network: 'cnn' (images) or 'mlp' (feature vectors), a name registered with
        dask_hashcodes.deep.networks.register_network, or a spec {"name": ..., **kwargs}.
        None: by the row's size, a square image (side >= 16, grey or 3 colours) gets the cnn.
    input_shape : tuple, list or None, default=None
        Shape of a row as the network's input, e.g. (28, 28) or (3, 32, 32); None: by the
        row's size.
    threads : int, default=2
        Torch threads of the network step, fixed so that results are reproducible.
    validation_size : int, default=500
        Database rows drawn with the seed whose network codes are ranked against the
        database codes after every outer iteration, to follow training (0: none; the test
        queries are never used).
    random_state : int or None, default=0
        Seed of the fit's random draws; the same seed on the same data gives the same codes.
        None draws fresh entropy (recorded as ``seed_``, so the fit can still be repeated).
    """

    method = "adsh"
    uses_labels = True
    learns_database_codes = True
    _parameter_constraints = {
        "n_bits": BITS,
        "gamma": [Interval(Real, 0, None, closed="left")],
        "outer_iter": [Interval(Integral, 1, None, closed="left")],
        "inner_iter": [Interval(Integral, 1, None, closed="left")],
        "n_samples": [Interval(Integral, 2, None, closed="left")],
        "batch_size": [Interval(Integral, 1, None, closed="left")],
        "learning_rate": [Interval(Real, 0, None, closed="neither")],
        "network": NETWORK,
        "input_shape": INPUT_SHAPE,
        "threads": [Interval(Integral, 1, None, closed="left")],
        "validation_size": [Interval(Integral, 0, None, closed="left")],
        "random_state": SEED,
    }

    def __init__(
        self,
        n_bits: int = 32,
        *,
        gamma: float = 200.0,
        outer_iter: int = 50,
        inner_iter: int = 3,
        n_samples: int = 2000,
        batch_size: int = 64,
        learning_rate: float = 1e-3,
        network: dict | str | None = None,
        input_shape=None,
        threads: int = 2,
        validation_size: int = 500,
        random_state: int | None = 0,
    ):
        self.n_bits = n_bits
        self.gamma = gamma
        self.outer_iter = outer_iter
        self.inner_iter = inner_iter
        self.n_samples = n_samples
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.network = network
        self.input_shape = input_shape
        self.threads = threads
        self.validation_size = validation_size
        self.random_state = random_state

    # ---------------------------------------------------------------- fit -------------
    def _fit(self, X, y, checkpoint):
        from dask_hashcodes.deep.networks import build_network, require_torch
        from dask_hashcodes.deep.training import network_epoch, network_outputs, set_deterministic

        torch = require_torch()
        n = X.shape[0]
        m = check_int_param(self.n_samples, "n_samples", "ADSH (|Omega|)", 2, n)
        label_parts, labels_at = self._label_chunks(y, X)
        spec, shape = self._network_spec()
        set_deterministic(self.seed_, self.threads)
        rng = np.random.default_rng(self.seed_)
        n_val = check_int_param(self.validation_size, "validation_size", "ADSH (validation rows)", 0, n)
        val_rows = np.sort(np.random.default_rng(rng.integers(2**63)).choice(n, n_val, replace=False))
        X_val = np.asarray(select_rows(X, val_rows, keep=True).compute(), dtype=np.float32) if n_val else None
        net = build_network(spec, self.n_bits, shape)
        optimiser = torch.optim.Adam(net.parameters(), lr=self.learning_rate)
        generator = torch.Generator().manual_seed(self.seed_)

        bounds = row_bounds(X)
        # V = 0 made on the workers (at 10M rows x 32 bits it is 320 MB the client never holds)
        V = [
            delayed(np.zeros, pure=True)((b - a, self.n_bits), np.int8)
            for a, b in zip(bounds[:-1], bounds[1:], strict=True)
        ]
        V = list(dask.persist(*V))
        path, times = [], {"network": 0.0, "v_step": 0.0}
        bar = steps_bar(self.outer_iter * self.inner_iter, f"ADSH {self.n_bits} bits: epoch + V-step")
        for outer in range(self.outer_iter):
            omega = np.sort(rng.choice(n, m, replace=False))
            X_omega = np.asarray(select_rows(X, omega, keep=True).compute(), dtype=np.float32)
            if outer == 0:
                self._fit_scaling(X_omega)
            inputs = self._scaled(X_omega)
            if outer == 0 and n_val:
                X_val = self._scaled(X_val)
                validation = [val_rows, None, labels_at(val_rows)]
            started = time.perf_counter()
            omega_labels = labels_at(omega)  # once per Omega: from the labels kept on the workers
            V, sums = self._database_pass(V, label_parts, bounds, omega, omega_labels, None, 1.0)
            weight = negative_weight(sums[3], m * n)
            if outer == 0:
                # V's initial value: one V-step from V = 0 with the untrained network's outputs.
                # It gives every class its own code (S^T U is a sum over the class's Omega
                # rows), where a first epoch against V = 0 would only shrink the outputs
                # towards 0 (its loss is then gamma ||u||^2) and could leave them there.
                U0 = network_outputs(net, inputs)
                V, sums = self._database_pass(V, label_parts, bounds, omega, omega_labels, U0, weight)
            times["v_step"] += time.perf_counter() - started
            for inner in range(self.inner_iter):
                started = time.perf_counter()
                VtV, SV, V_omega = self._network_inputs(sums, omega, weight)
                loss, U = network_epoch(
                    net,
                    optimiser,
                    inputs,
                    VtV,
                    SV,
                    V_omega,
                    gamma=self.gamma,
                    n_database=n,
                    batch_size=self.batch_size,
                    generator=generator,
                )
                times["network"] += time.perf_counter() - started
                last = inner == self.inner_iter - 1
                if last and n_val:  # the validation queries' codes by the network as it now is
                    validation[1] = np.where(network_outputs(net, X_val) >= 0, 1, -1).astype(np.int8)
                started = time.perf_counter()
                V, sums = self._database_pass(
                    V, label_parts, bounds, omega, omega_labels, U, weight, validation if last and n_val else None
                )
                times["v_step"] += time.perf_counter() - started
                entry = {"outer": outer + 1, "inner": inner + 1, "loss": loss}
                if last and n_val:
                    entry["validation_map"] = float(tie_aware_ap(*sums[6]).mean())
                path.append(entry)
                bar.update(1)
                bar.set_postfix({k: round(v, 4) for k, v in entry.items() if k in ("loss", "validation_map")})
            log.info("ADSH %d bits: outer iteration %d: %s", self.n_bits, outer + 1, path[-1])
        bar.close()
        self.network_ = net
        self.network_spec_ = {"spec": spec, "input_shape": list(shape)}
        self.database_codes_ = self._packed(V, bounds)
        self.n_iter_ = self.outer_iter
        self.training_stats_.update(
            {
                "passes": self.outer_iter * (self.inner_iter + 1),
                "adsh_path": path,
                "network_seconds": round(times["network"], 3),
                "v_step_seconds": round(times["v_step"], 3),
                "loss": path[-1]["loss"],
            }
        )

    def _label_chunks(self, y, X):
        """The labels chunked like X, kept on the workers, and a function giving the labels of
        given sorted rows (Omega's)."""
        n = X.shape[0]
        labels_of_rows(y, n, np.arange(0), "ADSH (supervised)", "use an unsupervised method (itq, sgh, ...)")
        parts, bounds = label_chunks(y, X), row_bounds(X)
        return parts, lambda rows: gather_rows(parts, bounds, rows)

    def _database_pass(self, V, label_parts, bounds, omega, omega_labels, U, weight, validation=None):
        """Every chunk's chunk_pass as ``adsh-vstep`` tasks (with U) or ``adsh-sums`` (without);
        returns the new V (kept on the workers) and the combined sums."""
        name = "adsh-vstep" if U is not None else "adsh-sums"
        chunks = [(v, lab, int(a)) for v, lab, a in zip(V, label_parts, bounds[:-1], strict=True)]
        validation = None if validation is None else tuple(validation)
        return update_and_reduce(
            name, chunk_pass, chunks, add_chunk_sums, omega, omega_labels, U,
            weight=weight, gamma=float(self.gamma), validation=validation,
        )  # fmt: skip

    def _network_inputs(self, sums, omega, weight):
        import torch

        VtV, PV, ones_V, _, held, held_codes, _ = sums
        order = np.searchsorted(held, omega)  # held: Omega's rows in chunk order (sorted)
        SV = similarity_product(PV, ones_V, weight)
        as_tensor = lambda a: torch.from_numpy(np.asarray(a, dtype=np.float32))  # noqa: E731
        return as_tensor(VtV), as_tensor(SV), as_tensor(held_codes[order])

    def _packed(self, V, bounds):
        import dask.array as da

        parts = [
            da.from_delayed(delayed(_pack, pure=True)(v), shape=(int(b - a), self.code_size), dtype=np.uint8)
            for v, a, b in zip(V, bounds[:-1], bounds[1:], strict=True)
        ]
        return da.concatenate(parts).persist()

    def __getstate__(self):
        # the database codes stay where they are (on the workers): a model sent to an encode
        # task, or pickled by a user, carries the hash function only
        state = super().__getstate__()
        state.pop("database_codes_", None)
        return state

    @classmethod
    def training_plot(cls, row: dict):
        """ADSH's path (``training_stats_["adsh_path"]``): the network's loss per epoch and the
        validation map after each outer iteration."""
        return ADSH_PLOT if row["training"].get("adsh_path") else None


def _draw_training(rows: list, axes: list) -> None:
    """ADSH: the network's loss per epoch (per pair, up to a constant) and the validation map
    after each outer iteration."""
    loss_ax, map_ax = axes
    for r in rows:
        label = report_row_label(r)
        path = r["training"]["adsh_path"]
        line = loss_ax.plot(np.arange(1, len(path) + 1), [e["loss"] for e in path], label=label)[0]
        scored = [e for e in path if "validation_map" in e]
        if scored:
            map_ax.plot(
                [e["outer"] for e in scored],
                [e["validation_map"] for e in scored],
                marker=".",
                color=line.get_color(),
                label=label,
            )
    label_panel(loss_ax, "epoch (T_in per outer iteration)", "loss per pair + const", "ADSH network loss")
    label_panel(map_ax, "outer iteration", "validation map", "ADSH validation")


ADSH_PLOT = TrainingPlot(2, _draw_training)


def _pack(V):
    return pack_signs(V.astype(np.float32))
