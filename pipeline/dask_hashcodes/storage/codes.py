"""Codes on disk: a committed zarr v3 group (storage.atomic) holding ``codes``, an
(n, ceil(n_bits/8)) uint8 array row-aligned with the dataset, in the verified layout.

attrs: schema, model_id, method, n_bits, bit_order ("little": FAISS's binary layout),
dataset (its location) and dataset_id (its content id). Search and evaluation refuse codes
of another model or another dataset.
"""

from __future__ import annotations

import functools

from dask_hashcodes.errors import InputError
from dask_hashcodes.kernels.codes import BIT_ORDER
from dask_hashcodes.storage.atomic import atomic_output, require_committed
from dask_hashcodes.storage.chunkread import (
    arrays_manifest,
    content_id,
    create_array,
    dask_from_reader,
    new_group,
    open_verified,
    read_attrs,
)
from dask_hashcodes.storage.location import resolve

CODES_SCHEMA = "dhash.codes/2"


def regular_rows(rows: tuple) -> bool:
    """Row chunks that map one-to-one onto zarr chunks: all equal, the last one no larger."""
    return all(r == rows[0] for r in rows[:-1]) and rows[-1] <= rows[0]


def codes_output(path, overwrite: bool):
    return atomic_output(path, kind="codes", overwrite=overwrite, manifest=arrays_manifest("codes"))


def create_codes_array(tmp, n: int, chunk_rows: int, model, dataset):
    group = new_group(tmp)
    group.attrs.update(
        {
            "schema": CODES_SCHEMA,
            "model_id": model.model_id,
            "method": model.method,
            "n_bits": int(model.n_bits),
            "bit_order": BIT_ORDER,
            "dataset": dataset.path if dataset is not None else "",
            "dataset_id": dataset.content_id if dataset is not None else None,
        }
    )
    return create_array(group, "codes", (n, model.code_size), chunk_rows, "uint8")


class Codes:
    """A committed codes store, resolved, checked and opened once: the handle search and
    indexing pass down instead of its location. ``reader`` is the verified reader of the
    ``codes`` array, ``attrs`` the store's attributes, ``manifest`` its commit record's."""

    REMEDY = "re-encode with `dhash encode`"

    def __init__(self, path, *, storage=None):
        loc = resolve(path, storage=storage)
        record = require_committed(loc, "codes", self.REMEDY)
        attrs = read_attrs(loc, f"codes {loc}", self.REMEDY)
        if attrs.get("schema") != CODES_SCHEMA:
            raise InputError(f"{loc} is not a dhash codes array (schema {attrs.get('schema')!r}); {self.REMEDY}")
        self.location, self.attrs, self.manifest = loc, attrs, record["manifest"]
        self.reader = open_verified(
            loc.child("codes"),
            self.manifest.get("arrays", {}).get("codes"),
            f"codes {loc}",
            f"encode the dataset into {loc} again",
            record,
        )

    @property
    def path(self) -> str:
        return self.location.url

    @property
    def n(self) -> int:
        return int(self.reader.shape[0])

    @property
    def code_size(self) -> int:
        return int(self.reader.shape[1])

    @property
    def n_bits(self) -> int:
        return int(self.attrs.get("n_bits", 8 * self.code_size))

    @functools.cached_property
    def content_id(self) -> str:
        """Fingerprint of the codes (their shape and chunk checksums), not of their path; of the
        manifest read when the handle was opened, so hashed once."""
        return content_id(self.manifest)

    def __repr__(self):
        return f"Codes({self.path!r}, n={self.n}, bits={self.n_bits}, method={self.attrs.get('method')!r})"

    def check(self, model=None, dataset=None) -> Codes:
        """These codes, checked to have been made by ``model`` from ``dataset`` (either may be None)."""
        loc, attrs = self.location, self.attrs
        if model is not None and attrs.get("model_id") != model.model_id:
            raise InputError(
                f"codes at {loc} were made by model {attrs.get('model_id')} ({attrs.get('method')}, "
                f"{attrs.get('n_bits')} bits), not by the given model {model.model_id}; {self.REMEDY}"
            )
        if dataset is not None and attrs.get("dataset_id") != dataset.content_id:
            raise InputError(
                f"codes at {loc} were encoded from another dataset ({attrs.get('dataset') or 'unknown'}, id "
                f"{attrs.get('dataset_id')}), not from {dataset.path} (id {dataset.content_id}); "
                f"encode {dataset.path} with this model"
            )
        return self

    def dask(self):
        """The codes as a dask array, one verified-read task per stored chunk."""
        return codes_dask(self.reader)

    def take(self, rows, *, threads: int = 1):
        """The codes of the given rows (numpy), ``threads`` chunks read at a time."""
        return self.reader.take(rows, threads=threads)


def open_codes(path, model=None, dataset=None, *, storage=None) -> Codes:
    """The Codes handle of a codes store (a location, or a Codes handle returned as is);
    with ``model`` / ``dataset`` given, check the codes were made by that model from that
    dataset."""
    codes = path if isinstance(path, Codes) else Codes(path, storage=storage)
    return codes.check(model, dataset)


def codes_dask(reader):
    from dask.base import tokenize

    return dask_from_reader(reader, f"codes-{tokenize(reader)}")
