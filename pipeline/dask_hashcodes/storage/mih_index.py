"""A multi-index hashing index on disk (kernels.mih): a committed zarr v3 group (storage.atomic)
beside the codes it indexes, one shard per codes chunk, in the verified layout.

Arrays:

* ``order`` (n, m) int32: row-aligned with the codes and chunked like them; row p of chunk i
  holds, for each substring j, the chunk row at position p of substring j's table (the chunk's
  rows sorted by that substring's value);
* ``offsets`` (shards, sum_j 2^s_j + 1) int32, one row per shard: each table's CSR offsets,
  one table after the other.

attrs: schema, n_bits (the codes' bytes x 8), m, starts (the substrings' first bits), codes
(the indexed codes' location) and codes_id (their content id), and calibration: both exact
searches timed on the first shard when the index was built (indexes.plan). A search refuses
an index of other codes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dask_hashcodes.errors import InputError
from dask_hashcodes.kernels.mih import table_layout
from dask_hashcodes.storage.atomic import atomic_output, require_committed
from dask_hashcodes.storage.chunkread import (
    arrays_manifest,
    create_array,
    new_group,
    open_verified,
    read_attrs,
)
from dask_hashcodes.storage.location import Location, resolve

INDEX_SCHEMA = "dhash.mih-index/1"
INDEX_KIND = "mih-index"


def index_output(path, overwrite: bool):
    return atomic_output(path, kind=INDEX_KIND, overwrite=overwrite, manifest=arrays_manifest("order", "offsets"))


def create_index_arrays(tmp, *, codes, starts: np.ndarray):
    """The index's group and its two (empty) arrays in a new artifact's location (``codes``:
    the Codes handle of the indexed store)."""
    codes_reader = codes.reader
    group = new_group(tmp)
    m = len(starts) - 1
    group.attrs.update(
        {
            "schema": INDEX_SCHEMA,
            "n_bits": int(starts[-1]),
            "m": m,
            "starts": [int(s) for s in starts],
            "codes": codes.location.url,
            "codes_id": codes.content_id,
        }
    )
    create_array(group, "order", (codes_reader.shape[0], m), codes_reader.chunk_rows, "int32")
    width = int(table_layout(starts)[-1])
    create_array(group, "offsets", (codes_reader.n_chunks, width), 1, "int32")


def add_index_attrs(tmp, attrs: dict) -> None:
    """Attributes measured after the arrays were written, added to the new index's group."""
    new_group(tmp).attrs.update(attrs)


@dataclass(frozen=True)
class StoredTables:
    """A stored multi-index opened and checked once against its Codes handle ``codes``:
    the verified readers of ``order`` and ``offsets`` and the index's attrs."""

    location: Location
    codes: object
    order: object
    offsets: object
    attrs: dict

    @property
    def substrings(self) -> int:
        """m, the substrings each code is cut into (one table per substring)."""
        return int(self.attrs["m"])

    @property
    def code_size(self) -> int:
        """Bytes per packed code of the indexed codes."""
        return int(self.codes.reader.shape[1])

    @property
    def n_bits(self) -> int:
        return int(self.attrs["n_bits"])


def open_index(path, codes, *, storage=None, record=None) -> StoredTables:
    """The index at ``path`` (a location, or StoredTables returned as is), checked to be an
    index of ``codes`` (a Codes handle: same content, same chunking)."""
    if isinstance(path, StoredTables):
        if path.codes is not codes and path.codes.content_id != codes.content_id:
            raise InputError(f"the index at {path.location} was built from other codes than {codes.path}")
        return path
    loc, attrs, (order, offsets) = open_code_index(
        path, codes, kind=INDEX_KIND, schema=INDEX_SCHEMA, what="multi-index", arrays=("order", "offsets"),
        storage=storage, record=record,
    )  # fmt: skip
    if order.chunk_rows != codes.reader.chunk_rows or offsets.shape[0] != codes.reader.n_chunks:
        raise InputError(
            f"the index at {loc} is chunked unlike the codes at {codes.path}; build it again from the codes "
            f"{codes.path} with `overwrite=True`"
        )
    return StoredTables(loc, codes, order, offsets, attrs)


def open_code_index(
    path, codes, *, kind: str, schema: str | tuple, what: str, arrays: tuple, storage=None, record=None
):
    """(location, attrs, verified readers of ``arrays``) of a committed index of ``kind``
    over ``codes`` (a Codes handle): one-line errors for anything else, for an index of
    other codes, and for a missing or damaged array. ``record``: its commit record, when the
    caller has read it already (each artifact's record is read once per job)."""
    loc = resolve(path, storage=storage)
    remedy = f"build it again from the codes {codes.path} with `overwrite=True`"
    record = require_committed(loc, kind, remedy, record)
    attrs = read_attrs(loc, f"index {loc}", remedy)
    if attrs.get("schema") not in ((schema,) if isinstance(schema, str) else schema):
        raise InputError(f"{loc} is not a dhash {what} (schema {attrs.get('schema')!r}); {remedy}")
    if attrs.get("codes_id") != codes.content_id:
        raise InputError(
            f"the index at {loc} was built from other codes ({attrs.get('codes')}, id {attrs.get('codes_id')}) "
            f"than {codes.path}; {remedy}"
        )
    manifest = record["manifest"].get("arrays", {})
    readers = tuple(
        open_verified(loc.child(name), manifest.get(name), f"index {loc} ({name})", remedy, record) for name in arrays
    )
    return loc, attrs, readers
