"""Verified whole-chunk reads of the zarr arrays dhash writes, local or remote.

Every array dhash writes has one layout (``create_array``): zarr v3, chunked on rows only,
codecs ``bytes`` (little endian) + ``zstd`` with its content checksum, and every chunk
written even when it holds only zeros. When the artifact is committed its manifest
records, per array, the shape and each chunk's checksum (the 4 bytes that end its zstd
frame: ``array_manifest``).

Reading a chunk is then: read the file (or object), compare its last 4 bytes with the
manifest, decompress straight into the output array (zstd verifies the content against
the same checksum). A missing chunk, a checksum that differs, a frame that does not
decode or decodes to the wrong size raises ``InputError`` naming the array, the chunk and
the command that re-creates it, on whichever worker reads it; unless the artifact's commit
record changed since the reader was opened, which means it was replaced while being read
(another job wrote a new one there), and a run again reads the new one whole. zarr itself
would return its fill value for a missing chunk, i.e. train, encode or score on zeros.
Direct reads are also faster: ``zarr.Array.__getitem__`` adds event-loop hand-offs and
copies around the decode. What the check adds to a read pass is the comparison of 4 bytes
per chunk and the checksum zstd computes as it decodes.
"""

from __future__ import annotations

import hashlib
import json

import numpy as np

from dask_hashcodes.errors import InputError, shape_words
from dask_hashcodes.storage.location import Location

# level 1: much faster than zstd's default level on SIFT-like chunks, with no worse a ratio
ZSTD_LEVEL = 1


def create_array(group, name: str, shape: tuple, chunk_rows: int, dtype):
    """An array of the verified layout in a zarr group opened for writing."""
    import zarr

    shape = tuple(int(s) for s in shape)
    chunks = (max(1, min(int(chunk_rows), shape[0])),) + shape[1:]
    return group.create_array(
        name,
        shape=shape,
        chunks=chunks,
        dtype=dtype,
        compressors=zarr.codecs.ZstdCodec(level=ZSTD_LEVEL, checksum=True),
        config={"write_empty_chunks": True},
    )


def new_group(loc: Location):
    """A zarr group created in a new artifact's (temporary) location. Mode "a", not "w":
    the location already holds the writer record of storage.atomic, which "w" would delete
    (a killed writer's leftovers would then look foreign instead of ours)."""
    import zarr

    return zarr.open_group(loc.zarr_store(), mode="a", zarr_format=3)


def open_for_write(loc: Location):
    """An existing array opened for chunk writes by a task (any worker, local or remote).
    ``write_empty_chunks`` is a runtime setting, not stored in the array: every opening
    must ask for it, or an all-zero chunk would be skipped and later read as missing
    (``open_array`` ignores a ``config`` argument; the global setting is read at opening)."""
    import zarr

    with zarr.config.set({"array.write_empty_chunks": True}):
        return zarr.open_array(loc.zarr_store(), mode="r+")


def write_rows(loc: Location, index, value) -> None:
    """``array[index] = value`` for the array at ``loc`` in an artifact being written, by a
    task on any worker.

    A job stops at its first failed task while others still run; it removes its temporary
    at once. A task that finishes later must not bring the temporary back (zarr creates the
    directories a chunk needs): it writes only while the writer record is there, and when the
    record is gone after its write (the job failed meanwhile) it removes the temporary again.
    Local temporaries only: their names are unique to one job (on object stores a job writes
    in place, where another job's artifact may already stand)."""
    from dask_hashcodes.storage.atomic import TEMPORARY_NAME, WRITER_FILE

    record = loc.parent.child(WRITER_FILE)
    if loc.is_local and not record.exists():
        raise InputError(f"{loc.parent} is no longer being written (its job stopped); this task wrote nothing")
    try:
        open_for_write(loc)[index] = value
    finally:  # a failed write (a full disk) may have created the chunk's directories too
        if loc.is_local and not record.exists() and TEMPORARY_NAME.match(loc.parent.name):
            loc.parent.remove()  # only ever a temporary: by name, it is no one else's


