"""Every option acts or is refused: given (on the command line or in a --config file) where it
would do nothing, an option is refused with exit status 2 and one line naming it, before
any cluster starts or anything is written. The cases walk the option table: each condition
of an Option's ``applies`` must be broken by one of them, and each option is accepted where
its conditions hold."""

from __future__ import annotations

import pytest

from dask_hashcodes.cli import commands
from dask_hashcodes.cli import main as cli
from dask_hashcodes.cli.method_options import METHOD_OPTIONS, variants
from dask_hashcodes.cli.option_types import NameOrPairs, Number, boolean
from dask_hashcodes.cli.options import CLUSTER_COMMANDS, conditions, method_params, refuse_unused
from dask_hashcodes.hashing.registry import METHOD_NAMES

SCHEDULER = ["--scheduler", "tcp://127.0.0.1:1"]  # never reached: refusals come first


def _base(command: str) -> list[str]:
    """A command line of ``command`` with its required options (paths relative to the test's
    working directory, which is empty)."""
    return {
        "ingest": ["ingest", "x.npy", "--out", "o.zarr"],
        "synth": ["synth", "sift", "--out", "o.zarr"],
        "split": ["split", "--dataset", "d.zarr"],
        "groundtruth": ["groundtruth", "--dataset", "d.zarr"],
        "train": ["train", "--dataset", "d.zarr", "--method", "itq", "--out", "m"],
        "encode": ["encode", "--dataset", "d.zarr", "--model", "m", "--out", "c.zarr"],
        "index": ["index", "--codes", "c.zarr", "--out", "i.zarr"],
        "search": ["search", "--dataset", "d.zarr", "--model", "m", "--codes", "c.zarr", "--out", "r.parquet"],
        "evaluate": ["evaluate", "--dataset", "d.zarr", "--out", "rep"],
        "demo": ["demo", "--out", "demo"],
        "run": ["run", "p.toml"],
    }[command]


def _cluster_cases():
    """(refused, accepted) command lines of the cluster and job options, for every command."""
    sizes = (("--workers", "2"), ("--threads", "2"))
    report, storage = ["--performance-report", "r.html"], ["--storage-options", "{}"]
    for command in CLUSTER_COMMANDS:
        base = _base(command)
        if command == "ingest":  # no cluster at all
            for option in ([f, v] for f, v in sizes):
                yield [*base, *option], None
            yield [*base, *SCHEDULER], None
            yield [*base, *report], None
        else:
            for flag, value in sizes:
                yield [*base, flag, value, *SCHEDULER], [*base, flag, value]
        if command == "run":
            yield [*base, *report], None
        else:  # the last value of every base command line is a location
            yield [*base, *storage], [*base[:-1], "s3://bucket/" + base[-1], *storage]


