"""Deep pairwise-supervised hashing (DPSH; Li, Wang & Kang, IJCAI 2016): the symmetric deep
baseline of the ADSH paper. One network encodes queries and database rows alike; it is
trained on ``n_labeled`` rows drawn with the seed (5000: the ADSH paper's protocol for its
deep baselines; at least the number of rows: the whole database, the paper's DPSH-D), with
every mini-batch's loss taken against all training rows' latest outputs
(pipeline/dask_hashcodes/deep/training.py). The training rows and their labels come to the client, where
the network is trained; the database is then encoded chunk by chunk like any method.
"""

from __future__ import annotations

import logging
import time
from numbers import Integral, Real

import numpy as np
from sklearn.utils._param_validation import Interval

from dask_hashcodes.distributed.graph import select_rows
from dask_hashcodes.distributed.progress import steps_bar
from dask_hashcodes.hashing.base import BITS, SEED, labels_of_rows
from dask_hashcodes.hashing.deep import DeepHashFunction
from dask_hashcodes.kernels.ranking import relevance_from_labels

log = logging.getLogger(__name__)


class DPSH(DeepHashFunction):
    """DPSH (see the module docstring). Parameters: ``quantisation_weight`` eta (0.1, on the
    mean over the batch's outputs as the common PyTorch implementation weighs it),
    ``balance`` the similar and dissimilar pairs (True; see dpsh_loss), ``epochs`` (50),
    ``n_labeled`` training rows (5000), ``batch_size`` (64),
    ``learning_rate`` of Adam (1e-3), ``network``, ``input_shape``, ``threads`` (1) as ADSH's
    (the default cnn without dropout).
    Learned: ``network_``, ``mean_``, ``scale_``."""

    method = "dpsh"
    uses_labels = True
    # no dropout in the default cnn: chosen on a validation split, where ADSH's dropout
    # lowered DPSH's map on its few thousand training rows
    default_network_options = {"cnn": {"dropout": 0.0}}
    _parameter_constraints = {
        "n_bits": BITS,
        "quantisation_weight": [Interval(Real, 0, None, closed="left")],
        "balance": ["boolean"],
        "epochs": [Interval(Integral, 1, None, closed="left")],
        "n_labeled": [Interval(Integral, 2, None, closed="left")],
        "batch_size": [Interval(Integral, 1, None, closed="left")],
        "learning_rate": [Interval(Real, 0, None, closed="neither")],
        "network": [dict, str, None],
        "input_shape": [tuple, list, None],
        "threads": [Interval(Integral, 1, None, closed="left")],
        "random_state": SEED,
    }

    def __init__(
        self,
        n_bits: int = 32,
        *,
        quantisation_weight: float = 0.1,
        balance: bool = True,
        epochs: int = 50,
        n_labeled: int = 5000,
        batch_size: int = 64,
        learning_rate: float = 1e-3,
        network: dict | str | None = None,
        input_shape=None,
        threads: int = 1,
        random_state: int | None = 0,
    ):
        self.n_bits = n_bits
        self.quantisation_weight = quantisation_weight
        self.balance = balance
        self.epochs = epochs
        self.n_labeled = n_labeled
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.network = network
        self.input_shape = input_shape
        self.threads = threads
        self.random_state = random_state

    def _fit(self, X, y, checkpoint):
        from dask_hashcodes.deep.networks import build_network, require_torch
        from dask_hashcodes.deep.training import dpsh_epoch, set_deterministic

        torch = require_torch()
        n = X.shape[0]
        rng = np.random.default_rng(self.seed_)
        rows = np.arange(n) if self.n_labeled >= n else np.sort(rng.choice(n, self.n_labeled, replace=False))
        labels = labels_of_rows(y, n, rows, "DPSH (supervised)", "use an unsupervised method (itq, sgh, ...)")
        X_train = np.asarray(select_rows(X, rows, keep=True).compute(), dtype=np.float32)
        spec, shape = self._network_spec()
        set_deterministic(self.seed_, self.threads)
        self._fit_scaling(X_train)
        inputs = self._scaled(X_train)
        net = build_network(spec, self.n_bits, shape)
        optimiser = torch.optim.Adam(net.parameters(), lr=self.learning_rate)
        generator = torch.Generator().manual_seed(self.seed_)
        U_all = torch.zeros((len(rows), self.n_bits))

        def share(batch_rows):
            return torch.from_numpy(relevance_from_labels(labels[batch_rows], labels).astype(np.float32))

        losses, started = [], time.perf_counter()
        bar = steps_bar(self.epochs, f"DPSH {self.n_bits} bits: epochs")
        for epoch in range(self.epochs):
            losses.append(
                dpsh_epoch(
                    net,
                    optimiser,
                    inputs,
                    U_all,
                    share,
                    eta=self.quantisation_weight,
                    balance=self.balance,
                    batch_size=self.batch_size,
                    generator=generator,
                )
            )
            bar.update(1)
            bar.set_postfix(loss=round(losses[-1], 4))
            log.info("DPSH %d bits: epoch %d: loss %.6g", self.n_bits, epoch + 1, losses[-1])
        bar.close()
        self.network_ = net
        self.n_iter_ = self.epochs
        self.training_stats_.update(
            {
                "passes": 0,
                "n_labeled": len(rows),
                "loss_path": losses,
                "loss": losses[-1],
                "network_seconds": round(time.perf_counter() - started, 3),
            }
        )
