"""``python -m benchmarks``: each stage against its peer, run from a checkout. The installed
``dhash`` command has no benchmark command: the harness lives in the repository."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.__main__ import main as benchmark
from dask_hashcodes.cli.main import main as dhash

REPO = Path(__file__).resolve().parents[1]


def run(*argv) -> int:
    return benchmark([str(a) for a in argv])


def one_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("error: "), err
    return err


def test_dhash_has_no_bench_command(capsys):
    assert dhash(["bench", "search", "--n", "100", "--out", "b.json"]) == 2
    assert "invalid choice: 'bench'" in one_line(capsys)


def test_the_entry_point_runs_from_the_checkout_root():
    done = subprocess.run([sys.executable, "-m", "benchmarks", "--help"], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "usage: python -m benchmarks" in done.stdout and "--bench-threads" in done.stdout


@pytest.fixture(scope="module")
def dataset(cluster, tmp_path_factory):
    """A 40k-row sift-synth dataset, made by dhash synth."""
    ds = tmp_path_factory.mktemp("bench") / "sift.zarr"
    argv = ["synth", "sift", "--n", "40000", "--seed", "3", "--chunk-rows", "16384", "--out", str(ds)]
    assert dhash([*argv, "--scheduler", cluster.scheduler_address, "--quiet"]) == 0
    return ds


def test_stage_comparisons_agree_with_their_peers(dataset, cluster, tmp_path):
    """Every stage runs against its peer on the same data and writes JSON + Markdown; search
    and ground truth agree with FAISS exactly (ties aside). Speed goals are the committed
    benchmark results, not asserted here."""
    ds = dataset
    sched = ["--scheduler", cluster.scheduler_address, "--quiet"]
    out = {stage: tmp_path / f"{stage}.json" for stage in ("search", "groundtruth", "train", "encode")}
    assert run("search", "--n", 30000, "--bits", 64, "--queries", 20, "--k", 10, "--out", out["search"]) == 0
    assert run("groundtruth", "--n", 20000, "--data", ds, "--queries", 10, "--k", 10, "--out", out["groundtruth"]) == 0
    assert run("train", "--n", 40000, "--data", ds, "--iterations", 2, "--nodes", 3, "--out", out["train"], *sched) == 0
    assert run("encode", "--n", 40000, "--data", ds, "--out", out["encode"], *sched) == 0
    results = {stage: json.loads(path.read_text()) for stage, path in out.items()}
    for stage in ("search", "groundtruth"):
        agreement = results[stage]["agreement"]
        assert agreement["identical_distances"] and agreement["ids_equal_up_to_ties"], (stage, agreement)
    assert results["train"]["ours"]["passes"] == 3 and len(results["train"]["ours"]["objective"]) == 2
    assert results["encode"]["ours"]["codes_disk"]["files"] > 0
    from tests.schemas import validate

    for stage, r in results.items():
        validate(r, "bench.schema.json")
        assert r["ours"]["seconds"] > 0 and r["peer"]["seconds"] > 0 and r["machine"]["cores"] >= 1
        assert r["ratio_ours_over_peer_seconds"] == pytest.approx(r["ours"]["seconds"] / r["peer"]["seconds"], rel=1e-2)
        assert out[stage].with_suffix(".md").read_text().startswith(f"# Benchmark {stage}")


def test_json_and_markdown_are_written_beside_each_other_whatever_the_out_suffix(tmp_path, capsys):
    """--out x, x.json and x.md all write x.json (the result) and x.md (its table): never one
    over the other, and --overwrite replaces both. The result records the command that
    re-runs it from the checkout's root."""
    search = ["search", "--n", 2000, "--queries", 10, "--k", 5, "--bits", 16, "--quiet"]
    assert run(*search, "--out", tmp_path / "x.md") == 0, capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.json", "x.md"]
    result = json.loads((tmp_path / "x.json").read_text())
    assert result["schema"] == "dhash.bench/1"
    assert (tmp_path / "x.md").read_text().startswith("# Benchmark search")
    assert "x.json" in capsys.readouterr().out
    assert run(*search, "--out", tmp_path / "x.json") == 2  # the same two files: --overwrite replaces them
    assert "--overwrite" in one_line(capsys)
    assert run(*search, "--out", tmp_path / "x", "--overwrite") == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.json", "x.md"]
    assert json.loads((tmp_path / "x.json").read_text())["schema"] == "dhash.bench/1"


