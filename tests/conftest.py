"""Shared fixtures: a real multi-process Dask cluster and real datasets on disk."""

from __future__ import annotations

import os

# An idle Dask cluster is not idle: every process checks its event loop ("tick") every 20 ms,
# each worker samples its threads for the profile every 10 ms and reads its process's CPU and
# memory every 0.5 s (the dashboard's plots), and each nanny reads its worker's memory every
# 0.1 s. The session's clusters live the whole session, so this polling costs about a tenth
# of a core per cluster for half an hour. The tests rely on none of it at that rate (the
# performance report only needs some profile samples; no test races the memory monitor), so
# the session's processes, and every process a test starts (through the environment), poll
# 10 to 20 times less often.
DASK_POLLING = {
    "DASK_DISTRIBUTED__ADMIN__TICK__INTERVAL": "1s",
    "DASK_DISTRIBUTED__WORKER__PROFILE__INTERVAL": "100ms",
    "DASK_DISTRIBUTED__ADMIN__SYSTEM_MONITOR__INTERVAL": "5s",
    "DASK_DISTRIBUTED__WORKER__MEMORY__MONITOR_INTERVAL": "1s",
}
# The session's cluster workers hold both cores, each with one BLAS thread (dask's setting
# for the processes a nanny starts). A test process is their client, and a fit already runs
# its client-side steps on one BLAS thread (Hasher.fit); the tests' own numpy (brute-force
# references, fixtures, evaluations) gets the same, so OpenBLAS's idle threads do not spin on
# the workers' cores. Set for pytest's process and everything it starts (doc pages, CLI
# commands, their clusters' workers); plugins load numpy before this file, hence the limit below.
ONE_BLAS_THREAD = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
for _name, _value in {**DASK_POLLING, **ONE_BLAS_THREAD}.items():
    os.environ.setdefault(_name, _value)

import dask  # noqa: E402 - after the setting above, which dask reads from the environment
import pytest  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

from dask_hashcodes.data.sources import fashion_mnist_available  # noqa: E402

dask.config.refresh()  # in case a plugin imported dask before this file set the variable
threadpool_limits(limits=1)  # the BLAS that plugins loaded before this file (zarr's imports numpy)

pytest_plugins = ["tests.cpu_times"]  # --cpu-times FILE: each test's process-tree CPU seconds

# The fast tier (`pytest -m "not slow"`, for the edit-test loop) leaves out, besides the
# tests marked slow where they are defined: whole modules of integration tests (real data
# sets, other processes, the documentation's examples, the scikit-learn contract matrix of
# every estimator) and every test that needs a fixture building real data or processes. CI
# and the README's test command run both tiers.
SLOW_MODULES = {
    "test_adsh", "test_bench_batch_search", "test_bench_recall", "test_debian_text", "test_doc_examples",
    "test_dpsh", "test_estimators", "test_fashion_mnist", "test_interrupt", "test_load", "test_mac",
    "test_operations", "test_packaging", "test_progress", "test_reference_outputs", "test_run_resume",
    "test_sgh_splh_quality", "test_resident", "test_benchmark_command",
}  # fmt: skip
# single tests that start processes or clusters of their own (module::function)
SLOW_TESTS = {
    "test_architecture::test_storage_runs_no_dask_computation",
    "test_dish::test_training_moves_no_feature_chunk_between_workers",
    "test_ivf::test_warm_batches_search_the_lists_held_on_the_workers_without_reading_storage",
    "test_ivf::test_default_warm_blocks_are_one_per_worker_thread_placed_one_per_thread",
    "test_ivf::test_serving_from_memory_answers_as_the_cluster_path",
    "test_storage::test_sigterm_removes_the_temporary_and_exits_143",
    "test_storage::test_checkpoint_of_a_live_run_is_refused_and_of_a_dead_one_replaced",
    "test_storage::test_a_successful_job_prints_no_error_lines",
    "test_truth::test_stored_neighbour_lists_stay_out_of_the_evaluation_graphs",
}
SLOW_FIXTURES = {
    "data_dir", "fmnist_paths", "pipeline_run", "process_cluster", "fresh_cluster", "one_worker_cluster", "clusters",
    "cpu_hogs", "s3_server", "site",
}  # fmt: skip


