"""The verified chunk reader: equals zarr's own reads for every chunk (full, edge, all-zero),
and refuses a missing chunk, a flipped byte, a truncated chunk and damaged metadata with a
one-line error naming the array and the chunk."""

import numpy as np
import pytest
import zarr

from dask_hashcodes.errors import InputError
from dask_hashcodes.storage.chunkread import array_manifest, create_array, dask_from_reader, open_verified
from dask_hashcodes.storage.location import resolve


def _array(tmp_path, dtype, shape=(1000, 7), chunk_rows=300):
    group = zarr.open_group(str(tmp_path / "g"), mode="w", zarr_format=3)
    arr = create_array(group, "a", shape, chunk_rows, dtype)
    data = (np.random.default_rng(0).standard_normal(shape) * 50).astype(dtype)
    data[300:600] = 0  # an all-zero chunk is written too (never "missing")
    arr[...] = data
    loc = resolve(tmp_path / "g" / "a")
    return loc, data, open_verified(loc, array_manifest(loc), "test array", "rebuild it")


@pytest.mark.parametrize("dtype", [np.uint8, np.float32, np.int64, np.float64])
def test_verified_reads_equal_zarr(tmp_path, dtype):
    loc, data, reader = _array(tmp_path, dtype)
    assert reader.n_chunks == 4
    for c in range(4):
        np.testing.assert_array_equal(reader(c), data[c * 300 : (c + 1) * 300])
    lazy = dask_from_reader(reader, "features-test")
    assert lazy.chunks == ((300, 300, 300, 100), (7,))
    np.testing.assert_array_equal(lazy.compute(scheduler="sync"), data)
    np.testing.assert_array_equal(reader.take([999, 0, 450, 0]), data[[999, 0, 450, 0]])
    rows = np.random.default_rng(1).integers(0, 1000, 200)  # every chunk, in any order, with repeats
    np.testing.assert_array_equal(reader.take(rows, threads=3), data[rows])
    np.testing.assert_array_equal(reader[10:20], data[10:20])


def test_one_dimensional_arrays(tmp_path):
    loc, data, reader = _array(tmp_path, np.int64, shape=(10,), chunk_rows=4)
    np.testing.assert_array_equal(reader.read_all(), data)


@pytest.mark.parametrize(
    "damage,problem",
    [
        ("remove", "chunk 1 is missing"),
        ("flip", "chunk 1 is damaged"),
        ("truncate", "chunk 1 is damaged"),
        ("swap", "chunk 1 is damaged"),
    ],
)
def test_damaged_chunks_are_refused(tmp_path, damage, problem):
    loc, _, reader = _array(tmp_path, np.float32)
    chunk = tmp_path / "g" / "a" / "c" / "1" / "0"
    raw = chunk.read_bytes()
    if damage == "remove":
        chunk.unlink()
    elif damage == "flip":
        chunk.write_bytes(raw[: len(raw) // 2] + bytes([raw[len(raw) // 2] ^ 1]) + raw[len(raw) // 2 + 1 :])
    elif damage == "truncate":
        chunk.write_bytes(raw[:-7])
    else:  # a valid frame of another chunk in its place
        chunk.write_bytes((tmp_path / "g" / "a" / "c" / "0" / "0").read_bytes())
    with pytest.raises(InputError, match=problem):
        reader.take([5, 305, 905], threads=3)  # a damaged chunk read by a thread is the same error
    with pytest.raises(InputError, match=problem) as info:
        reader(1)
    assert "test array" in str(info.value) and "rebuild it" in str(info.value) and "\n" not in str(info.value)
    np.testing.assert_array_equal(reader(0).shape, (300, 7))  # the others still read


def test_damaged_metadata_and_foreign_layouts_are_refused(tmp_path):
    loc, _, _ = _array(tmp_path, np.float32)
    manifest = array_manifest(loc)
    meta = tmp_path / "g" / "a" / "zarr.json"
    meta.write_text(meta.read_text()[:40])
    with pytest.raises(InputError, match="damaged metadata"):
        open_verified(loc, manifest, "test array", "rebuild it")
    blosc = zarr.create_array(
        str(tmp_path / "b"),
        shape=(10, 4),
        chunks=(5, 4),
        dtype="f4",
        compressors=zarr.codecs.BloscCodec(),
        zarr_format=3,
    )
    blosc[...] = 1
    with pytest.raises(InputError, match="not in dhash's verified layout"):
        open_verified(resolve(tmp_path / "b"), {"shape": [10, 4]}, "foreign", "ingest it")


def test_all_zero_chunks_of_a_dataset_are_written_and_read(tmp_path):
    """zarr skips all-zero chunks by default (and reads them back as its fill value); every
    dhash writer stores them, so a missing chunk always means damage."""
    from dask_hashcodes.storage.datasets import write_dataset

    X = np.ones((900, 5), np.uint8)
    X[300:600] = 0
    ds = write_dataset(tmp_path / "z.zarr", [X], n=900, d=5, dtype=np.uint8, source="test", chunk_rows=300)
    assert (tmp_path / "z.zarr" / "features" / "c" / "1" / "0").is_file()
    np.testing.assert_array_equal(ds.features_dask().compute(scheduler="sync"), X)


@pytest.mark.parametrize("rows", [3000, 1000])  # the same chunks with other content; fewer chunks
def test_a_dataset_replaced_while_it_is_read_says_so(cluster, client, tmp_path, rows):
    """A dataset opened by one job and replaced by another (``dhash synth --overwrite`` into the
    same path) before the first reads its chunks: the reader sees its commit record changed
    and says the dataset was replaced while being read, not that it is damaged. Read again,
    the new dataset is read whole."""
    from dask_hashcodes.cli.main import main
    from dask_hashcodes.storage.datasets import open_dataset

    path = tmp_path / "ds.zarr"
    synth = ["synth", "sift", "--chunk-rows", 1000, "--out", path, "--scheduler", cluster.scheduler_address]
    assert main([str(a) for a in [*synth, "--n", 3000, "--quiet"]]) == 0
    opened = open_dataset(path)
    assert main([str(a) for a in [*synth, "--n", rows, "--seed", 1, "--overwrite", "--quiet"]]) == 0
    with pytest.raises(InputError) as info:
        opened.features(2)  # chunk 2: another checksum, or no such chunk any more
    message = str(info.value)
    assert (
        message == f"the dataset at {path} was replaced while it was being read (its commit record changed "
        "since it was opened); run again"
    ), message
    with pytest.raises(InputError, match="was replaced while it was being read"):
        client.compute(opened.features_dask().sum()).result()  # on the cluster's workers alike
    again = open_dataset(path)  # the remedy: a run again opens the new one
    assert again.n == rows and again.features_dask().shape == (rows, 128)
    assert client.compute(again.features_dask().sum()).result() > 0
