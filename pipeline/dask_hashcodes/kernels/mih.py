"""Multi-index hashing (Norouzi, Punjani & Fleet, CVPR 2012): exact Hamming k-nearest-neighbour
and radius search that looks at a small part of the codes (numpy + numba).

A b-bit code is cut into m disjoint substrings (lengths differing by at most one bit). For each
substring a table lists the code rows sorted by that substring's value, with CSR offsets over
all 2^s values, so the rows whose substring equals a value are one slice. If two codes are at
Hamming distance d, one of their m substrings differs in at most floor(d / m) bits
(pigeonhole). Searching substring tables at increasing radius r, in the order (r, substring):
after substrings 0..j have been searched at radius r and the others at r - 1, every code at
distance <= m r + j has been found (a code not yet found differs in >= r + 1 bits of each of
the first j + 1 substrings and >= r bits of the others). kNN stops as soon as k codes at
distance <= that bound are known, so the result is exact, ties included: every code at the
k-th distance has been found, and ties are broken by the smaller id as in the linear scan
(kernels.hamming). A candidate is counted only at the first (radius, substring) step that
reaches it, decided from its own substring distances, so no per-query visited set is needed.

The substring length is kept <= MAX_SUBSTRING_BITS so that each table's offsets are a dense
array (2^s + 1 entries); the paper's choice m = b / log2(n) makes 2^s about n.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from dask_hashcodes.kernels.hamming import ID_BITS, empty_topk, popcount, sort_radius_results

MAX_SUBSTRING_BITS = 26  # offsets of 2^26 + 1 int64 entries: 512 MB per table at most


def code_words(codes: np.ndarray) -> np.ndarray:
    """(n, n_bytes) packed uint8 codes as (n, words) uint64, zero padded (padding adds 0 to
    every distance and to every substring)."""
    codes = np.ascontiguousarray(codes, dtype=np.uint8)
    pad = (-codes.shape[1]) % 8
    if pad:
        codes = np.concatenate([codes, np.zeros((len(codes), pad), np.uint8)], axis=1)
    return codes.view(np.uint64)


def default_substrings(n_bits: int, n_codes: int) -> int:
    """The paper's rule m = b / log2(n), rounded, within [ceil(b / MAX_SUBSTRING_BITS), b]."""
    fewest = math.ceil(n_bits / MAX_SUBSTRING_BITS)
    m = round(n_bits / math.log2(max(n_codes, 2)))
    return int(min(max(m, fewest, 1), n_bits))


