"""A multi-index hashing index on disk (kernels.mih): a committed zarr v3 group (storage.atomic)
beside the codes it indexes, one shard per codes chunk, in the verified layout.

Arrays:

* ``order`` (n, m) int32: row-aligned with the codes and chunked like them; row p of chunk i
  holds, for each substring j, the chunk row at position p of substring j's table (the chunk's
  rows sorted by that substring's value);
* ``offsets`` (shards, sum_j 2^s_j + 1) int32, one row per shard: each table's CSR offsets,
  one table after the other.

attrs: schema, n_bits (the codes' bytes x 8), m, starts (the substrings' first bits), codes
(the indexed codes' location) and codes_id (their content id). A search refuses an index of
other codes.
"""

from __future__ import annotations

import numpy as np

from dhash.errors import InputError
from dhash.kernels.mih import table_layout
from dhash.storage.atomic import atomic_output, require_committed
from dhash.storage.chunkread import arrays_manifest, content_id, create_array, new_group, open_verified, read_attrs
from dhash.storage.location import resolve

INDEX_SCHEMA = "dhash.mih-index/1"
INDEX_KIND = "mih-index"


def codes_content_id(codes) -> str:
    """Content id of a committed codes store (its arrays' shapes and chunk checksums)."""
    record = require_committed(resolve(codes), "codes", "re-encode with `dhash encode`")
    return content_id(record["manifest"])


def index_output(path, overwrite: bool):
    return atomic_output(path, kind=INDEX_KIND, overwrite=overwrite, manifest=arrays_manifest("order", "offsets"))


def create_index_arrays(tmp, *, codes, codes_reader, starts: np.ndarray):
    """The index's group and its two (empty) arrays in a new artifact's location."""
    group = new_group(tmp)
    m = len(starts) - 1
    group.attrs.update(
        {
            "schema": INDEX_SCHEMA,
            "n_bits": int(starts[-1]),
            "m": m,
            "starts": [int(s) for s in starts],
            "codes": resolve(codes).url,
            "codes_id": codes_content_id(codes),
        }
    )
    create_array(group, "order", (codes_reader.shape[0], m), codes_reader.chunk_rows, "int32")
    width = int(table_layout(starts)[-1])
    create_array(group, "offsets", (codes_reader.n_chunks, width), 1, "int32")


def open_index(path, codes, codes_reader):
    """(order reader, offsets reader, attrs) of the index at ``path``, checked to be an index
    of the codes at ``codes`` (same content, same chunking)."""
    loc = resolve(path)
    remedy = f"build it again with `dhash index --codes {codes} --out {loc} --overwrite`"
    record = require_committed(loc, INDEX_KIND, remedy)
    attrs = read_attrs(loc, f"index {loc}", remedy)
    if attrs.get("schema") != INDEX_SCHEMA:
        raise InputError(f"{loc} is not a dhash multi-index (schema {attrs.get('schema')!r}); {remedy}")
    if attrs.get("codes_id") != codes_content_id(codes):
        raise InputError(
            f"the index at {loc} was built from other codes ({attrs.get('codes')}, id {attrs.get('codes_id')}) "
            f"than {codes}; {remedy}"
        )
    arrays = record["manifest"].get("arrays", {})
    order = open_verified(loc.child("order"), arrays.get("order"), f"index {loc} (order)", remedy)
    offsets = open_verified(loc.child("offsets"), arrays.get("offsets"), f"index {loc} (offsets)", remedy)
    if order.chunk_rows != codes_reader.chunk_rows or offsets.shape[0] != codes_reader.n_chunks:
        raise InputError(f"the index at {loc} is chunked unlike the codes at {codes}; {remedy}")
    return order, offsets, attrs
