"""Recall of the true (L2) neighbours against queries per second: our codes (linear scan, MIH,
inverted file, asymmetric and exact re-ranking of the Hamming top-R) beside FAISS's menu (HNSW,
IVF-PQ with a refine step, binary multi-hash, binary flat and binary IVF + the same exact
re-ranking), in one process on the same data and queries; and how well each method's codes
find the neighbours at all.

    .venv/bin/python benchmarks/bench_recall.py --dataset debian-sift --out benchmarks/results/recall/debian-sift
    .venv/bin/python benchmarks/bench_recall.py --dataset sift-synth --n 2000000 --out benchmarks/results/recall/sift-synth-2M

What is measured:

* queries: two sets of ``--queries`` rows drawn with the seed (debian-sift, or any dataset
  path), the other rows the database; for sift-synth, rows n.. of the generator (not in the
  database). The validation set chooses each family's configuration (the fastest reaching
  recall@10 >= 0.9 on it), the test set measures every configuration: no choice is made on
  the numbers reported;
* truth: the exact squared-L2 top-100 of each query (kernels.l2, ties by id);
* recall@K = |first K returned ∩ true top K| / K, averaged over queries (K = 1, 10, 100);
* the hash functions learn from every database row, or from the first ``--train-rows``;
* every search runs on one thread (our numba kernels on the calling thread, numpy's BLAS
  limited to one thread for our probes, FAISS with omp_set_num_threads(1)), so queries/s
  compare work, not thread counts; a search's time includes everything from the query
  vectors to the answer except encoding the queries (small), and is the fastest of three
  runs (the first of which compiled nothing: every kernel is compiled before); index builds use
  both cores (FAISS's HNSW and IVF-PQ with 2 OpenMP threads, our training on a 2-worker
  LocalCluster) and their seconds are reported;
* bytes per vector: what the index holds in memory per database vector (codes and MIH
  tables for ours; FAISS's serialised index / n). Exact re-ranking also reads the candidates'
  original vectors (d bytes each) from storage; that is said in the table, not added.

The code-quality table (``--quality-bits``): recall@``--quality-at`` (default 1000) of the
exact top-100 in Hamming order, the DisH paper's measure, for ITQ, DisH (10 nodes, contiguous
partition: on debian-sift, whose rows are ordered by image, nodes hold different images) and
SGH. Writes ``--out``.json, ``--out``.md and ``--out``.png (recall@10 against queries/s).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.harness.measure import machine_info  # noqa: E402

TRUE_K = 100
RECALL_AT = (1, 10, 100)


def timed(fn):
    started = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - started


def load(dataset: str, n: int | None, n_queries: int, seed: int):
    """(database X, its ids, test queries, validation queries, description). The validation
    queries are drawn as the test ones are, from rows that are neither test queries nor in
    the database."""
    if dataset == "sift-synth":
        from dask_hashcodes.data.synth import sift_rows

        n = n or 1_000_000
        test, validation = sift_rows(seed, n, n + n_queries), sift_rows(seed, n + n_queries, n + 2 * n_queries)
        return sift_rows(seed, 0, n), np.arange(n), test, validation, f"sift-synth, {n:,} rows"
    from dask_hashcodes.data.sources import resolve_dataset

    ds = resolve_dataset(dataset)
    X = np.asarray(ds.features[...])
    rng = np.random.default_rng(seed)
    query_rows = np.sort(rng.choice(len(X), n_queries, replace=False))
    rest = np.setdiff1d(np.arange(len(X)), query_rows)
    validation_rows = np.sort(rng.choice(rest, n_queries, replace=False))
    db = np.setdiff1d(rest, validation_rows)
    return X[db], db, X[query_rows], X[validation_rows], f"{ds.source}, {len(db):,} database rows"


def recalls(found: np.ndarray, truth: np.ndarray) -> dict:
    out = {}
    for k in RECALL_AT:
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
    measures it. ``truth`` is the exact top-100 (database positions)."""

    split: str
    vectors: np.ndarray
    truth: np.ndarray


# each search is timed this many times and its fastest run kept (as timeit does): a shared
# virtual machine's hiccups then slow no configuration more than another
REPEATS = 3


