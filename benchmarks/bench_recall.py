"""Recall of the true (L2) neighbours against queries per second: our codes (linear scan, MIH,
inverted file, asymmetric and exact re-ranking of the Hamming top-R) beside FAISS's menu (HNSW,
IVF-PQ with a refine step, binary multi-hash, binary flat and binary IVF + the same exact
re-ranking), in one process on the same data and queries; and how well each method's codes
find the neighbours at all.

    .venv/bin/python benchmarks/bench_recall.py --dataset debian-sift --out benchmarks/results/recall/debian-sift
    .venv/bin/python benchmarks/bench_recall.py --dataset sift-synth --n 2000000 --out benchmarks/results/recall/sift-synth-2M

What is measured:

* queries: ``--queries`` rows drawn with the seed (debian-sift, or any dataset path), the
  other rows the database; for sift-synth, rows n.. of the generator (not in the database);
* truth: the exact squared-L2 top-100 of each query (kernels.l2, ties by id);
* recall@K = |first K returned ∩ true top K| / K, averaged over queries (K = 1, 10, 100);
* the hash functions learn from every database row, or from the first ``--train-rows``;
* every search runs on one thread (our numba kernels on the calling thread, FAISS with
  omp_set_num_threads(1)), so queries/s compare work, not thread counts; index builds use
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
    """(database X, its ids, queries Q, description)."""
    if dataset == "sift-synth":
        from dhash.data.synth import sift_rows

        n = n or 1_000_000
        return sift_rows(seed, 0, n), np.arange(n), sift_rows(seed, n, n + n_queries), f"sift-synth, {n:,} rows"
    from dhash.data.sources import resolve_dataset

    ds = resolve_dataset(dataset)
    X = np.asarray(ds.features[...])
    rng = np.random.default_rng(seed)
    query_rows = np.sort(rng.choice(len(X), n_queries, replace=False))
    db = np.setdiff1d(np.arange(len(X)), query_rows)
    return X[db], db, X[query_rows], f"{ds.source}, {len(db):,} database rows"


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

    from dhash.hashing import make_hasher

    model = make_hasher(method, bits, random_state=seed, **params)
    return timed(lambda: model.fit(da.from_array(X, chunks=(131072, X.shape[1]))))


def our_rows(model, method, bits, X, ids, Q, truth, candidates):
    """Linear scan, MIH, asymmetric and exact re-ranking of the Hamming top-R."""
    from dhash.kernels.hamming import hamming_topk
    from dhash.kernels.mih import build_tables, default_substrings, mih_topk
    from dhash.kernels.rerank import (
        exact_pair_distances,
        lower_bound_pair_distances,
        lower_bound_tables,
        pairs_topk,
    )

    codes, encode_s = timed(lambda: model.encode(X))
    qcodes = model.encode(Q)
    name = f"{method} {bits}b"
    rows = []
    hamming_topk(codes[:1000], ids[:1000], queries=qcodes[:2], k=10)  # compile every kernel before timing
    two = np.arange(2)
    pairs_topk(two, two, exact_pair_distances(Q, X, two, two), 2, 1)
    lower_bound_pair_distances(model.project(Q[:2]), codes, two, two)
    (_, found), s = timed(lambda: hamming_topk(codes, ids, queries=qcodes, k=TRUE_K))
    rows.append({"family": "ours: Hamming order", "config": f"{name} linear scan", "seconds": s,
                 "bytes_per_vector": bits / 8, "build_seconds": encode_s, **recalls(found, truth)})  # fmt: skip
    m = default_substrings(bits, len(codes))
    tables, build_s = timed(lambda: build_tables(codes, bits, m))
    mih_topk(codes[:1000], ids[:1000], build_tables(codes[:1000], bits, m), queries=qcodes[:2], k=10, n_bits=bits)
    (_, found), s = timed(lambda: mih_topk(codes, ids, tables, queries=qcodes, k=TRUE_K, n_bits=bits))
    table_bytes = sum(tables[key].nbytes for key in ("order", "offsets", "sorted_words"))
    rows.append({"family": "ours: Hamming order", "config": f"{name} MIH (m={m})", "seconds": s,
                 "bytes_per_vector": bits / 8 + table_bytes / len(codes), "build_seconds": encode_s + build_s,
                 **recalls(found, truth)})  # fmt: skip
    tables = None
    rows += ivf_rows(name, bits, X, ids, Q, truth, codes, qcodes, candidates, encode_s)
    projections = model.project(Q)
    tables = lower_bound_tables(projections)  # once per query batch (part of the query's cost: small)
    for R in candidates:
        (_, cand), scan_s = timed(lambda R=R: hamming_topk(codes, ids, queries=qcodes, k=R))
        qi = np.repeat(np.arange(len(Q)), R)
        flat = cand.ravel()  # database positions (ids are positions here)
        rows_of = flat

        def asym(qi=qi, flat=flat, rows_of=rows_of):
            distances = lower_bound_pair_distances(projections, codes, qi, rows_of, tables=tables)
            return pairs_topk(qi, flat, distances, len(Q), TRUE_K)

        def exact(qi=qi, flat=flat, rows_of=rows_of):
            return pairs_topk(qi, flat, exact_pair_distances(Q, X, qi, rows_of), len(Q), TRUE_K)

        (_, found), s = timed(asym)
        rows.append({"family": "ours: asymmetric re-rank", "config": f"{name} top-{R} asymmetric",
                     "seconds": scan_s + s, "bytes_per_vector": bits / 8, "build_seconds": encode_s,
                     **recalls(found, truth)})  # fmt: skip
        (_, found), s = timed(exact)
        rows.append({"family": "ours: exact re-rank", "config": f"{name} top-{R} exact (reads {R} vectors/query)",
                     "seconds": scan_s + s, "bytes_per_vector": bits / 8, "build_seconds": encode_s,
                     **recalls(found, truth)})  # fmt: skip
    return rows, codes, qcodes, m


NPROBES = (1, 4, 16, 64)


def ivf_lists(n: int) -> int:
    from dhash.search.ivf import default_lists

    return default_lists(n)


def _exact_rerank(X, ids, Q, cand, k=TRUE_K):
    """Exact L2 re-ranking of candidate positions (nq, R), -1 padding dropped."""
    from dhash.kernels.rerank import exact_pair_distances, pairs_topk

    qi = np.repeat(np.arange(len(Q)), cand.shape[1])
    pos = cand.ravel()
    keep = pos >= 0
    qi, pos = qi[keep], pos[keep]
    return pairs_topk(qi, ids[pos], exact_pair_distances(Q, X, qi, pos), len(Q), k)


def ivf_rows(name, bits, X, ids, Q, truth, codes, qcodes, candidates, encode_s):
    """Our inverted file (lists from k-means on the vectors, ranked by the codes' Hamming
    distance), in Hamming order and with the exact re-ranking of its top-R."""
    from dhash.kernels.ivf import list_layout, probed_lists, search_lists
    from dhash.kernels.knn import cell_partition

    n_lists = ivf_lists(len(X))
    (centroids, assignment), build_s = timed(lambda: cell_partition(X, n_lists, np.random.default_rng(0)))
    order, offsets = list_layout(assignment, n_lists)
    list_codes, list_ids = codes[order], ids[order]
    index_bytes = (list_codes.nbytes + 4 * len(order) + centroids.astype(np.float32).nbytes) / len(X)
    rows = []
    for nprobe in NPROBES:

        def search(k, nprobe=nprobe):
            return search_lists(qcodes, probed_lists(Q, centroids, nprobe), list_codes, list_ids, offsets, k)

        search(10)  # compile before timing
        (_, found), s = timed(lambda: search(TRUE_K))
        rows.append({"family": "ours: IVF", "config": f"{name} IVF{n_lists} nprobe={nprobe}", "seconds": s,
                     "bytes_per_vector": index_bytes, "build_seconds": encode_s + build_s,
                     **recalls(found, truth)})  # fmt: skip
        for R in candidates:
            (_, cand), scan_s = timed(lambda R=R: search(R))
            (_, found), s = timed(lambda cand=cand: _exact_rerank(X, ids, Q, cand))
            rows.append({"family": "ours: IVF + exact re-rank",
                         "config": f"{name} IVF{n_lists} nprobe={nprobe} top-{R} exact (reads {R} vectors/query)",
                         "seconds": scan_s + s, "bytes_per_vector": index_bytes, "build_seconds": encode_s + build_s,
                         **recalls(found, truth)})  # fmt: skip
    return rows


def faiss_float_rows(X, ids, Q, truth, build_threads):
    """FAISS's indexes over the vectors themselves: HNSW, IVF-PQ with an exact refine step."""
    import faiss
    import psutil

    rows = []
    Xf, Qf, n, d = X.astype(np.float32), Q.astype(np.float32), len(X), X.shape[1]

    def per_vector(index, rss_before):
        # serialising a 10M-vector index copies it whole (the first 10M run was killed for memory
        # there): above 2M vectors, the growth of this process's RSS while it was built instead
        if n <= 2_000_000:
            return faiss.serialize_index(index).nbytes / n
        return (psutil.Process().memory_info().rss - rss_before) / n

    def search(index, k=TRUE_K):
        faiss.omp_set_num_threads(1)
        (_, found), s = timed(lambda: index.search(Qf, k))
        return ids[np.maximum(found, 0)], s

    faiss.omp_set_num_threads(build_threads)
    rss = psutil.Process().memory_info().rss
    hnsw = faiss.IndexHNSWFlat(d, 32)
    _, build_s = timed(lambda: hnsw.add(Xf))
    size = per_vector(hnsw, rss)
    for ef in (16, 32, 64, 128, 256):
        hnsw.hnsw.efSearch = ef
        found, s = search(hnsw)
        rows.append({"family": "faiss HNSW", "config": f"IndexHNSWFlat M=32 efSearch={ef}", "seconds": s,
                     "bytes_per_vector": size, "build_seconds": build_s, **recalls(found, truth)})  # fmt: skip
    hnsw = None

    faiss.omp_set_num_threads(build_threads)
    rss = psutil.Process().memory_info().rss
    nlist = int(2 ** round(np.log2(4 * np.sqrt(n))))
    ivf = faiss.IndexIVFPQ(faiss.IndexFlatL2(d), d, nlist, 16, 8)
    refine = faiss.IndexRefineFlat(ivf)
    train_rows = Xf[np.random.default_rng(0).choice(n, min(n, 100_000), replace=False)]
    _, build_s = timed(lambda: (refine.train(train_rows), refine.add(Xf)))
    size = per_vector(refine, rss)
    for nprobe, k_factor in ((4, 4), (16, 4), (16, 16), (64, 16)):
        faiss.ParameterSpace().set_index_parameter(refine, "nprobe", nprobe)
        refine.k_factor = k_factor
        found, s = search(refine)
        rows.append({"family": "faiss IVF-PQ + refine", "config": f"IVF{nlist},PQ16 nprobe={nprobe} refine x{k_factor}",
                     "seconds": s, "bytes_per_vector": size, "build_seconds": build_s, **recalls(found, truth)})  # fmt: skip
    return rows


