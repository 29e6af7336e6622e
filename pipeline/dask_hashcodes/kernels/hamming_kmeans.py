"""k-majority: Lloyd's algorithm in Hamming space, on packed binary codes. Plain numpy and
numba, no Dask.

The centres are binary codes themselves. A step assigns each code to its nearest centre by
Hamming distance (ties to the lower centre) and moves each centre to the bitwise majority of
its codes, the code with the least total Hamming distance to them (a tied bit keeps its
value; a centre without codes stays). The total distance never grows from one step to the
next.

It is the coarse quantiser an inverted file over codes alone can use: no feature is read,
and a step's work is a popcount per (code, centre), several times cheaper than the float
distances of k-means in a feature space. A step's statistics are integer counts, so the
centres are the same bits whatever the chunking and the order the counts are added in.
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


def majority_counts(codes: np.ndarray, centres: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """One k-majority step's statistics of a chunk of packed codes: (codes per centre int64
    (m,), per centre the count of its codes with each bit set int64 (m, bits), the total
    Hamming distance to the nearest centres)."""
    scorer = CodeCentres(centres)
    nearest, distance = scorer.nearest(codes)
    m, bits = len(scorer.centres), 8 * scorer.centres.shape[1]
    members = np.bincount(nearest, minlength=m).astype(np.int64)
    ones = np.zeros((m, bits), np.int64)
    _add_bits(np.ascontiguousarray(codes, dtype=np.uint8), nearest, ones)
    return members, ones, int(distance.sum())


@njit(nogil=True, cache=True)
def _add_bits(codes, nearest, ones):
    for r in range(codes.shape[0]):
        row = ones[nearest[r]]
        for byte in range(codes.shape[1]):
            value = codes[r, byte]
            for bit in range(8):  # numpy's packbits order: the first bit is the byte's highest
                row[8 * byte + bit] += (value >> (7 - bit)) & 1


def majority_centres(centres: np.ndarray, members: np.ndarray, ones: np.ndarray) -> np.ndarray:
    """The next centre codes: each bit the majority of the centre's codes; a tied bit, or
    every bit of a centre without codes, keeps its value."""
    old = np.unpackbits(np.asarray(centres, dtype=np.uint8), axis=1)
    twice = 2 * np.asarray(ones, dtype=np.int64)
    size = np.asarray(members, dtype=np.int64)[:, None]
    new = np.where(twice > size, 1, np.where(twice < size, 0, old)).astype(np.uint8)
    return np.packbits(new, axis=1)