def measured(query_sets, search, **row) -> dict:
    """A result row: ``search(query_set)`` -> (found positions (nq, >= 100), seconds) on every
    query set (the fastest of REPEATS runs), on one thread (BLAS and OpenMP limited to 1, so numpy's probes are timed as
    FAISS's searches are); the test set's numbers at the top level, the validation set's
    under "validation"."""
    from threadpoolctl import threadpool_limits

    for qs in query_sets:
        with threadpool_limits(1):
            runs = [search(qs) for _ in range(REPEATS)]
        found, seconds = runs[0][0], min(s for _, s in runs)
        numbers = {"seconds": seconds, **recalls(found, qs.truth)}
        if qs.split == "test":
            row.update(numbers)
        else:
            row["validation"] = numbers
    print(row, flush=True)
    return row


def our_rows(model, method, bits, X, ids, query_sets, candidates, ivf_lists_per_root, build_seconds):
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

    codes, encode_s = timed(lambda: model.encode(X))
    build_seconds += encode_s
    query_codes = {qs.split: model.encode(qs.vectors) for qs in query_sets}
    name = f"{method} {bits}b"
    rows = []
    qc = next(iter(query_codes.values()))
    hamming_topk(codes[:1000], ids[:1000], queries=qc[:2], k=10)  # compile every kernel before timing
    two = np.arange(2)
    pairs_topk(two, two, exact_pair_distances(X[:2], X, two, two), 2, 1)
    lower_bound_pair_distances(model.project(X[:2]), codes, two, two)

    def scan(qs, k=TRUE_K):
        (_, found), s = timed(lambda: hamming_topk(codes, ids, queries=query_codes[qs.split], k=k))
        return found, s

    rows.append(measured(query_sets, scan, family="ours: Hamming order", config=f"{name} linear scan",
                         bytes_per_vector=bits / 8, build_seconds=build_seconds))  # fmt: skip
    m = default_substrings(bits, len(codes))
    tables, build_s = timed(lambda: build_tables(codes, bits, m))
    mih_topk(codes[:1000], ids[:1000], build_tables(codes[:1000], bits, m), queries=qc[:2], k=10, n_bits=bits)
    table_bytes = sum(tables[key].nbytes for key in ("order", "offsets", "sorted_words"))

    def mih(qs):
        (_, found), s = timed(
            lambda: mih_topk(codes, ids, tables, queries=query_codes[qs.split], k=TRUE_K, n_bits=bits)
        )
        return found, s

    rows.append(measured(query_sets, mih, family="ours: Hamming order", config=f"{name} MIH (m={m})",
                         bytes_per_vector=bits / 8 + table_bytes / len(codes),
                         build_seconds=build_seconds + build_s))  # fmt: skip
    for R in candidates:  # multi-index hashing as the candidate source: the exact Hamming top-R, fewer codes read

        def mih_exact(qs, R=R):
            (_, cand), s = timed(lambda: mih_topk(codes, ids, tables, queries=query_codes[qs.split], k=R, n_bits=bits))
            (_, found), s2 = timed(lambda: _exact_rerank(X, ids, qs.vectors, cand))
            return found, s + s2

        rows.append(measured(query_sets, mih_exact, family="ours: MIH + exact re-rank",
                             config=f"{name} MIH (m={m}) top-{R} exact (reads {R} vectors/query)",
                             bytes_per_vector=bits / 8 + table_bytes / len(codes),
                             build_seconds=build_seconds + build_s))  # fmt: skip
    tables = None
    for per_root in ivf_lists_per_root:
        rows += ivf_rows(name, X, ids, query_sets, codes, query_codes, candidates, per_root, build_seconds)
    projections = {qs.split: model.project(qs.vectors) for qs in query_sets}
    for R in candidates:

        def asym(qs, R=R):
            cand, scan_s = scan(qs, R)
            qi = np.repeat(np.arange(len(qs.vectors)), R)
            started = time.perf_counter()  # the per-query tables are part of the query's cost
            tables = lower_bound_tables(projections[qs.split])
            distances = lower_bound_pair_distances(projections[qs.split], codes, qi, cand.ravel(), tables=tables)
            _, found = pairs_topk(qi, cand.ravel(), distances, len(qs.vectors), TRUE_K)
            return found, scan_s + time.perf_counter() - started

        def exact(qs, R=R):
            cand, scan_s = scan(qs, R)
            (_, found), s = timed(lambda: _exact_rerank(X, ids, qs.vectors, cand))
            return found, scan_s + s

        rows.append(measured(query_sets, asym, family="ours: asymmetric re-rank", config=f"{name} top-{R} asymmetric",
                             bytes_per_vector=bits / 8, build_seconds=build_seconds))  # fmt: skip
        rows.append(measured(query_sets, exact, family="ours: exact re-rank",
                             config=f"{name} top-{R} exact (reads {R} vectors/query)",
                             bytes_per_vector=bits / 8, build_seconds=build_seconds))  # fmt: skip
    return rows, codes, query_codes, m


