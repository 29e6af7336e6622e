"""bench_recall's rows of our residual-code inverted file (dask_hashcodes.indexes.residual:
ResidualIVF): binary codes of each row's residual to its list centroid, a distance estimate
with an error bound from them, and the true distance only for the rows that can still enter
the top-k, read from re-rank vectors stored in list order.

For every list count (``lists_per_root`` x sqrt(n)) and rotation (learned by ITQ on the
residuals, random, or the structured random one that stores no matrix), one row per (nprobe, eps) of the grid, with the index's own count of
the bytes its search reads from RAM (codes, factors, ids, offsets, centroids, rotation, the
re-rank vectors), checked against the RSS growth of its build.

The disk mode: the re-rank vectors in a .npy file on local disk, memory-mapped, so that
only the codes, factors, ids and centroids are in RAM. Its rows are measured twice: "cold",
every timed run starting after the file was dropped from the page cache
(benchmarks.harness.page_cache.evict, which reports how), and "warm", the file's pages left
cached from the run before.
"""

from __future__ import annotations

import gc
import tempfile
import time
from functools import partial
from pathlib import Path

import numpy as np

from benchmarks.bench_recall import built, measured, memory_fields
from benchmarks.harness.page_cache import evict, resident_fraction

RESIDUAL_FAMILIES = (
    "ours: residual IVF",
    "ours: residual IVF, re-rank vectors on disk (cold)",
    "ours: residual IVF, re-rank vectors on disk (warm)",
)
NPROBES = (8, 12, 16, 24, 32, 48, 64, 96, 128)
EPSILONS = (0.5, 1.0, 1.5, 2.0)
ROTATIONS = ("learned", "random", "structured")
# the disk mode's grid: its speed depends on the reads, so a few settings around the
# in-memory choice suffice
DISK_NPROBES = (16, 24, 32, 48, 64)
DISK_EPSILONS = (1.0,)


def _cold_start(index, path, methods):
    """Unmap the re-rank vectors, drop their file from the page cache, map it again: pages a
    process has mapped stay in memory whatever the cache is told, so a cold search needs a
    fresh mapping, as a freshly started server would have."""
    index.rerank_vectors = None
    gc.collect()
    methods.append(evict([path]))
    index.rerank_vectors = np.load(path, mmap_mode="r")


def _searcher(index, nprobe, eps, before=None):
    def search(qs):
        index.nprobe, index.eps = nprobe, eps
        if before is not None:
            before()
        started = time.perf_counter()
        _, found = index.search(qs.vectors, qs.k)
        return found, time.perf_counter() - started

    return search


def residual_rows(X, ids, query_sets, wants, *, lists_per_root=(1.0, 2.0, 4.0), rotations=ROTATIONS, seed=0,
                  disk_dir=None) -> list[dict]:  # fmt: skip
    """The rows of every family of RESIDUAL_FAMILIES that ``wants`` selects."""
    from dask_hashcodes.indexes.residual import ResidualIVF
    from dask_hashcodes.kernels.residual_codes import ENCODE_BLOCK

    rows, n = [], len(X)
    # one build of a full encoding block first: the first build of a process grows its RSS
    # once by the compiled kernels and BLAS's buffers, which the measured builds then reuse
    ResidualIVF.build(X[: ENCODE_BLOCK + 1000], n_lists=4, seed=seed).search(query_sets[0].vectors[:2], 10)
    for per_root in lists_per_root:
        n_lists = max(1, int(round(per_root * np.sqrt(n))))
        for rotation in rotations:
            if wants(RESIDUAL_FAMILIES[0]):
                index, seconds, growth = built(partial(ResidualIVF.build, X, n_lists=n_lists, rotation=rotation,
                                                       seed=seed))  # fmt: skip
                index.search(query_sets[0].vectors[:2], 10)  # compile before timing
                name = f"residual IVF{n_lists} ({index.code_size * 8}-bit codes, {rotation} rotation)"
                fields = memory_fields(name, n, sum(index.ram_bytes().values()), growth)
                for nprobe in [p for p in NPROBES if p <= n_lists]:
                    for eps in EPSILONS:
                        rows.append(measured(query_sets, _searcher(index, nprobe, eps), family=RESIDUAL_FAMILIES[0],
                                             config=f"{name} nprobe={nprobe} eps={eps}", build_seconds=seconds,
                                             rerank=index.settings()["rerank"], **fields))  # fmt: skip
                index = None
            if rotation == rotations[0] and per_root == lists_per_root[0] and wants.any(RESIDUAL_FAMILIES[1:]):
                rows += disk_rows(X, query_sets, wants, n_lists, rotation, seed, disk_dir)
    return rows


def disk_rows(X, query_sets, wants, n_lists, rotation, seed, disk_dir) -> list[dict]:
    """The disk mode's cold and warm rows: the re-rank vectors memory-mapped from a new file
    under ``disk_dir`` (a temporary folder on local disk), removed afterwards."""
    from dask_hashcodes.indexes.residual import ResidualIVF

    rows, n = [], len(X)
    with tempfile.TemporaryDirectory(prefix="residual-disk-", dir=disk_dir) as folder:
        path = Path(folder) / "rerank.npy"
        index, seconds, growth = built(lambda: ResidualIVF.build(X, n_lists=n_lists, rotation=rotation, seed=seed,
                                                                 rerank_path=path))  # fmt: skip
        index.search(query_sets[0].vectors[:2], 10)
        name = f"residual IVF{n_lists} ({index.code_size * 8}-bit codes, {rotation} rotation), re-rank vectors on disk"
        # the build wrote the file through the page cache: the growth may include its pages,
        # which the kernel can drop at will; the RAM count excludes them
        fields = memory_fields(name, n, sum(index.ram_bytes().values()), growth)
        file_bytes = path.stat().st_size
        for nprobe in DISK_NPROBES:
            for eps in DISK_EPSILONS:
                if nprobe > n_lists:
                    continue
                methods = []
                cold = partial(_cold_start, index, path, methods)
                if wants(RESIDUAL_FAMILIES[1]):
                    row = measured(query_sets, _searcher(index, nprobe, eps, before=cold), family=RESIDUAL_FAMILIES[1],
                                   config=f"{name} nprobe={nprobe} eps={eps}", build_seconds=seconds,
                                   rerank=index.settings()["rerank"], **fields)  # fmt: skip
                    row.update(evicted_by=sorted(set(methods)), rerank_file_bytes=file_bytes)
                    _cold_start(index, path, [])
                    row["resident_after_evict"] = resident_fraction(path)
                    rows.append(row)
                if wants(RESIDUAL_FAMILIES[2]):
                    _searcher(index, nprobe, eps)(query_sets[-1])  # pages in what the searches read
                    row = measured(query_sets, _searcher(index, nprobe, eps), family=RESIDUAL_FAMILIES[2],
                                   config=f"{name} nprobe={nprobe} eps={eps}", build_seconds=seconds,
                                   rerank=index.settings()["rerank"], **fields)  # fmt: skip
                    row.update(rerank_file_bytes=file_bytes, resident_after_search=resident_fraction(path))
                    rows.append(row)
        index = None
    return rows
