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

from dask_hashcodes.distributed.graph import select_rows
from dask_hashcodes.distributed.progress import steps_bar
from dask_hashcodes.hashing.base import BITS, SEED, labels_of_rows
from dask_hashcodes.hashing.constraints import BOOLEAN, Interval
from dask_hashcodes.hashing.deep import INPUT_SHAPE, NETWORK, DeepHashFunction
from dask_hashcodes.kernels.ranking import relevance_from_labels

log = logging.getLogger(__name__)


class DPSH(DeepHashFunction):
    """Deep pairwise-supervised hashing: a network trained on label pairs.

    Learned: ``network_``, ``mean_``, ``scale_``.

    Parameters
    ----------
    n_bits : int, default=32
        Code length: the number of bits each row is encoded into. Longer codes separate near
        rows from far ones more finely, and cost more storage and longer Hamming scans.
    quantisation_weight : float, default=0.1
        Weight eta of the quantisation term pulling the network's outputs to +-1, on the mean
        over the batch's outputs as the common PyTorch implementation weighs it.
    balance : bool, default=True
        Weigh the similar and the dissimilar pairs equally (see dpsh_loss): with many classes
        the dissimilar pairs would otherwise dominate.
    epochs : int, default=50
        Passes of the network over its training rows.
    n_labeled : int, default=5000
        Training rows drawn with the seed, every row when the data has at most this many;
        their labels define the pairwise similarities, so the cost grows with it.
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
    threads : int, default=1
        Torch threads of the network step, fixed so that results are reproducible.
    random_state : int or None, default=0
        Seed of the fit's random draws; the same seed on the same data gives the same codes.
        None draws fresh entropy (recorded as ``seed_``, so the fit can still be repeated).
    """

    method = "dpsh"
    uses_labels = True
    # no dropout in the default cnn: chosen on a validation split, where ADSH's dropout
    # lowered DPSH's map on its few thousand training rows
    default_network_options = {"cnn": {"dropout": 0.0}}
    _parameter_constraints = {
        "n_bits": BITS,
        "quantisation_weight": [Interval(Real, 0, None, closed="left")],
        "balance": [BOOLEAN],
        "epochs": [Interval(Integral, 1, None, closed="left")],
        "n_labeled": [Interval(Integral, 2, None, closed="left")],
        "batch_size": [Interval(Integral, 1, None, closed="left")],
        "learning_rate": [Interval(Real, 0, None, closed="neither")],
        "network": NETWORK,
        "input_shape": INPUT_SHAPE,
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
