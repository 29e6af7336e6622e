"""The recall benchmark's accounting: every row says how many bytes its timed search reads
from memory, a re-ranking row counts the vectors it reads, ``--families`` runs only what it
names, older results still render, a result replaces only an earlier result of the script
(never a link, a folder or a user's file, and whole or not at all), and the page-cache helper
really drops a file."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from benchmarks import bench_recall
from benchmarks.harness import page_cache

ROOT = Path(__file__).resolve().parents[1]
D = 128  # sift-synth's dimension: one uint8 byte per coordinate


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("recall") / "tiny"
    families = "faiss HNSW-Flat,faiss IVF-RaBitQ FastScan,faiss binary,ours: IVF"
    bench_recall.main(["--dataset", "sift-synth", "--n", "3000", "--queries", "50", "--bits", "64",
                       "--methods", "itq", "--candidates", "300", "--ivf-lists", "1", "--hnsw-m", "32",
                       "--families", families, "--skip-quality", "--out", str(out)])  # fmt: skip
    return json.loads(out.with_suffix(".json").read_text()), out


def test_every_row_counts_its_ram_and_its_build(tiny_run):
    result, _ = tiny_run
    assert result["rows"] and result["faiss_version"]
    for row in result["rows"]:
        assert row["ram_bytes_per_vector"] > 0, row["config"]
        assert "rss_growth_bytes_per_vector" in row and isinstance(row["rss_growth_excludes"], dict)
        assert row["build_seconds"] >= 0


def test_a_re_ranking_row_counts_the_vectors(tiny_run):
    rows = tiny_run[0]["rows"]
    ranked = {r["config"].split(" nprobe=")[0]: r for r in rows if r["family"] == "ours: IVF"}
    reranked = [r for r in rows if r["family"] == "ours: IVF + exact re-rank"]
    assert ranked and reranked
    for row in reranked:
        index_only = ranked[row["config"].split(" nprobe=")[0]]["ram_bytes_per_vector"]
        # the codes and lists, plus X (D bytes a row) and the positions that lead to it
        assert row["ram_bytes_per_vector"] >= index_only + D
        assert row["rss_growth_excludes"]["X"] == D
    flat = [r for r in rows if r["config"].startswith("IndexBinaryFlat")]
    assert flat and all(r["ram_bytes_per_vector"] >= 64 / 8 + D for r in flat)
    # HNSW-Flat holds float32 vectors and its graph: more than 4 bytes a coordinate
    hnsw = [r for r in rows if r["family"] == "faiss HNSW-Flat"]
    assert hnsw and all(r["ram_bytes_per_vector"] > 4 * D for r in hnsw)


def test_families_run_only_what_they_name(tiny_run):
    result, out = tiny_run
    families = {r["family"] for r in result["rows"]}
    assert families == {
        "faiss HNSW-Flat",
        "faiss IVF-RaBitQ FastScan",
        "faiss IVF-RaBitQ FastScan + refine",
        "faiss IVF-RaBitQ FastScan + SQ8 refine",
        "faiss binary",
        "faiss binary IVF",
        "faiss binary IVF + exact re-rank",
        "ours: IVF",
        "ours: IVF + exact re-rank",
    }
    report = out.with_suffix(".md").read_text()
    assert "| RAM B/vector |" in report
    ceiling = next(r for r in result["rows"] if r["structure"] == "HNSW32,Flat")["ram_bytes_per_vector"] / 4
    assert f"HNSW-Flat M=32 RAM/4 = {ceiling:.1f} B/vector" in report


def test_every_committed_recall_result_counts_ram_on_every_row():
    """The memory column is what each timed search read from RAM, on every committed row; a
    result written before it was counted is migrated by benchmarks/recount_ram.py."""
    for path in sorted((ROOT / "benchmarks/results/recall").glob("*.json")):
        result = json.loads(path.read_text())
        missing = [row["config"] for row in result["rows"] if not row.get("ram_bytes_per_vector")]
        assert missing == [], f"{path.name}: rows without ram_bytes_per_vector: {missing[:3]}"
        for family, best in result.get("chosen", {}).items():
            assert best is None or best["ram_bytes_per_vector"] > 0, (path.name, family)


def test_ram_bytes_sums_the_arrays_and_the_check_names_a_mismatch():
    codes, ids = np.zeros((10, 8), np.uint8), np.arange(10, dtype=np.int32)
    assert bench_recall.ram_bytes(codes, ids) == 80 + 40
    agreeing = {"family": "f", "config": "a", **bench_recall.memory_fields("agrees", 10, 1200, 1000, {"X": 200})}
    differing = {"family": "f", "config": "b", **bench_recall.memory_fields("differs", 10, 1200, 100)}
    lines = "\n".join(bench_recall.rss_check_lines([agreeing, differing]))
    assert "- differs: counted 120.0 B/vector" in lines and "- agrees" not in lines
    assert "2 structures; 1 agree" in lines


def test_page_cache_eviction_drops_a_file_and_reports_its_method(tmp_path):
    path = tmp_path / "vectors.bin"
    path.write_bytes(np.random.default_rng(0).integers(0, 255, 4 << 20, dtype=np.uint8).tobytes())
    path.read_bytes()
    # the per-file method alone: dropping the machine's whole cache would slow every other process
    assert page_cache.evict([tmp_path], system_wide=False) == "posix_fadvise"
    before = page_cache.resident_fraction(path)
    if before is None:
        pytest.skip("util-linux's fincore is not installed")
    assert before < 0.5
    path.read_bytes()
    assert page_cache.resident_fraction(tmp_path) > 0.9
    with pytest.raises(FileNotFoundError, match="need existing paths"):
        page_cache.evict([tmp_path / "missing"])


def test_a_result_replaces_only_an_earlier_result_of_the_script(tmp_path):
    from benchmarks.bench_recall import refuse_out, replace_file

    out = tmp_path / "run"
    assert refuse_out(out) is None  # a new name
    (tmp_path / "run.json").write_text('{"command": "benchmarks/bench_recall.py --out run", "rows": []}')
    (tmp_path / "run.md").write_text("old table")
    assert refuse_out(out) is None  # an earlier result of this script
    (tmp_path / "notes.json").write_text('{"mine": 1}')
    assert "not a result of benchmarks/bench_recall.py" in refuse_out(tmp_path / "notes")
    (tmp_path / "plot.png").write_bytes(b"a user's picture")
    assert "without the result's .json" in refuse_out(tmp_path / "plot")
    (tmp_path / "home.json").mkdir()
    assert "symbolic link or a folder" in refuse_out(tmp_path / "home")
    (tmp_path / "link.md").symlink_to(tmp_path / "run.md")
    (tmp_path / "link.json").write_text('{"command": "benchmarks/bench_recall.py"}')
    assert "symbolic link or a folder" in refuse_out(tmp_path / "link")
    (tmp_path / "dangling.png").symlink_to(tmp_path / "nowhere.png")  # a link to nothing is still a link
    (tmp_path / "dangling.json").write_text('{"command": "benchmarks/bench_recall.py"}')
    assert "symbolic link or a folder" in refuse_out(tmp_path / "dangling")
    # a write that fails leaves the old file whole and no temporary behind
    before = sorted(p.name for p in tmp_path.iterdir())

    def failing(path):
        open(path, "w").write("half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        replace_file(tmp_path / "run.md", failing)
    assert (tmp_path / "run.md").read_text() == "old table"
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    replace_file(tmp_path / "run.md", lambda path: open(path, "w").write("new table"))
    assert (tmp_path / "run.md").read_text() == "new table" and sorted(p.name for p in tmp_path.iterdir()) == before
