"""Flags, --help, --config keys and the config schema all come from the one option table."""

import contextlib
import io
import json
import re
import tomllib
from pathlib import Path

import pytest

from dhash.jobs.cli import build_parser, parse_args
from dhash.jobs.options import COMMANDS, OPTIONS, config_schema, options_of

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _wide_help(monkeypatch):
    monkeypatch.setenv("COLUMNS", "2000")  # argparse wraps help at hyphens otherwise


def _help(argv) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        build_parser().parse_args(argv)
    return " ".join(out.getvalue().split())


def test_top_level_help_lists_every_command():
    text = _help(["--help"])
    for command, help_ in COMMANDS.items():
        assert command in text and " ".join(help_.split()) in text


@pytest.mark.parametrize("command", list(COMMANDS))
def test_each_command_help_shows_exactly_the_table_options(command):
    text = _help([command, "--help"])
    table = options_of(command).values()
    assert set(re.findall(r"--[a-z0-9-]+", text)) - {"--help"} == {o.flag for o in table if not o.positional}
    for opt in table:
        assert " ".join(opt.help.split()) in text, opt.name


def test_committed_config_schema_is_the_table():
    committed = json.loads((REPO / "data_schemas" / "config.schema.json").read_text())
    assert committed == config_schema(), (
        "re-generate it: python -m dhash.jobs.options > data_schemas/config.schema.json"
    )
    for command in COMMANDS:
        keys = set(committed["properties"][command]["properties"])
        assert keys == {o.name for o in options_of(command).values()} - {"config"}


@pytest.mark.parametrize("path", sorted((REPO / "jobs" / "configs").glob("*.toml")), ids=lambda p: p.name)
def test_shipped_configs_follow_the_schema(path):
    jsonschema = pytest.importorskip("jsonschema")
    data = tomllib.loads(path.read_text())
    schema = config_schema()
    if "steps" not in data:
        jsonschema.validate(data, schema)
        return
    for step in data["steps"]:  # a pipeline: each step is a command's table (+ `command`)
        # "{var}" placeholders are substituted at run time, so their type is checked then
        options = {k: v for k, v in step.items() if k != "command" and not (isinstance(v, str) and "{" in v)}
        jsonschema.validate(options, schema["properties"][step["command"]])


def test_defaults_come_from_the_table():
    _, values = parse_args(["train", "--dataset", "d", "--method", "itq", "--out", "m"])
    for dest, opt in options_of("train").items():
        if dest not in ("dataset", "method", "out"):
            assert values[dest] == opt.default_for("train"), dest
    _, demo = parse_args(["demo"])
    assert demo["bits"] == [32, 64] and demo["methods"] == ["lsh", "pcah", "itq", "dish"]


def test_every_option_is_documented():
    for opt in OPTIONS:
        assert opt.help.strip() and opt.commands, opt.name
