"""Streaming readers (fvecs/bvecs/ivecs, IDX, npy, parquet) and ingest."""

from __future__ import annotations

import gzip
import tracemalloc
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dask_hashcodes.data.formats import open_reader
from dask_hashcodes.data.idx import read_idx_labels, write_idx
from dask_hashcodes.data.ingest import ingest as ingest_file
from dask_hashcodes.data.readers import READ_BLOCK_BYTES, block_rows_for
from dask_hashcodes.data.texmex import write_vecs
from dask_hashcodes.errors import InputError
from dask_hashcodes.storage.datasets import open_dataset

FASHION = Path("/usr/share/datasets/fashion-mnist")


# ---- helpers ---------------------------------------------------------------------------


def make_array(dtype, n=50, d=6, seed=0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "f":
        return rng.standard_normal((n, d)).astype(dtype)
    return rng.integers(0, 200, size=(n, d)).astype(dtype)


def write_parquet(path, X, *, fixed=True, labels=None, extra_vector_column=False):
    values = pa.array(X.ravel())
    if fixed:
        vectors = pa.FixedSizeListArray.from_arrays(values, X.shape[1])
    else:
        offsets = pa.array(np.arange(0, X.size + 1, X.shape[1], dtype=np.int32))
        vectors = pa.ListArray.from_arrays(offsets, values)
    columns = {"id": pa.array(np.arange(len(X))), "emb": vectors}
    if extra_vector_column:
        columns["emb2"] = vectors
    if labels is not None:
        columns["label"] = pa.array(labels)
    # small row groups so that reading crosses row-group boundaries
    pq.write_table(pa.table(columns), path, row_group_size=16)
    return path


# format name -> (file name, dtype, writer(path, X))
WRITERS = {
    "fvecs": ("x.fvecs", np.float32, write_vecs),
    "bvecs": ("x.bvecs", np.uint8, write_vecs),
    "ivecs": ("x.ivecs", np.int32, write_vecs),
    "npy": ("x.npy", np.float64, np.save),
    "idx": ("x-idx3-ubyte", np.uint8, write_idx),
    "idx.gz": ("x-idx3-ubyte.gz", np.uint8, write_idx),
    "idx-float": ("x.idx", np.float32, write_idx),
    "parquet": ("x.parquet", np.float32, write_parquet),
    "parquet-list": ("x.pq", np.int16, lambda p, X: write_parquet(p, X, fixed=False)),
}


def write_format(tmp_path, fmt, X=None, **kw):
    name, dtype, writer = WRITERS[fmt]
    if X is None:
        X = make_array(dtype, **kw)
    path = tmp_path / name
    writer(path, X)
    return path, X


def assert_no_output(tmp_path: Path, out: Path):
    assert not out.exists()
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.startswith(f".{out.name}.")]
    assert leftovers == []


def ingest_fails(tmp_path, path, match, **kw):
    out = tmp_path / "out.zarr"
    with pytest.raises(InputError, match=match):
        ingest_file(path, out, **kw)
    assert_no_output(tmp_path, out)


# ---- roundtrips ------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", list(WRITERS))
def test_roundtrip(tmp_path, fmt):
    path, X = write_format(tmp_path, fmt)
    labels = np.arange(len(X)) % 3
    np.save(tmp_path / "labels.npy", labels)
    ds = ingest_file(path, tmp_path / "out.zarr", labels=tmp_path / "labels.npy", chunk_rows=16)
    ds = open_dataset(tmp_path / "out.zarr")
    assert (ds.n, ds.d) == X.shape
    assert ds.dtype == X.dtype
    np.testing.assert_array_equal(ds.features[...], X)
    np.testing.assert_array_equal(ds.labels, labels)
    assert ds.source.startswith(fmt.split("-")[0].split(".")[0] + ":")


@pytest.mark.parametrize("fmt", list(WRITERS))
def test_block_size_does_not_change_data(tmp_path, fmt):
    path, X = write_format(tmp_path, fmt, n=103)
    reader = open_reader(path)
    assert (reader.n, reader.d, reader.dtype) == (103, X.shape[1], X.dtype)
    for block_rows in (1, 7, 16, 50, 1000):
        blocks = list(reader.iter_blocks(block_rows))
        assert all(len(b) <= block_rows and b.shape[1] == X.shape[1] for b in blocks)
        assert all(b.dtype == X.dtype for b in blocks)
        np.testing.assert_array_equal(np.concatenate(blocks), X)


def test_write_vecs_layout(tmp_path):
    X = make_array(np.uint8, n=3, d=4)
    write_vecs(tmp_path / "x.bvecs", X, block_rows=2)
    raw = (tmp_path / "x.bvecs").read_bytes()
    assert len(raw) == 3 * (4 + 4)
    assert np.frombuffer(raw[:4], "<i4")[0] == 4
    assert raw[4:8] == X[0].tobytes()


