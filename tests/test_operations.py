"""Operations (issue 6, first part): what a user watching the dashboard sees, and Dask's
performance report of a job."""
from __future__ import annotations

import pytest

from jobs.cli import main


def run(*argv):
    return main([str(a) for a in argv])


@pytest.fixture(scope="module")
def fresh_cluster():
    """A cluster of its own, so the scheduler's task prefixes are only this module's jobs."""
    from distributed import LocalCluster
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                      silence_logs=40) as cluster:
        yield cluster


def _task_prefixes(dask_scheduler):
    return sorted(dask_scheduler.task_prefixes)


def test_jobs_show_readable_task_names_and_save_a_performance_report(fresh_cluster, tmp_path):
    from distributed import Client
    sched = ["--scheduler", fresh_cluster.scheduler_address, "--quiet"]
    ds, model, codes = tmp_path / "sift.zarr", tmp_path / "itq", tmp_path / "codes.zarr"
    report = tmp_path / "reports" / "train.html"
    assert run("synth", "sift", "--n", 20000, "--out", ds, "--chunk-rows", 5000, *sched) == 0
    assert run("split", "--dataset", ds, "--queries", 20, *sched) == 0
    assert run("train", "--dataset", ds, "--method", "itq", "--bits", 16, "--split", "default", "--out", model,
               "--performance-report", report, *sched) == 0
    assert run("train", "--dataset", ds, "--method", "dish", "--bits", 16, "--nodes", 3, "--max-iter", 2,
               "--out", tmp_path / "dish", *sched) == 0
    assert run("train", "--dataset", ds, "--method", "sgh", "--bits", 8, "--n-bases", 32, "--out", tmp_path / "sgh",
               *sched) == 0
    assert run("encode", "--dataset", ds, "--model", model, "--out", codes, *sched) == 0
    assert run("search", "--dataset", ds, "--model", model, "--codes", codes, "--k", 5, "--out", tmp_path / "r.parquet",
               *sched) == 0
    html = report.read_text()
    assert "Dask Performance Report" in html and "itq-gram" in html
    assert [p.name for p in report.parent.iterdir()] == ["train.html"]   # written atomically, no temporary left
    with Client(fresh_cluster) as client:
        prefixes = set(client.run_on_scheduler(_task_prefixes))
    for name in ("sift-synth", "itq-covariance", "itq-gram", "dish-mean", "dish-gram", "dish-admm", "sgh-gram",
                 "sgh-bit", "itq-encode", "hamming-topk", "hamming-topk-merge"):
        assert name in prefixes, (name, sorted(prefixes))
    # nothing anonymous: every prefix is a named step, none is a bare function name
    anonymous = {p for p in prefixes if p in {"run", "_combine_all", "finalize", "getitem"}}
    assert not anonymous, anonymous


def test_failed_job_leaves_no_performance_report(fresh_cluster, tmp_path, capsys):
    report = tmp_path / "r.html"
    assert run("train", "--dataset", tmp_path / "missing.zarr", "--method", "itq", "--out", tmp_path / "m",
               "--performance-report", report, "--scheduler", fresh_cluster.scheduler_address, "--quiet") == 2
    assert "not a dataset" in capsys.readouterr().err
    assert not report.exists() and list(tmp_path.iterdir()) == []
