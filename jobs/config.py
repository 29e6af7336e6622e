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


def load_config(path: str, command: str, parser: argparse.ArgumentParser) -> dict:
    data = read_toml(path)
    section = data.pop(command, {})
    if not isinstance(section, dict):
        raise InputError(f"config file {path}: [{command}] must be a table of options")
    other_sections = {k for k, v in data.items() if isinstance(v, dict)}
    flat = {k: v for k, v in data.items() if k not in other_sections}
    flat.update(section)
    valid = command_options(parser)
    values = {}
    for key, value in flat.items():
        dest = key.replace("-", "_")
        if dest not in valid:
            raise InputError(f"config file {path}: unknown key {key!r} for `dhash {command}`; valid keys: "
                             f"{option_names(valid)}")
        action = valid[dest]
        if action.type is not None and not isinstance(value, bool):
            try:
                value = action.type(value if not isinstance(value, list) else ",".join(map(str, value)))
            except (TypeError, ValueError, InputError) as exc:
                raise InputError(f"config file {path}: bad value {value!r} for {key!r} ({exc})") from None
        values[dest] = value
    return values
