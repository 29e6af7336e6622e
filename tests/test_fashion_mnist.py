"""Acceptance on real data: the evaluate job on Fashion-MNIST, and its invariance to the
cluster shape and to the chunking."""
import json

import numpy as np
import pytest
from distributed import Client, LocalCluster

from jobs.cli import main
from pipeline.evaluation.evaluate import run_evaluation
from pipeline.storage.datasets import open_dataset

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cli_report(fmnist_paths, tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "fmnist"
    code = main(["evaluate", "--dataset", str(fmnist_paths[20000]), "--methods", "lsh,pcah,itq", "--bits", "32",
                 "--queries", "1000", "--seed", "0", "--out", str(out), "--quiet"])
    assert code == 0
    return out


def test_evaluate_job_quality_on_fashion_mnist(cli_report):
    report = json.loads((cli_report / "report.json").read_text())
    by = {r["method"]: r["metrics"] for r in report["results"]}
    assert by["itq"]["map"] >= 0.46
    assert by["itq"]["precision@1000"] >= 0.60
    assert by["pcah"]["map"] < by["itq"]["map"] and by["lsh"]["map"] < by["itq"]["map"]
    assert report["split"]["n_query"] == 1000 and report["split"]["n_database"] == 69000
    assert report["ground_truth"]["kind"] == "labels"
    from tests.schemas import validate
    validate(report, "report.schema.json")
    for name in ("report.md", "precision_at_k.png", "pr_curve.png"):
        assert (cli_report / name).stat().st_size > 0


def _metric_rows(report):
    out = {}
    for r in report["results"]:
        m = r["metrics"]
        flat = {k: v for k, v in m.items() if isinstance(v, float)}
        flat.update({f"pr_{i}": v for i, v in enumerate(m["pr_curve"]["precision"])})
        out[(r["method"], r["n_bits"])] = flat
    return out


def _evaluate_on(path, n_workers):
    with LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True, dashboard_address=None,
                      silence_logs=40) as cluster, Client(cluster):
        return run_evaluation(open_dataset(path), methods=["lsh", "pcah", "itq"], bits=[32], n_queries=1000, seed=0)


def test_same_numbers_whatever_workers_and_chunking(cli_report, fmnist_paths):
    reference = _metric_rows(json.loads((cli_report / "report.json").read_text()))  # 2 workers, 20k chunks
    for path, workers in ((fmnist_paths[20000], 1), (fmnist_paths[5000], 2)):
        got = _metric_rows(_evaluate_on(path, workers))
        assert got.keys() == reference.keys()
        for key in reference:
            for name, value in reference[key].items():
                assert got[key][name] == pytest.approx(value, abs=1e-6), (key, name, workers, path)
