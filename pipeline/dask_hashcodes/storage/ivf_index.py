"""An inverted-file index on disk (kernels.ivf): a committed zarr v3 group (storage.atomic)
beside the codes it indexes, one shard per codes chunk, in the verified layout.

Arrays:

* ``centroids`` (n_lists, d) float64: the coarse quantiser (k-means of the features);
* ``order`` (n,) int32, row-aligned with the codes and chunked like them: chunk i's rows
  (positions inside the chunk) grouped by list, ascending inside each list;
* ``offsets`` (shards, n_lists + 1) int32, one row per shard: where each list starts in
  the shard's rows of ``order``.

The codes themselves are read from the codes store, so the index adds 4 bytes per code and
the centroids. attrs: schema, n_lists, d, n_bits, codes (the indexed codes' location) and
codes_id (their content id). A search refuses an index of other codes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dask_hashcodes.errors import InputError
from dask_hashcodes.storage.atomic import atomic_output, read_commit
from dask_hashcodes.storage.chunkread import arrays_manifest, create_array, new_group
from dask_hashcodes.storage.location import Location, resolve
from dask_hashcodes.storage.mih_index import StoredTables, open_code_index, open_index

IVF_SCHEMA = "dhash.ivf-index/1"
IVF_KIND = "ivf-index"
IVF_ARRAYS = ("centroids", "order", "offsets")


def ivf_output(path, overwrite: bool):
    return atomic_output(path, kind=IVF_KIND, overwrite=overwrite, manifest=arrays_manifest(*IVF_ARRAYS))


def create_ivf_arrays(tmp, *, codes, centroids: np.ndarray):
    """The index's group in a new artifact's location, with its centroids written and
    ``order`` and ``offsets`` empty (``codes``: the Codes handle of the indexed store)."""
    reader = codes.reader
    n_lists, d = centroids.shape
    group = new_group(tmp)
    group.attrs.update(
        {
            "schema": IVF_SCHEMA,
            "n_lists": int(n_lists),
            "d": int(d),
            "n_bits": 8 * int(reader.shape[1]),
            "codes": codes.location.url,
            "codes_id": codes.content_id,
        }
    )
    create_array(group, "centroids", (n_lists, d), n_lists, "float64")[...] = centroids
    create_array(group, "order", (reader.shape[0],), reader.chunk_rows, "int32")
    create_array(group, "offsets", (reader.n_chunks, n_lists + 1), 1, "int32")


@dataclass(frozen=True)
class StoredLists:
    """A stored inverted file opened and checked once against its Codes handle ``codes``:
    the centroids (in memory: small) and the verified readers of ``order`` and ``offsets``."""

    location: Location
    codes: object
    centroids: np.ndarray
    order: object
    offsets: object

    @property
    def n_lists(self) -> int:
        return len(self.centroids)

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
    loc, attrs, (centroids, order, offsets) = open_code_index(
        path,
        codes,
        kind=IVF_KIND,
        schema=IVF_SCHEMA,
        what="inverted file",
        arrays=IVF_ARRAYS,
        storage=storage,
        record=record,
    )
    n_lists = int(attrs.get("n_lists", -1))
    if (
        order.chunk_rows != codes.reader.chunk_rows
        or order.shape[0] != codes.n
        or offsets.shape != (codes.reader.n_chunks, n_lists + 1)
        or centroids.shape[0] != n_lists
    ):
        raise InputError(
            f"the inverted file at {loc} does not fit the codes at {codes.path} (its shapes or chunking differ); "
            f"build it again from the codes with `overwrite=True`"
        )
    return StoredLists(loc, codes, np.asarray(centroids[:], dtype=np.float64), order, offsets)


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
