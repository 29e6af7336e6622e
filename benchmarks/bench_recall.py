"""Recall of the true (L2) neighbours against queries per second: our codes (linear scan, MIH,
inverted file, asymmetric and exact re-ranking of the Hamming top-R) beside FAISS's menu (HNSW
over the vectors and over 8-bit scalar-quantised ones, IVF-PQ with a refine step, IVF-RaBitQ
plain and FastScan, each alone and with a refine step, binary multi-hash, binary flat and
binary IVF + the same exact re-ranking), in one process on the same data and queries, with the
memory every search reads; and how well each method's codes find the neighbours at all.

    .venv/bin/python benchmarks/bench_recall.py --dataset debian-sift --out benchmarks/results/recall/debian-sift
    .venv/bin/python benchmarks/bench_recall.py --dataset debian-minilm --out benchmarks/results/recall/debian-minilm
    .venv/bin/python benchmarks/bench_recall.py --dataset sift-synth --n 2000000 --out benchmarks/results/recall/sift-synth-2M
    .venv/bin/python benchmarks/bench_recall.py --dataset debian-sift --families faiss --skip-quality --out /tmp/faiss

What is measured:

* queries: two sets of ``--queries`` rows drawn with the seed (debian-sift, debian-minilm, or
  any dataset path), the other rows the database; for sift-synth, rows n.. of the generator
  (not in the database). The validation set chooses each family's configuration (the fastest
  reaching recall@10 >= 0.9 on it), the test set measures every configuration: no choice is
  made on the numbers reported;
* truth: the exact squared-L2 top-100 of each query (kernels.l2, ties by id); on unit vectors
  (debian-minilm) that is also the cosine order;
* every search asks for the top ``--k`` (default 10, as a user wanting ten neighbours would:
  FAISS's search(Q, k), our kernels' k; candidate counts R and k_factor * k are at least k);
  recall@K = |first K returned ∩ true top K| / K, averaged over queries, for K = 1, 10 and,
  when k reaches it, 100;
* the hash functions learn from every database row, or from the first ``--train-rows``;
* every search runs on one thread (our numba kernels on the calling thread, numpy's BLAS
  limited to one thread for our probes, FAISS with omp_set_num_threads(1)), so queries/s
  compare work, not thread counts; a search's time includes everything from the query
  vectors to the answer except encoding the queries (small), and is the fastest of three
  runs (the first of which compiled nothing: every kernel is compiled before); index builds use
  both cores (FAISS with 2 OpenMP threads, our training on a 2-worker LocalCluster) and their
  seconds are reported;
* RAM per vector (``ram_bytes_per_vector``): the bytes of everything the timed search reads
  from memory, divided by the database rows, summed from the arrays themselves (``ram_bytes``):
  codes, ids and list layouts as they are typed, centroids, MIH tables, and the vectors
  whenever a row re-ranks exactly from them (the whole database X: any row may be a
  candidate). FAISS's rows count the index's own serialised size (the vectors included for
  HNSW-Flat and every refine step); above 2M rows, where serialising would copy the whole
  index, its RSS growth instead;
* the check of that count: this process's resident set grows while each structure is built
  (measured after a garbage collection, ``rss_growth_bytes_per_vector``); what the search reads
  but was resident before (the vectors, the ids, a shared base index) is listed beside it
  (``rss_growth_excludes``), and the report names every structure whose count and measured
  growth differ by more than a quarter.

``--families`` (comma-separated prefixes of family names, e.g. ``faiss,ours: IVF``) runs a
subset: structures no selected family reads are not built.

The code-quality table (``--quality-bits``, ``--skip-quality``): recall@``--quality-at``
(default 1000) of the exact top-100 in Hamming order, the DisH paper's measure, for ITQ, DisH
(10 nodes, contiguous partition: on debian-sift, whose rows are ordered by image, nodes hold
different images) and SGH. Writes ``--out``.json, ``--out``.md and ``--out``.png (recall@10
against queries/s).
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.harness.measure import machine_info  # noqa: E402

TRUE_K = 100
RECALL_AT = (1, 10, 100)
TARGET_RECALL = 0.9
# a structure whose counted bytes and measured RSS growth differ by more than this share of
# the count is named in the report: either the count misses something or the build leaves
# memory behind
RSS_TOLERANCE = 0.25
# above this many rows FAISS's serialised index (a whole copy) is not made; its RSS growth
# stands in for its size
SERIALISE_LIMIT = 2_000_000


def timed(fn):
    """(fn(), its wall seconds)."""
    started = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - started


def _malloc_trim():
    """glibc's malloc_trim(0), or nothing where the C library has none."""
    try:
        return ctypes.CDLL(None).malloc_trim
    except (AttributeError, OSError):
        return lambda pad: 0


_MALLOC_TRIM = _malloc_trim()


def rss_now() -> int:
    """This process's resident set in bytes, after a full garbage collection and after the C
    allocator hands its free pages back (glibc keeps freed blocks below its mmap threshold,
    so an index dropped earlier would otherwise be reused unseen by the next build)."""
    gc.collect()
    _MALLOC_TRIM(0)
    return psutil.Process().memory_info().rss


def ram_bytes(*arrays) -> int:
    """The bytes the arrays occupy (numpy arrays, or a FAISS index serialised into one)."""
    return int(sum(int(a.nbytes) for a in arrays))


def built(fn):
    """(fn(), its seconds, this process's RSS growth in bytes while it ran)."""
    before = rss_now()
    out, seconds = timed(fn)
    return out, seconds, rss_now() - before


def memory_fields(structure: str, n: int, ram: int, rss_growth: int, resident_before: dict | None = None) -> dict:
    """A row's memory: ``ram`` bytes read by its timed search, the RSS growth of building
    ``structure``, and ``resident_before`` ({what: bytes}) of what the search reads that was
    resident before the build (the growth cannot contain it), all per database vector."""
    return {
        "structure": structure,
        "ram_bytes_per_vector": ram / n,
        "rss_growth_bytes_per_vector": rss_growth / n,
        "rss_growth_excludes": {what: size / n for what, size in (resident_before or {}).items()},
    }


class Families:
    """The families a run measures: those starting with one of the comma-separated prefixes,
    or every family when there are none."""

    def __init__(self, spec: str | None):
        self.prefixes = [p.strip() for p in (spec or "").split(",") if p.strip()]

    def __call__(self, family: str) -> bool:
        return not self.prefixes or any(family.startswith(p) for p in self.prefixes)

    def any(self, families) -> bool:
        return any(self(f) for f in families)


