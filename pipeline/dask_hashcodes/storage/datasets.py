"""Datasets on disk: a zarr v3 group (schema: data_schemas/dataset.schema.json).

Layout::

    DATASET.zarr/
      features   (n, d) native dtype, chunked on rows only
      labels     (n,) int64 class ids, or (n, L) uint8 multi-hot   [optional]
      ids        (n,) int64 external ids (row numbers unless the source had ids)
      splits/NAME/query        sorted int64 row numbers of the queries
      splits/NAME/query_features  (n_queries, d) their feature rows, copied when the split
                               is made (splits made before have none)
      groundtruth/NAME/ids     (n_queries, K) int64 exact Euclidean neighbours
      groundtruth/NAME/distances
  or, for large K (truth.MAX_LISTED_NEIGHBOURS):
      groundtruth/NAME/relevance          (n, ceil(n_queries / 8)) uint8, bit q of row j
                                          set iff row j is among query q's top K
      groundtruth/NAME/threshold_distance (n_queries,) float64, the K-th neighbour's
      groundtruth/NAME/threshold_id       (n_queries,) int64    squared distance and row

Search results and ground truth refer to points by row number; ``ids`` maps a row number
to the source's own id. The dataset, each split and each ground truth are separately
committed artifacts (storage.atomic): each has a ``.dhash-commit.json`` with the checksums
of its chunks, and every read is verified against them (storage.chunkread). The dataset's
``content_id`` fingerprints its features and labels; splits, ground truth and codes record
it, so they are never used with other data.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import functools
import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np
import zarr

from dask_hashcodes import __version__, config
from dask_hashcodes.errors import InputError, shape_words
from dask_hashcodes.storage.atomic import atomic_output, check_name, child_inside, read_commit, require_committed
from dask_hashcodes.storage.chunkread import (
    ChunkReader,
    arrays_manifest,
    content_id,
    create_array,
    dask_from_reader,
    new_group,
    open_for_write,
    open_verified,
    read_attrs,
)
from dask_hashcodes.storage.location import Location, resolve
from dask_hashcodes.validation import check_finite_block, check_numeric_dtype

DATASET_SCHEMA = "dhash.dataset/1"
SPLIT_SCHEMA = "dhash.split/1"
QUERY_FEATURES = "query_features"  # a split's copy of its query rows' features
SPLIT_CHUNK_BYTES = 16 << 20  # chunk size of that copy
GROUNDTRUTH_SCHEMA = "dhash.groundtruth/1"
STORAGE_FORMAT = (
    3  # 3: commit records list every file, parts record their dataset (2: per-chunk checksums; 1: plain zarr)
)
DATASET_ARRAYS = ("features", "ids", "labels")  # what the dataset's manifest covers


def default_chunk_rows(d: int, itemsize: int) -> int:
    """Rows per chunk so one chunk holds about dhash.target-chunk-bytes (16 MiB: few tasks,
    bounded memory per task), rounded to a multiple of 1024."""
    rows = max(1024, int(config.get("target-chunk-bytes")) // max(1, d * itemsize))
    return int(rows // 1024 * 1024)


def sha256_of(array: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(array).astype("<i8", copy=False).tobytes()).hexdigest()


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def rechunk_rows(blocks: Iterable[np.ndarray], rows: int) -> Iterator[np.ndarray]:
    """Re-cut a stream of row blocks into blocks of exactly ``rows`` rows (last may be short).

    Holds at most one output block plus one input block in memory.
    """
    pending: list[np.ndarray] = []
    have = 0
    for block in blocks:
        while len(block):
            take = min(rows - have, len(block))
            pending.append(block[:take])
            have += take
            block = block[take:]
            if have == rows:
                yield np.concatenate(pending) if len(pending) > 1 else pending[0]
                pending, have = [], 0
    if have:
        yield np.concatenate(pending)


def create_dataset_group(
    path, *, n: int, d: int, dtype, chunk_rows: int, source: str, attrs: dict | None = None, with_ids: bool = True
) -> zarr.Group:
    """Create the arrays of an empty dataset at ``path`` (normally a temporary location)."""
    dtype = check_numeric_dtype(dtype)
    if n <= 0 or d <= 0:
        raise InputError(f"dataset from {source} is empty (n={n}, d={d}); give a source with at least one vector")
    group = new_group(resolve(path))
    create_array(group, "features", (n, d), chunk_rows, dtype)
    if with_ids:
        ids = create_array(group, "ids", (n,), max(chunk_rows, 2**20), "int64")
        for start in range(0, n, 2**22):
            ids[start : min(n, start + 2**22)] = np.arange(start, min(n, start + 2**22), dtype=np.int64)
    group.attrs.update(
        {
            "schema": DATASET_SCHEMA,
            "source": source,
            "n": int(n),
            "d": int(d),
            "dtype": dtype.name,
            "chunk_rows": int(min(chunk_rows, n)),
            "created_by": _created_by(),
            "created": _now(),
            **(attrs or {}),
        }
    )
    return group


def _created_by() -> str:

    return f"dhash {__version__}"


@contextlib.contextmanager
def dataset_output(path, *, overwrite: bool = False):
    """Write a dataset atomically (see storage.atomic); its manifest covers features, ids, labels."""
    with atomic_output(path, kind="dataset", overwrite=overwrite, manifest=arrays_manifest(*DATASET_ARRAYS)) as tmp:
        yield tmp


def write_dataset_like(like, path, blocks: Iterable[np.ndarray], *, n: int | None = None, **options) -> Dataset:
    """``write_dataset`` of rows shaped like ``like`` (a reader or a Dataset: its d, dtype and
    source; its n unless ``n`` is given)."""
    n = like.n if n is None else n
    return write_dataset(path, blocks, n=n, d=like.d, dtype=like.dtype, source=like.source, **options)


def write_dataset(
    path,
    blocks: Iterable[np.ndarray],
    *,
    n: int,
    d: int,
    dtype,
    source: str,
    labels: np.ndarray | None = None,
    chunk_rows: int | None = None,
    attrs: dict | None = None,
    overwrite: bool = False,
    progress=None,
) -> Dataset:
    """Stream row blocks (any sizes) into a new dataset at ``path``; memory stays ~2 chunks.

    Raises InputError (and leaves nothing at ``path``) on NaN/Inf rows, a row count that
    differs from ``n``, or labels whose length is not ``n``.
    """
    dtype = check_numeric_dtype(dtype)
    chunk_rows = chunk_rows or default_chunk_rows(d, dtype.itemsize)
    if labels is not None and len(labels) != n:
        raise InputError(f"{source}: {len(labels)} labels for {n} vectors; give one label row per vector")
    with dataset_output(path, overwrite=overwrite) as tmp:
        group = create_dataset_group(tmp, n=n, d=d, dtype=dtype, chunk_rows=chunk_rows, source=source, attrs=attrs)
        features = open_for_write(tmp.child("features"))
        written = 0
        for block in rechunk_rows(blocks, chunk_rows):
            if block.ndim != 2 or block.shape[1] != d:
                raise InputError(
                    f"{source}: a block is {shape_words(block.shape)}, expected rows of {d} values; the file is "
                    "inconsistent"
                )
            if written + len(block) > n:
                raise InputError(f"{source} holds more than the {n} vectors its header announced; the file is corrupt")
            check_finite_block(block, written, what=f"{source} features")
            features[written : written + len(block)] = block.astype(dtype, copy=False)
            written += len(block)
            if progress is not None:
                progress.update(len(block))
        if written != n:
            raise InputError(
                f"{source} ended after {written} of {n} vectors; the file is truncated, re-download or re-export it"
            )
        if labels is not None:
            write_labels(group, labels)
    return open_dataset(path)


def write_labels(group: zarr.Group, labels: np.ndarray) -> None:
    labels = np.asarray(labels)
    if labels.ndim == 1:
        if labels.dtype.kind not in "iu":
            raise InputError(f"labels have dtype {labels.dtype}; give integer class ids")
        labels = labels.astype(np.int64)
    elif labels.ndim == 2:
        labels = (labels != 0).astype(np.uint8)  # multi-hot
    else:
        raise InputError(
            f"labels must be one class id per row or a rows x classes multi-hot matrix; got {shape_words(labels.shape)}"
        )
    create_array(group, "labels", labels.shape, len(labels), labels.dtype)[...] = labels


@dataclass(frozen=True)
class Split:
    """A seeded query/database split. Database = every row that is not a query.
    ``query_features``: the verified reader of the split's own copy of the query rows'
    features (None for a split made before splits kept one): one small read instead of a
    visit to every dataset chunk that holds a query row."""

    name: str
    query: np.ndarray  # sorted int64 row numbers
    manifest: dict
    query_features: ChunkReader | None = None

    @property
    def n_query(self) -> int:
        return len(self.query)

    @property
    def n_database(self) -> int:
        return int(self.manifest["n_database"])


class Dataset:
    """A committed dataset opened read-only (splits and ground truth are added atomically).

    ``location`` is resolved once (local paths absolute), so tasks that read it run the
    same on any worker. Every array is read through the verified reader (chunkread). It is
    the handle the workflows pass down: the dataset's commit record and metadata are read
    when it is opened, and its labels and ids when first asked for, not again by each step
    that uses them. A committed dataset never changes in place (a rewrite is a new commit,
    opened as a new handle), so what a handle has read stays true for it."""

    def __init__(self, path, *, storage=None):
        self.location = resolve(path, storage=storage)
        remedy = "re-create it with `dhash ingest` or `dhash synth`"
        record = require_committed(self.location, "dataset", remedy)
        attrs = read_attrs(self.location, f"dataset {self.location}", remedy)
        if attrs.get("schema") != DATASET_SCHEMA:
            raise InputError(f"{self.location} is not a dhash dataset (schema {attrs.get('schema')!r}); {remedy}")
        self.attrs = attrs
        self.record = record  # as read now: a chunk read after the dataset was replaced says so
        self._part_records: dict[str, dict] = {}
        self.manifest = record["manifest"]
        self.source = attrs.get("source", "")
        self._remedy = f"re-create the dataset ({self.source or 'its source'}) with `dhash ingest` or `dhash synth`"
        self.features = self._array("features")
        self.n, self.d = self.features.shape
        self.dtype = self.features.dtype
        self.chunk_rows = self.features.chunk_rows

    @property
    def path(self) -> str:
        return self.location.url

    @functools.cached_property
    def content_id(self) -> str:
        """Fingerprint of the dataset's features and labels (see chunkread.content_id), of the
        manifest read when the handle was opened: hashed once, then asked by every check."""
        return content_id(self.manifest, ("features", "labels"))

    def _array(self, name: str) -> ChunkReader:
        return open_verified(
            self.location.child(name),
            self.manifest.get("arrays", {}).get(name),
            f"dataset {self.location} {name}",
            self._remedy,
            self.record,
        )

    def __repr__(self):
        return f"Dataset({self.path!r}, n={self.n}, d={self.d}, dtype={self.dtype}, labels={self.has_labels})"

    @property
    def has_labels(self) -> bool:
        return "labels" in self.manifest.get("arrays", {})

    @functools.cached_property
    def labels(self) -> np.ndarray | None:
        """Every row's labels (read-only), or None; read and verified once per handle."""
        return _read_only(self._array("labels").read_all()) if self.has_labels else None

    @functools.cached_property
    def ids(self) -> np.ndarray:
        """The source's own id of every row (row numbers unless the source had ids; read-only),
        read and verified once per handle."""
        return _read_only(self._array("ids").read_all())

    def features_dask(self, chunk_rows: int | None = None):
        """Features as a dask array; ``chunk_rows`` must be a multiple of the stored chunk rows
        or smaller than it, so no stored chunk is read twice by different tasks."""
        arr = dask_from_reader(self.features, f"features-{self.content_id}-{_token(self.path)}")
        if chunk_rows and chunk_rows != self.chunk_rows:
            arr = arr.rechunk({0: chunk_rows, 1: -1})
        return arr

    # ---- parts added later (splits, ground truth): committed sub-artifacts -------------
    def _part_names(self, folder: str, kind: str) -> list[str]:
        base = self.location.child(folder)
        return sorted(
            name for name in base.list_names() if not name.startswith(".") and _committed_kind(base.child(name)) == kind
        )

    def _open_part(self, folder: str, name: str, kind: str, remedy: str) -> tuple[dict, dict, Location]:
        loc = child_inside(self.location, folder, name, what=f"{kind} name")
        record = require_committed(loc, kind, remedy)
        self._part_records[loc.url] = record  # as read now: its readers tell a replaced part from a damaged one
        return record["manifest"], read_attrs(loc, f"{kind} {loc}", remedy), loc

    def _part_array(self, loc: Location, manifest: dict, name: str, remedy: str) -> ChunkReader:
        what = f"{loc.name} {name} ({loc.parent.name})"
        record = self._part_records.get(loc.url)
        return open_verified(loc.child(name), manifest.get("arrays", {}).get(name), what, remedy, record)

    # ---- splits -------------------------------------------------------------------
    def split_names(self) -> list[str]:
        return self._part_names("splits", "split")

    def get_split(self, name: str | Split = "default") -> Split:
        """The stored split ``name``, read and checked; a Split of this dataset is returned as is."""
        if isinstance(name, Split):
            if name.manifest.get("dataset_id") != self.content_id:
                raise InputError(
                    f"split {name.name} was made from another dataset than {self.path}; "
                    f"use one of this dataset's splits ({', '.join(self.split_names()) or 'none yet'})"
                )
            return name
        loc = child_inside(self.location, "splits", name, what="split name")
        if not loc.exists():
            raise InputError(
                f"dataset {self.path} has no split {name!r}; create it by splitting the dataset with `name={name!r}`"
            )
        # one remedy that always works: a damaged split cannot be shown to be dhash's, so
        # overwrite=True would refuse it
        remedy = f"delete {loc} and re-create it by splitting the dataset with `name={name!r}`"
        manifest, attrs, loc = self._open_part("splits", name, "split", remedy)
        self._check_identity(f"split {name}", attrs, remedy)
        query = self._part_array(loc, manifest, "query", remedy).read_all()
        if sha256_of(query) != attrs.get("query_sha256"):
            raise InputError(f"split {name} of {self.path} does not match its recorded checksum; {remedy}")
        if len(query) and (query[0] < 0 or query[-1] >= self.n or np.any(np.diff(query) <= 0)):
            raise InputError(f"split {name} of {self.path} lists rows that are not rows of this dataset; {remedy}")
        features = None
        if QUERY_FEATURES in manifest.get("arrays", {}):
            features = self._part_array(loc, manifest, QUERY_FEATURES, remedy)
            if features.shape != (len(query), self.d) or features.dtype != self.features.dtype:
                raise InputError(
                    f"split {name} of {self.path} holds query features of another shape or type "
                    f"({shape_words(features.shape)} {features.dtype}); {remedy}"
                )
        return Split(name, query, attrs, features)

    def _check_identity(self, what: str, attrs: dict, remedy: str) -> None:
        """A split or ground truth belongs to the dataset it was made from: the dataset id and
        row count it recorded must be this dataset's (a copy from another dataset is refused)."""
        if attrs.get("dataset_id") != self.content_id or attrs.get("n") != self.n:
            raise InputError(
                f"{what} of {self.path} was made from other data (dataset id {attrs.get('dataset_id')}, "
                f"{attrs.get('n')} rows; this dataset is {self.content_id}, {self.n} rows); {remedy}"
            )

    def make_split(
        self, n_queries: int, seed: int, name: str = "default", overwrite: bool = False, threads: int = 1
    ) -> Split:
        """Draw ``n_queries`` distinct rows with ``seed``; the rest is the database. The split
        keeps a copy of the queries' features (read by ``threads`` threads), which every
        later search, re-ranking or ground truth of its queries reads instead of the dataset."""
        check_name(name, "split name")
        if not 0 < n_queries < self.n:
            raise InputError(
                f"`n_queries` must be in [1, {self.n - 1}] for a dataset of {self.n} points; got {n_queries}"
            )
        if name in self.split_names() and not overwrite:
            existing = self.get_split(name)
            if existing.manifest["seed"] == seed and existing.n_query == n_queries:
                return existing
            raise InputError(
                f"dataset {self.path} already has split {name!r} with another seed/size; pick another `name` or pass `overwrite=True`"
            )
        rng = np.random.default_rng(seed)
        query = np.sort(rng.choice(self.n, size=n_queries, replace=False)).astype(np.int64)
        manifest = {
            "schema": SPLIT_SCHEMA,
            "name": name,
            "seed": int(seed),
            "n": self.n,
            "n_query": int(n_queries),
            "n_database": int(self.n - n_queries),
            "query_sha256": sha256_of(query),
            "database": "all rows not in query",
            "dataset_id": self.content_id,
            "created": _now(),
        }
        target = child_inside(self.location, "splits", name, what="split name")
        self._ensure_child_group("splits")
        features = self.features.take(query, threads=threads)
        feature_rows = max(1, SPLIT_CHUNK_BYTES // max(1, features[:1].nbytes))
        manifest_of = arrays_manifest("query", QUERY_FEATURES)
        with atomic_output(target, kind="split", overwrite=overwrite, manifest=manifest_of) as tmp:
            g = new_group(tmp)
            create_array(g, "query", query.shape, len(query), "int64")[...] = query
            create_array(g, QUERY_FEATURES, features.shape, feature_rows, features.dtype)[...] = features
            g.attrs.update(manifest)
        return self.get_split(name)

    # ---- ground truth ---------------------------------------------------------------
    def groundtruth_names(self) -> list[str]:
        return self._part_names("groundtruth", "groundtruth")

    def _open_groundtruth(self, name: str):
        remedy = f"delete {self.location.child('groundtruth', name)} and compute the ground truth of {self.path} again"
        manifest, attrs, loc = self._open_part("groundtruth", name, "groundtruth", remedy)
        self._check_identity(f"ground truth {name}", attrs, remedy)
        return manifest, attrs, loc, remedy

    def get_groundtruth(self, name: str):
        """(ids (m, K) int64, distances (m, K) float64, attrs) or None if absent (or stored
        as relevance bits)."""
        if name not in self.groundtruth_names():
            return None
        manifest, attrs, loc, remedy = self._open_groundtruth(name)
        if "ids" not in manifest.get("arrays", {}):
            return None
        ids, distances = (self._part_array(loc, manifest, key, remedy).read_all() for key in ("ids", "distances"))
        return ids, distances, attrs

    def groundtruth_fingerprint(self, name: str) -> str:
        """Content id of a stored ground truth (its arrays' checksums)."""
        return content_id(self._open_groundtruth(name)[0])

    def get_relevance_groundtruth(self, name: str):
        """(relevance ChunkReader (n, ceil(m / 8)) uint8, {threshold_distance, threshold_id},
        attrs) or None if absent (or stored as neighbour lists)."""
        if name not in self.groundtruth_names():
            return None
        manifest, attrs, loc, remedy = self._open_groundtruth(name)
        if "relevance" not in manifest.get("arrays", {}):
            return None
        thresholds = {
            key: self._part_array(loc, manifest, key, remedy).read_all()
            for key in ("threshold_distance", "threshold_id")
        }
        return self._part_array(loc, manifest, "relevance", remedy), thresholds, attrs

    def _groundtruth_output(self, name: str, names: tuple):
        target = child_inside(self.location, "groundtruth", name, what="ground truth name")
        self._ensure_child_group("groundtruth")
        return atomic_output(
            target,
            kind="groundtruth",
            overwrite=True,
            manifest=arrays_manifest(*names),
        )

    def put_relevance_groundtruth(self, name: str, *, n_queries: int, fill, thresholds: dict, attrs: dict) -> None:
        """Create the relevance-bits array under a temporary name, let ``fill(array_location)``
        write it (chunk-parallel tasks), store ``thresholds``, then commit."""
        n_bytes = (int(n_queries) + 7) // 8
        with self._groundtruth_output(name, ("relevance", *thresholds)) as tmp:
            g = new_group(tmp)
            create_array(g, "relevance", (self.n, n_bytes), self.chunk_rows, "uint8")
            fill(tmp.child("relevance"))
            for key, value in thresholds.items():
                create_array(g, key, value.shape, len(value), value.dtype)[...] = value
            g.attrs.update({**self._identity(), "schema": GROUNDTRUTH_SCHEMA, "created": _now(), **attrs})

    def put_groundtruth(self, name: str, ids: np.ndarray, distances: np.ndarray, attrs: dict) -> None:
        with self._groundtruth_output(name, ("ids", "distances")) as tmp:
            g = new_group(tmp)
            create_array(g, "ids", ids.shape, len(ids), "int64")[...] = ids
            create_array(g, "distances", distances.shape, len(distances), "float64")[...] = distances
            g.attrs.update({**self._identity(), "schema": GROUNDTRUTH_SCHEMA, "created": _now(), **attrs})

    def _identity(self) -> dict:
        """What a part records of the dataset it belongs to (checked by ``_check_identity``)."""
        return {"dataset_id": self.content_id, "n": self.n}

    def _ensure_child_group(self, name: str) -> None:
        if not self.location.child(name, "zarr.json").exists():
            zarr.open_group(self.location.child(name).zarr_store(), mode="a", zarr_format=3)


def _read_only(array: np.ndarray) -> np.ndarray:
    """A handle's cached array, shared by every caller: one caller's in-place edit must not
    change what the others read."""
    array.flags.writeable = False
    return array


def _committed_kind(loc: Location) -> str | None:

    record = read_commit(loc)
    return record.get("kind") if record else None


def _token(path) -> str:
    return hashlib.sha1(str(path).encode()).hexdigest()[:10]


def open_dataset(path, *, storage=None) -> Dataset:
    """The Dataset handle of a dataset location (a Dataset is returned as is); a URL is
    opened with ``storage`` (a Storage, a dict of options, or None: the environment's)."""
    return path if isinstance(path, Dataset) else Dataset(path, storage=storage)


def dataset_summary(ds: Dataset) -> dict:
    return {
        "path": ds.path,
        "id": ds.content_id,
        "source": ds.source,
        "n": ds.n,
        "d": ds.d,
        "dtype": str(ds.dtype),
        "chunk_rows": int(ds.chunk_rows),
        "labels": ds.has_labels,
    }