def test_write_vecs_refuses_values_that_do_not_fit(tmp_path):
    with pytest.raises(InputError, match="do not fit"):
        write_vecs(tmp_path / "x.bvecs", np.array([[1, 300]]))


def test_ivecs_and_idx_labels(tmp_path):
    path, X = write_format(tmp_path, "fvecs", n=20)
    labels = (np.arange(20) % 4).astype(np.int32)
    write_vecs(tmp_path / "gt.ivecs", np.stack([labels, labels + 10], axis=1))
    ds = ingest_file(path, tmp_path / "a.zarr", labels=tmp_path / "gt.ivecs")
    np.testing.assert_array_equal(ds.labels, labels)
    write_idx(tmp_path / "y-idx1-ubyte.gz", labels.astype(np.uint8))
    ds = ingest_file(path, tmp_path / "b.zarr", labels=tmp_path / "y-idx1-ubyte.gz")
    np.testing.assert_array_equal(ds.labels, labels)


def test_multi_hot_npy_labels(tmp_path):
    path, X = write_format(tmp_path, "fvecs", n=10)
    multi = np.random.default_rng(1).integers(0, 2, size=(10, 5)).astype(np.int8)
    np.save(tmp_path / "y.npy", multi)
    ds = ingest_file(path, tmp_path / "out.zarr", labels=tmp_path / "y.npy")
    np.testing.assert_array_equal(ds.labels, multi)


def test_parquet_label_column(tmp_path):
    X = make_array(np.float32, n=40)
    labels = np.arange(40) % 5
    write_parquet(tmp_path / "x.parquet", X, labels=labels)
    ds = ingest_file(tmp_path / "x.parquet", tmp_path / "out.zarr", label_column="label")
    np.testing.assert_array_equal(ds.features[...], X)
    np.testing.assert_array_equal(ds.labels, labels)


def test_parquet_explicit_column(tmp_path):
    X = make_array(np.float32, n=20)
    write_parquet(tmp_path / "x.parquet", X, extra_vector_column=True)
    reader = open_reader(tmp_path / "x.parquet", column="emb2")
    np.testing.assert_array_equal(np.concatenate(list(reader.iter_blocks(8))), X)
    assert reader.source.endswith("#emb2")


# ---- bounded memory --------------------------------------------------------------------


