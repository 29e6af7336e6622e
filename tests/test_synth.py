"""sift-synth: slicing-, chunking- and cluster-independent output, SIFT-like statistics."""

from __future__ import annotations

import numpy as np
import pytest

from dask_hashcodes.data.synth import GEN_BLOCK_ROWS, sift_rows, write_sift_synth
from dask_hashcodes.errors import InputError

N_WRITE = 150_000  # spans three generation blocks, and chunk edges that are not block edges


def features(ds) -> np.ndarray:
    return ds.features[...]


# ---- the kernel ----------------------------------------------------------------------------


def test_rows_do_not_depend_on_slicing():
    whole = sift_rows(0, 0, 200_000)
    assert whole.shape == (200_000, 128) and whole.dtype == np.uint8
    for piece in (70_001, GEN_BLOCK_ROWS):
        parts = [sift_rows(0, start, min(200_000, start + piece)) for start in range(0, 200_000, piece)]
        np.testing.assert_array_equal(np.concatenate(parts), whole)
    # a range inside one block and one straddling a block edge
    np.testing.assert_array_equal(sift_rows(0, 123, 456), whole[123:456])
    np.testing.assert_array_equal(
        sift_rows(0, GEN_BLOCK_ROWS - 5, GEN_BLOCK_ROWS + 5), whole[GEN_BLOCK_ROWS - 5 : GEN_BLOCK_ROWS + 5]
    )
    assert sift_rows(0, 10, 10).shape == (0, 128)


def test_seeds_give_different_data():
    a, b = sift_rows(0, 0, 1000), sift_rows(1, 0, 1000)
    assert (a != b).mean() > 0.5
    np.testing.assert_array_equal(sift_rows(1, 0, 1000), b)


def test_statistics_are_sift_like():
    x = sift_rows(3, 0, 100_000)
    assert x.dtype == np.uint8 and x.shape[1] == 128
    xf = x.astype(np.float64)
    mean_norm = np.linalg.norm(xf, axis=1).mean()
    assert 400 <= mean_norm <= 560
    assert (x == 0).mean() > 0.1  # sparse-ish
    assert 15 <= xf.mean() <= 35
    assert 100 <= x.max() <= 255

    centred = xf - xf.mean(axis=0)
    excess_kurtosis = (centred**4).mean(axis=0) / centred.var(axis=0) ** 2 - 3
    assert excess_kurtosis.mean() > 1  # heavy tailed per dimension

    # clustered: nearest neighbours are much closer than random pairs
    sample = xf[:20_000]
    queries, rest = sample[:2000], sample[2000:]
    sq = (queries**2).sum(1)[:, None] + (rest**2).sum(1)[None, :] - 2 * queries @ rest.T
    nearest = np.sqrt(np.maximum(sq.min(axis=1), 0)).mean()
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, len(sample), (2, 5000))
    random_pair = np.linalg.norm(sample[a] - sample[b], axis=1).mean()
    assert nearest / random_pair < 0.7


# ---- writing a dataset -----------------------------------------------------------------------


def test_write_does_not_depend_on_chunking(tmp_path):
    a = write_sift_synth(tmp_path / "a.zarr", N_WRITE, seed=5, chunk_rows=50_000)
    b = write_sift_synth(tmp_path / "b.zarr", N_WRITE, seed=5, chunk_rows=GEN_BLOCK_ROWS)
    assert (a.n, a.d, a.dtype, a.chunk_rows, b.chunk_rows) == (N_WRITE, 128, np.uint8, 50_000, GEN_BLOCK_ROWS)
    np.testing.assert_array_equal(features(a), features(b))
    np.testing.assert_array_equal(features(a), sift_rows(5, 0, N_WRITE))
    np.testing.assert_array_equal(a.ids, np.arange(N_WRITE))
    assert a.source == "sift-synth:seed=5"
    assert a.attrs["generator"]["seed"] == 5 and a.attrs["generator"]["gen_block_rows"] == GEN_BLOCK_ROWS


def test_progress_runner_computes_the_tasks(tmp_path):
    import dask

    seen = []

    def runner(tasks):
        seen.append(len(tasks))
        return dask.compute(tasks, scheduler="sync")[0]

    ds = write_sift_synth(tmp_path / "p.zarr", 1000, seed=2, chunk_rows=300, progress=runner)
    assert seen == [4]
    np.testing.assert_array_equal(features(ds), sift_rows(2, 0, 1000))


@pytest.mark.slow
def test_write_does_not_depend_on_worker_count(tmp_path, clusters):
    from distributed import Client

    written = {}
    for workers in (2, 1):
        with Client(clusters[workers]):
            ds = write_sift_synth(tmp_path / f"w{workers}.zarr", N_WRITE, seed=7, chunk_rows=50_000)
            written[workers] = features(ds)
    np.testing.assert_array_equal(written[2], written[1])
    np.testing.assert_array_equal(written[1], sift_rows(7, 0, N_WRITE))


@pytest.mark.parametrize("n", [0, -3])
def test_empty_is_an_input_error_and_leaves_nothing(tmp_path, n):
    with pytest.raises(InputError, match="n >= 1"):
        write_sift_synth(tmp_path / "empty.zarr", n)
    assert list(tmp_path.iterdir()) == []


def test_existing_output_needs_overwrite(tmp_path):
    path = tmp_path / "d.zarr"
    write_sift_synth(path, 100, seed=0)
    with pytest.raises(InputError, match="already exists"):
        write_sift_synth(path, 100, seed=1)
    ds = write_sift_synth(path, 100, seed=1, overwrite=True)
    np.testing.assert_array_equal(features(ds), sift_rows(1, 0, 100))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.zarr"]


def test_centre_labels_belong_to_the_rows_and_do_not_depend_on_slicing():
    from dask_hashcodes.data.synth import sift_centres

    n = GEN_BLOCK_ROWS + 3000  # across a generation block's end
    labels = sift_centres(3, 0, n)
    pieces = np.concatenate(
        [sift_centres(3, 0, 1234), sift_centres(3, 1234, GEN_BLOCK_ROWS + 5), sift_centres(3, GEN_BLOCK_ROWS + 5, n)]
    )
    np.testing.assert_array_equal(pieces, labels)
    X = sift_rows(3, 0, 20000).astype(np.float64)
    lab = labels[:20000]
    order = np.argsort(lab, kind="stable")
    same = order[:-1][lab[order[:-1]] == lab[order[1:]]], order[1:][lab[order[:-1]] == lab[order[1:]]]
    assert len(same[0]) > 100
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, 20000, 2000), rng.integers(0, 20000, 2000)
    same_distance = np.linalg.norm(X[same[0]] - X[same[1]], axis=1).mean()
    random_distance = np.linalg.norm(X[a] - X[b], axis=1).mean()
    assert same_distance < 0.6 * random_distance, (same_distance, random_distance)
