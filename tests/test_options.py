"""Flags, --help, --config keys and the config schema all come from the one option table;
its method options come from the estimators (defaults, types, every settable parameter)."""

import contextlib
import io
import json
import re
import tomllib
from pathlib import Path

import pytest

from dask_hashcodes.cli.main import build_parser, parse_args
from dask_hashcodes.cli.options import (
    ARGUMENT_FLAGS,
    COMMANDS,
    DESCRIPTIONS,
    NOT_FLAGS,
    OPTIONS,
    PARAM_FLAGS,
    NameOrPairs,
    Number,
    _variants,
    boolean,
    config_schema,
    method_params,
    options_of,
    positive_int_list,
    show_value,
)
from dask_hashcodes.errors import InputError
from dask_hashcodes.hashing import registry
from dask_hashcodes.hashing.registry import HASHERS, METHOD_VARIANTS, make_hasher

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
        "re-generate it: python -m dask_hashcodes.cli.options > data_schemas/config.schema.json"
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


# ------------------------------------------------------- method options vs estimators ----

_METHOD_OPTIONS = [o for o in OPTIONS if o.param is not None]


def _reaching(opt):
    """(method name, base estimator) pairs through which ``opt`` sets its parameter."""
    return [(name, base) for base in opt.methods for name in _variants(base, opt.param)]


def _train(method, *flags):
    argv = ["train", "--dataset", "d.zarr", "--method", method, "--out", "m", *flags]
    command, values = parse_args(argv)
    params = registry.method_params(method, method_params(command, values))
    return make_hasher(method, values["bits"], random_state=values["seed"], **params)


def test_method_options_are_exactly_the_generated_ones():
    """Every option with a parameter comes from PARAM_FLAGS, and no flag is named twice."""
    assert [o.name for o in _METHOD_OPTIONS] == [flag for flag, _, _ in PARAM_FLAGS]
    assert len({flag for flag, _, _ in PARAM_FLAGS}) == len(PARAM_FLAGS)
    assert len(set(PARAM_FLAGS)) == len({(m, p) for _, m, p in PARAM_FLAGS})
    for command in COMMANDS:  # two options of a command under one name would hide one
        names = [o.name for o in OPTIONS if command in o.commands]
        assert len(names) == len(set(names)), command


@pytest.mark.parametrize("opt", _METHOD_OPTIONS, ids=lambda o: o.name)
def test_method_option_defaults_are_the_estimators(opt):
    """Not given, a flag leaves the estimator's default; its help prints that default."""
    assert opt.default is None
    for name, base in _reaching(opt):
        default = HASHERS[base]().get_params()[opt.param]
        assert opt.estimator_defaults[base] == default, (name, opt.param)
        assert _train(name).get_params()[opt.param] == default, (name, opt.param)
        shown = show_value(default)
        assert f"(default {shown})" in opt.help or f"{base} {shown}" in opt.help, (opt.name, base, opt.help)
        assert DESCRIPTIONS[base, opt.param] in opt.help


def test_every_estimator_parameter_is_reachable():
    """A parameter a user can set has a flag, is fixed by a method name (agh2 = agh with
    layers = 2), is an argument the workflows pass (--bits, --seed), or is listed in
    NOT_FLAGS with the reason there."""
    flagged = {(m, o.param) for o in _METHOD_OPTIONS for m in o.methods}
    for method, cls in HASHERS.items():
        by_name = {p for base, fixed in METHOD_VARIANTS.values() if base == method for p in fixed}
        for param in cls().get_params():
            reachable = (method, param) in flagged or param in by_name or param in NOT_FLAGS
            assert reachable or param in ARGUMENT_FLAGS, f"{method}.{param} has no flag: add it to PARAM_FLAGS"
    for param, flag in ARGUMENT_FLAGS.items():
        assert all(flag in {o.name for o in options_of(c).values()} for c in ("train", "evaluate")), param


def test_every_description_describes_a_flag():
    described = {(m, o.param) for o in _METHOD_OPTIONS for m in o.methods}
    assert set(DESCRIPTIONS) == described
    for text in DESCRIPTIONS.values():  # defaults are printed from the estimator, never written
        assert "default" not in text, text


