"""The database side of a query/database split, the one place that drops the query rows.

Training, encoding for search, ground truth and evaluation all need the same view of a
dataset: every row that is not one of the split's queries, with its global row number and
label. Dropping rows is lazy (a dask graph per chunk), never a copy of the data.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dask_hashcodes.distributed.graph import as_dask, drop_rows, row_numbers


@dataclass(frozen=True)
class DatabaseView:
    """``features``/``ids`` are dask arrays chunked like the dataset minus the query rows;
    ``labels`` the database rows' labels (numpy) or None."""

    query: np.ndarray
    features: object
    ids: object
    labels: np.ndarray | None

    def of(self, rows):
        """Any array row-aligned with the whole dataset (codes, relevance rows) without the
        query rows, chunked like ``features``."""
        rows = as_dask(rows)
        return drop_rows(rows, self.query) if self.query.size else rows

    @property
    def n(self) -> int:
        return int(self.features.shape[0])


def view_of(features, query: np.ndarray | None = None, labels: np.ndarray | None = None) -> DatabaseView:
    """The database view of row-aligned ``features`` (and ``labels``) given the query rows
    (None or empty: every row is a database row)."""
    features = as_dask(features)
    query = np.empty(0, dtype=np.int64) if query is None else np.asarray(query, dtype=np.int64)
    if query.size == 0:  # every row: no row-dropping layer in the graph
        return DatabaseView(query, features, row_numbers(features), labels)
    db_labels = None if labels is None else np.delete(labels, query, axis=0)
    return DatabaseView(query, drop_rows(features, query), drop_rows(row_numbers(features), query), db_labels)


def database_view(ds, split=None) -> DatabaseView:
    """The database rows of dataset ``ds`` for ``split`` (a Split, a split name, or None for
    every row)."""
    if isinstance(split, str):
        split = ds.get_split(split)
    return view_of(ds.features_dask(), None if split is None else split.query, ds.labels)
