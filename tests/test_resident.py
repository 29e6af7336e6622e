"""Rows kept on the workers for an iterative fit (distributed.resident.kept_on_workers): k-means
reads each stored chunk once, not once per step, gives the same centres as streaming, and
streams (saying so) when the rows would not fit the memory budget."""

from __future__ import annotations

import logging

import dask
import numpy as np
import pytest

from dask_hashcodes import workflows
from dask_hashcodes.distributed.kmeans import kmeans


def _count_chunk_reads():
    """Installed in a worker: count every stored chunk it reads (ChunkReader._raw)."""
    from dask_hashcodes.storage import chunkread

    if not hasattr(chunkread.ChunkReader, "_uncounted_raw"):
        chunkread.ChunkReader._uncounted_raw = chunkread.ChunkReader._raw
        chunkread.reads = 0

        def counted(self, i, path):
            chunkread.reads += 1
            return self._uncounted_raw(i, path)

        chunkread.ChunkReader._raw = counted
    chunkread.reads = 0


def _chunk_reads():
    from dask_hashcodes.storage import chunkread

    return chunkread.reads


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    with dask.config.set(scheduler="synchronous"):
        ds = workflows.synth("sift", tmp_path_factory.mktemp("kmeans") / "s.zarr", n=6000, chunk_rows=1000)
    return ds


def test_kmeans_reads_each_chunk_once_and_finds_the_streamed_centres(stored, client, caplog):
    features = stored.features_dask()
    client.run(_count_chunk_reads)
    kept, kept_inertia = kmeans(features, 8, 6, np.random.default_rng(0), "test")
    reads = sum(client.run(_chunk_reads).values())
    assert reads == features.numblocks[0]  # 6 chunks, read once for 6 steps and the start
    client.run(_count_chunk_reads)
    # the handler on the module's own logger: a command run earlier in the session may have
    # stopped dhash's records from reaching the root logger, where caplog listens
    logger = logging.getLogger("dask_hashcodes.distributed.resident")
    logger.addHandler(caplog.handler)
    try:
        with dask.config.set({"dhash.resident-memory-fraction": 0.0}), caplog.at_level(logging.INFO, logger.name):
            streamed, streamed_inertia = kmeans(features, 8, 6, np.random.default_rng(0), "test")
    finally:
        logger.removeHandler(caplog.handler)
    assert sum(client.run(_chunk_reads).values()) >= 6 * features.numblocks[0]  # every step reads every chunk
    assert "every pass reads them from storage" in caplog.text
    np.testing.assert_array_equal(kept, streamed)
    assert kept_inertia == streamed_inertia


@pytest.mark.parametrize("partition", ["contiguous", "by-label"])
def test_dish_nodes_hold_their_rows_read_once_and_learn_the_streamed_model(stored, client, caplog, partition):
    """Each node reads its rows of each chunk once for a whole DisH fit (its start and every
    iteration), on its own worker, then passes over them in memory; streaming (the budget set
    to nothing) reads them every iteration and learns exactly the same model."""
    from dask_hashcodes.hashing import DisH
    from dask_hashcodes.hashing.dish_nodes import node_chunk_rows, partition_rows

    features = stored.features_dask()
    labels = np.arange(features.shape[0]) % 5  # by-label: every chunk holds rows of every node
    fit = dict(nodes=5, partition=partition, max_iter=4, tol=0, consensus_tol=0, random_state=0)
    pieces = sum(map(len, node_chunk_rows(features, partition_rows(features, 5, partition, 0, labels))))
    assert pieces == {"contiguous": 6 + 4, "by-label": 5 * 6}[partition]  # 4 chunks hold rows of 2 nodes
    client.run(_count_chunk_reads)
    held = DisH(16, **fit).fit(features, labels)
    assert sum(client.run(_chunk_reads).values()) == pieces
    assert held.training_stats_["iterations"] == 4
    client.run(_count_chunk_reads)
    logger = logging.getLogger("dask_hashcodes.distributed.resident")
    logger.addHandler(caplog.handler)
    try:
        with dask.config.set({"dhash.resident-memory-fraction": 0.0}), caplog.at_level(logging.INFO, logger.name):
            streamed = DisH(16, **fit).fit(features, labels)
    finally:
        logger.removeHandler(caplog.handler)
    assert sum(client.run(_chunk_reads).values()) == 5 * pieces  # the mean pass and 4 iterations
    assert "every iteration reads them from storage" in caplog.text
    np.testing.assert_array_equal(held.components_, streamed.components_)
    assert held.training_stats_["objective"] == streamed.training_stats_["objective"]


@pytest.mark.parametrize("method", ["itq", "sgh", "kmh", "usplh", "dish-allreduce"])
def test_iterative_fits_read_each_chunk_once_and_learn_the_streamed_model(stored, client, method):
    """A fit that passes over its rows again and again keeps them on the workers: each stored
    chunk is read once, and the model is the one streaming learns."""
    from dask_hashcodes.hashing.registry import make_hasher

    features = stored.features_dask()
    client.run(_count_chunk_reads)
    kept = make_hasher(method, 16).fit(features)
    assert sum(client.run(_chunk_reads).values()) == features.numblocks[0]
    with dask.config.set({"dhash.resident-memory-fraction": 0.0}):
        streamed = make_hasher(method, 16).fit(features)
    assert kept.model_id == streamed.model_id
