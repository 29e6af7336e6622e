"""Hamming distances and exact top-k / radius search of a block of codes (numpy + numba).

Codes are packed uint8 rows (see kernels.codes), viewed as 32/64-bit words. Ranking is by
(distance, id): ties are broken by the smaller id, so results are identical whatever the
chunking and whatever merge order.

The top-k kernel (``hamming_topk``) is the hot loop of search. Codes are stored word-major
in tiles of TILE_CODES codes (a tile stays in L1/L2 while every query passes over it); per
(query, tile) the distances are one vectorised xor + popcount loop (LLVM emits AVX-512
``vpopcntq`` on 512-bit registers where the CPU has it), then a scan
that keeps only distances strictly below the query's current k-th distance. Because codes
are scanned in id order, an equal distance can never beat an entry already held, so
"strictly below" is exact. Accepted entries go to a 2k buffer that is cut back to the
exact top-k by counting (distances are small integers) when full.
"""

from __future__ import annotations

import numpy as np
from numba import njit, types
from numba.extending import intrinsic

ID_BITS = 40  # ids < 2**40 (1.1e12 points) fit beside the distance in a key
_SENTINEL_KEY = np.iinfo(np.int64).max
PAIRS_PER_BATCH = 1 << 22  # query x code pairs per temporary (~32 MB of uint64)


def as_words(codes: np.ndarray) -> np.ndarray:
    """(n, n_bytes) uint8 -> (n, words) of uint32 (codes up to 32 bits) or uint64, zero
    padded (padding adds 0 to every distance)."""
    codes = np.ascontiguousarray(codes, dtype=np.uint8)
    n, nb = codes.shape
    word = 4 if nb <= 4 else 8
    pad = (-nb) % word
    if pad:
        codes = np.concatenate([codes, np.zeros((n, pad), np.uint8)], axis=1)
    return codes.view(np.uint32 if word == 4 else np.uint64)