def load(dataset: str, n: int | None, n_queries: int, seed: int):
    """(database X, its ids, test queries, validation queries, description). The validation
    queries are drawn as the test ones are, from rows that are neither test queries nor in
    the database; ``n`` limits a stored dataset's database to its first n rows."""
    if dataset == "sift-synth":
        from dask_hashcodes.data.synth import sift_rows

        n = n or 1_000_000
        test, validation = sift_rows(seed, n, n + n_queries), sift_rows(seed, n + n_queries, n + 2 * n_queries)
        return sift_rows(seed, 0, n), np.arange(n), test, validation, f"sift-synth, {n:,} rows"
    from dask_hashcodes.data.sources import resolve_dataset

    ds = resolve_dataset(dataset)  # never with n: a named source of n rows is another (new) build
    X = np.asarray(ds.features[...])
    rng = np.random.default_rng(seed)
    query_rows = np.sort(rng.choice(len(X), n_queries, replace=False))
    rest = np.setdiff1d(np.arange(len(X)), query_rows)
    validation_rows = np.sort(rng.choice(rest, n_queries, replace=False))
    db = np.setdiff1d(rest, validation_rows)[:n]
    what = f"{ds.source}, {len(db):,} database rows of {X.shape[1]}-d {X.dtype}"
    if np.issubdtype(X.dtype, np.floating) and np.allclose(np.linalg.norm(X[db[:1000]], axis=1), 1, atol=1e-3):
        what += " unit vectors (the exact L2 order is their cosine order)"
    return X[db], db, X[query_rows], X[validation_rows], what


def recalls(found: np.ndarray, truth: np.ndarray) -> dict:
    """recall@K for every K of RECALL_AT the search returned (None for deeper K)."""
    out = {}
    for k in RECALL_AT:
        if k > found.shape[1]:
            out[f"recall@{k}"] = None
            continue
        hits = [len(np.intersect1d(found[q, :k], truth[q, :k])) for q in range(len(truth))]
        out[f"recall@{k}"] = float(np.mean(hits) / k)
    return out


def parse_spec(spec: str) -> tuple[str, dict]:
    """ "dish init=pca max_iter=100" -> ("dish", {"init": "pca", "max_iter": 100})."""
    name, *pairs = spec.split()
    params = {}
    for pair in pairs:
        key, value = pair.split("=", 1)
        params[key] = int(value) if value.isdigit() else float(value) if value.replace(".", "", 1).isdigit() else value
    return name, params


def train(method: str, bits: int, X: np.ndarray, seed: int, **params):
    import dask.array as da

    from dask_hashcodes.hashing import make_hasher

    model = make_hasher(method, bits, random_state=seed, **params)
    return timed(lambda: model.fit(da.from_array(X, chunks=(131072, X.shape[1]))))


@dataclass
class QuerySet:
    """One split of the queries: ``validation`` chooses each family's configuration, ``test``
    measures it. ``truth`` is the exact top-100 (database positions); ``k`` how many
    neighbours every search returns (recall@K is measured for K <= k)."""

    split: str
    vectors: np.ndarray
    truth: np.ndarray
    k: int = TRUE_K


# each search is timed this many times and its fastest run kept (as timeit does): a shared
# virtual machine's hiccups then slow no configuration more than another
REPEATS = 3


def measured(query_sets, search, **row) -> dict:
    """A result row: ``search(query_set)`` -> (found positions (nq, >= 100), seconds) on every
    query set (the fastest of REPEATS runs), on one thread (BLAS and OpenMP limited to 1, so numpy's probes are timed as
    FAISS's searches are); the test set's numbers at the top level, the validation set's
    under "validation". ``row`` carries the family, config, build seconds and memory_fields."""
    from threadpoolctl import threadpool_limits

    for qs in query_sets:
        with threadpool_limits(1):
            runs = [search(qs) for _ in range(REPEATS)]
        found, seconds = runs[0][0], min(s for _, s in runs)
        numbers = {"seconds": seconds, "queries_per_second": len(qs.vectors) / seconds, **recalls(found, qs.truth)}
        if qs.split == "test":
            row.update(numbers)
        else:
            row["validation"] = numbers
    print(row, flush=True)
    return row


@dataclass
class Coded:
    """A trained model's codes of the database and of each query split, with what encoding
    the database cost (seconds, RSS growth)."""

    name: str
    bits: int
    codes: np.ndarray
    query_codes: dict
    seconds: float
    rss_growth: int


def encoded(model, method: str, bits: int, X: np.ndarray, query_sets) -> Coded:
    codes, seconds, growth = built(lambda: model.encode(X))
    query_codes = {qs.split: model.encode(qs.vectors) for qs in query_sets}
    return Coded(f"{method} {bits}b", bits, codes, query_codes, seconds, growth)


OUR_FAMILIES = (
    "ours: Hamming order",
    "ours: MIH + exact re-rank",
    "ours: IVF",
    "ours: IVF + exact re-rank",
    "ours: asymmetric re-rank",
    "ours: exact re-rank",
)


