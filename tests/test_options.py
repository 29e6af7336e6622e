"""Flags, --help, --config keys and the config schema all come from the one option table;
its method options come from the estimators (defaults, types, every settable parameter)."""

import ast
import contextlib
import inspect
import io
import json
import re
import tomllib
from pathlib import Path

import pytest

from dask_hashcodes.cli.main import build_parser, parse_args
from dask_hashcodes.cli.method_options import (
    ARGUMENT_FLAGS,
    NOT_FLAGS,
    flag_params,
    method_flag,
    parameter_help,
    variants,
)
from dask_hashcodes.cli.option_types import NameOrPairs, Number, boolean, positive_int_list, show_value
from dask_hashcodes.cli.options import COMMANDS, OPTIONS, config_schema, method_params, options_of
from dask_hashcodes.errors import InputError
from dask_hashcodes.hashing import registry
from dask_hashcodes.hashing.constraints import parameter_docs
from dask_hashcodes.hashing.registry import HASHERS, SHORT_FLAGS, make_hasher

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
_OWN_OPTIONS = [o for o in _METHOD_OPTIONS if not o.short_for]


def _reaching(opt):
    """(method name, base estimator) pairs through which ``opt`` sets its parameter."""
    return [(name, base) for base in opt.methods for name in variants(base, opt.param)]


def _train(method, *flags):
    argv = ["train", "--dataset", "d.zarr", "--method", method, "--out", "m", *flags]
    command, values = parse_args(argv)
    params = registry.method_params(method, method_params(command, values))
    return make_hasher(method, values["bits"], random_state=values["seed"], **params)


def test_method_flags_derive_from_parameter_names():
    """Every flagged parameter's flag is --{method}-{param}, and the only other names are
    the registry's SHORT_FLAGS, each standing for those flags; no flag is named twice."""
    own = {(o.methods, o.param): o.name for o in _OWN_OPTIONS}
    expected = {((m,), p): method_flag(m, p) for m, cls in HASHERS.items() for p in flag_params(cls)}
    assert own == expected
    assert all(own[(m,), p] == f"{m}-{p.replace('_', '-')}" for (m,), p in own)
    shorts = {o.name: (o.methods, o.param) for o in _METHOD_OPTIONS if o.short_for}
    assert shorts == dict(SHORT_FLAGS)
    for opt in _METHOD_OPTIONS:
        if opt.short_for:
            assert opt.short_for == tuple(f"--{method_flag(m, opt.param)}" for m in opt.methods)
            assert all(flag in opt.help for flag in opt.short_for)
    for command in COMMANDS:  # two options of a command under one name would hide one
        names = [o.name for o in OPTIONS if command in o.commands]
        assert len(names) == len(set(names)), command


@pytest.mark.parametrize("opt", _OWN_OPTIONS, ids=lambda o: o.name)
def test_method_option_defaults_are_the_estimators(opt):
    """Not given, a flag leaves the estimator's default; its help prints that default."""
    assert opt.default is None
    (base,) = opt.methods
    default = HASHERS[base]().get_params()[opt.param]
    assert opt.estimator_defaults[base] == default
    assert opt.help.endswith(f"(default {show_value(default)})"), opt.help
    for name, _ in _reaching(opt):
        assert _train(name).get_params()[opt.param] == default, (name, opt.param)


def _docstring_entries(cls) -> dict:
    """name -> description of the numpydoc Parameters section, read here independently of
    the library's parser: the section's lines up to the next heading, a ``name : type``
    line starting each entry."""
    lines = inspect.cleandoc(cls.__doc__).splitlines()
    start = lines.index("Parameters") + 2
    assert set(lines[start - 1]) == {"-"}, cls.__name__
    entries, name = {}, None
    for line, following in zip(lines[start:], [*lines[start + 1 :], ""], strict=True):
        if following.startswith("---"):
            break
        if line and not line.startswith(" "):
            name = line.split(" : ")[0]
            entries[name] = []
        elif name:
            entries[name].append(line.strip())
    return {k: " ".join(" ".join(v).split()) for k, v in entries.items()}


