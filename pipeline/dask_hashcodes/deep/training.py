"""ADSH's network step (Algorithm 1's inner loop over mini-batches of Omega), in torch.

The loss of the sampled queries i in Omega needs the database codes V only through V^T V
and S V (their sums over the database chunks: kernels.label_similarity):

    sum_j (u_i^T v_j - c S_ij)^2 = u_i^T (V^T V) u_i - 2c u_i^T (S V)_i + const,

so an epoch runs where the network is, with two small matrices from the cluster, and its
gradient is eq. 6's. The loss is divided by the number of (query, database point) pairs of
the batch, as in the authors' code, so the learning rate does not depend on n.

DPSH's epoch (the symmetric baseline) is here too: its pairwise likelihood loss against a
buffer of every training row's latest output.
"""

from __future__ import annotations

import numpy as np

from dask_hashcodes.deep.networks import require_torch


def set_deterministic(seed: int, threads: int) -> None:
    """Seeded, deterministic torch on a fixed number of threads (a GEMM's summation order
    depends on how many threads split it)."""
    torch = require_torch()
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(threads)


def adsh_loss(u, VtV, SV, V_omega, gamma: float):
    """J of a batch up to the constant c^2 sum S^2: u (b, c) = tanh(F(x)), SV (b, c) its rows of
    S V, V_omega (b, c) the database codes of the same points."""
    torch = require_torch()
    c = VtV.shape[0]
    pairs = torch.einsum("ic,cd,id->", u, VtV, u) - 2.0 * c * (u * SV).sum()
    return pairs + gamma * ((V_omega - u) ** 2).sum()


def network_epoch(net, optimiser, X, VtV, SV, V_omega, *, gamma: float, n_database: int, batch_size: int, generator):
    """One pass over the rows of X (Omega's inputs, a float32 tensor) in random mini-batches.
    Returns the mean loss per pair over the batches and U (m, c) float64: each row's tanh
    output as its mini-batch computed it (Algorithm 1's u_i, which the V-step then uses)."""
    torch = require_torch()
    order = torch.randperm(X.shape[0], generator=generator)
    losses, U = [], np.zeros((X.shape[0], VtV.shape[0]))
    net.train()
    for batch in order.split(batch_size):
        u = torch.tanh(net(X[batch]))
        U[batch.numpy()] = u.detach().double().numpy()
        loss = adsh_loss(u, VtV, SV[batch], V_omega[batch], gamma) / (len(batch) * n_database)
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        losses.append(loss.item())
    return float(np.mean(losses)), U


def network_outputs(net, X, batch_size: int = 4096) -> np.ndarray:
    """tanh(F(X)) (n, c) float64 for the V-step and the loss (no gradient)."""
    torch = require_torch()
    net.eval()
    with torch.no_grad():
        parts = [torch.tanh(net(X[i : i + batch_size])) for i in range(0, X.shape[0], batch_size)]
    return torch.cat(parts).double().numpy()


def dpsh_loss(u, U_all, similar, eta: float, balance: bool = True):
    """DPSH's loss of a batch (Li, Wang & Kang, IJCAI 2016): the negative log-likelihood of
    the pairwise labels, theta_ij = u_i^T u_j / 2 against the training rows' latest outputs
    U_all, averaged over the pairs, plus eta times the mean quantisation error ||u - sign(u)||^2.
    ``similar`` (b, n_train) is 1 where the two rows share a label. log(1 + e^theta) is
    computed stably as log1p(e^-|theta|) + max(theta, 0).

    ``balance``: dissimilar pairs weighed by the batch's similar / dissimilar ratio (the
    weights normalised to mean 1), as the ADSH paper weighs its S. Unbalanced, 90% of the
    pairs of a 10-class set are dissimilar, and our CNN trained from scratch stayed at its
    near-zero start (loss log 2, one code for every image on Fashion-MNIST); the authors
    start from a pretrained network."""
    torch = require_torch()
    theta = 0.5 * u @ U_all.T
    likelihood = torch.log1p(torch.exp(-theta.abs())) + theta.clamp(min=0) - similar * theta
    if balance:
        dissimilar = 1.0 - similar
        ratio = similar.sum() / dissimilar.sum().clamp(min=1.0)
        weights = similar + ratio * dissimilar
        likelihood = likelihood * weights / weights.mean().clamp(min=1e-12)
    return likelihood.mean() + eta * ((u - torch.sign(u)) ** 2).mean()


def dpsh_epoch(net, optimiser, X, U_all, share, *, eta: float, balance: bool, batch_size: int, generator) -> float:
    """One pass over the training rows X (float32 tensor) in random mini-batches; U_all (n, c)
    holds every row's latest output and is updated in place (the authors' buffer U);
    ``share(rows)`` gives the (b, n) 0/1 float tensor of label sharing between the batch and
    every training row. Returns the mean loss over the batches."""
    torch = require_torch()
    order = torch.randperm(X.shape[0], generator=generator)
    losses = []
    net.train()
    for batch in order.split(batch_size):
        u = net(X[batch])
        U_all[batch] = u.detach()
        loss = dpsh_loss(u, U_all, share(batch.numpy()), eta, balance)
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        losses.append(loss.item())
    return float(np.mean(losses))