_SEARCH = _base("search")
_EVALUATE = _base("evaluate")
_RECALL = [*_EVALUATE, "--recall-at", "10"]
_INDEX = _base("index")
CASES = [
    # ingest: a built-in source brings its own vectors and labels
    *[
        (["ingest", "fashion-mnist", "--out", "o.zarr", flag, value], [*_base("ingest"), flag, value])
        for flag, value in (("--format", "npy"), ("--column", "v"), ("--labels", "l.npy"), ("--label-column", "y"))
    ],
    # index: each kind's own options
    ([*_INDEX, "--kind", "mih", "--lists", "16"], [*_INDEX, "--kind", "ivf", "--lists", "16"]),
    ([*_INDEX, "--kmeans-rows", "300"], [*_INDEX, "--kind", "ivf", "--kmeans-rows", "300"]),
    ([*_INDEX, "--quantiser-dims", "32"], [*_INDEX, "--kind", "ivf", "--quantiser-dims", "32"]),
    ([*_INDEX, "--quantiser", "codes"], [*_INDEX, "--kind", "ivf", "--quantiser", "codes"]),
    ([*_INDEX, "--dataset", "d.zarr"], [*_INDEX, "--kind", "ivf", "--dataset", "d.zarr"]),
    ([*_INDEX, "--seed", "3"], [*_INDEX, "--kind", "ivf", "--seed", "3"]),
    ([*_INDEX, "--kind", "ivf", "--substrings", "4"], [*_INDEX, "--substrings", "4"]),
    (
        [*_INDEX, "--kind", "ivf", "--split", "s"],
        ["index", "--kind", "residual", "--dataset", "d.zarr", "--out", "i", "--split", "s"],
    ),  # fmt: skip
    (
        [*_INDEX, "--kind", "residual", "--dataset", "d.zarr"],
        ["index", "--kind", "residual", "--dataset", "d.zarr", "--out", "i"],
    ),  # fmt: skip
    (
        [*_INDEX, "--rotation", "learned"],
        ["index", "--kind", "residual", "--dataset", "d.zarr", "--out", "i", "--rotation", "learned"],
    ),  # fmt: skip
    (
        [*_INDEX, "--tune-rows", "100"],
        ["index", "--kind", "residual", "--dataset", "d.zarr", "--out", "i", "--tune-rows", "100"],
    ),  # fmt: skip
    (
        ["index", "--kind", "residual", "--dataset", "d.zarr", "--out", "i", "--target-recall", "0.95"],
        [
            "index",
            "--kind",
            "residual",
            "--dataset",
            "d.zarr",
            "--out",
            "i",
            "--tune-rows",
            "100",
            "--target-recall",
            "0.95",
        ],
    ),  # fmt: skip
    # search
    ([*_SEARCH, "--nprobe", "2"], [*_SEARCH, "--index", "i.zarr", "--nprobe", "2"]),
    ([*_SEARCH, "--candidates", "50"], [*_SEARCH, "--rerank", "exact", "--candidates", "50"]),
    ([*_SEARCH, "--radius", "3", "--rerank", "exact"], [*_SEARCH, "--rerank", "exact"]),
    ([*_SEARCH, "--radius", "3", "--recall"], [*_SEARCH, "--recall"]),
    # train: options of some methods
    (
        [*_base("train")[:-4], "--method", "lsh", "--out", "m", "--codes", "c.zarr"],
        [*_base("train")[:-4], "--method", "adsh", "--out", "m", "--codes", "c.zarr"],
    ),
    ([*_base("train")[:-4], "--method", "lsh", "--out", "m", "--resume"], [*_base("train"), "--resume"]),
    # evaluate, demo, groundtruth
    ([*_EVALUATE, "--n", "1000"], ["evaluate", "--dataset", "sift-synth", "--out", "rep", "--n", "1000"]),
    (
        [*_EVALUATE, "--chunk-rows", "1000"],
        ["evaluate", "--dataset", "sift-synth", "--out", "rep", "--chunk-rows", "9"],
    ),
    (
        [*_EVALUATE, "--ground-truth", "labels", "--top-k", "10"],
        [*_EVALUATE, "--ground-truth", "euclidean", "--top-k", "10"],
    ),
    ([*_EVALUATE, "--ground-truth", "labels", "--top-percent", "2"], [*_EVALUATE, "--top-percent", "2"]),
    *[
        ([*_base(command), "--top-k", "10", "--top-percent", "2"], [*_base(command), "--top-percent", "2"])
        for command in ("groundtruth", "evaluate", "demo")
    ],
    ([*_EVALUATE, "--rerank-candidates", "100"], [*_RECALL, "--rerank-candidates", "100"]),
    ([*_EVALUATE, "--ivf-lists", "16"], [*_RECALL, "--ivf-lists", "16"]),
    ([*_EVALUATE, "--ivf-nprobes", "2"], None),
    ([*_RECALL, "--ivf-nprobes", "2"], [*_RECALL, "--ivf-lists", "16", "--ivf-nprobes", "2"]),
    *[
        (
            [*_base(command), "--methods", "lsh,itq", "--dish2-dictionaries", "1"],
            [*_base(command), "--methods", "lsh,dish", "--dish2-dictionaries", "1"],
        )
        for command in ("evaluate", "demo")
    ],
    (["demo", "--ground-truth", "labels"], None),
    *_cluster_cases(),
]


