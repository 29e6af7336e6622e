"""An inverted-file index on disk (kernels.ivf): a committed zarr v3 group (storage.atomic)
beside the codes it indexes, one shard per codes chunk, in the verified layout.

Arrays:

* ``centroids`` (n_lists, dims) float64: the coarse quantiser (k-means of a sample of the
  features), in the features' space (dims = d) or in a subspace of them; or, for a quantiser
  in code space (attrs quantiser "codes", schema 3), (n_lists, code bytes) uint8 centroid
  codes (k-means of a sample of the codes, made binary), dims the code bits and d 0: no feature is used;
* ``projection`` (d, dims) and ``projection_mean`` (d,) float64, present only when the
  quantiser lives in a subspace: a row x is (x - mean) @ projection before it meets a centroid;
* ``order`` (n,) int32, row-aligned with the codes and chunked like them: chunk i's rows
  (positions inside the chunk) grouped by list, ascending inside each list;
* ``offsets`` (shards, n_lists + 1) int32, one row per shard: where each list starts in
  the shard's rows of ``order``.

The codes themselves are read from the codes store, so the index adds 4 bytes per code and
the centroids. attrs: schema, n_lists, d (the features' count), dims (the quantiser's),
n_bits, codes (the indexed codes' location) and codes_id (their content id). A search
refuses an index of other codes. Schema 1 (written before the quantiser could live in a
subspace) is read as an index with dims = d; schemas 1 and 2 as quantisers in feature space.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dask_hashcodes.errors import InputError
from dask_hashcodes.kernels.ivf import Projection
from dask_hashcodes.storage.atomic import atomic_output, read_commit
from dask_hashcodes.storage.chunkread import arrays_manifest, create_array, new_group
from dask_hashcodes.storage.location import Location, resolve
from dask_hashcodes.storage.mih_index import StoredTables, open_code_index, open_index

IVF_SCHEMA = "dhash.ivf-index/2"
IVF_CODES_SCHEMA = "dhash.ivf-index/3"  # written only for a code-space quantiser: older readers refuse it
IVF_SCHEMAS = ("dhash.ivf-index/1", IVF_SCHEMA, IVF_CODES_SCHEMA)
IVF_KIND = "ivf-index"
IVF_ARRAYS = ("centroids", "order", "offsets")
PROJECTION_ARRAYS = ("projection_mean", "projection")


def ivf_output(path, overwrite: bool):
    return atomic_output(
        path, kind=IVF_KIND, overwrite=overwrite, manifest=arrays_manifest(*IVF_ARRAYS, *PROJECTION_ARRAYS)
    )


def create_ivf_arrays(
    tmp, *, codes, centroids: np.ndarray, projection: Projection | None = None, quantiser: str = "features"
):
    """The index's group in a new artifact's location, with its quantiser (centroids and
    projection; centroid codes for ``quantiser="codes"``) written and ``order`` and
    ``offsets`` empty (``codes``: the Codes handle of the indexed store)."""
    reader = codes.reader
    n_lists, width = centroids.shape
    in_codes = quantiser == "codes"
    dims = 8 * width if in_codes else width
    group = new_group(tmp)
    group.attrs.update(
        {
            "schema": IVF_CODES_SCHEMA if in_codes else IVF_SCHEMA,
            "n_lists": int(n_lists),
            "d": 0 if in_codes else int(dims if projection is None else projection.d),
            "dims": int(dims),
            "n_bits": 8 * int(reader.shape[1]),
            "codes": codes.location.url,
            "codes_id": codes.content_id,
        }
    )
    if in_codes:
        group.attrs["quantiser"] = "codes"
    dtype = "uint8" if in_codes else "float64"
    create_array(group, "centroids", (n_lists, width), n_lists, dtype)[...] = centroids
    if projection is not None:
        d = projection.d
        create_array(group, "projection_mean", (d,), d, "float64")[...] = projection.mean
        create_array(group, "projection", (d, dims), d, "float64")[...] = projection.components
    create_array(group, "order", (reader.shape[0],), reader.chunk_rows, "int32")
    create_array(group, "offsets", (reader.n_chunks, n_lists + 1), 1, "int32")


@dataclass(frozen=True)
class StoredLists:
    """A stored inverted file opened and checked once against its Codes handle ``codes``:
    the quantiser (centroids and projection, in memory: small) and the verified readers of
    ``order`` and ``offsets``. ``quantiser``: "features" (float64 centroids in the features'
    space or a subspace) or "codes" (uint8 centroid codes: queries probe by their codes)."""

    location: Location
    codes: object
    centroids: np.ndarray
    order: object
    offsets: object
    projection: Projection | None = None
    quantiser: str = "features"

    @property
    def n_lists(self) -> int:
        return len(self.centroids)

    @property
    def d(self) -> int:
        """Features per query vector (0: a code-space quantiser uses none)."""
        if self.quantiser == "codes":
            return 0
        return self.centroids.shape[1] if self.projection is None else self.projection.d

    @property
    def code_size(self) -> int:
        """Bytes per packed code of the indexed codes."""
        return int(self.codes.reader.shape[1])


def open_ivf(path, codes, *, storage=None, record=None) -> StoredLists:
    """The inverted file at ``path`` (a location, or StoredLists returned as is), checked to
    be an index of ``codes`` (a Codes handle: same content, same chunking)."""
    if isinstance(path, StoredLists):
        if path.codes is not codes and path.codes.content_id != codes.content_id:
            raise InputError(f"the inverted file at {path.location} was built from other codes than {codes.path}")
        return path
    loc = resolve(path, storage=storage)
    record = read_commit(loc) if record is None else record
    # the projection's arrays are read when the index says it has them; missing, they are damage
    projected = record is not None and "projection" in record.get("manifest", {}).get("arrays", {})
    loc, attrs, (centroids, order, offsets, *projection) = open_code_index(
        loc,
        codes,
        kind=IVF_KIND,
        schema=IVF_SCHEMAS,
        what="inverted file",
        arrays=IVF_ARRAYS + (PROJECTION_ARRAYS if projected else ()),
        storage=storage,
        record=record,
    )
    n_lists = int(attrs.get("n_lists", -1))
    d, dims = int(attrs.get("d", -1)), int(attrs.get("dims", attrs.get("d", -1)))
    quantiser = attrs.get("quantiser", "features")
    in_codes = quantiser == "codes"
    if (
        quantiser not in ("features", "codes")
        or order.chunk_rows != codes.reader.chunk_rows
        or order.shape[0] != codes.n
        or offsets.shape != (codes.reader.n_chunks, n_lists + 1)
        or centroids.shape != ((n_lists, codes.code_size) if in_codes else (n_lists, dims))
        or (in_codes and (projected or dims != codes.n_bits))
        or (not in_codes and projected != (dims != d))
        or (projected and (projection[0].shape != (d,) or projection[1].shape != (d, dims)))
    ):
        raise InputError(
            f"the inverted file at {loc} does not fit the codes at {codes.path} (its shapes or chunking differ); "
            f"build it again from the codes with `overwrite=True`"
        )
    if in_codes:
        return StoredLists(loc, codes, np.asarray(centroids[:], dtype=np.uint8), order, offsets, None, "codes")
    subspace = Projection(projection[0][:], projection[1][:]) if projected else None
    return StoredLists(loc, codes, np.asarray(centroids[:], dtype=np.float64), order, offsets, subspace)


def open_stored_index(index, codes, *, storage=None):
    """The stored index at ``index`` over ``codes``, opened by its kind (its commit record,
    read once): StoredLists for an inverted file, StoredTables for a multi-index; an index
    opened already is checked and returned as is."""
    if isinstance(index, StoredLists):
        return open_ivf(index, codes)
    if isinstance(index, StoredTables):
        return open_index(index, codes)
    loc = resolve(index, storage=storage)
    record = read_commit(loc)
    if record is not None and record.get("kind") == IVF_KIND:
        return open_ivf(loc, codes, record=record)
    return open_index(loc, codes, record=record)