NPROBES = (1, 4, 8, 16, 32, 64)
# the inverted file's exact re-ranking: fewer candidates than the flat scan needs, as the
# probed lists already hold the query's near rows
IVF_CANDIDATES = (100, 150, 200, 300, 1000)


def _exact_rerank(X, ids, Q, cand, k=TRUE_K):
    """Exact L2 re-ranking of candidate positions (nq, R), -1 padding dropped."""
    from dask_hashcodes.kernels.rerank import exact_pair_distances, pairs_topk

    qi = np.repeat(np.arange(len(Q)), cand.shape[1])
    pos = cand.ravel()
    keep = pos >= 0
    qi, pos = qi[keep], pos[keep]
    return pairs_topk(qi, ids[pos], exact_pair_distances(Q, X, qi, pos), len(Q), k)


_PARTITIONS = {}


def ivf_rows(name, X, ids, query_sets, codes, query_codes, candidates, per_root, build_seconds):
    """Our inverted file with ``per_root`` * sqrt(n) lists (k-means on the vectors), ranked by
    the codes' Hamming distance, and the serving path: the Hamming top-R of the probed lists
    re-ranked by exact L2 in the same compiled loop (kernels.ivf.search_lists_exact)."""
    from dask_hashcodes.kernels.ivf import list_layout, probed_lists, search_lists, search_lists_exact
    from dask_hashcodes.kernels.knn import cell_partition

    n_lists = max(1, int(round(per_root * np.sqrt(len(X)))))
    if n_lists not in _PARTITIONS:  # the lists depend on the vectors only: learnt once per count
        _PARTITIONS[n_lists] = timed(lambda: cell_partition(X, n_lists, np.random.default_rng(0)))
    (centroids, assignment), build_s = _PARTITIONS[n_lists]
    order, offsets = list_layout(assignment, n_lists)
    list_codes, list_ids = codes[order], ids[order]
    # codes, int32 positions (the stored layout) and float32 centroids
    index_bytes = (list_codes.nbytes + 4 * len(order) + 4 * centroids.size) / len(X)
    build_seconds += build_s
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
            _, found = search_lists(query_codes[qs.split], probes, list_codes, list_ids, offsets, TRUE_K)
            return found, time.perf_counter() - started

        rows.append(measured(query_sets, hamming, family="ours: IVF", config=f"{name} IVF{n_lists} nprobe={nprobe}",
                             bytes_per_vector=index_bytes, build_seconds=build_seconds))  # fmt: skip
        for R in IVF_CANDIDATES:

            def serve(qs, nprobe=nprobe, R=R):
                started = time.perf_counter()
                probes = probed_lists(qs.vectors, centroids, nprobe)
                _, found = search_lists_exact(query_codes[qs.split], qs.vectors, probes, list_codes, list_ids, offsets,
                                              X, order, R, TRUE_K)  # fmt: skip
                return found, time.perf_counter() - started

            rows.append(measured(query_sets, serve, family="ours: IVF + exact re-rank",
                                 config=f"{name} IVF{n_lists} nprobe={nprobe} top-{R} exact (reads {R} vectors/query)",
                                 bytes_per_vector=index_bytes, build_seconds=build_seconds))  # fmt: skip
    return rows