def _chunk_key(ndim: int, i: int) -> str:
    return "c/" + "/".join([str(i)] + ["0"] * (ndim - 1))


def _metadata(loc: Location, what: str, remedy: str) -> dict:
    try:
        meta = json.loads(loc.child("zarr.json").read_bytes())
    except FileNotFoundError:
        raise InputError(f"{what} is missing ({loc}); {remedy}") from None
    except (ValueError, UnicodeDecodeError):
        raise InputError(f"{what} has damaged metadata ({loc}/zarr.json); {remedy}") from None
    try:
        codecs = [c["name"] for c in meta["codecs"]]
        chunk_shape = meta["chunk_grid"]["configuration"]["chunk_shape"]
        shape, dtype = meta["shape"], np.dtype(meta["data_type"])
        checksum = meta["codecs"][1]["configuration"].get("checksum")
    except (KeyError, IndexError, TypeError, AttributeError):
        raise InputError(f"{what} has damaged metadata ({loc}/zarr.json); {remedy}") from None
    if (
        codecs != ["bytes", "zstd"]
        or not checksum
        or list(chunk_shape[1:]) != list(shape[1:])
        or meta["codecs"][0].get("configuration", {}).get("endian", "little") != "little"
    ):
        raise InputError(f"{what} ({loc}) is not in dhash's verified layout (codecs {codecs}); {remedy}")
    return {"shape": tuple(shape), "dtype": dtype.str, "chunk_rows": int(chunk_shape[0])}


