"""The built-in ``sift-synth`` source: deterministic SIFT-like vectors, written chunk-parallel.

Model
-----
A SIFT descriptor is 128 bytes: a 4x4 grid of spatial cells around a keypoint, each holding
an 8-bin histogram of gradient orientations (index ``(cell_y * 4 + cell_x) * 8 + bin``),
L2-normalised, clipped at 0.2, renormalised and stored as ``min(255, floor(512 * v))``.

1. Centres (``N_CENTRES`` = 16384 local "image structures", drawn once per seed from
   ``default_rng([seed, CENTRE_KEY])``). Each centre is itself a SIFT-like descriptor:

   * cell energy = Gaussian window (sigma = 2 cells, as in SIFT) x Gamma(1.5) contrast;
   * each cell's histogram is a von Mises bump around the cell's orientation, plus (in
     half of the cells) a weaker bump at the opposite orientation, as a line or a ridge
     gives; the cell orientations scatter around one orientation per centre, which is
     bin 0 for 40 % of the centres (descriptors are rotated to the keypoint's dominant
     gradient, so bin 0 is over-represented in real SIFT);
   * the peak sharpness (von Mises kappa 1.5..6) varies per centre, so some centres
     are spiky and sparse, others flat.

   Centres get Zipf-like popularity (p_k ~ 1 / (k + 1) ** ZIPF_EXPONENT, in a random order):
   some structures (edges, corners) are more common than others. Version 1 had 2048
   centres and exponent 0.8: the most popular centre held 5.4 % of all points (k-means
   imbalance factor n_centres * sum p_k^2 = 13.5), so at 10M points one "structure" had
   540,000 near-copies, more than a query's top 2 % (200,000), and 64-bit codes of
   thousands of them coincided exactly (Hamming ties decided by row id, not by the data).
   Real descriptor sets are not that lumpy; version 2 (16384 centres, exponent 0.5) has a
   largest share of 0.39 % and imbalance 2.6.

2. Points. A point of centre c has entries ``c_j * L + G`` before normalisation, with
   multiplicative lognormal noise L (mean 1, sigma ``LOGNORMAL_SIGMA``) and additive
   Gamma(``GAMMA_SHAPE``) noise G, shape < 1, so most of the centre's empty bins stay
   at or near 0 and a few get small counts (sparse, heavy tailed). Then the SIFT
   normalisation above.

The result has SIFT1M's coarse statistics (seed 3, 100k rows): mean norm 509 (just under
512, from the floor), 21 % zero entries, mean entry 25 (the border cells lower), largest
entry ~250, per-dimension excess kurtosis ~2.9, and clustered points (on a 20k sample the
mean nearest-neighbour distance is ~0.53 x the mean distance between random pairs; 0.41
in version 1). The top 32 / 64 principal components hold 53 % / 80 % of the variance.

Speed
-----
Drawing 128 lognormal and 128 gamma variates per row with numpy would dominate the time.
Instead each entry uses one random byte q and a table (``noise_table``): entry
``(level, q)`` is the (q + 0.5)/256 quantile of ``level * L + G`` for the centre's byte
value ``level``. So an entry costs one random byte and one table lookup, and its marginal
distribution is that of ``c_j * L + G`` quantised to 256 quantiles (finer than the uint8
output can show). ``write_sift_synth`` runs one task per zarr
chunk, each generating and writing its own rows on a worker, so the data never passes
through the client and memory per task is a chunk plus one generation block.

Determinism
-----------
Rows are produced in fixed generation blocks of ``GEN_BLOCK_ROWS`` rows; block ``b`` draws
from ``default_rng([seed, b])`` only, and ``sift_rows`` slices whole blocks. So row ``i`` is
the same whatever chunking, task order or number of workers produced it. (Bit-identity
across machines also needs the same numpy version; float32 sums may round differently
with other SIMD code paths, which could move a rare entry by one.)
"""

from __future__ import annotations

import functools

import numpy as np