def our_rows(model, coded: Coded, X, ids, query_sets, candidates, ivf_lists_per_root, build_seconds, wants):
    """Linear scan, MIH (alone and as the source of candidates), the inverted file, asymmetric
    and exact re-ranking of the Hamming top-R."""
    from dask_hashcodes.kernels.hamming import hamming_topk
    from dask_hashcodes.kernels.mih import build_tables, default_substrings, mih_topk
    from dask_hashcodes.kernels.rerank import (
        exact_pair_distances,
        lower_bound_pair_distances,
        lower_bound_tables,
        pairs_topk,
    )

    codes, query_codes, bits, name, n = coded.codes, coded.query_codes, coded.bits, coded.name, len(X)
    build_seconds += coded.seconds
    rows = []
    qc = next(iter(query_codes.values()))
    hamming_topk(codes[:1000], ids[:1000], queries=qc[:2], k=10)  # compile every kernel before timing
    two = np.arange(2)
    pairs_topk(two, two, exact_pair_distances(X[:2], X, two, two), 2, 1)
    lower_bound_pair_distances(model.project(X[:2]), codes, two, two)
    # the scan reads the codes and the ids it returns; a re-rank also reads X, resident before
    scan_memory = memory_fields(f"{name} codes", n, ram_bytes(codes, ids), coded.rss_growth, {"ids": ids.nbytes})
    rerank_memory = memory_fields(f"{name} codes", n, ram_bytes(codes, ids, X), coded.rss_growth,
                                  {"ids": ids.nbytes, "X": X.nbytes})  # fmt: skip

    def scan(qs, k=None):
        (_, found), s = timed(lambda: hamming_topk(codes, ids, queries=query_codes[qs.split], k=k or qs.k))
        return found, s

    if wants("ours: Hamming order"):
        rows.append(measured(query_sets, scan, family="ours: Hamming order", config=f"{name} linear scan",
                             build_seconds=build_seconds, **scan_memory))  # fmt: skip
    if wants.any(("ours: Hamming order", "ours: MIH + exact re-rank")):
        m = default_substrings(bits, n)
        tables, build_s, growth = built(lambda: build_tables(codes, bits, m))
        mih_topk(codes[:1000], ids[:1000], build_tables(codes[:1000], bits, m), queries=qc[:2], k=10, n_bits=bits)
        # the search reads the tables (with their own copy of the codes in each table's order) and the ids
        table_arrays = [tables[key] for key in sorted(tables)]
        structure = f"{name} MIH (m={m}) tables"

        def mih(qs):
            (_, found), s = timed(
                lambda: mih_topk(codes, ids, tables, queries=query_codes[qs.split], k=qs.k, n_bits=bits)
            )
            return found, s

        if wants("ours: Hamming order"):
            rows.append(measured(query_sets, mih, family="ours: Hamming order", config=f"{name} MIH (m={m})",
                                 build_seconds=build_seconds + build_s,
                                 **memory_fields(structure, n, ram_bytes(ids, *table_arrays), growth,
                                                 {"ids": ids.nbytes})))  # fmt: skip
        for R in candidates if wants("ours: MIH + exact re-rank") else ():

            def mih_exact(qs, R=R):
                (_, cand), s = timed(
                    lambda: mih_topk(codes, ids, tables, queries=query_codes[qs.split], k=R, n_bits=bits)
                )
                (_, found), s2 = timed(lambda: _exact_rerank(X, ids, qs.vectors, cand, qs.k))
                return found, s + s2

            rows.append(measured(query_sets, mih_exact, family="ours: MIH + exact re-rank",
                                 config=f"{name} MIH (m={m}) top-{R} exact (reads {R} vectors/query)",
                                 build_seconds=build_seconds + build_s,
                                 **memory_fields(structure, n, ram_bytes(ids, *table_arrays, X), growth,
                                                 {"ids": ids.nbytes, "X": X.nbytes})))  # fmt: skip
        tables = table_arrays = None
    if wants.any(("ours: IVF", "ours: IVF + exact re-rank")):
        for per_root in ivf_lists_per_root:
            rows += ivf_rows(coded, X, ids, query_sets, candidates, per_root, build_seconds, wants)
    projections = {qs.split: model.project(qs.vectors) for qs in query_sets}
    for R in candidates:

        def asym(qs, R=R):
            cand, scan_s = scan(qs, R)
            qi = np.repeat(np.arange(len(qs.vectors)), R)
            started = time.perf_counter()  # the per-query tables are part of the query's cost
            tables = lower_bound_tables(projections[qs.split])
            distances = lower_bound_pair_distances(projections[qs.split], codes, qi, cand.ravel(), tables=tables)
            _, found = pairs_topk(qi, cand.ravel(), distances, len(qs.vectors), qs.k)
            return found, scan_s + time.perf_counter() - started

        def exact(qs, R=R):
            cand, scan_s = scan(qs, R)
            (_, found), s = timed(lambda: _exact_rerank(X, ids, qs.vectors, cand, qs.k))
            return found, scan_s + s

        if wants("ours: asymmetric re-rank"):
            rows.append(measured(query_sets, asym, family="ours: asymmetric re-rank",
                                 config=f"{name} top-{R} asymmetric", build_seconds=build_seconds,
                                 **scan_memory))  # fmt: skip
        if wants("ours: exact re-rank"):
            rows.append(measured(query_sets, exact, family="ours: exact re-rank",
                                 config=f"{name} top-{R} exact (reads {R} vectors/query)",
                                 build_seconds=build_seconds, **rerank_memory))  # fmt: skip
    return rows


NPROBES = (1, 4, 8, 16, 32, 64)
# the inverted file's exact re-ranking: fewer candidates than the flat scan needs, as the
# probed lists already hold the query's near rows
IVF_CANDIDATES = (100, 150, 200, 300, 1000)


def _exact_rerank(X, ids, Q, cand, k):
    """Exact L2 re-ranking of candidate positions (nq, R), -1 padding dropped."""
    from dask_hashcodes.kernels.rerank import exact_pair_distances, pairs_topk

    qi = np.repeat(np.arange(len(Q)), cand.shape[1])
    pos = cand.ravel()
    keep = pos >= 0
    qi, pos = qi[keep], pos[keep]
    return pairs_topk(qi, ids[pos], exact_pair_distances(Q, X, qi, pos), len(Q), k)


_PARTITIONS = {}


def ivf_rows(coded: Coded, X, ids, query_sets, candidates, per_root, build_seconds, wants):
    """Our inverted file with ``per_root`` * sqrt(n) lists (k-means on the vectors), ranked by
    the codes' Hamming distance, and the serving path: the Hamming top-R of the probed lists
    re-ranked by exact L2 in the same compiled loop (kernels.ivf.search_lists_exact)."""
    from dask_hashcodes.kernels.ivf import list_layout, probed_lists, search_lists, search_lists_exact
    from dask_hashcodes.kernels.knn import cell_partition

    name, codes, query_codes, n = coded.name, coded.codes, coded.query_codes, len(X)
    n_lists = max(1, int(round(per_root * np.sqrt(n))))
    resident = {}  # the search reads its own copies of the codes and ids, in list order
    if n_lists in _PARTITIONS:  # the lists depend on the vectors only: learnt once per count
        resident["centroids (learnt for an earlier code)"] = _PARTITIONS[n_lists][0][0].nbytes
    else:
        # compiled on a few rows first: numba's compilation is not the structure's memory
        list_layout(cell_partition(X[:64], 2, np.random.default_rng(0))[1], 2)
        _PARTITIONS[n_lists] = built(lambda: cell_partition(X, n_lists, np.random.default_rng(0)))
    (centroids, assignment), partition_s, partition_growth = _PARTITIONS[n_lists]

    def layout():
        order, offsets = list_layout(assignment, n_lists)
        return order, offsets, codes[order], ids[order]

    (order, offsets, list_codes, list_ids), layout_s, layout_growth = built(layout)
    growth = layout_growth + (0 if resident else partition_growth)
    structure = f"{name} IVF{n_lists} lists"
    hamming_memory = memory_fields(structure, n, ram_bytes(list_codes, list_ids, offsets, centroids), growth, resident)
    # the exact loop also maps list positions back to database rows (order) to read X
    exact_memory = memory_fields(structure, n, ram_bytes(list_codes, list_ids, offsets, centroids, order, X), growth,
                                 {**resident, "X": X.nbytes})  # fmt: skip
    build_seconds += partition_s + layout_s
    some = query_sets[0]
    search_lists_exact(query_codes[some.split][:2], some.vectors[:2], probed_lists(some.vectors[:2], centroids, 2),
                       list_codes, list_ids, offsets, X, order, 10, 10)  # compile before timing  # fmt: skip
    search_lists(query_codes[some.split][:2], probed_lists(some.vectors[:2], centroids, 2), list_codes, list_ids,
                 offsets, 10)  # fmt: skip
    rows = []
    for nprobe in [p for p in NPROBES if p <= n_lists]:

        def hamming(qs, nprobe=nprobe):
            started = time.perf_counter()
            probes = probed_lists(qs.vectors, centroids, nprobe)
            _, found = search_lists(query_codes[qs.split], probes, list_codes, list_ids, offsets, qs.k)
            return found, time.perf_counter() - started

        if wants("ours: IVF"):
            rows.append(measured(query_sets, hamming, family="ours: IVF",
                                 config=f"{name} IVF{n_lists} nprobe={nprobe}", build_seconds=build_seconds,
                                 **hamming_memory))  # fmt: skip
        for R in IVF_CANDIDATES if wants("ours: IVF + exact re-rank") else ():

            def serve(qs, nprobe=nprobe, R=R):
                started = time.perf_counter()
                probes = probed_lists(qs.vectors, centroids, nprobe)
                _, found = search_lists_exact(query_codes[qs.split], qs.vectors, probes, list_codes, list_ids, offsets,
                                              X, order, R, qs.k)  # fmt: skip
                return found, time.perf_counter() - started

            rows.append(measured(query_sets, serve, family="ours: IVF + exact re-rank",
                                 config=f"{name} IVF{n_lists} nprobe={nprobe} top-{R} exact (reads {R} vectors/query)",
                                 build_seconds=build_seconds, **exact_memory))  # fmt: skip
    return rows