def test_a_shared_flag_sets_only_the_estimators_without_their_own():
    """--rho is DisH's and SGH's rho; DGH's rho (another quantity) only follows --dgh-rho."""
    rho = next(o for o in _METHOD_OPTIONS if o.name == "rho")
    assert set(rho.methods) == {"dish", "sgh"}
    with pytest.raises(InputError, match="--rho sets rho of dish, dish-allreduce, sgh, and this train runs dgh"):
        _train("dgh", "--rho", "5")
    assert _train("dgh", "--dgh-rho", "3").rho == 3.0
    assert _train("sgh", "--rho", "5").rho == 5.0


def _other_value(opt, default):
    """A valid value of ``opt`` that is not ``default``, as (flag text, parsed value)."""
    if opt.choices is not None:
        value = next(c for c in opt.choices if c != default)
        return value, value
    if isinstance(opt.type, NameOrPairs):
        value = next(c for c in opt.type.names if c != default)
        return value, value
    if opt.type is boolean:
        return str(not default).lower(), not default
    if opt.type is positive_int_list:
        return "3,4", [3, 4]
    assert isinstance(opt.type, Number), opt.name
    start = default if default is not None else opt.type.low or 1
    candidates = [start + 1, start - 1] if opt.type.integer else [start * 0.5, start * 2, 0.5, 2.0]
    value = next(v for v in candidates if v != default and opt.type._holds(v))
    return str(value), value


@pytest.mark.parametrize("opt", _METHOD_OPTIONS, ids=lambda o: o.name)
def test_a_flag_sets_exactly_its_estimator_parameter(opt):
    """Round trip: flag text -> parse_args -> method_params -> make_hasher sets the
    parameter to the value, in every method the flag reaches, and changes nothing else."""
    for name, _ in _reaching(opt):
        before = _train(name).get_params()
        flag_text, value = _other_value(opt, before[opt.param])
        after = _train(name, opt.flag, flag_text).get_params()
        assert after[opt.param] == value, (name, opt.name)
        assert {k: v for k, v in after.items() if k != opt.param} == {
            k: v for k, v in before.items() if k != opt.param
        }, (name, opt.name)


def test_a_flag_reaches_no_method_it_does_not_name():
    """Each method of an evaluate run gets only the parameters of its own estimator."""
    argv = ["evaluate", "--dataset", "d", "--out", "r", "--methods", "sgh,dgh,dish-allreduce", "--rho", "4"]
    command, values = parse_args(argv)
    params = method_params(command, values)
    assert params == {"dish": {"rho": 4.0}, "sgh": {"rho": 4.0}}
    assert registry.method_params("dgh", params) == {}
    assert registry.method_params("dish-allreduce", params) == {"rho": 4.0}


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (
            ["evaluate", "--methods", "itq,lsh", "--bre-sweeps", "3"],
            "--bre-sweeps sets n_iter of bre, and this evaluate",
        ),
        (["evaluate", "--methods", "itq", "--nodes", "3"], "--nodes sets nodes of dish, dish-allreduce"),
        (["evaluate", "--methods", "cut,quad", "--mac-max-iter", "3"], "sets max_iter of mac, maccut, macquad,"),
        (["train", "--method", "sgh", "--dgh-rho", "3"], "--dgh-rho sets rho of dgh, and this train runs sgh"),
    ],
)
def test_a_flag_for_no_method_run_is_refused(argv, fragment):
    """A method option for a method the command does not run is a mistake, not ignored."""
    command, values = parse_args([*argv, "--dataset", "d", "--out", "r"])
    with pytest.raises(InputError, match="remove") as refused:
        method_params(command, values)
    assert fragment in str(refused.value) and "\n" not in str(refused.value)


def test_a_config_file_sets_method_parameters_as_the_flags_do(tmp_path):
    (tmp_path / "c.toml").write_text(
        '[evaluate]\ndataset = "d"\nmethods = "dish,sgh,usplh"\nout = "m"\ntopology = [[0, 1], [1, 0]]\n'
        "nodes = 2\nsgh-refine = false\ndecay = 0.25\n"
    )
    _, values = parse_args(["evaluate", "--config", str(tmp_path / "c.toml")])
    assert method_params("evaluate", values) == {
        "dish": {"nodes": 2, "topology": [[0, 1], [1, 0]]},
        "sgh": {"refine": False},
        "usplh": {"decay": 0.25},
    }
