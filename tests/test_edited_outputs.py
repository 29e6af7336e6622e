"""Files dhash wrote and the user edited afterwards are never replaced by ``--overwrite``.

* A single-file output (search results parquet, a benchmark's JSON and Markdown, performance report)
  carries the sha256 of its content where dhash marks it as its own; ``--overwrite`` refuses
  one that no longer matches, in one line naming the file and what to do, and leaves it
  byte-identical. Moved away as the message says, the next run writes it anew.
* An artifact directory whose commit record lists a file that was edited (an evaluation's
  report.md, a model's model.json) is refused as changed since dhash wrote it, naming the file.
"""

from __future__ import annotations

import json
import shutil

import pyarrow.parquet as pq
import pytest

from benchmarks.__main__ import main as benchmark
from dask_hashcodes.cli.main import main


def run(*argv):
    return main([str(a) for a in argv])


def one_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("error: "), err
    return err


@pytest.fixture(scope="module")
def made(cluster, tmp_path_factory):
    """A small dataset with a split, an LSH model and its codes, written by the CLI."""
    base = tmp_path_factory.mktemp("edited")
    sched = ["--scheduler", cluster.scheduler_address, "--quiet"]
    assert run("synth", "sift", "--n", 2000, "--chunk-rows", 1000, "--out", base / "ds.zarr", *sched) == 0
    assert run("split", "--dataset", base / "ds.zarr", "--queries", 20, *sched) == 0
    train = ["train", "--dataset", base / "ds.zarr", "--method", "lsh", "--bits", 16, "--split", "default"]
    assert run(*train, "--out", base / "lsh", *sched) == 0
    assert run("encode", "--dataset", base / "ds.zarr", "--model", base / "lsh", "--out", base / "c.zarr", *sched) == 0
    return base, sched


def _rewrite_parquet(path):
    """What a user's script does: read the results, keep some rows, write them back."""
    table = pq.read_table(path)
    pq.write_table(table.slice(0, table.num_rows // 2), path)


def _flip_a_byte(path):
    data = bytearray(path.read_bytes())
    data[len(data) // 3] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("edit", [_rewrite_parquet, _flip_a_byte])
def test_edited_search_results_are_kept_and_the_remedy_works(made, tmp_path, capsys, edit):
    base, sched = made
    out = tmp_path / "res.parquet"
    search = ["search", "--dataset", base / "ds.zarr", "--model", base / "lsh", "--codes", base / "c.zarr"]
    search += ["--k", 5, "--out", out, *sched]
    assert run(*search) == 0
    assert run(*search, "--overwrite") == 0  # dhash's own, unchanged: replaced
    edit(out)
    edited = out.read_bytes()
    capsys.readouterr()
    assert run(*search, "--overwrite") == 2
    err = one_line(capsys)
    assert f"output {out} is a dhash search-results file changed since dhash wrote it" in err, err
    assert "move the file away" in err and out.read_bytes() == edited
    out.rename(tmp_path / "mine.parquet")  # the remedy
    assert run(*search, "--overwrite") == 0 and pq.read_table(out).num_rows == 100


def test_an_edited_performance_report_is_kept(made, tmp_path, capsys):
    base, sched = made
    report = tmp_path / "perf.html"
    encode = ["encode", "--dataset", base / "ds.zarr", "--model", base / "lsh", *sched]
    assert run(*encode, "--out", tmp_path / "c1", "--performance-report", report) == 0
    text = report.read_text()
    report.write_text(text.replace("<body", "<!-- my notes --><body", 1))
    capsys.readouterr()
    assert run(*encode, "--out", tmp_path / "c2", "--performance-report", report, "--overwrite") == 2
    err = one_line(capsys)
    assert f"{report} is a dhash performance-report file changed since dhash wrote it" in err, err
    assert "my notes" in report.read_text() and not (tmp_path / "c2").exists()


@pytest.mark.parametrize("edited", [".json", ".md"])
def test_edited_bench_results_are_kept(tmp_path, capsys, edited):
    out = tmp_path / "b.json"
    bench = ["search", "--n", 1000, "--queries", 10, "--out", out, "--quiet"]
    assert benchmark([str(a) for a in bench]) == 0
    result = json.loads(out.read_text())
    assert result["schema"] == "dhash.bench/1" and result["dhash_sha256"].startswith("dhash-sha256:")
    target = out.with_suffix(edited)
    if edited == ".json":
        target.write_text(json.dumps({**result, "command": "my own notes"}, indent=2))
    else:
        target.write_text(target.read_text().replace("# Benchmark", "# My benchmark", 1))
    before = target.read_bytes()
    capsys.readouterr()
    assert benchmark([str(a) for a in [*bench, "--overwrite"]]) == 2
    err = one_line(capsys)
    assert f"{target} is a dhash bench file changed since dhash wrote it" in err, err
    assert target.read_bytes() == before


def test_an_edited_file_inside_an_evaluation_report_is_named(made, tmp_path, capsys):
    base, sched = made
    out = tmp_path / "report"
    evaluate = ["evaluate", "--dataset", base / "ds.zarr", "--methods", "lsh", "--bits", 8, "--queries", 20]
    evaluate += ["--out", out, *sched]
    assert run(*evaluate) == 0
    (out / "report.md").write_text((out / "report.md").read_text() + "\nmy conclusions\n")
    capsys.readouterr()
    assert run(*evaluate) == 2
    err = one_line(capsys)
    assert f"output {out} is a dhash report changed since dhash wrote it (changed: report.md)" in err, err
    assert f"remove {out} and run again" in err and "my conclusions" in (out / "report.md").read_text()
    shutil.rmtree(out)  # the remedy
    assert run(*evaluate) == 0


def test_an_edited_model_json_is_not_replaced(made, tmp_path, capsys):
    base, sched = made
    model = tmp_path / "lsh"
    shutil.copytree(base / "lsh", model)
    meta = json.loads((model / "model.json").read_text())
    (model / "model.json").write_text(json.dumps({**meta, "note": "mine"}))
    capsys.readouterr()
    train = ["train", "--dataset", base / "ds.zarr", "--method", "lsh", "--bits", 16, "--out", model]
    assert run(*train, "--overwrite", *sched) == 2
    err = one_line(capsys)
    assert f"output {model} is a dhash model changed since dhash wrote it (changed: model.json)" in err, err
    assert "mine" in (model / "model.json").read_text()
