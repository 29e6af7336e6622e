"""Periodic hash functions, plain numpy: spectral hashing's eigenfunctions (Weiss, Torralba &
Fergus, NIPS 2008) and shift-invariant kernel hashing (Raginsky & Lazebnik, NIPS 2009).

Both are h(x) = sgn(cos((x - mean) W + phase) + offset), one column of W, phase and offset
per bit, so one encoder serves both:

* SH: bit b is the 1-D eigenfunction of mode k along principal direction j,
  sin(pi/2 + k pi (y_j - lo_j) / (hi_j - lo_j)) with y_j = (x - mean) . pc_j, i.e.
  W[:, b] = omega pc_j, phase = -omega lo_j, offset 0, omega = k pi / (hi_j - lo_j).
* SIKH: W ~ N(0, 1 / bandwidth^2), phase ~ U[0, 2 pi), offset ~ U[-1, 1]: random Fourier
  features of a Gaussian kernel, thresholded at a random level.
"""

from __future__ import annotations

import numpy as np

from dask_hashcodes.kernels.codes import code_size, pack_signs, project_slabs


def spectral_modes(ranges: np.ndarray, n_bits: int) -> tuple[np.ndarray, np.ndarray]:
    """(direction j, mode k >= 1) of the n_bits 1-D eigenfunctions with the smallest
    eigenvalues (k pi / range_j)^2 over every principal direction: the analytic
    eigenfunctions of a uniform density on the box [lo, hi] (paper eq. 6). The constant mode
    k = 0 is never used. Ties go to the earlier direction, then the smaller k."""
    ranges = np.asarray(ranges, dtype=np.float64)
    dims = np.repeat(np.arange(len(ranges)), n_bits)
    modes = np.tile(np.arange(1, n_bits + 1), len(ranges))
    eigenvalues = (modes * np.pi / ranges[dims]) ** 2
    chosen = np.argsort(eigenvalues, kind="stable")[:n_bits]
    return dims[chosen], modes[chosen]


def spectral_hash_function(pc: np.ndarray, lo: np.ndarray, hi: np.ndarray, n_bits: int):
    """(W, phase) of spectral hashing from the principal directions ``pc`` (d, p) and the
    range [lo, hi] of the centred data's projections on them."""
    dims, modes = spectral_modes(hi - lo, n_bits)
    omega = modes * np.pi / (hi - lo)[dims]
    return pc[:, dims] * omega, -omega * lo[dims]


def projection_range(X: np.ndarray, mean: np.ndarray, components: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(min, max) over a chunk's rows of (X - mean) @ components (float32, as the encoder)."""
    lo = np.full(components.shape[1], np.inf)
    hi = np.full(components.shape[1], -np.inf)
    for _, projected in project_slabs(X, mean, components):
        lo = np.minimum(lo, projected.min(axis=0))
        hi = np.maximum(hi, projected.max(axis=0))
    return lo, hi


def combine_ranges(a: tuple, b: tuple) -> tuple[np.ndarray, np.ndarray]:
    return np.minimum(a[0], b[0]), np.maximum(a[1], b[1])


def encode_cosine(X: np.ndarray, mean: np.ndarray, W: np.ndarray, phase: np.ndarray, offset: np.ndarray) -> np.ndarray:
    """Packed codes of sgn(cos((X - mean) W + phase) + offset); >= 0 gives bit 1."""
    phase32, offset32 = np.asarray(phase, np.float32), np.asarray(offset, np.float32)
    out = np.empty((X.shape[0], code_size(np.shape(W)[1])), np.uint8)
    for rows, projected in project_slabs(X, mean, W):
        out[rows] = pack_signs(np.cos(projected + phase32) + offset32)
    return out