def traced_peak(fn) -> int:
    """Peak bytes allocated while running fn (numpy reports its buffers to tracemalloc)."""
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def big_file(tmp_path, name, mib):
    """A float32 file of ``mib`` MiB, written without ever holding the array in memory."""
    d = 128
    X = np.broadcast_to(np.arange(d, dtype=np.float32), (mib * 2**20 // (4 * d), d))
    path = tmp_path / name
    if name.endswith("vecs"):
        write_vecs(path, X)
    elif name.endswith(".npy"):
        out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=X.shape)
        out[:] = X
        out.flush()
        del out
    else:
        write_idx(path, X)
    return path


@pytest.mark.parametrize("name", ["x.fvecs", "x.npy", "x-idx3-ubyte", "x-idx3-ubyte.gz"])
def test_reading_holds_a_few_blocks_not_the_file(tmp_path, name):
    path = big_file(tmp_path, name, mib=48)
    reader = open_reader(path)
    block_rows = block_rows_for(reader.d, reader.dtype.itemsize)

    def drain():
        for _ in reader.iter_blocks(block_rows):
            pass

    assert traced_peak(drain) < 4.5 * READ_BLOCK_BYTES  # the file is 6 blocks


def test_ingest_memory_does_not_grow_with_the_file(tmp_path):
    path = big_file(tmp_path, "x.fvecs", mib=128)
    peak = traced_peak(lambda: ingest_file(path, tmp_path / "out.zarr"))
    assert peak < 80 * 2**20  # one read block + one 16 MiB chunk being assembled and compressed


# ---- IDX -------------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", ["", ".gz"])
def test_idx_images_and_labels(tmp_path, suffix):
    images = make_array(np.uint8, n=12, d=28 * 28).reshape(12, 28, 28)
    labels = (np.arange(12) % 10).astype(np.uint8)
    write_idx(tmp_path / f"train-images-idx3-ubyte{suffix}", images)
    write_idx(tmp_path / f"train-labels-idx1-ubyte{suffix}", labels)
    if suffix:  # really gzipped
        assert gzip.decompress((tmp_path / f"train-labels-idx1-ubyte{suffix}").read_bytes())[:4] == b"\x00\x00\x08\x01"
    reader = open_reader(tmp_path / f"train-images-idx3-ubyte{suffix}")
    assert (reader.n, reader.d, reader.dtype) == (12, 784, np.uint8)
    np.testing.assert_array_equal(read_idx_labels(tmp_path / f"train-labels-idx1-ubyte{suffix}"), labels)
    ds = ingest_file(
        tmp_path / f"train-images-idx3-ubyte{suffix}",
        tmp_path / "out.zarr",
        labels=tmp_path / f"train-labels-idx1-ubyte{suffix}",
    )
    np.testing.assert_array_equal(ds.features[...], images.reshape(12, 784))
    np.testing.assert_array_equal(ds.labels, labels)


@pytest.mark.parametrize("suffix", ["", ".gz"])
def test_idx_truncated(tmp_path, suffix):
    images = make_array(np.uint8, n=30, d=784).reshape(30, 28, 28)
    path = tmp_path / f"x-idx3-ubyte{suffix}"
    if suffix:
        # a complete gzip stream whose content stops short of what the header announces
        full = write_idx(tmp_path / "full-idx3-ubyte", images).read_bytes()
        path.write_bytes(gzip.compress(full[:-100]))
    else:
        write_idx(path, images)
        path.write_bytes(path.read_bytes()[:-100])
    ingest_fails(tmp_path, path, "truncated")


def test_idx_cut_gzip_stream(tmp_path):
    images = make_array(np.uint8, n=30, d=784).reshape(30, 28, 28)
    path = write_idx(tmp_path / "x-idx3-ubyte.gz", images)
    path.write_bytes(path.read_bytes()[:-20])  # chop the gzip trailer and some data
    ingest_fails(tmp_path, path, "truncated")


def test_idx_labels_file_is_not_images(tmp_path):
    write_idx(tmp_path / "x-idx3-ubyte", make_array(np.uint8, n=4, d=4).reshape(4, 2, 2))
    with pytest.raises(InputError, match="not labels"):
        read_idx_labels(tmp_path / "x-idx3-ubyte")


def test_idx_bad_magic(tmp_path):
    (tmp_path / "x.idx").write_bytes(b"\x01\x02\x03\x04" + bytes(20))
    ingest_fails(tmp_path, tmp_path / "x.idx", "not an IDX file")


@pytest.mark.skipif(not (FASHION / "train-images-idx3-ubyte.gz").exists(), reason="Fashion-MNIST not installed")
def test_fashion_mnist_header_and_first_block():
    reader = open_reader(FASHION / "train-images-idx3-ubyte.gz")
    assert (reader.n, reader.d, reader.dtype) == (60000, 784, np.uint8)
    first = next(reader.iter_blocks(1000))
    assert first.shape == (1000, 784) and first.dtype == np.uint8
    assert first.max() > 0
    labels = read_idx_labels(FASHION / "train-labels-idx1-ubyte.gz")
    assert labels.shape == (60000,) and set(np.unique(labels)) == set(range(10))


@pytest.mark.slow  # the real data set
@pytest.mark.skipif(not (FASHION / "train-images-idx3-ubyte.gz").exists(), reason="Fashion-MNIST not installed")
def test_the_built_in_sources_are_built_once_in_the_data_directory_then_reopened(tmp_path, monkeypatch):
    """``load_dataset("fashion-mnist")`` (what ``dhash demo`` and every ``--dataset
    fashion-mnist`` call) writes the whole set into the data directory once, as
    ``load_dataset("sift-synth", n=...)`` writes its generated set; later calls open that copy
    and rewrite nothing."""
    from dask_hashcodes.data.sources import default_path
    from dask_hashcodes.workflows import load_dataset

    monkeypatch.setenv("DHASH_DATA_DIR", str(tmp_path))
    expected = {
        "fashion-mnist": ({}, (70000, 784, np.uint8, "fashion-mnist")),
        "sift-synth": ({"n": 3000, "seed": 1}, (3000, 128, np.uint8, "sift-synth:seed=1")),
    }
    for name, (args, shape) in expected.items():
        built = Path(load_dataset(name, **args).path)
        assert built == default_path(name, **args) and built.parent == tmp_path
        commit = built / ".dhash-commit.json"
        written = commit.stat().st_mtime_ns
        again = load_dataset(name, **args)
        assert Path(again.path) == built and commit.stat().st_mtime_ns == written, name
        assert (again.n, again.d, again.dtype, again.source) == shape
    labels = np.asarray(load_dataset("fashion-mnist").labels)
    assert np.array_equal(labels[:60000], read_idx_labels(FASHION / "train-labels-idx1-ubyte.gz"))


# ---- errors ----------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["fvecs", "bvecs"])
def test_truncated_vecs(tmp_path, fmt):
    path, X = write_format(tmp_path, fmt, n=10, d=8)
    path.write_bytes(path.read_bytes()[:-3])
    ingest_fails(tmp_path, path, r"is truncated: \d+ bytes is not a whole number of 8-dim records")


def test_inconsistent_record_header(tmp_path):
    path, X = write_format(tmp_path, "fvecs", n=10, d=8)
    raw = bytearray(path.read_bytes())
    record_bytes = 4 + 8 * 4
    raw[7 * record_bytes : 7 * record_bytes + 4] = np.int32(9).tobytes()
    path.write_bytes(bytes(raw))
    ingest_fails(tmp_path, path, "record 7 has dimension header 9")
    reader = open_reader(path)
    with pytest.raises(InputError, match="record 7"):
        list(reader.iter_blocks(3))  # found in a later block too


def test_implausible_dimension_header(tmp_path):
    (tmp_path / "x.fvecs").write_bytes(np.int32(-5).tobytes() + bytes(36))
    ingest_fails(tmp_path, tmp_path / "x.fvecs", "not a plausible vector length")


@pytest.mark.parametrize("fmt", ["fvecs", "npy"])
def test_nan_row(tmp_path, fmt):
    X = make_array(np.float32, n=40)
    X[23, 2] = np.nan
    path, _ = write_format(tmp_path, fmt, X=X)
    ingest_fails(tmp_path, path, "row 23 contains NaN")


@pytest.mark.parametrize(
    "array, match",
    [
        (np.array([[1, "a"]], dtype=object), "Python objects"),
        (np.array([["a", "b"]]), "not numeric"),
        (np.arange(6.0), "1-D array"),
        (np.zeros((2, 3, 4)), "3-D array"),
    ],
)
def test_bad_npy(tmp_path, array, match):
    np.save(tmp_path / "x.npy", array, allow_pickle=True)
    ingest_fails(tmp_path, tmp_path / "x.npy", match)


@pytest.mark.parametrize("name", ["x.fvecs", "x.bvecs", "x.npy", "x.parquet", "x-idx3-ubyte.gz"])
def test_empty_file(tmp_path, name):
    (tmp_path / name).write_bytes(b"")
    ingest_fails(tmp_path, tmp_path / name, "is empty")


def test_unknown_extension(tmp_path):
    (tmp_path / "x.csv").write_text("1,2\n")
    ingest_fails(tmp_path, tmp_path / "x.csv", r"accepted: .*`format`")


def test_unknown_format_name(tmp_path):
    path, _ = write_format(tmp_path, "fvecs")
    ingest_fails(tmp_path, path, "unknown `format`", format="hdf5")


def test_missing_file(tmp_path):
    ingest_fails(tmp_path, tmp_path / "nope.fvecs", "no such file: ")


def test_ambiguous_parquet_column(tmp_path):
    write_parquet(tmp_path / "x.parquet", make_array(np.float32), extra_vector_column=True)
    ingest_fails(tmp_path, tmp_path / "x.parquet", r"emb, emb2.*`column`")


def test_parquet_column_not_vectors(tmp_path):
    write_parquet(tmp_path / "x.parquet", make_array(np.float32))
    ingest_fails(tmp_path, tmp_path / "x.parquet", "not a list of numbers", column="id")
    ingest_fails(tmp_path, tmp_path / "x.parquet", "has no column 'vec'", column="vec")


def test_parquet_ragged_lists(tmp_path):
    rows = [[1.0, 2.0, 3.0]] * 20 + [[1.0, 2.0]] + [[4.0, 5.0, 6.0]] * 5
    pq.write_table(pa.table({"emb": pa.array(rows, pa.list_(pa.float32()))}), tmp_path / "x.parquet", row_group_size=8)
    ingest_fails(tmp_path, tmp_path / "x.parquet", "row 20 holds 2 values")


def test_parquet_missing_values(tmp_path):
    rows = [[1.0, 2.0]] * 5 + [[1.0, None]] + [[1.0, 2.0]]
    pq.write_table(pa.table({"emb": pa.array(rows, pa.list_(pa.float64()))}), tmp_path / "x.parquet")
    ingest_fails(tmp_path, tmp_path / "x.parquet", "row 5 has missing values")


def test_labels_length_mismatch(tmp_path):
    path, X = write_format(tmp_path, "fvecs", n=10)
    np.save(tmp_path / "y.npy", np.arange(9))
    ingest_fails(tmp_path, path, "9 labels for 10 vectors", labels=tmp_path / "y.npy")


def test_label_column_needs_parquet(tmp_path):
    path, X = write_format(tmp_path, "fvecs", n=10)
    ingest_fails(tmp_path, path, "`label_column` only applies to parquet", label_column="label")


def test_existing_output_is_kept(tmp_path):
    path, X = write_format(tmp_path, "fvecs", n=10)
    ingest_file(path, tmp_path / "out.zarr")
    with pytest.raises(InputError, match="already exists"):
        ingest_file(path, tmp_path / "out.zarr")
    ds = ingest_file(path, tmp_path / "out.zarr", overwrite=True)
    np.testing.assert_array_equal(ds.features[...], X)
