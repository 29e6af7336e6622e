"""Binary codes of residuals, a distance estimator with an error bound, and the inverted
file search that re-ranks only the rows that can still enter the top-k. Plain numpy and
numba, no Dask.

Every database row ``x`` lies in the list of its nearest centroid ``c``; its residual
``r = x - c`` is rotated by an orthogonal ``D x D`` matrix ``P`` (learned or random) and
kept as one sign bit per dimension, ``b = [P^T r > 0]``, plus two float32 factors. With
``x_pm = 2b - 1`` and ``z = P^T r``, the unit vector ``x_pm / sqrt(D)`` is the code's
reconstruction of the direction of ``z``; for a query ``q``:

    |x - q|^2 = |r|^2 + |q - c|^2 - 2 <r, q - c>
    <r, q - c> ~= s * <x_pm, P^T (q - c)>,   s = |r|^2 / sum|z|

which is the estimator of RaBitQ (Gao and Long, SIGMOD 2024): ``<x_pm/sqrt(D), u> /
<x_pm/sqrt(D), r/|r|>`` estimates ``<r/|r|, u>`` for a unit ``u``, and with ``P`` random it
is unbiased, with an error of the scale ``sqrt(1 - a^2) / a / sqrt(D - 1)`` (``a`` the code's
cosine to its residual): the deviation behaves like a normal one of that scale, so a bound of
``eps`` such scales holds with the probability of a normal deviate below ``eps`` (RaBitQ's
paper takes 1.9). Splitting ``<x_pm, P^T (q - c)> = <x_pm, P^T q> - <x_pm, P^T c>`` moves the
centroid term into a per-row constant, so one table per query (the sums of ``P^T q`` over
each byte's set bits) serves every probed list:

    estimate = add + |q - c|^2 + mul * (2 * sum_bytes table[byte] - sum(P^T q))
    error    = ratio * |mul| * |q - c|

with ``add = |r|^2 + 2 s <x_pm, P^T c>`` and ``mul = -2 s`` stored per row (two float32).
The error scale ``2 |r| sqrt(1 - a^2) / (a sqrt(D - 1))`` is ``|mul| sqrt(D / (D - 1))
sqrt(1 - a^2)``; ``a`` varies little from row to row (it concentrates as D grows), so one
``ratio``, the mean of ``sqrt(D / (D - 1)) sqrt(1 - a^2)`` over the rows, stands in for a third
factor per row: a row then costs its code and 8 bytes.

The search visits each query's probed lists nearest first and computes the exact squared
L2 only for a row whose lower bound (estimate - eps * error) is below the current k-th
exact distance: the answer is the exact top-k of the rows examined, every exact distance
read from the re-rank vectors stored in list order (a probed list's vectors are one
contiguous block). ``eps`` trades speed for recall; with ``eps = inf`` every row of the
probed lists is scored exactly, which the tests use as the brute-force reference.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from dask_hashcodes.kernels.codes import read_only
from dask_hashcodes.kernels.hamming import popcount
from dask_hashcodes.kernels.itq import itq_rotation, random_rotation

ENCODE_BLOCK = 65536  # rows rotated per step: bounds the float64 temporaries
# eps is capped here: an infinite eps times a zero error (a row equal to its centroid) would
# give NaN, which no comparison lets through; this cap already lets every row through
WIDEST_EPS = 1e30


def learned_rotation(residuals: np.ndarray, n_iter: int, seed: int) -> np.ndarray:
    """A ``D x D`` orthogonal matrix learned by ITQ on ``residuals`` (a sample): the
    principal directions, then the rotation minimising the sign quantisation error ||B - V R||
    (Gong and Lazebnik), so that the codes keep more of each residual's direction than a random
    rotation's do (``<x_pm / sqrt(D), r / |r|>`` higher on average)."""
    residuals = np.asarray(residuals, np.float64)
    _, _, principal = np.linalg.svd(residuals - residuals.mean(axis=0), full_matrices=False)
    projected = residuals @ principal.T
    rotation = random_rotation(projected.shape[1], np.random.default_rng(seed))
    for _ in range(n_iter):
        signs = np.where(projected @ rotation > 0, 1.0, -1.0)
        rotation = itq_rotation(signs.T @ projected)
    return principal.T @ rotation