def substring_starts(n_bits: int, m: int) -> np.ndarray:
    """(m + 1,) first bit of each substring and the end: the first b mod m substrings get one
    bit more than the others."""
    if not 1 <= m <= n_bits:
        raise ValueError(f"substrings m={m} must be between 1 and the code's {n_bits} bits")
    longest = -(-n_bits // m)
    if longest > MAX_SUBSTRING_BITS:
        raise ValueError(
            f"{m} substrings of {n_bits}-bit codes are {longest} bits long, over {MAX_SUBSTRING_BITS}: "
            f"use at least {math.ceil(n_bits / MAX_SUBSTRING_BITS)} substrings"
        )
    lengths = np.full(m, n_bits // m, np.int64)
    lengths[: n_bits % m] += 1
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)


@njit(cache=True)
def _bits(words, start, length):
    """Bits [start, start + length) of one row of words, as an int64 (length <= 32)."""
    w = start >> 6
    o = np.uint64(start & 63)
    v = words[w] >> o
    if (start & 63) + length > 64:
        v |= words[w + 1] << (np.uint64(64) - o)
    return np.int64(v & ((np.uint64(1) << np.uint64(length)) - np.uint64(1)))


@njit(cache=True)
def _substring_values(words, starts):
    n, m = words.shape[0], len(starts) - 1
    out = np.empty((m, n), np.int64)
    for i in range(n):
        for j in range(m):
            out[j, i] = _bits(words[i], starts[j], starts[j + 1] - starts[j])
    return out


def table_layout(starts: np.ndarray) -> np.ndarray:
    """(m + 1,) where each substring table's offsets begin in the concatenated offsets (a
    table of an s-bit substring has 2^s + 1 of them), and their total at the end."""
    return np.concatenate([[0], np.cumsum((1 << np.diff(starts)) + 1)]).astype(np.int64)


def tables_from_arrays(starts, order_rows: np.ndarray, offsets: np.ndarray) -> dict:
    """The tables of one shard from its stored arrays: ``order_rows`` (n, m), the transpose of
    build_tables' ``order``, and its concatenated ``offsets``."""
    starts = np.asarray(starts, dtype=np.int64)
    return {
        "starts": starts,
        "order": np.ascontiguousarray(order_rows.T),
        "offsets": np.ascontiguousarray(offsets),
        "table_base": table_layout(starts),
    }


def build_tables(codes: np.ndarray, n_bits: int, m: int) -> dict:
    """The m substring tables of a block of codes: ``starts`` (m + 1), ``order`` (m, n) rows
    sorted by substring value (stable: row order within a value), ``offsets`` (concatenated
    per table, 2^s_j + 1 entries each), ``table_base`` (m + 1) where each table's offsets
    begin, and ``sorted_words`` (see sorted_code_words; not stored: rebuilt from the codes)."""
    starts = substring_starts(n_bits, m)
    words = code_words(codes)
    values = _substring_values(words, starts)
    lengths = np.diff(starts)
    row_dtype = np.int32 if len(codes) < 2**31 else np.int64
    order = np.empty((m, len(codes)), row_dtype)
    table_base = table_layout(starts)
    # int32 while a block has < 2^31 rows: half the memory a lookup touches
    offsets = np.empty(int(table_base[-1]), np.int32 if len(codes) < 2**31 else np.int64)
    for j in range(m):
        order[j] = np.argsort(values[j], kind="stable")
        counts = np.bincount(values[j], minlength=1 << int(lengths[j]))
        offsets[table_base[j]] = 0
        np.cumsum(counts, out=offsets[table_base[j] + 1 : table_base[j + 1]])
    return {
        "starts": starts,
        "order": order,
        "offsets": offsets,
        "table_base": table_base,
        "sorted_words": words[order],
    }


@njit(cache=True)
def _next_mask(mask):
    """The next larger integer with as many set bits (Gosper's hack; mask > 0)."""
    low = mask & -mask
    ripple = mask + low
    return (((ripple ^ mask) >> 2) // low) | ripple


@njit(cache=True)
def _search_one(
    query, sorted_words, ids, allowed, starts, order, offsets, table_base, n_bits, k, radius, cand_d, cand_i
):
    """Candidates of one query, found in (radius, substring) order and each counted once.
    kNN (k > 0): until k codes at distance <= the pigeonhole bound are known; radius search
    (k == 0): every code within ``radius``. Returns (count, distances, ids) with the buffers
    grown as needed; the caller selects from them. Rows with ``allowed`` False (when it is
    not empty) are skipped: they are not database rows (a split's queries)."""
    check_rows = len(allowed) > 0
    m = len(starts) - 1
    n_words = sorted_words.shape[2]
    q_sub = np.empty(m, np.int64)
    for j in range(m):
        q_sub[j] = _bits(query, starts[j], starts[j + 1] - starts[j])
    longest = 0
    for j in range(m):
        longest = max(longest, starts[j + 1] - starts[j])
    hist = np.zeros(n_bits + 1, np.int64)
    xor = np.empty(n_words, np.uint64)
    sub_d = np.empty(m, np.int64)
    count = 0
    # kNN: the k-th smallest distance found so far (only decreases); radius: the radius. A
    # candidate beyond it is never in the answer, and leaving it out of the histogram does
    # not change where the histogram reaches k.
    cap = n_bits if k > 0 else radius
    last_r = longest if k > 0 else radius // m
    for r in range(last_r + 1):
        for j in range(m):
            if k == 0 and r == radius // m and j > radius % m:
                break  # radius R = m r + j needs substrings j' > j only to radius r - 1
            length = starts[j + 1] - starts[j]
            if r <= length:
                base = table_base[j]
                mask = (np.int64(1) << r) - 1
                while mask < (np.int64(1) << length):
                    key = q_sub[j] ^ mask
                    for p in range(offsets[base + key], offsets[base + key + 1]):
                        d = 0
                        for w in range(n_words):
                            xor[w] = query[w] ^ sorted_words[j, p, w]
                            d += popcount(xor[w])
                        if d > cap:  # cannot be in the answer: needs no more work
                            continue
                        first = True  # not reachable at an earlier (radius, substring) step
                        for i in range(m):
                            if i != j:
                                sub_d[i] = popcount(np.uint64(_bits(xor, starts[i], starts[i + 1] - starts[i])))
                                if sub_d[i] <= (r if i < j else r - 1):
                                    first = False
                                    break
                        if not first:
                            continue
                        row = order[j, p]
                        if check_rows and not allowed[row]:
                            continue
                        if count == len(cand_d):
                            cand_d = np.concatenate((cand_d, np.empty(len(cand_d), np.int64)))
                            cand_i = np.concatenate((cand_i, np.empty(len(cand_i), np.int64)))
                        cand_d[count] = d
                        cand_i[count] = ids[row]
                        count += 1
                        hist[d] += 1
                    if mask == 0:
                        break
                    mask = _next_mask(mask)
            if k > 0:  # the k-th distance so far caps what is kept; final once within m r + j
                known = 0
                for d in range(cap + 1):
                    known += hist[d]
                    if known >= k:
                        cap = d
                        break
                if known >= k and cap <= m * r + j:
                    return count, cand_d, cand_i
    return count, cand_d, cand_i


@njit(cache=True)
def _mih_topk(queries, sorted_words, ids, allowed, starts, order, offsets, table_base, n_bits, k, out_d, out_i):
    cand_d = np.empty(max(4 * k, 64), np.int64)
    cand_i = np.empty(max(4 * k, 64), np.int64)
    for q in range(queries.shape[0]):
        count, cand_d, cand_i = _search_one(
            queries[q], sorted_words, ids, allowed, starts, order, offsets, table_base, n_bits, k, 0, cand_d, cand_i
        )
        # the k-th distance from a histogram, then a sort of the candidates up to it only
        # (sorting every candidate cost as much as the search)
        hist = np.zeros(n_bits + 2, np.int64)
        for t in range(count):
            hist[cand_d[t]] += 1
        kth, seen = n_bits, 0
        for d in range(n_bits + 1):
            seen += hist[d]
            if seen >= k:
                kth = d
                break
        keep = 0
        for t in range(count):
            if cand_d[t] <= kth:
                cand_d[keep] = cand_d[t]
                cand_i[keep] = cand_i[t]
                keep += 1
        keys = (cand_d[:keep] << ID_BITS) | cand_i[:keep]
        best = np.sort(keys)[: min(k, keep)]
        for t in range(len(best)):
            out_d[q, t] = best[t] >> ID_BITS
            out_i[q, t] = best[t] & ((np.int64(1) << ID_BITS) - 1)


@njit(cache=True)
def _mih_radius(queries, sorted_words, ids, allowed, starts, order, offsets, table_base, n_bits, radius):
    cand_d = np.empty(256, np.int64)
    cand_i = np.empty(256, np.int64)
    q_out, i_out, d_out = [np.empty(0, np.int64)], [np.empty(0, np.int64)], [np.empty(0, np.int64)]
    for q in range(queries.shape[0]):
        count, cand_d, cand_i = _search_one(
            queries[q],
            sorted_words,
            ids,
            allowed,
            starts,
            order,
            offsets,
            table_base,
            n_bits,
            0,
            radius,
            cand_d,
            cand_i,
        )
        q_out.append(np.full(count, q, np.int64))
        i_out.append(cand_i[:count].copy())
        d_out.append(cand_d[:count].copy())
    total = 0
    for a in q_out:
        total += len(a)
    flat_q, flat_i, flat_d = np.empty(total, np.int64), np.empty(total, np.int64), np.empty(total, np.int64)
    at = 0
    for t in range(len(q_out)):
        size = len(q_out[t])
        flat_q[at : at + size] = q_out[t]
        flat_i[at : at + size] = i_out[t]
        flat_d[at : at + size] = d_out[t]
        at += size
    return flat_q, flat_i, flat_d


def sorted_code_words(codes, tables) -> np.ndarray:
    """(m, n, words): the codes in each table's order, so that the codes of one substring
    value are read one after the other (a candidate's code is then rarely a cache miss: on
    10M codes the search compares ~16,000 candidates per query against ~2,600 lookups)."""
    if "sorted_words" not in tables:
        tables["sorted_words"] = code_words(codes)[tables["order"]]
    return tables["sorted_words"]


def _checked(codes, ids, tables, queries, n_bits, allowed):
    ids = np.ascontiguousarray(ids, dtype=np.int64)
    allowed = np.empty(0, np.bool_) if allowed is None else np.ascontiguousarray(allowed, dtype=np.bool_)
    if allowed.size and len(allowed) != len(codes):
        raise ValueError(f"allowed has {len(allowed)} entries for {len(codes)} codes")
    if len(ids) != len(codes) or tables["order"].shape[1] != len(codes):
        raise ValueError(
            f"the index has {tables['order'].shape[1]} codes, the block {len(codes)} codes and {len(ids)} ids; "
            "rebuild the index from these codes"
        )
    if n_bits > 8 * np.asarray(codes).shape[1] or tables["starts"][-1] != n_bits:
        raise ValueError(f"the index was built for {tables['starts'][-1]}-bit codes, not {n_bits}; rebuild it")
    return sorted_code_words(codes, tables), ids, allowed, code_words(queries)


def mih_topk(codes, ids, tables, *, queries, k: int, n_bits: int, allowed=None):
    """Exact top-k of one block through its substring tables: the same (distances int32 (m, k),
    ids int64 (m, k)) as kernels.hamming.hamming_topk, ties by id, -1 padding. ``allowed``
    (bool per row, optional): only these rows are searched."""
    sorted_words, ids, allowed, q_words = _checked(codes, ids, tables, queries, n_bits, allowed)
    out_d, out_i = empty_topk(len(q_words), k)
    if len(codes):
        _mih_topk(q_words, sorted_words, ids, allowed, tables["starts"], tables["order"], tables["offsets"],
                  tables["table_base"], n_bits, k, out_d, out_i)  # fmt: skip
    return out_d, out_i


def mih_radius(codes, ids, tables, *, queries, radius: int, n_bits: int, allowed=None):
    """Every code within ``radius`` of each query: flat (query_index, id, distance) sorted by
    (query, distance, id), as kernels.hamming.hamming_radius; ``allowed`` as in mih_topk."""
    sorted_words, ids, allowed, q_words = _checked(codes, ids, tables, queries, n_bits, allowed)
    empty = np.empty(0, np.int64)
    if not len(codes) or not len(q_words):
        return sort_radius_results(empty, empty, empty)
    q, i, d = _mih_radius(q_words, sorted_words, ids, allowed, tables["starts"], tables["order"], tables["offsets"],
                          tables["table_base"], n_bits, min(int(radius), n_bits))  # fmt: skip
    return sort_radius_results(q, i, d)