def faiss_float_rows(X, ids, query_sets, build_threads, hnsw_m=(16, 32)):
    """FAISS's indexes over the vectors themselves: HNSW, IVF-PQ with an exact refine step."""
    import faiss
    import psutil

    rows = []
    Xf, n, d = X.astype(np.float32), len(X), X.shape[1]

    def per_vector(index, rss_before):
        # serialising a 10M-vector index copies it whole (the first 10M run was killed for memory
        # there): above 2M vectors, the growth of this process's RSS while it was built instead
        if n <= 2_000_000:
            return faiss.serialize_index(index).nbytes / n
        return (psutil.Process().memory_info().rss - rss_before) / n

    def searcher(index, k=TRUE_K):
        def search(qs):
            faiss.omp_set_num_threads(1)
            Qf = qs.vectors.astype(np.float32)
            (_, found), s = timed(lambda: index.search(Qf, k))
            return ids[np.maximum(found, 0)], s

        return search

    for M in hnsw_m:
        faiss.omp_set_num_threads(build_threads)
        rss = psutil.Process().memory_info().rss
        hnsw = faiss.IndexHNSWFlat(d, M)
        _, build_s = timed(lambda hnsw=hnsw: hnsw.add(Xf))
        size = per_vector(hnsw, rss)
        for ef in (16, 20, 24, 32, 48, 64, 128, 256):
            hnsw.hnsw.efSearch = ef
            rows.append(measured(query_sets, searcher(hnsw), family="faiss HNSW",
                                 config=f"IndexHNSWFlat M={M} efSearch={ef}", bytes_per_vector=size,
                                 build_seconds=build_s))  # fmt: skip
        hnsw = None

    faiss.omp_set_num_threads(build_threads)
    rss = psutil.Process().memory_info().rss
    nlist = int(2 ** round(np.log2(4 * np.sqrt(n))))
    ivf = faiss.IndexIVFPQ(faiss.IndexFlatL2(d), d, nlist, 16, 8)
    refine = faiss.IndexRefineFlat(ivf)
    train_rows = Xf[np.random.default_rng(0).choice(n, min(n, 100_000), replace=False)]
    _, build_s = timed(lambda: (refine.train(train_rows), refine.add(Xf)))
    size = per_vector(refine, rss)
    for nprobe, k_factor in ((4, 4), (8, 4), (16, 4), (16, 16), (64, 16)):
        faiss.ParameterSpace().set_index_parameter(refine, "nprobe", nprobe)
        refine.k_factor = k_factor
        rows.append(measured(query_sets, searcher(refine), family="faiss IVF-PQ + refine",
                             config=f"IVF{nlist},PQ16 nprobe={nprobe} refine x{k_factor}", bytes_per_vector=size,
                             build_seconds=build_s))  # fmt: skip
    return rows