from dask_hashcodes.errors import InputError
from dask_hashcodes.storage.chunkread import write_rows
from dask_hashcodes.storage.datasets import create_dataset_group, dataset_output, default_chunk_rows, open_dataset

D = 128
CELLS = 4  # 4 x 4 spatial cells
ORIENTATIONS = 8  # orientation bins per cell
GEN_BLOCK_ROWS = 65536
GENERATOR_VERSION = 2  # 1: 2048 centres, Zipf exponent 0.8 (see the module docstring)

N_CENTRES = 16384
ZIPF_EXPONENT = 0.5  # centre popularity ~ 1 / rank ** ZIPF_EXPONENT
CENTRE_KEY = 2**31  # rng key of the centres; a block number reaches it only past 1e14 rows
KAPPA_RANGE = (1.5, 6.0)  # orientation peak sharpness per centre (von Mises kappa)
LOGNORMAL_SIGMA = 0.6  # multiplicative noise per entry (mean 1)
GAMMA_SHAPE = 0.2  # additive noise per entry; shape < 1 keeps most empty bins near 0
GAMMA_SCALE = 4.0  # in centre-byte units (a centre entry is 0..255)
NOISE_LEVELS = 256  # quantiles per table row: one random byte per entry

# SIFT's own normalisation constants
SIFT_CLIP = 0.2
SIFT_SCALE = 512.0

# rows per inner step: the float32 scratch of one step stays in L2 cache
_STEP_ROWS = 1024


def sift_normalise(x: np.ndarray) -> np.ndarray:
    """SIFT's normalisation of non-negative float32 rows, in place on ``x``; returns uint8.

    L2-normalise, clip at 0.2, renormalise, scale by 512, floor, saturate at 255. Clipping
    at ``0.2 * norm`` before the first division is the same thing with one pass less.
    """
    norm = np.sqrt(np.einsum("ij,ij->i", x, x))
    clip_at = SIFT_CLIP * norm
    np.minimum(x, clip_at[:, None], out=x)
    norm = np.sqrt(np.einsum("ij,ij->i", x, x))
    # an all-zero row (impossible with G > 0, but cheap to guard) stays zero, not NaN
    scale = np.divide(SIFT_SCALE, norm, out=np.zeros_like(norm), where=norm > 0)
    x *= scale[:, None]
    # Saturating every entry costs a full pass; only rows whose largest possible entry
    # (clip_at * scale, rounded like the entries themselves) exceeds 255 need it.
    saturating = clip_at * scale > 255.0
    if saturating.any():
        x[saturating] = np.minimum(x[saturating], 255.0)
    return x.astype(np.uint8)  # truncation == floor for non-negative values


@functools.lru_cache(maxsize=1)
def noise_table() -> np.ndarray:
    """float32 (256 * NOISE_LEVELS,): entry ``level * NOISE_LEVELS + q`` is the
    (q + 0.5) / NOISE_LEVELS quantile of ``level * L + G`` (see module docstring).

    Independent of the seed; estimated from a fixed sample, so it is the same in every
    process.
    """
    rng = np.random.default_rng([0x5157, GENERATOR_VERSION])
    samples = 1 << 14
    lognormal = rng.lognormal(-(LOGNORMAL_SIGMA**2) / 2, LOGNORMAL_SIGMA, samples)  # mean 1
    gamma = rng.gamma(GAMMA_SHAPE, GAMMA_SCALE, samples)
    levels = np.arange(256, dtype=np.float64)[:, None]
    values = np.sort(levels * lognormal + gamma, axis=1)  # (256, samples)
    pick = ((np.arange(NOISE_LEVELS) + 0.5) / NOISE_LEVELS * samples).astype(np.int64)
    return np.ascontiguousarray(values[:, pick], dtype=np.float32).ravel()


def _von_mises_bins(theta: np.ndarray, kappa: np.ndarray) -> np.ndarray:
    """(..., 8) bump over the orientation bins centred on ``theta`` (in bins), peak 1."""
    bins = np.arange(ORIENTATIONS)
    angle = 2 * np.pi * (bins - theta[..., None]) / ORIENTATIONS
    return np.exp(kappa[..., None] * (np.cos(angle) - 1.0))


