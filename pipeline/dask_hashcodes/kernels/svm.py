"""Linear SVMs for many bits at once, solved in the primal by Newton's method over row blocks
(the h-step of MAC and of the two-step methods). Plain numpy.

Each bit j gets the L2-regularised squared-hinge SVM that LIBLINEAR solves by default
(``-s 2``, with ``-B 1``: the intercept is the weight of a constant feature 1 and is
regularised like the others):

    f_j(w) = 1/2 ||w||^2 + C sum_n max(0, 1 - t_nj w^T x~_n)^2,   x~_n = (x_n, 1),

strictly convex, so its minimiser is unique and any exact solver reaches the same w
(scikit-learn's ``LinearSVC(loss="squared_hinge")``, which wraps LIBLINEAR, is the single-
machine reference the tests compare against). With A_j the rows whose margin t_nj z_nj is
below 1 (z = X~ w), the gradient is w + 2C X~_A^T (z - t)_A and the generalised Hessian
I + 2C X~_A^T X~_A (Keerthi & DeCoste, JMLR 2005; LIBLINEAR's trust-region Newton uses the
same two). Both are sums over rows, so the rows can sit in blocks on different machines:
a block returns its (p + 1) x b partial sums, and only those small matrices travel.

The solver (``newton_svm``) runs Newton steps whose direction comes from conjugate
gradients on Hessian-vector products, stopped when the residual falls below a tenth of
the gradient (an inexact Newton method, as in LIBLINEAR's TRON), preconditioned by
I + 2C X~^T X~: the Hessian with every row counted, the same for every bit, from one pass
over the rows (``BlockSums.gram``) and one eigendecomposition per solve. It bounds each
bit's Hessian from above and has its scale in every direction, where the Hessian's
diagonal alone leaves CG hundreds of steps at a high C; the step length halves until the
objective falls (Armijo). All bits
advance together, so one pass over the rows serves every bit (a GEMM of the block with
b columns rather than b matrix-vector products), and a bit that has converged stops
moving. It stops when each bit's gradient norm is below ``tol`` times its norm at w = 0
(LIBLINEAR's primal criterion). A warm start (the previous h-step's weights, which fit
codes that changed in a few bits) needs a few Newton steps instead of a fresh solve.

The passes over the blocks are given by the caller (``BlockSums``): ``LocalBlocks`` sums
blocks held in memory in a fixed order; a distributed caller maps the same block functions
over blocks held by workers and adds the partial sums by a tree of fixed shape. Blocks are
cut from the training rows by ``row_blocks`` (boundaries that depend on the number of rows
only), so the sums, and so the weights, do not depend on how the data were chunked in
storage or on how many workers hold the blocks.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

# blocks per solve, so that the workers share the passes; at least MIN_BLOCK_ROWS rows per block
# (a GEMM large enough to run at speed) and at most MAX_BLOCK_ROWS (a block of 65536 x 785
# float64 is 411 MB: beyond that, more blocks)
TARGET_BLOCKS = 8
MIN_BLOCK_ROWS = 1024
MAX_BLOCK_ROWS = 65536
CG_FORCING = 0.1  # a Newton direction is solved to |residual| <= 0.1 |gradient| (TRON's rule)
ARMIJO = 1e-4  # sufficient decrease of the objective along a Newton direction
MAX_HALVINGS = 30


def row_blocks(n: int, block_rows: int | None = None) -> list[tuple[int, int]]:
    """(start, stop) of consecutive row blocks of ``block_rows`` rows (the last may be shorter;
    by default ``TARGET_BLOCKS`` blocks within the row limits): the boundaries depend on n only."""
    if block_rows is None:
        block_rows = min(max(-(-n // TARGET_BLOCKS), MIN_BLOCK_ROWS), MAX_BLOCK_ROWS)
    return [(start, min(start + block_rows, n)) for start in range(0, n, block_rows)]


def aligned_copy(a: np.ndarray) -> np.ndarray:
    """A fresh C-ordered float64 copy, aligned as numpy allocates. numpy picks its
    matrix-product routine by the operands' memory layout, and a received array can carry
    other strides (a (p, 1) array) or sit unaligned in its message: on a copy every process
    takes the same routine, so the same block gives the same bits of every sum wherever it
    runs."""
    return np.array(a, dtype=np.float64, order="C", copy=True)


def _aligned(F: np.ndarray) -> np.ndarray:
    """F itself, or a copy when its data is not aligned to its item size (a block received
    from another process can be): numpy's products fall back to other loops, with other
    rounding, on unaligned data, and the sums must not depend on where a block was stored."""
    return np.require(F, dtype=np.float64, requirements=["C", "A"])


def _scores(F: np.ndarray, W: np.ndarray) -> np.ndarray:
    """X~ W for W (p + 1, b): the last row of W is the intercept (the constant feature)."""
    return F @ W[:-1] + W[-1]


def _with_constant(F: np.ndarray, R: np.ndarray) -> np.ndarray:
    """X~^T R as a (p + 1, b) matrix: F^T R and the column sums of R (the constant feature)."""
    return np.vstack([F.T @ R, R.sum(axis=0, keepdims=True)])


def block_gradient_terms(F: np.ndarray, T: np.ndarray, W: np.ndarray, C: float) -> tuple[np.ndarray, np.ndarray]:
    """One block's share of (loss, gradient) at W for every bit: the loss C sum_A (1 - t z)^2
    (b,) and 2C X~_A^T (z - t)_A (p + 1, b). ``T`` holds the targets of W's bits in
    {-1, +1} (rows x b)."""
    F, T, W = _aligned(F), aligned_copy(T), aligned_copy(W)
    Z = _scores(F, W)
    slack = 1.0 - T * Z
    active = slack > 0
    residual = np.where(active, Z - T, 0.0)
    loss = C * np.where(active, slack * slack, 0.0).sum(axis=0)
    gradient = 2.0 * C * _with_constant(F, residual)
    return loss, gradient


def block_gram(F: np.ndarray, T: np.ndarray, C: float) -> np.ndarray:
    """One block's X~^T X~ ((p + 1) x (p + 1); the targets and C do not enter)."""
    F = _aligned(F)
    p = F.shape[1]
    gram = np.empty((p + 1, p + 1))
    gram[:p, :p] = F.T @ F
    gram[:p, p] = gram[p, :p] = F.sum(axis=0)
    gram[p, p] = len(F)
    return gram


