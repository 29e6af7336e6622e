"""Acceptance of SGH, S3PLH and USPLH on real data (Fashion-MNIST) and on sift-synth, with
the papers' protocols: each method must beat its baselines on the test split."""

from __future__ import annotations

import pytest
from distributed import Client

from dask_hashcodes import workflows
from dask_hashcodes.storage.datasets import open_dataset
from tests.shared_runs import EUCLIDEAN_TOP2, evaluated


def _by_method(report):
    return {(r["method"], r["n_bits"]): r["metrics"] for r in report["results"]}


@pytest.fixture(scope="module")
def sgh_euclidean(fmnist_small, cluster):
    """The SGH paper's protocol (ground truth = exact top 2% neighbours, 1000 queries) on the
    first 20000 rows; the whole set: benchmarks/results/quality.md. PCAH at 32 bits serves
    both SGH's and USPLH's tests, LSH at 32 bits also the baselines' (tests/shared_runs.py)."""
    runs = {
        **evaluated(fmnist_small, cluster, ["lsh", "pcah", "sgh"], [32, 64], **EUCLIDEAN_TOP2),
        **evaluated(fmnist_small, cluster, ["pcah", "usplh"], [32, 48], **EUCLIDEAN_TOP2),
    }
    return {run: row["metrics"] for run, row in runs.items()}


@pytest.mark.parametrize("bits", [32, 64])  # 128 bits: benchmarks/results/quality.md (suite time)
def test_sgh_top1000_precision_above_lsh_and_pcah_on_fashion_mnist(sgh_euclidean, bits):
    sgh = sgh_euclidean[("sgh", bits)]["precision@1000"]
    assert sgh > sgh_euclidean[("lsh", bits)]["precision@1000"] + 0.02
    assert sgh > sgh_euclidean[("pcah", bits)]["precision@1000"] + 0.02


@pytest.mark.parametrize("bits", [32, 48])
def test_usplh_map_above_pcah_on_the_euclidean_protocol(sgh_euclidean, bits):
    assert sgh_euclidean[("usplh", bits)]["map"] > sgh_euclidean[("pcah", bits)]["map"] + 0.01


def test_sgh_above_lsh_and_pcah_on_sift_synth(tmp_path, cluster):
    """25k points at 32 and 64 bits here; 100k at 32/64/128 bits is in
    benchmarks/results/quality.md. USPLH is checked on Fashion-MNIST above: on this generator
    its margin over PCAH is too close to the paper's +0.01 for a floor on a small sample
    (benchmarks/results/quality.md)."""
    from dask_hashcodes.data.synth import write_sift_synth

    ds = write_sift_synth(tmp_path / "sift.zarr", 25_000, seed=0)
    with Client(cluster):
        got = _by_method(
            workflows.evaluate(
                ds,
                methods=["lsh", "pcah", "sgh"],
                bits=[32, 64],
                queries=1000,
                seed=0,
                ground_truth="euclidean",
                top_percent=2.0,
                ks=[1000],
            )
        )
    for bits in (32, 64):
        sgh = got[("sgh", bits)]["precision@1000"]
        assert sgh > got[("lsh", bits)]["precision@1000"], bits
        assert sgh > got[("pcah", bits)]["precision@1000"], bits


def test_s3plh_map_above_its_papers_baselines_with_1000_labels(fmnist_small, cluster):
    """The SPLH paper's MNIST protocol on the first 20000 Fashion-MNIST rows: 1000 labeled
    training points, label ground truth, Hamming-ranking map; S3PLH above the baselines of
    its Fig. 3 that we have (LSH, SH, SIKH, PCAH and the label-adjusted PCAH). The whole
    set: benchmarks/results/quality.md."""
    with Client(cluster):
        got = _by_method(
            workflows.evaluate(
                open_dataset(fmnist_small),
                methods=["lsh", "sh", "sikh", "pcah", "pcah-adjusted", "splh"],
                bits=[24, 48],
                queries=1000,
                seed=0,
                params={"n_labeled": 1000},
                ks=[100],
            )
        )
    for bits in (24, 48):
        splh = got[("splh", bits)]["map"]
        for baseline in ("lsh", "sh", "sikh", "pcah", "pcah-adjusted"):
            assert splh > got[(baseline, bits)]["map"] + 0.02, (bits, baseline)
        assert 0 <= got[("splh", bits)]["failed_queries@radius2"] < 1
