"""The schedule examples in jobs/schedules/ (a crontab, a systemd service and its timer) run
commands that exist: every ``dhash run`` line parses with the command line's own parser, names
a shipped pipeline file that loads, and the calendar and exit-status settings mean what their
comments say."""

from __future__ import annotations

import configparser
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from dask_hashcodes.cli.main import parse_args
from dask_hashcodes.cli.run import EXIT_LOCKED, load_pipeline

REPO = Path(__file__).resolve().parents[1]
SCHEDULES = REPO / "jobs" / "schedules"
CHECKOUT = "/opt/hashing"  # where the examples assume the checkout and its virtualenv
# cron's five time fields: minute, hour, day of month, month, day of week (numbers, */n, ranges, lists)
CRON_RANGES = [(0, 59), (0, 23), (1, 31), (1, 12), (0, 7)]


def _unit(name: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # systemd keys are case-sensitive
    parser.read_string((SCHEDULES / name).read_text())
    return parser


def _crontab_entries() -> list[tuple[list[str], str]]:
    entries = []
    for line in (SCHEDULES / "crontab").read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            *times, command = line.split(None, 5)
            entries.append((times, command))
    return entries


def _check_dhash_run(command: str) -> None:
    argv = shlex.split(command)
    assert argv[0] == f"{CHECKOUT}/.venv/bin/dhash", argv[0]
    argv = [a.replace(CHECKOUT, str(REPO)) for a in argv[1:]]
    name, values = parse_args(argv)
    assert name == "run" and values["quiet"], argv
    pipeline = Path(values["pipeline"])
    assert pipeline.is_file(), pipeline
    pipe = load_pipeline(pipeline, date="2026-01-01", workdir=values["workdir"])
    assert pipe.steps and all(str(p).startswith(values["workdir"]) for s in pipe.steps for p in s.outputs)


def _cron_field_ok(field: str, low: int, high: int) -> bool:
    for part in field.split(","):
        m = re.fullmatch(r"(\*|(\d+)(?:-(\d+))?)(?:/(\d+))?", part)
        if not m:
            return False
        numbers = [int(n) for n in m.group(2, 3) if n is not None]
        if any(not low <= n <= high for n in numbers) or (m.group(4) is not None and int(m.group(4)) < 1):
            return False
    return True


def test_crontab_runs_the_shipped_pipelines_with_valid_times():
    entries = _crontab_entries()
    assert len(entries) == 2
    for times, command in entries:
        assert len(times) == 5 and all(_cron_field_ok(f, *r) for f, r in zip(times, CRON_RANGES)), times
        _check_dhash_run(command)


def test_cron_field_check_rejects_what_cron_rejects():
    assert not _cron_field_ok("60", 0, 59) and not _cron_field_ok("*/0", 0, 59) and not _cron_field_ok("2h", 0, 23)
    assert _cron_field_ok("*/15", 0, 59) and _cron_field_ok("1-5", 0, 7) and _cron_field_ok("0,30", 0, 59)


def test_systemd_service_runs_the_nightly_pipeline_and_accepts_a_held_lock():
    service = _unit("dhash-nightly.service")["Service"]
    assert service["Type"] == "oneshot"
    _check_dhash_run(service["ExecStart"])
    # a run that finds another holding the lock exits 75 at once: not a failed unit
    assert int(service["SuccessExitStatus"]) == EXIT_LOCKED


def test_systemd_timer_starts_the_service_nightly():
    timer = _unit("dhash-nightly.timer")
    assert timer["Install"]["WantedBy"] == "timers.target" and timer["Timer"]["Persistent"] == "true"
    calendar = timer["Timer"]["OnCalendar"]
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed: the calendar expression is not checked")
    done = subprocess.run([analyze, "calendar", calendar], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "Normalized form: *-*-* 02:00:00" in done.stdout
