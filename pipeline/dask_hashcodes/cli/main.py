"""``dhash`` command line: ingest | synth | split | groundtruth | train | encode | search |
evaluate | demo | run. Parsing and printing only: the parser is built from the option
table (pipeline/dask_hashcodes/cli/options.py), values come from flags > ``--config`` TOML > defaults, and each
command's body is in pipeline/dask_hashcodes/cli/commands.py. Bad input exits with status 2 and one line
``error: <problem; fix>``.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import signal
import sys

from dask_hashcodes.cli import commands
from dask_hashcodes.cli.commands import pick
from dask_hashcodes.cli.config import load_config
from dask_hashcodes.cli.option_types import toml_scalar
from dask_hashcodes.cli.options import COMMANDS, OptionParser, Values, options_of, refuse_unused
from dask_hashcodes.cli.run import run_pipeline
from dask_hashcodes.errors import InputError

EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT


# ------------------------------------------------------------------ parser -----------


def _add_option(parser, groups: dict, opt) -> None:
    """One argparse argument from a table entry. Defaults are applied after the config is
    merged (None here means "not given on the command line")."""
    target = groups.get(opt.group)
    if target is None:  # not setdefault: its default argument would add a group to the parser every call
        target = groups[opt.group] = parser.add_argument_group(opt.group)
    if opt.positional:
        target.add_argument(opt.dest, nargs="?", help=opt.help, type=opt.type, choices=opt.choices)
    elif opt.switch:
        target.add_argument(opt.flag, dest=opt.dest, action="store_true", default=None, help=opt.help)
    elif opt.repeat:
        target.add_argument(opt.flag, dest=opt.dest, action="append", metavar=opt.metavar, help=opt.help)
    else:
        target.add_argument(
            opt.flag, dest=opt.dest, type=opt.type, choices=opt.choices, metavar=opt.metavar, help=_with_default(opt)
        )


def _with_default(opt) -> str:
    defaults = opt.default if isinstance(opt.default, dict) else None
    if opt.default is None or "default" in opt.help:
        return opt.help
    if defaults:
        shown = "; ".join(f"{c}: {_show(v)}" for c, v in defaults.items())
        return f"{opt.help} (default {shown})"
    return f"{opt.help} (default {_show(opt.default)})"


def _show(value) -> str:
    return ",".join(map(str, value)) if isinstance(value, list) else str(value)


def build_parser(argv=None) -> argparse.ArgumentParser:
    """The parser of every command, or, when ``argv`` starts with a command's name, of that
    command alone: the table holds hundreds of options, and a command line that names its
    command never reaches another's (each ``dhash`` step of a run, or each command a test
    parses, pays for one command's table, not all of them). Without a command's name (``dhash
    --help``, a misspelt command) every command is there, as the help and the error list them."""
    named = argv[0] if argv and argv[0] in COMMANDS else None
    parser = OptionParser(prog="dhash", description="Learn binary hash codes over chunked data on a Dask cluster.")
    sub = parser.add_subparsers(dest="command", required=True)
    for command, help_ in COMMANDS.items():
        if named not in (None, command):
            continue
        p = sub.add_parser(command, help=help_, description=help_)
        groups: dict = {}
        for opt in options_of(command).values():
            _add_option(p, groups, opt)
    return parser


def parse_args(argv) -> tuple[str, Values]:
    """(command, dest -> value of every option of the command): flags > --config TOML >
    the table's defaults; required options missing from both are a one-line error. The
    values know which options were given (flags or config) rather than defaulted
    (``Values.given``): an option given where it does nothing is refused before work."""

    args = vars(build_parser(argv).parse_args(argv))
    command = args.pop("command")
    config = load_config(args["config"], command) if args.get("config") else {}
    values, given = {}, set()
    for dest, opt in options_of(command).items():
        flag = args.get(dest)
        values[dest] = flag if flag is not None else config.get(dest, opt.default_for(command))
        if flag is not None or dest in config:
            given.add(dest)
        if values[dest] is None and command in opt.required:
            where = opt.dest if opt.positional else opt.flag
            raise InputError(
                f"dhash {command}: {where} is required (on the command line or as {opt.name} in "
                f"--config); see `dhash {command} --help`"
            )
    return command, Values(values, given)


# ------------------------------------------------------------------ running ----------


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever sys.stderr is now (``dhash run`` tees it into its log file), above
    any open progress bar (a training's per-iteration lines come while its bar is drawn)."""

    def emit(self, record):
        from dask_hashcodes.distributed.progress import write_line

        try:
            write_line(self.format(record))
        except Exception:  # noqa: BLE001 - logging reports its own failures, as StreamHandler does
            self.handleError(record)