def test_the_recorded_command_re_runs_the_benchmark_from_the_checkout(tmp_path):
    out = tmp_path / "r.json"
    argv = ["search", "--n", "500", "--queries", "5", "--k", "3", "--bits", "8", "--out", str(out), "--quiet"]
    done = subprocess.run([sys.executable, "-m", "benchmarks", *argv], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert json.loads(out.read_text())["command"] == " ".join(["python -m benchmarks", *argv])


def test_an_out_that_is_not_a_result_is_never_replaced(tmp_path, capsys):
    folder = tmp_path / "b.json"
    folder.mkdir()
    (tmp_path / "c.md").write_text("my table")
    search = ["search", "--n", 1000, "--queries", 10, "--quiet"]
    assert run(*search, "--out", folder) == 2
    assert "is a directory" in one_line(capsys)
    assert run(*search, "--out", tmp_path / "c.json", "--overwrite") == 2
    assert "c.md" in one_line(capsys)
    assert folder.is_dir() and (tmp_path / "c.md").read_text() == "my table"
    assert not (tmp_path / "c.json").exists()


@pytest.mark.parametrize("target", ["home", "link-to-notes", "link-to-home", "stray-commit-record"])
def test_a_result_never_replaces_user_files_behind_links_or_a_home_tree(tmp_path, capsys, target):
    """The result's two paths pointed, with --overwrite, at what a user has: a home-like
    directory, a symlink to their file or to their home, a file beside a stray commit
    record. Each is refused before any work, and nothing of the user's changes."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id").write_text("key")
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    out = tmp_path / "r"
    if target == "home":
        out = home
    elif target == "link-to-notes":
        (tmp_path / "r.json").symlink_to(notes)
    elif target == "link-to-home":
        (tmp_path / "r.md").symlink_to(home, target_is_directory=True)
    else:  # a marker file does not make a user's file ours
        (tmp_path / "r.json").write_text('{"schema": "dhash.bench/1"}')
        (tmp_path / ".dhash-commit.json").write_text('{"files": ["r.json"]}')
    before = sorted((p.relative_to(tmp_path), p.is_symlink()) for p in tmp_path.rglob("*"))
    assert run("search", "--n", 1000, "--queries", 10, "--out", out, "--overwrite", "--quiet") == 2
    one_line(capsys)
    assert sorted((p.relative_to(tmp_path), p.is_symlink()) for p in tmp_path.rglob("*")) == before
    assert notes.read_text() == "mine" and (home / ".ssh" / "id").read_text() == "key"


@pytest.mark.parametrize(
    ("argv", "refusal"),
    [
        (["search", "--n", "10", "--out", "x", "--method", "itq"], "--method does not apply to python -m benchmarks search"),
        (["encode", "--n", "10", "--out", "x", "--k", "5"], "--k does not apply to python -m benchmarks encode"),
        (["search", "--n", "10", "--out", "x", "--workers", "2"], "--workers does not apply"),
        (["train", "--n", "10", "--out", "x", "--bench-threads", "2"], "--bench-threads applies to python -m "
         "benchmarks train only with --method itq-vs-faiss"),
        (["train", "--n", "10", "--out", "x", "--method", "itq-vs-faiss", "--nodes", "3"], "--nodes does not apply "
         "to python -m benchmarks train --method itq-vs-faiss"),
        (["search", "--out", "x"], "--n is required"),
        (["search", "--n", "0", "--out", "x"], "expected a positive integer"),
    ],
)  # fmt: skip
def test_an_option_that_would_do_nothing_is_refused_before_any_work(argv, refusal, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert benchmark(argv) == 2
    assert refusal in one_line(capsys)
    assert list(tmp_path.iterdir()) == []


def test_without_the_bench_extra_the_error_names_it(tmp_path):
    """faiss (the peer) hidden: the error names the extra to install, no traceback, no output."""
    code = (
        "import sys; sys.modules['faiss'] = None\n"
        "from benchmarks.__main__ import main\n"
        f"sys.exit(main(['search', '--n', '100', '--out', {str(tmp_path / 'b.json')!r}]))"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "[bench]" in lines[0] and "faiss" in lines[0], done.stderr
    assert list(tmp_path.iterdir()) == []


def test_the_suite_cost_script_finds_pytests_summary_line_wherever_it_is(tmp_path):
    """Under -q pytest's summary line has no "=" frame, and a process that outlived its test
    may print after it: the recorded result is still that line, not the log's last one."""
    from benchmarks.bench_suite_cost import _summary

    log = tmp_path / "tests.log"
    log.write_text(".... [100%]\n2716 passed, 25 skipped, 11 warnings in 1637.28s (0:27:17)\nTimeoutError: Timeout\n")
    assert _summary(log) == "2716 passed, 25 skipped, 11 warnings in 1637.28s (0:27:17)"
    log.write_text("== 1 failed, 2070 passed in 1643.32s (0:27:23) ==\n")
    assert _summary(log) == "1 failed, 2070 passed in 1643.32s (0:27:23)"
    log.write_text("Killed\n")
    assert _summary(log) == "Killed"  # no summary at all: the last line says what happened


def test_the_suite_cost_script_compares_two_runs_test_by_test(tmp_path):
    """Tests both runs have are summed in either run; a test only one run has (added, removed
    or renamed) counts in that run alone, and the added ones are listed heaviest first."""
    from benchmarks.bench_suite_cost import compare_tests, per_test_cpu

    profile = tmp_path / "cpu-times.jsonl"
    profile.write_text(
        '{"test": "t/a.py::x", "wall": 1.0, "cpu": 2.5}\n\n{"test": "t/a.py::y", "wall": 1.0, "cpu": 3}\n'
    )
    assert per_test_cpu(profile) == {"t/a.py::x": 2.5, "t/a.py::y": 3}
    old = {"t/a.py::x": 2.5, "t/a.py::y": 3.0, "t/b.py::z": 1.0}
    new = {"t/a.py::x": 1.0, "t/b.py::z": 0.5, "t/c.py::n": 4.0, "t/c.py::m": 1.0, "t/a.py::w": 2.0}
    compared = compare_tests(old, new)
    assert compared["both"] == {"tests": 2, "first_cpu": 3.5, "last_cpu": 1.5}
    assert compared["only_first"] == {"tests": 1, "cpu": 3.0}
    added = compared["only_last"]
    assert (added["tests"], added["cpu"]) == (3, 7.0)
    assert [t["test"] for t in added["heaviest"]] == ["t/c.py::n", "t/a.py::w", "t/c.py::m"]
    assert added["modules"] == {"t/c.py": 5.0, "t/a.py": 2.0}