def residual_rotation(kind: str, residuals, d: int, n_iter: int, rng: np.random.Generator, seed: int):
    """The index's rotation: "random" (a uniform ``D x D`` matrix, the error scale's assumption;
    drawn from ``rng``), "learned" (``learned_rotation`` of a sample of ``residuals``, from
    ``seed``) or "structured" (``structured_signs``, drawn from ``rng``: ``D`` bytes per round
    where the others hold ``D^2`` floats). ``rotate`` applies any of them."""
    if kind == "random":
        return random_rotation(d, rng)
    if kind == "structured":
        return structured_signs(d, rng)
    return learned_rotation(residuals, n_iter, seed)


# sign flips + Hadamard transforms: with fewer, the entries of the rotation spread less
# evenly than a uniform random rotation's when D is not a power of two
STRUCTURED_STEPS = 8


def structured_signs(d: int, rng: np.random.Generator, steps: int = STRUCTURED_STEPS) -> np.ndarray:
    """(steps, d) int8 of +-1: all a structured rotation stores (see ``rotate``)."""
    return np.where(rng.random((steps, d)) < 0.5, -1, 1).astype(np.int8)


def rotate(rows, rotation) -> np.ndarray:
    """``rows @ P`` for the index's rotation ``P``: a dense matrix, or (int8) the signs of a
    structured one. float32 rows stay float32, others become float64.

    The structured rotation (the fast Johnson-Lindenstrauss transform, as RaBitQ's own
    library rotates) is a sequence of steps, each a random flip of the dimensions' signs and
    then the normalised Walsh-Hadamard transform of 2^m dimensions (2^m the largest power of
    two <= D), the leading ones and the trailing ones in turn: when D is not a power of two
    they overlap, so every dimension mixes with every other, and the flips between them keep
    the result's entries spread as a uniform random rotation's are. Each step is orthogonal; a
    row costs O(D log D) and nothing of size D^2 is stored or read."""
    rows = np.asarray(rows)
    dtype = np.float32 if rows.dtype == np.float32 else np.float64
    if rotation.dtype != np.int8:
        return rows.astype(dtype, copy=False) @ np.asarray(rotation, dtype)
    # transposed, each butterfly adds and subtracts two contiguous rows of values: it vectorises
    columns = np.array(rows.T, dtype=dtype, order="C")
    _structured_rotate_columns(columns, rotation)
    return np.ascontiguousarray(columns.T)


def rotation_matrix(rotation) -> np.ndarray:
    """The dense float64 ``D x D`` matrix of any rotation ``rotate`` accepts (for encoding
    many rows with one matrix product)."""
    if rotation.dtype != np.int8:
        return np.asarray(rotation, np.float64)
    return rotate(np.eye(rotation.shape[1]), rotation)


@njit(nogil=True, cache=True)
def _hadamard(columns, first, n):
    """In place: the Walsh-Hadamard transform, divided by sqrt(n), of the n rows of
    ``columns`` from ``first`` (n a power of two), applied to every column."""
    m = columns.shape[1]
    half = 1
    while half < n:
        for start in range(first, first + n, 2 * half):
            for j in range(start, start + half):
                a, b = columns[j], columns[j + half]
                for t in range(m):
                    x, y = a[t], b[t]
                    a[t], b[t] = x + y, x - y
        half *= 2
    scale = 1.0 / np.sqrt(n)
    for j in range(first, first + n):
        row = columns[j]
        for t in range(m):
            row[t] *= scale


@njit(nogil=True, cache=True)
def _structured_rotate_columns(columns, signs):
    """``columns`` (D, m): m vectors, rotated in place (see ``rotate``)."""
    d = columns.shape[0]
    span = 1
    while span * 2 <= d:
        span *= 2
    for step in range(signs.shape[0]):
        for j in range(d):
            if signs[step, j] < 0:
                row = columns[j]
                for t in range(row.shape[0]):
                    row[t] = -row[t]
        _hadamard(columns, 0 if step % 2 == 0 else d - span, span)