FAISS_FLOAT_FAMILIES = (
    "faiss HNSW-Flat",
    "faiss HNSW-SQ8",
    "faiss IVF-PQ + refine",
    "faiss IVF-RaBitQ",
    "faiss IVF-RaBitQ + refine",
    "faiss IVF-RaBitQ + SQ8 refine",
    "faiss IVF-RaBitQ FastScan",
    "faiss IVF-RaBitQ FastScan + refine",
    "faiss IVF-RaBitQ FastScan + SQ8 refine",
    "faiss IVF-RaBitQ 4-bit",
)
# (family, factory code, whether its refine steps are built too): 1-bit codes alone rank too
# coarsely to reach the target recall, hence the refine steps; 4 bits a coordinate (FAISS's
# multi-bit RaBitQ) is the variant that might without one
RABITQ_BUILDS = (
    ("faiss IVF-RaBitQ", "RaBitQ", True),
    ("faiss IVF-RaBitQ FastScan", "RaBitQfs", True),
    ("faiss IVF-RaBitQ 4-bit", "RaBitQ4", False),
)
EF_SEARCH = (8, 12, 16, 24, 32, 48, 64, 96, 128, 256)
IVF_NPROBES = (4, 8, 16, 32, 64, 128, 256)
# a refine step re-ranks the base index's k_factor * k best by the stored vectors: its grid is
# the probed lists times these candidate counts (k_factor = count / k), as our re-ranks read R rows
REFINE_NPROBES = (8, 16, 32, 48, 64)
REFINE_CANDIDATES = (50, 100, 200, 400)
# RaBitQ's query quantisation: 8 bits per query coordinate, the finest FAISS offers (the
# FastScan index's default; the plain one's is 4)
RABITQ_QUERY_BITS = 8
# the rows FAISS's k-means and quantisers learn from (FAISS samples as much itself)
FAISS_TRAIN_ROWS = 100_000


