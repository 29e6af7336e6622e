"""benchmarks/results/README.md is the index of the committed benchmark results: every file
there is listed with the command that regenerates it. These tests keep the index, the run
scripts and the results in step: every file is covered by an index line and every index line
covers a file; every command names a script, step or ``dhash`` subcommand that exists, with
options that script defines; where a result records the command that made it, the index
(or the run script) gives the same command; and the summary tables rebuilt from the
committed results equal the committed tables."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
INDEX = RESULTS / "README.md"
RUN_SCRIPTS = ("benchmarks/run_performance.sh", "benchmarks/run_quality.sh")


def expand(pattern: str) -> list[str]:
    """Shell-style braces: ``a_{1,2}.{json,md}`` -> the four names."""
    found = re.search(r"\{([^{}]*)\}", pattern)
    if not found:
        return [pattern]
    head, tail = pattern[: found.start()], pattern[found.end() :]
    return [name for part in found.group(1).split(",") for name in expand(head + part + tail)]


def index_rows() -> list[tuple[list[str], list[str]]]:
    """(file patterns, commands) of every table row of the index."""
    rows = []
    for line in INDEX.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if not line.startswith("| `") or len(cells) != 3:
            continue
        patterns = re.findall(r"`([^`]+)`", cells[0])
        commands = re.findall(r"`([^`]+)`", cells[2]) or [cells[2]]
        rows.append((patterns, commands))
    return rows


def result_files() -> set[str]:
    """Every file under benchmarks/results (relative), apart from the names its .gitignore
    keeps out of git."""
    ignored = {
        line.strip()
        for line in (RESULTS / ".gitignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    return {str(p.relative_to(RESULTS)) for p in RESULTS.rglob("*") if p.is_file() and p.name not in ignored}


def matched(pattern: str) -> set[str]:
    return {str(p.relative_to(RESULTS)) for name in expand(pattern) for p in RESULTS.glob(name) if p.is_file()}


def test_the_index_lists_every_results_file_and_nothing_else():
    rows = index_rows()
    assert len(rows) > 20, "the index's tables were not found: rows are '| `files` | what | `command` |'"
    covered = set()
    for patterns, _ in rows:
        for pattern in patterns:
            files = matched(pattern)
            assert files, f"benchmarks/results/README.md lists {pattern}, which matches no file"
            covered |= files
    missing = sorted(result_files() - covered)
    assert not missing, f"files under benchmarks/results missing from its README.md index: {missing}"


def steps(script: Path) -> set[str]:
    """The step names ``bash SCRIPT STEP`` accepts: ``run STEP ...`` lines and shell functions."""
    text = script.read_text()
    return set(re.findall(r"^\s*run (\S+) ", text, re.M)) | set(re.findall(r"^(\w+)\(\) \{", text, re.M))


def check_command(command: str) -> None:
    """The command names a script, step or dhash subcommand that exists, and only options
    the script defines."""
    from benchmarks.__main__ import STAGES
    from dask_hashcodes.cli.options import COMMANDS

    words = shlex.split(command)
    while words and re.match(r"^[A-Z_]+=", words[0]):  # environment assignments
        words.pop(0)
    assert words, command
    if words[0] == "bash":
        script = REPO / words[1]
        assert script.is_file(), f"{command}: no script {words[1]}"
        for step in words[2:]:
            assert step in steps(script), f"{command}: {words[1]} has no step {step}"
    elif words[:3] == [".venv/bin/python", "-m", "benchmarks"]:
        assert words[3] in STAGES, f"{command}: python -m benchmarks has no stage {words[3]}"
    elif words[0] == ".venv/bin/python":
        script = REPO / words[1]
        assert words[1].startswith("benchmarks/") and script.is_file(), f"{command}: no script {words[1]}"
        source = script.read_text()
        for option in (w for w in words[2:] if w.startswith("--")):
            assert f'"{option}"' in source, f"{command}: {words[1]} defines no option {option}"
    elif words[0] == ".venv/bin/dhash":
        assert words[1] in COMMANDS, f"{command}: dhash has no subcommand {words[1]}"
    else:
        pytest.fail(f"{command}: an index command starts with bash, .venv/bin/python or .venv/bin/dhash")


def test_every_command_in_the_index_exists():
    commands = [c for _, cs in index_rows() for c in cs if c != "written by hand"]
    assert commands
    for command in commands:
        check_command(command)


def options(command: str) -> tuple[str, list[tuple[str, str]]]:
    """(program, sorted (option, value) pairs) of a command written as its words joined by
    spaces, the way results record ``sys.argv`` (so a value may hold spaces): the program is
    the benchmark script, ``benchmarks STAGE`` or ``dhash SUBCOMMAND``, whatever interpreter
    ran it. ``dhash bench STAGE``, what the stage benchmarks were run as before they moved
    out of the installed package, is ``benchmarks STAGE``."""
    command = re.sub(r"^\S*dhash bench |^\S*python -m benchmarks ", "benchmarks ", command)
    program = re.search(r"(benchmarks/\w+\.py|benchmarks \w+|dhash \w+(?: \w+)?)(?= |$)", command)
    assert program, command
    rest = command[program.end() :]
    pairs = []
    for part in re.split(r" (?=--[a-z])", rest.strip()):
        if part:
            option, _, value = part.partition(" ")
            pairs.append((option, value.strip().strip("'")))
    return re.sub(r"^\S*dhash", "dhash", program.group(1)), sorted(pairs)


def recorded_command(out: str) -> str | None:
    """The command a result at ``out`` (a .json, or the stem of .json/.md) says made it."""
    path = REPO / out
    for candidate in (path, path.with_name(path.name + ".json"), path.with_name(path.name + ".md")):
        if not candidate.is_file():
            continue
        if candidate.suffix == ".json":
            data = json.loads(candidate.read_text())
            if isinstance(data, dict) and isinstance(data.get("command"), str):
                return data["command"]
        else:
            found = re.search(r"^-? ?[Cc]ommand: `([^`]+)`", candidate.read_text(), re.M)
            if found:
                return found.group(1)
    return None


def _recorded(command: str) -> str:
    """A recorded command without the note some results add after it in parentheses."""
    return re.sub(r"\s+\(.*\)$", "", command)


def _out(command: str) -> str | None:
    found = re.search(r" --out (\S+)", command)
    return found and found.group(1)


def _without(pairs, *names):
    return [(k, v) for k, v in pairs if k not in names]


# how a run script's commands may differ from the recorded ones: --overwrite and --quiet change
# no result, and the speed results ran on copies of the same generated rows at other paths
IGNORED = ("--out", "--overwrite", "--quiet", "--data")


def test_index_commands_are_the_commands_the_results_record():
    compared = 0
    for patterns, commands in index_rows():
        listed = {name for pattern in patterns for name in matched(pattern)}
        for command in commands:
            out = _out(" ".join(shlex.split(command))) if command.startswith(".venv/") else None
            recorded = recorded_command(out) if out else None
            recorded = recorded and _recorded(recorded)
            if recorded is None or _out(recorded) != out:
                continue  # no record, or a run renamed after it ran (the index says why)
            if out not in {f"benchmarks/results/{name}" for name in listed} | {
                f"benchmarks/results/{name.rsplit('.', 1)[0]}" for name in listed
            }:
                continue  # renamed after it ran, and another run took its name since (the index says why)
            ours = options(" ".join(shlex.split(command)))
            theirs = options(recorded)
            assert ours == theirs, f"the index's command for {out} differs from the one it records:\n{recorded}"
            compared += 1
    assert compared >= 10


def dry_run(script: str) -> list[str]:
    return subprocess.run(
        ["bash", script], cwd=REPO, env={**os.environ, "DRY_RUN": "1"}, capture_output=True, text=True, check=True
    ).stdout.splitlines()


def test_run_scripts_hold_the_commands_the_results_record():
    """Every sweep and stage benchmark result is made by a line of run_quality.sh or
    run_performance.sh whose options are the ones it records (its --out may have been a
    scratch path, then moved here)."""
    by_out = {}
    for script in RUN_SCRIPTS:
        for line in dry_run(script):
            if _out(line):
                by_out[_out(line)] = line
    checked = 0
    for path in sorted(RESULTS.glob("*.json")):
        recorded = _recorded(json.loads(path.read_text()).get("command", ""))
        rel = str(path.relative_to(REPO))
        if path.name.startswith("sweep_") or json.loads(path.read_text()).get("schema") == "dhash.bench/1":
            assert rel in by_out, f"no line of {' or '.join(RUN_SCRIPTS)} writes {rel}"
        if rel not in by_out:
            continue
        program, ours = options(by_out[rel])
        assert (program, _without(ours, *IGNORED)) == (
            options(recorded)[0],
            _without(options(recorded)[1], *IGNORED),
        ), f"{rel} records another command than the run script's:\n{recorded}\n{by_out[rel]}"
        checked += 1
    assert checked >= 40


def test_summary_tables_rebuild_from_the_committed_results(tmp_path):
    """performance.md, quality.md and the papers' tables are what their scripts make from the
    committed results, so the results kept are the ones they need."""
    sys.path.insert(0, str(REPO))
    from benchmarks import summarize_performance, summarize_quality, tables

    assert summarize_performance.table() == (RESULTS / "performance.md").read_text()

    out = tmp_path / "quality.md"
    summarize_quality.main([str(RESULTS / "quality"), "--out", str(out)])
    assert out.read_text() == (RESULTS / "quality.md").read_text()

    for table in tables.TABLES:
        reports = {run.name: tables.run_results(run, tables.OUT / "reports" / run.name, False) for run in table.runs}
        text, _ = tables.render(table, {k: v for k, v in reports.items() if v is not None})
        assert text == (tables.OUT / f"{table.name}.md").read_text(), table.name

    from benchmarks import mac_scale, mac_settings

    assert mac_settings.table(RESULTS / "mac" / "settings") == (RESULTS / "mac" / "settings" / "README.md").read_text()
    assert mac_scale.table(RESULTS / "mac" / "scale") == (RESULTS / "mac" / "scale" / "README.md").read_text()


def _remove_committed_report(repo: Path, target: str) -> None:
    script = REPO / "benchmarks" / "committed_report.sh"
    done = subprocess.run(
        ["bash", "-c", f'source "{script}" && remove_committed_report "$1"', "_", target],
        cwd=repo,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr


def test_run_scripts_remove_only_a_committed_unmodified_report(tmp_path):
    """Before re-running a committed report the run scripts remove it, but only a directory
    under benchmarks/results/ whose every file git tracks unmodified (git keeps that copy):
    a user's file inside, a local edit, an untracked directory, a path outside the results
    or a symlink out of them is left alone (dhash's ownership rule then refuses it)."""
    repo = tmp_path / "repo"
    results = repo / "benchmarks" / "results"
    for name in ("clean", "extra", "edited"):
        (results / name).mkdir(parents=True)
        (results / name / "report.md").write_text("committed\n")
    outside = tmp_path / "home"
    outside.mkdir()
    (outside / "mine.txt").write_text("a user's file\n")
    (results / "link").symlink_to(outside)

    def git(*args):
        subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)

    git("init", "-q")
    git("add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "results")
    (results / "extra" / "notes.txt").write_text("a user's file\n")
    (results / "edited" / "report.md").write_text("edited locally\n")
    (results / "untracked").mkdir()
    (results / "untracked" / "report.md").write_text("never committed\n")

    for name in ("clean", "extra", "edited", "untracked", "link"):
        _remove_committed_report(repo, f"benchmarks/results/{name}")
    _remove_committed_report(repo, str(outside))
    _remove_committed_report(repo, "benchmarks/results/../../home")

    assert not (results / "clean").exists()
    assert (results / "extra" / "notes.txt").read_text() == "a user's file\n"
    assert (results / "edited" / "report.md").read_text() == "edited locally\n"
    assert (results / "untracked" / "report.md").exists()
    assert (outside / "mine.txt").read_text() == "a user's file\n" and (results / "link").is_symlink()