def scalar_quantiser(X) -> tuple[np.ndarray, float]:
    """(offset per dimension float32, one step): ``(x - offset) / step`` maps every dimension's
    range into [0, 255]. One step for all dimensions keeps the distance a plain sum of squares
    (times step^2), with no per-dimension weights in the re-rank loop."""
    low = np.full(X.shape[1], np.inf)
    high = np.full(X.shape[1], -np.inf)
    for start in range(0, len(X), ENCODE_BLOCK):
        block = np.asarray(X[start : start + ENCODE_BLOCK], np.float64)
        low, high = np.minimum(low, block.min(axis=0)), np.maximum(high, block.max(axis=0))
    step = float((high - low).max()) / 255 or 1.0
    return low.astype(np.float32), step


def scalar_quantise(X, offset: np.ndarray, step: float) -> np.ndarray:
    """uint8 codes of rows, nearest level, clipped to [0, 255]."""
    return np.clip(np.rint((np.asarray(X, np.float32) - offset) / np.float32(step)), 0, 255).astype(np.uint8)


def scalar_decode(codes, offset: np.ndarray, step: float) -> np.ndarray:
    """float64 rows of uint8 codes: ``offset + step * code``."""
    return np.asarray(offset, np.float64) + step * np.asarray(codes, np.float64)