def configure_logging(quiet: bool) -> None:
    """Per-iteration training figures from the library's loggers go to stderr: to whatever
    sys.stderr is when a record comes, so a command run in-process (a test, a notebook) leaves
    no handler writing to a stream it has closed; installed once, however often it is called."""
    logger = logging.getLogger("dask_hashcodes")
    if not any(getattr(h, "_dhash", False) for h in logger.handlers):
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("%(message)s"))
        handler._dhash = True
        logger.addHandler(handler)
    logger.setLevel(logging.WARNING if quiet else logging.INFO)


EXIT_TERMINATED = 143  # 128 + SIGTERM, what a shell reports for a process killed by TERM


class Terminated(BaseException):
    """SIGTERM, raised in the main thread so every ``atomic_output`` removes its temporary."""


def _raise_terminated(signum, frame):
    _hold_signals()
    raise Terminated()


def _raise_interrupted(signum, frame):
    _hold_signals()
    raise KeyboardInterrupt()


def _held(signum, frame):
    """A second Ctrl-C (or TERM) while the first one's unfinished outputs are removed: the
    clean-up goes on, and the one line already coming is all that is printed."""


def _hold_signals() -> None:
    signal.signal(signal.SIGINT, _held)
    signal.signal(signal.SIGTERM, _held)


def _release_signals() -> None:
    """After the interruption is reported: a further Ctrl-C cuts the cluster's close short."""
    signal.signal(signal.SIGINT, _raise_interrupted)
    signal.signal(signal.SIGTERM, _raise_terminated)


@contextlib.contextmanager
def _signals_clean_up():
    """SIGTERM and Ctrl-C (SIGINT) raise in the main thread, so every ``atomic_output``
    removes its temporary, and the first one holds further signals until it is reported."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    _release_signals()
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    with _signals_clean_up():
        try:
            return _main(argv)
        except KeyboardInterrupt:  # a second Ctrl-C after the first was reported
            return EXIT_INTERRUPTED
        except Terminated:
            return EXIT_TERMINATED


def _main(argv) -> int:
    client = None
    try:
        command, values = parse_args(argv)
        configure_logging(values["quiet"])
        if command == "run":
            refuse_unused(command, values, values.given)
            return _run(values)
        commands.check_before_work(command, values)
        if commands.needs_cluster(command, values):
            from dask_hashcodes.distributed.cluster import connect

            client = connect(
                values["scheduler"],
                workers=values["workers"],
                threads=values["threads"],
                quiet=values["quiet"],
                warm=commands.kernels_to_warm(command, values),
            )
        return commands.execute(command, values, checked=True)
    except Terminated:
        print("error: terminated by SIGTERM; unfinished outputs were removed", file=sys.stderr, flush=True)
        _release_signals()
        return EXIT_TERMINATED
    except InputError as exc:
        print(f"error: {commands.cli_message(exc)}", file=sys.stderr)
        return getattr(exc, "exit_code", EXIT_BAD_INPUT)
    except Exception as exc:
        # errors of the OS and object stores (credentials, missing buckets, unreachable
        # endpoints), raised here or on a worker, are bad input too; anything else is a bug
        from dask_hashcodes.storage.location import storage_error

        translated = storage_error(exc, urls=[a for a in argv if "://" in str(a)])
        if translated is None:
            raise
        print(f"error: {commands.cli_message(translated)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        _hold_signals()  # when Ctrl-C came inside a library that caught the signal itself
        print("error: interrupted", file=sys.stderr, flush=True)
        _release_signals()
        return EXIT_INTERRUPTED
    finally:
        if client is not None:
            from dask_hashcodes.distributed.cluster import disconnect

            # disconnect turns a failed close into one warning line, so the status stays the
            # job's; a second Ctrl-C while closing only cuts the close short (the local
            # cluster's processes end with this one), it prints no traceback
            with contextlib.suppress(KeyboardInterrupt):
                disconnect(client)


def _run(values) -> int:

    overrides = {}
    for item in values["variables"] or []:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise InputError(f"--set expects NAME=VALUE, got {item!r}")
        overrides[name.strip()] = toml_scalar(value)
    options = pick(
        values, "scheduler", "workers", "threads", "force", "dry_run", "date", "workdir", "quiet", "storage_options"
    )
    return run_pipeline(values["pipeline"], overrides=overrides, **options)