def test_every_estimator_parameter_is_reachable_with_its_docstring_help():
    """Every parameter of every registered estimator, except make_hasher's arguments (--bits,
    --seed) and NOT_FLAGS, has a flag that ``dhash train --help`` lists, with the help text
    of the parameter's entry in the estimator's numpydoc Parameters section."""
    text = _help(["train", "--help"])
    for method, cls in HASHERS.items():
        entries = _docstring_entries(cls)
        for param in cls().get_params():
            if param in ARGUMENT_FLAGS or param in NOT_FLAGS:
                continue
            assert param in entries, f"{cls.__name__}'s docstring has no Parameters entry for {param}"
            flag = f"--{method}-{param.replace('_', '-')}"
            opt = options_of("train").get(flag[2:].replace("-", "_"))
            assert opt is not None and opt.flag == flag and opt.param == param, flag
            assert entries[param] in opt.help, (flag, entries[param])
            assert f"{flag} " in text and entries[param] in text, flag
    for param, flag in ARGUMENT_FLAGS.items():
        assert all(flag in {o.name for o in options_of(c).values()} for c in ("train", "evaluate")), param


def test_a_parameter_without_a_docstring_entry_fails():
    """The docstring is the only description: a parameter it leaves out has no help."""

    class Undocumented(registry.HASHERS["itq"]):
        """ITQ with its parameters undocumented.

        Parameters
        ----------
        n_bits : int, default=32
            Code length.
        """

    with pytest.raises(LookupError, match="no Parameters entry for n_iter"):
        parameter_help(Undocumented, "n_iter")


def test_docstring_defaults_are_the_signatures():
    """A Parameters entry's ``default=`` is the estimator's default, so the API reference
    and --help never disagree."""
    for cls in HASHERS.values():
        defaults = cls().get_params()
        for name, doc in parameter_docs(cls).items():
            assert ast.literal_eval(doc.type.rpartition("default=")[2]) == defaults[name], (cls.__name__, name)


def test_the_parameters_section_parser():
    def documented():
        """Summary.

        Parameters
        ----------
        alpha : float, default=1.0
            First line
            and the second.
        beta, gamma : {'a', 'b'}
            Shared.

        Returns
        -------
        delta : int
            Not a parameter.
        """

    docs = parameter_docs(documented)
    assert list(docs) == ["alpha", "beta", "gamma"]
    assert docs["alpha"].description == "First line and the second."
    assert docs["alpha"].type == "float, default=1.0"
    assert docs["gamma"].description == "Shared."
    assert parameter_docs(lambda: None) == {}


def test_a_shared_flag_sets_only_the_estimators_it_names():
    """--rho is DisH's and SGH's rho; DGH's rho (another quantity) only follows --dgh-rho."""
    rho = next(o for o in _METHOD_OPTIONS if o.name == "rho")
    assert set(rho.methods) == {"dish", "sgh"}
    with pytest.raises(InputError, match="--rho sets rho of dish, dish-allreduce, sgh, and this train runs dgh"):
        _train("dgh", "--rho", "5")
    assert _train("dgh", "--dgh-rho", "3").rho == 3.0
    assert _train("sgh", "--rho", "5").rho == 5.0
    assert _train("sgh", "--sgh-rho", "2", "--rho", "5").rho == 2.0  # the method's own flag wins


def test_every_existing_short_flag_keeps_working():
    """Scripts and configs written with the short flags set the same parameters."""
    assert _train("itq", "--n-iter", "7").n_iter == 7
    assert _train("itq", "--itq-n-iter", "7").n_iter == 7
    assert _train("mac", "--kappa-plus", "9").n_similar == 9
    assert _train("adsh", "--omega", "300").n_samples == 300
    assert _train("dpsh", "--dpsh-eta", "0.5").quantisation_weight == 0.5
    assert _train("agh2", "--agh-anchors", "50").n_anchors == 50


def test_a_variant_does_not_take_the_flag_of_the_parameter_it_fixes():
    with pytest.raises(InputError, match="--agh-layers sets layers of agh, and this train runs agh2"):
        _train("agh2", "--agh-layers", "1")
    assert _train("agh", "--agh-layers", "2").layers == 2


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


def test_a_parameter_error_names_the_flag_of_that_estimators_parameter():
    """The constraints name the estimator, so the command line shows the flag of exactly that
    parameter, even where one parameter name has a flag per method."""
    from dask_hashcodes.cli.commands import cli_message
    from dask_hashcodes.hashing.constraints import InvalidParameter

    for model, said in (
        (HASHERS["dgh"](rho=-1.0), "--dgh-rho must be a float in the range [0, inf). Got -1.0 instead."),
        (HASHERS["sgh"](rho=-1.0), "--rho must be a float in the range (0, inf) or None. Got -1.0 instead."),
    ):
        with pytest.raises(InvalidParameter) as refused:
            model._validate_params()
        assert cli_message(refused.value) == said