def hamming_distances(queries: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """(m, n) int32 matrix of Hamming distances between packed codes."""
    out = np.empty((len(queries), len(codes)), dtype=np.int32)
    if len(queries) and len(codes):
        _distance_matrix(as_words(queries), word_major_tiles(codes), len(codes), out)
    return out


def query_distances(queries: np.ndarray, codes: np.ndarray, groups: np.ndarray | None = None) -> np.ndarray:
    """(m, n) distances of queries to codes. ``queries`` is (m, n_bytes), or (G, m, n_bytes)
    with ``groups`` (n,) naming which query encoding applies to each code — DisH1, where
    each node encodes the query with its own dictionary."""
    if queries.ndim == 2:
        return hamming_distances(queries, codes)
    dist = np.empty((queries.shape[1], len(codes)), np.int32)
    for g in np.unique(groups):
        cols = np.flatnonzero(groups == g)
        dist[:, cols] = hamming_distances(queries[g], codes[cols])
    return dist


def query_rows(queries: np.ndarray, rows: slice) -> np.ndarray:
    """A batch of queries from (m, b) or grouped (G, m, b) query codes."""
    return queries[rows] if queries.ndim == 2 else queries[:, rows]


def n_queries(queries: np.ndarray) -> int:
    return queries.shape[0] if queries.ndim == 2 else queries.shape[1]


TILE_CODES = 4096  # codes per tile: 32 KB of 64-bit codes, resident in L1/L2
SCAN_BLOCK = 64  # distances tested at once for "any candidate here?"


@intrinsic
def prefer_512_bit_vectors(typingctx):
    """Let LLVM vectorise the calling function with 512-bit registers where the CPU has them.

    LLVM's tuning for Intel server CPUs caps automatic vectorisation at 256 bits (older
    chips lowered their clock for 512-bit work). The popcount loops here are bound by
    vector instructions, so twice the lanes per ``vpopcntq`` makes them markedly faster on
    an AVX-512 CPU; on other CPUs the attribute changes nothing. numba offers no
    per-function target option, so the string attribute goes straight onto the LLVM
    function (the set ``add`` bypasses llvmlite's list of known attribute names)."""

    def codegen(context, builder, signature, args):
        set.add(builder.function.attributes, '"prefer-vector-width"="512"')
        return context.get_dummy_value()

    return types.none(), codegen


@intrinsic
def popcount(typingctx, x):
    """LLVM ctpop: one instruction (vectorised to vpopcntq/vpopcntd where the CPU has it)."""

    def codegen(context, builder, signature, args):
        return builder.ctpop(args[0])

    return x(x), codegen


@njit(nogil=True, cache=True)
def tile_distances(query, tile, out):
    """out[j] = popcount(query ^ tile[:, j]) summed over words; tile is word-major (W, T)."""
    prefer_512_bit_vectors()
    n = tile.shape[1]
    for j in range(n):
        out[j] = popcount(query[0] ^ tile[0, j])
    for w in range(1, tile.shape[0]):
        for j in range(n):
            out[j] += popcount(query[w] ^ tile[w, j])


@njit(nogil=True, cache=True)
def _hot_blocks(dist, lim, hot):
    """Starts of the SCAN_BLOCK-blocks of dist holding a value < lim, into hot; returns how
    many. Always the whole tile: a data-dependent trip count here makes LLVM drop the
    vectorisation; padding codes past the end are skipped
    by pass 2."""
    prefer_512_bit_vectors()
    n_hot = 0
    for block in range(0, TILE_CODES, SCAN_BLOCK):
        hits = 0
        for j in range(SCAN_BLOCK):
            hits += np.int32(dist[block + j] < lim)
        if hits:
            hot[n_hot] = block
            n_hot += 1
    return n_hot


@njit(nogil=True, cache=True)
def _hot_blocks_of_codes(query, tile, lim, hot):
    """``_hot_blocks`` of one- or two-word codes straight from the tile: each block's least
    distance is kept as the distances are computed, which are never stored, so a tile costs
    one vectorised pass (a xor, a popcount and a min per code, all in the words' own width)
    instead of a pass that stores the distances and one that reads them back. Pass 2
    recomputes the few hot blocks' distances."""
    prefer_512_bit_vectors()
    n_hot = 0
    q0 = query[0]
    q1 = query[1] if tile.shape[0] == 2 else query[0]
    for block in range(0, TILE_CODES, SCAN_BLOCK):
        low = ~(q0 ^ q0)  # all ones, in the words' type: the min stays in that width
        if tile.shape[0] == 1:
            for j in range(block, block + SCAN_BLOCK):
                low = min(low, popcount(q0 ^ tile[0, j]))
        else:
            for j in range(block, block + SCAN_BLOCK):
                low = min(low, popcount(q0 ^ tile[0, j]) + popcount(q1 ^ tile[1, j]))
        if low < lim:
            hot[n_hot] = block
            n_hot += 1
    return n_hot


@njit(nogil=True, cache=True)
def _cut_to_topk(buf_d, buf_i, count, k, counts):
    """Keep the k smallest (distance, position) of buf[:count] in place, sorted by distance
    (stable, so ids ascending within a distance). Returns (new count, limit): a later code
    (larger id) must have a distance < limit to enter."""
    width = counts.shape[0]
    counts[:] = 0
    for j in range(count):
        counts[buf_d[j]] += 1
    if count < k:
        cut, before = width - 1, count - counts[width - 1]
        keep = count
    else:
        cut, before = 0, 0
        while before + counts[cut] < k:
            before += counts[cut]
            cut += 1
        keep = k
    starts = np.empty(cut + 1, np.int64)
    acc = 0
    for h in range(cut + 1):
        starts[h] = acc
        acc += counts[h]
    left_at_cut = keep - before
    tmp_d = np.empty(keep, buf_d.dtype)
    tmp_i = np.empty(keep, buf_i.dtype)
    for j in range(count):
        h = buf_d[j]
        if h < cut or (h == cut and left_at_cut > 0):
            if h == cut:
                left_at_cut -= 1
            tmp_d[starts[h]] = h
            tmp_i[starts[h]] = buf_i[j]
            starts[h] += 1
    buf_d[:keep] = tmp_d
    buf_i[:keep] = tmp_i
    return keep, (cut if keep == k else width)


@njit(nogil=True, cache=True)
def _hamming_topk_tiled(queries, tiles, n, ids, k, width, out_d, out_i):
    """Exact top-k (ties by id) of every query over n codes in word-major tiles
    (n_tiles, W, TILE_CODES); ids ascending."""
    prefer_512_bit_vectors()
    m = queries.shape[0]
    cap = 2 * k
    buf_d = np.empty((m, cap), np.int32)
    buf_i = np.empty((m, cap), np.int64)
    count = np.zeros(m, np.int64)
    limit = np.full(m, width, np.int64)
    counts = np.zeros(width, np.int64)
    dist = np.empty(TILE_CODES, np.int32)
    hot = np.empty(TILE_CODES // SCAN_BLOCK, np.int64)
    # codes of one or two words: pass 1 computes the distances as it tests them, pass 2
    # recomputes the hot blocks'; wider codes store the tile's distances once and read them twice
    short = tiles.shape[1] <= 2
    for start in range(0, n, TILE_CODES):
        stop = min(n, start + TILE_CODES)
        tile = tiles[start // TILE_CODES]
        for q in range(m):
            lim = limit[q]
            c = count[q]
            # pass 1, vectorised: which blocks of SCAN_BLOCK codes hold a candidate (most hold
            # none); the whole tile: padding codes are ignored below
            if short:
                n_hot = _hot_blocks_of_codes(queries[q], tile, lim, hot)
            else:
                tile_distances(queries[q], tile, dist)
                n_hot = _hot_blocks(dist, lim, hot)
            # pass 2, scalar, on those blocks only
            for h in range(n_hot):
                block = hot[h]
                if short:
                    end = min(block + SCAN_BLOCK, stop - start)
                    for j in range(block, end):
                        d = popcount(queries[q, 0] ^ tile[0, j])
                        if tile.shape[0] == 2:
                            d += popcount(queries[q, 1] ^ tile[1, j])
                        dist[j] = d
                for j in range(block, min(block + SCAN_BLOCK, stop - start)):
                    if dist[j] < lim:
                        buf_d[q, c] = dist[j]
                        buf_i[q, c] = ids[start + j]
                        c += 1
                        if c == cap:
                            c, lim = _cut_to_topk(buf_d[q], buf_i[q], c, k, counts)
            count[q] = c
            limit[q] = lim
    for q in range(m):
        c, _ = _cut_to_topk(buf_d[q], buf_i[q], count[q], k, counts)
        out_d[q, :c] = buf_d[q, :c]
        out_i[q, :c] = buf_i[q, :c]


@njit(nogil=True, cache=True)
def _distance_matrix(queries, tiles, n, out):
    prefer_512_bit_vectors()
    dist = np.empty(TILE_CODES, np.int32)
    for t in range(tiles.shape[0]):
        start = t * TILE_CODES
        stop = min(n, start + TILE_CODES)
        for q in range(queries.shape[0]):
            tile_distances(queries[q], tiles[t], dist)
            out[q, start:stop] = dist[: stop - start]


def word_major_tiles(codes: np.ndarray) -> np.ndarray:
    """(n, n_bytes) codes -> (n_tiles, W, TILE_CODES) words, zero padded to whole tiles, so
    each word of a tile is one contiguous run (the layout the vectorised loop wants)."""
    words = as_words(codes)
    n_tiles = -(-len(words) // TILE_CODES)
    padded = np.zeros((n_tiles * TILE_CODES, words.shape[1]), words.dtype)
    padded[: len(words)] = words
    return np.ascontiguousarray(padded.reshape(n_tiles, TILE_CODES, -1).transpose(0, 2, 1))


def _topk_by_key(keys: np.ndarray, k: int) -> np.ndarray:
    """Column indices of the k smallest keys per row, in ascending key order."""
    if k < keys.shape[1]:
        part = np.argpartition(keys, k - 1, axis=1)[:, :k]
    else:
        part = np.broadcast_to(np.arange(keys.shape[1]), keys.shape).copy()
    order = np.take_along_axis(keys, part, axis=1).argsort(axis=1, kind="stable")
    return np.take_along_axis(part, order, axis=1)


def pack_keys(distances: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """int64 sort keys (distance, id); missing entries (id -1) sort last."""
    keys = (distances.astype(np.int64) << ID_BITS) | ids.astype(np.int64)
    return np.where(ids < 0, _SENTINEL_KEY, keys)


@njit(cache=True)
def _topk_counting(dist, ids, k, width, out_d, out_i):
    """Per row: the k smallest (distance, id) by counting — distances are small integers,
    so one histogram gives the cut-off distance and one scan in id order fills the slots."""
    counts = np.zeros(width, np.int64)
    starts = np.zeros(width, np.int64)
    for q in range(dist.shape[0]):
        counts[:] = 0
        for j in range(dist.shape[1]):
            counts[dist[q, j]] += 1
        cut, before = 0, 0
        while before + counts[cut] < k:
            before += counts[cut]
            cut += 1
        acc = 0
        for h in range(cut + 1):
            starts[h] = acc
            acc += counts[h]
        left_at_cut = k - before
        for j in range(dist.shape[1]):
            h = dist[q, j]
            if h < cut or (h == cut and left_at_cut > 0):
                if h == cut:
                    left_at_cut -= 1
                out_d[q, starts[h]] = h
                out_i[q, starts[h]] = ids[j]
                starts[h] += 1


def empty_topk(m: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    return np.full((m, k), -1, np.int32), np.full((m, k), -1, np.int64)


def hamming_topk(
    codes: np.ndarray, ids: np.ndarray, groups: np.ndarray | None = None, *, queries: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-k of one code block: (distances int32 (m,k), ids int64 (m,k)); -1 padding
    where the block has fewer than k codes. ``ids`` are the global ids of the block rows,
    ascending (rows of a chunk), so scanning in row order breaks ties by id."""
    m = n_queries(queries)
    out_d, out_i = empty_topk(m, k)
    if len(codes) == 0:
        return out_d, out_i
    ids = np.asarray(ids, dtype=np.int64)
    kk = min(k, len(codes))
    width = 8 * as_words(codes[:1]).itemsize * as_words(codes[:1]).shape[1] + 1
    if groups is None:
        q_words = as_words(queries)
        _hamming_topk_tiled(q_words, word_major_tiles(codes), len(codes), ids, kk, width, out_d, out_i)
        return out_d, out_i
    step = max(1, PAIRS_PER_BATCH // len(codes))
    for start in range(0, m, step):
        dist = query_distances(query_rows(queries, slice(start, start + step)), codes, groups)
        block_d, block_i = np.empty((len(dist), kk), np.int32), np.empty((len(dist), kk), np.int64)
        _topk_counting(dist, ids, kk, width, block_d, block_i)
        out_d[start : start + step, :kk] = block_d
        out_i[start : start + step, :kk] = block_i
    return out_d, out_i


def merge_topk(parts: list[tuple[np.ndarray, np.ndarray]], k: int) -> tuple[np.ndarray, np.ndarray]:
    """Merge per-block top-k lists into the global top-k (ties by id)."""
    dist = np.concatenate([p[0] for p in parts], axis=1)
    ids = np.concatenate([p[1] for p in parts], axis=1)
    kk = min(k, dist.shape[1])
    idx = _topk_by_key(pack_keys(dist, ids), kk)
    out_d, out_i = empty_topk(dist.shape[0], k)
    out_d[:, :kk] = np.take_along_axis(dist, idx, axis=1)
    out_i[:, :kk] = np.take_along_axis(ids, idx, axis=1)
    out_d[out_i < 0] = -1
    return out_d, out_i


def hamming_radius(queries: np.ndarray, codes: np.ndarray, ids: np.ndarray, radius: int, groups=None):
    """All codes within ``radius`` of each query, as flat arrays (query_index, id, distance)."""
    ids = np.asarray(ids, dtype=np.int64)
    q_all, i_all, d_all = [], [], []
    step = max(1, PAIRS_PER_BATCH // max(1, len(codes)))
    for start in range(0, n_queries(queries), step):
        dist = query_distances(query_rows(queries, slice(start, start + step)), codes, groups)
        qi, ci = np.nonzero(dist <= radius)
        q_all.append(qi + start)
        i_all.append(ids[ci])
        d_all.append(dist[qi, ci])
    return sort_radius_results(np.concatenate(q_all), np.concatenate(i_all), np.concatenate(d_all))


def sort_radius_results(query_index, ids, distances):
    """Order flat radius results by (query, distance, id); used after concatenating blocks."""
    order = np.lexsort((ids, distances, query_index))
    return (query_index[order].astype(np.int64), ids[order].astype(np.int64), distances[order].astype(np.int32))