def block_loss(F: np.ndarray, T: np.ndarray, W: np.ndarray, C: float) -> np.ndarray:
    """One block's C sum max(0, 1 - t z)^2 per bit at W."""
    F, T, W = _aligned(F), aligned_copy(T), aligned_copy(W)
    slack = np.maximum(1.0 - T * _scores(F, W), 0.0)
    return C * (slack * slack).sum(axis=0)


def block_hessian_products(F: np.ndarray, T: np.ndarray, W: np.ndarray, V: np.ndarray, C: float) -> np.ndarray:
    """One block's 2C X~_A^T X~_A V (p + 1, b): column j uses bit j's active rows at W."""
    F, T, W, V = _aligned(F), aligned_copy(T), aligned_copy(W), aligned_copy(V)
    both = _scores(F, np.hstack([W, V]))
    b = W.shape[1]
    active = T * both[:, :b] < 1.0
    return 2.0 * C * _with_constant(F, np.where(active, both[:, b:], 0.0))


def add_terms(a, b):
    """Partial sums of two blocks (tuples of arrays or arrays), for tree reductions."""
    if isinstance(a, tuple):
        return tuple(x + y for x, y in zip(a, b))
    return a + b


class BlockSums(Protocol):
    """Sums of a block function over every row block, in a fixed order, for the bits
    ``bits`` (column numbers of the targets; W and V hold those bits' columns), at the SVMs'
    ``C``."""

    C: float

    def gradient_terms(self, bits: np.ndarray, W: np.ndarray) -> tuple[np.ndarray, np.ndarray]: ...

    def gram(self) -> np.ndarray: ...

    def loss(self, bits: np.ndarray, W: np.ndarray) -> np.ndarray: ...

    def hessian_products(self, bits: np.ndarray, W: np.ndarray, V: np.ndarray) -> np.ndarray: ...