def encode_residuals(X, centroids, assignment, rotation):
    """(codes (n, D/8) uint8, factors (n, 2) float32: add, mul, error ratio) of every row's
    residual to its list centroid (see the module docstring). ``D`` must be a multiple of 8."""
    X = np.asarray(X)
    n, d = X.shape
    if d % 8:
        raise ValueError(f"residual codes need a dimension that is a multiple of 8; got {d}")
    rotation = np.asarray(rotation, np.float64)
    rotated_centroids = np.asarray(centroids, np.float64) @ rotation
    codes = np.empty((n, d // 8), np.uint8)
    factors = np.empty((n, 2), np.float32)
    ratio_sum, ratio_rows = 0.0, 0
    for start in range(0, n, ENCODE_BLOCK):
        stop = min(n, start + ENCODE_BLOCK)
        cells = np.asarray(assignment[start:stop])
        z = (np.asarray(X[start:stop], np.float64) - centroids[cells]) @ rotation
        bits = z > 0
        codes[start:stop] = np.packbits(bits, axis=1, bitorder="little")
        squared = (z * z).sum(axis=1)
        l1 = np.abs(z).sum(axis=1)
        zero = l1 == 0  # the row is its centroid: the estimate |q - c|^2 is then exact
        safe_l1 = np.where(zero, 1.0, l1)
        scale = np.where(zero, 0.0, squared / safe_l1)
        centroid_term = np.einsum("ij,ij->i", np.where(bits, 1.0, -1.0), rotated_centroids[cells])
        cosine = np.where(zero, 1.0, l1 / (np.sqrt(d) * np.sqrt(np.where(zero, 1.0, squared))))
        factors[start:stop, 0] = squared + 2 * scale * centroid_term
        factors[start:stop, 1] = -2 * scale
        spread = np.sqrt(d / (d - 1)) * np.sqrt(np.maximum(0.0, 1 - cosine**2))
        ratio_sum += float(spread[~zero].sum())
        ratio_rows += int((~zero).sum())
    return codes, factors, ratio_sum / max(1, ratio_rows)


def estimated_distances(rotated_query, codes, factors, error_ratio, centroid_distance):
    """The estimate and its error of every row of one list for one query (numpy; the
    reference the compiled search is tested against)."""
    bits = np.unpackbits(codes, axis=1, bitorder="little").astype(np.float64)
    dot = 2 * bits @ np.asarray(rotated_query, np.float64) - rotated_query.sum()
    estimate = factors[:, 0] + centroid_distance + factors[:, 1] * dot
    return estimate, error_ratio * np.abs(factors[:, 1]) * np.sqrt(centroid_distance)


QUERY_BITS = 4  # the rotated query is kept as 4-bit integers: bit planes ANDed with the codes
QUERY_LEVEL = 2 ** (QUERY_BITS - 1) - 1  # signed levels -7..7, symmetric about zero


def query_planes(rotated_queries: np.ndarray, n_words: int):
    """(planes (nq, QUERY_BITS, n_words) uint64, step (nq,), sums (nq,)): each rotated query
    as ``step * u`` with ``u`` signed 4-bit integers in [-7, 7] (nearest rounding), the two's
    complement bit j of every dimension packed like the codes, so that ``<b, q'> ~= step *
    (p0 + 2 p1 + 4 p2 - 8 p3)`` with ``p_j = popcount(b & plane_j)``: four popcounts per code
    word instead of D multiplications. Levels symmetric about zero need no term in the
    code's own bit count, which a range [min, max] would (``min * popcount(b)``): one
    popcount less per word. ``sums`` is the exact sum of the rotated query."""
    rotated_queries = np.asarray(rotated_queries, np.float32)
    step = np.abs(rotated_queries).max(axis=1) / QUERY_LEVEL
    step = np.where(step > 0, step, 1.0).astype(np.float32)
    levels = np.rint(rotated_queries / step[:, None]).astype(np.int8).view(np.uint8)  # two's complement
    nq, d = levels.shape
    planes = np.zeros((nq, QUERY_BITS, n_words * 8), np.uint8)
    for j in range(QUERY_BITS):
        planes[:, j, : d // 8] = np.packbits((levels >> j) & 1, axis=1, bitorder="little")
    return planes.view(np.uint64), step, rotated_queries.sum(axis=1)


def word_major(codes: np.ndarray) -> np.ndarray:
    """(n, D/8) uint8 codes -> (W, n) uint64 words, one row per word: the estimate loop then
    reads each word of consecutive rows contiguously, which vectorises."""
    n, n_bytes = codes.shape
    padded = np.zeros((n, -(-n_bytes // 8) * 8), np.uint8)
    padded[:, :n_bytes] = codes
    return np.ascontiguousarray(padded.view(np.uint64).T)


def list_lower_bounds(rotated_query, list_words, list_factors, error_ratio, start, stop, centroid_distance, eps):
    """(estimates, lower bounds) float32 of the rows [start, stop) of one list for one query,
    as the search computes them (the query quantised to QUERY_BITS): what decides whether a
    row is re-ranked."""
    planes, step, sums = query_planes(np.asarray(rotated_query, np.float32)[None, :], list_words.shape[0])
    size = stop - start
    weighted = np.zeros(size, np.int32)
    for w in range(list_words.shape[0]):
        _bit_sums(list_words[w, start:stop], *planes[0, :, w], weighted)
    out = np.empty((2, size), np.float32)
    for row, width in ((0, 0.0), (1, min(eps, WIDEST_EPS) * error_ratio * np.sqrt(centroid_distance))):
        _lower_bounds(list_factors[0, start:stop], list_factors[1, start:stop], weighted, step[0],
                      sums[0], np.float32(centroid_distance), np.float32(width), out[row])  # fmt: skip
    return out[0], out[1]


def search_residual_lists(rotated_queries, query_vectors, probes, centroid_distances, list_words, list_factors,
                          error_ratio, offsets, list_vectors, list_ids, k, eps, vector_scale=1.0):  # fmt: skip
    """(squared distances (nq, k) float64, ids (nq, k) int64, exact distances computed per
    query): the exact top-k, by (distance, id), of the probed lists' rows whose lower bound
    could enter it. ``list_words`` (W, n) and ``list_factors`` (2, n) are in list order, as
    are ``list_vectors`` (the re-rank vectors, any numeric dtype, in the query vectors'
    space, their squared distances times ``vector_scale`` in the original units: a scalar
    quantiser's step squared) and ``list_ids``; -1 / inf padding when fewer than k rows were
    examined."""
    planes, step, sums = query_planes(rotated_queries, list_words.shape[0])
    nq = len(probes)
    out_d = np.full((nq, k), np.inf)
    out_i = np.full((nq, k), -1, np.int64)
    exact = np.zeros(nq, np.int64)
    _search(planes, step, sums, np.ascontiguousarray(query_vectors, np.float32),
            np.ascontiguousarray(probes, np.int64), np.ascontiguousarray(centroid_distances, np.float32), list_words,
            list_factors, offsets, read_only(list_vectors), np.float32(vector_scale), list_ids,
            np.float32(min(eps, WIDEST_EPS) * error_ratio), out_d, out_i, exact)  # fmt: skip
    return out_d, out_i, exact


@njit(nogil=True, cache=True, fastmath={"reassoc", "contract"})
def _squared_l2_f32(query, row):
    total = np.float32(0.0)
    for j in range(query.shape[0]):
        diff = query[j] - np.float32(row[j])
        total += diff * diff
    return total


# The two per-list loops below run over slices from index 0: written with an offset into the
# whole arrays instead, LLVM does not vectorise them and they cost several times more per row.
@njit(nogil=True, cache=True)
def _bit_sums(words, p0, p1, p2, p3, weighted):
    """Per row of one list and one code word: add <word's bits, the query's signed 4-bit
    levels> (plane 3 is the two's complement sign: weight -8) to ``weighted``."""
    for i in range(words.shape[0]):
        x = words[i]
        weighted[i] += np.int32(popcount(x & p0) + 2 * popcount(x & p1) + 4 * popcount(x & p2) - 8 * popcount(x & p3))


@njit(nogil=True, cache=True, fastmath=True)
def _lower_bounds(add, mul, weighted, step, query_sum, centroid_distance, reach, out):
    """estimate - reach * |mul| per row (mul <= 0): ``reach`` is eps * ratio * |q - c|."""
    for i in range(out.shape[0]):
        dot = step * np.float32(weighted[i])
        out[i] = add[i] + centroid_distance + mul[i] * (np.float32(2) * dot - query_sum + reach)


@njit(nogil=True, cache=True)
def _search(planes, step, sums, query_vectors, probes, centroid_distances, list_words, list_factors, offsets,
            list_vectors, vector_scale, list_ids, width, out_d, out_i, exact):  # fmt: skip
    """``width`` is eps times the error ratio: a row's bound is its estimate minus width *
    |mul| * |q - c|."""
    k = out_d.shape[1]
    longest = 1
    for cell in range(len(offsets) - 1):
        longest = max(longest, offsets[cell + 1] - offsets[cell])
    weighted = np.empty(longest, np.int32)
    bounds = np.empty(longest, np.float32)
    chosen = np.empty(longest, np.int64)
    distances = np.empty(longest, np.float32)
    top_d = np.empty(k, np.float64)
    top_i = np.empty(k, np.int64)
    for q in range(probes.shape[0]):
        top_d[:] = np.inf
        top_i[:] = np.iinfo(np.int64).max
        worst, worst_at, computed = np.inf, 0, 0
        for p in range(probes.shape[1]):
            cell = probes[q, p]
            start, stop = offsets[cell], offsets[cell + 1]
            centroid_distance = centroid_distances[q, p]
            size = stop - start
            weighted[:size] = 0
            for w in range(list_words.shape[0]):
                _bit_sums(list_words[w, start:stop], planes[q, 0, w], planes[q, 1, w], planes[q, 2, w], planes[q, 3, w],
                          weighted[:size])  # fmt: skip
            reach = width * np.float32(np.sqrt(centroid_distance))
            _lower_bounds(list_factors[0, start:stop], list_factors[1, start:stop], weighted[:size], step[q], sums[q], centroid_distance, reach,
                          bounds[:size])  # fmt: skip
            # the rows this list lets through, against the k-th distance as it stands now: their
            # distances are then computed back to back, so the reads of their vectors overlap
            threshold = worst
            if worst == np.inf and size >= k:
                # no k-th distance yet: the k-th smallest upper bound of this list stands in for it
                for i in range(size):
                    distances[i] = bounds[i] - 2 * reach * list_factors[1, start + i]
                threshold = np.partition(distances[:size], k - 1)[k - 1]
            passed = 0
            for i in range(size):
                if bounds[i] <= threshold:
                    chosen[passed] = start + i
                    passed += 1
            for j in range(passed):
                distances[j] = vector_scale * _squared_l2_f32(query_vectors[q], list_vectors[chosen[j]])
            computed += passed
            for j in range(passed):
                distance = np.float64(distances[j])
                row_id = np.int64(list_ids[chosen[j]])
                if distance < worst or (distance == worst and row_id < top_i[worst_at]):
                    top_d[worst_at] = distance
                    top_i[worst_at] = row_id
                    worst_at = 0
                    for j2 in range(1, k):
                        if top_d[j2] > top_d[worst_at] or (
                            top_d[j2] == top_d[worst_at] and top_i[j2] > top_i[worst_at]
                        ):
                            worst_at = j2
                    worst = top_d[worst_at]
        exact[q] = computed
        order = np.argsort(top_i, kind="mergesort")
        order = order[np.argsort(top_d[order], kind="mergesort")]
        for j in range(k):
            if top_d[order[j]] < np.inf:
                out_d[q, j] = top_d[order[j]]
                out_i[q, j] = top_i[order[j]]
