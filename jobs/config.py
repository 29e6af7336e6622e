"""--config FILE.toml: a job's options in a file; flags given on the command line win.

Keys are the long option names (``top-percent`` or ``top_percent``); a [section] named
after the command may hold them too, so one file can configure several jobs.
"""
from __future__ import annotations

import argparse
import tomllib
from pathlib import Path

from pipeline.errors import InputError


def read_toml(path, what: str = "config file", hint: str = "give the path of a TOML file") -> dict:
    """A TOML file as a dict; a missing or malformed file is a one-line InputError."""
    file = Path(path)
    if not file.is_file():
        raise InputError(f"{what} {path} does not exist; {hint}")
    try:
        return tomllib.loads(file.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"{what} {path} is not valid TOML ({exc}); fix the syntax") from None


def command_options(parser: argparse.ArgumentParser) -> dict:
    """dest -> action of the options a file may set for a command (not help/config)."""
    return {a.dest: a for a in parser._actions if a.dest not in ("help", "config")}


def option_names(options) -> str:
    return ", ".join(sorted(d.replace("_", "-") for d in options))


STORAGE_TABLE = "storage-options"


def load_config(path: str, command: str, parser: argparse.ArgumentParser, commands=()) -> dict:
    """The options a config file sets for ``command``: top-level keys and the keys of its
    ``[command]`` table (other commands' tables are allowed and skipped; any other table is
    refused). Every value is checked like the flag (jobs.options.toml_value)."""
    from jobs.options import toml_value
    data = read_toml(path)
    section = data.pop(command, {})
    if not isinstance(section, dict):
        raise InputError(f"config file {path}: [{command}] must be a table of options")
    tables = {k for k, v in data.items() if isinstance(v, dict) and k != STORAGE_TABLE}
    unknown = sorted(t for t in tables if t not in commands)
    if unknown:
        raise InputError(f"config file {path}: unknown table(s) [{'], ['.join(unknown)}]; tables are named after "
                         f"dhash commands ({', '.join(commands)}) or [{STORAGE_TABLE}]")
    flat = {k: v for k, v in data.items() if k not in tables}
    flat.update(section)
    valid = command_options(parser)
    values = {}
    for key, value in flat.items():
        dest = key.replace("-", "_")
        if dest not in valid:
            raise InputError(f"config file {path}: unknown key {key!r} for `dhash {command}`; valid keys: "
                             f"{option_names(valid)}")
        where = f"config file {path}" + (f": [{command}]" if key in section else "")
        values[dest] = toml_value(valid[dest], key, value, where)
    return values
