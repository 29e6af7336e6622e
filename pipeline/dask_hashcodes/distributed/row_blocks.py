"""Row blocks held by the workers, and sums over them (Dask wiring, no math).

An iterative solver that needs many passes over the same rows (the SVMs of MAC's h-step:
a Newton step, its conjugate-gradient steps, its line search) scatters the rows once, as
blocks cut by ``dask_hashcodes.kernels.svm.row_blocks``, and then asks for sums of a block
function over them: each pass sends only small arguments (weights, directions), runs one
task per block where the block lives and adds the partial results by a tree of fixed shape
(``tree_reduce``). The blocks' boundaries depend on the number of rows only and the tree's
shape on the number of blocks only, so every sum, and so the solver's result, is the same
whatever the number of workers.
"""

from __future__ import annotations

import dask
import numpy as np
from dask import delayed
from dask.base import tokenize

from dask_hashcodes.distributed.graph import tree_reduce
from dask_hashcodes.distributed.progress import active_client
from dask_hashcodes.kernels import svm


def _on_bits(fn, F, T, bits, *args):
    """``fn`` on a block with the targets of ``bits`` only (the bits still moving)."""
    return fn(F, T[:, bits], *args)


class ScatteredBlocks:
    """``svm.BlockSums`` over row blocks scattered to the workers of the active client.
    ``with_targets`` scatters one solve's targets beside the blocks (int8: a byte per bit);
    ``name`` prefixes the task keys, as the dashboard shows them."""

    def __init__(self, name: str, F: np.ndarray, C: float, bounds: list[tuple[int, int]]):
        client = active_client()
        if client is None:
            raise RuntimeError("ScatteredBlocks needs an active distributed client; use svm.LocalBlocks without one")
        self.name, self.C, self.bounds = name, float(C), bounds
        self._client = client
        self._token = tokenize(F, bounds)
        scattered = client.scatter([np.ascontiguousarray(F[a:b]) for a, b in bounds], hash=False)
        # a received array can sit unaligned in its message; an aligned copy made where it
        # landed spares every pass the copy the block functions would make
        self.blocks = [
            client.submit(svm.aligned_copy, block, key=f"{name}-rows-{tokenize(block.key)}") for block in scattered
        ]
        del scattered  # released by the scheduler once the copies exist
        self.targets = None
        self._gram = None

    def with_targets(self, T: np.ndarray) -> ScatteredBlocks:
        T = np.asarray(T, dtype=np.int8)
        token = tokenize(T)
        if self.targets is not None:
            if token == self._targets_token:  # the same codes again (the C grid): already there
                return self
            self._client.cancel(self.targets)  # the previous solve's targets are not needed any more
        self.targets = self._client.scatter([T[a:b] for a, b in self.bounds], hash=False)
        self._targets_token = token
        return self

    def _sum(self, step: str, fn, bits, *args):
        token = tokenize(self._token, self._targets_token, fn, bits, args, self.C)
        parts = [
            delayed(_on_bits, pure=True)(
                fn, block, targets, bits, *args, self.C, dask_key_name=f"{self.name}-{step}-{token}-{i}"
            )
            for i, (block, targets) in enumerate(zip(self.blocks, self.targets))
        ]
        return dask.compute(tree_reduce(f"{self.name}-{step}-sum", parts, svm.add_terms))[0]

    def gradient_terms(self, bits, W):
        return self._sum("gradient", svm.block_gradient_terms, bits, W)

    def gram(self):
        """X~^T X~ of every row: one pass, kept while the rows stay (the targets and C do not
        enter it)."""
        if self._gram is None:
            self._gram = self._sum("gram", svm.block_gram, np.arange(0))
        return self._gram

    def loss(self, bits, W):
        return self._sum("loss", svm.block_loss, bits, W)

    def hessian_products(self, bits, W, V):
        return self._sum("hessian", svm.block_hessian_products, bits, W, V)

    def release(self) -> None:
        """Drop the scattered blocks and targets from the workers' memory."""
        self._client.cancel([*self.blocks, *(self.targets or [])])
