"""The Z-step's GraphCut block solver (pipeline/kernels/zstep.py) against brute force."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from pipeline.kernels.affinity import bit_coefficients, label_affinities
from pipeline.kernels.zstep import bit_energy, cut_block


@pytest.mark.parametrize("loss", ["ksh", "esplh"])
@pytest.mark.parametrize("mu", [0.0, 0.7])
def test_cut_block_finds_the_exact_minimum_over_every_assignment_of_the_block(loss, mu):
    """A block of 12 same-label points (all similar to each other in Y), the other points
    fixed: the cut's energy equals the minimum over all 2^12 assignments of the block."""
    rng = np.random.default_rng(7)
    labels = np.repeat([0, 1, 2], 12)
    Y = label_affinities(labels, 6, 8, rng)
    Z = rng.choice([-1.0, 1.0], size=(36, 6))
    bit = 3
    A = bit_coefficients(loss, Z, Y, bit)
    h = rng.choice([-1.0, 1.0], size=36)
    z = Z[:, bit].copy()
    block = np.flatnonzero(labels == 1)
    got = cut_block(A, z, block, mu, h)
    np.testing.assert_array_equal(np.delete(got, block), np.delete(z, block))
    best = np.inf
    for assignment in itertools.product([-1.0, 1.0], repeat=len(block)):
        trial = z.copy()
        trial[block] = assignment
        best = min(best, bit_energy(A, trial, mu, h))
    assert bit_energy(A, got, mu, h) == pytest.approx(best, abs=1e-9)
    assert bit_energy(A, got, mu, h) <= bit_energy(A, z, mu, h)


def test_cut_block_refuses_a_block_with_a_positive_coupling():
    A = np.array([[0.0, 1.0], [0.0, 0.0]])
    with pytest.raises(ValueError, match="not submodular"):
        cut_block(A, np.ones(2), np.array([0, 1]), 0.0, np.ones(2))
