"""What chunk verification costs: one read pass over a dataset's features, verified vs not.

Three passes over the same rows, each reading every chunk file and decompressing it into a
preallocated array (what every training, encoding and ground-truth task does first), run
in one process, one chunk at a time, alternating so that page-cache and CPU-frequency
drift hit all of them alike:

* ``verified``: ``ChunkReader`` as the pipeline uses it: compare the frame's last 4 bytes
  with the manifest, zstd decode, which checks the content checksum (XXH64);
* ``unverified``: the same chunks re-compressed at the same level without a checksum
  (the layout before verification), read and decoded into a new array exactly as the
  reader did before verification: the peer;
* ``raw read``: reading the files only, to show what part of a pass is I/O.

The data files are read from the page cache (the dataset is read once before timing), as
in a pass over data that fits in memory: the worst case for the relative cost, since
nothing else hides it.

    .venv/bin/python benchmarks/bench_verify.py --data DATASET.zarr --out benchmarks/results/verify_10M.json

Writes JSON and a Markdown table beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from numcodecs import Zstd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dask_hashcodes.storage.chunkread import ZSTD_LEVEL  # noqa: E402
from dask_hashcodes.storage.datasets import open_dataset  # noqa: E402


def _cpu() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help="a dataset made by dhash synth/ingest")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    ds = open_dataset(args.data)
    reader = ds.features
    n_chunks = reader.n_chunks
    plain_codec = Zstd(level=ZSTD_LEVEL, checksum=False)
    times = {"verified": 0.0, "unverified": 0.0, "raw read": 0.0}
    bytes_read = 0
    with tempfile.TemporaryDirectory(prefix="dhash-verify-", dir=Path(ds.path).parent) as tmp:
        plain_paths = []
        for i in range(n_chunks):  # the unverified layout: same data and level, no checksum
            path = os.path.join(tmp, str(i))
            with open(path, "wb") as f:
                f.write(plain_codec.encode(reader(i)))
            plain_paths.append(path)
        verified_paths = [reader.loc.child("c", str(i), "0").url for i in range(n_chunks)]
        for path in verified_paths:  # warm the page cache
            Path(path).read_bytes()
        for _ in range(args.repeats):
            for i in range(n_chunks):
                started = time.perf_counter()
                reader(i)
                times["verified"] += time.perf_counter() - started
                started = time.perf_counter()
                with open(plain_paths[i], "rb") as f:
                    raw = f.read()
                Zstd().decode(raw, out=np.empty((reader.chunk_rows, ds.d), reader.dtype))
                times["unverified"] += time.perf_counter() - started
                started = time.perf_counter()
                with open(verified_paths[i], "rb") as f:
                    bytes_read += len(f.read())
                times["raw read"] += time.perf_counter() - started
    overhead = times["verified"] / times["unverified"] - 1
    rows = ds.n * args.repeats
    result = {
        "benchmark": "chunk verification cost, one read pass",
        "command": "python benchmarks/bench_verify.py " + " ".join(argv or sys.argv[1:]),
        "machine": {"cpu": _cpu(), "cores": os.cpu_count(), "python": platform.python_version()},
        "data": {
            "path": ds.path,
            "n": ds.n,
            "d": ds.d,
            "dtype": str(ds.dtype),
            "chunks": n_chunks,
            "chunk_rows": reader.chunk_rows,
            "compressed_bytes_per_pass": bytes_read // args.repeats,
        },
        "repeats": args.repeats,
        "seconds_per_pass": {k: round(v / args.repeats, 3) for k, v in times.items()},
        "decoded_gb_per_second": {
            k: round(rows * ds.d * reader.dtype.itemsize / v / 1e9, 2) for k, v in times.items() if k != "raw read"
        },
        "verification_overhead": round(overhead, 4),
        "acceptance": {"target": "verification costs under 5% of a read pass", "met": bool(overhead < 0.05)},
    }
    out_path = Path(args.out)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(result, indent=1) + "\n")
    md = ["| pass | seconds per pass | decoded GB/s |", "|---|---|---|"]
    md += [f"| {k} | {result['seconds_per_pass'][k]} | {result['decoded_gb_per_second'].get(k, '-')} |" for k in times]
    text = (
        f"# Chunk verification cost\n\n{result['data']['n']:,} x {ds.d} {ds.dtype}, {n_chunks} chunks, "
        f"{args.repeats} passes each, page cache warm; CPU: {result['machine']['cpu']}.\n\n"
        + "\n".join(md)
        + f"\n\nVerification overhead: **{overhead * 100:.1f}%** of an unverified read pass "
        f"(goal < 5%: {'met' if overhead < 0.05 else 'not met'}).\n\nCommand: `{result['command']}`\n"
    )
    out_path.with_suffix(".md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
