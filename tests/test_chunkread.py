"""The direct chunk reader equals zarr's own reads (full, edge and never-written chunks),
and declines layouts it does not handle, which then go through zarr."""
import numpy as np
import pytest
import zarr

from pipeline.storage.chunkread import chunk_reader, dask_from_chunks


@pytest.mark.parametrize("dtype,compressors", [(np.uint8, "zstd"), (np.float32, "zstd"), (np.int16, None)])
def test_direct_reads_equal_zarr(tmp_path, dtype, compressors):
    comp = zarr.codecs.ZstdCodec(level=1) if compressors else None
    arr = zarr.create_array(str(tmp_path / "a"), shape=(1000, 7), chunks=(300, 7), dtype=dtype,
                            compressors=comp, fill_value=3, zarr_format=3)
    data = (np.random.default_rng(0).standard_normal((1000, 7)) * 50).astype(dtype)
    arr[:600] = data[:600]                     # chunks 2 and 3 are never written
    arr[900:] = data[900:]                     # the edge chunk (100 rows) is
    reader = chunk_reader(zarr.open_array(str(tmp_path / "a"), mode="r"))
    assert reader is not None
    for c in range(4):
        np.testing.assert_array_equal(reader(c), arr[c * 300:(c + 1) * 300])
    lazy = dask_from_chunks(arr, "features-test")
    assert lazy.chunks == ((300, 300, 300, 100), (7,))
    np.testing.assert_array_equal(lazy.compute(scheduler="sync"), arr[:])


def test_other_layouts_are_left_to_zarr(tmp_path):
    blosc = zarr.create_array(str(tmp_path / "b"), shape=(10, 4), chunks=(5, 4), dtype="f4",
                              compressors=zarr.codecs.BloscCodec(), zarr_format=3)
    split_cols = zarr.create_array(str(tmp_path / "c"), shape=(10, 4), chunks=(5, 2), dtype="f4", zarr_format=3)
    assert chunk_reader(blosc) is None and chunk_reader(split_cols) is None