def faiss_float_rows(X, ids, query_sets, wants, build_threads=2, hnsw_m=(16, 32)):
    """FAISS's indexes over the vectors themselves, each built from its index-factory string:
    HNSW over the vectors (M from ``hnsw_m``) and over 8-bit scalar-quantised ones (M=32);
    IVF-PQ with an exact refine step; IVF-RaBitQ and IVF-RaBitQ FastScan, each alone, with an
    exact refine step (float32 vectors, IndexRefineFlat) and with a refine step through 8-bit
    scalar-quantised vectors (IndexRefine over IndexScalarQuantizer: a refine that holds a
    byte per dimension, as our exact re-rank of uint8 vectors does); and IVF-RaBitQ with 4 bits a
    coordinate (FAISS's multi-bit codes) alone. A RaBitQ base index is
    built once and its two refine steps wrap it (what "IVF..,RaBitQ,RFlat" and
    "IVF..,RaBitQ,Refine(SQ8)" build, without training the base three times)."""
    import faiss

    rows = []
    n, d = X.shape
    Xf = np.ascontiguousarray(X, dtype=np.float32)  # FAISS's input, resident before every build
    train_rows = Xf[np.sort(np.random.default_rng(0).choice(n, min(n, FAISS_TRAIN_ROWS), replace=False))]
    nlist = int(2 ** round(np.log2(4 * np.sqrt(n))))

    def build(make):
        faiss.omp_set_num_threads(build_threads)

        def fill():
            index = make()
            if not index.is_trained:
                index.train(train_rows)
            if index.ntotal == 0:
                index.add(Xf)
            return index

        return built(fill)

    def index_bytes(index, growth) -> int:
        # serialising copies the whole index: above the limit its RSS growth stands in
        return ram_bytes(faiss.serialize_index(index)) if n <= SERIALISE_LIMIT else growth

    def searcher(index):
        def search(qs):
            faiss.omp_set_num_threads(1)
            Qf = np.ascontiguousarray(qs.vectors, dtype=np.float32)
            (_, found), s = timed(lambda: index.search(Qf, qs.k))
            return ids[np.maximum(found, 0)], s

        return search

    def sweep(index, family, settings, build_seconds, memory):
        """One row per (config, set_parameters) of ``settings``."""
        for config, set_parameters in settings:
            set_parameters()
            rows.append(measured(query_sets, searcher(index), family=family, config=config,
                                 build_seconds=build_seconds, **memory))  # fmt: skip

    def set_ef(index, ef):
        faiss.downcast_index(index).hnsw.efSearch = ef

    hnsw_builds = [("faiss HNSW-Flat", f"HNSW{M},Flat") for M in hnsw_m] + [("faiss HNSW-SQ8", "HNSW32,SQ8")]
    for family, factory in hnsw_builds:
        if not wants(family):
            continue
        index, build_s, growth = build(lambda factory=factory: faiss.index_factory(d, factory))
        memory = memory_fields(factory, n, index_bytes(index, growth), growth)
        settings = [(f"{factory} efSearch={ef}", lambda ef=ef, index=index: set_ef(index, ef)) for ef in EF_SEARCH]
        sweep(index, family, settings, build_s, memory)
        index = settings = None  # the settings hold the index too: freed before the next build

    def set_nprobe(index, nprobe):
        faiss.extract_index_ivf(index).nprobe = nprobe

    def set_refine(refine, base, nprobe, k_factor):
        set_nprobe(base, nprobe)
        refine.k_factor = k_factor

    k_factors = sorted({max(1, count // query_sets[0].k) for count in REFINE_CANDIDATES})

    def refine_settings(name, refine, base):
        return [(f"{name} nprobe={p} k_factor={kf}", lambda p=p, kf=kf: set_refine(refine, base, p, kf))
                for p in REFINE_NPROBES if p <= nlist for kf in k_factors]  # fmt: skip

    if wants("faiss IVF-PQ + refine"):
        factory = f"IVF{nlist},PQ{max(1, d // 8)},RFlat"
        index, build_s, growth = build(lambda: faiss.index_factory(d, factory))
        memory = memory_fields(factory, n, index_bytes(index, growth), growth)
        sweep(index, "faiss IVF-PQ + refine", refine_settings(factory, index, index.base_index), build_s, memory)
        index = None

    for family, code, refined in RABITQ_BUILDS:
        refines = (f"{family} + refine", f"{family} + SQ8 refine") if refined else ()
        if not wants.any((family, *refines)):
            continue
        factory = f"IVF{nlist},{code}"
        base, base_s, base_growth = build(lambda factory=factory: faiss.index_factory(d, factory))
        faiss.downcast_index(base).qb = RABITQ_QUERY_BITS
        base_bytes = index_bytes(base, base_growth)
        name = f"{factory} qb={RABITQ_QUERY_BITS}"
        if wants(family):
            settings = [(f"{name} nprobe={p}", lambda p=p, base=base: set_nprobe(base, p))
                        for p in IVF_NPROBES if p <= nlist]  # fmt: skip
            sweep(base, family, settings, base_s, memory_fields(factory, n, base_bytes, base_growth))
            settings = None  # the settings hold the base index: freed with it
        exact_refine = (f"{factory},RFlat", lambda base=base: faiss.IndexRefineFlat(base, faiss.swig_ptr(Xf)))

        def sq8_refine(base=base):
            vectors = faiss.IndexScalarQuantizer(d, faiss.ScalarQuantizer.QT_8bit)
            vectors.train(train_rows)
            vectors.add(Xf)
            return faiss.IndexRefine(base, vectors)  # FAISS's wrapper keeps both parts alive

        for refine_family, (structure, make) in zip(refines, (exact_refine, (f"{factory},Refine(SQ8)", sq8_refine))):
            if not wants(refine_family):
                continue
            refine, refine_s, refine_growth = build(make)
            memory = memory_fields(structure, n, index_bytes(refine, base_growth + refine_growth),
                                   refine_growth, {"base index": base_bytes})  # fmt: skip
            sweep(refine, refine_family, refine_settings(f"{structure} qb={RABITQ_QUERY_BITS}", refine, base),
                  base_s + refine_s, memory)  # fmt: skip
            refine = None
        base = exact_refine = sq8_refine = None  # the refine makers hold the base: freed before the next build
    return rows


FAISS_BINARY_FAMILIES = ("faiss binary", "faiss binary IVF", "faiss binary IVF + exact re-rank")


def faiss_binary_rows(X, ids, query_sets, coded: Coded, candidates, n_lists, wants):
    """FAISS's binary indexes over our codes: multi-hash, flat + our exact re-ranking, and
    IndexBinaryIVF with ``n_lists`` lists (+ the same re-ranking)."""
    import faiss

    from dask_hashcodes.kernels.mih import default_substrings

    codes, query_codes, bits, n = coded.codes, coded.query_codes, coded.bits, len(X)
    m = default_substrings(bits, n)

    def searcher(index, R, rerank):
        def search(qs):
            faiss.omp_set_num_threads(1)
            (_, cand), s = timed(lambda: index.search(query_codes[qs.split], R or qs.k))
            if not rerank:
                return ids[np.maximum(cand, 0)], s
            (_, found), s2 = timed(lambda: _exact_rerank(X, ids, qs.vectors, cand, qs.k))
            return found, s + s2

        return search

    def binary_memory(structure, index, growth, rerank):
        ram = ram_bytes(faiss.serialize_index_binary(index), *([X] if rerank else []))
        return memory_fields(structure, n, ram, growth, {"X": X.nbytes} if rerank else {})

    rows = []
    if wants("faiss binary"):
        structure = f"IndexBinaryMultiHash ({bits}b codes, {m} x {bits // m} bits)"
        multi, build_s, growth = built(lambda: _filled(faiss.IndexBinaryMultiHash(bits, m, bits // m), codes))
        memory = binary_memory(structure, multi, growth, rerank=False)
        for nflip in (0, 1, 2):
            multi.nflip = nflip
            rows.append(measured(query_sets, searcher(multi, None, False), family="faiss binary",
                                 config=f"{structure} nflip={nflip}", build_seconds=build_s, **memory))  # fmt: skip
        multi = None

        structure = f"IndexBinaryFlat ({bits}b codes)"
        flat, build_s, growth = built(lambda: _filled(faiss.IndexBinaryFlat(bits), codes))
        memory = binary_memory(structure, flat, growth, rerank=True)
        for R in candidates:
            rows.append(measured(query_sets, searcher(flat, R, True), family="faiss binary",
                                 config=f"{structure} top-{R} + exact re-rank", build_seconds=build_s,
                                 **memory))  # fmt: skip
        flat = None

    if not wants.any(("faiss binary IVF", "faiss binary IVF + exact re-rank")):
        return rows
    # FAISS's lists come from k-means on the codes (binary centroids), ours from k-means on the vectors
    faiss.omp_set_num_threads(2)
    structure = f"IndexBinaryIVF{n_lists} ({bits}b codes)"

    def binary_ivf():
        ivf = faiss.IndexBinaryIVF(faiss.IndexBinaryFlat(bits), bits, n_lists)
        ivf.train(codes)
        return _filled(ivf, codes)

    ivf, build_s, growth = built(binary_ivf)
    plain, reranked = binary_memory(structure, ivf, growth, False), binary_memory(structure, ivf, growth, True)
    for nprobe in [p for p in NPROBES if p <= n_lists]:
        ivf.nprobe = nprobe
        if wants("faiss binary IVF"):  # the prefix of the re-ranking family too: both are wanted then
            rows.append(measured(query_sets, searcher(ivf, None, False), family="faiss binary IVF",
                                 config=f"{structure} nprobe={nprobe}", build_seconds=build_s, **plain))  # fmt: skip
        for R in IVF_CANDIDATES if wants("faiss binary IVF + exact re-rank") else ():
            rows.append(measured(query_sets, searcher(ivf, R, True), family="faiss binary IVF + exact re-rank",
                                 config=f"{structure} nprobe={nprobe} top-{R} + exact re-rank",
                                 build_seconds=build_s, **reranked))  # fmt: skip
    return rows


def _filled(index, codes):
    index.add(codes)
    return index


def code_quality(X, ids, Q, truth, bits_list, at, seed, specs, train_rows=None):
    """recall@at of the exact top-100 in Hamming order, per method (``specs``: "name key=value
    ...") and length."""
    from dask_hashcodes.kernels.hamming import hamming_topk

    out = []
    for bits in bits_list:
        for method in specs:
            name, params = parse_spec(method)
            model, fit_s = train(name, bits, X[:train_rows], seed, **params)
            codes, qcodes = model.encode(X), model.encode(Q)
            _, found = hamming_topk(codes, ids, queries=qcodes, k=at)
            hits = [len(np.intersect1d(found[q], truth[q])) for q in range(len(truth))]
            out.append({"method": method, "bits": bits, f"recall@{at}_of_top100": float(np.mean(hits) / TRUE_K),
                        "train_seconds": fit_s, "iterations": model.training_stats_.get("iterations")})  # fmt: skip
            print(out[-1], flush=True)
    return out


def choose(rows) -> dict:
    """Per family, the row of the fastest configuration on the validation queries among those
    whose validation recall@10 reaches TARGET_RECALL (None if none does)."""
    out = {}
    for family in sorted({r["family"] for r in rows}):
        good = [r for r in rows if r["family"] == family and r["validation"]["recall@10"] >= TARGET_RECALL]
        out[family] = max(good, key=lambda r: _per_second(r["validation"])) if good else None
    return out


def within_ceiling(rows) -> dict:
    """Per family of ours, ``choose`` among the configurations whose RAM per vector is at most
    ``hnsw_ceiling`` (the memory goal): the choice a user with that budget makes."""
    ceiling = hnsw_ceiling(rows)
    if ceiling is None:
        return {}
    return choose([r for r in rows if r["family"].startswith("ours") and ram_of(r) <= ceiling])


def _per_second(numbers: dict) -> float:
    return numbers["queries_per_second"]


def ram_of(row: dict) -> float:
    """A row's RAM per vector: everything its timed search read from memory (results written
    before it was counted are migrated by benchmarks/recount_ram.py)."""
    return row["ram_bytes_per_vector"]


def defaults_lines(rows, n) -> list[str]:
    """Our inverted file at the library's defaults (lists, nprobe, candidates for k = 10),
    per code: the defaults were chosen on one data set's validation queries, and this
    line re-checks them on every other."""
    from dask_hashcodes.indexes.ivf import DEFAULT_NPROBE, default_lists
    from dask_hashcodes.indexes.rerank import K_FACTOR

    wanted = f"IVF{default_lists(n)} nprobe={DEFAULT_NPROBE} top-{K_FACTOR * 10} "
    at_defaults = [r for r in rows if r["family"] == "ours: IVF + exact re-rank" and wanted in r["config"]]
    if not at_defaults:
        return residual_defaults_lines(rows, n)
    lines = ["", f"Our inverted file at the library's defaults ({wanted.strip()}), test queries:", ""]
    for r in at_defaults:
        lines.append(f"- {r['config']}: {r['queries_per_second']:,.0f} queries/s, recall@10 {r['recall@10']:.3f} "
                     f"(validation {r['validation']['recall@10']:.3f})")  # fmt: skip
    return lines + residual_defaults_lines(rows, n)


def residual_defaults_lines(rows, n) -> list[str]:
    """The residual inverted file at the library's defaults, on the test queries: chosen on one
    data set's validation queries, re-checked on every other."""
    from dask_hashcodes.indexes.residual import DEFAULT_EPS, DEFAULT_NPROBE, DEFAULT_ROTATION, default_residual_lists

    lists, tail = (
        f"residual IVF{default_residual_lists(n)} (",
        f"{DEFAULT_ROTATION} rotation) nprobe={DEFAULT_NPROBE} eps={DEFAULT_EPS}",
    )
    at_defaults = [r for r in rows if r["family"] == "ours: residual IVF" and r["config"].startswith(lists)
                   and r["config"].endswith(tail)]  # fmt: skip
    return (
        ["", "The residual inverted file at the library's defaults, test queries:", ""]
        + [
            f"- {r['config']}: {r['queries_per_second']:,.0f} queries/s, recall@10 {r['recall@10']:.3f} "
            f"(validation {r['validation']['recall@10']:.3f}), {ram_of(r):.1f} RAM B/vector"
            for r in at_defaults
        ]
        if at_defaults
        else []
    )


def rss_check_lines(rows) -> list[str]:
    """One line per built structure whose counted bytes and measured RSS growth (plus what
    was resident before) differ by more than RSS_TOLERANCE of the count."""
    structures = {}
    for r in rows:
        if "rss_growth_bytes_per_vector" in r:
            structures.setdefault(r["structure"], r)
    if not structures:
        return []
    lines = []
    for structure, r in structures.items():
        counted, growth = r["ram_bytes_per_vector"], r["rss_growth_bytes_per_vector"]
        resident = sum(r["rss_growth_excludes"].values())
        if abs(counted - (growth + resident)) <= RSS_TOLERANCE * counted:
            continue
        before = "".join(f" + {what} {size:.1f}" for what, size in r["rss_growth_excludes"].items())
        lines.append(f"- {structure}: counted {counted:.1f} B/vector, measured {growth:.1f} B/vector of RSS growth"
                     f"{before} resident before = {growth + resident:.1f}: they differ by more than "
                     f"{RSS_TOLERANCE:.0%}")  # fmt: skip
    head = [
        "",
        f"RAM counted against this process's RSS growth while each structure was built ({len(structures)} "
        f"structures; {len(structures) - len(lines)} agree within {RSS_TOLERANCE:.0%}):",
        "",
    ]
    return head + (lines or ["- every structure agrees"])


def hnsw_ceiling(rows) -> float | None:
    """A quarter of HNSW-Flat M=32's RAM per vector: the memory our rows may use at most."""
    for r in rows:
        if r.get("structure") == "HNSW32,Flat" or r["config"].startswith("IndexHNSWFlat M=32 "):
            return ram_of(r) / 4
    return None


def peer_lines(chosen) -> list[str]:
    """Each of our chosen configurations against each FAISS family's: queries/s and RAM ratios."""
    ours = {f: r for f, r in chosen.items() if r is not None and f.startswith("ours")}
    faiss_rows = {f: r for f, r in chosen.items() if r is not None and f.startswith("faiss")}
    if not ours or not faiss_rows:
        return []
    lines = ["", "Ours against every FAISS family, each at its configuration chosen on validation (ratios ours / FAISS):",
             "", "| ours | FAISS family | queries/s ratio | RAM ratio |", "|---|---|---|---|"]  # fmt: skip
    for family, r in ours.items():
        for peer, p in faiss_rows.items():
            ram_ratio = "—" if not ram_of(r) or not ram_of(p) else f"{ram_of(r) / ram_of(p):.3f}"
            lines.append(f"| {family} | {peer} | {r['queries_per_second'] / p['queries_per_second']:.2f}x | "
                         f"{ram_ratio} |")  # fmt: skip
    return lines


def plot(rows, path, title):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5.5))
    for family in dict.fromkeys(r["family"] for r in rows):
        pts = sorted((r["queries_per_second"], r["recall@10"]) for r in rows if r["family"] == family)
        ax.plot(*zip(*pts), "o", label=family, alpha=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("queries per second (one thread)")
    ax.set_ylabel("recall@10 of the exact L2 neighbours")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


RESULT_SUFFIXES = (".json", ".md", ".png")


def is_result(result) -> bool:
    return isinstance(result, dict) and str(result.get("command", "")).startswith("benchmarks/bench_recall.py")


def refuse_out(out: Path) -> str | None:
    """Why ``out`` (a path without suffix) may not receive a result, or None: a result replaces
    only the .json/.md/.png files of an earlier result of this script, never a link, a
    folder, or a file beside no such .json (checked before any work starts)."""
    paths = [out.with_suffix(suffix) for suffix in RESULT_SUFFIXES]
    for path in paths:
        if path.is_symlink() or (path.exists() and not path.is_file()):
            return f"{path} is a symbolic link or a folder; name a new --out"
    json_path = paths[0]
    if json_path.exists():
        try:
            ours = is_result(json.loads(json_path.read_text()))
        except (ValueError, UnicodeDecodeError):
            ours = False
        if not ours:
            return f"{json_path} is not a result of benchmarks/bench_recall.py; name a new --out"
    elif any(path.exists() for path in paths[1:]):
        return f"{out}.md or .png exists without the result's .json; name a new --out"
    return None


def replace_file(path: Path, write) -> None:
    """``write(temporary_path)`` to a fresh name beside ``path``, then renamed over it: the
    file is whole or absent, and no file of that fresh name was anyone's."""
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=path.suffix, dir=path.parent)
    os.close(fd)
    try:
        write(temporary)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="debian-sift", help="sift-synth, debian-sift, debian-minilm or a path")
    parser.add_argument("--n", type=int, help="database rows: sift-synth's (default 1000000), a stored set's first N")
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--k", type=int, default=10, help="neighbours every search returns (10..100)")
    parser.add_argument("--bits", default="64,128")
    parser.add_argument("--methods", default="itq,dish", help="our methods; FAISS's binary indexes use the last")
    parser.add_argument("--candidates", default="300,1000,10000")
    parser.add_argument("--families", help="comma-separated prefixes of the families to run (default: all)")
    parser.add_argument("--quality-bits", default="32,64", help="code-quality table lengths ('' to skip)")
    parser.add_argument("--skip-quality", action="store_true", help="no code-quality table (as --quality-bits '')")
    parser.add_argument("--quality-at", type=int, default=1000)
    parser.add_argument(
        "--quality-method",
        action="append",
        help='code-quality methods, "name key=value ..." (repeat; default itq, dish, sgh)',
    )
    parser.add_argument("--hnsw-m", default="16,32", help="FAISS HNSW-Flat graph degrees M to build")
    parser.add_argument("--ivf-lists", default="1,2,4", help="our inverted files' list counts, in units of sqrt(n)")
    parser.add_argument("--skip-search", action="store_true", help="only the code-quality table")
    parser.add_argument("--train-rows", type=int, help="learn the hash functions on the first N database rows")
    parser.add_argument("--residual-lists", default="1,2,4", help="residual inverted files' list counts, x sqrt(n)")
    parser.add_argument("--disk-dir", help="local folder for the disk mode's re-rank vectors (default: the temp dir)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True)
    parser.add_argument("--render", action="store_true", help="only rewrite --out.md/.png from --out.json")
    args = parser.parse_args(argv)
    refused = refuse_out(Path(args.out))
    if refused:
        parser.error(refused)
    if args.render:
        if not Path(args.out).with_suffix(".json").exists():
            parser.error(f"--render: {Path(args.out).with_suffix('.json')} does not exist")
        write_report(json.loads(Path(args.out).with_suffix(".json").read_text()), Path(args.out))
        return 0
    if not 10 <= args.k <= TRUE_K:
        parser.error(f"--k {args.k}: recall@10 needs 10 neighbours and the truth holds {TRUE_K}; use 10..{TRUE_K}")

    import faiss
    from distributed import Client, LocalCluster

    from benchmarks.recall_residual import RESIDUAL_FAMILIES, residual_rows
    from dask_hashcodes.indexes.ivf import default_lists
    from dask_hashcodes.kernels.l2 import l2_topk

    wants = Families(args.families)
    X, _, Q, Qv, what = load(args.dataset, args.n, args.queries, args.seed)
    ids = np.arange(len(X), dtype=np.int64)  # database positions: ordered as the dataset's ids, so ties agree
    (_, truth), truth_s = timed(lambda: l2_topk(X, ids, queries=Q, k=TRUE_K))
    _, validation_truth = l2_topk(X, ids, queries=Qv, k=TRUE_K)
    query_sets = [QuerySet("validation", Qv, validation_truth, args.k), QuerySet("test", Q, truth, args.k)]
    candidates = [int(c) for c in args.candidates.split(",")]
    lists_per_root = [float(c) for c in args.ivf_lists.split(",")]
    methods = args.methods.split(",")
    quality_bits = [] if args.skip_quality else [int(b) for b in args.quality_bits.split(",") if b]
    rows = []
    with LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None) as cluster, Client(cluster):
        quality = code_quality(X, ids, Q, truth, quality_bits, args.quality_at, args.seed,
                               args.quality_method or ["itq", "dish", "sgh"], args.train_rows)  # fmt: skip
        for bits in () if args.skip_search else (int(b) for b in args.bits.split(",")):
            for method in methods:
                feeds_faiss = method == methods[-1] and wants.any(FAISS_BINARY_FAMILIES)
                if not (wants.any(OUR_FAMILIES) or feeds_faiss):
                    continue
                model, fit_s = train(method, bits, X[: args.train_rows], args.seed)
                coded = encoded(model, method, bits, X, query_sets)
                if wants.any(OUR_FAMILIES):
                    rows += our_rows(model, coded, X, ids, query_sets, candidates, lists_per_root, fit_s, wants)
                if feeds_faiss:
                    rows += faiss_binary_rows(X, ids, query_sets, coded, candidates, default_lists(len(X)), wants)
        if not args.skip_search:
            # the row builders over the vectors: each takes (X, ids, query_sets, wants) and returns its rows
            rows += faiss_float_rows(X, ids, query_sets, wants, build_threads=2,
                                     hnsw_m=[int(m) for m in args.hnsw_m.split(",")])  # fmt: skip
            if wants.any(RESIDUAL_FAMILIES):
                rows += residual_rows(X, ids, query_sets, wants, seed=args.seed, disk_dir=args.disk_dir,
                                      lists_per_root=[float(c) for c in args.residual_lists.split(",")])  # fmt: skip
    result = {
        "command": " ".join(["benchmarks/bench_recall.py", *(argv if argv is not None else sys.argv[1:])]),
        "data": what,
        "queries": args.queries,
        "k": args.k,
        "n_database": len(X),
        "truth_seconds": truth_s,
        "machine": machine_info(),
        "faiss_version": faiss.__version__,
        "chosen_on": "validation queries (each family: the fastest configuration whose validation recall@10 >= "
        f"{TARGET_RECALL}); its numbers below are the test queries'",
        "chosen": choose(rows),
        "chosen_within_ram_ceiling": within_ceiling(rows),
        "rows": rows,
        "code_quality": quality,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    refused = refuse_out(out)  # again: the run took long, and the folder may have changed meanwhile
    if refused:
        raise SystemExit(f"nothing written: {refused}")
    replace_file(out.with_suffix(".json"), lambda path: Path(path).write_text(json.dumps(result, indent=1) + "\n"))
    write_report(result, out)
    return 0


def _number(value, spec: str) -> str:
    return "—" if value is None else format(value, spec)


def write_report(result: dict, out: Path):
    """The .md table and the .png plot of a result (also from a committed .json: --render)."""
    rows, chosen, queries, what = result["rows"], result["chosen"], result["queries"], result["data"]
    k = result.get("k", TRUE_K)
    depths = [at for at in RECALL_AT if at <= k]  # a search of the top k measures recall@K for K <= k only
    if rows:
        replace_file(out.with_suffix(".png"), lambda path: plot(rows, path, f"{what}, {queries} queries, top-{k}"))
    lines = [
        f"# Recall against queries per second: {what}",
        "",
        f"- command: `{result['command']}`",
        f"- machine: {result['machine']['cpu_model']}, {result['machine']['cores']} cores; every search on one thread"
        + (f"; FAISS {result['faiss_version']}" if "faiss_version" in result else ""),
        f"- {queries} test queries and {queries} validation queries, every search returning its top {k}; truth: "
        f"exact squared-L2 top-{TRUE_K} (ties by id); recall@K = |first K returned ∩ true top K| / K; the table's "
        "numbers are the test queries'",
        "- RAM B/vector: everything the timed search reads from memory per database vector (codes, ids, lists, "
        "centroids, tables, and the vectors a re-rank reads); FAISS: its serialised index",
        *([f"- recounted: {result['ram_recount']}"] if "ram_recount" in result else []),
        "",
        "| family | configuration | queries/s | " + "".join(f"recall@{at} | " for at in depths)
        + "RAM B/vector | build s |",
        "|---|---|---|" + "---|" * len(depths) + "---|---|",
    ]  # fmt: skip
    for r in sorted(rows, key=lambda r: (r["family"], -r["queries_per_second"])):
        lines.append(
            f"| {r['family']} | {r['config']} | {r['queries_per_second']:,.0f} | "
            + "".join(f"{r[f'recall@{at}']:.3f} | " for at in depths)
            + f"{_number(ram_of(r), '.1f')} | {r['build_seconds']:.1f} |"
        )
    lines += [
        "",
        f"Each family's configuration chosen on the {queries} validation queries (the fastest whose validation "
        f"recall@10 >= {TARGET_RECALL}), measured on the test queries:",
        "",
    ] if rows else []  # fmt: skip
    for family, best in chosen.items():
        if best is None:
            lines.append(f"- {family}: none reaches it on the validation queries")
            continue
        lines.append(f"- {family}: {best['config']}: {best['queries_per_second']:,.0f} queries/s, "
                     f"recall@10 {best['recall@10']:.3f} (validation {best['validation']['recall@10']:.3f}), "
                     f"{_number(ram_of(best), '.1f')} RAM B/vector")  # fmt: skip
    ceiling = hnsw_ceiling(rows)
    if ceiling is not None:
        lines += ["", f"HNSW-Flat M=32 RAM/4 = {ceiling:.1f} B/vector"]
    lines += peer_lines(chosen)
    within = result.get("chosen_within_ram_ceiling", {})
    differing = {f: r for f, r in within.items() if r and r["config"] != (chosen.get(f) or {}).get("config")}
    if differing:
        lines += ["", f"Where a family's choice above uses more than {ceiling:.1f} B/vector, its fastest configuration "
                  "within that RAM (validation recall@10 >= 0.9 still) against every FAISS family:"]  # fmt: skip
        lines += [f"- {f}: {r['config']}: {r['queries_per_second']:,.0f} queries/s, recall@10 {r['recall@10']:.3f} "
                  f"(validation {r['validation']['recall@10']:.3f}), {ram_of(r):.1f} RAM B/vector"
                  for f, r in differing.items()]  # fmt: skip
        lines += peer_lines({**{f: r for f, r in chosen.items() if f.startswith("faiss")}, **differing})[2:]
    if "n_database" in result:
        lines += defaults_lines(rows, result["n_database"])
    lines += rss_check_lines(rows)
    quality = result["code_quality"]
    if quality:
        at = next(int(key.split("@")[1].split("_")[0]) for key in quality[0] if key.startswith("recall@"))
        lines += ["", f"Code quality: recall@{at} of the exact top-100 in Hamming order (the DisH paper's measure)", "",
                  "| bits | method | recall | train s | iterations |", "|---|---|---|---|---|"]  # fmt: skip
        lines += [f"| {q['bits']} | {q['method']} | {q[f'recall@{at}_of_top100']:.4f} | {q['train_seconds']:.1f} | "
                  f"{q['iterations']} |" for q in quality]  # fmt: skip
    replace_file(out.with_suffix(".md"), lambda path: Path(path).write_text("\n".join(lines) + "\n"))
    print("\n".join(lines))


if __name__ == "__main__":
    raise SystemExit(main())