def faiss_binary_rows(X, ids, query_sets, codes, query_codes, bits, m, candidates, n_lists):
    """FAISS's binary indexes over our codes: multi-hash, flat + our exact re-ranking, and
    IndexBinaryIVF with ``n_lists`` lists (+ the same re-ranking)."""
    import faiss

    def searcher(index, R, rerank):
        def search(qs):
            faiss.omp_set_num_threads(1)
            (_, cand), s = timed(lambda: index.search(query_codes[qs.split], R))
            if not rerank:
                return ids[np.maximum(cand, 0)], s
            (_, found), s2 = timed(lambda: _exact_rerank(X, ids, qs.vectors, cand))
            return found, s + s2

        return search

    rows = []
    multi = faiss.IndexBinaryMultiHash(bits, m, bits // m)
    _, build_s = timed(lambda: multi.add(codes))
    for nflip in (0, 1, 2):
        multi.nflip = nflip
        rows.append(measured(query_sets, searcher(multi, TRUE_K, False), family="faiss binary",
                             config=f"IndexBinaryMultiHash ({bits}b codes, {m} x {bits // m} bits) nflip={nflip}",
                             bytes_per_vector=None, build_seconds=build_s))  # fmt: skip
    multi = None

    flat = faiss.IndexBinaryFlat(bits)
    flat.add(codes)
    for R in candidates:
        rows.append(measured(query_sets, searcher(flat, R, True), family="faiss binary",
                             config=f"IndexBinaryFlat ({bits}b codes) top-{R} + exact re-rank",
                             bytes_per_vector=bits / 8, build_seconds=0.0))  # fmt: skip
    flat = None

    # FAISS's lists come from k-means on the codes (binary centroids), ours from k-means on the vectors
    faiss.omp_set_num_threads(2)
    ivf = faiss.IndexBinaryIVF(faiss.IndexBinaryFlat(bits), bits, n_lists)
    _, build_s = timed(lambda: (ivf.train(codes), ivf.add(codes)))
    ivf_bytes = faiss.serialize_index_binary(ivf).nbytes / len(codes)
    for nprobe in [p for p in NPROBES if p <= n_lists]:
        ivf.nprobe = nprobe
        rows.append(measured(query_sets, searcher(ivf, TRUE_K, False), family="faiss binary IVF",
                             config=f"IndexBinaryIVF{n_lists} ({bits}b codes) nprobe={nprobe}",
                             bytes_per_vector=ivf_bytes, build_seconds=build_s))  # fmt: skip
        for R in IVF_CANDIDATES:
            rows.append(measured(query_sets, searcher(ivf, R, True), family="faiss binary IVF + exact re-rank",
                                 config=f"IndexBinaryIVF{n_lists} ({bits}b codes) nprobe={nprobe} top-{R} + exact re-rank",
                                 bytes_per_vector=ivf_bytes, build_seconds=build_s))  # fmt: skip
    return rows


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


TARGET_RECALL = 0.9


def choose(rows) -> dict:
    """Per family, the row of the fastest configuration on the validation queries among those
    whose validation recall@10 reaches TARGET_RECALL (None if none does)."""
    out = {}
    for family in sorted({r["family"] for r in rows}):
        good = [r for r in rows if r["family"] == family and r["validation"]["recall@10"] >= TARGET_RECALL]
        out[family] = max(good, key=lambda r: r["validation"]["queries_per_second"]) if good else None
    return out


def defaults_lines(rows, n) -> list[str]:
    """Our inverted file at the library's defaults (lists, nprobe, candidates for k = 10),
    per code: the defaults were chosen on one data set's validation queries, and this
    line re-checks them on every other."""
    from dask_hashcodes.indexes.ivf import DEFAULT_NPROBE, default_lists
    from dask_hashcodes.indexes.rerank import K_FACTOR

    wanted = f"IVF{default_lists(n)} nprobe={DEFAULT_NPROBE} top-{K_FACTOR * 10} "
    at_defaults = [r for r in rows if r["family"] == "ours: IVF + exact re-rank" and wanted in r["config"]]
    if not at_defaults:
        return []
    lines = ["", f"Our inverted file at the library's defaults ({wanted.strip()}), test queries:", ""]
    for r in at_defaults:
        lines.append(f"- {r['config']}: {r['queries_per_second']:,.0f} queries/s, recall@10 {r['recall@10']:.3f} "
                     f"(validation {r['validation']['recall@10']:.3f})")  # fmt: skip
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
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="debian-sift")
    parser.add_argument("--n", type=int, help="sift-synth: database rows")
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--bits", default="64,128")
    parser.add_argument("--methods", default="itq,dish")
    parser.add_argument("--candidates", default="300,1000,10000")
    parser.add_argument("--quality-bits", default="32,64", help="code-quality table lengths ('' to skip)")
    parser.add_argument("--quality-at", type=int, default=1000)
    parser.add_argument(
        "--quality-method",
        action="append",
        help='code-quality methods, "name key=value ..." (repeat; default itq, dish, sgh)',
    )
    parser.add_argument("--hnsw-m", default="16,32", help="FAISS HNSW graph degrees M to build")
    parser.add_argument("--ivf-lists", default="1,2,4", help="our inverted files' list counts, in units of sqrt(n)")
    parser.add_argument("--skip-search", action="store_true", help="only the code-quality table")
    parser.add_argument("--train-rows", type=int, help="learn the hash functions on the first N database rows")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True)
    parser.add_argument("--render", action="store_true", help="only rewrite --out.md/.png from --out.json")
    args = parser.parse_args(argv)
    if args.render:
        write_report(json.loads(Path(args.out).with_suffix(".json").read_text()), Path(args.out))
        return 0

    from distributed import Client, LocalCluster

    from dask_hashcodes.indexes.ivf import default_lists
    from dask_hashcodes.kernels.l2 import l2_topk

    X, _, Q, Qv, what = load(args.dataset, args.n, args.queries, args.seed)
    ids = np.arange(len(X), dtype=np.int64)  # database positions: ordered as the dataset's ids, so ties agree
    (_, truth), truth_s = timed(lambda: l2_topk(X, ids, queries=Q, k=TRUE_K))
    _, validation_truth = l2_topk(X, ids, queries=Qv, k=TRUE_K)
    query_sets = [QuerySet("validation", Qv, validation_truth), QuerySet("test", Q, truth)]
    candidates = [int(c) for c in args.candidates.split(",")]
    lists_per_root = [float(c) for c in args.ivf_lists.split(",")]
    rows = []
    with LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None) as cluster, Client(cluster):
        quality = code_quality(X, ids, Q, truth, [int(b) for b in args.quality_bits.split(",") if b], args.quality_at,
                               args.seed, args.quality_method or ["itq", "dish", "sgh"], args.train_rows)  # fmt: skip
        for bits in () if args.skip_search else (int(b) for b in args.bits.split(",")):
            for method in args.methods.split(","):
                model, fit_s = train(method, bits, X[: args.train_rows], args.seed)
                ours, codes, query_codes, m = our_rows(model, method, bits, X, ids, query_sets, candidates,
                                                       lists_per_root, fit_s)  # fmt: skip
                rows += ours
            rows += faiss_binary_rows(
                X, ids, query_sets, codes, query_codes, bits, m, candidates, default_lists(len(X))
            )
        if not args.skip_search:
            hnsw_m = [int(m) for m in args.hnsw_m.split(",")]
            rows += faiss_float_rows(X, ids, query_sets, build_threads=2, hnsw_m=hnsw_m)
    for r in rows:
        r["queries_per_second"] = args.queries / r["seconds"]
        r["validation"]["queries_per_second"] = args.queries / r["validation"]["seconds"]
    chosen = choose(rows)
    result = {
        "command": " ".join(["benchmarks/bench_recall.py", *(argv if argv is not None else sys.argv[1:])]),
        "data": what,
        "queries": args.queries,
        "n_database": len(X),
        "truth_seconds": truth_s,
        "machine": machine_info(),
        "chosen_on": "validation queries (each family: the fastest configuration whose validation recall@10 >= "
        f"{TARGET_RECALL}); its numbers below are the test queries'",
        "chosen": chosen,
        "rows": rows,
        "code_quality": quality,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    write_report(result, out)
    return 0


def write_report(result: dict, out: Path):
    """The .md table and the .png plot of a result (also from a committed .json: --render)."""
    rows, chosen, queries, what = result["rows"], result["chosen"], result["queries"], result["data"]
    if rows:
        plot(rows, out.with_suffix(".png"), f"{what}, {queries} queries, top-{TRUE_K}")
    lines = [
        f"# Recall against queries per second: {what}",
        "",
        f"- command: `{result['command']}`",
        f"- machine: {result['machine']['cpu_model']}, {result['machine']['cores']} cores; every search on one thread",
        f"- {queries} test queries and {queries} validation queries; truth: exact squared-L2 top-{TRUE_K} (ties by "
        "id); recall@K = |first K returned ∩ true top K| / K; the table's numbers are the test queries'",
        "- bytes/vector: the index in memory per database vector; exact re-ranking also reads the candidates' "
        "original vectors from storage",
        "",
        "| family | configuration | queries/s | recall@1 | recall@10 | recall@100 | bytes/vector | build s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in sorted(rows, key=lambda r: (r["family"], -r["queries_per_second"])):
        size = "—" if r["bytes_per_vector"] is None else f"{r['bytes_per_vector']:.1f}"
        lines.append(
            f"| {r['family']} | {r['config']} | {r['queries_per_second']:,.0f} | {r['recall@1']:.3f} | "
            f"{r['recall@10']:.3f} | {r['recall@100']:.3f} | {size} | {r['build_seconds']:.1f} |"
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
        size = "—" if best["bytes_per_vector"] is None else f"{best['bytes_per_vector']:.1f} bytes/vector"
        lines.append(f"- {family}: {best['config']}: {best['queries_per_second']:,.0f} queries/s, "
                     f"recall@10 {best['recall@10']:.3f} (validation {best['validation']['recall@10']:.3f}), {size}")  # fmt: skip
    if "n_database" in result:
        lines += defaults_lines(rows, result["n_database"])
    ours, hnsw = chosen.get("ours: IVF + exact re-rank"), chosen.get("faiss HNSW")
    if ours and hnsw:
        lines += ["", f"Ours (IVF + exact re-rank) against HNSW, both chosen on validation: "
                  f"{ours['queries_per_second'] / hnsw['queries_per_second']:.2f}x the queries/s, "
                  f"1/{hnsw['bytes_per_vector'] / ours['bytes_per_vector']:.0f} of the bytes per vector."]  # fmt: skip
    quality = result["code_quality"]
    if quality:
        at = next(int(key.split("@")[1].split("_")[0]) for key in quality[0] if key.startswith("recall@"))
        lines += ["", f"Code quality: recall@{at} of the exact top-100 in Hamming order (the DisH paper's measure)", "",
                  "| bits | method | recall | train s | iterations |", "|---|---|---|---|---|"]  # fmt: skip
        lines += [f"| {q['bits']} | {q['method']} | {q[f'recall@{at}_of_top100']:.4f} | {q['train_seconds']:.1f} | "
                  f"{q['iterations']} |" for q in quality]  # fmt: skip
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    raise SystemExit(main())