@functools.lru_cache(maxsize=4)
def centres(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(centre bytes as table row offsets (N_CENTRES, 128) uint16, popularity CDF (N_CENTRES,)).

    The offsets are ``level * NOISE_LEVELS``, so a point's table index is offset + random
    byte, at most 255 * 256 + 255: uint16 keeps the gather and the add cheap.
    """
    rng = np.random.default_rng([seed, CENTRE_KEY])
    k = N_CENTRES
    grid = np.arange(CELLS) - (CELLS - 1) / 2  # cell centres, in cells
    window = np.exp(-(grid[:, None] ** 2 + grid[None, :] ** 2) / (2 * 2.0**2)).ravel()
    energy = window * rng.gamma(1.5, 1.0, (k, CELLS * CELLS))

    main = np.where(rng.random(k) < 0.4, 0.0, rng.uniform(0, ORIENTATIONS, k))
    theta = main[:, None] + rng.normal(0, 1.0, (k, CELLS * CELLS))
    kappa = np.broadcast_to(rng.uniform(*KAPPA_RANGE, k)[:, None], theta.shape)
    opposite = rng.uniform(0, 0.7, theta.shape) * (rng.random(theta.shape) < 0.5)
    hist = _von_mises_bins(theta, kappa) + opposite[..., None] * _von_mises_bins(theta + ORIENTATIONS / 2, kappa)
    descriptors = (energy[..., None] * hist).reshape(k, D).astype(np.float32)
    levels = sift_normalise(descriptors).astype(np.uint16)

    popularity = 1.0 / np.arange(1, k + 1) ** ZIPF_EXPONENT
    popularity = popularity[rng.permutation(k)]
    cdf = np.cumsum(popularity / popularity.sum())
    cdf[-1] = 1.0
    return levels * NOISE_LEVELS, cdf


def _generation_block(seed: int, block: int) -> np.ndarray:
    """All GEN_BLOCK_ROWS rows of generation block ``block`` (uint8, (GEN_BLOCK_ROWS, 128))."""
    offsets, cdf = centres(seed)
    table = noise_table()
    rng = np.random.default_rng([seed, block])
    # draw everything of the block up front: the draw order must not depend on slicing
    centre_of_row = np.searchsorted(cdf, rng.random(GEN_BLOCK_ROWS), side="right")
    # whole uint64 words are drawn twice as fast as single bytes; fix the byte order so the
    # bytes are the same on any machine
    words = rng.integers(0, 2**64, GEN_BLOCK_ROWS * D // 8, dtype=np.uint64)
    noise_bytes = words.astype("<u8", copy=False).view(np.uint8).reshape(GEN_BLOCK_ROWS, D)

    out = np.empty((GEN_BLOCK_ROWS, D), dtype=np.uint8)
    for lo in range(0, GEN_BLOCK_ROWS, _STEP_ROWS):
        hi = lo + _STEP_ROWS
        index = offsets[centre_of_row[lo:hi]]
        index += noise_bytes[lo:hi]
        out[lo:hi] = sift_normalise(np.take(table, index))
    return out


def sift_centres(seed: int, start: int, stop: int) -> np.ndarray:
    """The centre (0 .. N_CENTRES - 1, int64) each of rows [start, stop) of ``sift-synth``
    was drawn from: synthetic class labels for supervised methods at scale (rows of one
    centre are near-copies of one image structure). The first draw of each generation
    block's generator, so it costs a fraction of generating the rows."""
    if not 0 <= start <= stop:
        raise ValueError(f"bad row range [{start}, {stop})")
    _, cdf = centres(seed)
    out = np.empty(stop - start, dtype=np.int64)
    for block in range(start // GEN_BLOCK_ROWS, (stop - 1) // GEN_BLOCK_ROWS + 1) if stop > start else ():
        block_start = block * GEN_BLOCK_ROWS
        lo, hi = max(start, block_start), min(stop, block_start + GEN_BLOCK_ROWS)
        draws = np.random.default_rng([seed, block]).random(GEN_BLOCK_ROWS)  # as _generation_block
        out[lo - start : hi - start] = np.searchsorted(cdf, draws[lo - block_start : hi - block_start], side="right")
    return out


def sift_rows(seed: int, start: int, stop: int) -> np.ndarray:
    """Rows [start, stop) of the ``sift-synth`` data set for ``seed``: (stop - start, 128) uint8.

    Identical for a given seed whatever slicing is used (see module docstring).
    """
    if not 0 <= start <= stop:
        raise ValueError(f"bad row range [{start}, {stop})")
    out = np.empty((stop - start, D), dtype=np.uint8)
    first, last = start // GEN_BLOCK_ROWS, (stop - 1) // GEN_BLOCK_ROWS
    for block in range(first, last + 1) if stop > start else ():
        block_start = block * GEN_BLOCK_ROWS
        lo, hi = max(start, block_start), min(stop, block_start + GEN_BLOCK_ROWS)
        out[lo - start : hi - start] = _generation_block(seed, block)[lo - block_start : hi - block_start]
    return out


# ---------------------------------------------------------------- dask wiring ---------


def _write_rows(features, seed: int, start: int, stop: int) -> int:
    """Task body: generate rows [start, stop) and write them into the zarr array in place.

    [start, stop) is exactly one zarr chunk, so concurrent tasks never touch the same chunk
    file and the rows never travel back to the client.
    """

    write_rows(features, slice(start, stop), sift_rows(seed, start, stop))
    return stop - start


def write_tasks(features, n: int, seed: int, chunk_rows: int) -> list:
    """One named Delayed per zarr chunk of the array at Location ``features`` (each returns its row count)."""
    from dask import delayed
    from dask.base import tokenize

    token = tokenize(features, n, seed, chunk_rows, GENERATOR_VERSION)
    return [
        delayed(_write_rows, pure=True)(
            features, seed, start, min(n, start + chunk_rows), dask_key_name=f"sift-synth-{token}-{i}"
        )
        for i, start in enumerate(range(0, n, chunk_rows))
    ]


def write_sift_synth(
    path, n: int, *, seed: int = 0, chunk_rows: int | None = None, overwrite: bool = False, progress=None
):
    """Write ``n`` rows of ``sift-synth`` (seed ``seed``) as a dataset at ``path``.

    Rows are generated and written by one task per zarr chunk on the active Dask scheduler
    (a distributed Client if one is active, else threads); the result is the same for any
    ``chunk_rows`` and any number of workers. ``progress``, if given, is called with the
    list of tasks and must compute them (e.g. behind a progress bar). Nothing is left at
    ``path`` if anything fails.
    """
    # imported here so the numpy kernel above stays importable without dask and zarr
    import dask

    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise InputError(f"sift-synth needs n >= 1 points; got n={n!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise InputError(f"sift-synth needs an integer seed >= 0; got seed={seed!r}")
    if chunk_rows is not None and chunk_rows < 1:
        raise InputError(f"chunk_rows must be >= 1; got {chunk_rows}")
    n, seed = int(n), int(seed)
    chunk_rows = min(int(chunk_rows or default_chunk_rows(D, 1)), n)
    generator = {"name": "sift-synth", "seed": seed, "gen_block_rows": GEN_BLOCK_ROWS, "version": GENERATOR_VERSION}
    with dataset_output(path, overwrite=overwrite) as tmp:
        create_dataset_group(
            tmp,
            n=n,
            d=D,
            dtype=np.uint8,
            chunk_rows=chunk_rows,
            source=f"sift-synth:seed={seed}",
            attrs={"generator": generator},
        )
        # a resolved Location (absolute path or URL): workers in any directory find the array
        tasks = write_tasks(tmp.child("features"), n, seed, chunk_rows)
        counts = progress(tasks) if progress is not None else dask.compute(tasks)[0]
        if counts is not None and sum(counts) != n:
            raise RuntimeError(f"sift-synth wrote {sum(counts)} of {n} rows")
    return open_dataset(path)
