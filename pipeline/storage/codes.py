"""Codes on disk: a committed zarr v3 group (storage.atomic) holding ``codes``, an
(n, ceil(n_bits/8)) uint8 array row-aligned with the dataset, in the verified layout.

attrs: schema, model_id, method, n_bits, bit_order ("little": FAISS's binary layout),
dataset (its location) and dataset_id (its content id). Search and evaluation refuse codes
of another model or another dataset.
"""

from __future__ import annotations

from dhash.errors import InputError
from dhash.kernels.codes import BIT_ORDER
from dhash.storage.atomic import atomic_output, require_committed
from dhash.storage.chunkread import (
    arrays_manifest,
    create_array,
    dask_from_reader,
    new_group,
    open_verified,
    read_attrs,
)
from dhash.storage.location import resolve

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
    return create_array(group, "codes", (n, model.code_bytes), chunk_rows, "uint8")


def open_codes(path, model=None, dataset=None):
    """(verified reader of the codes, attrs) of a codes artifact; with ``model`` / ``dataset``
    given, check the codes were made by that model from that dataset."""
    loc = resolve(path)
    remedy = "re-encode with `dhash encode`"
    record = require_committed(loc, "codes", remedy)
    attrs = read_attrs(loc, f"codes {loc}", remedy)
    if attrs.get("schema") != CODES_SCHEMA:
        raise InputError(f"{loc} is not a dhash codes array (schema {attrs.get('schema')!r}); {remedy}")
    if model is not None and attrs.get("model_id") != model.model_id:
        raise InputError(
            f"codes at {loc} were made by model {attrs.get('model_id')} ({attrs.get('method')}, "
            f"{attrs.get('n_bits')} bits), not by the given model {model.model_id}; {remedy}"
        )
    if dataset is not None and attrs.get("dataset_id") != dataset.content_id:
        raise InputError(
            f"codes at {loc} were encoded from another dataset ({attrs.get('dataset') or 'unknown'}, id "
            f"{attrs.get('dataset_id')}), not from {dataset.path} (id {dataset.content_id}); "
            f"encode this dataset with `dhash encode --dataset {dataset.path}`"
        )
    reader = open_verified(
        loc.child("codes"),
        record["manifest"].get("arrays", {}).get("codes"),
        f"codes {loc}",
        f"re-run `dhash encode --out {loc}`",
    )
    return reader, attrs


def codes_dask(reader):
    from dask.base import tokenize

    return dask_from_reader(reader, f"codes-{tokenize(reader)}")
