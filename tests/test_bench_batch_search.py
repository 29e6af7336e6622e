"""The batch search benchmark end to end on a small set: it runs, the linear scan's distances
equal FAISS's IndexBinaryFlat's, the warm batches answer as the cold ones (the same recall
at every nprobe) and report what each worker keeps."""

from __future__ import annotations

import json

import pytest

from benchmarks import bench_batch_search


@pytest.mark.slow
def test_the_batch_benchmark_runs_and_its_warm_batches_answer_as_the_cold_ones(tmp_path):
    out = tmp_path / "batch"
    argv = ["--n", "20000", "--queries", "200", "--bits", "64", "--lists", "32", "--nprobes", "1,8",
            "--train-rows", "5000", "--data", str(tmp_path / "s.zarr"), "--work", str(tmp_path / "work"),
            "--out", str(out)]  # fmt: skip
    assert bench_batch_search.main(argv) == 0
    result = json.loads(out.with_suffix(".json").read_text())
    assert result["scan_equals_faiss_flat"]["identical_distances"]
    rows = {row["system"]: row for row in result["rows"]}
    for nprobe in (1, 8):
        cold = rows[f"dhash IVF32, nprobe {nprobe}"]
        warm = rows[f"dhash IVF32, nprobe {nprobe}, warm (lists kept on the workers)"]
        assert warm["hamming_recall"] == cold["hamming_recall"]
    held = result["resident_lists_by_worker"]
    assert sum(worker["blocks"] for worker in held.values()) >= 1
    assert sum(worker["bytes"] for worker in held.values()) >= (20000 - 0) * 8
    assert "first warm batch" in out.with_suffix(".md").read_text()
