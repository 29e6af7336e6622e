"""An inverted file over binary codes of residuals, held in this process's memory and
searched on the calling thread: the serving index for recall of the true (Euclidean)
neighbours at the least memory per vector.

Built from the vectors: k-means lists (a sample trains the centroids, every row goes to its
nearest; the centroids are kept at one byte per dimension, as the re-rank vectors are),
each row's residual to its centroid rotated by an orthogonal matrix (random, a structured
random one that stores no D x D matrix, or learned by ITQ on a sample of residuals) and
kept as one bit per dimension with two float32 factors (kernels.residual_codes). A query finds its ``nprobe`` nearest lists,
estimates the distance of every row in them from the codes, and computes the true squared
distance only of the rows whose lower bound (estimate - ``eps`` x error) can still enter
its top-k, reading their re-rank vectors, which are stored in list order:

* uint8 data (SIFT) is re-ranked from the vectors themselves: the distances are exact;
* float data from an 8-bit scalar quantisation (one byte per dimension, a quarter of
  float32), whose distances approximate the true ones closely;
* ``rerank_path`` puts the re-rank vectors in a file on local disk, memory-mapped: only the
  codes, factors, ids and centroids stay in RAM, and each query reads the rows it re-ranks.

``save`` commits the index as an artifact (storage.residual_index) and ``open`` serves it,
its re-rank vectors in memory or unpacked to a local .npy and memory-mapped.
``ram_bytes`` counts everything a search reads from memory, re-rank vectors included
when they are in RAM. The answer is the exact top-k (by the re-rank distance, ties by the
smaller id) of the rows examined; ``tune`` chooses ``nprobe`` and ``eps`` on validation
queries, as ServingIVF.tune does.
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from dask_hashcodes.errors import InputError, shape_words
from dask_hashcodes.indexes.base import Index
from dask_hashcodes.indexes.serving import kept_setting
from dask_hashcodes.kernels.ivf import list_layout, probe_distances
from dask_hashcodes.kernels.knn import cell_partition, neighbour_recall, without_self
from dask_hashcodes.kernels.l2 import l2_topk
from dask_hashcodes.kernels.residual_codes import (
    encode_residuals,
    residual_rotation,
    rotate,
    rotation_matrix,
    scalar_decode,
    scalar_quantise,
    scalar_quantiser,
    search_residual_lists,
    word_major,
)

# defaults chosen on the validation queries of the real data sets (see the search page of
# the documentation): lists per sqrt(n), lists probed, and the width of the error bound
LISTS_PER_ROOT_N = 2.0
DEFAULT_NPROBE = 24
DEFAULT_EPS = 1.0
DEFAULT_ROTATION = "random"  # the learned one did as well, not better, on the validation queries
ROTATIONS = ("random", "structured", "learned")
ROTATION_SAMPLE = 20_000  # residuals the learned rotation is fitted on (each iteration costs sample x D^2)
ROTATION_ITERATIONS = 10
TUNE_NPROBES = (4, 8, 12, 16, 24, 32, 48, 64, 96, 128)
TUNE_EPS = (0.5, 1.0, 1.5, 2.0)


def default_residual_lists(n: int) -> int:
    return max(1, min(n, int(round(LISTS_PER_ROOT_N * np.sqrt(n)))))


@dataclass(frozen=True)
class ResidualTuning:
    """What ``ResidualIVF.tune`` chose (now set on the index): ``nprobe``, ``eps``, their
    measured ``recall`` and ``queries_per_second`` on the validation queries, whether the
    ``target`` was ``reached``, and every setting tried (fastest first)."""

    nprobe: int
    eps: float
    recall: float
    queries_per_second: float
    reached: bool
    target: float
    trials: list = field(repr=False)


class ResidualIVF(Index):
    """See the module's documentation. Build with ``ResidualIVF.build(vectors)``; search with
    ``search(vectors, k)`` -> (D squared distances float64, I int64 row numbers)."""

    searched_by = "inverted file of residual codes, re-ranked"
    needs_query_vectors = True

    def __init__(self, *, centroids, rotation, list_words, list_factors, error_ratio, offsets, list_ids, rerank_vectors,
                 rerank_offset, rerank_step, nprobe=DEFAULT_NPROBE, eps=DEFAULT_EPS, rerank_path=None,
                 about=None, tuned=None):  # fmt: skip
        # centroids in the re-rank vectors' representation (one byte per dimension), rotation
        # dense float32 or (int8) a structured one's signs: see build
        self.centroids = np.ascontiguousarray(centroids)
        self.rotation = np.ascontiguousarray(rotation, None if np.asarray(rotation).dtype == np.int8 else np.float32)
        self.list_words, self.list_factors, self.error_ratio = list_words, list_factors, float(error_ratio)
        self.offsets, self.list_ids = offsets, list_ids
        self.rerank_vectors, self.rerank_path = rerank_vectors, rerank_path
        # re-rank space: (x - offset) / step; step is None when the vectors are the data's own
        self.rerank_offset, self.rerank_step = rerank_offset, rerank_step
        self.nprobe, self.eps = int(nprobe), float(eps)
        # what the rows are (JSON-able; saved and opened with the index): the command line's
        # dataset and split, so a search of that split is refused against another's rows
        self.about = dict(about or {})
        # how nprobe and eps were chosen (JSON-able; empty: the library's defaults), set by tune
        self.tuned = dict(tuned or {})

    @classmethod
    def build(cls, vectors, *, n_lists: int | None = None, rotation: str = DEFAULT_ROTATION, seed: int = 0,
              rerank_path=None, nprobe: int = DEFAULT_NPROBE, eps: float = DEFAULT_EPS, ids=None,
              about: dict | None = None) -> ResidualIVF:  # fmt: skip
        """Build from ``vectors`` (n, d) in memory or memory-mapped, d a multiple of 8.
        ``rotation``: "random" (a random orthogonal matrix, under which the error scale holds),
        "structured" (random sign flips and Hadamard transforms: a stand-in for the random matrix
        that stores D bytes per round instead of D^2 floats, for high-dimensional data) or
        "learned" (ITQ on a sample of the residuals).
        The centroids are stored as the re-rank vectors are (the data's own bytes, or the 8-bit
        scalar quantiser's codes): each row's residual is to its decoded centroid, so the
        codes stay exact, and the centroids cost a byte per dimension.
        ``rerank_path``: a new ``.npy`` file on local disk for the re-rank vectors (refused if it
        exists), memory-mapped instead of held in RAM. ``ids``: what a search returns for each
        row (default: its row number), e.g. the rows' numbers in a larger dataset."""
        vectors = np.asarray(vectors) if not isinstance(vectors, np.memmap) else vectors
        if vectors.ndim != 2 or len(vectors) == 0:
            raise InputError(f"an index needs (rows, features) vectors; got {shape_words(vectors.shape)}")
        n, d = vectors.shape
        if d % 8:
            raise InputError(f"residual codes need a feature count that is a multiple of 8; got {d}: pad with zeros")
        if rotation not in ROTATIONS:
            raise InputError(f"rotation must be one of {', '.join(map(repr, ROTATIONS))}; got {rotation!r}")
        rerank_path = _new_npy_path(rerank_path)
        if not np.issubdtype(vectors.dtype, np.number):
            raise InputError(f"the vectors must be numbers; got dtype {vectors.dtype}")
        if np.issubdtype(vectors.dtype, np.floating) and not all(
            np.isfinite(vectors[start : start + 65536]).all() for start in range(0, n, 65536)
        ):
            raise InputError("the vectors hold NaN or infinite values; remove or fill those rows before indexing")
        n_lists = default_residual_lists(n) if n_lists is None else int(n_lists)
        if not 1 <= n_lists <= n:
            raise InputError(f"n_lists must lie in [1, {n}] (the rows); got {n_lists}")
        if ids is not None:
            ids = np.asarray(ids)
            if ids.shape != (n,) or not np.issubdtype(ids.dtype, np.integer) or (n and ids.min() < 0):
                raise InputError(f"ids must be {n} non-negative integers, one per row; got {shape_words(ids.shape)}")
        rng = np.random.default_rng(seed)
        centroids, assignment = cell_partition(vectors, n_lists, rng)
        if np.issubdtype(vectors.dtype, np.integer) and vectors.dtype.itemsize == 1:
            rerank_offset, rerank_step = None, None  # bytes already: re-ranked exactly
            limits = np.iinfo(vectors.dtype)
            centroid_codes = np.clip(np.rint(centroids), limits.min, limits.max).astype(vectors.dtype)
            centroids = centroid_codes.astype(np.float64)
        else:
            rerank_offset, rerank_step = scalar_quantiser(vectors)
            centroid_codes = scalar_quantise(centroids, rerank_offset, rerank_step)
            centroids = scalar_decode(centroid_codes, rerank_offset, rerank_step)
        sample = np.sort(rng.choice(n, min(n, ROTATION_SAMPLE), replace=False)) if rotation == "learned" else None
        residuals = None if sample is None else np.asarray(vectors[sample], np.float64) - centroids[assignment[sample]]
        kept_rotation = residual_rotation(rotation, residuals, d, ROTATION_ITERATIONS, rng, seed)
        codes, factors, error_ratio = encode_residuals(vectors, centroids, assignment, rotation_matrix(kept_rotation))
        order, offsets = list_layout(assignment, n_lists)
        if rerank_step is None:
            rerank = vectors[order]
        else:
            rerank = _quantised_rows(vectors, order, rerank_offset, rerank_step)
        if rerank_path is not None:
            rerank = _write_npy(rerank_path, rerank.shape, rerank.dtype, [rerank])
        ids = order if ids is None else ids[order]
        ids = ids.astype(np.int32 if ids.max() < 2**31 else np.int64)
        return cls(centroids=centroid_codes, rotation=kept_rotation, list_words=word_major(codes[order]),
                   list_factors=np.ascontiguousarray(factors[order].T), error_ratio=error_ratio, offsets=offsets, list_ids=ids,
                   rerank_vectors=rerank, rerank_offset=rerank_offset, rerank_step=rerank_step, nprobe=nprobe,
                   eps=eps, rerank_path=rerank_path, about=about)  # fmt: skip

    # -- the Index members -------------------------------------------------------------------
    @property
    def ntotal(self) -> int:
        return int(len(self.list_ids))

    @property
    def code_size(self) -> int:
        return int(self.list_words.shape[0] * 8)

    @property
    def d(self) -> int:
        return int(self.centroids.shape[1])

    @property
    def n_lists(self) -> int:
        return int(len(self.centroids))

    def settings(self) -> dict:
        return {"n_lists": self.n_lists, "nprobe": self.nprobe, "eps": self.eps,
                "rerank": "exact" if self.rerank_step is None else "8-bit scalar quantised",
                "rerank_vectors": "disk" if self.rerank_path else "memory",
                "rotation": "structured" if self.rotation.dtype == np.int8 else "dense"}  # fmt: skip

    # -- stored: a committed artifact that a server opens without the data --------------------
    def save(self, path, *, overwrite: bool = False, storage=None):
        """Commit everything a search reads to ``path`` (a folder or an object-store URL, see
        storage.residual_index); an existing output is replaced only with ``overwrite`` and
        only when dhash wrote it as a residual index. Returns its Location."""
        from dask_hashcodes.storage.residual_index import write_residual_index

        arrays = {"centroids": self.centroids, "rotation": self.rotation, "codes": self.list_words.T,
                  "factors": self.list_factors.T, "ids": self.list_ids, "offsets": np.asarray(self.offsets, np.int64),
                  "rerank_vectors": self.rerank_vectors, "rerank_offset": self.rerank_offset}  # fmt: skip
        attrs = {"error_ratio": self.error_ratio, "rerank_step": self.rerank_step, "nprobe": self.nprobe,
                 "eps": self.eps if np.isfinite(self.eps) else None, "about": self.about,
                 "tuned": self.tuned}  # fmt: skip
        return write_residual_index(path, arrays, attrs, overwrite=overwrite, storage=storage)

    @classmethod
    def open(cls, path, *, rerank_path=None, storage=None) -> ResidualIVF:
        """The index saved at ``path``, every chunk verified against its checksum. Its re-rank
        vectors are read into memory, or, with ``rerank_path`` (a new .npy file on local
        disk), written there chunk by chunk and memory-mapped: the disk mode of ``build``."""
        from dask_hashcodes.storage.residual_index import open_residual_index

        rerank_path = _new_npy_path(rerank_path)
        _, attrs, readers = open_residual_index(path, storage=storage)
        # every other array first: a damaged one then fails before any file is written
        small = {name: reader.read_all() for name, reader in readers.items() if name != "rerank_vectors"}
        vectors = readers["rerank_vectors"]
        if rerank_path is None:
            rerank = vectors.read_all()
        else:
            chunks = (vectors(i) for i in range(vectors.n_chunks))
            rerank = _write_npy(rerank_path, vectors.shape, vectors.dtype, chunks)
        return cls(centroids=small["centroids"], rotation=small["rotation"],
                   list_words=np.ascontiguousarray(small["codes"].T),
                   list_factors=np.ascontiguousarray(small["factors"].T), error_ratio=attrs["error_ratio"],
                   offsets=small["offsets"], list_ids=small["ids"], rerank_vectors=rerank,
                   rerank_offset=small.get("rerank_offset"), rerank_step=attrs["rerank_step"], nprobe=attrs["nprobe"],
                   eps=np.inf if attrs["eps"] is None else attrs["eps"], rerank_path=rerank_path,
                   about=attrs.get("about"), tuned=attrs.get("tuned"))  # fmt: skip

    def ram_bytes(self) -> dict:
        """Bytes a search reads from RAM, by part (the re-rank vectors count only when they are
        held in memory, not memory-mapped from disk)."""
        parts = {"codes": self.list_words.nbytes, "factors": self.list_factors.nbytes, "ids": self.list_ids.nbytes,
                 "offsets": self.offsets.nbytes, "centroids": self.centroids.nbytes,
                 "rotation": self.rotation.nbytes}  # fmt: skip
        parts["rerank_vectors"] = 0 if self.rerank_path else self.rerank_vectors.nbytes
        if self.rerank_step is not None:
            parts["quantiser"] = self.rerank_offset.nbytes + 8
        return parts

    @property
    def ram_bytes_per_vector(self) -> float:
        return sum(self.ram_bytes().values()) / max(1, self.ntotal)

    def search(self, vectors, k: int, *, progress: bool = False):
        """(D (nq, k) float64 squared distances, I (nq, k) int64 row numbers) of the top ``k``
        of ``vectors``; -1 / inf padding where fewer than k rows were examined."""
        from dask_hashcodes.validation import check_k

        k = check_k(k)
        queries = np.asarray(vectors)
        if queries.ndim != 2 or queries.shape[1] != self.d:
            raise InputError(f"the queries ({shape_words(queries.shape)}) need {self.d} features, as the index's rows")
        queries = queries.astype(np.float32, copy=False)
        if not np.isfinite(queries).all():
            raise InputError("the queries hold NaN or infinite values; remove or fill them")
        rerank_queries, scale = queries, 1.0
        if self.rerank_step is not None:
            rerank_queries, scale = (queries - self.rerank_offset) / np.float32(self.rerank_step), self.rerank_step**2
        # the centroids are stored as the re-rank vectors are: probed in that space, distances scaled back
        probes, centroid_distances = probe_distances(rerank_queries, self.centroids, min(self.nprobe, self.n_lists))
        centroid_distances *= np.float32(scale)
        distances, ids, _ = search_residual_lists(rotate(queries, self.rotation), rerank_queries, probes, centroid_distances,
                                        self.list_words, self.list_factors, self.error_ratio, self.offsets,
                                        self.rerank_vectors,
                                        self.list_ids, k, self.eps, scale)  # fmt: skip
        return distances, ids

    def search_codes(self, codes, k: int, *, progress: bool = False):
        raise self._vectors_only()

    def search_codes_lazy(self, codes, k: int):
        raise self._vectors_only()

    def search_lazy(self, vectors, k: int):
        raise self._vectors_only()

    def _vectors_only(self) -> InputError:
        return InputError(
            "a ResidualIVF answers search(vectors, k) on this process: its codes are of each row's residual to its "
            "list, so there are no query codes to give"
        )

    def tune(self, vectors, k: int = 10, target: float = 0.9, *, nprobes=TUNE_NPROBES, epsilons=TUNE_EPS,
             database=None, database_ids=None, held_out=None) -> ResidualTuning:  # fmt: skip
        """Choose ``nprobe`` and ``eps`` on validation queries ``vectors`` (never test
        queries): their exact top-k over ``database`` (the indexed vectors; ``database_ids``
        their ids, default the row numbers) is computed here, every setting is timed on this
        thread, and the fastest whose recall@k reaches ``target`` is kept; when none does, the
        one of highest recall is kept and ``reached`` says so. ``held_out``: the ids of the
        queries when they are indexed rows themselves (leave-one-out validation, for data
        without a query set of its own): each query's own row is left out of its exact
        neighbours and of its answer."""
        if database is None:
            raise InputError("tuning measures recall against the exact neighbours; pass database=the indexed vectors")
        if not 0 < target <= 1:
            raise InputError(f"target must be a recall in (0, 1]; got {target!r}")
        queries = np.asarray(vectors)
        database = np.asarray(database)
        if len(database) != self.ntotal:
            raise InputError(f"database has {len(database)} rows; the index holds {self.ntotal}: give the indexed rows")
        ids = np.arange(len(database), dtype=np.int64) if database_ids is None else np.asarray(database_ids, np.int64)
        if len(ids) != len(database):
            raise InputError(f"database_ids has {len(ids)} ids for {len(database)} rows: give one id per indexed row")
        own = None if held_out is None else np.asarray(held_out, np.int64)
        if own is not None and own.shape != (len(queries),):
            raise InputError(f"held_out has {own.size} ids for {len(queries)} queries: give each query's own id")
        asked = int(k) + (own is not None)  # one more, so k remain once a query's own row is left out

        def others(nearest):
            return nearest if own is None else without_self(nearest, own, int(k))

        _, truth = l2_topk(database, ids, queries=queries, k=asked)
        truth = others(truth)
        trials = []
        for nprobe in [p for p in nprobes if p <= self.n_lists]:
            for eps in epsilons:
                self.nprobe, self.eps = nprobe, eps
                started = time.perf_counter()
                _, found = self.search(queries, asked)
                seconds = time.perf_counter() - started
                trials.append({"nprobe": nprobe, "eps": eps,
                               "recall": neighbour_recall(others(found), truth),
                               "queries_per_second": len(queries) / seconds})  # fmt: skip
        best, reached = kept_setting(trials, k, target, ("nprobe", "eps"), "ResidualTuning",
                                     "build with fewer, larger lists or lower the target")  # fmt: skip
        self.nprobe, self.eps = best["nprobe"], best["eps"]
        self.tuned = {"queries": len(queries), "validation": "caller's queries" if own is None else "leave-one-out rows",
                      "k": int(k), "target": float(target), "recall": best["recall"], "reached": reached}  # fmt: skip
        return ResidualTuning(**best, reached=reached, target=float(target), trials=trials)


def _quantised_rows(vectors, order, offset, step):
    """The rows in list order as 8-bit scalar-quantised vectors, a block at a time."""
    out = np.empty((len(order), vectors.shape[1]), np.uint8)
    block = 65536
    for start in range(0, len(order), block):
        out[start : start + block] = scalar_quantise(vectors[order[start : start + block]], offset, step)
    return out


def _new_npy_path(rerank_path) -> Path | None:
    """``rerank_path`` made absolute, refused unless it names a new .npy file."""
    if rerank_path is None:
        return None
    rerank_path = Path(rerank_path).absolute()
    if rerank_path.suffix != ".npy":
        raise InputError(f"rerank_path must name a .npy file; got {rerank_path}")
    if rerank_path.exists() or rerank_path.is_symlink():
        raise InputError(f"{rerank_path} exists; give a new file name (an index never replaces a file)")
    return rerank_path


def _write_npy(path: Path, shape: tuple, dtype, blocks) -> np.memmap:
    """The consecutive row ``blocks`` (arrays, or a generator of them: a stored index's
    chunks) to a new .npy at ``path`` (a temporary name in the same folder, then linked, so a
    failure leaves nothing), opened memory-mapped."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            header = {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)), "fortran_order": False,
                      "shape": tuple(int(s) for s in shape)}  # fmt: skip
            np.lib.format.write_array_header_1_0(f, header)
            written = 0
            for block in blocks:
                f.write(np.ascontiguousarray(block, dtype=dtype).tobytes())
                written += len(block)
            if written != shape[0]:
                raise InputError(f"{written} re-rank rows were read for an index of {shape[0]}; save the index again")
            f.flush()
            os.fsync(f.fileno())
        try:  # a hard link never replaces: a file that appeared meanwhile is refused, not overwritten
            os.link(temporary, path)
        except FileExistsError:
            raise InputError(f"{path} appeared while the index was built; give a new file name") from None
    finally:
        Path(temporary).unlink(missing_ok=True)
    return np.load(path, mmap_mode="r")
