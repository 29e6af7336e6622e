"""--config FILE.toml: a job's options in a file; flags given on the command line win.

Keys are the long option names (``top-percent`` or ``top_percent``); a [section] named
after the command may hold them too, so one file can configure several jobs. Keys, types
and tables are checked against the option table (pipeline/dask_hashcodes/cli/options.py; schema in
data_schemas/config.schema.json).
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from dask_hashcodes.cli.options import COMMANDS, STORAGE_TABLE, option_names, options_of
from dask_hashcodes.errors import InputError


def read_toml(path, what: str = "config file", hint: str = "give the path of a TOML file") -> dict:
    """A TOML file as a dict; a missing or malformed file is a one-line InputError."""
    file = Path(path)
    if not file.is_file():
        raise InputError(f"{what} {path} does not exist; {hint}")
    try:
        return tomllib.loads(file.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"{what} {path} is not valid TOML ({exc}); fix the syntax") from None


def check_values(command: str, table: dict, where, skip=()) -> dict:
    """dest -> typed value of a table of options for ``command`` (unknown keys refused);
    ``where(key)`` names the place in error messages."""
    valid = {dest: opt for dest, opt in options_of(command).items() if dest not in skip}
    values = {}
    for key, value in table.items():
        dest = key.replace("-", "_")
        if dest not in valid:
            raise InputError(
                f"{where(key)}: unknown key {key!r} for `dhash {command}`; valid keys: {option_names(valid)}"
            )
        values[dest] = valid[dest].parse(value, where(key))
    return values


def load_config(path: str, command: str) -> dict:
    """The options a config file sets for ``command``: top-level keys and the keys of its
    ``[command]`` table (other commands' tables are allowed and skipped; any other table is
    refused). ``[storage-options]`` becomes the storage-options value."""
    data = read_toml(path)
    section = data.pop(command, {})
    if not isinstance(section, dict):
        raise InputError(f"config file {path}: [{command}] must be a table of options")
    tables = {k for k, v in data.items() if isinstance(v, dict) and k != STORAGE_TABLE}
    unknown = sorted(t for t in tables if t not in COMMANDS)
    if unknown:
        raise InputError(
            f"config file {path}: unknown table(s) [{'], ['.join(unknown)}]; tables are named after "
            f"dhash commands ({', '.join(COMMANDS)}) or [{STORAGE_TABLE}]"
        )
    flat = {k: v for k, v in data.items() if k not in tables}
    flat.update(section)

    def where(key):
        return f"config file {path}" + (f": [{command}]" if key in section else "")

    return check_values(command, flat, where, skip=("config",))
