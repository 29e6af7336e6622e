"""Ingest a vector file into a dataset: stream blocks from a reader into write_dataset."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

import numpy as np

from dask_hashcodes.data.debian_sift import write_debian_sift
from dask_hashcodes.data.formats import detect_format, open_reader
from dask_hashcodes.data.parquetfile import ParquetReader
from dask_hashcodes.data.readers import VectorReader, block_rows_for, existing_file
from dask_hashcodes.data.sources import SOURCES, write_fashion_mnist
from dask_hashcodes.distributed.progress import rows_bar
from dask_hashcodes.errors import InputError, shape_words
from dask_hashcodes.storage.datasets import Dataset, write_dataset_like
from dask_hashcodes.storage.location import resolve


def read_labels_file(path) -> np.ndarray:
    """Labels from an IDX labels file, the first column of an .ivecs, or a 1-D/2-D integer .npy.

    Labels are read in full: one small integer (row) per vector.
    """
    path = existing_file(path)
    fmt = detect_format(path)
    if fmt == "idx":
        from dask_hashcodes.data.idx import read_idx_labels

        return read_idx_labels(path)
    if fmt == "ivecs":
        from dask_hashcodes.data.texmex import VecsReader

        reader = VecsReader(path, kind="ivecs")
        blocks = reader.iter_blocks(block_rows_for(reader.d, reader.dtype.itemsize))
        return np.concatenate([block[:, 0] for block in blocks])
    if fmt == "npy":
        from dask_hashcodes.data.npyfile import read_npy_header

        shape, dtype = read_npy_header(path)
        if len(shape) not in (1, 2) or dtype.kind not in "iu":
            raise InputError(
                f"labels file {path} holds {dtype} of {shape_words(shape)}; give (n,) integer class ids "
                f"or an (n, L) integer multi-hot matrix"
            )
        return np.load(path, allow_pickle=False)
    raise InputError(f"labels file {path} is {fmt}; give IDX labels (*-idx1-ubyte), .ivecs or .npy")


def _labels_for(reader: VectorReader, labels, label_column: str | None) -> np.ndarray | None:
    if labels is not None and label_column is not None:
        raise InputError("give either `labels=FILE` or `label_column=NAME`, not both")
    if label_column is None:
        return None if labels is None else read_labels_file(labels)

    if not isinstance(reader, ParquetReader):
        raise InputError(f"`label_column` only applies to parquet input; for {reader.source} pass `labels=FILE`")
    return reader.read_labels(label_column)


@contextlib.contextmanager
def local_file(where):
    """A local path for an input file: itself, or for a URL (s3://, gs://...) a copy in a
    temporary directory under the same name (the readers need random access and the name
    tells the format), removed afterwards."""

    if where is None:
        yield None, None
        return
    loc = resolve(where)
    if loc.is_local:
        yield loc.url, None
        return
    if not loc.is_file():
        raise InputError(f"no such file: {loc}; check the URL and `storage_options`")
    with tempfile.TemporaryDirectory(prefix="dhash-ingest-") as tmp:
        local = os.path.join(tmp, loc.name)
        loc.fs.get_file(loc.fs_path, local)
        yield local, loc.url


def ingest(
    source,
    out,
    *,
    format: str = "auto",
    column: str | None = None,
    labels=None,
    label_column: str | None = None,
    chunk_rows: int | None = None,
    overwrite: bool = False,
    progress: bool = False,
) -> Dataset:
    """Copy the vectors in file ``source`` (fvecs/bvecs/ivecs, IDX, npy, parquet; and optional
    ``labels``) into a new dataset at ``out``, or materialise the built-in ``fashion-mnist`` or ``debian-sift``
    there. Each may be a local path or a URL. ``progress``: a bar of rows on stderr.

    The file is streamed about 8 MiB at a time, so memory stays bounded whatever its
    size. On any InputError nothing is left at ``out`` (write_dataset is atomic).
    """

    if source == "fashion-mnist":
        return write_fashion_mnist(out, chunk_rows=chunk_rows, overwrite=overwrite)
    if source == "debian-sift":
        return write_debian_sift(out, chunk_rows=chunk_rows, overwrite=overwrite, progress=progress)
    if source in SOURCES:
        raise InputError(f"{source} is generated, not ingested; generate it with synth (kind sift) into {out}")
    with local_file(source) as (vectors, url), local_file(labels) as (label_file, _):
        reader = open_reader(vectors, format=format, column=column)
        if url is not None:  # the dataset names where the data came from, not the temporary copy
            reader.source = reader.source.replace(str(Path(vectors).resolve()), url)
        with rows_bar(reader.n, "ingest", show=progress) as bar:
            return _ingest(reader, out, label_file, label_column, chunk_rows, overwrite, bar)


def _ingest(reader, out, labels, label_column, chunk_rows, overwrite, progress) -> Dataset:
    label_array = _labels_for(reader, labels, label_column)
    block_rows = block_rows_for(reader.d, reader.dtype.itemsize)
    options = {"labels": label_array, "chunk_rows": chunk_rows, "overwrite": overwrite, "progress": progress}
    return write_dataset_like(reader, out, reader.iter_blocks(block_rows), **options)