def faiss_binary_rows(X, ids, Q, truth, codes, qcodes, bits, m, candidates):
    """FAISS's binary indexes over our codes: multi-hash, and flat + our exact re-ranking."""
    import faiss

    from dhash.kernels.rerank import exact_pair_distances, pairs_topk

    rows = []
    multi = faiss.IndexBinaryMultiHash(bits, m, bits // m)
    _, build_s = timed(lambda: multi.add(codes))
    for nflip in (0, 1, 2):
        multi.nflip = nflip
        faiss.omp_set_num_threads(1)
        (_, found), s = timed(lambda: multi.search(qcodes, TRUE_K))
        rows.append({"family": "faiss binary", "config": f"IndexBinaryMultiHash ({bits}b codes, {m} x {bits // m} bits) nflip={nflip}",
                     "seconds": s, "bytes_per_vector": None, "build_seconds": build_s,
                     **recalls(ids[np.maximum(found, 0)], truth)})  # fmt: skip
    multi = None

    flat = faiss.IndexBinaryFlat(bits)
    flat.add(codes)
    for R in candidates:
        faiss.omp_set_num_threads(1)
        (_, cand), scan_s = timed(lambda R=R: flat.search(qcodes, R))
        qi = np.repeat(np.arange(len(Q)), R)
        pos = cand.ravel()
        (_, found), s = timed(
            lambda qi=qi, pos=pos: pairs_topk(qi, ids[pos], exact_pair_distances(Q, X, qi, pos), len(Q), TRUE_K)
        )
        rows.append({"family": "faiss binary", "config": f"IndexBinaryFlat ({bits}b codes) top-{R} + exact re-rank",
                     "seconds": scan_s + s, "bytes_per_vector": bits / 8, "build_seconds": 0.0,
                     **recalls(found, truth)})  # fmt: skip
    flat = None

    # the same number of lists as ours; FAISS's lists come from k-means on the codes (binary
    # centroids), ours from k-means on the vectors
    n_lists = ivf_lists(len(codes))
    faiss.omp_set_num_threads(2)
    ivf = faiss.IndexBinaryIVF(faiss.IndexBinaryFlat(bits), bits, n_lists)
    _, build_s = timed(lambda: (ivf.train(codes), ivf.add(codes)))
    ivf_bytes = faiss.serialize_index_binary(ivf).nbytes / len(codes)
    for nprobe in NPROBES:
        ivf.nprobe = nprobe
        faiss.omp_set_num_threads(1)
        (_, found), s = timed(lambda: ivf.search(qcodes, TRUE_K))
        rows.append({"family": "faiss binary IVF", "config": f"IndexBinaryIVF{n_lists} ({bits}b codes) nprobe={nprobe}",
                     "seconds": s, "bytes_per_vector": ivf_bytes, "build_seconds": build_s,
                     **recalls(ids[np.maximum(found, 0)], truth)})  # fmt: skip
        for R in candidates:
            (_, cand), scan_s = timed(lambda R=R: ivf.search(qcodes, R))
            (_, found), s = timed(lambda cand=cand: _exact_rerank(X, ids, Q, cand))
            rows.append({"family": "faiss binary IVF + exact re-rank",
                         "config": f"IndexBinaryIVF{n_lists} ({bits}b codes) nprobe={nprobe} top-{R} + exact re-rank",
                         "seconds": scan_s + s, "bytes_per_vector": ivf_bytes, "build_seconds": build_s,
                         **recalls(found, truth)})  # fmt: skip
    return rows


def code_quality(X, ids, Q, truth, bits_list, at, seed, specs, train_rows=None):
    """recall@at of the exact top-100 in Hamming order, per method (``specs``: "name key=value
    ...") and length."""
    from dhash.kernels.hamming import hamming_topk

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
    parser.add_argument("--skip-search", action="store_true", help="only the code-quality table")
    parser.add_argument("--train-rows", type=int, help="learn the hash functions on the first N database rows")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)

    from distributed import Client, LocalCluster

    from dhash.kernels.l2 import l2_topk

    X, _, Q, what = load(args.dataset, args.n, args.queries, args.seed)
    ids = np.arange(len(X), dtype=np.int64)  # database positions: ordered as the dataset's ids, so ties agree
    (_, truth), truth_s = timed(lambda: l2_topk(X, ids, queries=Q, k=TRUE_K))
    candidates = [int(c) for c in args.candidates.split(",")]
    rows = []
    with LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None) as cluster, Client(cluster):
        quality = code_quality(X, ids, Q, truth, [int(b) for b in args.quality_bits.split(",") if b], args.quality_at,
                               args.seed, args.quality_method or ["itq", "dish", "sgh"], args.train_rows)  # fmt: skip
        for bits in () if args.skip_search else (int(b) for b in args.bits.split(",")):
            for method in args.methods.split(","):
                model, fit_s = train(method, bits, X[: args.train_rows], args.seed)
                ours, codes, qcodes, m = our_rows(model, method, bits, X, ids, Q, truth, candidates)
                for r in ours:
                    r["build_seconds"] += fit_s
                rows += ours
                print(*ours, sep="\n", flush=True)
            rows += faiss_binary_rows(X, ids, Q, truth, codes, qcodes, bits, m, candidates)
        if not args.skip_search:
            rows += faiss_float_rows(X, ids, Q, truth, build_threads=2)
        print(*rows, sep="\n", flush=True)
    for r in rows:
        r["queries_per_second"] = args.queries / r["seconds"]
    result = {
        "command": " ".join(["benchmarks/bench_recall.py", *(argv if argv is not None else sys.argv[1:])]),
        "data": what,
        "queries": args.queries,
        "truth_seconds": truth_s,
        "machine": machine_info(),
        "rows": rows,
        "code_quality": quality,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    if rows:
        plot(rows, out.with_suffix(".png"), f"{what}, {args.queries} queries, top-{TRUE_K}")
    lines = [
        f"# Recall against queries per second: {what}",
        "",
        f"- command: `{result['command']}`",
        f"- machine: {result['machine']['cpu_model']}, {result['machine']['cores']} cores; every search on one thread",
        f"- {args.queries} queries; truth: exact squared-L2 top-{TRUE_K} (ties by id); recall@K = |first K returned "
        "∩ true top K| / K",
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
    lines += ["", "Fastest configuration per family at recall@10 >= 0.9:", ""] if rows else []
    for family in sorted({r["family"] for r in rows}):
        good = [r for r in rows if r["family"] == family and r["recall@10"] >= 0.9]
        if good:
            best = max(good, key=lambda r: r["queries_per_second"])
            size = "—" if best["bytes_per_vector"] is None else f"{best['bytes_per_vector']:.1f} bytes/vector"
            lines.append(f"- {family}: {best['config']}, {best['queries_per_second']:,.0f} queries/s, "
                         f"recall@10 {best['recall@10']:.3f}, {size}")  # fmt: skip
        else:
            lines.append(f"- {family}: none reaches it")
    if quality:
        at = args.quality_at
        lines += ["", f"Code quality: recall@{at} of the exact top-100 in Hamming order (the DisH paper's measure)", "",
                  "| bits | method | recall | train s | iterations |", "|---|---|---|---|---|"]  # fmt: skip
        lines += [f"| {q['bits']} | {q['method']} | {q[f'recall@{at}_of_top100']:.4f} | {q['train_seconds']:.1f} | "
                  f"{q['iterations']} |" for q in quality]  # fmt: skip
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