@pytest.fixture
def no_cluster(monkeypatch, tmp_path):
    """An empty working directory; starting a cluster fails the test."""
    import dask_hashcodes.distributed.cluster as cluster_module

    def connect(*args, **kwargs):
        raise AssertionError("a cluster was started for a command that should have been refused")

    monkeypatch.setattr(cluster_module, "connect", connect)
    monkeypatch.delenv("DASK_SCHEDULER_ADDRESS", raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _broken(argv) -> tuple[str, str, object]:
    """(command, flag, condition) of the first condition the command line breaks."""
    command, values = cli.parse_args(argv)
    for found, opt, condition in conditions():
        if found == command and opt.dest in values.given and not condition.holds(command, values):
            return command, opt.flag, condition
    raise AssertionError(f"no condition of the table is broken by {argv}")


def test_the_cases_break_every_condition_of_the_table():
    """A condition no case breaks is a rule without a test: add a case above."""
    broken = {(command, id(condition)) for off, _ in CASES for command, _, condition in [_broken(off)]}
    missed = [
        f"dhash {command} {opt.flag}: {condition}"
        for command, opt, condition in conditions()
        if (command, id(condition)) not in broken
    ]
    assert not missed, "conditions no case breaks:\n" + "\n".join(missed)


@pytest.mark.parametrize("off", [off for off, _ in CASES], ids=" ".join)
def test_an_option_given_where_it_does_nothing_is_refused_before_work(off, no_cluster, capsys):
    command, flag, condition = _broken(off)
    assert cli.main(off) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: "), err
    assert flag in err, err
    assert "`" not in err and "Traceback" not in err, err
    assert list(no_cluster.iterdir()) == [], "nothing may be written"


@pytest.mark.parametrize("on", [on for _, on in CASES if on is not None], ids=" ".join)
def test_an_option_where_it_applies_is_accepted(on, no_cluster):
    command, values = cli.parse_args(on)
    refuse_unused(command, values, values.given)
    if command in ("train", "evaluate", "demo"):
        method_params(command, values)


def test_an_option_from_the_config_file_counts_as_given(no_cluster, capsys):
    (no_cluster / "c.toml").write_text("[index]\nlists = 16\n")
    assert cli.main([*_INDEX, "--config", "c.toml"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --lists applies only with --kind ivf") and err.count("\n") == 1, err
    assert list(no_cluster.iterdir()) == [no_cluster / "c.toml"]


def test_a_default_is_never_refused(no_cluster):
    """Defaults of options that apply only sometimes (evaluate's --rerank-candidates,
    index's --seed) are not options given."""
    for argv in (_EVALUATE, _INDEX):
        command, values = cli.parse_args(argv)
        refuse_unused(command, values, values.given)


def test_a_pipeline_steps_values_are_checked_too(no_cluster):
    """``dhash run`` gives each step's values without the options it was given: those that
    differ from the defaults are taken as given, except what run fills into every step."""
    command, values = cli.parse_args([*_INDEX, "--kind", "mih", "--lists", "16"])
    with pytest.raises(commands.InputError, match="--lists applies only with --kind ivf"):
        commands.check_before_work(command, dict(values))
    command, values = cli.parse_args(_base("split"))
    step = {**values, "storage_options": {"anon": True}, "overwrite": True, "quiet": True}
    commands.check_before_work(command, step)  # run's own --storage-options: not the step's


# ------------------------------------------------------------------ method options -----


def _sample(opt) -> str:
    """A value the option's type accepts."""
    if opt.choices:
        return str(opt.choices[0])
    if opt.type is boolean:
        return "true"
    if isinstance(opt.type, NameOrPairs):
        return opt.type.names[0]
    if isinstance(opt.type, Number):
        low, high = opt.type.low, opt.type.high
        if low is not None and high is not None:
            return str(low if opt.type.integer else (low + high) / 2)
        if low is not None:
            return str(low + 1 if opt.type.low_open else low)
        return str(high if high is not None else 1)
    return "1"


@pytest.mark.parametrize("opt", METHOD_OPTIONS, ids=lambda o: o.name)
def test_a_method_option_for_a_method_not_run_is_refused_before_work(opt, no_cluster, capsys):
    reached = [name for method in opt.methods for name in variants(method, opt.param)]
    other = next(m for m in METHOD_NAMES if m not in reached)
    train = ["train", "--dataset", "d.zarr", "--out", "m", opt.flag, _sample(opt)]
    assert cli.main([*train, "--method", other]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and opt.flag in err, err
    assert list(no_cluster.iterdir()) == []
    command, values = cli.parse_args([*train, "--method", reached[0]])
    refuse_unused(command, values, values.given)
    method_params(command, values)