class BlockSolves:
    """What a caller of the solver needs from row blocks held anywhere: ``solve`` (here
    ``newton_svm`` over the blocks as a ``BlockSums``, passes summed wherever the blocks are;
    a holder may run the whole solve elsewhere instead) and ``release`` (of whatever the
    blocks hold outside this process; nothing here)."""

    n_features: int

    def solve(self, T: np.ndarray, start: np.ndarray | None = None) -> tuple[np.ndarray, dict]:
        """``newton_svm`` for the targets ``T`` (rows x bits in {-1, +1}) from ``start``."""
        return newton_svm(self.with_targets(T), self.n_features, T.shape[1], start=start)

    def release(self) -> None:
        return None


class LocalBlocks(BlockSolves):
    """``BlockSums`` over features and targets in memory, cut by ``row_blocks``; the targets
    are set per solve (``with_targets``)."""

    def __init__(self, F: np.ndarray, C: float, block_rows: int | None = None):
        self.F, self.C = np.asarray(F, dtype=np.float64), float(C)
        self.n_features = self.F.shape[1]
        self.bounds = row_blocks(len(self.F), block_rows)
        self.T = None
        self._gram = None

    def with_targets(self, T: np.ndarray) -> LocalBlocks:
        self.T = np.asarray(T, dtype=np.float64)
        return self

    def _sum(self, fn, bits, *args):
        total = None
        for start, stop in self.bounds:
            part = fn(self.F[start:stop], self.T[start:stop][:, bits], *args, self.C)
            total = part if total is None else add_terms(total, part)
        return total

    def gradient_terms(self, bits, W):
        return self._sum(block_gradient_terms, bits, W)

    def gram(self):
        if self._gram is None:  # the rows do not change: one pass serves every solve
            self._gram = self._sum(block_gram, np.arange(0))
        return self._gram

    def loss(self, bits, W):
        return self._sum(block_loss, bits, W)

    def hessian_products(self, bits, W, V):
        return self._sum(block_hessian_products, bits, W, V)


class GramPreconditioner:
    """R -> (I + 2C X~^T X~)^-1 R from the eigendecomposition of the Gram matrix X~^T X~."""

    def __init__(self, gram: np.ndarray, C: float):
        values, self.vectors = np.linalg.eigh(gram)
        self.inverse = 1.0 / (1.0 + 2.0 * C * np.maximum(values, 0.0))

    def __call__(self, R: np.ndarray) -> np.ndarray:
        return self.vectors @ (self.inverse[:, None] * (self.vectors.T @ R))


def _cg_direction(sums: BlockSums, bits, W, gradient, precondition, max_steps: int) -> tuple[np.ndarray, int]:
    """Approximate solution D of H D = -gradient, column by column (each bit its own
    Hessian), by preconditioned conjugate gradients; (D, Hessian passes)."""
    D = np.zeros_like(gradient)
    residual = -gradient
    Zr = precondition(residual)
    P = Zr.copy()
    rz = (residual * Zr).sum(axis=0)
    target = CG_FORCING * np.linalg.norm(gradient, axis=0)
    active = np.linalg.norm(residual, axis=0) > target
    passes = 0
    while active.any() and passes < max_steps:
        cols = np.flatnonzero(active)
        HP = P[:, cols] + sums.hessian_products(bits[cols], W[:, cols], P[:, cols])
        passes += 1
        curvature = (P[:, cols] * HP).sum(axis=0)
        alpha = rz[cols] / curvature
        D[:, cols] += alpha * P[:, cols]
        residual[:, cols] -= alpha * HP
        Zr[:, cols] = precondition(residual[:, cols])
        rz_new = (residual[:, cols] * Zr[:, cols]).sum(axis=0)
        P[:, cols] = Zr[:, cols] + (rz_new / rz[cols]) * P[:, cols]
        rz[cols] = rz_new
        active[cols] = np.linalg.norm(residual[:, cols], axis=0) > target[cols]
    return D, passes