def array_manifest(loc: Location) -> dict:
    """Shape, dtype and per-chunk checksums of a finished array (called when committing)."""
    meta = _metadata(loc, f"array {loc.name}", "the writer did not create it")
    n_chunks = -(-meta["shape"][0] // meta["chunk_rows"]) if meta["shape"][0] else 0
    sums = []
    for i in range(n_chunks):
        path = loc.child(_chunk_key(len(meta["shape"]), i))
        try:
            if loc.is_local:
                with open(path.url, "rb") as f:
                    f.seek(-4, 2)
                    tail = f.read(4)
            else:
                tail = path.fs.cat_file(path.fs_path, start=-4)
        except (FileNotFoundError, OSError):
            raise RuntimeError(f"chunk {i} of {loc} was not written; the write did not finish") from None
        sums.append(tail.hex())
    return {"shape": list(meta["shape"]), "dtype": meta["dtype"], "chunk_rows": meta["chunk_rows"], "checksums": sums}


def record_digest(record: dict) -> str:
    """A digest of an artifact's commit record: another one means another write of it."""
    return hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()


class ChunkReader:
    """Callable: chunk number -> its rows, verified (the last chunk trimmed to the array's end).
    ``opened``: (kind, ``record_digest``) of the artifact holding the array (its parent) when
    it was opened, so a chunk that fails because the artifact was replaced says so."""

    def __init__(self, loc: Location, manifest: dict, what: str, remedy: str, opened: tuple[str, str] | None = None):
        self.loc, self.what, self.remedy, self.opened = loc, what, remedy, opened
        self.shape = tuple(manifest["shape"])
        self.chunk_rows = int(manifest["chunk_rows"])
        self.dtype = np.dtype(manifest["dtype"])
        self.checksums = [bytes.fromhex(c) for c in manifest["checksums"]]

    def __dask_tokenize__(self):
        return ("dhash-chunk-reader", self.loc.url, self.shape, self.dtype.str, tuple(self.checksums))

    @property
    def n_chunks(self) -> int:
        return len(self.checksums)

    def _fail(self, i: int, problem: str, path: Location):
        if self.opened is not None:
            from dask_hashcodes.storage.atomic import read_commit

            kind, digest = self.opened
            now = read_commit(self.loc.parent)
            if now is None or record_digest(now) != digest:  # being replaced, or replaced
                raise InputError(
                    f"the {kind} at {self.loc.parent} was replaced while it was being read (its commit record "
                    "changed since it was opened); run again"
                )
        raise InputError(f"{self.what} chunk {i} is {problem} ({path}); {self.remedy}")

    def _raw(self, i: int, path: Location) -> bytes:
        try:
            if self.loc.is_local:
                with open(path.url, "rb") as f:
                    return f.read()
            return path.fs.cat_file(path.fs_path)
        except FileNotFoundError:
            self._fail(i, "missing", path)

    def __call__(self, i: int) -> np.ndarray:
        from numcodecs import Zstd

        i = int(i)
        rows = min(self.chunk_rows, self.shape[0] - i * self.chunk_rows)
        path = self.loc.child(_chunk_key(len(self.shape), i))
        raw = self._raw(i, path)
        if len(raw) < 4 or raw[-4:] != self.checksums[i]:
            self._fail(i, "damaged (checksum differs from the manifest)", path)
        out = np.empty((self.chunk_rows,) + self.shape[1:], self.dtype)
        try:
            decoded = Zstd().decode(raw, out=out)
        except (RuntimeError, ValueError) as exc:
            problem = "its content does not match its checksum" if "checksum" in str(exc) else "not a valid zstd frame"
            self._fail(i, f"damaged ({problem})", path)
        if np.asarray(decoded).nbytes != out.nbytes:
            self._fail(i, "damaged (wrong decoded size)", path)
        return out[:rows]

    def __getitem__(self, index) -> np.ndarray:
        """Rows by slice (``reader[a:b]``, ``reader[...]``) or by an array of row numbers."""
        if index is Ellipsis:
            return self.read_all()
        if isinstance(index, slice):
            return self.take(np.arange(*index.indices(self.shape[0])))
        if np.ndim(index) == 0:
            return self.take([int(index)])[0]
        return self.take(index)

    def take(self, rows: np.ndarray, *, threads: int = 1) -> np.ndarray:
        """The given rows (any order, repeats allowed), reading only the chunks that hold them;
        ``threads`` chunks at a time (decompression releases the GIL: a batch of queries drawn
        at random touches every chunk of a dataset, which one thread reads one by one)."""
        rows = np.asarray(rows, dtype=np.int64)
        out = np.empty((len(rows),) + self.shape[1:], self.dtype)
        owner = rows // self.chunk_rows

        def fill(c):
            mine = np.flatnonzero(owner == c)
            out[mine] = self(int(c))[rows[mine] - c * self.chunk_rows]

        chunks = np.unique(owner)
        if threads <= 1 or len(chunks) < 2:
            for c in chunks:
                fill(c)
            return out
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(min(threads, len(chunks))) as pool:
            list(pool.map(fill, chunks))  # list(): a chunk's error is raised here
        return out

    def read_all(self) -> np.ndarray:
        """The whole array (small arrays: labels, splits, thresholds, neighbour lists)."""
        if self.n_chunks == 1:
            return self(0)
        return (
            np.concatenate([self(i) for i in range(self.n_chunks)])
            if self.n_chunks
            else np.empty(self.shape, self.dtype)
        )


def open_verified(
    loc: Location, manifest: dict | None, what: str, remedy: str, record: dict | None = None
) -> ChunkReader:
    """A verified reader of the array at ``loc`` whose committed manifest entry is ``manifest``.
    ``record``: the commit record of the artifact holding it (``loc``'s parent), as read when
    the artifact was opened; a chunk that fails after it changed is reported as replaced."""
    if not manifest:
        raise InputError(f"{what} ({loc}) is not listed in its artifact's manifest; {remedy}")
    meta = _metadata(loc, what, remedy)
    try:
        recorded = {
            "shape": [int(s) for s in manifest["shape"]],
            "dtype": str(manifest["dtype"]),
            "chunk_rows": int(manifest["chunk_rows"]),
        }
        checksums = [bytes.fromhex(c) for c in manifest["checksums"]]
        if any(len(c) != 4 for c in checksums):
            raise ValueError("a chunk checksum is not 4 bytes")
    except (KeyError, TypeError, ValueError):
        raise InputError(f"{what} ({loc}) has a damaged manifest entry in its commit record; {remedy}") from None
    stored = {"shape": list(meta["shape"]), "dtype": meta["dtype"], "chunk_rows": meta["chunk_rows"]}
    shown = {"shape": shape_words}  # in words, never a Python list
    differ = [
        f"{field} {shown.get(field, str)(stored[field])} vs {shown.get(field, str)(recorded[field])}"
        for field in stored
        if stored[field] != recorded[field]
    ]
    if differ:
        raise InputError(
            f"{what} ({loc}) has metadata that differs from its manifest ({'; '.join(differ)}, zarr.json vs "
            f"manifest); {remedy}"
        )
    n_chunks = -(-recorded["shape"][0] // recorded["chunk_rows"]) if recorded["chunk_rows"] > 0 else -1
    if len(checksums) != n_chunks:
        # every chunk is verified against its own checksum: a list of another length would
        # leave chunks unreadable (or, longer, claim chunks the array does not have)
        raise InputError(
            f"{what} ({loc}): its manifest lists {len(checksums)} chunk checksums for {n_chunks} chunks; {remedy}"
        )
    opened = (str(record.get("kind")), record_digest(record)) if record else None
    return ChunkReader(loc, manifest, what, remedy, opened)


def dask_from_reader(reader: ChunkReader, name: str):
    """Dask array with one verified-read task per stored chunk (rows chunked, other dims whole)."""
    import dask.array as da
    from dask.highlevelgraph import HighLevelGraph

    n, rows = reader.shape[0], reader.chunk_rows
    starts = range(0, n, rows)
    chunks = (tuple(min(rows, n - s) for s in starts),) + tuple((s,) for s in reader.shape[1:])
    tail = (0,) * (len(reader.shape) - 1)
    graph = {(name, i) + tail: (reader, i) for i in range(len(starts))}
    return da.Array(HighLevelGraph.from_collections(name, graph, dependencies=()), name, chunks, dtype=reader.dtype)


class arrays_manifest:  # noqa: N801 - used like a function: atomic_output(manifest=arrays_manifest("codes"))
    """A ``manifest`` callable for ``atomic_output``: the manifests of the named arrays
    that exist in the artifact (optional ones, such as labels, may be absent). Its
    ``chunk_files`` names every chunk file with its checksum, so committing lists them in
    the record without reading them again."""

    def __init__(self, *names: str):
        self.names = names

    def __call__(self, loc: Location) -> dict:
        names = [name for name in self.names if loc.child(name, "zarr.json").exists()]
        return {"arrays": {name: array_manifest(loc.child(name)) for name in names}}

    @staticmethod
    def chunk_files(manifest: dict) -> dict[str, str]:
        """Relative path of every chunk file of the manifest's arrays -> "zstd:<checksum>"."""
        return {
            f"{name}/{_chunk_key(len(array['shape']), i)}": f"zstd:{checksum}"
            for name, array in manifest.get("arrays", {}).items()
            for i, checksum in enumerate(array.get("checksums", []))
        }


def content_id(manifest: dict, names=None) -> str:
    """Fingerprint of an artifact's arrays (shapes, dtypes, chunk checksums), not of its path:
    a copy of the same data elsewhere has the same id."""
    import hashlib

    arrays = manifest.get("arrays", {})
    picked = {k: v for k, v in arrays.items() if names is None or k in names}
    return hashlib.sha256(json.dumps(picked, sort_keys=True).encode()).hexdigest()[:16]


def read_attrs(loc: Location, what: str, remedy: str) -> dict:
    """The attributes in a zarr group's or array's zarr.json, read without zarr."""
    try:
        meta = json.loads(loc.child("zarr.json").read_bytes())
        attrs = meta.get("attributes", {})
    except FileNotFoundError:
        raise InputError(f"{what} is missing ({loc}/zarr.json); {remedy}") from None
    except (ValueError, UnicodeDecodeError, AttributeError):
        raise InputError(f"{what} has damaged metadata ({loc}/zarr.json); {remedy}") from None
    if not isinstance(attrs, dict):
        raise InputError(f"{what} has damaged metadata ({loc}/zarr.json); {remedy}")
    return attrs
