"""k-means of packed binary codes, FAISS's ``IndexBinaryIVF`` training: the kernels. Plain
numpy and numba, no Dask.

The codes are clustered as +-1 vectors, one coordinate per bit (``code_signs``), by Lloyd's
steps (kernels.kmeans): the steps assign each code to the nearest real-valued centroid,
whose coordinates weigh each bit by how firmly its codes agree on it. The centroids are then
made binary by their signs (``binary_centres``: each bit the majority of the centroid's
codes), and every row is assigned, and every query probes, by Hamming distance to those
centroid codes: a popcount per (code, centroid), several times cheaper than a float distance.

Sums of +-1 are whole numbers, exact in float64 in any order, so the centroids are the same
bits whatever the chunking.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from dask_hashcodes.kernels.hamming import TILE_CODES, as_words, popcount, word_major_tiles

# added to the keys of a tile's padding slots: no real centre's key comes near it
_PADDING_KEY = np.int64(1) << 61
_INDEX_BITS = 32  # a key is distance << 32 | centre: the smallest key is the nearest, lower centre first


class CodeCentres:
    """Centre codes (m, code bytes) laid out once for the nearest-centre kernel: word-major
    tiles of TILE_CODES centres, whose padding can never be chosen."""

    def __init__(self, centres: np.ndarray):
        self.centres = np.ascontiguousarray(centres, dtype=np.uint8)
        if self.centres.ndim != 2 or len(self.centres) == 0 or len(self.centres) >= 1 << _INDEX_BITS:
            raise ValueError(
                f"centres must be 1 to 2**32 - 1 packed codes, one row each; got {self.centres.ndim}-D input"
            )
        self.tiles = word_major_tiles(self.centres)
        self.padding = np.zeros((self.tiles.shape[0], TILE_CODES), np.int64)
        self.padding.reshape(-1)[len(self.centres) :] = _PADDING_KEY

    def nearest(self, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(nearest centre int64 (n,), its Hamming distance int64 (n,)) of each packed code."""
        codes = np.ascontiguousarray(codes, dtype=np.uint8)
        if codes.ndim != 2 or codes.shape[1] != self.centres.shape[1]:
            got = f"{codes.shape[1]}-byte codes" if codes.ndim == 2 else f"{codes.ndim}-D input"
            raise ValueError(f"packed codes of {self.centres.shape[1]} bytes, one row each, expected; got {got}")
        keys = np.empty(len(codes), np.int64)
        if len(codes):
            _nearest_keys(as_words(codes), self.tiles, self.padding, keys)
        return keys & ((1 << _INDEX_BITS) - 1), keys >> _INDEX_BITS


@njit(nogil=True, cache=True)
def _nearest_keys(words, tiles, padding, out):
    """Per code, the smallest (distance << 32 | centre) over every centre: one vectorised pass
    of popcounts per tile, then one of integer minimums (no branch per centre)."""
    dist = np.empty(TILE_CODES, np.int64)
    for r in range(words.shape[0]):
        best = np.int64(1) << 62
        for t in range(tiles.shape[0]):
            tile = tiles[t]
            for j in range(TILE_CODES):
                dist[j] = popcount(words[r, 0] ^ tile[0, j])
            for w in range(1, tiles.shape[1]):
                for j in range(TILE_CODES):
                    dist[j] += popcount(words[r, w] ^ tile[w, j])
            base = t * TILE_CODES
            pad = padding[t]
            for j in range(TILE_CODES):
                best = min(best, (dist[j] << 32) + pad[j] + base + j)
        out[r] = best


def nearest_code_centres(codes: np.ndarray, centres) -> np.ndarray:
    """Index of each packed code's nearest centre code (a CodeCentres or the (m, code bytes)
    centres), int64 (n,); ties: the lower centre."""
    scorer = centres if isinstance(centres, CodeCentres) else CodeCentres(centres)
    return scorer.nearest(codes)[0]


def code_signs(codes: np.ndarray) -> np.ndarray:
    """Packed codes as +-1 float64 vectors (rows, bits), one coordinate per bit in numpy's
    packbits order: the space k-means clusters codes in."""
    return np.unpackbits(np.asarray(codes, dtype=np.uint8), axis=1).astype(np.float64) * 2.0 - 1.0


def binary_centres(centres: np.ndarray) -> np.ndarray:
    """Real-valued centroids of +-1 vectors as packed codes: a bit is set where the
    coordinate is positive (more of the centroid's codes set it than not; a tie clears it)."""
    return np.packbits((np.asarray(centres) > 0).astype(np.uint8), axis=1)