def newton_svm(
    sums: BlockSums,
    n_features: int,
    n_bits: int,
    *,
    start: np.ndarray | None = None,
    tol: float = 1e-4,
    max_iter: int = 100,
    max_cg: int = 200,
) -> tuple[np.ndarray, dict]:
    """Weights (p + 1, b) of every bit's squared-hinge SVM (module docstring), the last row the
    intercepts; ``start`` a warm start (zeros if None). Returns (W, stats) with the Newton
    steps and passes over the rows it took and each bit's final relative gradient norm."""
    W = np.zeros((n_features + 1, n_bits)) if start is None else np.array(start, dtype=np.float64, copy=True)
    # the gradient at w = 0 scales the stopping rule: 2C X~^T (0 - t) = -2C X~^T t
    every = np.arange(n_bits)
    at_zero = sums.gradient_terms(every, np.zeros((n_features + 1, n_bits)))
    zero_gradient = at_zero[1]
    threshold = tol * np.maximum(np.linalg.norm(zero_gradient, axis=0), 1e-300)
    loss, gradient = at_zero if start is None else sums.gradient_terms(every, W)
    objective = 0.5 * (W * W).sum(axis=0) + loss
    gradient = gradient + W
    precondition = GramPreconditioner(sums.gram(), sums.C)
    passes, steps = (1 if start is None else 2), 0  # not counting the Gram pass, made once per row set
    unconverged = np.linalg.norm(gradient, axis=0) > threshold
    while unconverged.any() and steps < max_iter:
        cols = np.flatnonzero(unconverged)
        D, cg_passes = _cg_direction(sums, cols, W[:, cols], gradient[:, cols], precondition, max_cg)
        passes += cg_passes
        slope = (gradient[:, cols] * D).sum(axis=0)
        step = np.ones(len(cols))
        pending = np.ones(len(cols), dtype=bool)
        new_W = W[:, cols].copy()
        new_objective = objective[cols].copy()
        for _ in range(MAX_HALVINGS):
            trying = np.flatnonzero(pending)  # bits whose step is not accepted yet
            trial = W[:, cols[trying]] + step[trying] * D[:, trying]
            trial_objective = 0.5 * (trial * trial).sum(axis=0) + sums.loss(cols[trying], trial)
            passes += 1
            bound = objective[cols[trying]] + ARMIJO * step[trying] * slope[trying]
            accepted = trial_objective <= bound
            new_W[:, trying[accepted]] = trial[:, accepted]
            new_objective[trying[accepted]] = trial_objective[accepted]
            pending[trying[accepted]] = False
            if not pending.any():
                break
            step[pending] *= 0.5
        W[:, cols] = new_W
        objective[cols] = new_objective
        _, gradient_c = sums.gradient_terms(cols, W[:, cols])
        passes += 1
        gradient[:, cols] = gradient_c + W[:, cols]
        steps += 1
        stalled = cols[pending]  # no step lowered f: the direction is below rounding, so is the gradient
        unconverged[cols] = np.linalg.norm(gradient[:, cols], axis=0) > threshold[cols]
        unconverged[stalled] = False
    relative = np.linalg.norm(gradient, axis=0) / np.maximum(np.linalg.norm(zero_gradient, axis=0), 1e-300)
    return W, {"newton_steps": steps, "passes": passes, "relative_gradient": float(relative.max())}


def svm_objective(F: np.ndarray, T: np.ndarray, W: np.ndarray, C: float) -> np.ndarray:
    """f_j(w_j) for every bit (module docstring), from features and targets in memory."""
    return 0.5 * (W * W).sum(axis=0) + block_loss(np.asarray(F, dtype=np.float64), np.asarray(T, np.float64), W, C)
