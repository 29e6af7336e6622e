"""Multi-index hashing against the linear scan and FAISS's binary indexes, in one process on
the same codes: ITQ codes of sift-synth (trained on 100k rows, every row encoded), queries the
codes of held-out rows, exact Hamming top-k.

    .venv/bin/python benchmarks/bench_mih.py --n 10000000 --bits 64 --out benchmarks/results/mih_10M_64b

Measured, each on one thread (numba kernels run on the calling thread; FAISS with
omp_set_num_threads(1)), so the ratios compare work, not thread counts:

* ours, linear scan (kernels.hamming.hamming_topk) and MIH (kernels.mih: tables built, then
  searched; m by the paper's rule b / log2 n);
* ``faiss.IndexBinaryFlat`` (exhaustive) and ``faiss.IndexBinaryMultiHash`` (nhash = m tables of
  b / m bits, Hamming balls of radius ``nflip`` in each: approximate), at several nflip.

Each row reports seconds, queries per second, build seconds, index bytes per code and the
recall of the exact Hamming top-k (the fraction of returned codes within the true k-th
distance: ties count as found). Writes ``--out``.json and ``--out``.md.
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

BLOCK = 1_000_000


def itq_codes(n: int, n_queries: int, bits: int, seed: int):
    """(database codes (n, bits/8), query codes): ITQ learned on the first 100k rows."""
    from dask_hashcodes.data.synth import sift_rows
    from dask_hashcodes.hashing.linear import ITQ

    model = ITQ(bits, random_state=seed).fit(sift_rows(seed, 0, min(n, 100_000)).astype(np.float32))
    codes = np.empty((n, bits // 8), np.uint8)
    for start in range(0, n, BLOCK):
        stop = min(n, start + BLOCK)
        codes[start:stop] = model._encode_block(sift_rows(seed, start, stop).astype(np.float32))
    queries = model._encode_block(sift_rows(seed, n, n + n_queries).astype(np.float32))
    return codes, queries


def recall(found_d: np.ndarray, true_d: np.ndarray) -> float:
    """Returned codes within each query's true k-th distance, over k (ties count as found)."""
    kth = true_d[:, -1:]
    return float(((found_d >= 0) & (found_d <= kth)).sum() / true_d.size)


def timed(fn):
    started = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - started


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=10_000_000)
    parser.add_argument("--bits", type=int, default=64)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--k", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--nflip", default="0,1,2,3", help="FAISS multi-hash radii to try")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)

    import faiss

    from dask_hashcodes.kernels.hamming import hamming_topk
    from dask_hashcodes.kernels.mih import build_tables, default_substrings, mih_topk

    faiss.omp_set_num_threads(1)
    (codes, queries), gen_s = timed(lambda: itq_codes(args.n, args.queries, args.bits, args.seed))
    ids = np.arange(args.n, dtype=np.int64)
    k, b = args.k, args.bits
    rows = []

    hamming_topk(codes[:1000], ids[:1000], queries=queries[:2], k=k)  # compile
    (true_d, true_i), s = timed(lambda: hamming_topk(codes, ids, queries=queries, k=k))
    rows.append({"method": "dhash linear scan", "seconds": s, "build_seconds": 0.0, "bytes_per_code": b / 8,
                 "recall": recall(true_d, true_d)})  # fmt: skip

    m = default_substrings(b, args.n)
    tables, build_s = timed(lambda: build_tables(codes, b, m))
    mih_topk(codes[:1000], ids[:1000], build_tables(codes[:1000], b, m), queries=queries[:2], k=k, n_bits=b)
    (mih_d, mih_i), s = timed(lambda: mih_topk(codes, ids, tables, queries=queries, k=k, n_bits=b))
    # stored: order and offsets; in memory also the codes in each table's order
    table_bytes = tables["order"].nbytes + tables["offsets"].nbytes + tables["sorted_words"].nbytes
    rows.append({"method": f"dhash MIH (m={m})", "seconds": s, "build_seconds": build_s,
                 "bytes_per_code": b / 8 + table_bytes / args.n, "recall": recall(mih_d, true_d),
                 "identical_to_scan": bool((mih_d == true_d).all() and (mih_i == true_i).all())})  # fmt: skip
    tables = None  # free the tables before FAISS builds its own

    flat = faiss.IndexBinaryFlat(b)
    _, build_s = timed(lambda: flat.add(codes))
    (flat_d, _), s = timed(lambda: flat.search(queries, k))
    rows.append({"method": "faiss.IndexBinaryFlat", "seconds": s, "build_seconds": build_s, "bytes_per_code": b / 8,
                 "recall": recall(flat_d, true_d)})  # fmt: skip
    flat = None

    bits_per_hash = b // m
    multi = faiss.IndexBinaryMultiHash(b, m, bits_per_hash)
    _, build_s = timed(lambda: multi.add(codes))
    for nflip in (int(x) for x in args.nflip.split(",")):
        multi.nflip = nflip
        (d, _), s = timed(lambda: multi.search(queries, k))
        rows.append({"method": f"faiss.IndexBinaryMultiHash (nhash={m}, b={bits_per_hash}, nflip={nflip})",
                     "seconds": s, "build_seconds": build_s, "bytes_per_code": None, "recall": recall(d, true_d)})  # fmt: skip

    for r in rows:
        r["queries_per_second"] = args.queries / r["seconds"]
    result = {"command": " ".join(["benchmarks/bench_mih.py", *(argv or sys.argv[1:])]), "n": args.n, "bits": b,
              "queries": args.queries, "k": k, "codes_seconds": gen_s, "machine": machine_info(), "rows": rows}  # fmt: skip
    Path(args.out + ".json").write_text(json.dumps(result, indent=1) + "\n")
    scan = rows[0]["seconds"]
    lines = [
        f"# Multi-index hashing: {args.n:,} {b}-bit ITQ codes of sift-synth, {args.queries} queries, top-{k}",
        "",
        f"- command: `{result['command']}`",
        f"- machine: {result['machine']['cpu_model']}, {result['machine']['cores']} cores; every search on one thread",
        "- recall: of the exact Hamming top-k (codes within the true k-th distance; ties count as found)",
        "",
        "| method | seconds | queries/s | x linear scan | build s | bytes per code | recall |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        per_code = "—" if r["bytes_per_code"] is None else f"{r['bytes_per_code']:.1f}"
        lines.append(
            f"| {r['method']} | {r['seconds']:.3f} | {r['queries_per_second']:,.0f} | {scan / r['seconds']:.1f} | "
            f"{r['build_seconds']:.1f} | {per_code} | {r['recall']:.4f} |"
        )
    if "identical_to_scan" in rows[1]:
        lines += ["", f"MIH results identical to the linear scan's (distances and ids): {rows[1]['identical_to_scan']}"]
    Path(args.out + ".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
