"""Parquet files with one vector per row in a list column (``fixed_size_list`` or ``list``).

``n`` comes from the file metadata, ``d`` from the list size (fixed_size_list) or the
first row (list). Batches are read with ``ParquetFile.iter_batches``, so memory stays at
one batch plus one row group's column chunk.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from dask_hashcodes.data.readers import check_not_empty, existing_file
from dask_hashcodes.errors import InputError
from dask_hashcodes.validation import check_numeric_dtype

_LIST_TYPES = (pa.types.is_fixed_size_list, pa.types.is_list, pa.types.is_large_list)


def is_vector_type(arrow_type: pa.DataType) -> bool:
    """A list (of any kind) whose items are integers or floats."""
    return any(test(arrow_type) for test in _LIST_TYPES) and (
        pa.types.is_integer(arrow_type.value_type) or pa.types.is_floating(arrow_type.value_type)
    )


def _open(path) -> pq.ParquetFile:
    try:
        return pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as exc:
        raise InputError(f"{path} is not a readable parquet file ({exc}); re-export it") from None


class ParquetReader:
    def __init__(self, path, column: str | None = None):
        self.path = existing_file(path)
        with _open(self.path) as pf:
            schema = pf.schema_arrow
            self.column = self._pick_column(schema, column)
            arrow_type = schema.field(self.column).type
            self.n = pf.metadata.num_rows
            if pa.types.is_fixed_size_list(arrow_type):
                self.d = arrow_type.list_size
            else:
                self.d = self._first_row_length(pf) if self.n else 0
        self.dtype = check_numeric_dtype(
            np.dtype(arrow_type.value_type.to_pandas_dtype()), what=f"{self.path} column {self.column!r}"
        )
        self.source = f"parquet:{self.path.resolve()}#{self.column}"
        check_not_empty(self.n, self.d, self.path)

    def _first_row_length(self, pf: pq.ParquetFile) -> int:
        first = next(pf.iter_batches(batch_size=1, columns=[self.column])).column(0)
        if first.null_count:
            raise InputError(f"{self.path} column {self.column!r} row 0 is null; drop rows without a vector")
        return len(first[0])

    def _pick_column(self, schema: pa.Schema, column: str | None) -> str:
        if column is not None:
            if column not in schema.names:
                raise InputError(f"{self.path} has no column {column!r}; its columns are {', '.join(schema.names)}")
            if not is_vector_type(schema.field(column).type):
                raise InputError(
                    f"{self.path} column {column!r} has type {schema.field(column).type}, not a list "
                    f"of numbers; pass the `column` that holds one vector per row"
                )
            return column
        candidates = [field.name for field in schema if is_vector_type(field.type)]
        if len(candidates) == 1:
            return candidates[0]
        if not candidates:
            raise InputError(
                f"{self.path} has no list-of-numbers column (columns: {', '.join(schema.names)}); "
                f"store each vector as a list or fixed_size_list column"
            )
        raise InputError(f"{self.path} has several vector columns ({', '.join(candidates)}); choose one with `column`")

    def __repr__(self):
        return f"ParquetReader({self.source!r}, n={self.n}, d={self.d}, dtype={self.dtype})"

    def iter_blocks(self, block_rows: int) -> Iterator[np.ndarray]:
        if block_rows < 1:
            raise InputError(f"block_rows must be at least 1; got {block_rows}")
        start = 0
        with _open(self.path) as pf:
            for batch in pf.iter_batches(batch_size=block_rows, columns=[self.column]):
                yield self._to_numpy(batch.column(0), start)
                start += batch.num_rows

    def _to_numpy(self, vectors: pa.Array, start: int) -> np.ndarray:
        """(rows, d) array from one batch of lists, naming the first bad row if any."""
        lengths = pc.list_value_length(vectors).to_numpy(zero_copy_only=False)
        # a null list gives a null length (NaN here), which also fails the comparison
        bad = np.flatnonzero(lengths != self.d)
        if bad.size:
            row = int(bad[0])
            got = "null" if vectors[row].as_py() is None else f"{len(vectors[row])} values"
            raise InputError(
                f"{self.path} column {self.column!r} row {start + row} holds {got}, but row 0 "
                f"holds {self.d}; every row needs a vector of the same length"
            )
        values = vectors.flatten()
        if values.null_count:
            first_null = int(np.flatnonzero(values.is_null().to_numpy(zero_copy_only=False))[0])
            row = int(pc.list_parent_indices(vectors)[first_null].as_py())
            raise InputError(
                f"{self.path} column {self.column!r} row {start + row} has missing values; "
                f"drop or impute them before ingesting"
            )
        return values.to_numpy(zero_copy_only=False).astype(self.dtype, copy=False).reshape(len(vectors), self.d)

    def read_labels(self, column: str) -> np.ndarray:
        """An integer label column, read in full (labels are small next to the vectors)."""
        with _open(self.path) as pf:
            if column not in pf.schema_arrow.names:
                raise InputError(
                    f"{self.path} has no column {column!r}; its columns are {', '.join(pf.schema_arrow.names)}"
                )
            labels = pf.read(columns=[column]).column(0)
        if not pa.types.is_integer(labels.type):
            raise InputError(f"{self.path} label column {column!r} has type {labels.type}; give integer class ids")
        if labels.null_count:
            raise InputError(
                f"{self.path} label column {column!r} has {labels.null_count} missing labels; "
                f"fill them or drop those rows"
            )
        return labels.to_numpy()