def pytest_collection_modifyitems(config, items):
    for item in items:
        module = item.module.__name__.rsplit(".", 1)[-1] if item.module else ""
        test = f"{module}::{getattr(item, 'originalname', item.name)}"
        if module in SLOW_MODULES or test in SLOW_TESTS or SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def cluster():
    """LocalCluster of 2 worker processes x 1 thread (the CLI's default shape)."""
    from distributed import LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None, silence_logs=40) as c:
        yield c


@pytest.fixture(scope="session")
def one_worker_cluster():
    """LocalCluster of 1 worker process x 1 thread. With ``cluster`` it gives the two shapes
    that the "same result whatever the worker count" tests compare, each started once per
    session rather than once per test (a worker process costs seconds of CPU to start)."""
    from distributed import LocalCluster

    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None, silence_logs=40) as c:
        yield c


@pytest.fixture
def clusters(cluster, one_worker_cluster):
    """The session's clusters by worker count: {1: one worker, 2: two workers}."""
    return {1: one_worker_cluster, 2: cluster}


@pytest.fixture
def client(cluster):
    from distributed import Client

    with Client(cluster) as c:
        yield c


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("dhash-data")
    os.environ["DHASH_DATA_DIR"] = str(path)
    return path


def require_fashion_mnist():
    """Fashion-MNIST tests never skip silently in CI: missing data fails there."""
    if not fashion_mnist_available():
        if os.environ.get("CI"):
            pytest.fail("Fashion-MNIST missing in CI: .ci/run must `apt-get install dataset-fashion-mnist`")
        pytest.skip("Fashion-MNIST not installed (apt-get install dataset-fashion-mnist)")


@pytest.fixture(scope="session")
def fmnist_paths(data_dir):
    """Fashion-MNIST ingested twice: 20000-row and 5000-row feature chunks."""
    require_fashion_mnist()
    from dask_hashcodes.data.sources import write_fashion_mnist

    return {rows: write_fashion_mnist(data_dir / f"fmnist-{rows}.zarr", chunk_rows=rows).path for rows in (20000, 5000)}


@pytest.fixture(scope="session")
def fmnist_rows(fmnist_paths):
    """The first 3000 Fashion-MNIST rows (features as float32) and their labels, in memory."""
    import numpy as np

    from dask_hashcodes.storage.datasets import open_dataset

    ds = open_dataset(fmnist_paths[5000])
    return np.asarray(ds.features[:3000], dtype=np.float32), np.asarray(ds.labels[:3000])


FMNIST_SMALL_ROWS = 20000


@pytest.fixture(scope="session")
def fmnist_small(fmnist_paths, data_dir):
    """The first 20000 Fashion-MNIST rows (all ten classes, about 2000 each) in 5000-row
    chunks: the quality tests' fixture. A method that beats its baseline there by a clear
    margin is shown working on real data at a quarter of the cost of the whole set (whose
    comparisons are in benchmarks/results/)."""
    import numpy as np

    from dask_hashcodes.storage.datasets import open_dataset, write_dataset

    full = open_dataset(fmnist_paths[5000])
    rows = FMNIST_SMALL_ROWS
    blocks = (np.asarray(full.features[start : start + 5000]) for start in range(0, rows, 5000))
    return write_dataset(
        data_dir / f"fmnist-first-{rows}.zarr",
        blocks,
        n=rows,
        d=full.d,
        dtype=full.dtype,
        source=full.source,
        labels=np.asarray(full.labels[:rows]),
        chunk_rows=5000,
    ).path


@pytest.fixture(scope="session")
def fmnist_small_itq_map(fmnist_small, cluster):
    """ITQ's map on ``fmnist_small`` (1000 queries, seed 0) by number of bits, each trained
    once per session: the unsupervised baseline that several methods' quality tests compare
    with (the evaluation's split and scoring are the same in each)."""
    from distributed import Client

    from dask_hashcodes import workflows
    from dask_hashcodes.storage.datasets import open_dataset

    maps = {}

    def itq_map(bits):
        if bits not in maps:
            with Client(cluster):
                report = workflows.evaluate(
                    open_dataset(fmnist_small), methods=["itq"], bits=[bits], queries=1000, seed=0
                )
            maps[bits] = report["results"][0]["metrics"]["map"]
        return maps[bits]

    return itq_map


@pytest.fixture
def no_aws_env(monkeypatch, tmp_path):
    """No credentials from the environment, ~/.aws or the instance metadata service: only
    what a command is given reaches an object store."""
    for name in list(os.environ):
        if name.startswith("AWS_") or name == "DHASH_STORAGE_OPTIONS":
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
