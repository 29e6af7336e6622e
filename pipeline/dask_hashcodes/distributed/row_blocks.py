"""Row blocks held by the workers, and sums over them (Dask wiring, no math).

An iterative solver that needs many passes over the same rows (the SVMs of MAC's h-step:
a Newton step, its conjugate-gradient steps, its line search) scatters the rows once, as
blocks cut by ``dask_hashcodes.kernels.svm.row_blocks``, and then asks for sums of a block
function over them: each pass sends only small arguments (weights, directions), runs one
task per block where the block lives and adds the partial results by a tree of fixed shape
(``tree_reduce``). The blocks' boundaries depend on the number of rows only and the tree's
shape on the number of blocks only, so every sum, and so the solver's result, is the same
whatever the number of workers.

Rows small enough for one worker (``ONE_WORKER_MAX_BYTES``) are not spread over the
workers: each pass would then cost a task round trip for milliseconds of products, and a
solve takes hundreds of passes. They go to one worker once, and each whole solve runs there
as one task (``BlocksOnOneWorker``), over the same blocks added in the same tree order
(``combine_in_tree``). The solver's own steps (its preconditioner, its conjugate gradients)
then run on a worker instead of the client, so the weights agree with the scattered solve's
to the last bits of the two processes' BLAS rounding, and like them they do not depend on
the number of workers: which of the two runs depends on the rows alone.
"""

from __future__ import annotations

import dask
import numpy as np
from dask import delayed
from dask.base import tokenize

from dask_hashcodes.distributed.graph import combine_in_tree, reduction_fan_in, tree_reduce
from dask_hashcodes.distributed.progress import active_client
from dask_hashcodes.kernels import svm

# bytes of rows (float64) up to which every solve runs in one task on one worker: a pass over
# that many rows costs about what a round trip to the workers does, and spreading larger
# rows over the workers pays for its round trips with their parallel products
ONE_WORKER_MAX_BYTES = 128 * 2**20


def svm_blocks(name: str, F: np.ndarray, C: float) -> svm.BlockSolves:
    """The row blocks of ``F`` for the active client: in this process without one
    (``svm.LocalBlocks``), on one worker when the rows are small, scattered otherwise. The
    choice depends on the rows alone, never on the cluster."""
    if active_client() is None:
        return svm.LocalBlocks(F, C)
    kind = BlocksOnOneWorker if F.size * np.dtype(np.float64).itemsize <= ONE_WORKER_MAX_BYTES else ScatteredBlocks
    return kind(name, F, C, svm.row_blocks(len(F)))


def _on_bits(fn, F, T, bits, *args):
    """``fn`` on a block with the targets of ``bits`` only (the bits still moving)."""
    return fn(F, T[:, bits], *args)


class ScatteredBlocks(svm.BlockSolves):
    """``svm.BlockSums`` over row blocks scattered to the workers of the active client.
    ``with_targets`` scatters one solve's targets beside the blocks (int8: a byte per bit);
    ``name`` prefixes the task keys, as the dashboard shows them."""

    def __init__(self, name: str, F: np.ndarray, C: float, bounds: list[tuple[int, int]]):
        client = active_client()
        if client is None:
            raise RuntimeError("ScatteredBlocks needs an active distributed client; use svm.LocalBlocks without one")
        self.name, self.C, self.bounds = name, float(C), bounds
        self.n_features = F.shape[1]
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


class _BlocksInTask(svm.LocalBlocks):
    """``svm.BlockSums`` inside one task: the blocks ``ScatteredBlocks`` would scatter (the
    same contiguous copies), their partial sums added in ``tree_reduce``'s groups and order."""

    def __init__(self, F: np.ndarray, C: float, bounds: list[tuple[int, int]], fan_in: int, gram=None):
        self.C, self.bounds, self.fan_in, self.n_features = float(C), bounds, fan_in, F.shape[1]
        self.blocks = [svm.aligned_copy(F[a:b]) for a, b in bounds]
        self.T, self._gram = None, gram

    def _sum(self, fn, bits, *args):
        parts = [fn(block, self.T[a:b][:, bits], *args, self.C) for block, (a, b) in zip(self.blocks, self.bounds)]
        return combine_in_tree(parts, svm.add_terms, self.fan_in)


def _gram_in_task(F, bounds, fan_in):
    return _BlocksInTask(F, 1.0, bounds, fan_in).with_targets(np.empty((len(F), 0))).gram()  # no targets enter it


def _solve_in_task(F, T, C, bounds, fan_in, gram, start):
    return _BlocksInTask(F, C, bounds, fan_in, gram).solve(T, start)


class BlocksOnOneWorker(svm.BlockSolves):
    """Row blocks whose solves run whole on one worker: the rows are scattered once, their
    Gram matrix (the solver's preconditioner, the same for every solve) is computed there
    once, and each ``solve`` is one task sending the targets and the warm start."""

    def __init__(self, name: str, F: np.ndarray, C: float, bounds: list[tuple[int, int]]):
        client = active_client()
        if client is None:
            raise RuntimeError("BlocksOnOneWorker needs an active distributed client; use svm.LocalBlocks without one")
        self.name, self.C, self.bounds, self._client = name, float(C), bounds, client
        self._token = tokenize(F, bounds)
        fan_in = reduction_fan_in()
        self.rows = client.scatter(np.ascontiguousarray(F, dtype=np.float64), hash=False)
        self.gram = client.submit(
            _gram_in_task, self.rows, bounds, fan_in, key=f"{name}-gram-{tokenize(self._token, fan_in)}"
        )

    def solve(self, T: np.ndarray, start: np.ndarray | None = None) -> tuple[np.ndarray, dict]:
        """``svm.newton_svm`` for the targets ``T`` (sent as int8: a byte per bit), in one task."""
        T, fan_in = np.asarray(T, dtype=np.int8), reduction_fan_in()
        key = f"{self.name}-solve-{tokenize(self._token, T, self.C, start, fan_in)}"
        args = (self.rows, T, self.C, self.bounds, fan_in, self.gram, start)
        return self._client.submit(_solve_in_task, *args, key=key).result()

    def release(self) -> None:
        """Drop the rows and their Gram matrix from the workers' memory."""
        self._client.cancel([self.rows, self.gram])
